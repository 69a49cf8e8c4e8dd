//! Chunked top-k with statistical quantization: SparseLoCo's compressor of the outer
//! pseudo-gradient (Sarfi, Thérien, Lidin & Belilovsky, "Communication Efficient LLM
//! Pre-training with SparseLoCo", arXiv:2508.15706, 2025), after its reference code's
//! `ChunkingTransform` and `TopKCompressor` (tplr-ai/SparseLoCo, `src/tplr/sparseloco.py`,
//! from Templar's `CCLoco`).
//!
//! **Chunks.** Each tensor is cut into chunks: a weight matrix `rows × cols` into blocks
//! `h × w`, where `h` is the largest divisor of `rows` no larger than the target `chunk` (and
//! `w` of `cols`), each block read row by row (the reference's `"(y h) (x w) -> y x (h w)"`); a
//! vector of length `l` into runs of the largest divisor of `l` no larger than `chunk`. With
//! the default `chunk = 64`, a 256 × 128 matrix has 4 × 2 chunks of 4,096 values.
//!
//! **Top-k.** In every chunk the `k` values of largest magnitude are kept (all of them when the
//! chunk has at most `k`); ties go to the lower position, where the reference's `torch.topk`
//! leaves the order unspecified.
//!
//! **Quantization** (optional, `bits` ∈ {1, 2, 4, 8}): the kept values of one tensor together,
//! as the reference's `_quantize`: `μ` their mean, `σ` their unbiased standard deviation,
//! `scale = range · σ / B` with `B = 2^bits` bins (1 when that is 0 or not finite), each value's
//! bin `clamp(round((v − μ)/scale + B/2), 0, B − 1)` (ties to even, as `torch.round`), and the
//! value sent back as the mean of the centred values in its bin plus `μ` (a lookup table of `B`
//! numbers). The arithmetic is in `f64` here, in `f32` in the reference.
//!
//! **Without top-k** (MuLoCo's quantization alone) every value of a tensor is kept, quantized
//! together, and no position is sent.
//!
//! **Bytes.** A tensor's message is its kept values' positions inside their chunks (2 bytes
//! each: a chunk holds at most 65,536 values; none without top-k) and the values: `bits` each, bit-packed, with the
//! mean and the `B` lookup values as `f32` (4 bytes each), or at the network's `dtype` without
//! quantization. The reference sends `int64` positions; 2 bytes is what a packed message needs.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::store::Matrix;

/// A tensor of a row: its coordinates, and its shape when it is a matrix.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tensor {
    /// Its coordinates in a row.
    pub range: Range<usize>,
    /// `(rows, cols)` for a weight matrix, row-major; `None` for a vector.
    pub matrix: Option<(usize, usize)>,
}

impl Tensor {
    /// The tensors of a row from a store's tensors and weight matrices: a tensor that is one of
    /// the matrices takes its shape.
    pub fn of(tensors: &[Range<usize>], matrices: &[Matrix]) -> Vec<Tensor> {
        tensors
            .iter()
            .map(|r| Tensor {
                range: r.clone(),
                matrix: matrices
                    .iter()
                    .find(|m| m.range() == *r)
                    .map(|m| (m.rows, m.cols)),
            })
            .collect()
    }
}

/// The largest divisor of `n` no larger than `target` (`n` itself when `n ≤ target`): the
/// reference's `_get_smaller_split`.
pub fn chunk_side(n: usize, target: usize) -> usize {
    if n <= target {
        return n;
    }
    (1..=target)
        .rev()
        .find(|d| n.is_multiple_of(*d))
        .unwrap_or(1)
}

/// The chunks of `tensor`, each as the row coordinates it covers, in the reference's order.
pub fn chunks(tensor: &Tensor, target: usize) -> Vec<Vec<usize>> {
    let start = tensor.range.start;
    match tensor.matrix {
        Some((rows, cols)) => {
            let (h, w) = (chunk_side(rows, target), chunk_side(cols, target));
            let mut out = Vec::with_capacity((rows / h) * (cols / w));
            for by in 0..rows / h {
                for bx in 0..cols / w {
                    let mut c = Vec::with_capacity(h * w);
                    for i in 0..h {
                        let row = start + (by * h + i) * cols + bx * w;
                        c.extend(row..row + w);
                    }
                    out.push(c);
                }
            }
            out
        }
        None => {
            let len = tensor.range.len();
            if len == 0 {
                return Vec::new();
            }
            let side = chunk_side(len, target);
            (0..len / side)
                .map(|k| (start + k * side..start + (k + 1) * side).collect())
                .collect()
        }
    }
}

/// Chunked top-k, optionally quantized: SparseLoCo's compressor.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChunkedTopK {
    /// The target chunk side (the reference's `chunk_size`).
    pub chunk: usize,
    /// Values kept per chunk; `None` keeps every value and sends no positions (MuLoCo's
    /// quantization alone).
    pub top_k: Option<usize>,
    /// Bits per kept value (1, 2, 4 or 8), or `None` for the network's dtype.
    pub bits: Option<u32>,
    /// The quantizer's range in standard deviations (the reference's `quantization_range`).
    pub range_sigmas: f64,
}

impl ChunkedTopK {
    /// Bins of the quantizer, `2^bits`.
    fn bins(&self) -> Option<usize> {
        self.bits.map(|b| 1usize << b)
    }

    /// Values kept of `tensor`: `min(k, chunk size)` per chunk, or all of them.
    pub fn kept(&self, tensor: &Tensor) -> usize {
        match self.top_k {
            Some(k) => chunks(tensor, self.chunk)
                .iter()
                .map(|c| c.len().min(k))
                .sum(),
            None => tensor.range.len(),
        }
    }

    /// Bytes of one worker's message for `tensors`, with `value_bytes` per unquantized value.
    pub fn payload_bytes(&self, tensors: &[Tensor], value_bytes: u64) -> u64 {
        tensors
            .iter()
            .map(|t| {
                let kept = self.kept(t) as u64;
                if kept == 0 {
                    return 0;
                }
                let positions = if self.top_k.is_some() { 2 * kept } else { 0 };
                let values = match (self.bits, self.bins()) {
                    (Some(bits), Some(bins)) => {
                        (kept * u64::from(bits)).div_ceil(8) + 4 * (1 + bins as u64)
                    }
                    _ => kept * value_bytes,
                };
                positions + values
            })
            .sum()
    }

    /// The message of `x` over `tensors`: `x` with every value not kept set to 0 and the kept
    /// ones as the receiver decodes them (quantized when `bits` is set). Coordinates outside
    /// every tensor are 0.
    pub fn compress(&self, x: &[f64], tensors: &[Tensor]) -> Vec<f64> {
        let mut out = vec![0.0; x.len()];
        for t in tensors {
            let kept: Vec<usize> = match self.top_k {
                None => t.range.clone().collect(),
                Some(k) => {
                    let mut kept = Vec::new();
                    for mut order in chunks(t, self.chunk) {
                        // Largest magnitude first; ties to the lower coordinate.
                        top(&mut order, k, |&a, &b| {
                            x[b].abs().total_cmp(&x[a].abs()).then(a.cmp(&b))
                        });
                        kept.extend(order);
                    }
                    kept
                }
            };
            let values: Vec<f64> = kept.iter().map(|&i| x[i]).collect();
            let decoded = match self.bins() {
                Some(bins) => quantize(&values, bins, self.range_sigmas),
                None => values,
            };
            for (&i, v) in kept.iter().zip(decoded) {
                out[i] = v;
            }
        }
        out
    }
}

/// Keeps the `k` first of `items` under `order` (a strict total order), in increasing value:
/// a selection in `O(len)` rather than a sort, with the same result (the `k` first are one set
/// under a total order).
pub fn top<T: Ord + Copy>(
    items: &mut Vec<T>,
    k: usize,
    order: impl FnMut(&T, &T) -> std::cmp::Ordering,
) {
    if k == 0 {
        items.clear();
    } else if k < items.len() {
        items.select_nth_unstable_by(k - 1, order);
        items.truncate(k);
    }
    items.sort_unstable();
}

/// The reference's statistical quantizer: the values as decoded after quantizing them to
/// `bins` bins over `range_sigmas` standard deviations around their mean.
pub fn quantize(values: &[f64], bins: usize, range_sigmas: f64) -> Vec<f64> {
    let n = values.len();
    if n == 0 {
        return Vec::new();
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let centred: Vec<f64> = values.iter().map(|v| v - mean).collect();
    let std = if n <= 1 {
        0.0
    } else {
        (centred.iter().map(|c| c * c).sum::<f64>() / (n - 1) as f64).sqrt()
    };
    let mut scale = range_sigmas * std / bins as f64;
    if scale == 0.0 || !scale.is_finite() {
        scale = 1.0;
    }
    let offset = (bins / 2) as f64;
    let bin: Vec<usize> = centred
        .iter()
        .map(|c| {
            (c / scale + offset)
                .round_ties_even()
                .clamp(0.0, (bins - 1) as f64) as usize
        })
        .collect();
    let mut sums = vec![0.0; bins];
    let mut counts = vec![0usize; bins];
    for (&b, &c) in bin.iter().zip(&centred) {
        sums[b] += c;
        counts[b] += 1;
    }
    let lookup: Vec<f64> = sums
        .iter()
        .zip(&counts)
        .map(|(s, &k)| if k > 0 { s / k as f64 } else { 0.0 })
        .collect();
    bin.iter().map(|&b| lookup[b] + mean).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(start: usize, rows: usize, cols: usize) -> Tensor {
        Tensor {
            range: start..start + rows * cols,
            matrix: Some((rows, cols)),
        }
    }

    #[test]
    fn chunk_sides_are_the_largest_divisors_under_the_target() {
        assert_eq!(chunk_side(256, 64), 64);
        assert_eq!(chunk_side(100, 64), 50);
        assert_eq!(chunk_side(65, 64), 13);
        assert_eq!(chunk_side(67, 64), 1, "a prime: chunks of one");
        assert_eq!(chunk_side(10, 64), 10);
    }

    #[test]
    fn a_matrix_is_cut_into_blocks_read_row_by_row() {
        // 4 × 6 with target 2 and 3: blocks 2 × 3 (target 3 gives 3 for 6, 2 for 4).
        let t = matrix(10, 4, 6);
        let c = chunks(&t, 3);
        assert_eq!(c.len(), 4, "4/2 × 6/3 blocks");
        assert_eq!(c[0], vec![10, 11, 12, 16, 17, 18]);
        assert_eq!(c[1], vec![13, 14, 15, 19, 20, 21]);
        assert_eq!(c[3], vec![25, 26, 27, 31, 32, 33]);
        // Every coordinate in exactly one chunk.
        let mut all: Vec<usize> = c.concat();
        all.sort_unstable();
        assert_eq!(all, (10..34).collect::<Vec<_>>());
    }

    #[test]
    fn top_k_keeps_the_largest_of_each_chunk_and_counts_its_bytes() {
        let t = Tensor {
            range: 0..8,
            matrix: None,
        };
        let c = ChunkedTopK {
            chunk: 4,
            top_k: Some(2),
            bits: None,
            range_sigmas: 6.0,
        };
        let x = [0.1, -3.0, 2.0, 0.5, 1.0, 1.0, -1.0, 0.0];
        // Chunk 1: -3 and 2; chunk 2: a tie of three at 1 in magnitude, the first two kept.
        assert_eq!(
            c.compress(&x, std::slice::from_ref(&t)),
            vec![0.0, -3.0, 2.0, 0.0, 1.0, 1.0, 0.0, 0.0]
        );
        assert_eq!(c.kept(&t), 4);
        assert_eq!(c.payload_bytes(std::slice::from_ref(&t), 4), 4 * 2 + 4 * 4);
        let two = ChunkedTopK { bits: Some(2), ..c };
        // 4 values of 2 bits: 1 byte, plus the mean and 4 lookup values as f32.
        assert_eq!(two.payload_bytes(&[t], 4), 4 * 2 + 1 + 4 * 5);
    }

    #[test]
    fn quantization_sends_bin_means_and_keeps_the_mean() {
        let v = [1.0, 2.0, 3.0, 4.0, 100.0];
        let q = quantize(&v, 4, 6.0);
        let mean = |x: &[f64]| x.iter().sum::<f64>() / x.len() as f64;
        assert!(
            (mean(&q) - mean(&v)).abs() < 1e-12,
            "bin means preserve the sum"
        );
        // The four small values share a bin, the outlier has its own.
        assert_eq!(q[0], q[3]);
        assert!((q[4] - 100.0).abs() < 1e-12);
        assert!((q[0] - 2.5).abs() < 1e-12);
        // One value, or all equal: the value itself.
        assert_eq!(quantize(&[7.5], 4, 6.0), vec![7.5]);
        assert_eq!(quantize(&[2.0, 2.0], 4, 6.0), vec![2.0, 2.0]);
    }

    #[test]
    fn without_top_k_every_value_is_quantized_and_no_position_is_sent() {
        let t = Tensor {
            range: 0..8,
            matrix: None,
        };
        let c = ChunkedTopK {
            chunk: 4,
            top_k: None,
            bits: Some(2),
            range_sigmas: 6.0,
        };
        let x = [0.1, -3.0, 2.0, 0.5, 1.0, 1.0, -1.0, 0.0];
        let sent = c.compress(&x, std::slice::from_ref(&t));
        assert_eq!(
            sent,
            quantize(&x, 4, 6.0),
            "one quantizer over the whole tensor"
        );
        assert_eq!(c.kept(&t), 8);
        // 8 values of 2 bits: 2 bytes, plus the mean and 4 lookup values as f32.
        assert_eq!(c.payload_bytes(std::slice::from_ref(&t), 4), 2 + 4 * 5);
        let plain = ChunkedTopK { bits: None, ..c };
        assert_eq!(plain.compress(&x, std::slice::from_ref(&t)), x.to_vec());
        assert_eq!(plain.payload_bytes(&[t], 4), 8 * 4);
    }

    #[test]
    fn selection_keeps_what_a_sort_keeps_ties_included() {
        let x: [f64; 9] = [0.5, -2.0, 2.0, 0.0, -0.5, 2.0, 1.0, -1.0, 0.5];
        let order = |a: &usize, b: &usize| x[*b].abs().total_cmp(&x[*a].abs()).then(a.cmp(b));
        for k in 0..=x.len() + 1 {
            let mut sorted: Vec<usize> = (0..x.len()).collect();
            sorted.sort_by(order);
            sorted.truncate(k);
            sorted.sort_unstable();
            let mut selected: Vec<usize> = (0..x.len()).collect();
            top(&mut selected, k, order);
            assert_eq!(selected, sorted, "k = {k}");
        }
    }
}
