//! `tp-train --bench`: steady-state step time of a configuration, split into forward,
//! backward, gradient sync, optimiser and communication.

use crate::comm::CommKind;
use crate::config::RunConfig;
use crate::launch::job::{checked_dataset, Job, RankOptions};
use crate::launch::threads::{configure_threads, run_threads};
use crate::ops::profile::OpKind;
use crate::train::record::RankOutcome;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchResult {
    pub preset: String,
    pub pattern: String,
    /// `fused` or `portable`.
    pub kernels: String,
    /// `cpu` or `cuda`, and the passes' `f32` or `bf16` (absent in older results: cpu, f32).
    #[serde(default = "cpu_label")]
    pub device: String,
    #[serde(default = "f32_label")]
    pub dtype: String,
    pub tp: usize,
    pub dp: usize,
    /// The embedding/head split by vocabulary over the TP group (absent in older results).
    #[serde(default)]
    pub vocab_parallel: bool,
    /// Parameters one TP rank holds, and their f32 bytes in MiB (0 in older results).
    #[serde(default)]
    pub params_per_rank: usize,
    #[serde(default)]
    pub param_mib_per_rank: f64,
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
    /// Mean ms per measured step of each kind of op on rank 0, then communication, then
    /// everything else (embeddings, residual adds, autograd's bookkeeping and gradient
    /// accumulation, gradient clipping).
    pub profile: Vec<OpShare>,
    /// FLOPs of a step over all ranks (matmuls and attention, forward and backward).
    pub flops_per_step: f64,
    /// Cores the run kept busy: ranks x math threads per rank.
    pub cores: usize,
    /// Achieved over the whole step, per core.
    pub gflops_per_core: f64,
    /// Achieved inside the matmuls (forward and backward), per core.
    pub matmul_gflops_per_core: f64,
    /// Best single-thread rate of a 512^3 matmul on this machine with the same kernels.
    pub matmul_ceiling_gflops_per_core: f64,
    /// The machine: one core's measured f32 FMA peak at the SIMD level the kernels ran at,
    /// that level, and the CPU model (absent in older results).
    #[serde(default)]
    pub fma_peak_gflops_per_core: f64,
    #[serde(default)]
    pub simd_level: String,
    #[serde(default)]
    pub cpu_model: String,
    /// Peak resident memory of the process in the measured steps (max, first, last):
    /// first == last means no growth across steps. 0 where /proc is unavailable.
    pub peak_rss_mb: f64,
    pub first_step_peak_rss_mb: f64,
    pub last_step_peak_rss_mb: f64,
}

fn cpu_label() -> String {
    "cpu".into()
}

fn f32_label() -> String {
    "f32".into()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpShare {
    pub op: String,
    pub ms: f64,
    /// Of the mean step time.
    pub share: f64,
    /// Achieved rate where the op counts FLOPs (per core of the rank).
    pub gflops_per_core: Option<f64>,
}

/// The configuration a benchmark runs: `warmup + steps` steps, no evaluation, no sample.
pub fn bench_config(cfg: &RunConfig, warmup: usize, steps: usize) -> RunConfig {
    let mut cfg = cfg.clone();
    cfg.optim.max_iters = warmup + steps;
    cfg.eval.eval_interval = 0;
    cfg.eval.sample_tokens = 0;
    cfg.eval.final_eval = crate::config::FinalEval::Sampled;
    cfg
}

/// Step-time figures from a benchmark run's rank-0 outcome.
pub fn summarize(cfg: &RunConfig, o: &RankOutcome, warmup: usize) -> BenchResult {
    let median = |mut v: Vec<f64>| -> f64 {
        v.sort_by(|a, b| a.total_cmp(b));
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let skip = warmup.min(o.steps.len());
    let measured = &o.steps[skip..];
    let ms = median(measured.iter().map(|s| s.ms).collect());
    let phase = |f: fn(&crate::train::record::Phases) -> f64| {
        median(measured.iter().map(|s| f(&s.phases) * 1e3).collect())
    };
    let n = o.steps.len().max(1) as f64;
    let comm: f64 = CommKind::ALL
        .iter()
        .map(|k| o.tally.total(*k).seconds)
        .sum();
    let threads = std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let steps = measured.len().max(1) as f64;
    let mean_step_ms = measured.iter().map(|s| s.ms).sum::<f64>() / steps;
    let mut profile = Vec::new();
    let (mut rank_flops, mut mm_flops, mut mm_s) = (0.0, 0.0, 0.0);
    for k in OpKind::ALL {
        let (sec, fl) = measured
            .iter()
            .map(|s| s.ops.get(k))
            .fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
        let (sec, fl) = (sec / steps, fl / steps);
        if k != OpKind::AdamW {
            rank_flops += fl;
        }
        if matches!(k, OpKind::MatmulFwd | OpKind::MatmulBwd) {
            mm_flops += fl;
            mm_s += sec;
        }
        profile.push(OpShare {
            op: k.name().into(),
            ms: sec * 1e3,
            share: sec * 1e3 / mean_step_ms,
            gflops_per_core: (fl > 0.0 && sec > 0.0).then(|| fl / sec / 1e9 / threads as f64),
        });
    }
    let comm_ms = comm / n * 1e3;
    profile.push(OpShare {
        op: "communication".into(),
        ms: comm_ms,
        share: comm_ms / mean_step_ms,
        gflops_per_core: None,
    });
    let accounted: f64 = profile.iter().map(|p| p.ms).sum();
    profile.push(OpShare {
        op: "other".into(),
        ms: mean_step_ms - accounted,
        share: (mean_step_ms - accounted) / mean_step_ms,
        gflops_per_core: None,
    });
    let ranks = cfg.parallel.tp * cfg.parallel.dp;
    let cores = ranks * threads;
    let flops_per_step = rank_flops * ranks as f64;
    let peaks: Vec<f64> = measured
        .iter()
        .filter_map(|s| s.peak_rss)
        .map(|b| b as f64 / (1 << 20) as f64)
        .collect();
    BenchResult {
        preset: cfg.model.preset.clone(),
        pattern: cfg.model.pattern.clone(),
        kernels: cfg.parallel.kernels.label().to_string(),
        device: cfg.parallel.device.label().to_string(),
        dtype: cfg.parallel.dtype.label().to_string(),
        tp: cfg.parallel.tp,
        dp: cfg.parallel.dp,
        vocab_parallel: cfg.parallel.vocab_parallel,
        params_per_rank: o.local_params,
        param_mib_per_rank: (o.local_params * 4) as f64 / (1 << 20) as f64,
        math_threads_per_rank: threads,
        link_gbps: cfg.parallel.link_gbps,
        link_latency_us: cfg.parallel.link_latency_us,
        batch_size: cfg.optim.batch_size,
        block_size: cfg.model.arch.block_size,
        measured_steps: measured.len(),
        ms_per_step: ms,
        tokens_per_s: cfg.tokens_per_step() as f64 / (ms / 1e3),
        forward_ms: phase(|p| p.forward),
        backward_ms: phase(|p| p.backward),
        grad_sync_ms: phase(|p| p.grad_sync),
        optimizer_ms: phase(|p| p.optimizer),
        comm_ms,
        profile,
        flops_per_step,
        cores,
        gflops_per_core: flops_per_step / (ms / 1e3) / 1e9 / cores as f64,
        matmul_gflops_per_core: if mm_s > 0.0 {
            mm_flops / mm_s / 1e9 / threads as f64
        } else {
            0.0
        },
        matmul_ceiling_gflops_per_core: matmul_ceiling_gflops(),
        fma_peak_gflops_per_core: crate::ops::peak::fma_peak_gflops(crate::ops::simd::level()),
        simd_level: crate::ops::simd::level().label().into(),
        cpu_model: crate::ops::peak::cpu_model(),
        peak_rss_mb: peaks.iter().copied().fold(0.0, f64::max),
        first_step_peak_rss_mb: peaks.first().copied().unwrap_or(0.0),
        last_step_peak_rss_mb: peaks.last().copied().unwrap_or(0.0),
    }
}

/// Best of ten single-thread 512 x 512 x 512 matmuls, in GFLOP/s: what one core reaches
/// with the kernels the model uses, on shapes big enough to hide their overheads.
pub fn matmul_ceiling_gflops() -> f64 {
    use crate::ops::gemm::{matmul, Mat, MatMut};
    const N: usize = 512;
    let a: Vec<f32> = (0..N * N).map(|i| (i % 97) as f32 * 0.01).collect();
    let mut c = vec![0f32; N * N];
    let mut best = f64::INFINITY;
    for _ in 0..10 {
        let t0 = std::time::Instant::now();
        matmul(
            MatMut::rows(&mut c, N, N),
            Mat::rows(&a, N, N),
            Mat::rows(&a, N, N),
            false,
            1,
        );
        best = best.min(t0.elapsed().as_secs_f64());
    }
    std::hint::black_box(&c);
    2.0 * (N * N * N) as f64 / best / 1e9
}

/// Benchmarks `cfg` with ranks as threads in this process.
pub fn bench(cfg: &RunConfig, warmup: usize, steps: usize) -> Result<BenchResult> {
    let cfg = bench_config(cfg, warmup, steps);
    let data = checked_dataset(&cfg)?;
    configure_threads(cfg.parallel.tp * cfg.parallel.dp);
    let opts = RankOptions {
        keep_params: false,
        skip_sample: true,
    };
    let job = Job::new(cfg, data, opts);
    let out = run_threads(&job, None, None)?;
    Ok(summarize(&job.cfg, &out[0], warmup))
}

impl BenchResult {
    /// Reads the `bench.json` a [`BenchResult::report`] wrote into `dir`.
    pub fn read(dir: &std::path::Path) -> Result<Self> {
        let path = dir.join("bench.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{} cannot be read", path.display()))
    }

    /// Prints the result and writes `out/bench.json`.
    pub fn report(&self, out: &std::path::Path) -> Result<()> {
        println!("{}", self.line());
        println!("{}", self.table());
        std::fs::create_dir_all(out)?;
        crate::util::write_atomic(
            &out.join("bench.json"),
            serde_json::to_string_pretty(self)?.as_bytes(),
        )?;
        println!("bench.json in {}", out.display());
        Ok(())
    }

    /// The per-op profile, FLOP rates and memory, as a text table.
    pub fn table(&self) -> String {
        let mut t = format!(
            "  {:<26} {:>9} {:>7} {:>14}\n",
            "op (rank 0, mean/step)", "ms", "share", "GFLOP/s/core"
        );
        for p in &self.profile {
            let rate = p
                .gflops_per_core
                .map_or(String::new(), |g| format!("{g:.1}"));
            t += &format!(
                "  {:<26} {:>9.2} {:>6.1}% {:>14}\n",
                p.op,
                p.ms,
                100.0 * p.share,
                rate
            );
        }
        t += &format!(
            "  {:.2} GFLOP/step on {} core(s): {:.1} GFLOP/s/core overall, {:.1} in matmuls; matmul ceiling of this machine {:.1} GFLOP/s/core ({:.0}% of it overall)\n",
            self.flops_per_step / 1e9,
            self.cores,
            self.gflops_per_core,
            self.matmul_gflops_per_core,
            self.matmul_ceiling_gflops_per_core,
            100.0 * self.gflops_per_core / self.matmul_ceiling_gflops_per_core
        );
        t += &format!(
            "  {} at {}: FMA peak {:.1} GFLOP/s/core measured; the matmul ceiling is {:.0}% of it, the whole step {:.0}%\n",
            self.cpu_model,
            self.simd_level,
            self.fma_peak_gflops_per_core,
            100.0 * self.matmul_ceiling_gflops_per_core / self.fma_peak_gflops_per_core,
            100.0 * self.gflops_per_core / self.fma_peak_gflops_per_core
        );
        t += &format!(
            "  {} parameters per TP rank ({:.1} MiB of f32 weights{}); peak RSS {:.0} MB (first measured step {:.0} MB, last {:.0} MB)",
            self.params_per_rank,
            self.param_mib_per_rank,
            if self.vocab_parallel {
                ", embedding vocab-parallel"
            } else {
                ""
            },
            self.peak_rss_mb,
            self.first_step_peak_rss_mb,
            self.last_step_peak_rss_mb
        );
        t
    }

    pub fn line(&self) -> String {
        format!(
            "{} {} tp {} dp {} on {} {} ({} thread(s)/rank, {} kernels{}): {:.1} ms/step, {:.0} tokens/s | forward {:.1} ms, backward {:.1} ms, grad sync {:.1} ms, optimizer {:.1} ms; communication {:.1} ms of it",
            self.preset,
            self.pattern,
            self.tp,
            self.dp,
            self.device,
            self.dtype,
            self.math_threads_per_rank,
            self.kernels,
            if self.vocab_parallel {
                ", vocab-parallel"
            } else {
                ""
            },
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
