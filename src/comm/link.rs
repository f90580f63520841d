//! A model of the interconnect: the ring all-reduce cost
//! `2 (N-1)/N * bytes / bandwidth + 2 (N-1) * latency`.
//!
//! Used two ways: to emulate a slower link on one machine (every collective is held to at
//! least the modelled time, so the benefit of fewer syncs becomes measurable), and to
//! project a run's communication time onto named links from its tally.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LinkModel {
    /// Bandwidth per direction, GB/s (1e9 bytes).
    pub gbytes_per_s: f64,
    /// One-way latency per message, microseconds.
    pub latency_us: f64,
}

impl LinkModel {
    /// From the config's `link_gbps` (gigabits/s) and `link_latency_us`; `None` when both
    /// are zero (no emulation).
    pub fn from_config(link_gbps: f64, link_latency_us: f64) -> Option<Self> {
        if link_gbps <= 0.0 && link_latency_us <= 0.0 {
            return None;
        }
        Some(Self {
            gbytes_per_s: if link_gbps > 0.0 {
                link_gbps / 8.0
            } else {
                f64::INFINITY
            },
            latency_us: link_latency_us.max(0.0),
        })
    }

    /// Seconds for one all-reduce of `bytes` over `n` ranks.
    pub fn allreduce_seconds(&self, bytes: u64, n: usize) -> f64 {
        if n <= 1 {
            return 0.0;
        }
        let n = n as f64;
        2.0 * (n - 1.0) / n * bytes as f64 / (self.gbytes_per_s * 1e9)
            + 2.0 * (n - 1.0) * self.latency_us * 1e-6
    }

    /// Seconds for `calls` all-reduces moving `bytes` in total over `n` ranks.
    pub fn seconds(&self, calls: u64, bytes: u64, n: usize) -> f64 {
        if n <= 1 || calls == 0 {
            return 0.0;
        }
        let nf = n as f64;
        2.0 * (nf - 1.0) / nf * bytes as f64 / (self.gbytes_per_s * 1e9)
            + calls as f64 * 2.0 * (nf - 1.0) * self.latency_us * 1e-6
    }
}

/// Named links for projections. Bandwidths are per direction; latencies are typical
/// small-message figures, assumptions rather than measurements.
pub const NAMED_LINKS: [(&str, LinkModel); 4] = [
    (
        "NVLink 4 (H100)",
        LinkModel {
            gbytes_per_s: 450.0,
            latency_us: 2.0,
        },
    ),
    (
        "PCIe 4 x16",
        LinkModel {
            gbytes_per_s: 25.0,
            latency_us: 5.0,
        },
    ),
    (
        "InfiniBand 100 Gb",
        LinkModel {
            gbytes_per_s: 12.5,
            latency_us: 2.0,
        },
    ),
    (
        "10 GbE",
        LinkModel {
            gbytes_per_s: 1.25,
            latency_us: 25.0,
        },
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_cost_matches_the_formula() {
        let l = LinkModel::from_config(10.0, 25.0).unwrap(); // 10 Gb/s = 1.25 GB/s
        let s = l.allreduce_seconds(1_250_000, 2); // 2*(1/2)*1.25e6/1.25e9 + 2*25e-6
        assert!((s - (1e-3 + 50e-6)).abs() < 1e-12, "{s}");
        assert_eq!(l.allreduce_seconds(1000, 1), 0.0);
        assert!((l.seconds(3, 3_750_000, 2) - 3.0 * s).abs() < 1e-12);
        assert!(LinkModel::from_config(0.0, 0.0).is_none());
    }
}
