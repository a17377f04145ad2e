//! The C ABI's error: an errno plus a message for `ckptfs_last_error`.

use ckptfs_store::StoreError;
use std::cell::RefCell;
use std::ffi::{c_char, CString};

/// A failed call: the errno returned (negated) to C and the message kept for
/// `ckptfs_last_error()`.
#[derive(Debug, thiserror::Error)]
#[error("{msg}")]
pub struct CapiError {
    /// Positive POSIX errno.
    pub errno: i32,
    /// Human-readable description.
    pub msg: String,
}

impl CapiError {
    /// An error with an explicit errno.
    pub fn new(errno: i32, msg: impl Into<String>) -> Self {
        CapiError {
            errno,
            msg: msg.into(),
        }
    }

    /// Prefix the message with what was being done (`mount /ckpt: ...`).
    pub fn context(mut self, what: impl std::fmt::Display) -> Self {
        self.msg = format!("{what}: {}", self.msg);
        self
    }
}

impl From<StoreError> for CapiError {
    fn from(e: StoreError) -> Self {
        CapiError {
            errno: e.errno(),
            msg: e.to_string(),
        }
    }
}

/// Shorthand for results of the C ABI's internals.
pub type Result<T, E = CapiError> = std::result::Result<T, E>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Remember `msg` as this thread's last error. Never panics (interior NULs are dropped).
pub fn set_last_error(msg: &str) {
    let c = CString::new(msg.replace('\0', "")).unwrap_or_default();
    // try_with: during thread teardown the slot may be gone; the message is then lost.
    let _ = LAST_ERROR.try_with(|l| {
        if let Ok(mut slot) = l.try_borrow_mut() {
            *slot = c;
        }
    });
}

/// This thread's last error message (empty before the first failure). The pointer stays
/// valid until the next failing call on the same thread.
pub fn last_error_ptr() -> *const c_char {
    static EMPTY: &[u8] = b"\0";
    LAST_ERROR
        .try_with(|l| {
            l.try_borrow()
                .map(|s| s.as_ptr())
                .unwrap_or(EMPTY.as_ptr().cast())
        })
        .unwrap_or(EMPTY.as_ptr().cast())
}
