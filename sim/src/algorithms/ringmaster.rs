//! Ringmaster ASGD: asynchronous SGD that ignores every gradient whose delay reaches `R`, and
//! stops the computations that would produce one.
//!
//! Maranjyan, Tyurin & Richtárik, "Ringmaster ASGD: The First Asynchronous SGD with Optimal Time
//! Complexity", ICML 2025 (arXiv:2501.16168): Algorithm 4 (without calculation stops) and
//! Algorithm 5 (with them, the default here).
//!
//! ```text
//! server: x_0, k = 0; every worker starts computing at x_0
//! a gradient ∇f(x_{k−δ}; ξ) lands from worker i, with delay δ (server updates since its point):
//!     if δ < R:  x_{k+1} = x_k − γ ∇f(x_{k−δ}; ξ);  k ← k + 1
//!     else:      ignore it
//!     worker i computes at x_k
//!     with stops: every worker computing at a point x_j with k − j ≥ R (its gradient would be
//!                 ignored) abandons it and computes at x_k
//! ```
//!
//! The protocol, the messages and the faults are the star's ([`super::star`]); the step is the
//! scenario's optimizer (plain SGD with rate γ is the paper's). `R = 1` uses only gradients
//! computed at the current point: it is Rennala SGD with `B = 1` (`tests/ringmaster.rs` checks
//! that the two runs are the same, stops or not). With `R` larger than any delay that occurs it
//! is plain asynchronous SGD with one server.
//!
//! **Delay.** As the paper defines it: the number of server updates between the point a
//! gradient was computed at being current and the gradient landing. A stop is decided on the
//! newest point the server has sent a worker, so a stop already in flight is not sent again
//! until that point too is `R` updates old.
//!
//! **Steps.** A gradient used in an update counts as a step of its worker; an ignored one counts
//! none.
//!
//! **Staleness** ([`Algorithm::staleness`](crate::algorithm::Algorithm::staleness)): the delay `δ` of every gradient used; the
//! invariant (checked at every event by `tests/ringmaster.rs`) is `δ ≤ R − 1`, and with stops no
//! worker computes at a point `R` or more updates old once the stop has landed.

use serde::{Deserialize, Serialize};

use super::star::{Event, Star, StarMethod, StarOptions};
use crate::algorithm::{Ctx, StalenessStats};
use crate::error::ConfigError;
use crate::store::GradId;

fn yes() -> bool {
    true
}

/// Options of Ringmaster ASGD.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RingmasterConfig {
    /// The delay threshold `R ≥ 1`: a gradient whose delay is `R` or more is ignored (the
    /// paper's optimal value is `⌈σ²/ε⌉`, as Rennala's batch).
    pub max_delay: u64,
    /// Stop a worker's computation as soon as its gradient would be ignored, and send it the
    /// current point (default true: Algorithm 5; false: Algorithm 4).
    #[serde(default = "yes")]
    pub stops: bool,
}

impl RingmasterConfig {
    fn check_delay(&self, path: &str) -> Result<(), ConfigError> {
        if self.max_delay == 0 {
            return Err(ConfigError::new(
                &format!("{path}.max_delay"),
                "max_delay must be at least 1: it is R, and gradients of delay R or more are ignored",
            )
            .hint("max_delay = 1 uses only gradients computed at the current point; the paper's optimal R is ⌈σ²/ε⌉"));
        }
        Ok(())
    }
}

/// The state machine of Ringmaster ASGD.
#[derive(Serialize, Deserialize)]
pub struct Ringmaster {
    cfg: RingmasterConfig,
    star: Star,
    stats: StalenessStats,
}

impl Ringmaster {
    /// A new instance for `n` workers.
    pub fn new(cfg: &RingmasterConfig, n: usize) -> Self {
        Ringmaster {
            cfg: cfg.clone(),
            star: Star::new(n),
            stats: StalenessStats::default(),
        }
    }

    /// The server's iteration `k` (updates taken).
    pub fn iterations(&self) -> u64 {
        self.star.k
    }

    /// The server's model row (valid once the run started).
    pub fn server_row(&self) -> usize {
        self.star.row
    }

    /// Gradients that landed with a delay of `R` or more, and were ignored.
    pub fn ignored(&self) -> u64 {
        self.star.ignored
    }

    /// Computations abandoned by a stop.
    pub fn stopped(&self) -> u64 {
        self.star.stopped
    }

    /// The workers computing, with the server iteration of the point each computes at.
    pub fn computing(&self) -> Vec<(usize, u64)> {
        self.star.computing().collect()
    }
}

impl StarMethod for Ringmaster {
    fn star(&self) -> &Star {
        &self.star
    }

    fn star_mut(&mut self) -> &mut Star {
        &mut self.star
    }

    fn push(&mut self, w: usize, version: u64, grad: GradId, cx: &mut Ctx<'_, '_, Event>) {
        let delay = self.star.k - version;
        if delay >= self.cfg.max_delay {
            self.star.ignore(w, version, grad, cx);
            return;
        }
        self.stats.record(delay);
        self.star.step(w, grad, &[w], cx);
        if self.cfg.stops {
            let r = self.cfg.max_delay;
            self.star.stop(|offered, k| k - offered >= r, cx);
        }
        self.star.reply(w, version, cx);
    }

    fn staleness(&self) -> Option<StalenessStats> {
        Some(self.stats)
    }
}

impl StarOptions for RingmasterConfig {
    type Method = Ringmaster;

    fn check(&self, path: &str) -> Result<(), ConfigError> {
        self.check_delay(path)
    }

    fn method(&self, workers: usize) -> Ringmaster {
        Ringmaster::new(self, workers)
    }
}
