//! Convolutions of the flat layout: their geometry and FLOPs, the burn pass (a grouped
//! convolution, or im2col and a batched matrix product on a GPU), and the CPU pass
//! ([`ConvHost`]: the direct kernels of [`super::kernels`] on flat padded planes).

use std::ops::Range;

use burn::tensor::module::conv2d;
use burn::tensor::ops::{ConvOptions, PadMode};
use burn::tensor::{Tensor, s};

use super::ParamRows;
use super::cpu::{Channel, Geom, Maps, moments};
use super::kernels::{
    ConvCall, Flat, Packed, Planes, WeightGradCall, col2im_add, conv_forward, conv_weight_grad,
    im2col,
};
use super::par::chunks;
use crate::backend::is_flex;

/// A 2-D convolution in the flat layout: where its blocks sit in a row, and its geometry.
/// Shared by the convolutional models of this crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Conv {
    /// Offset of the weight block `[cout, cin, k, k]`.
    pub weight: usize,
    /// Offset of the bias block `[cout]`, if the convolution has a bias.
    pub bias: Option<usize>,
    /// Input channels per replica.
    pub cin: usize,
    /// Output channels per replica.
    pub cout: usize,
    /// Kernel side.
    pub k: usize,
    /// Stride (both dimensions).
    pub stride: usize,
    /// Zero padding `[rows, columns]`, on both sides.
    pub pad: [usize; 2],
}

impl Conv {
    /// Weights in the weight block.
    pub fn weight_len(&self) -> usize {
        self.cout * self.cin * self.k * self.k
    }

    /// The weight as the matrix `cout × (cin·k²)`, as PowerSGD's reference code reshapes a
    /// convolution (for low-rank compressors).
    pub fn matrix(&self) -> dasim_sim::store::Matrix {
        dasim_sim::store::Matrix {
            start: self.weight,
            rows: self.cout,
            cols: self.cin * self.k * self.k,
        }
    }

    /// Parameters of the convolution (weight and bias).
    pub fn len(&self) -> usize {
        self.weight_len() + self.bias.map_or(0, |_| self.cout)
    }

    /// `fan_in` of PyTorch's initializers: `cin · k²`.
    pub fn fan_in(&self) -> usize {
        self.cin * self.k * self.k
    }

    /// `fan_out` of PyTorch's initializers: `cout · k²`.
    pub fn fan_out(&self) -> usize {
        self.cout * self.k * self.k
    }

    /// Output map `[rows, columns]` for an input map (which must fit the kernel once padded).
    pub fn out_size(&self, [h, w]: [usize; 2]) -> [usize; 2] {
        [
            (h + 2 * self.pad[0] - self.k) / self.stride + 1,
            (w + 2 * self.pad[1] - self.k) / self.stride + 1,
        ]
    }

    /// FLOPs (multiply-adds × 2) for one sample with output map `out`.
    pub fn flops(&self, out: [usize; 2]) -> u64 {
        2 * (self.cin * self.cout * self.k * self.k * out[0] * out[1]) as u64
    }

    /// Floats of the column matrix of one sample with output map `out` when the convolution
    /// runs as im2col (several input channels per replica; see [`Conv::forward`]), else 0.
    pub fn im2col_floats(&self, out: [usize; 2]) -> usize {
        if self.cin > 1 {
            self.cin * self.k * self.k * out[0] * out[1]
        } else {
            0
        }
    }

    /// The blocks the forward pass reads: the weight, then the bias if any.
    pub fn blocks(&self) -> impl Iterator<Item = Range<usize>> {
        let weight = self.weight..self.weight + self.weight_len();
        std::iter::once(weight).chain(self.bias.map(|o| o..o + self.cout))
    }

    /// `[B, R·cin, H, W]` → `[B, R·cout, H', W']`, replica `r` (channel group `r`) with the
    /// filters of row `r`. One grouped convolution on `flex`, and elsewhere when the weights
    /// need no gradient, a replica has one input channel (burn-cubecl's depthwise path) or there
    /// are fewer than [`IM2COL_MIN_REPLICAS`] replicas; otherwise (training on wgpu) im2col and
    /// a batched matrix product (see [`Conv::im2col`]).
    pub fn forward(&self, params: &ParamRows, x: Tensor<4>) -> Tensor<4> {
        let r = params.replicas();
        let w = params.get(self.weight, self.weight_len());
        let b = self
            .bias
            .map(|o| params.get(o, self.cout).reshape([r * self.cout]));
        if self.cin > 1 && r >= IM2COL_MIN_REPLICAS && w.is_tracked() && !is_flex(&x.device()) {
            return self.im2col(r, w, b, x, IM2COL_FLOATS);
        }
        let w = w.reshape([r * self.cout, self.cin, self.k, self.k]);
        conv2d(
            x,
            w,
            b,
            ConvOptions::new([self.stride; 2], self.pad, [1, 1], r),
        )
    }

    /// The convolution as im2col and a batched matrix product, in chunks of replicas whose
    /// column matrices hold at most `max_floats` values (one replica at least): the `k²`
    /// shifted windows of every input channel are stacked into `[R, cin·k², B·H'·W']` and
    /// multiplied by the filters `[R, cout, cin·k²]`.
    ///
    /// burn-cubecl differentiates a grouped convolution with respect to its weight by one
    /// convolution per group (unless every group is one channel): a kernel launch per replica,
    /// measured at 0.4 ms per replica on an H200 for LeNet's second convolution at 1,024
    /// replicas. Here every operation is one launch per chunk. On `flex` the grouped
    /// convolution is faster, and keeps the golden outputs.
    fn im2col(
        &self,
        r: usize,
        w: Tensor<2>,
        b: Option<Tensor<1>>,
        x: Tensor<4>,
        max_floats: usize,
    ) -> Tensor<4> {
        let [batch, _, h, wd] = x.dims();
        let [ho, wo] = self.out_size([h, wd]);
        let (cin, cout, k, st) = (self.cin, self.cout, self.k, self.stride);
        let [ph, pw] = self.pad;
        let x = if ph + pw > 0 {
            x.pad([(ph, ph), (pw, pw)], PadMode::Constant(0.0))
        } else {
            x
        };
        let (hp, wp) = (h + 2 * ph, wd + 2 * pw);
        // `[B, R·cin, H, W]` → `[R, cin, B, H, W]`, so that the windows stack into columns
        // with no further copy.
        let x = x.reshape([batch, r, cin, hp, wp]).permute([1, 2, 0, 3, 4]);
        let per_replica = cin * k * k * batch * ho * wo;
        let chunk = (max_floats / per_replica).clamp(1, r);
        let mut outs = Vec::with_capacity(r.div_ceil(chunk));
        for lo in (0..r).step_by(chunk) {
            let n = chunk.min(r - lo);
            let xc = x.clone().slice_dim(0, lo..lo + n);
            let windows: Vec<Tensor<6>> = (0..k * k)
                .map(|t| {
                    let (i, j) = (t / k, t % k);
                    let (ie, je) = (i + (ho - 1) * st + 1, j + (wo - 1) * st + 1);
                    xc.clone()
                        .slice(s![.., .., .., i..ie;st, j..je;st])
                        .unsqueeze_dim::<6>(2)
                })
                .collect();
            // `[n, cin, k², B, H', W']`: row `(c, i, j)` of the columns is the filters' order.
            let cols = Tensor::cat(windows, 2).reshape([n, cin * k * k, batch * ho * wo]);
            let wc = w
                .clone()
                .slice_dim(0, lo..lo + n)
                .reshape([n, cout, cin * k * k]);
            outs.push(wc.matmul(cols));
        }
        let y = if outs.len() == 1 {
            outs.pop().expect("one chunk")
        } else {
            Tensor::cat(outs, 0)
        };
        // `[R, cout, B·H'·W']` → `[B, R·cout, H', W']`.
        let y = y
            .reshape([r, cout, batch, ho, wo])
            .permute([2, 0, 1, 3, 4])
            .reshape([batch, r * cout, ho, wo]);
        match b {
            Some(b) => y + b.reshape([1, r * cout, 1, 1]),
            None => y,
        }
    }
}

/// Replicas from which `Conv::forward` takes im2col when differentiating off `flex`. Measured
/// on an H200 (wgpu, batch 32, forward and backward): below 8 replicas the grouped convolution
/// is as fast or faster (ResNet-20 at 2 replicas: 116 ms against 180 ms); from 16 on im2col wins (LeNet-5:
/// 9 ms against 13 ms at 16, 117 ms against 540 ms at 1,024; ResNet-20: 30–39 against 42 ms per
/// replica).
pub const IM2COL_MIN_REPLICAS: usize = 8;

/// Values in one chunk's column matrix of `Conv::im2col` at most (1 GiB of `f32`): within
/// wgpu's buffer limits, with room for the backward pass's copies.
const IM2COL_FLOATS: usize = 1 << 28;

/// How [`ConvHost`] runs a convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    /// Stride 1: the direct correlation on the input planes.
    Direct,
    /// Stride above 1: im2col into `k²·cin` column planes of this geometry, then a `1 × 1`
    /// correlation.
    Columns(Geom),
}

/// A convolution on the CPU path: the geometry of its input and output maps and how it runs.
///
/// The input must carry at least the convolution's padding as zero margins (its `top` and
/// `left` at least `pad`). The output's geometry is chosen here ([`ConvHost::output`]): the same
/// row stride as the input (the flat correlation writes `q = y·row + x`), with a zero margin of
/// `k − 1 − pad` around the interior where the row leaves room for it, so that the input
/// gradient of a "same" convolution reads the output gradient in place. For a ResNet's 3×3
/// convolutions with padding 1 this makes input, output and both gradients one geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConvHost {
    /// The convolution.
    pub conv: Conv,
    /// The input maps' geometry.
    pub input: Geom,
    /// The output maps' geometry.
    pub output: Geom,
    route: Route,
}

impl ConvHost {
    /// `conv` on maps of geometry `input`.
    ///
    /// # Panics
    /// If the input's margins are narrower than the padding.
    pub fn new(conv: Conv, input: Geom) -> Self {
        let [ph, pw] = conv.pad;
        assert!(
            input.top >= ph && input.left >= pw,
            "the input planes must carry the padding"
        );
        assert!(
            ph < conv.k && pw < conv.k,
            "a padding of at least the kernel side is not supported"
        );
        let [ho, wo] = conv.out_size([input.h, input.w]);
        if conv.stride == 1 {
            let [eh, ew] = [conv.k - 1 - ph, conv.k - 1 - pw];
            let output = if 2 * ew + wo <= input.row {
                Geom::with(ho, wo, input.row, eh, ew, ho + 2 * eh)
            } else {
                Geom::with(ho, wo, input.row, 0, 0, ho)
            };
            ConvHost {
                conv,
                input,
                output,
                route: Route::Direct,
            }
        } else {
            // The output gets one zero pixel around it (the next 3×3 convolution's padding);
            // the columns share its row stride.
            let output = Geom::padded(ho, wo, 1);
            let cols = Geom::with(ho, wo, output.row, 0, 0, ho);
            ConvHost {
                conv,
                input,
                output,
                route: Route::Columns(cols),
            }
        }
    }

    /// The output maps' geometry.
    pub fn output(&self) -> Geom {
        self.output
    }

    /// The geometry of the input gradient [`ConvHost::backward`] writes: the input's where the
    /// input has the output's row stride, else one of its own.
    pub fn input_grad_geom(&self) -> Geom {
        match self.route {
            Route::Columns(_) => self.input,
            Route::Direct
                if self.reads_gradient_in_place() && self.input.row == self.output.row =>
            {
                self.input
            }
            Route::Direct => {
                let row = self.turned_geom().row;
                Geom::with(self.input.h, self.input.w, row, 0, 0, self.input.h)
            }
        }
    }

    /// The zero margins `[rows, columns]` the input gradient's correlation reads around the
    /// output gradient: `k − 1 − pad`.
    fn turned_margin(&self) -> [usize; 2] {
        self.conv.pad.map(|p| self.conv.k - 1 - p)
    }

    /// The output gradient with the margins of [`ConvHost::turned_margin`].
    fn turned_geom(&self) -> Geom {
        let [eh, ew] = self.turned_margin();
        let o = self.output;
        Geom::with(o.h, o.w, o.w + 2 * ew, eh, ew, o.h + 2 * eh)
    }

    /// Whether the output's own margins serve the input gradient's correlation.
    fn reads_gradient_in_place(&self) -> bool {
        let [eh, ew] = self.turned_margin();
        let o = self.output;
        o.top >= eh && o.left >= ew && o.row >= o.left + o.w + ew && o.rows >= o.top + o.h + eh
    }

    /// Column planes the strided route keeps from the forward pass for the backward pass
    /// (`k²·cin` per sample), or `None` for the direct route.
    pub fn columns(&self, samples: usize) -> Option<Maps> {
        match self.route {
            Route::Columns(g) => Some(Maps::new(
                samples,
                self.conv.cin * self.conv.k * self.conv.k,
                g,
            )),
            Route::Direct => None,
        }
    }

    /// Floats of the scratch buffers [`ConvHost::backward`] takes besides its arguments (the
    /// output gradient padded for the input gradient, or the column gradients).
    pub fn scratch_floats(&self, samples: usize) -> usize {
        match self.route {
            Route::Columns(g) => samples * self.conv.cin * self.conv.k * self.conv.k * g.plane,
            Route::Direct if self.reads_gradient_in_place() => 0,
            Route::Direct => samples * self.conv.cout * self.turned_geom().plane,
        }
    }

    /// Where the forward correlation reads the input: the receptive field's top-left corner of
    /// output `(0, 0)`.
    fn input_corner(&self) -> usize {
        let [ph, pw] = self.conv.pad;
        (self.input.top - ph) * self.input.row + self.input.left - pw
    }

    /// `z = conv(x)` (with the bias, if any) for every sample of `x` (of geometry `input`),
    /// into `z` (of geometry [`ConvHost::output`]). The strided route fills `cols` (from
    /// [`ConvHost::columns`]) on the way. Positions of `z` outside the interior get unspecified
    /// finite values.
    pub fn forward(
        &self,
        params: &[f32],
        x: &Maps,
        z: &mut Maps,
        cols: Option<&mut Maps>,
        packed: &mut Packed,
    ) {
        let c = &self.conv;
        debug_assert_eq!((x.geom, z.geom), (self.input, self.output));
        debug_assert_eq!((x.channels, z.channels), (c.cin, c.cout));
        let samples = x.samples;
        let w = &params[c.weight..c.weight + c.weight_len()];
        let bias = c.bias.map(|o| &params[o..o + c.cout]);
        let out = z.planes().shifted(self.output.origin());
        match self.route {
            Route::Direct => {
                packed.pack(w, c.cout, c.cin, c.k, false);
                conv_forward(
                    &ConvCall {
                        x: &x.data,
                        xp: x.planes().shifted(self.input_corner()),
                        w: packed,
                        bias,
                        flat: Flat {
                            k: c.k,
                            row: self.input.row,
                            len: self.output.h * self.input.row,
                        },
                        samples,
                    },
                    &mut z.data,
                    out,
                );
            }
            Route::Columns(g) => {
                let cols = cols.expect("a strided convolution keeps its columns");
                let corner = self.input_corner();
                let per = cols.planes().sample;
                chunks(&mut cols.data, per, |n, sample| {
                    let xs = &x.data[x.planes().at(n, 0) + corner..];
                    im2col(
                        xs,
                        self.input.plane,
                        self.input.row,
                        c.cin,
                        c.k,
                        c.stride,
                        [g.h, g.w],
                        g.row,
                        sample,
                        g.plane,
                    );
                });
                packed.pack(w, c.cout, c.cin * c.k * c.k, 1, false);
                conv_forward(
                    &ConvCall {
                        x: &cols.data,
                        xp: cols.planes(),
                        w: packed,
                        bias,
                        flat: Flat {
                            k: 1,
                            row: g.row,
                            len: g.h * g.row,
                        },
                        samples,
                    },
                    &mut z.data,
                    out,
                );
            }
        }
    }

    /// The gradients of [`ConvHost::forward`]: the filters' (and bias') into `grad` (a row's
    /// gradient, at the convolution's offsets), and with `dx`, the input's (of geometry
    /// [`ConvHost::input_grad_geom`]; positions outside the interior get unspecified finite
    /// values). `dz` is the output's gradient in the output's geometry and zero outside its
    /// interior; `x` and `cols` are what the forward pass read and kept.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        params: &[f32],
        x: &Maps,
        cols: Option<&Maps>,
        dz: &Maps,
        grad: &mut [f32],
        dx: Option<&mut Maps>,
        scratch: &mut ConvScratch,
    ) {
        let c = &self.conv;
        let dzp = dz.planes().shifted(self.output.origin());
        if let Some(b) = c.bias {
            self.bias_grad(dz, &mut grad[b..b + c.cout], scratch);
        }
        let gw = &mut grad[c.weight..c.weight + c.weight_len()];
        let w = &params[c.weight..c.weight + c.weight_len()];
        match self.route {
            Route::Direct => {
                self.direct_weight_grad(x, dz, dzp, gw);
                let Some(dx) = dx else { return };
                self.direct_input_grad(w, dz, dx, scratch);
            }
            Route::Columns(g) => {
                let cols = cols.expect("a strided convolution keeps its columns");
                self.columns_weight_grad(g, cols, dz, dzp, gw);
                let Some(dx) = dx else { return };
                self.columns_input_grad(g, w, dz, dzp, dx, scratch);
            }
        }
    }

    /// The bias' gradient into `gb` (one float per output channel): each channel's sum of `dz`
    /// over the output's interior.
    #[inline]
    fn bias_grad(&self, dz: &Maps, gb: &mut [f32], scratch: &mut ConvScratch) {
        let mask = &scratch.mask(self.output);
        for (co, g) in gb.iter_mut().enumerate() {
            *g = moments(&dz.data, mask, &Channel::of(dz, co), 0.0).0 as f32;
        }
    }

    /// [`Route::Direct`]: the filters' gradient into `gw`, correlating the output's gradient
    /// (`dz`, its planes `dzp` at the interior) with the input `x` read in place.
    #[inline]
    fn direct_weight_grad(&self, x: &Maps, dz: &Maps, dzp: Planes, gw: &mut [f32]) {
        let c = &self.conv;
        conv_weight_grad(
            &WeightGradCall {
                dy: &dz.data,
                dyp: dzp,
                x: &x.data,
                xp: x.planes().shifted(self.input_corner()),
                flat: Flat {
                    k: c.k,
                    row: self.input.row,
                    len: self.output.h * self.input.row,
                },
                cin: c.cin,
                cout: c.cout,
                samples: dz.samples,
            },
            gw,
        );
    }

    /// [`Route::Direct`]: the input's gradient into `dx`, a convolution of the output's gradient
    /// with the filters `w` turned round. `dz` is read in place when its margin is wide enough
    /// for the turned filters, else copied into scratch maps that have that margin.
    #[inline]
    fn direct_input_grad(&self, w: &[f32], dz: &Maps, dx: &mut Maps, scratch: &mut ConvScratch) {
        let c = &self.conv;
        let samples = dz.samples;
        debug_assert_eq!(dx.geom, self.input_grad_geom());
        let [eh, ew] = self.turned_margin();
        let padded;
        let (src, srcp, row) = if self.reads_gradient_in_place() {
            let o = self.output;
            let corner = (o.top - eh) * o.row + o.left - ew;
            (&dz.data, dz.planes().shifted(corner), o.row)
        } else {
            let g = self.turned_geom();
            let maps = scratch_maps(&mut scratch.maps, samples, c.cout, g);
            for n in 0..samples {
                for co in 0..c.cout {
                    let (s, d) = (dz.plane(n, co), maps.plane_mut(n, co));
                    for y in 0..g.h {
                        let (a, b) = (self.output.at(y, 0), g.at(y, 0));
                        d[b..b + g.w].copy_from_slice(&s[a..a + g.w]);
                    }
                }
            }
            padded = &*maps;
            (&padded.data, padded.planes(), g.row)
        };
        scratch.packed.pack(w, c.cout, c.cin, c.k, true);
        let dxg = dx.geom;
        let dxp = dx.planes().shifted(dxg.origin());
        debug_assert_eq!(dxg.row, row);
        conv_forward(
            &ConvCall {
                x: src,
                xp: srcp,
                w: &scratch.packed,
                bias: None,
                flat: Flat {
                    k: c.k,
                    row,
                    len: dxg.h * row,
                },
                samples,
            },
            &mut dx.data,
            dxp,
        );
    }

    /// [`Route::Columns`] (columns of geometry `g`): the filters' gradient into `gw`, a
    /// 1×1 correlation of the output's gradient with the columns the forward pass kept.
    #[inline]
    fn columns_weight_grad(&self, g: Geom, cols: &Maps, dz: &Maps, dzp: Planes, gw: &mut [f32]) {
        let c = &self.conv;
        conv_weight_grad(
            &WeightGradCall {
                dy: &dz.data,
                dyp: dzp,
                x: &cols.data,
                xp: cols.planes(),
                flat: columns_flat(g),
                cin: c.cin * c.k * c.k,
                cout: c.cout,
                samples: dz.samples,
            },
            gw,
        );
    }

    /// [`Route::Columns`] (columns of geometry `g`): the input's gradient into `dx`. The
    /// columns' gradient, a 1×1 convolution of the output's gradient with the filters `w`
    /// transposed, goes into scratch maps, and each sample's columns are added back onto its
    /// input positions (`col2im`).
    #[inline]
    fn columns_input_grad(
        &self,
        g: Geom,
        w: &[f32],
        dz: &Maps,
        dzp: Planes,
        dx: &mut Maps,
        scratch: &mut ConvScratch,
    ) {
        let c = &self.conv;
        let samples = dz.samples;
        debug_assert_eq!(dx.geom, self.input);
        let kk = c.k * c.k;
        scratch.packed.pack(w, c.cout, c.cin * kk, 1, true);
        let dcols = scratch_maps(&mut scratch.maps, samples, c.cin * kk, g);
        let dcols_planes = dcols.planes();
        conv_forward(
            &ConvCall {
                x: &dz.data,
                xp: dzp,
                w: &scratch.packed,
                bias: None,
                flat: columns_flat(g),
                samples,
            },
            &mut dcols.data,
            dcols_planes,
        );
        let dcols = &*dcols;
        let corner = self.input_corner();
        let per = dx.planes().sample;
        chunks(&mut dx.data, per, |n, sample| {
            sample.fill(0.0);
            col2im_add(
                &dcols.data[dcols_planes.at(n, 0)..],
                g.plane,
                c.cin,
                c.k,
                c.stride,
                [g.h, g.w],
                g.row,
                &mut sample[corner..],
                self.input.plane,
                self.input.row,
            );
        });
    }
}

/// The flat walk of a 1×1 kernel over columns of geometry `g`: every row of `g`, whole.
#[inline]
fn columns_flat(g: Geom) -> Flat {
    Flat {
        k: 1,
        row: g.row,
        len: g.h * g.row,
    }
}

/// Scratch buffers of [`ConvHost::backward`], reused from call to call: one set of maps per
/// shape (a network's strided convolutions each keep their column gradients).
#[derive(Debug, Default)]
pub(crate) struct ConvScratch {
    packed: Packed,
    maps: Vec<Maps>,
    masks: Vec<(Geom, Vec<f32>)>,
}

/// The scratch maps of this shape among `maps`, made once (their contents are whatever the last
/// user left).
fn scratch_maps(maps: &mut Vec<Maps>, samples: usize, channels: usize, g: Geom) -> &mut Maps {
    let at = maps
        .iter()
        .position(|m| m.geom == g && m.samples == samples && m.channels == channels);
    let at = at.unwrap_or_else(|| {
        maps.push(Maps::new(samples, channels, g));
        maps.len() - 1
    });
    &mut maps[at]
}

impl ConvScratch {
    /// The interior mask of `g`, made once.
    fn mask(&mut self, g: Geom) -> Vec<f32> {
        if let Some((_, m)) = self.masks.iter().find(|(k, _)| *k == g) {
            return m.clone();
        }
        let m = g.mask();
        self.masks.push((g, m.clone()));
        m
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Tensor, TensorData};

    use super::*;
    use crate::layers::ParamRows;

    /// Deterministic values in `[-0.5, 0.5)`.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect()
    }

    /// The output and the gradients (input, weight, bias) of `conv` on `r` replicas, through the
    /// grouped convolution (`max_floats = None`) or im2col in chunks of at most `max_floats`.
    fn run(conv: Conv, r: usize, side: usize, max_floats: Option<usize>) -> [Vec<f32>; 4] {
        let device = Device::flex().autodiff();
        assert!(
            is_flex(&device),
            "forward takes the grouped convolution on flex"
        );
        let batch = 3;
        let p = conv.len();
        let rows = Tensor::<2>::from_data(TensorData::new(values(r * p, 1), [r, p]), &device)
            .require_grad();
        let x = Tensor::<4>::from_data(
            TensorData::new(
                values(batch * r * conv.cin * side * side, 2),
                [batch, r * conv.cin, side, side],
            ),
            &device,
        )
        .require_grad();
        let params = ParamRows::Whole(Box::new(rows.clone()));
        let y = match max_floats {
            None => conv.forward(&params, x.clone()),
            Some(m) => {
                let w = params.get(conv.weight, conv.weight_len());
                let b = params
                    .get(conv.bias.unwrap(), conv.cout)
                    .reshape([r * conv.cout]);
                conv.im2col(r, w, Some(b), x.clone(), m)
            }
        };
        let [_, _, ho, wo] = y.dims();
        let seen = Tensor::<4>::from_data(
            TensorData::new(
                values(y.shape().num_elements(), 3),
                [batch, r * conv.cout, ho, wo],
            ),
            &device,
        );
        let grads = (y.clone() * seen).sum().backward();
        let read = |t: Tensor<2>| t.into_data().try_to_vec::<f32>().unwrap();
        let gx = x.grad(&grads).unwrap();
        let gx = gx.reshape([batch, r * conv.cin * side * side]);
        let g = rows.grad(&grads).unwrap();
        let wl = conv.weight_len();
        [
            read(y.inner().reshape([batch, r * conv.cout * ho * wo])),
            read(gx),
            read(g.clone().slice_dim(1, 0..wl)),
            read(g.slice_dim(1, wl..wl + conv.cout)),
        ]
    }

    /// im2col (the wgpu path) computes what the grouped convolution (the flex path) computes,
    /// forward and backward, with padding, strides and several chunks.
    #[test]
    fn im2col_agrees_with_the_grouped_convolution() {
        for (stride, pad, side) in [(1, [0, 0], 7), (1, [2, 2], 6), (2, [1, 1], 8)] {
            let conv = Conv {
                weight: 0,
                bias: Some(3 * 2 * 3 * 3),
                cin: 2,
                cout: 3,
                k: 3,
                stride,
                pad,
            };
            let r = 5;
            let grouped = run(conv, r, side, None);
            // One replica per chunk, two, and all five in one.
            let per_replica = 2 * 9 * 3 * conv.out_size([side, side]).iter().product::<usize>();
            for chunk in [1, 2, 5] {
                let im2col = run(conv, r, side, Some(chunk * per_replica));
                for (what, (a, b)) in [
                    "output",
                    "input gradient",
                    "weight gradient",
                    "bias gradient",
                ]
                .iter()
                .zip(grouped.iter().zip(&im2col))
                {
                    assert_eq!(a.len(), b.len(), "{what}");
                    let diff = a
                        .iter()
                        .zip(b)
                        .map(|(a, b)| (a - b).abs())
                        .fold(0.0, f32::max);
                    assert!(
                        diff < 1e-5,
                        "{what}: stride {stride}, pad {pad:?}, {chunk} per chunk: {diff}"
                    );
                }
            }
        }
    }
}
