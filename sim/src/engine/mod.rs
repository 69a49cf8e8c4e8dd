//! The driver: the loop that runs an algorithm to its stop ([`driver`]), its checkpoints
//! ([`checkpoint`]) and its errors ([`error`]).
//!
//! It sits above the algorithm API ([`crate::algorithm`]), which it drives, and below the
//! algorithms ([`crate::algorithms`]), which call it; the clock it runs on is
//! [`crate::clock`], one layer below everything.

pub mod checkpoint;
pub mod driver;
pub mod error;

pub use crate::clock::{EventQueue, SimTime};
pub use checkpoint::Checkpointing;
pub use driver::{
    Collect, DIVERGENCE_FACTOR, Divergence, EvalPoint, FaultReport, Observer, Outcome,
    ReplicaEvals, RunConfig, RunProgress, Spread, run, run_checkpointed, run_inspect,
};
pub use error::{Error, Result};
