//! `tp-export RUN_DIR --format hf [--out DIR]`: write a run's latest checkpoint in
//! Hugging Face's GPT-2 layout (model.safetensors + config.json).

use clap::Parser;
use std::path::PathBuf;
use tp_harness::error::{exit_on_error, user};
use tp_harness::model::hf::{to_hf, write_hf};
use tp_harness::run_dir::{check_out, load_checkpoint, Need};

#[derive(Parser, Debug)]
#[command(name = "tp-export", version, about = "Export a tp-harness checkpoint")]
struct Args {
    run_dir: PathBuf,
    /// Output format (only `hf`: transformers' GPT2LMHeadModel).
    #[arg(long, default_value = "hf")]
    format: String,
    /// Output folder (default RUN_DIR/export-hf); never inside a run's checkpoints, and
    /// a folder holding a model tp-export did not write is refused.
    #[arg(long)]
    out: Option<PathBuf>,
    /// A specific checkpoint directory of the run instead of its latest.
    #[arg(long)]
    checkpoint: Option<PathBuf>,
}

fn real_main(a: &Args) -> anyhow::Result<PathBuf> {
    if a.format != "hf" {
        return Err(user(format!(
            "unknown export format `{}`: the only one is hf",
            a.format
        )));
    }
    let out = a.out.clone().unwrap_or_else(|| a.run_dir.join("export-hf"));
    check_out(&out, "--out")?;
    let (cfg, ck) = load_checkpoint(&a.run_dir, a.checkpoint.as_deref(), "export", Need::Weights)?;
    let vocab = ck
        .weights
        .get("wte")
        .map(|t| t.dim(0))
        .transpose()?
        .unwrap_or(0);
    let (tensors, config) = to_hf(&ck.weights, &cfg.model_config(vocab)?, cfg.layout())?;
    write_hf(&out, &tensors, &config)?;
    Ok(out)
}

fn main() {
    let a = Args::parse();
    exit_on_error(
        "tp-export",
        real_main(&a).map(|out| {
            tp_harness::say!("wrote {}/model.safetensors and config.json (transformers.GPT2LMHeadModel.from_pretrained)", out.display())
        }),
    );
}
