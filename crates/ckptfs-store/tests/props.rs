//! Property tests of the allocator and the metadata: random sequences of namespace and
//! data operations are applied to a store and to an in-memory model of POSIX semantics
//! (names -> inodes -> bytes and allocated chunks). Every result (bytes written, errno),
//! every file's content, size and chunk count, every directory listing, the free chunk
//! count and fsck must agree with the model. The model allocates as the store does (a
//! stack of free chunk ids; small files in aligned runs of 4 KiB blocks of shared chunks,
//! moved to larger runs and into whole chunks as they grow), so the chunk ids, the runs
//! and the free counts must agree exactly. Small stores make ENOSPC (short writes) and
//! a full inode table (ENFILE) part of the sequences; a small name hash makes probing and
//! backward-shift deletion part of them too.

use ckptfs_store::{FileHandle, FileKind, OpenFlags, Store, StoreError, StoreOptions};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};

mod props_model;

use props_model::*;

// ------------------------------------------------------------------ operations

#[derive(Clone, Debug)]
enum Op {
    Create(String),
    Write {
        p: String,
        off: u64,
        len: usize,
        seed: u8,
        append: bool,
    },
    Truncate(String, u64),
    Rename(String, String),
    Unlink(String),
    Mkdir(String),
    Rmdir(String),
    Link(String, String),
    Hold(String),
    HWrite {
        h: usize,
        off: u64,
        len: usize,
        seed: u8,
    },
    HTruncate(usize, u64),
    HRead(usize),
    HClose(usize),
    Check(String),
}

/// Directory paths: /a, /b, /a/b, ... (shallow ones likelier).
fn dir_path() -> impl Strategy<Value = String> {
    let comp = || prop::sample::select(vec!["a", "b"]);
    prop_oneof![
        3 => comp().prop_map(|a| format!("/{a}")),
        1 => (comp(), comp()).prop_map(|(a, b)| format!("/{a}/{b}")),
    ]
}

/// File paths: /f, /a/g, /a/b/f, ... A small universe, so that sequences keep hitting
/// existing files.
fn file_path() -> impl Strategy<Value = String> {
    let leaf = || prop::sample::select(vec!["f", "g"]);
    prop_oneof![
        2 => leaf().prop_map(|f| format!("/{f}")),
        2 => (dir_path(), leaf()).prop_map(|(d, f)| format!("{d}/{f}")),
    ]
}

/// Any path, to mix kinds up (a file renamed over a directory name, and so on).
fn path() -> impl Strategy<Value = String> {
    prop_oneof![3 => file_path(), 1 => dir_path()]
}

fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), 0..3 * CS, Just(CS - 1), Just(CS), Just(2 * CS + 7)]
}

fn length() -> impl Strategy<Value = usize> {
    prop_oneof![Just(0usize), 1..5000usize, 1..150_000usize, Just(CS as usize)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => file_path().prop_map(Op::Create),
        5 => (file_path(), offset(), length(), any::<u8>(), prop::bool::weighted(0.2))
            .prop_map(|(p, off, len, seed, append)| Op::Write { p, off, len, seed, append }),
        2 => (file_path(), prop_oneof![Just(0u64), 0..4 * CS, Just(CS)]).prop_map(|(p, l)| Op::Truncate(p, l)),
        2 => (path(), path()).prop_map(|(a, b)| Op::Rename(a, b)),
        2 => path().prop_map(Op::Unlink),
        3 => dir_path().prop_map(Op::Mkdir),
        1 => path().prop_map(Op::Rmdir),
        2 => (path(), file_path()).prop_map(|(a, b)| Op::Link(a, b)),
        2 => file_path().prop_map(Op::Hold),
        3 => (any::<usize>(), offset(), length(), any::<u8>())
            .prop_map(|(h, off, len, seed)| Op::HWrite { h, off, len, seed }),
        1 => (any::<usize>(), prop_oneof![Just(0u64), 0..4 * CS]).prop_map(|(h, l)| Op::HTruncate(h, l)),
        1 => any::<usize>().prop_map(Op::HRead),
        1 => any::<usize>().prop_map(Op::HClose),
        1 => path().prop_map(Op::Check),
    ]
}

fn data(seed: u8, off: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| ((off + i) as u8).wrapping_mul(13).wrapping_add(seed) | 1)
        .collect()
}

fn errno<T>(r: Result<T, StoreError>) -> Res<T> {
    r.map_err(|e| e.errno())
}

fn rw() -> OpenFlags {
    OpenFlags {
        read: true,
        write: true,
        ..Default::default()
    }
}

// ------------------------------------------------------------------ the harness

struct Case {
    store: Store,
    name: String,
    model: Model,
    handles: Vec<(FileHandle, u64)>,
}

impl Drop for Case {
    fn drop(&mut self) {
        self.handles.clear();
        let _ = Store::destroy(&self.name);
    }
}

static CASES: AtomicU32 = AtomicU32::new(0);

impl Case {
    fn new(mem_chunks: u64, max_files: u32) -> Case {
        let name = format!(
            "t-props-{}-{}",
            std::process::id(),
            CASES.fetch_add(1, Ordering::Relaxed)
        );
        let _ = Store::destroy(&name);
        let store = Store::create(&StoreOptions {
            mem_size: Some(mem_chunks * CS),
            chunk_size: Some(CS),
            max_files: Some(max_files),
            ..StoreOptions::named(&name)
        })
        .unwrap();
        Case {
            store,
            name,
            model: Model::new(mem_chunks as usize, max_files),
            handles: Vec::new(),
        }
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let s = &self.store;
        let m = &mut self.model;
        match op {
            Op::Create(p) => {
                let got = errno(s.open(p, OpenFlags::CREATE, 0o644).and_then(|f| f.close()));
                let want = match m.lookup(p) {
                    Err(libc::ENOENT) if m.check_parent(p).is_ok() => {
                        if m.live_inodes() == m.max_inodes {
                            Err(libc::ENFILE)
                        } else {
                            let id = m.new_inode(p);
                            m.names.insert(p.clone(), Node::File(id));
                            Ok(())
                        }
                    }
                    Err(e) => Err(e),
                    Ok(Node::Dir) => Err(libc::EISDIR),
                    Ok(Node::File(id)) => {
                        m.set_len(id, 0);
                        Ok(())
                    }
                };
                prop_assert_eq!(got, want, "{:?}", op);
            }
            Op::Write {
                p,
                off,
                len,
                seed,
                append,
            } => {
                let buf = data(*seed, *off, *len);
                let flags = OpenFlags {
                    write: true,
                    create: true,
                    append: *append,
                    ..Default::default()
                };
                let got = errno(s.open(p, flags, 0)).and_then(|mut f| {
                    let n = errno(f.pwrite(&buf, *off))?;
                    errno(f.close())?;
                    Ok(n)
                });
                let file = match m.lookup(p) {
                    Err(libc::ENOENT) if m.check_parent(p).is_ok() => {
                        if m.live_inodes() == m.max_inodes {
                            Err(libc::ENFILE)
                        } else {
                            let id = m.new_inode(p);
                            m.names.insert(p.clone(), Node::File(id));
                            Ok(id)
                        }
                    }
                    Err(e) => Err(e),
                    Ok(Node::Dir) => Err(libc::EISDIR),
                    Ok(Node::File(id)) => Ok(id),
                };
                let want = file.and_then(|id| {
                    let at = if *append {
                        m.inodes[&id].data.len() as u64
                    } else {
                        *off
                    };
                    m.write(id, at, &buf)
                });
                prop_assert_eq!(got, want, "{:?}", op);
            }
            Op::Truncate(p, len) => {
                let got = errno(s.truncate(p, *len));
                let want = match m.lookup(p) {
                    Err(e) => Err(e),
                    Ok(Node::Dir) => Err(libc::EISDIR),
                    Ok(Node::File(id)) => {
                        m.set_len(id, *len);
                        Ok(())
                    }
                };
                prop_assert_eq!(got, want, "{:?}", op);
            }
            Op::Rename(a, b) => {
                let got = errno(s.rename(a, b));
                let want = model_rename(m, a, b);
                prop_assert_eq!(got, want, "{:?}", op);
            }
            Op::Unlink(p) => {
                let got = errno(s.unlink(p));
                let want = match m.lookup(p) {
                    Err(e) => Err(e),
                    Ok(Node::Dir) => Err(libc::EISDIR),
                    Ok(Node::File(id)) => {
                        m.names.remove(p);
                        m.drop_name(id, p);
                        Ok(())
                    }
                };
                prop_assert_eq!(got, want, "{:?}", op);
            }
            Op::Link(a, b) => {
                let got = errno(s.link(a, b).map(|st| st.nlink as usize));
                let want = match m.lookup(a) {
                    Err(e) => Err(e),
                    Ok(Node::Dir) => Err(libc::EPERM),
                    Ok(Node::File(id)) => match m.check_parent(b) {
                        Err(e) => Err(e),
                        Ok(()) if m.get(b).is_some() => Err(libc::EEXIST),
                        Ok(()) if m.live_inodes() == m.max_inodes => Err(libc::ENFILE),
                        Ok(()) => {
                            m.names.insert(b.clone(), Node::File(id));
                            let ino = m.inodes.get_mut(&id).unwrap();
                            ino.names += 1;
                            Ok(ino.names)
                        }
                    },
                };
                prop_assert_eq!(got, want, "{:?}", op);
            }
            Op::Mkdir(p) => {
                let got = errno(s.mkdir(p, 0o755).map(|_| ()));
                let want = match m.lookup(p) {
                    Err(libc::ENOENT) if m.check_parent(p).is_ok() => {
                        if m.live_inodes() == m.max_inodes {
                            Err(libc::ENFILE)
                        } else {
                            m.names.insert(p.clone(), Node::Dir);
                            Ok(())
                        }
                    }
                    Err(e) => Err(e),
                    Ok(_) => Err(libc::EEXIST),
                };
                prop_assert_eq!(got, want, "{:?}", op);
            }
            Op::Rmdir(p) => {
                let got = errno(s.rmdir(p));
                let want = match m.lookup(p) {
                    Err(e) => Err(e),
                    Ok(Node::File(_)) => Err(libc::ENOTDIR),
                    Ok(Node::Dir) if !m.children(p).is_empty() => Err(libc::ENOTEMPTY),
                    Ok(Node::Dir) => {
                        m.names.remove(p);
                        Ok(())
                    }
                };
                prop_assert_eq!(got, want, "{:?}", op);
            }
            Op::Hold(p) => {
                let got = errno(s.open(p, rw(), 0));
                let want = match m.lookup(p) {
                    Err(e) => Err(e),
                    Ok(Node::Dir) => Err(libc::EISDIR),
                    Ok(Node::File(id)) => Ok(id),
                };
                match (got, want) {
                    (Ok(f), Ok(id)) => {
                        m.inodes.get_mut(&id).unwrap().handles += 1;
                        self.handles.push((f, id));
                    }
                    (Err(g), Err(w)) => prop_assert_eq!(g, w, "{:?}", op),
                    (g, w) => prop_assert!(false, "{:?}: store {:?}, model {:?}", op, g.map(|_| ()), w),
                }
            }
            Op::HWrite { h, off, len, seed } if !self.handles.is_empty() => {
                let i = h % self.handles.len();
                let (f, id) = &mut self.handles[i];
                let buf = data(*seed, *off, *len);
                let got = errno(f.pwrite(&buf, *off));
                let want = m.write(*id, *off, &buf);
                prop_assert_eq!(got, want, "{:?}", op);
            }
            Op::HTruncate(h, len) if !self.handles.is_empty() => {
                let i = h % self.handles.len();
                let (f, id) = &mut self.handles[i];
                prop_assert!(f.set_len(*len).is_ok());
                m.set_len(*id, *len);
            }
            Op::HRead(h) if !self.handles.is_empty() => {
                let i = h % self.handles.len();
                let (f, id) = &mut self.handles[i];
                let want = &m.inodes[id].data;
                let mut buf = vec![7u8; want.len() + 10];
                let n = f.pread(&mut buf, 0).unwrap();
                prop_assert_eq!(n, want.len());
                prop_assert!(buf[..n] == want[..], "content through a held handle differs");
                prop_assert_eq!(f.stat().chunks as usize, m.inodes[id].chunks.len());
            }
            Op::HClose(h) if !self.handles.is_empty() => {
                let i = h % self.handles.len();
                let (f, id) = self.handles.remove(i);
                prop_assert!(f.close().is_ok());
                m.close(id);
            }
            Op::Check(p) => match m.lookup(p) {
                Ok(Node::File(id)) => self.check_file(p, id)?,
                Ok(Node::Dir) => prop_assert_eq!(s.stat(p).unwrap().kind, FileKind::Dir),
                Err(e) => prop_assert_eq!(errno(s.stat(p)).map(|_| ()), Err(e), "{:?}", op),
            },
            _ => {} // handle op without handles
        }
        Ok(())
    }

    fn check_file(&self, p: &str, id: u64) -> Result<(), TestCaseError> {
        let ino = &self.model.inodes[&id];
        let st = self.store.stat(p).unwrap();
        prop_assert_eq!(st.kind, FileKind::File);
        prop_assert_eq!(st.nlink as usize, ino.names, "link count of {}", p);
        prop_assert_eq!(st.size, ino.data.len() as u64, "size of {}", p);
        prop_assert_eq!(st.chunks as usize, ino.chunks.len(), "chunks of {}", p);
        let run_bytes = ino.run.map_or(0, |r| r.2 as u64 * 4096);
        prop_assert_eq!(
            st.allocated,
            ino.chunks.len() as u64 * CS + run_bytes,
            "allocated of {}",
            p
        );
        let mut f = self.store.open(p, OpenFlags::READ, 0).unwrap();
        let mut buf = vec![7u8; ino.data.len() + 10];
        let n = f.read_full(&mut buf).unwrap();
        prop_assert_eq!(n, ino.data.len());
        prop_assert!(buf[..n] == ino.data[..], "content of {} differs", p);
        // The chunk list the copy-out API gives agrees with the model's allocation.
        let list: BTreeMap<u64, u64> = self
            .store
            .chunk_list(p)
            .unwrap()
            .iter()
            .map(|c| (c.logical as u64, c.chunk_id as u64))
            .collect();
        let mut want = ino.chunks.clone();
        if let Some((c, _, _)) = ino.run {
            want.insert(0, c); // a small file's run, as chunk 0 in its chunk
        }
        prop_assert_eq!(&list, &want, "chunk list (logical -> chunk id) of {}", p);
        Ok(())
    }

    /// Compare everything: files, listings, counters, free chunks, fsck.
    fn check_all(&self) -> Result<(), TestCaseError> {
        let m = &self.model;
        let s = &self.store;
        for (p, n) in &m.names {
            if let Node::File(id) = n {
                self.check_file(p, *id)?;
            }
        }
        let mut dirs: Vec<&str> = m
            .names
            .iter()
            .filter(|(_, n)| **n == Node::Dir)
            .map(|(p, _)| p.as_str())
            .collect();
        dirs.push("/");
        for d in dirs {
            let mut got: Vec<(String, bool)> = s
                .read_dir(d)
                .unwrap()
                .into_iter()
                .map(|e| (e.name, e.kind == FileKind::Dir))
                .collect();
            got.sort();
            let want: Vec<(String, bool)> = m
                .children(d)
                .into_iter()
                .map(|(n, k)| (n, k == Node::Dir))
                .collect();
            prop_assert_eq!(got, want, "listing of {}", d);
        }
        let all: Vec<String> = s.list_all().into_iter().map(|(p, _)| p).collect();
        let want: Vec<String> = m.names.keys().cloned().collect();
        prop_assert_eq!(all, want);
        let info = s.info();
        let files = m.inodes.values().filter(|i| i.names > 0).count();
        prop_assert_eq!(info.files as usize, files);
        let dirs = m.names.values().filter(|n| **n == Node::Dir).count();
        prop_assert_eq!(info.dirs as usize, dirs + 1);
        prop_assert_eq!(
            info.orphans as usize,
            m.inodes.values().filter(|i| i.names == 0).count()
        );
        prop_assert_eq!(
            (info.mem_chunks - info.mem_free_chunks) as usize,
            m.used_chunks(),
            "used chunks"
        );
        prop_assert_eq!(
            info.small_chunks as usize,
            m.alloc.small.len(),
            "small-file chunks"
        );
        let blocks: u32 = m.alloc.small.values().map(|b| b.count_ones()).sum();
        prop_assert_eq!(info.small_blocks_used, blocks as u64, "small-file blocks");
        let rep = s.fsck(false);
        prop_assert!(
            rep.problems.is_empty() && rep.incomplete.is_empty(),
            "fsck: {:?}",
            rep.problems
        );
        Ok(())
    }
}

fn model_rename(m: &mut Model, a: &str, b: &str) -> Res<()> {
    let src = m.lookup(a)?;
    m.check_parent(b)?;
    if src == Node::Dir {
        let pb = parent_of(b);
        if pb == a || pb.starts_with(&format!("{a}/")) {
            return Err(libc::EINVAL);
        }
    }
    if a == b {
        return Ok(());
    }
    match (src, m.get(b)) {
        // Two names of one inode: nothing happens (POSIX).
        (Node::File(x), Some(Node::File(y))) if x == y => return Ok(()),
        _ => {}
    }
    match (src, m.get(b)) {
        (_, None) => {}
        (Node::Dir, Some(Node::File(_))) => return Err(libc::ENOTDIR),
        (Node::File(_), Some(Node::Dir)) => return Err(libc::EISDIR),
        (Node::Dir, Some(Node::Dir)) if !m.children(b).is_empty() => return Err(libc::ENOTEMPTY),
        (_, Some(Node::Dir)) => {
            m.names.remove(b);
        }
        (_, Some(Node::File(v))) => {
            m.names.remove(b);
            m.drop_name(v, b);
        }
    }
    let moved: Vec<(String, Node)> = m
        .names
        .iter()
        .filter(|(k, _)| *k == a || k.starts_with(&format!("{a}/")))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    for (k, v) in moved {
        m.names.remove(&k);
        let to = format!("{b}{}", &k[a.len()..]);
        if let Node::File(id) = v {
            let ino = m.inodes.get_mut(&id).unwrap();
            if ino.own.as_deref() == Some(k.as_str()) {
                ino.own = Some(to.clone());
            }
        }
        m.names.insert(to, v);
    }
    Ok(())
}

fn run_case(mem_chunks: u64, max_files: u32, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut c = Case::new(mem_chunks, max_files);
    for op in ops {
        c.apply(op)?;
    }
    c.check_all()?;
    // Closing the last handles frees unlinked files: everything must add up again.
    while let Some((f, id)) = c.handles.pop() {
        prop_assert!(f.close().is_ok());
        c.model.close(id);
    }
    c.check_all()?;
    // Removing everything gives every chunk and inode back.
    let paths: Vec<(String, Node)> = c.model.names.iter().rev().map(|(k, v)| (k.clone(), *v)).collect();
    for (p, n) in paths {
        match n {
            Node::File(_) => c.store.unlink(&p).unwrap(),
            Node::Dir => c.store.rmdir(&p).unwrap(),
        }
    }
    let info = c.store.info();
    prop_assert_eq!((info.files, info.dirs, info.orphans), (0, 1, 0));
    prop_assert_eq!(info.mem_free_chunks, info.mem_chunks);
    prop_assert!(c.store.fsck(false).problems.is_empty());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Roomy store: content, holes, truncation and namespace semantics.
    #[test]
    fn store_matches_model_with_room(ops in prop::collection::vec(op(), 1..80)) {
        run_case(128, 64, &ops)?;
    }

    /// Tight store: 6 chunks and 7 inodes, so short writes, ENOSPC and ENFILE happen.
    #[test]
    fn store_matches_model_when_full(ops in prop::collection::vec(op(), 1..80)) {
        run_case(6, 8, &ops)?;
    }
}

#[test]
fn hash_probing_survives_many_creates_and_deletes() {
    // 15 names in a 32-slot hash (max_files 16): long probe chains, backward-shift
    // deletion in every order.
    let ops: Vec<Op> = (0..6)
        .flat_map(|round| {
            let names: Vec<String> = (0..15).map(|i| format!("/n{}", (i * 7 + round) % 15)).collect();
            let creates = names.iter().map(|p| Op::Create(p.clone())).collect::<Vec<_>>();
            let unlinks = names
                .iter()
                .rev()
                .step_by(1 + round % 3)
                .map(|p| Op::Unlink(p.clone()));
            creates.into_iter().chain(unlinks).collect::<Vec<_>>()
        })
        .collect();
    run_case(16, 16, &ops).unwrap();
}
