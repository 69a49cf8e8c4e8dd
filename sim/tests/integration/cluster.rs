//! The compute model: base times, every straggler model, and common random numbers.

use crate::common;

use std::path::PathBuf;

use common::*;
use dasim_sim::cluster::stragglers::{
    DelayConfig, JitterConfig, MarkovConfig, MarkovStart, TraceConfig, TraceEnd, WindowConfig,
};
use dasim_sim::prelude::*;

fn ms(x: f64) -> SimTime {
    SimTime::from_millis_f64(x)
}

fn env() -> BuildEnv {
    BuildEnv::new(11)
}

/// A scratch file under cargo's per-test-target temporary directory.
fn scratch(name: &str, text: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cluster-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// `k` durations of `worker`, every step starting at time zero.
fn draws(c: &mut Cluster, worker: usize, k: usize) -> Vec<SimTime> {
    (0..k)
        .map(|_| c.next_step_time(worker, SimTime::ZERO))
        .collect()
}

fn mean_cv(xs: &[f64]) -> (f64, f64) {
    let m = xs.iter().sum::<f64>() / xs.len() as f64;
    let v = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (xs.len() - 1) as f64;
    (m, v.sqrt() / m)
}

#[test]
fn base_time_is_given_or_derived_from_flops() {
    let e = BuildEnv::new(1)
        .with_flops_per_sample(1e9)
        .with_batch_size(32);
    let mut cfg = ClusterConfig::new(6);
    cfg.device_tflops = Some(3.2); // 1e9 · 32 / 3.2e12 = 10 ms
    cfg.groups = vec![
        GroupConfig {
            workers: (2..4).into(),
            step_time_ms: None,
            device_tflops: Some(1.6),
        },
        GroupConfig {
            workers: vec![3, 5].into(),
            step_time_ms: Some(7.0),
            device_tflops: None,
        },
    ];
    let c = Cluster::new(&cfg, &e).unwrap();
    let base: Vec<SimTime> = (0..6).map(|w| c.base_step_time(w)).collect();
    // The last group that covers a worker wins.
    assert_eq!(
        base,
        vec![ms(10.0), ms(10.0), ms(20.0), ms(7.0), ms(10.0), ms(7.0)]
    );
    // The scenario's own FLOP count overrides the model's.
    cfg.flops_per_sample = Some(2e9);
    assert_eq!(Cluster::new(&cfg, &e).unwrap().base_step_time(0), ms(20.0));
    // Without a FLOP count, a device speed cannot be turned into a time.
    cfg.flops_per_sample = None;
    let err = Cluster::new(&cfg, &BuildEnv::new(1).with_batch_size(32)).unwrap_err();
    assert_eq!(err.path.to_string(), "cluster.device_tflops");
    assert!(err.hint.unwrap().contains("flops_per_sample"));
    // Nothing given: 10 ms.
    let c = Cluster::new(&ClusterConfig::new(2), &e).unwrap();
    assert_eq!(c.base_step_time(1), ms(10.0));
}

fn jitter(distribution: Distribution, mean: f64, cv: Option<f64>, shape: Option<f64>) -> Cluster {
    let cfg = ClusterConfig::new(2)
        .with_step_time_ms(1.0)
        .with_straggler(StragglerConfig::new(
            [0],
            StragglerModel::Jitter(JitterConfig {
                distribution,
                mean,
                cv,
                shape,
            }),
        ));
    Cluster::new(&cfg, &env()).unwrap()
}

#[test]
fn jitter_factors_have_the_stated_mean_and_spread() {
    use Distribution::*;
    let n = 40_000;
    // (distribution, mean, cv, shape, expected cv)
    let cases = [
        (Constant, 1.3, None, None, 0.0),
        (Uniform, 1.0, Some(0.2), None, 0.2),
        (Lognormal, 1.5, Some(0.5), None, 0.5),
        (Gamma, 1.2, Some(0.3), None, 0.3),
        (Gamma, 2.0, None, Some(4.0), 0.5), // cv = 1/√k
        (Exponential, 2.0, None, None, 1.0),
        (Pareto, 1.5, None, Some(3.0), (1.0f64 / 3.0).sqrt()), // cv² = 1/(α(α−2))
        (Pareto, 1.0, Some(0.5), None, 0.5),
    ];
    for (d, mean, cv, shape, want_cv) in cases {
        let mut c = jitter(d, mean, cv, shape);
        let xs: Vec<f64> = draws(&mut c, 0, n)
            .into_iter()
            .map(|t| t.as_nanos() as f64 / 1e6)
            .collect();
        let (m, got_cv) = mean_cv(&xs);
        assert!(
            (m - mean).abs() < 0.02 * mean,
            "{d:?}: sample mean {m}, want {mean}"
        );
        // Heavy tails make a Pareto's sample cv converge slowly; check it loosely.
        let tol = if d == Pareto { 0.25 } else { 0.05 };
        assert!(
            (got_cv - want_cv).abs() <= tol * want_cv + 1e-6,
            "{d:?}: sample cv {got_cv}, want {want_cv}"
        );
        // The uncovered worker is untouched.
        assert_eq!(c.next_step_time(1, SimTime::ZERO), ms(1.0));
    }
}

#[test]
fn delays_add_time_with_the_stated_mean() {
    let cfg = ClusterConfig::new(2)
        .with_step_time_ms(10.0)
        .with_straggler(StragglerConfig::fixed([0], 2.0))
        .with_straggler(StragglerConfig::new(
            [0],
            StragglerModel::Delay(DelayConfig {
                distribution: Distribution::Exponential,
                mean_ms: 5.0,
                cv: None,
                shape: None,
            }),
        ));
    let mut c = Cluster::new(&cfg, &env()).unwrap();
    let xs: Vec<f64> = draws(&mut c, 0, 40_000)
        .into_iter()
        .map(|t| t.as_nanos() as f64 / 1e6 - 20.0)
        .collect();
    assert!(
        xs.iter().all(|&x| x >= 0.0),
        "the delay is added after the factor"
    );
    let (m, cv) = mean_cv(&xs);
    assert!((m - 5.0).abs() < 0.1, "mean delay {m} ms");
    assert!((cv - 1.0).abs() < 0.05, "cv {cv}");
}

/// Run lengths of the slow (`true`) and fast states in a sequence, the first and last runs
/// (censored) dropped.
fn runs(states: &[bool]) -> (Vec<usize>, Vec<usize>) {
    let mut out = (Vec::new(), Vec::new());
    let mut start = 0;
    let mut spans = Vec::new();
    for i in 1..=states.len() {
        if i == states.len() || states[i] != states[start] {
            spans.push((states[start], i - start));
            start = i;
        }
    }
    for &(slow, len) in &spans[1..spans.len() - 1] {
        if slow {
            out.0.push(len);
        } else {
            out.1.push(len);
        }
    }
    out
}

fn avg(v: &[usize]) -> f64 {
    v.iter().sum::<usize>() as f64 / v.len() as f64
}

#[test]
fn step_clocked_markov_sojourns_have_the_stated_means() {
    let cfg = ClusterConfig::new(2)
        .with_step_time_ms(1.0)
        .with_straggler(StragglerConfig::new(
            WorkerSet::All,
            StragglerModel::Markov(MarkovConfig {
                factor: 3.0,
                mean_fast_steps: Some(20.0),
                mean_slow_steps: Some(5.0),
                mean_fast_s: None,
                mean_slow_s: None,
                start: MarkovStart::Fast,
            }),
        ));
    let mut c = Cluster::new(&cfg, &env()).unwrap();
    let states: Vec<bool> = draws(&mut c, 1, 200_000)
        .into_iter()
        .map(|t| {
            assert!(t == ms(1.0) || t == ms(3.0), "{t}");
            t == ms(3.0)
        })
        .collect();
    assert!(!states[0], "start = \"fast\"");
    let (slow, fast) = runs(&states);
    assert!(
        (avg(&fast) - 20.0).abs() < 0.8,
        "fast sojourn {}",
        avg(&fast)
    );
    assert!(
        (avg(&slow) - 5.0).abs() < 0.2,
        "slow sojourn {}",
        avg(&slow)
    );
}

#[test]
fn time_clocked_markov_sojourns_have_the_stated_means() {
    let cfg = ClusterConfig::new(2)
        .with_step_time_ms(1.0)
        .with_straggler(StragglerConfig::new(
            [0],
            StragglerModel::Markov(MarkovConfig {
                factor: 2.0,
                mean_fast_steps: None,
                mean_slow_steps: None,
                mean_fast_s: Some(0.2),
                mean_slow_s: Some(0.05),
                start: MarkovStart::Stationary,
            }),
        ));
    let mut c = Cluster::new(&cfg, &env()).unwrap();
    // Sample the state on a 0.25 ms grid: a grid of random phase counts a sojourn of length L
    // as L / 0.25 ms points on average, so run lengths × 0.25 ms estimate the sojourns (a
    // sojourn shorter than the grid, probability 0.5% here, can be missed). ~4000 cycles.
    let grid = SimTime::from_micros_f64(250.0);
    let states: Vec<bool> = (0..4_000_000u64)
        .map(|i| c.next_step_time(0, SimTime::from_nanos(i * grid.as_nanos())) == ms(2.0))
        .collect();
    let (slow, fast) = runs(&states);
    let (fast_s, slow_s) = (avg(&fast) * 0.00025, avg(&slow) * 0.00025);
    assert!((fast_s - 0.2).abs() < 0.2 * 0.06, "fast sojourn {fast_s} s");
    assert!(
        (slow_s - 0.05).abs() < 0.05 * 0.06,
        "slow sojourn {slow_s} s"
    );
    let frac = states.iter().filter(|&&s| s).count() as f64 / states.len() as f64;
    assert!((frac - 0.2).abs() < 0.01, "slow fraction {frac}");
}

#[test]
fn windows_apply_to_steps_that_start_inside_them() {
    let cfg = ClusterConfig::new(4)
        .with_step_time_ms(10.0)
        .with_straggler(StragglerConfig::new(
            2..4,
            StragglerModel::Window(WindowConfig {
                factor: 3.0,
                start_s: 1.0,
                end_s: Some(2.0),
            }),
        ))
        .with_straggler(StragglerConfig::new(
            [3],
            StragglerModel::Window(WindowConfig {
                factor: 2.0,
                start_s: 1.5,
                end_s: None,
            }),
        ));
    let mut c = Cluster::new(&cfg, &env()).unwrap();
    let at = |c: &mut Cluster, w, ns: u64| c.next_step_time(w, SimTime::from_nanos(ns));
    assert_eq!(at(&mut c, 2, 999_999_999), ms(10.0));
    assert_eq!(at(&mut c, 2, 1_000_000_000), ms(30.0));
    assert_eq!(at(&mut c, 2, 1_999_999_999), ms(30.0));
    assert_eq!(at(&mut c, 2, 2_000_000_000), ms(10.0));
    assert_eq!(at(&mut c, 0, 1_500_000_000), ms(10.0), "not covered");
    // Worker 3: both windows overlap on [1.5, 2) and their factors multiply; the second never
    // closes.
    assert_eq!(at(&mut c, 3, 1_499_999_999), ms(30.0));
    assert_eq!(at(&mut c, 3, 1_500_000_000), ms(60.0));
    assert_eq!(at(&mut c, 3, 2_000_000_000), ms(20.0));
    assert_eq!(at(&mut c, 3, 1_000_000_000_000), ms(20.0));
}

fn trace(file: PathBuf, at_end: TraceEnd, workers: WorkerSet) -> StragglerConfig {
    StragglerConfig::new(workers, StragglerModel::Trace(TraceConfig { file, at_end }))
}

#[test]
fn traces_replay_then_repeat_or_hold() {
    let shared = scratch("shared.csv", "duration_ms\n1\n2\n3\n");
    let run = |at_end, extra: Option<StragglerConfig>| {
        let mut cfg = ClusterConfig::new(2)
            .with_step_time_ms(50.0)
            .with_straggler(trace(shared.clone(), at_end, vec![0].into()));
        cfg.stragglers.extend(extra);
        let mut c = Cluster::new(&cfg, &env()).unwrap();
        let got: Vec<f64> = draws(&mut c, 0, 7)
            .into_iter()
            .map(|t| t.as_nanos() as f64 / 1e6)
            .collect();
        assert_eq!(c.next_step_time(1, SimTime::ZERO), ms(50.0), "not covered");
        got
    };
    assert_eq!(run(TraceEnd::Repeat, None), [1., 2., 3., 1., 2., 3., 1.]);
    assert_eq!(run(TraceEnd::Hold, None), [1., 2., 3., 3., 3., 3., 3.]);
    // Other models still apply on top of the replayed base time.
    assert_eq!(
        run(TraceEnd::Hold, Some(StragglerConfig::fixed([0], 2.0))),
        [2., 4., 6., 6., 6., 6., 6.]
    );

    // Per-worker traces, relative to the base directory.
    let per = scratch(
        "per.csv",
        "# measured\nworker,duration_ms\n0,1\n1,5\n0,2.5\n",
    );
    let dir = per.parent().unwrap().to_path_buf();
    let cfg = ClusterConfig::new(3).with_straggler(trace(
        "per.csv".into(),
        TraceEnd::Repeat,
        (0..2).into(),
    ));
    let mut c = Cluster::new(&cfg, &BuildEnv::new(1).with_base_dir(&dir)).unwrap();
    assert_eq!(draws(&mut c, 0, 3), [ms(1.0), ms(2.5), ms(1.0)]);
    assert_eq!(draws(&mut c, 1, 2), [ms(5.0), ms(5.0)]);
    // A covered worker without rows is an error.
    let cfg = ClusterConfig::new(3).with_straggler(trace(
        "per.csv".into(),
        TraceEnd::Repeat,
        WorkerSet::All,
    ));
    let e = Cluster::new(&cfg, &BuildEnv::new(1).with_base_dir(&dir)).unwrap_err();
    assert_eq!(e.path.to_string(), "cluster.stragglers[0].file");
    assert!(e.message.contains("no row for worker 2"), "{}", e.message);
}

/// The step durations every worker drew when `alg` ran on the scenario.
fn realized(alg: &AlgorithmConfig, cfg: &ClusterConfig, seed: u64) -> Vec<Vec<SimTime>> {
    let n = cfg.workers;
    let env = BuildEnv::new(seed).with_base_dir(env!("CARGO_TARGET_TMPDIR"));
    let mut store = quadratic_store(n, seed);
    let mut cluster = Cluster::new(cfg, &env).unwrap();
    cluster.set_recording(true);
    let mut world = World::new(
        cluster,
        Network::new(&net(10.0, 5.0), n, &env).unwrap(),
        Topology::build(&TopologyConfig::Ring {}, n, &env).unwrap(),
        &mut store,
        &optimizer(0.05, 0.5),
        seed,
    );
    dasim_sim::algorithms::run_algorithm(alg, &mut world, &stop_at(0.5), &mut Collect::default())
        .unwrap();
    (0..n).map(|w| world.cluster.recorded(w).to_vec()).collect()
}

#[test]
fn every_algorithm_sees_the_same_step_durations() {
    scratch("shared-crn.csv", "duration_ms\n4\n6\n5\n");
    let n = 8;
    let cfg = ClusterConfig::new(n)
        .with_step_time_ms(5.0)
        .with_straggler(StragglerConfig::new(
            WorkerSet::All,
            StragglerModel::Jitter(JitterConfig {
                distribution: Distribution::Lognormal,
                mean: 1.0,
                cv: Some(0.3),
                shape: None,
            }),
        ))
        .with_straggler(StragglerConfig::new(
            WorkerSet::Fraction(0.5),
            StragglerModel::Markov(MarkovConfig {
                factor: 4.0,
                mean_fast_steps: Some(10.0),
                mean_slow_steps: Some(3.0),
                mean_fast_s: None,
                mean_slow_s: None,
                start: MarkovStart::Stationary,
            }),
        ))
        .with_straggler(trace(
            "cluster-tests/shared-crn.csv".into(),
            TraceEnd::Repeat,
            vec![2].into(),
        ))
        .with_straggler(StragglerConfig::fixed([5], 3.0));
    let allreduce = AlgorithmConfig::from(AlgorithmKind::AllReduce(AllReduceConfig::default()));
    let adpsgd = AlgorithmConfig::from(AlgorithmKind::AdPsgd(AdPsgdConfig::default()));
    // A scenario listing three algorithms builds three clusters from the same seed.
    let runs = [
        realized(&allreduce, &cfg, 3),
        realized(&adpsgd, &cfg, 3),
        realized(&allreduce, &cfg, 3),
    ];
    // The reference: the cluster alone, each worker's steps drawn in a row.
    let mut alone = Cluster::new(
        &cfg,
        &BuildEnv::new(3).with_base_dir(env!("CARGO_TARGET_TMPDIR")),
    )
    .unwrap();
    for w in 0..n {
        let reference = draws(&mut alone, w, 400);
        for (r, run) in runs.iter().enumerate() {
            let k = run[w].len();
            assert!(k >= 10, "run {r}, worker {w}: only {k} steps");
            assert_eq!(run[w], reference[..k], "run {r}, worker {w}");
        }
    }
    // Different workers, different realizations; different seed, different realization.
    assert_ne!(runs[0][0][..10], runs[0][1][..10]);
    let other = realized(&allreduce, &cfg, 4);
    assert_ne!(other[0][..10], runs[0][0][..10]);
}

#[test]
fn straggler_tables_parse_from_toml_and_round_trip() {
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Doc {
        cluster: ClusterConfig,
    }
    let text = r#"
[cluster]
workers = 16
device_tflops = 100.0
flops_per_sample = 1.2e10

[[cluster.groups]]
workers = "12..16"
device_tflops = 40.0

[[cluster.stragglers]]
workers = [5]
factor = 4                     # no kind: a fixed slowdown; an integer is a float

[[cluster.stragglers]]
kind = "jitter"
workers = "all"
distribution = "lognormal"
mean = 1.0
cv = 0.2

[[cluster.stragglers]]
kind = "delay"
workers = "0..=3"
distribution = "pareto"
mean_ms = 2.0
shape = 2.5

[[cluster.stragglers]]
kind = "markov"
workers = { fraction = 0.25 }
factor = 5.0
mean_fast_s = 30.0
mean_slow_s = 5.0

[[cluster.stragglers]]
kind = "window"
workers = "8..16"
start_s = 2.0
end_s = 4.0
factor = 3.0

[[cluster.stragglers]]
kind = "trace"
workers = { count = 2 }
file = "traces/v100.csv"
at_end = "hold"
"#;
    let doc: Doc = toml::from_str(text).unwrap();
    let c = &doc.cluster;
    assert_eq!(c.stragglers.len(), 6);
    assert_eq!(c.stragglers[0], StragglerConfig::fixed([5], 4.0));
    assert_eq!(c.stragglers[2].workers, (0..4).into());
    assert_eq!(c.stragglers[3].workers, WorkerSet::Fraction(0.25));
    assert_eq!(c.stragglers[5].workers, WorkerSet::Count(2));
    let kinds: Vec<&str> = c.stragglers.iter().map(|s| s.model.kind()).collect();
    assert_eq!(
        kinds,
        ["fixed", "jitter", "delay", "markov", "window", "trace"]
    );
    c.validate().unwrap();
    let back: Doc = toml::from_str(&toml::to_string(&doc).unwrap()).unwrap();
    assert_eq!(back, doc);

    // Unknown keys and kinds are rejected, within a model too.
    for (bad, needle) in [
        (
            "kind = \"jitter\"\nworkers = [1]\ndistribution = \"gamma\"\nmean = 1.0\ncv = 0.1\nmena = 2.0",
            "mena",
        ),
        ("kind = \"jiter\"\nworkers = [1]", "jiter"),
        ("workers = [1]\nfactor = 2.0\nfactro = 3.0", "factro"),
        ("kind = \"fixed\"\nfactor = 2.0", "workers"),
        ("workers = \"1-3\"\nfactor = 2.0", "1-3"),
        (
            "kind = \"jitter\"\nworkers = [1]\ndistribution = \"cauchy\"\nmean = 1.0",
            "cauchy",
        ),
    ] {
        let text = format!("[cluster]\nworkers = 4\n[[cluster.stragglers]]\n{bad}\n");
        let e = toml::from_str::<Doc>(&text).unwrap_err().to_string();
        assert!(e.contains(needle), "{bad:?}: {e}");
    }
}
