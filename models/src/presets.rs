//! The published models a timing run can take by name ([`Preset`]: parameter counts, forward
//! costs and training sets, each cited in the book's chapter on models), and the size and cost of
//! a timing model resolved from a preset or from explicit keys ([`TimingShape`]). Plain data:
//! the timing model itself is [`crate::timing`].

use serde::{Deserialize, Serialize};

use dasim_sim::ConfigError;

/// A model whose published size and cost a timing run can take by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// ResNet-50 on 224×224 ImageNet images (He et al. 2016, Table 1).
    Resnet50,
    /// ResNet-20 on 32×32 CIFAR-10 images (He et al. 2016, §4.2 and Table 6).
    Resnet20,
    /// VGG-16 on 224×224 ImageNet images (Simonyan & Zisserman 2015, configuration D).
    Vgg16,
    /// BERT-base, one sequence of 128 tokens (Devlin et al. 2019).
    BertBase,
    /// GPT-2 small (124 M), one sequence of 1,024 tokens (Radford et al. 2019).
    Gpt2Small,
}

impl Preset {
    /// Every preset.
    pub const ALL: [Preset; 5] = [
        Preset::Resnet50,
        Preset::Resnet20,
        Preset::Vgg16,
        Preset::BertBase,
        Preset::Gpt2Small,
    ];

    /// The name in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Resnet50 => "resnet50",
            Preset::Resnet20 => "resnet20",
            Preset::Vgg16 => "vgg16",
            Preset::BertBase => "bert-base",
            Preset::Gpt2Small => "gpt2-small",
        }
    }

    /// Trainable parameters (the torchvision and Hugging Face reference implementations' counts
    /// for the published architectures; for ResNet-20, the paper's option-A shortcuts, as
    /// [`crate::ResNet`]).
    pub fn params(self) -> u64 {
        match self {
            Preset::Resnet50 => 25_557_032,
            Preset::Resnet20 => 269_722,
            Preset::Vgg16 => 138_357_544,
            Preset::BertBase => 109_482_240,
            Preset::Gpt2Small => 124_439_808,
        }
    }

    /// Multiply-adds of one forward pass on one sample (an image, or a sequence).
    pub fn forward_macs(self) -> u64 {
        match self {
            // He et al. 2016, Table 1: 3.8 × 10⁹ (torchvision measures 4.09 × 10⁹).
            Preset::Resnet50 => 4_090_000_000,
            // The 3 × 3 convolutions of 3 stages of 3 blocks on 32/16/8-pixel maps, plus the
            // classifier, with the paper's option-A shortcuts (no projection): 40.55 × 10⁶.
            Preset::Resnet20 => 40_551_040,
            // Simonyan & Zisserman 2015, configuration D; torchvision: 15.47 × 10⁹.
            Preset::Vgg16 => 15_470_000_000,
            // N·L for the 85 M weights outside the embeddings and L = 128 tokens, plus the
            // attention scores (Kaplan et al. 2020, Table 1): 11.2 × 10⁹.
            Preset::BertBase => 11_200_000_000,
            // The same rule, 85 M weights outside the embeddings, L = 1,024: 96.6 × 10⁹.
            Preset::Gpt2Small => 96_600_000_000,
        }
    }

    /// Samples in an epoch of the model's usual training set: ImageNet-1k's 1,281,167 images,
    /// CIFAR-10's 50,000; `None` for the language models (their corpora are not counted in
    /// sequences: give `train_samples`).
    pub fn train_samples(self) -> Option<u64> {
        match self {
            Preset::Resnet50 | Preset::Vgg16 => Some(1_281_167),
            Preset::Resnet20 => Some(50_000),
            Preset::BertBase | Preset::Gpt2Small => None,
        }
    }
}

/// The size and cost of a timing model, resolved from its preset and keys.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimingShape {
    /// The preset it came from, if any.
    pub preset: Option<Preset>,
    /// Parameters per replica: the size of a model or gradient in a message.
    pub params: u64,
    /// FLOPs (two per multiply-add) of one forward pass on one sample.
    pub forward_flops: u64,
    /// Samples in an epoch.
    pub train_samples: u64,
}

impl TimingShape {
    /// Resolves `[model] kind = "timing"`: a `preset`, or `params` (with `forward_gflops` when
    /// the step time comes from a device speed); `train_samples` overrides the preset's.
    pub fn resolve(
        preset: Option<Preset>,
        params: Option<u64>,
        forward_gflops: Option<f64>,
        train_samples: Option<u64>,
    ) -> Result<Self, ConfigError> {
        let names = || {
            Preset::ALL
                .iter()
                .map(|p| p.name())
                .collect::<Vec<_>>()
                .join(", ")
        };
        if let Some(p) = params
            && p == 0
        {
            return Err(ConfigError::new(
                "model.params",
                "a model needs at least one parameter",
            ));
        }
        if let Some(g) = forward_gflops
            && !(g.is_finite() && g > 0.0 && g * 1e9 < u64::MAX as f64)
        {
            return Err(ConfigError::new(
                "model.forward_gflops",
                format!("forward_gflops must be a positive number of GFLOPs per sample, got {g}"),
            ));
        }
        if train_samples == Some(0) {
            return Err(ConfigError::new(
                "model.train_samples",
                "an epoch needs at least one sample",
            ));
        }
        if preset.is_some() && forward_gflops.is_some() {
            return Err(ConfigError::new(
                "model.forward_gflops",
                "a preset has its own forward cost",
            )
            .hint("remove forward_gflops, or the preset and give params"));
        }
        let (params, forward_flops, default_samples) = match (preset, params) {
            (Some(_), Some(_)) => {
                return Err(
                    ConfigError::new("model.params", "a preset has its own size")
                        .hint("remove params, or the preset"),
                );
            }
            (Some(p), None) => (p.params(), 2 * p.forward_macs(), p.train_samples()),
            (None, Some(n)) => (
                n,
                // Without a cost, a step's time must come from step_time_ms (checked when the
                // cluster is built: a device speed needs FLOPs).
                forward_gflops.map_or(0, |g| (g * 1e9).round() as u64),
                None,
            ),
            (None, None) => {
                return Err(ConfigError::new(
                    "model",
                    "a timing model needs a preset or a parameter count",
                )
                .hint(format!(
                    "preset = \"resnet50\" (one of {}), or params = 25557032",
                    names()
                )));
            }
        };
        let train_samples = train_samples.or(default_samples).ok_or_else(|| {
            ConfigError::new(
                "model.train_samples",
                format!(
                    "{} has no usual training-set size: give the samples of an epoch",
                    preset.map_or("a model given by params", Preset::name)
                ),
            )
            .hint("train_samples = 1000000")
        })?;
        Ok(TimingShape {
            preset,
            params,
            forward_flops,
            train_samples,
        })
    }

    /// What the model is, for outputs: `resnet50 (timing: 25,557,032 parameters)`.
    pub fn describe(&self) -> String {
        let name = self.preset.map_or("timing", Preset::name);
        format!(
            "{name} (timing only: {} parameters, no gradient computed)",
            self.params
        )
    }
}
