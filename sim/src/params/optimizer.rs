//! The `[optimizer]` section: the local update every algorithm applies, and its learning rate.
//!
//! # The optimizer step
//!
//! The store applies the `[optimizer]` section's local update ([`OptimizerConfig`]); the
//! algorithm passes the learning rate in force ([`crate::algorithm::World::lr_at`]). Four rules
//! exist (`kind`); each keeps its state **per row** (per replica), and no operation but the step
//! itself reads or writes that state: averaging, mixing, message buffers and block copies move
//! parameters only, never moments, momentum buffers or step counts. (Only
//! [`crate::params::ReplicaStore::swap_optimizer_state`] moves states between rows, for an
//! algorithm that keeps several states for one set of parameters: LPP-SGD's processes.)
//!
//! ## Gradient clipping (`clip_norm`)
//!
//! With `clip_norm = c`, every rule first scales the gradient it applies by `min(1, c/‖g‖)`,
//! `‖g‖` the Euclidean norm of the gradient's trainable coordinates (PyTorch's
//! `clip_grad_norm_` over the model's parameters). It is the gradient the step applies that is
//! clipped: a worker's own, or the mean all-reduce applies (as data-parallel training clips
//! after the all-reduce); and its whole norm, also for a step on a block (a parameter-server
//! shard, an LPP-SGD block), so that every block of one gradient is scaled alike.
//!
//! ## `kind = "sgd"` (the default)
//!
//! For row `x`, its momentum buffer `v`, gradient `g`, rate `η`, momentum `μ`, weight decay `λ`,
//! coordinate by coordinate:
//!
//! ```text
//! d ← g + λ·x
//! v ← μ·v + d
//! x ← x − η·(d + μ·v)     (nesterov = true)
//! x ← x − η·v             (nesterov = false)
//! ```
//!
//! With `μ = 0` the buffer stays zero and the step is plain SGD, `x ← x − η·(g + λ·x)`.
//!
//! ## `kind = "adam"` (Kingma & Ba 2015, as in SGP's translation experiments)
//!
//! With first and second moments `m`, `v` and a step count `t`, all per row and per coordinate,
//! `β₁ = beta1`, `β₂ = beta2`, `ε = eps`, and weight decay `λ` as an L2 term added to the
//! gradient (Adam, not AdamW), coordinate by coordinate:
//!
//! ```text
//! d ← g + λ·x
//! t ← t + 1
//! m ← β₁·m + (1 − β₁)·d
//! v ← β₂·v + (1 − β₂)·d²
//! x ← x − η · (m / (1 − β₁ᵗ)) / (√(v / (1 − β₂ᵗ)) + ε)
//! ```
//!
//! The bias correction uses the row's **own** step count: the number of steps that row has taken
//! (a replica's count, not the cluster's). It is kept per coordinate, so a step on a block
//! (a parameter-server shard, an LPP-SGD block) counts for the coordinates it touched only; when
//! every step covers the whole row, as for every other algorithm, all coordinates of a row share
//! one count, the row's number of optimizer steps. A row added by
//! [`crate::params::ReplicaStore::add_rows`] starts at `t = 0`.
//!
//! ## `kind = "adamw"` (Loshchilov & Hutter 2019, DiLoCo's inner optimizer)
//!
//! Adam with the weight decay decoupled from the gradient: the moments see the gradient alone,
//! and the decay shrinks the parameters beside the Adam step, scaled by the rate in force as in
//! PyTorch's `AdamW` (which DiLoCo's implementations use):
//!
//! ```text
//! t ← t + 1
//! m ← β₁·m + (1 − β₁)·g
//! v ← β₂·v + (1 − β₂)·g²
//! x ← x − η·λ·x − η · (m / (1 − β₁ᵗ)) / (√(v / (1 − β₂ᵗ)) + ε)
//! ```
//!
//! The step counts, the bias correction and the state per row are Adam's. With `λ = 0` the two
//! rules are the same.
//!
//! ## `kind = "lars"` (You, Gitman & Ginsburg 2017, as in LAP-SGD's large-batch baselines)
//!
//! Layer-wise adaptive rate scaling. For each layer `l` of the model
//! ([`crate::params::ReplicaStore::layers`]; the quadratic is one layer), with trust coefficient
//! `η_T = eta`, global rate `η`, momentum `μ` and weight decay `λ`, its parameters `x_l`,
//! gradient `g_l` and momentum buffer `v_l`:
//!
//! ```text
//! τ_l ← η_T · ‖x_l‖ / (‖g_l‖ + λ·‖x_l‖)     (τ_l = 1 when ‖x_l‖ = 0 or the denominator is 0)
//! v_l ← μ·v_l + η·τ_l·(g_l + λ·x_l)
//! x_l ← x_l − v_l
//! ```
//!
//! (Algorithm 1 of the paper: the local rate `η·τ_l` is inside the momentum buffer.) The norms
//! are those of the coordinates of the layer that the step touches: the whole layer for a full
//! step; for a step on a block, the part of each layer inside the block.

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;
use crate::params::lr::{LrScaling, LrSchedule};

fn default_lr() -> f64 {
    0.1
}

fn is_no_scaling(s: &LrScaling) -> bool {
    *s == LrScaling::None
}

/// Which update rule the store applies ([module documentation](self#the-optimizer-step)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    /// SGD with optional (Nesterov) momentum and weight decay.
    #[default]
    Sgd,
    /// Adam, with bias correction by the row's own step count.
    Adam,
    /// AdamW: Adam with weight decay decoupled from the gradient (Loshchilov & Hutter 2019).
    #[serde(rename = "adamw")]
    AdamW,
    /// LARS: layer-wise trust ratio, momentum and weight decay as You et al. (2017) define them.
    Lars,
}

impl OptimizerKind {
    /// The name used in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            OptimizerKind::Sgd => "sgd",
            OptimizerKind::Adam => "adam",
            OptimizerKind::AdamW => "adamw",
            OptimizerKind::Lars => "lars",
        }
    }

    /// Adam or AdamW: the rules that keep two moments and a step count.
    pub fn is_adam(self) -> bool {
        matches!(self, OptimizerKind::Adam | OptimizerKind::AdamW)
    }

    fn is_sgd(&self) -> bool {
        *self == OptimizerKind::Sgd
    }
}

/// Adam's default `beta1`.
pub const DEFAULT_BETA1: f64 = 0.9;
/// Adam's default `beta2`.
pub const DEFAULT_BETA2: f64 = 0.999;
/// Adam's default `eps`.
pub const DEFAULT_EPS: f64 = 1e-8;
/// LARS's default trust coefficient `eta` (You et al. 2017).
pub const DEFAULT_ETA: f64 = 0.001;

/// The `[optimizer]` section: the local update every algorithm applies, and its learning rate.
///
/// A step with gradient `g` on row `x` and its optimizer state is described in the
/// [module documentation](self#the-optimizer-step); the rate in force comes from `lr`,
/// `scale_with_workers` and `schedule` (see [`crate::params::lr`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimizerConfig {
    /// The update rule: `sgd` (default), `adam`, `adamw` or `lars`.
    #[serde(default, skip_serializing_if = "OptimizerKind::is_sgd")]
    pub kind: OptimizerKind,
    /// Base learning rate η.
    #[serde(default = "default_lr")]
    pub lr: f64,
    /// Momentum μ in `[0, 1)` (`sgd` and `lars`; Adam's is `beta1`).
    #[serde(default)]
    pub momentum: f64,
    /// Nesterov momentum (needs `momentum > 0`; `sgd` only).
    #[serde(default, skip_serializing_if = "crate::raw::is_false")]
    pub nesterov: bool,
    /// Weight decay λ: an L2 term added to the gradient (`sgd`, `adam`; in LARS's trust ratio
    /// too), or decoupled from it (`adamw`: `x ← x − η·λ·x` beside the Adam step).
    #[serde(default)]
    pub weight_decay: f64,
    /// Adam's first-moment decay β₁ in `[0, 1)` (default 0.9; `adam` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta1: Option<f64>,
    /// Adam's second-moment decay β₂ in `[0, 1)` (default 0.999; `adam` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta2: Option<f64>,
    /// Adam's ε, added to the denominator, positive (default 1e-8; `adam` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eps: Option<f64>,
    /// LARS's trust coefficient η_T, positive (default 0.001; `lars` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta: Option<f64>,
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
            nesterov: false,
            weight_decay: 0.0,
            beta1: None,
            beta2: None,
            eps: None,
            eta: None,
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

    /// Adam's β₂: `beta2`, or its default 0.999.
    pub fn beta2(&self) -> f64 {
        self.beta2.unwrap_or(DEFAULT_BETA2)
    }

    /// Adam's ε: `eps`, or its default 1e-8.
    pub fn eps(&self) -> f64 {
        self.eps.unwrap_or(DEFAULT_EPS)
    }

    /// The factor a gradient of norm `norm` is scaled by before a step: `min(1, clip_norm /
    /// norm)`, 1 without `clip_norm` (or for a zero or non-finite norm, which clipping cannot
    /// mend: a NaN stays for the divergence check to see).
    pub fn clip_factor(&self, norm: f64) -> f64 {
        match self.clip_norm {
            Some(c) if norm.is_finite() && norm > c => c / norm,
            _ => 1.0,
        }
    }

    /// LARS's trust coefficient: `eta`, or its default 0.001.
    pub fn eta(&self) -> f64 {
        self.eta.unwrap_or(DEFAULT_ETA)
    }

    /// Whether each row keeps a first buffer (SGD's or LARS's momentum, Adam's first moment).
    pub fn has_momentum_buffer(&self) -> bool {
        match self.kind {
            OptimizerKind::Sgd | OptimizerKind::Lars => self.momentum > 0.0,
            OptimizerKind::Adam | OptimizerKind::AdamW => true,
        }
    }

    /// Numbers of optimizer state per parameter and row, for memory estimates: SGD and LARS 1
    /// with momentum (else 0), Adam 3 (two moments and a step count).
    pub fn state_per_param(&self) -> u64 {
        match self.kind {
            OptimizerKind::Adam | OptimizerKind::AdamW => 3,
            _ => u64::from(self.has_momentum_buffer()),
        }
    }

    /// Checks every value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let only = |field: &str, value: Option<f64>, kinds: &[OptimizerKind]| {
            if value.is_some() && !kinds.contains(&self.kind) {
                let names: Vec<String> =
                    kinds.iter().map(|k| format!("\"{}\"", k.name())).collect();
                return Err(ConfigError::new(
                    &format!("optimizer.{field}"),
                    format!(
                        "`{field}` applies to kind = {} only, and this optimizer is \"{}\"",
                        names.join(" or "),
                        self.kind.name()
                    ),
                )
                .hint(format!(
                    "remove {field}, or set optimizer.kind = {}",
                    names.join(" or ")
                )));
            }
            Ok(())
        };
        let adam = &[OptimizerKind::Adam, OptimizerKind::AdamW];
        only("beta1", self.beta1, adam)?;
        only("beta2", self.beta2, adam)?;
        only("eps", self.eps, adam)?;
        only("eta", self.eta, &[OptimizerKind::Lars])?;
        for (field, value) in [("beta1", self.beta1()), ("beta2", self.beta2())] {
            if !(0.0..1.0).contains(&value) {
                return Err(ConfigError::new(
                    &format!("optimizer.{field}"),
                    format!("{field} must be in [0, 1), got {value}"),
                ));
            }
        }
        if let Some(c) = self.clip_norm
            && !(c.is_finite() && c > 0.0)
        {
            return Err(ConfigError::new(
                "optimizer.clip_norm",
                format!("clip_norm must be a positive number, got {c}"),
            )
            .hint("the largest gradient norm a step applies; leave it out for no clipping"));
        }
        for (field, value) in [("eps", self.eps()), ("eta", self.eta())] {
            if !(value.is_finite() && value > 0.0) {
                return Err(ConfigError::new(
                    &format!("optimizer.{field}"),
                    format!("{field} must be positive, got {value}"),
                ));
            }
        }
        if self.kind.is_adam() && self.momentum != 0.0 {
            return Err(ConfigError::new(
                "optimizer.momentum",
                "Adam has no momentum of its own: its first-moment decay is beta1",
            )
            .hint("remove momentum, or set optimizer.beta1"));
        }
        if self.nesterov && self.kind != OptimizerKind::Sgd {
            return Err(ConfigError::new(
                "optimizer.nesterov",
                format!(
                    "Nesterov momentum applies to kind = \"sgd\" only, and this optimizer is \"{}\"",
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
