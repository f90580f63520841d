//! The gradient norm's sum of squares on a GPU (`kernels/sumsq.cu`): every f32 tensor of a
//! group in one kernel, their partials summed in a second, one value read back, where the
//! portable path (`train/grads.rs`) runs four candle ops a tensor. `tests/gpu/kernels.rs`
//! holds it to a host f64 sum.

use super::{launch, view, SUMSQ};
use candle_core::cuda_backend::cudarc::driver::{DevicePtr, LaunchConfig};
use candle_core::{DType, Device, Result, Storage, Tensor};

/// Threads a block (`SUMSQ_THREADS` in the kernel).
const THREADS: u32 = 256;
/// Blocks a tensor: enough to keep an H100's 132 SMs reading the largest gradient (GPT-2's
/// 38.6 M-element embedding) while the small ones' idle blocks cost little.
const BLOCKS: u32 = 128;

/// The sum of the squares of every element of `ts` (f32, contiguous or not, all on one
/// GPU) in f64.
pub fn sum_of_squares(ts: &[&Tensor]) -> Result<f64> {
    let Some(first) = ts.first() else {
        return Ok(0.0);
    };
    let Device::Cuda(dev) = first.device() else {
        candle_core::bail!("sum_of_squares: the tensors are not on a GPU");
    };
    if ts.iter().any(|t| t.dtype() != DType::F32) {
        candle_core::bail!("sum_of_squares: the CUDA kernel takes f32 tensors");
    }
    let n = u32::try_from(ts.len())
        .ok()
        .filter(|&n| n <= 65_535)
        .ok_or_else(|| candle_core::Error::Msg("sum_of_squares: over 65535 tensors".into()))?;
    let ts: Vec<Tensor> = ts.iter().map(|t| t.contiguous()).collect::<Result<_>>()?;
    let held: Vec<_> = ts.iter().map(|t| t.storage_and_layout()).collect();
    let mut views = Vec::with_capacity(held.len());
    for (storage, layout) in &held {
        let Storage::Cuda(s) = &**storage else {
            candle_core::bail!("sum_of_squares: a tensor is not on the GPU");
        };
        views.push(view::<f32>(s, layout)?);
    }
    let stream = dev.cuda_stream();
    // The addresses, each with its guard: dropped once the kernel that reads them is
    // queued (what cudarc asks, where it tracks events).
    let (mut ptrs, mut lens, mut guards) = (Vec::new(), Vec::new(), Vec::new());
    for v in &views {
        let (p, guard) = v.device_ptr(&stream);
        ptrs.push(p);
        lens.push(v.len() as u64);
        guards.push(guard);
    }
    let (ptrs, lens) = (dev.clone_htod(&ptrs)?, dev.clone_htod(&lens)?);
    let count = n * BLOCKS;
    // SAFETY: every partial is written by the first kernel (one a block), the total by
    // the second.
    let partials = unsafe { dev.alloc::<f64>(count as usize)? };
    let total = unsafe { dev.alloc::<f64>(1)? };
    let grid = LaunchConfig {
        grid_dim: (BLOCKS, n, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: the arguments match sumsq_many_f32 in kernels/sumsq.cu: n addresses of f32
    // tensors of the lengths given (the views above, alive until this returns) and n x
    // BLOCKS partials.
    unsafe { launch!(dev, SUMSQ, "sumsq_many_f32", grid; &ptrs, &lens, &partials) }?;
    drop(guards);
    let one = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: the arguments match sum_partials_f64: `count` partials, one total. On the
    // same stream, it runs after the partials.
    unsafe { launch!(dev, SUMSQ, "sum_partials_f64", one; &partials, &count, &total) }?;
    Ok(dev.clone_dtoh(&total)?[0])
}
