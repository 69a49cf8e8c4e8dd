//! LeNet-5 and the CIFAR ResNet on stacked replicas: parameter counts and FLOPs against hand
//! counts, the batched gradient against replica-by-replica gradients and finite differences,
//! batch-norm statistics against a host computation, and the forward pass against a plain host
//! implementation of the documented layout. On the CPU backend, except the last test (wgpu,
//! skipped with `DASIM_SKIP_WGPU=1`).

use burn::tensor::{Device, Int, Tensor, TensorData, activation};
use dasim_models::NeuralNet;
use dasim_models::backend::{BackendChoice, select};
use dasim_models::lenet::IM2COL_MIN_REPLICAS;
use dasim_models::{Activation, ImageShape, LeNet, ResNet};
use dasim_sim::clock::rng::{StreamKind, stream};
use rand::Rng;

fn shape(channels: usize, height: usize, width: usize) -> ImageShape {
    ImageShape {
        channels,
        height,
        width,
    }
}

/// `n` values uniform in `±scale` from a test stream.
fn noise(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut rng = stream(seed, StreamKind::Algorithm, 77);
    (0..n).map(|_| rng.random_range(-scale..scale)).collect()
}

fn labels(seed: u64, n: usize, classes: usize) -> Vec<i64> {
    let mut rng = stream(seed, StreamKind::Algorithm, 78);
    (0..n)
        .map(|_| rng.random_range(0..classes as i64))
        .collect()
}

/// Either model, through one forward function.
trait Net {
    fn p(&self) -> usize;
    fn run(&self, params: Tensor<2>, x: Tensor<3>, train: bool) -> (Tensor<3>, Option<Tensor<2>>);
    fn init_row(&self, seed: u64) -> Vec<f32>;
}

impl Net for LeNet {
    fn p(&self) -> usize {
        self.num_params()
    }
    fn run(&self, params: Tensor<2>, x: Tensor<3>, train: bool) -> (Tensor<3>, Option<Tensor<2>>) {
        self.forward(params, x, train)
    }
    fn init_row(&self, seed: u64) -> Vec<f32> {
        self.init(&mut stream(seed, StreamKind::Init, 0))
    }
}

impl Net for ResNet {
    fn p(&self) -> usize {
        self.num_params()
    }
    fn run(&self, params: Tensor<2>, x: Tensor<3>, train: bool) -> (Tensor<3>, Option<Tensor<2>>) {
        self.forward(params, x, train)
    }
    fn init_row(&self, seed: u64) -> Vec<f32> {
        self.init(&mut stream(seed, StreamKind::Init, 0))
    }
}

/// A problem on the host: `R` rows, `R` minibatches of `B` images of `dim` values, labels.
struct Case {
    rows: Vec<Vec<f32>>,
    x: Vec<f32>,
    y: Vec<i64>,
    b: usize,
    dim: usize,
}

impl Case {
    /// `r` different rows (inits from different seeds, every coordinate perturbed by ±0.05, so
    /// batch-norm weights and running statistics differ too) and different minibatches.
    fn new(net: &dyn Net, r: usize, b: usize, dim: usize, classes: usize, seed: u64) -> Self {
        let rows = (0..r as u64)
            .map(|k| {
                let mut row = net.init_row(seed + k);
                for (v, n) in row.iter_mut().zip(noise(seed * 100 + k, net.p(), 0.05)) {
                    *v += n;
                }
                row
            })
            .collect();
        Case {
            rows,
            x: noise(seed + 1000, r * b * dim, 1.0),
            y: labels(seed, r * b, classes),
            b,
            dim,
        }
    }

    fn r(&self) -> usize {
        self.rows.len()
    }

    /// Replica `k` alone.
    fn only(&self, k: usize) -> Case {
        let n = self.b * self.dim;
        Case {
            rows: vec![self.rows[k].clone()],
            x: self.x[k * n..(k + 1) * n].to_vec(),
            y: self.y[k * self.b..(k + 1) * self.b].to_vec(),
            b: self.b,
            dim: self.dim,
        }
    }

    fn tensors(&self, device: &Device) -> (Tensor<2>, Tensor<3>, Tensor<3, Int>) {
        let (r, p) = (self.r(), self.rows[0].len());
        let params = Tensor::from_data(TensorData::new(self.rows.concat(), [r, p]), device);
        let x = Tensor::from_data(
            TensorData::new(self.x.clone(), [r, self.b, self.dim]),
            device,
        );
        let y = Tensor::from_data(TensorData::new(self.y.clone(), [r, self.b, 1]), device);
        (params, x, y)
    }
}

/// Summed cross-entropy of each replica: `[R]`.
fn losses(logits: Tensor<3>, y: Tensor<3, Int>) -> Tensor<1> {
    let r = logits.dims()[0];
    activation::log_softmax(logits, 2)
        .gather(2, y)
        .neg()
        .sum_dim(1)
        .reshape([r])
}

fn host<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().try_into_vec::<f32>().unwrap()
}

/// Gradients (one row per replica) and losses, from one batched forward and backward pass.
fn gradients(
    net: &dyn Net,
    case: &Case,
    train: bool,
    device: &Device,
) -> (Vec<Vec<f32>>, Vec<f32>) {
    let (params, x, y) = case.tensors(device);
    let params = params.autodiff().require_grad();
    let (logits, _) = net.run(params.clone(), x.autodiff(), train);
    let l = losses(logits, y.autodiff());
    let grads = l.clone().sum().backward();
    let g = host(params.grad(&grads).unwrap());
    let p = net.p();
    (
        g.chunks(p).map(<[f32]>::to_vec).collect(),
        host(l.without_autodiff()),
    )
}

/// Summed losses without autodiff.
fn loss_values(net: &dyn Net, case: &Case, train: bool) -> Vec<f32> {
    let (params, x, y) = case.tensors(&Device::flex());
    host(losses(net.run(params, x, train).0, y))
}

fn assert_close(a: &[f32], b: &[f32], rel: f32, what: &str) {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-3);
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= rel * scale,
            "{what}: coordinate {i}: {x} vs {y} (scale {scale})"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Counts.

#[test]
fn lenet_parameter_count_and_flops_match_hand_counts() {
    // conv 1, conv 2, then 16·5·5 = 400 → 120 → 84 → 10.
    let dense = (400 * 120 + 120) + (120 * 84 + 84) + (84 * 10 + 10);
    let dense_flops = 2 * (400 * 120 + 120 * 84 + 84 * 10);
    let mnist = LeNet::new(shape(1, 28, 28), 10);
    assert_eq!(
        mnist.num_params(),
        (6 * 25 + 6) + (16 * 6 * 25 + 16) + dense
    );
    assert_eq!(mnist.num_params(), 61_706);
    assert_eq!(mnist.state_len(), 0);
    // 28×28 padded by 2: conv 1 gives 28×28, conv 2 gives 10×10.
    let flops = 2 * (6 * 25 * 28 * 28) + 2 * (6 * 16 * 25 * 10 * 10) + dense_flops;
    assert_eq!(mnist.forward_flops(), flops);
    assert_eq!(flops, 833_040, "about 0.4 M multiply-adds");
    assert_eq!(mnist.train_flops_per_sample(), 3.0 * flops as f64);
    let cifar = LeNet::new(shape(3, 32, 32), 10);
    assert_eq!(
        cifar.num_params(),
        (6 * 3 * 25 + 6) + (16 * 6 * 25 + 16) + dense
    );
    assert_eq!(
        cifar.forward_flops(),
        2 * (3 * 6 * 25 * 28 * 28) + 2 * (6 * 16 * 25 * 10 * 10) + dense_flops
    );
    // The shipped 8×8 digits: both convolutions padded, 16·2·2 features.
    let digits = LeNet::new(shape(1, 8, 8), 10);
    assert_eq!(
        digits.num_params(),
        (6 * 25 + 6) + (16 * 6 * 25 + 16) + (64 * 120 + 120) + (120 * 84 + 84) + (84 * 10 + 10)
    );
    assert!(LeNet::check(shape(1, 3, 8)).is_err());
    assert!(LeNet::check(shape(0, 28, 28)).is_err());
    assert!(LeNet::check(shape(1, 4, 4)).is_ok());
}

#[test]
fn resnet20_has_the_papers_parameter_count_and_flops() {
    let net = ResNet::new(shape(3, 32, 32), 10, 20, 16);
    let conv = |cin: usize, cout: usize| cin * cout * 9;
    let bn = |c: usize| 2 * c;
    let stem = conv(3, 16) + bn(16);
    let block = |cin, cout| conv(cin, cout) + bn(cout) + conv(cout, cout) + bn(cout);
    let stages =
        3 * block(16, 16) + block(16, 32) + 2 * block(32, 32) + block(32, 64) + 2 * block(64, 64);
    let trainable = stem + stages + 64 * 10 + 10;
    assert_eq!(trainable, 269_722, "0.27 M parameters");
    // Running mean and variance of 19 BN layers: 16 + 6·16 + 6·32 + 6·64 channels.
    let state = 2 * (16 + 6 * 16 + 6 * 32 + 6 * 64);
    assert_eq!(net.state_len(), state);
    assert_eq!(net.num_params(), trainable + state);

    // Multiply-adds: stem at 32×32, stage 1 at 32×32, stages 2 and 3 at 16×16 and 8×8.
    let macs = conv(3, 16) * 1024
        + 6 * conv(16, 16) * 1024
        + (conv(16, 32) + 5 * conv(32, 32)) * 256
        + (conv(32, 64) + 5 * conv(64, 64)) * 64
        + 64 * 10;
    assert_eq!(macs, 40_551_040, "about 41 M multiply-adds");
    assert_eq!(net.forward_flops(), 2 * macs as u64);

    assert!(ResNet::check(shape(3, 32, 32), 21, 16).is_err_and(|(f, _)| f == "depth"));
    assert!(ResNet::check(shape(3, 32, 32), 2, 16).is_err_and(|(f, _)| f == "depth"));
    assert!(ResNet::check(shape(3, 32, 32), 8, 0).is_err_and(|(f, _)| f == "width"));
    assert!(ResNet::check(shape(0, 32, 32), 8, 4).is_err_and(|(f, _)| f == "shape"));
}

#[test]
fn init_is_reproducible_and_has_the_documented_statistics() {
    let net = ResNet::new(shape(3, 32, 32), 10, 20, 16);
    let a = net.init_row(5);
    assert_eq!(a, net.init_row(5));
    assert_ne!(a, net.init_row(6));
    // The stem convolution: Kaiming normal, fan_out = 16·9.
    let stem = &a[..3 * 16 * 9];
    let var = stem.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>() / stem.len() as f64;
    let expected = 2.0 / (16.0 * 9.0);
    assert!(
        (var / expected - 1.0).abs() < 0.25,
        "variance {var} vs {expected}"
    );
    // BN weight 1, bias 0; state: means 0, variances 1.
    assert!(a[432..448].iter().all(|&v| v == 1.0));
    assert!(a[448..464].iter().all(|&v| v == 0.0));
    let state = &a[net.num_params() - net.state_len()..];
    assert!(state[..16].iter().all(|&v| v == 0.0));
    assert!(state[16..32].iter().all(|&v| v == 1.0));
    // LeNet: uniform in ±1/√fan_in.
    let lenet = LeNet::new(shape(1, 28, 28), 10);
    let p = lenet.init_row(5);
    assert!(p[..150].iter().all(|v| v.abs() <= 0.2));
    assert!(p[..150].iter().any(|v| v.abs() > 0.15));
}

// ---------------------------------------------------------------------------------------------
// Batched gradients.

fn check_batched_equals_single(net: &dyn Net, dim: usize, classes: usize, train: bool) {
    let case = Case::new(net, 3, 4, dim, classes, 21);
    let device = Device::flex();
    let (together, l_together) = gradients(net, &case, train, &device);
    for k in 0..case.r() {
        let (alone, l_alone) = gradients(net, &case.only(k), train, &device);
        assert!(
            (l_together[k] - l_alone[0]).abs() <= 1e-4 * (1.0 + l_alone[0].abs()),
            "replica {k}: loss {} vs {}",
            l_together[k],
            l_alone[0]
        );
        assert_close(&together[k], &alone[0], 1e-4, &format!("replica {k}"));
        assert!(alone[0].iter().any(|g| g.abs() > 1e-3), "a real gradient");
    }
    // The replicas really differ.
    assert_ne!(together[0], together[1]);
}

#[test]
fn lenet_batched_gradient_equals_replica_by_replica() {
    let mnist = LeNet::new(shape(1, 28, 28), 10);
    check_batched_equals_single(&mnist, 784, 10, true);
    let small = LeNet::new(shape(3, 8, 8), 5).with_activation(Activation::Tanh);
    check_batched_equals_single(&small, 192, 5, true);
}

#[test]
fn resnet_batched_gradient_equals_replica_by_replica() {
    let net = ResNet::new(shape(3, 8, 8), 4, 8, 4);
    check_batched_equals_single(&net, 192, 4, true);
    check_batched_equals_single(&net, 192, 4, false);
    // And the updated state, replica by replica.
    let case = Case::new(&net, 3, 4, 192, 4, 22);
    let (params, x, _) = case.tensors(&Device::flex());
    let together = host(net.forward(params, x, true).1.unwrap());
    let s = net.state_len();
    assert_eq!(together.len(), 3 * s);
    for k in 0..3 {
        let (params, x, _) = case.only(k).tensors(&Device::flex());
        let alone = host(net.forward(params, x, true).1.unwrap());
        assert_close(&together[k * s..(k + 1) * s], &alone, 1e-5, "state");
    }
}

/// The gradient through [`LeNet::forward_blocks`] / [`ResNet::forward_blocks`]: one autodiff
/// leaf per block, gradients concatenated (a block without a gradient counts as zero).
fn block_gradients(
    ranges: &[std::ops::Range<usize>],
    forward: impl Fn(Vec<Tensor<2>>, Tensor<3>) -> Tensor<3>,
    case: &Case,
) -> (Vec<f32>, Vec<f32>) {
    let device = Device::flex();
    let (params, x, y) = case.tensors(&device);
    let leaves: Vec<Tensor<2>> = ranges
        .iter()
        .map(|r| {
            params
                .clone()
                .slice_dim(1, r.clone())
                .autodiff()
                .require_grad()
        })
        .collect();
    let logits = forward(leaves.clone(), x.autodiff());
    let grads = losses(logits.clone(), y.autodiff()).sum().backward();
    let g = leaves
        .iter()
        .map(|l| {
            l.grad(&grads)
                .unwrap_or_else(|| Tensor::zeros(l.dims(), &device))
        })
        .collect();
    (host(Tensor::cat(g, 1)), host(logits.without_autodiff()))
}

#[test]
fn forward_on_blocks_equals_forward_on_rows() {
    let check = |ranges: Vec<std::ops::Range<usize>>,
                 p: usize,
                 net: &dyn Net,
                 fwd: &dyn Fn(Vec<Tensor<2>>, Tensor<3>) -> Tensor<3>,
                 dim: usize,
                 train: bool| {
        // Contiguous, in order, covering the row.
        assert_eq!(ranges[0].start, 0);
        assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
        assert_eq!(ranges.last().unwrap().end, p);
        let case = Case::new(net, 2, 3, dim, 4, 81);
        let (blocks, logits_blocks) = block_gradients(&ranges, fwd, &case);
        let (rows, _) = gradients(net, &case, train, &Device::flex());
        let (params, x, _) = case.tensors(&Device::flex());
        assert_eq!(host(net.run(params, x, train).0), logits_blocks);
        assert_close(&blocks, &rows.concat(), 1e-6, "block gradients");
    };
    let lenet = LeNet::new(shape(2, 8, 8), 4);
    check(
        lenet.blocks(),
        lenet.num_params(),
        &lenet,
        &|b, x| lenet.forward_blocks(b, x, true).0,
        128,
        true,
    );
    let resnet = ResNet::new(shape(3, 8, 8), 4, 8, 4);
    for train in [true, false] {
        check(
            resnet.blocks(),
            resnet.num_params(),
            &resnet,
            &|b, x| resnet.forward_blocks(b, x, train).0,
            192,
            train,
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Finite differences.

/// Central differences of the summed loss of one replica along `dir`, against `g · dir`. A ReLU
/// or max-pool kink within the step spoils a central difference, so the check passes if the
/// difference agrees for one of the steps 1e-2, 3e-3 and 1e-3 (smaller steps cross fewer kinks,
/// larger ones suffer less from f32 rounding).
fn directional(net: &dyn Net, case: &Case, g: &[f32], dir: &[f32], train: bool) {
    let exact: f64 = g
        .iter()
        .zip(dir)
        .map(|(a, b)| f64::from(*a) * f64::from(*b))
        .sum();
    let fd = |eps: f32| {
        let shifted = |sign: f32| {
            let mut c = case.only(0);
            for (v, d) in c.rows[0].iter_mut().zip(dir) {
                *v += sign * eps * d;
            }
            f64::from(loss_values(net, &c, train)[0])
        };
        (shifted(1.0) - shifted(-1.0)) / (2.0 * f64::from(eps))
    };
    let tried: Vec<f64> = [1e-2, 3e-3, 1e-3].into_iter().map(fd).collect();
    assert!(
        tried
            .iter()
            .any(|fd| (fd - exact).abs() < 2e-3 + 2e-2 * exact.abs()),
        "finite differences {tried:?} (steps 1e-2, 3e-3, 1e-3), gradient {exact}"
    );
}

/// Finite differences on one replica: single coordinates, `singles` of them spread over
/// `range`, and random directions confined to each of `chunks` contiguous parts of the row (so
/// every layer is exercised).
fn check_finite_differences(
    net: &dyn Net,
    (dim, classes): (usize, usize),
    train: bool,
    (range, singles): (std::ops::Range<usize>, usize),
    chunks: usize,
) {
    let case = Case::new(net, 1, 3, dim, classes, 31).only(0);
    let (g, _) = gradients(net, &case, train, &Device::flex());
    let g = &g[0];
    let p = net.p();
    for i in range.clone().step_by(range.len().div_ceil(singles)) {
        let mut dir = vec![0.0; p];
        dir[i] = 1.0;
        directional(net, &case, g, &dir, train);
    }
    let chunk = p.div_ceil(chunks);
    for (k, start) in (0..p).step_by(chunk).enumerate() {
        let end = (start + chunk).min(p);
        let mut dir = vec![0.0; p];
        dir[start..end].copy_from_slice(&noise(500 + k as u64, end - start, 1.0));
        let norm = dir.iter().map(|v| v * v).sum::<f32>().sqrt();
        dir.iter_mut().for_each(|v| *v /= norm);
        directional(net, &case, g, &dir, train);
    }
}

#[test]
fn lenet_gradient_matches_finite_differences() {
    // With tanh, single coordinates anywhere in the row are far enough from max-pool switches.
    let net = LeNet::new(shape(1, 8, 8), 3).with_activation(Activation::Tanh);
    let p = net.num_params();
    check_finite_differences(&net, (64, 3), true, (0..p, 40), 8);
}

#[test]
fn resnet_gradient_matches_finite_differences_in_both_modes() {
    // A step in one convolution weight moves many ReLU inputs at once, often across their kink,
    // so single coordinates are checked in the linear layer (no kink after it) and the rest of
    // the row along random directions, which move each coordinate by step/√(chunk length).
    let net = ResNet::new(shape(3, 8, 8), 3, 8, 4);
    let trainable = net.num_params() - net.state_len();
    let fc = trainable - (16 * 3 + 3)..trainable;
    check_finite_differences(&net, (192, 3), true, (fc.clone(), 20), 10);
    check_finite_differences(&net, (192, 3), false, (fc, 10), 10);
}

// ---------------------------------------------------------------------------------------------
// Batch norm.

/// Host convolution of `[B, cin, h, w]` with weight `[cout, cin, k, k]`: `([B, cout, ho, wo], ho, wo)`.
#[allow(clippy::too_many_arguments)]
fn conv_host(
    x: &[f32],
    (b, cin, h, w): (usize, usize, usize, usize),
    weight: &[f32],
    bias: Option<&[f32]>,
    cout: usize,
    k: usize,
    stride: usize,
    pad: [usize; 2],
) -> (Vec<f32>, usize, usize) {
    let ho = (h + 2 * pad[0] - k) / stride + 1;
    let wo = (w + 2 * pad[1] - k) / stride + 1;
    let mut out = vec![0.0f32; b * cout * ho * wo];
    for n in 0..b {
        for co in 0..cout {
            for oy in 0..ho {
                for ox in 0..wo {
                    let mut acc = bias.map_or(0.0, |b| f64::from(b[co]));
                    for ci in 0..cin {
                        for ky in 0..k {
                            for kx in 0..k {
                                let iy = (oy * stride + ky) as isize - pad[0] as isize;
                                let ix = (ox * stride + kx) as isize - pad[1] as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                    continue;
                                }
                                let xv = x[((n * cin + ci) * h + iy as usize) * w + ix as usize];
                                let wv = weight[((co * cin + ci) * k + ky) * k + kx];
                                acc += f64::from(xv) * f64::from(wv);
                            }
                        }
                    }
                    out[((n * cout + co) * ho + oy) * wo + ox] = acc as f32;
                }
            }
        }
    }
    (out, ho, wo)
}

/// Per-channel mean and biased variance of `[B, C, hw]`, in f64.
fn channel_stats(x: &[f32], b: usize, c: usize, hw: usize) -> Vec<(f64, f64)> {
    (0..c)
        .map(|ch| {
            let vals: Vec<f64> = (0..b)
                .flat_map(|n| (0..hw).map(move |i| (n, i)))
                .map(|(n, i)| f64::from(x[(n * c + ch) * hw + i]))
                .collect();
            let m = vals.iter().sum::<f64>() / vals.len() as f64;
            let v = vals.iter().map(|x| (x - m).powi(2)).sum::<f64>() / vals.len() as f64;
            (m, v)
        })
        .collect()
}

#[test]
fn batch_norm_state_is_the_running_average_of_minibatch_statistics() {
    let (c, h, w, width) = (2, 6, 6, 4);
    let net = ResNet::new(shape(c, h, w), 3, 8, width);
    let case = Case::new(&net, 2, 3, c * h * w, 3, 41);
    let (params, x, _) = case.tensors(&Device::flex());
    let state = host(net.forward(params, x, true).1.unwrap());
    let (p, s) = (net.num_params(), net.state_len());
    let trainable = p - s;
    let m = (case.b * h * w) as f64;
    for k in 0..2 {
        let row = &case.rows[k];
        let x = &case.x[k * case.b * case.dim..(k + 1) * case.b * case.dim];
        // The first BN layer normalizes the stem convolution (weight at the start of the row).
        let (y, ho, wo) = conv_host(x, (case.b, c, h, w), row, None, width, 3, 1, [1, 1]);
        let stats = channel_stats(&y, case.b, width, ho * wo);
        for (ch, (mean, var)) in stats.into_iter().enumerate() {
            let old_mean = f64::from(row[trainable + ch]);
            let old_var = f64::from(row[trainable + width + ch]);
            let new_mean = f64::from(state[k * s + ch]);
            let new_var = f64::from(state[k * s + width + ch]);
            let want_mean = 0.9 * old_mean + 0.1 * mean;
            let want_var = 0.9 * old_var + 0.1 * var * m / (m - 1.0);
            assert!(
                (new_mean - want_mean).abs() < 1e-5,
                "replica {k} channel {ch}: mean {new_mean} vs {want_mean}"
            );
            assert!(
                (new_var - want_var).abs() < 1e-4 * want_var,
                "replica {k} channel {ch}: variance {new_var} vs {want_var}"
            );
        }
    }
    // Every layer's statistics moved.
    let old: Vec<f32> = case
        .rows
        .iter()
        .flat_map(|r| r[trainable..].to_vec())
        .collect();
    assert!(old.iter().zip(&state).all(|(a, b)| a != b));
}

#[test]
fn eval_mode_uses_running_statistics_and_train_mode_batch_statistics() {
    let net = ResNet::new(shape(3, 8, 8), 4, 8, 4);
    let case = Case::new(&net, 2, 3, 192, 4, 51);
    let logits = |case: &Case, train: bool| {
        let (params, x, _) = case.tensors(&Device::flex());
        host(net.forward(params, x, train).0)
    };
    // Sample 0 of each replica alone, and within its batch of 3.
    let mut first = case.only(0);
    first.b = 1;
    first.x.truncate(case.dim);
    first.y.truncate(1);
    let batch_eval = logits(&case, false);
    let alone_eval = logits(&first, false);
    assert_close(
        &alone_eval,
        &batch_eval[..4],
        1e-5,
        "eval: batch composition",
    );
    let batch_train = logits(&case, true);
    let mut first2 = case.only(0);
    first2.b = 2;
    first2.x.truncate(2 * case.dim);
    first2.y.truncate(2);
    let pair_train = logits(&first2, true);
    let diff = pair_train[..4]
        .iter()
        .zip(&batch_train[..4])
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(diff > 1e-3, "train mode normalizes with the batch: {diff}");

    // Changing the running statistics changes evaluation, not training.
    let mut moved = Case::new(&net, 2, 3, 192, 4, 51);
    let trainable = net.num_params() - net.state_len();
    for row in &mut moved.rows {
        for v in &mut row[trainable..] {
            *v = *v * 1.5 + 0.2;
        }
    }
    assert_eq!(logits(&moved, true), batch_train);
    let diff = logits(&moved, false)
        .iter()
        .zip(&batch_eval)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(
        diff > 1e-3,
        "eval mode reads the running statistics: {diff}"
    );
}

// ---------------------------------------------------------------------------------------------
// Host reference of the documented layout.

fn act(v: &mut [f32], tanh: bool) {
    for x in v {
        *x = if tanh { x.tanh() } else { x.max(0.0) };
    }
}

fn max_pool_host(x: &[f32], bc: usize, h: usize, w: usize) -> (Vec<f32>, usize, usize) {
    let (ho, wo) = (h / 2, w / 2);
    let mut out = vec![f32::NEG_INFINITY; bc * ho * wo];
    for c in 0..bc {
        for y in 0..2 * ho {
            for xx in 0..2 * wo {
                let o = &mut out[(c * ho + y / 2) * wo + xx / 2];
                *o = o.max(x[(c * h + y) * w + xx]);
            }
        }
    }
    (out, ho, wo)
}

/// `[B, fan_in]` × weight `[fan_in, fan_out]` at `offset` + bias.
fn linear_host(
    x: &[f32],
    b: usize,
    row: &[f32],
    offset: usize,
    fan_in: usize,
    fan_out: usize,
) -> Vec<f32> {
    let mut out = vec![0.0f32; b * fan_out];
    for n in 0..b {
        for o in 0..fan_out {
            let mut acc = f64::from(row[offset + fan_in * fan_out + o]);
            for i in 0..fan_in {
                acc += f64::from(x[n * fan_in + i]) * f64::from(row[offset + i * fan_out + o]);
            }
            out[n * fan_out + o] = acc as f32;
        }
    }
    out
}

fn lenet_host(
    row: &[f32],
    x: &[f32],
    b: usize,
    s: ImageShape,
    classes: usize,
    tanh: bool,
) -> Vec<f32> {
    let (c, h, w) = (s.channels, s.height, s.width);
    let pad = |side: usize| {
        if side >= 32 {
            [0, 0]
        } else if side >= 28 {
            [2, 0]
        } else {
            [2, 2]
        }
    };
    let (ph, pw) = (pad(h), pad(w));
    let mut o = 0;
    let w1 = &row[o..o + 6 * c * 25];
    o += 6 * c * 25;
    let b1 = &row[o..o + 6];
    o += 6;
    let (mut y, h1, w1o) = conv_host(x, (b, c, h, w), w1, Some(b1), 6, 5, 1, [ph[0], pw[0]]);
    act(&mut y, tanh);
    let (y, h1, w1o) = max_pool_host(&y, b * 6, h1, w1o);
    let w2 = &row[o..o + 16 * 6 * 25];
    o += 16 * 6 * 25;
    let b2 = &row[o..o + 16];
    o += 16;
    let (mut y, h2, w2o) = conv_host(&y, (b, 6, h1, w1o), w2, Some(b2), 16, 5, 1, [ph[1], pw[1]]);
    act(&mut y, tanh);
    let (y, h2, w2o) = max_pool_host(&y, b * 16, h2, w2o);
    let flat = 16 * h2 * w2o;
    let mut y = linear_host(&y, b, row, o, flat, 120);
    o += flat * 120 + 120;
    act(&mut y, tanh);
    let mut y = linear_host(&y, b, row, o, 120, 84);
    o += 120 * 84 + 84;
    act(&mut y, tanh);
    let y = linear_host(&y, b, row, o, 84, classes);
    assert_eq!(o + 84 * classes + classes, row.len());
    y
}

/// Batch norm of `[B, C, hw]` in place with the weight/bias at `affine` and, in eval mode, the
/// running statistics at `stats`.
#[allow(clippy::too_many_arguments)]
fn bn_host(
    y: &mut [f32],
    b: usize,
    c: usize,
    hw: usize,
    row: &[f32],
    affine: usize,
    stats: usize,
    train: bool,
) {
    let batch = channel_stats(y, b, c, hw);
    for ch in 0..c {
        let (mean, var) = if train {
            batch[ch]
        } else {
            (f64::from(row[stats + ch]), f64::from(row[stats + c + ch]))
        };
        let (g, beta) = (f64::from(row[affine + ch]), f64::from(row[affine + c + ch]));
        for n in 0..b {
            for i in 0..hw {
                let v = &mut y[(n * c + ch) * hw + i];
                *v = (g * (f64::from(*v) - mean) / (var + 1e-5).sqrt() + beta) as f32;
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn resnet_host(
    row: &[f32],
    x: &[f32],
    b: usize,
    s: ImageShape,
    classes: usize,
    depth: usize,
    width: usize,
    train: bool,
) -> Vec<f32> {
    let mut o = 0;
    // Trainable length, to find the running statistics: walk the layout once.
    let n_blocks = (depth - 2) / 6;
    let mut bn_channels = vec![width];
    for stage in 0..3 {
        bn_channels.extend(std::iter::repeat_n(width << stage, 2 * n_blocks));
    }
    let state: usize = bn_channels.iter().map(|c| 2 * c).sum();
    let mut stats = row.len() - state;
    let conv = |x: &[f32],
                dims: (usize, usize, usize, usize),
                cout: usize,
                stride: usize,
                o: &mut usize| {
        let r = conv_host(x, dims, &row[*o..], None, cout, 3, stride, [1, 1]);
        *o += cout * dims.1 * 9;
        r
    };
    let mut bn = |y: &mut [f32], c: usize, hw: usize, o: &mut usize| {
        bn_host(y, b, c, hw, row, *o, stats, train);
        *o += 2 * c;
        stats += 2 * c;
    };
    let (mut y, mut h, mut w) = conv(x, (b, s.channels, s.height, s.width), width, 1, &mut o);
    bn(&mut y, width, h * w, &mut o);
    act(&mut y, false);
    let mut cin = width;
    for stage in 0..3 {
        let cout = width << stage;
        for j in 0..n_blocks {
            let stride = if stage > 0 && j == 0 { 2 } else { 1 };
            let (mut z, ho, wo) = conv(&y, (b, cin, h, w), cout, stride, &mut o);
            bn(&mut z, cout, ho * wo, &mut o);
            act(&mut z, false);
            let (mut z, _, _) = conv(&z, (b, cout, ho, wo), cout, 1, &mut o);
            bn(&mut z, cout, ho * wo, &mut o);
            // Option A: subsample, identity channels first, then zeros.
            for n in 0..b {
                for ch in 0..cin {
                    for oy in 0..ho {
                        for ox in 0..wo {
                            z[((n * cout + ch) * ho + oy) * wo + ox] +=
                                y[((n * cin + ch) * h + oy * stride) * w + ox * stride];
                        }
                    }
                }
            }
            act(&mut z, false);
            (y, h, w, cin) = (z, ho, wo, cout);
        }
    }
    let pooled: Vec<f32> = (0..b * cin)
        .map(|i| {
            (y[i * h * w..(i + 1) * h * w]
                .iter()
                .map(|v| f64::from(*v))
                .sum::<f64>()
                / (h * w) as f64) as f32
        })
        .collect();
    let out = linear_host(&pooled, b, row, o, cin, classes);
    assert_eq!(o + cin * classes + classes, row.len() - state);
    out
}

#[test]
fn forward_matches_a_host_implementation_of_the_layout() {
    let device = Device::flex();
    for (s, tanh) in [
        (shape(1, 28, 28), false),
        (shape(3, 32, 32), true),
        (shape(2, 9, 7), false),
    ] {
        let mut net = LeNet::new(s, 5);
        if tanh {
            net = net.with_activation(Activation::Tanh);
        }
        let case = Case::new(&net, 2, 2, s.len(), 5, 61);
        let (params, x, _) = case.tensors(&device);
        let got = host(net.forward(params, x, false).0);
        for k in 0..2 {
            let one = case.only(k);
            let want = lenet_host(&one.rows[0], &one.x, 2, s, 5, tanh);
            assert_close(&got[k * 10..(k + 1) * 10], &want, 1e-4, "LeNet logits");
        }
    }
    let s = shape(3, 9, 8);
    let net = ResNet::new(s, 4, 14, 3);
    let case = Case::new(&net, 2, 3, s.len(), 4, 62);
    for train in [true, false] {
        let (params, x, _) = case.tensors(&device);
        let got = host(net.forward(params, x, train).0);
        for k in 0..2 {
            let one = case.only(k);
            let want = resnet_host(&one.rows[0], &one.x, 3, s, 4, 14, 3, train);
            assert_close(&got[k * 12..(k + 1) * 12], &want, 1e-4, "ResNet logits");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// wgpu.

#[test]
fn conv_models_agree_on_wgpu_and_flex() {
    if std::env::var_os("DASIM_SKIP_WGPU").is_some() {
        eprintln!("DASIM_SKIP_WGPU is set: skipping the wgpu comparison");
        return;
    }
    let wgpu = select(BackendChoice::Wgpu)
        .expect("a wgpu adapter (tests/run.sh installs lavapipe; set DASIM_SKIP_WGPU=1 to skip)");
    let lenet = LeNet::new(shape(1, 12, 12), 4);
    let resnet = ResNet::new(shape(3, 8, 8), 4, 8, 4);
    let nets: [(&dyn Net, usize); 2] = [(&lenet, 144), (&resnet, 192)];
    // 3 replicas take the grouped convolution on wgpu, 8 take im2col (the training path from
    // `IM2COL_MIN_REPLICAS` replicas on); flex always takes the grouped convolution.
    assert_eq!(IM2COL_MIN_REPLICAS, 8);
    for ((net, dim), r) in nets.into_iter().flat_map(|n| [(n, 3), (n, 8)]) {
        let case = Case::new(net, r, 4, dim, 4, 71);
        for train in [true, false] {
            let (g_flex, l_flex) = gradients(net, &case, train, &Device::flex());
            let (g_wgpu, l_wgpu) = gradients(net, &case, train, &wgpu.device);
            assert_close(&l_wgpu, &l_flex, 1e-4, "losses");
            for k in 0..r {
                assert_close(&g_wgpu[k], &g_flex[k], 1e-3, "gradients");
            }
        }
    }
}
