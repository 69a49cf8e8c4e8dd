//! `kind = "lars"` (You, Gitman & Ginsburg 2017, as in LAP-SGD's large-batch baselines):
//! layer-wise adaptive rate scaling.
//!
//! For each layer `l` of the model ([`crate::store::ReplicaStore::layers`]; the quadratic is
//! one layer), with trust coefficient `η_T = eta`, global rate `η`, momentum `μ` and weight
//! decay `λ`, its parameters `x_l`, gradient `g_l` and momentum buffer `v_l`:
//!
//! ```text
//! τ_l ← η_T · ‖x_l‖ / (‖g_l‖ + λ·‖x_l‖)     (τ_l = 1 when ‖x_l‖ = 0 or the denominator is 0)
//! v_l ← μ·v_l + η·τ_l·(g_l + λ·x_l)
//! x_l ← x_l − v_l
//! ```
//!
//! (Algorithm 1 of the paper: the local rate `η·τ_l` is inside the momentum buffer.) The norms
//! are those of the coordinates of the layer that the step touches: the whole layer for a full
//! step; for a step on a block, the part of each layer inside the block. They, the trust ratio
//! and the local rate `η·τ_l` are computed in `f64`. With `μ = 0` the rule keeps no buffer and
//! the step is `x_l ← x_l − η·τ_l·(g_l + λ·x_l)`. Keys: `eta` (default 0.001) positive,
//! `momentum`, `weight_decay`.

use std::ops::Range;

use super::decay::l2;
use super::momentum::heavy_ball;
use super::{Buffers, Count, Float, Rule, Step};
use crate::store::OptimizerConfig;

/// LARS's default trust coefficient `eta` (You et al. 2017).
pub const DEFAULT_ETA: f64 = 0.001;

/// LARS's settings, in the type it computes in.
#[derive(Clone, Copy, Debug)]
pub struct Lars<F = f64> {
    /// The trust coefficient `η_T`.
    pub eta: f64,
    /// Weight decay `λ`, for the trust ratio (in `f64`).
    pub wd: f64,
    /// Momentum `μ`.
    pub mu: F,
    /// Weight decay `λ` in `F`, for the L2 term.
    pub wdf: F,
}

impl<F: Float> Lars<F> {
    /// The settings of the `[optimizer]` section `opt`.
    pub fn of(opt: &OptimizerConfig) -> Self {
        Lars {
            eta: opt.eta(),
            wd: opt.weight_decay,
            mu: F::from_f64(opt.momentum),
            wdf: F::from_f64(opt.weight_decay),
        }
    }

    /// One step with rate `lr` on the coordinates `block` of a row: `x`, its momentum buffer
    /// `v` and the gradient `g` are those coordinates; `layers` are the model's layers'
    /// coordinate ranges (in the whole row), each scaled by its own trust ratio over its part
    /// inside `block`.
    #[inline(always)]
    pub fn apply(
        self,
        x: &mut [F],
        mut v: Option<&mut [F]>,
        g: &[F],
        lr: f64,
        block: Range<usize>,
        layers: &[Range<usize>],
    ) {
        let Lars { eta, wd, mu, wdf } = self;
        let start = block.start;
        for layer in layers {
            let part = layer.start.max(block.start)..layer.end.min(block.end);
            if part.is_empty() {
                continue;
            }
            // Offsets inside the block.
            let local = part.start - start..part.end - start;
            let norm = |v: &[F]| {
                v.iter()
                    .map(|&a| a.to_f64() * a.to_f64())
                    .sum::<f64>()
                    .sqrt()
            };
            let (xn, gn) = (norm(&x[local.clone()]), norm(&g[local.clone()]));
            let den = gn + wd * xn;
            let trust = if xn > 0.0 && den > 0.0 {
                eta * xn / den
            } else {
                1.0
            };
            let rate = F::from_f64(lr * trust);
            match v.as_deref_mut() {
                Some(v) => {
                    let v = &mut v[local.clone()];
                    for ((x, v), &g) in x[local.clone()].iter_mut().zip(v.iter_mut()).zip(&g[local])
                    {
                        let d = l2(g, *x, wdf);
                        *v = heavy_ball(*v, mu, rate * d);
                        *x -= *v;
                    }
                }
                None => {
                    for (x, &g) in x[local.clone()].iter_mut().zip(&g[local]) {
                        let d = l2(g, *x, wdf);
                        *x -= rate * d;
                    }
                }
            }
        }
    }
}

impl Rule for Lars {
    const KEYS: &'static [&'static str] = &["eta"];

    fn buffers(opt: &OptimizerConfig) -> Buffers {
        Buffers {
            first: opt.momentum > 0.0,
            ..Buffers::NONE
        }
    }

    fn step<F: Float, C: Count>(opt: &OptimizerConfig, s: Step<'_, F, C>) {
        Lars::<F>::of(opt).apply(s.x, s.state.first, s.g, s.lr, s.block, &s.layout.layers);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two layers, one of them zero: `x = (3, 4, 0)`, `g = (2, 6, −4)`, η_T = 0.1, λ = 0.1,
    /// μ = 0.9, η = 0.1. Layer {0, 1}: τ = 0.1·5/(√40 + 0.5), `v = 0.1·τ·(g + 0.1·x)`; layer {2}:
    /// `‖x‖ = 0`, so τ = 1 and `v = 0.1·(−4)`. A step on the block 1..3 sees only `x₁` of the
    /// first layer.
    #[test]
    fn layers_by_hand() {
        let opt = OptimizerConfig {
            momentum: 0.9,
            weight_decay: 0.1,
            eta: Some(0.1),
            ..Default::default()
        };
        let rule = Lars::<f64>::of(&opt);
        let layers = [0..2, 2..3];
        let (mut x, mut v) = ([3.0, 4.0, 0.0], [0.0; 3]);
        rule.apply(&mut x, Some(&mut v), &[2.0, 6.0, -4.0], 0.1, 0..3, &layers);
        let tau = 0.5 / (40f64.sqrt() + 0.5);
        let want = [0.1 * tau * 2.3, 0.1 * tau * 6.4, -0.4];
        for k in 0..3 {
            assert!((v[k] - want[k]).abs() < 1e-15, "coordinate {k}: {}", v[k]);
        }
        assert_eq!(x[2], 0.4);
        let (mut x, mut v) = ([4.0, 1.0], [0.0; 2]);
        rule.apply(&mut x, Some(&mut v), &[6.0, 1.0], 0.1, 1..3, &layers);
        // Layer {0, 1} inside 1..3 is x₁ = 4 alone: τ = 0.1·4/(6 + 0.4).
        let tau = 0.4 / 6.4;
        assert!((v[0] - 0.1 * tau * 6.4).abs() < 1e-15, "{}", v[0]);
    }
}
