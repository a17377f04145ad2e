//! The C ABI's error: an errno plus a message for `ckptfs_last_error`.

use ckptfs_store::StoreError;
use std::cell::RefCell;
use std::ffi::c_char;

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

/// Size of the per-thread message buffer; longer messages are cut (at a character
/// boundary, ending in "...").
pub const LAST_ERROR_MAX: usize = 8192;

thread_local! {
    /// Allocated at the thread's first failure and never moved or freed before the
    /// thread exits, so a pointer from `ckptfs_last_error()` never dangles: C leaves the
    /// evaluation order of arguments unspecified, and
    /// `printf("%d %s", ckptfs_open(..), ckptfs_last_error())` may fetch it first.
    static LAST_ERROR: RefCell<Option<Box<[u8; LAST_ERROR_MAX]>>> = const { RefCell::new(None) };
}

/// Remember `msg` as this thread's last error. Never panics (interior NULs are dropped).
pub fn set_last_error(msg: &str) {
    let msg = msg.replace('\0', "");
    let text = if msg.len() < LAST_ERROR_MAX {
        msg
    } else {
        let mut cut = LAST_ERROR_MAX - 4;
        while !msg.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}...", &msg[..cut])
    };
    // try_with: during thread teardown the slot may be gone; the message is then lost.
    let _ = LAST_ERROR.try_with(|l| {
        if let Ok(mut slot) = l.try_borrow_mut() {
            let buf = slot.get_or_insert_with(|| Box::new([0; LAST_ERROR_MAX]));
            buf[..text.len()].copy_from_slice(text.as_bytes());
            buf[text.len()] = 0;
        }
    });
}

/// This thread's last error message (empty before the first failure). The pointer stays
/// valid for the thread's lifetime; the next failing call replaces the text.
pub fn last_error_ptr() -> *const c_char {
    static EMPTY: &[u8] = b"\0";
    LAST_ERROR
        .try_with(|l| {
            l.try_borrow()
                .ok()
                .and_then(|s| s.as_ref().map(|b| b.as_ptr().cast()))
                .unwrap_or(EMPTY.as_ptr().cast())
        })
        .unwrap_or(EMPTY.as_ptr().cast())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn text(p: *const c_char) -> String {
        // SAFETY: last_error_ptr returns a NUL-terminated buffer that lives as long as
        // the thread.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    #[test]
    fn pointer_survives_later_failures() {
        set_last_error("first, a long message");
        let p = last_error_ptr();
        set_last_error("second");
        assert_eq!(p, last_error_ptr());
        assert_eq!(text(p), "second");
    }

    #[test]
    fn long_messages_are_cut_at_a_char_boundary() {
        set_last_error(&"\u{e9}".repeat(LAST_ERROR_MAX));
        let t = text(last_error_ptr());
        assert!(t.len() < LAST_ERROR_MAX && t.ends_with("..."), "{}", t.len());
    }
}
