//! Memory-mode regions: the application's memory registered with `VELOC_Mem_protect`,
//! serialised into one store file per rank and checkpoint, and restored into the
//! registered memory. This module holds the only raw-memory access of the library.
//!
//! Format: `CKVELOC1`, then per region: name length (u32 LE), name bytes, id (i32 LE),
//! size (u64 LE), the bytes.

use ckptfs_compat::{CompatError, Result};
use std::collections::BTreeMap;

/// A registered region (the application guarantees, as VeloC's contract says, that the
/// memory stays valid while registered).
#[derive(Debug, Clone, Copy)]
pub struct Region {
    /// Start address.
    pub ptr: usize,
    /// Size in bytes (count * base_size).
    pub len: usize,
}

/// Regions by (region name, id); the name is "" for VELOC_Mem_protect.
pub type Regions = BTreeMap<(String, i32), Region>;

const MAGIC: &[u8; 8] = b"CKVELOC1";

/// Serialise the regions `which` accepts.
pub fn serialize(regions: &Regions, which: &dyn Fn(&str, i32) -> bool) -> Vec<u8> {
    let total: usize = regions.values().map(|r| r.len + 64).sum();
    let mut out = Vec::with_capacity(total + 8);
    out.extend_from_slice(MAGIC);
    for ((name, id), r) in regions {
        if !which(name, *id) {
            continue;
        }
        out.extend_from_slice(&(name.len() as u32).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&(r.len as u64).to_le_bytes());
        if r.len > 0 {
            // SAFETY: the region was registered with VELOC_Mem_protect, whose contract
            // keeps ptr..ptr+len valid for reading while it is registered.
            let bytes = unsafe { std::slice::from_raw_parts(r.ptr as *const u8, r.len) };
            out.extend_from_slice(bytes);
        }
    }
    out
}

/// The saved regions of a serialised checkpoint: (name, id) -> byte range in `data`.
pub fn parse(data: &[u8]) -> Result<BTreeMap<(String, i32), std::ops::Range<usize>>> {
    let bad = || CompatError::Invalid("memory checkpoint is damaged (bad format)".into());
    if data.len() < 8 || &data[..8] != MAGIC {
        return Err(bad());
    }
    let mut at: usize = 8;
    let mut take = |n: usize| -> Result<std::ops::Range<usize>> {
        let end = at.checked_add(n).filter(|e| *e <= data.len()).ok_or_else(bad)?;
        let r = at..end;
        at = end;
        Ok(r)
    };
    let mut out = BTreeMap::new();
    loop {
        let Ok(r) = take(4) else { break };
        let nl = u32::from_le_bytes(data[r].try_into().map_err(|_| bad())?) as usize;
        let name = String::from_utf8(data[take(nl)?].to_vec()).map_err(|_| bad())?;
        let id = i32::from_le_bytes(data[take(4)?].try_into().map_err(|_| bad())?);
        let len = u64::from_le_bytes(data[take(8)?].try_into().map_err(|_| bad())?);
        let len = usize::try_from(len).map_err(|_| bad())?;
        out.insert((name, id), take(len)?);
    }
    Ok(out)
}

/// Copy `bytes` into the registered region `r` (which must be large enough).
pub fn restore(r: &Region, bytes: &[u8]) -> Result<()> {
    if bytes.len() > r.len {
        return Err(CompatError::Invalid(format!(
            "the saved region has {} bytes, the registered one {}",
            bytes.len(),
            r.len
        )));
    }
    if !bytes.is_empty() {
        // SAFETY: the region was registered with VELOC_Mem_protect, whose contract keeps
        // ptr..ptr+len valid for writing while registered; bytes.len() <= len, and the
        // source is our own buffer, so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), r.ptr as *mut u8, bytes.len()) };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let a = [1u8, 2, 3, 4];
        let mut b = vec![9u64; 3];
        let mut regs = Regions::new();
        regs.insert(
            (String::new(), 0),
            Region {
                ptr: a.as_ptr() as usize,
                len: 4,
            },
        );
        regs.insert(
            ("grid".into(), 7),
            Region {
                ptr: b.as_ptr() as usize,
                len: 24,
            },
        );
        let data = serialize(&regs, &|_, _| true);
        let p = parse(&data).unwrap();
        assert_eq!(&data[p[&(String::new(), 0)].clone()], &a);
        b[1] = 0;
        restore(
            &Region {
                ptr: b.as_mut_ptr() as usize,
                len: 24,
            },
            &data[p[&("grid".into(), 7)].clone()],
        )
        .unwrap();
        assert_eq!(b, vec![9, 9, 9]);
        assert!(restore(
            &Region {
                ptr: b.as_mut_ptr() as usize,
                len: 3
            },
            &[0; 4]
        )
        .is_err());
        assert!(parse(&data[..data.len() - 1]).is_err());
        assert!(parse(b"nonsense").is_err());
        let some = serialize(&regs, &|n, _| n.is_empty());
        assert_eq!(parse(&some).unwrap().len(), 1);
    }
}
