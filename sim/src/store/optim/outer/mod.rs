//! The outer optimizers: rules whose "gradient" is a difference of models, applied to whole
//! store rows as linear combinations ([`ReplicaStore::mix`](crate::store::ReplicaStore::mix)), one
//! file each.
//!
//! | rule | file | used by | rows it updates |
//! |------|------|---------|-----------------|
//! | outer SGD with (Nesterov) momentum | [`sgd`] | DiLoCo, Streaming DiLoCo | the global model, its momentum |
//! | slow momentum | [`slow_momentum`] | SlowMo | the anchor, its momentum |
//! | Delayed Nesterov | [`delayed_nesterov`] | asynchronous Local-SGD | the server's model, its momentum, the DN buffer |
//!
//! Unlike the inner rules ([`super::Rule`]), which run per coordinate in the store's float type,
//! these run on rows through the store, so every store computes them in its own precision with
//! one code path; the algorithm names the rows. Each rule's settings are a small struct the
//! algorithm builds from its options (the scenario keys stay the algorithm's: `outer_lr`,
//! `slow_momentum`, …), and the range checks they share are here.

pub mod delayed_nesterov;
pub mod sgd;
pub mod slow_momentum;

use crate::cluster::HostWork;
use crate::error::ConfigError;

/// The host work of an outer step over `coords` coordinates of a rule that reads and writes
/// `values` vectors in all (each rule's `VALUES_TOUCHED`), then of copying the result into the
/// worker's own row (one read, one write): `(values + 2) · coords` values touched.
pub fn step_work(values: u64, coords: u64) -> HostWork {
    HostWork::touch((values + 2) * coords)
}

/// The check of an outer learning rate: positive and finite. `path` is the algorithm entry's,
/// `key` the option's name, `hint` what the paper uses.
pub(crate) fn check_rate(path: &str, key: &str, value: f64, hint: &str) -> Result<(), ConfigError> {
    if value.is_finite() && value > 0.0 {
        return Ok(());
    }
    Err(ConfigError::new(
        &format!("{path}.{key}"),
        format!("{key} must be positive and finite, not {value}"),
    )
    .hint(hint))
}

/// The check of an outer momentum: in `[0, 1)`.
pub(crate) fn check_momentum(
    path: &str,
    key: &str,
    value: f64,
    hint: &str,
) -> Result<(), ConfigError> {
    if (0.0..1.0).contains(&value) {
        return Ok(());
    }
    Err(ConfigError::new(
        &format!("{path}.{key}"),
        format!("{key} must be in [0, 1), not {value}"),
    )
    .hint(hint))
}
