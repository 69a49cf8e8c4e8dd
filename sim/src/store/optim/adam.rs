//! `kind = "adam"` (Kingma & Ba 2015, as in SGP's translation experiments), and the moments and
//! bias correction that AdamW ([`super::adamw`]) shares.
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
//! [`crate::store::ReplicaStore::add_rows`] starts at `t = 0`.
//!
//! Keys: `beta1` (default 0.9) and `beta2` (default 0.999) in `[0, 1)`, `eps` (default 1e-8)
//! positive, `weight_decay`; `momentum` is refused (the first-moment decay is `beta1`). The bias
//! corrections `1 − βᵗ` are computed in `f64`, once per distinct step count of a step.

use super::decay::{decoupled, l2};
use super::{Buffers, Count, Float, Rule, State, Step};
use crate::error::ConfigError;
use crate::store::OptimizerConfig;

/// Adam's default `beta1`.
pub const DEFAULT_BETA1: f64 = 0.9;
/// Adam's default `beta2`.
pub const DEFAULT_BETA2: f64 = 0.999;
/// Adam's default `eps`.
pub const DEFAULT_EPS: f64 = 1e-8;

/// The settings of Adam and AdamW, in the type they compute in.
#[derive(Clone, Copy, Debug)]
pub struct Adam<F = f64> {
    /// `β₁`, for the bias correction (computed in `f64`).
    pub beta1: f64,
    /// `β₂`, for the bias correction.
    pub beta2: f64,
    /// `β₁` in `F`.
    pub b1: F,
    /// `β₂` in `F`.
    pub b2: F,
    /// `ε`.
    pub eps: F,
    /// The L2 term's `λ` (Adam's weight decay; zero for AdamW).
    pub l2: F,
    /// The decoupled decay's `λ` (AdamW's; `None` for Adam).
    pub decoupled: Option<F>,
}

impl<F: Float> Adam<F> {
    /// Adam's settings of the `[optimizer]` section `opt`: the weight decay as an L2 term.
    pub fn of(opt: &OptimizerConfig) -> Self {
        let (beta1, beta2) = (opt.beta1(), opt.beta2());
        Adam {
            beta1,
            beta2,
            b1: F::from_f64(beta1),
            b2: F::from_f64(beta2),
            eps: F::from_f64(opt.eps()),
            l2: F::from_f64(opt.weight_decay),
            decoupled: None,
        }
    }

    /// One step with rate `lr` over `x`, its moments `m`, `v`, its step counts `t` and the
    /// gradient `g` (all of one length): `d = g + x·λ₂; t += 1; m = β₁m + (1 − β₁)d;
    /// v = β₂v + (1 − β₂)d·d; x −= x·(η·λ_decoupled); x −= η·(m/c₁)/(√(v/c₂) + ε)`, with
    /// `c = 1 − βᵗ`. Both decay terms are computed, with a zero factor where the rule has none.
    #[inline(always)]
    pub fn apply<C: Count>(
        self,
        x: &mut [F],
        m: &mut [F],
        v: &mut [F],
        t: &mut [C],
        g: &[F],
        lr: F,
    ) {
        let Adam { b1, b2, eps, .. } = self;
        let shrink = match self.decoupled {
            Some(lambda) => lr * lambda,
            None => F::ZERO,
        };
        // The bias corrections, computed once per distinct step count (all coordinates of a
        // block usually share one).
        let mut cached: Option<(C, F, F)> = None;
        for k in 0..x.len() {
            let d = l2(g[k], x[k], self.l2);
            t[k].increment();
            let tk = t[k];
            let (c1, c2) = match cached {
                Some((t, c1, c2)) if t == tk => (c1, c2),
                _ => {
                    let e = tk.exponent();
                    let c1 = F::from_f64(1.0 - self.beta1.powi(e));
                    let c2 = F::from_f64(1.0 - self.beta2.powi(e));
                    cached = Some((tk, c1, c2));
                    (c1, c2)
                }
            };
            m[k] = b1 * m[k] + (F::ONE - b1) * d;
            v[k] = b2 * v[k] + (F::ONE - b2) * d * d;
            let m_hat = m[k] / c1;
            let v_hat = v[k] / c2;
            x[k] = decoupled(x[k], shrink);
            x[k] -= lr * m_hat / (v_hat.sqrt() + eps);
        }
    }

    /// [`Adam::apply`] on a row's [`State`], which keeps both moments and the counts.
    #[inline(always)]
    pub(crate) fn apply_state<C: Count>(
        self,
        x: &mut [F],
        state: State<'_, F, C>,
        g: &[F],
        lr: f64,
    ) {
        let m = state.first.expect("Adam keeps a first moment");
        let v = state.second.expect("Adam keeps a second moment");
        let t = state.counts.expect("Adam keeps step counts");
        self.apply(x, m, v, t, g, F::from_f64(lr));
    }
}

/// Adam's and AdamW's check: no `momentum` (their first-moment decay is `beta1`).
pub(crate) fn validate(opt: &OptimizerConfig) -> Result<(), ConfigError> {
    if opt.momentum != 0.0 {
        return Err(ConfigError::new(
            "optimizer.momentum",
            "Adam has no momentum of its own: its first-moment decay is beta1",
        )
        .hint("remove momentum, or set optimizer.beta1"));
    }
    Ok(())
}

impl Rule for Adam {
    const KEYS: &'static [&'static str] = &["beta1", "beta2", "eps"];

    fn buffers(_opt: &OptimizerConfig) -> Buffers {
        Buffers::ALL
    }

    fn validate(opt: &OptimizerConfig) -> Result<(), ConfigError> {
        validate(opt)
    }

    fn step<F: Float, C: Count>(opt: &OptimizerConfig, s: Step<'_, F, C>) {
        Adam::<F>::of(opt).apply_state(s.x, s.state, s.g, s.lr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first step is `η·g/(|g| + ε)` whatever `g` (the bias corrections make `m̂ = g`,
    /// `v̂ = g²`); the second with `g = (−0.9, −1.6)`: `m = (−0.18, −0.34)`,
    /// `v = (0.001809, 0.006556)`, `m̂ = m/0.19`, `v̂ = v/0.001999`.
    #[test]
    fn two_steps_by_hand() {
        let rule = Adam::<f64>::of(&OptimizerConfig::default());
        let (mut x, mut m, mut v, mut t) = ([0.0, 0.5], [0.0; 2], [0.0; 2], [0u64; 2]);
        rule.apply(&mut x, &mut m, &mut v, &mut t, &[-1.0, -2.0], 0.1);
        let first = [0.1 / (1.0 + 1e-8), 0.5 + 0.2 / (2.0 + 1e-8)];
        assert!(x.iter().zip(first).all(|(a, b)| (a - b).abs() < 1e-14));
        assert_eq!(t, [1, 1]);
        rule.apply(&mut x, &mut m, &mut v, &mut t, &[-0.9, -1.6], 0.1);
        let (m_hat, v_hat) = ([-0.18 / 0.19, -0.34 / 0.19], [0.001809, 0.006556]);
        for k in 0..2 {
            let want = first[k] - 0.1 * m_hat[k] / ((v_hat[k] / 0.001999f64).sqrt() + 1e-8);
            assert!(
                (x[k] - want).abs() < 1e-12,
                "coordinate {k}: {}, {want}",
                x[k]
            );
        }
        assert_eq!(t, [2, 2]);
    }
}
