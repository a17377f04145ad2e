//! Just enough ELF64 reading for `ckptfs check-binary`: the dynamic symbol table
//! (imported and defined names) and the dynamic section's `DT_NEEDED`, `DT_RPATH` and
//! `DT_RUNPATH`, to follow a program into the shared libraries it loads the way the
//! dynamic loader finds them (without running anything, unlike `ldd`).

use anyhow::{Context, Result};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// What `check-binary` needs from one ELF file.
#[derive(Debug, Default)]
pub struct ElfInfo {
    /// Undefined dynamic symbols (version suffix stripped by the caller).
    pub imported: BTreeSet<String>,
    /// Defined dynamic symbols.
    pub defined: BTreeSet<String>,
    /// `DT_NEEDED` entries in order.
    pub needed: Vec<String>,
    /// `DT_RPATH` (searched before `LD_LIBRARY_PATH`, only without a `DT_RUNPATH`).
    pub rpath: Vec<String>,
    /// `DT_RUNPATH`.
    pub runpath: Vec<String>,
}

/// The dynamic symbols of an ELF64 little-endian file: (imported, defined).
pub fn elf_dynamic_symbols(path: &Path) -> Result<(BTreeSet<String>, BTreeSet<String>)> {
    let i = read_elf(path)?;
    Ok((i.imported, i.defined))
}

/// Read the dynamic symbols and dynamic section of an ELF64 little-endian file.
pub fn read_elf(path: &Path) -> Result<ElfInfo> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let bad = || anyhow::anyhow!("{}: not a 64-bit little-endian ELF file", path.display());
    if data.len() < 64 || &data[..4] != b"\x7fELF" || data[4] != 2 || data[5] != 1 {
        return Err(bad());
    }
    let u16_at = |o: usize| {
        data.get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
    };
    let u32_at = |o: usize| {
        data.get(o..o + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize)
    };
    let u64_at = |o: usize| {
        data.get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize)
    };
    let shoff = u64_at(0x28).ok_or_else(bad)?;
    let shentsize = u16_at(0x3a).ok_or_else(bad)?;
    let shnum = u16_at(0x3c).ok_or_else(bad)?;
    let sect = |i: usize| -> Option<(u32, usize, usize, usize, usize)> {
        let b = shoff.checked_add(i.checked_mul(shentsize)?)?;
        // (type, offset, size, link, entsize)
        Some((
            u32_at(b + 4)? as u32,
            u64_at(b + 0x18)?,
            u64_at(b + 0x20)?,
            u32_at(b + 0x28)?,
            u64_at(b + 0x38)?,
        ))
    };
    let cstr = |tab: &[u8], at: usize| -> String {
        let at = at.min(tab.len());
        let end = tab[at..].iter().position(|&c| c == 0).unwrap_or(0);
        String::from_utf8_lossy(&tab[at..at + end]).to_string()
    };
    let mut out = ElfInfo::default();
    for i in 0..shnum {
        let Some((ty, off, size, link, ent)) = sect(i) else {
            continue;
        };
        // SHT_DYNSYM (11) and SHT_DYNAMIC (6) only.
        if !(ty == 11 || ty == 6) || ent == 0 {
            continue;
        }
        let Some((_, stroff, strsize, _, _)) = sect(link) else {
            continue;
        };
        let strtab = data
            .get(stroff..stroff.checked_add(strsize).ok_or_else(bad)?)
            .ok_or_else(bad)?;
        if ty == 6 {
            for k in 0..size / ent {
                let e = off + k * ent;
                let (Some(tag), Some(val)) = (u64_at(e), u64_at(e + 8)) else {
                    break;
                };
                match tag {
                    0 => break,
                    1 => out.needed.push(cstr(strtab, val)),
                    15 => out.rpath.extend(cstr(strtab, val).split(':').map(str::to_string)),
                    29 => out
                        .runpath
                        .extend(cstr(strtab, val).split(':').map(str::to_string)),
                    _ => {}
                }
            }
            continue;
        }
        for k in 1..size / ent {
            let s = off + k * ent;
            let (Some(name), Some(shndx)) = (u32_at(s), u16_at(s + 6)) else {
                break;
            };
            let info = data.get(s + 4).copied().unwrap_or(0);
            if info >> 4 == 0 && shndx != 0 {
                continue; // local
            }
            let n = cstr(strtab, name);
            if n.is_empty() {
                continue;
            }
            if shndx == 0 {
                out.imported.insert(n);
            } else {
                out.defined.insert(n);
            }
        }
    }
    Ok(out)
}

/// The C library's own objects: they implement the calls rather than import them.
fn is_libc(name: &str) -> bool {
    [
        "libc.so",
        "ld-linux",
        "libpthread.so",
        "libdl.so",
        "librt.so",
        "libm.so",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// Directories from `/etc/ld.so.conf` (and the files it includes), then the defaults.
fn system_dirs() -> Vec<PathBuf> {
    fn conf(p: &Path, out: &mut Vec<PathBuf>, depth: u32) {
        let Ok(text) = std::fs::read_to_string(p) else {
            return;
        };
        for line in text.lines().map(str::trim) {
            if let Some(pat) = line.strip_prefix("include ") {
                let pat = Path::new(pat.trim());
                let (Some(dir), Some(name)) = (pat.parent(), pat.file_name()) else {
                    continue;
                };
                let suffix = name.to_string_lossy().trim_start_matches('*').to_string();
                let Ok(rd) = std::fs::read_dir(dir) else { continue };
                let mut files: Vec<PathBuf> = rd
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|f| f.to_string_lossy().ends_with(&suffix))
                    .collect();
                files.sort();
                if depth < 4 {
                    for f in files {
                        conf(&f, out, depth + 1);
                    }
                }
            } else if line.starts_with('/') {
                out.push(PathBuf::from(line));
            }
        }
    }
    let mut v = Vec::new();
    conf(Path::new("/etc/ld.so.conf"), &mut v, 0);
    for d in [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
    ] {
        v.push(PathBuf::from(d));
    }
    v
}

/// Find `name` for the object `from` the way the dynamic loader does (RPATH without
/// RUNPATH, LD_LIBRARY_PATH, RUNPATH, ld.so.conf, default directories; `$ORIGIN`).
fn resolve(name: &str, from: &Path, info: &ElfInfo, sys: &[PathBuf]) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name)).filter(|p| p.is_file());
    }
    let origin = from
        .parent()
        .unwrap_or(Path::new("/"))
        .to_string_lossy()
        .to_string();
    let expand = |d: &str| PathBuf::from(d.replace("$ORIGIN", &origin).replace("${ORIGIN}", &origin));
    let mut dirs: Vec<PathBuf> = Vec::new();
    if info.runpath.is_empty() {
        dirs.extend(info.rpath.iter().map(|d| expand(d)));
    }
    if let Some(l) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&l));
    }
    dirs.extend(info.runpath.iter().map(|d| expand(d)));
    dirs.extend(sys.iter().cloned());
    dirs.into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file() && read_elf(p).is_ok())
}

/// The shared libraries `prog` loads (transitively, breadth first, each once), without
/// the C library's own objects. Names that cannot be found are returned in the second
/// list.
pub fn libraries(prog: &Path) -> Result<(Vec<PathBuf>, Vec<String>)> {
    let sys = system_dirs();
    let mut found: Vec<PathBuf> = Vec::new();
    let mut missing: Vec<String> = Vec::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut queue: std::collections::VecDeque<(PathBuf, ElfInfo)> = Default::default();
    queue.push_back((prog.to_path_buf(), read_elf(prog)?));
    while let Some((path, info)) = queue.pop_front() {
        for n in &info.needed {
            if is_libc(n) || !seen.insert(n.clone()) {
                continue;
            }
            match resolve(n, &path, &info, &sys) {
                Some(p) => {
                    let i = read_elf(&p)?;
                    found.push(p.clone());
                    queue.push_back((p, i));
                }
                None => missing.push(n.clone()),
            }
        }
    }
    Ok((found, missing))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_needed_libraries_of_a_system_binary() {
        // python3 (or any dynamically linked program with a non-libc library) loads
        // libraries beyond libc; `ls` at least needs libselinux on Debian.
        let ls = ["/usr/bin/ls", "/bin/ls"]
            .iter()
            .map(Path::new)
            .find(|p| p.is_file())
            .expect("ls");
        let info = read_elf(ls).unwrap();
        assert!(info.needed.iter().any(|n| n.starts_with("libc.so")), "{info:?}");
        let (libs, missing) = libraries(ls).unwrap();
        assert!(missing.is_empty(), "{missing:?}");
        assert!(libs
            .iter()
            .all(|l| !is_libc(&l.file_name().unwrap().to_string_lossy())));
        for l in &libs {
            assert!(read_elf(l).is_ok(), "{}", l.display());
        }
    }

    #[test]
    fn a_cpp_program_s_remove_is_found_in_libstdcxx() {
        // std::filesystem::remove_all calls remove() from libstdc++, not from the
        // program: check-binary must look there (issue 12: it reported "0 not covered").
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("p.cpp");
        std::fs::write(
            &src,
            "#include <filesystem>\nint main(int, char **v) { return std::filesystem::remove_all(v[1]) > 0; }\n",
        )
        .unwrap();
        let exe = d.path().join("p");
        let st = std::process::Command::new("g++")
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .status()
            .expect("g++ (scripts/setup-preload.sh installs it)");
        assert!(st.success());
        let (imports, _) = elf_dynamic_symbols(&exe).unwrap();
        assert!(!imports.iter().any(|s| s.starts_with("remove@") || s == "remove"));
        let (libs, missing) = libraries(&exe).unwrap();
        assert!(missing.is_empty(), "{missing:?}");
        let cxx = libs
            .iter()
            .find(|l| l.file_name().unwrap().to_string_lossy().starts_with("libstdc++"))
            .expect("libstdc++ among the libraries");
        let (imports, _) = elf_dynamic_symbols(cxx).unwrap();
        assert!(
            imports.iter().any(|s| s.split('@').next() == Some("remove")),
            "{imports:?}"
        );
    }
}
