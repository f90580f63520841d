//! `tp-sweep FILE.yaml [--out DIR]`: run a grid of experiments, resumable, then write
//! summary.csv, summary.md and plots.

use clap::Parser;
use std::path::PathBuf;
use tp_harness::error::exit_code;
use tp_harness::sweep::{sweep_and_report, Interrupted, Interrupts, Status, Sweep};

#[derive(Parser, Debug)]
#[command(
    name = "tp-sweep",
    version,
    about = "Run a grid of tp-harness experiments"
)]
struct Args {
    /// Sweep file: base config, grid, launcher.
    file: PathBuf,
    /// Output folder (default runs/<sweep name>).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn main() {
    let a = Args::parse();
    let run = || -> anyhow::Result<bool> {
        let interrupts = Interrupts::install()?;
        let sweep = Sweep::load(&a.file)?;
        let out = a
            .out
            .clone()
            .unwrap_or_else(|| PathBuf::from("runs").join(&sweep.name));
        println!(
            "tp-sweep: {} runs into {}",
            sweep.points.len(),
            out.display()
        );
        let results = sweep_and_report(&sweep, &out, &interrupts)?;
        let failed = results
            .iter()
            .filter(|r| matches!(r.status, Status::Failed(_)))
            .count();
        println!(
            "tp-sweep: {} finished, {failed} failed; {}/summary.md, summary.csv, plots/",
            results.len() - failed,
            out.display()
        );
        Ok(failed == 0)
    };
    match run() {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            if let Some(Interrupted(sig)) = e.downcast_ref::<Interrupted>() {
                eprintln!("tp-sweep: {e}");
                std::process::exit(128 + sig);
            }
            eprintln!("tp-sweep: error: {}", tp_harness::error::one_line(&e));
            std::process::exit(exit_code(&e));
        }
    }
}
