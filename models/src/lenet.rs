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
use std::sync::Arc;

use burn::tensor::Tensor;
use burn::tensor::module::max_pool2d;
use burn::tensor::ops::MaxPoolOptions;
use serde::{Deserialize, Serialize};

use dasim_sim::ConfigError;
use dasim_sim::clock::rng::Stream;

use crate::convex::Objective;
use crate::data::{Dataset, ImageShape};
use crate::layers::CpuNet;
use crate::layers::conv::Conv;
use crate::layers::linear::Linear;
use crate::layers::{ParamRows, activate, from_groups, to_groups, uniform};
use crate::mlp::Activation;
use crate::spec::{Load, Model, ModelSpec, NeuralNet};

pub use crate::layers::conv::IM2COL_MIN_REPLICAS;

pub(crate) mod cpu;

/// `[model] kind = "lenet"`: LeNet-5 (LeCun et al. 1998), without options. Needs images.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LenetConfig {}

impl ModelSpec for LenetConfig {
    fn build(
        &self,
        load: &Load<'_>,
        train: &Dataset,
    ) -> crate::Result<(Model, Option<Arc<Objective>>)> {
        let shape = load.image_shape(train)?;
        let size = format!("{}×{}×{}", shape.channels, shape.height, shape.width);
        LeNet::check(shape).map_err(|e| {
            ConfigError::new("data.dataset", format!("{e} (the images are {size})"))
                .hint("LeNet-5 takes any image of at least 4×4 pixels")
        })?;
        Ok((Model::net(LeNet::new(shape, train.outputs())), None))
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

    /// FLOPs of one training sample: the forward pass and a backward pass of about twice its
    /// cost (the usual 3× rule).
    pub fn train_flops_per_sample(&self) -> f64 {
        3.0 * self.forward_flops() as f64
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

impl NeuralNet for LeNet {
    fn name(&self) -> &'static str {
        "lenet"
    }

    /// Parameters per replica (all trainable; there is no state).
    fn num_params(&self) -> usize {
        self.params
    }

    /// Length of the non-trainable state suffix of a row: 0.
    fn state_len(&self) -> usize {
        0
    }

    /// The weight matrices, in row order: the convolutions `cout × (cin·k²)`, the dense layers.
    fn matrices(&self) -> Vec<dasim_sim::store::Matrix> {
        let mut m = vec![self.conv1.matrix(), self.conv2.matrix()];
        m.extend(self.fc.iter().map(|f| f.matrix()));
        m
    }

    /// Both convolutions and every dense layer but the last (the output layer).
    fn hidden_matrices(&self) -> Vec<dasim_sim::store::Hidden> {
        use dasim_sim::store::Hidden;
        let mut h = vec![
            Hidden::conv(self.conv1.matrix()),
            Hidden::conv(self.conv2.matrix()),
        ];
        let hidden = self.fc.len().saturating_sub(1);
        h.extend(self.fc[..hidden].iter().map(|f| Hidden::dense(f.matrix())));
        h
    }

    /// Each convolution's weight and bias, then each dense layer's.
    fn tensors(&self) -> Vec<std::ops::Range<usize>> {
        let mut t: Vec<_> = self.conv1.blocks().chain(self.conv2.blocks()).collect();
        t.extend(self.fc.iter().flat_map(Linear::blocks));
        t
    }

    /// Multiply-adds × 2 of one forward pass for one sample (see the module doc).
    fn forward_flops(&self) -> u64 {
        self.conv1.flops(self.maps[0])
            + self.conv2.flops(self.maps[1])
            + self.fc.iter().map(Linear::flops).sum::<u64>()
    }

    /// Where each layer starts in a row and its forward FLOPs for one sample, in forward order.
    fn layer_starts(&self) -> Vec<(usize, u64)> {
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
    fn activations_per_sample(&self) -> u64 {
        let image = self.shape.channels * self.shape.height * self.shape.width;
        let map = |c: &Conv, [h, w]: [usize; 2]| c.cout * h * w;
        let convs = map(&self.conv1, self.maps[0]) + map(&self.conv2, self.maps[1]);
        let dense: usize = self.fc.iter().map(|l| 2 * l.fan_out).sum();
        (image + 2 * convs + convs / 4 + dense) as u64
    }

    /// Floats per sample of the column matrices that im2col keeps for the backward pass, where
    /// a gradient pass takes it ([`IM2COL_MIN_REPLICAS`]; off `flex`).
    fn im2col_floats_per_sample(&self) -> u64 {
        (self.conv1.im2col_floats(self.maps[0]) + self.conv2.im2col_floats(self.maps[1])) as u64
    }

    /// Initial parameters (PyTorch's defaults, see the module doc), drawn in layout order.
    fn init(&self, rng: &mut Stream) -> Vec<f32> {
        let mut p = vec![0.0f32; self.params];
        for c in [self.conv1, self.conv2] {
            uniform(rng, &mut p[c.weight..c.weight + c.len()], c.fan_in());
        }
        for l in &self.fc {
            l.init(rng, &mut p);
        }
        p
    }

    /// The contiguous blocks of a row that the forward pass reads separately (each layer's
    /// weight and bias), in layout order; together they cover `0..P`.
    fn blocks(&self) -> Vec<Range<usize>> {
        let mut b: Vec<Range<usize>> = self.conv1.blocks().chain(self.conv2.blocks()).collect();
        b.extend(self.fc.iter().flat_map(Linear::blocks));
        b
    }

    fn cpu_program(&self) -> Option<Arc<dyn CpuNet>> {
        Some(Arc::new(cpu::LeNetCpu::new(self)))
    }

    /// [`LeNet::forward`] on rows given as their blocks: `blocks[i]` is `[R, len]`, the columns
    /// `self.blocks()[i]` of every row. Gradients taken with respect to the blocks and
    /// concatenated are the gradient of the rows, without the cost of slicing an `[R, P]`
    /// autodiff tensor (the backward pass of every slice writes an `[R, P]` buffer).
    ///
    /// # Panics
    /// If the blocks do not match [`LeNet::blocks`] in number and widths.
    fn forward_blocks(
        &self,
        blocks: Vec<Tensor<2>>,
        x: Tensor<3>,
        train: bool,
    ) -> (Tensor<3>, Option<Tensor<2>>) {
        let _ = train;
        let rows = ParamRows::from_blocks(self.blocks(), blocks);
        (self.logits(&rows, x), None)
    }

    /// Logits `[R, B, classes]` of `R` models `[R, P]` on images `[R, B, C·H·W]` (CHW per
    /// sample), replica `r` on its own minibatch `x[r]`. LeNet has no state and the same
    /// forward pass in training and evaluation, so `train` is ignored and the state is `None`.
    fn forward(
        &self,
        params: Tensor<2>,
        x: Tensor<3>,
        train: bool,
    ) -> (Tensor<3>, Option<Tensor<2>>) {
        let _ = train;
        (self.logits(&ParamRows::Whole(Box::new(params)), x), None)
    }
}
