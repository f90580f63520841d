//! The transformer blocks `t`, `s` and `p` exactly as `shared/design/blocks.md` defines
//! them, the shared attention/MLP shards they are made of, and the pattern parser.
//!
//! Blocks talk to their tensor-parallel group only through [`CountedComm`] and the
//! conjugate operators; they know nothing of how ranks are connected.

pub mod attention;
pub mod mlp;
pub mod p;
pub mod pattern;
pub mod s;
pub mod stack;
pub mod t;

pub use attention::AttentionShard;
pub use mlp::MlpShard;
pub use p::ParallelRun;
pub use pattern::{BlockKind, Layout, PatternError};
pub use s::SpdBlock;
pub use stack::BlockStack;
pub use t::TpBlock;

use crate::ops::{self, Activation, Norm, NormKind};
use crate::tp::{Init, ParamBuilder, ParamKind};
use anyhow::Result;
use candle_core::Tensor;

/// What every block needs to know about the model's shape and options.
#[derive(Debug, Clone)]
pub struct BlockConfig {
    pub n_embd: usize,
    pub n_head: usize,
    /// Total layers of the model; sets the residual-projection init scale.
    pub n_layer: usize,
    pub bias: bool,
    pub norm: NormKind,
    pub activation: Activation,
    pub norm_eps: f64,
    pub dropout: f64,
}

impl BlockConfig {
    /// GPT-2's init: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 n_layer)).
    pub fn weight_init(&self) -> Init {
        Init::Normal { std: 0.02 }
    }
    pub fn residual_init(&self) -> Init {
        Init::Normal {
            std: 0.02 / (2.0 * self.n_layer as f64).sqrt(),
        }
    }
}

/// Per-forward-pass options. `key` seeds dropout masks (the same on every rank of the
/// group); `None` means evaluation: no dropout.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fwd {
    pub dropout: f64,
    pub key: Option<u64>,
}

/// Which dropout site inside a layer a mask belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum DropSite {
    AttnProbs = 1,
    AttnOut = 2,
    MlpOut = 3,
}

impl Fwd {
    pub fn eval() -> Self {
        Self::default()
    }
    pub fn active(&self) -> bool {
        self.dropout > 0.0 && self.key.is_some()
    }
    pub(crate) fn site_key(&self, layer: usize, site: DropSite) -> u64 {
        let k = self.key.unwrap_or(0);
        k.wrapping_mul(0x9E3779B97F4A7C15) ^ ((layer as u64 + 1) << 8) ^ (site as u64)
    }
    /// Dropout of a replicated (or linearly partial) activation: the same mask on every rank.
    pub(crate) fn drop(&self, x: &Tensor, layer: usize, site: DropSite) -> Result<Tensor> {
        if !self.active() {
            return Ok(x.clone());
        }
        Ok(ops::dropout(x, self.dropout, self.site_key(layer, site))?)
    }
}

/// `x + bias` where the bias is dropped like the activation it belongs to.
pub(crate) fn add_bias(
    x: &Tensor,
    bias: Option<&Tensor>,
    fwd: &Fwd,
    layer: usize,
    site: DropSite,
) -> Result<Tensor> {
    match bias {
        None => Ok(x.clone()),
        Some(b) if !fwd.active() => Ok(x.broadcast_add(b)?),
        Some(b) => Ok((x + fwd.drop(&b.broadcast_as(x.shape())?, layer, site)?)?),
    }
}

/// A block's normalisation layer `h.<layer>.<name>`.
pub(crate) fn build_norm(
    b: &mut ParamBuilder,
    cfg: &BlockConfig,
    prefix: &str,
    kind: ParamKind,
) -> Result<Norm> {
    let c = cfg.n_embd;
    let weight = b.param(&format!("{prefix}.w"), &[c], kind, Init::Ones)?;
    let bias = if cfg.bias && cfg.norm == NormKind::Layernorm {
        Some(b.param(&format!("{prefix}.b"), &[c], kind, Init::Zeros)?)
    } else {
        None
    };
    Ok(Norm {
        kind: cfg.norm,
        weight,
        bias,
        eps: cfg.norm_eps,
    })
}

/// The attention output bias `b_o` or MLP output bias `b_pr` of a block, when it has one.
pub(crate) fn build_out_bias(
    b: &mut ParamBuilder,
    cfg: &BlockConfig,
    name: &str,
    kind: ParamKind,
) -> Result<Option<Tensor>> {
    if !cfg.bias {
        return Ok(None);
    }
    Ok(Some(b.param(name, &[cfg.n_embd], kind, Init::Zeros)?))
}
