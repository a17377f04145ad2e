//! The process lifecycle of the shim: fork handlers, exit (atexit and `_exit`), and the
//! store descriptors a new program image inherits across exec.
//!
//! This module sits above the descriptor table ([`state`]), the stdio streams
//! ([`stdio`]) and the directory streams ([`dir`]) and calls down into them; none of
//! them calls it. [`state::store`] runs [`register_handlers`] at the first attach
//! through the hook [`install`] sets (the library constructor calls it).

use crate::ops;
use crate::state::{self, Desc};
use crate::sys;
use crate::{dir, shmap, stdio};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

/// Let the store's first attach register the fork and exit handlers. If the store was
/// attached before (another object's constructor ran first and used a store path),
/// register them now.
pub fn install() {
    state::set_attach_hook(register_handlers);
    if state::attached() {
        register_handlers();
    }
}

// ------------------------------------------------------------------ fork and exit

extern "C" fn before_fork() {
    stdio::LOCK.write();
    dir::LOCK.write();
    state::fork_prepare();
}

extern "C" fn after_fork_parent() {
    state::fork_parent();
    dir::LOCK.write_unlock();
    stdio::LOCK.write_unlock();
}

extern "C" fn after_fork_child() {
    state::fork_child();
    stdio::LOCK.reset();
    dir::LOCK.reset();
    // SAFETY: getpid has no preconditions.
    OWNER_PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
}

extern "C" fn at_exit() {
    let _ = sys::guarded(|| {
        close_all();
        Ok(())
    });
}

/// The process whose memory this is (a vfork child shares it but has another pid).
static OWNER_PID: AtomicI32 = AtomicI32::new(0);

/// Register the fork and exit handlers (at the store's first attach; once).
pub fn register_handlers() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: getpid has no preconditions.
        OWNER_PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
        // SAFETY: registering plain extern "C" handlers.
        unsafe {
            libc::pthread_atfork(Some(before_fork), Some(after_fork_parent), Some(after_fork_child));
            libc::atexit(at_exit);
        }
    });
}

/// Before _exit: release every store file.
pub fn before_exit() {
    if state::attached() {
        at_exit();
    }
}

/// Close every store descriptor (process exit, exec): flush stdio streams on store files,
/// release leases so the files are complete.
pub fn close_all() {
    stdio::flush_all();
    // Shared writable mappings: bring the checksums of what they wrote up to date.
    shmap::flush_all();
    for (_, d) in state::take_all() {
        let _ = ops::release(d);
    }
}

// ------------------------------------------------------------------ exec

/// Environment variable describing the store descriptors a new program image inherits:
/// `SLOTSFD;MODE` then one record per descriptor `FD,SLOT,ACC,DIR,MOUNT,PATH`, records
/// separated by 0x1e. MODE `T`: the slot references pass to the new image (exec in the
/// owning process); `A`: the new image adds its own (exec in a vfork child, whose parent
/// keeps its descriptors).
pub const INHERIT_ENV: &str = "CKPTFS_INHERIT";

/// One inherited descriptor.
#[derive(Debug, Clone)]
pub struct Inherit {
    fd: i32,
    slot: usize,
    acc: i32,
    dir: bool,
    mount: usize,
    path: String,
}

fn kernel_cloexec(fd: i32) -> bool {
    // SAFETY: raw fcntl on a descriptor number.
    let f = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_GETFD) };
    f < 0 || f as i32 & libc::FD_CLOEXEC != 0
}

fn set_cloexec(fd: i32, on: bool) {
    // SAFETY: raw fcntl on a descriptor number.
    unsafe {
        libc::syscall(
            libc::SYS_fcntl,
            fd,
            libc::F_SETFD,
            if on { libc::FD_CLOEXEC } else { 0 },
        )
    };
}

/// Before exec: which store descriptors survive it, and the environment entry that
/// tells the new image about them. In the owning process (not a vfork child) every
/// store file is released (leases dropped, streams flushed); the slots of inherited
/// descriptors are kept for the new image. Returns None when nothing is inherited.
pub fn prepare_exec() -> Option<(Vec<Inherit>, CString)> {
    if !state::attached() {
        return None;
    }
    // SAFETY: getpid has no preconditions.
    let owner = unsafe { libc::getpid() } == OWNER_PID.load(Ordering::Relaxed);
    let mut inh = Vec::new();
    state::for_each(|fd, d| {
        if !kernel_cloexec(fd) {
            inh.push(Inherit {
                fd,
                slot: state::slot_index(d.slot),
                acc: d.acc,
                dir: d.is_dir,
                mount: d.mount,
                path: d.path.clone(),
            });
            if owner {
                d.keep_slot.store(true, Ordering::Relaxed);
            }
        }
    });
    if owner {
        close_all();
    }
    if inh.is_empty() {
        return None;
    }
    let sfd = state::slots_fd();
    set_cloexec(sfd, false);
    let mut v = format!("{INHERIT_ENV}={sfd};{}", if owner { 'T' } else { 'A' });
    for i in &inh {
        v.push('\x1e');
        v.push_str(&format!(
            "{},{},{},{},{},{}",
            i.fd, i.slot, i.acc, i.dir as u8, i.mount, i.path
        ));
    }
    CString::new(v).ok().map(|c| (inh, c))
}

/// exec failed: take the descriptors back.
pub fn exec_failed(inh: Vec<Inherit>) {
    set_cloexec(state::slots_fd(), true);
    // SAFETY: getpid has no preconditions.
    if unsafe { libc::getpid() } == OWNER_PID.load(Ordering::Relaxed) {
        adopt(inh, false);
    }
}

/// Open the store files of inherited descriptors and enter them in the table.
fn adopt(inh: Vec<Inherit>, add_ref: bool) {
    let Ok(store) = state::store() else { return };
    let mut by_slot: BTreeMap<usize, Arc<Desc>> = BTreeMap::new();
    for i in inh {
        if let Some(d) = by_slot.get(&i.slot) {
            // Another descriptor of the same description (dup): share it.
            state::install(i.fd, d.clone());
            stdio::install_std(i.fd);
            continue;
        }
        let Some(slot) = state::slot_at(i.slot) else {
            continue;
        };
        if add_ref {
            slot.refs.fetch_add(1, Ordering::AcqRel);
        }
        let flags = ckptfs_store::OpenFlags {
            read: i.acc != libc::O_WRONLY,
            write: i.acc != libc::O_RDONLY,
            directory: i.dir,
            ..Default::default()
        };
        match store.open(&i.path, flags, 0) {
            Ok(h) => {
                let d = Arc::new(Desc::with_slot(h, i.mount, i.path, i.acc, slot));
                by_slot.insert(i.slot, d.clone());
                state::install(i.fd, d);
                stdio::install_std(i.fd);
            }
            Err(e) => {
                eprintln!("ckptfs-preload: inherited descriptor {} ({}): {e}", i.fd, i.path);
                slot.refs.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

/// At load: adopt the store descriptors inherited across exec, if any.
pub fn adopt_inherited() {
    let Some(v) = std::env::var_os(INHERIT_ENV) else {
        return;
    };
    // SAFETY: removing our own variable while single-threaded (library constructor).
    unsafe { libc::unsetenv(c"CKPTFS_INHERIT".as_ptr()) };
    let v = v.to_string_lossy().to_string();
    let mut recs = v.split('\x1e');
    let head = recs.next().unwrap_or("");
    let (sfd, mode) = head.split_once(';').unwrap_or(("", ""));
    let Ok(sfd) = sfd.parse::<i32>() else { return };
    let adopted = state::adopt_slots(sfd);
    set_cloexec(sfd, true);
    if !adopted {
        return;
    }
    let inh: Vec<Inherit> = recs
        .filter_map(|r| {
            let mut f = r.splitn(6, ',');
            Some(Inherit {
                fd: f.next()?.parse().ok()?,
                slot: f.next()?.parse().ok()?,
                acc: f.next()?.parse().ok()?,
                dir: f.next()? == "1",
                mount: f.next()?.parse().ok().filter(|m| *m < state::mounts().len())?,
                path: f.next()?.to_string(),
            })
        })
        .collect();
    adopt(inh, mode == "A");
}
