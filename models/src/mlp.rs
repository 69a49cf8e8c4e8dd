//! A multilayer perceptron defined on the flat parameter layout.
//!
//! A model is one row of `P` numbers. Layer `l`, mapping `n_l` inputs to `n_{l+1}` outputs, owns
//! the weight block `[n_l × n_{l+1}]` (row-major) followed by its bias `[n_{l+1}]`, layers in
//! order. The forward pass takes `R` rows at once — `[R, P]` parameters and `[R, B, n_0]` inputs —
//! slices and reshapes each row's blocks into `[R, n_l, n_{l+1}]` weights and runs batched
//! matrix products, so `R` replicas cost one pass, not `R`.

use std::ops::Range;
use std::sync::Arc;

use burn::tensor::{Tensor, activation};
use rand::Rng;
use serde::{Deserialize, Serialize};

use dasim_sim::ConfigError;
use dasim_sim::clock::rng::Stream;

use crate::convex::Objective;
use crate::data::Dataset;
pub use crate::layers::Activation;
use crate::spec::{Load, Model, ModelSpec, NeuralNet};

fn default_hidden() -> Vec<usize> {
    vec![32]
}

/// `[model] kind = "mlp"`: a multilayer perceptron; cross-entropy on class labels, squared
/// error on real targets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MlpConfig {
    /// Widths of the hidden layers (empty: a single linear layer).
    #[serde(default = "default_hidden")]
    pub hidden: Vec<usize>,
    /// Hidden-layer nonlinearity.
    #[serde(default)]
    pub activation: Activation,
}

impl Default for MlpConfig {
    fn default() -> Self {
        MlpConfig {
            hidden: default_hidden(),
            activation: Activation::Relu,
        }
    }
}

impl ModelSpec for MlpConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if let Some(i) = self.hidden.iter().position(|&h| h == 0) {
            return Err(ConfigError::new(
                &format!("model.hidden[{i}]"),
                "a hidden layer must have at least one unit",
            ));
        }
        Ok(())
    }

    fn build(
        &self,
        _load: &Load<'_>,
        train: &Dataset,
    ) -> crate::Result<(Model, Option<Arc<Objective>>)> {
        let mut widths = vec![train.dim];
        widths.extend(&self.hidden);
        widths.push(train.outputs());
        Ok((Model::net(Mlp::new(&widths, self.activation)), None))
    }

    /// Its data decide: an accuracy on class labels, none on real targets.
    fn accuracy(&self) -> Option<bool> {
        None
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layer {
    weight: usize,
    bias: usize,
    fan_in: usize,
    fan_out: usize,
}

/// An MLP over the flat layout.
#[derive(Clone, Debug, PartialEq)]
pub struct Mlp {
    layers: Vec<Layer>,
    activation: Activation,
    params: usize,
}

impl Mlp {
    /// Layer widths `[inputs, hidden…, classes]`.
    pub fn new(widths: &[usize], activation: Activation) -> Self {
        let mut layers = Vec::new();
        let mut offset = 0;
        for pair in widths.windows(2) {
            let (fan_in, fan_out) = (pair[0], pair[1]);
            layers.push(Layer {
                weight: offset,
                bias: offset + fan_in * fan_out,
                fan_in,
                fan_out,
            });
            offset += fan_in * fan_out + fan_out;
        }
        Mlp {
            layers,
            activation,
            params: offset,
        }
    }

    /// FLOPs of one training sample: the forward pass and a backward pass of about twice its
    /// cost (the usual 3× rule), used to derive step times from a device speed.
    pub fn train_flops_per_sample(&self) -> f64 {
        3.0 * self.forward_flops() as f64
    }

    /// Logits `[R, B, classes]` of `R` models `[R, P]` on inputs `[R, B, inputs]`.
    pub fn forward(&self, params: Tensor<2>, x: Tensor<3>) -> Tensor<3> {
        self.run(|range| params.clone().slice_dim(1, range), x)
    }

    /// [`Mlp::forward`] on rows given as their blocks: `blocks[i]` is `[R, len]`, the columns
    /// `self.blocks()[i]` of every row. Gradients with respect to the blocks, concatenated, are
    /// the gradient of the rows, without the cost of slicing an `[R, P]` autodiff tensor (the
    /// backward pass of every slice writes a zero-filled `[R, P]` buffer).
    ///
    /// # Panics
    /// If the blocks do not match [`Mlp::blocks`].
    pub fn forward_blocks(&self, blocks: &[Tensor<2>], x: Tensor<3>) -> Tensor<3> {
        let ranges = self.blocks();
        assert_eq!(ranges.len(), blocks.len(), "one tensor per parameter block");
        self.run(
            |range| {
                let i = ranges
                    .iter()
                    .position(|b| *b == range)
                    .unwrap_or_else(|| panic!("no parameter block {range:?}"));
                blocks[i].clone()
            },
            x,
        )
    }

    /// The forward pass, reading each block `[R, len]` through `block`.
    fn run(&self, block: impl Fn(Range<usize>) -> Tensor<2>, x: Tensor<3>) -> Tensor<3> {
        let r = x.dims()[0];
        let last = self.layers.len() - 1;
        let mut h = x;
        for (k, l) in self.layers.iter().enumerate() {
            let w = block(l.weight..l.bias).reshape([r, l.fan_in, l.fan_out]);
            let b = block(l.bias..l.bias + l.fan_out).reshape([r, 1, l.fan_out]);
            h = h.matmul(w) + b;
            if k < last {
                h = match self.activation {
                    Activation::Relu => activation::relu(h),
                    Activation::Tanh => activation::tanh(h),
                };
            }
        }
        h
    }
}

impl NeuralNet for Mlp {
    fn name(&self) -> &'static str {
        "mlp"
    }

    /// Parameters per replica.
    fn num_params(&self) -> usize {
        self.params
    }

    /// The weight matrices `fan_in × fan_out`, in row order.
    fn matrices(&self) -> Vec<dasim_sim::store::Matrix> {
        self.layers
            .iter()
            .map(|l| dasim_sim::store::Matrix {
                start: l.weight,
                rows: l.fan_in,
                cols: l.fan_out,
            })
            .collect()
    }

    /// Every layer's weight but the last's (the output layer, AdamW's in Muon).
    fn hidden_matrices(&self) -> Vec<dasim_sim::store::Hidden> {
        let m = self.matrices();
        let hidden = m.len().saturating_sub(1);
        m[..hidden]
            .iter()
            .map(|&m| dasim_sim::store::Hidden::dense(m))
            .collect()
    }

    /// Each layer's weight, then its bias.
    fn tensors(&self) -> Vec<std::ops::Range<usize>> {
        self.layers
            .iter()
            .flat_map(|l| {
                [
                    l.weight..l.weight + l.fan_in * l.fan_out,
                    l.bias..l.bias + l.fan_out,
                ]
            })
            .collect()
    }

    /// Multiply-adds of one forward pass, times two (FLOPs), for one sample.
    fn forward_flops(&self) -> u64 {
        self.layers
            .iter()
            .map(|l| 2 * (l.fan_in * l.fan_out) as u64)
            .sum()
    }

    /// Where each layer starts in a row and its forward FLOPs for one sample.
    fn layer_starts(&self) -> Vec<(usize, u64)> {
        self.layers
            .iter()
            .map(|l| (l.weight, 2 * (l.fan_in * l.fan_out) as u64))
            .collect()
    }

    /// Floats of activation one sample keeps through a training pass: the input, and every
    /// layer's output before and after its activation (for the memory estimate).
    fn activations_per_sample(&self) -> u64 {
        let input = self.layers.first().map_or(0, |l| l.fan_in);
        (input + self.layers.iter().map(|l| 2 * l.fan_out).sum::<usize>()) as u64
    }

    /// Initial parameters, PyTorch's default for linear layers: weights and biases uniform in
    /// `±1/√fan_in`, drawn on the host in layout order.
    fn init(&self, rng: &mut Stream) -> Vec<f32> {
        let mut p = vec![0.0f32; self.params];
        for l in &self.layers {
            let bound = 1.0 / (l.fan_in as f32).sqrt();
            for v in &mut p[l.weight..l.bias + l.fan_out] {
                *v = rng.random_range(-bound..bound);
            }
        }
        p
    }

    /// The contiguous blocks of a row the forward pass reads separately, in layout order (each
    /// layer's weight, then its bias); together they cover `0..P`.
    fn blocks(&self) -> Vec<Range<usize>> {
        self.layers
            .iter()
            .flat_map(|l| [l.weight..l.bias, l.bias..l.bias + l.fan_out])
            .collect()
    }

    /// Every sample on its own, and one tall pass is the faster (see [`Model::fuses_means`]).
    fn fuses_means(&self) -> bool {
        true
    }

    fn forward_blocks(
        &self,
        blocks: Vec<Tensor<2>>,
        x: Tensor<3>,
        _train: bool,
    ) -> (Tensor<3>, Option<Tensor<2>>) {
        (Mlp::forward_blocks(self, &blocks, x), None)
    }

    fn forward(
        &self,
        params: Tensor<2>,
        x: Tensor<3>,
        _train: bool,
    ) -> (Tensor<3>, Option<Tensor<2>>) {
        (Mlp::forward(self, params, x), None)
    }
}
