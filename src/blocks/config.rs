//! What every block needs to know about the model's shape and options.

use crate::device::Kernels;
use crate::ops::{Activation, NormKind};
use crate::tp::Init;
use candle_core::DType;

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
    pub kernels: Kernels,
    /// The dtype activations flow in (f32 or bf16); weights are cast to it where used.
    pub dtype: DType,
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
