//! `tp-train --bench` as a command: under mpirun one measurement at the launched shape
//! (each rank is a process already); with ranks as threads the configuration given, or,
//! without `--tp`, tp 1 and tp 2 each in a fresh process of its own, so that one
//! measurement's thread pools and heap do not colour the other's.

use super::{bench, bench_config, summarize};
use crate::config::RunConfig;
use crate::launch::job::{RankOptions, Target};
use crate::launch::run::{run_resolved_with, Backend};
use crate::run_dir::bench::BenchResult;
use crate::run_dir::default_run_path;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use tp_harness::util::write_atomic;

/// What `--bench` was asked for.
pub struct BenchRequest {
    /// Unmeasured steps, then measured ones.
    pub warmup: usize,
    pub steps: usize,
    /// Where `bench.json` goes (a fresh run path when not given).
    pub out: Option<PathBuf>,
    /// Whether `--tp` was given (else tp 1 and tp 2 are measured).
    pub tp_given: bool,
}

/// Measures what `req` asks of the configuration `config` resolves to.
pub fn run_bench(
    req: &BenchRequest,
    config: &dyn Fn() -> Result<RunConfig>,
    backend: Backend,
) -> Result<()> {
    let out = req.out.clone().unwrap_or_else(|| default_run_path("bench"));
    let (warmup, steps) = (req.warmup, req.steps);
    if backend == Backend::Mpi {
        let config = || Ok(bench_config(&config()?, warmup, steps));
        // The steps alone, as the threads' bench measures them: no checkpoint at the end.
        let opts = RankOptions {
            keep_params: false,
            skip_sample: true,
            skip_checkpoints: true,
        };
        let res = run_resolved_with(
            &config,
            Target::New(Some(out.clone())),
            false,
            backend,
            opts,
        )?;
        if res.outcomes[0].rank == 0 {
            report(&summarize(&config()?, &res.outcomes[0], warmup), &out)?;
        }
        return Ok(());
    }
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    if !req.tp_given {
        return tp1_and_tp2(&out);
    }
    report(&bench(&config()?, warmup, steps)?, &out)
}

/// Prints `r` — its line, its table, the speed goals it is measured for — and writes
/// `out/bench.json`.
fn report(r: &BenchResult, out: &Path) -> Result<()> {
    tp_harness::say!("{}", r.line());
    tp_harness::say!("{}", r.table());
    for goal in crate::run_dir::bench_goals::goals_for(r) {
        tp_harness::say!("  {goal}");
    }
    r.write(out)?;
    tp_harness::say!("bench.json in {}", out.display());
    Ok(())
}

/// This command again at tp 1 and at tp 2, each in a process of its own (its arguments
/// but `--out`), then their ratio and both results in `out/bench.json`.
fn tp1_and_tp2(out: &Path) -> Result<()> {
    let exe = std::env::current_exe()?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut skip = false;
    let passthrough: Vec<&String> = args
        .iter()
        .filter(|a| {
            let keep = !skip && a.as_str() != "--out" && !a.starts_with("--out=");
            skip = a.as_str() == "--out";
            keep
        })
        .collect();
    let mut results = Vec::new();
    for tp in [1, 2] {
        let sub = out.join(format!("tp{tp}"));
        let status = std::process::Command::new(&exe)
            .args(&passthrough)
            .args(["--tp", &tp.to_string(), "--out"])
            .arg(&sub)
            .status()?;
        if !status.success() {
            bail!("the tp {tp} benchmark failed");
        }
        results.push(BenchResult::read(&sub)?);
    }
    let (a, b) = (results[0].ms_per_step, results[1].ms_per_step);
    // Both runs process the same tokens a step on the same cores.
    tp_harness::say!(
        "tp 2 / tp 1 time per token on the same cores: {:.2}x ({:+.0}%)",
        b / a,
        100.0 * (b / a - 1.0)
    );
    write_atomic(
        &out.join("bench.json"),
        serde_json::to_string_pretty(&results)?.as_bytes(),
    )?;
    tp_harness::say!("bench.json in {}", out.display());
    Ok(())
}
