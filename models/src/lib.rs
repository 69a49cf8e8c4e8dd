//! # dasim-models: real gradients for dasim
//!
//! Implements [`dasim_sim::params::ReplicaStore`] on burn: all workers' parameters in one stacked
//! `[workers, params]` tensor, gradient requests evaluated lazily and in batches
//! ([`store::BurnStore`]), on a zoo of models defined on that flat layout ([`model::Model`]: MLP,
//! softmax regression, linear least squares, LeNet-5, CIFAR ResNets with batch-norm state, and
//! the synthetic quadratic, which runs on the exact reference store: [`quadratic`]); the
//! training objective and optimum of the convex models, for suboptimality ([`convex`]); datasets
//! (shipped digits, MNIST, Fashion-MNIST, CIFAR, CSV, generators), normalization, partitions
//! (IID, Dirichlet label skew, shards, unequal sizes), per-worker sampling and augmentation from
//! seeded streams ([`data`]); and the run-time choice of backend ([`backend`]).
//!
//! [`Problem`] ties them together: it loads a scenario's `[data]`, shapes its `[model]` to it,
//! and builds stores.

pub mod backend;
pub mod convex;
pub mod data;
pub mod error;
pub mod layers;
pub mod lenet;
mod linalg;
pub mod memory;
pub mod mlp;
pub mod model;
pub mod quadratic;
pub mod resnet;
pub mod rows;
pub mod store;
pub mod timing;
pub mod timing_store;
pub mod transformer;

pub use backend::{Backend, BackendChoice};
pub use data::{
    Augment, DataConfig, Dataset, DatasetKind, ImageShape, Normalize, PartitionConfig, Sampler,
    Split, TargetKind,
};
pub use error::{Error, Result};
pub use lenet::LeNet;
pub use memory::{Bytes, MemoryEstimate};
pub use mlp::{Activation, Mlp};
pub use model::{Loss, Model, ModelConfig};
pub use quadratic::QuadraticStore;
pub use resnet::ResNet;
pub use store::{BurnStore, Execution, RunStore, StoreStats};
pub use timing::{Preset, TimedAs, TimingShape};
pub use timing_store::TimingStore;
pub use transformer::{Transformer, TransformerShape};

use std::path::Path;
use std::sync::Arc;

use dasim_sim::ConfigError;
use dasim_sim::params::OptimizerConfig;

use crate::convex::{ConvexKind, Objective};
use crate::model::QuadraticShape;

/// Everything needed to build stores for a scenario: the data split, the model shaped to it,
/// and how the data is partitioned and augmented.
pub struct Problem {
    /// Train/test split, normalized. Empty (no sample, no feature) for the quadratic, which
    /// reads no data.
    pub split: Split,
    /// The model.
    pub model: Model,
    /// How the training split is divided among workers.
    pub partition: PartitionConfig,
    /// Augmentation of training minibatches.
    pub augment: Augment,
    /// The training objective of a convex model with an optimum (softmax with `l2 > 0`,
    /// linear), shared by its stores.
    objective: Option<Arc<Objective>>,
}

impl Problem {
    /// Loads the data of `data` (paths relative to `base_dir`) and shapes `model` to it: input
    /// width from the features (or the image shape), output width from the classes (1 for
    /// real targets). A model that does not fit the data is a [`ConfigError`]: softmax
    /// regression needs class labels and linear least squares real targets (at `model.kind`),
    /// the convolutional models need images (at `data.dataset`), and the quadratic reads no
    /// data (at `data`).
    pub fn load(
        model: &ModelConfig,
        data: &DataConfig,
        base_dir: &Path,
        seed: u64,
    ) -> Result<Self> {
        model.validate()?;
        if let Some(shape) = model.timing_shape()? {
            // The minibatch size sets the step time (with FLOPs); nothing else of [data] applies.
            let batch_only = DataConfig {
                batch_size: DataConfig::default().batch_size,
                ..data.clone()
            };
            if batch_only.resolved() != DataConfig::default().resolved() {
                return Err(ConfigError::new(
                    "data",
                    "a timing model reads no data: it carries a model's size and cost, not its numbers",
                )
                .hint("keep only batch_size in [data] (it sets a step's samples)")
                .into());
            }
            return Ok(Problem::without_data(Model::Timing(shape)));
        }
        if let ModelConfig::Quadratic {
            dim,
            condition,
            noise,
        } = *model
        {
            if data.resolved() != DataConfig::default().resolved() {
                return Err(ConfigError::new(
                    "data",
                    "the quadratic model reads no data: its gradient noise comes from each worker's data stream",
                )
                .hint("remove the [data] section (batch size, dataset and partition do not apply)")
                .into());
            }
            return Ok(Problem::without_data(Model::Quadratic(QuadraticShape {
                dim,
                condition,
                noise,
            })));
        }
        let split = match model.transformer_shape(0) {
            Some(shape) => text_split(&shape, data, base_dir, seed)?,
            None => {
                if data.kind() == DatasetKind::Text {
                    return Err(ConfigError::new(
                        "model.kind",
                        format!(
                            "`{}` does not read text: a text's windows train a language model",
                            model.name()
                        ),
                    )
                    .hint("use kind = \"transformer\"")
                    .into());
                }
                data::load(data, base_dir, seed)?
            }
        };
        let train = &split.train;
        let classes = train.classes();
        let outputs = train.outputs();
        let kind = data.kind();
        let (model, objective) = match model {
            ModelConfig::Mlp { hidden, activation } => {
                let mut widths = vec![train.dim];
                widths.extend(hidden);
                widths.push(outputs);
                (Model::Mlp(Mlp::new(&widths, *activation)), None)
            }
            ModelConfig::Softmax { l2 } => {
                let Some(classes) = classes else {
                    return Err(ConfigError::new(
                        "model.kind",
                        format!("softmax regression needs class labels; `{kind}` has real-valued targets"),
                    )
                    .hint("use kind = \"linear\" (least squares) for real targets")
                    .into());
                };
                // Without L2 the optimum may be at infinity: no objective to compare with.
                let objective = (*l2 > 0.0).then(|| {
                    Arc::new(Objective::new(
                        ConvexKind::Softmax(classes),
                        train.clone(),
                        *l2,
                    ))
                });
                (Model::softmax(train.dim, classes, *l2), objective)
            }
            ModelConfig::Linear { l2 } => {
                if classes.is_some() {
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
                let objective = Objective::new(ConvexKind::LeastSquares, train.clone(), *l2);
                (Model::linear(train.dim, *l2), Some(Arc::new(objective)))
            }
            ModelConfig::Lenet {} | ModelConfig::Resnet { .. } => {
                let shape = image_shape(model, data, train)?;
                (conv_model(model, shape, outputs)?, None)
            }
            ModelConfig::Transformer { .. } => {
                let shape = model.transformer_shape(outputs).expect("a transformer");
                (Model::Transformer(Transformer::new(shape)), None)
            }
            ModelConfig::Quadratic { .. } | ModelConfig::Timing { .. } => {
                unreachable!("handled above")
            }
        };
        Ok(Problem {
            model,
            partition: data.partition.clone(),
            augment: data.augment,
            objective,
            split,
        })
    }

    /// A model that reads no data (the quadratic, a timing model): empty splits, the default
    /// partition and augmentation, no objective.
    fn without_data(model: Model) -> Self {
        let empty = Dataset::regression(Vec::new(), 0, Vec::new());
        Problem {
            split: Split {
                train: empty.clone(),
                test: empty,
            },
            model,
            partition: PartitionConfig::default(),
            augment: Augment::default(),
            objective: None,
        }
    }

    /// Whether the problem has data (everything but the quadratic and timing models).
    pub fn has_data(&self) -> bool {
        !matches!(self.model, Model::Quadratic(_) | Model::Timing(_))
    }

    /// Whether the model is a language model (a transformer on text): its loss is in nats per
    /// token, and its perplexity `exp(loss)` is reported beside it.
    pub fn is_language_model(&self) -> bool {
        matches!(self.model, Model::Transformer(_))
    }

    /// Whether a run computes gradients and losses (everything but a timing model).
    pub fn computes(&self) -> bool {
        !matches!(self.model, Model::Timing(_))
    }

    /// The training objective of softmax regression with `l2 > 0` and of linear least squares
    /// (see [`convex`]); `None` for the other models.
    pub fn objective(&self) -> Option<&Objective> {
        self.objective.as_deref()
    }

    /// `f*`, the minimum of the training objective: softmax regression with `l2 > 0`, linear
    /// least squares (unless singular), and the quadratic (0). Computed on the first call (a
    /// full-batch run for softmax, see [`convex`]) and kept.
    pub fn optimum(&self) -> Option<f64> {
        match &self.model {
            Model::Quadratic(_) => Some(0.0),
            _ => self.objective.as_ref()?.optimum().map(|o| o.value),
        }
    }

    /// The shards of `workers` workers under the configured partition (see
    /// [`data::partition()`]): every training sample in exactly one shard, none empty. For the
    /// quadratic, which has no data, `workers` empty shards.
    pub fn partition(&self, workers: usize, seed: u64) -> Result<Vec<Vec<usize>>> {
        if !self.has_data() {
            return Ok(vec![Vec::new(); workers]);
        }
        data::partition(&self.partition, &self.split.train, workers, seed)
    }

    /// A fresh store: `workers` identical replicas, with shards from [`Problem::partition`].
    pub fn try_store(
        &self,
        device: burn::tensor::Device,
        workers: usize,
        batch: usize,
        optimizer: OptimizerConfig,
        seed: u64,
    ) -> Result<BurnStore> {
        let shards = self.partition(workers, seed)?;
        Ok(self.store_with_shards(device, shards, batch, optimizer, seed))
    }

    /// [`Problem::try_store`] for a partition known to be valid.
    ///
    /// # Panics
    /// If the partition fails (for example an empty shard); call [`Problem::partition`] or
    /// [`Problem::try_store`] first to report that as an error.
    pub fn store(
        &self,
        device: burn::tensor::Device,
        workers: usize,
        batch: usize,
        optimizer: OptimizerConfig,
        seed: u64,
    ) -> BurnStore {
        self.try_store(device, workers, batch, optimizer, seed)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A fresh burn store with the given shards (one per worker, none empty), with the
    /// problem's augmentation and (for convex models) objective.
    ///
    /// # Panics
    /// For the quadratic, which runs on [`QuadraticStore`]: see [`Problem::run_store`].
    pub fn store_with_shards(
        &self,
        device: burn::tensor::Device,
        shards: Vec<Vec<usize>>,
        batch: usize,
        optimizer: OptimizerConfig,
        seed: u64,
    ) -> BurnStore {
        let store = BurnStore::new(
            device,
            self.model.clone(),
            &self.split,
            shards,
            batch,
            optimizer,
            seed,
        )
        .with_augment(self.augment, &self.split.train);
        match &self.objective {
            Some(o) => store.with_objective(Arc::clone(o)),
            None => store,
        }
    }

    /// The store a run drives, with one replica per shard: a [`BurnStore`] on `device` executing
    /// as `execution` says, or for the quadratic a [`QuadraticStore`] (exact, on the host;
    /// `device`, `batch` and `execution` unused).
    pub fn run_store(
        &self,
        device: burn::tensor::Device,
        shards: Vec<Vec<usize>>,
        batch: usize,
        optimizer: OptimizerConfig,
        seed: u64,
        execution: Execution,
    ) -> Box<dyn RunStore> {
        match &self.model {
            Model::Quadratic(shape) => {
                Box::new(QuadraticStore::new(*shape, shards.len(), optimizer, seed))
            }
            Model::Timing(shape) => Box::new(TimingStore::new(*shape, shards.len(), batch)),
            _ => Box::new(
                self.store_with_shards(device, shards, batch, optimizer, seed)
                    .with_threads(execution.threads)
                    .with_max_batch(execution.max_batch),
            ),
        }
    }

    /// Samples in an epoch, as a run counts them: a timing model's `train_samples`, else the
    /// training split's ([`Dataset::epoch_samples`]: a text's tokens over its window's
    /// positions).
    pub fn train_samples(&self) -> usize {
        match &self.model {
            Model::Timing(shape) => usize::try_from(shape.train_samples).unwrap_or(usize::MAX),
            _ => self.split.train.epoch_samples(),
        }
    }

    /// Features of the training and test splits together (numbers), for the memory estimate.
    pub fn data_floats(&self) -> usize {
        self.split.train.features.len() + self.split.test.features.len()
    }
}

/// The text a transformer trains on, in windows of `[data] context` tokens (default: the
/// model's), or an error: at `model.kind` for data that is not text, at `data.context` for a
/// window longer than the model's context.
fn text_split(
    shape: &TransformerShape,
    data: &DataConfig,
    base_dir: &Path,
    seed: u64,
) -> Result<Split> {
    if data.kind() != DatasetKind::Text {
        return Err(ConfigError::new(
            "model.kind",
            format!(
                "a transformer is a language model and needs text; `{}` is not text",
                data.kind()
            ),
        )
        .hint("[data] dataset = \"text\" with path = a UTF-8 file (dasim ships models/data/tinyshakespeare.txt.gz)")
        .into());
    }
    if let Some(context) = data.context
        && context > shape.context
    {
        return Err(ConfigError::new(
            "data.context",
            format!(
                "windows of {context} tokens are longer than the model's context of {}",
                shape.context
            ),
        )
        .hint("raise [model] context (its position embeddings), or shorten data.context")
        .into());
    }
    let data = DataConfig {
        context: Some(data.context.unwrap_or(shape.context)),
        ..data.clone()
    };
    data::load(&data, base_dir, seed)
}

/// The image shape a convolutional model needs, or an error at `data.dataset` (or
/// `data.csv.shape`).
fn image_shape(model: &ModelConfig, data: &DataConfig, train: &Dataset) -> Result<ImageShape> {
    train.shape.ok_or_else(|| {
        let kind = data.kind();
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
                model.name()
            ),
        )
        .hint(hint)
        .into()
    })
}

/// LeNet or a ResNet for images of `shape` and `outputs` outputs, or an error at the field
/// that does not fit.
fn conv_model(model: &ModelConfig, shape: ImageShape, outputs: usize) -> Result<Model> {
    let size = format!("{}×{}×{}", shape.channels, shape.height, shape.width);
    match *model {
        ModelConfig::Lenet {} => {
            lenet::LeNet::check(shape).map_err(|e| {
                ConfigError::new("data.dataset", format!("{e} (the images are {size})"))
                    .hint("LeNet-5 takes any image of at least 4×4 pixels")
            })?;
            Ok(Model::LeNet(lenet::LeNet::new(shape, outputs)))
        }
        ModelConfig::Resnet { depth, width } => {
            resnet::ResNet::check(shape, depth, width).map_err(|(arg, e)| {
                let field = match arg {
                    "depth" => "model.depth",
                    "width" => "model.width",
                    _ => "data.dataset",
                };
                ConfigError::new(field, e)
            })?;
            Ok(Model::ResNet(resnet::ResNet::new(
                shape, outputs, depth, width,
            )))
        }
        _ => unreachable!("not a convolutional model"),
    }
}
