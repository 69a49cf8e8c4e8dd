//! The training objective of the convex models, in `f64` on the host, and its optimum.
//!
//! Softmax regression and linear least squares are convex, so an algorithm's progress can be
//! measured as the suboptimality `f(x̄) − f*` of the average model `x̄`, where `f` is the
//! objective the workers minimize — the mean loss over the whole **training** split plus the L2
//! term — and `f*` its minimum:
//!
//! ```text
//! softmax:  f(θ) = (1/n) Σ_i [logsumexp(z_i) − z_i,y_i] + ½·l2·‖θ‖²,   z_i = x_i·W + b
//! linear:   f(θ) = (1/n) Σ_i ½·(x_i·w + b − y_i)²      + ½·l2·‖θ‖²
//! ```
//!
//! `θ` is the model's row: the weights `[inputs × outputs]` row-major, then the biases, so the
//! L2 term covers the biases too. (Softmax regression is otherwise unchanged by adding one
//! constant to every bias, and its minimizer would not be unique.)
//!
//! - **Least squares**: `f*` in closed form, from the normal equations
//!   `(X̃ᵀX̃/n + l2·I)·θ = X̃ᵀy/n` (`X̃` the features with a column of ones) solved by Cholesky
//!   factorization in `f64`. `None` when the system is singular (`l2 = 0` and collinear
//!   features).
//! - **Softmax regression** (needs `l2 > 0`, otherwise the optimum may lie at infinity, on
//!   separable data, and `f*` is not computed): a long full-batch run of L-BFGS (memory 10,
//!   backtracking line search with the Armijo condition) from `θ = 0`. The objective is
//!   `l2`-strongly convex, so at any `θ`, `f(θ) − f* ≤ ‖∇f(θ)‖² / (2·l2)`; the run stops when
//!   that certified bound is below [`SOFTMAX_TOLERANCE`] and reports it ([`Optimum::bound`]).
//!
//! Sums over samples are taken in fixed chunks of [`CHUNK`] samples, in order, whatever the number
//! of host threads that compute them, so every number here is the same on every run.

use std::sync::OnceLock;

use crate::data::{Dataset, TargetKind};
use crate::linalg::cholesky_solve;

/// Samples per chunk of a full-batch sum (the unit of work of a host thread).
pub const CHUNK: usize = 256;

/// The certified gap `f(θ̂) − f*` at which the softmax optimum search stops.
pub const SOFTMAX_TOLERANCE: f64 = 1e-10;

/// The most L-BFGS iterations of the softmax optimum search.
pub const SOFTMAX_MAX_ITERATIONS: usize = 20_000;

const LBFGS_MEMORY: usize = 10;

/// Which convex objective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvexKind {
    /// Softmax regression over this many classes.
    Softmax(usize),
    /// Linear least squares (one output).
    LeastSquares,
}

/// The minimum of an [`Objective`].
#[derive(Clone, Debug, PartialEq)]
pub struct Optimum {
    /// `f*` (more exactly `f(θ̂)`, within [`Optimum::bound`] above `f*`).
    pub value: f64,
    /// The minimizer `θ̂`, in the model's layout.
    pub params: Vec<f64>,
    /// A certified upper bound on `f(θ̂) − f*`: 0 for the closed form (up to rounding),
    /// `‖∇f(θ̂)‖² / (2·l2)` for softmax regression.
    pub bound: f64,
    /// Iterations of the search (0 for the closed form).
    pub iterations: usize,
}

/// The full-training-set objective of a convex model.
#[derive(Debug)]
pub struct Objective {
    kind: ConvexKind,
    data: Dataset,
    l2: f64,
    optimum: OnceLock<Option<Optimum>>,
}

impl Objective {
    /// The objective of `kind` with L2 coefficient `l2` on the training split `data` (features
    /// as the model sees them, normalized). The optimum is computed on first use.
    ///
    /// # Panics
    /// If the targets do not fit `kind` (class labels for softmax, real values for least
    /// squares); [`crate::Problem::load`] checks this.
    pub fn new(kind: ConvexKind, data: Dataset, l2: f64) -> Self {
        match (kind, data.target) {
            (ConvexKind::Softmax(c), TargetKind::Classes(k)) => assert_eq!(c, k, "classes"),
            (ConvexKind::LeastSquares, TargetKind::Real) => {}
            _ => panic!("{kind:?} does not fit targets {:?}", data.target),
        }
        Objective {
            kind,
            data,
            l2,
            optimum: OnceLock::new(),
        }
    }

    /// Which objective.
    pub fn kind(&self) -> ConvexKind {
        self.kind
    }

    /// The L2 coefficient.
    pub fn l2(&self) -> f64 {
        self.l2
    }

    /// Outputs of the linear layer.
    fn outputs(&self) -> usize {
        match self.kind {
            ConvexKind::Softmax(c) => c,
            ConvexKind::LeastSquares => 1,
        }
    }

    /// Parameters: `(inputs + 1) · outputs`.
    pub fn num_params(&self) -> usize {
        (self.data.dim + 1) * self.outputs()
    }

    /// `f(θ)`.
    pub fn value(&self, theta: &[f64]) -> f64 {
        self.evaluate(theta, None)
    }

    /// `f(θ)` and `∇f(θ)` (written into `grad`).
    pub fn value_and_gradient(&self, theta: &[f64], grad: &mut [f64]) -> f64 {
        self.evaluate(theta, Some(grad))
    }

    /// `f(θ) − f*`, or `None` when `f*` is not known (softmax with `l2 = 0`, or a singular
    /// least-squares system).
    pub fn suboptimality(&self, theta: &[f64]) -> Option<f64> {
        let opt = self.optimum()?;
        Some(self.value(theta) - opt.value)
    }

    /// The optimum, computed on the first call (see the [module documentation](self)).
    pub fn optimum(&self) -> Option<&Optimum> {
        self.optimum
            .get_or_init(|| match self.kind {
                ConvexKind::LeastSquares => self.least_squares(),
                ConvexKind::Softmax(_) if self.l2 > 0.0 => Some(self.lbfgs()),
                ConvexKind::Softmax(_) => None,
            })
            .as_ref()
    }

    fn evaluate(&self, theta: &[f64], grad: Option<&mut [f64]>) -> f64 {
        let p = self.num_params();
        assert_eq!(theta.len(), p, "parameter count");
        let n = self.data.len();
        let want_grad = grad.is_some();
        let chunks: Vec<std::ops::Range<usize>> = (0..n)
            .step_by(CHUNK)
            .map(|s| s..(s + CHUNK).min(n))
            .collect();
        let partials = parallel_map(&chunks, |range| self.chunk(theta, range.clone(), want_grad));
        let mut loss = 0.0;
        let mut total = want_grad.then(|| vec![0.0; p]);
        for (l, g) in partials {
            loss += l;
            if let (Some(t), Some(g)) = (total.as_mut(), g) {
                for (a, b) in t.iter_mut().zip(g) {
                    *a += b;
                }
            }
        }
        let inv = 1.0 / n as f64;
        let mut value = loss * inv;
        let sq: f64 = theta.iter().map(|v| v * v).sum();
        value += 0.5 * self.l2 * sq;
        if let (Some(out), Some(t)) = (grad, total) {
            for ((o, g), th) in out.iter_mut().zip(t).zip(theta) {
                *o = g * inv + self.l2 * th;
            }
        }
        value
    }

    /// Summed loss (and gradient of the summed loss) over the samples `range`.
    fn chunk(
        &self,
        theta: &[f64],
        range: std::ops::Range<usize>,
        want_grad: bool,
    ) -> (f64, Option<Vec<f64>>) {
        let d = self.data.dim;
        let k = self.outputs();
        let (w, b) = theta.split_at(d * k);
        let mut grad = want_grad.then(|| vec![0.0; theta.len()]);
        let mut z = vec![0.0f64; k];
        let mut loss = 0.0;
        for i in range {
            let x = self.data.sample(i);
            z.copy_from_slice(b);
            for (j, &xj) in x.iter().enumerate() {
                let xj = f64::from(xj);
                if xj != 0.0 {
                    for (zc, wc) in z.iter_mut().zip(&w[j * k..(j + 1) * k]) {
                        *zc += xj * wc;
                    }
                }
            }
            // z becomes the residual r = ∂loss/∂z.
            match self.kind {
                ConvexKind::Softmax(_) => {
                    let y = self.data.labels[i] as usize;
                    let m = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let s: f64 = z.iter().map(|v| (v - m).exp()).sum();
                    let lse = m + s.ln();
                    loss += lse - z[y];
                    for v in &mut z {
                        *v = (*v - lse).exp();
                    }
                    z[y] -= 1.0;
                }
                ConvexKind::LeastSquares => {
                    let r = z[0] - f64::from(self.data.values[i]);
                    loss += 0.5 * r * r;
                    z[0] = r;
                }
            }
            if let Some(g) = grad.as_mut() {
                let (gw, gb) = g.split_at_mut(d * k);
                for (j, &xj) in x.iter().enumerate() {
                    let xj = f64::from(xj);
                    if xj != 0.0 {
                        for (gc, rc) in gw[j * k..(j + 1) * k].iter_mut().zip(&z) {
                            *gc += xj * rc;
                        }
                    }
                }
                for (gc, rc) in gb.iter_mut().zip(&z) {
                    *gc += rc;
                }
            }
        }
        (loss, grad)
    }

    /// The closed form: Cholesky on the regularized normal equations.
    fn least_squares(&self) -> Option<Optimum> {
        let d = self.data.dim;
        let m = d + 1;
        let n = self.data.len();
        let mut a = vec![0.0f64; m * m];
        let mut rhs = vec![0.0f64; m];
        let mut row = vec![0.0f64; m];
        for i in 0..n {
            for (r, &v) in row.iter_mut().zip(self.data.sample(i)) {
                *r = f64::from(v);
            }
            row[d] = 1.0;
            let y = f64::from(self.data.values[i]);
            for p in 0..m {
                rhs[p] += row[p] * y;
                let rp = row[p];
                for (q, rq) in row[..=p].iter().enumerate() {
                    a[p * m + q] += rp * rq;
                }
            }
        }
        let inv = 1.0 / n as f64;
        for v in &mut a {
            *v *= inv;
        }
        for v in &mut rhs {
            *v *= inv;
        }
        for p in 0..m {
            a[p * m + p] += self.l2;
        }
        let theta = cholesky_solve(&mut a, rhs, m)?;
        Some(Optimum {
            value: self.value(&theta),
            params: theta,
            bound: 0.0,
            iterations: 0,
        })
    }

    /// L-BFGS from zero until the certified gap is below [`SOFTMAX_TOLERANCE`].
    fn lbfgs(&self) -> Optimum {
        let p = self.num_params();
        let mu = self.l2;
        let bound = |g: &[f64]| g.iter().map(|v| v * v).sum::<f64>() / (2.0 * mu);
        let mut x = vec![0.0f64; p];
        let mut g = vec![0.0f64; p];
        let mut f = self.value_and_gradient(&x, &mut g);
        let mut history: Vec<(Vec<f64>, Vec<f64>, f64)> = Vec::new(); // (s, y, 1/yᵀs)
        let mut x_new = vec![0.0f64; p];
        let mut g_new = vec![0.0f64; p];
        let mut iterations = 0;
        while iterations < SOFTMAX_MAX_ITERATIONS && bound(&g) > SOFTMAX_TOLERANCE {
            iterations += 1;
            let mut dir = two_loop(&g, &history);
            let mut slope = dot(&g, &dir);
            if slope >= 0.0 {
                history.clear();
                dir = g.iter().map(|v| -v).collect();
                slope = dot(&g, &dir);
            }
            if history.is_empty() {
                // First step (or after a reset): at most unit length.
                let norm = dot(&dir, &dir).sqrt();
                if norm > 1.0 {
                    for v in &mut dir {
                        *v /= norm;
                    }
                    slope /= norm;
                }
            }
            let mut t = 1.0;
            let mut accepted = false;
            for _ in 0..60 {
                for ((xn, xv), dv) in x_new.iter_mut().zip(&x).zip(&dir) {
                    *xn = xv + t * dv;
                }
                let f_new = self.value_and_gradient(&x_new, &mut g_new);
                if f_new <= f + 1e-4 * t * slope {
                    let s: Vec<f64> = x_new.iter().zip(&x).map(|(a, b)| a - b).collect();
                    let y: Vec<f64> = g_new.iter().zip(&g).map(|(a, b)| a - b).collect();
                    let ys = dot(&y, &s);
                    if ys > 1e-300 {
                        if history.len() == LBFGS_MEMORY {
                            history.remove(0);
                        }
                        history.push((s, y, 1.0 / ys));
                    }
                    std::mem::swap(&mut x, &mut x_new);
                    std::mem::swap(&mut g, &mut g_new);
                    f = f_new;
                    accepted = true;
                    break;
                }
                t *= 0.5;
            }
            if !accepted {
                if history.is_empty() {
                    break; // no descent even along −∇f: rounding has the last word
                }
                history.clear();
            }
        }
        Optimum {
            value: f,
            bound: bound(&g),
            params: x,
            iterations,
        }
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The L-BFGS direction `−H·g` by the two-loop recursion, with `H₀ = (sᵀy / yᵀy)·I` from the
/// newest pair (identity without one).
fn two_loop(g: &[f64], history: &[(Vec<f64>, Vec<f64>, f64)]) -> Vec<f64> {
    let mut q: Vec<f64> = g.to_vec();
    let mut alphas = vec![0.0; history.len()];
    for (k, (s, y, rho)) in history.iter().enumerate().rev() {
        let a = rho * dot(s, &q);
        alphas[k] = a;
        for (qv, yv) in q.iter_mut().zip(y) {
            *qv -= a * yv;
        }
    }
    if let Some((_, y, rho)) = history.last() {
        let gamma = 1.0 / (rho * dot(y, y));
        for v in &mut q {
            *v *= gamma;
        }
    }
    for (k, (s, y, rho)) in history.iter().enumerate() {
        let beta = rho * dot(y, &q);
        for (qv, sv) in q.iter_mut().zip(s) {
            *qv += (alphas[k] - beta) * sv;
        }
    }
    for v in &mut q {
        *v = -*v;
    }
    q
}

/// `f` over `items` on up to `available_parallelism` host threads, results in item order.
fn parallel_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len());
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let per = items.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(per)
            .map(|part| {
                let f = &f;
                scope.spawn(move || part.iter().map(f).collect::<Vec<R>>())
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a host thread of the objective panicked"))
            .collect()
    })
}
