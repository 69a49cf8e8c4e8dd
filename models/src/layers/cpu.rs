//! Maps on flat padded planes, and the elementwise passes of the CPU path.
//!
//! A batch of maps is `samples × channels` planes ([`Planes`]); each plane holds one channel of
//! one sample in a [`Geom`]: the `h × w` interior at rows `top..top + h` and columns
//! `left..left + w` of rows `row` floats long, zero around it where the next convolution reads
//! padding, and slack after the last row so that vectors may run past the end. The elementwise
//! passes run over a plane's [`Geom::span`] (the rows that hold the interior, padding columns
//! included) in whole vectors and keep the padding at zero with a mask ([`Geom::mask`]): no
//! per-row loop, no scalar tail, and the same code for every width.
//!
//! The passes write through [`Out`] handles, so that the channels of one buffer can be written
//! by several threads at once: each pass writes only the planes of its own channel.
//!
//! Sums over a batch (batch-norm statistics and their gradients) are taken per plane in vector
//! lanes, reduced in a fixed order, and added plane after plane in `f64`: the same bits for any
//! number of threads, since a call is single-threaded and callers split work by replica.

use std::ops::Range;

use super::kernels::{MAX_LANES, Out, Planes};
use super::simd::dispatch;

/// Where a map's interior sits in its planes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geom {
    /// Interior rows.
    pub h: usize,
    /// Interior columns.
    pub w: usize,
    /// Row stride.
    pub row: usize,
    /// First interior row.
    pub top: usize,
    /// First interior column.
    pub left: usize,
    /// Rows of the plane (interior and padding).
    pub rows: usize,
    /// Floats per plane: the rows, then slack for vectors and filter reach past the end.
    pub plane: usize,
}

impl Geom {
    /// An `h × w` map with `pad` zero rows and columns on every side.
    pub fn padded(h: usize, w: usize, pad: usize) -> Geom {
        Geom::with(h, w, w + 2 * pad, pad, pad, h + 2 * pad)
    }

    /// An `h × w` map at `(top, left)` in `rows` rows of `row` floats.
    pub fn with(h: usize, w: usize, row: usize, top: usize, left: usize, rows: usize) -> Geom {
        assert!(
            left + w <= row && top + h <= rows,
            "the interior must fit the plane"
        );
        Geom {
            h,
            w,
            row,
            top,
            left,
            rows,
            plane: (rows * row + 2 * row + 2 * MAX_LANES).next_multiple_of(MAX_LANES),
        }
    }

    /// Index of interior pixel `(y, x)` in a plane.
    pub fn at(&self, y: usize, x: usize) -> usize {
        (self.top + y) * self.row + self.left + x
    }

    /// Index of the interior's first pixel.
    pub fn origin(&self) -> usize {
        self.at(0, 0)
    }

    /// The rows holding the interior, padding columns included.
    pub fn span(&self) -> Range<usize> {
        self.top * self.row..(self.top + self.h) * self.row
    }

    /// Interior pixels per plane.
    pub fn area(&self) -> usize {
        self.h * self.w
    }

    /// `1.0` at the interior's pixels, `0.0` elsewhere, over a whole plane.
    pub fn mask(&self) -> Vec<f32> {
        let mut m = vec![0.0; self.plane];
        for y in 0..self.h {
            let at = self.at(y, 0);
            m[at..at + self.w].fill(1.0);
        }
        m
    }

    /// Planes of `channels` channels per sample, from index 0.
    pub fn planes(&self, channels: usize) -> Planes {
        Planes {
            offset: 0,
            plane: self.plane,
            sample: channels * self.plane,
        }
    }
}

/// A batch of maps in one buffer: `samples × channels` planes of a [`Geom`], zero where
/// nothing has written.
#[derive(Clone, Debug)]
pub(crate) struct Maps {
    /// The values.
    pub data: Vec<f32>,
    /// Channels per sample.
    pub channels: usize,
    /// Samples.
    pub samples: usize,
    /// The geometry of every plane.
    pub geom: Geom,
}

impl Maps {
    /// Zeroed maps.
    pub fn new(samples: usize, channels: usize, geom: Geom) -> Maps {
        Maps {
            data: vec![0.0; samples * channels * geom.plane],
            channels,
            samples,
            geom,
        }
    }

    /// Where the planes are.
    pub fn planes(&self) -> Planes {
        self.geom.planes(self.channels)
    }

    /// Plane `(n, c)`.
    pub fn plane(&self, n: usize, c: usize) -> &[f32] {
        let p = self.geom.plane;
        let at = (n * self.channels + c) * p;
        &self.data[at..at + p]
    }

    /// Plane `(n, c)`, to write.
    pub fn plane_mut(&mut self, n: usize, c: usize) -> &mut [f32] {
        let p = self.geom.plane;
        let at = (n * self.channels + c) * p;
        &mut self.data[at..at + p]
    }

    /// Floats held.
    pub fn floats(&self) -> usize {
        self.data.len()
    }
}

/// The planes of one channel of a batch: `samples` planes of `planes` at channel `c`, each
/// visited over `span` (in whole vectors).
#[derive(Clone, Debug)]
pub(crate) struct Channel {
    /// Where the planes are.
    pub planes: Planes,
    /// The channel.
    pub c: usize,
    /// Samples.
    pub samples: usize,
    /// The positions visited in each plane.
    pub span: Range<usize>,
}

impl Channel {
    /// Channel `c` of `maps`, over the span of its geometry.
    pub fn of(maps: &Maps, c: usize) -> Channel {
        Channel {
            planes: maps.planes(),
            c,
            samples: maps.samples,
            span: maps.geom.span(),
        }
    }

    /// Index of the first visited position of sample `n`'s plane.
    #[inline(always)]
    fn start(&self, n: usize) -> usize {
        self.planes.at(n, self.c) + self.span.start
    }

    /// The visited positions rounded up to whole vectors of `lanes`, checked against every
    /// buffer's length; returns the rounded count.
    fn checked(&self, lanes: usize, lens: &[usize], mask: usize) -> usize {
        let count = self.span.len().next_multiple_of(lanes);
        assert!(
            self.span.start + count <= mask,
            "a pass over {:?} runs past the mask of {mask}",
            self.span
        );
        if self.samples > 0 {
            let end = self.start(self.samples - 1) + count;
            for &len in lens {
                assert!(end <= len, "a pass would run to {end}, past {len}");
            }
        }
        count
    }
}

dispatch! {
    /// `(Σ d, Σ d²)` over one channel's planes with `d = mask · (z − center)`, in `f64`, the
    /// planes' sums added in sample order: the interior's sum (with `center = 0`) and its sum of
    /// squared deviations.
    pub(crate) fn moments<V>(z: &[f32], mask: &[f32], ch: &Channel, center: f32) -> (f64, f64) {
        let count = ch.checked(V::LANES, &[z.len()], mask.len());
        let (mut t1, mut t2) = (0.0f64, 0.0f64);
        unsafe {
            let nc = V::splat(-center);
            for n in 0..ch.samples {
                let zp = z.as_ptr().add(ch.start(n));
                let mp = mask.as_ptr().add(ch.span.start);
                let (mut s1, mut s2) = (V::zero(), V::zero());
                let mut i = 0;
                while i < count {
                    let d = V::select_positive(V::load(mp.add(i)), V::add(V::load(zp.add(i)), nc));
                    s1 = V::add(s1, d);
                    s2 = V::fma(d, d, s2);
                    i += V::LANES;
                }
                t1 += f64::from(s1.hsum());
                t2 += f64::from(s2.hsum());
            }
        }
        (t1, t2)
    }
}

dispatch! {
    /// `out = mask · act(z · scale + shift + residual)` over one channel's planes, `act` ReLU
    /// or the identity: batch norm's normalization (with its affine map folded into `scale`
    /// and `shift`), the residual sum and the activation in one pass. `out`'s padding within
    /// the span is set to zero.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn affine_act<V>(
        z: &[f32],
        mask: &[f32],
        ch: &Channel,
        scale: f32,
        shift: f32,
        residual: Option<&[f32]>,
        relu: bool,
        out: Out,
    ) {
        let count = ch.checked(
            V::LANES,
            &[z.len(), out.len(), residual.map_or(usize::MAX, <[f32]>::len)],
            mask.len(),
        );
        unsafe {
            let (s, t, zero) = (V::splat(scale), V::splat(shift), V::zero());
            let mp = mask.as_ptr().add(ch.span.start);
            for n in 0..ch.samples {
                let at = ch.start(n);
                let (zp, op) = (z.as_ptr().add(at), out.ptr().add(at));
                let rp = residual.map(|r| r.as_ptr().add(at));
                let mut i = 0;
                while i < count {
                    let mut v = V::fma(V::load(zp.add(i)), s, t);
                    if let Some(rp) = rp {
                        v = V::add(v, V::load(rp.add(i)));
                    }
                    if relu {
                        v = V::max(v, zero);
                    }
                    V::select_positive(V::load(mp.add(i)), v).store(op.add(i));
                    i += V::LANES;
                }
            }
        }
    }
}

dispatch! {
    /// `(Σ dy, Σ dy · (z − mean))` over one channel's planes, in `f64`, with `dy = mask · g`,
    /// and where `relu_of` is given, `dy = 0` where it is not positive (the gradient through a
    /// ReLU whose output was `relu_of`): batch norm's `dβ` and `dγ / inv_std`.
    pub(crate) fn norm_grad_sums<V>(
        g: &[f32],
        relu_of: Option<&[f32]>,
        z: &[f32],
        mask: &[f32],
        ch: &Channel,
        mean: f32,
    ) -> (f64, f64) {
        let count = ch.checked(
            V::LANES,
            &[g.len(), z.len(), relu_of.map_or(usize::MAX, <[f32]>::len)],
            mask.len(),
        );
        let (mut t1, mut t2) = (0.0f64, 0.0f64);
        unsafe {
            let m = V::splat(-mean);
            let mp = mask.as_ptr().add(ch.span.start);
            for n in 0..ch.samples {
                let at = ch.start(n);
                let (gp, zp) = (g.as_ptr().add(at), z.as_ptr().add(at));
                let ap = relu_of.map(|a| a.as_ptr().add(at));
                let (mut s1, mut s2) = (V::zero(), V::zero());
                let mut i = 0;
                while i < count {
                    let mut dy = V::select_positive(V::load(mp.add(i)), V::load(gp.add(i)));
                    if let Some(ap) = ap {
                        dy = V::select_positive(V::load(ap.add(i)), dy);
                    }
                    s1 = V::add(s1, dy);
                    s2 = V::fma(dy, V::add(V::load(zp.add(i)), m), s2);
                    i += V::LANES;
                }
                t1 += f64::from(s1.hsum());
                t2 += f64::from(s2.hsum());
            }
        }
        (t1, t2)
    }
}

dispatch! {
    /// `dz = mask · (a1 · dy + a2 · (z − mean) + a3)` over one channel's planes, `dy` as in
    /// [`norm_grad_sums`]: batch norm's input gradient from its per-channel constants.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn norm_grad_write<V>(
        g: &[f32],
        relu_of: Option<&[f32]>,
        z: &[f32],
        mask: &[f32],
        ch: &Channel,
        mean: f32,
        consts: [f32; 3],
        dz: Out,
    ) {
        let count = ch.checked(
            V::LANES,
            &[g.len(), z.len(), dz.len(), relu_of.map_or(usize::MAX, <[f32]>::len)],
            mask.len(),
        );
        unsafe {
            let [a1, a2, a3] = consts;
            let (m, c1, c2, c3) = (V::splat(-mean), V::splat(a1), V::splat(a2), V::splat(a3));
            let mp = mask.as_ptr().add(ch.span.start);
            for n in 0..ch.samples {
                let at = ch.start(n);
                let (gp, zp, op) = (g.as_ptr().add(at), z.as_ptr().add(at), dz.ptr().add(at));
                let ap = relu_of.map(|a| a.as_ptr().add(at));
                let mut i = 0;
                while i < count {
                    let mask_v = V::load(mp.add(i));
                    let mut dy = V::select_positive(mask_v, V::load(gp.add(i)));
                    if let Some(ap) = ap {
                        dy = V::select_positive(V::load(ap.add(i)), dy);
                    }
                    let centred = V::add(V::load(zp.add(i)), m);
                    let v = V::fma(c1, dy, V::fma(c2, centred, c3));
                    V::select_positive(mask_v, v).store(op.add(i));
                    i += V::LANES;
                }
            }
        }
    }
}

dispatch! {
    /// `out = mask · g`, zero where `relu_of` is not positive, over one channel's planes: the
    /// gradient through a ReLU whose output was `relu_of`.
    pub(crate) fn relu_grad<V>(g: &[f32], relu_of: &[f32], mask: &[f32], ch: &Channel, out: Out) {
        let count = ch.checked(V::LANES, &[g.len(), relu_of.len(), out.len()], mask.len());
        unsafe {
            let mp = mask.as_ptr().add(ch.span.start);
            for n in 0..ch.samples {
                let at = ch.start(n);
                let (gp, ap, op) = (g.as_ptr().add(at), relu_of.as_ptr().add(at), out.ptr().add(at));
                let mut i = 0;
                while i < count {
                    let dy = V::select_positive(V::load(mp.add(i)), V::load(gp.add(i)));
                    V::select_positive(V::load(ap.add(i)), dy).store(op.add(i));
                    i += V::LANES;
                }
            }
        }
    }
}

dispatch! {
    /// `out += src` over one channel's planes.
    pub(crate) fn add_into<V>(src: &[f32], ch: &Channel, out: Out) {
        let count = ch.checked(V::LANES, &[src.len(), out.len()], usize::MAX);
        unsafe {
            for n in 0..ch.samples {
                let at = ch.start(n);
                let (sp, op) = (src.as_ptr().add(at), out.ptr().add(at));
                let mut i = 0;
                while i < count {
                    V::add(V::load(op.add(i)), V::load(sp.add(i))).store(op.add(i));
                    i += V::LANES;
                }
            }
        }
    }
}

dispatch! {
    /// `out = mask · values[n]` over sample `n`'s plane of one channel.
    pub(crate) fn masked_fill<V>(mask: &[f32], ch: &Channel, values: &[f32], out: Out) {
        let count = ch.checked(V::LANES, &[out.len()], mask.len());
        assert_eq!(values.len(), ch.samples, "one value per sample");
        unsafe {
            let mp = mask.as_ptr().add(ch.span.start);
            for (n, &value) in values.iter().enumerate() {
                let op = out.ptr().add(ch.start(n));
                let v = V::splat(value);
                let mut i = 0;
                while i < count {
                    V::select_positive(V::load(mp.add(i)), v).store(op.add(i));
                    i += V::LANES;
                }
            }
        }
    }
}

/// Mean softmax cross-entropy of `logits` (`[classes][samples]`, class-major with a stride of
/// `stride` floats per class) against `labels`, and its gradient with respect to the logits,
/// times `scale[n]` for sample `n` (written in the same layout). Returns each sample's loss.
pub(crate) fn softmax_cross_entropy(
    logits: &[f32],
    stride: usize,
    classes: usize,
    labels: &[u32],
    grad_scale: &[f32],
    grad: &mut [f32],
) -> Vec<f32> {
    let samples = labels.len();
    let mut losses = Vec::with_capacity(samples);
    for n in 0..samples {
        let at = |k: usize| logits[k * stride + n];
        let max = (0..classes).map(at).fold(f32::NEG_INFINITY, f32::max);
        let sum: f32 = (0..classes).map(|k| (at(k) - max).exp()).sum();
        let log_sum = sum.ln() + max;
        let label = labels[n] as usize;
        losses.push(log_sum - at(label));
        for k in 0..classes {
            let p = (at(k) - log_sum).exp();
            let target = if k == label { 1.0 } else { 0.0 };
            grad[k * stride + n] = (p - target) * grad_scale[n];
        }
    }
    losses
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_passes_see_only_the_interior() {
        let g = Geom::padded(5, 7, 1);
        let mut maps = Maps::new(2, 1, g);
        let mask = g.mask();
        maps.data.fill(100.0);
        for n in 0..2 {
            for y in 0..g.h {
                for x in 0..g.w {
                    let at = g.at(y, x);
                    maps.plane_mut(n, 0)[at] = (n * 35 + y * g.w + x) as f32;
                }
            }
        }
        let ch = Channel::of(&maps, 0);
        let count = 2.0 * g.area() as f64;
        let (s1, _) = moments(&maps.data, &mask, &ch, 0.0);
        assert_eq!(s1, (0..70).sum::<usize>() as f64);
        let mean = (s1 / count) as f32;
        let (_, s2) = moments(&maps.data, &mask, &ch, mean);
        let want: f64 = (0..70).map(|v| (f64::from(v as f32 - mean)).powi(2)).sum();
        assert!((s2 - want).abs() < 1e-3, "{s2} {want}");
        let mut out = vec![7.0f32; maps.floats()];
        affine_act(
            &maps.data,
            &mask,
            &ch,
            -1.0,
            3.0,
            None,
            true,
            Out::new(&mut out),
        );
        for i in g.span() {
            let z = maps.data[i];
            let want = if mask[i] > 0.0 {
                (3.0 - z).max(0.0)
            } else {
                0.0
            };
            assert_eq!(out[i], want, "at {i}");
        }
        // Outside the spans, nothing was written but the overshoot of the last vector.
        assert_eq!(out[0], 7.0);
    }
}
