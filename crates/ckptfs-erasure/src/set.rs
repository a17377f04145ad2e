//! An erasure set over its members' levels: encode, state, recover, rebuild.
//!
//! Each member's part stays where it is (its files on its own level); parity shards and
//! the header go to the members' levels under [`NAMESPACE`] (a store namespace
//! applications do not see):
//!
//! ```text
//! /.ckptfs/erasure/DATASET/SET/EPOCH/p.STRIPE.ROW   one parity shard (chunk CRCs on the level)
//! /.ckptfs/erasure/DATASET/SET/header               the header (JSON), on every member
//! /.ckptfs/erasure/DATASET/SET/encoding             the epoch being encoded (8 bytes)
//! ```
//!
//! Every path is known from the dataset, the set, the epoch and the layout: nothing is
//! found by listing (a node store does not list its `/.ckptfs` namespace).
//!
//! Order of an encode: read each stripe's data segments, compute its parity, store each
//! shard at its holder and read it back (every chunk checked); only when every shard of
//! the set is stored and verified is the header written to every member. A header is
//! therefore the proof that its epoch's parity was whole; a member lost before that
//! leaves no header anywhere (the set is not "protected"), and [`ErasureSet::state`]
//! checks that every member still has its header, parity and files before answering
//! `Protected`.
//!
//! The encode is in `encode.rs`, the rebuild (and the shard-source interface the node
//! daemons use to rebuild across the network) in `recover.rs`.

use crate::codec::Scheme;
use crate::layout::{FileRecord, Header, Layout, MAX_HEADER};
use crate::ErasureError;
use ckptfs_level::mem::{stored_of, BufReader};
use ckptfs_level::{
    CostMeter, IoPart, Level, LevelError, LevelId, MoveOptions, Mover, Part, PartFile, Recovered,
    SetProtection, SetState,
};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

/// The store directory of erasure data.
pub const NAMESPACE: &str = "/.ckptfs/erasure";
/// Chunk size of parity shards' CRCs.
pub const PARITY_CHUNK: u64 = 1 << 20;

/// A path component for a dataset or set name: kept when it is plain
/// (`[A-Za-z0-9_-][A-Za-z0-9._-]*`, at most 128 bytes), else `x` + hex.
pub fn component(s: &str) -> String {
    let plain = !s.is_empty()
        && s.len() <= 128
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if plain && !s.starts_with('x') {
        s.to_string()
    } else {
        let mut out = String::from("x");
        for b in s.bytes().take(512) {
            out.push_str(&format!("{b:02x}"));
        }
        out
    }
}

/// The directory of `dataset`'s encodings by `set`.
pub fn dataset_dir(dataset: &str, set: &str) -> String {
    format!("{NAMESPACE}/{}/{}", component(dataset), component(set))
}

pub(crate) fn epoch_dir(dataset: &str, set: &str, epoch: u64) -> String {
    format!("{}/{epoch:016x}", dataset_dir(dataset, set))
}

pub(crate) fn parity_path(dataset: &str, set: &str, epoch: u64, s: usize, j: usize) -> String {
    format!("{}/p.{s}.{j}", epoch_dir(dataset, set, epoch))
}

pub(crate) fn header_path(dataset: &str, set: &str) -> String {
    format!("{}/header", dataset_dir(dataset, set))
}

pub(crate) fn marker_path(dataset: &str, set: &str) -> String {
    format!("{}/encoding", dataset_dir(dataset, set))
}

/// What [`ErasureSet::rebuild`] did.
#[derive(Debug, Clone, Default)]
pub struct Rebuilt {
    /// The members whose parts were rebuilt, with what was written.
    pub members: Vec<(String, Recovered)>,
    /// The epoch of the new encoding.
    pub epoch: u64,
}

/// An erasure set: its members (node ids) and each member's level (its node store; a
/// replacement's store after [`ErasureSet::replace`]).
pub struct ErasureSet {
    pub(crate) name: String,
    pub(crate) scheme: Scheme,
    pub(crate) members: Vec<String>,
    levels: RwLock<Vec<Arc<dyn Level>>>,
    pending: Mutex<BTreeMap<String, BTreeMap<String, Part>>>,
    pub(crate) mover: Mover,
}

impl std::fmt::Debug for ErasureSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ErasureSet")
            .field("name", &self.name)
            .field("scheme", &self.scheme)
            .field("members", &self.members)
            .finish()
    }
}

pub(crate) fn le(e: ErasureError) -> LevelError {
    LevelError::from(e)
}

/// Read `out.len()` bytes at part offset `off` of a part whose files are `files`, from
/// `level`; bytes past the part's end are zeros. Each file must still be the recorded
/// version (its reader checks every chunk read against its CRC32C).
pub(crate) fn read_range(
    level: &dyn Level,
    files: &[FileRecord],
    off: u64,
    out: &mut [u8],
) -> Result<(), LevelError> {
    out.fill(0);
    let end = off + out.len() as u64;
    let mut at = 0u64; // part offset of the file's start
    for f in files {
        let (fs, fe) = (at, at + f.size);
        at = fe;
        if fe <= off || fs >= end || f.size == 0 {
            continue;
        }
        let mut r = level.get(&f.path)?;
        let v = r.stored().version;
        if v.size != f.size || v.crc32c != Some(f.crc32c) {
            return Err(LevelError::Changed(f.path.clone()));
        }
        let cs = r.stored().chunk_size.max(1);
        // File-relative range wanted.
        let a = off.max(fs) - fs;
        let b = end.min(fe) - fs;
        for c in a / cs..b.div_ceil(cs) {
            let cstart = c * cs;
            let mut pos = cstart;
            r.read_chunk(c, &mut |parts: &[IoPart<'_>]| {
                for p in parts {
                    let (ps, pe) = (pos, pos + p.len() as u64);
                    pos = pe;
                    let (lo, hi) = (ps.max(a), pe.min(b));
                    if lo >= hi {
                        continue;
                    }
                    let dst = (fs + lo - off) as usize;
                    let dst = &mut out[dst..dst + (hi - lo) as usize];
                    match p {
                        IoPart::Buf(b) => dst.copy_from_slice(&b[(lo - ps) as usize..(hi - ps) as usize]),
                        // Shared memory is copied out whole (never sliced as `&[u8]`).
                        _ if lo == ps && hi == pe => p.copy_to(dst),
                        _ => {
                            let mut tmp = vec![0u8; p.len()];
                            p.copy_to(&mut tmp);
                            dst.copy_from_slice(&tmp[(lo - ps) as usize..(hi - ps) as usize]);
                        }
                    }
                }
                Ok(())
            })?;
        }
    }
    Ok(())
}

/// Read a whole small copy (bounded by `max`).
pub(crate) fn read_all(level: &dyn Level, path: &str, max: u64) -> Result<Vec<u8>, LevelError> {
    let mut r = level.get(path)?;
    let size = r.stored().version.size;
    if size > max {
        return Err(le(ErasureError::Header(format!(
            "{path}: {size} bytes is too long"
        ))));
    }
    let mut out = Vec::with_capacity(size as usize);
    for i in 0..r.stored().chunks() {
        r.read_chunk(i, &mut |parts| {
            parts.iter().for_each(|p| p.extend_vec(&mut out));
            Ok(())
        })?;
    }
    r.finish()?;
    Ok(out)
}

/// Write `bytes` as `path` on `level` through the mover, then read it back checked;
/// returns the copy as written (CRCs per `chunk` bytes).
pub(crate) fn put_checked(
    mover: &Mover,
    level: &dyn Level,
    path: &str,
    bytes: &[u8],
    chunk: u64,
    epoch: u64,
) -> Result<ckptfs_level::Stored, LevelError> {
    let src = stored_of(path, bytes, chunk, now_ns(), epoch);
    let w = level.put(&src)?;
    mover.copy_open(
        Box::new(BufReader::new(src.clone(), bytes)),
        w,
        (&CostMeter::default(), level.meter()),
    )?;
    level.verify(path, &src.version)?;
    // The source's description: its chunk CRCs are in `chunk` units (the level may
    // keep its own chunk size).
    Ok(src)
}

pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl ErasureSet {
    /// A set named `name` (`set0`) over `members` (node id and its level, set order).
    pub fn new(
        name: &str,
        scheme: Scheme,
        members: Vec<(String, Arc<dyn Level>)>,
    ) -> Result<ErasureSet, ErasureError> {
        Layout::new(scheme, members.len(), 0)?;
        let mut ids: Vec<&String> = members.iter().map(|m| &m.0).collect();
        ids.sort();
        ids.dedup();
        if ids.len() != members.len() {
            return Err(ErasureError::Layout("a member appears twice in the set".into()));
        }
        let (members, levels) = members.into_iter().unzip();
        Ok(ErasureSet {
            name: name.to_string(),
            scheme,
            members,
            levels: RwLock::new(levels),
            pending: Mutex::new(BTreeMap::new()),
            mover: Mover::default(),
        })
    }

    /// Move every byte this set writes (parity, headers, rebuilt files) with a mover of
    /// these options: `max_bw` throttles encoding and rebuilds so that they stay in the
    /// background of the application (as the other levels' movers do).
    pub fn with_mover(mut self, opts: MoveOptions) -> ErasureSet {
        self.mover = Mover::new(opts);
        self
    }

    /// The set's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its scheme.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// Put `level` in place of `member`'s (a replacement node's empty store).
    pub fn replace(&self, member: &str, level: Arc<dyn Level>) -> Result<(), ErasureError> {
        let i = self.index(member)?;
        self.levels.write().expect("levels lock")[i] = level;
        Ok(())
    }

    pub(crate) fn index(&self, member: &str) -> Result<usize, ErasureError> {
        self.members
            .iter()
            .position(|m| m == member)
            .ok_or_else(|| ErasureError::Layout(format!("{member:?} is not a member of set {}", self.name)))
    }

    pub(crate) fn levels(&self) -> Vec<Arc<dyn Level>> {
        self.levels.read().expect("levels lock").clone()
    }

    pub(crate) fn read_marker(level: &dyn Level, dataset: &str, set: &str) -> Option<u64> {
        let b = read_all(level, &marker_path(dataset, set), 8).ok()?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    /// Remove every encoding of `dataset` by this set from every reachable member.
    pub fn forget(&self, dataset: &str) {
        let levels = self.levels();
        let mut epochs: Vec<u64> = self
            .read_headers(dataset)
            .into_iter()
            .flatten()
            .map(|h| h.epoch)
            .collect();
        epochs.extend(
            levels
                .iter()
                .filter_map(|l| Self::read_marker(&**l, dataset, &self.name)),
        );
        epochs.sort_unstable();
        epochs.dedup();
        for (i, l) in levels.iter().enumerate() {
            for &e in &epochs {
                self.drop_parity(&**l, i, dataset, e);
            }
            for path in [header_path(dataset, &self.name), marker_path(dataset, &self.name)] {
                if let Ok(Some(st)) = l.stat(&path) {
                    let _ = l.delete(&path, &st.version);
                }
            }
        }
    }

    /// Each member's header of `dataset` (None where it has none, or none that parses
    /// and names this dataset, set and member list).
    pub(crate) fn read_headers(&self, dataset: &str) -> Vec<Option<Header>> {
        self.levels()
            .iter()
            .map(|l| {
                let b = read_all(&**l, &header_path(dataset, &self.name), MAX_HEADER).ok()?;
                let h = Header::parse(&b).ok()?;
                (h.dataset == dataset && h.set == self.name && h.members == self.members).then_some(h)
            })
            .collect()
    }

    /// Which members of `h`'s encoding are lost (their files, parity or header gone or
    /// changed, or their level unreachable), and whether every survivor has the header.
    pub(crate) fn assess(&self, h: &Header, have: &[Option<u64>]) -> (Vec<usize>, bool) {
        let levels = self.levels();
        let lay = h.layout();
        let mut lost = Vec::new();
        let mut all_headers = true;
        for (i, l) in levels.iter().enumerate() {
            let files_ok = h.parts[i].files.iter().all(|f| {
                matches!(l.stat(&f.path), Ok(Some(s)) if s.version.size == f.size && s.version.crc32c == Some(f.crc32c))
            });
            let parity_ok = lay.held_by(i).iter().all(|&(s, j)| {
                let r = h.parity_of(s, j);
                matches!(l.stat(&parity_path(&h.dataset, &h.set, h.epoch, s, j)), Ok(Some(st)) if st.version.crc32c == Some(r.crc32c) && st.version.size == h.segment)
            });
            let header_ok = have[i] == Some(h.epoch);
            if !files_ok || !parity_ok {
                lost.push(i);
            } else if !header_ok {
                all_headers = false;
            }
        }
        (lost, all_headers)
    }

    pub(crate) fn names(&self, idx: &[usize]) -> Vec<String> {
        idx.iter().map(|&i| self.members[i].clone()).collect()
    }
    /// [`ErasureSet::usable`] as an error a caller can return: too many members lost
    /// (named), or not protected (the state said).
    pub(crate) fn usable_or_err(&self, dataset: &str) -> Result<(Header, Vec<usize>), ErasureError> {
        match self.usable(dataset) {
            Ok((h, lost, _)) => Ok((h, lost)),
            Err(SetState::Lost(names)) => Err(ErasureError::TooManyLost {
                set: self.name.clone(),
                lost: names,
                unreadable: Vec::new(),
                tolerates: self.scheme.parity(),
            }),
            Err(st) => Err(ErasureError::NotProtected(format!(
                "{dataset} on set {}: {st:?}",
                self.name
            ))),
        }
    }

    /// The header of the newest encoding of `dataset` that can be used, with its lost
    /// members; `Err` with the state when none can.
    pub(crate) fn usable(&self, dataset: &str) -> Result<(Header, Vec<usize>, bool), SetState> {
        let per = self.read_headers(dataset);
        let have: Vec<Option<u64>> = per.iter().map(|h| h.as_ref().map(|h| h.epoch)).collect();
        let mut headers: BTreeMap<u64, Header> = BTreeMap::new();
        for h in per.into_iter().flatten() {
            headers.entry(h.epoch).or_insert(h);
        }
        let mut first_lost = None;
        // Newest first. A header exists only once its epoch's parity was whole, so any
        // epoch with at most p lost members can rebuild.
        for h in headers.into_values().rev() {
            let (lost, all_headers) = self.assess(&h, &have);
            if lost.len() <= self.scheme.parity() {
                return Ok((h, lost, all_headers));
            }
            first_lost.get_or_insert(SetState::Lost(self.names(&lost)));
        }
        Err(first_lost.unwrap_or(SetState::Absent))
    }
}

impl SetProtection for ErasureSet {
    fn id(&self) -> LevelId {
        LevelId::new("erasure", self.name.clone())
    }

    fn members(&self) -> Vec<String> {
        self.members.clone()
    }

    fn tolerates(&self) -> usize {
        self.scheme.parity()
    }

    fn memory_overhead(&self) -> f64 {
        let p = self.scheme.parity() as f64;
        p / (self.members.len() as f64 - p)
    }

    /// Records the member's part (a member with no files gives an empty list); the call
    /// that completes the set (every member has given its part of the dataset) encodes
    /// it. Until then `state` answers `InProgress`.
    fn protect(&self, part: &Part) -> Result<(), LevelError> {
        self.index(&part.member).map_err(le)?;
        let ready = {
            let mut p = self.pending.lock().expect("pending lock");
            let e = p.entry(part.dataset.clone()).or_default();
            e.insert(part.member.clone(), part.clone());
            if e.len() == self.members.len() {
                p.remove(&part.dataset)
            } else {
                None
            }
        };
        if let Some(parts) = ready {
            let parts: Vec<Part> = parts.into_values().collect();
            self.encode(&part.dataset, &parts).map_err(le)?;
        }
        Ok(())
    }

    fn state(&self, dataset: &str) -> Result<SetState, LevelError> {
        Ok(match self.usable(dataset) {
            Ok((_, lost, true)) if lost.is_empty() => SetState::Protected,
            // Every member's data and parity is there, some header is not (yet).
            Ok((_, lost, false)) if lost.is_empty() => SetState::InProgress,
            Ok((_, lost, _)) => SetState::Degraded(self.names(&lost)),
            // Some members have given their parts, the others not yet.
            Err(SetState::Absent) if self.pending.lock().expect("pending lock").contains_key(dataset) => {
                SetState::InProgress
            }
            Err(st) => st,
        })
    }

    /// The set's id for each file its newest usable encoding records with this size
    /// and CRC32C in `member`'s part; Err naming the lost members when too many are.
    fn locate(
        &self,
        dataset: &str,
        member: &str,
        files: &[PartFile],
    ) -> Result<Vec<Option<LevelId>>, String> {
        let x = self.index(member).map_err(|e| e.to_string())?;
        let (h, _) = self.usable_or_err(dataset).map_err(|e| match e {
            ErasureError::NotProtected(why) => why,
            e => e.to_string(),
        })?;
        let recorded: BTreeMap<&str, (u64, u32)> = h.parts[x]
            .files
            .iter()
            .map(|f| (f.path.as_str(), (f.size, f.crc32c)))
            .collect();
        Ok(files
            .iter()
            .map(|f| (recorded.get(f.path.as_str()) == Some(&(f.size, f.crc32c))).then(|| self.id()))
            .collect())
    }

    fn recover(&self, dataset: &str, member: &str, into: &dyn Level) -> Result<Recovered, LevelError> {
        let x = self.index(member).map_err(le)?;
        let (h, lost) = self.usable_or_err(dataset).map_err(le)?;
        if !lost.contains(&x) {
            // Its part is whole where it is: copy it.
            let from = self.levels()[x].clone();
            let mut out = Recovered::default();
            for f in &h.parts[x].files {
                let t = self.mover.copy(&*from, into, &f.path)?;
                if !t.stored.version.same_content(&f.stored().version) {
                    return Err(LevelError::Changed(f.path.clone()));
                }
                out.bytes += t.bytes;
                out.files.push(t.stored);
            }
            return Ok(out);
        }
        let part = self.rebuild_part(&h, x, &lost).map_err(le)?;
        self.write_part(&h.parts[x], &part, into)
    }
}
