//! `tp-eval RUN_DIR`: a checkpoint's mean cross-entropy over a whole split, at any tp.

use clap::Parser;
use std::path::PathBuf;
use tp_harness::error::exit_on_error;
use tp_lab::data::Split;
use tp_lab::run_dir::{write_eval_into, write_eval_to, DirLock};
use tp_lab::tools::eval::eval_run;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "tp-eval",
    version,
    about = "Loss of a tp-harness checkpoint over a whole split (every token, deterministic); writes eval.json"
)]
struct Args {
    /// A run directory (its latest checkpoint unless --checkpoint).
    run_dir: PathBuf,
    /// The split to evaluate.
    #[arg(long, value_enum, default_value_t = Split::Val)]
    split: Split,
    /// Tensor-parallel ranks (threads) to shard the model over (default: the run's tp).
    /// `s` and `p` blocks compute a different function at another tp (blocks.md).
    #[arg(long)]
    tp: Option<usize>,
    /// A specific checkpoint directory instead of the latest.
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// Where to write the report (default RUN_DIR/eval.json, or eval-train.json): a run
    /// on a read-only medium is evaluated all the same, its report written here.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

fn main() {
    tp_lab::alloc::keep_freed_memory();
    let a = Args::parse();
    let split = a.split;
    let run = || -> anyhow::Result<()> {
        // It writes into the run: refused at once, not after the evaluation, while a
        // trainer owns it.
        DirLock::check_free(&a.run_dir)?;
        let r = eval_run(&a.run_dir, a.checkpoint.as_deref(), split, a.tp)?;
        tp_harness::say!(
            "{} loss {:.6} over {} predictions (checkpoint {}, step {}, tp {})",
            r.split.label(),
            r.loss,
            r.tokens,
            r.checkpoint,
            r.step,
            r.tp
        );
        let written = match &a.out {
            Some(file) => write_eval_to(file, &r).map(|_| file.clone()),
            None => write_eval_into(&a.run_dir, &r),
        }?;
        tp_harness::say!("report: {}", written.display());
        Ok(())
    };
    exit_on_error("tp-eval", run());
}
