//! The `mpi` backend: one process per rank under `mpirun`, on the system's MPI (rsmpi).
//!
//! The all-reduce is a deterministic reduce-scatter + all-gather: each rank owns one
//! chunk, receives that chunk from every rank (`MPI_Alltoallv`), sums it in rank order,
//! and the owners' sums are gathered back (`MPI_Allgatherv`). Every element is summed in
//! the same order as in the threads backend, so both backends give bit-identical results
//! and every rank holds identical bits, while each rank moves `2 (N-1)/N` of the buffer,
//! like a ring all-reduce. (`MPI_Allreduce` guarantees neither.)
//!
//! A started all-reduce runs on the group's communication thread, in a blocking
//! collective there, while the rank computes: OpenMPI's non-blocking collectives over TCP
//! advance only inside MPI calls, which a computing rank does not make (docs/links.md
//! measures both).

use super::collectives::Comm;
use super::compressed::even_chunks;
use super::mesh::Mesh;
use anyhow::{bail, Result};
use mpi::datatype::{Buffer, Partition, PartitionMut, PartitionedBuffer, PartitionedBufferMut};
use mpi::environment::Threading;
use mpi::topology::{Color, Communicator, SimpleCommunicator};
use mpi::traits::*;
use mpi::Count;

/// One rank's communicator. `SimpleCommunicator` wraps a raw `MPI_Comm` and is not
/// `Send`/`Sync`. Sound here: MPI is called by the rank's own thread and by its TP group's
/// communication thread, and the latter only runs where MPI granted
/// `MPI_THREAD_MULTIPLE` ([`MpiWorld::init`]); candle's worker threads never call it.
pub struct MpiComm {
    comm: SimpleCommunicator,
    /// 0: collectives block inside MPI (which spins on its progress engine); otherwise
    /// they are started non-blocking and tested every this many microseconds, sleeping
    /// in between (`TP_MPI_POLL_US`, the TP group only: the comparison of docs/links.md).
    poll_us: u64,
    /// Whether MPI granted `MPI_THREAD_MULTIPLE`: started all-reduces (the ladder's) then
    /// run on the group's communication thread, else they complete before they return.
    background: bool,
}
unsafe impl Send for MpiComm {}
unsafe impl Sync for MpiComm {}

fn mpi_comm(comm: SimpleCommunicator, background: bool, poll_us: u64) -> MpiComm {
    MpiComm {
        comm,
        poll_us,
        background,
    }
}

/// Counts and displacements of [`even_chunks`]: the chunk each rank owns.
fn chunks(len: usize, n: usize) -> (Vec<Count>, Vec<Count>) {
    even_chunks(len, n)
        .into_iter()
        .map(|r| (r.len() as Count, r.start as Count))
        .unzip()
}

impl MpiComm {
    /// `MPI_Alltoallv`, blocking or polled (see `poll_us`).
    fn all_to_all_v<S, R>(&self, send: &S, recv: &mut R)
    where
        S: PartitionedBuffer + ?Sized,
        R: PartitionedBufferMut + ?Sized,
    {
        match self.poll_us {
            0 => self.comm.all_to_all_varcount_into(send, recv),
            us => mpi::request::scope(|sc| {
                let req = self.comm.immediate_all_to_all_varcount_into(sc, send, recv);
                poll(req, us);
            }),
        }
    }

    /// `MPI_Allgatherv`, blocking or polled (see `poll_us`).
    fn all_gather_v<S, R>(&self, send: &S, recv: &mut R)
    where
        S: Buffer + ?Sized,
        R: PartitionedBufferMut + ?Sized,
    {
        match self.poll_us {
            0 => self.comm.all_gather_varcount_into(send, recv),
            us => mpi::request::scope(|sc| {
                let req = self.comm.immediate_all_gather_varcount_into(sc, send, recv);
                poll(req, us);
            }),
        }
    }
}

/// Tests `req` every `us` microseconds until it completes: OpenMPI advances a
/// non-blocking collective over TCP only inside MPI calls, so the tests are what moves it.
fn poll<'a, D: ?Sized, S: mpi::request::Scope<'a>>(
    mut req: mpi::request::Request<'a, D, S>,
    us: u64,
) {
    loop {
        match req.test() {
            Ok(_) => return,
            Err(r) => req = r,
        }
        std::thread::sleep(std::time::Duration::from_micros(us));
    }
}

impl Comm for MpiComm {
    fn rank(&self) -> usize {
        self.comm.rank() as usize
    }

    fn size(&self) -> usize {
        self.comm.size() as usize
    }

    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<()> {
        let n = self.size();
        if buf.len() > Count::MAX as usize {
            bail!(
                "all-reduce of {} values exceeds MPI's count limit",
                buf.len()
            );
        }
        let me = self.rank();
        let (counts, displs) = chunks(buf.len(), n);
        let mine = counts[me] as usize;
        let mut gathered = vec![0f32; mine * n];
        {
            let send = Partition::new(&buf[..], &counts[..], &displs[..]);
            let recv_counts = vec![mine as Count; n];
            let recv_displs: Vec<Count> = (0..n).map(|i| (i * mine) as Count).collect();
            let mut recv = PartitionMut::new(&mut gathered[..], &recv_counts[..], &recv_displs[..]);
            self.all_to_all_v(&send, &mut recv);
        }
        let mut sum = gathered[..mine].to_vec();
        for i in 1..n {
            for (s, x) in sum.iter_mut().zip(&gathered[i * mine..(i + 1) * mine]) {
                *s += *x;
            }
        }
        let mut out = PartitionMut::new(buf, &counts[..], &displs[..]);
        self.all_gather_v(&sum[..], &mut out);
        Ok(())
    }

    /// `MPI_Alltoallv` of the byte strings (the compressed all-reduce's two steps).
    fn exchange(&self, parts: Vec<Vec<u8>>, sizes: &[usize]) -> Result<Vec<Vec<u8>>> {
        let n = self.size();
        if parts.len() != n || sizes.len() != n {
            bail!("exchange over {n} ranks with {} parts", parts.len());
        }
        let counts = |lens: &mut dyn Iterator<Item = usize>| -> Result<(Vec<Count>, Vec<Count>)> {
            let counts = lens
                .map(|l| {
                    Count::try_from(l)
                        .map_err(|_| anyhow::anyhow!("exchange exceeds MPI's count limit"))
                })
                .collect::<Result<Vec<Count>>>()?;
            let displs = counts
                .iter()
                .scan(0 as Count, |acc, &c| {
                    let d = *acc;
                    *acc += c;
                    Some(d)
                })
                .collect();
            Ok((counts, displs))
        };
        let (send_counts, send_displs) = counts(&mut parts.iter().map(Vec::len))?;
        let (recv_counts, recv_displs) = counts(&mut sizes.iter().copied())?;
        // One spare byte each: an empty byte slice's pointer is 0x1, which is MPI_IN_PLACE
        // to OpenMPI (and rejected in an all-to-all).
        let mut flat: Vec<u8> = parts.concat();
        flat.push(0);
        let mut received = vec![0u8; sizes.iter().sum::<usize>() + 1];
        {
            let send = Partition::new(&flat[..], &send_counts[..], &send_displs[..]);
            let mut recv = PartitionMut::new(&mut received[..], &recv_counts[..], &recv_displs[..]);
            self.all_to_all_v(&send, &mut recv);
        }
        let mut at = 0;
        Ok(sizes
            .iter()
            .map(|&l| {
                at += l;
                received[at - l..at].to_vec()
            })
            .collect())
    }

    fn threads_allowed(&self) -> bool {
        self.background
    }
}

/// The MPI environment of this process; MPI is finalised when it is dropped.
#[cfg(feature = "cuda")]
impl MpiComm {
    /// An NCCL group over the same members on `device`, reducing on `stream` (the
    /// rank's one NCCL stream, `nccl::comm_stream`): rank 0 creates the group's id and
    /// broadcasts it over this communicator. Collective over the group.
    pub fn nccl(
        &self,
        device: &candle_core::Device,
        stream: &std::sync::Arc<candle_core::cuda_backend::cudarc::driver::CudaStream>,
    ) -> Result<super::nccl::NcclComm> {
        let root = self.comm.process_at_rank(0);
        let mut id: super::nccl::NcclId = [0; 128];
        if self.rank() == 0 {
            id = super::nccl::new_id()?;
        }
        let mut bytes: Vec<u8> = id.iter().map(|&c| c as u8).collect();
        root.broadcast_into(&mut bytes[..]);
        for (c, b) in id.iter_mut().zip(&bytes) {
            *c = *b as std::ffi::c_char;
        }
        super::nccl::NcclComm::join(device, self.rank(), self.size(), id, stream)
    }
}

pub struct MpiWorld {
    _universe: mpi::environment::Universe,
    world: SimpleCommunicator,
    background: bool,
}

/// A rank's communicators: its TP group, its DP group, and the whole world.
pub struct MpiGroups {
    pub mesh: Mesh,
    pub tp: MpiComm,
    pub dp: MpiComm,
    pub world: MpiComm,
}

impl MpiWorld {
    /// Asks for `MPI_THREAD_MULTIPLE`, which a communication thread per group needs;
    /// where MPI grants less, started all-reduces complete before they return.
    /// `TP_MPI_COMM_THREAD=0` asks for no thread support at all (the comparison).
    pub fn init() -> Result<Self> {
        let wanted = super::mpi_env::comm_thread().map_err(crate::error::user)?;
        let asked = if wanted {
            Threading::Multiple
        } else {
            Threading::Single
        };
        let Some((universe, granted)) = mpi::initialize_with_threading(asked) else {
            bail!("MPI was already initialised in this process");
        };
        let world = universe.world();
        Ok(Self {
            _universe: universe,
            world,
            background: wanted && granted == Threading::Multiple,
        })
    }

    pub fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    pub fn size(&self) -> usize {
        self.world.size() as usize
    }

    /// Splits the world into TP groups (consecutive ranks) and DP groups.
    pub fn groups(&self, tp: usize) -> Result<MpiGroups> {
        let poll_us = super::mpi_env::poll_us().map_err(crate::error::user)?;
        let mesh = Mesh::from_world(self.size(), tp, self.rank())?;
        // Colors choose the group, keys keep rank order inside it.
        let tp_comm = self
            .world
            .split_by_color_with_key(
                Color::with_value(mesh.dp_rank() as i32),
                mesh.tp_rank() as i32,
            )
            .ok_or_else(|| anyhow::anyhow!("MPI could not form the tensor-parallel group"))?;
        let dp_comm = self
            .world
            .split_by_color_with_key(
                Color::with_value(mesh.tp_rank() as i32),
                mesh.dp_rank() as i32,
            )
            .ok_or_else(|| anyhow::anyhow!("MPI could not form the data-parallel group"))?;
        Ok(MpiGroups {
            mesh,
            tp: mpi_comm(tp_comm, self.background, poll_us),
            dp: mpi_comm(dp_comm, self.background, 0),
            world: mpi_comm(self.world.duplicate(), false, 0),
        })
    }

    /// Every rank's [`crate::util::host::label`], in rank order, on every rank (an
    /// all-gather of fixed-size byte records; collective).
    pub fn hosts(&self) -> Vec<String> {
        const LEN: usize = 160;
        let mut mine = [0u8; LEN];
        let label = crate::util::host::label();
        let bytes = label.as_bytes();
        let n = bytes.len().min(LEN);
        mine[..n].copy_from_slice(&bytes[..n]);
        let mut all = vec![0u8; LEN * self.size()];
        self.world.all_gather_into(&mine[..], &mut all[..]);
        all.chunks(LEN)
            .map(|c| {
                let end = c.iter().position(|&b| b == 0).unwrap_or(LEN);
                String::from_utf8_lossy(&c[..end]).into_owned()
            })
            .collect()
    }

    /// Every rank's `x`, in rank order, on every rank (NaN stands for a rank's `None`).
    /// Every rank's bytes, in rank order (collective over the world).
    pub fn all_gather_bytes(&self, mine: &[u8]) -> Vec<Vec<u8>> {
        let n = self.size();
        let mut lens = vec![0u64; n];
        self.world
            .all_gather_into(&(mine.len() as u64), &mut lens[..]);
        let counts: Vec<Count> = lens.iter().map(|&l| l as Count).collect();
        let displs: Vec<Count> = counts
            .iter()
            .scan(0, |at, &c| {
                let d = *at;
                *at += c;
                Some(d)
            })
            .collect();
        let mut all = vec![0u8; lens.iter().sum::<u64>() as usize];
        {
            let mut part =
                mpi::datatype::PartitionMut::new(&mut all[..], counts.clone(), &displs[..]);
            self.world.all_gather_varcount_into(mine, &mut part);
        }
        displs
            .iter()
            .zip(&counts)
            .map(|(&d, &c)| all[d as usize..(d + c) as usize].to_vec())
            .collect()
    }

    pub fn all_gather_f64(&self, x: Option<f64>) -> Vec<Option<f64>> {
        let mine = x.unwrap_or(f64::NAN);
        let mut all = vec![0f64; self.size()];
        self.world.all_gather_into(&mine, &mut all[..]);
        all.into_iter()
            .map(|v| (!v.is_nan()).then_some(v))
            .collect()
    }

    /// A communicator over all ranks (for agreement before groups exist).
    pub fn world_comm(&self) -> MpiComm {
        mpi_comm(self.world.duplicate(), false, 0)
    }

    /// Ends every rank of the job (MPI_Abort): nobody is left waiting in a collective.
    pub fn abort(&self, code: i32) -> ! {
        self.world.abort(code)
    }
}

#[cfg(test)]
mod tests {
    use super::chunks;

    #[test]
    fn chunks_cover_the_buffer_once_in_order() {
        let (c, d) = chunks(10, 4);
        assert_eq!(c, vec![3, 3, 2, 2]);
        assert_eq!(d, vec![0, 3, 6, 8]);
        let (c, d) = chunks(1, 2);
        assert_eq!((c, d), (vec![1, 0], vec![0, 1]));
    }
}
