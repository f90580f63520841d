//! The scalars of one AdamW step, as the fused passes take them: the CPU's
//! (`train/optimizer.rs`) and the GPU's kernel (`ops::cuda::adamw`).

/// One step's constants: betas, learning rate, epsilon, the bias corrections, the weight
/// decay's shrink and the clipping factor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWScalars {
    pub b1: f32,
    pub b2: f32,
    pub lr: f32,
    pub eps: f32,
    /// `1 / (1 - beta1^t)`, `1 / (1 - beta2^t)`: the bias corrections.
    pub c1: f32,
    pub c2: f32,
    /// `1 - lr * weight_decay`.
    pub shrink: f32,
    /// Gradient clipping's factor (1: none), applied as the gradient is read.
    pub grad_scale: f32,
}
