//! Eigenvalues of small symmetric matrices (mixing matrices of communication graphs).
//!
//! Householder reduction to tridiagonal form, then the implicit QL algorithm with Wilkinson-style
//! shifts (the classic `tred2` + `tqli` pair, eigenvalues only): `O(n³)` time and `O(n²)` memory,
//! accurate to a few ulps of the largest eigenvalue. Meant for graphs of up to a few thousand
//! nodes.

/// The eigenvalues of the symmetric `n × n` matrix `a` (row-major), in decreasing order.
pub fn symmetric_eigenvalues(mut a: Vec<f64>, n: usize) -> Vec<f64> {
    assert_eq!(a.len(), n * n, "a must be n × n");
    if n == 0 {
        return Vec::new();
    }
    let mut d = vec![0.0; n];
    let mut e = vec![0.0; n];
    tridiagonalize(&mut a, n, &mut d, &mut e);
    ql_implicit(&mut d, &mut e);
    d.sort_by(|x, y| y.total_cmp(x));
    d
}

/// Householder reduction of the symmetric `a` (lower triangle used, destroyed): on return `d`
/// holds the diagonal and `e[1..]` the subdiagonal of the similar tridiagonal matrix.
fn tridiagonalize(a: &mut [f64], n: usize, d: &mut [f64], e: &mut [f64]) {
    let ix = |i: usize, j: usize| i * n + j;
    for i in (1..n).rev() {
        let l = i - 1;
        if l > 0 {
            let scale: f64 = (0..=l).map(|k| a[ix(i, k)].abs()).sum();
            if scale == 0.0 {
                e[i] = a[ix(i, l)];
                continue;
            }
            let mut h = 0.0;
            for k in 0..=l {
                a[ix(i, k)] /= scale;
                h += a[ix(i, k)] * a[ix(i, k)];
            }
            let f = a[ix(i, l)];
            let g = if f >= 0.0 { -h.sqrt() } else { h.sqrt() };
            e[i] = scale * g;
            h -= f * g;
            a[ix(i, l)] = f - g;
            let mut f = 0.0;
            for j in 0..=l {
                let mut g = 0.0;
                for k in 0..=j {
                    g += a[ix(j, k)] * a[ix(i, k)];
                }
                for k in j + 1..=l {
                    g += a[ix(k, j)] * a[ix(i, k)];
                }
                e[j] = g / h;
                f += e[j] * a[ix(i, j)];
            }
            let hh = f / (h + h);
            for j in 0..=l {
                let f = a[ix(i, j)];
                let g = e[j] - hh * f;
                e[j] = g;
                for k in 0..=j {
                    a[ix(j, k)] -= f * e[k] + g * a[ix(i, k)];
                }
            }
        } else {
            e[i] = a[ix(i, l)];
        }
    }
    e[0] = 0.0;
    for (i, di) in d.iter_mut().enumerate() {
        *di = a[ix(i, i)];
    }
}

/// Eigenvalues of the symmetric tridiagonal matrix with diagonal `d` and subdiagonal `e[1..]`,
/// left in `d` (unordered).
fn ql_implicit(d: &mut [f64], e: &mut [f64]) {
    let n = d.len();
    for i in 1..n {
        e[i - 1] = e[i];
    }
    e[n - 1] = 0.0;
    for l in 0..n {
        for _ in 0..64 {
            let mut m = l;
            while m + 1 < n {
                let dd = d[m].abs() + d[m + 1].abs();
                if e[m].abs() <= f64::EPSILON * dd {
                    break;
                }
                m += 1;
            }
            if m == l {
                break;
            }
            let mut g = (d[l + 1] - d[l]) / (2.0 * e[l]);
            let mut r = g.hypot(1.0);
            g = d[m] - d[l] + e[l] / (g + r.copysign(g));
            let (mut s, mut c, mut p) = (1.0f64, 1.0f64, 0.0f64);
            let mut underflow = false;
            for i in (l..m).rev() {
                let f = s * e[i];
                let b = c * e[i];
                r = f.hypot(g);
                e[i + 1] = r;
                if r == 0.0 {
                    d[i + 1] -= p;
                    e[m] = 0.0;
                    underflow = true;
                    break;
                }
                s = f / r;
                c = g / r;
                g = d[i + 1] - p;
                r = (d[i] - g) * s + 2.0 * c * b;
                p = s * r;
                d[i + 1] = g + p;
                g = c * r - b;
            }
            if underflow {
                continue;
            }
            d[l] -= p;
            e[l] = g;
            e[m] = 0.0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diagonal_and_two_by_two() {
        assert_eq!(
            symmetric_eigenvalues(vec![3.0, 0.0, 0.0, -1.0], 2),
            vec![3.0, -1.0]
        );
        let ev = symmetric_eigenvalues(vec![2.0, 1.0, 1.0, 2.0], 2);
        assert!((ev[0] - 3.0).abs() < 1e-14 && (ev[1] - 1.0).abs() < 1e-14);
        assert_eq!(symmetric_eigenvalues(vec![5.0], 1), vec![5.0]);
    }

    #[test]
    fn trace_and_frobenius_norm_are_kept() {
        // A dense symmetric matrix with distinct, clustered and negative eigenvalues.
        let n = 40;
        let mut a = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..=i {
                let v = ((i * 7 + j * 13) % 11) as f64 - 5.0 + if i == j { i as f64 } else { 0.0 };
                a[i * n + j] = v;
                a[j * n + i] = v;
            }
        }
        let trace: f64 = (0..n).map(|i| a[i * n + i]).sum();
        let frob: f64 = a.iter().map(|v| v * v).sum();
        let ev = symmetric_eigenvalues(a, n);
        assert!((ev.iter().sum::<f64>() - trace).abs() < 1e-9);
        assert!((ev.iter().map(|v| v * v).sum::<f64>() - frob).abs() < 1e-7 * frob);
        assert!(ev.windows(2).all(|w| w[0] >= w[1]));
    }
}
