//! The shutdown trigger every daemon's library `run` function takes as a parameter
//! (mini-redis `server::run(listener, shutdown)` style).
//!
//! A library never installs signal handlers: the binary decides what stops a daemon. It
//! creates a [`Shutdown`], passes clones to the `run` functions, and either triggers it
//! itself (tests, an embedding daemon) or calls [`Shutdown::on_signals`], which routes
//! the given signals through a self-pipe to a thread that triggers it (works whichever
//! thread the kernel delivers the signal to; the handler only calls `write(2)`).

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

#[derive(Default)]
struct Inner {
    fired: AtomicBool,
    /// The signal that fired it, 0 if triggered otherwise.
    signal: AtomicI32,
    lock: Mutex<()>,
    cv: Condvar,
}

/// A one-way stop request shared by clones: once triggered it stays triggered.
#[derive(Clone, Default)]
pub struct Shutdown(Arc<Inner>);

impl std::fmt::Debug for Shutdown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shutdown")
            .field("triggered", &self.is_triggered())
            .field("signal", &self.signal())
            .finish()
    }
}

impl Shutdown {
    /// A trigger that has not fired.
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// Ask every holder to stop.
    pub fn trigger(&self) {
        let _g = self.0.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.0.fired.store(true, Ordering::SeqCst);
        self.0.cv.notify_all();
    }

    fn trigger_by(&self, sig: i32) {
        self.0.signal.store(sig, Ordering::SeqCst);
        self.trigger();
    }

    /// Has a stop been asked for?
    pub fn is_triggered(&self) -> bool {
        self.0.fired.load(Ordering::SeqCst)
    }

    /// The signal number that triggered it through [`Shutdown::on_signals`], if any.
    pub fn signal(&self) -> Option<i32> {
        match self.0.signal.load(Ordering::SeqCst) {
            0 => None,
            s => Some(s),
        }
    }

    /// Block until triggered or `timeout` passes; returns whether it is triggered.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let g = self.0.lock.lock().unwrap_or_else(|e| e.into_inner());
        if self.is_triggered() {
            return true;
        }
        let _g = self
            .0
            .cv
            .wait_timeout_while(g, timeout, |_| !self.is_triggered())
            .unwrap_or_else(|e| e.into_inner());
        self.is_triggered()
    }

    /// For binaries only: a trigger fired by any of `signals` (e.g. SIGTERM, SIGINT).
    /// Installs process-wide handlers; a later call replaces the earlier routing.
    pub fn on_signals(signals: &[libc::c_int]) -> std::io::Result<Shutdown> {
        let read_end = crate::sys::signal_pipe(signals, crate::sys::on_signal)?;
        let sd = Shutdown::new();
        let s2 = sd.clone();
        std::thread::Builder::new()
            .name("ckptfs-signals".into())
            .spawn(move || {
                use std::io::Read;
                let mut read_end = read_end;
                let mut b = [0u8; 1];
                if read_end.read_exact(&mut b).is_ok() {
                    s2.trigger_by(b[0] as i32);
                }
            })?;
        Ok(sd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_triggered_shutdown_is_seen_by_every_clone_and_wakes_waiters() {
        let s = Shutdown::new();
        assert!(!s.is_triggered());
        assert!(!s.wait_timeout(Duration::from_millis(1)));
        let c = s.clone();
        let th = std::thread::spawn(move || c.wait_timeout(Duration::from_secs(600)));
        s.trigger();
        assert!(th.join().unwrap());
        assert!(s.clone().is_triggered());
        assert_eq!(s.signal(), None);
    }
}
