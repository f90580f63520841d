//! `tp-plan`: what a layout would mean on a real cluster — per step compute, each
//! collective kind's calls and bytes, hidden and exposed time, step time, the speed-up
//! over t-only, the bandwidth below which the layout pays, and the study's measured
//! loss penalty nearest to the request. Writes plan.md, plan.json and the figure.

use clap::Parser;
use std::path::PathBuf;
use tp_harness::comm::CommDtype;
use tp_harness::error::{exit_on_error, user};
use tp_harness::train::bucket_cap::BucketCap;
use tp_harness::util::fs::write_atomic;
use tp_lab::planner::question::{plan, Question};
use tp_lab::planner::request::{FlopConvention, Head, Shape};
use tp_lab::run_dir::check_out;

#[derive(Parser, Debug)]
#[command(
    name = "tp-plan",
    version,
    about = "Plan a layout's step on a real cluster"
)]
struct Args {
    /// A named model: mini, gpt2 (124M), gpt2-medium, gpt2-large, gpt2-xl, or another
    /// harness preset; or give its shape with --n-layer etc.
    #[arg(long, default_value = "gpt2")]
    model: String,
    #[arg(long)]
    n_layer: Option<usize>,
    #[arg(long)]
    n_head: Option<usize>,
    #[arg(long)]
    n_embd: Option<usize>,
    #[arg(long)]
    vocab: Option<usize>,
    #[arg(long)]
    block: Option<usize>,
    /// Layouts to plan (repeat); t-only at the same depth is always planned beside them.
    /// Required unless the question is `--link list`.
    #[arg(long = "pattern")]
    patterns: Vec<String>,
    /// Tensor-parallel sizes (repeat).
    #[arg(long = "tp", default_value = "2")]
    tps: Vec<usize>,
    #[arg(long, default_value_t = 1)]
    dp: usize,
    /// Sequences per rank per step.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// What TP activation sums travel in: f32, bf16, fp8, int8. Default: bf16 on a GPU
    /// (what Megatron sends in bf16 training), f32 on a CPU or a run directory.
    #[arg(long)]
    comm_dtype: Option<String>,
    /// The gradient buckets' size: auto (sized for the model as tp-train's default:
    /// an eighth of a rank's gradients, at most PyTorch's 25 MiB) or MiB.
    #[arg(long, default_value = "auto", allow_hyphen_values = true)]
    bucket_mb: String,
    /// The TP group's link (repeat to compare): a name (`--link list` names them) or
    /// GBIT:US.
    #[arg(long = "link", default_values = ["nvlink4", "100gbe"], allow_hyphen_values = true)]
    links: Vec<String>,
    /// The data-parallel group's link (default: the TP link).
    #[arg(long, allow_hyphen_values = true)]
    dp_link: Option<String>,
    /// cpu (this CPU's matmuls, timed now), a GPU (a100, h100, h200, b200) with --mfu,
    /// tflops:X, or a run directory whose measured compute is scaled by FLOPs.
    #[arg(long, default_value = "h100")]
    device: String,
    /// The share of the GPU's bf16 peak the step reaches (you state it; the plan lists
    /// measured ones to choose by).
    #[arg(long, allow_negative_numbers = true)]
    mfu: Option<f64>,
    /// The embedding and LM head: vocab-parallel (Megatron's: split by vocabulary rows
    /// over the TP group) or replicated (whole on every rank, this harness's default
    /// `vocab_parallel: false`). Default: vocab-parallel on a GPU, replicated otherwise.
    #[arg(long, value_enum)]
    head: Option<Head>,
    /// How attention FLOPs count: megatron (causal halved) or full (torchtitan).
    #[arg(long, default_value = "megatron")]
    flops: String,
    /// Study runs to take loss evidence from: run directories or folders of them (repeat;
    /// default: plots/study/runs where present).
    #[arg(long)]
    study: Vec<PathBuf>,
    /// Output folder (default plots/plan).
    #[arg(long, default_value = "plots/plan")]
    out: PathBuf,
}

fn shape(a: &Args) -> anyhow::Result<Shape> {
    let mut s = Shape::named(&a.model)?;
    s.n_layer = a.n_layer.unwrap_or(s.n_layer);
    s.n_head = a.n_head.unwrap_or(s.n_head);
    s.n_embd = a.n_embd.unwrap_or(s.n_embd);
    s.vocab = a.vocab.unwrap_or(s.vocab);
    s.block = a.block.unwrap_or(s.block);
    if [s.n_layer, s.n_head, s.n_embd, s.vocab, s.block].contains(&0) {
        return Err(user(
            "--n-layer, --n-head, --n-embd, --vocab and --block must be at least 1",
        ));
    }
    // A pattern expands to at most this many layers: say so of the flag the user gave.
    const MAX_LAYERS: usize = 1000;
    if s.n_layer > MAX_LAYERS {
        return Err(user(format!(
            "--n-layer {} is over the {MAX_LAYERS} layers a layout may have",
            s.n_layer
        )));
    }
    if !s.n_embd.is_multiple_of(s.n_head) {
        return Err(user(format!(
            "--n-embd {} is not a multiple of --n-head {}",
            s.n_embd, s.n_head
        )));
    }
    Ok(s)
}

/// The runs among `dirs`: each a run directory, or a folder of them (a sweep, or
/// plots/study/runs with its sweeps), searched two levels down.
fn runs_in(dirs: &[PathBuf]) -> Vec<PathBuf> {
    fn visit(d: &std::path::Path, depth: usize, out: &mut Vec<PathBuf>) {
        if d.join("config.yaml").is_file() {
            out.push(d.to_path_buf());
        } else if depth > 0 {
            for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
                if e.path().is_dir() {
                    visit(&e.path(), depth - 1, out);
                }
            }
        }
    }
    let mut runs = Vec::new();
    for d in dirs {
        visit(d, 2, &mut runs);
    }
    runs.sort();
    runs
}

fn real_main(a: &Args) -> anyhow::Result<Vec<PathBuf>> {
    if a.links.iter().any(|l| l == "list") {
        for l in tp_harness::comm::link_catalog::links() {
            tp_harness::say!("{:<13} {}", l.name, l.describe());
        }
        return Ok(Vec::new());
    }
    if a.patterns.is_empty() {
        return Err(user(
            "--pattern is missing: name the layouts to plan, e.g. --pattern 3xsppp",
        ));
    }
    let flops = match a.flops.as_str() {
        "megatron" => FlopConvention::Megatron,
        "full" => FlopConvention::Full,
        other => return Err(user(format!("--flops {other}: megatron or full"))),
    };
    // A GPU trains in bf16 and Megatron sums its activations in bf16: half the bytes of
    // f32, so an f32 default would double every GPU plan's TP traffic.
    let on_gpu = tp_lab::planner::catalog::GPUS
        .iter()
        .any(|g| g.name == a.device)
        || a.device.starts_with("tflops:");
    let wanted = a
        .comm_dtype
        .clone()
        .unwrap_or_else(|| if on_gpu { "bf16" } else { "f32" }.to_string());
    let comm_dtype = CommDtype::all()
        .find(|d| d.label() == wanted)
        .ok_or_else(|| user(format!("--comm-dtype {wanted}: f32, bf16, fp8 or int8")))?;
    let bucket_mb = match serde_yaml_ng::from_str(&a.bucket_mb) {
        Ok(BucketCap::Mib(mb)) if !(mb > 0.0 && mb.is_finite()) => None,
        parsed => parsed.ok(),
    }
    .ok_or_else(|| {
        user(format!(
            "--bucket-mb {}: auto or a positive number of MiB",
            a.bucket_mb
        ))
    })?;
    let q = Question {
        shape: shape(a)?,
        patterns: a.patterns.clone(),
        tps: a.tps.clone(),
        dp: a.dp,
        batch: a.batch,
        comm_dtype,
        bucket_mb,
        links: a.links.clone(),
        dp_link: a.dp_link.clone(),
        device: a.device.clone(),
        mfu: a.mfu,
        flops,
        head: a.head,
        study: match a.study.is_empty() {
            true => runs_in(&[PathBuf::from("plots/study/runs")]),
            false => runs_in(&a.study),
        },
    };
    let p = plan(&q)?;
    check_out(&a.out, "--out")?;
    std::fs::create_dir_all(&a.out)?;
    let md = p.markdown();
    tp_harness::say_raw!("{md}");
    let (md_path, json_path) = (a.out.join("plan.md"), a.out.join("plan.json"));
    write_atomic(&md_path, md.as_bytes())?;
    write_atomic(&json_path, p.json()?.as_bytes())?;
    let mut files = vec![md_path, json_path];
    files.extend(tp_lab::planner::plot::plot_plan(&p, &a.out)?);
    Ok(files)
}

fn main() {
    let a = Args::parse();
    exit_on_error(
        "tp-plan",
        real_main(&a).map(|files| {
            for f in files {
                tp_harness::say!("wrote {}", f.display());
            }
        }),
    );
}
