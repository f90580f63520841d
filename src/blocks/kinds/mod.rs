//! The block kinds, one file each with every fact of its kind (`SPEC`, `blocks/spec.rs`)
//! beside its forward, and the registry: the one list of them, a line a kind (the line
//! declares its module and lists its spec). A new kind is a file here and a line below;
//! the conformance suite (`tests/it/conformance.rs`) enrols it in every proof.

use super::spec::KindSpec;

/// Declares each kind's module and lists its `SPEC` in [`REGISTRY`], in the order given.
macro_rules! registry {
    ($($(#[$attr:meta])* $kind:ident,)*) => {
        $($(#[$attr])* pub mod $kind;)*

        /// Every kind, in the order help and errors list them.
        pub const REGISTRY: &[&KindSpec] = &[$($(#[$attr])* &$kind::SPEC,)*];
    };
}

registry! {
    tp_block,
    spd,
    parallel,
    ladder,
    #[cfg(test)]
    private_channel,
}
