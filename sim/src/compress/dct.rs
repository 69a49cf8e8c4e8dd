//! DeMo's compressor: each chunk of a tensor to its DCT-II coefficients, the `k` of largest
//! magnitude kept, and the receivers' decoding (Peng, Quesnelle & Kingma, "DeMo: Decoupled
//! Momentum Optimization", arXiv:2411.19870, 2024), after the reference code's `TransformDCT`
//! and `CompressDCT` (bloc97/DeMo, `demo.py`).
//!
//! **Chunks** are SparseLoCo's ([`super::chunked::chunks`]: the reference's
//! `_get_smaller_split` and `"(y h) (x w) -> y h x w"`). A matrix chunk `X` of `h × w` values is
//! transformed in 2-D, `Y = D_h X D_wᵀ`, a vector chunk `x` of `s` values in 1-D, `y = D_s x`,
//! with `D_s` the orthonormal DCT-II (`norm = "ortho"`):
//! `D[k][j] = a_k cos(π(2j + 1)k / 2s)`, `a_0 = √(1/s)`, `a_k = √(2/s)`. `D` is orthogonal, so the
//! inverse is `Dᵀ`.
//!
//! **Top-k**: the `k` coefficients of largest magnitude of each chunk (all of them when it has
//! at most `k`), ties to the lower position. **Decoding** a set of messages sets each
//! coefficient to the mean of the values sent for it, over the senders that sent it, 0 where
//! none did (the reference's `scatter_reduce(reduce = "mean", include_self = False)`), then
//! transforms back.

use super::chunked::{Tensor, chunks};

/// The orthonormal DCT-II matrix of size `s`, row-major: row `k` is frequency `k`.
pub fn dct_matrix(s: usize) -> Vec<f64> {
    let mut d = vec![0.0; s * s];
    for k in 0..s {
        let a = if k == 0 {
            (1.0 / s as f64).sqrt()
        } else {
            (2.0 / s as f64).sqrt()
        };
        for j in 0..s {
            let angle = std::f64::consts::PI * (2 * j + 1) as f64 * k as f64 / (2 * s) as f64;
            d[k * s + j] = a * angle.cos();
        }
    }
    d
}

/// One worker's message: for every chunk of every tensor, in order, its kept coefficients as
/// `(position in the chunk, value)`, by position.
pub type Message = Vec<Vec<(u16, f64)>>;

/// DeMo's chunked DCT and top-k.
#[derive(Clone, Debug)]
pub struct DctTopK {
    /// The target chunk side (the reference's `compression_chunk`).
    pub chunk: usize,
    /// Coefficients kept per chunk (the reference's `compression_topk`).
    pub top_k: usize,
    /// Every chunk: its row coordinates and its shape (`(h, w)`; `(1, s)` for a vector's).
    layout: Vec<(Vec<usize>, (usize, usize))>,
    /// The DCT matrices by size.
    bases: std::collections::BTreeMap<usize, Vec<f64>>,
}

impl DctTopK {
    /// The compressor for the tensors of a row.
    pub fn new(chunk: usize, top_k: usize, tensors: &[Tensor]) -> Self {
        let mut layout = Vec::new();
        let mut bases = std::collections::BTreeMap::new();
        for t in tensors {
            for c in chunks(t, chunk) {
                let shape = match t.matrix {
                    Some((rows, cols)) => {
                        let (h, w) = (
                            super::chunked::chunk_side(rows, chunk),
                            super::chunked::chunk_side(cols, chunk),
                        );
                        (h, w)
                    }
                    None => (1, c.len()),
                };
                for s in [shape.0, shape.1] {
                    bases.entry(s).or_insert_with(|| dct_matrix(s));
                }
                layout.push((c, shape));
            }
        }
        DctTopK {
            chunk,
            top_k,
            layout,
            bases,
        }
    }

    /// Coefficients kept in all: `min(k, chunk size)` per chunk.
    pub fn kept(&self) -> usize {
        self.layout
            .iter()
            .map(|(c, _)| c.len().min(self.top_k))
            .sum()
    }

    /// `Y = D_h X D_wᵀ` of a chunk's values `x` (row-major `h × w`).
    fn forward(&self, x: &[f64], (h, w): (usize, usize)) -> Vec<f64> {
        let (dh, dw) = (&self.bases[&h], &self.bases[&w]);
        // T = X D_wᵀ, then Y = D_h T.
        let mut t = vec![0.0; h * w];
        for i in 0..h {
            for k in 0..w {
                t[i * w + k] = (0..w).map(|j| x[i * w + j] * dw[k * w + j]).sum();
            }
        }
        let mut y = vec![0.0; h * w];
        for b in 0..h {
            for k in 0..w {
                y[b * w + k] = (0..h).map(|i| dh[b * h + i] * t[i * w + k]).sum();
            }
        }
        y
    }

    /// `X = D_hᵀ Y D_w`: the inverse of [`DctTopK::forward`].
    fn inverse(&self, y: &[f64], (h, w): (usize, usize)) -> Vec<f64> {
        let (dh, dw) = (&self.bases[&h], &self.bases[&w]);
        let mut t = vec![0.0; h * w];
        for b in 0..h {
            for j in 0..w {
                t[b * w + j] = (0..w).map(|k| y[b * w + k] * dw[k * w + j]).sum();
            }
        }
        let mut x = vec![0.0; h * w];
        for i in 0..h {
            for j in 0..w {
                x[i * w + j] = (0..h).map(|b| dh[b * h + i] * t[b * w + j]).sum();
            }
        }
        x
    }

    /// The message of `x` (a whole row): every chunk's `k` largest DCT coefficients.
    pub fn compress(&self, x: &[f64]) -> Message {
        self.layout
            .iter()
            .map(|(coords, shape)| {
                let values: Vec<f64> = coords.iter().map(|&i| x[i]).collect();
                let y = self.forward(&values, *shape);
                let mut order: Vec<usize> = (0..y.len()).collect();
                // Largest magnitude first; ties to the lower position.
                super::chunked::top(&mut order, self.top_k, |&a, &b| {
                    y[b].abs().total_cmp(&y[a].abs()).then(a.cmp(&b))
                });
                order.into_iter().map(|p| (p as u16, y[p])).collect()
            })
            .collect()
    }

    /// The row the receivers decode from `messages`: each coefficient the mean of the values
    /// sent for it by the senders that sent it, transformed back; 0 outside every chunk.
    pub fn decode(&self, messages: &[&Message], len: usize) -> Vec<f64> {
        let mut out = vec![0.0; len];
        for (c, (coords, shape)) in self.layout.iter().enumerate() {
            let mut sum = vec![0.0; coords.len()];
            let mut count = vec![0u32; coords.len()];
            for m in messages {
                for &(p, v) in &m[c] {
                    sum[p as usize] += v;
                    count[p as usize] += 1;
                }
            }
            let y: Vec<f64> = sum
                .iter()
                .zip(&count)
                .map(|(s, &k)| if k > 0 { s / f64::from(k) } else { 0.0 })
                .collect();
            for (&i, v) in coords.iter().zip(self.inverse(&y, *shape)) {
                out[i] = v;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dct_is_orthonormal_and_matches_the_ortho_dct_ii() {
        for s in [1, 3, 4, 8] {
            let d = dct_matrix(s);
            for a in 0..s {
                for b in 0..s {
                    let dot: f64 = (0..s).map(|j| d[a * s + j] * d[b * s + j]).sum();
                    let want = if a == b { 1.0 } else { 0.0 };
                    assert!((dot - want).abs() < 1e-12, "size {s}, rows {a}, {b}: {dot}");
                }
            }
        }
        // scipy.fft.dct([1, 2, 3, 4], norm = "ortho"): [5, −2.2304, 0, −0.1585].
        let d = dct_matrix(4);
        let y: Vec<f64> = (0..4)
            .map(|k| (0..4).map(|j| d[k * 4 + j] * (j + 1) as f64).sum())
            .collect();
        for (got, want) in y
            .iter()
            .zip([5.0, -2.230_442_497_387_662, 0.0, -0.158_512_667_5])
        {
            assert!((got - want).abs() < 1e-9, "{y:?}");
        }
    }

    #[test]
    fn every_coefficient_kept_decodes_to_the_row_itself() {
        let tensors = vec![
            Tensor {
                range: 0..24,
                matrix: Some((4, 6)),
            },
            Tensor {
                range: 24..30,
                matrix: None,
            },
        ];
        let c = DctTopK::new(3, 9, &tensors);
        let x: Vec<f64> = (0..30).map(|i| ((i * 7) % 11) as f64 - 5.0).collect();
        let m = c.compress(&x);
        assert_eq!(m.len(), 4 + 2, "4 blocks of 2 × 3 and 2 runs of 3");
        assert_eq!(c.kept(), 30);
        let back = c.decode(&[&m], 30);
        for (a, b) in back.iter().zip(&x) {
            assert!((a - b).abs() < 1e-12, "{back:?}");
        }
    }

    #[test]
    fn decoding_averages_each_coefficient_over_its_senders() {
        let t = vec![Tensor {
            range: 0..2,
            matrix: None,
        }];
        let c = DctTopK::new(2, 1, &t);
        // One coefficient each: worker a sends frequency 0, worker b frequency 1.
        let a: Message = vec![vec![(0, 2.0)]];
        let b: Message = vec![vec![(1, 4.0)]];
        let both: Message = vec![vec![(0, 6.0)]];
        let y0 = c.decode(&[&a, &b, &both], 2);
        // Frequency 0: mean(2, 6) = 4 (b did not send it); frequency 1: 4.
        let s = std::f64::consts::FRAC_1_SQRT_2;
        assert!((y0[0] - (4.0 * s + 4.0 * s)).abs() < 1e-12, "{y0:?}");
        assert!((y0[1] - (4.0 * s - 4.0 * s)).abs() < 1e-12, "{y0:?}");
    }
}
