//! Streaming DiLoCo (Douillard et al., 2025, Algorithm 2) on the exact reference store: every
//! fragment's outer step is DiLoCo's Nesterov step on its coordinates only, from the outer
//! gradients read at each worker's send (quantized or not), checked at every event; each fragment
//! is sent once per `H` steps, staggered; merges mix `α·local + (1 − α)·global`; the bytes are
//! those of each fragment's quantized ring; the all-reduce overlaps compute; with one fragment,
//! no overlap, no mixing and 32 bits it is DiLoCo.

use crate::common;

use std::collections::BTreeMap;
use std::ops::Range;

use common::*;
use dasim_sim::algorithms::streaming_diloco::quantize;
use dasim_sim::algorithms::{FragmentPattern, StreamingDiloco, StreamingDilocoConfig};
use dasim_sim::engine::{Collect, run_inspect};
use dasim_sim::fault::{FaultConfig, Faults};
use dasim_sim::prelude::*;

const SEED: u64 = 3;
const N: usize = 4;
const DIM: usize = 16;

/// Six layers of the 16-dimensional quadratic.
fn layers() -> Vec<Layer> {
    [0..3, 3..5, 5..8, 8..11, 11..12, 12..16]
        .into_iter()
        .map(|params| Layer {
            params,
            forward_flops: 10,
        })
        .collect()
}

fn layered_store() -> ReferenceStore {
    quadratic_store(N, SEED).with_layers(layers())
}

/// What a run of Streaming DiLoCo gives: its outcome, points and (shared) store.
struct Run {
    outcome: Outcome,
    points: Vec<EvalPoint>,
    store: Checked,
}

/// Runs Streaming DiLoCo on `N` workers (one 2× straggler) for `seconds` on `store`, over a
/// network of `gbps`, calling `inspect` after every event.
fn run_streaming(
    cfg: &StreamingDilocoConfig,
    store: ReferenceStore,
    gbps: f64,
    stragglers: &[(usize, f64)],
    seconds: f64,
    mut inspect: impl FnMut(&StreamingDiloco, &ReferenceStore),
) -> Run {
    let mut store = Checked::new(store);
    let shared = store.shared();
    let alg_cfg = AlgorithmConfig::from(AlgorithmKind::StreamingDiloco(cfg.clone()));
    let opt = optimizer(0.05, 0.5);
    let mut alg = StreamingDiloco::new(cfg, N);
    let mut points = Collect::default();
    let outcome = {
        let mut world = world(
            &alg_cfg,
            &cluster(N, stragglers),
            &net(gbps, 20.0),
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
            &mut |a: &StreamingDiloco, _, _| inspect(a, &shared.borrow()),
        )
        .unwrap()
    };
    Run {
        outcome,
        points: points.0,
        store,
    }
}

fn coords(fragment: &[Range<usize>]) -> Vec<usize> {
    fragment.iter().flat_map(|r| r.clone()).collect()
}

/// `Σ w_k·x_k` in the order the reference store forms a mix.
fn combine(terms: &[(f64, &[f64])]) -> Vec<f64> {
    let mut out = vec![0.0; terms[0].1.len()];
    for &(w, x) in terms {
        for (o, v) in out.iter_mut().zip(x) {
            *o += w * v;
        }
    }
    out
}

/// The quantizer the module documents, written out here from its rule as the oracle of the runs'
/// checks (not the crate's `quantize`): `b = 32` leaves the values; for `b ≥ 2`, with
/// `L = 2^(b−1) − 1` and the scale `s = max |x|` over the fragment's coordinates, each value goes
/// to the nearest of the levels `s·k/L`, `k ∈ {−L, …, L}`, a tie away from zero (an all-zero
/// fragment stays zero); for `b = 1`, to `+s` (`x ≥ 0`) or `−s`, with `s` the mean `|x|`.
fn quantized(values: &[f64], fragment: &[Range<usize>], bits: u32) -> Vec<f64> {
    let mut out = values.to_vec();
    let idx = coords(fragment);
    if bits >= 32 || idx.is_empty() {
        return out;
    }
    if bits == 1 {
        let s = idx.iter().map(|&j| values[j].abs()).sum::<f64>() / idx.len() as f64;
        for &j in &idx {
            out[j] = if values[j] < 0.0 { -s } else { s };
        }
        return out;
    }
    let s = idx.iter().map(|&j| values[j].abs()).fold(0.0, f64::max);
    if s == 0.0 {
        return out;
    }
    let l = (1_i64 << (bits - 1)) - 1;
    for &j in &idx {
        // |x| lies between the levels k and k + 1 (in units of s/L); the nearer one, k + 1 on a
        // tie.
        let y = values[j].abs() * l as f64 / s;
        let below = (y as i64).min(l);
        let k = if below < l && y - below as f64 >= 0.5 {
            below + 1
        } else {
            below
        };
        let level = k as f64 * s / l as f64;
        out[j] = if values[j] < 0.0 { -level } else { level };
    }
    out
}

/// The state seen after an event.
#[derive(Clone)]
struct Seen {
    syncs: Vec<u64>,
    sends: Vec<Vec<u64>>,
    merges: Vec<Vec<u64>>,
    steps: Vec<u64>,
    workers: Vec<Vec<f64>>,
    global: Vec<f64>,
    momentum: Vec<f64>,
}

fn seen(a: &StreamingDiloco, store: &ReferenceStore) -> Seen {
    let p = a.fragments().len();
    Seen {
        syncs: (0..p).map(|f| a.syncs(f)).collect(),
        sends: (0..N).map(|w| a.sends(w).to_vec()).collect(),
        merges: (0..N).map(|w| a.merges(w).to_vec()).collect(),
        steps: (0..N).map(|w| a.steps(w)).collect(),
        workers: (0..N).map(|w| store.params(w).to_vec()).collect(),
        global: store.params(a.global_row()).to_vec(),
        momentum: store.params(a.momentum_row()).to_vec(),
    }
}

/// Checks, at every event of a run of `cfg`: sends at the staggered steps only, one fragment in
/// flight, each fragment's outer step recomputed from what the workers sent (quantized as
/// `outer_bits` says), the rest of the global model and momentum unchanged, and each merge.
/// Returns the run and the outer steps checked.
fn check_every_event(cfg: &StreamingDilocoConfig, gbps: f64) -> (Run, u64) {
    let (eta, mu, alpha) = (cfg.outer_lr, cfg.outer_momentum, cfg.mixing);
    let offsets = cfg.offsets();
    let h = u64::from(cfg.inner_steps);
    let mut before: Option<Seen> = None;
    // What each worker sent of each fragment in the round under way: its outer gradient.
    let mut sent: Vec<Vec<Option<Vec<f64>>>> = Vec::new();
    // The step after which each worker last sent each fragment.
    let mut sent_at: BTreeMap<(usize, usize), u64> = BTreeMap::new();
    let mut checked = 0;
    let run = run_streaming(cfg, layered_store(), gbps, &[(1, 2.0)], 1.0, |a, store| {
        let now = seen(a, store);
        let p = a.fragments().len();
        if sent.is_empty() {
            sent = vec![vec![None; N]; p];
        }
        let Some(b) = &before else {
            before = Some(now);
            return;
        };
        for f in 0..p {
            let idx = coords(&a.fragments()[f]);
            for (w, slot) in sent[f].iter_mut().enumerate() {
                if now.sends[w][f] > b.sends[w][f] {
                    assert_eq!(now.sends[w][f], b.sends[w][f] + 1);
                    let t = now.steps[w];
                    sent_at.insert((w, f), t);
                    assert!(
                        t >= offsets[f] && (t - offsets[f]).is_multiple_of(h),
                        "worker {w} sent fragment {f} after step {t}"
                    );
                    // The worker's row and the global model as the send read them.
                    let delta = quantized(
                        &combine(&[(1.0, &now.global), (-1.0, &now.workers[w])]),
                        &a.fragments()[f],
                        cfg.outer_bits,
                    );
                    assert!(slot.replace(delta).is_none(), "sent twice a round");
                }
            }
            if now.syncs[f] > b.syncs[f] {
                assert_eq!(now.syncs[f], b.syncs[f] + 1);
                // Every worker contributed; the mean of what they sent.
                let deltas: Vec<Vec<f64>> = sent[f].iter_mut().map(|d| d.take().unwrap()).collect();
                let share = 1.0 / N as f64;
                let terms: Vec<(f64, &[f64])> =
                    deltas.iter().map(|d| (share, d.as_slice())).collect();
                let mean = quantized(&combine(&terms), &a.fragments()[f], cfg.outer_bits);
                let (g0, m0) = (&b.global, &b.momentum);
                for j in 0..DIM {
                    if idx.contains(&j) {
                        let m1 = mu * m0[j] + mean[j];
                        let update = if cfg.nesterov { mean[j] + mu * m1 } else { m1 };
                        let g1 = g0[j] - eta * update;
                        let close = |x: f64, y: f64| (x - y).abs() <= 1e-12 * (1.0 + y.abs());
                        assert!(
                            close(now.momentum[j], m1),
                            "momentum {j}: {} vs {m1}",
                            now.momentum[j]
                        );
                        assert!(
                            close(now.global[j], g1),
                            "global {j}: {} vs {g1}",
                            now.global[j]
                        );
                    }
                }
                checked += 1;
            }
        }
        // The global model and the momentum change only on the fragments stepped.
        for j in 0..DIM {
            let stepped = (0..p).any(|f| {
                now.syncs[f] > b.syncs[f] && a.fragments()[f].iter().any(|r| r.contains(&j))
            });
            if !stepped {
                assert_eq!(now.global[j], b.global[j], "global coordinate {j}");
                assert_eq!(now.momentum[j], b.momentum[j], "momentum coordinate {j}");
            }
        }
        // Merges: α = 0 adopts the global fragment; a merge in a ring's completion (the worker
        // took no step) mixes the row as it was.
        for w in 0..N {
            for f in 0..p {
                if now.merges[w][f] == b.merges[w][f] {
                    continue;
                }
                assert_eq!(now.merges[w][f], b.merges[w][f] + 1);
                assert_eq!(now.merges[w][f], now.sends[w][f]);
                // τ inner steps after the send.
                assert_eq!(
                    now.steps[w],
                    sent_at[&(w, f)] + u64::from(cfg.overlap_steps)
                );
                assert!(now.syncs[f] >= now.merges[w][f]);
                for j in coords(&a.fragments()[f]) {
                    let x = now.workers[w][j];
                    if alpha == 0.0 {
                        assert_eq!(x, now.global[j], "worker {w} coordinate {j}");
                    } else if now.steps[w] == b.steps[w] {
                        let want = alpha * b.workers[w][j] + (1.0 - alpha) * now.global[j];
                        assert!((x - want).abs() <= 1e-12 * (1.0 + want.abs()));
                    }
                }
            }
            // At most one fragment in flight.
            let sends: u64 = now.sends[w].iter().sum();
            let merges: u64 = now.merges[w].iter().sum();
            assert!(
                sends - merges <= 1,
                "worker {w}: {sends} sends, {merges} merges"
            );
        }
        before = Some(now);
    });
    (run, checked)
}

#[test]
fn every_fragment_outer_step_is_nesterov_on_its_coordinates_from_what_was_sent() {
    for (fragments, overlap, mixing, bits, pattern, nesterov) in [
        (3, 0, 0.5, 32, FragmentPattern::Strided, true),
        (3, 2, 0.0, 32, FragmentPattern::Strided, false),
        (2, 1, 0.5, 4, FragmentPattern::Sequential, true),
        (6, 1, 0.3, 1, FragmentPattern::Strided, true),
    ] {
        let cfg = StreamingDilocoConfig {
            inner_steps: 12,
            fragments,
            overlap_steps: overlap,
            mixing,
            outer_bits: bits,
            pattern,
            nesterov,
            ..Default::default()
        };
        let (run, checked) = check_every_event(&cfg, 1.0);
        assert!(
            checked >= 3 * u64::from(fragments),
            "{cfg:?}: {checked} outer steps checked"
        );
        if bits >= 4 {
            let last = run.points.last().unwrap();
            assert!(last.eval.loss < run.points[0].eval.loss, "{cfg:?} trained");
        }
        drop(run.store);
    }
}

/// The rate and momentum of [`run_streaming`]'s inner optimizer (SGD, heavy ball, no weight
/// decay, no Nesterov).
const INNER_LR: f64 = 0.05;

/// The overlapped regime (τ ≥ 1): the fragment's ring completes while the worker computes its
/// τ inner steps, so the merge comes in the event of its inner step `send + τ`, and the
/// fragment becomes `α·x_t + (1 − α)·θ_p`, with `x_t` the worker's row after that step (the
/// current local fragment, not the one it sent) and `θ_p` the global fragment. `x_t` is rebuilt
/// from the row before the event and the store's SGD step, `x_{t−1} − η·v_t` (`v_t` the
/// worker's heavy-ball buffer after the step, which a merge does not touch); the coordinates
/// outside the fragment, which only that step moves, check the rebuild. `α = 0.3`, so `α` and
/// `1 − α` swapped would not pass either.
#[test]
fn an_overlapped_merge_mixes_the_current_local_fragment_with_the_global_one() {
    let cfg = StreamingDilocoConfig {
        inner_steps: 12,
        fragments: 3,
        overlap_steps: 2,
        mixing: 0.3,
        ..Default::default()
    };
    let alpha = cfg.mixing;
    let close = |x: f64, y: f64| (x - y).abs() <= 1e-12 * (1.0 + y.abs());
    let mut before: Option<Seen> = None;
    // Each worker's row when it last sent each fragment.
    let mut at_send: BTreeMap<(usize, usize), Vec<f64>> = BTreeMap::new();
    // Overlapped merges checked, and those a merge of the row as sent would have missed.
    let (mut checked, mut told_apart) = (0, 0);
    // Equal workers: every ring completes within a step, so no worker waits at its merge.
    run_streaming(&cfg, layered_store(), 1.0, &[], 1.0, |a, store| {
        let now = seen(a, store);
        let Some(b) = &before else {
            before = Some(now);
            return;
        };
        for w in 0..N {
            for f in 0..a.fragments().len() {
                if now.sends[w][f] > b.sends[w][f] {
                    // A merge at the same step comes first: this is the row the send read.
                    at_send.insert((w, f), now.workers[w].clone());
                }
                if now.merges[w][f] == b.merges[w][f] || now.steps[w] == b.steps[w] {
                    continue;
                }
                assert_eq!(
                    now.steps[w],
                    b.steps[w] + 1,
                    "worker {w}: one step per event"
                );
                assert!(
                    now.syncs[f] >= now.merges[w][f],
                    "merged before the outer step"
                );
                let v = store.velocity(w);
                let x_t: Vec<f64> = (0..DIM)
                    .map(|j| b.workers[w][j] - INNER_LR * v[j])
                    .collect();
                let sent = &at_send[&(w, f)];
                let idx = coords(&a.fragments()[f]);
                let mut apart = false;
                for j in 0..DIM {
                    let x = now.workers[w][j];
                    if idx.contains(&j) {
                        let want = alpha * x_t[j] + (1.0 - alpha) * now.global[j];
                        assert!(
                            close(x, want),
                            "worker {w}, fragment {f}, coordinate {j} after step {}: merged {x}, \
                             α·x_t + (1 − α)·θ = {want}",
                            now.steps[w]
                        );
                        let as_sent = alpha * sent[j] + (1.0 - alpha) * now.global[j];
                        apart |= (want - as_sent).abs() > 1e-9 * (1.0 + want.abs());
                    } else {
                        assert!(
                            close(x, x_t[j]),
                            "worker {w}, coordinate {j} outside fragment {f}: {x} vs the \
                             step's {}",
                            x_t[j]
                        );
                    }
                }
                checked += 1;
                told_apart += u32::from(apart);
            }
        }
        before = Some(now);
    });
    assert!(checked >= 80, "{checked} overlapped merges checked");
    assert_eq!(
        told_apart, checked,
        "the local fragment moved between send and merge"
    );
}

/// With the streaming options at their defaults (torchft's: one fragment, no overlap, no mixing,
/// 32 bits): the same events, messages, activities, staleness and models as DiLoCo, step for
/// step. Only the consensus distance of an evaluation
/// point between the first and the last ring completion of a round may differ (DiLoCo sets every
/// worker at the first, Streaming DiLoCo each at its own); none falls there in this run.
#[test]
fn with_default_options_it_is_diloco() {
    for nesterov in [true, false] {
        let cfg = StreamingDilocoConfig {
            inner_steps: 5,
            nesterov,
            ..Default::default()
        };
        let streaming = run_streaming(
            &cfg,
            quadratic_store(N, SEED),
            1.0,
            &[(1, 2.0)],
            1.5,
            |_, _| {},
        );
        let diloco_cfg = cfg.outer();
        let mut store = Checked::new(quadratic_store(N, SEED));
        let alg_cfg = AlgorithmConfig::from(AlgorithmKind::Diloco(diloco_cfg.clone()));
        let opt = optimizer(0.05, 0.5);
        let mut points = Collect::default();
        let (outcome, global) = {
            let mut world = world(
                &alg_cfg,
                &cluster(N, &[(1, 2.0)]),
                &net(1.0, 20.0),
                TopologyConfig::Ring {},
                &mut store,
                &opt,
                SEED,
            );
            let mut alg = Diloco::new(&diloco_cfg, N);
            let outcome = run_inspect(
                &mut alg,
                &mut world,
                &stop_at(1.5),
                &mut points,
                &mut |_, _, _| {},
            )
            .unwrap();
            (outcome, alg.global_row())
        };
        assert_eq!(format!("{:?}", streaming.outcome), format!("{outcome:?}"));
        assert_eq!(streaming.points.len(), points.0.len());
        for (a, b) in streaming.points.iter().zip(&points.0) {
            assert_eq!(format!("{a:?}"), format!("{b:?}"));
        }
        let (s, d) = (streaming.store.inner.borrow(), store.inner.borrow());
        for row in (0..N).chain([global, global + 1]) {
            assert_eq!(s.params(row), d.params(row), "row {row}");
        }
        assert!(
            outcome.worker_steps >= 5 * 5 * N as u64,
            "several rounds ran"
        );
    }
}

/// Per worker its sends of each fragment; per worker its steps; the fragments.
type Last = (Vec<Vec<u64>>, Vec<u64>, Vec<Vec<Range<usize>>>);

#[test]
fn each_fragment_is_sent_once_per_h_steps_and_the_bytes_are_its_quantized_ring() {
    for bits in [4, 32] {
        let cfg = StreamingDilocoConfig {
            inner_steps: 8,
            fragments: 4,
            overlap_steps: 1,
            outer_bits: bits,
            ..Default::default()
        };
        let mut last: Option<Last> = None;
        let run = run_streaming(&cfg, layered_store(), 1.0, &[(1, 2.0)], 1.0, |a, _| {
            last = Some((
                (0..N).map(|w| a.sends(w).to_vec()).collect(),
                (0..N).map(|w| a.steps(w)).collect(),
                a.fragments().to_vec(),
            ));
        });
        let (sends, steps, fragments) = last.unwrap();
        // Strided: layers 0 and 4 in fragment 0, 1 and 5 in fragment 1, and so on.
        assert_eq!(
            fragments,
            vec![
                vec![0..3, 11..12],
                vec![3..5, 12..16],
                vec![5..8],
                vec![8..11]
            ]
        );
        let offsets = cfg.offsets();
        assert_eq!(offsets, [2, 4, 6, 8]);
        let h = 8;
        for w in 0..N {
            for f in 0..4 {
                let due = if steps[w] >= offsets[f] {
                    (steps[w] - offsets[f]) / h + 1
                } else {
                    0
                };
                assert_eq!(
                    sends[w][f], due,
                    "worker {w}, fragment {f}, {} steps",
                    steps[w]
                );
            }
        }
        // Each round of a fragment is a ring of 2(n − 1) chunks per worker of
        // ⌈bytes/n⌉, bytes = ⌈c·b/8⌉ + 4 (the scale) or 4c unquantized; a round runs once every
        // worker has sent.
        let header = NetworkConfig::default().header_bytes;
        let n = N as u64;
        let mut bytes = 0;
        let mut messages = 0;
        for (f, fragment) in fragments.iter().enumerate() {
            let c: u64 = fragment.iter().map(|r| r.len() as u64).sum();
            let payload = if bits == 32 {
                4 * c
            } else {
                (c * bits as u64).div_ceil(8) + 4
            };
            let rounds = (0..N).map(|w| sends[w][f]).min().unwrap();
            let chunks = rounds * 2 * (n - 1) * n;
            messages += chunks;
            bytes += chunks * (payload.div_ceil(n) + header);
        }
        assert_eq!(run.outcome.network.messages, messages);
        assert_eq!(run.outcome.network.bytes, bytes);
        assert!(steps.iter().all(|&s| s >= 3 * h), "{steps:?}");
    }
}

/// With a few steps of overlap the all-reduce of a fragment, which takes a few steps on this slow
/// network, hides behind compute: no worker ever waits, and the run takes more steps in the same
/// time than with no overlap, where every worker waits at every send.
#[test]
fn overlapping_hides_the_all_reduce_behind_compute() {
    let time_in = |cfg: &StreamingDilocoConfig, activity: Activity| -> (SimTime, u64) {
        let run = run_streaming(cfg, layered_store(), 0.0001, &[], 2.0, |_, _| {});
        let t = run
            .outcome
            .record
            .usage
            .iter()
            .fold(SimTime::ZERO, |acc, u| acc + u.get(activity));
        (t, run.outcome.worker_steps)
    };
    let base = StreamingDilocoConfig {
        inner_steps: 32,
        fragments: 4,
        outer_bits: 32,
        ..Default::default()
    };
    let overlapped = StreamingDilocoConfig {
        overlap_steps: 6,
        ..base.clone()
    };
    let (comm0, steps0) = time_in(&base, Activity::Communicate);
    let (comm3, steps3) = time_in(&overlapped, Activity::Communicate);
    let (blocked3, _) = time_in(&overlapped, Activity::Blocked);
    assert!(comm0 > SimTime::from_millis_f64(100.0), "{comm0}");
    assert_eq!(comm3, SimTime::ZERO);
    assert_eq!(blocked3, SimTime::ZERO);
    assert!(steps3 > steps0, "{steps3} vs {steps0}");
}

#[test]
fn quantization_error_is_bounded_by_the_scale_and_levels() {
    let values: Vec<f64> = (0..101)
        .map(|k| ((k * 37 % 101) as f64 - 50.0) * 0.013 + (k as f64).sin() * 1e-3)
        .collect();
    let coords = [3..40, 50..101];
    let inside = |j: usize| coords.iter().any(|r| r.contains(&j));
    for bits in 1..=32 {
        let mut q = values.clone();
        let s = quantize(&mut q, &coords, bits);
        assert_eq!(
            q,
            quantized(&values, &coords, bits),
            "{bits} bits: the documented rule"
        );
        for j in 0..values.len() {
            if !inside(j) {
                assert_eq!(q[j], values[j], "outside the fragment");
            }
        }
        match bits {
            32 => assert_eq!(q, values),
            1 => {
                let mean = coords
                    .iter()
                    .flat_map(|r| r.clone())
                    .map(|j| values[j].abs())
                    .sum::<f64>()
                    / 88.0;
                assert!((s - mean).abs() < 1e-15);
                for j in (0..values.len()).filter(|&j| inside(j)) {
                    assert_eq!(q[j], if values[j] >= 0.0 { s } else { -s });
                }
            }
            _ => {
                let max = coords
                    .iter()
                    .flat_map(|r| r.clone())
                    .map(|j| values[j].abs())
                    .fold(0.0, f64::max);
                assert_eq!(s, max);
                let levels = ((1u64 << (bits - 1)) - 1) as f64;
                for j in (0..values.len()).filter(|&j| inside(j)) {
                    let err = (q[j] - values[j]).abs();
                    assert!(
                        err <= s / (2.0 * levels) * (1.0 + 1e-12),
                        "{bits} bits, {j}: {err}"
                    );
                    // On a level.
                    let k = q[j] / s * levels;
                    assert!((k - k.round()).abs() < 1e-6, "{bits} bits: level {k}");
                }
            }
        }
    }
    let mut zeros = vec![0.0; 8];
    assert_eq!(quantize(&mut zeros, std::slice::from_ref(&(0..8)), 4), 0.0);
    assert_eq!(zeros, vec![0.0; 8]);
}

#[test]
fn fragments_are_whole_layers_strided_or_sequential() {
    let cfg = |fragments, pattern| StreamingDilocoConfig {
        inner_steps: 12,
        fragments,
        pattern,
        ..Default::default()
    };
    let l = layers();
    let none = DIM..DIM;
    let strided = cfg(4, FragmentPattern::Strided)
        .fragments_of(&l, none.clone(), "a")
        .unwrap();
    assert_eq!(
        strided,
        vec![
            vec![0..3, 11..12],
            vec![3..5, 12..16],
            vec![5..8],
            vec![8..11]
        ]
    );
    let sequential = cfg(4, FragmentPattern::Sequential)
        .fragments_of(&l, none.clone(), "a")
        .unwrap();
    assert_eq!(
        sequential,
        vec![vec![0..5], vec![5..11], vec![11..12], vec![12..16]]
    );
    // Running statistics (the last layer, outside the trainable coordinates) go with the last
    // fragment.
    let with_state = cfg(2, FragmentPattern::Strided)
        .fragments_of(&l, 12..16, "a")
        .unwrap();
    assert_eq!(
        with_state,
        vec![vec![0..3, 5..8, 11..12], vec![3..5, 8..11, 12..16]]
    );
    // A model of one layer: coordinate blocks.
    let one = [Layer {
        params: 0..DIM,
        forward_flops: 1,
    }];
    let blocks = cfg(3, FragmentPattern::Strided)
        .fragments_of(&one, none.clone(), "a")
        .unwrap();
    assert_eq!(blocks, vec![vec![0..6], vec![6..11], vec![11..16]]);
    let e = cfg(7, FragmentPattern::Strided)
        .fragments_of(&l, none, "algorithms[2]")
        .unwrap_err();
    assert_eq!(e.path.to_string(), "algorithms[2].fragments");
    assert!(e.hint.unwrap().contains("at most 6"));
}

#[test]
fn bad_options_are_refused_at_their_field_with_a_hint() {
    for (options, field) in [
        ("inner_steps = 0", "inner_steps"),
        ("outer_lr = -0.5", "outer_lr"),
        ("outer_momentum = 1.0", "outer_momentum"),
        ("fragments = 0", "fragments"),
        ("inner_steps = 4\nfragments = 5", "fragments"),
        ("inner_steps = 12\nfragments = 7", "fragments"),
        (
            "inner_steps = 12\nfragments = 3\noverlap_steps = 4",
            "overlap_steps",
        ),
        (
            "inner_steps = 12\nfragments = 5\noverlap_steps = 3",
            "overlap_steps",
        ),
        ("outer_bits = 0", "outer_bits"),
        ("outer_bits = 33", "outer_bits"),
        ("mixing = 1.5", "mixing"),
        ("mixing = -0.1", "mixing"),
    ] {
        let cfg: AlgorithmConfig =
            toml::from_str(&format!("kind = \"streaming-diloco\"\n{options}"))
                .unwrap_or_else(|e| panic!("{options}: {e}"));
        let mut store = layered_store();
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
        .unwrap_or_else(|| panic!("{options} was accepted"));
        let dasim_sim::Error::Config(e) = &err else {
            panic!("{options}: {err}")
        };
        assert_eq!(
            e.path.to_string(),
            format!("algorithms.{field}"),
            "{options}: {e}"
        );
        assert!(e.hint.is_some(), "{options}: no hint");
    }
    // The bound is τ·P < H: τ = 3 with H = 12 and P = 3 is accepted; an unknown pattern is not.
    let ok: AlgorithmConfig = toml::from_str(
        "kind = \"streaming-diloco\"\ninner_steps = 12\nfragments = 3\noverlap_steps = 3",
    )
    .unwrap();
    let topology = Topology::build(&TopologyConfig::Ring {}, N, &BuildEnv::new(1)).unwrap();
    ok.validate(&topology, "algorithms[0]", Some(DIM)).unwrap();
    assert!(
        toml::from_str::<AlgorithmConfig>("kind = \"streaming-diloco\"\npattern = \"random\"")
            .is_err()
    );
}

#[test]
fn a_crash_stalls_the_run_at_the_next_merge_and_a_rejoin_is_refused() {
    // H = 8, 2 fragments sent after steps 4 and 8, merged 2 steps later. Worker 2 crashes at
    // 25 ms, in its third step: the others take steps 3 and 4, send fragment 0 (whose ring
    // cannot complete), go on to step 6 and wait there for good.
    let cfg = StreamingDilocoConfig {
        inner_steps: 8,
        fragments: 2,
        overlap_steps: 2,
        ..Default::default()
    };
    let alg = AlgorithmConfig::from(AlgorithmKind::StreamingDiloco(cfg));
    let faults: Vec<FaultConfig> = {
        #[derive(serde::Deserialize)]
        struct Doc {
            faults: Vec<FaultConfig>,
        }
        toml::from_str::<Doc>("[[faults]]\nkind = \"crash\"\nworkers = [2]\nat_s = 0.025")
            .unwrap()
            .faults
    };
    let mut store = layered_store();
    let opt = optimizer(0.05, 0.0);
    let mut world = world(
        &alg,
        &cluster(N, &[]),
        &net(1.0, 20.0),
        TopologyConfig::Ring {},
        &mut store,
        &opt,
        SEED,
    );
    world.set_faults(Faults::new(&faults, N, &BuildEnv::new(SEED)).unwrap());
    let out = dasim_sim::algorithms::run_algorithm(
        &alg,
        &mut world,
        &stop_at(100.0),
        &mut Collect::default(),
    )
    .unwrap();
    let stall = out.stalled.clone().expect("a stall");
    assert_eq!(stall.time, SimTime::from_millis_f64(60.0));
    assert_eq!(out.worker_steps, 3 * 6 + 2);
    assert_eq!(stall.waiting.len(), 4, "{:?}", stall.waiting);
    for (line, w) in stall.waiting.iter().zip([0, 1, 3]) {
        assert_eq!(
            line,
            &format!(
                "worker {w} waits for all-reduce 0, which cannot complete: worker 2 crashed at \
                 0.025 s and never rejoins (fragment 0)"
            )
        );
    }
    // A rejoin is refused, at the fault's kind.
    let rejoin: Vec<FaultConfig> = {
        #[derive(serde::Deserialize)]
        struct Doc {
            faults: Vec<FaultConfig>,
        }
        toml::from_str::<Doc>(
            "[[faults]]\nkind = \"crash\"\nworkers = [2]\nat_s = 0.025\nrejoin_after_s = 0.1",
        )
        .unwrap()
        .faults
    };
    let e = alg
        .check_fault_support(&rejoin, "algorithms[0]")
        .unwrap_err();
    assert_eq!(e.path.to_string(), "faults[0].kind");
    assert!(e.message.contains("streaming-diloco"), "{e}");
}

/// The reference store of [`layers`] whose last layer, `12..16`, is declared running
/// statistics (as batch norm's): no optimizer step there; a worker's step moves them as a
/// training pass moves a running variance, `x ← 0.9·x + 0.1·v` towards a large `v` of its own
/// (`50·(w + 1)·(j − 11)`), so their outer change dwarfs the weights'.
struct WithStats {
    inner: std::rc::Rc<std::cell::RefCell<ReferenceStore>>,
}

const STATS: Range<usize> = 12..DIM;

impl ReplicaStore for WithStats {
    fn workers(&self) -> usize {
        self.inner.borrow().workers()
    }
    fn rows(&self) -> usize {
        self.inner.borrow().rows()
    }
    fn num_params(&self) -> usize {
        self.inner.borrow().num_params()
    }
    fn batch_size(&self) -> usize {
        self.inner.borrow().batch_size()
    }
    fn train_size(&self) -> usize {
        self.inner.borrow().train_size()
    }
    fn layers(&self) -> Vec<Layer> {
        self.inner.borrow().layers()
    }
    fn state(&self) -> Range<usize> {
        STATS
    }
    fn add_rows(&mut self, count: usize) -> usize {
        self.inner.borrow_mut().add_rows(count)
    }
    fn request_gradient_scaled(&mut self, worker: usize, scale: f64) -> GradId {
        self.inner
            .borrow_mut()
            .request_gradient_scaled(worker, scale)
    }
    fn mean_gradient(&mut self, grads: &[GradId]) -> GradId {
        self.inner.borrow_mut().mean_gradient(grads)
    }
    fn apply_gradient_block(&mut self, row: usize, grad: GradId, lr: f64, block: Range<usize>) {
        let mut inner = self.inner.borrow_mut();
        let trained = block.start..block.end.min(STATS.start);
        if !trained.is_empty() {
            inner.apply_gradient_block(row, grad, lr, trained);
        }
        if row < inner.workers() {
            let mut x = inner.params(row).to_vec();
            let first = STATS.start.max(block.start);
            for (j, s) in x.iter_mut().enumerate().take(block.end).skip(first) {
                let v = 50.0 * (row + 1) as f64 * (j - 11) as f64;
                *s = 0.9 * *s + 0.1 * v;
            }
            inner.set_params(row, x);
        }
    }
    fn release_gradient(&mut self, grad: GradId) {
        self.inner.borrow_mut().release_gradient(grad)
    }
    fn swap_optimizer_state(&mut self, a: usize, b: usize) {
        self.inner.borrow_mut().swap_optimizer_state(a, b)
    }
    fn reset_optimizer_state(&mut self, row: usize) {
        self.inner.borrow_mut().reset_optimizer_state(row)
    }
    fn average(&mut self, rows: &[usize]) {
        self.inner.borrow_mut().average(rows)
    }
    fn mix(&mut self, dst: usize, terms: &[(Slot, f64)]) {
        self.inner.borrow_mut().mix(dst, terms)
    }
    fn new_msg(&mut self, terms: &[(Slot, f64)]) -> MsgId {
        self.inner.borrow_mut().new_msg(terms)
    }
    fn release_msg(&mut self, msg: MsgId) {
        self.inner.borrow_mut().release_msg(msg)
    }
    fn msg_values(&mut self, msg: MsgId) -> Vec<f64> {
        self.inner.borrow_mut().msg_values(msg)
    }
    fn msg_from_values(&mut self, values: &[f64]) -> MsgId {
        self.inner.borrow_mut().msg_from_values(values)
    }
    fn gradient_values(&mut self, grad: GradId) -> Vec<f64> {
        self.inner.borrow_mut().gradient_values(grad)
    }
    fn set_gradient_values(&mut self, grad: GradId, values: &[f64]) {
        self.inner.borrow_mut().set_gradient_values(grad, values)
    }
    fn copy_block(&mut self, dst: usize, src: usize, block: Range<usize>) {
        self.inner.borrow_mut().copy_block(dst, src, block)
    }
    fn evaluate(&mut self) -> Evaluation {
        self.inner.borrow_mut().evaluate()
    }
    fn evaluate_mix(&mut self, terms: &[(usize, f64)]) -> Evaluation {
        self.inner.borrow_mut().evaluate_mix(terms)
    }
    fn take_train_loss(&mut self) -> f64 {
        self.inner.borrow_mut().take_train_loss()
    }
    fn consensus_distance(&mut self, scales: Option<&[f64]>) -> f64 {
        self.inner.borrow_mut().consensus_distance(scales)
    }
    fn suboptimality(&mut self, terms: Option<&[(usize, f64)]>) -> Option<f64> {
        self.inner.borrow_mut().suboptimality(terms)
    }
}

/// At 4 bits the running statistics travel with the last fragment but outside its quantized
/// coordinates: after every outer step of that fragment the global statistics are the exact
/// mean of what the workers sent (no quantization, no outer step), and the fragment's weights,
/// quantized under their own scale, still move although the statistics changed by hundreds.
/// The fragment's payload counts the statistics at full width.
#[test]
fn quantized_running_statistics_are_averaged_exactly_and_do_not_zero_the_weights() {
    let cfg = StreamingDilocoConfig {
        inner_steps: 8,
        fragments: 2,
        overlap_steps: 1,
        mixing: 0.5,
        outer_bits: 4,
        ..Default::default()
    };
    let shared = std::rc::Rc::new(std::cell::RefCell::new(layered_store()));
    let mut store = WithStats {
        inner: std::rc::Rc::clone(&shared),
    };
    let alg_cfg = AlgorithmConfig::from(AlgorithmKind::StreamingDiloco(cfg.clone()));
    let opt = optimizer(0.05, 0.5);
    let mut alg = StreamingDiloco::new(&cfg, N);
    let mut before: Option<Seen> = None;
    // Per worker, its row when it last sent the last fragment.
    let mut sent: Vec<Option<Vec<f64>>> = vec![None; N];
    let (mut steps, mut frozen, mut state_err) = (0, 0, 0.0_f64);
    let mut last_fragment = Vec::new();
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
            &stop_at(1.0),
            &mut Collect::default(),
            &mut |a: &StreamingDiloco, _, _| {
                let now = seen(a, &shared.borrow());
                let last = a.fragments().len() - 1;
                last_fragment = a.fragments()[last].clone();
                let Some(b) = &before else {
                    before = Some(now);
                    return;
                };
                for (w, slot) in sent.iter_mut().enumerate() {
                    if now.sends[w][last] > b.sends[w][last] {
                        *slot = Some(now.workers[w].clone());
                    }
                }
                if now.syncs[last] > b.syncs[last] {
                    steps += 1;
                    let rows: Vec<Vec<f64>> = sent.iter_mut().map(|s| s.take().unwrap()).collect();
                    let share = 1.0 / N as f64;
                    let terms: Vec<(f64, &[f64])> =
                        rows.iter().map(|r| (share, r.as_slice())).collect();
                    let mean = combine(&terms);
                    for j in STATS {
                        let err = (now.global[j] - mean[j]).abs() / mean[j].abs().max(1.0);
                        state_err = state_err.max(err);
                    }
                    let weights = coords(&a.fragments()[last]);
                    if weights
                        .iter()
                        .filter(|&&j| j < STATS.start)
                        .all(|&j| now.global[j] == b.global[j])
                    {
                        frozen += 1;
                    }
                }
                before = Some(now);
            },
        )
        .unwrap()
    };
    assert!(steps >= 3, "{steps} outer steps of the last fragment");
    assert!(
        state_err <= 1e-12 && frozen == 0,
        "the global running statistics are off the workers' mean by up to {state_err:.3e} \
         (relative), and the last fragment's weights did not move at {frozen} of its {steps} \
         outer steps"
    );
    // Bytes: the weights of each fragment at 4 bits and one scale; the last fragment's four
    // statistics at 4 bytes each.
    assert_eq!(last_fragment, vec![3..5, 8..11, 12..16]);
    let header = NetworkConfig::default().header_bytes;
    let n = N as u64;
    let payload = |weights: u64, stats: u64| (weights * 4).div_ceil(8) + 4 + 4 * stats;
    let per_round = |bytes: u64| 2 * (n - 1) * n * (bytes.div_ceil(n) + header);
    let rounds: Vec<u64> = (0..2)
        .map(|f| (0..N).map(|w| alg.sends(w)[f]).min().unwrap())
        .collect();
    assert_eq!(
        outcome.network.bytes,
        rounds[0] * per_round(payload(7, 0)) + rounds[1] * per_round(payload(5, 4))
    );
}
