//! Rank 0's live metrics for TensorBoard (`tensorboard: true`): at every logged step the
//! values of its `log.jsonl` line, the gradient norm, and the communication per step by
//! kind since the previous logged step (calls, bytes, milliseconds, of them hidden behind
//! compute and exposed), written to the run's event file and flushed.

use crate::config::RunConfig;
use crate::run_dir::tensorboard::EventWriter;
use crate::run_dir::LogLine;
use anyhow::Result;
use std::path::{Path, PathBuf};
use tp_harness::comm::{CommKind, TallySnapshot};

/// The file in a shared TensorBoard folder's subfolder that names the run it belongs to.
const OWNER_FILE: &str = ".tp-run";

/// Where a run's event files go: `RUN/tb`, or a subfolder of `tensorboard_dir` named as
/// the run's directory — unless another run's directory of that name (`pa/r1`, `pb/r1`)
/// has it already: then the name with a short hash of this run's path, so that the two
/// stay two runs in TensorBoard. Each such subfolder names its run in `.tp-run`.
pub fn tensorboard_dir(cfg: &RunConfig, run: &Path) -> PathBuf {
    let Some(d) = &cfg.eval.tensorboard_dir else {
        return run.join("tb");
    };
    let name = run
        .file_name()
        .unwrap_or(run.as_os_str())
        .to_string_lossy()
        .to_string();
    let me = std::path::absolute(run).unwrap_or_else(|_| run.to_path_buf());
    let plain = Path::new(d).join(&name);
    match std::fs::read_to_string(plain.join(OWNER_FILE)) {
        Ok(owner) if Path::new(owner.trim()) != me => {
            use sha2::Digest;
            let hash = sha2::Sha256::digest(me.to_string_lossy().as_bytes());
            let short: String = hash.iter().take(4).map(|b| format!("{b:02x}")).collect();
            Path::new(d).join(format!("{name}-{short}"))
        }
        _ => plain,
    }
}

/// Creates a run's TensorBoard folder and names the run in it (before the run directory
/// exists, so that a folder that cannot be written stops the run with nothing made).
pub fn claim_tensorboard_dir(tb: &Path, run: &Path) -> Result<()> {
    std::fs::create_dir_all(tb)?;
    let me = std::path::absolute(run).unwrap_or_else(|_| run.to_path_buf());
    if tb.file_name().is_some_and(|n| n != "tb") {
        tp_harness::util::write_atomic(&tb.join(OWNER_FILE), me.to_string_lossy().as_bytes())?;
    }
    Ok(())
}

pub struct Metrics {
    events: EventWriter,
    /// The last step's gradient norm (logged with that step's line).
    grad_norm: Option<f32>,
    /// The tally at the previous logged step, and that step.
    previous: Option<(usize, TallySnapshot)>,
}

impl Metrics {
    /// A new event file in `dir`; `resumed_at`: the step a resumed run continues from
    /// (TensorBoard then drops what earlier files hold from it on).
    pub fn create(dir: &Path, resumed_at: Option<usize>) -> Result<Self> {
        let mut events = EventWriter::create(dir)?;
        if let Some(step) = resumed_at {
            events.restarted_at(step)?;
        }
        Ok(Self {
            events,
            grad_norm: None,
            previous: None,
        })
    }

    pub fn path(&self) -> &Path {
        self.events.path()
    }

    /// A resumed run at `step`, its tally as the checkpoint carried it: the tally the
    /// first invocation had after step `step - 1`, so that the resume's first logged step
    /// (which its START made TensorBoard drop from the earlier file) gets its `comm/*`
    /// again (over that one step, where the first invocation averaged over its log
    /// interval: the same counts and bytes).
    pub fn resumed(&mut self, step: usize, comm: &TallySnapshot) {
        if step > 0 {
            self.previous = Some((step - 1, comm.clone()));
        }
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
