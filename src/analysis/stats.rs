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

/// A quantile of Student's t with `df` degrees of freedom: from `table` (df 1-30), beyond
/// it the normal quantile `normal` with the first correction term `c / df`; infinite at 0.
fn t_quantile(df: usize, table: &[f64; 30], normal: f64, c: f64) -> f64 {
    match df {
        0 => f64::INFINITY,
        d if d <= 30 => table[d - 1],
        d => normal + c / d as f64,
    }
}

/// The 97.5% quantile of Student's t with `df` degrees of freedom (two-sided 95%).
pub fn t975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    t_quantile(df, &TABLE, 1.959_964, 2.5)
}

/// The 80% quantile of Student's t with `df` degrees of freedom (80% power).
pub fn t80(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        1.376, 1.061, 0.978, 0.941, 0.920, 0.906, 0.896, 0.889, 0.883, 0.879, 0.876, 0.873, 0.870,
        0.868, 0.866, 0.865, 0.863, 0.862, 0.861, 0.860, 0.859, 0.858, 0.858, 0.857, 0.856, 0.856,
        0.855, 0.855, 0.854, 0.854,
    ];
    t_quantile(df, &TABLE, 0.841_621, 0.363)
}

/// `a[i] - b[i]` over the seeds both have (pairs given as (seed, value)).
pub fn paired_differences(a: &[(u64, f64)], b: &[(u64, f64)]) -> Vec<f64> {
    a.iter()
        .filter_map(|(s, x)| b.iter().find(|(t, _)| t == s).map(|(_, y)| x - y))
        .collect()
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
        assert!((r.ci95 - 4.303 * 0.02 / 3f64.sqrt()).abs() < 1e-12);
        assert!((r.ci95 - 0.049_686).abs() < 1e-6);
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
        // mean -0.021667, std 0.0028868, CI 4.303 * 0.0028868 / sqrt 3 = 0.0071716.
        assert!((r.mean + 0.021_666_7).abs() < 1e-6);
        assert!((r.ci95 - 0.007_171_6).abs() < 1e-6);
        assert!(r.excludes_zero());
        let noisy = Replicates::of(&[-0.02, 0.03, 0.0]).unwrap();
        assert!(!noisy.excludes_zero());
    }

    #[test]
    fn t_quantiles_follow_the_table_and_approach_the_normal() {
        assert_eq!(t975(1), 12.706);
        assert_eq!(t975(2), 4.303);
        assert_eq!(t975(30), 2.042);
        assert!((t975(120) - 1.98).abs() < 0.01);
        assert!(t975(0).is_infinite());
        assert_eq!(t80(7), 0.896);
        assert!((t80(60) - 0.8477).abs() < 1e-3 && (t80(120) - 0.8446).abs() < 1e-3);
        assert!(t80(0).is_infinite());
    }

    /// Eight pairs with sd 0.01: (2.365 + 0.896) x 0.01 / sqrt 8 = 0.01153.
    #[test]
    fn the_detectable_difference_is_the_80_percent_power_shift_at_the_observed_spread() {
        let d = [0.01, -0.01, 0.01, -0.01, 0.01, -0.01, 0.01, -0.01];
        let r = Replicates::of(&d).unwrap();
        let sd = (8.0 * 1e-4 / 7.0f64).sqrt();
        assert!((r.std - sd).abs() < 1e-12);
        assert!((r.detectable() - 3.261 * sd / 8f64.sqrt()).abs() < 1e-12);
        assert!(Replicates::of(&[0.1]).unwrap().detectable().is_infinite());
    }
}
