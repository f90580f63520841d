//! `tp-eval`: a checkpoint's loss over a whole split, with the model sharded over any tp.

use crate::data::Split;
use crate::launch::job::load_dataset;
use crate::launch::threads::{configure_threads, on_tp_threads};
use crate::run_dir::EvalReport;
use anyhow::Result;
use tp_harness::model::Gpt;
use tp_harness::tp::StoredParams;
use tp_harness::train::full_eval::split_loss;
use tp_harness::train::generate::warn_if_other_function;

/// The loss of a run's latest checkpoint (or `checkpoint`) over all of `split`, on `tp`
/// ranks as threads (default: the run's). Each rank computes the same value.
pub fn eval_run(
    run_dir: &std::path::Path,
    checkpoint: Option<&std::path::Path>,
    split: Split,
    tp: Option<usize>,
) -> Result<EvalReport> {
    let (cfg, ck) = crate::run_dir::load_checkpoint(
        run_dir,
        checkpoint,
        "evaluate",
        crate::run_dir::Need::Weights,
    )?;
    let data = load_dataset(&cfg)?;
    let mcfg = cfg.model_config(data.vocab_size())?;
    let tp = tp.unwrap_or(ck.meta.config.parallel.tp);
    mcfg.check(tp).map_err(tp_harness::error::user)?;
    let layout = cfg.layout();
    warn_if_other_function(layout, ck.meta.config.parallel.tp, tp);
    configure_threads(tp);
    let tokens = data.split(split);
    let losses = on_tp_threads(tp, |comm| {
        let source = StoredParams {
            tensors: ck.weights.clone(),
        };
        let model = Gpt::build_on(&mcfg, layout, &source, &comm, &candle_core::Device::Cpu)?;
        split_loss(&model, tokens, mcfg.block_size, cfg.optim.batch_size)
    })?;
    let l = losses[0];
    if !l.loss.is_finite() {
        tp_harness::user_bail!(
            "the loss of {} over the {} split is {} although its weights are finite (the model overflows): nothing was written",
            ck.dir.display(),
            split.label(),
            l.loss
        );
    }
    Ok(EvalReport {
        loss: l.loss,
        tokens: l.tokens,
        split,
        tp,
        checkpoint: ck.dir.display().to_string(),
        step: ck.meta.step,
    })
}
