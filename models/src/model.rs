//! The model zoo on the flat layout: what `[model]` names, and one [`Model`] the store drives.
//!
//! Every model is a function of one row of `P` numbers. The store stacks `R` rows into a
//! `[R, P]` tensor and calls [`Model::forward`] once for all of them, with inputs `[R, B,
//! features]` (images flattened CHW; the convolutional models reshape them). A model with state
//! (batch-norm running statistics) keeps it as the last [`Model::state_len`] coordinates of the
//! row: the trainable parameters are the prefix `0..P−S`, the state is the suffix `P−S..P`. The
//! state gets no gradient; a training pass returns the updated state instead, and the store turns
//! it into a state delta that rides along with the gradient (see [`crate::store`]).
//!
//! The loss follows the data: softmax cross-entropy for class labels, half the squared error for
//! real targets ([`Loss`]). The two convex models add an L2 term `½·l2·‖θ‖²` over the whole
//! row (weights and biases), which makes their optimum unique, so that the suboptimality
//! `f(x̄) − f*` of [`crate::convex`] is well defined.
//!
//! The synthetic quadratic is listed here too, for its parameter count and FLOPs, but it has no
//! network: it runs on the exact reference store of `dasim-sim` (see [`crate::quadratic`]).

use std::ops::Range;
use std::sync::Arc;

use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

use dasim_sim::ConfigError;
use dasim_sim::clock::rng::Stream;

use crate::layers::CpuNet;
use crate::lenet::LeNet;
use crate::mlp::{Activation, Mlp};
use crate::resnet::ResNet;
use crate::timing::{Preset, TimingShape};
use crate::transformer::{Transformer, TransformerShape};

fn default_hidden() -> Vec<usize> {
    vec![32]
}

fn default_resnet_depth() -> usize {
    20
}

fn default_resnet_width() -> usize {
    16
}

/// Default dimension of the synthetic quadratic.
pub const DEFAULT_QUADRATIC_DIM: usize = 100;
/// Default condition number of the synthetic quadratic.
pub const DEFAULT_QUADRATIC_CONDITION: f64 = 10.0;
/// Default gradient-noise standard deviation of the synthetic quadratic.
pub const DEFAULT_QUADRATIC_NOISE: f64 = 0.1;

fn default_layers() -> usize {
    2
}

fn default_d_model() -> usize {
    64
}

fn default_heads() -> usize {
    4
}

fn default_context() -> usize {
    64
}

fn default_quadratic_dim() -> usize {
    DEFAULT_QUADRATIC_DIM
}

fn default_quadratic_condition() -> f64 {
    DEFAULT_QUADRATIC_CONDITION
}

fn default_quadratic_noise() -> f64 {
    DEFAULT_QUADRATIC_NOISE
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// The `[model]` section of a scenario.
///
/// ```toml
/// [model]
/// kind = "mlp"                  # mlp (default) | softmax | linear | lenet | resnet | transformer | quadratic | timing
/// hidden = [64, 32]
/// activation = "tanh"           # relu (default) | tanh
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum ModelConfig {
    /// A multilayer perceptron; cross-entropy on class labels, squared error on real targets.
    Mlp {
        /// Widths of the hidden layers (empty: a single linear layer).
        #[serde(default = "default_hidden")]
        hidden: Vec<usize>,
        /// Hidden-layer nonlinearity.
        #[serde(default)]
        activation: Activation,
    },
    /// Multinomial logistic regression: one linear layer, softmax cross-entropy, and the L2
    /// term `½·l2·‖θ‖²`. Needs class labels.
    Softmax {
        /// L2 coefficient; above zero the optimum is unique and computed for the
        /// suboptimality.
        #[serde(default, skip_serializing_if = "is_zero")]
        l2: f64,
    },
    /// Linear least squares: one linear layer with one output, the loss `½·(ŷ − y)²`, and the
    /// L2 term `½·l2·‖θ‖²`. Needs real targets.
    Linear {
        /// L2 coefficient (ridge regression above zero).
        #[serde(default, skip_serializing_if = "is_zero")]
        l2: f64,
    },
    /// LeNet-5 (LeCun et al. 1998). Needs images.
    Lenet {},
    /// A CIFAR ResNet (He et al. 2016, §4.2) with batch normalization. Needs images.
    Resnet {
        /// Layers with weights: `6n + 2` (20, 32, 44, 56, 110).
        #[serde(default = "default_resnet_depth")]
        depth: usize,
        /// Channels of the first stage (16 in the paper); the stages have `w`, `2w`, `4w`.
        #[serde(default = "default_resnet_width")]
        width: usize,
    },
    /// A decoder-only transformer language model (GPT; [`crate::transformer`]), its output layer
    /// tied to the token embedding. Needs text (`[data] dataset = "text"`); the vocabulary comes
    /// from the tokenizer.
    Transformer {
        /// Transformer blocks.
        #[serde(default = "default_layers")]
        layers: usize,
        /// Width of the residual stream.
        #[serde(default = "default_d_model")]
        d_model: usize,
        /// Attention heads; they divide `d_model`.
        #[serde(default = "default_heads")]
        heads: usize,
        /// Hidden width of each block's MLP (default `4 · d_model`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        d_ff: Option<usize>,
        /// The longest window of tokens the model reads (its position embeddings).
        #[serde(default = "default_context")]
        context: usize,
    },
    /// The synthetic quadratic `½ Σ_k a_k (x_k − 1)²` with curvatures spread geometrically over
    /// `[1, condition]` and Gaussian gradient noise; reads no data.
    Quadratic {
        /// Number of parameters.
        #[serde(default = "default_quadratic_dim")]
        dim: usize,
        /// Condition number `max a_k / min a_k ≥ 1`.
        #[serde(default = "default_quadratic_condition")]
        condition: f64,
        /// Standard deviation σ of the noise added to every gradient coordinate.
        #[serde(default = "default_quadratic_noise")]
        noise: f64,
    },
    /// A real model's size and cost without its numbers ([`crate::timing`]): every algorithm's
    /// schedule, messages and waits at paper scale, no gradient computed, no loss reported.
    Timing {
        /// A published model (`resnet50`, `resnet20`, `vgg16`, `bert-base`, `gpt2-small`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        preset: Option<Preset>,
        /// Parameters, instead of a preset: the size of a model or gradient in a message.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        params: Option<u64>,
        /// GFLOPs of one forward pass on one sample, with `params` (needed when the cluster
        /// gives a device speed, `device_tflops`, rather than `step_time_ms`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        forward_gflops: Option<f64>,
        /// Samples in an epoch (default: the preset's training set).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        train_samples: Option<u64>,
    },
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig::Mlp {
            hidden: default_hidden(),
            activation: Activation::Relu,
        }
    }
}

impl ModelConfig {
    /// The name used in scenario files.
    pub fn name(&self) -> &'static str {
        match self {
            ModelConfig::Mlp { .. } => "mlp",
            ModelConfig::Softmax { .. } => "softmax",
            ModelConfig::Linear { .. } => "linear",
            ModelConfig::Lenet {} => "lenet",
            ModelConfig::Resnet { .. } => "resnet",
            ModelConfig::Transformer { .. } => "transformer",
            ModelConfig::Quadratic { .. } => "quadratic",
            ModelConfig::Timing { .. } => "timing",
        }
    }

    /// Checks every value that does not depend on the data (the fit between the model and the
    /// data is checked by [`crate::Problem::load`]).
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self {
            ModelConfig::Mlp { hidden, .. } => {
                if let Some(i) = hidden.iter().position(|&h| h == 0) {
                    return Err(ConfigError::new(
                        &format!("model.hidden[{i}]"),
                        "a hidden layer must have at least one unit",
                    ));
                }
            }
            ModelConfig::Softmax { l2 } | ModelConfig::Linear { l2 } => {
                if !(l2.is_finite() && *l2 >= 0.0) {
                    return Err(ConfigError::new(
                        "model.l2",
                        format!("l2 must be zero or positive, got {l2}"),
                    ));
                }
            }
            ModelConfig::Lenet {} => {}
            ModelConfig::Resnet { depth, width } => {
                if *depth < 8 || !(depth - 2).is_multiple_of(6) {
                    return Err(ConfigError::new(
                        "model.depth",
                        format!("a CIFAR ResNet has depth 6n + 2 with n ≥ 1, got {depth}"),
                    )
                    .hint(
                        "20, 32, 44, 56 or 110 (ResNet-20 … ResNet-110); 8 and 14 are the smallest",
                    ));
                }
                if *width == 0 {
                    return Err(ConfigError::new(
                        "model.width",
                        "width must be at least 1 (16 in the paper)",
                    ));
                }
            }
            ModelConfig::Transformer { .. } => {
                let shape = self.transformer_shape(1).expect("a transformer");
                shape.check().map_err(|(key, e)| {
                    let err = ConfigError::new(&format!("model.{key}"), e);
                    if key == "heads" {
                        err.hint("GPT-2 small: d_model = 768 with 12 heads of 64")
                    } else {
                        err
                    }
                })?;
            }
            ModelConfig::Quadratic {
                dim,
                condition,
                noise,
            } => {
                if *dim == 0 {
                    return Err(ConfigError::new("model.dim", "dim must be at least 1"));
                }
                if !(condition.is_finite() && *condition >= 1.0) {
                    return Err(ConfigError::new(
                        "model.condition",
                        format!("the condition number must be at least 1, got {condition}"),
                    ));
                }
                if !(noise.is_finite() && *noise >= 0.0) {
                    return Err(ConfigError::new(
                        "model.noise",
                        format!("noise must be zero or positive, got {noise}"),
                    ));
                }
            }
            ModelConfig::Timing { .. } => {
                self.timing_shape()?;
            }
        }
        Ok(())
    }

    /// The shape of a `transformer` over a vocabulary of `vocab` tokens (`d_ff` resolved);
    /// `None` for the other kinds.
    pub fn transformer_shape(&self, vocab: usize) -> Option<TransformerShape> {
        match *self {
            ModelConfig::Transformer {
                layers,
                d_model,
                heads,
                d_ff,
                context,
            } => Some(TransformerShape {
                vocab,
                context,
                d_model,
                heads,
                d_ff: d_ff.unwrap_or(4 * d_model),
                layers,
            }),
            _ => None,
        }
    }

    /// The size and cost of a `timing` model; `None` for the other kinds.
    pub fn timing_shape(&self) -> Result<Option<TimingShape>, ConfigError> {
        match *self {
            ModelConfig::Timing {
                preset,
                params,
                forward_gflops,
                train_samples,
            } => TimingShape::resolve(preset, params, forward_gflops, train_samples).map(Some),
            _ => Ok(None),
        }
    }
}

/// The training loss, chosen by the data's targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// Class labels: `−log softmax(logits)[label]`, mean over the minibatch.
    CrossEntropy,
    /// Real targets: `½·(ŷ − y)²`, mean over the minibatch (the model has one output).
    SquaredError,
}

/// The synthetic quadratic's shape (its values live in [`dasim_sim::params::reference::Quadratic`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuadraticShape {
    /// Number of parameters.
    pub dim: usize,
    /// Condition number.
    pub condition: f64,
    /// Gradient-noise standard deviation.
    pub noise: f64,
}

/// A model of the zoo, shaped to its data.
#[derive(Clone, Debug)]
pub enum Model {
    /// A multilayer perceptron.
    Mlp(Mlp),
    /// Softmax regression: a linear layer `[inputs, classes]` and the L2 coefficient.
    Softmax {
        /// The linear layer (an MLP without hidden layers).
        layer: Mlp,
        /// `l2` of `½·l2·‖θ‖²`.
        l2: f64,
    },
    /// Least squares: a linear layer `[inputs, 1]` and the L2 coefficient.
    Linear {
        /// The linear layer (an MLP without hidden layers).
        layer: Mlp,
        /// `l2` of `½·l2·‖θ‖²`.
        l2: f64,
    },
    /// LeNet-5 ([`crate::lenet`]).
    LeNet(LeNet),
    /// A CIFAR ResNet with batch-norm state ([`crate::resnet`]).
    ResNet(ResNet),
    /// A transformer language model ([`crate::transformer`]).
    Transformer(Transformer),
    /// The synthetic quadratic (no network; see [`crate::quadratic`]).
    Quadratic(QuadraticShape),
    /// A timing-only model (no network, no numbers; see [`crate::timing`]).
    Timing(TimingShape),
}

impl Model {
    /// Softmax regression from `inputs` features to `classes` classes.
    pub fn softmax(inputs: usize, classes: usize, l2: f64) -> Self {
        Model::Softmax {
            layer: Mlp::new(&[inputs, classes], Activation::Relu),
            l2,
        }
    }

    /// Least squares on `inputs` features.
    pub fn linear(inputs: usize, l2: f64) -> Self {
        Model::Linear {
            layer: Mlp::new(&[inputs, 1], Activation::Relu),
            l2,
        }
    }

    /// The `kind` of `[model]` this is.
    pub fn name(&self) -> &'static str {
        match self {
            Model::Mlp(_) => "mlp",
            Model::Softmax { .. } => "softmax",
            Model::Linear { .. } => "linear",
            Model::LeNet(_) => "lenet",
            Model::ResNet(_) => "resnet",
            Model::Transformer(_) => "transformer",
            Model::Quadratic(_) => "quadratic",
            Model::Timing(_) => "timing",
        }
    }

    /// Numbers per row: trainable parameters, then the state.
    pub fn num_params(&self) -> usize {
        match self {
            Model::Mlp(m) | Model::Softmax { layer: m, .. } | Model::Linear { layer: m, .. } => {
                m.num_params()
            }
            Model::LeNet(m) => m.num_params(),
            Model::ResNet(m) => m.num_params(),
            Model::Transformer(m) => m.num_params(),
            Model::Quadratic(q) => q.dim,
            Model::Timing(t) => {
                usize::try_from(t.params).expect("the parameter count fits the address space")
            }
        }
    }

    /// Numbers of state (batch-norm running statistics) at the end of the row; 0 for models
    /// without state.
    pub fn state_len(&self) -> usize {
        match self {
            Model::LeNet(m) => m.state_len(),
            Model::ResNet(m) => m.state_len(),
            _ => 0,
        }
    }

    /// The trainable coordinates `0..P−S`.
    pub fn trainable(&self) -> std::ops::Range<usize> {
        0..self.num_params() - self.state_len()
    }

    /// The weight matrices, in row order, for low-rank compressors
    /// ([`ReplicaStore::matrices`](dasim_sim::params::ReplicaStore::matrices)): each dense
    /// layer's `fan_in × fan_out` weight, each convolution's `cout × (cin·k²)`. The quadratic
    /// has none.
    pub fn matrices(&self) -> Vec<dasim_sim::params::Matrix> {
        match self {
            Model::Mlp(m) | Model::Softmax { layer: m, .. } | Model::Linear { layer: m, .. } => {
                m.matrices()
            }
            Model::LeNet(m) => m.matrices(),
            Model::ResNet(m) => m.matrices(),
            Model::Transformer(m) => m.matrices(),
            Model::Quadratic(_) | Model::Timing(_) => Vec::new(),
        }
    }

    /// FLOPs (two per multiply-add) of one forward pass on one sample. The quadratic counts
    /// one multiply-add per coordinate for its gradient `a ⊙ (x − b)`.
    pub fn forward_flops(&self) -> u64 {
        match self {
            Model::Mlp(m) | Model::Softmax { layer: m, .. } | Model::Linear { layer: m, .. } => {
                m.forward_flops()
            }
            Model::LeNet(m) => m.forward_flops(),
            Model::ResNet(m) => m.forward_flops(),
            Model::Transformer(m) => m.forward_flops(),
            Model::Quadratic(q) => 2 * q.dim as u64,
            Model::Timing(t) => t.forward_flops,
        }
    }

    /// The layers in forward order, for the cost models of partial steps
    /// ([`ReplicaStore::layers`](dasim_sim::params::ReplicaStore::layers)): a layer's
    /// coordinates run from its first parameter to the next layer's (a convolution of the ResNet
    /// with the batch norm after it), and its FLOPs are those of [`Model::forward_flops`]. The
    /// state suffix (batch-norm running statistics) is a last layer of no FLOPs; the quadratic is
    /// one layer.
    pub fn layers(&self) -> Vec<dasim_sim::params::Layer> {
        let starts = match self {
            Model::Mlp(m) | Model::Softmax { layer: m, .. } | Model::Linear { layer: m, .. } => {
                m.layer_starts()
            }
            Model::LeNet(m) => m.layer_starts(),
            Model::ResNet(m) => m.layer_starts(),
            Model::Transformer(m) => m.layer_starts(),
            Model::Quadratic(_) | Model::Timing(_) => vec![(0, self.forward_flops())],
        };
        let trainable = self.trainable().end;
        let mut layers: Vec<dasim_sim::params::Layer> = starts
            .iter()
            .enumerate()
            .map(|(k, &(start, flops))| dasim_sim::params::Layer {
                params: start..starts.get(k + 1).map_or(trainable, |s| s.0),
                forward_flops: flops,
            })
            .collect();
        if let Some(first) = layers.first_mut() {
            first.params.start = 0;
        }
        if trainable < self.num_params() {
            layers.push(dasim_sim::params::Layer {
                params: trainable..self.num_params(),
                forward_flops: 0,
            });
        }
        layers
    }

    /// Floats of activation one training sample keeps through a forward and backward pass (an
    /// estimate, for [`crate::memory`]); the quadratic keeps none.
    pub fn activations_per_sample(&self) -> u64 {
        match self {
            Model::Mlp(m) | Model::Softmax { layer: m, .. } | Model::Linear { layer: m, .. } => {
                m.activations_per_sample()
            }
            Model::LeNet(m) => m.activations_per_sample(),
            Model::ResNet(m) => m.activations_per_sample(),
            Model::Transformer(m) => m.activations_per_sample(),
            Model::Quadratic(_) | Model::Timing(_) => 0,
        }
    }

    /// Floats per sample of the column matrices a convolutional model keeps for the backward
    /// pass where its convolutions run as im2col (a gradient pass of at least
    /// [`crate::lenet::IM2COL_MIN_REPLICAS`] replicas off `flex`); 0 for the others.
    pub fn im2col_floats_per_sample(&self) -> u64 {
        match self {
            Model::LeNet(m) => m.im2col_floats_per_sample(),
            Model::ResNet(m) => m.im2col_floats_per_sample(),
            _ => 0,
        }
    }

    /// FLOPs of one training sample: forward and backward, three times the forward pass (the
    /// usual rule), used to derive step times from a device speed.
    pub fn train_flops_per_sample(&self) -> f64 {
        3.0 * self.forward_flops() as f64
    }

    /// The L2 coefficient of the objective's `½·l2·‖θ‖²` (zero but for softmax and linear).
    pub fn l2(&self) -> f64 {
        match self {
            Model::Softmax { l2, .. } | Model::Linear { l2, .. } => *l2,
            _ => 0.0,
        }
    }

    /// Initial parameters (and state), drawn on the host in layout order from `rng`: `P`
    /// numbers. Linear layers use PyTorch's default, uniform in `±1/√fan_in`; the quadratic
    /// starts at zero (and draws nothing).
    pub fn init(&self, rng: &mut Stream) -> Vec<f32> {
        match self {
            Model::Mlp(m) | Model::Softmax { layer: m, .. } | Model::Linear { layer: m, .. } => {
                m.init(rng)
            }
            Model::LeNet(m) => m.init(rng),
            Model::ResNet(m) => m.init(rng),
            Model::Transformer(m) => m.init(rng),
            Model::Quadratic(q) => vec![0.0; q.dim],
            Model::Timing(_) => panic!("a timing model has no numbers: it runs on its own store"),
        }
    }

    /// The contiguous blocks of a row the forward pass reads separately (layer weights and
    /// biases, batch-norm affine parameters and running statistics), in layout order; together
    /// they cover `0..P`. The store differentiates with respect to these blocks, one autodiff
    /// leaf each ([`Model::forward_blocks`]).
    ///
    /// # Panics
    /// For the quadratic, which has no network.
    pub fn blocks(&self) -> Vec<Range<usize>> {
        match self {
            Model::Mlp(m) | Model::Softmax { layer: m, .. } | Model::Linear { layer: m, .. } => {
                m.blocks()
            }
            Model::LeNet(m) => m.blocks(),
            Model::ResNet(m) => m.blocks(),
            Model::Transformer(m) => m.blocks(),
            Model::Quadratic(_) => {
                panic!("the quadratic has no network: it runs on the reference store")
            }
            Model::Timing(_) => panic!("a timing model has no network: it runs on its own store"),
        }
    }

    /// Whether the store takes a mean of gradients read at the same parameters as one model's
    /// gradient on the union of their minibatches (all-reduce's mean; see
    /// [`crate::store`]): the forward pass must treat each sample on its own (no batch
    /// statistics, no state), and one tall pass must be the faster. The MLPs and the convex
    /// models. LeNet treats each sample on its own too, but `flex`'s convolutions run one model
    /// on a tall batch slower than the replicas' grouped passes (all-reduce on
    /// `scenarios/lenet.toml`: 745–775 against 961–992 worker steps per wall second), so its
    /// means stay the mean of its replicas' gradients. ResNet's batch normalization mixes a
    /// minibatch's samples.
    pub fn fuses_means(&self) -> bool {
        match self {
            Model::Mlp(_) | Model::Softmax { .. } | Model::Linear { .. } => true,
            Model::LeNet(_)
            | Model::ResNet(_)
            | Model::Transformer(_)
            | Model::Quadratic(_)
            | Model::Timing(_) => false,
        }
    }

    /// The model's CPU program, where it has one: the convolutional models, whose layers the
    /// layer kit runs by hand on `flex` ([`crate::layers`]) far faster than burn's
    /// convolutions there. The store takes it on `flex` for every gradient and evaluation.
    pub fn cpu_program(&self) -> Option<Arc<dyn CpuNet>> {
        match self {
            Model::LeNet(m) => Some(Arc::new(crate::lenet::cpu::LeNetCpu::new(m))),
            Model::ResNet(m) => Some(Arc::new(crate::resnet::cpu::ResNetCpu::new(m))),
            _ => None,
        }
    }

    /// [`Model::forward`] on rows given as their [`Model::blocks`], each `[R, len]`: the same
    /// outputs and state, and gradients taken per block that concatenate to the rows' gradient.
    ///
    /// # Panics
    /// For the quadratic, or blocks that do not match [`Model::blocks`].
    pub fn forward_blocks(
        &self,
        blocks: Vec<Tensor<2>>,
        x: Tensor<3>,
        train: bool,
    ) -> (Tensor<3>, Option<Tensor<2>>) {
        match self {
            Model::Mlp(m) | Model::Softmax { layer: m, .. } | Model::Linear { layer: m, .. } => {
                (m.forward_blocks(&blocks, x), None)
            }
            Model::LeNet(m) => m.forward_blocks(blocks, x, train),
            Model::ResNet(m) => m.forward_blocks(blocks, x, train),
            Model::Transformer(m) => (m.forward_blocks(blocks, x), None),
            Model::Quadratic(_) => {
                panic!("the quadratic has no network: it runs on the reference store")
            }
            Model::Timing(_) => panic!("a timing model has no network: it runs on its own store"),
        }
    }

    /// Outputs `[R, B, outputs]` of `R` rows `[R, P]` on inputs `[R, B, features]`; with
    /// `train`, also the updated state `[R, S]` (no gradient flows through it), `None` when the
    /// model has no state or `train` is false.
    ///
    /// # Panics
    /// For the quadratic, which has no network.
    pub fn forward(
        &self,
        params: Tensor<2>,
        x: Tensor<3>,
        train: bool,
    ) -> (Tensor<3>, Option<Tensor<2>>) {
        match self {
            Model::Mlp(m) | Model::Softmax { layer: m, .. } | Model::Linear { layer: m, .. } => {
                (m.forward(params, x), None)
            }
            Model::LeNet(m) => m.forward(params, x, train),
            Model::ResNet(m) => m.forward(params, x, train),
            Model::Transformer(m) => (m.forward(params, x), None),
            Model::Quadratic(_) => {
                panic!("the quadratic has no network: it runs on the reference store")
            }
            Model::Timing(_) => panic!("a timing model has no network: it runs on its own store"),
        }
    }
}
