//! The data behind each plot: pure functions from the rows of a run directory to the series
//! that are drawn.
//!
//! Keeping these apart from the drawing makes the plots testable on numbers rather than
//! pixels: a test feeds a few hand-written rows and checks the points, bins, bands and
//! fractions that come out. Every function keeps the algorithms in the order it is given (the
//! run's order, which also fixes each algorithm's colour) and never reorders points within an
//! algorithm except where it says so.

use crate::Series;
use crate::rundir::{
    Activity, FaultRow, IntStats, MetricRow, SeriesRow, StalenessRow, TimelineRow, UtilizationRow,
};

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

/// The histogram of one algorithm's staleness (or message ages) in `staleness.csv`:
/// `(value, count)` bins summed over workers, by increasing value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StalenessHistogram {
    /// The algorithm's label.
    pub algorithm: String,
    /// `(value, count)`, values increasing and distinct, counts positive.
    pub bins: Vec<(u64, u64)>,
}

impl StalenessHistogram {
    /// Count, mean, p99 and max (`None` for an empty histogram).
    pub fn stats(&self) -> Option<IntStats> {
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
        Some(IntStats {
            count,
            mean: total / count as f64,
            p99,
            max: self.bins.last().map_or(0, |b| b.0),
        })
    }
}

/// The histograms of `measure` (`global`, `row`, `message_age`, `mix_age`) in `staleness.csv`, one per
/// algorithm of `algorithms` that has a nonzero count, the per-worker rows summed.
pub fn staleness_histograms(
    rows: &[StalenessRow],
    algorithms: &[String],
    measure: &str,
) -> Vec<StalenessHistogram> {
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
            (!bins.is_empty()).then(|| StalenessHistogram {
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
    /// Seconds computing, communicating, blocked, idle, down (the [`Activity::ALL`] order;
    /// down is 0 when the file has no `down_s`).
    pub seconds: [f64; 5],
    /// The same as fractions of their sum (zeros when the sum is zero).
    pub fractions: [f64; 5],
}

/// The workers of `algorithm` in `utilization.csv`, by worker id.
pub fn utilization(rows: &[UtilizationRow], algorithm: &str) -> Vec<WorkerShare> {
    let mut out: Vec<WorkerShare> = rows
        .iter()
        .filter(|r| r.algorithm == algorithm)
        .map(|r| {
            let seconds = [
                r.compute_s,
                r.communicate_s,
                r.blocked_s,
                r.idle_s,
                r.down_s.unwrap_or(0.0),
            ];
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
    /// Messages faults touched on this worker (`faults.csv`), by time.
    pub marks: Vec<(f64, FaultMarkKind)>,
}

/// How a Gantt chart marks a message a fault touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultMarkKind {
    /// Lost at random or on a down link (at its sender), or dropped at its down receiver.
    Lost,
    /// Duplicated or delayed (at its sender).
    Disturbed,
}

/// Puts the rows of `faults` of `algorithm` on the lanes of their nodes (the others, such as a
/// parameter server's shards, have no lane).
pub fn attach_fault_marks(lanes: &mut [Lane], faults: &[FaultRow], algorithm: &str) {
    for f in faults.iter().filter(|f| f.algorithm == algorithm) {
        let kind = match f.event.as_str() {
            "lost" | "lost-link-down" | "dropped-down" => FaultMarkKind::Lost,
            _ => FaultMarkKind::Disturbed,
        };
        if let Ok(i) = lanes.binary_search_by_key(&f.node, |l| l.worker) {
            lanes[i].marks.push((f.time_s, kind));
        }
    }
    for lane in lanes {
        lane.marks.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
}

/// The lanes of `algorithm` in `timeline.csv`, by worker id; empty intervals are dropped.
pub fn timeline_lanes(rows: &[TimelineRow], algorithm: &str) -> Vec<Lane> {
    let mut lanes: std::collections::BTreeMap<u64, Vec<(Activity, f64, f64)>> = Default::default();
    for r in rows.iter().filter(|r| r.algorithm == algorithm) {
        if r.end_s > r.start_s {
            lanes
                .entry(r.worker)
                .or_default()
                .push((r.activity, r.start_s, r.end_s));
        }
    }
    lanes
        .into_iter()
        .map(|(worker, mut intervals)| {
            intervals.sort_by(|a, b| a.1.total_cmp(&b.1));
            Lane {
                worker,
                intervals,
                marks: Vec::new(),
            }
        })
        .collect()
}

/// The most rows a Gantt chart has: with more workers, [`sample_lanes`] picks this many.
pub const GANTT_MAX_ROWS: usize = 32;

/// The most workers the per-worker bar charts (`steps`, `utilization`) draw one bar each;
/// beyond it, consecutive workers share a bar ([`worker_bin`]).
pub const PER_WORKER_BARS: usize = 64;

/// The rows of a Gantt chart: the lanes shown, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct LaneSample {
    /// The lanes shown, by worker id.
    pub lanes: Vec<Lane>,
    /// How many workers the timeline has.
    pub total: usize,
    /// The slowest workers shown, slowest first; empty when every worker is shown.
    pub slowest: Vec<u64>,
    /// The fastest workers shown, fastest first; empty when every worker is shown.
    pub fastest: Vec<u64>,
}

impl LaneSample {
    /// Every worker is shown.
    pub fn is_complete(&self) -> bool {
        self.lanes.len() == self.total
    }

    /// Which workers are shown, as a phrase for a chart's note, e.g. `32 of 1,024 workers: the 4
    /// slowest (5, 17, 300, 901), the 4 fastest (…) by local steps and an even sample of the
    /// rest, in worker order`; `one row per worker` when every worker is shown. `by` names what
    /// the workers were ranked by.
    pub fn describe(&self, by: &str) -> String {
        if self.is_complete() {
            return "one row per worker".into();
        }
        let shown = format!(
            "{} of {} workers",
            thousands(self.lanes.len() as u64),
            thousands(self.total as u64)
        );
        let group = |which: &str, workers: &[u64]| {
            let ids = workers
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            match workers.len() {
                0 => None,
                1 => Some(format!("the {which} ({ids})")),
                n => Some(format!("the {n} {which} ({ids})")),
            }
        };
        let extremes: Vec<String> = [
            group("slowest", &self.slowest),
            group("fastest", &self.fastest),
        ]
        .into_iter()
        .flatten()
        .collect();
        if extremes.is_empty() {
            format!("{shown}, an even sample (all equally fast by {by}), in worker order")
        } else {
            format!(
                "{shown}: {} by {by}, and an even sample of the rest, in worker order",
                extremes.join(", ")
            )
        }
    }
}

/// Picks the rows of a Gantt chart: every lane when there are at most `max_rows`, else
/// `max_rows` of them, in worker order: up to `max_rows / 8` slowest workers, up to
/// `max_rows / 8` fastest, and an even sample of the others that includes the first and the
/// last of them.
///
/// `speed` gives a lane's `(steps, seconds per step)`: fewer steps is slower, and at equal
/// steps more seconds per step (e.g. all-reduce, where every worker takes the same steps and
/// the straggler computes longest). Ties go to the lower worker id. A worker counts as slowest
/// (fastest) only when it is slower (faster) than the median worker: when all are equally fast,
/// the rows are an even sample.
pub fn sample_lanes(
    lanes: Vec<Lane>,
    speed: impl Fn(&Lane) -> (u64, f64),
    max_rows: usize,
) -> LaneSample {
    let total = lanes.len();
    let max_rows = max_rows.max(1);
    if total <= max_rows {
        return LaneSample {
            lanes,
            total,
            slowest: Vec::new(),
            fastest: Vec::new(),
        };
    }
    let speeds: Vec<(u64, f64)> = lanes.iter().map(speed).collect();
    // Slowest first: fewest steps, then most seconds per step.
    let slower = |a: usize, b: usize| {
        speeds[a]
            .0
            .cmp(&speeds[b].0)
            .then(speeds[b].1.total_cmp(&speeds[a].1))
    };
    let mut order: Vec<usize> = (0..total).collect();
    order.sort_by(|&a, &b| slower(a, b).then(lanes[a].worker.cmp(&lanes[b].worker)));
    let median = order[total / 2];
    let extremes = max_rows / 8;
    let slowest: Vec<usize> = order
        .iter()
        .copied()
        .take_while(|&i| slower(i, median).is_lt())
        .take(extremes)
        .collect();
    order.sort_by(|&a, &b| slower(b, a).then(lanes[a].worker.cmp(&lanes[b].worker)));
    let fastest: Vec<usize> = order
        .iter()
        .copied()
        .take_while(|&i| slower(i, median).is_gt())
        .take(extremes)
        .collect();
    let mut chosen = vec![false; total];
    for &i in slowest.iter().chain(&fastest) {
        chosen[i] = true;
    }
    let rest: Vec<usize> = (0..total).filter(|&i| !chosen[i]).collect();
    let wanted = max_rows - slowest.len() - fastest.len();
    // `rest` has more lanes than `wanted` (total > max_rows): spread the picks over it, ends
    // included.
    let m = rest.len();
    for j in 0..wanted {
        let k = if wanted == 1 {
            m / 2
        } else {
            (j * (m - 1) + (wanted - 1) / 2) / (wanted - 1)
        };
        chosen[rest[k]] = true;
    }
    let worker = |i: &usize| lanes[*i].worker;
    let (slowest, fastest) = (
        slowest.iter().map(worker).collect(),
        fastest.iter().map(worker).collect(),
    );
    LaneSample {
        lanes: lanes
            .into_iter()
            .zip(chosen)
            .filter_map(|(lane, keep)| keep.then_some(lane))
            .collect(),
        total,
        slowest,
        fastest,
    }
}

/// How many consecutive workers share one bar in a per-worker bar chart of `workers` workers
/// and `series` bars per group: 1 (one bar per worker) up to [`PER_WORKER_BARS`] workers, else
/// as many as keep the chart to at most 64 groups (fewer with many series: about 128 bars in
/// all, at least 16 groups).
pub fn worker_bin(workers: usize, series: usize) -> usize {
    if workers <= PER_WORKER_BARS {
        1
    } else {
        workers.div_ceil((128 / series.max(1)).clamp(16, 64))
    }
}

/// One bar of a binned per-worker chart: the finite values of `bin` consecutive workers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BinStat {
    /// Their mean.
    pub mean: f64,
    /// The smallest.
    pub min: f64,
    /// The largest.
    pub max: f64,
}

/// `values` (one per worker, NaN for "none") cut into runs of `bin` consecutive workers (the
/// last may be shorter): mean, min and max of each run's finite values, `None` for a run
/// without any.
pub fn bin_stats(values: &[f64], bin: usize) -> Vec<Option<BinStat>> {
    values
        .chunks(bin.max(1))
        .map(|chunk| {
            let finite = chunk.iter().copied().filter(|v| v.is_finite());
            let n = finite.clone().count();
            (n > 0).then(|| BinStat {
                mean: finite.clone().sum::<f64>() / n as f64,
                min: finite.clone().fold(f64::INFINITY, f64::min),
                max: finite.fold(f64::NEG_INFINITY, f64::max),
            })
        })
        .collect()
}

/// `fractions` (one per worker, in [`Activity::ALL`] order) cut into runs of `bin` consecutive
/// workers: the mean of each run's fractions (still summing to 1 when each worker's do).
pub fn bin_fractions(fractions: &[[f64; 5]], bin: usize) -> Vec<[f64; 5]> {
    fractions
        .chunks(bin.max(1))
        .map(|chunk| {
            let mut mean = [0.0; 5];
            for f in chunk {
                for (m, v) in mean.iter_mut().zip(f) {
                    *m += v;
                }
            }
            mean.map(|m| m / chunk.len() as f64)
        })
        .collect()
}

/// An integer with commas between groups of three digits: `1,024`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p99_is_nearest_rank() {
        let h = StalenessHistogram {
            algorithm: "a".into(),
            bins: vec![(0, 98), (5, 1), (9, 1)],
        };
        // 100 values: rank 99 is the first 5.
        let s = h.stats().unwrap();
        assert_eq!((s.count, s.p99, s.max), (100, 5, 9));
        assert!((s.mean - 0.14).abs() < 1e-12);
        let h = StalenessHistogram {
            algorithm: "a".into(),
            bins: vec![(3, 1)],
        };
        assert_eq!(h.stats().unwrap().p99, 3);
        let h = StalenessHistogram {
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

    fn lanes(n: u64) -> Vec<Lane> {
        (0..n)
            .map(|worker| Lane {
                worker,
                intervals: vec![(Activity::Compute, 0.0, 1.0)],
                marks: Vec::new(),
            })
            .collect()
    }

    #[test]
    fn few_lanes_are_all_shown() {
        let sample = sample_lanes(lanes(8), |l| (l.worker, 1.0), GANTT_MAX_ROWS);
        assert!(sample.is_complete());
        assert_eq!(sample.lanes, lanes(8));
        assert_eq!(sample.describe("steps"), "one row per worker");
    }

    #[test]
    fn many_lanes_keep_the_extremes_and_an_even_sample() {
        // Worker 700 is the slowest, then 5; 3 and 1000 the fastest.
        let steps = |l: &Lane| match l.worker {
            700 => (10, 1.0),
            5 => (11, 1.0),
            3 | 1000 => (99, 1.0),
            w => (50 + w % 7, 1.0),
        };
        let sample = sample_lanes(lanes(1024), steps, 32);
        assert_eq!(sample.lanes.len(), 32);
        assert_eq!(sample.total, 1024);
        let shown: Vec<u64> = sample.lanes.iter().map(|l| l.worker).collect();
        assert!(shown.windows(2).all(|w| w[0] < w[1]), "worker order");
        assert_eq!(sample.slowest, [700, 5, 0, 7]);
        assert_eq!(sample.fastest, [3, 1000, 6, 13]);
        for w in sample.slowest.iter().chain(&sample.fastest) {
            assert!(shown.contains(w), "{w}");
        }
        assert!(shown.contains(&1023), "the sample spans the workers");
        let note = sample.describe("local steps");
        assert_eq!(
            note,
            "32 of 1,024 workers: the 4 slowest (700, 5, 0, 7), the 4 fastest (3, 1000, 6, 13) \
             by local steps, and an even sample of the rest, in worker order"
        );
    }

    #[test]
    fn at_equal_steps_the_longest_steps_are_the_slowest() {
        // All-reduce: every worker takes 100 steps; worker 40 computes 4x longer.
        let speed = |l: &Lane| (100, if l.worker == 40 { 0.4 } else { 0.1 });
        let sample = sample_lanes(lanes(100), speed, 10);
        assert_eq!(sample.slowest, [40]);
        assert!(
            sample.fastest.is_empty(),
            "nobody is faster than the median"
        );
        assert!(sample.lanes.iter().any(|l| l.worker == 40));
        assert!(
            sample
                .describe("steps")
                .starts_with("10 of 100 workers: the slowest (40) by steps, and an even sample")
        );
    }

    #[test]
    fn equal_speeds_give_an_even_sample() {
        let sample = sample_lanes(lanes(100), |_| (7, 1.0), 10);
        let shown: Vec<u64> = sample.lanes.iter().map(|l| l.worker).collect();
        assert_eq!(shown, [0, 11, 22, 33, 44, 55, 66, 77, 88, 99]);
        assert!(sample.slowest.is_empty() && sample.fastest.is_empty());
        assert_eq!(
            sample.describe("steps"),
            "10 of 100 workers, an even sample (all equally fast by steps), in worker order"
        );
    }

    #[test]
    fn bins_summarize_consecutive_workers() {
        assert_eq!(worker_bin(8, 4), 1);
        assert_eq!(worker_bin(64, 1), 1);
        assert_eq!(worker_bin(1024, 1), 16);
        assert_eq!(worker_bin(1024, 4), 32);
        assert_eq!(worker_bin(1024, 16), 64);
        let stats = bin_stats(&[1.0, 3.0, f64::NAN, f64::NAN, 5.0], 2);
        assert_eq!(
            stats,
            [
                Some(BinStat {
                    mean: 2.0,
                    min: 1.0,
                    max: 3.0
                }),
                None,
                Some(BinStat {
                    mean: 5.0,
                    min: 5.0,
                    max: 5.0
                })
            ]
        );
        let f = bin_fractions(&[[1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.5, 0.0, 0.0, 0.5]], 2);
        assert_eq!(f, [[0.5, 0.25, 0.0, 0.0, 0.25]]);
        assert_eq!(thousands(1024), "1,024");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000_000), "1,000,000");
    }
}
