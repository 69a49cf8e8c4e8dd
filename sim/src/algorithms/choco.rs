//! CHOCO-SGD: decentralized SGD gossiping compressed differences of public copies.
//!
//! Koloskova, Stich & Jaggi, "Decentralized Stochastic Optimization and Gossip Algorithms with
//! Compressed Communication", ICML 2019 (arXiv:1902.00340), Algorithm 1, in the memory-efficient
//! form of its appendix (each node keeps its own public copy `x̂_i` and `s_i = Σ_j W_ij x̂_j`
//! instead of every neighbour's copy), as the reference code (`epfml/ChocoSGD`) does. The
//! workers sit on a static undirected graph with the mixing matrix of D-PSGD (`weights`,
//! [`super::dpsgd`]); `Q` is the entry's `compression` ([`crate::compress`]) and `γ` its
//! `consensus_lr`:
//!
//! ```text
//! initially x̂_i = 0, s_i = 0 (every node)
//! worker i, iteration t:
//!     compute g_i at x_i;  x_i ← optimizer step with g_i             (x_i^{t+½})
//!     q_i ← Q(x_i − x̂_i);  x̂_i ← x̂_i + q_i;  s_i ← s_i + W_ii q_i
//!     send q_i to every neighbour                                      (compressed on the wire)
//!     when every neighbour's q_j of iteration t has arrived:
//!         s_i ← s_i + Σ_j W_ij q_j
//!         x_i ← x_i + γ (s_i − x̂_i)                                    (= x_i + γ Σ_j W_ij (x̂_j − x̂_i))
//! ```
//!
//! `Q` compresses each parameter tensor on its own ([`ChocoScope::Tensor`], the default, as
//! the reference's `dl_code/pcode/optim/parallel_choco.py` does; the store's
//! [`ReplicaStore::tensors`]) and never sends running statistics, or the whole row
//! ([`ChocoScope::Model`]).
//!
//! **Schedules.** The loop above is the paper's: a step waits for its own exchange. With
//! `overlap` it is the reference's `ParallelCHOCO`: `q_i` is computed and sent as iteration `t`
//! begins, from the model its gradient is computed at, and the gossip step waits for the
//! neighbours' `q_j` of `t` once the optimizer step is taken, so the exchange runs beside the
//! gradient (D-PSGD combine-then-adapt's synchrony, [`SendsAt::Begin`]).
//!
//! Every node adds the same `q_j` to its view of `x̂_j`, so all views of a public copy agree
//! iteration by iteration, and `s_i` is `Σ_j W_ij x̂_j` over the copies of the iteration `i` has
//! gossiped. A message carries `q_i` only: its size is the compressor's on the wire, whatever the
//! values. Synchrony is D-PSGD's adapt-then-combine: a worker waits only for its neighbours'
//! messages of its own iteration, neighbours are at most one iteration apart, and it cannot
//! deadlock.
//!
//! **Invariant** (the paper's Lemma on averages): with a symmetric, doubly stochastic `W`, the
//! gossip steps of an iteration sum to zero over the nodes, `Σ_i γ Σ_j W_ij (x̂_j − x̂_i) = 0`, so
//! `Σ_i x_i` moves only by the optimizer steps once every node has gossiped that iteration. With
//! `Q` the identity (`top-k` with `fraction = 1`) and `γ = 1` it is D-PSGD adapt-then-combine.
//!
//! **Under faults**: as D-PSGD, there is no recovery protocol. A lost message is never replaced
//! and a crashed worker sends nothing more: its neighbours wait for good, the wait spreads, and
//! the run stops as stalled, naming the waits. A crash with `rejoin_after_s` is refused.
//!
//! **Host work** ([`crate::cluster::host`]), per worker and iteration with `d` parameters and
//! `k` neighbours: `11d` values touched to compress and fold in its own difference before its
//! sends, and `(k + 6)d` for the neighbours' differences and the consensus step before its next
//! iteration.
//!
//! **Activities** ([`crate::record`]): computing, then blocked while a neighbour's message of the
//! iteration is not sent yet (the wait attributed to that neighbour), then communicating.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::dpsgd::{MixingWeights, mixing_weights};
use super::neighbours::{self, Exchange, ExchangeMethod, SendsAt, exchange_algorithm};
use crate::algorithm::{Ctx, World};
use crate::algorithms::{AlgorithmSpec, Runnable, Setup};
use crate::clock::rng::{Stream, StreamKind, stream};
use crate::cluster::HostWork;
use crate::compress::Compression;
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport};
use crate::net::topology::Topology;
use crate::store::{MsgId, ReplicaStore, Slot};

/// Options of CHOCO-SGD.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChocoConfig {
    /// The consensus step size `γ`, in `(0, 1]`.
    pub consensus_lr: f64,
    /// The compressor `Q` of the gossiped differences.
    pub compression: Compression,
    /// `metropolis` (default) or `uniform`, as D-PSGD's.
    #[serde(default)]
    pub weights: MixingWeights,
    /// What `Q` compresses: each parameter tensor on its own (`"tensor"`, the default, as the
    /// reference code does) or the whole row as one vector (`"model"`).
    #[serde(default)]
    pub scope: ChocoScope,
    /// `false` (default): the paper's Algorithm 1, a step waits for its own exchange
    /// (compute + communication). `true`: the reference code's `ParallelCHOCO`, whose exchange
    /// overlaps the next gradient (about max(compute, communication)).
    #[serde(default)]
    pub overlap: bool,
}

/// What CHOCO-SGD's compressor sees.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChocoScope {
    /// Each parameter tensor on its own, with its own `k`, norm or scale; the running statistics
    /// are not gossiped (the reference's `parallel_choco.py` compresses each tensor of
    /// `param_groups`, which holds parameters, not buffers).
    #[default]
    Tensor,
    /// The whole row as one vector, running statistics included (the reference's convex code,
    /// and dasim before it compressed per tensor).
    Model,
}

impl ChocoConfig {
    /// Checks the options against the topology.
    pub(crate) fn check(&self, topology: &Topology, path: &str) -> Result<(), ConfigError> {
        if !(self.consensus_lr > 0.0 && self.consensus_lr <= 1.0) {
            return Err(ConfigError::new(
                &format!("{path}.consensus_lr"),
                format!("consensus_lr must be in (0, 1], got {}", self.consensus_lr),
            )
            .hint("γ = 1 without compression is D-PSGD; under aggressive compression CHOCO-SGD needs γ well below 1 (the paper tunes it, e.g. 0.05 to 0.5)"));
        }
        let at = format!("{path}.compression");
        self.compression.check(&at)?;
        if let Compression::PowerSgd { .. } = self.compression {
            return Err(ConfigError::new(
                &format!("{at}.kind"),
                "CHOCO-SGD gossips compressed vectors; powersgd compresses an all-reduce",
            )
            .hint(
                "use top-k, random-k, sign or qsgd here, or powersgd with kind = \"allreduce\"",
            ));
        }
        if topology.is_time_varying() {
            return Err(ConfigError::new(
                "topology.kind",
                format!("CHOCO-SGD ({path}) gossips over a static graph, but this topology is a time-varying schedule"),
            )
            .hint("use a static topology (ring, torus, exponential, …)"));
        }
        if !topology.is_connected() {
            return Err(ConfigError::new(
                "topology.kind",
                format!(
                    "CHOCO-SGD ({path}) needs a connected topology; this one has components {}",
                    topology.describe_components()
                ),
            ));
        }
        Ok(())
    }
}

/// Events of CHOCO-SGD: the exchange's, a message being a decoded compressed difference `q`.
pub type Event = neighbours::Event;

/// The state machine of CHOCO-SGD.
#[derive(Serialize, Deserialize)]
pub struct Choco {
    #[serde(with = "crate::compress::stored")]
    compression: Compression,
    gamma: f64,
    weights: Vec<(f64, Vec<(usize, f64)>)>,
    /// The differences exchanged with the neighbours; ready: stepped and sent its `q`.
    exchange: Exchange,
    /// Each node's public copy `x̂_i` and `s_i = Σ_j W_ij x̂_j`.
    hat: Vec<Option<MsgId>>,
    s: Vec<Option<MsgId>>,
    /// Each node's stream, for random compressors.
    rngs: Vec<Stream>,
    /// The tensors `Q` compresses one by one (`scope = "tensor"`; read from the store at the
    /// start); `None`: the whole row.
    tensors: Option<Vec<Range<usize>>>,
    /// The reference's schedule: a message goes out as the gradient it overlaps begins.
    overlap: bool,
    /// Payload bytes of one message.
    bytes: u64,
}

impl Choco {
    /// A new instance on `topology`'s graph, its streams from `seed`.
    pub fn new(cfg: &ChocoConfig, topology: &Topology, seed: u64) -> Self {
        let n = topology.len();
        Choco {
            compression: cfg.compression.clone(),
            gamma: cfg.consensus_lr,
            weights: mixing_weights(cfg.weights, topology),
            exchange: Exchange::new(
                (0..n).map(|i| topology.neighbors(i).to_vec()).collect(),
                if cfg.overlap {
                    SendsAt::Begin
                } else {
                    SendsAt::Ready
                },
            ),
            hat: vec![None; n],
            s: vec![None; n],
            rngs: (0..n)
                .map(|i| stream(seed, StreamKind::Algorithm, i as u64))
                .collect(),
            tensors: (cfg.scope == ChocoScope::Tensor).then(Vec::new),
            overlap: cfg.overlap,
            bytes: 0,
        }
    }

    /// The mixing weights of worker `i`: `(W_ii, [(j, W_ij)])`.
    pub fn weights(&self, i: usize) -> &(f64, Vec<(usize, f64)>) {
        &self.weights[i]
    }

    /// Node `i`'s public copy `x̂_i`, a message buffer of the store.
    pub fn public_copy(&self, i: usize) -> MsgId {
        self.hat[i].expect("started")
    }

    /// Node `i`'s `s_i = Σ_j W_ij x̂_j`, a message buffer of the store.
    pub fn neighbourhood_sum(&self, i: usize) -> MsgId {
        self.s[i].expect("started")
    }

    /// Node `i`'s iteration: gossip steps it has completed.
    pub fn iteration(&self, i: usize) -> u64 {
        self.exchange.iteration(i)
    }

    /// Whether node `i` has sent its difference of its current iteration: once stepped, or
    /// (`overlap`) as the iteration begins.
    pub fn has_sent(&self, i: usize) -> bool {
        self.overlap || self.exchange.is_ready(i)
    }

    /// Whether node `i` has taken the optimizer step of its current iteration (it then waits
    /// for its neighbours' differences).
    pub fn has_stepped(&self, i: usize) -> bool {
        self.exchange.is_ready(i)
    }

    /// Payload bytes of one message (the compressor's wire size).
    pub fn message_bytes(&self) -> u64 {
        self.bytes
    }

    /// `Σ weight · slot` into buffer `*buf`, freeing the old one.
    fn update(buf: &mut Option<MsgId>, terms: &[(Slot, f64)], cx: &mut Ctx<'_, '_, Event>) {
        let new = cx.world.store.new_msg(terms);
        if let Some(old) = buf.replace(new) {
            cx.world.store.release_msg(old);
        }
    }

    /// `q_i = Q(x_i − x̂_i)`, a new buffer.
    fn compress(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) -> MsgId {
        let hat = self.public_copy(w);
        let diff = cx
            .world
            .store
            .new_msg(&[(Slot::Row(w), 1.0), (Slot::Msg(hat), -1.0)]);
        if !cx.world.store.computes() {
            return diff;
        }
        let mut values = cx.world.store.msg_values(diff);
        cx.world.store.release_msg(diff);
        let rng = &mut self.rngs[w];
        match &self.tensors {
            Some(tensors) => self.compression.apply_to_tensors(&mut values, tensors, rng),
            None => self.compression.apply(&mut values, rng),
        }
        cx.world.store.msg_from_values(&values)
    }

    /// The optimizer step of `w`'s iteration, with the gradient it computed.
    fn step(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let g = self.exchange.take_gradient(w);
        let lr = cx.lr_for(w);
        cx.world.store.apply_gradient(w, g, lr);
        cx.world.store.release_gradient(g);
        cx.step_done(w);
    }

    /// `q_w ← Q(x_w − x̂_w)`, into `x̂_w` and `s_w`, and sent to every neighbour.
    fn send(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let q = self.compress(w, cx);
        // q formed (x and x̂ read, q written), compressed (read and written), then folded into
        // x̂ and s (each read with q and written): 11 values per parameter, before the sends.
        let params = cx.world.store.num_params() as u64;
        cx.host_work(w, HostWork::touch(11 * params));
        let hat = self.public_copy(w);
        Self::update(
            &mut self.hat[w],
            &[(Slot::Msg(hat), 1.0), (Slot::Msg(q), 1.0)],
            cx,
        );
        let s = self.neighbourhood_sum(w);
        let self_weight = self.weights[w].0;
        Self::update(
            &mut self.s[w],
            &[(Slot::Msg(s), 1.0), (Slot::Msg(q), self_weight)],
            cx,
        );
        self.exchange.send(w, self.bytes, cx, |_, cx| {
            cx.world.store.new_msg(&[(Slot::Msg(q), 1.0)])
        });
        cx.world.store.release_msg(q);
    }
}

impl ExchangeMethod for Choco {
    const MESSAGE: &'static str = "compressed difference";

    fn prepare(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        let p = cx.world.store.num_params();
        let v = cx.world.net.value_bytes();
        let bytes = match &mut self.tensors {
            Some(tensors) => {
                *tensors = cx.world.store.tensors();
                let sizes: Vec<usize> = tensors.iter().map(|t| t.len()).collect();
                self.compression.payload_bytes_of(&sizes, v)
            }
            None => self.compression.payload_bytes(p, v),
        };
        self.bytes = cx.world.net.scaled_payload(bytes);
        for w in 0..self.exchange.len() {
            // x̂_i = s_i = 0, as the paper initializes them.
            self.hat[w] = Some(cx.world.store.new_msg(&[(Slot::Row(w), 0.0)]));
            self.s[w] = Some(cx.world.store.new_msg(&[(Slot::Row(w), 0.0)]));
        }
    }

    /// `w` begins an iteration: under `overlap` it sends first, from the model its gradient
    /// is computed at, and the exchange runs beside the computation.
    fn begin(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        if self.overlap {
            self.send(w, cx);
        }
        self.exchange.begin(w, Event::ComputeDone(w), cx);
    }

    fn computed(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        self.step(w, cx);
        // Ready before sending: a neighbour waiting for this message then counts it as sent.
        self.exchange.set_ready(w);
        if !self.overlap {
            self.send(w, cx);
        }
    }

    fn combine(&mut self, w: usize, msgs: Vec<MsgId>, cx: &mut Ctx<'_, '_, Event>) {
        let mut terms = vec![(Slot::Msg(self.neighbourhood_sum(w)), 1.0)];
        let row = &self.weights[w].1;
        terms.extend(
            msgs.iter()
                .zip(row)
                .map(|(&m, &(_, wij))| (Slot::Msg(m), wij)),
        );
        Self::update(&mut self.s[w], &terms, cx);
        for m in msgs {
            cx.world.store.release_msg(m);
        }
        let (s, hat) = (self.neighbourhood_sum(w), self.public_copy(w));
        let g = self.gamma;
        cx.world.store.mix(
            w,
            &[(Slot::Row(w), 1.0), (Slot::Msg(s), g), (Slot::Msg(hat), -g)],
        );
        // s updated from the k messages (k + 1 read, one written), then the consensus step
        // (x, s and x̂ read, x written): k + 6 values per parameter, before the next iteration.
        let params = cx.world.store.num_params() as u64;
        let k = row.len() as u64;
        cx.host_work(w, HostWork::touch((k + 6) * params));
    }
}

exchange_algorithm!(Choco, exchange: MsgId);

impl AlgorithmSpec for ChocoConfig {
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        self.check(setup.topology, setup.path)
    }

    fn buffers_per_worker(&self) -> usize {
        // x̂_i and s_i.
        2
    }

    fn fault_support(&self, _kind: &'static str, fault: FaultKind) -> FaultSupport {
        match fault {
            FaultKind::Rejoin => Err(
                "CHOCO-SGD has no recovery protocol: the differences sent to a crashed worker are \
                 dropped, so on its return its copies of its neighbours' public models would be \
                 wrong for ever (leave out rejoin_after_s to see the stall)",
            ),
            _ => Ok(()),
        }
    }

    fn build(&self, _kind: &'static str, world: &World<'_>) -> crate::Result<Box<dyn Runnable>> {
        let alg = Choco::new(self, &world.topology, world.seed);
        Ok(Box::new(alg))
    }
}
