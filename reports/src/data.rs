//! The data behind each plot: pure functions from the rows of a run directory to the series
//! that are drawn.
//!
//! Keeping these apart from the drawing makes the plots testable on numbers rather than
//! pixels: a test feeds a few hand-written rows and checks the points, bins, bands and
//! fractions that come out. Every function keeps the algorithms in the order it is given (the
//! run's order, which also fixes each algorithm's colour) and never reorders points within an
//! algorithm except where it says so.

use crate::Series;
use crate::rundir::{Activity, MetricRow, SeriesRow, StalenessRow, TimelineRow, UtilizationRow};

/// The x axis of a convergence plot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XAxis {
    /// Simulated time, in seconds (`time_s`).
    Time,
    /// Epochs (`epoch`).
    Epoch,
}

impl XAxis {
    /// The x value of a row (`None`: not measured).
    pub fn of(self, row: &MetricRow) -> Option<f64> {
        match self {
            XAxis::Time => Some(row.time_s),
            XAxis::Epoch => row.epoch,
        }
    }
}

/// A column of `metrics.csv` that is plotted against time or epochs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// `loss`.
    Loss,
    /// `accuracy`.
    Accuracy,
    /// `train_loss`.
    TrainLoss,
    /// `consensus`.
    Consensus,
    /// `suboptimality`.
    Suboptimality,
    /// `replica_loss_mean`.
    ReplicaLossMean,
    /// `replica_accuracy_mean`.
    ReplicaAccuracyMean,
}

impl Metric {
    /// The value of a row (`None`: not measured).
    pub fn of(self, row: &MetricRow) -> Option<f64> {
        match self {
            Metric::Loss => row.loss,
            Metric::Accuracy => row.accuracy,
            Metric::TrainLoss => row.train_loss,
            Metric::Consensus => row.consensus,
            Metric::Suboptimality => row.suboptimality,
            Metric::ReplicaLossMean => row.replica_loss_mean,
            Metric::ReplicaAccuracyMean => row.replica_accuracy_mean,
        }
    }
}

/// One series per algorithm of `algorithms` (in that order, empty when it has no point): the
/// rows of `metrics` of that algorithm where both `x` and `metric` were measured, in file order.
pub fn metric_series(
    metrics: &[MetricRow],
    algorithms: &[String],
    x: XAxis,
    metric: Metric,
) -> Vec<Series> {
    algorithms
        .iter()
        .map(|alg| {
            Series::new(
                alg.clone(),
                metrics
                    .iter()
                    .filter(|r| &r.algorithm == alg)
                    .filter_map(|r| Some((x.of(r)?, metric.of(r)?))),
            )
        })
        .collect()
}

/// A curve to be drawn on a log axis: the positive points, and how many were left out.
#[derive(Debug, Clone, PartialEq)]
pub struct LogCurve {
    /// The algorithm's label and its positive, finite points.
    pub series: Series,
    /// Measured points that are exactly zero (not drawable on a log axis).
    pub zeros: usize,
    /// Measured points in all (finite ones).
    pub measured: usize,
}

impl LogCurve {
    /// Splits a series for a log axis.
    pub fn new(series: &Series) -> LogCurve {
        let finite: Vec<(f64, f64)> = series
            .points
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        LogCurve {
            series: Series::new(
                series.label.clone(),
                finite.iter().copied().filter(|&(_, y)| y > 0.0),
            ),
            zeros: finite.iter().filter(|&&(_, y)| y == 0.0).count(),
            measured: finite.len(),
        }
    }

    /// Every measured point is zero (e.g. all-reduce's consensus distance).
    pub fn all_zero(&self) -> bool {
        self.measured > 0 && self.zeros == self.measured
    }
}

/// A histogram of one algorithm: `(value, count)` bins summed over workers, by increasing value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Histogram {
    /// The algorithm's label.
    pub algorithm: String,
    /// `(value, count)`, values increasing and distinct, counts positive.
    pub bins: Vec<(u64, u64)>,
}

/// Summary figures of a [`Histogram`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HistogramStats {
    /// Number of measurements.
    pub count: u64,
    /// Their mean.
    pub mean: f64,
    /// The 99th percentile, nearest rank: the smallest value with at least
    /// `ceil(0.99 · count)` measurements at or below it.
    pub p99: u64,
    /// The largest value.
    pub max: u64,
}

impl Histogram {
    /// Count, mean, p99 and max (`None` for an empty histogram).
    pub fn stats(&self) -> Option<HistogramStats> {
        let count: u64 = self.bins.iter().map(|b| b.1).sum();
        if count == 0 {
            return None;
        }
        let total: f64 = self.bins.iter().map(|&(v, c)| v as f64 * c as f64).sum();
        let rank = (count * 99).div_ceil(100);
        let mut seen = 0;
        let p99 = self
            .bins
            .iter()
            .find(|&&(_, c)| {
                seen += c;
                seen >= rank
            })
            .map_or(0, |b| b.0);
        Some(HistogramStats {
            count,
            mean: total / count as f64,
            p99,
            max: self.bins.last().map_or(0, |b| b.0),
        })
    }
}

/// The histograms of `measure` (`gradient` or `message_age`) in `staleness.csv`, one per
/// algorithm of `algorithms` that has a nonzero count, the per-worker rows summed.
pub fn staleness_histograms(
    rows: &[StalenessRow],
    algorithms: &[String],
    measure: &str,
) -> Vec<Histogram> {
    algorithms
        .iter()
        .filter_map(|alg| {
            let mut bins: std::collections::BTreeMap<u64, u64> = Default::default();
            for r in rows
                .iter()
                .filter(|r| &r.algorithm == alg && r.measure == measure && r.count > 0)
            {
                *bins.entry(r.value).or_default() += r.count;
            }
            (!bins.is_empty()).then(|| Histogram {
                algorithm: alg.clone(),
                bins: bins.into_iter().collect(),
            })
        })
        .collect()
}

/// One point of a band across runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BandPoint {
    /// The evaluation time shared by every run, in simulated seconds.
    pub time_s: f64,
    /// The mean of the runs' epochs at that time (`None` if a run did not record it).
    pub epoch: Option<f64>,
    /// Mean of the runs' values.
    pub mean: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

/// Mean, min and max of `metric` across runs, aligned on the evaluation times common to all.
///
/// `runs` holds one algorithm's rows of each run. A time is kept when every run has a row at
/// exactly that time (times are written with round-trip formatting, so equal simulated times
/// compare equal) with a finite value of `metric`; nothing is interpolated. When a run has
/// several rows at one time, the last counts. Points come out by increasing time.
pub fn band(runs: &[Vec<&MetricRow>], metric: Metric) -> Vec<BandPoint> {
    let Some((first, rest)) = runs.split_first() else {
        return Vec::new();
    };
    let at = |rows: &[&MetricRow], t: f64| -> Option<(f64, Option<f64>)> {
        let row = rows.iter().rev().find(|r| r.time_s == t)?;
        let value = metric.of(row).filter(|v| v.is_finite())?;
        Some((value, row.epoch))
    };
    let mut times: Vec<f64> = first.iter().map(|r| r.time_s).collect();
    times.sort_by(f64::total_cmp);
    times.dedup();
    times
        .into_iter()
        .filter_map(|t| {
            let values: Vec<(f64, Option<f64>)> = std::iter::once(first)
                .chain(rest)
                .map(|rows| at(rows, t))
                .collect::<Option<_>>()?;
            let n = values.len() as f64;
            let epochs: Option<Vec<f64>> = values.iter().map(|v| v.1).collect();
            Some(BandPoint {
                time_s: t,
                epoch: epochs.map(|e| e.iter().sum::<f64>() / n),
                mean: values.iter().map(|v| v.0).sum::<f64>() / n,
                min: values.iter().map(|v| v.0).fold(f64::INFINITY, f64::min),
                max: values.iter().map(|v| v.0).fold(f64::NEG_INFINITY, f64::max),
            })
        })
        .collect()
}

/// One series per algorithm of `algorithms` (empty when it has none): `series.csv`'s values
/// named `name`, `(time_s, value)` in file order, unmeasured values left out.
pub fn named_series(rows: &[SeriesRow], algorithms: &[String], name: &str) -> Vec<Series> {
    algorithms
        .iter()
        .map(|alg| {
            Series::new(
                alg.clone(),
                rows.iter()
                    .filter(|r| &r.algorithm == alg && r.name == name)
                    .filter_map(|r| Some((r.time_s, r.value?))),
            )
        })
        .collect()
}

/// `(time_s, low, high)` for one algorithm: the values named `low` and `high` in `series.csv`
/// at the same time (e.g. push-sum's `weight_min` and `weight_max`), by increasing time.
pub fn range_series(
    rows: &[SeriesRow],
    algorithm: &str,
    low: &str,
    high: &str,
) -> Vec<(f64, f64, f64)> {
    let values = |name: &str| -> Vec<(f64, f64)> {
        rows.iter()
            .filter(|r| r.algorithm == algorithm && r.name == name)
            .filter_map(|r| Some((r.time_s, r.value?)))
            .collect()
    };
    let highs = values(high);
    let mut out: Vec<(f64, f64, f64)> = values(low)
        .into_iter()
        .filter_map(|(t, lo)| {
            let hi = highs.iter().rev().find(|h| h.0 == t)?.1;
            Some((t, lo, hi))
        })
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out.dedup_by(|a, b| a.0 == b.0);
    out
}

/// One worker's share of an algorithm's run (`utilization.csv`).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerShare {
    /// The worker.
    pub worker: u64,
    /// Local steps it completed.
    pub steps: u64,
    /// Seconds computing, communicating, blocked, idle (the [`Activity::ALL`] order).
    pub seconds: [f64; 4],
    /// The same as fractions of their sum (zeros when the sum is zero).
    pub fractions: [f64; 4],
}

/// The workers of `algorithm` in `utilization.csv`, by worker id.
pub fn utilization(rows: &[UtilizationRow], algorithm: &str) -> Vec<WorkerShare> {
    let mut out: Vec<WorkerShare> = rows
        .iter()
        .filter(|r| r.algorithm == algorithm)
        .map(|r| {
            let seconds = [r.compute_s, r.communicate_s, r.blocked_s, r.idle_s];
            let total: f64 = seconds.iter().sum();
            WorkerShare {
                worker: r.worker,
                steps: r.steps,
                seconds,
                fractions: seconds.map(|s| if total > 0.0 { s / total } else { 0.0 }),
            }
        })
        .collect();
    out.sort_by_key(|w| w.worker);
    out
}

/// One worker's lane of a Gantt chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Lane {
    /// The worker.
    pub worker: u64,
    /// `(activity, start_s, end_s)`, by start time.
    pub intervals: Vec<(Activity, f64, f64)>,
}

/// The lanes of `algorithm` in `timeline.csv`, by worker id; empty intervals are dropped.
pub fn timeline_lanes(rows: &[TimelineRow], algorithm: &str) -> Vec<Lane> {
    let mut lanes: std::collections::BTreeMap<u64, Vec<(Activity, f64, f64)>> = Default::default();
    for r in rows.iter().filter(|r| r.algorithm == algorithm) {
        if let Some(activity) = r.activity
            && r.end_s > r.start_s
        {
            lanes
                .entry(r.worker)
                .or_default()
                .push((activity, r.start_s, r.end_s));
        }
    }
    lanes
        .into_iter()
        .map(|(worker, mut intervals)| {
            intervals.sort_by(|a, b| a.1.total_cmp(&b.1));
            Lane { worker, intervals }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p99_is_nearest_rank() {
        let h = Histogram {
            algorithm: "a".into(),
            bins: vec![(0, 98), (5, 1), (9, 1)],
        };
        // 100 values: rank 99 is the first 5.
        let s = h.stats().unwrap();
        assert_eq!((s.count, s.p99, s.max), (100, 5, 9));
        assert!((s.mean - 0.14).abs() < 1e-12);
        let h = Histogram {
            algorithm: "a".into(),
            bins: vec![(3, 1)],
        };
        assert_eq!(h.stats().unwrap().p99, 3);
        let h = Histogram {
            algorithm: "a".into(),
            bins: vec![],
        };
        assert_eq!(h.stats(), None);
    }

    #[test]
    fn log_curve_counts_zeros() {
        let c = LogCurve::new(&Series::new(
            "a",
            [(0.0, 0.0), (1.0, 0.5), (2.0, f64::NAN), (3.0, 0.25)],
        ));
        assert_eq!(c.series.points, vec![(1.0, 0.5), (3.0, 0.25)]);
        assert_eq!((c.zeros, c.measured, c.all_zero()), (1, 3, false));
        let c = LogCurve::new(&Series::new("b", [(0.0, 0.0), (1.0, 0.0)]));
        assert!(c.all_zero() && c.series.points.is_empty());
    }
}
