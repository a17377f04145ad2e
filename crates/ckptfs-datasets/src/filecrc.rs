//! Whole-file CRC32C of a store file: read back ([`file_crc`]), or derived from the
//! per-chunk CRC32Cs the store already keeps ([`file_crc_from_chunks`]), reading only
//! the chunks whose checksum is not current.
//!
//! Dataset completion used to read every file back to record its CRC32C; that was 40-45 %
//! of a PyTorch save's stall (docs/python.md). The store keeps a CRC32C of the written
//! bytes of every chunk (recomputed at close when an overwrite made it stale), so the
//! whole-file CRC is a combination of those ([`ckptfs_level::crc::crc_combine`]) with the
//! zeros of holes and unwritten tails appended. Both functions give the same value for
//! the same bytes (tests below and `tests/filecrc.rs`).

use crate::error::Result;
use ckptfs_level::crc::crc_combine;
use ckptfs_store::checksum::{crc32c, crc32c_append, crc32c_append_zeros};
use ckptfs_store::{OpenFlags, Store};
use std::collections::HashMap;

/// CRC32C of a whole store file, every byte read (every chunk's checksum verified on
/// the way): what a restart checks restored bytes with.
pub fn file_crc(store: &Store, path: &str) -> Result<(u64, u32)> {
    let mut f = store.open(path, OpenFlags::READ, 0)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut crc = 0u32;
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        crc = crc32c_append(crc, &buf[..n]);
        total += n as u64;
    }
    Ok((total, crc))
}

/// What [`file_crc_from_chunks`] found: the size, the CRC32C and how many chunks had to
/// be read because their checksum was not current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkCrc {
    /// File size in bytes.
    pub size: u64,
    /// CRC32C of the whole file (equal to [`file_crc`]'s).
    pub crc32c: u32,
    /// Chunks read because their CRC was stale (an overwrite in progress) or covered
    /// more than the file holds.
    pub chunks_read: u64,
}

/// CRC32C of a whole store file from the chunk list's per-chunk CRC32Cs: a chunk not
/// allocated (a hole) counts as zeros, a chunk's bytes past its written mark as zeros;
/// only chunks without a current CRC are read. The file is opened once, so the size and
/// the chunk list are of the same file even if a rename races.
pub fn file_crc_from_chunks(store: &Store, path: &str) -> Result<ChunkCrc> {
    let mut f = store.open(path, OpenFlags::READ, 0)?;
    let size = f.size();
    let chunks = f.chunk_list();
    let cs = store.chunk_size();
    let by: HashMap<u32, _> = chunks.iter().map(|c| (c.logical, c)).collect();
    let mut crc = 0u32;
    let mut chunks_read = 0u64;
    let mut buf = Vec::new();
    for l in 0..size.div_ceil(cs) {
        let len = (size - l * cs).min(cs);
        let c = match by.get(&(l as u32)) {
            None => crc32c_append_zeros(0, len as usize),
            Some(c) => match c.crc {
                Some(cc) if c.written <= len => crc32c_append_zeros(cc, (len - c.written) as usize),
                _ => {
                    buf.resize(len as usize, 0);
                    let mut n = 0;
                    while n < buf.len() {
                        match f.pread(&mut buf[n..], l * cs + n as u64)? {
                            0 => break,
                            k => n += k,
                        }
                    }
                    if n < buf.len() {
                        // Truncated under us: read the whole file as it is now.
                        let (size, crc32c) = file_crc(store, path)?;
                        return Ok(ChunkCrc {
                            size,
                            crc32c,
                            chunks_read: size.div_ceil(cs),
                        });
                    }
                    chunks_read += 1;
                    crc32c(&buf)
                }
            },
        };
        crc = crc_combine(crc, c, len);
    }
    Ok(ChunkCrc {
        size,
        crc32c: crc,
        chunks_read,
    })
}
