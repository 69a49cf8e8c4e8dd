//! flex and wgpu agree, for every model of the zoo: identical initial parameters (bit for bit),
//! identical minibatches (indices, and features, augmented ones included: both are made on the
//! host from the same streams), and gradients and evaluations within a tolerance (wgpu
//! reductions are not bit-reproducible). Runs on lavapipe where no GPU exists; `tests/run.sh`
//! installs it. Set `DASIM_SKIP_WGPU=1` to skip on a machine with no Vulkan.

use std::path::Path;

use burn::tensor::Device;
use dasim_models::backend::{Backend, BackendChoice, select};
use dasim_models::{
    Activation, DataConfig, LenetConfig, LinearConfig, MlpConfig, ModelConfig, Problem,
    ResnetConfig, SoftmaxConfig,
};
use dasim_sim::store::{OptimizerConfig, ReplicaStore};

fn wgpu() -> Option<Backend> {
    if std::env::var_os("DASIM_SKIP_WGPU").is_some() {
        eprintln!("DASIM_SKIP_WGPU is set: skipping the wgpu comparison");
        return None;
    }
    let wgpu = select(BackendChoice::Wgpu)
        .expect("a wgpu adapter (tests/run.sh installs lavapipe; set DASIM_SKIP_WGPU=1 to skip)");
    eprintln!("wgpu adapter: {}", wgpu.device_name);
    Some(wgpu)
}

/// The quickstart's problem (the default model and data), seed 42.
fn quickstart_problem() -> Problem {
    Problem::load(
        &ModelConfig::default(),
        &DataConfig::default(),
        Path::new("."),
        42,
    )
    .unwrap()
}

/// Builds `model` on `data` on both backends with `workers` workers and compares them.
fn compare(
    wgpu: &Backend,
    name: &str,
    model: ModelConfig,
    data: &str,
    workers: usize,
    batch: usize,
) {
    compare_within(wgpu, name, model, data, workers, batch, 2e-4);
}

/// [`compare`], the gradients within `tol` of the largest coordinate.
fn compare_within(
    wgpu: &Backend,
    name: &str,
    model: ModelConfig,
    data: &str,
    workers: usize,
    batch: usize,
    tol: f32,
) {
    let data: DataConfig = toml::from_str(data).unwrap();
    let pb = Problem::load(&model, &data, Path::new("."), 42).unwrap();
    let opt = OptimizerConfig::default();
    let mut on_flex = pb.store(Device::flex(), workers, batch, opt.clone(), 42);
    let mut on_wgpu = pb.store(wgpu.device.clone(), workers, batch, opt, 42);

    // Same host-side initialization, bit for bit.
    assert_eq!(on_flex.params_host(), on_wgpu.params_host(), "{name}: init");

    // Same minibatches: two rounds of requests, every worker.
    let mut ids = Vec::new();
    for _ in 0..2 {
        for w in 0..workers {
            ids.push((on_flex.request_gradient(w), on_wgpu.request_gradient(w)));
        }
    }
    for k in 0..ids.len() {
        let (fi, ff) = on_flex.pending_batch_host(k);
        let (wi, wf) = on_wgpu.pending_batch_host(k);
        assert_eq!(fi, wi, "{name}: minibatch indices of request {k}");
        assert_eq!(ff, wf, "{name}: minibatch features of request {k}");
    }

    // Gradients within tolerance (one batched pass each), state deltas included.
    for (k, &(a, b)) in ids.iter().enumerate() {
        let ga = on_flex.gradient_host(a);
        let gb = on_wgpu.gradient_host(b);
        let scale = ga.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (i, (x, y)) in ga.iter().zip(&gb).enumerate() {
            assert!(
                (x - y).abs() <= tol * scale + 1e-6,
                "{name}, request {k}, coordinate {i}: {x} vs {y}"
            );
        }
    }
    for &(a, b) in &ids {
        on_flex.apply_gradient(0, a, 0.05);
        on_wgpu.apply_gradient(0, b, 0.05);
    }

    // An evaluation agrees too.
    let ea = on_flex.evaluate();
    let eb = on_wgpu.evaluate();
    assert!(
        (ea.loss - eb.loss).abs() < 1e-3 * (1.0 + ea.loss),
        "{name}: {ea:?} vs {eb:?}"
    );
    if ea.accuracy.is_nan() {
        assert!(eb.accuracy.is_nan());
    } else {
        // One test sample may flip where two logits nearly tie.
        assert!(
            (ea.accuracy - eb.accuracy).abs() < 0.006,
            "{name}: {ea:?} vs {eb:?}"
        );
    }
}

#[test]
fn quickstart_mlp_on_wgpu_matches_flex() {
    let Some(wgpu) = wgpu() else { return };
    let model = ModelConfig::Mlp(MlpConfig {
        hidden: vec![32],
        activation: Activation::Relu,
    });
    compare(&wgpu, "mlp", model, "", 16, 32);
}

#[test]
fn convex_models_on_wgpu_match_flex() {
    let Some(wgpu) = wgpu() else { return };
    compare(
        &wgpu,
        "softmax",
        ModelConfig::Softmax(SoftmaxConfig { l2: 1e-3 }),
        "",
        8,
        32,
    );
    compare(
        &wgpu,
        "linear",
        ModelConfig::Linear(LinearConfig { l2: 0.0 }),
        "dataset = \"linear-regression\"\nsynthetic = { samples = 500, dim = 8 }",
        4,
        16,
    );
}

#[test]
fn conv_models_on_wgpu_match_flex_with_augmentation() {
    let Some(wgpu) = wgpu() else { return };
    let augmented = "augment = { crop_padding = 2, flip = true }";
    compare(
        &wgpu,
        "lenet",
        ModelConfig::Lenet(LenetConfig {}),
        augmented,
        4,
        16,
    );
    compare(
        &wgpu,
        "resnet-8",
        ModelConfig::Resnet(ResnetConfig { depth: 8, width: 4 }),
        augmented,
        3,
        8,
    );
}

#[test]
fn the_transformer_on_wgpu_matches_flex() {
    let Some(wgpu) = wgpu() else { return };
    let model: ModelConfig = toml::from_str(
        "kind = \"transformer\"\nlayers = 2\nd_model = 16\nheads = 2\nd_ff = 32\ncontext = 16",
    )
    .unwrap();
    let text = "dataset = \"text\"\npath = \"data/tinyshakespeare.txt.gz\"\ntest_fraction = 0.003";
    compare_within(&wgpu, "transformer", model, text, 3, 4, 1e-4);
}

/// Threads split a flush into passes on `flex` only: on a GPU every group would pay the kernel
/// launches and the read-back again (an H200 with 16 host threads ran MLP784's all-reduce as 16
/// passes of one replica each, 800 passes for 800 steps).
#[test]
fn threads_split_a_flush_on_flex_only() {
    let Some(wgpu) = wgpu() else { return };
    let pb = quickstart_problem();
    let passes = |device: Device| {
        let mut store = pb
            .store(device, 8, 4, OptimizerConfig::default(), 42)
            .with_threads(4)
            .with_parallel_flush_flops(0.0);
        let ids: Vec<_> = (0..8).map(|w| store.request_gradient(w)).collect();
        for (w, id) in ids.into_iter().enumerate() {
            store.apply_gradient(w, id, 0.1);
        }
        let stats = store.stats();
        assert_eq!(stats.flushes, 1);
        stats.passes
    };
    assert_eq!(passes(Device::flex()), 4, "flex: one pass per thread");
    assert_eq!(
        passes(wgpu.device.clone()),
        1,
        "wgpu: one pass for the flush"
    );
}

/// All-reduce's mean at one point is one model's gradient on the union of the minibatches on
/// both backends, and agrees between them; on a GPU it is one pass whatever the request count
/// (passes there cost launches and a read-back, not arithmetic), on `flex` passes of
/// `fused_chunk` requests.
#[test]
fn a_fused_mean_on_wgpu_matches_flex_in_one_pass() {
    let Some(wgpu) = wgpu() else { return };
    let workers = dasim_models::store::FUSED_CHUNK + 5;
    let pb = quickstart_problem();
    let mean = |device: Device| {
        let mut store = pb.store(device, workers, 8, OptimizerConfig::default(), 42);
        let ids: Vec<_> = (0..workers).map(|w| store.request_gradient(w)).collect();
        let mean = store.mean_gradient(&ids);
        let stats = store.stats();
        assert_eq!(stats.fused_means, 1);
        let loss = store.take_train_loss();
        (store.gradient_host(mean), loss, stats.passes)
    };
    let (on_flex, flex_loss, flex_passes) = mean(Device::flex());
    let (on_wgpu, wgpu_loss, wgpu_passes) = mean(wgpu.device.clone());
    assert_eq!(flex_passes, 2, "flex: passes of {}", workers - 5);
    assert_eq!(wgpu_passes, 1, "wgpu: one pass");
    let scale = on_flex.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(scale > 0.0);
    for (i, (x, y)) in on_flex.iter().zip(&on_wgpu).enumerate() {
        assert!(
            (x - y).abs() <= 2e-4 * scale + 1e-6,
            "coordinate {i}: flex {x}, wgpu {y}"
        );
    }
    assert!(
        (flex_loss - wgpu_loss).abs() <= 1e-4 * flex_loss.abs(),
        "train loss: flex {flex_loss}, wgpu {wgpu_loss}"
    );
}
