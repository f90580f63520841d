//! `t` — TPBlock (Megatron-LM), two forward all-reduces:
//!
//! ```text
//! a = x + sum_r A_r(LN1(x)) + b_o        # all-reduce 1
//! y = a + sum_r M_r(LN2(a)) + b_pr       # all-reduce 2
//! ```
//! Every replicated parameter is used on replicated values only, so its gradient is
//! complete on every rank (tag `Replicated`): `f` after each LayerNorm all-reduces the
//! input gradient before it reaches the LayerNorm.

use crate::blocks::spec::{Hiding, KindSpec, Reference, Stage, Syncs};
use crate::blocks::{BlockConfig, BlockParams, BlockTags, DropSite, Fwd};
use crate::comm::{CountedComm, Site};
use crate::tp::{copy_to_tp, reduce_from_tp, ParamBuilder, ParamKind};
use anyhow::Result;
use candle_core::Tensor;

/// Every fact of the kind (`blocks/spec.rs`).
pub const SPEC: KindSpec = KindSpec {
    letter: 't',
    name: "TPBlock",
    line: "Megatron-LM's block: 2 all-reduces",
    syncs: Syncs::PerBlock(2),
    exposed_syncs: Syncs::PerBlock(2),
    hiding: Hiding::Nothing,
    sync_width: 1,
    depends_on_tp: false,
    tags: TAGS,
    staged_by_run: false,
    build: |b, cfg, first, _, tp| Ok(Box::new(TpBlock::build(b, cfg, first, tp)?)),
    reference: Reference::DenseGpt2,
    exported: true,
    keeps_stream_replicated: true,
};

pub struct TpBlock {
    p: BlockParams,
    tp: CountedComm,
}

/// Every replicated parameter is used on replicated values only.
pub const TAGS: BlockTags = BlockTags {
    ln1: ParamKind::Replicated,
    ln2: ParamKind::Replicated,
    b_o: Some(ParamKind::Replicated),
    b_pr: Some(ParamKind::Replicated),
};

impl TpBlock {
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
        let p = &self.p;
        let site = Site::Layer(p.layer);
        let h = copy_to_tp(&p.ln1.forward(x)?, &self.tp, site)?;
        let attn = reduce_from_tp(&p.attn.forward(&h, fwd)?, &self.tp, site)?;
        let attn = p.joined(&attn, fwd, DropSite::AttnOut)?;
        let a = (x + attn)?;
        let h = copy_to_tp(&p.ln2.forward(&a)?, &self.tp, site)?;
        let mlp = reduce_from_tp(&p.mlp.forward(&h)?, &self.tp, site)?;
        let mlp = p.joined(&mlp, fwd, DropSite::MlpOut)?;
        Ok((a + mlp)?)
    }
}

impl Stage for TpBlock {
    fn forward(&self, x: &Tensor, fwd: &Fwd) -> Result<Tensor> {
        TpBlock::forward(self, x, fwd)
    }
}
