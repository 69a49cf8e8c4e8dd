//! AD-PSGD: asynchronous decentralized parallel SGD.
//!
//! Lian, Zhang, Zhang & Liu, "Asynchronous Decentralized Parallel Stochastic Gradient Descent",
//! ICML 2018. The workers are split into an active and a passive side of a bipartite graph
//! ([`crate::net::topology::Topology::bipartition`]); only active workers initiate averaging, always
//! with a passive neighbour, so no two averagings contend for the same pair in a cycle. The
//! averaging partner is drawn uniformly from the active worker's neighbours (`partner =
//! "uniform"`, from the worker's algorithm stream) or taken in turn (`partner = "cycle"`).
//!
//! Two ways to schedule the averaging (`averaging`):
//!
//! ```text
//! per-step (default), every worker loops without a global barrier:
//!     read x̂ ← x_i; compute g on x̂ and a minibatch           (compute time from the cluster)
//!     if i is active:
//!         pick a passive neighbour j; send x_i to j; j sets x_i, x_j ← (x_i + x_j)/2 atomically
//!         on arrival and replies; wait for the reply
//!     x_i ← optimizer step with g                               (the rate in force now)
//!
//! thread (the paper's implementation: a communication thread beside the computation thread):
//!     computation: read x̂ ← x_i; compute g; x_i ← optimizer step with g; repeat (never waits)
//!     communication of active i, whenever at least one gradient was applied since its last
//!     averaging started:
//!         snap ← x_i; send snap to j;
//!         j, on arrival: x_j ← (x_j + snap)/2; replies with δ = x_j − snap   (= avg − snap)
//!         i, on the reply: x_i ← x_i + δ        (keeps the local steps made meanwhile)
//! ```
//!
//! Passive workers never initiate averaging and never wait: their communication side answers
//! averaging requests while they compute. In per-step mode an active worker waits only for a
//! passive worker's reply, which never waits for anyone, so the scheme cannot deadlock; the
//! averaging happens at the instant the request reaches `j`, and `x_i` is set then too, which is
//! exact because only `i` itself touches an active replica, and `i` is waiting for the reply. In
//! thread mode nobody waits.
//!
//! **Activities** ([`crate::record`]): in per-step mode an active worker communicates from
//! sending its averaging request until the reply is back (the passive partner answers on
//! arrival, so only the network delays it) and computes otherwise; passive workers always
//! compute. In thread mode every worker always computes: the communication thread runs beside the
//! computation, which is the foreground activity.
//!
//! **Invariant**: averaging leaves the sum of all replicas unchanged — in per-step mode at every
//! instant; in thread mode counting the replies in flight (`Σ_i x_i + Σ δ` in flight).

use std::collections::BTreeMap;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::algorithm::{Algorithm, Ctx, World};
use crate::algorithms::{AlgorithmSpec, Setup};
use crate::engine::rng::{Stream, StreamKind, stream};
use crate::engine::{Observer, Outcome, RunConfig, run};
use crate::error::ConfigError;
use crate::params::{GradId, MsgId, ReplicaStore, Slot};
use crate::record::Activity;

/// How an active worker picks its averaging partner.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Partner {
    /// Uniformly at random among its neighbours.
    #[default]
    Uniform,
    /// Its neighbours in turn, in increasing order.
    Cycle,
}

/// When averaging happens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Averaging {
    /// Once per gradient step, between computing and applying the gradient.
    #[default]
    PerStep,
    /// In a communication thread that runs independently of computation.
    Thread,
}

/// Options of AD-PSGD.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdPsgdConfig {
    /// `uniform` (default) or `cycle`.
    #[serde(default)]
    pub partner: Partner,
    /// `per-step` (default) or `thread`.
    #[serde(default)]
    pub averaging: Averaging,
}

/// Events of AD-PSGD.
#[derive(Debug, Clone, Copy)]
pub enum Event {
    /// `worker` finished computing its gradient.
    ComputeDone(usize),
    /// The model of active `from` reached passive `to`: average now. `snap` is the model sent
    /// (thread mode only).
    AverageRequest {
        /// Active worker.
        from: usize,
        /// Passive worker.
        to: usize,
        /// The snapshot sent (thread mode).
        snap: Option<MsgId>,
    },
    /// The averaging reply is back at active `to` (thread mode: carrying `delta`).
    AverageReply {
        /// Active worker.
        to: usize,
        /// `avg − snap` (thread mode).
        delta: Option<MsgId>,
    },
}

#[derive(Debug, Clone)]
struct WorkerState {
    active: bool,
    grad: Option<GradId>,
    /// Per-step: the partner whose reply the worker waits for. Thread: the partner of the
    /// averaging in flight.
    waiting_for: Option<usize>,
    /// Thread: a gradient was applied since the last averaging started.
    dirty: bool,
    next_partner: usize,
    rng: Stream,
}

/// The state machine of AD-PSGD.
pub struct AdPsgd {
    partner: Partner,
    averaging: Averaging,
    workers: Vec<WorkerState>,
    in_flight: Vec<MsgId>,
    pairs: BTreeMap<(usize, usize), u64>,
}

impl AdPsgd {
    /// A new instance with the default options; `sides[i]` is true for active workers (see
    /// [`crate::net::topology::Topology::bipartition`]).
    pub fn new(cfg: &AdPsgdConfig, sides: &[bool], seed: u64) -> Self {
        AdPsgd {
            partner: cfg.partner,
            averaging: cfg.averaging,
            workers: sides
                .iter()
                .enumerate()
                .map(|(i, &active)| WorkerState {
                    active,
                    grad: None,
                    waiting_for: None,
                    dirty: false,
                    next_partner: 0,
                    rng: stream(seed, StreamKind::Algorithm, i as u64),
                })
                .collect(),
            in_flight: Vec::new(),
            pairs: BTreeMap::new(),
        }
    }

    /// Averagings started so far, by `(active, passive)` pair.
    pub fn pair_counts(&self) -> &BTreeMap<(usize, usize), u64> {
        &self.pairs
    }

    /// Thread mode: the replies `δ = avg − snap` in flight (they carry replica mass).
    pub fn deltas_in_flight(&self) -> &[MsgId] {
        &self.in_flight
    }

    fn pick(&mut self, w: usize, peers: &[usize]) -> usize {
        let j = self.draw(w, peers);
        *self.pairs.entry((w, j)).or_default() += 1;
        j
    }

    fn draw(&mut self, w: usize, peers: &[usize]) -> usize {
        let st = &mut self.workers[w];
        match self.partner {
            Partner::Uniform => peers[st.rng.random_range(0..peers.len())],
            Partner::Cycle => {
                let j = peers[st.next_partner % peers.len()];
                st.next_partner += 1;
                j
            }
        }
    }

    fn apply(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let g = self.workers[w].grad.take().expect("a gradient in flight");
        let lr = cx.lr();
        cx.world.store.apply_gradient(w, g, lr);
        cx.world.store.release_gradient(g);
        cx.step_done(w);
    }

    fn next_step(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        self.workers[w].grad = Some(cx.start_step(w, Event::ComputeDone(w)));
    }

    /// Thread mode: starts an averaging of active `w` if none is in flight and it has new
    /// local progress.
    fn maybe_average(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let st = &self.workers[w];
        if !st.active || st.waiting_for.is_some() || !st.dirty {
            return;
        }
        self.workers[w].dirty = false;
        let snap = cx.world.store.new_msg(&[(Slot::Row(w), 1.0)]);
        self.request_average(w, Some(snap), cx);
    }

    /// Active `w` picks a passive neighbour, sends it its model and waits for the reply;
    /// `snap` is the model sent (thread mode), `None` when `w` averages its live row.
    fn request_average(&mut self, w: usize, snap: Option<MsgId>, cx: &mut Ctx<'_, '_, Event>) {
        let peers = cx.world.topology.neighbors(w).to_vec();
        let j = self.pick(w, &peers);
        self.workers[w].waiting_for = Some(j);
        let bytes = cx.world.model_bytes;
        cx.send(
            w,
            j,
            bytes,
            Event::AverageRequest {
                from: w,
                to: j,
                snap,
            },
        );
    }
}

impl Algorithm for AdPsgd {
    type Event = Event;

    fn name(&self) -> &str {
        "adpsgd"
    }

    fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        for w in 0..self.workers.len() {
            self.next_step(w, cx);
        }
    }

    fn handle(&mut self, event: Event, cx: &mut Ctx<'_, '_, Event>) {
        match (self.averaging, event) {
            (Averaging::PerStep, Event::ComputeDone(w)) if self.workers[w].active => {
                cx.activity(w, Activity::Communicate);
                self.request_average(w, None, cx);
            }
            (_, Event::ComputeDone(w)) => {
                self.apply(w, cx);
                self.next_step(w, cx);
                if self.averaging == Averaging::Thread {
                    self.workers[w].dirty = true;
                    self.maybe_average(w, cx);
                }
            }
            (_, Event::AverageRequest { from, to, snap }) => {
                let bytes = cx.world.model_bytes;
                let delta = match snap {
                    None => {
                        cx.world.store.average(&[from, to]);
                        None
                    }
                    Some(snap) => {
                        let store = &mut cx.world.store;
                        store.mix(to, &[(Slot::Row(to), 0.5), (Slot::Msg(snap), 0.5)]);
                        let delta = store.new_msg(&[(Slot::Row(to), 1.0), (Slot::Msg(snap), -1.0)]);
                        store.release_msg(snap);
                        self.in_flight.push(delta);
                        Some(delta)
                    }
                };
                cx.send(to, from, bytes, Event::AverageReply { to: from, delta });
            }
            (_, Event::AverageReply { to, delta }) => {
                self.workers[to].waiting_for = None;
                match delta {
                    None => {
                        self.apply(to, cx);
                        self.next_step(to, cx);
                    }
                    Some(delta) => {
                        let store = &mut cx.world.store;
                        store.mix(to, &[(Slot::Row(to), 1.0), (Slot::Msg(delta), 1.0)]);
                        store.release_msg(delta);
                        self.in_flight.retain(|&m| m != delta);
                        self.maybe_average(to, cx);
                    }
                }
            }
        }
    }

    fn waiting(&self) -> Vec<String> {
        let what = match self.averaging {
            Averaging::PerStep => "worker",
            Averaging::Thread => "the communication thread of worker",
        };
        self.workers
            .iter()
            .enumerate()
            .filter_map(|(w, s)| {
                s.waiting_for
                    .map(|j| format!("{what} {w} waits for the averaging reply of worker {j}"))
            })
            .collect()
    }
}

impl AlgorithmSpec for AdPsgdConfig {
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        setup.require_connected("AD-PSGD")?;
        if setup.topology.bipartition().is_none() {
            return Err(ConfigError::new(
                "topology.kind",
                format!("AD-PSGD ({}) needs a bipartite topology (active/passive split), but this graph has an odd cycle", setup.path),
            )
            .hint("a ring with an even number of workers, a hypercube or an even torus is bipartite"));
        }
        Ok(())
    }

    fn run(
        &self,
        _kind: &'static str,
        world: &mut World<'_>,
        run_cfg: &RunConfig,
        observer: &mut dyn Observer,
    ) -> crate::Result<Outcome> {
        let sides = world.topology.bipartition().ok_or_else(|| {
            ConfigError::new("topology.kind", "AD-PSGD needs a bipartite topology")
        })?;
        let mut alg = AdPsgd::new(self, &sides, world.seed);
        run(&mut alg, world, run_cfg, observer)
    }
}
