//! The communication tally counts, per forward and per backward pass, exactly the TP
//! all-reduces blocks.md's formula predicts (`2 t + 2 l + s + p-runs`, backward = forward), and
//! attributes them to the right layers.

use crate::common::*;
use tp_harness::blocks::spec::Syncs;
use tp_harness::blocks::{BlockLayout, Fwd};
use tp_harness::comm::{CommKind, Site};
use tp_harness::model::Gpt;
use tp_harness::tp::SeededInit;

/// (forward, backward) TP all-reduce calls of one forward + backward pass, per layer too.
pub(crate) fn count(pattern: &str, tp: usize) -> (u64, u64, Vec<(u64, u64)>) {
    let layout = BlockLayout::parse(pattern).unwrap();
    let mut cfg = small_config(layout.n_layer(), true);
    cfg.n_embd = 16;
    cfg.block_size = 8;
    let (idx, tgt) = batch(1, 2, 8, cfg.vocab_size);
    let res = run_tp(tp, |comm| {
        let model = Gpt::build(&cfg, &layout, &SeededInit { seed: 1 }, &comm).unwrap();
        let loss = model.loss(&idx, &tgt, &Fwd::eval()).unwrap();
        let _ = loss.backward().unwrap();
        comm.tally().snapshot()
    });
    let snap = &res[0];
    let per_layer = (0..layout.n_layer())
        .map(|i| {
            (
                snap.at(Site::Layer(i), CommKind::TpForward).calls,
                snap.at(Site::Layer(i), CommKind::TpBackward).calls,
            )
        })
        .collect();
    for other in &res[1..] {
        assert_eq!(
            other.total(CommKind::TpForward).calls,
            snap.total(CommKind::TpForward).calls
        );
    }
    (
        snap.total(CommKind::TpForward).calls,
        snap.total(CommKind::TpBackward).calls,
        per_layer,
    )
}

#[test]
fn counted_allreduces_per_pass_equal_the_formula_at_tp2() {
    for (pattern, expected) in [
        ("tttt", 8),
        ("tstt", 7),
        ("sppp", 2),
        ("pppp", 1),
        ("ssss", 4),
        ("spps", 3),
        ("3xsppp", 6),
        ("12xt", 24),
        ("12xs", 12),
        ("llll", 8),
        ("tllp", 7),
        ("lsll", 7),
    ] {
        let (f, b, _) = count(pattern, 2);
        assert_eq!(f, expected, "{pattern}: forward all-reduces");
        assert_eq!(b, expected, "{pattern}: backward all-reduces");
        assert_eq!(
            BlockLayout::parse(pattern).unwrap().forward_allreduces() as u64,
            f
        );
    }
}

/// Each layer's forward and backward all-reduces as its kind's spec counts them: a
/// kind's per-block sums at every block; a run's at its last layer forward, its first
/// backward.
pub(crate) fn per_layer_formula(layout: &BlockLayout) -> Vec<(u64, u64)> {
    (0..layout.n_layer())
        .map(|i| {
            let kind = layout.kinds[i];
            match kind.syncs() {
                Syncs::PerBlock(n) => (n as u64, n as u64),
                Syncs::PerRun(n) => {
                    let first = i == 0 || layout.kinds[i - 1] != kind;
                    let last = i + 1 == layout.n_layer() || layout.kinds[i + 1] != kind;
                    (n as u64 * u64::from(last), n as u64 * u64::from(first))
                }
            }
        })
        .collect()
}

#[test]
fn allreduces_are_attributed_to_their_layers() {
    let pattern = "tspppspll";
    let layout = BlockLayout::parse(pattern).unwrap();
    let (_, _, per_layer) = count(pattern, 2);
    assert_eq!(per_layer, per_layer_formula(&layout), "{pattern}");
    assert_eq!(per_layer[4], (1, 0), "a p-run's sum sits at its last layer");
}

#[test]
fn tp1_communicates_nothing() {
    let (f, b, _) = count("tstp", 1);
    assert_eq!((f, b), (0, 0));
}

/// An `l` block's all-reduces are started before the next module and waited for after
/// it, forward and backward, so the tally records part of their time as hidden; `t`'s
/// are waited for at once.
#[test]
fn ladder_allreduces_are_recorded_as_hidden_both_ways_and_t_ones_are_not() {
    let layout = BlockLayout::parse("tll").unwrap();
    let cfg = small_config(layout.n_layer(), true);
    let (idx, tgt) = batch(1, 2, 8, cfg.vocab_size);
    let snaps = run_tp(2, |comm| {
        let model = Gpt::build(&cfg, &layout, &SeededInit { seed: 1 }, &comm).unwrap();
        let loss = model.loss(&idx, &tgt, &Fwd::eval()).unwrap();
        let _ = loss.backward().unwrap();
        comm.tally().snapshot()
    });
    for snap in snaps {
        let fwd = |i| snap.at(Site::Layer(i), CommKind::TpForward);
        assert_eq!(fwd(0).hidden_seconds, 0.0, "t: {:?}", fwd(0));
        for i in [1, 2] {
            assert_eq!(fwd(i).calls, 2);
            assert!(fwd(i).hidden_seconds > 0.0, "l at {i}: {:?}", fwd(i));
            assert!(fwd(i).hidden_seconds <= fwd(i).seconds);
        }
        let bwd = |i| snap.at(Site::Layer(i), CommKind::TpBackward);
        assert_eq!(bwd(0).hidden_seconds, 0.0, "t: {:?}", bwd(0));
        for i in [1, 2] {
            assert_eq!(bwd(i).calls, 2);
            assert!(bwd(i).hidden_seconds > 0.0, "l at {i}: {:?}", bwd(i));
            assert!(bwd(i).hidden_seconds <= bwd(i).seconds);
        }
    }
}
