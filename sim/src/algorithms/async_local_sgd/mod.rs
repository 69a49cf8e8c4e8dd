//! Asynchronous Local-SGD: every worker takes `H` inner steps, sends its outer gradient to a
//! server and, without waiting for the others, goes on from the model the server answers with.
//!
//! Liu, Chhaparia, Douillard, Kale, Rusu, Shen, Szlam & Ranzato, "Asynchronous Local-SGD
//! Training for Language Modeling", arXiv:2401.09135 (2024): Algorithm 1 (the asynchronous task
//! scheduling), Algorithm 3 (the Delayed Nesterov outer update, DN) and Eq. 6 (Dynamic Local
//! Updates, DyLU). The reference code is the authors' toy notebook (google-deepmind/asyncdiloco).
//!
//! ```text
//! paper (Algorithm 1)                          dasim
//! server: θ; every worker starts from θ        server row θ, momentum m, buffer Δ; workers at θ₀
//! worker w, given θ (and H_w):                 on the server's model: θ_w ← θ, start ← θ
//!     H_w inner steps of its optimizer          H_w steps, each an optimizer step on row w
//!     g_w = θ_start − θ_w                       push (start, θ_w): one model on the wire
//! server, on g_w (whenever it lands):          on a push, at once, in arrival order:
//!     θ ← OuterOpt(θ, g_w)  (DN below)            the outer update below, t ← t + 1
//!     H_w ← DyLU(v_w)                              H_w from the measured speeds (DyLU)
//!     send θ (and H_w) to w                        reply θ (a model) with H_w (header)
//! ```
//!
//! **The outer update** is SGD with momentum, torch's `SGD(lr = η, momentum = μ, nesterov)` as in
//! DiLoCo ([`super::diloco`]), with the paper's Delayed Nesterov momentum (Algorithm 3, `N =
//! momentum_every`): the `t`-th outer gradient `g_t` to land is added to a buffer `Δ`; on every
//! `N`-th one the momentum takes the buffer's mean and the momentum term is applied; in between
//! only the gradient is, scaled by `1/N`:
//!
//! ```text
//! Δ ← Δ + g_t
//! if t mod N = 0:  m ← μ·m + Δ/N;  θ ← θ − η·(g_t/N + μ·m);  Δ ← 0     (Nesterov)
//! else:            θ ← θ − η·g_t/N                                       (no momentum term)
//! ```
//!
//! Over `N` consecutive updates θ moves by `−η·(Δ/N + μ·m)`, DiLoCo's Nesterov step on the mean
//! of `N` outer gradients. `N` defaults to the number of workers (`momentum_every = "workers"`,
//! the paper's); `N = 1` is the plain Nesterov step on every gradient, `m ← μ·m + g_t`,
//! `θ ← θ − η·(g_t + μ·m)`. The paper's momentum activation `c` (`momentum_activation`, default
//! 0) moves a share `c·μ·m` of the momentum term onto the updates in between
//! ([`crate::store::optim::outer::delayed_nesterov`]). Without Nesterov (`nesterov = false`; the paper
//! defines DN for Nesterov only) dasim applies the heavy-ball term of the momentum *before* the
//! update, `θ ← θ − η·(g_t/N + μ·m_old)`, so that the `N` updates again sum to the synchronous
//! step on the mean (`θ ← θ − η·m`, and with `N = 1` exactly torch's `SGD(nesterov = false)`).
//! With `η = 1`, `μ = 0` and one worker the server's model is the worker's at every push: plain
//! local training (`tests/async_local_sgd.rs` checks it step for step, bit for bit).
//!
//! **Dynamic local updates** (`dynamic_local_steps = true`, Eq. 6): the server answers worker
//! `w` with `H_w = max(1, ⌊H · v_w / v_max⌋)` steps, `v_w` its speed and `v_max` the fastest speed
//! among the workers up. A speed is measured by the worker over its last round, in simulated
//! time: the steps it took over their summed compute time (integer nanoseconds; communication
//! is not counted), sent with the push (header only). Speeds are compared and `H_w` computed in
//! integers (`⌊H·s_w·b_max / (b_w·s_max)⌋`, `s` steps and `b` busy nanoseconds), so the schedule
//! never depends on floating point. A worker with no measurement yet (its first round) takes
//! `H`; so does every worker without DyLU.
//!
//! **The inner optimizer** is the scenario's `[optimizer]` on each worker's row. By default its
//! state (momentum, Adam's moments and step count) carries over from one round to the next, as
//! DiLoCo's does. The authors' notebook builds a new inner optimizer every round and decays each
//! shard's learning rate over that shard's own steps: `inner_reset = true` zeroes the worker's
//! optimizer state as each round begins (from the server's model; the first round starts
//! fresh), and `[optimizer.schedule] progress = "node"` gives each worker a schedule over its
//! own steps.
//!
//! **Messages.** The server is network node `n` (one extra node, its own NIC: the pushes it
//! receives serialize at its downlink). A push carries the outer gradient, the model's size on
//! the wire; the reply carries the server's model, the model's size. dasim forms `g_t = θ_start −
//! θ_w` inside the server's update from two buffers — the model the worker started from (the
//! reply it received, kept as it landed) and its model as pushed — which is the same vector,
//! one model on the wire; written so, the update is one combination of rows and buffers and
//! the reductions above hold bit for bit.
//!
//! **The server never waits.** By default server-side work takes no simulated time: a push is
//! applied the instant it lands and answered at once; pushes landing together are handled in
//! event order. With a host rate in `[cluster]` ([`crate::cluster::host`]) each update touches
//! `8d` values for `d` parameters, and the reply leaves once it is done; updates queue one
//! behind the other.
//! No worker is ever blocked on another: from its push until the reply lands it communicates
//! (its own round trip).
//!
//! **Rows.** The server's model θ, the momentum `m`, the DN buffer `Δ` and a scratch row are four
//! store rows after the workers' (`add_rows`); each worker's inner optimizer state stays on its
//! own row across rounds, as in DiLoCo's references. Evaluation points measure θ. Running
//! statistics (batch norm) are not extrapolated: after an update θ's take the pushing worker's.
//!
//! **Staleness** ([`Algorithm::staleness`]): for every outer gradient applied, the server updates
//! between the one whose model the worker started from and this one.
//!
//! **Under faults** (following the parameter server, [`super::ps`]): lost messages are posted
//! again after the parameter server's default timeout (four round trips of a model on an idle
//! network); one whose link is cut for good is not, and its worker waits for good (the run stalls
//! when nothing else is left). A crashed worker abandons its round (its inner steps are lost,
//! `rounds_abandoned`); the server discards a push that lands while its worker is down
//! (`outer_gradients_dropped`) and goes on with the others, and a crashed worker's speed no
//! longer counts for `v_max`. On rejoin the worker asks the server for its model (header only)
//! and starts a round from it; a reply to a request from before the crash is ignored.
//!
//! **Invariant** (checked at every event by `tests/async_local_sgd.rs`): each outer gradient
//! that lands changes θ, `m` and `Δ` exactly as the update above says, in the event it lands;
//! every worker starts a round from the server's model as sent.
//!
//! **The same protocol** runs FedAsync and FedBuff ([`super::fed`]): a [`ServerRule`] other than
//! Delayed Nesterov replaces the outer update, and `concurrency` limits the clients training.

use serde::{Deserialize, Serialize};

use super::retransmit::{Resend, Retransmit};
use crate::algorithm::{Algorithm, Ctx, StalenessStats};
use crate::algorithms::fed::{FedAsyncConfig, FedAvgConfig, FedBuffConfig};
use crate::clock::rng::{Stream, StreamKind, stream};
use crate::cluster::HostWork;
use crate::engine::SimTime;
use crate::error::ConfigError;
use crate::fault::WorkerFault;
use crate::record::Activity;
use crate::store::optim::outer::{
    self,
    delayed_nesterov::{self, DelayedNesterov},
};
use crate::store::{GradId, MsgId, ReplicaStore, Slot};
use rand::Rng;

mod rounds;

fn default_inner_steps() -> u32 {
    50
}

fn default_outer_lr() -> f64 {
    0.7
}

fn default_outer_momentum() -> f64 {
    0.9
}

fn yes() -> bool {
    true
}

/// `N` of Delayed Nesterov (`momentum_every`): a count, or `"workers"`, the number of workers
/// of the run (the default, the paper's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MomentumEvery {
    /// The number of workers.
    #[default]
    Workers,
    /// This many outer gradients, `N ≥ 1`.
    Count(u32),
}

impl MomentumEvery {
    /// `N` for a run of `workers` workers.
    pub fn of(self, workers: usize) -> u32 {
        match self {
            MomentumEvery::Workers => u32::try_from(workers.max(1)).unwrap_or(u32::MAX),
            MomentumEvery::Count(n) => n,
        }
    }
}

/// In a scenario (TOML, JSON) `"workers"` or the integer; in a checkpoint's binary encoding,
/// which cannot tell a string from an integer, an `Option<u32>` (`None` for `"workers"`).
impl Serialize for MomentumEvery {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let count = match self {
            MomentumEvery::Workers => None,
            MomentumEvery::Count(n) => Some(*n),
        };
        match count {
            _ if !s.is_human_readable() => count.serialize(s),
            None => s.serialize_str("workers"),
            Some(n) => s.serialize_u32(n),
        }
    }
}

impl<'de> Deserialize<'de> for MomentumEvery {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = MomentumEvery;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an integer N ≥ 1 or \"workers\"")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<MomentumEvery, E> {
                u32::try_from(v)
                    .map(MomentumEvery::Count)
                    .map_err(|_| E::custom(format!("momentum_every = {v} is too large")))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<MomentumEvery, E> {
                u64::try_from(v)
                    .map_err(|_| E::custom(format!("momentum_every must be at least 1, not {v}")))
                    .and_then(|v| self.visit_u64(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<MomentumEvery, E> {
                match v {
                    "workers" => Ok(MomentumEvery::Workers),
                    _ => Err(E::custom(format!(
                        "momentum_every is an integer N ≥ 1 or \"workers\", not \"{v}\""
                    ))),
                }
            }
        }
        if !d.is_human_readable() {
            let count = Option::<u32>::deserialize(d)?;
            return Ok(count.map_or(MomentumEvery::Workers, MomentumEvery::Count));
        }
        d.deserialize_any(Visitor)
    }
}

/// Options of asynchronous Local-SGD.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AsyncLocalSgdConfig {
    /// Inner steps per round `H ≥ 1` (default 50, the paper's); with DyLU, the fastest
    /// worker's.
    #[serde(default = "default_inner_steps")]
    pub inner_steps: u32,
    /// The outer learning rate η (default 0.7, DiLoCo's).
    #[serde(default = "default_outer_lr")]
    pub outer_lr: f64,
    /// The outer momentum μ, in `[0, 1)` (default 0.9, DiLoCo's).
    #[serde(default = "default_outer_momentum")]
    pub outer_momentum: f64,
    /// Nesterov momentum in the outer update (default true, the paper's).
    #[serde(default = "yes")]
    pub nesterov: bool,
    /// Delayed Nesterov: the momentum is updated, and its term applied, on every `N`-th outer
    /// gradient only, `N ≥ 1` or `"workers"` (the default, the paper's: the number of workers;
    /// `1` is plain Nesterov on every outer gradient).
    #[serde(default)]
    pub momentum_every: MomentumEvery,
    /// The paper's momentum activation `c ∈ [0, 1/N]`: between two momentum updates each outer
    /// gradient also applies `c·μ·m`, and an `N`-th one `(1 − c·N + c)·μ·m`, so the momentum's
    /// share over `N` updates is the same (default 0, the paper's).
    #[serde(default)]
    pub momentum_activation: f64,
    /// Dynamic local updates: each worker takes `max(1, ⌊H · v_w / v_max⌋)` inner steps, in
    /// proportion to its measured speed (default false: `H` each).
    #[serde(default)]
    pub dynamic_local_steps: bool,
    /// Every round begins with a fresh inner optimizer (its momentum, or Adam's moments and
    /// step count, zeroed), as the authors' notebook builds a new one per round (default false:
    /// each worker's optimizer state carries over from round to round, as DiLoCo's does).
    #[serde(default)]
    pub inner_reset: bool,
}

impl Default for AsyncLocalSgdConfig {
    fn default() -> Self {
        AsyncLocalSgdConfig {
            inner_steps: default_inner_steps(),
            outer_lr: default_outer_lr(),
            outer_momentum: default_outer_momentum(),
            nesterov: true,
            momentum_every: MomentumEvery::Workers,
            momentum_activation: 0.0,
            dynamic_local_steps: false,
            inner_reset: false,
        }
    }
}

impl AsyncLocalSgdConfig {
    /// The outer update these options set for a run of `workers` workers.
    pub fn delayed_nesterov(&self, workers: usize) -> DelayedNesterov {
        DelayedNesterov {
            lr: self.outer_lr,
            momentum: self.outer_momentum,
            nesterov: self.nesterov,
            every: self.momentum_every.of(workers),
            activation: self.momentum_activation,
        }
    }

    pub(crate) fn check(&self, path: &str, workers: usize) -> Result<(), ConfigError> {
        if self.inner_steps == 0 {
            return Err(ConfigError::new(
                &format!("{path}.inner_steps"),
                "inner_steps must be at least 1",
            )
            .hint("inner_steps is H, the inner optimizer steps of a round between two pushes (the paper's 50)"));
        }
        outer::check_rate(
            path,
            "outer_lr",
            self.outer_lr,
            "DiLoCo's outer learning rate is 0.7; 1.0 with outer_momentum = 0 applies each outer gradient whole",
        )?;
        outer::check_momentum(
            path,
            "outer_momentum",
            self.outer_momentum,
            "DiLoCo's outer momentum is 0.9; 0 is outer SGD without momentum",
        )?;
        if self.momentum_every == MomentumEvery::Count(0) {
            return Err(ConfigError::new(
                &format!("{path}.momentum_every"),
                "momentum_every must be at least 1",
            )
            .hint("momentum_every = 1 is plain Nesterov on every outer gradient; the paper's Delayed Nesterov uses the number of workers (\"workers\", the default)"));
        }
        let n = self.momentum_every.of(workers);
        let (c, most) = (self.momentum_activation, 1.0 / f64::from(n.max(1)));
        if !(c.is_finite() && (0.0..=most).contains(&c)) {
            return Err(ConfigError::new(
                &format!("{path}.momentum_activation"),
                format!("momentum_activation must be in [0, 1/N] = [0, {most}] with N = {n}, not {c}"),
            )
            .hint("c = 0 (the default, the paper's) applies the momentum on every N-th outer gradient only; c = 1/N spreads it evenly over the N"));
        }
        Ok(())
    }
}

/// Events of asynchronous Local-SGD.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum Event {
    /// `worker` finished an inner step begun in its life `life` (a step abandoned by a crash is
    /// ignored).
    ComputeDone {
        /// The worker.
        worker: usize,
        /// Its crash count when the step began.
        life: u64,
    },
    /// `worker`'s outer gradient `start − model` reached the server.
    Push {
        /// The worker.
        worker: usize,
        /// The worker's request number this push is.
        round: u64,
        /// The model its round started from.
        start: MsgId,
        /// Its model at the end of the round.
        model: MsgId,
        /// The server's update count when `start` was sent.
        base: u64,
        /// Inner steps of the round.
        steps: u32,
        /// Their summed compute time, nanoseconds.
        busy: u64,
    },
    /// The server's model `msg` (after `version` updates) reached `worker`, with its next
    /// round's inner steps.
    Model {
        /// The worker.
        worker: usize,
        /// The request it answers.
        round: u64,
        /// The model.
        msg: MsgId,
        /// The server's update count when it was sent.
        version: u64,
        /// Inner steps of the worker's next round.
        steps: u32,
    },
    /// A rejoined `worker`'s request for the model reached the server.
    Hello {
        /// The worker.
        worker: usize,
        /// Its request number.
        round: u64,
    },
    /// Under faults: the lost message `id` is posted again.
    Retransmit(u64),
    /// FedAvg: the deadline of the round whose model is version `version`.
    Deadline {
        /// The server's update count when the round opened.
        version: u64,
    },
}

impl Resend for Event {
    fn resend(id: u64) -> Self {
        Event::Retransmit(id)
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct WorkerState {
    grad: Option<GradId>,
    /// Crashes so far.
    life: u64,
    /// Requests for a model so far (pushes and hellos); a model answering an older one is
    /// ignored.
    round: u64,
    /// Whether it computes (else it waits for the server's model, or is down).
    computing: bool,
    /// The model its round started from, and the server's update count then.
    start: Option<MsgId>,
    base: u64,
    /// Inner steps of the round: assigned, done, and their compute time (nanoseconds).
    assigned: u32,
    done: u32,
    busy: u64,
    /// Rounds started.
    rounds: u64,
    /// Why it waits for good: a message of its lost for good.
    cut: Option<String>,
}

/// What the server does with a client's round as it lands: asynchronous Local-SGD's Delayed
/// Nesterov step on the outer gradient, FedAsync's mix or FedBuff's buffer
/// ([`super::fed`]). The protocol around it is the same.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ServerRule {
    /// Asynchronous Local-SGD.
    AsyncLocalSgd(AsyncLocalSgdConfig),
    /// FedAsync.
    FedAsync(FedAsyncConfig),
    /// FedBuff.
    FedBuff(FedBuffConfig),
    /// FedAvg with quorum and deadline barriers (`rounds.rs`).
    FedAvg(FedAvgConfig),
}

impl ServerRule {
    /// `H`, or `E`: the inner steps of a round.
    fn local_steps(&self) -> u32 {
        match self {
            ServerRule::AsyncLocalSgd(c) => c.inner_steps,
            ServerRule::FedAsync(c) => c.local_steps,
            ServerRule::FedBuff(c) => c.local_steps,
            ServerRule::FedAvg(c) => c.local_steps,
        }
    }

    /// Clients training at once, where fewer than every worker (FedAvg: the clients a round
    /// draws); they start drawn from the server's stream, the others idle.
    fn concurrency(&self) -> Option<u32> {
        match self {
            ServerRule::AsyncLocalSgd(_) => None,
            ServerRule::FedAsync(c) => c.concurrency,
            ServerRule::FedBuff(c) => c.concurrency,
            ServerRule::FedAvg(c) => c.clients_per_round,
        }
    }
}

/// The state machine of asynchronous Local-SGD (and, with another [`ServerRule`], of FedAsync
/// and FedBuff).
#[derive(Serialize, Deserialize)]
pub struct AsyncLocalSgd {
    rule: ServerRule,
    workers: Vec<WorkerState>,
    /// The server's model row; the momentum's, the DN buffer's and a scratch row follow it.
    global: usize,
    /// The server's network node.
    node: usize,
    /// Outer updates applied (`t`).
    updates: u64,
    /// Pushes that reached the server (applied, or discarded because their worker was down).
    pushes: u64,
    /// The worker of the last update (FedAvg: of the last push handled, kept or late).
    last: Option<usize>,
    /// Each worker's last measured round: `(steps, busy nanoseconds)`.
    speeds: Vec<Option<(u32, u64)>>,
    stats: StalenessStats,
    /// Under faults: lost messages posted again.
    retransmit: Retransmit<Event>,
    dropped: u64,
    abandoned: u64,
    /// FedBuff: the deltas in the buffer (`k`); FedAvg: the round's.
    buffered: u32,
    /// FedAvg: rounds pushed too late (after their round closed) and their local steps, and
    /// whether a round waits for an idle client to open.
    late: (u64, u64),
    waiting_to_open: bool,
    /// Under `concurrency`: the clients not training, and the server's stream that draws them.
    idle: Vec<usize>,
    draws: Stream,
}

impl AsyncLocalSgd {
    /// A new instance for `n` workers; the server is network node `n`.
    pub fn new(cfg: &AsyncLocalSgdConfig, n: usize) -> Self {
        Self::with_rule(ServerRule::AsyncLocalSgd(cfg.clone()), n, 0)
    }

    /// A new instance for `n` workers whose server follows `rule`, its draws (under
    /// `concurrency`) from `seed`.
    pub fn with_rule(rule: ServerRule, n: usize, seed: u64) -> Self {
        AsyncLocalSgd {
            rule,
            workers: vec![WorkerState::default(); n],
            global: 0,
            node: n,
            updates: 0,
            pushes: 0,
            last: None,
            speeds: vec![None; n],
            stats: StalenessStats::default(),
            retransmit: Retransmit::default(),
            dropped: 0,
            abandoned: 0,
            buffered: 0,
            late: (0, 0),
            waiting_to_open: false,
            idle: Vec::new(),
            draws: stream(seed, StreamKind::Algorithm, n as u64),
        }
    }

    /// Retransmits lost messages after `timeout` (set for runs with `[[faults]]`).
    pub fn with_retransmit(mut self, timeout: SimTime) -> Self {
        self.retransmit.set_timeout(timeout);
        self
    }

    /// The server's model row (valid once the run started).
    pub fn global_row(&self) -> usize {
        self.global
    }

    /// The outer momentum's row.
    pub fn momentum_row(&self) -> usize {
        self.global + 1
    }

    /// The Delayed Nesterov buffer's row (the sum of the outer gradients since the last
    /// momentum update; always zero with `momentum_every = 1`).
    pub fn buffer_row(&self) -> usize {
        self.global + 2
    }

    fn scratch_row(&self) -> usize {
        self.global + 3
    }

    /// Outer updates applied so far (`t`).
    pub fn outer_steps(&self) -> u64 {
        self.updates
    }

    /// Pushes that reached the server so far, applied or discarded.
    pub fn pushes_received(&self) -> u64 {
        self.pushes
    }

    /// The worker whose outer gradient the last update applied.
    pub fn last_update(&self) -> Option<usize> {
        self.last
    }

    /// Rounds `worker` has started (each from a model of the server's, but the first).
    pub fn rounds(&self, worker: usize) -> u64 {
        self.workers[worker].rounds
    }

    /// The inner steps of `worker`'s current (or last) round.
    pub fn assigned(&self, worker: usize) -> u32 {
        self.workers[worker].assigned
    }

    /// Whether `worker` computes (else it waits for the server's model, or is down).
    pub fn computing(&self, worker: usize) -> bool {
        self.workers[worker].computing
    }

    /// The server's update count when `worker`'s current (or last) round's model was sent:
    /// a push of that round is stale by the updates since.
    pub fn round_base(&self, worker: usize) -> u64 {
        self.workers[worker].base
    }

    /// FedAvg: the pushes that came after their round had closed, and their local steps.
    pub fn late(&self) -> (u64, u64) {
        self.late
    }

    /// FedBuff: the deltas in the server's buffer.
    pub fn buffered(&self) -> u32 {
        self.buffered
    }

    /// Under `concurrency`: whether `worker` is idle, neither training nor sent a model.
    pub fn is_idle(&self, worker: usize) -> bool {
        self.idle.contains(&worker)
    }

    /// Outer gradients lost: discarded at the server (their worker was down) or lost for good.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    fn begin(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let (grad, d) = cx.begin_step(w, 1.0);
        let st = &mut self.workers[w];
        st.grad = Some(grad);
        st.computing = true;
        st.busy += d.as_nanos();
        let life = st.life;
        cx.after(d, Event::ComputeDone { worker: w, life });
    }

    /// Sends `event` from `src` to `dst`; under faults, a lost message is posted again after
    /// the retransmission timeout, unless its link is cut for good.
    fn post(
        &mut self,
        src: usize,
        dst: usize,
        bytes: u64,
        event: Event,
        cx: &mut Ctx<'_, '_, Event>,
    ) {
        if let Some(lost) = self.retransmit.post(src, dst, bytes, event, cx) {
            self.lost_for_good(lost.src, lost.dst, lost.event, cx);
        }
    }

    /// A message that can never be delivered: its buffers are freed, and its worker, if it
    /// waits for it, waits for good.
    fn lost_for_good(&mut self, src: usize, dst: usize, event: Event, cx: &mut Ctx<'_, '_, Event>) {
        let (worker, round) = match event {
            Event::Push {
                worker,
                round,
                start,
                model,
                ..
            } => {
                cx.world.store.release_msg(start);
                cx.world.store.release_msg(model);
                self.dropped += 1;
                (worker, round)
            }
            Event::Model {
                worker, round, msg, ..
            } => {
                cx.world.store.release_msg(msg);
                (worker, round)
            }
            Event::Hello { worker, round } => (worker, round),
            Event::ComputeDone { .. } | Event::Retransmit(_) | Event::Deadline { .. } => return,
        };
        if round == self.workers[worker].round {
            self.workers[worker].cut = Some(format!(
                "worker {worker} waits for the server's model: its request {round} or the reply \
                 was lost for good (the link {src} -> {dst} stays down)"
            ));
        }
    }

    /// `ComputeDone`: one inner step of the worker's own optimizer; at the round's last, the
    /// push.
    fn computed(&mut self, w: usize, life: u64, cx: &mut Ctx<'_, '_, Event>) {
        let st = &mut self.workers[w];
        if cx.is_down(w) || life != st.life || !st.computing {
            return;
        }
        let g = st.grad.take().expect("a computing worker has a gradient");
        let lr = cx.lr_for(w);
        if let ServerRule::FedAsync(c) = &self.rule
            && c.rho > 0.0
        {
            // FedAsync's regularizer: x ← x − lr·ρ·(x − x_start), beside the optimizer's step.
            let start = st.start.expect("a round has its start");
            let r = lr * c.rho;
            cx.world
                .store
                .mix(w, &[(Slot::Row(w), 1.0 - r), (Slot::Msg(start), r)]);
        }
        cx.world.store.apply_gradient(w, g, lr);
        cx.world.store.release_gradient(g);
        cx.step_done(w);
        let st = &mut self.workers[w];
        st.done += 1;
        if st.done < st.assigned {
            self.begin(w, cx);
            return;
        }
        st.computing = false;
        st.round += 1;
        let start = st.start.take().expect("a round has its start");
        let (round, base, steps, busy) = (st.round, st.base, st.done, st.busy);
        let model = cx.world.store.new_msg(&[(Slot::Row(w), 1.0)]);
        let bytes = cx.world.net.payload_bytes(cx.world.store.num_params());
        let node = self.node;
        self.post(
            w,
            node,
            bytes,
            Event::Push {
                worker: w,
                round,
                start,
                model,
                base,
                steps,
                busy,
            },
            cx,
        );
        cx.activity(w, Activity::Communicate);
    }

    /// The server's update with `w`'s round (`start`, the model it started from after `base`
    /// updates; `model`, its model as pushed), as the rule says; the values it touched per
    /// parameter, for its host work.
    fn outer_update(
        &mut self,
        w: usize,
        [start, model]: [MsgId; 2],
        base: u64,
        cx: &mut Ctx<'_, '_, Event>,
    ) -> u64 {
        let (g, buffer) = (self.global, self.buffer_row());
        let (a, x) = (Slot::Msg(start), Slot::Msg(model));
        let tau = self.updates - base;
        self.last = Some(w);
        let store = &mut cx.world.store;
        match self.rule.clone() {
            ServerRule::AsyncLocalSgd(cfg) => {
                // The Delayed Nesterov step on g = start − model (see the module's
                // documentation).
                self.updates += 1;
                let outer = cfg.delayed_nesterov(self.workers.len());
                outer.step(store, [g, self.global + 1, buffer], [a, x], self.updates);
                // Running statistics are the pushing worker's, not extrapolated.
                let state = store.state();
                if !state.is_empty() {
                    let s = self.scratch_row();
                    store.mix(s, &[(x, 1.0)]);
                    store.copy_block(g, s, state);
                }
                delayed_nesterov::VALUES_TOUCHED
            }
            ServerRule::FedAsync(cfg) => {
                // x ← (1 − α_t)·x + α_t·x_i, α_t = α·s(τ): x and x_i read, x written.
                let alpha = cfg.alpha * cfg.staleness().weight(tau);
                store.mix(g, &[(Slot::Row(g), 1.0 - alpha), (x, alpha)]);
                self.updates += 1;
                3
            }
            ServerRule::FedAvg(_) => unreachable!("FedAvg's pushes are a round's (rounds.rs)"),
            ServerRule::FedBuff(cfg) => {
                // Δ̄ ← Δ̄ + s(τ)·(start − x_i): three read, one written.
                let s = cfg.staleness().weight(tau);
                store.mix(buffer, &[(Slot::Row(buffer), 1.0), (a, s), (x, -s)]);
                self.buffered += 1;
                if self.buffered < cfg.buffer_size {
                    return 4;
                }
                // x ← x − η_g·Δ̄/K, Δ̄ ← 0: x and Δ̄ read, both written.
                let k = f64::from(cfg.buffer_size);
                store.mix(
                    g,
                    &[(Slot::Row(g), 1.0), (Slot::Row(buffer), -cfg.server_lr / k)],
                );
                store.mix(buffer, &[(Slot::Row(buffer), 0.0)]);
                self.buffered = 0;
                self.updates += 1;
                8
            }
        }
    }

    /// `Push`: applied at once, and answered with the model.
    #[allow(clippy::too_many_arguments)]
    fn pushed(
        &mut self,
        w: usize,
        round: u64,
        start: MsgId,
        model: MsgId,
        base: u64,
        steps: u32,
        busy: u64,
        cx: &mut Ctx<'_, '_, Event>,
    ) {
        self.pushes += 1;
        if cx.is_down(w) {
            cx.world.store.release_msg(start);
            cx.world.store.release_msg(model);
            self.dropped += 1;
            return;
        }
        if let ServerRule::FedAvg(cfg) = &self.rule {
            let cfg = cfg.clone();
            return self.round_push(w, [start, model], base, steps, &cfg, cx);
        }
        self.stats.record(self.updates - base);
        let touched = self.outer_update(w, [start, model], base, cx);
        cx.world.store.release_msg(start);
        cx.world.store.release_msg(model);
        // The server's update, done before its reply leaves; pushes queue behind it.
        let params = cx.world.store.num_params() as u64;
        cx.host_work(self.node, HostWork::touch(touched * params));
        self.speeds[w] = Some((steps, busy));
        match self.rule.concurrency() {
            None => self.reply(w, round, cx),
            Some(_) => {
                // The next client, drawn among the idle ones and `w`.
                self.idle.push(w);
                self.idle.sort_unstable();
                let v = self
                    .idle
                    .remove(self.draws.random_range(0..self.idle.len()));
                if v != w {
                    cx.activity(w, Activity::Idle);
                }
                let round = self.workers[v].round;
                self.reply(v, round, cx);
            }
        }
    }

    /// The server's model to `w`, answering its request `round`, with its next round's steps.
    fn reply(&mut self, w: usize, round: u64, cx: &mut Ctx<'_, '_, Event>) {
        let steps = self.steps_for(w, cx);
        let msg = cx.world.store.new_msg(&[(Slot::Row(self.global), 1.0)]);
        let bytes = cx.world.net.payload_bytes(cx.world.store.num_params());
        let (node, version) = (self.node, self.updates);
        self.post(
            node,
            w,
            bytes,
            Event::Model {
                worker: w,
                round,
                msg,
                version,
                steps,
            },
            cx,
        );
    }

    /// `w`'s inner steps for its next round: `H`, or with DyLU `max(1, ⌊H · v_w / v_max⌋)`,
    /// `v_max` over the workers up (and `w`).
    fn steps_for(&self, w: usize, cx: &Ctx<'_, '_, Event>) -> u32 {
        let h = self.rule.local_steps();
        let dylu = matches!(&self.rule, ServerRule::AsyncLocalSgd(c) if c.dynamic_local_steps);
        if !dylu {
            return h;
        }
        let Some(own) = self.speeds[w] else {
            return h;
        };
        let fastest = (0..self.workers.len())
            .filter(|&v| v == w || !cx.is_down(v))
            .filter_map(|v| self.speeds[v])
            .fold(own, |best, s| if faster(s, best) { s } else { best });
        dylu_steps(h, own, fastest)
    }

    /// `Model`: the worker starts a round from it, unless it answers an older request (or the
    /// worker is down).
    fn arrived(
        &mut self,
        w: usize,
        round: u64,
        msg: MsgId,
        version: u64,
        steps: u32,
        cx: &mut Ctx<'_, '_, Event>,
    ) {
        if !cx.deliverable(w) {
            cx.world.store.release_msg(msg);
            return;
        }
        let st = &mut self.workers[w];
        if round != st.round || st.computing {
            cx.world.store.release_msg(msg);
            return;
        }
        cx.world.store.mix(w, &[(Slot::Msg(msg), 1.0)]);
        if matches!(&self.rule, ServerRule::AsyncLocalSgd(c) if c.inner_reset) {
            cx.world.store.reset_optimizer_state(w);
        }
        if let Some(old) = st.start.replace(msg) {
            cx.world.store.release_msg(old);
        }
        st.base = version;
        st.assigned = steps;
        st.done = 0;
        st.busy = 0;
        st.rounds += 1;
        st.cut = None;
        self.begin(w, cx);
    }
}

/// Whether speed `a` (steps over busy nanoseconds) is greater than speed `b`, in integers (a
/// round of no compute time is infinitely fast).
fn faster(a: (u32, u64), b: (u32, u64)) -> bool {
    u128::from(a.0) * u128::from(b.1) > u128::from(b.0) * u128::from(a.1)
}

/// DyLU's steps for a worker of speed `own` when the fastest is `fastest` (each as `(steps,
/// busy nanoseconds)`): `max(1, ⌊h · v_own / v_fastest⌋)`, at most `h`, in integers.
pub fn dylu_steps(h: u32, own: (u32, u64), fastest: (u32, u64)) -> u32 {
    let num = u128::from(h) * u128::from(own.0) * u128::from(fastest.1);
    let den = u128::from(own.1) * u128::from(fastest.0);
    if den == 0 {
        // This worker took no compute time (infinitely fast): the full H.
        return h;
    }
    u32::try_from((num / den).min(u128::from(h)))
        .unwrap_or(h)
        .max(1)
}

impl Algorithm for AsyncLocalSgd {
    type Event = Event;

    fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        let n = self.workers.len();
        assert!(
            cx.world.net.nodes() > n,
            "the network needs the server's node (AlgorithmConfig::extra_nodes)"
        );
        // Added rows copy row 0, the initial model: the server's; the momentum and the DN
        // buffer start at zero.
        self.global = cx.world.store.add_rows(4);
        for r in [self.momentum_row(), self.buffer_row()] {
            cx.world.store.mix(r, &[(Slot::Row(r), 0.0)]);
        }
        // Under `concurrency`, C clients drawn at random start; the others wait, idle.
        let mut starting = vec![true; n];
        if let Some(c) = self.rule.concurrency() {
            self.idle = (0..n).collect();
            starting = vec![false; n];
            for _ in 0..c {
                let v = self
                    .idle
                    .remove(self.draws.random_range(0..self.idle.len()));
                starting[v] = true;
            }
        }
        for (w, starts) in starting.into_iter().enumerate() {
            if !starts {
                cx.activity(w, Activity::Idle);
                continue;
            }
            let start = cx.world.store.new_msg(&[(Slot::Row(w), 1.0)]);
            let st = &mut self.workers[w];
            st.start = Some(start);
            st.assigned = self.rule.local_steps();
            st.rounds = 1;
            self.begin(w, cx);
        }
        self.arm_deadline(cx);
    }

    fn handle(&mut self, event: Event, cx: &mut Ctx<'_, '_, Event>) {
        match event {
            Event::ComputeDone { worker, life } => self.computed(worker, life, cx),
            Event::Push {
                worker,
                round,
                start,
                model,
                base,
                steps,
                busy,
            } => self.pushed(worker, round, start, model, base, steps, busy, cx),
            Event::Model {
                worker,
                round,
                msg,
                version,
                steps,
            } => self.arrived(worker, round, msg, version, steps, cx),
            Event::Hello { worker, round } => {
                if !cx.is_down(worker) {
                    self.reply(worker, round, cx);
                }
            }
            Event::Retransmit(id) => {
                if let Some(lost) = self.retransmit.again(id, cx) {
                    self.lost_for_good(lost.src, lost.dst, lost.event, cx);
                }
            }
            Event::Deadline { version } => self.deadline(version, cx),
        }
    }

    fn waiting(&self) -> Vec<String> {
        self.workers
            .iter()
            .enumerate()
            .filter(|&(w, st)| !st.computing && !self.idle.contains(&w))
            .map(|(w, st)| {
                st.cut.clone().unwrap_or_else(|| {
                    format!(
                        "worker {w} waits for the server's model answering its request {} (the server is at update {})",
                        st.round, self.updates
                    )
                })
            })
            .collect()
    }

    fn eval_model(&self) -> Option<Vec<(usize, f64)>> {
        Some(vec![(self.global, 1.0)])
    }

    fn staleness(&self) -> Option<StalenessStats> {
        Some(self.stats)
    }

    fn series(&mut self) -> Vec<(&'static str, f64)> {
        let mut series = vec![("outer_steps", self.updates as f64)];
        if matches!(self.rule, ServerRule::FedAvg(_)) {
            series.push(("late_rounds", self.late.0 as f64));
            series.push(("late_steps", self.late.1 as f64));
        }
        series
    }

    fn on_fault(&mut self, fault: WorkerFault, cx: &mut Ctx<'_, '_, Event>) {
        match fault {
            WorkerFault::Crash(w) => {
                if self.workers[w].computing {
                    self.abandoned += 1;
                }
                let st = &mut self.workers[w];
                st.life += 1;
                st.computing = false;
                if let Some(g) = st.grad.take() {
                    cx.world.store.release_gradient(g);
                }
                if let Some(start) = st.start.take() {
                    cx.world.store.release_msg(start);
                }
            }
            WorkerFault::Rejoin(w) => {
                let st = &mut self.workers[w];
                st.round += 1;
                st.cut = None;
                let round = st.round;
                let node = self.node;
                self.post(w, node, 0, Event::Hello { worker: w, round }, cx);
                cx.activity(w, Activity::Communicate);
            }
        }
    }

    fn fault_counts(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("retransmissions", self.retransmit.count()),
            ("outer_gradients_dropped", self.dropped),
            ("rounds_abandoned", self.abandoned),
        ]
    }
}

// Its `AlgorithmSpec`: the server's, as FedAsync's and FedBuff's (`fed.rs`, `fed_spec!`).
