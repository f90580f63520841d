//! The step's few host numbers summed or averaged over a group (the gradient norm's
//! sharded part, the losses a rank reports): a small host tensor through the group's one
//! blocking call, counted as `Other` like any collective.

use crate::comm::{CommKind, CountedComm, Reduce, Site};
use anyhow::Result;
use candle_core::{Device, Tensor};

/// `op` ([`Reduce::Sum`] or [`Reduce::Mean`]) of `values` over `group`, in place.
pub fn reduce_host(group: &CountedComm, values: &mut [f32], op: Reduce, site: Site) -> Result<()> {
    let t = Tensor::from_slice(values, values.len(), &Device::Cpu)?;
    let out = group.all_reduce(&t, op, site, CommKind::Other)?;
    values.copy_from_slice(&out.to_vec1::<f32>()?);
    Ok(())
}
