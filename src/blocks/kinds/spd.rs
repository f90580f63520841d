//! `s` — SPDBlock (sync-point drop), one forward all-reduce:
//!
//! ```text
//! p_r = A_r(LN1(x))
//! a_r = x + p_r + b_o                                   # local
//! y   = x + sum_r (p_r + M_r(LN2(a_r))) + b_o + b_pr    # all-reduce 1
//! ```
//! LN1 and LN2 sit inside each rank's path: their gradients are partial per rank (tag
//! `ReplicatedPartial`, summed over the group once per step). `b_o` is used both inside
//! the rank path (`a_r`) and on the replicated sum: it is tagged partial too, and its
//! replicated use passes through `share_grad_over_tp`, so that the group sum counts that
//! use exactly once. `b_pr` is used on the replicated value only (tag `Replicated`).

use crate::blocks::spec::{Hiding, KindSpec, Reference, Stage, Syncs};
use crate::blocks::{add_bias, BlockConfig, BlockParams, BlockTags, DropSite, Fwd};
use crate::comm::{CountedComm, Site};
use crate::tp::{copy_to_tp, reduce_from_tp, share_grad_over_tp, ParamBuilder, ParamKind};
use anyhow::Result;
use candle_core::Tensor;

/// Every fact of the kind (`blocks/spec.rs`).
pub const SPEC: KindSpec = KindSpec {
    letter: 's',
    name: "SPDBlock",
    line: "sync-point drop: 1 all-reduce",
    syncs: Syncs::PerBlock(1),
    exposed_syncs: Syncs::PerBlock(1),
    hiding: Hiding::Nothing,
    sync_width: 1,
    depends_on_tp: true,
    tags: TAGS,
    staged_by_run: false,
    build: |b, cfg, first, _, tp| Ok(Box::new(SpdBlock::build(b, cfg, first, tp)?)),
    reference: Reference::Literal('s'),
    exported: true,
    keeps_stream_replicated: true,
};

pub struct SpdBlock {
    p: BlockParams,
    tp: CountedComm,
}

/// The norms and `b_o` sit inside each rank's path; `b_pr` only on the reduced sum.
pub const TAGS: BlockTags = BlockTags {
    ln1: ParamKind::ReplicatedPartial,
    ln2: ParamKind::ReplicatedPartial,
    b_o: Some(ParamKind::ReplicatedPartial),
    b_pr: Some(ParamKind::Replicated),
};

impl SpdBlock {
    pub fn build(
        b: &mut ParamBuilder,
        cfg: &BlockConfig,
        layer: usize,
        tp: &CountedComm,
    ) -> Result<Self> {
        Ok(Self {
            p: BlockParams::build(b, cfg, layer, TAGS)?,
            tp: tp.clone(),
        })
    }

    pub fn forward(&self, x: &Tensor, fwd: &Fwd) -> Result<Tensor> {
        let blk = &self.p;
        let (l, site, k) = (blk.layer, Site::Layer(blk.layer), blk.kernels);
        // Entry of the rank path: the partial input gradients of all ranks meet here.
        let x_r = copy_to_tp(x, &self.tp, site)?;
        let p = fwd.drop(
            &blk.attn.forward(&blk.ln1.forward(&x_r)?, fwd)?,
            l,
            DropSite::AttnOut,
        )?;
        let a = add_bias(
            k,
            &(&x_r + &p)?,
            blk.b_o.as_ref(),
            fwd,
            l,
            DropSite::AttnOut,
        )?;
        let m = fwd.drop(
            &blk.mlp.forward(&blk.ln2.forward(&a)?)?,
            l,
            DropSite::MlpOut,
        )?;
        let z = reduce_from_tp(&(p + m)?, &self.tp, site)?;
        let b_o = match &blk.b_o {
            Some(b) => Some(share_grad_over_tp(b, self.tp.size())?),
            None => None,
        };
        let y = add_bias(k, &(x + z)?, b_o.as_ref(), fwd, l, DropSite::AttnOut)?;
        add_bias(k, &y, blk.b_pr.as_ref(), fwd, l, DropSite::MlpOut)
    }
}

impl Stage for SpdBlock {
    fn forward(&self, x: &Tensor, fwd: &Fwd) -> Result<Tensor> {
        SpdBlock::forward(self, x, fwd)
    }
}
