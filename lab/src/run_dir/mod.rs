//! The one typed reader and writer of a run directory:
//!
//! ```text
//! RUN/config.yaml      the resolved RunConfig
//! RUN/log.jsonl        one LogLine per logged step
//! RUN/comm.json        CommReport (the communication tally)
//! RUN/summary.json     RunSummary; written last, so its presence marks a finished run
//! RUN/diverged.json    DivergedReport: training stopped on a non-finite loss or norm
//! RUN/sample.txt       the closing sample
//! RUN/scan.json        ScanReport: tp-scan's block-wise sensitivity scan
//! RUN/eval.json        EvalReport: the whole validation split's loss (eval-train.json:
//!                      the training split's, from tp-eval --split train)
//! RUN/checkpoints/     step-N/{model,optimizer.m,optimizer.v}.safetensors + meta.json
//! RUN/.lock            held by the process that writes the run
//! BENCH/bench.json     BenchResult: what tp-train --bench measured
//! ```
//!
//! tp-train, tp-sweep, tp-plot, tp-sample, tp-eval and tp-export read and write through these
//! types only. A [`RunDir`] owns its directory while it lives (an advisory lock the OS
//! releases when the process dies): a second writer stops with one line.

pub mod bench;
pub mod bench_goals;
pub mod checkpoint;
pub mod files;
pub mod lock;
pub mod log;
pub mod out_guard;
mod read;
pub mod records;
mod reports;
pub mod summary;
pub mod tensorboard;
pub mod trace_file;
pub mod versioned;

pub use checkpoint::{
    latest, Checkpoint, CheckpointMeta, CommShape, Moments, RunHistory, CHECKPOINTS,
};
pub use files::{COMM_FILE, CONFIG_FILE, DIVERGED_FILE, SAMPLE_FILE, SCAN_FILE, SUMMARY_FILE};
pub use lock::DirLock;
pub use log::{read_log, read_log_for_resume, LogLine, LogWriter, TornTail};
pub use out_guard::check_out;
pub use read::{read_comm, read_config, read_diverged, read_summary};
pub use records::{
    CommReport, DivergedReport, EvalReport, LayerComm, PerStep, RankCompute, ScanReport, SiteComm,
};
pub use reports::{
    eval_file, read_eval, read_scan, write_diverged, write_eval_into, write_eval_to,
    write_scan_into,
};
pub use summary::RunSummary;

use crate::config::RunConfig;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use tp_harness::error::user;
use tp_harness::user_bail;
use tp_harness::util::write_atomic;

/// `runs/<timestamp>-<pattern>`, the pattern made safe for a file name.
pub fn default_run_path(pattern: &str) -> PathBuf {
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
    let safe: String = pattern
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    PathBuf::from("runs").join(format!("{stamp}-{safe}"))
}

/// A run directory opened for writing by this process (which holds its lock).
#[derive(Debug)]
pub struct RunDir {
    pub path: PathBuf,
    _lock: DirLock,
}

impl RunDir {
    /// A new run in `path`, which must not hold one already.
    pub fn create(path: &Path) -> Result<Self> {
        check_out(path, "the run directory")?;
        if path.join(log::LOG_FILE).exists() || path.join(CONFIG_FILE).exists() {
            user_bail!(
                "{} already holds a run: continue it with tp-train --resume {} or choose another --out (nothing was changed)",
                path.display(),
                path.display()
            );
        }
        std::fs::create_dir_all(path)
            .with_context(|| format!("cannot create run directory {}", path.display()))?;
        let lock = DirLock::acquire(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            _lock: lock,
        })
    }

    /// Takes over an existing run directory to resume it at `step`: the log keeps every
    /// complete line before `step`, byte for byte; lines from `step` on (written after the
    /// checkpoint, or the final evaluation of a finished run) and a torn tail (a write
    /// cut short) are dropped, so the resumed run continues the log exactly. Files a
    /// killed write left half-done are removed. Says what happened to the log.
    pub fn resume(path: &Path, step: usize) -> Result<(Self, LogRepair)> {
        let lock = DirLock::acquire(path)?;
        let log = log::read_log_for_resume(path)?;
        let total = log.lines.len();
        let mut text = String::new();
        let mut kept = 0;
        for (raw, line) in &log.lines {
            if line.step < step {
                text.push_str(raw);
                text.push('\n');
                kept += 1;
            }
        }
        write_atomic(&path.join(log::LOG_FILE), text.as_bytes())?;
        // A resume is another attempt: where it diverged before is no longer its outcome.
        remove_if_there(&path.join(DIVERGED_FILE))?;
        checkpoint::remove_partial(path)?;
        remove_stale_temporaries(path)?;
        Ok((
            Self {
                path: path.to_path_buf(),
                _lock: lock,
            },
            LogRepair {
                kept,
                dropped: total - kept,
                torn: log.torn,
            },
        ))
    }

    fn write(&self, name: &str, contents: &[u8]) -> Result<()> {
        write_atomic(&self.path.join(name), contents)
    }

    pub fn write_config(&self, cfg: &RunConfig) -> Result<()> {
        self.write(CONFIG_FILE, cfg.to_yaml()?.as_bytes())
    }

    pub fn write_comm(&self, report: &CommReport) -> Result<()> {
        self.write(COMM_FILE, versioned::to_json(report)?.as_bytes())
    }

    pub fn write_sample(&self, text: &str) -> Result<()> {
        self.write(SAMPLE_FILE, text.as_bytes())
    }

    /// Written last: its presence marks the run finished (sweeps skip it).
    pub fn write_summary(&self, summary: &RunSummary) -> Result<()> {
        self.write(SUMMARY_FILE, versioned::to_json(summary)?.as_bytes())
    }

    pub fn log_writer(&self) -> Result<LogWriter> {
        LogWriter::append(&self.path)
    }

    pub fn write_eval(&self, report: &EvalReport) -> Result<()> {
        self.write(
            &eval_file(report.split),
            versioned::to_json(report)?.as_bytes(),
        )
    }
}

/// What a resume did to a run's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRepair {
    /// Complete lines before the checkpoint, kept as written.
    pub kept: usize,
    /// Complete lines from the checkpoint's step on, dropped (the resumed run writes them
    /// again).
    pub dropped: usize,
    /// The end of the file that did not parse, dropped.
    pub torn: Option<log::TornTail>,
}

impl LogRepair {
    /// One line about a torn tail, if there was one.
    pub fn torn_note(&self, dir: &Path) -> Option<String> {
        self.torn.map(|t| {
            format!(
                "note: {}/{} ended in a torn line ({} bytes from line {}, a write cut short by a crash or a full disk): dropped it, kept the {} complete lines before the checkpoint",
                dir.display(),
                log::LOG_FILE,
                t.bytes,
                t.line,
                self.kept
            )
        })
    }
}

fn remove_if_there(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("cannot remove {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// Removes the temporary files of atomic writes (`.NAME.PID.tmp`) a kill left behind in
/// a run directory and its `checkpoints/`. Only the owner of the run calls this, so no
/// write of its is under way.
fn remove_stale_temporaries(run_dir: &Path) -> Result<()> {
    for dir in [run_dir.to_path_buf(), run_dir.join(CHECKPOINTS)] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with('.') && name.ends_with(".tmp") && e.path().is_file() {
                std::fs::remove_file(e.path())
                    .with_context(|| format!("cannot remove {}", e.path().display()))?;
            }
        }
    }
    Ok(())
}

/// What a tool needs of a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// The weights (evaluation, sampling, export, scans, `init_from`).
    Weights,
    /// Weights and AdamW moments (resuming).
    Everything,
}

/// A run's config and a checkpoint of it — inside its `checkpoints/`, of its model, data
/// and seed: `explicit` if given, else the run's latest. `purpose` completes "has no checkpoint to ...".
///
/// A live run may replace its latest checkpoint (and prune the old one) between reading
/// `latest` and the files: when a load fails and `latest` has moved meanwhile, the new
/// latest is read instead, so a reader racing a healthy run is never told it is damaged.
pub fn load_checkpoint(
    dir: &Path,
    explicit: Option<&Path>,
    purpose: &str,
    need: Need,
) -> Result<(RunConfig, Checkpoint)> {
    let cfg = read_config(dir)?;
    let load = |d: &Path| match need {
        Need::Weights => Checkpoint::load_weights(d),
        Need::Everything => Checkpoint::load(d),
    };
    let latest_name = || {
        std::fs::read_to_string(dir.join(CHECKPOINTS).join("latest"))
            .ok()
            .map(|n| n.trim().to_string())
    };
    let ck = match explicit {
        Some(d) => {
            if d.exists() && !checkpoint::is_inside(&dir.join(CHECKPOINTS), d) {
                user_bail!(
                    "{} is not a checkpoint of {} (its checkpoints are the step-N directories in {}): name one of them, or the run the checkpoint belongs to",
                    d.display(),
                    dir.display(),
                    dir.join(CHECKPOINTS).display()
                );
            }
            load(d)?
        }
        None => {
            let mut attempts = 0;
            loop {
                let before = latest_name();
                let loaded = latest(dir).and_then(|found| match found {
                    Some(d) => load(&d),
                    None => Err(user(format!(
                        "{} has no checkpoint to {purpose} (checkpoints are written every checkpoint_interval steps and at the end)",
                        dir.display()
                    ))),
                });
                match loaded {
                    Ok(ck) => break ck,
                    Err(_) if attempts < 5 && latest_name() != before => attempts += 1,
                    Err(e) => return Err(e),
                }
            }
        }
    };
    ck.check_matches(&cfg)?;
    Ok((cfg, ck))
}

/// `overrides` with, in front of them, the model keys (shape, pattern, data) of the run
/// an `init_from` override names: a run started from another takes that run's model
/// unless a later override says otherwise. `n_layer` is left to follow the pattern, so a
/// pattern of another depth is reported as such. Without `init_from`, unchanged.
pub fn inherit_init_from(
    overrides: Vec<(String, serde_yaml_ng::Value, crate::config::Origin)>,
) -> Result<Vec<(String, serde_yaml_ng::Value, crate::config::Origin)>> {
    let from = overrides
        .iter()
        .rev()
        .find(|(k, _, _)| k == "init_from")
        .and_then(|(_, v, _)| v.as_str().map(PathBuf::from));
    let Some(dir) = from else {
        return Ok(overrides);
    };
    let src = read_config(&dir).map_err(|e| user(format!("init_from: {e:#}")))?;
    let serde_yaml_ng::Value::Mapping(model) = serde_yaml_ng::to_value(&src.model)? else {
        return Ok(overrides);
    };
    let origin = crate::config::Origin::File(dir.join(CONFIG_FILE).display().to_string());
    // A dataset the user names in place of the source run's takes none of the source's
    // text corpus keys with it: they describe the other data (and a check of them would
    // blame a key this invocation never set). Whether the data may change at all is the
    // init_from comparison's to say, by name.
    let other_data = overrides
        .iter()
        .rev()
        .find(|(k, _, _)| k == "dataset")
        .and_then(|(_, v, _)| v.as_str())
        .is_some_and(|d| d != src.model.dataset);
    let mut out: Vec<_> = model
        .into_iter()
        .filter_map(|(k, v)| Some((k.as_str()?.to_string(), v)))
        .filter(|(k, _)| k != "n_layer")
        .filter(|(k, _)| !(other_data && (k == "text_tokenizer" || k == "text_path")))
        .map(|(k, v)| (k, v, origin.clone()))
        .collect();
    out.extend(overrides);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tp-rundir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn log_and_records_read_back_what_was_written() {
        let d = scratch("roundtrip");
        let run = RunDir::create(&d).unwrap();
        run.write_config(&RunConfig::default()).unwrap();
        let mut w = run.log_writer().unwrap();
        let lines = [
            LogLine {
                step: 0,
                train_loss: Some(4.5),
                lr: Some(1e-5),
                ..Default::default()
            },
            LogLine {
                step: 10,
                eval_train_loss: Some(3.0),
                val_loss: Some(3.25),
                ..Default::default()
            },
        ];
        for l in &lines {
            w.write(l).unwrap();
        }
        assert_eq!(read_log(&d).unwrap(), lines);
        assert_eq!(read_config(&d).unwrap(), RunConfig::default());
        assert!(read_summary(&d).unwrap().is_none());
        drop(run);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_directory_being_written_cannot_be_opened_by_a_second_writer() {
        let d = scratch("owned");
        let first = RunDir::create(&d).unwrap();
        let e = RunDir::resume(&d, 0).unwrap_err().to_string();
        assert!(e.contains("being written by another tp-train"), "{e}");
        drop(first);
        RunDir::resume(&d, 0).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn resume_removes_checkpoints_left_half_written() {
        let d = scratch("partial");
        std::fs::create_dir_all(d.join("checkpoints/.tmp-step-000010-1234")).unwrap();
        std::fs::write(
            d.join("checkpoints/.tmp-step-000010-1234/model.safetensors"),
            b"x",
        )
        .unwrap();
        std::fs::create_dir_all(d.join("checkpoints/step-000005")).unwrap();
        std::fs::write(d.join("checkpoints/.latest.4321.tmp"), b"step-000010").unwrap();
        std::fs::write(d.join(".summary.json.4321.tmp"), b"{").unwrap();
        RunDir::resume(&d, 5).unwrap();
        assert!(!d.join("checkpoints/.tmp-step-000010-1234").exists());
        assert!(!d.join("checkpoints/.latest.4321.tmp").exists());
        assert!(!d.join(".summary.json.4321.tmp").exists());
        assert!(d.join("checkpoints/step-000005").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn resume_keeps_the_complete_lines_before_the_checkpoint_byte_for_byte_and_drops_a_torn_tail() {
        let d = scratch("torn-resume");
        std::fs::create_dir_all(&d).unwrap();
        let before = "{\"step\":0,\"train_loss\":4.25}\n{\"step\":10,\"val_loss\":3.5}\n";
        let after = "{\"step\":20,\"train_loss\":3.0}\n{\"step\":30,\"tr";
        std::fs::write(d.join(log::LOG_FILE), format!("{before}{after}")).unwrap();
        let (_run, repair) = RunDir::resume(&d, 20).unwrap();
        assert_eq!(
            std::fs::read_to_string(d.join(log::LOG_FILE)).unwrap(),
            before
        );
        assert_eq!((repair.kept, repair.dropped), (2, 1));
        assert_eq!(repair.torn.map(|t| t.line), Some(4));
        let note = repair.torn_note(&d).unwrap();
        assert!(note.contains("torn line") && !note.contains('\n'), "{note}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
