//! The layer kit: the layers the models of this crate are built from, in both of their passes.
//!
//! Every layer reads its parameters from the flat layout of a row (a weight block and a bias
//! block at fixed offsets) and exists twice:
//!
//! - **On burn** (`forward` of `conv::Conv`, `linear::Linear`, `norm::Norm`): `R`
//!   replicas at once on any device, differentiated by burn's autodiff. This is the pass on a
//!   GPU (wgpu), and the reference the CPU pass is tested against.
//! - **On the CPU** (`ConvHost`, `LinearHost`, `NormHost`): one
//!   replica's forward and backward written by hand on flat padded planes (`cpu`), with
//!   direct convolution kernels (`kernels`) compiled for AVX-512, AVX2 or portable code
//!   (`simd`). No autodiff graph, no zero-filled temporaries, batch norm and its activation in
//!   one pass, buffers reused from pass to pass (`workspace`). This is the pass on `flex`.
//!
//! A model assembles layers twice, once per pass ([`crate::lenet`], [`crate::resnet`]); its CPU
//! program implements [`CpuNet`], which the store calls on `flex` for every gradient request
//! and evaluation.
//!
//! The transformer's layers (`embedding::Embedding`, `layer_norm::LayerNorm`,
//! `attention::CausalSelfAttention`) are assembled on burn by [`crate::transformer`]; its CPU
//! program works on row-major activations (one row per position) with matrix products on views
//! of them (`matmul`), layer norm, softmax, GELU and the embedding fused around the products.

use std::ops::Range;

use burn::tensor::{Tensor, activation};
use rand::Rng;
use serde::{Deserialize, Serialize};

use dasim_sim::clock::rng::Stream;

use crate::data::ImageShape;

pub(crate) mod attention;
pub(crate) mod conv;
pub(crate) mod cpu;
pub(crate) mod embedding;
pub(crate) mod fastmath;
pub(crate) mod kernels;
pub(crate) mod layer_norm;
pub(crate) mod linear;
pub(crate) mod matmul;
pub(crate) mod norm;
pub(crate) mod par;
pub(crate) mod pool;
pub(crate) mod simd;
pub(crate) mod workspace;

pub use conv::IM2COL_MIN_REPLICAS;
pub use par::with_inner_parallelism;
pub use simd::{Isa, isa};

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

/// Hidden-layer nonlinearity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    /// `max(0, x)`.
    #[default]
    Relu,
    /// `tanh(x)`.
    Tanh,
}

/// The activation on burn tensors.
pub(crate) fn activate<const D: usize>(activation: Activation, x: Tensor<D>) -> Tensor<D> {
    match activation {
        Activation::Relu => activation::relu(x),
        Activation::Tanh => activation::tanh(x),
    }
}

/// The activation of one value, on the CPU.
pub(crate) fn activate_value(activation: Activation, v: f32) -> f32 {
    match activation {
        Activation::Relu => v.max(0.0),
        Activation::Tanh => v.tanh(),
    }
}

/// The activation's derivative, from its output `a`.
pub(crate) fn activation_slope(activation: Activation, a: f32) -> f32 {
    match activation {
        Activation::Relu => {
            if a > 0.0 {
                1.0
            } else {
                0.0
            }
        }
        Activation::Tanh => 1.0 - a * a,
    }
}

/// The targets of a minibatch, on the host.
#[derive(Clone, Copy, Debug)]
pub enum Targets<'a> {
    /// Class labels: softmax cross-entropy.
    Classes(&'a [u32]),
    /// Real values: `½·(ŷ − y)²` on the model's one output.
    Real(&'a [f32]),
    /// A language model's: the next token of every position of every window (`T` per window
    /// of `T + 1` tokens), softmax cross-entropy per position.
    Tokens(&'a [u32]),
}

impl Targets<'_> {
    /// Targets: samples, or a language model's positions.
    pub fn len(&self) -> usize {
        match self {
            Targets::Classes(y) | Targets::Tokens(y) => y.len(),
            Targets::Real(y) => y.len(),
        }
    }

    /// Whether there is no sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The loss of every sample from the outputs `out[k·stride + n]` (output `k` of sample `n`),
/// and its gradient with respect to them times `scale` (written in the same layout).
pub(crate) fn loss_and_grad(
    out: &[f32],
    stride: usize,
    outputs: usize,
    targets: Targets<'_>,
    scale: f32,
    grad: &mut [f32],
) -> Vec<f32> {
    match targets {
        Targets::Classes(labels) => {
            let scales = vec![scale; labels.len()];
            cpu::softmax_cross_entropy(out, stride, outputs, labels, &scales, grad)
        }
        Targets::Tokens(_) => panic!("a classifier's loss on a language model's targets"),
        Targets::Real(values) => {
            assert_eq!(outputs, 1, "a model on real targets has one output");
            values
                .iter()
                .enumerate()
                .map(|(n, &y)| {
                    let e = out[n] - y;
                    grad[n] = e * scale;
                    0.5 * e * e
                })
                .collect()
        }
    }
}

/// A model's CPU program: one replica's training pass (forward and backward) and inference,
/// on the host, without burn.
pub trait CpuNet: Send + Sync {
    /// Outputs per sample (classes, or 1), or per position of a language model's window (its
    /// vocabulary).
    fn outputs(&self) -> usize;

    /// Floats of one input sample (a language model's longest window: its context and the
    /// last target).
    fn input_len(&self) -> usize;

    /// The training pass of one replica with parameters `params` (`P` numbers, read at the
    /// scale the caller wants) on the minibatch `x` (`B` samples of [`CpuNet::input_len`]
    /// floats, CHW) with `targets`: writes into `grad` (`P`) the gradient of `scale · Σ_n
    /// loss_n` on the trainable coordinates and the updated state (batch-norm running
    /// statistics after this minibatch) on the state coordinates, and returns each sample's
    /// loss.
    fn train(
        &self,
        params: &[f32],
        x: &[f32],
        targets: Targets<'_>,
        scale: f32,
        grad: &mut [f32],
    ) -> Vec<f32>;

    /// The outputs of the model `params` on `samples` samples `x` in evaluation mode (running
    /// statistics), sample-major: `out[n·outputs + k]`, or for a language model position by
    /// position, `out[(n·T + t)·outputs + k]` on windows of `T + 1` tokens. It reuses the
    /// buffers of a training pass of `samples` samples.
    fn infer(&self, params: &[f32], x: &[f32], samples: usize, out: &mut [f32]);

    /// A language model's evaluation: the loss of every position of the `samples` windows `x`
    /// against `labels` (its next token) and whether the model's likeliest token is that one,
    /// position by position; `None` (the default) where the model leaves the scoring of its
    /// [`CpuNet::infer`] outputs to the caller.
    fn infer_scored(
        &self,
        _params: &[f32],
        _x: &[f32],
        _samples: usize,
        _labels: &[u32],
    ) -> Option<Vec<(f32, bool)>> {
        None
    }

    /// Floats of the buffers one training pass of `batch` samples keeps per thread (reused
    /// from pass to pass), for the memory estimate.
    fn train_floats(&self, batch: usize) -> usize;
}
