//! Compiles the MPI glue (csrc/mpi_glue.c) with the MPI compiler wrapper (`$MPICC`, else
//! `mpicc`), so that it sees the program's mpi.h, and links libmpi the way the wrapper
//! says (`mpicc --showme:link`, Open MPI; `mpicc -link_info`, MPICH).
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let mpicc = std::env::var("MPICC").unwrap_or_else(|_| "mpicc".into());
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let src = "csrc/mpi_glue.c";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=MPICC");
    let obj = out.join("mpi_glue.o");
    let st = Command::new(&mpicc)
        .args(["-c", "-fPIC", "-O2", "-Wall", "-Werror", src, "-o"])
        .arg(&obj)
        .status()
        .unwrap_or_else(|e| panic!("{mpicc}: {e} (install an MPI: scripts/setup-scr.sh)"));
    assert!(st.success(), "{mpicc} failed on {src}");
    let lib = out.join("libckmpi_glue.a");
    let _ = std::fs::remove_file(&lib);
    let st = Command::new("ar")
        .arg("crs")
        .arg(&lib)
        .arg(&obj)
        .status()
        .expect("ar");
    assert!(st.success(), "ar failed");
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=ckmpi_glue");
    let link = Command::new(&mpicc)
        .arg("--showme:link")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .or_else(|| {
            Command::new(&mpicc)
                .arg("-link_info")
                .output()
                .ok()
                .filter(|o| o.status.success())
        })
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let mut linked = false;
    for w in link.split_whitespace() {
        if let Some(d) = w.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={d}");
        } else if let Some(l) = w.strip_prefix("-l") {
            println!("cargo:rustc-link-lib=dylib={l}");
            linked |= l.starts_with("mpi");
        }
    }
    if !linked {
        println!("cargo:rustc-link-lib=dylib=mpi");
    }
}
