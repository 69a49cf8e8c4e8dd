//! Compressed communication on the exact reference store: the compressors' expectations and
//! contraction as the papers state them (statistically, with fixed seeds) and their sizes on the
//! wire; CHOCO-SGD (Koloskova, Stich & Jaggi, 2019) checked at every event against the paper's
//! public copies and its average-preserving gossip, and reducing to D-PSGD without compression;
//! all-reduce with PowerSGD (Vogels et al., 2019): two rings by the closed form, exact at full
//! rank, error feedback that loses nothing, and each power step warm-started from the last `Q`,
//! recomputed; its library variant's one ring per step, its warm-up, skipped matrices and rank
//! clamp; bad options refused.

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
        scope: ChocoScope::Tensor,
        overlap: false,
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

/// Runs CHOCO-SGD on the workers of `store` on a ring, worker 2 three times slower, until
/// `stop`, calling `inspect` after every event; returns the outcome.
fn run_choco<F>(
    cfg: &ChocoConfig,
    store: ReferenceStore,
    net_cfg: &NetworkConfig,
    stop: &RunConfig,
    inspect: F,
) -> (Outcome, Checked)
where
    F: FnMut(&Choco, &ReferenceStore, &[f64]),
{
    run_choco_on(cfg, store, &[(2, 3.0)], net_cfg, stop, inspect)
}

/// [`run_choco`] with the stragglers `stragglers` (worker, factor on the 10 ms step).
fn run_choco_on<F>(
    cfg: &ChocoConfig,
    store: ReferenceStore,
    stragglers: &[(usize, f64)],
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
            &cluster(n, stragglers),
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

/// Per tensor (the default scope), each tensor keeps its own `k` or carries its own scale: on
/// tensors of 4 and 8 coordinates, top-25% keeps 1 + 2 values, sign and qsgd send a scale per
/// tensor, random-k one seed.
#[test]
fn choco_messages_per_tensor_carry_each_tensors_share_on_the_wire() {
    let n = 6;
    let tensors = || store(n).with_tensors(vec![0..4, 4..DIM]);
    for (c, bytes) in [
        (Compression::TopK { fraction: 0.25 }, (1 + 2) * 8),
        (Compression::RandomK { fraction: 0.25 }, 3 * 4 + 8),
        (Compression::Sign {}, 2 + 2 * 4),
        (Compression::Qsgd { levels: 16 }, 9 + 2 * 4),
        // ⌊0.1·4⌋ = ⌊0.1·8⌋ = 0: at least one per tensor, where the whole row keeps one.
        (Compression::TopK { fraction: 0.1 }, 2 * 8),
    ] {
        let steps = 30;
        for (scope, store, bytes) in [
            (ChocoScope::Tensor, tensors(), bytes),
            (ChocoScope::Model, tensors(), c.payload_bytes(DIM, 4)),
        ] {
            let cfg = ChocoConfig {
                scope,
                ..choco(c.clone(), 0.3)
            };
            let (outcome, _) = run_choco(
                &cfg,
                store,
                &header_free(1.0, 10.0),
                &stop_after_steps(steps),
                |_, _, _| {},
            );
            let at = format!("{} {scope:?}", c.name());
            assert_eq!(outcome.network.messages, 2 * steps, "{at}");
            assert_eq!(outcome.network.bytes, 2 * steps * bytes, "{at}");
        }
    }
}

/// The paper's schedule (Algorithm 1) waits for each exchange after its step: an iteration of
/// identical workers takes `c + d` (`c` the gradient, `d` from the sends to the last arrival).
/// The reference's `ParallelCHOCO` (`overlap = true`) sends as the gradient begins and gossips
/// when both are done: `max(c, d)`. Checked exactly, in nanoseconds, when the gradient is the
/// longer and when the exchange is.
#[test]
fn overlapped_choco_steps_take_the_longer_of_compute_and_exchange_blocking_ones_the_sum() {
    let n = 4;
    let c = 10_000_000u64; // the 10 ms step, in ns
    // Top-25% of 12 coordinates: 24 bytes to each neighbour, both through the sender's uplink.
    // At 10 Mbit/s with 50 µs of latency the exchange takes about 0.09 ms (gradient bound); at
    // 20 kbit/s about 19 ms (exchange bound).
    for bandwidth in [0.01, 0.000_02] {
        // When the last worker's `k`-th gradient is computed.
        let done = |overlap: bool, k: u64| {
            let cfg = ChocoConfig {
                overlap,
                ..choco(Compression::TopK { fraction: 0.25 }, 0.3)
            };
            let (outcome, _) = run_choco_on(
                &cfg,
                store(n),
                &[],
                &header_free(bandwidth, 50.0),
                &stop_after_steps(n as u64 * k),
                |_, _, _| {},
            );
            assert_eq!(outcome.worker_steps, n as u64 * k);
            outcome.sim_time.as_nanos()
        };
        // An iteration in the steady state: from the 20th gradient to the 21st.
        let period = |overlap| done(overlap, 21) - done(overlap, 20);
        let blocking = period(false);
        let d = blocking - c;
        let overlapped = period(true);
        assert_eq!(
            overlapped,
            c.max(d),
            "{bandwidth} Gbit/s: blocking iterations of {blocking} ns"
        );
        assert!(d > 0 && overlapped < blocking, "{bandwidth} Gbit/s");
    }
}

#[test]
fn choco_keeps_public_copies_and_the_average_as_the_paper_says_at_every_event() {
    let n = 6;
    let cases = [
        Compression::TopK { fraction: 0.25 },
        Compression::RandomK { fraction: 0.5 },
        Compression::Qsgd { levels: 2 },
        Compression::Sign {},
    ]
    .into_iter()
    .flat_map(|c| [false, true].map(|overlap| (c.clone(), overlap)));
    for (c, overlap) in cases {
        let cfg = ChocoConfig {
            overlap,
            ..choco(c.clone(), 0.4)
        };
        let gamma = cfg.consensus_lr;
        // history[i][t]: x̂_i after node i sent its difference of iteration t − 1 (t = 0: zero).
        let mut history: Vec<Vec<Vec<f64>>> = vec![vec![vec![0.0; DIM]]; n];
        let mut checked = 0;
        let mut balanced = 0;
        run_choco(
            &cfg,
            store(n).with_tensors(vec![0..5, 5..DIM]),
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
    // mean_w P̂ Q_wᵀ = u_k. With SGD without momentum, Σ_k u_k = (x_0 − x_K)/η. (An identity of
    // error feedback that any decoder satisfies, a cold-started Q included: the power step
    // itself is checked by `powersgd_warm_starts_each_power_step_from_the_last_q`.)
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

/// Gram–Schmidt on the `r` columns of the row-major `a × r` matrix `p`, as PowerSGD's reference
/// code (`epfml/powersgd`, `orthogonalize`): each column divided by its norm `+ 1e-8`, then
/// removed from the later ones.
fn gram_schmidt(p: &mut [f64], a: usize, r: usize) {
    for i in 0..r {
        let norm = (0..a).map(|k| p[k * r + i].powi(2)).sum::<f64>().sqrt() + 1e-8;
        for k in 0..a {
            p[k * r + i] /= norm;
        }
        for j in i + 1..r {
            let dot: f64 = (0..a).map(|k| p[k * r + i] * p[k * r + j]).sum();
            for k in 0..a {
                p[k * r + j] -= dot * p[k * r + i];
            }
        }
    }
}

/// The warm start: step `t + 1`'s power iteration starts from the `Q` step `t` produced.
/// PowerSGD driven directly on the matrix store (3 workers, rank 2 of a 3 × 3 matrix), its
/// every step recomputed here as Algorithm 2 of the paper and the reference code do it, from
/// the workers' gradients, the test's own error buffers and the test's own `Q` chain (only the
/// initial draw is read from the compressor): `M_w = g_w + e_w`, `P̂ = orth(mean_w M_w Q)`,
/// `Q_w = M_wᵀ P̂`, `Q ← mean_w Q_w`, `e_w = M_w − P̂ Q_wᵀ`, the update `P̂ Qᵀ`. A `Q` drawn
/// afresh at every step (a cold start) fails at the second step.
#[test]
fn powersgd_warm_starts_each_power_step_from_the_last_q() {
    let n = 3;
    let (a, b, r, start) = (3, 3, 2, 2);
    let mut store = matrix_store(n);
    let matrices = store.matrices();
    assert_eq!(
        (matrices[0].rows, matrices[0].cols, matrices[0].start),
        (a, b, start)
    );
    let options = powersgd(r).compression.unwrap().powersgd_options().unwrap();
    let mut ps = PowerSgd::new(options, matrices, n, SEED);
    let close = |x: &[f64], y: &[f64], what: &str| {
        assert!(rel_diff(x, y) < 1e-12, "{what}: {x:?} vs {y:?}");
    };
    let mut q = ps.warm_start(0).to_vec();
    let mut errors = vec![vec![0.0; a * b]; n];
    for step in 0..6 {
        let grads: Vec<GradId> = (0..n)
            .map(|w| store.request_gradient_scaled(w, 1.0))
            .collect();
        let g: Vec<Vec<f64>> = grads.iter().map(|&id| store.gradient_values(id)).collect();
        let ms: Vec<Vec<f64>> = (0..n)
            .map(|w| (0..a * b).map(|c| g[w][start + c] + errors[w][c]).collect())
            .collect();
        // P = mean_w M_w Q, orthogonalized.
        let mut p = vec![0.0; a * r];
        for m in &ms {
            for i in 0..a {
                for t in 0..r {
                    p[i * r + t] += (0..b).map(|j| m[i * b + j] * q[j * r + t]).sum::<f64>();
                }
            }
        }
        p.iter_mut().for_each(|v| *v /= n as f64);
        gram_schmidt(&mut p, a, r);
        // Q_w = M_wᵀ P̂; e_w = M_w − P̂ Q_wᵀ; Q = mean_w Q_w.
        let mut q_mean = vec![0.0; b * r];
        for (w, m) in ms.iter().enumerate() {
            let qw: Vec<f64> = (0..b * r)
                .map(|jt| {
                    let (j, t) = (jt / r, jt % r);
                    (0..a).map(|i| m[i * b + j] * p[i * r + t]).sum::<f64>()
                })
                .collect();
            for i in 0..a {
                for j in 0..b {
                    let approx: f64 = (0..r).map(|t| p[i * r + t] * qw[j * r + t]).sum();
                    errors[w][i * b + j] = m[i * b + j] - approx;
                }
            }
            for (s, v) in q_mean.iter_mut().zip(&qw) {
                *s += v / n as f64;
            }
        }
        q = q_mean;
        let mut want: Vec<f64> = (0..DIM)
            .map(|c| (0..n).map(|w| g[w][c]).sum::<f64>() / n as f64)
            .collect();
        for i in 0..a {
            for j in 0..b {
                want[start + i * b + j] = (0..r).map(|t| p[i * r + t] * q[j * r + t]).sum();
            }
        }
        let out = ps.aggregate(&mut store, &grads, step);
        let got = store.gradient_values(out);
        close(&got, &want, &format!("step {step}: the decoded update"));
        close(
            ps.warm_start(0),
            &q,
            &format!("step {step}: the Q the next step starts from"),
        );
        for (w, e) in errors.iter().enumerate() {
            let buffer = store.msg(ps.error(w).expect("an error buffer"));
            close(
                &buffer[start..start + a * b],
                e,
                &format!("step {step}: worker {w}'s error"),
            );
        }
        store.release_gradient(out);
    }
    // Rank 2 of a 3 × 3 matrix did compress: the errors are not zero.
    assert!(
        errors.iter().flatten().any(|v| v.abs() > 1e-9),
        "{errors:?}"
    );
}

/// PowerSGD as `epfml/powersgd`'s library does it (`powersgd/powersgd.py`), at `rank`, with
/// `start_after` uncompressed steps and `min_compression_rate` (`None`: the defaults).
fn library(rank: usize, start_after: Option<u64>, min_rate: Option<f64>) -> AllReduceConfig {
    AllReduceConfig {
        compression: Some(Compression::PowerSgd {
            rank,
            variant: PowerSgdVariant::Library,
            start_after,
            min_compression_rate: min_rate,
        }),
        ..Default::default()
    }
}

/// The 12 coordinates of [`store`] holding `matrices`.
fn store_with(n: usize, matrices: &[(usize, usize, usize)]) -> ReferenceStore {
    store(n).with_matrices(
        matrices
            .iter()
            .map(|&(start, rows, cols)| Matrix { start, rows, cols })
            .collect(),
    )
}

/// Σ_k n·u_k + Σ_w e_w − Σ_{w,k} g_{w,k} over a run of SGD without momentum at rate 0.05,
/// relative: 0 when error feedback loses nothing.
fn feedback_loss(st: &Checked, alg: &AllReduceSgd, rounds: u64) -> f64 {
    let n = st.reads.len();
    let ps = alg.powersgd().expect("compressed");
    let inner = st.shared();
    let inner = inner.borrow();
    let mut lhs: Vec<f64> = st.params(0).iter().map(|v| -v * n as f64 / 0.05).collect();
    for w in 0..n {
        if let Some(e) = ps.error(w) {
            for (l, v) in lhs.iter_mut().zip(inner.msg(e)) {
                *l += v;
            }
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
    rel_diff(&lhs, &rhs)
}

#[test]
fn powersgd_library_runs_one_ring_per_step_alternating_q_and_p_after_a_dense_warm_up() {
    let n = 4;
    let rounds = 10;
    let (bandwidth, latency) = (0.001, 30.0);
    // A 2 × 5 matrix (rank 1: 10 / (½·7) = 2.9 > 2, compressed) and 2 vector coordinates.
    let (outcome, store, alg) = run_allreduce(
        &library(1, Some(3), None),
        store_with(n, &[(1, 2, 5)]),
        &header_free(bandwidth, latency),
        rounds,
    );
    // Steps 0..3 all-reduce the 12 coordinates; then Q (5 values) and P (2 values) in turn,
    // each with the 2 vector coordinates: one ring per step.
    let values: Vec<u64> = (0..rounds)
        .map(|k| match k {
            0..3 => 12,
            k if (k - 3) % 2 == 0 => 5 + 2,
            _ => 2 + 2,
        })
        .collect();
    let chunk = |values: u64| (4 * values).div_ceil(n as u64);
    let ring = |values: u64| {
        2.0 * (n - 1) as f64 * (latency * 1e-6 + chunk(values) as f64 * 8.0 / (bandwidth * 1e9))
    };
    let bytes: u64 = values
        .iter()
        .map(|&v| n as u64 * 2 * (n as u64 - 1) * chunk(v))
        .sum();
    assert_eq!(outcome.network.bytes, bytes);
    let want: f64 = values.iter().map(|&v| 0.010 + ring(v)).sum();
    let t = outcome.sim_time.as_secs_f64();
    assert!((t - want).abs() < 1e-6, "{t} s for {values:?}: {want} s");
    for i in 1..n {
        assert_eq!(store.reads[i], store.reads[0], "worker {i}'s reads");
        assert_eq!(store.params(i), store.params(0));
    }
    // It did compress, and error feedback loses nothing.
    let ps = alg.powersgd().unwrap();
    assert_eq!(ps.ranks(), &[1]);
    assert!(feedback_loss(&store, &alg, rounds) < 1e-9);
}

#[test]
fn powersgd_library_warm_up_steps_are_allreduce_sgd_exactly() {
    let n = 4;
    let fast = header_free(100.0, 5.0);
    let m = [(2, 3, 3)];
    // 5 warm-up steps: exactly all-reduce SGD, its timing, bytes and parameters.
    let (warm, warm_store, warm_alg) =
        run_allreduce(&library(1, Some(5), None), store_with(n, &m), &fast, 5);
    let (plain, plain_store, _) =
        run_allreduce(&AllReduceConfig::default(), store_with(n, &m), &fast, 5);
    assert_eq!(warm.sim_time, plain.sim_time);
    assert_eq!(warm.network.bytes, plain.network.bytes);
    for w in 0..n {
        assert_eq!(warm_store.params(w), plain_store.params(w), "worker {w}");
        assert_eq!(
            warm_store.reads[w], plain_store.reads[w],
            "worker {w}'s reads"
        );
        assert!(warm_alg.powersgd().unwrap().error(w).is_none());
    }
    // Step 5 is compressed: the 6th gradient is read at the same point, the 7th no longer.
    let (_, st, _) = run_allreduce(&library(1, Some(5), None), store_with(n, &m), &fast, 7);
    let (_, pl, _) = run_allreduce(&AllReduceConfig::default(), store_with(n, &m), &fast, 7);
    assert_eq!(st.reads[0][..6], pl.reads[0][..6]);
    assert_ne!(st.reads[0][6], pl.reads[0][6]);
    // The library's default is 100 warm-up steps.
    let (d, d_store, _) = run_allreduce(&library(1, None, None), store_with(n, &m), &fast, 20);
    let (p, p_store, _) = run_allreduce(&AllReduceConfig::default(), store_with(n, &m), &fast, 20);
    assert_eq!(d.network.bytes, p.network.bytes);
    assert_eq!(d_store.params(0), p_store.params(0));
}

#[test]
fn powersgd_library_carries_matrices_that_compress_too_little_uncompressed() {
    let n = 4;
    let rounds = 12;
    let (bandwidth, latency) = (0.001, 30.0);
    let net_cfg = header_free(bandwidth, latency);
    // A 2 × 3 matrix (rank 1: 6 / (½·5) = 2.4 > 2, compressed) and a 2 × 2 one (4 / (½·4) = 2,
    // not above 2: all-reduced as it is), and 2 vector coordinates.
    let m = [(0, 2, 3), (6, 2, 2)];
    let (outcome, st, alg) = run_allreduce(
        &library(1, Some(0), None),
        store_with(n, &m),
        &net_cfg,
        rounds,
    );
    let ps = alg.powersgd().unwrap();
    assert_eq!(ps.ranks(), &[1, 0]);
    // The rings carry the 2 × 2 matrix whole: Q = 3 + 6 values, P = 2 + 6.
    let chunk = |values: u64| (4 * values).div_ceil(n as u64);
    let per_step = |v: u64| n as u64 * 2 * (n as u64 - 1) * chunk(v);
    assert_eq!(
        outcome.network.bytes,
        (rounds / 2) * (per_step(9) + per_step(8))
    );
    // No error feedback on it, and its coordinates (as the vectors') follow all-reduce SGD's, the
    // quadratic being separable.
    let (_, plain, _) = run_allreduce(
        &AllReduceConfig::default(),
        store_with(n, &m),
        &net_cfg,
        rounds,
    );
    let (x, y) = (st.params(0), plain.params(0));
    assert!(rel_diff(&x[6..], &y[6..]) < 1e-12, "{x:?} vs {y:?}");
    assert!(
        rel_diff(&x[..6], &y[..6]) > 1e-6,
        "the 2 × 3 matrix was compressed"
    );
    {
        let inner = st.shared();
        let inner = inner.borrow();
        for w in 0..n {
            let e = inner.msg(ps.error(w).expect("an error buffer"));
            assert!(e[..6].iter().any(|v| v.abs() > 1e-6), "worker {w}: {e:?}");
            assert!(e[6..].iter().all(|v| *v == 0.0), "worker {w}: {e:?}");
        }
    }
    assert!(feedback_loss(&st, &alg, rounds) < 1e-9);
    // Below the rate (1.9 < 2) the 2 × 2 matrix is compressed too.
    let (_, st, alg) = run_allreduce(
        &library(1, Some(0), Some(1.9)),
        store_with(n, &m),
        &net_cfg,
        rounds,
    );
    assert_eq!(alg.powersgd().unwrap().ranks(), &[1, 1]);
    let inner = st.shared();
    let e = inner
        .borrow()
        .msg(alg.powersgd().unwrap().error(0).unwrap())
        .to_vec();
    assert!(e[6..10].iter().any(|v| v.abs() > 1e-6), "{e:?}");
}

#[test]
fn powersgd_library_clamps_the_rank_to_the_smaller_side() {
    let n = 4;
    let fast = header_free(100.0, 5.0);
    let rounds = 30;
    // Rank 5 of a 3 × 3 matrix: the paper's variant refuses it; the library's compresses at
    // rank 3 (9 / (½·3·6) = 1, above 0.5), which spans the matrix: all-reduce SGD, without the
    // paper's 1e-8.
    let cfg = library(5, Some(0), Some(0.5));
    let (outcome, full, alg) = run_allreduce(&cfg, matrix_store(n), &fast, rounds);
    assert_eq!(alg.powersgd().unwrap().ranks(), &[3]);
    let (_, plain, _) = run_allreduce(&AllReduceConfig::default(), matrix_store(n), &fast, rounds);
    assert!(rel_diff(&full.params(0), &plain.params(0)) < 1e-9);
    // Each step's ring carries a 3 × 3 factor and the 3 vector coordinates.
    let chunk = (4 * 12u64).div_ceil(n as u64);
    assert_eq!(
        outcome.network.bytes,
        rounds * n as u64 * 2 * (n as u64 - 1) * chunk
    );
    // At the default rate of 2 the clamped matrix (rate 1) is not compressed at all.
    let (_, _, alg) = run_allreduce(&library(5, Some(0), None), matrix_store(n), &fast, 2);
    assert_eq!(alg.powersgd().unwrap().ranks(), &[0]);
    // Validation: the library takes the rank the paper's variant refuses.
    let m = [Matrix {
        start: 2,
        rows: 3,
        cols: 3,
    }];
    let env = BuildEnv::new(SEED);
    let topology = Topology::build(&TopologyConfig::Ring {}, 6, &env).unwrap();
    AlgorithmConfig::from(cfg)
        .validate_model(&topology, "algorithms[0]", Some(DIM), &m, &[], 0..0)
        .unwrap();
    let e = refusal(AlgorithmKind::AllReduce(powersgd(5)), &m);
    assert_eq!(e.path.to_string(), "algorithms[0].compression.rank");
}

#[test]
fn powersgd_library_is_deterministic() {
    let n = 4;
    let net_cfg = header_free(0.01, 20.0);
    let cfg = library(1, Some(2), None);
    let m = [(1, 2, 5)];
    let (a, sa, _) = run_allreduce(&cfg, store_with(n, &m), &net_cfg, 15);
    let (b, sb, _) = run_allreduce(&cfg, store_with(n, &m), &net_cfg, 15);
    assert_eq!(a.sim_time, b.sim_time);
    assert_eq!(a.network.bytes, b.network.bytes);
    for w in 0..n {
        assert_eq!(sa.params(w), sb.params(w));
        assert_eq!(sa.reads[w], sb.reads[w]);
    }
}

#[test]
fn powersgd_options_parse_and_a_resolved_scenario_writes_the_variant() {
    let cfg: AllReduceConfig = toml::from_str(
        "compression = { kind = \"powersgd\", rank = 2, variant = \"library\", start_after = 0, min_compression_rate = 4.0 }",
    )
    .unwrap();
    assert_eq!(cfg, library(2, Some(0), Some(4.0)));
    let o = cfg
        .compression
        .as_ref()
        .unwrap()
        .powersgd_options()
        .unwrap();
    assert_eq!((o.start_after, o.min_compression_rate), (0, 4.0));
    let o = library(2, None, None)
        .compression
        .unwrap()
        .powersgd_options()
        .unwrap();
    assert_eq!((o.start_after, o.min_compression_rate), (100, 2.0));
    // The paper's variant is the default, and a resolved scenario writes it out.
    let paper: AllReduceConfig =
        toml::from_str("compression = { kind = \"powersgd\", rank = 2 }").unwrap();
    assert_eq!(paper, powersgd(2));
    let written = toml::to_string(&paper).unwrap();
    assert!(written.contains("variant = \"paper\""), "{written}");
    assert_eq!(toml::from_str::<AllReduceConfig>(&written).unwrap(), paper);
    let e = toml::from_str::<AllReduceConfig>(
        "compression = { kind = \"powersgd\", rank = 2, variant = \"torch\" }",
    )
    .unwrap_err();
    assert!(e.to_string().contains("library"), "{e}");
}

#[test]
fn bad_powersgd_library_options_are_refused_at_their_field() {
    let m = [Matrix {
        start: 0,
        rows: 3,
        cols: 4,
    }];
    let with = |variant, start_after, rate| {
        AlgorithmKind::AllReduce(AllReduceConfig {
            compression: Some(Compression::PowerSgd {
                rank: 1,
                variant,
                start_after,
                min_compression_rate: rate,
            }),
            ..Default::default()
        })
    };
    use PowerSgdVariant::{Library, Paper};
    let cases = [
        (
            with(Library, None, Some(0.0)),
            "min_compression_rate",
            "positive number, got 0",
        ),
        (
            with(Library, None, Some(-1.0)),
            "min_compression_rate",
            "got -1",
        ),
        (
            with(Library, None, Some(f64::NAN)),
            "min_compression_rate",
            "got NaN",
        ),
        (
            with(Library, None, Some(f64::INFINITY)),
            "min_compression_rate",
            "got inf",
        ),
        (
            with(Paper, Some(10), None),
            "start_after",
            "library variant",
        ),
        (
            with(Paper, None, Some(2.0)),
            "min_compression_rate",
            "library variant",
        ),
    ];
    for (entry, field, words) in cases {
        let e = refusal(entry, &m);
        assert_eq!(
            e.path.to_string(),
            format!("algorithms[0].compression.{field}"),
            "{}",
            e.message
        );
        assert!(e.message.contains(words), "{field}: {}", e.message);
        assert!(e.hint.is_some(), "{field}: a hint");
    }
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
