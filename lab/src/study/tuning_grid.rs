//! A tuned choice's grid arithmetic: the values one step past an edge its best lies at
//! (the grid's own progression), the midpoints of one refinement, and the line of values
//! through a best along one key. The choice itself is made in [`super::tuning::choose`];
//! this file only says which values to try next.

use super::tuning::{yaml_text, Choice, Edge, Tried, TunedValues};

impl Choice {
    /// The values one step beyond each edge the best lies at: the next value of the
    /// grid's own progression (geometric where the values are positive numbers, else
    /// arithmetic; whole numbers stay whole), the other keys kept at the best's.
    pub fn beyond_edges(&self) -> Vec<TunedValues> {
        let Some(best) = &self.best else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (key, edge) in &self.edges {
            let Some(i) = best.0.iter().position(|(k, _)| k == key) else {
                continue;
            };
            let line = self.line_through(best, i);
            let Some(at) = best.number(i) else { continue };
            // The nearest value tried on the other side.
            let neighbour = line
                .iter()
                .map(|p| &p.0)
                .filter(|v| match edge {
                    Edge::Low => **v > at,
                    Edge::High => **v < at,
                })
                .min_by(|a, b| (*a - at).abs().total_cmp(&(*b - at).abs()));
            let Some(&n) = neighbour else { continue };
            let next = if at > 0.0 && n > 0.0 {
                at * (at / n)
            } else {
                at + (at - n)
            };
            // A grid of values of one sign is not extended across zero: a best at 0 of
            // [0, 1000] (a warm-up, a weight decay) is at the end of its range, and -1000
            // would only make runs that fail, every rerun again.
            if (at >= 0.0 && n >= 0.0 && next < 0.0) || (at <= 0.0 && n <= 0.0 && next > 0.0) {
                continue;
            }
            let mut v = best.clone();
            v.0[i].1 = self.value_text(i, next);
            if !self.tried.iter().any(|t| t.values == v) && !out.contains(&v) {
                out.push(v);
            }
        }
        out
    }

    /// Key `i`'s value `x` as a config spells it: whole where every value tried is whole,
    /// else to four significant digits.
    fn value_text(&self, i: usize, x: f64) -> String {
        let whole = self
            .tried
            .iter()
            .all(|t| t.values.0[i].1.parse::<i64>().is_ok());
        if whole {
            format!("{}", x.round() as i64)
        } else {
            let rounded: f64 = format!("{x:.3e}").parse().unwrap_or(x);
            yaml_text(&serde_yaml_ng::Value::from(rounded))
        }
    }

    /// One refinement of a final choice: the geometric midpoints (arithmetic where a
    /// value is not positive) between the best of the values on the grid's lattice
    /// (`on_lattice`: the grid and its extensions, not earlier midpoints) and its nearest
    /// lattice neighbour on each side, each key in turn, those not tried yet. The lattice
    /// best does not move when midpoints are added, so a sweep refines once.
    pub fn midpoints(&self, on_lattice: impl Fn(&TunedValues) -> bool) -> Vec<TunedValues> {
        if !self.complete {
            return Vec::new();
        }
        let Some(coarse) = self
            .tried
            .iter()
            .filter(|t| on_lattice(&t.values) && t.score().is_finite())
            .min_by(|a, b| a.score().total_cmp(&b.score()))
            .map(|t| t.values.clone())
        else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for i in 0..coarse.0.len() {
            let Some(at) = coarse.number(i) else { continue };
            let line: Vec<f64> = self
                .line_through(&coarse, i)
                .into_iter()
                .filter(|(_, t)| on_lattice(&t.values))
                .map(|(v, _)| v)
                .collect();
            let below = line.iter().copied().filter(|v| *v < at).reduce(f64::max);
            let above = line.iter().copied().filter(|v| *v > at).reduce(f64::min);
            for n in [below, above].into_iter().flatten() {
                let mid = if at > 0.0 && n > 0.0 {
                    (at * n).sqrt()
                } else {
                    (at + n) / 2.0
                };
                let mut v = coarse.clone();
                v.0[i].1 = self.value_text(i, mid);
                if !self.tried.iter().any(|t| t.values == v) && !out.contains(&v) {
                    out.push(v);
                }
            }
        }
        out
    }

    /// The values tried with every key but `i` at `best`'s, each with key `i`'s number.
    pub(super) fn line_through(&self, best: &TunedValues, i: usize) -> Vec<(f64, &Tried)> {
        self.tried
            .iter()
            .filter(|t| {
                t.values
                    .0
                    .iter()
                    .zip(&best.0)
                    .enumerate()
                    .all(|(j, (a, b))| j == i || a == b)
            })
            .filter_map(|t| t.values.number(i).map(|v| (v, t)))
            .collect()
    }

    /// `0.004 (low edge of 0.004-0.016)`-style note on the edges, empty when inside.
    pub fn edge_note(&self) -> String {
        let notes: Vec<String> = self
            .edges
            .iter()
            .map(|(k, e)| match e {
                Edge::Low => format!("{k} at the lowest value tried"),
                Edge::High => format!("{k} at the highest value tried"),
            })
            .collect();
        notes.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::tuning::tests::{decl, lr, run};
    use crate::study::tuning::{choose, Outcome, TuneRun};

    /// One refinement: around the lattice best 0.004 of 0.001-0.008 the geometric
    /// midpoints 0.002828 and 0.005657; once they are tried (one of them the new best)
    /// the lattice best is the same and nothing more is added. A best at the lattice's
    /// edge is refined on its one side.
    #[test]
    fn a_refinement_adds_the_geometric_midpoints_around_the_lattice_best_once() {
        use Outcome::*;
        let lattice = |v: &TunedValues| {
            let x = v.number(0).unwrap();
            let k = (x / 0.001).log2();
            (k - k.round()).abs() < 0.1
        };
        let mut runs: Vec<TuneRun> = [
            ("0.001", 1.95),
            ("0.002", 1.90),
            ("0.004", 1.85),
            ("0.008", 1.88),
        ]
        .iter()
        .flat_map(|&(v, y)| {
            [
                run("tttt", v, 101, Loss(y)),
                run("tttt", v, 102, Loss(y + 0.01)),
            ]
        })
        .collect();
        let c = &choose(&runs, &decl())[0];
        assert_eq!(c.midpoints(lattice), vec![lr("0.002828"), lr("0.005657")]);
        runs.extend([
            run("tttt", "0.002828", 101, Loss(1.87)),
            run("tttt", "0.002828", 102, Loss(1.88)),
            run("tttt", "0.005657", 101, Loss(1.84)),
            run("tttt", "0.005657", 102, Loss(1.85)),
        ]);
        let c = &choose(&runs, &decl())[0];
        assert_eq!(c.best, Some(lr("0.005657")));
        assert!(c.edges.is_empty());
        assert!(c.midpoints(lattice).is_empty(), "refined once");
        let edge: Vec<TuneRun> = runs
            .iter()
            .filter(|r| r.values.number(0).unwrap() <= 0.004 && lattice(&r.values))
            .cloned()
            .collect();
        let c = &choose(&edge, &decl())[0];
        assert_eq!(c.midpoints(lattice), vec![lr("0.002828")]);
        // Unfinished selection: no refinement yet.
        let mut pending = edge.clone();
        pending.push(run("tttt", "0.008", 101, Pending));
        assert!(choose(&pending, &decl())[0].midpoints(lattice).is_empty());
    }

    /// A best at the highest value tried is an edge, and the next value continues the
    /// grid's ratio (x2); at the lowest, it halves; whole-number keys stay whole.
    #[test]
    fn a_best_at_an_edge_is_flagged_and_the_grid_continues_past_it() {
        use Outcome::*;
        let runs = vec![
            run("tttt", "0.004", 101, Loss(1.90)),
            run("tttt", "0.004", 102, Loss(1.90)),
            run("tttt", "0.008", 101, Loss(1.85)),
            run("tttt", "0.008", 102, Loss(1.86)),
            run("pppp", "0.004", 101, Loss(1.80)),
            run("pppp", "0.004", 102, Loss(1.81)),
            run("pppp", "0.008", 101, Loss(1.85)),
            run("pppp", "0.008", 102, Pending),
        ];
        let choices = choose(&runs, &decl());
        let t = choices
            .iter()
            .find(|c| c.variant.to_string() == "tttt")
            .unwrap();
        assert_eq!(t.edges, vec![("learning_rate".to_string(), Edge::High)]);
        assert_eq!(t.beyond_edges(), vec![lr("0.016")]);
        let p = choices
            .iter()
            .find(|c| c.variant.to_string() == "pppp")
            .unwrap();
        // 0.008 has a seed still to run: the choice is not final, though 0.004 leads.
        assert!(!p.complete);
        assert_eq!(p.best, Some(lr("0.004")));
        assert_eq!(p.edges, vec![("learning_rate".to_string(), Edge::Low)]);
        assert_eq!(p.beyond_edges(), vec![lr("0.002")]);
        let warm = |v: &str| TunedValues(vec![("warmup_iters".into(), v.into())]);
        // A warm-up grid of `values`, its best at `best`, an edge at `edge`.
        let warmup_choice = |values: [&str; 2], best: &str, edge: Edge| Choice {
            tried: values
                .iter()
                .map(|v| Tried {
                    values: warm(v),
                    losses: vec![(101, 1.0)],
                    diverged: vec![],
                    pending: vec![],
                    stalled: vec![],
                })
                .collect(),
            best: Some(warm(best)),
            edges: vec![("warmup_iters".into(), edge)],
            ..t.clone()
        };
        let c = warmup_choice(["50", "100"], "100", Edge::High);
        assert_eq!(c.beyond_edges(), vec![warm("200")]);
        // A best at 0 of [0, 1000]: nothing below zero is tried.
        let zero = warmup_choice(["0", "1000"], "0", Edge::Low);
        assert!(zero.beyond_edges().is_empty(), "{:?}", zero.beyond_edges());
    }
}
