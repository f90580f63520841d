//! The backend contract, and the one started-collective type every layer above it shares.
//!
//! A backend (ranks as threads, MPI processes, NCCL on GPUs) implements a host-buffer sum
//! and, optionally, a sum of tensors where they lie, a byte exchange (the compressed sum
//! travels on it) and a device queue of its own. Everything else — starting a collective
//! while the rank computes, the compressed formula, the maximum, the mean, the group of
//! one, the emulated link, the tally — is written once above it ([`super::counted`]).
//! Backends must sum in rank order so that every member of a group ends with bit-identical
//! values; replicated parameters stay identical across ranks only because of that.

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
    /// An all-to-all of byte strings: `parts[c]` goes to member `c`; the result holds what
    /// each member sent this one, in rank order (`sizes[r]` bytes from member `r`, which
    /// the caller knows). The compressed all-reduce travels on it; a backend without it
    /// refuses `comm_dtype` other than f32.
    fn exchange(&self, _parts: Vec<Vec<u8>>, _sizes: &[usize]) -> Result<Vec<Vec<u8>>> {
        bail!("this communication backend cannot send compressed all-reduces; use comm_dtype: f32")
    }
    /// A backend with a device queue of its own (NCCL on its stream) issues the sum of `t`
    /// there and returns at once: waiting orders the caller's queue after it. `None` (the
    /// default): started collectives run on the group's communication thread instead.
    fn start_on_device(&self, _t: &Tensor) -> Option<Result<Started<Tensor>>> {
        None
    }
    /// Whether the member may be called from the group's communication thread (MPI
    /// without thread support may not: its started collectives then complete at once).
    fn threads_allowed(&self) -> bool {
        true
    }
}

/// A collective that was started: its result, now or later. The blocking form of every
/// collective is its start, waited for at once. One never waited for (an error path)
/// still completes before it is dropped, so that no later collective of the member
/// overtakes it.
pub struct Started<T> {
    wait: Option<Box<dyn FnOnce() -> Result<T>>>,
    /// Whether the collective was over when it was handed back (run inline, here and now):
    /// nothing of it is in flight while the caller goes on, so nothing of it can hide.
    complete: bool,
}

impl<T: 'static> Started<T> {
    /// A result computed already (or its error).
    pub fn ready(result: Result<T>) -> Self {
        Self {
            wait: Some(Box::new(move || result)),
            complete: true,
        }
    }

    /// A result `wait` produces when it is wanted (from a communication thread, a device
    /// queue, or a started collective underneath).
    pub fn later(wait: impl FnOnce() -> Result<T> + 'static) -> Self {
        Self {
            wait: Some(Box::new(wait)),
            complete: false,
        }
    }

    /// Whether the collective was over when it was started ([`Started::ready`]).
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// Blocks until the result is there.
    pub fn wait(mut self) -> Result<T> {
        match self.wait.take() {
            Some(wait) => wait(),
            None => bail!("a collective was waited for twice"),
        }
    }
}

impl<T> Drop for Started<T> {
    fn drop(&mut self) {
        if let Some(wait) = self.wait.take() {
            let _ = wait();
        }
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

/// A group of one: for tp 1 / dp 1 and single-process references (the layer above never
/// calls it: a group of one communicates nothing).
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
}
