//! The metric set an expectation may name: one table ([`METRICS`]), with each metric's unit,
//! the algorithms that define it, what the scenario must enable for it, and where its value is
//! read from in a run directory. The book's table (chapter "Testing claims") is rendered from
//! it by [`markdown_table`] and tested against it.
//!
//! Three shapes:
//!
//! - **scalars** of `summary.json` (`global_staleness.max`, `final_loss`, `utilization.blocked`, …):
//!   one number per run;
//! - **time series** of `metrics.csv` and `series.csv` (`loss`, `consensus`,
//!   `pushsum_weight.min`, …): one number per evaluation point, reduced by the expectation's
//!   `over` (`final`, `max`, `min`, `mean`) or `at`;
//! - **per-worker** scalars (`worker[5].steps_per_sim_s`, `worker[5].global_staleness.mean`), read from
//!   `utilization.csv` and `staleness.csv`.

use crate::rundir::{AlgorithmSummary, IntStats, MetricRow};

/// What a scenario must enable or have for a metric to be measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// A model with accuracy (classification).
    Accuracy,
    /// A model that knows its optimum `f*`: the quadratic, linear least squares, softmax
    /// regression with `l2 > 0`.
    Optimum,
    /// `[metrics] target_accuracy`.
    TargetAccuracy,
    /// `[metrics] target_loss`.
    TargetLoss,
    /// `[metrics] eval_replicas = true`.
    ReplicaEval,
    /// A model trained for real: not `kind = "timing"`, which computes no loss.
    Numerics,
    /// `[metrics] link_peaks = true`.
    LinkPeaks,
}

impl Needs {
    /// The requirement in words, for errors and the book.
    pub fn describe(self) -> &'static str {
        match self {
            Needs::Accuracy => "a model with accuracy (classification)",
            Needs::Optimum => {
                "a model that knows its optimum (quadratic, linear, softmax with l2 > 0)"
            }
            Needs::TargetAccuracy => "`[metrics] target_accuracy`",
            Needs::TargetLoss => "`[metrics] target_loss`",
            Needs::ReplicaEval => "`[metrics] eval_replicas = true`",
            Needs::LinkPeaks => "`[metrics] link_peaks = true`",
            Needs::Numerics => "a model trained for real (a `timing` model computes no loss)",
        }
    }
}

/// One number per run, or one per evaluation point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// One number per run (`summary.json`, or a per-worker table).
    Scalar,
    /// One number per evaluation point (`metrics.csv`, `series.csv`).
    Series,
}

/// The data of one worker of one algorithm: its row of `utilization.csv` and its histograms
/// of `staleness.csv`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkerData {
    /// The run's simulated time, in seconds (`summary.json`'s `sim_time_s`).
    pub sim_time_s: f64,
    /// Its row of `utilization.csv`: steps, then seconds in compute, communicate, blocked, idle
    /// and down (0 without `down_s`); `None` when the file has no row for it.
    pub utilization: Option<(u64, [f64; 5])>,
    /// Global staleness histogram: `(value, count)` by increasing value.
    pub global_staleness: Vec<(u64, u64)>,
    /// Row staleness histogram: `(value, count)` by increasing value.
    pub row_staleness: Vec<(u64, u64)>,
    /// Message-age histogram (as receiver): `(value, count)` by increasing value.
    pub message_age: Vec<(u64, u64)>,
}

/// A value as read: a number (`+∞` for a target that was not reached), or why there is none.
pub type Reading = Result<f64, String>;

/// How a metric's value is read.
#[derive(Clone, Copy)]
pub(crate) enum Source {
    /// From the algorithm's entry of `summary.json`.
    Summary(fn(&AlgorithmSummary) -> Reading),
    /// A column of `metrics.csv`.
    Metrics(fn(&MetricRow) -> Option<f64>),
    /// A name of `series.csv`.
    Series(&'static str),
    /// From one worker's data.
    Worker(fn(&WorkerData) -> Reading),
}

/// One metric of the set.
#[derive(Clone, Copy)]
pub struct MetricDef {
    /// Its name (per-worker metrics as `worker[i].…`).
    pub name: &'static str,
    /// Its unit.
    pub unit: &'static str,
    /// The measurement it reads, which only the algorithms that take it have (`message_age`:
    /// the ages of mixed messages; see [`Measured`]); `None`: every algorithm has it.
    pub measure: Option<&'static str>,
    /// What the scenario must have for it to be measured.
    pub needs: &'static [Needs],
    /// What it is, and where it is read from.
    pub meaning: &'static str,
    pub(crate) source: Source,
}

impl std::fmt::Debug for MetricDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricDef")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl PartialEq for MetricDef {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl MetricDef {
    /// Scalar or time series.
    pub fn shape(&self) -> Shape {
        match self.source {
            Source::Metrics(_) | Source::Series(_) => Shape::Series,
            Source::Summary(_) | Source::Worker(_) => Shape::Scalar,
        }
    }

    /// Whether it is one of the `worker[i].…` metrics.
    pub fn per_worker(&self) -> bool {
        matches!(self.source, Source::Worker(_))
    }

    /// Whether an algorithm of kind `kind` defines it: it takes the metric's measurement, as
    /// `measured` says.
    pub fn defined_for(&self, kind: &str, measured: &Measured) -> bool {
        self.measure
            .is_none_or(|m| measured.iter().any(|(k, ms)| *k == kind && ms.contains(&m)))
    }

    /// The kinds that define it, in words: `every algorithm`, or `sgp, overlap-sgp`.
    pub fn defined_for_text(&self, measured: &Measured) -> String {
        match self.measure {
            None => "every algorithm".into(),
            Some(m) => measured
                .iter()
                .filter(|(_, ms)| ms.contains(&m))
                .map(|(k, _)| *k)
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// A metric as an expectation names it: its definition, and the worker for a per-worker one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MetricRef {
    /// The definition.
    pub def: &'static MetricDef,
    /// The worker of a `worker[i].…` metric.
    pub worker: Option<usize>,
}

impl std::fmt::Display for MetricRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.worker {
            Some(w) => write!(f, "worker[{w}]{}", &self.def.name["worker[i]".len()..]),
            None => f.write_str(self.def.name),
        }
    }
}

/// The names of the row staleness before the global measure existed: `staleness.…` and
/// `worker[i].staleness.…` are read as `row_staleness.…`.
const LEGACY_STALENESS: &str = "staleness.";

/// Finds the metric `name` (`global_staleness.max`, `worker[5].steps_per_sim_s`). The old
/// names of the row staleness, `staleness.…` and `worker[i].staleness.…`, find
/// `row_staleness.…`.
pub fn lookup(name: &str) -> Option<MetricRef> {
    if let Some(stat) = name.strip_prefix(LEGACY_STALENESS) {
        return lookup(&format!("row_{LEGACY_STALENESS}{stat}"));
    }
    if let Some((head, stat)) = name.split_once(&format!("].{LEGACY_STALENESS}"))
        && head.starts_with("worker[")
    {
        return lookup(&format!("{head}].row_{LEGACY_STALENESS}{stat}"));
    }
    if let Some(rest) = name.strip_prefix("worker[") {
        let (index, tail) = rest.split_once(']')?;
        if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let worker = index.parse().ok()?;
        let def = METRICS
            .iter()
            .find(|d| d.per_worker() && &d.name["worker[i]".len()..] == tail)?;
        return Some(MetricRef {
            def,
            worker: Some(worker),
        });
    }
    METRICS
        .iter()
        .find(|d| !d.per_worker() && d.name == name)
        .map(|def| MetricRef { def, worker: None })
}

/// The metric names closest to `name` (by edit distance), for "did you mean" hints.
pub fn suggest(name: &str) -> Option<&'static str> {
    let generic = if name.starts_with("worker[") {
        name.split_once(']')
            .map_or(name.to_string(), |(_, t)| format!("worker[i]{t}"))
    } else {
        name.to_string()
    };
    // Each metric by its name and, for the row staleness, by its old name too (a typo of the
    // old name suggests the new one).
    METRICS
        .iter()
        .flat_map(|d| {
            let old = d
                .name
                .contains("row_staleness.")
                .then(|| d.name.replace("row_staleness.", LEGACY_STALENESS));
            std::iter::once(d.name.to_string())
                .chain(old)
                .map(move |n| (n, d.name))
        })
        .map(|(n, m)| (edit_distance(&generic, &n), n.len(), m))
        .filter(|&(d, len, _)| d <= 3.max(len / 4))
        .min_by_key(|&(d, _, _)| d)
        .map(|(_, _, m)| m)
}

/// Levenshtein distance, in characters.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// Which algorithm kinds take which measurements beyond every algorithm's: `(kind, measures)`
/// for every kind of the algorithm registry, in its order. The registry owns this knowledge
/// (`dasim_sim::algorithms::AlgorithmKind::declarations`); the binary hands it over in
/// [`super::Facts::measured`].
pub type Measured = [(&'static str, &'static [&'static str])];

/// The measurement of the ages of mixed messages (push-sum's bounded delay).
const MESSAGE_AGE: Option<&str> = Some("message_age");
/// The measurement of the push-sum weights.
const PUSH_SUM_WEIGHT: Option<&str> = Some("pushsum_weight");
/// The measurement of the staleness between models (DASGD's).
const MODEL_STALENESS: Option<&str> = Some("model_staleness");

fn stat(s: Option<IntStats>, f: fn(&IntStats) -> f64, what: &str) -> Reading {
    s.as_ref()
        .map(f)
        .ok_or_else(|| format!("no {what} was measured"))
}

fn finite(x: f64, what: &str) -> Reading {
    if x.is_nan() {
        Err(format!("{what} was not measured"))
    } else {
        Ok(x)
    }
}

/// `(count, mean, p99, max)` of a histogram, with the nearest-rank p99 of `summary.json`.
fn hist_stats(h: &[(u64, u64)]) -> Option<(u64, f64, u64, u64)> {
    let count: u64 = h.iter().map(|&(_, c)| c).sum();
    if count == 0 {
        return None;
    }
    let sum: u128 = h.iter().map(|&(v, c)| u128::from(v) * u128::from(c)).sum();
    let rank = ((0.99 * count as f64).ceil() as u64).max(1);
    let mut seen = 0;
    let mut p99 = 0;
    for &(v, c) in h {
        seen += c;
        if seen >= rank {
            p99 = v;
            break;
        }
    }
    let max = h.iter().map(|&(v, _)| v).max().unwrap_or(0);
    Some((count, sum as f64 / count as f64, p99, max))
}

fn worker_hist(h: &[(u64, u64)], pick: fn((u64, f64, u64, u64)) -> f64, what: &str) -> Reading {
    hist_stats(h)
        .map(pick)
        .ok_or_else(|| format!("the worker has no {what}"))
}

fn worker_share(w: &WorkerData, k: usize) -> Reading {
    let (_, t) = w
        .utilization
        .ok_or("utilization.csv has no row for the worker")?;
    let total: f64 = t.iter().sum();
    if total > 0.0 {
        Ok(t[k] / total)
    } else {
        Err("the worker's time is zero".into())
    }
}

macro_rules! m {
    ($name:literal, $unit:literal, $measure:expr, $needs:expr, $source:expr, $meaning:literal) => {
        MetricDef {
            name: $name,
            unit: $unit,
            measure: $measure,
            needs: $needs,
            meaning: $meaning,
            source: $source,
        }
    };
}

/// Every metric an expectation may name, in the order the book lists them.
pub static METRICS: &[MetricDef] = &[
    // Throughput and budget (summary.json).
    m!(
        "sim_time_s",
        "s",
        None,
        &[],
        Source::Summary(|r| finite(r.sim_time_s, "the time")),
        "simulated time at the stop"
    ),
    m!(
        "worker_steps",
        "steps",
        None,
        &[],
        Source::Summary(|r| Ok(r.worker_steps as f64)),
        "gradients applied, summed over workers"
    ),
    m!(
        "steps_per_sim_s",
        "steps/s",
        None,
        &[],
        Source::Summary(|r| finite(r.steps_per_sim_s, "the throughput")),
        "`worker_steps / sim_time_s`: throughput in simulated time"
    ),
    m!(
        "epochs",
        "epochs",
        None,
        &[],
        Source::Summary(|r| finite(r.epochs, "epochs")),
        "samples processed / training-set size"
    ),
    m!(
        "messages",
        "messages",
        None,
        &[],
        Source::Summary(|r| Ok(r.messages as f64)),
        "messages sent"
    ),
    m!(
        "bytes",
        "bytes",
        None,
        &[],
        Source::Summary(|r| Ok(r.bytes as f64)),
        "bytes sent, summed over messages"
    ),
    m!(
        "bytes_per_step",
        "bytes",
        None,
        &[],
        Source::Summary(|r| {
            if r.worker_steps == 0 {
                return Err("no worker took a step".into());
            }
            Ok(r.bytes as f64 / r.worker_steps as f64)
        }),
        "`bytes / worker_steps`: bytes sent per worker step (compressed sizes where messages are compressed)"
    ),
    // Convergence at the stop (summary.json).
    m!(
        "final_loss",
        "as `loss`",
        None,
        &[Needs::Numerics],
        Source::Summary(|r| finite(r.final_loss, "the loss")),
        "held-out loss of the evaluated model at the last evaluation point"
    ),
    m!(
        "final_accuracy",
        "fraction",
        None,
        &[Needs::Accuracy],
        Source::Summary(|r| finite(r.final_accuracy, "the accuracy")),
        "held-out accuracy at the last evaluation point"
    ),
    m!(
        "final_perplexity",
        "exp(nats per token)",
        None,
        &[Needs::Numerics],
        Source::Summary(|r| r
            .final_perplexity
            .ok_or_else(|| "not a language model: perplexity is a transformer's on text".into())),
        "a language model's held-out perplexity `exp(final_loss)` at the last evaluation point"
    ),
    m!(
        "final_suboptimality",
        "as the objective",
        None,
        &[Needs::Optimum],
        Source::Summary(|r| r
            .final_suboptimality
            .ok_or_else(|| "the suboptimality was not measured".into())),
        "`f(x) − f*` of the training objective at the last evaluation point"
    ),
    m!(
        "final_consensus",
        "squared parameter norm",
        None,
        &[Needs::Numerics],
        Source::Summary(|r| finite(r.final_consensus, "the consensus distance")),
        "consensus distance `(1/n) Σ ‖x_i − x̄‖²` at the last evaluation point"
    ),
    m!(
        "time_to_target.accuracy_s",
        "s",
        None,
        &[Needs::Accuracy, Needs::TargetAccuracy],
        Source::Summary(|r| Ok(r.time_to_target.accuracy_s.unwrap_or(f64::INFINITY))),
        "first evaluation time with accuracy ≥ `target_accuracy`; `+∞` when not reached"
    ),
    m!(
        "time_to_target.loss_s",
        "s",
        None,
        &[Needs::Numerics, Needs::TargetLoss],
        Source::Summary(|r| Ok(r.time_to_target.loss_s.unwrap_or(f64::INFINITY))),
        "first evaluation time with loss ≤ `target_loss`; `+∞` when not reached"
    ),
    // Staleness (summary.json).
    m!(
        "global_staleness.count",
        "applications",
        None,
        &[],
        Source::Summary(|r| Ok(r.global_staleness.map_or(0.0, |s| s.count as f64))),
        "applications of a gradient whose staleness was measured"
    ),
    m!(
        "global_staleness.mean",
        "iterations",
        None,
        &[],
        Source::Summary(|r| stat(r.global_staleness, |s| s.mean, "global staleness")),
        "mean global staleness: global iterations (gradients applied anywhere, each once) between a gradient's read and its application; compare with AD-PSGD's `T` and A-PSGD's `τ`"
    ),
    m!(
        "global_staleness.p99",
        "iterations",
        None,
        &[],
        Source::Summary(|r| stat(r.global_staleness, |s| s.p99 as f64, "global staleness")),
        "99th percentile (nearest rank) of the global staleness"
    ),
    m!(
        "global_staleness.max",
        "iterations",
        None,
        &[],
        Source::Summary(|r| stat(r.global_staleness, |s| s.max as f64, "global staleness")),
        "largest global staleness of an applied gradient"
    ),
    m!(
        "row_staleness.count",
        "applications",
        None,
        &[],
        Source::Summary(|r| Ok(r.row_staleness.map_or(0.0, |s| s.count as f64))),
        "applications of a gradient whose row staleness was measured"
    ),
    m!(
        "row_staleness.mean",
        "updates",
        None,
        &[],
        Source::Summary(|r| stat(r.row_staleness, |s| s.mean, "row staleness")),
        "mean row staleness: updates of the target row between a gradient's read and its application (`staleness.mean` before the global measure existed)"
    ),
    m!(
        "row_staleness.p99",
        "updates",
        None,
        &[],
        Source::Summary(|r| stat(r.row_staleness, |s| s.p99 as f64, "row staleness")),
        "99th percentile (nearest rank) of the row staleness"
    ),
    m!(
        "row_staleness.max",
        "updates",
        None,
        &[],
        Source::Summary(|r| stat(r.row_staleness, |s| s.max as f64, "row staleness")),
        "largest row staleness of an applied gradient"
    ),
    m!(
        "message_age.count",
        "messages",
        MESSAGE_AGE,
        &[],
        Source::Summary(|r| Ok(r.message_age.map_or(0.0, |s| s.count as f64))),
        "mixed messages whose age was measured"
    ),
    m!(
        "message_age.mean",
        "iterations",
        MESSAGE_AGE,
        &[],
        Source::Summary(|r| stat(r.message_age, |s| s.mean, "message age")),
        "mean age of the mixed messages"
    ),
    m!(
        "message_age.p99",
        "iterations",
        MESSAGE_AGE,
        &[],
        Source::Summary(|r| stat(r.message_age, |s| s.p99 as f64, "message age")),
        "99th percentile (nearest rank) of the message age"
    ),
    m!(
        "message_age.max",
        "iterations",
        MESSAGE_AGE,
        &[],
        Source::Summary(|r| stat(r.message_age, |s| s.max as f64, "message age")),
        "oldest mixed message"
    ),
    m!(
        "mix_age.mean",
        "iterations",
        MESSAGE_AGE,
        &[],
        Source::Summary(|r| stat(r.mix_age, |s| s.mean, "mix age")),
        "mean over mixing steps of the age of the oldest message mixed in"
    ),
    m!(
        "mix_age.max",
        "iterations",
        MESSAGE_AGE,
        &[],
        Source::Summary(|r| stat(r.mix_age, |s| s.max as f64, "mix age")),
        "oldest information a node mixed in at one step (equals `message_age.max`)"
    ),
    m!(
        "dasgd.s_avg",
        "gradients",
        MODEL_STALENESS,
        &[],
        Source::Summary(|r| r
            .model_staleness
            .map(|d| d.mean)
            .ok_or_else(|| "DASGD measured no staleness".into())),
        "DASGD's `S_avg`: mean staleness between models over every application"
    ),
    m!(
        "dasgd.s_max",
        "gradients",
        MODEL_STALENESS,
        &[],
        Source::Summary(|r| r
            .model_staleness
            .map(|d| d.max as f64)
            .ok_or_else(|| "DASGD measured no staleness".into())),
        "DASGD's `S_max`: largest staleness between models"
    ),
    // Where the time went (summary.json).
    m!(
        "utilization.compute",
        "fraction",
        None,
        &[],
        Source::Summary(|r| finite(r.utilization.compute, "utilization")),
        "share of worker-time computing, averaged over workers"
    ),
    m!(
        "utilization.communicate",
        "fraction",
        None,
        &[],
        Source::Summary(|r| finite(r.utilization.communicate, "utilization")),
        "share of worker-time waiting on its own transfers"
    ),
    m!(
        "utilization.blocked",
        "fraction",
        None,
        &[],
        Source::Summary(|r| finite(r.utilization.blocked, "utilization")),
        "share of worker-time waiting for a peer"
    ),
    m!(
        "utilization.idle",
        "fraction",
        None,
        &[],
        Source::Summary(|r| finite(r.utilization.idle, "utilization")),
        "share of worker-time with nothing to do"
    ),
    // Time series (metrics.csv, series.csv).
    m!(
        "loss",
        "as `loss`",
        None,
        &[Needs::Numerics],
        Source::Metrics(|r| r.loss),
        "held-out loss of the evaluated model (`metrics.csv`)"
    ),
    m!(
        "accuracy",
        "fraction",
        None,
        &[Needs::Accuracy],
        Source::Metrics(|r| r.accuracy),
        "held-out accuracy of the evaluated model"
    ),
    m!(
        "train_loss",
        "as `loss`",
        None,
        &[Needs::Numerics],
        Source::Metrics(|r| r.train_loss),
        "running training loss (empty points skipped)"
    ),
    m!(
        "consensus",
        "squared parameter norm",
        None,
        &[Needs::Numerics],
        Source::Metrics(|r| r.consensus),
        "consensus distance"
    ),
    m!(
        "suboptimality",
        "as the objective",
        None,
        &[Needs::Optimum],
        Source::Metrics(|r| r.suboptimality),
        "`f(x) − f*` of the training objective"
    ),
    m!(
        "epoch",
        "epochs",
        None,
        &[],
        Source::Metrics(|r| r.epoch),
        "samples processed / training-set size"
    ),
    m!(
        "replica_loss.min",
        "as `loss`",
        None,
        &[Needs::Numerics, Needs::ReplicaEval],
        Source::Metrics(|r| r.replica_loss_min),
        "smallest held-out loss of a worker replica"
    ),
    m!(
        "replica_loss.mean",
        "as `loss`",
        None,
        &[Needs::Numerics, Needs::ReplicaEval],
        Source::Metrics(|r| r.replica_loss_mean),
        "mean held-out loss of the worker replicas"
    ),
    m!(
        "replica_loss.max",
        "as `loss`",
        None,
        &[Needs::Numerics, Needs::ReplicaEval],
        Source::Metrics(|r| r.replica_loss_max),
        "largest held-out loss of a worker replica"
    ),
    m!(
        "replica_accuracy.min",
        "fraction",
        None,
        &[Needs::ReplicaEval, Needs::Accuracy],
        Source::Metrics(|r| r.replica_accuracy_min),
        "smallest accuracy of a worker replica"
    ),
    m!(
        "replica_accuracy.mean",
        "fraction",
        None,
        &[Needs::ReplicaEval, Needs::Accuracy],
        Source::Metrics(|r| r.replica_accuracy_mean),
        "mean accuracy of the worker replicas"
    ),
    m!(
        "replica_accuracy.max",
        "fraction",
        None,
        &[Needs::ReplicaEval, Needs::Accuracy],
        Source::Metrics(|r| r.replica_accuracy_max),
        "largest accuracy of a worker replica"
    ),
    m!(
        "peak_link_bytes",
        "bytes",
        None,
        &[Needs::LinkPeaks],
        Source::Series("peak_link_bytes"),
        "the most bytes posted on one link (an ordered pair of nodes) between two evaluation points; `over = \"max\"` is the run's peak, the bandwidth a link must carry in bursts"
    ),
    m!(
        "pushsum_weight.min",
        "weight",
        PUSH_SUM_WEIGHT,
        &[],
        Source::Series("weight_min"),
        "smallest push-sum weight over the nodes (`series.csv`)"
    ),
    m!(
        "pushsum_weight.max",
        "weight",
        PUSH_SUM_WEIGHT,
        &[],
        Source::Series("weight_max"),
        "largest push-sum weight over the nodes"
    ),
    // Per worker (utilization.csv, staleness.csv).
    m!(
        "worker[i].steps",
        "steps",
        None,
        &[],
        Source::Worker(|w| w
            .utilization
            .map(|u| u.0 as f64)
            .ok_or_else(|| "utilization.csv has no row for the worker".into())),
        "gradients worker `i` applied (`utilization.csv`)"
    ),
    m!(
        "worker[i].steps_per_sim_s",
        "steps/s",
        None,
        &[],
        Source::Worker(|w| w
            .utilization
            .map(|u| u.0 as f64 / w.sim_time_s)
            .ok_or_else(|| "utilization.csv has no row for the worker".into())),
        "worker `i`'s steps per simulated second"
    ),
    m!(
        "worker[i].global_staleness.count",
        "applications",
        None,
        &[],
        Source::Worker(|w| Ok(hist_stats(&w.global_staleness).map_or(0.0, |s| s.0 as f64))),
        "applications of worker `i`'s gradients whose global staleness was measured (`staleness.csv`)"
    ),
    m!(
        "worker[i].global_staleness.mean",
        "iterations",
        None,
        &[],
        Source::Worker(|w| worker_hist(&w.global_staleness, |s| s.1, "applied gradient")),
        "mean global staleness of worker `i`'s gradients"
    ),
    m!(
        "worker[i].global_staleness.p99",
        "iterations",
        None,
        &[],
        Source::Worker(|w| worker_hist(&w.global_staleness, |s| s.2 as f64, "applied gradient")),
        "99th percentile of worker `i`'s global staleness"
    ),
    m!(
        "worker[i].global_staleness.max",
        "iterations",
        None,
        &[],
        Source::Worker(|w| worker_hist(&w.global_staleness, |s| s.3 as f64, "applied gradient")),
        "largest global staleness of worker `i`'s gradients"
    ),
    m!(
        "worker[i].row_staleness.count",
        "applications",
        None,
        &[],
        Source::Worker(|w| Ok(hist_stats(&w.row_staleness).map_or(0.0, |s| s.0 as f64))),
        "applications of worker `i`'s gradients whose row staleness was measured (`staleness.csv`)"
    ),
    m!(
        "worker[i].row_staleness.mean",
        "updates",
        None,
        &[],
        Source::Worker(|w| worker_hist(&w.row_staleness, |s| s.1, "applied gradient")),
        "mean row staleness of worker `i`'s gradients"
    ),
    m!(
        "worker[i].row_staleness.p99",
        "updates",
        None,
        &[],
        Source::Worker(|w| worker_hist(&w.row_staleness, |s| s.2 as f64, "applied gradient")),
        "99th percentile of worker `i`'s row staleness"
    ),
    m!(
        "worker[i].row_staleness.max",
        "updates",
        None,
        &[],
        Source::Worker(|w| worker_hist(&w.row_staleness, |s| s.3 as f64, "applied gradient")),
        "largest row staleness of worker `i`'s gradients"
    ),
    m!(
        "worker[i].message_age.mean",
        "iterations",
        MESSAGE_AGE,
        &[],
        Source::Worker(|w| worker_hist(&w.message_age, |s| s.1, "mixed message")),
        "mean age of the messages worker `i` mixed"
    ),
    m!(
        "worker[i].message_age.max",
        "iterations",
        MESSAGE_AGE,
        &[],
        Source::Worker(|w| worker_hist(&w.message_age, |s| s.3 as f64, "mixed message")),
        "oldest message worker `i` mixed"
    ),
    m!(
        "worker[i].utilization.compute",
        "fraction",
        None,
        &[],
        Source::Worker(|w| worker_share(w, 0)),
        "share of worker `i`'s time computing"
    ),
    m!(
        "worker[i].utilization.communicate",
        "fraction",
        None,
        &[],
        Source::Worker(|w| worker_share(w, 1)),
        "share of worker `i`'s time communicating"
    ),
    m!(
        "worker[i].utilization.blocked",
        "fraction",
        None,
        &[],
        Source::Worker(|w| worker_share(w, 2)),
        "share of worker `i`'s time blocked"
    ),
    m!(
        "worker[i].utilization.idle",
        "fraction",
        None,
        &[],
        Source::Worker(|w| worker_share(w, 3)),
        "share of worker `i`'s time idle"
    ),
];

/// The metric set as a Markdown table: name, unit, shape, the algorithms that define it (as
/// `measured` says), what it needs, and its meaning. The book's chapter "Testing claims" holds
/// exactly this text for the algorithm registry's declarations.
pub fn markdown_table(measured: &Measured) -> String {
    let mut out = String::from(
        "| metric | unit | shape | defined for | needs | meaning |\n|---|---|---|---|---|---|\n",
    );
    for d in METRICS {
        let shape = match d.shape() {
            Shape::Scalar if d.per_worker() => "per worker",
            Shape::Scalar => "scalar",
            Shape::Series => "series",
        };
        let needs = if d.needs.is_empty() {
            String::new()
        } else {
            d.needs
                .iter()
                .map(|n| n.describe())
                .collect::<Vec<_>>()
                .join("; ")
        };
        out.push_str(&format!(
            "| `{}` | {} | {shape} | {} | {needs} | {} |\n",
            d.name,
            d.unit,
            d.defined_for_text(measured),
            d.meaning
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        for (i, d) in METRICS.iter().enumerate() {
            assert!(
                METRICS[..i].iter().all(|e| e.name != d.name),
                "{} twice",
                d.name
            );
            let name = d.name.replace("worker[i]", "worker[3]");
            let r = lookup(&name).unwrap_or_else(|| panic!("{name} not found"));
            assert_eq!(r.def.name, d.name);
            assert_eq!(r.to_string(), name);
        }
        assert_eq!(lookup("worker[12].staleness.max").unwrap().worker, Some(12));
        // The row staleness's old names.
        for (old, new) in [
            ("staleness.max", "row_staleness.max"),
            ("staleness.count", "row_staleness.count"),
            ("worker[4].staleness.mean", "worker[4].row_staleness.mean"),
        ] {
            assert_eq!(lookup(old).unwrap().to_string(), new);
        }
        assert!(lookup("staleness.maxx").is_none());
        assert!(lookup("worker[1].global_staleness.max").is_some());
        assert!(lookup("worker[].steps").is_none());
        assert!(lookup("worker[1].final_loss").is_none());
        assert!(lookup("steps").is_none());
    }

    #[test]
    fn suggestions_fix_typos() {
        assert_eq!(suggest("stalenes.mean"), Some("row_staleness.mean"));
        assert_eq!(
            suggest("worker[3].staleness.maxx"),
            Some("worker[i].row_staleness.max")
        );
        assert_eq!(suggest("global_stalenes.p99"), Some("global_staleness.p99"));
        assert_eq!(suggest("completely different"), None);
    }

    #[test]
    fn histogram_statistics_match_the_summary() {
        let h: Vec<(u64, u64)> = (1..=100).map(|v| (v, 1)).collect();
        assert_eq!(hist_stats(&h), Some((100, 50.5, 99, 100)));
        assert_eq!(hist_stats(&[]), None);
    }
}
