//! The one path every collective takes. A rank talks to its groups only through
//! [`CountedComm`]: it starts a collective ([`CountedComm::start`]; the blocking form is
//! the start waited for at once), runs it on the member's [`Lane`] (in the member's one
//! order, on its communication thread when started) or the backend's device queue, sends
//! activation sums compressed as the group's `comm_dtype` says, holds it to the emulated
//! link's time, and records it in the rank's tally. A group of one communicates nothing
//! and records nothing: that is decided here, once ([`CountedComm::communicates`]; a
//! caller may skip what it would only prepare for a call, a bucket's flattening or an
//! autograd op, by asking it, and a call made anyway returns its input).
//!
//! Two calls: [`CountedComm::start`] and [`CountedComm::all_reduce`] (its start waited
//! for at once). A host number travels as a small host tensor (`train::host_sums`).

use super::collectives::{Comm, Started};
use super::compressed;
use super::link::{EmulatedLink, LinkModel};
use super::quantise::CommDtype;
use super::tally::{Call, CommKind, Phase, Site, Tally};
use super::worker::Lane;
use crate::util::trace::CollectiveSpans;
use crate::util::turns::inside_collective;
use anyhow::Result;
use candle_core::Tensor;
use std::sync::{Arc, Mutex};
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
    pub(super) tally: Arc<Tally>,
    link: Option<EmulatedLink>,
    /// What activation and activation-gradient sums travel in (blocks.md's `comm_dtype`).
    comm_dtype: CommDtype,
    /// Where the window the group's last finished collective hid ends.
    hidden_to: Arc<Mutex<Instant>>,
}

impl CountedComm {
    pub fn new(comm: Arc<dyn Comm>, tally: Arc<Tally>) -> Self {
        Self {
            lane: Arc::new(Lane::new(comm)),
            tally,
            link: None,
            comm_dtype: CommDtype::F32,
            hidden_to: Arc::new(Mutex::new(Instant::now())),
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
        self.link = link.map(EmulatedLink::new);
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
        &self.tally
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
        self.counted(bytes, site, kind, background, || {
            if background && matches!(op, Reduce::Sum | Reduce::Activation) && !compressed {
                if let Some(on_device) = self.lane.member().start_on_device(&t) {
                    return on_device;
                }
            }
            Ok(self.lane.run(background, move |m| match op {
                Reduce::Sum => m.all_reduce(&t),
                Reduce::Activation if compressed => compressed::all_reduce_tensor(m, &t, dtype),
                Reduce::Activation => m.all_reduce(&t),
                Reduce::Mean => {
                    let n = Tensor::new(n as f32, t.device())?.to_dtype(t.dtype())?;
                    Ok(m.all_reduce(&t)?.broadcast_div(&n)?)
                }
                Reduce::Max => max_from_sum(m, &t),
            }))
        })
    }

    /// Runs `start`, a collective of `bytes`, and returns it started: waiting for it holds
    /// it to the emulated link's time and records it, the part between the start's return
    /// and the wait as hidden (a blocking one, waited for at once, hides nothing).
    fn counted<R: 'static>(
        &self,
        bytes: u64,
        site: Site,
        kind: CommKind,
        background: bool,
        start: impl FnOnce() -> Result<Started<R>>,
    ) -> Result<Started<R>> {
        let t0 = Instant::now();
        let due = self.link.as_ref().map(|l| l.book(t0, bytes, self.size()));
        let started = inside_collective(start)?;
        let returned = Instant::now();
        if background {
            self.tally.add_blocked(t0, returned);
            let trace = self.tally.trace();
            if trace.is_on() {
                let name = format!("start {} {}", kind.label(), site.label());
                trace.record_wait(name, t0, returned);
            }
        }
        let call = Issued {
            bytes,
            site,
            kind,
            t0,
            returned: if background { returned } else { t0 },
            complete: started.is_complete(),
            due,
        };
        let group = self.clone();
        Ok(Started::later(move || {
            let waited = if background { Instant::now() } else { t0 };
            let result = inside_collective(|| started.wait())?;
            group.finish(call, waited);
            Ok(result)
        }))
    }

    /// Holds a collective started at `s.t0` and waited for at `waited` until the emulated
    /// link is done with it, then records it with the part between the start's return and
    /// `waited` as hidden (a backend that completes the sum inside the start hides
    /// nothing).
    fn finish(&self, s: Issued, waited: Instant) {
        if let Some((due, _)) = s.due {
            if let Some(rest) = due.checked_duration_since(Instant::now()) {
                // Sleep, not spin: the other ranks may share these cores.
                inside_collective(|| std::thread::sleep(rest));
            }
        }
        // The window the rank computed through it: from the start's return (or the end
        // of the window an earlier collective of the group hid, as the link carries one
        // after another: buckets in flight together hide the same compute once) to the
        // wait (or the emulated link's end of it), less the time blocked in other
        // collectives inside that window (a ladder waits for the previous sum while this
        // one is in flight; waits after the window are not taken off it).
        let (from, to) = {
            let mut hidden_to = self.hidden_to.lock().unwrap_or_else(|p| p.into_inner());
            let from = s.returned.max(*hidden_to);
            let in_flight_to = match s.due {
                Some((due, _)) => due.min(waited),
                None if s.complete => s.returned,
                None => waited,
            };
            let to = in_flight_to.max(from);
            *hidden_to = (*hidden_to).max(to);
            (from, to)
        };
        let blocked = self.tally.blocked_within(from, to);
        let hidden = (to - from).saturating_sub(blocked);
        let now = Instant::now();
        // Blocked in the wait, and in the start (all of a sum done inside it).
        let exposed = (now - waited) + (s.returned - s.t0);
        self.tally.add_blocked(waited, now);
        if self.tally.trace().is_on() {
            let spans = self.on_timeline(&s, (from, to), waited, hidden, exposed, now);
            self.tally.trace().record_collective(spans);
        }
        self.tally.record(
            s.site,
            s.kind,
            Call {
                bytes: s.bytes,
                // What the rank spent on it: computing through it, then blocked in it
                // (a started call's time queued behind others is theirs).
                seconds: (hidden + exposed).as_secs_f64(),
                modelled_seconds: s.due.map_or(0.0, |(_, m)| m),
                hidden_seconds: hidden.as_secs_f64(),
                group_size: self.size(),
            },
        );
    }

    /// The collective as the rank's timeline draws it (`--trace`): its flight until the
    /// emulated link is done with it (a bucket's sum may be taken later), the window the
    /// rank computed through it, and its wait.
    fn on_timeline(
        &self,
        s: &Issued,
        window: (Instant, Instant),
        waited: Instant,
        hidden: std::time::Duration,
        exposed: std::time::Duration,
        now: Instant,
    ) -> CollectiveSpans {
        let mut args = serde_json::Map::new();
        args.insert("site".into(), s.site.label().into());
        args.insert("kind".into(), s.kind.label().into());
        args.insert("bytes".into(), s.bytes.into());
        args.insert("group".into(), self.size().into());
        let phase = match self.tally.phase() {
            Phase::Train => "train",
            Phase::Eval => "eval",
        };
        args.insert("phase".into(), phase.into());
        args.insert("hidden_us".into(), (hidden.as_secs_f64() * 1e6).into());
        args.insert("exposed_us".into(), (exposed.as_secs_f64() * 1e6).into());
        CollectiveSpans {
            name: format!("{} {}", s.kind.label(), s.site.label()),
            args,
            flight: (s.t0, s.due.map_or(now, |(due, _)| due.min(now))),
            hidden: (!hidden.is_zero()).then_some(window),
            wait: (waited, now),
        }
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

/// What is known of a collective when it starts.
struct Issued {
    bytes: u64,
    site: Site,
    kind: CommKind,
    t0: Instant,
    /// When the start returned to the rank (the sum may be done by then).
    returned: Instant,
    /// Whether the backend did the whole sum inside the start (MPI without a
    /// communication thread): then only the emulated link's time can be in flight.
    complete: bool,
    /// When the emulated link is done with it, and its modelled seconds.
    due: Option<(Instant, f64)>,
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
    /// after 60 ms of the rank's own work costs nothing more and is recorded as hidden for
    /// its 40 ms on the link (the rank's last 20 ms hid nothing); a blocking one is all
    /// exposed.
    #[test]
    fn a_started_all_reduce_runs_while_the_rank_works_and_is_recorded_as_hidden() {
        let (link, t) = slow_link_and_tensor();
        let modelled = link.allreduce_seconds(5_000, 2);
        assert!((0.015..0.045).contains(&modelled), "{modelled}");
        let got = on_thread_ranks(2, |c| {
            let c = c.with_link(Some(link));
            let t0 = Instant::now();
            let pending = c
                .start(&t, Reduce::Sum, Site::Layer(0), CommKind::TpForward)
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(60));
            let waited = Instant::now();
            let sum = pending.wait().unwrap();
            let exposed = waited.elapsed().as_secs_f64();
            c.all_reduce(&t, Reduce::Sum, Site::Layer(1), CommKind::TpForward)
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
            let h = started.hidden_seconds;
            assert!(
                (modelled - 0.005..=modelled + 0.001).contains(&h),
                "{started:?}"
            );
            assert!(started.seconds >= started.hidden_seconds);
            let blocking = snap.at(Site::Layer(1), CommKind::TpForward);
            assert_eq!(blocking.hidden_seconds, 0.0);
            assert!(blocking.seconds >= modelled, "{blocking:?}");
        }
    }

    /// The emulated link carries one started all-reduce after another (a real link does
    /// not carry two at full rate), and the rank's work hides each moment of it once: two
    /// 40 ms all-reduces started together and waited for after 10 ms of work take 80 ms;
    /// the first hid 10 ms, the second nothing (the rank then waited for the first).
    #[test]
    fn started_all_reduces_share_the_emulated_link_and_hide_only_the_rank_s_work() {
        let (link, t) = slow_link_and_tensor();
        let modelled = link.allreduce_seconds(5_000, 2);
        let got = on_thread_ranks(2, |c| {
            let c = c.with_link(Some(link));
            let t0 = Instant::now();
            let a = c
                .start(&t, Reduce::Sum, Site::Layer(0), CommKind::TpForward)
                .unwrap();
            let b = c
                .start(&t, Reduce::Sum, Site::Layer(1), CommKind::TpForward)
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
            let hid = |layer| {
                snap.at(Site::Layer(layer), CommKind::TpForward)
                    .hidden_seconds
            };
            assert!(
                (0.009..0.02).contains(&hid(0)),
                "the first hid {} s",
                hid(0)
            );
            assert!(hid(1) < 0.002, "the second hid {} s", hid(1));
        }
    }

    /// A member that sums in 30 ms and may not be called from a communication thread (MPI
    /// without thread support): its started sums are done inside the start.
    struct SlowInline;
    impl Comm for SlowInline {
        fn rank(&self) -> usize {
            0
        }
        fn size(&self) -> usize {
            2
        }
        fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<()> {
            std::thread::sleep(std::time::Duration::from_millis(30));
            buf.iter_mut().for_each(|x| *x *= 2.0);
            Ok(())
        }
        fn threads_allowed(&self) -> bool {
            false
        }
    }

    /// A started sum the backend does inside the start hides nothing, however long the
    /// rank works before waiting, and its time in the start is what the rank spent on it:
    /// the 30 ms sum is recorded at 30 ms or more, none of it hidden (it was recorded as
    /// 0 s spent, 40 ms hidden, before).
    #[test]
    fn a_sum_done_inside_its_start_is_recorded_exposed_not_hidden() {
        let c = CountedComm::new(Arc::new(SlowInline), Arc::new(Tally::new()));
        let t = Tensor::ones(8, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
        let pending = c
            .start(&t, Reduce::Sum, Site::Layer(0), CommKind::TpForward)
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(40));
        assert_eq!(pending.wait().unwrap().to_vec1::<f32>().unwrap()[0], 2.0);
        let call = c.tally().snapshot().at(Site::Layer(0), CommKind::TpForward);
        assert_eq!(call.hidden_seconds, 0.0, "{call:?}");
        assert!((0.03..0.04).contains(&call.seconds), "{call:?}");
    }
}
