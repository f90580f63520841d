//! A fresh contiguous copy of a strided input on whatever backend holds it: the forward
//! of the ops whose only work is in their backward (Megatron's `f` and `g`, the nodes
//! that join a hand-driven backward to candle's graph).

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::{Layout, Result, Shape};

/// `storage` as `layout` reads it, copied into a new contiguous buffer.
pub fn contiguous_copy<S>(storage: &S, layout: &Layout) -> Result<(S, Shape)>
where
    S: BackendStorage,
    S::Device: BackendDevice<Storage = S>,
{
    // SAFETY: every element of `dst` is written by the strided copy below.
    let mut dst = unsafe {
        storage
            .device()
            .alloc_uninit(layout.shape(), storage.dtype())?
    };
    storage.copy_strided_src(&mut dst, 0, layout)?;
    Ok((dst, layout.shape().clone()))
}
