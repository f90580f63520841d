//! `tp-export RUN_DIR --format hf [--out DIR] [--as-gpt2]`: write a run's latest
//! checkpoint for transformers: GPT-2 itself for a t-only LayerNorm model with biases,
//! any other with its modelling code (`trust_remote_code=True`); the dataset's tokenizer
//! beside it.

use clap::Parser;
use std::path::PathBuf;
use tp_harness::error::{exit_on_error, user};
use tp_lab::hf::export::{hf_export, write_export};
use tp_lab::run_dir::{check_out, load_checkpoint, Need};

#[derive(Parser, Debug)]
#[command(name = "tp-export", version, about = "Export a tp-harness checkpoint")]
struct Args {
    run_dir: PathBuf,
    /// Output format (only `hf`: transformers' AutoModelForCausalLM).
    #[arg(long, default_value = "hf")]
    format: String,
    /// Output folder (default RUN_DIR/export-hf); never inside a run's checkpoints, and
    /// a folder holding a model tp-export did not write is refused.
    #[arg(long)]
    out: Option<PathBuf>,
    /// A specific checkpoint directory of the run instead of its latest.
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// Write a t-only LayerNorm model trained without biases as GPT-2 itself, with zero
    /// biases: the same function, loadable by any GPT-2 tool without remote code, but
    /// the zeros are parameters a fine-tune moves (default: its modelling code, no biases).
    #[arg(long)]
    as_gpt2: bool,
}

fn real_main(a: &Args) -> anyhow::Result<(PathBuf, bool)> {
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
    let tok = tp_lab::tools::sample::run_tokenizer(&cfg);
    if let Err(e) = &tok {
        tp_harness::say!(
            "tp-export: note: no tokenizer is exported ({e}); the model's ids are the dataset's"
        );
    }
    let export = hf_export(
        &ck.weights,
        &cfg.model_config(vocab)?,
        cfg.layout(),
        ck.meta.config.parallel.tp,
        tok.as_ref().ok(),
        a.as_gpt2,
    )?;
    write_export(&out, &export)?;
    Ok((out, export.gpt2))
}

fn main() {
    let a = Args::parse();
    exit_on_error(
        "tp-export",
        real_main(&a).map(|(out, gpt2)| {
            let load = if gpt2 {
                "transformers.GPT2LMHeadModel.from_pretrained(DIR)"
            } else {
                "transformers.AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)"
            };
            tp_harness::say!("wrote {}: load it with {load}", out.display())
        }),
    );
}
