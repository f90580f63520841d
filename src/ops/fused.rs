//! Fused CPU kernels with hand-written backward, as candle custom ops. Each replaces a
//! chain of generic element-wise ops (and their allocations) in forward and backward; each
//! has a test against the composed reference in `ops` (values and gradients).

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Result, Shape, Tensor};

/// The tensor's data as one contiguous f32 slice.
fn with_f32<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    let candle_core::Storage::Cpu(CpuStorage::F32(data)) = &*storage else {
        candle_core::bail!("fused ops support f32 tensors on the CPU only");
    };
    let (a, b) = layout.contiguous_offsets().expect("contiguous");
    Ok(f(&data[a..b]))
}

fn slice_of<'a>(s: &'a CpuStorage, l: &Layout) -> Result<&'a [f32]> {
    let CpuStorage::F32(d) = s else {
        candle_core::bail!("fused ops support f32 tensors only");
    };
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&d[a..b]),
        None => candle_core::bail!("fused ops need contiguous inputs"),
    }
}

/// LayerNorm without bias over the last dimension: `(x - mean) / sqrt(var + eps) * w`.
struct LayerNorm {
    eps: f32,
}

fn row_stats(row: &[f32], eps: f32) -> (f32, f32) {
    let n = row.len() as f32;
    let mean = row.iter().sum::<f32>() / n;
    let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
    (mean, 1.0 / (var + eps).sqrt())
}

impl CustomOp2 for LayerNorm {
    fn name(&self) -> &'static str {
        "fused-layer-norm"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, w) = (slice_of(s1, l1)?, slice_of(s2, l2)?);
        let c = w.len();
        let mut out = vec![0f32; x.len()];
        for (row, o) in x.chunks_exact(c).zip(out.chunks_exact_mut(c)) {
            let (mean, rstd) = row_stats(row, self.eps);
            for ((o, &v), &g) in o.iter_mut().zip(row).zip(w) {
                *o = (v - mean) * rstd * g;
            }
        }
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let c = w.elem_count();
        let (dx, dw) = with_f32(x, |x| {
            with_f32(w, |w| {
                with_f32(grad, |dy| {
                    let mut dx = vec![0f32; x.len()];
                    let mut dw = vec![0f32; c];
                    let mut xhat = vec![0f32; c];
                    for ((row, dyr), dxr) in x
                        .chunks_exact(c)
                        .zip(dy.chunks_exact(c))
                        .zip(dx.chunks_exact_mut(c))
                    {
                        let (mean, rstd) = row_stats(row, self.eps);
                        let (mut s1, mut s2) = (0f32, 0f32);
                        for i in 0..c {
                            xhat[i] = (row[i] - mean) * rstd;
                            let g = dyr[i] * w[i];
                            s1 += g;
                            s2 += g * xhat[i];
                            dw[i] += dyr[i] * xhat[i];
                        }
                        let (m1, m2) = (s1 / c as f32, s2 / c as f32);
                        for i in 0..c {
                            dxr[i] = rstd * (dyr[i] * w[i] - m1 - xhat[i] * m2);
                        }
                    }
                    (dx, dw)
                })
            })
        })???;
        Ok((
            Some(Tensor::from_vec(dx, x.shape(), x.device())?),
            Some(Tensor::from_vec(dw, w.shape(), w.device())?),
        ))
    }
}

pub fn layer_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    x.contiguous()?
        .apply_op2(&w.contiguous()?, LayerNorm { eps: eps as f32 })
}

/// GELU, exact (erf) or tanh form.
struct Gelu {
    tanh: bool,
}

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const INV_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;

impl Gelu {
    fn f(&self, x: f32) -> f32 {
        if self.tanh {
            0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh())
        } else {
            0.5 * x * (1.0 + candle_core::cpu::erf::erf_f32(x * INV_SQRT_2))
        }
    }
    fn df(&self, x: f32) -> f32 {
        if self.tanh {
            let u = SQRT_2_OVER_PI * (x + 0.044715 * x * x * x);
            let t = u.tanh();
            let du = SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x);
            0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du
        } else {
            let cdf = 0.5 * (1.0 + candle_core::cpu::erf::erf_f32(x * INV_SQRT_2));
            let pdf = (-0.5 * x * x).exp() * 0.398_942_3;
            cdf + x * pdf
        }
    }
}

impl CustomOp1 for Gelu {
    fn name(&self) -> &'static str {
        "fused-gelu"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = slice_of(s, l)?;
        Ok((
            CpuStorage::F32(x.iter().map(|&v| self.f(v)).collect()),
            l.shape().clone(),
        ))
    }
    fn bwd(&self, x: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let dx = with_f32(x, |x| {
            with_f32(grad, |g| {
                x.iter()
                    .zip(g)
                    .map(|(&v, &d)| d * self.df(v))
                    .collect::<Vec<f32>>()
            })
        })??;
        Ok(Some(Tensor::from_vec(dx, x.shape(), x.device())?))
    }
}

pub fn gelu(x: &Tensor, tanh: bool) -> Result<Tensor> {
    x.contiguous()?.apply_op1(Gelu { tanh })
}

/// Causal softmax over the last dimension of square `(.., T, T)` scores: row i keeps
/// columns j <= i. The backward uses the saved output.
struct CausalSoftmax;

impl CustomOp1 for CausalSoftmax {
    fn name(&self) -> &'static str {
        "fused-causal-softmax"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = slice_of(s, l)?;
        let t = *l.dims().last().expect("rank >= 1");
        let mut out = vec![0f32; x.len()];
        for (r, (row, o)) in x.chunks_exact(t).zip(out.chunks_exact_mut(t)).enumerate() {
            let i = r % t;
            let live = &row[..=i];
            let max = live.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0f32;
            for j in 0..=i {
                let e = (live[j] - max).exp();
                o[j] = e;
                sum += e;
            }
            let inv = 1.0 / sum;
            for v in &mut o[..=i] {
                *v *= inv;
            }
        }
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }
    fn bwd(&self, _x: &Tensor, res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let t = res.dim(candle_core::D::Minus1)?;
        let dx = with_f32(res, |y| {
            with_f32(grad, |dy| {
                let mut dx = vec![0f32; y.len()];
                for (r, ((yr, dyr), dxr)) in y
                    .chunks_exact(t)
                    .zip(dy.chunks_exact(t))
                    .zip(dx.chunks_exact_mut(t))
                    .enumerate()
                {
                    let i = r % t;
                    let dot: f32 = (0..=i).map(|j| yr[j] * dyr[j]).sum();
                    for j in 0..=i {
                        dxr[j] = yr[j] * (dyr[j] - dot);
                    }
                }
                dx
            })
        })??;
        Ok(Some(Tensor::from_vec(dx, res.shape(), res.device())?))
    }
}

pub fn causal_softmax(scores: &Tensor) -> Result<Tensor> {
    scores.contiguous()?.apply_op1(CausalSoftmax)
}

/// Mean cross-entropy of `logits (N, V)` against `targets (N,)` u32, as one op: the
/// backward is `(softmax - onehot) / N`.
struct CrossEntropy;

fn log_softmax_row(row: &[f32]) -> (f32, f32) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = row.iter().map(|v| (v - max).exp()).sum();
    (max, sum.ln())
}

impl CustomOp2 for CrossEntropy {
    fn name(&self) -> &'static str {
        "fused-cross-entropy"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = slice_of(s1, l1)?;
        let CpuStorage::U32(t) = s2 else {
            candle_core::bail!("cross-entropy targets must be u32");
        };
        let t = &t[l2.start_offset()..l2.start_offset() + l2.shape().elem_count()];
        let v = *l1.dims().last().expect("rank 2");
        let mut total = 0f64;
        for (row, &tg) in x.chunks_exact(v).zip(t) {
            let (max, lse) = log_softmax_row(row);
            total += (lse - (row[tg as usize] - max)) as f64;
        }
        Ok((
            CpuStorage::F32(vec![(total / t.len() as f64) as f32]),
            Shape::from(()),
        ))
    }
    fn bwd(
        &self,
        x: &Tensor,
        tgt: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let g = grad.to_scalar::<f32>()?;
        let targets = tgt.flatten_all()?.to_vec1::<u32>()?;
        let v = x.dim(candle_core::D::Minus1)?;
        let scale = g / targets.len() as f32;
        let dx = with_f32(x, |x| {
            let mut dx = vec![0f32; x.len()];
            for ((row, d), &tg) in x.chunks_exact(v).zip(dx.chunks_exact_mut(v)).zip(&targets) {
                let (max, lse) = log_softmax_row(row);
                for j in 0..v {
                    d[j] = (row[j] - max - lse).exp() * scale;
                }
                d[tg as usize] -= scale;
            }
            dx
        })?;
        Ok((Some(Tensor::from_vec(dx, x.shape(), x.device())?), None))
    }
}

pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    logits
        .contiguous()?
        .apply_op2(&targets.contiguous()?, CrossEntropy)
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use candle_core::{Device, Var};
    use rand::{Rng, SeedableRng};

    fn rand_var(shape: &[usize], seed: u64, scale: f32) -> Var {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| (rng.random::<f32>() - 0.5) * 2.0 * scale)
            .collect();
        Var::from_tensor(&Tensor::from_vec(v, shape, &Device::Cpu).unwrap()).unwrap()
    }

    fn rel(a: &Tensor, b: &Tensor) -> f32 {
        let a = a.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let b = b.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let num: f32 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y) * (x - y))
            .sum::<f32>()
            .sqrt();
        let den: f32 = b.iter().map(|y| y * y).sum::<f32>().sqrt().max(1e-12);
        num / den
    }

    /// Value and gradients of `fused` and `reference` under a random upstream gradient.
    fn check(
        vars: &[&Var],
        fused: impl Fn() -> Tensor,
        reference: impl Fn() -> Tensor,
        what: &str,
    ) {
        let (yf, yr) = (fused(), reference());
        assert!(
            rel(&yf, &yr) < 1e-5,
            "{what}: values differ by {}",
            rel(&yf, &yr)
        );
        let up = rand_var(yf.dims(), 99, 1.0);
        let gf = (yf * up.as_tensor())
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let gr = (yr * up.as_tensor())
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        for (i, v) in vars.iter().enumerate() {
            let (a, b) = (
                gf.get(v.as_tensor()).unwrap(),
                gr.get(v.as_tensor()).unwrap(),
            );
            assert!(
                rel(a, b) < 1e-4,
                "{what}: gradient {i} differs by {}",
                rel(a, b)
            );
        }
    }

    #[test]
    fn fused_layer_norm_matches_the_composed_one_in_values_and_gradients() {
        let x = rand_var(&[3, 5, 32], 1, 2.0);
        let w = rand_var(&[32], 2, 1.0);
        let b = rand_var(&[32], 3, 1.0);
        check(
            &[&x, &w, &b],
            || layer_norm(&x, &w, Some(&b), 1e-5).unwrap(),
            || layer_norm_composed(&x, &w, Some(&b), 1e-5).unwrap(),
            "layer norm",
        );
    }

    #[test]
    fn fused_gelu_matches_candles_erf_and_tanh_forms() {
        let x = rand_var(&[4, 50], 4, 4.0);
        for act in [Activation::Gelu, Activation::GeluTanh] {
            check(
                &[&x],
                || activation(&x, act).unwrap(),
                || activation_composed(&x, act).unwrap(),
                "gelu",
            );
        }
    }

    #[test]
    fn fused_causal_softmax_matches_the_masked_composed_one() {
        let s = rand_var(&[2, 3, 7, 7], 5, 3.0);
        check(
            &[&s],
            || causal_softmax(&s).unwrap(),
            || causal_softmax_composed(&s).unwrap(),
            "causal softmax",
        );
    }

    #[test]
    fn fused_cross_entropy_matches_the_composed_one() {
        let logits = rand_var(&[12, 11], 6, 3.0);
        let t = Tensor::from_vec(
            (0..12u32).map(|i| (i * 7) % 11).collect::<Vec<_>>(),
            12,
            &Device::Cpu,
        )
        .unwrap();
        check(
            &[&logits],
            || cross_entropy(&logits, &t).unwrap(),
            || cross_entropy_composed(&logits, &t).unwrap(),
            "cross entropy",
        );
    }
}
