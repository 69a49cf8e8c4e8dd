//! LeNet-5 on the flat parameter layout, batched across replicas by grouped convolution.
//!
//! **Architecture** (LeNet-5 as it is usually trained today): conv 5×5 → 6 channels, activation,
//! max-pool 2×2, conv 5×5 → 16 channels, activation, max-pool 2×2, flatten, fc 120, activation,
//! fc 84, activation, fc `classes`. The activation is ReLU unless [`LeNet::with_activation`]
//! picks tanh. Both convolutions and all linear layers have biases.
//!
//! **Image sizes**, per dimension (height and width separately), from the side `s`:
//!
//! | side | conv 1 padding | conv 2 padding | map after the second pool |
//! |------|----------------|----------------|---------------------------|
//! | `s ≥ 32` (CIFAR) | 0 | 0 | `⌊(⌊(s−4)/2⌋ − 4)/2⌋` (5 for 32) |
//! | `28 ≤ s < 32` (MNIST) | 2 | 0 | 5 |
//! | `4 ≤ s < 28` (e.g. the shipped 8×8 digits) | 2 | 2 | `⌊s/4⌋` (2 for 8) |
//!
//! The first two rows are the classic setups (32×32 CIFAR unpadded, 28×28 MNIST padded by 2);
//! smaller images are adapted with "same" padding on both convolutions. Sides below 4 are
//! rejected by [`LeNet::check`]. The first linear layer takes `16 · map_h · map_w` inputs (400
//! for MNIST and CIFAR).
//!
//! **Layout** of one row (`P` = [`LeNet::num_params`], no state): conv 1 weight
//! `[6, channels, 5, 5]` and bias `[6]`, conv 2 weight `[16, 6, 5, 5]` and bias `[16]` (PyTorch's
//! `[out, in, kh, kw]` order, row-major), then the three linear layers, each a weight
//! `[fan_in, fan_out]` (row-major, as [`crate::mlp`]) and a bias `[fan_out]`. The flattened
//! feature order into the first linear layer is PyTorch's `(channel, row, column)`.
//!
//! **Batching.** Inputs `[R, B, C·H·W]` are rearranged once to `[B, R·C, H, W]`: replica `r`'s
//! channels are the `r`-th block of `C` channels. Each convolution then runs as one grouped
//! convolution with `R` groups and weight `[R·Cout, Cin, k, k]` (the rows' weight blocks,
//! reshaped), so every replica convolves its own input with its own filters in one call; pooling
//! and activations act per channel and need no care; linear layers are batched matrix products
//! `[R, B, in] × [R, in, out]` as in the MLP. There is no loop over replicas. Measured on `flex`
//! (2 cores, forward and backward of one convolution with input and weight gradients, batch 32),
//! grouped convolution beat folding the replicas into the batch with per-replica weights (im2col
//! by slicing, then a batched matrix product) by 1.1–2.6× from 16 replicas on; at one replica
//! the two were within 20 %. On wgpu the opposite holds when training: burn-cubecl takes a
//! grouped convolution's weight gradient one group at a time (a kernel launch per replica), so
//! there, from [`IM2COL_MIN_REPLICAS`] replicas on, a convolution with several input channels
//! per replica runs as im2col and a batched matrix product (`Conv::im2col`).
//!
//! **Blocks.** The forward pass reads each layer's weight and bias as a slice of the rows. On an
//! autodiff device the backward pass of every slice of an `[R, P]` tensor writes a zeroed
//! `[R, P]` buffer, and these are summed: memory traffic of about `3·R·P` values per block. A
//! caller can avoid it with [`LeNet::forward_blocks`], which takes the rows already cut into
//! [`LeNet::blocks`] (one autodiff leaf each; the gradient of the rows is the concatenation of
//! the blocks' gradients).
//!
//! **FLOPs** ([`LeNet::forward_flops`]) count multiply-adds × 2 of the convolutions
//! (`2·Cin·Cout·k²·Hout·Wout`) and linear layers (`2·in·out`); biases, activations and pooling
//! are not counted. 28×28×1: 833,040 (0.83 MFLOPs); 32×32×3: 1,303,440.
//!
//! **Initialization**: PyTorch's default for `Conv2d` and `Linear`, every weight and bias
//! uniform in `±1/√fan_in` (`fan_in = Cin·k²` for a convolution), drawn on the host in layout
//! order.

use std::ops::Range;

use burn::tensor::module::{conv2d, max_pool2d};
use burn::tensor::ops::{ConvOptions, MaxPoolOptions, PadMode};
use burn::tensor::{Tensor, activation, s};
use rand::Rng;

use dasim_sim::engine::rng::Stream;

use crate::backend::is_flex;
use crate::data::ImageShape;
use crate::mlp::Activation;

/// A 2-D convolution in the flat layout: where its blocks sit in a row, and its geometry.
/// Shared by the convolutional models of this crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Conv {
    /// Offset of the weight block `[cout, cin, k, k]`.
    pub weight: usize,
    /// Offset of the bias block `[cout]`, if the convolution has a bias.
    pub bias: Option<usize>,
    /// Input channels per replica.
    pub cin: usize,
    /// Output channels per replica.
    pub cout: usize,
    /// Kernel side.
    pub k: usize,
    /// Stride (both dimensions).
    pub stride: usize,
    /// Zero padding `[rows, columns]`, on both sides.
    pub pad: [usize; 2],
}

impl Conv {
    /// Weights in the weight block.
    pub fn weight_len(&self) -> usize {
        self.cout * self.cin * self.k * self.k
    }

    /// Parameters of the convolution (weight and bias).
    pub fn len(&self) -> usize {
        self.weight_len() + self.bias.map_or(0, |_| self.cout)
    }

    /// `fan_in` of PyTorch's initializers: `cin · k²`.
    pub fn fan_in(&self) -> usize {
        self.cin * self.k * self.k
    }

    /// `fan_out` of PyTorch's initializers: `cout · k²`.
    pub fn fan_out(&self) -> usize {
        self.cout * self.k * self.k
    }

    /// Output map `[rows, columns]` for an input map (which must fit the kernel once padded).
    pub fn out_size(&self, [h, w]: [usize; 2]) -> [usize; 2] {
        [
            (h + 2 * self.pad[0] - self.k) / self.stride + 1,
            (w + 2 * self.pad[1] - self.k) / self.stride + 1,
        ]
    }

    /// FLOPs (multiply-adds × 2) for one sample with output map `out`.
    pub fn flops(&self, out: [usize; 2]) -> u64 {
        2 * (self.cin * self.cout * self.k * self.k * out[0] * out[1]) as u64
    }

    /// Floats of the column matrix of one sample with output map `out` when the convolution
    /// runs as im2col (several input channels per replica; see [`Conv::forward`]), else 0.
    pub fn im2col_floats(&self, out: [usize; 2]) -> usize {
        if self.cin > 1 {
            self.cin * self.k * self.k * out[0] * out[1]
        } else {
            0
        }
    }

    /// The blocks the forward pass reads: the weight, then the bias if any.
    pub fn blocks(&self) -> impl Iterator<Item = Range<usize>> {
        let weight = self.weight..self.weight + self.weight_len();
        std::iter::once(weight).chain(self.bias.map(|o| o..o + self.cout))
    }

    /// `[B, R·cin, H, W]` → `[B, R·cout, H', W']`, replica `r` (channel group `r`) with the
    /// filters of row `r`. One grouped convolution on `flex`, and elsewhere when the weights
    /// need no gradient, a replica has one input channel (burn-cubecl's depthwise path) or there
    /// are fewer than [`IM2COL_MIN_REPLICAS`] replicas; otherwise (training on wgpu) im2col and
    /// a batched matrix product (see [`Conv::im2col`]).
    pub fn forward(&self, params: &ParamRows, x: Tensor<4>) -> Tensor<4> {
        let r = params.replicas();
        let w = params.get(self.weight, self.weight_len());
        let b = self
            .bias
            .map(|o| params.get(o, self.cout).reshape([r * self.cout]));
        if self.cin > 1 && r >= IM2COL_MIN_REPLICAS && w.is_tracked() && !is_flex(&x.device()) {
            return self.im2col(r, w, b, x, IM2COL_FLOATS);
        }
        let w = w.reshape([r * self.cout, self.cin, self.k, self.k]);
        conv2d(
            x,
            w,
            b,
            ConvOptions::new([self.stride; 2], self.pad, [1, 1], r),
        )
    }

    /// The convolution as im2col and a batched matrix product, in chunks of replicas whose
    /// column matrices hold at most `max_floats` values (one replica at least): the `k²`
    /// shifted windows of every input channel are stacked into `[R, cin·k², B·H'·W']` and
    /// multiplied by the filters `[R, cout, cin·k²]`.
    ///
    /// burn-cubecl differentiates a grouped convolution with respect to its weight by one
    /// convolution per group (unless every group is one channel): a kernel launch per replica,
    /// measured at 0.4 ms per replica on an H200 for LeNet's second convolution at 1,024
    /// replicas. Here every operation is one launch per chunk. On `flex` the grouped
    /// convolution is faster, and keeps the golden outputs.
    fn im2col(
        &self,
        r: usize,
        w: Tensor<2>,
        b: Option<Tensor<1>>,
        x: Tensor<4>,
        max_floats: usize,
    ) -> Tensor<4> {
        let [batch, _, h, wd] = x.dims();
        let [ho, wo] = self.out_size([h, wd]);
        let (cin, cout, k, st) = (self.cin, self.cout, self.k, self.stride);
        let [ph, pw] = self.pad;
        let x = if ph + pw > 0 {
            x.pad([(ph, ph), (pw, pw)], PadMode::Constant(0.0))
        } else {
            x
        };
        let (hp, wp) = (h + 2 * ph, wd + 2 * pw);
        // `[B, R·cin, H, W]` → `[R, cin, B, H, W]`, so that the windows stack into columns
        // with no further copy.
        let x = x.reshape([batch, r, cin, hp, wp]).permute([1, 2, 0, 3, 4]);
        let per_replica = cin * k * k * batch * ho * wo;
        let chunk = (max_floats / per_replica).clamp(1, r);
        let mut outs = Vec::with_capacity(r.div_ceil(chunk));
        for lo in (0..r).step_by(chunk) {
            let n = chunk.min(r - lo);
            let xc = x.clone().slice_dim(0, lo..lo + n);
            let windows: Vec<Tensor<6>> = (0..k * k)
                .map(|t| {
                    let (i, j) = (t / k, t % k);
                    let (ie, je) = (i + (ho - 1) * st + 1, j + (wo - 1) * st + 1);
                    xc.clone()
                        .slice(s![.., .., .., i..ie;st, j..je;st])
                        .unsqueeze_dim::<6>(2)
                })
                .collect();
            // `[n, cin, k², B, H', W']`: row `(c, i, j)` of the columns is the filters' order.
            let cols = Tensor::cat(windows, 2).reshape([n, cin * k * k, batch * ho * wo]);
            let wc = w
                .clone()
                .slice_dim(0, lo..lo + n)
                .reshape([n, cout, cin * k * k]);
            outs.push(wc.matmul(cols));
        }
        let y = if outs.len() == 1 {
            outs.pop().expect("one chunk")
        } else {
            Tensor::cat(outs, 0)
        };
        // `[R, cout, B·H'·W']` → `[B, R·cout, H', W']`.
        let y = y
            .reshape([r, cout, batch, ho, wo])
            .permute([2, 0, 1, 3, 4])
            .reshape([batch, r * cout, ho, wo]);
        match b {
            Some(b) => y + b.reshape([1, r * cout, 1, 1]),
            None => y,
        }
    }
}

/// Replicas from which `Conv::forward` takes im2col when differentiating off `flex`. Measured
/// on an H200 (wgpu, batch 32, forward and backward): below 8 replicas the grouped convolution
/// is as fast or faster (ResNet-20 at 2 replicas: 116 ms against 180 ms); from 16 on im2col wins (LeNet-5:
/// 9 ms against 13 ms at 16, 117 ms against 540 ms at 1,024; ResNet-20: 30–39 against 42 ms per
/// replica).
pub const IM2COL_MIN_REPLICAS: usize = 8;

/// Values in one chunk's column matrix of `Conv::im2col` at most (1 GiB of `f32`): within
/// wgpu's buffer limits, with room for the backward pass's copies.
const IM2COL_FLOATS: usize = 1 << 28;

/// A linear layer in the flat layout: weight `[fan_in, fan_out]` (row-major) at `weight`, bias
/// `[fan_out]` right after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Linear {
    /// Offset of the weight block.
    pub weight: usize,
    /// Inputs.
    pub fan_in: usize,
    /// Outputs.
    pub fan_out: usize,
}

impl Linear {
    /// Parameters of the layer (weight and bias).
    pub fn len(&self) -> usize {
        self.fan_in * self.fan_out + self.fan_out
    }

    /// FLOPs (multiply-adds × 2) for one sample.
    pub fn flops(&self) -> u64 {
        2 * (self.fan_in * self.fan_out) as u64
    }

    /// The blocks the forward pass reads: the weight, then the bias.
    pub fn blocks(&self) -> [Range<usize>; 2] {
        let bias = self.weight + self.fan_in * self.fan_out;
        [self.weight..bias, bias..bias + self.fan_out]
    }

    /// `[R, B, fan_in]` → `[R, B, fan_out]`, a batched matrix product.
    pub fn forward(&self, params: &ParamRows, x: Tensor<3>) -> Tensor<3> {
        let r = params.replicas();
        let [w, b] = self.blocks();
        let w = params
            .get(w.start, w.len())
            .reshape([r, self.fan_in, self.fan_out]);
        let b = params.get(b.start, b.len()).reshape([r, 1, self.fan_out]);
        x.matmul(w) + b
    }

    /// PyTorch's default initialization: weight and bias uniform in `±1/√fan_in`.
    pub fn init(&self, rng: &mut Stream, p: &mut [f32]) {
        uniform(
            rng,
            &mut p[self.weight..self.weight + self.len()],
            self.fan_in,
        );
    }
}

/// The parameters a forward pass reads: the stacked rows `[R, P]`, or the same rows already cut
/// into the model's blocks, each `[R, len]` with the offset where it starts in a row.
pub(crate) enum ParamRows {
    /// All rows, `[R, P]`: blocks are slices of it.
    Whole(Box<Tensor<2>>),
    /// The blocks, sorted by offset.
    Blocks(Vec<(usize, Tensor<2>)>),
}

impl ParamRows {
    /// `blocks[i]` holding the columns `ranges[i]` of every row.
    ///
    /// # Panics
    /// If the numbers or widths of `blocks` and `ranges` differ.
    pub fn from_blocks(ranges: Vec<Range<usize>>, blocks: Vec<Tensor<2>>) -> Self {
        assert_eq!(ranges.len(), blocks.len(), "one tensor per parameter block");
        let blocks = ranges
            .into_iter()
            .zip(blocks)
            .map(|(range, t)| {
                assert_eq!(
                    t.dims()[1],
                    range.len(),
                    "the block at {} has the wrong width",
                    range.start
                );
                (range.start, t)
            })
            .collect();
        ParamRows::Blocks(blocks)
    }

    /// Number of replicas `R`.
    pub fn replicas(&self) -> usize {
        match self {
            ParamRows::Whole(p) => p.dims()[0],
            ParamRows::Blocks(b) => b[0].1.dims()[0],
        }
    }

    /// Columns `offset..offset + len` of every row, `[R, len]`. With blocks, this must be
    /// exactly one block.
    pub fn get(&self, offset: usize, len: usize) -> Tensor<2> {
        match self {
            ParamRows::Whole(p) => p.clone().slice_dim(1, offset..offset + len),
            ParamRows::Blocks(b) => {
                let i = b
                    .binary_search_by_key(&offset, |(o, _)| *o)
                    .unwrap_or_else(|_| panic!("no parameter block starts at {offset}"));
                debug_assert_eq!(b[i].1.dims()[1], len);
                b[i].1.clone()
            }
        }
    }
}

/// Fills `values` uniformly in `±1/√fan_in` (PyTorch's default for `Linear` and `Conv2d`).
pub(crate) fn uniform(rng: &mut Stream, values: &mut [f32], fan_in: usize) {
    let bound = 1.0 / (fan_in as f32).sqrt();
    for v in values {
        *v = rng.random_range(-bound..bound);
    }
}

/// Flat images `[R, B, C·H·W]` → grouped maps `[B, R·C, H, W]`.
pub(crate) fn to_groups(x: Tensor<3>, shape: ImageShape) -> Tensor<4> {
    let [r, b, _] = x.dims();
    x.swap_dims(0, 1)
        .reshape([b, r * shape.channels, shape.height, shape.width])
}

/// Grouped maps `[B, R·C, H, W]` → per-replica features `[R, B, C·H·W]`, `(c, y, x)` order.
pub(crate) fn from_groups(x: Tensor<4>, r: usize) -> Tensor<3> {
    let [b, rc, h, w] = x.dims();
    x.reshape([b, r, rc / r * h * w]).swap_dims(0, 1)
}

fn activate<const D: usize>(activation: Activation, x: Tensor<D>) -> Tensor<D> {
    match activation {
        Activation::Relu => activation::relu(x),
        Activation::Tanh => activation::tanh(x),
    }
}

/// Padding of the two convolutions for an image side (see the module doc).
fn paddings(side: usize) -> [usize; 2] {
    match side {
        32.. => [0, 0],
        28.. => [2, 0],
        _ => [2, 2],
    }
}

/// LeNet-5 over the flat layout (see the module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct LeNet {
    shape: ImageShape,
    classes: usize,
    activation: Activation,
    conv1: Conv,
    conv2: Conv,
    /// Output maps of the two convolutions.
    maps: [[usize; 2]; 2],
    fc: [Linear; 3],
    params: usize,
}

impl LeNet {
    /// Checks that LeNet-5 can take images of `shape`: at least one channel and sides of at
    /// least 4 (see the module doc for how sizes are adapted).
    pub fn check(shape: ImageShape) -> Result<(), String> {
        if shape.channels == 0 {
            return Err("the images have no channel".into());
        }
        if shape.height < 4 || shape.width < 4 {
            return Err(format!(
                "LeNet-5 needs images of at least 4×4 pixels, got {}×{}",
                shape.height, shape.width
            ));
        }
        Ok(())
    }

    /// LeNet-5 for images of `shape` and `classes` classes, with ReLU activations.
    ///
    /// # Panics
    /// If [`LeNet::check`] rejects `shape`, or `classes` is 0.
    pub fn new(shape: ImageShape, classes: usize) -> Self {
        if let Err(e) = Self::check(shape) {
            panic!("{e}");
        }
        assert!(classes > 0, "LeNet-5 needs at least one class");
        let [ph1, ph2] = paddings(shape.height);
        let [pw1, pw2] = paddings(shape.width);
        let conv1 = Conv {
            weight: 0,
            bias: Some(6 * shape.channels * 25),
            cin: shape.channels,
            cout: 6,
            k: 5,
            stride: 1,
            pad: [ph1, pw1],
        };
        let o2 = conv1.len();
        let conv2 = Conv {
            weight: o2,
            bias: Some(o2 + 16 * 6 * 25),
            cin: 6,
            cout: 16,
            k: 5,
            stride: 1,
            pad: [ph2, pw2],
        };
        let m1 = conv1.out_size([shape.height, shape.width]);
        let m2 = conv2.out_size([m1[0] / 2, m1[1] / 2]);
        let flat = 16 * (m2[0] / 2) * (m2[1] / 2);
        let mut offset = o2 + conv2.len();
        let fc = [(flat, 120), (120, 84), (84, classes)].map(|(fan_in, fan_out)| {
            let l = Linear {
                weight: offset,
                fan_in,
                fan_out,
            };
            offset += l.len();
            l
        });
        LeNet {
            shape,
            classes,
            activation: Activation::Relu,
            conv1,
            conv2,
            maps: [m1, m2],
            fc,
            params: offset,
        }
    }

    /// The same network with another activation (ReLU or tanh).
    pub fn with_activation(mut self, activation: Activation) -> Self {
        self.activation = activation;
        self
    }

    /// The input image shape.
    pub fn shape(&self) -> ImageShape {
        self.shape
    }

    /// Number of classes (outputs).
    pub fn classes(&self) -> usize {
        self.classes
    }

    /// Parameters per replica (all trainable; there is no state).
    pub fn num_params(&self) -> usize {
        self.params
    }

    /// Length of the non-trainable state suffix of a row: 0.
    pub fn state_len(&self) -> usize {
        0
    }

    /// Multiply-adds × 2 of one forward pass for one sample (see the module doc).
    pub fn forward_flops(&self) -> u64 {
        self.conv1.flops(self.maps[0])
            + self.conv2.flops(self.maps[1])
            + self.fc.iter().map(Linear::flops).sum::<u64>()
    }

    /// Where each layer starts in a row and its forward FLOPs for one sample, in forward order.
    pub fn layer_starts(&self) -> Vec<(usize, u64)> {
        let mut l = vec![
            (self.conv1.weight, self.conv1.flops(self.maps[0])),
            (self.conv2.weight, self.conv2.flops(self.maps[1])),
        ];
        l.extend(self.fc.iter().map(|f| (f.weight, f.flops())));
        l
    }

    /// Floats of activation one sample keeps through a training pass: the image, each
    /// convolution's output, its activation and its pooled map, and the dense layers' outputs
    /// before and after activation (for the memory estimate).
    pub fn activations_per_sample(&self) -> u64 {
        let image = self.shape.channels * self.shape.height * self.shape.width;
        let map = |c: &Conv, [h, w]: [usize; 2]| c.cout * h * w;
        let convs = map(&self.conv1, self.maps[0]) + map(&self.conv2, self.maps[1]);
        let dense: usize = self.fc.iter().map(|l| 2 * l.fan_out).sum();
        (image + 2 * convs + convs / 4 + dense) as u64
    }

    /// Floats per sample of the column matrices that im2col keeps for the backward pass, where
    /// a gradient pass takes it ([`IM2COL_MIN_REPLICAS`]; off `flex`).
    pub fn im2col_floats_per_sample(&self) -> u64 {
        (self.conv1.im2col_floats(self.maps[0]) + self.conv2.im2col_floats(self.maps[1])) as u64
    }

    /// FLOPs of one training sample: the forward pass and a backward pass of about twice its
    /// cost (the usual 3× rule).
    pub fn train_flops_per_sample(&self) -> f64 {
        3.0 * self.forward_flops() as f64
    }

    /// Initial parameters (PyTorch's defaults, see the module doc), drawn in layout order.
    pub fn init(&self, rng: &mut Stream) -> Vec<f32> {
        let mut p = vec![0.0f32; self.params];
        for c in [self.conv1, self.conv2] {
            uniform(rng, &mut p[c.weight..c.weight + c.len()], c.fan_in());
        }
        for l in &self.fc {
            l.init(rng, &mut p);
        }
        p
    }

    /// Logits `[R, B, classes]` of `R` models `[R, P]` on images `[R, B, C·H·W]` (CHW per
    /// sample), replica `r` on its own minibatch `x[r]`. LeNet has no state and the same
    /// forward pass in training and evaluation, so `train` is ignored and the state is `None`.
    pub fn forward(
        &self,
        params: Tensor<2>,
        x: Tensor<3>,
        train: bool,
    ) -> (Tensor<3>, Option<Tensor<2>>) {
        let _ = train;
        (self.logits(&ParamRows::Whole(Box::new(params)), x), None)
    }

    /// The contiguous blocks of a row that the forward pass reads separately (each layer's
    /// weight and bias), in layout order; together they cover `0..P`.
    pub fn blocks(&self) -> Vec<Range<usize>> {
        let mut b: Vec<Range<usize>> = self.conv1.blocks().chain(self.conv2.blocks()).collect();
        b.extend(self.fc.iter().flat_map(Linear::blocks));
        b
    }

    /// [`LeNet::forward`] on rows given as their blocks: `blocks[i]` is `[R, len]`, the columns
    /// `self.blocks()[i]` of every row. Gradients taken with respect to the blocks and
    /// concatenated are the gradient of the rows, without the cost of slicing an `[R, P]`
    /// autodiff tensor (the backward pass of every slice writes an `[R, P]` buffer).
    ///
    /// # Panics
    /// If the blocks do not match [`LeNet::blocks`] in number and widths.
    pub fn forward_blocks(
        &self,
        blocks: Vec<Tensor<2>>,
        x: Tensor<3>,
        train: bool,
    ) -> (Tensor<3>, Option<Tensor<2>>) {
        let _ = train;
        let rows = ParamRows::from_blocks(self.blocks(), blocks);
        (self.logits(&rows, x), None)
    }

    fn logits(&self, params: &ParamRows, x: Tensor<3>) -> Tensor<3> {
        let r = params.replicas();
        let pool = || MaxPoolOptions::new([2, 2]);
        let act = self.activation;
        let h = to_groups(x, self.shape);
        let h = max_pool2d(activate(act, self.conv1.forward(params, h)), pool());
        let h = max_pool2d(activate(act, self.conv2.forward(params, h)), pool());
        let h = from_groups(h, r);
        let h = activate(act, self.fc[0].forward(params, h));
        let h = activate(act, self.fc[1].forward(params, h));
        self.fc[2].forward(params, h)
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Tensor, TensorData};

    use super::*;

    /// Deterministic values in `[-0.5, 0.5)`.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect()
    }

    /// The output and the gradients (input, weight, bias) of `conv` on `r` replicas, through the
    /// grouped convolution (`max_floats = None`) or im2col in chunks of at most `max_floats`.
    fn run(conv: Conv, r: usize, side: usize, max_floats: Option<usize>) -> [Vec<f32>; 4] {
        let device = Device::flex().autodiff();
        assert!(
            is_flex(&device),
            "forward takes the grouped convolution on flex"
        );
        let batch = 3;
        let p = conv.len();
        let rows = Tensor::<2>::from_data(TensorData::new(values(r * p, 1), [r, p]), &device)
            .require_grad();
        let x = Tensor::<4>::from_data(
            TensorData::new(
                values(batch * r * conv.cin * side * side, 2),
                [batch, r * conv.cin, side, side],
            ),
            &device,
        )
        .require_grad();
        let params = ParamRows::Whole(Box::new(rows.clone()));
        let y = match max_floats {
            None => conv.forward(&params, x.clone()),
            Some(m) => {
                let w = params.get(conv.weight, conv.weight_len());
                let b = params
                    .get(conv.bias.unwrap(), conv.cout)
                    .reshape([r * conv.cout]);
                conv.im2col(r, w, Some(b), x.clone(), m)
            }
        };
        let [_, _, ho, wo] = y.dims();
        let seen = Tensor::<4>::from_data(
            TensorData::new(
                values(y.shape().num_elements(), 3),
                [batch, r * conv.cout, ho, wo],
            ),
            &device,
        );
        let grads = (y.clone() * seen).sum().backward();
        let read = |t: Tensor<2>| t.into_data().try_to_vec::<f32>().unwrap();
        let gx = x.grad(&grads).unwrap();
        let gx = gx.reshape([batch, r * conv.cin * side * side]);
        let g = rows.grad(&grads).unwrap();
        let wl = conv.weight_len();
        [
            read(y.inner().reshape([batch, r * conv.cout * ho * wo])),
            read(gx),
            read(g.clone().slice_dim(1, 0..wl)),
            read(g.slice_dim(1, wl..wl + conv.cout)),
        ]
    }

    /// im2col (the wgpu path) computes what the grouped convolution (the flex path) computes,
    /// forward and backward, with padding, strides and several chunks.
    #[test]
    fn im2col_agrees_with_the_grouped_convolution() {
        for (stride, pad, side) in [(1, [0, 0], 7), (1, [2, 2], 6), (2, [1, 1], 8)] {
            let conv = Conv {
                weight: 0,
                bias: Some(3 * 2 * 3 * 3),
                cin: 2,
                cout: 3,
                k: 3,
                stride,
                pad,
            };
            let r = 5;
            let grouped = run(conv, r, side, None);
            // One replica per chunk, two, and all five in one.
            let per_replica = 2 * 9 * 3 * conv.out_size([side, side]).iter().product::<usize>();
            for chunk in [1, 2, 5] {
                let im2col = run(conv, r, side, Some(chunk * per_replica));
                for (what, (a, b)) in [
                    "output",
                    "input gradient",
                    "weight gradient",
                    "bias gradient",
                ]
                .iter()
                .zip(grouped.iter().zip(&im2col))
                {
                    assert_eq!(a.len(), b.len(), "{what}");
                    let diff = a
                        .iter()
                        .zip(b)
                        .map(|(a, b)| (a - b).abs())
                        .fold(0.0, f32::max);
                    assert!(
                        diff < 1e-5,
                        "{what}: stride {stride}, pad {pad:?}, {chunk} per chunk: {diff}"
                    );
                }
            }
        }
    }
}
