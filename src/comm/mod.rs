//! Collectives for any model: the `Comm` trait and its backends (ranks as threads, MPI
//! processes, NCCL on GPUs), the device mesh of tensor- and data-parallel groups, the
//! counting layer that tallies every collective, and the link model it can emulate.

pub mod collectives;
pub mod compressed;
pub mod counted;
pub mod link;
pub mod link_catalog;
pub mod mesh;
pub mod mpi_env;
mod observe;
pub mod quantise;
pub mod tally;
#[cfg(test)]
pub(crate) mod test_ranks;
pub mod threads;
pub mod worker;

pub use collectives::{stage_through_host, Comm, SoloComm, Started};
pub use counted::{CountedComm, Reduce};
pub use link::LinkModel;
pub use link_catalog::NamedLink;
pub use mesh::Mesh;
pub use quantise::CommDtype;
pub use tally::{CommKind, Phase, Site, Stat, Tally, TallySnapshot};
pub use threads::{ThreadComm, ThreadWorld};
#[cfg(feature = "mpi")]
pub mod mpi;
#[cfg(feature = "cuda")]
pub mod nccl;
