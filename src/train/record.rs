//! What a rank records as it trains: one [`StepRecord`] per optimiser step (instead of
//! parallel timers), the [`RankOutcome`] of a whole run, and the [`Reporter`] through
//! which rank 0 shows progress. Leaf types: they import nothing else of `train/`.

use crate::comm::TallySnapshot;
use crate::config::RunConfig;
use crate::ops::profile::OpTimes;
use crate::run_dir::{LogLine, RankCompute};
use anyhow::Result;

/// Seconds of one step's phases on this rank.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Phases {
    pub forward: f64,
    pub backward: f64,
    /// Gradient sync (TP partial sum, DP average), the norm and clipping.
    pub grad_sync: f64,
    pub optimizer: f64,
}

/// One optimiser step on this rank.
#[derive(Debug, Clone)]
pub struct StepRecord {
    pub step: usize,
    /// This rank's loss, averaged over its micro-steps (not over data-parallel ranks).
    pub local_loss: f32,
    pub lr: f64,
    /// The global gradient norm before clipping.
    pub grad_norm: f32,
    /// Wall-clock milliseconds of the whole step.
    pub ms: f64,
    /// Wall-clock milliseconds the rank was blocked in collectives during the step
    /// (waiting for the other ranks and for the link; at tp 1 nothing).
    pub waited_ms: f64,
    /// CPU milliseconds this rank computed in the step ([`super::compute_clock::ComputeClock`]); `None` where
    /// that is not its compute (math on a GPU or on more threads than the rank's own).
    pub compute_cpu_ms: Option<f64>,
    pub phases: Phases,
    /// Forward and backward passes (micro-steps) the step ran.
    pub passes: usize,
    /// Time and FLOPs of the step's ops on this rank (`ops::profile`).
    pub ops: OpTimes,
    /// Peak resident bytes of the process during the step (measured by rank 0 where
    /// /proc allows).
    pub peak_rss: Option<u64>,
}

/// Losses of one evaluation, averaged over data-parallel ranks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvalRecord {
    pub train_loss: f32,
    pub val_loss: f32,
}

/// The model's size: logical, and what one rank holds; and the gradient buckets that
/// size makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamCounts {
    pub logical: usize,
    pub local: usize,
    /// The buckets' size in bytes where backprop starts the gradient sums (`None`: one
    /// bucket after backprop, or nothing to sum).
    pub grad_bucket_bytes: Option<usize>,
}

/// Training steps and forward passes a tally covers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tallied {
    pub steps: usize,
    pub passes: usize,
}

/// What one rank's run produced.
pub struct RankOutcome {
    pub rank: usize,
    /// The lines written to (rank 0) or computed for (others) `log.jsonl`.
    pub log: Vec<LogLine>,
    /// Every training step this invocation ran, in order.
    pub steps: Vec<StepRecord>,
    /// Everything communicated, including what a resumed run's checkpoint had tallied
    /// before this invocation (`prior`).
    pub tally: TallySnapshot,
    /// Steps and passes the tally covered before this invocation's steps.
    pub prior: Tallied,
    pub sample: String,
    /// This rank's parameters after training, by name (only when asked for).
    pub params: Vec<(String, Vec<f32>)>,
    /// The model's parameters, and those this rank holds (shards and replicated tensors).
    pub param_counts: ParamCounts,
    pub best_val_loss: Option<f32>,
    /// The whole validation split's loss at the end (`final_eval: full`).
    pub final_eval: Option<crate::train::full_eval::SplitLoss>,
    /// Every rank's host ([`crate::util::host::label`]) in rank order, filled in by the
    /// launcher (empty until then).
    pub hosts: Vec<String>,
    /// Every rank's compute per step in this invocation, filled in by the launcher;
    /// `None` where a rank could not measure it or ran no steps.
    pub ranks_compute: Option<RankCompute>,
    /// This rank's timeline of the traced steps (`trace: true`).
    pub trace: Vec<crate::util::trace::Span>,
}

impl RankOutcome {
    /// Forward (and backward) passes of this invocation's training steps.
    pub fn passes(&self) -> usize {
        self.steps.iter().map(|s| s.passes).sum()
    }

    /// Steps and passes the tally covers: the prior ones and this invocation's.
    pub fn tallied(&self) -> Tallied {
        Tallied {
            steps: self.prior.steps + self.steps.len(),
            passes: self.prior.passes + self.passes(),
        }
    }
}

/// Rank 0's outlet for progress and logs; other ranks have none.
pub trait Reporter {
    fn started(&mut self, _cfg: &RunConfig, _params: ParamCounts) {}
    /// A line of the log, with the rank's communication tally after its step.
    fn logged(&mut self, _line: &LogLine, _comm: &crate::comm::TallySnapshot) -> Result<()> {
        Ok(())
    }
    fn step_done(&mut self, _record: &StepRecord, _tokens_per_s: f64) {}
    /// A resumed run took up its history at `step` (before training it): `comm` is the
    /// tally the checkpoint carried, the one the first invocation had there.
    fn resumed(&mut self, _step: usize, _comm: &crate::comm::TallySnapshot) {}
    fn finished(&mut self) {}
}
