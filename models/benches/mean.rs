//! All-reduce's mean of sixteen gradients through the burn store, on the MLP 784-128-10 of
//! `scenarios/perf/mlp784.toml` (a 784-dimensional Gaussian mixture, batch 32, 16 workers): each
//! iteration requests every worker's gradient and takes their mean, as one all-reduce step does.
//!
//! - `equal_rows`: the replicas hold the same bits, as all-reduce's always do, so the store takes
//!   the mean as one model's gradient on the union of the sixteen minibatches (one pass of 512
//!   samples; `BurnStore::fused_mean`).
//! - `distinct_rows`: every replica differs a little, so the store computes sixteen gradients in
//!   one batched pass and averages them: the cost of the same mean before the fused path.
//!
//! `cargo bench --workspace --bench mean` (on `flex`, over the pool's threads). The counter is
//! worker steps (gradients averaged) per second.

use std::path::Path;

use burn::tensor::Device;
use dasim_models::{Activation, DataConfig, MlpConfig, ModelConfig, Problem};
use dasim_sim::store::{OptimizerConfig, ReplicaStore};
use divan::Bencher;
use divan::counter::ItemsCount;

const WORKERS: usize = 16;

fn main() {
    divan::main();
}

fn store(distinct: bool) -> dasim_models::BurnStore {
    let model = ModelConfig::Mlp(MlpConfig {
        hidden: vec![128],
        activation: Activation::Relu,
    });
    let data: DataConfig = toml::from_str(
        "dataset = \"gaussian-mixture\"\nbatch_size = 32\n\
         synthetic = { samples = 12000, dim = 784, classes = 10 }",
    )
    .expect("a data table");
    let pb = Problem::load(&model, &data, Path::new("."), 1).expect("the synthetic data");
    let threads = rayon::current_num_threads();
    let mut store = pb
        .store(Device::flex(), WORKERS, 32, OptimizerConfig::default(), 1)
        .with_threads(threads);
    if distinct {
        let p = store.num_params();
        let row = store.params_host()[..p].to_vec();
        for w in 0..WORKERS {
            let moved: Vec<f32> = row
                .iter()
                .enumerate()
                .map(|(i, &v)| v * (1.0 + 1e-3 * ((i + w) % 7) as f32))
                .collect();
            store.set_params_host(w, &moved);
        }
    }
    store
}

fn mean_of_all(bencher: Bencher, distinct: bool) {
    let mut store = store(distinct);
    bencher.counter(ItemsCount::new(WORKERS)).bench_local(|| {
        // On a thread of the pool, as `dasim run` runs its simulation: burn's kernels and
        // the store's passes share the pool with it instead of waking it from outside.
        rayon::scope(|_| {
            let ids: Vec<_> = (0..WORKERS).map(|w| store.request_gradient(w)).collect();
            let mean = store.mean_gradient(&ids);
            store.release_gradient(mean);
        })
    });
    assert_eq!(
        store.stats().fused_means > 0,
        !distinct,
        "the mean took the path the bench names"
    );
}

#[divan::bench(sample_count = 20, sample_size = 4)]
fn equal_rows(bencher: Bencher) {
    mean_of_all(bencher, false);
}

#[divan::bench(sample_count = 20, sample_size = 4)]
fn distinct_rows(bencher: Bencher) {
    mean_of_all(bencher, true);
}
