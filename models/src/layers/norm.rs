//! Batch normalization per replica: the burn pass ([`Norm::forward`]) and the CPU pass
//! ([`NormHost`]), with PyTorch's conventions (ε = 1e-5, momentum 0.1, biased variance to
//! normalize, unbiased variance in the running statistics).

use std::ops::Range;

use burn::tensor::Tensor;
use burn::tensor::module::{batch_norm, batch_norm_train};

use super::ParamRows;
use super::cpu::{Channel, Maps, affine_act, moments, norm_grad_sums, norm_grad_write};
use super::kernels::Out;
use super::par::{map_tasks, tasks};

/// Batch-norm ε, PyTorch's default.
pub(crate) const EPS: f64 = 1e-5;
/// Weight of the new minibatch statistics in the running statistics, PyTorch's default.
pub(crate) const MOMENTUM: f64 = 0.1;

/// A batch-norm layer in the flat layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Norm {
    /// Offset of the weight `[C]`; the bias `[C]` follows.
    pub affine: usize,
    /// Offset of the running mean `[C]`; the running variance `[C]` follows.
    pub stats: usize,
    /// Channels.
    pub channels: usize,
}

impl Norm {
    /// Its two parameter tensors: the weight (gain) `[C]`, then the bias (shift) `[C]`.
    pub fn affine_blocks(&self) -> [Range<usize>; 2] {
        let (a, c) = (self.affine, self.channels);
        [a..a + c, a + c..a + 2 * c]
    }

    /// Batch norm of `[B, R·C, H, W]`, channel `(r, c)` with row `r`'s parameters, on burn.
    /// In training mode (`state` given) each replica's minibatch statistics normalize, and the
    /// updated running statistics `[R, 2C]` (a plain tensor) are pushed onto `state`; in
    /// evaluation mode the running statistics of the rows normalize.
    pub fn forward(
        &self,
        params: &ParamRows,
        x: Tensor<4>,
        state: Option<&mut Vec<Tensor<2>>>,
    ) -> Tensor<4> {
        let r = params.replicas();
        let c = self.channels;
        let halves = |block: Tensor<2>| {
            (
                block.clone().slice_dim(1, 0..c).reshape([r * c]),
                block.slice_dim(1, c..2 * c).reshape([r * c]),
            )
        };
        let (gamma, beta) = halves(params.get(self.affine, 2 * c));
        let Some(state) = state else {
            let (mean, var) = halves(params.get(self.stats, 2 * c));
            return batch_norm(x, gamma, beta, mean, var, EPS);
        };
        let [batch, _, h, w] = x.dims();
        let m = batch * h * w;
        let unbias = if m > 1 {
            m as f64 / (m - 1) as f64
        } else {
            1.0
        };
        let out = batch_norm_train(x, gamma, beta, EPS);
        let old = params.get(self.stats, 2 * c).without_autodiff();
        let batch_stats = Tensor::cat(
            vec![
                out.mean.without_autodiff().reshape([r, c]),
                out.variance
                    .without_autodiff()
                    .reshape([r, c])
                    .mul_scalar(unbias),
            ],
            1,
        );
        state.push(old.mul_scalar(1.0 - MOMENTUM) + batch_stats.mul_scalar(MOMENTUM));
        out.output
    }
}

/// What the training pass of [`NormHost`] keeps for the backward pass: each channel's
/// minibatch mean and `1/√(var + ε)`.
#[derive(Clone, Debug, Default)]
pub(crate) struct NormSaved {
    mean: Vec<f32>,
    inv: Vec<f32>,
}

/// Batch norm of one replica's maps on the CPU, fused with what follows it: an optional
/// residual sum and an optional ReLU, in one pass over the maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NormHost {
    /// The layer.
    pub norm: Norm,
}

impl NormHost {
    /// Training mode: normalizes `z` with its minibatch statistics, then
    /// `out = act(γ·ẑ + β + residual)` on the interior (zero elsewhere in the span), and
    /// writes the updated running statistics (`[2C]`: mean, then variance) into `state`.
    #[allow(clippy::too_many_arguments)]
    pub fn train_forward(
        &self,
        params: &[f32],
        z: &Maps,
        mask: &[f32],
        residual: Option<&Maps>,
        relu: bool,
        out: &mut Maps,
        saved: &mut NormSaved,
        state: &mut [f32],
    ) {
        let c = self.norm.channels;
        debug_assert_eq!(z.channels, c);
        let m = (z.samples * z.geom.area()) as f64;
        let unbias = if m > 1.0 { m / (m - 1.0) } else { 1.0 };
        let (gamma, beta) = self.affine(params);
        let old = &params[self.norm.stats..self.norm.stats + 2 * c];
        let out_data = Out::new(&mut out.data);
        let residual = residual.map(|r| &r.data[..]);
        // Channel by channel, on as many threads as there are: each writes its own planes.
        let stats: Vec<(f32, f32, f64)> = map_tasks(c, |ch| {
            let channel = Channel::of(z, ch);
            let mean = (moments(&z.data, mask, &channel, 0.0).0 / m) as f32;
            let var = moments(&z.data, mask, &channel, mean).1 / m;
            let inv = (1.0 / (var + EPS).sqrt()) as f32;
            let scale = gamma[ch] * inv;
            let shift = beta[ch] - mean * scale;
            affine_act(
                &z.data, mask, &channel, scale, shift, residual, relu, out_data,
            );
            (mean, inv, var)
        });
        saved.mean.clear();
        saved.inv.clear();
        let (keep, new) = ((1.0 - MOMENTUM) as f32, MOMENTUM as f32);
        for (ch, &(mean, inv, var)) in stats.iter().enumerate() {
            saved.mean.push(mean);
            saved.inv.push(inv);
            state[ch] = old[ch] * keep + mean * new;
            state[c + ch] = old[c + ch] * keep + (var as f32 * unbias as f32) * new;
        }
    }

    /// Evaluation mode: normalizes `z` with the row's running statistics, then as
    /// [`NormHost::train_forward`].
    pub fn eval_forward(
        &self,
        params: &[f32],
        z: &Maps,
        mask: &[f32],
        residual: Option<&Maps>,
        relu: bool,
        out: &mut Maps,
    ) {
        let c = self.norm.channels;
        let (gamma, beta) = self.affine(params);
        let stats = &params[self.norm.stats..self.norm.stats + 2 * c];
        let out_data = Out::new(&mut out.data);
        let residual = residual.map(|r| &r.data[..]);
        tasks(c, |ch| {
            let inv = (1.0 / (f64::from(stats[c + ch]) + EPS).sqrt()) as f32;
            let scale = gamma[ch] * inv;
            let shift = beta[ch] - stats[ch] * scale;
            affine_act(
                &z.data,
                mask,
                &Channel::of(z, ch),
                scale,
                shift,
                residual,
                relu,
                out_data,
            );
        });
    }

    /// The gradients of [`NormHost::train_forward`] from the gradient `g` of its output (before
    /// the ReLU where `relu_of`, the ReLU's output, is given: the gradient is zero where it is
    /// not positive): `γ`'s and `β`'s into `grad` (a row's gradient, at the layer's offsets),
    /// the input's into `dz` (zero outside the interior).
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        params: &[f32],
        z: &Maps,
        mask: &[f32],
        saved: &NormSaved,
        g: &Maps,
        relu_of: Option<&Maps>,
        dz: &mut Maps,
        grad: &mut [f32],
    ) {
        let c = self.norm.channels;
        let m = (z.samples * z.geom.area()) as f64;
        let (gamma, _) = self.affine(params);
        let relu = relu_of.map(|a| &a.data[..]);
        let dz_data = Out::new(&mut dz.data);
        let sums: Vec<(f32, f32)> = map_tasks(c, |ch| {
            let channel = Channel::of(z, ch);
            let (mean, inv) = (saved.mean[ch], saved.inv[ch]);
            let (dbeta, centred) = norm_grad_sums(&g.data, relu, &z.data, mask, &channel, mean);
            let dgamma = centred * f64::from(inv);
            let (gamma, inv) = (f64::from(gamma[ch]), f64::from(inv));
            let consts = [
                (gamma * inv) as f32,
                (-gamma * inv * inv * dgamma / m) as f32,
                (-gamma * inv * dbeta / m) as f32,
            ];
            norm_grad_write(
                &g.data, relu, &z.data, mask, &channel, mean, consts, dz_data,
            );
            (dgamma as f32, dbeta as f32)
        });
        let at = self.norm.affine;
        for (ch, (dgamma, dbeta)) in sums.into_iter().enumerate() {
            grad[at + ch] = dgamma;
            grad[at + c + ch] = dbeta;
        }
    }

    fn affine<'p>(&self, params: &'p [f32]) -> (&'p [f32], &'p [f32]) {
        let (c, at) = (self.norm.channels, self.norm.affine);
        (&params[at..at + c], &params[at + c..at + 2 * c])
    }
}
