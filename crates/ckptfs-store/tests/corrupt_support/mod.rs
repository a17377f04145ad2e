//! Helpers shared by the damaged-segment tests (`corrupt.rs`: one targeted field per
//! case; `corrupt_random.rs`: random damage, many seeds): a store with two files in a
//! directory, the offsets of its structures, edits of the segment file, and the checks
//! run on a damaged store.
#![allow(dead_code, unused_macros)]

use crate::support::*;
use ckptfs_store::layout::{Layout, Superblock, CHUNK_ENTRY_SIZE, INODE_SIZE};
use ckptfs_store::{OpenFlags, Store, StoreOptions};
use std::mem::offset_of;
use std::os::unix::fs::FileExt;

pub const CHUNK: u64 = 64 << 10;
pub const MEM: u64 = 32 * CHUNK;
pub const MAX_FILES: u32 = 64;
pub const A_SIZE: u64 = 200_000;
pub const B_SIZE: u64 = 150_000;

/// Where things are in a freshly set-up store.
pub struct Ctx {
    pub layout: Layout,
    pub a: u32,
    pub b: u32,
    pub d: u32,
    /// Chunk ids of /d/a by logical index.
    pub a_chunks: Vec<u32>,
    pub mem_top: u32,
    pub fid_top: u32,
    /// Hash slot holding /d/a, and an empty slot.
    pub a_slot: u32,
    pub empty_slot: u32,
}

impl Ctx {
    pub fn inode(&self, fid: u32, field: usize) -> u64 {
        self.layout.inode_off + fid as u64 * INODE_SIZE + field as u64
    }
    pub fn chunk(&self, c: u32, field: usize) -> u64 {
        self.layout.chunk_off + c as u64 * CHUNK_ENTRY_SIZE + field as u64
    }
}

pub fn seg_file(name: &str) -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/dev/shm/ckptfs.{name}"))
        .unwrap()
}

pub fn read_u32(name: &str, off: u64) -> u32 {
    let mut b = [0u8; 4];
    seg_file(name).read_exact_at(&mut b, off).unwrap();
    u32::from_le_bytes(b)
}

pub fn setup(t: &TempStore) -> Ctx {
    let s = t.attach();
    s.mkdir("/d", 0o755).unwrap();
    for (p, seed, n) in [("/d/a", 1, A_SIZE), ("/d/b", 2, B_SIZE)] {
        let mut f = s.open(p, OpenFlags::CREATE, 0o644).unwrap();
        f.write_all(&pattern(seed, 0, n as usize)).unwrap();
        f.close().unwrap();
    }
    let layout = Layout::compute(CHUNK.trailing_zeros(), (MEM / CHUNK) as u32, 0, MAX_FILES);
    let fid = |p: &str| (s.stat(p).unwrap().ino - 1) as u32;
    let (a, b, d) = (fid("/d/a"), fid("/d/b"), fid("/d"));
    let a_chunks = s.chunk_list("/d/a").unwrap().iter().map(|c| c.chunk_id).collect();
    let mem_top = read_u32(&t.name, offset_of!(Superblock, mem_top) as u64);
    let fid_top = read_u32(&t.name, offset_of!(Superblock, fid_top) as u64);
    let slots: Vec<u32> = (0..layout.hash_cap)
        .map(|i| read_u32(&t.name, layout.hash_off + i as u64 * 4))
        .collect();
    let a_slot = slots.iter().position(|&v| v == a + 1).unwrap() as u32;
    let empty_slot = slots.iter().position(|&v| v == 0).unwrap() as u32;
    Ctx {
        layout,
        a,
        b,
        d,
        a_chunks,
        mem_top,
        fid_top,
        a_slot,
        empty_slot,
    }
}

#[derive(Debug)]
pub enum Edit {
    Xor32(u32),
    Set32(u32),
    Set64(u64),
    Add64(i64),
    /// Several edits at their own offsets (the offset given with it is ignored).
    Multi(Vec<(u64, Edit)>),
}

/// Apply `edit` at `off` of the segment file (shared memory: every mapping sees it).
pub fn poke(name: &str, off: u64, edit: &Edit) {
    let f = seg_file(name);
    let mut b4 = [0u8; 4];
    let mut b8 = [0u8; 8];
    match *edit {
        Edit::Xor32(x) => {
            f.read_exact_at(&mut b4, off).unwrap();
            f.write_all_at(&(u32::from_le_bytes(b4) ^ x).to_le_bytes(), off)
                .unwrap();
        }
        Edit::Set32(v) => f.write_all_at(&v.to_le_bytes(), off).unwrap(),
        Edit::Set64(v) => f.write_all_at(&v.to_le_bytes(), off).unwrap(),
        Edit::Add64(d) => {
            f.read_exact_at(&mut b8, off).unwrap();
            let v = (u64::from_le_bytes(b8) as i64 + d) as u64;
            f.write_all_at(&v.to_le_bytes(), off).unwrap();
        }
        Edit::Multi(ref edits) => {
            for (o, e) in edits {
                poke(name, *o, e);
            }
        }
    }
}

/// Read a file: Ok(bytes) or the errno.
pub fn read(store: &Store, path: &str) -> Result<Vec<u8>, i32> {
    read_all(store, path).map_err(|e| e.errno())
}

/// `got` is the exact content or an error.
pub fn never_wrong(case: &str, path: &str, got: &Result<Vec<u8>, i32>, seed: u64, size: u64) {
    if let Ok(data) = got {
        assert!(
            data.len() as u64 == size && first_mismatch(seed, 0, data).is_none(),
            "{case}: {path} returned wrong data ({} bytes, expected {size})",
            data.len()
        );
    }
}

/// [`never_wrong`] after a repair, which may have kept only a prefix of a file that
/// lost chunks: then the file is marked incomplete and holds a prefix of what was written.
pub fn repaired_never_wrong(
    store: &Store,
    case: &str,
    path: &str,
    got: &Result<Vec<u8>, i32>,
    seed: u64,
    size: u64,
) {
    match (got, store.stat(path).map(|s| s.state)) {
        (Ok(data), Ok(ckptfs_store::WriteState::Incomplete)) => {
            assert!(data.len() as u64 <= size, "{case}: {path}");
            assert_eq!(first_mismatch(seed, 0, data), None, "{case}: {path}");
        }
        _ => never_wrong(case, path, got, seed, size),
    }
}

/// A store set up by [`setup`], damaged by `target`, and attached again.
pub fn damaged(tag: &str, target: impl FnOnce(&Ctx) -> (u64, Edit)) -> (TempStore, Ctx, Store) {
    let t = TempStore::new(tag, MEM, CHUNK, MAX_FILES, None);
    let ctx = setup(&t);
    let (off, edit) = target(&ctx);
    poke(&t.name, off, &edit);
    let store = t.attach();
    (t, ctx, store)
}

/// One case: set up, damage, then exercise the store API, fsck and repair.
pub fn run_case(case: &'static str, target: impl FnOnce(&Ctx) -> (u64, Edit), expect_a_eio: bool) {
    run_damaged(case, target, expect_a_eio, true);
}

/// [`run_case`]; `targeted`: the damage is known to spare /d/b (when it is not in /d's
/// directory entry), so /d/b must survive repair. Random damage may hit /d/b too: then
/// only "exact bytes or an error" is checked.
pub fn run_damaged(case: &str, target: impl FnOnce(&Ctx) -> (u64, Edit), expect_a_eio: bool, targeted: bool) {
    let case = case.to_string();
    let tag = format!("corrupt-{}", case.replace('.', "-"));
    let t = TempStore::new(&tag, MEM, CHUNK, MAX_FILES, None);
    let ctx = setup(&t);
    let (off, edit) = target(&ctx);
    poke(&t.name, off, &edit);
    let name = t.name.clone();
    with_timeout(120, &format!("damaged store ({case})"), move || {
        let case = case.as_str();
        let store = match Store::attach(&StoreOptions::named(&name)) {
            Ok(s) => s,
            Err(e) => {
                // Refused at attach (superblock damage), with a message naming it.
                assert!(e.to_string().contains(&name), "{case}: {e}");
                return;
            }
        };
        let a = read(&store, "/d/a");
        let b = read(&store, "/d/b");
        let first = format!("{case}, first read");
        never_wrong(&first, "/d/a", &a, 1, A_SIZE);
        never_wrong(&first, "/d/b", &b, 2, B_SIZE);
        if expect_a_eio {
            assert_eq!(a.as_ref().map(|v| v.len()), Err(&libc::EIO), "{case}: /d/a");
        }
        // Listing, lookups and directory moves never panic.
        if let Ok(st) = store.stat("/d") {
            let _ = store.lookup(st.ino, "..");
        }
        if store.mkdir("/x", 0o755).is_ok() && store.rename("/x", "/d/x").is_ok() {
            let _ = store.rename("/d/x", "/x");
        }
        let _ = store.list_all();
        let _ = store.read_dir("/d");
        let _ = store.info();
        // Allocation still works (damaged stacks are rebuilt, never trusted).
        let new = store.open("/new", OpenFlags::CREATE, 0o644).and_then(|mut f| {
            f.write_all(&pattern(3, 0, 300_000))?;
            f.close()
        });
        if new.is_ok() {
            never_wrong(case, "/new", &read(&store, "/new"), 3, 300_000);
        }
        let again = format!("{case}, after a new file was written");
        never_wrong(&again, "/d/b", &read(&store, "/d/b"), 2, B_SIZE);
        let _ = store.fsck(false);
        let rep = store.fsck(true);
        let _ = store.fsck(false);
        // After repair: the undamaged file is there, intact, unless the damage was its
        // own or its directory's; the damaged one is intact, an error, or quarantined.
        let b = read(&store, "/d/b");
        let repaired = format!("{case}, after repair");
        repaired_never_wrong(&store, &repaired, "/d/b", &b, 2, B_SIZE);
        let a = read(&store, "/d/a");
        repaired_never_wrong(&store, &repaired, "/d/a", &a, 1, A_SIZE);
        if targeted && !case.starts_with("dir.") {
            assert!(
                b.is_ok(),
                "{case}: the undamaged /d/b is gone after repair: {b:?} {rep:?}"
            );
        }
        for e in store.read_dir("/lost+found").unwrap_or_default() {
            let p = format!("/lost+found/{}", e.name);
            let _ = read(&store, &p);
        }
        if new.is_ok() {
            never_wrong(case, "/new", &read(&store, "/new"), 3, 300_000);
        }
    });
}

macro_rules! case {
    ($fn:ident, $name:literal, $eio:expr, |$c:ident| $body:expr) => {
        #[test]
        fn $fn() {
            run_case(
                $name,
                |$c: &Ctx| {
                    let _ = $c;
                    $body
                },
                $eio,
            );
        }
    };
}
