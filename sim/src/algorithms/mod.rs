//! The algorithms, one module each.
//!
//! Each is a state machine over its own events ([`crate::algorithm::Algorithm`]), touches parameters
//! only through the [`crate::params::ReplicaStore`], cites its paper, states the per-worker
//! procedure and its invariant.
//!
//! | `kind` | module | synchrony |
//! |--------|--------|-----------|
//! | `allreduce` | [`allreduce`] | synchronous: gradient ring all-reduce every step (optional buckets) |
//! | `local-sgd`, `post-local-sgd` | [`local_sgd`] | synchronous every `H` steps (post-local: every step during a warm-up) |
//! | `ps` | [`ps`] | asynchronous parameter server, sharded, optionally stale-synchronous |
//! | `dpsgd` | [`dpsgd`] | neighbour-synchronous averaging every step |
//! | `adpsgd` | [`adpsgd`] | asynchronous pairwise averaging |
//! | `sgp`, `overlap-sgp` | [`sgp`] | push-sum, synchronous or with delay bound τ |
//! | `dasgd` | [`dasgd`] | asynchronous, no averaging: every gradient applied everywhere |
//! | `lap-sgd`, `lpp-sgd` | [`lap`] | `P` lock-free processes per node, non-blocking in-place averaging |
//!
//! Learning-rate schedules, momentum, Nesterov and weight decay are the shared `[optimizer]`
//! section ([`crate::params::OptimizerConfig`], [`crate::params::lr`]), not options of an algorithm.

pub mod adpsgd;
pub mod allreduce;
pub mod dasgd;
pub mod dpsgd;
pub mod lap;
pub mod local_sgd;
pub mod ps;
pub mod ring;
pub mod sgp;

use serde::{Deserialize, Serialize};

use crate::algorithm::World;
use crate::engine::{Observer, Outcome, RunConfig, run};
use crate::error::ConfigError;
use crate::net::topology::Topology;
use crate::params::ReplicaStore;

pub use adpsgd::{AdPsgd, AdPsgdConfig, Averaging, Partner};
pub use allreduce::{AllReduceConfig, AllReduceSgd};
pub use dasgd::{Broadcast, Dasgd, DasgdConfig};
pub use dpsgd::{Dpsgd, DpsgdConfig, MixingWeights, UpdateOrder};
pub use lap::{LapSgd, LapSgdConfig};
pub use local_sgd::{LocalSgd, LocalSgdConfig};
pub use ps::{ParameterServer, PsConfig};
pub use sgp::{OverlapSgpConfig, Sgp, SgpConfig};

/// One entry of a scenario's `[[algorithms]]` list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum AlgorithmConfig {
    /// Synchronous data-parallel SGD with a ring all-reduce of gradients.
    #[serde(rename = "allreduce")]
    AllReduce(AllReduceConfig),
    /// Local SGD: `H` local steps, then a model all-reduce (Stich, 2019).
    #[serde(rename = "local-sgd")]
    LocalSgd(LocalSgdConfig),
    /// Post-local SGD: mini-batch SGD for a warm-up, then local SGD (Lin et al., 2020).
    #[serde(rename = "post-local-sgd")]
    PostLocalSgd(LocalSgdConfig),
    /// Asynchronous SGD with a sharded parameter server (A-PSGD; Lian et al., 2015).
    #[serde(rename = "ps")]
    Ps(PsConfig),
    /// Decentralized parallel SGD (Lian et al., 2017).
    #[serde(rename = "dpsgd")]
    Dpsgd(DpsgdConfig),
    /// Asynchronous decentralized parallel SGD (Lian et al., 2018).
    #[serde(rename = "adpsgd")]
    AdPsgd(AdPsgdConfig),
    /// Stochastic gradient push, synchronous (Assran et al., 2019).
    #[serde(rename = "sgp")]
    Sgp(SgpConfig),
    /// Overlap-SGP with delay bound τ (Assran et al., 2019).
    #[serde(rename = "overlap-sgp")]
    OverlapSgp(OverlapSgpConfig),
    /// Decentralized asynchronous SGD (Tosi & Theobald, 2023).
    #[serde(rename = "dasgd")]
    Dasgd(DasgdConfig),
    /// Local SGD meets asynchrony: LAP-SGD (Chatterjee et al.).
    #[serde(rename = "lap-sgd")]
    LapSgd(LapSgdConfig),
    /// Local SGD meets asynchrony: LPP-SGD, with partitioned updates (Chatterjee et al.).
    #[serde(rename = "lpp-sgd")]
    LppSgd(LapSgdConfig),
}

fn connected(topology: &Topology, what: &str, path: &str) -> Result<(), ConfigError> {
    if topology.is_connected() {
        return Ok(());
    }
    Err(ConfigError::new(
        "topology.kind",
        format!(
            "{what} ({path}) needs a connected topology; this one has components {}",
            topology.describe_components()
        ),
    ))
}

impl AlgorithmConfig {
    /// The short name used in outputs.
    pub fn kind(&self) -> &'static str {
        match self {
            AlgorithmConfig::AllReduce(_) => "allreduce",
            AlgorithmConfig::LocalSgd(_) => "local-sgd",
            AlgorithmConfig::PostLocalSgd(_) => "post-local-sgd",
            AlgorithmConfig::Ps(_) => "ps",
            AlgorithmConfig::Dpsgd(_) => "dpsgd",
            AlgorithmConfig::AdPsgd(_) => "adpsgd",
            AlgorithmConfig::Sgp(_) => "sgp",
            AlgorithmConfig::OverlapSgp(_) => "overlap-sgp",
            AlgorithmConfig::Dasgd(_) => "dasgd",
            AlgorithmConfig::LapSgd(_) => "lap-sgd",
            AlgorithmConfig::LppSgd(_) => "lpp-sgd",
        }
    }

    /// The label used in outputs: the `label` field if set, else the kind.
    pub fn label(&self) -> String {
        let label = match self {
            AlgorithmConfig::AllReduce(c) => &c.label,
            AlgorithmConfig::LocalSgd(c) | AlgorithmConfig::PostLocalSgd(c) => &c.label,
            AlgorithmConfig::Ps(c) => &c.label,
            AlgorithmConfig::Dpsgd(c) => &c.label,
            AlgorithmConfig::AdPsgd(c) => &c.label,
            AlgorithmConfig::Sgp(c) => &c.label,
            AlgorithmConfig::OverlapSgp(c) => &c.label,
            AlgorithmConfig::Dasgd(c) => &c.label,
            AlgorithmConfig::LapSgd(c) | AlgorithmConfig::LppSgd(c) => &c.label,
        };
        label.clone().unwrap_or_else(|| self.kind().to_string())
    }

    /// Network nodes the algorithm needs besides the workers: a parameter server's shards
    /// (numbered `workers..workers + extra_nodes()`); 0 for every other algorithm. The network
    /// of a run of this algorithm must have `workers + extra_nodes()` nodes.
    pub fn extra_nodes(&self) -> usize {
        match self {
            AlgorithmConfig::Ps(c) => c.servers,
            _ => 0,
        }
    }

    /// Checks the algorithm's options and its needs against the topology; `path` is where it
    /// sits, e.g. `algorithms[1]`.
    pub fn validate(&self, topology: &Topology, path: &str) -> Result<(), ConfigError> {
        match self {
            AlgorithmConfig::AllReduce(c) => c.validate(path),
            AlgorithmConfig::LocalSgd(c) => c.validate(path, false),
            AlgorithmConfig::PostLocalSgd(c) => c.validate(path, true),
            AlgorithmConfig::Ps(c) => c.validate(path),
            AlgorithmConfig::Dpsgd(c) => c.validate(topology, path),
            AlgorithmConfig::AdPsgd(_) => {
                connected(topology, "AD-PSGD", path)?;
                if topology.bipartition().is_none() {
                    return Err(ConfigError::new(
                        "topology.kind",
                        format!("AD-PSGD ({path}) needs a bipartite topology (active/passive split), but this graph has an odd cycle"),
                    )
                    .hint("a ring with an even number of workers, a hypercube or an even torus is bipartite"));
                }
                Ok(())
            }
            AlgorithmConfig::Sgp(_) => Ok(()),
            AlgorithmConfig::OverlapSgp(_) => Ok(()),
            AlgorithmConfig::Dasgd(c) => c.validate(topology, path),
            AlgorithmConfig::LapSgd(c) | AlgorithmConfig::LppSgd(c) => c.validate(path),
        }
    }
}

/// Runs the algorithm `cfg` describes on `world` (whose topology the config was validated
/// against, and whose network has `workers + cfg.extra_nodes()` nodes) until a stop rule of
/// `run_cfg` fires.
pub fn run_algorithm(
    cfg: &AlgorithmConfig,
    world: &mut World<'_>,
    run_cfg: &RunConfig,
    observer: &mut dyn Observer,
) -> crate::Result<Outcome> {
    let n = world.workers();
    match cfg {
        AlgorithmConfig::AllReduce(c) => {
            run(&mut AllReduceSgd::new(c, n), world, run_cfg, observer)
        }
        AlgorithmConfig::LocalSgd(c) | AlgorithmConfig::PostLocalSgd(c) => {
            run(&mut LocalSgd::new(c, n), world, run_cfg, observer)
        }
        AlgorithmConfig::Ps(c) => {
            let need = n + c.servers;
            if world.net.nodes() < need {
                return Err(ConfigError::new(
                    "algorithms.servers",
                    format!(
                        "the parameter server needs {need} network nodes ({n} workers and {} shards), but the network has {}",
                        c.servers,
                        world.net.nodes()
                    ),
                )
                .hint("build the network with workers + AlgorithmConfig::extra_nodes() nodes")
                .into());
            }
            if c.servers > world.store.num_params() {
                return Err(ConfigError::new(
                    "algorithms.servers",
                    format!(
                        "{} server shards cannot split a model of {} parameters",
                        c.servers,
                        world.store.num_params()
                    ),
                )
                .into());
            }
            run(&mut ParameterServer::new(c, n), world, run_cfg, observer)
        }
        AlgorithmConfig::Dpsgd(c) => {
            let mut alg = Dpsgd::new(c, &world.topology);
            run(&mut alg, world, run_cfg, observer)
        }
        AlgorithmConfig::AdPsgd(c) => {
            let sides = world.topology.bipartition().ok_or_else(|| {
                ConfigError::new("topology.kind", "AD-PSGD needs a bipartite topology")
            })?;
            let mut alg = AdPsgd::new(c, &sides, world.seed);
            run(&mut alg, world, run_cfg, observer)
        }
        AlgorithmConfig::Sgp(c) => {
            let mut alg = Sgp::synchronous(c, world.topology.schedule());
            run(&mut alg, world, run_cfg, observer)
        }
        AlgorithmConfig::OverlapSgp(c) => {
            let mut alg = Sgp::overlap(c, world.topology.schedule());
            run(&mut alg, world, run_cfg, observer)
        }
        AlgorithmConfig::Dasgd(c) => {
            let mut alg = Dasgd::new(c, &world.topology);
            run(&mut alg, world, run_cfg, observer)
        }
        AlgorithmConfig::LapSgd(c) => run(&mut LapSgd::new(c, n, false), world, run_cfg, observer),
        AlgorithmConfig::LppSgd(c) => {
            if c.processes > world.store.num_params() {
                return Err(ConfigError::new(
                    "algorithms.processes",
                    format!(
                        "LPP-SGD splits the model into one block per process: {} processes cannot split {} parameters",
                        c.processes,
                        world.store.num_params()
                    ),
                )
                .into());
            }
            run(&mut LapSgd::new(c, n, true), world, run_cfg, observer)
        }
    }
}
