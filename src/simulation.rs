//! Running a [`Plan`]: every listed algorithm on the same cluster realization, each result
//! handed to a [`RunSink`] as it comes.
//!
//! ```no_run
//! use dasim::plan::Plan;
//! use dasim::simulation::{Silent, Simulation};
//! use dasim::sink::InMemory;
//! use dasim::{Loaded, runtime};
//!
//! let loaded = Loaded::from_file("scenarios/quickstart.toml".as_ref())?;
//! let plan = Plan::prepare(&loaded)?;
//! let backend = runtime::backend(dasim_models::BackendChoice::Flex)?;
//! let mut sink = InMemory::default();
//! let results = Simulation::new(&plan, backend).run(&mut sink, &mut Silent)?;
//! for run in &results.runs {
//!     println!("{}: final test loss {}", run.algorithm, run.final_loss);
//! }
//! println!("{} evaluation points", sink.metrics.len());
//! # Ok::<(), dasim::Error>(())
//! ```
//!
//! What a sink receives, in order ([`RunSink`]): the scenario as run and the data's partition
//! ([`RunSink::start`]); streamed while an algorithm runs, its evaluation points
//! (`metrics.csv`), named series (`series.csv`) and, when `[metrics]` asks, every applied
//! gradient and every message; when an algorithm finishes, its tables (`staleness.csv`,
//! `utilization.csv`, `waits.csv`, `links.csv`, `timeline.csv`, `faults.csv`) and the summary
//! and timings so far; once every algorithm has run, the verdicts of the scenario's
//! `[[expect]]` claims, evaluated on what the sink holds ([`RunSink::run_data`]). The run
//! directory ([`crate::sink::RunDir`]) writes each as it comes, so an interrupted run keeps
//! everything up to its last evaluation point; the in-memory sink ([`crate::sink::InMemory`])
//! keeps the rows.
//!
//! Nothing here prints: progress, notes and warnings go to a [`Progress`], which the command
//! line implements with its progress bar.

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use dasim_models::{Backend, BackendChoice, Execution, StoreStats, TimedAs};
use dasim_reports::rundir::{
    AlgorithmStaleness, AlgorithmSummary, CheckRow, EventLogs, GradientRow, HostTimings, IntStats,
    MessageRow, MetricRow, Partition, RunData, SeriesRow, Stamp, Stopped, Summary, Tables,
    TimeToTarget, Timings, Utilization,
};
use dasim_sim::algorithm::World;
use dasim_sim::algorithms::{measure, run_algorithm_checkpointed};
use dasim_sim::engine::{Checkpointing, EvalPoint, Observer, Outcome, RunProgress, SimTime};
use dasim_sim::record::{GradientRecord, Histogram, MessageRecord};

use crate::checkpoint::{RunCheckpoint, Seen};
use crate::outputs::{self, git_revision};
use crate::plan::{Plan, System, check_memory};
use crate::{Error, Result};

/// Where a run's results go. The run directory ([`crate::sink::RunDir`]) is one sink, the
/// in-memory tables ([`crate::sink::InMemory`]) another; a binding may bring its own.
pub trait RunSink {
    /// Before the first algorithm (or, resuming, before the algorithm the checkpoint was in).
    fn start(&mut self, run: &RunStart<'_>) -> Result<()>;
    /// An evaluation point (`metrics.csv`).
    fn metric(&mut self, row: &MetricRow) -> Result<()>;
    /// A named quantity at an evaluation point (`series.csv`).
    fn series(&mut self, row: &SeriesRow) -> Result<()>;
    /// An applied gradient (`gradients.csv`; only with `[metrics] log_gradients`).
    fn gradient(&mut self, row: &GradientRow) -> Result<()>;
    /// A message (`messages.csv`; only with `[metrics] log_messages`).
    fn message(&mut self, row: &MessageRow) -> Result<()>;
    /// A checkpoint of the run: the engine's state of the algorithm in progress (`None` between
    /// two algorithms) and what the run has gathered. A sink that cannot resume ignores it.
    fn checkpoint(&mut self, at: &CheckpointAt<'_>) -> Result<()>;
    /// An algorithm finished: its tables, and the summary and timings of every algorithm so
    /// far.
    fn algorithm_done(
        &mut self,
        tables: Tables,
        summary: &Summary,
        timings: &Timings,
    ) -> Result<()>;
    /// Everything the sink holds, as a reader of the run directory would see it: the claims are
    /// evaluated on it.
    fn run_data(&mut self) -> Result<RunData>;
    /// The claims' verdicts are in `summary.checks` (called only when the scenario has claims).
    fn checks(&mut self, summary: &Summary) -> Result<()>;
    /// Every algorithm has run and every claim is judged.
    fn finish(&mut self, summary: &Summary) -> Result<()>;
    /// What the user can do after an interrupted run (say where its checkpoint is); `None`
    /// when the sink keeps no checkpoint.
    fn resume_hint(&self) -> Option<String> {
        None
    }
}

/// What a sink receives before the first algorithm.
pub struct RunStart<'a> {
    /// The stamp of every output.
    pub stamp: &'a Stamp,
    /// The scenario as run (`scenario.toml`).
    pub scenario_toml: &'a str,
    /// The data's partition (`partition.csv`); `None` for a model without data.
    pub partition: Option<Partition>,
    /// Which per-event logs the scenario asks for.
    pub logs: EventLogs,
    /// The checkpoint a resumed run continues from.
    pub resume: Option<&'a RunCheckpoint>,
}

/// A checkpoint of a run, for [`RunSink::checkpoint`].
#[derive(Clone, Copy, Debug)]
pub struct CheckpointAt<'a> {
    /// The algorithm in progress (or the next to start), by its index in the scenario.
    pub algorithm: usize,
    /// The engine's checkpoint of the algorithm in progress; `None` before it starts.
    pub engine: Option<&'a [u8]>,
    /// Simulated time of the checkpoint (0 before the algorithm starts).
    pub sim_time_s: f64,
    /// What the algorithm in progress gathered from its evaluation points.
    pub seen: &'a Seen,
    /// Wall seconds the algorithm in progress has run.
    pub wall_s: f64,
    /// The summary so far, as JSON.
    pub summary_json: &'a str,
    /// The timings so far, as JSON.
    pub timings_json: &'a str,
    /// The scenario's SHA-256 as run.
    pub scenario_sha256: &'a str,
    /// The backend.
    pub backend: BackendChoice,
    /// The checkpoint interval, simulated seconds.
    pub every_s: Option<f64>,
}

/// How a run shows that it is alive. Every method does nothing by default ([`Silent`]).
pub trait Progress {
    /// The algorithm `label` starts (or resumes).
    fn algorithm_started(&mut self, label: &str) {
        let _ = label;
    }
    /// The algorithm `label` advanced, `wall_s` seconds after it started.
    fn advanced(&mut self, label: &str, progress: &RunProgress, wall_s: f64) {
        let _ = (label, progress, wall_s);
    }
    /// The algorithm `label` finished.
    fn algorithm_finished(&mut self, label: &str) {
        let _ = label;
    }
    /// Something worth knowing (the memory estimate, a resumed algorithm).
    fn note(&mut self, message: &str) {
        let _ = message;
    }
    /// Something that is legal but rarely meant.
    fn warning(&mut self, message: &str) {
        let _ = message;
    }
}

/// A [`Progress`] that shows nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct Silent;

impl Progress for Silent {}

/// What a run returns: one entry per algorithm, in scenario order, of `summary.json` and of
/// `timings.json`, with the claims' verdicts.
#[derive(Clone, Debug)]
pub struct Results {
    /// `summary.json`'s `runs`.
    pub runs: Vec<AlgorithmSummary>,
    /// `timings.json`'s `runs`.
    pub timings: Vec<HostTimings>,
    /// The model was a `timing` model: no gradient was computed, no loss measured.
    pub timing_only: bool,
    /// Proxy mode: the model whose cost timed the run (`summary.json`'s `timed_as`).
    pub timed_as: Option<String>,
    /// The verdicts of the scenario's `[[expect]]` entries (`checks.csv`), one per entry and
    /// algorithm; empty without expectations.
    pub checks: Vec<CheckRow>,
}

/// Checkpoints of a run: when to take them, what stops the run, and where it continues from.
#[derive(Clone, Copy, Debug, Default)]
pub struct Checkpoints<'a> {
    /// Take one every this many simulated seconds of an algorithm's run, and when an algorithm
    /// finishes.
    pub every_s: Option<f64>,
    /// Raised from outside (a Ctrl-C handler): the run stops after the event being handled,
    /// takes a checkpoint and fails with [`Error::Interrupted`].
    pub interrupt: Option<&'a AtomicBool>,
    /// Continue from this checkpoint instead of starting.
    pub resume: Option<&'a RunCheckpoint>,
}

/// A run of a [`Plan`] on a backend.
pub struct Simulation<'a> {
    plan: &'a Plan,
    backend: Backend,
    execution: Execution,
    memory_limit: Option<u64>,
    checkpoints: Checkpoints<'a>,
}

impl<'a> Simulation<'a> {
    /// A run of `plan` on `backend` ([`crate::runtime::backend`]), with the default execution
    /// (one thread, every pending request per pass), no checkpoints, and refused when its
    /// memory estimate exceeds the memory the machine has available.
    pub fn new(plan: &'a Plan, backend: Backend) -> Self {
        Simulation {
            plan,
            backend,
            execution: Execution::default(),
            memory_limit: None,
            checkpoints: Checkpoints::default(),
        }
    }

    /// How the store executes gradient flushes (threads, batch limit); results do not depend on
    /// it.
    pub fn execution(mut self, execution: Execution) -> Self {
        self.execution = execution;
        self
    }

    /// Refuse to start when the memory estimate exceeds this many bytes (default: the memory
    /// the machine has available).
    pub fn memory_limit(mut self, bytes: Option<u64>) -> Self {
        self.memory_limit = bytes;
        self
    }

    /// Checkpoints, interruption and resumption.
    pub fn checkpoints(mut self, checkpoints: Checkpoints<'a>) -> Self {
        self.checkpoints = checkpoints;
        self
    }

    /// Runs every algorithm of the plan, handing every result to `sink` as it comes.
    pub fn run(&self, sink: &mut dyn RunSink, progress: &mut dyn Progress) -> Result<Results> {
        let plan = self.plan;
        let s = &plan.loaded.scenario;
        let backend = &self.backend;
        let resume = self.checkpoints.resume;
        let gpu = !dasim_models::backend::is_flex(&backend.device);
        let estimate = plan.memory_estimate(self.execution, gpu);
        check_memory(&estimate, self.memory_limit)?;
        progress.note(&format!("memory: estimated {estimate}"));
        let every = self
            .checkpoints
            .every_s
            .map(|e| {
                SimTime::checked_nonzero_from_f64(
                    e,
                    dasim_sim::clock::time::TimeUnit::Seconds,
                    "--checkpoint-every",
                )
                .map_err(|e| Error::Usage(e.to_string()))
            })
            .transpose()?;
        if let Some(ckpt) = resume {
            ckpt.check_resumable(plan, crate::runtime::choice_of(backend))?;
        }
        if let Some(smallest) = plan.batch_over_shard() {
            progress.warning(&format!(
                "data.batch_size = {} is larger than the smallest shard ({smallest} samples): \
                 each of its minibatches holds some samples more than once",
                s.data.batch_size
            ));
        }
        sink.start(&RunStart {
            stamp: &plan.stamp,
            scenario_toml: &plan.scenario_toml,
            partition: plan.partition_table(),
            logs: EventLogs {
                gradients: s.metrics.log_gradients,
                messages: s.metrics.log_messages,
            },
            resume,
        })?;
        let (mut summary, mut timings) = match resume {
            Some(ckpt) => {
                let mut timings = ckpt.timings()?;
                if timings.cpu_kernels.is_empty() {
                    // A checkpoint from before the field was recorded: the rest runs on this
                    // host.
                    timings.cpu_kernels = dasim_models::backend::cpu_kernels().into();
                }
                (ckpt.summary()?, timings)
            }
            None => (self.summary(), self.timings(estimate.total())),
        };
        let first = resume.map_or(0, |c| c.algorithm);
        for i in first..s.algorithms.len() {
            self.run_algorithm(i, every, sink, progress, &mut summary, &mut timings)?;
            // Between two algorithms (or after the last): a resumed run starts the next one
            // afresh (or only evaluates the claims).
            if every.is_some() {
                sink.checkpoint(&CheckpointAt {
                    algorithm: i + 1,
                    engine: None,
                    sim_time_s: 0.0,
                    seen: &Seen::default(),
                    wall_s: 0.0,
                    summary_json: &serde_json::to_string(&summary).expect("a summary serializes"),
                    timings_json: &serde_json::to_string(&timings).expect("timings serialize"),
                    scenario_sha256: &plan.stamp.scenario_sha256,
                    backend: crate::runtime::choice_of(backend),
                    every_s: self.checkpoints.every_s,
                })?;
            }
        }
        // The claims read what every reader reads; their verdicts join the results.
        if !plan.claims.is_empty() {
            let data = sink.run_data()?;
            summary.checks = evaluate_claims(&data, plan)?;
            sink.checks(&summary)?;
        }
        sink.finish(&summary)?;
        Ok(Results {
            timing_only: summary.timing_only,
            timed_as: summary.timed_as.clone(),
            runs: summary.runs,
            timings: timings.runs,
            checks: summary.checks,
        })
    }

    /// `summary.json` before the first algorithm.
    fn summary(&self) -> Summary {
        let plan = self.plan;
        let s = &plan.loaded.scenario;
        Summary {
            scenario: s.display_name(&plan.loaded.path),
            seed: s.seed,
            dasim_version: env!("CARGO_PKG_VERSION").into(),
            git_revision: git_revision().map(str::to_string),
            scenario_sha256: plan.stamp.scenario_sha256.clone(),
            backend: self.backend.name.into(),
            device: self.backend.device_name.clone(),
            workers: s.cluster.workers,
            params: plan.params(),
            timing_only: !plan.problem.computes(),
            timed_as: s.timed_as.as_ref().map(TimedAs::describe),
            runs: Vec::new(),
            checks: Vec::new(),
        }
    }

    /// `timings.json` before the first algorithm.
    fn timings(&self, memory_estimate_bytes: u64) -> Timings {
        Timings {
            threads: self.execution.threads,
            max_batch: self.execution.max_batch,
            memory_estimate_bytes,
            cpu_kernels: dasim_models::backend::cpu_kernels().into(),
            runs: Vec::new(),
        }
    }

    /// Runs the `i`-th algorithm (from the checkpoint when the run resumes in it) and adds its
    /// entries to the summary and the timings.
    fn run_algorithm(
        &self,
        i: usize,
        every: Option<SimTime>,
        sink: &mut dyn RunSink,
        progress: &mut dyn Progress,
        summary: &mut Summary,
        timings: &mut Timings,
    ) -> Result<()> {
        let plan = self.plan;
        let loaded = &plan.loaded;
        let s = &loaded.scenario;
        let alg = &s.algorithms[i];
        let label = alg.label();
        let optimizer = s.optimizer_of(i);
        progress.algorithm_started(&label);
        let mut store = plan.problem.run_store(
            self.backend.device.clone(),
            plan.shards.clone(),
            s.data.batch_size,
            optimizer.clone(),
            s.seed,
            self.execution,
        );
        let System {
            cluster,
            network,
            topology,
            faults,
        } = plan.systems[i].clone();
        let mut world = World::new(cluster, network, topology, &mut *store, optimizer, s.seed);
        world.set_metrics(&s.metrics);
        world.set_faults(faults);
        let started = Instant::now();
        let summary_json = serde_json::to_string(&*summary).expect("a summary serializes");
        let timings_json = serde_json::to_string(&*timings).expect("timings serialize");
        let nothing_seen = Seen::default();
        // The algorithm a resumed run was in: its state, and what its summary had gathered.
        let resumed = self
            .checkpoints
            .resume
            .filter(|c| c.algorithm == i && c.engine.is_some());
        let logs = EventLogs {
            gradients: s.metrics.log_gradients,
            messages: s.metrics.log_messages,
        };
        let mut observer = RowObserver {
            label: &label,
            sink: &mut *sink,
            progress: &mut *progress,
            logs,
            seen: resumed.map(|c| c.seen.clone()).unwrap_or_default(),
            target_accuracy: s.metrics.target_accuracy,
            target_loss: s.metrics.target_loss,
            started,
            wall_before: resumed.map_or(0.0, |c| c.wall_s),
            context: CheckpointAt {
                algorithm: i,
                engine: None,
                sim_time_s: 0.0,
                seen: &nothing_seen,
                wall_s: 0.0,
                summary_json: &summary_json,
                timings_json: &timings_json,
                scenario_sha256: &plan.stamp.scenario_sha256,
                backend: crate::runtime::choice_of(&self.backend),
                every_s: self.checkpoints.every_s,
            },
        };
        if let Some(c) = resumed {
            observer.progress.note(&format!(
                "resuming {label} at simulated time {} s",
                dasim_reports::rundir::num(c.sim_time_s)
            ));
        }
        let ckpt = Checkpointing {
            every,
            interrupt: self.checkpoints.interrupt,
            resume: resumed.and_then(|c| c.engine.as_deref()),
        };
        // A configuration error found while running (an event beyond the end of simulated
        // time) is located in the scenario like every other.
        let outcome = run_algorithm_checkpointed(alg, &mut world, &s.run, &mut observer, ckpt)
            .map_err(|e| match e {
                dasim_sim::Error::Config(c) => Error::Scenario(loaded.config_error(&c)),
                dasim_sim::Error::Interrupted { time } => {
                    let at = format!(
                        "interrupted: {label} stopped at simulated time {} s",
                        dasim_reports::rundir::num(time.as_secs_f64()),
                    );
                    Error::Interrupted(match observer.sink.resume_hint() {
                        Some(hint) => format!("{at}; {hint}"),
                        None => format!("{at} (this run keeps no checkpoint)"),
                    })
                }
                other => Error::Sim(other),
            })?;
        let seen = std::mem::take(&mut observer.seen);
        let wall = observer.wall_before + started.elapsed().as_secs_f64();
        progress.algorithm_finished(&label);
        let tables = outputs::tables(&label, &outcome.record, outcome.faults.is_some());
        let stats = store.stats();
        summary
            .runs
            .push(self.algorithm_summary(i, &outcome, &seen, &stats));
        timings
            .runs
            .push(host_timings(label, wall, &outcome, &stats));
        sink.algorithm_done(tables, summary, timings)
    }

    /// The `i`-th algorithm's entry of `summary.json`, from its outcome, what the evaluation
    /// points saw and the store's counters.
    fn algorithm_summary(
        &self,
        i: usize,
        outcome: &Outcome,
        seen: &Seen,
        stats: &StoreStats,
    ) -> AlgorithmSummary {
        let plan = self.plan;
        let s = &plan.loaded.scenario;
        let alg = &s.algorithms[i];
        let label = alg.label();
        let record = &outcome.record;
        let [compute, communicate, blocked, idle, down] = record.utilization();
        let (stopped, stop_reason) = stop_of(&label, outcome);
        AlgorithmSummary {
            algorithm: label,
            kind: alg.kind().into(),
            stopped,
            stop_reason,
            options: json_object(alg),
            // An algorithm that reads no graph records none (its legend names none).
            topology: if alg.uses_topology() {
                json_object(s.topology_of(i))
            } else {
                serde_json::Map::new()
            },
            optimizer: json_object(s.optimizer_of(i)),
            backend: self.backend.name.into(),
            sim_time_s: outcome.sim_time.as_secs_f64(),
            events: outcome.events,
            worker_steps: outcome.worker_steps,
            steps_per_sim_s: outcome.worker_steps as f64
                / outcome.sim_time.as_secs_f64().max(1e-12),
            epochs: outcome.epochs,
            final_loss: outcome.final_eval.loss,
            final_accuracy: outcome.final_eval.accuracy,
            final_perplexity: plan
                .problem
                .is_language_model()
                .then(|| outcome.final_eval.loss.exp()),
            messages: outcome.network.messages,
            bytes: outcome.network.bytes,
            gradient_flushes: stats.flushes,
            gradient_requests: stats.requests,
            global_staleness: int_stats(&record.all_global_staleness()),
            row_staleness: int_stats(&record.all_row_staleness()),
            message_age: int_stats(&record.message_ages()),
            mix_age: int_stats(&record.mix_ages()),
            // Only where the kind declares the measurement: a parameter server's own staleness
            // is another quantity.
            model_staleness: outcome
                .staleness
                .filter(|_| {
                    let declared = alg.algorithm.declared();
                    declared.measures.contains(&measure::MODEL_STALENESS)
                })
                .map(|st| AlgorithmStaleness {
                    count: st.count,
                    mean: st.mean,
                    max: st.max,
                }),
            final_consensus: seen.consensus.unwrap_or(f64::NAN),
            final_suboptimality: seen.suboptimality,
            time_to_target: TimeToTarget {
                accuracy_s: seen.accuracy_s,
                loss_s: seen.loss_s,
            },
            utilization: Utilization {
                compute,
                communicate,
                blocked,
                idle,
                down: outcome.faults.is_some().then_some(down),
            },
            faults: outcome.faults.as_ref().map(outputs::fault_summary),
        }
    }
}

/// Why an algorithm stopped early, in `summary.json`'s words: diverged, stalled, or no step at
/// all; `(None, None)` for a run that reached its stop rule.
fn stop_of(label: &str, outcome: &Outcome) -> (Option<Stopped>, Option<String>) {
    if let Some(d) = &outcome.diverged {
        (Some(Stopped::Diverged), Some(format!("{label} {d}")))
    } else if let Some(stall) = &outcome.stalled {
        (Some(Stopped::Stalled), Some(format!("{label} {stall}")))
    } else if outcome.worker_steps == 0 {
        let reason = format!(
            "{label}: no worker completed a step before the stop at simulated time {} s, so \
             nothing was trained; the final loss is the initial model's",
            dasim_reports::rundir::num(outcome.sim_time.as_secs_f64())
        );
        (Some(Stopped::NoSteps), Some(reason))
    } else {
        (None, None)
    }
}

/// An algorithm's entry of `timings.json`: where its `wall` seconds went.
fn host_timings(
    algorithm: String,
    wall: f64,
    outcome: &Outcome,
    stats: &StoreStats,
) -> HostTimings {
    let gradient_wall_s = stats.gradient_wall.as_secs_f64();
    HostTimings {
        algorithm,
        wall_time_s: wall,
        gradient_wall_s,
        eval_wall_s: stats.eval_wall.as_secs_f64(),
        gradient_share: gradient_wall_s / wall.max(1e-12),
        gradient_passes: stats.passes,
        worker_steps_per_wall_s: outcome.worker_steps as f64 / wall.max(1e-12),
        sim_s_per_wall_s: outcome.sim_time.as_secs_f64() / wall.max(1e-12),
    }
}

/// Evaluates the plan's claims against a run's data: one row per claim and algorithm.
pub fn evaluate_claims(data: &RunData, plan: &Plan) -> Result<Vec<CheckRow>> {
    let view = dasim_reports::claims::RunView::of(data)?;
    Ok(plan
        .claims
        .iter()
        .flat_map(|c| c.evaluate(&view, &plan.quantities))
        .collect())
}

/// The summary of a histogram of integer measurements; `None` when it is empty.
fn int_stats(h: &Histogram) -> Option<IntStats> {
    (!h.is_empty()).then(|| IntStats {
        count: h.count(),
        mean: h.mean(),
        p99: h.quantile(0.99),
        max: h.max(),
    })
}

/// A configuration section as a JSON object, for `summary.json`.
fn json_object(section: &impl serde::Serialize) -> serde_json::Map<String, serde_json::Value> {
    match serde_json::to_value(section) {
        Ok(serde_json::Value::Object(object)) => object,
        _ => unreachable!("a configuration section serializes to a JSON object"),
    }
}

/// The engine's observer of one algorithm's run: turns its records into rows for the sink,
/// gathers what the summary needs from the evaluation points, and reports progress.
struct RowObserver<'a, 'b> {
    label: &'a str,
    sink: &'a mut dyn RunSink,
    progress: &'a mut dyn Progress,
    logs: EventLogs,
    /// The summary's view of the points so far (targets reached, the last point's values).
    seen: Seen,
    target_accuracy: Option<f64>,
    target_loss: Option<f64>,
    started: Instant,
    /// Wall seconds of this algorithm before a resumed run's start.
    wall_before: f64,
    /// The checkpoint's fixed fields (algorithm, summary and timings so far, scenario, backend).
    context: CheckpointAt<'b>,
}

impl Observer for RowObserver<'_, '_> {
    fn on_eval(&mut self, p: &EvalPoint) -> std::result::Result<(), String> {
        let t = p.time.as_secs_f64();
        if self.seen.accuracy_s.is_none()
            && self.target_accuracy.is_some_and(|a| p.eval.accuracy >= a)
        {
            self.seen.accuracy_s = Some(t);
        }
        if self.seen.loss_s.is_none() && self.target_loss.is_some_and(|l| p.eval.loss <= l) {
            self.seen.loss_s = Some(t);
        }
        self.seen.consensus = Some(p.consensus);
        self.seen.suboptimality = p.suboptimality;
        let mut write = || {
            self.sink.metric(&outputs::metric_row(self.label, p))?;
            outputs::series_rows(self.label, p).try_for_each(|row| self.sink.series(&row))
        };
        write().map_err(|e| e.to_string())
    }

    fn on_checkpoint(&mut self, state: &[u8], time: SimTime) -> std::result::Result<(), String> {
        let at = CheckpointAt {
            engine: Some(state),
            sim_time_s: time.as_secs_f64(),
            seen: &self.seen,
            wall_s: self.wall_before + self.started.elapsed().as_secs_f64(),
            ..self.context
        };
        self.sink.checkpoint(&at).map_err(|e| e.to_string())
    }

    fn on_gradient(&mut self, g: &GradientRecord) -> std::result::Result<(), String> {
        if !self.logs.gradients {
            return Ok(());
        }
        self.sink
            .gradient(&outputs::gradient_row(self.label, g))
            .map_err(|e| e.to_string())
    }

    fn on_message(&mut self, m: &MessageRecord) -> std::result::Result<(), String> {
        if !self.logs.messages {
            return Ok(());
        }
        self.sink
            .message(&outputs::message_row(self.label, m))
            .map_err(|e| e.to_string())
    }

    fn on_progress(&mut self, p: &RunProgress) {
        let wall = self.started.elapsed().as_secs_f64();
        self.progress.advanced(self.label, p, wall);
    }
}
