//! The simulation driver: integer simulated time ([`time`]), the event queue ([`queue`]), the
//! random streams ([`rng`]) and the loop that runs an algorithm to its stop ([`driver`]).

pub mod checkpoint;
pub mod driver;
pub mod queue;
pub mod rng;
pub mod time;

pub use checkpoint::Checkpointing;
pub use driver::{
    Collect, DIVERGENCE_FACTOR, Divergence, EvalPoint, FaultReport, Observer, Outcome,
    ReplicaEvals, RunConfig, RunProgress, Spread, run, run_checkpointed, run_inspect,
};
pub use queue::EventQueue;
pub use time::SimTime;
