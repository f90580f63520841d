//! The transformer blocks `t`, `s`, `p` and `l` exactly as `docs/blocks.md` defines
//! them, the shared attention/MLP shards they are made of, and the pattern parser.
//!
//! Blocks talk to their tensor-parallel group only through [`crate::comm::CountedComm`] and the
//! conjugate operators; they know nothing of how ranks are connected.

pub mod attention;
pub mod config;
pub mod fwd;
pub mod kind;
pub mod l;
pub mod layout;
pub mod mlp;
pub mod p;
pub mod params;
pub mod pattern;
#[cfg(test)]
mod private_channel;
pub mod replicas;
pub mod s;
pub mod stack;
pub mod t;

pub use attention::AttentionShard;
pub use config::BlockConfig;
pub use fwd::Fwd;
pub(crate) use fwd::{add_bias, DropSite};
pub use kind::BlockKind;
pub use l::LadderRun;
pub use layout::BlockLayout;
pub use mlp::MlpShard;
pub use p::ParallelRun;
pub use params::{BlockParams, BlockTags};
pub use pattern::PatternError;
pub use replicas::ReplicaProbe;
pub use s::SpdBlock;
pub use stack::BlockStack;
pub use t::TpBlock;
