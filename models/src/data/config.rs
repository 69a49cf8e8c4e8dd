//! The `[data]` section of a scenario: which dataset, how it is normalized, augmented,
//! partitioned across workers and batched.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use dasim_sim::ConfigError;

use super::ImageShape;
use super::sampler::Augment;

fn default_batch_size() -> usize {
    32
}

/// The default `test_fraction` of datasets without an official test split.
pub const DEFAULT_TEST_FRACTION: f64 = 0.2;
/// The default `test_fraction` of a text (nanoGPT's: the last 10% of the characters).
pub const DEFAULT_TEXT_TEST_FRACTION: f64 = 0.1;
/// Default number of samples of a synthetic dataset.
pub const DEFAULT_SYNTHETIC_SAMPLES: usize = 2000;
/// Default feature count of a synthetic dataset.
pub const DEFAULT_SYNTHETIC_DIM: usize = 20;
/// Default number of classes of a Gaussian mixture.
pub const DEFAULT_MIXTURE_CLASSES: usize = 4;
/// Default distance between Gaussian-mixture means, in within-class standard deviations.
pub const DEFAULT_MIXTURE_SEPARATION: f64 = 3.0;
/// Default standard deviation of the linear-regression noise.
pub const DEFAULT_REGRESSION_NOISE: f64 = 0.5;

/// Which dataset a scenario trains on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DatasetKind {
    /// The UCI optical digits, shipped with dasim (1,797 samples of 8×8, 10 classes).
    Digits,
    /// MNIST from a directory of IDX files (optionally gzipped); official train/test split.
    Mnist,
    /// Fashion-MNIST, the same format as MNIST.
    FashionMnist,
    /// CIFAR-10, binary version, from a directory; official train/test split.
    Cifar10,
    /// CIFAR-100, binary version, from a directory; official train/test split.
    Cifar100,
    /// A CSV file: feature columns and a label column.
    Csv,
    /// Generated: a mixture of Gaussians, one per class.
    GaussianMixture,
    /// Generated: linear regression with a known optimum and Gaussian noise.
    LinearRegression,
    /// A UTF-8 text file (optionally gzipped), tokenized by character, for a language model
    /// ([`super::text`]).
    Text,
}

impl DatasetKind {
    /// The name used in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            DatasetKind::Digits => "digits",
            DatasetKind::Mnist => "mnist",
            DatasetKind::FashionMnist => "fashion-mnist",
            DatasetKind::Cifar10 => "cifar10",
            DatasetKind::Cifar100 => "cifar100",
            DatasetKind::Csv => "csv",
            DatasetKind::GaussianMixture => "gaussian-mixture",
            DatasetKind::LinearRegression => "linear-regression",
            DatasetKind::Text => "text",
        }
    }

    /// Whether the dataset comes with its own train/test split (then `test_fraction` does not
    /// apply).
    pub fn has_official_split(self) -> bool {
        matches!(
            self,
            DatasetKind::Mnist
                | DatasetKind::FashionMnist
                | DatasetKind::Cifar10
                | DatasetKind::Cifar100
        )
    }

    /// Whether the dataset is read from a directory given by `path`.
    pub fn reads_directory(self) -> bool {
        self.has_official_split()
    }

    /// Whether the dataset is generated (takes a `[data.synthetic]` table).
    pub fn is_synthetic(self) -> bool {
        matches!(
            self,
            DatasetKind::GaussianMixture | DatasetKind::LinearRegression
        )
    }
}

impl fmt::Display for DatasetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How features are normalized, with statistics of the training split applied to both splits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Normalize {
    /// Features are used as loaded (image pixels are scaled to `[0, 1]` by the loaders).
    None,
    /// Every feature column: `x ← (x − mean) / std`.
    StandardizeFeatures,
    /// Every image channel, over all its pixels: `x ← (x − mean_c) / std_c`.
    PerChannel,
}

/// Which CIFAR-100 label is the class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cifar100Labels {
    /// The 100 fine classes.
    #[default]
    Fine,
    /// The 20 coarse superclasses.
    Coarse,
}

/// What the target column of a CSV file holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CsvTarget {
    /// A class index, a non-negative integer.
    #[default]
    Class,
    /// A real number (regression).
    Real,
}

fn default_label_column() -> i64 {
    -1
}

/// `[data.csv]`: how to read a CSV file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsvOptions {
    /// The label (target) column, 0-based; negative counts from the end (`-1`, the default, is
    /// the last column). Every other column is a feature.
    #[serde(default = "default_label_column")]
    pub label_column: i64,
    /// Whether the first line (after comments) is a header to skip.
    #[serde(default)]
    pub header: bool,
    /// Class labels or real-valued targets.
    #[serde(default)]
    pub target: CsvTarget,
    /// The number of classes; labels must be below it. Default: `max label + 1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<usize>,
    /// `[channels, height, width]` when the features are an image in CHW order; enables
    /// `normalize = "per-channel"` and augmentation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<[usize; 3]>,
}

impl Default for CsvOptions {
    fn default() -> Self {
        CsvOptions {
            label_column: -1,
            header: false,
            target: CsvTarget::Class,
            classes: None,
            shape: None,
        }
    }
}

/// `[data.synthetic]`: parameters of a generated dataset. Unset values take the defaults
/// (`DEFAULT_SYNTHETIC_*`, `DEFAULT_MIXTURE_*`, `DEFAULT_REGRESSION_NOISE`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyntheticConfig {
    /// Number of samples (before the train/test split).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<usize>,
    /// Features per sample.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dim: Option<usize>,
    /// The features as images `[channels, height, width]` (CHW per sample), for the
    /// convolutional models; `dim` is then their product.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<[usize; 3]>,
    /// Gaussian mixture: number of classes (components).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<usize>,
    /// Gaussian mixture: typical distance between two class means, in units of the
    /// within-class standard deviation (which is 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub separation: Option<f64>,
    /// Linear regression: standard deviation of the Gaussian noise on the targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<f64>,
}

/// `[data.partition]`: how the training split is divided among workers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum PartitionConfig {
    /// Shuffle and deal into shards whose sizes differ by at most one. (A struct variant, so
    /// that `deny_unknown_fields` rejects stray keys such as `alpha` here.)
    Iid {},
    /// Label skew: the samples of each class are divided among workers in proportions drawn
    /// from Dirichlet(α, …, α). Small α: each worker sees few classes; large α: near IID.
    Dirichlet {
        /// Concentration α > 0.
        alpha: f64,
    },
    /// Sort by label, cut into `workers × per_worker` shards of (nearly) equal size, and give
    /// each worker `per_worker` shards at random (McMahan et al., 2017).
    Shards {
        /// Shards per worker, ≥ 1.
        per_worker: usize,
    },
    /// IID content, unequal sizes: proportional to `weights` (one per worker), or to
    /// `(i + 1)^−power` for worker `i` (a power law). Give exactly one.
    Unequal {
        /// Relative sizes, one positive number per worker.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        weights: Option<Vec<f64>>,
        /// Exponent `s ≥ 0` of the power law `(i + 1)^−s`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        power: Option<f64>,
    },
}

impl Default for PartitionConfig {
    fn default() -> Self {
        PartitionConfig::Iid {}
    }
}

impl PartitionConfig {
    /// The name used in scenario files.
    pub fn name(&self) -> &'static str {
        match self {
            PartitionConfig::Iid {} => "iid",
            PartitionConfig::Dirichlet { .. } => "dirichlet",
            PartitionConfig::Shards { .. } => "shards",
            PartitionConfig::Unequal { .. } => "unequal",
        }
    }

    /// Checks the values that do not depend on the data or the number of workers (those are
    /// checked by [`super::partition`]).
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self {
            PartitionConfig::Iid {} => {}
            PartitionConfig::Dirichlet { alpha } => {
                if !(alpha.is_finite() && *alpha > 0.0) {
                    return Err(ConfigError::new(
                        "data.partition.alpha",
                        format!("alpha must be a positive number, got {alpha}"),
                    )
                    .hint("small alpha (0.1) gives strong label skew, large alpha (100) nearly IID shards"));
                }
            }
            PartitionConfig::Shards { per_worker } => {
                if *per_worker == 0 {
                    return Err(ConfigError::new(
                        "data.partition.per_worker",
                        "per_worker must be at least 1",
                    ));
                }
            }
            PartitionConfig::Unequal { weights, power } => {
                match (weights, power) {
                    (Some(_), Some(_)) => {
                        return Err(ConfigError::new(
                            "data.partition.power",
                            "give either data.partition.weights or data.partition.power, not both",
                        ));
                    }
                    (None, None) => {
                        return Err(ConfigError::new(
                        "data.partition.kind",
                        "an unequal partition needs `weights` or `power`",
                    )
                    .hint("weights = [4, 2, 1, 1] (one per worker) or power = 1.0 (sizes ∝ 1/(i+1))"));
                    }
                    (Some(w), None) => {
                        if let Some(i) = w.iter().position(|v| !(v.is_finite() && *v > 0.0)) {
                            return Err(ConfigError::new(
                                &format!("data.partition.weights[{i}]"),
                                format!("a weight must be a positive number, got {}", w[i]),
                            ));
                        }
                    }
                    (None, Some(s)) => {
                        if !(s.is_finite() && *s >= 0.0) {
                            return Err(ConfigError::new(
                                "data.partition.power",
                                format!("power must be a non-negative number, got {s}"),
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// The `[data]` section of a scenario.
///
/// ```toml
/// [data]
/// dataset = "cifar10"            # digits (default) | mnist | fashion-mnist | cifar10 | cifar100
///                                # | csv | gaussian-mixture | linear-regression
/// path = "data/cifar-10-batches-bin"
/// batch_size = 64
/// normalize = "per-channel"      # none | standardize-features | per-channel
/// augment = { crop_padding = 4, flip = true }
///
/// [data.partition]
/// kind = "dirichlet"             # iid (default) | dirichlet | shards | unequal
/// alpha = 0.5
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    /// The dataset; when absent, `csv` if `path` is given and `digits` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<DatasetKind>,
    /// A directory (mnist, fashion-mnist, cifar10, cifar100) or a file (csv, text). Relative
    /// paths are relative to the scenario file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// Fraction of samples held out for evaluation (default 0.2). Not for datasets with an
    /// official test split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_fraction: Option<f64>,
    /// Samples per minibatch, per worker (windows of a text).
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
    /// Text only: tokens a window feeds the model (a window holds one more, the last target);
    /// default the model's `context`, and at most it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<usize>,
    /// Feature normalization; the default depends on the dataset (see
    /// [`DataConfig::normalization`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalize: Option<Normalize>,
    /// CIFAR-100 only: fine (default) or coarse labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Cifar100Labels>,
    /// CSV only: how to read the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csv: Option<CsvOptions>,
    /// Synthetic datasets only: generator parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthetic: Option<SyntheticConfig>,
    /// Image augmentation of training minibatches (none by default).
    #[serde(default, skip_serializing_if = "Augment::is_identity")]
    pub augment: Augment,
    /// How the training split is divided among workers.
    #[serde(default)]
    pub partition: PartitionConfig,
}

impl Default for DataConfig {
    fn default() -> Self {
        DataConfig {
            dataset: None,
            path: None,
            test_fraction: None,
            batch_size: default_batch_size(),
            context: None,
            normalize: None,
            labels: None,
            csv: None,
            synthetic: None,
            augment: Augment::default(),
            partition: PartitionConfig::Iid {},
        }
    }
}

impl DataConfig {
    /// The dataset this section loads: `dataset`, or `csv` when only `path` is given, or
    /// `digits`.
    pub fn kind(&self) -> DatasetKind {
        match (self.dataset, &self.path) {
            (Some(k), _) => k,
            (None, Some(_)) => DatasetKind::Csv,
            (None, None) => DatasetKind::Digits,
        }
    }

    /// The normalization applied: `normalize` if given, otherwise `per-channel` for MNIST,
    /// Fashion-MNIST and CIFAR, `none` for the synthetic datasets (already standardized by
    /// construction, so a generator's optimum stays in the model's coordinates), and
    /// `standardize-features` for digits and CSV.
    pub fn normalization(&self) -> Normalize {
        self.normalize.unwrap_or(match self.kind() {
            k if k.has_official_split() => Normalize::PerChannel,
            k if k.is_synthetic() => Normalize::None,
            DatasetKind::Text => Normalize::None,
            _ => Normalize::StandardizeFeatures,
        })
    }

    /// The held-out fraction, for datasets without an official split (0.2; a text's 0.1).
    pub fn test_fraction(&self) -> f64 {
        self.test_fraction
            .unwrap_or(if self.kind() == DatasetKind::Text {
                DEFAULT_TEXT_TEST_FRACTION
            } else {
                DEFAULT_TEST_FRACTION
            })
    }

    /// CSV options (defaults when `[data.csv]` is absent).
    pub fn csv_options(&self) -> CsvOptions {
        self.csv.clone().unwrap_or_default()
    }

    /// Generator parameters with every default filled in for this dataset's kind.
    pub fn synthetic_params(&self) -> SyntheticConfig {
        let s = self.synthetic.clone().unwrap_or_default();
        let mixture = self.kind() == DatasetKind::GaussianMixture;
        let regression = self.kind() == DatasetKind::LinearRegression;
        let from_shape = s.shape.map(|[c, h, w]| c * h * w);
        SyntheticConfig {
            samples: Some(s.samples.unwrap_or(DEFAULT_SYNTHETIC_SAMPLES)),
            dim: Some(s.dim.or(from_shape).unwrap_or(DEFAULT_SYNTHETIC_DIM)),
            shape: s.shape,
            classes: mixture.then(|| s.classes.unwrap_or(DEFAULT_MIXTURE_CLASSES)),
            separation: mixture.then(|| s.separation.unwrap_or(DEFAULT_MIXTURE_SEPARATION)),
            noise: regression.then(|| s.noise.unwrap_or(DEFAULT_REGRESSION_NOISE)),
        }
    }

    /// The image shape known from the configuration alone: digits (1×8×8), CSV with a `shape`.
    /// MNIST and CIFAR are images too, with their shape read from the files.
    fn is_image(&self) -> bool {
        match self.kind() {
            DatasetKind::Digits => true,
            k if k.has_official_split() => true,
            DatasetKind::Csv => self.csv.as_ref().is_some_and(|c| c.shape.is_some()),
            k if k.is_synthetic() => self.synthetic_shape().is_some(),
            _ => false,
        }
    }

    /// Whether the targets are class labels (everything but linear regression, CSV with
    /// `target = "real"` and text).
    pub fn has_class_labels(&self) -> bool {
        match self.kind() {
            DatasetKind::LinearRegression | DatasetKind::Text => false,
            DatasetKind::Csv => self.csv_options().target == CsvTarget::Class,
            _ => true,
        }
    }

    /// This section with every default made explicit (for the resolved copy of a scenario);
    /// it loads exactly the same data.
    pub fn resolved(&self) -> DataConfig {
        let kind = self.kind();
        DataConfig {
            dataset: Some(kind),
            path: self.path.clone(),
            test_fraction: (!kind.has_official_split()).then(|| self.test_fraction()),
            batch_size: self.batch_size,
            context: self.context,
            normalize: Some(self.normalization()),
            labels: (kind == DatasetKind::Cifar100).then(|| self.labels.unwrap_or_default()),
            csv: (kind == DatasetKind::Csv).then(|| self.csv_options()),
            synthetic: kind.is_synthetic().then(|| self.synthetic_params()),
            augment: self.augment,
            partition: self.partition.clone(),
        }
    }

    /// Checks every value (but not the files: see [`super::load`], and not what depends on the
    /// number of workers: see [`super::partition`]).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_path()?;
        self.validate_split()?;
        self.validate_text()?;
        let name = self.kind().name();
        if self.labels.is_some() && self.kind() != DatasetKind::Cifar100 {
            return Err(ConfigError::new(
                "data.labels",
                format!("fine or coarse labels are a cifar100 option; the dataset is `{name}`"),
            ));
        }
        if let Some(csv) = &self.csv {
            self.validate_csv(csv)?;
        }
        if let Some(s) = &self.synthetic {
            self.validate_synthetic(s)?;
        }
        self.validate_image_options()?;
        self.validate_partition()
    }

    /// Checks that `path` is given exactly when the dataset reads a file or a directory.
    fn validate_path(&self) -> Result<(), ConfigError> {
        let kind = self.kind();
        let name = kind.name();
        match (&self.path, kind) {
            (Some(_), k) if k == DatasetKind::Digits || k.is_synthetic() => {
                Err(ConfigError::new(
                    "data.path",
                    format!("`{name}` is built in and reads no file"),
                )
                .hint("remove data.path, or set data.dataset = \"csv\" to load a CSV file"))
            }
            (None, k) if k.reads_directory() => {
                Err(ConfigError::new(
                    "data.dataset",
                    format!("`{name}` is read from a directory: set data.path"),
                )
                .hint(match k {
                    DatasetKind::Cifar10 => {
                        "data.path = the directory holding data_batch_1.bin … data_batch_5.bin and test_batch.bin"
                    }
                    DatasetKind::Cifar100 => "data.path = the directory holding train.bin and test.bin",
                    _ => {
                        "data.path = the directory holding train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte (each optionally .gz)"
                    }
                }))
            }
            (None, DatasetKind::Csv) => Err(ConfigError::new(
                "data.dataset",
                "`csv` needs data.path, the CSV file",
            )),
            (None, DatasetKind::Text) => {
                Err(ConfigError::new(
                    "data.dataset",
                    "`text` needs data.path, a UTF-8 text file (optionally .gz)",
                )
                .hint("dasim ships Tiny Shakespeare: data.path = \"models/data/tinyshakespeare.txt.gz\" (relative to the scenario file)"))
            }
            _ => Ok(()),
        }
    }

    /// Checks the test split (`test_fraction`, only without an official split) and the batch
    /// size.
    fn validate_split(&self) -> Result<(), ConfigError> {
        let kind = self.kind();
        match self.test_fraction {
            Some(_) if kind.has_official_split() => {
                return Err(ConfigError::new(
                    "data.test_fraction",
                    format!(
                        "`{}` comes with its official test split; test_fraction does not apply",
                        kind.name()
                    ),
                )
                .hint("remove data.test_fraction"));
            }
            Some(f) if !(f > 0.0 && f < 1.0) => {
                return Err(ConfigError::new(
                    "data.test_fraction",
                    format!("test_fraction must be strictly between 0 and 1, got {f}"),
                ));
            }
            _ => {}
        }
        if self.batch_size == 0 {
            return Err(ConfigError::new(
                "data.batch_size",
                "batch_size must be at least 1",
            ));
        }
        Ok(())
    }

    /// Checks the options of a text: `context` only for a text and at least 1, no
    /// normalization of a text's token ids.
    fn validate_text(&self) -> Result<(), ConfigError> {
        let kind = self.kind();
        if let Some(context) = self.context {
            if kind != DatasetKind::Text {
                return Err(ConfigError::new(
                    "data.context",
                    format!(
                        "context is the window of a text; the dataset is `{}`",
                        kind.name()
                    ),
                )
                .hint("remove data.context"));
            }
            if context == 0 {
                return Err(ConfigError::new(
                    "data.context",
                    "context must be at least 1 (tokens a window feeds the model)",
                ));
            }
        }
        if kind == DatasetKind::Text
            && let Some(n) = self.normalize
            && n != Normalize::None
        {
            return Err(ConfigError::new(
                "data.normalize",
                "a text's features are token ids: they are not normalized",
            )
            .hint("remove data.normalize"));
        }
        Ok(())
    }

    /// Checks `[data.csv]`: only for a CSV file, no zero dimension in its shape, at least 2
    /// classes and only for class labels.
    fn validate_csv(&self, csv: &CsvOptions) -> Result<(), ConfigError> {
        let kind = self.kind();
        if kind != DatasetKind::Csv {
            return Err(ConfigError::new(
                "data.csv",
                format!(
                    "[data.csv] reads a CSV file; the dataset is `{}`",
                    kind.name()
                ),
            ));
        }
        if let Some(shape) = csv.shape
            && shape.contains(&0)
        {
            return Err(ConfigError::new(
                "data.csv.shape",
                format!(
                    "every dimension of [channels, height, width] must be at least 1, got {shape:?}"
                ),
            ));
        }
        if let Some(c) = csv.classes {
            if csv.target == CsvTarget::Real {
                return Err(ConfigError::new(
                    "data.csv.classes",
                    "classes is for class labels; target = \"real\" has none",
                ));
            }
            if c < 2 {
                return Err(ConfigError::new(
                    "data.csv.classes",
                    format!("a classification dataset needs at least 2 classes, got {c}"),
                ));
            }
        }
        Ok(())
    }

    /// Checks that per-channel normalization and augmentation are asked of images only.
    fn validate_image_options(&self) -> Result<(), ConfigError> {
        let kind = self.kind();
        let name = kind.name();
        if matches!(self.normalize, Some(Normalize::PerChannel)) && !self.is_image() {
            return Err(ConfigError::new(
                "data.normalize",
                format!("per-channel normalization needs images; `{name}` has plain feature vectors"),
            )
            .hint(if kind == DatasetKind::Csv {
                "give the image shape in [data.csv] shape = [channels, height, width], or use \"standardize-features\""
            } else {
                "use \"standardize-features\" or \"none\""
            }));
        }
        if !self.augment.is_identity() && !self.is_image() {
            return Err(ConfigError::new(
                "data.augment",
                format!(
                    "augmentation (crop, flip) needs images; `{name}` has plain feature vectors"
                ),
            )
            .hint(if kind == DatasetKind::Csv {
                "give the image shape in [data.csv] shape = [channels, height, width]"
            } else {
                "remove data.augment"
            }));
        }
        Ok(())
    }

    /// Checks the partition's own values, and that a label-skewing partition has class labels
    /// to skew.
    fn validate_partition(&self) -> Result<(), ConfigError> {
        self.partition.validate()?;
        if matches!(
            self.partition,
            PartitionConfig::Dirichlet { .. } | PartitionConfig::Shards { .. }
        ) && !self.has_class_labels()
        {
            return Err(ConfigError::new(
                "data.partition.kind",
                format!(
                    "a `{}` partition skews labels, and this dataset has {}",
                    self.partition.name(),
                    if self.kind() == DatasetKind::Text {
                        "none (a text's windows predict tokens)"
                    } else {
                        "real-valued targets"
                    }
                ),
            )
            .hint("use kind = \"iid\" or \"unequal\""));
        }
        Ok(())
    }

    fn validate_synthetic(&self, s: &SyntheticConfig) -> Result<(), ConfigError> {
        let kind = self.kind();
        if !kind.is_synthetic() {
            return Err(ConfigError::new(
                "data.synthetic",
                format!(
                    "[data.synthetic] sets up a generated dataset; `{}` is not one",
                    kind.name()
                ),
            )
            .hint("dataset = \"gaussian-mixture\" or \"linear-regression\""));
        }
        let mixture = kind == DatasetKind::GaussianMixture;
        if let Some(n) = s.samples
            && n < 2
        {
            return Err(ConfigError::new(
                "data.synthetic.samples",
                format!("samples must be at least 2 (one to train, one to test), got {n}"),
            ));
        }
        if s.dim == Some(0) {
            return Err(ConfigError::new(
                "data.synthetic.dim",
                "dim must be at least 1",
            ));
        }
        if let Some(shape) = s.shape {
            if shape.contains(&0) {
                return Err(ConfigError::new(
                    "data.synthetic.shape",
                    format!(
                        "every dimension of [channels, height, width] must be at least 1, got {shape:?}"
                    ),
                ));
            }
            let len: usize = shape.iter().product();
            if let Some(dim) = s.dim
                && dim != len
            {
                return Err(ConfigError::new(
                    "data.synthetic.dim",
                    format!("dim is {dim}, but shape {shape:?} has {len} values per sample"),
                )
                .hint("leave dim out: with a shape, it is the shape's product"));
            }
        }
        if !mixture && s.classes.is_some() {
            return Err(ConfigError::new(
                "data.synthetic.classes",
                "classes is a gaussian-mixture parameter; linear regression has real targets",
            ));
        }
        if !mixture && s.separation.is_some() {
            return Err(ConfigError::new(
                "data.synthetic.separation",
                "separation is a gaussian-mixture parameter",
            )
            .hint("linear regression takes samples, dim and noise"));
        }
        if mixture && s.noise.is_some() {
            return Err(ConfigError::new(
                "data.synthetic.noise",
                "noise is a linear-regression parameter",
            )
            .hint("a Gaussian mixture's spread is set by separation (in within-class standard deviations)"));
        }
        if let Some(c) = s.classes
            && c < 2
        {
            return Err(ConfigError::new(
                "data.synthetic.classes",
                format!("a classification dataset needs at least 2 classes, got {c}"),
            ));
        }
        if let Some(v) = s.separation
            && !(v.is_finite() && v >= 0.0)
        {
            return Err(ConfigError::new(
                "data.synthetic.separation",
                format!("separation must be a non-negative number, got {v}"),
            ));
        }
        if let Some(v) = s.noise
            && !(v.is_finite() && v >= 0.0)
        {
            return Err(ConfigError::new(
                "data.synthetic.noise",
                format!("noise must be a non-negative number, got {v}"),
            ));
        }
        Ok(())
    }

    /// The image shape that `[data.synthetic] shape` declares.
    pub(crate) fn synthetic_shape(&self) -> Option<ImageShape> {
        self.synthetic
            .as_ref()
            .and_then(|s| s.shape)
            .map(|[channels, height, width]| ImageShape {
                channels,
                height,
                width,
            })
    }

    /// The image shape that `[data.csv] shape` declares.
    pub(crate) fn csv_shape(&self) -> Option<ImageShape> {
        self.csv
            .as_ref()
            .and_then(|c| c.shape)
            .map(|[channels, height, width]| ImageShape {
                channels,
                height,
                width,
            })
    }
}
