//! `#[repr(C)]` structures and constants shared with `include/ckptfs.h`. The header must
//! match these byte for byte; `tests/header.rs` compiles the header and compares sizes,
//! offsets and constant values.

use std::ffi::c_char;

/// `CKPTFS_MOUNT_ATTACH`: attach to an existing store only (ENOENT if there is none).
pub const MOUNT_ATTACH: u32 = 1;
/// `CKPTFS_MOUNT_EXCL`: create a new store (EEXIST if one of that name exists).
pub const MOUNT_EXCL: u32 = 2;
/// `CKPTFS_MOUNT_PRIVATE`: one segment per process (`NAME.RANK`).
pub const MOUNT_PRIVATE: u32 = 4;

/// `CKPTFS_KIND_FILE`.
pub const KIND_FILE: u32 = 1;
/// `CKPTFS_KIND_DIR`.
pub const KIND_DIR: u32 = 2;
/// `CKPTFS_KIND_SYMLINK`: a symbolic link (`ckptfs_readlink` reads its target).
pub const KIND_SYMLINK: u32 = 3;
/// `CKPTFS_KIND_SPECIAL`: a FIFO, socket or device node (the `S_IFMT` bits of `mode`
/// say which; it has no data in the store).
pub const KIND_SPECIAL: u32 = 4;

/// `CKPTFS_STATE_COMPLETE`: the last writer closed the file.
pub const STATE_COMPLETE: u32 = 0;
/// `CKPTFS_STATE_WRITING`: a live process has it open for writing.
pub const STATE_WRITING: u32 = 1;
/// `CKPTFS_STATE_INCOMPLETE`: a writer died with it open.
pub const STATE_INCOMPLETE: u32 = 2;
/// `CKPTFS_STATE_FAILED`: closed after a write to it failed (ENOSPC, I/O error).
pub const STATE_FAILED: u32 = 3;

/// `CKPTFS_CHUNK_MEMORY`: the chunk is in the data region, `offset` from its base.
pub const CHUNK_MEMORY: u32 = 0;
/// `CKPTFS_CHUNK_SPILL`: the chunk is in the spill file, at byte `offset`.
pub const CHUNK_SPILL: u32 = 1;

/// `CKPTFS_LEVEL_LOCAL`: the file is complete in this node's store.
pub const LEVEL_LOCAL: u32 = 1;
/// `CKPTFS_LEVEL_PARTNER`: at least one partner node holds a verified copy of this version.
pub const LEVEL_PARTNER: u32 = 2;
/// `CKPTFS_LEVEL_PFS`: this version was drained to the parallel file system.
pub const LEVEL_PFS: u32 = 4;

/// Most descriptors one process can hold open at once (EMFILE beyond).
pub const MAX_DESCRIPTORS: usize = 1 << 16;

/// `ckptfs_options`: how `ckptfs_mount` finds or creates its store. Zero/NULL fields take
/// the existing segment's setting, or the default when creating.
#[repr(C)]
#[derive(Debug)]
pub struct CkptfsOptions {
    /// Must be `sizeof(ckptfs_options)` (set by `CKPTFS_OPTIONS_INIT`).
    pub size: u32,
    /// `CKPTFS_MOUNT_*` bits.
    pub flags: u32,
    /// Store name; NULL or "" = `u<UID>`.
    pub store: *const c_char,
    /// Memory data region size in bytes.
    pub mem_size: u64,
    /// Chunk size in bytes (power of two, 64 KiB .. 64 MiB).
    pub chunk_size: u64,
    /// Directory of the spill file; NULL = no spill file.
    pub spill_dir: *const c_char,
    /// Spill file size in bytes.
    pub spill_size: u64,
    /// Maximum files and directories (root included).
    pub max_files: u32,
}

/// `struct ckptfs_stat`: attributes of a file or directory.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct CkptfsStat {
    /// Inode number (the mount's root is 1).
    pub ino: u64,
    /// Size in bytes (directories: 0).
    pub size: u64,
    /// Bytes allocated (chunks x chunk size).
    pub allocated: u64,
    /// Modification time, ns since the epoch.
    pub mtime_ns: u64,
    /// Status change time, ns since the epoch.
    pub ctime_ns: u64,
    /// File type and permission bits, as `st_mode` (S_IFREG or S_IFDIR | 0777 bits).
    pub mode: u32,
    /// `CKPTFS_KIND_*`.
    pub kind: u32,
    /// `CKPTFS_STATE_*`.
    pub state: u32,
    /// Chunks allocated.
    pub chunks: u32,
    /// Chunks of those in the spill file.
    pub spill_chunks: u32,
    /// Generation of the inode number (bumped when the number is reused).
    pub generation: u32,
}

/// `ckptfs_chunk_meta`: one chunk of a file (CRUISE `get_chunk_meta_list`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct CkptfsChunkMeta {
    /// Logical index: the chunk holds file bytes from `logical * chunk_size`.
    pub logical: u32,
    /// `CKPTFS_CHUNK_MEMORY` or `CKPTFS_CHUNK_SPILL`.
    pub location: u32,
    /// Byte offset from the data region base (memory) or in the spill file (spill).
    pub offset: u64,
    /// Bytes of file data in this chunk (up to the file size).
    pub length: u64,
    /// Bytes written from the chunk start, covered by `crc32c`; bytes of `length` past
    /// it read as zeros.
    pub written: u64,
    /// CRC32C (Castagnoli) of the first `written` bytes.
    pub crc32c: u32,
    /// 1 if `crc32c` is current, 0 while the chunk is being overwritten.
    pub crc_valid: u32,
    /// Physical chunk number in the store.
    pub chunk_id: u32,
}

/// `ckptfs_dirent`: one directory entry.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CkptfsDirent {
    /// Inode number.
    pub ino: u64,
    /// `CKPTFS_KIND_*`.
    pub kind: u32,
    /// Length of `name` in bytes (without the NUL).
    pub namelen: u32,
    /// NUL-terminated name.
    pub name: [c_char; 256],
}

/// `ckptfs_levels`: the levels holding the current version of a file.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CkptfsLevels {
    /// `CKPTFS_LEVEL_*` bits.
    pub flags: u32,
    /// Partner nodes holding a verified copy of this version (`ckptfs_file_partners`
    /// names them).
    pub partners: u32,
    /// Partners that refused a copy of it (full: ENOSPC), i.e. "no partner copy" there.
    pub refused: u32,
    /// Always 0.
    pub reserved: u32,
}

#[cfg(test)]
mod header_sync {
    //! The header must describe the same ABI as the Rust: compile it (pedantic C99 and
    //! C++11), print every struct size, field offset and constant from C, and compare;
    //! and declare exactly the functions this crate exports.
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};
    use std::mem::{offset_of, size_of};
    use std::path::Path;
    use std::process::Command;

    macro_rules! layout {
        ($out:ident, $c:literal, $t:ty, [$($f:ident),*]) => {
            $out.insert(format!("sizeof {}", $c), size_of::<$t>() as i64);
            $( $out.insert(format!("offsetof {}.{}", $c, stringify!($f)), offset_of!($t, $f) as i64); )*
        };
    }

    fn rust_side() -> BTreeMap<String, i64> {
        let mut m = BTreeMap::new();
        layout!(
            m,
            "ckptfs_options",
            CkptfsOptions,
            [size, flags, store, mem_size, chunk_size, spill_dir, spill_size, max_files]
        );
        layout!(
            m,
            "struct ckptfs_stat",
            CkptfsStat,
            [
                ino,
                size,
                allocated,
                mtime_ns,
                ctime_ns,
                mode,
                kind,
                state,
                chunks,
                spill_chunks,
                generation
            ]
        );
        layout!(
            m,
            "ckptfs_chunk_meta",
            CkptfsChunkMeta,
            [logical, location, offset, length, written, crc32c, crc_valid, chunk_id]
        );
        layout!(m, "ckptfs_dirent", CkptfsDirent, [ino, kind, namelen, name]);
        layout!(
            m,
            "ckptfs_levels",
            CkptfsLevels,
            [flags, partners, refused, reserved]
        );
        for (k, v) in [
            ("CKPTFS_MOUNT_ATTACH", MOUNT_ATTACH),
            ("CKPTFS_MOUNT_EXCL", MOUNT_EXCL),
            ("CKPTFS_MOUNT_PRIVATE", MOUNT_PRIVATE),
            ("CKPTFS_KIND_FILE", KIND_FILE),
            ("CKPTFS_KIND_DIR", KIND_DIR),
            ("CKPTFS_KIND_SYMLINK", KIND_SYMLINK),
            ("CKPTFS_KIND_SPECIAL", KIND_SPECIAL),
            ("CKPTFS_STATE_COMPLETE", STATE_COMPLETE),
            ("CKPTFS_STATE_WRITING", STATE_WRITING),
            ("CKPTFS_STATE_INCOMPLETE", STATE_INCOMPLETE),
            ("CKPTFS_CHUNK_MEMORY", CHUNK_MEMORY),
            ("CKPTFS_CHUNK_SPILL", CHUNK_SPILL),
            ("CKPTFS_LEVEL_LOCAL", LEVEL_LOCAL),
            ("CKPTFS_LEVEL_PARTNER", LEVEL_PARTNER),
            ("CKPTFS_LEVEL_PFS", LEVEL_PFS),
            ("CKPTFS_NAME_MAX", ckptfs_store::layout::NAME_MAX as u32),
            ("CKPTFS_PATH_MAX", ckptfs_store::layout::PATH_MAX as u32),
        ] {
            m.insert(format!("const {k}"), v as i64);
        }
        m
    }

    fn include_dir() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include")
    }

    fn c_program(rust: &BTreeMap<String, i64>) -> String {
        let mut body = String::new();
        for k in rust.keys() {
            let (kind, what) = k.split_once(' ').unwrap();
            let expr = match kind {
                "sizeof" => format!("(long long)sizeof({what})"),
                "offsetof" => {
                    let (t, f) = what.rsplit_once('.').unwrap();
                    format!("(long long)offsetof({t}, {f})")
                }
                _ => format!("(long long)({what})"),
            };
            body += &format!("    printf(\"%s=%lld\\n\", \"{k}\", {expr});\n");
        }
        format!(
            "#include \"ckptfs.h\"\n#include <stddef.h>\n#include <stdio.h>\n\
             int main(void) {{\n{body}    printf(\"version=%s\\n\", CKPTFS_VERSION);\n    return 0;\n}}\n"
        )
    }

    fn compile_and_run(compiler: &str, std: &str, src: &Path, dir: &Path) -> BTreeMap<String, String> {
        let exe = dir.join(format!("sync-{compiler}"));
        let out = Command::new(compiler)
            .args([std, "-pedantic", "-Wall", "-Wextra", "-Werror", "-I"])
            .arg(include_dir())
            .arg(src)
            .arg("-o")
            .arg(&exe)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {compiler} (the C ABI tests need a C compiler): {e}"));
        assert!(
            out.status.success(),
            "{compiler} {std} rejected include/ckptfs.h:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let run = Command::new(&exe).output().unwrap();
        String::from_utf8(run.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn header_layout_and_constants_match() {
        let rust = rust_side();
        let dir = tempfile::tempdir().unwrap();
        let prog = c_program(&rust);
        for (compiler, std, file) in [("cc", "-std=c99", "sync.c"), ("c++", "-std=c++11", "sync.cpp")] {
            let src = dir.path().join(file);
            std::fs::write(&src, &prog).unwrap();
            let c = compile_and_run(compiler, std, &src, dir.path());
            for (k, v) in &rust {
                assert_eq!(
                    c.get(k).map(String::as_str),
                    Some(v.to_string().as_str()),
                    "{compiler}: {k}"
                );
            }
            assert_eq!(c["version"], env!("CARGO_PKG_VERSION"), "CKPTFS_VERSION");
        }
    }

    #[test]
    fn header_declares_exactly_the_exported_functions() {
        let header = std::fs::read_to_string(include_dir().join("ckptfs.h")).unwrap();
        // Drop comments, which mention calls like ckptfs_lseek(fd, 0, SEEK_SET).
        let mut code = String::new();
        let mut rest = header.as_str();
        while let Some(i) = rest.find("/*") {
            code += &rest[..i];
            rest = &rest[i + 2..];
            rest = &rest[rest.find("*/").map_or(rest.len(), |j| j + 2)..];
        }
        code += rest;
        let declared = names_before_paren(&code, "ckptfs_");
        let src = concat!(
            include_str!("ffi/mod.rs"),
            include_str!("ffi/files.rs"),
            include_str!("ffi/namespace.rs"),
            include_str!("ffi/region.rs"),
            include_str!("ffi/pool.rs"),
            include_str!("datasets.rs"),
            include_str!("levels.rs"),
        );
        let exported: BTreeSet<String> = src
            .split("extern \"C\" fn ")
            .skip(1)
            .filter_map(|s| s.split('(').next())
            .map(str::to_string)
            .collect();
        assert_eq!(declared, exported);
    }

    /// Identifiers starting with `prefix` directly followed by `(`.
    fn names_before_paren(code: &str, prefix: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let mut s = code;
        while let Some(i) = s.find(prefix) {
            let tail = &s[i..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            if tail[end..].starts_with('(') {
                out.insert(tail[..end].to_string());
            }
            s = &tail[end..];
        }
        out
    }
}
