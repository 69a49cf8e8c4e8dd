//! The `[cluster]` section: workers, base step times, groups and straggler entries.

use serde::{Deserialize, Serialize};

use crate::clock::time::{CLOCK_HINT, SimTime, TimeUnit, num};
use crate::cluster::workerset::WorkerSet;
use crate::env::BuildEnv;
use crate::error::ConfigError;

pub use crate::cluster::stragglers::StragglerConfig;

/// The most workers a cluster may have: 2^20. Every per-worker table is sized by it, so a typo
/// such as `workers = 100000000` is refused at once instead of exhausting memory.
pub const MAX_WORKERS: usize = 1 << 20;

/// The base step time when the scenario gives none, in milliseconds.
pub const DEFAULT_STEP_TIME_MS: f64 = 10.0;

/// The `[cluster]` section of a scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Number of workers (at least 2).
    pub workers: usize,
    /// Base time of one minibatch step, in milliseconds (default 10 when `device_tflops` is not
    /// set either).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_time_ms: Option<f64>,
    /// Sustained speed of every worker's device, in TFLOP/s: the base step time is derived from
    /// the model's FLOPs per sample and the batch size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_tflops: Option<f64>,
    /// Training FLOPs of one sample (forward and backward); overrides the model's own count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flops_per_sample: Option<f64>,
    /// The rate at which a node's host work (an algorithm's arithmetic outside its gradient
    /// steps: an outer step, a compression) reads and writes memory, in GB/s; unset, moving
    /// bytes is free ([`crate::cluster::host`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_gbps: Option<f64>,
    /// The rate of host work's floating-point operations (PowerSGD's matrix products), in
    /// TFLOP/s; unset, arithmetic is free.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_tflops: Option<f64>,
    /// Per-group base times (heterogeneous hardware); the last group covering a worker wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupConfig>,
    /// Straggler models; each applies to a set of workers, and their effects combine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stragglers: Vec<StragglerConfig>,
}

impl ClusterConfig {
    /// `workers` workers with the default base time and no straggler.
    pub fn new(workers: usize) -> Self {
        ClusterConfig {
            workers,
            step_time_ms: None,
            device_tflops: None,
            flops_per_sample: None,
            host_gbps: None,
            host_tflops: None,
            groups: Vec::new(),
            stragglers: Vec::new(),
        }
    }

    /// Sets the base step time of every worker, in milliseconds.
    pub fn with_step_time_ms(mut self, ms: f64) -> Self {
        self.step_time_ms = Some(ms);
        self
    }

    /// Adds a straggler entry.
    pub fn with_straggler(mut self, s: StragglerConfig) -> Self {
        self.stragglers.push(s);
        self
    }
}

/// One `[[cluster.groups]]` entry: the base time of a set of workers, given directly or as a
/// device speed.
///
/// ```toml
/// [[cluster.groups]]
/// workers = [0, 1]
/// step_time_ms = 25.0
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    /// The workers of the group.
    pub workers: WorkerSet,
    /// Their base step time, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_time_ms: Option<f64>,
    /// Their device's sustained speed, in TFLOP/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_tflops: Option<f64>,
}

/// How a base time is specified.
#[derive(Clone, Copy)]
enum Speed {
    StepMs(f64),
    Tflops(f64),
}

fn speed(
    step_time_ms: Option<f64>,
    device_tflops: Option<f64>,
    prefix: &str,
    required: bool,
) -> Result<Option<Speed>, ConfigError> {
    let at = |k: &str| format!("{prefix}.{k}");
    match (step_time_ms, device_tflops) {
        (Some(_), Some(_)) => Err(ConfigError::new(
            &at("device_tflops"),
            "give the base step time directly (step_time_ms) or as a device speed (device_tflops), not both",
        )
        .hint("remove one of step_time_ms and device_tflops")),
        (Some(ms), None) if ms.is_finite() && ms > 0.0 => {
            SimTime::checked_nonzero_from_f64(ms, TimeUnit::Millis, &at("step_time_ms"))?;
            Ok(Some(Speed::StepMs(ms)))
        }
        (Some(ms), None) => Err(ConfigError::new(
            &at("step_time_ms"),
            format!("step_time_ms must be a positive number of milliseconds, got {ms}"),
        )
        .hint("step_time_ms = 10.0 is one 10 ms minibatch step")),
        (None, Some(t)) if t.is_finite() && t > 0.0 => Ok(Some(Speed::Tflops(t))),
        (None, Some(t)) => Err(ConfigError::new(
            &at("device_tflops"),
            format!("device_tflops must be a positive number of TFLOP/s, got {t}"),
        )
        .hint("the sustained speed of the device on this model, e.g. 100.0 for a modern GPU")),
        (None, None) if required => Err(ConfigError::new(
            &at("step_time_ms"),
            "a group must set its base time",
        )
        .hint("set step_time_ms or device_tflops in this group")),
        (None, None) => Ok(None),
    }
}

impl ClusterConfig {
    /// Checks every value; errors carry the field's path from the scenario's root
    /// (`cluster.stragglers[2].end_s`). Trace files and the FLOP count are checked by
    /// [`Cluster::new`](super::Cluster::new), which knows where to find them.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let n = self.workers;
        if n < 2 {
            return Err(ConfigError::new(
                "cluster.workers",
                format!("workers must be at least 2, got {n}"),
            )
            .hint("a distributed run needs two or more workers"));
        }
        if n > MAX_WORKERS {
            return Err(ConfigError::new(
                "cluster.workers",
                format!("workers must be at most {MAX_WORKERS} (2^20), got {n}"),
            )
            .hint(
                "the papers' clusters have 16 to 256 workers; dasim's benchmarks go to 100,000",
            ));
        }
        speed(self.step_time_ms, self.device_tflops, "cluster", false)?;
        if let Some(f) = self.flops_per_sample
            && !(f.is_finite() && f > 0.0)
        {
            return Err(ConfigError::new(
                "cluster.flops_per_sample",
                format!("flops_per_sample must be a positive number, got {f}"),
            )
            .hint(
                "training FLOPs of one sample, about 3× the forward pass: 1.2e10 for ResNet-50",
            ));
        }
        for (key, rate, unit, hint) in [
            (
                "host_gbps",
                self.host_gbps,
                "GB/s",
                "the memory bandwidth of the device that does the host work: about 3000 for an H100",
            ),
            (
                "host_tflops",
                self.host_tflops,
                "TFLOP/s",
                "the device's sustained speed on the host work's matrix products, e.g. 100.0",
            ),
        ] {
            if let Some(r) = rate
                && !(r.is_finite() && r > 0.0)
            {
                return Err(ConfigError::new(
                    &format!("cluster.{key}"),
                    format!("{key} must be a positive number of {unit}, got {r}"),
                )
                .hint(hint));
            }
        }
        for (i, g) in self.groups.iter().enumerate() {
            let prefix = format!("cluster.groups[{i}]");
            g.workers.validate(n, &format!("{prefix}.workers"))?;
            speed(g.step_time_ms, g.device_tflops, &prefix, true)?;
        }
        for (i, s) in self.stragglers.iter().enumerate() {
            let prefix = format!("cluster.stragglers[{i}]");
            s.workers.validate(n, &format!("{prefix}.workers"))?;
            s.model.validate(&prefix)?;
        }
        Ok(())
    }

    /// The base step time of each worker (before stragglers and traces).
    pub(crate) fn base_times(&self, env: &BuildEnv) -> Result<Vec<SimTime>, ConfigError> {
        let n = self.workers;
        let default = speed(self.step_time_ms, self.device_tflops, "cluster", false)?
            .unwrap_or(Speed::StepMs(DEFAULT_STEP_TIME_MS));
        let mut speeds = vec![(default, "cluster".to_string()); n];
        for (i, g) in self.groups.iter().enumerate() {
            let prefix = format!("cluster.groups[{i}]");
            let s = speed(g.step_time_ms, g.device_tflops, &prefix, true)?
                .expect("a group's speed is required");
            for w in g
                .workers
                .resolve(n, env.seed, &format!("{prefix}.workers"))?
            {
                speeds[w] = (s, prefix.clone());
            }
        }
        speeds
            .into_iter()
            .map(|(s, prefix)| match s {
                Speed::StepMs(ms) => Ok(SimTime::from_millis_f64(ms)),
                Speed::Tflops(t) => {
                    let path = format!("{prefix}.device_tflops");
                    let flops = self.flops_per_sample.or(env.flops_per_sample).ok_or_else(|| {
                        ConfigError::new(
                            &path,
                            "a step time derived from a device speed needs the model's FLOPs per sample, which are not known",
                        )
                        .hint("set cluster.flops_per_sample, or give step_time_ms instead")
                    })?;
                    let batch = env.batch_size.ok_or_else(|| {
                        ConfigError::new(
                            &path,
                            "a step time derived from a device speed needs the batch size, which is not known",
                        )
                        .hint("give step_time_ms instead")
                    })?;
                    derived_step(flops, batch, t, &path)
                }
            })
            .collect()
    }
}

/// The base step time of a device of `tflops` TFLOP/s on `batch` samples of `flops` FLOPs each,
/// checked: at least 1 ns (a step that rounds to 0 ns would loop the run at one instant) and at
/// most [`SimTime::MAX_CONFIG`]. Errors are at `path` (the `device_tflops` key) and give the
/// range of speeds that fits.
fn derived_step(flops: f64, batch: usize, tflops: f64, path: &str) -> Result<SimTime, ConfigError> {
    let work = flops * batch as f64;
    let secs = work / (tflops * 1e12);
    let ns = secs * 1e9;
    let what = format!(
        "{path} = {} TFLOP/s on {} FLOPs per sample × a batch of {batch}",
        num(tflops),
        num(flops)
    );
    if ns < 1.0 {
        return Err(ConfigError::new(
            path,
            format!(
                "{what} gives a step of {} ns, shorter than 1 ns, the resolution of simulated time: \
                 at most {} TFLOP/s for this model and batch",
                num(ns),
                num(work / 1e3)
            ),
        )
        .hint("a step that rounds to 0 ns would make the run loop at one instant; check the device speed's unit (TFLOP/s)"));
    }
    if ns > SimTime::MAX_CONFIG.as_nanos() as f64 {
        return Err(ConfigError::new(
            path,
            format!(
                "{what} gives a step of {} s, more than simulated time can hold (at most {} s): \
                 at least {} TFLOP/s for this model and batch",
                num(secs),
                num(SimTime::max_config_in(TimeUnit::Seconds)),
                num(work / 1e3 / SimTime::MAX_CONFIG.as_nanos() as f64)
            ),
        )
        .hint(CLOCK_HINT));
    }
    Ok(SimTime::from_secs_f64(secs))
}
