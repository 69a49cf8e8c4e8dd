//! DiLoCo (Douillard et al., 2023, Algorithm 1) on the exact reference store: the outer step is
//! torch's SGD with Nesterov momentum on `Δ = θ − mean_i θ_i`, checked at every outer step of a
//! run; every worker restarts from the global model; with `outer_lr = 1` and no momentum it is
//! local SGD with `h = H`.

use crate::common;

use common::*;
use dasim_sim::engine::{Collect, run_inspect};
use dasim_sim::prelude::*;

const SEED: u64 = 3;
const N: usize = 4;

/// Runs DiLoCo on `N` workers (one 2× straggler) for `seconds` on the exact store (shared, so
/// the hook can read it), calling `inspect` after every event.
fn run_diloco(
    cfg: &DilocoConfig,
    seconds: f64,
    mut inspect: impl FnMut(&Diloco, &ReferenceStore),
) -> (Outcome, Vec<EvalPoint>, Checked) {
    let mut store = Checked::new(quadratic_store(N, SEED));
    let shared = store.shared();
    let alg_cfg = AlgorithmConfig::from(AlgorithmKind::Diloco(cfg.clone()));
    let opt = optimizer(0.05, 0.5);
    let mut alg = Diloco::new(cfg, N);
    let mut points = Collect::default();
    let outcome = {
        let mut world = world(
            &alg_cfg,
            &cluster(N, &[(1, 2.0)]),
            &net(1.0, 20.0),
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
            &mut |a: &Diloco, _, _| inspect(a, &shared.borrow()),
        )
        .unwrap()
    };
    (outcome, points.0, store)
}

/// What the hook sees after an event: the outer steps so far, the workers' rows, the global
/// model and the outer momentum.
type Snapshot = (u64, Vec<Vec<f64>>, Vec<f64>, Vec<f64>);

fn rows(store: &ReferenceStore, rows: std::ops::Range<usize>) -> Vec<Vec<f64>> {
    rows.map(|r| store.params(r).to_vec()).collect()
}

#[test]
fn every_outer_step_is_nesterov_sgd_on_the_averaged_change() {
    for nesterov in [true, false] {
        let cfg = DilocoConfig {
            inner_steps: 5,
            outer_lr: 0.7,
            outer_momentum: 0.9,
            nesterov,
        };
        let (eta, mu) = (cfg.outer_lr, cfg.outer_momentum);
        // Before each event.
        let mut before: Option<Snapshot> = None;
        let mut checked = 0;
        run_diloco(&cfg, 1.5, |a, store| {
            let (g, m) = (a.global_row(), a.momentum_row());
            let now = (
                a.outer_steps(),
                rows(store, 0..N),
                store.params(g).to_vec(),
                store.params(m).to_vec(),
            );
            if let Some((steps, workers, g0, m0)) = &before
                && now.0 == steps + 1
            {
                // The event took the outer step, from the rows as they were before it.
                let dim = g0.len();
                let mean: Vec<f64> = (0..dim)
                    .map(|j| workers.iter().map(|x| x[j]).sum::<f64>() / N as f64)
                    .collect();
                let delta: Vec<f64> = (0..dim).map(|j| g0[j] - mean[j]).collect();
                let m1: Vec<f64> = (0..dim).map(|j| mu * m0[j] + delta[j]).collect();
                let g1: Vec<f64> = (0..dim)
                    .map(|j| {
                        let update = if nesterov {
                            delta[j] + mu * m1[j]
                        } else {
                            m1[j]
                        };
                        g0[j] - eta * update
                    })
                    .collect();
                assert_close(&now.3, &m1, "outer momentum");
                assert_close(&now.2, &g1, "global model");
                // Every worker starts the next round from the global model.
                for (w, x) in now.1.iter().enumerate() {
                    assert_eq!(x, &now.2, "worker {w} after outer step {}", now.0);
                }
                checked += 1;
            }
            before = Some(now);
        });
        assert!(checked >= 5, "{checked} outer steps checked");
    }
}

#[test]
fn with_unit_outer_rate_and_no_momentum_it_is_local_sgd() {
    let h = 4;
    let cfg = DilocoConfig {
        inner_steps: h,
        outer_lr: 1.0,
        outer_momentum: 0.0,
        nesterov: true,
    };
    let (diloco, diloco_points, diloco_store) = run_diloco(&cfg, 1.0, |_, _| {});
    let local = AlgorithmConfig::from(AlgorithmKind::LocalSgd(LocalSgdConfig {
        h,
        warmup_steps: None,
    }));
    let mut store = quadratic_store(N, SEED);
    let (outcome, points) = run_on(
        &local,
        &cluster(N, &[(1, 2.0)]),
        &net(1.0, 20.0),
        TopologyConfig::Ring {},
        &mut store,
        &stop_at(1.0),
        SEED,
    );
    // The same steps and the same ring traffic at the same times.
    assert_eq!(diloco.worker_steps, outcome.worker_steps);
    assert_eq!(diloco.network.messages, outcome.network.messages);
    assert_eq!(diloco.network.bytes, outcome.network.bytes);
    assert_eq!(diloco_points.len(), points.len());
    // The same models, up to rounding (a mean formed as a mix rather than an average).
    let d = diloco_store.inner.borrow();
    for w in 0..N {
        assert_close(d.params(w), store.params(w), &format!("worker {w}"));
    }
    assert!(
        outcome.worker_steps >= 3 * h as u64 * N as u64,
        "several rounds ran"
    );
}

#[test]
fn evaluation_measures_the_global_model_and_the_series_counts_outer_steps() {
    let cfg = DilocoConfig {
        inner_steps: 5,
        ..Default::default()
    };
    let (outcome, points, store) = run_diloco(&cfg, 1.0, |_, _| {});
    let steps: Vec<f64> = points
        .iter()
        .map(|p| {
            p.series
                .iter()
                .find(|(name, _)| *name == "outer_steps")
                .expect("an outer_steps series")
                .1
        })
        .collect();
    assert!(steps.windows(2).all(|w| w[0] <= w[1]), "{steps:?}");
    assert!(*steps.last().unwrap() >= 3.0, "{steps:?}");
    // The global model before the first outer step is the initial model: the first points
    // measure the same loss.
    assert_eq!(points[0].eval.loss, points[1].eval.loss);
    let last = points.last().unwrap();
    assert!(last.eval.loss < points[0].eval.loss, "DiLoCo trained");
    assert!(outcome.worker_steps > 0);
    drop(store);
}

#[test]
fn bad_options_are_refused_at_their_field() {
    for (options, field) in [
        ("inner_steps = 0", "inner_steps"),
        ("outer_lr = -0.5", "outer_lr"),
        ("outer_momentum = 1.0", "outer_momentum"),
    ] {
        let cfg: AlgorithmConfig = toml::from_str(&format!("kind = \"diloco\"\n{options}"))
            .unwrap_or_else(|e| panic!("{options}: {e}"));
        let mut store = quadratic_store(N, SEED);
        let opt = optimizer(0.05, 0.0);
        let mut world = world(
            &cfg,
            &cluster(N, &[]),
            &net(1.0, 20.0),
            TopologyConfig::Ring {},
            &mut store,
            &opt,
            SEED,
        );
        let err = dasim_sim::algorithms::run_algorithm(
            &cfg,
            &mut world,
            &stop_at(0.1),
            &mut Collect::default(),
        )
        .err()
        .unwrap_or_else(|| panic!("{options} was accepted"))
        .to_string();
        assert!(err.contains(field), "{options}: {err}");
    }
}
