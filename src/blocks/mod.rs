//! The transformer blocks `t`, `s`, `p` and `l` exactly as `docs/blocks.md` defines
//! them (one file each in `kinds/`, every fact of a kind beside its forward), the shared
//! attention/MLP shards they are made of, and the pattern parser.
//!
//! Blocks talk to their tensor-parallel group only through [`crate::comm::CountedComm`] and the
//! conjugate operators; they know nothing of how ranks are connected.

pub mod attention;
pub mod config;
pub mod fwd;
pub mod kind;
pub mod kinds;
pub mod layout;
pub mod mlp;
pub mod params;
pub mod pattern;
pub mod replicas;
pub mod spec;
pub mod stack;

pub use attention::AttentionShard;
pub use config::BlockConfig;
pub use fwd::Fwd;
pub(crate) use fwd::{add_bias, DropSite};
pub use kind::BlockKind;
pub use kinds::ladder::LadderRun;
pub use kinds::parallel::ParallelRun;
pub use kinds::spd::SpdBlock;
pub use kinds::tp_block::TpBlock;
pub use layout::BlockLayout;
pub use mlp::MlpShard;
pub use params::{BlockParams, BlockTags};
pub use pattern::PatternError;
pub use replicas::ReplicaProbe;
pub use stack::BlockStack;
