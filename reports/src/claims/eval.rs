//! Evaluating a [`Claim`] against a run's results: the observed value of its metric, the
//! value of its bound, and the verdict.
//!
//! A value that cannot be read (an algorithm that applied no gradient has no staleness, a
//! series with no point at `at`) fails the claim with the reason; a claim whose metric an
//! algorithm does not define is skipped for it (only when the expectation names no
//! algorithm: naming one is refused by [`Claim::new`]). A target never reached reads `+∞`, so
//! `time_to_target.accuracy_s < 2.0` fails and `> 2.0` holds.

use std::collections::BTreeMap;

use crate::claims::metrics::{Reading, Source, WorkerData};
use crate::claims::{Claim, MetricRef, Over, Ref};
use crate::rundir::{
    CheckResult, CheckRow, MetricRow, RunData, SeriesRow, StalenessRow, Summary, UtilizationRow,
};
use crate::{Error, Result};

/// The results of one run that a claim reads: `summary.json`, `metrics.csv`, `series.csv`,
/// `staleness.csv` and `utilization.csv`.
#[derive(Clone, Copy, Debug)]
pub struct RunView<'a> {
    /// `summary.json`.
    pub summary: &'a Summary,
    /// `metrics.csv`.
    pub metrics: &'a [MetricRow],
    /// `series.csv`.
    pub series: &'a [SeriesRow],
    /// `staleness.csv`.
    pub staleness: &'a [StalenessRow],
    /// `utilization.csv`.
    pub utilization: &'a [UtilizationRow],
}

impl<'a> RunView<'a> {
    /// The results of a run directory read back; fails when it has no `summary.json`.
    pub fn of(data: &'a RunData) -> Result<Self> {
        let summary = data.summary.as_ref().ok_or_else(|| Error::Input {
            path: data.dir.clone(),
            message: "no summary.json: the run did not finish".into(),
        })?;
        Ok(RunView {
            summary,
            metrics: &data.metrics,
            series: &data.series,
            staleness: &data.staleness,
            utilization: &data.utilization,
        })
    }

    /// The value of `metric` of algorithm `label`, a series reduced by `over` or taken `at` a
    /// time.
    pub fn read(&self, label: &str, metric: MetricRef, over: Over, at: Option<f64>) -> Reading {
        let run = self
            .summary
            .run(label)
            .ok_or_else(|| format!("`{label}` has no entry in summary.json"))?;
        match metric.def.source {
            Source::Summary(f) => f(run),
            Source::Metrics(f) => reduce(
                self.metrics
                    .iter()
                    .filter(|r| r.algorithm == label)
                    .map(|r| (r.time_s, f(r))),
                over,
                at,
            ),
            Source::Series(name) => reduce(
                self.series
                    .iter()
                    .filter(|r| r.algorithm == label && r.name == name)
                    .map(|r| (r.time_s, r.value)),
                over,
                at,
            ),
            Source::Worker(f) => {
                let w = metric.worker.unwrap_or(0) as u64;
                let hist = |measure: &str| -> Vec<(u64, u64)> {
                    let mut h: Vec<(u64, u64)> = self
                        .staleness
                        .iter()
                        .filter(|r| r.algorithm == label && r.measure == measure && r.worker == w)
                        .map(|r| (r.value, r.count))
                        .collect();
                    h.sort_unstable();
                    h
                };
                let data = WorkerData {
                    sim_time_s: run.sim_time_s,
                    utilization: self
                        .utilization
                        .iter()
                        .find(|r| r.algorithm == label && r.worker == w)
                        .map(|r| {
                            (
                                r.steps,
                                [
                                    r.compute_s,
                                    r.communicate_s,
                                    r.blocked_s,
                                    r.idle_s,
                                    r.down_s.unwrap_or(0.0),
                                ],
                            )
                        }),
                    global_staleness: hist("global"),
                    row_staleness: hist("row"),
                    message_age: hist("message_age"),
                };
                f(&data)
            }
        }
    }
}

/// Whole nanoseconds, the resolution of simulated time.
fn nanos(t: f64) -> i128 {
    (t * 1e9).round() as i128
}

/// Reduces a series of `(time, value)` points (in time order; `None`: not measured there).
fn reduce(
    points: impl Iterator<Item = (f64, Option<f64>)>,
    over: Over,
    at: Option<f64>,
) -> Reading {
    let points: Vec<(f64, Option<f64>)> = points.collect();
    let Some(&(last_t, last)) = points.last() else {
        return Err("the series has no evaluation point".into());
    };
    if let Some(t) = at {
        if nanos(t) > nanos(last_t) {
            return Err(format!(
                "the last evaluation point is at {last_t} s, before at = {t} s"
            ));
        }
        let Some(&(pt, v)) = points.iter().rev().find(|(pt, _)| nanos(*pt) <= nanos(t)) else {
            return Err(format!("no evaluation point at or before {t} s"));
        };
        return v.ok_or_else(|| format!("not measured at the evaluation point at {pt} s"));
    }
    let values = points.iter().filter_map(|&(_, v)| v);
    match over {
        Over::Final => {
            last.ok_or_else(|| format!("not measured at the last evaluation point ({last_t} s)"))
        }
        Over::Max => values
            .reduce(f64::max)
            .ok_or_else(|| "not measured at any evaluation point".into()),
        Over::Min => values
            .reduce(f64::min)
            .ok_or_else(|| "not measured at any evaluation point".into()),
        Over::Mean => {
            let (sum, count) = values.fold((0.0, 0usize), |(s, c), v| (s + v, c + 1));
            if count == 0 {
                Err("not measured at any evaluation point".into())
            } else {
                Ok(sum / count as f64)
            }
        }
    }
}

/// The values of the quantities a bound may name ([`crate::claims::QUANTITIES`]): common to
/// every algorithm, or one algorithm's own (Overlap-SGP's `tau`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Quantities {
    /// Values that hold for every algorithm.
    pub common: BTreeMap<String, f64>,
    /// Values of one algorithm (by label), which take precedence over `common`.
    pub per_algorithm: BTreeMap<String, BTreeMap<String, f64>>,
}

impl Quantities {
    /// Sets `name` for every algorithm.
    pub fn set(&mut self, name: &str, value: f64) -> &mut Self {
        self.common.insert(name.to_owned(), value);
        self
    }

    /// Sets `name` for the algorithm labelled `label`.
    pub fn set_for(&mut self, label: &str, name: &str, value: f64) -> &mut Self {
        self.per_algorithm
            .entry(label.to_owned())
            .or_default()
            .insert(name.to_owned(), value);
        self
    }

    /// The value of `name` for algorithm `label`.
    pub fn get(&self, name: &str, label: &str) -> Option<f64> {
        self.per_algorithm
            .get(label)
            .and_then(|m| m.get(name))
            .or_else(|| self.common.get(name))
            .copied()
    }
}

/// How a row's reason begins when its run stopped early (diverged, or no step completed).
pub const STOPPED_EARLY: &str = "the run stopped early";

/// Whether a row failed because its run stopped early ([`Claim::evaluate`]).
fn stopped_early(row: &CheckRow) -> bool {
    row.result == CheckResult::Fail
        && row
            .reason
            .as_deref()
            .is_some_and(|r| r.starts_with(STOPPED_EARLY))
}

impl Claim {
    /// The value of the bound for algorithm `label` of `run`.
    pub fn bound_value(&self, run: &RunView<'_>, quantities: &Quantities, label: &str) -> Reading {
        let over = self.expect.over.unwrap_or_default();
        self.bound
            .eval(&mut |name: &str| match self.refs.get(name) {
                Some(Ref::Quantity(q)) => quantities
                    .get(q, label)
                    .ok_or_else(|| format!("the quantity `{q}` has no value")),
                Some(Ref::Metric {
                    label: other,
                    metric,
                }) => run
                    .read(other, *metric, over, self.expect.at)
                    .map_err(|e| format!("`{name}`: {e}")),
                None => Err(format!("`{name}` was not resolved")),
            })
    }

    /// Evaluates the claim on one run: one row per algorithm it applies to (a failure with
    /// the reason when a value cannot be read), and a skipped row per algorithm that does not
    /// define the metric, in scenario order.
    pub fn evaluate(&self, run: &RunView<'_>, quantities: &Quantities) -> Vec<CheckRow> {
        self.labels
            .iter()
            .map(|label| {
                self.skip_row(label).unwrap_or_else(|| {
                    let mut row = self.row(label);
                    let observed = run.read(
                        label,
                        self.metric,
                        self.expect.over.unwrap_or_default(),
                        self.expect.at,
                    );
                    let bound = self.bound_value(run, quantities, label);
                    self.judge(&mut row, observed, bound);
                    // A run that stopped early (it diverged, or no step completed) has no result
                    // to hold a claim against, whatever its numbers say.
                    let stopped = run
                        .summary
                        .runs
                        .iter()
                        .find(|r| r.algorithm == *label)
                        .filter(|r| r.stopped.is_some());
                    if let Some(r) = stopped {
                        row.result = CheckResult::Fail;
                        row.reason = Some(format!(
                            "{STOPPED_EARLY}: {}",
                            r.stop_reason.as_deref().unwrap_or("see summary.json")
                        ));
                    }
                    row
                })
            })
            .collect()
    }

    /// Fills in the observed value, the bound, the tolerance and the verdict.
    fn judge(&self, row: &mut CheckRow, observed: Reading, bound: Reading) {
        row.observed = observed.as_ref().ok().copied();
        row.bound = bound.as_ref().ok().copied();
        let (o, b) = match (observed, bound) {
            (Ok(o), Ok(b)) => (o, b),
            (Err(e), _) => {
                row.result = CheckResult::Fail;
                row.reason = Some(format!("not measured: {e}"));
                return;
            }
            (_, Err(e)) => {
                row.result = CheckResult::Fail;
                row.reason = Some(format!("bound not measured: {e}"));
                return;
            }
        };
        row.tolerance = self.tolerance(b);
        let holds = self.expect.op.holds(o, b, row.tolerance.unwrap_or(0.0));
        row.result = if holds {
            CheckResult::Pass
        } else {
            CheckResult::Fail
        };
        let mut reasons = Vec::new();
        if o == f64::INFINITY && self.metric.def.name.starts_with("time_to_target") {
            reasons.push("target not reached".to_owned());
        }
        if b.is_nan() {
            reasons.push("the bound is NaN".to_owned());
        } else if b.is_infinite() {
            let target = self.refs.values().any(|r| {
                matches!(r, Ref::Metric { metric, .. } if metric.def.name.starts_with("time_to_target"))
            });
            reasons.push(if target {
                "the bound is infinite: a target it names was not reached".to_owned()
            } else {
                "the bound is infinite".to_owned()
            });
        }
        if !reasons.is_empty() {
            row.reason = Some(reasons.join("; "));
        }
    }

    /// Judges the claim on the means over seeds (`seeds = "mean"`): `per_seed` holds, for
    /// each seed, the rows [`Claim::evaluate`] gave. One row per algorithm: the mean of the
    /// observed values against the mean of the bounds (the bound differs between seeds only
    /// when it names another algorithm's metric or a seed-dependent quantity, such as the gap
    /// of a random graph). A seed whose value could not be read, or whose run stopped early
    /// (it diverged or stalled: its numbers are no result), fails the row.
    pub fn aggregate_mean(&self, per_seed: &[(u64, Vec<CheckRow>)]) -> Vec<CheckRow> {
        let Some((_, first)) = per_seed.first() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for template in first {
            let label = &template.algorithm;
            let mut row = template.clone();
            if template.result == CheckResult::Skip {
                out.push(row);
                continue;
            }
            let mut observed = Vec::new();
            let mut bounds = Vec::new();
            let mut missing = Vec::new();
            for (seed, rows) in per_seed {
                match rows.iter().find(|r| &r.algorithm == label) {
                    Some(r) if stopped_early(r) => missing.push(format!(
                        "seed {seed}: {}",
                        r.reason.as_deref().unwrap_or(STOPPED_EARLY)
                    )),
                    Some(CheckRow {
                        observed: Some(o),
                        bound: Some(b),
                        ..
                    }) => {
                        observed.push(*o);
                        bounds.push(*b);
                    }
                    Some(r) => missing.push(format!(
                        "seed {seed}: {}",
                        r.reason.as_deref().unwrap_or("not measured")
                    )),
                    None => missing.push(format!("seed {seed}: no result")),
                }
            }
            let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
            if !missing.is_empty() {
                row.observed = None;
                row.bound = None;
                row.tolerance = None;
                row.result = CheckResult::Fail;
                row.reason = Some(missing.join("; "));
            } else {
                row.reason = None;
                self.judge(&mut row, Ok(mean(&observed)), Ok(mean(&bounds)));
                let seeds = per_seed
                    .iter()
                    .map(|(s, _)| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                let values = observed
                    .iter()
                    .map(|v| short(*v))
                    .collect::<Vec<_>>()
                    .join(", ");
                let mean_of = format!("mean over seeds {seeds} of {values}");
                row.reason = Some(match row.reason.take() {
                    Some(r) => format!("{mean_of}; {r}"),
                    None => mean_of,
                });
            }
            out.push(row);
        }
        out
    }
}

/// A number for people: an integer as such, otherwise 6 significant digits (scientific for
/// very small or large magnitudes); `∞` for infinities.
pub fn short(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "∞".into() } else { "-∞".into() };
    }
    // Never a negative zero: -0.0 + 0.0 is +0.0, every other value is unchanged.
    let x = x + 0.0;
    if x == x.trunc() && x.abs() < 1e15 {
        return format!("{x}");
    }
    let a = x.abs();
    if !(1e-4..1e6).contains(&a) {
        return format!("{x:.5e}");
    }
    crate::report::significant(x, 6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_numbers_are_never_negative_zero() {
        assert_eq!(short(-0.0), "0");
        assert_eq!(short(-0.0000001), "-1.00000e-7");
        assert_eq!(short(-2.5), "-2.5");
    }

    #[test]
    fn reductions_of_a_series() {
        let pts = || {
            [
                (0.0, Some(4.0)),
                (0.1, None),
                (0.2, Some(1.0)),
                (0.30000000000000004, Some(2.0)),
            ]
            .into_iter()
        };
        assert_eq!(reduce(pts(), Over::Final, None), Ok(2.0));
        assert_eq!(reduce(pts(), Over::Max, None), Ok(4.0));
        assert_eq!(reduce(pts(), Over::Min, None), Ok(1.0));
        assert_eq!(reduce(pts(), Over::Mean, None), Ok(7.0 / 3.0));
        assert_eq!(reduce(pts(), Over::Final, Some(0.3)), Ok(2.0));
        assert_eq!(reduce(pts(), Over::Final, Some(0.25)), Ok(1.0));
        assert!(
            reduce(pts(), Over::Final, Some(0.15))
                .unwrap_err()
                .contains("0.1 s")
        );
        assert!(
            reduce(pts(), Over::Final, Some(0.5))
                .unwrap_err()
                .contains("before")
        );
        assert!(reduce(std::iter::empty(), Over::Max, None).is_err());
    }

    #[test]
    fn short_numbers_keep_the_zeros_of_their_integer_part() {
        assert_eq!(short(100000.4), "100000");
        assert_eq!(short(120.5), "120.5");
    }

    #[test]
    fn short_numbers() {
        assert_eq!(short(15.0), "15");
        assert_eq!(short(1.0475147799430695), "1.04751");
        assert_eq!(short(1522.3333333333333), "1522.33");
        assert_eq!(short(0.057922104587404065), "0.0579221");
        assert_eq!(short(1.5e-7), "1.50000e-7");
        assert_eq!(short(f64::INFINITY), "∞");
    }
}
