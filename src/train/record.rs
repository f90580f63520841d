//! What a rank records as it trains: one [`StepRecord`] per optimiser step (instead of
//! parallel timers), each evaluation's losses, the model's size and what a tally covers.
//! Leaf types: they import nothing else of `train/`. (A whole run's outcome and rank 0's
//! progress outlet are the lab's: `launch/outcome.rs`.)

use crate::ops::profile::OpTimes;

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
