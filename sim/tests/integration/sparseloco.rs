//! SparseLoCo (arXiv:2508.15706, tplr-ai/SparseLoCo) on the exact reference store: every outer
//! step is the error-feedback update with chunked top-k and quantization, recomputed here from
//! the rows before it; with every value kept and no quantization it is DiLoCo's step without
//! momentum; the all-gather carries one compressed message per worker and ring step; bad options
//! are refused at their field.

use crate::common;

use common::*;
use dasim_sim::algorithms::SparselocoConfig;
use dasim_sim::compress::chunked::ChunkedTopK;
use dasim_sim::engine::{Collect, run_inspect};
use dasim_sim::prelude::*;

const SEED: u64 = 7;
const N: usize = 4;

/// What the hook sees after an event: the outer steps so far, the workers' rows, the global
/// model and the workers' error rows.
type Snapshot = (u64, Vec<Vec<f64>>, Vec<f64>, Vec<Vec<f64>>);

/// Runs SparseLoCo on `N` workers (worker 1 2× slower) for `seconds` on the exact store with two
/// tensors of 8, calling `inspect` after every event with a snapshot.
fn run_sparseloco(
    cfg: &SparselocoConfig,
    seconds: f64,
    mut inspect: impl FnMut(&Diloco, Snapshot),
) -> Outcome {
    let mut store = Checked::new(quadratic_store(N, SEED).with_tensors(vec![0..8, 8..16]));
    let shared = store.shared();
    let entry = AlgorithmConfig::from(AlgorithmKind::Sparseloco(cfg.clone()));
    let opt = optimizer(0.05, 0.0);
    let mut world = world(
        &entry,
        &cluster(N, &[(1, 2.0)]),
        &net(1.0, 20.0),
        TopologyConfig::Ring {},
        &mut store,
        &opt,
        SEED,
    );
    let mut alg = entry_algorithm(cfg);
    run_inspect(
        &mut alg,
        &mut world,
        &stop_at(seconds),
        &mut Collect::default(),
        &mut |a: &Diloco, _: &World<'_>, _| {
            let store = shared.borrow();
            let errors = a.compressed_outer().map_or(0, |s| s.errors);
            let rows = |r: std::ops::Range<usize>| -> Vec<Vec<f64>> {
                r.map(|i| store.params(i).to_vec()).collect()
            };
            inspect(
                a,
                (
                    a.outer_steps(),
                    rows(0..N),
                    store.params(a.global_row()).to_vec(),
                    rows(errors..errors + N),
                ),
            );
        },
    )
    .unwrap()
}

fn entry_algorithm(cfg: &SparselocoConfig) -> Diloco {
    Diloco::compressed(
        &DilocoConfig {
            inner_steps: cfg.inner_steps,
            outer_lr: cfg.outer_lr,
            outer_momentum: 0.0,
            nesterov: false,
        },
        N,
        cfg.compressor(),
        cfg.error_decay,
    )
}

fn small(bits: u32) -> SparselocoConfig {
    SparselocoConfig {
        inner_steps: 3,
        outer_lr: 0.8,
        chunk: 4,
        top_k: 2,
        error_decay: 0.9,
        bits: (bits > 0).then_some(bits),
        range_sigmas: 6.0,
    }
}

/// Calls `check(before, after, alg)` at every outer step of a run of `cfg`; returns how many.
fn each_outer_step(
    cfg: &SparselocoConfig,
    mut check: impl FnMut(&Snapshot, &Snapshot, &Diloco),
) -> usize {
    let mut before: Option<Snapshot> = None;
    let mut checked = 0;
    run_sparseloco(cfg, 1.5, |a, now| {
        if let Some(old) = &before
            && now.0 == old.0 + 1
        {
            check(old, &now, a);
            checked += 1;
        }
        before = Some(now);
    });
    checked
}

/// Every outer step, for every worker: `e ← β·e + (θ − θ_w)`, `ĉ = Q(TopK(e))`, `e ← e − ĉ`,
/// then `θ ← θ − α·mean ĉ`, and every worker restarts from `θ`; with and without quantization.
#[test]
fn every_outer_step_sends_the_compressed_error_and_keeps_the_rest() {
    for bits in [0, 2] {
        let cfg = small(bits);
        let (beta, alpha) = (cfg.error_decay, cfg.outer_lr);
        let checked = each_outer_step(&cfg, |(_, workers, g0, e0), (step, after, g1, e1), a| {
            let sparse = a.compressed_outer().unwrap();
            let dim = g0.len();
            let mut mean = vec![0.0; dim];
            for w in 0..N {
                let error: Vec<f64> = (0..dim)
                    .map(|j| beta * e0[w][j] + (g0[j] - workers[w][j]))
                    .collect();
                let c = &sparse.compressor;
                let sent = reference_chunked(&error, c.chunk.min(8), c.top_k, c.bits, 6.0);
                let kept: Vec<f64> = (0..dim).map(|j| error[j] - sent[j]).collect();
                assert_close(&e1[w], &kept, &format!("bits {bits}: worker {w}'s error"));
                (0..dim).for_each(|j| mean[j] += sent[j] / N as f64);
            }
            let want: Vec<f64> = (0..dim).map(|j| g0[j] - alpha * mean[j]).collect();
            assert_close(g1, &want, &format!("bits {bits}: outer step {step}"));
            for (w, x) in after.iter().enumerate() {
                assert_eq!(x, g1, "worker {w} restarts from the global model");
            }
        });
        assert!(checked >= 5, "bits {bits}: {checked} outer steps checked");
    }
}

/// Half of every chunk is sent: the error rows are never zero after an outer step, and what
/// they hold is below the sent values' magnitude in each chunk (top-k keeps the largest).
#[test]
fn the_values_left_behind_are_the_smallest_of_their_chunk() {
    let cfg = small(0);
    let checked = each_outer_step(&cfg, |(_, workers, g0, e0), (_, _, _, e1), _| {
        for w in 0..N {
            for chunk in (0..16).step_by(4) {
                let error: Vec<f64> = (chunk..chunk + 4)
                    .map(|j| cfg.error_decay * e0[w][j] + (g0[j] - workers[w][j]))
                    .collect();
                let left: Vec<usize> = (0..4).filter(|&i| e1[w][chunk + i] != 0.0).collect();
                assert!(left.len() <= 2, "worker {w}, chunk {chunk}: {left:?} left");
                let sent_min = (0..4)
                    .filter(|i| !left.contains(i))
                    .map(|i| error[i].abs())
                    .fold(f64::INFINITY, f64::min);
                for i in left {
                    assert!(error[i].abs() <= sent_min, "worker {w}, chunk {chunk}");
                }
            }
        }
    });
    assert!(checked >= 5);
}

/// Everything kept, no quantization: the error rows stay zero and the outer step is DiLoCo's
/// without momentum, `θ ← θ − α(θ − mean θ_w)`.
#[test]
fn with_every_value_kept_it_is_diloco_without_momentum() {
    let cfg = SparselocoConfig {
        top_k: 16,
        ..small(0)
    };
    let checked = each_outer_step(&cfg, |(_, workers, g0, _), (_, _, g1, e1), _| {
        let dim = g0.len();
        let want: Vec<f64> = (0..dim)
            .map(|j| {
                let mean = workers.iter().map(|x| x[j]).sum::<f64>() / N as f64;
                g0[j] - cfg.outer_lr * (g0[j] - mean)
            })
            .collect();
        assert_close(g1, &want, "the global model");
        for (w, e) in e1.iter().enumerate() {
            assert!(
                e.iter().all(|v| v.abs() < 1e-15),
                "worker {w}'s error: {e:?}"
            );
        }
    });
    assert!(checked >= 5);
}

/// The all-gather sends every worker's message to each of the `n − 1` others, a message being
/// 2 bytes per kept position plus the 2-bit values bit-packed and the quantizer's 5 `f32`s per
/// tensor: `2 · (4 · 2 + 1 + 20) = 58` bytes for two tensors of two chunks with 2 kept each.
#[test]
fn the_all_gather_carries_one_compressed_message_per_worker_and_step() {
    let cfg = small(2);
    let compressor: ChunkedTopK = cfg.compressor();
    assert_eq!(compressor.bits, Some(2));
    let mut rounds = 0;
    let outcome = run_sparseloco(&cfg, 1.5, |a, _| rounds = a.outer_steps());
    let payload = 58;
    let per_round = (N * (N - 1)) as u64 * payload;
    assert!(rounds >= 5, "{rounds} rounds");
    // The last round may be under way at the stop: its messages are sent, not yet applied.
    assert!(
        outcome.network.bytes == rounds * per_round
            || outcome.network.bytes == (rounds + 1) * per_round,
        "{} bytes for {rounds} rounds of {per_round}",
        outcome.network.bytes
    );
    assert_eq!(outcome.network.bytes % per_round, 0);
    assert_eq!(
        outcome.network.messages * payload,
        outcome.network.bytes,
        "one message per payload"
    );
}

/// Bad options are refused at their field, with a hint.
#[test]
fn bad_options_are_refused_at_their_field() {
    let topology = Topology::build(&TopologyConfig::Ring {}, 4, &BuildEnv::new(1)).unwrap();
    for (options, field) in [
        ("inner_steps = 0", "inner_steps"),
        ("outer_lr = 0.0", "outer_lr"),
        ("chunk = 0", "chunk"),
        ("chunk = 257", "chunk"),
        ("top_k = 0", "top_k"),
        ("chunk = 4\ntop_k = 17", "top_k"),
        ("error_decay = 1.5", "error_decay"),
        ("bits = 3", "bits"),
        ("range_sigmas = 0.0", "range_sigmas"),
    ] {
        let entry: AlgorithmConfig = toml::from_str(&format!("kind = \"sparseloco\"\n{options}"))
            .unwrap_or_else(|e| panic!("{options}: {e}"));
        let err = entry
            .validate(&topology, "algorithms[0]", None)
            .expect_err(options);
        assert_eq!(err.path.to_string(), format!("algorithms[0].{field}"));
        assert!(err.hint.is_some(), "{options}: {err}");
    }
    for ok in ["", "bits = 0", "chunk = 4\ntop_k = 16"] {
        let entry: AlgorithmConfig =
            toml::from_str(&format!("kind = \"sparseloco\"\n{ok}")).unwrap();
        entry.validate(&topology, "algorithms[0]", None).unwrap();
    }
}
