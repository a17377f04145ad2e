//! The PFS level's read side: a drained file read back chunk by chunk, each chunk
//! checked against its manifest CRC32C before it is handed on, from a descriptor opened
//! beneath the destination root without following symbolic links (restore input,
//! docs/design.md "Threat model: restore input").

use crate::beneath::Dir;
use crate::error::{AgentError, Refusal};
use crate::manifest::Entry;
use crate::pfs::find::{open_error, open_sub, Found};
use ckptfs_level::{ChunkReader, IoPart, LevelError, Stored, Version};
use ckptfs_store::checksum::crc32c;
use std::fs::File;
use std::io::{self, Read};
use std::path::PathBuf;

/// Reads one manifest entry's data file.
pub(crate) struct PfsReader {
    src: File,
    file: PathBuf,
    entry: Entry,
    stored: Stored,
    buf: Vec<u8>,
}

/// A manifest entry as a stored copy (the PFS has no inode generations: identity is
/// size, mtime and CRC32C).
pub(crate) fn stored_of(e: &Entry) -> Stored {
    Stored {
        path: e.store_path.clone(),
        version: Version {
            ino: 0,
            generation: 0,
            size: e.size,
            mtime_ns: e.mtime_ns,
            crc32c: Some(e.crc32c),
            serial: 0,
        },
        mode: e.mode,
        chunk_size: e.chunk_size,
        chunk_crc32c: e.chunk_crc32c.clone(),
    }
}

impl PfsReader {
    /// Open the data file of `f` beneath its destination root, one component at a time
    /// without following symbolic links, and check it is what its manifest describes:
    /// the same directory the manifest was read from, a regular file, the manifest's
    /// owner, the manifest's size.
    pub(crate) fn open(f: &Found) -> Result<PfsReader, AgentError> {
        let mut path = f.root.clone();
        let mut dir = Dir::open_root(&f.root).map_err(|e| AgentError::dest("open", &f.root, e))?;
        for c in &f.rel {
            path.push(c);
            dir = open_sub(&dir, c, &path)?
                .ok_or_else(|| AgentError::dest("open", &path, io::Error::from_raw_os_error(libc::ENOENT)))?;
        }
        let id = dir.ident().map_err(|e| AgentError::dest("stat", &path, e))?;
        if (id.dev, id.ino) != f.dir_id {
            return Err(AgentError::Refused {
                path,
                reason: Refusal::DirChanged,
            });
        }
        path.push(&f.name);
        let (file, id) = dir.open_file(&f.name).map_err(|e| open_error("open", &path, e))?;
        if id.uid != f.manifest_uid {
            return Err(AgentError::Refused {
                path,
                reason: Refusal::Owner {
                    file: id.uid,
                    manifest: f.manifest_uid,
                },
            });
        }
        if id.size != f.entry.size {
            return Err(AgentError::Refused {
                path,
                reason: Refusal::Size {
                    found: id.size,
                    expected: f.entry.size,
                },
            });
        }
        Ok(PfsReader {
            src: file,
            file: path,
            stored: stored_of(&f.entry),
            entry: f.entry.clone(),
            buf: Vec::new(),
        })
    }
}

fn backend(e: AgentError) -> LevelError {
    LevelError::backend(e.errno(), e)
}

impl ChunkReader for PfsReader {
    fn stored(&self) -> &Stored {
        &self.stored
    }

    fn read_chunk(
        &mut self,
        i: u64,
        sink: &mut dyn FnMut(&[IoPart<'_>]) -> Result<(), LevelError>,
    ) -> Result<(), LevelError> {
        let e = &self.entry;
        // check_entry bounded chunk_size to the store's legal range (at most 64 MiB).
        let cs = e.chunk_size;
        let off = i * cs;
        if off >= e.size {
            return Ok(());
        }
        let n = (e.size - off).min(cs) as usize;
        let Some(want) = e.chunk_crc32c.get(i as usize) else {
            return Err(backend(AgentError::Mismatch {
                path: self.file.clone(),
                chunk: i,
                offset: off,
                end: off + n as u64,
            }));
        };
        self.buf.resize(n, 0);
        self.src.read_exact(&mut self.buf).map_err(|err| {
            backend(if err.kind() == io::ErrorKind::UnexpectedEof {
                AgentError::Refused {
                    path: self.file.clone(),
                    reason: Refusal::Size {
                        found: off,
                        expected: e.size,
                    },
                }
            } else {
                AgentError::dest("read", &self.file, err)
            })
        })?;
        if crc32c(&self.buf) != *want {
            return Err(backend(AgentError::Mismatch {
                path: self.file.clone(),
                chunk: i,
                offset: off,
                end: off + n as u64,
            }));
        }
        sink(&[IoPart::Buf(&self.buf)])
    }

    /// Nothing may follow the manifest's size.
    fn finish(mut self: Box<Self>) -> Result<(), LevelError> {
        let mut one = [0u8; 1];
        let n = self
            .src
            .read(&mut one)
            .map_err(|err| backend(AgentError::dest("read", &self.file, err)))?;
        if n != 0 {
            return Err(backend(AgentError::Refused {
                path: self.file.clone(),
                reason: Refusal::Size {
                    found: self.entry.size + 1,
                    expected: self.entry.size,
                },
            }));
        }
        Ok(())
    }
}
