//! Megatron's column- and row-parallel linears, on a rank's shard of the weight.
//!
//! Weights are stored (in, out) so that `y = x W + b`, the layout of GPT-2's Conv1D and of
//! the golden vectors. Neither layer communicates: the blocks place `f` and `g` around them.

use crate::ops::{self, Kernels};
use candle_core::{Result, Tensor, D};

/// Output features split over ranks: rank r holds columns `[r*out/N, (r+1)*out/N)` of `W`
/// and the matching part of `b`. Input replicated, output sharded.
#[derive(Debug, Clone)]
pub struct ColumnParallelLinear {
    weight: Tensor,
    bias: Option<Tensor>,
    kernels: Kernels,
}

impl ColumnParallelLinear {
    pub fn new(weight: Tensor, bias: Option<Tensor>, kernels: Kernels) -> Self {
        Self {
            weight,
            bias,
            kernels,
        }
    }
    /// `x (.., in)` -> `(.., out/N)`
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        ops::linear(self.kernels, x, &self.weight, self.bias.as_ref())
    }
    /// `act(forward(x))`, the bias and activation fused where the kernels allow
    /// ([`ops::linear_activation`]).
    pub fn forward_activated(&self, x: &Tensor, act: ops::Activation) -> Result<Tensor> {
        ops::linear_activation(self.kernels, x, &self.weight, self.bias.as_ref(), act)
    }
    pub fn out_features(&self) -> Result<usize> {
        self.weight.dim(D::Minus1)
    }
}

/// Input features split over ranks: rank r holds rows `[r*in/N, (r+1)*in/N)` of `W`.
/// Returns the rank's partial product without bias ("skip bias add"): the caller adds the
/// bias once, after (or scaled inside) the reduction.
#[derive(Debug, Clone)]
pub struct RowParallelLinear {
    weight: Tensor,
    kernels: Kernels,
}

impl RowParallelLinear {
    pub fn new(weight: Tensor, kernels: Kernels) -> Self {
        Self { weight, kernels }
    }
    /// `x (.., in/N)` -> partial `(.., out)`
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        ops::linear(self.kernels, x, &self.weight, None)
    }
}
