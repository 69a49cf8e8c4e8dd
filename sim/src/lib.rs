//! # dasim-sim: the engine of dasim
//!
//! A deterministic discrete-event simulator of a training cluster. Time is modeled; numbers are
//! real: a worker's step takes the simulated time the [`cluster`] model says, messages take the
//! time the [`network`] model says, and the gradients and averages an [`algorithms`] module asks
//! for are computed for real by a [`store::ReplicaStore`] (burn tensors in `dasim-models`, or the
//! exact [`reference`](mod@reference) store here).
//!
//! ## Ordering guarantees
//!
//! - Simulated time is an integer count of nanoseconds ([`time::SimTime`]).
//! - Events are delivered in `(time, sequence)` order, the sequence being assigned when the event
//!   is scheduled ([`engine::EventQueue`]). Nothing else breaks ties.
//! - Every random draw comes from a stream seeded by (scenario seed, [`rng::StreamKind`], entity
//!   id), so worker `i`'s `k`-th step takes the same time under every algorithm.
//! - Control flow never depends on floating-point values computed from parameters, so the event
//!   timeline is the same on every backend.
//!
//! ## What a run records
//!
//! Besides evaluation points ([`run::EvalPoint`]: loss and accuracy, training loss, consensus
//! distance, replica spread, suboptimality, algorithm series), every run records what happened,
//! as a function of simulated events only ([`record`]): each worker's time computing,
//! communicating, blocked (and on whom) or idle, in integer nanoseconds that add up to the
//! simulated time; the activity timeline inside a window; per-link messages, bytes and busy time
//! ([`network::Network::link_stats`]); message ages; and, measured in the store layer for every
//! algorithm alike ([`tracked`]), the staleness of every applied gradient. The
//! [`run::Outcome`] carries it as a [`record::RunRecord`]; per-event logs go to the
//! [`run::Observer`].
//!
//! ## Example
//!
//! Run AD-PSGD on 4 workers of an exact quadratic problem, one worker 4× slower:
//!
//! ```
//! use dasim_sim::prelude::*;
//!
//! let env = BuildEnv::new(7);
//! let cluster = ClusterConfig::new(4)
//!     .with_step_time_ms(10.0)
//!     .with_straggler(StragglerConfig::fixed([3], 4.0));
//! let topology = Topology::build(&TopologyConfig::Ring {}, 4, &env).unwrap();
//! let optimizer = OptimizerConfig { lr: 0.1, ..Default::default() };
//! let mut store = ReferenceStore::new(Quadratic::new(8, 10.0, 0.0), 4, optimizer.clone(), 7);
//! let sides = topology.bipartition().unwrap();
//! let mut world = World::new(
//!     Cluster::new(&cluster, &env).unwrap(),
//!     Network::new(&NetworkConfig::default(), 4, &env).unwrap(),
//!     topology,
//!     &mut store,
//!     &optimizer,
//!     7,
//! );
//! let stop = RunConfig {
//!     sim_time_s: Some(1.0), epochs: None, worker_steps: None,
//!     eval_every_s: 0.1, eval_every_steps: None,
//! };
//! let mut alg = AdPsgd::new(&AdPsgdConfig::default(), &sides, 7);
//! let mut points = Collect::default();
//! let outcome = run(&mut alg, &mut world, &stop, &mut points).unwrap();
//! assert_eq!(outcome.sim_time, SimTime::from_secs_f64(1.0));
//! assert!(points.0.last().unwrap().eval.loss < points.0[0].eval.loss);
//! // What happened, recorded: every worker's time adds up to the run's simulated time, and the
//! // healthy workers spent most of it computing.
//! let usage = &outcome.record.usage;
//! assert!(usage.iter().all(|u| u.total() == outcome.sim_time));
//! assert!(usage[0].get(Activity::Compute) > outcome.sim_time.scale(0.9));
//! ```

pub mod algorithm;
pub mod algorithms;
pub mod cluster;
pub mod engine;
pub mod env;
pub mod error;
pub mod net;
pub mod params;
mod raw;
pub mod record;

pub use error::{ConfigError, Error, Result};

/// The names most programs need.
pub mod prelude {
    pub use crate::algorithm::{Algorithm, Ctx, StalenessStats, World};
    pub use crate::algorithms::{
        AdPsgd, AdPsgdConfig, AlgorithmConfig, AlgorithmKind, AlgorithmSpec, AllReduceConfig,
        AllReduceSgd, Averaging, Broadcast, Dasgd, DasgdConfig, Dpsgd, DpsgdConfig, LapSgd,
        LapSgdConfig, LocalSgd, LocalSgdConfig, MixingWeights, OverlapSgpConfig, ParameterServer,
        Partner, PsConfig, Sgp, SgpConfig, UpdateOrder,
    };
    pub use crate::cluster::stragglers::{Distribution, StragglerModel};
    pub use crate::cluster::{Cluster, ClusterConfig, GroupConfig, StragglerConfig, WorkerSet};
    pub use crate::engine::{
        Collect, EvalPoint, Observer, Outcome, RunConfig, SimTime, run, run_inspect,
    };
    pub use crate::env::BuildEnv;
    pub use crate::net::{
        Dtype, Fabric, LinkSpec, Network, NetworkConfig, PeerSchedule, Topology, TopologyConfig,
    };
    pub use crate::params::lr::{LrScaling, LrSchedule, ScheduleKind, ScheduleUnit};
    pub use crate::params::{
        Evaluation, GradId, MsgId, OptimizerConfig, Quadratic, ReferenceStore, ReplicaStore, Slot,
    };
    pub use crate::record::{Activity, Histogram, MetricsConfig, RunRecord};
}
