//! Local SGD and post-local SGD: `H` local steps, then a model all-reduce.
//!
//! Stich, "Local SGD Converges Fast and Communicates Little", ICLR 2019; Lin, Stich, Patel &
//! Jaggi, "Don't Use Large Mini-Batches, Use Local SGD", ICLR 2020 (post-local SGD).
//!
//! ```text
//! loop (worker i, step k = 0, 1, …):
//!     read x_i; compute g_i on x_i and a minibatch                    (compute time)
//!     if k < warmup_steps:                                            (post-local phase 1)
//!         ring all-reduce of the g_j; x_i ← optimizer step with mean_j g_j
//!     else:
//!         x_i ← optimizer step with g_i                                (local step)
//!         if (k + 1 − warmup_steps) mod H = 0:
//!             ring all-reduce of the models; x_i ← mean_j x_j          (waits for everyone)
//! ```
//!
//! Plain local SGD has `warmup_steps = 0`. Post-local SGD runs mini-batch SGD (gradients
//! all-reduced every step, exactly [`crate::algorithms::AllReduceSgd`]) for the first
//! `warmup_steps` steps, then local SGD; Lin et al. switch at the first learning-rate decay.
//! Only parameters are averaged: each worker keeps its own momentum buffer (local momentum, as
//! in Lin et al.). A model all-reduce costs what a gradient all-reduce costs: a ring of `2(n−1)`
//! chunks of `ceil(S/n)` bytes. Every worker runs the same sequence of all-reduces, so the ring
//! rounds line up and cannot deadlock.
//!
//! The averaging is done when the first worker completes the ring: every worker has then
//! contributed its model and is waiting (not computing), so setting every row to the mean at that
//! instant is exact.
//!
//! **Activities** ([`crate::record`]): a worker computes during its steps; at an all-reduce it
//! is blocked until every worker has contributed (the wait attributed to the last contributor),
//! then communicates until the ring completes ([`super::ring::mark`]).
//!
//! **Under faults** (as all-reduce SGD, [`super::allreduce`]): a crashed worker abandons its
//! step, and a crash or a chunk lost on the network (`loss`, `link-down`) breaks the ring for
//! good: no all-reduce completes any more, not even one under way. The other workers go on
//! with their local steps up to their next all-reduce and wait there; once nobody can move,
//! the run stops as stalled, naming the waiting workers and the crashed one. A crash with
//! `rejoin_after_s` is refused: the ring has no membership change.
//!
//! **Invariant**: replicas are equal after every all-reduce — during the warm-up at every step,
//! then every `H` steps — so every worker's step `k` reads the same parameters whenever step
//! `k − 1` ended with an all-reduce.

use serde::{Deserialize, Serialize};

use super::ring::{
    RingRound, RoundEvent, RoundMean, RoundMethod, dispatch, local_step, ring_support,
};
use crate::algorithm::{Algorithm, Ctx, World};
use crate::algorithms::{AlgorithmSpec, Runnable, Setup};
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport, WorkerFault};
use crate::store::{GradId, ReplicaStore};

fn default_h() -> u32 {
    4
}

/// Options of local SGD and post-local SGD.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalSgdConfig {
    /// Local steps between model all-reduces, `H ≥ 1` (default 4).
    #[serde(default = "default_h")]
    pub h: u32,
    /// Post-local SGD: steps per worker of mini-batch SGD (gradient all-reduce every step)
    /// before local SGD starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_steps: Option<u64>,
}

impl Default for LocalSgdConfig {
    fn default() -> Self {
        LocalSgdConfig {
            h: default_h(),
            warmup_steps: None,
        }
    }
}

impl LocalSgdConfig {
    /// Checks the options; `post` for the `post-local-sgd` kind.
    pub(crate) fn check(&self, path: &str, post: bool) -> Result<(), ConfigError> {
        if self.h == 0 {
            return Err(
                ConfigError::new(&format!("{path}.h"), "h must be at least 1")
                    .hint("h is the number of local steps between model all-reduces, e.g. 4"),
            );
        }
        match (post, self.warmup_steps) {
            (true, None) => Err(ConfigError::new(
                &format!("{path}.warmup_steps"),
                "post-local SGD needs warmup_steps: the steps of mini-batch SGD before local SGD starts",
            )
            .hint("e.g. warmup_steps = 100; Lin et al. switch at the first learning-rate decay")),
            (false, Some(_)) => Err(ConfigError::new(
                &format!("{path}.warmup_steps"),
                "warmup_steps belongs to post-local SGD",
            )
            .hint("use kind = \"post-local-sgd\", or remove warmup_steps")),
            _ => Ok(()),
        }
    }
}

/// Events of local SGD: a worker's gradient computed, a worker's ring all-reduce completed.
pub type Event = RoundEvent;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Phase {
    Computing,
    /// Waiting for a gradient all-reduce (warm-up step).
    GradientRing,
    /// Waiting for a model all-reduce.
    ModelRing,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct WorkerState {
    grad: Option<GradId>,
    step: u64,
    phase: Phase,
}

/// The state machine of local SGD (and post-local SGD).
#[derive(Serialize, Deserialize)]
pub struct LocalSgd {
    h: u64,
    warmup: u64,
    workers: Vec<WorkerState>,
    /// The ring, of the gradients (warm-up) or the models.
    rounds: RingRound,
    /// The mean gradient of a warm-up round and its rate.
    mean: RoundMean<(GradId, f64)>,
    /// The last model-averaging round done.
    averaged: Option<u64>,
}

impl LocalSgd {
    /// A new instance for `n` workers.
    pub fn new(cfg: &LocalSgdConfig, n: usize) -> Self {
        LocalSgd {
            h: u64::from(cfg.h.max(1)),
            warmup: cfg.warmup_steps.unwrap_or(0),
            workers: vec![
                WorkerState {
                    grad: None,
                    step: 0,
                    phase: Phase::Computing,
                };
                n
            ],
            rounds: RingRound::default(),
            mean: RoundMean::default(),
            averaged: None,
        }
    }

    fn begin(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        self.workers[w].phase = Phase::Computing;
        self.workers[w].grad = Some(cx.start_step(w, Event::ComputeDone(w)));
    }

    /// `w` applies the warm-up round's mean gradient.
    fn apply_mean(&mut self, w: usize, round: u64, cx: &mut Ctx<'_, '_, Event>) {
        let n = self.workers.len();
        let (mean, lr) = self.mean.get(round, n, || {
            let grads: Vec<GradId> = self
                .workers
                .iter_mut()
                .map(|s| s.grad.take().expect("every worker contributed"))
                .collect();
            let g = cx.world.store.mean_gradient(&grads);
            // One rate for the whole iteration, read when its mean is formed, so every worker
            // applies the same update even while a schedule changes the rate. The counters are
            // all equal then, so `progress = "node"` gives this rate too.
            (g, cx.lr())
        });
        cx.world.store.apply_gradient(w, mean, lr);
        cx.step_done(w);
        self.workers[w].step += 1;
        if let Some((g, _)) = self.mean.used() {
            cx.world.store.release_gradient(g);
        }
    }
}

impl RoundMethod<Event> for LocalSgd {
    fn rounds(&mut self) -> &mut RingRound {
        &mut self.rounds
    }

    fn computed(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let k = self.workers[w].step;
        if k < self.warmup {
            self.workers[w].phase = Phase::GradientRing;
            self.rounds.join(0, w, cx, Event::RingDone);
            return;
        }
        let g = self.workers[w].grad.take().expect("a gradient in flight");
        local_step(w, g, cx);
        self.workers[w].step += 1;
        if (k + 1 - self.warmup).is_multiple_of(self.h) {
            self.workers[w].phase = Phase::ModelRing;
            self.rounds.join(0, w, cx, Event::RingDone);
        } else {
            self.begin(w, cx);
        }
    }

    fn ring_done(&mut self, w: usize, round: u64, cx: &mut Ctx<'_, '_, Event>) {
        match self.workers[w].phase {
            Phase::GradientRing => self.apply_mean(w, round, cx),
            Phase::ModelRing => {
                if self.averaged != Some(round) {
                    let all: Vec<usize> = (0..self.workers.len()).collect();
                    cx.world.store.average(&all);
                    self.averaged = Some(round);
                }
            }
            Phase::Computing => unreachable!("a ring completes only for a contributing worker"),
        }
        self.begin(w, cx);
    }
}

impl Algorithm for LocalSgd {
    type Event = Event;

    fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        let n = self.workers.len();
        self.rounds.add_model(cx.world);
        for w in 0..n {
            self.begin(w, cx);
        }
    }

    fn handle(&mut self, event: Event, cx: &mut Ctx<'_, '_, Event>) {
        dispatch(self, event, cx);
    }

    fn waiting(&self) -> Vec<String> {
        self.rounds.waiting()
    }

    fn on_fault(&mut self, fault: WorkerFault, cx: &mut Ctx<'_, '_, Event>) {
        if let WorkerFault::Crash(w) = fault {
            if self.workers[w].phase == Phase::Computing
                && let Some(g) = self.workers[w].grad.take()
            {
                cx.world.store.release_gradient(g);
            }
            self.rounds.crash(w, cx.now());
        }
    }
}

impl AlgorithmSpec for LocalSgdConfig {
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        self.check(setup.path, setup.kind == "post-local-sgd")
    }

    fn uses_topology(&self) -> bool {
        false
    }

    fn fault_support(&self, _kind: &'static str, fault: FaultKind) -> FaultSupport {
        ring_support(fault)
    }

    fn build(&self, _kind: &'static str, world: &World<'_>) -> crate::Result<Box<dyn Runnable>> {
        Ok(Box::new(LocalSgd::new(self, world.workers())))
    }
}
