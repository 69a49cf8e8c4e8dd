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
//! ## Under faults
//!
//! The paper assumes every gradient reaches every worker. dasim accepts every fault kind, and
//! nobody ever waits, so DASGD never stalls:
//!
//! - a gradient message lost on the network (`loss`, `link-down`) is never applied by its
//!   receiver — nor, with `broadcast = "topology"`, by the receiver's subtree of the origin's
//!   tree, which it would have reached through that link; a gradient landing at a crashed
//!   worker is dropped (`messages_dropped_down`) with the same consequence. Each model that will
//!   never apply a gradient counts one application lost (`applications_lost`; `gradients_lost`
//!   counts the gradients missing from at least one model). Nothing retransmits: the models then
//!   differ by those gradients for good.
//! - the gradient sets become prefixes with holes: `G_i` for origin `o` is its first `c_i[o]`
//!   gradients minus the ones lost for model `i`, `L_i[o]`. Every staleness above is computed on
//!   these sets (`|G_i Δ G_j|`, and each application's `|G_j Δ R|`), so a lost gradient counts
//!   in every later measurement between a model that has it and one that has not.
//!   Once the gradients in flight have landed, `staleness_between(i, j)` can never fall below
//!   `Σ_o |L_i[o] Δ L_j[o]|`; its maximum over pairs is reported at each evaluation point as the
//!   series `lost_divergence_max` (runs with `[[faults]]` only).
//! - a crashed worker abandons its step (that gradient is never computed nor sent), misses every
//!   gradient that lands while it is down, and on rejoin starts a new step on the model it had.
//!
//! **Activities** ([`crate::record`]): a worker always computes; nobody waits.
//!
//! **Invariant**: every gradient is applied exactly once to every model, each origin's in order;
//! with plain SGD (no momentum, no weight decay, constant rate) every model is `x_0 − η Σ_{g ∈
//! G_i} g`, so the models agree whenever no gradient is in flight.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::algorithm::{Algorithm, Ctx, StalenessStats, World};
use crate::algorithms::{AlgorithmSpec, Setup};
use crate::engine::{Observer, Outcome, RunConfig, run};
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport, WorkerFault};
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
    /// `worker` finished computing its gradient (the second field: its crash count when the
    /// step started; a step abandoned by a crash is ignored).
    ComputeDone(usize, u64),
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
    /// Under faults: the origin's lost sets then (empty without faults).
    read_lost: Vec<BTreeSet<u64>>,
}

/// `|A Δ B|` for `A = [0, a) \ la` and `B = [0, b) \ lb` (the lost sets may hold values past
/// their bound, which do not count yet).
fn sym_diff(a: u64, la: &BTreeSet<u64>, b: u64, lb: &BTreeSet<u64>) -> u64 {
    if la.is_empty() && lb.is_empty() {
        return a.abs_diff(b);
    }
    let size_a = a - la.range(..a).count() as u64;
    let size_b = b - lb.range(..b).count() as u64;
    let m = a.min(b);
    let holes = la
        .range(..m)
        .chain(lb.range(..m))
        .collect::<BTreeSet<_>>()
        .len() as u64;
    let both = m - holes;
    size_a + size_b - 2 * both
}

/// A step under way: its gradient, and the counters and lost sets of the model it read.
type Computing = (GradId, Vec<u64>, Vec<BTreeSet<u64>>);

/// The state machine of DASGD.
pub struct Dasgd {
    broadcast: Broadcast,
    /// `children[o][v]`: where `v` forwards the gradients of origin `o`.
    children: Vec<Vec<Vec<usize>>>,
    /// `counts[i][o]`: gradients of origin `o` applied to model `i`.
    counts: Vec<Vec<u64>>,
    grads: Vec<Option<Computing>>,
    in_flight: BTreeMap<GradId, InFlight>,
    stats: StalenessStats,
    /// Since the last evaluation point: (applications, sum, max).
    window: (u64, u64, u64),
    /// `lost[i][o]`: gradients of origin `o` that model `i` will never apply (faults only).
    lost: Vec<Vec<BTreeSet<u64>>>,
    /// Per worker: crashes so far.
    life: Vec<u64>,
    faulty: bool,
    applications_lost: u64,
    gradients_lost: BTreeSet<(usize, u64)>,
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
            lost: vec![vec![BTreeSet::new(); n]; n],
            life: vec![0; n],
            faulty: false,
            applications_lost: 0,
            gradients_lost: BTreeSet::new(),
        }
    }

    /// Reports the measures of lost gradients (`lost_divergence_max`; set for runs with
    /// `[[faults]]`).
    pub fn with_faults(mut self) -> Self {
        self.faulty = true;
        self
    }

    /// `lost[i][o]`: the gradients of origin `o` (by index) that model `i` will never apply.
    pub fn lost(&self) -> &[Vec<BTreeSet<u64>>] {
        &self.lost
    }

    /// `max_{i,j} Σ_o |L_i[o] Δ L_j[o]|`: once the gradients in flight have landed, the
    /// staleness between two models can never fall below this (a gradient lost for one model
    /// and not the other is applied to one of them only, for good).
    pub fn lost_divergence_max(&self) -> u64 {
        let n = self.counts.len();
        let mut max = 0;
        for i in 0..n {
            for j in i + 1..n {
                let d: u64 = (0..n)
                    .map(|o| {
                        self.lost[i][o]
                            .symmetric_difference(&self.lost[j][o])
                            .count() as u64
                    })
                    .sum();
                max = max.max(d);
            }
        }
        max
    }

    /// Gradient `seq` of `origin` will never reach `at`, nor `at`'s subtree of the origin's
    /// tree: each of those models counts one application lost.
    fn lose(
        &mut self,
        at: usize,
        origin: usize,
        seq: u64,
        grad: GradId,
        cx: &mut Ctx<'_, '_, Event>,
    ) {
        let mut stack = vec![at];
        let mut count = 0;
        while let Some(v) = stack.pop() {
            self.lost[v][origin].insert(seq);
            count += 1;
            stack.extend(self.children[origin][v].iter().copied());
        }
        self.applications_lost += count as u64;
        self.gradients_lost.insert((origin, seq));
        let f = self.in_flight.get_mut(&grad).expect("in flight");
        f.left -= count;
        if f.left == 0 {
            self.in_flight.remove(&grad);
            cx.world.store.release_gradient(grad);
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
        (0..self.counts.len())
            .map(|o| {
                sym_diff(
                    self.counts[i][o],
                    &self.lost[i][o],
                    self.counts[j][o],
                    &self.lost[j][o],
                )
            })
            .sum()
    }

    /// Gradients computed and not yet applied everywhere.
    pub fn gradients_in_flight(&self) -> usize {
        self.in_flight.len()
    }

    fn begin(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let grad = cx.start_step(w, Event::ComputeDone(w, self.life[w]));
        let read_lost = if self.faulty {
            self.lost[w].clone()
        } else {
            Vec::new()
        };
        self.grads[w] = Some((grad, self.counts[w].clone(), read_lost));
    }

    /// Applies gradient `grad` of `origin` (computed on a model with counters `read` and lost
    /// sets `read_lost`) to model `j` and records its staleness.
    fn apply(
        &mut self,
        j: usize,
        origin: usize,
        grad: GradId,
        read: &[u64],
        read_lost: &[BTreeSet<u64>],
        cx: &mut Ctx<'_, '_, Event>,
    ) {
        let lr = cx.lr();
        cx.world.store.apply_gradient(j, grad, lr);
        let none = BTreeSet::new();
        let s: u64 = (0..read.len())
            .map(|o| {
                sym_diff(
                    self.counts[j][o],
                    &self.lost[j][o],
                    read[o],
                    read_lost.get(o).unwrap_or(&none),
                )
            })
            .sum();
        self.stats.record(s);
        self.window.0 += 1;
        self.window.1 += s;
        self.window.2 = self.window.2.max(s);
        self.counts[j][origin] += 1;
    }

    fn forward(
        &mut self,
        at: usize,
        origin: usize,
        seq: u64,
        grad: GradId,
        cx: &mut Ctx<'_, '_, Event>,
    ) {
        let bytes = cx.world.model_bytes;
        for k in 0..self.children[origin][at].len() {
            let c = self.children[origin][at][k];
            let sent = cx.send(
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
            if sent.lost.is_some() {
                self.lose(c, origin, seq, grad, cx);
            }
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
            Event::ComputeDone(w, life) if life != self.life[w] => {}
            Event::ComputeDone(w, _) => {
                let (grad, read, read_lost) = self.grads[w].take().expect("a gradient in flight");
                let seq = self.counts[w][w];
                self.apply(w, w, grad, &read, &read_lost, cx);
                cx.step_done(w);
                let n = self.grads.len();
                if n > 1 {
                    self.in_flight.insert(
                        grad,
                        InFlight {
                            left: n - 1,
                            read,
                            read_lost,
                        },
                    );
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
            } if !cx.deliverable(to) => self.lose(to, origin, seq, grad, cx),
            Event::Gradient {
                to,
                origin,
                seq,
                grad,
            } => {
                // Per-origin FIFO: the gradients skipped were lost on the way.
                debug_assert!(
                    (self.counts[to][origin]..seq).all(|k| self.lost[to][origin].contains(&k)),
                    "per-origin FIFO order"
                );
                self.counts[to][origin] = seq;
                let f = &self.in_flight[&grad];
                let (read, read_lost) = (f.read.clone(), f.read_lost.clone());
                self.apply(to, origin, grad, &read, &read_lost, cx);
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

    fn on_fault(&mut self, fault: WorkerFault, cx: &mut Ctx<'_, '_, Event>) {
        match fault {
            WorkerFault::Crash(w) => {
                self.life[w] += 1;
                if let Some((g, _, _)) = self.grads[w].take() {
                    cx.world.store.release_gradient(g);
                }
            }
            WorkerFault::Rejoin(w) => self.begin(w, cx),
        }
    }

    fn fault_counts(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("applications_lost", self.applications_lost),
            ("gradients_lost", self.gradients_lost.len() as u64),
        ]
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
        let mut out = vec![
            ("staleness_avg", sum as f64 / count as f64),
            ("staleness_max", max as f64),
        ];
        if self.faulty {
            out.push(("lost_divergence_max", self.lost_divergence_max() as f64));
        }
        out
    }
}

impl AlgorithmSpec for DasgdConfig {
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        self.check(setup.topology, setup.path)
    }

    fn fault_support(&self, _kind: &'static str, _fault: FaultKind) -> FaultSupport {
        // Every kind: see the module's "Under faults".
        Ok(())
    }

    fn run(
        &self,
        _kind: &'static str,
        world: &mut World<'_>,
        run_cfg: &RunConfig,
        observer: &mut dyn Observer,
    ) -> crate::Result<Outcome> {
        let mut alg = Dasgd::new(self, &world.topology);
        if world.faults().configured() {
            alg = alg.with_faults();
        }
        run(&mut alg, world, run_cfg, observer)
    }
}
