//! The one door above the plan: what to run (a scenario, or a run directory to resume), on
//! which backend and threads, under which seeds, into which sink, resolved once.
//!
//! `dasim run`, `dasim check`, `dasim validate`, every point of a sweep and the Python
//! package's `run` and `check` all go through a [`Launch`]. It resolves in two steps, so that a
//! caller can say what it got before the slow part:
//!
//! 1. [`Launch::start`]: the checkpoint of a resumed run and whether the run can continue on
//!    the backend asked for, the scenario, the thread pool ([`Pool`]) and the backend;
//! 2. [`Started::prepare`]: the sink (a run directory is claimed: one holding an earlier run's
//!    results is refused without `force`), one [`Plan`] per seed ([`Plan::prepare`]: every
//!    check a run makes, everything built once), each checked against the memory limit, all
//!    before anything runs.
//!
//! [`Ready::run`] then runs a seed's plan ([`Simulation::run`]) on the pool, into its sink.
//! [`Launch::plans`] stops at the plans, without a pool or a backend (`dasim validate`).
//!
//! ```no_run
//! use dasim::launch::{Launch, Sink, Source, Threads};
//! use dasim::simulation::Silent;
//! use dasim::Loaded;
//! use dasim_models::BackendChoice;
//!
//! let loaded = Loaded::from_file("scenarios/quickstart.toml".as_ref())?;
//! let launch = Launch {
//!     backend: BackendChoice::Flex,
//!     threads: Threads::Own(Some(2)),
//!     seeds: Some(vec![1, 2, 3]),
//!     ..Launch::new(Source::Scenario(loaded))
//! };
//! let started = launch.start()?;
//! eprintln!("{}, {} thread(s)", started.backend(), started.threads());
//! let mut ready = started.prepare()?;
//! for i in 0..ready.len() {
//!     let results = ready.run(i, &mut Silent, None)?;
//!     println!("seed {}: {} verdicts", ready.seed(i), results.checks.len());
//! }
//! # Ok::<(), dasim::Error>(())
//! ```

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use dasim_models::{Backend, BackendChoice, Execution};
use dasim_reports::claims::Claim;

use crate::checkpoint::RunCheckpoint;
use crate::plan::{Plan, check_memory};
use crate::runtime::{self, Pool};
use crate::scenario::Loaded;
use crate::simulation::{Checkpoints, Progress, Results, RunSink, Simulation};
use crate::sink::{InMemory, RunDir};
use crate::{Error, Result};

/// What a launch runs.
#[derive(Clone, Debug)]
pub enum Source {
    /// A scenario, from its start.
    Scenario(Loaded),
    /// The interrupted run of a run directory, from its checkpoint (`dasim run --resume DIR`):
    /// the scenario its checkpoint names (the file, unchanged), unless one is given (then it
    /// must be the one the run ran). It runs under its own seed, into its own directory.
    Resume {
        /// The run directory.
        dir: PathBuf,
        /// The scenario, when not read from the file the checkpoint names.
        scenario: Option<Loaded>,
    },
}

/// Where a launch's results go (a resumed run goes into its own directory, whatever this says).
#[derive(Clone, Debug, Default)]
pub enum Sink {
    /// Kept in memory ([`InMemory`]): nothing is written.
    #[default]
    Memory,
    /// The run directory `out` ([`RunDir::create`]: without `force`, one holding the results
    /// of an earlier run is refused), with the plots drawn at the end when `plots`. One seed.
    Dir {
        /// The run directory.
        out: PathBuf,
        /// Replace an earlier run's results.
        force: bool,
        /// Draw the plots at the end.
        plots: bool,
    },
    /// A run directory per seed, `root/seed-<seed>`, each replacing an earlier run's results
    /// when its run starts (`dasim check`).
    SeedDirs {
        /// The directory of the seeds' run directories.
        root: PathBuf,
        /// Draw each run's plots at its end.
        plots: bool,
    },
}

/// Which thread pool a launch's runs execute on ([`Pool`]). Results do not depend on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threads {
    /// The process's one pool ([`Pool::process`]) with this many threads (`None`: every core):
    /// the command line's. The first launch starts it; later ones must ask for as many.
    Process(Option<usize>),
    /// A pool of this many threads (`None`: every core) of the launch's own
    /// ([`Pool::own`]): a program that embeds dasim, a sweep's points in one process, tests.
    Own(Option<usize>),
}

/// What to run, on what, into what: everything a caller says, resolved by [`Launch::start`]
/// and [`Started::prepare`]. Build it from [`Launch::new`] with the fields that differ.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The scenario, or the run directory to resume.
    pub source: Source,
    /// The backend asked for; a resumed run's is its checkpoint's (`auto`), or must be it.
    pub backend: BackendChoice,
    /// The thread pool.
    pub threads: Threads,
    /// The seeds to run the scenario under, each replacing its own (distinct, at least one);
    /// `None`: its own seed.
    pub seeds: Option<Vec<u64>>,
    /// Where the results go.
    pub sink: Sink,
    /// Gradient requests per forward/backward pass at most (`None`: every pending one).
    pub max_batch: Option<usize>,
    /// Refuse to start when a run's memory estimate exceeds this many bytes (`None`: the
    /// memory the machine has available).
    pub memory_limit: Option<u64>,
    /// Take a checkpoint every this many simulated seconds of an algorithm's run, and between
    /// algorithms (a run directory keeps it); a resumed run keeps its own unless given.
    pub checkpoint_every: Option<f64>,
}

impl Launch {
    /// A launch of `source` on `auto` with a pool of its own on every core, under the
    /// scenario's seed, kept in memory, every pending request per pass, no checkpoints.
    pub fn new(source: Source) -> Launch {
        Launch {
            source,
            backend: BackendChoice::Auto,
            threads: Threads::Own(None),
            seeds: None,
            sink: Sink::Memory,
            max_batch: None,
            memory_limit: None,
            checkpoint_every: None,
        }
    }

    /// The first step: a resumed run's checkpoint (whether it can continue on the backend asked
    /// for, its scenario, its checkpoint interval), the thread pool and the backend.
    pub fn start(self) -> Result<Started> {
        let Launch {
            source,
            backend,
            threads,
            seeds,
            sink,
            max_batch,
            memory_limit,
            checkpoint_every,
        } = self;
        let opened = open(source, backend, checkpoint_every)?;
        if opened.resume.is_some() && seeds.is_some() {
            return Err(Error::Usage(
                "a resumed run continues under its own seed: give no seeds".into(),
            ));
        }
        let pool = match threads {
            Threads::Process(t) => Pool::process(t)?,
            Threads::Own(t) => Pool::own(t)?,
        };
        let backend = runtime::backend(opened.backend)?;
        Ok(Started {
            execution: Execution {
                threads: pool.threads(),
                max_batch,
            },
            loaded: opened.loaded,
            resume: opened.resume,
            every_s: opened.every_s,
            seeds,
            sink,
            pool,
            backend,
            memory_limit,
        })
    }

    /// The plans alone, one per seed, without a pool, a backend or a sink: every check a run
    /// makes before it starts (`dasim validate`).
    pub fn plans(self) -> Result<Vec<Plan>> {
        let opened = open(self.source, self.backend, None)?;
        plans(&opened.loaded, self.seeds.as_deref(), |_| Ok(()))
    }
}

/// A launch whose pool and backend are started ([`Launch::start`]).
pub struct Started {
    loaded: Loaded,
    resume: Option<Resumed>,
    every_s: Option<f64>,
    seeds: Option<Vec<u64>>,
    sink: Sink,
    pool: Pool,
    backend: Backend,
    execution: Execution,
    memory_limit: Option<u64>,
}

impl Started {
    /// The backend the runs will use.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// The threads of the pool.
    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// The second step: claims the sink (a run directory: refused when it holds an earlier
    /// run's results and `force` is not set, else emptied of them), then prepares one plan per
    /// seed on the pool, each checked against the memory limit, before anything runs.
    pub fn prepare(self) -> Result<Ready> {
        let Started {
            loaded,
            resume,
            every_s,
            seeds,
            sink,
            pool,
            backend,
            execution,
            memory_limit,
        } = self;
        let mut dir = match (&resume, &sink) {
            (Some(r), _) => Some(RunDir::resume(&r.dir, &loaded.path)),
            (None, Sink::Dir { out, force, plots }) => {
                if seeds.as_ref().is_some_and(|s| s.len() > 1) {
                    return Err(Error::Usage(
                        "several seeds need a run directory each (Sink::SeedDirs)".into(),
                    ));
                }
                Some(RunDir::create(out, &loaded.path, *force)?.plots(*plots))
            }
            (None, _) => None,
        };
        let gpu = !dasim_models::backend::is_flex(&backend.device);
        let plans = pool.install(|| {
            plans(&loaded, seeds.as_deref(), |plan| {
                check_memory(&plan.memory_estimate(execution, gpu), memory_limit)
            })
        })?;
        let runs = plans
            .into_iter()
            .map(|plan| {
                let seed = plan.loaded.scenario.seed;
                let target = match (&sink, dir.take()) {
                    (_, Some(d)) => Target::Dir(Box::new(d)),
                    (Sink::SeedDirs { root, plots }, None) => {
                        Target::SeedDir(root.join(format!("seed-{seed}")), *plots)
                    }
                    _ => Target::Memory(Box::default()),
                };
                Run { seed, plan, target }
            })
            .collect();
        Ok(Ready {
            runs,
            resume,
            every_s,
            pool,
            backend,
            execution,
            memory_limit,
        })
    }
}

/// A launch ready to run: its plans, one per seed, and where each run's results go.
pub struct Ready {
    runs: Vec<Run>,
    resume: Option<Resumed>,
    every_s: Option<f64>,
    pool: Pool,
    backend: Backend,
    execution: Execution,
    memory_limit: Option<u64>,
}

impl Ready {
    /// The number of runs (one per seed).
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// Whether there is no run (never: a launch has at least one seed).
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// The seed of the `i`-th run.
    pub fn seed(&self, i: usize) -> u64 {
        self.runs[i].seed
    }

    /// The plan of the `i`-th run.
    pub fn plan(&self, i: usize) -> &Plan {
        &self.runs[i].plan
    }

    /// The scenario's claims (`[[expect]]`), the same under every seed.
    pub fn claims(&self) -> &[Claim] {
        &self.runs[0].plan.claims
    }

    /// The backend.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// The threads of the pool.
    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// The run directory of the `i`-th run; `None` for a run kept in memory.
    pub fn dir(&self, i: usize) -> Option<&Path> {
        match &self.runs[i].target {
            Target::Dir(d) => Some(d.dir()),
            Target::SeedDir(d, _) => Some(d),
            Target::Memory(_) => None,
        }
    }

    /// What the `i`-th run kept in memory (after [`Ready::run`]); `None` for a run directory.
    pub fn memory(&self, i: usize) -> Option<&InMemory> {
        match &self.runs[i].target {
            Target::Memory(m) => Some(m),
            _ => None,
        }
    }

    /// Runs the `i`-th plan on the pool, into its sink (once), reporting to `progress`;
    /// `interrupt`, raised from outside, stops it after the event being handled, with a
    /// checkpoint in a run directory ([`Error::Interrupted`]).
    pub fn run(
        &mut self,
        i: usize,
        progress: &mut (dyn Progress + Send),
        interrupt: Option<&AtomicBool>,
    ) -> Result<Results> {
        let Run { plan, target, .. } = &mut self.runs[i];
        let mut seed_dir = match target {
            Target::SeedDir(dir, plots) => {
                Some(RunDir::create(dir, &plan.loaded.path, true)?.plots(*plots))
            }
            _ => None,
        };
        let sink: &mut (dyn RunSink + Send) = match (target, &mut seed_dir) {
            (_, Some(d)) => d,
            (Target::Dir(d), None) => &mut **d,
            (Target::Memory(m), None) => &mut **m,
            (Target::SeedDir(..), None) => unreachable!("opened above"),
        };
        let checkpoints = Checkpoints {
            every_s: self.every_s,
            interrupt,
            resume: self.resume.as_ref().map(|r| &*r.checkpoint),
        };
        let (plan, backend) = (&*plan, self.backend.clone());
        let (execution, memory_limit) = (self.execution, self.memory_limit);
        self.pool.install(move || {
            Simulation::new(plan, backend)
                .execution(execution)
                .memory_limit(memory_limit)
                .checkpoints(checkpoints)
                .run(sink, progress)
        })
    }
}

/// One seed's plan and where its results go.
struct Run {
    seed: u64,
    plan: Plan,
    target: Target,
}

/// A run's sink.
enum Target {
    /// The run directory, claimed by [`Started::prepare`].
    Dir(Box<RunDir>),
    /// A seed's run directory, claimed when its run starts; with its plots or without.
    SeedDir(PathBuf, bool),
    /// The rows in memory.
    Memory(Box<InMemory>),
}

/// The run directory of a resumed run and its checkpoint.
struct Resumed {
    dir: PathBuf,
    checkpoint: Box<RunCheckpoint>,
}

/// A launch's source, opened: its scenario, the backend to choose, the checkpoint interval,
/// and a resumed run's checkpoint.
struct Opened {
    loaded: Loaded,
    backend: BackendChoice,
    every_s: Option<f64>,
    resume: Option<Resumed>,
}

fn open(source: Source, backend: BackendChoice, every_s: Option<f64>) -> Result<Opened> {
    match source {
        Source::Scenario(loaded) => Ok(Opened {
            loaded,
            backend,
            every_s,
            resume: None,
        }),
        Source::Resume { dir, scenario } => {
            let checkpoint = RunCheckpoint::read(&dir)?;
            // The checkpoint's backend unless one is named (then it must be the same).
            let backend = checkpoint.backend_choice(backend)?;
            let every_s = every_s.or(checkpoint.checkpoint_every_s);
            let loaded = match scenario {
                Some(loaded) => loaded,
                None => Loaded::from_file(checkpoint.scenario_file()?)?,
            };
            Ok(Opened {
                loaded,
                backend,
                every_s,
                resume: Some(Resumed {
                    dir,
                    checkpoint: Box::new(checkpoint),
                }),
            })
        }
    }
}

/// One plan per seed of `seeds` (the scenario's own without them), each passed to `check`.
fn plans(
    loaded: &Loaded,
    seeds: Option<&[u64]>,
    mut check: impl FnMut(&Plan) -> Result<()>,
) -> Result<Vec<Plan>> {
    let Some(seeds) = seeds else {
        let plan = Plan::prepare(loaded)?;
        check(&plan)?;
        return Ok(vec![plan]);
    };
    distinct_seeds(seeds).map_err(|e| Error::Usage(format!("seeds: {e}")))?;
    seeds
        .iter()
        .map(|&seed| {
            let plan = Plan::prepare(&loaded.with_seed(seed)?)?;
            check(&plan)?;
            Ok(plan)
        })
        .collect()
}

/// The seeds of `--seeds`, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeedList(pub Vec<u64>);

/// Parses `--seeds` ([`parse_seeds`]).
pub fn parse_seed_list(s: &str) -> std::result::Result<SeedList, String> {
    parse_seeds(s).map(SeedList)
}

/// Parses `--seeds`: `1..5` (1 to 5, both included), `1..=5` (the same), `1,4,9` or `7`.
pub fn parse_seeds(s: &str) -> std::result::Result<Vec<u64>, String> {
    let num = |t: &str| {
        t.trim()
            .parse::<u64>()
            .map_err(|_| format!("`{t}` is not a seed (a whole number at least 0)"))
    };
    let seeds: Vec<u64> = if let Some((a, b)) = s.split_once("..") {
        let (a, b) = (num(a)?, num(b.strip_prefix('=').unwrap_or(b))?);
        if b < a {
            return Err(format!("the range {s} is empty"));
        }
        if b - a >= 10_000 {
            return Err(format!("the range {s} holds more than 10,000 seeds"));
        }
        (a..=b).collect()
    } else {
        s.split(',')
            .map(num)
            .collect::<std::result::Result<_, _>>()?
    };
    distinct_seeds(&seeds)?;
    Ok(seeds)
}

/// An error unless `seeds` holds at least one seed, none twice.
pub fn distinct_seeds(seeds: &[u64]) -> std::result::Result<(), String> {
    if seeds.is_empty() {
        return Err("no seed is given".into());
    }
    let mut seen = std::collections::BTreeSet::new();
    match seeds.iter().find(|&&x| !seen.insert(x)) {
        Some(x) => Err(format!("seed {x} is listed twice")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_parse() {
        assert_eq!(parse_seeds("1..3"), Ok(vec![1, 2, 3]));
        assert_eq!(parse_seeds("1..=3"), Ok(vec![1, 2, 3]));
        assert_eq!(parse_seeds("4"), Ok(vec![4]));
        assert_eq!(parse_seeds("1, 4,9"), Ok(vec![1, 4, 9]));
        assert!(parse_seeds("3..1").unwrap_err().contains("empty"));
        assert!(parse_seeds("1,1").unwrap_err().contains("twice"));
        assert!(parse_seeds("a").unwrap_err().contains("not a seed"));
        assert!(parse_seeds("-1..2").is_err());
    }

    #[test]
    fn a_backend_choice_is_written_as_it_is_read() {
        for choice in [
            BackendChoice::Auto,
            BackendChoice::Wgpu,
            BackendChoice::Flex,
        ] {
            assert_eq!(choice.to_string().parse(), Ok(choice));
        }
    }
}
