//! A rank's share of causal self-attention: its heads of Q, K and V (column-parallel,
//! each of the three sharded separately) and the matching rows of the output projection
//! (row-parallel). Returns the partial output `A_r(h)`, without `b_o`.

use super::{BlockConfig, DropSite, Fwd};
use crate::ops;
use crate::tp::{ColumnParallelLinear, Init, ParamKind, RowParallelLinear, Scope, Shard};
use anyhow::Result;
use candle_core::Tensor;

#[derive(Debug, Clone)]
pub struct AttentionShard {
    qkv: ColumnParallelLinear,
    o: RowParallelLinear,
    /// Heads held by this rank.
    n_head: usize,
    head_dim: usize,
    tp_rank: usize,
    tp_size: usize,
    layer: usize,
    kernels: crate::ops::Kernels,
}

impl AttentionShard {
    /// `<layer scope>.qkv.{w,b}` and `<layer scope>.o.w`.
    pub fn build(h: &mut Scope, cfg: &BlockConfig, layer: usize) -> Result<Self> {
        let c = cfg.n_embd;
        let n = h.tp_size();
        let qkv_shard = ParamKind::Sharded(Shard::Columns { groups: 3 });
        let w = h.param("qkv.w", &[c, 3 * c], qkv_shard, cfg.weight_init())?;
        let bias = if cfg.bias {
            Some(h.param("qkv.b", &[3 * c], qkv_shard, Init::Zeros)?)
        } else {
            None
        };
        let o = h.param(
            "o.w",
            &[c, c],
            ParamKind::Sharded(Shard::Rows),
            cfg.residual_init(),
        )?;
        Ok(Self {
            qkv: ColumnParallelLinear::new(w, bias, cfg.kernels),
            o: RowParallelLinear::new(o, cfg.kernels),
            n_head: cfg.n_head / n,
            head_dim: c / cfg.n_head,
            tp_rank: h.tp_rank(),
            tp_size: n,
            layer,
            kernels: cfg.kernels,
        })
    }

    /// `h (B, T, C)` -> partial `A_r(h) (B, T, C)`.
    pub fn forward(&self, h: &Tensor, fwd: &Fwd) -> Result<Tensor> {
        let qkv = self.qkv.forward(h)?; // (B, T, 3 * local): [Q_r | K_r | V_r]
        let y = if fwd.active() {
            self.attend_with_dropout(&qkv, fwd)?
        } else {
            ops::causal_attention(self.kernels, &qkv, self.n_head, self.head_dim)?
            // (B, T, C/N)
        };
        Ok(self.o.forward(&y)?)
    }

    /// Attention with dropout on the probabilities: the (B, H_r, T, T) probabilities are
    /// materialised so the logical mask can be applied to them.
    fn attend_with_dropout(&self, qkv: &Tensor, fwd: &Fwd) -> Result<Tensor> {
        let [q, k, v] = ops::split_heads(qkv, self.n_head, self.head_dim)?; // (B, H_r, T, hd)
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let att = (q.matmul(&k.t()?)? * scale)?; // (B, H_r, T, T)
        let att = ops::causal_softmax(self.kernels, &att)?;
        let key = fwd.site_key(self.layer, DropSite::AttnProbs);
        let att = ops::dropout_part(&att, fwd.dropout, key, 1, self.tp_rank, self.tp_size)?;
        Ok(ops::merge_heads(&att.matmul(&v)?)?) // (B, T, C/N)
    }
}
