//! `tp-sample RUN_DIR`: generate text from a run's latest checkpoint, at any tp.

use clap::Parser;
use std::path::PathBuf;
use tp_harness::error::exit_on_error;
use tp_harness::train::generate::SampleOptions;
use tp_lab::tools::sample::sample_run;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "tp-sample",
    version,
    about = "Generate text from a tp-harness checkpoint"
)]
struct Args {
    /// A run directory (its latest checkpoint is used).
    run_dir: PathBuf,
    /// Text to continue (default: a line break, or GPT-2's <|endoftext|>).
    #[arg(long)]
    prompt: Option<String>,
    /// Tokens to generate.
    #[arg(long, default_value_t = 500)]
    tokens: usize,
    #[arg(long, default_value_t = 0.8)]
    temperature: f64,
    /// Sample among the k most likely tokens only (0: all).
    #[arg(long, default_value_t = 200)]
    top_k: usize,
    /// Tensor-parallel ranks (threads) to shard the model over (default: the run's tp).
    /// `s` and `p` blocks compute a different function at another tp (blocks.md).
    #[arg(long)]
    tp: Option<usize>,
    #[arg(long, default_value_t = 1337)]
    seed: u64,
    /// A specific checkpoint directory instead of the latest.
    #[arg(long)]
    checkpoint: Option<PathBuf>,
}

fn main() {
    tp_lab::alloc::keep_freed_memory();
    let a = Args::parse();
    let opts = SampleOptions {
        tokens: a.tokens,
        temperature: a.temperature,
        top_k: (a.top_k > 0).then_some(a.top_k),
        seed: a.seed,
    };
    // The prompt with the first piece (nothing at all if the checkpoint is refused),
    // then the continuation as it is generated.
    let prompt_once = std::sync::Once::new();
    let prompt = a.prompt.clone().unwrap_or_default();
    let sampled = sample_run(
        &a.run_dir,
        a.checkpoint.as_deref(),
        a.prompt.as_deref(),
        a.tp,
        &opts,
        &|piece| {
            prompt_once.call_once(|| tp_harness::say_raw!("{prompt}"));
            tp_harness::say_raw!("{piece}")
        },
    );
    exit_on_error("tp-sample", sampled.map(|_| tp_harness::say!()));
}
