//! `tp-train --bench`: steady-state step time of a configuration, split into forward,
//! backward, gradient sync, optimiser and communication.

pub mod run;

use crate::config::RunConfig;
use crate::launch::job::{checked_dataset, use_matmul_route, Job, RankOptions};
use crate::launch::outcome::RankOutcome;
use crate::launch::threads::{configure_threads, run_threads};
use crate::run_dir::bench::{BenchResult, GpuFigures, OpShare};
use anyhow::Result;
use tp_harness::comm::CommKind;
use tp_harness::device::{ComputeDtype, DeviceKind};
use tp_harness::ops::profile::OpKind;
use tp_harness::train::record::StepRecord;

/// The configuration a benchmark runs: `warmup + steps` steps, no evaluation, no sample.
pub fn bench_config(cfg: &RunConfig, warmup: usize, steps: usize) -> RunConfig {
    let mut cfg = cfg.clone();
    cfg.optim.max_iters = warmup + steps;
    cfg.eval.eval_interval = 0;
    cfg.eval.sample_tokens = 0;
    cfg.eval.final_eval = crate::config::FinalEval::Sampled;
    cfg
}

/// The mean step's time by kind of op (then communication, then the rest), and its
/// FLOPs: all of them on this rank, and the matmuls' with their seconds.
struct Profile {
    ops: Vec<OpShare>,
    rank_flops: f64,
    mm_flops: f64,
    mm_seconds: f64,
    /// The rank's FLOPs in forward ops and in backward ops (matmuls and attention).
    forward_flops: f64,
    backward_flops: f64,
}

fn profile(measured: &[StepRecord], comm_ms: f64, threads: usize) -> Profile {
    let steps = measured.len().max(1) as f64;
    let mean_step_ms = measured.iter().map(|s| s.ms).sum::<f64>() / steps;
    let mut ops = Vec::new();
    let (mut rank_flops, mut mm_flops, mut mm_seconds) = (0.0, 0.0, 0.0);
    let (mut forward_flops, mut backward_flops) = (0.0, 0.0);
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
            mm_seconds += sec;
        }
        match k {
            OpKind::MatmulFwd | OpKind::AttentionFwd => forward_flops += fl,
            OpKind::MatmulBwd | OpKind::AttentionBwd => backward_flops += fl,
            _ => {}
        }
        ops.push(OpShare {
            op: k.name().into(),
            ms: sec * 1e3,
            share: sec * 1e3 / mean_step_ms,
            gflops_per_core: (fl > 0.0 && sec > 0.0).then(|| fl / sec / 1e9 / threads as f64),
        });
    }
    ops.push(OpShare {
        op: "communication".into(),
        ms: comm_ms,
        share: comm_ms / mean_step_ms,
        gflops_per_core: None,
    });
    let accounted: f64 = ops.iter().map(|p| p.ms).sum();
    ops.push(OpShare {
        op: "other".into(),
        ms: mean_step_ms - accounted,
        share: (mean_step_ms - accounted) / mean_step_ms,
        gflops_per_core: None,
    });
    Profile {
        ops,
        rank_flops,
        mm_flops,
        mm_seconds,
        forward_flops,
        backward_flops,
    }
}

/// Step-time figures from a benchmark run's rank-0 outcome.
pub fn summarize(cfg: &RunConfig, o: &RankOutcome, warmup: usize) -> BenchResult {
    let median = |v: Vec<f64>| -> f64 { crate::analysis::median(v).unwrap_or(f64::NAN) };
    let skip = warmup.min(o.steps.len());
    let measured = &o.steps[skip..];
    let ms = median(measured.iter().map(|s| s.ms).collect());
    let phase = |f: fn(&tp_harness::train::record::Phases) -> f64| {
        median(measured.iter().map(|s| f(&s.phases) * 1e3).collect())
    };
    let n = o.steps.len().max(1) as f64;
    let (comm, hidden) = CommKind::all()
        .map(|k| o.tally.total(k))
        .fold((0.0, 0.0), |(c, h), s| {
            (c + s.seconds - s.hidden_seconds, h + s.hidden_seconds)
        });
    let threads = std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let comm_ms = comm / n * 1e3;
    let p = profile(measured, comm_ms, threads);
    let (rank_flops, mm_flops, mm_s) = (p.rank_flops, p.mm_flops, p.mm_seconds);
    let (forward_ms, backward_ms) = (phase(|p| p.forward), phase(|p| p.backward));
    let rate = |flops: f64, ms: f64| match ms > 0.0 {
        true => flops / (ms / 1e3) / 1e9 / threads as f64,
        false => 0.0,
    };
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
        pattern: cfg.model.pattern.to_string(),
        kernels: cfg.parallel.kernels,
        device: cfg.parallel.device,
        dtype: cfg.parallel.dtype,
        tp: cfg.parallel.tp,
        dp: cfg.parallel.dp,
        vocab_parallel: cfg.parallel.vocab_parallel,
        params_per_rank: o.param_counts.local,
        param_mib_per_rank: (o.param_counts.local * 4) as f64 / (1 << 20) as f64,
        math_threads_per_rank: threads,
        link_gbps: cfg.parallel.link_gbps,
        link_latency_us: cfg.parallel.link_latency_us,
        batch_size: cfg.optim.batch_size,
        block_size: cfg.model.arch.block_size,
        measured_steps: measured.len(),
        ms_per_step: ms,
        tokens_per_s: cfg.tokens_per_step() as f64 / (ms / 1e3),
        forward_ms,
        backward_ms,
        forward_gflops_per_core: rate(p.forward_flops, forward_ms),
        backward_gflops_per_core: rate(p.backward_flops, backward_ms),
        grad_bucket_bytes: o.param_counts.grad_bucket_bytes.map(|b| b as u64),
        grad_sync_ms: phase(|p| p.grad_sync),
        optimizer_ms: phase(|p| p.optimizer),
        comm_ms,
        comm_hidden_ms: hidden / n * 1e3,
        profile: p.ops,
        flops_per_step,
        cores,
        gflops_per_core: flops_per_step / (ms / 1e3) / 1e9 / cores as f64,
        matmul_gflops_per_core: if mm_s > 0.0 {
            mm_flops / mm_s / 1e9 / threads as f64
        } else {
            0.0
        },
        matmul_ceiling_gflops_per_core: matmul_ceiling_gflops(),
        fma_peak_gflops_per_core: tp_harness::ops::cpu::peak::fma_peak_gflops(
            tp_harness::ops::cpu::simd::level(),
        ),
        simd_level: tp_harness::ops::cpu::simd::level().label().into(),
        cpu_model: tp_harness::util::host::cpu(),
        matmul: crate::launch::job::blas_in_use(cfg).map_or("gemm".into(), |b| b.name.clone()),
        peak_rss_mb: peaks.iter().copied().fold(0.0, f64::max),
        first_step_peak_rss_mb: peaks.first().copied().unwrap_or(0.0),
        last_step_peak_rss_mb: peaks.last().copied().unwrap_or(0.0),
        gpu: (cfg.parallel.device == DeviceKind::Cuda).then(|| {
            let name = tp_harness::device::gpu_name(0).unwrap_or_else(|| "a GPU".into());
            gpu_figures(cfg, o.param_counts.logical, ms, name)
        }),
    }
}

/// A GPU step's model FLOPs (nanoGPT's estimate: 6 a parameter but the position
/// embedding, plus `12 L T C`, a token) over `ms`, against the catalogue's dense peak for
/// the run's precision (bf16; TF32 where `tf32` is on; else plain f32). The ranks of a
/// benchmark are threads sharing the one GPU, so the rate is that GPU's.
pub fn gpu_figures(cfg: &RunConfig, params: usize, ms: f64, name: String) -> GpuFigures {
    let a = &cfg.model.arch;
    let (l, t, c) = (a.n_layer as f64, a.block_size as f64, a.n_embd as f64);
    let per_token = 6.0 * (params as f64 - t * c) + 12.0 * l * t * c;
    let model_tflops = cfg.tokens_per_step() as f64 * per_token / (ms / 1e3) / 1e12;
    let peak_tflops = crate::planner::catalog::gpu_named(&name).and_then(|g| {
        match (cfg.parallel.dtype, cfg.parallel.tf32) {
            (ComputeDtype::Bf16, _) => Some(g.bf16_tflops),
            (ComputeDtype::F32, true) => g.tf32_tflops,
            (ComputeDtype::F32, false) => g.f32_tflops,
        }
    });
    GpuFigures {
        name,
        model_flops_per_token: per_token,
        model_tflops,
        peak_tflops,
        mfu: peak_tflops.map(|p| model_tflops / p),
    }
}

/// Best of ten single-thread 512 x 512 x 512 matmuls, in GFLOP/s: what one core reaches
/// with the kernels the model uses, on shapes big enough to hide their overheads.
pub fn matmul_ceiling_gflops() -> f64 {
    use tp_harness::ops::cpu::gemm::{matmul, Mat, MatMut};
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
    use_matmul_route(&cfg)?;
    let data = checked_dataset(&cfg)?;
    configure_threads(cfg.parallel.tp * cfg.parallel.dp);
    let opts = RankOptions {
        keep_params: false,
        skip_sample: true,
        skip_checkpoints: true,
    };
    let job = Job::new(cfg, data, opts);
    let out = run_threads(&job, None, None)?;
    Ok(summarize(&job.cfg, &out[0], warmup))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_dir::bench::BenchResult;

    /// GPT-2 124M at batch 8 on an H100, as measured on 2026-11-27 (525.2 ms a bf16 step):
    /// nanoGPT's FLOPs a token from the parameter count, 13.3 TFLOP/s, 1.35% of the bf16
    /// peak; f32 is held to the plain f32 peak, or TF32's where it is on; a PCIe part
    /// and an unknown GPU have no peak.
    #[test]
    fn gpu_figures_count_model_flops_against_the_peak_for_the_precision() {
        let mut cfg = RunConfig::for_preset("gpt2").unwrap();
        cfg.optim.batch_size = 8;
        cfg.parallel.dtype = ComputeDtype::Bf16;
        let params = 124_475_904; // GPT-2 124M's logical parameters here (bench.json)
        let g = gpu_figures(&cfg, params, 525.2, "NVIDIA H100 80GB HBM3".into());
        let per_token = 6.0 * (params as f64 - 1024.0 * 768.0) + 12.0 * 12.0 * 1024.0 * 768.0;
        assert_eq!(g.model_flops_per_token, per_token);
        assert!((g.model_tflops - 8192.0 * per_token / 0.5252 / 1e12).abs() < 1e-9);
        assert!((g.model_tflops - 13.34).abs() < 0.01, "{}", g.model_tflops);
        assert_eq!(g.peak_tflops, Some(989.0));
        assert!((g.mfu.unwrap() - 0.01349).abs() < 1e-4, "{:?}", g.mfu);
        cfg.parallel.dtype = ComputeDtype::F32;
        let name = || "NVIDIA H100 80GB HBM3".to_string();
        assert_eq!(
            gpu_figures(&cfg, params, 633.2, name()).peak_tflops,
            Some(66.9)
        );
        cfg.parallel.tf32 = true;
        assert_eq!(
            gpu_figures(&cfg, params, 633.2, name()).peak_tflops,
            Some(494.7)
        );
        for other in ["NVIDIA H100 PCIe", "NVIDIA GeForce RTX 4090"] {
            let g = gpu_figures(&cfg, params, 633.2, other.into());
            assert_eq!((g.peak_tflops, g.mfu), (None, None), "{other}");
        }
    }

    /// A GPU run's bench.json keeps its figures and prints them instead of the CPU
    /// kernels' counters (and no CPU goal); a CPU result has none and reads as before.
    #[test]
    fn a_gpu_bench_prints_its_model_flops_and_no_cpu_peak_lines() {
        let mut cfg = RunConfig::for_preset("gpt2").unwrap();
        cfg.optim.batch_size = 8;
        cfg.parallel.dtype = ComputeDtype::Bf16;
        let g = gpu_figures(&cfg, 124_475_904, 525.2, "NVIDIA H100 80GB HBM3".into());
        let mut b: BenchResult = serde_json::from_value(serde_json::json!({
            "preset": "gpt2", "pattern": "12xt", "kernels": "fused", "device": "cuda",
            "dtype": "bf16", "tp": 1, "dp": 1, "math_threads_per_rank": 16,
            "link_gbps": 0.0, "link_latency_us": 0.0, "batch_size": 8, "block_size": 1024,
            "measured_steps": 10, "ms_per_step": 525.2, "tokens_per_s": 15597.0,
            "forward_ms": 132.0, "backward_ms": 282.0, "grad_sync_ms": 88.0,
            "optimizer_ms": 18.0, "comm_ms": 0.0, "profile": [], "flops_per_step": 0.0,
            "cores": 16, "gflops_per_core": 0.0, "matmul_gflops_per_core": 0.0,
            "matmul_ceiling_gflops_per_core": 150.0, "fma_peak_gflops_per_core": 160.0,
            "peak_rss_mb": 571.0, "first_step_peak_rss_mb": 571.0, "last_step_peak_rss_mb": 571.0
        }))
        .unwrap();
        assert_eq!(b.gpu, None, "an older or CPU result has no GPU figures");
        assert!(b.table().contains("FMA peak"));
        b.gpu = Some(g.clone());
        let back: BenchResult = serde_json::from_str(&serde_json::to_string(&b).unwrap()).unwrap();
        assert_eq!(back.gpu, Some(g));
        let t = back.table();
        assert!(
            t.contains("NVIDIA H100 80GB HBM3: 13.3 TFLOP/s of model FLOPs"),
            "{t}"
        );
        assert!(
            t.contains("1.3% of its dense bf16 peak (989.0 TFLOP/s)"),
            "{t}"
        );
        assert!(
            !t.contains("FMA peak") && !t.contains("GFLOP/s/core"),
            "{t}"
        );
        assert!(crate::run_dir::bench_goals::goals_for(&back).is_empty());
    }
}
