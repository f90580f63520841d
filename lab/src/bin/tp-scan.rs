//! `tp-scan RUN_DIR`: SPD's block-wise sensitivity scan of a trained checkpoint.

use clap::Parser;
use std::path::PathBuf;
use tp_harness::blocks::BlockKind;
use tp_harness::error::exit_on_error;
use tp_lab::run_dir::{write_scan_into, DirLock};
use tp_lab::scan::plot::plot_scan;
use tp_lab::scan::scan_run;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "tp-scan",
    version,
    about = "Block-wise sync sensitivity of a trained checkpoint (zero-shot, whole val split); writes scan.json and scan.png"
)]
struct Args {
    /// A run directory (its latest checkpoint unless --checkpoint).
    run_dir: PathBuf,
    /// What t blocks are converted to (l: the budget is the all-reduces waited for).
    #[arg(long, value_enum, default_value_t = To::S)]
    to: To,
    /// Tensor-parallel ranks (threads) to evaluate at (default: the run's; at least 2).
    #[arg(long)]
    tp: Option<usize>,
    /// A specific checkpoint directory instead of the latest.
    #[arg(long)]
    checkpoint: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum To {
    S,
    P,
    L,
}

fn main() {
    tp_lab::alloc::keep_freed_memory();
    let a = Args::parse();
    let run = || -> anyhow::Result<()> {
        // It writes into the run: refused at once, not after the scan, while a trainer
        // owns it.
        DirLock::check_free(&a.run_dir)?;
        let to = match a.to {
            To::S => BlockKind::S,
            To::P => BlockKind::P,
            To::L => BlockKind::L,
        };
        let r = scan_run(&a.run_dir, a.checkpoint.as_deref(), to, a.tp)?;
        tp_harness::say!(
            "{} at tp {}: val loss {:.4} over {} predictions, {} forward all-reduces per pass ({} waited for)",
            r.base_pattern, r.tp, r.base_loss, r.val_tokens, r.base_forward_allreduces, r.base_exposed_allreduces
        );
        tp_harness::say!("block  as {}        loss    rise  tier", r.to);
        for b in &r.blocks {
            tp_harness::say!(
                "{:>5}  {:<10} {:.4} {:+.4}  {}",
                b.block,
                b.pattern,
                b.loss,
                b.rise,
                b.tier.label()
            );
        }
        tp_harness::say!("budget  recommended  loss");
        for s in &r.recommended {
            tp_harness::say!(
                "{:>6}  {:<11}  {:.4}",
                s.exposed_allreduces,
                s.pattern,
                s.loss
            );
        }
        write_scan_into(&a.run_dir, &r)?;
        for f in plot_scan(&r, &a.run_dir)? {
            tp_harness::say!("{}", f.display());
        }
        tp_harness::say!("scan.json in {}", a.run_dir.display());
        Ok(())
    };
    exit_on_error("tp-scan", run());
}
