//! Heavy-ball momentum (`momentum = μ`), shared by SGD and LARS, and Nesterov's look-ahead
//! (`nesterov`, SGD's). A row's momentum buffer `v` is its own (see
//! [`crate::store::optimizer`]); a rule keeps none when `μ = 0`
//! ([`super::Buffers::first`]), and a store that keeps one anyway gets the same step from it.
//!
//! Each update is one function of one coordinate, in the operation order every store uses.

use super::Float;
use crate::error::ConfigError;

/// The buffer after one step with the direction `d`: `v·μ + d`.
#[inline(always)]
pub fn heavy_ball<F: Float>(v: F, mu: F, d: F) -> F {
    v * mu + d
}

/// Nesterov's step direction from the new buffer `v`: `d + v·μ`.
#[inline(always)]
pub fn nesterov<F: Float>(d: F, v: F, mu: F) -> F {
    d + v * mu
}

/// `momentum` is in `[0, 1)`.
pub(crate) fn validate(momentum: f64) -> Result<(), ConfigError> {
    if !(0.0..1.0).contains(&momentum) {
        return Err(ConfigError::new(
            "optimizer.momentum",
            format!("momentum must be in [0, 1), got {momentum}"),
        ));
    }
    Ok(())
}

/// Nesterov's look-ahead needs a momentum.
pub(crate) fn validate_nesterov(nesterov: bool, momentum: f64) -> Result<(), ConfigError> {
    if nesterov && momentum == 0.0 {
        return Err(ConfigError::new(
            "optimizer.nesterov",
            "Nesterov momentum needs a momentum above zero",
        )
        .hint("set optimizer.momentum, e.g. 0.9, or remove nesterov"));
    }
    Ok(())
}
