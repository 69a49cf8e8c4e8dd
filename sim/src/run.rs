//! Running an algorithm: the event loop, stop rules and evaluation points.
//!
//! The loop pops the earliest event, advances the clock to it and hands it to the algorithm. An
//! evaluation point at time `T` sees the state after every event with time `≤ T` and before any
//! later one. A run stops at the first stop rule reached: a simulated-time limit (checked before
//! an event later than the limit is processed), a number of epochs or of worker steps (checked
//! after each event). If the queue runs dry first while workers wait, the run is a deadlock and
//! fails with who waits for whom ([`Algorithm::waiting`]).
//!
//! An evaluation point measures the model the algorithm names ([`Algorithm::eval_model`]): the
//! average of the worker replicas unless it says otherwise (a parameter server's model, push-sum's
//! de-biased average). It also measures the consensus distance of the worker replicas
//! ([`ReplicaStore::consensus_distance`], de-biased by [`Algorithm::replica_scales`]), every
//! replica when `[metrics] eval_replicas` is set, the suboptimality when the model knows its
//! optimum, and the algorithm's own series ([`Algorithm::series`]).
//!
//! Evaluation points fall on a grid of simulated time, `0, e, 2e, …` with `e = eval_every_s`,
//! and, with `eval_every_steps = N`, also right after each event that brings the worker steps to
//! or past a multiple of `N` (one point per event, at that event's time). `eval_every_s = 0`
//! turns the time grid off when `eval_every_steps` is set. There is always a point at time 0 and
//! one at the stop.
//!
//! While it runs, the world records what happened ([`crate::record`]): each worker's activity,
//! link totals, message ages, and — in the store layer ([`crate::tracked`]) — the staleness of
//! every applied gradient; the [`Outcome`] carries it all as a [`RunRecord`]. With the per-event
//! logs on, every applied gradient and every message is handed to the [`Observer`] after the
//! event that produced it.
//!
//! [`run_inspect`] also hands the algorithm and the world to a hook after every event, which is
//! how tests check an algorithm's invariant at every event.

use serde::{Deserialize, Serialize};

use crate::cluster::Cluster;
use crate::engine::EventQueue;
use crate::error::{ConfigError, Error, Result};
use crate::lr::Progress as LrProgress;
use crate::network::{Network, NetworkStats};
use crate::record::{Activity, GradientRecord, MessageRecord, MetricsConfig, Recorder, RunRecord};
use crate::store::{Evaluation, GradId, OptimizerConfig, ReplicaStore};
use crate::time::SimTime;
use crate::topology::Topology;
use crate::tracked::Tracked;

fn default_eval_every_s() -> f64 {
    1.0
}

/// The `[run]` section: when to stop and how often to evaluate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Stop when simulated time would pass this many seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sim_time_s: Option<f64>,
    /// Stop after this many epochs (samples processed / training-set size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epochs: Option<f64>,
    /// Stop after this many worker steps (gradients applied, summed over workers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_steps: Option<u64>,
    /// Evaluate the average model every this many simulated seconds (0: never on a time grid,
    /// only with `eval_every_steps`).
    #[serde(default = "default_eval_every_s")]
    pub eval_every_s: f64,
    /// Also evaluate after each event that brings the worker steps (summed over workers) to or
    /// past a multiple of this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_every_steps: Option<u64>,
}

impl RunConfig {
    /// Checks every value; at least one stop rule is required.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.sim_time_s.is_none() && self.epochs.is_none() && self.worker_steps.is_none() {
            return Err(ConfigError::new("run", "no stop rule is set")
                .hint("set at least one of run.sim_time_s, run.epochs or run.worker_steps"));
        }
        if let Some(t) = self.sim_time_s
            && !(t.is_finite() && t > 0.0)
        {
            return Err(ConfigError::new(
                "run.sim_time_s",
                format!("sim_time_s must be a positive number of seconds, got {t}"),
            ));
        }
        if let Some(e) = self.epochs
            && !(e.is_finite() && e > 0.0)
        {
            return Err(ConfigError::new(
                "run.epochs",
                format!("epochs must be positive, got {e}"),
            ));
        }
        if self.worker_steps == Some(0) {
            return Err(ConfigError::new(
                "run.worker_steps",
                "worker_steps must be at least 1",
            ));
        }
        if self.eval_every_steps == Some(0) {
            return Err(ConfigError::new(
                "run.eval_every_steps",
                "eval_every_steps must be at least 1",
            )
            .hint(
                "evaluate every N worker steps, summed over workers, e.g. eval_every_steps = 100",
            ));
        }
        let off = self.eval_every_s == 0.0 && self.eval_every_steps.is_some();
        if !(self.eval_every_s.is_finite() && (self.eval_every_s > 0.0 || off)) {
            return Err(ConfigError::new(
                "run.eval_every_s",
                format!(
                    "eval_every_s must be a positive number of seconds, got {}",
                    self.eval_every_s
                ),
            )
            .hint("eval_every_s = 0 turns the time grid off only together with eval_every_steps"));
        }
        Ok(())
    }
}

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
    /// ([`crate::tracked`]).
    pub store: Tracked<'s>,
    /// The `[optimizer]` section: base rate, schedule and scaling (the store applies the update
    /// itself; algorithms take the rate from [`World::lr_at`]).
    pub optimizer: OptimizerConfig,
    /// Size of one full model (or gradient) in a message, in bytes.
    pub model_bytes: u64,
    /// The scenario seed (algorithms derive their own streams from it).
    pub seed: u64,
    worker_steps: u64,
    recorder: Recorder,
    eval_replicas: bool,
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
        World {
            cluster,
            net,
            topology,
            store: Tracked::new(store),
            optimizer: optimizer.clone(),
            model_bytes,
            seed,
            worker_steps: 0,
            recorder,
            eval_replicas: false,
        }
    }

    /// Applies the `[metrics]` options: replica evaluation, the timeline window, the per-event
    /// logs. Call before the run.
    pub fn set_metrics(&mut self, cfg: &MetricsConfig) {
        self.recorder.configure(cfg);
        self.store.log_gradients(cfg.log_gradients);
        self.eval_replicas = cfg.eval_replicas;
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

    /// Epochs so far: samples processed / training-set size.
    pub fn epochs(&self) -> f64 {
        self.worker_steps as f64 * self.store.batch_size() as f64 / self.store.train_size() as f64
    }

    /// The learning rate in force at `now`: `optimizer.lr`, scaled with the number of workers
    /// and shaped by the schedule, at the run's current progress (see [`crate::lr`]). A function
    /// of counters and simulated time only, never of parameter values.
    pub fn lr_at(&self, now: SimTime) -> f64 {
        let n = self.workers();
        let peak = self.optimizer.lr * self.optimizer.scale_with_workers.factor(n);
        let progress = LrProgress {
            epochs: self.epochs(),
            steps: self.worker_steps as f64 / n as f64,
            seconds: now.as_secs_f64(),
        };
        self.optimizer.schedule.at(peak, &progress)
    }
}

/// An algorithm's view of the simulation while it handles one event.
pub struct Ctx<'a, 's, E> {
    now: SimTime,
    queue: &'a mut EventQueue<E>,
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

    /// The learning rate in force now ([`World::lr_at`]).
    pub fn lr(&self) -> f64 {
        self.world.lr_at(self.now)
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
    pub fn begin_step(&mut self, worker: usize, scale: f64) -> (GradId, SimTime) {
        let grad = self.world.store.request_gradient_scaled(worker, scale);
        let d = self.world.cluster.next_step_time(worker, self.now);
        if self.world.recorder.activity(worker) == Activity::Compute {
            // Back-to-back steps: keep them apart on the timeline.
            self.world.recorder.split(worker, self.now);
        } else {
            self.activity(worker, Activity::Compute);
        }
        (grad, d)
    }

    /// Sends a message of `payload` bytes (the network adds its header) from `src` to `dst`
    /// now; `arrival` is delivered when it lands.
    pub fn send(&mut self, src: usize, dst: usize, payload: u64, arrival: E) {
        let t = self.transfer(self.now, src, dst, payload);
        self.queue.push(t, arrival);
    }

    /// Posts a message of `payload` bytes from `src` to `dst` at `at` and returns when it lands,
    /// scheduling nothing: for a collective computed as a whole when its outcome is determined
    /// ([`crate::algorithms::ring`]), `at` may lie before now. The caller guarantees that nothing
    /// used the NICs of `src` and `dst` after `at`, so the network's state is what it would have
    /// been then.
    pub fn transfer(&mut self, at: SimTime, src: usize, dst: usize, payload: u64) -> SimTime {
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

    /// Counts one step of `worker` (a gradient of its own applied, as the algorithm counts
    /// steps).
    pub fn step_done(&mut self, worker: usize) {
        self.world.worker_steps += 1;
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
}

/// Staleness statistics an algorithm measures (what "staleness" counts is the algorithm's own
/// definition, stated in its documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
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
    /// Short name used in outputs (`allreduce`, `adpsgd`, …).
    fn name(&self) -> &str;
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
}

/// Minimum, mean and maximum of a quantity over the worker replicas.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// Smallest value.
    pub min: f64,
    /// Mean.
    pub mean: f64,
    /// Largest value.
    pub max: f64,
}

impl Spread {
    /// The spread of `values` (NaN where there is none; NaN values are ignored by min and max).
    pub fn of(values: impl IntoIterator<Item = f64>) -> Spread {
        let (mut min, mut max, mut sum, mut count) = (f64::NAN, f64::NAN, 0.0, 0usize);
        for v in values {
            min = min.min(v);
            max = max.max(v);
            sum += v;
            count += 1;
        }
        Spread {
            min,
            mean: if count == 0 {
                f64::NAN
            } else {
                sum / count as f64
            },
            max,
        }
    }
}

/// Loss and accuracy of every worker replica at an evaluation point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReplicaEvals {
    /// Held-out loss over the replicas.
    pub loss: Spread,
    /// Held-out accuracy over the replicas.
    pub accuracy: Spread,
}

/// One evaluation point.
#[derive(Clone, Debug, PartialEq)]
pub struct EvalPoint {
    /// When.
    pub time: SimTime,
    /// Worker steps so far.
    pub worker_steps: u64,
    /// Epochs so far.
    pub epoch: f64,
    /// Held-out loss and accuracy of the evaluated model ([`Algorithm::eval_model`]).
    pub eval: Evaluation,
    /// Mean training loss of the minibatches since the previous point.
    pub train_loss: f64,
    /// The consensus distance of the (de-biased) worker replicas
    /// ([`ReplicaStore::consensus_distance`]).
    pub consensus: f64,
    /// Every replica evaluated, when `[metrics] eval_replicas` is set.
    pub replicas: Option<ReplicaEvals>,
    /// `f(x) − f*` of the evaluated model, when the model knows its optimum.
    pub suboptimality: Option<f64>,
    /// The algorithm's own quantities ([`Algorithm::series`]).
    pub series: Vec<(&'static str, f64)>,
}

/// Where a run stands, for progress display.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Progress {
    /// Simulated time.
    pub time: SimTime,
    /// Worker steps so far.
    pub worker_steps: u64,
    /// Events handled so far.
    pub events: u64,
    /// Fraction of the budget used, in `[0, 1]`, by the stop rule nearest to firing.
    pub fraction: f64,
}

/// Receives results as a run produces them.
pub trait Observer {
    /// An evaluation point; an error stops the run.
    fn on_eval(&mut self, point: &EvalPoint) -> std::result::Result<(), String>;
    /// Called every few hundred events.
    fn on_progress(&mut self, _progress: &Progress) {}
    /// An applied gradient, when `[metrics] log_gradients` is on; an error stops the run.
    fn on_gradient(&mut self, _record: &GradientRecord) -> std::result::Result<(), String> {
        Ok(())
    }
    /// A message, when `[metrics] log_messages` is on; an error stops the run.
    fn on_message(&mut self, _record: &MessageRecord) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// An observer that keeps every evaluation point in memory.
#[derive(Default, Debug)]
pub struct Collect(pub Vec<EvalPoint>);

impl Observer for Collect {
    fn on_eval(&mut self, point: &EvalPoint) -> std::result::Result<(), String> {
        self.0.push(point.clone());
        Ok(())
    }
}

/// The totals of a finished run.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// Simulated time at the stop.
    pub sim_time: SimTime,
    /// Events handled.
    pub events: u64,
    /// Worker steps (gradients applied).
    pub worker_steps: u64,
    /// Epochs.
    pub epochs: f64,
    /// The last evaluation.
    pub final_eval: Evaluation,
    /// Network totals.
    pub network: NetworkStats,
    /// The algorithm's staleness measurements, where it has them ([`Algorithm::staleness`]).
    pub staleness: Option<StalenessStats>,
    /// What was recorded: utilization, waits, gradient staleness, message ages, links, timeline.
    pub record: RunRecord,
}

const PROGRESS_EVERY: u64 = 512;

/// Runs `alg` on `world` until a stop rule fires.
pub fn run<A: Algorithm>(
    alg: &mut A,
    world: &mut World<'_>,
    cfg: &RunConfig,
    observer: &mut dyn Observer,
) -> Result<Outcome> {
    run_inspect(alg, world, cfg, observer, &mut |_, _, _| {})
}

/// [`run`], calling `inspect` with the algorithm, the world and the time after `start` and after
/// every event: tests check invariants there, at every event.
pub fn run_inspect<A: Algorithm>(
    alg: &mut A,
    world: &mut World<'_>,
    cfg: &RunConfig,
    observer: &mut dyn Observer,
    inspect: &mut dyn FnMut(&A, &World<'_>, SimTime),
) -> Result<Outcome> {
    let mut queue = EventQueue::new();
    let time_limit = cfg.sim_time_s.map(SimTime::from_secs_f64);
    // No time grid (eval_every_s = 0 with eval_every_steps): the next grid point is never.
    let eval_every = if cfg.eval_every_s > 0.0 {
        SimTime::from_secs_f64(cfg.eval_every_s).max(SimTime::from_nanos(1))
    } else {
        SimTime::MAX
    };
    let mut events = 0u64;
    let mut now = SimTime::ZERO;

    world.store.set_now(now);
    alg.start(&mut Ctx {
        now,
        queue: &mut queue,
        world,
    });
    inspect(alg, world, now);
    drain_logs(world, observer)?;
    let mut last_eval = evaluate(alg, world, now, observer)?;
    let mut next_eval = eval_every;
    let mut next_step_eval = cfg.eval_every_steps;

    let fraction = |world: &World<'_>, now: SimTime| -> f64 {
        let mut f: f64 = 0.0;
        if let Some(t) = time_limit {
            f = f.max(now.as_nanos() as f64 / t.as_nanos().max(1) as f64);
        }
        if let Some(e) = cfg.epochs {
            f = f.max(world.epochs() / e);
        }
        if let Some(s) = cfg.worker_steps {
            f = f.max(world.worker_steps as f64 / s as f64);
        }
        f.min(1.0)
    };

    loop {
        let Some(t) = queue.peek_time() else {
            let waiting = alg.waiting();
            if waiting.is_empty() {
                break; // the algorithm has nothing left to do
            }
            return Err(Error::Deadlock { time: now, waiting });
        };
        // Every event before `t` has been handled: points strictly before `t` are complete.
        let horizon = time_limit.map_or(t, |limit| {
            t.min(limit.saturating_add(SimTime::from_nanos(1)))
        });
        while next_eval < horizon {
            last_eval = evaluate(alg, world, next_eval, observer)?;
            next_eval = next_eval.saturating_add(eval_every);
        }
        if let Some(limit) = time_limit
            && t > limit
        {
            now = limit;
            break;
        }
        let (t, event) = queue.pop().expect("peeked");
        now = t;
        world.store.set_now(now);
        alg.handle(
            event,
            &mut Ctx {
                now,
                queue: &mut queue,
                world,
            },
        );
        inspect(alg, world, now);
        drain_logs(world, observer)?;
        events += 1;
        if events.is_multiple_of(PROGRESS_EVERY) {
            observer.on_progress(&Progress {
                time: now,
                worker_steps: world.worker_steps,
                events,
                fraction: fraction(world, now),
            });
        }
        if let (Some(every), Some(at)) = (cfg.eval_every_steps, next_step_eval)
            && world.worker_steps >= at
        {
            last_eval = evaluate(alg, world, now, observer)?;
            next_step_eval = Some((world.worker_steps / every + 1) * every);
        }
        let steps_done = cfg.worker_steps.is_some_and(|s| world.worker_steps >= s);
        let epochs_done = cfg.epochs.is_some_and(|e| world.epochs() >= e);
        if steps_done || epochs_done {
            break;
        }
    }
    // Every event at or before `now` has been handled.
    while next_eval <= now {
        last_eval = evaluate(alg, world, next_eval, observer)?;
        next_eval = next_eval.saturating_add(eval_every);
    }
    if last_eval.time != now {
        last_eval = evaluate(alg, world, now, observer)?;
    }
    observer.on_progress(&Progress {
        time: now,
        worker_steps: world.worker_steps,
        events,
        fraction: 1.0,
    });
    let mut record = world.recorder.finish(now);
    record.gradient_staleness = world.store.staleness().to_vec();
    record.links = world.net.link_stats();
    Ok(Outcome {
        sim_time: now,
        events,
        worker_steps: world.worker_steps,
        epochs: world.epochs(),
        final_eval: last_eval.eval,
        network: world.net.stats(),
        staleness: alg.staleness(),
        record,
    })
}

/// Hands the per-event records of the last event to the observer.
fn drain_logs(world: &mut World<'_>, observer: &mut dyn Observer) -> Result<()> {
    for g in world.store.take_gradients() {
        observer.on_gradient(&g).map_err(Error::Observer)?;
    }
    for m in world.recorder.take_messages() {
        observer.on_message(&m).map_err(Error::Observer)?;
    }
    Ok(())
}

fn evaluate<A: Algorithm>(
    alg: &mut A,
    world: &mut World<'_>,
    time: SimTime,
    observer: &mut dyn Observer,
) -> Result<EvalPoint> {
    let model = alg.eval_model();
    let eval = match &model {
        Some(terms) => world.store.evaluate_mix(terms),
        None => world.store.evaluate(),
    };
    let scales = alg.replica_scales();
    let consensus = world.store.consensus_distance(scales.as_deref());
    let replicas = if world.eval_replicas {
        let rows: Vec<usize> = (0..world.workers()).collect();
        let evals = world.store.evaluate_rows(&rows, scales.as_deref());
        Some(ReplicaEvals {
            loss: Spread::of(evals.iter().map(|e| e.loss)),
            accuracy: Spread::of(evals.iter().map(|e| e.accuracy)),
        })
    } else {
        None
    };
    let suboptimality = world.store.suboptimality(model.as_deref());
    let point = EvalPoint {
        time,
        worker_steps: world.worker_steps,
        epoch: world.epochs(),
        eval,
        train_loss: world.store.take_train_loss(),
        consensus,
        replicas,
        suboptimality,
        series: alg.series(),
    };
    observer.on_eval(&point).map_err(Error::Observer)?;
    Ok(point)
}
