//! `tp-sample`: text from a run's checkpoint, with the model sharded over any tp.

use crate::data::{TextStream, Tokenizer, TEXT};
use crate::launch::job::load_dataset;
use crate::launch::threads::{configure_threads, on_tp_threads};
use anyhow::Result;
use tp_harness::model::Gpt;
use tp_harness::tp::StoredParams;
use tp_harness::train::generate::{generate_each, warn_if_other_function, SampleOptions};

/// The most tokens tp-sample generates in one call.
pub const MAX_SAMPLE_TOKENS: usize = 1_000_000;

/// The tokenizer a run's ids belong to. GPT-2's BPE needs no corpus: an imported model
/// samples (and exports) before any text is named.
pub fn run_tokenizer(cfg: &crate::config::RunConfig) -> Result<Tokenizer> {
    let bpe = cfg.model.text_tokenizer != Some(crate::data::TextTokenizer::Char);
    Ok(if cfg.model.dataset == TEXT && bpe {
        Tokenizer::Gpt2Bpe
    } else {
        load_dataset(cfg)?.tokenizer().clone()
    })
}

/// Generates text from a run's latest checkpoint (or `checkpoint` if given) with the
/// model sharded over `tp` ranks as threads. Returns the prompt's continuation, and hands
/// it to `each` piece by piece as it is generated (a million tokens take minutes).
pub fn sample_run(
    run_dir: &std::path::Path,
    checkpoint: Option<&std::path::Path>,
    prompt: Option<&str>,
    tp: Option<usize>,
    opts: &SampleOptions,
    each: &(dyn Fn(&str) + Sync),
) -> Result<String> {
    if opts.tokens > MAX_SAMPLE_TOKENS {
        tp_harness::user_bail!(
            "--tokens must be at most {MAX_SAMPLE_TOKENS}, got {}: sample in several calls (--prompt continues a text)",
            opts.tokens
        );
    }
    if !(opts.temperature > 0.0 && opts.temperature.is_finite()) {
        tp_harness::user_bail!(
            "--temperature must be a positive number, got {}",
            opts.temperature
        );
    }
    let (cfg, ck) = crate::run_dir::load_checkpoint(
        run_dir,
        checkpoint,
        "sample from",
        crate::run_dir::Need::Weights,
    )?;
    let tok = run_tokenizer(&cfg)?;
    let mcfg = cfg.model_config(tok.vocab_size())?;
    let tp = tp.unwrap_or(ck.meta.config.parallel.tp);
    mcfg.check(tp).map_err(tp_harness::error::user)?;
    let layout = cfg.layout();
    warn_if_other_function(layout, ck.meta.config.parallel.tp, tp);
    let prompt_ids = match prompt {
        Some(p) if !p.is_empty() => tok.encode(p).map_err(tp_harness::error::user)?,
        _ => tok.start_tokens(),
    };
    configure_threads(tp);
    // Sampling a few hundred tokens is CPU work whatever the run trained on.
    let device = candle_core::Device::Cpu;
    // Every rank draws the same tokens; rank 0 hands them on.
    let stream = std::sync::Mutex::new(TextStream::new(&tok));
    let out = on_tp_threads(tp, |comm| {
        let source = StoredParams {
            tensors: ck.weights.clone(),
        };
        let first = comm.rank() == 0;
        let model = Gpt::build_on(&mcfg, layout, &source, &comm, &device)?;
        generate_each(&model, &prompt_ids, opts, &mut |id| {
            if first {
                let piece = stream.lock().map(|mut s| s.push(id)).ok().flatten();
                if let Some(text) = piece {
                    each(&text);
                }
            }
        })
    })?;
    let rest = stream.lock().map(|mut s| s.finish()).unwrap_or_default();
    if !rest.is_empty() {
        each(&rest);
    }
    Ok(tok.decode(&out[0]))
}
