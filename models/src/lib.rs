//! # dasim-models: real gradients for dasim
//!
//! Implements [`dasim_sim::store::ReplicaStore`] on burn: all workers' parameters in one stacked
//! `[workers, params]` tensor, gradient requests evaluated lazily and in batches
//! ([`store::BurnStore`]), on a zoo of models defined on that flat layout ([`model::Model`]: MLP,
//! softmax regression, linear least squares, LeNet-5, CIFAR ResNets with batch-norm state, a
//! transformer language model, and the synthetic quadratic, which runs on the exact reference
//! store: [`quadratic`], and timing-only models: [`timing`]); the
//! training objective and optimum of the convex models, for suboptimality ([`convex`]); datasets
//! (shipped digits, MNIST, Fashion-MNIST, CIFAR, CSV, generators), normalization, partitions
//! (IID, Dirichlet label skew, shards, unequal sizes), per-worker sampling and augmentation from
//! seeded streams ([`data`]); and the run-time choice of backend ([`backend`]).
//!
//! [`Problem`] ties them together: it loads a scenario's `[data]`, shapes its `[model]` to it,
//! and builds stores.
//!
//! Each model owns what is known of it: its module holds its options type (the `[model]` keys of
//! its kind), which implements [`ModelSpec`] (checks, the data it reads, how it is shaped to
//! them, what claims may rely on), and, where it has a network, the [`NeuralNet`] the store
//! computes on. [`ModelConfig`] is generated from one registry table in [`model`], a line per
//! kind; nothing else matches on the kinds.

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
pub mod presets;
pub mod quadratic;
pub mod regression;
pub mod resnet;
pub mod rows;
pub mod spec;
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
pub use lenet::{LeNet, LenetConfig};
pub use memory::{Bytes, MemoryEstimate};
pub use mlp::{Activation, Mlp, MlpConfig};
pub use model::{Loss, Model, ModelConfig, ModelSpec, NeuralNet};
pub use quadratic::{QuadraticConfig, QuadraticStore};
pub use regression::{LinearConfig, Regression, SoftmaxConfig};
pub use resnet::{ResNet, ResnetConfig};
pub use store::{BurnStore, Execution, RunStore, StoreStats};
pub use timing::{Preset, TimedAs, TimingConfig, TimingShape};
pub use timing_store::TimingStore;
pub use transformer::{Transformer, TransformerConfig, TransformerShape};

use std::path::Path;
use std::sync::Arc;

use dasim_sim::store::OptimizerConfig;

use crate::convex::Objective;
use crate::model::Load;

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
    /// real targets). A model that does not fit the data is a [`ConfigError`](dasim_sim::ConfigError): softmax
    /// regression needs class labels and linear least squares real targets (at `model.kind`),
    /// the convolutional models need images (at `data.dataset`), and the quadratic reads no
    /// data (at `data`).
    ///
    /// Every step is the model's own, through its [`ModelSpec`]: its values are checked
    /// ([`ModelSpec::validate`]), its data loaded ([`ModelSpec::load`]) and the model shaped to
    /// them ([`ModelSpec::build`]).
    pub fn load(
        model: &ModelConfig,
        data: &DataConfig,
        base_dir: &Path,
        seed: u64,
    ) -> Result<Self> {
        let spec = model.spec();
        spec.validate()?;
        let load = Load {
            kind: model.name(),
            data,
            base_dir,
            seed,
        };
        let Some(split) = spec.load(&load)? else {
            let (model, _) = spec.build(&load, &Problem::no_data().train)?;
            return Ok(Problem::without_data(model));
        };
        let (model, objective) = spec.build(&load, &split.train)?;
        Ok(Problem {
            model,
            partition: data.partition.clone(),
            augment: data.augment,
            objective,
            split,
        })
    }

    /// The empty split of a model that reads no data.
    fn no_data() -> Split {
        let empty = Dataset::regression(Vec::new(), 0, Vec::new());
        Split {
            train: empty.clone(),
            test: empty,
        }
    }

    /// A model that reads no data (the quadratic, a timing model): empty splits, the default
    /// partition and augmentation, no objective.
    fn without_data(model: Model) -> Self {
        Problem {
            split: Problem::no_data(),
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
        self.model.is_language_model()
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
            Model::Net(_) => Box::new(
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
            Model::Net(_) | Model::Quadratic(_) => self.split.train.epoch_samples(),
        }
    }

    /// Features of the training and test splits together (numbers), for the memory estimate.
    pub fn data_floats(&self) -> usize {
        self.split.train.features.len() + self.split.test.features.len()
    }
}
