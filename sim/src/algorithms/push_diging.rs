//! Push-DIGing: gradient tracking over push-sum, for directed and time-varying graphs, beside
//! SGP.
//!
//! Nedić, Olshevsky & Shi, "Achieving geometric convergence for distributed optimization over
//! time-varying graphs", SIAM J. Optim. 27(4), 2017, Algorithm 2 (Push-DIGing); BlueFog's
//! `examples/pytorch_optimization.py` (`push_diging`) runs it with one-sided window operations.
//! The workers follow the topology's peer schedule ([`crate::net::schedule::PeerSchedule`]: SGP's
//! one- or two-peer exponential graph, a random peer, or any static graph), and `C(k)` is the
//! column-stochastic matrix of push-sum with uniform shares, `C_ji(k) = 1/(d_i(k) + 1)` for `j`
//! an out-peer of `i` at iteration `k` (and `i` itself), `d_i(k)` their number:
//!
//! ```text
//! u_i⁰ = x_i⁰, v_i⁰ = 1, y_i⁰ = g_i(x_i⁰)
//! node i, iteration k (u_i^k, v_i^k, y_i^k held; x_i^k = u_i^k / v_i^k):
//!     compute g_i at x_i^k                                           (compute time)
//!         y_i^k = y_i^{k−½} + g_i(x_i^k) − g_i(x_i^{k−1})            (y_i^{−½} = 0)
//!     push ((u_i^k − α y_i^k), y_i^k, v_i^k) / (d + 1) to each out-peer of iteration k
//!         and keep one share                                          (one message each)
//!     when every in-peer's shares of iteration k have arrived:
//!         u_i^{k+1} = Σ (u − α y) shares,  y_i^{k+½} = Σ y shares,  v_i^{k+1} = Σ v shares
//! ```
//!
//! With a doubly stochastic `C` (every node one in-peer and one out-peer, as on the one-peer
//! exponential graph) every `v_i` stays 1 and this is DIGing with `W = C`; on a schedule with
//! unequal in-degrees (a random peer) the weights differ and `u_i / v_i` de-biases the model,
//! as SGP's `x_i / w_i`.
//!
//! **Rows.** The worker's row holds the numerator `u_i`; its gradient is computed at scale
//! `1/v_i`, the de-biased model `x_i` ([`crate::algorithm::Ctx::begin_step`]); the evaluation
//! points and the consensus distance read the de-biased models ([`crate::algorithm::Algorithm::eval_model`],
//! [`crate::algorithm::Algorithm::replica_scales`]), as SGP's. The trackers `y_i` are `n` store rows after the
//! workers'; each node holds its previous gradient. As in [gradient tracking](super::gradient_tracking)
//! the tracker takes raw gradients through the store's step, so the run's optimizer must be
//! plain SGD; a gradient's addition to its tracker is its application for the staleness
//! measurement. The running statistics a pass produced (batch norm) go to the node's own row,
//! by a step of rate 0.
//!
//! **Invariants** (at every event, counting the shares in flight): the weights sum to `n`;
//! the trackers sum to the sum of the latest gradients, `Σ_i y_i = Σ_i g_i(x_i)` (push-sum keeps
//! the sum of what it pushes); and the numerators change only by `−α Σ_i y_i` per round.
//!
//! **Under faults**: as D-PSGD ([`super::neighbours`]): a lost share would take its mass and
//! break the tracking, so nothing is recovered: a lost message or a crashed in-peer stalls the
//! node, and the run stops as stalled, naming the waits. A crash with a rejoin is refused.
//!
//! **Activities** ([`crate::record`]): computing its gradient, then blocked or communicating
//! while an in-peer's shares of its iteration are missing.

use serde::{Deserialize, Serialize};

use super::gradient_tracking::{Trackers, plain_sgd};
use super::neighbours::{
    self, Exchange, ExchangeMethod, Payload, Peers, SendsAt, exchange_algorithm,
};
use super::sgp::require_strongly_connected;
use crate::algorithm::{Ctx, World};
use crate::algorithms::{AlgorithmSpec, Declared, Runnable, Setup, measure};
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport};
use crate::net::schedule::PeerSchedule;
use crate::store::{GradId, MsgId, OptimizerConfig, ReplicaStore, Slot};

/// Options of Push-DIGing (none: the peer schedule is the topology's).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PushDigingConfig {}

/// A node's pushed shares: `(u − α y)/(d + 1)`, `y/(d + 1)` and `v/(d + 1)`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Shares {
    /// The numerator's share, the step along the tracker taken.
    pub model: MsgId,
    /// The tracker's share.
    pub tracker: MsgId,
    /// The push-sum weight's share.
    pub weight: f64,
}

impl Payload for Shares {
    fn release(self, store: &mut dyn ReplicaStore) {
        store.release_msg(self.model);
        store.release_msg(self.tracker);
    }
}

/// Events of Push-DIGing: the exchange's, a message being a node's [`Shares`].
pub type Event = neighbours::Event<Shares>;

/// The state machine of Push-DIGing.
#[derive(Serialize, Deserialize)]
pub struct PushDiging {
    exchange: Exchange<Shares>,
    /// The push-sum weights `v_i`.
    weights: Vec<f64>,
    trackers: Trackers,
}

impl PushDiging {
    /// A new instance on `schedule`.
    pub fn new(_cfg: &PushDigingConfig, schedule: &PeerSchedule) -> Self {
        let n = schedule.len();
        PushDiging {
            exchange: Exchange::over(Peers::Schedule(schedule.clone()), SendsAt::Ready),
            weights: vec![1.0; n],
            trackers: Trackers::new(n),
        }
    }

    /// Node `i`'s tracker row `y_i` (valid once the run started).
    pub fn tracker_row(&self, i: usize) -> usize {
        self.trackers.row(i)
    }

    /// Node `i`'s push-sum weight `v_i`.
    pub fn weight(&self, i: usize) -> f64 {
        self.weights[i]
    }

    /// Node `i`'s gradient at its current model, once computed.
    pub fn last_gradient(&self, i: usize) -> Option<GradId> {
        self.trackers.last(i)
    }

    /// Node `i`'s iteration: exchanges completed.
    pub fn iteration(&self, i: usize) -> u64 {
        self.exchange.iteration(i)
    }

    /// Whether node `i` has pushed its shares of its iteration.
    pub fn has_sent(&self, i: usize) -> bool {
        self.exchange.is_ready(i)
    }

    /// Pushes node `i`'s shares of its iteration and keeps one.
    fn push(&mut self, i: usize, cx: &mut Ctx<'_, '_, Event>) {
        let k = self.exchange.iteration(i);
        let d = self.exchange.peers().out(i, k).len();
        let share = 1.0 / (d + 1) as f64;
        let alpha = cx.lr_for(i);
        let y = self.tracker_row(i);
        let weight = self.weights[i] * share;
        let bytes = cx.world.net.payload_bytes(2 * cx.world.store.num_params());
        let store = &mut cx.world.store;
        // The shares are computed once; every out-peer's message is a copy.
        let model = store.new_msg(&[(Slot::Row(i), share), (Slot::Row(y), -alpha * share)]);
        let tracker = store.new_msg(&[(Slot::Row(y), share)]);
        self.exchange.send(i, bytes, cx, |_, cx| Shares {
            model: cx.world.store.new_msg(&[(Slot::Msg(model), 1.0)]),
            tracker: cx.world.store.new_msg(&[(Slot::Msg(tracker), 1.0)]),
            weight,
        });
        let store = &mut cx.world.store;
        store.mix(i, &[(Slot::Msg(model), 1.0)]);
        store.mix(y, &[(Slot::Msg(tracker), 1.0)]);
        store.release_msg(model);
        store.release_msg(tracker);
        self.weights[i] = weight;
    }
}

impl ExchangeMethod for PushDiging {
    const MESSAGE: &'static str = "shares";

    fn prepare(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        self.trackers.start(cx);
    }

    /// The gradient is taken at the de-biased model `u_i / v_i`.
    fn begin(&mut self, i: usize, cx: &mut Ctx<'_, '_, Event>) {
        let scale = 1.0 / self.weights[i];
        self.exchange
            .begin_scaled(i, scale, Event::ComputeDone(i), cx);
    }

    fn computed(&mut self, i: usize, cx: &mut Ctx<'_, '_, Event>) {
        let g = self.exchange.take_gradient(i);
        self.trackers.track(i, g, cx);
        self.exchange.set_ready(i);
        self.push(i, cx);
    }

    fn combine(&mut self, i: usize, received: Vec<Shares>, cx: &mut Ctx<'_, '_, Event>) {
        let y = self.tracker_row(i);
        let mut u_terms = vec![(Slot::Row(i), 1.0)];
        let mut y_terms = vec![(Slot::Row(y), 1.0)];
        for s in &received {
            u_terms.push((Slot::Msg(s.model), 1.0));
            y_terms.push((Slot::Msg(s.tracker), 1.0));
            self.weights[i] += s.weight;
        }
        cx.world.store.mix(i, &u_terms);
        cx.world.store.mix(y, &y_terms);
        for s in received {
            s.release(&mut cx.world.store);
        }
    }

    fn replica_scales(&self) -> Option<Vec<f64>> {
        Some(self.weights.iter().map(|v| 1.0 / v).collect())
    }

    fn series(&mut self) -> Vec<(&'static str, f64)> {
        vec![
            (
                "weight_min",
                self.weights.iter().copied().fold(f64::INFINITY, f64::min),
            ),
            (
                "weight_max",
                self.weights
                    .iter()
                    .copied()
                    .fold(f64::NEG_INFINITY, f64::max),
            ),
        ]
    }

    fn eval_model(&self) -> Option<Vec<(usize, f64)>> {
        let n = self.weights.len() as f64;
        Some(
            self.weights
                .iter()
                .enumerate()
                .map(|(i, v)| (i, 1.0 / (n * v)))
                .collect(),
        )
    }
}

exchange_algorithm!(PushDiging, exchange: Shares);

impl AlgorithmSpec for PushDigingConfig {
    /// The push-sum weights.
    fn declared() -> Declared {
        Declared {
            measures: &[measure::PUSH_SUM_WEIGHT],
            quantities: &[],
        }
    }

    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        require_strongly_connected(setup, "Push-DIGing")
    }

    /// The tracker row and the previous gradient.
    fn buffers_per_worker(&self) -> usize {
        2
    }

    fn optimizer_support(&self, optimizer: &OptimizerConfig) -> Result<(), (&'static str, String)> {
        plain_sgd(optimizer, "its tracker is a sum of raw gradients")
    }

    fn fault_support(&self, _kind: &'static str, fault: FaultKind) -> FaultSupport {
        match fault {
            FaultKind::Rejoin => Err(
                "Push-DIGing has no recovery protocol: the shares sent to a crashed node are \
                 dropped, so on its return it would wait for them for ever",
            ),
            _ => Ok(()),
        }
    }

    fn build(&self, _kind: &'static str, world: &World<'_>) -> crate::Result<Box<dyn Runnable>> {
        let schedule = world
            .topology
            .training_schedule(world.store.batch_size(), world.store.train_size());
        Ok(Box::new(PushDiging::new(self, &schedule)))
    }
}
