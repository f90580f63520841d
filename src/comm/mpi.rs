//! The `mpi` backend: one process per rank under `mpirun`, on the system's MPI (rsmpi).
//!
//! The all-reduce is a deterministic reduce-scatter + all-gather: each rank owns one
//! chunk, receives that chunk from every rank (`MPI_Alltoallv`), sums it in rank order,
//! and the owners' sums are gathered back (`MPI_Allgatherv`). Every element is summed in
//! the same order as in the threads backend, so both backends give bit-identical results
//! and every rank holds identical bits, while each rank moves `2 (N-1)/N` of the buffer,
//! like a ring all-reduce. (`MPI_Allreduce` guarantees neither.)

use super::collectives::Comm;
use super::mesh::Mesh;
use anyhow::{bail, Result};
use mpi::collective::SystemOperation;
use mpi::datatype::{Partition, PartitionMut};
use mpi::topology::{Color, Communicator, SimpleCommunicator};
use mpi::traits::*;
use mpi::Count;

/// `SimpleCommunicator` wraps a raw `MPI_Comm` and is not `Send`/`Sync`. Sound here: each
/// process has one rank thread and only it calls MPI (candle's worker threads never do).
struct SendComm(SimpleCommunicator);
unsafe impl Send for SendComm {}
unsafe impl Sync for SendComm {}

pub struct MpiComm {
    comm: SendComm,
}

fn chunks(len: usize, n: usize) -> (Vec<Count>, Vec<Count>) {
    let counts: Vec<Count> = (0..n)
        .map(|j| (len / n + usize::from(j < len % n)) as Count)
        .collect();
    let displs = counts
        .iter()
        .scan(0, |acc, &c| {
            let d = *acc;
            *acc += c;
            Some(d)
        })
        .collect();
    (counts, displs)
}

impl Comm for MpiComm {
    fn rank(&self) -> usize {
        self.comm.0.rank() as usize
    }

    fn size(&self) -> usize {
        self.comm.0.size() as usize
    }

    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<()> {
        let n = self.size();
        if n == 1 {
            return Ok(());
        }
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
            self.comm.0.all_to_all_varcount_into(&send, &mut recv);
        }
        let mut sum = gathered[..mine].to_vec();
        for i in 1..n {
            for (s, x) in sum.iter_mut().zip(&gathered[i * mine..(i + 1) * mine]) {
                *s += *x;
            }
        }
        let mut out = PartitionMut::new(buf, &counts[..], &displs[..]);
        self.comm.0.all_gather_varcount_into(&sum[..], &mut out);
        Ok(())
    }

    /// `MPI_Allreduce` with `MPI_MAX`: a maximum does not depend on the order it is taken
    /// in, so every rank gets the same bits, as the threads backend's.
    fn all_reduce_max(&self, t: &candle_core::Tensor) -> Result<candle_core::Tensor> {
        if self.size() == 1 {
            return Ok(t.clone());
        }
        super::collectives::stage_through_host(t, |buf| {
            let send = buf.to_vec();
            self.comm
                .0
                .all_reduce_into(&send[..], buf, SystemOperation::max());
            Ok(())
        })
    }
}

/// Whether this process was started by an MPI launcher.
pub fn launched_by_mpirun() -> bool {
    [
        "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",
        "PMIX_RANK",
        "MPI_LOCALNRANKS",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some())
}

/// Ranks of this job on this machine (to share its cores), when the launcher says.
/// This process's index among the ranks on its machine, from the launcher's environment.
pub fn local_rank() -> Option<usize> {
    [
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
        "PMI_LOCAL_RANK",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.parse().ok())
}

pub fn local_ranks() -> Option<usize> {
    ["OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
}

/// The MPI environment of this process; MPI is finalised when it is dropped.
#[cfg(feature = "cuda")]
impl MpiComm {
    /// An NCCL group over the same members on `device`: rank 0 creates the group's id and
    /// broadcasts it over this communicator. Collective over the group.
    pub fn nccl(&self, device: &candle_core::Device) -> Result<super::nccl::NcclComm> {
        let root = self.comm.0.process_at_rank(0);
        let mut id: super::nccl::NcclId = [0; 128];
        if self.rank() == 0 {
            id = super::nccl::new_id()?;
        }
        let mut bytes: Vec<u8> = id.iter().map(|&c| c as u8).collect();
        root.broadcast_into(&mut bytes[..]);
        for (c, b) in id.iter_mut().zip(&bytes) {
            *c = *b as std::ffi::c_char;
        }
        super::nccl::NcclComm::join(device, self.rank(), self.size(), id)
    }
}

pub struct MpiWorld {
    _universe: mpi::environment::Universe,
    world: SimpleCommunicator,
}

/// A rank's communicators: its TP group, its DP group, and the whole world.
pub struct MpiGroups {
    pub mesh: Mesh,
    pub tp: MpiComm,
    pub dp: MpiComm,
    pub world: MpiComm,
}

impl MpiWorld {
    pub fn init() -> Result<Self> {
        let Some(universe) = mpi::initialize() else {
            bail!("MPI was already initialised in this process");
        };
        let world = universe.world();
        Ok(Self {
            _universe: universe,
            world,
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
            tp: MpiComm {
                comm: SendComm(tp_comm),
            },
            dp: MpiComm {
                comm: SendComm(dp_comm),
            },
            world: MpiComm {
                comm: SendComm(self.world.duplicate()),
            },
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

    /// A communicator over all ranks (for agreement before groups exist).
    pub fn world_comm(&self) -> MpiComm {
        MpiComm {
            comm: SendComm(self.world.duplicate()),
        }
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
