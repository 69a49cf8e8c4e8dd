//! What a model is to the rest of dasim: its entry in the registry ([`ModelSpec`], implemented by
//! each kind's options type; the registry itself is [`crate::model`]), the network the burn store
//! computes on ([`NeuralNet`]), and [`Model`], a network or one of the two models without one.
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
//! This module names no kind: the kinds' modules import it, and the registry imports them.

use std::fmt::Debug;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use burn::tensor::Tensor;

use dasim_sim::ConfigError;
use dasim_sim::clock::rng::Stream;

use crate::convex::Objective;
use crate::data::{self, DataConfig, Dataset, DatasetKind, ImageShape, Split};
use crate::layers::CpuNet;
use crate::presets::TimingShape;

/// What loading a model's data knows besides the model's options: its kind and the scenario's
/// `[data]`, for [`ModelSpec::load`] and [`ModelSpec::build`].
#[derive(Clone, Copy, Debug)]
pub struct Load<'a> {
    /// The model's `kind` (for the errors that name it).
    pub kind: &'static str,
    /// The scenario's `[data]`.
    pub data: &'a DataConfig,
    /// The directory relative paths of `[data]` start from.
    pub base_dir: &'a Path,
    /// The run's seed (sampling and generated data).
    pub seed: u64,
}

impl Load<'_> {
    /// The features or images of `[data]`, normalized and split; text is an error at
    /// `model.kind` (a text's windows train a language model). What most models read.
    pub fn samples(&self) -> crate::Result<Split> {
        if self.data.kind() == DatasetKind::Text {
            return Err(ConfigError::new(
                "model.kind",
                format!(
                    "`{}` does not read text: a text's windows train a language model",
                    self.kind
                ),
            )
            .hint("use kind = \"transformer\"")
            .into());
        }
        data::load(self.data, self.base_dir, self.seed)
    }

    /// The image shape a convolutional model needs, or an error at `data.dataset` (or
    /// `data.csv.shape`, `data.synthetic.shape`).
    pub fn image_shape(&self, train: &Dataset) -> crate::Result<ImageShape> {
        train.shape.ok_or_else(|| {
            let kind = self.data.kind();
            let (field, hint) = if kind == DatasetKind::Csv {
                (
                    "data.csv.shape",
                    "declare the image in [data.csv] shape = [channels, height, width]",
                )
            } else if kind.is_synthetic() {
                (
                    "data.synthetic.shape",
                    "generate images: [data.synthetic] shape = [channels, height, width]",
                )
            } else {
                (
                    "data.dataset",
                    "use image data: digits (1×8×8), mnist, fashion-mnist, cifar10, cifar100, a CSV file or a generated dataset with a shape",
                )
            };
            ConfigError::new(
                field,
                format!(
                    "`{}` is a convolutional model and needs images; `{kind}` has plain feature vectors",
                    self.kind
                ),
            )
            .hint(hint)
            .into()
        })
    }
}

/// One model's entry in the registry: how its `[model]` options are checked, which data it
/// reads, how it is shaped to them, and what claims may rely on. Implemented by each kind's
/// options type, in the kind's module.
pub trait ModelSpec {
    /// Checks every value that does not depend on the data, with errors at `model.<key>` (the
    /// fit between the model and the data is checked by [`ModelSpec::load`] and
    /// [`ModelSpec::build`]). Nothing to check by default.
    fn validate(&self) -> Result<(), ConfigError> {
        Ok(())
    }

    /// The data the model trains on, as `[data]` says: by default features or images
    /// ([`Load::samples`]). `None` for a model that reads no data, once it has checked that
    /// `[data]` sets nothing it would ignore; it then gets an empty split.
    fn load(&self, load: &Load<'_>) -> crate::Result<Option<Split>> {
        load.samples().map(Some)
    }

    /// The model shaped to the training split of [`ModelSpec::load`] (empty for a model that
    /// reads no data): input width from the features or the image shape, output width from the
    /// classes (1 for real targets); with the training objective of a convex model that has an
    /// optimum. A model that does not fit the data is a [`ConfigError`].
    fn build(
        &self,
        load: &Load<'_>,
        train: &Dataset,
    ) -> crate::Result<(Model, Option<Arc<Objective>>)>;

    /// Whether the model reports an accuracy: `None` when its data decide (class labels or
    /// real targets). `Some(true)` by default.
    fn accuracy(&self) -> Option<bool> {
        Some(true)
    }

    /// Whether the model knows its optimum `f*` (for the suboptimality): `None` when its data
    /// decide. `Some(false)` by default.
    fn optimum(&self) -> Option<bool> {
        Some(false)
    }

    /// Whether a run computes gradients and losses at all (a timing model does not). `true` by
    /// default.
    fn computes(&self) -> bool {
        true
    }

    /// Whether any key of `[data]` applies to the model; a resolved scenario (`dasim plan`)
    /// leaves the section out where none does. `true` by default.
    fn reads_data(&self) -> bool {
        true
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

/// The synthetic quadratic's shape (its values live in [`dasim_sim::store::reference::Quadratic`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuadraticShape {
    /// Number of parameters.
    pub dim: usize,
    /// Condition number.
    pub condition: f64,
    /// Gradient-noise standard deviation.
    pub noise: f64,
}

/// A network on the flat layout: what the store ([`crate::store::BurnStore`]) needs of a model
/// with parameters it computes on. Implemented by each such model in its module; [`Model`]
/// hands its calls on (its methods say what each means).
pub trait NeuralNet: Send + Sync + Debug {
    /// The `kind` of `[model]` this is.
    fn name(&self) -> &'static str;

    /// Numbers per row: trainable parameters, then the state.
    fn num_params(&self) -> usize;

    /// Numbers of state at the end of the row; 0 by default.
    fn state_len(&self) -> usize {
        0
    }

    /// The weight matrices, in row order ([`Model::matrices`]).
    fn matrices(&self) -> Vec<dasim_sim::store::Matrix>;

    /// The hidden layers' weight matrices, in row order ([`Model::hidden_matrices`]): every
    /// matrix but the embeddings and the output layer, as Muon's reference code splits them.
    fn hidden_matrices(&self) -> Vec<dasim_sim::store::Hidden>;

    /// The parameter tensors (each weight, bias, normalization gain and shift), in row order
    /// ([`Model::tensors`]).
    fn tensors(&self) -> Vec<Range<usize>>;

    /// FLOPs (two per multiply-add) of one forward pass on one sample.
    fn forward_flops(&self) -> u64;

    /// The first coordinate and the forward FLOPs of each layer, in forward order
    /// ([`Model::layers`] builds the layers from them).
    fn layer_starts(&self) -> Vec<(usize, u64)>;

    /// Floats of activation one training sample keeps through a forward and backward pass.
    fn activations_per_sample(&self) -> u64;

    /// Floats per sample of a convolutional model's im2col columns
    /// ([`Model::im2col_floats_per_sample`]); 0 by default.
    fn im2col_floats_per_sample(&self) -> u64 {
        0
    }

    /// The L2 coefficient of the objective's `½·l2·‖θ‖²`; 0 by default.
    fn l2(&self) -> f64 {
        0.0
    }

    /// Initial parameters (and state), drawn on the host in layout order: `P` numbers.
    fn init(&self, rng: &mut Stream) -> Vec<f32>;

    /// The contiguous blocks of a row the forward pass reads separately ([`Model::blocks`]).
    fn blocks(&self) -> Vec<Range<usize>>;

    /// Whether the store may take a mean of gradients at the same parameters as one tall pass
    /// ([`Model::fuses_means`]); `false` by default.
    fn fuses_means(&self) -> bool {
        false
    }

    /// The model's CPU program, where it has one ([`Model::cpu_program`]); `None` by default.
    fn cpu_program(&self) -> Option<Arc<dyn CpuNet>> {
        None
    }

    /// [`NeuralNet::forward`] on rows given as their blocks ([`Model::forward_blocks`]).
    fn forward_blocks(
        &self,
        blocks: Vec<Tensor<2>>,
        x: Tensor<3>,
        train: bool,
    ) -> (Tensor<3>, Option<Tensor<2>>);

    /// Outputs of `R` rows, and with `train` the updated state ([`Model::forward`]).
    fn forward(
        &self,
        params: Tensor<2>,
        x: Tensor<3>,
        train: bool,
    ) -> (Tensor<3>, Option<Tensor<2>>);

    /// Whether the model is a language model (its loss in nats per token, its perplexity
    /// reported beside it); `false` by default.
    fn is_language_model(&self) -> bool {
        false
    }
}

/// A model of the zoo, shaped to its data: a network the burn store computes on, or one of the
/// two models without a network, which run on their own stores.
#[derive(Clone, Debug)]
pub enum Model {
    /// A network on the flat layout ([`NeuralNet`]): the MLP, softmax regression, least squares,
    /// LeNet-5, a ResNet, a transformer.
    Net(Arc<dyn NeuralNet>),
    /// The synthetic quadratic (no network; see [`crate::quadratic`]).
    Quadratic(QuadraticShape),
    /// A timing-only model (no network, no numbers; see [`crate::timing`]).
    Timing(TimingShape),
}

impl Model {
    /// A model of the network `net`.
    pub fn net(net: impl NeuralNet + 'static) -> Self {
        Model::Net(Arc::new(net))
    }

    /// The `kind` of `[model]` this is.
    pub fn name(&self) -> &'static str {
        match self {
            Model::Net(n) => n.name(),
            Model::Quadratic(_) => "quadratic",
            Model::Timing(_) => "timing",
        }
    }

    /// Numbers per row: trainable parameters, then the state.
    pub fn num_params(&self) -> usize {
        match self {
            Model::Net(n) => n.num_params(),
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
            Model::Net(n) => n.state_len(),
            Model::Quadratic(_) | Model::Timing(_) => 0,
        }
    }

    /// The trainable coordinates `0..P−S`.
    pub fn trainable(&self) -> std::ops::Range<usize> {
        0..self.num_params() - self.state_len()
    }

    /// The weight matrices, in row order, for low-rank compressors
    /// ([`ReplicaStore::matrices`](dasim_sim::store::ReplicaStore::matrices)): each dense
    /// layer's `fan_in × fan_out` weight, each convolution's `cout × (cin·k²)`. The quadratic
    /// has none.
    pub fn matrices(&self) -> Vec<dasim_sim::store::Matrix> {
        match self {
            Model::Net(n) => n.matrices(),
            Model::Quadratic(_) | Model::Timing(_) => Vec::new(),
        }
    }

    /// The hidden layers' weight matrices, in row order, for Muon
    /// ([`ReplicaStore::hidden_matrices`](dasim_sim::store::ReplicaStore::hidden_matrices)):
    /// every matrix of [`Model::matrices`] but the embeddings and the output layer. The
    /// quadratic has none.
    pub fn hidden_matrices(&self) -> Vec<dasim_sim::store::Hidden> {
        match self {
            Model::Net(n) => n.hidden_matrices(),
            Model::Quadratic(_) | Model::Timing(_) => Vec::new(),
        }
    }

    /// The parameter tensors in row order, for compressors that work tensor by tensor
    /// ([`ReplicaStore::tensors`](dasim_sim::store::ReplicaStore::tensors)): each layer's
    /// weight, bias, normalization gain and shift as its module holds them, disjoint and covering
    /// the trainable coordinates [`Model::trainable`] (the running statistics are not parameters).
    /// The quadratic and a timing model are one vector.
    pub fn tensors(&self) -> Vec<Range<usize>> {
        match self {
            Model::Net(n) => n.tensors(),
            Model::Quadratic(_) | Model::Timing(_) => vec![self.trainable()],
        }
    }

    /// FLOPs (two per multiply-add) of one forward pass on one sample. The quadratic counts
    /// one multiply-add per coordinate for its gradient `a ⊙ (x − b)`.
    pub fn forward_flops(&self) -> u64 {
        match self {
            Model::Net(n) => n.forward_flops(),
            Model::Quadratic(q) => 2 * q.dim as u64,
            Model::Timing(t) => t.forward_flops,
        }
    }

    /// The layers in forward order, for the cost models of partial steps
    /// ([`ReplicaStore::layers`](dasim_sim::store::ReplicaStore::layers)): a layer's
    /// coordinates run from its first parameter to the next layer's (a convolution of the ResNet
    /// with the batch norm after it), and its FLOPs are those of [`Model::forward_flops`]. The
    /// state suffix (batch-norm running statistics) is a last layer of no FLOPs; the quadratic is
    /// one layer.
    pub fn layers(&self) -> Vec<dasim_sim::store::Layer> {
        let starts = match self {
            Model::Net(n) => n.layer_starts(),
            Model::Quadratic(_) | Model::Timing(_) => vec![(0, self.forward_flops())],
        };
        let trainable = self.trainable().end;
        let mut layers: Vec<dasim_sim::store::Layer> = starts
            .iter()
            .enumerate()
            .map(|(k, &(start, flops))| dasim_sim::store::Layer {
                params: start..starts.get(k + 1).map_or(trainable, |s| s.0),
                forward_flops: flops,
            })
            .collect();
        if let Some(first) = layers.first_mut() {
            first.params.start = 0;
        }
        if trainable < self.num_params() {
            layers.push(dasim_sim::store::Layer {
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
            Model::Net(n) => n.activations_per_sample(),
            Model::Quadratic(_) | Model::Timing(_) => 0,
        }
    }

    /// Floats per sample of the column matrices a convolutional model keeps for the backward
    /// pass where its convolutions run as im2col (a gradient pass of at least
    /// [`crate::lenet::IM2COL_MIN_REPLICAS`] replicas off `flex`); 0 for the others.
    pub fn im2col_floats_per_sample(&self) -> u64 {
        match self {
            Model::Net(n) => n.im2col_floats_per_sample(),
            Model::Quadratic(_) | Model::Timing(_) => 0,
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
            Model::Net(n) => n.l2(),
            Model::Quadratic(_) | Model::Timing(_) => 0.0,
        }
    }

    /// Initial parameters (and state), drawn on the host in layout order from `rng`: `P`
    /// numbers. Linear layers use PyTorch's default, uniform in `±1/√fan_in`; the quadratic
    /// starts at zero (and draws nothing).
    pub fn init(&self, rng: &mut Stream) -> Vec<f32> {
        match self {
            Model::Net(n) => n.init(rng),
            Model::Quadratic(q) => vec![0.0; q.dim],
            Model::Timing(_) => panic!("a timing model has no numbers: it runs on its own store"),
        }
    }

    /// The network, or a panic for the models without one.
    fn neural_net(&self) -> &dyn NeuralNet {
        match self {
            Model::Net(n) => n.as_ref(),
            Model::Quadratic(_) => {
                panic!("the quadratic has no network: it runs on the reference store")
            }
            Model::Timing(_) => panic!("a timing model has no network: it runs on its own store"),
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
        self.neural_net().blocks()
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
            Model::Net(n) => n.fuses_means(),
            Model::Quadratic(_) | Model::Timing(_) => false,
        }
    }

    /// The model's CPU program, where it has one: the convolutional models and the transformer,
    /// whose layers the layer kit runs by hand on `flex` ([`crate::layers`]) far faster than
    /// burn's autodiff there. The store takes it on `flex` for every gradient and evaluation.
    pub fn cpu_program(&self) -> Option<Arc<dyn CpuNet>> {
        match self {
            Model::Net(n) => n.cpu_program(),
            Model::Quadratic(_) | Model::Timing(_) => None,
        }
    }

    /// Whether the model is a language model (a transformer): its loss is in nats per token.
    pub fn is_language_model(&self) -> bool {
        matches!(self, Model::Net(n) if n.is_language_model())
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
        self.neural_net().forward_blocks(blocks, x, train)
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
        self.neural_net().forward(params, x, train)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transformer::{Transformer, TransformerShape};
    use crate::{Activation, LeNet, Mlp, Regression, ResNet};

    /// Every model's tensors tile its trainable coordinates in row order (none empty, none in the
    /// running statistics), and each weight matrix is one of them: what CHOCO-SGD's per-tensor
    /// compression relies on.
    #[test]
    fn every_models_tensors_tile_its_trainable_coordinates_and_hold_its_matrices() {
        let image = |channels, side| ImageShape {
            channels,
            height: side,
            width: side,
        };
        let shape = TransformerShape {
            vocab: 40,
            context: 8,
            d_model: 16,
            heads: 2,
            d_ff: 32,
            layers: 2,
        };
        for (model, count) in [
            // Per layer a weight and a bias.
            (Model::net(Mlp::new(&[64, 32, 16, 10], Activation::Relu)), 6),
            (Model::net(Regression::softmax(64, 10, 0.0)), 2),
            // Two convolutions and three dense layers, each with a bias.
            (Model::net(LeNet::new(image(1, 28), 10)), 10),
            // Seven convolutions, seven batch norms (gain, shift), the dense layer.
            (Model::net(ResNet::new(image(3, 32), 10, 8, 4)), 7 + 14 + 2),
            // Two embeddings; per block two layer norms and four linear layers; the final norm.
            (Model::net(Transformer::new(shape)), 2 + 2 * (4 + 8) + 2),
        ] {
            let tensors = model.tensors();
            let name = model.name();
            assert_eq!(tensors.len(), count, "{name}: {tensors:?}");
            let mut end = 0;
            for t in &tensors {
                assert!(t.start == end && t.end > t.start, "{name}: {tensors:?}");
                end = t.end;
            }
            assert_eq!(end, model.trainable().end, "{name}");
            for m in model.matrices() {
                assert!(tensors.contains(&m.range()), "{name}: matrix {m:?}");
            }
        }
    }
}
