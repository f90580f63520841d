//! Rank 0's reporter: the JSONL log (through the run directory's writer), a progress bar
//! and evaluation lines on stdout.

use super::metrics::{tensorboard_dir, Metrics};
use super::outcome::Reporter;
use crate::config::RunConfig;
use crate::run_dir::{LogLine, LogWriter, RunDir};
use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use tp_harness::comm::{CommDtype, TallySnapshot};
use tp_harness::train::record::{ParamCounts, StepRecord};

pub struct ConsoleReporter {
    log: LogWriter,
    bar: ProgressBar,
    /// TensorBoard's event file, with `tensorboard: true`.
    metrics: Option<Metrics>,
}

impl ConsoleReporter {
    /// `resumed_at`: the step a resumed run continues from.
    pub fn new(
        dir: &RunDir,
        cfg: &RunConfig,
        show_progress: bool,
        resumed_at: Option<usize>,
    ) -> Result<Self> {
        let metrics = if cfg.eval.tensorboard {
            let m = Metrics::create(&tensorboard_dir(cfg, &dir.path), resumed_at)?;
            tp_harness::say!(
                "tensorboard: {} (tensorboard --logdir {})",
                m.path().display(),
                m.path()
                    .parent()
                    .map_or(".".into(), |p| p.display().to_string())
            );
            Some(m)
        } else {
            None
        };
        let bar = if show_progress {
            let b = ProgressBar::new(cfg.optim.max_iters as u64);
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
        Ok(Self {
            log: dir.log_writer()?,
            bar,
            metrics,
        })
    }

    fn say(&self, line: String) {
        if self.bar.is_hidden() {
            tp_harness::say!("{line}");
        } else {
            self.bar.println(line);
        }
    }
}

impl Reporter for ConsoleReporter {
    fn started(&mut self, cfg: &RunConfig, params: ParamCounts) {
        self.say(format!(
            "model: {} parameters ({} on each TP rank{}{}), pattern {}, tp {} x dp {}, global batch {} x {} tokens{}",
            params.logical,
            params.local,
            if cfg.parallel.vocab_parallel {
                ", vocab-parallel"
            } else {
                ""
            },
            match cfg.parallel.comm_dtype {
                CommDtype::F32 => String::new(),
                q => format!(", TP all-reduces in {}", q.label()),
            },
            cfg.model.pattern,
            cfg.parallel.tp,
            cfg.parallel.dp,
            cfg.global_batch(),
            cfg.model.arch.block_size,
            match params.grad_bucket_bytes {
                Some(b) => format!(
                    ", gradient sums during backprop in buckets of {:.2} MiB (ddp_bucket_mb {})",
                    b as f64 / (1 << 20) as f64,
                    cfg.parallel.ddp_bucket_mb.label()
                ),
                None => String::new(),
            }
        ));
    }

    fn resumed(&mut self, step: usize, comm: &TallySnapshot) {
        if let Some(m) = &mut self.metrics {
            m.resumed(step, comm);
        }
    }

    fn logged(&mut self, line: &LogLine, comm: &TallySnapshot) -> Result<()> {
        self.log.write(line)?;
        if let Some(m) = &mut self.metrics {
            m.logged(line, comm)?;
        }
        if let (Some(tr), Some(va)) = (line.eval_train_loss, line.val_loss) {
            self.say(format!(
                "step {:>6}: train loss {tr:.4}, val loss {va:.4}",
                line.step
            ));
        }
        Ok(())
    }

    fn step_done(&mut self, record: &StepRecord, tokens_per_s: f64) {
        if let Some(m) = &mut self.metrics {
            m.step_done(record.grad_norm);
        }
        self.bar.set_position(record.step as u64 + 1);
        self.bar.set_message(format!(
            "loss {:.4} | {tokens_per_s:.0} tok/s",
            record.local_loss
        ));
    }

    fn finished(&mut self) {
        self.bar.finish_and_clear();
    }
}
