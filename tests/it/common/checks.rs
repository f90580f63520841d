//! The equivalence checks, parameterised by where they run: a `t`-only model against
//! dense GPT-2, `s`/`p` against the literal reading of blocks.md, and the golden cases.
//! The CPU suite runs them with both kernels; the GPU suite (`tests/gpu.rs`) on CUDA.
//! References are always computed on the CPU in f32.

use super::*;
use candle_core::{DType, Device, Var};
use std::path::PathBuf;
use tp_harness::device::{ComputeDtype, Kernels};
use tp_harness::tp::StoredParams;

/// Where and how our model computes in a check, and how close it must come.
#[derive(Clone)]
pub struct On {
    pub kernels: Kernels,
    pub device: Device,
    pub dtype: ComputeDtype,
    /// Largest relative loss difference accepted.
    pub loss_tol: f64,
    /// Largest relative gradient difference (per tensor, L2) accepted.
    pub grad_tol: f64,
    /// The tied embedding/head split by vocabulary over the TP group.
    pub vocab_parallel: bool,
}

impl On {
    /// The CPU in f32 with `kernels`: the tolerances every backend must meet in f32.
    pub fn cpu(kernels: Kernels) -> Self {
        Self {
            kernels,
            device: Device::Cpu,
            dtype: ComputeDtype::F32,
            loss_tol: 1e-5,
            grad_tol: 1e-4,
            vocab_parallel: false,
        }
    }

    /// The same with the embedding/head vocabulary-parallel.
    pub fn vocab_parallel(self) -> Self {
        Self {
            vocab_parallel: true,
            ..self
        }
    }

    pub fn label(&self) -> String {
        format!(
            "{} {} {} kernels{}",
            if self.device.is_cpu() { "cpu" } else { "cuda" },
            self.dtype.label(),
            self.kernels.label(),
            if self.vocab_parallel {
                ", vocab-parallel"
            } else {
                ""
            }
        )
    }
}

fn compare(
    what: &str,
    on: &On,
    ours: &Logical,
    ref_loss: f32,
    ref_grads: &HashMap<String, Tensor>,
    ref_xg: Option<&Tensor>,
) {
    let rel = ((ours.loss - ref_loss) / ref_loss).abs() as f64;
    assert!(
        rel <= on.loss_tol,
        "{what}: loss {} vs reference {ref_loss} (rel {rel:e} > {:e})",
        ours.loss,
        on.loss_tol
    );
    assert_grads_match(&ours.grads, ref_grads, on.grad_tol, what);
    if let Some(ref_xg) = ref_xg {
        let e = rel_err(&ours.input_grad, ref_xg);
        assert!(e <= on.grad_tol, "{what}: input gradient differs by {e:e}");
    }
}

/// A `t`-only (or `s` at tp 1) model equals dense GPT-2: loss, every gradient, input
/// gradient.
pub fn check_against_dense(pattern: &str, tp: usize, bias: bool, on: &On) {
    let mut cfg = small_config(BlockLayout::parse(pattern).unwrap().n_layer(), bias);
    cfg.kernels = on.kernels;
    cfg.dtype = on.dtype;
    cfg.vocab_parallel = on.vocab_parallel;
    let source = RandomWeights { seed: 7 };
    let (idx, tgt) = batch(3, 3, 16, cfg.vocab_size);
    let ours = tp_logical_on(&cfg, pattern, tp, &source, &idx, &tgt, &on.device);

    let vars = logical_vars(&param_specs(&cfg, pattern), &source);
    let loss = dense::loss(&vars, &cfg, &idx, &tgt);
    let ref_grads = grads_of(&vars, &loss.backward().unwrap());
    let ref_loss = loss.to_scalar::<f32>().unwrap();
    let x = Var::from_tensor(&dense::embed(&vars, &idx).detach()).unwrap();
    let ref_xg = dense::loss_embedded(&vars, &cfg, x.as_tensor(), &tgt)
        .backward()
        .unwrap();
    let ref_xg = ref_xg.get(x.as_tensor()).unwrap();
    let what = format!("{pattern} tp{tp} bias={bias} {}", on.label());
    compare(&what, on, &ours, ref_loss, &ref_grads, Some(ref_xg));
}

/// `s`/`p` models equal the single-process literal reading of blocks.md.
pub fn check_against_literal(pattern: &str, tp: usize, bias: bool, on: &On) {
    let mut cfg = small_config(BlockLayout::parse(pattern).unwrap().n_layer(), bias);
    cfg.kernels = on.kernels;
    cfg.dtype = on.dtype;
    cfg.vocab_parallel = on.vocab_parallel;
    let source = RandomWeights { seed: 11 };
    let (idx, tgt) = batch(5, 3, 16, cfg.vocab_size);
    let ours = tp_logical_on(&cfg, pattern, tp, &source, &idx, &tgt, &on.device);

    let vars = logical_vars(&param_specs(&cfg, pattern), &source);
    let loss = literal::loss(&vars, &cfg, pattern, tp, &idx, &tgt);
    let ref_grads = grads_of(&vars, &loss.backward().unwrap());
    let ref_loss = loss.to_scalar::<f32>().unwrap();
    let x = Var::from_tensor(&dense::embed(&vars, &idx).detach()).unwrap();
    let ref_xg = literal::loss_embedded(&vars, &cfg, pattern, tp, x.as_tensor(), &tgt)
        .backward()
        .unwrap();
    let ref_xg = ref_xg.get(x.as_tensor()).unwrap();
    let what = format!("{pattern} tp{tp} bias={bias} {}", on.label());
    compare(&what, on, &ours, ref_loss, &ref_grads, Some(ref_xg));
}

/// `../shared/golden` (the t/s/p cases), or `TP_GOLDEN_DIR`.
pub fn golden_dir() -> PathBuf {
    shared_dir("TP_GOLDEN_DIR", "golden")
}

/// `../shared/golden-ladder` (the cases with `l` blocks), or `TP_GOLDEN_LADDER_DIR`.
pub fn golden_ladder_dir() -> PathBuf {
    shared_dir("TP_GOLDEN_LADDER_DIR", "golden-ladder")
}

fn shared_dir(var: &str, name: &str) -> PathBuf {
    match std::env::var(var) {
        Ok(d) => PathBuf::from(d),
        Err(_) => PathBuf::from(crate::common::REPO)
            .join("../shared")
            .join(name),
    }
}

#[derive(serde::Deserialize)]
struct Case {
    pattern: String,
    layout: String,
    tp: usize,
    bias: bool,
    vocab_size: usize,
    block_size: usize,
    n_embd: usize,
    n_head: usize,
    n_layer: usize,
    activation: Activation,
    layernorm_eps: f64,
    loss: f64,
    forward_allreduces: usize,
}

/// Every golden case in `dir` (an independent implementation's weights, batch, loss and
/// gradients) at its own tp, under each of `ons`. Returns how many cases ran.
pub fn check_golden_cases(dir: &std::path::Path, ons: &[On]) -> usize {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("golden folder {} unreadable: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    cases.sort();
    assert!(
        !cases.is_empty(),
        "no golden cases (*.json) in {}",
        dir.display()
    );
    for json in &cases {
        let case: Case = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
        let tensors =
            candle_core::safetensors::load(json.with_extension("safetensors"), &Device::Cpu)
                .unwrap();
        let layout = BlockLayout::parse(&case.pattern).unwrap();
        assert_eq!(
            layout.expanded(),
            case.layout,
            "{}: our expansion of the pattern",
            json.display()
        );
        assert_eq!(
            layout.forward_allreduces(),
            case.forward_allreduces,
            "{}: all-reduce count",
            json.display()
        );
        let base = ModelConfig {
            vocab_size: case.vocab_size,
            block_size: case.block_size,
            n_layer: case.n_layer,
            n_head: case.n_head,
            n_embd: case.n_embd,
            bias: case.bias,
            norm: NormKind::Layernorm,
            activation: case.activation,
            norm_eps: case.layernorm_eps,
            kernels: Kernels::Fused,
            dtype: ComputeDtype::F32,
            vocab_parallel: false,
        };
        let mut params = HashMap::new();
        let mut ref_grads = HashMap::new();
        for (k, v) in &tensors {
            if let Some(n) = k.strip_prefix("param.") {
                params.insert(n.to_string(), v.to_dtype(DType::F32).unwrap());
            } else if let Some(n) = k.strip_prefix("grad.") {
                ref_grads.insert(n.to_string(), v.to_dtype(DType::F32).unwrap());
            }
        }
        let idx = tensors["tokens"].to_dtype(DType::U32).unwrap();
        let tgt = tensors["targets"].to_dtype(DType::U32).unwrap();
        let source = StoredParams { tensors: params };
        for on in ons {
            let cfg = ModelConfig {
                kernels: on.kernels,
                dtype: on.dtype,
                vocab_parallel: on.vocab_parallel,
                ..base.clone()
            };
            let ours = tp_logical_on(
                &cfg,
                &case.pattern,
                case.tp,
                &source,
                &idx,
                &tgt,
                &on.device,
            );
            let what = format!(
                "golden {} ({})",
                json.file_stem().unwrap().to_string_lossy(),
                on.label()
            );
            compare(&what, on, &ours, case.loss as f32, &ref_grads, None);
            eprintln!(
                "{what}: loss {} (golden {}), {} gradients match",
                ours.loss,
                case.loss,
                ref_grads.len()
            );
        }
    }
    cases.len()
}
