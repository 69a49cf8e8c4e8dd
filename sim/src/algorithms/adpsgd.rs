//! AD-PSGD: asynchronous decentralized parallel SGD.
//!
//! Lian, Zhang, Zhang & Liu, "Asynchronous Decentralized Parallel Stochastic Gradient Descent",
//! ICML 2018. The workers are split into an active and a passive side of a bipartite graph
//! ([`crate::net::topology::Topology::bipartition`]); only active workers initiate averaging, always
//! with a passive neighbour, so no two averagings contend for the same pair in a cycle. The
//! averaging partner is drawn uniformly from the active worker's neighbours (`partner =
//! "uniform"`, from the worker's algorithm stream) or taken in turn (`partner = "cycle"`), or
//! the reference's rotation sets it (`partner = "schedule"`, thread mode on the bipartite
//! exponential graph): in round `k` every worker sends to `i + o_k` and hears from `i − o_k`
//! only ([`phone_book`]), a passive worker takes a request only in its own round, and an active
//! worker's round ends when its passive has taken its model and the model it hears has come.
//! `averaging_overhead_us` charges the host time of an averaging at each end: a request leaves
//! that long after its averaging starts, a reply that long after its request arrives (one at a
//! time per passive worker).
//!
//! Two ways to schedule the averaging (`averaging`):
//!
//! ```text
//! thread (default; the paper's implementation and the reference's, facebookresearch/
//! stochastic_gradient_push gossip_module/ad_psgd.py: a gossip thread beside the training one):
//!     computation of i: read x̂ ← x_i; compute g on x̂ and a minibatch; hand g over:
//!         applied at once, x_i ← optimizer step with g, unless i is active and has applied
//!         max_steps_per_averaging (default 1) gradients since its last completed averaging:
//!         then it waits, holding g, until the averaging in flight completes, and g is applied
//!         there; repeat
//!     gossip loop of active i, from the start, back to back (running freely, as the
//!     reference's `while True` loop; at most max_averagings_per_step averagings started
//!     between two gradient steps when that bound is set):
//!         snap ← x_i; send snap to a passive neighbour j;
//!         j, on arrival: x_j ← (x_j + snap)/2; replies with δ = x_j − snap   (= avg − snap)
//!         i, on the reply: x_i ← x_i + δ     (keeps the local steps made meanwhile); next
//!
//! per-step (Algorithm 1 of the paper read literally), every worker loops without a barrier:
//!     read x̂ ← x_i; compute g on x̂ and a minibatch           (compute time from the cluster)
//!     if i is active:
//!         pick a passive neighbour j; send x_i to j; j sets x_i, x_j ← (x_i + x_j)/2 atomically
//!         on arrival and replies; wait for the reply
//!     x_i ← optimizer step with g                               (the rate in force now)
//! ```
//!
//! In the reference, the gossip thread applies the gradients: at the top of each loop iteration
//! it applies the gradient the training thread handed over, if any, then runs one bilateral
//! exchange (an active worker sends its model and blocks for its partner's; a passive one polls
//! for a request and answers it). The training thread does not hand over a new gradient until
//! the gossip thread has taken the previous one, so when an averaging outlasts a step, the
//! computation of an active worker waits: one gradient per averaging. `max_steps_per_averaging
//! = 1` is that hand-off; dasim applies a gradient as soon as the hand-off allows (the `δ`
//! correction makes that the same model as applying it after the averaging in flight) where the
//! reference applies it at the top of the next loop iteration. Passive workers never wait (the
//! reference's passive loop polls, and answers in the time of one send). Nothing in the
//! reference bounds the gossip loop's lead: on a fast network an active worker averages many
//! times per step; `max_averagings_per_step = k` bounds it (k = 1 was dasim's thread mode before
//! the free-running loop became the default).
//!
//! Passive workers never initiate averaging: their communication side answers averaging
//! requests while they compute. In per-step mode an active worker waits only for a passive
//! worker's reply, which never waits for anyone, so the scheme cannot deadlock; the averaging
//! happens at the instant the request reaches `j`, and `x_i` is set then too, which is exact
//! because only `i` itself touches an active replica, and `i` is waiting for the reply. In thread
//! mode a held gradient waits for a reply, which never waits for anyone either.
//!
//! **Activities** ([`crate::record`]): in per-step mode an active worker communicates from
//! sending its averaging request until the reply is back (the passive partner answers on
//! arrival, so only the network delays it) and computes otherwise; passive workers always
//! compute. In thread mode a worker computes, except an active worker holding a gradient for
//! the averaging in flight, which communicates: the communication thread runs beside the
//! computation, which is the foreground activity.
//!
//! **Invariant**: averaging leaves the sum of all replicas unchanged — in per-step mode at every
//! instant; in thread mode counting the replies in flight (`Σ_i x_i + Σ δ` in flight).
//!
//! ## Under faults
//!
//! The paper's implementation has no failure handling: an active worker whose partner never
//! answers waits for ever. dasim gives the active side a timeout (`partner_timeout_ms`, default
//! four round trips of a model on an idle network, `8·(S/B + α)`): when no reply has come by then,
//! the worker gives up on that partner and sends its request to another neighbour (drawn among
//! the others with `partner = "uniform"`, the next in turn with `"cycle"`; the same one when it
//! has a single neighbour). The timeout is scheduled only in runs with `[[faults]]`, so a run
//! without faults has exactly its usual events.
//!
//! With faults, both modes exchange snapshots and corrections, as thread mode always does: the
//! request carries `snap = x_i` (taken when sent), `j` sets `x_j ← (x_j + snap)/2` and replies
//! `δ = x_j − snap`, and `i` adds `δ` when it arrives. While `i` waits, `x_i = snap`, so this is
//! the same averaging as the fault-free per-step mode; but a reply that arrives after its
//! timeout (a delayed message) is still added (`late_replies`), which keeps the sum. What the
//! faults cost:
//!
//! - a request lost on the network (`loss`, `link-down`) or dropped at a crashed passive worker
//!   (counted in `messages_dropped_down`) changes nothing but the time the active worker lost
//!   before its timeout;
//! - a reply lost, or dropped at an active worker that crashed meanwhile, loses its `δ`: `j`
//!   has moved towards `snap` and `i` has not, so `Σ_i x_i` changes by `−δ` (`replies_lost`);
//!   the invariant holds with the replies in flight and the replies lost;
//! - a crashed worker abandons its step (its gradient is never applied) and its averaging; on
//!   rejoin it starts a new step with the replica it had (and, in thread mode, its gossip loop
//!   again).
//!
//! An active worker whose every neighbour is cut off for good (down with no rejoin to come, or
//! behind a `link-down` window that never closes) stops retrying and waits: with nothing else
//! left to happen, the run stalls naming it. `partner_timeouts`, `late_replies` and
//! `replies_lost` are reported in `summary.json`'s `faults`.

use std::collections::{BTreeMap, VecDeque};

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::algorithm::{Algorithm, Ctx, World};
use crate::algorithms::{AlgorithmSpec, Runnable, Setup};
use crate::clock::rng::{Stream, StreamKind, stream};
use crate::clock::time::TimeUnit;
use crate::engine::SimTime;
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport, WorkerFault};
use crate::params::{GradId, MsgId, ReplicaStore, Slot};
use crate::record::Activity;

/// How an active worker picks its averaging partner.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Partner {
    /// Uniformly at random among its neighbours.
    #[default]
    Uniform,
    /// Its neighbours in turn, in increasing order.
    Cycle,
    /// The reference's fixed rotation over the bipartite exponential graph
    /// (`DynamicBipartiteExponentialGraph` with `BilatPushPull`): in round `k` every worker
    /// sends to `i + o_k` and hears from `i − o_k` only, `o_k` the `k`-th offset of the phone
    /// book in turn ([`phone_book`]); a round of an active worker ends when its passive has
    /// taken its model and the reply it is scheduled to hear has come.
    Schedule,
}

/// The reference's phone book of the bipartite exponential graph on `n` workers, as offsets
/// modulo `n` in the order it rotates through them: `+1, −1, +(1 + 2^i), −(1 + 2^i)` for
/// `i = 1 ..= floor(log2(n − 1))`, each offset once (`_add_peers` skips a peer already listed).
pub fn phone_book(n: usize) -> Vec<usize> {
    let mut book = Vec::new();
    let mut add = |off: usize| {
        if !book.contains(&off) {
            book.push(off);
        }
    };
    let mut m = 0;
    while m < usize::BITS && (1usize << m) < n {
        let d = if m == 0 { 1 } else { 1 + (1usize << m) } % n;
        add(d);
        add((n - d) % n);
        m += 1;
    }
    book
}

/// When averaging happens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Averaging {
    /// In a communication thread beside the computation, its gossip loop running freely (the
    /// paper's implementation and the reference's; optionally bounded, see
    /// [`AdPsgdConfig::max_averagings_per_step`] and [`AdPsgdConfig::max_steps_per_averaging`]).
    #[default]
    Thread,
    /// Once per gradient step, between computing and applying the gradient (the paper's
    /// Algorithm 1 read literally).
    PerStep,
}

/// A bound on how far one side of thread mode may run ahead of the other: a positive count, or
/// `"unbounded"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Bound {
    /// At most this many (at least 1).
    At(u32),
    /// No bound.
    Unbounded(Unbounded),
}

/// The word `"unbounded"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unbounded {
    /// No bound.
    Unbounded,
}

impl Bound {
    /// No bound.
    pub const UNBOUNDED: Bound = Bound::Unbounded(Unbounded::Unbounded);

    /// The count, `None` when unbounded.
    pub fn count(self) -> Option<u32> {
        match self {
            Bound::At(k) => Some(k),
            Bound::Unbounded(_) => None,
        }
    }

    fn is_unbounded(&self) -> bool {
        self.count().is_none()
    }

    fn is_one(&self) -> bool {
        *self == Bound::At(1)
    }
}

impl Default for Bound {
    fn default() -> Self {
        Bound::UNBOUNDED
    }
}

fn one() -> Bound {
    Bound::At(1)
}

/// Options of AD-PSGD.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdPsgdConfig {
    /// `uniform` (default) or `cycle`.
    #[serde(default)]
    pub partner: Partner,
    /// `thread` (default) or `per-step`.
    #[serde(default)]
    pub averaging: Averaging,
    /// Thread mode: the communication thread of an active worker starts at most this many
    /// averagings between two gradient applications of its computation (how far the gossip loop
    /// may run ahead of the computation). Default `"unbounded"`: the gossip loop runs freely, as
    /// in the reference.
    #[serde(default, skip_serializing_if = "Bound::is_unbounded")]
    pub max_averagings_per_step: Bound,
    /// Thread mode: the computation of an active worker applies at most this many gradients
    /// between two completed averagings of its communication thread; a gradient beyond waits for
    /// the averaging in flight (how far the computation may run ahead of the gossip loop).
    /// Default 1: the reference hands one gradient at a time to its gossip thread, which applies
    /// it between two averagings. `"unbounded"`: the computation never waits.
    #[serde(default = "one", skip_serializing_if = "Bound::is_one")]
    pub max_steps_per_averaging: Bound,
    /// Under `[[faults]]`: how long an active worker waits for its partner's reply before it
    /// gives up and asks another neighbour, milliseconds (default: four round trips of a model
    /// on an idle network, `8·(S/B + α)`). Unused without faults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partner_timeout_ms: Option<f64>,
    /// Host time of one averaging besides its transfers, microseconds (default 0): the
    /// reference's gossip loop copies the model into its send buffer under a lock, and mixes
    /// the reply back, every iteration. An active worker's request leaves this long after its
    /// averaging starts; a passive worker's reply leaves this long after the request arrives,
    /// one request at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub averaging_overhead_us: Option<f64>,
}

impl Default for AdPsgdConfig {
    fn default() -> Self {
        AdPsgdConfig {
            partner: Partner::default(),
            averaging: Averaging::default(),
            max_averagings_per_step: Bound::UNBOUNDED,
            max_steps_per_averaging: one(),
            partner_timeout_ms: None,
            averaging_overhead_us: None,
        }
    }
}

impl AdPsgdConfig {
    /// The host time of one averaging ([`AdPsgdConfig::averaging_overhead_us`]; 0 by default).
    pub fn averaging_overhead(&self) -> SimTime {
        self.averaging_overhead_us
            .map_or(SimTime::ZERO, SimTime::from_micros_f64)
    }

    /// The partner timeout on `world`'s network: the option, else `8·(S/B + α)` (at least
    /// 1 µs).
    pub fn partner_timeout(&self, world: &World<'_>) -> SimTime {
        match self.partner_timeout_ms {
            Some(ms) => SimTime::from_millis_f64(ms),
            None => {
                let one_way = world
                    .net
                    .serialization_time(world.model_bytes + world.net.header_bytes())
                    .saturating_add(world.net.latency());
                one_way.scale(8.0).max(SimTime::from_nanos(1_000))
            }
        }
    }
}

/// Events of AD-PSGD.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum Event {
    /// `worker` finished computing its gradient (the second field: its crash count when the
    /// step started; a step abandoned by a crash is ignored).
    ComputeDone(usize, u64),
    /// The model of active `from` reached passive `to`: average now. `snap` is the model sent
    /// (thread mode, and both modes under faults).
    AverageRequest {
        /// Active worker.
        from: usize,
        /// Passive worker.
        to: usize,
        /// The snapshot sent (thread mode, or under faults).
        snap: Option<MsgId>,
        /// The active worker's request number.
        attempt: u64,
    },
    /// The averaging reply is back at active `to` (thread mode, or under faults: carrying
    /// `delta`).
    AverageReply {
        /// Active worker.
        to: usize,
        /// `avg − snap` (thread mode, or under faults).
        delta: Option<MsgId>,
        /// The request it answers.
        attempt: u64,
    },
    /// Under faults: active `worker`'s request `attempt` has had no reply for the partner
    /// timeout.
    Timeout {
        /// Active worker.
        worker: usize,
        /// The request.
        attempt: u64,
    },
    /// `msg` leaves `from` now that its host has done the averaging's work
    /// (`averaging_overhead_us`).
    Depart {
        /// The sender.
        from: usize,
        /// The message.
        msg: Outgoing,
    },
    /// `partner = "schedule"`: the model of active `from` reached passive `to`, its request of
    /// round `round`.
    ScheduleRequest {
        /// Active worker.
        from: usize,
        /// Passive worker.
        to: usize,
        /// The active worker's model, taken when its round started.
        snap: MsgId,
        /// The round.
        round: u64,
    },
    /// `partner = "schedule"`: the model a passive worker had when it took its request of
    /// round `round` reached active `to`, the worker scheduled to hear it.
    ScheduleReply {
        /// Active worker.
        to: usize,
        /// The passive worker's model, before it mixed in the request.
        model: MsgId,
        /// The round.
        round: u64,
    },
}

/// A message of an averaging, sent when its sender's host is done with it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum Outgoing {
    /// An active worker's averaging request ([`Event::AverageRequest`]).
    Request {
        /// Passive worker.
        to: usize,
        /// The snapshot sent (thread mode, or under faults).
        snap: Option<MsgId>,
        /// The request number.
        attempt: u64,
    },
    /// A passive worker's reply ([`Event::AverageReply`]).
    Reply {
        /// Active worker.
        to: usize,
        /// `avg − snap` (thread mode, or under faults).
        delta: Option<MsgId>,
        /// The request it answers.
        attempt: u64,
    },
    /// [`Event::ScheduleRequest`].
    ScheduleRequest {
        /// Passive worker.
        to: usize,
        /// The active worker's model.
        snap: MsgId,
        /// The round.
        round: u64,
    },
    /// [`Event::ScheduleReply`].
    ScheduleReply {
        /// Active worker.
        to: usize,
        /// The passive worker's model before mixing.
        model: MsgId,
        /// The round.
        round: u64,
    },
}

/// `partner = "schedule"`: where each worker is in the reference's rotation.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Schedule {
    /// The phone book's offsets ([`phone_book`]).
    book: Vec<usize>,
    /// Rounds completed: an active worker's exchanges, a passive worker's requests taken.
    round: Vec<u64>,
    /// Active: its model when its current round started, for the reply's correction.
    own: Vec<Option<MsgId>>,
    /// Active: its passive has taken its request of the current round.
    taken: Vec<bool>,
    /// Active: the reply of its current round, once here.
    reply: Vec<Option<MsgId>>,
    /// Active: replies of rounds it has not started yet.
    early_replies: Vec<BTreeMap<u64, MsgId>>,
    /// Passive: requests of rounds it has not reached yet, with their sender.
    early_requests: Vec<BTreeMap<u64, (usize, MsgId)>>,
}

impl Schedule {
    fn new(n: usize) -> Self {
        Schedule {
            book: phone_book(n),
            round: vec![0; n],
            own: vec![None; n],
            taken: vec![false; n],
            reply: vec![None; n],
            early_replies: vec![BTreeMap::new(); n],
            early_requests: vec![BTreeMap::new(); n],
        }
    }

    /// The offset of round `k`.
    fn offset(&self, k: u64) -> usize {
        self.book[(k % self.book.len() as u64) as usize]
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct WorkerState {
    active: bool,
    grad: Option<GradId>,
    /// Per-step: the partner whose reply the worker waits for. Thread: the partner of the
    /// averaging in flight.
    waiting_for: Option<usize>,
    /// Thread: averagings started since the computation last applied a gradient.
    started_since_step: u32,
    /// Thread: gradients applied since the communication thread last completed an averaging.
    steps_since_average: u32,
    /// Averagings started and completed (the reply added) so far.
    started: u64,
    completed: u64,
    /// Thread: the computation holds a finished gradient until the averaging in flight
    /// completes (the bound `max_steps_per_averaging` is reached).
    held: bool,
    next_partner: usize,
    /// Requests sent so far (a reply or timeout of an earlier one does not end the wait).
    attempt: u64,
    /// Crashes so far.
    life: u64,
    /// Down (crashed, not rejoined).
    down: bool,
    /// The partner that just timed out, avoided by the next pick.
    avoid: Option<usize>,
    /// Stopped retrying: every neighbour is cut off for good.
    parked: bool,
    /// Averagings started with each partner so far, `(partner, count)` by partner: beside the
    /// worker's other state rather than in one map of every pair searched at each averaging.
    pairs: Vec<(usize, u64)>,
}

/// The state machine of AD-PSGD.
#[derive(Serialize, Deserialize)]
pub struct AdPsgd {
    partner: Partner,
    averaging: Averaging,
    /// Thread mode: `max_averagings_per_step` (`None`: unbounded).
    ahead: Option<u32>,
    /// Thread mode: `max_steps_per_averaging` (`None`: unbounded).
    behind: Option<u32>,
    workers: Vec<WorkerState>,
    /// Each worker's stream (for the partner draws), apart from its other state: a stream is a
    /// few hundred bytes, which would spread the states of many workers over many cache lines.
    rngs: Vec<Stream>,
    /// The replies in flight, in the order they were sent (which is nearly the order they
    /// land, so the one to remove is found near the front).
    in_flight: VecDeque<MsgId>,
    /// Under faults: the partner timeout (`None`: no faults, no timeouts).
    timeout: Option<SimTime>,
    /// `averaging_overhead_us`.
    overhead: SimTime,
    /// When each worker's gossip loop is done with the replies it has to send.
    busy_until: Vec<SimTime>,
    /// `partner = "schedule"`.
    schedule: Option<Schedule>,
    timeouts: u64,
    late_replies: u64,
    replies_lost: u64,
}

impl AdPsgd {
    /// A new instance with the default options; `sides[i]` is true for active workers (see
    /// [`crate::net::topology::Topology::bipartition`]).
    pub fn new(cfg: &AdPsgdConfig, sides: &[bool], seed: u64) -> Self {
        AdPsgd {
            partner: cfg.partner,
            averaging: cfg.averaging,
            ahead: cfg.max_averagings_per_step.count(),
            behind: cfg.max_steps_per_averaging.count(),
            workers: sides
                .iter()
                .map(|&active| WorkerState {
                    active,
                    grad: None,
                    waiting_for: None,
                    started_since_step: 0,
                    steps_since_average: 0,
                    held: false,
                    started: 0,
                    completed: 0,
                    next_partner: 0,
                    attempt: 0,
                    life: 0,
                    down: false,
                    avoid: None,
                    parked: false,
                    pairs: Vec::new(),
                })
                .collect(),
            rngs: (0..sides.len())
                .map(|i| stream(seed, StreamKind::Algorithm, i as u64))
                .collect(),
            in_flight: VecDeque::new(),
            timeout: None,
            overhead: cfg.averaging_overhead(),
            busy_until: vec![SimTime::ZERO; sides.len()],
            schedule: (cfg.partner == Partner::Schedule).then(|| Schedule::new(sides.len())),
            timeouts: 0,
            late_replies: 0,
            replies_lost: 0,
        }
    }

    /// Gives up on a partner after `timeout` without a reply (set for runs with `[[faults]]`).
    pub fn with_timeout(mut self, timeout: SimTime) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Partner timeouts so far.
    pub fn timeouts(&self) -> u64 {
        self.timeouts
    }

    /// Averagings started so far, by `(active, passive)` pair.
    pub fn pair_counts(&self) -> BTreeMap<(usize, usize), u64> {
        self.workers
            .iter()
            .enumerate()
            .flat_map(|(w, st)| st.pairs.iter().map(move |&(j, c)| ((w, j), c)))
            .collect()
    }

    /// Averagings that active `worker` started and completed so far (an averaging completes when
    /// its reply is back; one abandoned after a timeout never does).
    pub fn averagings_of(&self, worker: usize) -> (u64, u64) {
        let st = &self.workers[worker];
        (st.started, st.completed)
    }

    /// `partner = "schedule"`: the rounds `worker` has completed (an active worker's exchanges,
    /// a passive worker's requests taken); `None` under another partner rule.
    pub fn rounds_of(&self, worker: usize) -> Option<u64> {
        self.schedule.as_ref().map(|s| s.round[worker])
    }

    /// Thread mode: whether `worker`'s computation holds a finished gradient until the
    /// averaging in flight completes.
    pub fn holds_gradient(&self, worker: usize) -> bool {
        self.workers[worker].held
    }

    /// Thread mode: the replies `δ = avg − snap` in flight (they carry replica mass).
    pub fn deltas_in_flight(&self) -> Vec<MsgId> {
        self.in_flight.iter().copied().collect()
    }

    /// A reply `delta` is no longer in flight.
    fn landed(&mut self, delta: MsgId) {
        if let Some(k) = self.in_flight.iter().position(|&m| m == delta) {
            self.in_flight.remove(k);
        }
    }

    fn pick(&mut self, w: usize, peers: &[usize]) -> usize {
        let j = self.draw(w, peers);
        self.count_pair(w, j);
        j
    }

    fn count_pair(&mut self, w: usize, j: usize) {
        let pairs = &mut self.workers[w].pairs;
        match pairs.binary_search_by_key(&j, |&(p, _)| p) {
            Ok(k) => pairs[k].1 += 1,
            Err(k) => pairs.insert(k, (j, 1)),
        }
    }

    fn draw(&mut self, w: usize, peers: &[usize]) -> usize {
        let st = &mut self.workers[w];
        let rng = &mut self.rngs[w];
        // After a timeout: another neighbour than the one that did not answer, if there is one.
        let avoid = st.avoid.take().filter(|&a| peers.iter().any(|&p| p != a));
        match self.partner {
            Partner::Uniform => match avoid {
                None => peers[rng.random_range(0..peers.len())],
                Some(a) => {
                    let others: Vec<usize> = peers.iter().copied().filter(|&p| p != a).collect();
                    others[rng.random_range(0..others.len())]
                }
            },
            Partner::Schedule => unreachable!("the schedule draws no partner"),
            Partner::Cycle => {
                let mut j = peers[st.next_partner % peers.len()];
                st.next_partner += 1;
                if Some(j) == avoid {
                    j = peers[st.next_partner % peers.len()];
                    st.next_partner += 1;
                }
                j
            }
        }
    }

    fn apply(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let g = self.workers[w].grad.take().expect("a gradient in flight");
        let lr = cx.lr_for(w);
        cx.world.store.apply_gradient(w, g, lr);
        cx.world.store.release_gradient(g);
        cx.step_done(w);
        let st = &mut self.workers[w];
        st.started_since_step = 0;
        st.steps_since_average = st.steps_since_average.saturating_add(1);
    }

    fn next_step(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let life = self.workers[w].life;
        self.workers[w].grad = Some(cx.start_step(w, Event::ComputeDone(w, life)));
    }

    /// Thread mode: the gossip loop of active `w` starts its next averaging, unless one is in
    /// flight or the bound `max_averagings_per_step` holds it until the next gradient step.
    fn maybe_average(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let st = &self.workers[w];
        if !st.active || st.waiting_for.is_some() || st.parked || st.down {
            return;
        }
        if self.ahead.is_some_and(|k| st.started_since_step >= k) {
            return;
        }
        let st = &mut self.workers[w];
        st.started_since_step = st.started_since_step.saturating_add(1);
        if self.schedule.is_some() {
            self.schedule_round(w, cx);
            return;
        }
        let snap = cx.world.store.new_msg(&[(Slot::Row(w), 1.0)]);
        self.request_average(w, Some(snap), cx);
    }

    /// `partner = "schedule"`: active `w` starts its next round `k`: its model goes to
    /// `w + o_k`, and it waits for that passive to take it and for the model of `w − o_k`.
    fn schedule_round(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let sched = self.schedule.as_mut().expect("schedule");
        let n = sched.round.len();
        let k = sched.round[w];
        let off = sched.offset(k);
        let (to, hears) = ((w + off) % n, (w + n - off) % n);
        let store = &mut cx.world.store;
        sched.own[w] = Some(store.new_msg(&[(Slot::Row(w), 1.0)]));
        let snap = store.new_msg(&[(Slot::Row(w), 1.0)]);
        sched.taken[w] = false;
        sched.reply[w] = sched.early_replies[w].remove(&k);
        let st = &mut self.workers[w];
        st.waiting_for = Some(hears);
        st.attempt += 1;
        st.started += 1;
        self.count_pair(w, to);
        self.depart(
            w,
            self.overhead,
            Outgoing::ScheduleRequest { to, snap, round: k },
            cx,
        );
    }

    /// `partner = "schedule"`: passive `p` takes the request of round `k` from active `a`: its
    /// model before mixing goes to `p + o_k`, and it mixes in `a`'s.
    fn serve(&mut self, p: usize, a: usize, snap: MsgId, k: u64, cx: &mut Ctx<'_, '_, Event>) {
        let sched = self.schedule.as_mut().expect("schedule");
        let n = sched.round.len();
        let to = (p + sched.offset(k)) % n;
        debug_assert_eq!(
            sched.round[a], k,
            "an active worker waits in the round it asked for"
        );
        let store = &mut cx.world.store;
        let model = store.new_msg(&[(Slot::Row(p), 1.0)]);
        store.mix(p, &[(Slot::Row(p), 0.5), (Slot::Msg(snap), 0.5)]);
        store.release_msg(snap);
        sched.round[p] += 1;
        sched.taken[a] = true;
        let delay = self.reply_delay(p, cx.now());
        self.depart(
            p,
            delay,
            Outgoing::ScheduleReply {
                to,
                model,
                round: k,
            },
            cx,
        );
        self.try_complete(a, cx);
    }

    /// `partner = "schedule"`: active `a`'s round ends once its passive took its model and the
    /// model it hears has come: `x_a ← x_a + (model − own)/2`, which is `(own + model)/2` plus
    /// the steps `a` applied meanwhile.
    fn try_complete(&mut self, a: usize, cx: &mut Ctx<'_, '_, Event>) {
        let sched = self.schedule.as_mut().expect("schedule");
        if !sched.taken[a] || sched.reply[a].is_none() {
            return;
        }
        let model = sched.reply[a].take().expect("checked");
        let own = sched.own[a].take().expect("a round under way");
        sched.taken[a] = false;
        sched.round[a] += 1;
        let store = &mut cx.world.store;
        store.mix(
            a,
            &[
                (Slot::Row(a), 1.0),
                (Slot::Msg(model), 0.5),
                (Slot::Msg(own), -0.5),
            ],
        );
        store.release_msg(model);
        store.release_msg(own);
        self.wait_over(a, cx);
    }

    /// The delay before passive `p`'s reply leaves, from `now`: its gossip loop does one
    /// averaging's host work at a time.
    fn reply_delay(&mut self, p: usize, now: SimTime) -> SimTime {
        if self.overhead == SimTime::ZERO {
            return SimTime::ZERO;
        }
        let leaves = self.busy_until[p].max(now) + self.overhead;
        self.busy_until[p] = leaves;
        leaves - now
    }

    /// Sends `msg` from `from` after `delay` (at once when it is zero).
    fn depart(&mut self, from: usize, delay: SimTime, msg: Outgoing, cx: &mut Ctx<'_, '_, Event>) {
        if delay == SimTime::ZERO {
            self.post(from, msg, cx);
        } else {
            cx.after(delay, Event::Depart { from, msg });
        }
    }

    /// Puts `msg` on the network from `from`.
    fn post(&mut self, from: usize, msg: Outgoing, cx: &mut Ctx<'_, '_, Event>) {
        let bytes = cx.world.model_bytes;
        match msg {
            Outgoing::Request { to, snap, attempt } => {
                let sent = cx.send(
                    from,
                    to,
                    bytes,
                    Event::AverageRequest {
                        from,
                        to,
                        snap,
                        attempt,
                    },
                );
                if let Some(timeout) = self.timeout {
                    if sent.lost.is_some()
                        && let Some(m) = snap
                    {
                        cx.world.store.release_msg(m);
                    }
                    cx.after(
                        timeout,
                        Event::Timeout {
                            worker: from,
                            attempt,
                        },
                    );
                }
            }
            Outgoing::Reply { to, delta, attempt } => {
                let sent = cx.send(from, to, bytes, Event::AverageReply { to, delta, attempt });
                if sent.lost.is_some()
                    && let Some(m) = delta
                {
                    self.reply_lost(m, cx);
                }
            }
            Outgoing::ScheduleRequest { to, snap, round } => {
                cx.send(
                    from,
                    to,
                    bytes,
                    Event::ScheduleRequest {
                        from,
                        to,
                        snap,
                        round,
                    },
                );
            }
            Outgoing::ScheduleReply { to, model, round } => {
                cx.send(from, to, bytes, Event::ScheduleReply { to, model, round });
            }
        }
    }

    /// Active `w` picks a passive neighbour, sends it its model and waits for the reply;
    /// `snap` is the model sent (thread mode), `None` when `w` averages its live row.
    fn request_average(&mut self, w: usize, snap: Option<MsgId>, cx: &mut Ctx<'_, '_, Event>) {
        let j = self.pick(w, cx.world.topology.neighbors(w));
        let st = &mut self.workers[w];
        st.waiting_for = Some(j);
        st.attempt += 1;
        st.started += 1;
        let attempt = st.attempt;
        self.depart(
            w,
            self.overhead,
            Outgoing::Request {
                to: j,
                snap,
                attempt,
            },
            cx,
        );
    }

    /// Per-step mode: `w` has its gradient and averages before applying it (under faults with a
    /// snapshot, see "Under faults").
    fn average_step(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let snap = self
            .timeout
            .map(|_| cx.world.store.new_msg(&[(Slot::Row(w), 1.0)]));
        self.request_average(w, snap, cx);
    }

    /// The wait of `w` for its reply ended (the reply came, or `w` gave up): per-step mode
    /// applies the gradient and starts the next step; thread mode completed an averaging: a
    /// gradient held for it is applied (and the next step starts), then the gossip loop goes on.
    fn wait_over(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        self.workers[w].waiting_for = None;
        self.workers[w].completed += 1;
        match self.averaging {
            Averaging::PerStep => {
                self.apply(w, cx);
                self.next_step(w, cx);
            }
            Averaging::Thread => {
                self.workers[w].steps_since_average = 0;
                if std::mem::take(&mut self.workers[w].held) {
                    self.apply(w, cx);
                    self.next_step(w, cx);
                }
                self.maybe_average(w, cx);
            }
        }
    }

    /// Thread mode: `w`'s gradient is ready. It is applied now, unless `w` is active and has
    /// applied `max_steps_per_averaging` gradients since its last completed averaging: then its
    /// computation waits, holding the gradient, until the averaging in flight completes.
    fn thread_step_done(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let st = &self.workers[w];
        if st.active && self.behind.is_some_and(|m| st.steps_since_average >= m) {
            self.workers[w].held = true;
            cx.activity(w, Activity::Communicate);
            return;
        }
        self.apply(w, cx);
        self.next_step(w, cx);
        self.maybe_average(w, cx);
    }

    /// Active `w` had no reply from its partner in time: it asks another neighbour, unless every
    /// neighbour is cut off for good (then it waits, and the run may stall).
    fn timed_out(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        self.timeouts += 1;
        let j = self.workers[w].waiting_for.take().expect("waiting");
        let now = cx.now();
        let peers = cx.world.topology.neighbors(w).to_vec();
        if peers.iter().all(|&p| {
            cx.world.faults().cut_for_good(w, p, now) || cx.world.faults().cut_for_good(p, w, now)
        }) {
            self.workers[w].parked = true;
            return;
        }
        self.workers[w].avoid = Some(j);
        match self.averaging {
            Averaging::PerStep => self.average_step(w, cx),
            Averaging::Thread => {
                // The averaging under way is abandoned: start another now, whatever the bound.
                let st = &mut self.workers[w];
                st.started_since_step = st.started_since_step.saturating_sub(1);
                self.maybe_average(w, cx);
            }
        }
    }
}

impl Algorithm for AdPsgd {
    type Event = Event;

    fn name(&self) -> &str {
        "adpsgd"
    }

    fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        for w in 0..self.workers.len() {
            self.next_step(w, cx);
        }
        if self.averaging == Averaging::Thread {
            // The gossip loops start with the computation.
            for w in 0..self.workers.len() {
                self.maybe_average(w, cx);
            }
        }
    }

    fn handle(&mut self, event: Event, cx: &mut Ctx<'_, '_, Event>) {
        match (self.averaging, event) {
            (_, Event::ComputeDone(w, life)) if life != self.workers[w].life => {}
            (Averaging::PerStep, Event::ComputeDone(w, _)) if self.workers[w].active => {
                cx.activity(w, Activity::Communicate);
                self.average_step(w, cx);
            }
            (Averaging::PerStep, Event::ComputeDone(w, _)) => {
                self.apply(w, cx);
                self.next_step(w, cx);
            }
            (Averaging::Thread, Event::ComputeDone(w, _)) => self.thread_step_done(w, cx),
            (_, Event::Timeout { worker, attempt }) => {
                let st = &self.workers[worker];
                if !st.down && st.attempt == attempt && st.waiting_for.is_some() {
                    self.timed_out(worker, cx);
                }
            }
            (_, Event::AverageRequest { to, snap, .. }) if !cx.deliverable(to) => {
                // Dropped at a crashed passive worker: the requester's timeout takes over.
                if let Some(m) = snap {
                    cx.world.store.release_msg(m);
                }
            }
            (_, Event::AverageReply { to, delta, .. }) if !cx.deliverable(to) => {
                if let Some(m) = delta {
                    self.reply_lost(m, cx);
                }
            }
            (
                _,
                Event::AverageRequest {
                    from,
                    to,
                    snap,
                    attempt,
                },
            ) => {
                let delta = match snap {
                    None => {
                        cx.world.store.average(&[from, to]);
                        None
                    }
                    Some(snap) => {
                        let store = &mut cx.world.store;
                        store.mix(to, &[(Slot::Row(to), 0.5), (Slot::Msg(snap), 0.5)]);
                        let delta = store.new_msg(&[(Slot::Row(to), 1.0), (Slot::Msg(snap), -1.0)]);
                        store.release_msg(snap);
                        self.in_flight.push_back(delta);
                        Some(delta)
                    }
                };
                let delay = self.reply_delay(to, cx.now());
                self.depart(
                    to,
                    delay,
                    Outgoing::Reply {
                        to: from,
                        delta,
                        attempt,
                    },
                    cx,
                );
            }
            (_, Event::Depart { from, msg }) if cx.world.faults().is_down(from) => {
                // Its sender crashed before the message left.
                match msg {
                    Outgoing::Request { snap: Some(m), .. } => cx.world.store.release_msg(m),
                    Outgoing::Reply { delta: Some(m), .. } => self.reply_lost(m, cx),
                    _ => {}
                }
            }
            (_, Event::Depart { from, msg }) => self.post(from, msg, cx),
            (
                _,
                Event::ScheduleRequest {
                    from,
                    to,
                    snap,
                    round,
                },
            ) => {
                let sched = self.schedule.as_mut().expect("schedule");
                if sched.round[to] < round {
                    // It listens to the active worker of its current round only.
                    sched.early_requests[to].insert(round, (from, snap));
                    return;
                }
                self.serve(to, from, snap, round, cx);
                loop {
                    let sched = self.schedule.as_mut().expect("schedule");
                    let next = sched.round[to];
                    let Some((a, snap)) = sched.early_requests[to].remove(&next) else {
                        break;
                    };
                    self.serve(to, a, snap, next, cx);
                }
            }
            (_, Event::ScheduleReply { to, model, round }) => {
                let sched = self.schedule.as_mut().expect("schedule");
                if sched.round[to] == round && sched.own[to].is_some() {
                    sched.reply[to] = Some(model);
                    self.try_complete(to, cx);
                } else {
                    // A reply of a round `to` has not started yet.
                    sched.early_replies[to].insert(round, model);
                }
            }
            (_, Event::AverageReply { to, delta, attempt }) => {
                if let Some(delta) = delta {
                    let store = &mut cx.world.store;
                    store.mix(to, &[(Slot::Row(to), 1.0), (Slot::Msg(delta), 1.0)]);
                    store.release_msg(delta);
                    self.landed(delta);
                }
                let st = &self.workers[to];
                if st.waiting_for.is_some() && st.attempt == attempt {
                    self.wait_over(to, cx);
                } else {
                    // The worker gave up on this partner: the correction still keeps the sum.
                    self.late_replies += 1;
                }
            }
        }
    }

    fn on_fault(&mut self, fault: WorkerFault, cx: &mut Ctx<'_, '_, Event>) {
        match fault {
            WorkerFault::Crash(w) => {
                let st = &mut self.workers[w];
                st.down = true;
                st.life += 1;
                st.waiting_for = None;
                st.parked = false;
                st.started_since_step = 0;
                st.steps_since_average = 0;
                st.held = false;
                st.avoid = None;
                // A timeout of the abandoned request is stale now.
                st.attempt += 1;
                if let Some(g) = st.grad.take() {
                    cx.world.store.release_gradient(g);
                }
            }
            WorkerFault::Rejoin(w) => {
                self.workers[w].down = false;
                self.next_step(w, cx);
                if self.averaging == Averaging::Thread {
                    self.maybe_average(w, cx);
                }
            }
        }
    }

    fn fault_counts(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("partner_timeouts", self.timeouts),
            ("late_replies", self.late_replies),
            ("replies_lost", self.replies_lost),
        ]
    }

    fn waiting(&self) -> Vec<String> {
        let what = match self.averaging {
            Averaging::PerStep => "worker",
            Averaging::Thread => "the communication thread of worker",
        };
        self.workers
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.down)
            .filter_map(|(w, s)| {
                if s.parked {
                    return Some(format!(
                        "{what} {w} waits for a neighbour to average with: every neighbour is \
                         down for good or behind a link that stays down"
                    ));
                }
                let j = s.waiting_for?;
                if let Some(sched) = &self.schedule {
                    let n = sched.round.len();
                    let k = sched.round[w];
                    let to = (w + sched.offset(k)) % n;
                    let mut wants = Vec::new();
                    if !sched.taken[w] {
                        wants.push(format!("worker {to} to take its model"));
                    }
                    if sched.reply[w].is_none() {
                        wants.push(format!("the model of worker {j}"));
                    }
                    return Some(format!(
                        "{what} {w} waits in round {k} of the schedule for {}",
                        wants.join(" and ")
                    ));
                }
                Some(format!(
                    "{what} {w} waits for the averaging reply of worker {j}"
                ))
            })
            .collect()
    }
}

impl AdPsgd {
    /// A correction `δ` that will never be added: its mass is lost.
    fn reply_lost(&mut self, delta: MsgId, cx: &mut Ctx<'_, '_, Event>) {
        self.replies_lost += 1;
        self.landed(delta);
        cx.world.store.release_msg(delta);
    }
}

impl AdPsgdConfig {
    /// `partner = "schedule"` needs the thread and the reference's graph: the odd workers
    /// active, and every pair the rotation schedules an edge.
    fn check_schedule(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        let at = setup.at("partner");
        if self.averaging != Averaging::Thread {
            return Err(ConfigError::new(
                &at,
                "partner = \"schedule\" is the reference's gossip loop: it needs averaging = \"thread\"",
            )
            .hint("per-step averaging draws a partner per step: use partner = \"uniform\" or \"cycle\""));
        }
        let topology = setup.topology;
        let n = topology.len();
        let hint = "the schedule is the reference's rotation over its bipartite exponential graph: \
                    set [topology] kind = \"bipartite-exponential\" (or this entry's topology)";
        let sides = topology.bipartition();
        let odd_active = sides
            .as_ref()
            .is_some_and(|s| s.iter().enumerate().all(|(i, &a)| a == (i % 2 == 1)));
        if n % 2 == 1 || !odd_active {
            return Err(ConfigError::new(
                &at,
                format!(
                    "partner = \"schedule\" ({}) needs the odd workers active and the even ones \
                     passive, as in the reference; this topology ({n} workers) splits them otherwise",
                    setup.path
                ),
            )
            .hint(hint));
        }
        for off in phone_book(n) {
            for a in (1..n).step_by(2) {
                for (i, j) in [(a, (a + off) % n), ((a + n - off) % n, a)] {
                    if !topology.neighbors(i).contains(&j) {
                        return Err(ConfigError::new(
                            &at,
                            format!(
                                "partner = \"schedule\" ({}) pairs workers {i} and {j}, which this \
                                 topology does not link",
                                setup.path
                            ),
                        )
                        .hint(hint));
                    }
                }
            }
        }
        Ok(())
    }
}

impl AlgorithmSpec for AdPsgdConfig {
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        setup.require_connected("AD-PSGD")?;
        if setup.topology.bipartition().is_none() {
            return Err(ConfigError::new(
                "topology.kind",
                format!("AD-PSGD ({}) needs a bipartite topology (active/passive split), but this graph has an odd cycle", setup.path),
            )
            .hint("a ring with an even number of workers, a hypercube or an even torus is bipartite"));
        }
        for (key, bound, default) in [
            (
                "max_averagings_per_step",
                self.max_averagings_per_step,
                Bound::UNBOUNDED,
            ),
            (
                "max_steps_per_averaging",
                self.max_steps_per_averaging,
                one(),
            ),
        ] {
            if bound == Bound::At(0) {
                return Err(ConfigError::new(
                    &setup.at(key),
                    format!("{key} must be a positive number or \"unbounded\", got 0"),
                )
                .hint("1 is the tightest bound"));
            }
            if self.averaging == Averaging::PerStep && bound != default {
                return Err(ConfigError::new(
                    &setup.at(key),
                    format!(
                        "{key} bounds the communication thread: it needs averaging = \"thread\""
                    ),
                )
                .hint(
                    "per-step averaging makes exactly one averaging per step of an active worker",
                ));
            }
        }
        if let Some(us) = self.averaging_overhead_us {
            SimTime::checked_from_f64(us, TimeUnit::Micros, &setup.at("averaging_overhead_us"))
                .map_err(|e| {
                    e.hint("the host time of one averaging besides its transfers; 0 (the default) charges none")
                })?;
        }
        if self.partner == Partner::Schedule {
            self.check_schedule(setup)?;
        }
        if let Some(ms) = self.partner_timeout_ms {
            let at = setup.at("partner_timeout_ms");
            if !(ms.is_finite() && ms > 0.0) {
                return Err(ConfigError::new(
                    &at,
                    format!(
                        "partner_timeout_ms must be a positive number of milliseconds, got {ms}"
                    ),
                )
                .hint(
                    "leave it out for the default, four round trips of a model on an idle network",
                ));
            }
            SimTime::checked_nonzero_from_f64(ms, TimeUnit::Millis, &at)?;
        }
        Ok(())
    }

    fn fault_support(&self, _kind: &'static str, fault: FaultKind) -> FaultSupport {
        if self.partner == Partner::Schedule
            && !matches!(fault, FaultKind::Delay | FaultKind::Duplicate)
        {
            return Err(
                "with partner = \"schedule\" every round waits for the workers scheduled in it, \
                 as in the reference, which has no failure handling: one worker down or one \
                 message lost stops the rotation of every worker for good (delayed and \
                 duplicated messages are fine)",
            );
        }
        // Every kind: see the module's "Under faults".
        Ok(())
    }

    fn build(&self, _kind: &'static str, world: &World<'_>) -> crate::Result<Box<dyn Runnable>> {
        let sides = world.topology.bipartition().ok_or_else(|| {
            ConfigError::new("topology.kind", "AD-PSGD needs a bipartite topology")
        })?;
        let mut alg = AdPsgd::new(self, &sides, world.seed);
        if world.faults().configured() {
            alg = alg.with_timeout(self.partner_timeout(world));
        }
        Ok(Box::new(alg))
    }
}
