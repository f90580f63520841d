//! The conformance suite: every registered kind (`BlockKind::all()`, the registry in
//! `src/blocks/kinds/mod.rs`), alone and in seeded random layouts over all of them, held
//! to every proof its spec (`src/blocks/spec.rs`) declares. A new kind is enrolled here by
//! being registered; nothing below lists kinds.
//!
//! - the replicated-activation invariant (the stream between stages is the same on every
//!   rank), or its breach named by layer where the spec declares one;
//! - its forward equal to its reference (dense GPT-2, or the literal reading of its
//!   blocks.md formula) in loss and every gradient at tp 2 and 4;
//! - its all-reduces as counted by the tally equal to its spec's formula, per layer;
//! - the planner's calls and bytes per step equal to a run's tally;
//! - the exported modelling file's forward present where the spec says it is exported.
//!
//! blocks.md's counting formula is held to every kind by `tests/it/kinds.rs`.

use crate::common::checks::{self, On};
use crate::common::scratch;
use crate::plan::planned_as_tallied;
use crate::replicated_activations::probe_verdict;
use crate::tally_counts::{count, per_layer_formula};
use rand::{Rng, SeedableRng};
use tp_harness::blocks::spec::Reference;
use tp_harness::blocks::{BlockKind, BlockLayout};
use tp_harness::comm::CommDtype;
use tp_harness::device::{ComputeDtype, Kernels};

/// `n` patterns of 2 to 6 layers drawn over every registered kind (seeded: the same
/// patterns on every run).
fn random_patterns(n: usize) -> Vec<String> {
    let kinds: Vec<char> = BlockKind::all().map(|k| k.letter()).collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2026);
    (0..n)
        .map(|_| {
            let len = rng.random_range(2..=6);
            (0..len)
                .map(|_| kinds[rng.random_range(0..kinds.len())])
                .collect()
        })
        .collect()
}

/// Each kind alone (a run of three, so run-staged kinds run as runs), then `n` random
/// mixes.
fn patterns(n: usize) -> Vec<String> {
    let alone = BlockKind::all().map(|k| k.letter().to_string().repeat(3));
    alone.chain(random_patterns(n)).collect()
}

#[test]
fn every_kind_keeps_the_stream_identical_on_every_rank_or_is_named_by_layer() {
    for pattern in patterns(12) {
        let layout = BlockLayout::parse(&pattern).unwrap();
        let breaks = layout
            .kinds
            .iter()
            .position(|k| !k.spec().keeps_stream_replicated);
        for tp in [2, 4] {
            let verdict = probe_verdict(&pattern, tp, ComputeDtype::F32, CommDtype::F32);
            match (breaks, verdict) {
                (None, Ok(stages)) => {
                    assert_eq!(stages, layout.stages().len(), "{pattern} at tp {tp}")
                }
                (None, Err(e)) => panic!("{e}"),
                (Some(layer), Err(e)) => assert!(e.contains(&format!("layer {layer} ")), "{e}"),
                (Some(layer), Ok(_)) => panic!(
                    "{pattern} at tp {tp}: layer {layer}'s kind declares it breaks the \
                     replicated stream, but every rank's stream agreed"
                ),
            }
        }
    }
}

#[test]
fn every_kind_equals_its_reference_in_loss_and_every_gradient_at_tp_2_and_4() {
    let on = On::cpu(Kernels::Fused);
    for kind in BlockKind::all() {
        let k = kind.letter();
        let alone = k.to_string().repeat(3);
        match kind.spec().reference {
            Reference::DenseGpt2 => {
                for tp in [2, 4] {
                    checks::check_against_dense(&alone, tp, true, &on);
                    checks::check_against_dense(&alone, tp, false, &on);
                }
            }
            Reference::Literal(letter) => {
                assert_eq!(
                    letter, k,
                    "kind {k}'s literal reading is filed under its letter"
                );
                for tp in [2, 4] {
                    for pattern in [alone.clone(), format!("t{k}{k}t{k}")] {
                        checks::check_against_literal(&pattern, tp, true, &on);
                        checks::check_against_literal(&pattern, tp, false, &on);
                    }
                }
            }
            Reference::None => {
                assert!(
                    !kind.spec().keeps_stream_replicated,
                    "kind {k} has no reference: only a kind wrong by design may"
                );
            }
        }
    }
}

#[test]
fn random_layouts_of_kinds_with_references_equal_the_literal_reading() {
    let on = On::cpu(Kernels::Fused);
    let referenced = |p: &String| {
        (p.chars()).all(|c| BlockKind::from_letter(c).unwrap().spec().reference != Reference::None)
    };
    for pattern in random_patterns(6).iter().filter(|p| referenced(p)) {
        checks::check_against_literal(pattern, 2, true, &on);
    }
}

#[test]
fn every_kind_tallies_its_specs_count_at_each_layer() {
    for pattern in patterns(12) {
        let layout = BlockLayout::parse(&pattern).unwrap();
        let (forward, backward, per_layer) = count(&pattern, 2);
        assert_eq!(per_layer, per_layer_formula(&layout), "{pattern}");
        assert_eq!(forward, layout.forward_allreduces() as u64, "{pattern}");
        assert_eq!(backward, forward, "{pattern}: as many backward as forward");
    }
}

#[test]
fn the_planner_counts_every_kinds_calls_and_bytes_as_a_run_tallies_them() {
    let d = scratch("conformance-plan");
    for kind in BlockKind::all() {
        let pattern = kind.letter().to_string().repeat(4);
        planned_as_tallied(&d, &pattern, "f32", false);
    }
}

#[test]
fn every_exported_kind_has_its_forward_in_the_modelling_file() {
    let code = tp_lab::hf::remote::MODELING_CODE;
    for kind in BlockKind::all() {
        let has = code.contains(&format!("def run_{}(", kind.letter()));
        assert_eq!(
            has,
            kind.spec().exported,
            "kind {kind}: its spec says exported = {}, the modelling file {} run_{kind}",
            kind.spec().exported,
            if has { "has" } else { "has no" }
        );
    }
}
