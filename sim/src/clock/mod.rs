//! The bottom layer of the simulator: integer simulated time ([`time`]), one seeded random
//! stream per entity ([`rng`]) and the event queue ordered by `(time, sequence)` ([`queue`]).
//!
//! Everything else builds on it (the cluster, network, parameter, record and fault models, the
//! algorithm API, the driver of [`crate::engine`] and the algorithms), and it imports nothing of
//! the simulator but the configuration errors of [`crate::error`].

pub mod queue;
pub mod rng;
pub mod time;

pub use queue::EventQueue;
pub use time::SimTime;
