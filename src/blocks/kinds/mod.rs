//! The block kinds, one file each with every fact of its kind (`SPEC`, `blocks/spec.rs`)
//! beside its forward, and the registry: the one list of them. A new kind is a file here
//! and a line in [`REGISTRY`] (with its `mod` line); the conformance suite
//! (`tests/it/conformance.rs`) enrols it in every proof.

pub mod ladder;
pub mod parallel;
#[cfg(test)]
pub mod private_channel;
pub mod spd;
pub mod tp_block;

use super::spec::KindSpec;

/// Every kind, in the order help and errors list them.
pub const REGISTRY: &[&KindSpec] = &[
    &tp_block::SPEC,
    &spd::SPEC,
    &parallel::SPEC,
    &ladder::SPEC,
    #[cfg(test)]
    &private_channel::SPEC,
];
