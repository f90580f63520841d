//! The loss side of a plan: what the study measured of a layout's penalty against
//! Megatron's (its paired val loss difference with `t` everywhere), read from the study's
//! kept runs through the penalty table's own types — the same layout where it was run,
//! else the same family at another depth (`sppp` is `s11xp` at twelve layers) — with
//! its n, interval and the range it was measured in. A request outside every measured
//! range is said to be, and no number is extrapolated to it.

use super::request::Request;
use crate::config::Variant;
use crate::study::penalty::{penalty_rows, PenaltyRow};
use crate::study::setting::{ChosenBy, Setting};
use anyhow::Result;
use std::path::PathBuf;

/// The measured penalty nearest to a request.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Evidence {
    pub pattern: String,
    /// `same layout` or `same family at another depth`.
    pub relation: String,
    pub setting: String,
    /// How the layouts' learning rates were set where it was measured: `tuned` (each
    /// at its own best), `borrowed` (each at a rate tuned in another setting), `picked
    /// by hand`, or `untuned (...)` (every layout at one rate: the penalty can be the
    /// rate's, as the ladder's untuned lead was).
    pub how: String,
    pub n: usize,
    pub penalty: f64,
    /// The 95% interval's half-width; `None` for one run (no interval).
    pub ci95: Option<f64>,
    /// The range of models this layout's family was measured at: n_layer, n_embd, tp,
    /// iterations (min, max each).
    pub measured: [(usize, usize); 4],
    /// Why the request lies outside it, if it does.
    pub outside: Option<String>,
}

/// The penalty rows of the study's runs in `dirs`.
pub fn study_rows(dirs: &[PathBuf]) -> Result<Vec<PenaltyRow>> {
    let study = crate::study::tuned_study::load_study(dirs)?;
    let mut rows = penalty_rows(&study.compared, None);
    crate::study::tuned_study::annotate(&mut rows, &study.choices);
    Ok(rows)
}

/// The rows measured with each layout at its own tuned rate, where there are any: a
/// penalty at one rate for all can be the rate's.
fn prefer_tuned<'a>(rows: &[&'a PenaltyRow]) -> Vec<&'a PenaltyRow> {
    let tuned: Vec<&PenaltyRow> = rows
        .iter()
        .copied()
        .filter(|r| !r.setting.tuned.is_empty() && r.setting.chosen_by == ChosenBy::Tuning)
        .collect();
    match tuned.is_empty() {
        true => rows.to_vec(),
        false => tuned,
    }
}

/// How a setting's rates were set, in words.
fn how(s: &Setting) -> String {
    match s.tuned.is_empty() {
        false => format!("{} {}", s.tuned.join(", "), s.chosen_by.word()),
        true => match s.rest.get("learning_rate") {
            Some(lr) => format!("untuned (every layout at learning_rate {lr})"),
            None => "untuned (every layout at one learning rate)".into(),
        },
    }
}

fn range(values: impl Iterator<Item = usize> + Clone) -> (usize, usize) {
    (values.clone().min().unwrap_or(0), values.max().unwrap_or(0))
}

/// The evidence for `r`'s layout (f32 sums or its comm_dtype) among `rows`; `None`
/// where no run of its family has a paired penalty.
pub fn evidence(rows: &[PenaltyRow], r: &Request) -> Option<Evidence> {
    let name = match r.comm_dtype.label() {
        "f32" => r.layout.pattern.clone(),
        d => format!("{}+{d}", r.layout.pattern),
    };
    let want = Variant::parse(&name).ok()?;
    let paired = |row: &&PenaltyRow| row.diff.is_some();
    // Another layout of the family stands in only with an interval: one run of a
    // different layout says nothing of this one.
    let with_interval = |row: &&PenaltyRow| row.diff.is_some_and(|d| d.n >= 2);
    let same: Vec<&PenaltyRow> = rows
        .iter()
        .filter(paired)
        .filter(|x| x.variant == want)
        .collect();
    let family: Vec<&PenaltyRow> = rows
        .iter()
        .filter(with_interval)
        .filter(|x| x.variant.stretches_to(&want))
        .collect();
    let (pool, relation) = if same.is_empty() {
        (prefer_tuned(&family), "same family at another depth")
    } else {
        (prefer_tuned(&same), "same layout")
    };
    let s = &r.shape;
    // Nearest: the closest depth and width (log scale), then tp, then the longest run.
    let distance = |x: &&&PenaltyRow| {
        let d = |a: usize, b: usize| ((a.max(1) as f64) / (b.max(1) as f64)).ln().abs();
        let st = &x.setting;
        (
            ((d(st.n_layer, s.n_layer) + d(st.n_embd, s.n_embd)) * 1e6) as i64,
            st.tp.abs_diff(r.tp),
            usize::MAX - st.iters,
        )
    };
    let best = pool.iter().min_by_key(distance)?;
    let settings = family.iter().map(|x| &x.setting);
    let measured = [
        range(settings.clone().map(|st| st.n_layer)),
        range(settings.clone().map(|st| st.n_embd)),
        range(settings.clone().map(|st| st.tp)),
        range(settings.map(|st| st.iters)),
    ];
    let mut outside = Vec::new();
    for (what, value, (lo, hi)) in [
        ("n_layer", s.n_layer, measured[0]),
        ("n_embd", s.n_embd, measured[1]),
        ("tp", r.tp, measured[2]),
    ] {
        if value < lo || value > hi {
            outside.push(format!("{what} {value} (measured {lo}-{hi})"));
        }
    }
    let diff = best.diff.as_ref()?;
    Some(Evidence {
        pattern: r.layout.pattern.clone(),
        relation: relation.into(),
        setting: format!("{} {}", best.variant, best.setting.label()),
        how: how(&best.setting),
        n: diff.n,
        penalty: diff.mean,
        ci95: Some(diff.ci95).filter(|c| c.is_finite()),
        measured,
        outside: (!outside.is_empty()).then(|| {
            format!(
                "the request lies outside the measured range: {}; the figure is the nearest measurement, not a prediction",
                outside.join(", ")
            )
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::penalty::PenaltyRun;
    use crate::study::setting::tests::{keyed, setting};
    use tp_harness::blocks::BlockLayout;

    /// Runs of `variant` and `tttt` at 4 layers on `seeds`, `variant` `gap` worse, the
    /// setting tuned or at one rate.
    fn runs(variant: &str, gap: f64, seeds: &[u64], tuned: bool) -> Vec<PenaltyRun> {
        let mut s = setting(2);
        match tuned {
            true => s.tuned = vec!["learning_rate".into()],
            false => s.rest = keyed("learning_rate:0.001"),
        }
        let run = |v: &str, seed: u64, loss: f64| PenaltyRun {
            setting: s.clone(),
            variant: Variant::parse(v).unwrap(),
            seed,
            final_val: loss,
            syncs: 1,
            exposed_syncs: 1,
            p_run: None,
            train_seconds: None,
            machine: None,
        };
        seeds
            .iter()
            .flat_map(|&seed| {
                let noise = 0.001 * seed as f64;
                [
                    run("tttt", seed, 1.9 + noise),
                    run(variant, seed, 1.9 + gap + 2.0 * noise),
                ]
            })
            .collect()
    }

    fn request(pattern: &str) -> Request {
        Request {
            shape: super::super::request::Shape::named("gpt2").unwrap(),
            layout: BlockLayout::parse(pattern).unwrap(),
            tp: 2,
            dp: 1,
            batch: 8,
            comm_dtype: Default::default(),
            bucket_mb: Default::default(),
            head: super::super::request::Head::Replicated,
        }
    }

    /// The tuned measurement is preferred to the untuned one of the same layout and says
    /// so; one untuned run of another layout of the family is no evidence for this one;
    /// one run of the layout itself is given, with no interval.
    #[test]
    fn evidence_says_how_it_was_tuned_prefers_tuned_and_gives_one_run_no_interval() {
        let mut all = runs("sppp", -0.02, &[1, 2, 3], false);
        all.extend(runs("sppp", 0.003, &[1, 2, 3, 4], true));
        let rows = penalty_rows(&all, None);
        let e = evidence(&rows, &request("s11xp")).unwrap();
        assert_eq!((e.n, e.how.as_str()), (4, "learning_rate tuned"));
        assert!(e.ci95.is_some() && e.penalty > 0.0, "{e:?}");

        let lone = penalty_rows(&runs("spspspspspsp", -0.03, &[1], false), None);
        assert!(
            evidence(&lone, &request("s11xp")).is_none(),
            "another layout's one run"
        );
        let e = evidence(&lone, &request("spspspspspsp")).unwrap();
        assert_eq!((e.n, e.ci95), (1, None));
        assert_eq!(e.how, "untuned (every layout at learning_rate 0.001)");
    }
}
