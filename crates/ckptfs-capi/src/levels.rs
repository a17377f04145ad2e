//! Which levels hold a file (issue #10, "which levels hold each file"):
//! `ckptfs_file_levels` and `ckptfs_file_partners`.
//!
//! The answer comes from the same source as `ckptfs ls -l` and `ckptfs status --json`
//! ([`LevelsView`] of `ckptfs-datasets`): the file's state in the store (local), the
//! record the node daemon keeps in the store at `/.ckptfs/levels.json` (partner
//! copies), and the manifest the drain agent publishes next to the drained files (PFS).
//! A partner copy or a drained copy counts only if it is of the current version of the
//! file (same inode, generation, size and mtime).

use crate::error::{CapiError, Result};
use crate::ffi::{at, call, copy_list_out, cstr, write_out};
use crate::types::{CkptfsLevels, LEVEL_LOCAL, LEVEL_PARTNER, LEVEL_PFS};
use ckptfs_datasets::levels_record::{LevelsView, Where};
use ckptfs_store::FileKind;
use std::ffi::{c_char, c_int};

/// The levels holding the current version of the file at (caller's) `path`.
fn where_of(path: &str, op: &str) -> Result<Where> {
    at(path, op, |r| {
        let st = r.store.stat(&r.path)?;
        if st.kind == FileKind::Dir {
            return Err(CapiError::new(
                libc::EISDIR,
                "a directory has no levels (ask for the files in it)",
            ));
        }
        Ok(LevelsView::load(&r.store).of(&r.path, &st))
    })
}

/// The C structure for `w`.
fn to_c(w: &Where) -> CkptfsLevels {
    let mut flags = 0;
    if w.local {
        flags |= LEVEL_LOCAL;
    }
    if !w.partners.is_empty() {
        flags |= LEVEL_PARTNER;
    }
    if w.pfs {
        flags |= LEVEL_PFS;
    }
    CkptfsLevels {
        flags,
        partners: w.partners.len() as u32,
        refused: w.refused.len() as u32,
        reserved: 0,
    }
}

/// Which levels hold the current version of the file `path`: fills `*out`. 0 or -errno.
///
/// # Safety
/// `path` is a C string; `out` is NULL or valid for writing a `ckptfs_levels`.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_file_levels(path: *const c_char, out: *mut CkptfsLevels) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        if out.is_null() {
            return Err(crate::ffi::efault("levels buffer"));
        }
        let l = to_c(&where_of(path, "levels of")?);
        // SAFETY: forwarded contract.
        unsafe { write_out(out, l, "levels buffer") }?;
        Ok(0)
    }) as c_int
}

/// The ids of the partner nodes holding a verified copy of the current version of the
/// file `path`, as consecutive NUL-terminated strings in `buf` (as `listxattr`):
/// returns the bytes of the list (0: no partner copy), or -errno (-ERANGE: `len` too
/// small; `buf` NULL with `len` 0 returns the size needed).
///
/// # Safety
/// `path` is a C string; `buf` is NULL or valid for writing `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_file_partners(path: *const c_char, buf: *mut c_char, len: usize) -> isize {
    call(|| {
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        let w = where_of(path, "partners of")?;
        // SAFETY: forwarded contract.
        unsafe { copy_list_out(&w.partners, buf, len, "the partner list") }
    }) as isize
}

/// The level ids holding a verified copy of the current version of the file `path`, in
/// read order (`local`, `partner:node3`, `pfs:/scratch/run`, other levels' ids), as
/// consecutive NUL-terminated strings in `buf` (as `listxattr`): returns the bytes of
/// the list (0: no level holds it), or -errno (-ERANGE: `len` too small; `buf` NULL with
/// `len` 0 returns the size needed).
///
/// # Safety
/// `path` is a C string; `buf` is NULL or valid for writing `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_file_level_ids(path: *const c_char, buf: *mut c_char, len: usize) -> isize {
    call(|| {
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        let w = where_of(path, "levels of")?;
        // SAFETY: forwarded contract.
        unsafe { copy_list_out(&w.levels, buf, len, "the level list") }
    }) as isize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::{ckptfs_destroy_store, ckptfs_mount, ckptfs_unmount};
    use crate::types::{CkptfsOptions, MOUNT_EXCL};
    use ckptfs_datasets::levels_record::{FileLevels, Identity, Levels};
    use ckptfs_store::{OpenFlags, Store};
    use std::ffi::CString;

    fn c(s: &str) -> CString {
        CString::new(s).unwrap()
    }

    /// A store mounted at `/lv-TAG`, unmounted and destroyed (with its agent status
    /// file) on drop.
    struct Mounted {
        prefix: String,
        name: String,
        store: Store,
    }

    impl Mounted {
        fn new(tag: &str) -> Mounted {
            let name = format!("capi-lv-{tag}-{}", std::process::id());
            let _ = Store::destroy(&name);
            let cname = c(&name);
            let opts = CkptfsOptions {
                size: std::mem::size_of::<CkptfsOptions>() as u32,
                flags: MOUNT_EXCL,
                store: cname.as_ptr(),
                mem_size: 4 << 20,
                chunk_size: 64 << 10,
                spill_dir: std::ptr::null(),
                spill_size: 0,
                max_files: 64,
            };
            let prefix = format!("/lv-{tag}");
            // SAFETY: valid C strings and options.
            assert_eq!(unsafe { ckptfs_mount(c(&prefix).as_ptr(), &opts) }, 0);
            let store = Store::attach(&ckptfs_store::StoreOptions {
                name: name.clone(),
                ..Default::default()
            })
            .unwrap();
            Mounted { prefix, name, store }
        }

        fn levels(&self, rel: &str) -> std::result::Result<CkptfsLevels, i32> {
            let mut out = CkptfsLevels::default();
            let p = c(&format!("{}{rel}", self.prefix));
            // SAFETY: a C string and a writable structure.
            match unsafe { ckptfs_file_levels(p.as_ptr(), &mut out) } {
                0 => Ok(out),
                e => Err(-e),
            }
        }

        fn level_ids(&self, rel: &str) -> std::result::Result<String, i32> {
            let p = c(&format!("{}{rel}", self.prefix));
            // SAFETY: a C string; NULL with 0 asks for the size.
            let need = unsafe { ckptfs_file_level_ids(p.as_ptr(), std::ptr::null_mut(), 0) };
            if need < 0 {
                return Err(-need as i32);
            }
            let mut buf = vec![0 as c_char; need as usize];
            // SAFETY: a C string and `need` writable bytes.
            let n = unsafe { ckptfs_file_level_ids(p.as_ptr(), buf.as_mut_ptr(), buf.len()) };
            if n < 0 {
                return Err(-n as i32);
            }
            if n > 0 {
                // SAFETY: as above, with one byte less than the list needs.
                let short = unsafe { ckptfs_file_level_ids(p.as_ptr(), buf.as_mut_ptr(), (n - 1) as usize) };
                assert_eq!(short, -(libc::ERANGE as isize));
            }
            Ok(buf[..n as usize].iter().map(|b| *b as u8 as char).collect())
        }

        fn partners(&self, rel: &str, len: usize) -> std::result::Result<Vec<u8>, i32> {
            let p = c(&format!("{}{rel}", self.prefix));
            let mut buf = vec![0x55 as c_char; len];
            let ptr = if len == 0 {
                std::ptr::null_mut()
            } else {
                buf.as_mut_ptr()
            };
            // SAFETY: a C string and `len` writable bytes (or NULL with 0).
            let n = unsafe { ckptfs_file_partners(p.as_ptr(), ptr, len) };
            if n < 0 {
                return Err(-n as i32);
            }
            Ok(buf[..(n as usize).min(len)].iter().map(|b| *b as u8).collect())
        }

        fn write(&self, path: &str, data: &[u8]) {
            let mut f = self.store.open(path, OpenFlags::CREATE, 0o644).unwrap();
            f.write_all(data).unwrap();
            f.close().unwrap();
        }
    }

    impl Drop for Mounted {
        fn drop(&mut self) {
            ckptfs_agent::status::remove_status(&self.name);
            // SAFETY: valid C strings.
            unsafe {
                ckptfs_unmount(c(&self.prefix).as_ptr());
                ckptfs_destroy_store(c(&self.name).as_ptr());
            }
        }
    }

    #[test]
    fn partner_copies_count_only_for_the_current_version() {
        let m = Mounted::new("rec");
        m.write("/a", b"version one");
        m.write("/b", b"b");
        let st = m.store.stat("/a").unwrap();
        // No record yet: local only.
        assert_eq!(
            m.levels("/a"),
            Ok(CkptfsLevels {
                flags: LEVEL_LOCAL,
                ..Default::default()
            })
        );
        assert_eq!(m.partners("/a", 0), Ok(vec![]));
        // The daemon's record: /a copied to node3 and node4, /b refused by node2.
        let mut rec = Levels {
            node: "node1".into(),
            ..Default::default()
        };
        rec.files.insert(
            "/a".into(),
            FileLevels {
                identity: Identity::of(&st),
                partners: vec!["node3".into(), "node4".into()],
                refused: Default::default(),
                generation: 1,
                stale: vec![],
                held: vec![],
            },
        );
        rec.files.insert(
            "/b".into(),
            FileLevels {
                identity: Identity::of(&m.store.stat("/b").unwrap()),
                partners: vec![],
                refused: [("node2".to_string(), "ENOSPC".to_string())].into(),
                generation: 2,
                stale: vec![],
                held: vec![],
            },
        );
        rec.save(&m.store).unwrap();
        assert_eq!(
            m.levels("/a"),
            Ok(CkptfsLevels {
                flags: LEVEL_LOCAL | LEVEL_PARTNER,
                partners: 2,
                refused: 0,
                reserved: 0
            })
        );
        assert_eq!(
            m.levels("/b"),
            Ok(CkptfsLevels {
                flags: LEVEL_LOCAL,
                partners: 0,
                refused: 1,
                reserved: 0
            })
        );
        // The partner list: its length, too small a buffer, the list.
        let p = c("/lv-rec/a");
        // SAFETY: a C string; NULL buffer with length 0 asks for the size.
        let needed = unsafe { ckptfs_file_partners(p.as_ptr(), std::ptr::null_mut(), 0) };
        assert_eq!(needed, 12);
        assert_eq!(m.partners("/a", 11), Err(libc::ERANGE));
        assert_eq!(m.partners("/a", 12), Ok(b"node3\0node4\0".to_vec()));
        // The level ids, in read order; another level's id from the record's `held`.
        assert_eq!(
            m.level_ids("/a"),
            Ok("local\0partner:node3\0partner:node4\0".into())
        );
        let mut rec2 = Levels::load(&m.store);
        rec2.files.get_mut("/b").unwrap().held = vec!["s3:bucket/run1".into(), "erasure:set1".into()];
        rec2.save(&m.store).unwrap();
        assert_eq!(
            m.level_ids("/b"),
            Ok("local\0erasure:set1\0s3:bucket/run1\0".into())
        );
        // Rewritten: the record is of the old version, so no partner copy.
        m.write("/a", b"version two, longer");
        assert_eq!(
            m.levels("/a"),
            Ok(CkptfsLevels {
                flags: LEVEL_LOCAL,
                ..Default::default()
            })
        );
        assert_eq!(m.partners("/a", 64), Ok(vec![]));
        assert_eq!(m.level_ids("/a"), Ok("local\0".into()));
        assert_eq!(m.level_ids("/none"), Err(libc::ENOENT));
        // Errors.
        assert_eq!(m.levels("/none"), Err(libc::ENOENT));
        assert_eq!(m.levels(""), Err(libc::EISDIR));
        // SAFETY: NULL output pointer, which the call refuses.
        let r = unsafe { ckptfs_file_levels(p.as_ptr(), std::ptr::null_mut()) };
        assert_eq!(r, -libc::EFAULT);
        // SAFETY: NULL buffer with a length, which the call refuses.
        let r = unsafe { ckptfs_file_partners(p.as_ptr(), std::ptr::null_mut(), 4) };
        assert_eq!(r, -libc::EFAULT as isize);
    }

    #[test]
    fn a_file_being_written_is_not_local() {
        let m = Mounted::new("wr");
        let mut f = m.store.open("/w", OpenFlags::CREATE, 0o644).unwrap();
        f.write_all(b"partial").unwrap();
        assert_eq!(m.levels("/w").map(|l| l.flags), Ok(0));
        f.close().unwrap();
        assert_eq!(m.levels("/w").map(|l| l.flags), Ok(LEVEL_LOCAL));
    }

    #[test]
    fn a_drained_file_is_on_the_pfs_until_rewritten() {
        let m = Mounted::new("pfs");
        let pfs = tempfile::tempdir().unwrap();
        m.store.mkdir("/d", 0o755).unwrap();
        m.write("/d/x", &[7u8; 100_000]);
        assert_eq!(m.levels("/d/x").map(|l| l.flags), Ok(LEVEL_LOCAL));
        let mut cfg = ckptfs_agent::AgentConfig::new(&[pfs.path().to_path_buf()]);
        cfg.node_id = "node1".into();
        let agent = ckptfs_agent::Agent::new(&m.store, cfg).unwrap();
        agent.run_once().unwrap();
        drop(agent);
        assert_eq!(std::fs::read(pfs.path().join("d/x")).unwrap(), vec![7u8; 100_000]);
        assert_eq!(m.levels("/d/x").map(|l| l.flags), Ok(LEVEL_LOCAL | LEVEL_PFS));
        // A new version is not on the PFS until drained again.
        m.write("/d/x", &[8u8; 50_000]);
        assert_eq!(m.levels("/d/x").map(|l| l.flags), Ok(LEVEL_LOCAL));
    }
}
