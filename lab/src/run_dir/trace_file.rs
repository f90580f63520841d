//! `RUN/trace.json`: every rank's timeline of the traced steps in Chrome's trace event
//! format (opens in Perfetto and chrome://tracing): a process per rank, its thread 0 the
//! compute track, threads 1.. its collectives (a lane each for collectives in flight at
//! once, as a ladder's are). Written and read back (`tp-plot --timeline`) through these
//! types, with its `format_version` as every run-directory record.

use crate::config::RunConfig;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use tp_harness::util::trace::{Span, Track};
use tp_harness::util::write_atomic;

pub const TRACE_FILE: &str = "trace.json";

/// One event of the file: a complete span (`ph: X`) or a name (`ph: M`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceEvent {
    pub name: String,
    #[serde(default)]
    pub cat: String,
    pub ph: String,
    /// Microseconds from the first traced event.
    #[serde(default)]
    pub ts: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dur: Option<f64>,
    pub pid: usize,
    #[serde(default)]
    pub tid: usize,
    #[serde(default)]
    pub args: Map<String, Value>,
}

/// What the trace is of (Chrome's `otherData`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceInfo {
    pub pattern: String,
    pub layout: String,
    pub tp: usize,
    pub dp: usize,
    pub trace_start: usize,
    pub trace_steps: usize,
    /// The first step the file holds: `trace_start`, or later where the run was resumed
    /// inside the traced steps (the killed invocation's spans went with it). Absent in
    /// older files: `trace_start`.
    #[serde(default)]
    pub held_from: Option<usize>,
    /// The emulated link, if the run had one (`link_gbps`, `link_latency_us`).
    pub link: Option<String>,
    /// The wall clock (Unix microseconds) of `ts` 0.
    pub epoch_us: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceFile {
    #[serde(rename = "traceEvents")]
    pub events: Vec<TraceEvent>,
    #[serde(rename = "displayTimeUnit")]
    pub display_time_unit: String,
    #[serde(rename = "otherData")]
    pub info: TraceInfo,
}

/// The lanes of a rank's collectives: each span on the first lane free at its start.
fn lanes(spans: &[&Span]) -> Vec<usize> {
    let mut ends: Vec<f64> = Vec::new();
    spans
        .iter()
        .map(|s| {
            let lane = ends
                .iter()
                .position(|e| *e <= s.start_us)
                .unwrap_or(ends.len());
            if lane == ends.len() {
                ends.push(0.0);
            }
            ends[lane] = s.start_us + s.dur_us;
            lane
        })
        .collect()
}

fn name_event(name: &str, pid: usize, tid: usize, value: String) -> TraceEvent {
    let mut args = Map::new();
    args.insert("name".into(), value.into());
    TraceEvent {
        name: name.into(),
        cat: String::new(),
        ph: "M".into(),
        ts: 0.0,
        dur: None,
        pid,
        tid,
        args,
    }
}

/// The parts of `from..to` outside every interval of `cuts` (sorted by start or not).
pub fn outside(from: f64, to: f64, cuts: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut cuts: Vec<(f64, f64)> = cuts
        .iter()
        .copied()
        .filter(|&(a, b)| b > from && a < to)
        .collect();
    cuts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out = Vec::new();
    let mut at = from;
    for (a, b) in cuts {
        if a > at {
            out.push((at, a.min(to)));
        }
        at = at.max(b);
    }
    if to > at {
        out.push((at, to));
    }
    out
}

impl TraceFile {
    /// The file of `ranks` (each rank with its spans and host) of a run of `cfg` whose
    /// traced spans begin at step `held_from`.
    pub fn of(
        cfg: &RunConfig,
        ranks: &[(usize, String, Vec<Span>)],
        held_from: usize,
    ) -> Result<Self> {
        let layout = cfg.layout();
        let epoch = ranks
            .iter()
            .flat_map(|(_, _, s)| s.iter().map(|s| s.start_us))
            .fold(f64::INFINITY, f64::min);
        let epoch = if epoch.is_finite() { epoch } else { 0.0 };
        let mut events = Vec::new();
        for (rank, host, spans) in ranks {
            rank_events(&mut events, layout, epoch, *rank, host, spans);
        }
        let e = &cfg.eval;
        Ok(Self {
            events,
            display_time_unit: "ms".into(),
            info: TraceInfo {
                pattern: cfg.model.pattern.to_string(),
                layout: layout.expanded(),
                tp: cfg.parallel.tp,
                dp: cfg.parallel.dp,
                trace_start: e.trace_start,
                trace_steps: e.trace_steps,
                held_from: Some(held_from),
                link: cfg
                    .link()
                    .map(|l| format!("{} Gbit/s, {} us a message", l.gbit_per_s, l.latency_us)),
                epoch_us: epoch,
            },
        })
    }

    pub fn write(&self, run: &Path) -> Result<PathBuf> {
        let path = run.join(TRACE_FILE);
        // Compact, with its format like every record (Perfetto ignores the extra key).
        write_atomic(&path, super::versioned::to_json_line(self)?.as_bytes())?;
        Ok(path)
    }

    /// A run's `trace.json`, or one line saying how to make one, or what is wrong with
    /// the one there: its events' times must be finite, a duration not negative, and
    /// every time within a day of the first (a figure is never drawn from impossible
    /// values).
    pub fn read(run: &Path) -> Result<Self> {
        use tp_harness::error::user;
        let path = run.join(TRACE_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(user(format!(
                    "{} has no {TRACE_FILE}: train it with --trace (trace_start, trace_steps choose the steps)",
                    run.display()
                )))
            }
            Err(e) => return Err(user(format!("{} cannot be read: {e}", path.display()))),
        };
        let text = String::from_utf8(bytes).map_err(|_| {
            user(format!(
                "{} is not a trace (not JSON text): it is damaged; train the run again with --trace",
                path.display()
            ))
        })?;
        let file: Self = super::versioned::from_json(&text, &path)?;
        file.check(&path)?;
        Ok(file)
    }

    /// The first step the file holds.
    pub fn first_step(&self) -> usize {
        self.info.held_from.unwrap_or(self.info.trace_start)
    }

    /// Refuses values no traced run makes.
    fn check(&self, path: &Path) -> Result<()> {
        const DAY_US: f64 = 86_400e6;
        for (i, e) in self.events.iter().enumerate() {
            let dur = e.dur.unwrap_or(0.0);
            let why = if !e.ts.is_finite() || !dur.is_finite() {
                Some("a time that is not a number")
            } else if dur < 0.0 {
                Some("a negative duration")
            } else if e.ts < 0.0 || e.ts + dur > DAY_US {
                Some("a time outside the day after the trace's start")
            } else {
                None
            };
            if let Some(why) = why {
                tp_harness::user_bail!(
                    "{}: event {i} (`{}`) has {why} (ts {}, dur {dur}): the file is damaged; train the run again with --trace",
                    path.display(),
                    e.name.chars().take(40).collect::<String>(),
                    e.ts
                );
            }
        }
        Ok(())
    }
}

/// One rank's events: its names, its spans in time order, each collective on a lane of
/// its own while others are in flight, hidden windows only where the rank computed.
fn rank_events(
    events: &mut Vec<TraceEvent>,
    layout: &tp_harness::blocks::BlockLayout,
    epoch: f64,
    rank: usize,
    host: &str,
    spans: &[Span],
) {
    events.push(name_event(
        "process_name",
        rank,
        0,
        format!("rank {rank} ({host})"),
    ));
    events.push(name_event("thread_name", rank, 0, "compute".into()));
    let mut ordered: Vec<&Span> = spans.iter().collect();
    ordered.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
    let comm: Vec<&Span> = ordered
        .iter()
        .copied()
        .filter(|s| s.track == Track::Comm && s.cat == "collective")
        .collect();
    let lane_of = lanes(&comm);
    for lane in 0..lane_of.iter().copied().max().map_or(0, |m| m + 1) {
        let name = if lane == 0 {
            "communication".to_string()
        } else {
            format!("communication {}", lane + 1)
        };
        events.push(name_event("thread_name", rank, 1 + lane, name));
    }
    // The rank's waits: a hidden window is drawn only where the rank computed,
    // not where it waited on another collective (as the tally counts it).
    let waits: Vec<(f64, f64)> = ordered
        .iter()
        .filter(|s| s.track == Track::Compute && s.cat == "wait")
        .map(|s| (s.start_us, s.start_us + s.dur_us))
        .collect();
    for s in ordered {
        let pieces = if s.cat == "hidden" {
            outside(s.start_us, s.start_us + s.dur_us, &waits)
        } else {
            vec![(s.start_us, s.start_us + s.dur_us)]
        };
        let tid = match s.track {
            Track::Compute => 0,
            Track::Comm => {
                // A collective on its lane; a hidden window on the lane of the
                // collective it lies in.
                let owner = comm.iter().position(|c| {
                    if s.cat == "collective" {
                        std::ptr::eq(*c, s)
                    } else {
                        s.name.ends_with(&c.name)
                            && c.start_us <= s.start_us + 1e-3
                            && s.start_us + s.dur_us <= c.start_us + c.dur_us + 1e-3
                    }
                });
                1 + owner.map_or(0, |i| lane_of[i])
            }
        };
        let mut args = s.args.clone();
        if let Some(i) = args
            .get("site")
            .and_then(|v| v.as_str())
            .and_then(|l| l.strip_prefix("layer."))
            .and_then(|i| i.parse::<usize>().ok())
        {
            if let Some(k) = layout.kinds.get(i) {
                args.insert("block".into(), k.letter().to_string().into());
            }
        }
        for (from, to) in pieces {
            events.push(TraceEvent {
                name: s.name.clone(),
                cat: s.cat.clone(),
                ph: "X".into(),
                ts: from - epoch,
                dur: Some(to - from),
                pid: rank,
                tid,
                args: args.clone(),
            });
        }
    }
}
