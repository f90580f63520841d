//! Test-only kind `x`, the private-channel block: `t` with its MLP's sum left out, so
//! each rank adds only its own shard's output to the stream —
//!
//! ```text
//! a = x + sum_r A_r(LN1(x)) + b_o     # all-reduce 1
//! y = a + M_r(LN2(a)) + b_pr          # no sum: rank r's own channels
//! ```
//! It is what a partial-channel or asynchronous kind does if it forgets the invariant
//! every block relies on (the stream between stages is the same on every rank), and the
//! replicated-activation check (`blocks/replicas.rs`) must name it. It also follows
//! docs/architecture.md's "Adding a block kind" to the letter: its arms in
//! `blocks/kind.rs` and `blocks/stack.rs` are every place a kind is decided.

use crate::blocks::spec::{Hiding, KindSpec, Reference, Stage, Syncs};
use crate::blocks::{BlockConfig, BlockParams, BlockTags, DropSite, Fwd};
use crate::comm::{CountedComm, Site};
use crate::tp::{copy_to_tp, reduce_from_tp, ParamBuilder};
use anyhow::Result;
use candle_core::Tensor;

/// Every fact of the kind (`blocks/spec.rs`).
/// As `t`'s tags: only the MLP's sum is left out.
pub const TAGS: BlockTags = super::tp_block::TAGS;

pub const SPEC: KindSpec = KindSpec {
    letter: 'x',
    name: "PrivateChannel",
    line: "t without the MLP sum (test-only)",
    syncs: Syncs::PerBlock(1),
    exposed_syncs: Syncs::PerBlock(1),
    hiding: Hiding::Nothing,
    sync_width: 1,
    depends_on_tp: true,
    tags: TAGS,
    staged_by_run: false,
    build: |b, cfg, first, _, tp| Ok(Box::new(PrivateChannelBlock::build(b, cfg, first, tp)?)),
    reference: Reference::None,
    exported: false,
    keeps_stream_replicated: false,
};

pub struct PrivateChannelBlock {
    p: BlockParams,
    tp: CountedComm,
}

impl PrivateChannelBlock {
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
        let a = (x + p.joined(&attn, fwd, DropSite::AttnOut)?)?;
        // The deliberate fault: rank r's MLP partial joins the stream unsummed.
        let mlp = p.mlp.forward(&p.ln2.forward(&a)?)?;
        Ok((a + p.joined(&mlp, fwd, DropSite::MlpOut)?)?)
    }
}

impl Stage for PrivateChannelBlock {
    fn forward(&self, x: &Tensor, fwd: &Fwd) -> Result<Tensor> {
        PrivateChannelBlock::forward(self, x, fwd)
    }
}

#[cfg(test)]
mod tests {
    use crate::blocks::{BlockConfig, BlockLayout, BlockStack, Fwd, ReplicaProbe};
    use crate::comm::test_ranks::on_thread_ranks;
    use crate::tp::{ParamBuilder, SeededInit};
    use candle_core::{DType, Device, Tensor};
    use std::sync::Arc;

    /// Runs `pattern`'s stack on 2 ranks with a probe and returns the probe's verdict.
    fn verdict(pattern: &str) -> Result<usize, String> {
        let layout = BlockLayout::parse(pattern).unwrap();
        let cfg = BlockConfig {
            n_embd: 16,
            n_head: 2,
            n_layer: layout.n_layer(),
            bias: true,
            norm: crate::ops::NormKind::Layernorm,
            activation: crate::ops::Activation::GeluTanh,
            norm_eps: 1e-5,
            kernels: crate::device::Kernels::Fused,
            dtype: DType::F32,
        };
        let probe = Arc::new(ReplicaProbe::default());
        let x = Tensor::randn(0f32, 1.0, (2, 5, 16), &Device::Cpu).unwrap();
        on_thread_ranks(2, |tp| {
            let source = SeededInit { seed: 3 };
            let mut b = ParamBuilder::new(&source, tp.rank(), tp.size(), &Device::Cpu);
            let mut stack = BlockStack::build(&layout, &cfg, &mut b, &tp).unwrap();
            stack.watch(probe.clone());
            stack.forward(&x, &Fwd::eval()).unwrap();
        });
        probe.verify()
    }

    #[test]
    fn the_replica_check_passes_t_s_p_l_and_names_the_private_channel_block_that_breaks_it() {
        assert_eq!(verdict("tsppl"), Ok(4), "t, s, the p run and the l run");
        let err = verdict("tsxl").unwrap_err();
        assert!(
            err.starts_with("layer 2 (x) breaks the replicated-activation invariant"),
            "{err}"
        );
    }
}
