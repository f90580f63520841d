//! Rank 0's live metrics for TensorBoard (`tensorboard: true`): at every logged step the
//! values of its `log.jsonl` line, the gradient norm, and the communication per step by
//! kind since the previous logged step (calls, bytes, milliseconds, of them hidden behind
//! compute and exposed), written to the run's event file and flushed.

use crate::comm::{CommKind, TallySnapshot};
use crate::config::RunConfig;
use crate::run_dir::tensorboard::EventWriter;
use crate::run_dir::LogLine;
use anyhow::Result;
use std::path::{Path, PathBuf};

/// Where a run's event files go: `RUN/tb`, or a named folder's subfolder for the run.
pub fn tensorboard_dir(cfg: &RunConfig, run: &Path) -> PathBuf {
    match &cfg.eval.tensorboard_dir {
        Some(d) => Path::new(d).join(run.file_name().unwrap_or(run.as_os_str())),
        None => run.join("tb"),
    }
}

pub struct Metrics {
    events: EventWriter,
    /// The last step's gradient norm (logged with that step's line).
    grad_norm: Option<f32>,
    /// The tally at the previous logged step, and that step.
    previous: Option<(usize, TallySnapshot)>,
}

impl Metrics {
    pub fn create(dir: &Path) -> Result<Self> {
        Ok(Self {
            events: EventWriter::create(dir)?,
            grad_norm: None,
            previous: None,
        })
    }

    pub fn path(&self) -> &Path {
        self.events.path()
    }

    pub fn step_done(&mut self, grad_norm: f32) {
        self.grad_norm = Some(grad_norm);
    }

    /// The scalars of one logged step; `comm` is the rank's tally after it.
    pub fn logged(&mut self, line: &LogLine, comm: &TallySnapshot) -> Result<()> {
        let mut values: Vec<(String, f32)> = Vec::new();
        let mut put = |tag: &str, v: Option<f64>| {
            if let Some(v) = v {
                values.push((tag.to_string(), v as f32));
            }
        };
        put("loss/train", line.train_loss.map(f64::from));
        put("loss/val", line.val_loss.map(f64::from));
        put("loss/eval_train", line.eval_train_loss.map(f64::from));
        put("lr", line.lr);
        put("time/ms_per_step", line.ms);
        put("throughput/tokens_per_s", line.tokens_per_s);
        if line.train_loss.is_some() {
            put("grad_norm", self.grad_norm.map(f64::from));
            if let Some((step, before)) = &self.previous {
                values.extend(per_step(before, comm, line.step.saturating_sub(*step)));
            }
            self.previous = Some((line.step, comm.clone()));
        }
        self.events.scalars(line.step, &values)
    }
}

/// Each kind's communication per step between two tallies `steps` apart.
fn per_step(before: &TallySnapshot, after: &TallySnapshot, steps: usize) -> Vec<(String, f32)> {
    if steps == 0 {
        return Vec::new();
    }
    let n = steps as f64;
    let mut out = Vec::new();
    let mut exposed_total = 0.0;
    for kind in CommKind::all() {
        let (a, b) = (before.total(kind), after.total(kind));
        if b.calls == 0 {
            continue;
        }
        let seconds = (b.seconds - a.seconds) / n;
        let hidden = (b.hidden_seconds - a.hidden_seconds) / n;
        exposed_total += seconds - hidden;
        let label = kind.label();
        for (what, v) in [
            ("calls", (b.calls - a.calls) as f64 / n),
            ("bytes", (b.bytes - a.bytes) as f64 / n),
            ("ms", 1e3 * seconds),
            ("hidden_ms", 1e3 * hidden),
            ("exposed_ms", 1e3 * (seconds - hidden)),
        ] {
            out.push((format!("comm/{label}/{what}_per_step"), v as f32));
        }
    }
    out.push((
        "comm/exposed_ms_per_step".into(),
        (1e3 * exposed_total) as f32,
    ));
    out
}
