//! The two regularized linear models: softmax regression (`kind = "softmax"`) and linear least
//! squares (`kind = "linear"`).
//!
//! Both are one linear layer on the MLP's layout ([`crate::mlp`]: an MLP without hidden layers)
//! and add the L2 term `½·l2·‖θ‖²` over the whole row (weights and biases) to their loss, which
//! makes their optimum unique where `l2 > 0` (least squares also without it, unless singular):
//! the training objective and its optimum live in [`crate::convex`], for the suboptimality
//! `f(x̄) − f*`. Softmax regression needs class labels, least squares real targets.

use std::ops::Range;
use std::sync::Arc;

use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

use dasim_sim::ConfigError;
use dasim_sim::clock::rng::Stream;

use crate::convex::{ConvexKind, Objective};
use crate::data::{Dataset, DatasetKind};
use crate::mlp::{Activation, Mlp};
use crate::spec::{Load, Loss, Model, ModelSpec, NeuralNet};

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// An error at `model.l2` unless `l2` is zero or positive.
fn check_l2(l2: f64) -> Result<(), ConfigError> {
    if !(l2.is_finite() && l2 >= 0.0) {
        return Err(ConfigError::new(
            "model.l2",
            format!("l2 must be zero or positive, got {l2}"),
        ));
    }
    Ok(())
}

/// `[model] kind = "softmax"`: multinomial logistic regression. Needs class labels.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SoftmaxConfig {
    /// L2 coefficient; above zero the optimum is unique and computed for the suboptimality.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub l2: f64,
}

impl ModelSpec for SoftmaxConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        check_l2(self.l2)
    }

    fn build(
        &self,
        load: &Load<'_>,
        train: &Dataset,
    ) -> crate::Result<(Model, Option<Arc<Objective>>)> {
        let kind = load.data.kind();
        let Some(classes) = train.classes() else {
            return Err(ConfigError::new(
                "model.kind",
                format!("softmax regression needs class labels; `{kind}` has real-valued targets"),
            )
            .hint("use kind = \"linear\" (least squares) for real targets")
            .into());
        };
        // Without L2 the optimum may be at infinity: no objective to compare with.
        let objective = (self.l2 > 0.0).then(|| {
            Arc::new(Objective::new(
                ConvexKind::Softmax(classes),
                train.clone(),
                self.l2,
            ))
        });
        let model = Model::net(Regression::softmax(train.dim, classes, self.l2));
        Ok((model, objective))
    }

    fn optimum(&self) -> Option<bool> {
        Some(self.l2 > 0.0)
    }
}

/// `[model] kind = "linear"`: linear least squares, ridge regression above `l2 = 0`. Needs
/// real targets.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinearConfig {
    /// L2 coefficient (ridge regression above zero).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub l2: f64,
}

impl ModelSpec for LinearConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        check_l2(self.l2)
    }

    fn build(
        &self,
        load: &Load<'_>,
        train: &Dataset,
    ) -> crate::Result<(Model, Option<Arc<Objective>>)> {
        let kind = load.data.kind();
        if train.classes().is_some() {
            return Err(ConfigError::new(
                "model.kind",
                format!("linear least squares fits real-valued targets; `{kind}` has class labels"),
            )
            .hint(if kind == DatasetKind::Csv {
                "use kind = \"softmax\" for classes, or set [data.csv] target = \"real\""
            } else {
                "use kind = \"softmax\" for classes, or dataset = \"linear-regression\""
            })
            .into());
        }
        let objective = Objective::new(ConvexKind::LeastSquares, train.clone(), self.l2);
        let model = Model::net(Regression::linear(train.dim, self.l2));
        Ok((model, Some(Arc::new(objective))))
    }

    fn accuracy(&self) -> Option<bool> {
        Some(false)
    }

    fn optimum(&self) -> Option<bool> {
        Some(true)
    }
}

/// Softmax regression or least squares: one linear layer and the L2 coefficient.
#[derive(Clone, Debug, PartialEq)]
pub struct Regression {
    /// The linear layer (an MLP without hidden layers).
    layer: Mlp,
    /// `l2` of `½·l2·‖θ‖²`.
    l2: f64,
    /// Cross-entropy for softmax regression, squared error for least squares.
    loss: Loss,
}

impl Regression {
    /// Softmax regression from `inputs` features to `classes` classes.
    pub fn softmax(inputs: usize, classes: usize, l2: f64) -> Self {
        Regression {
            layer: Mlp::new(&[inputs, classes], Activation::Relu),
            l2,
            loss: Loss::CrossEntropy,
        }
    }

    /// Least squares on `inputs` features.
    pub fn linear(inputs: usize, l2: f64) -> Self {
        Regression {
            layer: Mlp::new(&[inputs, 1], Activation::Relu),
            l2,
            loss: Loss::SquaredError,
        }
    }

    /// The linear layer.
    pub fn layer(&self) -> &Mlp {
        &self.layer
    }
}

impl NeuralNet for Regression {
    fn name(&self) -> &'static str {
        match self.loss {
            Loss::CrossEntropy => "softmax",
            Loss::SquaredError => "linear",
        }
    }

    fn num_params(&self) -> usize {
        self.layer.num_params()
    }

    fn matrices(&self) -> Vec<dasim_sim::store::Matrix> {
        self.layer.matrices()
    }

    /// None: the one layer is the output layer.
    fn hidden_matrices(&self) -> Vec<dasim_sim::store::Hidden> {
        self.layer.hidden_matrices()
    }

    fn tensors(&self) -> Vec<std::ops::Range<usize>> {
        self.layer.tensors()
    }

    fn forward_flops(&self) -> u64 {
        self.layer.forward_flops()
    }

    fn layer_starts(&self) -> Vec<(usize, u64)> {
        self.layer.layer_starts()
    }

    fn activations_per_sample(&self) -> u64 {
        self.layer.activations_per_sample()
    }

    fn l2(&self) -> f64 {
        self.l2
    }

    fn init(&self, rng: &mut Stream) -> Vec<f32> {
        self.layer.init(rng)
    }

    fn blocks(&self) -> Vec<Range<usize>> {
        self.layer.blocks()
    }

    /// As the MLP (see [`Model::fuses_means`]).
    fn fuses_means(&self) -> bool {
        true
    }

    fn forward_blocks(
        &self,
        blocks: Vec<Tensor<2>>,
        x: Tensor<3>,
        _train: bool,
    ) -> (Tensor<3>, Option<Tensor<2>>) {
        (self.layer.forward_blocks(&blocks, x), None)
    }

    fn forward(
        &self,
        params: Tensor<2>,
        x: Tensor<3>,
        _train: bool,
    ) -> (Tensor<3>, Option<Tensor<2>>) {
        (self.layer.forward(params, x), None)
    }
}
