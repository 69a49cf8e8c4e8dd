//! DiLoCo: `H` inner steps on every worker, then an outer step on the all-reduced change.
//!
//! Douillard, Feng, Rusu, Chhaparia, Donchev, Kuncoro, Ranzato, Szlam & Shen, "DiLoCo:
//! Distributed Low-Communication Training of Language Models", arXiv:2311.08105 (2023),
//! Algorithm 1; the reference implementations are OpenDiLoCo (Jaghouar, Ong & Hagemann, 2024)
//! and torchft's `DiLoCo`.
//!
//! ```text
//! θ⁽⁰⁾: the global model; every worker starts from it
//! for outer step t = 1, 2, …:
//!     worker i:  θ_i ← θ⁽ᵗ⁻¹⁾                                          (after the first round)
//!                H inner steps of its own optimizer on its shard       (compute time)
//!     Δ⁽ᵗ⁾ = θ⁽ᵗ⁻¹⁾ − (1/n) Σ_i θ_i                                     (ring all-reduce)
//!     θ⁽ᵗ⁾ = OuterOpt(θ⁽ᵗ⁻¹⁾, Δ⁽ᵗ⁾)                                     (outer step)
//! ```
//!
//! The outer optimizer is SGD with momentum, as torch's `SGD(lr = η, momentum = μ, nesterov)`
//! that the paper and both references use: `m ← μ·m + Δ`, then `θ ← θ − η·(Δ + μ·m)` with
//! Nesterov (the default, as the paper: η = 0.7, μ = 0.9) or `θ ← θ − η·m` without. With
//! `η = 1` and `μ = 0` the outer step sets θ to the workers' average: DiLoCo is then local SGD
//! with `h = H` (`tests/diloco.rs` checks it).
//!
//! The inner optimizer is the entry's `optimizer` table, or the scenario's (the paper's is AdamW
//! with gradient clipping: `kind = "adamw"`, `clip_norm = 1.0`); its state (moments, momentum)
//! stays on each worker across outer steps, as in the references. The outer gradient has the
//! model's size, so its all-reduce costs what local SGD's model all-reduce costs: a ring of
//! `2(n−1)` chunks of `ceil(S/n)` bytes ([`super::ring`]). A round waits for the slowest
//! worker, as in the paper: every worker takes its `H` steps, then joins the ring.
//!
//! **Rows.** The global model, the outer momentum `m` and the workers' average are three store
//! rows after the workers' (`add_rows`). Evaluation points measure the global model (as the
//! paper's curves do), so between two outer steps the curve is flat. Running statistics (batch
//! norm) are not parameters: the outer step does not extrapolate them, the global model takes
//! the workers' average of them.
//!
//! **Activities** ([`crate::record`]): a worker computes during its inner steps; at the
//! all-reduce it is blocked until every worker has contributed (the wait attributed to the last
//! contributor), then communicates until the ring completes ([`super::ring::mark`]).
//!
//! **Under faults** (as local SGD, [`super::local_sgd`]): a crashed worker abandons its step, and
//! a crash or a chunk lost on the network breaks the ring for good; the others wait at their
//! next all-reduce and the run stops as stalled. A crash with `rejoin_after_s` is refused.
//!
//! **Host work** ([`crate::cluster::host`]): each worker's outer step and its copy of the new
//! global model, `7d` values touched for `d` parameters, before its next inner step.
//!
//! **Invariant**: after every outer step every worker's row equals the global model.

use serde::{Deserialize, Serialize};

use super::ring::{RingRound, RoundEvent, RoundMethod, dispatch, local_step, ring_support};
use crate::algorithm::{Algorithm, Ctx, World};
use crate::algorithms::{AlgorithmSpec, Runnable, Setup};
use crate::compress::chunked::{ChunkedTopK, Tensor};
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport, WorkerFault};
use crate::store::optim::outer::{self, sgd::OuterSgd};
use crate::store::tracked::Tracked;
use crate::store::{GradId, ReplicaStore, Slot};

pub(crate) fn default_inner_steps() -> u32 {
    500
}

pub(crate) fn default_outer_lr() -> f64 {
    0.7
}

pub(crate) fn default_outer_momentum() -> f64 {
    0.9
}

pub(crate) fn default_nesterov() -> bool {
    true
}

/// Options of DiLoCo.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DilocoConfig {
    /// Inner steps per worker between two outer steps, `H ≥ 1` (default 500, the paper's).
    #[serde(default = "default_inner_steps")]
    pub inner_steps: u32,
    /// The outer learning rate η (default 0.7, the paper's).
    #[serde(default = "default_outer_lr")]
    pub outer_lr: f64,
    /// The outer momentum μ, in `[0, 1)` (default 0.9, the paper's).
    #[serde(default = "default_outer_momentum")]
    pub outer_momentum: f64,
    /// Nesterov momentum in the outer step (default true, the paper's).
    #[serde(default = "default_nesterov")]
    pub nesterov: bool,
}

impl Default for DilocoConfig {
    fn default() -> Self {
        DilocoConfig {
            inner_steps: default_inner_steps(),
            outer_lr: default_outer_lr(),
            outer_momentum: default_outer_momentum(),
            nesterov: default_nesterov(),
        }
    }
}

impl DilocoConfig {
    /// The outer optimizer these options set.
    pub fn outer_sgd(&self) -> OuterSgd {
        OuterSgd {
            lr: self.outer_lr,
            momentum: self.outer_momentum,
            nesterov: self.nesterov,
        }
    }

    /// Checks the options; `path` is the entry's (`algorithms[0]`). Streaming DiLoCo checks its
    /// own copies of them with it ([`super::streaming_diloco`]).
    pub(crate) fn check(&self, path: &str) -> Result<(), ConfigError> {
        if self.inner_steps == 0 {
            return Err(ConfigError::new(
                &format!("{path}.inner_steps"),
                "inner_steps must be at least 1",
            )
            .hint(
                "inner_steps is H, the inner optimizer steps between outer steps (the paper's 500)",
            ));
        }
        outer::check_rate(
            path,
            "outer_lr",
            self.outer_lr,
            "the paper's outer learning rate is 0.7; 1.0 with outer_momentum = 0 is local SGD",
        )?;
        outer::check_momentum(
            path,
            "outer_momentum",
            self.outer_momentum,
            "the paper's outer momentum is 0.9",
        )?;
        Ok(())
    }
}

/// Events of DiLoCo: a worker's gradient computed, a worker's ring all-reduce of its outer
/// gradient completed.
pub type Event = RoundEvent;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct WorkerState {
    grad: Option<GradId>,
    /// Inner steps taken in all.
    step: u64,
    /// Whether it is in the ring (its `H` steps of the round are done).
    reducing: bool,
}

/// The state machine of DiLoCo.
#[derive(Serialize, Deserialize)]
pub struct Diloco {
    cfg: DilocoConfig,
    workers: Vec<WorkerState>,
    /// The ring of the outer gradients.
    rounds: RingRound,
    /// The global model's row; the outer momentum's and the workers' average's follow it.
    global: usize,
    /// The last round whose outer step was taken.
    stepped: Option<u64>,
    /// Outer steps taken.
    outer_steps: u64,
    /// Compressed outer gradients with error feedback (SparseLoCo, MuLoCo); `None`: DiLoCo's.
    #[serde(default)]
    compressed: Option<CompressedOuter>,
}

/// Compressed outer gradients ([`super::sparseloco`], [`super::muloco`]): every worker's error
/// feedback and its compressor.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CompressedOuter {
    /// Chunked top-k and quantization.
    pub compressor: ChunkedTopK,
    /// The error feedback's decay `β`.
    pub error_decay: f64,
    /// The model's tensors (read from the store when the run starts).
    pub tensors: Vec<Tensor>,
    /// The first worker's error row (worker `w`'s is `errors + w`).
    pub errors: usize,
}

impl Diloco {
    /// A new instance for `n` workers.
    pub fn new(cfg: &DilocoConfig, n: usize) -> Self {
        Diloco {
            cfg: cfg.clone(),
            workers: vec![
                WorkerState {
                    grad: None,
                    step: 0,
                    reducing: false,
                };
                n
            ],
            rounds: RingRound::default(),
            global: 0,
            stepped: None,
            outer_steps: 0,
            compressed: None,
        }
    }

    /// DiLoCo on `n` workers whose outer gradients go through `compressor` with error feedback
    /// of decay `error_decay`, all-gathered: SparseLoCo ([`super::sparseloco`]) and MuLoCo
    /// ([`super::muloco`]).
    pub fn compressed(
        cfg: &DilocoConfig,
        n: usize,
        compressor: ChunkedTopK,
        error_decay: f64,
    ) -> Self {
        let mut d = Diloco::new(cfg, n);
        d.compressed = Some(CompressedOuter {
            compressor,
            error_decay,
            tensors: Vec::new(),
            errors: 0,
        });
        d
    }

    /// The error feedback and compressor of SparseLoCo or MuLoCo; `None` for DiLoCo.
    pub fn compressed_outer(&self) -> Option<&CompressedOuter> {
        self.compressed.as_ref()
    }

    /// The global model's row (valid once the run started).
    pub fn global_row(&self) -> usize {
        self.global
    }

    /// Outer steps taken so far.
    pub fn outer_steps(&self) -> u64 {
        self.outer_steps
    }

    /// The outer momentum's row (valid once the run started).
    pub fn momentum_row(&self) -> usize {
        self.global + 1
    }

    fn average_row(&self) -> usize {
        self.global + 2
    }

    fn begin(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        self.workers[w].reducing = false;
        self.workers[w].grad = Some(cx.start_step(w, Event::ComputeDone(w)));
    }

    /// The outer step: the workers' average, the outer gradient `Δ = θ − average`, the
    /// momentum and the global model; then every worker starts again from it. Taken once per
    /// round, when the first worker's ring completes: every worker has contributed and waits
    /// (none computes), so reading their rows then is exact.
    fn outer_step(&mut self, store: &mut Tracked<'_>) {
        let n = self.workers.len();
        let (g, a) = (self.global, self.average_row());
        let compressed = match &self.compressed {
            Some(comp) if store.computes() => {
                compressed_average(comp, g, a, n, store);
                true
            }
            _ => false,
        };
        outer_step_from(&self.cfg, store, g, n, compressed);
        self.outer_steps += 1;
    }
}

/// DiLoCo's outer step on the rows `[g, g + 1, g + 2]` (global model, outer momentum, average):
/// the workers' mean into `g + 2` (unless `compressed`: then `g + 2` already holds `θ − Δ` from
/// the compressed outer gradients), the outer SGD step, the running statistics set to the
/// workers' mean (not extrapolated), and every one of the `n` workers restarted from the global
/// model. Shared with SPARTA's outer steps ([`super::sparta`]).
pub(crate) fn outer_step_from(
    cfg: &DilocoConfig,
    store: &mut Tracked<'_>,
    g: usize,
    n: usize,
    compressed: bool,
) {
    let (m, a) = (g + 1, g + 2);
    let share = 1.0 / n as f64;
    let workers: Vec<(Slot, f64)> = (0..n).map(|i| (Slot::Row(i), share)).collect();
    if !compressed {
        store.mix(a, &workers);
    }
    cfg.outer_sgd().step(store, [g, m, a], None);
    let state = store.state();
    if !state.is_empty() {
        if compressed {
            // `a` held θ − Δ: the running statistics are the workers' plain mean.
            store.mix(a, &workers);
        }
        store.copy_block(g, a, state);
    }
    for w in 0..n {
        store.mix(w, &[(Slot::Row(g), 1.0)]);
    }
}

/// A compressed outer gradient (SparseLoCo, MuLoCo), written as the row `a = θ − Δ` the outer step reads: for every
/// worker `w`, `e_w ← β·e_w + (θ − θ_w)`, `ĉ_w = C(e_w)` (chunked top-k, quantized),
/// `e_w ← e_w − ĉ_w`; then `Δ = (1/n) Σ_w ĉ_w`. Read and written on the host, in the workers'
/// order (so the sum's order is fixed).
fn compressed_average(
    comp: &CompressedOuter,
    g: usize,
    a: usize,
    n: usize,
    store: &mut Tracked<'_>,
) {
    let mut sum: Option<Vec<f64>> = None;
    for w in 0..n {
        let e = comp.errors + w;
        let terms = [
            (Slot::Row(e), comp.error_decay),
            (Slot::Row(g), 1.0),
            (Slot::Row(w), -1.0),
        ];
        let msg = store.new_msg(&terms);
        let mut error = store.msg_values(msg);
        store.release_msg(msg);
        let sent = comp.compressor.compress(&error, &comp.tensors);
        for (x, s) in error.iter_mut().zip(&sent) {
            *x -= s;
        }
        let left = store.msg_from_values(&error);
        store.mix(e, &[(Slot::Msg(left), 1.0)]);
        store.release_msg(left);
        match &mut sum {
            None => sum = Some(sent),
            Some(total) => total.iter_mut().zip(&sent).for_each(|(t, s)| *t += s),
        }
    }
    let mut delta = sum.unwrap_or_default();
    delta.iter_mut().for_each(|d| *d /= n as f64);
    let msg = store.msg_from_values(&delta);
    store.mix(a, &[(Slot::Row(g), 1.0), (Slot::Msg(msg), -1.0)]);
    store.release_msg(msg);
}

impl RoundMethod<Event> for Diloco {
    fn rounds(&mut self) -> &mut RingRound {
        &mut self.rounds
    }

    fn computed(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let g = self.workers[w].grad.take().expect("a gradient in flight");
        local_step(w, g, cx);
        self.workers[w].step += 1;
        if self.workers[w]
            .step
            .is_multiple_of(u64::from(self.cfg.inner_steps))
        {
            self.workers[w].reducing = true;
            self.rounds.join(0, w, cx, Event::RingDone);
        } else {
            self.begin(w, cx);
        }
    }

    fn ring_done(&mut self, w: usize, round: u64, cx: &mut Ctx<'_, '_, Event>) {
        if self.stepped != Some(round) {
            self.outer_step(&mut cx.world.store);
            self.stepped = Some(round);
        }
        // Every worker takes the outer step on its own copy, as in the references.
        let params = cx.world.store.num_params() as u64;
        cx.host_work(w, outer::step_work(outer::sgd::VALUES_TOUCHED, params));
        self.begin(w, cx);
    }
}

impl Algorithm for Diloco {
    type Event = Event;

    fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        let n = self.workers.len();
        let store = &mut cx.world.store;
        // Added rows copy row 0: every worker's initial model, so the global model; the
        // momentum starts at zero.
        self.global = store.add_rows(3);
        let m = self.momentum_row();
        store.mix(m, &[(Slot::Row(m), 0.0)]);
        match &mut self.compressed {
            None => {
                self.rounds.add_model(cx.world);
            }
            Some(comp) => {
                // One error row per worker, from zero.
                comp.errors = store.add_rows(n);
                for w in 0..n {
                    let e = comp.errors + w;
                    store.mix(e, &[(Slot::Row(e), 0.0)]);
                }
                comp.tensors = Tensor::of(&store.tensors(), &store.matrices());
                let net = &cx.world.net;
                let bytes = comp
                    .compressor
                    .payload_bytes(&comp.tensors, net.value_bytes());
                let bytes = net.scaled_payload(bytes);
                self.rounds.add_gather(n, bytes);
            }
        }
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

    fn eval_model(&self) -> Option<Vec<(usize, f64)>> {
        Some(vec![(self.global, 1.0)])
    }

    fn series(&mut self) -> Vec<(&'static str, f64)> {
        vec![("outer_steps", self.outer_steps as f64)]
    }

    fn on_fault(&mut self, fault: WorkerFault, cx: &mut Ctx<'_, '_, Event>) {
        if let WorkerFault::Crash(w) = fault {
            if !self.workers[w].reducing
                && let Some(g) = self.workers[w].grad.take()
            {
                cx.world.store.release_gradient(g);
            }
            self.rounds.crash(w, cx.now());
        }
    }
}

impl AlgorithmSpec for DilocoConfig {
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        self.check(setup.path)
    }

    fn extra_rows(&self) -> usize {
        3
    }

    fn uses_topology(&self) -> bool {
        false
    }

    fn fault_support(&self, _kind: &'static str, fault: FaultKind) -> FaultSupport {
        ring_support(fault)
    }

    fn build(&self, _kind: &'static str, world: &World<'_>) -> crate::Result<Box<dyn Runnable>> {
        Ok(Box::new(Diloco::new(self, world.workers())))
    }
}
