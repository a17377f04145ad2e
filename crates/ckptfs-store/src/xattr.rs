//! Extended attributes (format 5). An inode's attributes are one record, a file of the
//! system directory, `/.ckptfs/xattr/<ino>.<generation>` (so a reused slot never sees
//! the attributes of the inode it replaces), holding every name and value:
//!
//! ```text
//! "CKXA" u32 count, then per attribute: name_len u16, value_len u32, name, value
//! ```
//!
//! A change writes the whole record to `<ino>.<generation>.new` and renames it over the
//! record: the store's rename is crash-atomic (its intent is replayed by the next
//! namespace locker), so a process killed at any point leaves the old or the new set,
//! and the record's bytes are checksummed like any file's (a flipped byte is EIO). The
//! inode flag [`iflag::XATTRS`] is set before a record is written and cleared after it
//! is removed, so reads of inodes without attributes (the kernel asks for
//! `security.capability` before every write) answer ENODATA without a lookup. The record
//! is removed with the inode's last name; one left by a crash in between names an inode
//! or generation that no longer has a name, and `fsck` reports (`--repair` removes) it.
//!
//! Names: `user.`, `trusted.` and `security.` (who may use which is the front-end's rule:
//! the kernel's for the FUSE mount); `system.` and others are EOPNOTSUPP. Limits as
//! Linux: a name of 1 to 255 bytes (ERANGE), a value up to 64 KiB (E2BIG), and all of an
//! inode's names and values together up to [`XATTR_TOTAL_MAX`] (ENOSPC). Writers of one
//! inode's attributes are serialised within a process (the FUSE daemon); two processes
//! changing the same inode's attributes at the same moment may lose one change.

use crate::error::{Result, StoreError};
use crate::layout::*;
use crate::store::{Ns, Store};
use crate::types::{OpenFlags, SYSTEM_DIR_NAME};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::Mutex;

/// Longest attribute name.
pub const XATTR_NAME_MAX: usize = 255;
/// Largest attribute value.
pub const XATTR_SIZE_MAX: usize = 65536;
/// Most bytes of names and values (with 6 bytes of framing each) one inode's attributes
/// may hold together; a change past it is ENOSPC.
pub const XATTR_TOTAL_MAX: usize = 128 << 10;
/// Directory of the attribute records (under the system directory).
const XATTR_DIR_NAME: &str = "xattr";
const MAGIC: &[u8; 4] = b"CKXA";

/// How [`Store::setxattr`] treats an existing attribute (setxattr(2) flags).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XattrFlags {
    /// `XATTR_CREATE`: EEXIST if it exists.
    pub create: bool,
    /// `XATTR_REPLACE`: ENODATA if it does not.
    pub replace: bool,
}

static WRITERS: Mutex<()> = Mutex::new(());

type Attrs = Vec<(Vec<u8>, Vec<u8>)>;

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > XATTR_NAME_MAX {
        return Err(StoreError::AttrRange(String::from_utf8_lossy(name).into()));
    }
    let ok = ["user.", "trusted.", "security."]
        .iter()
        .any(|p| name.starts_with(p.as_bytes()) && name.len() > p.len());
    if !ok {
        return Err(StoreError::Unsupported(
            "extended attributes outside the user., trusted. and security. namespaces",
        ));
    }
    Ok(())
}

fn record_path(ino: u64, gen: u32) -> String {
    format!("/{SYSTEM_DIR_NAME}/{XATTR_DIR_NAME}/{ino}.{gen}")
}

fn encode(a: &Attrs) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + a.iter().map(|(n, x)| 6 + n.len() + x.len()).sum::<usize>());
    v.extend_from_slice(MAGIC);
    v.extend_from_slice(&(a.len() as u32).to_le_bytes());
    for (n, x) in a {
        v.extend_from_slice(&(n.len() as u16).to_le_bytes());
        v.extend_from_slice(&(x.len() as u32).to_le_bytes());
        v.extend_from_slice(n);
        v.extend_from_slice(x);
    }
    v
}

fn decode(b: &[u8]) -> Option<Attrs> {
    if b.len() < 8 || &b[..4] != MAGIC {
        return None;
    }
    let count = u32::from_le_bytes(b[4..8].try_into().ok()?) as usize;
    let mut out = Vec::new();
    let mut at = 8;
    for _ in 0..count {
        let h = b.get(at..at + 6)?;
        let nl = u16::from_le_bytes([h[0], h[1]]) as usize;
        let vl = u32::from_le_bytes([h[2], h[3], h[4], h[5]]) as usize;
        at += 6;
        let n = b.get(at..at + nl)?.to_vec();
        at += nl;
        let x = b.get(at..at.checked_add(vl)?)?.to_vec();
        at += vl;
        if n.is_empty() || nl > XATTR_NAME_MAX || vl > XATTR_SIZE_MAX {
            return None;
        }
        out.push((n, x));
    }
    (at == b.len()).then_some(out)
}

fn size_of(a: &Attrs) -> usize {
    a.iter().map(|(n, x)| 6 + n.len() + x.len()).sum()
}

impl Store {
    /// The inode number and generation of `ino` (ENOENT when not in use).
    fn xattr_key(&self, ino: u64) -> Result<(u64, u32)> {
        let st = self.stat_ino(ino)?;
        Ok((st.ino, st.generation))
    }

    /// Whether inode `ino` may have attributes (the flag, read without a lock).
    fn may_have_xattrs(&self, ino: u64) -> bool {
        if ino == 0 || ino > self.seg.layout.max_files as u64 {
            return true; // let the lookup answer
        }
        self.seg.inode((ino - 1) as u32).flags.load(Acquire) & iflag::XATTRS != 0
    }

    fn read_xattrs(&self, ino: u64, gen: u32) -> Result<Attrs> {
        if !self.may_have_xattrs(ino) {
            return Ok(Vec::new());
        }
        let p = record_path(ino, gen);
        let mut h = match self.open(&p, OpenFlags::READ, 0) {
            Ok(h) => h,
            Err(StoreError::NotFound(_)) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut b = vec![0u8; h.size() as usize];
        let n = h.read_full(&mut b)?;
        h.close()?;
        b.truncate(n);
        decode(&b).ok_or_else(|| StoreError::Damaged {
            path: p,
            what: "extended attribute record does not parse".into(),
        })
    }

    fn write_xattrs(&self, ino: u64, gen: u32, a: &Attrs) -> Result<()> {
        let p = record_path(ino, gen);
        let fid = (ino - 1) as u32;
        if a.is_empty() {
            match self.unlink(&p) {
                Ok(()) | Err(StoreError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
            self.seg.inode(fid).flags.fetch_and(!iflag::XATTRS, Release);
            return Ok(());
        }
        for d in [
            format!("/{SYSTEM_DIR_NAME}"),
            format!("/{SYSTEM_DIR_NAME}/{XATTR_DIR_NAME}"),
        ] {
            match self.mkdir(&d, 0o700) {
                Ok(_) | Err(StoreError::Exists(_)) => {}
                Err(e) => return Err(e),
            }
        }
        self.seg.inode(fid).flags.fetch_or(iflag::XATTRS, Release);
        let tmp = format!("{p}.new");
        let mut h = self.open(&tmp, OpenFlags::CREATE, 0o600)?;
        let r = h.write_all(&encode(a));
        let c = h.close();
        r.and(c)?;
        crate::fault::crash_point("xattr-before-rename");
        self.rename(&tmp, &p)
    }

    /// Set extended attribute `name` of inode `ino` to `value`.
    pub fn setxattr_ino(&self, ino: u64, name: &[u8], value: &[u8], flags: XattrFlags) -> Result<()> {
        check_name(name)?;
        if value.len() > XATTR_SIZE_MAX {
            return Err(StoreError::AttrTooBig(String::from_utf8_lossy(name).into()));
        }
        let _w = WRITERS.lock().unwrap_or_else(|e| e.into_inner());
        let (ino, gen) = self.xattr_key(ino)?;
        let mut a = self.read_xattrs(ino, gen)?;
        match a.iter().position(|(n, _)| n == name) {
            Some(_) if flags.create => return Err(StoreError::Exists(String::from_utf8_lossy(name).into())),
            Some(i) => a[i].1 = value.to_vec(),
            None if flags.replace => return Err(StoreError::NoAttr(String::from_utf8_lossy(name).into())),
            None => a.push((name.to_vec(), value.to_vec())),
        }
        if size_of(&a) > XATTR_TOTAL_MAX {
            return Err(StoreError::NoSpace);
        }
        self.write_xattrs(ino, gen, &a)?;
        self.touch_ctime(ino, gen);
        Ok(())
    }

    /// The value of extended attribute `name` of inode `ino` (ENODATA if it has none).
    pub fn getxattr_ino(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        check_name(name)?;
        if !self.may_have_xattrs(ino) {
            self.xattr_key(ino)?;
            return Err(StoreError::NoAttr(String::from_utf8_lossy(name).into()));
        }
        let (ino, gen) = self.xattr_key(ino)?;
        self.read_xattrs(ino, gen)?
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .ok_or_else(|| StoreError::NoAttr(String::from_utf8_lossy(name).into()))
    }

    /// The names of inode `ino`'s extended attributes, in the order they were set.
    pub fn listxattr_ino(&self, ino: u64) -> Result<Vec<Vec<u8>>> {
        let (ino, gen) = self.xattr_key(ino)?;
        Ok(self.read_xattrs(ino, gen)?.into_iter().map(|(n, _)| n).collect())
    }

    /// Remove extended attribute `name` of inode `ino` (ENODATA if it has none).
    pub fn removexattr_ino(&self, ino: u64, name: &[u8]) -> Result<()> {
        check_name(name)?;
        let _w = WRITERS.lock().unwrap_or_else(|e| e.into_inner());
        let (ino, gen) = self.xattr_key(ino)?;
        let mut a = self.read_xattrs(ino, gen)?;
        let i = a
            .iter()
            .position(|(n, _)| n == name)
            .ok_or_else(|| StoreError::NoAttr(String::from_utf8_lossy(name).into()))?;
        a.remove(i);
        self.write_xattrs(ino, gen, &a)?;
        self.touch_ctime(ino, gen);
        Ok(())
    }

    /// [`Store::setxattr_ino`] by path (not following a symlink, as lsetxattr(2)).
    pub fn setxattr(&self, path: &str, name: &[u8], value: &[u8], flags: XattrFlags) -> Result<()> {
        self.setxattr_ino(self.stat(path)?.ino, name, value, flags)
    }

    /// [`Store::getxattr_ino`] by path.
    pub fn getxattr(&self, path: &str, name: &[u8]) -> Result<Vec<u8>> {
        self.getxattr_ino(self.stat(path)?.ino, name)
    }

    /// [`Store::listxattr_ino`] by path.
    pub fn listxattr(&self, path: &str) -> Result<Vec<Vec<u8>>> {
        self.listxattr_ino(self.stat(path)?.ino)
    }

    /// [`Store::removexattr_ino`] by path.
    pub fn removexattr(&self, path: &str, name: &[u8]) -> Result<()> {
        self.removexattr_ino(self.stat(path)?.ino, name)
    }

    /// An attribute change sets the inode's ctime (if it is still the same inode).
    fn touch_ctime(&self, ino: u64, gen: u32) {
        let ns = self.ns();
        if let Ok(fid) = self.fid_of_ino(&ns, ino) {
            let i = self.seg.inode(fid);
            if i.igen.load(Relaxed) == gen {
                i.ctime_ns.store(crate::segment::now(), Relaxed);
                self.note_change(fid);
            }
        }
    }

    /// The inode `fid` lost its last name: remove its attribute record (and a `.new` left
    /// by a writer), under the namespace lock the caller holds.
    pub(crate) fn drop_xattrs(&self, ns: &Ns, fid: u32) {
        let seg = &*self.seg;
        let ino = seg.inode(fid);
        if ino.flags.load(Relaxed) & iflag::XATTRS == 0 {
            return;
        }
        let key = format!("{}.{}", fid as u64 + 1, ino.igen.load(Relaxed));
        if let Some(dir) = self
            .lookup_child(ns, ROOT, SYSTEM_DIR_NAME.as_bytes())
            .and_then(|s| self.lookup_child(ns, s, XATTR_DIR_NAME.as_bytes()))
        {
            for n in [key.clone(), format!("{key}.new")] {
                if let Some(r) = self.lookup_child(ns, dir, n.as_bytes()) {
                    if seg.inode(r).kind.load(Acquire) == kind::FILE {
                        self.detach_and_release(ns, r);
                    }
                }
            }
        }
        ino.flags.fetch_and(!iflag::XATTRS, Release);
    }

    /// Attribute records naming no inode with a name (left by a crash between an inode's
    /// last unlink and the record's removal), as their paths. Namespace lock held.
    pub(crate) fn stray_xattr_records(&self, ns: &Ns) -> Vec<(u32, String)> {
        let seg = &*self.seg;
        let Some(dir) = self
            .lookup_child(ns, ROOT, SYSTEM_DIR_NAME.as_bytes())
            .and_then(|s| self.lookup_child(ns, s, XATTR_DIR_NAME.as_bytes()))
        else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut c = seg.inode(dir).first_child.load(Relaxed);
        let mut guard = 0;
        while c != NONE && crate::integrity::fid_ok(seg, c) && guard < seg.layout.max_files {
            guard += 1;
            // SAFETY: namespace lock held.
            let name = String::from_utf8_lossy(unsafe { seg.name_of(c) }).into_owned();
            let base = name.strip_suffix(".new").unwrap_or(&name);
            let live = base.split_once('.').and_then(|(i, g)| {
                let (i, g) = (i.parse::<u64>().ok()?, g.parse::<u32>().ok()?);
                let f = u32::try_from(i.checked_sub(1)?).ok()?;
                let ino = crate::integrity::fid_ok(seg, f).then(|| seg.inode(f))?;
                let k = ino.kind.load(Acquire);
                Some(
                    k != kind::FREE
                        && k != kind::LINK
                        && ino.igen.load(Relaxed) == g
                        && ino.flags.load(Relaxed) & iflag::ORPHAN == 0,
                )
            });
            if live != Some(true) {
                out.push((c, format!("/{SYSTEM_DIR_NAME}/{XATTR_DIR_NAME}/{name}")));
            }
            c = seg.inode(c).next_sib.load(Relaxed);
        }
        out
    }
}

impl Store {
    /// fsck: the inode flag `XATTRS` against the attribute records. A record of a live
    /// inode whose flag is clear (damage: its attributes would read as none) gets the
    /// flag back (the record's bytes carry their own CRCs, so nothing unverified is
    /// served); a flag with no record (damage, or a setter killed before its first
    /// record) is cleared. Returns one description per finding.
    /// Namespace lock held.
    pub(crate) fn fsck_xattr_flags(&self, ns: &Ns, repair: bool) -> Vec<String> {
        let seg = &*self.seg;
        let max = seg.layout.max_files;
        let mut has_record = vec![false; max as usize];
        if let Some(dir) = self
            .lookup_child(ns, ROOT, SYSTEM_DIR_NAME.as_bytes())
            .and_then(|s| self.lookup_child(ns, s, XATTR_DIR_NAME.as_bytes()))
        {
            let mut c = seg.inode(dir).first_child.load(Relaxed);
            let mut guard = 0;
            while c != NONE && crate::integrity::fid_ok(seg, c) && guard < max {
                guard += 1;
                // SAFETY: namespace lock held.
                let name = String::from_utf8_lossy(unsafe { seg.name_of(c) }).into_owned();
                let key = name.split_once('.').and_then(|(i, g)| {
                    let (i, g) = (i.parse::<u64>().ok()?, g.parse::<u32>().ok()?);
                    let f = u32::try_from(i.checked_sub(1)?).ok()?;
                    crate::integrity::fid_ok(seg, f).then_some((f, g))
                });
                if let Some((f, g)) = key {
                    if seg.inode(f).igen.load(Relaxed) == g && seg.inode(c).kind.load(Acquire) == kind::FILE {
                        has_record[f as usize] = true;
                    }
                }
                c = seg.inode(c).next_sib.load(Relaxed);
            }
        }
        let mut out = Vec::new();
        for f in 0..max {
            let ino = seg.inode(f);
            let k = ino.kind.load(Acquire);
            if k == kind::FREE || k == kind::LINK || ino.flags.load(Relaxed) & iflag::ORPHAN != 0 {
                continue;
            }
            let flag = ino.flags.load(Acquire) & iflag::XATTRS != 0;
            if flag == has_record[f as usize] {
                continue;
            }
            let rec = record_path(f as u64 + 1, ino.igen.load(Relaxed));
            if has_record[f as usize] {
                out.push(format!(
                    "inode {}: extended attribute record {rec} exists but the inode's flag is clear{}",
                    f + 1,
                    if repair { "; flag set again" } else { "" }
                ));
                if repair {
                    ino.flags.fetch_or(iflag::XATTRS, Release);
                }
            } else {
                out.push(format!(
                    "inode {}: flagged as having extended attributes but has no record{}",
                    f + 1,
                    if repair { "; flag cleared" } else { "" }
                ));
                if repair {
                    ino.flags.fetch_and(!iflag::XATTRS, Release);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_damaged_ones_do_not_parse() {
        let a: Attrs = vec![
            (b"user.a".to_vec(), b"1".to_vec()),
            (b"trusted.b".to_vec(), vec![]),
        ];
        let b = encode(&a);
        assert_eq!(decode(&b).unwrap(), a);
        for cut in 0..b.len() {
            assert!(decode(&b[..cut]).is_none(), "{cut}");
        }
        let mut bad = b.clone();
        bad[8] = 0; // a name length of 0 with the bytes after it
        assert!(decode(&bad).is_none());
    }
}
