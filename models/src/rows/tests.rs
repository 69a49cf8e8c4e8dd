//! The rows' tests: copy-on-write, the spares, queued steps bit for bit, threads, the
//! combinations and SGD's loop against its formula.

use super::combine::{COMBINE_TILE, parts};
use super::queue::{queue_cap, sgd_apply};
use super::*;

fn rows(n: usize, p: usize) -> Rows {
    let mut rows = Rows::new(vec![0.0; p], n, &OptimizerConfig::default());
    for r in 0..n {
        rows.set(r, (0..p).map(|k| (r * p + k) as f32).collect());
    }
    rows
}

#[test]
fn writes_while_snapshots_are_held_copy_only_the_row_written() {
    let (n, p) = (64, 100);
    let mut rows = rows(n, p);
    let snaps: Vec<Row> = (0..8).map(|r| rows.share(r)).collect();
    // Writing rows nobody holds copies nothing, however many snapshots are pending.
    for r in 8..n {
        rows.step(
            r,
            &vec![1.0; p],
            0.1,
            0..p,
            &OptimizerConfig::default(),
            &Layout::default(),
        );
    }
    assert_eq!(rows.floats_copied(), 0);
    // A held row is copied once on its first write, then written in place.
    rows.step(
        3,
        &vec![1.0; p],
        0.1,
        0..p,
        &OptimizerConfig::default(),
        &Layout::default(),
    );
    rows.step(
        3,
        &vec![1.0; p],
        0.1,
        0..p,
        &OptimizerConfig::default(),
        &Layout::default(),
    );
    assert_eq!(rows.floats_copied(), p as u64);
    // The snapshot kept what was read.
    assert_eq!(snaps[3][0], (3 * p) as f32);
    assert!((rows.get(3)[0] - ((3 * p) as f32 - 0.2)).abs() < 1e-3);
    // Memory: n rows plus one buffer per snapshot whose row changed since.
    let live: std::collections::BTreeSet<*const f32> = (0..n)
        .map(|r| rows.get(r).as_ptr())
        .chain(snaps.iter().map(|s| s.as_ptr()))
        .collect();
    assert_eq!(live.len(), n + 1);
}

#[test]
fn in_place_combination_is_bit_identical_to_a_fresh_one() {
    let p = 257;
    let a: Vec<f32> = (0..p)
        .map(|k| ((k * 7919) % 113) as f32 / 17.0 - 3.0)
        .collect();
    let b: Vec<f32> = (0..p)
        .map(|k| ((k * 104_729) % 97) as f32 / 13.0 - 2.5)
        .collect();
    let c: Vec<f32> = (0..p).map(|k| (k as f32).sin()).collect();
    for (w0, wb, wc) in [(1.0, 1.0, 1.0), (1.0 / 3.0, 1.0, 0.7), (0.5, -1.0, 1e-3)] {
        let fresh = combine(&[(&a, w0), (&b, wb), (&c, wc)]);
        let mut into = vec![f32::NAN; p];
        combine_into(&mut into, &[(&a, w0), (&b, wb), (&c, wc)]);
        let mut in_place = a.clone();
        combine_in_place(&mut in_place, w0, &[(&b, wb), (&c, wc)]);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&into), bits(&fresh), "weights {w0} {wb} {wc}");
        assert_eq!(bits(&in_place), bits(&fresh), "weights {w0} {wb} {wc}");
    }
}

#[test]
fn a_steady_gossip_cycle_allocates_nothing_after_its_first_rounds() {
    // Each round every row is snapshotted (a gradient request), sends a share (a message
    // buffer), mixes a neighbour's message in and is stepped; then the snapshots and the
    // messages are released. Once the spares hold a round's swing, no round allocates.
    let (n, p) = (32, 50);
    let mut rows = rows(n, p);
    let opt = OptimizerConfig::default();
    let round = |rows: &mut Rows| {
        let snaps: Vec<Row> = (0..n).map(|r| rows.share(r)).collect();
        let msgs: Vec<Row> = (0..n)
            .map(|r| {
                let mut m = rows.buffer();
                combine_into(&mut m, &[(rows.get(r), 0.5)]);
                Arc::new(m)
            })
            .collect();
        for r in 0..n {
            let mut mixed = rows.buffer();
            combine_into(&mut mixed, &[(rows.get(r), 0.5), (&msgs[(r + 1) % n], 1.0)]);
            rows.set(r, mixed);
            rows.step(r, &vec![1.0; p], 0.1, 0..p, &opt, &Layout::default());
        }
        for s in snaps.into_iter().chain(msgs) {
            rows.recycle(s);
        }
    };
    for _ in 0..3 {
        round(&mut rows);
    }
    let warm = rows.buffers_allocated();
    assert!(warm > 0);
    for _ in 0..20 {
        round(&mut rows);
    }
    assert_eq!(
        rows.buffers_allocated(),
        warm,
        "steady rounds allocate nothing"
    );
    // The spares never outnumber what a round had alive at once besides the rows.
    assert!(rows.spares() <= 2 * n, "{} spares", rows.spares());
}

#[test]
fn a_row_shared_with_a_snapshot_is_never_taken_for_in_place_writes() {
    let mut rows = rows(2, 4);
    let snap = rows.share(0);
    assert!(rows.take_unique(0).is_none());
    assert_eq!(rows.get(0), &[0.0, 1.0, 2.0, 3.0]);
    drop(snap);
    let mut row = rows.take_unique(0).expect("nobody else holds it");
    row[0] = 9.0;
    rows.set(0, row);
    assert_eq!(rows.get(0), &[9.0, 1.0, 2.0, 3.0]);
}

#[test]
fn average_is_atomic_and_leaves_other_rows() {
    let mut rows = rows(4, 3);
    rows.average(&[1, 3]);
    assert_eq!(rows.get(1), &[6.0, 7.0, 8.0]);
    assert_eq!(rows.get(3), &[6.0, 7.0, 8.0]);
    assert_eq!(rows.get(0), &[0.0, 1.0, 2.0]);
    // The averaged rows share a buffer until one of them is written.
    rows.copy_block(1, 0, 0..1);
    assert_eq!(rows.get(1), &[0.0, 7.0, 8.0]);
    assert_eq!(rows.get(3), &[6.0, 7.0, 8.0]);
}

#[test]
fn momentum_nesterov_and_decay_follow_the_store_contract() {
    let opt = OptimizerConfig {
        momentum: 0.5,
        nesterov: Some(true),
        weight_decay: 0.1,
        ..Default::default()
    };
    let mut rows = Rows::new(vec![1.0, 2.0], 1, &opt);
    rows.step(0, &[1.0], 0.5, 1..2, &opt, &Layout::default());
    // d = 1 + 0.1·2 = 1.2; v = 1.2; step = 1.2 + 0.5·1.2 = 1.8; x = 2 − 0.9.
    assert_eq!(rows.get(0)[0], 1.0, "outside the block nothing moves");
    assert!((rows.get(0)[1] - 1.1).abs() < 1e-6);
    rows.step(0, &[0.0], 1.0, 1..2, &opt, &Layout::default());
    // d = 0.11; v = 0.6 + 0.11 = 0.71; step = 0.11 + 0.355 = 0.465.
    assert!((rows.get(0)[1] - (1.1 - 0.465)).abs() < 1e-6);
}

/// A gradient of `p` floats from a seed, with values of mixed signs and magnitudes.
fn gradient(seed: usize, p: usize) -> Row {
    Arc::new(
        (0..p)
            .map(|k| (((k + 31 * seed) * 7919) % 211) as f32 / 37.0 - 2.9)
            .collect(),
    )
}

/// Asserts the same bits, naming the first coordinate that differs rather than printing two
/// vectors of thousands.
fn same(got: &[f32], want: &[f32], what: &str) {
    let diff = bits(got).iter().zip(bits(want)).position(|(a, b)| *a != b);
    assert_eq!(
        diff,
        None,
        "{what}: {got:?} and {want:?} at the first difference",
        got = diff.map(|i| got[i]),
        want = diff.map(|i| want[i])
    );
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn queued_steps_are_bit_identical_to_steps_one_by_one() {
    // Rows wider than a tile, blocks that cross tiles and overlap, momentum, Nesterov and
    // decay, rates that change from step to step, and more steps than a queue holds.
    let p = 5000;
    for opt in [
        OptimizerConfig::default(),
        OptimizerConfig {
            momentum: 0.9,
            ..Default::default()
        },
        OptimizerConfig {
            momentum: 0.7,
            nesterov: Some(true),
            weight_decay: 1e-3,
            ..Default::default()
        },
    ] {
        let init: Vec<f32> = (0..p).map(|k| (k as f32 * 0.37).sin()).collect();
        let mut eager = Rows::new(init.clone(), 2, &opt);
        let mut lazy = Rows::new(init, 2, &opt);
        let blocks = [0..p, 1000..4500, 2047..2049, 0..1, 3000..p];
        for step in 0..3 * MAX_QUEUE + 5 {
            let g = gradient(step, p);
            let block = blocks[step % blocks.len()].clone();
            let lr = 0.01 + 0.001 * (step % 7) as f64;
            let r = step % 2;
            eager.step(
                r,
                &g[block.clone()],
                lr,
                block.clone(),
                &opt,
                &Layout::default(),
            );
            lazy.step_shared(r, &g, lr, block, &opt, &Layout::default());
        }
        assert!(lazy.queued_steps() > 0, "some steps are still queued");
        for r in 0..2 {
            assert_eq!(bits(&lazy.value(r)), bits(eager.get(r)), "{opt:?} row {r}");
        }
        lazy.settle_all();
        assert_eq!(lazy.queued_steps(), 0);
        for r in 0..2 {
            assert_eq!(bits(lazy.get(r)), bits(eager.get(r)), "{opt:?} row {r}");
        }
        // The momentum moved the same way: one more step agrees too.
        let g = gradient(999, p);
        eager.step(0, &g, 0.05, 0..p, &opt, &Layout::default());
        lazy.step(0, &g, 0.05, 0..p, &opt, &Layout::default());
        assert_eq!(bits(lazy.get(0)), bits(eager.get(0)), "{opt:?} after");
    }
}

#[test]
fn passes_split_over_threads_are_bit_identical_to_one_thread() {
    // Rows long enough to be split (not a whole number of tiles, so the parts differ in
    // length), blocks that end inside a part, momentum with decay, and three threads.
    let p = 3 * PARALLEL_FLOATS / 2 + 77;
    assert!(parts(p, p, 3, 2048) == 3 && parts(p, 2 * p, 3, COMBINE_TILE) == 3);
    let opt = OptimizerConfig {
        momentum: 0.9,
        weight_decay: 1e-3,
        ..Default::default()
    };
    let init: Vec<f32> = (0..p).map(|k| (k as f32 * 0.37).sin()).collect();
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut rows = Rows::new(init.clone(), 3, &opt).with_threads(threads);
            let blocks = [0..p, 1000..p - 5000, 70_000..70_001, 0..p];
            for step in 0..8 {
                let g = gradient(step, p);
                let r = step % 3;
                rows.step_shared(
                    r,
                    &g,
                    0.01,
                    blocks[step % 4].clone(),
                    &opt,
                    &Layout::default(),
                );
                if step % 3 == 2 {
                    rows.average(&[0, 2]);
                }
            }
            let mean = rows.mean_of(0..3);
            let mut split = vec![0.0; p];
            let terms: Vec<&[f32]> = (0..3).map(|r| rows.get(r)).collect();
            mean_into_split(&mut split, &terms, threads);
            let out: Vec<Vec<f32>> = (0..3).map(|r| rows.get(r).to_vec()).collect();
            (out, mean, split)
        })
    };
    let (one, mean_one, split_one) = run(1);
    let (three, mean_three, split_three) = run(3);
    for r in 0..3 {
        same(&three[r], &one[r], &format!("row {r}"));
    }
    same(&mean_three, &mean_one, "mean_of");
    same(&split_three, &split_one, "mean_into_split");
    same(&split_one, &mean_one, "mean_into_split and mean_of");
    // The combinations: two terms and three, weights of one and not, out of place and in.
    let a = gradient(1, p);
    let b = gradient(2, p);
    let c = gradient(3, p);
    for terms in [
        vec![(&a[..], 0.5), (&b[..], 0.5)],
        vec![(&a[..], 1.0), (&b[..], 0.3), (&c[..], 1.0 / 3.0)],
    ] {
        let mut want = vec![0.0; p];
        combine_into(&mut want, &terms);
        let mut want_in = a.to_vec();
        combine_in_place(&mut want_in, 0.7, &terms[1..]);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        pool.install(|| {
            let mut got = vec![0.0; p];
            combine_into_split(&mut got, &terms, 3);
            same(&got, &want, "combine_into_split");
            let mut got_in = a.to_vec();
            combine_in_place_split(&mut got_in, 0.7, &terms[1..], 3);
            same(&got_in, &want_in, "combine_in_place_split");
        });
    }
}

#[test]
fn settling_a_held_row_copies_it_in_the_same_pass_with_the_same_bits() {
    // Queued steps on a row a snapshot holds: the settled row is a new buffer with the
    // values of steps applied one by one (inside the blocks and outside them), the
    // snapshot keeps what was read, and the copy is counted once. On one thread and split.
    let p = 3 * PARALLEL_FLOATS / 2 + 77;
    let opt = OptimizerConfig {
        momentum: 0.9,
        ..Default::default()
    };
    let init: Vec<f32> = (0..p).map(|k| (k as f32 * 0.11).cos()).collect();
    let blocks = [1000..p - 5000, 3000..4000, 2..70_001];
    let mut eager = Rows::new(init.clone(), 1, &opt);
    for (step, block) in blocks.iter().enumerate() {
        let g = gradient(step, p);
        eager.step(
            0,
            &g[block.clone()],
            0.02,
            block.clone(),
            &opt,
            &Layout::default(),
        );
    }
    for threads in [1, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut lazy = Rows::new(init.clone(), 1, &opt).with_threads(threads);
            let snapshot = lazy.share(0);
            for (step, block) in blocks.iter().enumerate() {
                lazy.step_shared(
                    0,
                    &gradient(step, p),
                    0.02,
                    block.clone(),
                    &opt,
                    &Layout::default(),
                );
            }
            lazy.settle(0);
            same(lazy.get(0), eager.get(0), &format!("{threads} threads"));
            same(&snapshot, &init, "the snapshot");
            assert_eq!(lazy.floats_copied(), p as u64);
        });
    }
}

#[test]
fn rows_with_the_same_values_and_a_common_step_share_its_result() {
    // All-reduce's pattern: the same mean gradient queued block by block on every row, each
    // row settled in turn (at its next request). Rows 0-2 hold the same bits in separate
    // buffers; row 3 differs only in the sign of one zero; row 4 elsewhere.
    let p = 3000;
    let opt = OptimizerConfig {
        momentum: 0.9,
        ..Default::default()
    };
    let base: Vec<f32> = (0..p).map(|k| (k as f32 * 0.21).sin()).collect();
    let mut signed = base.clone();
    signed[0] = -0.0;
    let mut unsigned = base.clone();
    unsigned[0] = 0.0;
    let mut other = unsigned.clone();
    other[p - 1] += 1.0;
    let starts = [&unsigned, &unsigned, &unsigned, &signed, &other];
    let mut lazy = Rows::new(unsigned.clone(), 5, &opt);
    let mut eager = Rows::new(unsigned.clone(), 5, &opt);
    for (r, start) in starts.iter().enumerate() {
        lazy.set(r, start.to_vec());
        eager.set(r, start.to_vec());
    }
    for round in 0..3 {
        let g = gradient(round, p);
        for r in 0..5 {
            for block in [0..1000, 1000..p] {
                lazy.step_common(r, &g, 0.05, block.clone(), &opt, &Layout::default());
                eager.step(r, &g[block.clone()], 0.05, block, &opt, &Layout::default());
            }
        }
        for r in 0..5 {
            lazy.settle(r);
            same(
                lazy.get(r),
                eager.get(r),
                &format!("round {round}, row {r}"),
            );
        }
        let ptr = |r: usize| lazy.get(r).as_ptr();
        assert!(
            ptr(1) == ptr(0) && ptr(2) == ptr(0),
            "round {round}: rows 0-2 share"
        );
        assert!(ptr(4) != ptr(0), "round {round}: row 4 does not");
        // Row 3's `-0.0` becomes the others' value at its first step (`-0.0 - d` and
        // `0.0 - d` are the same bits), computed apart from theirs; from the next step on,
        // its inputs are theirs and it shares their result.
        assert_eq!(bits(lazy.get(3)), bits(lazy.get(0)));
        assert_eq!(ptr(3) == ptr(0), round > 0, "round {round}: row 3");
    }
    // A write to one of the sharing rows leaves the others.
    lazy.step(1, &gradient(7, p), 0.05, 0..p, &opt, &Layout::default());
    eager.step(1, &gradient(7, p), 0.05, 0..p, &opt, &Layout::default());
    for r in 0..5 {
        same(
            lazy.get(r),
            eager.get(r),
            &format!("after a write, row {r}"),
        );
    }
}

#[test]
fn every_access_to_a_row_applies_its_queue_first() {
    let p = 8;
    let opt = OptimizerConfig {
        momentum: 0.5,
        ..Default::default()
    };
    let fresh = || {
        let mut rows = Rows::new(vec![1.0; p], 3, &opt);
        rows.step_shared(0, &gradient(1, p), 0.1, 0..p, &opt, &Layout::default());
        rows.step_shared(1, &gradient(2, p), 0.1, 0..p, &opt, &Layout::default());
        rows
    };
    let mut want = {
        let mut rows = Rows::new(vec![1.0; p], 3, &opt);
        rows.step(0, &gradient(1, p), 0.1, 0..p, &opt, &Layout::default());
        rows.step(1, &gradient(2, p), 0.1, 0..p, &opt, &Layout::default());
        rows
    };
    // A snapshot sees the queued steps.
    let mut rows = fresh();
    assert_eq!(bits(&rows.share(0)), bits(want.get(0)));
    // An average, a block copy, an in-place take and a mean read them.
    let mut rows = fresh();
    rows.average(&[0, 1]);
    let mut expect = want.get(0).to_vec();
    for (e, x) in expect.iter_mut().zip(want.get(1)) {
        *e = (*e + x) / 2.0;
    }
    assert_eq!(bits(rows.get(0)), bits(&expect));
    let mut rows = fresh();
    rows.copy_block(2, 1, 0..p);
    assert_eq!(bits(rows.get(2)), bits(want.get(1)));
    let mut rows = fresh();
    let row = rows.take_unique(0).expect("nobody else holds it");
    assert_eq!(bits(&row), bits(want.get(0)));
    let mut rows = fresh();
    assert_eq!(bits(&rows.mean_of(0..3)), bits(&want.mean_of(0..3)));
    // Replacing a row still moves its momentum by the queued step.
    let mut rows = fresh();
    rows.set(0, vec![0.0; p]);
    rows.step(0, &gradient(3, p), 0.1, 0..p, &opt, &Layout::default());
    let mut reference = Rows::new(vec![1.0; p], 1, &opt);
    reference.step(0, &gradient(1, p), 0.1, 0..p, &opt, &Layout::default());
    reference.set(0, vec![0.0; p]);
    reference.step(0, &gradient(3, p), 0.1, 0..p, &opt, &Layout::default());
    assert_eq!(bits(rows.get(0)), bits(reference.get(0)));
    // Swapping optimizer states applies each row's steps with its own state first.
    let mut rows = fresh();
    rows.swap_optimizer_state(0, 1);
    assert_eq!(rows.queued_steps(), 0);
    assert_eq!(bits(rows.get(1)), bits(want.get(1)));
}

#[test]
#[should_panic(expected = "settle it first")]
fn reading_a_row_with_queued_steps_is_refused() {
    let opt = OptimizerConfig::default();
    let mut rows = Rows::new(vec![0.0; 4], 1, &opt);
    rows.step_shared(0, &gradient(0, 4), 0.1, 0..4, &opt, &Layout::default());
    let _ = rows.get(0);
}

#[test]
fn a_queue_is_bounded_and_gives_its_gradients_back_to_the_spares() {
    let opt = OptimizerConfig::default();
    let p = 100;
    let mut rows = Rows::new(vec![0.0; p], 1, &opt);
    for k in 0..MAX_QUEUE - 1 {
        rows.step_shared(0, &gradient(k, p), 0.1, 0..p, &opt, &Layout::default());
    }
    assert_eq!(rows.queued_steps(), MAX_QUEUE - 1);
    // The gradients were handed over (their other holders dropped them): the queue holds the
    // last references, and settling recycles them.
    assert_eq!(rows.spares(), 0);
    rows.step_shared(0, &gradient(0, p), 0.1, 0..p, &opt, &Layout::default());
    assert_eq!(rows.queued_steps(), 0, "a full queue is settled");
    // The last gradient's caller still held it while the queue was settled.
    assert_eq!(rows.spares(), MAX_QUEUE - 1);
    // Large rows queue fewer steps: a row of 2^20 floats or more, none.
    assert_eq!(queue_cap(2410), MAX_QUEUE);
    assert_eq!(queue_cap(101_770), 10);
    assert_eq!(queue_cap(25_000_000), 1);
    // Adam and LARS step at once.
    let adam = OptimizerConfig {
        kind: OptimizerKind::Adam,
        ..Default::default()
    };
    let mut rows = Rows::new(vec![0.0; p], 1, &adam);
    rows.step_shared(0, &gradient(0, p), 0.1, 0..p, &adam, &Layout::default());
    assert_eq!(rows.queued_steps(), 0);
}

#[test]
fn combine_weighs_terms_in_order() {
    let a = [1.0f32, 2.0];
    let b = [10.0f32, 20.0];
    assert_eq!(combine(&[(&a, 1.0), (&b, 0.5)]), vec![6.0, 12.0]);
    assert_eq!(combine(&[(&a, 2.0)]), vec![2.0, 4.0]);
}

/// The fused and tiled loops give the bits of the definition: one pass per term over the
/// whole row (scale the first unless its weight is 1, then add each term, times its weight
/// unless 1), and the mean summed in order then divided. Rows longer than a tile, with a
/// ragged last tile, two terms (the fused loop) and more (the tiled one), weights 1, −1 and
/// others.
#[test]
fn fused_combinations_match_one_pass_per_term_bit_for_bit() {
    fn passes(terms: &[(&[f32], f64)]) -> Vec<f32> {
        let mut out = terms[0].0.to_vec();
        if terms[0].1 != 1.0 {
            for o in &mut out {
                *o *= terms[0].1 as f32;
            }
        }
        for &(t, w) in &terms[1..] {
            for (o, &x) in out.iter_mut().zip(t) {
                *o += if w == 1.0 { x } else { x * w as f32 };
            }
        }
        out
    }
    let p = 2 * COMBINE_TILE + 77;
    let data: Vec<Vec<f32>> = (0..5)
        .map(|t| gradient(t, p).iter().map(|x| x * 3.7 + t as f32).collect())
        .collect();
    let weights = [
        [1.0, 1.0, 1.0, 1.0, 1.0],
        [0.5, 0.3, -1.0, 0.7, 1.0],
        [0.1, 1.0, 0.7, 1.0, -1.0],
        [1.0, 0.37, 1.0, 0.5, 0.2],
    ];
    for w in weights {
        for k in 1..=5 {
            let terms: Vec<(&[f32], f64)> = (0..k).map(|t| (&data[t][..], w[t])).collect();
            let want = passes(&terms);
            same(
                &combine(&terms),
                &want,
                &format!("combine, {k} terms, {w:?}"),
            );
            let mut out = vec![f32::NAN; p];
            combine_into(&mut out, &terms);
            same(&out, &want, &format!("combine_into, {k} terms, {w:?}"));
            let mut out = data[0].clone();
            combine_in_place(&mut out, w[0], &terms[1..]);
            same(&out, &want, &format!("combine_in_place, {k} terms, {w:?}"));
        }
    }
    for k in 1..=5 {
        let terms: Vec<&[f32]> = data[..k].iter().map(|d| &d[..]).collect();
        let mut want = passes(&terms.iter().map(|&t| (t, 1.0)).collect::<Vec<_>>());
        for m in &mut want {
            *m /= k as f32;
        }
        let mut out = vec![f32::NAN; p];
        mean_into(&mut out, &terms);
        same(&out, &want, &format!("mean of {k}"));
    }
}

/// SGD's loop, run in its AVX2 copy where the CPU has it, against the formula written out
/// here and compiled for the baseline target: the same bits for every variant of the rule.
#[test]
fn sgd_steps_match_the_formula_bit_for_bit() {
    let p = 3 * 1024 + 5;
    let (x0, v0, g) = (gradient(1, p), gradient(2, p), gradient(3, p));
    let (mu, wd, lr) = (0.9f32, 0.013f32, 0.07f32);
    for (momentum, decay, nesterov) in [
        (false, false, false),
        (false, true, false),
        (true, false, false),
        (true, true, false),
        (true, false, true),
        (true, true, true),
    ] {
        let rule = Sgd {
            mu,
            wd,
            decay,
            nesterov,
        };
        let (mut x, mut v) = (x0.to_vec(), v0.to_vec());
        sgd_apply(rule, &mut x, momentum.then_some(&mut v[..]), &g, lr);
        let (mut wx, mut wv) = (x0.to_vec(), v0.to_vec());
        for k in 0..p {
            let d = if decay { g[k] + wx[k] * wd } else { g[k] };
            if momentum {
                wv[k] = wv[k] * mu + d;
                let step = if nesterov { d + wv[k] * mu } else { wv[k] };
                wx[k] -= step * lr;
            } else {
                wx[k] -= d * lr;
            }
        }
        let what = format!("momentum {momentum}, decay {decay}, nesterov {nesterov}");
        same(&x, &wx, &format!("parameters, {what}"));
        same(&v, &wv, &format!("momentum, {what}"));
    }
}
