//! CPU time of the calling thread: what a rank computed, whoever else shared its cores.
//! Ranks as threads (or oversubscribed processes) take turns on the machine's cores, so
//! a rank's wall-clock time depends on how many ranks share them; the CPU time its own
//! thread used does not (the time it would take on a machine of its own, up to cache
//! and memory-bandwidth effects).

use std::time::Duration;

/// CPU time the calling thread has used since it started (`CLOCK_THREAD_CPUTIME_ID`);
/// `None` where the clock cannot be read.
pub fn thread_cpu_time() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_sleeping_thread_uses_no_cpu_time_and_a_busy_one_uses_its_wall_time() {
        let c0 = thread_cpu_time().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let slept = thread_cpu_time().unwrap() - c0;
        assert!(slept < Duration::from_millis(10), "{slept:?}");
        let (c0, t0) = (thread_cpu_time().unwrap(), Instant::now());
        let mut x = 0u64;
        while t0.elapsed() < Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let busy = thread_cpu_time().unwrap() - c0;
        // Busy for 50 ms of wall time; the thread may have been descheduled for some.
        assert!(
            busy > Duration::from_millis(5) && busy <= t0.elapsed(),
            "{busy:?}"
        );
    }
}
