//! The CIFAR ResNet family (He et al. 2016, §4.2) on the flat parameter layout, batched across
//! replicas by grouped convolution, with per-replica batch normalization.
//!
//! **Architecture** for depth `6n + 2` and width `w` (ResNet-20: `n = 3`, `w = 16`): a 3×3
//! convolution to `w` channels, batch norm, ReLU; three stages of `n` basic blocks with `w`, `2w`
//! and `4w` channels, the first block of stages 2 and 3 with stride 2; global average pooling;
//! a linear layer to `classes`. A basic block is conv 3×3, BN, ReLU, conv 3×3, BN, plus the
//! shortcut, ReLU. Convolutions have no bias (BN follows), padding 1. Shortcuts are the paper's
//! option A, parameter free: the identity, or where a block changes the shape, the input
//! subsampled at stride 2 with the new channels zero (identity channels first, as in
//! `fb.resnet.torch`'s type-A shortcut).
//!
//! **Batch norm per replica.** Every replica normalizes with its own statistics. In training
//! mode ([`ResNet::forward`] with `train = true`) a channel is normalized with the mean and
//! biased variance of that replica's own minibatch (over batch, rows and columns; ε = 1e-5, as
//! PyTorch) and the running statistics are updated as PyTorch does, with momentum 0.1:
//! `running_mean ← 0.9·running_mean + 0.1·mean`, `running_var ← 0.9·running_var +
//! 0.1·var·m/(m−1)` (the unbiased variance, `m = B·H·W` values per channel; with `m = 1` the
//! biased one). The updated statistics are returned, not written: the caller stores them back
//! into the state suffix of the rows. In evaluation mode the running statistics of the row
//! normalize, so a sample's output does not depend on the rest of its batch.
//!
//! **Layout** of one row (`P` = [`ResNet::num_params`]): first every trainable parameter, in
//! network order — the stem convolution weight `[w, channels, 3, 3]`, its BN weight `[w]` and
//! bias `[w]`; then for each block in order, conv 1 weight `[cout, cin, 3, 3]`, BN 1 weight and
//! bias, conv 2 weight `[cout, cout, 3, 3]`, BN 2 weight and bias; then the linear layer, weight
//! `[4w, classes]` (row-major, `[fan_in, fan_out]` as [`crate::mlp`]) and bias `[classes]`. Then
//! the state, the last [`ResNet::state_len`] coordinates: for each BN layer in the same order,
//! its running mean `[C]` then its running variance `[C]`. Convolution weights are in PyTorch's
//! `[out, in, kh, kw]` order. The state gets no gradient in training mode (the logits do not
//! depend on it); averaging rows averages it with the weights (a choice of dasim: the SGP
//! reference gossips only the parameters, see the book's "Batch-norm state").
//!
//! **Batching** as in [`crate::lenet`]: maps are `[B, R·C, H, W]`, replica `r` owning the `r`-th
//! block of `C` channels; convolutions are grouped with one group per replica (measured faster
//! than folding replicas into the batch on `flex`, see [`crate::lenet`]); batch norm over
//! `[B, R·C, H, W]` with `R·C` channels is exactly per-replica, per-channel normalization; the
//! shortcut and pooling act per channel; the linear layer is a batched matrix product.
//! [`ResNet::forward_blocks`] takes the rows already cut into their blocks, for a caller that
//! wants per-block autodiff leaves (see [`crate::lenet`]).
//!
//! **FLOPs** ([`ResNet::forward_flops`]) count multiply-adds × 2 of the convolutions
//! (`2·Cin·Cout·k²·Hout·Wout`) and the linear layer (`2·in·out`); batch norm, ReLU, the
//! shortcuts and pooling are not counted. ResNet-20 on 32×32×3 with 10 classes: 40,551,040
//! multiply-adds (81.1 MFLOPs; the usual "41 M FLOPs" for ResNet-20 counts multiply-adds) and
//! 269,722 trainable parameters (the paper's 0.27 M), plus 1,376 state coordinates.
//!
//! **Initialization**, as torchvision's ResNet: convolutions Kaiming-normal with mode `fan_out`
//! (`std = √(2 / (cout·k²))`); BN weight 1, bias 0, running mean 0, running variance 1; the
//! linear layer PyTorch's default (uniform in `±1/√fan_in`, weight and bias). Drawn on the host
//! in layout order.

use std::ops::Range;
use std::sync::Arc;

use burn::tensor::ops::PadMode;
use burn::tensor::{Tensor, activation, s};
use rand::Rng;
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};

use dasim_sim::ConfigError;
use dasim_sim::clock::rng::Stream;

use crate::convex::Objective;
use crate::data::{Dataset, ImageShape};
use crate::layers::CpuNet;
use crate::layers::conv::Conv;
use crate::layers::linear::Linear;
use crate::layers::norm::Norm;
use crate::layers::{ParamRows, from_groups, to_groups};
use crate::spec::{Load, Model, ModelSpec, NeuralNet};

pub(crate) mod cpu;

fn default_depth() -> usize {
    20
}

fn default_width() -> usize {
    16
}

/// `[model] kind = "resnet"`: a CIFAR ResNet (He et al. 2016, §4.2) with batch normalization.
/// Needs images.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResnetConfig {
    /// Layers with weights: `6n + 2` (20, 32, 44, 56, 110).
    #[serde(default = "default_depth")]
    pub depth: usize,
    /// Channels of the first stage (16 in the paper); the stages have `w`, `2w`, `4w`.
    #[serde(default = "default_width")]
    pub width: usize,
}

impl Default for ResnetConfig {
    fn default() -> Self {
        ResnetConfig {
            depth: default_depth(),
            width: default_width(),
        }
    }
}

impl ModelSpec for ResnetConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let (depth, width) = (self.depth, self.width);
        if depth < 8 || !(depth - 2).is_multiple_of(6) {
            return Err(ConfigError::new(
                "model.depth",
                format!("a CIFAR ResNet has depth 6n + 2 with n ≥ 1, got {depth}"),
            )
            .hint("20, 32, 44, 56 or 110 (ResNet-20 … ResNet-110); 8 and 14 are the smallest"));
        }
        if width == 0 {
            return Err(ConfigError::new(
                "model.width",
                "width must be at least 1 (16 in the paper)",
            ));
        }
        Ok(())
    }

    fn build(
        &self,
        load: &Load<'_>,
        train: &Dataset,
    ) -> crate::Result<(Model, Option<Arc<Objective>>)> {
        let shape = load.image_shape(train)?;
        ResNet::check(shape, self.depth, self.width).map_err(|(arg, e)| {
            let field = match arg {
                "depth" => "model.depth",
                "width" => "model.width",
                _ => "data.dataset",
            };
            ConfigError::new(field, e)
        })?;
        let net = ResNet::new(shape, train.outputs(), self.depth, self.width);
        Ok((Model::net(net), None))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Block {
    conv1: Conv,
    bn1: Norm,
    conv2: Conv,
    bn2: Norm,
    /// Output map of the block.
    map: [usize; 2],
}

/// A CIFAR ResNet over the flat layout (see the module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct ResNet {
    shape: ImageShape,
    classes: usize,
    depth: usize,
    width: usize,
    stem: Conv,
    stem_bn: Norm,
    blocks: Vec<Block>,
    fc: Linear,
    trainable: usize,
    params: usize,
}

impl ResNet {
    /// Checks the arguments of [`ResNet::new`]. On error, the first element names the offending
    /// argument (`"depth"`, `"width"` or `"shape"`) and the second says what is wrong.
    pub fn check(
        shape: ImageShape,
        depth: usize,
        width: usize,
    ) -> Result<(), (&'static str, String)> {
        if depth < 8 || !(depth - 2).is_multiple_of(6) {
            return Err((
                "depth",
                format!(
                    "a CIFAR ResNet has depth 6n + 2 with n ≥ 1 (8, 14, 20, 32, 44, 56, 110, …), got {depth}"
                ),
            ));
        }
        if width == 0 {
            return Err(("width", "the width must be at least 1".into()));
        }
        if shape.is_empty() {
            return Err((
                "shape",
                format!(
                    "the images are empty ({}×{}×{})",
                    shape.channels, shape.height, shape.width
                ),
            ));
        }
        Ok(())
    }

    /// ResNet-`depth` of base width `width` (16 in the paper) for images of `shape` and
    /// `classes` classes.
    ///
    /// # Panics
    /// If [`ResNet::check`] rejects the arguments, or `classes` is 0.
    pub fn new(shape: ImageShape, classes: usize, depth: usize, width: usize) -> Self {
        if let Err((_, e)) = Self::check(shape, depth, width) {
            panic!("{e}");
        }
        assert!(classes > 0, "a ResNet needs at least one class");
        let mut offset = 0;
        let stem = conv3x3(&mut offset, shape.channels, width, 1);
        let mut stem_bn = norm(&mut offset, width);
        let mut blocks = Vec::new();
        let mut map = [shape.height, shape.width];
        let mut cin = width;
        for stage in 0..3 {
            let cout = width << stage;
            for j in 0..(depth - 2) / 6 {
                let stride = if stage > 0 && j == 0 { 2 } else { 1 };
                let conv1 = conv3x3(&mut offset, cin, cout, stride);
                let bn1 = norm(&mut offset, cout);
                let conv2 = conv3x3(&mut offset, cout, cout, 1);
                let bn2 = norm(&mut offset, cout);
                map = conv1.out_size(map);
                blocks.push(Block {
                    conv1,
                    bn1,
                    conv2,
                    bn2,
                    map,
                });
                cin = cout;
            }
        }
        let fc = Linear {
            weight: offset,
            fan_in: 4 * width,
            fan_out: classes,
        };
        let trainable = offset + fc.len();
        // The running statistics follow, in BN order.
        let mut stats = trainable;
        let mut place = |n: &mut Norm| {
            n.stats = stats;
            stats += 2 * n.channels;
        };
        place(&mut stem_bn);
        for b in &mut blocks {
            place(&mut b.bn1);
            place(&mut b.bn2);
        }
        ResNet {
            shape,
            classes,
            depth,
            width,
            stem,
            stem_bn,
            blocks,
            fc,
            trainable,
            params: stats,
        }
    }

    /// The input image shape.
    pub fn shape(&self) -> ImageShape {
        self.shape
    }

    /// Number of classes (outputs).
    pub fn classes(&self) -> usize {
        self.classes
    }

    /// Depth `6n + 2` (counting the convolutions and the linear layer).
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Base width `w` (channels of the first stage).
    pub fn width(&self) -> usize {
        self.width
    }

    /// FLOPs of one training sample: the forward pass and a backward pass of about twice its
    /// cost (the usual 3× rule).
    pub fn train_flops_per_sample(&self) -> f64 {
        3.0 * self.forward_flops() as f64
    }

    fn run(&self, params: &ParamRows, x: Tensor<3>, train: bool) -> (Tensor<3>, Option<Tensor<2>>) {
        let r = params.replicas();
        // In training mode, the updated statistics of every batch-norm layer in order.
        let mut state = train.then(Vec::new);
        let h = to_groups(x, self.shape);
        let h = self.stem.forward(params, h);
        let mut h = activation::relu(self.stem_bn.forward(params, h, state.as_mut()));
        for b in &self.blocks {
            h = Self::block(params, b, h, state.as_mut());
        }
        let [batch, rc, mh, mw] = h.dims();
        let pooled = h
            .reshape([batch, rc, mh * mw])
            .mean_dim(2)
            .reshape([batch, rc, 1, 1]);
        let logits = self.fc.forward(params, from_groups(pooled, r));
        (logits, state.map(|s| Tensor::cat(s, 1)))
    }

    fn block(
        params: &ParamRows,
        b: &Block,
        x: Tensor<4>,
        mut state: Option<&mut Vec<Tensor<2>>>,
    ) -> Tensor<4> {
        let h = b.conv1.forward(params, x.clone());
        let h = activation::relu(b.bn1.forward(params, h, state.as_deref_mut()));
        let h = b.conv2.forward(params, h);
        let h = b.bn2.forward(params, h, state);
        activation::relu(h + shortcut(x, params.replicas(), b.conv1))
    }
}

/// A 3×3 convolution without bias, padding 1, whose weight starts at `offset` (advanced past it).
fn conv3x3(offset: &mut usize, cin: usize, cout: usize, stride: usize) -> Conv {
    let c = Conv {
        weight: *offset,
        bias: None,
        cin,
        cout,
        k: 3,
        stride,
        pad: [1, 1],
    };
    *offset += c.len();
    c
}

/// A batch-norm layer whose weight and bias start at `offset` (advanced past them); the offset
/// of its running statistics is set once the trainable length is known.
fn norm(offset: &mut usize, channels: usize) -> Norm {
    let n = Norm {
        affine: *offset,
        stats: 0,
        channels,
    };
    *offset += 2 * channels;
    n
}

/// The option-A shortcut of a block whose first convolution is `conv`: the identity, or the input
/// subsampled at the stride with zero channels appended, per replica.
fn shortcut(x: Tensor<4>, r: usize, conv: Conv) -> Tensor<4> {
    if conv.stride == 1 && conv.cin == conv.cout {
        return x;
    }
    let x = if conv.stride > 1 {
        let st = conv.stride as isize;
        x.slice(s![.., .., ..;st, ..;st])
    } else {
        x
    };
    let [b, _, h, w] = x.dims();
    x.reshape([b, r, conv.cin, h * w])
        .pad([(0, conv.cout - conv.cin), (0, 0)], PadMode::Constant(0.0))
        .reshape([b, r * conv.cout, h, w])
}

impl NeuralNet for ResNet {
    fn name(&self) -> &'static str {
        "resnet"
    }

    /// Coordinates per replica: the trainable parameters and then the state (the BN running
    /// statistics, [`ResNet::state_len`] of them).
    fn num_params(&self) -> usize {
        self.params
    }

    /// Length of the state suffix of a row: running mean and variance of every BN channel.
    fn state_len(&self) -> usize {
        self.params - self.trainable
    }

    /// The weight matrices, in row order: every convolution `cout × (cin·k²)`, the linear layer.
    fn matrices(&self) -> Vec<dasim_sim::store::Matrix> {
        let mut m = vec![self.stem.matrix()];
        for b in &self.blocks {
            m.push(b.conv1.matrix());
            m.push(b.conv2.matrix());
        }
        m.push(self.fc.matrix());
        m
    }

    /// Every convolution (the stem's too); not the linear layer (the output layer).
    fn hidden_matrices(&self) -> Vec<dasim_sim::store::Hidden> {
        use dasim_sim::store::Hidden;
        let mut h = vec![Hidden::conv(self.stem.matrix())];
        for b in &self.blocks {
            h.push(Hidden::conv(b.conv1.matrix()));
            h.push(Hidden::conv(b.conv2.matrix()));
        }
        h
    }

    /// In forward order: each convolution's weight, each batch norm's gain and shift, the linear
    /// layer's weight and bias. The running statistics are state, not tensors.
    fn tensors(&self) -> Vec<std::ops::Range<usize>> {
        let mut t: Vec<_> = self
            .stem
            .blocks()
            .chain(self.stem_bn.affine_blocks())
            .collect();
        for b in &self.blocks {
            t.extend(b.conv1.blocks().chain(b.bn1.affine_blocks()));
            t.extend(b.conv2.blocks().chain(b.bn2.affine_blocks()));
        }
        t.extend(self.fc.blocks());
        t
    }

    /// Multiply-adds × 2 of one forward pass for one sample (see the module doc).
    fn forward_flops(&self) -> u64 {
        let mut flops = self.stem.flops([self.shape.height, self.shape.width]);
        for b in &self.blocks {
            flops += b.conv1.flops(b.map) + b.conv2.flops(b.map);
        }
        flops + self.fc.flops()
    }

    /// Where each layer starts in a row and its forward FLOPs for one sample, in forward order:
    /// the stem (its convolution and batch norm), each convolution with the batch norm after
    /// it, the linear layer. The running statistics, after them, are part of no layer.
    fn layer_starts(&self) -> Vec<(usize, u64)> {
        let mut l = vec![(
            self.stem.weight,
            self.stem.flops([self.shape.height, self.shape.width]),
        )];
        for b in &self.blocks {
            l.push((b.conv1.weight, b.conv1.flops(b.map)));
            l.push((b.conv2.weight, b.conv2.flops(b.map)));
        }
        l.push((self.fc.weight, self.fc.flops()));
        l
    }

    /// Floats of activation one sample keeps through a training pass: the image, and for every
    /// convolution its output, the batch-normalized map and the activation (plus each block's
    /// sum), and the logits (for the memory estimate).
    fn activations_per_sample(&self) -> u64 {
        let image = self.shape.channels * self.shape.height * self.shape.width;
        let map = |c: &Conv, [h, w]: [usize; 2]| c.cout * h * w;
        let mut floats = image + 3 * map(&self.stem, [self.shape.height, self.shape.width]);
        for b in &self.blocks {
            floats += 3 * map(&b.conv1, b.map) + 4 * map(&b.conv2, b.map);
        }
        (floats + self.classes) as u64
    }

    /// Floats per sample of the column matrices that im2col keeps for the backward pass, where
    /// a gradient pass takes it ([`crate::lenet::IM2COL_MIN_REPLICAS`]; off `flex`).
    fn im2col_floats_per_sample(&self) -> u64 {
        let mut floats = self
            .stem
            .im2col_floats([self.shape.height, self.shape.width]);
        for b in &self.blocks {
            floats += b.conv1.im2col_floats(b.map) + b.conv2.im2col_floats(b.map);
        }
        floats as u64
    }

    /// Initial parameters and state (torchvision's initialization, see the module doc), drawn
    /// in layout order.
    fn init(&self, rng: &mut Stream) -> Vec<f32> {
        let mut p = vec![0.0f32; self.params];
        let kaiming = |rng: &mut Stream, p: &mut [f32], c: &Conv| {
            let std = (2.0 / c.fan_out() as f64).sqrt();
            for v in &mut p[c.weight..c.weight + c.weight_len()] {
                let z: f64 = rng.sample(StandardNormal);
                *v = (std * z) as f32;
            }
        };
        let norm = |p: &mut [f32], n: &Norm| {
            p[n.affine..n.affine + n.channels].fill(1.0);
            p[n.affine + n.channels..n.affine + 2 * n.channels].fill(0.0);
            p[n.stats..n.stats + n.channels].fill(0.0);
            p[n.stats + n.channels..n.stats + 2 * n.channels].fill(1.0);
        };
        kaiming(rng, &mut p, &self.stem);
        norm(&mut p, &self.stem_bn);
        for b in &self.blocks {
            kaiming(rng, &mut p, &b.conv1);
            norm(&mut p, &b.bn1);
            kaiming(rng, &mut p, &b.conv2);
            norm(&mut p, &b.bn2);
        }
        self.fc.init(rng, &mut p);
        p
    }

    /// The contiguous blocks of a row that the forward pass reads separately, in layout order,
    /// together covering `0..P`: each convolution weight, each BN layer's weight and bias
    /// (one block `[2C]`), the linear weight, the linear bias, then each BN layer's running
    /// mean and variance (one block `[2C]`).
    fn blocks(&self) -> Vec<Range<usize>> {
        let affine = |n: &Norm| n.affine..n.affine + 2 * n.channels;
        let stats = |n: &Norm| n.stats..n.stats + 2 * n.channels;
        let mut b: Vec<Range<usize>> = self.stem.blocks().collect();
        b.push(affine(&self.stem_bn));
        for k in &self.blocks {
            b.extend(k.conv1.blocks());
            b.push(affine(&k.bn1));
            b.extend(k.conv2.blocks());
            b.push(affine(&k.bn2));
        }
        b.extend(self.fc.blocks());
        b.push(stats(&self.stem_bn));
        for k in &self.blocks {
            b.push(stats(&k.bn1));
            b.push(stats(&k.bn2));
        }
        b
    }

    fn cpu_program(&self) -> Option<Arc<dyn CpuNet>> {
        Some(Arc::new(cpu::ResNetCpu::new(self)))
    }

    /// [`ResNet::forward`] on rows given as their blocks: `blocks[i]` is `[R, len]`, the columns
    /// `self.blocks()[i]` of every row. Gradients taken with respect to the blocks and
    /// concatenated are the gradient of the rows, without the cost of slicing an `[R, P]`
    /// autodiff tensor (the backward pass of every slice writes an `[R, P]` buffer). In training
    /// mode the running-statistics blocks are not part of the graph: they get no gradient
    /// (`None`), which stands for zero.
    ///
    /// # Panics
    /// If the blocks do not match [`ResNet::blocks`] in number and widths.
    fn forward_blocks(
        &self,
        blocks: Vec<Tensor<2>>,
        x: Tensor<3>,
        train: bool,
    ) -> (Tensor<3>, Option<Tensor<2>>) {
        self.run(&ParamRows::from_blocks(self.blocks(), blocks), x, train)
    }

    /// Logits `[R, B, classes]` of `R` models `[R, P]` on images `[R, B, C·H·W]` (CHW per
    /// sample), replica `r` on its own minibatch `x[r]`.
    ///
    /// With `train`, batch norm uses each replica's minibatch statistics and the second value
    /// is the updated state `[R, state_len]` (running statistics after this minibatch, laid out
    /// as the state suffix of a row): a plain tensor, without autodiff, even when `params` is on
    /// an autodiff device. Without `train`, batch norm uses the running statistics of the rows
    /// and the second value is `None`.
    fn forward(
        &self,
        params: Tensor<2>,
        x: Tensor<3>,
        train: bool,
    ) -> (Tensor<3>, Option<Tensor<2>>) {
        self.run(&ParamRows::Whole(Box::new(params)), x, train)
    }
}
