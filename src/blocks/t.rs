//! `t` — TPBlock (Megatron-LM), two forward all-reduces:
//!
//! ```text
//! a = x + sum_r A_r(LN1(x)) + b_o        # all-reduce 1
//! y = a + sum_r M_r(LN2(a)) + b_pr       # all-reduce 2
//! ```
//! Every replicated parameter is used on replicated values only, so its gradient is
//! complete on every rank (tag `Replicated`): `f` after each LayerNorm all-reduces the
//! input gradient before it reaches the LayerNorm.

use super::{
    add_bias, build_norm, build_out_bias, AttentionShard, BlockConfig, DropSite, Fwd, MlpShard,
};
use crate::ops::Norm;
use crate::tp::{copy_to_tp, reduce_from_tp, CountedComm, ParamBuilder, ParamKind, Site};
use anyhow::Result;
use candle_core::Tensor;

pub struct TpBlock {
    layer: usize,
    ln1: Norm,
    attn: AttentionShard,
    b_o: Option<Tensor>,
    ln2: Norm,
    mlp: MlpShard,
    b_pr: Option<Tensor>,
    tp: CountedComm,
}

impl TpBlock {
    pub fn build(
        b: &mut ParamBuilder,
        cfg: &BlockConfig,
        layer: usize,
        tp: &CountedComm,
    ) -> Result<Self> {
        let rep = ParamKind::Replicated;
        Ok(Self {
            layer,
            ln1: build_norm(b, cfg, &format!("h.{layer}.ln1"), rep)?,
            attn: AttentionShard::build(b, cfg, layer, tp.rank())?,
            b_o: build_out_bias(b, cfg, &format!("h.{layer}.o.b"), rep)?,
            ln2: build_norm(b, cfg, &format!("h.{layer}.ln2"), rep)?,
            mlp: MlpShard::build(b, cfg, layer)?,
            b_pr: build_out_bias(b, cfg, &format!("h.{layer}.pr.b"), rep)?,
            tp: tp.clone(),
        })
    }

    pub fn forward(&self, x: &Tensor, fwd: &Fwd) -> Result<Tensor> {
        let site = Site::Layer(self.layer);
        let h = copy_to_tp(&self.ln1.forward(x)?, &self.tp, site)?;
        let attn = reduce_from_tp(&self.attn.forward(&h, fwd)?, &self.tp, site)?;
        let attn = add_bias(
            &fwd.drop(&attn, self.layer, DropSite::AttnOut)?,
            self.b_o.as_ref(),
            fwd,
            self.layer,
            DropSite::AttnOut,
        )?;
        let a = (x + attn)?;
        let h = copy_to_tp(&self.ln2.forward(&a)?, &self.tp, site)?;
        let mlp = reduce_from_tp(&self.mlp.forward(&h)?, &self.tp, site)?;
        let mlp = add_bias(
            &fwd.drop(&mlp, self.layer, DropSite::MlpOut)?,
            self.b_pr.as_ref(),
            fwd,
            self.layer,
            DropSite::MlpOut,
        )?;
        Ok((a + mlp)?)
    }
}
