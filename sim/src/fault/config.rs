//! The `[[faults]]` entries of a scenario: their serde types and their validation.
//!
//! ```toml
//! [[faults]]
//! kind = "crash"            # worker 3 crashes at 0.5 s and rejoins 0.2 s later
//! workers = [3]
//! at_s = 0.5
//! rejoin_after_s = 0.2
//!
//! [[faults]]
//! kind = "link-down"        # a partition from 1 s to 2 s
//! groups = [[0, 1], [2, 3]]
//! start_s = 1.0
//! end_s = 2.0
//!
//! [[faults]]
//! kind = "loss"             # 1% of the messages on 0 <-> 1 are lost
//! probability = 0.01
//! links = ["0 <-> 1"]
//! ```
//!
//! See [`crate::fault`] for what each kind does at run time.

use serde::{Deserialize, Serialize};

use crate::clock::time::{SimTime, TimeUnit, window};
use crate::cluster::slowdown::Variate;
use crate::cluster::stragglers::Distribution;
use crate::cluster::workerset::WorkerSet;
use crate::error::ConfigError;
use crate::net::config::LinkSpec;

/// One `[[faults]]` entry: its kind and options.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum FaultConfig {
    /// Workers crash (at a time, or at random from a mean time between failures), and
    /// optionally rejoin after a delay with their last state.
    Crash(CrashFault),
    /// Links are down over a window: every message posted on them meanwhile is lost.
    LinkDown(LinkDownFault),
    /// Each message is lost with a probability.
    Loss(MessageFault),
    /// Each message is sent twice with a probability (the receiver discards the copy).
    Duplicate(MessageFault),
    /// Each message is delayed by an extra time, fixed or drawn from a distribution.
    Delay(DelayFault),
    /// Workers go off and come back on at the times of a file: each off interval is a crash and
    /// its end a rejoin (an availability trace, [`crate::fault::availability`]).
    Availability(AvailabilityFault),
}

/// An availability entry: every worker's off intervals, from a CSV file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AvailabilityFault {
    /// The CSV file, relative to the scenario's directory: a header `worker,off_s,on_s`, then
    /// one off interval per row (`on_s` empty: the worker never comes back).
    pub path: String,
    /// What a worker comes back with, as a crash entry's.
    #[serde(default, skip_serializing_if = "RejoinState::is_last")]
    pub rejoin_state: RejoinState,
}

/// A crash entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CrashFault {
    /// The workers that crash (each on its own).
    pub workers: WorkerSet,
    /// When they crash, in simulated seconds (one of `at_s` and `mtbf_s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_s: Option<f64>,
    /// Mean time between failures, seconds: each worker's time up before a crash is exponential
    /// with this mean, drawn from its own stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtbf_s: Option<f64>,
    /// Or: a chip's mean time between failures from published fleet statistics (one of `at_s`,
    /// `mtbf_s` and `mtbf_preset`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtbf_preset: Option<MtbfPreset>,
    /// With `mtbf_s` or `mtbf_preset`: the chips a worker stands for (an 8-GPU node: 8). A
    /// worker fails when any of its chips does, so its mean time between failures is the
    /// chip's divided by this (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chips_per_worker: Option<u32>,
    /// A crashed worker rejoins this many seconds after its crash (none: it never rejoins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejoin_after_s: Option<f64>,
    /// The model a worker rejoins with: `last` (default), the replica and optimizer state it had
    /// when it crashed, or `neighbour`, its replica re-initialized from a live neighbour's model
    /// by the algorithm's rule ([`crate::algorithm::Algorithm::rejoin_model`]).
    #[serde(default, skip_serializing_if = "RejoinState::is_last")]
    pub rejoin_state: RejoinState,
}

/// A chip's mean time between failures from a published report (`[[faults]] mtbf_preset`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MtbfPreset {
    /// Meta's Llama 3 405B pre-training (Llama Team, "The Llama 3 Herd of Models", arXiv
    /// 2407.21783, 2024, §3.3.4): 419 unexpected interruptions in a 54-day snapshot on 16,384
    /// H100 GPUs, so a GPU's mean time between failures is 54 days × 16,384 / 419 (about 5.8
    /// years) and the job's about 3.1 hours.
    Llama3,
}

impl MtbfPreset {
    /// The chip's mean time between failures, in seconds.
    pub fn chip_mtbf_s(self) -> f64 {
        match self {
            MtbfPreset::Llama3 => 54.0 * 86_400.0 * 16_384.0 / 419.0,
        }
    }
}

impl CrashFault {
    /// Each worker's mean time between failures, in seconds: `mtbf_s` or the preset's chip's,
    /// divided by `chips_per_worker`; `None` for a crash at `at_s`.
    pub fn worker_mtbf_s(&self) -> Option<f64> {
        let chip = self
            .mtbf_s
            .or_else(|| self.mtbf_preset.map(MtbfPreset::chip_mtbf_s))?;
        Some(chip / f64::from(self.chips_per_worker.unwrap_or(1).max(1)))
    }
}

/// What a crashed worker rejoins with (`[[faults]] rejoin_state`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RejoinState {
    /// The replica and optimizer state it had when it crashed.
    #[default]
    Last,
    /// Its replica set to a live neighbour's model (its optimizer state kept).
    Neighbour,
}

impl RejoinState {
    fn is_last(&self) -> bool {
        *self == RejoinState::Last
    }
}

/// A link-down entry: exactly one of `links`, `workers` and `groups`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkDownFault {
    /// These links (`"0 -> 1"`, or both directions `"0 <-> 1"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links: Option<Vec<LinkSpec>>,
    /// Every link to or from these workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<WorkerSet>,
    /// A partition: workers of different groups cannot reach each other (a worker in no group
    /// is a group of its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<Vec<usize>>>,
    /// When the links go down, seconds.
    #[serde(default)]
    pub start_s: f64,
    /// When they come back up (none: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_s: Option<f64>,
}

/// A loss or duplication entry: a probability per message, on some links (none: every link)
/// over a window (none: the whole run).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageFault {
    /// The probability that a message is affected, in `[0, 1]`.
    pub probability: f64,
    /// Only these links.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links: Option<Vec<LinkSpec>>,
    /// Only links to or from these workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<WorkerSet>,
    /// From this time on, seconds (default 0).
    #[serde(default)]
    pub start_s: f64,
    /// Until this time (none: the end of the run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_s: Option<f64>,
}

fn one() -> f64 {
    1.0
}

fn is_one(p: &f64) -> bool {
    *p == 1.0
}

fn constant() -> Distribution {
    Distribution::Constant
}

fn is_constant(d: &Distribution) -> bool {
    *d == Distribution::Constant
}

/// An extra-delay entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelayFault {
    /// The probability that a message is delayed (default 1: every message).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub probability: f64,
    /// The extra delay's mean, milliseconds.
    pub mean_ms: f64,
    /// Its distribution (default `constant`: always `mean_ms`), with `cv` or `shape` as for the
    /// straggler jitter.
    #[serde(default = "constant", skip_serializing_if = "is_constant")]
    pub distribution: Distribution,
    /// Coefficient of variation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cv: Option<f64>,
    /// Shape (gamma, Pareto).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<f64>,
    /// Only these links.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links: Option<Vec<LinkSpec>>,
    /// Only links to or from these workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<WorkerSet>,
    /// From this time on, seconds (default 0).
    #[serde(default)]
    pub start_s: f64,
    /// Until this time (none: the end of the run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_s: Option<f64>,
}

/// The fault kinds, as an algorithm states which it handles
/// ([`crate::algorithms::AlgorithmSpec::fault_support`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// A crash without rejoin.
    Crash,
    /// A crash with rejoin.
    Rejoin,
    /// A link-down window.
    LinkDown,
    /// Random message loss.
    Loss,
    /// Message duplication.
    Duplicate,
    /// Extra message delay.
    Delay,
}

impl FaultKind {
    /// The `kind` string (`rejoin` is a crash with `rejoin_after_s`).
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Crash => "crash",
            FaultKind::Rejoin => "crash with rejoin_after_s",
            FaultKind::LinkDown => "link-down",
            FaultKind::Loss => "loss",
            FaultKind::Duplicate => "duplicate",
            FaultKind::Delay => "delay",
        }
    }
}

/// What an algorithm does with a fault kind: `Ok(())` when it handles it (as its documentation
/// says), else why not.
pub type FaultSupport = Result<(), &'static str>;

impl FaultConfig {
    /// The entry's kind.
    pub fn kind(&self) -> FaultKind {
        match self {
            FaultConfig::Crash(c) if c.rejoin_after_s.is_some() => FaultKind::Rejoin,
            FaultConfig::Crash(_) => FaultKind::Crash,
            FaultConfig::LinkDown(_) => FaultKind::LinkDown,
            FaultConfig::Loss(_) => FaultKind::Loss,
            FaultConfig::Duplicate(_) => FaultKind::Duplicate,
            FaultConfig::Delay(_) => FaultKind::Delay,
            // An availability trace brings workers back: the algorithm must handle rejoins.
            FaultConfig::Availability(_) => FaultKind::Rejoin,
        }
    }

    /// What the entry is, for an algorithm's refusal: its kind's name, or for an availability
    /// trace what it amounts to.
    pub fn describe(&self) -> &'static str {
        match self {
            FaultConfig::Availability(_) => {
                "availability (a crash at each off interval and a rejoin at its end)"
            }
            other => other.kind().name(),
        }
    }

    /// Checks the entry against a cluster of `n` workers; `path` is where it sits
    /// (`faults[2]`).
    pub fn validate(&self, n: usize, path: &str) -> Result<(), ConfigError> {
        let at = |k: &str| format!("{path}.{k}");
        match self {
            FaultConfig::Crash(c) => {
                c.workers.validate(n, &at("workers"))?;
                let given = [
                    c.at_s.is_some(),
                    c.mtbf_s.is_some(),
                    c.mtbf_preset.is_some(),
                ];
                match given.iter().filter(|g| **g).count() {
                    0 => {
                        return Err(ConfigError::new(
                            &at("at_s"),
                            "a crash needs its time: at_s, or mtbf_s (or mtbf_preset) for random crashes",
                        )
                        .hint("at_s = 0.5 crashes the workers at 0.5 s"));
                    }
                    1 => {}
                    _ => {
                        let second = if c.at_s.is_some() && c.mtbf_s.is_some() {
                            "mtbf_s"
                        } else {
                            "mtbf_preset"
                        };
                        return Err(ConfigError::new(
                            &at(second),
                            "a crash takes one of at_s, mtbf_s and mtbf_preset",
                        )
                        .hint(
                            "at_s crashes at a given time; mtbf_s or mtbf_preset at random times",
                        ));
                    }
                }
                if let Some(t) = c.at_s {
                    seconds(t, &at("at_s"), false)?;
                }
                if let Some(m) = c.mtbf_s {
                    seconds(m, &at("mtbf_s"), true)?;
                }
                if let Some(k) = c.chips_per_worker {
                    if c.at_s.is_some() {
                        return Err(ConfigError::new(
                            &at("chips_per_worker"),
                            "chips_per_worker scales a mean time between failures, but this crash is at a fixed at_s",
                        )
                        .hint("use it with mtbf_s or mtbf_preset"));
                    }
                    if k == 0 {
                        return Err(ConfigError::new(
                            &at("chips_per_worker"),
                            "a worker stands for at least one chip, got 0",
                        ));
                    }
                }
                if let Some(r) = c.rejoin_after_s {
                    seconds(r, &at("rejoin_after_s"), true)?;
                }
                if c.rejoin_state != RejoinState::Last && c.rejoin_after_s.is_none() {
                    return Err(ConfigError::new(
                        &at("rejoin_state"),
                        "rejoin_state says how a worker rejoins, but it never does: rejoin_after_s \
                         is not set",
                    )
                    .hint("add rejoin_after_s = 0.1, or leave rejoin_state out"));
                }
            }
            FaultConfig::LinkDown(l) => {
                let given = [l.links.is_some(), l.workers.is_some(), l.groups.is_some()];
                if given.iter().filter(|&&g| g).count() != 1 {
                    return Err(ConfigError::new(
                        path,
                        "a link-down entry takes exactly one of links, workers and groups",
                    )
                    .hint(
                        "links = [\"0 <-> 1\"], workers = [2] (all its links) or groups = [[0, 1], [2, 3]] (a partition)",
                    ));
                }
                scope(&l.links, &l.workers, n, path)?;
                if let Some(groups) = &l.groups {
                    check_groups(groups, n, &at("groups"))?;
                }
                window(l.start_s, l.end_s, &at)?;
            }
            FaultConfig::Loss(m) | FaultConfig::Duplicate(m) => {
                probability(m.probability, &at("probability"))?;
                scope(&m.links, &m.workers, n, path)?;
                window(m.start_s, m.end_s, &at)?;
            }
            FaultConfig::Delay(d) => {
                probability(d.probability, &at("probability"))?;
                d.variate(path)?;
                scope(&d.links, &d.workers, n, path)?;
                window(d.start_s, d.end_s, &at)?;
            }
            FaultConfig::Availability(a) => {
                if a.path.trim().is_empty() {
                    return Err(ConfigError::new(
                        &at("path"),
                        "an availability entry needs the CSV file of the workers' off intervals",
                    )
                    .hint(crate::fault::availability::HINT));
                }
            }
        }
        Ok(())
    }
}

impl DelayFault {
    /// The delay's sampler, in milliseconds, checked (the mean at most the longest time a
    /// scenario may give).
    pub(crate) fn variate(&self, path: &str) -> Result<Variate, ConfigError> {
        let at = |k: &str| format!("{path}.{k}");
        SimTime::checked_from_f64(self.mean_ms, TimeUnit::Millis, &at("mean_ms"))?;
        Variate::new(
            self.distribution,
            self.mean_ms,
            "mean_ms",
            self.cv,
            self.shape,
            &at,
        )
    }
}

fn seconds(v: f64, path: &str, nonzero: bool) -> Result<SimTime, ConfigError> {
    if !v.is_finite() || v < 0.0 || (nonzero && v == 0.0) {
        let what = if nonzero {
            "positive"
        } else {
            "zero or positive"
        };
        return Err(ConfigError::new(
            path,
            format!("must be a {what} number of seconds, got {v}"),
        ));
    }
    SimTime::checked_from_secs_f64(v, path)
}

fn probability(p: f64, path: &str) -> Result<(), ConfigError> {
    if !(0.0..=1.0).contains(&p) {
        return Err(
            ConfigError::new(path, format!("a probability must be in [0, 1], got {p}"))
                .hint("probability = 0.01 affects one message in a hundred"),
        );
    }
    Ok(())
}

fn scope(
    links: &Option<Vec<LinkSpec>>,
    workers: &Option<WorkerSet>,
    n: usize,
    path: &str,
) -> Result<(), ConfigError> {
    if links.is_some() && workers.is_some() {
        return Err(ConfigError::new(
            &format!("{path}.workers"),
            "an entry takes links or workers, not both",
        ));
    }
    if let Some(w) = workers {
        w.validate(n, &format!("{path}.workers"))?;
    }
    for (i, l) in links.iter().flatten().enumerate() {
        let at = format!("{path}.links[{i}]");
        if l.src == l.dst {
            return Err(ConfigError::new(
                &at,
                format!("the link {l} connects worker {} to itself", l.src),
            ));
        }
        if let Some(bad) = [l.src, l.dst].into_iter().find(|&v| v >= n) {
            return Err(ConfigError::new(
                &at,
                format!("the link {l} names worker {bad}, but workers are 0..{n}"),
            )
            .hint(format!(
                "worker indices run from 0 to {}",
                n.saturating_sub(1)
            )));
        }
    }
    Ok(())
}

fn check_groups(groups: &[Vec<usize>], n: usize, path: &str) -> Result<(), ConfigError> {
    if groups.len() < 2 && groups.iter().map(Vec::len).sum::<usize>() == n {
        return Err(ConfigError::new(
            path,
            "a partition needs at least two groups (one group holding every worker cuts nothing)",
        )
        .hint("groups = [[0, 1], [2, 3]] cuts the links between {0, 1} and {2, 3}"));
    }
    let mut seen = vec![false; n];
    for (g, group) in groups.iter().enumerate() {
        if group.is_empty() {
            return Err(ConfigError::new(
                &format!("{path}[{g}]"),
                "a group cannot be empty",
            ));
        }
        for (k, &w) in group.iter().enumerate() {
            let at = format!("{path}[{g}][{k}]");
            if w >= n {
                return Err(ConfigError::new(
                    &at,
                    format!("worker {w} does not exist: workers are 0..{n}"),
                )
                .hint(format!(
                    "worker indices run from 0 to {}",
                    n.saturating_sub(1)
                )));
            }
            if std::mem::replace(&mut seen[w], true) {
                return Err(
                    ConfigError::new(&at, format!("worker {w} is in two groups"))
                        .hint("each worker belongs to one group of the partition"),
                );
            }
        }
    }
    Ok(())
}
