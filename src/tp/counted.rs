//! The counting layer every collective passes through.

use super::comm::Comm;
use super::tally::{CommKind, Site, Tally};
use anyhow::Result;
use std::sync::Arc;
use std::time::Instant;

/// A communicator plus the tally it reports to. Blocks, gradient sync and evaluation all
/// talk to groups through this type, so no collective escapes the count.
#[derive(Clone)]
pub struct CountedComm {
    comm: Arc<dyn Comm>,
    tally: Arc<Tally>,
}

impl CountedComm {
    pub fn new(comm: Arc<dyn Comm>, tally: Arc<Tally>) -> Self {
        Self { comm, tally }
    }

    /// A group of one with its own tally (single-process models and references).
    pub fn solo() -> Self {
        Self::new(Arc::new(super::comm::SoloComm), Arc::new(Tally::new()))
    }

    pub fn rank(&self) -> usize {
        self.comm.rank()
    }
    pub fn size(&self) -> usize {
        self.comm.size()
    }
    pub fn tally(&self) -> &Arc<Tally> {
        &self.tally
    }

    /// Sum over the group. A group of one communicates nothing and records nothing.
    pub fn all_reduce_sum(&self, buf: &mut [f32], site: Site, kind: CommKind) -> Result<()> {
        if self.comm.size() == 1 {
            return Ok(());
        }
        let t0 = Instant::now();
        self.comm.all_reduce_sum(buf)?;
        let secs = t0.elapsed().as_secs_f64();
        self.tally
            .record(site, kind, std::mem::size_of_val(buf) as u64, secs);
        Ok(())
    }

    /// Mean over the group.
    pub fn all_reduce_mean(&self, buf: &mut [f32], site: Site, kind: CommKind) -> Result<()> {
        self.all_reduce_sum(buf, site, kind)?;
        let n = self.size() as f32;
        if n > 1.0 {
            for x in buf.iter_mut() {
                *x /= n;
            }
        }
        Ok(())
    }
}
