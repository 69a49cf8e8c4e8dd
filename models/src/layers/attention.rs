//! Causal multi-head self-attention of the flat layout (Vaswani et al., 2017; the decoder of
//! Radford et al., 2019), burn pass only.

use burn::tensor::{Bool, Tensor, activation};

use super::ParamRows;
use super::linear::Linear;

/// Causal self-attention: a projection to queries, keys and values (`qkv`, `d → 3d`), `heads`
/// heads of `d / heads` features attending to their own and earlier positions, and an output
/// projection (`proj`, `d → d`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CausalSelfAttention {
    /// Queries, keys and values, in that order along the outputs.
    pub qkv: Linear,
    /// The output projection.
    pub proj: Linear,
    /// Heads; they divide `d`.
    pub heads: usize,
}

impl CausalSelfAttention {
    /// Features `d`.
    pub fn dim(&self) -> usize {
        self.proj.fan_in
    }

    /// FLOPs (two per multiply-add) of one sequence of `t` positions: the projections, and the
    /// scores and weighted sums (`QKᵀ` and `AV`, each `t² · d` multiply-adds, counted whole as
    /// is usual even though the causal half is masked).
    pub fn flops(&self, t: usize) -> u64 {
        t as u64 * (self.qkv.flops() + self.proj.flops()) + 4 * (t * t * self.dim()) as u64
    }

    /// `[R, B, T, d]` → `[R, B, T, d]`.
    pub fn forward(&self, params: &ParamRows, x: Tensor<4>) -> Tensor<4> {
        let [r, b, t, d] = x.dims();
        let h = self.heads;
        let dh = d / h;
        let qkv = self.qkv.forward(params, x.reshape([r, b * t, d]));
        // [R, B·T, d] of one of q, k, v → [R·B, heads, T, d/heads].
        let split = |part: usize| {
            qkv.clone()
                .slice_dim(2, part * d..(part + 1) * d)
                .reshape([r * b, t, h, dh])
                .swap_dims(1, 2)
        };
        let (q, k, v) = (split(0), split(1), split(2));
        let device = q.device();
        // −∞ above the diagonal: position i attends to positions 0..=i only.
        let future: Tensor<4, Bool> = Tensor::tril_mask([1, 1, t, t], 0, &device);
        let mask = Tensor::<4>::zeros([1, 1, t, t], &device).mask_fill(future, f32::NEG_INFINITY);
        let scores = q
            .matmul(k.swap_dims(2, 3))
            .mul_scalar(1.0 / (dh as f64).sqrt())
            + mask;
        let y = activation::softmax(scores, 3)
            .matmul(v)
            .swap_dims(1, 2)
            .reshape([r, b * t, d]);
        self.proj.forward(params, y).reshape([r, b, t, d])
    }
}
