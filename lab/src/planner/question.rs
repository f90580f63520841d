//! The library behind `tp-plan`: the requests of a question (every tp x layout, and
//! t-only beside each), the device's rate (a GPU's datasheet peak at the MFU the user
//! states, a rate given, a run's measured compute, or this CPU's matmuls timed now), the
//! study's evidence, and the plan for every link.

use crate::planner::catalog::GPUS;
use crate::planner::evidence::{evidence, study_rows};
use crate::planner::memory::memory;
use crate::planner::request::{FlopConvention, Head, Request, Shape, StepFlops};
use crate::planner::{curve, row, Curve, Plan, Rate};
use anyhow::Result;
use std::path::{Path, PathBuf};
use tp_harness::blocks::BlockLayout;
use tp_harness::comm::link_catalog::find as find_link;
use tp_harness::comm::CommDtype;
use tp_harness::comm::NamedLink;
use tp_harness::error::user;
use tp_harness::train::bucket_cap::BucketCap;

/// What the user asked.
pub struct Question {
    pub shape: Shape,
    pub patterns: Vec<String>,
    pub tps: Vec<usize>,
    pub dp: usize,
    pub batch: usize,
    pub comm_dtype: CommDtype,
    pub bucket_mb: BucketCap,
    pub links: Vec<String>,
    pub dp_link: Option<String>,
    pub device: String,
    pub mfu: Option<f64>,
    pub flops: FlopConvention,
    pub study: Vec<PathBuf>,
    /// The head's layout; `None`: vocabulary-parallel on a GPU (Megatron's), replicated
    /// otherwise (this harness's default).
    pub head: Option<Head>,
}

impl Question {
    /// The head the plan uses: the one asked for, else the device's default.
    pub fn head(&self) -> Head {
        self.head
            .unwrap_or(if GPUS.iter().any(|g| g.name == self.device) {
                Head::VocabParallel
            } else {
                Head::Replicated
            })
    }
}

fn request(q: &Question, pattern: &str, tp: usize) -> Result<Request> {
    let layout =
        BlockLayout::parse(pattern).map_err(|e| user(format!("--pattern {pattern}: {e}")))?;
    let r = Request {
        shape: q.shape.clone(),
        layout,
        tp,
        dp: q.dp,
        batch: q.batch,
        comm_dtype: q.comm_dtype,
        bucket_mb: q.bucket_mb,
        head: q.head(),
    };
    r.check()?;
    Ok(r)
}

/// The FLOP rate of `device` for requests like `r`.
fn rate(q: &Question, r: &Request) -> Result<Rate> {
    if let Some(g) = GPUS.iter().find(|g| g.name == q.device) {
        let Some(mfu) = q.mfu else {
            return Err(user(format!(
                "--device {} needs --mfu: the share of its bf16 peak ({} TFLOP/s) your step reaches, e.g. --mfu 0.4",
                g.name, g.bf16_tflops
            )));
        };
        if !(mfu > 0.0 && mfu <= 1.0) {
            let shown = if (1e-4..=1e4).contains(&mfu.abs()) {
                format!("{mfu}")
            } else {
                format!("{mfu:e}")
            };
            return Err(user(format!("--mfu must lie in (0, 1], got {shown}")));
        }
        return Ok(Rate {
            flops_per_s: g.bf16_tflops * 1e12 * mfu,
            source: format!("{} at MFU {mfu} as stated; peak: {}", g.name, g.source),
        });
    }
    if let Some(t) = q.device.strip_prefix("tflops:") {
        let t: f64 = t
            .parse()
            .ok()
            .filter(|t: &f64| *t >= 1e-6 && *t <= 1e6)
            .ok_or_else(|| {
                user(format!(
                    "--device {}: tflops:X takes a number from 1e-6 to 1e6 (TFLOP/s a rank)",
                    q.device
                ))
            })?;
        return Ok(Rate {
            flops_per_s: t * 1e12,
            source: format!("{t} TFLOP/s as given"),
        });
    }
    if q.device == "cpu" {
        return measured_cpu(r);
    }
    let dir = Path::new(&q.device);
    if dir.join("config.yaml").is_file() {
        return from_run(dir, q.flops);
    }
    let names: Vec<&str> = GPUS.iter().map(|g| g.name).collect();
    Err(user(format!(
        "--device {}: name cpu, a GPU ({}) with --mfu, tflops:X, or a run directory whose measured compute to scale",
        q.device,
        names.join(", ")
    )))
}

/// A run's measured compute per step (its slowest rank's median) against its FLOPs.
fn from_run(dir: &Path, conv: FlopConvention) -> Result<Rate> {
    let cfg = crate::run_dir::read_config(dir)?;
    let comm = crate::run_dir::read_comm(dir)?;
    let Some(compute) = comm.and_then(|c| c.compute) else {
        return Err(user(format!(
            "--device {}: the run recorded no compute time (comm.json has none): train it with this build",
            dir.display()
        )));
    };
    // A record read back is checked as input is: a compute time of zero, negative,
    // subnormal or absurd would make every planned step zero, negative or infinite.
    let ranks = &compute.per_rank_ms;
    if let Some(bad) = ranks
        .iter()
        .find(|m| !(1e-3..=1e9).contains(*m))
        .map(|m| format!("{m:.3e} ms"))
        .or_else(|| ranks.is_empty().then(|| "no rank's".to_string()))
    {
        return Err(user(format!(
            "--device {}: its comm.json records a compute of {bad} a step, outside 0.001 ms to 1e9 ms: the record is damaged; train the run again",
            dir.display()
        )));
    }
    let m = cfg.model_config(cfg.model.arch.vocab_size.max(65))?;
    let shape = Shape {
        name: dir.display().to_string(),
        n_layer: m.n_layer,
        n_head: m.n_head,
        n_embd: m.n_embd,
        vocab: if m.vocab_size > 0 { m.vocab_size } else { 65 },
        block: m.block_size,
        bias: m.bias,
    };
    let r = Request {
        shape,
        layout: cfg.layout().clone(),
        tp: cfg.parallel.tp,
        dp: cfg.parallel.dp,
        batch: cfg.optim.batch_size,
        comm_dtype: cfg.parallel.comm_dtype,
        bucket_mb: cfg.parallel.ddp_bucket_mb,
        // The run's own head: a vocabulary-parallel run computed 1/tp of it.
        head: if cfg.parallel.vocab_parallel {
            Head::VocabParallel
        } else {
            Head::Replicated
        },
    };
    let flops = StepFlops::of(&r, conv).step(r.shape.n_layer);
    let seconds = compute.max_ms() / 1e3;
    Ok(Rate {
        flops_per_s: flops / seconds,
        source: format!(
            "measured: {} computed {:.2} ms a step on its slowest rank ({})",
            dir.display(),
            compute.max_ms(),
            tp_harness::util::host::cpu()
        ),
    })
}

/// This CPU's f32 matmul rate at the request's MLP shape, timed now (matmuls only: a
/// step's other work is not in it, so small models are predicted too fast).
fn measured_cpu(r: &Request) -> Result<Rate> {
    use candle_core::{Device, Tensor};
    // Timed at the request's shape, each side at most 4096: a wider model's matmuls run
    // at about the rate of these, and its own would not fit in memory.
    let rows = (r.batch * r.shape.block).min(4096);
    let (c, h) = (
        r.shape.n_embd.min(4096),
        (4 * r.shape.n_embd / r.tp).min(4096),
    );
    let a = Tensor::randn(0f32, 1.0, (rows, c), &Device::Cpu)?;
    let b = Tensor::randn(0f32, 1.0, (c, h), &Device::Cpu)?;
    let _ = a.matmul(&b)?;
    let (start, mut n) = (std::time::Instant::now(), 0usize);
    while start.elapsed().as_secs_f64() < 0.3 || n < 3 {
        let _ = a.matmul(&b)?;
        n += 1;
    }
    let s = start.elapsed().as_secs_f64() / n as f64;
    Ok(Rate {
        flops_per_s: 2.0 * (rows * c * h) as f64 / s,
        source: format!(
            "this CPU ({}), its f32 matmuls timed now at ({rows} x {c}) x ({c} x {h}); the step's other work is not in it",
            tp_harness::util::host::cpu()
        ),
    })
}

/// The largest sizes a plan takes: far past any model trained today, small enough that
/// no count wraps, no loop over them runs long and every product stays finite.
const MAX_WIDTH: usize = 1 << 20;
const MAX_HEADS: usize = 1 << 16;
const MAX_VOCAB: usize = 1 << 24;
const MAX_TOKENS: usize = 1 << 24;
const MAX_RANKS: usize = 1 << 20;

impl Question {
    /// Every size in range before anything is computed or allocated: one line naming
    /// the value and its range.
    pub fn check(&self) -> Result<()> {
        let s = &self.shape;
        let sizes = [
            ("--n-head", s.n_head, MAX_HEADS),
            ("--n-embd", s.n_embd, MAX_WIDTH),
            ("--vocab", s.vocab, MAX_VOCAB),
            ("--block", s.block, MAX_TOKENS),
            ("--batch", self.batch, MAX_TOKENS),
            ("--dp", self.dp, MAX_RANKS),
        ];
        let tps = self.tps.iter().map(|&t| ("--tp", t, MAX_HEADS));
        for (flag, v, max) in sizes.into_iter().chain(tps) {
            if v == 0 || v > max {
                return Err(user(format!("{flag} {v} is out of range: 1 to {max}")));
            }
        }
        if self.batch * s.block > MAX_TOKENS {
            return Err(user(format!(
                "--batch {} x --block {} = {} tokens a step and rank is out of range: at most {MAX_TOKENS}",
                self.batch,
                s.block,
                self.batch * s.block
            )));
        }
        Ok(())
    }
}

/// The plan answering `q`.
pub fn plan(q: &Question) -> Result<Plan> {
    q.check()?;
    let links: Vec<NamedLink> = q
        .links
        .iter()
        .map(|l| find_link(l).map_err(user))
        .collect::<Result<_>>()?;
    let dp_link = q
        .dp_link
        .as_deref()
        .map(|l| find_link(l).map_err(user))
        .transpose()?;
    let t_only = format!("{}xt", q.shape.n_layer);
    let mut requests = Vec::new();
    for &tp in &q.tps {
        // Megatron's t-only first, as the row every other is measured against.
        let base = request(q, &t_only, tp)?;
        requests.push((base.clone(), base.clone()));
        for p in q.patterns.iter().filter(|p| **p != t_only) {
            requests.push((request(q, p, tp)?, base.clone()));
        }
    }
    let first = &requests
        .first()
        .ok_or_else(|| user("give at least one --pattern and --tp"))?
        .0;
    let rate = rate(q, first)?;
    let rows_of_study = if q.study.is_empty() {
        Vec::new()
    } else {
        study_rows(&q.study)?
    };
    let curves: Vec<Curve> = links
        .iter()
        .flat_map(|l| {
            requests
                .iter()
                .map(|(r, _)| curve(r, q.flops, rate.flops_per_s, l, dp_link.as_ref()))
        })
        .collect();
    let mut rows = Vec::new();
    for link in &links {
        for (r, base) in &requests {
            let ev = evidence(&rows_of_study, r);
            let gpu = GPUS.iter().find(|g| g.name == q.device);
            // A GPU (or a stated rate) trains in bf16 mixed precision; a CPU in f32.
            let bf16 = gpu.is_some() || q.device.starts_with("tflops:");
            let mem = memory(r, bf16, gpu.map(|g| (g.memory_gb, g.memory_source)));
            rows.push(row(
                r,
                base,
                q.flops,
                rate.flops_per_s,
                (link, dp_link.as_ref()),
                ev,
                mem,
            ));
        }
    }
    // A backstop: every figure printed is a finite number (the checks above keep them so).
    if let Some(r) = rows
        .iter()
        .find(|r| !(r.step_s.is_finite() && r.speedup.is_finite() && r.exposed_s.is_finite()))
    {
        return Err(user(format!(
            "{} at tp {} plans a step of {} s: the inputs are outside what the model prices; give sizes, links and rates nearer real hardware",
            r.step.pattern, r.step.tp, r.step_s
        )));
    }
    Ok(Plan {
        params: q.shape.params(),
        model: q.shape.clone(),
        batch: q.batch,
        dp: q.dp,
        comm_dtype: q.comm_dtype.label().into(),
        flops: q.flops,
        rate,
        dp_link: dp_link.map_or_else(|| "same as tp".to_string(), |l| l.name),
        links,
        head: q.head(),
        mfu_references: if GPUS.iter().any(|g| g.name == q.device) {
            crate::planner::catalog::MFU_REFERENCES.to_vec()
        } else {
            Vec::new()
        },
        rows,
        study_runs: q.study.len(),
        curves,
        tool: format!("tp-plan {}", env!("CARGO_PKG_VERSION")),
    })
}
