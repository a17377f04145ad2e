//! A file's bytes in a caller buffer as a source copy: its [`Stored`] description and a
//! [`ChunkReader`] over it (tests, the conformance suite, small writes from memory).

use crate::{ChunkReader, IoPart, LevelError, Stored, Version};

/// The description of `data` as a copy of `path`: its size, chunk CRCs and whole CRC
/// (`mtime_ns` and `serial` as given; no inode).
pub fn stored_of(path: &str, data: &[u8], chunk_size: u64, mtime_ns: u64, serial: u64) -> Stored {
    let cs = chunk_size.max(1) as usize;
    let chunk_crc32c: Vec<u32> = data.chunks(cs).map(ckptfs_crc::crc32c).collect();
    Stored {
        path: path.to_string(),
        version: Version {
            size: data.len() as u64,
            mtime_ns,
            crc32c: Some(ckptfs_crc::crc32c(data)),
            serial,
            ..Version::default()
        },
        mode: 0o644,
        chunk_size: chunk_size.max(1),
        chunk_crc32c,
    }
}

/// Reads a buffer as the copy `stored` describes, checking each chunk against its CRC
/// like any level's reader (so a description that does not match the bytes is refused).
pub struct BufReader<'a> {
    stored: Stored,
    data: &'a [u8],
}

impl<'a> BufReader<'a> {
    /// A reader of `data` as `stored`.
    pub fn new(stored: Stored, data: &'a [u8]) -> BufReader<'a> {
        BufReader { stored, data }
    }
}

impl ChunkReader for BufReader<'_> {
    fn rereadable(&self) -> bool {
        true
    }

    fn stored(&self) -> &Stored {
        &self.stored
    }

    fn read_chunk(
        &mut self,
        i: u64,
        sink: &mut dyn FnMut(&[IoPart<'_>]) -> Result<(), LevelError>,
    ) -> Result<(), LevelError> {
        let cs = self.stored.chunk_size.max(1);
        let start = (i * cs).min(self.data.len() as u64) as usize;
        let end = ((i + 1) * cs).min(self.data.len() as u64) as usize;
        let chunk = &self.data[start..end];
        self.stored.check_chunk("memory", i, chunk)?;
        sink(&[IoPart::Buf(chunk)])
    }

    fn finish(self: Box<Self>) -> Result<(), LevelError> {
        if self.data.len() as u64 == self.stored.version.size {
            Ok(())
        } else {
            Err(LevelError::Changed(self.stored.path.clone()))
        }
    }
}
