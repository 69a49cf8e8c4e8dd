//! Datasets, the train/test split, normalization, partitioning across workers, minibatch
//! sampling and augmentation.
//!
//! Everything here happens on the host, from seeded streams, so the same scenario gives the same
//! split, shards, minibatches and augmentations on every backend.
//!
//! | stream (kind, id) | used for |
//! |-------------------|----------|
//! | Init, 1 | shuffle before the train/test split |
//! | Init, 2 | the partition across workers (every kind) |
//! | Init, 3 | the synthetic generators |
//! | Data, `i` | worker `i`'s minibatch order ([`Sampler`]) |
//! | Data, `2^32 + i` | worker `i`'s augmentation draws ([`Sampler::augment_stream`]) |
//!
//! - **Datasets** ([`Dataset`]): features row-major `f32` `[n, dim]`; images keep their
//!   [`ImageShape`] and are stored CHW per sample (`dim = c·h·w`). Targets are class labels or
//!   real values ([`TargetKind`]). Sources: the shipped digits, MNIST and Fashion-MNIST (IDX,
//!   optionally gzipped), CIFAR-10 and CIFAR-100 (binary version), CSV, and two generators
//!   (Gaussian mixture, linear regression). See [`formats`] and [`synthetic`].
//! - **Split**: MNIST, Fashion-MNIST and CIFAR use their official train/test files. Other datasets
//!   shuffle all samples with stream (Init, 1) and hold out the last
//!   `round(len · test_fraction)` (clamped to `1..len−1`).
//! - **Normalization** ([`Normalize`]): statistics of the training split, applied to both splits;
//!   per feature column or per image channel. A statistic is a mean and a population standard
//!   deviation in `f64`; a standard deviation below `1e-6` (variance below `1e-12`) is replaced
//!   by 1 (the feature is only centred).
//! - **Partition** ([`partition()`]): IID, Dirichlet(α) label skew, k shards per worker, unequal
//!   sizes; written as `partition.csv` by `dasim-reports`.
//! - **Sampling** ([`Sampler`]): each worker draws minibatches from its shard with its own
//!   stream; the shard is reshuffled at the start of every local epoch, and a minibatch that
//!   runs past the end continues into the next epoch's order.
//! - **Augmentation** ([`Augment`]): random crop with zero padding and horizontal flip, drawn
//!   per sample from the worker's augmentation stream, applied on the host.

mod config;
pub mod formats;
mod partition;
mod sampler;
pub mod synthetic;
pub mod text;

use std::path::Path;

use rand::seq::SliceRandom;

use dasim_sim::clock::rng::{StreamKind, stream};

use dasim_sim::ConfigError;

use crate::error::{Error, Result};

pub use config::{
    Cifar100Labels, CsvOptions, CsvTarget, DEFAULT_MIXTURE_CLASSES, DEFAULT_MIXTURE_SEPARATION,
    DEFAULT_REGRESSION_NOISE, DEFAULT_SYNTHETIC_DIM, DEFAULT_SYNTHETIC_SAMPLES,
    DEFAULT_TEST_FRACTION, DataConfig, DatasetKind, Normalize, PartitionConfig, SyntheticConfig,
};
pub use partition::{class_counts, partition, partition_iid};
pub use sampler::{AUGMENT_STREAM_OFFSET, Augment, Sampler};

/// The shape of one image sample, stored channel-major (CHW): the value of channel `c`, row `y`,
/// column `x` is feature `(c·height + y)·width + x`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageShape {
    /// Channels (1 for grey, 3 for RGB).
    pub channels: usize,
    /// Rows.
    pub height: usize,
    /// Columns.
    pub width: usize,
}

impl ImageShape {
    /// Features per sample: `channels · height · width`.
    pub fn len(&self) -> usize {
        self.channels * self.height * self.width
    }

    /// Whether the shape holds no value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a dataset's targets are, so the store can pick the loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKind {
    /// One class label per sample, in `0..classes` ([`Dataset::labels`]): softmax cross-entropy.
    Classes(usize),
    /// One real value per sample ([`Dataset::values`]): squared error.
    Real,
    /// Text ([`text`]): every sample is a window of tokens in `0..vocab`, each token but the
    /// last the input of a position whose target is the next token (softmax cross-entropy per
    /// position).
    Tokens(usize),
}

/// A dataset held on the host.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    /// `len × dim` features, row-major; CHW per sample for images.
    pub features: Vec<f32>,
    /// Features per sample.
    pub dim: usize,
    /// Features from one sample's start to the next's: `dim`, but for the windows of a text,
    /// which overlap (sample `i` is `features[i·stride .. i·stride + dim]`).
    pub stride: usize,
    /// The image shape (`shape.len() == dim`), or `None` for plain feature vectors.
    pub shape: Option<ImageShape>,
    /// Class labels or real targets.
    pub target: TargetKind,
    /// With [`TargetKind::Classes`]: one label per sample, in `0..classes`; otherwise empty.
    pub labels: Vec<u32>,
    /// With [`TargetKind::Real`]: one target per sample; otherwise empty.
    pub values: Vec<f32>,
}

impl Dataset {
    /// A classification dataset.
    pub fn classification(
        features: Vec<f32>,
        dim: usize,
        labels: Vec<u32>,
        classes: usize,
    ) -> Self {
        debug_assert_eq!(features.len(), labels.len() * dim);
        Dataset {
            features,
            dim,
            stride: dim,
            shape: None,
            target: TargetKind::Classes(classes),
            labels,
            values: Vec::new(),
        }
    }

    /// A regression dataset.
    pub fn regression(features: Vec<f32>, dim: usize, values: Vec<f32>) -> Self {
        debug_assert_eq!(features.len(), values.len() * dim);
        Dataset {
            features,
            dim,
            stride: dim,
            shape: None,
            target: TargetKind::Real,
            labels: Vec::new(),
            values,
        }
    }

    /// The windows of `window` tokens of `tokens` (in `0..vocab`), one every `stride` tokens:
    /// the features are the token stream itself (ids as floats, exact below 2²⁴), which the
    /// windows view ([`text`]).
    pub fn text(tokens: &[u32], window: usize, stride: usize, vocab: usize) -> Self {
        assert!(window >= 2 && stride >= 1, "windows of at least two tokens");
        Dataset {
            features: tokens.iter().map(|&t| t as f32).collect(),
            dim: window,
            stride,
            shape: None,
            target: TargetKind::Tokens(vocab),
            labels: Vec::new(),
            values: Vec::new(),
        }
    }

    /// This dataset with an image shape (`shape.len()` must equal `dim`).
    pub fn with_shape(mut self, shape: ImageShape) -> Self {
        assert_eq!(
            shape.len(),
            self.dim,
            "image shape and feature count differ"
        );
        self.shape = Some(shape);
        self
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        match self.target {
            TargetKind::Classes(_) => self.labels.len(),
            TargetKind::Real => self.values.len(),
            TargetKind::Tokens(_) if self.features.len() < self.dim => 0,
            TargetKind::Tokens(_) => (self.features.len() - self.dim) / self.stride + 1,
        }
    }

    /// Whether there is no sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of classes, or `None` for real targets and text.
    pub fn classes(&self) -> Option<usize> {
        match self.target {
            TargetKind::Classes(c) => Some(c),
            TargetKind::Real | TargetKind::Tokens(_) => None,
        }
    }

    /// Width of a model's output: the number of classes, the vocabulary of a text, or 1 for
    /// real targets.
    pub fn outputs(&self) -> usize {
        match self.target {
            TargetKind::Classes(c) | TargetKind::Tokens(c) => c,
            TargetKind::Real => 1,
        }
    }

    /// Samples in an epoch: the samples, but for a text, whose windows overlap, the windows
    /// it takes to predict as many tokens as the training text holds (`tokens / (window −
    /// 1)`, at least 1): an epoch of a language model is a pass over its tokens.
    pub fn epoch_samples(&self) -> usize {
        match self.target {
            TargetKind::Tokens(_) => (self.features.len() / (self.dim - 1)).max(1),
            _ => self.len(),
        }
    }

    /// Positions a sample's loss averages over: a window's predicted tokens (`dim − 1`), or 1.
    pub fn positions_per_sample(&self) -> usize {
        match self.target {
            TargetKind::Tokens(_) => self.dim - 1,
            _ => 1,
        }
    }

    /// The features of sample `i`.
    pub fn sample(&self, i: usize) -> &[f32] {
        &self.features[i * self.stride..i * self.stride + self.dim]
    }

    /// The samples at `indices`, in that order.
    pub fn subset(&self, indices: &[usize]) -> Dataset {
        let mut features = Vec::with_capacity(indices.len() * self.dim);
        for &i in indices {
            features.extend_from_slice(self.sample(i));
        }
        fn pick<T: Copy>(v: &[T], indices: &[usize]) -> Vec<T> {
            if v.is_empty() {
                Vec::new()
            } else {
                indices.iter().map(|&i| v[i]).collect()
            }
        }
        Dataset {
            features,
            dim: self.dim,
            stride: self.dim,
            shape: self.shape,
            target: self.target,
            labels: pick(&self.labels, indices),
            values: pick(&self.values, indices),
        }
    }
}

/// A train/test split.
#[derive(Clone, Debug)]
pub struct Split {
    /// Training samples.
    pub train: Dataset,
    /// Held-out samples.
    pub test: Dataset,
}

/// Loads the dataset a `[data]` section names (paths relative to `base_dir`), splits it
/// (official split, or `test_fraction` with stream (Init, 1); a text: its last `test_fraction`)
/// and normalizes it. A text needs `context` set (a scenario's [`crate::Problem`] sets the
/// model's).
///
/// The configuration should have passed [`DataConfig::validate`]; the data itself is checked
/// here, and a missing or malformed file is an [`Error::Data`] naming the file.
pub fn load(cfg: &DataConfig, base_dir: &Path, seed: u64) -> Result<Split> {
    cfg.validate()?;
    let path = cfg.path.as_ref().map(|p| {
        if p.is_absolute() {
            p.clone()
        } else {
            base_dir.join(p)
        }
    });
    let dir = || path.clone().expect("validated: this dataset has a path");
    let whole = |data: Dataset| split(&data, cfg.test_fraction(), seed);
    let mut split = match cfg.kind() {
        DatasetKind::Digits => whole(formats::digits()?),
        DatasetKind::Csv => {
            let p = dir();
            let mut data = formats::read_csv(&p, &cfg.csv_options())?;
            if let Some(shape) = cfg.csv_shape() {
                if shape.len() != data.dim {
                    return Err(Error::Data {
                        path: p,
                        reason: format!(
                            "{} feature columns, but data.csv.shape [{}, {}, {}] needs {}",
                            data.dim,
                            shape.channels,
                            shape.height,
                            shape.width,
                            shape.len()
                        ),
                    });
                }
                data = data.with_shape(shape);
            }
            if data.len() < 2 {
                return Err(Error::Data {
                    path: p,
                    reason: "one sample cannot be split into training and test sets".into(),
                });
            }
            whole(data)
        }
        DatasetKind::Mnist | DatasetKind::FashionMnist => formats::read_mnist(&dir())?,
        DatasetKind::Cifar10 => formats::read_cifar10(&dir())?,
        DatasetKind::Cifar100 => formats::read_cifar100(&dir(), cfg.labels.unwrap_or_default())?,
        DatasetKind::Text => {
            let context = cfg.context.ok_or_else(|| {
                ConfigError::new(
                    "data.context",
                    "a text is cut into windows of context + 1 tokens: set data.context",
                )
            })?;
            text::load_text(&dir(), context, cfg.test_fraction())?.0
        }
        DatasetKind::GaussianMixture | DatasetKind::LinearRegression => {
            let data = synthetic::generate(&cfg.synthetic_params(), cfg.kind(), seed);
            whole(match cfg.synthetic_shape() {
                Some(shape) => data.with_shape(shape),
                None => data,
            })
        }
    };
    normalize(&mut split, cfg.normalization());
    Ok(split)
}

/// Shuffles with stream (Init, 1) and holds out the last `round(len · test_fraction)` samples
/// (clamped to `1..len−1`) as the test split. No normalization. `data` needs two samples.
pub fn split(data: &Dataset, test_fraction: f64, seed: u64) -> Split {
    assert!(data.len() >= 2, "a split needs at least two samples");
    let mut order: Vec<usize> = (0..data.len()).collect();
    order.shuffle(&mut stream(seed, StreamKind::Init, 1));
    let test_len = ((data.len() as f64) * test_fraction).round() as usize;
    let test_len = test_len.clamp(1, data.len() - 1);
    let (train_idx, test_idx) = order.split_at(data.len() - test_len);
    Split {
        train: data.subset(train_idx),
        test: data.subset(test_idx),
    }
}

/// Normalizes both splits with statistics of the training split. `PerChannel` needs an image
/// shape (without one it standardizes every feature, which is the per-channel rule for images
/// of one pixel).
pub fn normalize(split: &mut Split, how: Normalize) {
    let d = split.train.dim;
    // Groups of feature indices that share one statistic.
    let groups: Vec<Vec<usize>> = match (how, split.train.shape) {
        (Normalize::None, _) => return,
        (Normalize::PerChannel, Some(s)) => {
            let plane = s.height * s.width;
            (0..s.channels)
                .map(|c| (c * plane..(c + 1) * plane).collect())
                .collect()
        }
        _ => (0..d).map(|c| vec![c]).collect(),
    };
    let n = split.train.len();
    for group in groups {
        let mut sum = 0.0f64;
        for row in split.train.features.chunks_exact(d) {
            for &c in &group {
                sum += f64::from(row[c]);
            }
        }
        let count = (n * group.len()) as f64;
        let mean = sum / count;
        let mut sq = 0.0f64;
        for row in split.train.features.chunks_exact(d) {
            for &c in &group {
                let v = f64::from(row[c]) - mean;
                sq += v * v;
            }
        }
        let var = sq / count;
        let std = if var > 1e-12 { var.sqrt() } else { 1.0 };
        for ds in [&mut split.train, &mut split.test] {
            for row in ds.features.chunks_exact_mut(d) {
                for &c in &group {
                    row[c] = ((f64::from(row[c]) - mean) / std) as f32;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digits_split() -> Split {
        load(&DataConfig::default(), Path::new("."), 3).unwrap()
    }

    #[test]
    fn split_is_disjoint_and_standardized() {
        let d = formats::digits().unwrap();
        let s = digits_split();
        assert_eq!(s.train.len() + s.test.len(), d.len());
        assert_eq!(s.test.len(), 359);
        // Column 20 has spread; its training mean is ~0 after standardization.
        let m: f64 = s
            .train
            .features
            .iter()
            .skip(20)
            .step_by(64)
            .map(|&v| f64::from(v))
            .sum::<f64>()
            / s.train.len() as f64;
        assert!(m.abs() < 1e-4, "{m}");
    }

    #[test]
    fn per_channel_normalization_pools_the_pixels_of_a_channel() {
        let cfg = DataConfig {
            normalize: Some(Normalize::PerChannel),
            ..Default::default()
        };
        let s = load(&cfg, Path::new("."), 3).unwrap();
        let n = s.train.features.len() as f64;
        let mean = s.train.features.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let var = s
            .train
            .features
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / n;
        assert!(
            mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-4,
            "{mean} {var}"
        );
        // A per-column statistic would have made column 0 (always 0 in digits) exactly 0.
        assert!(s.train.features.iter().step_by(64).all(|&v| v < -0.5));
    }
}
