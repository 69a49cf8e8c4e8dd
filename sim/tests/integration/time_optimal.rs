//! Rennala SGD (Tyurin & Richtárik, 2023) and Ringmaster ASGD (Maranjyan, Tyurin & Richtárik,
//! 2025) on the exact reference store: every update checked against the papers' rule at every
//! event, Rennala's iteration time in closed form, Ringmaster with `R = 1` being Rennala with
//! `B = 1`, crashes, bad options refused; and the parameter server's delay-adaptive steps
//! (Mishchenko et al., 2022).

use crate::common;

use common::*;
use dasim_sim::algorithms::{PsConfig, StepRule};
use dasim_sim::engine::{Collect, run_inspect};
use dasim_sim::prelude::*;
use dasim_sim::store::reference::Quadratic;

const SEED: u64 = 5;
const DIM: usize = 8;
const LR: f64 = 0.05;

/// A noiseless quadratic: every gradient at a point is `a ⊙ (x − b)`, so an update reveals
/// which point its gradients were computed at.
fn exact_store(n: usize) -> ReferenceStore {
    ReferenceStore::new(Quadratic::new(DIM, 10.0, 0.0), n, optimizer(LR, 0.0), SEED)
}

fn gradient(q: &Quadratic, x: &[f64]) -> Vec<f64> {
    x.iter()
        .zip(&q.curvature)
        .zip(&q.optimum)
        .map(|((x, a), b)| a * (x - b))
        .collect()
}

fn sgd_step(q: &Quadratic, x: &[f64], at: &[f64]) -> Vec<f64> {
    x.iter()
        .zip(gradient(q, at))
        .map(|(x, g)| x - LR * g)
        .collect()
}

fn same(a: &[f64], b: &[f64]) -> bool {
    a.iter()
        .zip(b)
        .all(|(x, y)| (x - y).abs() <= 1e-12 * (1.0 + y.abs()))
}

/// Four workers of 10, 20, 30 and 40 ms per gradient.
fn heterogeneous(n: usize) -> ClusterConfig {
    let factors: Vec<(usize, f64)> = (1..n).map(|i| (i, (i + 1) as f64)).collect();
    cluster(n, &factors)
}

/// Runs `alg` (built by `make`) on `n` heterogeneous workers until `seconds`, calling
/// `inspect(alg, store)` after every event.
fn run_star<A, F>(
    entry: AlgorithmKind,
    mut alg: A,
    n: usize,
    net_cfg: &NetworkConfig,
    seconds: f64,
    mut inspect: F,
) -> (Outcome, Vec<EvalPoint>, Vec<f64>)
where
    A: Algorithm,
    F: FnMut(&A, &ReferenceStore),
{
    let store = exact_store(n);
    let mut store = Checked::new(store);
    let shared = store.shared();
    let cfg = AlgorithmConfig::from(entry);
    let opt = optimizer(LR, 0.0);
    let mut points = Collect::default();
    let outcome = {
        let mut world = world(
            &cfg,
            &heterogeneous(n),
            net_cfg,
            TopologyConfig::Ring {},
            &mut store,
            &opt,
            SEED,
        );
        run_inspect(
            &mut alg,
            &mut world,
            &stop_at(seconds),
            &mut points,
            &mut |a: &A, _, _| inspect(a, &shared.borrow()),
        )
        .unwrap()
    };
    let server = shared.borrow().params(n).to_vec();
    (outcome, points.0, server)
}

fn faults(text: &str) -> Vec<dasim_sim::fault::FaultConfig> {
    #[derive(serde::Deserialize)]
    struct Doc {
        faults: Vec<dasim_sim::fault::FaultConfig>,
    }
    toml::from_str::<Doc>(text).expect("valid faults").faults
}

#[test]
fn every_rennala_update_is_one_sgd_step_at_the_current_point() {
    for stops in [false, true] {
        let cfg = RennalaConfig { batch: 3, stops };
        let n = 4;
        let q = Quadratic::new(DIM, 10.0, 0.0);
        let mut x = vec![0.0; DIM];
        let mut k = 0;
        let (outcome, _, _) = run_star(
            AlgorithmKind::Rennala(cfg.clone()),
            Rennala::new(&cfg, n),
            n,
            &net(1.0, 20.0),
            2.0,
            |a: &Rennala, store| {
                let server = store.params(a.server_row());
                if a.iterations() == k {
                    assert_eq!(server, &x[..], "the server's model moves only at an update");
                } else {
                    assert_eq!(a.iterations(), k + 1, "one update per event");
                    // The mean of B gradients, every one of them at x_k: one step at x_k.
                    let expected = sgd_step(&q, &x, &x);
                    assert!(same(server, &expected), "update {k}: not a step at x_k");
                    x = server.to_vec();
                    k += 1;
                }
                assert!(a.collected().len() < cfg.batch);
                for (_, version) in a.computing() {
                    assert!(version <= a.iterations());
                }
            },
        );
        assert!(k > 20, "stops = {stops}: only {k} updates");
        assert_eq!(outcome.worker_steps, 3 * k, "B steps per update");
    }
}

#[test]
fn rennala_with_stops_takes_min_t_with_b_gradients_per_iteration() {
    // τ = 10, 20, 30, 40 ms and B = 5: Σ_i ⌊t/τ_i⌋ = 3 + 1 + 1 + 0 = 5 first at t = 30 ms,
    // below the paper's bound t(B) = min_m (B + m)/Σ_{i≤m} 1/τ_i = 6/(1/10 + 1/20) = 40 ms.
    // On a network of latency α (and a bandwidth that makes sizes negligible) an iteration adds
    // the push and the model's flight: 30 ms + 2α.
    let n = 4;
    let taus = [10.0_f64, 20.0, 30.0, 40.0];
    let b = 5;
    let t_b = (1..)
        .map(|ms| ms as f64)
        .find(|&t| taus.iter().map(|tau| (t / tau).floor()).sum::<f64>() >= b as f64)
        .unwrap();
    assert_eq!(t_b, 30.0);
    let bound = (1..=n)
        .map(|m| (b + m) as f64 / taus[..m].iter().map(|t| 1.0 / t).sum::<f64>())
        .fold(f64::INFINITY, f64::min);
    assert!(t_b <= bound, "{t_b} ms above the paper's bound {bound} ms");
    let alpha_ms = 0.05;
    let period_s = (t_b + 2.0 * alpha_ms) / 1000.0;
    let seconds = 3.0;
    let cfg = RennalaConfig {
        batch: b,
        stops: true,
    };
    let mut iterations = 0;
    run_star(
        AlgorithmKind::Rennala(cfg.clone()),
        Rennala::new(&cfg, n),
        n,
        &net(1e6, alpha_ms * 1000.0),
        seconds,
        |a: &Rennala, _| iterations = a.iterations(),
    );
    let expected = seconds / period_s;
    assert!(
        (iterations as f64 - expected).abs() <= 1.0,
        "{iterations} iterations in {seconds} s, expected {expected:.2} (one per {:.3} ms)",
        period_s * 1000.0
    );
}

#[test]
fn every_ringmaster_update_uses_a_gradient_of_delay_below_r() {
    for stops in [false, true] {
        for r in [2, 3] {
            let cfg = RingmasterConfig {
                max_delay: r,
                stops,
            };
            let n = 4;
            let q = Quadratic::new(DIM, 10.0, 0.0);
            // The server's points x_0, x_1, …
            let mut points = vec![vec![0.0; DIM]];
            let (_, _, _) = run_star(
                AlgorithmKind::Ringmaster(cfg.clone()),
                Ringmaster::new(&cfg, n),
                n,
                &net(1.0, 20.0),
                2.0,
                |a: &Ringmaster, store| {
                    let server = store.params(a.server_row());
                    let k = points.len() as u64 - 1;
                    if a.iterations() == k {
                        assert_eq!(server, &points[k as usize][..]);
                        return;
                    }
                    assert_eq!(a.iterations(), k + 1, "one update per event");
                    let x = &points[k as usize];
                    // x_{k+1} = x_k − γ ∇f(x_{k−δ}) for some δ < R.
                    let delay = (0..r.min(k + 1))
                        .find(|&d| same(server, &sgd_step(&q, x, &points[(k - d) as usize])));
                    assert!(
                        delay.is_some(),
                        "R = {r}, stops = {stops}: update {k} used no point of delay < R"
                    );
                    points.push(server.to_vec());
                },
            );
            let k = points.len() - 1;
            assert!(k > 50, "R = {r}, stops = {stops}: only {k} updates");
        }
    }
}

#[test]
fn ringmaster_reports_its_delays_and_ignores_the_rest() {
    // One worker 10x slower than the other three: its gradients are 10 or more updates old.
    let n = 4;
    for stops in [false, true] {
        let cfg = RingmasterConfig {
            max_delay: 4,
            stops,
        };
        let mut ignored = 0;
        let mut stopped = 0;
        let mut alg_stats = None;
        let alg = Ringmaster::new(&cfg, n);
        let store = exact_store(n);
        let mut store = Checked::new(store);
        let entry = AlgorithmConfig::from(AlgorithmKind::Ringmaster(cfg.clone()));
        let opt = optimizer(LR, 0.0);
        let mut points = Collect::default();
        let mut alg = alg;
        {
            let mut world = world(
                &entry,
                &cluster(n, &[(3, 10.0)]),
                &net(1.0, 20.0),
                TopologyConfig::Ring {},
                &mut store,
                &opt,
                SEED,
            );
            run_inspect(
                &mut alg,
                &mut world,
                &stop_at(2.0),
                &mut points,
                &mut |a: &Ringmaster, _, _| {
                    ignored = a.ignored();
                    stopped = a.stopped();
                    alg_stats = a.staleness();
                },
            )
            .unwrap();
        }
        let s = alg_stats.unwrap();
        assert!(s.max < 4, "a used gradient of delay {} ≥ R", s.max);
        if stops {
            assert!(stopped > 0, "the slow worker is stopped");
            assert_eq!(
                ignored, 0,
                "with stops nothing is computed only to be ignored"
            );
        } else {
            assert!(ignored > 0, "the slow worker's gradients are ignored");
            assert_eq!(stopped, 0);
        }
    }
}

#[test]
fn ringmaster_with_r_1_is_rennala_with_b_1() {
    for stops in [false, true] {
        let ring = RingmasterConfig {
            max_delay: 1,
            stops,
        };
        let ren = RennalaConfig { batch: 1, stops };
        let n = 4;
        let a = run_star(
            AlgorithmKind::Ringmaster(ring.clone()),
            Ringmaster::new(&ring, n),
            n,
            &net(1.0, 20.0),
            1.0,
            |_: &Ringmaster, _| {},
        );
        let b = run_star(
            AlgorithmKind::Rennala(ren.clone()),
            Rennala::new(&ren, n),
            n,
            &net(1.0, 20.0),
            1.0,
            |_: &Rennala, _| {},
        );
        assert_eq!(a.0.worker_steps, b.0.worker_steps, "stops = {stops}");
        assert_eq!(a.0.network.messages, b.0.network.messages);
        assert_eq!(a.2, b.2, "the same server model");
        let losses = |p: &[EvalPoint]| p.iter().map(|e| e.eval.loss).collect::<Vec<_>>();
        assert_eq!(losses(&a.1), losses(&b.1));
    }
}

#[test]
fn a_crashed_worker_rejoins_at_the_servers_current_point() {
    use dasim_sim::fault::Faults;
    let n = 4;
    let cfg = RingmasterConfig {
        max_delay: 3,
        stops: true,
    };
    let faults =
        faults("[[faults]]\nkind = \"crash\"\nworkers = [0]\nat_s = 0.5\nrejoin_after_s = 0.5\n");
    let entry = AlgorithmConfig::from(AlgorithmKind::Ringmaster(cfg.clone()));
    let mut store = exact_store(n);
    let opt = optimizer(LR, 0.0);
    let mut alg = Ringmaster::new(&cfg, n);
    let mut steps_of_0 = Vec::new();
    {
        let mut world = world(
            &entry,
            &heterogeneous(n),
            &net(1.0, 20.0),
            TopologyConfig::Ring {},
            &mut store,
            &opt,
            SEED,
        );
        let env = BuildEnv::new(SEED);
        world.set_faults(Faults::new(&faults, n, &env).unwrap());
        run_inspect(
            &mut alg,
            &mut world,
            &stop_at(1.5),
            &mut Collect::default(),
            &mut |_: &Ringmaster, w: &World<'_>, t: SimTime| {
                steps_of_0.push((t.as_secs_f64(), w.worker_steps_of(0)));
            },
        )
        .unwrap();
    }
    let at = |s: f64| {
        steps_of_0
            .iter()
            .rev()
            .find(|&&(t, _)| t <= s)
            .map(|&(_, c)| c)
            .unwrap()
    };
    assert!(at(0.5) > 10);
    assert_eq!(at(0.5), at(0.999), "no step while down");
    assert!(at(1.5) > at(1.0) + 10, "steps again after the rejoin");
}

#[test]
fn bad_options_are_refused_naming_the_field() {
    let topology = Topology::build(&TopologyConfig::Ring {}, 4, &BuildEnv::new(1)).unwrap();
    let cases = [
        ("kind = \"rennala\"\nbatch = 0", "algorithms[0].batch"),
        (
            "kind = \"ringmaster\"\nmax_delay = 0",
            "algorithms[0].max_delay",
        ),
        (
            "kind = \"ps\"\naggregate = 2\nstep_rule = \"delay-adaptive\"",
            "algorithms[0].step_rule",
        ),
    ];
    for (text, field) in cases {
        let entry: AlgorithmConfig = toml::from_str(text).unwrap();
        let err = entry
            .validate(&topology, "algorithms[0]", None)
            .unwrap_err();
        assert_eq!(err.path.to_string(), field, "{text}");
    }
    // Lost messages would leave a worker waiting: refused.
    let entry: AlgorithmConfig = toml::from_str("kind = \"ringmaster\"\nmax_delay = 2").unwrap();
    let faults = faults("[[faults]]\nkind = \"loss\"\nprobability = 0.01\n");
    let err = entry
        .check_fault_support(&faults, "algorithms[0]")
        .unwrap_err();
    assert!(err.to_string().contains("retransmit"), "{err}");
}

#[test]
fn delay_adaptive_steps_scale_each_gradient_by_its_delay() {
    // Four workers, one 20x slower: its gradients are about 60 updates old, the others' about 3.
    let n = 4;
    for rule in [StepRule::Constant, StepRule::DelayAdaptive] {
        let cfg = PsConfig {
            step_rule: rule,
            ..Default::default()
        };
        let entry = AlgorithmConfig::from(AlgorithmKind::Ps(cfg));
        let mut store = Checked::new(exact_store(n));
        let opt = optimizer(LR, 0.0);
        {
            let mut world = world(
                &entry,
                &cluster(n, &[(3, 20.0)]),
                &net(10.0, 5.0),
                TopologyConfig::Ring {},
                &mut store,
                &opt,
                SEED,
            );
            dasim_sim::algorithms::run_algorithm(
                &entry,
                &mut world,
                &stop_at(2.0),
                &mut Collect::default(),
            )
            .unwrap();
        }
        let mut shrunk = 0;
        for &r in &store.rates {
            if r == LR {
                continue;
            }
            // r = γ·n/δ with an integer delay δ > n.
            let delay = LR * n as f64 / r;
            assert!(
                (delay - delay.round()).abs() < 1e-9 && delay.round() > n as f64,
                "{rule:?}: rate {r} is not γ·n/δ for an integer δ > n"
            );
            shrunk += 1;
        }
        match rule {
            StepRule::Constant => assert_eq!(shrunk, 0),
            StepRule::DelayAdaptive => {
                assert!(
                    shrunk >= 5,
                    "the slow worker's {shrunk} gradients are scaled"
                );
                assert!(shrunk * 4 < store.rates.len(), "the fast workers' are not");
            }
        }
    }
}

/// The parameter server with the delay-adaptive rule on four workers, worker 3 20× slower, and
/// worker 0 crashed at 1 s for good: every application's rate is recomputed from the
/// gradient's actual delay and the workers up at that instant, independently of the server's own
/// bookkeeping. The delay is read off the server's models: the gradient was computed at the
/// model of some version `v` (the worker's row is the reply's copy of it, bit for bit), and it
/// is the `k`-th application, so `δ = k − v`. Returns the applications checked before and after
/// the crash whose delay exceeded the live count (where `n` decides the rate).
fn check_delay_adaptive_rates() -> (usize, usize) {
    use dasim_sim::algorithms::ParameterServer;
    use dasim_sim::fault::Faults;
    let n = 4;
    let cfg = PsConfig {
        step_rule: StepRule::DelayAdaptive,
        ..Default::default()
    };
    let entry = AlgorithmConfig::from(AlgorithmKind::Ps(cfg.clone()));
    let mut store = Checked::new(exact_store(n));
    let shared = store.shared();
    let opt = optimizer(LR, 0.0);
    let crash = faults("[[faults]]\nkind = \"crash\"\nworkers = [0]\nat_s = 1.0\n");
    // The server's models in order, each with the time it took effect.
    let mut versions: Vec<(f64, Vec<f64>)> = Vec::new();
    {
        let mut world = world(
            &entry,
            &cluster(n, &[(3, 20.0)]),
            &net(10.0, 5.0),
            TopologyConfig::Ring {},
            &mut store,
            &opt,
            SEED,
        );
        world.set_faults(Faults::new(&crash, n, &BuildEnv::new(SEED)).unwrap());
        let mut alg = ParameterServer::new(&cfg, n).with_retransmit(cfg.retransmit(&world));
        run_inspect(
            &mut alg,
            &mut world,
            &stop_at(2.0),
            &mut Collect::default(),
            &mut |a: &ParameterServer, _: &World<'_>, t: SimTime| {
                let x = shared.borrow().params(a.server_row()).to_vec();
                if versions.last().is_none_or(|(_, last)| *last != x) {
                    versions.push((t.as_secs_f64(), x));
                }
            },
        )
        .unwrap();
    }
    // The point each gradient was computed at, by gradient.
    let mut count = vec![0usize; n];
    let mut read = std::collections::BTreeMap::new();
    for op in &store.log {
        if let Op::Request { worker, grad } = *op {
            read.insert(grad, store.reads[worker][count[worker]].clone());
            count[worker] += 1;
        }
    }
    assert_eq!(
        versions.len(),
        store.applications.len() + 1,
        "one version per application"
    );
    let (mut before, mut after) = (0, 0);
    for (k, ((_, grad, _), &rate)) in store.applications.iter().zip(&store.rates).enumerate() {
        let at = &read[grad];
        let v = (0..=k)
            .rev()
            .find(|&v| versions[v].1 == *at)
            .unwrap_or_else(|| panic!("application {k}: its point is no model of the server"));
        let delay = (k - v) as f64;
        let t = versions[k + 1].0;
        let live = if t < 1.0 { n } else { n - 1 } as f64;
        let want = LR * live / live.max(delay);
        assert!(
            (rate - want).abs() <= 1e-12 * want,
            "application {k} at {t} s, delay {delay}, {live} workers up: rate {rate}, want {want}"
        );
        match (delay > live, t < 1.0) {
            (true, true) => before += 1,
            (true, false) => after += 1,
            _ => {}
        }
    }
    (before, after)
}

#[test]
fn delay_adaptive_steps_count_only_the_live_workers() {
    let (before, after) = check_delay_adaptive_rates();
    // The slow worker's gradients are many updates old on both sides of the crash, so the
    // count of workers up decides their rates.
    assert!(
        before >= 3 && after >= 3,
        "{before} and {after} stale gradients"
    );
}
