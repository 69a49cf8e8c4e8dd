//! Gradient clipping by global norm (`clip_norm`), shared by every rule.
//!
//! With `clip_norm = c`, every rule first scales the gradient it applies by `min(1, c/‖g‖)`,
//! `‖g‖` the Euclidean norm of the gradient's trainable coordinates (PyTorch's
//! `clip_grad_norm_` over the model's parameters). It is the gradient the step applies that is
//! clipped: a worker's own, or the mean all-reduce applies (as data-parallel training clips
//! after the all-reduce); and its whole norm, also for a step on a block (a parameter-server
//! shard, an LPP-SGD block), so that every block of one gradient is scaled alike. The store
//! measures the norm and scales the gradient ([`factor`]) before it calls the rule, so no rule
//! sees it.

use crate::error::ConfigError;

/// The factor a gradient of norm `norm` is scaled by before a step: `min(1, clip_norm / norm)`,
/// 1 without `clip_norm` (or for a zero or non-finite norm, which clipping cannot mend: a NaN
/// stays for the divergence check to see).
pub fn factor(clip_norm: Option<f64>, norm: f64) -> f64 {
    match clip_norm {
        Some(c) if norm.is_finite() && norm > c => c / norm,
        _ => 1.0,
    }
}

/// `clip_norm`, when set, is a positive number.
pub(crate) fn validate(clip_norm: Option<f64>) -> Result<(), ConfigError> {
    if let Some(c) = clip_norm
        && !(c.is_finite() && c > 0.0)
    {
        return Err(ConfigError::new(
            "optimizer.clip_norm",
            format!("clip_norm must be a positive number, got {c}"),
        )
        .hint("the largest gradient norm a step applies; leave it out for no clipping"));
    }
    Ok(())
}
