//! What a rank measures of its group's collectives, apart from carrying them: the
//! emulated link's time (a collective is held until the link would be done with it), the
//! split of the rank's time on it into hidden (computing through it) and exposed (blocked
//! in it), the tally's record and the timeline's spans. The facade (`counted.rs`) reports
//! each collective's moments here; the arithmetic is a function of those moments, so its
//! tests feed it times instead of sleeping.

use super::link::{EmulatedLink, LinkModel};
use super::tally::{Call, CommKind, Phase, Site, Tally};
use crate::util::trace::CollectiveSpans;
use crate::util::turns::inside_collective;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What is known of a collective when its start returns.
#[derive(Debug, Clone, Copy)]
pub(super) struct Issued {
    pub bytes: u64,
    pub site: Site,
    pub kind: CommKind,
    pub t0: Instant,
    /// When the start returned to the rank (the sum may be done by then); `t0` for a
    /// blocking call, which hides nothing.
    pub returned: Instant,
    /// Whether the backend did the whole sum inside the start (MPI without a
    /// communication thread): then only the emulated link's time can be in flight.
    pub complete: bool,
    /// When the emulated link is done with it, and its modelled seconds.
    pub due: Option<(Instant, f64)>,
}

/// A collective's time as the rank spent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Spent {
    /// The window the rank computed through it (from, to).
    pub window: (Instant, Instant),
    pub hidden: Duration,
    /// Blocked in the wait, and in the start.
    pub exposed: Duration,
}

/// A group's measurement: its tally, its emulated link, and where the window the
/// group's last finished collective hid ends.
#[derive(Clone)]
pub(super) struct Observer {
    pub tally: Arc<Tally>,
    link: Option<EmulatedLink>,
    hidden_to: Arc<Mutex<Instant>>,
}

impl Observer {
    pub fn new(tally: Arc<Tally>) -> Self {
        Self {
            tally,
            link: None,
            hidden_to: Arc::new(Mutex::new(Instant::now())),
        }
    }

    pub fn with_link(mut self, link: Option<LinkModel>) -> Self {
        self.link = link.map(EmulatedLink::new);
        self
    }

    /// A collective of `bytes` over `n` ranks begins at `t0`: when the emulated link
    /// will be done with it (it carries one collective after another), if there is one.
    pub fn book(&self, t0: Instant, bytes: u64, n: usize) -> Option<(Instant, f64)> {
        self.link.as_ref().map(|l| l.book(t0, bytes, n))
    }

    /// A started collective's start returned: the rank was blocked in it from `s.t0`.
    pub fn started(&self, s: &Issued) {
        self.tally.add_blocked(s.t0, s.returned);
        let trace = self.tally.trace();
        if trace.is_on() {
            let name = format!("start {} {}", s.kind.label(), s.site.label());
            trace.record_wait(name, s.t0, s.returned);
        }
    }

    /// The collective `s`, waited for at `waited`: held until the emulated link is done
    /// with it (a sleep, not a spin: the other ranks may share these cores), then
    /// recorded.
    pub fn finished(&self, s: Issued, waited: Instant, group_size: usize) {
        if let Some((due, _)) = s.due {
            if let Some(rest) = due.checked_duration_since(Instant::now()) {
                inside_collective(|| std::thread::sleep(rest));
            }
        }
        let now = Instant::now();
        let spent = self.account(&s, waited, now);
        self.tally.add_blocked(waited, now);
        if self.tally.trace().is_on() {
            let spans = self.on_timeline(&s, &spent, waited, now, group_size);
            self.tally.trace().record_collective(spans);
        }
        self.tally.record(
            s.site,
            s.kind,
            Call {
                bytes: s.bytes,
                // What the rank spent on it: computing through it, then blocked in it
                // (a started call's time queued behind others is theirs).
                seconds: (spent.hidden + spent.exposed).as_secs_f64(),
                modelled_seconds: s.due.map_or(0.0, |(_, m)| m),
                hidden_seconds: spent.hidden.as_secs_f64(),
                group_size,
            },
        );
    }

    /// The rank's time on `s`, waited for at `waited` and done at `now`. The window it
    /// computed through: from the start's return (or the end of the window an earlier
    /// collective of the group hid, as the link carries one after another: buckets in
    /// flight together hide the same compute once) to the wait (or the emulated link's
    /// end of it), less the time blocked in other collectives inside that window (a
    /// ladder waits for the previous sum while this one is in flight; waits after the
    /// window are not taken off it). A backend that completes the sum inside the start
    /// hides nothing.
    pub fn account(&self, s: &Issued, waited: Instant, now: Instant) -> Spent {
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
        Spent {
            window: (from, to),
            hidden: (to - from).saturating_sub(blocked),
            exposed: (now - waited) + (s.returned - s.t0),
        }
    }

    /// The collective as the rank's timeline draws it (`--trace`): its flight until the
    /// emulated link is done with it (a bucket's sum may be taken later), the window the
    /// rank computed through it, and its wait.
    fn on_timeline(
        &self,
        s: &Issued,
        spent: &Spent,
        waited: Instant,
        now: Instant,
        group_size: usize,
    ) -> CollectiveSpans {
        let mut args = serde_json::Map::new();
        args.insert("site".into(), s.site.label().into());
        args.insert("kind".into(), s.kind.label().into());
        args.insert("bytes".into(), s.bytes.into());
        args.insert("group".into(), group_size.into());
        let phase = match self.tally.phase() {
            Phase::Train => "train",
            Phase::Eval => "eval",
        };
        args.insert("phase".into(), phase.into());
        args.insert(
            "hidden_us".into(),
            (spent.hidden.as_secs_f64() * 1e6).into(),
        );
        args.insert(
            "exposed_us".into(),
            (spent.exposed.as_secs_f64() * 1e6).into(),
        );
        CollectiveSpans {
            name: format!("{} {}", s.kind.label(), s.site.label()),
            args,
            flight: (s.t0, s.due.map_or(now, |(due, _)| due.min(now))),
            hidden: (!spent.hidden.is_zero()).then_some(spent.window),
            wait: (waited, now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A collective started at `t0` whose start returned at once, due on the link at
    /// `t0 + due_ms` (none: no emulated link).
    fn issued(t0: Instant, due_ms: Option<u32>) -> Issued {
        Issued {
            bytes: 5_000,
            site: Site::Layer(0),
            kind: CommKind::TpForward,
            t0,
            returned: t0,
            complete: false,
            due: due_ms.map(|d| (t0 + d * MS, d as f64 / 1e3)),
        }
    }

    /// On a link that takes 40 ms, a started sum waited for after 60 ms of the rank's
    /// own work hid its 40 ms and cost nothing exposed; a blocking one (waited for at
    /// once) hid nothing and was exposed for its 40 ms.
    #[test]
    fn a_started_sum_hides_its_time_on_the_link_and_a_blocking_one_hides_nothing() {
        let o = Observer::new(Arc::new(Tally::new()));
        // After the observer's start: no window it hid reaches past t0.
        let t0 = Instant::now();
        let started = o.account(&issued(t0, Some(40)), t0 + 60 * MS, t0 + 60 * MS);
        assert_eq!((started.hidden, started.exposed), (40 * MS, Duration::ZERO));
        let t1 = t0 + 100 * MS;
        let blocking = o.account(&issued(t1, Some(40)), t1, t1 + 40 * MS);
        assert_eq!(
            (blocking.hidden, blocking.exposed),
            (Duration::ZERO, 40 * MS)
        );
    }

    /// The link carries one started sum after another (due at 40 and 80 ms), and the
    /// rank's work hides each moment once: waited for after 10 ms of work, the first hid
    /// 10 ms; the second, waited for once the first was done (the rank blocked 10-40 ms
    /// in the first's wait), hid nothing.
    #[test]
    fn sums_in_flight_together_hide_the_rank_s_work_once() {
        let o = Observer::new(Arc::new(Tally::new()));
        // After the observer's start: no window it hid reaches past t0.
        let t0 = Instant::now();
        let first = o.account(&issued(t0, Some(40)), t0 + 10 * MS, t0 + 40 * MS);
        o.tally.add_blocked(t0 + 10 * MS, t0 + 40 * MS);
        let second = o.account(&issued(t0, Some(80)), t0 + 40 * MS, t0 + 80 * MS);
        assert_eq!(first.hidden, 10 * MS);
        assert_eq!(second.hidden, Duration::ZERO);
        assert_eq!(second.exposed, 40 * MS);
    }

    /// A sum the backend did inside its start (30 ms) hides nothing however long the rank
    /// works before waiting, and its 30 ms in the start is what the rank spent on it.
    #[test]
    fn a_sum_done_inside_its_start_is_exposed_not_hidden() {
        let o = Observer::new(Arc::new(Tally::new()));
        // After the observer's start: no window it hid reaches past t0.
        let t0 = Instant::now();
        let s = Issued {
            returned: t0 + 30 * MS,
            complete: true,
            ..issued(t0, None)
        };
        let spent = o.account(&s, t0 + 70 * MS, t0 + 70 * MS);
        assert_eq!((spent.hidden, spent.exposed), (Duration::ZERO, 30 * MS));
    }

    /// Without an emulated link a started sum's window runs to the wait; with one, to the
    /// link's end of it: work past the link's time hides nothing more.
    #[test]
    fn the_window_ends_at_the_wait_or_at_the_links_end_of_it() {
        let o = Observer::new(Arc::new(Tally::new()));
        // After the observer's start: no window it hid reaches past t0.
        let t0 = Instant::now();
        let free = o.account(&issued(t0, None), t0 + 25 * MS, t0 + 25 * MS);
        assert_eq!(free.window, (t0, t0 + 25 * MS));
        let t1 = t0 + 50 * MS;
        let linked = o.account(&issued(t1, Some(5)), t1 + 25 * MS, t1 + 25 * MS);
        assert_eq!(linked.window, (t1, t1 + 5 * MS));
    }
}
