//! The model registry: what `[model]` names. Every kind is listed once, in the `registry!` table
//! below: its `kind` string, its variant of [`ModelConfig`] and its options type, which lives in
//! the kind's module. The options type implements [`ModelSpec`]: how its values are checked
//! ([`ModelSpec::validate`]), which data it reads ([`ModelSpec::load`]), how it is shaped to them
//! ([`ModelSpec::build`]), and what a scenario's claims may rely on (an accuracy, a known
//! optimum, numbers at all). A model with a network implements [`NeuralNet`] (its parameter
//! layout, forward pass, FLOPs and memory terms) and is built as [`Model::Net`]; the synthetic
//! quadratic runs on the exact reference store of `dasim-sim` ([`crate::quadratic`]) and a
//! timing model on a store without numbers ([`crate::timing`]). Nothing else matches on the
//! kinds. Adding a model is a module with its network, an options type with its `ModelSpec`, and
//! one line in the table (see the contributors' chapter of the book).
//!
//! The traits and [`Model`] live in [`crate::spec`], which the kinds' modules import (this
//! module imports them), and are re-exported here.

use serde::{Deserialize, Serialize};

use dasim_sim::ConfigError;

use crate::lenet::LenetConfig;
use crate::mlp::MlpConfig;
use crate::quadratic::QuadraticConfig;
use crate::regression::{LinearConfig, SoftmaxConfig};
use crate::resnet::ResnetConfig;
use crate::timing::TimingConfig;
use crate::transformer::TransformerConfig;

pub use crate::spec::{Load, Loss, Model, ModelSpec, NeuralNet, QuadraticShape};

/// The registry: one line per kind. Generates [`ModelConfig`] (the serde schema of `[model]`,
/// tagged by `kind`) and the one dispatch from a kind to its [`ModelSpec`].
macro_rules! registry {
    ($( $(#[$doc:meta])* $kind:literal => $variant:ident($options:ty), )*) => {
        /// The `[model]` section of a scenario: its kind and options.
        ///
        /// ```toml
        /// [model]
        /// kind = "mlp"                  # mlp (default) | softmax | linear | lenet | resnet | transformer | quadratic | timing
        /// hidden = [64, 32]
        /// activation = "tanh"           # relu (default) | tanh
        /// ```
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "kind", deny_unknown_fields)]
        pub enum ModelConfig {
            $( $(#[$doc])* #[serde(rename = $kind)] $variant($options), )*
        }

        impl ModelConfig {
            /// Every kind, in registry order.
            pub const KINDS: &[&str] = &[$( $kind ),*];

            /// The name used in scenario files.
            pub fn name(&self) -> &'static str {
                match self {
                    $( ModelConfig::$variant(_) => $kind, )*
                }
            }

            /// The options, as their [`ModelSpec`].
            pub fn spec(&self) -> &dyn ModelSpec {
                match self {
                    $( ModelConfig::$variant(options) => options, )*
                }
            }
        }
    };
}

registry! {
    /// A multilayer perceptron; cross-entropy on class labels, squared error on real targets
    /// ([`crate::mlp`]).
    "mlp" => Mlp(MlpConfig),
    /// Multinomial logistic regression: one linear layer, softmax cross-entropy, and the L2
    /// term `½·l2·‖θ‖²`. Needs class labels ([`crate::regression`]).
    "softmax" => Softmax(SoftmaxConfig),
    /// Linear least squares: one linear layer with one output, the loss `½·(ŷ − y)²`, and the
    /// L2 term `½·l2·‖θ‖²`. Needs real targets ([`crate::regression`]).
    "linear" => Linear(LinearConfig),
    /// LeNet-5 (LeCun et al. 1998). Needs images ([`crate::lenet`]).
    "lenet" => Lenet(LenetConfig),
    /// A CIFAR ResNet (He et al. 2016, §4.2) with batch normalization. Needs images
    /// ([`crate::resnet`]).
    "resnet" => Resnet(ResnetConfig),
    /// A decoder-only transformer language model (GPT; [`crate::transformer`]), its output layer
    /// tied to the token embedding. Needs text (`[data] dataset = "text"`); the vocabulary comes
    /// from the tokenizer.
    "transformer" => Transformer(TransformerConfig),
    /// The synthetic quadratic `½ Σ_k a_k (x_k − 1)²` with curvatures spread geometrically over
    /// `[1, condition]` and Gaussian gradient noise; reads no data ([`crate::quadratic`]).
    "quadratic" => Quadratic(QuadraticConfig),
    /// A real model's size and cost without its numbers ([`crate::timing`]): every algorithm's
    /// schedule, messages and waits at paper scale, no gradient computed, no loss reported.
    "timing" => Timing(TimingConfig),
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig::Mlp(MlpConfig::default())
    }
}

impl ModelConfig {
    /// Checks every value that does not depend on the data (the fit between the model and the
    /// data is checked by [`crate::Problem::load`]).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.spec().validate()
    }
}
