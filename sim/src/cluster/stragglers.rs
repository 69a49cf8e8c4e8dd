//! Straggler models: what makes a worker's step slower than its base time.
//!
//! Each `[[cluster.stragglers]]` entry applies one model to a [`WorkerSet`]. Models combine: the
//! `k`-th step of worker `i`, started at simulated time `t`, takes
//!
//! ```text
//! duration = round(base_k · Π factor_m(k, t)) + round(Σ delay_m(k))      ns
//! ```
//!
//! over the entries `m` that cover `i`, in the order they are listed, where `base_k` is the
//! worker's base step time (or its trace's `k`-th duration, see [`TraceConfig`]). A model that
//! does not cover a worker contributes factor 1 and no delay.
//!
//! | `kind` | effect | depends on |
//! |--------|--------|------------|
//! | `fixed` (default when `kind` is omitted) | factor `factor ≥ 1` | nothing |
//! | `jitter` | factor drawn per step from a distribution ([`JitterConfig`]) | `k` |
//! | `delay` | extra time drawn per step from a distribution ([`DelayConfig`]) | `k` |
//! | `markov` | factor `factor` while slow, 1 while fast ([`MarkovConfig`]) | `k` (step clock) or `t` (time clock) |
//! | `window` | factor `factor` for steps starting in `[start_s, end_s)` ([`WindowConfig`]) | `t` |
//! | `trace` | replaces the base time by a per-step trace ([`TraceConfig`]) | `k` |
//!
//! ## Determinism
//!
//! Every random model of entry `m` draws, for worker `i`, from sub-stream `1 + m` of worker `i`'s
//! compute stream ([`StreamKind::Compute`](crate::clock::rng::StreamKind::Compute), id `i`), exactly once per step (step-clocked) or once
//! per sojourn (time-clocked), and from nothing else. So the `k`-th step of worker `i` takes a
//! duration that depends only on the seed, `i`, `k` and, for `window` entries and time-clocked
//! `markov` entries, on the simulated time `t` at which the step starts. Two algorithms run on
//! one scenario see the same durations for every worker's `k`-th step unless such a time-dependent
//! entry covers it; with one, they see the same slowdown at the same simulated instants.
//! Inserting or removing an entry before entry `m` renumbers `m`, and so redraws its realization.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize};

use crate::clock::time::{SimTime, TimeUnit, num};
use crate::cluster::workerset::WorkerSet;
use crate::error::ConfigError;
use crate::raw::{Raw, lift};

use super::slowdown::Variate;

/// One `[[cluster.stragglers]]` entry: a model applied to a set of workers.
///
/// ```toml
/// [[cluster.stragglers]]
/// workers = [5]
/// factor = 4.0                 # no `kind`: a fixed slowdown
///
/// [[cluster.stragglers]]
/// kind = "jitter"
/// workers = "all"
/// distribution = "lognormal"
/// mean = 1.0
/// cv = 0.2
/// ```
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StragglerConfig {
    /// The workers it applies to.
    pub workers: WorkerSet,
    /// The model, selected by `kind`.
    #[serde(flatten)]
    pub model: StragglerModel,
}

impl StragglerConfig {
    /// A fixed slowdown of `factor` for `workers`.
    pub fn fixed(workers: impl Into<WorkerSet>, factor: f64) -> Self {
        StragglerConfig {
            workers: workers.into(),
            model: StragglerModel::Fixed { factor },
        }
    }

    /// `model` applied to `workers`.
    pub fn new(workers: impl Into<WorkerSet>, model: StragglerModel) -> Self {
        StragglerConfig {
            workers: workers.into(),
            model,
        }
    }
}

impl<'de> Deserialize<'de> for StragglerConfig {
    /// A table with `workers`, `kind` and the model's keys; without `kind` it is a fixed
    /// slowdown (`workers` and `factor`).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let Raw::Map(mut entries) = Raw::deserialize(d)? else {
            return Err(D::Error::custom(
                "a straggler entry must be a table with `workers`, `kind` and the model's keys",
            ));
        };
        let Some(at) = entries.iter().position(|(k, _)| k == "workers") else {
            return Err(D::Error::missing_field("workers"));
        };
        let (_, workers) = entries.remove(at);
        let workers = WorkerSet::deserialize(workers)
            .map_err(|e| D::Error::custom(format!("workers: {e}")))?;
        if !entries.iter().any(|(k, _)| k == "kind") {
            entries.insert(0, ("kind".into(), Raw::Str("fixed".into())));
        }
        let model = StragglerModel::deserialize(Raw::Map(entries)).map_err(lift)?;
        Ok(StragglerConfig { workers, model })
    }
}

/// A straggler model, selected by `kind`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum StragglerModel {
    /// Every step takes `factor` (≥ 1) times longer.
    Fixed {
        /// The slowdown, at least 1.
        factor: f64,
    },
    /// A random factor per step.
    Jitter(JitterConfig),
    /// A random extra time per step.
    Delay(DelayConfig),
    /// Two-state fast/slow Markov switching.
    Markov(MarkovConfig),
    /// A slowdown during a window of simulated time.
    Window(WindowConfig),
    /// Step durations replayed from a CSV file.
    Trace(TraceConfig),
}

impl StragglerModel {
    /// The `kind` tag.
    pub fn kind(&self) -> &'static str {
        match self {
            StragglerModel::Fixed { .. } => "fixed",
            StragglerModel::Jitter(_) => "jitter",
            StragglerModel::Delay(_) => "delay",
            StragglerModel::Markov(_) => "markov",
            StragglerModel::Window(_) => "window",
            StragglerModel::Trace(_) => "trace",
        }
    }
}

/// A distribution family, parameterised by its mean and a spread.
///
/// With mean `m` and coefficient of variation `c = σ/m`:
///
/// | `distribution` | spread keys | sampled as |
/// |----------------|-------------|------------|
/// | `constant` | none | `X = m` |
/// | `uniform` | `cv`, `0 ≤ c ≤ 1/√3` | `U[m − h, m + h]`, `h = √3·c·m` |
/// | `lognormal` | `cv ≥ 0` | `exp(N(μ, σ²))`, `σ² = ln(1 + c²)`, `μ = ln m − σ²/2` |
/// | `gamma` | `cv > 0`, or `shape` k > 0 | `Gamma(k, θ)`, `k = 1/c²`, `θ = m/k` |
/// | `exponential` | none (`c = 1`) | `Exp(rate 1/m)` |
/// | `pareto` | `shape` α > 1, or `cv > 0` | `Pareto(x_m, α)`, `x_m = m(α − 1)/α`; from `cv`: `α = 1 + √(1 + 1/c²)` |
///
/// The mean of every family is exactly `m`. A Pareto's variance is finite only for `α > 2`
/// (any `cv` gives such an `α`). Samples come from `rand_distr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Distribution {
    /// Always the mean.
    Constant,
    /// Uniform around the mean.
    Uniform,
    /// Log-normal with the given mean and coefficient of variation.
    Lognormal,
    /// Gamma with the given mean and coefficient of variation (or shape).
    Gamma,
    /// Exponential with the given mean.
    Exponential,
    /// Pareto (type I) with the given mean and shape (or coefficient of variation).
    Pareto,
}

impl Distribution {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Distribution::Constant => "constant",
            Distribution::Uniform => "uniform",
            Distribution::Lognormal => "lognormal",
            Distribution::Gamma => "gamma",
            Distribution::Exponential => "exponential",
            Distribution::Pareto => "pareto",
        }
    }
}

/// `kind = "jitter"`: every step's time is multiplied by a factor `X` drawn from a distribution
/// with mean `mean` (see [`Distribution`] for the spread keys). `mean = 1` keeps the average
/// speed; `mean = 1.2, cv = 0.1` makes these workers 20% slower on average.
///
/// ```toml
/// [[cluster.stragglers]]
/// kind = "jitter"
/// workers = "all"
/// distribution = "gamma"
/// mean = 1.0
/// cv = 0.3
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JitterConfig {
    /// The distribution family.
    pub distribution: Distribution,
    /// Mean factor, > 0.
    pub mean: f64,
    /// Coefficient of variation (standard deviation / mean).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cv: Option<f64>,
    /// Shape parameter (gamma's `k`, Pareto's `α`), instead of `cv`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<f64>,
}

/// `kind = "delay"`: every step takes an extra time `D` milliseconds drawn from a distribution
/// with mean `mean_ms` (see [`Distribution`] for the spread keys), added after the factors.
///
/// ```toml
/// [[cluster.stragglers]]
/// kind = "delay"
/// workers = "0..4"
/// distribution = "exponential"
/// mean_ms = 5.0
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelayConfig {
    /// The distribution family.
    pub distribution: Distribution,
    /// Mean extra time per step, in milliseconds, > 0.
    pub mean_ms: f64,
    /// Coefficient of variation (standard deviation / mean).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cv: Option<f64>,
    /// Shape parameter (gamma's `k`, Pareto's `α`), instead of `cv`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<f64>,
}

/// Where a two-state chain starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MarkovStart {
    /// In the slow state with probability `mean_slow / (mean_fast + mean_slow)` (drawn from the
    /// worker's stream), as if the chain had been running forever.
    #[default]
    Stationary,
    /// In the fast state.
    Fast,
    /// In the slow state.
    Slow,
}

/// `kind = "markov"`: a worker alternates between a fast state (factor 1) and a slow state
/// (factor `factor ≥ 1`), with random sojourn times of the given means. Each covered worker has
/// its own chain.
///
/// Two clocks, chosen by which pair of means is given:
///
/// - **Step clock** (`mean_fast_steps`, `mean_slow_steps`, each ≥ 1): a sojourn lasts
///   `1 + G` steps, `G ~ Geometric(1/mean)` (failures before the first success), so its mean is
///   exactly `mean` steps; the state of step `k` depends only on `k`.
/// - **Time clock** (`mean_fast_s`, `mean_slow_s`, each > 0): sojourns are exponential with these
///   means in simulated seconds (a continuous-time chain, drawn once per sojourn); a step takes
///   the factor of the state at the instant it starts.
///
/// ```toml
/// [[cluster.stragglers]]
/// kind = "markov"
/// workers = { fraction = 0.25 }
/// factor = 5.0
/// mean_fast_s = 30.0
/// mean_slow_s = 5.0
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MarkovConfig {
    /// Slowdown while slow, ≥ 1.
    pub factor: f64,
    /// Mean sojourn in the fast state, in steps (step clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_fast_steps: Option<f64>,
    /// Mean sojourn in the slow state, in steps (step clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_slow_steps: Option<f64>,
    /// Mean sojourn in the fast state, in simulated seconds (time clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_fast_s: Option<f64>,
    /// Mean sojourn in the slow state, in simulated seconds (time clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_slow_s: Option<f64>,
    /// The initial state.
    #[serde(default)]
    pub start: MarkovStart,
}

/// `kind = "window"`: steps that *start* in `[start_s, end_s)` of simulated time take `factor`
/// (≥ 1) times longer; a step that starts before `start_s` keeps its duration even if it ends
/// inside the window. Without `end_s` the window never closes (a worker that becomes slow
/// mid-run). Boundaries are compared in integer nanoseconds.
///
/// ```toml
/// [[cluster.stragglers]]
/// kind = "window"
/// workers = "8..16"            # a whole rack
/// start_s = 2.0
/// end_s = 4.0
/// factor = 3.0
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowConfig {
    /// Slowdown inside the window, ≥ 1.
    pub factor: f64,
    /// Start of the window, in simulated seconds (included).
    pub start_s: f64,
    /// End of the window, in simulated seconds (excluded); none: until the end of the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_s: Option<f64>,
}

/// What a trace does after its last step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TraceEnd {
    /// Start over from its first step.
    #[default]
    Repeat,
    /// Keep its last duration.
    Hold,
}

/// `kind = "trace"`: the base time of step `k` is the `k`-th duration of the worker's trace
/// (other models still apply on top). The file is CSV with a header row, `#` comments and
/// blank lines allowed, in one of two layouts:
///
/// ```text
/// duration_ms          worker,duration_ms
/// 10.2                 0,10.2
/// 11.7                 1,9.8
/// 9.9                  0,11.7
/// ```
///
/// With one column, every covered worker replays the same sequence; with `worker,duration_ms`
/// (in either order, rows of different workers interleaved as they like), worker `i` replays the
/// rows with `worker = i` in file order, and every covered worker must have at least one.
/// A relative `file` is resolved against the scenario file's directory.
///
/// ```toml
/// [[cluster.stragglers]]
/// kind = "trace"
/// workers = "all"
/// file = "traces/v100.csv"
/// at_end = "repeat"            # or "hold"
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceConfig {
    /// The CSV file.
    pub file: PathBuf,
    /// After the last step: start over, or hold the last duration.
    #[serde(default)]
    pub at_end: TraceEnd,
}

pub(crate) fn positive(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

fn slowdown(factor: f64, path: &str) -> Result<(), ConfigError> {
    if factor.is_finite() && factor >= 1.0 {
        Ok(())
    } else {
        Err(ConfigError::new(
            path,
            format!("a slowdown factor must be at least 1, got {factor}"),
        )
        .hint("factor = 4.0 makes the step 4x slower; 1.0 leaves it unchanged"))
    }
}

/// The largest mean sojourn of a step-clocked Markov entry, in steps: 2⁵³, the largest count
/// a floating-point mean holds exactly, and far enough below `u64::MAX` that the geometric
/// sojourns drawn from it never overflow the step counter.
pub const MAX_MEAN_STEPS: f64 = 9_007_199_254_740_992.0;

/// The two mean sojourns of a Markov entry and which clock they use.
pub(crate) enum Clock {
    Steps(f64, f64),
    Seconds(f64, f64),
}

pub(crate) fn markov_clock(
    m: &MarkovConfig,
    at: &dyn Fn(&str) -> String,
) -> Result<Clock, ConfigError> {
    let steps = (m.mean_fast_steps, m.mean_slow_steps);
    let secs = (m.mean_fast_s, m.mean_slow_s);
    let any = |p: (Option<f64>, Option<f64>)| p.0.is_some() || p.1.is_some();
    if any(steps) && any(secs) {
        return Err(ConfigError::new(
            &at("mean_fast_s"),
            "a Markov straggler counts its sojourns in steps or in seconds, not both",
        )
        .hint("keep mean_fast_steps and mean_slow_steps, or mean_fast_s and mean_slow_s"));
    }
    let pair = |p: (Option<f64>, Option<f64>), keys: [&str; 2], min: f64, unit: &str| {
        let get = |v: Option<f64>, key: &str| -> Result<f64, ConfigError> {
            let v = v.ok_or_else(|| {
                ConfigError::new(&at(key), format!("a Markov straggler needs `{key}`"))
                    .hint(format!("give both {} and {}", keys[0], keys[1]))
            })?;
            if v.is_finite() && v >= min && v > 0.0 {
                Ok(v)
            } else {
                Err(ConfigError::new(
                    &at(key),
                    format!(
                        "a mean sojourn must be {} {unit}, got {v}",
                        if min > 0.0 {
                            "at least 1"
                        } else {
                            "a positive number of"
                        }
                    ),
                )
                .hint("the mean time a worker stays in that state before switching"))
            }
        };
        Ok::<_, ConfigError>((get(p.0, keys[0])?, get(p.1, keys[1])?))
    };
    if any(steps) {
        let (f, s) = pair(steps, ["mean_fast_steps", "mean_slow_steps"], 1.0, "step")?;
        for (key, v) in [("mean_fast_steps", f), ("mean_slow_steps", s)] {
            if v > MAX_MEAN_STEPS {
                let path = at(key);
                return Err(ConfigError::new(
                    &path,
                    format!(
                        "{path} = {} steps is more than a step counter can draw: at most {} steps (2^53)",
                        num(v),
                        MAX_MEAN_STEPS
                    ),
                )
                .hint("a sojourn is counted in whole steps; give a mean the run can reach"));
            }
        }
        Ok(Clock::Steps(f, s))
    } else if any(secs) {
        let (f, s) = pair(secs, ["mean_fast_s", "mean_slow_s"], 0.0, "seconds")?;
        SimTime::checked_nonzero_from_f64(f, TimeUnit::Seconds, &at("mean_fast_s"))?;
        SimTime::checked_nonzero_from_f64(s, TimeUnit::Seconds, &at("mean_slow_s"))?;
        Ok(Clock::Seconds(f, s))
    } else {
        Err(ConfigError::new(
            &at("mean_fast_s"),
            "a Markov straggler needs its mean sojourn times",
        )
        .hint("set mean_fast_s and mean_slow_s (seconds), or mean_fast_steps and mean_slow_steps"))
    }
}

pub(crate) fn window_bounds(
    w: &WindowConfig,
    at: &dyn Fn(&str) -> String,
) -> Result<(SimTime, SimTime), ConfigError> {
    crate::clock::time::window(w.start_s, w.end_s, at)
}

impl StragglerModel {
    /// Checks every value; `prefix` is the entry's field path (`cluster.stragglers[2]`), so that
    /// errors name the offending key (`cluster.stragglers[2].end_s`).
    pub fn validate(&self, prefix: &str) -> Result<(), ConfigError> {
        let at = |k: &str| format!("{prefix}.{k}");
        let at: &dyn Fn(&str) -> String = &at;
        match self {
            StragglerModel::Fixed { factor } => slowdown(*factor, &at("factor")),
            StragglerModel::Jitter(j) => {
                Variate::new(j.distribution, j.mean, "mean", j.cv, j.shape, at).map(drop)
            }
            StragglerModel::Delay(j) => {
                Variate::new(j.distribution, j.mean_ms, "mean_ms", j.cv, j.shape, at)?;
                SimTime::checked_from_f64(j.mean_ms, TimeUnit::Millis, &at("mean_ms")).map(drop)
            }
            StragglerModel::Markov(m) => {
                slowdown(m.factor, &at("factor"))?;
                markov_clock(m, at).map(drop)
            }
            StragglerModel::Window(w) => {
                slowdown(w.factor, &at("factor"))?;
                window_bounds(w, at).map(drop)
            }
            StragglerModel::Trace(t) => {
                if t.file.as_os_str().is_empty() {
                    return Err(
                        ConfigError::new(&at("file"), "the trace file name is empty")
                            .hint("file = \"traces/steps.csv\", relative to the scenario file"),
                    );
                }
                Ok(())
            }
        }
    }
}

/// A loaded trace: one shared sequence, or one per worker.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum TraceData {
    Shared(Arc<[SimTime]>),
    PerWorker(BTreeMap<usize, Arc<[SimTime]>>),
}

const TRACE_HINT: &str = "a trace is CSV with a header `duration_ms` (one sequence for every worker) or `worker,duration_ms`, then one positive duration in milliseconds per row; a relative path is resolved against the scenario file's directory";

/// Reads and parses a trace file; errors are located at `path_key` (the `file` key).
pub(crate) fn load_trace(file: &Path, path_key: &str) -> Result<TraceData, ConfigError> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        ConfigError::new(
            path_key,
            format!("cannot read the trace file {}: {e}", file.display()),
        )
        .hint(TRACE_HINT)
    })?;
    parse_trace(&text).map_err(|m| {
        ConfigError::new(path_key, format!("trace file {}: {m}", file.display())).hint(TRACE_HINT)
    })
}

fn parse_trace(text: &str) -> Result<TraceData, String> {
    let mut lines = crate::csv::data_lines(text);
    let Some((hline, header)) = lines.next() else {
        return Err("the file is empty".into());
    };
    let cols: Vec<&str> = header.split(',').map(str::trim).collect();
    let dur_col = cols.iter().position(|c| *c == "duration_ms");
    let worker_col = cols.iter().position(|c| *c == "worker");
    let dur_col = match (dur_col, worker_col, cols.len()) {
        (Some(d), None, 1) => d,
        (Some(d), Some(_), 2) => d,
        _ => {
            return Err(format!(
                "line {hline}: the header is `{header}`, expected `duration_ms` or `worker,duration_ms`"
            ));
        }
    };
    let mut shared = Vec::new();
    let mut per: BTreeMap<usize, Vec<SimTime>> = BTreeMap::new();
    for (no, line) in lines {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != cols.len() {
            return Err(format!(
                "line {no}: {} fields, the header has {}",
                fields.len(),
                cols.len()
            ));
        }
        let d: f64 = fields[dur_col]
            .parse()
            .map_err(|_| format!("line {no}: `{}` is not a number", fields[dur_col]))?;
        if !positive(d) {
            return Err(format!(
                "line {no}: a step duration must be positive, got {d}"
            ));
        }
        let d = SimTime::checked_nonzero_from_f64(d, TimeUnit::Millis, "duration_ms")
            .map_err(|e| format!("line {no}: {}", e.message))?;
        match worker_col {
            None => shared.push(d),
            Some(wc) => {
                let w: usize = fields[wc]
                    .parse()
                    .map_err(|_| format!("line {no}: `{}` is not a worker index", fields[wc]))?;
                per.entry(w).or_default().push(d);
            }
        }
    }
    match worker_col {
        None if shared.is_empty() => Err("the trace has no step".into()),
        None => Ok(TraceData::Shared(shared.into())),
        Some(_) if per.is_empty() => Err("the trace has no step".into()),
        Some(_) => Ok(TraceData::PerWorker(
            per.into_iter().map(|(w, v)| (w, v.into())).collect(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_parse_in_both_layouts() {
        let TraceData::Shared(s) = parse_trace("# a trace\nduration_ms\n1.5\n\n2 # ms\n").unwrap()
        else {
            panic!("one column is shared")
        };
        assert_eq!(
            &s[..],
            &[
                SimTime::from_micros_f64(1500.0),
                SimTime::from_millis_f64(2.0)
            ]
        );
        let TraceData::PerWorker(m) = parse_trace("duration_ms, worker\n1,0\n2,1\n3,0\n").unwrap()
        else {
            panic!("two columns are per worker")
        };
        assert_eq!(m[&0].len(), 2);
        assert_eq!(m[&1][0], SimTime::from_millis_f64(2.0));
        for bad in [
            "",
            "time\n1\n",
            "duration_ms\n",
            "duration_ms\nx\n",
            "duration_ms\n-1\n",
            "worker,duration_ms\n1\n",
            "worker,duration_ms\na,1\n",
        ] {
            assert!(parse_trace(bad).is_err(), "{bad:?}");
        }
    }
}
