//! The contributors' chapter's example rule (`book/src/contributing.md`, *Adding an optimizer
//! rule*), compiled and tested here: RMSprop (Tieleman & Hinton 2012) as a contributor writes
//! it in `sim/src/store/optim/rmsprop.rs`, reusing Adam's keys `beta2` (the decay `α`) and
//! `eps`. It is not in the registry, so no scenario can name it; the tests call it as the
//! registry would, in both widths.

// ANCHOR: rule
//! `kind = "rmsprop"` (Tieleman & Hinton 2012): the gradient scaled by a running mean of its
//! square. With the second moment `s` per row and coordinate, `α = beta2`, `ε = eps` and an L2
//! weight decay `λ`:
//!
//! ```text
//! d ← g + λ·x
//! s ← α·s + (1 − α)·d²
//! x ← x − η·d / (√s + ε)
//! ```

use super::decay::l2;
use super::{Buffers, Count, Float, Rule, State, Step};
use crate::error::ConfigError;
use crate::store::OptimizerConfig;

/// RMSprop's settings, in the type it computes in.
#[derive(Clone, Copy, Debug)]
pub struct RmsProp<F = f64> {
    /// The second moment's decay `α`.
    pub alpha: F,
    /// `ε`.
    pub eps: F,
    /// Weight decay `λ`.
    pub wd: F,
}

impl<F: Float> RmsProp<F> {
    /// The settings of the `[optimizer]` section `opt`.
    pub fn of(opt: &OptimizerConfig) -> Self {
        RmsProp {
            alpha: F::from_f64(opt.beta2()),
            eps: F::from_f64(opt.eps()),
            wd: F::from_f64(opt.weight_decay),
        }
    }

    /// One step with rate `lr` over `x`, its second moment `s` and the gradient `g`.
    #[inline(always)]
    pub fn apply(self, x: &mut [F], s: &mut [F], g: &[F], lr: F) {
        let RmsProp { alpha, eps, wd } = self;
        for ((x, s), &g) in x.iter_mut().zip(s.iter_mut()).zip(g) {
            let d = l2(g, *x, wd);
            *s = alpha * *s + (F::ONE - alpha) * d * d;
            *x -= lr * d / (s.sqrt() + eps);
        }
    }
}

impl Rule for RmsProp {
    const KEYS: &'static [&'static str] = &["beta2", "eps"];

    fn buffers(_opt: &OptimizerConfig) -> Buffers {
        Buffers {
            second: true,
            ..Buffers::NONE
        }
    }

    fn validate(opt: &OptimizerConfig) -> Result<(), ConfigError> {
        if opt.momentum != 0.0 {
            return Err(
                ConfigError::new("optimizer.momentum", "this RMSprop has no momentum")
                    .hint("remove momentum"),
            );
        }
        Ok(())
    }

    fn step<F: Float, C: Count>(opt: &OptimizerConfig, s: Step<'_, F, C>) {
        let v = s.state.second.expect("RMSprop keeps a second moment");
        RmsProp::<F>::of(opt).apply(s.x, v, s.g, F::from_f64(s.lr));
    }
}
// ANCHOR_END: rule

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::optim::Layout;

    /// The first step from `s = 0` is `η·g/(√(1 − α)·|g| + ε)`; the rule agrees with itself in
    /// `f32` and refuses a momentum.
    #[test]
    fn the_example_rule_steps_and_checks() {
        let opt = OptimizerConfig {
            beta2: Some(0.9),
            ..Default::default()
        };
        let (mut x, mut s) = (vec![1.0, -2.0], vec![0.0; 2]);
        let g = [0.5, -4.0];
        let state = State::<f64, u64> {
            first: None,
            second: Some(&mut s),
            counts: None,
        };
        let (lr, block, layout) = (0.1, 0..2, &Layout::flat(2));
        RmsProp::step(
            &opt,
            Step {
                x: &mut x,
                state,
                g: &g,
                lr,
                block,
                layout,
            },
        );
        for (k, want) in [1.0 - 0.1 / 0.1f64.sqrt(), -2.0 + 0.1 / 0.1f64.sqrt()]
            .into_iter()
            .enumerate()
        {
            assert!((x[k] - want).abs() < 1e-6, "coordinate {k}: {}", x[k]);
        }
        let (mut x32, mut s32) = (vec![1.0f32, -2.0], vec![0.0f32; 2]);
        RmsProp::<f32>::of(&opt).apply(&mut x32, &mut s32, &[0.5, -4.0], 0.1);
        assert!((f64::from(x32[1]) - x[1]).abs() < 1e-5);
        assert_eq!(RmsProp::buffers(&opt).count(), 1);
        let with_momentum = OptimizerConfig {
            momentum: 0.9,
            ..opt
        };
        let err = RmsProp::validate(&with_momentum).unwrap_err();
        assert!(err.to_string().contains("optimizer.momentum"), "{err}");
    }
}
