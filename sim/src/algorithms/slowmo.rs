//! SlowMo: `τ` iterations of a base algorithm, an exact average, then a slow momentum step.
//!
//! Wang, Tantia, Ballas & Rabbat, "SlowMo: Improving Communication-Efficient Distributed SGD
//! with Slow Momentum", ICLR 2020 (arXiv:1910.00643), Algorithm 1; the reference implementation
//! is fairscale's `SlowMoDistributedDataParallel`
//! (`fairscale/experimental/nn/data_parallel/gossip/distributed.py`, `perform_slowmo`).
//!
//! ```text
//! the paper (Algorithm 1)                         dasim
//! x_{0,0}; u_0 = 0                                anchor row A = x_{0,0}; momentum row U = 0
//! for t = 0, 1, …  (worker i in parallel):        every worker, from A:
//!   reset/maintain/average base buffers             maintained on each worker (see below)
//!   for k = 0 … τ−1:                                τ iterations of the base, `base`:
//!     x_{t,k+1}^{(i)} = x_{t,k}^{(i)} − γ_t d           "local-sgd": a local optimizer step
//!                                                     "allreduce": a step on the all-reduced gradient
//!                                                     "sgp": an SGP iteration (step, push, mix)
//!   x_{t,τ} = (1/m) Σ_i x_{t,τ}^{(i)}               ring all-reduce of the models (M = the mean)
//!   u_{t+1} = β u_t + (x_{t,0} − x_{t,τ}) / γ_t     U ← β U + (A − M) / γ
//!   x_{t+1,0} = x_{t,0} − α γ_t u_{t+1}             A ← A − α γ U; every worker ← A
//! ```
//!
//! `γ_t` is the base optimizer's learning rate: the rate in force when the outer step is taken
//! ([`crate::algorithm::Ctx::lr`]; the schedule's, at the run's progress then), one rate for the
//! whole step. With a flat schedule it is `optimizer.lr`, the rate of every base step. fairscale
//! reads the optimizer's `group["lr"]` after the `τ`-th step. The new model is computed as
//! `(1 − α)·A + α·M − α·γ·β·U` with the old `U` (the same value), so that with `α = 1` and
//! `β = 0` it is `M` exactly, and SlowMo is its base with an exact average every `τ` iterations,
//! bit for bit (as the paper notes; `tests/slowmo.rs` checks it against `local-sgd` with
//! `h = τ` and against `allreduce`). A rate of 0 (a warm-up's start, a cosine's end at
//! `min_lr = 0`) has no `1/γ`: the step then takes `A ← M` and `U ← β·U`, the limit of the
//! update as `γ → 0` with the workers' change `O(γ)` (a rule on the rate, a function of
//! counters and time, never of parameter values).
//!
//! **The bases.** `"local-sgd"` (the default, as fairscale's): every worker takes `τ` steps of
//! its own optimizer on its shard, then joins the ring: local SGD with `h = τ`
//! ([`super::local_sgd`]); fairscale also lets local SGD average more often than the slow step
//! (`localsgd_frequency`), which dasim does not model. `"allreduce"`: every iteration is a step
//! of all-reduce SGD on the mean gradient ([`super::allreduce`], one bucket, uncompressed); the
//! replicas are then equal after every step, so the exact average costs no communication: each
//! worker takes the slow step on its own copy, as fairscale's plain (not memory-efficient) slow
//! step does. `"sgp"`: every iteration is one of synchronous SGP ([`super::sgp`], its own state
//! machine, reused: each node is held after every `τ`-th iteration's mix); the exact average is
//! of the de-biased models `x_i / w_i`, after which every numerator is `A` and every push-sum
//! weight 1. fairscale, by default (`slowmo_sgp_average_params = False` and the memory-efficient
//! slow step), averages there too as a side effect of its sharded slow step; the paper's
//! Algorithm 1 always does.
//!
//! **The exact average** of `"local-sgd"` and `"sgp"` is a ring all-reduce of the model over the
//! network model ([`super::ring`]): `2(n−1)` chunks of `ceil(S/n)` bytes from every worker, one
//! model all-reduce, as local SGD's. A round waits for every worker (a straggler sets the pace,
//! as in the paper). fairscale's memory-efficient slow step reduces each shard to its owner and
//! broadcasts it back: the same bytes per worker as a ring all-reduce. With `"sgp"`, a ring chunk
//! posted while a gossip message of the round's last iteration is still arriving at its
//! receiver queues behind it at the receiver's downlink (the round is computed when the last
//! node joins, after that message was posted).
//!
//! **The base optimizer's buffers** (momentum, Adam's moments) are maintained on each worker
//! across outer steps: neither reset nor averaged. Algorithm 1 leaves the choice open ("reset /
//! maintain / average"); fairscale maintains them (its slow step writes the parameters only, never
//! the optimizer's state), and so does dasim's local SGD (local momentum), which the reduction
//! to `local-sgd` needs. With `"allreduce"` they are equal on every worker anyway.
//!
//! **Rows.** The anchor `A` (`x_{t,0}`), the slow momentum `U` and the workers' mean `M` are three
//! store rows after the workers' ([`SlowmoConfig::extra_rows`](super::AlgorithmSpec::extra_rows)).
//! Running statistics (batch norm) are not parameters: the slow step does not extrapolate them,
//! the new model takes the workers' mean of them. Evaluation points measure the workers' mean
//! (de-biased with `"sgp"`), as the base's do: right after an outer step, `x_{t+1,0}`.
//!
//! **Activities** ([`crate::record`]): the base's; at the exact average a worker is blocked
//! until every worker has joined the ring (the wait attributed to the last), then communicates
//! until the ring completes ([`super::ring::mark`]).
//!
//! **Under faults** (as local SGD, [`super::local_sgd`], and all-reduce SGD): a crashed worker
//! abandons its step, and a crash or a ring chunk lost on the network breaks the ring for good:
//! no exact average (or, with `"allreduce"`, no step) completes any more, the others wait at
//! their next one and the run stops as stalled, naming them. With `"sgp"` a gossip message that
//! is lost takes its push-sum share with it, as in SGP; the exact average of the de-biased
//! models then restores every weight to 1. A crash with `rejoin_after_s` is refused: the ring
//! has no membership change.
//!
//! **Host work** ([`crate::cluster::host`]): each worker's slow step and its copy of the new
//! anchor, `7d` values touched for `d` parameters, before its next step.
//!
//! **Invariants**: right after every outer step every worker's row equals the anchor `A`
//! (with `"sgp"`, every weight is 1), and the step satisfies `U' = β·U + (A − M)/γ`,
//! `A' = A − α·γ·U'` for the mean `M` of the workers' models at the end of the round.

use serde::{Deserialize, Serialize};

use super::ring::{
    Done, RingRound, RoundEvent, RoundMean, RoundMethod, dispatch, local_step, ring_support,
};
use super::sgp::{self, SgpConfig};
use crate::algorithm::{Algorithm, Ctx, World};
use crate::algorithms::{AlgorithmSpec, Runnable, Setup, Sgp};
use crate::clock::EventQueue;
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport, WorkerFault};
use crate::store::optim::outer::{self, slow_momentum::SlowMomentum};
use crate::store::tracked::Tracked;
use crate::store::{GradId, ReplicaStore, Slot};

/// The base algorithm of SlowMo (`base` in the scenario).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Base {
    /// Local SGD: `τ` local steps per worker between exact averages (the default, fairscale's).
    #[default]
    LocalSgd,
    /// Synchronous SGP: push-sum gossip every iteration.
    Sgp,
    /// All-reduce SGD: a gradient all-reduce every iteration.
    Allreduce,
    /// Any other word: refused by validation, at `base`.
    #[serde(untagged)]
    Other(String),
}

fn default_tau() -> u32 {
    48
}

fn default_slow_momentum() -> f64 {
    0.5
}

fn default_slow_lr() -> f64 {
    1.0
}

/// Options of SlowMo.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlowmoConfig {
    /// The base algorithm: `"local-sgd"` (default), `"sgp"` or `"allreduce"`.
    #[serde(default)]
    pub base: Base,
    /// τ, base iterations between two exact averages, `≥ 1` (default 48, fairscale's
    /// `slowmo_frequency`).
    #[serde(default = "default_tau")]
    pub tau: u32,
    /// β, the slow momentum, in `[0, 1)` (default 0.5, fairscale's).
    #[serde(default = "default_slow_momentum")]
    pub slow_momentum: f64,
    /// α, the slow learning rate, `> 0` (default 1.0, the paper's and fairscale's).
    #[serde(default = "default_slow_lr")]
    pub slow_lr: f64,
}

impl Default for SlowmoConfig {
    fn default() -> Self {
        SlowmoConfig {
            base: Base::default(),
            tau: default_tau(),
            slow_momentum: default_slow_momentum(),
            slow_lr: default_slow_lr(),
        }
    }
}

impl SlowmoConfig {
    fn check(&self, path: &str) -> Result<(), ConfigError> {
        if let Base::Other(word) = &self.base {
            return Err(ConfigError::new(
                &format!("{path}.base"),
                format!("unknown base algorithm \"{word}\""),
            )
            .hint("base is one of \"local-sgd\" (the default), \"sgp\" or \"allreduce\""));
        }
        if self.tau == 0 {
            return Err(
                ConfigError::new(&format!("{path}.tau"), "tau must be at least 1").hint(
                    "tau is τ, the base iterations between two exact averages (fairscale's default 48)",
                ),
            );
        }
        outer::check_momentum(
            path,
            "slow_momentum",
            self.slow_momentum,
            "β = 0.5 is fairscale's default; 0 with slow_lr = 1 is the base algorithm with an exact average every tau iterations",
        )?;
        outer::check_rate(
            path,
            "slow_lr",
            self.slow_lr,
            "α = 1.0 is the paper's and fairscale's default",
        )?;
        Ok(())
    }
}

/// [`Base`] without its refused words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Mode {
    LocalSgd,
    Sgp,
    Allreduce,
}

/// Events of SlowMo.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum Event {
    /// `worker` finished computing its gradient (`"local-sgd"`, `"allreduce"`).
    ComputeDone(usize),
    /// A worker's ring all-reduce completed: of the models (`"local-sgd"`, `"sgp"`), of the
    /// gradients (`"allreduce"`).
    RingDone(Done),
    /// An event of the SGP base.
    Sgp(sgp::Event),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct WorkerState {
    grad: Option<GradId>,
    /// Base iterations taken.
    step: u64,
}

/// The state machine of SlowMo.
#[derive(Serialize, Deserialize)]
pub struct Slowmo {
    /// The base (resolved: a checkpoint's format has no room for `Base::Other`).
    base: Mode,
    tau: u64,
    slow_momentum: f64,
    slow_lr: f64,
    workers: Vec<WorkerState>,
    /// The ring: of the models (`"local-sgd"`, `"sgp"`), of the gradients (`"allreduce"`).
    rounds: RingRound,
    /// The SGP base's state machine (`"sgp"`).
    sgp: Option<Sgp>,
    /// `"allreduce"`: the mean gradient of the current iteration and its rate.
    mean: RoundMean<(GradId, f64)>,
    /// The anchor's row; the slow momentum's and the mean's follow it.
    anchor: usize,
    /// The last outer step taken (its index).
    stepped: Option<u64>,
    /// Outer steps taken.
    outer_steps: u64,
    /// The rate `γ` of the last outer step.
    last_rate: f64,
}

impl Slowmo {
    /// A new instance on `world`'s workers (and, with `"sgp"`, its peer schedule).
    ///
    /// # Panics
    /// If `cfg.base` is not a base ([`AlgorithmSpec::validate`] refuses it first).
    pub fn new(cfg: &SlowmoConfig, world: &World<'_>) -> Self {
        let n = world.workers();
        let base = match &cfg.base {
            Base::LocalSgd => Mode::LocalSgd,
            Base::Sgp => Mode::Sgp,
            Base::Allreduce => Mode::Allreduce,
            Base::Other(word) => panic!("slowmo: \"{word}\" is not a base (validate the entry)"),
        };
        let sgp = match base {
            Mode::Sgp => {
                let schedule = world
                    .topology
                    .training_schedule(world.store.batch_size(), world.store.train_size());
                Some(Sgp::holding_every(
                    &SgpConfig::default(),
                    &schedule,
                    u64::from(cfg.tau.max(1)),
                ))
            }
            Mode::LocalSgd | Mode::Allreduce => None,
        };
        Slowmo {
            base,
            tau: u64::from(cfg.tau.max(1)),
            slow_momentum: cfg.slow_momentum,
            slow_lr: cfg.slow_lr,
            workers: vec![
                WorkerState {
                    grad: None,
                    step: 0,
                };
                n
            ],
            rounds: RingRound::default(),
            sgp,
            mean: RoundMean::default(),
            anchor: 0,
            stepped: None,
            outer_steps: 0,
            last_rate: 0.0,
        }
    }

    /// The anchor's row, `x_{t,0}` (valid once the run started).
    pub fn anchor_row(&self) -> usize {
        self.anchor
    }

    /// The slow momentum's row, `u_t` (valid once the run started).
    pub fn momentum_row(&self) -> usize {
        self.anchor + 1
    }

    /// The row of the workers' mean `x_{t,τ}` at the last outer step (valid once the run
    /// started).
    pub fn mean_row(&self) -> usize {
        self.anchor + 2
    }

    /// Outer steps taken so far.
    pub fn outer_steps(&self) -> u64 {
        self.outer_steps
    }

    /// The rate `γ_t` of the last outer step (0 before the first).
    pub fn last_rate(&self) -> f64 {
        self.last_rate
    }

    /// The base's name (`local-sgd`, `sgp`, `allreduce`).
    pub fn base(&self) -> &str {
        match self.base {
            Mode::LocalSgd => "local-sgd",
            Mode::Sgp => "sgp",
            Mode::Allreduce => "allreduce",
        }
    }

    /// The SGP base's push-sum weights (`"sgp"`), else `None`.
    pub fn weights(&self) -> Option<Vec<f64>> {
        self.sgp.as_ref().map(Sgp::weights)
    }

    /// Runs `f` on the SGP base with a context of its own events, then schedules what it
    /// scheduled, in its order, as [`Event::Sgp`]; then sends the nodes it held into the ring.
    /// Events due at one instant keep the order they were scheduled in, and every one comes
    /// after those scheduled before and before those scheduled after: the engine takes them in
    /// the same order as if SGP ran alone.
    fn in_sgp(
        &mut self,
        cx: &mut Ctx<'_, '_, Event>,
        f: impl FnOnce(&mut Sgp, &mut Ctx<'_, '_, sgp::Event>),
    ) {
        let sgp = self.sgp.as_mut().expect("the sgp base");
        let mut queue = EventQueue::new();
        {
            let mut sub = Ctx {
                now: cx.now,
                queue: &mut queue,
                world: &mut *cx.world,
            };
            f(sgp, &mut sub);
        }
        while let Some((t, e)) = queue.pop() {
            cx.queue.push(t, Event::Sgp(e));
        }
        for i in sgp.take_held() {
            self.rounds.join(0, i, cx, Event::RingDone);
        }
    }

    fn begin(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        if self.sgp.is_some() {
            self.in_sgp(cx, |s, c| s.release(w, c));
            return;
        }
        self.workers[w].grad = Some(cx.start_step(w, Event::ComputeDone(w)));
    }

    /// `"allreduce"`: the worker applies the iteration's mean gradient (formed by the first
    /// worker whose ring completes, with the rate in force then, as all-reduce SGD); after every
    /// `τ`-th, the outer step (the first worker) or its result (the others).
    fn gradient_ring_done(&mut self, w: usize, iter: u64, cx: &mut Ctx<'_, '_, Event>) {
        let (mean, lr) = self.mean.get(iter, self.workers.len(), || {
            let grads: Vec<GradId> = self
                .workers
                .iter_mut()
                .map(|s| s.grad.take().expect("every worker contributed a gradient"))
                .collect();
            (cx.world.store.mean_gradient(&grads), cx.lr())
        });
        cx.world.store.apply_gradient(w, mean, lr);
        cx.step_done(w);
        self.workers[w].step += 1;
        if let Some((g, _)) = self.mean.used() {
            cx.world.store.release_gradient(g);
        }
        if (iter + 1).is_multiple_of(self.tau) {
            let outer = (iter + 1) / self.tau - 1;
            if self.stepped == Some(outer) {
                // The replicas are equal: this one is the first's before its outer step.
                cx.world.store.mix(w, &[(Slot::Row(self.anchor), 1.0)]);
            } else {
                // One rate for the whole outer step: the mean's.
                let m = self.mean_row();
                cx.world.store.mix(m, &[(Slot::Row(w), 1.0)]);
                self.slow_step(&mut cx.world.store, w, lr);
                self.stepped = Some(outer);
            }
            self.charge_slow_step(w, cx);
        }
        self.begin(w, cx);
    }

    /// The model ring completed for `w` (`"local-sgd"`, `"sgp"`): the outer step, once per
    /// round, when the first worker's ring completes: every worker has contributed and waits
    /// (none computes), so reading their rows then is exact. Then `w` goes on.
    fn model_ring_done(&mut self, w: usize, round: u64, cx: &mut Ctx<'_, '_, Event>) {
        if self.stepped != Some(round) {
            let n = self.workers.len();
            let m = self.mean_row();
            let store = &mut cx.world.store;
            match &mut self.sgp {
                Some(sgp) => {
                    // The mean of the de-biased models, then every weight 1.
                    let terms: Vec<(Slot, f64)> = sgp
                        .weights()
                        .iter()
                        .enumerate()
                        .map(|(i, w)| (Slot::Row(i), 1.0 / (n as f64 * w)))
                        .collect();
                    store.mix(m, &terms);
                    sgp.set_weights(1.0);
                }
                None => {
                    // As local SGD averages.
                    let all: Vec<usize> = (0..n).collect();
                    store.average(&all);
                    store.mix(m, &[(Slot::Row(0), 1.0)]);
                }
            }
            let gamma = cx.lr();
            self.slow_step(&mut cx.world.store, 0, gamma);
            for i in 1..n {
                cx.world.store.mix(i, &[(Slot::Row(0), 1.0)]);
            }
            self.stepped = Some(round);
        }
        self.charge_slow_step(w, cx);
        self.begin(w, cx);
    }

    /// Every worker takes the slow step on its own copy, as fairscale's SlowMo does: before its
    /// next step.
    fn charge_slow_step(&self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let params = cx.world.store.num_params() as u64;
        let work = outer::step_work(outer::slow_momentum::VALUES_TOUCHED, params);
        cx.host_work(w, work);
    }

    /// The slow momentum step ([`SlowMomentum::step`]) from the anchor `A`, the momentum `U`
    /// and the mean `M` (its row holds `x_{t,τ}`; so does row `out`), then `A ← out`.
    fn slow_step(&mut self, store: &mut Tracked<'_>, out: usize, gamma: f64) {
        let (a, u, m) = (self.anchor, self.momentum_row(), self.mean_row());
        let slow = SlowMomentum {
            lr: self.slow_lr,
            momentum: self.slow_momentum,
        };
        slow.step(store, [a, u, m], out, gamma);
        // Running statistics are averaged, not extrapolated.
        let state = store.state();
        if !state.is_empty() {
            store.copy_block(out, m, state);
        }
        store.mix(a, &[(Slot::Row(out), 1.0)]);
        self.last_rate = gamma;
        self.outer_steps += 1;
    }
}

impl RoundMethod<Event> for Slowmo {
    fn rounds(&mut self) -> &mut RingRound {
        &mut self.rounds
    }

    /// `"local-sgd"`: a local step; every `τ`-th, the worker joins the ring. `"allreduce"`: the
    /// worker's gradient joins the iteration's ring.
    fn computed(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        if self.base == Mode::Allreduce {
            self.rounds.join(0, w, cx, Event::RingDone);
            return;
        }
        let g = self.workers[w].grad.take().expect("a gradient in flight");
        local_step(w, g, cx);
        self.workers[w].step += 1;
        if self.workers[w].step.is_multiple_of(self.tau) {
            self.rounds.join(0, w, cx, Event::RingDone);
        } else {
            self.begin(w, cx);
        }
    }

    fn ring_done(&mut self, w: usize, round: u64, cx: &mut Ctx<'_, '_, Event>) {
        if self.base == Mode::Allreduce {
            self.gradient_ring_done(w, round, cx);
        } else {
            self.model_ring_done(w, round, cx);
        }
    }
}

impl Algorithm for Slowmo {
    type Event = Event;

    fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        let n = self.workers.len();
        let store = &mut cx.world.store;
        // Added rows copy row 0: every worker's initial model, so the anchor; the momentum
        // starts at zero.
        self.anchor = store.add_rows(3);
        let u = self.momentum_row();
        store.mix(u, &[(Slot::Row(u), 0.0)]);
        self.rounds.add_model(cx.world);
        if self.sgp.is_some() {
            self.in_sgp(cx, |s, c| s.start(c));
            return;
        }
        for w in 0..n {
            self.begin(w, cx);
        }
    }

    fn handle(&mut self, event: Event, cx: &mut Ctx<'_, '_, Event>) {
        match event {
            Event::ComputeDone(w) => dispatch(self, RoundEvent::ComputeDone(w), cx),
            Event::RingDone(done) => dispatch(self, RoundEvent::RingDone(done), cx),
            Event::Sgp(e) => self.in_sgp(cx, |s, c| s.handle(e, c)),
        }
    }

    fn waiting(&self) -> Vec<String> {
        if !self.rounds.is_started() {
            return Vec::new();
        }
        let mut out = self.sgp.as_ref().map(Sgp::waiting).unwrap_or_default();
        out.extend(self.rounds.waiting());
        out
    }

    fn eval_model(&self) -> Option<Vec<(usize, f64)>> {
        self.sgp.as_ref().and_then(Sgp::eval_model)
    }

    fn replica_scales(&self) -> Option<Vec<f64>> {
        self.sgp.as_ref().and_then(Sgp::replica_scales)
    }

    fn mass_lost(&self) -> Option<f64> {
        self.sgp.as_ref().and_then(Sgp::mass_lost)
    }

    fn series(&mut self) -> Vec<(&'static str, f64)> {
        let mut out = vec![("outer_steps", self.outer_steps as f64)];
        if let Some(sgp) = &mut self.sgp {
            out.extend(sgp.series());
        }
        out
    }

    fn on_fault(&mut self, fault: WorkerFault, cx: &mut Ctx<'_, '_, Event>) {
        if let WorkerFault::Crash(w) = fault {
            if self.sgp.is_some() {
                self.in_sgp(cx, |s, c| s.on_fault(fault, c));
            } else if let Some(g) = self.workers[w].grad.take() {
                cx.world.store.release_gradient(g);
            }
            self.rounds.crash(w, cx.now());
        }
    }
}

impl AlgorithmSpec for SlowmoConfig {
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        self.check(setup.path)?;
        if self.base == Base::Sgp {
            sgp::require_strongly_connected(setup, "SlowMo with base = \"sgp\"")?;
        }
        Ok(())
    }

    fn extra_rows(&self) -> usize {
        3
    }

    fn uses_topology(&self) -> bool {
        self.base == Base::Sgp
    }

    fn node_progress(&self) -> Result<(), &'static str> {
        if self.base == Base::Allreduce {
            return Err(
                "with base = \"allreduce\" its step is one averaged update of every replica, taken when all workers have the same step count, so a node's own counter is the global one",
            );
        }
        Ok(())
    }

    fn fault_support(&self, _kind: &'static str, fault: FaultKind) -> FaultSupport {
        ring_support(fault)
    }

    fn build(&self, _kind: &'static str, world: &World<'_>) -> crate::Result<Box<dyn Runnable>> {
        Ok(Box::new(Slowmo::new(self, world)))
    }
}
