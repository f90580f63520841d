//! Statistics of measurements: the median (step times, throughput), and replicate
//! statistics (sweeps and plots): the mean, sample standard deviation and a 95%
//! confidence interval (Student's t) of a point's runs over seeds, and the paired
//! difference of two points over the seeds they share.

/// The middle value of `values` (the upper one of an even count), if any: the one
/// definition every step time and throughput figure uses.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

/// Summary of `n` replicate values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Replicates {
    pub n: usize,
    pub mean: f64,
    /// Sample standard deviation (n - 1 in the denominator; 0 for a single value).
    pub std: f64,
    /// Half-width of the 95% confidence interval of the mean (infinite for n = 1).
    pub ci95: f64,
}

impl Replicates {
    pub fn of(values: &[f64]) -> Option<Self> {
        let n = values.len();
        if n == 0 {
            return None;
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        if n == 1 {
            return Some(Self {
                n,
                mean,
                std: 0.0,
                ci95: f64::INFINITY,
            });
        }
        let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1) as f64;
        let std = var.sqrt();
        Some(Self {
            n,
            mean,
            std,
            ci95: t975(n - 1) * std / (n as f64).sqrt(),
        })
    }

    /// Whether the interval excludes zero (for a difference: significant at 5%).
    pub fn excludes_zero(&self) -> bool {
        self.ci95.is_finite() && (self.mean.abs() > self.ci95)
    }

    /// For paired differences: the smallest true mean difference this many pairs would
    /// find significant (5%, two-sided) four times in five (80% power), at the spread
    /// observed, `(t975 + t80) sd / sqrt(n)` with n - 1 degrees of freedom. Infinite for
    /// one value.
    pub fn detectable(&self) -> f64 {
        if self.n < 2 {
            return f64::INFINITY;
        }
        let df = self.n - 1;
        (t975(df) + t80(df)) * self.std / (self.n as f64).sqrt()
    }
}

impl Replicates {
    /// For paired differences: the two-sided p-value of "the mean difference is zero"
    /// (Student's t with n - 1 degrees of freedom); 1 where it cannot be told (one value,
    /// or no spread and a zero mean), 0 for a non-zero mean without spread.
    pub fn p_value(&self) -> f64 {
        if self.n < 2 {
            return 1.0;
        }
        if self.std == 0.0 {
            return if self.mean == 0.0 { 1.0 } else { 0.0 };
        }
        use statrs::distribution::{ContinuousCDF, StudentsT};
        let t = self.mean / (self.std / (self.n as f64).sqrt());
        match StudentsT::new(0.0, 1.0, (self.n - 1) as f64) {
            Ok(d) => (2.0 * d.cdf(-t.abs())).min(1.0),
            Err(_) => 1.0,
        }
    }

    /// The half-width of the mean's two-sided interval at level `1 - alpha` (`ci95` at
    /// 0.05; at 0.05/m, one of m simultaneous intervals, Bonferroni); infinite for one value.
    pub fn half_width(&self, alpha: f64) -> f64 {
        if self.n < 2 {
            return f64::INFINITY;
        }
        t_quantile(self.n - 1, 1.0 - alpha / 2.0) * self.std / (self.n as f64).sqrt()
    }

    /// The one-sided upper confidence bound of the mean at level `1 - alpha` (a
    /// non-inferiority bound: the worst the difference plausibly is); infinite for one
    /// value.
    pub fn upper_bound(&self, alpha: f64) -> f64 {
        if self.n < 2 {
            return f64::INFINITY;
        }
        self.mean + t_quantile(self.n - 1, 1.0 - alpha) * self.std / (self.n as f64).sqrt()
    }
}

/// The signs of paired differences, for the exact sign test: how many lie above zero
/// and how many below (zeros tell neither way and are dropped, as the test does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signs {
    pub above: usize,
    pub below: usize,
}

impl Signs {
    pub fn of(values: &[f64]) -> Self {
        Self {
            above: values.iter().filter(|v| **v > 0.0).count(),
            below: values.iter().filter(|v| **v < 0.0).count(),
        }
    }

    /// The exact two-sided sign test's p-value of "a difference is as likely above zero
    /// as below": twice the binomial(n, 1/2) tail of the rarer sign, at most 1. It
    /// assumes nothing of the differences' distribution, so with few pairs (n <= 8) it
    /// stands beside the t-test's p, which rests on normality: eight pairs all of one
    /// sign give 2/256 = 0.0078 however far they lie from zero.
    pub fn p_value(&self) -> f64 {
        let n = self.above + self.below;
        if n == 0 {
            return 1.0;
        }
        let k = self.above.min(self.below);
        let mut tail = 0.0;
        let mut choose = 1.0f64; // C(n, i), built up term by term.
        for i in 0..=k {
            if i > 0 {
                choose = choose * (n - i + 1) as f64 / i as f64;
            }
            tail += choose;
        }
        (2.0 * tail / 2f64.powi(n as i32)).min(1.0)
    }
}

/// Holm's step-down adjustment of `p` values tested together (a family of comparisons):
/// each adjusted p-value, in the input's order. Rejecting where the adjusted value is
/// below alpha keeps the chance of any false rejection in the family at most alpha.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut adjusted = vec![0.0; m];
    let mut running = 0.0f64;
    for (rank, &i) in order.iter().enumerate() {
        running = running.max(((m - rank) as f64 * p[i]).min(1.0));
        adjusted[i] = running;
    }
    adjusted
}

/// The `p` quantile of Student's t with `df` degrees of freedom (statrs); infinite at 0.
fn t_quantile(df: usize, p: f64) -> f64 {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    match StudentsT::new(0.0, 1.0, df as f64) {
        Ok(t) if df > 0 => t.inverse_cdf(p),
        _ => f64::INFINITY,
    }
}

/// The 97.5% quantile of Student's t with `df` degrees of freedom (two-sided 95%).
pub fn t975(df: usize) -> f64 {
    t_quantile(df, 0.975)
}

/// The 80% quantile of Student's t with `df` degrees of freedom (80% power).
pub fn t80(df: usize) -> f64 {
    t_quantile(df, 0.8)
}

/// `(seed, a's value, b's value)` for each seed both have (values given as (seed,
/// value)), in `a`'s order: the one pairing by seed every paired figure is made of.
pub fn by_seed(a: &[(u64, f64)], b: &[(u64, f64)]) -> Vec<(u64, f64, f64)> {
    a.iter()
        .filter_map(|&(s, x)| b.iter().find(|(t, _)| *t == s).map(|&(_, y)| (s, x, y)))
        .collect()
}

/// `a[i] - b[i]` over the seeds both have (pairs given as (seed, value)).
pub fn paired_differences(a: &[(u64, f64)], b: &[(u64, f64)]) -> Vec<f64> {
    by_seed(a, b).into_iter().map(|(_, x, y)| x - y).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values worked by hand: 1.90, 1.88, 1.92 -> mean 1.90, squared deviations
    /// 0, 0.0004, 0.0004, variance 0.0004, std 0.02, CI 4.303 * 0.02 / sqrt(3).
    #[test]
    fn the_median_is_the_middle_value_and_the_upper_one_of_an_even_count() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(3.0));
        assert_eq!(median(vec![]), None);
    }

    #[test]
    fn mean_std_and_interval_match_hand_computed_values() {
        let r = Replicates::of(&[1.90, 1.88, 1.92]).unwrap();
        assert_eq!(r.n, 3);
        assert!((r.mean - 1.90).abs() < 1e-12);
        assert!((r.std - 0.02).abs() < 1e-12);
        assert!((r.ci95 - t975(2) * 0.02 / 3f64.sqrt()).abs() < 1e-12);
        assert!((r.ci95 - 0.049_683).abs() < 1e-6);
        let one = Replicates::of(&[2.0]).unwrap();
        assert_eq!((one.n, one.mean, one.std), (1, 2.0, 0.0));
        assert!(!one.excludes_zero());
        assert!(Replicates::of(&[]).is_none());
    }

    #[test]
    fn paired_differences_pair_by_seed_and_decide_significance() {
        let a = [(1, 1.87), (2, 1.86), (3, 1.88)];
        let b = [(3, 1.90), (1, 1.89), (2, 1.885), (4, 2.0)];
        let d = paired_differences(&a, &b);
        assert_eq!(d.len(), 3);
        for (x, y) in d.iter().zip([-0.02, -0.025, -0.02]) {
            assert!((x - y).abs() < 1e-12);
        }
        let r = Replicates::of(&d).unwrap();
        // mean -0.021667, std 0.0028868, CI 4.3027 * 0.0028868 / sqrt 3 = 0.0071711.
        assert!((r.mean + 0.021_666_7).abs() < 1e-6);
        assert!((r.ci95 - 0.007_171_1).abs() < 1e-6);
        assert!(r.excludes_zero());
        let noisy = Replicates::of(&[-0.02, 0.03, 0.0]).unwrap();
        assert!(!noisy.excludes_zero());
    }

    /// Student's t quantiles against the printed tables (to their 3 decimals) and the
    /// normal limit.
    #[test]
    fn t_quantiles_match_the_printed_tables_and_approach_the_normal() {
        for (df, want) in [(1, 12.706), (2, 4.303), (7, 2.365), (30, 2.042)] {
            assert!((t975(df) - want).abs() < 5e-4, "t975({df}) = {}", t975(df));
        }
        assert!((t975(100_000) - 1.959_964).abs() < 1e-4);
        assert!(t975(0).is_infinite());
        for (df, want) in [(1, 1.376), (7, 0.896), (30, 0.854)] {
            assert!((t80(df) - want).abs() < 5e-4, "t80({df}) = {}", t80(df));
        }
        assert!((t80(100_000) - 0.841_621).abs() < 1e-4);
        assert!(t80(0).is_infinite());
    }

    /// 0.01, 0.02, 0.03, 0.00 by hand: mean 0.015, sd 0.012910, t = 2.32379 on 3 degrees
    /// of freedom, whose CDF has a closed form (1/2 + (u/(1 + t^2/3) + atan u)/pi, u =
    /// t/sqrt 3): two-sided p 0.102728; one-sided 95% bound 0.015 + 2.353363 sd/2 =
    /// 0.030191 (2.353363: the printed t table's 95% quantile at 3 degrees).
    #[test]
    fn p_values_and_one_sided_bounds_match_hand_worked_values() {
        let r = Replicates::of(&[0.01, 0.02, 0.03, 0.00]).unwrap();
        assert!((r.p_value() - 0.102_728).abs() < 1e-6, "{}", r.p_value());
        assert!(
            (r.upper_bound(0.05) - 0.030_191).abs() < 1e-6,
            "{}",
            r.upper_bound(0.05)
        );
        assert_eq!(Replicates::of(&[0.1]).unwrap().p_value(), 1.0);
        assert!(Replicates::of(&[0.1])
            .unwrap()
            .upper_bound(0.05)
            .is_infinite());
        assert_eq!(Replicates::of(&[0.1, 0.1]).unwrap().p_value(), 0.0);
        // Two-sided: at 0.05 the 95% interval; at 0.05/5 (five comparisons, Bonferroni)
        // t's 99.5% quantile at 3 degrees, 5.840909 from the printed table.
        assert!(
            (r.half_width(0.05) - r.ci95).abs() < 1e-4,
            "{}",
            r.half_width(0.05)
        );
        let want = 5.840_909 * r.std / 2.0;
        assert!(
            (r.half_width(0.01) - want).abs() < 1e-4,
            "{}",
            r.half_width(0.01)
        );
        assert!(Replicates::of(&[0.1])
            .unwrap()
            .half_width(0.05)
            .is_infinite());
    }

    /// Holm by hand for 0.01, 0.04, 0.03, 0.20: sorted 0.01 0.03 0.04 0.20 times 4 3 2 1
    /// = 0.04 0.09 0.08 0.20, made non-decreasing: 0.04 0.09 0.09 0.20, in input order
    /// 0.04 0.09 0.09 0.20.
    #[test]
    fn holm_adjusts_as_r_does() {
        let a = holm(&[0.01, 0.04, 0.03, 0.20]);
        for (x, y) in a.iter().zip([0.04, 0.09, 0.09, 0.20]) {
            assert!((x - y).abs() < 1e-12, "{a:?}");
        }
        assert_eq!(holm(&[0.5, 0.6]), vec![1.0, 1.0]);
        assert!(holm(&[]).is_empty());
    }

    /// The exact sign test by hand: 8 of 8 above zero, 2 x (1/2)^8 = 0.0078125; 7 of 8,
    /// 2 x 9/256 = 0.0703125; 4 of 4, 2/16 = 0.125 (four pairs can never reach 5%); 3 up
    /// and 3 down, 1; zeros dropped.
    #[test]
    fn the_sign_test_is_the_exact_binomial_tail() {
        let p = |v: &[f64]| Signs::of(v).p_value();
        assert!((p(&[0.1; 8]) - 0.0078125).abs() < 1e-12);
        let seven = [0.1, 0.2, 0.3, 0.1, 0.2, 0.3, 0.1, -0.5];
        assert!((p(&seven) - 0.0703125).abs() < 1e-12);
        assert!((p(&[-0.01; 4]) - 0.125).abs() < 1e-12);
        assert_eq!(p(&[0.1, 0.1, 0.1, -0.1, -0.1, -0.1]), 1.0);
        assert_eq!(Signs::of(&[0.0, 0.1, -0.2]), Signs { above: 1, below: 1 });
        assert_eq!(p(&[]), 1.0);
    }

    /// Eight pairs with sd 0.01: (2.3646 + 0.8960) x 0.01 / sqrt 8 = 0.01153.
    #[test]
    fn the_detectable_difference_is_the_80_percent_power_shift_at_the_observed_spread() {
        let d = [0.01, -0.01, 0.01, -0.01, 0.01, -0.01, 0.01, -0.01];
        let r = Replicates::of(&d).unwrap();
        let sd = (8.0 * 1e-4 / 7.0f64).sqrt();
        assert!((r.std - sd).abs() < 1e-12);
        assert!((r.detectable() - (t975(7) + t80(7)) * sd / 8f64.sqrt()).abs() < 1e-12);
        assert!((r.detectable() - 3.2606 * sd / 8f64.sqrt()).abs() < 1e-6);
        assert!(Replicates::of(&[0.1]).unwrap().detectable().is_infinite());
    }
}
