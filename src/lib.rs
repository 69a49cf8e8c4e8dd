//! # dasim
//!
//! The command-line simulator: scenario files in, metrics, summaries and plots out. The engine
//! lives in `dasim-sim`, real gradients in `dasim-models`, writers in `dasim-reports`; this crate
//! composes their scenario sections into one file format ([`scenario`]), wires a run
//! together ([`runner`]), checks a scenario's claims over seeds ([`check`]) and runs parameter
//! sweeps, locally or as Slurm and Kubernetes jobs ([`sweep`]).

pub mod check;
pub mod checkpoint;
pub mod inspect;
pub mod outputs;
pub mod runner;
pub mod scenario;
pub mod sweep;

pub use dasim_reports::rundir::Summary;
pub use runner::{Results, RunOptions, run_scenario};
pub use scenario::{Loaded, Scenario, ScenarioError};

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
