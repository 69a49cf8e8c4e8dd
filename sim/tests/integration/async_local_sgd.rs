//! Asynchronous Local-SGD (Liu, Douillard et al., 2024) on the exact reference store: every
//! outer update recomputed at every event (Delayed Nesterov's schedule included), one worker
//! with `η = 1`, `μ = 0` being plain local training step for step, DyLU's steps in proportion to
//! the workers' speeds, a server that never waits, model-sized messages, crashes and lost
//! messages, and bad options refused at their field.

use crate::common;

use common::*;
use dasim_sim::algorithms::async_local_sgd::{MomentumEvery, dylu_steps};
use dasim_sim::algorithms::{AsyncLocalSgd, AsyncLocalSgdConfig};
use dasim_sim::engine::run_inspect;
use dasim_sim::fault::{FaultConfig, Faults};
use dasim_sim::prelude::*;
use dasim_sim::record::MessageRecord;

const SEED: u64 = 7;

/// The evaluation points and the messages of a run.
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

fn faults(text: &str) -> Vec<FaultConfig> {
    #[derive(serde::Deserialize)]
    struct Doc {
        #[serde(default)]
        faults: Vec<FaultConfig>,
    }
    toml::from_str::<Doc>(text).expect("valid faults").faults
}

/// Workers of 10, 20, 30, … ms per step: worker `i` is an `(i + 1)×` straggler.
fn stragglers(n: usize) -> Vec<(usize, f64)> {
    (1..n).map(|i| (i, (i + 1) as f64)).collect()
}

/// Runs asynchronous Local-SGD on `n` workers (`slow` stragglers) for `seconds` on the exact
/// store (shared, so the hook can read it), with the faults of `fault_text`, calling
/// `inspect(alg, world, store, now)` after every event.
#[allow(clippy::too_many_arguments)]
fn run_async(
    cfg: &AsyncLocalSgdConfig,
    n: usize,
    slow: &[(usize, f64)],
    net_cfg: &NetworkConfig,
    seconds: f64,
    fault_text: &str,
    mut inspect: impl FnMut(&AsyncLocalSgd, &World<'_>, &ReferenceStore, SimTime),
) -> (Outcome, Seen, Checked) {
    let mut store = Checked::new(quadratic_store(n, SEED));
    let shared = store.shared();
    let entry = AlgorithmConfig::from(AlgorithmKind::AsyncLocalSgd(cfg.clone()));
    let opt = optimizer(0.05, 0.5);
    let mut seen = Seen::default();
    let outcome = {
        let mut world = world(
            &entry,
            &cluster(n, slow),
            net_cfg,
            TopologyConfig::Ring {},
            &mut store,
            &opt,
            SEED,
        );
        world.set_metrics(&MetricsConfig {
            log_messages: true,
            ..Default::default()
        });
        let fs = faults(fault_text);
        if !fs.is_empty() {
            entry.check_fault_support(&fs, "algorithms[0]").unwrap();
            world.set_faults(Faults::new(&fs, n, &BuildEnv::new(SEED)).unwrap());
        }
        let mut alg = AsyncLocalSgd::new(cfg, n);
        if world.faults().configured() {
            alg = alg.with_retransmit(PsConfig::default().retransmit(&world));
        }
        run_inspect(
            &mut alg,
            &mut world,
            &stop_at(seconds),
            &mut seen,
            &mut |a: &AsyncLocalSgd, w: &World<'_>, t| inspect(a, w, &shared.borrow(), t),
        )
        .unwrap()
    };
    (outcome, seen, store)
}

/// What the server holds after an event: updates so far, its model, momentum and DN buffer.
type Server = (u64, Vec<f64>, Vec<f64>, Vec<f64>);

/// Runs `cfg` on four workers (1×–4× stragglers) and checks every event against the outer
/// update recomputed from the rows before it: returns the updates checked, and of those the
/// momentum updates.
fn check_every_update(cfg: &AsyncLocalSgdConfig, n: usize) -> (u64, u64) {
    let (eta, mu) = (cfg.outer_lr, cfg.outer_momentum);
    let every = u64::from(cfg.momentum_every.of(n));
    let nf = every as f64;
    // The momentum activation c: between momentum updates c·μ·m, at one (1 − c·N + c)·μ·m
    // (HALoS's `DelayedNesterovOptimizer`, the paper's Algorithm 3).
    let c = cfg.momentum_activation;
    // Before each event: updates so far, the server's model, momentum and DN buffer.
    let mut before: Option<Server> = None;
    // The model each worker's round started from, the model the server last sent each worker,
    // and the rounds each worker had started.
    let mut start: Vec<Vec<f64>> = Vec::new();
    let mut sent: Vec<Option<Vec<f64>>> = vec![None; n];
    let mut rounds = vec![1u64; n];
    let (mut checked, mut momentum_updates) = (0, 0);
    let (outcome, seen, _) = run_async(
        cfg,
        n,
        &stragglers(n),
        &net(1.0, 20.0),
        3.0,
        "",
        |a, _, store, _| {
            let (g, m, d) = (a.global_row(), a.momentum_row(), a.buffer_row());
            if start.is_empty() {
                start = (0..n).map(|w| store.params(w).to_vec()).collect();
            }
            let now = (
                a.outer_steps(),
                store.params(g).to_vec(),
                store.params(m).to_vec(),
                store.params(d).to_vec(),
            );
            if let Some((t0, g0, m0, d0)) = &before {
                assert!(now.0 <= t0 + 1, "one update per event");
                assert_eq!(
                    a.outer_steps(),
                    a.pushes_received(),
                    "every push applied at once"
                );
                if now.0 == t0 + 1 {
                    let w = a.last_update().expect("an update names its worker");
                    assert!(!a.computing(w), "worker {w} waits for the reply");
                    let x = store.params(w);
                    let grad = axpy(&[(1.0, &start[w]), (-1.0, x)]);
                    let t = now.0;
                    let (g1, m1, d1) = if t.is_multiple_of(every) {
                        momentum_updates += 1;
                        let m1 = axpy(&[(mu, m0), (1.0 / nf, d0), (1.0 / nf, &grad)]);
                        let term = if cfg.nesterov { &m1 } else { m0 };
                        let share = 1.0 - c * nf + c;
                        let g1 = axpy(&[(1.0, g0), (-eta / nf, &grad), (-eta * mu * share, term)]);
                        (g1, m1, vec![0.0; d0.len()])
                    } else {
                        let g1 = axpy(&[(1.0, g0), (-eta / nf, &grad), (-eta * c * mu, m0)]);
                        (g1, m0.clone(), axpy(&[(1.0, d0), (1.0, &grad)]))
                    };
                    assert_close(&now.1, &g1, &format!("server model after update {t}"));
                    assert_close(&now.2, &m1, &format!("momentum after update {t}"));
                    assert_close(&now.3, &d1, &format!("DN buffer after update {t}"));
                    sent[w] = Some(now.1.clone());
                    checked += 1;
                } else {
                    assert_eq!(&now.1, g0, "the server's model moves only at an update");
                    assert_eq!(&now.2, m0);
                    assert_eq!(&now.3, d0);
                }
            }
            for w in 0..n {
                if a.rounds(w) != rounds[w] {
                    assert_eq!(a.rounds(w), rounds[w] + 1);
                    rounds[w] += 1;
                    // The round starts from the model the server sent.
                    let x = store.params(w).to_vec();
                    assert_eq!(
                        Some(&x),
                        sent[w].as_ref(),
                        "worker {w}, round {}",
                        rounds[w]
                    );
                    start[w] = x;
                }
            }
            before = Some(now);
        },
    );
    assert!(outcome.worker_steps > 0);
    // Evaluation points measure the server's model, which starts as the initial model.
    assert_eq!(seen.points[0].eval.loss, seen.points[1].eval.loss);
    let staleness = outcome.staleness.expect("staleness is measured");
    assert_eq!(staleness.count, checked);
    assert!(
        staleness.max >= 1,
        "gradients from older models were applied"
    );
    (checked, momentum_updates)
}

#[test]
fn every_outer_update_is_the_delayed_nesterov_step_recomputed_from_the_rows() {
    let cases = [
        (true, 1, 0.0),
        (false, 1, 0.0),
        (true, 4, 0.0),
        (false, 3, 0.0),
        (true, 4, 0.25),
        (false, 3, 0.2),
    ];
    for (nesterov, every, c) in cases {
        let cfg = AsyncLocalSgdConfig {
            inner_steps: 5,
            outer_lr: 0.25,
            outer_momentum: 0.5,
            nesterov,
            momentum_every: MomentumEvery::Count(every),
            momentum_activation: c,
            dynamic_local_steps: false,
            // The outer update is the same whatever the inner optimizer keeps.
            inner_reset: !nesterov,
        };
        let (checked, momentum) = check_every_update(&cfg, 4);
        assert!(checked >= 40, "{checked} updates checked");
        assert_eq!(momentum, checked / u64::from(every), "every {every}-th");
    }
    // With DyLU too (the steps differ, the update does not).
    let cfg = AsyncLocalSgdConfig {
        inner_steps: 8,
        momentum_every: MomentumEvery::Count(4),
        dynamic_local_steps: true,
        ..Default::default()
    };
    assert_eq!((cfg.outer_lr, cfg.outer_momentum), (0.7, 0.9));
    let (checked, _) = check_every_update(&cfg, 4);
    assert!(checked >= 40, "{checked} updates checked");
}

#[test]
fn delayed_nesterov_trains_where_nesterov_on_every_stale_gradient_diverges() {
    // The paper's finding (its Figure 4 and Section 4.1), on the noisy quadratic: four workers
    // of 1×–4× speed, DiLoCo's outer optimizer (η = 0.7, μ = 0.9).
    let final_loss = |every: u32| {
        let cfg = AsyncLocalSgdConfig {
            inner_steps: 5,
            momentum_every: MomentumEvery::Count(every),
            ..Default::default()
        };
        let (_, seen, _) = run_async(
            &cfg,
            4,
            &stragglers(4),
            &net(1.0, 20.0),
            3.0,
            "",
            |_, _, _, _| {},
        );
        eprintln!(
            "N = {every}: {:?}",
            seen.points.iter().map(|p| p.eval.loss).collect::<Vec<_>>()
        );
        (
            seen.points[0].eval.loss,
            seen.points.last().unwrap().eval.loss,
        )
    };
    let (start, plain) = final_loss(1);
    let (_, delayed) = final_loss(4);
    assert!(
        plain > 1e3 * start,
        "plain Nesterov diverges: {start} -> {plain}"
    );
    assert!(
        delayed < start,
        "Delayed Nesterov trains: {start} -> {delayed}"
    );
}

/// Rounds of 4 steps whose outer update applies each outer gradient whole: the server's model
/// is the pushing worker's.
fn unit_outer_update() -> AsyncLocalSgdConfig {
    AsyncLocalSgdConfig {
        inner_steps: 4,
        outer_lr: 1.0,
        outer_momentum: 0.0,
        // Every outer gradient whole (the default N is the number of workers, 2 here).
        momentum_every: MomentumEvery::Count(1),
        ..Default::default()
    }
}

#[test]
fn one_worker_with_unit_outer_rate_and_no_momentum_is_plain_local_training() {
    let cfg = unit_outer_update();
    // The cluster has two workers at least: the second takes 100 s a step, so within the run
    // it never pushes, and the server's model moves with worker 0's pushes alone.
    let (outcome, _, store) = run_async(
        &cfg,
        2,
        &[(1, 1e4)],
        &net(1.0, 20.0),
        1.0,
        "",
        |a, _, _, _| {
            assert_eq!(a.rounds(1), 1);
        },
    );
    // Plain local training: the optimizer's steps on one replica, one after the other.
    let steps = store.reads[0].len();
    assert!(steps >= 60, "{steps} steps");
    assert!(
        steps - outcome.worker_steps as usize <= 1,
        "at most one step in flight"
    );
    let mut plain = quadratic_store(1, SEED);
    for k in 0..steps {
        assert_eq!(
            store.reads[0][k],
            plain.params(0),
            "step {k}: the gradient is not read at plain SGD's point"
        );
        let g = plain.request_gradient(0);
        assert_eq!(store.grads[0][k], plain.gradient(g), "step {k}");
        plain.apply_gradient(0, g, 0.05);
        plain.release_gradient(g);
    }
}

#[test]
fn dylu_gives_each_worker_steps_in_proportion_to_its_speed() {
    let n = 4;
    let h = 12;
    for dynamic in [true, false] {
        let cfg = AsyncLocalSgdConfig {
            inner_steps: h,
            dynamic_local_steps: dynamic,
            ..Default::default()
        };
        let mut rounds = vec![1u64; n];
        let mut checked = 0;
        let (outcome, _, _) = run_async(
            &cfg,
            n,
            &stragglers(n),
            &net(1.0, 20.0),
            4.0,
            "",
            |a, _, _, _| {
                for (w, r) in rounds.iter_mut().enumerate() {
                    if a.rounds(w) != *r {
                        *r = a.rounds(w);
                        // Worker 0, the fastest, reports first: from then on H_w = ⌊H / (w + 1)⌋.
                        let expect = if dynamic { h / (w as u32 + 1) } else { h };
                        assert_eq!(a.assigned(w), expect, "worker {w}, round {r}");
                        checked += 1;
                    }
                }
            },
        );
        assert!(checked >= 4 * 8, "{checked} rounds");
        // Every round takes about H steps of the fastest worker's time, so the steps each
        // worker took are in proportion to its speed (within one round of the fastest).
        let steps = &outcome.record.usage;
        let s0 = steps[0].steps as f64;
        for (w, u) in steps.iter().enumerate() {
            let speed = 1.0 / (w + 1) as f64;
            if dynamic {
                assert!(
                    (u.steps as f64 - s0 * speed).abs() <= f64::from(h),
                    "worker {w}: {} steps, the fastest {s0}",
                    u.steps
                );
            }
        }
    }
    // The rule itself, in integers: speeds as (steps, busy ns).
    assert_eq!(dylu_steps(12, (12, 120), (12, 120)), 12);
    assert_eq!(dylu_steps(12, (6, 120), (12, 120)), 6);
    assert_eq!(dylu_steps(12, (3, 120), (12, 120)), 3);
    assert_eq!(
        dylu_steps(12, (1, 1_000_000), (12, 120)),
        1,
        "at least one step"
    );
    assert_eq!(dylu_steps(10, (10, 301), (10, 100)), 3, "⌊10 · 100/301⌋");
}

#[test]
fn the_server_never_waits_and_messages_are_model_sized() {
    // Eight workers on a slow network: pushes queue at the server's NIC.
    let n = 8;
    let cfg = AsyncLocalSgdConfig {
        inner_steps: 2,
        ..Default::default()
    };
    let slow = net(0.001, 50.0);
    let mut model = 0;
    let (outcome, seen, _) = run_async(&cfg, n, &[(3, 4.0)], &slow, 2.0, "", |a, w, _, _| {
        model = w.model_bytes + w.net.header_bytes();
        for v in 0..n {
            assert_ne!(
                w.recorder().activity(v),
                Activity::Blocked,
                "worker {v} waits for a peer"
            );
        }
        assert_eq!(a.outer_steps(), a.pushes_received());
    });
    assert!(
        seen.messages.iter().all(|m| m.bytes == model),
        "one model each"
    );
    // Every push is answered at the instant it lands, in the order they land.
    let mut pushes: Vec<(SimTime, usize)> = seen
        .messages
        .iter()
        .filter(|m| m.dst == n && m.arrive <= outcome.sim_time)
        .map(|m| (m.arrive, m.src))
        .collect();
    let mut replies: Vec<(SimTime, usize)> = seen
        .messages
        .iter()
        .filter(|m| m.src == n)
        .map(|m| (m.send, m.dst))
        .collect();
    pushes.sort();
    replies.sort();
    assert!(pushes.len() >= 20, "{} pushes", pushes.len());
    assert_eq!(pushes, replies);
    assert!(
        pushes
            .windows(2)
            .any(|p| p[1].0 < p[0].0 + SimTime::from_millis_f64(1.0)),
        "pushes queued at the server"
    );
    for (w, u) in outcome.record.usage.iter().enumerate() {
        assert_eq!(u.get(Activity::Blocked), SimTime::ZERO, "worker {w}");
    }
}

#[test]
fn a_crashed_worker_is_left_behind_and_the_server_goes_on() {
    let n = 4;
    let cfg = AsyncLocalSgdConfig {
        inner_steps: 4,
        dynamic_local_steps: true,
        ..Default::default()
    };
    // Worker 0, the fastest, crashes for good at 0.5 s; worker 3 crashes at 0.5 s and rejoins at
    // 1.0 s.
    let text = "[[faults]]\nkind = \"crash\"\nworkers = [0]\nat_s = 0.5\n\n\
                [[faults]]\nkind = \"crash\"\nworkers = [3]\nat_s = 0.5\nrejoin_after_s = 0.5\n";
    let mut trace: Vec<(f64, u64, [u64; 4], [u32; 4])> = Vec::new();
    let (outcome, _, _) = run_async(
        &cfg,
        n,
        &stragglers(n),
        &net(1.0, 20.0),
        2.0,
        text,
        |a, w, _, t| {
            let steps = [0, 1, 2, 3].map(|v| w.worker_steps_of(v));
            let assigned = [0, 1, 2, 3].map(|v| a.assigned(v));
            trace.push((t.as_secs_f64(), a.outer_steps(), steps, assigned));
        },
    );
    assert!(outcome.stalled.is_none(), "the others go on");
    let counts = &outcome.faults.as_ref().unwrap().counts;
    let abandoned = counts.iter().find(|c| c.0 == "rounds_abandoned").unwrap().1;
    assert!((1..=2).contains(&abandoned), "{counts:?}");
    let at = |s: f64| *trace.iter().rev().find(|p| p.0 <= s).unwrap();
    let (crash, down, end) = (at(0.5), at(0.99), at(2.0));
    assert_eq!(
        end.2[0], crash.2[0],
        "worker 0 took no step after its crash"
    );
    assert_eq!(down.2[3], crash.2[3], "worker 3 took no step while down");
    assert!(
        end.2[3] > down.2[3],
        "worker 3 steps again after its rejoin"
    );
    assert!(end.1 > crash.1 + 20, "the server kept updating");
    // Worker 0 is down: the fastest worker up is worker 1, and DyLU follows it.
    assert_eq!(crash.3[1], 2, "before: half of worker 0's speed");
    assert_eq!(end.3[1], 4, "worker 1 is now the fastest: the full H");
    assert_eq!(end.3[3], 2, "worker 3 at half of worker 1's speed");
}

#[test]
fn lost_messages_are_posted_again_and_the_run_goes_on() {
    let n = 4;
    let cfg = AsyncLocalSgdConfig {
        inner_steps: 3,
        ..Default::default()
    };
    let text = "[[faults]]\nkind = \"loss\"\nprobability = 0.1\n";
    let (outcome, _, _) = run_async(
        &cfg,
        n,
        &stragglers(n),
        &net(1.0, 20.0),
        2.0,
        text,
        |a, _, _, _| {
            assert_eq!(a.outer_steps(), a.pushes_received());
        },
    );
    assert!(outcome.stalled.is_none());
    let report = outcome.faults.as_ref().unwrap();
    let retransmissions = report
        .counts
        .iter()
        .find(|c| c.0 == "retransmissions")
        .unwrap()
        .1;
    assert!(
        retransmissions > 0 && retransmissions <= report.stats.lost,
        "{report:?}"
    );
    for u in &outcome.record.usage {
        assert!(u.steps > 20, "every worker kept training");
    }
}

#[test]
fn delayed_nesterov_waits_for_as_many_gradients_as_workers_by_default() {
    // The paper's Delayed Nesterov: N is the number of workers unless a count is given, and the
    // resolved scenario writes the default out as the word.
    let cfg = AsyncLocalSgdConfig::default();
    assert_eq!(cfg.momentum_every, MomentumEvery::Workers);
    assert_eq!(cfg.delayed_nesterov(6).every, 6);
    assert_eq!(cfg.delayed_nesterov(6).activation, 0.0);
    let written = toml::to_string(&cfg).unwrap();
    assert!(
        written.contains("momentum_every = \"workers\""),
        "{written}"
    );
    let back: AsyncLocalSgdConfig = toml::from_str(&written).unwrap();
    assert_eq!(back, cfg);
    let three: AsyncLocalSgdConfig = toml::from_str("momentum_every = 3").unwrap();
    assert_eq!(three.delayed_nesterov(6).every, 3);
    // On four workers by default: a momentum update on every fourth outer gradient.
    let cfg = AsyncLocalSgdConfig {
        inner_steps: 5,
        ..Default::default()
    };
    let (checked, momentum) = check_every_update(&cfg, 4);
    assert!(checked >= 40, "{checked} updates checked");
    assert_eq!(momentum, checked / 4);
}

#[test]
fn bad_options_are_refused_at_their_field_with_a_hint() {
    let topology = Topology::build(&TopologyConfig::Ring {}, 4, &BuildEnv::new(1)).unwrap();
    for (options, field) in [
        ("inner_steps = 0", "inner_steps"),
        ("momentum_every = 0", "momentum_every"),
        ("outer_momentum = 1.0", "outer_momentum"),
        ("outer_momentum = -0.1", "outer_momentum"),
        ("outer_lr = 0.0", "outer_lr"),
        ("outer_lr = -0.5", "outer_lr"),
        // c ≤ 1/N, with N the four workers by default, or the given N.
        ("momentum_activation = 0.3", "momentum_activation"),
        (
            "momentum_every = 2\nmomentum_activation = 0.6",
            "momentum_activation",
        ),
        ("momentum_activation = -0.1", "momentum_activation"),
    ] {
        let entry: AlgorithmConfig =
            toml::from_str(&format!("kind = \"async-local-sgd\"\n{options}"))
                .unwrap_or_else(|e| panic!("{options}: {e}"));
        let err = entry
            .validate(&topology, "algorithms[0]", None)
            .expect_err(options);
        assert_eq!(
            err.path.to_string(),
            format!("algorithms[0].{field}"),
            "{options}"
        );
        assert!(err.hint.is_some(), "{options}: {err}");
    }
    // Every option has a default, and the defaults are accepted.
    let entry: AlgorithmConfig = toml::from_str("kind = \"async-local-sgd\"").unwrap();
    entry.validate(&topology, "algorithms[0]", None).unwrap();
    // c = 1/N is the largest accepted.
    let entry: AlgorithmConfig =
        toml::from_str("kind = \"async-local-sgd\"\nmomentum_activation = 0.25").unwrap();
    entry.validate(&topology, "algorithms[0]", None).unwrap();
    // A word other than "workers" is refused when the scenario is read, naming both forms.
    let err =
        toml::from_str::<AlgorithmConfig>("kind = \"async-local-sgd\"\nmomentum_every = \"all\"")
            .expect_err("an unknown word");
    assert!(err.to_string().contains("\"workers\""), "{err}");
    assert_eq!(entry.extra_nodes(), 1, "the server's node");
}

#[test]
fn with_inner_reset_each_round_starts_a_fresh_inner_optimizer() {
    let cfg = AsyncLocalSgdConfig {
        inner_reset: true,
        ..unit_outer_update()
    };
    // As `one_worker_with_unit_outer_rate_and_no_momentum_is_plain_local_training`, whose
    // optimizer (momentum 0.5) keeps its state across rounds: here it starts afresh every
    // `inner_steps` steps.
    let (_, _, store) = run_async(
        &cfg,
        2,
        &[(1, 1e4)],
        &net(1.0, 20.0),
        1.0,
        "",
        |_, _, _, _| {},
    );
    let steps = store.reads[0].len();
    assert!(steps >= 60, "{steps} steps");
    let mut fresh = quadratic_store(1, SEED);
    for k in 0..steps {
        if k > 0 && k % 4 == 0 {
            fresh.reset_optimizer_state(0);
        }
        assert_eq!(store.reads[0][k], fresh.params(0), "step {k}");
        let g = fresh.request_gradient(0);
        fresh.apply_gradient(0, g, 0.05);
        fresh.release_gradient(g);
    }
}
