//! Communication for tensor and data parallelism, independent of any model: the `Comm`
//! trait and its backends, the device mesh, the counting layer and tally, the conjugate
//! autograd operators f/g, parallel linears, the vocabulary-parallel embedding and
//! cross-entropy, sharding and the parameter registry.

pub mod comm;
pub mod counted;
pub mod layers;
pub mod link;
pub mod mappings;
pub mod mesh;
pub mod params;
pub mod shard;
pub mod tally;
pub mod threads;
pub mod vocab;

pub use comm::{stage_through_host, Comm, SoloComm};
pub use counted::CountedComm;
pub use layers::{ColumnParallelLinear, RowParallelLinear};
pub use link::{LinkModel, NAMED_LINKS};
pub use mappings::{copy_to_tp, reduce_from_tp, share_grad_over_tp};
pub use mesh::Mesh;
pub use params::{
    gather_logical, Init, Param, ParamBuilder, ParamKind, ParamRegistry, ParamSource, Scope,
    SeededInit, StoredParams,
};
pub use shard::{padded_rows_range, Shard};
pub use tally::{CommKind, Phase, Site, Stat, Tally, TallySnapshot};
pub use threads::{ThreadComm, ThreadWorld};
pub use vocab::VocabShard;
#[cfg(feature = "mpi")]
pub mod mpi;
#[cfg(feature = "cuda")]
pub mod nccl;
