//! The `[optimizer]` section: the local update every algorithm applies, and its learning rate.
//!
//!
//! The store applies the `[optimizer]` section's local update ([`OptimizerConfig`]); the
//! algorithm passes the learning rate in force ([`crate::algorithm::World::lr_at`]). For row `x`, its
//! momentum buffer `v`, gradient `g`, rate `η`, momentum `μ`, weight decay `λ`, coordinate by
//! coordinate:
//!
//! ```text
//! d ← g + λ·x
//! v ← μ·v + d
//! x ← x − η·(d + μ·v)     (nesterov = true)
//! x ← x − η·v             (nesterov = false)
//! ```
//!
//! With `μ = 0` the buffer stays zero and the step is plain SGD, `x ← x − η·(g + λ·x)`.

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;
use crate::params::lr::{LrScaling, LrSchedule};

fn default_lr() -> f64 {
    0.1
}

fn is_no_scaling(s: &LrScaling) -> bool {
    *s == LrScaling::None
}

/// The `[optimizer]` section: the local update every algorithm applies, and its learning rate.
///
/// A step with gradient `g` on row `x` with momentum buffer `v` is described in the
/// [module documentation](self#the-optimizer-step); the rate in force comes from `lr`,
/// `scale_with_workers` and `schedule` (see [`crate::params::lr`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimizerConfig {
    /// Base learning rate η.
    #[serde(default = "default_lr")]
    pub lr: f64,
    /// Momentum μ in `[0, 1)`.
    #[serde(default)]
    pub momentum: f64,
    /// Nesterov momentum (needs `momentum > 0`).
    #[serde(default, skip_serializing_if = "crate::raw::is_false")]
    pub nesterov: bool,
    /// L2 weight decay λ.
    #[serde(default)]
    pub weight_decay: f64,
    /// How the base rate scales with the number of workers: `none`, `linear` or `sqrt`.
    #[serde(default, skip_serializing_if = "is_no_scaling")]
    pub scale_with_workers: LrScaling,
    /// The learning-rate schedule (default: constant).
    #[serde(default, skip_serializing_if = "LrSchedule::is_default")]
    pub schedule: LrSchedule,
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        OptimizerConfig {
            lr: default_lr(),
            momentum: 0.0,
            nesterov: false,
            weight_decay: 0.0,
            scale_with_workers: LrScaling::None,
            schedule: LrSchedule::default(),
        }
    }
}

impl OptimizerConfig {
    /// Checks every value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(ConfigError::new(
                "optimizer.lr",
                format!("the learning rate must be positive, got {}", self.lr),
            ));
        }
        if !(0.0..1.0).contains(&self.momentum) {
            return Err(ConfigError::new(
                "optimizer.momentum",
                format!("momentum must be in [0, 1), got {}", self.momentum),
            ));
        }
        if self.nesterov && self.momentum == 0.0 {
            return Err(ConfigError::new(
                "optimizer.nesterov",
                "Nesterov momentum needs a momentum above zero",
            )
            .hint("set optimizer.momentum, e.g. 0.9, or remove nesterov"));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return Err(ConfigError::new(
                "optimizer.weight_decay",
                format!(
                    "weight decay must be zero or positive, got {}",
                    self.weight_decay
                ),
            ));
        }
        self.schedule.validate("optimizer.schedule")
    }
}
