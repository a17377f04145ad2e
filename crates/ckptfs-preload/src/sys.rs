//! The libc functions the shim forwards to (resolved once with `dlsym(RTLD_NEXT)`), errno
//! access and the re-entrancy guard.

use std::cell::Cell;
use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `RTLD_NEXT` from <dlfcn.h>: the next object after this one in the lookup order.
const RTLD_NEXT: *mut libc::c_void = -1isize as *mut libc::c_void;

/// One forwarded libc function: its name and its address once resolved.
pub struct Real {
    addr: AtomicUsize,
    name: &'static CStr,
}

impl Real {
    /// A function resolved on first use.
    pub const fn new(name: &'static CStr) -> Real {
        Real {
            addr: AtomicUsize::new(0),
            name,
        }
    }

    /// The address of the next definition, or None when libc has none.
    #[inline]
    pub fn get(&self) -> Option<usize> {
        let a = self.addr.load(Ordering::Relaxed);
        if a != 0 {
            return Some(a);
        }
        // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT is valid in a shared object.
        let p = unsafe { libc::dlsym(RTLD_NEXT, self.name.as_ptr()) } as usize;
        if p == 0 {
            return None;
        }
        self.addr.store(p, Ordering::Relaxed);
        Some(p)
    }
}

/// Call the next definition of a libc function: `real!(name: fn(types) -> ret; args)`.
/// When libc lacks the symbol, sets ENOSYS and returns `$fail`.
macro_rules! real {
    ($name:ident : fn($($t:ty),*) -> $r:ty ; $fail:expr ; $($a:expr),*) => {{
        static R: $crate::sys::Real =
            $crate::sys::Real::new(match ::std::ffi::CStr::from_bytes_with_nul(
                concat!(stringify!($name), "\0").as_bytes()) {
                Ok(c) => c,
                Err(_) => panic!("bad symbol name"),
            });
        match R.get() {
            Some(p) => {
                // SAFETY: p is the address of libc's function of this exact C signature.
                #[allow(unused_unsafe)]
                let f: unsafe extern "C" fn($($t),*) -> $r = unsafe { ::std::mem::transmute(p) };
                #[allow(unused_unsafe)]
                // SAFETY: forwarding the caller's arguments unchanged.
                unsafe { f($($a),*) }
            }
            None => {
                $crate::sys::set_errno(libc::ENOSYS);
                $fail
            }
        }
    }};
}
pub(crate) use real;

/// Set the calling thread's errno.
#[inline]
pub fn set_errno(e: i32) {
    // SAFETY: __errno_location always returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// The calling thread's errno.
#[inline]
pub fn errno() -> i32 {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() }
}

thread_local! {
    static IN_SHIM: Cell<bool> = const { Cell::new(false) };
}

/// Is this thread already inside the shim (then every call goes to libc)?
#[inline]
pub fn in_shim() -> bool {
    IN_SHIM.with(|c| c.get())
}

/// Run `f` as the shim: nested libc calls made by the store go straight to libc, and a
/// panic becomes EIO instead of unwinding into C.
pub fn guarded<T>(f: impl FnOnce() -> Result<T, i32>) -> Result<T, i32> {
    let was = IN_SHIM.with(|c| c.replace(true));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(Err(libc::EIO));
    IN_SHIM.with(|c| c.set(was));
    r
}

/// Convert a result to the C convention: value, or -1 with errno set.
#[inline]
pub fn ret<T: From<i8>>(r: Result<T, i32>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => {
            set_errno(e);
            T::from(-1)
        }
    }
}

/// Close a kernel descriptor bypassing the hooks.
pub fn raw_close(fd: i32) -> i32 {
    // SAFETY: closing a descriptor number; no memory involved.
    unsafe { libc::syscall(libc::SYS_close, fd) as i32 }
}

/// Move a descriptor of the shim's to a high number, out of the way of programs that
/// pick their own numbers (shells use 3-9 for redirections and dup2 onto them).
pub fn move_high(fd: i32) -> i32 {
    if fd < 0 {
        return fd;
    }
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: raw getrlimit into a local struct.
    unsafe { libc::syscall(libc::SYS_getrlimit, libc::RLIMIT_NOFILE, &mut rl) };
    let start = (rl.rlim_cur.min(1 << 20) as i64 - 64).max(100);
    // SAFETY: raw fcntl/close on descriptor numbers.
    let n = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_DUPFD_CLOEXEC, start) } as i32;
    if n < 0 {
        return fd;
    }
    raw_close(fd);
    n
}

/// The kernel's working directory (raw syscall, no hooks).
pub fn real_cwd() -> Result<String, i32> {
    let mut buf = [0u8; libc::PATH_MAX as usize];
    // SAFETY: buffer and its length.
    let n = unsafe { libc::syscall(libc::SYS_getcwd, buf.as_mut_ptr(), buf.len()) };
    if n < 0 {
        return Err(errno());
    }
    let s = CStr::from_bytes_until_nul(&buf).map_err(|_| libc::EIO)?;
    s.to_str().map(str::to_string).map_err(|_| libc::EILSEQ)
}
