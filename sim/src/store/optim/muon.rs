//! `kind = "muon"` (Jordan et al. 2024, "Muon: an optimizer for hidden layers in neural
//! networks"; reference code `KellerJordan/Muon`, `muon.py`, `SingleDeviceMuonWithAuxAdam`):
//! momentum, orthogonalized by a Newton–Schulz iteration, on the weight matrices of the hidden
//! layers; AdamW on every other parameter.
//!
//! **The hidden matrices** are the model's ([`crate::store::ReplicaStore::hidden_matrices`]):
//! every weight matrix but the embeddings and the output layer, as the reference splits them
//! ("Muon should only be used for hidden weight layers. The input embedding, final output
//! layer, and any internal gains or biases should be optimized using a standard method such as
//! AdamW"). A convolution's filter `[cout, cin, k, k]` is the matrix `cout × (cin·k²)`, as the
//! reference views it. For each, with gradient `G`, momentum buffer `M`, momentum `β`, rate
//! `η` and weight decay `λ` (the reference's `muon_update` and its step):
//!
//! ```text
//! M ← lerp(M, G, 1 − β)                       (= β·M + (1 − β)·G)
//! U ← lerp(G, M, β)    with nesterov (default), else U ← M
//! O ← NS₅(U) · √max(1, fan_out / fan_in)
//! X ← X − η·λ·X − η·O
//! ```
//!
//! where `lerp(a, b, w)` is PyTorch's: `a + w·(b − a)` for `w < ½`, else `b − (b − a)·(1 − w)`;
//! and `NS₅` the reference's `zeropower_via_newtonschulz5`: with `X` the matrix (transposed
//! when it has more rows than columns), `X ← X / (‖X‖_F + 10⁻⁷)`, then `ns_steps` times
//!
//! ```text
//! A ← X·Xᵀ
//! B ← b·A + c·A·A
//! X ← a·X + B·X          (a, b, c) = (3.4445, −4.7750, 2.0315)
//! ```
//!
//! and transposed back. The scale `√max(1, fan_out / fan_in)` is the reference's
//! `max(1, rows / cols)` of PyTorch's `[out, in]` weight, so it is the same whatever the layout
//! of the matrix in a row ([`crate::store::Hidden`]).
//!
//! **Every other coordinate** (embeddings, the output layer, biases, normalization gains) takes
//! AdamW's step ([`super::adamw`]) with rate `adam_lr` (default 3e-4), `beta1` (0.9), `beta2`
//! (0.95) and `eps` (1e-10): the reference's defaults for its Adam groups. The schedule and the
//! worker scaling scale `adam_lr` as they scale `lr`: the AdamW rate in force is
//! `η · adam_lr / lr`.
//!
//! # Where dasim differs from the reference
//!
//! - The iteration runs in the store's precision (`f32` in the burn store, `f64` in the
//!   reference store), not in bfloat16 as the reference runs it on a GPU; its products are
//!   summed in a fixed order, so its bits do not depend on threads or machines.
//! - `weight_decay` is one value for both groups (the reference gives each group its own,
//!   default 0).
//! - The reference's distributed `Muon` shares the orthogonalizations among the ranks of a
//!   data-parallel group and all-gathers the results; every dasim worker computes its own (a
//!   worker's model is its own in the decentralized methods) and its time is the step's.
//!
//! A step on a block of coordinates ([`super::Step::block`]) orthogonalizes the hidden
//! matrices inside it; one that cuts a hidden matrix is refused (the parameter server's shards
//! and LPP-SGD's partial steps cut the row into blocks, and refuse Muon when the run starts).

use std::ops::Range;

use super::adam::Adam;
use super::adamw::AdamW;
use super::decay::decoupled;
use super::{Buffers, Count, Float, Rule, State, Step};
use crate::error::ConfigError;
use crate::store::{Hidden, OptimizerConfig};

/// The reference's β₂ for its Adam groups.
pub const DEFAULT_BETA2: f64 = 0.95;
/// The reference's ε for its Adam groups.
pub const DEFAULT_EPS: f64 = 1e-10;
/// The reference's rate for its Adam groups.
pub const DEFAULT_ADAM_LR: f64 = 3e-4;
/// The reference's Newton–Schulz iterations.
pub const DEFAULT_NS_STEPS: u32 = 5;
/// The quintic iteration's coefficients `(a, b, c)`, the reference's.
pub const NS_COEFFICIENTS: (f64, f64, f64) = (3.4445, -4.7750, 2.0315);
/// Added to the Frobenius norm before the first iteration, the reference's.
pub const NS_EPS: f64 = 1e-7;

/// Muon's settings, in the type it computes in.
#[derive(Clone, Copy, Debug)]
pub struct Muon<F = f64> {
    /// Momentum `β` (in `f64`, for the interpolation weights).
    pub beta: f64,
    /// Nesterov's look-ahead.
    pub nesterov: bool,
    /// Newton–Schulz iterations.
    pub steps: u32,
    /// Decoupled weight decay `λ`.
    pub decay: F,
    /// The AdamW of every other coordinate.
    pub aux: Adam<F>,
    /// `adam_lr / lr`: the AdamW rate in force is the rate in force times this.
    pub aux_ratio: f64,
}

impl<F: Float> Muon<F> {
    /// The settings of the `[optimizer]` section `opt`.
    pub fn of(opt: &OptimizerConfig) -> Self {
        Muon {
            beta: opt.momentum,
            nesterov: opt.nesterov(),
            steps: opt.ns_steps(),
            decay: F::from_f64(opt.weight_decay),
            aux: AdamW::of(opt),
            aux_ratio: opt.adam_lr() / opt.lr,
        }
    }

    /// One step with rate `lr` on the hidden matrix `h`: `x`, its momentum buffer `m` and the
    /// gradient `g` are its coordinates.
    pub fn matrix(&self, h: &Hidden, x: &mut [F], m: &mut [F], g: &[F], lr: f64) {
        let w = self.beta;
        let mut u: Vec<F> = Vec::with_capacity(g.len());
        for (m, &g) in m.iter_mut().zip(g) {
            *m = lerp(*m, g, 1.0 - w);
            u.push(if self.nesterov { lerp(g, *m, w) } else { *m });
        }
        let mut o = orthogonalize(&u, h.matrix.rows, h.matrix.cols, self.steps);
        let scale = F::from_f64((h.fan_out as f64 / h.fan_in as f64).max(1.0).sqrt());
        for o in &mut o {
            *o = *o * scale;
        }
        let (eta, shrink) = (F::from_f64(lr), F::from_f64(lr) * self.decay);
        for (x, &o) in x.iter_mut().zip(&o) {
            *x = decoupled(*x, shrink);
            *x -= eta * o;
        }
    }
}

/// PyTorch's `lerp(a, b, w)`, in its two forms: `a + w·(b − a)` for `w < ½`, else
/// `b − (b − a)·(1 − w)`.
#[inline(always)]
pub fn lerp<F: Float>(a: F, b: F, w: f64) -> F {
    if w < 0.5 {
        a + F::from_f64(w) * (b - a)
    } else {
        b - (b - a) * F::from_f64(1.0 - w)
    }
}

/// `NS₅` of the `rows × cols` matrix `u` (row-major), with `steps` iterations: the reference's
/// `zeropower_via_newtonschulz5`, in `F`. Every product sums its terms in increasing order.
pub fn orthogonalize<F: Float>(u: &[F], rows: usize, cols: usize, steps: u32) -> Vec<F> {
    debug_assert_eq!(u.len(), rows * cols);
    let tall = rows > cols;
    let (m, n) = if tall { (cols, rows) } else { (rows, cols) };
    let mut x = if tall {
        transpose(u, rows, cols)
    } else {
        u.to_vec()
    };
    let mut sq = F::ZERO;
    for &v in &x {
        sq = sq + v * v;
    }
    let den = sq.sqrt() + F::from_f64(NS_EPS);
    for v in &mut x {
        *v = *v / den;
    }
    let (a, b, c) = NS_COEFFICIENTS;
    let (a, b, c) = (F::from_f64(a), F::from_f64(b), F::from_f64(c));
    for _ in 0..steps {
        let gram = times(&x, &transpose(&x, m, n), m, n, m);
        let square = times(&gram, &gram, m, m, m);
        let bmat: Vec<F> = gram
            .iter()
            .zip(&square)
            .map(|(&g, &s)| b * g + c * s)
            .collect();
        let bx = times(&bmat, &x, m, m, n);
        for (x, &bx) in x.iter_mut().zip(&bx) {
            *x = a * *x + bx;
        }
    }
    if tall { transpose(&x, m, n) } else { x }
}

/// The `r × c` matrix `a` transposed.
fn transpose<F: Float>(a: &[F], r: usize, c: usize) -> Vec<F> {
    let mut t = vec![F::ZERO; r * c];
    for i in 0..r {
        for j in 0..c {
            t[j * r + i] = a[i * c + j];
        }
    }
    t
}

/// `a · b` for `a` of `m × k` and `b` of `k × n`, row by row (`i, k, j`): each entry's terms
/// are summed in increasing `k` from zero, as a dot product would sum them, and the inner loop
/// runs along a row of `b` and of the result, which the compiler vectorizes without reordering
/// any sum (a dot product's one running sum it cannot).
fn times<F: Float>(a: &[F], b: &[F], m: usize, k: usize, n: usize) -> Vec<F> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { times_avx2(a, b, m, k, n) };
    }
    times_body(a, b, m, k, n)
}

/// [`times`] compiled for AVX2 (eight `f32`s a step). Only `avx2` is enabled, not `fma`, so
/// no multiply-add is fused and the bits are the baseline copy's.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn times_avx2<F: Float>(a: &[F], b: &[F], m: usize, k: usize, n: usize) -> Vec<F> {
    times_body(a, b, m, k, n)
}

#[inline(always)]
fn times_body<F: Float>(a: &[F], b: &[F], m: usize, k: usize, n: usize) -> Vec<F> {
    let mut out = vec![F::ZERO; m * n];
    for i in 0..m {
        let row = &mut out[i * n..(i + 1) * n];
        for l in 0..k {
            let s = a[i * k + l];
            for (o, &v) in row.iter_mut().zip(&b[l * n..(l + 1) * n]) {
                *o = *o + s * v;
            }
        }
    }
    out
}

/// The part `r` (offsets in the step's block) of a state.
fn part<'b, F, C>(st: &'b mut State<'_, F, C>, r: Range<usize>) -> State<'b, F, C> {
    State {
        first: st.first.as_deref_mut().map(|v| &mut v[r.clone()]),
        second: st.second.as_deref_mut().map(|v| &mut v[r.clone()]),
        counts: st.counts.as_deref_mut().map(|v| &mut v[r]),
    }
}

impl Rule for Muon {
    const KEYS: &'static [&'static str] =
        &["nesterov", "beta1", "beta2", "eps", "adam_lr", "ns_steps"];

    /// The momentum on the hidden matrices and AdamW's first moment elsewhere share the first
    /// buffer; AdamW's second moment and step counts are kept for every coordinate.
    fn buffers(_opt: &OptimizerConfig) -> Buffers {
        Buffers::ALL
    }

    fn validate(opt: &OptimizerConfig) -> Result<(), ConfigError> {
        if opt.momentum == 0.0 {
            return Err(ConfigError::new(
                "optimizer.momentum",
                "Muon orthogonalizes its momentum, and momentum = 0 leaves none",
            )
            .hint("set optimizer.momentum = 0.95, the reference's"));
        }
        if opt.ns_steps() == 0 {
            return Err(ConfigError::new(
                "optimizer.ns_steps",
                "Muon needs at least one Newton–Schulz iteration, got ns_steps = 0",
            )
            .hint("remove ns_steps for the reference's 5"));
        }
        Ok(())
    }

    fn step<F: Float, C: Count>(opt: &OptimizerConfig, s: Step<'_, F, C>) {
        let rule = Muon::<F>::of(opt);
        let Step {
            x,
            mut state,
            g,
            lr,
            block,
            layout,
        } = s;
        let aux_lr = lr * rule.aux_ratio;
        let base = block.start;
        let mut at = block.start;
        let aux = |x: &mut [F], state: &mut State<'_, F, C>, r: Range<usize>| {
            if !r.is_empty() {
                let local = r.start - base..r.end - base;
                let st = part(state, local.clone());
                rule.aux
                    .apply_state(&mut x[local.clone()], st, &g[local], aux_lr);
            }
        };
        for h in &layout.hidden {
            let r = h.matrix.range();
            if r.end <= block.start || r.start >= block.end {
                continue;
            }
            assert!(
                r.start >= block.start && r.end <= block.end,
                "Muon steps whole matrices, and the block {block:?} cuts the hidden matrix {r:?}"
            );
            aux(x, &mut state, at..r.start);
            let local = r.start - base..r.end - base;
            let m = state
                .first
                .as_deref_mut()
                .expect("Muon keeps a momentum buffer");
            rule.matrix(
                h,
                &mut x[local.clone()],
                &mut m[local.clone()],
                &g[local],
                lr,
            );
            at = r.end;
        }
        aux(x, &mut state, at..block.end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Matrix;

    /// `NS₅` by hand on a 1 × 2 matrix: `X = σ·(3, 4)/5` with `σ = 1` (up to the 10⁻⁷ in the
    /// norm) has `X·Xᵀ = σ²`, so each iteration maps its one singular value `σ` to
    /// `aσ + bσ³ + cσ⁵` and keeps the direction.
    #[test]
    fn five_iterations_of_a_row_by_hand() {
        let (a, b, c) = NS_COEFFICIENTS;
        let k = (0..5).fold(1.0f64, |s, _| a * s + b * s.powi(3) + c * s.powi(5));
        let o = orthogonalize(&[3.0f64, 4.0], 1, 2, 5);
        let want = [0.6 * k, 0.8 * k];
        for (o, w) in o.iter().zip(want) {
            assert!((o - w).abs() < 1e-6, "{o} against {w}");
        }
        // A column is the row transposed.
        let t = orthogonalize(&[3.0f64, 4.0], 2, 1, 5);
        assert_eq!(t, o);
    }

    /// The iteration drives the singular values of a matrix into about (0.5, 1.5), as the
    /// reference's documentation says: `O·Oᵀ` has its diagonal there and small off-diagonal
    /// entries, whatever the scale of the input.
    #[test]
    fn the_result_is_nearly_orthogonal() {
        let (r, c) = (3, 5);
        let u: Vec<f64> = (0..r * c)
            .map(|k| 100.0 * ((k * 7 % 11) as f64 - 5.0))
            .collect();
        let o = orthogonalize(&u, r, c, 5);
        let gram = times(&o, &transpose(&o, r, c), r, c, r);
        for i in 0..r {
            for j in 0..r {
                let v = gram[i * r + j];
                if i == j {
                    assert!((0.25..2.25).contains(&v), "diagonal {i}: {v}");
                } else {
                    assert!(v.abs() < 0.5, "({i}, {j}): {v}");
                }
            }
        }
    }

    /// One step of a 2 × 2 hidden matrix and a bias beside it: the matrix by the momentum and
    /// the iteration, the bias by AdamW's first step (`x − η_A·sign(g)` up to ε).
    #[test]
    fn a_matrix_and_a_bias_take_their_own_rules() {
        let opt = OptimizerConfig {
            kind: super::super::OptimizerKind::Muon,
            lr: 0.02,
            momentum: 0.95,
            ..Default::default()
        };
        opt.validate().unwrap();
        let matrix = Matrix {
            start: 0,
            rows: 2,
            cols: 2,
        };
        let layout = super::super::Layout {
            layers: std::iter::once(0..6).collect(),
            hidden: vec![Hidden::dense(matrix)],
        };
        let g = [1.0, 2.0, 3.0, 4.0, -0.5, 2.0];
        let mut x = [0.0f64; 6];
        let (mut m, mut v, mut t) = ([0.0; 6], [0.0; 6], [0u64; 6]);
        super::super::step(
            &opt,
            Step {
                x: &mut x,
                state: State {
                    first: Some(&mut m),
                    second: Some(&mut v),
                    counts: Some(&mut t),
                },
                g: &g,
                lr: 0.02,
                block: 0..6,
                layout: &layout,
            },
        );
        // Momentum 0.05·g; the Nesterov update lerp(g, 0.05·g, 0.95) = 0.0975·g; its direction
        // is g's, which the iteration normalizes.
        let u: Vec<f64> = g[..4].iter().map(|g| 0.0975 * g).collect();
        let o = orthogonalize(&u, 2, 2, 5);
        for k in 0..4 {
            assert!((m[k] - 0.05 * g[k]).abs() < 1e-15);
            assert!((x[k] + 0.02 * o[k]).abs() < 1e-15, "coordinate {k}");
        }
        assert_eq!(&t[..4], &[0; 4], "no AdamW step on the matrix");
        for k in 4..6 {
            let want = -3e-4 * g[k].signum();
            assert!((x[k] - want).abs() < 1e-12, "coordinate {k}: {}", x[k]);
            assert_eq!(t[k], 1);
        }
    }

    /// The reference's `SingleDeviceMuonWithAuxAdam.step`, written directly in `f64` as the
    /// Python reads (matrices as nested vectors, products as triple loops, PyTorch's `[out, in]`
    /// layout): three steps on a tall dense 5 × 3 matrix (`fan_in = 5`, scale √max(1, 3/5) = 1),
    /// a wide one 2 × 4 (`fan_in = 2`: scale √2) and two biases, against the rule.
    #[test]
    fn three_steps_match_the_reference_written_directly() {
        type M = Vec<Vec<f64>>;
        fn mm(a: &M, b: &M) -> M {
            let (n, k, m) = (a.len(), b.len(), b[0].len());
            (0..n)
                .map(|i| {
                    (0..m)
                        .map(|j| (0..k).map(|l| a[i][l] * b[l][j]).sum())
                        .collect()
                })
                .collect()
        }
        fn tr(a: &M) -> M {
            (0..a[0].len())
                .map(|j| (0..a.len()).map(|i| a[i][j]).collect())
                .collect()
        }
        fn lerp(a: f64, b: f64, w: f64) -> f64 {
            if w < 0.5 {
                a + w * (b - a)
            } else {
                b - (b - a) * (1.0 - w)
            }
        }
        fn ns5(g: &M) -> M {
            let (a, b, c) = (3.4445, -4.7750, 2.0315);
            let t = g.len() > g[0].len();
            let mut x = if t { tr(g) } else { g.clone() };
            let norm: f64 = x.iter().flatten().map(|v| v * v).sum::<f64>().sqrt();
            x = x
                .iter()
                .map(|r| r.iter().map(|v| v / (norm + 1e-7)).collect())
                .collect();
            for _ in 0..5 {
                let a_ = mm(&x, &tr(&x));
                let aa = mm(&a_, &a_);
                let bm: M = (0..a_.len())
                    .map(|i| (0..a_.len()).map(|j| b * a_[i][j] + c * aa[i][j]).collect())
                    .collect();
                let bx = mm(&bm, &x);
                x = (0..x.len())
                    .map(|i| (0..x[0].len()).map(|j| a * x[i][j] + bx[i][j]).collect())
                    .collect();
            }
            if t { tr(&x) } else { x }
        }
        // The row: bias (2), W1 as dasim lays it (fan_in 5 × fan_out 3), W2 (2 × 4), bias (1).
        let (lr, beta, wd, alr) = (0.05, 0.9, 0.1, 0.01);
        let opt = OptimizerConfig {
            kind: super::super::OptimizerKind::Muon,
            lr,
            momentum: beta,
            weight_decay: wd,
            adam_lr: Some(alr),
            ..Default::default()
        };
        opt.validate().unwrap();
        let w1 = Matrix {
            start: 2,
            rows: 5,
            cols: 3,
        };
        let w2 = Matrix {
            start: 17,
            rows: 2,
            cols: 4,
        };
        let layout = super::super::Layout {
            layers: std::iter::once(0..26).collect(),
            hidden: vec![Hidden::dense(w1), Hidden::dense(w2)],
        };
        let p = 26;
        let grad = |s: usize| -> Vec<f64> {
            (0..p)
                .map(|k| ((k * 13 + s * 7) % 17) as f64 / 4.0 - 2.0)
                .collect()
        };
        let mut x: Vec<f64> = (0..p).map(|k| (k as f64 * 0.37).sin()).collect();
        let (mut m, mut v, mut t) = (vec![0.0; p], vec![0.0; p], vec![0u64; p]);
        // The reference's state: PyTorch's weights [out, in], their momentum; Adam's per bias.
        let to_torch = |row: &[f64], mx: Matrix| -> M {
            (0..mx.cols)
                .map(|o| {
                    (0..mx.rows)
                        .map(|i| row[mx.start + i * mx.cols + o])
                        .collect()
                })
                .collect()
        };
        let mut ws = [to_torch(&x, w1), to_torch(&x, w2)];
        let mut bufs: [M; 2] = [vec![vec![0.0; 5]; 3], vec![vec![0.0; 2]; 4]];
        let aux: Vec<usize> = (0..2).chain(25..26).collect();
        let mut ax: Vec<f64> = aux.iter().map(|&k| x[k]).collect();
        let (mut e1, mut e2) = (vec![0.0; 3], vec![0.0; 3]);
        for s in 1..=3 {
            let g = grad(s);
            super::super::step(
                &opt,
                Step {
                    x: &mut x,
                    state: State {
                        first: Some(&mut m),
                        second: Some(&mut v),
                        counts: Some(&mut t),
                    },
                    g: &g,
                    lr,
                    block: 0..p,
                    layout: &layout,
                },
            );
            for (q, mx) in [w1, w2].into_iter().enumerate() {
                let gt = to_torch(&g, mx);
                let (out, inp) = (gt.len(), gt[0].len());
                let mut u = gt.clone();
                for o in 0..out {
                    for i in 0..inp {
                        bufs[q][o][i] = lerp(bufs[q][o][i], gt[o][i], 1.0 - beta);
                        u[o][i] = lerp(gt[o][i], bufs[q][o][i], beta);
                    }
                }
                let z = ns5(&u);
                let scale = (out as f64 / inp as f64).max(1.0).sqrt();
                for o in 0..out {
                    for i in 0..inp {
                        ws[q][o][i] = ws[q][o][i] * (1.0 - lr * wd) - lr * z[o][i] * scale;
                    }
                }
            }
            for (j, &k) in aux.iter().enumerate() {
                e1[j] = lerp(e1[j], g[k], 1.0 - 0.9);
                e2[j] = lerp(e2[j], g[k] * g[k], 1.0 - 0.95);
                let c1 = e1[j] / (1.0 - 0.9f64.powi(s as i32));
                let c2 = e2[j] / (1.0 - 0.95f64.powi(s as i32));
                ax[j] = ax[j] * (1.0 - alr * wd) - alr * c1 / (c2.sqrt() + 1e-10);
            }
            for (q, mx) in [w1, w2].into_iter().enumerate() {
                let got = to_torch(&x, mx);
                for (o, row) in got.iter().enumerate() {
                    for (i, &val) in row.iter().enumerate() {
                        let d = (val - ws[q][o][i]).abs();
                        assert!(d < 1e-12, "step {s}, matrix {q} [{o}][{i}]: off by {d}");
                    }
                }
            }
            for (j, &k) in aux.iter().enumerate() {
                let d = (x[k] - ax[j]).abs();
                assert!(d < 1e-12, "step {s}, coordinate {k}: off by {d}");
            }
        }
    }
}
