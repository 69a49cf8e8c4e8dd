//! What the unit tests of the shared shapes build their small runs from: an exact store, a world
//! of two to a few workers, faults from TOML and a stop time.

use serde::Deserialize;

use crate::algorithm::World;
use crate::cluster::{Cluster, ClusterConfig};
use crate::engine::RunConfig;
use crate::env::BuildEnv;
use crate::fault::{FaultConfig, Faults};
use crate::net::topology::{Topology, TopologyConfig};
use crate::net::{Network, NetworkConfig};
use crate::store::reference::{Quadratic, ReferenceStore};

/// The exact store of `n` replicas of a 4-parameter quadratic.
pub fn store(n: usize, seed: u64) -> ReferenceStore {
    ReferenceStore::new(Quadratic::new(4, 10.0, 0.0), n, Default::default(), seed)
}

/// 1 byte per ns, no latency, no header: a 1,000-byte message posted at `t` lands at `t + 1 µs`.
pub fn plain_net() -> NetworkConfig {
    let mut net = NetworkConfig::uniform(8.0, 0.0);
    net.header_bytes = 0;
    net
}

/// The ring of `cluster`'s workers on `net` with `nodes` network nodes, and the faults of
/// `faults` (TOML `[[faults]]` entries; none when empty).
pub fn world<'s>(
    cluster: &ClusterConfig,
    net: &NetworkConfig,
    nodes: usize,
    store: &'s mut ReferenceStore,
    faults: &str,
) -> World<'s> {
    let n = cluster.workers;
    let env = BuildEnv::new(11);
    let mut world = World::new(
        Cluster::new(cluster, &env).unwrap(),
        Network::new(net, nodes, &env).unwrap(),
        Topology::build(&TopologyConfig::Ring {}, n, &env).unwrap(),
        store,
        &Default::default(),
        11,
    );
    #[derive(Deserialize)]
    struct Doc {
        #[serde(default)]
        faults: Vec<FaultConfig>,
    }
    let doc: Doc = toml::from_str(faults).unwrap();
    if !doc.faults.is_empty() {
        world.set_faults(Faults::new(&doc.faults, n, &env).unwrap());
    }
    world
}

/// Stops at `seconds` of simulated time, whatever the loss does.
pub fn stop_at(seconds: f64) -> RunConfig {
    RunConfig {
        sim_time_s: Some(seconds),
        epochs: None,
        worker_steps: None,
        eval_every_s: 100.0,
        eval_every_steps: None,
        divergence_loss: Some(f64::MAX),
    }
}
