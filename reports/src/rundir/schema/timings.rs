//! `timings.json`: how fast the host ran each algorithm ([`Timings`], [`HostTimings`]). Kept
//! apart from `summary.json` because none of it is a function of simulated events.

use serde::{Deserialize, Serialize};

use super::nan_if_null;

/// `timings.json`: the host, the execution settings and each algorithm's speed. Apart from
/// [`Summary`](super::Summary) because none of it is a function of the simulation: it changes
/// from run to run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Threads a flush was spread over.
    pub threads: usize,
    /// Requests per forward/backward pass at most; `None`: unlimited.
    pub max_batch: Option<usize>,
    /// The memory estimate made before the run, in bytes.
    pub memory_estimate_bytes: u64,
    /// The vector instructions this host's CPU kernels chose (`avx512f`, `avx2`, `sse2`, `neon`,
    /// or the architecture): runs on hosts with different values can differ in a model's last
    /// bits on `flex`, never in the timeline. Empty in a file written before it was recorded.
    #[serde(default)]
    pub cpu_kernels: String,
    /// One entry per algorithm, in scenario order.
    pub runs: Vec<HostTimings>,
}

/// How fast one algorithm ran on this host.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostTimings {
    /// The algorithm's label.
    pub algorithm: String,
    /// Host wall-clock time of the run, in seconds.
    #[serde(deserialize_with = "nan_if_null")]
    pub wall_time_s: f64,
    /// Host wall time in batched forward/backward passes, in seconds.
    #[serde(deserialize_with = "nan_if_null")]
    pub gradient_wall_s: f64,
    /// Host wall time evaluating, in seconds.
    #[serde(deserialize_with = "nan_if_null")]
    pub eval_wall_s: f64,
    /// Share of the wall time in gradient math (`gradient_wall_s / wall_time_s`).
    #[serde(deserialize_with = "nan_if_null")]
    pub gradient_share: f64,
    /// Forward/backward passes run: the flushes of `summary.json`, cut into groups by
    /// `--threads` and `--max-batch`.
    pub gradient_passes: u64,
    /// Worker steps per wall-clock second.
    #[serde(deserialize_with = "nan_if_null")]
    pub worker_steps_per_wall_s: f64,
    /// Simulated seconds per wall-clock second.
    #[serde(deserialize_with = "nan_if_null")]
    pub sim_s_per_wall_s: f64,
}
