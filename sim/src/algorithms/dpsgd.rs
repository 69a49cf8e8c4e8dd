//! D-PSGD: decentralized parallel SGD, synchronous neighbour averaging every step.
//!
//! Lian, Zhang, Zhang, Hsieh, Zhang & Liu, "Can Decentralized Algorithms Outperform Centralized
//! Algorithms? A Case Study for Decentralized Parallel Stochastic Gradient Descent", NeurIPS
//! 2017 (Algorithm 1). The workers sit on a static undirected graph with a symmetric, doubly
//! stochastic mixing matrix `W`:
//!
//! - `weights = "metropolis"` (default): `W_ij = 1/(1 + max(d_i, d_j))` on edges
//!   ([`crate::net::topology::Topology::mixing_matrix`]);
//! - `weights = "uniform"`: `W_ij = 1/(1 + d_max)` on edges (maximum-degree weights, Xiao & Boyd
//!   2004), which is `1/(d + 1)` on a `d`-regular graph and `1/n` on the complete graph;
//!
//! and `W_ii = 1 − Σ_j W_ij`. Two orders of the update are offered:
//!
//! ```text
//! combine-then-adapt (default; the paper's Algorithm 1), worker i, iteration k:
//!     send x_i^k to every neighbour; compute g_i at x_i^k            (both at once)
//!     when g_i is ready and every neighbour's x_j^k has arrived:
//!         x_i ← Σ_j W_ij x_j^k;   x_i ← optimizer step with g_i
//!
//! adapt-then-combine (Koloskova et al., ICML 2020), worker i, iteration k:
//!     compute g_i at x_i^k;  x_i ← optimizer step with g_i            (x_i^{k+½})
//!     send x_i^{k+½} to every neighbour
//!     when every neighbour's x_j^{k+½} has arrived:  x_i ← Σ_j W_ij x_j^{k+½}
//! ```
//!
//! The models are sent as message buffers, copies taken when sent, so a neighbour that has
//! already moved on does not change what was sent. A worker waits only for its neighbours'
//! models of its own iteration, so a straggler slows its neighbours, and — every iteration — its
//! neighbours' neighbours: in the long run the whole graph moves at the straggler's pace (a
//! worker can lead another by at most their distance in iterations). Neighbours are at most one
//! iteration apart, and every message a worker waits for is sent before its sender waits:
//! D-PSGD cannot deadlock.
//!
//! **Under faults**: D-PSGD is neighbour-synchronous and has no recovery protocol (the paper's
//! implementation waits for every neighbour's model, for ever). A model message lost on the
//! network (`loss`, `link-down`) is never replaced, so its receiver waits for it for good; a
//! crashed worker abandons its step, sends nothing more, and the models sent to it are dropped
//! (`messages_dropped_down`), so its neighbours wait for its next model for good. Either way the
//! wait spreads along the graph — a worker can lead a waiting neighbour by one iteration at most
//! — until nobody can move; the run then stops as stalled, naming each waiting worker, the model
//! it waits for and whether that model was lost or its sender is down. A crash with
//! `rejoin_after_s` is refused: the models dropped while the worker was down would leave it
//! waiting for them on its return.
//!
//! **Activities** ([`crate::record`]): a worker computes its gradient; then, while a neighbour's
//! model of its iteration is missing, it is blocked if some missing model has not been sent yet
//! (the wait attributed to the neighbour whose sending ends it) and communicates once every
//! missing model is in flight.
//!
//! **Invariant**: mixing with a doubly stochastic `W` keeps the sum of the replicas, so
//! `Σ_i x_i^{k+1} = Σ_i x_i^k − (the optimizer steps of iteration k)`. With uniform weights on
//! the complete graph, adapt-then-combine is all-reduce SGD (every replica is
//! `mean_j (x^k − η g_j)`), and combine-then-adapt keeps the *average* replica on all-reduce
//! SGD's trajectory whenever gradients are linear in the parameters (e.g. a quadratic).

use serde::{Deserialize, Serialize};

use super::neighbours::{self, Exchange, ExchangeMethod, SendsAt, exchange_algorithm};
use crate::algorithm::{Ctx, World};
use crate::algorithms::{AlgorithmSpec, Runnable, Setup};
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport};
use crate::net::topology::Topology;
use crate::store::{MsgId, ReplicaStore, Slot};

/// The mixing matrix of D-PSGD.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MixingWeights {
    /// `W_ij = 1/(1 + max(d_i, d_j))`.
    #[default]
    Metropolis,
    /// `W_ij = 1/(1 + d_max)`.
    Uniform,
}

/// The order of the local step and the neighbour averaging.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UpdateOrder {
    /// Average the neighbours' `x^k`, then step with the gradient at `x^k` (Lian et al.).
    #[default]
    CombineThenAdapt,
    /// Step, then average the neighbours' stepped models.
    AdaptThenCombine,
}

/// Options of D-PSGD.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DpsgdConfig {
    /// `metropolis` (default) or `uniform`.
    #[serde(default)]
    pub weights: MixingWeights,
    /// `combine-then-adapt` (default) or `adapt-then-combine`.
    #[serde(default)]
    pub update: UpdateOrder,
}

impl DpsgdConfig {
    /// Checks the options against the topology.
    pub(crate) fn check(&self, topology: &Topology, path: &str) -> Result<(), ConfigError> {
        if topology.is_time_varying() {
            return Err(ConfigError::new(
                "topology.kind",
                format!("D-PSGD ({path}) averages over a static graph, but this topology is a time-varying schedule"),
            )
            .hint("use a static topology (ring, torus, exponential, …), or SGP for time-varying directed graphs"));
        }
        if !topology.is_connected() {
            return Err(ConfigError::new(
                "topology.kind",
                format!(
                    "D-PSGD ({path}) needs a connected topology; this one has components {}",
                    topology.describe_components()
                ),
            ));
        }
        Ok(())
    }
}

/// The rows of the mixing matrix on `topology`: `(W_ii, [(j, W_ij)])` per worker, `j` over its
/// neighbours in graph order (D-PSGD's, and CHOCO-SGD's, `weights` option).
pub(crate) fn mixing_weights(
    weights: MixingWeights,
    topology: &Topology,
) -> Vec<(f64, Vec<(usize, f64)>)> {
    let n = topology.len();
    let neighbors: Vec<Vec<usize>> = (0..n).map(|i| topology.neighbors(i).to_vec()).collect();
    match weights {
        MixingWeights::Metropolis => {
            let w = topology.mixing_matrix();
            (0..n)
                .map(|i| {
                    let row = neighbors[i].iter().map(|&j| (j, w[i * n + j])).collect();
                    (w[i * n + i], row)
                })
                .collect()
        }
        MixingWeights::Uniform => {
            let dmax = neighbors.iter().map(Vec::len).max().unwrap_or(0);
            let e = 1.0 / (1 + dmax) as f64;
            (0..n)
                .map(|i| {
                    let row: Vec<(usize, f64)> = neighbors[i].iter().map(|&j| (j, e)).collect();
                    (1.0 - e * row.len() as f64, row)
                })
                .collect()
        }
    }
}

/// Events of D-PSGD: the exchange's, a message being a model.
pub type Event = neighbours::Event;

/// The state machine of D-PSGD.
#[derive(Serialize, Deserialize)]
pub struct Dpsgd {
    order: UpdateOrder,
    /// `(W_ii, [(j, W_ij)])` per worker.
    weights: Vec<(f64, Vec<(usize, f64)>)>,
    /// The models exchanged with the neighbours; ready: combine-then-adapt, the gradient is
    /// ready; adapt-then-combine, the stepped model is sent.
    exchange: Exchange,
}

impl Dpsgd {
    /// A new instance on `topology`'s graph.
    pub fn new(cfg: &DpsgdConfig, topology: &Topology) -> Self {
        let n = topology.len();
        let neighbors: Vec<Vec<usize>> = (0..n).map(|i| topology.neighbors(i).to_vec()).collect();
        let sends_at = match cfg.update {
            UpdateOrder::CombineThenAdapt => SendsAt::Begin,
            UpdateOrder::AdaptThenCombine => SendsAt::Ready,
        };
        Dpsgd {
            order: cfg.update,
            weights: mixing_weights(cfg.weights, topology),
            exchange: Exchange::new(neighbors, sends_at),
        }
    }

    /// The mixing weights of worker `i`: `(W_ii, [(j, W_ij)])`.
    pub fn weights(&self, i: usize) -> &(f64, Vec<(usize, f64)>) {
        &self.weights[i]
    }

    fn send_model(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let bytes = cx.world.model_bytes;
        self.exchange.send(w, bytes, cx, |_, cx| {
            cx.world.store.new_msg(&[(Slot::Row(w), 1.0)])
        });
    }

    fn apply(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let g = self.exchange.take_gradient(w);
        let lr = cx.lr_for(w);
        cx.world.store.apply_gradient(w, g, lr);
        cx.world.store.release_gradient(g);
        cx.step_done(w);
    }
}

impl ExchangeMethod for Dpsgd {
    const MESSAGE: &'static str = "model";

    fn begin(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        if self.order == UpdateOrder::CombineThenAdapt {
            self.send_model(w, cx);
        }
        self.exchange.begin(w, Event::ComputeDone(w), cx);
    }

    fn computed(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        // Ready (and, adapt-then-combine, sent: see `SendsAt`) from here on.
        self.exchange.set_ready(w);
        if self.order == UpdateOrder::AdaptThenCombine {
            self.apply(w, cx);
            self.send_model(w, cx);
        }
    }

    fn combine(&mut self, w: usize, msgs: Vec<MsgId>, cx: &mut Ctx<'_, '_, Event>) {
        let (self_weight, row) = &self.weights[w];
        let mut terms = vec![(Slot::Row(w), *self_weight)];
        terms.extend(
            msgs.iter()
                .zip(row)
                .map(|(&m, &(_, wij))| (Slot::Msg(m), wij)),
        );
        cx.world.store.mix(w, &terms);
        for m in msgs {
            cx.world.store.release_msg(m);
        }
        if self.order == UpdateOrder::CombineThenAdapt {
            self.apply(w, cx);
        }
    }
}

exchange_algorithm!(Dpsgd, exchange: MsgId);

impl AlgorithmSpec for DpsgdConfig {
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        self.check(setup.topology, setup.path)
    }

    fn fault_support(&self, _kind: &'static str, fault: FaultKind) -> FaultSupport {
        match fault {
            FaultKind::Rejoin => Err(
                "D-PSGD has no recovery protocol: the models sent to a crashed worker are dropped, \
                 so on its return it would wait for them for ever (leave out rejoin_after_s to see \
                 the stall)",
            ),
            _ => Ok(()),
        }
    }

    fn build(&self, _kind: &'static str, world: &World<'_>) -> crate::Result<Box<dyn Runnable>> {
        let alg = Dpsgd::new(self, &world.topology);
        Ok(Box::new(alg))
    }
}
