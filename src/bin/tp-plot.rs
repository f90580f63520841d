//! `tp-plot RUN_DIR... [--out DIR]`: loss curves and the loss/communication trade-off.

use clap::Parser;
use std::path::PathBuf;
use tp_harness::error::exit_code;
use tp_harness::plot::{label_runs, merge_replicates, plot_runs, RunCurves};

#[derive(Parser, Debug)]
#[command(
    name = "tp-plot",
    version,
    about = "Plot loss curves of tp-harness runs"
)]
struct Args {
    /// Run directories (each with config.yaml and log.jsonl).
    #[arg(required = true)]
    runs: Vec<PathBuf>,
    /// Output folder (default: plots/ inside the first run's parent).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn main() {
    let a = Args::parse();
    let run = || -> anyhow::Result<Vec<PathBuf>> {
        let runs = a
            .runs
            .iter()
            .map(|d| RunCurves::load(d))
            .collect::<anyhow::Result<Vec<_>>>()?;
        // Runs that differ only in the seed become one curve with a band.
        let mut runs = merge_replicates(runs);
        label_runs(&mut runs);
        let out = a.out.clone().unwrap_or_else(|| {
            a.runs[0]
                .parent()
                .map(|p| p.join("plots"))
                .unwrap_or_else(|| PathBuf::from("plots"))
        });
        plot_runs(&runs, &out)
    };
    match run() {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
        }
        Err(e) => {
            eprintln!("tp-plot: error: {}", format!("{e:#}").replace('\n', " "));
            std::process::exit(exit_code(&e));
        }
    }
}
