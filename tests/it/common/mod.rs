//! Shared helpers for the correctness tests: launching TP groups as threads, gathering
//! logical gradients, comparing tensors, and random test weights.
#![allow(dead_code)]

pub mod checks;
pub mod dense;
pub mod literal;
pub mod machine;

/// The repository's top: these tests are the lab crate's (`lab/`), but the files they
/// read (docs, configs, scripts, both crates' sources) are the repository's.
pub const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

use candle_core::{backprop::GradStore, Device, Tensor, Var};
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};
use std::collections::HashMap;
use tp_harness::blocks::{BlockLayout, Fwd};
use tp_harness::comm::{CountedComm, Tally, ThreadWorld};
use tp_harness::model::{Gpt, ModelConfig};
use tp_harness::ops::{Activation, NormKind};
use tp_harness::tp::{Init, ParamKind, ParamSource};
use tp_harness::train::grads::GradBuffer;

/// Runs `f` on `n` ranks (threads) of one TP group and returns the results in rank order.
pub fn run_tp<R: Send>(n: usize, f: impl Fn(CountedComm) -> R + Sync) -> Vec<R> {
    let world = ThreadWorld::new();
    let comms = world.group(n);
    std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .map(|c| {
                let f = &f;
                s.spawn(move || {
                    f(CountedComm::new(
                        std::sync::Arc::new(c),
                        std::sync::Arc::new(Tally::new()),
                    ))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank panicked"))
            .collect()
    })
}

/// Every logical parameter drawn at random (biases and norm weights too), so that a
/// bias or norm wired wrongly changes the loss.
pub struct RandomWeights {
    pub seed: u64,
}

impl ParamSource for RandomWeights {
    fn full(&self, name: &str, shape: &[usize], init: Init) -> anyhow::Result<Tensor> {
        let mut h: u64 = self.seed;
        for b in name.bytes() {
            h = h.wrapping_mul(31).wrapping_add(b as u64);
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(h);
        let n: usize = shape.iter().product();
        let (mean, std) = match init {
            Init::Ones => (1.0, 0.1),
            Init::Zeros => (0.0, 0.1),
            Init::Normal { .. } => (0.0, 0.2),
        };
        let d = Normal::new(mean as f32, std as f32)?;
        let v: Vec<f32> = (0..n).map(|_| d.sample(&mut rng)).collect();
        Ok(Tensor::from_vec(v, shape, &Device::Cpu)?)
    }
}

pub fn small_config(n_layer: usize, bias: bool) -> ModelConfig {
    ModelConfig {
        vocab_size: 11,
        block_size: 16,
        n_layer,
        n_head: 4,
        n_embd: 32,
        bias,
        norm: NormKind::Layernorm,
        activation: Activation::GeluTanh,
        norm_eps: 1e-5,
        kernels: tp_harness::device::Kernels::Fused,
        dtype: tp_harness::device::ComputeDtype::F32,
        vocab_parallel: false,
    }
}

pub fn batch(seed: u64, b: usize, t: usize, vocab: usize) -> (Tensor, Tensor) {
    use rand::Rng;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let idx: Vec<u32> = (0..b * t)
        .map(|_| rng.random_range(0..vocab as u32))
        .collect();
    let tgt: Vec<u32> = (0..b * t)
        .map(|_| rng.random_range(0..vocab as u32))
        .collect();
    (
        Tensor::from_vec(idx, (b, t), &Device::Cpu).unwrap(),
        Tensor::from_vec(tgt, (b, t), &Device::Cpu).unwrap(),
    )
}

/// The logical loss and gradients of a TP model: sharded gradients gathered to full shape,
/// partial gradients summed by the same once-per-step sync the trainer uses.
pub struct Logical {
    pub loss: f32,
    pub grads: HashMap<String, Tensor>,
    /// Gradient with respect to the embedded input `(B, T, C)`.
    pub input_grad: Tensor,
}

pub fn tp_logical(
    cfg: &ModelConfig,
    pattern: &str,
    tp: usize,
    source: &(dyn ParamSource + Sync),
    idx: &Tensor,
    tgt: &Tensor,
) -> Logical {
    tp_logical_on(cfg, pattern, tp, source, idx, tgt, &Device::Cpu)
}

/// [`tp_logical`] with the ranks' models on `device` (shared by all of them, as the
/// threads launcher shares it); the results come back to the CPU.
pub fn tp_logical_on(
    cfg: &ModelConfig,
    pattern: &str,
    tp: usize,
    source: &(dyn ParamSource + Sync),
    idx: &Tensor,
    tgt: &Tensor,
    device: &Device,
) -> Logical {
    let layout = BlockLayout::parse(pattern).unwrap();
    let idx = &idx.to_device(device).unwrap();
    let tgt = &tgt.to_device(device).unwrap();
    // Every equivalence test checks the replicated-activation invariant on the way.
    let probe = std::sync::Arc::new(tp_harness::blocks::ReplicaProbe::default());
    let per_rank = run_tp(tp, |comm| {
        let mut model = Gpt::build_on(cfg, &layout, source, &comm, device).unwrap();
        model.watch_replicas(probe.clone());
        let fwd = Fwd::eval();
        let loss = model.loss(idx, tgt, &fwd).unwrap();
        let grads = loss.backward().unwrap();
        let mut buf = GradBuffer::new(model.params()).unwrap();
        buf.accumulate(model.params(), &grads, 1.0).unwrap();
        buf.sync_tp_partial(&comm).unwrap();
        let local: Vec<(String, ParamKind, Tensor)> = model
            .params()
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let t =
                    Tensor::from_vec(buf.host(i).unwrap(), p.var.shape(), &Device::Cpu).unwrap();
                (p.name.clone(), p.kind, t)
            })
            .collect();
        // Input gradient: a separate pass from a variable embedding.
        let x = Var::from_tensor(&model.embed(idx, &fwd).unwrap().detach()).unwrap();
        let l2 = model.loss_embedded(x.as_tensor(), tgt, &fwd).unwrap();
        let g2 = l2.backward().unwrap();
        let xg = g2
            .get(x.as_tensor())
            .unwrap()
            .to_device(&Device::Cpu)
            .unwrap();
        (loss.to_scalar::<f32>().unwrap(), local, xg)
    });
    if let Err(e) = probe.verify() {
        panic!("{pattern} at tp {tp}: {e}");
    }
    let mut grads = HashMap::new();
    for (i, (name, kind, _)) in per_rank[0].1.iter().enumerate() {
        let shards: Vec<Tensor> = per_rank.iter().map(|r| r.1[i].2.clone()).collect();
        let full = match kind {
            ParamKind::Sharded(spec) => spec.gather(&shards).unwrap(),
            _ => {
                // Replicated gradients must already be identical on every rank.
                for s in &shards[1..] {
                    assert_eq!(
                        s.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                        shards[0].flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                        "replicated gradient of {name} differs across ranks"
                    );
                }
                shards[0].clone()
            }
        };
        grads.insert(name.clone(), full);
    }
    for r in &per_rank[1..] {
        assert_eq!(r.0, per_rank[0].0, "loss differs across ranks");
    }
    Logical {
        loss: per_rank[0].0,
        grads,
        input_grad: per_rank[0].2.clone(),
    }
}

/// ‖a − b‖ / ‖b‖
pub fn rel_err(a: &Tensor, b: &Tensor) -> f64 {
    let a = a
        .flatten_all()
        .unwrap()
        .to_dtype(candle_core::DType::F64)
        .unwrap()
        .to_vec1::<f64>()
        .unwrap();
    let b = b
        .flatten_all()
        .unwrap()
        .to_dtype(candle_core::DType::F64)
        .unwrap()
        .to_vec1::<f64>()
        .unwrap();
    assert_eq!(a.len(), b.len());
    let num: f64 = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y) * (x - y))
        .sum::<f64>()
        .sqrt();
    let den: f64 = b.iter().map(|y| y * y).sum::<f64>().sqrt();
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

/// Compares every gradient by name; prints the max error per tensor like llm.c's test.
pub fn assert_grads_match(
    ours: &HashMap<String, Tensor>,
    reference: &HashMap<String, Tensor>,
    tol: f64,
    what: &str,
) {
    let mut names: Vec<_> = reference.keys().collect();
    names.sort();
    assert_eq!(
        {
            let mut o: Vec<_> = ours.keys().collect();
            o.sort();
            o
        },
        names,
        "{what}: parameter sets differ"
    );
    let mut worst = (0.0, String::new());
    for n in names {
        assert_eq!(ours[n].dims(), reference[n].dims(), "{what}: shape of {n}");
        let e = rel_err(&ours[n], &reference[n]);
        if e > worst.0 {
            worst = (e, n.clone());
        }
        assert!(
            e <= tol,
            "{what}: gradient of {n} differs by {e:e} (relative) > {tol:e}"
        );
    }
    eprintln!(
        "{what}: worst relative gradient error {:e} ({})",
        worst.0, worst.1
    );
}

pub fn grads_of(vars: &HashMap<String, Var>, g: &GradStore) -> HashMap<String, Tensor> {
    vars.iter()
        .map(|(n, v)| {
            let t = g
                .get(v.as_tensor())
                .cloned()
                .unwrap_or_else(|| v.as_tensor().zeros_like().unwrap());
            (n.clone(), t)
        })
        .collect()
}

/// The logical parameters of a model config drawn from `source`, as variables.
pub fn logical_vars(
    names_shapes: &[(String, Vec<usize>, Init)],
    source: &dyn ParamSource,
) -> HashMap<String, Var> {
    names_shapes
        .iter()
        .map(|(n, s, i)| {
            (
                n.clone(),
                Var::from_tensor(&source.full(n, s, *i).unwrap()).unwrap(),
            )
        })
        .collect()
}

/// Names, logical shapes and inits of a model's parameters, read off a tp-1 build.
pub fn param_specs(cfg: &ModelConfig, pattern: &str) -> Vec<(String, Vec<usize>, Init)> {
    let layout = BlockLayout::parse(pattern).unwrap();
    let model = Gpt::build(
        cfg,
        &layout,
        &tp_harness::tp::SeededInit { seed: 0 },
        &CountedComm::solo(),
    )
    .unwrap();
    model
        .params()
        .iter()
        .map(|p| {
            let init = if p.name.ends_with(".w") && p.full_shape.len() == 1 {
                Init::Ones
            } else if p.full_shape.len() == 1 {
                Init::Zeros
            } else {
                Init::Normal { std: 0.02 }
            };
            (p.name.clone(), p.full_shape.clone(), init)
        })
        .collect()
}

/// A command for a tp-harness binary in `dir`, reading the shared datasets.
pub fn command(name: &str, dir: &std::path::Path) -> std::process::Command {
    let exe = match name {
        "tp-train" => env!("CARGO_BIN_EXE_tp-train"),
        "tp-sample" => env!("CARGO_BIN_EXE_tp-sample"),
        "tp-export" => env!("CARGO_BIN_EXE_tp-export"),
        "tp-sweep" => env!("CARGO_BIN_EXE_tp-sweep"),
        "tp-plot" => env!("CARGO_BIN_EXE_tp-plot"),
        "tp-eval" => env!("CARGO_BIN_EXE_tp-eval"),
        "tp-scan" => env!("CARGO_BIN_EXE_tp-scan"),
        "tp-import" => env!("CARGO_BIN_EXE_tp-import"),
        "tp-plan" => env!("CARGO_BIN_EXE_tp-plan"),
        other => panic!("unknown binary {other}"),
    };
    let mut c = std::process::Command::new(exe);
    with_test_data(c.current_dir(dir));
    c
}

/// The datasets the setup script copies from (`../shared/datasets`).
pub fn shared_datasets() -> std::path::PathBuf {
    std::path::PathBuf::from(REPO).join("../shared/datasets")
}

/// Where the tests' binaries prepare datasets: one folder for every test, so each
/// dataset is prepared once.
pub fn test_data_dir() -> std::path::PathBuf {
    std::env::temp_dir().join("tp-harness-test-datasets")
}

/// Points a command at the shared datasets and the tests' prepared-data folder.
pub fn with_test_data(c: &mut std::process::Command) -> &mut std::process::Command {
    c.env("TP_SHARED_DATASETS", shared_datasets())
        .env("TP_DATA_DIR", test_data_dir())
}

/// Runs a tp-harness binary in `dir` with the shared datasets and extra environment.
pub fn bin(
    name: &str,
    dir: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let mut c = command(name, dir);
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("binary runs")
}

/// `tp-train ARGS --quiet` in `dir` with the test data.
pub fn tp_train(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    bin("tp-train", dir, &[args, &["--quiet"]].concat(), &[])
}

/// A test's directory, removed when the test is over unless it failed (then kept, and
/// named, for a look). Without the removal every run of the suite left ~2 GB behind.
pub struct Scratch(std::path::PathBuf);

impl std::ops::Deref for Scratch {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for Scratch {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept for a look: {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A fresh, empty directory for one test. Every test of the binary shares the process
/// id, so a name asked for twice is a bug in the tests (two tests would share files).
pub fn scratch(name: &str) -> Scratch {
    static TAKEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        !taken.iter().any(|t| t == name),
        "scratch directory `{name}` asked for twice: give each test its own name"
    );
    taken.push(name.to_string());
    let d = std::env::temp_dir().join(format!("tp-harness-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Scratch(d)
}

/// A user error: exit code 2 and one line on stderr that contains `needle`.
pub fn one_clear_error(o: &std::process::Output, needle: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(needle), "expected `{needle}` in {err}");
}

pub fn assert_ok(o: &std::process::Output) {
    assert!(
        o.status.success(),
        "failed ({:?}): {}\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Hugging Face's GPT-2 tensor names and shapes, written out here from its modeling code.
pub fn hf_expected(
    n_layer: usize,
    c: usize,
    v: usize,
    t: usize,
) -> std::collections::HashMap<String, Vec<usize>> {
    let mut m = std::collections::HashMap::new();
    m.insert("transformer.wte.weight".into(), vec![v, c]);
    m.insert("transformer.wpe.weight".into(), vec![t, c]);
    m.insert("transformer.ln_f.weight".into(), vec![c]);
    m.insert("transformer.ln_f.bias".into(), vec![c]);
    for i in 0..n_layer {
        let p = format!("transformer.h.{i}.");
        for (n, s) in [
            ("ln_1.weight", vec![c]),
            ("ln_1.bias", vec![c]),
            ("attn.c_attn.weight", vec![c, 3 * c]),
            ("attn.c_attn.bias", vec![3 * c]),
            ("attn.c_proj.weight", vec![c, c]),
            ("attn.c_proj.bias", vec![c]),
            ("ln_2.weight", vec![c]),
            ("ln_2.bias", vec![c]),
            ("mlp.c_fc.weight", vec![c, 4 * c]),
            ("mlp.c_fc.bias", vec![4 * c]),
            ("mlp.c_proj.weight", vec![4 * c, c]),
            ("mlp.c_proj.bias", vec![c]),
        ] {
            m.insert(format!("{p}{n}"), s);
        }
    }
    m
}

/// `p` is a PNG of some substance.
pub fn assert_png(p: &std::path::Path) {
    let b = std::fs::read(p).unwrap_or_else(|_| panic!("{} missing", p.display()));
    assert!(
        b.len() > 5000 && b.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{} is not a PNG",
        p.display()
    );
}

/// `p` is a whole SVG of some substance.
pub fn assert_svg(p: &std::path::Path) {
    let t = std::fs::read_to_string(p).unwrap_or_else(|_| panic!("{} missing", p.display()));
    assert!(
        t.contains("<svg") && t.trim_end().ends_with("</svg>") && t.len() > 2000,
        "{} is not an SVG",
        p.display()
    );
}
