//! DeMo (arXiv:2411.19870, bloc97/DeMo) on the exact reference store: every update is the
//! reference's step recomputed here with a DCT, top-k and mean over senders of its own (naive
//! sums, not the library's), from the rows and the gradients each worker computed; the replicas
//! stay equal; the all-gather carries one message of positions and values per worker and step;
//! the rate must be plain SGD's; bad options are refused at their field.

use crate::common;

use common::*;
use dasim_sim::algorithms::{Demo, DemoConfig};
use dasim_sim::engine::{Collect, run_inspect};
use dasim_sim::prelude::*;

const SEED: u64 = 13;
const N: usize = 4;
const LR: f64 = 0.05;

/// After an event: the updates so far, the workers' rows and their momenta.
type Snapshot = (u64, Vec<Vec<f64>>, Vec<Vec<f64>>);

/// Runs DeMo on `N` workers (worker 1 2× slower) for `seconds` on the exact store with two
/// tensors of 8; returns the outcome, a snapshot after every update (and the first, before
/// any), and the store with every gradient's value.
fn run_demo(cfg: &DemoConfig, seconds: f64) -> (Outcome, Vec<Snapshot>, Checked) {
    // The store's own rule is DeMo's: plain SGD at `LR`.
    let quadratic = ReferenceStore::new(Quadratic::new(16, 10.0, 0.1), N, optimizer(LR, 0.0), SEED);
    let mut store = Checked::new(quadratic.with_tensors(vec![0..8, 8..16]));
    let shared = store.shared();
    let entry = AlgorithmConfig::from(AlgorithmKind::Demo(cfg.clone()));
    let opt = optimizer(LR, 0.0);
    let mut snaps: Vec<Snapshot> = Vec::new();
    let outcome = {
        let mut world = world(
            &entry,
            &cluster(N, &[(1, 2.0)]),
            &net(1.0, 20.0),
            TopologyConfig::Ring {},
            &mut store,
            &opt,
            SEED,
        );
        let mut alg = Demo::new(cfg, N);
        run_inspect(
            &mut alg,
            &mut world,
            &stop_at(seconds),
            &mut Collect::default(),
            &mut |a: &Demo, _: &World<'_>, _| {
                if snaps.last().is_some_and(|s| s.0 == a.updates()) {
                    return;
                }
                let store = shared.borrow();
                let rows = |r: std::ops::Range<usize>| -> Vec<Vec<f64>> {
                    r.map(|i| store.params(i).to_vec()).collect()
                };
                let m = a.momenta_row();
                snaps.push((a.updates(), rows(0..N), rows(m..m + N)));
            },
        )
        .unwrap()
    };
    (outcome, snaps, store)
}

/// The orthonormal DCT-II of `x`, by its defining sum.
fn dct(x: &[f64]) -> Vec<f64> {
    let s = x.len() as f64;
    (0..x.len())
        .map(|k| {
            let a = if k == 0 {
                (1.0 / s).sqrt()
            } else {
                (2.0 / s).sqrt()
            };
            a * x
                .iter()
                .enumerate()
                .map(|(j, v)| {
                    v * (std::f64::consts::PI * (2 * j + 1) as f64 * k as f64 / (2.0 * s)).cos()
                })
                .sum::<f64>()
        })
        .collect()
}

/// Its inverse, the orthonormal DCT-III.
fn idct(y: &[f64]) -> Vec<f64> {
    let s = y.len() as f64;
    (0..y.len())
        .map(|j| {
            y.iter()
                .enumerate()
                .map(|(k, v)| {
                    let a = if k == 0 {
                        (1.0 / s).sqrt()
                    } else {
                        (2.0 / s).sqrt()
                    };
                    a * v * (std::f64::consts::PI * (2 * j + 1) as f64 * k as f64 / (2.0 * s)).cos()
                })
                .sum()
        })
        .collect()
}

/// The `k` largest coefficients of `y` by magnitude (ties to the lower position), the rest 0,
/// and which were kept.
fn top_k(y: &[f64], k: usize) -> (Vec<f64>, Vec<bool>) {
    let mut order: Vec<usize> = (0..y.len()).collect();
    order.sort_by(|&a, &b| y[b].abs().total_cmp(&y[a].abs()).then(a.cmp(&b)));
    let mut kept = vec![false; y.len()];
    order.iter().take(k).for_each(|&i| kept[i] = true);
    let values = (0..y.len())
        .map(|i| if kept[i] { y[i] } else { 0.0 })
        .collect();
    (values, kept)
}

/// Every update, recomputed: for every worker `δ ← βδ + ηg`, each chunk of 4 to its DCT, the
/// top 2 kept and removed from `δ`; the kept coefficients averaged over their senders,
/// transformed back, and `x ← x − η(sign(Q) + λx)` on every replica. The replicas stay equal.
#[test]
fn every_update_is_the_reference_step_recomputed_from_the_rows_and_gradients() {
    for weight_decay in [0.0, 0.1] {
        let cfg = DemoConfig {
            chunk: 4,
            top_k: 2,
            compression_decay: 0.9,
            weight_decay,
        };
        let (_, snaps, store) = run_demo(&cfg, 1.0);
        assert!(snaps.len() > 10, "{} updates", snaps.len());
        for pair in snaps.windows(2) {
            let ((k0, x0, d0), (k1, x1, d1)) = (&pair[0], &pair[1]);
            assert_eq!(k1, &(k0 + 1), "one update at a time");
            let round = *k0 as usize;
            let mut sums = [0.0; 16];
            let mut senders = [0u32; 16];
            for w in 0..N {
                let g = &store.grads[w][round];
                let delta: Vec<f64> = (0..16).map(|j| 0.9 * d0[w][j] + LR * g[j]).collect();
                let mut left = delta.clone();
                for c in (0..16).step_by(4) {
                    let (kept, which) = top_k(&dct(&delta[c..c + 4]), 2);
                    for (j, v) in idct(&kept).into_iter().enumerate() {
                        left[c + j] -= v;
                    }
                    for i in 0..4 {
                        if which[i] {
                            sums[c + i] += kept[i];
                            senders[c + i] += 1;
                        }
                    }
                }
                assert_close(
                    &d1[w],
                    &left,
                    &format!("update {k1}: worker {w}'s momentum"),
                );
            }
            let mean: Vec<f64> = (0..16)
                .map(|i| {
                    if senders[i] > 0 {
                        sums[i] / f64::from(senders[i])
                    } else {
                        0.0
                    }
                })
                .collect();
            let q: Vec<f64> = (0..16)
                .step_by(4)
                .flat_map(|c| idct(&mean[c..c + 4]))
                .collect();
            for w in 0..N {
                let want: Vec<f64> = (0..16)
                    .map(|j| {
                        let s = if q[j] > 1e-12 {
                            1.0
                        } else if q[j] < -1e-12 {
                            -1.0
                        } else {
                            0.0
                        };
                        x0[w][j] - LR * (s + weight_decay * x0[w][j])
                    })
                    .collect();
                assert_close(&x1[w], &want, &format!("update {k1}: worker {w}"));
                assert_eq!(x1[w], x1[0], "update {k1}: the replicas are equal");
            }
        }
    }
}

/// Each worker's message is 2 kept coefficients of each of 4 chunks, a 2-byte position and a
/// 4-byte value each: 48 bytes, and the all-gather forwards `n − 1` of them per worker and step.
#[test]
fn the_all_gather_carries_positions_and_values_of_the_kept_coefficients() {
    let cfg = DemoConfig {
        chunk: 4,
        top_k: 2,
        ..DemoConfig::default()
    };
    let (outcome, snaps, _) = run_demo(&cfg, 1.0);
    let rounds = snaps.last().unwrap().0;
    let per_round = (N * (N - 1)) as u64 * 48;
    assert!(rounds > 10, "{rounds} rounds");
    assert!(
        outcome.network.bytes == rounds * per_round
            || outcome.network.bytes == (rounds + 1) * per_round,
        "{} bytes for {rounds} rounds of {per_round}",
        outcome.network.bytes
    );
    assert_eq!(outcome.network.messages * 48, outcome.network.bytes);
}

/// DeMo is the optimizer: the `[optimizer]` gives its rate and must be plain SGD.
#[test]
fn the_optimizer_must_be_plain_sgd() {
    let entry: AlgorithmConfig = toml::from_str("kind = \"demo\"").unwrap();
    let e = entry
        .check_optimizer(&optimizer(0.01, 0.9), "optimizer")
        .unwrap_err();
    assert_eq!(e.path.to_string(), "optimizer.momentum", "{e}");
    assert!(e.hint.as_deref().unwrap().contains("weight_decay"), "{e}");
    entry
        .check_optimizer(&optimizer(0.01, 0.0), "optimizer")
        .unwrap();
}

/// Bad options are refused at their field, with a hint.
#[test]
fn bad_options_are_refused_at_their_field() {
    let topology = Topology::build(&TopologyConfig::Ring {}, 4, &BuildEnv::new(1)).unwrap();
    for (options, field) in [
        ("chunk = 0", "chunk"),
        ("chunk = 300", "chunk"),
        ("top_k = 0", "top_k"),
        ("chunk = 2\ntop_k = 5", "top_k"),
        ("compression_decay = 1.0", "compression_decay"),
        ("weight_decay = -1.0", "weight_decay"),
    ] {
        let entry: AlgorithmConfig = toml::from_str(&format!("kind = \"demo\"\n{options}"))
            .unwrap_or_else(|e| panic!("{options}: {e}"));
        let err = entry
            .validate(&topology, "algorithms[0]", None)
            .expect_err(options);
        assert_eq!(err.path.to_string(), format!("algorithms[0].{field}"));
        assert!(err.hint.is_some(), "{options}: {err}");
    }
    let entry: AlgorithmConfig = toml::from_str("kind = \"demo\"").unwrap();
    entry.validate(&topology, "algorithms[0]", None).unwrap();
}
