//! `tp-plot RUN_DIR... [--out DIR] [--x time --link 10gbe ...]`: loss curves and the
//! loss/communication trade-off, and loss against modelled time on given links.

use clap::Parser;
use std::path::PathBuf;
use tp_harness::error::exit_code;
use tp_harness::error::UserError;
use tp_harness::plot::timing::parse_link;
use tp_harness::plot::{label_runs, merge_replicates, plot_on_link, plot_runs, RunCurves};

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
    /// The x axis of extra plots: `time` draws loss against modelled wall-clock on each
    /// --link (the step plots are always drawn).
    #[arg(long, value_enum, default_value_t = XArg::Step)]
    x: XArg,
    /// An interconnect for the time plots (repeatable): 10gbe, ib100, pcie4, nvlink4, or
    /// GBPS:LATENCY_US (Gbit/s per direction, microseconds per message).
    #[arg(long = "link", value_name = "LINK")]
    links: Vec<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq)]
enum XArg {
    Step,
    Time,
}

fn main() {
    let a = Args::parse();
    let run = || -> anyhow::Result<Vec<PathBuf>> {
        if a.x == XArg::Time && a.links.is_empty() {
            return Err(anyhow::Error::new(UserError(
                "--x time needs at least one --link: 10gbe, ib100, pcie4, nvlink4 or GBPS:LATENCY_US".into(),
            )));
        }
        let links = a
            .links
            .iter()
            .map(|l| parse_link(l))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let runs = a
            .runs
            .iter()
            .map(|d| RunCurves::load(d))
            .collect::<anyhow::Result<Vec<_>>>()?;
        // Runs that emulated a link: what they measured against what the model predicts.
        for r in &runs {
            if let Some((measured, modelled)) = r.timing.as_ref().and_then(|t| t.emulation_check())
            {
                println!(
                    "{}: {measured:.1} ms/step measured on its emulated link, {modelled:.1} ms/step modelled ({:+.1}%)",
                    r.dir.display(),
                    100.0 * (modelled / measured - 1.0)
                );
            }
        }
        // Runs that differ only in the seed become one curve with a band.
        let mut runs = merge_replicates(runs);
        label_runs(&mut runs);
        let out = a.out.clone().unwrap_or_else(|| {
            a.runs[0]
                .parent()
                .map(|p| p.join("plots"))
                .unwrap_or_else(|| PathBuf::from("plots"))
        });
        let mut files = plot_runs(&runs, &out)?;
        for (label, link) in &links {
            files.extend(plot_on_link(&runs, &out, label, link)?);
        }
        Ok(files)
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
