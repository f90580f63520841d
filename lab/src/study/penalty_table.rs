//! The penalty table's renderings: `penalty.md` (with how to read it) and `penalty.csv`,
//! one row per setting and layout of [`super::penalty::penalty_rows`].

use super::penalty::{PenaltyRow, ALPHA};
use crate::analysis::table::Table;

/// Which optional columns a table has.
#[derive(Clone, Copy)]
struct Columns {
    /// The non-inferiority margin, if one was declared.
    margin: Option<f64>,
    /// Some setting is tuned: the tuned value's column.
    tuned: bool,
}

fn cells(r: &PenaltyRow, cols: Columns) -> Vec<String> {
    let f = |v: f64| {
        if v.is_finite() {
            format!("{v:.4}")
        } else {
            "-".into()
        }
    };
    let d = r.diff.as_ref();
    let mut cells = vec![r.setting_label.clone(), r.variant.to_string()];
    if cols.tuned {
        cells.push(r.tuned.clone().unwrap_or_else(|| "-".into()));
    }
    cells.extend([
        format!("{} ({})", r.syncs, r.exposed_syncs),
        r.val.n.to_string(),
        format!("{} ± {}", f(r.val.mean), f(r.val.std)),
        r.baseline.as_ref().map_or("-".into(), |b| b.to_string()),
        d.map_or("-".into(), |d| match d.ci95.is_finite() {
            true => format!(
                "{:+.4} ({:+.4} .. {:+.4})",
                d.mean,
                d.mean - d.ci95,
                d.mean + d.ci95
            ),
            // One pair: no interval to give.
            false => format!("{:+.4} (-)", d.mean),
        }),
        match (d, r.corrected_half.filter(|h| h.is_finite())) {
            (Some(d), Some(h)) => format!("{:+.4} .. {:+.4}", d.mean - h, d.mean + h),
            _ => "-".into(),
        },
        d.map_or("-".into(), |d| d.n.to_string()),
        d.map_or("-".into(), |d| f(d.detectable())),
        r.p_holm.map_or("-".into(), |p| format!("{p:.3}")),
        r.p_holm
            .map_or("-".into(), |p| if p < ALPHA { "yes" } else { "no" }.into()),
        match (r.signs, r.p_sign_holm) {
            (Some(s), Some(p)) => format!("{}+ {}- {p:.3}", s.above, s.below),
            _ => "-".into(),
        },
    ]);
    if let Some(m) = cols.margin {
        cells.push(r.upper_bound.map_or("-".into(), |u| format!("{u:+.4}")));
        cells.push(
            r.upper_bound
                .map_or("-".into(), |u| if u < m { "yes" } else { "no" }.into()),
        );
    }
    cells
}

fn header(cols: Columns) -> Vec<String> {
    let mut h: Vec<String> = vec!["setting".into(), "pattern".into()];
    if cols.tuned {
        h.push("tuned value".into());
    }
    h.extend(
        [
            "fwd all-reduces / pass (exposed)",
            "n",
            "final val loss, mean ± sd",
            "paired with",
            "difference (95% interval)",
            "interval (Bonferroni)",
            "pairs",
            "detectable (80% power)",
            "p (Holm)",
            "significant (Holm)",
            "signs, sign test p (Holm)",
        ]
        .map(String::from),
    );
    if let Some(m) = cols.margin {
        h.push("one-sided bound (corrected)".into());
        h.push(format!("non-inferior at +{m}"));
    }
    h
}

/// The summary table, with how to read it; `margin`: a non-inferiority margin to judge
/// each difference against.
pub fn markdown(rows: &[PenaltyRow], margin: Option<f64>) -> String {
    let cols = Columns {
        margin,
        tuned: rows.iter().any(|r| r.tuned.is_some()),
    };
    let mut t = Table::new(header(cols));
    rows.iter().for_each(|r| t.row(cells(r, cols)));
    let tuned = if cols.tuned {
        " In a tuned setting (its label says which keys) each layout ran at its own best value, chosen on selection seeds apart from the seeds compared here: `tuned value` gives it, how many values were tried and their range, and whether it lies at an edge of them (the true best may lie beyond)."
    } else {
        ""
    };
    let margin_text = margin.map_or(String::new(), |m| format!(
        " Non-inferiority against a margin of +{m}: the difference's one-sided upper bound at 1 - 0.05/m (m: the layouts compared with that baseline in that setting, Bonferroni) is below the margin, i.e. the layout is at most {m} worse, with the family's error rate at 5%."
    ));
    format!(
        "Final val loss over the whole validation split per setting (model layers x width / heads, TP degree, iterations, data; settings that share those also name the config keys that differ) and pattern; the difference from the setting's baseline paired by seed, with its 95% interval (Student's t, not corrected for the number of layouts) and its interval corrected for them (Bonferroni: at 1 - 0.05/m, m the layouts compared with that baseline in that setting, so that all of a setting's intervals hold together at 95%), the number of pairs, the smallest true difference those pairs would find significant four times in five (80% power at the spread they show), and its p-value adjusted by Holm's method over the layouts compared with that baseline in that setting: `significant (Holm)` keeps the chance of any false finding in the setting at 5%. The t-based p rests on the differences being normal; beside it, the exact sign test (how many pairs lie above and below zero, and the binomial p of so lopsided a split, Holm-adjusted over the same family) assumes nothing of their distribution: n pairs all of one sign give 2/2^n (4 pairs: 0.125, never significant; 8: 0.0078).{margin_text}{tuned} All-reduces: blocks.md's count per forward pass, and in brackets those a rank waits for with nothing to compute (a ladder hides the rest).\n\n{}",
        t.markdown()
    )
}

/// `penalty.csv`: one line per row, plain numbers.
pub fn csv(rows: &[PenaltyRow]) -> String {
    let mut t = Table::new([
        "n_layer",
        "n_embd",
        "n_head",
        "tp",
        "iters",
        "pattern",
        "fwd_allreduces",
        "exposed_allreduces",
        "n",
        "val_mean",
        "val_std",
        "baseline",
        "diff_mean",
        "diff_ci95",
        "pairs",
        "detectable",
        "significant",
        "dataset",
        "p_holm",
        "significant_holm",
        "upper_bound_corrected",
        "tuned",
        "diff_half_corrected",
        "p_sign_holm",
    ]);
    for r in rows {
        let d = r.diff.as_ref();
        let num = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.6}"));
        let s = &r.setting;
        t.row([
            s.n_layer.to_string(),
            s.n_embd.to_string(),
            s.n_head.to_string(),
            s.tp.to_string(),
            s.iters.to_string(),
            r.variant.to_string(),
            r.syncs.to_string(),
            r.exposed_syncs.to_string(),
            r.val.n.to_string(),
            format!("{:.6}", r.val.mean),
            format!("{:.6}", r.val.std),
            r.baseline.as_ref().map_or(String::new(), |b| b.to_string()),
            num(d.map(|d| d.mean)),
            num(d.map(|d| d.ci95).filter(|c| c.is_finite())),
            d.map_or(String::new(), |d| d.n.to_string()),
            num(d.map(|d| d.detectable()).filter(|c| c.is_finite())),
            d.map_or("", |d| if d.excludes_zero() { "yes" } else { "no" })
                .to_string(),
            s.dataset.clone(),
            num(r.p_holm),
            r.p_holm
                .map_or("", |p| if p < ALPHA { "yes" } else { "no" })
                .to_string(),
            num(r.upper_bound.filter(|u| u.is_finite())),
            r.tuned.clone().unwrap_or_default(),
            num(r.corrected_half.filter(|h| h.is_finite())),
            num(r.p_sign_holm),
        ]);
    }
    t.csv()
}
