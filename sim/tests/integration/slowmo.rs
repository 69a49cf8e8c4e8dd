//! SlowMo (Wang et al., ICLR 2020, Algorithm 1) on the exact reference store: the slow momentum
//! step recomputed from the rows at every outer step of a run, for every base, through a
//! schedule that changes the rate and reaches 0; every worker holds the anchor right after it;
//! with `β = 0` and `α = 1` it is its base with an exact average every `τ` iterations, bit for
//! bit (`local-sgd` with `h = τ`, `allreduce`); with `τ` beyond the run the SGP base is `sgp`;
//! each exact average is one model ring all-reduce; bad options and faults are refused or
//! handled as the module says.

use crate::common;

use common::*;
use dasim_sim::algorithms::slowmo::Base;
use dasim_sim::algorithms::{Slowmo, SlowmoConfig, run_algorithm};
use dasim_sim::fault::{FaultConfig, Faults};
use dasim_sim::prelude::*;
use dasim_sim::record::MessageRecord;

const SEED: u64 = 3;
const N: usize = 4;

fn slowmo(base: Base, tau: u32, beta: f64, alpha: f64) -> SlowmoConfig {
    SlowmoConfig {
        base,
        tau,
        slow_momentum: beta,
        slow_lr: alpha,
    }
}

/// Every message, and the evaluation points.
#[derive(Default)]
struct Seen {
    points: Vec<EvalPoint>,
    messages: Vec<MessageRecord>,
}

impl Observer for Seen {
    fn on_eval(&mut self, p: &EvalPoint) -> Result<(), String> {
        self.points.push(p.clone());
        Ok(())
    }
    fn on_message(&mut self, m: &MessageRecord) -> Result<(), String> {
        self.messages.push(*m);
        Ok(())
    }
}

/// What a run of SlowMo left: its outcome, what the observer saw, the store, and the payload
/// bytes of a model and the chunk bytes of its ring (with headers).
struct Run {
    outcome: Outcome,
    seen: Seen,
    store: Checked,
    model_msg: u64,
    chunk_msg: u64,
}

/// Runs SlowMo on `N` workers (worker 1 2× slower) on the exact store (shared, so the hook can
/// read it), calling `inspect` after every event.
fn run_slowmo(
    cfg: &SlowmoConfig,
    topology: TopologyConfig,
    opt: &OptimizerConfig,
    stop: &RunConfig,
    mut inspect: impl FnMut(&Slowmo, &World<'_>, SimTime, &ReferenceStore),
) -> Run {
    let mut store = Checked::new(quadratic_store(N, SEED));
    let shared = store.shared();
    let alg_cfg = AlgorithmConfig::from(AlgorithmKind::Slowmo(cfg.clone()));
    let mut seen = Seen::default();
    let (outcome, model_msg, chunk_msg) = {
        let mut world = world(
            &alg_cfg,
            &cluster(N, &[(1, 2.0)]),
            &net(1.0, 20.0),
            topology,
            &mut store,
            opt,
            SEED,
        );
        world.set_metrics(&MetricsConfig {
            log_messages: true,
            ..Default::default()
        });
        let header = world.net.header_bytes();
        let payload = world.net.payload_bytes(world.store.num_params());
        let model_msg = world.model_bytes + header;
        let chunk_msg = payload.div_ceil(N as u64) + header;
        let mut alg = Slowmo::new(cfg, &world);
        let outcome = run_inspect(
            &mut alg,
            &mut world,
            stop,
            &mut seen,
            &mut |a: &Slowmo, w: &World<'_>, t| inspect(a, w, t, &shared.borrow()),
        )
        .unwrap();
        (outcome, model_msg, chunk_msg)
    };
    Run {
        outcome,
        seen,
        store,
        model_msg,
        chunk_msg,
    }
}

fn close(a: &[f64], b: &[f64], what: &str) {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-9 * (1.0 + y.abs()),
            "{what}: coordinate {i}: {x} vs {y}"
        );
    }
}

/// The rows and weights the hook reads after an event.
#[derive(Clone)]
struct Snapshot {
    outer: u64,
    workers: Vec<Vec<f64>>,
    weights: Vec<f64>,
    anchor: Vec<f64>,
    momentum: Vec<f64>,
}

fn snapshot(a: &Slowmo, store: &ReferenceStore) -> Snapshot {
    Snapshot {
        outer: a.outer_steps(),
        workers: (0..N).map(|w| store.params(w).to_vec()).collect(),
        weights: a.weights().unwrap_or_else(|| vec![1.0; N]),
        anchor: store.params(a.anchor_row()).to_vec(),
        momentum: store.params(a.momentum_row()).to_vec(),
    }
}

/// A step schedule (the rate halves after 8 and 16 steps per worker) followed by nothing: the
/// rates of the outer steps change.
fn stepped_rate() -> OptimizerConfig {
    let mut opt = optimizer(0.05, 0.5);
    opt.schedule = LrSchedule {
        kind: ScheduleKind::Step,
        unit: ScheduleUnit::Steps,
        milestones: vec![8.0, 16.0],
        gamma: 0.5,
        ..Default::default()
    };
    opt
}

/// A cosine schedule to 0 at 30 steps per worker: the last outer steps of a 1.5 s run have no
/// rate.
fn cosine_to_zero() -> OptimizerConfig {
    let mut opt = optimizer(0.05, 0.5);
    opt.schedule = LrSchedule {
        kind: ScheduleKind::Cosine,
        unit: ScheduleUnit::Steps,
        total: Some(30.0),
        ..Default::default()
    };
    opt
}

/// The momentum of [`quadratic_store`]'s SGD (heavy ball, no weight decay, no Nesterov).
const INNER_MOMENTUM: f64 = 0.5;

/// Checks every outer step of a run of `cfg` against Algorithm 1, recomputed from the rows the
/// hook read before the event that took it; returns how many outer steps had a rate and how
/// many had none.
///
/// The exact average `M` is recomputed without the algorithm's mean row: for `"local-sgd"` and
/// `"sgp"`, the mean of the workers' (de-biased) rows before the event; for `"allreduce"`, whose
/// outer step comes in the same event as the round's last base step, the workers' rows before
/// it (all `x_{t,τ−1}`) minus that step, `γ·v`, with SGD's heavy-ball buffer
/// `v_k = μ·v_{k−1} + mean_i g_{i,k}` rebuilt from every gradient the workers computed.
fn check_every_outer_step(
    cfg: &SlowmoConfig,
    topology: TopologyConfig,
    opt: &OptimizerConfig,
) -> (u32, u32) {
    let (alpha, beta) = (cfg.slow_lr, cfg.slow_momentum);
    let tau = u64::from(cfg.tau);
    let allreduce = cfg.base == Base::Allreduce;
    let mut before: Option<Snapshot> = None;
    let mut uneven_weights = false;
    let mut rates = Vec::new();
    // Per outer step: the rows before and after its event, its rate and the mean row.
    let mut steps: Vec<(Snapshot, Snapshot, f64, Vec<f64>)> = Vec::new();
    let run = run_slowmo(cfg, topology, opt, &stop_at(1.5), |a, world, t, store| {
        let now = snapshot(a, store);
        uneven_weights |= now.weights.iter().any(|&w| w != 1.0);
        if let Some(b) = &before
            && now.outer == b.outer + 1
        {
            let gamma = a.last_rate();
            rates.push(gamma);
            if !allreduce {
                // The rate in force when the step is taken (no step was counted since).
                assert_eq!(gamma, world.lr_at(t), "γ of outer step {}", now.outer);
                // Every worker starts the next round from the outer iterate.
                for (w, x) in now.workers.iter().enumerate() {
                    assert_eq!(x, &now.anchor, "worker {w} after outer step {}", now.outer);
                }
                assert!(now.weights.iter().all(|&w| w == 1.0), "{:?}", now.weights);
            }
            let mean_row = store.params(a.mean_row()).to_vec();
            steps.push((b.clone(), now.clone(), gamma, mean_row));
        }
        if allreduce {
            // Once every worker has finished the iteration of an outer step, all hold its
            // outer iterate (until the next mean gradient is applied).
            let steps: Vec<u64> = (0..N).map(|w| world.worker_steps_of(w)).collect();
            if steps.iter().all(|&s| s == steps[0]) && steps[0] > 0 && steps[0].is_multiple_of(tau)
            {
                for (w, x) in now.workers.iter().enumerate() {
                    assert_eq!(x, &now.anchor, "worker {w} at step {}", steps[0]);
                }
            }
        }
        before = Some(now);
    });
    // `"allreduce"`: the base optimizer's buffer after every iteration, from the gradients.
    let mut buffers: Vec<Vec<f64>> = Vec::new();
    if allreduce {
        let iterations = (0..N).map(|w| run.store.grads[w].len()).min().unwrap();
        let mut v = vec![0.0; run.store.params(0).len()];
        for k in 0..iterations {
            for (j, vj) in v.iter_mut().enumerate() {
                let g = (0..N).map(|w| run.store.grads[w][k][j]).sum::<f64>() / N as f64;
                *vj = INNER_MOMENTUM * *vj + g;
            }
            buffers.push(v.clone());
        }
    }
    let (mut with_rate, mut without) = (0, 0);
    for (b, now, gamma, mean_row) in &steps {
        let gamma = *gamma;
        let dim = b.anchor.len();
        // The workers' (de-biased) mean before the event.
        let before_mean: Vec<f64> = (0..dim)
            .map(|j| (0..N).map(|i| b.workers[i][j] / b.weights[i]).sum::<f64>() / N as f64)
            .collect();
        let mean: Vec<f64> = if allreduce {
            // Plus the round's last base step, taken in this event.
            let last = (now.outer * tau - 1) as usize;
            let v = &buffers[last];
            (0..dim).map(|j| before_mean[j] - gamma * v[j]).collect()
        } else {
            before_mean
        };
        close(mean_row, &mean, "the exact average");
        let (u1, x1): (Vec<f64>, Vec<f64>) = if gamma > 0.0 {
            let u1: Vec<f64> = (0..dim)
                .map(|j| beta * b.momentum[j] + (b.anchor[j] - mean[j]) / gamma)
                .collect();
            let x1 = (0..dim)
                .map(|j| b.anchor[j] - alpha * gamma * u1[j])
                .collect();
            with_rate += 1;
            (u1, x1)
        } else {
            without += 1;
            (
                (0..dim).map(|j| beta * b.momentum[j]).collect(),
                mean.clone(),
            )
        };
        close(&now.momentum, &u1, "the slow momentum");
        close(&now.anchor, &x1, "the outer iterate");
    }
    if allreduce {
        // γ is the rate of the outer step's last iteration, read once with its mean gradient.
        for (k, gamma) in rates.iter().enumerate() {
            let last = (k + 1) * cfg.tau as usize * N - 1;
            assert_eq!(*gamma, run.store.rates[last], "γ of outer step {}", k + 1);
        }
    }
    if cfg.base == Base::Sgp {
        assert!(uneven_weights, "the push-sum weights never left 1");
    }
    assert!(run.outcome.stalled.is_none());
    (with_rate, without)
}

#[test]
fn every_outer_step_is_the_slow_momentum_update_recomputed_from_the_rows() {
    for (base, topology) in [
        (Base::LocalSgd, TopologyConfig::Ring {}),
        (Base::Sgp, TopologyConfig::Star {}),
        (Base::Allreduce, TopologyConfig::Ring {}),
    ] {
        let cfg = slowmo(base.clone(), 3, 0.6, 1.2);
        let (stepped, _) = check_every_outer_step(&cfg, topology.clone(), &stepped_rate());
        assert!(stepped >= 8, "{base:?}: {stepped} outer steps checked");
        // A rate that reaches 0: the limit rule.
        let (with_rate, without) = check_every_outer_step(&cfg, topology, &cosine_to_zero());
        assert!(
            with_rate >= 4 && without >= 2,
            "{base:?}: {with_rate} with a rate, {without} without"
        );
    }
}

/// Rows, bit for bit, and the evaluation points and outcome without the series.
fn assert_same_run(
    a: &Run,
    b_outcome: &Outcome,
    b_points: &[EvalPoint],
    b_store: &ReferenceStore,
    what: &str,
) {
    let s = a.store.inner.borrow();
    for w in 0..N {
        assert_eq!(s.params(w), b_store.params(w), "{what}: worker {w}");
    }
    assert_eq!(a.outcome.worker_steps, b_outcome.worker_steps, "{what}");
    assert_eq!(a.outcome.sim_time, b_outcome.sim_time, "{what}");
    assert_eq!(a.outcome.events, b_outcome.events, "{what}");
    assert_eq!(
        format!("{:?}", a.outcome.network),
        format!("{:?}", b_outcome.network),
        "{what}"
    );
    assert_eq!(
        format!("{:?}", a.outcome.final_eval),
        format!("{:?}", b_outcome.final_eval),
        "{what}"
    );
    assert_eq!(a.seen.points.len(), b_points.len(), "{what}");
    for (p, q) in a.seen.points.iter().zip(b_points) {
        assert_eq!(
            (
                p.time,
                p.worker_steps,
                format!("{:?}", p.eval),
                p.train_loss.to_bits(),
                p.consensus.to_bits()
            ),
            (
                q.time,
                q.worker_steps,
                format!("{:?}", q.eval),
                q.train_loss.to_bits(),
                q.consensus.to_bits()
            ),
            "{what}: evaluation point"
        );
    }
}

fn run_base(
    alg: &AlgorithmConfig,
    topology: TopologyConfig,
    stop: &RunConfig,
) -> (Outcome, Vec<EvalPoint>, ReferenceStore) {
    let mut store = quadratic_store(N, SEED);
    let (outcome, points) = {
        let opt = optimizer(0.05, 0.5);
        let mut world = world(
            alg,
            &cluster(N, &[(1, 2.0)]),
            &net(1.0, 20.0),
            topology,
            &mut store,
            &opt,
            SEED,
        );
        world.set_metrics(&MetricsConfig {
            log_messages: true,
            ..Default::default()
        });
        let mut points = Collect::default();
        let outcome = run_algorithm(alg, &mut world, stop, &mut points).unwrap();
        (outcome, points.0)
    };
    (outcome, points, store)
}

#[test]
fn with_no_slow_momentum_and_a_unit_slow_rate_it_is_local_sgd_with_h_tau() {
    let tau = 4;
    let run = run_slowmo(
        &slowmo(Base::LocalSgd, tau, 0.0, 1.0),
        TopologyConfig::Ring {},
        &optimizer(0.05, 0.5),
        &stop_at(1.0),
        |_, _, _, _| {},
    );
    let local = AlgorithmConfig::from(AlgorithmKind::LocalSgd(LocalSgdConfig {
        h: tau,
        warmup_steps: None,
    }));
    let (outcome, points, store) = run_base(&local, TopologyConfig::Ring {}, &stop_at(1.0));
    assert_same_run(&run, &outcome, &points, &store, "local-sgd");
    assert!(
        outcome.worker_steps >= 3 * u64::from(tau) * N as u64,
        "several rounds ran"
    );
}

#[test]
fn with_no_slow_momentum_and_a_unit_slow_rate_it_is_allreduce() {
    let run = run_slowmo(
        &slowmo(Base::Allreduce, 3, 0.0, 1.0),
        TopologyConfig::Ring {},
        &optimizer(0.05, 0.5),
        &stop_at(1.0),
        |_, _, _, _| {},
    );
    let ar = AlgorithmConfig::from(AlgorithmKind::AllReduce(AllReduceConfig::default()));
    let (outcome, points, store) = run_base(&ar, TopologyConfig::Ring {}, &stop_at(1.0));
    assert_same_run(&run, &outcome, &points, &store, "allreduce");
    assert!(outcome.worker_steps >= 9 * N as u64, "several outer steps");
}

#[test]
fn the_sgp_base_with_tau_beyond_the_run_is_sgp() {
    let run = run_slowmo(
        &slowmo(Base::Sgp, 1_000_000, 0.5, 1.0),
        TopologyConfig::Star {},
        &optimizer(0.05, 0.5),
        &stop_at(1.0),
        |a, _, _, _| assert_eq!(a.outer_steps(), 0),
    );
    let sgp = AlgorithmConfig::from(AlgorithmKind::Sgp(SgpConfig::default()));
    let (outcome, points, store) = run_base(&sgp, TopologyConfig::Star {}, &stop_at(1.0));
    assert_same_run(&run, &outcome, &points, &store, "sgp");
}

#[test]
fn each_exact_average_is_one_model_ring_all_reduce() {
    for (base, topology) in [
        (Base::LocalSgd, TopologyConfig::Ring {}),
        (Base::Sgp, TopologyConfig::Star {}),
    ] {
        let run = run_slowmo(
            &slowmo(base.clone(), 3, 0.5, 1.0),
            topology,
            &optimizer(0.05, 0.5),
            &stop_at(1.0),
            |_, _, _, _| {},
        );
        assert_ne!(run.chunk_msg, run.model_msg);
        let chunks = run
            .seen
            .messages
            .iter()
            .filter(|m| m.bytes == run.chunk_msg)
            .count();
        let gossip = run
            .seen
            .messages
            .iter()
            .filter(|m| m.bytes == run.model_msg)
            .count();
        assert_eq!(
            chunks + gossip,
            run.seen.messages.len(),
            "{base:?}: other sizes"
        );
        // Each ring: 2(n − 1) steps of one chunk from every worker to its successor.
        let per_ring = 2 * (N - 1) * N;
        assert_eq!(chunks % per_ring, 0, "{base:?}: {chunks} chunks");
        let rings = (chunks / per_ring) as u64;
        let last = run.seen.points.last().expect("evaluation points");
        let outer = last
            .series
            .iter()
            .find(|(name, _)| *name == "outer_steps")
            .expect("an outer_steps series")
            .1 as u64;
        assert!(
            rings == outer || rings == outer + 1,
            "{base:?}: {rings} rings, {outer} outer steps"
        );
        assert!(rings >= 5, "{base:?}: {rings} rings");
        for m in run
            .seen
            .messages
            .iter()
            .filter(|m| m.bytes == run.chunk_msg)
        {
            assert_eq!(m.dst, (m.src + 1) % N, "{base:?}: a chunk off the ring");
        }
        if base == Base::LocalSgd {
            assert_eq!(gossip, 0);
        } else {
            // The star's hub pushes to its 3 leaves and each leaf to the hub, every iteration.
            assert!(
                gossip >= 6 * 3 * rings as usize,
                "{base:?}: {gossip} gossip messages"
            );
        }
    }
}

fn entry(options: &str) -> AlgorithmConfig {
    toml::from_str(&format!("kind = \"slowmo\"\n{options}"))
        .unwrap_or_else(|e| panic!("{options}: {e}"))
}

#[test]
fn bad_options_are_refused_at_their_field_with_a_hint() {
    let topology = Topology::build(&TopologyConfig::Ring {}, N, &BuildEnv::new(SEED)).unwrap();
    for (options, field, says) in [
        ("tau = 0", "tau", "at least 1"),
        ("slow_momentum = 1.0", "slow_momentum", "[0, 1)"),
        ("slow_momentum = -0.1", "slow_momentum", "[0, 1)"),
        ("slow_lr = 0.0", "slow_lr", "positive"),
        ("slow_lr = -1.0", "slow_lr", "positive"),
        (
            "base = \"gossip\"",
            "base",
            "unknown base algorithm \"gossip\"",
        ),
    ] {
        let e = entry(options)
            .validate(&topology, "algorithms[0]", None)
            .err()
            .unwrap_or_else(|| panic!("{options} was accepted"));
        assert_eq!(
            e.path.to_string(),
            format!("algorithms[0].{field}"),
            "{options}"
        );
        assert!(e.message.contains(says), "{options}: {e}");
        assert!(e.hint.is_some(), "{options}: no hint");
    }
    // The defaults, and each base, are accepted; the options round-trip.
    for options in [
        "",
        "base = \"sgp\"",
        "base = \"allreduce\"\ntau = 1\nslow_momentum = 0.0",
    ] {
        let cfg = entry(options);
        cfg.validate(&topology, "algorithms[0]", None).unwrap();
        let again: AlgorithmConfig = toml::from_str(&toml::to_string(&cfg).unwrap()).unwrap();
        assert_eq!(again, cfg);
    }
    let AlgorithmKind::Slowmo(defaults) = entry("").algorithm else {
        unreachable!()
    };
    assert_eq!(defaults, slowmo(Base::LocalSgd, 48, 0.5, 1.0));
    // With the all-reduce base a node's own progress is refused, as all-reduce SGD's.
    let mut node = optimizer(0.05, 0.0);
    node.schedule.progress = ScheduleProgress::Node;
    let e = entry("base = \"allreduce\"")
        .check_optimizer(&node, "algorithms[0]")
        .unwrap_err();
    assert_eq!(e.path.to_string(), "optimizer.schedule.progress");
    entry("base = \"local-sgd\"")
        .check_optimizer(&node, "algorithms[0]")
        .unwrap();
}

/// 1 byte per ns, no latency, no header.
fn plain_net() -> NetworkConfig {
    let mut n = NetworkConfig::uniform(8.0, 0.0);
    n.header_bytes = 0;
    n
}

fn faults(text: &str) -> Vec<FaultConfig> {
    #[derive(serde::Deserialize)]
    struct Doc {
        faults: Vec<FaultConfig>,
    }
    toml::from_str::<Doc>(text).expect("valid faults").faults
}

/// Runs `alg` on 4 equal workers of `topology` with the faults of `text`.
fn faulty_run(alg: &AlgorithmConfig, topology: TopologyConfig, text: &str) -> Outcome {
    let mut store = quadratic_store(N, 11);
    let mut world = world(
        alg,
        &cluster(N, &[]),
        &plain_net(),
        topology,
        &mut store,
        &optimizer(0.05, 0.0),
        11,
    );
    world.set_faults(Faults::new(&faults(text), N, &BuildEnv::new(11)).unwrap());
    run_algorithm(alg, &mut world, &stop_at(1000.0), &mut Collect::default()).unwrap()
}

#[test]
fn a_crash_mid_round_stalls_the_run_at_the_exact_average_and_a_rejoin_is_refused() {
    // τ = 2: the exact average follows every second step (20 ms). Worker 2 crashes at 15 ms in
    // its second step; the others finish theirs and wait at the ring for good (as local SGD).
    let crash = "[[faults]]\nkind = \"crash\"\nworkers = [2]\nat_s = 0.015";
    let out = faulty_run(&entry("tau = 2"), TopologyConfig::Ring {}, crash);
    let stall = out.stalled.clone().expect("a stall");
    assert_eq!(stall.time, SimTime::from_millis_f64(20.0));
    assert_eq!(out.worker_steps, 7);
    for (line, w) in stall.waiting.iter().zip([0, 1, 3]) {
        assert_eq!(
            line,
            &format!(
                "worker {w} waits for all-reduce 0, which cannot complete: worker 2 crashed at \
                 0.015 s and never rejoins"
            )
        );
    }
    // With the SGP base the hub waits for the crashed leaf's share; the other leaves complete
    // their second iteration and wait at the ring.
    let out = faulty_run(
        &entry("tau = 2\nbase = \"sgp\""),
        TopologyConfig::Star {},
        crash,
    );
    let stall = out.stalled.clone().expect("a stall");
    assert!(
        stall.waiting.iter().any(|l| l.contains(
            "node 0 (iteration 1) waits for the push-sum message of iteration 1 from node 2 (down)"
        )),
        "{:?}",
        stall.waiting
    );
    for w in [1, 3] {
        assert!(
            stall.waiting.contains(&format!(
                "worker {w} waits for all-reduce 0, which cannot complete: worker 2 crashed at \
                 0.015 s and never rejoins"
            )),
            "{:?}",
            stall.waiting
        );
    }
    // A crash with a rejoin is refused, naming the fault; lost messages are accepted.
    let f = faults(
        "[[faults]]\nkind = \"loss\"\nprobability = 0.1\n\
         [[faults]]\nkind = \"crash\"\nworkers = [1]\nat_s = 1.0\nrejoin_after_s = 1.0",
    );
    for base in ["local-sgd", "sgp", "allreduce"] {
        let e = entry(&format!("base = \"{base}\""))
            .check_fault_support(&f, "algorithms[0]")
            .unwrap_err();
        assert_eq!(e.path.to_string(), "faults[1].kind", "{base}");
        assert!(e.message.contains("slowmo"), "{e}");
    }
}

#[test]
fn lost_gossip_is_pushsum_mass_that_the_exact_average_restores() {
    // Gossip messages of the star are lost with probability 0.3 over the first 60 ms; the first
    // exact average comes after τ = 8 iterations (80 ms), so no ring chunk is exposed.
    let cfg = slowmo(Base::Sgp, 8, 0.0, 1.0);
    let alg = AlgorithmConfig::from(AlgorithmKind::Slowmo(cfg.clone()));
    let mut store = quadratic_store(N, 11);
    let mut world = world(
        &alg,
        &cluster(N, &[]),
        &plain_net(),
        TopologyConfig::Star {},
        &mut store,
        &optimizer(0.05, 0.0),
        11,
    );
    let text = "[[faults]]\nkind = \"loss\"\nprobability = 0.3\nend_s = 0.06";
    world.set_faults(Faults::new(&faults(text), N, &BuildEnv::new(11)).unwrap());
    let mut slow = Slowmo::new(&cfg, &world);
    let (mut light, mut restored) = (false, 0);
    let mut last = 0;
    let out = run_inspect(
        &mut slow,
        &mut world,
        &stop_at(0.5),
        &mut Collect::default(),
        &mut |a: &Slowmo, _, _| {
            let w = a.weights().unwrap();
            light |= w.iter().sum::<f64>() < N as f64 - 1e-9;
            if a.outer_steps() > last {
                last = a.outer_steps();
                assert!(w.iter().all(|&x| x == 1.0), "{w:?}");
                restored += 1;
            }
        },
    )
    .unwrap();
    assert!(out.stalled.is_none(), "{:?}", out.stalled);
    assert!(light, "the weights never summed below n");
    assert!(out.faults.as_ref().unwrap().mass_lost.unwrap() > 0.0);
    assert!(restored >= 4, "{restored} outer steps");
}
