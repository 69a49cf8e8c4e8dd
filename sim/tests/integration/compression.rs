//! Compressed communication on the exact reference store: the compressors' expectations and
//! contraction as the papers state them (statistically, with fixed seeds) and their sizes on the
//! wire; CHOCO-SGD (Koloskova, Stich & Jaggi, 2019) checked at every event against the paper's
//! public copies and its average-preserving gossip, and reducing to D-PSGD without compression;
//! all-reduce with PowerSGD (Vogels et al., 2019): two rings by the closed form, exact at full
//! rank, and error feedback that loses nothing; bad options refused.

use crate::common;

use common::*;
use dasim_sim::algorithms::choco::Choco;
use dasim_sim::clock::rng::{StreamKind, stream};
use dasim_sim::engine::{Collect, run_inspect};
use dasim_sim::prelude::*;
use dasim_sim::store::reference::Quadratic;

const SEED: u64 = 9;
const DIM: usize = 12;

fn header_free(bandwidth_gbps: f64, latency_us: f64) -> NetworkConfig {
    NetworkConfig {
        header_bytes: 0,
        ..net(bandwidth_gbps, latency_us)
    }
}

fn choco(compression: Compression, gamma: f64) -> ChocoConfig {
    ChocoConfig {
        consensus_lr: gamma,
        compression,
        weights: MixingWeights::Metropolis,
    }
}

#[test]
fn compressors_have_the_expectations_and_contraction_the_papers_state() {
    let d = 40;
    let x: Vec<f64> = (0..d)
        .map(|i| ((i * 17 % 23) as f64 - 11.0) / 5.0)
        .collect();
    let norm2: f64 = x.iter().map(|v| v * v).sum();
    let draws = 20_000;
    let cases = [
        // random-k keeps k of d coordinates: E[Q(x)] = (k/d)·x, δ = k/d.
        (Compression::RandomK { fraction: 0.25 }, 0.25, 0.25),
        // QSGD divided by τ: E[Q(x)] = x/τ, and δ = 1/τ.
        (
            Compression::Qsgd { levels: 4 },
            1.0 / Compression::qsgd_tau(d, 4),
            1.0 / Compression::qsgd_tau(d, 4),
        ),
    ];
    for (c, mean_scale, delta) in cases {
        let mut rng = stream(SEED, StreamKind::Algorithm, 0);
        let mut sum = vec![0.0; d];
        let mut sq = vec![0.0; d];
        let mut error = 0.0;
        for _ in 0..draws {
            let mut q = x.clone();
            c.apply(&mut q, &mut rng);
            for k in 0..d {
                sum[k] += q[k];
                sq[k] += q[k] * q[k];
            }
            error += q
                .iter()
                .zip(&x)
                .map(|(a, b)| (a - b) * (a - b))
                .sum::<f64>();
        }
        for k in 0..d {
            let mean = sum[k] / draws as f64;
            let var = sq[k] / draws as f64 - mean * mean;
            let se = (var.max(0.0) / draws as f64).sqrt();
            let want = mean_scale * x[k];
            assert!(
                (mean - want).abs() <= 5.0 * se + 1e-12,
                "{}: coordinate {k}: mean {mean} vs {want} (se {se})",
                c.name()
            );
        }
        let error = error / draws as f64;
        assert!(
            error <= (1.0 - delta) * norm2 * 1.01,
            "{}: E‖Q(x) − x‖² = {error} > (1 − δ)‖x‖² = {}",
            c.name(),
            (1.0 - delta) * norm2
        );
    }
    // The deterministic ones are contractions too: top-k with δ = k/d, sign with δ = ‖x‖₁²/(d‖x‖₂²).
    let mut rng = stream(SEED, StreamKind::Algorithm, 0);
    let mut q = x.clone();
    Compression::TopK { fraction: 0.25 }.apply(&mut q, &mut rng);
    let err: f64 = q.iter().zip(&x).map(|(a, b)| (a - b) * (a - b)).sum();
    assert!(err <= 0.75 * norm2);
    assert_eq!(q.iter().filter(|v| **v != 0.0).count(), 10);
    let mut q = x.clone();
    Compression::Sign {}.apply(&mut q, &mut rng);
    let l1: f64 = x.iter().map(|v| v.abs()).sum();
    let err: f64 = q.iter().zip(&x).map(|(a, b)| (a - b) * (a - b)).sum();
    assert!((err - (norm2 - l1 * l1 / d as f64)).abs() < 1e-9 * norm2);
}

/// Runs CHOCO-SGD on `n` workers of a ring until `steps` worker steps, calling `inspect` after
/// every event; returns the outcome.
fn run_choco<F>(
    cfg: &ChocoConfig,
    store: ReferenceStore,
    net_cfg: &NetworkConfig,
    stop: &RunConfig,
    mut inspect: F,
) -> (Outcome, Checked)
where
    F: FnMut(&Choco, &ReferenceStore, &[f64]),
{
    let n = store.workers();
    let mut store = Checked::new(store);
    let shared = store.shared();
    let drift = store.drift();
    let entry = AlgorithmConfig::from(cfg.clone());
    let opt = optimizer(0.05, 0.0);
    let outcome = {
        let mut world = world(
            &entry,
            &cluster(n, &[(2, 3.0)]),
            net_cfg,
            TopologyConfig::Ring {},
            &mut store,
            &opt,
            SEED,
        );
        let mut alg = Choco::new(cfg, &world.topology, SEED);
        run_inspect(
            &mut alg,
            &mut world,
            stop,
            &mut Collect::default(),
            &mut |a: &Choco, _, _| inspect(a, &shared.borrow(), &drift.borrow()),
        )
        .unwrap()
    };
    (outcome, store)
}

fn store(n: usize) -> ReferenceStore {
    ReferenceStore::new(
        Quadratic::new(DIM, 10.0, 0.2),
        n,
        optimizer(0.05, 0.0),
        SEED,
    )
}

#[test]
fn choco_messages_have_the_compressors_sizes_on_the_wire() {
    let n = 6;
    let p = DIM as u64;
    for (c, bytes) in [
        // k = ⌊0.25·12⌋ = 3 values and indices.
        (Compression::TopK { fraction: 0.25 }, 3 * 8),
        (Compression::RandomK { fraction: 0.25 }, 3 * 4 + 8),
        (Compression::Sign {}, 2 + 4),
        // 16 levels: 6 bits per coordinate, 72 bits = 9 bytes, and the norm.
        (Compression::Qsgd { levels: 16 }, 9 + 4),
    ] {
        let steps = 60;
        let (outcome, _) = run_choco(
            &choco(c.clone(), 0.3),
            store(n),
            &header_free(1.0, 10.0),
            &stop_after_steps(steps),
            |_, _, _| {},
        );
        // A worker sends its difference to its two ring neighbours when its step is done.
        assert_eq!(outcome.worker_steps, steps, "{}", c.name());
        assert_eq!(outcome.network.messages, 2 * steps, "{}", c.name());
        assert_eq!(outcome.network.bytes, 2 * steps * bytes, "{}", c.name());
        assert!(bytes < 4 * p);
    }
}

#[test]
fn choco_keeps_public_copies_and_the_average_as_the_paper_says_at_every_event() {
    let n = 6;
    for c in [
        Compression::TopK { fraction: 0.25 },
        Compression::RandomK { fraction: 0.5 },
        Compression::Qsgd { levels: 2 },
        Compression::Sign {},
    ] {
        let cfg = choco(c.clone(), 0.4);
        let gamma = cfg.consensus_lr;
        // history[i][t]: x̂_i after node i sent its difference of iteration t − 1 (t = 0: zero).
        let mut history: Vec<Vec<Vec<f64>>> = vec![vec![vec![0.0; DIM]]; n];
        let mut checked = 0;
        let mut balanced = 0;
        run_choco(
            &cfg,
            store(n),
            &net(1.0, 200.0),
            &stop_after_steps(240),
            |a, s, drift| {
                for (i, h) in history.iter_mut().enumerate() {
                    let c = a.iteration(i) as usize;
                    let own = if a.has_sent(i) { c + 1 } else { c };
                    // Sent (and possibly gossiped and begun the next iteration) since the last
                    // event: the copy is the one after the latest difference.
                    if h.len() == own {
                        h.push(s.msg(a.public_copy(i)).to_vec());
                    }
                }
                // x̂_i is the sum of i's differences so far; s_i = W_ii x̂_i + Σ_j W_ij x̂_j over
                // the copies of the iteration i has gossiped.
                for i in 0..n {
                    let c = a.iteration(i) as usize;
                    let own = if a.has_sent(i) { c + 1 } else { c };
                    let hat = s.msg(a.public_copy(i));
                    assert!(rel_diff(hat, &history[i][own]) < 1e-12);
                    let (wii, row) = a.weights(i);
                    let mut want: Vec<f64> = hat.iter().map(|v| wii * v).collect();
                    for &(j, wij) in row {
                        for (w, v) in want.iter_mut().zip(&history[j][c]) {
                            *w += wij * v;
                        }
                    }
                    assert!(
                        rel_diff(s.msg(a.neighbourhood_sum(i)), &want) < 1e-12,
                        "{}: s_{i} at iteration {c}",
                        c_name(&cfg)
                    );
                }
                // The gossip steps taken so far moved Σ_i x_i by
                // γ Σ_i Σ_{t < c_i} (Σ_j W_ij x̂_j^{t+1} − x̂_i^{t+1}): zero once every node has
                // gossiped the same iterations.
                let mut want = vec![0.0; DIM];
                for i in 0..n {
                    let (wii, row) = a.weights(i);
                    let done = a.iteration(i) as usize;
                    for (t, own) in history[i].iter().enumerate().take(done + 1).skip(1) {
                        for k in 0..DIM {
                            let mut v = (wii - 1.0) * own[k];
                            for &(j, wij) in row {
                                v += wij * history[j][t][k];
                            }
                            want[k] += gamma * v;
                        }
                    }
                }
                let scale = 1.0 + want.iter().map(|v| v.abs()).fold(0.0, f64::max);
                for (d, w) in drift.iter().zip(&want) {
                    assert!(
                        (d - w).abs() < 1e-9 * scale,
                        "{}: drift {d} vs {w}",
                        c_name(&cfg)
                    );
                }
                if (0..n).all(|i| a.iteration(i) == a.iteration(0)) {
                    balanced += 1;
                    assert!(want.iter().all(|v| v.abs() < 1e-9 * scale));
                }
                checked += 1;
            },
        );
        assert!(
            checked > 500 && balanced > 10,
            "{checked} events, {balanced} balanced"
        );
    }
}

fn c_name(cfg: &ChocoConfig) -> &'static str {
    cfg.compression.name()
}

#[test]
fn choco_without_compression_and_a_unit_step_is_dpsgd_adapt_then_combine() {
    let n = 6;
    // A network so fast that both send in no time: the same event order, so the same stop.
    let fast = header_free(1e9, 10.0);
    let stop = stop_after_steps(120);
    let cfg = choco(Compression::TopK { fraction: 1.0 }, 1.0);
    let (_, ch) = run_choco(&cfg, store(n), &fast, &stop, |_, _, _| {});
    let dpsgd = AlgorithmConfig::from(DpsgdConfig {
        weights: MixingWeights::Metropolis,
        update: UpdateOrder::AdaptThenCombine,
    });
    let mut ds = Checked::new(store(n));
    let opt = optimizer(0.05, 0.0);
    {
        let mut world = world(
            &dpsgd,
            &cluster(n, &[(2, 3.0)]),
            &fast,
            TopologyConfig::Ring {},
            &mut ds,
            &opt,
            SEED,
        );
        dasim_sim::algorithms::run_algorithm(&dpsgd, &mut world, &stop, &mut Collect::default())
            .unwrap();
    }
    for i in 0..n {
        let (a, b) = (ch.params(i), ds.params(i));
        assert!(rel_diff(&a, &b) < 1e-12, "worker {i}: {a:?} vs {b:?}");
    }
}

/// A reference store whose 12 coordinates hold a 3 × 3 matrix and 3 vector coordinates.
fn matrix_store(n: usize) -> ReferenceStore {
    store(n).with_matrices(vec![Matrix {
        start: 2,
        rows: 3,
        cols: 3,
    }])
}

fn powersgd(rank: usize) -> AllReduceConfig {
    AllReduceConfig {
        compression: Some(Compression::PowerSgd {
            rank,
            variant: PowerSgdVariant::Paper,
            start_after: None,
            min_compression_rate: None,
        }),
        ..Default::default()
    }
}

/// All-reduce (with `cfg`) on `n` workers until `rounds` rounds; the worker rows, the rows'
/// gradients and the algorithm.
fn run_allreduce(
    cfg: &AllReduceConfig,
    store: ReferenceStore,
    net_cfg: &NetworkConfig,
    rounds: u64,
) -> (Outcome, Checked, AllReduceSgd) {
    let n = store.workers();
    let mut store = Checked::new(store);
    let entry = AlgorithmConfig::from(cfg.clone());
    let opt = optimizer(0.05, 0.0);
    let mut alg = AllReduceSgd::new(cfg, n);
    let outcome = {
        let mut world = world(
            &entry,
            &cluster(n, &[]),
            net_cfg,
            TopologyConfig::Ring {},
            &mut store,
            &opt,
            SEED,
        );
        let shared = world.store.num_params();
        assert_eq!(shared, DIM);
        run_inspect(
            &mut alg,
            &mut world,
            &stop_after_steps(rounds * n as u64),
            &mut Collect::default(),
            &mut |_: &AllReduceSgd, _, _| {},
        )
        .unwrap()
    };
    (outcome, store, alg)
}

#[test]
fn powersgd_runs_two_rings_of_its_factors_by_the_closed_form() {
    let n = 4;
    let rounds = 25;
    let (bandwidth, latency) = (0.001, 30.0);
    let (outcome, store, _) = run_allreduce(
        &powersgd(1),
        matrix_store(n),
        &header_free(bandwidth, latency),
        rounds,
    );
    // Rank 1 on a 3 × 3 matrix: P carries 3 values and the 3 vector coordinates, Q 3 values.
    let chunk = |values: u64| (4 * values).div_ceil(n as u64);
    let ring = |values: u64| {
        2.0 * (n - 1) as f64 * (latency * 1e-6 + chunk(values) as f64 * 8.0 / (bandwidth * 1e9))
    };
    let iteration = 0.010 + ring(6) + ring(3);
    let per_round_bytes = n as u64 * 2 * (n as u64 - 1) * (chunk(6) + chunk(3));
    assert_eq!(outcome.network.bytes, rounds * per_round_bytes);
    let t = outcome.sim_time.as_secs_f64();
    assert!(
        (t - rounds as f64 * iteration).abs() < 1e-6,
        "{t} s for {rounds} rounds of {iteration} s"
    );
    // Every replica applies the same update: every worker's k-th gradient is computed on the
    // same parameters (every read, not only at the end), and the replicas end equal.
    for i in 1..n {
        assert_eq!(store.reads[i], store.reads[0], "worker {i}'s reads");
        assert_eq!(store.params(i), store.params(0));
    }
    assert!(store.reads[0].len() as u64 > rounds);
}

#[test]
fn powersgd_at_full_rank_is_allreduce_and_its_error_feedback_loses_nothing() {
    let n = 4;
    let rounds = 30;
    let fast = header_free(100.0, 5.0);
    // Full rank (3 of a 3 × 3 matrix): the power step spans the whole column space.
    let (_, full, _) = run_allreduce(&powersgd(3), matrix_store(n), &fast, rounds);
    let (_, plain, _) = run_allreduce(&AllReduceConfig::default(), matrix_store(n), &fast, rounds);
    // (Up to the reference code's `1e-8` in the normalization of P's columns.)
    assert!(rel_diff(&full.params(0), &plain.params(0)) < 1e-6);

    // Rank 1: what the workers applied plus what their errors hold is every gradient computed,
    // Σ_k n·u_k + Σ_w e_w = Σ_{w,k} g_{w,k}, since e_w = g_w + e_w(old) − P̂ Q_wᵀ and
    // mean_w P̂ Q_wᵀ = u_k. With SGD without momentum, Σ_k u_k = (x_0 − x_K)/η.
    let (_, st, alg) = run_allreduce(&powersgd(1), matrix_store(n), &fast, rounds);
    let x = st.params(0);
    let ps = alg.powersgd().expect("compressed");
    let inner = st.shared();
    let inner = inner.borrow();
    let mut lhs: Vec<f64> = x.iter().map(|v| -v * n as f64 / 0.05).collect();
    for w in 0..n {
        let e = inner.msg(ps.error(w).expect("an error buffer"));
        for (l, v) in lhs.iter_mut().zip(e) {
            *l += v;
        }
    }
    let mut rhs = vec![0.0; DIM];
    for w in 0..n {
        for g in &st.grads[w][..rounds as usize] {
            for (r, v) in rhs.iter_mut().zip(g) {
                *r += v;
            }
        }
    }
    assert!(rel_diff(&lhs, &rhs) < 1e-9, "{lhs:?} vs {rhs:?}");
    // And rank 1 did compress: the errors are not zero on the matrix.
    let e0 = inner.msg(ps.error(0).unwrap());
    assert!(e0[2..11].iter().any(|v| v.abs() > 1e-6));
    assert!(e0[..2].iter().chain(&e0[11..]).all(|v| *v == 0.0));
}

fn refusal(entry: AlgorithmKind, matrices: &[Matrix]) -> dasim_sim::ConfigError {
    let env = BuildEnv::new(SEED);
    let topology = Topology::build(&TopologyConfig::Ring {}, 6, &env).unwrap();
    AlgorithmConfig::from(entry)
        .validate_model(&topology, "algorithms[0]", Some(DIM), matrices, &[], 0..0)
        .unwrap_err()
}

#[test]
fn bad_compression_options_are_refused_at_their_field() {
    let m = [Matrix {
        start: 0,
        rows: 3,
        cols: 4,
    }];
    let cases: Vec<(AlgorithmKind, &str, &str)> = vec![
        (
            AlgorithmKind::Choco(choco(Compression::TopK { fraction: 0.0 }, 0.5)),
            "algorithms[0].compression.fraction",
            "(0, 1]",
        ),
        (
            AlgorithmKind::Choco(choco(Compression::RandomK { fraction: 1.5 }, 0.5)),
            "algorithms[0].compression.fraction",
            "(0, 1]",
        ),
        (
            AlgorithmKind::Choco(choco(Compression::Qsgd { levels: 0 }, 0.5)),
            "algorithms[0].compression.levels",
            "at least 1",
        ),
        (
            AlgorithmKind::Choco(choco(Compression::Sign {}, 0.0)),
            "algorithms[0].consensus_lr",
            "(0, 1]",
        ),
        (
            AlgorithmKind::Choco(choco(powersgd(1).compression.expect("compressed"), 0.5)),
            "algorithms[0].compression.kind",
            "all-reduce",
        ),
        (
            AlgorithmKind::AllReduce(powersgd(0)),
            "algorithms[0].compression.rank",
            "at least 1",
        ),
        (
            AlgorithmKind::AllReduce(powersgd(4)),
            "algorithms[0].compression.rank",
            "3 × 4",
        ),
        (
            AlgorithmKind::AllReduce(AllReduceConfig {
                compression: Some(Compression::TopK { fraction: 0.1 }),
                ..Default::default()
            }),
            "algorithms[0].compression.kind",
            "powersgd only",
        ),
        (
            AlgorithmKind::AllReduce(AllReduceConfig {
                buckets: 4,
                ..powersgd(2)
            }),
            "algorithms[0].buckets",
            "compression",
        ),
    ];
    for (entry, path, words) in cases {
        let e = refusal(entry, &m);
        assert_eq!(e.path.to_string(), path, "{}", e.message);
        assert!(e.message.contains(words), "{path}: {}", e.message);
    }
    // A rank that fits every matrix passes.
    let env = BuildEnv::new(SEED);
    let topology = Topology::build(&TopologyConfig::Ring {}, 6, &env).unwrap();
    AlgorithmConfig::from(powersgd(3))
        .validate_model(&topology, "algorithms[0]", Some(DIM), &m, &[], 0..0)
        .unwrap();
}
