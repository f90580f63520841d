//! `tp-train`: train GPT-2 with a pattern of t/s/p/l blocks across tensor- and
//! data-parallel ranks. With no arguments it runs the default experiment.

use clap::{CommandFactory, Parser};
use std::path::PathBuf;
use tp_harness::blocks::BlockKind;
use tp_harness::error::exit_on_error;
use tp_lab::bench::run::{run_bench, BenchRequest};
use tp_lab::config::{
    parse_assignment, read_config_file, resolve, take_key_flags, Origin, Override,
};
use tp_lab::launch::job::{OnOtherData, Target};
use tp_lab::launch::run::{resume_config, run_resolved, Backend};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "tp-train",
    version,
    about = "Train GPT-2 with t/s/p/l tensor-parallel blocks; no arguments runs the default experiment (mini, shakespeare_char, sppp, tp 2)",
    after_help = "Every config key is also a flag in nanoGPT's spelling: --max_iters=300, --seed 3, --learning_rate 6e-4 (the same as --set KEY=VALUE; docs/usage.md lists the keys)."
)]
struct Args {
    /// YAML file with config keys (nanoGPT names plus pattern, tp, dp).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Model preset: mini, baby, gpt2 or micro (same as --set preset=P).
    #[arg(long)]
    preset: Option<String>,
    /// Block pattern, e.g. sppp, tstt, 3xsppp.
    #[arg(long, long_help = BlockKind::pattern_help())]
    pattern: Option<String>,
    /// Tensor-parallel size.
    #[arg(long)]
    tp: Option<usize>,
    /// Data-parallel size.
    #[arg(long)]
    dp: Option<usize>,
    /// Where the ranks compute: cpu or cuda (same as --set device=D; cuda needs the CUDA
    /// build, scripts/build-cuda.sh).
    #[arg(long)]
    device: Option<String>,
    /// Precision of the passes: f32 or bf16 (same as --set dtype=D).
    #[arg(long)]
    dtype: Option<String>,
    /// Override a config key (repeatable), e.g. --set max_iters=300.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Run directory (default runs/<timestamp>-<pattern>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue the run in this directory from its latest checkpoint (appending to its
    /// log); --set may raise max_iters, --tp/--dp may change.
    #[arg(long, value_name = "RUN_DIR", conflicts_with_all = ["out", "bench"])]
    resume: Option<PathBuf>,
    /// With --resume: continue although the data is not what the checkpoint trained on
    /// (an edited corpus), noted in the log and summary; without it such a resume is
    /// refused.
    #[arg(long)]
    accept_other_data: bool,
    /// Start this new run from another run's latest weights (same model and data; the
    /// pattern may differ), with fresh optimiser state (same as --set init_from=RUN_DIR).
    #[arg(long, value_name = "RUN_DIR", conflicts_with = "resume")]
    init_from: Option<PathBuf>,
    /// Measure steady-state step time instead of training a run (tp 1 and 2 unless --tp).
    #[arg(long)]
    bench: bool,
    /// Steps measured by --bench after the warm-up steps.
    #[arg(long, default_value_t = 20)]
    bench_steps: usize,
    /// Unmeasured steps --bench runs first.
    #[arg(long, default_value_t = 3)]
    bench_warmup: usize,
    /// Hide the progress bar.
    #[arg(long)]
    quiet: bool,
    /// How ranks run: threads of this process, or MPI processes (default: mpi when started
    /// by mpirun, else threads).
    #[arg(long, value_enum)]
    backend: Option<Backend>,
}

fn main() {
    tp_lab::alloc::keep_freed_memory();
    // Config keys as flags in nanoGPT's spelling (`--seed 3`, `--max_iters=300`) are taken
    // out before clap sees the rest.
    let own: Vec<String> = Args::command()
        .get_arguments()
        .filter_map(|a| a.get_long().map(String::from))
        .collect();
    let mut argv = std::env::args_os().map(|a| a.to_string_lossy().into_owned());
    let program = argv.next().unwrap_or_else(|| "tp-train".into());
    let argv: Vec<String> = argv.collect();
    // A resume writes into its own run directory (no --out): errors advise accordingly.
    let resuming = argv
        .iter()
        .any(|a| a == "--resume" || a.starts_with("--resume="));
    let run = take_key_flags(argv, &own).and_then(|(rest, keys)| {
        real_main(Args::parse_from(std::iter::once(program).chain(rest)), keys)
    });
    exit_on_error(
        if resuming {
            "tp-train --resume"
        } else {
            "tp-train"
        },
        run,
    );
}

/// The config overrides the arguments give, in precedence order.
fn overrides(args: &Args, keys: &[Override]) -> anyhow::Result<Vec<Override>> {
    let mut overrides = Vec::new();
    if let Some(path) = &args.config {
        overrides.extend(read_config_file(path)?);
    }
    let flag = |name: &str, v: String| -> (String, serde_yaml_ng::Value, Origin) {
        (
            name.to_string(),
            serde_yaml_ng::Value::String(v.clone()),
            Origin::Flag(format!("--{name} {v}")),
        )
    };
    if let Some(p) = &args.preset {
        overrides.push(flag("preset", p.clone()));
    }
    if let Some(p) = &args.pattern {
        overrides.push(flag("pattern", p.clone()));
    }
    if let Some(d) = &args.device {
        overrides.push(flag("device", d.clone()));
    }
    if let Some(d) = &args.dtype {
        overrides.push(flag("dtype", d.clone()));
    }
    if let Some(d) = &args.init_from {
        overrides.push(flag("init_from", d.display().to_string()));
    }
    if let Some(tp) = args.tp {
        overrides.push(("tp".into(), tp.into(), Origin::Flag(format!("--tp {tp}"))));
    }
    if let Some(dp) = args.dp {
        overrides.push(("dp".into(), dp.into(), Origin::Flag(format!("--dp {dp}"))));
    }
    overrides.extend(keys.iter().cloned());
    for s in &args.set {
        let (k, v) = parse_assignment(s)?;
        overrides.push((k, v, Origin::Flag(format!("--set {s}"))));
    }
    if args.resume.is_none() {
        overrides = tp_lab::run_dir::inherit_init_from(overrides)?;
    }
    Ok(overrides)
}

fn real_main(args: Args, keys: Vec<Override>) -> anyhow::Result<()> {
    let backend = args.backend.unwrap_or_else(Backend::auto);
    // Under MPI the config is resolved inside the launcher (every rank alike, an error
    // printed once); the threads backend resolves it here.
    let progress = !args.quiet;
    if args.accept_other_data && args.resume.is_none() {
        return Err(tp_harness::error::user(
            "--accept-other-data goes with --resume RUN_DIR: a new run has no earlier data to differ from",
        ));
    }
    if args.bench {
        let request = BenchRequest {
            warmup: args.bench_warmup,
            steps: args.bench_steps,
            out: args.out.clone(),
            tp_given: args.tp.is_some(),
        };
        return run_bench(&request, &|| resolve(&overrides(&args, &keys)?), backend);
    }
    if let Some(dir) = &args.resume {
        let config = || resume_config(dir, &overrides(&args, &keys)?);
        let on_other = if args.accept_other_data {
            OnOtherData::Accept
        } else {
            OnOtherData::Refuse
        };
        run_resolved(
            &config,
            Target::Resume(dir.clone(), on_other),
            progress,
            backend,
        )?;
        return Ok(());
    }
    let config = || resolve(&overrides(&args, &keys)?);
    run_resolved(&config, Target::New(args.out.clone()), progress, backend)?;
    Ok(())
}
