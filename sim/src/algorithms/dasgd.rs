//! DASGD: decentralized asynchronous SGD, without averaging and without barriers.
//!
//! As analysed by Tosi & Theobald, "Convergence Analysis of Decentralized ASGD", 2023
//! (arXiv:2309.03754). Every worker keeps its own model and applies every worker's gradients to
//! it, each as soon as it has it:
//!
//! ```text
//! worker i loops:
//!     read x̂ ← x_i; compute g on x̂ and a minibatch          (compute time from the cluster)
//!     x_i ← optimizer step with g                               (at once, the rate in force)
//!     send g to the other workers
//! worker j, on receiving a gradient g:
//!     x_j ← optimizer step with g                               (on arrival)
//!     (topology mode) forward g to its children in g's origin's tree
//! ```
//!
//! `broadcast = "all"` (default) sends each gradient directly to every other worker (`n − 1`
//! messages of `S` bytes through the sender's uplink). `broadcast = "topology"` sends it along
//! the topology: for every origin `o`, a breadth-first spanning tree of the graph rooted at `o`
//! (a node's parent is its smallest neighbour one hop closer to `o`); a node applies a gradient
//! from `o` when it arrives from its parent and forwards it to its children. Either way every
//! gradient reaches every worker exactly once, and — links being FIFO and each origin's gradients
//! following fixed paths — each worker applies each origin's gradients in the order they were
//! computed. Each worker applies gradients through its own optimizer state (momentum, weight
//! decay). Nobody ever waits, so DASGD cannot deadlock.
//!
//! ## Staleness
//!
//! Let `G_i(t)` be the set of gradients applied to model `i` by time `t`. Because each origin's
//! gradients arrive in order, `G_i(t)` is described exactly by per-origin counters: `c_i[o]`
//! gradients of origin `o` (its first `c_i[o]`). The staleness between two models is the number
//! of gradients one has applied and the other has not, `|G_i Δ G_j| = Σ_o |c_i[o] − c_j[o]|`
//! ([`Dasgd::staleness_between`]). Each application of a gradient `g` — computed on a model with
//! gradient set `R` (its origin's counters when the step started) and applied to model `j` —
//! measures `|G_j Δ R|`, the staleness between the model `g` was computed on and the model it
//! updates (for the origin itself, the gradients it applied while computing `g`: the delay of
//! centralized asynchronous SGD). [`Algorithm::staleness`] reports their mean `S_avg` and maximum
//! `S_max` over every application.
//!
//! At each evaluation point, [`Algorithm::series`] reports `staleness_avg` and `staleness_max`:
//! the mean and maximum of these measurements over the applications since the previous point
//! (`S_avg` and `S_max` over time; nothing when there was none).
//!
//! **Activities** ([`crate::record`]): a worker always computes; nobody waits.
//!
//! **Invariant**: every gradient is applied exactly once to every model, each origin's in order;
//! with plain SGD (no momentum, no weight decay, constant rate) every model is `x_0 − η Σ_{g ∈
//! G_i} g`, so the models agree whenever no gradient is in flight.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::algorithm::{Algorithm, Ctx, StalenessStats, World};
use crate::algorithms::{AlgorithmSpec, Setup};
use crate::engine::{Observer, Outcome, RunConfig, run};
use crate::error::ConfigError;
use crate::net::topology::Topology;
use crate::params::{GradId, ReplicaStore};

/// How DASGD spreads gradients.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Broadcast {
    /// Directly to every other worker.
    #[default]
    All,
    /// Along the topology, forwarded down each origin's breadth-first tree.
    Topology,
}

/// Options of DASGD.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DasgdConfig {
    /// `all` (default) or `topology`.
    #[serde(default)]
    pub broadcast: Broadcast,
}

impl DasgdConfig {
    /// Checks the options against the topology.
    pub(crate) fn check(&self, topology: &Topology, path: &str) -> Result<(), ConfigError> {
        if self.broadcast == Broadcast::Topology && !topology.is_connected() {
            return Err(ConfigError::new(
                &format!("{path}.broadcast"),
                format!(
                    "forwarding gradients along the topology needs a connected graph; this one has components {}",
                    topology.describe_components()
                ),
            )
            .hint("use broadcast = \"all\", or a connected topology"));
        }
        Ok(())
    }
}

/// Events of DASGD.
#[derive(Debug, Clone, Copy)]
pub enum Event {
    /// `worker` finished computing its gradient.
    ComputeDone(usize),
    /// Gradient `grad`, the `seq`-th of `origin`, reached `to`.
    Gradient {
        /// Receiver.
        to: usize,
        /// The worker that computed it.
        origin: usize,
        /// Its index among `origin`'s gradients.
        seq: u64,
        /// The gradient.
        grad: GradId,
    },
}

#[derive(Debug, Clone)]
struct InFlight {
    /// Workers that have yet to apply it.
    left: usize,
    /// The origin's counters when the step started (the gradient set of the model it was
    /// computed on).
    read: Vec<u64>,
}

/// The state machine of DASGD.
pub struct Dasgd {
    broadcast: Broadcast,
    /// `children[o][v]`: where `v` forwards the gradients of origin `o`.
    children: Vec<Vec<Vec<usize>>>,
    /// `counts[i][o]`: gradients of origin `o` applied to model `i`.
    counts: Vec<Vec<u64>>,
    grads: Vec<Option<(GradId, Vec<u64>)>>,
    in_flight: BTreeMap<GradId, InFlight>,
    stats: StalenessStats,
    /// Since the last evaluation point: (applications, sum, max).
    window: (u64, u64, u64),
}

/// `children[v]` of a breadth-first tree of `topology` rooted at `root` (parent: the smallest
/// neighbour one hop closer to the root).
fn bfs_children(topology: &Topology, root: usize) -> Vec<Vec<usize>> {
    let n = topology.len();
    let mut dist = vec![usize::MAX; n];
    dist[root] = 0;
    let mut order = vec![root];
    let mut head = 0;
    while head < order.len() {
        let u = order[head];
        head += 1;
        for &v in topology.neighbors(u) {
            if dist[v] == usize::MAX {
                dist[v] = dist[u] + 1;
                order.push(v);
            }
        }
    }
    let mut children = vec![Vec::new(); n];
    for v in 0..n {
        if v == root || dist[v] == usize::MAX {
            continue;
        }
        let parent = topology
            .neighbors(v)
            .iter()
            .copied()
            .find(|&u| dist[u] + 1 == dist[v])
            .expect("a node at distance d > 0 has a neighbour at d − 1");
        children[parent].push(v);
    }
    children
}

impl Dasgd {
    /// A new instance on `topology`'s workers.
    pub fn new(cfg: &DasgdConfig, topology: &Topology) -> Self {
        let n = topology.len();
        let children = match cfg.broadcast {
            Broadcast::All => (0..n)
                .map(|o| {
                    let mut c = vec![Vec::new(); n];
                    c[o] = (0..n).filter(|&j| j != o).collect();
                    c
                })
                .collect(),
            Broadcast::Topology => (0..n).map(|o| bfs_children(topology, o)).collect(),
        };
        Dasgd {
            broadcast: cfg.broadcast,
            children,
            counts: vec![vec![0; n]; n],
            grads: vec![None; n],
            in_flight: BTreeMap::new(),
            stats: StalenessStats::default(),
            window: (0, 0, 0),
        }
    }

    /// How gradients are spread.
    pub fn broadcast(&self) -> Broadcast {
        self.broadcast
    }

    /// `counts[i][o]`: the gradients of origin `o` applied to model `i`.
    pub fn counts(&self) -> &[Vec<u64>] {
        &self.counts
    }

    /// `|G_i Δ G_j|`: the gradients one of models `i` and `j` has applied and the other has not.
    pub fn staleness_between(&self, i: usize, j: usize) -> u64 {
        self.counts[i]
            .iter()
            .zip(&self.counts[j])
            .map(|(a, b)| a.abs_diff(*b))
            .sum()
    }

    /// Gradients computed and not yet applied everywhere.
    pub fn gradients_in_flight(&self) -> usize {
        self.in_flight.len()
    }

    fn begin(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let grad = cx.start_step(w, Event::ComputeDone(w));
        self.grads[w] = Some((grad, self.counts[w].clone()));
    }

    /// Applies gradient `grad` of `origin` (computed on a model with counters `read`) to model
    /// `j` and records its staleness.
    fn apply(
        &mut self,
        j: usize,
        origin: usize,
        grad: GradId,
        read: &[u64],
        cx: &mut Ctx<'_, '_, Event>,
    ) {
        let lr = cx.lr();
        cx.world.store.apply_gradient(j, grad, lr);
        let s: u64 = self.counts[j]
            .iter()
            .zip(read)
            .map(|(a, b)| a.abs_diff(*b))
            .sum();
        self.stats.record(s);
        self.window.0 += 1;
        self.window.1 += s;
        self.window.2 = self.window.2.max(s);
        self.counts[j][origin] += 1;
    }

    fn forward(
        &self,
        at: usize,
        origin: usize,
        seq: u64,
        grad: GradId,
        cx: &mut Ctx<'_, '_, Event>,
    ) {
        let bytes = cx.world.model_bytes;
        for &c in &self.children[origin][at] {
            cx.send(
                at,
                c,
                bytes,
                Event::Gradient {
                    to: c,
                    origin,
                    seq,
                    grad,
                },
            );
        }
    }
}

impl Algorithm for Dasgd {
    type Event = Event;

    fn name(&self) -> &str {
        "dasgd"
    }

    fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        for w in 0..self.grads.len() {
            self.begin(w, cx);
        }
    }

    fn handle(&mut self, event: Event, cx: &mut Ctx<'_, '_, Event>) {
        match event {
            Event::ComputeDone(w) => {
                let (grad, read) = self.grads[w].take().expect("a gradient in flight");
                let seq = self.counts[w][w];
                self.apply(w, w, grad, &read, cx);
                cx.step_done(w);
                let n = self.grads.len();
                if n > 1 {
                    self.in_flight.insert(grad, InFlight { left: n - 1, read });
                    self.forward(w, w, seq, grad, cx);
                } else {
                    cx.world.store.release_gradient(grad);
                }
                self.begin(w, cx);
            }
            Event::Gradient {
                to,
                origin,
                seq,
                grad,
            } => {
                debug_assert_eq!(seq, self.counts[to][origin], "per-origin FIFO order");
                let read = self.in_flight[&grad].read.clone();
                self.apply(to, origin, grad, &read, cx);
                self.forward(to, origin, seq, grad, cx);
                let f = self.in_flight.get_mut(&grad).expect("in flight");
                f.left -= 1;
                if f.left == 0 {
                    self.in_flight.remove(&grad);
                    cx.world.store.release_gradient(grad);
                }
            }
        }
    }

    fn waiting(&self) -> Vec<String> {
        Vec::new()
    }

    fn staleness(&self) -> Option<StalenessStats> {
        Some(self.stats)
    }

    fn series(&mut self) -> Vec<(&'static str, f64)> {
        let (count, sum, max) = std::mem::take(&mut self.window);
        if count == 0 {
            return Vec::new();
        }
        vec![
            ("staleness_avg", sum as f64 / count as f64),
            ("staleness_max", max as f64),
        ]
    }
}

impl AlgorithmSpec for DasgdConfig {
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        self.check(setup.topology, setup.path)
    }

    fn run(
        &self,
        _kind: &'static str,
        world: &mut World<'_>,
        run_cfg: &RunConfig,
        observer: &mut dyn Observer,
    ) -> crate::Result<Outcome> {
        let mut alg = Dasgd::new(self, &world.topology);
        run(&mut alg, world, run_cfg, observer)
    }
}
