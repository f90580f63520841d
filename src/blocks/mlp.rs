//! A rank's share of the MLP: hidden units `[r*4C/N, (r+1)*4C/N)`, i.e. columns of `W_fc`
//! and `b_fc` (column-parallel) and rows of `W_pr` (row-parallel).
//! Returns the partial output `M_r(h)`, without `b_pr`.

use super::BlockConfig;
use crate::ops::{self, Activation};
use crate::tp::{ColumnParallelLinear, Init, ParamBuilder, ParamKind, RowParallelLinear, Shard};
use anyhow::Result;
use candle_core::Tensor;

#[derive(Debug, Clone)]
pub struct MlpShard {
    fc: ColumnParallelLinear,
    pr: RowParallelLinear,
    activation: Activation,
}

impl MlpShard {
    pub fn build(b: &mut ParamBuilder, cfg: &BlockConfig, layer: usize) -> Result<Self> {
        let c = cfg.n_embd;
        let col = ParamKind::Sharded(Shard::COLUMNS);
        let w = b.param(
            &format!("h.{layer}.fc.w"),
            &[c, 4 * c],
            col,
            cfg.weight_init(),
        )?;
        let bias = if cfg.bias {
            Some(b.param(&format!("h.{layer}.fc.b"), &[4 * c], col, Init::Zeros)?)
        } else {
            None
        };
        let pr = b.param(
            &format!("h.{layer}.pr.w"),
            &[4 * c, c],
            ParamKind::Sharded(Shard::Rows),
            cfg.residual_init(),
        )?;
        Ok(Self {
            fc: ColumnParallelLinear::new(w, bias),
            pr: RowParallelLinear::new(pr),
            activation: cfg.activation,
        })
    }

    /// `h (B, T, C)` -> partial `M_r(h) (B, T, C)`.
    pub fn forward(&self, h: &Tensor) -> Result<Tensor> {
        let u = self.fc.forward(h)?; // (B, T, 4C/N)
        let u = ops::activation(&u, self.activation)?;
        Ok(self.pr.forward(&u)?)
    }
}
