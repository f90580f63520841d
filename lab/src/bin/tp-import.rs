//! `tp-import --format hf DIR --out RUN`: a transformers GPT-2 folder (config.json +
//! model.safetensors) as a run directory whose checkpoint loads at any tp.

use clap::Parser;
use std::path::PathBuf;
use tp_harness::error::{exit_on_error, user};
use tp_lab::tools::import::{import_hf, ImportData};

#[derive(Parser, Debug)]
#[command(
    name = "tp-import",
    version,
    about = "Import a transformers GPT-2 (config.json + model.safetensors) as a tp-harness run"
)]
struct Args {
    /// The folder transformers' save_pretrained wrote (or the hub's GPT-2 files).
    dir: PathBuf,
    /// Input format (only `hf`: transformers' GPT2LMHeadModel).
    #[arg(long, default_value = "hf")]
    format: String,
    /// The new run directory (must not hold a run).
    #[arg(long)]
    out: PathBuf,
    /// The run's dataset (default `text`: GPT-2's BPE tokenizer); a char-level dataset
    /// for a model trained on one (e.g. exported from this harness).
    #[arg(long)]
    dataset: Option<String>,
    /// For `text`: the corpus to evaluate and fine-tune on (also settable later with
    /// `tp-train --init-from RUN --set text_path=PATH`).
    #[arg(long)]
    text_path: Option<String>,
}

fn real_main(a: &Args) -> anyhow::Result<()> {
    if a.format != "hf" {
        return Err(user(format!(
            "unknown import format `{}`: the only one is hf",
            a.format
        )));
    }
    let data = ImportData {
        dataset: a.dataset.clone(),
        text_path: a.text_path.clone(),
    };
    let r = import_hf(&a.dir, &a.out, &data)?;
    let m = &r.config.model.arch;
    tp_harness::say!(
        "imported {} parameters ({} layers, {} heads, n_embd {}, vocab {}, context {}) as pattern {} into {}",
        r.params,
        m.n_layer,
        m.n_head,
        m.n_embd,
        m.vocab_size,
        m.block_size,
        r.config.model.pattern,
        r.run.display()
    );
    tp_harness::say!("checkpoint: {}", r.checkpoint.display());
    let data_hint = match (&r.config.model.dataset[..], &r.config.model.text_path) {
        ("text", None) => " --set text_path=CORPUS",
        _ => "",
    };
    tp_harness::say!(
        "next: tp-train --init-from {} --pattern P{data_hint}   (fine-tune, any pattern)",
        r.run.display()
    );
    Ok(())
}

fn main() {
    let a = Args::parse();
    exit_on_error("tp-import", real_main(&a));
}
