//! One training run end to end: data, run directory, ranks, reports.

use super::config::RunConfig;
use super::launch::{configure_threads, run_threads};
use super::rank::{RankOptions, TrainOutcome};
use super::report::CommReport;
use super::run_dir::{default_run_path, RunDir};
use crate::data::{data_root, prepare, Dataset};
use crate::error::user;
use anyhow::Result;
use std::path::PathBuf;

pub struct RunResult {
    pub dir: PathBuf,
    pub report: CommReport,
    pub outcomes: Vec<TrainOutcome>,
}

/// Loads (preparing if needed) the configured dataset.
pub fn load_dataset(cfg: &RunConfig) -> Result<Dataset> {
    let dir = prepare(&cfg.dataset, &data_root())?;
    Dataset::load(&dir)
}

pub fn run(cfg: &RunConfig, out: Option<PathBuf>, progress: bool) -> Result<RunResult> {
    cfg.validate()?;
    // Everything that can fail on user input is checked before the run directory exists.
    let data = load_dataset(cfg)?;
    cfg.model_config(data.vocab().len())?
        .check(cfg.tp)
        .map_err(user)?;
    let layout = cfg.layout()?;
    let path = out.unwrap_or_else(|| default_run_path(&cfg.pattern));
    let dir = RunDir::create(&path)?;
    dir.write("config.yaml", &cfg.to_yaml()?)?;
    let threads = configure_threads(cfg.tp * cfg.dp);
    println!(
        "tp-train: {} on {} ({} tokens of vocab {}), {} rank(s) as threads x {} math thread(s) each",
        cfg.preset,
        cfg.dataset,
        data.train.len(),
        data.vocab().len(),
        cfg.tp * cfg.dp,
        threads
    );
    println!("run directory: {}", path.display());
    let mut reporter = dir.reporter(cfg.max_iters, progress)?;
    let outcomes = run_threads(cfg, &data, Some(&mut reporter), RankOptions::default())?;
    let report = CommReport::new(cfg, &layout, &outcomes[0]);
    dir.write("comm.json", &report.to_json()?)?;
    dir.write("sample.txt", &outcomes[0].sample)?;
    println!("{}", report.table());
    if !outcomes[0].sample.is_empty() {
        println!("sample:\n{}\n", outcomes[0].sample);
    }
    if let Some(last) = outcomes[0].log.iter().rev().find(|l| l.val_loss.is_some()) {
        println!(
            "final: step {}, train loss {:.4}, val loss {:.4}",
            last.step,
            last.eval_train_loss.unwrap_or(f32::NAN),
            last.val_loss.unwrap_or(f32::NAN)
        );
    }
    println!(
        "outputs in {}: config.yaml, log.jsonl, comm.json, sample.txt",
        path.display()
    );
    Ok(RunResult {
        dir: path,
        report,
        outcomes,
    })
}
