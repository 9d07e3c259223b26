//! Summary statistics of a benchmark's samples: count, min, nearest-rank p50, p90 and p95,
//! max.

use serde::Serialize;

/// The summary of one series of samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stats {
    /// How many samples.
    pub n: usize,
    /// The smallest.
    pub min: f64,
    /// The median (nearest rank).
    pub p50: f64,
    /// The 90th percentile (nearest rank).
    pub p90: f64,
    /// The 95th percentile (nearest rank).
    pub p95: f64,
    /// The largest.
    pub max: f64,
}

impl Stats {
    /// The summary of `samples`; `None` when there are none. NaN samples are ignored.
    ///
    /// Percentiles use the nearest-rank method: the p-th percentile of n sorted samples is
    /// the one at rank ⌈p × n / 100⌉, so it is always one of the samples.
    pub fn of(samples: &[f64]) -> Option<Stats> {
        let mut sorted: Vec<f64> = samples.iter().copied().filter(|v| !v.is_nan()).collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        let rank = |p: usize| {
            let r = (p * sorted.len()).div_ceil(100).max(1);
            sorted[r - 1]
        };
        Some(Stats {
            n: sorted.len(),
            min: sorted[0],
            p50: rank(50),
            p90: rank(90),
            p95: rank(95),
            max: sorted[sorted.len() - 1],
        })
    }
}

/// Ours over the anchor's, compared at the median; `None` when the anchor's median is not
/// positive.
pub fn ratio(ours: &Stats, anchor: &Stats) -> Option<f64> {
    (anchor.p50 > 0.0).then(|| ours.p50 / anchor.p50)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank_samples() {
        let samples: Vec<f64> = (1..=20).rev().map(f64::from).collect();
        let s = Stats::of(&samples).unwrap();
        assert_eq!(
            (s.n, s.min, s.p50, s.p90, s.p95, s.max),
            (20, 1.0, 10.0, 18.0, 19.0, 20.0)
        );
    }

    #[test]
    fn one_sample_is_every_statistic_and_none_is_no_statistic() {
        let s = Stats::of(&[7.5]).unwrap();
        assert_eq!(
            (s.min, s.p50, s.p90, s.p95, s.max),
            (7.5, 7.5, 7.5, 7.5, 7.5)
        );
        assert_eq!(Stats::of(&[]), None);
        assert_eq!(Stats::of(&[f64::NAN]), None);
    }

    #[test]
    fn two_samples_have_the_lower_as_median() {
        let s = Stats::of(&[3.0, 1.0]).unwrap();
        assert_eq!((s.p50, s.p90), (1.0, 3.0));
    }

    #[test]
    fn the_ratio_compares_medians_and_needs_a_positive_anchor() {
        let ours = Stats::of(&[5.0]).unwrap();
        let anchor = Stats::of(&[500.0]).unwrap();
        assert_eq!(ratio(&ours, &anchor), Some(0.01));
        assert_eq!(ratio(&ours, &Stats::of(&[0.0]).unwrap()), None);
    }
}
