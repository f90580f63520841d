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
    x: &Tensor,
    bias: Option<&Tensor>,
    fwd: &Fwd,
    layer: usize,
    site: DropSite,
) -> Result<Tensor> {
    // Biases are f32 master weights; a bf16 activation adds them in its own dtype.
    let bias = match bias {
        Some(b) if b.dtype() != x.dtype() => Some(b.to_dtype(x.dtype())?),
        other => other.cloned(),
    };
    match bias.as_ref() {
        None => Ok(x.clone()),
        Some(b) if !fwd.active() => Ok(x.broadcast_add(b)?),
        Some(b) => Ok((x + fwd.drop(&b.broadcast_as(x.shape())?, layer, site)?)?),
    }
}
