//! What a run records, on the exact reference store: gradient staleness (against the parameter
//! server's own counter and the closed forms `n − 1` and `(n − 1)·s`), consensus distance (exactly
//! 0 for all-reduce, geometric decay at the rate of the mixing matrix's second eigenvalue for
//! gossip), utilization (activities summing to the simulated time exactly, a straggler's effect on
//! synchronous and asynchronous methods), link totals, message ages, series, the timeline and the
//! per-event logs.

use crate::common;

use common::*;
use dasim_sim::algorithms::{AlgorithmConfig, run_algorithm};
use dasim_sim::engine::EvalPoint;
use dasim_sim::net::spectral::symmetric_eigenvalues;
use dasim_sim::prelude::*;
use dasim_sim::record::{Activity, GradientRecord, MessageRecord};

const SEED: u64 = 5;

/// A fast network: 100 Gbit/s, 1 µs, so communication is small against 10 ms steps.
fn fast_net() -> NetworkConfig {
    net(100.0, 1.0)
}

/// Collects evaluation points and the per-event logs.
#[derive(Default)]
struct Everything {
    points: Vec<EvalPoint>,
    gradients: Vec<GradientRecord>,
    messages: Vec<MessageRecord>,
}

impl Observer for Everything {
    fn on_eval(&mut self, p: &EvalPoint) -> Result<(), String> {
        self.points.push(p.clone());
        Ok(())
    }
    fn on_gradient(&mut self, r: &GradientRecord) -> Result<(), String> {
        self.gradients.push(*r);
        Ok(())
    }
    fn on_message(&mut self, r: &MessageRecord) -> Result<(), String> {
        self.messages.push(*r);
        Ok(())
    }
}

/// Runs `make`'s algorithm on an exact store of `n` workers.
#[allow(clippy::too_many_arguments)]
fn run_alg<A: Algorithm>(
    cfg: &AlgorithmConfig,
    cluster_cfg: &ClusterConfig,
    topology: TopologyConfig,
    store: &mut ReferenceStore,
    stop: &RunConfig,
    metrics: &MetricsConfig,
    make: impl FnOnce(&World<'_>) -> A,
) -> (Outcome, A, Everything) {
    let opt = optimizer(0.05, 0.5);
    let mut world = world(cfg, cluster_cfg, &fast_net(), topology, store, &opt, SEED);
    world.set_metrics(metrics);
    let mut alg = make(&world);
    let mut obs = Everything::default();
    let outcome = run(&mut alg, &mut world, stop, &mut obs).unwrap();
    (outcome, alg, obs)
}

/// Runs `cfg` (any kind) on an exact store.
fn run_cfg(
    cfg: &AlgorithmConfig,
    cluster_cfg: &ClusterConfig,
    topology: TopologyConfig,
    stop: &RunConfig,
    metrics: &MetricsConfig,
) -> (Outcome, Everything) {
    let n = cluster_cfg.workers;
    let mut store = quadratic_store(n, SEED);
    let opt = optimizer(0.05, 0.5);
    let mut world = world(
        cfg,
        cluster_cfg,
        &fast_net(),
        topology,
        &mut store,
        &opt,
        SEED,
    );
    world.set_metrics(metrics);
    let mut obs = Everything::default();
    let outcome = run_algorithm(cfg, &mut world, stop, &mut obs).unwrap();
    (outcome, obs)
}

fn ps(servers: usize) -> (AlgorithmConfig, PsConfig) {
    let c = PsConfig {
        servers,
        ..Default::default()
    };
    (AlgorithmConfig::from(AlgorithmKind::Ps(c.clone())), c)
}

fn every_kind() -> Vec<AlgorithmConfig> {
    vec![
        AlgorithmConfig::from(AlgorithmKind::AllReduce(AllReduceConfig {
            buckets: 3,
            backward_fraction: 0.5,
            compression: None,
        })),
        AlgorithmConfig::from(AlgorithmKind::LocalSgd(LocalSgdConfig::default())),
        AlgorithmConfig::from(AlgorithmKind::PostLocalSgd(LocalSgdConfig {
            warmup_steps: Some(5),
            ..Default::default()
        })),
        AlgorithmConfig::from(AlgorithmKind::Ps(PsConfig {
            servers: 2,
            staleness: Some(1),
            ..Default::default()
        })),
        AlgorithmConfig::from(AlgorithmKind::Ps(PsConfig::default())),
        AlgorithmConfig::from(AlgorithmKind::Dpsgd(DpsgdConfig::default())),
        AlgorithmConfig::from(AlgorithmKind::Dpsgd(DpsgdConfig {
            update: UpdateOrder::AdaptThenCombine,
            ..Default::default()
        })),
        AlgorithmConfig::from(AlgorithmKind::AdPsgd(AdPsgdConfig::default())),
        AlgorithmConfig::from(AlgorithmKind::AdPsgd(AdPsgdConfig {
            averaging: Averaging::Thread,
            ..Default::default()
        })),
        AlgorithmConfig::from(AlgorithmKind::Sgp(SgpConfig::default())),
        AlgorithmConfig::from(AlgorithmKind::OverlapSgp(OverlapSgpConfig::default())),
        AlgorithmConfig::from(AlgorithmKind::Dasgd(DasgdConfig::default())),
        AlgorithmConfig::from(AlgorithmKind::LapSgd(LapSgdConfig::default())),
        AlgorithmConfig::from(AlgorithmKind::LppSgd(LapSgdConfig::default())),
        AlgorithmConfig::from(AlgorithmKind::Choco(ChocoConfig {
            consensus_lr: 0.5,
            compression: Compression::TopK { fraction: 0.5 },
            weights: MixingWeights::Metropolis,
            scope: ChocoScope::Tensor,
            overlap: false,
        })),
    ]
}

// ---------------------------------------------------------------------------------------------
// Gradient staleness
// ---------------------------------------------------------------------------------------------

#[test]
fn ps_staleness_settles_at_n_minus_1_and_matches_the_servers_counter() {
    for n in [4, 8] {
        for servers in [1, 3] {
            let (cfg, c) = ps(servers);
            let mut store = quadratic_store(n, SEED);
            let (outcome, _, _) = run_alg(
                &cfg,
                &cluster(n, &[]),
                TopologyConfig::Ring {},
                &mut store,
                &stop_at(1.0),
                &MetricsConfig::default(),
                |_| ParameterServer::new(&c, n),
            );
            let h = outcome.record.all_row_staleness();
            let own = outcome.staleness.unwrap();
            // The generic measure counts exactly what the server counts, block by block.
            assert_eq!(h.count(), own.count, "n = {n}, servers = {servers}");
            assert_eq!(h.max(), own.max);
            assert!(
                (h.mean() - own.mean).abs() < 1e-9,
                "{} vs {}",
                h.mean(),
                own.mean
            );
            // Equal workers, no jitter: after the first round every gradient is n − 1 stale.
            let at = h
                .iter()
                .find(|&(v, _)| v == n as u64 - 1)
                .map_or(0, |(_, c)| c);
            assert!(
                at as f64 >= 0.95 * h.count() as f64,
                "n = {n}, servers = {servers}: {:?}",
                h.iter().collect::<Vec<_>>()
            );
            assert_eq!(h.max(), n as u64 - 1);
        }
    }
}

#[test]
fn a_straggler_s_times_slower_computes_gradients_about_n_minus_1_times_s_stale() {
    let (n, s) = (6, 4.0);
    let (cfg, c) = ps(1);
    let mut store = quadratic_store(n, SEED);
    let (outcome, alg, _) = run_alg(
        &cfg,
        &cluster(n, &[(2, s)]),
        TopologyConfig::Ring {},
        &mut store,
        &stop_at(2.0),
        &MetricsConfig::default(),
        |_| ParameterServer::new(&c, n),
    );
    let slow = &outcome.record.row_staleness[2];
    let expected = (n as f64 - 1.0) * s;
    // While the straggler computes one step (4 step times plus a round trip of a few µs), each
    // of the 5 others completes 4 steps: 20 updates, give or take the phase of the first step
    // (at most one update per other worker, 5/20 = 25%, on the first gradient only). Over ~50
    // gradients that is within 2%; 5% leaves room for the round trips.
    assert!(slow.count() >= 40, "{} gradients", slow.count());
    assert!(
        (slow.mean() - expected).abs() < 0.05 * expected,
        "straggler staleness {:.2}, expected about {expected}",
        slow.mean()
    );
    // The healthy workers see the other n − 2 healthy ones and the straggler a quarter of the
    // time: n − 2 + 1/s.
    let healthy = &outcome.record.row_staleness[0];
    let want = n as f64 - 2.0 + 1.0 / s;
    assert!(
        (healthy.mean() - want).abs() < 0.1,
        "healthy staleness {:.3}, expected about {want}",
        healthy.mean()
    );
    // Its gradients applied, and possibly one in progress at the stop.
    let started = alg.started()[2];
    assert!(started == slow.count() || started == slow.count() + 1);
}

#[test]
fn synchronous_methods_measure_zero_and_asynchronous_ones_their_delays() {
    let n = 8;
    let stop = stop_after_steps(400);
    let metrics = MetricsConfig::default();
    for cfg in [
        AlgorithmConfig::from(AlgorithmKind::AllReduce(AllReduceConfig::default())),
        AlgorithmConfig::from(AlgorithmKind::LocalSgd(LocalSgdConfig::default())),
        AlgorithmConfig::from(AlgorithmKind::Sgp(SgpConfig::default())),
    ] {
        let (o, _) = run_cfg(
            &cfg,
            &cluster(n, &[(1, 3.0)]),
            TopologyConfig::Ring {},
            &stop,
            &metrics,
        );
        let h = o.record.all_row_staleness();
        assert!(h.count() >= 400, "{}", cfg.kind());
        assert_eq!(
            h.max(),
            0,
            "{}: {:?}",
            cfg.kind(),
            h.iter().collect::<Vec<_>>()
        );
    }
    // LAP-SGD: P processes share a row, so each gradient sees about the P − 1 others' steps.
    let lap = AlgorithmConfig::from(AlgorithmKind::LapSgd(LapSgdConfig {
        processes: 3,
        h: 1000,
        ..Default::default()
    }));
    let (o, _) = run_cfg(
        &lap,
        &cluster(n, &[]),
        TopologyConfig::Ring {},
        &stop,
        &metrics,
    );
    let m = o.record.all_row_staleness().mean();
    assert!((m - 2.0).abs() < 0.1, "LAP-SGD with 3 processes: {m}");
    // DASGD: a gradient applied at the origin is stale by what arrived during its computation.
    let (o, _) = run_cfg(
        &AlgorithmConfig::from(AlgorithmKind::Dasgd(DasgdConfig::default())),
        &cluster(n, &[]),
        TopologyConfig::Ring {},
        &stop,
        &metrics,
    );
    assert!(o.record.all_row_staleness().mean() > 1.0);
}

// ---------------------------------------------------------------------------------------------
// Consensus distance
// ---------------------------------------------------------------------------------------------

#[test]
fn allreduce_keeps_the_consensus_distance_exactly_zero() {
    let n = 8;
    let mut store = quadratic_store(n, SEED);
    let cfg = AlgorithmConfig::from(AlgorithmKind::AllReduce(AllReduceConfig::default()));
    let stop = stop_at(0.5);
    let (outcome, _, obs) = run_alg(
        &cfg,
        &cluster(n, &[(3, 2.0)]),
        TopologyConfig::Ring {},
        &mut store,
        &stop,
        &MetricsConfig::default(),
        |_| AllReduceSgd::new(&AllReduceConfig::default(), n),
    );
    assert!(outcome.worker_steps > 100);
    assert_eq!(obs.points.len(), 11);
    assert!(obs.points.iter().all(|p| p.consensus == 0.0));
    // The quadratic knows its optimum: the suboptimality is the objective itself.
    let last = obs.points.last().unwrap();
    assert_eq!(last.suboptimality, Some(last.eval.loss));
}

/// D-PSGD with rate 0 is pure gossip averaging, `x ← W x` per iteration: the consensus distance
/// decays by `λ²` per iteration, `λ = max(|λ₂|, |λ_n|)` of `W`.
fn gossip_decay(topology: TopologyConfig, n: usize) {
    let env = BuildEnv::new(SEED);
    let graph = Topology::build(&topology, n, &env).unwrap();
    let ev = symmetric_eigenvalues(graph.mixing_matrix(), n);
    let lambda = ev[1].abs().max(ev[n - 1].abs());
    assert!((1.0 - lambda - graph.spectral_gap()).abs() < 1e-12);

    let mut store =
        ReferenceStore::new(Quadratic::new(16, 10.0, 0.1), n, optimizer(0.0, 0.0), SEED);
    // Distinct replicas: x_i[k] = sin(i·k + i).
    for i in 0..n {
        let x = (0..16).map(|k| ((i * k + i) as f64).sin()).collect();
        store.set_params(i, x);
    }
    let cfg = AlgorithmConfig::from(AlgorithmKind::Dpsgd(DpsgdConfig::default()));
    let iterations = 40u64;
    let stop = RunConfig {
        sim_time_s: None,
        epochs: None,
        worker_steps: Some(n as u64 * iterations),
        eval_every_s: 0.0,
        eval_every_steps: Some(n as u64),
        divergence_loss: None,
    };
    let opt = optimizer(0.0, 0.0);
    let mut world = world(
        &cfg,
        &cluster(n, &[]),
        &fast_net(),
        topology,
        &mut store,
        &opt,
        SEED,
    );
    let mut points = Collect::default();
    let mut alg = Dpsgd::new(&DpsgdConfig::default(), &world.topology);
    run(&mut alg, &mut world, &stop, &mut points).unwrap();
    // A point at 0, then one as every iteration completes (every worker has mixed).
    let c: Vec<f64> = points.0.iter().map(|p| p.consensus).collect();
    assert_eq!(c.len(), iterations as usize + 1);
    assert!(
        points.0[1..]
            .iter()
            .enumerate()
            .all(|(k, p)| p.worker_steps == n as u64 * (k as u64 + 1))
    );
    let rate = lambda * lambda;
    // Once the slower modes have died out (after ~10 iterations), every iteration multiplies the
    // distance by λ² to within 1%.
    for k in 10..iterations as usize {
        let r = c[k + 1] / c[k];
        assert!(
            (r / rate - 1.0).abs() < 0.01,
            "iteration {k}: ratio {r:.5}, λ² = {rate:.5} ({c:?})"
        );
    }
    assert!(c[iterations as usize] < 1e-3 * c[0]);
}

#[test]
fn gossip_consensus_decays_at_the_rate_of_the_second_eigenvalue() {
    gossip_decay(TopologyConfig::Ring {}, 8);
    gossip_decay(TopologyConfig::Torus { rows: 3, cols: 4 }, 12);
}

#[test]
fn push_sum_consensus_is_measured_on_the_debiased_replicas() {
    let n = 8;
    let mut store = quadratic_store(n, SEED);
    let cfg = AlgorithmConfig::from(AlgorithmKind::OverlapSgp(OverlapSgpConfig::default()));
    let (_, alg, obs) = run_alg(
        &cfg,
        &cluster(n, &[(0, 3.0)]),
        TopologyConfig::TwoPeerExponential {},
        &mut store,
        &stop_at(0.3),
        &MetricsConfig {
            eval_replicas: true,
            ..Default::default()
        },
        |w| Sgp::overlap(&OverlapSgpConfig::default(), w.topology.schedule()),
    );
    let last = obs.points.last().unwrap();
    // The store's distance of z_i = x_i / w_i, recomputed by hand from the rows and weights.
    let w = alg.weights();
    let z: Vec<Vec<f64>> = (0..n)
        .map(|i| store.params(i).iter().map(|x| x / w[i]).collect())
        .collect();
    let mean: Vec<f64> = (0..16)
        .map(|k| z.iter().map(|r| r[k]).sum::<f64>() / n as f64)
        .collect();
    let want: f64 = z
        .iter()
        .map(|r| {
            r.iter()
                .zip(&mean)
                .map(|(a, b)| (a - b).powi(2))
                .sum::<f64>()
        })
        .sum::<f64>()
        / n as f64;
    assert!((last.consensus - want).abs() <= 1e-12 * want.max(1.0));
    assert!(last.consensus > 0.0);
    // Weight range as a series, replica spread around the de-biased average.
    let series: Vec<&str> = last.series.iter().map(|(k, _)| *k).collect();
    assert_eq!(series, ["weight_min", "weight_max"]);
    let wmin = w.iter().copied().fold(f64::INFINITY, f64::min);
    assert_eq!(last.series[0].1, wmin);
    let reps = last.replicas.unwrap();
    assert!(reps.loss.min <= reps.loss.mean && reps.loss.mean <= reps.loss.max);
    assert!(reps.loss.max > reps.loss.min);
}

// ---------------------------------------------------------------------------------------------
// Utilization
// ---------------------------------------------------------------------------------------------

#[test]
fn every_workers_activities_add_up_to_the_simulated_time_exactly() {
    let n = 8;
    for cfg in every_kind() {
        for stop in [stop_at(0.37), stop_after_steps(333)] {
            let (o, _) = run_cfg(
                &cfg,
                &cluster(n, &[(3, 3.0)]),
                TopologyConfig::Ring {},
                &stop,
                &MetricsConfig::default(),
            );
            let u = &o.record.usage;
            assert_eq!(u.len(), n);
            for (w, usage) in u.iter().enumerate() {
                assert_eq!(
                    usage.total(),
                    o.sim_time,
                    "{}: worker {w}: {usage:?}",
                    cfg.kind()
                );
            }
            let steps: u64 = u.iter().map(|x| x.steps).sum();
            assert_eq!(steps, o.worker_steps, "{}", cfg.kind());
            // Waits attributed to peers never exceed the time blocked.
            for (w, usage) in u.iter().enumerate() {
                let attributed: SimTime = (0..n)
                    .map(|p| o.record.waited(w, p))
                    .fold(SimTime::ZERO, |a, b| a + b);
                assert!(attributed <= usage.get(Activity::Blocked), "{}", cfg.kind());
            }
        }
    }
}

#[test]
fn a_straggler_blocks_allreduce_and_leaves_adpsgd_computing() {
    let (n, slow, s) = (8, 5, 4.0);
    let metrics = MetricsConfig::default();
    let stop = stop_at(1.0);
    let (ar, _) = run_cfg(
        &AlgorithmConfig::from(AlgorithmKind::AllReduce(AllReduceConfig::default())),
        &cluster(n, &[(slow, s)]),
        TopologyConfig::Ring {},
        &stop,
        &metrics,
    );
    let total = ar.sim_time.as_nanos() as f64;
    for w in (0..n).filter(|&w| w != slow) {
        let u = ar.record.usage[w];
        let blocked = u.get(Activity::Blocked).as_nanos() as f64 / total;
        // Each iteration takes the straggler's 4 step times; a healthy worker computes one.
        assert!(blocked > 0.7, "all-reduce worker {w}: blocked {blocked:.3}");
        // Every ended wait is on the straggler; only the wait cut by the stop (at most one
        // iteration, 4% of the run) has no peer yet.
        let on_straggler = ar.record.waited(w, slow).as_nanos() as f64;
        let all: SimTime = (0..n)
            .map(|p| ar.record.waited(w, p))
            .fold(SimTime::ZERO, |a, b| a + b);
        assert_eq!(
            all.as_nanos() as f64,
            on_straggler,
            "worker {w} waits for others"
        );
        assert!(on_straggler >= 0.95 * u.get(Activity::Blocked).as_nanos() as f64);
    }
    // The straggler itself never waits for anyone.
    assert_eq!(ar.record.usage[slow].get(Activity::Blocked), SimTime::ZERO);
    assert!(ar.record.utilization()[2] > 0.6);

    let (ad, _) = run_cfg(
        &AlgorithmConfig::from(AlgorithmKind::AdPsgd(AdPsgdConfig::default())),
        &cluster(n, &[(slow, s)]),
        TopologyConfig::Ring {},
        &stop,
        &metrics,
    );
    for (w, u) in ad.record.usage.iter().enumerate() {
        let compute = u.get(Activity::Compute).as_nanos() as f64 / total;
        assert!(compute > 0.99, "AD-PSGD worker {w}: computing {compute:.4}");
    }
    assert!(ad.record.waits.is_empty());
}

#[test]
fn dpsgd_is_blocked_on_models_not_yet_sent_and_communicates_while_they_fly() {
    let n = 6;
    let atc = AlgorithmConfig::from(AlgorithmKind::Dpsgd(DpsgdConfig {
        update: UpdateOrder::AdaptThenCombine,
        ..Default::default()
    }));
    // A 1 ms link latency: after each 10 ms step every worker waits about 1 ms for models that
    // its equal neighbours sent at the same instant — in flight, so communicating.
    let slow_links = net(100.0, 1000.0);
    let run_with = |stragglers: &[(usize, f64)]| {
        let mut store = quadratic_store(n, SEED);
        let opt = optimizer(0.05, 0.5);
        let mut world = world(
            &atc,
            &cluster(n, stragglers),
            &slow_links,
            TopologyConfig::Ring {},
            &mut store,
            &opt,
            SEED,
        );
        run_algorithm(&atc, &mut world, &stop_at(0.5), &mut Collect::default()).unwrap()
    };
    let o = run_with(&[]);
    for u in &o.record.usage {
        // Only the nanoseconds by which a neighbour's start drifts (its second message queues
        // behind its first at its NIC) are spent blocked.
        assert!(
            u.get(Activity::Blocked) < SimTime::from_micros_f64(10.0),
            "{u:?}"
        );
        let c = u.get(Activity::Communicate).as_secs_f64() / o.sim_time.as_secs_f64();
        assert!((c - 1.0 / 11.0).abs() < 0.01, "communicating {c:.4}");
    }
    // Worker 0 twice as slow: its neighbours 1 and 5 wait for it, the next ones for them.
    let o = run_with(&[(0, 2.0)]);
    for (w, on) in [(1, 0), (5, 0), (2, 1), (4, 5)] {
        let blocked = o.record.usage[w].get(Activity::Blocked);
        let attributed: SimTime = (0..n)
            .map(|p| o.record.waited(w, p))
            .fold(SimTime::ZERO, |a, b| a + b);
        assert_eq!(
            attributed,
            o.record.waited(w, on),
            "worker {w} waits for {on} only"
        );
        assert!(
            blocked.as_secs_f64() > 0.3 * o.sim_time.as_secs_f64(),
            "worker {w}"
        );
    }
    assert_eq!(o.record.usage[0].get(Activity::Blocked), SimTime::ZERO);
}

#[test]
fn a_ps_staleness_bound_blocks_fast_workers_on_the_slowest() {
    let (n, slow) = (4, 1);
    let c = PsConfig {
        staleness: Some(0),
        ..Default::default()
    };
    let (o, _) = run_cfg(
        &AlgorithmConfig::from(AlgorithmKind::Ps(c)),
        &cluster(n, &[(slow, 3.0)]),
        TopologyConfig::Ring {},
        &stop_at(0.5),
        &MetricsConfig::default(),
    );
    for w in (0..n).filter(|&w| w != slow) {
        let u = o.record.usage[w];
        let share = o.record.waited(w, slow).as_nanos() as f64 / o.sim_time.as_nanos() as f64;
        assert!(
            share > 0.6,
            "worker {w}: {share:.3} of the time waiting for {slow}; {u:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Links, message ages, timeline, logs, evaluation cadence
// ---------------------------------------------------------------------------------------------

#[test]
fn link_totals_sum_to_the_network_totals_and_logs_match_the_histograms() {
    let n = 6;
    let metrics = MetricsConfig {
        log_gradients: true,
        log_messages: true,
        ..Default::default()
    };
    for cfg in every_kind() {
        let (o, obs) = run_cfg(
            &cfg,
            &cluster(n, &[(2, 2.0)]),
            TopologyConfig::Ring {},
            &stop_at(0.2),
            &metrics,
        );
        let links = &o.record.links;
        let messages: u64 = links.values().map(|l| l.messages).sum();
        let bytes: u64 = links.values().map(|l| l.bytes).sum();
        assert_eq!(
            (messages, bytes),
            (o.network.messages, o.network.bytes),
            "{}",
            cfg.kind()
        );
        assert!(
            links
                .values()
                .all(|l| l.busy > SimTime::ZERO && l.busy <= o.sim_time)
        );
        assert_eq!(
            obs.messages.len() as u64,
            o.network.messages,
            "{}",
            cfg.kind()
        );
        let logged_bytes: u64 = obs.messages.iter().map(|m| m.bytes).sum();
        assert_eq!(logged_bytes, o.network.bytes);
        assert!(obs.messages.iter().all(|m| m.arrive > m.send));
        assert_eq!(
            obs.gradients.len() as u64,
            o.record.all_row_staleness().count(),
            "{}",
            cfg.kind()
        );
        for g in &obs.gradients {
            assert!(g.read <= g.apply);
            assert!(g.worker < n);
        }
    }
}

#[test]
fn overlap_sgp_records_every_mixed_messages_age() {
    let n = 8;
    let tau = 2;
    // The paper's rule bounds the age of what a node mixes by τ (the reference's does not).
    let c = OverlapSgpConfig {
        tau,
        send: SendRule::EveryIteration,
    };
    let mut store = quadratic_store(n, SEED);
    let (o, alg, _) = run_alg(
        &AlgorithmConfig::from(AlgorithmKind::OverlapSgp(c.clone())),
        &cluster(n, &[(4, 3.0)]),
        TopologyConfig::OnePeerExponential {},
        &mut store,
        &stop_at(0.5),
        &MetricsConfig::default(),
        |w| Sgp::overlap(&c, w.topology.schedule()),
    );
    let ages = o.record.message_ages();
    assert_eq!(ages.count(), alg.mixed_messages());
    assert_eq!(ages.max(), alg.max_mixed_age());
    assert!(ages.max() <= tau && ages.max() > 0);
}

#[test]
fn the_timeline_tiles_its_window_for_every_worker() {
    let n = 4;
    for (cfg, window) in [
        (
            AlgorithmConfig::from(AlgorithmKind::AllReduce(AllReduceConfig::default())),
            None,
        ),
        (
            AlgorithmConfig::from(AlgorithmKind::Ps(PsConfig::default())),
            Some([0.05, 0.12]),
        ),
        (
            AlgorithmConfig::from(AlgorithmKind::Dpsgd(DpsgdConfig::default())),
            None,
        ),
    ] {
        let metrics = MetricsConfig {
            timeline_s: window,
            ..Default::default()
        };
        let (o, _) = run_cfg(
            &cfg,
            &cluster(n, &[(1, 2.0)]),
            TopologyConfig::Ring {},
            &stop_at(1.0),
            &metrics,
        );
        let (start, end) = o.record.timeline_window;
        match window {
            Some([a, b]) => {
                assert_eq!(
                    (start, end),
                    (SimTime::from_secs_f64(a), SimTime::from_secs_f64(b))
                )
            }
            // By default: until every worker has completed 20 steps — the straggler's 20th, at
            // about 20 × 20 ms.
            None => {
                assert_eq!(start, SimTime::ZERO);
                let e = end.as_secs_f64();
                assert!(
                    (0.39..0.45).contains(&e),
                    "{}: window ends at {e}",
                    cfg.kind()
                );
            }
        }
        for w in 0..n {
            let mut ivs: Vec<_> = o.record.timeline.iter().filter(|i| i.worker == w).collect();
            ivs.sort_by_key(|i| i.start);
            assert_eq!(ivs.first().unwrap().start, start);
            assert_eq!(ivs.last().unwrap().end, end);
            for pair in ivs.windows(2) {
                assert_eq!(
                    pair[0].end,
                    pair[1].start,
                    "{}: a gap or an overlap",
                    cfg.kind()
                );
                // Only a step boundary separates two intervals of the same activity.
                assert!(
                    pair[0].activity != pair[1].activity || pair[0].activity == Activity::Compute,
                    "{}: two {:?} intervals back to back",
                    cfg.kind(),
                    pair[0].activity
                );
            }
        }
    }
}

#[test]
fn points_fall_on_the_time_grid_and_every_n_worker_steps() {
    let n = 4;
    // Per-step averaging: the active workers' steps end a round trip after the 10 ms grid, so
    // no point of the step count lands on the time grid.
    let cfg = AlgorithmConfig::from(AlgorithmKind::AdPsgd(AdPsgdConfig {
        averaging: Averaging::PerStep,
        ..Default::default()
    }));
    let both = RunConfig {
        sim_time_s: Some(0.2),
        epochs: None,
        worker_steps: None,
        eval_every_s: 0.05,
        eval_every_steps: Some(10),
        divergence_loss: None,
    };
    let (o, obs) = run_cfg(
        &cfg,
        &cluster(n, &[]),
        TopologyConfig::Ring {},
        &both,
        &MetricsConfig::default(),
    );
    let grid = obs
        .points
        .iter()
        .filter(|p| (p.time.as_nanos() % 50_000_000) == 0)
        .count();
    assert_eq!(grid, 5);
    let by_steps = obs
        .points
        .iter()
        .filter(|p| p.worker_steps % 10 == 0 && p.worker_steps > 0);
    // 4 equal workers finish together every 10 ms: 80 steps in 0.2 s, a point at every
    // multiple of 10 worker steps reached (each lands on a multiple of 4: 12, 20, 32, …).
    assert!(by_steps.count() >= 4);
    assert!(obs.points.windows(2).all(|w| w[0].time <= w[1].time));
    assert_eq!(obs.points.last().unwrap().time, o.sim_time);
    // Steps only: no time grid.
    let steps_only = RunConfig {
        eval_every_s: 0.0,
        ..both
    };
    steps_only.validate().unwrap();
    let (_, obs) = run_cfg(
        &cfg,
        &cluster(n, &[]),
        TopologyConfig::Ring {},
        &steps_only,
        &MetricsConfig::default(),
    );
    let mut last = 0;
    for p in &obs.points[1..obs.points.len() - 1] {
        assert!(
            p.worker_steps / 10 > last / 10,
            "{} after {last}",
            p.worker_steps
        );
        last = p.worker_steps;
    }
}

#[test]
fn the_dasgd_series_reports_staleness_between_models_since_the_last_point() {
    let n = 6;
    let (o, obs) = run_cfg(
        &AlgorithmConfig::from(AlgorithmKind::Dasgd(DasgdConfig::default())),
        &cluster(n, &[(0, 2.0)]),
        TopologyConfig::Ring {},
        &stop_at(0.3),
        &MetricsConfig::default(),
    );
    let own = o.staleness.unwrap();
    let mut max = 0.0f64;
    for p in &obs.points[1..] {
        let names: Vec<&str> = p.series.iter().map(|(k, _)| *k).collect();
        assert_eq!(names, ["staleness_avg", "staleness_max"]);
        assert!(p.series[0].1 <= p.series[1].1);
        max = max.max(p.series[1].1);
    }
    assert_eq!(max, own.max as f64);
}

#[test]
fn records_are_reproducible() {
    let n = 6;
    let metrics = MetricsConfig {
        log_gradients: true,
        ..Default::default()
    };
    for cfg in every_kind() {
        let a = run_cfg(
            &cfg,
            &cluster(n, &[(1, 2.5)]),
            TopologyConfig::Ring {},
            &stop_at(0.2),
            &metrics,
        );
        let b = run_cfg(
            &cfg,
            &cluster(n, &[(1, 2.5)]),
            TopologyConfig::Ring {},
            &stop_at(0.2),
            &metrics,
        );
        // Debug text: the quadratic's accuracy is NaN, which `==` would never equal.
        assert_eq!(format!("{:?}", a.0), format!("{:?}", b.0), "{}", cfg.kind());
        assert_eq!(a.1.gradients, b.1.gradients);
        assert_eq!(format!("{:?}", a.1.points), format!("{:?}", b.1.points));
    }
}

#[test]
fn bad_metrics_and_cadence_values_name_their_key() {
    let cases: Vec<(MetricsConfig, &str)> = vec![
        (
            MetricsConfig {
                target_accuracy: Some(1.5),
                ..Default::default()
            },
            "metrics.target_accuracy",
        ),
        (
            MetricsConfig {
                target_loss: Some(f64::NAN),
                ..Default::default()
            },
            "metrics.target_loss",
        ),
        (
            MetricsConfig {
                timeline_s: Some([0.5, 0.5]),
                ..Default::default()
            },
            "metrics.timeline_s",
        ),
        (
            MetricsConfig {
                timeline_s: Some([-1.0, 0.5]),
                ..Default::default()
            },
            "metrics.timeline_s",
        ),
    ];
    for (cfg, path) in cases {
        let e = cfg.validate().unwrap_err();
        assert_eq!(e.path.to_string(), path);
        assert!(e.hint.is_some() || path == "metrics.target_loss");
    }
    let mut r = stop_at(1.0);
    r.eval_every_steps = Some(0);
    assert_eq!(
        r.validate().unwrap_err().path.to_string(),
        "run.eval_every_steps"
    );
    let mut r = stop_at(1.0);
    r.eval_every_s = 0.0;
    let e = r.validate().unwrap_err();
    assert_eq!(e.path.to_string(), "run.eval_every_s");
    assert!(e.hint.unwrap().contains("eval_every_steps"));
}
