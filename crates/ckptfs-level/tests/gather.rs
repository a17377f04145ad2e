//! The mover's gathered, parallel writes: a reader/writer pair that offers them gets
//! writes larger than a chunk from several threads, every chunk checked before its write.

use ckptfs_level::{
    ChunkReader, ChunkWriter, GatherRead, GatherWrite, IoPart, LevelError, MoveOptions, Mover, Stored,
    Version,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const CS: usize = 4096;

struct Reader {
    data: Vec<u8>,
    stored: Stored,
}

impl Reader {
    fn new(data: Vec<u8>, bad: Option<usize>) -> Reader {
        let mut crcs: Vec<u32> = data.chunks(CS).map(ckptfs_crc::crc32c).collect();
        if let Some(b) = bad {
            crcs[b] ^= 1;
        }
        let stored = Stored {
            path: "/g/f".into(),
            version: Version {
                size: data.len() as u64,
                crc32c: Some(ckptfs_crc::crc32c(&data)),
                ..Default::default()
            },
            mode: 0o644,
            chunk_size: CS as u64,
            chunk_crc32c: crcs,
        };
        Reader { data, stored }
    }

    fn chunk(&self, i: u64) -> &[u8] {
        let a = i as usize * CS;
        &self.data[a..(a + CS).min(self.data.len())]
    }
}

impl ChunkReader for Reader {
    fn stored(&self) -> &Stored {
        &self.stored
    }
    fn read_chunk(
        &mut self,
        i: u64,
        sink: &mut dyn FnMut(&[IoPart<'_>]) -> Result<(), LevelError>,
    ) -> Result<(), LevelError> {
        self.check(i)?;
        sink(&[IoPart::Buf(self.chunk(i))])
    }
    fn rereadable(&self) -> bool {
        true
    }
    fn gather(&self) -> Option<&dyn GatherRead> {
        Some(self)
    }
    fn finish(self: Box<Self>) -> Result<(), LevelError> {
        Ok(())
    }
}

impl GatherRead for Reader {
    fn check(&self, i: u64) -> Result<(), LevelError> {
        self.stored.check_chunk("test", i, self.chunk(i))
    }
    fn read_chunks(
        &self,
        first: u64,
        end: u64,
        sink: &mut dyn FnMut(&[IoPart<'_>]) -> Result<(), LevelError>,
    ) -> Result<(), LevelError> {
        let parts: Vec<IoPart<'_>> = (first..end).map(|i| IoPart::Buf(self.chunk(i))).collect();
        sink(&parts)
    }
}

#[derive(Default)]
struct Writer {
    out: Mutex<Vec<u8>>,
    /// (offset, length) of every write.
    writes: Mutex<Vec<(u64, usize)>>,
}

impl GatherWrite for Writer {
    fn write_at(&self, parts: &[IoPart<'_>], off: u64) -> Result<(), LevelError> {
        let mut buf = Vec::new();
        for p in parts {
            p.extend_vec(&mut buf);
        }
        let mut out = self.out.lock().unwrap();
        let end = off as usize + buf.len();
        if out.len() < end {
            out.resize(end, 0);
        }
        out[off as usize..end].copy_from_slice(&buf);
        self.writes.lock().unwrap().push((off, buf.len()));
        Ok(())
    }
}

impl ChunkWriter for Writer {
    fn write_at(&mut self, parts: &[IoPart<'_>], off: u64) -> Result<(), LevelError> {
        GatherWrite::write_at(&*self, parts, off)
    }
    fn gather(&self) -> Option<&dyn GatherWrite> {
        Some(self)
    }
    fn commit(self: Box<Self>) -> Result<Stored, LevelError> {
        unreachable!("fill does not commit")
    }
}

fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 4096) as u8).collect()
}

fn mover(write_size: usize, writers: usize, last: Arc<AtomicU64>) -> Mover {
    Mover::new(MoveOptions {
        write_size,
        writers,
        progress: Some(Arc::new(move |p| last.store(p.file_bytes, Ordering::SeqCst))),
        ..Default::default()
    })
}

#[test]
fn a_gathering_pair_gets_writes_of_several_chunks_from_several_threads() {
    let d = data(40 * CS + 123);
    let last = Arc::new(AtomicU64::new(0));
    let m = mover(8 * CS, 2, last.clone());
    let mut w = Writer::default();
    let src = m.fill(Box::new(Reader::new(d.clone(), None)), &mut w).unwrap();
    assert_eq!(src.version.size, d.len() as u64);
    assert_eq!(*w.out.lock().unwrap(), d);
    let writes = w.writes.lock().unwrap().clone();
    // Fewer writes than chunks, the largest of `write_size`, none larger.
    assert!(writes.len() < 41, "{writes:?}");
    assert_eq!(writes.iter().map(|w| w.1).max(), Some(8 * CS));
    assert_eq!(writes.iter().map(|w| w.1).sum::<usize>(), d.len());
    assert_eq!(m.bytes_moved(), d.len() as u64);
    assert_eq!(last.load(Ordering::SeqCst), d.len() as u64);
}

#[test]
fn without_the_options_the_same_pair_goes_chunk_by_chunk() {
    let d = data(5 * CS);
    let m = mover(0, 1, Arc::new(AtomicU64::new(0)));
    let mut w = Writer::default();
    m.fill(Box::new(Reader::new(d.clone(), None)), &mut w).unwrap();
    assert_eq!(*w.out.lock().unwrap(), d);
    assert!(w.writes.lock().unwrap().iter().all(|w| w.1 == CS));
}

#[test]
fn a_chunk_refused_by_its_crc_is_never_written() {
    let d = data(40 * CS);
    let m = mover(8 * CS, 2, Arc::new(AtomicU64::new(0)));
    let mut w = Writer::default();
    let e = m.fill(Box::new(Reader::new(d, Some(20))), &mut w).unwrap_err();
    assert!(matches!(e, LevelError::Corrupt { chunk: 20, .. }), "{e:?}");
    assert_eq!(e.errno(), libc::EIO);
    let writes = w.writes.lock().unwrap().clone();
    let bad = (20 * CS) as u64..(21 * CS) as u64;
    assert!(
        writes
            .iter()
            .all(|(o, l)| *o + *l as u64 <= bad.start || *o >= bad.end),
        "{writes:?}"
    );
}
