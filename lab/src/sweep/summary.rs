//! `summary.csv` and `summary.md` of a sweep: one row per point.

use super::runner::{PointResult, Status};
use crate::analysis::{paired_differences, ReplicateKey, Replicates, Table};
use crate::config::Variant;

const COLUMNS: [&str; 15] = [
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
    // What the speed columns were measured on.
    "machine",
    // How much slower than its own CPU time the run computed where the machine was
    // shared while it trained (above 1.5; empty otherwise): its tokens/s are then the
    // busy machine's.
    "machine_shared",
];

fn row(r: &PointResult) -> Vec<String> {
    let f = |v: Option<f64>, d: usize| v.map_or(String::new(), |x| format!("{x:.d$}"));
    let s = r.summary.as_ref();
    vec![
        r.point.name.clone(),
        r.point.cfg.model.pattern.to_string(),
        r.point.cfg.parallel.tp.to_string(),
        s.map_or(r.point.cfg.parallel.dp, |s| s.dp).to_string(),
        match &r.status {
            Status::Finished => "finished".into(),
            Status::Skipped => "finished (earlier)".into(),
            Status::Diverged(step) => format!("diverged at step {step}"),
            Status::Failed(_) => "failed".into(),
            Status::Pending => "not finished yet".into(),
        },
        f(s.map(|s| s.forward_allreduces_per_step), 0),
        f(s.map(|s| s.allreduces_per_layer), 2),
        f(s.and_then(|s| s.final_train_loss.map(f64::from)), 4),
        f(s.and_then(|s| s.final_val_loss.map(f64::from)), 4),
        f(s.and_then(|s| s.best_val_loss.map(f64::from)), 4),
        f(s.and_then(|s| s.tokens_per_s), 0),
        f(s.map(|s| s.wall_seconds), 1),
        s.map_or(String::new(), |s| s.steps.to_string()),
        s.and_then(|s| s.machine.clone()).unwrap_or_default(),
        f(shared(s), 1),
    ]
}

/// A run's sharing slowdown where it is above [`SHARED`].
fn shared(s: Option<&crate::run_dir::RunSummary>) -> Option<f64> {
    s.and_then(|s| s.sharing_slowdown).filter(|x| *x > SHARED)
}

/// Above this slowdown from sharing the machine a run's tokens/s is flagged.
pub const SHARED: f64 = 1.5;

/// The points' table: `summary.csv` as it is; `summary.md` with a run's tokens/s flagged
/// where the machine was shared while it trained.
fn table(results: &[PointResult], flag_shared: bool) -> Table {
    let mut t = Table::new(COLUMNS);
    let tokens = COLUMNS.iter().position(|c| *c == "tokens_per_s");
    for r in results {
        let mut cells = row(r);
        // Said where it is read: beside the number it makes doubtful.
        if let (true, Some(i), Some(x)) = (flag_shared, tokens, shared(r.summary.as_ref())) {
            cells[i] = format!("{} (machine shared: {x:.1}x slower)", cells[i]);
        }
        t.row(cells);
    }
    t
}

pub fn csv(results: &[PointResult]) -> String {
    table(results, false).csv()
}

pub fn markdown(name: &str, results: &[PointResult]) -> String {
    format!("# Sweep `{name}`\n\n{}", table(results, true).markdown())
}

/// One group of replicates (points equal but for the seed).
#[derive(Debug, Clone)]
pub struct GroupRow {
    pub group: String,
    pub pattern: String,
    /// Whether this is the baseline layout's group.
    pub is_baseline: bool,
    pub forward_allreduces_per_step: Option<f64>,
    /// Final validation loss over the group's finished runs.
    pub val: Replicates,
    /// Paired difference against the baseline pattern's group of the same other keys,
    /// over shared seeds (`None` for the baseline itself or without one).
    pub vs_baseline: Option<Replicates>,
}

/// `(seed, final val loss)` of a group's finished runs.
fn seeded_losses<'a>(results: impl Iterator<Item = &'a PointResult>) -> Vec<(u64, f64)> {
    results
        .filter_map(|r| {
            let l = r.summary.as_ref()?.final_val_loss?;
            Some((r.point.cfg.optim.seed, l as f64))
        })
        .collect()
}

/// The replicate groups of a sweep ([`ReplicateKey`]: points equal but for the seed), in
/// the order they first appear, each named by its point's grid keys. Groups that differ
/// only in pattern (and in the `tuned` keys, each layout's own best) are compared.
pub fn groups(
    results: &[PointResult],
    baseline: Option<&Variant>,
    tuned: &[String],
) -> Vec<GroupRow> {
    let key = |r: &PointResult| ReplicateKey::of(&r.point.cfg).ok();
    // One layout however it is spelled (`4xt` is `tttt`).
    let is_base = |r: &PointResult| baseline.is_some_and(|b| r.point.cfg.variant().same_layout(b));
    let rest = |r: &PointResult| ReplicateKey::without_pattern_or(&r.point.cfg, tuned).ok();
    let mut firsts: Vec<&PointResult> = Vec::new();
    for r in results {
        if !firsts.iter().any(|f| key(f) == key(r)) {
            firsts.push(r);
        }
    }
    firsts
        .into_iter()
        .filter_map(|first| {
            let members: Vec<&PointResult> =
                results.iter().filter(|r| key(r) == key(first)).collect();
            let losses = seeded_losses(members.iter().copied());
            let val = Replicates::of(&losses.iter().map(|&(_, l)| l).collect::<Vec<_>>())?;
            let pattern = first.point.cfg.model.pattern.to_string();
            let is_baseline = is_base(first);
            let vs_baseline = (baseline.is_some() && !is_baseline).then(|| {
                let base = results
                    .iter()
                    .filter(|r| is_base(r) && rest(r) == rest(first));
                Replicates::of(&paired_differences(&losses, &seeded_losses(base)))
            });
            Some(GroupRow {
                group: first.point.group.clone(),
                pattern,
                is_baseline,
                forward_allreduces_per_step: members
                    .iter()
                    .find_map(|r| r.summary.as_ref().map(|s| s.forward_allreduces_per_step)),
                val,
                vs_baseline: vs_baseline.flatten(),
            })
        })
        .collect()
}

const GROUP_COLUMNS: [&str; 11] = [
    "group",
    "pattern",
    "forward_allreduces_per_step",
    "n",
    "val_loss_mean",
    "val_loss_std",
    "val_loss_ci95",
    "diff_vs_baseline_mean",
    "diff_vs_baseline_ci95",
    "significant",
    "detectable_diff",
];

fn group_row(g: &GroupRow) -> Vec<String> {
    let f = |v: f64, d: usize| {
        if v.is_finite() {
            format!("{v:.d$}")
        } else {
            String::new()
        }
    };
    let d = g.vs_baseline.as_ref();
    vec![
        g.group.clone(),
        g.pattern.clone(),
        g.forward_allreduces_per_step
            .map_or(String::new(), |v| format!("{v:.0}")),
        g.val.n.to_string(),
        f(g.val.mean, 4),
        f(g.val.std, 4),
        f(g.val.ci95, 4),
        d.map_or(String::new(), |d| f(d.mean, 4)),
        d.map_or(String::new(), |d| f(d.ci95, 4)),
        d.map_or(String::new(), |d| {
            if d.excludes_zero() { "yes" } else { "no" }.to_string()
        }),
        d.map_or(String::new(), |d| f(d.detectable(), 4)),
    ]
}

fn groups_table(rows: &[GroupRow]) -> Table {
    let mut t = Table::new(GROUP_COLUMNS);
    rows.iter().for_each(|g| t.row(group_row(g)));
    t
}

/// `groups.csv`: one row per replicate group.
pub fn groups_csv(rows: &[GroupRow]) -> String {
    groups_table(rows).csv()
}

/// The replicate table of `summary.md`, with how to read it.
pub fn groups_markdown(rows: &[GroupRow], baseline: Option<&Variant>, tuned: &[String]) -> String {
    let at_best = match tuned.is_empty() {
        true => String::new(),
        false => format!(
            " Each layout at its own chosen {} (the report seeds only; the selection runs are in the tuning table).",
            tuned.join(" and ")
        ),
    };
    let how = baseline.map_or(String::new(), |b| format!(
        " Differences are paired by seed against `{b}` with the same other keys; `significant` means their 95% interval excludes zero (not corrected for the number of groups compared: `tp-plot --penalty` gives Holm's correction); `detectable_diff` is the smallest true difference these pairs would find significant with 80% power at the spread they show.{at_best}"
    ));
    format!(
        "\n## Replicates\n\nFinal validation loss over the seeds of each point: mean, sample standard deviation, n and the half-width of the 95% interval of the mean (Student's t).{how}\n\n{}",
        groups_table(rows).markdown()
    )
}

#[cfg(test)]
mod tests {
    use crate::run_dir::RankCompute;

    #[test]
    fn sharing_slowdown_is_wall_over_cpu_beyond_the_runs_own_ranks_per_core() {
        let c = RankCompute {
            per_rank_ms: vec![10.0, 10.0],
            per_rank_wall_ms: vec![30.0, 31.0],
            steps: 10,
        };
        // Two ranks on two cores: 3x slower than their CPU time says, shared.
        let x = c.sharing_slowdown(2, 2).unwrap();
        assert!((x - 3.1).abs() < 1e-9, "{x}");
        assert!(x > super::SHARED);
        // Four ranks on two cores take turns by themselves: 1.55x beyond that.
        let x = c.sharing_slowdown(4, 2).unwrap();
        assert!((x - 1.55).abs() < 1e-9, "{x}");
        let own = RankCompute {
            per_rank_wall_ms: vec![10.5, 10.2],
            ..c.clone()
        };
        assert!(own.sharing_slowdown(2, 2).unwrap() < super::SHARED);
        let unmeasured = RankCompute {
            per_rank_wall_ms: vec![],
            ..c
        };
        assert_eq!(unmeasured.sharing_slowdown(2, 2), None);
    }
}
