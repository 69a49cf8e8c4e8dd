//! Host work ([`dasim_sim::cluster::host`]): with `[cluster] host_gbps` set, an algorithm's
//! arithmetic outside its gradient steps takes the roofline time, and the node's next step or
//! message waits for it. Each check compares a run against the same run with host work free:
//! the event times move by exactly the charged durations.

use crate::common;

use common::*;
use dasim_sim::engine::{Collect, run_inspect};
use dasim_sim::prelude::*;

const SEED: u64 = 5;

/// The 16-coordinate quadratic's values touched by DiLoCo's outer step (`7d`) in bytes.
const OUTER_BYTES: f64 = 7.0 * 16.0 * 4.0;

/// The host rate, in GB/s, at which `bytes` take one millisecond.
fn gbps_for_1ms(bytes: f64) -> f64 {
    bytes / 1e-3 / 1e9
}

/// Runs `alg` on `n` equal workers over a ring until `seconds`, and returns the times at which
/// `counter` (read after every event) increased.
fn times<A: Algorithm>(
    mut alg: A,
    entry: &AlgorithmConfig,
    cluster_cfg: &ClusterConfig,
    seconds: f64,
    counter: impl Fn(&A) -> u64,
) -> Vec<SimTime> {
    let n = cluster_cfg.workers;
    let mut store = quadratic_store(n, SEED);
    let opt = optimizer(0.05, 0.0);
    let mut world = world(
        entry,
        cluster_cfg,
        &net(1.0, 100.0),
        TopologyConfig::Ring {},
        &mut store,
        &opt,
        SEED,
    );
    let mut seen = 0;
    let mut at = Vec::new();
    run_inspect(
        &mut alg,
        &mut world,
        &stop_at(seconds),
        &mut Collect::default(),
        &mut |a: &A, _, now| {
            let c = counter(a);
            if c > seen {
                seen = c;
                at.push(now);
            }
        },
    )
    .unwrap();
    at
}

fn diloco_outer_steps(host_gbps: Option<f64>) -> Vec<SimTime> {
    let cfg = DilocoConfig {
        inner_steps: 5,
        ..DilocoConfig::default()
    };
    let cluster = ClusterConfig {
        host_gbps,
        ..cluster(3, &[])
    };
    let entry = AlgorithmConfig::from(AlgorithmKind::Diloco(cfg.clone()));
    times(
        Diloco::new(&cfg, 3),
        &entry,
        &cluster,
        0.5,
        Diloco::outer_steps,
    )
}

#[test]
fn diloco_outer_step_delays_every_next_round_by_its_roofline_time() {
    let free = diloco_outer_steps(None);
    let charged = diloco_outer_steps(Some(gbps_for_1ms(OUTER_BYTES)));
    assert!(free.len() >= 5, "{} outer steps", free.len());
    // The k-th outer step (from 0) comes after k outer steps' host work: k ms later.
    for (k, (f, c)) in free.iter().zip(&charged).enumerate() {
        assert_eq!(
            *c,
            *f + SimTime::from_millis_f64(k as f64),
            "outer step {k}: {f} free, {c} charged"
        );
    }
}

fn choco_iterations(host_gbps: Option<f64>) -> Vec<SimTime> {
    let cfg = ChocoConfig {
        consensus_lr: 0.5,
        compression: Compression::TopK { fraction: 0.25 },
        weights: MixingWeights::Metropolis,
        scope: ChocoScope::Tensor,
        overlap: false,
    };
    let cluster = ClusterConfig {
        host_gbps,
        ..cluster(4, &[])
    };
    let entry = AlgorithmConfig::from(cfg.clone());
    let topology = Topology::build(&TopologyConfig::Ring {}, 4, &BuildEnv::new(SEED)).unwrap();
    times(
        Choco::new(&cfg, &topology, SEED),
        &entry,
        &cluster,
        0.3,
        |a: &Choco| a.iteration(0),
    )
}

#[test]
fn choco_compression_delays_the_sends_and_the_consensus_delays_the_next_step() {
    // Per iteration: 11d before the sends, (k + 6)d = 8d after the exchange (k = 2 on a ring):
    // 19 · 16 · 4 bytes, at a rate where 19 · 16 · 4 bytes take 1.9 ms.
    let bytes = 19.0 * 16.0 * 4.0;
    let free = choco_iterations(None);
    let charged = choco_iterations(Some(gbps_for_1ms(bytes / 1.9)));
    assert!(free.len() >= 5, "{} iterations", free.len());
    // Every worker is alike: its k-th iteration ends (the consensus step taken, whose host work
    // follows) after k whole iterations' host work and the compression of its own, 1.1 ms: the
    // exchange itself unchanged.
    for (k, (f, c)) in free.iter().zip(&charged).enumerate() {
        let shift = SimTime::from_millis_f64(1.1 + 1.9 * k as f64);
        assert_eq!(*c, *f + shift, "iteration {k}: {f} free, {c} charged");
    }
}

#[test]
fn a_rate_that_is_not_positive_is_refused_naming_the_field() {
    for (gbps, tflops, field) in [
        (Some(0.0), None, "cluster.host_gbps"),
        (None, Some(-1.0), "cluster.host_tflops"),
        (Some(f64::NAN), None, "cluster.host_gbps"),
    ] {
        let cfg = ClusterConfig {
            host_gbps: gbps,
            host_tflops: tflops,
            ..ClusterConfig::new(4)
        };
        let err = cfg.validate().unwrap_err();
        assert_eq!(err.path.to_string(), field, "{err}");
    }
}
