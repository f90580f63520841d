//! This crate's GPU kernels against the portable path (candle's differentiable ops on the
//! same GPU) or a host reference: attention (its own file), LayerNorm, GELU, the
//! embedding, the biases, cross-entropy, the sum of squares and AdamW. Part of the GPU test
//! set (`tests/gpu.rs`).

// A submodule, so that its tests are named kernels::... as the sanitizer runs select.
#[path = "attention.rs"]
mod attention;

use super::common;
use super::gpu;
use candle_core::{DType, Device, Tensor, Var};
use tp_harness::device::Kernels;
use tp_harness::ops;

/// A random `shape` tensor on the GPU in `dtype`, drawn on the host.
fn random_on_gpu(shape: &[usize], dtype: DType) -> Var {
    let x = Tensor::randn(0f32, 1.0, shape, &Device::Cpu).unwrap();
    Var::from_tensor(&x.to_device(&gpu()).unwrap().to_dtype(dtype).unwrap()).unwrap()
}

/// A random f32 `shape` probe on the GPU whose values `dtype` holds exactly, so that an
/// f32 reference and a `dtype` pass start from the same output gradient.
fn probe_held_by(dtype: DType, shape: &[usize]) -> Tensor {
    Tensor::randn(0f32, 1.0, shape, &Device::Cpu)
        .unwrap()
        .to_device(&gpu())
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
}

/// Gradients (as f32) of `sum(f(inputs) * w)` with respect to `inputs`, and `f`'s output.
fn output_and_grads(inputs: &[&Var], w: &Tensor, f: impl Fn() -> Tensor) -> Vec<Tensor> {
    let y = f();
    let loss = y
        .to_dtype(DType::F32)
        .unwrap()
        .broadcast_mul(w)
        .unwrap()
        .sum_all()
        .unwrap();
    let g = loss.backward().unwrap();
    let mut out = vec![y.to_dtype(DType::F32).unwrap()];
    for v in inputs {
        out.push(
            g.get(v.as_tensor())
                .expect("a gradient for every input")
                .to_dtype(DType::F32)
                .unwrap(),
        );
    }
    out
}

/// The LayerNorm kernels (`ops::cuda::layer_norm`) against the portable path: output, and
/// the input, weight and bias gradients, with and without a bias; rows not a multiple of
/// the block's, widths not a multiple of a warp.
#[test]
fn gpu_layer_norm_kernel_matches_the_portable_path_forward_and_backward() {
    for (dtype, tol) in [(DType::F32, 1e-5), (DType::BF16, 2e-2)] {
        for (rows, c) in [(8192, 768), (37, 128), (5, 33), (1, 1000)] {
            let x = random_on_gpu(&[rows, c], dtype);
            let wt = Var::from_tensor(
                &random_on_gpu(&[c], DType::F32)
                    .as_tensor()
                    .affine(0.5, 1.0)
                    .unwrap(),
            )
            .unwrap();
            let b = random_on_gpu(&[c], DType::F32);
            let probe = Tensor::randn(0f32, 1.0, (rows, c), &Device::Cpu)
                .unwrap()
                .to_device(&gpu())
                .unwrap();
            // With the bias (GPT-2's norms), and without (`bias: false`).
            for bias in [Some(&b), None] {
                let inputs: Vec<&Var> = [&x, &wt].into_iter().chain(bias).collect();
                let run = |k: Kernels| {
                    output_and_grads(&inputs, &probe, || {
                        let b = bias.map(|b| b.as_tensor());
                        ops::layer_norm(k, x.as_tensor(), wt.as_tensor(), b, 1e-5).unwrap()
                    })
                };
                let (got, want) = (run(Kernels::Fused), run(Kernels::Portable));
                for (what, (g, w)) in ["output", "dx", "dw", "db"]
                    .iter()
                    .zip(got.iter().zip(&want))
                {
                    let e = common::rel_err(g, w);
                    assert!(
                        e <= tol,
                        "{dtype:?} {rows}x{c}, bias {}: layer norm {what} differs by {e:e}",
                        bias.is_some()
                    );
                }
            }
            eprintln!("{dtype:?} {rows}x{c}: layer norm kernel matches the portable path");
        }
    }
}

/// The GELU kernels (`ops::cuda::gelu`), both forms, against the portable path (candle's
/// `gelu_erf` and `gelu`) in f32 on the same values: output and input gradient, over
/// values where the curve bends and its tails, and a length no block size divides. The
/// reference is f32 for the bf16 kernel too, whose answer is then off by its rounding
/// only (the portable path in bf16 rounds each of its ~10 backward ops).
#[test]
fn gpu_gelu_kernel_matches_the_portable_path_forward_and_backward() {
    use tp_harness::ops::Activation;
    for (dtype, tol) in [(DType::F32, 1e-5), (DType::BF16, 1e-2)] {
        for act in [Activation::Gelu, Activation::GeluTanh] {
            for shape in [vec![8, 64, 3072], vec![1001]] {
                let x = (random_on_gpu(&shape, DType::F32).as_tensor() * 3.0)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap();
                let (x, x32) = (
                    Var::from_tensor(&x).unwrap(),
                    Var::from_tensor(&x.to_dtype(DType::F32).unwrap()).unwrap(),
                );
                let probe = Tensor::randn(0f32, 1.0, shape.as_slice(), &Device::Cpu)
                    .unwrap()
                    .to_device(&gpu())
                    .unwrap();
                let run = |k: Kernels, x: &Var| {
                    output_and_grads(&[x], &probe, || {
                        ops::activation(k, x.as_tensor(), act).unwrap()
                    })
                };
                let (got, want) = (run(Kernels::Fused, &x), run(Kernels::Portable, &x32));
                for (what, (g, w)) in ["output", "dx"].iter().zip(got.iter().zip(&want)) {
                    let e = common::rel_err(g, w);
                    assert!(
                        e <= tol,
                        "{dtype:?} {act:?} {shape:?}: GELU {what} differs by {e:e}"
                    );
                }
                eprintln!("{dtype:?} {act:?} {shape:?}: GELU kernel matches the portable path");
            }
        }
    }
}

/// The embedding kernels (`ops::cuda::embedding`) against candle's `index_select` and its
/// `index_add` backward, bit for bit: in f32 the same additions in the same order; in bf16
/// the kernel sums in f32 and rounds once, so it is held to candle's f32 path on the same
/// bf16 values, rounded to bf16 (candle's own bf16 backward sums in bf16, which drifts
/// past 1e-2 over an id repeated a thousand times: the first H200 run, 2026-11-28). Ids
/// that repeat (one a thousand times), GPT-2's table, and rows wider than one scan (1000).
#[test]
fn gpu_embedding_kernel_matches_index_select_and_its_backward() {
    for dtype in [DType::F32, DType::BF16] {
        for (v, c, n) in [(50304, 768, 8192), (65, 33, 100), (7, 1000, 2000)] {
            let table = random_on_gpu(&[v, c], dtype);
            // The same values in f32, for the reference.
            let table32 =
                Var::from_tensor(&table.as_tensor().to_dtype(DType::F32).unwrap()).unwrap();
            // Every id once in a while, id 3 a thousand times where there are that many.
            let ids: Vec<u32> = (0..n)
                .map(|i| {
                    if i % 2 == 0 && i < 2000 {
                        3
                    } else {
                        ((i * 7919) % v) as u32
                    }
                })
                .collect();
            let ids = Tensor::new(ids.as_slice(), &gpu()).unwrap();
            let probe = probe_held_by(dtype, &[n, c]);
            let run = |k: Kernels, t: &Var| {
                output_and_grads(&[t], &probe, || {
                    ops::embedding(k, t.as_tensor(), &ids).unwrap()
                })
            };
            let got = run(Kernels::Fused, &table);
            // candle's f32 path, each result rounded once to the kernel's dtype.
            let want: Vec<Tensor> = run(Kernels::Portable, &table32)
                .iter()
                .map(|w| w.to_dtype(dtype).unwrap().to_dtype(DType::F32).unwrap())
                .collect();
            for (what, (g, w)) in ["rows", "table gradient"].iter().zip(got.iter().zip(&want)) {
                let e = common::rel_err(g, w);
                assert!(
                    e == 0.0,
                    "{dtype:?} V{v} C{c} N{n}: embedding {what} differs by {e:e}"
                );
            }
            eprintln!("{dtype:?} V{v} C{c} N{n}: embedding kernel matches index_select");
        }
    }
}

/// The bias kernels (`ops::cuda::bias`) against candle's broadcast add on the same values
/// in f32, rounded once to the kernel's dtype: the output and x's gradient (dy passed
/// through) bit for bit, the bias gradient (column sums in another order) to 1e-5. GPT-2's
/// widths at batch 8 x 1024, rows past the grid's y limit (70 000), widths below a warp.
#[test]
fn gpu_bias_kernel_matches_broadcast_add_and_its_backward() {
    for dtype in [DType::F32, DType::BF16] {
        for (rows, c) in [(8192, 2304), (8192, 768), (37, 33), (1, 1000), (70_000, 5)] {
            let x = random_on_gpu(&[rows, c], dtype);
            let x32 = Var::from_tensor(&x.as_tensor().to_dtype(DType::F32).unwrap()).unwrap();
            let b = random_on_gpu(&[c], DType::F32);
            let probe = probe_held_by(dtype, &[rows, c]);
            let run = |k: Kernels, x: &Var| {
                output_and_grads(&[x, &b], &probe, || {
                    ops::bias_add(k, x.as_tensor(), b.as_tensor()).unwrap()
                })
            };
            let got = run(Kernels::Fused, &x);
            let want = run(Kernels::Portable, &x32);
            let rounded = |t: &Tensor| t.to_dtype(dtype).unwrap().to_dtype(DType::F32).unwrap();
            let what = format!("{dtype:?} {rows}x{c}");
            for (name, i) in [("output", 0), ("x gradient", 1)] {
                let e = common::rel_err(&got[i], &rounded(&want[i]));
                assert!(e == 0.0, "{what}: bias add {name} differs by {e:e}");
            }
            let e = common::rel_err(&got[2], &want[2]);
            assert!(e <= 1e-5, "{what}: bias gradient differs by {e:e}");
            eprintln!("{what}: bias kernel matches broadcast add");
        }
    }
}

/// The cross-entropy kernels (`ops::cuda::cross_entropy`) against the portable path: the
/// mean loss and the logits' gradient, at GPT-2's vocabulary and at sizes below a block.
#[test]
fn gpu_cross_entropy_kernel_matches_the_portable_path_loss_and_gradient() {
    for (dtype, tol) in [(DType::F32, 1e-5), (DType::BF16, 2e-2)] {
        for (rows, v) in [(64, 50304), (7, 65), (3, 1), (2, 300)] {
            let x = random_on_gpu(&[rows, v], dtype);
            let targets: Vec<u32> = (0..rows).map(|i| ((i * 7919) % v) as u32).collect();
            let t = Tensor::new(targets.as_slice(), &gpu()).unwrap();
            let one = Tensor::new(1f32, &gpu()).unwrap();
            let run = |k: Kernels| {
                output_and_grads(&[&x], &one, || {
                    ops::cross_entropy(k, x.as_tensor(), &t).unwrap()
                })
            };
            let (got, want) = (run(Kernels::Fused), run(Kernels::Portable));
            // The loss is computed in f32 on both paths (the portable one from an f32 copy
            // of the logits), so it agrees to f32 rounding whatever the logits' dtype.
            let e = common::rel_err(&got[0], &want[0]);
            assert!(e <= 1e-5, "{dtype:?} {rows}x{v}: loss differs by {e:e}");
            let e = common::rel_err(&got[1], &want[1]);
            assert!(
                e <= tol,
                "{dtype:?} {rows}x{v}: logits' gradient differs by {e:e}"
            );
            eprintln!("{dtype:?} {rows}x{v}: cross-entropy kernel matches the portable path");
        }
    }
}

/// The fused AdamW kernel (`ops::cuda::adamw`) against PyTorch's AdamW computed in f64 on
/// the host, over five steps with weight decay and, in one of them, a clipping factor: to
/// f32 rounding (1e-6 relative in the parameter, the moments likewise). The reference
/// takes the hyperparameters as the kernel gets them, rounded to f32: 1 - 0.99f32 is
/// 0.0099999905, 1e-6 off 0.01, which alone moved v by 1.1e-6 on the first H200 run.
#[test]
fn gpu_fused_adamw_matches_the_textbook_update_over_several_steps() {
    use tp_harness::ops::cuda::adamw::{adamw, AdamWScalars};
    let n = 100_003; // odd: the grid-stride loop's tail
    let (b1, b2, eps, wd, lr) = (0.9f64, 0.99f64, 1e-8f64, 0.1f64, 1e-2f64);
    let p0: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.37).sin()).collect();
    let p = Tensor::new(p0.as_slice(), &gpu()).unwrap();
    let (m, v) = (p.zeros_like().unwrap(), p.zeros_like().unwrap());
    let mut rp: Vec<f64> = p0.iter().map(|&x| x as f64).collect();
    let (mut rm, mut rv) = (vec![0f64; n], vec![0f64; n]);
    for t in 1..=5 {
        let g: Vec<f32> = (0..n).map(|i| ((i * t) as f32 * 0.011).cos()).collect();
        let scale = if t == 3 { 0.5f32 } else { 1.0 };
        let (c1, c2) = (
            1.0 / (1.0 - b1.powi(t as i32)),
            1.0 / (1.0 - b2.powi(t as i32)),
        );
        let k = AdamWScalars {
            b1: b1 as f32,
            b2: b2 as f32,
            lr: lr as f32,
            eps: eps as f32,
            c1: c1 as f32,
            c2: c2 as f32,
            shrink: (1.0 - lr * wd) as f32,
            grad_scale: scale,
        };
        adamw(&p, &Tensor::new(g.as_slice(), &gpu()).unwrap(), &m, &v, k).unwrap();
        // What the kernel was given, exactly, in f64.
        let f = |x: f32| x as f64;
        let (kb1, kb2, klr, keps) = (f(k.b1), f(k.b2), f(k.lr), f(k.eps));
        let (kc1, kc2, kshrink) = (f(k.c1), f(k.c2), f(k.shrink));
        for i in 0..n {
            let gi = (g[i] * scale) as f64;
            rm[i] = kb1 * rm[i] + (1.0 - kb1) * gi;
            rv[i] = kb2 * rv[i] + (1.0 - kb2) * gi * gi;
            rp[i] = rp[i] * kshrink - klr * (rm[i] * kc1) / ((rv[i] * kc2).sqrt() + keps);
        }
    }
    let worst = |got: &Tensor, want: &[f64]| {
        let got = got.to_vec1::<f32>().unwrap();
        let scale = want.iter().fold(0f64, |a, w| a.max(w.abs()));
        got.iter()
            .zip(want)
            .map(|(&g, &w)| (g as f64 - w).abs() / scale)
            .fold(0f64, f64::max)
    };
    let (ep, em, ev) = (worst(&p, &rp), worst(&m, &rm), worst(&v, &rv));
    println!("worst relative error: parameter {ep:.2e}, m {em:.2e}, v {ev:.2e}");
    assert!(ep < 1e-6 && em < 1e-6 && ev < 1e-6, "{ep} {em} {ev}");
}

/// The gradient norm's sum of squares in two kernels (`ops::cuda::sumsq`) against the
/// same squares summed in f64 on the host: tensors of assorted sizes (the grid-stride
/// loop's tails, one of a single element, one larger than a block's stride, one not
/// contiguous), to f64 rounding; the same bits twice (a fixed grid and fixed trees); no
/// tensors sum to zero.
#[test]
fn gpu_sum_of_squares_kernel_matches_a_host_f64_sum_and_repeats_its_bits() {
    use tp_harness::ops::cuda::sumsq::sum_of_squares;
    let sizes = [1usize, 255, 256, 257, 100_003, 3 * 128 * 256 + 17];
    let mut host = Vec::new();
    let mut ts = Vec::new();
    for (k, &n) in sizes.iter().enumerate() {
        let v: Vec<f32> = (0..n)
            .map(|i| ((i * (k + 3)) as f32 * 0.0123).sin() * (k + 1) as f32)
            .collect();
        host.extend(v.iter().map(|&x| (x as f64) * (x as f64)));
        ts.push(Tensor::new(v.as_slice(), &gpu()).unwrap());
    }
    // A transposed (not contiguous) 64 x 48 matrix.
    let m: Vec<f32> = (0..64 * 48).map(|i| (i as f32 * 0.77).cos()).collect();
    host.extend(m.iter().map(|&x| (x as f64) * (x as f64)));
    let mt = Tensor::from_vec(m, (64, 48), &gpu()).unwrap().t().unwrap();
    assert!(!mt.is_contiguous());
    ts.push(mt);
    let want: f64 = host.iter().sum();
    let refs: Vec<&Tensor> = ts.iter().collect();
    let got = sum_of_squares(&refs).unwrap();
    assert!((got - want).abs() <= want * 1e-12, "{got} vs {want}");
    assert_eq!(sum_of_squares(&refs).unwrap().to_bits(), got.to_bits());
    assert_eq!(sum_of_squares(&[]).unwrap(), 0.0);
    eprintln!("sum of squares kernel matches the host f64 sum: {got} vs {want}");
}

/// The embedding's two backward paths give the same bits: each table row's warp scanning
/// every id, and the ids bucketed by one block's sort first (GPT-2's 8192 ids of 50304
/// rows, a small table with many repeats, Shakespeare's 65 characters at GPT-2's width, a
/// single id; every sixth position one frequent id, as a space is); past the sort's size
/// the bucketed path refuses, naming why.
#[test]
fn gpu_embedding_backward_bucketed_equals_the_scan_bit_for_bit() {
    use tp_harness::ops::cuda::embedding::{table_grad, GradPath, SORT_N};
    for dtype in [DType::F32, DType::BF16] {
        for (v, c, n) in [
            (50304, 768, SORT_N),
            (7, 1000, 2000),
            (65, 768, SORT_N),
            (65, 33, 1),
        ] {
            let id = |i: usize| {
                if i.is_multiple_of(6) {
                    1
                } else {
                    (i * 7919 + i / 3) % v
                }
            };
            let ids: Vec<u32> = (0..n).map(|i| id(i) as u32).collect();
            let ids = Tensor::new(ids.as_slice(), &gpu()).unwrap();
            let dy = random_on_gpu(&[n, c], dtype);
            let grad = |path| {
                table_grad(&ids, dy.as_tensor(), v, path)
                    .unwrap()
                    .to_dtype(DType::F32)
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap()
            };
            let (scan, bucketed) = (grad(GradPath::Scan), grad(GradPath::Bucketed));
            let same = scan
                .iter()
                .zip(&bucketed)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same,
                "{dtype:?} V{v} C{c} N{n}: the bucketed gradient differs"
            );
            assert!(scan.iter().any(|&x| x != 0.0));
            eprintln!("{dtype:?} V{v} C{c} N{n}: bucketed == scan, bit for bit");
        }
    }
    let n = SORT_N + 1;
    let ids = Tensor::new(vec![0u32; n].as_slice(), &gpu()).unwrap();
    let dy = random_on_gpu(&[n, 8], DType::F32);
    let e = table_grad(&ids, dy.as_tensor(), 3, GradPath::Bucketed).unwrap_err();
    assert!(
        e.to_string().contains("do not fit the bucketing sort"),
        "{e}"
    );
}

/// The MLP's bias and GELU in one kernel each way (`ops::cuda::bias_gelu`, what
/// `ops::linear_activation` runs on a GPU) against the two kernels it replaces, the bias
/// add then the GELU: the output and x's gradient bit for bit, the bias's gradient to
/// f32 rounding (the same column sums of the same bits, so in practice exactly), both
/// GELU forms.
#[test]
fn gpu_bias_gelu_kernel_equals_the_bias_then_gelu_kernels() {
    use tp_harness::ops::cuda::{bias::bias_add, bias_gelu::bias_gelu, gelu::gelu};
    for dtype in [DType::F32, DType::BF16] {
        for (rows, c) in [(8192, 3072), (37, 33), (1, 1000)] {
            for tanh in [false, true] {
                let x = random_on_gpu(&[rows, c], dtype);
                let b = random_on_gpu(&[c], DType::F32);
                let probe = probe_held_by(dtype, &[rows, c]);
                let fused = output_and_grads(&[&x, &b], &probe, || {
                    bias_gelu(x.as_tensor(), b.as_tensor(), tanh).unwrap()
                });
                let apart = output_and_grads(&[&x, &b], &probe, || {
                    gelu(&bias_add(x.as_tensor(), b.as_tensor()).unwrap(), tanh).unwrap()
                });
                let what = format!("{dtype:?} {rows}x{c} tanh {tanh}");
                for (name, i) in [("output", 0), ("x gradient", 1)] {
                    let e = common::rel_err(&fused[i], &apart[i]);
                    assert!(e == 0.0, "{what}: bias + GELU {name} differs by {e:e}");
                }
                let e = common::rel_err(&fused[2], &apart[2]);
                assert!(e <= 1e-6, "{what}: bias gradient differs by {e:e}");
                eprintln!("{what}: bias + GELU kernel equals bias then GELU");
            }
        }
    }
}
