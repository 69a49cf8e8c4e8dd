//! Small dense linear algebra in `f64` for the closed-form problems (the convex models' optima,
//! the synthetic data's teachers).

/// Solves `A·x = b` for a symmetric positive-definite `A` (`m × m`, lower triangle used,
/// overwritten by its Cholesky factor). `None` if `A` is not numerically positive definite.
pub(crate) fn cholesky_solve(a: &mut [f64], mut b: Vec<f64>, m: usize) -> Option<Vec<f64>> {
    let trace: f64 = (0..m).map(|p| a[p * m + p]).sum();
    for p in 0..m {
        for q in 0..=p {
            let mut s = a[p * m + q];
            for k in 0..q {
                s -= a[p * m + k] * a[q * m + k];
            }
            if p == q {
                if s <= 1e-12 * trace {
                    return None;
                }
                a[p * m + p] = s.sqrt();
            } else {
                a[p * m + q] = s / a[q * m + q];
            }
        }
    }
    for p in 0..m {
        let mut s = b[p];
        for k in 0..p {
            s -= a[p * m + k] * b[k];
        }
        b[p] = s / a[p * m + p];
    }
    for p in (0..m).rev() {
        let mut s = b[p];
        for k in p + 1..m {
            s -= a[k * m + p] * b[k];
        }
        b[p] = s / a[p * m + p];
    }
    Some(b)
}
