//! The model author's API: what an algorithm is ([`Algorithm`]), what it sees while it handles
//! an event ([`Ctx`]) and the world it acts on ([`World`]).
//!
//! An algorithm is a state machine over its own events. The driver ([`crate::engine::run`]) pops
//! the earliest event and hands it to [`Algorithm::handle`] with a [`Ctx`]; the algorithm
//! schedules later events, starts steps, sends messages and records what its workers do, all
//! through the context. Parameters are touched only through the [`crate::store::ReplicaStore`]
//! in [`World::store`]. See the crate documentation for a worked example.

use serde::{Deserialize, Serialize};

use crate::clock::{EventQueue, SimTime};
use crate::cluster::{Cluster, HostWork};
use crate::fault::{Faults, LossCause, Sent, WorkerFault};
use crate::net::Network;
use crate::net::topology::Topology;
use crate::record::{Activity, FaultEvent, FaultMark, MessageRecord, MetricsConfig, Recorder};
use crate::store::lr::{ScheduleProgress, TrainingProgress};
use crate::store::tracked::Tracked;
use crate::store::{GradId, OptimizerConfig, ReplicaStore, Slot};

/// What an algorithm works with: the cluster's compute model, the network, the graph, the
/// replicas and the optimizer's learning-rate rule.
pub struct World<'s> {
    /// Per-worker step durations.
    pub cluster: Cluster,
    /// NICs and links: the workers `0..n`, then any extra nodes the algorithm needs (a parameter
    /// server's shards, see [`crate::algorithms::AlgorithmConfig::extra_nodes`]).
    pub net: Network,
    /// The communication graph.
    pub topology: Topology,
    /// The parameters: the run's store, wrapped to measure gradient staleness
    /// ([`crate::store::tracked`]).
    pub store: Tracked<'s>,
    /// The `[optimizer]` section: base rate, schedule and scaling (the store applies the update
    /// itself; algorithms take the rate from [`World::lr_at`]).
    pub optimizer: OptimizerConfig,
    /// Size of one full model (or gradient) in a message, in bytes.
    pub model_bytes: u64,
    /// The scenario seed (algorithms derive their own streams from it).
    pub seed: u64,
    pub(crate) worker_steps: u64,
    /// Steps of each worker ([`Ctx::step_done`]), the counters of a `progress = "node"` schedule.
    pub(crate) steps_of: Vec<u64>,
    pub(crate) recorder: Recorder,
    pub(crate) eval_replicas: bool,
    pub(crate) link_peaks: bool,
    pub(crate) faults: Faults,
}

impl<'s> World<'s> {
    /// Assembles a world. `optimizer` is the scenario's `[optimizer]` section (the one the store
    /// was built with): its rate, schedule and scaling give [`World::lr_at`].
    pub fn new(
        cluster: Cluster,
        net: Network,
        topology: Topology,
        store: &'s mut dyn ReplicaStore,
        optimizer: &OptimizerConfig,
        seed: u64,
    ) -> Self {
        let model_bytes = net.payload_bytes(store.num_params());
        let recorder = Recorder::new(cluster.workers());
        let steps_of = vec![0; cluster.workers()];
        World {
            cluster,
            net,
            topology,
            store: Tracked::new(store),
            optimizer: optimizer.clone(),
            model_bytes,
            seed,
            worker_steps: 0,
            steps_of,
            recorder,
            eval_replicas: false,
            link_peaks: false,
            faults: Faults::none(),
        }
    }

    /// Injects the scenario's faults ([`crate::fault`]; none by default). Call before the run.
    pub fn set_faults(&mut self, faults: Faults) {
        self.faults = faults;
    }

    /// The faults of the run: which workers are down, what was lost so far.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Applies the `[metrics]` options: replica evaluation, the timeline window, the per-event
    /// logs. Call before the run.
    pub fn set_metrics(&mut self, cfg: &MetricsConfig) {
        self.recorder.configure(cfg);
        self.store.log_gradients(cfg.log_gradients);
        self.eval_replicas = cfg.eval_replicas;
        self.link_peaks = cfg.link_peaks;
    }

    /// What has been recorded so far (activities, waits, message ages, timeline).
    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.cluster.workers()
    }

    /// Worker steps so far (gradients applied, summed over workers).
    pub fn worker_steps(&self) -> u64 {
        self.worker_steps
    }

    /// Steps of `worker` so far (gradients of its own applied, as its algorithm counts steps).
    pub fn worker_steps_of(&self, worker: usize) -> u64 {
        self.steps_of[worker]
    }

    /// Epochs so far: samples processed / training-set size.
    pub fn epochs(&self) -> f64 {
        self.worker_steps as f64 * self.store.batch_size() as f64 / self.store.train_size() as f64
    }

    /// The learning rate in force at `now`: `optimizer.lr`, scaled with the number of workers
    /// and shaped by the schedule, at the run's current progress (see [`crate::store::lr`]). A function
    /// of counters and simulated time only, never of parameter values.
    pub fn lr_at(&self, now: SimTime) -> f64 {
        let n = self.workers();
        let peak = self.optimizer.lr * self.optimizer.scale_with_workers.factor(n);
        if self.optimizer.schedule.is_flat() {
            return peak;
        }
        let progress = TrainingProgress {
            epochs: self.epochs(),
            steps: self.worker_steps as f64 / n as f64,
            seconds: now.as_secs_f64(),
        };
        self.optimizer.schedule.at(peak, &progress)
    }

    /// The learning rate in force at `now` for an update that belongs to `worker` (its own step,
    /// or a gradient applied to its replica). With `[optimizer.schedule] progress = "global"`
    /// (the default) this is [`World::lr_at`]; with `"node"` the schedule reads `worker`'s own
    /// counter `c` ([`World::worker_steps_of`], this step not yet counted): `c` steps, and
    /// `c · batch / (train size / n)` epochs, the node's steps over its share of the training
    /// set, as each node of the LAP-SGD reference counts its epochs ([`crate::store::lr`]).
    /// With equal counters the two rules give the same rate.
    pub fn lr_for(&self, worker: usize, now: SimTime) -> f64 {
        if self.optimizer.schedule.progress == ScheduleProgress::Global {
            return self.lr_at(now);
        }
        let n = self.workers();
        let peak = self.optimizer.lr * self.optimizer.scale_with_workers.factor(n);
        if self.optimizer.schedule.is_flat() {
            return peak;
        }
        let c = self.steps_of[worker] as f64;
        let progress = TrainingProgress {
            epochs: c * self.store.batch_size() as f64 * n as f64 / self.store.train_size() as f64,
            steps: c,
            seconds: now.as_secs_f64(),
        };
        self.optimizer.schedule.at(peak, &progress)
    }
}

/// What a checkpoint keeps of a [`World`], borrowed for writing ([`WorldState`] reads it back):
/// the parts that change while a run goes on. The graph, the `[optimizer]` section, the seed and
/// the message size are the scenario's and are rebuilt with the world.
#[derive(Serialize)]
pub(crate) struct WorldStateRef<'a> {
    cluster: &'a Cluster,
    net: &'a Network,
    worker_steps: u64,
    steps_of: &'a [u64],
    recorder: &'a Recorder,
    faults: &'a Faults,
    store: Vec<u8>,
}

/// [`WorldStateRef`], owned: what [`World::restore`] takes.
#[derive(Deserialize)]
pub(crate) struct WorldState {
    cluster: Cluster,
    net: Network,
    worker_steps: u64,
    steps_of: Vec<u64>,
    recorder: Recorder,
    faults: Faults,
    store: Vec<u8>,
}

impl World<'_> {
    /// The world's changing state, for a checkpoint; the store's through
    /// [`ReplicaStore::save_state`].
    pub(crate) fn checkpoint(&mut self) -> Result<WorldStateRef<'_>, String> {
        let store = self.store.save_state()?;
        Ok(WorldStateRef {
            cluster: &self.cluster,
            net: &self.net,
            worker_steps: self.worker_steps,
            steps_of: &self.steps_of,
            recorder: &self.recorder,
            faults: &self.faults,
            store,
        })
    }

    /// Puts back what [`World::checkpoint`] saved, into a world built from the same scenario
    /// (with its metrics options set: the recorder keeps its configuration).
    pub(crate) fn restore(&mut self, state: WorldState) -> Result<(), String> {
        if state.steps_of.len() != self.steps_of.len() {
            return Err(format!(
                "the checkpoint has {} workers, the scenario {}",
                state.steps_of.len(),
                self.steps_of.len()
            ));
        }
        self.store.restore_state(&state.store)?;
        self.cluster = state.cluster;
        self.net = state.net;
        self.worker_steps = state.worker_steps;
        self.steps_of = state.steps_of;
        self.recorder = state.recorder;
        self.faults = state.faults;
        Ok(())
    }
}

/// The live worker a rejoining `worker` copies under `rejoin_state = "neighbour"`
/// ([`Algorithm::rejoin_model`]): its lowest-numbered neighbour in the graph that is up, else the
/// next worker up after it in index order; `None` when every other worker is down.
pub fn neighbour_model(worker: usize, world: &World<'_>) -> Option<usize> {
    let n = world.workers();
    let up = |j: &usize| *j != worker && *j < n && !world.faults.is_down(*j);
    let mut graph: Vec<usize> = world
        .topology
        .neighbors(worker)
        .iter()
        .copied()
        .filter(up)
        .collect();
    graph.sort_unstable();
    graph
        .first()
        .copied()
        .or_else(|| (1..n).map(|k| (worker + k) % n).find(up))
}

/// An algorithm's view of the simulation while it handles one event.
pub struct Ctx<'a, 's, E> {
    pub(crate) now: SimTime,
    pub(crate) queue: &'a mut EventQueue<E>,
    /// Compute, network, graph and replicas.
    pub world: &'a mut World<'s>,
}

impl<E> Ctx<'_, '_, E> {
    /// The current simulated time.
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// Schedules `event` at absolute time `at` (not before now).
    pub fn at(&mut self, at: SimTime, event: E) {
        debug_assert!(at >= self.now, "an event cannot be scheduled in the past");
        self.queue.push(at.max(self.now), event);
    }

    /// Schedules `event` after `delay`.
    pub fn after(&mut self, delay: SimTime, event: E) {
        self.queue.push(self.now + delay, event);
    }

    /// The learning rate in force now ([`World::lr_at`]), for an update that belongs to no
    /// single worker (all-reduce's averaged step, a parameter server's shard step).
    pub fn lr(&self) -> f64 {
        self.world.lr_at(self.now)
    }

    /// The learning rate in force now for an update of `worker` ([`World::lr_for`]): the
    /// run's progress, or `worker`'s own under `progress = "node"`.
    pub fn lr_for(&self, worker: usize) -> f64 {
        self.world.lr_for(worker, self.now)
    }

    /// Starts a step of `worker`: reads its replica, requests a gradient on its next minibatch
    /// and schedules `done` when the cluster model says the step ends. Returns the gradient.
    pub fn start_step(&mut self, worker: usize, done: E) -> GradId {
        let (grad, d) = self.begin_step(worker, 1.0);
        self.after(d, done);
        grad
    }

    /// Starts a step of `worker` without scheduling its end: reads its replica, requests the
    /// gradient at `scale ·` replica ([`ReplicaStore::request_gradient_scaled`]) on its next
    /// minibatch, and draws the step's duration from the cluster model. Returns both; the
    /// algorithm schedules what happens when (and while) the step runs. The worker's activity
    /// becomes [`Activity::Compute`]; if it was computing already, the timeline starts a new
    /// interval, so every step shows.
    ///
    /// A step starts once the worker's host work is done ([`Ctx::host_work`]): the duration
    /// returned includes the wait.
    pub fn begin_step(&mut self, worker: usize, scale: f64) -> (GradId, SimTime) {
        let grad = self.world.store.request_gradient_scaled(worker, scale);
        let start = self.world.cluster.host().free_at(worker, self.now);
        let d = (start - self.now) + self.world.cluster.next_step_time(worker, start);
        self.world
            .cluster
            .host_mut()
            .computing(worker, self.now + d);
        if self.world.recorder.activity(worker) == Activity::Compute {
            // Back-to-back steps: keep them apart on the timeline.
            self.world.recorder.split(worker, self.now);
        } else {
            self.activity(worker, Activity::Compute);
        }
        (grad, d)
    }

    /// `node` (a worker, or an extra node such as a server) does `work` outside its gradient
    /// steps, now or after the host work it has queued: its next step, its next message
    /// ([`Ctx::send`]) and its next contribution to an all-reduce start once the work is done.
    /// Free unless `[cluster]` sets `host_gbps` or `host_tflops` ([`crate::cluster::host`]).
    /// Returns when the work ends.
    pub fn host_work(&mut self, node: usize, work: HostWork) -> SimTime {
        self.world.cluster.host_mut().charge(node, self.now, work)
    }

    /// Sends a message of `payload` bytes (the network adds its header) from `src` to `dst`
    /// now; `arrival` is delivered when it lands, unless a fault loses it ([`Sent::lost`]; then
    /// nothing is scheduled). Without `[[faults]]` every message lands.
    ///
    /// The message leaves once `src`'s host work is done ([`Ctx::host_work`]).
    pub fn send(&mut self, src: usize, dst: usize, payload: u64, arrival: E) -> Sent {
        let at = self.world.cluster.host().free_at(src, self.now);
        let sent = self.transfer(at, src, dst, payload);
        if sent.lost.is_none() {
            self.queue.push(sent.arrive, arrival);
        }
        sent
    }

    /// Posts a message of `payload` bytes from `src` to `dst` at `at` and returns when it lands
    /// (or that it is lost), scheduling nothing: for a collective computed as a whole when its
    /// outcome is determined ([`crate::algorithms::ring`]), `at` may lie before now. The caller
    /// guarantees that nothing used the NICs of `src` and `dst` after `at`, so the network's
    /// state is what it would have been then.
    ///
    /// Under `[[faults]]`, the message may be lost, sent twice (the copy is on the wire, and
    /// discarded by the receiver) or delayed ([`crate::fault`]).
    pub fn transfer(&mut self, at: SimTime, src: usize, dst: usize, payload: u64) -> Sent {
        let t = self.post(at, src, dst, payload);
        if !self.world.faults.configured() {
            return Sent {
                arrive: t,
                lost: None,
            };
        }
        let (lost, duplicate, delay) = self.world.faults.message(at, src, dst);
        if duplicate {
            self.post(at, src, dst, payload);
        }
        let marks = [
            lost.map(|cause| match cause {
                LossCause::Random => FaultMark::Lost,
                LossCause::LinkDown => FaultMark::LostLinkDown,
            }),
            duplicate.then_some(FaultMark::Duplicated),
            (lost.is_none() && delay > SimTime::ZERO).then_some(FaultMark::Delayed),
        ];
        for mark in marks.into_iter().flatten() {
            self.world.recorder.fault(FaultEvent {
                time: at,
                mark,
                node: src,
                peer: Some(dst),
            });
        }
        let arrive = match lost {
            Some(_) => t,
            None => self.world.faults.fifo(src, dst, t.saturating_add(delay)),
        };
        Sent { arrive, lost }
    }

    fn post(&mut self, at: SimTime, src: usize, dst: usize, payload: u64) -> SimTime {
        let t = self.world.net.send(at, src, dst, payload);
        self.world.recorder.message(MessageRecord {
            src,
            dst,
            bytes: payload + self.world.net.header_bytes(),
            send: at,
            arrive: t,
        });
        t
    }

    /// Whether the run has `[[faults]]` entries: an algorithm schedules what only faults need
    /// (a reply timeout) only then, so a run without faults has exactly its usual events.
    pub fn faults_configured(&self) -> bool {
        self.world.faults.configured()
    }

    /// Whether `worker` is down (crashed and not rejoined).
    pub fn is_down(&self, worker: usize) -> bool {
        self.world.faults.is_down(worker)
    }

    /// A message lands at `dst` now: `false`, and the message counted as dropped, when `dst` is
    /// down; the algorithm then discards it.
    pub fn deliverable(&mut self, dst: usize) -> bool {
        let ok = self.world.faults.deliverable(dst);
        if !ok {
            self.world.recorder.fault(FaultEvent {
                time: self.now,
                mark: FaultMark::DroppedDown,
                node: dst,
                peer: None,
            });
        }
        ok
    }

    /// Counts one step of `worker` (a gradient of its own applied, as the algorithm counts
    /// steps).
    pub fn step_done(&mut self, worker: usize) {
        self.world.worker_steps += 1;
        self.world.steps_of[worker] += 1;
        self.world.recorder.step(worker, self.now);
    }

    /// `worker` now does `activity` ([`Activity::Compute`], [`Activity::Communicate`] or
    /// [`Activity::Idle`]; a wait on a peer is [`Ctx::block`], ended by [`Ctx::unblock`]).
    pub fn activity(&mut self, worker: usize, activity: Activity) {
        debug_assert!(
            activity != Activity::Blocked,
            "a wait starts with Ctx::block"
        );
        self.world.recorder.set(worker, activity, self.now, None);
    }

    /// `worker` now waits for a peer's progress ([`Activity::Blocked`]).
    pub fn block(&mut self, worker: usize) {
        self.world
            .recorder
            .set(worker, Activity::Blocked, self.now, None);
    }

    /// `worker`'s wait ends because of peer `by` (its time blocked is attributed to `by`); it
    /// goes on with `next`.
    pub fn unblock(&mut self, worker: usize, by: usize, next: Activity) {
        self.world.recorder.set(worker, next, self.now, Some(by));
    }

    /// `receiver` mixed a message `age` iterations old (SGP).
    pub fn message_age(&mut self, receiver: usize, age: u64) {
        self.world.recorder.message_age(receiver, age);
    }

    /// Records that `receiver` mixed messages in at one step, the oldest of them `age` of its
    /// iterations old (push-sum: called once per step that mixes at least one message).
    pub fn mix_age(&mut self, receiver: usize, age: u64) {
        self.world.recorder.mix_age(receiver, age);
    }
}

/// Staleness statistics an algorithm measures (what "staleness" counts is the algorithm's own
/// definition, stated in its documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StalenessStats {
    /// Number of measurements.
    pub count: u64,
    /// Their mean (0 when there is none).
    pub mean: f64,
    /// Their maximum.
    pub max: u64,
}

impl StalenessStats {
    /// Adds one measurement.
    pub fn record(&mut self, s: u64) {
        self.count += 1;
        self.mean += (s as f64 - self.mean) / self.count as f64;
        self.max = self.max.max(s);
    }
}

/// A distributed training algorithm: a state machine over its own events.
pub trait Algorithm {
    /// The events this algorithm schedules for itself.
    type Event;
    /// Schedules the first events (and adds any store rows it needs).
    fn start(&mut self, cx: &mut Ctx<'_, '_, Self::Event>);
    /// Handles one event.
    fn handle(&mut self, event: Self::Event, cx: &mut Ctx<'_, '_, Self::Event>);
    /// Who waits for whom right now (empty when nobody waits); used to report deadlocks.
    fn waiting(&self) -> Vec<String>;
    /// The model evaluation points measure, as `(row, weight)` terms of `Σ weight · row`; `None`
    /// (the default) is the average of the worker rows. A parameter server answers its server
    /// row; push-sum answers the de-biased average `Σ x_i / (n·w_i)`.
    fn eval_model(&self) -> Option<Vec<(usize, f64)>> {
        None
    }
    /// The staleness the algorithm measured so far, where it measures one.
    fn staleness(&self) -> Option<StalenessStats> {
        None
    }
    /// The scales `s_i` that de-bias the worker replicas for the consensus distance and the
    /// replica evaluations (`z_i = s_i·x_i`); `None` (the default) is all 1. Push-sum answers
    /// `1/w_i`.
    fn replica_scales(&self) -> Option<Vec<f64>> {
        None
    }
    /// Algorithm-specific quantities, named, sampled at each evaluation point (push-sum's
    /// weight range, DASGD's staleness between models). Called once per point; an algorithm may
    /// reset what it accumulates between points. The default is none.
    fn series(&mut self) -> Vec<(&'static str, f64)> {
        Vec::new()
    }
    /// A worker crashed or rejoined ([`crate::fault`]). Called before any event due at the same
    /// instant. On a crash the worker is down already: the algorithm abandons its step under way
    /// and ignores its events until it rejoins; on a rejoin it restarts it with its last state.
    /// Reached only for the fault kinds the algorithm accepts
    /// ([`crate::algorithms::AlgorithmSpec::fault_support`]); the default does nothing.
    fn on_fault(&mut self, _fault: WorkerFault, _cx: &mut Ctx<'_, '_, Self::Event>) {}
    /// Under `[[faults]]` with `rejoin_state = "neighbour"`: the model a rejoining `worker`
    /// takes, as the terms of a mix into its row ([`ReplicaStore::mix`]), applied just before
    /// [`Algorithm::on_fault`] hands it the rejoin. `None` keeps its last state. The default
    /// ([`neighbour_model`]): the model of its lowest-numbered neighbour in the graph that is
    /// up, else of the next worker up after it in index order (all-reduce's ring successor);
    /// `None` when every other worker is down. Push-sum overrides it to keep the weights' sum.
    fn rejoin_model(&self, worker: usize, world: &World<'_>) -> Option<Vec<(Slot, f64)>> {
        neighbour_model(worker, world).map(|j| vec![(Slot::Row(j), 1.0)])
    }
    /// Push-sum weight lost with dropped messages so far (push-sum algorithms only).
    fn mass_lost(&self) -> Option<f64> {
        None
    }
    /// What the algorithm's own fault handling did so far, as named counts (AD-PSGD's partner
    /// timeouts, a parameter server's retransmissions, DASGD's gradient applications lost),
    /// reported in `summary.json`'s `faults`. Asked only for runs with `[[faults]]`; the default
    /// is none.
    fn fault_counts(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}
