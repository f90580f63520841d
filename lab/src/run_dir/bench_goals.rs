//! The speed goals docs/performance.md sets, each against the measured FMA peak of the
//! CPU it runs on (issue 51): the physical limit, so that a goal means the same on an
//! AVX2-only Zen 3 and on an AVX-512 Xeon, where PyTorch's own speed differs.

use super::bench::BenchResult;
use tp_harness::device::{ComputeDtype, DeviceKind};

/// A share of the FMA peak a benchmark of a given shape should reach.
pub struct Goal {
    /// The benchmark it is set for, in words.
    pub bench: &'static str,
    /// What reaches the share, in words.
    pub what: &'static str,
    /// The share of one core's FMA peak.
    pub at_least: f64,
    applies: fn(&BenchResult) -> bool,
    rate: fn(&BenchResult) -> f64,
}

/// One rank, f32 on the CPU, `threads` math threads.
fn one_rank(b: &BenchResult, threads: usize) -> bool {
    b.tp * b.dp == 1
        && b.math_threads_per_rank == threads
        && b.device == DeviceKind::Cpu
        && b.dtype == ComputeDtype::F32
}

fn mini_1_thread(b: &BenchResult) -> bool {
    b.preset == "mini" && one_rank(b, 1)
}

/// GPT-2 124M at llm.c's CPU batch, 4 x 64, on two threads.
fn gpt2_2_threads(b: &BenchResult) -> bool {
    b.preset == "gpt2" && one_rank(b, 2) && b.batch_size == 4 && b.block_size == 64
}

pub const GOALS: [Goal; 3] = [
    Goal {
        bench: "mini at 1 thread",
        what: "the whole step",
        at_least: 0.80,
        applies: mini_1_thread,
        rate: |b| b.gflops_per_core,
    },
    Goal {
        bench: "GPT-2 124M (4 x 64) at 2 threads",
        what: "the matmuls inside the step",
        at_least: 0.85,
        applies: gpt2_2_threads,
        rate: |b| b.matmul_gflops_per_core,
    },
    Goal {
        bench: "GPT-2 124M (4 x 64) at 2 threads",
        what: "the whole step",
        at_least: 0.75,
        applies: gpt2_2_threads,
        rate: |b| b.gflops_per_core,
    },
];

/// The goals `b` is measured for, each as a line: the goal, what was measured, whether
/// it is met on this CPU.
pub fn goals_for(b: &BenchResult) -> Vec<String> {
    // The goals are the CPU kernels'; a GPU run's CPU figures are not its own.
    if b.fma_peak_gflops_per_core <= 0.0 || b.device != tp_harness::device::DeviceKind::Cpu {
        return Vec::new();
    }
    GOALS
        .iter()
        .filter(|g| (g.applies)(b))
        .map(|g| {
            let share = (g.rate)(b) / b.fma_peak_gflops_per_core;
            format!(
                "goal (docs/performance.md): {}, {} at >= {:.0}% of the FMA peak: {:.0}% on {} — {}",
                g.bench,
                g.what,
                100.0 * g.at_least,
                100.0 * share,
                b.cpu_model,
                if share >= g.at_least { "met" } else { "not met" }
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bench of `preset` on `threads` threads whose step and matmuls run at the given
    /// shares of a 100 GFLOP/s peak.
    fn bench(preset: &str, threads: usize, step: f64, matmuls: f64) -> BenchResult {
        serde_json::from_value(serde_json::json!({
            "preset": preset, "pattern": "tttt", "kernels": "fused", "tp": 1, "dp": 1,
            "math_threads_per_rank": threads, "link_gbps": 0.0, "link_latency_us": 0.0,
            "batch_size": 4, "block_size": 64, "measured_steps": 3, "ms_per_step": 10.0,
            "tokens_per_s": 1.0, "forward_ms": 3.0, "backward_ms": 6.0, "grad_sync_ms": 0.0,
            "optimizer_ms": 1.0, "comm_ms": 0.0, "profile": [], "flops_per_step": 1.0,
            "cores": threads, "gflops_per_core": 100.0 * step,
            "matmul_gflops_per_core": 100.0 * matmuls,
            "matmul_ceiling_gflops_per_core": 95.0, "fma_peak_gflops_per_core": 100.0,
            "cpu_model": "Test CPU (family 1 model 2), 2 cores",
            "peak_rss_mb": 1.0, "first_step_peak_rss_mb": 1.0, "last_step_peak_rss_mb": 1.0
        }))
        .unwrap()
    }

    /// A goal is reported only for the benchmark it is set for, met or not against the
    /// measured peak, naming the CPU.
    #[test]
    fn each_goal_is_judged_for_its_own_benchmark_against_the_peak() {
        let lines = goals_for(&bench("mini", 1, 0.82, 0.9));
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("mini at 1 thread, the whole step at >= 80%"));
        assert!(lines[0].ends_with("82% on Test CPU (family 1 model 2), 2 cores — met"));
        let gpt2 = goals_for(&bench("gpt2", 2, 0.74, 0.86));
        assert_eq!(gpt2.len(), 2, "{gpt2:?}");
        assert!(gpt2[0].contains("matmuls") && gpt2[0].ends_with("— met"));
        assert!(gpt2[1].contains("whole step") && gpt2[1].ends_with("— not met"));
        assert!(goals_for(&bench("mini", 2, 0.9, 0.9)).is_empty());
        assert!(goals_for(&bench("gpt2", 1, 0.9, 0.9)).is_empty());
    }
}
