//! AD-PSGD: asynchronous decentralized parallel SGD.
//!
//! Lian, Zhang, Zhang & Liu, "Asynchronous Decentralized Parallel Stochastic Gradient Descent",
//! ICML 2018. The workers are split into an active and a passive side of a bipartite graph
//! ([`crate::net::topology::Topology::bipartition`]); only active workers initiate averaging, always
//! with a passive neighbour, so no two averagings contend for the same pair in a cycle. The
//! averaging partner is drawn uniformly from the active worker's neighbours (`partner =
//! "uniform"`, from the worker's algorithm stream) or taken in turn (`partner = "cycle"`).
//!
//! Two ways to schedule the averaging (`averaging`):
//!
//! ```text
//! per-step (default), every worker loops without a global barrier:
//!     read x̂ ← x_i; compute g on x̂ and a minibatch           (compute time from the cluster)
//!     if i is active:
//!         pick a passive neighbour j; send x_i to j; j sets x_i, x_j ← (x_i + x_j)/2 atomically
//!         on arrival and replies; wait for the reply
//!     x_i ← optimizer step with g                               (the rate in force now)
//!
//! thread (the paper's implementation: a communication thread beside the computation thread):
//!     computation: read x̂ ← x_i; compute g; x_i ← optimizer step with g; repeat (never waits)
//!     communication of active i, whenever at least one gradient was applied since its last
//!     averaging started:
//!         snap ← x_i; send snap to j;
//!         j, on arrival: x_j ← (x_j + snap)/2; replies with δ = x_j − snap   (= avg − snap)
//!         i, on the reply: x_i ← x_i + δ        (keeps the local steps made meanwhile)
//! ```
//!
//! Passive workers never initiate averaging and never wait: their communication side answers
//! averaging requests while they compute. In per-step mode an active worker waits only for a
//! passive worker's reply, which never waits for anyone, so the scheme cannot deadlock; the
//! averaging happens at the instant the request reaches `j`, and `x_i` is set then too, which is
//! exact because only `i` itself touches an active replica, and `i` is waiting for the reply. In
//! thread mode nobody waits.
//!
//! **Activities** ([`crate::record`]): in per-step mode an active worker communicates from
//! sending its averaging request until the reply is back (the passive partner answers on
//! arrival, so only the network delays it) and computes otherwise; passive workers always
//! compute. In thread mode every worker always computes: the communication thread runs beside the
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
//!   rejoin it starts a new step with the replica it had.
//!
//! An active worker whose every neighbour is cut off for good (down with no rejoin to come, or
//! behind a `link-down` window that never closes) stops retrying and waits: with nothing else
//! left to happen, the run stalls naming it. `partner_timeouts`, `late_replies` and
//! `replies_lost` are reported in `summary.json`'s `faults`.

use std::collections::BTreeMap;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::algorithm::{Algorithm, Ctx, World};
use crate::algorithms::{AlgorithmSpec, Setup};
use crate::engine::SimTime;
use crate::engine::rng::{Stream, StreamKind, stream};
use crate::engine::time::TimeUnit;
use crate::engine::{Checkpointing, Observer, Outcome, RunConfig, run_checkpointed};
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
}

/// When averaging happens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Averaging {
    /// Once per gradient step, between computing and applying the gradient.
    #[default]
    PerStep,
    /// In a communication thread that runs independently of computation.
    Thread,
}

/// Options of AD-PSGD.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdPsgdConfig {
    /// `uniform` (default) or `cycle`.
    #[serde(default)]
    pub partner: Partner,
    /// `per-step` (default) or `thread`.
    #[serde(default)]
    pub averaging: Averaging,
    /// Under `[[faults]]`: how long an active worker waits for its partner's reply before it
    /// gives up and asks another neighbour, milliseconds (default: four round trips of a model
    /// on an idle network, `8·(S/B + α)`). Unused without faults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partner_timeout_ms: Option<f64>,
}

impl AdPsgdConfig {
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
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct WorkerState {
    active: bool,
    grad: Option<GradId>,
    /// Per-step: the partner whose reply the worker waits for. Thread: the partner of the
    /// averaging in flight.
    waiting_for: Option<usize>,
    /// Thread: a gradient was applied since the last averaging started.
    dirty: bool,
    next_partner: usize,
    rng: Stream,
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
}

/// The state machine of AD-PSGD.
#[derive(Serialize, Deserialize)]
pub struct AdPsgd {
    partner: Partner,
    averaging: Averaging,
    workers: Vec<WorkerState>,
    in_flight: Vec<MsgId>,
    pairs: BTreeMap<(usize, usize), u64>,
    /// Under faults: the partner timeout (`None`: no faults, no timeouts).
    timeout: Option<SimTime>,
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
            workers: sides
                .iter()
                .enumerate()
                .map(|(i, &active)| WorkerState {
                    active,
                    grad: None,
                    waiting_for: None,
                    dirty: false,
                    next_partner: 0,
                    rng: stream(seed, StreamKind::Algorithm, i as u64),
                    attempt: 0,
                    life: 0,
                    down: false,
                    avoid: None,
                    parked: false,
                })
                .collect(),
            in_flight: Vec::new(),
            pairs: BTreeMap::new(),
            timeout: None,
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
    pub fn pair_counts(&self) -> &BTreeMap<(usize, usize), u64> {
        &self.pairs
    }

    /// Thread mode: the replies `δ = avg − snap` in flight (they carry replica mass).
    pub fn deltas_in_flight(&self) -> &[MsgId] {
        &self.in_flight
    }

    fn pick(&mut self, w: usize, peers: &[usize]) -> usize {
        let j = self.draw(w, peers);
        *self.pairs.entry((w, j)).or_default() += 1;
        j
    }

    fn draw(&mut self, w: usize, peers: &[usize]) -> usize {
        let st = &mut self.workers[w];
        // After a timeout: another neighbour than the one that did not answer, if there is one.
        let avoid = st.avoid.take().filter(|&a| peers.iter().any(|&p| p != a));
        match self.partner {
            Partner::Uniform => match avoid {
                None => peers[st.rng.random_range(0..peers.len())],
                Some(a) => {
                    let others: Vec<usize> = peers.iter().copied().filter(|&p| p != a).collect();
                    others[st.rng.random_range(0..others.len())]
                }
            },
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
    }

    fn next_step(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let life = self.workers[w].life;
        self.workers[w].grad = Some(cx.start_step(w, Event::ComputeDone(w, life)));
    }

    /// Thread mode: starts an averaging of active `w` if none is in flight and it has new
    /// local progress.
    fn maybe_average(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let st = &self.workers[w];
        if !st.active || st.waiting_for.is_some() || !st.dirty || st.parked || st.down {
            return;
        }
        self.workers[w].dirty = false;
        let snap = cx.world.store.new_msg(&[(Slot::Row(w), 1.0)]);
        self.request_average(w, Some(snap), cx);
    }

    /// Active `w` picks a passive neighbour, sends it its model and waits for the reply;
    /// `snap` is the model sent (thread mode), `None` when `w` averages its live row.
    fn request_average(&mut self, w: usize, snap: Option<MsgId>, cx: &mut Ctx<'_, '_, Event>) {
        let peers = cx.world.topology.neighbors(w).to_vec();
        let j = self.pick(w, &peers);
        let st = &mut self.workers[w];
        st.waiting_for = Some(j);
        st.attempt += 1;
        let attempt = st.attempt;
        let bytes = cx.world.model_bytes;
        let sent = cx.send(
            w,
            j,
            bytes,
            Event::AverageRequest {
                from: w,
                to: j,
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
            cx.after(timeout, Event::Timeout { worker: w, attempt });
        }
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
    /// applies the gradient and starts the next step; thread mode may start another averaging.
    fn wait_over(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        self.workers[w].waiting_for = None;
        match self.averaging {
            Averaging::PerStep => {
                self.apply(w, cx);
                self.next_step(w, cx);
            }
            Averaging::Thread => self.maybe_average(w, cx),
        }
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
                // The averaging under way is abandoned: start another now.
                self.workers[w].dirty = true;
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
    }

    fn handle(&mut self, event: Event, cx: &mut Ctx<'_, '_, Event>) {
        match (self.averaging, event) {
            (_, Event::ComputeDone(w, life)) if life != self.workers[w].life => {}
            (Averaging::PerStep, Event::ComputeDone(w, _)) if self.workers[w].active => {
                cx.activity(w, Activity::Communicate);
                self.average_step(w, cx);
            }
            (_, Event::ComputeDone(w, _)) => {
                self.apply(w, cx);
                self.next_step(w, cx);
                if self.averaging == Averaging::Thread {
                    self.workers[w].dirty = true;
                    self.maybe_average(w, cx);
                }
            }
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
                let bytes = cx.world.model_bytes;
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
                        self.in_flight.push(delta);
                        Some(delta)
                    }
                };
                let sent = cx.send(
                    to,
                    from,
                    bytes,
                    Event::AverageReply {
                        to: from,
                        delta,
                        attempt,
                    },
                );
                if sent.lost.is_some()
                    && let Some(m) = delta
                {
                    self.reply_lost(m, cx);
                }
            }
            (_, Event::AverageReply { to, delta, attempt }) => {
                if let Some(delta) = delta {
                    let store = &mut cx.world.store;
                    store.mix(to, &[(Slot::Row(to), 1.0), (Slot::Msg(delta), 1.0)]);
                    store.release_msg(delta);
                    self.in_flight.retain(|&m| m != delta);
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
                st.dirty = false;
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
                s.waiting_for
                    .map(|j| format!("{what} {w} waits for the averaging reply of worker {j}"))
            })
            .collect()
    }
}

impl AdPsgd {
    /// A correction `δ` that will never be added: its mass is lost.
    fn reply_lost(&mut self, delta: MsgId, cx: &mut Ctx<'_, '_, Event>) {
        self.replies_lost += 1;
        self.in_flight.retain(|&m| m != delta);
        cx.world.store.release_msg(delta);
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

    fn fault_support(&self, _kind: &'static str, _fault: FaultKind) -> FaultSupport {
        // Every kind: see the module's "Under faults".
        Ok(())
    }

    fn run(
        &self,
        _kind: &'static str,
        world: &mut World<'_>,
        run_cfg: &RunConfig,
        observer: &mut dyn Observer,
        ckpt: Checkpointing<'_>,
    ) -> crate::Result<Outcome> {
        let sides = world.topology.bipartition().ok_or_else(|| {
            ConfigError::new("topology.kind", "AD-PSGD needs a bipartite topology")
        })?;
        let mut alg = AdPsgd::new(self, &sides, world.seed);
        if world.faults().configured() {
            alg = alg.with_timeout(self.partner_timeout(world));
        }
        run_checkpointed(&mut alg, world, run_cfg, observer, ckpt)
    }
}
