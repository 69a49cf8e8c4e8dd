//! Timing-only models: a real model's size and cost, without its numbers.
//!
//! `kind = "timing"` carries what the schedule of a distributed run depends on — the bytes of a
//! model or gradient in a message (its parameter count) and the compute time of a step (its
//! FLOPs per sample, with the cluster's `device_tflops`, or the cluster's `step_time_ms`) — and
//! computes no gradient. Every algorithm then runs its exact schedule, messages, waits and
//! staleness at the papers' scale (ResNet-50's 25.6 M parameters on 128 workers) in seconds,
//! because the store ([`crate::timing_store::TimingStore`]) holds no parameter: every operation on rows is a no-op
//! and every loss is NaN. Runs say so: `summary.json`'s `computed = false`, the CLI line and the
//! plots.
//!
//! Presets give the parameter counts and forward costs published for common models; the book's
//! chapter on models cites the source of each.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use dasim_sim::ConfigError;

use crate::convex::Objective;
use crate::data::{DataConfig, Dataset, Split};
use crate::model::{Load, Model, ModelSpec};

/// `[model] kind = "timing"`: a real model's size and cost without its numbers. Every
/// algorithm's schedule, messages and waits at paper scale, no gradient computed, no loss
/// reported.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimingConfig {
    /// A published model (`resnet50`, `resnet20`, `vgg16`, `bert-base`, `gpt2-small`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<Preset>,
    /// Parameters, instead of a preset: the size of a model or gradient in a message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<u64>,
    /// GFLOPs of one forward pass on one sample, with `params` (needed when the cluster
    /// gives a device speed, `device_tflops`, rather than `step_time_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_gflops: Option<f64>,
    /// Samples in an epoch (default: the preset's training set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_samples: Option<u64>,
}

impl TimingConfig {
    /// The size and cost, or an error at the key that does not resolve.
    pub fn shape(&self) -> Result<TimingShape, ConfigError> {
        TimingShape::resolve(
            self.preset,
            self.params,
            self.forward_gflops,
            self.train_samples,
        )
    }
}

impl ModelSpec for TimingConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        self.shape().map(|_| ())
    }

    /// No data: an error at `data` where `[data]` sets anything but `batch_size`, which sets a
    /// step's samples (and with the FLOPs its time).
    fn load(&self, load: &Load<'_>) -> crate::Result<Option<Split>> {
        let batch_only = DataConfig {
            batch_size: DataConfig::default().batch_size,
            ..load.data.clone()
        };
        if batch_only.resolved() != DataConfig::default().resolved() {
            return Err(ConfigError::new(
                "data",
                "a timing model reads no data: it carries a model's size and cost, not its numbers",
            )
            .hint("keep only batch_size in [data] (it sets a step's samples)")
            .into());
        }
        Ok(None)
    }

    fn build(
        &self,
        _load: &Load<'_>,
        _train: &Dataset,
    ) -> crate::Result<(Model, Option<Arc<Objective>>)> {
        Ok((Model::Timing(self.shape()?), None))
    }

    fn accuracy(&self) -> Option<bool> {
        Some(false)
    }

    fn computes(&self) -> bool {
        false
    }
}

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

/// `[timed_as]`, the proxy mode: a model trained for real (`[model]`, small enough to train
/// here) whose steps and messages cost what another model's would (a preset, or `params` and
/// `forward_gflops`), so that convergence against simulated time can be shown for "ResNet-50 on
/// 32 nodes over 10 GbE" with honest labels: the numbers are the small model's, the clock is the
/// big one's.
///
/// ```toml
/// [timed_as]
/// preset = "resnet50"
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimedAs {
    /// A published model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<Preset>,
    /// Parameters, instead of a preset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<u64>,
    /// GFLOPs of one forward pass on one sample, with `params`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_gflops: Option<f64>,
}

impl TimedAs {
    /// The size and cost the run is timed with; errors name `timed_as.*`.
    pub fn shape(&self) -> Result<TimingShape, ConfigError> {
        // The epoch is the trained model's data: any positive count resolves the shape.
        TimingShape::resolve(self.preset, self.params, self.forward_gflops, Some(1)).map_err(|e| {
            let mut path = e.path.clone();
            if let Some(dasim_sim::error::PathSeg::Key(k)) = path.0.first_mut()
                && k == "model"
            {
                *k = "timed_as".into();
            }
            ConfigError { path, ..e }
        })
    }

    /// The model it stands for, in words: `resnet50 (25557032 parameters, 8.18 GFLOPs forward
    /// per sample)`.
    pub fn describe(&self) -> String {
        match self.shape() {
            Ok(t) => format!(
                "{} ({} parameters, {} GFLOPs forward per sample)",
                t.preset.map_or("a model", Preset::name),
                t.params,
                t.forward_flops as f64 / 1e9
            ),
            Err(e) => e.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Network;

    #[test]
    fn the_resnet20_preset_counts_the_papers_resnet20() {
        // He et al. 2016, §4.2 uses option A (parameter-free shortcuts), as dasim's ResNet: the
        // preset carries that model's size and cost (the running statistics are state, not
        // parameters, and ride in no message of a timing run).
        let shape = crate::ImageShape {
            channels: 3,
            height: 32,
            width: 32,
        };
        let net = crate::ResNet::new(shape, 10, 20, 16);
        let trainable = (net.num_params() - net.state_len()) as u64;
        assert_eq!(Preset::Resnet20.params(), trainable);
        assert_eq!(2 * Preset::Resnet20.forward_macs(), net.forward_flops());
    }

    #[test]
    fn presets_resolve_and_keys_are_checked() {
        let r50 = TimingShape::resolve(Some(Preset::Resnet50), None, None, None).unwrap();
        assert_eq!(r50.params, 25_557_032);
        assert_eq!(r50.forward_flops, 8_180_000_000);
        assert_eq!(r50.train_samples, 1_281_167);
        let custom = TimingShape::resolve(None, Some(1000), Some(0.5), Some(10)).unwrap();
        assert_eq!((custom.params, custom.forward_flops), (1000, 500_000_000));
        let field = |r: Result<TimingShape, ConfigError>| r.unwrap_err().path.to_string();
        assert_eq!(field(TimingShape::resolve(None, None, None, None)), "model");
        assert_eq!(
            field(TimingShape::resolve(None, Some(0), None, Some(1))),
            "model.params"
        );
        assert_eq!(
            field(TimingShape::resolve(
                Some(Preset::Vgg16),
                Some(5),
                None,
                None
            )),
            "model.params"
        );
        assert_eq!(
            field(TimingShape::resolve(
                Some(Preset::Vgg16),
                None,
                Some(1.0),
                None
            )),
            "model.forward_gflops"
        );
        assert_eq!(
            field(TimingShape::resolve(
                Some(Preset::BertBase),
                None,
                None,
                None
            )),
            "model.train_samples"
        );
        assert_eq!(
            field(TimingShape::resolve(None, Some(5), Some(-1.0), Some(1))),
            "model.forward_gflops"
        );
    }
}
