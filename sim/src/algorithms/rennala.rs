//! Rennala SGD: the server steps with the first `B` gradients computed at its current point.
//!
//! Tyurin & Richtárik, "Optimal Time Complexities of Parallel Stochastic Optimization Methods
//! Under a Fixed Computation Model", NeurIPS 2023 (Method 4, `ComputeBatch`, inside Algorithm
//! 3); restated as Algorithm 2 of Maranjyan, Tyurin & Richtárik, "Ringmaster ASGD: The First
//! Asynchronous SGD with Optimal Time Complexity", ICML 2025.
//!
//! ```text
//! server: x_0; every worker starts computing at x_0
//! for k = 0, 1, …:
//!     g_k = 0, b = 0
//!     while b < B:
//!         a gradient ∇f(x_{k−δ}; ξ) lands from worker i
//!         if δ = 0:  g_k ← g_k + ∇f(x_k; ξ),  b ← b + 1       (else it is ignored)
//!         worker i computes at x_k
//!     x_{k+1} = x_k − γ · g_k / B                       (an optimizer step with their mean)
//! ```
//!
//! The protocol, the messages and the faults are the star's ([`super::star`]). The step is the
//! scenario's optimizer on the mean of the `B` gradients (plain SGD with rate γ is the paper's).
//!
//! **Stops** (`stops = true`; not the paper's default): after each update the server sends
//! `x_{k+1}` at once to every worker computing at an older point, which abandons that gradient
//! (it would be ignored) and starts at `x_{k+1}`; a worker whose gradient is on its way to the
//! server gets `x_{k+1}` when it lands, as without stops. With a free network every iteration then
//! starts with every worker fresh, which gives its time in closed form: with fixed times `τ_1 ≤ … ≤ τ_n` and a free
//! network, iteration `k` takes `t_B = min{t : Σ_i ⌊t/τ_i⌋ ≥ B}`, which is at most the paper's
//! `t(B) = min_m (Σ_{i≤m} 1/τ_i)^{-1} (B + m)`, the paper's bound on the time of one
//! `ComputeBatch` (as `Σ_{i≤m} ⌊t/τ_i⌋ ≥ t Σ_{i≤m} 1/τ_i − m`). Without stops a worker still busy at `x_k` finishes
//! first, so an iteration may take up to `t(B) + τ_n`: the paper's method, in which a gradient
//! computed at an older point is only ignored.
//!
//! **Steps.** Each of the `B` gradients of an update counts as a step of its worker when the
//! update is taken; an ignored gradient counts none.
//!
//! **Invariant** (checked at every event by `tests/rennala.rs`): every gradient the server sums
//! was computed at its current point `x_k`, and each update uses exactly `B` of them.

use serde::{Deserialize, Serialize};

use super::star::{Event, Star, StarMethod, StarOptions};
use crate::algorithm::Ctx;
use crate::error::ConfigError;
use crate::store::{GradId, ReplicaStore};

/// Options of Rennala SGD.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RennalaConfig {
    /// Gradients per update `B ≥ 1`, all computed at the server's current point (the paper's
    /// batch size `S`; its optimal value is `⌈σ²/ε⌉`).
    pub batch: usize,
    /// After each update, stop every worker computing at the old point and send it the new one
    /// (default false: the paper's method, which ignores those gradients when they land).
    #[serde(default)]
    pub stops: bool,
}

impl RennalaConfig {
    fn check_batch(&self, path: &str) -> Result<(), ConfigError> {
        if self.batch == 0 {
            return Err(ConfigError::new(
                &format!("{path}.batch"),
                "batch must be at least 1: it is B, the gradients at the current point summed per update",
            )
            .hint("the paper's optimal batch is ⌈σ²/ε⌉; batch = 1 steps with the first fresh gradient"));
        }
        Ok(())
    }
}

/// The state machine of Rennala SGD.
#[derive(Serialize, Deserialize)]
pub struct Rennala {
    cfg: RennalaConfig,
    star: Star,
    /// The gradients at `x_k` collected so far, with their workers.
    batch: Vec<(usize, GradId)>,
}

impl Rennala {
    /// A new instance for `n` workers.
    pub fn new(cfg: &RennalaConfig, n: usize) -> Self {
        Rennala {
            cfg: cfg.clone(),
            star: Star::new(n),
            batch: Vec::new(),
        }
    }

    /// The server's iteration `k` (updates taken).
    pub fn iterations(&self) -> u64 {
        self.star.k
    }

    /// The server's model row (valid once the run started).
    pub fn server_row(&self) -> usize {
        self.star.row
    }

    /// The gradients of the update in progress: their workers, all computed at `x_k`.
    pub fn collected(&self) -> Vec<usize> {
        self.batch.iter().map(|&(w, _)| w).collect()
    }

    /// Gradients that landed computed at an older point, and were ignored.
    pub fn ignored(&self) -> u64 {
        self.star.ignored
    }

    /// The workers computing, with the server iteration of the point each computes at.
    pub fn computing(&self) -> Vec<(usize, u64)> {
        self.star.computing().collect()
    }
}

impl StarMethod for Rennala {
    fn star(&self) -> &Star {
        &self.star
    }

    fn star_mut(&mut self) -> &mut Star {
        &mut self.star
    }

    fn push(&mut self, w: usize, version: u64, grad: GradId, cx: &mut Ctx<'_, '_, Event>) {
        if version != self.star.k {
            self.star.ignore(w, version, grad, cx);
            return;
        }
        self.batch.push((w, grad));
        if self.batch.len() < self.cfg.batch {
            self.star.reply(w, version, cx);
            return;
        }
        let members = std::mem::take(&mut self.batch);
        let grads: Vec<GradId> = members.iter().map(|&(_, g)| g).collect();
        let mean = if grads.len() == 1 {
            grads[0]
        } else {
            cx.world.store.mean_gradient(&grads)
        };
        let workers: Vec<usize> = members.iter().map(|&(m, _)| m).collect();
        self.star.step(w, mean, &workers, cx);
        if self.cfg.stops {
            // Every worker computing at an older point: its gradient would be ignored.
            self.star.stop(|offered, k| offered < k, cx);
        }
        self.star.reply(w, version, cx);
    }
}

impl StarOptions for RennalaConfig {
    type Method = Rennala;

    fn check(&self, path: &str) -> Result<(), ConfigError> {
        self.check_batch(path)
    }

    fn method(&self, workers: usize) -> Rennala {
        Rennala::new(self, workers)
    }
}
