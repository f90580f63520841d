//! The typed files of a run directory besides the log and checkpoints: `comm.json` (the
//! communication report) and `summary.json` (the headline numbers). Written and read back
//! through these types only, so a renamed field is a compile error, not an empty plot.

use crate::data::Split;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;
use tp_harness::blocks::BlockKind;
use tp_harness::comm::{CommDtype, CommKind, LinkModel, Stat};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerComm {
    pub layer: usize,
    /// Block kind: t, s, p or l.
    pub kind: String,
    /// TP all-reduces issued by this layer per forward pass.
    pub forward_allreduces: f64,
    /// TP all-reduces issued by this layer per backward pass.
    pub backward_allreduces: f64,
    /// Bytes all-reduced by this layer per optimiser step (forward + backward).
    pub bytes: f64,
    /// Seconds spent in this layer's collectives per optimiser step, from each one's
    /// start to its result.
    pub seconds: f64,
    /// Of `seconds`, the part the rank computed through (started all-reduces of `l`
    /// blocks, from start to wait); 0 in reports written before there were any.
    #[serde(default)]
    pub hidden_seconds: f64,
}

/// The collectives of a site outside the layers: the vocabulary-parallel `embedding`
/// lookup and `head` (logits and cross-entropy).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiteComm {
    pub site: String,
    /// All-reduces per forward pass.
    pub forward_allreduces: f64,
    /// All-reduces per backward pass.
    pub backward_allreduces: f64,
    /// Bytes all-reduced per optimiser step (forward + backward).
    pub bytes: f64,
    /// Seconds in these collectives per optimiser step.
    pub seconds: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerStep {
    pub calls: f64,
    pub bytes: f64,
    /// Measured (including any emulated delay).
    pub seconds: f64,
    /// What the emulated link charged (0 without emulation).
    pub modelled_seconds: f64,
    /// Of `seconds`, the part the rank computed through (see [`LayerComm`]).
    #[serde(default)]
    pub hidden_seconds: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommReport {
    pub pattern: String,
    pub layout: String,
    pub tp: usize,
    pub dp: usize,
    pub steps: usize,
    pub forward_passes: usize,
    pub backward_passes: usize,
    /// blocks.md's `2 t + 2 l + s + p-runs`.
    pub formula_forward_allreduces: usize,
    /// Measured TP all-reduces per forward pass issued by the blocks, what the formula
    /// counts (0 at tp 1: nothing is communicated).
    pub tp_forward_allreduces: f64,
    /// Measured TP all-reduces per backward pass issued by the blocks.
    pub tp_backward_allreduces: f64,
    /// What the layers' TP all-reduces travelled in (`bytes` are those that travelled).
    #[serde(default)]
    pub comm_dtype: CommDtype,
    pub layers: Vec<LayerComm>,
    /// Sites outside the layers that communicate (`vocab_parallel`: embedding, head);
    /// empty otherwise.
    #[serde(default)]
    pub outside_layers: Vec<SiteComm>,
    /// Each rank's host (host name and network namespace), in rank order.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Per optimiser step, by kind (tp-forward, tp-backward, tp-param-grad, dp-grad, other).
    pub per_step: BTreeMap<CommKind, PerStep>,
    /// Whole run, by kind.
    pub totals: BTreeMap<CommKind, Stat>,
    /// Evaluation and sampling traffic, by kind (not in the per-step figures).
    pub eval: BTreeMap<CommKind, Stat>,
    /// The emulated link, if any (`link_gbps`, `link_latency_us`).
    pub emulated_link: Option<LinkModel>,
    /// Communication seconds per step this run's collectives would take on named links
    /// (ring all-reduce model over each collective's group; compute not included).
    pub projected_seconds_per_step: BTreeMap<String, f64>,
    /// Each rank's compute per step as the CPU time of its own thread, where the run
    /// could measure it (older runs, GPU runs and ranks with several math threads: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute: Option<RankCompute>,
    /// The gradient buckets' size in bytes where backprop started the gradient sums
    /// (`ddp_bucket_mb` resolved for the model); absent where they ran in one bucket
    /// after it, there was nothing to sum, or the run predates the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_bucket_bytes: Option<u64>,
}

/// Each rank's compute per step, measured as its thread's CPU time less the CPU time it
/// spent inside collectives: what the step computes on a machine of the rank's own,
/// however many ranks shared this one's cores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankCompute {
    /// Median ms per step of each rank, in rank order.
    pub per_rank_ms: Vec<f64>,
    /// Each rank's median of its step's wall-clock time less the time it was blocked in
    /// collectives: its compute where it had cores of its own (or took turns with the
    /// others, `TP_ONE_RANK_AT_A_TIME=1`); else inflated by the turns its thread waited
    /// for a core.
    #[serde(default)]
    pub per_rank_wall_ms: Vec<f64>,
    /// The steps the medians are over (a resumed run: its last invocation's).
    pub steps: usize,
}

impl RankCompute {
    /// The slowest rank's compute, which the others wait for at each synchronisation.
    pub fn max_ms(&self) -> f64 {
        self.per_rank_ms.iter().copied().fold(0.0, f64::max)
    }

    /// The fastest rank's compute.
    pub fn min_ms(&self) -> f64 {
        self.per_rank_ms
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min)
    }

    /// How much slower the ranks computed by the wall clock than by their own CPU time,
    /// beyond what `ranks_here` ranks sharing `cores` explains (median over ranks; 1: the
    /// machine was the run's own). Well above 1, something else ran beside it, and its
    /// wall-clock speeds (tokens/s) are the shared machine's, not the run's.
    pub fn sharing_slowdown(&self, ranks_here: usize, cores: usize) -> Option<f64> {
        let mut ratios: Vec<f64> = self
            .per_rank_ms
            .iter()
            .zip(&self.per_rank_wall_ms)
            .filter(|(cpu, _)| **cpu > 0.0)
            .map(|(cpu, wall)| wall / cpu)
            .collect();
        if ratios.is_empty() {
            return None;
        }
        ratios.sort_by(f64::total_cmp);
        let own_turns = (ranks_here as f64 / cores.max(1) as f64).max(1.0);
        Some(ratios[ratios.len() / 2] / own_turns)
    }

    /// How much less the fastest rank computes than the slowest, as a share of the slowest
    /// (0 when the ranks are balanced).
    pub fn imbalance(&self) -> f64 {
        let max = self.max_ms();
        if max > 0.0 {
            1.0 - self.min_ms() / max
        } else {
            0.0
        }
    }
}

impl CommReport {
    /// Ranks of the group a kind's collectives ran over, as the tally recorded them (1
    /// when none ran).
    pub fn group_size(&self, kind: CommKind) -> usize {
        self.totals.get(&kind).map_or(1, |s| s.group_size.max(1))
    }

    pub fn to_json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(self)?)
    }

    /// Whether some collective was started before it was waited for (a column for it).
    /// Whether any collective was hidden: a layer's (the ladder's) or any kind's per step
    /// (the gradient buckets DDP overlaps with backprop are outside the layers).
    fn any_hidden(&self) -> bool {
        self.layers.iter().any(|l| l.hidden_seconds > 0.0)
            || self.per_step.values().any(|v| v.hidden_seconds > 0.0)
    }

    /// The per-layer rows of [`Self::table`], with their header.
    fn layer_rows(&self, s: &mut String) {
        // Hidden time is worth a column only where some collective was started early.
        let hidden = self.any_hidden();
        let _ = write!(
            s,
            "  {:<6} {:<4} {:>8} {:>8} {:>12} {:>10}",
            "layer", "kind", "fwd/pass", "bwd/pass", "KiB/step", "ms/step"
        );
        let _ = writeln!(s, "{}", if hidden { "  hidden ms" } else { "" });
        for l in &self.layers {
            let _ = write!(
                s,
                "  {:<6} {:<4} {:>8} {:>8} {:>12.1} {:>10.3}",
                format!("h.{}", l.layer),
                l.kind,
                l.forward_allreduces,
                l.backward_allreduces,
                l.bytes / 1024.0,
                l.seconds * 1e3
            );
            if hidden {
                let _ = write!(s, " {:>10.3}", l.hidden_seconds * 1e3);
            }
            let _ = writeln!(s);
        }
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "communication: pattern {} (layout {}), tp {}, dp {}, {} steps",
            self.pattern, self.layout, self.tp, self.dp, self.steps
        );
        let _ = writeln!(
            s,
            "  TP all-reduces per forward pass {} (blocks.md formula {}), per backward pass {}",
            self.tp_forward_allreduces,
            self.formula_forward_allreduces,
            self.tp_backward_allreduces
        );
        self.layer_rows(&mut s);
        for o in &self.outside_layers {
            let _ = writeln!(
                s,
                "  {:<11} {:>8} {:>8} {:>12.1} {:>10.3}",
                o.site,
                o.forward_allreduces,
                o.backward_allreduces,
                o.bytes / 1024.0,
                o.seconds * 1e3
            );
        }
        // The ring model's time is worth a column only where a link is emulated: without
        // one every collective's modelled time is zero.
        let modelled = self.emulated_link.is_some();
        let _ = write!(
            s,
            "  {:<14} {:>10} {:>12} {:>10}",
            "per step", "calls", "KiB", "ms"
        );
        let hidden = self.any_hidden();
        let _ = write!(s, "{}", if modelled { "  modelled ms" } else { "" });
        let _ = writeln!(s, "{}", if hidden { "  hidden ms" } else { "" });
        for (k, v) in &self.per_step {
            let _ = write!(
                s,
                "  {:<14} {:>10.2} {:>12.1} {:>10.3}",
                k.label(),
                v.calls,
                v.bytes / 1024.0,
                v.seconds * 1e3,
            );
            if modelled {
                let _ = write!(s, " {:>12.3}", v.modelled_seconds * 1e3);
            }
            if hidden {
                let _ = write!(s, " {:>10.3}", v.hidden_seconds * 1e3);
            }
            let _ = writeln!(s);
        }
        self.footnotes(&mut s);
        s
    }

    /// What the table's figures rest on: the hosts, the emulated link, the buckets, the
    /// ranks' compute, and the projection onto named links.
    fn footnotes(&self, s: &mut String) {
        let mut distinct: Vec<&String> = self.hosts.iter().collect();
        distinct.sort();
        distinct.dedup();
        if distinct.len() > 1 {
            let per_rank: Vec<String> = self
                .hosts
                .iter()
                .map(|h| (distinct.iter().position(|d| *d == h).unwrap_or(0) + 1).to_string())
                .collect();
            let _ = writeln!(
                s,
                "  {} hosts; host of each rank: {}",
                distinct.len(),
                per_rank.join(" ")
            );
        }
        if let Some(l) = &self.emulated_link {
            let _ = writeln!(
                s,
                "  emulated link: {} Gbit/s, {} us latency (modelled ms: the ring all-reduce time on it, which every collective's flight lasts at least; ms is the rank's own time on it, hidden + exposed, each moment counted once: a started collective's ms is less than its modelled time where its flight overlapped the rank's wait for another collective or a window an earlier one already counted as hidden)",
                l.gbit_per_s, l.latency_us
            );
        }
        if let Some(b) = self.grad_bucket_bytes {
            let _ = writeln!(
                s,
                "  gradient sums started during backprop in buckets of {:.2} MiB (the first at most 1 MiB)",
                b as f64 / (1 << 20) as f64
            );
        }
        if let Some(c) = &self.compute {
            let _ = writeln!(
                s,
                "  compute per step (each rank's thread CPU time, median of {} steps): slowest rank {:.2} ms, fastest {:.2} ms, imbalance {:.1}%",
                c.steps,
                c.max_ms(),
                c.min_ms(),
                100.0 * c.imbalance()
            );
        }
        let _ = writeln!(
            s,
            "  projected communication per step (ring all-reduce model):"
        );
        for (name, secs) in &self.projected_seconds_per_step {
            let _ = writeln!(s, "    {:<32} {:>10.3} ms", name, secs * 1e3);
        }
    }
}

/// How much a block's sync matters (SPD): the loss rise of converting it alone, relative
/// to the unconverted model's loss: under 1% insensitive, under 5% sensitive.
/// Named once: serde's name is strum's (`extremely sensitive`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Tier {
    Insensitive,
    Sensitive,
    #[serde(rename = "extremely sensitive")]
    #[strum(serialize = "extremely sensitive")]
    ExtremelySensitive,
}

impl Tier {
    /// The tier of a loss rise of `rise` over a loss of `base`.
    pub fn of(rise: f64, base: f64) -> Self {
        match rise / base {
            r if r < 0.01 => Tier::Insensitive,
            r if r < 0.05 => Tier::Sensitive,
            _ => Tier::ExtremelySensitive,
        }
    }

    pub fn label(self) -> &'static str {
        self.into()
    }
}

/// One block of a sensitivity scan (`scan.json`): the pattern with only this block
/// converted, its full-split val loss, the rise over the unconverted model and the tier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScanBlock {
    pub block: usize,
    pub pattern: String,
    pub loss: f64,
    pub rise: f64,
    pub tier: Tier,
}

/// A pattern the scan evaluated as a whole, with its forward all-reduces per pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScanStep {
    pub pattern: String,
    pub forward_allreduces: usize,
    /// Of those, the ones a rank waits for with nothing to overlap
    /// ([`tp_harness::blocks::BlockLayout::exposed_allreduces`]): the budget recommendations fit.
    #[serde(default)]
    pub exposed_allreduces: usize,
    pub loss: f64,
}

/// The SPD block-wise sensitivity scan of a checkpoint (`tp-scan`, `scan.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScanReport {
    pub checkpoint: String,
    pub step: usize,
    pub tp: usize,
    /// The kind blocks are converted to, `s`, `p` or `l`.
    pub to: BlockKind,
    pub base_pattern: String,
    pub base_forward_allreduces: usize,
    #[serde(default)]
    pub base_exposed_allreduces: usize,
    pub base_loss: f64,
    /// Predictions of the validation split each loss averages.
    pub val_tokens: usize,
    /// Each t block alone, from the last down.
    pub blocks: Vec<ScanBlock>,
    /// The last block, the last two, ... converted.
    pub cumulative: Vec<ScanStep>,
    /// Per budget of exposed forward all-reduces: the least sensitive blocks converted.
    pub recommended: Vec<ScanStep>,
}

/// A model's loss over a whole split (`eval.json`, `eval-train.json`): written by
/// `tp-eval` and at the end of a run with `final_eval: full`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    /// Mean cross-entropy over every prediction of the split.
    pub loss: f64,
    /// Predictions averaged: the split's tokens minus one.
    pub tokens: usize,
    pub split: Split,
    /// Tensor-parallel ranks the model ran on.
    pub tp: usize,
    /// The checkpoint evaluated (its directory) and its step.
    pub checkpoint: String,
    pub step: usize,
}

/// Where a run diverged (`diverged.json`): the step at which the training loss or the
/// gradient norm became non-finite, so training stopped before applying it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DivergedReport {
    pub step: usize,
    /// What became non-finite: "the training loss", "the gradient norm".
    pub what: String,
    /// Its value as printed (`NaN`, `inf`).
    pub value: String,
}
