//! Per-forward-pass options (dropout and its keys) and the dropout-aware bias add.

use crate::ops;
use anyhow::Result;
use candle_core::Tensor;

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
        crate::util::seeds::site_key(self.key.unwrap_or(0), layer as u64, site as u64)
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
    k: ops::Kernels,
    x: &Tensor,
    bias: Option<&Tensor>,
    fwd: &Fwd,
    layer: usize,
    site: DropSite,
) -> Result<Tensor> {
    match bias {
        None => Ok(x.clone()),
        // Biases are f32 master weights; `bias_add` adds them in the activation's dtype
        // (a GPU's kernel in f32, rounding once).
        Some(b) if !fwd.active() => Ok(ops::bias_add(k, x, b)?),
        Some(b) => {
            let b = if b.dtype() != x.dtype() {
                b.to_dtype(x.dtype())?
            } else {
                b.clone()
            };
            Ok((x + fwd.drop(&b.broadcast_as(x.shape())?, layer, site)?)?)
        }
    }
}
