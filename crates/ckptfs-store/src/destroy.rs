//! Destroying a store: refused (EBUSY, naming them) while other processes use it;
//! `force` marks the segment destroyed first, so those processes fail cleanly (ESTALE)
//! instead of writing into a deleted segment whose contents vanish at their exit.
//!
//! Users are found by scanning `/proc/*/maps` for the segment's path (every process that
//! maps it: a FUSE mount, a node daemon, a process under the shim; readable for the
//! caller's own processes, and all of them for root; a process must still map it in two
//! more scans 30 ms apart, so that a child between fork and exec is not taken for one),
//! plus the live processes of the
//! lease table (files held open), which names them even when their maps are not
//! readable.

use crate::error::{Result, StoreError};
use crate::segment::Segment;
use crate::store::Store;
use crate::types::segment_path_in;
use std::path::Path;
use std::sync::atomic::Ordering::{Acquire, Relaxed, SeqCst};

/// A process that uses a store (has its segment mapped, or holds a file of it open).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreUser {
    /// Its process id.
    pub pid: u32,
    /// What it is, as far as can be found: its command line (or name), and how it was
    /// found.
    pub what: String,
}

impl std::fmt::Display for StoreUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} ({})", self.pid, self.what)
    }
}

/// The command line of `pid` (arguments joined by spaces, at most 100 bytes), else its
/// name, else "unknown".
fn describe(pid: u32) -> String {
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let mut s: String = cmd
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    if s.is_empty() {
        s = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|c| c.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
    }
    if s.len() > 100 {
        let mut end = 100;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str("...");
    }
    s
}

/// Processes other than the caller whose memory maps include `path` (the segment file
/// itself, not a deleted one of the same name).
fn mapping_processes(path: &Path) -> Vec<u32> {
    let me = std::process::id();
    let want = path.to_string_lossy().into_owned();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            continue;
        };
        // The path is the last field of a line (after five fields and spaces).
        if maps
            .lines()
            .any(|l| l.splitn(6, ' ').nth(5).map(str::trim_start) == Some(want.as_str()))
        {
            out.push(pid);
        }
    }
    out
}

impl Store {
    /// Processes other than the caller that use store `name` (in `shm_dir`, `None`:
    /// `/dev/shm`): those that map its segment, and the live holders of its lease table.
    /// Empty when there is no such store.
    pub fn users_in(shm_dir: Option<&Path>, name: &str) -> Result<Vec<StoreUser>> {
        ckptfs_settings::check_store_name(name).map_err(StoreError::Invalid)?;
        let path = segment_path_in(shm_dir, name);
        let seg = Segment::attach(name, &path, false).ok();
        Ok(users_of(&path, seg.as_ref()))
    }

    /// Remove the store `name` (its segment and spill file; `None`: `/dev/shm`). Refused
    /// with `Busy` (EBUSY), naming them, while other processes use it (see
    /// [`Store::users_in`]); [`Store::destroy_forced_in`] overrides. The name is free for
    /// a new store at once.
    pub fn destroy_in(shm_dir: Option<&Path>, name: &str) -> Result<()> {
        destroy(shm_dir, name, false).map(drop)
    }

    /// [`Store::destroy_in`] in `/dev/shm`.
    pub fn destroy(name: &str) -> Result<()> {
        Self::destroy_in(None, name)
    }

    /// Remove the store `name` even while other processes use it: its segment is first
    /// marked destroyed, so that every one of them gets ESTALE ([`StoreError::Destroyed`])
    /// from its next operation (a FUSE mount answers errors, never serves or accepts
    /// data of the deleted segment), then removed. Returns the users it had.
    pub fn destroy_forced_in(shm_dir: Option<&Path>, name: &str) -> Result<Vec<StoreUser>> {
        destroy(shm_dir, name, true)
    }

    /// ESTALE once the store was destroyed under this process.
    pub(crate) fn check_live(&self) -> Result<()> {
        if self.seg.sb().destroyed.load(Relaxed) != 0 {
            return Err(StoreError::Destroyed(self.seg.name.clone()));
        }
        Ok(())
    }

    /// Whether the store was destroyed while this process had it attached.
    pub fn is_destroyed(&self) -> bool {
        self.check_live().is_err()
    }
}

/// [`mapping_processes`], keeping only those still there 30 and 60 ms later: a child
/// between fork and exec (of any thread of a process that maps the segment, even one
/// destroying it) shows its parent's mappings for a moment and is not a user.
fn lasting_mappers(path: &Path) -> Vec<u32> {
    let mut pids = mapping_processes(path);
    for _ in 0..2 {
        if pids.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(30));
        let again = mapping_processes(path);
        pids.retain(|p| again.contains(p));
    }
    pids
}

fn users_of(path: &Path, seg: Option<&Segment>) -> Vec<StoreUser> {
    let mut users: Vec<StoreUser> = lasting_mappers(path)
        .into_iter()
        .map(|pid| StoreUser {
            pid,
            what: format!("{}; maps the segment", describe(pid)),
        })
        .collect();
    if let Some(seg) = seg {
        let me = std::process::id();
        for i in 0..seg.layout.lease_slots {
            let s = seg.lease(i);
            let pid = s.pid.load(Acquire);
            if s.fid.load(Acquire) == 0 || pid == 0 || pid == me || users.iter().any(|u| u.pid == pid) {
                continue;
            }
            let who = crate::process::ProcId {
                pid,
                start: s.start.load(Relaxed),
            };
            if crate::process::alive(who) {
                users.push(StoreUser {
                    pid,
                    what: format!("{}; holds a file open", describe(pid)),
                });
            }
        }
    }
    users.sort_by_key(|u| u.pid);
    users
}

fn destroy(shm_dir: Option<&Path>, name: &str, force: bool) -> Result<Vec<StoreUser>> {
    ckptfs_settings::check_store_name(name).map_err(StoreError::Invalid)?;
    let path = segment_path_in(shm_dir, name);
    // Only a segment the caller owns (mode 0600) is trusted to name its spill file.
    let seg = Segment::attach(name, &path, false);
    let users = match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(StoreError::NoStore(name.into())),
        _ => users_of(&path, seg.as_ref().ok()),
    };
    if !users.is_empty() && !force {
        let list: Vec<String> = users.iter().map(ToString::to_string).collect();
        return Err(StoreError::Busy(format!(
            "store {name} is in use by {}; stop them first, or destroy with --force (they then get ESTALE)",
            list.join(", ")
        )));
    }
    let spill = seg.as_ref().ok().and_then(|s| s.layout.spill_path());
    if let Ok(s) = &seg {
        // Whoever still maps it (a user found above, or one attaching right now) fails
        // its next operation cleanly instead of losing what it writes.
        s.sb().destroyed.store(1, SeqCst);
    }
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(StoreError::NoStore(name.into())),
        Err(e) => return Err(StoreError::io(format!("remove {}", path.display()), e)),
    }
    if let Some(sp) = spill {
        crate::trust::remove_own_spill(&sp, name);
    }
    Ok(users)
}
