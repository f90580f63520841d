//! A rank's compute as the CPU time of its own thread: the compute part of the time
//! model that puts a run on another link (`analysis::timing`).

use crate::util::thread_cpu_time;
use crate::util::turns::cpu_in_collectives;
use std::time::Duration;

/// A rank's compute as the CPU time of its own thread: the step's thread CPU time less
/// what the thread spent inside collectives. Ranks as threads share the machine's cores,
/// so their wall-clock compute depends on how many share them; this is what the step
/// computes on a machine of the rank's own. Valid where all of the rank's math runs on
/// the calling thread (one math thread, on the CPU).
#[derive(Debug, Clone, Copy)]
pub struct ComputeClock {
    thread: Duration,
    in_collectives: Duration,
}

impl ComputeClock {
    /// Starts the clock where it measures the rank's compute; `None` elsewhere.
    pub fn start(device: &candle_core::Device) -> Option<Self> {
        if !device.is_cpu() || crate::ops::cpu::gemm::threads() > 1 {
            return None;
        }
        Some(Self {
            thread: thread_cpu_time()?,
            in_collectives: cpu_in_collectives(),
        })
    }

    /// Milliseconds computed since the start.
    pub fn ms(&self) -> Option<f64> {
        let thread = thread_cpu_time()?.saturating_sub(self.thread);
        let comm = cpu_in_collectives().saturating_sub(self.in_collectives);
        Some(thread.saturating_sub(comm).as_secs_f64() * 1e3)
    }
}
