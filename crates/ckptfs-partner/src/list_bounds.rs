//! Bounds on a holder's listing (failure case 35 of docs/cluster.md): a restore asks
//! every peer for the copies it holds of this node's files, page by page (`List{after}`
//! answered by a `Listing` with "more follow"). A holder that always answers "more"
//! would make the restoring process keep every entry it is sent (8.5 GB of RSS in 20 s
//! was measured against such a holder), so the pages are checked as they come:
//!
//! - entries at most [`ListBounds::entries`] (for a restore: the files the store it
//!   fills can hold; the copies are of this node's files, which fit in such a store);
//! - the sizes announced add up to at most [`ListBounds::bytes`] (for a restore: the
//!   store's memory plus spill) and the paths to at most [`ListBounds::path_bytes`];
//! - pages at most `entries / MAX_LIST_ENTRIES + 1` (an honest holder fills every page
//!   but the last);
//! - every path strictly after the one before it (the holder answers in path order,
//!   after the `after` asked): a repeated page, a repeated or non-increasing `after`
//!   ends the listing.
//!
//! A listing past a bound is refused whole ([`NodeError::Bound`], EOVERFLOW; the holder
//! and the bound named): the restore moves on to the other holders.

use crate::copies::HeldFile;
use crate::error::NodeError;
use ckptfs_store::Store;
use ckptfs_transport::frame::MAX_LIST_ENTRIES;

/// The most a holder's listing may announce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListBounds {
    /// Most entries (copies).
    pub entries: u64,
    /// Most bytes the listed copies' sizes add up to.
    pub bytes: u64,
    /// Most bytes the listed paths add up to (the memory the listing takes).
    pub path_bytes: u64,
}

impl ListBounds {
    /// Without a store to measure against: as many entries as the largest store has
    /// file slots (2^22), 1 PiB, 256 MiB of paths.
    pub const DEFAULT: ListBounds = ListBounds {
        entries: 1 << 22,
        bytes: 1 << 50,
        path_bytes: 256 << 20,
    };

    /// What `store` could hold: its file slots, its memory plus spill bytes.
    pub fn for_store(store: &Store) -> ListBounds {
        let info = store.info();
        ListBounds {
            entries: u64::from(info.max_files),
            bytes: info.mem_size.saturating_add(info.spill_size),
            ..ListBounds::DEFAULT
        }
    }

    /// Most pages: an honest holder sends full pages of `MAX_LIST_ENTRIES` but the last.
    pub fn pages(&self) -> u64 {
        self.entries / MAX_LIST_ENTRIES as u64 + 1
    }
}

/// The pages of one listing, checked as they arrive.
pub struct PageCheck {
    peer: String,
    bounds: ListBounds,
    files: Vec<HeldFile>,
    pages: u64,
    bytes: u64,
    path_bytes: u64,
}

impl PageCheck {
    /// A listing from `peer`, checked against `bounds`.
    pub fn new(peer: &str, bounds: ListBounds) -> PageCheck {
        PageCheck {
            peer: peer.to_string(),
            bounds,
            files: Vec::new(),
            pages: 0,
            bytes: 0,
            path_bytes: 0,
        }
    }

    /// The `after` of the next request: the last path listed ("" at the start).
    pub fn after(&self) -> &str {
        self.files.last().map(|f| f.path.as_str()).unwrap_or("")
    }

    fn bound(&self, what: String) -> NodeError {
        NodeError::Bound {
            peer: self.peer.clone(),
            what,
        }
    }

    /// Take one page; true when the listing is complete (no more follow, or an empty
    /// page), an error when it passes a bound.
    pub fn take(&mut self, page: Vec<HeldFile>, more: bool) -> Result<bool, NodeError> {
        self.pages += 1;
        if self.pages > self.bounds.pages() {
            return Err(self.bound(format!(
                "more than {} pages of listing (at most {} copies, {MAX_LIST_ENTRIES} a page)",
                self.bounds.pages(),
                self.bounds.entries
            )));
        }
        let empty = page.is_empty();
        for f in page {
            if f.path.as_str() <= self.after() {
                return Err(self.bound(format!(
                    "listed {:?} after {:?}: not in path order (a repeated page or `after`)",
                    f.path,
                    self.after()
                )));
            }
            if self.files.len() as u64 >= self.bounds.entries {
                return Err(self.bound(format!(
                    "more than {} copies listed, more files than the store holds",
                    self.bounds.entries
                )));
            }
            self.bytes = self.bytes.saturating_add(f.size);
            if self.bytes > self.bounds.bytes {
                return Err(self.bound(format!(
                    "the copies listed add up to more than {} bytes, more than the store holds",
                    self.bounds.bytes
                )));
            }
            self.path_bytes += f.path.len() as u64;
            if self.path_bytes > self.bounds.path_bytes {
                return Err(self.bound(format!(
                    "the paths listed add up to more than {} bytes",
                    self.bounds.path_bytes
                )));
            }
            self.files.push(f);
        }
        Ok(!more || empty)
    }

    /// Every entry listed, in path order.
    pub fn into_files(self) -> Vec<HeldFile> {
        self.files
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(path: &str, size: u64) -> HeldFile {
        HeldFile {
            path: path.into(),
            size,
            mtime_ns: 0,
            crc32c: None,
            generation: 0,
        }
    }

    fn page(from: usize, n: usize) -> Vec<HeldFile> {
        (from..from + n).map(|i| f(&format!("/c/{i:08}"), 10)).collect()
    }

    const SMALL: ListBounds = ListBounds {
        entries: 10_000,
        bytes: 1 << 20,
        path_bytes: 1 << 20,
    };

    #[test]
    fn an_honest_listing_of_full_pages_ends_where_the_holder_says() {
        let mut c = PageCheck::new("node3", SMALL);
        assert!(!c.take(page(0, 4096), true).unwrap());
        assert_eq!(c.after(), "/c/00004095");
        assert!(!c.take(page(4096, 4096), true).unwrap());
        assert!(c.take(page(8192, 1808), false).unwrap());
        assert_eq!(c.into_files().len(), 10_000);
        // An empty page ends it too.
        let mut c = PageCheck::new("node3", SMALL);
        assert!(c.take(Vec::new(), true).unwrap());
    }

    #[test]
    fn always_more_ends_at_the_page_bound_naming_the_holder() {
        let mut c = PageCheck::new("node3", SMALL);
        let mut next = 0;
        let e = loop {
            match c.take(page(next, 1), true) {
                Ok(false) => next += 1,
                Ok(true) => panic!("ended"),
                Err(e) => break e,
            }
        };
        // 10,000 / 4096 + 1 = 3 pages.
        assert_eq!(next, 3);
        assert_eq!(e.errno(), libc::EOVERFLOW);
        let m = e.to_string();
        assert!(m.contains("node3") && m.contains("more than 3 pages"), "{m}");
    }

    #[test]
    fn a_repeated_page_or_a_path_not_after_the_last_is_refused() {
        let mut c = PageCheck::new("node3", SMALL);
        c.take(page(0, 5), true).unwrap();
        let e = c.take(page(0, 5), true).unwrap_err();
        assert!(e.to_string().contains("not in path order"), "{e}");
        let mut c = PageCheck::new("node3", SMALL);
        let e = c.take(vec![f("/b", 1), f("/a", 1)], false).unwrap_err();
        assert!(e.to_string().contains("not in path order"), "{e}");
        let mut c = PageCheck::new("node3", SMALL);
        let e = c.take(vec![f("/a", 1), f("/a", 1)], false).unwrap_err();
        assert!(e.to_string().contains("not in path order"), "{e}");
    }

    #[test]
    fn entries_bytes_and_path_bytes_are_bounded() {
        let b = ListBounds { entries: 3, ..SMALL };
        let e = PageCheck::new("node3", b).take(page(0, 4), false).unwrap_err();
        assert!(e.to_string().contains("more than 3 copies"), "{e}");
        assert!(PageCheck::new("node3", b).take(page(0, 3), false).unwrap());
        let b = ListBounds { bytes: 25, ..SMALL };
        let e = PageCheck::new("node3", b).take(page(0, 3), false).unwrap_err();
        assert!(e.to_string().contains("more than 25 bytes"), "{e}");
        let e = PageCheck::new("node3", SMALL)
            .take(vec![f("/a", u64::MAX), f("/b", 2)], false)
            .unwrap_err();
        assert!(e.to_string().contains("bytes"), "{e}");
        let b = ListBounds {
            path_bytes: 20,
            ..SMALL
        };
        let e = PageCheck::new("node3", b).take(page(0, 2), false).unwrap_err();
        assert!(e.to_string().contains("paths listed"), "{e}");
    }
}
