//! A-PSGD: asynchronous SGD with a (sharded) parameter server, optionally stale-synchronous.
//!
//! Lian, Huang, Li & Liu, "Asynchronous Parallel Stochastic Gradient for Nonconvex
//! Optimization", NeurIPS 2015 (AsySG-con); the sharded server of Dean et al., "Large Scale
//! Distributed Deep Networks", NeurIPS 2012, and Li et al., "Scaling Distributed Machine Learning
//! with the Parameter Server", OSDI 2014; bounded staleness as the stale synchronous parallel
//! model of Ho et al., "More Effective Distributed ML via a Stale Synchronous Parallel Parameter
//! Server", NeurIPS 2013.
//!
//! The model is split into `servers` contiguous shards of near-equal size
//! ([`crate::store::blocks`]); shard `s` lives on network node `n + s` (its own NIC, so a server's
//! downlink serializes the pushes it receives) and in block `s` of one extra store row, the
//! server's model, which carries the server's optimizer state.
//!
//! ```text
//! worker i, clock c = 0, 1, …:
//!     send a pull request (header only) to every shard
//!     on each reply: block s of x_i ← block s of the server's model (as served)
//!     when every shard has replied: compute g on x_i and a minibatch      (compute time)
//!     push block s of g to shard s, for every s; then pull again (clock c + 1)
//! shard s, on a push: optimizer step on block s of the server's model with block s of g,
//!                     at the rate in force on arrival
//! shard s, on a pull of worker i at clock c: serve it when every worker has had at least
//!                     c − staleness gradients applied at s (at once without `staleness`)
//! ```
//!
//! Worker `i` addresses the shards in the order `i mod S, i+1 mod S, …`, so that the workers'
//! messages, which queue FIFO at their own NIC, do not all wait behind the same shard first.
//! Links are FIFO, so a worker's push reaches each shard before its next pull request: every
//! worker reads a model that includes its own last gradient. With `staleness = s` (stale
//! synchronous parallel), a worker more than `s` steps ahead of the slowest worker waits for it;
//! `s = 0` is bulk-synchronous. Server-side work takes no simulated time; the server's cost is
//! its network traffic. A worker step counts when its gradient has been applied at every shard.
//!
//! ## Running statistics
//!
//! For a model with state ([`ReplicaStore::state`]: batch norm's running statistics), the state
//! is not trained by the server: a worker's statistics are its own (its computed gradient's state
//! part is applied to its own row, [`ReplicaStore::apply_gradient_block`]'s state rule, and a
//! pull serves only the trainable coordinates), and the server's statistics follow the workers':
//! when a push lands at a shard whose block holds state, those coordinates of the server's row
//! become the pushing worker's (the statistics of its latest pass) before the optimizer step on
//! the trainable ones. Bounded — the server always holds one worker's actual statistics — where
//! adding every pushed change to the server is a delayed feedback loop, unstable at 32 workers.
//! Without state none of this does anything.
//!
//! ## Aggregating `M` gradients per update
//!
//! With `aggregate = M > 1` the server is AsySG-con of Lian et al. 2015 with `M` gradients per
//! update: `x_{k+1} = x_k − γ Σ_{m=1..M} G(x_{k−τ_{k,m}}; ξ_{k,m})`, the `M` gradients being the
//! next `M` to reach the server, from whichever workers, each computed on a model `τ_{k,m}`
//! updates old. dasim takes the step with their mean ([`ReplicaStore::mean_gradient`]) through
//! the optimizer, so `lr` is the step of one update whatever `M` (the paper's `γ` is `lr / M`),
//! as a Downpour-style server that averages a minibatch of pushed gradients would: synchronous
//! in `M`, asynchronous across updates.
//!
//! ```text
//! shard s, on a push of g: append g to its aggregate; when all M blocks of an aggregate are in
//!                          at s: one optimizer step on block s with block s of their mean
//! ```
//!
//! - **Membership.** A gradient joins the open aggregate when its *first* block lands at any
//!   shard; the aggregate closes, and its mean is taken ([`ReplicaStore::mean_gradient`]), when
//!   `M` have joined. With one shard that is exactly "the first `M` pushes to arrive". With
//!   several, every shard applies the same aggregates (each shard applies block `s` of the one
//!   mean when all `M` of its blocks have landed there), so the model is always a sum of whole
//!   aggregates per block; only the instant each shard applies it differs.
//! - **Pulls are served meanwhile from the current model**: a worker does not wait for its
//!   aggregate, and may read a model without its own last gradient (buffered until `M − 1`
//!   others land).
//! - **Read inconsistency with several shards.** A pull reads each block as its shard has it when
//!   the request lands; shards apply an aggregate at different instants (its blocks land at
//!   different times), so the blocks a worker reads may reflect different numbers of aggregates
//!   — block 0 after update `k`, block 1 still before it. The same holds with `M = 1` (one
//!   gradient per update); it is the inconsistent read of Lian et al.'s AsySG-incon, applied
//!   shard-wise, and the staleness measures below are taken per block.
//! - **Staleness and steps.** The server's version counts updates (aggregates), so the
//!   staleness of each member is the number of aggregates applied at the shard between serving
//!   the pull its gradient was computed on and the aggregate's update (one measurement per
//!   member and block). A member's step counts when its aggregate has been applied at every
//!   shard; `M` steps count at once. The staleness bound (`staleness`) counts each member as a
//!   gradient of its worker applied; a partial aggregate holds its members back, so a bound can
//!   make every worker wait for gradients that are buffered: with `staleness = 0`, `M` must
//!   divide the number of workers, else the run stalls at the first step, naming the buffer.
//! - **Faults.** A gradient is accepted or discarded whole, at its first block's arrival:
//!   discarded (every block, `pushes_dropped`, `gradients_dropped`) if its worker is down then;
//!   accepted otherwise, and then its later blocks are applied with its aggregate even if the
//!   worker crashed meanwhile (the aggregate was taken in as one update). A block lost for good
//!   makes its aggregate skip that shard (the aggregate's update is lost there, as a push is
//!   with `M = 1`), and counts no step for that member. At a run's end, the gradients buffered
//!   in the open aggregate (fewer than `M`) were never applied and count no step; so do those
//!   of aggregates not yet applied at every shard.
//!
//! With `M = 1` none of this applies: each block is applied as it lands, as above.
//!
//! ## Delay-adaptive steps
//!
//! With `step_rule = "delay-adaptive"` a gradient whose delay at shard `s` is `δ` (the shard's
//! updates between serving the worker's pull and applying this push, the staleness below) is
//! applied at rate `γ · n / max(n, δ)`, `n` the number of workers up at that instant (all of
//! them without faults; a crashed worker computes nothing, so it does not count towards the
//! concurrency): the full rate up to the concurrency `n`, shrinking as `1/δ` beyond it. This is the delay-adaptive stepsize of
//! Mishchenko, Bach, Even & Woodworth (NeurIPS 2022) as their reference code sets it
//! (`lr * num_workers / max(num_workers, delay)`), the rule Koloskova, Stich & Jaggi (NeurIPS
//! 2022) also analyse: constant-step asynchronous SGD must take its step below `1/(L·τ_max)` for
//! the worst delay `τ_max`, the adaptive rule only for the concurrency. It needs `aggregate = 1`
//! (a mean of gradients has no single delay).
//!
//! ## Under faults
//!
//! Server shards are network nodes, not workers: a `crash` entry names workers only, so shards
//! never crash (a crashed server would need a recovery protocol — a checkpoint, a replica — that
//! the algorithm does not define). Links to the shards stay up under a partition (`groups`), but
//! a `link-down` entry on a worker's links, and `loss`, cover them.
//!
//! - **Lost messages** are retransmitted, as the reference's transport (ZeroMQ over TCP in
//!   ps-lite) would: a pull, a reply or a push lost on the network is posted again
//!   `retransmit_ms` after it was posted (default four round trips of a model on an idle
//!   network, `8·(S/B + α)`), as often as needed (`retransmissions`). Only a lost message
//!   schedules anything, so a run without faults has exactly its usual events. A retransmitted
//!   push may land after the worker's next pull, which then reads a model without its own last
//!   gradient. A message whose link is cut for good (down with no end) is not retried: a push is
//!   lost for that shard, and a pull or a reply leaves its worker waiting; with nothing else
//!   left to happen the run stalls naming it.
//! - **A crashed worker** abandons its step (its gradient is never pushed), and the shards
//!   discard what it pushed that lands while it is down (`pushes_dropped`; a gradient whose
//!   pushes landed partly before the crash is applied at some shards only). Its held pulls are
//!   forgotten and the replies to it are dropped. Either way the gradient is lost and counted
//!   (`gradients_dropped`), and no step is counted for it. The other workers go on — unless a
//!   staleness bound makes them wait for the crashed worker's gradients: then the run stalls,
//!   naming the held pulls and the worker down. On rejoin the worker pulls again, with the clock
//!   it had.
//!
//! **Invariant**: every pushed gradient is applied exactly once to every shard (with `M > 1`:
//! as a member of exactly one aggregate, whose mean each shard applies once); a worker's model,
//! when read, is block by block the server's model as served (its trainable coordinates; running
//! statistics are the worker's own); with a staleness bound `s`, no worker starts step `c`
//! before every worker's first `c − s` gradients are applied.
//!
//! **Staleness** ([`Algorithm::staleness`]): for each block of a gradient applied at shard `s`,
//! the number of gradients shard `s` applied between serving the worker's pull and applying this
//! one. (The store-layer measure of [`crate::store::tracked`] gives the same numbers.)
//!
//! **Activities** ([`crate::record`]): a worker computes its gradient; from pushing it until every
//! shard has replied to its next pull it communicates (its own round trip, delayed only by the
//! network), except while a shard holds its pull back under the staleness bound: then it is
//! blocked, and the wait is attributed to the worker whose gradient, applied at that shard,
//! released the last held pull.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::retransmit::{Resend, Retransmit};
use crate::algorithm::{Algorithm, Ctx, StalenessStats, World};
use crate::algorithms::{AlgorithmSpec, Runnable, Setup};
use crate::clock::time::TimeUnit;
use crate::engine::SimTime;
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport, WorkerFault};
use crate::record::Activity;
use crate::store::{GradId, ReplicaStore, blocks};

fn one() -> usize {
    1
}

/// Options of the parameter server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PsConfig {
    /// Number of server shards, each a network node of its own (default 1).
    #[serde(default = "one")]
    pub servers: usize,
    /// Stale-synchronous bound `s`: a worker more than `s` steps ahead of the slowest waits
    /// (none: fully asynchronous; 0: bulk-synchronous).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staleness: Option<u64>,
    /// Under `[[faults]]`: a message lost on the network is posted again this long after it
    /// was, milliseconds (default: four round trips of a model on an idle network,
    /// `8·(S/B + α)`). Unused without faults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmit_ms: Option<f64>,
    /// Gradients per update `M` (default 1): the server buffers pushed gradients and applies
    /// their mean as one optimizer step once `M` have arrived, whichever workers sent them
    /// (synchronous in `M`, asynchronous across updates); `1 ≤ M ≤ workers`.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub aggregate: usize,
    /// The step size of a gradient of delay `δ` (default `"constant"`: `lr`, whatever `δ`).
    #[serde(default, skip_serializing_if = "StepRule::is_constant")]
    pub step_rule: StepRule,
}

/// How the server's step size depends on a gradient's delay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepRule {
    /// Every gradient at the optimizer's rate `γ`.
    #[default]
    Constant,
    /// A gradient of delay `δ` at `γ · n / max(n, δ)` (`n` workers, the concurrency):
    /// Mishchenko, Bach, Even & Woodworth, "Asynchronous SGD Beats Minibatch SGD Under Arbitrary
    /// Delays", NeurIPS 2022 (their delay-adaptive stepsize, as their reference code sets it:
    /// `lr * num_workers / max(num_workers, delay)`); Koloskova, Stich & Jaggi, "Sharper
    /// Convergence Guarantees for Asynchronous SGD for Distributed and Federated Learning",
    /// NeurIPS 2022, shrink the step the same way for delays beyond the concurrency.
    DelayAdaptive,
}

impl StepRule {
    fn is_constant(&self) -> bool {
        *self == StepRule::Constant
    }

    /// The rate of a gradient of delay `delay` with `workers` workers, `lr` the optimizer's.
    pub fn rate(self, lr: f64, delay: u64, workers: usize) -> f64 {
        match self {
            StepRule::Constant => lr,
            StepRule::DelayAdaptive => {
                let n = workers as f64;
                lr * n / n.max(delay as f64)
            }
        }
    }
}

fn is_one(m: &usize) -> bool {
    *m == 1
}

impl Default for PsConfig {
    fn default() -> Self {
        PsConfig {
            servers: 1,
            staleness: None,
            retransmit_ms: None,
            aggregate: 1,
            step_rule: StepRule::Constant,
        }
    }
}

impl PsConfig {
    /// Checks the options.
    pub(crate) fn check(&self, path: &str) -> Result<(), ConfigError> {
        if self.servers == 0 {
            return Err(ConfigError::new(
                &format!("{path}.servers"),
                "a parameter server needs at least one server shard",
            )
            .hint("servers = 1 is a single server; more shards split the model and the traffic"));
        }
        if self.aggregate == 0 {
            return Err(ConfigError::new(
                &format!("{path}.aggregate"),
                "aggregate must be at least 1 gradient per update",
            )
            .hint("aggregate = 1 applies every gradient on arrival (asynchronous SGD)"));
        }
        if self.step_rule != StepRule::Constant && self.aggregate > 1 {
            return Err(ConfigError::new(
                &format!("{path}.step_rule"),
                format!(
                    "step_rule = \"delay-adaptive\" scales each gradient by its own delay; with aggregate = {} the server applies a mean of gradients of different delays",
                    self.aggregate
                ),
            )
            .hint("use aggregate = 1 with the delay-adaptive rule, or step_rule = \"constant\""));
        }
        if let Some(ms) = self.retransmit_ms {
            let at = format!("{path}.retransmit_ms");
            if !(ms.is_finite() && ms > 0.0) {
                return Err(ConfigError::new(
                    &at,
                    format!("retransmit_ms must be a positive number of milliseconds, got {ms}"),
                )
                .hint(
                    "leave it out for the default, four round trips of a model on an idle network",
                ));
            }
            SimTime::checked_nonzero_from_f64(ms, TimeUnit::Millis, &at)?;
        }
        Ok(())
    }

    /// The retransmission timeout on `world`'s network: the option, else `8·(S/B + α)` (at
    /// least 1 µs).
    pub fn retransmit(&self, world: &World<'_>) -> SimTime {
        match self.retransmit_ms {
            Some(ms) => SimTime::from_millis_f64(ms),
            None => world
                .net
                .serialization_time(world.model_bytes + world.net.header_bytes())
                .saturating_add(world.net.latency())
                .scale(8.0)
                .max(SimTime::from_nanos(1_000)),
        }
    }
}

/// Events of the parameter server.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum Event {
    /// A pull request of `worker` for its step `clock` reached shard `shard`.
    Pull {
        /// The worker.
        worker: usize,
        /// The shard.
        shard: usize,
        /// The step the worker is about to compute (gradients it pushed so far).
        clock: u64,
        /// The worker's pull number (a reply to an earlier pull is ignored).
        pull: u64,
    },
    /// Shard `shard`'s block of the model reached `worker`.
    Reply {
        /// The worker.
        worker: usize,
        /// The shard.
        shard: usize,
        /// The pull it answers.
        pull: u64,
    },
    /// `worker` finished computing its gradient (the second field: its crash count when the
    /// step started; a step abandoned by a crash is ignored).
    ComputeDone(usize, u64),
    /// Block `shard` of `worker`'s gradient `grad` reached the shard.
    Push {
        /// The worker.
        worker: usize,
        /// The shard.
        shard: usize,
        /// The gradient.
        grad: GradId,
    },
    /// Under faults: the lost message `id` is posted again.
    Retransmit(u64),
}

impl Resend for Event {
    fn resend(id: u64) -> Self {
        Event::Retransmit(id)
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct WorkerState {
    clock: u64,
    started: u64,
    replies: usize,
    grad: Option<GradId>,
    /// Shards holding the worker's pull back.
    held: usize,
    /// Pulls so far.
    pull: u64,
    /// Crashes so far.
    life: u64,
    /// Why it waits for good: a pull or a reply whose link is down for good.
    cut: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Shard {
    block: Range<usize>,
    node: usize,
    /// Gradients of each worker applied here.
    applied: Vec<u64>,
    /// Gradients applied here, in total.
    version: u64,
    /// The version each worker last read.
    read: Vec<u64>,
    /// Pull requests held back by the staleness bound, in arrival order: `(worker, clock,
    /// pull)`.
    held: Vec<(usize, u64, u64)>,
}

/// The state machine of the parameter server.
#[derive(Serialize, Deserialize)]
pub struct ParameterServer {
    servers: usize,
    bound: Option<u64>,
    workers: Vec<WorkerState>,
    shards: Vec<Shard>,
    /// Shards that have yet to apply each pushed gradient.
    pending: BTreeMap<GradId, usize>,
    row: usize,
    /// The model's state suffix ([`ReplicaStore::state`]; empty without batch norm): the
    /// running statistics, which stay local to each worker (see the module's "Running
    /// statistics").
    state: Range<usize>,
    stats: StalenessStats,
    /// Under faults: lost messages posted again.
    retransmit: Retransmit<Event>,
    /// Gradients of which a block was dropped or lost (they count no step).
    broken: std::collections::BTreeSet<GradId>,
    pushes_dropped: u64,
    gradients_dropped: u64,
    /// Gradients per update (`aggregate`); with 1 none of the fields below is used.
    m: usize,
    /// The step size's dependence on a gradient's delay.
    #[serde(default)]
    step_rule: StepRule,
    /// The aggregate each gradient joined (at its first block's arrival), until it is done.
    joined: BTreeMap<GradId, u64>,
    /// Aggregates not yet done at every shard, by number.
    aggs: BTreeMap<u64, Aggregate>,
    /// The aggregate filling now (fewer than `m` members).
    open: u64,
    /// Gradients discarded whole (their worker was down when their first block landed): blocks
    /// still to come.
    discarded: BTreeMap<GradId, usize>,
    /// Shards at which a gradient that has not joined yet lost its block for good.
    early_lost: BTreeMap<GradId, Vec<usize>>,
    /// Aggregates formed, and the last one formed: its mean and members.
    formed: u64,
    last_formed: Option<(GradId, Vec<GradId>)>,
    /// Aggregates done at every shard.
    aggregates_applied: u64,
}

/// An aggregate of `M` gradients (with `aggregate = M > 1`).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Aggregate {
    /// The member gradients and their workers, in joining order.
    members: Vec<(GradId, usize)>,
    /// Their mean, once `M` have joined.
    mean: Option<GradId>,
    /// Per shard: the members whose block arrived (or was lost for good), with the shard's
    /// version the worker read (for the staleness measure).
    arrived: Vec<Vec<(usize, u64)>>,
    /// Per shard: a member's block was lost there for good (the aggregate is not applied there).
    lost: Vec<bool>,
    /// Per shard: applied (or skipped) there.
    done: Vec<bool>,
}

impl ParameterServer {
    /// A new instance for `n` workers; the shards are network nodes `n..n + servers`.
    pub fn new(cfg: &PsConfig, n: usize) -> Self {
        ParameterServer {
            servers: cfg.servers.max(1),
            bound: cfg.staleness,
            workers: vec![WorkerState::default(); n],
            shards: Vec::new(),
            pending: BTreeMap::new(),
            row: usize::MAX,
            state: 0..0,
            stats: StalenessStats::default(),
            retransmit: Retransmit::default(),
            broken: std::collections::BTreeSet::new(),
            pushes_dropped: 0,
            gradients_dropped: 0,
            m: cfg.aggregate.max(1),
            step_rule: cfg.step_rule,
            joined: BTreeMap::new(),
            aggs: BTreeMap::new(),
            open: 0,
            discarded: BTreeMap::new(),
            early_lost: BTreeMap::new(),
            formed: 0,
            last_formed: None,
            aggregates_applied: 0,
        }
    }

    /// Retransmits lost messages after `timeout` (set for runs with `[[faults]]`).
    pub fn with_retransmit(mut self, timeout: SimTime) -> Self {
        self.retransmit.set_timeout(timeout);
        self
    }

    /// Sends `event` from `src` to `dst`; under faults, a lost message is posted again after
    /// the retransmission timeout, unless its link is cut for good.
    fn post(
        &mut self,
        src: usize,
        dst: usize,
        bytes: u64,
        event: Event,
        cx: &mut Ctx<'_, '_, Event>,
    ) {
        if let Some(lost) = self.retransmit.post(src, dst, bytes, event, cx) {
            self.lost_for_good(lost.src, lost.dst, lost.event, cx);
        }
    }

    /// The concurrency `n` of the delay-adaptive rule: the workers up now. A crashed worker has
    /// no gradient in flight, so the delays a live worker's gradient can see are bounded by the
    /// live count, the concurrency the rule's `n` stands for; it is at least 1, the pusher's
    /// own.
    fn concurrency(workers: usize, cx: &Ctx<'_, '_, Event>) -> usize {
        if !cx.faults_configured() {
            return workers;
        }
        (0..workers).filter(|&w| !cx.is_down(w)).count().max(1)
    }

    /// A message that can never be delivered: a push's block is lost for its shard; a pull or
    /// a reply leaves its worker waiting.
    fn lost_for_good(&mut self, src: usize, dst: usize, event: Event, cx: &mut Ctx<'_, '_, Event>) {
        match event {
            Event::Push { shard, grad, .. } if self.m > 1 => self.lose_block(shard, grad, cx),
            Event::Push { grad, .. } => self.drop_push(grad, cx),
            Event::Pull { worker, pull, .. } | Event::Reply { worker, pull, .. }
                if pull == self.workers[worker].pull =>
            {
                self.workers[worker].cut = Some(format!(
                    "worker {worker} waits for its pull {pull}, lost for good: the link {src} -> \
                     {dst} stays down"
                ));
            }
            _ => {}
        }
    }

    /// A push of gradient `grad` that will never be applied at its shard.
    fn drop_push(&mut self, grad: GradId, cx: &mut Ctx<'_, '_, Event>) {
        self.pushes_dropped += 1;
        if self.broken.insert(grad) {
            self.gradients_dropped += 1;
        }
        self.push_done(grad, None, cx);
    }

    /// One shard is done with gradient `grad` (applied, or dropped); the last one releases it
    /// and counts the step of `applied_by` if no block was lost.
    fn push_done(&mut self, grad: GradId, applied_by: Option<usize>, cx: &mut Ctx<'_, '_, Event>) {
        let left = self.pending.get_mut(&grad).expect("a pushed gradient");
        *left -= 1;
        if *left == 0 {
            self.pending.remove(&grad);
            cx.world.store.release_gradient(grad);
            if !self.broken.remove(&grad)
                && let Some(worker) = applied_by
            {
                cx.step_done(worker);
            }
        }
    }

    /// The store row holding the server's model.
    pub fn server_row(&self) -> usize {
        self.row
    }

    /// Steps each worker has started.
    pub fn started(&self) -> Vec<u64> {
        self.workers.iter().map(|w| w.started).collect()
    }

    /// Gradients of each worker applied at each shard: `[shard][worker]`.
    pub fn applied(&self) -> Vec<Vec<u64>> {
        self.shards.iter().map(|s| s.applied.clone()).collect()
    }

    /// With `aggregate = M > 1`: the number of aggregates formed so far (`M` gradients joined),
    /// and the last one formed: its mean, the one gradient the shards apply, and its members in
    /// arrival order. At most one aggregate forms per event.
    pub fn last_formed(&self) -> (u64, Option<(GradId, &[GradId])>) {
        (
            self.formed,
            self.last_formed.as_ref().map(|(m, g)| (*m, g.as_slice())),
        )
    }

    /// With `aggregate = M > 1`: the number of aggregates applied (or, under faults, skipped)
    /// at every shard; their members' steps are counted.
    pub fn aggregates_done(&self) -> u64 {
        self.aggregates_applied
    }

    /// With `aggregate = M > 1`: the gradients still buffered in the aggregate filling now
    /// (fewer than `M`; at a run's end, never applied).
    pub fn buffered(&self) -> Vec<GradId> {
        self.aggs
            .get(&self.open)
            .map(|a| a.members.iter().map(|m| m.0).collect())
            .unwrap_or_default()
    }

    /// `aggregate > 1`: block `shard` of `worker`'s gradient `grad` reached its shard.
    fn push_aggregated(
        &mut self,
        worker: usize,
        shard: usize,
        grad: GradId,
        cx: &mut Ctx<'_, '_, Event>,
    ) {
        if let Some(left) = self.discarded.get_mut(&grad) {
            // A block of a gradient discarded at its first arrival.
            *left -= 1;
            self.pushes_dropped += 1;
            if *left == 0 {
                self.discarded.remove(&grad);
                cx.world.store.release_gradient(grad);
            }
            return;
        }
        let agg = match self.joined.get(&grad) {
            Some(&k) => k,
            None if cx.is_down(worker) => {
                // Its first block lands while its worker is down: discarded at every shard.
                self.pushes_dropped += 1;
                self.gradients_dropped += 1;
                let lost = self.early_lost.remove(&grad).map_or(0, |v| v.len());
                let left = self.servers - 1 - lost;
                if left == 0 {
                    cx.world.store.release_gradient(grad);
                } else {
                    self.discarded.insert(grad, left);
                }
                return;
            }
            None => self.join(grad, worker, cx),
        };
        self.follow_statistics(shard, worker, cx);
        let read = self.shards[shard].read[worker];
        let a = self.aggs.get_mut(&agg).expect("an aggregate");
        a.arrived[shard].push((worker, read));
        self.settle(agg, cx);
    }

    /// Gradient `grad` of `worker` joins the open aggregate, which closes (its mean is taken)
    /// when it has `M` members; returns the aggregate's number.
    fn join(&mut self, grad: GradId, worker: usize, cx: &mut Ctx<'_, '_, Event>) -> u64 {
        let k = self.open;
        let s = self.servers;
        let a = self.aggs.entry(k).or_insert_with(|| Aggregate {
            members: Vec::new(),
            mean: None,
            arrived: vec![Vec::new(); s],
            lost: vec![false; s],
            done: vec![false; s],
        });
        a.members.push((grad, worker));
        if let Some(shards) = self.early_lost.remove(&grad) {
            for sh in shards {
                a.arrived[sh].push((worker, 0));
                a.lost[sh] = true;
            }
            if self.broken.insert(grad) {
                self.gradients_dropped += 1;
            }
        }
        self.joined.insert(grad, k);
        let a = self.aggs.get_mut(&k).expect("the open aggregate");
        if a.members.len() == self.m {
            let ids: Vec<GradId> = a.members.iter().map(|m| m.0).collect();
            let mean = cx.world.store.mean_gradient(&ids);
            a.mean = Some(mean);
            self.open += 1;
            self.formed += 1;
            self.last_formed = Some((mean, ids));
        }
        k
    }

    /// A block of gradient `grad`, on its way to shard `shard`, is lost for good.
    fn lose_block(&mut self, shard: usize, grad: GradId, cx: &mut Ctx<'_, '_, Event>) {
        self.pushes_dropped += 1;
        if let Some(left) = self.discarded.get_mut(&grad) {
            *left -= 1;
            if *left == 0 {
                self.discarded.remove(&grad);
                cx.world.store.release_gradient(grad);
            }
            return;
        }
        match self.joined.get(&grad) {
            Some(&k) => {
                if self.broken.insert(grad) {
                    self.gradients_dropped += 1;
                }
                let worker = self.aggs[&k]
                    .members
                    .iter()
                    .find(|m| m.0 == grad)
                    .map_or(0, |m| m.1);
                let a = self.aggs.get_mut(&k).expect("an aggregate");
                a.arrived[shard].push((worker, 0));
                a.lost[shard] = true;
                self.settle(k, cx);
            }
            None => {
                let lost = self.early_lost.entry(grad).or_default();
                lost.push(shard);
                if lost.len() == self.servers {
                    // No block will ever land: the gradient never joins.
                    self.early_lost.remove(&grad);
                    self.gradients_dropped += 1;
                    cx.world.store.release_gradient(grad);
                }
            }
        }
    }

    /// Applies aggregate `k` at every shard where all its `M` blocks are in (skips it where one
    /// was lost for good); once done at every shard, releases its mean and counts its members'
    /// steps.
    fn settle(&mut self, k: u64, cx: &mut Ctx<'_, '_, Event>) {
        let Some(mean) = self.aggs[&k].mean else {
            return;
        };
        for s in 0..self.servers {
            let a = &self.aggs[&k];
            if a.done[s] || a.arrived[s].len() < self.m {
                continue;
            }
            let lost = a.lost[s];
            let arrived = a.arrived[s].clone();
            self.aggs.get_mut(&k).expect("an aggregate").done[s] = true;
            if lost {
                continue;
            }
            let lr = cx.lr();
            let sh = &mut self.shards[s];
            cx.world
                .store
                .apply_gradient_block(self.row, mean, lr, sh.block.clone());
            for &(w, read) in &arrived {
                self.stats.record(sh.version - read);
                sh.applied[w] += 1;
            }
            sh.version += 1;
            let by = arrived.last().map_or(0, |x| x.0);
            self.release_held(s, by, cx);
        }
        if self.aggs[&k].done.iter().all(|&d| d) {
            let a = self.aggs.remove(&k).expect("an aggregate");
            cx.world.store.release_gradient(mean);
            self.aggregates_applied += 1;
            for &(g, w) in &a.members {
                self.joined.remove(&g);
                if !self.broken.remove(&g) {
                    cx.step_done(w);
                }
            }
        }
    }

    /// Under a staleness bound: serves the pulls held at shard `shard` that may now be served,
    /// released by `by`'s gradient.
    fn release_held(&mut self, shard: usize, by: usize, cx: &mut Ctx<'_, '_, Event>) {
        if self.bound.is_none() {
            return;
        }
        let held = std::mem::take(&mut self.shards[shard].held);
        for (w, clock, pull) in held {
            if self.may_serve(shard, clock) {
                self.serve(shard, w, pull, cx);
                self.workers[w].held -= 1;
                if self.workers[w].held == 0 {
                    cx.unblock(w, by, Activity::Communicate);
                }
            } else {
                self.shards[shard].held.push((w, clock, pull));
            }
        }
    }

    /// The order in which worker `w` addresses the shards: `w mod S` first, then on in turn, so
    /// the workers' messages do not all queue behind the same shard first.
    fn shard_order(&self, w: usize) -> impl Iterator<Item = usize> + use<> {
        let s = self.servers;
        (0..s).map(move |k| (w + k) % s)
    }

    fn pull(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let clock = self.workers[w].clock;
        self.workers[w].replies = 0;
        self.workers[w].pull += 1;
        let pull = self.workers[w].pull;
        cx.activity(w, Activity::Communicate);
        for s in self.shard_order(w) {
            let node = self.shards[s].node;
            self.post(
                w,
                node,
                0,
                Event::Pull {
                    worker: w,
                    shard: s,
                    clock,
                    pull,
                },
                cx,
            );
        }
    }

    fn may_serve(&self, s: usize, clock: u64) -> bool {
        self.bound.is_none_or(|b| {
            let slowest = self.shards[s].applied.iter().copied().min().unwrap_or(0);
            slowest + b >= clock
        })
    }

    /// On a push of `worker` landing (accepted) at `shard`: the server's running statistics in
    /// the shard's block become the worker's, those its last training pass produced.
    fn follow_statistics(&self, shard: usize, worker: usize, cx: &mut Ctx<'_, '_, Event>) {
        let block = &self.shards[shard].block;
        let stats = block.start.max(self.state.start)..block.end;
        if !stats.is_empty() {
            cx.world.store.copy_block(self.row, worker, stats);
        }
    }

    fn serve(&mut self, s: usize, w: usize, pull: u64, cx: &mut Ctx<'_, '_, Event>) {
        let shard = &mut self.shards[s];
        // A pull serves the trainable parameters: the worker keeps its own running statistics.
        let block = shard.block.start..shard.block.end.min(self.state.start);
        cx.world.store.copy_block(w, self.row, block);
        shard.read[w] = shard.version;
        let bytes = cx.world.net.payload_bytes(shard.block.len());
        let node = shard.node;
        self.post(
            node,
            w,
            bytes,
            Event::Reply {
                worker: w,
                shard: s,
                pull,
            },
            cx,
        );
    }
}

impl Algorithm for ParameterServer {
    type Event = Event;

    fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        let n = self.workers.len();
        let p = cx.world.store.num_params();
        assert!(
            cx.world.net.nodes() >= n + self.servers,
            "the network needs the server nodes (AlgorithmConfig::extra_nodes)"
        );
        self.row = cx.world.store.add_rows(1);
        self.state = cx.world.store.state();
        self.shards = blocks(p, self.servers)
            .into_iter()
            .enumerate()
            .map(|(s, block)| Shard {
                block,
                node: n + s,
                applied: vec![0; n],
                version: 0,
                read: vec![0; n],
                held: Vec::new(),
            })
            .collect();
        for w in 0..n {
            self.pull(w, cx);
        }
    }

    fn handle(&mut self, event: Event, cx: &mut Ctx<'_, '_, Event>) {
        match event {
            // A pull of a worker that crashed since (or of its earlier life) is forgotten.
            Event::Pull { worker, pull, .. }
                if pull != self.workers[worker].pull || cx.is_down(worker) => {}
            Event::Pull {
                worker,
                shard,
                clock,
                pull,
            } => {
                if self.may_serve(shard, clock) {
                    self.serve(shard, worker, pull, cx);
                } else {
                    self.shards[shard].held.push((worker, clock, pull));
                    self.workers[worker].held += 1;
                    if self.workers[worker].held == 1 {
                        cx.block(worker);
                    }
                }
            }
            Event::Reply { worker, .. } if !cx.deliverable(worker) => {}
            Event::Reply { worker, pull, .. } if pull != self.workers[worker].pull => {}
            Event::Reply { worker, .. } => {
                let st = &mut self.workers[worker];
                st.replies += 1;
                if st.replies == self.servers {
                    st.started += 1;
                    let life = st.life;
                    st.grad = Some(cx.start_step(worker, Event::ComputeDone(worker, life)));
                }
            }
            Event::ComputeDone(w, life) if life != self.workers[w].life => {}
            Event::ComputeDone(w, _) => {
                let grad = self.workers[w].grad.take().expect("a gradient in flight");
                if !self.state.is_empty() {
                    // The training pass updated the worker's own running statistics.
                    cx.world
                        .store
                        .apply_gradient_block(w, grad, 0.0, self.state.clone());
                }
                if self.m == 1 {
                    self.pending.insert(grad, self.servers);
                }
                for s in self.shard_order(w) {
                    let bytes = cx.world.net.payload_bytes(self.shards[s].block.len());
                    let node = self.shards[s].node;
                    self.post(
                        w,
                        node,
                        bytes,
                        Event::Push {
                            worker: w,
                            shard: s,
                            grad,
                        },
                        cx,
                    );
                }
                self.workers[w].clock += 1;
                self.pull(w, cx);
            }
            Event::Retransmit(id) => {
                if let Some(lost) = self.retransmit.again(id, cx) {
                    self.lost_for_good(lost.src, lost.dst, lost.event, cx);
                }
            }
            Event::Push {
                worker,
                shard,
                grad,
            } if self.m > 1 => self.push_aggregated(worker, shard, grad, cx),
            // The shard discards a push of a worker that is down.
            Event::Push { worker, grad, .. } if cx.is_down(worker) => self.drop_push(grad, cx),
            Event::Push {
                worker,
                shard,
                grad,
            } => {
                self.follow_statistics(shard, worker, cx);
                let n = Self::concurrency(self.workers.len(), cx);
                let sh = &mut self.shards[shard];
                let delay = sh.version - sh.read[worker];
                let lr = self.step_rule.rate(cx.lr(), delay, n);
                cx.world
                    .store
                    .apply_gradient_block(self.row, grad, lr, sh.block.clone());
                self.stats.record(delay);
                sh.version += 1;
                sh.applied[worker] += 1;
                self.push_done(grad, Some(worker), cx);
                self.release_held(shard, worker, cx);
            }
        }
    }

    fn on_fault(&mut self, fault: WorkerFault, cx: &mut Ctx<'_, '_, Event>) {
        match fault {
            WorkerFault::Crash(w) => {
                let st = &mut self.workers[w];
                st.life += 1;
                st.cut = None;
                if let Some(g) = st.grad.take() {
                    cx.world.store.release_gradient(g);
                    self.gradients_dropped += 1;
                }
                // The shards forget its held pulls.
                for shard in &mut self.shards {
                    shard.held.retain(|h| h.0 != w);
                }
                self.workers[w].held = 0;
            }
            WorkerFault::Rejoin(w) => self.pull(w, cx),
        }
    }

    fn fault_counts(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("retransmissions", self.retransmit.count()),
            ("pushes_dropped", self.pushes_dropped),
            ("gradients_dropped", self.gradients_dropped),
        ]
    }

    fn waiting(&self) -> Vec<String> {
        let mut out: Vec<String> = self.workers.iter().filter_map(|w| w.cut.clone()).collect();
        let buffered = self.buffered().len();
        if buffered > 0 && self.shards.iter().any(|s| !s.held.is_empty()) {
            out.push(format!(
                "the server buffers {buffered} of the {} gradients of its next update \
                 (aggregate = {}): the workers it waits for are held back by the staleness bound",
                self.m, self.m
            ));
        }
        for (s, shard) in self.shards.iter().enumerate() {
            for &(w, clock, _) in &shard.held {
                let (slowest, applied) = shard
                    .applied
                    .iter()
                    .enumerate()
                    .min_by_key(|&(v, a)| (*a, v))
                    .map(|(v, a)| (v, *a))
                    .unwrap_or((0, 0));
                out.push(format!(
                    "worker {w} (step {clock}) waits for server shard {s} to serve its pull: \
                     the staleness bound needs worker {slowest}'s gradient {} there ({applied} applied)",
                    clock.saturating_sub(self.bound.unwrap_or(0) + 1)
                ));
            }
        }
        out
    }

    fn eval_model(&self) -> Option<Vec<(usize, f64)>> {
        Some(vec![(self.row, 1.0)])
    }

    fn staleness(&self) -> Option<StalenessStats> {
        Some(self.stats)
    }
}

impl AlgorithmSpec for PsConfig {
    fn uses_topology(&self) -> bool {
        false
    }

    fn block_steps(&self, _kind: &str) -> Option<&'static str> {
        (self.servers > 1).then_some("steps the server's model shard by shard (servers > 1)")
    }

    fn node_progress(&self) -> Result<(), &'static str> {
        Err(
            "the server's model is one model that every worker's pushes update, so its rate follows the server's progress (the run's), not the counter of whichever worker pushed",
        )
    }

    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        self.check(setup.path)?;
        let workers = setup.topology.len();
        if self.aggregate > workers {
            return Err(ConfigError::new(
                &setup.at("aggregate"),
                format!(
                    "aggregate = {} gradients per update, but there are only {workers} workers",
                    self.aggregate
                ),
            )
            .hint(format!(
                "use 1 <= aggregate <= {workers}: aggregate = {workers} waits for as many gradients as there are workers"
            )));
        }
        if let Some(params) = setup.params
            && self.servers > params
        {
            return Err(ConfigError::new(
                &setup.at("servers"),
                format!(
                    "{} server shards cannot split a model of {params} parameters",
                    self.servers
                ),
            )
            .hint("every shard holds at least one parameter: use at most as many shards as parameters"));
        }
        Ok(())
    }

    fn extra_nodes(&self) -> usize {
        self.servers
    }

    fn fault_support(&self, _kind: &'static str, _fault: FaultKind) -> FaultSupport {
        // Every kind: see the module's "Under faults" (shards are not workers: they never crash).
        Ok(())
    }

    fn build(&self, _kind: &'static str, world: &World<'_>) -> crate::Result<Box<dyn Runnable>> {
        let n = world.workers();
        let need = n + self.servers;
        if world.net.nodes() < need {
            return Err(ConfigError::new(
                "algorithms.servers",
                format!(
                    "the parameter server needs {need} network nodes ({n} workers and {} shards), but the network has {}",
                    self.servers,
                    world.net.nodes()
                ),
            )
            .hint("build the network with workers + AlgorithmConfig::extra_nodes() nodes")
            .into());
        }
        let mut alg = ParameterServer::new(self, n);
        if world.faults().configured() {
            alg = alg.with_retransmit(self.retransmit(world));
        }
        Ok(Box::new(alg))
    }
}
