//! `bench.json`: what `tp-train --bench` measured ([`BenchResult`]), written and read back
//! through this one type, and its printed forms.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;
use tp_harness::device::{ComputeDtype, DeviceKind, Kernels};

pub const BENCH_FILE: &str = "bench.json";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchResult {
    pub preset: String,
    pub pattern: String,
    pub kernels: Kernels,
    /// Where the passes ran and in what (absent in older results: cpu, f32).
    #[serde(default)]
    pub device: DeviceKind,
    #[serde(default)]
    pub dtype: ComputeDtype,
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
    /// The forward and backward phases' FLOPs (matmuls and attention) over their median
    /// time, per core: what the per-phase shares of the FMA peak are (0 in older results).
    #[serde(default)]
    pub forward_gflops_per_core: f64,
    #[serde(default)]
    pub backward_gflops_per_core: f64,
    /// The gradient buckets' size where backprop started the gradient sums (`None`: one
    /// bucket after it, nothing to sum, or an older result).
    #[serde(default)]
    pub grad_bucket_bytes: Option<u64>,
    pub grad_sync_ms: f64,
    pub optimizer_ms: f64,
    /// Communication the step waited for (exposed).
    pub comm_ms: f64,
    /// Communication that ran while the rank computed (started all-reduces of `l`
    /// blocks, from start to wait): not part of the step's time.
    #[serde(default)]
    pub comm_hidden_ms: f64,
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
    /// What computed the products: `gemm`, or the BLAS and its version (`matmul: blas`;
    /// absent in older results, which all ran gemm).
    #[serde(default = "gemm_route")]
    pub matmul: String,
    /// Peak resident memory of the process in the measured steps (max, first, last):
    /// first == last means no growth across steps. 0 where /proc is unavailable.
    pub peak_rss_mb: f64,
    pub first_step_peak_rss_mb: f64,
    pub last_step_peak_rss_mb: f64,
    /// On a GPU: the device and the step's model FLOPs against its peak (absent on the
    /// CPU and in older results). The op profile and FLOP rates above are the CPU
    /// kernels' own counters, which a GPU run leaves at 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuFigures>,
}

/// A GPU run's speed in model FLOPs: nanoGPT's estimate (PaLM's appendix B), 6 FLOPs a
/// parameter but the position embedding plus attention's `12 L T C`, a token — what
/// `scripts/bench/pytorch-gpt2.py` counts for PyTorch, so MFUs compare.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuFigures {
    /// As the driver names it.
    pub name: String,
    pub model_flops_per_token: f64,
    pub model_tflops: f64,
    /// The dense peak of this GPU for the run's precision, where the catalogue has it.
    pub peak_tflops: Option<f64>,
    /// `model_tflops / peak_tflops`.
    pub mfu: Option<f64>,
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

impl BenchResult {
    /// Reads the `bench.json` a [`BenchResult::write`] wrote into `dir`.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join(BENCH_FILE);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        super::versioned::from_json(&text, &path)
    }

    /// Writes `out/bench.json`.
    pub fn write(&self, out: &Path) -> Result<()> {
        std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
        tp_harness::util::write_atomic(
            &out.join(BENCH_FILE),
            super::versioned::to_json(self)?.as_bytes(),
        )
    }

    /// The per-op profile, FLOP rates and memory, as a text table (on a GPU: its model
    /// FLOP rate and memory).
    pub fn table(&self) -> String {
        if let Some(g) = &self.gpu {
            return format!("{}\n{}", self.gpu_lines(g), self.memory_line());
        }
        let mut t = format!(
            "  {:<26} {:>9} {:>7} {:>14} {:>10}\n",
            "op (rank 0, mean/step)", "ms", "share", "GFLOP/s/core", "of peak"
        );
        for p in &self.profile {
            let (rate, of_peak) = p
                .gflops_per_core
                .map_or((String::new(), String::new()), |g| {
                    (format!("{g:.1}"), self.of_peak(g))
                });
            t += &format!(
                "  {:<26} {:>9.2} {:>6.1}% {:>14} {:>10}\n",
                p.op,
                p.ms,
                100.0 * p.share,
                rate,
                of_peak
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
            "  {} at {}, matmuls by {}: FMA peak {:.1} GFLOP/s/core measured; the matmul ceiling is {:.0}% of it, the step's matmuls {:.0}%, the whole step {:.0}%\n",
            self.cpu_model,
            self.simd_level,
            self.matmul,
            self.fma_peak_gflops_per_core,
            100.0 * self.matmul_ceiling_gflops_per_core / self.fma_peak_gflops_per_core,
            100.0 * self.matmul_gflops_per_core / self.fma_peak_gflops_per_core,
            100.0 * self.gflops_per_core / self.fma_peak_gflops_per_core
        );
        t += &format!(
            "  by phase: forward {:.1} GFLOP/s/core ({} of the peak), backward {:.1} ({})\n",
            self.forward_gflops_per_core,
            self.of_peak(self.forward_gflops_per_core),
            self.backward_gflops_per_core,
            self.of_peak(self.backward_gflops_per_core)
        );
        if let Some(b) = self.grad_bucket_bytes {
            t += &format!(
                "  gradient sums during backprop in buckets of {:.2} MiB\n",
                b as f64 / (1 << 20) as f64
            );
        }
        t += &self.memory_line();
        t
    }

    /// Parameters, weights and the process's peak resident memory.
    fn memory_line(&self) -> String {
        format!(
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
        )
    }

    /// A GPU run's model FLOP rate against its peak, and where its per-kernel times are.
    fn gpu_lines(&self, g: &GpuFigures) -> String {
        let peak = match (g.peak_tflops, g.mfu) {
            (Some(p), Some(m)) => format!(
                "{:.1}% of its dense {} peak ({p:.1} TFLOP/s)",
                100.0 * m,
                self.dtype.label()
            ),
            _ => format!("no {} peak known for it", self.dtype.label()),
        };
        format!(
            "  {}: {:.1} TFLOP/s of model FLOPs ({:.3} GFLOP a token: 6 a parameter but the position embedding, plus 12 L T C), {peak}\n  per-op times and FLOP rates are the CPU kernels' counters, none on a GPU: scripts/cuda/gpu-check.sh profile times every kernel",
            g.name,
            g.model_tflops,
            g.model_flops_per_token / 1e9,
        )
    }

    /// `rate` GFLOP/s a core as a share of the measured FMA peak (blank without one).
    fn of_peak(&self, rate: f64) -> String {
        match self.fma_peak_gflops_per_core > 0.0 {
            true => format!("{:.0}%", 100.0 * rate / self.fma_peak_gflops_per_core),
            false => String::new(),
        }
    }

    pub fn line(&self) -> String {
        format!(
            "{} {} tp {} dp {} on {} {} ({} thread(s)/rank, {} kernels{}): {:.1} ms/step, {:.0} tokens/s | forward {:.1} ms, backward {:.1} ms, grad sync + norm {:.1} ms, optimizer {:.1} ms; communication {:.1} ms of it{}",
            self.preset,
            self.pattern,
            self.tp,
            self.dp,
            self.device.label(),
            self.dtype.label(),
            self.math_threads_per_rank,
            self.kernels.label(),
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
            self.comm_ms,
            if self.comm_hidden_ms > 0.0 {
                format!(" (and {:.1} ms hidden behind compute)", self.comm_hidden_ms)
            } else {
                String::new()
            }
        )
    }
}

fn gemm_route() -> String {
    "gemm".into()
}
