//! What a rank's thread does while it is inside a collective, seen from the rank's side
//! of the time model:
//!
//! - it spends CPU time there (copying, summing, encoding, a little waiting) that is
//!   communication, not compute: [`cpu_in_collectives`] counts it, so that a rank's
//!   compute is its thread's CPU time less this;
//! - with **one rank at a time** ([`one_at_a_time`], `TP_ONE_RANK_AT_A_TIME=1` under the
//!   threads launcher) it gives up its turn: ranks then compute strictly one after
//!   another, each with the machine's cores to itself, and a rank's wall-clock compute is
//!   what it would take on a machine of its own. The measurement the thread-CPU-time
//!   model is held to (docs/results.md); slow, never the default.

use super::thread_cpu_time;
use std::cell::Cell;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

thread_local! {
    static CPU_IN_COLLECTIVES: Cell<Duration> = const { Cell::new(Duration::ZERO) };
    static HOLDS_TURN: Cell<bool> = const { Cell::new(false) };
}

/// CPU time this thread has spent inside counted collectives.
pub fn cpu_in_collectives() -> Duration {
    CPU_IN_COLLECTIVES.get()
}

/// Runs a collective's part on the calling rank's thread: its CPU time counted as spent
/// in collectives, and the turn given up meanwhile (then taken back, inside the call's
/// measured time) if this thread holds one.
pub(crate) fn inside_collective<R>(f: impl FnOnce() -> R) -> R {
    /// Takes the turn back when the collective is over, also if it panics (the rank's
    /// own guard then gives it up as it unwinds).
    struct Given;
    impl Drop for Given {
        fn drop(&mut self) {
            TURN.take();
        }
    }
    let c0 = thread_cpu_time();
    let given = HOLDS_TURN.get().then(|| {
        TURN.give();
        Given
    });
    let r = f();
    drop(given);
    if let (Some(a), Some(b)) = (c0, thread_cpu_time()) {
        CPU_IN_COLLECTIVES.set(CPU_IN_COLLECTIVES.get() + b.saturating_sub(a));
    }
    r
}

/// The one turn the ranks of this process pass between them.
struct Turn {
    taken: Mutex<bool>,
    freed: Condvar,
}

static TURN: Turn = Turn {
    taken: Mutex::new(false),
    freed: Condvar::new(),
};

impl Turn {
    fn take(&self) {
        let mut taken = self.taken.lock().unwrap_or_else(|p| p.into_inner());
        while *taken {
            taken = self.freed.wait(taken).unwrap_or_else(|p| p.into_inner());
        }
        *taken = true;
    }

    fn give(&self) {
        *self.taken.lock().unwrap_or_else(|p| p.into_inner()) = false;
        self.freed.notify_one();
    }
}

/// Whether ranks as threads should take turns (`TP_ONE_RANK_AT_A_TIME=1`).
pub fn one_at_a_time_requested() -> bool {
    one_at_a_time_from_env().unwrap_or(false)
}

/// `TP_ONE_RANK_AT_A_TIME` read and checked: `1` takes turns, `0` or unset does not,
/// anything else is an error naming the choices (checked when a run's config is).
pub fn one_at_a_time_from_env() -> Result<bool, String> {
    match std::env::var("TP_ONE_RANK_AT_A_TIME")
        .as_deref()
        .map(str::trim)
    {
        Err(_) | Ok("") | Ok("0") => Ok(false),
        Ok("1") => Ok(true),
        Ok(v) => Err(format!(
            "TP_ONE_RANK_AT_A_TIME={v} is not a choice: use 1 (ranks take turns) or 0, or unset it"
        )),
    }
}

/// Runs a rank's program holding the process's one turn outside its collectives. Every
/// rank of the process must run this way, or none.
pub fn one_at_a_time<R>(f: impl FnOnce() -> R) -> R {
    struct Held;
    impl Drop for Held {
        // Also on a panic: the other ranks must not wait for a turn nobody will give.
        fn drop(&mut self) {
            HOLDS_TURN.set(false);
            TURN.give();
        }
    }
    TURN.take();
    HOLDS_TURN.set(true);
    let _held = Held;
    f()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;

    /// Four threads that meet at a barrier twice (inside "collectives") while working in
    /// between: with turns, never two of them work at once, and nobody deadlocks.
    #[test]
    fn with_turns_ranks_compute_one_at_a_time_and_meet_in_collectives() {
        let working = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        let barrier = Barrier::new(4);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    one_at_a_time(|| {
                        for _ in 0..3 {
                            let now = working.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(2));
                            working.fetch_sub(1, Ordering::SeqCst);
                            inside_collective(|| barrier.wait());
                        }
                    })
                });
            }
        });
        assert_eq!(most.load(Ordering::SeqCst), 1);
        assert!(!*TURN.taken.lock().unwrap(), "the turn is free at the end");
    }

    #[test]
    fn cpu_time_inside_collectives_is_counted_on_the_calling_thread() {
        let before = cpu_in_collectives();
        inside_collective(|| {
            let t0 = std::time::Instant::now();
            let mut x = 1u64;
            while t0.elapsed() < Duration::from_millis(20) {
                x = std::hint::black_box(x.wrapping_mul(3));
            }
        });
        let spent = cpu_in_collectives() - before;
        assert!(spent > Duration::from_millis(2), "{spent:?}");
        inside_collective(|| std::thread::sleep(Duration::from_millis(20)));
        let slept = cpu_in_collectives() - before - spent;
        assert!(slept < Duration::from_millis(5), "{slept:?}");
    }
}
