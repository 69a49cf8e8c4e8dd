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

use serde::{Deserialize, Serialize};

use crate::clock::rng::{Stream, StreamKind, stream};
use crate::engine::SimTime;
use crate::store::{GradId, MsgId};

// The options and their checks (`config`), the events and the state machine's state (here), the
// dispatch of each event to its handler (`handlers`), the steps and averagings the handlers drive
// (`exchange`), and the reference's rotation (`schedule`).
mod config;
mod exchange;
mod handlers;
mod schedule;

pub use config::{AdPsgdConfig, Averaging, Bound, Partner, Unbounded};
use schedule::Schedule;
pub use schedule::phone_book;

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
        self.schedule.as_ref().map(|s| s.rounds(worker))
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
}
