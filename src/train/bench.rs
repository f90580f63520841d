//! `tp-train --bench`: steady-state step time of a configuration, split into forward,
//! backward, gradient sync, optimiser and communication.

use super::config::RunConfig;
use super::launch::{configure_threads, run_threads};
use super::rank::{RankIo, RankOptions, TrainOutcome};
use super::run::load_dataset;
use crate::error::user;
use crate::tp::CommKind;
use anyhow::Result;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    pub preset: String,
    pub pattern: String,
    pub tp: usize,
    pub dp: usize,
    pub math_threads_per_rank: usize,
    /// Emulated link (0: none).
    pub link_gbps: f64,
    pub link_latency_us: f64,
    pub batch_size: usize,
    pub block_size: usize,
    pub measured_steps: usize,
    /// Median wall-clock ms of the measured steps.
    pub ms_per_step: f64,
    pub tokens_per_s: f64,
    /// Median ms per measured step of each phase on rank 0 (communication happens inside
    /// forward, backward and grad_sync; `comm_ms`, a mean over all steps, is that share).
    pub forward_ms: f64,
    pub backward_ms: f64,
    pub grad_sync_ms: f64,
    pub optimizer_ms: f64,
    pub comm_ms: f64,
}

/// The configuration a benchmark runs: `warmup + steps` steps, no evaluation, no sample.
pub fn bench_config(cfg: &RunConfig, warmup: usize, steps: usize) -> RunConfig {
    let mut cfg = cfg.clone();
    cfg.max_iters = warmup + steps;
    cfg.eval_interval = 0;
    cfg.sample_tokens = 0;
    cfg
}

/// Step-time figures from a benchmark run's rank-0 outcome.
pub fn summarize(cfg: &RunConfig, o: &TrainOutcome, warmup: usize) -> BenchResult {
    let median = |mut v: Vec<f64>| -> f64 {
        v.sort_by(|a, b| a.total_cmp(b));
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let skip = warmup.min(o.step_ms.len());
    let ms = median(o.step_ms[skip..].to_vec());
    let phase = |i: usize| median(o.step_phases[skip..].iter().map(|p| p[i] * 1e3).collect());
    let n = o.times.steps.max(1) as f64;
    let comm: f64 = CommKind::ALL
        .iter()
        .map(|k| o.tally.total(*k).seconds)
        .sum();
    BenchResult {
        preset: cfg.preset.clone(),
        pattern: cfg.pattern.clone(),
        tp: cfg.tp,
        dp: cfg.dp,
        math_threads_per_rank: std::env::var("RAYON_NUM_THREADS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1),
        link_gbps: cfg.link_gbps,
        link_latency_us: cfg.link_latency_us,
        batch_size: cfg.batch_size,
        block_size: cfg.block_size,
        measured_steps: o.step_ms.len() - skip,
        ms_per_step: ms,
        tokens_per_s: cfg.tokens_per_step() as f64 / (ms / 1e3),
        forward_ms: phase(0),
        backward_ms: phase(1),
        grad_sync_ms: phase(2),
        optimizer_ms: phase(3),
        comm_ms: comm / n * 1e3,
    }
}

/// Benchmarks `cfg` with ranks as threads in this process.
pub fn bench(cfg: &RunConfig, warmup: usize, steps: usize) -> Result<BenchResult> {
    let cfg = bench_config(cfg, warmup, steps);
    cfg.validate()?;
    let data = load_dataset(&cfg)?;
    cfg.model_config(data.vocab_size())?
        .check(cfg.tp)
        .map_err(user)?;
    configure_threads(cfg.tp * cfg.dp);
    let opts = RankOptions {
        keep_params: false,
        skip_sample: true,
    };
    let out = run_threads(&cfg, &data, None, opts, RankIo::default())?;
    Ok(summarize(&cfg, &out[0], warmup))
}

impl BenchResult {
    /// Prints the result and writes `out/bench.json`.
    pub fn report(&self, out: &std::path::Path) -> Result<()> {
        println!("{}", self.line());
        std::fs::create_dir_all(out)?;
        super::run_dir::write_atomic(
            &out.join("bench.json"),
            serde_json::to_string_pretty(self)?.as_bytes(),
        )?;
        println!("bench.json in {}", out.display());
        Ok(())
    }

    pub fn line(&self) -> String {
        format!(
            "{} {} tp {} dp {} ({} thread(s)/rank): {:.1} ms/step, {:.0} tokens/s | forward {:.1} ms, backward {:.1} ms, grad sync {:.1} ms, optimizer {:.1} ms; communication {:.1} ms of it",
            self.preset,
            self.pattern,
            self.tp,
            self.dp,
            self.math_threads_per_rank,
            self.ms_per_step,
            self.tokens_per_s,
            self.forward_ms,
            self.backward_ms,
            self.grad_sync_ms,
            self.optimizer_ms,
            self.comm_ms
        )
    }
}
