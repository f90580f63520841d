//! Building the run's reports from rank 0's outcome: the communication report
//! (`comm.json` and the table printed at the end) and the headline summary
//! (`summary.json`). Counts come from rank 0's tally (every rank issues the same
//! collectives).

use super::outcome::RankOutcome;
use crate::analysis::{median, step_ms, StepTiming};
use crate::config::RunConfig;
use crate::run_dir::{CommReport, LayerComm, LogLine, PerStep, RankCompute, RunSummary, SiteComm};
use std::collections::BTreeMap;
use tp_harness::blocks::BlockLayout;
use tp_harness::comm::{link_catalog, CommKind, Site};
use tp_harness::device::{DeviceKind, Kernels};

fn per(n: u64, d: usize) -> f64 {
    per_f(n as f64, d)
}

fn per_f(x: f64, d: usize) -> f64 {
    if d == 0 {
        0.0
    } else {
        x / d as f64
    }
}

/// The communication report of rank 0's tally after a run.
pub fn comm_report(cfg: &RunConfig, layout: &BlockLayout, o: &RankOutcome) -> CommReport {
    let t = &o.tally;
    let tp_harness::train::record::Tallied { steps, passes } = o.tallied();
    let layers = layout
        .kinds
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let f = t.at(Site::Layer(i), CommKind::TpForward);
            let b = t.at(Site::Layer(i), CommKind::TpBackward);
            LayerComm {
                layer: i,
                kind: k.letter().to_string(),
                forward_allreduces: per(f.calls, passes),
                backward_allreduces: per(b.calls, passes),
                bytes: per(f.bytes + b.bytes, steps),
                seconds: per_f(f.seconds + b.seconds, steps),
                hidden_seconds: per_f(f.hidden_seconds + b.hidden_seconds, steps),
            }
        })
        .collect::<Vec<_>>();
    let outside_layers = [(Site::Embedding, "embedding"), (Site::Head, "head")]
        .into_iter()
        .filter_map(|(site, name)| {
            let f = t.at(site, CommKind::TpForward);
            let b = t.at(site, CommKind::TpBackward);
            (f.calls + b.calls > 0).then(|| SiteComm {
                site: name.to_string(),
                forward_allreduces: per(f.calls, passes),
                backward_allreduces: per(b.calls, passes),
                bytes: per(f.bytes + b.bytes, steps),
                seconds: per_f(f.seconds + b.seconds, steps),
            })
        })
        .collect();
    let in_layers = |kind| {
        layers
            .iter()
            .map(|l: &LayerComm| match kind {
                CommKind::TpForward => l.forward_allreduces,
                _ => l.backward_allreduces,
            })
            .sum::<f64>()
    };
    let mut per_step = BTreeMap::new();
    let mut totals = BTreeMap::new();
    for kind in CommKind::all() {
        let s = t.total(kind);
        let step = PerStep {
            calls: per(s.calls, steps),
            bytes: per(s.bytes, steps),
            seconds: per_f(s.seconds, steps),
            modelled_seconds: per_f(s.modelled_seconds, steps),
            hidden_seconds: per_f(s.hidden_seconds, steps),
        };
        per_step.insert(kind, step);
        totals.insert(kind, s);
    }
    let eval = t.eval.clone();
    let projected_seconds_per_step = link_catalog::links()
        .into_iter()
        .filter(|l| link_catalog::REPORT_LINKS.contains(&l.name.as_str()))
        .map(|link| {
            let model = link.model();
            let total: f64 = t
                .train
                .values()
                .map(|s| model.seconds(s.calls, s.bytes, s.group_size))
                .sum();
            (link.label, per_f(total, steps))
        })
        .collect();
    CommReport {
        pattern: cfg.model.pattern.to_string(),
        layout: layout.expanded(),
        tp: cfg.parallel.tp,
        dp: cfg.parallel.dp,
        steps,
        forward_passes: passes,
        backward_passes: passes,
        formula_forward_allreduces: layout.forward_allreduces(),
        tp_forward_allreduces: in_layers(CommKind::TpForward),
        tp_backward_allreduces: in_layers(CommKind::TpBackward),
        comm_dtype: cfg.parallel.comm_dtype,
        layers,
        outside_layers,
        hosts: o.hosts.clone(),
        per_step,
        totals,
        eval,
        emulated_link: cfg.link(),
        projected_seconds_per_step,
        compute: o.ranks_compute.clone(),
        grad_bucket_bytes: o.param_counts.grad_bucket_bytes.map(|b| b as u64),
    }
}

/// A rank's median compute ms per step over this invocation's steps, as its thread's CPU
/// time and as its wall-clock time less its waits, where every step measured the first.
pub fn rank_compute_ms(o: &RankOutcome) -> Option<(f64, f64)> {
    let cpu: Option<Vec<f64>> = o.steps.iter().map(|s| s.compute_cpu_ms).collect();
    let wall = o.steps.iter().map(|s| s.ms - s.waited_ms).collect();
    Some((median(cpu?)?, median(wall)?))
}

/// Every rank's [`rank_compute_ms`] in rank order, if every rank measured it.
pub fn ranks_compute(per_rank: &[Option<(f64, f64)>], steps: usize) -> Option<RankCompute> {
    let both: Option<Vec<(f64, f64)>> = per_rank.iter().copied().collect();
    let (per_rank_ms, per_rank_wall_ms) = both?.into_iter().unzip();
    Some(RankCompute {
        per_rank_ms,
        per_rank_wall_ms,
        steps,
    })
}

/// The headline numbers of a finished run. `log` is the whole run's log (`log.jsonl` as
/// it stands at the end, earlier invocations of a resumed run included), so a run
/// resumed with nothing left to train reports the same figures as one never stopped.
pub fn run_summary(
    cfg: &RunConfig,
    report: &CommReport,
    o: &RankOutcome,
    log: &[LogLine],
    wall_seconds: f64,
) -> RunSummary {
    let last_eval = log.iter().rev().find(|l| l.val_loss.is_some());
    let timing = step_ms(log).map(|ms| StepTiming::new(ms, report));
    let tokens_per_s = median(log.iter().filter_map(|l| l.tokens_per_s).collect());
    RunSummary {
        pattern: cfg.model.pattern.to_string(),
        tp: cfg.parallel.tp,
        dp: cfg.parallel.dp,
        n_layer: cfg.model.arch.n_layer,
        steps: cfg.optim.max_iters,
        forward_allreduces_per_step: report
            .per_step
            .get(&CommKind::TpForward)
            .map_or(0.0, |s| s.calls),
        allreduces_per_layer: report.tp_forward_allreduces / cfg.model.arch.n_layer.max(1) as f64,
        final_train_loss: last_eval.and_then(|l| l.eval_train_loss),
        final_val_loss: match o.final_eval {
            Some(full) => Some(full.loss as f32),
            None => last_eval.and_then(|l| l.val_loss),
        },
        final_val_tokens: o.final_eval.map(|f| f.tokens),
        best_val_loss: o.best_val_loss,
        tokens_per_s,
        step_ms: timing.as_ref().map(|t| t.step_ms),
        comm_ms_per_step: timing.as_ref().map(|t| 1e3 * t.comm_seconds()),
        compute_ms_per_step: timing.as_ref().map(|t| 1e3 * t.compute_seconds()),
        comm_bytes_per_step: timing
            .as_ref()
            .map(|t| t.comm.iter().map(|c| c.bytes).sum()),
        wall_seconds,
        machine: Some(machine(cfg)),
        build: option_env!("TP_BUILD").map(str::to_string),
        subnormals: (cfg.parallel.device == DeviceKind::Cpu).then(|| {
            if tp_harness::util::subnormals::flushed() {
                "flushed to zero".to_string()
            } else {
                "kept".to_string()
            }
        }),
        environment: super::switches::set_switches(|k| std::env::var(k).ok()),
        data_sha256: None,
        nccl: o.nccl.clone(),
        rank_machines: Vec::new(),
        sharing_slowdown: report.compute.as_ref().and_then(|c| {
            // Ranks on rank 0's host (every one with threads) share its cores.
            let here = o
                .hosts
                .iter()
                .filter(|h| o.hosts.first() == Some(*h))
                .count();
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            c.sharing_slowdown(here.max(1), cores)
        }),
        notes: log
            .iter()
            .filter_map(|l| Some(format!("step {}: {}", l.step, l.note.as_ref()?)))
            .collect(),
    }
}

/// This machine and what computed on it, for [`RunSummary::machine`].
fn machine(cfg: &RunConfig) -> String {
    let compute = match (cfg.parallel.device, cfg.parallel.kernels) {
        (DeviceKind::Cuda, _) => "cuda".to_string(),
        (DeviceKind::Cpu, Kernels::Portable) => "portable ops".to_string(),
        (DeviceKind::Cpu, Kernels::Fused) => {
            format!(
                "fused {} kernels",
                tp_harness::ops::cpu::simd::level().label()
            )
        }
    };
    // The BLAS, when one computed the products, before the kernels (which the analysis
    // reads as the last part).
    if let Some(blas) = super::job::blas_in_use(cfg) {
        return format!(
            "{}, matmuls by {}, {compute}",
            tp_harness::util::host::cpu(),
            blas.name
        );
    }
    format!("{}, {compute}", tp_harness::util::host::cpu())
}
