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
//! decay). Nobody ever waits, so DASGD cannot deadlock. A model's running statistics (batch norm,
//! [`crate::store::ReplicaStore::state`]) are its own worker's: by the store's state rule a
//! received gradient moves only the trainable parameters.
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
//! The measurement is exact and does not walk all `n` origins:
//! `|G_j Δ R| = |G_j| − |R| + 2·|R \ G_j|`, where `|G_j|` is a running total per model, `|R|`
//! is stored with the read, and `|R \ G_j| = Σ_o max(0, r[o] − c_j[o])` can only count origins
//! with `r[o] > 0`. A read therefore stores `|R|` and the counters of the origins its model had
//! heard of (not `n` of them), and an application costs that many lookups; the origin's own
//! application costs nothing (`R ⊆ G_o`). Under faults the lost sets below `r[o]` are final when
//! the model reads (a gradient's fate is settled before its origin's next one arrives, links
//! being FIFO), so the read does not copy them. While nothing has been lost, a read also leaves
//! out the origins whose gradients it has were already applied by every model (`r[o] ≤ done[o]`,
//! `done[o]` counting each origin's gradients completed everywhere, which complete in index
//! order): they can never count. With `broadcast = "all"` at 1,024 workers that drops the
//! majority of the origins from each read, and so from each of its `n − 1` applications. Each
//! measurement of a gradient in flight drops them again, by `done` as it is then: the first
//! arrives about a step after the read, when nearly every gradient the read had is applied
//! everywhere, so the later ones walk a handful of origins, and a message costs the same at any
//! `n`.
//! Counters are a flat `n × n` table of `u32`
//! whose zeroed pages are only touched where a model has heard of an origin; forwarding trees
//! are a table of parents, children being found among a node's neighbours.
//! `tests/dasgd_staleness.rs` checks every measurement against the definition on random
//! schedules.
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
use crate::algorithms::{AlgorithmSpec, Declared, Runnable, Setup, measure};
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport, WorkerFault};
use crate::net::topology::Topology;
use crate::store::{GradId, ReplicaStore};

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

/// Events of DASGD. A broadcast is `n − 1` of them at once, every one waiting in the queue until
/// its delivery (a hundred million where the uplinks cannot keep up), so they are kept small:
/// 24 bytes.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum Event {
    /// `worker` finished computing its gradient (the second field: its crash count when the
    /// step started; a step abandoned by a crash is ignored).
    ComputeDone(u32, u64),
    /// Gradient `grad`, the `seq`-th of `origin`, reached `to`.
    Gradient {
        /// Receiver.
        to: u32,
        /// The worker that computed it.
        origin: u32,
        /// Its index among `origin`'s gradients.
        seq: u32,
        /// The gradient.
        grad: GradId,
    },
}

const _: () = assert!(std::mem::size_of::<Option<Event>>() <= 24);

/// The gradient set `R` of the model a gradient was computed on: its origin's, when the step
/// started. Stored as its size and the origins' counters that are not zero, so a snapshot costs
/// what the model has heard of, not `n`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Read {
    /// `|R|`: the gradients applied to the origin's model by then.
    total: u64,
    /// `(o, r[o])` for every origin `o` with `r[o] > 0` (in the order the model first heard of
    /// them), less those that can no longer count ([`Dasgd::measure_in_flight`]).
    counts: Vec<(u32, u32)>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct InFlight {
    /// Workers that have yet to apply it.
    left: usize,
    /// Its origin and its index among the origin's gradients.
    origin: u32,
    seq: u64,
    /// The gradient set of the model it was computed on.
    read: Read,
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

/// `|R_o \ G_j|` restricted to one origin: `R_o = [0, r) \ lr`, `G_j = [0, c) \ lc` (a lost set
/// may hold values past its bound, which do not count).
fn missing_one(r: u64, lr: Option<&BTreeSet<u64>>, c: u64, lc: Option<&BTreeSet<u64>>) -> u64 {
    let in_lr = |k: &u64| lr.is_some_and(|l| l.contains(k));
    // Those of [c, r) that R has.
    let beyond = if r > c {
        r - c - lr.map_or(0, |l| l.range(c..r).count() as u64)
    } else {
        0
    };
    // Those below both bounds that R has and G_j lost.
    let holes = lc.map_or(0, |l| {
        l.range(..r.min(c)).filter(|k| !in_lr(k)).count() as u64
    });
    beyond + holes
}

/// A step under way: its gradient, and the gradient set of the model it read.
type Computing = (GradId, Read);

/// Who forwards a gradient to whom.
#[derive(Serialize, Deserialize)]
enum Trees {
    /// The origin sends to every other worker.
    All,
    /// Breadth-first trees of the topology: `parent[o · n + v]` is `v`'s parent in origin `o`'s
    /// tree (`NONE` for the root), so a child list is found among `v`'s neighbours instead of
    /// being stored (`n²` small integers rather than `n²` lists).
    Bfs {
        neighbors: Vec<Vec<usize>>,
        parent: Parents,
    },
}

/// The parent table, in 16-bit entries where the workers fit.
#[derive(Serialize, Deserialize)]
enum Parents {
    Narrow(Vec<u16>),
    Wide(Vec<u32>),
}

impl Parents {
    fn get(&self, i: usize) -> usize {
        match self {
            Parents::Narrow(p) if p[i] == u16::MAX => usize::MAX,
            Parents::Narrow(p) => p[i] as usize,
            Parents::Wide(p) if p[i] == u32::MAX => usize::MAX,
            Parents::Wide(p) => p[i] as usize,
        }
    }
}

/// The state machine of DASGD.
///
/// The staleness bookkeeping costs, per application of a gradient computed on a model that had
/// heard of `h` origins, `O(h)` (see [`Dasgd::staleness_between`] and the module's
/// "Staleness"): with `|G_j Δ R| = |G_j| − |R| + 2·|R \ G_j|`, only the origins in `R` can
/// count, and a model's size `|G_j|` is a running total.
#[derive(Serialize, Deserialize)]
pub struct Dasgd {
    broadcast: Broadcast,
    n: usize,
    trees: Trees,
    /// `counts[i · n + o]`: gradients of origin `o` applied to model `i` (or skipped as lost).
    /// Zeroed pages are only touched where a model hears of an origin.
    counts: Vec<u32>,
    /// Per model: the origins with a counter above zero, in the order it heard of them.
    heard: Vec<Vec<u32>>,
    /// Per model: `|G_i|`, the gradients applied to it.
    total: Vec<u64>,
    /// Per origin `o`: `done[o]` such that the first `done[o]` gradients of `o` have been
    /// applied by every model (completions counted in index order; a gradient completed out of
    /// order is only counted once those before it are, so this never overstates).
    done: Vec<u32>,
    grads: Vec<Option<Computing>>,
    in_flight: BTreeMap<GradId, InFlight>,
    stats: StalenessStats,
    /// Since the last evaluation point: (applications, sum, max).
    window: (u64, u64, u64),
    /// `lost[(i, o)]`: gradients of origin `o` that model `i` will never apply (faults only;
    /// no entry where there is none).
    lost: BTreeMap<(u32, u32), BTreeSet<u64>>,
    /// Per model: whether it has lost anything.
    lossy: Vec<bool>,
    /// Per worker: crashes so far.
    life: Vec<u64>,
    faulty: bool,
    applications_lost: u64,
    gradients_lost: BTreeSet<(usize, u64)>,
    /// Scratch list of children.
    kids: Vec<usize>,
}

/// The parent of every node in a breadth-first tree of `topology` rooted at `root` (the smallest
/// — first listed — neighbour one hop closer to the root), written into `out` (`usize::MAX` for
/// the root and unreachable nodes).
fn bfs_parents(topology: &Topology, root: usize, dist: &mut [usize], out: &mut [usize]) {
    let n = topology.len();
    dist.fill(usize::MAX);
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
    for v in 0..n {
        out[v] = if v == root || dist[v] == usize::MAX {
            usize::MAX
        } else {
            topology
                .neighbors(v)
                .iter()
                .copied()
                .find(|&u| dist[u] + 1 == dist[v])
                .expect("a node at distance d > 0 has a neighbour at d − 1")
        };
    }
}

impl Dasgd {
    /// A new instance on `topology`'s workers.
    pub fn new(cfg: &DasgdConfig, topology: &Topology) -> Self {
        let n = topology.len();
        let trees = match cfg.broadcast {
            Broadcast::All => Trees::All,
            Broadcast::Topology => {
                let mut dist = vec![0; n];
                let mut row = vec![0; n];
                let narrow = n < u16::MAX as usize;
                let mut p16 = Vec::new();
                let mut p32 = Vec::new();
                for o in 0..n {
                    bfs_parents(topology, o, &mut dist, &mut row);
                    if narrow {
                        p16.extend(row.iter().map(|&p| p.try_into().unwrap_or(u16::MAX)));
                    } else {
                        p32.extend(row.iter().map(|&p| p.try_into().unwrap_or(u32::MAX)));
                    }
                }
                Trees::Bfs {
                    neighbors: (0..n).map(|v| topology.neighbors(v).to_vec()).collect(),
                    parent: if narrow {
                        Parents::Narrow(p16)
                    } else {
                        Parents::Wide(p32)
                    },
                }
            }
        };
        Dasgd {
            broadcast: cfg.broadcast,
            n,
            trees,
            counts: vec![0; n * n],
            heard: vec![Vec::new(); n],
            total: vec![0; n],
            done: vec![0; n],
            grads: vec![None; n],
            in_flight: BTreeMap::new(),
            stats: StalenessStats::default(),
            window: (0, 0, 0),
            lost: BTreeMap::new(),
            lossy: vec![false; n],
            life: vec![0; n],
            faulty: false,
            applications_lost: 0,
            gradients_lost: BTreeSet::new(),
            kids: Vec::new(),
        }
    }

    /// Reports the measures of lost gradients (`lost_divergence_max`; set for runs with
    /// `[[faults]]`).
    pub fn with_faults(mut self) -> Self {
        self.faulty = true;
        self
    }

    /// Where `v` forwards the gradients of `origin`, in increasing order, into `out`.
    fn children_into(&self, origin: usize, v: usize, out: &mut Vec<usize>) {
        out.clear();
        match &self.trees {
            Trees::All if v == origin => out.extend((0..self.n).filter(|&j| j != origin)),
            Trees::All => {}
            Trees::Bfs { neighbors, parent } => {
                let base = origin * self.n;
                out.extend(
                    neighbors[v]
                        .iter()
                        .copied()
                        .filter(|&u| parent.get(base + u) == v),
                );
                out.sort_unstable();
            }
        }
    }

    /// `L_i[o]`: the gradients of origin `o` (by index) that model `i` will never apply (`None`
    /// when there is none).
    pub fn lost(&self, i: usize, o: usize) -> Option<&BTreeSet<u64>> {
        self.lost.get(&(i as u32, o as u32))
    }

    /// Every `(o, L_i[o])` of model `i` with `L_i[o]` not empty, by origin.
    fn lost_of(&self, i: usize) -> impl Iterator<Item = (u32, &BTreeSet<u64>)> {
        let i = i as u32;
        self.lost
            .range((i, 0)..=(i, u32::MAX))
            .map(|(&(_, o), l)| (o, l))
    }

    /// `max_{i,j} Σ_o |L_i[o] Δ L_j[o]|`: once the gradients in flight have landed, the
    /// staleness between two models can never fall below this (a gradient lost for one model
    /// and not the other is applied to one of them only, for good).
    pub fn lost_divergence_max(&self) -> u64 {
        let lossy: Vec<usize> = (0..self.n).filter(|&i| self.lossy[i]).collect();
        let size = |i: usize| self.lost_of(i).map(|(_, l)| l.len() as u64).sum::<u64>();
        // Against a model that lost nothing, a lossy model differs by all it lost.
        let mut max = if lossy.len() < self.n {
            lossy.iter().map(|&i| size(i)).max().unwrap_or(0)
        } else {
            0
        };
        for (a, &i) in lossy.iter().enumerate() {
            for &j in &lossy[a + 1..] {
                let mut d = 0;
                let mut li = self.lost_of(i).peekable();
                let mut lj = self.lost_of(j).peekable();
                loop {
                    match (li.peek(), lj.peek()) {
                        (None, None) => break,
                        (Some(&(oi, x)), Some(&(oj, y))) if oi == oj => {
                            d += x.symmetric_difference(y).count() as u64;
                            li.next();
                            lj.next();
                        }
                        (Some(&(oi, x)), Some(&(oj, _))) if oi < oj => {
                            d += x.len() as u64;
                            li.next();
                        }
                        (Some(&(_, x)), None) => {
                            d += x.len() as u64;
                            li.next();
                        }
                        (_, Some(&(_, y))) => {
                            d += y.len() as u64;
                            lj.next();
                        }
                    }
                }
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
        let mut kids = Vec::new();
        let mut count = 0;
        while let Some(v) = stack.pop() {
            self.lost
                .entry((v as u32, origin as u32))
                .or_default()
                .insert(seq);
            self.lossy[v] = true;
            count += 1;
            self.children_into(origin, v, &mut kids);
            stack.extend_from_slice(&kids);
        }
        self.applications_lost += count as u64;
        self.gradients_lost.insert((origin, seq));
        let f = self.in_flight.get_mut(&grad).expect("in flight");
        f.left -= count;
        if f.left == 0 {
            self.complete(grad, cx);
        }
    }

    /// `grad` has been applied (or lost) everywhere: forget it.
    fn complete(&mut self, grad: GradId, cx: &mut Ctx<'_, '_, Event>) {
        let f = self.in_flight.remove(&grad).expect("in flight");
        let done = &mut self.done[f.origin as usize];
        if u64::from(*done) == f.seq {
            *done += 1;
        }
        cx.world.store.release_gradient(grad);
    }

    /// How gradients are spread.
    pub fn broadcast(&self) -> Broadcast {
        self.broadcast
    }

    /// `counts()[i][o]`: the gradients of origin `o` applied to model `i` (lost ones skipped
    /// included).
    pub fn counts(&self) -> Vec<Vec<u64>> {
        self.counts
            .chunks(self.n.max(1))
            .take(self.n)
            .map(|row| row.iter().map(|&c| c as u64).collect())
            .collect()
    }

    fn count(&self, i: usize, o: usize) -> u64 {
        self.counts[i * self.n + o] as u64
    }

    fn set_count(&mut self, i: usize, o: usize, value: u64) {
        let c = &mut self.counts[i * self.n + o];
        if *c == 0 && value > 0 {
            self.heard[i].push(o as u32);
        }
        *c = value.try_into().expect("fewer than 2³² steps per worker");
    }

    /// `|G_i Δ G_j|`: the gradients one of models `i` and `j` has applied and the other has not.
    pub fn staleness_between(&self, i: usize, j: usize) -> u64 {
        (0..self.n)
            .map(|o| {
                let none = BTreeSet::new();
                sym_diff(
                    self.count(i, o),
                    self.lost(i, o).unwrap_or(&none),
                    self.count(j, o),
                    self.lost(j, o).unwrap_or(&none),
                )
            })
            .sum()
    }

    /// Gradients computed and not yet applied everywhere.
    pub fn gradients_in_flight(&self) -> usize {
        self.in_flight.len()
    }

    fn begin(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let grad = cx.start_step(w, Event::ComputeDone(w as u32, self.life[w]));
        let row = &self.counts[w * self.n..(w + 1) * self.n];
        // While nothing has been lost, an origin whose gradients in `R` every model has applied
        // cannot count in any later `|R \ G_j|` (`r[o] ≤ done[o] ≤ c_j[o]`, and the fate of
        // those gradients is settled: no hole below `r[o]` can appear later): leave it out.
        // Once something was lost, a hole below both counters may count, so every origin heard
        // of is kept.
        let done = (self.applications_lost == 0).then_some(&self.done[..]);
        let read = Read {
            total: self.total[w],
            counts: self.heard[w]
                .iter()
                .map(|&o| (o, row[o as usize]))
                .filter(|&(o, r)| done.is_none_or(|d| r > d[o as usize]))
                .collect(),
        };
        self.grads[w] = Some((grad, read));
    }

    /// `|G_j Δ R|` for the gradient set `R` that `origin`'s model had when it read (`read`):
    /// `|G_j| − |R| + 2·|R \ G_j|`, where only the origins `R` has count in the last term.
    ///
    /// A lost gradient's fate is settled before its origin's next gradient reaches the model
    /// (links are FIFO), so the lost sets of `origin`'s model below `R`'s counters are those it
    /// had when it read.
    fn measure(&self, j: usize, origin: usize, read: &Read) -> u64 {
        let row = &self.counts[j * self.n..(j + 1) * self.n];
        let missing: u64 = if j == origin {
            // R ⊆ G_j: a model's set only grows.
            0
        } else if !self.lossy[origin] && !self.lossy[j] {
            read.counts
                .iter()
                .map(|&(o, r)| r.saturating_sub(row[o as usize]) as u64)
                .sum()
        } else {
            read.counts
                .iter()
                .map(|&(o, r)| {
                    missing_one(
                        r as u64,
                        self.lost(origin, o as usize),
                        row[o as usize] as u64,
                        self.lost(j, o as usize),
                    )
                })
                .sum()
        };
        self.total[j] + 2 * missing - read.total
    }

    /// [`Dasgd::measure`] for the gradient `grad` in flight, arriving at model `j`. While nothing
    /// has been lost, the measurement also drops from the read the origins that can no longer
    /// count, `r[o] ≤ done[o]` (the argument of [`Dasgd::begin`]'s filter, at a later time):
    /// a read is measured at every one of the `n − 1` models, the first time about a step after
    /// it was taken, by when nearly all the gradients it had were applied everywhere. So the
    /// list is walked whole about once per read, and what the other measurements walk is the
    /// few origins still in flight: a cost per message that does not grow with `n`.
    fn measure_in_flight(&mut self, j: usize, origin: usize, grad: GradId) -> u64 {
        if j == origin || self.applications_lost > 0 {
            return self.measure(j, origin, &self.in_flight[&grad].read);
        }
        let row = &self.counts[j * self.n..(j + 1) * self.n];
        let done = &self.done;
        let read = &mut self.in_flight.get_mut(&grad).expect("in flight").read;
        let mut missing = 0u64;
        read.counts.retain(|&(o, r)| {
            let o = o as usize;
            missing += u64::from(r.saturating_sub(row[o]));
            r > done[o]
        });
        self.total[j] + 2 * missing - read.total
    }

    /// Applies gradient `grad` of `origin` to model `j` and records its staleness `s`.
    fn apply(
        &mut self,
        j: usize,
        origin: usize,
        grad: GradId,
        s: u64,
        cx: &mut Ctx<'_, '_, Event>,
    ) {
        // Model `j`'s optimizer steps, with `j`'s own counter under `progress = "node"`,
        // whichever worker computed the gradient.
        let lr = cx.lr_for(j);
        cx.world.store.apply_gradient(j, grad, lr);
        self.stats.record(s);
        self.window.0 += 1;
        self.window.1 += s;
        self.window.2 = self.window.2.max(s);
        self.set_count(j, origin, self.count(j, origin) + 1);
        self.total[j] += 1;
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
        let mut kids = std::mem::take(&mut self.kids);
        self.children_into(origin, at, &mut kids);
        for &c in &kids {
            let sent = cx.send(
                at,
                c,
                bytes,
                Event::Gradient {
                    to: c as u32,
                    origin: origin as u32,
                    seq: u32::try_from(seq).expect("fewer than 2^32 gradients per worker"),
                    grad,
                },
            );
            if sent.lost.is_some() {
                self.lose(c, origin, seq, grad, cx);
            }
        }
        self.kids = kids;
    }
}

impl Algorithm for Dasgd {
    type Event = Event;

    fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        for w in 0..self.grads.len() {
            self.begin(w, cx);
        }
    }

    fn handle(&mut self, event: Event, cx: &mut Ctx<'_, '_, Event>) {
        match event {
            Event::ComputeDone(w, life) if life != self.life[w as usize] => {}
            Event::ComputeDone(w, _) => {
                let w = w as usize;
                let (grad, read) = self.grads[w].take().expect("a gradient in flight");
                let seq = self.count(w, w);
                let s = self.measure(w, w, &read);
                self.apply(w, w, grad, s, cx);
                cx.step_done(w);
                let n = self.n;
                if n > 1 {
                    self.in_flight.insert(
                        grad,
                        InFlight {
                            left: n - 1,
                            origin: w as u32,
                            seq,
                            read,
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
            } if !cx.deliverable(to as usize) => {
                self.lose(to as usize, origin as usize, u64::from(seq), grad, cx)
            }
            Event::Gradient {
                to,
                origin,
                seq,
                grad,
            } => {
                let (to, origin, seq) = (to as usize, origin as usize, u64::from(seq));
                // Per-origin FIFO: the gradients skipped were lost on the way.
                debug_assert!(
                    (self.count(to, origin)..seq)
                        .all(|k| self.lost(to, origin).is_some_and(|l| l.contains(&k))),
                    "per-origin FIFO order"
                );
                self.set_count(to, origin, seq);
                let s = self.measure_in_flight(to, origin, grad);
                self.apply(to, origin, grad, s, cx);
                self.forward(to, origin, seq, grad, cx);
                let f = self.in_flight.get_mut(&grad).expect("in flight");
                f.left -= 1;
                if f.left == 0 {
                    self.complete(grad, cx);
                }
            }
        }
    }

    fn on_fault(&mut self, fault: WorkerFault, cx: &mut Ctx<'_, '_, Event>) {
        match fault {
            WorkerFault::Crash(w) => {
                self.life[w] += 1;
                if let Some((g, _)) = self.grads[w].take() {
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
    /// The staleness between models of every gradient applied (the paper's `S_avg`, `S_max`).
    fn declared() -> Declared {
        Declared {
            measures: &[measure::MODEL_STALENESS],
            quantities: &[],
        }
    }

    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        self.check(setup.topology, setup.path)
    }

    fn uses_topology(&self) -> bool {
        self.broadcast == Broadcast::Topology
    }

    /// Each gradient goes at once to every other worker, or to the worker's neighbours (its
    /// children in its own tree), whatever the uplink still has to send: with messages slower
    /// to send than a step, they pile up behind it. (The relays of others' gradients are paced
    /// by their arrivals, and are not counted.)
    fn unthrottled_posts(&self, worker: usize, topology: &Topology) -> usize {
        match self.broadcast {
            Broadcast::All => topology.len().saturating_sub(1),
            Broadcast::Topology => topology.neighbors(worker).len(),
        }
    }

    fn fault_support(&self, _kind: &'static str, _fault: FaultKind) -> FaultSupport {
        // Every kind: see the module's "Under faults".
        Ok(())
    }

    fn build(&self, _kind: &'static str, world: &World<'_>) -> crate::Result<Box<dyn Runnable>> {
        let mut alg = Dasgd::new(self, &world.topology);
        if world.faults().configured() {
            alg = alg.with_faults();
        }
        Ok(Box::new(alg))
    }
}
