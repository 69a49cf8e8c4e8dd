//! Outer SGD with momentum, torch's `SGD(lr = η, momentum = μ, nesterov)` applied to the outer
//! gradient `Δ = θ − a` (the global model minus the workers' average), as DiLoCo (Douillard et
//! al. 2023, Algorithm 1) and its reference implementations step it:
//!
//! `m ← μ·m + Δ`, then `θ ← θ − η·(Δ + μ·m)` (Nesterov) or `θ ← θ − η·m`.

use std::ops::Range;

use crate::store::tracked::Tracked;
use crate::store::{ReplicaStore, Slot};

/// Vectors of the model's size one step reads and writes, for its host work
/// ([`super::step_work`]): the model, the workers' average and the momentum read; the momentum and
/// the model written.
pub const VALUES_TOUCHED: u64 = 5;

/// The settings of the outer step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OuterSgd {
    /// η.
    pub lr: f64,
    /// μ, in `[0, 1)`.
    pub momentum: f64,
    /// Nesterov's look-ahead.
    pub nesterov: bool,
}

impl OuterSgd {
    /// The step on the rows `[θ, m, a]` (the global model, the outer momentum, the workers'
    /// average). With `fragment = None` the rows are updated in place; with `Some((t, blocks))`
    /// each new row is formed in the scratch row `t` and only its coordinates `blocks` are
    /// copied back, so the rest of `θ` and `m` is unchanged (Streaming DiLoCo's outer step on
    /// one fragment).
    pub fn step(
        self,
        store: &mut Tracked<'_>,
        [g, m, a]: [usize; 3],
        fragment: Option<(usize, &[Range<usize>])>,
    ) {
        let write = |store: &mut Tracked<'_>, dst: usize, terms: &[(Slot, f64)]| match fragment {
            None => store.mix(dst, terms),
            Some((t, blocks)) => {
                store.mix(t, terms);
                for b in blocks {
                    store.copy_block(dst, t, b.clone());
                }
            }
        };
        let (eta, mu) = (self.lr, self.momentum);
        // m ← μ·m + Δ, with Δ = θ − a.
        write(
            store,
            m,
            &[
                (Slot::Row(m), mu),
                (Slot::Row(g), 1.0),
                (Slot::Row(a), -1.0),
            ],
        );
        if self.nesterov {
            // θ ← θ − η·(Δ + μ·m) = (1 − η)·θ + η·a − η·μ·m.
            write(
                store,
                g,
                &[
                    (Slot::Row(g), 1.0 - eta),
                    (Slot::Row(a), eta),
                    (Slot::Row(m), -eta * mu),
                ],
            );
        } else {
            // θ ← θ − η·m.
            write(store, g, &[(Slot::Row(g), 1.0), (Slot::Row(m), -eta)]);
        }
    }
}
