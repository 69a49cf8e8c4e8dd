//! `kind = "adamw"` (Loshchilov & Hutter 2019, DiLoCo's inner optimizer): Adam with the weight
//! decay decoupled from the gradient.
//!
//! The moments see the gradient alone, and the decay shrinks the parameters beside the Adam
//! step, scaled by the rate in force as in PyTorch's `AdamW` (which DiLoCo's implementations
//! use):
//!
//! ```text
//! t ← t + 1
//! m ← β₁·m + (1 − β₁)·g
//! v ← β₂·v + (1 − β₂)·g²
//! x ← x − η·λ·x − η · (m / (1 − β₁ᵗ)) / (√(v / (1 − β₂ᵗ)) + ε)
//! ```
//!
//! The step counts, the bias correction, the state per row, the keys and their checks are
//! Adam's ([`super::adam`]); only the place of `λ` differs. With `λ = 0` the two rules are the
//! same.

use super::adam::{self, Adam};
use super::{Buffers, Count, Float, Rule, Step};
use crate::error::ConfigError;
use crate::store::OptimizerConfig;

/// AdamW: [`Adam`]'s settings with the weight decay decoupled.
#[derive(Clone, Copy, Debug)]
pub struct AdamW;

impl AdamW {
    /// The settings of the `[optimizer]` section `opt`: no L2 term, `λ` decoupled.
    pub fn of<F: Float>(opt: &OptimizerConfig) -> Adam<F> {
        Adam {
            l2: F::ZERO,
            decoupled: Some(F::from_f64(opt.weight_decay)),
            ..Adam::of(opt)
        }
    }
}

impl Rule for AdamW {
    const KEYS: &'static [&'static str] = Adam::KEYS;

    fn buffers(opt: &OptimizerConfig) -> Buffers {
        Adam::buffers(opt)
    }

    fn validate(opt: &OptimizerConfig) -> Result<(), ConfigError> {
        adam::validate(opt)
    }

    fn step<F: Float, C: Count>(opt: &OptimizerConfig, s: Step<'_, F, C>) {
        AdamW::of::<F>(opt).apply_state(s.x, s.state, s.g, s.lr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With a zero gradient the moments stay zero and the step is the decay alone,
    /// `x ← x − η·λ·x`; Adam's L2 term would have moved the moments instead.
    #[test]
    fn the_decay_is_beside_the_moments() {
        let opt = OptimizerConfig {
            weight_decay: 0.5,
            ..Default::default()
        };
        let (mut x, mut m, mut v, mut t) = ([2.0], [0.0], [0.0], [0u64]);
        AdamW::of::<f64>(&opt).apply(&mut x, &mut m, &mut v, &mut t, &[0.0], 0.1);
        assert_eq!((x, m, v, t), ([2.0 - 0.1 * 0.5 * 2.0], [0.0], [0.0], [1]));
        let (mut x, mut m, mut v, mut t) = ([2.0], [0.0], [0.0], [0u64]);
        Adam::<f64>::of(&opt).apply(&mut x, &mut m, &mut v, &mut t, &[0.0], 0.1);
        assert!(m[0] > 0.0 && v[0] > 0.0);
    }
}
