//! `tp-prepare [DATASET...]`: prepare datasets into `datasets/<name>/` (all by default),
//! copying the raw text from `../shared/datasets` when present, else downloading it.

use clap::Parser;
use tp_harness::error::exit_on_error;
use tp_lab::data::{data_root, prepare, Dataset, DATASETS};

#[derive(Parser, Debug)]
#[command(
    name = "tp-prepare",
    version,
    about = "Prepare datasets into datasets/<name>/"
)]
struct Args {
    /// Datasets to prepare (default: all of shakespeare_char, names).
    datasets: Vec<String>,
}

fn main() {
    let args = Args::parse();
    let names: Vec<String> = if args.datasets.is_empty() {
        DATASETS.iter().map(|s| s.to_string()).collect()
    } else {
        args.datasets
    };
    let run = || -> anyhow::Result<()> {
        for name in names {
            let dir = prepare(&name, &data_root())?;
            let d = Dataset::load(&dir)?;
            tp_harness::say!(
                "{name}: {} train / {} val tokens, vocab {} in {}",
                d.train.len(),
                d.val.len(),
                d.vocab_size(),
                dir.display()
            );
        }
        Ok(())
    };
    exit_on_error("tp-prepare", run());
}
