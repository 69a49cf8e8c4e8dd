//! LAP-SGD and LPP-SGD against the reference implementation's rules (Chatterjee et al., "Local
//! SGD Meets Asynchrony"; `bapi/LPP-SGD`): averaging paced by the fastest node, the warm-up of
//! `pre_post_epochs` and LPP-SGD's partial-step cost. On the exact reference store, with
//! `run_inspect`.

use crate::common;

use std::ops::Range;

use common::*;
use dasim_sim::algorithms::lap::{LapSgd, partial_step_cost};
use dasim_sim::cluster::stragglers::JitterConfig;
use dasim_sim::engine::{Collect, run_inspect};
use dasim_sim::prelude::*;
use dasim_sim::store::{Evaluation, GradId, Layer, MsgId, ReferenceStore, Slot};

const SEED: u64 = 5;

fn lap(c: &LapSgdConfig) -> AlgorithmConfig {
    AlgorithmConfig::from(AlgorithmKind::LapSgd(c.clone()))
}

/// Runs LAP-SGD (or LPP-SGD) on `store`, calling `inspect` after every event.
fn run_lap(
    c: &LapSgdConfig,
    partitioned: bool,
    cluster_cfg: &ClusterConfig,
    store: &mut dyn ReplicaStore,
    stop: &RunConfig,
    inspect: &mut dyn FnMut(&LapSgd, &World<'_>, SimTime),
) -> (Outcome, LapSgd) {
    run_lap_on(
        &net(10.0, 5.0),
        c,
        partitioned,
        cluster_cfg,
        store,
        stop,
        inspect,
    )
}

/// [`run_lap`] on the network `net_cfg`.
fn run_lap_on(
    net_cfg: &NetworkConfig,
    c: &LapSgdConfig,
    partitioned: bool,
    cluster_cfg: &ClusterConfig,
    store: &mut dyn ReplicaStore,
    stop: &RunConfig,
    inspect: &mut dyn FnMut(&LapSgd, &World<'_>, SimTime),
) -> (Outcome, LapSgd) {
    let n = cluster_cfg.workers;
    let opt = optimizer(0.05, 0.5);
    let cfg = lap(c);
    let mut world = world(
        &cfg,
        cluster_cfg,
        net_cfg,
        TopologyConfig::Ring {},
        store,
        &opt,
        SEED,
    );
    let mut alg = LapSgd::new(c, n, partitioned);
    let outcome =
        run_inspect(&mut alg, &mut world, stop, &mut Collect::default(), inspect).unwrap();
    (outcome, alg)
}

/// Averagings per simulated second (rounds: every node averages once per round) of 8 nodes,
/// `H = 8`, with node 3 `slowdown` times slower.
fn averaging_rate(slowdown: f64) -> f64 {
    let n = 8;
    let c = LapSgdConfig {
        h: 8,
        ..Default::default()
    };
    let stragglers = if slowdown > 1.0 {
        vec![(3, slowdown)]
    } else {
        vec![]
    };
    let mut store = quadratic_store(n, SEED);
    let (outcome, alg) = run_lap(
        &c,
        false,
        &cluster(n, &stragglers),
        &mut store,
        &stop_at(2.0),
        &mut |_, _, _| {},
    );
    alg.averagings() as f64 / n as f64 / outcome.sim_time.as_secs_f64()
}

#[test]
fn a_straggler_does_not_set_the_averaging_rate() {
    // The reference all-reduces the step counters with MAX: an averaging happens when the fastest
    // node made H minibatches, whatever the straggler did. Waiting for every node's own H
    // minibatches instead made the rate fall 8.7× with this straggler.
    let (even, straggler) = (averaging_rate(1.0), averaging_rate(8.0));
    // 8 nodes of 2 processes, 10 ms steps at P = 2: each node makes a minibatch every 10 ms, so
    // about one averaging every 80 ms plus the all-reduces.
    assert!((10.0..13.0).contains(&even), "{even} averagings/s");
    let ratio = even / straggler;
    assert!(
        (0.9..1.2).contains(&ratio),
        "{even} vs {straggler} averagings/s"
    );
}

#[test]
fn the_fastest_node_triggers_and_every_node_contributes_what_it_has() {
    let n = 4;
    let c = LapSgdConfig {
        processes: 1,
        h: 4,
        step_time_factor: Some(1.0),
        ..Default::default()
    };
    let mut store = quadratic_store(n, SEED);
    let mut lag = 0u64;
    let (_, alg) = run_lap(
        &c,
        false,
        &cluster(n, &[(2, 8.0)]),
        &mut store,
        &stop_at(1.0),
        &mut |alg: &LapSgd, _, _| lag = lag.max(alg.counter(0) - alg.counter(2)),
    );
    // Every round is decided on the fast nodes' counter, H apart (the all-reduces take
    // microseconds, the steps 10 ms).
    let at = alg.decided_at();
    assert!(at.len() >= 20, "{at:?}");
    assert_eq!(at[0], 4);
    assert!(at.windows(2).all(|w| w[1] - w[0] == 4), "{at:?}");
    // The straggler contributed with far fewer minibatches than H per round.
    assert!(lag > 50, "{lag}");
}

#[test]
fn every_poll_round_is_decided_once_on_its_own_counters() {
    // Counters' all-reduces slower than a minibatch, and jittered steps: a node finishes its
    // poll and opens the next one while the others are still in the old one. The round a node
    // completes decides that round, and no other: each round once, on the maximum counter its
    // own nodes contributed, and every decided round is averaged by every node.
    let n = 8;
    let c = LapSgdConfig {
        processes: 2,
        h: 2,
        ..Default::default()
    };
    let jittered = ClusterConfig::new(n)
        .with_step_time_ms(10.0)
        .with_straggler(StragglerConfig::new(
            WorkerSet::All,
            StragglerModel::Jitter(JitterConfig {
                distribution: Distribution::Gamma,
                mean: 1.0,
                cv: Some(0.5),
                shape: None,
            }),
        ));
    let mut store = quadratic_store(n, SEED);
    let mut max_seen = Vec::new();
    let (_, alg) = run_lap_on(
        &net(10.0, 3000.0),
        &c,
        false,
        &jittered,
        &mut store,
        &stop_at(2.0),
        &mut |alg: &LapSgd, _, _| {
            let max = (0..n).map(|i| alg.counter(i)).max().unwrap();
            if alg.decided_at().len() > max_seen.len() {
                max_seen.push(max);
            }
        },
    );
    let at = alg.decided_at();
    assert!(at.len() >= 10, "{at:?}");
    assert_eq!(alg.rounds(), at.len() as u64);
    // Each decision is on counters no larger than the maximum at the time, and later rounds
    // are decided on later counters, H apart at least once past the warm-up.
    assert!(
        at.iter().zip(&max_seen).all(|(a, m)| a <= m),
        "{at:?} vs {max_seen:?}"
    );
    assert!(at.windows(2).all(|w| w[1] > w[0]), "{at:?}");
    // Every node averaged every decided round but the last one or two, still in flight.
    let rounds = alg.rounds();
    let averaged = alg.averagings();
    assert!(
        averaged <= rounds * n as u64 && averaged + 2 * n as u64 >= rounds * n as u64,
        "{averaged} node-averagings for {rounds} rounds of {n} nodes"
    );
}

#[test]
fn the_warm_up_averages_after_every_minibatch() {
    // 4 nodes of one process, equal speeds: the reference store's training set is 1000
    // samples of batch 1, so one epoch of a node's share is 250 of its minibatches.
    let n = 4;
    for pre_post_epochs in [0, 1] {
        let c = LapSgdConfig {
            processes: 1,
            h: 8,
            pre_post_epochs,
            step_time_factor: Some(1.0),
            ..Default::default()
        };
        let mut store = quadratic_store(n, SEED);
        let (_, alg) = run_lap(
            &c,
            false,
            &cluster(n, &[]),
            &mut store,
            &stop_at(4.0),
            &mut |_, _, _| {},
        );
        let at = alg.decided_at();
        let warm: Vec<u64> = at.iter().copied().take_while(|&m| m < 250).collect();
        if pre_post_epochs == 0 {
            assert!(
                warm.iter()
                    .enumerate()
                    .all(|(k, &m)| m == 8 * (k as u64 + 1))
            );
        } else {
            // An averaging after each minibatch until the fastest counter reaches one epoch...
            assert_eq!(warm, (1..250).collect::<Vec<u64>>());
        }
        // ... then every H.
        let post = &at[warm.len()..];
        assert!(post.len() > 10, "{post:?}");
        assert!(post.windows(2).all(|w| w[1] - w[0] == 8), "{post:?}");
    }
}

/// Three layers over 16 coordinates: 600, 300 and 100 forward FLOPs.
fn three_layers() -> Vec<Layer> {
    vec![
        Layer {
            params: 0..8,
            forward_flops: 600,
        },
        Layer {
            params: 8..12,
            forward_flops: 300,
        },
        Layer {
            params: 12..16,
            forward_flops: 100,
        },
    ]
}

#[test]
fn the_partial_step_cost_is_the_forward_pass_and_the_backward_pass_down_to_the_block() {
    let layers = three_layers();
    // F = 1000; a block starting in the first layer needs the whole backward pass.
    assert_eq!(partial_step_cost(&layers, &(0..8)), 1.0);
    assert_eq!(partial_step_cost(&layers, &(2..5)), 1.0);
    // From the second layer down: (F + 2·400) / 3F.
    assert!((partial_step_cost(&layers, &(8..16)) - 0.6).abs() < 1e-12);
    // The last layer only: (F + 2·100) / 3F.
    assert!((partial_step_cost(&layers, &(13..16)) - 0.4).abs() < 1e-12);
}

#[test]
fn lpp_sgd_partial_steps_take_the_time_of_the_cost_model() {
    let n = 2;
    let c = LapSgdConfig {
        processes: 2,
        h: 4,
        pre_partial_epochs: 0,
        step_time_factor: Some(1.0),
        ..Default::default()
    };
    let mut store = quadratic_store(n, SEED).with_layers(three_layers());
    // When each process of node 0 finished each of its steps.
    let mut ends: [Vec<SimTime>; 2] = [Vec::new(), Vec::new()];
    let (_, alg) = run_lap(
        &c,
        true,
        &cluster(n, &[]),
        &mut store,
        &stop_at(0.2),
        &mut |alg: &LapSgd, _, t| {
            for (p, e) in ends.iter_mut().enumerate() {
                if alg.process_steps(0, p) > e.len() as u64 {
                    e.push(t);
                }
            }
        },
    );
    // Process 0 owns 0..8 (in the first layer): its partial steps cost a full one. Process 1
    // owns 8..16: 60% of a step. From the start (pre_partial_epochs = 0) each alternates
    // full, partial, full, …
    assert_eq!(alg.partial_cost(0), 1.0);
    assert!((alg.partial_cost(1) - 0.6).abs() < 1e-12);
    let ms = |t: &SimTime| t.as_nanos() / 1_000_000;
    let p0: Vec<u64> = ends[0].iter().take(4).map(ms).collect();
    let p1: Vec<u64> = ends[1].iter().take(4).map(ms).collect();
    assert_eq!(p0, [10, 20, 30, 40]);
    assert_eq!(p1, [10, 16, 26, 32]);
}

/// Each process has its own optimizer state, as in the reference (one optimizer per process):
/// worked by hand. Two nodes of 2 processes, no averaging (`H` out of reach), momentum μ = 0.5,
/// rate η = 0.05, the 1-dimensional quadratic `f(x) = (x − 1)²/2` without noise (`g = x − 1`),
/// x₀ = 0. A process step takes 2 × 10 ms; at 20 ms process 0 then process 1 of node 0 apply
/// the gradients they computed at x₀, at 40 ms those they computed after their first steps:
///
/// ```text
/// 20 ms  p0: g = −1      v₀ = −1                        x = 0.05    p0 reads 0.05
///        p1: g = −1      v₁ = −1                        x = 0.1     p1 reads 0.1
/// 40 ms  p0: g = −0.95   v₀ = 0.5·(−1) − 0.95 = −1.45   x = 0.1725
///        p1: g = −0.9    v₁ = 0.5·(−1) − 0.9  = −1.4    x = 0.2425
/// ```
///
/// One state shared by both processes (dasim before) would give v = −1, −1.5, −1.7, … and
/// x = 0.05, 0.125, … instead.
#[test]
fn each_process_steps_with_its_own_momentum_buffer() {
    let c = LapSgdConfig {
        h: 1_000_000,
        ..Default::default()
    };
    let mut store = ReferenceStore::new(Quadratic::new(1, 1.0, 0.0), 2, optimizer(0.05, 0.5), SEED);
    let (outcome, alg) = run_lap(
        &c,
        false,
        &cluster(2, &[]),
        &mut store,
        &stop_after_steps(8),
        &mut |_, _, _| {},
    );
    assert_eq!(outcome.worker_steps, 8);
    assert_eq!(alg.rounds(), 0);
    // One state row per node for its second process.
    assert_eq!(store.rows(), 4);
    for node in 0..2 {
        let own = alg.state_row(node, 0);
        let second = alg.state_row(node, 1);
        assert_eq!(own, node);
        assert!(second >= 2, "an added row");
        let close = |got: f64, want: f64, what: &str| {
            assert!(
                (got - want).abs() < 1e-12,
                "node {node}: {what} {got}, want {want}"
            );
        };
        close(store.params(node)[0], 0.2425, "x");
        close(store.velocity(own)[0], -1.45, "process 0's momentum");
        close(store.velocity(second)[0], -1.4, "process 1's momentum");
        // The state row's parameters are never used: still the initial model.
        close(store.params(second)[0], 0.0, "the state row's parameters");
    }
}

/// The reference store with the last `S` coordinates declared state (as a batch-normalized
/// model's running statistics), recording every gradient application's row and block.
struct WithState {
    inner: ReferenceStore,
    state: usize,
    applied: Vec<(usize, Range<usize>)>,
}

impl ReplicaStore for WithState {
    fn workers(&self) -> usize {
        self.inner.workers()
    }
    fn rows(&self) -> usize {
        self.inner.rows()
    }
    fn num_params(&self) -> usize {
        self.inner.num_params()
    }
    fn batch_size(&self) -> usize {
        self.inner.batch_size()
    }
    fn train_size(&self) -> usize {
        self.inner.train_size()
    }
    fn layers(&self) -> Vec<Layer> {
        self.inner.layers()
    }
    fn state(&self) -> Range<usize> {
        let p = self.num_params();
        p - self.state..p
    }
    fn add_rows(&mut self, count: usize) -> usize {
        self.inner.add_rows(count)
    }
    fn request_gradient_scaled(&mut self, worker: usize, scale: f64) -> GradId {
        self.inner.request_gradient_scaled(worker, scale)
    }
    fn mean_gradient(&mut self, grads: &[GradId]) -> GradId {
        self.inner.mean_gradient(grads)
    }
    fn apply_gradient_block(&mut self, row: usize, grad: GradId, lr: f64, block: Range<usize>) {
        self.applied.push((row, block.clone()));
        self.inner.apply_gradient_block(row, grad, lr, block)
    }
    fn release_gradient(&mut self, grad: GradId) {
        self.inner.release_gradient(grad)
    }
    fn swap_optimizer_state(&mut self, a: usize, b: usize) {
        self.inner.swap_optimizer_state(a, b)
    }
    fn reset_optimizer_state(&mut self, row: usize) {
        self.inner.reset_optimizer_state(row)
    }
    fn average(&mut self, rows: &[usize]) {
        self.inner.average(rows)
    }
    fn mix(&mut self, dst: usize, terms: &[(Slot, f64)]) {
        self.inner.mix(dst, terms)
    }
    fn new_msg(&mut self, terms: &[(Slot, f64)]) -> MsgId {
        self.inner.new_msg(terms)
    }
    fn release_msg(&mut self, msg: MsgId) {
        self.inner.release_msg(msg)
    }
    fn copy_block(&mut self, dst: usize, src: usize, block: Range<usize>) {
        self.inner.copy_block(dst, src, block)
    }
    fn evaluate(&mut self) -> Evaluation {
        self.inner.evaluate()
    }
    fn evaluate_mix(&mut self, terms: &[(usize, f64)]) -> Evaluation {
        self.inner.evaluate_mix(terms)
    }
    fn take_train_loss(&mut self) -> f64 {
        self.inner.take_train_loss()
    }
    fn consensus_distance(&mut self, scales: Option<&[f64]>) -> f64 {
        self.inner.consensus_distance(scales)
    }
    fn suboptimality(&mut self, terms: Option<&[(usize, f64)]>) -> Option<f64> {
        self.inner.suboptimality(terms)
    }
}

/// LPP-SGD's partial steps keep their change to the running statistics (in the reference every
/// forward pass in training mode updates them, whatever block the step then updates): the
/// blocks split the trainable coordinates only, and every step of every process applies the
/// state. (Before, the blocks split the whole row, state included, so only the last process's
/// partial steps reached the statistics.)
#[test]
fn lpp_sgd_partial_steps_keep_the_running_statistics() {
    let (n, p, state) = (2, 2, 4);
    let c = LapSgdConfig {
        processes: p,
        h: 1000,
        pre_partial_epochs: 0,
        ..Default::default()
    };
    let mut store = WithState {
        inner: quadratic_store(n, SEED),
        state,
        applied: Vec::new(),
    };
    let (_, alg) = run_lap(
        &c,
        true,
        &cluster(n, &[]),
        &mut store,
        &stop_at(0.2),
        &mut |_, _, _| {},
    );
    let params = 16;
    let stats = params - state..params;
    let steps: u64 = (0..n)
        .flat_map(|i| (0..p).map(move |q| (i, q)))
        .map(|(i, q)| alg.process_steps(i, q))
        .sum();
    assert!(steps >= 8, "{steps} steps");
    // Every application to a node row: full steps (the whole row), partial steps (a block of
    // the trainable coordinates, then the state).
    let to_nodes: Vec<&Range<usize>> = store
        .applied
        .iter()
        .filter(|(row, _)| *row < n)
        .map(|(_, b)| b)
        .collect();
    let trainable_blocks: Vec<&&Range<usize>> = to_nodes
        .iter()
        .filter(|b| b.len() < params && b.start < stats.start)
        .collect();
    assert!(!trainable_blocks.is_empty(), "no partial step");
    for b in &trainable_blocks {
        assert!(
            b.end <= stats.start,
            "a partial block {b:?} reaches into the state"
        );
    }
    let touching_state = to_nodes
        .iter()
        .filter(|b| b.start <= stats.start && b.end >= stats.end)
        .count() as u64;
    assert_eq!(
        touching_state, steps,
        "every step applies the statistics' change"
    );
}
