//! The NCCL backend: one GPU per rank, collectives in device memory (the CUDA build).
//!
//! A group is formed from a unique id that its rank 0 creates and hands to the others
//! (over MPI: [`super::mpi::MpiComm::nccl`]; a group of one needs nobody). NCCL runs on a
//! communication stream of its own: each collective first makes it wait for the rank's
//! candle stream (its input is ready), and the candle stream waits for the collective's
//! end before anything reads the sum — at once for a blocking all-reduce, at
//! [`Started::wait`] for a started one (the ladder's), so the kernels queued in between
//! run while NCCL reduces. The host never blocks on either. NCCL does
//! not promise rank-order sums, but every member receives the same bits (its reductions
//! end with a broadcast of each reduced chunk), which is what replicated weights need.
//! NCCL refuses two ranks on one GPU: there the launcher keeps the host-staged MPI path.

use super::collectives::{Comm, Started};
use anyhow::{anyhow, bail, Result};
use candle_core::cuda_backend::cudarc::driver::{CudaStream, DeviceRepr};
use candle_core::cuda_backend::cudarc::nccl::safe::{Comm as Nccl, Id, NcclType, ReduceOp};
use candle_core::cuda_backend::CudaDType;
use candle_core::op::BackpropOp;
use candle_core::{CudaDevice, CudaStorage, DType, Device, Storage, Tensor};
use std::sync::{Arc, Mutex};

/// NCCL's unique id: 128 opaque bytes that name one group.
pub type NcclId = [std::ffi::c_char; 128];

/// A fresh id for a new group (created by the group's rank 0).
pub fn new_id() -> Result<NcclId> {
    Ok(*Id::new()
        .map_err(|e| anyhow!("NCCL could not create a group id: {e:?}"))?
        .internal())
}

pub struct NcclComm {
    // NCCL communicators are not thread-safe; the rank's thread is the only user, and the
    // mutex makes the handle shareable as `dyn Comm` (Send + Sync) without trusting that.
    inner: Mutex<Nccl>,
    device: CudaDevice,
    /// NCCL's stream (the communicator's); the rank's kernels run on `device`'s.
    comm_stream: Arc<CudaStream>,
    rank: usize,
    size: usize,
}

// SAFETY: the raw communicator is only touched under `inner`'s lock.
unsafe impl Send for NcclComm {}
unsafe impl Sync for NcclComm {}

/// The stream a rank's NCCL groups reduce on, forked from its compute stream. A rank
/// gives every group it joins (TP and DP) this one stream, so their collectives run in
/// the order the rank issues them, the same order on every rank: two communicators
/// reducing concurrently on separate streams can hang (NCCL's user guide, "Using
/// multiple NCCL communicators concurrently").
pub fn comm_stream(device: &Device) -> Result<Arc<CudaStream>> {
    let Device::Cuda(cuda) = device else {
        bail!("NCCL needs a GPU device, got {device:?}");
    };
    cuda.cuda_stream()
        .fork()
        .map_err(|e| anyhow!("CUDA could not make a communication stream: {e:?}"))
}

/// The NCCL library's version as `major.minor.patch` (its code is major x 10000 +
/// minor x 100 + patch since 2.9).
pub fn version() -> Result<String> {
    let code = candle_core::cuda_backend::cudarc::nccl::result::get_nccl_version()
        .map_err(|e| anyhow!("NCCL's version could not be read: {e:?}"))?;
    Ok(format!(
        "{}.{}.{}",
        code / 10000,
        code / 100 % 100,
        code % 100
    ))
}

impl NcclComm {
    /// Joins the group named by `id` as member `rank` of `size`, reducing on
    /// `comm_stream` (the rank's one NCCL stream: [`comm_stream`]). Collective: every
    /// member must call it.
    pub fn join(
        device: &Device,
        rank: usize,
        size: usize,
        id: NcclId,
        comm_stream: &Arc<CudaStream>,
    ) -> Result<Self> {
        let Device::Cuda(cuda) = device else {
            bail!("NCCL needs a GPU device, got {device:?}");
        };
        let comm_stream = comm_stream.clone();
        let inner = Nccl::from_rank(comm_stream.clone(), rank, size, Id::uninit(id))
            .map_err(|e| anyhow!("NCCL could not form a group of {size} (rank {rank}): {e:?}"))?;
        Ok(Self {
            inner: Mutex::new(inner),
            device: cuda.clone(),
            comm_stream,
            rank,
            size,
        })
    }

    /// A group of one on `device` (NCCL's own path, exercised without MPI).
    pub fn solo(device: &Device) -> Result<Self> {
        Self::join(device, 0, 1, new_id()?, &comm_stream(device)?)
    }

    fn reduce_slice<T>(
        &self,
        storage: &CudaStorage,
        start: usize,
        end: usize,
    ) -> Result<CudaStorage>
    where
        T: CudaDType + DeviceRepr + NcclType,
    {
        let src = storage.as_cuda_slice::<T>()?.slice(start..end);
        // SAFETY: NCCL writes every element of `dst`.
        let mut dst = unsafe { self.device.alloc::<T>(end - start)? };
        // The input (and the allocation) are ready once the kernels queued so far ran.
        self.comm_stream
            .join(&self.device.cuda_stream())
            .map_err(|e| anyhow!("CUDA stream wait failed: {e:?}"))?;
        let nccl = self
            .inner
            .lock()
            .map_err(|_| anyhow!("NCCL communicator lock poisoned"))?;
        nccl.all_reduce(&src, &mut dst, &ReduceOp::Sum)
            .map_err(|e| anyhow!("NCCL all-reduce failed: {e:?}"))?;
        Ok(CudaStorage::wrap_cuda_slice(dst, self.device.clone()))
    }
}

impl Comm for NcclComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    /// Host buffers (the optimiser's norms, the loss) travel through the device.
    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<()> {
        let dev = Device::Cuda(self.device.clone());
        let t = Tensor::from_slice(buf, buf.len(), &dev)?;
        let sum = self.all_reduce(&t)?.to_vec1::<f32>()?;
        buf.copy_from_slice(&sum);
        Ok(())
    }

    /// Grouped `ncclSend`/`ncclRecv` of the byte strings through device memory: the two
    /// steps of the compressed all-reduce, whose encoding runs on the host (a GPU kernel
    /// for it would spare the copies; the bytes on the wire are the same).
    fn exchange(&self, parts: Vec<Vec<u8>>, sizes: &[usize]) -> Result<Vec<Vec<u8>>> {
        let n = self.size;
        if parts.len() != n || sizes.len() != n {
            bail!("exchange over {n} ranks with {} parts", parts.len());
        }
        let stream = self.device.cuda_stream();
        let cuda = |e| anyhow!("copying an exchange's bytes through the GPU failed: {e:?}");
        let send = parts
            .iter()
            .map(|p| {
                // One byte for an empty part: no zero-sized device allocations.
                let bytes = if p.is_empty() {
                    &[0u8][..]
                } else {
                    p.as_slice()
                };
                stream.clone_htod(bytes).map_err(cuda)
            })
            .collect::<Result<Vec<_>>>()?;
        let mut recv = sizes
            .iter()
            .map(|&l| stream.alloc_zeros::<u8>(l.max(1)).map_err(cuda))
            .collect::<Result<Vec<_>>>()?;
        self.comm_stream.join(&stream).map_err(cuda)?;
        {
            let nccl = self
                .inner
                .lock()
                .map_err(|_| anyhow!("NCCL communicator lock poisoned"))?;
            let mut group = nccl.group();
            let failed = |e| anyhow!("NCCL exchange failed: {e:?}");
            for (peer, (s, r)) in send.iter().zip(recv.iter_mut()).enumerate() {
                // The rank's own part stays on the host; empty parts send nothing.
                if peer == self.rank {
                    continue;
                }
                if !parts[peer].is_empty() {
                    group
                        .send(s.slice(..parts[peer].len()), peer as i32)
                        .map_err(failed)?;
                }
                if sizes[peer] > 0 {
                    group
                        .recv(r.slice_mut(..sizes[peer]), peer as i32)
                        .map_err(failed)?;
                }
            }
        }
        self.compute_waits()?;
        let mut out = Vec::with_capacity(n);
        for (peer, r) in recv.iter().enumerate() {
            out.push(if peer == self.rank {
                parts[peer].clone()
            } else {
                let mut v = stream.clone_dtoh(r).map_err(cuda)?;
                v.truncate(sizes[peer]);
                v
            });
        }
        Ok(out)
    }

    fn all_reduce(&self, t: &Tensor) -> Result<Tensor> {
        // A host tensor (the step's scalars: the gradient norm, the losses) goes through
        // device memory and back.
        if t.device().is_cpu() {
            return super::collectives::stage_through_host(t, |buf| self.all_reduce_sum(buf));
        }
        // A contiguous copy of a strided input lives until the rank's stream has waited
        // for NCCL, so that its memory is not reused while NCCL reads it.
        let t = t.contiguous()?;
        let sum = self.issue_all_reduce(&t)?;
        self.compute_waits()?;
        drop(t);
        Ok(sum)
    }

    /// The sum is queued on the communication stream; the rank's kernels go on until
    /// [`Started::wait`] makes its stream wait for it. The input is kept alive until then
    /// (its memory must not be reused while NCCL reads it).
    fn start_on_device(&self, t: &Tensor) -> Option<Result<Started<Tensor>>> {
        let start = || -> Result<Started<Tensor>> {
            let t = t.contiguous()?;
            let sum = self.issue_all_reduce(&t)?;
            let (compute, comm) = (self.device.cuda_stream(), self.comm_stream.clone());
            Ok(Started::later(move || {
                compute
                    .join(&comm)
                    .map_err(|e| anyhow!("CUDA stream wait failed: {e:?}"))?;
                drop(t);
                Ok(sum)
            }))
        };
        Some(start())
    }

    /// The rank's CUDA context is its own thread's: every collective is issued from it.
    fn threads_allowed(&self) -> bool {
        false
    }
}

impl NcclComm {
    /// The rank's stream waits for everything queued on the communication stream.
    fn compute_waits(&self) -> Result<()> {
        self.device
            .cuda_stream()
            .join(&self.comm_stream)
            .map_err(|e| anyhow!("CUDA stream wait failed: {e:?}"))
    }

    /// The NCCL sum of `t`, queued on the communication stream (not yet waited for).
    /// `t` must be contiguous and outlive the collective (its callers keep it).
    fn issue_all_reduce(&self, t: &Tensor) -> Result<Tensor> {
        if !t.is_contiguous() {
            bail!("NCCL all-reduce of a non-contiguous tensor");
        }
        let out = {
            let (storage, layout) = t.storage_and_layout();
            let Storage::Cuda(cuda) = &*storage else {
                bail!(
                    "the NCCL backend reduces GPU tensors, got one on {:?}",
                    t.device()
                );
            };
            if cuda.device.id() != self.device.id() {
                bail!("tensor on another GPU stream than this rank's NCCL group");
            }
            let (start, end) = layout
                .contiguous_offsets()
                .ok_or_else(|| anyhow!("NCCL all-reduce of a non-contiguous tensor"))?;
            match t.dtype() {
                DType::F32 => self.reduce_slice::<f32>(cuda, start, end)?,
                DType::BF16 => self.reduce_slice::<half::bf16>(cuda, start, end)?,
                d => bail!("the NCCL backend sums f32 and bf16 tensors, got {d:?}"),
            }
        };
        Ok(Tensor::from_storage(
            Storage::Cuda(out),
            t.shape().clone(),
            BackpropOp::none(),
            false,
        ))
    }
}
