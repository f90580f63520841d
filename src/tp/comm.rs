//! The collectives: the interface every backend implements.
//!
//! Only what the harness needs: a sum all-reduce. Callers hand it tensors
//! ([`Comm::all_reduce`]), so a backend for a GPU can reduce device memory where it lies;
//! the CPU backends (threads, MPI) implement the host-buffer sum and stage tensors through
//! it. Backends must sum in rank order so that every member of a group ends with
//! bit-identical values; replicated parameters stay identical across ranks only because
//! of that.

use anyhow::{bail, Result};
use candle_core::{DType, Tensor};

pub trait Comm: Send + Sync {
    /// This member's index inside the group, `0 <= rank < size`.
    fn rank(&self) -> usize;
    /// Number of members in the group.
    fn size(&self) -> usize;
    /// In-place sum of a host buffer over the group, in rank order, identical on every
    /// member.
    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<()>;
    /// The sum of `t` over the group, on `t`'s device, in rank order. The default stages
    /// through host memory with [`Comm::all_reduce_sum`]; a device backend overrides it.
    fn all_reduce(&self, t: &Tensor) -> Result<Tensor> {
        stage_through_host(t, |buf| self.all_reduce_sum(buf))
    }
}

/// Copies `t` to a host buffer in f32, lets `reduce` sum it in place, and returns the
/// result as a tensor of `t`'s shape, dtype and device (a bf16 tensor is widened, summed
/// in f32 and rounded once).
pub fn stage_through_host(
    t: &Tensor,
    reduce: impl FnOnce(&mut [f32]) -> Result<()>,
) -> Result<Tensor> {
    if !t.dtype().is_float() {
        bail!("collectives sum float tensors, got {:?}", t.dtype());
    }
    let mut v = t.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
    reduce(&mut v)?;
    Ok(Tensor::from_vec(v, t.shape(), t.device())?.to_dtype(t.dtype())?)
}

/// A group of one: every collective is the identity. Used for tp 1 / dp 1 and for
/// single-process references.
#[derive(Debug, Default, Clone, Copy)]
pub struct SoloComm;

impl Comm for SoloComm {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn all_reduce_sum(&self, _buf: &mut [f32]) -> Result<()> {
        Ok(())
    }
    fn all_reduce(&self, t: &Tensor) -> Result<Tensor> {
        Ok(t.clone())
    }
}
