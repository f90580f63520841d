//! `l` — LadderBlock (Ladder Residual), two forward all-reduces each waited for one module
//! later, over a maximal run of consecutive `l` blocks:
//!
//! ```text
//! x1   = x + P_a                      # the previous l block's attention sum
//! P_a' = sum_r A_r(LN1(x1)) + b_o     # all-reduce 1, waited for in the next block
//! x2   = x1 + P_m                     # the previous l block's MLP sum
//! P_m' = sum_r M_r(LN2(x2)) + b_pr    # all-reduce 2, waited for in the next block
//! y    = x2 + P_a' + P_m'             # where the run ends
//! ```
//! Like `t`, every replicated parameter is used on replicated values only (tag
//! `Replicated`), and `f` after each LayerNorm all-reduces the input gradient.
//!
//! Each all-reduce is started where its module's partial output is ready and waited for
//! where the sum joins the stream, so it runs while the next module computes (on backends
//! that progress in the background: see `CountedComm::start`). The backward pass's
//! all-reduces (the `f` at each module's input) still block.

use super::{BlockConfig, BlockParams, DropSite, Fwd};
use crate::comm::{CountedComm, Site, Started};
use crate::tp::{copy_to_tp, start_reduce_from_tp, ParamBuilder};
use anyhow::Result;
use candle_core::Tensor;

/// A module's all-reduce in flight, with the block and site it belongs to.
type InFlight<'a> = (Started<Tensor>, &'a BlockParams, DropSite);

/// A maximal run of `l` blocks: layers `first .. first + len`.
pub struct LadderRun {
    blocks: Vec<BlockParams>,
    tp: CountedComm,
}

impl LadderRun {
    pub fn build(
        b: &mut ParamBuilder,
        cfg: &BlockConfig,
        first: usize,
        len: usize,
        tp: &CountedComm,
    ) -> Result<Self> {
        let blocks = BlockParams::build_run(b, cfg, first, len, super::t::TAGS)?;
        Ok(Self {
            blocks,
            tp: tp.clone(),
        })
    }

    pub fn forward(&self, x: &Tensor, fwd: &Fwd) -> Result<Tensor> {
        let mut x = x.clone();
        let mut p_a: Option<InFlight> = None;
        let mut p_m: Option<InFlight> = None;
        let trace = self.tp.tally().trace();
        for blk in &self.blocks {
            let site = Site::Layer(blk.layer);
            let _span = trace.span("block", || format!("layer {} (l)", blk.layer));
            if let Some(p) = p_a.take() {
                x = (x + self.join(p, fwd)?)?;
            }
            let h = copy_to_tp(&blk.ln1.forward(&x)?, &self.tp, site)?;
            let partial = blk.attn.forward(&h, fwd)?;
            p_a = Some((
                start_reduce_from_tp(&partial, &self.tp, site)?,
                blk,
                DropSite::AttnOut,
            ));
            if let Some(p) = p_m.take() {
                x = (x + self.join(p, fwd)?)?;
            }
            let h = copy_to_tp(&blk.ln2.forward(&x)?, &self.tp, site)?;
            let partial = blk.mlp.forward(&h)?;
            p_m = Some((
                start_reduce_from_tp(&partial, &self.tp, site)?,
                blk,
                DropSite::MlpOut,
            ));
        }
        for p in [p_a, p_m].into_iter().flatten() {
            x = (x + self.join(p, fwd)?)?;
        }
        Ok(x)
    }

    /// A started module sum as it joins the stream: waited for, dropout, then its bias
    /// (as `t` adds them).
    fn join(&self, (pending, blk, at): InFlight, fwd: &Fwd) -> Result<Tensor> {
        blk.joined(&pending.wait()?, fwd, at)
    }
}
