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
//! **Staleness** ([`Algorithm::staleness`]): the delay `δ` of every gradient used; the
//! invariant (checked at every event by `tests/ringmaster.rs`) is `δ ≤ R − 1`, and with stops no
//! worker computes at a point `R` or more updates old once the stop has landed.

use serde::{Deserialize, Serialize};

use super::star::{Event, NODE_PROGRESS, Star, star_support};
use crate::algorithm::{Algorithm, Ctx, StalenessStats, World};
use crate::algorithms::{AlgorithmSpec, Setup};
use crate::engine::{Checkpointing, Observer, Outcome, RunConfig, run_checkpointed};
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport, WorkerFault};
use crate::params::{GradId, ReplicaStore};

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
    fn check(&self, path: &str) -> Result<(), ConfigError> {
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

    /// A gradient of worker `w`, computed at `x_version`, landed at the server.
    fn push(&mut self, w: usize, version: u64, grad: GradId, cx: &mut Ctx<'_, '_, Event>) {
        let delay = self.star.k - version;
        if delay >= self.cfg.max_delay {
            cx.world.store.release_gradient(grad);
            self.star.ignored += 1;
            self.star.reply(w, version, cx);
            return;
        }
        let lr = cx.lr();
        let row = self.star.row;
        cx.world.store.apply_gradient(row, grad, lr);
        cx.world.store.release_gradient(grad);
        self.star.follow_statistics(w, cx);
        self.stats.record(delay);
        cx.step_done(w);
        self.star.k += 1;
        if self.cfg.stops {
            let k = self.star.k;
            let stale: Vec<usize> = self
                .star
                .computing()
                .map(|(v, _)| v)
                .filter(|&v| k - self.star.offered(v) >= self.cfg.max_delay)
                .collect();
            for v in stale {
                self.star.offer(v, cx);
            }
        }
        self.star.reply(w, version, cx);
    }
}

impl Algorithm for Ringmaster {
    type Event = Event;

    fn name(&self) -> &str {
        "ringmaster"
    }

    fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        self.star.start(cx);
    }

    fn handle(&mut self, event: Event, cx: &mut Ctx<'_, '_, Event>) {
        if let Some((worker, version, grad)) = self.star.handle(event, cx) {
            self.push(worker, version, grad, cx);
        }
    }

    fn waiting(&self) -> Vec<String> {
        self.star.waiting(|_| false)
    }

    fn eval_model(&self) -> Option<Vec<(usize, f64)>> {
        Some(vec![(self.star.row, 1.0)])
    }

    fn staleness(&self) -> Option<StalenessStats> {
        Some(self.stats)
    }

    fn series(&mut self) -> Vec<(&'static str, f64)> {
        self.star.series()
    }

    fn on_fault(&mut self, fault: WorkerFault, cx: &mut Ctx<'_, '_, Event>) {
        self.star.on_fault(fault, cx);
    }

    fn fault_counts(&self) -> Vec<(&'static str, u64)> {
        vec![("gradients_dropped", self.star.dropped)]
    }
}

impl AlgorithmSpec for RingmasterConfig {
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        self.check(setup.path)
    }

    fn extra_nodes(&self) -> usize {
        1
    }

    fn uses_topology(&self) -> bool {
        false
    }

    fn node_progress(&self) -> Result<(), &'static str> {
        Err(NODE_PROGRESS)
    }

    fn fault_support(&self, _kind: &'static str, fault: FaultKind) -> FaultSupport {
        star_support(fault)
    }

    fn run(
        &self,
        _kind: &'static str,
        world: &mut World<'_>,
        run_cfg: &RunConfig,
        observer: &mut dyn Observer,
        ckpt: Checkpointing<'_>,
    ) -> crate::Result<Outcome> {
        run_checkpointed(
            &mut Ringmaster::new(self, world.workers()),
            world,
            run_cfg,
            observer,
            ckpt,
        )
    }
}
