//! A scenario made ready to run: [`Plan::prepare`] makes every check that can be made before a
//! run and builds, once, everything the run reads.
//!
//! `dasim validate`, `dasim check`, `dasim run` and `dasim sweep` all call it, so a scenario
//! that passes `validate` fails nothing later but the run itself. What it holds:
//!
//! - the model and its data ([`Problem`]), with the partition of the training set into the
//!   workers' shards;
//! - for each algorithm, its cluster, network, topology and faults ([`System`]), built from the
//!   scenario's seed: every algorithm meets the same realization, and the run starts each from
//!   a copy of these;
//! - the scenario's claims (`[[expect]]`) checked against what the model has, and the values of
//!   the quantities their bounds name;
//! - the scenario as run (every default filled in) and the stamp every output file carries.
//!
//! Errors are located in the scenario file (file, line, column, field), as the parser's are.
//! Nothing here prints or writes a file: [`crate::simulation`] runs a plan.

use dasim_models::memory::{self, Bytes, MemoryEstimate, RunShape};
use dasim_models::{Execution, Problem};
use dasim_reports::claims::{Claim, Quantities};
use dasim_reports::rundir::{Partition, Stamp};
use dasim_sim::ConfigError;
use dasim_sim::algorithms::AlgorithmKind;
use dasim_sim::cluster::Cluster;
use dasim_sim::cluster::stragglers::StragglerModel;
use dasim_sim::fault::Faults;
use dasim_sim::net::Network;
use dasim_sim::net::topology::Topology;

use crate::outputs::{self, GIT_REVISION};
use crate::scenario::Loaded;
use crate::{Error, Result};

/// What one algorithm of a scenario runs on: built once by [`Plan::prepare`], copied for the
/// run (every run mutates its own copy, so every algorithm starts from the same state).
#[derive(Clone, Debug)]
pub struct System {
    /// The workers' compute model (step times, stragglers).
    pub cluster: Cluster,
    /// The network: the workers' NICs, then the algorithm's extra nodes' (parameter-server
    /// shards).
    pub network: Network,
    /// The communication graph: the algorithm's own, or the scenario's.
    pub topology: Topology,
    /// The scenario's faults, realized for this run.
    pub faults: Faults,
}

/// A scenario ready to run ([`crate::simulation::Simulation`]): checked, with its model, data,
/// shards, claims and every algorithm's [`System`] built.
///
/// ```no_run
/// use dasim::plan::Plan;
/// use dasim::Loaded;
///
/// let loaded = Loaded::from_file("scenarios/quickstart.toml".as_ref())?;
/// let plan = Plan::prepare(&loaded)?;
/// println!("{} parameters, {} algorithm(s)", plan.params(), plan.systems.len());
/// # Ok::<(), dasim::Error>(())
/// ```
pub struct Plan {
    /// The scenario, as loaded.
    pub loaded: Loaded,
    /// The model and its data.
    pub problem: Problem,
    /// Each worker's shard of the training set (indices into it), in worker order.
    pub shards: Vec<Vec<usize>>,
    /// Each algorithm's cluster, network, topology and faults, in scenario order.
    pub systems: Vec<System>,
    /// The scenario's `[[expect]]` claims, checked against the model.
    pub claims: Vec<Claim>,
    /// The values of the quantities the claims' bounds name.
    pub quantities: Quantities,
    /// The scenario as run: every default filled in (`scenario.toml` of a run directory).
    pub scenario_toml: String,
    /// The stamp of every output file: version, revision, and the SHA-256 of
    /// [`scenario_toml`](Self::scenario_toml).
    pub stamp: Stamp,
}

impl Plan {
    /// Checks `loaded` against its model and data and builds everything a run reads: the
    /// problem, the partition, each algorithm's system, the claims and their quantities. Every
    /// error is located in the scenario file (a data file that cannot be read at `data.path`).
    pub fn prepare(loaded: &Loaded) -> Result<Plan> {
        let problem = load_problem(loaded)?;
        loaded.check_against_model(&problem.model)?;
        let claims = claims(loaded, &problem)?;
        let shards = partition(loaded, &problem)?;
        let faults = {
            let s = &loaded.scenario;
            Faults::new(&s.faults, s.cluster.workers, &loaded.env())
                .map_err(|e| Error::Scenario(loaded.config_error(&e)))?
        };
        let systems = (0..loaded.scenario.algorithms.len())
            .map(|i| {
                let (cluster, network, topology) = build_system(loaded, &problem, i)?;
                Ok(System {
                    cluster,
                    network,
                    topology,
                    faults: faults.clone(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let quantities = quantities(loaded, &problem, &systems, &claims)?;
        let scenario_toml = resolved(loaded);
        let stamp = Stamp::of_scenario(env!("CARGO_PKG_VERSION"), GIT_REVISION, &scenario_toml);
        Ok(Plan {
            loaded: loaded.clone(),
            problem,
            shards,
            systems,
            claims,
            quantities,
            scenario_toml,
            stamp,
        })
    }

    /// The model's parameter count.
    pub fn params(&self) -> usize {
        self.problem.model.num_params()
    }

    /// The partition of the training set as `partition.csv` has it; `None` for a model without
    /// data.
    pub fn partition_table(&self) -> Option<Partition> {
        self.problem
            .has_data()
            .then(|| outputs::partition_table(&self.shards, &self.problem.split.train))
    }

    /// The smallest shard, when the minibatch is larger than it (legal, and handled: a
    /// minibatch runs on into the shard's next epoch, but rarely meant).
    pub fn batch_over_shard(&self) -> Option<usize> {
        let smallest = self.shards.iter().map(Vec::len).min()?;
        (self.problem.has_data() && self.loaded.scenario.data.batch_size > smallest)
            .then_some(smallest)
    }

    /// The memory the scenario's largest run will need (the algorithm with the most rows, or
    /// with the most messages queued behind the uplinks), with its gradients on a GPU (`gpu`)
    /// or on `flex`.
    pub fn memory_estimate(&self, execution: Execution, gpu: bool) -> MemoryEstimate {
        let s = &self.loaded.scenario;
        let n = s.cluster.workers;
        let extra = s
            .algorithms
            .iter()
            .map(|a| a.extra_rows(n))
            .max()
            .unwrap_or(0);
        let queued = (0..s.algorithms.len())
            .map(|i| self.queued_messages(i))
            .max()
            .unwrap_or((0, 0));
        MemoryEstimate::new(RunShape {
            model: &self.problem.model,
            workers: n,
            rows: n + extra,
            batch: s.data.batch_size,
            optimizer_state: (0..s.algorithms.len())
                .map(|i| s.optimizer_of(i).state_per_param())
                .max()
                .unwrap_or(0),
            data_floats: self.problem.data_floats(),
            max_batch: execution.max_batch,
            queued_messages: queued.0,
            queued_models: queued.1,
            gpu,
            threads: execution.threads,
        })
    }

    /// The messages the `i`-th algorithm will have waiting behind the workers' uplinks when its
    /// run ends, and the model-sized buffers they hold: for a worker that posts `k` whole-model
    /// messages of `S` bytes per step of `t` seconds without waiting for anything
    /// ([`AlgorithmConfig::unthrottled_posts`](dasim_sim::algorithms::AlgorithmConfig::unthrottled_posts)),
    /// on an uplink of `B` bytes/s, `(k/t − B/S) · T` over a run of `T` simulated seconds when
    /// positive, plus the `k` of the step being sent (at most the `k·T/t` it posts), holding one
    /// buffer per `k` of them. `T` is `run.sim_time_s`, or the time the workers take for
    /// `run.worker_steps` (or `run.epochs`) at their base step times, whichever comes first.
    /// Stragglers and faults only slow the posting, which makes this err on the high side; the
    /// uplink is taken at its nominal rate, so congestion, a slower downlink at the receivers or
    /// background traffic, which slow the carrying, make it err on the low side.
    fn queued_messages(&self, i: usize) -> (u64, u64) {
        let s = &self.loaded.scenario;
        let n = s.cluster.workers;
        let System {
            cluster,
            network,
            topology,
            ..
        } = &self.systems[i];
        let alg = &s.algorithms[i];
        let posts: Vec<usize> = (0..n).map(|w| alg.unthrottled_posts(w, topology)).collect();
        if posts.iter().all(|&k| k == 0) {
            return (0, 0);
        }
        let step_s: Vec<f64> = (0..n)
            .map(|w| cluster.base_step_time(w).as_secs_f64())
            .collect();
        // Worker steps per simulated second, all workers together.
        let rate: f64 = step_s.iter().map(|t| 1.0 / t).sum();
        let samples_per_epoch = self.problem.train_samples() as f64;
        let lengths = [
            s.run.sim_time_s,
            s.run.worker_steps.map(|k| k as f64 / rate),
            s.run
                .epochs
                .map(|e| e * samples_per_epoch / s.data.batch_size as f64 / rate),
        ];
        let run_s = lengths.into_iter().flatten().fold(f64::INFINITY, f64::min);
        let bytes = network.payload_bytes(self.params()) as f64;
        let (mut messages, mut models) = (0.0, 0.0);
        for w in 0..n {
            let (k, t) = (posts[w] as f64, step_s[w]);
            if k == 0.0 || t <= 0.0 {
                continue;
            }
            let carried = network.uplink_bandwidth(w) as f64 / bytes.max(1.0);
            // The backlog, plus the `k` of the step being sent (in flight even when the uplink
            // keeps up), but never more than the run posts.
            let waiting = ((k / t - carried).max(0.0) * run_s + k).min(k * run_s / t);
            messages += waiting;
            models += waiting / k;
        }
        (messages.round() as u64, models.round() as u64)
    }
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

/// Loads the scenario's data and model; a data file that cannot be read is reported at
/// `data.path` in the scenario file.
fn load_problem(loaded: &Loaded) -> Result<Problem> {
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
fn partition(loaded: &Loaded, problem: &Problem) -> Result<Vec<Vec<usize>>> {
    let s = &loaded.scenario;
    problem
        .partition(s.cluster.workers, s.seed)
        .map_err(|e| located(loaded, e, "data.partition"))
}

/// The scenario's `[[expect]]` entries, checked against the scenario and against what the
/// model has (accuracy, a known optimum), located in the file.
fn claims(loaded: &Loaded, problem: &Problem) -> Result<Vec<Claim>> {
    let accuracy = problem.split.train.classes().is_some();
    let optimum = !problem.has_data() || problem.objective().is_some();
    Ok(loaded.claims(Some(accuracy), Some(optimum))?)
}

/// The values of the quantities the claims' bounds name ([`dasim_reports::claims::QUANTITIES`]),
/// computed from the scenario, the model and the algorithms' systems; only those named are
/// computed (the spectral gap costs `O(n³)`).
fn quantities(
    loaded: &Loaded,
    problem: &Problem,
    systems: &[System],
    claims: &[Claim],
) -> Result<Quantities> {
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
        for (alg, system) in s.algorithms.iter().zip(systems) {
            let (cluster, topology) = (&system.cluster, &system.topology);
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
    // An algorithm's own (Overlap-SGP's `tau`): common when every entry that has it agrees.
    for (quantity, _, _) in crate::scenario::own_quantities() {
        let values = s.own_quantity(quantity);
        if let Some((_, first)) = values.first()
            && values.iter().all(|(_, v)| v == first)
        {
            out.set(quantity, *first);
        }
        for (label, value) in &values {
            out.set_for(label, quantity, *value);
        }
    }
    Ok(out)
}

/// Builds the cluster, network and topology of a scenario for `problem`'s model (whose FLOPs
/// give step times derived from a device speed) and its `i`-th algorithm (whose extra nodes,
/// such as parameter-server shards, get NICs after the workers', and whose own `topology`, when
/// it has one, replaces the scenario's), from the scenario's seed.
fn build_system(
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
    for a in &mut s.algorithms {
        if let AlgorithmKind::AllReduce(c) = &mut a.algorithm
            && let Some(comp) = &mut c.compression
        {
            *comp = comp.resolved();
        }
    }
    if let Some(p) = &mut s.data.path
        && p.is_relative()
    {
        let joined = loaded.base_dir().join(&*p);
        *p = joined.canonicalize().unwrap_or(joined);
    }
    let text = toml::to_string(&s).expect("a scenario serializes");
    if s.model.spec().reads_data() {
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
