//! Exact diffusion and D²: decentralized SGD with a correction step that removes the consensus
//! bias of D-PSGD on heterogeneous data, at D-PSGD's communication (one model per neighbour per
//! iteration).
//!
//! Yuan, Ying, Zhao & Sayed, "Exact diffusion for distributed optimization and learning — Part I:
//! algorithm development", IEEE Trans. Signal Process. 67(3), 2019 (arXiv 1702.05122), Algorithm 1;
//! Tang, Lian, Yan, Zhang & Liu, "D²: Decentralized training over decentralized data", ICML 2018,
//! Algorithm 1. On a static undirected graph with a symmetric, doubly stochastic `W` (the
//! `weights` of [D-PSGD](super::dpsgd)):
//!
//! ```text
//! ψ_i⁰ = x_i⁰
//! worker i, iteration k (x_i^k and ψ_i^k held):
//!     compute g_i at x_i^k                                       (compute time)
//!     ψ_i^{k+1} = x_i^k − α g_i(x_i^k)                           (adapt)
//!     φ_i^{k+1} = ψ_i^{k+1} + x_i^k − ψ_i^k                      (correct)
//!     send φ_i^{k+1} to every neighbour                          (one model)
//!     when every neighbour's φ of iteration k has arrived:
//!         x_i^{k+1} = Σ_j M_ij φ_j^{k+1}                         (combine)
//! ```
//!
//! The two methods differ only in the combination matrix `M`: exact diffusion combines with
//! `W̄ = (I + W)/2`, whose eigenvalues lie in `(0, 1]` for every symmetric doubly stochastic `W`;
//! D² combines with `W` itself, which its analysis allows only when `W`'s smallest eigenvalue is
//! above `−1/3` (Tang et al., Assumption 1): dasim computes the spectrum before the
//! run and refuses a `W` that fails it (a ring of even length with Metropolis weights sits
//! exactly at `−1/3`). D²'s own form, `x^{k+½} = 2x^k − x^{k−1} − α g(x^k) + α g(x^{k−1})`
//! then `x^{k+1} = W x^{k+½}`, is the correction written out (`x^k − α g(x^k)` is `ψ^{k+1}`,
//! `x^{k−1} − α g(x^{k−1})` is `ψ^k`), so dasim runs one state machine for both.
//!
//! **Rows.** Each worker keeps its correction `d_i = x_i − ψ_i` as a store row after the
//! workers' (`n` rows), rather than `ψ_i`: with `d_i^k = x_i^k − ψ_i^k` the iteration is
//!
//! ```text
//!     ψ_i ← x_i − α g_i(x_i)                 (the worker's row; the gradient's one application)
//!     φ_i = ψ_i + d_i;  d_i ← φ_i − ψ_i      (φ as sent, its rounding kept in d_i)
//!     d_i ← M_ii d_i + Σ_{j≠i} M_ij (φ_j − ψ_i)
//!     x_i ← ψ_i + d_i                        (= Σ_j M_ij φ_j)
//! ```
//!
//! the same iterates in exact arithmetic. The reason is f32: the invariant below rests on the
//! mixing keeping `Σ_i d_i = 0` exactly, and the papers' form (`ψ` stored, `x ← Σ_j M_ij φ_j`)
//! rounds each combination at the scale of the model, `2^−24·|x|`, the same error every
//! iteration near the fixed point, so `Σ_i (x_i − ψ_i)` drifts linearly and the mean model with
//! it: on the least-squares claim (scenarios/claims/bias-correction-convex.toml) it reached
//! `f − f* = 8·10⁻¹⁰` after 120 iterations, then climbed to `1.9·10⁻⁷` by 2,000. Here every
//! term added into `d` is a difference of nearby values (`φ_j − ψ_i`, exact or rounded at their
//! small scale), and the model's own rounding (`x ← ψ + d`) is not integrated: the gradient
//! pulls it back. The gradient is applied by the store's optimizer step (`ψ = x − α g` is an SGD
//! step), so the run's optimizer must be plain SGD, as in both papers; anything else is refused
//! before the run. Its staleness is D-PSGD's: row staleness 0, global staleness the other
//! workers' gradients applied meanwhile.
//!
//! **Invariant.** Mixing with a doubly stochastic matrix keeps the sum of the `φ`s, so
//! `Σ_i x_i^{k+1} = Σ_i ψ_i^{k+1} + Σ_i x_i^k − Σ_i ψ_i^k`: the corrections sum to zero after
//! every iteration (the mean model equals the mean `ψ`), and
//! `x̄^{k+1} = x̄^k − α·(1/n) Σ_i g_i(x_i^k)`, centralized SGD on the workers' mean gradient.
//!
//! **Under faults**: as D-PSGD ([`super::neighbours`]): no recovery protocol; a lost message or
//! a crashed neighbour stalls the exchange, and the run stops as stalled, naming the waits.

use serde::{Deserialize, Serialize};

use super::dpsgd::{MixingWeights, mixing_weights};
use super::gradient_tracking::plain_sgd;
use super::neighbours::{self, Exchange, ExchangeMethod, SendsAt, exchange_algorithm};
use crate::algorithm::{Ctx, World};
use crate::algorithms::{AlgorithmSpec, Runnable, Setup};
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport};
use crate::net::spectral::symmetric_eigenvalues;
use crate::net::topology::Topology;
use crate::store::{MsgId, OptimizerConfig, ReplicaStore, Slot};

/// Options of exact diffusion and D² (`kind = "exact-diffusion"`, `kind = "d2"`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExactDiffusionConfig {
    /// The mixing matrix `W`: `metropolis` (default) or `uniform`, as D-PSGD's.
    #[serde(default)]
    pub weights: MixingWeights,
}

/// The combination matrix of the two methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Combine {
    /// Exact diffusion: `W̄ = (I + W)/2`.
    Halved,
    /// D²: `W`, with `λ_min(W) > −1/3`.
    Plain,
}

impl Combine {
    /// The combination of the kind `exact-diffusion` or `d2`.
    pub fn of_kind(kind: &str) -> Self {
        if kind == "d2" {
            Combine::Plain
        } else {
            Combine::Halved
        }
    }

    fn method(self) -> &'static str {
        match self {
            Combine::Halved => "exact diffusion",
            Combine::Plain => "D²",
        }
    }
}

/// D²'s condition on `W`'s spectrum: its smallest eigenvalue must be above `−1/3`. Values within
/// this margin of `−1/3` are taken as on the boundary (an even ring's Metropolis matrix has
/// `−1/3` exactly, computed to a few ulps).
const D2_MARGIN: f64 = 1e-9;

/// Whether D² accepts a mixing matrix whose smallest eigenvalue is `lambda`: above `−1/3`, by
/// more than rounding.
pub fn d2_accepts(lambda: f64) -> bool {
    lambda > -1.0 / 3.0 + D2_MARGIN
}

impl ExactDiffusionConfig {
    /// The mixing matrix `W` on `topology`, dense and row-major.
    fn dense(&self, topology: &Topology) -> Vec<f64> {
        let n = topology.len();
        let mut w = vec![0.0; n * n];
        for (i, (wii, row)) in mixing_weights(self.weights, topology)
            .into_iter()
            .enumerate()
        {
            w[i * n + i] = wii;
            for (j, wij) in row {
                w[i * n + j] = wij;
            }
        }
        w
    }

    /// The smallest eigenvalue of `W` on `topology`.
    pub fn smallest_eigenvalue(&self, topology: &Topology) -> f64 {
        let n = topology.len();
        symmetric_eigenvalues(self.dense(topology), n)
            .last()
            .copied()
            .unwrap_or(1.0)
    }

    /// Checks the options against the topology: a static, connected graph, and for D² the
    /// spectral condition on `W`.
    pub(crate) fn check(
        &self,
        combine: Combine,
        topology: &Topology,
        path: &str,
    ) -> Result<(), ConfigError> {
        let method = combine.method();
        if topology.is_time_varying() {
            return Err(ConfigError::new(
                "topology.kind",
                format!("{method} ({path}) mixes with a fixed symmetric doubly stochastic matrix, but this topology is a time-varying schedule"),
            )
            .hint("use a static undirected topology (ring, torus, exponential, …); Push-DIGing is the bias-corrected method for time-varying directed graphs"));
        }
        if !topology.is_connected() {
            return Err(ConfigError::new(
                "topology.kind",
                format!(
                    "{method} ({path}) needs a connected topology; this one has components {}",
                    topology.describe_components()
                ),
            )
            .hint("on a disconnected graph each component converges to its own optimum"));
        }
        if combine == Combine::Plain && topology.len() > 1 {
            let lambda = self.smallest_eigenvalue(topology);
            if !d2_accepts(lambda) {
                return Err(ConfigError::new(
                    &format!("{path}.weights"),
                    format!(
                        "D² needs the mixing matrix's smallest eigenvalue above −1/3 (Tang et al. 2018, Assumption 1), but the {} weights on this {}-worker graph have λ_min = {lambda:.6}",
                        match self.weights {
                            MixingWeights::Metropolis => "metropolis",
                            MixingWeights::Uniform => "uniform",
                        },
                        topology.len(),
                    ),
                )
                .hint("use kind = \"exact-diffusion\", which combines with (I + W)/2 (eigenvalues in (0, 1]) on any graph; or a graph whose W satisfies it, such as a ring of odd length"));
            }
        }
        Ok(())
    }
}

/// Events of exact diffusion and D²: the exchange's, a message being a `φ`.
pub type Event = neighbours::Event;

/// The state machine of exact diffusion and D².
#[derive(Serialize, Deserialize)]
pub struct ExactDiffusion {
    combine: Combine,
    /// `(M_ii, [(j, M_ij)])` per worker, `M` the combination matrix.
    weights: Vec<(f64, Vec<(usize, f64)>)>,
    exchange: Exchange,
    /// The first correction row (worker `i`'s `d_i` is `correction + i`).
    correction: usize,
}

impl ExactDiffusion {
    /// A new instance on `topology`'s graph, combining as `combine` says.
    pub fn new(cfg: &ExactDiffusionConfig, combine: Combine, topology: &Topology) -> Self {
        let n = topology.len();
        let neighbors: Vec<Vec<usize>> = (0..n).map(|i| topology.neighbors(i).to_vec()).collect();
        let mut weights = mixing_weights(cfg.weights, topology);
        if combine == Combine::Halved {
            for (wii, row) in &mut weights {
                *wii = 0.5 + 0.5 * *wii;
                for (_, wij) in row {
                    *wij *= 0.5;
                }
            }
        }
        ExactDiffusion {
            combine,
            weights,
            exchange: Exchange::new(neighbors, SendsAt::Ready),
            correction: 0,
        }
    }

    /// Worker `w`'s correction row `d_w = x_w − ψ_w` (valid once the run started).
    pub fn correction_row(&self, w: usize) -> usize {
        self.correction + w
    }

    /// The combination matrix's row of worker `w`: `(M_ww, [(j, M_wj)])`.
    pub fn weights(&self, w: usize) -> &(f64, Vec<(usize, f64)>) {
        &self.weights[w]
    }

    /// Worker `w`'s iteration: exchanges completed.
    pub fn iteration(&self, w: usize) -> u64 {
        self.exchange.iteration(w)
    }

    /// Whether worker `w` has its `φ` of its iteration and has sent it.
    pub fn has_sent(&self, w: usize) -> bool {
        self.exchange.is_ready(w)
    }

    /// Adapt and correct: `ψ_w ← x_w − α g`, `φ_w = ψ_w + d_w`, then send `φ_w`.
    fn adapt(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let g = self.exchange.take_gradient(w);
        let alpha = cx.lr_for(w);
        let d = self.correction_row(w);
        let store = &mut cx.world.store;
        store.apply_gradient(w, g, alpha);
        store.release_gradient(g);
        let phi = store.new_msg(&[(Slot::Row(w), 1.0), (Slot::Row(d), 1.0)]);
        // What the neighbours receive is the rounded φ: the correction is taken from it, so
        // that Σ d stays what the mixing keeps.
        store.mix(d, &[(Slot::Msg(phi), 1.0), (Slot::Row(w), -1.0)]);
        cx.step_done(w);
        self.exchange.set_ready(w);
        let bytes = cx.world.net.payload_bytes(cx.world.store.num_params());
        self.exchange.send(w, bytes, cx, |_, cx| {
            cx.world.store.new_msg(&[(Slot::Msg(phi), 1.0)])
        });
        cx.world.store.release_msg(phi);
    }
}

impl ExchangeMethod for ExactDiffusion {
    const MESSAGE: &'static str = "φ";

    fn prepare(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        let n = self.exchange.len();
        self.correction = cx.world.store.add_rows(n);
        for w in 0..n {
            // ψ⁰ = x⁰: the first correction adds nothing, φ¹ = ψ¹.
            let d = self.correction_row(w);
            cx.world.store.mix(d, &[(Slot::Row(d), 0.0)]);
        }
    }

    fn computed(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        self.adapt(w, cx);
    }

    /// Combine, once every neighbour's `φ` is in: `d_w ← M_ww d_w + Σ_j M_wj (φ_j − ψ_w)`, then
    /// `x_w ← ψ_w + d_w`, which is `Σ_j M_wj φ_j`.
    fn combine(&mut self, w: usize, msgs: Vec<MsgId>, cx: &mut Ctx<'_, '_, Event>) {
        let d = self.correction_row(w);
        let (mww, row) = &self.weights[w];
        let store = &mut cx.world.store;
        let mut terms = vec![(Slot::Row(d), *mww)];
        let mut differences = Vec::with_capacity(msgs.len());
        for (&m, &(_, mwj)) in msgs.iter().zip(row) {
            let delta = store.new_msg(&[(Slot::Msg(m), 1.0), (Slot::Row(w), -1.0)]);
            store.release_msg(m);
            differences.push(delta);
            terms.push((Slot::Msg(delta), mwj));
        }
        store.mix(d, &terms);
        store.mix(w, &[(Slot::Row(w), 1.0), (Slot::Row(d), 1.0)]);
        for delta in differences {
            store.release_msg(delta);
        }
    }
}

exchange_algorithm!(ExactDiffusion, exchange: MsgId);

impl AlgorithmSpec for ExactDiffusionConfig {
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        self.check(Combine::of_kind(setup.kind), setup.topology, setup.path)
    }

    /// The correction row and a difference `φ_j − ψ_i` while combining.
    fn buffers_per_worker(&self) -> usize {
        2
    }

    fn optimizer_support(&self, optimizer: &OptimizerConfig) -> Result<(), (&'static str, String)> {
        plain_sgd(
            optimizer,
            "its correction step takes plain SGD steps, ψ = x − α g",
        )
    }

    fn fault_support(&self, kind: &'static str, fault: FaultKind) -> FaultSupport {
        match fault {
            FaultKind::Rejoin if kind == "d2" => Err(
                "D² has no recovery protocol: the messages sent to a crashed worker are dropped, \
                 so on its return it would wait for them for ever",
            ),
            FaultKind::Rejoin => Err(
                "exact diffusion has no recovery protocol: the messages sent to a crashed worker \
                 are dropped, so on its return it would wait for them for ever",
            ),
            _ => Ok(()),
        }
    }

    fn build(&self, kind: &'static str, world: &World<'_>) -> crate::Result<Box<dyn Runnable>> {
        Ok(Box::new(ExactDiffusion::new(
            self,
            Combine::of_kind(kind),
            &world.topology,
        )))
    }
}
