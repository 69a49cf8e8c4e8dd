//! `kind = "sgd"` (the default): SGD with optional heavy-ball or Nesterov momentum and an L2
//! weight decay.
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
//! With `μ = 0` the rule keeps no buffer and the step is plain SGD, `x ← x − η·(g + λ·x)`; with
//! `λ = 0` the L2 term is not added. Keys: `momentum`, `nesterov` (which needs `momentum > 0`)
//! and `weight_decay`.
//!
//! The burn store's rows queue SGD steps and apply them later, several in one pass, and run this
//! loop compiled for AVX2 where the CPU has it (`dasim_models::rows`); the bits are the same.

use super::decay::l2;
use super::momentum::{heavy_ball, nesterov as look_ahead};
use super::{Buffers, Count, Float, Rule, Step};
use crate::store::OptimizerConfig;

/// SGD's settings, in the type it computes in.
#[derive(Clone, Copy, Debug)]
pub struct Sgd<F = f64> {
    /// Momentum `μ`.
    pub mu: F,
    /// Weight decay `λ`.
    pub wd: F,
    /// Whether the L2 term is added (`λ > 0`).
    pub decay: bool,
    /// Nesterov's look-ahead.
    pub nesterov: bool,
}

impl<F: Float> Sgd<F> {
    /// The settings of the `[optimizer]` section `opt`.
    pub fn of(opt: &OptimizerConfig) -> Self {
        Sgd {
            mu: F::from_f64(opt.momentum),
            wd: F::from_f64(opt.weight_decay),
            decay: opt.weight_decay > 0.0,
            nesterov: opt.nesterov(),
        }
    }

    /// The same settings, bit for bit.
    pub fn same(self, other: Self) -> bool {
        (self.mu.bits(), self.wd.bits(), self.decay, self.nesterov)
            == (
                other.mu.bits(),
                other.wd.bits(),
                other.decay,
                other.nesterov,
            )
    }

    /// One step with rate `lr` over `x`, its momentum buffer `v` and the gradient `g` (of one
    /// length), or without a buffer `x ← x − η·d`: `d = g + x·λ; v = v·μ + d;
    /// x −= (nesterov ? d + v·μ : v)·η`.
    #[inline(always)]
    pub fn apply(self, x: &mut [F], v: Option<&mut [F]>, g: &[F], lr: F) {
        let Sgd {
            mu,
            wd,
            decay,
            nesterov,
        } = self;
        match v {
            Some(v) => {
                for ((x, v), &g) in x.iter_mut().zip(v.iter_mut()).zip(g) {
                    let d = if decay { l2(g, *x, wd) } else { g };
                    *v = heavy_ball(*v, mu, d);
                    let step = if nesterov { look_ahead(d, *v, mu) } else { *v };
                    *x -= step * lr;
                }
            }
            None => {
                for (x, &g) in x.iter_mut().zip(g) {
                    let d = if decay { l2(g, *x, wd) } else { g };
                    *x -= d * lr;
                }
            }
        }
    }
}

impl Rule for Sgd {
    const KEYS: &'static [&'static str] = &["nesterov"];

    fn buffers(opt: &OptimizerConfig) -> Buffers {
        Buffers {
            first: opt.momentum > 0.0,
            ..Buffers::NONE
        }
    }

    fn step<F: Float, C: Count>(opt: &OptimizerConfig, s: Step<'_, F, C>) {
        Sgd::<F>::of(opt).apply(s.x, s.state.first, s.g, F::from_f64(s.lr));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two steps worked out by hand, in both types: momentum 0.5, Nesterov, weight decay 0.1,
    /// `x = 2`.
    #[test]
    fn nesterov_with_decay_by_hand() {
        let opt = OptimizerConfig {
            momentum: 0.5,
            nesterov: Some(true),
            weight_decay: 0.1,
            ..Default::default()
        };
        fn run<F: Float>(opt: &OptimizerConfig) -> (f64, f64) {
            let rule = Sgd::<F>::of(opt);
            let (mut x, mut v) = ([F::from_f64(2.0)], [F::ZERO]);
            // d = 1 + 0.1·2 = 1.2; v = 1.2; step = 1.2 + 0.5·1.2 = 1.8; x = 2 − 0.5·1.8 = 1.1.
            rule.apply(&mut x, Some(&mut v), &[F::ONE], F::from_f64(0.5));
            let first = x[0].to_f64();
            // d = 0.11; v = 0.6 + 0.11 = 0.71; step = 0.11 + 0.355 = 0.465; x = 1.1 − 0.465.
            rule.apply(&mut x, Some(&mut v), &[F::ZERO], F::ONE);
            (first, x[0].to_f64())
        }
        for (a, b, tol) in [
            (run::<f64>(&opt).0, 1.1, 1e-12),
            (run::<f64>(&opt).1, 1.1 - 0.465, 1e-12),
            (run::<f32>(&opt).0, 1.1, 1e-6),
            (run::<f32>(&opt).1, 1.1 - 0.465, 1e-6),
        ] {
            assert!((a - b).abs() < tol, "{a}, expected {b}");
        }
    }

    #[test]
    fn a_buffer_is_kept_only_with_momentum() {
        let plain = OptimizerConfig::default();
        assert_eq!(Sgd::buffers(&plain), Buffers::NONE);
        let heavy = OptimizerConfig {
            momentum: 0.9,
            ..plain
        };
        assert!(Sgd::buffers(&heavy).first);
    }
}
