//! Resident memory of this process from `/proc/self` (Linux): current RSS, and the peak
//! since the last [`reset_peak`] (writing 5 to `clear_refs` restarts the kernel's
//! high-water mark), so that each step's peak can be read on its own.

/// `VmRSS` and `VmHWM` in bytes (None where /proc is unavailable).
pub fn rss_and_peak() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kb * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Restarts the peak-RSS mark; false where the kernel does not allow it.
pub fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_rss_rises_with_a_touched_allocation_and_falls_after_a_reset() {
        // From the current RSS, not the earlier peak: the peak is the whole test
        // process's, which other tests running alongside may have raised.
        let Some((before, _)) = rss_and_peak() else {
            return; // not Linux
        };
        let big = vec![1u8; 64 << 20];
        let (_, during) = rss_and_peak().unwrap();
        assert!(during >= before + (60 << 20), "{before} -> {during}");
        drop(std::hint::black_box(big));
        if reset_peak() {
            let (rss, after) = rss_and_peak().unwrap();
            assert!(
                after < during && after >= rss.min(after),
                "{during} -> {after}"
            );
        }
    }
}
