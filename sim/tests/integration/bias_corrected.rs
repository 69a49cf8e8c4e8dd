//! The bias-corrected decentralized methods on the exact reference store: gradient tracking
//! (DSGT, Pu & Nedić 2021), exact diffusion (Yuan et al. 2019) and D² (Tang et al. 2018). Each
//! method's invariant at every iteration, exact convergence on heterogeneous data where D-PSGD
//! keeps its bias, and the refusals.

use crate::common;

use common::*;
use dasim_sim::engine::{Collect, run_inspect};
use dasim_sim::prelude::*;
use dasim_sim::store::OptimizerKind;

const SEED: u64 = 9;

/// A 6-coordinate quadratic whose workers have different optima (worker `i`'s `b_i`), with
/// gradient noise `noise`.
fn heterogeneous(workers: usize, noise: f64, lr: f64) -> ReferenceStore {
    let optima: Vec<Vec<f64>> = (0..workers)
        .map(|i| (0..6).map(|k| ((i * 7 + k * 3) % 5) as f64 - 2.0).collect())
        .collect();
    let problem = Quadratic::new(6, 4.0, noise).heterogeneous(optima);
    ReferenceStore::new(problem, workers, optimizer(lr, 0.0), SEED)
}

/// Runs `alg` on the workers of `store` on a ring of equal workers until `seconds`, calling
/// `inspect` after every event with the algorithm and the store.
fn run<A: Algorithm>(
    alg: A,
    entry: &AlgorithmConfig,
    store: ReferenceStore,
    lr: f64,
    seconds: f64,
    inspect: impl FnMut(&A, &mut ReferenceStore),
) -> (Outcome, Checked) {
    run_over(
        TopologyConfig::Ring {},
        alg,
        entry,
        store,
        lr,
        seconds,
        inspect,
    )
}

/// [`run`] on `topology`.
fn run_over<A: Algorithm>(
    topology: TopologyConfig,
    mut alg: A,
    entry: &AlgorithmConfig,
    store: ReferenceStore,
    lr: f64,
    seconds: f64,
    mut inspect: impl FnMut(&A, &mut ReferenceStore),
) -> (Outcome, Checked) {
    let n = store.workers();
    let mut store = Checked::new(store);
    let shared = store.shared();
    let opt = optimizer(lr, 0.0);
    let outcome = {
        let mut world = world(
            entry,
            &cluster(n, &[]),
            &net(1.0, 100.0),
            topology,
            &mut store,
            &opt,
            SEED,
        );
        run_inspect(
            &mut alg,
            &mut world,
            &stop_at(seconds),
            &mut Collect::default(),
            &mut |a: &A, _, _| inspect(a, &mut shared.borrow_mut()),
        )
        .unwrap()
    };
    (outcome, store)
}

fn ring(n: usize) -> Topology {
    Topology::build(&TopologyConfig::Ring {}, n, &BuildEnv::new(SEED)).unwrap()
}

fn gt(n: usize) -> (GradientTracking, AlgorithmConfig) {
    gt_ordered(n, UpdateOrder::AdaptThenCombine)
}

fn gt_ordered(n: usize, update: UpdateOrder) -> (GradientTracking, AlgorithmConfig) {
    let cfg = GradientTrackingConfig {
        update,
        ..GradientTrackingConfig::default()
    };
    (
        GradientTracking::new(&cfg, &ring(n)),
        AlgorithmConfig::from(cfg),
    )
}

#[test]
fn the_trackers_sum_is_the_sum_of_the_latest_gradients_at_every_iteration() {
    let n = 6;
    let (alg, entry) = gt(n);
    let mut cuts = 0;
    run(
        alg,
        &entry,
        heterogeneous(n, 0.3, 0.05),
        0.05,
        0.5,
        |a, store| {
            // Equal workers compute together: once every one has its tracker of iteration k (and
            // sent it), before any has mixed, the rows are one iteration's.
            let k = a.iteration(0);
            if !(0..n).all(|w| a.has_sent(w) && a.iteration(w) == k) {
                return;
            }
            let mut y = [0.0; 6];
            let mut g = [0.0; 6];
            for w in 0..n {
                let grad = store.gradient_values(a.last_gradient(w).expect("computed"));
                for (c, v) in store.params(a.tracker_row(w)).iter().enumerate() {
                    y[c] += v;
                    g[c] += grad[c];
                }
            }
            for c in 0..6 {
                assert!(
                    (y[c] - g[c]).abs() <= 1e-10 * (1.0 + g[c].abs()),
                    "iteration {k}, coordinate {c}: Σy = {}, Σg = {}",
                    y[c],
                    g[c]
                );
            }
            cuts += 1;
        },
    );
    assert!(cuts >= 20, "{cuts} iterations checked");
}

/// The worst suboptimality over the workers' models on the average objective.
fn worst_suboptimality(store: &ReferenceStore, n: usize) -> f64 {
    (0..n)
        .map(|w| store.problem().value(store.params(w)))
        .fold(0.0, f64::max)
}

/// D-PSGD (adapt-then-combine, the order of the corrected methods) on the same problem: its
/// worst suboptimality after `seconds`.
fn dpsgd_suboptimality(n: usize, lr: f64, seconds: f64) -> f64 {
    let cfg = DpsgdConfig {
        update: UpdateOrder::AdaptThenCombine,
        ..DpsgdConfig::default()
    };
    let dpsgd = Dpsgd::new(&cfg, &ring(n));
    let entry = AlgorithmConfig::from(cfg);
    let (_, store) = run(
        dpsgd,
        &entry,
        heterogeneous(n, 0.0, lr),
        lr,
        seconds,
        |_, _| (),
    );
    worst_suboptimality(&store.shared().borrow(), n)
}

#[test]
fn on_heterogeneous_data_tracking_converges_linearly_to_the_optimum_where_dpsgd_keeps_its_bias() {
    let (n, lr, seconds) = (8, 0.05, 10.0);
    let biased = dpsgd_suboptimality(n, lr, seconds);
    // DSGT (adapt-then-combine) and DIGing (combine-then-adapt).
    for update in [UpdateOrder::AdaptThenCombine, UpdateOrder::CombineThenAdapt] {
        let (alg, entry) = gt_ordered(n, update);
        let mut at_half = None;
        let (_, store) = run(
            alg,
            &entry,
            heterogeneous(n, 0.0, lr),
            lr,
            seconds,
            |a, s| {
                if at_half.is_none() && a.iteration(0) == 400 {
                    at_half = Some(worst_suboptimality(s, n));
                }
            },
        );
        let tracking = worst_suboptimality(&store.shared().borrow(), n);
        // About 900 iterations: the exact optimum (f − f* below 1e-8, linear convergence: it
        // was far above at 400), and D-PSGD's constant-step bias orders of magnitude above it.
        let half = at_half.expect("400 iterations");
        assert!(tracking < 1e-8, "{update:?}: f − f* = {tracking:e}");
        assert!(
            half > 1e3 * tracking,
            "{update:?}: at 400 iterations {half:e}, at the end {tracking:e}"
        );
    }
    assert!(biased > 1e-4, "D-PSGD: f − f* = {biased:e}, no bias?");
}

/// One iteration of both orders against the formulas written out: from equal models and
/// trackers of iteration k, DSGT's model is `Σ_j W_ij (x_j − α y_j)`, DIGing's
/// `Σ_j W_ij x_j − α y_i`.
#[test]
fn the_two_orders_take_dsgt_and_diging_steps() {
    let (n, lr) = (6, 0.05);
    for update in [UpdateOrder::AdaptThenCombine, UpdateOrder::CombineThenAdapt] {
        let (alg, entry) = gt_ordered(n, update);
        // The iteration, models and trackers once every worker has sent.
        type Sent = (u64, Vec<Vec<f64>>, Vec<Vec<f64>>);
        let mut before: Option<Sent> = None;
        let mut checked = 0;
        run(
            alg,
            &entry,
            heterogeneous(n, 0.3, lr),
            lr,
            0.3,
            |a: &GradientTracking, store| {
                let k = a.iteration(0);
                let sent = (0..n).all(|w| a.has_sent(w) && a.iteration(w) == k);
                let mixed =
                    |from: u64| (0..n).all(|w| !a.has_sent(w) && a.iteration(w) == from + 1);
                if sent && before.is_none() {
                    before = Some((
                        k,
                        (0..n).map(|w| store.params(w).to_vec()).collect(),
                        (0..n)
                            .map(|w| store.params(a.tracker_row(w)).to_vec())
                            .collect(),
                    ));
                } else if let Some((k, x, y)) = before.take_if(|(k, _, _)| mixed(*k)) {
                    for i in 0..n {
                        let left = (i + n - 1) % n;
                        let right = (i + 1) % n;
                        // The ring's Metropolis weights: 1/3 each.
                        let w = 1.0 / 3.0;
                        for c in 0..6 {
                            let mix = w * (x[i][c] + x[left][c] + x[right][c]);
                            let want = match update {
                                UpdateOrder::AdaptThenCombine => {
                                    mix - lr * w * (y[i][c] + y[left][c] + y[right][c])
                                }
                                UpdateOrder::CombineThenAdapt => mix - lr * y[i][c],
                            };
                            let got = store.params(i)[c];
                            assert!(
                                (got - want).abs() <= 1e-12 * (1.0 + want.abs()),
                                "{update:?}, iteration {k}, worker {i}: {got} against {want}"
                            );
                        }
                    }
                    checked += 1;
                }
            },
        );
        assert!(checked >= 10, "{update:?}: {checked} iterations checked");
    }
}

#[test]
fn a_time_varying_or_disconnected_graph_and_a_stateful_optimizer_are_refused() {
    for entry in [
        AlgorithmConfig::from(GradientTrackingConfig::default()),
        AlgorithmConfig::from(AlgorithmKind::ExactDiffusion(
            ExactDiffusionConfig::default(),
        )),
        AlgorithmConfig::from(AlgorithmKind::D2(ExactDiffusionConfig::default())),
    ] {
        refusals(&entry, true);
    }
    // Push-DIGing is the one for time-varying directed graphs; it needs them strongly connected.
    let push = AlgorithmConfig::from(PushDigingConfig::default());
    refusals(&push, false);
    let schedule = Topology::build(
        &TopologyConfig::OnePeerExponential {},
        8,
        &BuildEnv::new(SEED),
    )
    .unwrap();
    assert!(push.validate(&schedule, "algorithms[0]", None).is_ok());
}

fn refusals(entry: &AlgorithmConfig, static_only: bool) {
    let schedule = Topology::build(
        &TopologyConfig::OnePeerExponential {},
        8,
        &BuildEnv::new(SEED),
    )
    .unwrap();
    let two_rings = Topology::from_edges(
        8,
        [
            (0, 1),
            (1, 2),
            (2, 3),
            (3, 0),
            (4, 5),
            (5, 6),
            (6, 7),
            (7, 4),
        ],
    );
    let mut graphs = vec![(two_rings, "connected")];
    if static_only {
        graphs.push((schedule, "time-varying schedule"));
    }
    for (t, needle) in graphs {
        let e = entry.validate(&t, "algorithms[0]", None).unwrap_err();
        assert_eq!(e.path.to_string(), "topology.kind", "{e}");
        assert!(e.to_string().contains(needle), "{e}");
    }
    for (opt, field) in [
        (optimizer(0.1, 0.9), "optimizer.momentum"),
        (
            OptimizerConfig {
                weight_decay: 1e-4,
                ..optimizer(0.1, 0.0)
            },
            "optimizer.weight_decay",
        ),
        (
            OptimizerConfig {
                kind: OptimizerKind::Adam,
                ..optimizer(0.1, 0.0)
            },
            "optimizer.kind",
        ),
    ] {
        let e = entry.check_optimizer(&opt, "algorithms[0]").unwrap_err();
        assert_eq!(e.path.to_string(), field, "{e}");
        assert!(e.to_string().contains("plain SGD"), "{e}");
    }
    assert!(
        entry
            .check_optimizer(&optimizer(0.1, 0.0), "algorithms[0]")
            .is_ok()
    );
}

fn exact_diffusion(n: usize, combine: Combine) -> (ExactDiffusion, AlgorithmConfig) {
    let cfg = ExactDiffusionConfig::default();
    let alg = ExactDiffusion::new(&cfg, combine, &ring(n));
    let kind = match combine {
        Combine::Halved => AlgorithmKind::ExactDiffusion(cfg),
        Combine::Plain => AlgorithmKind::D2(cfg),
    };
    (alg, AlgorithmConfig::from(kind))
}

/// The gradient of the heterogeneous quadratic without noise: worker `w`'s `a ⊙ (x − b_w)`.
fn exact_gradient(store: &ReferenceStore, w: usize, x: &[f64]) -> Vec<f64> {
    let p = store.problem();
    x.iter()
        .zip(&p.curvature)
        .zip(&p.worker_optima[w])
        .map(|((x, a), b)| a * (x - b))
        .collect()
}

/// Exact diffusion and D² take the steps of D²'s second-order form, written out independently
/// of the adapt–correct–combine rows: `X¹ = M(X⁰ − αG(X⁰))` and, for `k ≥ 1`,
/// `X^{k+1} = M(2X^k − X^{k−1} − αG(X^k) + αG(X^{k−1}))`, with `M = (I + W)/2` or `W`. Without
/// the correction (`φ = ψ`, D-PSGD's step) the second and later iterations differ.
fn follows_the_second_order_recursion(n: usize, combine: Combine) {
    let lr = 0.05;
    let (alg, entry) = exact_diffusion(n, combine);
    // X⁰: the models before the first event (the inspection runs after each event).
    let fresh = heterogeneous(n, 0.0, lr);
    let mut history: Vec<Vec<Vec<f64>>> = vec![(0..n).map(|w| fresh.params(w).to_vec()).collect()];
    let mut checked = 0;
    run(
        alg,
        &entry,
        heterogeneous(n, 0.0, lr),
        lr,
        0.5,
        |a: &ExactDiffusion, store| {
            // Equal workers compute together: once every one has combined iteration k and none
            // has stepped again, the rows are X^k.
            let k = a.iteration(0);
            if history.len() as u64 > k || !(0..n).all(|w| a.iteration(w) == k && !a.has_sent(w)) {
                return;
            }
            let x: Vec<Vec<f64>> = (0..n).map(|w| store.params(w).to_vec()).collect();
            if let Some(prev) = history.last() {
                let before = history.len().checked_sub(2).map(|i| &history[i]);
                for (w, got) in x.iter().enumerate() {
                    let (mww, row) = a.weights(w);
                    let half = |j: usize| -> Vec<f64> {
                        let g = exact_gradient(store, j, &prev[j]);
                        match before {
                            None => (0..6).map(|c| prev[j][c] - lr * g[c]).collect(),
                            Some(before) => {
                                let g_old = exact_gradient(store, j, &before[j]);
                                (0..6)
                                    .map(|c| {
                                        2.0 * prev[j][c] - before[j][c] - lr * g[c] + lr * g_old[c]
                                    })
                                    .collect()
                            }
                        }
                    };
                    let mut want: Vec<f64> = half(w).iter().map(|v| mww * v).collect();
                    for &(j, mwj) in row {
                        for (c, v) in half(j).iter().enumerate() {
                            want[c] += mwj * v;
                        }
                    }
                    for (c, (got, want)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (got - want).abs() <= 1e-10 * (1.0 + want.abs()),
                            "{combine:?}, iteration {k}, worker {w}, coordinate {c}: {got} against {want}"
                        );
                    }
                }
                checked += 1;
            }
            history.push(x);
        },
    );
    assert!(checked >= 20, "{checked} iterations checked");
}

#[test]
fn exact_diffusion_and_d2_take_the_steps_of_the_second_order_form() {
    follows_the_second_order_recursion(6, Combine::Halved);
    follows_the_second_order_recursion(7, Combine::Plain);
}

#[test]
fn the_corrections_sum_to_zero_after_every_iteration() {
    // With noise: the invariant of the correction, Σx^k = Σψ^k (Σd^k = 0), holds for any
    // gradients.
    let n = 6;
    let (alg, entry) = exact_diffusion(n, Combine::Halved);
    let mut cuts = 0;
    run(
        alg,
        &entry,
        heterogeneous(n, 0.3, 0.05),
        0.05,
        0.5,
        |a: &ExactDiffusion, store| {
            let k = a.iteration(0);
            if !(0..n).all(|w| a.iteration(w) == k && !a.has_sent(w)) {
                return;
            }
            for c in 0..6 {
                let d: f64 = (0..n).map(|w| store.params(a.correction_row(w))[c]).sum();
                assert!(d.abs() <= 1e-12, "iteration {k}, coordinate {c}: Σd = {d}");
            }
            cuts += 1;
        },
    );
    assert!(cuts >= 20, "{cuts} iterations checked");
}

#[test]
fn on_heterogeneous_data_exact_diffusion_and_d2_converge_linearly_where_dpsgd_keeps_its_bias() {
    let (lr, seconds) = (0.05, 10.0);
    // D² on an odd ring: an even ring's Metropolis W has λ_min = −1/3, which D² refuses.
    for (n, combine) in [(8, Combine::Halved), (7, Combine::Plain)] {
        let (alg, entry) = exact_diffusion(n, combine);
        let mut at_quarter = None;
        let (_, store) = run(
            alg,
            &entry,
            heterogeneous(n, 0.0, lr),
            lr,
            seconds,
            |a: &ExactDiffusion, s| {
                if at_quarter.is_none() && a.iteration(0) == 250 {
                    at_quarter = Some(worst_suboptimality(s, n));
                }
            },
        );
        let exact = worst_suboptimality(&store.shared().borrow(), n);
        let biased = dpsgd_suboptimality(n, lr, seconds);
        let quarter = at_quarter.expect("250 iterations");
        assert!(exact < 1e-8, "{combine:?}: f − f* = {exact:e}");
        assert!(
            quarter > 1e3 * exact,
            "{combine:?}: at 250 iterations {quarter:e}, at the end {exact:e}"
        );
        assert!(biased > 1e-4, "D-PSGD: f − f* = {biased:e}, no bias?");
    }
}

#[test]
fn d2_refuses_a_mixing_matrix_with_an_eigenvalue_at_or_below_minus_one_third() {
    let d2 = AlgorithmConfig::from(AlgorithmKind::D2(ExactDiffusionConfig::default()));
    let e = d2.validate(&ring(8), "algorithms[1]", None).unwrap_err();
    assert_eq!(e.path.to_string(), "algorithms[1].weights", "{e}");
    assert!(
        e.to_string().contains("−1/3") && e.to_string().contains("-0.333333"),
        "{e}"
    );
    // An odd ring's smallest eigenvalue is above −1/3 (1/3 + 2/3·cos(6π/7) ≈ −0.267), and exact
    // diffusion's (I + W)/2 is positive on any graph.
    assert!(d2.validate(&ring(7), "algorithms[1]", None).is_ok());
    let ed = AlgorithmConfig::from(AlgorithmKind::ExactDiffusion(
        ExactDiffusionConfig::default(),
    ));
    assert!(ed.validate(&ring(8), "algorithms[1]", None).is_ok());
    let lambda = ExactDiffusionConfig::default().smallest_eigenvalue(&ring(7));
    let want = 1.0 / 3.0 + 2.0 / 3.0 * (6.0 * std::f64::consts::PI / 7.0).cos();
    assert!((lambda - want).abs() < 1e-12, "{lambda} against {want}");
}

fn schedule(topology: &TopologyConfig, n: usize) -> PeerSchedule {
    Topology::build(topology, n, &BuildEnv::new(SEED))
        .unwrap()
        .schedule()
        .clone()
}

/// The worst suboptimality over the de-biased models `u_i / v_i` on the average objective.
fn worst_debiased(store: &ReferenceStore, weights: &[f64]) -> f64 {
    weights
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let x: Vec<f64> = store.params(i).iter().map(|u| u / v).collect();
            store.problem().value(&x)
        })
        .fold(0.0, f64::max)
}

#[test]
fn push_diging_keeps_the_weights_and_the_trackers_sums_at_every_iteration() {
    // A random peer per iteration: in-degrees differ, so the weights move away from 1.
    let n = 6;
    let topology = TopologyConfig::RandomPeer {};
    let alg = PushDiging::new(&PushDigingConfig::default(), &schedule(&topology, n));
    let entry = AlgorithmConfig::from(PushDigingConfig::default());
    let (mut cuts, mut spread) = (0, 0.0_f64);
    run_over(
        topology,
        alg,
        &entry,
        heterogeneous(n, 0.3, 0.05),
        0.05,
        0.5,
        |a: &PushDiging, store| {
            // Once every node has mixed iteration k − 1 and none has pushed k, no share is in
            // flight: the rows and weights hold everything.
            let k = a.iteration(0);
            if k == 0 || !(0..n).all(|i| a.iteration(i) == k && !a.has_sent(i)) {
                return;
            }
            let total: f64 = (0..n).map(|i| a.weight(i)).sum();
            assert!(
                (total - n as f64).abs() < 1e-12,
                "iteration {k}: Σv = {total}"
            );
            let (lo, hi) = (0..n).fold((f64::INFINITY, 0.0_f64), |(lo, hi), i| {
                (lo.min(a.weight(i)), hi.max(a.weight(i)))
            });
            spread = spread.max(hi - lo);
            for c in 0..6 {
                let y: f64 = (0..n).map(|i| store.params(a.tracker_row(i))[c]).sum();
                let g: f64 = (0..n)
                    .map(|i| store.gradient_values(a.last_gradient(i).expect("computed"))[c])
                    .sum();
                assert!(
                    (y - g).abs() <= 1e-10 * (1.0 + g.abs()),
                    "iteration {k}, coordinate {c}: Σy = {y}, Σg = {g}"
                );
            }
            cuts += 1;
        },
    );
    assert!(cuts >= 20, "{cuts} iterations checked");
    assert!(
        spread > 0.1,
        "the weights stayed equal ({spread}): push-sum not exercised"
    );
}

#[test]
fn on_a_time_varying_directed_graph_push_diging_converges_linearly_where_sgp_keeps_its_bias() {
    let (n, lr, seconds) = (8, 0.05, 10.0);
    for topology in [
        TopologyConfig::OnePeerExponential {},
        TopologyConfig::RandomPeer {},
    ] {
        let name = format!("{topology:?}");
        let alg = PushDiging::new(&PushDigingConfig::default(), &schedule(&topology, n));
        let entry = AlgorithmConfig::from(PushDigingConfig::default());
        let mut at_quarter = None;
        let mut weights = Vec::new();
        let (_, store) = run_over(
            topology.clone(),
            alg,
            &entry,
            heterogeneous(n, 0.0, lr),
            lr,
            seconds,
            |a: &PushDiging, s| {
                weights = (0..n).map(|i| a.weight(i)).collect();
                if at_quarter.is_none() && a.iteration(0) == 250 {
                    at_quarter = Some(worst_debiased(s, &weights));
                }
            },
        );
        let exact = worst_debiased(&store.shared().borrow(), &weights);
        let quarter = at_quarter.expect("250 iterations");
        assert!(exact < 1e-8, "{name}: f − f* = {exact:e}");
        assert!(
            quarter > 1e3 * exact,
            "{name}: at 250 {quarter:e}, at the end {exact:e}"
        );

        let sgp = Sgp::synchronous(&SgpConfig::default(), &schedule(&topology, n));
        let entry = AlgorithmConfig::from(SgpConfig::default());
        let mut weights = Vec::new();
        let (_, store) = run_over(
            topology,
            sgp,
            &entry,
            heterogeneous(n, 0.0, lr),
            lr,
            seconds,
            |a: &Sgp, _| weights = a.weights(),
        );
        let biased = worst_debiased(&store.shared().borrow(), &weights);
        assert!(biased > 1e-4, "{name}: SGP f − f* = {biased:e}, no bias?");
    }
}

/// On a ring every node has two out-peers and two in-peers: push-sum's shares are 1/3, the ring's
/// Metropolis weights, the weights stay 1, and Push-DIGing takes DSGT's steps.
#[test]
fn push_diging_on_a_ring_is_gradient_tracking() {
    let (n, lr) = (6, 0.05);
    let push = PushDiging::new(
        &PushDigingConfig::default(),
        &schedule(&TopologyConfig::Ring {}, n),
    );
    let entry = AlgorithmConfig::from(PushDigingConfig::default());
    let (_, pushed) = run(push, &entry, heterogeneous(n, 0.3, lr), lr, 0.5, |a, _| {
        // Between pushes (a node keeps 1/3 of its weight while its shares travel).
        for i in (0..n).filter(|&i| !a.has_sent(i)) {
            assert!(
                (a.weight(i) - 1.0).abs() < 1e-15,
                "node {i}: v = {}",
                a.weight(i)
            );
        }
    });
    let (gt, entry) = gt(n);
    let (_, tracked) = run(gt, &entry, heterogeneous(n, 0.3, lr), lr, 0.5, |_, _| ());
    let (pushed, tracked) = (pushed.shared(), tracked.shared());
    let (pushed, tracked) = (pushed.borrow(), tracked.borrow());
    for i in 0..n {
        for (c, (p, t)) in pushed.params(i).iter().zip(tracked.params(i)).enumerate() {
            assert!(
                (p - t).abs() <= 1e-12 * (1.0 + t.abs()),
                "worker {i}, coordinate {c}: Push-DIGing {p}, gradient tracking {t}"
            );
        }
    }
}

/// Each method through the registry's build, as a scenario runs it: the same seed gives the same
/// events, network and losses bit for bit; another seed (minibatch noise, the random peers, the
/// straggler's jitter) another run.
#[test]
fn every_bias_corrected_method_is_reproducible_from_its_seed() {
    let entries: [(AlgorithmConfig, TopologyConfig, usize); 4] = [
        (
            AlgorithmConfig::from(GradientTrackingConfig::default()),
            TopologyConfig::Ring {},
            8,
        ),
        (
            AlgorithmConfig::from(AlgorithmKind::ExactDiffusion(
                ExactDiffusionConfig::default(),
            )),
            TopologyConfig::Ring {},
            8,
        ),
        (
            AlgorithmConfig::from(AlgorithmKind::D2(ExactDiffusionConfig::default())),
            TopologyConfig::Ring {},
            7,
        ),
        (
            AlgorithmConfig::from(PushDigingConfig::default()),
            TopologyConfig::RandomPeer {},
            8,
        ),
    ];
    for (entry, topology, n) in &entries {
        // Push-DIGing's step on a node's de-biased model is α/v_i: on a random schedule a node
        // left unchosen for several iterations has its weight halved each time (to 0.01 on one
        // schedule of seed 4), and at α = 0.05 on this curvature (up to 10) it diverges.
        let lr = 0.02;
        let go = |seed: u64| {
            let mut store =
                ReferenceStore::new(Quadratic::new(16, 10.0, 0.1), *n, optimizer(lr, 0.0), seed);
            let opt = optimizer(lr, 0.0);
            let mut world = world(
                entry,
                &cluster(*n, &[(1, 2.5)]),
                &net(10.0, 5.0),
                topology.clone(),
                &mut store,
                &opt,
                seed,
            );
            let mut points = Collect::default();
            let outcome =
                dasim_sim::algorithms::run_algorithm(entry, &mut world, &stop_at(0.3), &mut points)
                    .unwrap();
            let losses: Vec<u64> = points.0.iter().map(|p| p.eval.loss.to_bits()).collect();
            (outcome.events, outcome.network, losses)
        };
        let a = go(4);
        assert_eq!(a, go(4), "{}", entry.label());
        assert_ne!(a.2, go(5).2, "{}", entry.label());
        let (first, last) = (f64::from_bits(a.2[0]), f64::from_bits(*a.2.last().unwrap()));
        assert!(
            last < first / 2.0,
            "{}: loss {first} -> {last}",
            entry.label()
        );
    }
}
