//! `vocab_parallel`: the tied embedding/head split by vocabulary over the TP group is the
//! same function with the same gradients as the replicated table (against dense GPT-2,
//! the literal reading of blocks.md, the replicated TP model itself and the golden
//! cases), its collectives are tallied at their own sites, and each rank holds only its
//! rows of the table.

use crate::common::checks::{
    check_against_dense, check_against_literal, check_golden_cases, golden_dir, golden_ladder_dir,
    On,
};
use crate::common::*;
use tp_harness::blocks::{BlockLayout, Fwd};
use tp_harness::comm::{CommKind, Site};
use tp_harness::device::Kernels;
use tp_harness::model::Gpt;
use tp_harness::tp::{Init, ParamSource, SeededInit};
use tp_lab::config::preset;
use tp_lab::run_dir::{read_comm, read_eval, Checkpoint};

fn ons() -> [On; 2] {
    [
        On::cpu(Kernels::Fused).vocab_parallel(),
        On::cpu(Kernels::Portable).vocab_parallel(),
    ]
}

#[test]
fn vocab_parallel_t_model_equals_dense_gpt2_at_tp_2_and_4() {
    for on in ons() {
        for tp in [2, 4] {
            for bias in [true, false] {
                check_against_dense("tt", tp, bias, &on);
            }
        }
    }
}

#[test]
fn vocab_parallel_s_and_p_models_equal_the_literal_reading_at_tp_2_and_4() {
    for on in ons() {
        for tp in [2, 4] {
            check_against_literal("spp", tp, true, &on);
            check_against_literal("tps", tp, false, &on);
        }
    }
}

/// Loss and every logical gradient of the vocab-parallel model against the replicated
/// TP model at the same tp, with a vocabulary that does not divide by the group (11
/// tokens: 6 + 5 at tp 2, 3 + 3 + 3 + 2 at tp 4).
#[test]
fn vocab_parallel_equals_the_replicated_table_in_loss_and_every_gradient_at_tp_2_and_4() {
    let pattern = "tsp";
    let cfg = small_config(3, true);
    let source = RandomWeights { seed: 23 };
    let (idx, tgt) = batch(29, 3, 16, cfg.vocab_size);
    for tp in [2, 4] {
        let replicated = tp_logical(&cfg, pattern, tp, &source, &idx, &tgt);
        let vp_cfg = tp_harness::model::ModelConfig {
            vocab_parallel: true,
            ..cfg.clone()
        };
        let vp = tp_logical(&vp_cfg, pattern, tp, &source, &idx, &tgt);
        let rel = ((vp.loss - replicated.loss) / replicated.loss).abs();
        assert!(
            rel <= 1e-5,
            "tp {tp}: loss {} vs {}",
            vp.loss,
            replicated.loss
        );
        assert_grads_match(&vp.grads, &replicated.grads, 1e-4, &format!("tp {tp}"));
        assert_eq!(vp.grads.len(), replicated.grads.len());
        let e = rel_err(&vp.input_grad, &replicated.input_grad);
        assert!(e <= 1e-4, "tp {tp}: input gradient differs by {e:e}");
    }
}

#[test]
fn every_golden_case_matches_with_the_vocab_parallel_table() {
    assert!(check_golden_cases(&golden_dir(), &ons()) >= 1);
    assert!(check_golden_cases(&golden_ladder_dir(), &ons()) >= 2);
}

/// One forward + backward pass at tp 2: the lookup's all-reduce, the head's max and
/// sums all-reduces forward and its input-gradient all-reduce backward, with their bytes;
/// the layers' counts are untouched, and a replicated table issues none of these.
#[test]
fn the_tally_counts_the_embedding_and_head_collectives_at_their_own_sites() {
    let layout = BlockLayout::parse("tsp").unwrap();
    let (b, t) = (2, 8);
    let count = |vocab_parallel: bool| {
        let mut cfg = small_config(3, true);
        cfg.vocab_parallel = vocab_parallel;
        let (idx, tgt) = batch(3, b, t, cfg.vocab_size);
        run_tp(2, |comm| {
            let model = Gpt::build(&cfg, &layout, &SeededInit { seed: 1 }, &comm).unwrap();
            let loss = model.loss(&idx, &tgt, &Fwd::eval()).unwrap();
            let _ = loss.backward().unwrap();
            comm.tally().snapshot()
        })
        .remove(0)
    };
    let (vp, rep) = (count(true), count(false));
    let rows = (b * t) as u64;
    let c = small_config(3, true).n_embd as u64;
    let emb = vp.at(Site::Embedding, CommKind::TpForward);
    assert_eq!((emb.calls, emb.bytes), (1, rows * c * 4));
    assert_eq!(vp.at(Site::Embedding, CommKind::TpBackward).calls, 0);
    let head_f = vp.at(Site::Head, CommKind::TpForward);
    // The row maxima (R values), then the sums of exp and the target logits (2 R).
    assert_eq!((head_f.calls, head_f.bytes), (2, rows * 4 + rows * 2 * 4));
    let head_b = vp.at(Site::Head, CommKind::TpBackward);
    assert_eq!((head_b.calls, head_b.bytes), (1, rows * c * 4));
    for i in 0..layout.n_layer() {
        for kind in [CommKind::TpForward, CommKind::TpBackward] {
            assert_eq!(
                vp.at(Site::Layer(i), kind).calls,
                rep.at(Site::Layer(i), kind).calls
            );
        }
    }
    for site in [Site::Embedding, Site::Head] {
        for kind in CommKind::all() {
            assert_eq!(rep.at(site, kind).calls, 0, "{site:?} {kind:?}");
        }
    }
}

/// Parameters drawn as zeros: the gpt2 preset's shapes without the cost of drawing them.
struct Zeros;

impl ParamSource for Zeros {
    fn full(
        &self,
        _name: &str,
        shape: &[usize],
        _init: Init,
    ) -> anyhow::Result<candle_core::Tensor> {
        Ok(candle_core::Tensor::zeros(
            shape,
            candle_core::DType::F32,
            &candle_core::Device::Cpu,
        )?)
    }
}

/// GPT-2 124M at tp 2: each rank holds half of the 50304 x 768 table fewer parameters.
#[test]
fn gpt2_at_tp2_holds_half_the_embedding_fewer_parameters_per_rank() {
    let p = preset("gpt2").unwrap();
    let layout = BlockLayout::parse(p.pattern).unwrap();
    let per_rank = |vocab_parallel: bool| {
        let mut cfg = p.model();
        cfg.vocab_parallel = vocab_parallel;
        run_tp(2, |comm| {
            let model = Gpt::build(&cfg, &layout, &Zeros, &comm).unwrap();
            (model.params().local_numel(), model.params().logical_numel())
        })
    };
    let (rep, vp) = (per_rank(false), per_rank(true));
    let table = 50304 * 768;
    for r in 0..2 {
        assert_eq!(rep[r].1, vp[r].1, "the logical model is the same");
        assert_eq!(rep[r].0 - vp[r].0, table / 2, "rank {r}");
    }
}

/// The logits sampling uses (the last position's, gathered over the group) equal the
/// replicated model's.
#[test]
fn next_token_logits_of_the_vocab_parallel_model_equal_the_replicated_ones() {
    let mut cfg = small_config(2, true);
    let layout = BlockLayout::parse("ts").unwrap();
    let (idx, _) = batch(5, 2, 9, cfg.vocab_size);
    let logits = |cfg: &tp_harness::model::ModelConfig| {
        run_tp(2, |comm| {
            let model = Gpt::build(cfg, &layout, &RandomWeights { seed: 4 }, &comm).unwrap();
            let last = model.next_token_logits(&idx).unwrap();
            let all = model.forward(&idx, &Fwd::eval()).unwrap();
            let tail = all.narrow(1, 8, 1).unwrap().squeeze(1).unwrap();
            assert!(rel_err(&last, &tail) < 1e-6);
            last
        })
        .remove(0)
    };
    let rep = logits(&cfg);
    cfg.vocab_parallel = true;
    let vp = logits(&cfg);
    assert_eq!(vp.dims(), &[2, cfg.vocab_size]);
    assert!(rel_err(&vp, &rep) < 1e-6);
}

/// A vocab-parallel run writes a logical checkpoint: it evaluates to the run's own
/// full-split loss at tp 1 (no sharding) and tp 4, and resumes with `vocab_parallel`
/// off. Its comm.json lists the embedding and head sites and keeps the blocks' count
/// equal to the formula.
#[test]
fn a_vocab_parallel_run_checkpoints_logically_and_reports_its_sites() {
    let d = scratch("vocab-parallel-run");
    let train = |extra: &[&str]| {
        let mut args = vec![
            "--quiet",
            "--out",
            "run",
            "--pattern",
            "tt",
            "--tp",
            "2",
            "--set",
            "n_embd=32",
            "--set",
            "eval_interval=0",
            "--set",
            "sample_tokens=0",
        ];
        args.extend_from_slice(extra);
        assert_ok(&bin("tp-train", &d, &args, &[]));
    };
    train(&["--set", "max_iters=12", "--set", "vocab_parallel=true"]);
    let run = d.join("run");
    let own = read_eval(&run, tp_lab::data::Split::Val, None)
        .unwrap()
        .expect("final_eval: full")
        .loss;
    for tp in ["1", "4"] {
        assert_ok(&bin("tp-eval", &d, &["run", "--tp", tp], &[]));
        let l = read_eval(&run, tp_lab::data::Split::Val, Some(tp.parse().unwrap()))
            .unwrap()
            .expect("tp-eval wrote eval-tpN.json")
            .loss;
        assert!(
            ((l - own) / own).abs() < 1e-5,
            "tp {tp}: {l} vs the run's {own}"
        );
    }
    let comm = read_comm(&run).unwrap().unwrap();
    assert_eq!(
        comm.tp_forward_allreduces,
        comm.formula_forward_allreduces as f64
    );
    let sites: Vec<(&str, f64, f64)> = comm
        .outside_layers
        .iter()
        .map(|s| (s.site.as_str(), s.forward_allreduces, s.backward_allreduces))
        .collect();
    assert_eq!(sites, vec![("embedding", 1.0, 0.0), ("head", 2.0, 1.0)]);
    let resume = [
        "--quiet",
        "--resume",
        "run",
        "--set",
        "max_iters=15",
        "--set",
        "vocab_parallel=false",
    ];
    assert_ok(&bin("tp-train", &d, &resume, &[]));
    let ck = Checkpoint::load(&tp_lab::run_dir::latest(&run).unwrap().unwrap()).unwrap();
    assert_eq!(ck.meta.step, 15);
    assert!(read_comm(&run).unwrap().unwrap().outside_layers.is_empty());
}
