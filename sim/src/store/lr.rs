//! Learning-rate schedules, shared by every algorithm.
//!
//! The learning rate in force at an instant is a function of the run's progress, never of
//! parameter values, so it cannot change the event timeline. Algorithms ask
//! [`crate::algorithm::World::lr_at`] (or [`crate::algorithm::Ctx::lr`]) for it when they apply a gradient:
//! a gradient is applied with the rate in force *when it is applied* (for a parameter server,
//! when the push reaches the server).
//!
//! ## The rule
//!
//! With base rate `η` (`optimizer.lr`), `n` workers and progress `p` (in the schedule's `unit`):
//!
//! ```text
//! peak  = η · s(n)               s(n) = 1 (none), n (linear), √n (sqrt)   scale_with_workers
//! lr(p) = peak · (f₀ + (1 − f₀) · p / W)                    if p < W    (linear warm-up)
//!       = peak                                              constant
//!       = peak · γ^#{m ∈ milestones : m ≤ p}               step
//!       = min_lr + (peak − min_lr) · (1 + cos(π·q)) / 2      cosine, q = min(1, (p − W)/(total − W))
//! ```
//!
//! `W` is `warmup` and `f₀` is `warmup_start_factor` (default 0: the warm-up starts from zero;
//! Goyal et al.'s gradual warm-up, from the single-worker rate to the scaled one, is
//! `scale_with_workers = "linear"` with `warmup_start_factor = 1/n`). Progress `p` is, by `unit`:
//!
//! - `epochs` (default): samples processed by all workers / training-set size (the run's
//!   [`crate::algorithm::World::epochs`]);
//! - `steps`: worker steps / workers, the mean number of steps per worker (the iteration index of
//!   a synchronous algorithm);
//! - `seconds`: simulated seconds.
//!
//! ## Whose progress: `progress = "global" | "node"`
//!
//! With `progress = "global"` (the default) every application reads the run's progress above,
//! whoever applies it. With `progress = "node"` each worker's schedule follows its own counter,
//! as each node's scheduler does in the LAP-SGD/LPP-SGD reference (`bapi/LPP-SGD`,
//! `train/LAPSGD.py`: `scheduler.step(minibatches / trainloaderlength)` on the node's own
//! minibatch counter). For worker `i`, with `c_i` its steps so far (gradients of its own applied,
//! this one not yet counted, as the reference reads its counter before incrementing it):
//!
//! - `epochs`: `c_i · batch / (train size / n)`, the node's steps over its share of the training
//!   set, as the reference's `trainloaderlength` is the length of the node's
//!   `DistributedSampler` share, `⌈N / n⌉` samples, whatever the sizes of dasim's own shards;
//! - `steps`: `c_i`;
//! - `seconds` is one clock for every node, so `"node"` would change nothing: it is refused.
//!
//! With equal step counts (equal speeds, or any synchronous algorithm) the two are equal; they
//! differ under a straggler, whose own schedule lags the run's. Which worker an application
//! belongs to, and which algorithms refuse `"node"`, is each algorithm's (see
//! [`crate::algorithm::World::lr_for`] and the book's algorithms chapter).
//!
//! ```toml
//! [optimizer]
//! lr = 0.05
//! momentum = 0.9
//! nesterov = true
//! scale_with_workers = "sqrt"
//! schedule = { kind = "cosine", unit = "epochs", total = 30.0, warmup = 1.0 }
//! ```

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

/// How a schedule's curve is shaped after the warm-up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScheduleKind {
    /// The peak rate throughout.
    #[default]
    Constant,
    /// Multiplied by `gamma` at each milestone.
    Step,
    /// Cosine decay from the peak to `min_lr` at `total`.
    Cosine,
}

/// What a schedule's progress is measured in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScheduleUnit {
    /// Samples processed by all workers / training-set size.
    #[default]
    Epochs,
    /// Worker steps / workers.
    Steps,
    /// Simulated seconds.
    Seconds,
}

impl ScheduleUnit {
    fn name(self) -> &'static str {
        match self {
            ScheduleUnit::Epochs => "epochs",
            ScheduleUnit::Steps => "steps",
            ScheduleUnit::Seconds => "seconds",
        }
    }
}

/// Whose progress a schedule follows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScheduleProgress {
    /// The run's progress: all workers' steps together.
    #[default]
    Global,
    /// The applying worker's own step counter (the LAP-SGD reference's per-node schedulers).
    Node,
}

impl ScheduleProgress {
    fn is_global(&self) -> bool {
        *self == ScheduleProgress::Global
    }
}

/// How the base rate scales with the number of workers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LrScaling {
    /// `peak = lr`.
    #[default]
    None,
    /// `peak = lr · n` (the linear scaling rule of Goyal et al., 2017).
    Linear,
    /// `peak = lr · √n`.
    Sqrt,
}

impl LrScaling {
    /// The factor `s(n)`.
    pub fn factor(self, workers: usize) -> f64 {
        match self {
            LrScaling::None => 1.0,
            LrScaling::Linear => workers as f64,
            LrScaling::Sqrt => (workers as f64).sqrt(),
        }
    }
}

fn default_gamma() -> f64 {
    0.1
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// The `optimizer.schedule` table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LrSchedule {
    /// `constant`, `step` or `cosine`.
    #[serde(default)]
    pub kind: ScheduleKind,
    /// What progress is measured in: `epochs`, `steps` or `seconds`.
    #[serde(default)]
    pub unit: ScheduleUnit,
    /// Whose progress: `global` (the run's, default) or `node` (the applying worker's own).
    #[serde(default, skip_serializing_if = "ScheduleProgress::is_global")]
    pub progress: ScheduleProgress,
    /// Length of the linear warm-up, in `unit` (0: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub warmup: f64,
    /// The rate at the start of the warm-up, as a fraction of the peak, in `[0, 1]`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub warmup_start_factor: f64,
    /// Step: where the rate is multiplied by `gamma`, in `unit`, increasing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub milestones: Vec<f64>,
    /// Step: the factor applied at each milestone, in `(0, 1]`.
    #[serde(default = "default_gamma")]
    pub gamma: f64,
    /// Cosine: where the decay ends, in `unit` (after the warm-up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// Cosine: the rate at and after `total`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub min_lr: f64,
}

impl Default for LrSchedule {
    fn default() -> Self {
        LrSchedule {
            kind: ScheduleKind::Constant,
            unit: ScheduleUnit::Epochs,
            progress: ScheduleProgress::Global,
            warmup: 0.0,
            warmup_start_factor: 0.0,
            milestones: Vec::new(),
            gamma: default_gamma(),
            total: None,
            min_lr: 0.0,
        }
    }
}

/// Where a run stands, in every unit a schedule may use.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrainingProgress {
    /// Samples processed / training-set size.
    pub epochs: f64,
    /// Worker steps / workers.
    pub steps: f64,
    /// Simulated seconds.
    pub seconds: f64,
}

impl LrSchedule {
    /// Whether this is the default (constant, no warm-up): omitted when a scenario is written.
    pub fn is_default(&self) -> bool {
        *self == LrSchedule::default()
    }

    /// Checks every value; `prefix` is the table's path (`optimizer.schedule`).
    pub fn validate(&self, prefix: &str) -> Result<(), ConfigError> {
        let at = |k: &str| format!("{prefix}.{k}");
        let unit = self.unit.name();
        if self.progress == ScheduleProgress::Node && self.unit == ScheduleUnit::Seconds {
            return Err(ConfigError::new(
                &at("progress"),
                "progress = \"node\" follows each worker's own steps, but seconds are one clock for every worker",
            )
            .hint("use unit = \"steps\" or \"epochs\" with progress = \"node\", or leave progress out"));
        }
        if !(self.warmup.is_finite() && self.warmup >= 0.0) {
            return Err(ConfigError::new(
                &at("warmup"),
                format!(
                    "the warm-up must be zero or a positive number of {unit}, got {}",
                    self.warmup
                ),
            ));
        }
        if !(0.0..=1.0).contains(&self.warmup_start_factor) {
            return Err(ConfigError::new(
                &at("warmup_start_factor"),
                format!(
                    "warmup_start_factor must be in [0, 1], got {}",
                    self.warmup_start_factor
                ),
            )
            .hint("the warm-up starts at this fraction of the peak rate; 0 starts from zero"));
        }
        if !(self.min_lr.is_finite() && self.min_lr >= 0.0) {
            return Err(ConfigError::new(
                &at("min_lr"),
                format!("min_lr must be zero or positive, got {}", self.min_lr),
            ));
        }
        match self.kind {
            ScheduleKind::Constant | ScheduleKind::Cosine if !self.milestones.is_empty() => {
                return Err(ConfigError::new(
                    &at("milestones"),
                    "milestones belong to a step schedule",
                )
                .hint("set kind = \"step\", or remove milestones"));
            }
            ScheduleKind::Step => {
                if self.milestones.is_empty() {
                    return Err(ConfigError::new(
                        &at("milestones"),
                        "a step schedule needs at least one milestone",
                    )
                    .hint(format!(
                        "e.g. milestones = [30.0, 60.0] (in {unit}) with gamma = 0.1"
                    )));
                }
                for (i, w) in self.milestones.windows(2).enumerate() {
                    if w[1] <= w[0] {
                        return Err(ConfigError::new(
                            &format!("{prefix}.milestones[{}]", i + 1),
                            format!("milestones must increase, but {} follows {}", w[1], w[0]),
                        ));
                    }
                }
                if let Some((i, m)) = self
                    .milestones
                    .iter()
                    .enumerate()
                    .find(|(_, m)| !(m.is_finite() && **m > 0.0))
                {
                    return Err(ConfigError::new(
                        &format!("{prefix}.milestones[{i}]"),
                        format!("a milestone must be a positive number of {unit}, got {m}"),
                    ));
                }
                if !(self.gamma > 0.0 && self.gamma <= 1.0) {
                    return Err(ConfigError::new(
                        &at("gamma"),
                        format!("gamma must be in (0, 1], got {}", self.gamma),
                    )
                    .hint("gamma = 0.1 divides the rate by 10 at each milestone"));
                }
            }
            _ => {}
        }
        if self.kind == ScheduleKind::Cosine {
            match self.total {
                None => {
                    return Err(ConfigError::new(
                        &at("total"),
                        "a cosine schedule needs `total`, where the decay ends",
                    )
                    .hint(format!("e.g. total = 30.0 (in {unit})")));
                }
                Some(t) if !(t.is_finite() && t > self.warmup) => {
                    return Err(ConfigError::new(
                        &at("total"),
                        format!(
                            "total must be a number of {unit} after the warm-up ({}), got {t}",
                            self.warmup
                        ),
                    ));
                }
                Some(_) => {}
            }
        } else if self.total.is_some() {
            return Err(
                ConfigError::new(&at("total"), "`total` belongs to a cosine schedule")
                    .hint("set kind = \"cosine\", or remove total"),
            );
        }
        Ok(())
    }

    /// Whether the rate is the peak rate at any progress (a constant schedule without warm-up):
    /// then [`LrSchedule::at`] needs no progress, which is not free to compute at every step.
    pub fn is_flat(&self) -> bool {
        self.kind == ScheduleKind::Constant && (self.warmup <= 0.0 || self.warmup.is_nan())
    }

    /// The rate at progress `p`, for a peak rate `peak` (see the module's rule).
    pub fn at(&self, peak: f64, p: &TrainingProgress) -> f64 {
        let x = match self.unit {
            ScheduleUnit::Epochs => p.epochs,
            ScheduleUnit::Steps => p.steps,
            ScheduleUnit::Seconds => p.seconds,
        };
        if x < self.warmup {
            let f0 = self.warmup_start_factor;
            return peak * (f0 + (1.0 - f0) * x / self.warmup);
        }
        match self.kind {
            ScheduleKind::Constant => peak,
            ScheduleKind::Step => {
                let passed = self.milestones.iter().filter(|&&m| m <= x).count();
                peak * self.gamma.powi(passed as i32)
            }
            ScheduleKind::Cosine => {
                let total = self.total.unwrap_or(self.warmup + 1.0);
                let q = ((x - self.warmup) / (total - self.warmup)).clamp(0.0, 1.0);
                self.min_lr + (peak - self.min_lr) * (1.0 + (std::f64::consts::PI * q).cos()) / 2.0
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &LrSchedule, x: f64) -> f64 {
        s.at(
            1.0,
            &TrainingProgress {
                epochs: x,
                steps: x,
                seconds: x,
            },
        )
    }

    #[test]
    fn warmup_then_step() {
        let s = LrSchedule {
            kind: ScheduleKind::Step,
            warmup: 2.0,
            milestones: vec![5.0, 8.0],
            ..Default::default()
        };
        s.validate("optimizer.schedule").unwrap();
        assert_eq!(at(&s, 0.0), 0.0);
        assert_eq!(at(&s, 1.0), 0.5);
        assert_eq!(at(&s, 4.0), 1.0);
        assert!((at(&s, 5.0) - 0.1).abs() < 1e-15);
        assert!((at(&s, 9.0) - 0.01).abs() < 1e-15);
    }

    #[test]
    fn cosine_ends_at_min_lr() {
        let s = LrSchedule {
            kind: ScheduleKind::Cosine,
            total: Some(10.0),
            min_lr: 0.1,
            ..Default::default()
        };
        s.validate("optimizer.schedule").unwrap();
        assert_eq!(at(&s, 0.0), 1.0);
        assert!((at(&s, 5.0) - 0.55).abs() < 1e-12);
        assert_eq!(at(&s, 10.0), 0.1);
        assert_eq!(at(&s, 20.0), 0.1);
    }

    #[test]
    fn bad_values_name_their_key() {
        let s = LrSchedule {
            kind: ScheduleKind::Cosine,
            ..Default::default()
        };
        assert_eq!(
            s.validate("optimizer.schedule")
                .unwrap_err()
                .path
                .to_string(),
            "optimizer.schedule.total"
        );
        let s = LrSchedule {
            kind: ScheduleKind::Step,
            milestones: vec![3.0, 2.0],
            ..Default::default()
        };
        assert_eq!(
            s.validate("optimizer.schedule")
                .unwrap_err()
                .path
                .to_string(),
            "optimizer.schedule.milestones[1]"
        );
    }
}
