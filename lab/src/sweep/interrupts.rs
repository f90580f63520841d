//! Stopping a sweep without orphans: SIGINT, SIGTERM or SIGHUP sent to the `tp-sweep`
//! process alone (a `kill`, a batch system, a closed terminal) is forwarded to the run it
//! is waiting for; the sweep waits for that run to end, starts no other, and stops. The
//! run's checkpoints make the sweep resumable, so running it again continues.

use anyhow::{Context, Result};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use tp_harness::error::Stopped;

/// What a sweep needs to know of signals: which one arrived, and whom to pass it to.
#[derive(Debug, Default)]
pub struct Interrupts {
    /// The signal received (0: none).
    signal: AtomicI32,
    /// The pid of the run being waited for (0: none).
    child: AtomicI32,
}

pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// Sends `sig` to process `pid`.
fn forward(pid: i32, sig: i32) {
    if pid > 0 {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

impl Interrupts {
    /// Catches SIGINT, SIGTERM and SIGHUP for the rest of the process's life (the
    /// `tp-sweep` binary), forwarding each to the run under way.
    pub fn install() -> Result<Arc<Self>> {
        let me = Arc::new(Self::default());
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
            .context("cannot install the sweep's signal handlers")?;
        let shared = me.clone();
        std::thread::spawn(move || {
            for sig in signals.forever() {
                shared.signal.store(sig, Ordering::SeqCst);
                forward(shared.child.load(Ordering::SeqCst), sig);
            }
        });
        Ok(me)
    }

    /// Signals that never come (a sweep run from a library or a test).
    pub fn none() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The signal received so far, if any.
    pub fn received(&self) -> Option<i32> {
        Some(self.signal.load(Ordering::SeqCst)).filter(|&s| s != 0)
    }

    /// A run started: signals go to it from now on (one that came while it was being
    /// started is passed on at once).
    pub fn child_started(&self, pid: u32) {
        let pid = pid as i32;
        self.child.store(pid, Ordering::SeqCst);
        if let Some(sig) = self.received() {
            forward(pid, sig);
        }
    }

    /// The run ended.
    pub fn child_ended(&self) {
        self.child.store(0, Ordering::SeqCst);
    }

    /// Fails once a signal came: a [`Stopped`] with exit code 128 + the signal, saying
    /// that running the sweep again resumes it.
    pub fn check(&self) -> Result<()> {
        match self.received() {
            Some(sig) => Err(anyhow::Error::new(Stopped {
                code: 128 + sig,
                message: format!(
                    "stopped by {} (forwarded to the run under way, which ended first); run the same tp-sweep again to resume",
                    signal_name(sig)
                ),
            })),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_reaches_the_child_started_after_it_and_stops_the_sweep() {
        let i = Interrupts::none();
        assert!(i.check().is_ok());
        i.signal.store(SIGTERM, Ordering::SeqCst);
        // A child that would ignore nothing: use a sleeping process we own.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        i.child_started(child.id());
        let status = child.wait().unwrap();
        i.child_ended();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(SIGTERM));
        let e = i.check().unwrap_err();
        assert!(e.to_string().contains("stopped by SIGTERM"), "{e}");
    }
}
