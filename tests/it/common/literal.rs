//! blocks.md computed literally in one process: every rank's path of every block written
//! out with `sum_r`, all in one autograd graph over the shared logical parameters. The
//! reference that `s`, `p` and `l` (and `t`) must equal at any tp.

use super::dense;
use candle_core::{Tensor, Var};
use std::collections::HashMap;
use tp_harness::blocks::spec::Reference;
use tp_harness::blocks::BlockLayout;
use tp_harness::model::ModelConfig;
use tp_harness::ops;

struct Ctx<'a> {
    vars: &'a HashMap<String, Var>,
    cfg: &'a ModelConfig,
    n: usize,
}

impl Ctx<'_> {
    fn p(&self, name: &str) -> Option<Tensor> {
        self.vars.get(name).map(|v| v.as_tensor().clone())
    }

    fn ln(&self, x: &Tensor, name: &str) -> Tensor {
        ops::layer_norm_composed(
            x,
            &self.p(&format!("{name}.w")).unwrap(),
            self.p(&format!("{name}.b")).as_ref(),
            self.cfg.norm_eps,
        )
        .unwrap()
    }

    fn lin(x: &Tensor, w: &Tensor, b: Option<Tensor>) -> Tensor {
        let (bb, t, c) = x.dims3().unwrap();
        let y = x.reshape((bb * t, c)).unwrap().matmul(w).unwrap();
        let y = match b {
            Some(b) => y.broadcast_add(&b).unwrap(),
            None => y,
        };
        let out = w.dim(1).unwrap();
        y.reshape((bb, t, out)).unwrap()
    }

    /// A_r(h): attention over rank r's heads, projected by rank r's rows of W_o, no bias.
    fn attn_r(&self, i: usize, h: &Tensor, r: usize) -> Tensor {
        let (b, t, c) = h.dims3().unwrap();
        let (nh, hd) = (self.cfg.n_head / self.n, c / self.cfg.n_head);
        let cl = c / self.n;
        let w = self.p(&format!("h.{i}.qkv.w")).unwrap();
        let bias = self.p(&format!("h.{i}.qkv.b"));
        let part = |j: usize| {
            let wj = w.narrow(1, j * c + r * cl, cl).unwrap();
            let bj = bias
                .as_ref()
                .map(|bb| bb.narrow(0, j * c + r * cl, cl).unwrap());
            Self::lin(h, &wj, bj)
                .reshape((b, t, nh, hd))
                .unwrap()
                .transpose(1, 2)
                .unwrap()
                .contiguous()
                .unwrap()
        };
        let (q, k, v) = (part(0), part(1), part(2));
        let att = (q.matmul(&k.t().unwrap()).unwrap() * (1.0 / (hd as f64).sqrt())).unwrap();
        let att = ops::causal_softmax_composed(&att).unwrap();
        let y = att
            .matmul(&v)
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .reshape((b, t, cl))
            .unwrap();
        let wo = self
            .p(&format!("h.{i}.o.w"))
            .unwrap()
            .narrow(0, r * cl, cl)
            .unwrap();
        Self::lin(&y, &wo, None)
    }

    /// M_r(h) = GELU(h W_fc[:, r] + b_fc[r]) W_pr[r, :]
    fn mlp_r(&self, i: usize, h: &Tensor, r: usize) -> Tensor {
        let c = h.dim(2).unwrap();
        let hl = 4 * c / self.n;
        let w = self
            .p(&format!("h.{i}.fc.w"))
            .unwrap()
            .narrow(1, r * hl, hl)
            .unwrap();
        let b = self
            .p(&format!("h.{i}.fc.b"))
            .map(|b| b.narrow(0, r * hl, hl).unwrap());
        let u = ops::activation_composed(&Self::lin(h, &w, b), self.cfg.activation).unwrap();
        let wp = self
            .p(&format!("h.{i}.pr.w"))
            .unwrap()
            .narrow(0, r * hl, hl)
            .unwrap();
        Self::lin(&u, &wp, None)
    }

    fn add_opt(x: Tensor, b: Option<Tensor>) -> Tensor {
        match b {
            Some(b) => x.broadcast_add(&b).unwrap(),
            None => x,
        }
    }

    fn sum(ts: Vec<Tensor>) -> Tensor {
        let mut it = ts.into_iter();
        let mut s = it.next().unwrap();
        for t in it {
            s = (s + t).unwrap();
        }
        s
    }

    fn t_block(&self, i: usize, x: &Tensor) -> Tensor {
        let h = self.ln(x, &format!("h.{i}.ln1"));
        let a = (x + Self::sum((0..self.n).map(|r| self.attn_r(i, &h, r)).collect())).unwrap();
        let a = Self::add_opt(a, self.p(&format!("h.{i}.o.b")));
        let h = self.ln(&a, &format!("h.{i}.ln2"));
        let y = (&a + Self::sum((0..self.n).map(|r| self.mlp_r(i, &h, r)).collect())).unwrap();
        Self::add_opt(y, self.p(&format!("h.{i}.pr.b")))
    }

    fn s_block(&self, i: usize, x: &Tensor) -> Tensor {
        let h = self.ln(x, &format!("h.{i}.ln1"));
        let b_o = self.p(&format!("h.{i}.o.b"));
        let terms = (0..self.n)
            .map(|r| {
                let p_r = self.attn_r(i, &h, r);
                let a_r = Self::add_opt((x + &p_r).unwrap(), b_o.clone());
                let m = self.mlp_r(i, &self.ln(&a_r, &format!("h.{i}.ln2")), r);
                (p_r + m).unwrap()
            })
            .collect();
        let y = (x + Self::sum(terms)).unwrap();
        let y = Self::add_opt(y, b_o);
        Self::add_opt(y, self.p(&format!("h.{i}.pr.b")))
    }

    /// blocks.md's ladder: each module's sum joins the stream one module later; both
    /// pending sums join where the run ends.
    fn l_run(&self, first: usize, len: usize, x: &Tensor) -> Tensor {
        let mut x = x.clone();
        let (mut p_a, mut p_m): (Option<Tensor>, Option<Tensor>) = (None, None);
        for i in first..first + len {
            if let Some(p) = p_a.take() {
                x = (x + p).unwrap();
            }
            let h = self.ln(&x, &format!("h.{i}.ln1"));
            let a = Self::sum((0..self.n).map(|r| self.attn_r(i, &h, r)).collect());
            p_a = Some(Self::add_opt(a, self.p(&format!("h.{i}.o.b"))));
            if let Some(p) = p_m.take() {
                x = (x + p).unwrap();
            }
            let h = self.ln(&x, &format!("h.{i}.ln2"));
            let m = Self::sum((0..self.n).map(|r| self.mlp_r(i, &h, r)).collect());
            p_m = Some(Self::add_opt(m, self.p(&format!("h.{i}.pr.b"))));
        }
        for p in [p_a, p_m].into_iter().flatten() {
            x = (x + p).unwrap();
        }
        x
    }

    fn p_run(&self, first: usize, len: usize, x: &Tensor) -> Tensor {
        let mut xs: Vec<Tensor> = vec![x.clone(); self.n];
        let mut zs: Vec<Tensor> = Vec::new();
        for (j, i) in (first..first + len).enumerate() {
            zs.clear();
            for (r, x_r) in xs.iter_mut().enumerate() {
                let p_r = self.attn_r(i, &self.ln(x_r, &format!("h.{i}.ln1")), r);
                let a_r = (&*x_r + &p_r).unwrap();
                let z_r = (p_r + self.mlp_r(i, &self.ln(&a_r, &format!("h.{i}.ln2")), r)).unwrap();
                if j + 1 < len {
                    *x_r = (&*x_r + &z_r).unwrap();
                }
                zs.push(z_r);
            }
        }
        let mean_x = (Self::sum(xs) * (1.0 / self.n as f64)).unwrap();
        (mean_x + Self::sum(zs.clone())).unwrap()
    }
}

pub fn loss_embedded(
    vars: &HashMap<String, Var>,
    cfg: &ModelConfig,
    pattern: &str,
    n: usize,
    x: &Tensor,
    tgt: &Tensor,
) -> Tensor {
    let ctx = Ctx { vars, cfg, n };
    let layout = BlockLayout::parse(pattern).unwrap();
    let kinds = &layout.kinds;
    let mut x = x.clone();
    let mut i = 0;
    while i < kinds.len() {
        // A kind proved equal to dense GPT-2 is read as t's formula; the others by the
        // letter their spec files their literal reading under.
        let letter = match kinds[i].spec().reference {
            Reference::DenseGpt2 => 't',
            Reference::Literal(c) => c,
            Reference::None => panic!("block kind {} has no reference to read", kinds[i]),
        };
        match letter {
            't' => x = ctx.t_block(i, &x),
            's' => x = ctx.s_block(i, &x),
            run @ ('p' | 'l') => {
                let len = kinds[i..].iter().take_while(|k| **k == kinds[i]).count();
                x = if run == 'p' {
                    ctx.p_run(i, len, &x)
                } else {
                    ctx.l_run(i, len, &x)
                };
                i += len;
                continue;
            }
            other => panic!("no literal reading of block kind {other}"),
        }
        i += 1;
    }
    let h = ctx.ln(&x, "lnf");
    let (b, t, c) = h.dims3().unwrap();
    let logits = h
        .reshape((b * t, c))
        .unwrap()
        .matmul(&ctx.p("wte").unwrap().t().unwrap())
        .unwrap();
    ops::cross_entropy_composed(&logits, &tgt.flatten_all().unwrap()).unwrap()
}

pub fn loss(
    vars: &HashMap<String, Var>,
    cfg: &ModelConfig,
    pattern: &str,
    n: usize,
    idx: &Tensor,
    tgt: &Tensor,
) -> Tensor {
    loss_embedded(vars, cfg, pattern, n, &dense::embed(vars, idx), tgt)
}
