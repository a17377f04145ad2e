//! Rebuilding lost members' parts: from the survivors' data segments and parity shards,
//! every shard checked (data by its level's chunk CRCs, parity against the header's),
//! the result against the recorded whole-part CRC32C.

use crate::codec::Decoder;
use crate::layout::{Header, PartRecord};
use crate::set::{parity_path, read_all, read_range, ErasureSet, Rebuilt};
use crate::ErasureError;
use ckptfs_level::mem::BufReader;
use ckptfs_level::{CostMeter, Level, LevelError, Part, Recovered};

impl ErasureSet {
    /// Rebuild member `x`'s whole part of `h` from the survivors' levels (see
    /// [`rebuild_part`]).
    pub(crate) fn rebuild_part(&self, h: &Header, x: usize, lost: &[usize]) -> Result<Vec<u8>, ErasureError> {
        rebuild_part(h, x, lost, &LevelShards(self))
    }

    /// Write a rebuilt part's files into `into` (each checked chunk by chunk against the
    /// recorded CRCs on the way, and read back).
    pub(crate) fn write_part(
        &self,
        rec: &PartRecord,
        part: &[u8],
        into: &dyn Level,
    ) -> Result<Recovered, LevelError> {
        let mut out = Recovered::default();
        let mut at = 0usize;
        for f in &rec.files {
            let bytes = &part[at..at + f.size as usize];
            at += f.size as usize;
            let src = f.stored();
            let w = into.put(&src)?;
            let t = self.mover.copy_open(
                Box::new(BufReader::new(src.clone(), bytes)),
                w,
                (&CostMeter::default(), into.meter()),
            )?;
            into.verify(&f.path, &src.version)?;
            out.bytes += f.size;
            out.files.push(t.stored);
        }
        Ok(out)
    }

    /// Rebuild every lost member of `dataset` into its member's current level (see
    /// [`ErasureSet::replace`]), verify every CRC, then encode the set again.
    pub fn rebuild(&self, dataset: &str) -> Result<Rebuilt, ErasureError> {
        let (h, lost) = self.usable_or_err(dataset)?;
        let levels = self.levels();
        let mut done = Rebuilt::default();
        let mut parts: Vec<Vec<u8>> = Vec::new();
        for &x in &lost {
            parts.push(self.rebuild_part(&h, x, &lost)?);
        }
        for (&x, part) in lost.iter().zip(&parts) {
            let r = self
                .write_part(&h.parts[x], part, &*levels[x])
                .map_err(|e| ErasureError::Member {
                    member: self.members[x].clone(),
                    source: e,
                })?;
            done.members.push((self.members[x].clone(), r));
        }
        let again: Vec<Part> = h
            .parts
            .iter()
            .map(|r| Part {
                dataset: dataset.to_string(),
                member: r.member.clone(),
                files: r.files.iter().map(|f| f.stored()).collect(),
            })
            .collect();
        done.epoch = self.encode(dataset, &again)?.epoch;
        Ok(done)
    }

    /// `member`'s part of `dataset` as recorded, with its bytes: rebuilt from the
    /// survivors when the member is lost, else read from its level (every chunk checked
    /// either way, and the whole part against its recorded CRC32C).
    pub fn part_of(&self, dataset: &str, member: &str) -> Result<(PartRecord, Vec<u8>), ErasureError> {
        let x = self.index(member)?;
        let (h, lost) = self.usable_or_err(dataset)?;
        let rec = h.parts[x].clone();
        let part = if lost.contains(&x) {
            self.rebuild_part(&h, x, &lost)?
        } else {
            let mut b = vec![0u8; rec.size as usize];
            read_range(&*self.levels()[x], &rec.files, 0, &mut b).map_err(|e| ErasureError::Member {
                member: member.to_string(),
                source: e,
            })?;
            if ckptfs_crc::crc32c(&b) != rec.crc32c {
                return Err(ErasureError::Verify(format!(
                    "part of {member} does not match its recorded CRC32C"
                )));
            }
            b
        };
        Ok((rec, part))
    }

    /// Read every byte of the newest encoding (parts and parity) and check it; lists
    /// what does not match (empty when all is well).
    pub fn scrub(&self, dataset: &str) -> Result<Vec<String>, ErasureError> {
        let (h, lost, _) = self
            .usable(dataset)
            .map_err(|st| ErasureError::NotProtected(format!("{dataset} on set {}: {st:?}", self.name)))?;
        let levels = self.levels();
        let mut bad: Vec<String> = self
            .names(&lost)
            .into_iter()
            .map(|m| format!("{m}: lost"))
            .collect();
        for (i, l) in levels.iter().enumerate() {
            if lost.contains(&i) {
                continue;
            }
            for f in &h.parts[i].files {
                if let Err(e) = l.verify(&f.path, &f.stored().version) {
                    bad.push(format!("{}: {e}", self.members[i]));
                }
            }
            for (s, j) in h.layout().held_by(i) {
                let r = h.parity_of(s, j);
                let v = ckptfs_level::Version {
                    size: h.segment,
                    crc32c: Some(r.crc32c),
                    ..Default::default()
                };
                if let Err(e) = l.verify(&parity_path(dataset, &self.name, h.epoch, s, j), &v) {
                    bad.push(format!("{}: parity {s}.{j}: {e}", self.members[i]));
                }
            }
        }
        Ok(bad)
    }
}

/// Where a rebuild reads a stripe's surviving shards: the members' levels in one
/// process ([`ErasureSet`]), or the survivors' daemons across the network (crate
/// `ckptfs-node`). An error is the reason that shard cannot be used; the rebuild then
/// treats it as missing and names it if the stripe has too few left.
pub trait Shards {
    /// Member `i`'s data segment of stripe `s` of `h` into `out` (`h.segment` bytes;
    /// its files as recorded, zeros past the part's end), every chunk read checked.
    fn data(&self, h: &Header, i: usize, s: usize, out: &mut [u8]) -> Result<(), String>;
    /// The parity shard (stripe `s`, row `j`) member `i` holds (`h.segment` bytes;
    /// checked by the rebuild against the header's chunk CRCs).
    fn parity(&self, h: &Header, i: usize, s: usize, j: usize) -> Result<Vec<u8>, String>;
}

struct LevelShards<'a>(&'a ErasureSet);

impl Shards for LevelShards<'_> {
    fn data(&self, h: &Header, i: usize, s: usize, out: &mut [u8]) -> Result<(), String> {
        let lay = h.layout();
        let t = lay.segment_of(i, s).ok_or("not a data member of the stripe")?;
        let levels = self.0.levels();
        read_range(&*levels[i], &h.parts[i].files, t as u64 * lay.segment, out).map_err(|e| e.to_string())
    }

    fn parity(&self, h: &Header, i: usize, s: usize, j: usize) -> Result<Vec<u8>, String> {
        let levels = self.0.levels();
        read_all(
            &*levels[i],
            &parity_path(&h.dataset, &h.set, h.epoch, s, j),
            h.segment,
        )
        .map_err(|e| e.to_string())
    }
}

/// Whether `b` is the parity shard (`s`, `j`) the header recorded: its length and every
/// chunk CRC32C.
pub fn parity_matches(h: &Header, s: usize, j: usize, b: &[u8]) -> bool {
    let r = h.parity_of(s, j);
    b.len() as u64 == h.segment
        && b.chunks(h.chunk_size as usize)
            .map(ckptfs_crc::crc32c)
            .eq(r.chunk_crc32c.iter().copied())
}

/// Rebuild member `x`'s whole part of `h` from the survivors' shards (members in
/// `lost` are not asked). A survivor whose data or parity fails its check counts as
/// lost for that stripe. The result is checked against the recorded part CRC32C.
pub fn rebuild_part(h: &Header, x: usize, lost: &[usize], src: &dyn Shards) -> Result<Vec<u8>, ErasureError> {
    let lay = h.layout();
    let rec = &h.parts[x];
    let seg = lay.segment as usize;
    let p = h.scheme.parity();
    let mut part = vec![0u8; (lay.segment * lay.data() as u64) as usize];
    let mut dec = Decoder::new(h.scheme, lay.data(), seg);
    let name = |i: usize| h.members[i].clone();
    for t in 0..lay.data() {
        let s = lay.stripe_of(x, t);
        if (t as u64) * lay.segment >= rec.size {
            continue; // this segment is padding only
        }
        let dm = lay.data_members(s);
        let hm = lay.holders(s);
        let mut shards: Vec<Option<Vec<u8>>> = Vec::with_capacity(lay.n);
        let mut bad: Vec<String> = Vec::new();
        for &i in &dm {
            if i == x || lost.contains(&i) {
                shards.push(None);
                continue;
            }
            let mut b = vec![0u8; seg];
            match src.data(h, i, s, &mut b) {
                Ok(()) => shards.push(Some(b)),
                Err(e) => {
                    bad.push(format!("{} ({e})", name(i)));
                    shards.push(None);
                }
            }
        }
        for (j, &i) in hm.iter().enumerate() {
            if i == x || lost.contains(&i) {
                shards.push(None);
                continue;
            }
            match src.parity(h, i, s, j) {
                Ok(b) if parity_matches(h, s, j, &b) => shards.push(Some(b)),
                Ok(_) => {
                    bad.push(format!(
                        "{} (parity shard {s}.{j} does not match its recorded CRC32Cs)",
                        name(i)
                    ));
                    shards.push(None);
                }
                Err(e) => {
                    bad.push(format!("{} ({e})", name(i)));
                    shards.push(None);
                }
            }
        }
        let missing = shards.iter().filter(|s| s.is_none()).count();
        if missing > p {
            let mut gone: Vec<String> = lost.iter().map(|&i| name(i)).collect();
            if !gone.contains(&name(x)) {
                gone.push(name(x));
            }
            return Err(ErasureError::TooManyLost {
                set: h.set.clone(),
                lost: gone,
                unreadable: bad,
                tolerates: p,
            });
        }
        dec.decode(&mut shards)?;
        let d = dm.iter().position(|&i| i == x).expect("x is data in its stripe");
        let at = t * seg;
        part[at..at + seg].copy_from_slice(shards[d].as_ref().expect("decoded"));
    }
    part.truncate(rec.size as usize);
    if ckptfs_crc::crc32c(&part) != rec.crc32c {
        return Err(ErasureError::Verify(format!(
            "rebuilt part of {} does not match its recorded CRC32C",
            rec.member
        )));
    }
    Ok(part)
}

/// Member `x`'s data segment `t` taken from its whole `part` (zeros past its end).
pub fn segment_of_part(h: &Header, part: &[u8], t: usize) -> Vec<u8> {
    let seg = h.segment as usize;
    let mut b = vec![0u8; seg];
    let a = (t * seg).min(part.len());
    let e = ((t + 1) * seg).min(part.len());
    b[..e - a].copy_from_slice(&part[a..e]);
    b
}

/// The parity shards of stripe `s` of `h` computed again from its data segments
/// (`data`, in the stripe's data-member order), each checked against the header: the
/// rows that match, or the error naming the first that does not.
pub fn parity_again(h: &Header, s: usize, data: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, ErasureError> {
    let lay = h.layout();
    let mut enc = crate::codec::Encoder::new(h.scheme, lay.data(), h.segment as usize)?;
    let refs: Vec<&[u8]> = data.iter().map(|b| b.as_slice()).collect();
    let mut par = vec![Vec::new(); h.scheme.parity()];
    enc.encode(&refs, &mut par)?;
    for (j, b) in par.iter().enumerate() {
        if !parity_matches(h, s, j, b) {
            return Err(ErasureError::Verify(format!(
                "parity shard {s}.{j} of {} computed again does not match its recorded CRC32Cs",
                h.dataset
            )));
        }
    }
    Ok(par)
}
