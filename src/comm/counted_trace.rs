//! A counted collective on the rank's timeline (`--trace`): its flight on the
//! communication track, the window the rank computed through it, and the rank's waits on
//! its compute track — the same windows the tally counts hidden and exposed.

use super::counted::{CountedComm, Issued};
use crate::comm::tally::Phase;
use crate::comm::{CommKind, Site};
use std::time::{Duration, Instant};

impl CountedComm {
    /// A started collective's start that blocked the rank (its lane busy with earlier
    /// ones): a wait on the rank's compute track, as the tally counts it blocked.
    pub(super) fn trace_blocked_start(
        &self,
        kind: CommKind,
        site: Site,
        t0: Instant,
        returned: Instant,
    ) {
        use crate::util::trace::{at_us, Span, Track};
        let trace = self.tally.trace();
        if !trace.is_on() || returned <= t0 {
            return;
        }
        trace.record(Span {
            name: format!("start {} {}", kind.label(), site.label()),
            cat: "wait".into(),
            track: Track::Compute,
            start_us: at_us(t0),
            dur_us: at_us(returned) - at_us(t0),
            args: Default::default(),
        });
    }

    /// The collective on the rank's timeline: from its start to its result on the
    /// communication track, the window the rank computed through it (`hidden`), and the
    /// rank's wait for it on its compute track.
    pub(super) fn trace(
        &self,
        s: &Issued,
        window: (Instant, Instant),
        waited: Instant,
        hidden: Duration,
        exposed: Duration,
    ) {
        use crate::util::trace::{at_us, wall_us, Span, Track};
        let trace = self.tally.trace();
        let name = format!("{} {}", s.kind.label(), s.site.label());
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
        // On an emulated link the collective ends when the link is done with it, however
        // much later the rank takes the result (a bucket's sum is taken before the norm).
        let (start, end) = (at_us(s.t0), wall_us());
        let done = s.due.map_or(end, |(due, _)| at_us(due).min(end));
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
            done,
            args,
        ));
        if !hidden.is_zero() {
            let (from, to) = (at_us(window.0), at_us(window.1));
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
}
