//! The counting layer every collective passes through.

use super::collectives::Comm;
use super::link::LinkModel;
use super::tally::{Call, CommKind, Site, Tally};
use anyhow::Result;
use candle_core::Tensor;
use std::sync::Arc;
use std::time::Instant;

/// A communicator plus the tally it reports to. Blocks, gradient sync and evaluation all
/// talk to groups through this type, so no collective escapes the count.
#[derive(Clone)]
pub struct CountedComm {
    comm: Arc<dyn Comm>,
    tally: Arc<Tally>,
    link: Option<LinkModel>,
}

impl CountedComm {
    pub fn new(comm: Arc<dyn Comm>, tally: Arc<Tally>) -> Self {
        Self {
            comm,
            tally,
            link: None,
        }
    }

    /// Holds every collective to at least `link`'s modelled time (emulated interconnect).
    pub fn with_link(mut self, link: Option<LinkModel>) -> Self {
        self.link = link;
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
        self.comm.rank()
    }
    pub fn size(&self) -> usize {
        self.comm.size()
    }
    pub fn tally(&self) -> &Arc<Tally> {
        &self.tally
    }

    /// Runs one collective of `bytes` through `op`, holds it to the emulated link's time
    /// and records it. A group of one communicates nothing and records nothing.
    fn counted<R>(
        &self,
        bytes: u64,
        site: Site,
        kind: CommKind,
        op: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        let t0 = Instant::now();
        let out = op()?;
        let n = self.comm.size();
        let modelled = self.link.map_or(0.0, |l| l.allreduce_seconds(bytes, n));
        let elapsed = t0.elapsed().as_secs_f64();
        if modelled > elapsed {
            // Sleep, not spin: the other ranks may share these cores.
            std::thread::sleep(std::time::Duration::from_secs_f64(modelled - elapsed));
        }
        self.tally.record(
            site,
            kind,
            Call {
                bytes,
                seconds: t0.elapsed().as_secs_f64(),
                modelled_seconds: modelled,
                group_size: n,
            },
        );
        Ok(out)
    }

    /// Sum of a host buffer over the group, in place.
    pub fn all_reduce_sum(&self, buf: &mut [f32], site: Site, kind: CommKind) -> Result<()> {
        if self.comm.size() == 1 {
            return Ok(());
        }
        let bytes = std::mem::size_of_val(buf) as u64;
        self.counted(bytes, site, kind, || self.comm.all_reduce_sum(buf))
    }

    /// Sum of a tensor over the group, on its device.
    pub fn all_reduce(&self, t: &Tensor, site: Site, kind: CommKind) -> Result<Tensor> {
        if self.comm.size() == 1 {
            return Ok(t.clone());
        }
        let bytes = (t.elem_count() * t.dtype().size_in_bytes()) as u64;
        self.counted(bytes, site, kind, || self.comm.all_reduce(t))
    }

    /// Element-wise maximum of a tensor over the group, on its device.
    pub fn all_reduce_max(&self, t: &Tensor, site: Site, kind: CommKind) -> Result<Tensor> {
        if self.comm.size() == 1 {
            return Ok(t.clone());
        }
        let bytes = (t.elem_count() * t.dtype().size_in_bytes()) as u64;
        self.counted(bytes, site, kind, || self.comm.all_reduce_max(t))
    }

    /// Mean of a tensor over the group (each element divided by the group size, exactly
    /// as the host-buffer mean).
    pub fn all_reduce_mean(&self, t: &Tensor, site: Site, kind: CommKind) -> Result<Tensor> {
        let sum = self.all_reduce(t, site, kind)?;
        let n = self.size();
        if n == 1 {
            return Ok(sum);
        }
        let n = Tensor::new(n as f32, t.device())?.to_dtype(t.dtype())?;
        Ok(sum.broadcast_div(&n)?)
    }

    /// Mean of a host buffer over the group, in place.
    pub fn all_reduce_mean_host(&self, buf: &mut [f32], site: Site, kind: CommKind) -> Result<()> {
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

/// Runs `f` on each member of an `n`-rank thread group, each with a counted handle and
/// its own tally; results in rank order (the tp modules' unit tests).
#[cfg(test)]
pub(crate) fn on_thread_ranks<R: Send>(n: usize, f: impl Fn(CountedComm) -> R + Sync) -> Vec<R> {
    let comms = super::ThreadWorld::new().group(n);
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .map(|c| {
                let f = &f;
                s.spawn(move || {
                    f(CountedComm::new(
                        Arc::new(c) as Arc<dyn Comm>,
                        Arc::new(Tally::new()),
                    ))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}
