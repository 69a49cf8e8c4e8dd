//! What batching replicas buys: the wall time of one batched gradient (forward and backward on
//! the autodiff device, summed cross-entropy, batch 32 per replica, gradient read back) over `R`
//! stacked replicas, for the MLP (digits-sized 64-32-10, the 784-128-10 of
//! `scenarios/perf/mlp784.toml` and MNIST-sized 784-256-256-10),
//! LeNet-5 (28×28×1) and ResNet-20 (32×32×3). LeNet and ResNet are timed twice: with the
//! gradient of the stacked rows `[R, P]` (`forward`), and with one autodiff leaf per parameter
//! block (`forward_blocks`, "(blocks)"), which avoids the `[R, P]` buffer that the backward pass
//! of every slice of the rows writes. After divan's report, a table gives the median time per
//! pass, the per-replica cost (time / R) and that cost relative to `R = 1`.
//!
//! Replica counts: 1, 16, 64, 256 on the CPU, except ResNet-20, which stops at 16 (1, 4, 16): at
//! 256 replicas one pass would take minutes on two cores. On a GPU the MLPs and LeNet run 1, 16,
//! 64, 256 and 1,024 replicas, ResNet-20 up to 256 (at 1,024 its activations alone would take
//! tens of GB). Each case runs one untimed warm-up
//! pass (wgpu compiles its kernels there), then 3 timed passes.
//!
//! `cargo bench -p dasim-models --bench batching` runs on `flex` (CPU);
//! `DASIM_BENCH_BACKEND=wgpu` runs on the first wgpu adapter (a GPU where there is one);
//! `DASIM_BENCH_REPLICAS=1,16,64` sets the replica counts of every model.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use burn::tensor::{Device, Int, Tensor, TensorData, activation};
use dasim_models::NeuralNet;
use dasim_models::backend::{BackendChoice, select};
use dasim_models::{Activation, ImageShape, LeNet, Mlp, ResNet};
use dasim_sim::clock::rng::{StreamKind, stream};
use divan::Bencher;
use divan::counter::ItemsCount;
use rand::Rng;

/// Samples per replica per pass.
const BATCH: usize = 32;
/// Timed passes per case.
const SAMPLES: u32 = 3;

fn main() {
    let (name, _) = backend();
    eprintln!("backend: {name}; batch {BATCH} per replica");
    divan::main();
    print_table();
}

fn backend() -> &'static (String, Device) {
    static BACKEND: OnceLock<(String, Device)> = OnceLock::new();
    BACKEND.get_or_init(|| match std::env::var("DASIM_BENCH_BACKEND").as_deref() {
        Ok("wgpu") => {
            let b = select(BackendChoice::Wgpu).expect("a wgpu adapter");
            (b.to_string(), b.device)
        }
        Ok("flex") | Err(_) => ("flex (CPU)".into(), Device::flex()),
        Ok(other) => panic!("DASIM_BENCH_BACKEND={other}: expected flex or wgpu"),
    })
}

fn on_gpu() -> bool {
    std::env::var("DASIM_BENCH_BACKEND").as_deref() == Ok("wgpu")
}

fn replicas() -> Vec<usize> {
    if let Some(list) = replica_list() {
        list
    } else if on_gpu() {
        vec![1, 16, 64, 256, 1024]
    } else {
        vec![1, 16, 64, 256]
    }
}

fn resnet_replicas() -> Vec<usize> {
    if let Some(list) = replica_list() {
        list
    } else if on_gpu() {
        vec![1, 16, 64, 256]
    } else {
        vec![1, 4, 16]
    }
}

/// `DASIM_BENCH_REPLICAS=1,16,64`: the replica counts of every model, instead of the defaults.
fn replica_list() -> Option<Vec<usize>> {
    let list = std::env::var("DASIM_BENCH_REPLICAS").ok()?;
    let parse = |v: &str| {
        v.trim()
            .parse()
            .expect("DASIM_BENCH_REPLICAS: comma-separated counts")
    };
    Some(list.split(',').map(parse).collect())
}

/// Seconds per pass, by (model, R).
type Timings = Mutex<BTreeMap<(&'static str, usize), Vec<f64>>>;

fn timings() -> &'static Timings {
    static T: OnceLock<Timings> = OnceLock::new();
    T.get_or_init(Default::default)
}

/// How a pass takes the gradient.
enum Leaves<'a> {
    /// Of the stacked rows `[R, P]`, through the model's `forward`.
    Rows(&'a (dyn Fn(Tensor<2>, Tensor<3>) -> Tensor<3> + Sync)),
    /// Of one leaf per parameter block, through the model's `forward_blocks`; the block
    /// gradients are concatenated into `[R, P]`.
    Blocks(
        Vec<Range<usize>>,
        &'a (dyn Fn(Vec<Tensor<2>>, Tensor<3>) -> Tensor<3> + Sync),
    ),
}

/// Times one batched gradient of `r` replicas of a model with the initial row `row`, inputs of
/// `dim` features and `classes` classes.
#[allow(clippy::too_many_arguments)]
fn bench_gradient(
    bencher: Bencher,
    name: &'static str,
    r: usize,
    row: Vec<f32>,
    dim: usize,
    classes: usize,
    leaves: Leaves,
) {
    let device = &backend().1;
    let p = row.len();
    let mut rng = stream(1, StreamKind::Data, 0);
    let x: Vec<f32> = (0..r * BATCH * dim)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let y: Vec<i64> = (0..r * BATCH)
        .map(|_| rng.random_range(0..classes as i64))
        .collect();
    let params: Tensor<2> =
        Tensor::from_data(TensorData::new(row, [1, p]), device).repeat_dim(0, r);
    let x: Tensor<3> = Tensor::from_data(TensorData::new(x, [r, BATCH, dim]), device);
    let y: Tensor<3, Int> = Tensor::from_data(TensorData::new(y, [r, BATCH, 1]), device);
    let loss = |logits: Tensor<3>| {
        activation::log_softmax(logits, 2)
            .gather(2, y.clone().autodiff())
            .neg()
            .sum()
    };
    let pass = || {
        let started = Instant::now();
        let g = match &leaves {
            Leaves::Rows(forward) => {
                let params = params.clone().autodiff().require_grad();
                let grads = loss(forward(params.clone(), x.clone().autodiff())).backward();
                params.grad(&grads).expect("a gradient")
            }
            Leaves::Blocks(ranges, forward) => {
                let blocks: Vec<Tensor<2>> = ranges
                    .iter()
                    .map(|b| {
                        params
                            .clone()
                            .slice_dim(1, b.clone())
                            .autodiff()
                            .require_grad()
                    })
                    .collect();
                let grads = loss(forward(blocks.clone(), x.clone().autodiff())).backward();
                let g = blocks
                    .iter()
                    .map(|b| {
                        b.grad(&grads)
                            .unwrap_or_else(|| Tensor::zeros(b.dims(), device))
                    })
                    .collect();
                Tensor::cat(g, 1)
            }
        };
        // Reading a value back waits for the device.
        let s = g.sum().into_scalar::<f32>();
        (s, started.elapsed().as_secs_f64())
    };
    pass();
    bencher.counter(ItemsCount::new(r)).bench(|| {
        let (s, secs) = pass();
        timings()
            .lock()
            .unwrap()
            .entry((name, r))
            .or_default()
            .push(secs);
        s
    });
}

fn init(f: impl FnOnce(&mut dasim_sim::clock::rng::Stream) -> Vec<f32>) -> Vec<f32> {
    f(&mut stream(1, StreamKind::Init, 0))
}

#[divan::bench(args = replicas(), sample_count = SAMPLES, sample_size = 1)]
fn mlp_64_32_10(bencher: Bencher, r: usize) {
    let mlp = Mlp::new(&[64, 32, 10], Activation::Relu);
    let row = init(|s| mlp.init(s));
    let forward = |p, x| mlp.forward(p, x);
    bench_gradient(
        bencher,
        "mlp 64-32-10",
        r,
        row,
        64,
        10,
        Leaves::Rows(&forward),
    );
}

#[divan::bench(args = replicas(), sample_count = SAMPLES, sample_size = 1)]
fn mlp_784_128_10(bencher: Bencher, r: usize) {
    let mlp = Mlp::new(&[784, 128, 10], Activation::Relu);
    let row = init(|s| mlp.init(s));
    let forward = |p, x| mlp.forward(p, x);
    let name = "mlp 784-128-10";
    bench_gradient(bencher, name, r, row, 784, 10, Leaves::Rows(&forward));
}

#[divan::bench(args = replicas(), sample_count = SAMPLES, sample_size = 1)]
fn mlp_784_256_256_10(bencher: Bencher, r: usize) {
    let mlp = Mlp::new(&[784, 256, 256, 10], Activation::Relu);
    let row = init(|s| mlp.init(s));
    let forward = |p, x| mlp.forward(p, x);
    let name = "mlp 784-256-256-10";
    bench_gradient(bencher, name, r, row, 784, 10, Leaves::Rows(&forward));
}

fn lenet() -> LeNet {
    let shape = ImageShape {
        channels: 1,
        height: 28,
        width: 28,
    };
    LeNet::new(shape, 10)
}

#[divan::bench(args = replicas(), sample_count = SAMPLES, sample_size = 1)]
fn lenet5_28x28(bencher: Bencher, r: usize) {
    let net = lenet();
    let row = init(|s| net.init(s));
    let forward = |p, x| net.forward(p, x, true).0;
    let name = "lenet-5 28x28x1";
    bench_gradient(bencher, name, r, row, 784, 10, Leaves::Rows(&forward));
}

#[divan::bench(args = replicas(), sample_count = SAMPLES, sample_size = 1)]
fn lenet5_28x28_blocks(bencher: Bencher, r: usize) {
    let net = lenet();
    let row = init(|s| net.init(s));
    let forward = |b, x| net.forward_blocks(b, x, true).0;
    let leaves = Leaves::Blocks(net.blocks(), &forward);
    bench_gradient(bencher, "lenet-5 (blocks)", r, row, 784, 10, leaves);
}

fn resnet20() -> ResNet {
    let shape = ImageShape {
        channels: 3,
        height: 32,
        width: 32,
    };
    ResNet::new(shape, 10, 20, 16)
}

#[divan::bench(args = resnet_replicas(), sample_count = SAMPLES, sample_size = 1)]
fn resnet20_32x32(bencher: Bencher, r: usize) {
    let net = resnet20();
    let row = init(|s| net.init(s));
    let forward = |p, x| net.forward(p, x, true).0;
    let name = "resnet-20 32x32x3";
    bench_gradient(bencher, name, r, row, 3072, 10, Leaves::Rows(&forward));
}

#[divan::bench(args = resnet_replicas(), sample_count = SAMPLES, sample_size = 1)]
fn resnet20_32x32_blocks(bencher: Bencher, r: usize) {
    let net = resnet20();
    let row = init(|s| net.init(s));
    let forward = |b, x| net.forward_blocks(b, x, true).0;
    let leaves = Leaves::Blocks(net.blocks(), &forward);
    bench_gradient(bencher, "resnet-20 (blocks)", r, row, 3072, 10, leaves);
}

fn print_table() {
    let t = timings().lock().unwrap();
    if t.is_empty() {
        return;
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!();
    println!(
        "{:<20} {:>5} {:>12} {:>14} {:>10}",
        "model", "R", "pass (ms)", "per replica", "vs R = 1"
    );
    let mut base = None;
    let mut last = "";
    for (&(name, r), secs) in t.iter() {
        let per = median(secs) / r as f64;
        if name != last {
            base = (r == 1).then_some(per);
            last = name;
        }
        let ratio = base.map_or("-".to_string(), |b| format!("{:.3}", per / b));
        println!(
            "{:<20} {:>5} {:>12.2} {:>11.3} ms {:>10}",
            name,
            r,
            median(secs) * 1e3,
            per * 1e3,
            ratio
        );
    }
}
