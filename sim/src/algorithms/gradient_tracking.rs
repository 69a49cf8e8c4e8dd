//! Gradient tracking (DSGT): decentralized SGD whose direction is a tracker of the network's
//! average gradient, so that it converges to the optimum of the workers' average objective on
//! heterogeneous data, where D-PSGD stops at a consensus bias.
//!
//! Pu & Nedić, "Distributed stochastic gradient tracking methods", Mathematical Programming
//! 187 (2021), Eq. (3) (DSGT, `update = "adapt-then-combine"`, the default); Nedić, Olshevsky &
//! Shi's DIGing (SIAM J. Optim. 27(4), 2017, Algorithm 1; Qu & Li, IEEE TCNS 2018) mixes the
//! models only, `x ← W x − α y` (`update = "combine-then-adapt"`, as BlueFog's
//! `examples/pytorch_optimization.py`, `gradient_tracking`). The workers sit on a static
//! undirected graph with a symmetric, doubly stochastic `W` (the `weights` of
//! [D-PSGD](super::dpsgd)):
//!
//! ```text
//! y_i⁰ = g_i(x_i⁰)
//! worker i, iteration k (x_i^k, y_i^k held):
//!     send (x_i^k, y_i^k) to every neighbour                   (one message of two models)
//!     when every neighbour's pair of iteration k has arrived:
//!         x_i^{k+1} = Σ_j W_ij (x_j^k − α y_j^k)        (DIGing: Σ_j W_ij x_j^k − α y_i^k)
//!         y_i^{k+½} = Σ_j W_ij y_j^k
//!     compute g_i at x_i^{k+1}                                  (compute time)
//!         y_i^{k+1} = y_i^{k+½} + g_i(x_i^{k+1}) − g_i(x_i^k)
//! ```
//!
//! `α` is the learning rate in force for the worker ([`crate::algorithm::Ctx::lr_for`]). The
//! new gradient needs the mixed model, so compute and communication alternate: an iteration
//! costs a step plus the exchange, as D-PSGD's adapt-then-combine order does.
//!
//! **Rows.** The trackers `y_i` are `n` store rows after the workers'; each worker also holds
//! its previous gradient (one gradient buffer). The tracker is updated with raw gradients: the
//! store's optimizer step with rate `−1` adds `g`, with rate `1` subtracts it, so the run's
//! optimizer must be plain SGD (`kind = "sgd"`, no momentum, no weight decay, no clipping, as
//! in the paper); anything else is refused before the run. A gradient's addition to its tracker
//! is its application for the staleness measurement ([`crate::store::tracked`]): row
//! staleness 0 (the tracker is not written while the gradient is computed), global staleness
//! the other workers' gradients added meanwhile, as D-PSGD's. The running statistics a pass
//! produced (batch norm) go to the worker's own row, by a step of rate 0.
//!
//! **Invariant** (the tracking property): with a doubly stochastic `W`, mixing keeps the sum of
//! the trackers, so at every iteration `Σ_i y_i^k = Σ_i g_i(x_i^k)`: the trackers' mean is the
//! mean of the latest gradients, to rounding.
//!
//! **Under faults**: as D-PSGD ([`super::neighbours`]): no recovery protocol; a lost message or
//! a crashed neighbour stalls the exchange, and the run stops as stalled, naming the waits.
//!
//! **Activities** ([`crate::record`]): computing its gradient, then blocked or communicating
//! while a neighbour's pair of its iteration is missing.

use serde::{Deserialize, Serialize};

use super::dpsgd::{MixingWeights, UpdateOrder, mixing_weights};
use super::neighbours::{self, Exchange, ExchangeMethod, Payload, SendsAt, exchange_algorithm};
use crate::algorithm::{Ctx, World};
use crate::algorithms::{AlgorithmSpec, Runnable, Setup};
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport};
use crate::net::topology::Topology;
use crate::store::{GradId, MsgId, OptimizerConfig, OptimizerKind, ReplicaStore, Slot};

/// Options of gradient tracking.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GradientTrackingConfig {
    /// The mixing matrix: `metropolis` (default) or `uniform`, as D-PSGD's.
    #[serde(default)]
    pub weights: MixingWeights,
    /// `adapt-then-combine` (default; DSGT, `x ← W(x − α y)`) or `combine-then-adapt`
    /// (DIGing, `x ← W x − α y`).
    #[serde(default = "adapt_then_combine")]
    pub update: UpdateOrder,
}

fn adapt_then_combine() -> UpdateOrder {
    UpdateOrder::AdaptThenCombine
}

impl Default for GradientTrackingConfig {
    fn default() -> Self {
        GradientTrackingConfig {
            weights: MixingWeights::default(),
            update: adapt_then_combine(),
        }
    }
}

impl GradientTrackingConfig {
    /// Checks the options against the topology: a static, connected graph (the undirected
    /// graphs of [`Topology`] give a symmetric, doubly stochastic `W`).
    pub(crate) fn check(&self, topology: &Topology, path: &str) -> Result<(), ConfigError> {
        if topology.is_time_varying() {
            return Err(ConfigError::new(
                "topology.kind",
                format!("gradient tracking ({path}) mixes with a fixed doubly stochastic matrix, but this topology is a time-varying schedule"),
            )
            .hint("use a static undirected topology (ring, torus, exponential, …); Push-DIGing is the method for time-varying directed graphs"));
        }
        if !topology.is_connected() {
            return Err(ConfigError::new(
                "topology.kind",
                format!(
                    "gradient tracking ({path}) needs a connected topology; this one has components {}",
                    topology.describe_components()
                ),
            )
            .hint("on a disconnected graph each component tracks its own average gradient"));
        }
        Ok(())
    }
}

/// A worker's message: its model and its tracker, copies taken when sent.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Pair {
    /// `x_j^k`.
    pub model: MsgId,
    /// `y_j^k`.
    pub tracker: MsgId,
}

impl Payload for Pair {
    fn release(self, store: &mut dyn ReplicaStore) {
        store.release_msg(self.model);
        store.release_msg(self.tracker);
    }
}

/// Events of gradient tracking: the exchange's, a message being a [`Pair`].
pub type Event = neighbours::Event<Pair>;

/// The trackers of a gradient-tracking method (DSGT and DIGing here, Push-DIGing in
/// [`super::push_diging`]): `n` store rows `y_i` after the workers', and each worker's latest
/// gradient, `g_i(x_i^k)`, which its tracker holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Trackers {
    /// The first tracker row (worker `i`'s is `first + i`).
    first: usize,
    last: Vec<Option<GradId>>,
}

impl Trackers {
    /// The trackers of `n` workers (their rows are added by [`Trackers::start`]).
    pub fn new(n: usize) -> Self {
        Trackers {
            first: 0,
            last: vec![None; n],
        }
    }

    /// Adds the tracker rows, zero until each worker's first gradient is tracked
    /// (`y_i⁰ = g_i(x_i⁰)`).
    pub fn start<E>(&mut self, cx: &mut Ctx<'_, '_, E>) {
        let n = self.last.len();
        self.first = cx.world.store.add_rows(n);
        for w in 0..n {
            let y = self.row(w);
            cx.world.store.mix(y, &[(Slot::Row(y), 0.0)]);
        }
    }

    /// Worker `w`'s tracker row `y_w` (valid once the run started).
    pub fn row(&self, w: usize) -> usize {
        self.first + w
    }

    /// Worker `w`'s gradient at its current model, once computed.
    pub fn last(&self, w: usize) -> Option<GradId> {
        self.last[w]
    }

    /// `y_w ← y_w + g − g_old`, `g` kept as the old one, and worker `w`'s step done.
    pub fn track<E>(&mut self, w: usize, g: GradId, cx: &mut Ctx<'_, '_, E>) {
        let y = self.row(w);
        if !cx.world.store.state().is_empty() {
            // Only the row that computed a gradient takes its running statistics (batch norm):
            // a step of rate 0 on the worker's own row moves nothing else.
            cx.world.store.inner().apply_gradient(w, g, 0.0);
        }
        // Raw gradient arithmetic on the tracker: the optimizer is plain SGD (checked), so a
        // step of rate −1 adds g. Adding the new gradient is its one application, measured for
        // staleness; taking the old one out again is not measured a second time.
        cx.world.store.apply_gradient(y, g, -1.0);
        if let Some(old) = self.last[w].replace(g) {
            cx.world.store.inner().apply_gradient(y, old, 1.0);
            cx.world.store.release_gradient(old);
        }
        cx.step_done(w);
    }
}

/// The state machine of gradient tracking.
#[derive(Serialize, Deserialize)]
pub struct GradientTracking {
    order: UpdateOrder,
    /// `(W_ii, [(j, W_ij)])` per worker.
    weights: Vec<(f64, Vec<(usize, f64)>)>,
    exchange: Exchange<Pair>,
    trackers: Trackers,
}

impl GradientTracking {
    /// A new instance on `topology`'s graph.
    pub fn new(cfg: &GradientTrackingConfig, topology: &Topology) -> Self {
        let n = topology.len();
        let neighbors: Vec<Vec<usize>> = (0..n).map(|i| topology.neighbors(i).to_vec()).collect();
        GradientTracking {
            order: cfg.update,
            weights: mixing_weights(cfg.weights, topology),
            exchange: Exchange::new(neighbors, SendsAt::Ready),
            trackers: Trackers::new(n),
        }
    }

    /// Worker `w`'s tracker row `y_w` (valid once the run started).
    pub fn tracker_row(&self, w: usize) -> usize {
        self.trackers.row(w)
    }

    /// Worker `w`'s gradient at its current model, once computed: the `g_i(x_i^k)` its tracker
    /// holds.
    pub fn last_gradient(&self, w: usize) -> Option<GradId> {
        self.trackers.last(w)
    }

    /// Worker `w`'s iteration: exchanges completed.
    pub fn iteration(&self, w: usize) -> u64 {
        self.exchange.iteration(w)
    }

    /// Whether worker `w` has its tracker of its iteration and has sent it.
    pub fn has_sent(&self, w: usize) -> bool {
        self.exchange.is_ready(w)
    }

    fn send(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let bytes = cx.world.net.payload_bytes(2 * cx.world.store.num_params());
        let y = self.tracker_row(w);
        self.exchange.send(w, bytes, cx, |_, cx| Pair {
            model: cx.world.store.new_msg(&[(Slot::Row(w), 1.0)]),
            tracker: cx.world.store.new_msg(&[(Slot::Row(y), 1.0)]),
        });
    }
}

impl ExchangeMethod for GradientTracking {
    const MESSAGE: &'static str = "model and tracker";

    fn prepare(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        self.trackers.start(cx);
    }

    fn computed(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let g = self.exchange.take_gradient(w);
        self.trackers.track(w, g, cx);
        self.exchange.set_ready(w);
        self.send(w, cx);
    }

    fn combine(&mut self, w: usize, pairs: Vec<Pair>, cx: &mut Ctx<'_, '_, Event>) {
        let alpha = cx.lr_for(w);
        let y = self.tracker_row(w);
        let (wii, row) = &self.weights[w];
        // Adapt-then-combine: x_w ← Σ_j W_wj (x_j − α y_j); combine-then-adapt:
        // x_w ← Σ_j W_wj x_j − α y_w. Either reads the trackers before they are mixed.
        let atc = self.order == UpdateOrder::AdaptThenCombine;
        let own = if atc { -alpha * wii } else { -alpha };
        let mut x_terms = vec![(Slot::Row(w), *wii), (Slot::Row(y), own)];
        let mut y_terms = vec![(Slot::Row(y), *wii)];
        for (p, &(_, wij)) in pairs.iter().zip(row) {
            x_terms.push((Slot::Msg(p.model), wij));
            if atc {
                x_terms.push((Slot::Msg(p.tracker), -alpha * wij));
            }
            y_terms.push((Slot::Msg(p.tracker), wij));
        }
        cx.world.store.mix(w, &x_terms);
        cx.world.store.mix(y, &y_terms);
        for p in pairs {
            p.release(&mut cx.world.store);
        }
    }
}

exchange_algorithm!(GradientTracking, exchange: Pair);

/// Why a method that needs plain SGD (`why` says what for) refuses `optimizer`, naming the
/// field: gradient tracking's tracker takes raw gradients through the store's step, which only
/// plain SGD leaves raw; exact diffusion's correction assumes `ψ = x − α g`.
pub(crate) fn plain_sgd(
    optimizer: &OptimizerConfig,
    why: &str,
) -> Result<(), (&'static str, String)> {
    if optimizer.kind != OptimizerKind::Sgd {
        return Err((
            "kind",
            format!(
                "runs plain SGD steps ({why}), not {}",
                optimizer.kind.name()
            ),
        ));
    }
    if optimizer.momentum != 0.0 {
        return Err((
            "momentum",
            format!(
                "runs plain SGD steps ({why}), but momentum = {}",
                optimizer.momentum
            ),
        ));
    }
    if optimizer.weight_decay != 0.0 {
        return Err((
            "weight_decay",
            format!(
                "runs plain SGD steps ({why}), but weight_decay = {}",
                optimizer.weight_decay
            ),
        ));
    }
    if optimizer.clip_norm.is_some() {
        return Err((
            "clip_norm",
            format!("runs plain SGD steps ({why}): clipping would change them"),
        ));
    }
    Ok(())
}

impl AlgorithmSpec for GradientTrackingConfig {
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        self.check(setup.topology, setup.path)
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
                "gradient tracking has no recovery protocol: the messages sent to a crashed worker \
                 are dropped, so on its return it would wait for them for ever",
            ),
            _ => Ok(()),
        }
    }

    fn build(&self, _kind: &'static str, world: &World<'_>) -> crate::Result<Box<dyn Runnable>> {
        Ok(Box::new(GradientTracking::new(self, &world.topology)))
    }
}
