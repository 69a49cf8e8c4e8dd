//! DeMo: decoupled momentum. Every step each worker adds its gradient to a local momentum,
//! extracts the momentum's fast components (the largest DCT coefficients of every chunk),
//! removes them from the momentum, and all-gathers them; every worker then steps by the sign of
//! what the workers sent. The momentum itself never travels.
//!
//! Peng, Quesnelle & Kingma, "DeMo: Decoupled Momentum Optimization", arXiv:2411.19870 (2024);
//! the reference code is bloc97/DeMo's `demo.py` (`DeMo.step`, `TransformDCT`, `CompressDCT`),
//! which this module follows:
//!
//! ```text
//! every step, worker r (reference: DeMo.step, per parameter tensor)
//!     g_r: its gradient
//!     δ_r ← β·δ_r + η·g_r                           the local momentum (β = compression_decay)
//!     q_r = TopK_chunks(DCT(δ_r))                   k coefficients of every chunk
//!     δ_r ← δ_r − IDCT(q_r)                         the fast components leave the momentum
//! all-gather the q_r                                ring, n − 1 steps of one whole message
//! Q = IDCT(mean over senders of the q_r)            the same on every worker
//! x ← x·(1 − η·λ) − η·sign(Q)                        decoupled weight decay λ, sign-SGD
//! ```
//!
//! Every worker applies the same update, so the replicas stay equal; only the momenta differ.
//! The rate `η` is the `[optimizer]`'s (its schedule too), which must be plain SGD: DeMo is the
//! optimizer, as the reference's `DeMo(torch.optim.SGD)` with `momentum = 0` is; its weight
//! decay `λ` is this entry's `weight_decay`, decoupled as the reference's. Chunks, DCT, top-k
//! and the mean over senders are [`crate::compress::dct`]. Defaults: `chunk = 64`, `top_k = 32`,
//! `compression_decay = 0.999`, the reference's.
//!
//! **Bytes**: a worker's message is its kept coefficients' positions in their chunks (2 bytes;
//! the reference sends `int64`) and values at the network's dtype; the all-gather forwards
//! `n − 1` messages per worker and step. **Where dasim differs**: the compression runs on the
//! host, in `f64`, each worker's δ a store row; each worker is charged `4P` values of host work
//! (its momentum read and written, the decoded update formed and applied).
//!
//! **Under faults** as all-reduce SGD: a crash or a lost message breaks the ring for good and
//! the run stalls; a rejoin is refused.
//!
//! **Invariant** (checked at every step by `tests/demo.rs`): every replica takes the update
//! above, recomputed from the rows and gradients; the replicas stay equal.

use serde::{Deserialize, Serialize};

use super::gradient_tracking::plain_sgd;
use super::ring::{RingRound, RoundEvent, RoundMethod, dispatch, ring_support};
use crate::algorithm::{Algorithm, Ctx, World};
use crate::algorithms::{AlgorithmSpec, Runnable, Setup};
use crate::cluster::HostWork;
use crate::compress::chunked::{ChunkedTopK, Tensor};
use crate::compress::dct::DctTopK;
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport, WorkerFault};
use crate::store::{GradId, OptimizerConfig, ReplicaStore, Slot};

fn default_chunk() -> usize {
    64
}

fn default_top_k() -> usize {
    32
}

fn default_decay() -> f64 {
    0.999
}

/// Options of DeMo.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DemoConfig {
    /// The target chunk side (default 64, the reference's `compression_chunk`).
    #[serde(default = "default_chunk")]
    pub chunk: usize,
    /// DCT coefficients sent per chunk (default 32, the reference's `compression_topk`).
    #[serde(default = "default_top_k")]
    pub top_k: usize,
    /// The momentum's decay `β` (default 0.999, the reference's `compression_decay`).
    #[serde(default = "default_decay")]
    pub compression_decay: f64,
    /// Decoupled weight decay `λ`: `x ← x·(1 − ηλ)` before the step (default 0).
    #[serde(default)]
    pub weight_decay: f64,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig {
            chunk: default_chunk(),
            top_k: default_top_k(),
            compression_decay: default_decay(),
            weight_decay: 0.0,
        }
    }
}

/// Events of DeMo: a worker's gradient computed, a worker's all-gather completed.
pub type Event = RoundEvent;

/// The state machine of DeMo.
#[derive(Serialize, Deserialize)]
pub struct Demo {
    cfg: DemoConfig,
    /// Each worker's gradient, from its step's end to the round's update.
    grads: Vec<Option<GradId>>,
    /// The all-gather ring.
    rounds: RingRound,
    /// The first worker's momentum row (worker `w`'s is `momenta + w`).
    momenta: usize,
    /// The model's tensors, read when the run starts.
    tensors: Vec<Tensor>,
    /// The compressor (rebuilt from `tensors` on resume).
    #[serde(skip)]
    compressor: Option<DctTopK>,
    /// The last round applied, and how many so far.
    applied: Option<u64>,
    updates: u64,
}

impl Demo {
    /// A new instance for `n` workers.
    pub fn new(cfg: &DemoConfig, n: usize) -> Self {
        Demo {
            cfg: cfg.clone(),
            grads: vec![None; n],
            rounds: RingRound::default(),
            momenta: 0,
            tensors: Vec::new(),
            compressor: None,
            applied: None,
            updates: 0,
        }
    }

    /// The first worker's momentum row (worker `w`'s is `momenta_row() + w`).
    pub fn momenta_row(&self) -> usize {
        self.momenta
    }

    /// Updates taken so far (one per step of every worker).
    pub fn updates(&self) -> u64 {
        self.updates
    }

    /// The model's tensors, as the compressor chunks them.
    pub fn tensors(&self) -> &[Tensor] {
        &self.tensors
    }

    fn begin(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        self.grads[w] = Some(cx.start_step(w, Event::ComputeDone(w)));
    }

    fn compressor(&mut self) -> &DctTopK {
        let (chunk, top_k) = (self.cfg.chunk, self.cfg.top_k);
        let tensors = &self.tensors;
        self.compressor
            .get_or_insert_with(|| DctTopK::new(chunk, top_k, tensors))
    }

    /// The round's update, on the host: every worker's momentum and message, the decoded mean,
    /// and `x ← x − η(sign(Q) + λx)` on every replica (each replica's own gradient carries it).
    fn update(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        let n = self.grads.len();
        let lr = cx.lr();
        let (beta, lambda) = (self.cfg.compression_decay, self.cfg.weight_decay);
        let momenta = self.momenta;
        let grads: Vec<GradId> = self
            .grads
            .iter_mut()
            .map(|g| {
                g.take()
                    .expect("every worker's gradient, at its round's update")
            })
            .collect();
        if cx.world.store.computes() {
            self.compressor();
            let compressor = self.compressor.as_ref().expect("built above");
            let store = &mut cx.world.store;
            let mut messages = Vec::with_capacity(n);
            for (w, &g) in grads.iter().enumerate() {
                let grad = store.gradient_values(g);
                let m = store.new_msg(&[(Slot::Row(momenta + w), beta)]);
                let mut delta = store.msg_values(m);
                store.release_msg(m);
                delta.iter_mut().zip(&grad).for_each(|(d, g)| *d += lr * g);
                let message = compressor.compress(&delta);
                let sent = compressor.decode(&[&message], delta.len());
                delta.iter_mut().zip(&sent).for_each(|(d, s)| *d -= s);
                let m = store.msg_from_values(&delta);
                store.mix(momenta + w, &[(Slot::Msg(m), 1.0)]);
                store.release_msg(m);
                messages.push(message);
            }
            let all: Vec<&_> = messages.iter().collect();
            let q = compressor.decode(&all, store.num_params());
            let sign: Vec<f64> = q.iter().map(|v| sign(*v)).collect();
            for (w, &g) in grads.iter().enumerate() {
                let step = if lambda == 0.0 {
                    sign.clone()
                } else {
                    let m = store.new_msg(&[(Slot::Row(w), 1.0)]);
                    let x = store.msg_values(m);
                    store.release_msg(m);
                    sign.iter().zip(&x).map(|(s, x)| s + lambda * x).collect()
                };
                store.set_gradient_values(g, &step);
            }
        }
        let params = cx.world.store.num_params() as u64;
        for (w, g) in grads.into_iter().enumerate() {
            cx.world.store.apply_gradient(w, g, lr);
            cx.world.store.release_gradient(g);
            cx.host_work(w, HostWork::touch(4 * params));
            cx.step_done(w);
        }
        self.updates += 1;
    }
}

/// `torch.sign`: −1, 0 or 1.
fn sign(v: f64) -> f64 {
    if v > 0.0 {
        1.0
    } else if v < 0.0 {
        -1.0
    } else {
        0.0
    }
}

impl RoundMethod<Event> for Demo {
    fn rounds(&mut self) -> &mut RingRound {
        &mut self.rounds
    }

    fn computed(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        self.rounds.join(0, w, cx, Event::RingDone);
    }

    fn ring_done(&mut self, w: usize, round: u64, cx: &mut Ctx<'_, '_, Event>) {
        if self.applied != Some(round) {
            self.update(cx);
            self.applied = Some(round);
        }
        self.begin(w, cx);
    }
}

impl Algorithm for Demo {
    type Event = Event;

    fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        let n = self.grads.len();
        let store = &mut cx.world.store;
        self.momenta = store.add_rows(n);
        for w in 0..n {
            let m = self.momenta + w;
            store.mix(m, &[(Slot::Row(m), 0.0)]);
        }
        self.tensors = Tensor::of(&store.tensors(), &store.matrices());
        let sizes = ChunkedTopK {
            chunk: self.cfg.chunk,
            top_k: Some(self.cfg.top_k),
            bits: None,
            range_sigmas: 1.0,
        };
        let net = &cx.world.net;
        let bytes = net.scaled_payload(sizes.payload_bytes(&self.tensors, net.value_bytes()));
        self.rounds.add_gather(n, bytes);
        for w in 0..n {
            self.begin(w, cx);
        }
    }

    fn handle(&mut self, event: Event, cx: &mut Ctx<'_, '_, Event>) {
        dispatch(self, event, cx);
    }

    fn waiting(&self) -> Vec<String> {
        self.rounds.waiting()
    }

    fn on_fault(&mut self, fault: WorkerFault, cx: &mut Ctx<'_, '_, Event>) {
        if let WorkerFault::Crash(w) = fault {
            if let Some(g) = self.grads[w].take() {
                cx.world.store.release_gradient(g);
            }
            self.rounds.crash(w, cx.now());
        }
    }
}

impl AlgorithmSpec for DemoConfig {
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        let field = |key: &str| setup.at(key);
        if !(1..=256).contains(&self.chunk) {
            return Err(ConfigError::new(
                &field("chunk"),
                format!("chunk = {} is not in 1..=256", self.chunk),
            )
            .hint("chunk is the side of a DCT chunk: 64 cuts a matrix into 64 × 64 blocks (the reference's)"));
        }
        if self.top_k == 0 || self.top_k > self.chunk * self.chunk {
            return Err(ConfigError::new(
                &field("top_k"),
                format!(
                    "top_k = {} is not in 1..={}: a chunk holds at most chunk² coefficients",
                    self.top_k,
                    self.chunk * self.chunk
                ),
            )
            .hint("the reference sends 32 coefficients of every 64 × 64 chunk"));
        }
        if !(0.0..1.0).contains(&self.compression_decay) {
            return Err(ConfigError::new(
                &field("compression_decay"),
                format!(
                    "compression_decay = {} is not in [0, 1)",
                    self.compression_decay
                ),
            )
            .hint("the momentum's decay β in δ ← βδ + ηg (the reference's 0.999; it refuses 1)"));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return Err(ConfigError::new(
                &field("weight_decay"),
                format!("weight_decay = {} must be at least 0", self.weight_decay),
            )
            .hint("DeMo's decoupled weight decay: x ← x·(1 − lr·weight_decay) every step"));
        }
        Ok(())
    }

    fn optimizer_support(&self, optimizer: &OptimizerConfig) -> Result<(), (&'static str, String)> {
        plain_sgd(
            optimizer,
            "DeMo is the optimizer: its sign step at the [optimizer]'s rate; its weight decay is the entry's weight_decay",
        )
    }

    fn optimizer_hint(&self) -> &'static str {
        "give this entry its own [algorithms.optimizer] with kind = \"sgd\", the rate DeMo steps at, and no momentum, weight decay or clipping (DeMo's weight decay is the entry's weight_decay)"
    }

    fn node_progress(&self) -> Result<(), &'static str> {
        Err(
            "its step is one update of every replica, taken when every worker has contributed to the round, so a node's own counter is the global one",
        )
    }

    fn buffers_per_worker(&self) -> usize {
        1
    }

    fn uses_topology(&self) -> bool {
        false
    }

    fn fault_support(&self, _kind: &'static str, fault: FaultKind) -> FaultSupport {
        ring_support(fault)
    }

    fn build(&self, _kind: &'static str, world: &World<'_>) -> crate::Result<Box<dyn Runnable>> {
        Ok(Box::new(Demo::new(self, world.workers())))
    }
}
