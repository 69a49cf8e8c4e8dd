//! Everything that can go wrong in a run: an invalid scenario value ([`ConfigError`]), a
//! deadlock, a failed observer or checkpoint, an interrupt.

use crate::clock::time::SimTime;
use crate::error::ConfigError;

/// Everything that can go wrong in the engine.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A scenario value is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// No event is left but workers still wait: the algorithm (or the scenario) deadlocked.
    #[error("deadlock at simulated time {time}: the event queue is empty but {}", waiting.join("; "))]
    Deadlock {
        /// When the queue ran dry.
        time: SimTime,
        /// Who waits for whom, one line per waiting worker.
        waiting: Vec<String>,
    },
    /// An observer (a writer of results) failed; the run stops.
    #[error("writing results failed: {0}")]
    Observer(String),
    /// A checkpoint could not be written or read ([`crate::engine::checkpoint`]).
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    /// The run was interrupted ([`crate::engine::checkpoint::Checkpointing::interrupt`]); a
    /// checkpoint of the state after the last event handled went to the observer.
    #[error("interrupted at simulated time {time}")]
    Interrupted {
        /// The simulated time of the last event handled.
        time: SimTime,
    },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
