//! `tp-import --format hf DIR --out RUN`: a transformers GPT-2 folder as a run directory
//! whose step-0 checkpoint loads at any tp, fine-tunes with `tp-train --init-from RUN`
//! (under any pattern) and is read by tp-eval, tp-sample, tp-scan and tp-export.
//!
//! The run's data defaults to `text` (GPT-2's BPE tokenizer, what every published GPT-2
//! was trained with); `text_path` names the corpus to evaluate or fine-tune on and may be
//! given later. The vocabulary is kept exactly (50257 for the published models): padding
//! rows would take probability mass the original never gives; `vocab_parallel` splits it
//! as if padded.

use crate::config::RunConfig;
use crate::data::{GPT2_VOCAB, TEXT};
use crate::hf::format::from_hf;
use crate::launch::job::checked_dataset;
use crate::run_dir::checkpoint::{self, CheckpointState, CheckpointTensors, ParamInfo};
use crate::run_dir::RunDir;
use anyhow::Result;
use candle_core::Tensor;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tp_harness::comm::CountedComm;
use tp_harness::model::Gpt;
use tp_harness::tp::StoredParams;
use tp_harness::user_bail;

/// Where the imported run's data and tokenizer come from.
#[derive(Debug, Clone, Default)]
pub struct ImportData {
    /// A dataset name (default `text`: GPT-2's BPE).
    pub dataset: Option<String>,
    /// For `text`: the corpus (a UTF-8 file or folder).
    pub text_path: Option<String>,
}

/// What an import wrote.
#[derive(Debug, Clone)]
pub struct Imported {
    pub run: PathBuf,
    pub checkpoint: PathBuf,
    pub config: RunConfig,
    pub params: usize,
}

/// The run configuration of an imported model: the `gpt2` preset's training keys, the
/// model's own shape, a `t` block per layer.
fn run_config(model: tp_harness::model::ModelConfig, data: &ImportData) -> Result<RunConfig> {
    let mut cfg = RunConfig::for_preset("gpt2")?;
    let pattern = match model.n_layer {
        1 => "t".to_string(),
        n => format!("{n}xt"),
    };
    cfg.model.pattern =
        tp_harness::blocks::BlockLayout::parse(&pattern).map_err(tp_harness::error::user)?;
    cfg.model.dataset = data.dataset.clone().unwrap_or_else(|| TEXT.into());
    cfg.model.text_path = data.text_path.clone();
    if cfg.model.dataset == TEXT {
        // A transformers GPT-2 reads GPT-2's BPE, whatever the corpus's size.
        cfg.model.text_tokenizer = Some(crate::data::TextTokenizer::Gpt2);
    }
    cfg.model.arch = model;
    if cfg.model.dataset == TEXT && cfg.model.arch.vocab_size < GPT2_VOCAB {
        user_bail!(
            "the model has {} tokens, fewer than GPT-2's BPE ({GPT2_VOCAB}): give --dataset with the tokenizer it was trained with (e.g. shakespeare_char)",
            cfg.model.arch.vocab_size
        );
    }
    cfg.validate()?;
    if cfg.model.dataset != TEXT || cfg.model.text_path.is_some() {
        // The data is named now: check it fits the model before anything is written.
        checked_dataset(&cfg)?;
    }
    Ok(cfg)
}

/// Imports the transformers GPT-2 folder `src` into a new run directory `out`.
pub fn import_hf(src: &Path, out: &Path, data: &ImportData) -> Result<Imported> {
    crate::run_dir::check_out(out, "--out")?;
    let (model, weights) = from_hf(src)?;
    let cfg = run_config(model, data)?;
    let layout = cfg.layout();
    // Built once at tp 1: every parameter the model needs is there with its shape, and
    // the checkpoint lists them as a trained run's does.
    let built = Gpt::build(
        &cfg.model.arch,
        layout,
        &StoredParams {
            tensors: weights.clone(),
        },
        &CountedComm::solo(),
    )?;
    let params: Vec<ParamInfo> = built
        .params()
        .iter()
        .map(|p| ParamInfo {
            name: p.name.clone(),
            shape: p.full_shape.clone(),
            kind: Some(p.kind),
        })
        .collect();
    let n_params = built.params().logical_numel();
    drop(built);
    // A fresh AdamW: zero moments at step 0.
    let zeros = |w: &HashMap<String, Tensor>| -> Result<HashMap<String, Tensor>> {
        w.iter()
            .map(|(k, t)| Ok((k.clone(), t.zeros_like()?)))
            .collect()
    };
    let (m, v) = (zeros(&weights)?, zeros(&weights)?);
    let dir = RunDir::create(out)?;
    dir.write_config(&cfg)?;
    let ck = checkpoint::write(
        &dir.path,
        CheckpointState {
            step: 0,
            config: &cfg,
            adam_steps: 0,
            best_val_loss: None,
            // Nothing communicated yet.
            history: Some(checkpoint::RunHistory {
                steps: 0,
                passes: 0,
                shape: checkpoint::CommShape::of(&cfg),
                tally: Default::default(),
            }),
            // Imported, not trained: no time spent, no data seen.
            wall_seconds: Some(0.0),
            data_sha256: None,
            pause_mid_write: None,
        },
        CheckpointTensors {
            weights,
            m,
            v,
            params,
        },
    )?;
    Ok(Imported {
        run: out.to_path_buf(),
        checkpoint: ck,
        config: cfg,
        params: n_params,
    })
}
