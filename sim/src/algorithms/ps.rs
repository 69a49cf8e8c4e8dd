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
use crate::engine::{Observer, Outcome, RunConfig, run};
use crate::error::ConfigError;
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
}

impl Default for PsConfig {
    fn default() -> Self {
        PsConfig {
            servers: 1,
            staleness: None,
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
        Ok(())
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
    },
    /// Shard `shard`'s block of the model reached `worker`.
    Reply {
        /// The worker.
        worker: usize,
        /// The shard.
        shard: usize,
    },
    /// `worker` finished computing its gradient.
    ComputeDone(usize),
    /// Block `shard` of `worker`'s gradient `grad` reached the shard.
    Push {
        /// The worker.
        worker: usize,
        /// The shard.
        shard: usize,
        /// The gradient.
        grad: GradId,
    },
}

#[derive(Debug, Clone, Default)]
struct WorkerState {
    clock: u64,
    started: u64,
    replies: usize,
    grad: Option<GradId>,
    /// Shards holding the worker's pull back.
    held: usize,
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
    /// Pull requests held back by the staleness bound, in arrival order.
    held: Vec<(usize, u64)>,
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
        cx.activity(w, Activity::Communicate);
        for s in self.shard_order(w) {
            cx.send(
                w,
                self.shards[s].node,
                0,
                Event::Pull {
                    worker: w,
                    shard: s,
                    clock,
                },
            );
        }
    }

    fn may_serve(&self, s: usize, clock: u64) -> bool {
        self.bound.is_none_or(|b| {
            let slowest = self.shards[s].applied.iter().copied().min().unwrap_or(0);
            slowest + b >= clock
        })
    }

    fn serve(&mut self, s: usize, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let shard = &mut self.shards[s];
        cx.world.store.copy_block(w, self.row, shard.block.clone());
        shard.read[w] = shard.version;
        let bytes = cx.world.net.payload_bytes(shard.block.len());
        let node = shard.node;
        cx.send(
            node,
            w,
            bytes,
            Event::Reply {
                worker: w,
                shard: s,
            },
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
            Event::Pull {
                worker,
                shard,
                clock,
            } => {
                if self.may_serve(shard, clock) {
                    self.serve(shard, worker, cx);
                } else {
                    self.shards[shard].held.push((worker, clock));
                    self.workers[worker].held += 1;
                    if self.workers[worker].held == 1 {
                        cx.block(worker);
                    }
                }
            }
            Event::Reply { worker, .. } => {
                let st = &mut self.workers[worker];
                st.replies += 1;
                if st.replies == self.servers {
                    st.started += 1;
                    st.grad = Some(cx.start_step(worker, Event::ComputeDone(worker)));
                }
            }
            Event::ComputeDone(w) => {
                let grad = self.workers[w].grad.take().expect("a gradient in flight");
                self.pending.insert(grad, self.servers);
                for s in self.shard_order(w) {
                    let bytes = cx.world.net.payload_bytes(self.shards[s].block.len());
                    let node = self.shards[s].node;
                    cx.send(
                        w,
                        node,
                        bytes,
                        Event::Push {
                            worker: w,
                            shard: s,
                            grad,
                        },
                    );
                }
                self.workers[w].clock += 1;
                self.pull(w, cx);
            }
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
                let left = self.pending.get_mut(&grad).expect("a pushed gradient");
                *left -= 1;
                if *left == 0 {
                    self.pending.remove(&grad);
                    cx.world.store.release_gradient(grad);
                    cx.step_done(worker);
                }
                if self.bound.is_some() {
                    let held = std::mem::take(&mut self.shards[shard].held);
                    for (w, clock) in held {
                        if self.may_serve(shard, clock) {
                            self.serve(shard, w, cx);
                            self.workers[w].held -= 1;
                            if self.workers[w].held == 0 {
                                cx.unblock(w, worker, Activity::Communicate);
                            }
                        } else {
                            self.shards[shard].held.push((w, clock));
                        }
                    }
                }
            }
        }
    }

    fn waiting(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (s, shard) in self.shards.iter().enumerate() {
            for &(w, clock) in &shard.held {
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
        run(&mut ParameterServer::new(self, n), world, run_cfg, observer)
    }
}
