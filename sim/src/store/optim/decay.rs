//! Weight decay `λ` (`weight_decay`), the two ways the rules apply it: as an **L2 term** added
//! to the gradient (SGD, Adam, LARS: `d = g + λ·x`), or **decoupled** from it (AdamW: the
//! parameters shrink beside the step, `x ← x − η·λ·x`, Loshchilov & Hutter 2019).
//!
//! Each is one function of one coordinate, written in the operation order every store uses, so
//! that a rule calling it keeps the bits of the loops it replaced.

use super::Float;
use crate::error::ConfigError;

/// The gradient with the L2 term: `g + x·λ`.
#[inline(always)]
pub fn l2<F: Float>(g: F, x: F, lambda: F) -> F {
    g + x * lambda
}

/// The parameter after the decoupled decay of factor `c = η·λ`: `x − x·c`.
#[inline(always)]
pub fn decoupled<F: Float>(x: F, c: F) -> F {
    x - x * c
}

/// `weight_decay` is zero or positive.
pub(crate) fn validate(weight_decay: f64) -> Result<(), ConfigError> {
    if !(weight_decay.is_finite() && weight_decay >= 0.0) {
        return Err(ConfigError::new(
            "optimizer.weight_decay",
            format!("weight decay must be zero or positive, got {weight_decay}"),
        ));
    }
    Ok(())
}
