//! The block stack a pattern describes: `t` and `s` blocks one by one, each maximal run of
//! `p` blocks as one [`ParallelRun`], each maximal run of `l` blocks as one [`LadderRun`].

use super::{BlockConfig, BlockKind, Fwd, LadderRun, Layout, ParallelRun, SpdBlock, TpBlock};
use crate::comm::CountedComm;
use crate::tp::ParamBuilder;
use anyhow::Result;
use candle_core::Tensor;

enum Stage {
    T(TpBlock),
    S(SpdBlock),
    P(ParallelRun),
    L(LadderRun),
}

pub struct BlockStack {
    stages: Vec<Stage>,
}

impl BlockStack {
    pub fn build(
        layout: &Layout,
        cfg: &BlockConfig,
        b: &mut ParamBuilder,
        tp: &CountedComm,
    ) -> Result<Self> {
        let kinds = &layout.kinds;
        let mut stages = Vec::new();
        let mut i = 0;
        while i < kinds.len() {
            match kinds[i] {
                BlockKind::T => stages.push(Stage::T(TpBlock::build(b, cfg, i, tp)?)),
                BlockKind::S => stages.push(Stage::S(SpdBlock::build(b, cfg, i, tp)?)),
                run @ (BlockKind::P | BlockKind::L) => {
                    let len = kinds[i..].iter().take_while(|k| **k == run).count();
                    stages.push(if run == BlockKind::P {
                        Stage::P(ParallelRun::build(b, cfg, i, len, tp)?)
                    } else {
                        Stage::L(LadderRun::build(b, cfg, i, len, tp)?)
                    });
                    i += len;
                    continue;
                }
            }
            i += 1;
        }
        Ok(Self { stages })
    }

    pub fn forward(&self, x: &Tensor, fwd: &Fwd) -> Result<Tensor> {
        let mut x = x.clone();
        for stage in &self.stages {
            x = match stage {
                Stage::T(b) => b.forward(&x, fwd)?,
                Stage::S(b) => b.forward(&x, fwd)?,
                Stage::P(r) => r.forward(&x, fwd)?,
                Stage::L(r) => r.forward(&x, fwd)?,
            };
        }
        Ok(x)
    }
}
