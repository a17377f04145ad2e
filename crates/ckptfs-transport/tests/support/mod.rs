//! What the connection tests (`conn.rs`, the tokio connection; `blocking.rs`, the
//! blocking one) share: their connection settings and a chunk sink into a `Vec`.

#![allow(dead_code)]

use ckptfs_transport::ConnConfig;
use std::time::Duration;

/// Generous timeouts (the machine is loaded): only a test of a timeout waits for one,
/// with a shorter timeout of its own.
pub fn cfg() -> ConnConfig {
    ConnConfig {
        read_timeout: Some(Duration::from_secs(60)),
        write_timeout: Duration::from_secs(60),
        handshake_timeout: Duration::from_secs(60),
        ..ConnConfig::default()
    }
}

/// A sink into a Vec, reading with plain `read` (what the store's landing does with
/// `readv`).
pub struct VecSink {
    pub buf: Vec<u8>,
    pub at: usize,
}

impl ckptfs_transport::ChunkSink for VecSink {
    fn put(&mut self, data: &[u8]) {
        self.buf[self.at..self.at + data.len()].copy_from_slice(data);
        self.at += data.len();
    }
    fn read_from(&mut self, fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<usize> {
        use std::io::Read;
        use std::os::fd::AsRawFd;
        // A second File on the same descriptor, never closed (ManuallyDrop).
        // SAFETY: the descriptor stays open for the call (borrowed); the File is not
        // dropped, so it does not close it.
        let mut f = std::mem::ManuallyDrop::new(unsafe {
            <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd.as_raw_fd())
        });
        let n = f.read(&mut self.buf[self.at..])?;
        self.at += n;
        Ok(n)
    }
    fn crc(&self) -> u32 {
        ckptfs_transport::crc32c(&self.buf[..self.at])
    }
    fn visit(&self, f: &mut dyn FnMut(&[u8])) {
        f(&self.buf[..self.at])
    }
}
