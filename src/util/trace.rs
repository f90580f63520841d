//! A rank's timeline of a few chosen steps (`trace: true`): what it computed and when it
//! waited, and each collective from its start to its result with the window in which it
//! ran while the rank computed. Off, it costs one atomic load where a span would begin.
//! A recorder of spans on two tracks, knowing nothing of what it records: it lives in the
//! rank's tally (`comm::Tally`), which every counted collective and every block of the
//! rank already reaches.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Which row of the rank a span belongs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Track {
    /// The rank's own thread: layers, optimizer, evaluation, and its waits.
    Compute,
    /// Its collectives, from start to result (a started one runs while it computes).
    Comm,
}

/// One span of the timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Span {
    pub name: String,
    /// What the span is: `layer`, `step`, `optimizer`, `wait`, `collective`, `hidden`...
    pub cat: String,
    pub track: Track,
    /// Wall-clock microseconds since the Unix epoch, so that the processes of an MPI job
    /// line up (within their clocks' agreement).
    pub start_us: f64,
    pub dur_us: f64,
    pub args: serde_json::Map<String, serde_json::Value>,
}

/// The process's one pairing of the monotonic clock with the wall clock: every time on a
/// timeline is an `Instant` placed by it, so that spans measured apart nest exactly
/// (reading the wall clock for each would let a preemption between two reads shift one).
fn epoch() -> (Instant, f64) {
    static EPOCH: std::sync::OnceLock<(Instant, f64)> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(|| {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64() * 1e6);
        (Instant::now(), wall)
    })
}

/// The wall-clock time of `t`, in microseconds since the Unix epoch.
pub fn at_us(t: Instant) -> f64 {
    let (i0, w0) = epoch();
    if t >= i0 {
        w0 + (t - i0).as_secs_f64() * 1e6
    } else {
        w0 - (i0 - t).as_secs_f64() * 1e6
    }
}

/// Now, as [`at_us`] places it.
pub fn wall_us() -> f64 {
    at_us(Instant::now())
}

#[derive(Default)]
pub struct Trace {
    on: AtomicBool,
    spans: Mutex<Vec<Span>>,
    /// Spans begun and not yet ended, by key (a layer's backward: begun when its output's
    /// gradient arrives, ended when its input's is complete).
    open: Mutex<Vec<(String, f64)>>,
}

impl Trace {
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    pub fn start(&self) {
        self.on.store(true, Ordering::Relaxed);
    }

    /// Stops recording and hands over what was recorded.
    pub fn stop(&self) -> Vec<Span> {
        self.on.store(false, Ordering::Relaxed);
        lock(&self.open).clear();
        std::mem::take(&mut *lock(&self.spans))
    }

    pub fn record(&self, span: Span) {
        if self.is_on() {
            lock(&self.spans).push(span);
        }
    }

    /// A span from now until the guard is dropped; `name` is only made while tracing.
    pub fn span(&self, cat: &str, name: impl FnOnce() -> String) -> SpanGuard<'_> {
        SpanGuard {
            trace: self,
            open: self.is_on().then(|| (name(), cat.to_string(), wall_us())),
        }
    }

    /// Begins the span `key` now (ended by [`Trace::end`]).
    pub fn begin(&self, key: &str) {
        if self.is_on() {
            lock(&self.open).push((key.to_string(), wall_us()));
        }
    }

    /// Ends the span `key` begun last, as `name` of `cat` on the compute track.
    pub fn end(&self, key: &str, cat: &str, name: String) {
        if !self.is_on() {
            return;
        }
        let begun = {
            let mut open = lock(&self.open);
            open.iter()
                .rposition(|(k, _)| k == key)
                .map(|i| open.remove(i).1)
        };
        if let Some(start_us) = begun {
            self.record(Span {
                name,
                cat: cat.into(),
                track: Track::Compute,
                start_us,
                dur_us: wall_us() - start_us,
                args: Default::default(),
            });
        }
    }
}

/// A collective as the timeline draws it: its flight on the communication track, the
/// window the rank computed through it, and the rank's wait on its compute track — the
/// windows the tally counts hidden and exposed.
pub struct CollectiveSpans {
    /// "<kind> <site>".
    pub name: String,
    pub args: serde_json::Map<String, serde_json::Value>,
    /// When it was started, and when the link was done with it (or now).
    pub flight: (Instant, Instant),
    /// The window the rank computed through it, if any.
    pub hidden: Option<(Instant, Instant)>,
    /// When the rank began to wait for it, and when it had it.
    pub wait: (Instant, Instant),
}

impl Trace {
    /// A wait of the rank's compute track: a collective's start that blocked it.
    pub fn record_wait(&self, name: String, from: Instant, to: Instant) {
        if self.is_on() && to > from {
            self.record(span(
                name,
                "wait",
                Track::Compute,
                (from, to),
                Default::default(),
            ));
        }
    }

    /// `c`'s spans (see [`CollectiveSpans`]).
    pub fn record_collective(&self, c: CollectiveSpans) {
        if !self.is_on() {
            return;
        }
        let name = c.name;
        let (hidden, wait) = (format!("hidden {name}"), format!("wait {name}"));
        self.record(span(name, "collective", Track::Comm, c.flight, c.args));
        if let Some(window) = c.hidden {
            self.record(span(
                hidden,
                "hidden",
                Track::Comm,
                window,
                Default::default(),
            ));
        }
        self.record(span(
            wait,
            "wait",
            Track::Compute,
            c.wait,
            Default::default(),
        ));
    }
}

/// A span from `at.0` to `at.1` (none if it ends first).
fn span(
    name: String,
    cat: &str,
    track: Track,
    at: (Instant, Instant),
    args: serde_json::Map<String, serde_json::Value>,
) -> Span {
    let (from, to) = (at_us(at.0), at_us(at.1));
    Span {
        name,
        cat: cat.into(),
        track,
        start_us: from,
        dur_us: (to - from).max(0.0),
        args,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Records its span on the compute track when dropped (if tracing was on when it began).
pub struct SpanGuard<'a> {
    trace: &'a Trace,
    open: Option<(String, String, f64)>,
}

impl Drop for SpanGuard<'_> {
    fn drop(&mut self) {
        if let Some((name, cat, start_us)) = self.open.take() {
            self.trace.record(Span {
                name,
                cat,
                track: Track::Compute,
                start_us,
                dur_us: wall_us() - start_us,
                args: Default::default(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_recorded_only_while_on_and_nest_as_their_guards() {
        let t = Trace::default();
        {
            let _off = t.span("step", || panic!("a name made while off"));
        }
        t.start();
        {
            let _outer = t.span("step", || "step 1".into());
            let _inner = t.span("layer", || "layer 0".into());
            t.begin("layer 0");
            t.end("layer 0", "layer", "layer 0 backward".into());
        }
        let spans = t.stop();
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["layer 0 backward", "layer 0", "step 1"]);
        let (outer, inner) = (&spans[2], &spans[1]);
        assert!(outer.start_us <= inner.start_us);
        assert!(inner.start_us + inner.dur_us <= outer.start_us + outer.dur_us + 1.0);
        t.record(spans[0].clone());
        assert!(t.stop().is_empty(), "recorded while off");
    }
}
