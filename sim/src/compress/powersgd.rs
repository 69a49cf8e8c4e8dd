//! PowerSGD: rank-`r` compression of the gradients' weight matrices for all-reduce.
//!
//! Vogels, Karimireddy & Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for
//! Distributed Optimization", NeurIPS 2019 (Algorithms 1 and 2), as its reference code
//! (`epfml/powersgd`) does it. Every weight matrix `M` (`a × b`; a convolution reshaped to
//! `cout × cin·k²`) of every worker `w` is compressed with one step of power iteration, warm
//! started from the previous step's `Q`, with error feedback:
//!
//! ```text
//! M_w ← g_w + e_w                               (the error of w's last step added back)
//! P_w ← M_w Q;          P ← all-reduce mean(P_w)   (first all-reduce: a·r values per matrix)
//! P̂ ← orthogonalize(P)                          (Gram–Schmidt on the columns)
//! Q_w ← M_w^T P̂;       Q ← all-reduce mean(Q_w)   (second all-reduce: b·r values per matrix)
//! e_w ← M_w − P̂ Q_wᵀ                            (what w's own message did not carry)
//! the update: P̂ Qᵀ = mean_w P̂ Q_wᵀ
//! ```
//!
//! `Q` starts as i.i.d. standard normal entries, the same on every worker (one shared stream).
//! Every other coordinate (biases, normalization weights, running statistics) is all-reduced
//! uncompressed in the first all-reduce, without error feedback, as in the reference code.
//!
//! **Computed once.** Both all-reduces are means, so every worker ends with the same `P̂` and
//! `Q`; this module computes them once, from every worker's `M_w`, when the second all-reduce
//! completes ([`PowerSgd::aggregate`]), and the all-reduces themselves are the rings of
//! [`crate::algorithms::ring`] with the factors' sizes ([`PowerSgd::factor_values`]). The
//! arithmetic is in `f64` on the host; the result is rounded to the store's precision once.

use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

use crate::clock::rng::{StreamKind, stream};
use crate::error::ConfigError;
use crate::store::{GradId, Matrix, MsgId, ReplicaStore};

/// The state of PowerSGD across steps: the warm-start `Q` of each matrix and each worker's
/// error-feedback buffer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PowerSgd {
    rank: usize,
    matrices: Vec<Matrix>,
    /// Per matrix: `Q`, `b × r`, row-major.
    q: Vec<Vec<f64>>,
    /// Per worker: its error `e_w`, a message buffer of the store (none before its first step).
    errors: Vec<Option<MsgId>>,
}

/// The stream id of the shared initial `Q` (beyond any worker's id).
const Q_STREAM: u64 = 1 << 40;

impl PowerSgd {
    /// The state for `workers` workers compressing `matrices` at rank `rank`; the initial `Q`
    /// is drawn from the run's `seed`.
    pub fn new(rank: usize, matrices: Vec<Matrix>, workers: usize, seed: u64) -> Self {
        let mut rng = stream(seed, StreamKind::Algorithm, Q_STREAM);
        let q = matrices
            .iter()
            .map(|m| {
                (0..m.cols * rank)
                    .map(|_| StandardNormal.sample(&mut rng))
                    .collect()
            })
            .collect();
        PowerSgd {
            rank,
            matrices,
            q,
            errors: vec![None; workers],
        }
    }

    /// Refuses a rank larger than a matrix's smaller side (`path` is the `rank` field's).
    pub fn check(rank: usize, matrices: &[Matrix], path: &str) -> Result<(), ConfigError> {
        if let Some(m) = matrices.iter().find(|m| rank > m.rows.min(m.cols)) {
            let r = m.range();
            return Err(ConfigError::new(
                path,
                format!(
                    "rank {rank} is larger than the smaller side of the {} × {} weight matrix at parameters {}..{}",
                    m.rows, m.cols, r.start, r.end
                ),
            )
            .hint(format!(
                "a rank-r approximation of an a × b matrix needs r ≤ min(a, b); this model allows rank ≤ {}",
                matrices.iter().map(|m| m.rows.min(m.cols)).min().unwrap_or(0)
            )));
        }
        Ok(())
    }

    /// Values in the two all-reduces of one step, for a model of `params` coordinates: the
    /// first carries every `P` (`a·r` per matrix) and every coordinate outside the matrices,
    /// the second every `Q` (`b·r` per matrix).
    pub fn factor_values(rank: usize, matrices: &[Matrix], params: usize) -> (usize, usize) {
        let inside: usize = matrices.iter().map(|m| m.rows * m.cols).sum();
        let p: usize = matrices.iter().map(|m| m.rows * rank).sum();
        let q: usize = matrices.iter().map(|m| m.cols * rank).sum();
        (p + params - inside, q)
    }

    /// The rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The warm-start `Q` of matrix `k` (in the order of the matrices given to [`PowerSgd::new`]),
    /// `b × r`, row-major: the mean `Q` of the last step, which the next step's `P = M Q` starts
    /// from (the initial draw before the first step). For tests and inspection.
    pub fn q(&self, k: usize) -> &[f64] {
        &self.q[k]
    }

    /// Worker `w`'s error-feedback buffer, once it has one.
    pub fn error(&self, w: usize) -> Option<MsgId> {
        self.errors[w]
    }

    /// Frees every error buffer (a run's end is not a reason: the store goes with it; a crash
    /// that breaks the all-reduce for good is).
    pub fn release(&mut self, store: &mut dyn ReplicaStore) {
        for e in self.errors.iter_mut().filter_map(Option::take) {
            store.release_msg(e);
        }
    }

    /// The compressed mean of `grads` (worker `w`'s gradient at index `w`, all computed): a new
    /// gradient whose trainable part is the decoded update, every error buffer and `Q` advanced
    /// one step. The inputs are released. On a store that does not compute, the plain mean.
    pub fn aggregate(&mut self, store: &mut dyn ReplicaStore, grads: &[GradId]) -> GradId {
        if !store.computes() {
            return store.mean_gradient(grads);
        }
        let n = grads.len();
        let dim = store.num_params();
        let mut ms: Vec<Vec<f64>> = grads.iter().map(|&g| store.gradient_values(g)).collect();
        for (w, m) in ms.iter_mut().enumerate() {
            if let Some(e) = self.errors[w] {
                let e = store.msg_values(e);
                for mat in &self.matrices {
                    for c in mat.range() {
                        m[c] += e[c];
                    }
                }
            }
        }
        let mut out: Vec<f64> = (0..ms[0].len())
            .map(|c| ms.iter().map(|m| m[c]).sum::<f64>() / n as f64)
            .collect();
        let mut errors: Vec<Vec<f64>> = vec![vec![0.0; dim]; n];
        let r = self.rank;
        for (k, mat) in self.matrices.iter().enumerate() {
            let (a, b, start) = (mat.rows, mat.cols, mat.start);
            let q = &self.q[k];
            // P = mean_w M_w Q  (a × r).
            let mut p = vec![0.0; a * r];
            for m in &ms {
                let m = &m[start..start + a * b];
                for i in 0..a {
                    for j in 0..b {
                        let v = m[i * b + j];
                        for t in 0..r {
                            p[i * r + t] += v * q[j * r + t];
                        }
                    }
                }
            }
            p.iter_mut().for_each(|v| *v /= n as f64);
            orthogonalize(&mut p, a, r);
            // Q_w = M_wᵀ P̂ (b × r); e_w = M_w − P̂ Q_wᵀ; Q = mean_w Q_w.
            let mut q_mean = vec![0.0; b * r];
            for (w, m) in ms.iter().enumerate() {
                let m = &m[start..start + a * b];
                let mut qw = vec![0.0; b * r];
                for i in 0..a {
                    for j in 0..b {
                        let v = m[i * b + j];
                        for t in 0..r {
                            qw[j * r + t] += v * p[i * r + t];
                        }
                    }
                }
                let e = &mut errors[w][start..start + a * b];
                for i in 0..a {
                    for j in 0..b {
                        let approx: f64 = (0..r).map(|t| p[i * r + t] * qw[j * r + t]).sum();
                        e[i * b + j] = m[i * b + j] - approx;
                    }
                }
                for (s, v) in q_mean.iter_mut().zip(&qw) {
                    *s += v;
                }
            }
            q_mean.iter_mut().for_each(|v| *v /= n as f64);
            let o = &mut out[start..start + a * b];
            for i in 0..a {
                for j in 0..b {
                    o[i * b + j] = (0..r).map(|t| p[i * r + t] * q_mean[j * r + t]).sum();
                }
            }
            self.q[k] = q_mean;
        }
        for (w, e) in errors.iter().enumerate() {
            if let Some(old) = self.errors[w].replace(store.msg_from_values(e)) {
                store.release_msg(old);
            }
        }
        let mean = store.mean_gradient(grads);
        store.set_gradient_values(mean, &out);
        mean
    }
}

/// Gram–Schmidt on the `r` columns of the row-major `a × r` matrix `p`, as PowerSGD's reference
/// code: each column is normalized (`/ (‖col‖ + 1e-8)`), then removed from the later ones.
pub fn orthogonalize(p: &mut [f64], a: usize, r: usize) {
    for i in 0..r {
        let norm = (0..a)
            .map(|k| p[k * r + i] * p[k * r + i])
            .sum::<f64>()
            .sqrt()
            + 1e-8;
        for k in 0..a {
            p[k * r + i] /= norm;
        }
        for j in i + 1..r {
            let dot: f64 = (0..a).map(|k| p[k * r + i] * p[k * r + j]).sum();
            for k in 0..a {
                p[k * r + j] -= dot * p[k * r + i];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orthogonalized_columns_are_orthonormal() {
        let (a, r) = (6, 3);
        let mut p: Vec<f64> = (0..a * r)
            .map(|i| ((i * 7 + 3) % 11) as f64 - 5.0)
            .collect();
        orthogonalize(&mut p, a, r);
        for i in 0..r {
            for j in 0..r {
                let dot: f64 = (0..a).map(|k| p[k * r + i] * p[k * r + j]).sum();
                let want = if i == j { 1.0 } else { 0.0 };
                // The reference code's `+ 1e-8` in the normalization leaves norms of 1 − O(1e-8).
                assert!((dot - want).abs() < 1e-7, "({i}, {j}): {dot}");
            }
        }
    }

    #[test]
    fn factor_sizes_count_the_matrices_and_the_rest() {
        let m = [
            Matrix {
                start: 0,
                rows: 784,
                cols: 64,
            },
            Matrix {
                start: 784 * 64 + 64,
                rows: 64,
                cols: 10,
            },
        ];
        let params = 784 * 64 + 64 + 640 + 10;
        assert_eq!(
            PowerSgd::factor_values(2, &m, params),
            (784 * 2 + 64 * 2 + 74, 64 * 2 + 10 * 2)
        );
        assert!(PowerSgd::check(10, &m, "rank").is_ok());
        let e = PowerSgd::check(11, &m, "rank").unwrap_err();
        assert!(e.message.contains("64 × 10"), "{}", e.message);
    }
}
