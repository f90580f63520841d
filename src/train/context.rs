//! A rank's view of the job: where it sits in the mesh, its two counted groups, its tally
//! and its device. Built in one place ([`RankContext::new`]) by every launcher.

use crate::comm::{Comm, CommDtype, CountedComm, LinkModel, Mesh, Tally};
use candle_core::Device;
use std::sync::Arc;

pub struct RankContext {
    pub mesh: Mesh,
    /// This rank's tensor-parallel group.
    pub tp: CountedComm,
    /// This rank's data-parallel group.
    pub dp: CountedComm,
    pub tally: Arc<Tally>,
    /// Where the rank's model, gradients and optimiser state live.
    pub device: Device,
}

impl RankContext {
    /// Both groups count into one tally of this rank and share the emulated `link`; the
    /// TP group sends activation sums in `comm_dtype`.
    pub fn new(
        mesh: Mesh,
        tp: Arc<dyn Comm>,
        dp: Arc<dyn Comm>,
        link: Option<LinkModel>,
        comm_dtype: CommDtype,
        device: Device,
    ) -> Self {
        let tally = Arc::new(Tally::new());
        Self {
            mesh,
            tp: CountedComm::new(tp, tally.clone())
                .with_link(link)
                .with_comm_dtype(comm_dtype),
            dp: CountedComm::new(dp, tally.clone()).with_link(link),
            tally,
            device,
        }
    }
}
