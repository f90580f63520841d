//! A rank's share of the MLP: hidden units `[r*4C/N, (r+1)*4C/N)`, i.e. columns of `W_fc`
//! and `b_fc` (column-parallel) and rows of `W_pr` (row-parallel).
//! Returns the partial output `M_r(h)`, without `b_pr`.

use super::BlockConfig;
use crate::ops::Activation;
use crate::tp::{ColumnParallelLinear, Init, ParamKind, RowParallelLinear, Scope, Shard};
use anyhow::Result;
use candle_core::Tensor;

#[derive(Debug, Clone)]
pub struct MlpShard {
    fc: ColumnParallelLinear,
    pr: RowParallelLinear,
    activation: Activation,
}

impl MlpShard {
    /// `<layer scope>.fc.{w,b}` and `<layer scope>.pr.w`.
    pub fn build(h: &mut Scope, cfg: &BlockConfig) -> Result<Self> {
        let c = cfg.n_embd;
        let col = ParamKind::Sharded(Shard::COLUMNS);
        let w = h.param("fc.w", &[c, 4 * c], col, cfg.weight_init())?;
        let bias = if cfg.bias {
            Some(h.param("fc.b", &[4 * c], col, Init::Zeros)?)
        } else {
            None
        };
        let pr = h.param(
            "pr.w",
            &[4 * c, c],
            ParamKind::Sharded(Shard::Rows),
            cfg.residual_init(),
        )?;
        Ok(Self {
            fc: ColumnParallelLinear::new(w, bias, cfg.kernels),
            pr: RowParallelLinear::new(pr, cfg.kernels),
            activation: cfg.activation,
        })
    }

    /// `h (B, T, C)` -> partial `M_r(h) (B, T, C)`.
    pub fn forward(&self, h: &Tensor) -> Result<Tensor> {
        let u = self.fc.forward_activated(h, self.activation)?; // (B, T, 4C/N)
        Ok(self.pr.forward(&u)?)
    }
}
