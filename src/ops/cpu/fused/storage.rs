//! What every fused kernel shares: reading a tensor's contiguous f32 data and running a
//! loop over blocks of rows on the rank's threads.

use candle_core::{CpuStorage, Layout, Result, Tensor};
use rayon::prelude::*;

/// The tensor's data as one contiguous f32 slice.
pub(super) fn with_f32<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    let candle_core::Storage::Cpu(CpuStorage::F32(data)) = &*storage else {
        candle_core::bail!("fused ops support f32 tensors on the CPU only");
    };
    let (a, b) = layout.contiguous_offsets().expect("contiguous");
    Ok(f(&data[a..b]))
}

pub(super) fn slice_of<'a>(s: &'a CpuStorage, l: &Layout) -> Result<&'a [f32]> {
    let CpuStorage::F32(d) = s else {
        candle_core::bail!("fused ops support f32 tensors only");
    };
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&d[a..b]),
        None => candle_core::bail!("fused ops need contiguous inputs"),
    }
}

/// Calls `f(first_row, block)` on consecutive blocks of whole rows (`row` values each) of
/// `out`: on the calling thread when candle runs one thread (as each rank does under the
/// threads backend), else spread over the rayon pool.
pub(super) fn for_row_blocks(out: &mut [f32], row: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    let threads = crate::ops::cpu::gemm::threads();
    let rows = out.len() / row.max(1);
    let serial = threads <= 1 || rows < 2;
    let per = if serial {
        rows.max(1)
    } else {
        rows.div_ceil(threads * 4)
    };
    let run = |(i, block): (usize, &mut [f32])| f(i * per, block);
    if serial {
        out.chunks_mut(per * row.max(1)).enumerate().for_each(run);
    } else {
        out.par_chunks_mut(per * row).enumerate().for_each(run);
    }
}

/// A new vector from `f(offset, x_block, out_block)` over matching blocks of `x` starting
/// at `offset` (parallel as [`for_row_blocks`]).
pub(super) fn map_blocks(x: &[f32], f: impl Fn(usize, &[f32], &mut [f32]) + Sync) -> Vec<f32> {
    const BLOCK: usize = 4096;
    let mut out = vec![0f32; x.len()];
    for_row_blocks(&mut out, BLOCK, |first, o| {
        let at = first * BLOCK;
        f(at, &x[at..at + o.len()], o)
    });
    out
}
