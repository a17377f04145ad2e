//! The model of the property tests (`props.rs`): POSIX semantics of names, inodes and
//! bytes, and the store's allocator step by step (a stack of free chunk ids; small files
//! in aligned runs of 4 KiB blocks of shared chunks).

use std::collections::{BTreeMap, HashMap};

pub const CS: u64 = 64 << 10;
/// Blocks per chunk, and the largest small file (a quarter of a 64 KiB chunk).
pub const BPC: u32 = (CS / 4096) as u32;
pub const SMALL_MAX: u64 = CS / 4;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Node {
    Dir,
    File(u64),
}

#[derive(Debug, Default)]
pub struct MInode {
    pub data: Vec<u8>,
    /// Logical chunk index -> chunk id.
    pub chunks: BTreeMap<u64, u64>,
    /// Small file: (chunk id, first block in it, blocks).
    pub run: Option<(u64, u32, u32)>,
    /// Names (hard links) of the inode; 0 = unlinked (an orphan while held open).
    pub names: usize,
    /// The name the inode was created with, while it has it (moved by renames): the
    /// store keeps that name in the inode itself and every other name in a link entry
    /// taking an inode slot of its own.
    pub own: Option<String>,
    pub handles: usize,
}

/// The store's allocator, step by step.
pub struct Alloc {
    /// Free chunk ids; the top (popped next) is the last.
    pub stack: Vec<u64>,
    /// Chunks divided into blocks: chunk id -> bitmap of its blocks in use.
    pub small: BTreeMap<u64, u32>,
    /// The chunk of the last run taken.
    pub hint: u64,
}

impl Alloc {
    pub fn mask(first: u32, blocks: u32) -> u32 {
        (((1u64 << blocks) - 1) as u32) << first
    }

    pub fn free_in(&self, c: u64, blocks: u32) -> Option<u32> {
        let bits = *self.small.get(&c)?;
        (0..BPC)
            .step_by(blocks as usize)
            .find(|&f| bits & Self::mask(f, blocks) == 0)
    }

    /// A run of `blocks` (hint chunk, then the lowest small chunk with room, then a new
    /// chunk), or None when no chunk is left.
    pub fn take_run(&mut self, blocks: u32) -> Option<(u64, u32, u32)> {
        let found = self
            .free_in(self.hint, blocks)
            .map(|f| (self.hint, f))
            .or_else(|| {
                self.small
                    .keys()
                    .find_map(|&c| self.free_in(c, blocks).map(|f| (c, f)))
            });
        let (c, f) = match found {
            Some(x) => x,
            None => {
                let c = self.stack.pop()?;
                self.small.insert(c, 0);
                (c, 0)
            }
        };
        self.hint = c;
        *self.small.get_mut(&c).unwrap() |= Self::mask(f, blocks);
        Some((c, f, blocks))
    }

    pub fn release_run(&mut self, (c, f, blocks): (u64, u32, u32)) {
        let bits = self.small.get_mut(&c).unwrap();
        *bits &= !Self::mask(f, blocks);
        if *bits == 0 {
            self.small.remove(&c);
            self.stack.push(c);
        }
    }

    /// Free `ino`'s chunks from logical index `from` (in id order, as the store scans),
    /// and its run when `from` is 0.
    pub fn free_from(&mut self, ino: &mut MInode, from: u64) {
        let mut ids: Vec<u64> = ino.chunks.range(from..).map(|(_, &id)| id).collect();
        ids.sort_unstable();
        self.stack.extend(ids);
        ino.chunks.retain(|&l, _| l < from);
        if from == 0 {
            if let Some(r) = ino.run.take() {
                self.release_run(r);
            }
        }
    }
}

pub fn blocks_for(end: u64) -> u32 {
    (end.div_ceil(4096).max(1) as u32).next_power_of_two()
}

pub struct Model {
    pub names: BTreeMap<String, Node>,
    pub inodes: HashMap<u64, MInode>,
    pub next_id: u64,
    pub alloc: Alloc,
    /// Inodes the store can hold besides the root.
    pub max_inodes: usize,
}

pub type Res<T> = Result<T, i32>;

pub fn parent_of(p: &str) -> &str {
    match p.rfind('/') {
        Some(0) => "/",
        Some(i) => &p[..i],
        None => "/",
    }
}

impl Model {
    pub fn new(total_chunks: usize, max_files: u32) -> Model {
        Model {
            names: BTreeMap::new(),
            inodes: HashMap::new(),
            next_id: 0,
            alloc: Alloc {
                stack: (0..total_chunks as u64).rev().collect(),
                small: BTreeMap::new(),
                hint: 0,
            },
            max_inodes: max_files as usize - 1,
        }
    }

    pub fn get(&self, p: &str) -> Option<Node> {
        if p == "/" {
            return Some(Node::Dir);
        }
        self.names.get(p).copied()
    }

    /// Errors of resolving every component of `p` before its last (as the store does).
    pub fn check_parent(&self, p: &str) -> Res<()> {
        let mut cur = String::new();
        let comps: Vec<&str> = p.split('/').filter(|c| !c.is_empty()).collect();
        for c in &comps[..comps.len() - 1] {
            cur.push('/');
            cur.push_str(c);
            match self.get(&cur) {
                None => return Err(libc::ENOENT),
                Some(Node::File(_)) => return Err(libc::ENOTDIR),
                Some(Node::Dir) => {}
            }
        }
        Ok(())
    }

    pub fn lookup(&self, p: &str) -> Res<Node> {
        self.check_parent(p)?;
        self.get(p).ok_or(libc::ENOENT)
    }

    /// Inode slots in use: directories, inodes, and link entries (every name of a file
    /// but its own).
    pub fn live_inodes(&self) -> usize {
        self.names.values().filter(|n| **n == Node::Dir).count()
            + self.inodes.len()
            + self
                .inodes
                .values()
                .map(|i| i.names - usize::from(i.own.is_some()))
                .sum::<usize>()
    }

    pub fn used_chunks(&self) -> usize {
        self.inodes.values().map(|i| i.chunks.len()).sum::<usize>() + self.alloc.small.len()
    }

    /// The inode is gone: its chunks and run go back (chunks first, as the store frees).
    pub fn release(&mut self, id: u64) {
        let mut ino = self.inodes.remove(&id).unwrap();
        self.alloc.free_from(&mut ino, 0);
    }

    pub fn children(&self, dir: &str) -> Vec<(String, Node)> {
        let prefix = if dir == "/" {
            "/".to_string()
        } else {
            format!("{dir}/")
        };
        self.names
            .iter()
            .filter(|(k, _)| k.starts_with(&prefix) && !k[prefix.len()..].contains('/'))
            .map(|(k, v)| (k[prefix.len()..].to_string(), *v))
            .collect()
    }

    /// A new file inode named `path`.
    pub fn new_inode(&mut self, path: &str) -> u64 {
        self.next_id += 1;
        self.inodes.insert(
            self.next_id,
            MInode {
                names: 1,
                own: Some(path.to_string()),
                ..Default::default()
            },
        );
        self.next_id
    }

    /// The name `path` of inode `id` went away (already removed from `names`).
    pub fn drop_name(&mut self, id: u64, path: &str) {
        let ino = self.inodes.get_mut(&id).unwrap();
        ino.names -= 1;
        if ino.own.as_deref() == Some(path) {
            ino.own = None;
        }
        if ino.names == 0 && ino.handles == 0 {
            self.release(id);
        }
    }

    pub fn close(&mut self, id: u64) {
        let ino = self.inodes.get_mut(&id).unwrap();
        ino.handles -= 1;
        if ino.handles == 0 && ino.names == 0 {
            self.release(id);
        }
    }

    /// write(): a small file takes (or moves to) a run large enough; otherwise allocate
    /// missing chunks in order (after moving a run into chunk 0); when none is left, a
    /// short write if something was written, else ENOSPC.
    pub fn write(&mut self, id: u64, off: u64, data: &[u8]) -> Res<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        let ino = self.inodes.get_mut(&id).unwrap();
        let alloc = &mut self.alloc;
        let end = off + data.len() as u64;
        if ino.chunks.is_empty() && end <= SMALL_MAX {
            let fits = ino.run.is_some_and(|r| (r.2 as u64) * 4096 >= end);
            let ok = fits
                || match alloc.take_run(blocks_for(end)) {
                    Some(new) => {
                        if let Some(old) = ino.run.replace(new) {
                            alloc.release_run(old);
                        }
                        true
                    }
                    None => false,
                };
            if ok {
                if ino.data.len() < end as usize {
                    ino.data.resize(end as usize, 0);
                }
                ino.data[off as usize..end as usize].copy_from_slice(data);
                return Ok(data.len());
            }
        }
        if let Some(r) = ino.run {
            let Some(c) = alloc.stack.pop() else {
                return Err(libc::ENOSPC);
            };
            ino.chunks.insert(0, c);
            ino.run = None;
            alloc.release_run(r);
        }
        let mut done = 0usize;
        while done < data.len() {
            let p = off + done as u64;
            let l = p / CS;
            let k = ((CS - p % CS) as usize).min(data.len() - done);
            if let std::collections::btree_map::Entry::Vacant(slot) = ino.chunks.entry(l) {
                let Some(c) = alloc.stack.pop() else {
                    if done == 0 {
                        return Err(libc::ENOSPC);
                    }
                    break;
                };
                slot.insert(c);
            }
            done += k;
        }
        let end = off as usize + done;
        if ino.data.len() < end {
            ino.data.resize(end, 0);
        }
        ino.data[off as usize..end].copy_from_slice(&data[..done]);
        Ok(done)
    }

    pub fn set_len(&mut self, id: u64, len: u64) {
        let ino = self.inodes.get_mut(&id).unwrap();
        if len < ino.data.len() as u64 {
            self.alloc.free_from(ino, len.div_ceil(CS));
        }
        ino.data.resize(len as usize, 0);
    }
}
