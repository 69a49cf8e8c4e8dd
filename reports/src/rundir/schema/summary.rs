//! `summary.json`: what a run of a scenario gave ([`Summary`]), one entry per algorithm
//! ([`AlgorithmSummary`]), and the measurements an entry holds: integer statistics, time to
//! target, utilization and what the faults did.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{CheckRow, nan_if_null};

/// `summary.json`: what a run of a scenario gave, one entry per algorithm. Every field is a
/// function of simulated events (the host's speed goes to [`Timings`](super::Timings)), so two
/// runs of a scenario on flex write the same bytes.
///
/// Fields added since the first run directories read as their default when absent, so older
/// directories still load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Scenario name.
    pub scenario: String,
    /// Scenario seed.
    pub seed: u64,
    /// dasim's version.
    pub dasim_version: String,
    /// The git revision dasim was built from; `None` when unknown.
    pub git_revision: Option<String>,
    /// SHA-256 of the resolved `scenario.toml` of the run directory (hex); empty when unknown.
    #[serde(default)]
    pub scenario_sha256: String,
    /// Backend used.
    pub backend: String,
    /// The device, in words.
    pub device: String,
    /// Workers.
    pub workers: usize,
    /// Parameters per replica.
    pub params: usize,
    /// The model was a `timing` model: it carried a model's size and cost through the run and
    /// computed no gradient, so no loss, accuracy or consensus was measured (they are `null`).
    /// Absent for a model trained for real.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timing_only: bool,
    /// Proxy mode (`[timed_as]`): the model trained is `[model]`, but steps and messages cost
    /// what this model's would, in words (`resnet50 (25557032 parameters, …)`). Absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_as: Option<String>,
    /// One entry per algorithm, in scenario order.
    pub runs: Vec<AlgorithmSummary>,
    /// The verdicts of the scenario's `[[expect]]` entries, as in `checks.csv`; absent when
    /// the scenario has none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<CheckRow>,
}

impl Summary {
    /// The entry of the algorithm labelled `label`.
    pub fn run(&self, label: &str) -> Option<&AlgorithmSummary> {
        self.runs.iter().find(|r| r.algorithm == label)
    }
}

/// One algorithm's entry in `summary.json`.
///
/// A float that is not a number (an accuracy a regression does not have) is written as `null`
/// and read back as NaN.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlgorithmSummary {
    /// The algorithm's label: the scenario's `label`, else its kind. Every CSV row of the
    /// algorithm carries it in its `algorithm` column.
    pub algorithm: String,
    /// Kind of the algorithm (`allreduce`, `overlap-sgp`, ...).
    pub kind: String,
    /// The algorithm's `[[algorithms]]` entry as run, every default filled in: `kind`, `label`
    /// when the scenario gave one, and its options. Empty in run directories written before
    /// it was recorded.
    #[serde(default)]
    pub options: serde_json::Map<String, serde_json::Value>,
    /// The communication graph the algorithm ran on (the entry's own `topology`, else the
    /// scenario's `[topology]`), every default filled in. Empty in run directories written
    /// before it was recorded.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub topology: serde_json::Map<String, serde_json::Value>,
    /// The optimizer the algorithm ran with (the entry's own `optimizer`, else the scenario's
    /// `[optimizer]`): rate, momentum, schedule. Empty in run directories written before it was
    /// recorded.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub optimizer: serde_json::Map<String, serde_json::Value>,
    /// Backend used (`flex`, `wgpu`).
    pub backend: String,
    /// Why the run ended without a result to compare: `diverged` (the held-out loss went NaN,
    /// infinite or above `[run] divergence_loss`; the run stopped at that evaluation point) or
    /// `no-steps` (no worker completed a step: the final loss is the initial model's) or
    /// `stalled` (under `[[faults]]`, workers waited and no event could wake them). Absent for a
    /// run that ended normally.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<Stopped>,
    /// What `stopped` means for this run, in words (the algorithm, the simulated time, the
    /// loss); absent when `stopped` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Simulated time at the stop, in seconds.
    #[serde(deserialize_with = "nan_if_null")]
    pub sim_time_s: f64,
    /// Events handled.
    pub events: u64,
    /// Gradients applied, summed over workers.
    pub worker_steps: u64,
    /// Worker steps per simulated second.
    #[serde(deserialize_with = "nan_if_null")]
    pub steps_per_sim_s: f64,
    /// Samples processed / training-set size.
    #[serde(deserialize_with = "nan_if_null")]
    pub epochs: f64,
    /// Held-out loss of the average model at the stop.
    #[serde(deserialize_with = "nan_if_null")]
    pub final_loss: f64,
    /// Held-out accuracy of the average model at the stop (a language model's: next-token
    /// accuracy).
    #[serde(deserialize_with = "nan_if_null")]
    pub final_accuracy: f64,
    /// A language model's held-out perplexity at the stop, `exp(final_loss)` (the loss in nats
    /// per token); absent for the other models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_perplexity: Option<f64>,
    /// Messages sent.
    pub messages: u64,
    /// Bytes sent.
    pub bytes: u64,
    /// Flushes of the pending gradient requests (each one batched forward/backward pass unless
    /// the execution settings cut it into groups; see `timings.json`'s `gradient_passes`).
    pub gradient_flushes: u64,
    /// Gradients requested.
    pub gradient_requests: u64,
    /// Global staleness of every application of a gradient: the global iterations (gradients
    /// applied anywhere, each counted once, at its first application) between the read the
    /// gradient was computed on and this application; absent when no gradient was applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_staleness: Option<IntStats>,
    /// Row staleness of every application of a gradient: the updates the target row received
    /// between the read the gradient was computed on and this application; absent when no
    /// gradient was applied. (Named `staleness` before the global measure existed; read under
    /// either name.)
    #[serde(default, alias = "staleness", skip_serializing_if = "Option::is_none")]
    pub row_staleness: Option<IntStats>,
    /// Age in iterations of every mixed message (SGP, Overlap-SGP); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_age: Option<IntStats>,
    /// Per mixing step, the age in the receiver's iterations of the oldest message mixed in
    /// (SGP, Overlap-SGP); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mix_age: Option<IntStats>,
    /// The staleness between models of every applied gradient (DASGD's `|G_j Δ R|` at every
    /// application), from the algorithms that take this measurement (`model_staleness`: DASGD);
    /// absent for the others. Named `dasgd` in the file, for the paper that defines it.
    #[serde(default, rename = "dasgd", skip_serializing_if = "Option::is_none")]
    pub model_staleness: Option<AlgorithmStaleness>,
    /// Consensus distance of the worker replicas at the last evaluation point.
    #[serde(default = "not_measured", deserialize_with = "nan_if_null")]
    pub final_consensus: f64,
    /// `f(x) − f*` of the training objective at the last evaluation point, for models that know
    /// their optimum; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_suboptimality: Option<f64>,
    /// When the evaluated model first reached `[metrics]` targets.
    #[serde(default)]
    pub time_to_target: TimeToTarget,
    /// Fractions of worker-time in each activity, averaged over the workers.
    #[serde(default = "Utilization::not_measured")]
    pub utilization: Utilization,
    /// What the scenario's `[[faults]]` did to this run; absent without faults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faults: Option<FaultSummary>,
}

/// What a run's faults did ([`AlgorithmSummary::faults`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FaultSummary {
    /// Messages lost at random (`loss` entries).
    pub messages_lost: u64,
    /// Messages lost because their link was down (`link-down` entries).
    pub messages_lost_link_down: u64,
    /// Messages dropped because their receiver was down when they landed.
    pub messages_dropped_down: u64,
    /// Messages sent twice (`duplicate` entries; the copies are in `messages` and `bytes`).
    pub messages_duplicated: u64,
    /// Messages delayed (`delay` entries).
    pub messages_delayed: u64,
    /// Their extra delays, summed, in seconds.
    pub delay_total_s: f64,
    /// Worker crashes.
    pub crashes: u64,
    /// Worker rejoins.
    pub rejoins: u64,
    /// Per worker: simulated seconds down.
    pub down_time_s: Vec<f64>,
    /// Push-sum weight carried by lost and dropped messages (SGP, Overlap-SGP); absent for the
    /// other algorithms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mass_lost: Option<f64>,
    /// What the algorithm's own fault handling did, by name: AD-PSGD's `partner_timeouts`,
    /// `late_replies` and `replies_lost`; the parameter server's `retransmissions`,
    /// `pushes_dropped` and `gradients_dropped`; DASGD's `applications_lost`. Absent when the
    /// algorithm counts nothing.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub algorithm_counts: BTreeMap<String, u64>,
}

/// Why a run ended without a result to compare ([`AlgorithmSummary::stopped`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stopped {
    /// The held-out loss diverged; the run stopped at the evaluation point that saw it.
    Diverged,
    /// No worker completed a step before the stop: nothing was trained.
    NoSteps,
    /// Workers waited and no event could wake them (a crashed worker, a partition, a lost
    /// message a synchronous algorithm needs); the run stopped there.
    Stalled,
}

impl Stopped {
    /// The name written in `summary.json`.
    pub fn name(self) -> &'static str {
        match self {
            Stopped::Diverged => "diverged",
            Stopped::NoSteps => "no-steps",
            Stopped::Stalled => "stalled",
        }
    }
}

/// Count, mean, 99th percentile and maximum of integer measurements (staleness in updates,
/// message ages in iterations).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct IntStats {
    /// Number of measurements.
    pub count: u64,
    /// Their mean.
    #[serde(deserialize_with = "nan_if_null")]
    pub mean: f64,
    /// Their 99th percentile, nearest rank: the smallest value with at least
    /// `ceil(0.99 · count)` measurements at or below it.
    pub p99: u64,
    /// Their maximum.
    pub max: u64,
}

/// The staleness an algorithm measures itself (DASGD's between models): count, mean and
/// maximum.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlgorithmStaleness {
    /// Number of measurements.
    pub count: u64,
    /// Their mean.
    #[serde(deserialize_with = "nan_if_null")]
    pub mean: f64,
    /// Their maximum.
    pub max: u64,
}

/// Simulated seconds until the evaluated model first reached `[metrics] target_accuracy` and
/// `target_loss`; `None` when the target is not set or was not reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeToTarget {
    /// First evaluation point with held-out accuracy at least `target_accuracy`.
    pub accuracy_s: Option<f64>,
    /// First evaluation point with held-out loss at most `target_loss`.
    pub loss_s: Option<f64>,
}

/// Fractions of worker-time (each worker's time divided by the run's simulated time, averaged
/// over workers); they sum to 1 (with `down` where it is present).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Utilization {
    /// Computing gradients.
    #[serde(deserialize_with = "nan_if_null")]
    pub compute: f64,
    /// Waiting on its own transfers.
    #[serde(deserialize_with = "nan_if_null")]
    pub communicate: f64,
    /// Waiting for a peer.
    #[serde(deserialize_with = "nan_if_null")]
    pub blocked: f64,
    /// Nothing to do.
    #[serde(deserialize_with = "nan_if_null")]
    pub idle: f64,
    /// Down (crashed by a `[[faults]]` entry, not rejoined): only for a run with `[[faults]]`,
    /// absent otherwise (and in summaries written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down: Option<f64>,
}

impl Utilization {
    /// Every fraction NaN: what a summary written before utilization was recorded reads as.
    pub fn not_measured() -> Utilization {
        let x = f64::NAN;
        Utilization {
            compute: x,
            communicate: x,
            blocked: x,
            idle: x,
            down: None,
        }
    }
}

/// NaN: what a float that the first run directories did not record reads as.
fn not_measured() -> f64 {
    f64::NAN
}
