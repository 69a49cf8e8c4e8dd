//! The `[optimizer]` section: the local update every algorithm applies, and its learning rate.
//!
//! # The optimizer step
//!
//! The store applies the `[optimizer]` section's local update ([`OptimizerConfig`]); the
//! algorithm passes the learning rate in force ([`crate::algorithm::World::lr_at`]). Five rules
//! exist (`kind`); each keeps its state **per row** (per replica), and no operation but the step
//! itself reads or writes that state: averaging, mixing, message buffers and block copies move
//! parameters only, never moments, momentum buffers or step counts. (Only
//! [`crate::store::ReplicaStore::swap_optimizer_state`] moves states between rows, for an
//! algorithm that keeps several states for one set of parameters: LPP-SGD's processes.)
//!
//! The rules, each in its own file of [`crate::store::optim`] with its formula:
//!
//! - `kind = "sgd"` (the default): SGD with heavy-ball or Nesterov momentum and an L2 weight
//!   decay ([`optim::sgd`]);
//! - `kind = "adam"`: Adam, bias-corrected by the row's own step count ([`optim::adam`]);
//! - `kind = "adamw"`: Adam with the weight decay decoupled ([`optim::adamw`]);
//! - `kind = "lars"`: layer-wise adaptive rate scaling ([`optim::lars`]);
//! - `kind = "muon"`: momentum orthogonalized by Newton–Schulz on the hidden layers' matrices,
//!   AdamW on the other parameters ([`optim::muon`]).
//!
//! ## Gradient clipping (`clip_norm`)
//!
//! With `clip_norm = c`, every rule first scales the gradient it applies by `min(1, c/‖g‖)`,
//! `‖g‖` the Euclidean norm of the gradient's trainable coordinates, whatever block the step
//! touches ([`optim::clip`]).
//!
//! ## This section and the rules
//!
//! [`OptimizerConfig`] is the section as a scenario writes it: one flat table of keys, each with
//! its default and its range checked here. Which keys a kind reads, the state it keeps and its
//! own checks are the rule's ([`optim::Rule`]); [`OptimizerConfig::validate`] refuses a key no
//! rule of the kind reads, at its field.

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;
use crate::store::lr::{LrScaling, LrSchedule};
use crate::store::optim::{self, Buffers};

pub use crate::store::optim::OptimizerKind;
pub use crate::store::optim::adam::{DEFAULT_BETA1, DEFAULT_BETA2, DEFAULT_EPS};
pub use crate::store::optim::lars::DEFAULT_ETA;

fn default_lr() -> f64 {
    0.1
}

fn is_no_scaling(s: &LrScaling) -> bool {
    *s == LrScaling::None
}

fn is_sgd(k: &OptimizerKind) -> bool {
    *k == OptimizerKind::Sgd
}

/// The `[optimizer]` section: the local update every algorithm applies, and its learning rate.
///
/// A step with gradient `g` on row `x` and its optimizer state is described in the
/// [module documentation](self#the-optimizer-step); the rate in force comes from `lr`,
/// `scale_with_workers` and `schedule` (see [`crate::store::lr`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimizerConfig {
    /// The update rule: `sgd` (default), `adam`, `adamw`, `lars` or `muon`.
    #[serde(default, skip_serializing_if = "is_sgd")]
    pub kind: OptimizerKind,
    /// Base learning rate η.
    #[serde(default = "default_lr")]
    pub lr: f64,
    /// Momentum μ in `[0, 1)` (`sgd` and `lars`; Muon's β, which it needs above zero; Adam's
    /// is `beta1`).
    #[serde(default)]
    pub momentum: f64,
    /// Nesterov momentum (needs `momentum > 0`; `sgd`, default off, and `muon`, default on as
    /// in Muon's reference code). Read through [`OptimizerConfig::nesterov`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nesterov: Option<bool>,
    /// Weight decay λ: an L2 term added to the gradient (`sgd`, `adam`; in LARS's trust ratio
    /// too), or decoupled from it (`adamw`: `x ← x − η·λ·x` beside the Adam step).
    #[serde(default)]
    pub weight_decay: f64,
    /// Adam's first-moment decay β₁ in `[0, 1)` (default 0.9; `adam` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta1: Option<f64>,
    /// Adam's second-moment decay β₂ in `[0, 1)` (default 0.999; 0.95 for Muon's AdamW).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta2: Option<f64>,
    /// Adam's ε, added to the denominator, positive (default 1e-8; 1e-10 for Muon's AdamW).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eps: Option<f64>,
    /// LARS's trust coefficient η_T, positive (default 0.001; `lars` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta: Option<f64>,
    /// Muon's AdamW rate, for every parameter outside the hidden matrices, positive (default
    /// 3e-4, the reference's; `muon` only). The schedule and the worker scaling scale it as they
    /// scale `lr`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adam_lr: Option<f64>,
    /// Muon's Newton–Schulz iterations, at least 1 (default 5, the reference's; `muon` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ns_steps: Option<u32>,
    /// Gradient clipping by global norm, positive (every kind; default: none): the gradient
    /// a step applies is scaled by `min(1, clip_norm / ‖g‖)` first, `‖g‖` the Euclidean norm
    /// of its trainable coordinates (all of them, whatever block the step touches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clip_norm: Option<f64>,
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
            kind: OptimizerKind::Sgd,
            lr: default_lr(),
            momentum: 0.0,
            nesterov: None,
            weight_decay: 0.0,
            beta1: None,
            beta2: None,
            eps: None,
            eta: None,
            adam_lr: None,
            ns_steps: None,
            clip_norm: None,
            scale_with_workers: LrScaling::None,
            schedule: LrSchedule::default(),
        }
    }
}

impl OptimizerConfig {
    /// Adam's β₁: `beta1`, or its default 0.9.
    pub fn beta1(&self) -> f64 {
        self.beta1.unwrap_or(DEFAULT_BETA1)
    }

    /// Adam's β₂: `beta2`, or its default 0.999 (Muon's AdamW: 0.95, as its reference).
    pub fn beta2(&self) -> f64 {
        self.beta2.unwrap_or(match self.kind {
            OptimizerKind::Muon => optim::muon::DEFAULT_BETA2,
            _ => DEFAULT_BETA2,
        })
    }

    /// Adam's ε: `eps`, or its default 1e-8 (Muon's AdamW: 1e-10, as its reference).
    pub fn eps(&self) -> f64 {
        self.eps.unwrap_or(match self.kind {
            OptimizerKind::Muon => optim::muon::DEFAULT_EPS,
            _ => DEFAULT_EPS,
        })
    }

    /// Whether momentum is Nesterov's: `nesterov`, or its default (on for Muon, as in its
    /// reference code; off for SGD).
    pub fn nesterov(&self) -> bool {
        self.nesterov.unwrap_or(self.kind == OptimizerKind::Muon)
    }

    /// Muon's AdamW rate: `adam_lr`, or its default 3e-4.
    pub fn adam_lr(&self) -> f64 {
        self.adam_lr.unwrap_or(optim::muon::DEFAULT_ADAM_LR)
    }

    /// Muon's Newton–Schulz iterations: `ns_steps`, or its default 5.
    pub fn ns_steps(&self) -> u32 {
        self.ns_steps.unwrap_or(optim::muon::DEFAULT_NS_STEPS)
    }

    /// LARS's trust coefficient: `eta`, or its default 0.001.
    pub fn eta(&self) -> f64 {
        self.eta.unwrap_or(DEFAULT_ETA)
    }

    /// The factor a gradient of norm `norm` is scaled by before a step: `min(1, clip_norm /
    /// norm)`, 1 without `clip_norm` (or for a zero or non-finite norm, which clipping cannot
    /// mend: a NaN stays for the divergence check to see). See [`optim::clip`].
    pub fn clip_factor(&self, norm: f64) -> f64 {
        optim::clip::factor(self.clip_norm, norm)
    }

    /// The optimizer state each row keeps with these settings ([`optim::Rule::buffers`]).
    pub fn buffers(&self) -> Buffers {
        self.kind.buffers(self)
    }

    /// Whether each row keeps a first buffer (SGD's or LARS's momentum, Adam's first moment).
    pub fn has_momentum_buffer(&self) -> bool {
        self.buffers().first
    }

    /// Numbers of optimizer state per parameter and row, for memory estimates: SGD and LARS 1
    /// with momentum (else 0), Adam 3 (two moments and a step count).
    pub fn state_per_param(&self) -> u64 {
        self.buffers().count()
    }

    /// Checks every value: each optional key only where the kind reads it, each key's range,
    /// and the rule's own checks ([`optim::Rule::validate`]).
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, value) in [
            ("beta1", self.beta1),
            ("beta2", self.beta2),
            ("eps", self.eps),
            ("eta", self.eta),
            ("adam_lr", self.adam_lr),
        ] {
            self.read_by_kind(field, value.is_some())?;
        }
        self.read_by_kind("ns_steps", self.ns_steps.is_some())?;
        for (field, value) in [("beta1", self.beta1()), ("beta2", self.beta2())] {
            if !(0.0..1.0).contains(&value) {
                return Err(ConfigError::new(
                    &format!("optimizer.{field}"),
                    format!("{field} must be in [0, 1), got {value}"),
                ));
            }
        }
        optim::clip::validate(self.clip_norm)?;
        for (field, value) in [
            ("eps", self.eps()),
            ("eta", self.eta()),
            ("adam_lr", self.adam_lr()),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return Err(ConfigError::new(
                    &format!("optimizer.{field}"),
                    format!("{field} must be positive, got {value}"),
                ));
            }
        }
        self.kind.validate(self)?;
        if self.nesterov == Some(true) && !self.kind.keys().contains(&"nesterov") {
            return Err(ConfigError::new(
                "optimizer.nesterov",
                format!(
                    "Nesterov momentum applies to kind = {} only, and this optimizer is \"{}\"",
                    OptimizerKind::readers("nesterov"),
                    self.kind.name()
                ),
            )
            .hint("remove nesterov"));
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(ConfigError::new(
                "optimizer.lr",
                format!("the learning rate must be positive, got {}", self.lr),
            ));
        }
        optim::momentum::validate(self.momentum)?;
        optim::momentum::validate_nesterov(self.nesterov(), self.momentum)?;
        optim::decay::validate(self.weight_decay)?;
        self.schedule.validate("optimizer.schedule")
    }

    /// An optional key `field`, when `set`, is one this kind reads ([`optim::Rule::KEYS`]).
    fn read_by_kind(&self, field: &str, set: bool) -> Result<(), ConfigError> {
        if set && !self.kind.keys().contains(&field) {
            let names = OptimizerKind::readers(field);
            return Err(ConfigError::new(
                &format!("optimizer.{field}"),
                format!(
                    "`{field}` applies to kind = {names} only, and this optimizer is \"{}\"",
                    self.kind.name()
                ),
            )
            .hint(format!("remove {field}, or set optimizer.kind = {names}")));
        }
        Ok(())
    }
}
