//! The sweep's stopping rule: more seeds where the answer is still too uncertain.
//!
//! ```yaml
//! seeds: [1337, 1, 2, 3]
//! baseline: tttt
//! more_seeds: {until_ci95: 0.005, max_seeds: 12}
//! ```
//!
//! After the sweep's own seeds, every group (points equal but for the seed) whose
//! difference from the baseline, paired by seed, has a 95% interval wider than
//! ±`until_ci95` gets one more seed — with its baseline partner, so that the new seed
//! pairs — and this repeats until every group's interval is that narrow or has
//! `max_seeds` seeds. The rule stops on the interval's *width*, never on whether it
//! excludes zero: stopping once a difference looks significant would make "significant"
//! come up more often than 5% of the time when nothing differs; the width depends on the
//! spread alone, so the intervals keep their meaning. A rerun of the sweep adds the same
//! seeds in the same order (the next seed is the next number after every seed used), so
//! it resumes like any sweep.

use super::runner::PointResult;
use super::spec::{MoreSeeds, Point};
use super::summary::groups;
use crate::analysis::ReplicateKey;
use crate::config::Variant;

/// A group that needs another seed: its name and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Wide {
    pub group: String,
    /// Its current paired interval's half-width (infinite with fewer than two pairs).
    pub ci95: f64,
}

impl MoreSeeds {
    /// The points of the next round, and the groups they are for: one more seed for
    /// every non-baseline group whose interval is wider than the target and that has
    /// fewer than `max_seeds` seeds, and for the baseline groups they pair with. Empty
    /// when the rule is met.
    /// `tuned`: the keys each layout ran at its own best of (a tuned sweep's report
    /// runs), which pairing leaves aside.
    pub fn next_round(
        &self,
        results: &[PointResult],
        baseline: &Variant,
        tuned: &[String],
    ) -> (Vec<Point>, Vec<Wide>) {
        let tried = |group: &str| results.iter().filter(|r| r.point.group == group).count();
        let rest = |p: &Point| ReplicateKey::without_pattern_or(&p.cfg, tuned).ok();
        let Some(seed) = results.iter().map(|r| r.point.cfg.optim.seed).max() else {
            return (Vec::new(), Vec::new());
        };
        let seed = seed + 1;
        let (mut points, mut wide): (Vec<Point>, Vec<Wide>) = (Vec::new(), Vec::new());
        for g in groups(results, Some(baseline), tuned) {
            let ci95 = g.vs_baseline.map_or(f64::INFINITY, |d| d.ci95);
            if g.is_baseline || tried(&g.group) >= self.max_seeds || ci95 <= self.until_ci95 {
                continue;
            }
            let Some(first) = results.iter().find(|r| r.point.group == g.group) else {
                continue;
            };
            // Without a baseline run to pair with, more seeds cannot narrow anything.
            let Some(partner) = results.iter().find(|r| {
                r.point.cfg.variant().same_layout(baseline) && rest(&r.point) == rest(&first.point)
            }) else {
                continue;
            };
            for p in [&first.point, &partner.point] {
                let p = with_seed(p, seed);
                if !points.iter().any(|q| q.name == p.name) {
                    points.push(p);
                }
            }
            wide.push(Wide {
                group: g.group,
                ci95,
            });
        }
        (points, wide)
    }
}

/// `p` with another seed: the same group, named as the grid names its points.
fn with_seed(p: &Point, seed: u64) -> Point {
    let mut q = p.clone();
    q.cfg.optim.seed = seed;
    q.name = if p.group.is_empty() {
        format!("seed={seed}")
    } else {
        format!("{},seed={seed}", p.group)
    };
    q
}
