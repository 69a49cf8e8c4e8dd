//! AD-PSGD's reference pairing (`partner = "schedule"`: the rotation of `BilatPushPull` over
//! `DynamicBipartiteExponentialGraph`, facebookresearch/stochastic_gradient_push) and the host
//! time of an averaging (`averaging_overhead_us`), on the exact reference store.

use crate::common;

use common::*;
use dasim_sim::algorithms::adpsgd::phone_book;
use dasim_sim::engine::{Collect, run_inspect};
use dasim_sim::net::NicConfig;
use dasim_sim::prelude::*;

const SEED: u64 = 11;

fn cfg(partner: Partner, overhead_us: Option<f64>) -> AdPsgdConfig {
    AdPsgdConfig {
        partner,
        averaging_overhead_us: overhead_us,
        ..Default::default()
    }
}

/// Runs AD-PSGD (thread mode) on the bipartite exponential graph of `n` workers for
/// `seconds`, with `lr`, on `net_cfg`; returns the algorithm and the store.
fn run(
    c: &AdPsgdConfig,
    n: usize,
    net_cfg: &NetworkConfig,
    seconds: f64,
    lr: f64,
    init: impl Fn(usize) -> Vec<f64>,
) -> (AdPsgd, ReferenceStore) {
    let mut store = quadratic_store(n, SEED);
    for w in 0..n {
        store.set_params(w, init(w));
    }
    let alg_cfg = AlgorithmConfig::from(AlgorithmKind::AdPsgd(c.clone()));
    let opt = optimizer(lr, 0.0);
    let mut alg = {
        let topology = Topology::build(
            &TopologyConfig::BipartiteExponential {},
            n,
            &BuildEnv::new(SEED),
        )
        .unwrap();
        AdPsgd::new(c, &topology.bipartition().unwrap(), SEED)
    };
    {
        let mut world = world(
            &alg_cfg,
            &cluster(n, &[]),
            net_cfg,
            TopologyConfig::BipartiteExponential {},
            &mut store,
            &opt,
            SEED,
        );
        run_inspect(
            &mut alg,
            &mut world,
            &stop_at(seconds),
            &mut Collect::default(),
            &mut |_, _, _| {},
        )
        .unwrap();
    }
    (alg, store)
}

/// The one-way time of a model message of the quadratic store on `net_cfg`.
fn one_way(n: usize, net_cfg: &NetworkConfig) -> SimTime {
    let mut store = quadratic_store(n, SEED);
    let alg = AlgorithmConfig::from(AlgorithmKind::AdPsgd(AdPsgdConfig::default()));
    let w = world(
        &alg,
        &cluster(n, &[]),
        net_cfg,
        TopologyConfig::BipartiteExponential {},
        &mut store,
        &optimizer(0.05, 0.0),
        SEED,
    );
    w.net
        .serialization_time(w.model_bytes + w.net.header_bytes())
        + w.net.latency()
}

#[test]
fn the_phone_book_is_the_references() {
    // `DynamicBipartiteExponentialGraph._make_graph`: 1 and 1 + 2^i hops ahead, then behind,
    // for i up to floor(log2(n - 1)), a peer already listed skipped.
    assert_eq!(phone_book(2), [1]);
    assert_eq!(phone_book(4), [1, 3]);
    assert_eq!(phone_book(8), [1, 7, 3, 5]);
    assert_eq!(phone_book(16), [1, 15, 3, 13, 5, 11, 9, 7]);
    assert_eq!(phone_book(32), [1, 31, 3, 29, 5, 27, 9, 23, 17, 15]);
}

#[test]
fn a_round_takes_two_transfers_and_two_host_overheads() {
    // Every active worker sends to w + o_k while the passive w − o_k, which took the request
    // of w − 2·o_k at the same instant, sends to w: rounds in lockstep, each one request and
    // one reply long, plus the host time of each side.
    let n = 8;
    let net_cfg = net(10.0, 100.0);
    let tau = one_way(n, &net_cfg).as_secs_f64();
    for overhead_us in [0.0, 150.0] {
        let c = cfg(Partner::Schedule, Some(overhead_us));
        let (alg, _) = run(&c, n, &net_cfg, 0.2, 0.05, |_| vec![0.0; 16]);
        let round = 2.0 * (tau + overhead_us * 1e-6);
        let expected = (0.2 / round).floor() as u64;
        for w in (1..n).step_by(2) {
            let rounds = alg.rounds_of(w).unwrap();
            assert!(
                rounds.abs_diff(expected) <= 1,
                "worker {w}: {rounds} rounds, expected {expected} of {round} s"
            );
            // The exchanges follow the phone book: each offset equally often.
            let pairs = alg.pair_counts();
            for off in phone_book(n) {
                let c = pairs[&(w, (w + off) % n)];
                assert!(c.abs_diff(expected / 4) <= 1, "{w} -> +{off}: {c}");
            }
        }
        // A passive worker takes one request per round.
        for p in (0..n).step_by(2) {
            assert!(alg.rounds_of(p).unwrap().abs_diff(expected) <= 1);
        }
    }
}

#[test]
fn the_overhead_bounds_how_often_uniform_pairs_average() {
    // Two workers, one pair: a round trip is two transfers and two host overheads.
    let net_cfg = net(10.0, 100.0);
    let tau = one_way(2, &net_cfg).as_secs_f64();
    for overhead_us in [0.0, 400.0] {
        let c = cfg(Partner::Uniform, Some(overhead_us));
        let (alg, _) = run(&c, 2, &net_cfg, 0.2, 0.05, |_| vec![0.0; 16]);
        let expected = (0.2 / (2.0 * (tau + overhead_us * 1e-6))).floor() as u64;
        let (started, _) = alg.averagings_of(1);
        assert!(
            started.abs_diff(expected) <= 1,
            "{started} averagings, expected {expected}"
        );
    }
}

#[test]
fn the_schedule_mixes_to_the_mean() {
    // Without gradient steps the rounds are the reference's doubly stochastic mixing
    // `x_i ← (x_i + x_{i−o_k})/2`: every replica reaches the initial mean.
    let n = 16;
    let c = cfg(Partner::Schedule, None);
    let (_, store) = run(&c, n, &net(10.0, 100.0), 0.5, 0.0, |w| {
        (0..16).map(|k| (w * 16 + k) as f64).collect()
    });
    for k in 0..16 {
        let mean = (0..n).map(|w| (w * 16 + k) as f64).sum::<f64>() / n as f64;
        for w in 0..n {
            let x = store.params(w)[k];
            assert!(
                (x - mean).abs() < 1e-9,
                "worker {w}[{k}] = {x}, mean {mean}"
            );
        }
    }
}

#[test]
fn one_slow_nic_delays_every_round_of_the_schedule() {
    // Passive worker 0's NIC is 20x slower. With uniform partners only the averagings with
    // worker 0 wait for it; on the schedule, the late reply of round k delays the request of
    // round k + 1 of the worker that waited for it, and so on: every round pays for it.
    let n = 16;
    let fast = net(10.0, 100.0);
    let mut slow = fast.clone();
    slow.nics.push(NicConfig {
        workers: WorkerSet::List(vec![0]),
        bandwidth_gbps: None,
        uplink_gbps: None,
        downlink_gbps: None,
        latency_us: Some(2000.0),
    });
    let rate = |partner: Partner, net_cfg: &NetworkConfig| -> f64 {
        let (alg, _) = run(&cfg(partner, None), n, net_cfg, 0.3, 0.05, |_| {
            vec![0.0; 16]
        });
        (1..n)
            .step_by(2)
            .map(|w| alg.averagings_of(w).1 as f64)
            .sum::<f64>()
    };
    let even = rate(Partner::Schedule, &fast) / rate(Partner::Uniform, &fast);
    let with_slow = rate(Partner::Schedule, &slow) / rate(Partner::Uniform, &slow);
    assert!(
        with_slow < 0.6 * even,
        "schedule/uniform averagings: {even:.3} on an even network, {with_slow:.3} with one slow NIC"
    );
}
