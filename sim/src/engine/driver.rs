//! Running an algorithm: the event loop, stop rules and evaluation points.
//!
//! The loop pops the earliest event, advances the clock to it and hands it to the algorithm. An
//! evaluation point at time `T` sees the state after every event with time `≤ T` and before any
//! later one. A run stops at the first stop rule reached: a simulated-time limit (checked before
//! an event later than the limit is processed), a number of epochs or of worker steps (checked
//! after each event). If the queue runs dry first while workers wait, the run is a deadlock and
//! fails with who waits for whom ([`Algorithm::waiting`]). Time arithmetic saturates at
//! [`SimTime::MAX`], so an event there lies beyond the end of simulated time: a time limit stops
//! the run before it (validation keeps the limit at most [`SimTime::MAX_CONFIG`]); without one
//! the run fails with an error at `run` saying so.
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
//! link totals, message ages, and — in the store layer ([`crate::store::tracked`]) — the staleness of
//! every applied gradient; the [`Outcome`] carries it all as a [`RunRecord`]. With the per-event
//! logs on, every applied gradient and every message is handed to the [`Observer`] after the
//! event that produced it.
//!
//! [`run_inspect`] also hands the algorithm and the world to a hook after every event, which is
//! how tests check an algorithm's invariant at every event.

use std::sync::atomic::{AtomicBool, Ordering};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::algorithm::{Algorithm, Ctx, StalenessStats, World, WorldState};
use crate::clock::time::{TimeUnit, num};
use crate::clock::{EventQueue, SimTime};
use crate::engine::checkpoint::{self, Checkpointing, checkpoint_error};
use crate::engine::error::{Error, Result};
use crate::error::ConfigError;
use crate::fault::{FaultStats, RejoinState, Stall, WorkerFault};
use crate::net::NetworkStats;
use crate::record::{GradientRecord, MessageRecord, RunRecord};
use crate::store::{Evaluation, ReplicaStore};

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
    /// Stop the run as diverged at the first evaluation point whose held-out loss exceeds this
    /// (a NaN or infinite loss always does). Default: [`DIVERGENCE_FACTOR`] times the absolute
    /// held-out loss at time 0 (no bound when that loss is 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub divergence_loss: Option<f64>,
}

/// Without `[run] divergence_loss`, a run diverges when its held-out loss exceeds this many
/// times the absolute loss at time 0.
pub const DIVERGENCE_FACTOR: f64 = 1e3;

impl RunConfig {
    /// Checks every value; at least one stop rule is required.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.sim_time_s.is_none() && self.epochs.is_none() && self.worker_steps.is_none() {
            return Err(ConfigError::new("run", "no stop rule is set")
                .hint("set at least one of run.sim_time_s, run.epochs or run.worker_steps"));
        }
        if let Some(t) = self.sim_time_s {
            if !(t.is_finite() && t > 0.0) {
                return Err(ConfigError::new(
                    "run.sim_time_s",
                    format!("sim_time_s must be a positive number of seconds, got {t}"),
                ));
            }
            SimTime::checked_from_secs_f64(t, "run.sim_time_s")?;
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
        if let Some(d) = self.divergence_loss
            && !(d.is_finite() && d > 0.0)
        {
            return Err(ConfigError::new(
                "run.divergence_loss",
                format!("divergence_loss must be a positive loss, got {d}"),
            )
            .hint(format!(
                "leave it out for the default, {} times the held-out loss at time 0",
                num(DIVERGENCE_FACTOR)
            )));
        }
        if self.eval_every_s > 0.0 {
            SimTime::checked_nonzero_from_f64(
                self.eval_every_s,
                TimeUnit::Seconds,
                "run.eval_every_s",
            )?;
        }
        // Every point evaluates the model and writes a row: a grid of billions of points is a
        // typo that would never finish.
        if let Some(t) = self.sim_time_s
            && self.eval_every_s > 0.0
            && t / self.eval_every_s > MAX_EVAL_POINTS as f64
        {
            return Err(ConfigError::new(
                "run.eval_every_s",
                format!(
                    "sim_time_s / eval_every_s is {} evaluation points, more than {MAX_EVAL_POINTS}",
                    num((t / self.eval_every_s).ceil())
                ),
            )
            .hint(format!(
                "evaluate less often: eval_every_s = {} gives 1,000 points",
                num(t / 1000.0)
            )));
        }
        if let (Some(steps), Some(every)) = (self.worker_steps, self.eval_every_steps)
            && steps / every > MAX_EVAL_POINTS
        {
            return Err(ConfigError::new(
                "run.eval_every_steps",
                format!(
                    "worker_steps / eval_every_steps is {} evaluation points, more than {MAX_EVAL_POINTS}",
                    steps / every
                ),
            )
            .hint(format!(
                "evaluate less often: eval_every_steps = {} gives 1,000 points",
                (steps / 1000).max(1)
            )));
        }
        Ok(())
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
pub struct RunProgress {
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
    fn on_progress(&mut self, _progress: &RunProgress) {}
    /// An applied gradient, when `[metrics] log_gradients` is on; an error stops the run.
    fn on_gradient(&mut self, _record: &GradientRecord) -> std::result::Result<(), String> {
        Ok(())
    }
    /// A message, when `[metrics] log_messages` is on; an error stops the run.
    fn on_message(&mut self, _record: &MessageRecord) -> std::result::Result<(), String> {
        Ok(())
    }
    /// A checkpoint of the run at `time` ([`crate::engine::checkpoint`]): everything the
    /// observer has received so far belongs to it, nothing after. Only runs with
    /// [`Checkpointing`] take them; an error stops the run.
    fn on_checkpoint(&mut self, _state: &[u8], _time: SimTime) -> std::result::Result<(), String> {
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
    /// Worker steps (gradients applied). Zero when no worker completed a step before the stop
    /// (a step longer than the run, messages slower than the run): then `final_eval` is the
    /// initial model's, and a report should say that nothing was trained rather than present
    /// it as a result.
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
    /// Why the run stopped before a stop rule of `[run]` was reached: `None` when it was (or
    /// the algorithm had nothing left to do).
    pub diverged: Option<Divergence>,
    /// Why the run stopped when workers waited and no event could wake them (a crashed worker,
    /// a partition, a lost message a synchronous algorithm needs): only with `[[faults]]`;
    /// without faults that is a deadlock, an error ([`Error::Deadlock`]).
    pub stalled: Option<Stall>,
    /// What the faults did (`None` without `[[faults]]`).
    pub faults: Option<FaultReport>,
}

/// What the faults of a run did ([`crate::fault`]).
#[derive(Clone, Debug, PartialEq)]
pub struct FaultReport {
    /// Messages lost, duplicated and delayed, crashes and rejoins, down time per worker.
    pub stats: FaultStats,
    /// Push-sum weight lost with dropped messages ([`Algorithm::mass_lost`]).
    pub mass_lost: Option<f64>,
    /// The algorithm's own counts of what it did about the faults ([`Algorithm::fault_counts`]).
    pub counts: Vec<(&'static str, u64)>,
}

/// A run stopped because its held-out loss diverged: not finite, or above the bound
/// (`[run] divergence_loss`, else [`DIVERGENCE_FACTOR`] times the loss at time 0).
///
/// This is the one place where a floating-point value decides control flow besides an
/// explicit target, and it can only end a run: two backends stop at different points only if
/// they disagree on whether a loss is finite or above the bound.
#[derive(Clone, Debug, PartialEq)]
pub struct Divergence {
    /// The evaluation point that detected it (the run's last).
    pub time: SimTime,
    /// The held-out loss there (NaN, infinite or above `bound`).
    pub loss: f64,
    /// The bound in force; `None` when there was none (only a non-finite loss stops the run).
    pub bound: Option<f64>,
    /// The last finite held-out loss before it and its time; `None` when there was none.
    pub last_finite: Option<(SimTime, f64)>,
}

/// A loss as people read it: plain unless very large or very small.
fn loss_text(x: f64) -> String {
    if x.is_finite() && x != 0.0 && !(1e-4..1e6).contains(&x.abs()) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "diverged at simulated time {} s: held-out loss {}",
            num(self.time.as_secs_f64()),
            loss_text(self.loss)
        )?;
        if self.loss.is_finite()
            && let Some(b) = self.bound
        {
            write!(f, " above the bound {} (run.divergence_loss)", loss_text(b))?;
        }
        match self.last_finite {
            Some((t, l)) => write!(
                f,
                "; last finite loss {} at {} s",
                loss_text(l),
                num(t.as_secs_f64())
            ),
            None => write!(f, "; no finite loss before"),
        }
    }
}

/// Watches the held-out loss at every evaluation point.
#[derive(Clone, Serialize, Deserialize)]
struct DivergenceGuard {
    bound: Option<f64>,
    configured: bool,
    last_finite: Option<(SimTime, f64)>,
    /// Off for a store that computes no loss ([`ReplicaStore::computes`]).
    on: bool,
}

impl DivergenceGuard {
    fn new(cfg: &RunConfig, on: bool) -> Self {
        DivergenceGuard {
            bound: cfg.divergence_loss,
            configured: cfg.divergence_loss.is_some(),
            last_finite: None,
            on,
        }
    }

    /// `Some` when `point` shows divergence. The first point sets the default bound.
    fn check(&mut self, point: &EvalPoint) -> Option<Divergence> {
        if !self.on {
            return None;
        }
        let loss = point.eval.loss;
        if !self.configured && self.last_finite.is_none() && loss.is_finite() && loss != 0.0 {
            self.bound = Some(DIVERGENCE_FACTOR * loss.abs());
        }
        if !loss.is_finite() || self.bound.is_some_and(|b| loss > b) {
            return Some(Divergence {
                time: point.time,
                loss,
                bound: self.bound,
                last_finite: self.last_finite,
            });
        }
        self.last_finite = Some((point.time, loss));
        None
    }
}

const PROGRESS_EVERY: u64 = 512;

/// The most evaluation points a run's stop rules may imply (`sim_time_s / eval_every_s`,
/// `worker_steps / eval_every_steps`).
pub const MAX_EVAL_POINTS: u64 = 1_000_000;

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
    let start = begin(alg, world, cfg, observer, inspect)?;
    drive(alg, world, cfg, observer, inspect, start, None)
}

/// [`run`] with checkpoints ([`crate::engine::checkpoint`]): taken as `ckpt` says and handed to
/// `observer`; with `ckpt.resume`, the run goes on from that checkpoint instead of starting.
/// `alg` and `world` must then be built from the scenario the checkpoint's run was built from
/// (with the same metrics options and faults); the checkpoint replaces their state.
pub fn run_checkpointed<A>(
    alg: &mut A,
    world: &mut World<'_>,
    cfg: &RunConfig,
    observer: &mut dyn Observer,
    ckpt: Checkpointing<'_>,
) -> Result<Outcome>
where
    A: Algorithm + Serialize + DeserializeOwned,
    A::Event: Serialize + DeserializeOwned,
{
    let mut inspect = |_: &A, _: &World<'_>, _: SimTime| {};
    let start = match ckpt.resume {
        Some(bytes) => {
            let (position, restored, queue, state): (
                Position,
                A,
                EventQueue<A::Event>,
                WorldState,
            ) = checkpoint::decode(bytes)?;
            *alg = restored;
            world.restore(state).map_err(checkpoint_error)?;
            world.store.set_now(position.now);
            Start {
                position,
                queue,
                diverged: None,
            }
        }
        None => begin(alg, world, cfg, observer, &mut inspect)?,
    };
    let mut save = |alg: &A,
                    queue: &EventQueue<A::Event>,
                    world: &mut World<'_>,
                    position: &Position|
     -> Result<Vec<u8>> {
        let state = world.checkpoint().map_err(checkpoint_error)?;
        checkpoint::encode(&(position, alg, queue, state))
    };
    let hook = Hook {
        every: ckpt.every,
        interrupt: ckpt.interrupt,
        save: &mut save,
    };
    drive(alg, world, cfg, observer, inspect, start, Some(hook))
}

/// Where the run loop stands between two events: all a checkpoint needs besides the algorithm,
/// the queue and the world.
#[derive(Serialize, Deserialize)]
struct Position {
    now: SimTime,
    events: u64,
    next_eval: SimTime,
    next_step_eval: Option<u64>,
    guard: DivergenceGuard,
    /// The last evaluation point's time and result (what the end of the run reads of it).
    last_eval: (SimTime, Evaluation),
    next_checkpoint: SimTime,
}

/// Where [`drive`] starts: after [`begin`], or at a checkpoint.
struct Start<E> {
    position: Position,
    queue: EventQueue<E>,
    /// The point at time 0 diverged (only when just begun).
    diverged: Option<Divergence>,
}

/// How [`drive`] takes checkpoints.
struct Hook<'h, A: Algorithm> {
    every: Option<SimTime>,
    interrupt: Option<&'h AtomicBool>,
    #[allow(clippy::type_complexity)]
    save:
        &'h mut dyn FnMut(&A, &EventQueue<A::Event>, &mut World<'_>, &Position) -> Result<Vec<u8>>,
}

/// The evaluation grid's step.
fn eval_every(cfg: &RunConfig) -> SimTime {
    // No time grid (eval_every_s = 0 with eval_every_steps): the next grid point is never.
    if cfg.eval_every_s > 0.0 {
        SimTime::from_secs_f64(cfg.eval_every_s).max(SimTime::from_nanos(1))
    } else {
        SimTime::MAX
    }
}

/// Starts `alg` and evaluates the point at time 0.
fn begin<A: Algorithm>(
    alg: &mut A,
    world: &mut World<'_>,
    cfg: &RunConfig,
    observer: &mut dyn Observer,
    inspect: &mut dyn FnMut(&A, &World<'_>, SimTime),
) -> Result<Start<A::Event>> {
    let mut queue = EventQueue::new();
    let now = SimTime::ZERO;
    world.store.set_now(now);
    alg.start(&mut Ctx {
        now,
        queue: &mut queue,
        world,
    });
    inspect(alg, world, now);
    drain_logs(world, observer)?;
    let mut guard = DivergenceGuard::new(cfg, world.store.computes());
    let last_eval = evaluate(alg, world, now, observer)?;
    let diverged = guard.check(&last_eval);
    let position = Position {
        now,
        events: 0,
        next_eval: eval_every(cfg),
        next_step_eval: cfg.eval_every_steps,
        guard,
        last_eval: (last_eval.time, last_eval.eval),
        next_checkpoint: SimTime::ZERO,
    };
    Ok(Start {
        position,
        queue,
        diverged,
    })
}

/// The run loop, from `position` on, to the stop.
///
/// Generic over `inspect`, so that the no-op of a plain run costs nothing per event.
fn drive<A: Algorithm, I: FnMut(&A, &World<'_>, SimTime)>(
    alg: &mut A,
    world: &mut World<'_>,
    cfg: &RunConfig,
    observer: &mut dyn Observer,
    inspect: I,
    start: Start<A::Event>,
    hook: Option<Hook<'_, A>>,
) -> Result<Outcome> {
    let mut run = Run::new(alg, world, cfg, observer, inspect, start, hook);
    let stalled = run.handle_events()?;
    run.evaluate_at_the_stop()?;
    Ok(run.finish(stalled))
}

/// What comes next in the run loop.
enum Next {
    /// The earliest event or fault, at this time; `true`: a fault.
    At(SimTime, bool),
    /// Nothing: the algorithm has nothing left to do.
    Done,
    /// Nothing can wake the workers that wait: a run with faults stalls.
    Stalled(Stall),
}

/// The state of [`drive`]'s loop: what it runs, and where it stands ([`Position`], with the
/// last evaluation point whole).
struct Run<'r, 'w, 'h, A: Algorithm, I> {
    alg: &'r mut A,
    world: &'r mut World<'w>,
    cfg: &'r RunConfig,
    observer: &'r mut dyn Observer,
    inspect: I,
    hook: Option<Hook<'h, A>>,
    queue: EventQueue<A::Event>,
    time_limit: Option<SimTime>,
    eval_every: SimTime,
    now: SimTime,
    events: u64,
    next_eval: SimTime,
    next_step_eval: Option<u64>,
    guard: DivergenceGuard,
    last_eval: EvalPoint,
    next_checkpoint: SimTime,
    diverged: Option<Divergence>,
}

impl<'r, 'w, 'h, A: Algorithm, I: FnMut(&A, &World<'_>, SimTime)> Run<'r, 'w, 'h, A, I> {
    /// The loop's state at `start`; the first checkpoint falls one interval after time 0.
    fn new(
        alg: &'r mut A,
        world: &'r mut World<'w>,
        cfg: &'r RunConfig,
        observer: &'r mut dyn Observer,
        inspect: I,
        start: Start<A::Event>,
        hook: Option<Hook<'h, A>>,
    ) -> Self {
        let Start {
            position,
            queue,
            diverged,
        } = start;
        let Position {
            now,
            events,
            next_eval,
            next_step_eval,
            guard,
            last_eval: (last_time, last_result),
            mut next_checkpoint,
        } = position;
        let last_eval = EvalPoint {
            time: last_time,
            worker_steps: world.worker_steps,
            epoch: world.epochs(),
            eval: last_result,
            train_loss: f64::NAN,
            consensus: f64::NAN,
            replicas: None,
            suboptimality: None,
            series: Vec::new(),
        };
        if let Some(every) = hook.as_ref().and_then(|h| h.every)
            && next_checkpoint == SimTime::ZERO
        {
            next_checkpoint = every;
        }
        Run {
            alg,
            world,
            cfg,
            observer,
            inspect,
            hook,
            queue,
            time_limit: cfg.sim_time_s.map(SimTime::from_secs_f64),
            eval_every: eval_every(cfg),
            now,
            events,
            next_eval,
            next_step_eval,
            guard,
            last_eval,
            next_checkpoint,
            diverged,
        }
    }

    /// Handles events and faults in time order, with the evaluation points and checkpoints
    /// between them, until a stop rule, a divergence or the end of the work; returns the stall
    /// of a run that stopped with workers waiting that nothing can wake.
    fn handle_events(&mut self) -> Result<Option<Stall>> {
        while self.diverged.is_none() {
            let (t, fault) = match self.what_comes_next()? {
                Next::At(t, fault) => (t, fault),
                Next::Done => break,
                Next::Stalled(stall) => return Ok(Some(stall)),
            };
            // Time arithmetic saturates: an event at `SimTime::MAX` would happen after the end
            // of simulated time. A time limit (at most `SimTime::MAX_CONFIG`) stops the run
            // before it; without one, the run cannot go on.
            if t == SimTime::MAX && self.time_limit.is_none() {
                return Err(beyond_the_clock(self.now).into());
            }
            // Every event before `t` has been handled: points strictly before `t` are complete.
            let horizon = self.time_limit.map_or(t, |limit| {
                t.min(limit.saturating_add(SimTime::from_nanos(1)))
            });
            if self.evaluate_grid_before(horizon)? {
                break;
            }
            if let Some(limit) = self.time_limit
                && t > limit
            {
                self.now = limit;
                break;
            }
            self.checkpoint_before(t)?;
            if fault {
                self.handle_fault(t)?;
                continue;
            }
            self.handle_event()?;
            if self.evaluate_on_steps()? || self.stop_reached() {
                break;
            }
        }
        Ok(None)
    }

    /// When the next thing happens: a crash or rejoin due no later than the next event comes
    /// first; with no event left, only a rejoin can wake anyone. Fails with a deadlock when
    /// workers wait for an event that will not come in a run without faults.
    fn what_comes_next(&mut self) -> Result<Next> {
        let next_fault = self.world.faults.next_time();
        Ok(match (self.queue.peek_time(), next_fault) {
            (Some(a), Some(f)) if f <= a => Next::At(f, true),
            (Some(a), _) => Next::At(a, false),
            (None, Some(f)) if self.world.faults.rejoin_pending() => Next::At(f, true),
            (None, _) => {
                let mut waiting = self.alg.waiting();
                let down = self.world.faults.down_workers();
                if waiting.is_empty() && down.is_empty() {
                    return Ok(Next::Done); // the algorithm has nothing left to do
                }
                if !self.world.faults.configured() {
                    return Err(Error::Deadlock {
                        time: self.now,
                        waiting,
                    });
                }
                waiting.extend(down.into_iter().map(|(w, since)| {
                    format!(
                        "worker {w} is down since {} s and never rejoins",
                        num(since.as_secs_f64())
                    )
                }));
                Next::Stalled(Stall {
                    time: self.now,
                    waiting,
                })
            }
        })
    }

    /// Evaluates the points of the time grid strictly before `horizon`; whether one diverged
    /// (the run then ends at that point).
    fn evaluate_grid_before(&mut self, horizon: SimTime) -> Result<bool> {
        while self.next_eval < horizon {
            self.last_eval = evaluate(self.alg, self.world, self.next_eval, self.observer)?;
            self.next_eval = self.next_eval.saturating_add(self.eval_every);
            self.diverged = self.guard.check(&self.last_eval);
            if self.diverged.is_some() {
                self.now = self.last_eval.time;
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Between two events, with every point before `t` written: takes a checkpoint when the
    /// time grid's next mark lies before `t`, or when the run is interrupted (and then fails
    /// with [`Error::Interrupted`]).
    fn checkpoint_before(&mut self, t: SimTime) -> Result<()> {
        let Some(h) = self.hook.as_mut() else {
            return Ok(());
        };
        let interrupted = h.interrupt.is_some_and(|i| i.load(Ordering::SeqCst));
        let due = h.every.is_some() && self.next_checkpoint < t;
        if !(due || interrupted) {
            return Ok(());
        }
        if let Some(every) = h.every {
            while self.next_checkpoint < t {
                self.next_checkpoint = self.next_checkpoint.saturating_add(every);
            }
        }
        let position = Position {
            now: self.now,
            events: self.events,
            next_eval: self.next_eval,
            next_step_eval: self.next_step_eval,
            guard: self.guard.clone(),
            last_eval: (self.last_eval.time, self.last_eval.eval),
            next_checkpoint: self.next_checkpoint,
        };
        let bytes = (h.save)(self.alg, &self.queue, self.world, &position)?;
        self.observer
            .on_checkpoint(&bytes, self.now)
            .map_err(Error::Observer)?;
        if interrupted {
            return Err(Error::Interrupted { time: self.now });
        }
        Ok(())
    }

    /// Advances the clock to `t` and applies the crash or rejoin due then, which the algorithm
    /// then reacts to.
    fn handle_fault(&mut self, t: SimTime) -> Result<()> {
        self.now = t;
        self.world.store.set_now(self.now);
        if let Some(f) = self.world.faults.pop(self.now) {
            // A crashed worker is down on the timeline until it rejoins (or the run ends);
            // a rejoined one is idle until the algorithm gives it work.
            match f {
                WorkerFault::Crash(w) => self.world.recorder.crash(w, self.now),
                WorkerFault::Rejoin(w) => {
                    self.world.recorder.rejoin(w, self.now);
                    if self.world.faults.rejoin_state() == RejoinState::Neighbour
                        && let Some(terms) = self.alg.rejoin_model(w, self.world)
                    {
                        self.world.store.mix(w, &terms);
                    }
                }
            }
            self.deliver(|alg, ctx| alg.on_fault(f, ctx))?;
        }
        Ok(())
    }

    /// Hands the algorithm a context at the current time (`react` gives it an event or a
    /// fault), then shows the result to the inspector and hands over the event logs.
    fn deliver(&mut self, react: impl FnOnce(&mut A, &mut Ctx<'_, 'w, A::Event>)) -> Result<()> {
        let mut ctx = Ctx {
            now: self.now,
            queue: &mut self.queue,
            world: &mut *self.world,
        };
        react(&mut *self.alg, &mut ctx);
        (self.inspect)(self.alg, self.world, self.now);
        drain_logs(self.world, self.observer)
    }

    /// Pops the next event, advances the clock to it and hands it to the algorithm; reports
    /// progress every [`PROGRESS_EVERY`] events.
    fn handle_event(&mut self) -> Result<()> {
        let (t, event) = self.queue.pop().expect("peeked");
        self.now = t;
        self.world.store.set_now(self.now);
        self.deliver(|alg, ctx| alg.handle(event, ctx))?;
        self.events += 1;
        if self.events.is_multiple_of(PROGRESS_EVERY) {
            self.observer.on_progress(&RunProgress {
                time: self.now,
                worker_steps: self.world.worker_steps,
                events: self.events,
                fraction: self.fraction(),
            });
        }
        Ok(())
    }

    /// How far the run is towards its first stop rule, in `[0, 1]`.
    fn fraction(&self) -> f64 {
        let mut f: f64 = 0.0;
        if let Some(t) = self.time_limit {
            f = f.max(self.now.as_nanos() as f64 / t.as_nanos().max(1) as f64);
        }
        if let Some(e) = self.cfg.epochs {
            f = f.max(self.world.epochs() / e);
        }
        if let Some(s) = self.cfg.worker_steps {
            f = f.max(self.world.worker_steps as f64 / s as f64);
        }
        f.min(1.0)
    }

    /// Evaluates after an event that brought the worker steps to the next multiple of
    /// `eval_every_steps`; whether the point diverged.
    fn evaluate_on_steps(&mut self) -> Result<bool> {
        if let (Some(every), Some(at)) = (self.cfg.eval_every_steps, self.next_step_eval)
            && self.world.worker_steps >= at
        {
            self.last_eval = evaluate(self.alg, self.world, self.now, self.observer)?;
            self.next_step_eval = Some((self.world.worker_steps / every + 1).saturating_mul(every));
            self.diverged = self.guard.check(&self.last_eval);
            return Ok(self.diverged.is_some());
        }
        Ok(false)
    }

    /// Whether the worker-step or epoch stop rule is reached.
    fn stop_reached(&self) -> bool {
        let steps_done = self
            .cfg
            .worker_steps
            .is_some_and(|s| self.world.worker_steps >= s);
        let epochs_done = self.cfg.epochs.is_some_and(|e| self.world.epochs() >= e);
        steps_done || epochs_done
    }

    /// After the loop: evaluates the grid points up to the stop and the point at the stop,
    /// unless the run diverged (it then ends at the point that detected it).
    fn evaluate_at_the_stop(&mut self) -> Result<()> {
        // Every event at or before `now` has been handled (a diverged run ends at the point
        // that detected it).
        while self.diverged.is_none() && self.next_eval <= self.now {
            self.last_eval = evaluate(self.alg, self.world, self.next_eval, self.observer)?;
            self.next_eval = self.next_eval.saturating_add(self.eval_every);
            self.diverged = self.guard.check(&self.last_eval);
        }
        if self.diverged.is_none() && self.last_eval.time != self.now {
            self.last_eval = evaluate(self.alg, self.world, self.now, self.observer)?;
            self.diverged = self.guard.check(&self.last_eval);
        }
        if self.diverged.is_some() {
            self.now = self.last_eval.time;
        }
        Ok(())
    }

    /// The run's [`Outcome`] at the stop, after the last progress report.
    fn finish(self, stalled: Option<Stall>) -> Outcome {
        let now = self.now;
        let world = self.world;
        self.observer.on_progress(&RunProgress {
            time: now,
            worker_steps: world.worker_steps,
            events: self.events,
            fraction: 1.0,
        });
        let faults = world.faults.configured().then(|| FaultReport {
            stats: world.faults.stats(now),
            mass_lost: self.alg.mass_lost(),
            counts: self.alg.fault_counts(),
        });
        let mut record = world.recorder.finish(now);
        record.global_staleness = world.store.global_staleness().to_vec();
        record.row_staleness = world.store.row_staleness().to_vec();
        record.links = world.net.link_stats();
        Outcome {
            sim_time: now,
            events: self.events,
            worker_steps: world.worker_steps,
            epochs: world.epochs(),
            final_eval: self.last_eval.eval,
            network: world.net.stats(),
            staleness: self.alg.staleness(),
            record,
            diverged: self.diverged,
            stalled,
            faults,
        }
    }
}

/// The error of a run without a time limit whose next event lies beyond the end of simulated
/// time: a step or a message (a random factor's tail, a very slow link) would end later than the
/// clock can count.
fn beyond_the_clock(now: SimTime) -> ConfigError {
    ConfigError::new(
        "run",
        format!(
            "at simulated time {} s, the next event would happen after the end of simulated time \
             ({} s, about 584 years), before any stop rule was reached",
            num(now.as_secs_f64()),
            num(SimTime::MAX.as_secs_f64())
        ),
    )
    .hint(format!(
        "set run.sim_time_s (at most {} s) to end the run at a time of your choosing; such \
         long steps or transfers come from huge straggler factors or delays, or very slow links",
        num(SimTime::max_config_in(TimeUnit::Seconds))
    ))
}

/// Hands the per-event records of the last event to the observer. Inline: most runs log
/// nothing per event, and then this is two tests.
#[inline(always)]
fn drain_logs(world: &mut World<'_>, observer: &mut dyn Observer) -> Result<()> {
    if world.store.has_gradients() || world.recorder.has_messages() {
        hand_over_logs(world, observer)?;
    }
    Ok(())
}

/// [`drain_logs`] when there is something to hand over.
fn hand_over_logs(world: &mut World<'_>, observer: &mut dyn Observer) -> Result<()> {
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
    let mut series = alg.series();
    if world.link_peaks {
        series.push(("peak_link_bytes", world.net.take_peak_link_bytes() as f64));
    }
    let point = EvalPoint {
        time,
        worker_steps: world.worker_steps,
        epoch: world.epochs(),
        eval,
        train_loss: world.store.take_train_loss(),
        consensus,
        replicas,
        suboptimality,
        series,
    };
    observer.on_eval(&point).map_err(Error::Observer)?;
    Ok(point)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(secs: f64, loss: f64) -> EvalPoint {
        EvalPoint {
            time: SimTime::from_secs_f64(secs),
            worker_steps: 0,
            epoch: 0.0,
            eval: Evaluation {
                loss,
                accuracy: f64::NAN,
            },
            train_loss: f64::NAN,
            consensus: 0.0,
            replicas: None,
            suboptimality: None,
            series: Vec::new(),
        }
    }

    fn cfg(divergence_loss: Option<f64>) -> RunConfig {
        RunConfig {
            sim_time_s: Some(1.0),
            epochs: None,
            worker_steps: None,
            eval_every_s: 0.1,
            eval_every_steps: None,
            divergence_loss,
        }
    }

    #[test]
    fn the_default_bound_is_a_thousand_times_the_first_loss() {
        let mut g = DivergenceGuard::new(&cfg(None), true);
        assert_eq!(g.check(&point(0.0, 2.0)), None);
        assert_eq!(g.check(&point(0.1, 1999.0)), None);
        assert_eq!(
            g.check(&point(0.2, 2000.0)),
            None,
            "at the bound is not above it"
        );
        let d = g.check(&point(0.3, 2000.5)).unwrap();
        assert_eq!(d.bound, Some(2000.0));
        assert_eq!(d.last_finite, Some((SimTime::from_secs_f64(0.2), 2000.0)));
        assert_eq!(
            d.to_string(),
            "diverged at simulated time 0.3 s: held-out loss 2000.5 above the bound 2000 \
             (run.divergence_loss); last finite loss 2000 at 0.2 s"
        );
    }

    #[test]
    fn a_non_finite_loss_diverges_whatever_the_bound() {
        let mut g = DivergenceGuard::new(&cfg(Some(f64::MAX)), true);
        assert_eq!(g.check(&point(0.0, 1.0)), None);
        assert_eq!(g.check(&point(0.1, 1e300)), None);
        let d = g.check(&point(0.2, f64::INFINITY)).unwrap();
        assert_eq!(
            d.to_string(),
            "diverged at simulated time 0.2 s: held-out loss inf; last finite loss 1e300 at 0.1 s"
        );
        // NaN at the very first point: no finite loss before it.
        let mut g = DivergenceGuard::new(&cfg(None), true);
        let d = g.check(&point(0.0, f64::NAN)).unwrap();
        assert_eq!(d.last_finite, None);
        assert!(
            d.to_string()
                .ends_with("held-out loss NaN; no finite loss before")
        );
    }

    #[test]
    fn a_zero_initial_loss_sets_no_default_bound() {
        let mut g = DivergenceGuard::new(&cfg(None), true);
        assert_eq!(g.check(&point(0.0, 0.0)), None);
        assert_eq!(g.check(&point(0.1, 1e200)), None);
        assert!(g.check(&point(0.2, f64::NAN)).is_some());
    }

    #[test]
    fn the_bound_must_be_a_positive_loss() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = cfg(Some(bad)).validate().unwrap_err();
            assert_eq!(e.path.to_string(), "run.divergence_loss", "{bad}");
        }
        cfg(Some(1e-9)).validate().unwrap();
    }
}
