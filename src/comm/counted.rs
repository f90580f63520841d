//! The one path every collective takes. A rank talks to its groups only through
//! [`CountedComm`]: it starts a collective ([`CountedComm::start`]; the blocking form is
//! the start waited for at once), runs it on the member's [`Lane`] (in the member's one
//! order, on its communication thread when started; a blocking one with nothing in
//! flight runs here) or the backend's device queue, and sends activation sums compressed
//! as the group's `comm_dtype` says. What is measured of it (the emulated link's time,
//! hidden and exposed, the tally, the timeline) is the observer's (`observe.rs`). A group of one communicates nothing
//! and records nothing: that is decided here, once ([`CountedComm::communicates`]; a
//! caller may skip what it would only prepare for a call, a bucket's flattening or an
//! autograd op, by asking it, and a call made anyway returns its input).
//!
//! Two calls: [`CountedComm::start`] and [`CountedComm::all_reduce`] (its start waited
//! for at once). A host number travels as a small host tensor (`train::host_sums`).

use super::collectives::{Comm, Started};
use super::compressed;
use super::link::LinkModel;
use super::observe::{Issued, Observer};
use super::quantise::CommDtype;
use super::tally::{CommKind, Site, Tally};
use super::worker::Lane;
use crate::util::turns::inside_collective;
use anyhow::Result;
use candle_core::Tensor;
use std::sync::Arc;
use std::time::Instant;

/// What a collective computes over the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduce {
    /// The exact sum, in rank order.
    Sum,
    /// The sum divided by the group size (data-parallel gradients, metrics).
    Mean,
    /// The element-wise maximum (the parallel cross-entropy's row maxima).
    Max,
    /// A TP activation or activation-gradient sum (f's backward, g's forward): the sum,
    /// sent compressed as the group's `comm_dtype` says (exact at f32).
    Activation,
}

/// A communicator plus the tally it reports to. Blocks, gradient sync and evaluation all
/// talk to groups through this type, so no collective escapes the count.
#[derive(Clone)]
pub struct CountedComm {
    lane: Arc<Lane>,
    /// The tally, the emulated link and the hidden/exposed arithmetic.
    observer: Observer,
    /// What activation and activation-gradient sums travel in (blocks.md's `comm_dtype`).
    comm_dtype: CommDtype,
}

impl CountedComm {
    pub fn new(comm: Arc<dyn Comm>, tally: Arc<Tally>) -> Self {
        Self {
            lane: Arc::new(Lane::new(comm)),
            observer: Observer::new(tally),
            comm_dtype: CommDtype::F32,
        }
    }

    /// Sends the [`Reduce::Activation`] sums compressed.
    pub fn with_comm_dtype(mut self, dtype: CommDtype) -> Self {
        self.comm_dtype = dtype;
        self
    }

    pub fn comm_dtype(&self) -> CommDtype {
        self.comm_dtype
    }

    /// Holds every collective to at least `link`'s modelled time (emulated interconnect).
    pub fn with_link(mut self, link: Option<LinkModel>) -> Self {
        self.observer = self.observer.with_link(link);
        self
    }

    /// A group of one with its own tally (single-process models and references).
    pub fn solo() -> Self {
        Self::new(
            Arc::new(super::collectives::SoloComm),
            Arc::new(Tally::new()),
        )
    }

    pub fn rank(&self) -> usize {
        self.lane.member().rank()
    }
    pub fn size(&self) -> usize {
        self.lane.member().size()
    }
    /// Whether a call over the group moves anything: false for a group of one.
    pub fn communicates(&self) -> bool {
        self.size() > 1
    }
    pub fn tally(&self) -> &Arc<Tally> {
        &self.observer.tally
    }

    /// Starts `op` of `t` over the group; the rank computes while it runs (on its
    /// communication thread, or the backend's device queue) and the emulated link's time
    /// runs from here too. [`Started::wait`] gives the result and records the call, with
    /// the time before the wait as hidden.
    pub fn start(
        &self,
        t: &Tensor,
        op: Reduce,
        site: Site,
        kind: CommKind,
    ) -> Result<Started<Tensor>> {
        self.issue(t, op, site, kind, true)
    }

    /// `op` of `t` over the group, on `t`'s device, blocking (all of it exposed).
    pub fn all_reduce(&self, t: &Tensor, op: Reduce, site: Site, kind: CommKind) -> Result<Tensor> {
        self.issue(t, op, site, kind, false)?.wait()
    }

    /// `op` of `t` over the group, started ([`CountedComm::start`]) when `background`,
    /// else blocking: run at once, waited for at once, all of it exposed.
    fn issue(
        &self,
        t: &Tensor,
        op: Reduce,
        site: Site,
        kind: CommKind,
        background: bool,
    ) -> Result<Started<Tensor>> {
        if !self.communicates() {
            return Ok(Started::ready(Ok(t.clone())));
        }
        let n = self.size();
        let dtype = self.comm_dtype;
        let compressed = op == Reduce::Activation && dtype != CommDtype::F32;
        let width = t.dims().last().copied().unwrap_or(1);
        let bytes = if compressed {
            dtype.encoded_len(t.elem_count() / width.max(1), width)
        } else {
            t.elem_count() * t.dtype().size_in_bytes()
        } as u64;
        let t = t.detach();
        let for_device = t.clone();
        let run = move |m: &dyn Comm| match op {
            Reduce::Sum => m.all_reduce(&t),
            Reduce::Activation if compressed => compressed::all_reduce_tensor(m, &t, dtype),
            Reduce::Activation => m.all_reduce(&t),
            Reduce::Mean => {
                let n = Tensor::new(n as f32, t.device())?.to_dtype(t.dtype())?;
                Ok(m.all_reduce(&t)?.broadcast_div(&n)?)
            }
            Reduce::Max => max_from_sum(m, &t),
        };
        self.counted(bytes, site, kind, background, || {
            if !background && self.lane.idle() {
                // Nothing in flight: the member's backend, here and now.
                return Ok(Started::ready(run(self.lane.member())));
            }
            if background && matches!(op, Reduce::Sum | Reduce::Activation) && !compressed {
                if let Some(on_device) = self.lane.member().start_on_device(&for_device) {
                    return on_device;
                }
            }
            Ok(self.lane.run(background, run))
        })
    }

    /// Runs `start`, a collective of `bytes`, and returns it started: the observer
    /// books it on the emulated link, and waiting for it holds it to the link's time and
    /// records it, the part between the start's return and the wait as hidden (a
    /// blocking one, waited for at once, hides nothing).
    fn counted<R: 'static>(
        &self,
        bytes: u64,
        site: Site,
        kind: CommKind,
        background: bool,
        start: impl FnOnce() -> Result<Started<R>>,
    ) -> Result<Started<R>> {
        let t0 = Instant::now();
        let due = self.observer.book(t0, bytes, self.size());
        let started = inside_collective(start)?;
        let call = Issued {
            bytes,
            site,
            kind,
            t0,
            returned: if background { Instant::now() } else { t0 },
            complete: started.is_complete(),
            due,
        };
        if background {
            self.observer.started(&call);
        }
        let (observer, n) = (self.observer.clone(), self.size());
        Ok(Started::later(move || {
            let waited = if background { Instant::now() } else { t0 };
            let result = inside_collective(|| started.wait())?;
            observer.finished(call, waited, n);
            Ok(result)
        }))
    }
}

/// The element-wise maximum of `t` over `m`'s group from its sum: each member places `t`
/// in its own row of a `(size, len)` zero tensor, the group's sum of those is every
/// member's tensor (exact: each element has one non-zero term), and each member takes the
/// maximum over the rows. It moves `size` times the bytes of a native max; the rows are
/// small (one value per token).
fn max_from_sum(m: &dyn Comm, t: &Tensor) -> Result<Tensor> {
    let (n, rank) = (m.size(), m.rank());
    let flat = t.flatten_all()?.unsqueeze(0)?;
    let len = flat.dim(1)?;
    let placed = Tensor::zeros((n, len), t.dtype(), t.device())?
        .slice_assign(&[rank..rank + 1, 0..len], &flat)?;
    Ok(m.all_reduce(&placed)?.max(0)?.reshape(t.shape())?)
}
