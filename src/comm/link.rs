//! The model of an interconnect: a ring all-reduce of `bytes` over `N` ranks puts
//! `2 (N-1)/N * bytes` on each rank's link and takes `2 (N-1)` message latencies, so
//!
//! `seconds = 2 (N-1)/N * bytes * 8 / (Gbit/s * 1e9) + 2 (N-1) * latency + call cost`,
//!
//! NCCL's own cost model's shape (a call's `baseLat`, a step's `hwLat`, the bus
//! bandwidth); the named links and their sources are [`super::link_catalog`].
//!
//! [`ring_terms`] is that formula's one definition: the link model, the projection onto
//! named links and the calibration fit against real links all take their terms from it.
//! Bandwidths are in Gbit/s (10^9 bits per second, per direction) everywhere, as the
//! config's `link_gbps` and `tp-plot --link GBIT:US` are.
//!
//! Used two ways: to emulate a slower link on one machine (every collective is held to at
//! least the modelled time, so the benefit of fewer syncs becomes measurable), and to
//! project a run's communication time onto named links from its tally.

use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The two terms of `calls` ring all-reduces moving `bytes` in total over `n` ranks:
/// (bits each rank sends, message latencies in sequence). Zero for a group of one.
pub fn ring_terms(calls: f64, bytes: f64, n: usize) -> (f64, f64) {
    if n <= 1 {
        return (0.0, 0.0);
    }
    let n = n as f64;
    (2.0 * (n - 1.0) / n * bytes * 8.0, calls * 2.0 * (n - 1.0))
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LinkModel {
    /// Bandwidth per direction, Gbit/s (infinite: latency only).
    pub gbit_per_s: f64,
    /// One-way latency per message (a ring step), microseconds.
    pub latency_us: f64,
    /// A call's fixed cost, microseconds (NCCL's `baseLat`); 0 for an emulated link and
    /// in records written before it existed.
    #[serde(default)]
    pub call_us: f64,
}

impl LinkModel {
    /// From the config's `link_gbps` (Gbit/s) and `link_latency_us`; `None` when both are
    /// zero (no emulation).
    pub fn from_config(link_gbps: f64, link_latency_us: f64) -> Option<Self> {
        if link_gbps <= 0.0 && link_latency_us <= 0.0 {
            return None;
        }
        Some(Self {
            gbit_per_s: if link_gbps > 0.0 {
                link_gbps
            } else {
                f64::INFINITY
            },
            latency_us: link_latency_us.max(0.0),
            call_us: 0.0,
        })
    }

    /// Seconds for `calls` all-reduces moving `bytes` in total over `n` ranks.
    pub fn seconds(&self, calls: u64, bytes: u64, n: usize) -> f64 {
        let (latency, bandwidth) = self.parts(calls as f64, bytes as f64, n);
        latency + bandwidth
    }

    /// [`Self::seconds`] in its two parts: (latency, bandwidth) seconds.
    pub fn parts(&self, calls: f64, bytes: f64, n: usize) -> (f64, f64) {
        let (bits, messages) = ring_terms(calls, bytes, n);
        let call_cost = if n > 1 { calls * self.call_us } else { 0.0 };
        (
            (messages * self.latency_us + call_cost) * 1e-6,
            bits / (self.gbit_per_s * 1e9),
        )
    }

    /// Seconds for one all-reduce of `bytes` over `n` ranks.
    pub fn allreduce_seconds(&self, bytes: u64, n: usize) -> f64 {
        self.seconds(1, bytes, n)
    }
}

/// An emulated link a rank's group shares: it carries one collective after another (a
/// real link does not carry two at full rate), each for its modelled time.
#[derive(Clone)]
pub(crate) struct EmulatedLink {
    model: LinkModel,
    /// When the link is done with what it has carried so far.
    free_at: Arc<Mutex<Instant>>,
}

impl EmulatedLink {
    pub(crate) fn new(model: LinkModel) -> Self {
        Self {
            model,
            free_at: Arc::new(Mutex::new(Instant::now())),
        }
    }

    /// Books a collective of `bytes` over `n` ranks issued at `t0`: it goes on the link
    /// when the link is free, for its modelled time. Returns when it is done there, and
    /// that modelled time in seconds.
    pub(crate) fn book(&self, t0: Instant, bytes: u64, n: usize) -> (Instant, f64) {
        let modelled = self.model.allreduce_seconds(bytes, n);
        let mut free_at = self.free_at.lock().unwrap_or_else(|p| p.into_inner());
        let due = (*free_at).max(t0) + Duration::from_secs_f64(modelled);
        *free_at = due;
        (due, modelled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_cost_matches_the_formula() {
        let l = LinkModel::from_config(10.0, 25.0).unwrap(); // 10 Gbit/s
        let s = l.allreduce_seconds(1_250_000, 2); // 2*(1/2)*1e7 bits/1e10 + 2*25e-6
        assert!((s - (1e-3 + 50e-6)).abs() < 1e-12, "{s}");
        assert_eq!(l.allreduce_seconds(1000, 1), 0.0);
        assert!((l.seconds(3, 3_750_000, 2) - 3.0 * s).abs() < 1e-12);
        assert!(LinkModel::from_config(0.0, 0.0).is_none());
        assert_eq!(ring_terms(4.0, 1000.0, 4), (12_000.0, 24.0));
    }
}
