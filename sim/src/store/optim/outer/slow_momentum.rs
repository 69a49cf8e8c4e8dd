//! SlowMo's slow momentum step (Wang et al. 2020, Algorithm 1; fairscale's `SlowMoDDP`), from
//! the anchor `A` (the model at the last exact average), the slow momentum `U` and the exact
//! mean `M` of the workers after `τ` base iterations, with the base rate `γ` in force:
//!
//! `U ← β·U + (A − M)/γ`, then `A ← A − α·γ·U`.

use crate::store::tracked::Tracked;
use crate::store::{ReplicaStore, Slot};

/// Vectors of the model's size one step reads and writes, for its host work
/// ([`super::step_work`]): the anchor, the workers' average and the slow momentum read; the
/// momentum and the anchor written.
pub const VALUES_TOUCHED: u64 = 5;

/// The settings of the slow step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlowMomentum {
    /// α, the slow learning rate.
    pub lr: f64,
    /// β, in `[0, 1)`.
    pub momentum: f64,
}

impl SlowMomentum {
    /// The step on the rows `[A, U, M]` into row `out` (which, like `M`, holds the mean):
    /// `out ← A − α·γ·(β·U + (A − M)/γ)`, computed as `(1 − α)·A + α·M − α·γ·β·U`, then
    /// `U ← β·U + (A − M)/γ`. Zero terms are left out, so with `α = 1`, `β = 0` the model is
    /// `M` exactly. With `γ = 0` it is the limit of the step as `γ → 0`: `out ← M`, `U ← β·U`.
    /// The anchor is not moved: the caller sets `A ← out` once it has fixed what `out` keeps
    /// (running statistics are averaged, not extrapolated).
    pub fn step(self, store: &mut Tracked<'_>, [a, u, m]: [usize; 3], out: usize, gamma: f64) {
        let (alpha, beta) = (self.lr, self.momentum);
        let terms = |list: &[(usize, f64)]| -> Vec<(Slot, f64)> {
            list.iter()
                .filter(|&&(_, c)| c != 0.0)
                .map(|&(r, c)| (Slot::Row(r), c))
                .collect()
        };
        if gamma != 0.0 {
            let model = terms(&[(a, 1.0 - alpha), (m, alpha), (u, -alpha * gamma * beta)]);
            store.mix(out, &model);
            let momentum = terms(&[(u, beta), (a, 1.0 / gamma), (m, -1.0 / gamma)]);
            store.mix(u, &momentum);
        } else {
            store.mix(out, &[(Slot::Row(m), 1.0)]);
            store.mix(u, &[(Slot::Row(u), beta)]);
        }
    }
}
