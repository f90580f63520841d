//! The collectives: the interface every backend implements.
//!
//! Only what the harness needs: a sum all-reduce, and a max all-reduce (the parallel
//! cross-entropy's row maxima) that every backend gets from the sum. Callers hand it tensors
//! ([`Comm::all_reduce`]), so a backend for a GPU can reduce device memory where it lies;
//! the CPU backends (threads, MPI) implement the host-buffer sum and stage tensors through
//! it. Backends must sum in rank order so that every member of a group ends with
//! bit-identical values; replicated parameters stay identical across ranks only because
//! of that.

use super::compressed;
use super::quantise::CommDtype;
use anyhow::{bail, Result};
use candle_core::{DType, Tensor};
use std::time::Duration;

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
    /// Starts [`Comm::all_reduce`] of `t` and returns at once where the backend can make
    /// progress without the caller; [`Pending::wait`] gives the same sum, bit for bit.
    /// Collectives of one member complete in the order they were issued, blocking ones
    /// included. A backend with a communication thread keeps it busy for at least `hold`
    /// (an emulated link's time: the link carries one collective after another). The
    /// default computes the sum before it returns (nothing overlaps).
    fn start_all_reduce(&self, t: &Tensor, _hold: Duration) -> Result<Pending> {
        Ok(Pending::ready(self.all_reduce(t)))
    }
    /// An all-to-all of byte strings: `parts[c]` goes to member `c`; the result holds what
    /// each member sent this one, in rank order (`sizes[r]` bytes from member `r`, which
    /// the caller knows). The compressed all-reduce travels on it; a backend without it
    /// refuses `comm_dtype` other than f32.
    fn exchange(&self, _parts: Vec<Vec<u8>>, _sizes: &[usize]) -> Result<Vec<Vec<u8>>> {
        bail!("this communication backend cannot send compressed all-reduces; use comm_dtype: f32")
    }
    /// The compressed all-reduce of blocks.md of a host buffer of rows of `width`, in
    /// place (see [`super::compressed`]): identical bits on every member.
    fn all_reduce_sum_compressed(
        &self,
        buf: &mut [f32],
        width: usize,
        dtype: CommDtype,
    ) -> Result<()> {
        let mut exchange = |p, s: &[usize]| self.exchange(p, s);
        compressed::all_reduce(self.rank(), self.size(), buf, width, dtype, &mut exchange)
    }
    /// [`Comm::all_reduce_sum_compressed`] of a tensor's rows (its last dimension), staged
    /// through host memory.
    fn all_reduce_compressed(&self, t: &Tensor, dtype: CommDtype) -> Result<Tensor> {
        let width = t.dims().last().copied().unwrap_or(1);
        stage_through_host(t, |buf| self.all_reduce_sum_compressed(buf, width, dtype))
    }
    /// Starts [`Comm::all_reduce_compressed`] as [`Comm::start_all_reduce`] starts the
    /// exact sum; the default computes it before it returns.
    fn start_all_reduce_compressed(
        &self,
        t: &Tensor,
        dtype: CommDtype,
        _hold: Duration,
    ) -> Result<Pending> {
        Ok(Pending::ready(self.all_reduce_compressed(t, dtype)))
    }
    /// The element-wise maximum of `t` over the group, identical on every member. The
    /// default builds it from [`Comm::all_reduce`]: each member places `t` in its own row
    /// of a `(size, len)` zero tensor, the group's sum of those is every member's tensor
    /// (exact: each element has one non-zero term), and each member takes the maximum over
    /// the rows. It moves `size` times the bytes of a native max; the rows are small (one
    /// value per token), and a backend with a native max overrides it.
    fn all_reduce_max(&self, t: &Tensor) -> Result<Tensor> {
        let n = self.size();
        if n == 1 {
            return Ok(t.clone());
        }
        let flat = t.flatten_all()?.unsqueeze(0)?;
        let len = flat.dim(1)?;
        let placed = Tensor::zeros((n, len), t.dtype(), t.device())?
            .slice_assign(&[self.rank()..self.rank() + 1, 0..len], &flat)?;
        Ok(self.all_reduce(&placed)?.max(0)?.reshape(t.shape())?)
    }
}

/// An all-reduce that was started: its sum, now or from the backend's worker later.
pub struct Pending(PendingState);

enum PendingState {
    Ready(Result<Tensor>),
    InFlight(std::sync::mpsc::Receiver<Result<Tensor>>),
    /// Issued on a device queue: the closure makes the caller's queue wait for it.
    Queued(Box<dyn FnOnce() -> Result<Tensor> + Send>),
    Taken,
}

impl Pending {
    /// A sum computed already (or its error).
    pub fn ready(sum: Result<Tensor>) -> Self {
        Self(PendingState::Ready(sum))
    }

    /// A sum a worker will send on `rx`.
    pub fn in_flight(rx: std::sync::mpsc::Receiver<Result<Tensor>>) -> Self {
        Self(PendingState::InFlight(rx))
    }

    /// A sum a device computes on its own queue; `join` orders the caller's queue after
    /// it and gives the sum (NCCL on a communication stream).
    pub fn queued(join: impl FnOnce() -> Result<Tensor> + Send + 'static) -> Self {
        Self(PendingState::Queued(Box::new(join)))
    }

    /// Blocks until the sum is there.
    pub fn wait(mut self) -> Result<Tensor> {
        self.take()
    }

    fn take(&mut self) -> Result<Tensor> {
        match std::mem::replace(&mut self.0, PendingState::Taken) {
            PendingState::Ready(r) => r,
            PendingState::InFlight(rx) => rx
                .recv()
                .unwrap_or_else(|_| bail!("the communication worker stopped")),
            PendingState::Queued(join) => join(),
            PendingState::Taken => bail!("an all-reduce was waited for twice"),
        }
    }
}

impl Drop for Pending {
    /// A collective never waited for (an error path) still completes before its result
    /// is dropped, so that no later collective of this member overtakes it.
    fn drop(&mut self) {
        if matches!(self.0, PendingState::InFlight(_) | PendingState::Queued(_)) {
            let _ = self.take();
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
