//! Linear layers of the flat layout: the burn pass (a batched matrix product) and the CPU pass
//! ([`LinearHost`]: matrix products on feature planes).

use std::ops::Range;

use burn::tensor::Tensor;

use dasim_sim::clock::rng::Stream;

use super::cpu::{Geom, Maps};
use super::{ParamRows, uniform};

/// A linear layer in the flat layout: weight `[fan_in, fan_out]` (row-major) at `weight`, bias
/// `[fan_out]` right after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Linear {
    /// Offset of the weight block.
    pub weight: usize,
    /// Inputs.
    pub fan_in: usize,
    /// Outputs.
    pub fan_out: usize,
}

impl Linear {
    /// Parameters of the layer (weight and bias).
    pub fn len(&self) -> usize {
        self.fan_in * self.fan_out + self.fan_out
    }

    /// The weight as a matrix `fan_in × fan_out`, for low-rank compressors.
    pub fn matrix(&self) -> dasim_sim::store::Matrix {
        dasim_sim::store::Matrix {
            start: self.weight,
            rows: self.fan_in,
            cols: self.fan_out,
        }
    }

    /// FLOPs (multiply-adds × 2) for one sample.
    pub fn flops(&self) -> u64 {
        2 * (self.fan_in * self.fan_out) as u64
    }

    /// The blocks the forward pass reads: the weight, then the bias.
    pub fn blocks(&self) -> [Range<usize>; 2] {
        let bias = self.weight + self.fan_in * self.fan_out;
        [self.weight..bias, bias..bias + self.fan_out]
    }

    /// `[R, B, fan_in]` → `[R, B, fan_out]`, a batched matrix product.
    pub fn forward(&self, params: &ParamRows, x: Tensor<3>) -> Tensor<3> {
        let r = params.replicas();
        let [w, b] = self.blocks();
        let w = params
            .get(w.start, w.len())
            .reshape([r, self.fan_in, self.fan_out]);
        let b = params.get(b.start, b.len()).reshape([r, 1, self.fan_out]);
        x.matmul(w) + b
    }

    /// PyTorch's default initialization: weight and bias uniform in `±1/√fan_in`.
    pub fn init(&self, rng: &mut Stream, p: &mut [f32]) {
        uniform(
            rng,
            &mut p[self.weight..self.weight + self.len()],
            self.fan_in,
        );
    }
}

/// The geometry of a batch of feature vectors on the CPU path: one plane per feature, holding
/// the `batch` samples side by side (so that the samples run along the vector lanes).
pub(crate) fn features(batch: usize) -> Geom {
    Geom::with(1, batch, batch, 0, 0, 1)
}

/// A linear layer on the CPU path: `y[o][n] = b[o] + Σ_i w[i][o] · x[i][n]` over feature planes
/// ([`features`]): three matrix products (gemm, single-threaded, as flex's own) on the planes
/// in place, with the samples as the columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LinearHost {
    /// The layer.
    pub lin: Linear,
}

/// `dst = lhs · rhs` (or `dst += lhs · rhs` with `accumulate`) for `m × k` and `k × n`
/// matrices given by their first element and (row, column) strides.
///
/// # Safety
/// Every element the strides reach must be inside the buffers, and `dst` must not overlap the
/// inputs.
#[allow(clippy::too_many_arguments)]
unsafe fn matmul(
    [m, n, k]: [usize; 3],
    dst: *mut f32,
    [dst_rs, dst_cs]: [usize; 2],
    lhs: *const f32,
    [lhs_rs, lhs_cs]: [usize; 2],
    rhs: *const f32,
    [rhs_rs, rhs_cs]: [usize; 2],
    accumulate: bool,
) {
    // SAFETY: forwarded to the caller.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            dst_cs as isize,
            dst_rs as isize,
            accumulate,
            lhs,
            lhs_cs as isize,
            lhs_rs as isize,
            rhs,
            rhs_cs as isize,
            rhs_rs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

impl LinearHost {
    /// Checks that `maps` holds `channels` feature planes of `samples` samples.
    fn check(maps: &Maps, channels: usize, samples: usize) {
        assert!(
            maps.samples == 1 && maps.channels == channels && maps.geom.w >= samples,
            "feature planes of the wrong shape"
        );
    }

    /// `y = x·W + b` for the batch of `x` (`fan_in` feature planes) into `y` (`fan_out`).
    pub fn forward(&self, params: &[f32], x: &Maps, y: &mut Maps) {
        let l = &self.lin;
        let [w, b] = l.blocks();
        let samples = x.geom.w;
        Self::check(x, l.fan_in, samples);
        Self::check(y, l.fan_out, samples);
        let (xp, yp) = (x.geom.plane, y.geom.plane);
        for (o, &bias) in params[b].iter().enumerate() {
            y.data[o * yp..o * yp + samples].fill(bias);
        }
        // SAFETY: the planes hold `samples` positions each (checked), and the weight block is
        // `fan_in · fan_out` long.
        unsafe {
            matmul(
                [l.fan_out, samples, l.fan_in],
                y.data.as_mut_ptr(),
                [yp, 1],
                params[w].as_ptr(),
                [1, l.fan_out],
                x.data.as_ptr(),
                [xp, 1],
                true,
            );
        }
    }

    /// The gradients of [`LinearHost::forward`] from `dy`: the weight's and bias' into `grad`
    /// (a row's gradient, at the layer's offsets) and, with `dx`, the input's.
    pub fn backward(
        &self,
        params: &[f32],
        x: &Maps,
        dy: &Maps,
        grad: &mut [f32],
        dx: Option<&mut Maps>,
    ) {
        let l = &self.lin;
        let [w, b] = l.blocks();
        let samples = x.geom.w;
        Self::check(x, l.fan_in, samples);
        Self::check(dy, l.fan_out, samples);
        let (xp, dyp) = (x.geom.plane, dy.geom.plane);
        for (o, g) in grad[b].iter_mut().enumerate() {
            *g = dy.plane(0, o)[..samples].iter().sum();
        }
        // SAFETY: as in `forward`; `grad` and `dx` are other buffers than the inputs.
        unsafe {
            // `gw[i][o] = Σ_n x[i][n] · dy[o][n]`.
            matmul(
                [l.fan_in, l.fan_out, samples],
                grad[w.clone()].as_mut_ptr(),
                [l.fan_out, 1],
                x.data.as_ptr(),
                [xp, 1],
                dy.data.as_ptr(),
                [1, dyp],
                false,
            );
            if let Some(dx) = dx {
                Self::check(dx, l.fan_in, samples);
                // `dx[i][n] = Σ_o w[i][o] · dy[o][n]`.
                matmul(
                    [l.fan_in, samples, l.fan_out],
                    dx.data.as_mut_ptr(),
                    [dx.geom.plane, 1],
                    params[w].as_ptr(),
                    [l.fan_out, 1],
                    dy.data.as_ptr(),
                    [dyp, 1],
                    false,
                );
            }
        }
    }
}
