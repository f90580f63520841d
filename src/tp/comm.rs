//! The collective-communication interface every backend implements.
//!
//! Only what the harness needs: a sum all-reduce over `f32` buffers. Backends must sum in
//! rank order so that every member of a group ends with bit-identical values; replicated
//! parameters stay identical across ranks only because of that.

use anyhow::Result;

pub trait Comm: Send + Sync {
    /// This member's index inside the group, `0 <= rank < size`.
    fn rank(&self) -> usize;
    /// Number of members in the group.
    fn size(&self) -> usize;
    /// In-place sum over the group, in rank order, identical on every member.
    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<()>;
}

/// A group of one: every collective is the identity. Used for tp 1 / dp 1 and for
/// single-process references.
#[derive(Debug, Default, Clone, Copy)]
pub struct SoloComm;

impl Comm for SoloComm {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn all_reduce_sum(&self, _buf: &mut [f32]) -> Result<()> {
        Ok(())
    }
}
