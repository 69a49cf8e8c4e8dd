//! The transformer's CPU program: one replica's forward and backward pass on row-major
//! activations, one row of `d` floats per position of the `B` windows (`N = B·T` rows).
//!
//! Every linear layer is one matrix product over all `N` rows ([`matmul`], gemm's kernels), its
//! bias, and where one follows, the residual sum, written into the output before the product
//! accumulates onto it. Attention runs window by window and head by head on views into `qkv`
//! (no copies of `q`, `k`, `v`): the scores and the weighted sum are two products, with the
//! causal mask and the softmax one pass over the scores between them. Layer norm keeps each
//! row's mean and reciprocal deviation for its backward pass; GELU (exact, `erf` as flex's) and
//! the output's softmax cross-entropy are single passes over their rows; the embeddings' gather
//! and scatter-add are row copies and adds.
//!
//! Where the pass spreads over threads ([`crate::layers::par`]) the products split by output
//! blocks, the row passes by rows, attention by (window, head); the parameters' gradients that
//! sum over rows (the biases, the layer-norm gains and biases, the embeddings) are summed row
//! after row on one thread. No split cuts a sum, so the bits do not depend on the threads.

use crate::layers::fastmath::{
    dot, exp_shifted, gelu_in_place, gelu_into, layer_norm_grad_rows, layer_norm_rows,
    mul_in_place, sum,
};
use crate::layers::matmul::{View, matmul};
use crate::layers::par::{chunks, chunks2, with_inner_parallelism};
use crate::layers::workspace::with_workspace;
use crate::layers::{CpuNet, Targets};

use super::Transformer;
use crate::layers::layer_norm::{LAYER_NORM_EPS, LayerNorm};
use crate::layers::linear::Linear;

/// Rows a task of a row pass takes (layer norm, GELU, the loss).
const ROWS_PER_TASK: usize = 64;

/// The transformer's CPU program ([`CpuNet`]).
#[derive(Clone, Debug)]
pub(crate) struct TransformerCpu {
    net: Transformer,
}

impl TransformerCpu {
    /// The program of `net`.
    pub fn new(net: &Transformer) -> Self {
        TransformerCpu { net: net.clone() }
    }
}

/// The activations one block keeps for its backward pass, `[N, ·]` row-major.
struct BlockWork {
    /// The first layer norm's mean and reciprocal deviation per row, `[N, 2]`.
    ln1: Vec<f32>,
    /// Its output, the input of `qkv`, `[N, d]`.
    a1: Vec<f32>,
    /// Queries, keys and values, `[N, 3d]`.
    qkv: Vec<f32>,
    /// The attention probabilities, `[B, heads, T, T]` (zero above the diagonal).
    probs: Vec<f32>,
    /// The heads' outputs side by side, the input of `proj`, `[N, d]`.
    att: Vec<f32>,
    /// The residual stream after attention, `[N, d]`.
    x2: Vec<f32>,
    /// The second layer norm's statistics, `[N, 2]`.
    ln2: Vec<f32>,
    /// Its output, the input of `fc₁`, `[N, d]`.
    a2: Vec<f32>,
    /// `fc₁`'s output before GELU, `[N, d_ff]`.
    f: Vec<f32>,
    /// After GELU, the input of `fc₂`, `[N, d_ff]`.
    g: Vec<f32>,
}

/// The backward pass's buffers.
struct Back {
    /// The gradient of the residual stream, `[N, d]`.
    dh: Vec<f32>,
    /// The gradient of a layer norm's output (or of the heads' outputs), `[N, d]`.
    da: Vec<f32>,
    /// The gradient of `qkv`'s or of `fc₁`'s output, `[N, max(3d, d_ff)]`.
    wide: Vec<f32>,
}

/// Everything a pass of `B` windows of `T` positions needs, kept from pass to pass.
struct Work {
    b: usize,
    t: usize,
    /// Input tokens, `[N]`.
    tokens: Vec<u32>,
    /// The residual stream entering each block and leaving the last, `layers + 1` of `[N, d]`.
    xs: Vec<Vec<f32>>,
    blocks: Vec<BlockWork>,
    /// The final layer norm's statistics and output.
    lnf: Vec<f32>,
    af: Vec<f32>,
    /// Logits `[N, vocab]`; in the backward pass, their gradient.
    logits: Vec<f32>,
    /// Each position's loss.
    losses: Vec<f32>,
    /// Per (window, head): the head's output `[T, d/heads]` in the forward pass, the gradients
    /// of its `q`, `k`, `v` (`3 × [T, d/heads]`) in the backward pass.
    heads: Vec<f32>,
    back: Option<Back>,
}

impl Work {
    fn new(p: &TransformerCpu, b: usize, t: usize, train: bool) -> Work {
        let s = p.net.shape;
        let (n, d, h) = (b * t, s.d_model, s.heads);
        let zeros = |len: usize| vec![0.0f32; len];
        Work {
            b,
            t,
            tokens: vec![0; n],
            xs: (0..=s.layers).map(|_| zeros(n * d)).collect(),
            blocks: (0..s.layers)
                .map(|_| BlockWork {
                    ln1: zeros(2 * n),
                    a1: zeros(n * d),
                    qkv: zeros(3 * n * d),
                    probs: zeros(b * h * t * t),
                    att: zeros(n * d),
                    x2: zeros(n * d),
                    ln2: zeros(2 * n),
                    a2: zeros(n * d),
                    f: zeros(n * s.d_ff),
                    g: zeros(n * s.d_ff),
                })
                .collect(),
            lnf: zeros(2 * n),
            af: zeros(n * d),
            logits: zeros(n * s.vocab),
            losses: zeros(n),
            heads: zeros(3 * n * d),
            back: train.then(|| Back {
                dh: zeros(n * d),
                da: zeros(n * d),
                wide: zeros(n * (3 * d).max(s.d_ff)),
            }),
        }
    }

    /// Floats of the buffers of a pass of `b` windows of `t` positions, as [`Work::new`] builds
    /// them (the memory estimate's; a test holds the two together).
    fn floats(p: &TransformerCpu, b: usize, t: usize, train: bool) -> usize {
        let s = p.net.shape;
        let (n, d, h) = (b * t, s.d_model, s.heads);
        let per_block = 2 * n + n * d + 3 * n * d + b * h * t * t + 2 * n * d + 2 * n + n * d;
        let per_block = per_block + 2 * n * s.d_ff;
        let back = if train {
            2 * n * d + n * (3 * d).max(s.d_ff)
        } else {
            0
        };
        // Tokens, the residual stream, the blocks, the head, the heads' buffer, the backward
        // pass's, and the per-thread score gradient of the attention's backward pass.
        n + (s.layers + 1) * n * d
            + s.layers * per_block
            + 2 * n
            + n * d
            + n * s.vocab
            + n
            + 3 * n * d
            + back
            + t * t
    }

    /// Floats this workspace holds (see [`Work::floats`]).
    #[cfg(test)]
    fn held(&self) -> usize {
        let mut f = self.tokens.len() + self.xs.iter().map(Vec::len).sum::<usize>();
        for k in &self.blocks {
            f += k.ln1.len() + k.a1.len() + k.qkv.len() + k.probs.len() + k.att.len();
            f += k.x2.len() + k.ln2.len() + k.a2.len() + k.f.len() + k.g.len();
        }
        f += self.lnf.len() + self.af.len() + self.logits.len() + self.losses.len();
        f += self.heads.len();
        if let Some(k) = &self.back {
            f += k.dh.len() + k.da.len() + k.wide.len();
        }
        f + self.t * self.t
    }
}

/// `y[n] = x[n] · W + bias (+ residual[n])` for the `N` rows of `x` (`fan_in` floats each).
fn linear_forward(params: &[f32], l: &Linear, x: &[f32], residual: Option<&[f32]>, y: &mut [f32]) {
    let [w, b] = l.blocks();
    let bias = &params[b];
    let n = x.len() / l.fan_in;
    let fo = l.fan_out;
    match residual {
        Some(r) => chunks(&mut y[..n * fo], fo * ROWS_PER_TASK, |c, rows| {
            let r = &r[c * fo * ROWS_PER_TASK..];
            for (k, row) in rows.chunks_mut(fo).enumerate() {
                for ((v, &s), &bv) in row.iter_mut().zip(&r[k * fo..]).zip(bias) {
                    *v = s + bv;
                }
            }
        }),
        None => chunks(&mut y[..n * fo], fo * ROWS_PER_TASK, |_, rows| {
            for row in rows.chunks_mut(fo) {
                row.copy_from_slice(bias);
            }
        }),
    }
    matmul(
        y,
        View::dense(0, n, fo),
        x,
        View::dense(0, n, l.fan_in),
        params,
        View::dense(w.start, l.fan_in, fo),
        1.0,
        true,
    );
}

/// The weight's and bias' gradients of `y = x·W + b` into `grad` from `dy` (`[N, fan_out]`),
/// and with `dx`, the input's gradient `dy · Wᵀ` written into it.
fn linear_backward(
    params: &[f32],
    l: &Linear,
    x: &[f32],
    dy: &[f32],
    grad: &mut [f32],
    dx: Option<&mut [f32]>,
) {
    let [w, b] = l.blocks();
    let (fi, fo) = (l.fan_in, l.fan_out);
    let n = x.len() / fi;
    let gb = &mut grad[b];
    gb.fill(0.0);
    for row in dy[..n * fo].chunks(fo) {
        for (g, &v) in gb.iter_mut().zip(row) {
            *g += v;
        }
    }
    matmul(
        grad,
        View::dense(w.start, fi, fo),
        x,
        View::dense(0, n, fi).t(),
        dy,
        View::dense(0, n, fo),
        1.0,
        false,
    );
    if let Some(dx) = dx {
        matmul(
            dx,
            View::dense(0, n, fi),
            dy,
            View::dense(0, n, fo),
            params,
            View::dense(w.start, fi, fo).t(),
            1.0,
            false,
        );
    }
}

/// Layer norm of the rows of `x` into `y`, each row's mean and reciprocal deviation into
/// `stats` (`[N, 2]`): `(x − mean) · rstd · gain + bias`, the variance biased, `ε` as burn's.
fn layer_norm_forward(params: &[f32], ln: &LayerNorm, x: &[f32], y: &mut [f32], stats: &mut [f32]) {
    let d = ln.dim;
    let [g, b] = ln.blocks();
    let (gain, bias) = (&params[g], &params[b]);
    let n = stats.len() / 2;
    chunks2(
        &mut y[..n * d],
        d * ROWS_PER_TASK,
        stats,
        2 * ROWS_PER_TASK,
        |c, rows, st| {
            let x = &x[c * d * ROWS_PER_TASK..][..rows.len()];
            layer_norm_rows(x, gain, bias, LAYER_NORM_EPS as f32, rows, st);
        },
    );
}

/// The backward pass of [`layer_norm_forward`]: the gain's and bias' gradients into `grad`
/// (summed row after row), and the input's gradient from `dy` **added** into `dx` (the
/// residual stream's gradient).
fn layer_norm_backward(
    params: &[f32],
    ln: &LayerNorm,
    x: &[f32],
    stats: &[f32],
    dy: &[f32],
    grad: &mut [f32],
    dx: &mut [f32],
) {
    let d = ln.dim;
    let [g, b] = ln.blocks();
    let n = stats.len() / 2;
    {
        let (gg, gb) = grad[g.start..b.end].split_at_mut(d);
        gg.fill(0.0);
        gb.fill(0.0);
        for k in 0..n {
            let (mean, rstd) = (stats[2 * k], stats[2 * k + 1]);
            let (xr, dr) = (&x[k * d..(k + 1) * d], &dy[k * d..(k + 1) * d]);
            for j in 0..d {
                gg[j] += dr[j] * (xr[j] - mean) * rstd;
                gb[j] += dr[j];
            }
        }
    }
    let gain = &params[g];
    chunks(&mut dx[..n * d], d * ROWS_PER_TASK, |c, rows| {
        let at = c * ROWS_PER_TASK;
        let len = rows.len() / d;
        let mut scratch = vec![0.0f32; 2 * d];
        layer_norm_grad_rows(
            &x[at * d..(at + len) * d],
            &stats[2 * at..2 * (at + len)],
            &dy[at * d..(at + len) * d],
            gain,
            rows,
            &mut scratch,
        );
    });
}

thread_local! {
    /// The attention backward pass's score gradient of one (window, head), `[T, T]`.
    static SCORE_GRAD: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl TransformerCpu {
    fn d(&self) -> usize {
        self.net.shape.d_model
    }

    /// The forward pass of the windows `x` (`B` of `T + 1` token ids as floats): the loss of
    /// every position against its next token is left in `w.losses`, the logits in `w.logits`.
    /// With `train` unset (an evaluation), GELU's slope is not computed.
    fn forward(&self, params: &[f32], x: &[f32], w: &mut Work, train: bool) {
        let net = &self.net;
        let (b, t, d) = (w.b, w.t, self.d());
        let n = b * t;
        for i in 0..b {
            for s in 0..t {
                w.tokens[i * t + s] = x[i * (t + 1) + s] as u32;
            }
        }
        // The embeddings: h = wte[token] + wpe[position].
        {
            let (wte, wpe) = (&params[net.wte.block()], &params[net.wpe.block()]);
            let tokens = &w.tokens;
            chunks(&mut w.xs[0], t * d, |i, rows| {
                for (s, row) in rows.chunks_mut(d).enumerate() {
                    let tok = tokens[i * t + s] as usize;
                    let (e, p) = (&wte[tok * d..(tok + 1) * d], &wpe[s * d..(s + 1) * d]);
                    for ((o, &a), &c) in row.iter_mut().zip(e).zip(p) {
                        *o = a + c;
                    }
                }
            });
        }
        for (l, block) in net.blocks.iter().enumerate() {
            let (done, rest) = w.xs.split_at_mut(l + 1);
            let (x_in, x_out) = (&done[l], &mut rest[0]);
            let k = &mut w.blocks[l];
            layer_norm_forward(params, &block.ln1, x_in, &mut k.a1, &mut k.ln1);
            linear_forward(params, &block.attn.qkv, &k.a1, None, &mut k.qkv);
            self.attention_forward(b, t, &k.qkv, &mut k.probs, &mut w.heads, &mut k.att);
            linear_forward(params, &block.attn.proj, &k.att, Some(x_in), &mut k.x2);
            layer_norm_forward(params, &block.ln2, &k.x2, &mut k.a2, &mut k.ln2);
            linear_forward(params, &block.fc1, &k.a2, None, &mut k.f);
            // GELU, its slope kept in `f` for the backward pass.
            let ff = block.fc1.fan_out;
            if train {
                chunks2(
                    &mut k.f,
                    ROWS_PER_TASK * ff,
                    &mut k.g,
                    ROWS_PER_TASK * ff,
                    |_, f, g| gelu_in_place(f, g),
                );
            } else {
                let f = &k.f;
                chunks(&mut k.g, ROWS_PER_TASK * ff, |c, g| {
                    gelu_into(&f[c * ROWS_PER_TASK * ff..][..g.len()], g)
                });
            }
            linear_forward(params, &block.fc2, &k.g, Some(&k.x2), x_out);
        }
        let last = &w.xs[net.blocks.len()];
        layer_norm_forward(params, &net.ln_f, last, &mut w.af, &mut w.lnf);
        // The tied output layer: logits = LN_f(h) · wteᵀ.
        let v = net.shape.vocab;
        matmul(
            &mut w.logits,
            View::dense(0, n, v),
            &w.af,
            View::dense(0, n, d),
            params,
            View::dense(net.wte.weight, v, d).t(),
            1.0,
            false,
        );
    }

    /// Causal attention of every window and head from `qkv` (`[N, 3d]`): the probabilities
    /// into `probs`, the heads' outputs side by side into `att` (`[N, d]`), through `heads`.
    fn attention_forward(
        &self,
        b: usize,
        t: usize,
        qkv: &[f32],
        probs: &mut [f32],
        heads: &mut [f32],
        att: &mut [f32],
    ) {
        let (d, h) = (self.d(), self.net.shape.heads);
        let dh = d / h;
        let out = &mut heads[..b * t * d];
        // One task per (window, head); its products stay on its thread.
        chunks2(probs, t * t, out, t * dh, |task, p, y| {
            with_inner_parallelism(false, || self.head_forward(task, t, qkv, p, y))
        });
        let heads = &heads[..b * t * d];
        chunks(&mut att[..b * t * d], t * d, |i, rows| {
            for (s, row) in rows.chunks_mut(d).enumerate() {
                for head in 0..h {
                    let from = ((i * h + head) * t + s) * dh;
                    row[head * dh..(head + 1) * dh].copy_from_slice(&heads[from..from + dh]);
                }
            }
        });
    }

    /// Views of the `task`-th (window, head)'s queries, keys and values in `qkv`.
    fn head_views(&self, task: usize, t: usize) -> [View; 3] {
        let (d, h) = (self.d(), self.net.shape.heads);
        let dh = d / h;
        let (i, head) = (task / h, task % h);
        let q = View::rows(i * t * 3 * d + head * dh, t, dh, 3 * d);
        [
            q,
            View { at: q.at + d, ..q },
            View {
                at: q.at + 2 * d,
                ..q
            },
        ]
    }

    /// One head of one window: `P = softmax(q·kᵀ/√dh)` with the causal mask into `p`, and `y =
    /// P·v` into `y`.
    fn head_forward(&self, task: usize, t: usize, qkv: &[f32], p: &mut [f32], y: &mut [f32]) {
        let dh = self.d() / self.net.shape.heads;
        let [q, k, v] = self.head_views(task, t);
        let scale = 1.0 / (dh as f32).sqrt();
        matmul(p, View::dense(0, t, t), qkv, q, qkv, k.t(), scale, false);
        for (r, row) in p.chunks_mut(t).enumerate() {
            let (seen, future) = row.split_at_mut(r + 1);
            let max = seen.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            exp_shifted(seen, max);
            let inv = 1.0 / sum(seen);
            for s in seen.iter_mut() {
                *s *= inv;
            }
            future.fill(0.0);
        }
        matmul(
            y,
            View::dense(0, t, dh),
            p,
            View::dense(0, t, t),
            qkv,
            v,
            1.0,
            false,
        );
    }

    /// The backward pass of [`TransformerCpu::attention_forward`]: from the heads' output
    /// gradient `datt` (`[N, d]`) the gradient of `qkv` into `dqkv` (`[N, 3d]`); the
    /// probabilities are overwritten by the scores' gradient.
    #[allow(clippy::too_many_arguments)]
    fn attention_backward(
        &self,
        b: usize,
        t: usize,
        qkv: &[f32],
        probs: &mut [f32],
        datt: &[f32],
        heads: &mut [f32],
        dqkv: &mut [f32],
    ) {
        let (d, h) = (self.d(), self.net.shape.heads);
        let dh = d / h;
        chunks2(probs, t * t, heads, 3 * t * dh, |task, p, g| {
            with_inner_parallelism(false, || self.head_backward(task, t, qkv, p, datt, g))
        });
        let heads = &*heads;
        chunks(&mut dqkv[..b * t * 3 * d], t * 3 * d, |i, rows| {
            for (s, row) in rows.chunks_mut(3 * d).enumerate() {
                for head in 0..h {
                    let base = (i * h + head) * 3 * t * dh;
                    for part in 0..3 {
                        let from = base + part * t * dh + s * dh;
                        let to = part * d + head * dh;
                        row[to..to + dh].copy_from_slice(&heads[from..from + dh]);
                    }
                }
            }
        });
    }

    /// One head of one window backwards: from its output's gradient (in `datt`) the gradients
    /// of its `q`, `k`, `v` into `g` (`3 × [T, dh]`); `p` (its probabilities) ends holding the
    /// scores' gradient.
    fn head_backward(
        &self,
        task: usize,
        t: usize,
        qkv: &[f32],
        p: &mut [f32],
        datt: &[f32],
        g: &mut [f32],
    ) {
        let (d, h) = (self.d(), self.net.shape.heads);
        let dh = d / h;
        let [q, k, v] = self.head_views(task, t);
        let (i, head) = (task / h, task % h);
        let dy = View::rows(i * t * d + head * dh, t, dh, d);
        let scale = 1.0 / (dh as f32).sqrt();
        let (dq, rest) = g.split_at_mut(t * dh);
        let (dk, dv) = rest.split_at_mut(t * dh);
        let tt = View::dense(0, t, t);
        let out = View::dense(0, t, dh);
        // dv = Pᵀ · dy.
        matmul(dv, out, p, tt.t(), datt, dy, 1.0, false);
        SCORE_GRAD.with(|buf| {
            let mut dp = buf.borrow_mut();
            dp.resize(t * t, 0.0);
            // dP = dy · vᵀ; dS = P ∘ (dP − rowsum(P ∘ dP)), times the scores' scale.
            matmul(&mut dp, tt, datt, dy, qkv, v.t(), 1.0, false);
            for (r, (row, dpr)) in p.chunks_mut(t).zip(dp.chunks(t)).enumerate() {
                let seen = r + 1;
                let dot = dot(&row[..seen], &dpr[..seen]);
                for (s, &gp) in row[..seen].iter_mut().zip(&dpr[..seen]) {
                    *s = *s * (gp - dot) * scale;
                }
            }
        });
        // dq = dS · k, dk = dSᵀ · q.
        matmul(dq, out, p, tt, qkv, k, 1.0, false);
        matmul(dk, out, p, tt.t(), qkv, q, 1.0, false);
    }

    /// The loss of every position (in `w.losses`) and, with `grad_scale`, the logits'
    /// gradient `(softmax − onehot) · grad_scale` in their place.
    fn loss(&self, targets: &[u32], w: &mut Work, grad_scale: Option<f32>) {
        let v = self.net.shape.vocab;
        chunks2(
            &mut w.logits,
            v * ROWS_PER_TASK,
            &mut w.losses,
            ROWS_PER_TASK,
            |c, rows, losses| {
                for (k, (row, loss)) in rows.chunks_mut(v).zip(losses.iter_mut()).enumerate() {
                    let label = targets[c * ROWS_PER_TASK + k] as usize;
                    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let target = row[label];
                    exp_shifted(row, max);
                    let sum = sum(row);
                    *loss = sum.ln() + max - target;
                    if let Some(s) = grad_scale {
                        let p = s / sum;
                        for z in row.iter_mut() {
                            *z *= p;
                        }
                        row[label] -= s;
                    }
                }
            },
        );
    }

    fn train_with(
        &self,
        params: &[f32],
        x: &[f32],
        targets: &[u32],
        scale: f32,
        grad: &mut [f32],
        w: &mut Work,
    ) -> Vec<f32> {
        let net = &self.net;
        let (b, t, d) = (w.b, w.t, self.d());
        let n = b * t;
        self.forward(params, x, w, true);
        // Each window's loss is the mean over its positions.
        self.loss(targets, w, Some(scale / t as f32));
        let losses = w
            .losses
            .chunks(t)
            .map(|l| (l.iter().map(|&v| f64::from(v)).sum::<f64>() / t as f64) as f32)
            .collect();
        let Work {
            tokens,
            xs,
            blocks,
            lnf,
            af,
            logits,
            heads,
            back,
            ..
        } = w;
        let Back { dh, da, wide } = back.as_mut().expect("a training workspace");
        let v = net.shape.vocab;
        let dl = View::dense(0, n, v);
        // The tied output layer: wte's gradient from the head, and the features' gradient.
        matmul(
            grad,
            View::dense(net.wte.weight, v, d),
            logits,
            dl.t(),
            af,
            View::dense(0, n, d),
            1.0,
            false,
        );
        matmul(
            da,
            View::dense(0, n, d),
            logits,
            dl,
            params,
            View::dense(net.wte.weight, v, d),
            1.0,
            false,
        );
        dh.fill(0.0);
        let layers = net.blocks.len();
        layer_norm_backward(params, &net.ln_f, &xs[layers], lnf, da, grad, dh);
        for (l, block) in net.blocks.iter().enumerate().rev() {
            let k = &mut blocks[l];
            // The MLP: dh is the gradient of fc₂'s output.
            let ff = block.fc1.fan_out;
            let dg = &mut wide[..n * ff];
            linear_backward(params, &block.fc2, &k.g, dh, grad, Some(dg));
            let slope = &k.f;
            chunks(dg, ROWS_PER_TASK * ff, |c, rows| {
                mul_in_place(rows, &slope[c * ROWS_PER_TASK * ff..])
            });
            linear_backward(params, &block.fc1, &k.a2, dg, grad, Some(da));
            layer_norm_backward(params, &block.ln2, &k.x2, &k.ln2, da, grad, dh);
            // Attention: dh is now the gradient of proj's output.
            linear_backward(params, &block.attn.proj, &k.att, dh, grad, Some(da));
            let dqkv = &mut wide[..3 * n * d];
            self.attention_backward(b, t, &k.qkv, &mut k.probs, da, heads, dqkv);
            linear_backward(params, &block.attn.qkv, &k.a1, dqkv, grad, Some(da));
            layer_norm_backward(params, &block.ln1, &xs[l], &k.ln1, da, grad, dh);
        }
        // The embeddings: each position's gradient into the token's row (after the head's
        // part of wte) and into its position's row.
        let gpe = &mut grad[net.wpe.block()];
        gpe.fill(0.0);
        for (r, row) in dh[..n * d].chunks(d).enumerate() {
            let s = r % t;
            for (g, &v) in gpe[s * d..(s + 1) * d].iter_mut().zip(row) {
                *g += v;
            }
        }
        let gte = &mut grad[net.wte.block()];
        for (r, row) in dh[..n * d].chunks(d).enumerate() {
            let tok = tokens[r] as usize;
            for (g, &v) in gte[tok * d..(tok + 1) * d].iter_mut().zip(row) {
                *g += v;
            }
        }
        losses
    }

    /// The windows and positions of a minibatch of `x.len()` floats with `positions`
    /// targets: `(B, T)`.
    fn windows(&self, floats: usize, positions: usize) -> (usize, usize) {
        let b = floats - positions;
        assert!(
            b > 0 && positions.is_multiple_of(b) && positions / b <= self.net.shape.context,
            "{floats} floats of windows with {positions} targets for a context of {}",
            self.net.shape.context
        );
        (b, positions / b)
    }

    /// A workspace's key: the layout, the windows and their positions.
    fn key(&self, b: usize, t: usize) -> (Transformer, usize, usize) {
        (self.net.clone(), b, t)
    }
}

impl CpuNet for TransformerCpu {
    fn outputs(&self) -> usize {
        self.net.shape.vocab
    }

    fn input_len(&self) -> usize {
        self.net.shape.context + 1
    }

    fn train(
        &self,
        params: &[f32],
        x: &[f32],
        targets: Targets<'_>,
        scale: f32,
        grad: &mut [f32],
    ) -> Vec<f32> {
        let Targets::Tokens(targets) = targets else {
            panic!("a language model trains on the next tokens of its windows")
        };
        let (b, t) = self.windows(x.len(), targets.len());
        with_workspace(
            &self.key(b, t),
            || Work::new(self, b, t, true),
            |w| self.train_with(params, x, targets, scale, grad, w),
        )
    }

    fn infer(&self, params: &[f32], x: &[f32], samples: usize, out: &mut [f32]) {
        let b = samples;
        let t = x.len() / b - 1;
        // The training pass's buffers (an evaluation goes in chunks of the minibatch size).
        with_workspace(
            &self.key(b, t),
            || Work::new(self, b, t, true),
            |w| {
                self.forward(params, x, w, false);
                out[..w.logits.len()].copy_from_slice(&w.logits);
            },
        )
    }

    /// The forward pass and the loss of every position as the training pass computes it
    /// (vectorized, on this thread's workspace), and whether the likeliest token (the first of
    /// equal logits) is the label.
    fn infer_scored(
        &self,
        params: &[f32],
        x: &[f32],
        samples: usize,
        labels: &[u32],
    ) -> Option<Vec<(f32, bool)>> {
        let b = samples;
        let t = x.len() / b - 1;
        let v = self.net.shape.vocab;
        Some(with_workspace(
            &self.key(b, t),
            || Work::new(self, b, t, true),
            |w| {
                self.forward(params, x, w, false);
                let correct: Vec<bool> = w
                    .logits
                    .chunks(v)
                    .zip(labels)
                    .map(|(row, &label)| {
                        let best = row
                            .iter()
                            .enumerate()
                            .fold(0, |b, (c, &z)| if z > row[b] { c } else { b });
                        best == label as usize
                    })
                    .collect();
                self.loss(labels, w, None);
                w.losses.iter().copied().zip(correct).collect()
            },
        ))
    }

    fn train_floats(&self, batch: usize) -> usize {
        let t = self.net.shape.context;
        Work::floats(self, batch, t, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transformer::TransformerShape;

    #[test]
    fn the_memory_count_is_what_a_workspace_holds() {
        for (layers, d, heads, d_ff, b, t) in [(2, 16, 4, 24, 3, 12), (1, 6, 1, 40, 2, 5)] {
            let net = Transformer::new(TransformerShape {
                vocab: 11,
                context: 12,
                d_model: d,
                heads,
                d_ff,
                layers,
            });
            let p = TransformerCpu::new(&net);
            for train in [true, false] {
                let held = Work::new(&p, b, t, train).held();
                assert_eq!(
                    Work::floats(&p, b, t, train),
                    held,
                    "{layers} blocks, train {train}"
                );
            }
        }
    }
}
