//! Layer normalization of the flat layout (Ba, Kiros & Hinton, 2016; burn pass only).

use std::ops::Range;

use burn::tensor::Tensor;

use super::ParamRows;

/// `ε` of the variance, PyTorch's default.
pub(crate) const LAYER_NORM_EPS: f64 = 1e-5;

/// Layer normalization over the last `dim` features: gain `[dim]` at `gain`, bias `[dim]` right
/// after it. Unlike batch normalization it has no state and mixes no samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LayerNorm {
    /// Offset of the gain block.
    pub gain: usize,
    /// Features normalized together.
    pub dim: usize,
}

impl LayerNorm {
    /// Parameters: gain and bias.
    pub fn len(&self) -> usize {
        2 * self.dim
    }

    /// The blocks: the gain, then the bias.
    pub fn blocks(&self) -> [Range<usize>; 2] {
        let bias = self.gain + self.dim;
        [self.gain..bias, bias..bias + self.dim]
    }

    /// Gain 1, bias 0 (PyTorch's initialization).
    pub fn init(&self, p: &mut [f32]) {
        p[self.gain..self.gain + self.dim].fill(1.0);
        p[self.gain + self.dim..self.gain + 2 * self.dim].fill(0.0);
    }

    /// `[R, N, dim]` → `[R, N, dim]`: `(x − mean) / √(var + ε) · gain + bias`, the mean and the
    /// (biased) variance over the features of each position.
    pub fn forward(&self, params: &ParamRows, x: Tensor<3>) -> Tensor<3> {
        let r = params.replicas();
        let [g, b] = self.blocks();
        let g = params.get(g.start, g.len()).reshape([r, 1, self.dim]);
        let b = params.get(b.start, b.len()).reshape([r, 1, self.dim]);
        let (var, mean) = x.clone().var_mean_bias(2);
        let scale = var.add_scalar(LAYER_NORM_EPS).sqrt().recip();
        (x - mean) * scale * g + b
    }
}
