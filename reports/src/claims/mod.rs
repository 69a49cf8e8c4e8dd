//! Claims as regression tests: a scenario's `[[expect]]` entries, checked against what a run
//! wrote.
//!
//! An expectation names a metric of one documented set ([`metrics::METRICS`]), the algorithm it
//! is about (or none: every algorithm), a comparison and a bound, which is a number or an
//! [expression](expr) over the quantities theory papers state bounds in (`n`, `s`, `tau`, `gap`,
//! …, see [`QUANTITIES`]) and other algorithms' metrics (`allreduce.time_to_target.accuracy_s`):
//!
//! ```toml
//! [[expect]]
//! metric = "staleness.max"
//! algorithm = "adpsgd"
//! op = "<="
//! value = "2 * n"
//! note = "Lian et al. 2018: staleness stays O(n) under a bounded slowdown"
//! ```
//!
//! Checking an entry against what is known of the scenario:
//!
//! ```
//! use dasim_reports::claims::{Bound, Claim, Expect, Facts};
//!
//! let expect: Expect = toml::from_str(
//!     r#"
//! metric = "staleness.max"
//! algorithm = "adpsgd"
//! op = "<="
//! value = "2 * n"
//! "#,
//! )
//! .unwrap();
//! let facts = Facts {
//!     algorithms: vec![("adpsgd".into(), "adpsgd".into())],
//!     workers: 8,
//!     ..Facts::default()
//! };
//! let claim = Claim::new(0, &expect, &facts).unwrap();
//! assert_eq!(claim.describe(), "staleness.max <= 2 * n");
//! assert_eq!(claim.quantities(), ["n"]);
//!
//! // A typo in the bound is refused at its key and column.
//! let typo = Expect { value: Bound::Expr("2 * m".into()), ..expect };
//! let err = Claim::new(0, &typo, &facts).unwrap_err();
//! assert_eq!((err.key, err.column), ("value", Some(5)));
//! assert!(err.message.contains("unknown name `m`"));
//! ```
//!
//! This module needs no simulator. [`Expect`] is the serde type of an entry; [`Claim::new`]
//! checks it against what is known of the scenario ([`Facts`]) and reports what is wrong with
//! the field (and, inside an expression, the column) it is about ([`ClaimError`]); a
//! [`Claim`] is then evaluated against a run's results ([`RunView`], read back from the run
//! directory) with the values of the quantities ([`Quantities`]), giving one [`CheckRow`] per
//! algorithm ([`Claim::evaluate`]). Across seeds, `seeds = "all"` keeps one verdict per seed
//! and `seeds = "mean"` judges the means ([`Claim::aggregate_mean`]). [`junit`] writes the
//! verdicts of `dasim check` as JUnit XML.
//!
//! The binary computes the quantities from the scenario (the spectral gap of its topology, the
//! largest straggler factor, …) and wires the commands: `dasim run` records the verdicts in
//! `checks.csv` and `summary.json`, `dasim check` runs scenarios under several seeds and
//! exits 1 when a claim fails.

pub mod eval;
pub mod expr;
pub mod junit;
pub mod metrics;

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use eval::{Quantities, RunView, STOPPED_EARLY};
pub use metrics::{METRICS, MetricDef, MetricRef, Needs, Shape};

use crate::rundir::{CheckResult, CheckRow};
use expr::Expr;

/// One `[[expect]]` entry of a scenario: one claim.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// The metric, a name of [`metrics::METRICS`] (`staleness.max`, `worker[5].steps`).
    pub metric: String,
    /// The label of the algorithm it is about; absent: every algorithm (those that do not
    /// define the metric are skipped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<String>,
    /// The comparison.
    pub op: Op,
    /// The bound: a number, or an expression.
    pub value: Bound,
    /// For `~=`: the tolerance relative to the bound's magnitude.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rel_tol: Option<f64>,
    /// For `~=`: the absolute tolerance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abs_tol: Option<f64>,
    /// For a time series: how its evaluation points are reduced (default `final`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over: Option<Over>,
    /// For a time series, instead of `over`: the value at this simulated time, in seconds
    /// (the last evaluation point at or before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<f64>,
    /// How the claim aggregates over the seeds of `dasim check --seeds`.
    #[serde(default)]
    pub seeds: Seeds,
    /// The statement the claim encodes, shown with the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A comparison of an observed value with a bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// `<`
    #[serde(rename = "<")]
    Lt,
    /// `<=`
    #[serde(rename = "<=")]
    Le,
    /// `>`
    #[serde(rename = ">")]
    Gt,
    /// `>=`
    #[serde(rename = ">=")]
    Ge,
    /// `==`: exactly equal.
    #[serde(rename = "==")]
    Eq,
    /// `~=`: within `max(abs_tol, rel_tol · |bound|)`.
    #[serde(rename = "~=")]
    Approx,
}

impl Op {
    /// As written in a scenario.
    pub fn symbol(self) -> &'static str {
        match self {
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::Eq => "==",
            Op::Approx => "~=",
        }
    }

    /// Whether `observed op bound` holds, `tolerance` being the allowance of `~=`. A NaN on
    /// either side never holds.
    pub fn holds(self, observed: f64, bound: f64, tolerance: f64) -> bool {
        match self {
            Op::Lt => observed < bound,
            Op::Le => observed <= bound,
            Op::Gt => observed > bound,
            Op::Ge => observed >= bound,
            Op::Eq => observed == bound,
            Op::Approx => observed == bound || (observed - bound).abs() <= tolerance,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.symbol())
    }
}

/// An expectation's bound: a number, or an expression (a string).
#[derive(Clone, Debug, PartialEq)]
pub enum Bound {
    /// `value = 15`
    Number(f64),
    /// `value = "(n - 1) * s"`
    Expr(String),
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bound::Number(x) => write!(f, "{x}"),
            Bound::Expr(e) => f.write_str(e),
        }
    }
}

impl Serialize for Bound {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Bound::Number(x) => s.serialize_f64(*x),
            Bound::Expr(e) => s.serialize_str(e),
        }
    }
}

impl<'de> Deserialize<'de> for Bound {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Bound;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number, or an expression in a string such as \"2 * n\"")
            }
            fn visit_f64<E>(self, x: f64) -> Result<Bound, E> {
                Ok(Bound::Number(x))
            }
            fn visit_i64<E>(self, x: i64) -> Result<Bound, E> {
                Ok(Bound::Number(x as f64))
            }
            fn visit_u64<E>(self, x: u64) -> Result<Bound, E> {
                Ok(Bound::Number(x as f64))
            }
            fn visit_str<E>(self, s: &str) -> Result<Bound, E> {
                Ok(Bound::Expr(s.to_owned()))
            }
        }
        d.deserialize_any(V)
    }
}

/// How a time series' evaluation points are reduced to one value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Over {
    /// The last evaluation point (at the stop).
    #[default]
    Final,
    /// The largest value over the evaluation points.
    Max,
    /// The smallest.
    Min,
    /// The mean over the evaluation points.
    Mean,
}

impl Over {
    /// As written.
    pub fn name(self) -> &'static str {
        match self {
            Over::Final => "final",
            Over::Max => "max",
            Over::Min => "min",
            Over::Mean => "mean",
        }
    }
}

/// How a claim aggregates over the seeds of `dasim check --seeds`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Seeds {
    /// It must hold for every seed (one verdict per seed).
    #[default]
    All,
    /// It must hold for the mean over the seeds (one verdict).
    Mean,
}

/// The quantities a bound may name, with their meaning: the binary computes them from the
/// scenario (and the model) and hands them to [`Claim::evaluate`] in [`Quantities`].
pub const QUANTITIES: &[(&str, &str)] = &[
    ("n", "workers (`cluster.workers`)"),
    (
        "s",
        "the largest straggler factor: over the workers, the largest product of the `factor`s of the `fixed`, `markov` and `window` entries covering one worker (and a `jitter` entry's `mean`); 1 without stragglers",
    ),
    (
        "tau",
        "Overlap-SGP's delay bound τ: the algorithm's own, or the one τ of the scenario's `overlap-sgp` entries",
    ),
    (
        "gap",
        "spectral gap of the static topology's Metropolis mixing matrix, one minus its second-largest eigenvalue modulus, as `dasim inspect topology` prints it; refused (when the scenario loads) for a time-varying schedule, which has no single mixing matrix",
    ),
    (
        "degree",
        "the largest degree of the graph; for a time-varying schedule, the most peers a node sends to in one iteration, over the whole schedule (a `peers_schedule`'s later phases included)",
    ),
    ("P", "parameters per replica"),
    ("batch", "minibatch size (`data.batch_size`)"),
    (
        "step_s",
        "the smallest base step time over the workers, in seconds (before stragglers)",
    ),
];

/// The quantities as a Markdown table (name, meaning): the book's chapter "Testing claims"
/// holds exactly this text.
pub fn quantities_table() -> String {
    let mut out = String::from("| name | meaning |\n|---|---|\n");
    for (name, meaning) in QUANTITIES {
        out.push_str(&format!("| `{name}` | {meaning} |\n"));
    }
    out
}

/// What is known of a scenario when its expectations are checked, before any simulation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Facts {
    /// Every algorithm's label and kind, in scenario order.
    pub algorithms: Vec<(String, String)>,
    /// Which kinds take which measurements beyond every algorithm's ([`metrics::Measured`]):
    /// the algorithm registry's declarations, so that a metric of push-sum's message ages is
    /// known to be SGP's. Empty: no algorithm takes any.
    pub measured: Vec<(&'static str, &'static [&'static str])>,
    /// Number of workers.
    pub workers: usize,
    /// Whether the model has an accuracy; `None` when not known yet (before the data is read).
    pub accuracy: Option<bool>,
    /// Whether the model knows its optimum; `None` when not known yet.
    pub optimum: Option<bool>,
    /// `[metrics] target_accuracy` is set.
    pub target_accuracy: bool,
    /// `[metrics] target_loss` is set.
    pub target_loss: bool,
    /// `[metrics] eval_replicas` is on.
    pub eval_replicas: bool,
    /// `[metrics] link_peaks` is on.
    pub link_peaks: bool,
    /// The model is a `timing` model: it computes no loss (metrics of the loss are refused).
    pub timing_only: bool,
    /// `[run] sim_time_s`: when a series' last evaluation point is known to be.
    pub sim_time_s: Option<f64>,
    /// Quantities that cannot be given, and why: `(name, label, reason)`, `label` `None` for
    /// every algorithm (`tau` without Overlap-SGP).
    pub unavailable: Vec<(String, Option<String>, String)>,
}

impl Facts {
    fn kind_of(&self, label: &str) -> Option<&str> {
        self.algorithms
            .iter()
            .find(|(l, _)| l == label)
            .map(|(_, k)| k.as_str())
    }

    fn labels(&self) -> String {
        self.algorithms
            .iter()
            .map(|(l, _)| l.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Whether the scenario provides what `needs` requires; `None` when not known yet.
    fn provides(&self, needs: Needs) -> Option<bool> {
        match needs {
            Needs::Accuracy => self.accuracy,
            Needs::Optimum => self.optimum,
            Needs::TargetAccuracy => Some(self.target_accuracy),
            Needs::TargetLoss => Some(self.target_loss),
            Needs::ReplicaEval => Some(self.eval_replicas),
            Needs::LinkPeaks => Some(self.link_peaks),
            Needs::Numerics => Some(!self.timing_only),
        }
    }
}

/// What is wrong with an `[[expect]]` entry: the key it is about (`metric`, `value`, …), the
/// column inside an expression, the message and a hint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimError {
    /// The key of the entry that holds the bad value.
    pub key: &'static str,
    /// For an expression: the 1-based column (in characters) inside it.
    pub column: Option<usize>,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub hint: Option<String>,
}

impl ClaimError {
    fn new(key: &'static str, message: impl Into<String>) -> Self {
        ClaimError {
            key,
            column: None,
            message: message.into(),
            hint: None,
        }
    }

    fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    fn at(mut self, column: usize) -> Self {
        self.column = Some(column);
        self
    }
}

impl fmt::Display for ClaimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.key)?;
        if let Some(c) = self.column {
            write!(f, "column {c}: ")?;
        }
        f.write_str(&self.message)?;
        if let Some(h) = &self.hint {
            write!(f, " (hint: {h})")?;
        }
        Ok(())
    }
}

impl std::error::Error for ClaimError {}

/// What a name in a bound refers to.
#[derive(Clone, Debug, PartialEq)]
pub enum Ref {
    /// One of [`QUANTITIES`].
    Quantity(&'static str),
    /// A metric of an algorithm: `allreduce.time_to_target.accuracy_s`.
    Metric {
        /// The algorithm's label.
        label: String,
        /// The metric.
        metric: MetricRef,
    },
}

/// A checked expectation, ready to be evaluated against runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    /// Its index among the scenario's `[[expect]]` entries.
    pub index: usize,
    /// The entry as written.
    pub expect: Expect,
    /// The metric.
    pub metric: MetricRef,
    /// The labels it is evaluated for, in scenario order.
    pub targets: Vec<String>,
    /// The labels it skips (it applies to every algorithm and these do not define the metric),
    /// with the reason.
    pub skipped: Vec<(String, String)>,
    /// Every label it gives a verdict for, targets and skipped, in scenario order.
    pub labels: Vec<String>,
    /// The bound.
    pub bound: Expr,
    /// What each name of the bound refers to.
    pub refs: BTreeMap<String, Ref>,
}

/// An algorithm in words: `` `osgp` (overlap-sgp) ``, or just the kind when it is the label.
fn named(label: &str, kind: &str) -> String {
    if label == kind {
        kind.to_owned()
    } else {
        format!("`{label}` ({kind})")
    }
}

/// The quantity `name`, if it is one.
fn quantity(name: &str) -> Option<&'static str> {
    QUANTITIES.iter().map(|&(q, _)| q).find(|&q| q == name)
}

/// Resolves `name` as `label.metric` against the scenario's labels (the longest label that
/// fits first, since a label may contain dots).
fn metric_ref(name: &str, facts: &Facts) -> Option<(String, Option<MetricRef>)> {
    let mut labels: Vec<&str> = facts.algorithms.iter().map(|(l, _)| l.as_str()).collect();
    labels.sort_by_key(|l| std::cmp::Reverse(l.len()));
    let label = labels.into_iter().find(|l| {
        name.strip_prefix(l)
            .is_some_and(|rest| rest.starts_with('.'))
    })?;
    let rest = &name[label.len() + 1..];
    Some((label.to_owned(), metrics::lookup(rest)))
}

impl Claim {
    /// Checks expectation `index` of a scenario against what is known of the scenario:
    /// the metric exists, is defined for the algorithm (or for at least one, when none is
    /// named) and is measured in this scenario; the label exists; the comparison has the
    /// tolerance it needs and no other; `over` and `at` fit the metric; the bound parses and
    /// names only known quantities and metrics.
    pub fn new(index: usize, expect: &Expect, facts: &Facts) -> Result<Claim, ClaimError> {
        let metric = Self::check_metric(&expect.metric, facts)?;
        let (targets, skipped) = match &expect.algorithm {
            Some(label) => {
                let Some(kind) = facts.kind_of(label) else {
                    return Err(ClaimError::new(
                        "algorithm",
                        format!("no algorithm of the scenario is labelled `{label}`"),
                    )
                    .hint(format!(
                        "the labels are {}; leave `algorithm` out to check every algorithm",
                        facts.labels()
                    )));
                };
                if !metric.def.defined_for(kind, &facts.measured) {
                    return Err(ClaimError::new(
                        "metric",
                        format!(
                            "`{}` is not defined for {}: it is defined for {}",
                            expect.metric,
                            named(label, kind),
                            metric.def.defined_for_text(&facts.measured)
                        ),
                    )
                    .hint("name another algorithm, or leave `algorithm` out to check every algorithm that defines it"));
                }
                (vec![label.clone()], Vec::new())
            }
            None => {
                let (defined, not): (Vec<_>, Vec<_>) = facts
                    .algorithms
                    .iter()
                    .partition(|(_, k)| metric.def.defined_for(k, &facts.measured));
                if defined.is_empty() {
                    return Err(ClaimError::new(
                        "metric",
                        format!(
                            "no algorithm of the scenario defines `{}`: it is defined for {}",
                            expect.metric,
                            metric.def.defined_for_text(&facts.measured)
                        ),
                    ));
                }
                (
                    defined.into_iter().map(|(l, _)| l.clone()).collect(),
                    not.into_iter()
                        .map(|(l, k)| {
                            (
                                l.clone(),
                                format!(
                                    "`{}` is not defined for {k} (only for {})",
                                    expect.metric,
                                    metric.def.defined_for_text(&facts.measured)
                                ),
                            )
                        })
                        .collect(),
                )
            }
        };
        Self::check_op(expect)?;
        Self::check_over(expect, metric, facts)?;
        let (bound, refs) = Self::check_bound(expect, &targets, facts)?;
        let labels = facts
            .algorithms
            .iter()
            .map(|(l, _)| l.clone())
            .filter(|l| targets.contains(l) || skipped.iter().any(|(s, _)| s == l))
            .collect();
        Ok(Claim {
            index,
            expect: expect.clone(),
            metric,
            targets,
            skipped,
            labels,
            bound,
            refs,
        })
    }

    fn check_metric(name: &str, facts: &Facts) -> Result<MetricRef, ClaimError> {
        let Some(metric) = metrics::lookup(name) else {
            let mut e = ClaimError::new("metric", format!("unknown metric `{name}`"));
            let list = METRICS
                .iter()
                .map(|d| d.name)
                .collect::<Vec<_>>()
                .join(", ");
            e = match metrics::suggest(name) {
                Some(s) => e.hint(format!(
                    "did you mean `{s}`? (the book's chapter \"Testing claims\" lists every metric)"
                )),
                None => e.hint(format!("the metrics are {list}")),
            };
            return Err(e);
        };
        if let Some(w) = metric.worker
            && w >= facts.workers
        {
            return Err(ClaimError::new(
                "metric",
                format!(
                    "worker {w} is out of range: the cluster has {} workers (0..={})",
                    facts.workers,
                    facts.workers.saturating_sub(1)
                ),
            ));
        }
        for &needs in metric.def.needs {
            if facts.provides(needs) == Some(false) {
                return Err(ClaimError::new(
                    "metric",
                    format!(
                        "`{name}` is not measured in this scenario: it needs {}",
                        needs.describe()
                    ),
                ));
            }
        }
        Ok(metric)
    }

    fn check_op(expect: &Expect) -> Result<(), ClaimError> {
        for (key, tol) in [("rel_tol", expect.rel_tol), ("abs_tol", expect.abs_tol)] {
            let Some(t) = tol else { continue };
            if expect.op != Op::Approx {
                return Err(ClaimError::new(
                    key,
                    format!(
                        "`{key}` applies only to op = \"~=\", not to \"{}\"",
                        expect.op
                    ),
                )
                .hint("use op = \"~=\" for a comparison within a tolerance"));
            }
            if !(t.is_finite() && t >= 0.0) {
                return Err(ClaimError::new(
                    key,
                    format!("a tolerance must be a finite number at least 0, got {t}"),
                ));
            }
        }
        if expect.op == Op::Approx && expect.rel_tol.is_none() && expect.abs_tol.is_none() {
            return Err(ClaimError::new(
                "op",
                "op = \"~=\" needs a tolerance: rel_tol, abs_tol or both",
            )
            .hint("rel_tol = 0.05 accepts 5% of the bound; op = \"==\" compares exactly"));
        }
        Ok(())
    }

    fn check_over(expect: &Expect, metric: MetricRef, facts: &Facts) -> Result<(), ClaimError> {
        let series = metric.def.shape() == Shape::Series;
        let scalar_hint = || {
            let names: Vec<&str> = METRICS
                .iter()
                .filter(|d| d.shape() == Shape::Series)
                .map(|d| d.name)
                .collect();
            format!("the time series are {}", names.join(", "))
        };
        if let Some(over) = expect.over
            && over != Over::Final
            && !series
        {
            return Err(ClaimError::new(
                "over",
                format!(
                    "`{}` is one number per run: over = \"{}\" applies to time series",
                    expect.metric,
                    over.name()
                ),
            )
            .hint(scalar_hint()));
        }
        if let Some(at) = expect.at {
            if expect.over.is_some() {
                return Err(ClaimError::new(
                    "at",
                    "give `over` or `at`, not both",
                )
                .hint("`at = 2.5` takes the value at 2.5 simulated seconds; `over` reduces every evaluation point"));
            }
            if !series {
                return Err(ClaimError::new(
                    "at",
                    format!(
                        "`{}` is one number per run: `at` applies to time series",
                        expect.metric
                    ),
                )
                .hint(scalar_hint()));
            }
            if !(at.is_finite() && at >= 0.0) {
                return Err(ClaimError::new(
                    "at",
                    format!("`at` must be a time in simulated seconds, at least 0, got {at}"),
                ));
            }
            if let Some(end) = facts.sim_time_s
                && at > end
            {
                return Err(ClaimError::new(
                    "at",
                    format!("at = {at} s is after the end of the run (run.sim_time_s = {end})"),
                ));
            }
        }
        Ok(())
    }

    fn check_bound(
        expect: &Expect,
        targets: &[String],
        facts: &Facts,
    ) -> Result<(Expr, BTreeMap<String, Ref>), ClaimError> {
        let text = match &expect.value {
            Bound::Number(x) => {
                if x.is_nan() {
                    return Err(ClaimError::new("value", "the bound is not a number (nan)"));
                }
                return Ok((Expr::Num(*x), BTreeMap::new()));
            }
            Bound::Expr(text) => text,
        };
        let bound = expr::parse(text).map_err(|e| {
            ClaimError::new("value", format!("`{text}` does not parse: {}", e.message)).at(e.column)
        })?;
        let mut refs = BTreeMap::new();
        for (name, column) in bound.names() {
            let r = Self::resolve(name, targets, facts).map_err(|e| e.at(column))?;
            refs.insert(name.to_owned(), r);
        }
        Ok((bound, refs))
    }

    fn resolve(name: &str, targets: &[String], facts: &Facts) -> Result<Ref, ClaimError> {
        if let Some(q) = quantity(name) {
            for (unavailable, label, why) in &facts.unavailable {
                if unavailable == q && label.as_ref().is_none_or(|l| targets.contains(l)) {
                    return Err(ClaimError::new("value", format!("`{q}`: {why}")));
                }
            }
            return Ok(Ref::Quantity(q));
        }
        match metric_ref(name, facts) {
            Some((label, Some(metric))) => {
                let kind = facts.kind_of(&label).unwrap_or_default();
                if !metric.def.defined_for(kind, &facts.measured) {
                    return Err(ClaimError::new(
                        "value",
                        format!(
                            "`{name}`: `{metric}` is not defined for {}: it is defined for {}",
                            named(&label, kind),
                            metric.def.defined_for_text(&facts.measured)
                        ),
                    ));
                }
                let checked = Self::check_metric(&metric.to_string(), facts)
                    .map_err(|e| ClaimError { key: "value", ..e })?;
                Ok(Ref::Metric {
                    label,
                    metric: checked,
                })
            }
            Some((label, None)) => {
                let rest = &name[label.len() + 1..];
                let mut e = ClaimError::new(
                    "value",
                    format!("`{name}`: `{rest}` is not a metric of `{label}`"),
                );
                if metrics::lookup(name).is_some() {
                    e = e.hint(format!(
                        "`{name}` is a metric: an algorithm's metric is LABEL.METRIC, e.g. `{label}.{name}`"
                    ));
                } else if let Some(s) = metrics::suggest(rest) {
                    e = e.hint(format!("did you mean `{label}.{s}`?"));
                }
                Err(e)
            }
            None => {
                let quantities: Vec<&str> = QUANTITIES.iter().map(|&(q, _)| q).collect();
                let example = facts
                    .algorithms
                    .first()
                    .map_or("allreduce", |(l, _)| l.as_str());
                let mut hint = format!(
                    "the quantities are {}; another algorithm's metric is written LABEL.METRIC, with LABEL one of {} (e.g. `{example}.final_loss`)",
                    quantities.join(", "),
                    facts.labels()
                );
                if name.contains('-') && name.split('-').all(|p| quantity(p).is_some()) {
                    hint = format!(
                        "inside a name `-` followed by a letter continues the name: write `{}` with spaces for a subtraction; {hint}",
                        name.replace('-', " - ")
                    );
                }
                Err(ClaimError::new("value", format!("unknown name `{name}`")).hint(hint))
            }
        }
    }

    /// The quantities the bound names, once each, in order of appearance.
    pub fn quantities(&self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Vec::new();
        for (name, _) in self.bound.names() {
            if let Some(Ref::Quantity(q)) = self.refs.get(name)
                && !out.contains(q)
            {
                out.push(q);
            }
        }
        out
    }

    /// How the series is reduced, as written in `checks.csv`: `final`, `max`, `min`, `mean` or
    /// `at=2.5`; empty for a scalar metric.
    pub fn over_text(&self) -> String {
        if self.metric.def.shape() == Shape::Scalar {
            return String::new();
        }
        match self.expect.at {
            Some(t) => format!("at={t}"),
            None => self.expect.over.unwrap_or_default().name().to_owned(),
        }
    }

    /// The claim as a line of text: `staleness.max <= 2 * n`, with `over`, `at` and the
    /// tolerance when they apply.
    pub fn describe(&self) -> String {
        let e = &self.expect;
        let mut s = format!("{} {} {}", e.metric, e.op, e.value);
        match (e.at, e.over) {
            (Some(t), _) => s.push_str(&format!(" at {t} s")),
            (None, Some(o)) if o != Over::Final => s.push_str(&format!(" over {}", o.name())),
            _ => {}
        }
        if e.op == Op::Approx {
            let mut tol = Vec::new();
            if let Some(r) = e.rel_tol {
                tol.push(format!("{}%", r * 100.0));
            }
            if let Some(a) = e.abs_tol {
                tol.push(format!("{a}"));
            }
            s.push_str(&format!(" (±{})", tol.join(" or ±")));
        }
        s
    }

    /// The tolerance of `~=` around `bound`: `max(abs_tol, rel_tol · |bound|)`; `None` for
    /// the other comparisons.
    pub fn tolerance(&self, bound: f64) -> Option<f64> {
        (self.expect.op == Op::Approx).then(|| {
            self.expect
                .abs_tol
                .unwrap_or(0.0)
                .max(self.expect.rel_tol.unwrap_or(0.0) * bound.abs())
        })
    }

    /// The skipped row of `algorithm`, if the claim skips it.
    pub fn skip_row(&self, algorithm: &str) -> Option<CheckRow> {
        let (_, why) = self.skipped.iter().find(|(l, _)| l == algorithm)?;
        let mut row = self.row(algorithm);
        row.result = CheckResult::Skip;
        row.reason = Some(why.clone());
        Some(row)
    }

    /// A row with this claim's columns filled in for `algorithm`, and no verdict yet (it
    /// reads `fail`).
    pub fn row(&self, algorithm: &str) -> CheckRow {
        CheckRow {
            expect: self.index as u64,
            algorithm: algorithm.to_owned(),
            metric: self.expect.metric.clone(),
            over: self.over_text(),
            op: self.expect.op.symbol().to_owned(),
            value: self.expect.value.to_string(),
            observed: None,
            bound: None,
            tolerance: None,
            result: CheckResult::Fail,
            reason: None,
            note: self.expect.note.clone(),
        }
    }
}
