//! # ckptfs-preload: transparent interception with `LD_PRELOAD`
//!
//! `libckptfs_preload.so` exports the libc file calls (the open family, read/write and
//! their vector, positional, 64-bit and fortified forms, the stat family, directory and
//! stdio streams, namespace calls, mmap, fork/exec/exit hooks). A call whose path lies
//! under a mount prefix (`CKPTFS_MOUNT`, default `/ckpt`) or whose descriptor is a store
//! descriptor is served by the node store ([`ckptfs_store`]); every other call goes to
//! the next definition (libc) unchanged, after a lock-free bitmap test or a prefix
//! comparison.
//!
//! Store descriptors are real kernel descriptors (`O_PATH` opens of `/dev/null`), so
//! their numbers never collide with the program's, and any call that bypasses the shim
//! (a raw syscall) fails with EBADF instead of touching a real file. The open file
//! description (offset, status flags) lives in shared anonymous memory so that a fork
//! child shares it with its parent exactly as with the kernel. See `docs/preload.md`.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(not(test))]
pub mod aio;
pub mod cwd;
pub mod dir;
pub mod dirfds;
pub mod exec_store;
#[cfg(not(test))]
pub mod fsinfo;
#[cfg(not(test))]
pub mod hooks;
pub mod lifecycle;
pub mod links;
pub mod lock;
pub mod locks;
#[cfg(not(test))]
pub mod names;
pub mod ops;
pub mod paths;
pub mod perms;
pub mod resolve;
pub mod shimfds;
pub mod shmap;
#[cfg(not(test))]
pub mod spawn;
pub mod state;
pub mod stdio;
pub mod sys;
pub mod tmpfiles;

/// Library constructor: adopt the virtual cwd and the store descriptors inherited across
/// exec. With `CKPTFS_WARM` set, attach the store now rather than at the first call under
/// a prefix, so that the page tables of the first checkpoint's chunks are built in the
/// background while the program initialises (the store's `warm` module).
#[cfg(not(test))]
extern "C" fn init() {
    let _ = sys::guarded(|| {
        lifecycle::install();
        cwd::adopt();
        lifecycle::adopt_inherited();
        if state::warm_requested() {
            state::store()?;
        }
        Ok(())
    });
}

#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;
