//! A plain dense GPT-2 (nanoGPT's model.py, one process, all heads at once), written
//! without any tensor-parallel machinery: the reference that `t` blocks must equal.

use candle_core::{Tensor, Var};
use std::collections::HashMap;
use tp_harness::model::ModelConfig;
use tp_harness::ops;

fn p(vars: &HashMap<String, Var>, n: &str) -> Option<Tensor> {
    vars.get(n).map(|v| v.as_tensor().clone())
}

fn linear(x: &Tensor, w: Tensor, b: Option<Tensor>) -> Tensor {
    let (bb, t, c) = x.dims3().unwrap();
    let out = w.dim(1).unwrap();
    let y = x.reshape((bb * t, c)).unwrap().matmul(&w).unwrap();
    let y = match b {
        Some(b) => y.broadcast_add(&b).unwrap(),
        None => y,
    };
    y.reshape((bb, t, out)).unwrap()
}

fn ln(vars: &HashMap<String, Var>, x: &Tensor, name: &str, eps: f64) -> Tensor {
    ops::layer_norm_composed(
        x,
        &p(vars, &format!("{name}.w")).unwrap(),
        p(vars, &format!("{name}.b")).as_ref(),
        eps,
    )
    .unwrap()
}

pub fn embed(vars: &HashMap<String, Var>, idx: &Tensor) -> Tensor {
    let (b, t) = idx.dims2().unwrap();
    let wte = p(vars, "wte").unwrap();
    let c = wte.dim(1).unwrap();
    let tok = wte
        .index_select(&idx.flatten_all().unwrap(), 0)
        .unwrap()
        .reshape((b, t, c))
        .unwrap();
    tok.broadcast_add(&p(vars, "wpe").unwrap().narrow(0, 0, t).unwrap())
        .unwrap()
}

pub fn block_pub(vars: &HashMap<String, Var>, cfg: &ModelConfig, i: usize, x: &Tensor) -> Tensor {
    let (b, t, c) = x.dims3().unwrap();
    let (nh, hd) = (cfg.n_head, c / cfg.n_head);
    let h = ln(vars, x, &format!("h.{i}.ln1"), cfg.norm_eps);
    let qkv = linear(
        &h,
        p(vars, &format!("h.{i}.qkv.w")).unwrap(),
        p(vars, &format!("h.{i}.qkv.b")),
    );
    let split = |j: usize| {
        qkv.narrow(2, j * c, c)
            .unwrap()
            .reshape((b, t, nh, hd))
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .contiguous()
            .unwrap()
    };
    let (q, k, v) = (split(0), split(1), split(2));
    let att = (q.matmul(&k.t().unwrap()).unwrap() * (1.0 / (hd as f64).sqrt())).unwrap();
    let att = ops::causal_softmax_composed(&att).unwrap();
    let y = att
        .matmul(&v)
        .unwrap()
        .transpose(1, 2)
        .unwrap()
        .reshape((b, t, c))
        .unwrap();
    let y = linear(
        &y,
        p(vars, &format!("h.{i}.o.w")).unwrap(),
        p(vars, &format!("h.{i}.o.b")),
    );
    let a = (x + y).unwrap();
    let h = ln(vars, &a, &format!("h.{i}.ln2"), cfg.norm_eps);
    let u = linear(
        &h,
        p(vars, &format!("h.{i}.fc.w")).unwrap(),
        p(vars, &format!("h.{i}.fc.b")),
    );
    let u = ops::activation_composed(&u, cfg.activation).unwrap();
    let m = linear(
        &u,
        p(vars, &format!("h.{i}.pr.w")).unwrap(),
        p(vars, &format!("h.{i}.pr.b")),
    );
    (a + m).unwrap()
}

pub fn loss_embedded(
    vars: &HashMap<String, Var>,
    cfg: &ModelConfig,
    x: &Tensor,
    tgt: &Tensor,
) -> Tensor {
    let mut x = x.clone();
    for i in 0..cfg.n_layer {
        x = block_pub(vars, cfg, i, &x);
    }
    let h = ln(vars, &x, "lnf", cfg.norm_eps);
    let (b, t, c) = h.dims3().unwrap();
    let logits = h
        .reshape((b * t, c))
        .unwrap()
        .matmul(&p(vars, "wte").unwrap().t().unwrap())
        .unwrap();
    ops::cross_entropy_composed(&logits, &tgt.flatten_all().unwrap()).unwrap()
}

pub fn loss(vars: &HashMap<String, Var>, cfg: &ModelConfig, idx: &Tensor, tgt: &Tensor) -> Tensor {
    loss_embedded(vars, cfg, &embed(vars, idx), tgt)
}
