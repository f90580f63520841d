//! Where a trainer's batches come from: any source that gives every rank of a TP group the
//! same batch for the same key (the lab's loader, `data/loader.rs`, draws them from a
//! stream keyed by seed, split and step, so a resumed run sees the same ones).

use anyhow::Result;
use candle_core::Tensor;

/// The split an evaluation reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvalSplit {
    Train,
    Val,
}

/// Token windows `(x, y)`, each `(batch, block)` u32, `y` shifted by one.
pub trait Batches {
    /// Micro-batch `micro` of training step `step` (this data-parallel rank's slice).
    fn train_batch(&self, step: u64, micro: u64) -> Result<(Tensor, Tensor)>;
    /// The `index`-th evaluation batch of `split` (indices never repeat over a run).
    fn eval_batch(&self, split: EvalSplit, index: u64) -> Result<(Tensor, Tensor)>;
}
