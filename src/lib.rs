//! # dasim
//!
//! A deterministic discrete-event simulator of a training cluster whose workers compute real
//! gradients: scenario files in, metrics, summaries and plots out.
//!
//! ## Running a scenario from Rust
//!
//! Load a scenario, prepare it ([`Plan::prepare`] makes every check a run needs and builds
//! everything once), and run it ([`Simulation::run`]) into a sink: [`InMemory`] keeps every
//! row, [`RunDir`] writes the run directory `dasim run` writes.
//!
//! ```no_run
//! use dasim::simulation::Silent;
//! use dasim::{InMemory, Loaded, Plan, Simulation, runtime};
//! use dasim_models::BackendChoice;
//!
//! let loaded = Loaded::from_file("scenarios/quickstart.toml".as_ref())?;
//! let plan = Plan::prepare(&loaded)?;
//! let backend = runtime::backend(BackendChoice::Auto)?; // a GPU if present, else flex
//! let mut sink = InMemory::default();
//! let results = Simulation::new(&plan, backend).run(&mut sink, &mut Silent)?;
//! for run in &results.runs {
//!     println!("{}: {} steps, test loss {}", run.algorithm, run.worker_steps, run.final_loss);
//! }
//! // The curves, as `metrics.csv` has them.
//! for point in sink.metrics.iter().filter(|p| p.algorithm == "allreduce") {
//!     println!("{} s: test loss {:?}", point.time_s, point.loss);
//! }
//! # Ok::<(), dasim::Error>(())
//! ```
//!
//! A scenario can come from text as well ([`Loaded::from_str`]); errors name the file, line,
//! column and field ([`ScenarioError`]). [`simulation::Progress`] receives progress, notes and
//! warnings; [`simulation::Checkpoints`] asks for checkpoints, an interrupt flag and resumption;
//! [`runtime`] holds the process setup a program shares with the command line (thread pools,
//! backends, allocator, Ctrl-C).
//!
//! ## The launch: the door above the plan
//!
//! What the commands and the Python package run goes through one [`Launch`]: a scenario or a
//! run directory to resume, the backend, the threads, the seeds and the sink, resolved once
//! (resume compatibility, the pool, the backend, one plan per seed) before anything runs.
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
//!     threads: Threads::Own(Some(4)),
//!     sink: Sink::Dir { out: "runs/quickstart".into(), force: true, plots: true },
//!     ..Launch::new(Source::Scenario(loaded))
//! };
//! let results = launch.start()?.prepare()?.run(0, &mut Silent, None)?;
//! println!("{} algorithms", results.runs.len());
//! # Ok::<(), dasim::Error>(())
//! ```
//!
//! ## The crates
//!
//! The engine lives in `dasim-sim`, real gradients in `dasim-models`, writers and readers of the
//! run directory in `dasim-reports`. This crate composes their scenario sections into one file
//! format ([`scenario`]), prepares and runs a scenario ([`plan`], [`simulation`], [`sink`]),
//! launches runs ([`launch`]) with a progress bar on the terminal ([`bar`]), checks a scenario's
//! claims over seeds ([`check`]) and runs parameter sweeps, locally or as Slurm and Kubernetes
//! jobs ([`sweep`]).

pub mod bar;
pub mod check;
pub mod checkpoint;
pub mod import;
pub mod inspect;
pub mod launch;
pub mod outputs;
pub mod plan;
#[cfg(feature = "python")]
mod python;
pub mod runtime;
pub mod scenario;
pub mod simulation;
pub mod sink;
pub mod sweep;

pub use dasim_reports::rundir::Summary;
pub use launch::Launch;
pub use plan::Plan;
pub use scenario::{Loaded, Scenario, ScenarioError};
pub use simulation::{Results, RunSink, Simulation};
pub use sink::{InMemory, RunDir};

/// Everything that can stop the command line.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The scenario is malformed or invalid (located in its file).
    #[error("{0}")]
    Scenario(Box<ScenarioError>),
    /// The engine failed (e.g. a deadlock).
    #[error(transparent)]
    Sim(#[from] dasim_sim::Error),
    /// Setting up models, data or the backend failed.
    #[error(transparent)]
    Models(#[from] dasim_models::Error),
    /// Writing results failed.
    #[error(transparent)]
    Reports(#[from] dasim_reports::Error),
    /// Bad command-line flags.
    #[error("{0}")]
    Usage(String),
    /// The run would not fit in memory (refused before it starts).
    #[error("{0}")]
    Memory(String),
    /// Claims (`[[expect]]`) failed: `dasim check`, or `dasim run --strict`.
    #[error("{0}")]
    Claims(String),
    /// Points of a sweep failed, or a merged sweep has points without results (exit code 1).
    #[error("{0}")]
    Sweep(String),
    /// A run diverged (`dasim run` without `--keep-going`; exit code 3).
    #[error("{0}")]
    Diverged(String),
    /// The run was interrupted (Ctrl-C) and left a checkpoint (exit code 130).
    #[error("{0}")]
    Interrupted(String),
    /// Another I/O failure.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        source: std::io::Error,
    },
}

impl From<Box<ScenarioError>> for Error {
    fn from(e: Box<ScenarioError>) -> Self {
        Error::Scenario(e)
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
