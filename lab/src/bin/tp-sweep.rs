//! `tp-sweep FILE.yaml [--out DIR] [--status]`: run a grid of experiments, resumable, then write
//! summary.csv, summary.md and plots.

use clap::Parser;
use std::path::PathBuf;
use tp_harness::error::{exit_on_error, Stopped};
use tp_lab::sweep::{sweep_and_report, Interrupts, Status, Sweep};

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
    /// Instead of running: where the sweep stands (each round's runs finished, diverged,
    /// training now and to run; the time the unfinished ones need; a tuned sweep's
    /// choices so far), read from its run directories without writing anything.
    #[arg(long)]
    status: bool,
}

fn main() {
    let a = Args::parse();
    let run = || -> anyhow::Result<()> {
        let interrupts = Interrupts::install()?;
        let sweep = Sweep::load(&a.file)?;
        let out = a
            .out
            .clone()
            .unwrap_or_else(|| PathBuf::from("runs").join(&sweep.name));
        if a.status {
            tp_harness::say_raw!("{}", tp_lab::sweep::status::status(&sweep, &out)?);
            return Ok(());
        }
        sweep.launcher.check_available()?;
        tp_lab::run_dir::check_out(&out, "--out")?;
        tp_harness::say!(
            "tp-sweep: {} runs into {}",
            sweep.points.len(),
            out.display()
        );
        let results = sweep_and_report(&sweep, &out, &interrupts)?;
        let failed = results
            .iter()
            .filter(|r| matches!(r.status, Status::Failed(_)))
            .count();
        // A diverged run is a result (its learning rate too high), not a failure.
        let diverged = results
            .iter()
            .filter(|r| matches!(r.status, Status::Diverged(_)))
            .count();
        tp_harness::say!(
            "tp-sweep: {} finished, {diverged} diverged, {failed} failed; {}/summary.md, summary.csv, plots/",
            results.len() - failed - diverged,
            out.display()
        );
        if failed > 0 {
            // Each failure is in the lines above and the summary.
            return Err(anyhow::Error::new(Stopped {
                code: 1,
                message: String::new(),
            }));
        }
        Ok(())
    };
    exit_on_error("tp-sweep", run());
}
