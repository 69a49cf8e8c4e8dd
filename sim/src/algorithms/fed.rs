//! FedAsync and FedBuff: asynchronous federated optimization on asynchronous Local-SGD's
//! protocol ([`super::async_local_sgd`]), with the server's rule for a client's round replaced.
//!
//! Both run as asynchronous Local-SGD does: every worker (a client) downloads the server's model,
//! takes `E` local steps of the scenario's `[optimizer]` on it (`local_steps`), pushes the result
//! and, without waiting for the others, starts again from the model the server answers with.
//! What differs is what the server does with a push that lands, `x_i` the client's model and
//! `x_start` the one it started from, `τ` the server's updates since the client downloaded:
//!
//! ```text
//! FedAsync (Xie, Koyejo & Gupta, "Asynchronous Federated Optimization", OPT 2020, Algorithm 1):
//!     α_t = α · s(τ);   x ← (1 − α_t)·x + α_t·x_i;   t ← t + 1
//! FedBuff (Nguyen et al., "Federated Learning with Buffered Asynchronous Aggregation",
//!          AISTATS 2022, Algorithm 1):
//!     Δ̄ ← Δ̄ + s(τ)·(x_start − x_i);  k ← k + 1
//!     if k = K:   x ← x − η_g · Δ̄ / K;   Δ̄ ← 0;  k ← 0;  t ← t + 1
//! ```
//!
//! The staleness functions `s` (`staleness`, with `staleness_a` and `staleness_b`) are FedAsync's
//! (its Section 5.2): `constant` (1), `polynomial` (`(1 + τ)^−a`) and `hinge` (1 for `τ ≤ b`,
//! else `1/(a(τ − b) + 1)`). FedBuff's paper scales by `1/√(1 + τ)`, the polynomial with
//! `a = 1/2`: the default of both. FedBuff's `τ` counts the
//! server's model updates (buffer flushes), not the pushes: a client's delta is stale by the
//! flushes since its download.
//!
//! FedAsync's clients minimize the regularized `f(x; z) + ρ/2·‖x − x_start‖²` (`rho`, default 0:
//! plain local steps, as FedBuff and the implementations in APPFL and Plato). dasim applies the
//! regularizer's gradient `ρ(x − x_start)` beside the optimizer's step, at the same learning rate
//! and outside its state: exact for plain SGD, the paper's.
//!
//! **Concurrency** (`concurrency = C`, both papers' knob, default every worker): at most `C`
//! clients train at once. At the start `C` clients, drawn uniformly at random from the server's
//! stream, start; when a push has been applied, the server draws the next client uniformly among
//! the idle ones and the one that pushed, and sends it the model; the rest stay idle.
//!
//! Under faults the protocol is asynchronous Local-SGD's (retransmission on loss; a crashed
//! client's round is lost and its late push discarded; on rejoin it asks for the model). With
//! `concurrency` set, crashes are refused: the server would have to learn of a crash to draw a
//! replacement, which neither paper defines.

use serde::{Deserialize, Serialize};

use crate::algorithm::World;
use crate::algorithms::async_local_sgd::{AsyncLocalSgd, AsyncLocalSgdConfig, ServerRule};
use crate::algorithms::ps::PsConfig;
use crate::algorithms::{AlgorithmSpec, Runnable, Setup};
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport};

/// Which staleness function (`staleness`): its parameters are `staleness_a` and `staleness_b`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StalenessFn {
    /// `s(τ) = 1`.
    Constant,
    /// `s(τ) = (1 + τ)^−a`.
    #[default]
    Polynomial,
    /// `s(τ) = 1` for `τ ≤ b`, else `1/(a(τ − b) + 1)`.
    Hinge,
}

/// The staleness function `s(τ)` of FedAsync (and FedBuff's scaling), with its parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Staleness {
    /// `s(τ) = 1`.
    Constant,
    /// `s(τ) = (1 + τ)^−a`, `a > 0`.
    Polynomial {
        /// The exponent.
        a: f64,
    },
    /// `s(τ) = 1` for `τ ≤ b`, else `1/(a(τ − b) + 1)`, `a > 0`.
    Hinge {
        /// The slope.
        a: f64,
        /// The staleness tolerated at full weight.
        b: u64,
    },
}

impl Staleness {
    /// The function `staleness` names, with `a` and `b`.
    pub fn new(f: StalenessFn, a: f64, b: u64) -> Self {
        match f {
            StalenessFn::Constant => Staleness::Constant,
            StalenessFn::Polynomial => Staleness::Polynomial { a },
            StalenessFn::Hinge => Staleness::Hinge { a, b },
        }
    }

    /// `s(τ)`.
    pub fn weight(self, tau: u64) -> f64 {
        match self {
            Staleness::Constant => 1.0,
            Staleness::Polynomial { a } => (1.0 + tau as f64).powf(-a),
            Staleness::Hinge { b, .. } if tau <= b => 1.0,
            Staleness::Hinge { a, b } => 1.0 / (a * (tau - b) as f64 + 1.0),
        }
    }

    fn check(self, path: &str) -> Result<(), ConfigError> {
        let a = match self {
            Staleness::Constant => return Ok(()),
            Staleness::Polynomial { a } | Staleness::Hinge { a, .. } => a,
        };
        if !(a.is_finite() && a > 0.0) {
            return Err(ConfigError::new(
                &format!("{path}.staleness_a"),
                format!("staleness_a must be a positive number, not {a}"),
            )
            .hint(
                "FedBuff scales by 1/sqrt(1 + τ): staleness = \"polynomial\", staleness_a = 0.5",
            ));
        }
        Ok(())
    }
}

fn default_staleness_a() -> f64 {
    0.5
}

fn default_staleness_b() -> u64 {
    4
}

fn default_local_steps() -> u32 {
    10
}

fn default_alpha() -> f64 {
    0.6
}

fn default_buffer_size() -> u32 {
    10
}

fn one() -> f64 {
    1.0
}

/// Options of FedAsync.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FedAsyncConfig {
    /// Local steps `E ≥ 1` per round (default 10).
    #[serde(default = "default_local_steps")]
    pub local_steps: u32,
    /// The mixing weight `α ∈ (0, 1]` (default 0.6).
    #[serde(default = "default_alpha")]
    pub alpha: f64,
    /// The staleness function: `constant`, `polynomial` (default) or `hinge`.
    #[serde(default)]
    pub staleness: StalenessFn,
    /// Its `a` (default 0.5).
    #[serde(default = "default_staleness_a")]
    pub staleness_a: f64,
    /// The hinge's `b` (default 4).
    #[serde(default = "default_staleness_b")]
    pub staleness_b: u64,
    /// The regularizer's `ρ ≥ 0` (default 0).
    #[serde(default)]
    pub rho: f64,
    /// Clients training at once, `1 ≤ C ≤ n` (default every worker).
    #[serde(default)]
    pub concurrency: Option<u32>,
}

impl Default for FedAsyncConfig {
    fn default() -> Self {
        FedAsyncConfig {
            local_steps: default_local_steps(),
            alpha: default_alpha(),
            staleness: StalenessFn::default(),
            staleness_a: default_staleness_a(),
            staleness_b: default_staleness_b(),
            rho: 0.0,
            concurrency: None,
        }
    }
}

/// Options of FedBuff.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FedBuffConfig {
    /// Local steps `E ≥ 1` per round (default 10).
    #[serde(default = "default_local_steps")]
    pub local_steps: u32,
    /// Deltas buffered per server step, `K ≥ 1` (default 10, the paper's).
    #[serde(default = "default_buffer_size")]
    pub buffer_size: u32,
    /// The server's learning rate `η_g > 0` (default 1).
    #[serde(default = "one")]
    pub server_lr: f64,
    /// The staleness scaling: `constant`, `polynomial` (default; with `a = 0.5` the paper's
    /// `1/√(1 + τ)`) or `hinge`.
    #[serde(default)]
    pub staleness: StalenessFn,
    /// Its `a` (default 0.5).
    #[serde(default = "default_staleness_a")]
    pub staleness_a: f64,
    /// The hinge's `b` (default 4).
    #[serde(default = "default_staleness_b")]
    pub staleness_b: u64,
    /// Clients training at once, `1 ≤ C ≤ n` (default every worker).
    #[serde(default)]
    pub concurrency: Option<u32>,
}

impl Default for FedBuffConfig {
    fn default() -> Self {
        FedBuffConfig {
            local_steps: default_local_steps(),
            buffer_size: default_buffer_size(),
            server_lr: 1.0,
            staleness: StalenessFn::default(),
            staleness_a: default_staleness_a(),
            staleness_b: default_staleness_b(),
            concurrency: None,
        }
    }
}

/// Options of FedAvg with a server (McMahan et al., 2017) and its barriers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FedAvgConfig {
    /// Local steps `E ≥ 1` per round (default 10).
    #[serde(default = "default_local_steps")]
    pub local_steps: u32,
    /// Clients drawn per round, `1 ≤ M ≤ n` (default every worker).
    #[serde(default)]
    pub clients_per_round: Option<u32>,
    /// Pushes that close a round, `1 ≤ K ≤ M` (default `M`: wait for every client drawn).
    #[serde(default)]
    pub quorum: Option<u32>,
    /// Simulated seconds after which a round closes with the pushes it has (default none).
    #[serde(default)]
    pub deadline_s: Option<f64>,
    /// The server's learning rate `η_g > 0` on the mean delta (default 1: the clients' mean).
    #[serde(default = "one")]
    pub server_lr: f64,
}

impl Default for FedAvgConfig {
    fn default() -> Self {
        FedAvgConfig {
            local_steps: default_local_steps(),
            clients_per_round: None,
            quorum: None,
            deadline_s: None,
            server_lr: 1.0,
        }
    }
}

impl FedAvgConfig {
    fn check(&self, path: &str, workers: usize) -> Result<(), ConfigError> {
        check_clients(path, self.local_steps, None, workers)?;
        let m = self.clients_per_round.unwrap_or(workers as u32);
        if m == 0 || m as usize > workers {
            return Err(ConfigError::new(
                &format!("{path}.clients_per_round"),
                format!("clients_per_round must be between 1 and the {workers} workers, not {m}"),
            ));
        }
        if let Some(k) = self.quorum
            && (k == 0 || k > m)
        {
            return Err(ConfigError::new(
                &format!("{path}.quorum"),
                format!("quorum must be between 1 and clients_per_round = {m}, not {k}"),
            )
            .hint("quorum = K keeps the first K pushes of the M clients drawn (over-selection)"));
        }
        if let Some(s) = self.deadline_s
            && !(s.is_finite() && s > 0.0)
        {
            return Err(ConfigError::new(
                &format!("{path}.deadline_s"),
                format!("deadline_s must be a positive number of seconds, not {s}"),
            ));
        }
        if !(self.server_lr.is_finite() && self.server_lr > 0.0) {
            return Err(ConfigError::new(
                &format!("{path}.server_lr"),
                format!(
                    "server_lr must be a positive number, not {}",
                    self.server_lr
                ),
            ));
        }
        Ok(())
    }

    /// FedAvg's rounds need every client they draw: crashes are refused.
    fn crash_refusal(&self) -> Option<&'static str> {
        Some(
            "FedAvg's server draws its clients without knowing which are down; a crashed client \
             drawn would never push (not modelled yet)",
        )
    }
}

/// `local_steps ≥ 1` and `1 ≤ concurrency ≤ n`.
fn check_clients(
    path: &str,
    local_steps: u32,
    concurrency: Option<u32>,
    workers: usize,
) -> Result<(), ConfigError> {
    if local_steps == 0 {
        return Err(ConfigError::new(
            &format!("{path}.local_steps"),
            "local_steps must be at least 1",
        )
        .hint("local_steps is E, the client's optimizer steps between a download and its push"));
    }
    if let Some(c) = concurrency
        && (c == 0 || c as usize > workers)
    {
        return Err(ConfigError::new(
            &format!("{path}.concurrency"),
            format!("concurrency must be between 1 and the {workers} workers, not {c}"),
        )
        .hint("leave concurrency out for every client training at once"));
    }
    Ok(())
}

/// Crashes need the server to learn of them when it draws the clients.
const CONCURRENCY_CRASH: &str = "with concurrency set, a crashed client's slot would need the \
     server to learn of the crash and draw a replacement, which neither FedAsync nor FedBuff \
     defines (leave concurrency out to run every client)";

impl FedAsyncConfig {
    fn crash_refusal(&self) -> Option<&'static str> {
        self.concurrency.map(|_| CONCURRENCY_CRASH)
    }
}

impl FedBuffConfig {
    fn crash_refusal(&self) -> Option<&'static str> {
        self.concurrency.map(|_| CONCURRENCY_CRASH)
    }
}

/// Which faults a federated method takes: every one, but crashes where `refusal` says why not.
fn fed_fault_support(refusal: Option<&'static str>, fault: FaultKind) -> FaultSupport {
    match (fault, refusal) {
        (FaultKind::Crash | FaultKind::Rejoin, Some(why)) => Err(why),
        _ => Ok(()),
    }
}

/// The server, its state and one client buffer each: asynchronous Local-SGD's, FedAsync's,
/// FedBuff's and FedAvg's.
macro_rules! fed_spec {
    ($config:ty, $rule:ident) => {
        impl AlgorithmSpec for $config {
            fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
                self.check(setup.path, setup.topology.len())
            }

            fn extra_nodes(&self) -> usize {
                1
            }

            fn extra_rows(&self) -> usize {
                4
            }

            fn buffers_per_worker(&self) -> usize {
                // The model each client's round started from.
                1
            }

            fn uses_topology(&self) -> bool {
                false
            }

            fn fault_support(&self, _kind: &'static str, fault: FaultKind) -> FaultSupport {
                fed_fault_support(self.crash_refusal(), fault)
            }

            fn build(
                &self,
                _kind: &'static str,
                world: &World<'_>,
            ) -> crate::Result<Box<dyn Runnable>> {
                let rule = ServerRule::$rule(self.clone());
                let mut alg = AsyncLocalSgd::with_rule(rule, world.workers(), world.seed);
                if world.faults().configured() {
                    alg = alg.with_retransmit(PsConfig::default().retransmit(world));
                }
                Ok(Box::new(alg))
            }
        }
    };
}

impl FedAsyncConfig {
    fn check(&self, path: &str, workers: usize) -> Result<(), ConfigError> {
        check_clients(path, self.local_steps, self.concurrency, workers)?;
        if !(self.alpha.is_finite() && self.alpha > 0.0 && self.alpha <= 1.0) {
            return Err(ConfigError::new(
                &format!("{path}.alpha"),
                format!("alpha must be in (0, 1], not {}", self.alpha),
            )
            .hint(
                "alpha is the weight of a client's model in the server's mix, before staleness",
            ));
        }
        if !(self.rho.is_finite() && self.rho >= 0.0) {
            return Err(ConfigError::new(
                &format!("{path}.rho"),
                format!("rho must be a number ≥ 0, not {}", self.rho),
            ));
        }
        self.staleness().check(path)
    }

    /// `s`, from `staleness`, `staleness_a` and `staleness_b`.
    pub fn staleness(&self) -> Staleness {
        Staleness::new(self.staleness, self.staleness_a, self.staleness_b)
    }
}

impl FedBuffConfig {
    fn check(&self, path: &str, workers: usize) -> Result<(), ConfigError> {
        check_clients(path, self.local_steps, self.concurrency, workers)?;
        if self.buffer_size == 0 {
            return Err(ConfigError::new(
                &format!("{path}.buffer_size"),
                "buffer_size must be at least 1",
            )
            .hint("buffer_size is K, the deltas the server averages per step (the paper's 10)"));
        }
        if !(self.server_lr.is_finite() && self.server_lr > 0.0) {
            return Err(ConfigError::new(
                &format!("{path}.server_lr"),
                format!(
                    "server_lr must be a positive number, not {}",
                    self.server_lr
                ),
            ));
        }
        self.staleness().check(path)
    }

    /// `s`, from `staleness`, `staleness_a` and `staleness_b`.
    pub fn staleness(&self) -> Staleness {
        Staleness::new(self.staleness, self.staleness_a, self.staleness_b)
    }
}

fed_spec!(FedAsyncConfig, FedAsync);
fed_spec!(FedBuffConfig, FedBuff);
fed_spec!(FedAvgConfig, FedAvg);
fed_spec!(AsyncLocalSgdConfig, AsyncLocalSgd);

impl AsyncLocalSgdConfig {
    /// Every fault: see asynchronous Local-SGD's "Under faults" (the server is not a worker:
    /// it never crashes).
    fn crash_refusal(&self) -> Option<&'static str> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The three functions of FedAsync's Section 5.2 at a few staleness values.
    #[test]
    fn staleness_functions_follow_the_paper() {
        assert_eq!(
            Staleness::new(StalenessFn::Hinge, 10.0, 4),
            Staleness::Hinge { a: 10.0, b: 4 }
        );
        assert_eq!(Staleness::Constant.weight(7), 1.0);
        let poly = Staleness::Polynomial { a: 0.5 };
        assert_eq!(poly.weight(0), 1.0);
        assert!((poly.weight(3) - 0.5).abs() < 1e-15);
        let hinge = Staleness::Hinge { a: 10.0, b: 4 };
        assert_eq!(hinge.weight(4), 1.0);
        assert!((hinge.weight(5) - 1.0 / 11.0).abs() < 1e-15);
        assert!((hinge.weight(6) - 1.0 / 21.0).abs() < 1e-15);
    }
}
