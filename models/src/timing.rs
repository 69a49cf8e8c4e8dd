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
pub use crate::presets::{Preset, TimingShape};
use crate::spec::{Load, Model, ModelSpec};

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
    use crate::spec::NeuralNet;

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
