//! A run directory: `config.yaml` (resolved), `log.jsonl`, `comm.json`, `sample.txt`.
//! Only rank 0 writes. A directory that already holds a run is never overwritten.

use super::config::RunConfig;
use super::rank::{LogLine, Reporter};
use crate::user_bail;
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

pub struct RunDir {
    pub path: PathBuf,
}

/// `runs/<timestamp>-<pattern>`, the pattern made safe for a file name.
pub fn default_run_path(pattern: &str) -> PathBuf {
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
    let safe: String = pattern
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    PathBuf::from("runs").join(format!("{stamp}-{safe}"))
}

/// Writes `contents` to `path` atomically (temporary file, fsync, rename).
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
    // Unique per process: concurrent writers never share a temporary file.
    let tmp = path.with_file_name(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    {
        let mut f =
            File::create(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
        f.write_all(contents)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

impl RunDir {
    pub fn create(path: &Path) -> Result<Self> {
        if path.join("log.jsonl").exists() || path.join("config.yaml").exists() {
            user_bail!(
                "{} already holds a run; choose another --out (nothing was changed)",
                path.display()
            );
        }
        std::fs::create_dir_all(path)
            .with_context(|| format!("cannot create run directory {}", path.display()))?;
        Ok(Self {
            path: path.to_path_buf(),
        })
    }

    /// Reopens a run directory to resume at `step`: log lines from `step` on (written after
    /// the checkpoint, or the final evaluation line of a finished run) are dropped, so the
    /// resumed run continues the log exactly.
    pub fn reopen(path: &Path, step: usize) -> Result<Self> {
        let log_path = path.join("log.jsonl");
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        let kept: String = text
            .lines()
            .filter(|l| {
                serde_json::from_str::<serde_json::Value>(l)
                    .ok()
                    .and_then(|v| v["step"].as_u64())
                    .is_some_and(|s| (s as usize) < step)
            })
            .map(|l| format!("{l}\n"))
            .collect();
        write_atomic(&log_path, kept.as_bytes())?;
        Ok(Self {
            path: path.to_path_buf(),
        })
    }

    pub fn write(&self, name: &str, contents: &str) -> Result<()> {
        write_atomic(&self.path.join(name), contents.as_bytes())
    }

    pub fn reporter(&self, max_iters: usize, show_progress: bool) -> Result<ConsoleReporter> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path.join("log.jsonl"))?;
        let bar = if show_progress {
            let b = ProgressBar::new(max_iters as u64);
            b.set_style(
                ProgressStyle::with_template(
                    "{bar:30} {pos}/{len} [{elapsed_precise}<{eta_precise}] {msg}",
                )
                .expect("valid template"),
            );
            b
        } else {
            ProgressBar::hidden()
        };
        Ok(ConsoleReporter {
            log: BufWriter::new(log),
            bar,
        })
    }
}

/// Rank 0's reporter: the JSONL log, a progress bar and evaluation lines on stdout.
pub struct ConsoleReporter {
    log: BufWriter<File>,
    bar: ProgressBar,
}

impl ConsoleReporter {
    fn say(&self, line: String) {
        if self.bar.is_hidden() {
            println!("{line}");
        } else {
            self.bar.println(line);
        }
    }
}

impl Reporter for ConsoleReporter {
    fn started(&mut self, cfg: &RunConfig, logical_params: usize) {
        self.say(format!(
            "model: {} parameters, pattern {}, tp {} x dp {}, global batch {} x {} tokens",
            logical_params,
            cfg.pattern,
            cfg.tp,
            cfg.dp,
            cfg.batch_size * cfg.gradient_accumulation_steps * cfg.dp,
            cfg.block_size
        ));
    }

    fn logged(&mut self, line: &LogLine) -> Result<()> {
        serde_json::to_writer(&mut self.log, line)?;
        self.log.write_all(b"\n")?;
        self.log.flush()?;
        if let (Some(tr), Some(va)) = (line.eval_train_loss, line.val_loss) {
            self.say(format!(
                "step {:>6}: train loss {tr:.4}, val loss {va:.4}",
                line.step
            ));
        }
        Ok(())
    }

    fn step_done(&mut self, step: usize, loss: f32, tokens_per_s: f64) {
        self.bar.set_position(step as u64 + 1);
        self.bar
            .set_message(format!("loss {loss:.4} | {tokens_per_s:.0} tok/s"));
    }

    fn finished(&mut self) {
        self.bar.finish_and_clear();
    }
}
