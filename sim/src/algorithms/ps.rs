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
//! ([`crate::params::blocks`]); shard `s` lives on network node `n + s` (its own NIC, so a server's
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
//! **Invariant**: every pushed gradient is applied exactly once to every shard; a worker's model,
//! when read, is block by block the server's model as served; with a staleness bound `s`, no
//! worker starts step `c` before every worker's first `c − s` gradients are applied.
//!
//! **Staleness** ([`Algorithm::staleness`]): for each block of a gradient applied at shard `s`,
//! the number of gradients shard `s` applied between serving the worker's pull and applying this
//! one. (The store-layer measure of [`crate::params::tracked`] gives the same numbers.)
//!
//! **Activities** ([`crate::record`]): a worker computes its gradient; from pushing it until every
//! shard has replied to its next pull it communicates (its own round trip, delayed only by the
//! network), except while a shard holds its pull back under the staleness bound: then it is
//! blocked, and the wait is attributed to the worker whose gradient, applied at that shard,
//! released the last held pull.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::algorithm::{Algorithm, Ctx, StalenessStats, World};
use crate::algorithms::{AlgorithmSpec, Setup};
use crate::engine::time::TimeUnit;
use crate::engine::{Observer, Outcome, RunConfig, SimTime, run};
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport, WorkerFault};
use crate::params::{GradId, ReplicaStore, blocks};
use crate::record::Activity;

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
}

impl Default for PsConfig {
    fn default() -> Self {
        PsConfig {
            servers: 1,
            staleness: None,
            retransmit_ms: None,
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
#[derive(Debug, Clone, Copy)]
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

#[derive(Debug, Clone, Default)]
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

/// A message posted with [`ParameterServer::post`]: enough to post it again.
#[derive(Debug, Clone, Copy)]
struct Posted {
    src: usize,
    dst: usize,
    bytes: u64,
    event: Event,
}

#[derive(Debug, Clone)]
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
pub struct ParameterServer {
    servers: usize,
    bound: Option<u64>,
    workers: Vec<WorkerState>,
    shards: Vec<Shard>,
    /// Shards that have yet to apply each pushed gradient.
    pending: BTreeMap<GradId, usize>,
    row: usize,
    stats: StalenessStats,
    /// Under faults: the retransmission timeout (`None`: no faults).
    retransmit: Option<SimTime>,
    /// Lost messages waiting to be posted again.
    lost: BTreeMap<u64, Posted>,
    next_lost: u64,
    /// Gradients of which a block was dropped or lost (they count no step).
    broken: std::collections::BTreeSet<GradId>,
    retransmissions: u64,
    pushes_dropped: u64,
    gradients_dropped: u64,
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
            stats: StalenessStats::default(),
            retransmit: None,
            lost: BTreeMap::new(),
            next_lost: 0,
            broken: std::collections::BTreeSet::new(),
            retransmissions: 0,
            pushes_dropped: 0,
            gradients_dropped: 0,
        }
    }

    /// Retransmits lost messages after `timeout` (set for runs with `[[faults]]`).
    pub fn with_retransmit(mut self, timeout: SimTime) -> Self {
        self.retransmit = Some(timeout);
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
        let sent = cx.send(src, dst, bytes, event);
        let Some(rto) = self.retransmit else {
            return;
        };
        if sent.lost.is_none() {
            return;
        }
        if cx.world.faults().cut_for_good(src, dst, cx.now()) {
            self.lost_for_good(src, dst, event, cx);
            return;
        }
        let id = self.next_lost;
        self.next_lost += 1;
        self.lost.insert(
            id,
            Posted {
                src,
                dst,
                bytes,
                event,
            },
        );
        cx.after(rto, Event::Retransmit(id));
    }

    /// A message that can never be delivered: a push's block is lost for its shard; a pull or
    /// a reply leaves its worker waiting.
    fn lost_for_good(&mut self, src: usize, dst: usize, event: Event, cx: &mut Ctx<'_, '_, Event>) {
        match event {
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

    fn serve(&mut self, s: usize, w: usize, pull: u64, cx: &mut Ctx<'_, '_, Event>) {
        let shard = &mut self.shards[s];
        cx.world.store.copy_block(w, self.row, shard.block.clone());
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

    fn name(&self) -> &str {
        "ps"
    }

    fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        let n = self.workers.len();
        let p = cx.world.store.num_params();
        assert!(
            cx.world.net.nodes() >= n + self.servers,
            "the network needs the server nodes (AlgorithmConfig::extra_nodes)"
        );
        self.row = cx.world.store.add_rows(1);
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
                self.pending.insert(grad, self.servers);
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
                let m = self.lost.remove(&id).expect("a lost message");
                self.retransmissions += 1;
                self.post(m.src, m.dst, m.bytes, m.event, cx);
            }
            // The shard discards a push of a worker that is down.
            Event::Push { worker, grad, .. } if cx.is_down(worker) => self.drop_push(grad, cx),
            Event::Push {
                worker,
                shard,
                grad,
            } => {
                let lr = cx.lr();
                let sh = &mut self.shards[shard];
                cx.world
                    .store
                    .apply_gradient_block(self.row, grad, lr, sh.block.clone());
                self.stats.record(sh.version - sh.read[worker]);
                sh.version += 1;
                sh.applied[worker] += 1;
                self.push_done(grad, Some(worker), cx);
                if self.bound.is_some() {
                    let held = std::mem::take(&mut self.shards[shard].held);
                    for (w, clock, pull) in held {
                        if self.may_serve(shard, clock) {
                            self.serve(shard, w, pull, cx);
                            self.workers[w].held -= 1;
                            if self.workers[w].held == 0 {
                                cx.unblock(w, worker, Activity::Communicate);
                            }
                        } else {
                            self.shards[shard].held.push((w, clock, pull));
                        }
                    }
                }
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
            ("retransmissions", self.retransmissions),
            ("pushes_dropped", self.pushes_dropped),
            ("gradients_dropped", self.gradients_dropped),
        ]
    }

    fn waiting(&self) -> Vec<String> {
        let mut out: Vec<String> = self.workers.iter().filter_map(|w| w.cut.clone()).collect();
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

    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        self.check(setup.path)?;
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

    fn run(
        &self,
        _kind: &'static str,
        world: &mut World<'_>,
        run_cfg: &RunConfig,
        observer: &mut dyn Observer,
    ) -> crate::Result<Outcome> {
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
        run(&mut alg, world, run_cfg, observer)
    }
}
