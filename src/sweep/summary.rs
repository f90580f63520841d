//! `summary.csv` and `summary.md` of a sweep: one row per point.

use super::runner::{PointResult, Status};
use std::fmt::Write;

const COLUMNS: [&str; 13] = [
    "run",
    "pattern",
    "tp",
    "dp",
    "status",
    "forward_allreduces_per_step",
    "allreduces_per_layer",
    "final_train_loss",
    "final_val_loss",
    "best_val_loss",
    "tokens_per_s",
    "wall_s",
    "steps",
];

fn row(r: &PointResult) -> Vec<String> {
    let f = |v: Option<f64>, d: usize| v.map_or(String::new(), |x| format!("{x:.d$}"));
    let s = r.summary.as_ref();
    vec![
        r.point.name.clone(),
        r.point.cfg.model.pattern.clone(),
        r.point.cfg.parallel.tp.to_string(),
        s.map_or(r.point.cfg.parallel.dp, |s| s.dp).to_string(),
        match &r.status {
            Status::Finished => "finished".into(),
            Status::Skipped => "finished (earlier)".into(),
            Status::Failed(_) => "failed".into(),
        },
        f(s.map(|s| s.forward_allreduces_per_step), 0),
        f(s.map(|s| s.allreduces_per_layer), 2),
        f(s.and_then(|s| s.final_train_loss.map(f64::from)), 4),
        f(s.and_then(|s| s.final_val_loss.map(f64::from)), 4),
        f(s.and_then(|s| s.best_val_loss.map(f64::from)), 4),
        f(s.and_then(|s| s.tokens_per_s), 0),
        f(s.map(|s| s.wall_seconds), 1),
        s.map_or(String::new(), |s| s.steps.to_string()),
    ]
}

pub fn csv(results: &[PointResult]) -> String {
    let mut out = COLUMNS.join(",") + "\n";
    for r in results {
        let cells: Vec<String> = row(r)
            .into_iter()
            .map(|c| {
                if c.contains(',') {
                    format!("\"{c}\"")
                } else {
                    c
                }
            })
            .collect();
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

pub fn markdown(name: &str, results: &[PointResult]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Sweep `{name}`\n");
    let _ = writeln!(out, "| {} |", COLUMNS.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(COLUMNS.len()));
    for r in results {
        let _ = writeln!(out, "| {} |", row(r).join(" | "));
    }
    out
}
