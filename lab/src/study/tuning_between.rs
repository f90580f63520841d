//! Between the grid's points: how much a finer grid could still gain a layout.
//!
//! A grid that doubles the learning rate locates each layout's best to within a factor of
//! two, and a reader comparing two tuned layouts asks whether a finer grid could close the
//! gap between them. The parabola through the chosen value and its two neighbours on the
//! grid (in log value where the values are positive, since such grids are geometric) has
//! its lowest point between the neighbours; its depth below the chosen value's mean is an
//! order of magnitude for what a finer grid could gain there. It interpolates the means of
//! a few selection seeds: exploratory, never a reported loss. Where one neighbour rises
//! far more than the other (a cliff on one side, past a rate where training stalls, or a
//! flat floor on the other, a neighbour that ties the best) a parabola describes the
//! steep side, not the valley, and its lowest point can sit far below every loss
//! measured (12 x 128 on names: 0.039 below the best, whose other neighbour was 0.0024
//! above it); there it says so instead of giving a number.

use super::tuning::Choice;

/// The lowest point of the parabola through a chosen value and its neighbours.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Between {
    /// Where it lies: between the chosen value's two neighbours.
    pub value: f64,
    /// The parabola's loss there.
    pub loss: f64,
    /// That loss less the chosen value's mean: zero or below.
    pub gain: f64,
}

/// How much more one neighbour's rise above the chosen mean may be than the other's before
/// the three points are read as lopsided: a real parabola whose lowest point lies near a
/// neighbour gives about 10 (the test's curve), the Shakespeare study's choices 1.6-3.2.
const LOPSIDED_RATIO: f64 = 20.0;

/// What the three points say.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Estimate {
    Valley(Between),
    /// One neighbour's rise above the chosen mean is this many times the other's.
    Lopsided(f64),
}

/// For tuned key `i` of a choice: `None` where the choice is not final or its value has no
/// finished neighbour on one side (a best at an edge is extended, not interpolated).
pub fn between(c: &Choice, i: usize) -> Option<Estimate> {
    let best = c.best.as_ref().filter(|_| c.complete)?;
    let at = best.number(i)?;
    let mut line: Vec<(f64, f64)> = c
        .line_through(best, i)
        .into_iter()
        // A stalled neighbour's mean is a measured point of the curve (beside a cliff it
        // makes one); a diverged one has none.
        .map(|(v, t)| match (t.diverged.is_empty(), t.stats()) {
            (true, Some(r)) => (v, r.mean),
            _ => (v, f64::INFINITY),
        })
        .filter(|p| p.1.is_finite())
        .collect();
    line.sort_by(|a, b| a.0.total_cmp(&b.0));
    let k = line.iter().position(|p| p.0 == at)?;
    if k == 0 || k + 1 == line.len() {
        return None;
    }
    let log = line.iter().all(|p| p.0 > 0.0);
    let x = |v: f64| if log { v.ln() } else { v };
    let [(x0, y0), (x1, y1), (x2, y2)] =
        [line[k - 1], line[k], line[k + 1]].map(|(v, y)| (x(v), y));
    let (near, far) = {
        let (a, b) = (y0 - y1, y2 - y1);
        (a.min(b), a.max(b))
    };
    if near > 0.0 && far > LOPSIDED_RATIO * near {
        return Some(Estimate::Lopsided(far / near));
    }
    // Newton's form: p(x) = y0 + s (x - x0) + a (x - x0)(x - x1).
    let s = (y1 - y0) / (x1 - x0);
    let a = ((y2 - y1) / (x2 - x1) - s) / (x2 - x0);
    if a <= 0.0 {
        // Three equal means: no lowest point to speak of, nothing to gain.
        return Some(Estimate::Valley(Between {
            value: at,
            loss: y1,
            gain: 0.0,
        }));
    }
    let xm = (x0 + x1) / 2.0 - s / (2.0 * a);
    let loss = y0 + s * (xm - x0) + a * (xm - x0) * (xm - x1);
    Some(Estimate::Valley(Between {
        value: if log { xm.exp() } else { xm },
        loss,
        gain: (loss - y1).min(0.0),
    }))
}

/// `learning_rate ≈ 0.00302: 1.8000 (-0.0041)` for each key that has one (or why not:
/// lopsided), `; `-joined.
pub fn note(c: &Choice) -> String {
    let Some(best) = &c.best else {
        return String::new();
    };
    let parts: Vec<String> = best
        .0
        .iter()
        .enumerate()
        .filter_map(|(i, (k, _))| {
            between(c, i).map(|e| match e {
                Estimate::Valley(b) => format!(
                    "{k} ≈ {}: {:.4} ({:+.4})",
                    three_digits(b.value),
                    b.loss,
                    b.gain
                ),
                Estimate::Lopsided(r) => format!(
                    "{k}: not estimated, lopsided (one neighbour rises {r:.0}x the other: a cliff or a flat floor beside the best)"
                ),
            })
        })
        .collect();
    parts.join("; ")
}

/// A number to three significant digits, without an exponent for a rate's sizes.
fn three_digits(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let decimals = 2 - v.abs().log10().floor() as i32;
    format!("{:.*}", decimals.max(0) as usize, v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::tuning::tests::{decl, run};
    use crate::study::tuning::{choose, Outcome};

    /// Two selection seeds a value whose means lie on 1.8 + 0.05 ln(lr / 0.003)^2: the
    /// grid chooses 0.004, and the parabola through 0.002, 0.004 and 0.008 finds the
    /// curve's own lowest point, 0.003 at 1.8, 0.0041 below 0.004's mean. A best at the
    /// grid's edge has no neighbour on one side: nothing is interpolated.
    #[test]
    fn the_parabola_through_the_best_and_its_neighbours_finds_the_curves_lowest_point() {
        let curve = |v: f64| 1.8 + 0.05 * (v / 0.003).ln().powi(2);
        let values = ["0.001", "0.002", "0.004", "0.008"];
        let runs: Vec<_> = values
            .iter()
            .flat_map(|v| {
                let y = curve(v.parse().unwrap());
                [
                    run("tttt", v, 101, Outcome::Loss(y - 0.01)),
                    run("tttt", v, 102, Outcome::Loss(y + 0.01)),
                ]
            })
            .collect();
        let c = &choose(&runs, &decl())[0];
        assert_eq!(c.best.as_ref().unwrap().0[0].1, "0.004");
        let Some(Estimate::Valley(b)) = between(c, 0) else {
            panic!("a valley")
        };
        assert!((b.value - 0.003).abs() < 1e-9, "{b:?}");
        assert!((b.loss - 1.8).abs() < 1e-9, "{b:?}");
        assert!((b.gain - (1.8 - curve(0.004))).abs() < 1e-9, "{b:?}");
        assert!((b.gain + 0.00414).abs() < 1e-4, "{b:?}");
        assert_eq!(note(c), "learning_rate ≈ 0.00300: 1.8000 (-0.0041)");

        let edge: Vec<_> = runs
            .iter()
            .filter(|r| r.values.0[0].1 != "0.008")
            .cloned()
            .collect();
        let c = &choose(&edge, &decl())[0];
        assert_eq!(c.best.as_ref().unwrap().0[0].1, "0.004");
        assert!(
            between(c, 0).is_none(),
            "0.004 is the highest tried: extend, not interpolate"
        );
        assert_eq!(note(c), "");
    }

    /// 12 x 128 12xt on names: 0.004 at 2.0657, 0.008 (chosen) at 2.0633, 0.016 at 2.3826,
    /// where training stalls. The parabola through them would claim 0.039 below the best;
    /// the note says it is lopsided instead, with the ratio of the two rises (0.319 / 0.0024).
    #[test]
    fn lopsided_neighbours_claim_no_lowest_point() {
        let means = [
            ("0.002", 2.0890),
            ("0.004", 2.0657),
            ("0.008", 2.0633),
            ("0.016", 2.3826),
        ];
        let runs: Vec<_> = means
            .iter()
            .flat_map(|&(v, y)| {
                [
                    run("tttt", v, 101, Outcome::Loss(y - 0.0003)),
                    run("tttt", v, 102, Outcome::Loss(y + 0.0003)),
                ]
            })
            .collect();
        let c = &choose(&runs, &decl())[0];
        assert_eq!(c.best.as_ref().unwrap().0[0].1, "0.008");
        let Some(Estimate::Lopsided(r)) = between(c, 0) else {
            panic!("lopsided: {:?}", between(c, 0))
        };
        assert!((r - 0.3193 / 0.0024).abs() < 1.0, "{r}");
        assert_eq!(
            note(c),
            "learning_rate: not estimated, lopsided (one neighbour rises 133x the other: a cliff or a flat floor beside the best)"
        );
    }

    #[test]
    fn three_digits_keeps_a_rates_significant_figures() {
        assert_eq!(three_digits(0.0046123), "0.00461");
        assert_eq!(three_digits(0.012345), "0.0123");
        assert_eq!(three_digits(123.4), "123");
        assert_eq!(three_digits(2.5), "2.50");
    }
}
