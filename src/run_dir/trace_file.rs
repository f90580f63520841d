//! `RUN/trace.json`: every rank's timeline of the traced steps in Chrome's trace event
//! format (opens in Perfetto and chrome://tracing): a process per rank, its thread 0 the
//! compute track, threads 1.. its collectives (a lane each for collectives in flight at
//! once, as a ladder's are). Written and read back (`tp-plot --timeline`) through these
//! types, with its `format_version` as every run-directory record.

use crate::config::RunConfig;
use crate::util::trace::{Span, Track};
use crate::util::write_atomic;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

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

impl TraceFile {
    /// The file of `ranks` (each rank with its spans and host) of a run of `cfg`.
    pub fn of(cfg: &RunConfig, ranks: &[(usize, String, Vec<Span>)]) -> Result<Self> {
        let layout = cfg.layout();
        let epoch = ranks
            .iter()
            .flat_map(|(_, _, s)| s.iter().map(|s| s.start_us))
            .fold(f64::INFINITY, f64::min);
        let epoch = if epoch.is_finite() { epoch } else { 0.0 };
        let mut events = Vec::new();
        for (rank, host, spans) in ranks {
            events.push(name_event(
                "process_name",
                *rank,
                0,
                format!("rank {rank} ({host})"),
            ));
            events.push(name_event("thread_name", *rank, 0, "compute".into()));
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
                events.push(name_event("thread_name", *rank, 1 + lane, name));
            }
            for s in ordered {
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
                events.push(TraceEvent {
                    name: s.name.clone(),
                    cat: s.cat.clone(),
                    ph: "X".into(),
                    ts: s.start_us - epoch,
                    dur: Some(s.dur_us),
                    pid: *rank,
                    tid,
                    args,
                });
            }
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

    /// A run's `trace.json`, or one line saying how to make one.
    pub fn read(run: &Path) -> Result<Self> {
        let path = run.join(TRACE_FILE);
        let text = std::fs::read_to_string(&path).map_err(|_| {
            crate::error::user(format!(
                "{} has no {TRACE_FILE}: train it with --trace (trace_start, trace_steps choose the steps)",
                run.display()
            ))
        })?;
        super::versioned::from_json(&text, &path)
    }
}
