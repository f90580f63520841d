//! The loss side of a plan: what the study measured of a layout's penalty against
//! Megatron's (its paired val loss difference with `t` everywhere), read from the study's
//! kept runs through the penalty table's own types — the same layout where it was run,
//! else the same family at another depth (`sppp` is `s11xp` at twelve layers) — with
//! its n, interval and the range it was measured in. A request outside every measured
//! range is said to be, and no number is extrapolated to it.

use super::request::Request;
use crate::analysis::penalty::{penalty_rows, PenaltyRow};
use crate::config::Variant;
use anyhow::Result;
use std::path::PathBuf;

/// The measured penalty nearest to a request.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Evidence {
    pub pattern: String,
    /// `same layout` or `same family at another depth`.
    pub relation: String,
    pub setting: String,
    pub n: usize,
    pub penalty: f64,
    pub ci95: f64,
    /// The range of models this layout's family was measured at: n_layer, n_embd, tp,
    /// iterations (min, max each).
    pub measured: [(usize, usize); 4],
    /// Why the request lies outside it, if it does.
    pub outside: Option<String>,
}

/// The penalty rows of the study's runs in `dirs`.
pub fn study_rows(dirs: &[PathBuf]) -> Result<Vec<PenaltyRow>> {
    let study = crate::analysis::tuned_study::load_study(dirs)?;
    let mut rows = penalty_rows(&study.compared, None);
    crate::analysis::tuned_study::annotate(&mut rows, &study.choices);
    Ok(rows)
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
    let same: Vec<&PenaltyRow> = rows
        .iter()
        .filter(paired)
        .filter(|x| x.variant == want)
        .collect();
    let family: Vec<&PenaltyRow> = rows
        .iter()
        .filter(paired)
        .filter(|x| x.variant.stretches_to(&want))
        .collect();
    let (pool, relation) = if same.is_empty() {
        (&family, "same family at another depth")
    } else {
        (&same, "same layout")
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
        n: diff.n,
        penalty: diff.mean,
        ci95: diff.ci95,
        measured,
        outside: (!outside.is_empty()).then(|| {
            format!(
                "the request lies outside the measured range: {}; the figure is the nearest measurement, not a prediction",
                outside.join(", ")
            )
        }),
    })
}
