//! `p` — ParallelBlock, one forward all-reduce per maximal run of consecutive `p`:
//!
//! ```text
//! x_r = x
//! for j = 1..L:
//!     p_r = A_r^j(LN1^j(x_r));  a_r = x_r + p_r;  z_r = p_r + M_r^j(LN2^j(a_r))
//!     if j < L: x_r = x_r + z_r                 # local
//! y = (1/N) sum_r x_r + sum_r z_r                # the run's one all-reduce
//! ```
//! `p` blocks have no output biases. Their LayerNorms live inside rank paths (tag
//! `ReplicatedPartial`). A run of length 1 is the same formula with `x_r = x`.

use crate::blocks::spec::{Hiding, KindSpec, Reference, Stage, Syncs};
use crate::blocks::{BlockConfig, BlockParams, BlockTags, DropSite, Fwd};
use crate::comm::{CountedComm, Site};
use crate::tp::{copy_to_tp, reduce_from_tp, ParamBuilder, ParamKind};
use anyhow::Result;
use candle_core::Tensor;

/// Norms inside rank paths; no output biases.
pub const TAGS: BlockTags = BlockTags {
    ln1: ParamKind::ReplicatedPartial,
    ln2: ParamKind::ReplicatedPartial,
    b_o: None,
    b_pr: None,
};

/// A maximal run of `p` blocks: layers `first .. first + len`.
/// Every fact of the kind (`blocks/spec.rs`).
pub const SPEC: KindSpec = KindSpec {
    letter: 'p',
    name: "ParallelBlock",
    line: "1 all-reduce per run of p blocks",
    syncs: Syncs::PerRun(1),
    exposed_syncs: Syncs::PerRun(1),
    hiding: Hiding::Nothing,
    sync_width: 1,
    depends_on_tp: true,
    tags: TAGS,
    staged_by_run: true,
    build: |b, cfg, first, len, tp| Ok(Box::new(ParallelRun::build(b, cfg, first, len, tp)?)),
    reference: Reference::Literal('p'),
    exported: true,
    keeps_stream_replicated: true,
};

pub struct ParallelRun {
    blocks: Vec<BlockParams>,
    tp: CountedComm,
}

impl ParallelRun {
    pub fn build(
        b: &mut ParamBuilder,
        cfg: &BlockConfig,
        first: usize,
        len: usize,
        tp: &CountedComm,
    ) -> Result<Self> {
        let blocks = BlockParams::build_run(b, cfg, first, len, TAGS)?;
        Ok(Self {
            blocks,
            tp: tp.clone(),
        })
    }

    pub fn forward(&self, x: &Tensor, fwd: &Fwd) -> Result<Tensor> {
        let first = self.blocks[0].layer;
        let last = self.blocks[self.blocks.len() - 1].layer;
        let mut x_r = copy_to_tp(x, &self.tp, Site::Layer(first))?;
        let mut z_r = None;
        let trace = self.tp.tally().trace();
        for (j, blk) in self.blocks.iter().enumerate() {
            let l = blk.layer;
            let _span = trace.span("block", || format!("layer {l} (p)"));
            let p = fwd.drop(
                &blk.attn.forward(&blk.ln1.forward(&x_r)?, fwd)?,
                l,
                DropSite::AttnOut,
            )?;
            let a = (&x_r + &p)?;
            let z = (p + fwd.drop(
                &blk.mlp.forward(&blk.ln2.forward(&a)?)?,
                l,
                DropSite::MlpOut,
            )?)?;
            if j + 1 < self.blocks.len() {
                x_r = (x_r + &z)?;
            }
            z_r = Some(z);
        }
        let z_r = z_r.expect("a p-run has at least one block");
        let n = self.tp.size();
        let out = if n == 1 {
            (x_r + z_r)?
        } else {
            ((x_r / n as f64)? + z_r)?
        };
        Ok(reduce_from_tp(&out, &self.tp, Site::Layer(last))?)
    }
}

impl Stage for ParallelRun {
    fn forward(&self, x: &Tensor, fwd: &Fwd) -> Result<Tensor> {
        ParallelRun::forward(self, x, fwd)
    }
}
