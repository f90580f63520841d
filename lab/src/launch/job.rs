//! Opening a job: everything its ranks need, checked before anything is written (the
//! config, the data, the checkpoint to resume, the fault plan), and rank 0's announcement.
//! Closing it (the files rank 0 writes after training) is `closing.rs`. Launchers share
//! both.

use super::backend::Backend;
use crate::config::RunConfig;
use crate::data::{data_root, prepare, prepare_text, Dataset, TextTokenizer, TEXT};
use crate::run_dir::{self, Checkpoint};
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use tp_harness::error::user;
use tp_harness::train::hooks::{self, Hooks, NoHooks};

/// What a rank keeps or skips beyond training.
#[derive(Debug, Clone, Copy, Default)]
pub struct RankOptions {
    /// Return each rank's parameters in its outcome (tests compare ranks).
    pub keep_params: bool,
    /// No closing sample.
    pub skip_sample: bool,
    /// No checkpoints, not even the run's last (a measurement, not a run: `--bench`),
    /// so that what is timed or profiled is the steps alone.
    pub skip_checkpoints: bool,
}

/// One training job, as every rank sees it.
pub struct Job {
    pub cfg: RunConfig,
    pub data: Dataset,
    /// Continue from this checkpoint instead of a fresh init.
    pub checkpoint: Option<Checkpoint>,
    /// A new run's initial weights from another run (`init_from`).
    pub init: Option<InitFrom>,
    /// What the harness's own tests do to the run (nothing for a user's).
    pub hooks: Arc<dyn Hooks>,
    pub opts: RankOptions,
    /// Whether this job continues an existing run directory (`--resume`), with or without
    /// a checkpoint to start from.
    pub resumed: bool,
    /// When this invocation began (its wall time is added to the run's so far).
    pub started: Instant,
    /// A resume the user let continue on data other than the checkpoint's: what changed
    /// (noted in the log at the resumed step, and so in the summary).
    pub data_changed: Option<String>,
    /// Each rank's machine (CPU and kernels), where MPI ranks ran on different ones: the
    /// same computation, rounded differently (empty when every rank's is rank 0's).
    pub rank_machines: Vec<String>,
}

impl Job {
    /// A fresh job on given data, with no fault injection.
    pub fn new(cfg: RunConfig, data: Dataset, opts: RankOptions) -> Self {
        Self {
            cfg,
            data,
            checkpoint: None,
            init: None,
            hooks: Arc::new(NoHooks),
            opts,
            resumed: false,
            started: Instant::now(),
            data_changed: None,
            rank_machines: Vec::new(),
        }
    }

    /// The run's wall-clock seconds so far: what the checkpoint it resumed from had taken
    /// (every earlier invocation), plus this invocation's. Only this invocation's where
    /// the checkpoint predates the count.
    pub fn wall_seconds(&self) -> f64 {
        let before = self
            .checkpoint
            .as_ref()
            .and_then(|c| c.meta.wall_seconds)
            .unwrap_or(0.0);
        before + self.started.elapsed().as_secs_f64()
    }
}

/// Loads (preparing if needed) the configured dataset.
pub fn load_dataset(cfg: &RunConfig) -> Result<Dataset> {
    let dir = if cfg.model.dataset == TEXT {
        let Some(path) = &cfg.model.text_path else {
            tp_harness::user_bail!(
                "dataset `text` needs text_path: a UTF-8 file or folder (--set text_path=PATH)"
            );
        };
        // A stored config without the key is a run from before it: GPT-2's BPE.
        let how = cfg.model.text_tokenizer.unwrap_or(TextTokenizer::Gpt2);
        prepare_text(Path::new(path), &data_root(), how)?
    } else {
        prepare(&cfg.model.dataset, &data_root())?
    };
    Dataset::load(&dir)
}

/// Checks that need the data: everything user input can break, before anything is
/// allocated or written.
pub fn checked_dataset(cfg: &RunConfig) -> Result<Dataset> {
    cfg.validate()?;
    let data = load_dataset(cfg)?;
    cfg.check_against_data(data.train.len(), data.val.len(), data.vocab_size())?;
    cfg.model_config(data.vocab_size())?
        .check(cfg.parallel.tp)
        .map_err(user)?;
    Ok(data)
}

/// Another run's weights to start a new run from, and where they came from.
pub struct InitFrom {
    pub checkpoint: Checkpoint,
}

/// Checks that a run of `cfg` can start from the weights of a run of `from`: the same
/// model and data but for the pattern (and the training keys, which are free).
fn check_init_compatible(cfg: &RunConfig, from: &RunConfig, dir: &Path) -> Result<()> {
    let (mut a, mut b) = (cfg.model.clone(), from.model.clone());
    // The preset only supplies defaults; two GPT-2 BPE corpora share one tokenizer, so
    // a model pretrained on one fine-tunes on another.
    b.pattern = a.pattern.clone();
    for m in [&mut a, &mut b] {
        m.preset.clear();
        if m.dataset == TEXT {
            m.text_path = None;
            m.text_tokenizer = Some(m.text_tokenizer.unwrap_or(TextTokenizer::Gpt2));
        }
    }
    if a == b {
        return Ok(());
    }
    let as_map = |m: &crate::config::ModelPart| -> Result<serde_yaml_ng::Mapping> {
        Ok(serde_yaml_ng::from_value(serde_yaml_ng::to_value(m)?)?)
    };
    let (ma, mb) = (as_map(&a)?, as_map(&b)?);
    let key = ma
        .iter()
        .find(|(k, v)| mb.get(*k) != Some(*v))
        .and_then(|(k, _)| k.as_str().map(String::from))
        .unwrap_or_else(|| "model".into());
    tp_harness::user_bail!(
        "init_from {}: its {key} is {} but this run's is {}: only the pattern, the training keys and a text dataset's text_path may differ",
        dir.display(),
        mb.get(key.as_str()).map_or("unset".into(), |v| serde_yaml_ng::to_string(v).unwrap_or_default().trim().to_string()),
        ma.get(key.as_str()).map_or("unset".into(), |v| serde_yaml_ng::to_string(v).unwrap_or_default().trim().to_string())
    )
}

/// What a run writes into.
#[derive(Debug, Clone)]
pub enum Target {
    /// A new run directory (default `runs/<timestamp>-<pattern>`).
    New(Option<PathBuf>),
    /// Continue the run in this directory from its latest checkpoint.
    Resume(PathBuf, OnOtherData),
}

/// What a resume does when the data is not what the checkpoint trained on (an edited
/// corpus, another file at text_path).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnOtherData {
    /// Refuse with one line (exit 2): a log and val curve must not mix two data sets
    /// unannounced.
    #[default]
    Refuse,
    /// Continue on the new data (`tp-train --resume RUN --accept-other-data`), noted in
    /// the log and summary.
    Accept,
}

impl Job {
    /// The step a resumed run continues from (0 where no checkpoint was written before
    /// it stopped); `None` for a new run.
    pub fn resumed_at(&self) -> Option<usize> {
        self.resumed
            .then(|| self.checkpoint.as_ref().map_or(0, |c| c.meta.step))
    }
}

/// Makes every product of this process from here on take `cfg`'s matmul route (or
/// `TP_MATMUL`'s): a missing BLAS is one line naming the fix.
pub fn use_matmul_route(cfg: &RunConfig) -> Result<()> {
    if cfg.parallel.device != tp_harness::device::DeviceKind::Cpu {
        return Ok(());
    }
    let route = tp_harness::ops::cpu::gemm::route::resolve(cfg.parallel.matmul).map_err(user)?;
    tp_harness::ops::cpu::gemm::route::set(route);
    Ok(())
}

/// The job `cfg` describes for `target`, checked without writing anything.
pub fn prepare_job(cfg: &RunConfig, target: &Target) -> Result<Job> {
    let started = Instant::now();
    let hooks = hooks::from_env()?;
    use_matmul_route(cfg)?;
    let data = checked_dataset(cfg)?;
    let (checkpoint, data_changed) = match target {
        Target::New(_) => (None, None),
        Target::Resume(dir, on_other) => {
            let ck = resume_checkpoint(dir, cfg)?;
            let changed = match &ck {
                Some(ck) => other_data(dir, ck, &data, *on_other)?,
                None => None,
            };
            (ck, changed)
        }
    };
    let init = match (&checkpoint, &cfg.optim.init_from) {
        (None, Some(from)) => {
            let dir = Path::new(from);
            let (from_cfg, ck) =
                run_dir::load_checkpoint(dir, None, "initialise from", run_dir::Need::Weights)?;
            check_init_compatible(cfg, &from_cfg, dir)?;
            // Every parameter the new pattern needs must be there: a one-tp build from
            // the stored weights says which is not, before anything is written.
            let mcfg = cfg.model_config(data.vocab_size())?;
            let stored = tp_harness::tp::StoredParams {
                tensors: ck.weights.clone(),
            };
            tp_harness::model::Gpt::build(&mcfg, cfg.layout(), &stored, &tp_harness::comm::CountedComm::solo())
                .map_err(|e| {
                    user(format!(
                        "init_from {}: {e:#}: pattern {} needs it (a p block has no o.b/pr.b: start from a run with those blocks as t or s)",
                        dir.display(),
                        cfg.model.pattern
                    ))
                })?;
            Some(InitFrom { checkpoint: ck })
        }
        _ => None,
    };
    Ok(Job {
        cfg: cfg.clone(),
        data,
        checkpoint,
        init,
        hooks,
        opts: RankOptions::default(),
        resumed: matches!(target, Target::Resume(..)),
        started,
        data_changed,
        rank_machines: Vec::new(),
    })
}

/// Whether `data` is what checkpoint `ck` of the run in `dir` trained on: `None` if it is
/// (or the checkpoint predates the fingerprint), a note if it is not and the user
/// accepted that, else one line refusing the resume.
fn other_data(
    dir: &Path,
    ck: &Checkpoint,
    data: &Dataset,
    on_other: OnOtherData,
) -> Result<Option<String>> {
    let Some(was) = &ck.meta.data_sha256 else {
        return Ok(None);
    };
    let now = data.fingerprint();
    if *was == now {
        return Ok(None);
    }
    let what = format!(
        "the data changed since {} (step {}): its prepared tokens hash to {}.., the checkpoint's to {}..",
        ck.dir.display(),
        ck.meta.step,
        &now[..12],
        &was[..was.len().min(12)]
    );
    // A character vocabulary is the corpus's own: edited, it may hold other characters,
    // which no flag lets the trained model read.
    let trained = ck
        .meta
        .params
        .iter()
        .find(|p| p.name == "wte")
        .map(|p| p.shape[0]);
    if let Some(v) = trained.filter(|v| *v != data.vocab_size()) {
        tp_harness::user_bail!(
            "{what}, and its vocabulary now has {} tokens where the model has {v} (a character corpus whose characters changed): resume on the original corpus, or start a new run (text_tokenizer=gpt2 keeps one vocabulary for every corpus)",
            data.vocab_size()
        );
    }
    match on_other {
        OnOtherData::Accept => Ok(Some(format!(
            "resumed at step {} on other data: {what}",
            ck.meta.step
        ))),
        OnOtherData::Refuse => tp_harness::user_bail!(
            "{what}; resuming would continue {} on other data: restore the corpus, or pass --accept-other-data to continue on the new data (noted in the log and summary)",
            dir.display()
        ),
    }
}

/// The checkpoint a resume of `dir` continues from, checked against `cfg`; none when the
/// run was stopped before its first checkpoint (it then trains again from step 0).
fn resume_checkpoint(dir: &Path, cfg: &RunConfig) -> Result<Option<Checkpoint>> {
    run_dir::DirLock::check_free(dir)?;
    if run_dir::latest(dir)?.is_none() {
        return Ok(None);
    }
    let (_, ck) = run_dir::load_checkpoint(dir, None, "resume from", run_dir::Need::Everything)?;
    ck.check_matches(cfg)?;
    if cfg.optim.max_iters < ck.meta.step {
        tp_harness::user_bail!(
            "the latest checkpoint is at step {} but max_iters is {}: raise it (--set max_iters=N)",
            ck.meta.step,
            cfg.optim.max_iters
        );
    }
    if let (Some(why), true) = (history_gap(&ck, cfg), ck.meta.step == cfg.optim.max_iters) {
        // Its closing files would report no communication at all.
        tp_harness::user_bail!(
            "{} has nothing left to train (its latest checkpoint is at max_iters {}) and its communication history cannot be continued ({why}): resume with the checkpoint's settings, raise max_iters (--set max_iters=N), or evaluate it with tp-eval",
            dir.display(),
            cfg.optim.max_iters
        );
    }
    Ok(Some(ck))
}

/// Why a resumed run cannot continue its checkpoint's communication tally, if it cannot.
fn history_gap(ck: &Checkpoint, cfg: &RunConfig) -> Option<String> {
    if super::run_trainer::usable_history(ck, cfg).is_some() {
        return None;
    }
    Some(match &ck.meta.history {
        None => "the checkpoint predates run histories".to_string(),
        Some(h) => format!(
            "it was tallied at {}, this resume runs {}",
            h.shape,
            crate::run_dir::CommShape::of(cfg)
        ),
    })
}

/// The preset's name, followed by the model keys the run set away from it.
fn preset_as_run(model: &crate::config::ModelPart) -> String {
    let changed = model.changed_from_preset();
    if changed.is_empty() {
        model.preset.clone()
    } else {
        format!("{} with {}", model.preset, changed.join(", "))
    }
}

/// The BLAS that computes a run's products, when one does: the fused CPU kernels on
/// the blas route (candle's portable ops and a GPU's kernels have their own).
pub fn blas_in_use(cfg: &RunConfig) -> Option<&'static tp_harness::ops::cpu::gemm::blas::Blas> {
    use tp_harness::device::{DeviceKind, Kernels};
    use tp_harness::ops::cpu::gemm::{blas, route};
    let fused_cpu =
        cfg.parallel.device == DeviceKind::Cpu && cfg.parallel.kernels == Kernels::Fused;
    (fused_cpu && route::current() == route::Matmul::Blas)
        .then(|| blas::library().ok())
        .flatten()
}

/// Which BLAS computes the products, when one does (and its warning for this CPU).
fn matmul_line(cfg: &RunConfig) -> Option<String> {
    let lib = blas_in_use(cfg)?;
    Some(match &lib.warning {
        None => format!("matmul: blas, by {}", lib.name),
        Some(w) => format!("matmul: blas, by {}; warning: {w}", lib.name),
    })
}

pub fn announce(job: &Job, backend: Backend, threads: usize, dir: &Path) {
    let (cfg, data) = (&job.cfg, &job.data);
    let switches = super::switches::set_switches(|k| std::env::var(k).ok());
    if let Some(line) = super::switches::announcement(&switches) {
        tp_harness::say!("{line}");
    }
    tp_harness::say!(
        "tp-train: {} on {} ({} tokens of vocab {}), {} rank(s) as {} x {threads} math thread(s) each, {} kernels, {} {}",
        preset_as_run(&cfg.model),
        cfg.model.dataset,
        data.train.len(),
        data.vocab_size(),
        cfg.parallel.tp * cfg.parallel.dp,
        backend.ranks_as(),
        cfg.parallel.kernels.label(),
        cfg.parallel.device.label(),
        cfg.parallel.dtype.label(),
    );
    if let Some(line) = matmul_line(cfg) {
        tp_harness::say!("{line}");
    }
    let ranks = cfg.parallel.tp * cfg.parallel.dp;
    if backend == Backend::Threads && cfg.parallel.device == tp_harness::device::DeviceKind::Cuda {
        let gpus = tp_harness::device::gpu_count().unwrap_or(0);
        if let Some(note) = super::backend::gpu_sharing_note(ranks, gpus) {
            tp_harness::say!("{note}");
        }
    }
    tp_harness::say!("run directory: {}", dir.display());
    if job.checkpoint.is_none() && job.resumed {
        tp_harness::say!(
            "no checkpoint was written before the run stopped: training it again from step 0"
        );
    }
    if let Some(init) = &job.init {
        // Weights trained in s and p blocks at one tp are another function at another:
        // said here as a resume and tp-eval say it.
        let from = &init.checkpoint.meta.config;
        tp_harness::train::generate::warn_if_other_function(
            from.layout(),
            from.parallel.tp,
            cfg.parallel.tp,
        );
    }
    if let Some(ck) = &job.checkpoint {
        tp_harness::say!(
            "resuming from {} (step {}) to max_iters {}",
            ck.dir.display(),
            ck.meta.step,
            cfg.optim.max_iters
        );
        if let Some(why) = history_gap(ck, cfg) {
            tp_harness::say!(
                "note: comm.json will count the collectives of steps {}..{} only: {why}",
                ck.meta.step,
                cfg.optim.max_iters
            );
        }
        tp_harness::train::generate::warn_if_other_function(
            cfg.layout(),
            ck.meta.config.parallel.tp,
            cfg.parallel.tp,
        );
    }
}
