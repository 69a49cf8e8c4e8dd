//! Running a scenario: every listed algorithm on the same cluster realization, results written
//! as they come.
//!
//! The run directory ([`dasim_reports::rundir`], which owns its files and their rows) receives
//! `scenario.toml` (the scenario with every default filled in) and `partition.csv`; then,
//! streamed, `metrics.csv` and `series.csv` (and `gradients.csv` and `messages.csv` when
//! `[metrics]` asks for them); after each algorithm, the tables `staleness.csv`,
//! `utilization.csv`, `waits.csv`, `links.csv`, `timeline.csv`, then `summary.json` and
//! `timings.json` are rewritten, so an interrupted run keeps everything up to the last
//! evaluation point (`dasim plot` draws its plots). The plots are drawn once, at the end. Every
//! CSV file starts with the stamp line `# dasim <version> git=<revision> scenario_sha256=<hex>`
//! ([`Stamp`]), the hash being that of the `scenario.toml` written beside it; `summary.json`
//! carries the same facts. [`crate::outputs`] turns the simulator's records into the rows.
//!
//! A scenario's `[[expect]]` claims are checked with everything else before the first
//! algorithm starts ([`preflight`]); once every algorithm has run they are evaluated on the
//! files just written, read back ([`evaluate_claims`], with the [`quantities`] their bounds
//! name), and their verdicts go to `checks.csv` and to `summary.json`'s `checks`.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use dasim_models::memory::{self, Bytes, MemoryEstimate, RunShape};
use dasim_models::{Backend, Execution, Problem, TimedAs};
use dasim_reports::claims::{Claim, Quantities, RunView};
use dasim_reports::rundir::{
    AlgorithmStaleness, AlgorithmSummary, CheckRow, EventLogs, HostTimings, IntStats, RunData,
    RunWriter, Stamp, Stopped, Summary, TimeToTarget, Timings, Utilization, WriterState, files,
    write_csv, write_partition, write_scenario,
};
use dasim_sim::ConfigError;
use dasim_sim::algorithm::World;
use dasim_sim::algorithms::run_algorithm_checkpointed;
use dasim_sim::cluster::Cluster;
use dasim_sim::cluster::stragglers::StragglerModel;
use dasim_sim::engine::{Checkpointing, SimTime};
use dasim_sim::engine::{EvalPoint, Observer, RunProgress};
use dasim_sim::fault::Faults;
use dasim_sim::net::Network;
use dasim_sim::net::topology::Topology;
use dasim_sim::record::{GradientRecord, Histogram, MessageRecord};

use crate::checkpoint::{RunCheckpoint, Seen};
use crate::outputs::{self, GIT_REVISION, git_revision};
use crate::scenario::Loaded;
use crate::{Error, Result};

/// How to run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Compute backend (see [`dasim_models::backend::select`]).
    pub backend: Backend,
    /// Output directory (created if needed).
    pub out: PathBuf,
    /// Show a progress bar on stderr.
    pub progress: bool,
    /// How the store executes gradient flushes (threads, batch limit); results do not depend
    /// on it.
    pub execution: Execution,
    /// Refuse to start when the memory estimate exceeds this many bytes (default: the memory
    /// the machine has available).
    pub memory_limit: Option<u64>,
    /// Replace the results of an earlier run in `out` ([`prepare_out`]); without it, a
    /// directory that holds `summary.json` or `metrics.csv` is refused.
    pub force: bool,
    /// Write `out/checkpoint.bin` every this many simulated seconds of an algorithm's run, and
    /// when an algorithm finishes ([`crate::checkpoint`]).
    pub checkpoint_every: Option<f64>,
    /// Raised by a Ctrl-C handler: the run stops after the event being handled, writes a
    /// checkpoint and fails with [`Error::Interrupted`].
    pub interrupt: Option<&'static AtomicBool>,
    /// Continue the run of `out` from this checkpoint (read from `out/checkpoint.bin`) instead
    /// of starting it.
    pub resume: Option<Box<RunCheckpoint>>,
}

/// What [`run_scenario`] wrote: one entry per algorithm, in scenario order, of `summary.json`
/// and of `timings.json`.
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

/// The summary of a histogram of integer measurements; `None` when it is empty.
fn int_stats(h: &Histogram) -> Option<IntStats> {
    (!h.is_empty()).then(|| IntStats {
        count: h.count(),
        mean: h.mean(),
        p99: h.quantile(0.99),
        max: h.max(),
    })
}

/// Where a run's checkpoints go and what they say besides the engine's state.
struct CheckpointContext<'a> {
    dir: &'a std::path::Path,
    scenario_path: PathBuf,
    scenario_sha256: &'a str,
    backend: &'a str,
    every: Option<f64>,
    algorithm: usize,
    summary_json: String,
    timings_json: String,
}

impl CheckpointContext<'_> {
    fn write(
        &self,
        writer: WriterState,
        engine: Option<Vec<u8>>,
        sim_time_s: f64,
        seen: Seen,
        wall_s: f64,
    ) -> Result<()> {
        RunCheckpoint {
            scenario_path: self.scenario_path.clone(),
            scenario_sha256: self.scenario_sha256.to_string(),
            backend: self.backend.to_string(),
            checkpoint_every_s: self.every,
            algorithm: self.algorithm,
            sim_time_s,
            engine,
            writer,
            summary_json: self.summary_json.clone(),
            timings_json: self.timings_json.clone(),
            seen,
            wall_s,
        }
        .write(self.dir)
    }
}

struct OutputObserver<'a> {
    label: &'a str,
    out: &'a mut RunWriter,
    /// The summary's view of the points so far (targets reached, the last point's values).
    seen: Seen,
    target_accuracy: Option<f64>,
    target_loss: Option<f64>,
    bar: &'a ProgressBar,
    started: Instant,
    /// Wall seconds of this algorithm before a resumed run's start.
    wall_before: f64,
    checkpoints: &'a CheckpointContext<'a>,
}

impl Observer for OutputObserver<'_> {
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
            self.out.metric(&outputs::metric_row(self.label, p))?;
            outputs::series_rows(self.label, p).try_for_each(|row| self.out.series(&row))
        };
        write().map_err(|e| e.to_string())
    }

    fn on_checkpoint(&mut self, state: &[u8], time: SimTime) -> std::result::Result<(), String> {
        let mut write = || -> Result<()> {
            let writer = self.out.state()?;
            self.checkpoints.write(
                writer,
                Some(state.to_vec()),
                time.as_secs_f64(),
                self.seen.clone(),
                self.wall_before + self.started.elapsed().as_secs_f64(),
            )
        };
        write().map_err(|e| e.to_string())
    }

    fn on_gradient(&mut self, g: &GradientRecord) -> std::result::Result<(), String> {
        if !self.out.logs_gradients() {
            return Ok(());
        }
        self.out
            .gradient(&outputs::gradient_row(self.label, g))
            .map_err(|e| e.to_string())
    }

    fn on_message(&mut self, m: &MessageRecord) -> std::result::Result<(), String> {
        if !self.out.logs_messages() {
            return Ok(());
        }
        self.out
            .message(&outputs::message_row(self.label, m))
            .map_err(|e| e.to_string())
    }

    fn on_progress(&mut self, p: &RunProgress) {
        let wall = self.started.elapsed().as_secs_f64().max(1e-9);
        self.bar.set_position((p.fraction * 1000.0).round() as u64);
        self.bar.set_message(format!(
            "{}  sim {:.2} s  {} steps  {:.0} steps/s",
            self.label,
            p.time.as_secs_f64(),
            p.worker_steps,
            p.worker_steps as f64 / wall
        ));
    }
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { context, source }
}

/// Loads the scenario's data and model; a data file that cannot be read is reported at
/// `data.path` in the scenario file.
pub fn load_problem(loaded: &Loaded) -> Result<Problem> {
    let s = &loaded.scenario;
    let problem = Problem::load(&s.model, &s.data, &loaded.base_dir(), s.seed)
        .map_err(|e| located(loaded, e, "data.path"))?;
    let train = problem.split.train.len();
    if problem.has_data() && train < s.cluster.workers {
        let e = ConfigError::new(
            "cluster.workers",
            format!(
                "{} workers cannot share {train} training samples",
                s.cluster.workers
            ),
        )
        .hint("every worker needs a shard of at least one sample: use fewer workers or more data");
        return Err(Error::Scenario(loaded.config_error(&e)));
    }
    Ok(problem)
}

/// A models error located in the scenario: configuration errors at their own field, data-file
/// errors at `data_field`.
fn located(loaded: &Loaded, e: dasim_models::Error, data_field: &str) -> Error {
    match e {
        dasim_models::Error::Config(c) => Error::Scenario(loaded.config_error(&c)),
        dasim_models::Error::Data { .. } => {
            Error::Scenario(loaded.config_error(&ConfigError::new(data_field, e.to_string())))
        }
        other => Error::Models(other),
    }
}

/// The shards of the scenario's workers under its `[data.partition]`, with located errors.
pub fn partition(loaded: &Loaded, problem: &Problem) -> Result<Vec<Vec<usize>>> {
    let s = &loaded.scenario;
    problem
        .partition(s.cluster.workers, s.seed)
        .map_err(|e| located(loaded, e, "data.partition"))
}

/// Every check that can be made before a run, made before the first algorithm starts (and by
/// `dasim validate`): each entry against the model (an LPP-SGD process or a parameter-server
/// shard needs at least one parameter), the partition of the data, and each algorithm's cluster,
/// network and topology (trace files, step times from FLOPs). Errors name the file, line and
/// column and the entry's index.
pub fn preflight(loaded: &Loaded, problem: &Problem) -> Result<()> {
    loaded.check_against_model(problem.model.num_params())?;
    claims(loaded, problem)?;
    partition(loaded, problem)?;
    for i in 0..loaded.scenario.algorithms.len() {
        build_system(loaded, problem, i)?;
    }
    Ok(())
}

/// The scenario's `[[expect]]` entries, checked against the scenario and against what the
/// model has (accuracy, a known optimum), located in the file.
pub fn claims(loaded: &Loaded, problem: &Problem) -> Result<Vec<Claim>> {
    let accuracy = problem.split.train.classes().is_some();
    let optimum = !problem.has_data() || problem.objective().is_some();
    Ok(loaded.claims(Some(accuracy), Some(optimum))?)
}

/// The values of the quantities the claims' bounds name ([`dasim_reports::claims::QUANTITIES`]),
/// computed from the scenario and the model; only those named are computed (the spectral gap
/// costs `O(n³)`).
pub fn quantities(loaded: &Loaded, problem: &Problem, claims: &[Claim]) -> Result<Quantities> {
    let s = &loaded.scenario;
    let named = |q: &str| claims.iter().any(|c| c.quantities().contains(&q));
    let mut out = Quantities::default();
    let n = s.cluster.workers;
    out.set("n", n as f64)
        .set("P", problem.model.num_params() as f64)
        .set("batch", s.data.batch_size as f64);
    let located = |e: ConfigError| Error::Scenario(loaded.config_error(&e));
    if named("s") {
        let mut factors = vec![1.0f64; n];
        for (m, entry) in s.cluster.stragglers.iter().enumerate() {
            let factor = match &entry.model {
                StragglerModel::Fixed { factor } => *factor,
                StragglerModel::Markov(c) => c.factor,
                StragglerModel::Window(c) => c.factor,
                StragglerModel::Jitter(c) => c.mean,
                StragglerModel::Delay(_) | StragglerModel::Trace(_) => continue,
            };
            let covered = entry
                .workers
                .resolve(n, s.seed, &format!("cluster.stragglers[{m}].workers"))
                .map_err(located)?;
            for w in covered {
                factors[w] *= factor;
            }
        }
        out.set("s", factors.into_iter().fold(1.0, f64::max));
    }
    if named("step_s") || named("gap") || named("degree") {
        // The cluster is the same for every algorithm; the graph may be an entry's own, and then
        // `degree` and `gap` are that algorithm's.
        let shared = s.algorithms.iter().all(|a| a.topology.is_none());
        for (i, alg) in s.algorithms.iter().enumerate() {
            let (cluster, _, topology) = build_system(loaded, problem, i)?;
            let step = (0..n)
                .map(|w| cluster.base_step_time(w).as_secs_f64())
                .fold(f64::INFINITY, f64::min);
            out.set("step_s", step);
            // A time-varying schedule's: the most peers a node has in any iteration of it, its
            // `peers_schedule` phases included (where they fall does not matter here).
            let degree = if topology.is_time_varying() {
                topology.training_schedule(1, 1).max_out_peers()
            } else {
                topology.degree_stats().max
            };
            let gap =
                (named("gap") && !topology.is_time_varying()).then(|| topology.spectral_gap());
            if shared {
                out.set("degree", degree as f64);
                if let Some(gap) = gap {
                    out.set("gap", gap);
                }
                break;
            }
            let label = alg.label();
            out.set_for(&label, "degree", degree as f64);
            if let Some(gap) = gap {
                out.set_for(&label, "gap", gap);
            }
        }
    }
    let taus = s.overlap_taus();
    if let Some((_, first)) = taus.first()
        && taus.iter().all(|(_, t)| t == first)
    {
        out.set("tau", *first as f64);
    }
    for (label, tau) in &taus {
        out.set_for(label, "tau", *tau as f64);
    }
    Ok(out)
}

/// A configuration section as a JSON object, for `summary.json`.
fn json_object(section: &impl serde::Serialize) -> serde_json::Map<String, serde_json::Value> {
    match serde_json::to_value(section) {
        Ok(serde_json::Value::Object(object)) => object,
        _ => unreachable!("a configuration section serializes to a JSON object"),
    }
}

/// Removes a file an earlier run left in the output directory, if there is one.
fn remove_stale(path: &std::path::Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(io(format!("cannot remove {}", path.display()))(e))
        }
        _ => Ok(()),
    }
}

/// The files of a run directory that `dasim run` writes (plots aside), and `dasim report`'s page.
const RUN_FILES: [&str; 17] = [
    files::SCENARIO,
    files::SUMMARY,
    files::TIMINGS,
    files::METRICS,
    files::SERIES,
    files::STALENESS,
    files::UTILIZATION,
    files::WAITS,
    files::LINKS,
    files::TIMELINE,
    files::GRADIENTS,
    files::MESSAGES,
    files::PARTITION,
    files::CHECKS,
    files::FAULTS,
    "report.html",
    crate::checkpoint::FILE,
];

/// Gets the output directory ready: refuses one that already holds a run's results
/// (`summary.json` or `metrics.csv`) unless `force`, and with `force` removes the earlier run's
/// files (every file `dasim run` writes, `report.html`, and the plots: every `*.png` and
/// `*.svg`), so that no file of the old run survives beside the new one. Other files are left
/// alone.
pub fn prepare_out(out: &std::path::Path, force: bool) -> Result<()> {
    let holds = [files::SUMMARY, files::METRICS]
        .iter()
        .any(|f| out.join(f).exists());
    if !holds {
        return Ok(());
    }
    if !force {
        let resumable = if out.join(crate::checkpoint::FILE).exists() {
            format!(
                ", or continue its interrupted run with dasim run --resume {}",
                out.display()
            )
        } else {
            String::new()
        };
        return Err(Error::Usage(format!(
            "{} already holds the results of a run (summary.json, metrics.csv); pass --force to \
             replace them, or choose another --out{resumable}",
            out.display()
        )));
    }
    let entries = std::fs::read_dir(out).map_err(io(format!("cannot read {}", out.display())))?;
    for entry in entries {
        let entry = entry.map_err(io(format!("cannot read {}", out.display())))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let plot = name.ends_with(".png") || name.ends_with(".svg");
        if (plot || RUN_FILES.contains(&name.as_ref()))
            && entry.file_type().is_ok_and(|t| t.is_file())
        {
            remove_stale(&entry.path())?;
        }
    }
    Ok(())
}

/// Evaluates `claims` against the run directory `dir` (read back through
/// [`dasim_reports::rundir`]): one row per claim and algorithm.
pub fn evaluate_claims(
    dir: &std::path::Path,
    claims: &[Claim],
    quantities: &Quantities,
) -> Result<Vec<CheckRow>> {
    let data = RunData::load(dir)?;
    let view = RunView::of(&data)?;
    Ok(claims
        .iter()
        .flat_map(|c| c.evaluate(&view, quantities))
        .collect())
}

/// Builds the cluster, network and topology of a scenario for `problem`'s model (whose FLOPs
/// give step times derived from a device speed) and its `i`-th algorithm (whose extra nodes,
/// such as parameter-server shards, get NICs after the workers', and whose own `topology`, when
/// it has one, replaces the scenario's). Fresh for every algorithm, from the same seed, so every
/// algorithm sees the same realization.
pub fn build_system(
    loaded: &Loaded,
    problem: &Problem,
    i: usize,
) -> Result<(Cluster, Network, Topology)> {
    let s = &loaded.scenario;
    let alg = &s.algorithms[i];
    let located = |e: ConfigError| Error::Scenario(loaded.config_error(&e));
    // Proxy mode: steps and messages cost what the `[timed_as]` model's would.
    let timed = s
        .timed_as
        .as_ref()
        .map(|t| t.shape())
        .transpose()
        .map_err(located)?;
    let flops = timed.map_or_else(
        || problem.model.train_flops_per_sample(),
        |t| 3.0 * t.forward_flops as f64,
    );
    let mut env = loaded.env();
    // A timing model given by its size alone has no FLOPs: a device speed cannot time it.
    if flops > 0.0 {
        env = env.with_flops_per_sample(flops);
    }
    let n = s.cluster.workers;
    let mut network = Network::new(&s.network, n + alg.extra_nodes(), &env).map_err(located)?;
    if let Some(t) = timed {
        network = network.timed_as(problem.model.num_params(), t.params);
    }
    Ok((
        Cluster::new(&s.cluster, &env).map_err(located)?,
        network,
        s.build_topology(i, &env).map_err(located)?,
    ))
}

/// The scenario as run: defaults filled in (the network's effective figures too), and a
/// relative data path made absolute so the copy in the run directory still points at the same
/// file.
fn resolved(loaded: &Loaded) -> String {
    let mut s = loaded.scenario.clone();
    s.network = s.network.resolved();
    s.data = s.data.resolved();
    if let Some(p) = &mut s.data.path
        && p.is_relative()
    {
        let joined = loaded.base_dir().join(&*p);
        *p = joined.canonicalize().unwrap_or(joined);
    }
    let text = toml::to_string(&s).expect("a scenario serializes");
    if !matches!(s.model, dasim_models::ModelConfig::Quadratic { .. }) {
        return text;
    }
    // The quadratic reads no data: leave out the default `[data]` tables rather than suggest
    // they were used (line by line, to keep the sections in their usual order).
    let mut in_data = false;
    let mut kept = String::with_capacity(text.len());
    for line in text.lines() {
        if line.starts_with('[') {
            in_data = line == "[data]" || line.starts_with("[data.");
        }
        if !in_data {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept
}

/// The memory the scenario's largest run will need (the algorithm with the most rows, or with
/// the most messages queued behind the uplinks), with its gradients on a GPU (`gpu`) or on
/// `flex`.
pub fn memory_estimate(
    loaded: &Loaded,
    problem: &Problem,
    execution: Execution,
    gpu: bool,
) -> Result<MemoryEstimate> {
    let s = &loaded.scenario;
    let n = s.cluster.workers;
    let extra = s
        .algorithms
        .iter()
        .map(|a| a.extra_nodes())
        .max()
        .unwrap_or(0);
    let mut queued = (0, 0);
    for i in 0..s.algorithms.len() {
        queued = queued.max(queued_messages(loaded, problem, i)?);
    }
    Ok(MemoryEstimate::new(RunShape {
        model: &problem.model,
        workers: n,
        rows: n + extra,
        batch: s.data.batch_size,
        optimizer_state: (0..s.algorithms.len())
            .map(|i| s.optimizer_of(i).state_per_param())
            .max()
            .unwrap_or(0),
        data_floats: problem.data_floats(),
        max_batch: execution.max_batch,
        queued_messages: queued.0,
        queued_models: queued.1,
        gpu,
        threads: execution.threads,
    }))
}

/// The messages the `i`-th algorithm will have waiting behind the workers' uplinks when its run
/// ends, and the model-sized buffers they hold: for a worker that posts `k` whole-model
/// messages of `S` bytes per step of `t` seconds without waiting for anything
/// ([`AlgorithmConfig::unthrottled_posts`]), on an uplink of `B` bytes/s, `(k/t − B/S) · T`
/// over a run of `T` simulated seconds when positive, plus the `k` of the step being sent (at
/// most the `k·T/t` it posts), holding one buffer per `k` of them. `T` is `run.sim_time_s`, or the time the workers take for
/// `run.worker_steps` (or `run.epochs`) at their base step times, whichever comes first.
/// Stragglers and faults only slow the posting, which makes this err on the high side; the
/// uplink is taken at its nominal rate, so congestion, a slower downlink at the receivers or
/// background traffic, which slow the carrying, make it err on the low side.
fn queued_messages(loaded: &Loaded, problem: &Problem, i: usize) -> Result<(u64, u64)> {
    let s = &loaded.scenario;
    let n = s.cluster.workers;
    let (cluster, network, topology) = build_system(loaded, problem, i)?;
    let alg = &s.algorithms[i];
    let posts: Vec<usize> = (0..n)
        .map(|w| alg.unthrottled_posts(w, &topology))
        .collect();
    if posts.iter().all(|&k| k == 0) {
        return Ok((0, 0));
    }
    let step_s: Vec<f64> = (0..n)
        .map(|w| cluster.base_step_time(w).as_secs_f64())
        .collect();
    // Worker steps per simulated second, all workers together.
    let rate: f64 = step_s.iter().map(|t| 1.0 / t).sum();
    let samples_per_epoch = problem.train_samples() as f64;
    let lengths = [
        s.run.sim_time_s,
        s.run.worker_steps.map(|k| k as f64 / rate),
        s.run
            .epochs
            .map(|e| e * samples_per_epoch / s.data.batch_size as f64 / rate),
    ];
    let run_s = lengths.into_iter().flatten().fold(f64::INFINITY, f64::min);
    let bytes = network.payload_bytes(problem.model.num_params()) as f64;
    let (mut messages, mut models) = (0.0, 0.0);
    for w in 0..n {
        let (k, t) = (posts[w] as f64, step_s[w]);
        if k == 0.0 || t <= 0.0 {
            continue;
        }
        let carried = network.uplink_bandwidth(w) as f64 / bytes.max(1.0);
        // The backlog, plus the `k` of the step being sent (in flight even when the uplink keeps
        // up), but never more than the run posts.
        let waiting = ((k / t - carried).max(0.0) * run_s + k).min(k * run_s / t);
        messages += waiting;
        models += waiting / k;
    }
    Ok((messages.round() as u64, models.round() as u64))
}

/// Refuses, before anything is written, a run whose memory estimate exceeds `limit` (or, when
/// not given, the memory the machine has available), saying what would help.
pub fn check_memory(estimate: &MemoryEstimate, limit: Option<u64>) -> Result<()> {
    let (limit, what) = match limit {
        Some(l) => (l, "the limit set by --memory-limit"),
        None => match memory::available() {
            Some(a) => (a, "the memory available on this machine"),
            None => return Ok(()),
        },
    };
    if estimate.total() <= limit {
        return Ok(());
    }
    let hint = if estimate.queued > estimate.total() / 2 {
        // Messages posted faster than the uplinks carry them pile up for the whole run.
        "most of it is messages waiting behind the workers' uplinks, which grow with the run's \
         length: shorten the run (run.sim_time_s, run.worker_steps), give the network more \
         bandwidth, use fewer workers, or let DASGD forward along the graph \
         (broadcast = \"topology\")"
    } else {
        "use fewer workers, a smaller model or minibatch, `--max-batch` to evaluate fewer \
         gradients per pass, or `--backend flex` to train in main memory"
    };
    Err(Error::Memory(format!(
        "this run needs an estimated {estimate}, more than {what} ({}); hint: {hint}",
        Bytes(limit)
    )))
}

/// Refuses to resume `ckpt` with a scenario that is not the one it ran (its SHA-256 as run) or
/// on another backend (the numbers would differ from the run's own).
fn check_resumable(
    loaded: &Loaded,
    ckpt: &RunCheckpoint,
    stamp: &Stamp,
    backend: &str,
) -> Result<()> {
    if stamp.scenario_sha256 != ckpt.scenario_sha256 {
        return Err(Error::Usage(format!(
            "{} is not the scenario of the checkpoint: its SHA-256 as run is {}, the checkpoint's \
             {}; the file changed since the run started (restore it, or start a new run)",
            loaded.path.display(),
            stamp.scenario_sha256,
            ckpt.scenario_sha256
        )));
    }
    if backend != ckpt.backend {
        return Err(Error::Usage(format!(
            "the checkpoint's run used the {} backend, this one {backend}: resume it with \
             --backend {}",
            ckpt.backend, ckpt.backend
        )));
    }
    Ok(())
}

/// Runs every algorithm of the scenario and writes the run directory.
pub fn run_scenario(loaded: &Loaded, opts: &RunOptions) -> Result<Results> {
    run_scenario_with(loaded, opts, true)
}

/// [`run_scenario`], drawing the plots at the end only when `plots` is set (`dasim check`
/// leaves them out of the temporary run directories it removes).
pub fn run_scenario_with(loaded: &Loaded, opts: &RunOptions, plots: bool) -> Result<Results> {
    let s = &loaded.scenario;
    let resume = opts.resume.as_deref();
    if resume.is_none() {
        prepare_out(&opts.out, opts.force)?;
    }
    let problem = load_problem(loaded)?;
    preflight(loaded, &problem)?;
    let claims = claims(loaded, &problem)?;
    let quantities = quantities(loaded, &problem, &claims)?;
    let backend = &opts.backend;
    let gpu = !dasim_models::backend::is_flex(&backend.device);
    let estimate = memory_estimate(loaded, &problem, opts.execution, gpu)?;
    check_memory(&estimate, opts.memory_limit)?;
    if opts.progress {
        eprintln!("memory: estimated {estimate}");
    }
    let every = opts
        .checkpoint_every
        .map(|e| {
            SimTime::checked_nonzero_from_f64(
                e,
                dasim_sim::clock::time::TimeUnit::Seconds,
                "--checkpoint-every",
            )
            .map_err(|e| Error::Usage(e.to_string()))
        })
        .transpose()?;
    std::fs::create_dir_all(&opts.out)
        .map_err(io(format!("cannot create {}", opts.out.display())))?;
    let scenario_text = resolved(loaded);
    let stamp = Stamp::of_scenario(env!("CARGO_PKG_VERSION"), GIT_REVISION, &scenario_text);
    if let Some(ckpt) = resume {
        check_resumable(loaded, ckpt, &stamp, backend.name)?;
    } else {
        write_scenario(&opts.out, &scenario_text)?;
    }
    let shards = partition(loaded, &problem)?;
    // Legal, and handled (a minibatch runs on into the shard's next epoch), but rarely meant.
    if let Some(smallest) = shards.iter().map(Vec::len).min()
        && problem.has_data()
        && s.data.batch_size > smallest
    {
        eprintln!(
            "warning: data.batch_size = {} is larger than the smallest shard ({smallest} samples): \
             each of its minibatches holds some samples more than once",
            s.data.batch_size
        );
    }
    if problem.has_data() && resume.is_none() {
        write_partition(
            &opts.out,
            &stamp,
            &outputs::partition_table(&shards, &problem.split.train),
        )?;
    }
    let scenario_sha256 = stamp.scenario_sha256.clone();
    let logs = EventLogs {
        gradients: s.metrics.log_gradients,
        messages: s.metrics.log_messages,
    };
    let mut out = match resume {
        Some(ckpt) => RunWriter::resume(&opts.out, stamp, logs, ckpt.writer.clone())?,
        None => RunWriter::create(&opts.out, stamp, logs)?,
    };

    let (mut summary, mut timings) = match resume {
        Some(ckpt) => {
            let mut timings = ckpt.timings()?;
            if timings.cpu_kernels.is_empty() {
                // A checkpoint from before the field was recorded: the rest runs on this host.
                timings.cpu_kernels = dasim_models::backend::cpu_kernels().into();
            }
            (ckpt.summary()?, timings)
        }
        None => (
            Summary {
                scenario: s.display_name(&loaded.path),
                seed: s.seed,
                dasim_version: env!("CARGO_PKG_VERSION").into(),
                git_revision: git_revision().map(str::to_string),
                scenario_sha256: scenario_sha256.clone(),
                backend: backend.name.into(),
                device: backend.device_name.clone(),
                workers: s.cluster.workers,
                params: problem.model.num_params(),
                timing_only: !problem.computes(),
                timed_as: s.timed_as.as_ref().map(TimedAs::describe),
                runs: Vec::new(),
                checks: Vec::new(),
            },
            Timings {
                threads: opts.execution.threads,
                max_batch: opts.execution.max_batch,
                memory_estimate_bytes: estimate.total(),
                cpu_kernels: dasim_models::backend::cpu_kernels().into(),
                runs: Vec::new(),
            },
        ),
    };
    if resume.is_some() {
        // The files as they were at the checkpoint (a later algorithm may have rewritten them
        // before the run was stopped).
        if summary.runs.is_empty() {
            remove_stale(&opts.out.join(files::SUMMARY))?;
            remove_stale(&opts.out.join(files::TIMINGS))?;
        } else {
            out.summary(&summary)?;
            out.timings(&timings)?;
        }
        remove_stale(&opts.out.join(files::CHECKS))?;
    }
    let scenario_path = std::path::absolute(&loaded.path).unwrap_or_else(|_| loaded.path.clone());
    let first = resume.map_or(0, |c| c.algorithm);

    for (i, alg) in s.algorithms.iter().enumerate().skip(first) {
        let label = alg.label();
        let optimizer = s.optimizer_of(i);
        let bar = if opts.progress {
            ProgressBar::new(1000)
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {percent:>3}%  {msg}",
            )
            .expect("valid template"),
        );
        let mut store = problem.run_store(
            backend.device.clone(),
            shards.clone(),
            s.data.batch_size,
            optimizer.clone(),
            s.seed,
            opts.execution,
        );
        let (cluster, network, topology) = build_system(loaded, &problem, i)?;
        let mut world = World::new(cluster, network, topology, &mut *store, optimizer, s.seed);
        world.set_metrics(&s.metrics);
        let faults = Faults::new(&s.faults, s.cluster.workers, &loaded.env());
        world.set_faults(faults.map_err(|e| Error::Scenario(loaded.config_error(&e)))?);
        let started = Instant::now();
        let checkpoints = CheckpointContext {
            dir: &opts.out,
            scenario_path: scenario_path.clone(),
            scenario_sha256: &scenario_sha256,
            backend: backend.name,
            every: opts.checkpoint_every,
            algorithm: i,
            summary_json: serde_json::to_string(&summary).expect("a summary serializes"),
            timings_json: serde_json::to_string(&timings).expect("timings serialize"),
        };
        // The algorithm a resumed run was in: its state, and what its summary had gathered.
        let resumed = resume.filter(|c| c.algorithm == i && c.engine.is_some());
        let mut recorder = OutputObserver {
            label: &label,
            out: &mut out,
            seen: resumed.map(|c| c.seen.clone()).unwrap_or_default(),
            target_accuracy: s.metrics.target_accuracy,
            target_loss: s.metrics.target_loss,
            bar: &bar,
            started,
            wall_before: resumed.map_or(0.0, |c| c.wall_s),
            checkpoints: &checkpoints,
        };
        if let Some(c) = resumed
            && opts.progress
        {
            eprintln!(
                "resuming {label} at simulated time {} s",
                dasim_reports::rundir::num(c.sim_time_s)
            );
        }
        let ckpt = Checkpointing {
            every,
            interrupt: opts.interrupt,
            resume: resumed.and_then(|c| c.engine.as_deref()),
        };
        // A configuration error found while running (an event beyond the end of simulated
        // time) is located in the scenario like every other.
        let outcome = run_algorithm_checkpointed(alg, &mut world, &s.run, &mut recorder, ckpt)
            .map_err(|e| match e {
                dasim_sim::Error::Config(c) => Error::Scenario(loaded.config_error(&c)),
                dasim_sim::Error::Interrupted { time } => Error::Interrupted(format!(
                    "interrupted: {label} stopped at simulated time {} s; a checkpoint is in {}; \
                     continue with: dasim run --resume {}",
                    dasim_reports::rundir::num(time.as_secs_f64()),
                    opts.out.join(crate::checkpoint::FILE).display(),
                    opts.out.display()
                )),
                other => Error::Sim(other),
            })?;
        let seen = std::mem::take(&mut recorder.seen);
        let wall = recorder.wall_before + started.elapsed().as_secs_f64();
        bar.finish_and_clear();
        out.add_tables(outputs::tables(
            &label,
            &outcome.record,
            outcome.faults.is_some(),
        ))?;
        crate::checkpoint::crash_point("tables");
        let stats = store.stats();
        let record = &outcome.record;
        let [compute, communicate, blocked, idle, down] = record.utilization();
        let (stopped, stop_reason) = if let Some(d) = &outcome.diverged {
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
        };
        summary.runs.push(AlgorithmSummary {
            algorithm: label.clone(),
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
            optimizer: json_object(optimizer),
            backend: backend.name.into(),
            sim_time_s: outcome.sim_time.as_secs_f64(),
            events: outcome.events,
            worker_steps: outcome.worker_steps,
            steps_per_sim_s: outcome.worker_steps as f64
                / outcome.sim_time.as_secs_f64().max(1e-12),
            epochs: outcome.epochs,
            final_loss: outcome.final_eval.loss,
            final_accuracy: outcome.final_eval.accuracy,
            messages: outcome.network.messages,
            bytes: outcome.network.bytes,
            gradient_flushes: stats.flushes,
            gradient_requests: stats.requests,
            global_staleness: int_stats(&record.all_global_staleness()),
            row_staleness: int_stats(&record.all_row_staleness()),
            message_age: int_stats(&record.message_ages()),
            mix_age: int_stats(&record.mix_ages()),
            dasgd: outcome
                .staleness
                .filter(|_| alg.kind() == "dasgd")
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
        });
        let gradient_wall_s = stats.gradient_wall.as_secs_f64();
        timings.runs.push(HostTimings {
            algorithm: label.clone(),
            wall_time_s: wall,
            gradient_wall_s,
            eval_wall_s: stats.eval_wall.as_secs_f64(),
            gradient_share: gradient_wall_s / wall.max(1e-12),
            gradient_passes: stats.passes,
            worker_steps_per_wall_s: outcome.worker_steps as f64 / wall.max(1e-12),
            sim_s_per_wall_s: outcome.sim_time.as_secs_f64() / wall.max(1e-12),
        });
        out.summary(&summary)?;
        out.timings(&timings)?;
        crate::checkpoint::crash_point("summary");
        // Between two algorithms (or after the last): a resumed run starts the next one afresh
        // (or only evaluates the claims and draws the plots).
        if every.is_some() {
            let next = CheckpointContext {
                algorithm: i + 1,
                summary_json: serde_json::to_string(&summary).expect("a summary serializes"),
                timings_json: serde_json::to_string(&timings).expect("timings serialize"),
                ..checkpoints
            };
            next.write(out.state()?, None, 0.0, Seen::default(), 0.0)?;
        }
    }
    // The claims read the files every reader reads; their verdicts join the run directory.
    if claims.is_empty() {
        remove_stale(&opts.out.join(dasim_reports::rundir::files::CHECKS))?;
    } else {
        summary.checks = evaluate_claims(&opts.out, &claims, &quantities)?;
        write_csv(&opts.out, out.stamp(), &summary.checks)?;
        out.summary(&summary)?;
    }
    // Every file of every algorithm is on disk: draw every plot once, from what the files hold:
    // the tables as they were written (still in memory; read back they are the same rows, so
    // the plots of a run and of `dasim plot` are the same bytes, `tests/plot.rs`), the rest
    // read. (Not after each algorithm: at 1,024 workers redrawing is not free, and `dasim plot`
    // draws an interrupted run's plots from the files it kept.)
    crate::checkpoint::crash_point("plots");
    if plots {
        let tables = out.take_tables();
        let data = RunData::with_tables(&opts.out, out.stamp(), tables)?;
        dasim_reports::plot_run_data(&data, &opts.out)?;
    }
    // Every file is complete: nothing is left to continue.
    RunCheckpoint::remove(&opts.out)?;
    Ok(Results {
        timing_only: summary.timing_only,
        timed_as: summary.timed_as.clone(),
        runs: summary.runs,
        timings: timings.runs,
        checks: summary.checks,
    })
}
