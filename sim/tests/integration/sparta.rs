//! SPARTA (EXO Gym's `sparta.py`) on the exact reference store: every averaging sets the drawn
//! coordinates of every row to their mean and leaves the others alone, the drawn share is `p`,
//! the ring carries the drawn values only, `interval` spaces the averagings, `p = 1` is local
//! SGD with `h = 1`, and bad options are refused at their field.

use crate::common;

use common::*;
use dasim_sim::algorithms::{LocalSgdConfig, Sparta, SpartaConfig};
use dasim_sim::engine::run_inspect;
use dasim_sim::prelude::*;

const SEED: u64 = 5;

/// Runs SPARTA on `n` workers (worker 1 2× slower) for `seconds` on the exact store, calling
/// `inspect(alg, rows)` after every event with every worker's row.
fn run_sparta(
    cfg: &SpartaConfig,
    n: usize,
    seconds: f64,
    mut inspect: impl FnMut(&Sparta, Vec<Vec<f64>>),
) -> Outcome {
    let mut store = Checked::new(quadratic_store(n, SEED));
    let shared = store.shared();
    let entry = AlgorithmConfig::from(AlgorithmKind::Sparta(cfg.clone()));
    let opt = optimizer(0.05, 0.0);
    let mut world = world(
        &entry,
        &cluster(n, &[(1, 2.0)]),
        &net(1.0, 20.0),
        TopologyConfig::Ring {},
        &mut store,
        &opt,
        SEED,
    );
    let mut alg = Sparta::new(cfg, n, SEED);
    run_inspect(
        &mut alg,
        &mut world,
        &stop_at(seconds),
        &mut Collect::default(),
        &mut |a: &Sparta, _: &World<'_>, _| {
            let store = shared.borrow();
            // The workers' rows, then (with DiLoCo) the global model, momentum and average.
            inspect(
                a,
                (0..store.rows())
                    .map(|w| store.params(w).to_vec())
                    .collect(),
            );
        },
    )
    .unwrap()
}

/// At every averaging, each drawn coordinate of every row becomes the mean of the rows before
/// it, and every other coordinate keeps its value.
#[test]
fn every_averaging_sets_the_drawn_coordinates_to_their_mean_and_only_those() {
    let cfg = SpartaConfig {
        p: 0.3,
        interval: 1,
        ..SpartaConfig::default()
    };
    let n = 4;
    let mut before: Option<(u64, Vec<Vec<f64>>)> = None;
    let mut checked = 0;
    run_sparta(&cfg, n, 1.0, |a, rows| {
        if let Some((done, old)) = &before
            && a.averagings() == done + 1
        {
            let drawn = a.drawn();
            for i in 0..rows[0].len() {
                let mean = old.iter().map(|r| r[i]).sum::<f64>() / n as f64;
                for w in 0..n {
                    let want = if drawn.contains(&i) { mean } else { old[w][i] };
                    assert!(
                        (rows[w][i] - want).abs() <= 1e-12 * (1.0 + want.abs()),
                        "averaging {}: worker {w}, coordinate {i}: {} vs {want}",
                        done + 1,
                        rows[w][i]
                    );
                }
            }
            checked += 1;
        }
        before = Some((a.averagings(), rows));
    });
    assert!(checked > 20, "{checked} averagings checked");
}

/// Each coordinate is drawn with probability `p` (here 0.3 over 16 coordinates and hundreds of
/// rounds: within four standard deviations), the same set on every worker, and the ring
/// carries only the drawn values: `2(n−1)` chunks of `⌈k·4/n⌉` bytes from each worker.
#[test]
fn the_drawn_share_is_p_and_the_ring_carries_only_the_drawn_values() {
    let cfg = SpartaConfig {
        p: 0.3,
        interval: 1,
        ..SpartaConfig::default()
    };
    let n = 4;
    let mut seen = 0;
    let (mut drawn_total, mut bytes) = (0usize, 0u64);
    let mut last_draw: Option<Vec<usize>> = None;
    let outcome = run_sparta(&cfg, n, 6.0, |a, _| {
        if a.averagings() != seen {
            seen = a.averagings();
            let k = a.drawn().len();
            drawn_total += k;
            bytes += (n as u64) * 2 * (n as u64 - 1) * (4 * k as u64).div_ceil(n as u64);
            last_draw = Some(a.drawn().to_vec());
        }
    });
    let rounds = seen as f64;
    let share = drawn_total as f64 / (16.0 * rounds);
    let sd = (0.3 * 0.7 / (16.0 * rounds)).sqrt();
    assert!(seen > 200, "{seen} averagings");
    assert!((share - 0.3).abs() < 4.0 * sd, "share {share}, sd {sd}");
    assert!(last_draw.unwrap().windows(2).all(|w| w[0] < w[1]));
    // The last round may be under way at the stop: its chunks are sent, not yet averaged.
    let per_round_max = (n as u64) * 2 * (n as u64 - 1) * (4 * 16u64).div_ceil(n as u64);
    assert!(
        outcome.network.bytes >= bytes && outcome.network.bytes <= bytes + per_round_max,
        "{} bytes sent, {bytes} for the rounds averaged",
        outcome.network.bytes
    );
}

/// With `interval = 4` the workers average after every fourth step only.
#[test]
fn interval_spaces_the_averagings() {
    let cfg = SpartaConfig {
        p: 0.3,
        interval: 4,
        ..SpartaConfig::default()
    };
    let outcome = run_sparta(&cfg, 4, 1.0, |_, _| {});
    let mut alg_averagings = 0;
    run_sparta(&cfg, 4, 1.0, |a, _| alg_averagings = a.averagings());
    let per_worker = outcome.worker_steps / 4;
    assert!(
        alg_averagings.abs_diff(per_worker / 4) <= 1,
        "{alg_averagings} averagings for {per_worker} steps per worker"
    );
}

/// `p = 1` averages every coordinate after every step: local SGD with `h = 1`, to rounding.
#[test]
fn with_p_one_it_is_local_sgd_averaging_every_step() {
    let n = 4;
    let cfg = SpartaConfig {
        p: 1.0,
        interval: 1,
        ..SpartaConfig::default()
    };
    let mut sparta_rows = Vec::new();
    let s = run_sparta(&cfg, n, 0.5, |_, rows| sparta_rows = rows);
    let local = LocalSgdConfig {
        h: 1,
        warmup_steps: None,
    };
    let entry =
        AlgorithmConfig::from(AlgorithmKind::LocalSgd(local)).with_optimizer(optimizer(0.05, 0.0));
    let mut store = quadratic_store(n, SEED);
    let (l, _) = run_on(
        &entry,
        &cluster(n, &[(1, 2.0)]),
        &net(1.0, 20.0),
        TopologyConfig::Ring {},
        &mut store,
        &stop_at(0.5),
        SEED,
    );
    assert_eq!(s.worker_steps, l.worker_steps, "the same timeline");
    for (w, row) in sparta_rows.iter().enumerate() {
        assert!(rel_diff(row, store.params(w)) < 1e-12, "worker {w}");
    }
}

/// Bad options are refused at their field.
#[test]
fn bad_options_are_refused_at_their_field() {
    let topology = Topology::build(&TopologyConfig::Ring {}, 4, &BuildEnv::new(1)).unwrap();
    for (options, field) in [
        ("p = 0.0", "p"),
        ("p = 1.5", "p"),
        ("interval = 0", "interval"),
        ("inner_steps = 0", "inner_steps"),
        ("inner_steps = 10\nouter_momentum = 1.0", "outer_momentum"),
    ] {
        let entry: AlgorithmConfig = toml::from_str(&format!("kind = \"sparta\"\n{options}"))
            .unwrap_or_else(|e| panic!("{options}: {e}"));
        let err = entry
            .validate(&topology, "algorithms[0]", None)
            .expect_err(options);
        assert_eq!(err.path.to_string(), format!("algorithms[0].{field}"));
        assert!(err.hint.is_some(), "{options}: {err}");
    }
    let entry: AlgorithmConfig = toml::from_str("kind = \"sparta\"").unwrap();
    entry.validate(&topology, "algorithms[0]", None).unwrap();
}

/// SPARTA with DiLoCo (the reference's `SPARTADiLoCoStrategy`): every `inner_steps` steps, after
/// that step's sparse averaging, DiLoCo's outer step: Nesterov SGD on `Δ = θ − mean θ_w`, every
/// worker restarting from `θ`. Recomputed at every outer step from the rows before it.
#[test]
fn with_inner_steps_every_h_steps_take_dilocos_outer_step() {
    let cfg = SpartaConfig {
        p: 0.3,
        inner_steps: Some(4),
        outer_lr: 0.7,
        outer_momentum: 0.9,
        ..SpartaConfig::default()
    };
    let n = 4;
    let (eta, mu) = (cfg.outer_lr, cfg.outer_momentum);
    type Snap = (u64, u64, Vec<Vec<f64>>);
    let mut before: Option<Snap> = None;
    let mut checked = 0;
    let mut sparse_between = 0;
    run_sparta(&cfg, n, 1.5, |a, rows| {
        // `rows` holds the workers', then the global model, momentum and average rows.
        let now = (a.outer_steps(), a.averagings(), rows);
        if let Some((steps, averagings, old)) = &before {
            if now.0 == steps + 1 {
                assert_eq!(now.1, *averagings, "the outer step is an event of its own");
                let (g0, m0) = (&old[n], &old[n + 1]);
                for j in 0..g0.len() {
                    let mean = (0..n).map(|w| old[w][j]).sum::<f64>() / n as f64;
                    let delta = g0[j] - mean;
                    let m1 = mu * m0[j] + delta;
                    let g1 = g0[j] - eta * (delta + mu * m1);
                    assert!((now.2[n + 1][j] - m1).abs() < 1e-12, "momentum {j}");
                    assert!((now.2[n][j] - g1).abs() < 1e-12, "global {j}");
                }
                for w in 0..n {
                    assert_eq!(
                        now.2[w], now.2[n],
                        "worker {w} restarts from the global model"
                    );
                }
                checked += 1;
            } else if now.1 > *averagings {
                sparse_between += 1;
            }
        }
        before = Some(now);
    });
    assert!(checked >= 5, "{checked} outer steps checked");
    assert!(
        sparse_between > 3 * checked,
        "sparse averagings between the outer steps"
    );
}

/// When no sparse averaging falls inside the run, SPARTA with DiLoCo is DiLoCo: the same steps,
/// bytes and models.
#[test]
fn without_a_sparse_averaging_in_the_run_it_is_diloco() {
    let n = 4;
    let sparta = SpartaConfig {
        interval: 1_000_000,
        inner_steps: Some(4),
        ..SpartaConfig::default()
    };
    let diloco = DilocoConfig {
        inner_steps: 4,
        outer_lr: 0.7,
        outer_momentum: 0.9,
        nesterov: true,
    };
    let run = |kind: AlgorithmKind| {
        let mut store = quadratic_store(n, SEED);
        let entry = AlgorithmConfig::from(kind).with_optimizer(optimizer(0.05, 0.0));
        let (outcome, _) = run_on(
            &entry,
            &cluster(n, &[(1, 2.0)]),
            &net(1.0, 20.0),
            TopologyConfig::Ring {},
            &mut store,
            &stop_at(1.0),
            SEED,
        );
        (
            outcome,
            (0..n).map(|w| store.params(w).to_vec()).collect::<Vec<_>>(),
        )
    };
    let (s, s_rows) = run(AlgorithmKind::Sparta(sparta));
    let (d, d_rows) = run(AlgorithmKind::Diloco(diloco));
    assert_eq!(s.worker_steps, d.worker_steps);
    assert_eq!(s.network.bytes, d.network.bytes);
    assert_eq!(s.network.messages, d.network.messages);
    assert_eq!(s_rows, d_rows, "the same models, bit for bit");
    assert!(s.worker_steps > 5 * 4 * n as u64, "several rounds ran");
}
