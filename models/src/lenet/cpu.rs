//! The CPU program of LeNet-5: one replica's forward and backward pass on flat planes, from
//! the layer kit's CPU layers.
//!
//! The image is loaded into planes carrying the first convolution's padding; each pooling
//! writes its activated maps where the next layer reads them (the second convolution's padded
//! planes, then one feature plane per flattened `(c, y, x)` feature with the samples side by
//! side for the dense layers). The gradient runs back through the same places; a pooling's
//! gradient goes to the first maximum of each window.

use crate::layers::conv::{ConvHost, ConvScratch};
use crate::layers::cpu::{Geom, Maps};
use crate::layers::kernels::Packed;
use crate::layers::linear::{LinearHost, features};
use crate::layers::par::{chunks, chunks2};
use crate::layers::pool::{pool_plane, unpool_plane};
use crate::layers::workspace::with_workspace;
use crate::layers::{CpuNet, Targets, activate_value, activation_slope, loss_and_grad};
use crate::mlp::Activation;

use super::LeNet;

/// LeNet-5's CPU program ([`CpuNet`]).
#[derive(Clone, Debug)]
pub(crate) struct LeNetCpu {
    net: LeNet,
    input: Geom,
    conv1: ConvHost,
    pooled: Geom,
    conv2: ConvHost,
    /// The second pooling's map, `[h, w]`.
    map: [usize; 2],
}

/// A geometry with the convolution's padding `[rows, columns]` around an `h × w` map.
fn padded(h: usize, w: usize, [ph, pw]: [usize; 2]) -> Geom {
    Geom::with(h, w, w + 2 * pw, ph, pw, h + 2 * ph)
}

impl LeNetCpu {
    /// The program of `net`.
    pub fn new(net: &LeNet) -> Self {
        let s = net.shape;
        let input = padded(s.height, s.width, net.conv1.pad);
        let conv1 = ConvHost::new(net.conv1, input);
        let g1 = conv1.output();
        let pooled = padded(g1.h / 2, g1.w / 2, net.conv2.pad);
        let conv2 = ConvHost::new(net.conv2, pooled);
        let g2 = conv2.output();
        LeNetCpu {
            net: net.clone(),
            input,
            conv1,
            pooled,
            conv2,
            map: [g2.h / 2, g2.w / 2],
        }
    }

    fn fc(&self, i: usize) -> LinearHost {
        LinearHost {
            lin: self.net.fc[i],
        }
    }
}

struct Work {
    img: Maps,
    z1: Maps,
    p1: Maps,
    z2: Maps,
    feat: Maps,
    h1: Maps,
    h2: Maps,
    logits: Maps,
    /// Each pooling window's position of its maximum, per sample and channel.
    args1: Vec<u8>,
    args2: Vec<u8>,
    grads: Option<Backward>,
    packed: Packed,
    scratch: ConvScratch,
    /// Floats the second convolution's backward pass keeps in `scratch`.
    scratch_floats: usize,
}

struct Backward {
    dlogits: Maps,
    dh2: Maps,
    dh1: Maps,
    dfeat: Maps,
    dz2: Maps,
    dp1: Maps,
    dz1: Maps,
}

impl Work {
    fn new(p: &LeNetCpu, samples: usize, train: bool) -> Work {
        let net = &p.net;
        let f = features(samples);
        let (c1, c2) = (net.conv1.cout, net.conv2.cout);
        let [fc1, fc2, fc3] = net.fc;
        let grads = train.then(|| Backward {
            dlogits: Maps::new(1, fc3.fan_out, f),
            dh2: Maps::new(1, fc2.fan_out, f),
            dh1: Maps::new(1, fc1.fan_out, f),
            dfeat: Maps::new(1, fc1.fan_in, f),
            dz2: Maps::new(samples, c2, p.conv2.output()),
            dp1: Maps::new(samples, c1, p.conv2.input_grad_geom()),
            dz1: Maps::new(samples, c1, p.conv1.output()),
        });
        Work {
            img: Maps::new(samples, net.shape.channels, p.input),
            z1: Maps::new(samples, c1, p.conv1.output()),
            p1: Maps::new(samples, c1, p.pooled),
            z2: Maps::new(samples, c2, p.conv2.output()),
            feat: Maps::new(1, fc1.fan_in, f),
            h1: Maps::new(1, fc1.fan_out, f),
            h2: Maps::new(1, fc2.fan_out, f),
            logits: Maps::new(1, fc3.fan_out, f),
            args1: vec![0; samples * c1 * p.pooled.h * p.pooled.w],
            args2: vec![0; samples * c2 * p.map[0] * p.map[1]],
            grads,
            packed: Packed::default(),
            scratch: ConvScratch::default(),
            scratch_floats: if train {
                p.conv2.scratch_floats(samples)
            } else {
                0
            },
        }
    }

    fn floats(&self) -> usize {
        let maps = [
            &self.img,
            &self.z1,
            &self.p1,
            &self.z2,
            &self.feat,
            &self.h1,
            &self.h2,
            &self.logits,
        ];
        let mut n: usize = maps.iter().map(|m| m.floats()).sum();
        n += (self.args1.len() + self.args2.len()).div_ceil(4) + self.scratch_floats;
        if let Some(g) = &self.grads {
            n += [&g.dlogits, &g.dh2, &g.dh1, &g.dfeat, &g.dz2, &g.dp1, &g.dz1]
                .iter()
                .map(|m| m.floats())
                .sum::<usize>();
        }
        n
    }
}

/// Applies `act` in place on the first `samples` positions of every plane of `h`.
fn activate_planes(h: &mut Maps, act: Activation, samples: usize) {
    for c in 0..h.channels {
        for v in &mut h.plane_mut(0, c)[..samples] {
            *v = activate_value(act, *v);
        }
    }
}

/// `dh *= act'(h)` on the first `samples` positions of every plane, from the output `h`.
fn through_activation(dh: &mut Maps, h: &Maps, act: Activation, samples: usize) {
    for c in 0..h.channels {
        let a = &h.plane(0, c)[..samples];
        for (d, &a) in dh.plane_mut(0, c)[..samples].iter_mut().zip(a) {
            *d *= activation_slope(act, a);
        }
    }
}

impl LeNetCpu {
    fn forward(&self, params: &[f32], x: &[f32], w: &mut Work) {
        let act = self.net.activation;
        let samples = w.img.samples;
        let g = w.img.geom;
        let channels = w.img.channels;
        let per = channels * g.area();
        chunks(&mut w.img.data, channels * g.plane, |n, planes| {
            let src = &x[n * per..(n + 1) * per];
            for c in 0..channels {
                let (plane, src) = (&mut planes[c * g.plane..], &src[c * g.area()..]);
                for y in 0..g.h {
                    let at = g.at(y, 0);
                    plane[at..at + g.w].copy_from_slice(&src[y * g.w..(y + 1) * g.w]);
                }
            }
        });
        self.conv1
            .forward(params, &w.img, &mut w.z1, None, &mut w.packed);
        let (g1, gp) = (w.z1.geom, self.pooled);
        let (z1, c1) = (&w.z1, w.z1.channels);
        let per1 = gp.h * gp.w;
        chunks2(
            &mut w.p1.data,
            c1 * gp.plane,
            &mut w.args1,
            c1 * per1,
            |n, planes, args| {
                for c in 0..c1 {
                    let p = &mut planes[c * gp.plane..];
                    let args = &mut args[c * per1..(c + 1) * per1];
                    pool_plane(z1.plane(n, c), g1, args, |y, x, v| {
                        p[gp.at(y, x)] = activate_value(act, v);
                    });
                }
            },
        );
        self.conv2
            .forward(params, &w.p1, &mut w.z2, None, &mut w.packed);
        let g2 = w.z2.geom;
        let [mh, mw] = self.map;
        let (z2, fp) = (&w.z2, w.feat.geom.plane);
        let c2 = z2.channels;
        let per2 = mh * mw;
        // Channel `c`'s features are the planes `c·mh·mw..`, one after the other; its windows
        // are recorded sample by sample.
        chunks2(
            &mut w.feat.data,
            per2 * fp,
            &mut w.args2,
            samples * per2,
            |c, planes, args| {
                for n in 0..samples {
                    let args = &mut args[n * per2..(n + 1) * per2];
                    pool_plane(z2.plane(n, c), g2, args, |y, x, v| {
                        planes[(y * mw + x) * fp + n] = activate_value(act, v);
                    });
                }
            },
        );
        debug_assert_eq!(w.args2.len(), c2 * samples * per2);
        self.fc(0).forward(params, &w.feat, &mut w.h1);
        activate_planes(&mut w.h1, act, samples);
        self.fc(1).forward(params, &w.h1, &mut w.h2);
        activate_planes(&mut w.h2, act, samples);
        self.fc(2).forward(params, &w.h2, &mut w.logits);
    }

    fn train_with(
        &self,
        params: &[f32],
        x: &[f32],
        targets: Targets<'_>,
        scale: f32,
        grad: &mut [f32],
        w: &mut Work,
    ) -> Vec<f32> {
        let act = self.net.activation;
        let samples = targets.len();
        self.forward(params, x, w);
        let b = w.grads.as_mut().expect("a training workspace");
        let losses = loss_and_grad(
            &w.logits.data,
            w.logits.geom.plane,
            self.net.classes,
            targets,
            scale,
            &mut b.dlogits.data,
        );
        self.fc(2)
            .backward(params, &w.h2, &b.dlogits, grad, Some(&mut b.dh2));
        through_activation(&mut b.dh2, &w.h2, act, samples);
        self.fc(1)
            .backward(params, &w.h1, &b.dh2, grad, Some(&mut b.dh1));
        through_activation(&mut b.dh1, &w.h1, act, samples);
        self.fc(0)
            .backward(params, &w.feat, &b.dh1, grad, Some(&mut b.dfeat));
        through_activation(&mut b.dfeat, &w.feat, act, samples);
        // The second pooling: each feature's gradient to its window's maximum.
        let g2 = w.z2.geom;
        let [mh, mw] = self.map;
        let per2 = mh * mw;
        let (dfeat, args2) = (&b.dfeat, &w.args2);
        let c2 = w.z2.channels;
        chunks(&mut b.dz2.data, c2 * g2.plane, |n, planes| {
            planes.fill(0.0);
            for c in 0..c2 {
                let dz = &mut planes[c * g2.plane..(c + 1) * g2.plane];
                let args = &args2[(c * samples + n) * per2..(c * samples + n + 1) * per2];
                let grad = |y: usize, x: usize| dfeat.plane(0, (c * mh + y) * mw + x)[n];
                unpool_plane(g2, args, grad, dz);
            }
        });
        self.conv2.backward(
            params,
            &w.p1,
            None,
            &b.dz2,
            grad,
            Some(&mut b.dp1),
            &mut w.scratch,
        );
        let (g1, gp, gd) = (w.z1.geom, self.pooled, b.dp1.geom);
        let (p1, dp1, args1) = (&w.p1, &b.dp1, &w.args1);
        let c1 = w.z1.channels;
        let per1 = gp.h * gp.w;
        chunks(&mut b.dz1.data, c1 * g1.plane, |n, planes| {
            planes.fill(0.0);
            for c in 0..c1 {
                let dz = &mut planes[c * g1.plane..(c + 1) * g1.plane];
                let args = &args1[(n * c1 + c) * per1..(n * c1 + c + 1) * per1];
                let (p, d) = (p1.plane(n, c), dp1.plane(n, c));
                let grad =
                    |y: usize, x: usize| d[gd.at(y, x)] * activation_slope(act, p[gp.at(y, x)]);
                unpool_plane(g1, args, grad, dz);
            }
        });
        self.conv1
            .backward(params, &w.img, None, &b.dz1, grad, None, &mut w.scratch);
        losses
    }
}

impl CpuNet for LeNetCpu {
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
                self.forward(params, x, w);
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
