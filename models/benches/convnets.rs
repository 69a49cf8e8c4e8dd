//! How fast the convolutional models and the transformer train, against the machine's own
//! matrix-product speed measured in the same run.
//!
//! On the CPU (default): one training pass (forward and backward, batch 32 per replica, softmax
//! cross-entropy, gradient written) of `R` replicas of ResNet-20 (32×32×3) and of LeNet-5
//! (28×28×1) through the models' CPU programs, the replicas spread over the threads as the
//! store spreads a flush; and the reference, a 2,048 × 2,048 single-precision matrix product
//! through burn's `flex` backend (gemm) on the same threads. On a GPU
//! (`DASIM_BENCH_BACKEND=wgpu`): one batched pass of `R` replicas through burn's autodiff on
//! the device (the path the store takes there), and the same matrix product (4,096 × 4,096)
//! through burn on that device. The transformer (windows of `context + 1` character tokens, 65
//! of them as Tiny Shakespeare's, cross-entropy per position) runs its CPU program on `flex`
//! and burn's autodiff on a GPU, at three shapes: (a) the shipped scenario's
//! (`scenarios/transformer.toml`: 2 blocks, d = 64, context 32, 8 windows), (b) 4 blocks,
//! d = 128, context 128, 16 windows, and (c) nanoGPT's Shakespeare-character model (6 blocks,
//! d = 384, context 256, 12 windows); and (b) once through burn's autodiff on `flex`, the pass
//! the CPU program replaced.
//!
//! Each timed pass is paired with one run of the reference just before it (untimed), so that a
//! shared machine whose speed drifts compares a pass with the product of the same moment. After
//! divan's report, a table gives each case's median time per pass, its GFLOP/s (the book's
//! counts: three times the forward pass's multiply-adds × 2, per sample), the median GFLOP/s of
//! its paired references and the median of the passes' shares of their references. `cargo bench -p dasim-models --bench convnets`;
//! `DASIM_BENCH_REPLICAS=1,16,64` sets the replica counts.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use burn::tensor::{Device, Int, Tensor, TensorData, activation};
use dasim_models::backend::{BackendChoice, select};
use dasim_models::layers::{Targets, isa, with_inner_parallelism};
use dasim_models::{ImageShape, LeNet, Model, ResNet, Transformer, TransformerShape};
use dasim_sim::clock::rng::{StreamKind, stream};
use divan::Bencher;
use rand::Rng;
use rayon::prelude::*;

const BATCH: usize = 32;
const SAMPLES: u32 = 5;

fn main() {
    let (name, _) = backend();
    eprintln!(
        "backend: {name}; {} threads; CPU kernels {}; batch {BATCH} per replica",
        rayon::current_num_threads(),
        isa().name()
    );
    divan::main();
    print_table();
}

fn on_gpu() -> bool {
    std::env::var("DASIM_BENCH_BACKEND").as_deref() == Ok("wgpu")
}

fn backend() -> &'static (String, Device) {
    static BACKEND: OnceLock<(String, Device)> = OnceLock::new();
    BACKEND.get_or_init(|| {
        if on_gpu() {
            let b = select(BackendChoice::Wgpu).expect("a wgpu adapter");
            (b.to_string(), b.device)
        } else {
            ("flex (CPU)".into(), Device::flex())
        }
    })
}

fn replicas() -> Vec<usize> {
    if let Ok(list) = std::env::var("DASIM_BENCH_REPLICAS") {
        return list
            .split(',')
            .map(|v| v.trim().parse().expect("comma-separated counts"))
            .collect();
    }
    if on_gpu() {
        vec![16, 64, 256]
    } else {
        vec![1, 16, 64]
    }
}

/// FLOPs per pass, and per sample the pass's seconds and the GFLOP/s of the reference product
/// run just before it, by case.
type Timings = Mutex<BTreeMap<(&'static str, usize), (f64, Vec<(f64, f64)>)>>;

fn timings() -> &'static Timings {
    static T: OnceLock<Timings> = OnceLock::new();
    T.get_or_init(Default::default)
}

fn record(name: &'static str, r: usize, flops: f64, secs: f64, reference: f64) {
    timings()
        .lock()
        .unwrap()
        .entry((name, r))
        .or_insert((flops, Vec::new()))
        .1
        .push((secs, reference));
}

/// The reference: a large square matrix product through burn on the bench's device (2,048 on
/// the CPU, 4,096 on a GPU), run once; its GFLOP/s. Every timed pass is paired with one run
/// just before it (divan does not time it), so that a machine whose speed drifts (a shared
/// host) compares each pass with the product in the same moment.
fn reference_gflops() -> f64 {
    static MATRICES: OnceLock<(Tensor<2>, Tensor<2>)> = OnceLock::new();
    let n: usize = if on_gpu() { 4096 } else { 2048 };
    let (a, b) = MATRICES.get_or_init(|| {
        let device = &backend().1;
        let mut rng = stream(2, StreamKind::Data, 0);
        let mut m = || -> Tensor<2> {
            let v: Vec<f32> = (0..n * n).map(|_| rng.random_range(-1.0..1.0)).collect();
            Tensor::from_data(TensorData::new(v, [n, n]), device)
        };
        let (a, b) = (m(), m());
        // Once untimed: on a GPU the first product compiles its kernels.
        let _ = a
            .clone()
            .matmul(b.clone())
            .slice([0..1, 0..1])
            .into_scalar::<f32>();
        (a, b)
    });
    let started = Instant::now();
    // Reading one value back waits for the device.
    let _ = a
        .clone()
        .matmul(b.clone())
        .slice([0..1, 0..1])
        .into_scalar::<f32>();
    2.0 * (n * n * n) as f64 / started.elapsed().as_secs_f64() / 1e9
}

fn resnet20() -> Model {
    let s = ImageShape {
        channels: 3,
        height: 32,
        width: 32,
    };
    Model::net(ResNet::new(s, 10, 20, 16))
}

fn lenet5() -> Model {
    let s = ImageShape {
        channels: 1,
        height: 28,
        width: 28,
    };
    Model::net(LeNet::new(s, 10))
}

/// Random inputs and labels for `r` replicas.
fn data(model: &Model, r: usize, dim: usize) -> (Vec<f32>, Vec<u32>) {
    let mut rng = stream(1, StreamKind::Data, 0);
    let x = (0..r * BATCH * dim)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let classes = 10;
    let y = (0..r * BATCH)
        .map(|_| rng.random_range(0..classes as u32))
        .collect();
    let _ = model;
    (x, y)
}

/// Times one training pass of the replicas `params` through burn's autodiff on the bench's
/// device (the store's path there): the model's outputs on `x`, cross-entropy against the labels
/// `y`, the gradient read back; each timed pass paired with a reference product.
#[allow(clippy::too_many_arguments)]
fn bench_burn_pass(
    bencher: Bencher,
    name: &'static str,
    r: usize,
    flops: f64,
    model: &Model,
    params: Tensor<2>,
    x: Tensor<3>,
    y: Tensor<3, Int>,
) {
    let pass = || {
        let started = Instant::now();
        let params = params.clone().autodiff().require_grad();
        let (logits, _) = model.forward(params.clone(), x.clone().autodiff(), true);
        let loss = activation::log_softmax(logits, 2)
            .gather(2, y.clone().autodiff())
            .neg()
            .sum();
        let grads = loss.backward();
        let s = params
            .grad(&grads)
            .expect("a gradient")
            .sum()
            .into_scalar::<f32>();
        (s, started.elapsed().as_secs_f64())
    };
    time_passes(bencher, name, r, flops, pass);
}

/// Times `pass` (a training pass of `r` replicas, `flops` in all: its checksum and its wall
/// seconds) after one warm-up pass, each sample beside the reference matrix product measured
/// just before it, and records both.
fn time_passes(
    bencher: Bencher,
    name: &'static str,
    r: usize,
    flops: f64,
    pass: impl Fn() -> (f32, f64) + Sync,
) {
    pass();
    bencher
        .with_inputs(reference_gflops)
        .bench_values(|reference| {
            let (s, secs) = pass();
            record(name, r, flops, secs, reference);
            s
        });
}

/// One training pass of `r` replicas through the model's CPU program (the store's path on
/// `flex`), or through burn on the device (the path on a GPU).
fn bench_model(bencher: Bencher, name: &'static str, model: Model, dim: usize, r: usize) {
    let row = model.init(&mut stream(1, StreamKind::Init, 0));
    let p = row.len();
    let (x, y) = data(&model, r, dim);
    let flops = model.train_flops_per_sample() * (BATCH * r) as f64;
    if on_gpu() {
        let device = &backend().1;
        let params: Tensor<2> =
            Tensor::from_data(TensorData::new(row, [1, p]), device).repeat_dim(0, r);
        let xt: Tensor<3> = Tensor::from_data(TensorData::new(x, [r, BATCH, dim]), device);
        let labels: Vec<i64> = y.iter().map(|&l| i64::from(l)).collect();
        let yt: Tensor<3, Int> = Tensor::from_data(TensorData::new(labels, [r, BATCH, 1]), device);
        bench_burn_pass(bencher, name, r, flops, &model, params, xt, yt);
        return;
    }
    let program = model.cpu_program().expect("a CPU program");
    time_cpu_passes(bencher, name, r, flops, p, |k, grad| {
        let xs = &x[k * BATCH * dim..(k + 1) * BATCH * dim];
        let ys = &y[k * BATCH..(k + 1) * BATCH];
        program.train(&row, xs, Targets::Classes(ys), 1.0 / BATCH as f32, grad)[0]
    });
}

/// Times a training pass of `r` replicas through a CPU program, `train(k, grad)` being replica
/// `k`'s (its first loss): as the store spreads a flush, a replica per thread when the replicas
/// fill the threads, else one replica after another, each spreading its layers over the
/// threads.
fn time_cpu_passes(
    bencher: Bencher,
    name: &'static str,
    r: usize,
    flops: f64,
    p: usize,
    train: impl Fn(usize, &mut [f32]) -> f32 + Sync,
) {
    let threads = rayon::current_num_threads();
    let by_replica = threads > 1 && (r == threads || r >= 2 * threads);
    let one = |k: usize| {
        with_inner_parallelism(!by_replica, || {
            let mut grad = vec![0.0f32; p];
            train(k, &mut grad) + grad[0]
        })
    };
    let pass = || {
        let started = Instant::now();
        let s: f32 = if by_replica {
            (0..r).into_par_iter().map(one).sum()
        } else {
            (0..r).map(one).sum()
        };
        (s, started.elapsed().as_secs_f64())
    };
    time_passes(bencher, name, r, flops, pass);
}

/// A GPT of `layers` blocks of width `d` with `heads` heads (`d_ff = 4d`) over Tiny
/// Shakespeare's 65 characters, reading windows of `context` tokens.
fn gpt(layers: usize, d: usize, heads: usize, context: usize) -> Transformer {
    Transformer::new(TransformerShape {
        vocab: 65,
        context,
        d_model: d,
        heads,
        d_ff: 4 * d,
        layers,
    })
}

/// `r · batch` random windows of a transformer: the tokens as floats, and every position's
/// next token.
fn windows(m: &Transformer, r: usize, batch: usize) -> (Vec<f32>, Vec<u32>) {
    let (t, vocab) = (m.shape().context, m.shape().vocab);
    let mut rng = stream(1, StreamKind::Data, 0);
    let tokens: Vec<u32> = (0..r * batch * (t + 1))
        .map(|_| rng.random_range(0..vocab as u32))
        .collect();
    let y = tokens.chunks(t + 1).flat_map(|w| w[1..].to_vec()).collect();
    (tokens.iter().map(|&v| v as f32).collect(), y)
}

/// One training pass of `r` replicas of a transformer on `batch` windows each: through its CPU
/// program on `flex` (the replicas spread over the threads as the store spreads a flush), or
/// with `burn`, or on a GPU, through burn's autodiff (the store's path there).
fn bench_transformer(
    bencher: Bencher,
    name: &'static str,
    m: Transformer,
    batch: usize,
    r: usize,
    burn: bool,
) {
    let model = Model::net(m.clone());
    let t = m.shape().context;
    let row = model.init(&mut stream(1, StreamKind::Init, 0));
    let p = row.len();
    let (x, y) = windows(&m, r, batch);
    let flops = model.train_flops_per_sample() * (batch * r) as f64;
    if on_gpu() || burn {
        let device = &backend().1;
        let params: Tensor<2> =
            Tensor::from_data(TensorData::new(row, [1, p]), device).repeat_dim(0, r);
        let xt: Tensor<3> = Tensor::from_data(TensorData::new(x, [r, batch, t + 1]), device);
        let y: Vec<i64> = y.iter().map(|&v| i64::from(v)).collect();
        let yt: Tensor<3, Int> = Tensor::from_data(TensorData::new(y, [r, batch * t, 1]), device);
        bench_burn_pass(bencher, name, r, flops, &model, params, xt, yt);
        return;
    }
    let program = model.cpu_program().expect("a CPU program");
    let (per_x, per_y) = (batch * (t + 1), batch * t);
    time_cpu_passes(bencher, name, r, flops, p, |k, grad| {
        let (xs, ys) = (
            &x[k * per_x..(k + 1) * per_x],
            &y[k * per_y..(k + 1) * per_y],
        );
        program.train(&row, xs, Targets::Tokens(ys), 1.0 / batch as f32, grad)[0]
    });
}

fn gpt_replicas(large: bool) -> Vec<usize> {
    if std::env::var_os("DASIM_BENCH_REPLICAS").is_some() {
        return replicas();
    }
    match (on_gpu(), large) {
        (true, _) => vec![16, 64],
        (false, false) => vec![1, 8, 16],
        (false, true) => vec![1, 4],
    }
}

/// (a) The shipped scenario's shape (`scenarios/transformer.toml`): 2 blocks, d = 64, 4 heads,
/// context 32, 8 windows.
#[divan::bench(args = gpt_replicas(false), sample_count = SAMPLES, sample_size = 1)]
fn gpt_a_2x64_context_32(bencher: Bencher, r: usize) {
    bench_transformer(bencher, "gpt (a) 2x64 T=32", gpt(2, 64, 4, 32), 8, r, false);
}

/// (b) 4 blocks, d = 128, 4 heads, context 128, 16 windows.
#[divan::bench(args = gpt_replicas(false), sample_count = SAMPLES, sample_size = 1)]
fn gpt_b_4x128_context_128(bencher: Bencher, r: usize) {
    bench_transformer(
        bencher,
        "gpt (b) 4x128 T=128",
        gpt(4, 128, 4, 128),
        16,
        r,
        false,
    );
}

/// (c) nanoGPT's Shakespeare-character model: 6 blocks, d = 384, 6 heads, context 256, 12
/// windows (10.7 M parameters).
#[divan::bench(args = gpt_replicas(true), sample_count = SAMPLES, sample_size = 1)]
fn gpt_c_6x384_context_256(bencher: Bencher, r: usize) {
    bench_transformer(
        bencher,
        "gpt (c) 6x384 T=256",
        gpt(6, 384, 6, 256),
        12,
        r,
        false,
    );
}

/// (b) through burn's autodiff on `flex`, the pass the CPU program replaced (one replica).
#[divan::bench(args = [1], sample_count = SAMPLES, sample_size = 1)]
fn gpt_b_burn_reference(bencher: Bencher, r: usize) {
    if on_gpu() {
        return;
    }
    bench_transformer(
        bencher,
        "gpt (b) burn pass",
        gpt(4, 128, 4, 128),
        16,
        r,
        true,
    );
}

#[divan::bench(args = replicas(), sample_count = SAMPLES, sample_size = 1)]
fn resnet20_32x32(bencher: Bencher, r: usize) {
    bench_model(bencher, "resnet-20 32x32x3", resnet20(), 3072, r);
}

#[divan::bench(args = replicas(), sample_count = SAMPLES, sample_size = 1)]
fn lenet5_28x28(bencher: Bencher, r: usize) {
    bench_model(bencher, "lenet-5 28x28x1", lenet5(), 784, r);
}

/// The reference alone, timed by divan too.
#[divan::bench(sample_count = SAMPLES, sample_size = 1)]
fn matmul_reference(bencher: Bencher) {
    let n: usize = if on_gpu() { 4096 } else { 2048 };
    let flops = 2.0 * (n * n * n) as f64;
    bencher.bench(|| {
        let g = reference_gflops();
        record("matmul reference", n, flops, flops / g / 1e9, g);
        g
    });
}

fn print_table() {
    let t = timings().lock().unwrap();
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!();
    println!(
        "{:<20} {:>6} {:>11} {:>9} {:>10} {:>9}",
        "case", "R / n", "pass (ms)", "GFLOP/s", "reference", "share"
    );
    for (&(name, r), (flops, samples)) in t.iter() {
        let secs = median(samples.iter().map(|s| s.0).collect());
        let reference = median(samples.iter().map(|s| s.1).collect());
        // The share of each pass against its own reference, then the median.
        let share = median(samples.iter().map(|s| flops / s.0 / 1e9 / s.1).collect());
        println!(
            "{:<20} {:>6} {:>11.2} {:>9.1} {:>10.1} {:>8.0}%",
            name,
            r,
            secs * 1e3,
            flops / secs / 1e9,
            reference,
            100.0 * share
        );
    }
}
