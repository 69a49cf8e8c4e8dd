//! The batched stacked gradient is the gradient, for every model of the zoo, through the store:
//! against replica-by-replica passes (distinct parameters per replica) and, on the small models,
//! finite differences of the store's own loss. On the CPU backend.

use std::path::Path;

use burn::tensor::Device;
use dasim_models::NeuralNet;
use dasim_models::lenet::LeNet;
use dasim_models::resnet::ResNet;
use dasim_models::store::{FUSED_CHUNK, fused_chunk};
use dasim_models::{
    Activation, BurnStore, DataConfig, ImageShape, LenetConfig, LinearConfig, Mlp, MlpConfig,
    Model, ModelConfig, Problem, SoftmaxConfig, Split, data,
};
use dasim_sim::store::{OptimizerConfig, ReplicaStore};

fn digits() -> Split {
    data::load(&DataConfig::default(), Path::new("."), 11).unwrap()
}

const DIGIT: ImageShape = ImageShape {
    channels: 1,
    height: 8,
    width: 8,
};

fn store_for(model: Model, split: &Split, workers: usize, batch: usize) -> BurnStore {
    let shards = data::partition_iid(split.train.len(), workers, 11);
    BurnStore::new(
        Device::flex(),
        model,
        split,
        shards,
        batch,
        OptimizerConfig::default(),
        11,
    )
}

fn problem_store(model: ModelConfig, data: &DataConfig, workers: usize, batch: usize) -> BurnStore {
    let pb = Problem::load(&model, data, Path::new("."), 11).unwrap();
    pb.store(
        Device::flex(),
        workers,
        batch,
        OptimizerConfig::default(),
        11,
    )
}

fn regression() -> DataConfig {
    toml::from_str("dataset = \"linear-regression\"\nsynthetic = { samples = 400, dim = 12 }")
        .unwrap()
}

/// `r` distinct rows: the store's initial row, each coordinate moved by a deterministic
/// replica-dependent amount of up to ±`spread` (relative) — so every replica differs, and the
/// batch-norm running variances stay positive.
fn distinct_rows(store: &BurnStore, r: usize, spread: f32) -> Vec<Vec<f32>> {
    let p = store.num_params();
    let init = store.params_host()[..p].to_vec();
    (0..r)
        .map(|k| {
            init.iter()
                .enumerate()
                .map(|(i, &v)| {
                    let t = (((i * 7 + k * 13) % 17) as f32 - 8.0) / 8.0;
                    v * (1.0 + spread * t) + 0.01 * spread * t
                })
                .collect()
        })
        .collect()
}

/// Gives every worker's row distinct values ([`distinct_rows`]).
fn make_distinct(store: &mut BurnStore) {
    let rows = distinct_rows(store, store.workers(), 0.2);
    for (w, row) in rows.iter().enumerate() {
        store.set_params_host(w, row);
    }
}

/// `r` minibatches of `b` training indices, overlapping across replicas.
fn batches(r: usize, b: usize, len: usize) -> Vec<Vec<usize>> {
    (0..r)
        .map(|k| (0..b).map(|i| (k * 31 + i * 3) % len).collect())
        .collect()
}

/// Gradients (state deltas included) and losses of `r` rows in one pass equal those of each
/// row alone.
fn check_batched(store: &BurnStore, r: usize, b: usize, len: usize, what: &str) {
    let rows = distinct_rows(store, r, 0.2);
    let batches = batches(r, b, len);
    let (together, losses) = store.gradients_host(&rows, &batches);
    let scale = together.iter().flatten().fold(0f32, |m, v| m.max(v.abs()));
    assert!(scale > 0.0, "{what}: a zero gradient");
    for k in 0..r {
        let (alone, loss) = store.gradients_host(&rows[k..=k], &batches[k..=k]);
        assert!(
            (losses[k] - loss[0]).abs() < 1e-5 * (1.0 + loss[0].abs()),
            "{what}, replica {k}: loss {} vs {}",
            losses[k],
            loss[0]
        );
        for (i, (a, b)) in together[k].iter().zip(&alone[0]).enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 * scale + 1e-6,
                "{what}, replica {k}, coordinate {i}: {a} batched vs {b} alone"
            );
        }
    }
    // Distinct rows give distinct gradients: the rows of the pass do not share parameters.
    assert_ne!(together[0], together[1], "{what}");
}

/// Central differences of the store's loss against its gradient, at `count` coordinates spread
/// over the row.
fn check_finite_differences(store: &BurnStore, b: usize, len: usize, eps: f32, what: &str) {
    let p = store.num_params();
    let x = distinct_rows(store, 1, 0.2);
    let batch = batches(1, b, len);
    let (g, _) = store.gradients_host(&x, &batch);
    let step = (p / 25).max(1);
    let mut checked = 0;
    for i in (0..p).step_by(step) {
        let mut plus = x.clone();
        let mut minus = x.clone();
        plus[0][i] += eps;
        minus[0][i] -= eps;
        let fd = (store.losses_host(&plus, &batch)[0] - store.losses_host(&minus, &batch)[0])
            / (2.0 * eps);
        assert!(
            (fd - g[0][i]).abs() < 2e-3 + 2e-2 * g[0][i].abs(),
            "{what}, parameter {i}: finite difference {fd}, gradient {}",
            g[0][i]
        );
        checked += 1;
    }
    assert!(checked >= p.min(20), "{what}: {checked} coordinates");
}

#[test]
fn mlp_batched_gradient_is_the_gradient() {
    let model = ModelConfig::Mlp(MlpConfig {
        hidden: vec![16, 8],
        activation: Activation::Tanh,
    });
    let store = problem_store(model, &DataConfig::default(), 4, 8);
    let len = store.train_size();
    check_batched(&store, 5, 8, len, "mlp");
    check_finite_differences(&store, 8, len, 1e-2, "mlp");
}

#[test]
fn softmax_batched_gradient_is_the_gradient_with_its_l2_term() {
    let store = problem_store(
        ModelConfig::Softmax(SoftmaxConfig { l2: 0.05 }),
        &DataConfig::default(),
        4,
        8,
    );
    let len = store.train_size();
    check_batched(&store, 5, 8, len, "softmax");
    check_finite_differences(&store, 8, len, 1e-2, "softmax");
    // The L2 term is in the gradient: against the same model without it, the gradients differ
    // by exactly l2·θ.
    let other = problem_store(
        ModelConfig::Softmax(SoftmaxConfig { l2: 0.0 }),
        &DataConfig::default(),
        4,
        8,
    );
    let rows = distinct_rows(&store, 1, 0.2);
    let b = batches(1, 8, len);
    let (g, _) = store.gradients_host(&rows, &b);
    let (g0, _) = other.gradients_host(&rows, &b);
    for ((a, z), th) in g[0].iter().zip(&g0[0]).zip(&rows[0]) {
        assert!((a - z - 0.05 * th).abs() < 1e-5, "{a} − {z} ≠ 0.05·{th}");
    }
}

#[test]
fn linear_batched_gradient_is_the_gradient() {
    let store = problem_store(
        ModelConfig::Linear(LinearConfig { l2: 0.01 }),
        &regression(),
        4,
        8,
    );
    let len = store.train_size();
    check_batched(&store, 5, 8, len, "linear");
    check_finite_differences(&store, 8, len, 1e-2, "linear");
    // The squared-error gradient by hand for one sample: ∂/∂w = (ŷ − y)·x + l2·w.
    let pb = Problem::load(
        &ModelConfig::Linear(LinearConfig { l2: 0.01 }),
        &regression(),
        Path::new("."),
        11,
    )
    .unwrap();
    let train = &pb.split.train;
    let rows = distinct_rows(&store, 1, 0.5);
    let (g, loss) = store.gradients_host(&rows, &[vec![3]]);
    let x = train.sample(3);
    let th = &rows[0];
    let y_hat: f32 = x.iter().zip(th).map(|(a, b)| a * b).sum::<f32>() + th[12];
    let r = y_hat - train.values[3];
    let penalty: f32 = th.iter().map(|v| v * v).sum::<f32>() * 0.005;
    assert!((loss[0] - (0.5 * r * r + penalty)).abs() < 1e-4);
    for j in 0..12 {
        assert!((g[0][j] - (r * x[j] + 0.01 * th[j])).abs() < 1e-4);
    }
    assert!((g[0][12] - (r + 0.01 * th[12])).abs() < 1e-4);
}

#[test]
fn lenet_batched_gradient_is_the_gradient() {
    let split = digits();
    let len = split.train.len();
    let relu = store_for(Model::net(LeNet::new(DIGIT, 10)), &split, 3, 6);
    check_batched(&relu, 4, 6, len, "lenet");
    // Finite differences on the smooth variant (tanh); max-pooling is piecewise linear.
    let tanh = LeNet::new(DIGIT, 10).with_activation(Activation::Tanh);
    let store = store_for(Model::net(tanh), &split, 3, 6);
    check_finite_differences(&store, 6, len, 1e-2, "lenet");
}

#[test]
fn resnet_batched_gradient_is_the_gradient_and_carries_state_deltas() {
    let split = digits();
    let len = split.train.len();
    let net = ResNet::new(DIGIT, 10, 8, 4);
    let s = net.state_len();
    assert!(s > 0);
    let store = store_for(Model::net(net), &split, 3, 6);
    check_batched(&store, 4, 6, len, "resnet-8");
    // On the state suffix the "gradient" is the running-statistics delta: not zero.
    let p = store.num_params();
    let rows = distinct_rows(&store, 2, 0.2);
    let (g, _) = store.gradients_host(&rows, &batches(2, 6, len));
    assert!(g[0][p - s..].iter().any(|v| v.abs() > 1e-4));
}

#[test]
fn requests_are_evaluated_lazily_in_one_batch() {
    let mut store = problem_store(ModelConfig::default(), &DataConfig::default(), 4, 8);
    let ids: Vec<_> = (0..4).map(|w| store.request_gradient(w)).collect();
    assert_eq!(store.stats().flushes, 0);
    store.apply_gradient(0, ids[0], 0.1);
    assert_eq!(store.stats().flushes, 1);
    for &id in &ids[1..] {
        store.apply_gradient(1, id, 0.1);
    }
    assert_eq!(
        store.stats().flushes,
        1,
        "one pass served all four requests"
    );
}

#[test]
fn averaging_and_updates_are_row_operations() {
    let mut store = problem_store(ModelConfig::default(), &DataConfig::default(), 3, 8);
    let p = store.num_params();
    let g = store.request_gradient(0);
    store.apply_gradient(0, g, 0.5);
    let before = store.params_host();
    assert_ne!(&before[..p], &before[p..2 * p], "worker 0 moved");
    assert_eq!(
        &before[p..2 * p],
        &before[2 * p..],
        "workers 1 and 2 did not"
    );
    store.average(&[0, 1]);
    let after = store.params_host();
    assert_eq!(&after[..p], &after[p..2 * p]);
    for k in 0..p {
        let sum_before = before[k] + before[p + k];
        let sum_after = after[k] + after[p + k];
        assert!((sum_before - sum_after).abs() < 1e-6);
    }
}

/// A mean of gradients still in their flush's read-back blocks (all-reduce's case) is read from
/// the blocks, without a copy of each; it has the same bits as the mean of the gradients' own
/// copies, whether they came from one group, several groups of a flush, or several flushes.
#[test]
fn a_mean_read_from_the_blocks_has_the_bits_of_the_mean_of_copies() {
    let workers = 4;
    let mean_of = |max_batch: Option<usize>, copy_first: bool, two_flushes: bool| {
        let mut store = problem_store(ModelConfig::default(), &DataConfig::default(), workers, 8)
            .with_max_batch(max_batch);
        // Distinct rows: at equal ones the mean is one pass (the fused mean, tested below).
        make_distinct(&mut store);
        let mut ids: Vec<_> = (0..workers / 2)
            .map(|w| store.request_gradient(w))
            .collect();
        if two_flushes {
            // The first two are evaluated and copied out before the others are requested.
            store.gradient_host(ids[0]);
        }
        ids.extend((workers / 2..workers).map(|w| store.request_gradient(w)));
        if copy_first {
            store.gradient_host(ids[workers - 1]);
        }
        let mean = store.mean_gradient(&ids);
        store.gradient_host(mean)
    };
    let from_blocks = mean_of(None, false, false);
    let bits = |g: &[f32]| g.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert!(from_blocks.iter().any(|&x| x != 0.0));
    for (max_batch, copy_first, two_flushes, what) in [
        (Some(1), false, false, "one group per request"),
        (None, true, false, "copied out first"),
        (None, false, true, "two flushes"),
        (
            Some(3),
            true,
            true,
            "uneven groups, two flushes, copied out",
        ),
    ] {
        assert_eq!(
            bits(&mean_of(max_batch, copy_first, two_flushes)),
            bits(&from_blocks),
            "{what}"
        );
    }
}

/// A gradient left in its flush's read-back blocks by a mean of the others (a crashed worker's
/// in all-reduce) keeps the whole group's blocks alive only until the next flush, which gives
/// it a buffer of its own, even when that flush's gradients all go to a mean too.
#[test]
fn a_gradient_no_mean_used_is_copied_out_at_the_next_flush() {
    let workers = 8;
    let mut store = problem_store(ModelConfig::default(), &DataConfig::default(), workers, 8);
    make_distinct(&mut store);
    let p = store.num_params();
    let rows = store.floats_held();
    let ids: Vec<_> = (0..workers).map(|w| store.request_gradient(w)).collect();
    let mean = store.mean_gradient(&ids[1..]);
    // Rows, the mean, and the eight gradients' blocks, held by the one left.
    assert_eq!(store.floats_held(), rows + p + workers * p);
    store.release_gradient(mean);
    // The next round, without worker 0.
    let next: Vec<_> = (1..workers).map(|w| store.request_gradient(w)).collect();
    let mean = store.mean_gradient(&next);
    // Rows, the mean, and the gradient left, in a buffer of its own.
    assert_eq!(store.floats_held(), rows + 2 * p);
    store.release_gradient(mean);
    store.release_gradient(ids[0]);
    assert_eq!(store.floats_held(), rows);
}

/// A worker applying its own gradient reads it in the flush's read-back blocks; its steps,
/// whole or on blocks that cut across the model's parameter blocks (LPP-SGD's partial steps),
/// with momentum and weight decay, have the bits of the same steps from a copy of the gradient.
#[test]
fn a_step_read_from_the_blocks_has_the_bits_of_a_step_from_a_copy() {
    let workers = 3;
    let optimizer: OptimizerConfig =
        toml::from_str("lr = 0.1\nmomentum = 0.9\nweight_decay = 0.01").unwrap();
    let rows_after = |copy_first: bool| {
        let pb = Problem::load(
            &ModelConfig::default(),
            &DataConfig::default(),
            Path::new("."),
            11,
        )
        .unwrap();
        let mut store = pb.store(Device::flex(), workers, 8, optimizer.clone(), 11);
        let p = store.num_params();
        // Whole, then in pieces that start and end inside the model's blocks.
        let cuts: [&[(usize, usize)]; 3] = [
            &[(0, p)],
            &[(0, 1000), (1000, 2090), (2090, p)],
            &[(2050, 2405), (0, 2050), (2405, p)],
        ];
        for cut in cuts {
            let ids: Vec<_> = (0..workers).map(|w| store.request_gradient(w)).collect();
            if copy_first {
                store.gradient_host(ids[2]);
            }
            for (w, &id) in ids.iter().enumerate() {
                for &(a, b) in cut {
                    store.apply_gradient_block(w, id, 0.1, a..b);
                }
                store.release_gradient(id);
            }
        }
        store.params_host()
    };
    let bits = |g: &[f32]| g.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&rows_after(false)), bits(&rows_after(true)));
}

/// The mean of gradients read at rows of the same bits (all-reduce's, at every step) is one
/// model's gradient on the union of their minibatches, taken in passes of `fused_chunk`
/// requests: the mean of the replicas' own gradients within rounding, the requests' own
/// losses, the same bits for any threads and batch limit, and nothing held after it but the
/// mean. Rows that differ, or a model whose means are not fused, take the replicas' mean.
#[test]
fn a_mean_at_equal_rows_is_one_pass_over_the_union_of_the_minibatches() {
    let mlp = ModelConfig::Mlp(MlpConfig {
        hidden: vec![24],
        activation: Activation::Relu,
    });
    // The softmax model's L2 term, `½·l2·‖θ‖²` in every request's loss.
    for model in [mlp, ModelConfig::Softmax(SoftmaxConfig { l2: 0.05 })] {
        check_fused_mean(model);
    }

    // LeNet's means are not fused (its tall pass is the slower).
    let mut store = problem_store(
        ModelConfig::Lenet(LenetConfig {}),
        &DataConfig::default(),
        2,
        4,
    );
    let ids: Vec<_> = (0..2).map(|w| store.request_gradient(w)).collect();
    store.mean_gradient(&ids);
    assert_eq!(store.stats().fused_means, 0);

    // The pass size depends on the model and the minibatch only: 16 requests for these small
    // models, 8 for MLP784 at batch 32 (a pass of 16 would be 312 MFLOP), so that a 16-worker
    // mean of a real model is two passes side by side.
    let mlp784 = Model::net(Mlp::new(&[784, 128, 10], Activation::Relu));
    assert_eq!(fused_chunk(&mlp784, 32), FUSED_CHUNK / 2);
    assert_eq!(fused_chunk(&mlp784, 8), FUSED_CHUNK);
}

fn check_fused_mean(model: ModelConfig) {
    // More requests than one pass holds, the last pass short.
    let workers = FUSED_CHUNK + 5;
    let fused = |threads: usize, max_batch: Option<usize>| {
        let mut store = problem_store(model.clone(), &DataConfig::default(), workers, 8)
            .with_threads(threads)
            .with_parallel_flush_flops(0.0)
            .with_max_batch(max_batch);
        let rows = store.floats_held();
        let ids: Vec<_> = (0..workers).map(|w| store.request_gradient(w)).collect();
        let batches: Vec<Vec<usize>> = (0..workers)
            .map(|k| store.pending_batch_host(k).0)
            .collect();
        let mean = store.mean_gradient(&ids);
        let stats = store.stats();
        assert_eq!(stats.fused_means, 1, "one fused mean");
        assert_eq!(fused_chunk(store.model(), 8), FUSED_CHUNK, "a small model");
        assert_eq!(
            stats.passes, 2,
            "{workers} requests in passes of {FUSED_CHUNK}"
        );
        // The rows, shared by the snapshots, and the mean: no replica's gradient was kept.
        assert_eq!(store.floats_held(), rows + store.num_params());
        let loss = store.take_train_loss();
        (store.gradient_host(mean), loss, batches, store)
    };
    let (mean, loss, batches, store) = fused(1, None);

    // Against each replica's own gradient and loss, at the same row and minibatch.
    let p = store.num_params();
    let row = store.params_host()[..p].to_vec();
    let (grads, losses) = store.gradients_host(&vec![row; workers], &batches);
    let want: Vec<f64> = (0..p)
        .map(|i| grads.iter().map(|g| f64::from(g[i])).sum::<f64>() / workers as f64)
        .collect();
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
    assert!(scale > 0.0);
    for (i, (have, want)) in mean.iter().zip(&want).enumerate() {
        assert!(
            (f64::from(*have) - want).abs() <= 1e-5 * scale,
            "{model:?}, coordinate {i}: fused {have}, mean of the replicas' gradients {want}"
        );
    }
    let want_loss = losses.iter().map(|&l| f64::from(l)).sum::<f64>() / workers as f64;
    assert!(
        (loss - want_loss).abs() <= 1e-6 * want_loss.abs(),
        "train loss {loss} against {want_loss}"
    );

    // The same bits however the store executes.
    for (threads, max_batch) in [(2, None), (2, Some(1)), (1, Some(3))] {
        let (other, other_loss, _, _) = fused(threads, max_batch);
        let differs = other
            .iter()
            .zip(&mean)
            .position(|(a, b)| a.to_bits() != b.to_bits());
        assert_eq!(
            differs, None,
            "{model:?}: the first coordinate that differs with threads {threads}, max_batch \
             {max_batch:?}"
        );
        assert_eq!(other_loss.to_bits(), loss.to_bits());
    }

    // Rows that differ: the replicas' mean, exactly as before.
    let mut store = problem_store(model.clone(), &DataConfig::default(), workers, 8);
    make_distinct(&mut store);
    let ids: Vec<_> = (0..workers).map(|w| store.request_gradient(w)).collect();
    let mean = store.mean_gradient(&ids);
    assert_eq!(store.stats().fused_means, 0);
    assert!(store.gradient_host(mean).iter().any(|&x| x != 0.0));
}
