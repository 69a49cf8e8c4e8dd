//! FedAsync (Xie et al., 2019) and FedBuff (Nguyen et al., 2022) on the exact reference store:
//! every server update recomputed from the rows before it (the staleness weight of the round's
//! own staleness, FedBuff's buffer and its step on every K-th delta), at most C clients training
//! under `concurrency`, FedAsync's regularizer, and bad options refused at their field.

use crate::common;

use common::*;
use dasim_sim::algorithms::async_local_sgd::ServerRule;
use dasim_sim::algorithms::fed::StalenessFn;
use dasim_sim::algorithms::{AsyncLocalSgd, FedAsyncConfig, FedAvgConfig, FedBuffConfig, PsConfig};
use dasim_sim::engine::run_inspect;
use dasim_sim::fault::{FaultConfig, Faults};
use dasim_sim::prelude::*;

const SEED: u64 = 11;

/// Workers of 10, 20, 30, … ms per step.
fn stragglers(n: usize) -> Vec<(usize, f64)> {
    (1..n).map(|i| (i, (i + 1) as f64)).collect()
}

/// Runs `rule` on `n` workers (1×…n× stragglers) for `seconds` of plain SGD at rate 0.05 on the
/// exact store, calling `inspect(alg, store)` after every event.
fn run_fed(
    rule: ServerRule,
    n: usize,
    seconds: f64,
    inspect: impl FnMut(&AsyncLocalSgd, &ReferenceStore),
) -> Outcome {
    run_fed_with_faults(rule, n, seconds, "", inspect)
}

/// [`run_fed`] with the `[[faults]]` of `fault_text`.
fn run_fed_with_faults(
    rule: ServerRule,
    n: usize,
    seconds: f64,
    fault_text: &str,
    mut inspect: impl FnMut(&AsyncLocalSgd, &ReferenceStore),
) -> Outcome {
    let mut store = Checked::new(quadratic_store(n, SEED));
    let shared = store.shared();
    let kind = match &rule {
        ServerRule::FedAsync(c) => AlgorithmKind::FedAsync(c.clone()),
        ServerRule::FedBuff(c) => AlgorithmKind::FedBuff(c.clone()),
        ServerRule::FedAvg(c) => AlgorithmKind::FedAvg(c.clone()),
        ServerRule::AsyncLocalSgd(c) => AlgorithmKind::AsyncLocalSgd(c.clone()),
    };
    let entry = AlgorithmConfig::from(kind);
    let opt = optimizer(0.05, 0.0);
    let mut world = world(
        &entry,
        &cluster(n, &stragglers(n)),
        &net(1.0, 20.0),
        TopologyConfig::Ring {},
        &mut store,
        &opt,
        SEED,
    );
    #[derive(serde::Deserialize)]
    struct Doc {
        #[serde(default)]
        faults: Vec<FaultConfig>,
    }
    let fs = toml::from_str::<Doc>(fault_text)
        .expect("valid faults")
        .faults;
    let mut alg = AsyncLocalSgd::with_rule(rule, n, SEED);
    if !fs.is_empty() {
        entry.check_fault_support(&fs, "algorithms[0]").unwrap();
        world.set_faults(Faults::new(&fs, n, &BuildEnv::new(SEED)).unwrap());
        alg = alg.with_retransmit(PsConfig::default().retransmit(&world));
    }
    run_inspect(
        &mut alg,
        &mut world,
        &stop_at(seconds),
        &mut Collect::default(),
        &mut |a: &AsyncLocalSgd, _: &World<'_>, _| inspect(a, &shared.borrow()),
    )
    .unwrap()
}

/// What the test follows of each client: the model its round started from, as it began.
struct Rounds {
    rounds: Vec<u64>,
    start: Vec<Vec<f64>>,
}

impl Rounds {
    fn new(n: usize) -> Self {
        Rounds {
            rounds: vec![0; n],
            start: vec![Vec::new(); n],
        }
    }

    /// Notes every client that began a round since the last event.
    fn follow(&mut self, a: &AsyncLocalSgd, store: &ReferenceStore) {
        for w in 0..self.rounds.len() {
            if a.rounds(w) != self.rounds[w] {
                assert_eq!(a.rounds(w), self.rounds[w] + 1, "one round at a time");
                self.rounds[w] += 1;
                self.start[w] = store.params(w).to_vec();
            }
        }
    }
}

/// Every FedAsync update is `x ← (1 − α_t)·x + α_t·x_i` with `α_t = α·s(τ)`, `τ` the server's
/// updates since the client's download, for each of the paper's staleness functions; updates
/// are stale (τ ≥ 1 for some), so the weights are exercised.
#[test]
fn every_fedasync_update_is_the_staleness_weighted_mix() {
    for (f, a, b) in [
        (StalenessFn::Constant, 0.5, 4),
        (StalenessFn::Polynomial, 0.5, 4),
        (StalenessFn::Hinge, 10.0, 1),
    ] {
        let cfg = FedAsyncConfig {
            local_steps: 3,
            alpha: 0.8,
            staleness: f,
            staleness_a: a,
            staleness_b: b,
            ..Default::default()
        };
        let staleness = cfg.staleness();
        let n = 4;
        let mut before: Option<(u64, Vec<f64>)> = None;
        let (mut checked, mut stale) = (0, 0);
        let outcome = run_fed(ServerRule::FedAsync(cfg.clone()), n, 2.0, |a, store| {
            let g = store.params(a.global_row()).to_vec();
            if let Some((t0, g0)) = &before {
                assert!(a.outer_steps() <= t0 + 1, "one update per event");
                if a.outer_steps() == t0 + 1 {
                    let w = a.last_update().expect("an update names its client");
                    let tau = t0 - a.round_base(w);
                    stale += u64::from(tau > 0);
                    let alpha = cfg.alpha * staleness.weight(tau);
                    let want = axpy(&[(1.0 - alpha, g0), (alpha, store.params(w))]);
                    assert_close(&g, &want, &format!("{staleness:?}: update {}", t0 + 1));
                    checked += 1;
                } else {
                    assert_eq!(&g, g0, "the server's model moves only at an update");
                }
            }
            before = Some((a.outer_steps(), g));
        });
        assert!(checked > 20, "{staleness:?}: {checked} updates");
        assert!(stale > 0, "{staleness:?}: no stale update");
        assert_eq!(outcome.staleness.expect("measured").count, checked);
    }
}

/// FedBuff adds `s(τ)·(x_start − x_i)` to its buffer at every push and steps
/// `x ← x − η_g·Δ̄/K` on every K-th, emptying the buffer; between steps its model does not move.
/// `τ` counts the server's steps, not the pushes.
#[test]
fn fedbuff_steps_on_every_kth_buffered_delta_and_only_then() {
    let cfg = FedBuffConfig {
        local_steps: 2,
        buffer_size: 3,
        server_lr: 0.7,
        ..Default::default()
    };
    let n = 4;
    let k = f64::from(cfg.buffer_size);
    let mut rounds = Rounds::new(n);
    let mut before: Option<(u64, Vec<f64>)> = None;
    let mut buffer: Option<Vec<f64>> = None;
    let (mut pushes, mut steps, mut stale) = (0, 0, 0);
    let outcome = run_fed(ServerRule::FedBuff(cfg.clone()), n, 2.0, |a, store| {
        let g = store.params(a.global_row()).to_vec();
        let buf = buffer.get_or_insert_with(|| vec![0.0; g.len()]);
        if let Some((p0, g0)) = &before
            && a.pushes_received() == p0 + 1
        {
            let w = a.last_update().expect("a push names its client");
            let tau = steps - a.round_base(w);
            stale += u64::from(tau > 0);
            let s = cfg.staleness().weight(tau);
            *buf = axpy(&[(1.0, buf), (s, &rounds.start[w]), (-s, store.params(w))]);
            pushes += 1;
            if pushes % cfg.buffer_size == 0 {
                let want = axpy(&[(1.0, g0), (-cfg.server_lr / k, buf)]);
                assert_close(&g, &want, &format!("the step after push {pushes}"));
                buf.fill(0.0);
                steps += 1;
            } else {
                assert_eq!(&g, g0, "no step before the buffer is full (push {pushes})");
            }
            assert_close(store.params(a.buffer_row()), buf, "the buffer");
            assert_eq!(a.buffered(), pushes % cfg.buffer_size);
            assert_eq!(a.outer_steps(), steps);
        }
        rounds.follow(a, store);
        before = Some((a.pushes_received(), g));
    });
    assert!(steps > 5, "{steps} server steps");
    assert!(stale > 0, "no delta was stale");
    assert_eq!(
        outcome.staleness.expect("measured").count,
        u64::from(pushes)
    );
}

/// Under `concurrency = C` at most C clients train at once, exactly C once the first pushes
/// are answered (one pushing waits only for its reply), the rest are idle, and the draws reach
/// every client over the run.
#[test]
fn concurrency_keeps_c_clients_training_and_draws_them_all() {
    let n = 6;
    for rule in [
        ServerRule::FedAsync(FedAsyncConfig {
            local_steps: 2,
            concurrency: Some(2),
            ..Default::default()
        }),
        ServerRule::FedBuff(FedBuffConfig {
            local_steps: 2,
            buffer_size: 2,
            concurrency: Some(2),
            ..Default::default()
        }),
    ] {
        let mut most = 0;
        let outcome = run_fed(rule.clone(), n, 2.0, |a, _| {
            let training = (0..n).filter(|&w| a.computing(w)).count();
            let idle = (0..n).filter(|&w| a.is_idle(w)).count();
            most = most.max(training);
            assert!(training <= 2, "{training} clients training");
            assert!(
                training + idle <= n && idle >= n - 2,
                "{idle} idle, {training} training"
            );
        });
        assert_eq!(most, 2);
        assert!(outcome.worker_steps > 50);
        let mut rounds = vec![0; n];
        run_fed(rule, n, 2.0, |a, _| {
            for (w, r) in rounds.iter_mut().enumerate() {
                *r = a.rounds(w);
            }
        });
        assert!(
            rounds.iter().all(|&r| r > 0),
            "rounds per client: {rounds:?}"
        );
    }
}

/// FedAsync's regularizer `ρ/2·‖x − x_start‖²` pulls a client towards the model it downloaded:
/// with `ρ` the client's models stay closer to their start than without.
#[test]
fn fedasync_regularizer_keeps_clients_near_their_download() {
    let drift = |rho: f64| {
        let cfg = FedAsyncConfig {
            local_steps: 20,
            rho,
            ..Default::default()
        };
        let mut rounds = Rounds::new(2);
        let mut most: f64 = 0.0;
        run_fed(ServerRule::FedAsync(cfg), 2, 1.0, |a, store| {
            rounds.follow(a, store);
            for w in 0..2 {
                if a.computing(w) && !rounds.start[w].is_empty() {
                    most = most.max(rel_diff(store.params(w), &rounds.start[w]));
                }
            }
        });
        most
    };
    let (free, held) = (drift(0.0), drift(5.0));
    assert!(
        held < 0.9 * free,
        "drift {held} with ρ = 5 against {free} without"
    );
}

/// A crashed client's round is lost and the server goes on with the others; a client that
/// rejoins asks for the model and trains again; a lost message is posted again.
#[test]
fn a_crashed_client_is_left_behind_and_the_server_goes_on() {
    let text = "[[faults]]\nkind = \"crash\"\nworkers = [0]\nat_s = 0.5\n\n\
                [[faults]]\nkind = \"crash\"\nworkers = [3]\nat_s = 0.5\nrejoin_after_s = 0.5\n\n\
                [[faults]]\nkind = \"loss\"\nprobability = 0.05\nstart_s = 0.0\nend_s = 2.0\n";
    for rule in [
        ServerRule::FedAsync(FedAsyncConfig {
            local_steps: 4,
            ..Default::default()
        }),
        ServerRule::FedBuff(FedBuffConfig {
            local_steps: 4,
            buffer_size: 2,
            ..Default::default()
        }),
    ] {
        let mut trace: Vec<(u64, [u64; 4])> = Vec::new();
        let outcome = run_fed_with_faults(rule, 4, 2.0, text, |a, _| {
            trace.push((a.pushes_received(), [0, 1, 2, 3].map(|v| a.rounds(v))));
        });
        assert!(outcome.stalled.is_none(), "the others go on");
        let counts = &outcome.faults.as_ref().unwrap().counts;
        let count = |k: &str| counts.iter().find(|c| c.0 == k).map_or(0, |c| c.1);
        assert!(count("rounds_abandoned") >= 1, "{counts:?}");
        assert!(count("retransmissions") >= 1, "{counts:?}");
        let (end_pushes, end_rounds) = *trace.last().unwrap();
        let mid = trace[trace.len() / 4];
        assert!(end_pushes > mid.0 + 20, "the server kept taking pushes");
        assert!(
            end_rounds[3] > mid.1[3],
            "client 3 trains again after its rejoin"
        );
        assert!(end_rounds[1] > mid.1[1] + 5, "client 1 never stopped");
    }
}

/// FedAvg keeps the pushes of the open round only: each round closes at its K-th kept push
/// (or, with a deadline, at the deadline) with `x ← x − η_g·Σ(x_start − x_i)/k` over the `k`
/// kept; a push of a round already closed is late and changes nothing.
fn check_fedavg_rounds(cfg: FedAvgConfig, n: usize) -> (u64, u64, u64) {
    let mut rounds = Rounds::new(n);
    let mut before: Option<(u64, u64, Vec<f64>)> = None;
    let mut kept: Vec<Vec<f64>> = Vec::new();
    let mut closes_at_quorum = 0;
    let quorum = cfg
        .quorum
        .unwrap_or(cfg.clients_per_round.unwrap_or(n as u32)) as usize;
    let outcome = run_fed(ServerRule::FedAvg(cfg.clone()), n, 3.0, |a, store| {
        let g = store.params(a.global_row()).to_vec();
        if let Some((t0, p0, g0)) = &before {
            if a.pushes_received() == p0 + 1 {
                let w = a.last_update().expect("a push names its client");
                // Kept when it is of the open round: its delta from the model it started from.
                if a.round_base(w) == *t0 {
                    kept.push(axpy(&[(1.0, &rounds.start[w]), (-1.0, store.params(w))]));
                }
            }
            if a.outer_steps() == t0 + 1 {
                let k = kept.len();
                let want = if k == 0 {
                    g0.clone()
                } else {
                    let sum = kept.iter().fold(vec![0.0; g0.len()], |acc, d| add(&acc, d));
                    axpy(&[(1.0, g0), (-cfg.server_lr / k as f64, &sum)])
                };
                assert_close(
                    &g,
                    &want,
                    &format!("round {} closed with {k} pushes", t0 + 1),
                );
                closes_at_quorum += u64::from(k == quorum);
                kept.clear();
            } else {
                assert_eq!(a.outer_steps(), *t0, "one round closes at a time");
                assert_eq!(&g, g0, "the model moves only when a round closes");
            }
        }
        rounds.follow(a, store);
        before = Some((a.outer_steps(), a.pushes_received(), g));
    });
    assert!(outcome.stalled.is_none());
    let fed = before.unwrap();
    (fed.0, closes_at_quorum, outcome.worker_steps)
}

#[test]
fn fedavg_rounds_close_at_their_quorum_with_the_mean_of_the_kept_deltas() {
    // Every client, every round: the slowest (4×) sets the pace.
    let all = FedAvgConfig {
        local_steps: 2,
        server_lr: 0.8,
        ..Default::default()
    };
    let (rounds_all, at_quorum, steps_all) = check_fedavg_rounds(all, 4);
    assert!(rounds_all > 5);
    assert_eq!(at_quorum, rounds_all, "every round waits for all four");
    // Over-selection: 3 of 4 drawn, the first 2 kept; the rounds come faster.
    let over = FedAvgConfig {
        local_steps: 2,
        clients_per_round: Some(3),
        quorum: Some(2),
        ..Default::default()
    };
    let (rounds_over, at_quorum, _) = check_fedavg_rounds(over, 4);
    assert!(
        rounds_over > rounds_all,
        "{rounds_over} rounds against {rounds_all}"
    );
    assert_eq!(at_quorum, rounds_over);
    assert!(steps_all > 0);
}

/// A deadline closes a round with the pushes it has; the stragglers' pushes come too late and
/// are discarded, counted with their steps.
#[test]
fn a_deadline_closes_the_round_and_late_pushes_are_discarded() {
    let cfg = FedAvgConfig {
        local_steps: 5,
        deadline_s: Some(0.12),
        ..Default::default()
    };
    // 10, 20, 30, 40 ms a step: 5 steps take 50-200 ms, so the 3× and 4× clients miss 120 ms.
    let (rounds, at_quorum, _) = check_fedavg_rounds(cfg.clone(), 4);
    assert!(rounds > 10, "{rounds} rounds");
    assert_eq!(at_quorum, 0, "no round gets all four before its deadline");
    let mut late = (0, 0);
    run_fed(ServerRule::FedAvg(cfg), 4, 3.0, |a, _| late = a.late());
    assert!(
        late.0 > 0 && late.1 == 5 * late.0,
        "late pushes and steps: {late:?}"
    );
}

/// Bad options are refused at their field, with a hint where one helps; crashes are refused
/// with `concurrency` set.
#[test]
fn bad_options_are_refused_at_their_field() {
    let topology = Topology::build(&TopologyConfig::Ring {}, 4, &BuildEnv::new(1)).unwrap();
    for (kind, options, field) in [
        ("fedasync", "local_steps = 0", "local_steps"),
        ("fedasync", "alpha = 0.0", "alpha"),
        ("fedasync", "alpha = 1.5", "alpha"),
        ("fedasync", "rho = -1.0", "rho"),
        ("fedasync", "concurrency = 0", "concurrency"),
        ("fedasync", "concurrency = 5", "concurrency"),
        ("fedasync", "staleness_a = 0.0", "staleness_a"),
        ("fedbuff", "buffer_size = 0", "buffer_size"),
        ("fedavg", "clients_per_round = 5", "clients_per_round"),
        ("fedavg", "clients_per_round = 2\nquorum = 3", "quorum"),
        ("fedavg", "quorum = 0", "quorum"),
        ("fedavg", "deadline_s = 0.0", "deadline_s"),
        ("fedavg", "server_lr = -1.0", "server_lr"),
        ("fedbuff", "server_lr = 0.0", "server_lr"),
        (
            "fedbuff",
            "staleness = \"hinge\"\nstaleness_a = -1.0",
            "staleness_a",
        ),
    ] {
        let entry: AlgorithmConfig = toml::from_str(&format!("kind = \"{kind}\"\n{options}"))
            .unwrap_or_else(|e| panic!("{options}: {e}"));
        let err = entry
            .validate(&topology, "algorithms[0]", None)
            .expect_err(options);
        assert_eq!(
            err.path.to_string(),
            format!("algorithms[0].{field}"),
            "{options}"
        );
    }
    for kind in ["fedasync", "fedbuff"] {
        let entry: AlgorithmConfig = toml::from_str(&format!("kind = \"{kind}\"")).unwrap();
        entry.validate(&topology, "algorithms[0]", None).unwrap();
        assert_eq!(entry.extra_nodes(), 1, "the server's node");
        let crash: Vec<FaultConfig> =
            vec![toml::from_str("kind = \"crash\"\nworkers = [1]\nat_s = 0.1").unwrap()];
        entry.check_fault_support(&crash, "algorithms[0]").unwrap();
        let entry: AlgorithmConfig =
            toml::from_str(&format!("kind = \"{kind}\"\nconcurrency = 2")).unwrap();
        let err = entry
            .check_fault_support(&crash, "algorithms[0]")
            .expect_err("crashes with concurrency");
        assert!(err.to_string().contains("concurrency"), "{err}");
    }
    // An unknown staleness function is refused when the scenario is read.
    let err = toml::from_str::<AlgorithmConfig>("kind = \"fedasync\"\nstaleness = \"exponential\"")
        .expect_err("an unknown function");
    assert!(err.to_string().contains("polynomial"), "{err}");
}
