//! The CPU program of the CIFAR ResNet: one replica's forward and backward pass on flat padded
//! planes, from the layer kit's CPU layers.
//!
//! Every map of a stage has one geometry: the stage's `h × w` with one zero pixel around it,
//! the padding of the next 3×3 convolution. Convolutions write their outputs there, batch norm
//! (fused with the residual sum and the ReLU) writes the next convolution's input there, and
//! the gradients run back through the same planes. The stride-2 convolutions go through
//! im2col ([`crate::layers::conv::ConvHost`]); the option-A shortcut is a subsampling copy.

use crate::layers::conv::{ConvHost, ConvScratch};
use crate::layers::cpu::{Channel, Geom, Maps, add_into, masked_fill, moments, relu_grad};
use crate::layers::kernels::{Out, Packed, Planes};
use crate::layers::linear::{LinearHost, features};
use crate::layers::norm::{NormHost, NormSaved};
use crate::layers::par::{chunks, map_tasks, tasks};
use crate::layers::workspace::with_workspace;
use crate::layers::{CpuNet, Targets, loss_and_grad};

use super::ResNet;

/// A block on the CPU path.
#[derive(Clone, Debug)]
struct BlockHost {
    conv1: ConvHost,
    bn1: NormHost,
    conv2: ConvHost,
    bn2: NormHost,
    /// Whether the shortcut subsamples and widens (option A), rather than the identity.
    project: bool,
}

/// The ResNet's CPU program ([`CpuNet`]).
#[derive(Clone, Debug)]
pub(crate) struct ResNetCpu {
    net: ResNet,
    input: Geom,
    stem: ConvHost,
    stem_bn: NormHost,
    blocks: Vec<BlockHost>,
}

impl ResNetCpu {
    /// The program of `net`.
    pub fn new(net: &ResNet) -> Self {
        let s = net.shape;
        let input = Geom::padded(s.height, s.width, 1);
        let stem = ConvHost::new(net.stem, input);
        let mut geom = stem.output();
        let blocks = net
            .blocks
            .iter()
            .map(|b| {
                let conv1 = ConvHost::new(b.conv1, geom);
                let conv2 = ConvHost::new(b.conv2, conv1.output());
                geom = conv2.output();
                BlockHost {
                    conv1,
                    bn1: NormHost { norm: b.bn1 },
                    conv2,
                    bn2: NormHost { norm: b.bn2 },
                    project: b.conv1.stride > 1 || b.conv1.cin != b.conv1.cout,
                }
            })
            .collect();
        ResNetCpu {
            net: net.clone(),
            input,
            stem,
            stem_bn: NormHost { norm: net.stem_bn },
            blocks,
        }
    }

    fn fc(&self) -> LinearHost {
        LinearHost { lin: self.net.fc }
    }
}

/// The maps of one block's forward pass.
struct BlockWork {
    z1: Maps,
    a1: Maps,
    z2: Maps,
    out: Maps,
    cols: Option<Maps>,
    /// The shortcut of a projecting block.
    shortcut: Option<Maps>,
    saved1: NormSaved,
    saved2: NormSaved,
}

/// Gradient buffers of one stage geometry: the incoming gradient `g` (written by the next
/// layer's backward pass, anything outside the interior), its part through the block's last
/// ReLU `gs`, a batch-norm input gradient `dz` (zero outside the interior, as the
/// convolutions' backward passes read it), and the gradient of a block's middle map.
struct StageGrads {
    geom: Geom,
    g: Maps,
    gs: Maps,
    dz: Maps,
    mid: Maps,
}

/// Everything a pass of `samples` samples needs, kept from pass to pass.
struct Work {
    img: Maps,
    stem_z: Maps,
    stem_a: Maps,
    stem_saved: NormSaved,
    blocks: Vec<BlockWork>,
    feat: Maps,
    logits: Maps,
    /// The backward pass's buffers (training only).
    grads: Option<Backward>,
    masks: Vec<(Geom, Vec<f32>)>,
    packed: Packed,
    scratch: ConvScratch,
    /// Floats the backward pass's convolutions keep in `scratch` (their column gradients).
    scratch_floats: usize,
}

struct Backward {
    dlogits: Maps,
    dfeat: Maps,
    stages: Vec<StageGrads>,
}

impl Work {
    fn new(p: &ResNetCpu, samples: usize, train: bool) -> Work {
        let net = &p.net;
        let channels = net.shape.channels;
        let stem_out = p.stem.output();
        let mut geoms = vec![stem_out];
        let blocks = p
            .blocks
            .iter()
            .map(|b| {
                let (g1, g2) = (b.conv1.output(), b.conv2.output());
                if !geoms.contains(&g2) {
                    geoms.push(g2);
                }
                BlockWork {
                    z1: Maps::new(samples, b.conv1.conv.cout, g1),
                    a1: Maps::new(samples, b.conv1.conv.cout, g1),
                    z2: Maps::new(samples, b.conv2.conv.cout, g2),
                    out: Maps::new(samples, b.conv2.conv.cout, g2),
                    cols: b.conv1.columns(samples),
                    shortcut: b.project.then(|| Maps::new(samples, b.conv2.conv.cout, g2)),
                    saved1: NormSaved::default(),
                    saved2: NormSaved::default(),
                }
            })
            .collect();
        let width = net.fc.fan_in;
        let f = features(samples);
        let grads = train.then(|| Backward {
            dlogits: Maps::new(1, net.classes, f),
            dfeat: Maps::new(1, width, f),
            stages: geoms
                .iter()
                .map(|&geom| {
                    let c = p
                        .blocks
                        .iter()
                        .map(|b| &b.conv2)
                        .chain([&p.stem])
                        .find(|c| c.output() == geom)
                        .map_or(0, |c| c.conv.cout);
                    StageGrads {
                        geom,
                        g: Maps::new(samples, c, geom),
                        gs: Maps::new(samples, c, geom),
                        dz: Maps::new(samples, c, geom),
                        mid: Maps::new(samples, c, geom),
                    }
                })
                .collect(),
        });
        Work {
            img: Maps::new(samples, channels, p.input),
            stem_z: Maps::new(samples, p.stem.conv.cout, stem_out),
            stem_a: Maps::new(samples, p.stem.conv.cout, stem_out),
            stem_saved: NormSaved::default(),
            blocks,
            feat: Maps::new(1, width, f),
            logits: Maps::new(1, net.classes, f),
            grads,
            masks: geoms.iter().map(|g| (*g, g.mask())).collect(),
            packed: Packed::default(),
            scratch: ConvScratch::default(),
            scratch_floats: if train {
                p.blocks
                    .iter()
                    .map(|b| b.conv1.scratch_floats(samples) + b.conv2.scratch_floats(samples))
                    .sum()
            } else {
                0
            },
        }
    }

    fn floats(&self) -> usize {
        let mut n = self.img.floats() + self.stem_z.floats() + self.stem_a.floats();
        for b in &self.blocks {
            n += b.z1.floats() + b.a1.floats() + b.z2.floats() + b.out.floats();
            n += b.cols.as_ref().map_or(0, Maps::floats);
            n += b.shortcut.as_ref().map_or(0, Maps::floats);
        }
        n += self.feat.floats() + self.logits.floats();
        if let Some(g) = &self.grads {
            n += g.dlogits.floats() + g.dfeat.floats();
            for s in &g.stages {
                n += s.g.floats() + s.gs.floats() + s.dz.floats() + s.mid.floats();
            }
        }
        n + self.masks.iter().map(|(_, m)| m.len()).sum::<usize>() + self.scratch_floats
    }
}

/// The mask of `geom` among `masks`.
fn mask_of(masks: &[(Geom, Vec<f32>)], geom: Geom) -> &[f32] {
    &masks
        .iter()
        .find(|(g, _)| *g == geom)
        .expect("a mask per geometry")
        .1
}

/// Copies CHW images into the interior of `img`'s planes, sample by sample on every thread.
fn load_images(x: &[f32], img: &mut Maps) {
    let g = img.geom;
    let (channels, per) = (img.channels, img.channels * g.area());
    let stride = channels * g.plane;
    chunks(&mut img.data, stride, |n, planes| {
        let src = &x[n * per..(n + 1) * per];
        for c in 0..channels {
            let (plane, src) = (&mut planes[c * g.plane..], &src[c * g.area()..]);
            for y in 0..g.h {
                let at = g.at(y, 0);
                plane[at..at + g.w].copy_from_slice(&src[y * g.w..(y + 1) * g.w]);
            }
        }
    });
}

/// The option-A shortcut of a projecting block: `x` subsampled at `stride`, its channels first,
/// the new ones zero (they stay zero: nothing writes them).
fn shortcut_forward(x: &Maps, stride: usize, out: &mut Maps) {
    let (gi, go) = (x.geom, out.geom);
    let stride_out = out.channels * go.plane;
    chunks(&mut out.data, stride_out, |n, planes| {
        for c in 0..x.channels {
            let (src, dst) = (x.plane(n, c), &mut planes[c * go.plane..]);
            for y in 0..go.h {
                for xo in 0..go.w {
                    dst[go.at(y, xo)] = src[gi.at(y * stride, xo * stride)];
                }
            }
        }
    });
}

/// The shortcut's gradient added into the input's: `dx(y·s, x·s) += g(y, x)` on the input's
/// channels.
fn shortcut_backward(g: &Maps, stride: usize, dx: &mut Maps) {
    let (go, gi) = (g.geom, dx.geom);
    let channels = dx.channels;
    chunks(&mut dx.data, channels * gi.plane, |n, planes| {
        for c in 0..channels {
            let (src, dst) = (g.plane(n, c), &mut planes[c * gi.plane..]);
            for y in 0..go.h {
                for xo in 0..go.w {
                    dst[gi.at(y * stride, xo * stride)] += src[go.at(y, xo)];
                }
            }
        }
    });
}

/// `f(c)` for every channel `c < channels`, on every thread.
fn each_channel(channels: usize, f: impl Fn(usize) + Sync + Send) {
    tasks(channels, f);
}

impl ResNetCpu {
    /// The forward pass into `w` (training mode with `state`: batch statistics, the updated
    /// running statistics written into `state`, a row-sized buffer, at their offsets).
    fn forward(&self, params: &[f32], x: &[f32], w: &mut Work, mut state: Option<&mut [f32]>) {
        load_images(x, &mut w.img);
        let Work {
            img,
            stem_z,
            stem_a,
            stem_saved,
            blocks,
            feat,
            logits,
            masks,
            packed,
            ..
        } = w;
        self.stem.forward(params, img, stem_z, None, packed);
        let mask = mask_of(masks, stem_z.geom);
        match state.as_deref_mut() {
            Some(st) => self.stem_bn.train_forward(
                params,
                stem_z,
                mask,
                None,
                true,
                stem_a,
                stem_saved,
                &mut st[self.stem_bn.norm.stats..],
            ),
            None => self
                .stem_bn
                .eval_forward(params, stem_z, mask, None, true, stem_a),
        }
        let mut input: &Maps = stem_a;
        for (b, bw) in self.blocks.iter().zip(blocks.iter_mut()) {
            b.conv1
                .forward(params, input, &mut bw.z1, bw.cols.as_mut(), packed);
            let m1 = mask_of(masks, bw.z1.geom);
            match state.as_deref_mut() {
                Some(st) => b.bn1.train_forward(
                    params,
                    &bw.z1,
                    m1,
                    None,
                    true,
                    &mut bw.a1,
                    &mut bw.saved1,
                    &mut st[b.bn1.norm.stats..],
                ),
                None => b
                    .bn1
                    .eval_forward(params, &bw.z1, m1, None, true, &mut bw.a1),
            }
            b.conv2.forward(params, &bw.a1, &mut bw.z2, None, packed);
            let residual: &Maps = match bw.shortcut.as_mut() {
                Some(sc) => {
                    shortcut_forward(input, b.conv1.conv.stride, sc);
                    sc
                }
                None => input,
            };
            let m2 = mask_of(masks, bw.z2.geom);
            match state.as_deref_mut() {
                Some(st) => b.bn2.train_forward(
                    params,
                    &bw.z2,
                    m2,
                    Some(residual),
                    true,
                    &mut bw.out,
                    &mut bw.saved2,
                    &mut st[b.bn2.norm.stats..],
                ),
                None => b
                    .bn2
                    .eval_forward(params, &bw.z2, m2, Some(residual), true, &mut bw.out),
            }
            input = &bw.out;
        }
        // Global average pooling into feature planes (one per channel, samples side by side).
        let g = input.geom;
        let area = g.area() as f64;
        let mask = mask_of(masks, g);
        let pooled: Vec<Vec<f32>> = map_tasks(input.channels, |c| {
            (0..input.samples)
                .map(|n| {
                    let one = Channel {
                        planes: Planes {
                            offset: input.planes().at(n, 0),
                            ..input.planes()
                        },
                        c,
                        samples: 1,
                        span: g.span(),
                    };
                    (moments(&input.data, mask, &one, 0.0).0 / area) as f32
                })
                .collect()
        });
        for (c, values) in pooled.into_iter().enumerate() {
            feat.plane_mut(0, c)[..values.len()].copy_from_slice(&values);
        }
        self.fc().forward(params, feat, logits);
    }
}

impl CpuNet for ResNetCpu {
    fn outputs(&self) -> usize {
        self.net.classes
    }

    fn input_len(&self) -> usize {
        let s = self.net.shape;
        s.channels * s.height * s.width
    }

    fn train(
        &self,
        params: &[f32],
        x: &[f32],
        targets: Targets<'_>,
        scale: f32,
        grad: &mut [f32],
    ) -> Vec<f32> {
        let samples = targets.len();
        let key = (self.net.clone(), samples, true);
        with_workspace(
            &key,
            || Work::new(self, samples, true),
            |w| self.train_with(params, x, targets, scale, grad, w),
        )
    }

    fn infer(&self, params: &[f32], x: &[f32], samples: usize, out: &mut [f32]) {
        debug_assert_eq!(x.len(), samples * self.input_len());
        // The training pass's buffers of the same size (an evaluation goes in chunks of the
        // minibatch size): one set of buffers per thread.
        let key = (self.net.clone(), samples, true);
        with_workspace(
            &key,
            || Work::new(self, samples, true),
            |w| {
                self.forward(params, x, w, None);
                let k = self.net.classes;
                for n in 0..samples {
                    for c in 0..k {
                        out[n * k + c] = w.logits.plane(0, c)[n];
                    }
                }
            },
        )
    }

    fn train_floats(&self, batch: usize) -> usize {
        Work::new(self, batch, true).floats()
    }
}

impl ResNetCpu {
    /// One training pass over a batch: the forward pass, the loss and its gradient at the
    /// logits (`scale` times it, into `grad` with every parameter's), then the backward pass
    /// from the classifier through the pooling and the blocks, last to first, to the stem.
    /// Returns each sample's loss.
    fn train_with(
        &self,
        params: &[f32],
        x: &[f32],
        targets: Targets<'_>,
        scale: f32,
        grad: &mut [f32],
        w: &mut Work,
    ) -> Vec<f32> {
        let samples = targets.len();
        self.forward(params, x, w, Some(&mut *grad));
        let Work {
            img,
            stem_z,
            stem_a,
            stem_saved,
            blocks,
            feat,
            logits,
            grads,
            masks,
            scratch,
            ..
        } = w;
        let Backward {
            dlogits,
            dfeat,
            stages,
        } = grads.as_mut().expect("a training workspace");
        let plane = logits.geom.plane;
        let losses = loss_and_grad(
            &logits.data,
            plane,
            self.net.classes,
            targets,
            scale,
            &mut dlogits.data,
        );
        self.fc()
            .backward(params, feat, dlogits, grad, Some(&mut *dfeat));
        self.pool_backward(dfeat, samples, stages, masks);
        for (i, (b, bw)) in self.blocks.iter().zip(blocks.iter()).enumerate().rev() {
            let input: &Maps = if i == 0 { stem_a } else { &blocks[i - 1].out };
            b.backward(bw, input, params, stages, masks, grad, scratch);
        }
        let geom = stem_a.geom;
        let s = stage_at(stages, geom);
        let mask = mask_of(masks, geom);
        let StageGrads { g, gs, dz, .. } = &mut stages[s];
        {
            let (out, g) = (Out::new(&mut gs.data), &*g);
            each_channel(g.channels, |c| {
                relu_grad(&g.data, &stem_a.data, mask, &Channel::of(g, c), out)
            });
        }
        self.stem_bn
            .backward(params, stem_z, mask, stem_saved, gs, None, dz, grad);
        self.stem
            .backward(params, img, None, dz, grad, None, scratch);
        losses
    }

    /// The pooling's gradient, spread over the last map's interior: each sample's feature
    /// gradient `dfeat`, divided by the map's area, at every interior position of its channel
    /// (into the `g` of the last map's stage).
    #[inline]
    fn pool_backward(
        &self,
        dfeat: &Maps,
        samples: usize,
        stages: &mut [StageGrads],
        masks: &[(Geom, Vec<f32>)],
    ) {
        let last = self.blocks.last().map_or(&self.stem, |b| &b.conv2).output();
        let area = last.area() as f32;
        let s = stage_at(stages, last);
        let g = &mut stages[s].g;
        let mask = mask_of(masks, last);
        let out = Out::new(&mut g.data);
        let g = &*g;
        each_channel(g.channels, |c| {
            let values: Vec<f32> = dfeat.plane(0, c)[..samples]
                .iter()
                .map(|v| v / area)
                .collect();
            masked_fill(mask, &Channel::of(g, c), &values, out);
        });
    }
}

impl BlockHost {
    /// The block's backward pass, from the gradient of its output (the `g` of its stage) to the
    /// gradient of its `input` (the `g` of the input's stage: the same buffer, overwritten, when
    /// the block keeps the geometry; the previous stage's when it projects), the parameters'
    /// gradients into `grad`. `bw` is what the forward pass kept.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn backward(
        &self,
        bw: &BlockWork,
        input: &Maps,
        params: &[f32],
        stages: &mut [StageGrads],
        masks: &[(Geom, Vec<f32>)],
        grad: &mut [f32],
        scratch: &mut ConvScratch,
    ) {
        let b = self;
        let s = stage_at(stages, bw.out.geom);
        let mask = mask_of(masks, bw.out.geom);
        let StageGrads { g, gs, dz, mid, .. } = &mut stages[s];
        {
            let (out, g) = (Out::new(&mut gs.data), &*g);
            each_channel(g.channels, |c| {
                relu_grad(&g.data, &bw.out.data, mask, &Channel::of(g, c), out)
            });
        }
        b.bn2
            .backward(params, &bw.z2, mask, &bw.saved2, gs, None, dz, grad);
        b.conv2
            .backward(params, &bw.a1, None, dz, grad, Some(&mut *mid), scratch);
        let m1 = mask_of(masks, bw.z1.geom);
        b.bn1
            .backward(params, &bw.z1, m1, &bw.saved1, mid, Some(&bw.a1), dz, grad);
        if b.project {
            // The input gradient goes to the previous stage's buffer.
            let t = stage_at(stages, input.geom);
            debug_assert_ne!(t, s, "a projecting block changes the geometry");
            let (lo, hi) = stages.split_at_mut(s.max(t));
            let (dst, src) = if t < s {
                (&mut lo[t], &mut hi[0])
            } else {
                (&mut hi[0], &mut lo[s])
            };
            b.conv1.backward(
                params,
                input,
                bw.cols.as_ref(),
                &src.dz,
                grad,
                Some(&mut dst.g),
                scratch,
            );
            shortcut_backward(&src.gs, b.conv1.conv.stride, &mut dst.g);
        } else {
            let StageGrads { g, gs, dz, .. } = &mut stages[s];
            b.conv1
                .backward(params, input, None, dz, grad, Some(&mut *g), scratch);
            let (out, gs) = (Out::new(&mut g.data), &*gs);
            let channels = g.channels;
            let g = &*g;
            each_channel(channels, |c| add_into(&gs.data, &Channel::of(g, c), out));
        }
    }
}

/// The index of the gradient buffers of geometry `g` among `stages` (one set per geometry).
#[inline]
fn stage_at(stages: &[StageGrads], g: Geom) -> usize {
    stages
        .iter()
        .position(|s| s.geom == g)
        .expect("gradient buffers per geometry")
}
