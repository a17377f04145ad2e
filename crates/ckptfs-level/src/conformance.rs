//! The conformance suite every level implementation runs in its tests: what the
//! [`Level`] contract promises, checked through the interface only.
//!
//! ```ignore
//! let h = ckptfs_level::conformance::Harness::new(&my_level, 64 << 10, "/conformance");
//! ckptfs_level::conformance::run(&h).unwrap();
//! ```
//!
//! Checks (each names itself in the error): put → list/stat/get give back the bytes and
//! the description; `verify` passes, and refuses another version; an uncommitted put
//! is never visible and leaves nothing behind; a copy put with CRCs that do not match
//! its bytes is never returned as that version; a rewrite replaces the version;
//! `delete` of another version leaves the copy, of its own version removes it; `holds`
//! answers per file; empty files and files of one byte past a chunk boundary; copies
//! damaged on the level's own storage (when the harness can damage them) are refused
//! on read. The mover's own suite (resend, throttle, progress) runs against any level in
//! `mover`'s tests.
//!
//! **Read-only levels** (a level written by other means than `put`: an erasure set's
//! rebuilt member, written by encoding) run [`run_read_only`] with a
//! [`ReadOnlyHarness`]: the harness fills a fresh level with the suite's files by the
//! level's own means, and the suite keeps every check that applies: list/stat/get give
//! back the bytes and the description, `verify` passes and refuses another version,
//! `holds` answers per file, empty files and files of one byte past a chunk boundary,
//! a path never filled is not found (ENOENT); `put` and `delete` are refused with EROFS
//! or ENOTSUP and change nothing (no new path visible, every file still read back
//! whole); damage on the level's storage (when the harness can damage it, on a level
//! filled afresh so that nothing read before is kept) is refused on read and by
//! `verify`, never served.

use crate::mem::{stored_of, BufReader};
use crate::{copy_reader, Level, LevelError, Stored};

/// Flips one byte of a path's copy on a level's own storage.
pub type DamageFn<'a> = &'a dyn Fn(&str) -> std::io::Result<()>;

/// A level under test and what the suite may do to it.
pub struct Harness<'a> {
    /// The level.
    pub level: &'a dyn Level,
    /// Chunk size of the source copies the suite writes (the level may keep its own).
    pub chunk_size: u64,
    /// A directory (store path) of its own the suite may write under.
    pub prefix: String,
    /// Flip one byte of the copy of a path on the level's own storage, if the harness
    /// can (then a read of it must be refused).
    pub damage: Option<DamageFn<'a>>,
}

impl<'a> Harness<'a> {
    /// A harness without damage.
    pub fn new(level: &'a dyn Level, chunk_size: u64, prefix: &str) -> Harness<'a> {
        Harness {
            level,
            chunk_size,
            prefix: prefix.trim_end_matches('/').to_string(),
            damage: None,
        }
    }
}

fn data(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

/// Fills a fresh read-only level with exactly these files (path, bytes) by the level's
/// own means, and gives it.
pub type FillFn<'a> = &'a dyn Fn(&[(String, Vec<u8>)]) -> Result<Box<dyn Level + 'a>, String>;

/// A read-only level under test (see the module documentation).
pub struct ReadOnlyHarness<'a> {
    /// Makes a fresh level holding the given files.
    pub fill: FillFn<'a>,
    /// Chunk size of the files' source copies.
    pub chunk_size: u64,
    /// The directory (store path) the suite's files are under.
    pub prefix: String,
    /// Flip one byte of the storage behind a path of the level filled last, if the
    /// harness can (then a read of it must be refused).
    pub damage: Option<DamageFn<'a>>,
}

/// Put `bytes` as `path` through the level's writer (from a [`BufReader`]).
pub fn put_bytes(
    level: &dyn Level,
    path: &str,
    bytes: &[u8],
    chunk_size: u64,
    serial: u64,
) -> Result<Stored, LevelError> {
    let src = stored_of(
        path,
        bytes,
        chunk_size,
        1_700_000_000_000_000_000 + serial,
        serial,
    );
    let r = Box::new(BufReader::new(src.clone(), bytes));
    let w = level.put(&src)?;
    copy_reader(r, w, level.meter()).map(|t| t.stored)
}

/// Read the copy of `path` back whole.
pub fn get_bytes(level: &dyn Level, path: &str) -> Result<Vec<u8>, LevelError> {
    let mut r = level.get(path)?;
    let n = r.stored().chunks();
    let mut out = Vec::with_capacity(r.stored().version.size as usize);
    for i in 0..n {
        r.read_chunk(i, &mut |parts| {
            for p in parts {
                p.extend_vec(&mut out);
            }
            Ok(())
        })?;
    }
    r.finish()?;
    Ok(out)
}

macro_rules! check {
    ($name:expr, $cond:expr, $($msg:tt)*) => {
        if !$cond {
            return Err(format!("{}: {}: {}", $name, stringify!($cond), format!($($msg)*)));
        }
    };
}

fn e<T>(name: &str, r: Result<T, LevelError>) -> Result<T, String> {
    r.map_err(|e| format!("{name}: {e} (errno {})", e.errno()))
}

/// A refusal a read-only level gives to `put` and `delete`.
fn refused_read_only<T>(name: &str, r: Result<T, LevelError>) -> Result<(), String> {
    match r {
        Ok(_) => Err(format!("{name}: accepted by a read-only level")),
        Err(err) if err.errno() == libc::EROFS || err.errno() == libc::ENOTSUP => Ok(()),
        Err(err) => Err(format!(
            "{name}: refused with errno {} ({err}), not EROFS or ENOTSUP",
            err.errno()
        )),
    }
}

/// Run every check that applies to a read-only level; the first failure, named.
pub fn run_read_only(h: &ReadOnlyHarness<'_>) -> Result<(), String> {
    let cs = h.chunk_size.max(1);
    let prefix = h.prefix.trim_end_matches('/').to_string();
    let p = |n: &str| format!("{prefix}/{n}");
    let files: Vec<(String, Vec<u8>)> = [
        ("empty", 0usize),
        ("one", 1),
        ("chunk", cs as usize),
        ("chunk+1", cs as usize + 1),
        ("three", 3 * cs as usize - 7),
    ]
    .iter()
    .map(|(n, len)| (p(n), data(*len, *len as u32)))
    .collect();
    let l = (h.fill)(&files).map_err(|err| format!("fill: {err}"))?;
    let l = &*l;

    // Round trip, sizes around the chunk size.
    for (path, bytes) in &files {
        let name = format!("read back {path}");
        let st = e(&name, l.stat(path))?.ok_or(format!("{name}: stat: none"))?;
        check!(
            name,
            st.version.size == bytes.len() as u64,
            "stat size {}",
            st.version.size
        );
        check!(
            name,
            st.version.crc32c.is_none_or(|c| c == ckptfs_crc::crc32c(bytes)),
            "stat crc {:?}",
            st.version.crc32c
        );
        let back = e(&name, get_bytes(l, path))?;
        check!(
            name,
            back == *bytes,
            "{} bytes back, {} filled",
            back.len(),
            bytes.len()
        );
        e(&name, l.verify(path, &st.version))?;
        let listed = e(&name, l.list(&prefix))?;
        check!(
            name,
            listed.iter().any(|s| s.path == *path),
            "not listed under {prefix}"
        );
    }

    // holds() per file.
    {
        let name = "holds";
        let got = e(
            name,
            l.holds(&[
                (p("one"), ckptfs_crc::crc32c(&files[1].1)),
                (p("one"), 0xdead_beef),
                (p("never-filled"), 0),
            ]),
        )?;
        check!(name, got == vec![true, false, false], "{got:?}");
    }

    // verify refuses another version.
    {
        let name = "verify another version";
        let st = e(name, l.stat(&p("chunk+1")))?.ok_or(format!("{name}: gone"))?;
        let mut other = st.version;
        other.crc32c = other.crc32c.map(|c| c ^ 1);
        other.size += 1;
        check!(
            name,
            l.verify(&p("chunk+1"), &other).is_err(),
            "verify passed for another version"
        );
    }

    // A path never filled is not found.
    {
        let name = "never filled";
        check!(
            name,
            e(name, l.stat(&p("never-filled")))?.is_none(),
            "stat found it"
        );
        match l.get(&p("never-filled")) {
            Err(err) => check!(name, err.errno() == libc::ENOENT, "get: errno {}", err.errno()),
            Ok(_) => return Err(format!("{name}: get succeeded")),
        }
    }

    // put and delete are refused and change nothing.
    {
        let name = "put refused";
        let bytes = data(cs as usize + 3, 5);
        let new = stored_of(&p("put-new"), &bytes, cs, 1, 1);
        refused_read_only(&format!("{name} (a new path)"), l.put(&new))?;
        let over = stored_of(&p("chunk"), &bytes, cs, 2, 2);
        refused_read_only(&format!("{name} (over a file)"), l.put(&over))?;
        check!(
            name,
            e(name, l.stat(&p("put-new")))?.is_none(),
            "the new path is visible"
        );
        let listed = e(name, l.list(&prefix))?;
        check!(
            name,
            !listed.iter().any(|s| s.path == p("put-new")),
            "the new path is listed"
        );
        let name = "delete refused";
        let st = e(name, l.stat(&p("three")))?.ok_or(format!("{name}: gone"))?;
        refused_read_only(name, l.delete(&p("three"), &st.version))?;
        for (path, bytes) in &files {
            let back = e(name, get_bytes(l, path))?;
            check!(
                name,
                back == *bytes,
                "{path} changed after a refused put or delete"
            );
        }
    }

    // Damage on the level's own storage is refused on read (a level filled afresh).
    if let Some(damage) = h.damage {
        let name = "damaged copy";
        let path = p("to-damage");
        let bytes = data(2 * cs as usize, 7);
        let l = (h.fill)(&[(path.clone(), bytes.clone())]).map_err(|err| format!("{name}: fill: {err}"))?;
        // Damaged before the level reads anything (a level may keep what it checked).
        damage(&path).map_err(|err| format!("{name}: the harness could not damage {path}: {err}"))?;
        let back = get_bytes(&*l, &path);
        check!(
            name,
            !back.as_ref().is_ok_and(|b| *b != bytes),
            "damaged bytes served"
        );
        check!(name, back.is_err(), "read of a damaged copy succeeded");
        // A stat may still describe the file (or be refused too); verify never passes.
        if let Ok(Some(st)) = l.stat(&path) {
            check!(
                name,
                l.verify(&path, &st.version).is_err(),
                "verify passed on a damaged copy"
            );
        }
    }
    Ok(())
}

/// Run every check; the first failure, named.
pub fn run(h: &Harness<'_>) -> Result<(), String> {
    let l = h.level;
    let cs = h.chunk_size.max(1);
    let p = |n: &str| format!("{}/{n}", h.prefix);

    // Round trip, sizes around the chunk size.
    for (n, len) in [
        ("empty", 0usize),
        ("one", 1),
        ("chunk", cs as usize),
        ("chunk+1", cs as usize + 1),
        ("three", 3 * cs as usize - 7),
    ] {
        let name = format!("round trip {n}");
        let bytes = data(len, len as u32);
        let path = p(n);
        let put = e(&name, put_bytes(l, &path, &bytes, cs, 1))?;
        check!(name, put.version.size == len as u64, "size {}", put.version.size);
        let st = e(&name, l.stat(&path))?.ok_or(format!("{name}: stat after commit: none"))?;
        check!(
            name,
            st.version.size == len as u64,
            "stat size {}",
            st.version.size
        );
        check!(
            name,
            st.version.crc32c.is_none_or(|c| c == ckptfs_crc::crc32c(&bytes)),
            "stat crc {:?}",
            st.version.crc32c
        );
        let back = e(&name, get_bytes(l, &path))?;
        check!(
            name,
            back == bytes,
            "{} bytes back, {} put",
            back.len(),
            bytes.len()
        );
        e(&name, l.verify(&path, &st.version))?;
        let listed = e(&name, l.list(&h.prefix))?;
        check!(
            name,
            listed.iter().any(|s| s.path == path),
            "not listed under {}",
            h.prefix
        );
    }

    // holds() per file.
    {
        let name = "holds";
        let one = data(1, 1);
        let got = e(
            name,
            l.holds(&[
                (p("one"), ckptfs_crc::crc32c(&one)),
                (p("one"), 0xdead_beef),
                (p("never-put"), 0),
            ]),
        )?;
        check!(name, got == vec![true, false, false], "{got:?}");
    }

    // verify refuses another version.
    {
        let name = "verify another version";
        let st = e(name, l.stat(&p("chunk+1")))?.ok_or(format!("{name}: gone"))?;
        let mut other = st.version;
        other.crc32c = other.crc32c.map(|c| c ^ 1);
        other.size += 1;
        check!(
            name,
            l.verify(&p("chunk+1"), &other).is_err(),
            "verify passed for another version"
        );
    }

    // An uncommitted put is never visible.
    {
        let name = "uncommitted put";
        let bytes = data(2 * cs as usize, 9);
        let path = p("uncommitted");
        let src = stored_of(&path, &bytes, cs, 1, 1);
        {
            let mut w = e(name, l.put(&src))?;
            let mut r = BufReader::new(src.clone(), &bytes);
            e(name, crate::ChunkReader::read_chunk_to(&mut r, 0, 0, &mut *w))?;
            check!(name, e(name, l.stat(&path))?.is_none(), "visible before commit");
            // dropped here without commit
        }
        check!(
            name,
            e(name, l.stat(&path))?.is_none(),
            "visible after a dropped put"
        );
        let listed = e(name, l.list(&h.prefix))?;
        check!(
            name,
            !listed.iter().any(|s| s.path == path),
            "listed after a dropped put"
        );
    }

    // Bytes that do not match the CRCs given are never served as that version.
    {
        let name = "damaged source";
        let bytes = data(2 * cs as usize + 3, 4);
        let path = p("damaged");
        let mut src = stored_of(&path, &bytes, cs, 1, 1);
        src.chunk_crc32c[1] ^= 0x10;
        let put = l.put(&src).and_then(|mut w| {
            // Write the bytes without the reader's check (a sender that lies).
            let mut off = 0u64;
            for c in bytes.chunks(cs as usize) {
                w.write_at(&[crate::IoPart::Buf(c)], off)?;
                off += c.len() as u64;
            }
            w.commit()
        });
        if put.is_ok() {
            // Whatever the level serves must match the CRCs it reports for it.
            if let Ok(back) = get_bytes(l, &path) {
                let st = e(name, l.stat(&path))?.ok_or(format!("{name}: served but not stat-able"))?;
                let crcs: Vec<u32> = back
                    .chunks(st.chunk_size.max(1) as usize)
                    .map(ckptfs_crc::crc32c)
                    .collect();
                check!(
                    name,
                    st.chunk_crc32c.is_empty() || st.chunk_crc32c == crcs,
                    "served bytes do not match the chunk CRCs the level reports"
                );
                check!(
                    name,
                    st.version.crc32c.is_none_or(|c| c == ckptfs_crc::crc32c(&back)),
                    "served bytes do not match the whole-file CRC the level reports"
                );
            }
        }
    }

    // A rewrite replaces the version; delete is bounded by the version.
    {
        let name = "rewrite and delete";
        let path = p("rewritten");
        let v1 = data(cs as usize + 5, 1);
        let v2 = data(cs as usize + 9, 2);
        let s1 = e(name, put_bytes(l, &path, &v1, cs, 1))?;
        let s2 = e(name, put_bytes(l, &path, &v2, cs, 2))?;
        check!(name, e(name, get_bytes(l, &path))? == v2, "rewrite not read back");
        check!(
            name,
            !e(name, l.delete(&path, &s1.version))?,
            "delete of the old version removed the new one"
        );
        check!(
            name,
            e(name, l.stat(&path))?.is_some(),
            "gone after delete of another version"
        );
        check!(
            name,
            e(name, l.delete(&path, &s2.version))?,
            "delete of its own version refused"
        );
        check!(
            name,
            e(name, l.stat(&path))?.is_none(),
            "still there after delete"
        );
        check!(
            name,
            !e(name, l.delete(&path, &s2.version))?,
            "a second delete said it removed something"
        );
        match l.get(&path) {
            Err(err) => check!(
                name,
                err.errno() == libc::ENOENT,
                "get after delete: errno {}",
                err.errno()
            ),
            Ok(_) => return Err(format!("{name}: get after delete succeeded")),
        }
    }

    // Damage on the level's own storage is refused on read.
    if let Some(damage) = h.damage {
        let name = "damaged copy";
        let path = p("to-damage");
        let bytes = data(2 * cs as usize, 7);
        let st = e(name, put_bytes(l, &path, &bytes, cs, 1))?;
        damage(&path).map_err(|err| format!("{name}: the harness could not damage {path}: {err}"))?;
        let back = get_bytes(l, &path);
        check!(
            name,
            !back.as_ref().is_ok_and(|b| *b != bytes),
            "damaged bytes served"
        );
        check!(name, back.is_err(), "read of a damaged copy succeeded");
        check!(
            name,
            l.verify(&path, &st.version).is_err(),
            "verify passed on a damaged copy"
        );
    }

    // Clean up.
    for s in l.list(&h.prefix).unwrap_or_default() {
        let _ = l.delete(&s.path, &s.version);
    }
    Ok(())
}
