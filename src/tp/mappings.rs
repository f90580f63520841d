//! The conjugate operators of Megatron-LM, as candle autograd ops.
//!
//! - `copy_to_tp` (f): forward copy, backward all-reduce.
//! - `reduce_from_tp` (g): forward all-reduce, backward copy.
//!
//! They stay visible at the call site (the blocks) instead of hiding inside the linears:
//! in `s` and `p` the MLP input is rank-local, where a built-in `f` would be wrong.
//! A group of one returns its input untouched.
//!
//! Backward passes reduce gradient tensors through [`CountedComm::all_reduce`] (on their
//! device). g's forward runs inside the op on the CPU storage (`cpu_fwd`), summing the
//! host buffer in place; a device backend adds its own `*_fwd`.

use super::counted::CountedComm;
use super::tally::{CommKind, Site};
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};

fn contiguous_f32(storage: &CpuStorage, layout: &Layout) -> Result<Vec<f32>> {
    let data = match storage {
        CpuStorage::F32(d) => d,
        _ => candle_core::bail!("tensor-parallel collectives support f32 tensors only"),
    };
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(data[start..end].to_vec()),
        None => candle_core::bail!("tensor-parallel collective on a non-contiguous tensor"),
    }
}

struct CopyToTp {
    group: CountedComm,
    site: Site,
}

impl CustomOp1 for CopyToTp {
    fn name(&self) -> &'static str {
        "copy-to-tp"
    }
    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        Ok((
            CpuStorage::F32(contiguous_f32(storage, layout)?),
            layout.shape().clone(),
        ))
    }
    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        self.group
            .all_reduce(&grad_res.contiguous()?, self.site, CommKind::TpBackward)
            .map(Some)
            .map_err(|e| candle_core::Error::Msg(format!("{e:#}")))
    }
}

struct ReduceFromTp {
    group: CountedComm,
    site: Site,
}

impl CustomOp1 for ReduceFromTp {
    fn name(&self) -> &'static str {
        "reduce-from-tp"
    }
    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let mut v = contiguous_f32(storage, layout)?;
        self.group
            .all_reduce_sum(&mut v, self.site, CommKind::TpForward)
            .map_err(|e| candle_core::Error::Msg(format!("{e:#}")))?;
        Ok((CpuStorage::F32(v), layout.shape().clone()))
    }
    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(grad_res.clone()))
    }
}

/// f: forward identity, backward all-reduce of the input gradient over the TP group.
pub fn copy_to_tp(x: &Tensor, group: &CountedComm, site: Site) -> Result<Tensor> {
    if group.size() == 1 {
        return Ok(x.clone());
    }
    x.contiguous()?.apply_op1(CopyToTp {
        group: group.clone(),
        site,
    })
}

/// g: forward all-reduce over the TP group, backward identity.
pub fn reduce_from_tp(x: &Tensor, group: &CountedComm, site: Site) -> Result<Tensor> {
    if group.size() == 1 {
        return Ok(x.clone());
    }
    x.contiguous()?.apply_op1(ReduceFromTp {
        group: group.clone(),
        site,
    })
}

struct ScaleGrad(f64);

impl CustomOp1 for ScaleGrad {
    fn name(&self) -> &'static str {
        "scale-grad"
    }
    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        Ok((
            CpuStorage::F32(contiguous_f32(storage, layout)?),
            layout.shape().clone(),
        ))
    }
    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some((grad_res * self.0)?))
    }
}

/// Forward identity, backward multiplies the gradient by `1/n`.
///
/// For a replicated parameter whose gradient is partial per rank (summed over the TP group
/// once per step) but which is *also* used on a replicated value: every rank holds that
/// use's whole contribution, so each contributes `1/n` of it and the group sum counts it
/// exactly once. The forward value is untouched (unlike adding `b/n` inside the sum).
pub fn share_grad_over_tp(x: &Tensor, n: usize) -> Result<Tensor> {
    if n == 1 {
        return Ok(x.clone());
    }
    x.contiguous()?.apply_op1(ScaleGrad(1.0 / n as f64))
}
