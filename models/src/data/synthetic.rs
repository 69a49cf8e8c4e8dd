//! Generated datasets, from stream (Init, 3), and the exact least-squares optimum of a
//! regression dataset.
//!
//! Every draw `z` below is a standard normal (`rand_distr::StandardNormal`, `f64`), taken in the
//! order written; features are stored as `f32`.
//!
//! - **Gaussian mixture** ([`gaussian_mixture`]): first the class means, class by class and
//!   feature by feature, `μ_kj = σ_μ · z` with `σ_μ = separation / √(2·dim)`, so that the
//!   expected squared distance between two means is `separation²`; then sample `i` has label
//!   `i mod classes` (balanced classes) and features `x_ij = μ_{y_i j} + z`. Within a class the
//!   standard deviation is 1, so `separation` is the typical distance between two class means
//!   in within-class standard deviations: two classes overlap with error about
//!   `Φ(−separation/2)`.
//! - **Linear regression** ([`linear_regression`]): first the true weights `w*_j = z / √dim`
//!   (so `x·w*` has variance about 1) and the bias `b* = z`; then, sample by sample, the features
//!   `x_ij = z` and the target `y_i = x_i·w* + b* + noise · z` (computed in `f64` from the stored
//!   `f32` features). The population risk is minimized by `(w*, b*)`, where the mean squared
//!   error is `noise²`; [`least_squares`] gives the exact minimizer on a finite sample.

use rand::Rng;
use rand_distr::StandardNormal;

use dasim_sim::clock::rng::{Stream, StreamKind, stream};

use super::config::{DatasetKind, SyntheticConfig};
use super::{Dataset, TargetKind};

/// The stream id (kind Init) of the generators.
pub const GENERATOR_STREAM: u64 = 3;

fn z(rng: &mut Stream) -> f64 {
    rng.sample(StandardNormal)
}

/// A Gaussian mixture of `classes` unit-variance components in `dim` dimensions, `samples`
/// samples with balanced labels; see the module documentation for the exact draws.
pub fn gaussian_mixture(
    samples: usize,
    dim: usize,
    classes: usize,
    separation: f64,
    seed: u64,
) -> Dataset {
    let rng = &mut stream(seed, StreamKind::Init, GENERATOR_STREAM);
    let sigma = separation / (2.0 * dim as f64).sqrt();
    let means: Vec<f64> = (0..classes * dim).map(|_| sigma * z(rng)).collect();
    let mut features = Vec::with_capacity(samples * dim);
    let mut labels = Vec::with_capacity(samples);
    for i in 0..samples {
        let y = i % classes;
        for j in 0..dim {
            features.push((means[y * dim + j] + z(rng)) as f32);
        }
        labels.push(y as u32);
    }
    Dataset::classification(features, dim, labels, classes)
}

/// The model that generated a linear-regression dataset.
#[derive(Clone, Debug, PartialEq)]
pub struct LinearTruth {
    /// `w*`, one weight per feature.
    pub weights: Vec<f64>,
    /// `b*`.
    pub bias: f64,
    /// Standard deviation of the target noise; `noise²` is the optimal mean squared error in
    /// expectation.
    pub noise: f64,
}

/// Linear regression `y = x·w* + b* + noise·z` with `x ~ N(0, I_dim)`; see the module
/// documentation for the exact draws. Returns the data and `(w*, b*)`.
pub fn linear_regression(
    samples: usize,
    dim: usize,
    noise: f64,
    seed: u64,
) -> (Dataset, LinearTruth) {
    let rng = &mut stream(seed, StreamKind::Init, GENERATOR_STREAM);
    let scale = 1.0 / (dim as f64).sqrt();
    let weights: Vec<f64> = (0..dim).map(|_| scale * z(rng)).collect();
    let bias = z(rng);
    let mut features = Vec::with_capacity(samples * dim);
    let mut values = Vec::with_capacity(samples);
    for _ in 0..samples {
        let mut y = bias;
        for w in &weights {
            let x = z(rng) as f32;
            features.push(x);
            y += f64::from(x) * w;
        }
        y += noise * z(rng);
        values.push(y as f32);
    }
    (
        Dataset::regression(features, dim, values),
        LinearTruth {
            weights,
            bias,
            noise,
        },
    )
}

/// The dataset a `[data.synthetic]` table describes (with defaults filled in).
pub(crate) fn generate(p: &SyntheticConfig, kind: DatasetKind, seed: u64) -> Dataset {
    let samples = p.samples.expect("resolved");
    let dim = p.dim.expect("resolved");
    match kind {
        DatasetKind::GaussianMixture => gaussian_mixture(
            samples,
            dim,
            p.classes.expect("resolved"),
            p.separation.expect("resolved"),
            seed,
        ),
        DatasetKind::LinearRegression => {
            linear_regression(samples, dim, p.noise.expect("resolved"), seed).0
        }
        other => unreachable!("{other} is not generated"),
    }
}

/// The exact least-squares fit of a regression dataset: the minimizer of the mean squared
/// error `(1/n) Σ (x_i·w + b − y_i)²` over `(w, b)`.
#[derive(Clone, Debug, PartialEq)]
pub struct LeastSquares {
    /// Optimal weights.
    pub weights: Vec<f64>,
    /// Optimal bias.
    pub bias: f64,
    /// The minimal mean squared error (no factor ½).
    pub mse: f64,
}

/// Solves the normal equations of `data` (real targets) in `f64` by Cholesky factorization:
/// `O(n·dim² + dim³)`, meant for the small regression problems of tests and convex baselines.
/// `None` for class labels, or when the features (with a constant column) are rank deficient.
pub fn least_squares(data: &Dataset) -> Option<LeastSquares> {
    if data.target != TargetKind::Real || data.is_empty() {
        return None;
    }
    let d = data.dim;
    let m = d + 1; // the bias is the last coordinate
    let mut a = vec![0.0f64; m * m];
    let mut b = vec![0.0f64; m];
    let mut row = vec![0.0f64; m];
    for (i, x) in data.features.chunks_exact(d).enumerate() {
        for (r, &v) in row.iter_mut().zip(x) {
            *r = f64::from(v);
        }
        row[d] = 1.0;
        let y = f64::from(data.values[i]);
        for p in 0..m {
            b[p] += row[p] * y;
            for q in 0..=p {
                a[p * m + q] += row[p] * row[q];
            }
        }
    }
    let mut b = crate::linalg::cholesky_solve(&mut a, b, m)?;
    let mut sq = 0.0;
    for (i, x) in data.features.chunks_exact(d).enumerate() {
        let pred: f64 = x
            .iter()
            .zip(&b)
            .map(|(&v, w)| f64::from(v) * w)
            .sum::<f64>()
            + b[d];
        let r = pred - f64::from(data.values[i]);
        sq += r * r;
    }
    let bias = b[d];
    b.truncate(d);
    Some(LeastSquares {
        weights: b,
        bias,
        mse: sq / data.len() as f64,
    })
}
