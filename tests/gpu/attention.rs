//! The GPU attentions against the portable path (candle's differentiable ops on the same
//! GPU). Part of the kernel tests (`kernels.rs`).

use super::super::common;
use super::super::gpu;
use candle_core::{DType, Device, Tensor, Var};
use tp_harness::device::Kernels;
use tp_harness::ops;

/// Random `qkv (B, T, 3 H D)` on the GPU in `dtype`.
fn random_qkv(b: usize, t: usize, h: usize, d: usize, dtype: DType) -> Var {
    let x = Tensor::randn(0f32, 1.0, (b, t, 3 * h * d), &Device::Cpu).unwrap();
    Var::from_tensor(&x.to_device(&gpu()).unwrap().to_dtype(dtype).unwrap()).unwrap()
}

/// Output and input gradient of an attention `f` under `sum(y * w)`.
fn attention_and_grad(f: impl Fn(&Tensor) -> Tensor, qkv: &Var, w: &Tensor) -> (Tensor, Tensor) {
    let y = f(qkv.as_tensor());
    let loss = y
        .to_dtype(DType::F32)
        .unwrap()
        .mul(w)
        .unwrap()
        .sum_all()
        .unwrap();
    let g = loss.backward().unwrap();
    let dq = g
        .get(qkv.as_tensor())
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
    (y.to_dtype(DType::F32).unwrap(), dq)
}

/// The GPU attentions against the portable path: the fused dispatch (the scores fitting
/// at these sizes: cuBLAS's matmuls reading the packed qkv in place and writing the heads
/// merged, `ops::cuda::packed_attention`, around the causal softmax kernel; B = 2 checks
/// each sequence's offsets), and the two that never hold the scores, which longer
/// sequences take: the flash kernels (`ops::cuda::flash_attention`, bf16 at head size 64
/// and T a multiple of 64) and the kernel for the rest (`ops::cuda::causal_attention`).
#[test]
fn gpu_attention_kernels_match_the_portable_path_forward_and_backward() {
    for (dtype, tol) in [(DType::F32, 1e-5), (DType::BF16, 2e-2)] {
        // Head sizes below, at and at the kernel's limit; T not a multiple of anything,
        // and GPT-2's.
        for (b, t, h, d) in [
            (2, 67, 3, 64),
            (1, 130, 2, 32),
            (2, 33, 2, 128),
            (1, 1, 1, 8),
            (2, 1024, 2, 64),
            // One and two tiles of 64 (the flash kernels' diagonal and the tile before).
            (1, 64, 1, 64),
            (1, 128, 3, 64),
        ] {
            let qkv = random_qkv(b, t, h, d, dtype);
            let w = Tensor::randn(0f32, 1.0, (b, t, h * d), &Device::Cpu)
                .unwrap()
                .to_device(&gpu())
                .unwrap();
            let portable = |x: &Tensor| ops::causal_attention(Kernels::Portable, x, h, d).unwrap();
            let (y_ref, dq_ref) = attention_and_grad(portable, &qkv, &w);
            let fused = |x: &Tensor| ops::causal_attention(Kernels::Fused, x, h, d).unwrap();
            let unheld = |x: &Tensor| ops::cuda::causal_attention(x, h, d).unwrap();
            let mut paths = vec![
                ("scores held", attention_and_grad(fused, &qkv, &w)),
                ("scores never held", attention_and_grad(unheld, &qkv, &w)),
            ];
            if ops::cuda::flash_attention::fits(&qkv, h, d) {
                let flash =
                    |x: &Tensor| ops::cuda::flash_attention::causal_attention(x, h).unwrap();
                paths.push(("flash", attention_and_grad(flash, &qkv, &w)));
            }
            for (which, (y, dq)) in paths {
                let what = format!("{dtype:?} B{b} T{t} H{h} D{d}, {which}");
                let e = common::rel_err(&y, &y_ref);
                assert!(e <= tol, "{what}: attention output differs by {e:e}");
                let e = common::rel_err(&dq, &dq_ref);
                assert!(
                    e <= tol,
                    "{what}: attention input gradient differs by {e:e}"
                );
                eprintln!("{what}: matches the portable path");
            }
        }
    }
}
