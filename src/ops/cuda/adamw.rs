//! AdamW on a GPU in one kernel a parameter (`kernels/adamw.cu`), in place, where the
//! portable path runs ~12 candle ops a parameter, each a kernel launch, a temporary and a
//! pass over memory (GPT-2 124M: 18 ms of an H100 step, 2026-11-27). The arithmetic is
//! the CPU's fused pass's (`train/optimizer.rs`); `tests/gpu.rs` holds it to the portable
//! path.

use super::ADAMW;
pub use crate::ops::adamw::AdamWScalars;
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaViewMut, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::WrapErr;
use candle_core::{CpuStorage, CudaStorage, InplaceOp1, Layout, Result, Storage, Tensor};
use std::cell::RefCell;

type ViewFn<'a> = dyn FnMut(&mut CudaViewMut<'_, f32>) -> Result<()> + 'a;

/// Runs a closure on the contiguous f32 device memory of a tensor, mutably, in place.
struct OnDevice<'a, 'f>(RefCell<&'a mut ViewFn<'f>>);

impl InplaceOp1 for OnDevice<'_, '_> {
    fn name(&self) -> &'static str {
        "adamw-cuda"
    }

    fn cpu_fwd(&self, _: &mut CpuStorage, _: &Layout) -> Result<()> {
        candle_core::bail!("the CUDA AdamW runs on GPUs only")
    }

    fn cuda_fwd(&self, s: &mut CudaStorage, l: &Layout) -> Result<()> {
        let Some((a, b)) = l.contiguous_offsets() else {
            candle_core::bail!("adamw: a parameter or moment is not contiguous");
        };
        let mut view = s.as_cuda_slice_mut::<f32>()?.slice_mut(a..b);
        (self.0.borrow_mut())(&mut view)
    }
}

fn with_mut(t: &Tensor, f: &mut ViewFn<'_>) -> Result<()> {
    t.inplace_op1(&OnDevice(RefCell::new(f)))
}

/// One AdamW step of parameter `p` (f32, on the GPU) from its gradient `g`, updating `p`
/// and its moments `m` and `v` in place.
pub fn adamw(p: &Tensor, g: &Tensor, m: &Tensor, v: &Tensor, k: AdamWScalars) -> Result<()> {
    let n = p.elem_count();
    if [g, m, v].iter().any(|t| t.elem_count() != n) {
        candle_core::bail!("adamw: parameter, gradient and moments differ in size");
    }
    let g = g.contiguous()?;
    let (storage, layout) = g.storage_and_layout();
    let (Storage::Cuda(gs), Some((a, b))) = (&*storage, layout.contiguous_offsets()) else {
        candle_core::bail!("adamw: the gradient is not on the GPU");
    };
    let grad = gs.as_cuda_slice::<f32>()?.slice(a..b);
    let func = gs
        .device()
        .get_or_load_custom_func("adamw_f32", ADAMW.name, ADAMW.ptx)?;
    let n = u32::try_from(n)
        .map_err(|_| candle_core::Error::Msg("adamw: over 2^32 elements".into()))?;
    let scalars = [k.b1, k.b2, k.lr, k.eps, k.c1, k.c2, k.shrink, k.grad_scale];
    with_mut(m, &mut |mv| {
        with_mut(v, &mut |vv| {
            with_mut(p, &mut |pv| {
                let mut args = func.builder();
                args.arg(pv).arg(&grad).arg(&mut *mv).arg(&mut *vv).arg(&n);
                for x in &scalars {
                    args.arg(x);
                }
                // SAFETY: argument types and order match adamw_f32 in kernels/adamw.cu; the
                // four buffers hold n f32 each (checked above) and are distinct tensors.
                unsafe { args.launch(LaunchConfig::for_num_elems(n)) }.w()?;
                Ok(())
            })
        })
    })
}
