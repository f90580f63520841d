//! Tensor-parallel maths for any model, over the collectives of `comm`: the conjugate
//! autograd operators f/g, column- and row-parallel linears, the vocabulary-parallel
//! embedding and cross-entropy, sharding and the parameter registry.

pub mod layers;
pub mod mappings;
pub mod params;
pub mod shard;
pub mod vocab;

pub use layers::{ColumnParallelLinear, RowParallelLinear};
pub use mappings::{
    copy_to_tp, into_candle, reduce_from_tp, share_grad_over_tp, trace_mark, MarkAt,
};
pub use params::{
    gather_logical, Init, Param, ParamBuilder, ParamKind, ParamRegistry, ParamSource, Scope,
    SeededInit, StoredParams,
};
pub use shard::{padded_rows_range, Shard};
pub use vocab::VocabShard;
