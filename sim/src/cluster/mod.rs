//! Compute: how long each worker's steps take in simulated time.
//!
//! ## Base time
//!
//! Each worker has a base step time, the time of one minibatch step (forward, backward and the
//! local update) when nothing slows it down. It is given directly, or derived from the model's
//! training FLOPs per sample, the batch size and the device's sustained speed:
//!
//! ```text
//! base(i) = round(step_time_ms · 1e6)                                        ns   (given)
//! base(i) = round(flops_per_sample · batch_size / (device_tflops · 1e12) · 1e9)  ns (derived)
//! ```
//!
//! `[cluster]` sets the default for every worker (`step_time_ms`, or `device_tflops`; neither:
//! 10 ms), and `[[cluster.groups]]` entries override it for sets of workers, so heterogeneous
//! hardware can be described; when groups overlap, the last one listed wins. `flops_per_sample`
//! comes from the model ([`BuildEnv::flops_per_sample`](crate::env::BuildEnv::flops_per_sample)) unless `cluster.flops_per_sample` is set
//! (to simulate the timing of a model other than the one trained). `device_tflops` is the speed
//! the device sustains on this model, not its datasheet peak.
//!
//! ```toml
//! [cluster]
//! workers = 16
//! device_tflops = 100.0          # sustained TFLOP/s of the default device
//!
//! [[cluster.groups]]
//! workers = "12..16"             # an older rack
//! device_tflops = 40.0
//! ```
//!
//! ## Stragglers
//!
//! The `k`-th step of worker `i`, started at simulated time `t`, then takes
//! `round(base_k(i) · Π factor) + round(Σ delay)` ns, the factors and delays coming from the
//! [`crate::cluster::stragglers`] models that cover `i`. Each worker draws from its own seeded streams, so
//! the `k`-th step of worker `i` takes the same time whichever algorithm runs (see
//! [`crate::cluster::stragglers`] for the exact guarantee and for the models that depend on `t`).

mod config;
pub mod host;
mod model;
pub mod slowdown;
pub mod stragglers;
pub mod workerset;

pub use config::{ClusterConfig, DEFAULT_STEP_TIME_MS, GroupConfig};
pub use host::{Host, HostWork};
pub use model::Cluster;
pub use stragglers::StragglerConfig;
pub use workerset::WorkerSet;
