//! Rank 0's reporter: the JSONL log (through the run directory's writer), a progress bar
//! and evaluation lines on stdout.

use crate::comm::CommDtype;
use crate::config::RunConfig;
use crate::run_dir::{LogLine, LogWriter, RunDir};
use crate::train::record::{ParamCounts, Reporter, StepRecord};
use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};

pub struct ConsoleReporter {
    log: LogWriter,
    bar: ProgressBar,
}

impl ConsoleReporter {
    pub fn new(dir: &RunDir, max_iters: usize, show_progress: bool) -> Result<Self> {
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
        Ok(Self {
            log: dir.log_writer()?,
            bar,
        })
    }

    fn say(&self, line: String) {
        if self.bar.is_hidden() {
            crate::say!("{line}");
        } else {
            self.bar.println(line);
        }
    }
}

impl Reporter for ConsoleReporter {
    fn started(&mut self, cfg: &RunConfig, params: ParamCounts) {
        self.say(format!(
            "model: {} parameters ({} on each TP rank{}{}), pattern {}, tp {} x dp {}, global batch {} x {} tokens",
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
            cfg.model.arch.block_size
        ));
    }

    fn logged(&mut self, line: &LogLine) -> Result<()> {
        self.log.write(line)?;
        if let (Some(tr), Some(va)) = (line.eval_train_loss, line.val_loss) {
            self.say(format!(
                "step {:>6}: train loss {tr:.4}, val loss {va:.4}",
                line.step
            ));
        }
        Ok(())
    }

    fn step_done(&mut self, record: &StepRecord, tokens_per_s: f64) {
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
