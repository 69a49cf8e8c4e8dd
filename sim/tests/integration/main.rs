//! The engine's integration tests (`dasim-sim`), as one test binary: one link of the crate and its
//! dependencies instead of one per file, and the generic code they share compiled once. Each file
//! of this folder is a module, `common` their shared helpers; a file's tests are those under its
//! module: `cargo test --release -p dasim-sim --test integration -- faults::`.

mod common;

mod adpsgd_schedule;
mod algorithms;
mod async_local_sgd;
mod bias_corrected;
mod checkpoint;
mod cluster;
mod compression;
mod config_errors;
mod conformance;
mod contributing;
mod dasgd_staleness;
mod demo;
mod diloco;
mod faults;
mod fed;
mod global_staleness;
mod host_work;
mod lap;
mod library;
mod lr_progress;
mod metrics;
mod muloco;
mod network;
mod peers_schedule;
mod ps_aggregate;
mod scenarios;
mod sgp;
mod slowmo;
mod sparseloco;
mod sparta;
mod streaming_diloco;
mod time_optimal;
mod topology;
