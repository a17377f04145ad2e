//! Compiles `SCR_Configf` (csrc/configf.c: a C variadic function, which stable Rust
//! cannot define) and exports it from libscr.so.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    println!("cargo:rerun-if-changed=csrc/configf.c");
    let obj = out.join("configf.o");
    let st = Command::new(&cc)
        .args(["-c", "-fPIC", "-O2", "-Wall", "-Werror", "csrc/configf.c", "-o"])
        .arg(&obj)
        .status()
        .unwrap_or_else(|e| panic!("{cc}: {e}"));
    assert!(st.success(), "{cc} failed on csrc/configf.c");
    // Linked as an object (not an archive member) so that it is always in the library,
    // and exported past rustc's version script.
    println!("cargo:rustc-cdylib-link-arg={}", obj.display());
    let vs = out.join("configf.ver");
    std::fs::write(&vs, "{ global: SCR_Configf; };\n").expect("version script");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        vs.display()
    );
}
