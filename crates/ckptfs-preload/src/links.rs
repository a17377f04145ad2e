//! Symbolic links inside the store. The store never follows them; the shim does, as the
//! kernel would, but only when a store call fails in the way a symlink makes it fail
//! (ENOTDIR: a symlink in the middle of the path; ELOOP: `open` or `stat` of a symlink
//! they should follow), so that paths without symlinks cost nothing extra. Then the path
//! is walked one component at a time, each symlink replaced by its target (a relative
//! target taken from the link's directory, an absolute one from the host's root), at
//! most [`MAXSYMLINKS`] times (then ELOOP, as Linux). A target that leaves the store
//! (an absolute path elsewhere, or `..` above a mount) is handed to the kernel.
//!
//! Limitation (documented in docs/preload.md): a path's `..` components are resolved
//! lexically before the store sees it (as for every store path), so `link/..` is the
//! directory holding `link`, not the parent of its target.

use crate::paths;
use crate::state::{self, se, R};
use ckptfs_store::FileKind;
use std::collections::VecDeque;
use std::ffi::CString;

/// Most symlinks followed while resolving one path (Linux's MAXSYMLINKS).
pub const MAXSYMLINKS: usize = 40;

/// Where a path leads once its symlinks are followed.
#[derive(Debug, PartialEq, Eq)]
pub enum Followed {
    /// A store path (mount index, store path).
    Store(usize, String),
    /// A host path outside every mount: the kernel resolves the rest.
    Host(CString),
}

fn comps(p: &str) -> VecDeque<String> {
    p.split('/')
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect()
}

/// Follow the symlinks of store path `p` (of mount `m`): every component but the last,
/// and the last too when `follow_last`. `Ok(None)` when none was a symlink (the caller's
/// error stands).
pub fn follow(m: usize, p: &str, follow_last: bool) -> R<Option<Followed>> {
    let s = state::store()?;
    let mounts = state::mounts();
    let mut mount = m;
    let mut rest = comps(p);
    let mut done = String::new();
    let mut hops = 0;
    while let Some(c) = rest.pop_front() {
        let cand = format!("{done}/{c}");
        let last = rest.is_empty();
        let st = match s.stat(&cand) {
            Ok(st) => st,
            Err(_) => {
                // Missing or damaged: the store call on the result will say so.
                done = cand;
                break;
            }
        };
        if st.kind != FileKind::Symlink || (last && !follow_last) {
            done = cand;
            continue;
        }
        hops += 1;
        if hops > MAXSYMLINKS {
            return Err(libc::ELOOP);
        }
        let t = s.readlink(&cand).map_err(se)?;
        let t = String::from_utf8(t).map_err(|_| libc::EILSEQ)?;
        let mut full = if t.starts_with('/') {
            t
        } else {
            format!("{}{done}/{t}", mounts[mount])
        };
        for r in &rest {
            full.push('/');
            full.push_str(r);
        }
        let full = paths::normalize(&full);
        match paths::match_mount(mounts, &full) {
            Some((m2, p2)) => {
                mount = m2;
                rest = comps(&p2);
                done.clear();
            }
            None => {
                return CString::new(full)
                    .map(|c| Some(Followed::Host(c)))
                    .map_err(|_| libc::EINVAL)
            }
        }
    }
    if hops == 0 {
        return Ok(None);
    }
    for r in rest {
        done.push('/');
        done.push_str(&r);
    }
    if done.is_empty() {
        done.push('/');
    }
    Ok(Some(Followed::Store(mount, done)))
}

/// symlink(2) in the store: `target` is kept as given (not checked to exist).
pub fn symlink(target: &[u8], path: &str) -> R<()> {
    if target.len() >= paths::PATH_MAX {
        return Err(libc::ENAMETOOLONG);
    }
    if paths::normalize(path).split('/').any(|c| c.len() > 255) {
        return Err(libc::ENAMETOOLONG);
    }
    let s = state::store()?;
    s.symlink(target, path).map_err(se)?;
    Ok(())
}

/// readlink(2) in the store: the target's first `buf.len()` bytes (no NUL added);
/// EINVAL for anything but a symlink or an empty buffer.
pub fn readlink(path: &str, buf: &mut [u8]) -> R<isize> {
    if buf.is_empty() {
        return Err(libc::EINVAL);
    }
    let t = state::store()?.readlink(path).map_err(se)?;
    let n = t.len().min(buf.len());
    buf[..n].copy_from_slice(&t[..n]);
    Ok(n as isize)
}

/// rename(2) retried after ENOTDIR with the symlinks in the directories of both paths
/// followed (neither last component is: rename acts on links themselves). ENOTDIR when
/// neither path holds one; EXDEV when one leads out of the store.
pub fn rename_followed(ma: usize, a: &str, mb: usize, b: &str, flags: u32) -> R<()> {
    let fa = follow(ma, a, false)?;
    let fb = follow(mb, b, false)?;
    if fa.is_none() && fb.is_none() {
        return Err(libc::ENOTDIR);
    }
    let pick = |f: Option<Followed>, p: &str| match f {
        None => Ok(p.to_string()),
        Some(Followed::Store(_, p)) => Ok(p),
        Some(Followed::Host(_)) => Err(libc::EXDEV),
    };
    crate::ops::rename(&pick(fa, a)?, &pick(fb, b)?, flags)
}
