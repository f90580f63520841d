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

use super::{
    add_bias, build_norm, build_out_bias, AttentionShard, BlockConfig, DropSite, Fwd, MlpShard,
};
use crate::ops::Norm;
use crate::tp::{
    copy_to_tp, reduce_from_tp, share_grad_over_tp, CountedComm, ParamBuilder, ParamKind, Site,
};
use anyhow::Result;
use candle_core::Tensor;

pub struct SpdBlock {
    layer: usize,
    ln1: Norm,
    attn: AttentionShard,
    b_o: Option<Tensor>,
    ln2: Norm,
    mlp: MlpShard,
    b_pr: Option<Tensor>,
    tp: CountedComm,
}

impl SpdBlock {
    pub fn build(
        b: &mut ParamBuilder,
        cfg: &BlockConfig,
        layer: usize,
        tp: &CountedComm,
    ) -> Result<Self> {
        let partial = ParamKind::ReplicatedPartial;
        Ok(Self {
            layer,
            ln1: build_norm(b, cfg, &format!("h.{layer}.ln1"), partial)?,
            attn: AttentionShard::build(b, cfg, layer, tp.rank())?,
            b_o: build_out_bias(b, cfg, &format!("h.{layer}.o.b"), partial)?,
            ln2: build_norm(b, cfg, &format!("h.{layer}.ln2"), partial)?,
            mlp: MlpShard::build(b, cfg, layer)?,
            b_pr: build_out_bias(b, cfg, &format!("h.{layer}.pr.b"), ParamKind::Replicated)?,
            tp: tp.clone(),
        })
    }

    pub fn forward(&self, x: &Tensor, fwd: &Fwd) -> Result<Tensor> {
        let (l, site) = (self.layer, Site::Layer(self.layer));
        // Entry of the rank path: the partial input gradients of all ranks meet here.
        let x_r = copy_to_tp(x, &self.tp, site)?;
        let p = fwd.drop(
            &self.attn.forward(&self.ln1.forward(&x_r)?, fwd)?,
            l,
            DropSite::AttnOut,
        )?;
        let a = add_bias(&(&x_r + &p)?, self.b_o.as_ref(), fwd, l, DropSite::AttnOut)?;
        let m = fwd.drop(
            &self.mlp.forward(&self.ln2.forward(&a)?)?,
            l,
            DropSite::MlpOut,
        )?;
        let z = reduce_from_tp(&(p + m)?, &self.tp, site)?;
        let b_o = match &self.b_o {
            Some(b) => Some(share_grad_over_tp(b, self.tp.size())?),
            None => None,
        };
        let y = add_bias(&(x + z)?, b_o.as_ref(), fwd, l, DropSite::AttnOut)?;
        add_bias(&y, self.b_pr.as_ref(), fwd, l, DropSite::MlpOut)
    }
}
