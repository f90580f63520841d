//! The counting layer every collective passes through.

use super::collectives::{Comm, Pending};
use super::link::LinkModel;
use super::quantise::CommDtype;
use super::tally::{Call, CommKind, Site, Tally};
use super::turns::inside_collective;
use anyhow::Result;
use candle_core::Tensor;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A communicator plus the tally it reports to. Blocks, gradient sync and evaluation all
/// talk to groups through this type, so no collective escapes the count.
#[derive(Clone)]
pub struct CountedComm {
    comm: Arc<dyn Comm>,
    tally: Arc<Tally>,
    link: Option<LinkModel>,
    /// What activation and activation-gradient sums travel in (blocks.md's `comm_dtype`).
    comm_dtype: CommDtype,
}

impl CountedComm {
    pub fn new(comm: Arc<dyn Comm>, tally: Arc<Tally>) -> Self {
        Self {
            comm,
            tally,
            link: None,
            comm_dtype: CommDtype::F32,
        }
    }

    /// Sends the sums of [`CountedComm::all_reduce_activation`] and its kin compressed.
    pub fn with_comm_dtype(mut self, dtype: CommDtype) -> Self {
        self.comm_dtype = dtype;
        self
    }

    pub fn comm_dtype(&self) -> CommDtype {
        self.comm_dtype
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
        let out = inside_collective(op)?;
        self.finish(
            Started {
                bytes,
                site,
                kind,
                t0,
                returned: t0,
                blocked_before: self.tally.blocked(),
            },
            t0,
        );
        Ok(out)
    }

    /// Holds a collective started at `s.t0` and waited for at `waited` to the emulated
    /// link's time, then records it with the part between the start's return and
    /// `waited` as hidden (a backend that completes the sum inside the start hides
    /// nothing).
    fn finish(&self, s: Started, waited: Instant) {
        let n = self.comm.size();
        let modelled = self.modelled_seconds(s.bytes);
        let elapsed = s.t0.elapsed().as_secs_f64();
        if modelled > elapsed {
            // Sleep, not spin: the other ranks may share these cores.
            let rest = std::time::Duration::from_secs_f64(modelled - elapsed);
            inside_collective(|| std::thread::sleep(rest));
        }
        // The window computed what it did not spend blocked in other collectives (a
        // ladder waits for the previous sum while this one is in flight).
        let window = waited.saturating_duration_since(s.returned);
        let blocked = self.tally.blocked().saturating_sub(s.blocked_before);
        let hidden = window.saturating_sub(blocked);
        let exposed = waited.elapsed();
        self.tally.add_blocked(exposed);
        if self.tally.trace().is_on() {
            self.trace(&s, waited, hidden, exposed);
        }
        self.tally.record(
            s.site,
            s.kind,
            Call {
                bytes: s.bytes,
                // What the rank spent on it: computing through it, then blocked in it
                // (a started call's time queued behind others is theirs).
                seconds: (hidden + exposed).as_secs_f64(),
                modelled_seconds: modelled,
                hidden_seconds: hidden.as_secs_f64(),
                group_size: n,
            },
        );
    }

    /// The collective on the rank's timeline: from its start to its result on the
    /// communication track, the window the rank computed through it (`hidden`), and the
    /// rank's wait for it on its compute track.
    fn trace(&self, s: &Started, waited: Instant, hidden: Duration, exposed: Duration) {
        use super::trace::{at_us, wall_us, Span, Track};
        let trace = self.tally.trace();
        let name = format!("{} {}", s.kind.label(), s.site.label());
        let mut args = serde_json::Map::new();
        args.insert("site".into(), s.site.label().into());
        args.insert("kind".into(), s.kind.label().into());
        args.insert("bytes".into(), s.bytes.into());
        args.insert("group".into(), self.comm.size().into());
        let phase = match self.tally.phase() {
            super::tally::Phase::Train => "train",
            super::tally::Phase::Eval => "eval",
        };
        args.insert("phase".into(), phase.into());
        args.insert("hidden_us".into(), (hidden.as_secs_f64() * 1e6).into());
        args.insert("exposed_us".into(), (exposed.as_secs_f64() * 1e6).into());
        let (start, end) = (at_us(s.t0), wall_us());
        let span = |name: String, cat: &str, track, from: f64, to: f64, args| Span {
            name,
            cat: cat.into(),
            track,
            start_us: from,
            dur_us: (to - from).max(0.0),
            args,
        };
        trace.record(span(
            name.clone(),
            "collective",
            Track::Comm,
            start,
            end,
            args,
        ));
        if !hidden.is_zero() {
            let (from, to) = (at_us(s.returned), at_us(waited));
            trace.record(span(
                format!("hidden {name}"),
                "hidden",
                Track::Comm,
                from,
                to,
                Default::default(),
            ));
        }
        let wait_from = at_us(waited);
        trace.record(span(
            format!("wait {name}"),
            "wait",
            Track::Compute,
            wait_from,
            end,
            Default::default(),
        ));
    }

    /// Starts the sum of a tensor over the group; the rank computes while it runs (on
    /// backends that can: see [`Comm::start_all_reduce`]) and the emulated link's time
    /// runs from here too. [`PendingSum::wait`] gives the sum and records the call.
    pub fn start_all_reduce(&self, t: &Tensor, site: Site, kind: CommKind) -> Result<PendingSum> {
        let bytes = (t.elem_count() * t.dtype().size_in_bytes()) as u64;
        self.pending_sum(bytes, site, kind, || {
            if self.comm.size() == 1 {
                Ok(Pending::ready(Ok(t.clone())))
            } else {
                self.comm.start_all_reduce(t, self.hold(bytes))
            }
        })
    }

    /// A [`PendingSum`] of the collective `start` starts.
    fn pending_sum(
        &self,
        bytes: u64,
        site: Site,
        kind: CommKind,
        start: impl FnOnce() -> Result<Pending>,
    ) -> Result<PendingSum> {
        let t0 = Instant::now();
        let pending = inside_collective(start)?;
        let returned = Instant::now();
        self.tally.add_blocked(returned - t0);
        Ok(PendingSum {
            pending,
            started: Started {
                bytes,
                site,
                kind,
                t0,
                returned,
                blocked_before: self.tally.blocked(),
            },
            group: self.clone(),
        })
    }

    /// A TP activation or activation-gradient sum (f's backward, g's forward) of a tensor
    /// of rows (its last dimension): compressed as the group's `comm_dtype` says (exact at
    /// f32), the tally counting the bytes that travel.
    pub fn all_reduce_activation(&self, t: &Tensor, site: Site, kind: CommKind) -> Result<Tensor> {
        if self.comm_dtype == CommDtype::F32 || self.comm.size() == 1 {
            return self.all_reduce(t, site, kind);
        }
        let bytes = self.wire_bytes(t);
        self.counted(bytes, site, kind, || {
            self.comm.all_reduce_compressed(t, self.comm_dtype)
        })
    }

    /// [`CountedComm::all_reduce_activation`] of a host buffer of rows of `width`.
    pub fn all_reduce_activation_host(
        &self,
        buf: &mut [f32],
        width: usize,
        site: Site,
        kind: CommKind,
    ) -> Result<()> {
        if self.comm_dtype == CommDtype::F32 || self.comm.size() == 1 {
            return self.all_reduce_sum(buf, site, kind);
        }
        let bytes = self.comm_dtype.encoded_len(buf.len() / width.max(1), width) as u64;
        self.counted(bytes, site, kind, || {
            self.comm
                .all_reduce_sum_compressed(buf, width, self.comm_dtype)
        })
    }

    /// [`CountedComm::start_all_reduce`] of an activation sum, compressed as
    /// [`CountedComm::all_reduce_activation`].
    pub fn start_all_reduce_activation(
        &self,
        t: &Tensor,
        site: Site,
        kind: CommKind,
    ) -> Result<PendingSum> {
        if self.comm_dtype == CommDtype::F32 || self.comm.size() == 1 {
            return self.start_all_reduce(t, site, kind);
        }
        let bytes = self.wire_bytes(t);
        self.pending_sum(bytes, site, kind, || {
            self.comm
                .start_all_reduce_compressed(t, self.comm_dtype, self.hold(bytes))
        })
    }

    /// The emulated link's time for a collective of `bytes` (0 without emulation).
    fn modelled_seconds(&self, bytes: u64) -> f64 {
        self.link
            .map_or(0.0, |l| l.allreduce_seconds(bytes, self.comm.size()))
    }

    /// How long a started collective of `bytes` holds the backend's communication thread
    /// (the emulated link carries one collective at a time, as a real one does).
    fn hold(&self, bytes: u64) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.modelled_seconds(bytes))
    }

    /// Bytes of `t`'s compressed all-reduce: its rows in the group's `comm_dtype`.
    fn wire_bytes(&self, t: &Tensor) -> u64 {
        let width = t.dims().last().copied().unwrap_or(1);
        let rows = t.elem_count() / width.max(1);
        self.comm_dtype.encoded_len(rows, width) as u64
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

/// What is known of a collective when it starts.
struct Started {
    bytes: u64,
    site: Site,
    kind: CommKind,
    t0: Instant,
    /// When the start returned to the rank (the sum may be done by then).
    returned: Instant,
    /// The rank's time blocked in collectives when it did.
    blocked_before: std::time::Duration,
}

/// A started all-reduce of [`CountedComm::start_all_reduce`].
pub struct PendingSum {
    pending: Pending,
    started: Started,
    group: CountedComm,
}

impl PendingSum {
    /// The sum, once the collective and the emulated link's time are over; recorded with
    /// the time before this call as hidden.
    pub fn wait(self) -> Result<Tensor> {
        let waited = Instant::now();
        let sum = inside_collective(|| self.pending.wait())?;
        if self.group.size() > 1 {
            self.group.finish(self.started, waited);
        }
        Ok(sum)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::{CommKind, Site};

    /// A 1 Mbit/s emulated link and a 5,000-byte tensor: a ring over 2 ranks sends
    /// 40,000 bits, so each all-reduce is modelled at about 40 ms.
    fn slow_link_and_tensor() -> (LinkModel, Tensor) {
        let link = LinkModel::from_config(1e-3, 0.0).unwrap();
        let t = Tensor::ones(1_250, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
        (link, t)
    }

    /// On an emulated link whose all-reduce takes 40 ms, a started all-reduce waited for
    /// after 60 ms of the rank's own work costs nothing more and is recorded as hidden; a
    /// blocking one is all exposed.
    #[test]
    fn a_started_all_reduce_runs_while_the_rank_works_and_is_recorded_as_hidden() {
        let (link, t) = slow_link_and_tensor();
        let modelled = link.allreduce_seconds(5_000, 2);
        assert!((0.015..0.045).contains(&modelled), "{modelled}");
        let got = on_thread_ranks(2, |c| {
            let c = c.with_link(Some(link));
            let t0 = Instant::now();
            let pending = c
                .start_all_reduce(&t, Site::Layer(0), CommKind::TpForward)
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(60));
            let waited = Instant::now();
            let sum = pending.wait().unwrap();
            let exposed = waited.elapsed().as_secs_f64();
            c.all_reduce(&t, Site::Layer(1), CommKind::TpForward)
                .unwrap();
            let snap = c.tally().snapshot();
            (sum.to_vec1::<f32>().unwrap()[0], t0, exposed, snap)
        });
        for (sum, _, exposed, snap) in got {
            assert_eq!(sum, 2.0);
            assert!(
                exposed < 0.02,
                "waited {exposed} s for a sum that was due after 40 ms"
            );
            let started = snap.at(Site::Layer(0), CommKind::TpForward);
            assert!(started.hidden_seconds >= 0.059, "{started:?}");
            assert!(started.seconds >= started.hidden_seconds);
            let blocking = snap.at(Site::Layer(1), CommKind::TpForward);
            assert_eq!(blocking.hidden_seconds, 0.0);
            assert!(blocking.seconds >= modelled, "{blocking:?}");
        }
    }

    /// The emulated link carries one started all-reduce after another (a real link does
    /// not carry two at full rate), and a window's time blocked in another collective's
    /// wait is not hidden: two 40 ms all-reduces started together and waited for after
    /// 10 ms of work take 80 ms, and each hid 10 ms.
    #[test]
    fn started_all_reduces_share_the_emulated_link_and_hide_only_the_rank_s_work() {
        let (link, t) = slow_link_and_tensor();
        let modelled = link.allreduce_seconds(5_000, 2);
        let got = on_thread_ranks(2, |c| {
            let c = c.with_link(Some(link));
            let t0 = Instant::now();
            let a = c
                .start_all_reduce(&t, Site::Layer(0), CommKind::TpForward)
                .unwrap();
            let b = c
                .start_all_reduce(&t, Site::Layer(1), CommKind::TpForward)
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(10));
            a.wait().unwrap();
            b.wait().unwrap();
            (t0.elapsed().as_secs_f64(), c.tally().snapshot())
        });
        for (total, snap) in got {
            assert!(
                total >= 2.0 * modelled,
                "{total} s for two {modelled} s all-reduces"
            );
            for layer in [0, 1] {
                let h = snap
                    .at(Site::Layer(layer), CommKind::TpForward)
                    .hidden_seconds;
                assert!((0.009..0.02).contains(&h), "layer {layer} hid {h} s");
            }
        }
    }
}
