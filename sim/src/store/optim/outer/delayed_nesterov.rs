//! Delayed Nesterov, asynchronous Local-SGD's outer update (Liu et al. 2024, Algorithm 2): the
//! server applies each outer gradient `g = start − model` as it lands, scaled by `1/N`, and
//! updates the momentum with the mean of the last `N` gradients, applying its term, only on every
//! `N`-th update:
//!
//! - on an `N`-th update: `m ← μ·m + (Δ + g)/N`, `Δ ← 0`, and
//!   `θ ← θ − η·g/N − η·(1 − c·N + c)·μ·m` (the new `m` with Nesterov, the old one without);
//! - otherwise: `Δ ← Δ + g`, `θ ← θ − η·g/N − η·c·μ·m`.
//!
//! `c ∈ [0, 1/N]` is the paper's momentum activation (0 by default: the momentum term only on
//! every `N`-th update); over `N` updates the momentum's share is `μ·m` whatever `c`. With
//! `N = 1` it is plain Nesterov on every outer gradient: `m ← μ·m + g`. The reference followed:
//! HALoS's `DelayedNesterovOptimizer` (utnslab/halos, `src/halos/opt.py`), which implements the
//! paper's Algorithm 3 with `c` and `buffer_size = N`.

use crate::store::tracked::Tracked;
use crate::store::{ReplicaStore, Slot};

/// Vectors of the model's size one step reads and writes, for its host work
/// ([`super::step_work`]): the server's model, the worker's start and its model, the momentum and
/// the buffer read; the model, the momentum and the buffer written.
pub const VALUES_TOUCHED: u64 = 8;

/// The settings of the update.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DelayedNesterov {
    /// η, the outer learning rate.
    pub lr: f64,
    /// μ, in `[0, 1)`.
    pub momentum: f64,
    /// Nesterov's look-ahead (the momentum term uses the new `m`).
    pub nesterov: bool,
    /// `N ≥ 1`.
    pub every: u32,
    /// The momentum activation `c ∈ [0, 1/N]`.
    pub activation: f64,
}

impl DelayedNesterov {
    /// The `update`-th update (counted from 1) on the rows `[θ, m, Δ]`, with the outer gradient
    /// `start − model` of the two slots `[start, model]`.
    pub fn step(
        self,
        store: &mut Tracked<'_>,
        [g, m, d]: [usize; 3],
        [a, x]: [Slot; 2],
        update: u64,
    ) {
        let (eta, mu) = (self.lr, self.momentum);
        let n = f64::from(self.every);
        // θ − η·g/N, the gradient's part of every update.
        let step = [(Slot::Row(g), 1.0), (a, -eta / n), (x, eta / n)];
        if self.every == 1 {
            // m ← μ·m + g.
            let momentum = [(Slot::Row(m), mu), (a, 1.0), (x, -1.0)];
            self.apply_momentum(store, [g, m], &step, &momentum);
        } else if update.is_multiple_of(u64::from(self.every)) {
            // m ← μ·m + (Δ + g)/N; Δ ← 0.
            let momentum = [
                (Slot::Row(m), mu),
                (Slot::Row(d), 1.0 / n),
                (a, 1.0 / n),
                (x, -1.0 / n),
            ];
            self.apply_momentum(store, [g, m], &step, &momentum);
            store.mix(d, &[(Slot::Row(d), 0.0)]);
        } else {
            // Δ ← Δ + g; θ ← θ − η·g/N − η·c·μ·m.
            store.mix(d, &[(Slot::Row(d), 1.0), (a, 1.0), (x, -1.0)]);
            let c = self.activation;
            if c == 0.0 {
                store.mix(g, &step);
            } else {
                let mut terms = step.to_vec();
                terms.push((Slot::Row(m), -eta * c * mu));
                store.mix(g, &terms);
            }
        }
    }

    /// A momentum update `momentum` (the new `m`) and the step `θ − η·g/N` with the momentum
    /// term `η·(1 − c·N + c)·μ·m`: the new `m` with Nesterov, the old one without.
    fn apply_momentum(
        self,
        store: &mut Tracked<'_>,
        [g, m]: [usize; 2],
        step: &[(Slot, f64)],
        momentum: &[(Slot, f64)],
    ) {
        let mut terms = step.to_vec();
        let c = self.activation;
        let share = 1.0 - c * f64::from(self.every) + c;
        terms.push((Slot::Row(m), -self.lr * self.momentum * share));
        if self.nesterov {
            store.mix(m, momentum);
            store.mix(g, &terms);
        } else {
            store.mix(g, &terms);
            store.mix(m, momentum);
        }
    }
}
