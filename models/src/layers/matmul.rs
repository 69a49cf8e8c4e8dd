//! Matrix products on views into flat buffers, for the CPU programs that work on row-major
//! activations (the transformer's): a view names where a matrix starts in a slice and its row
//! and column strides, so a transpose, a head's columns of `qkv` or one window's rows are views
//! of the same buffer, never copies.
//!
//! The products are gemm's (the kernels flex itself runs, AVX-512 where the CPU has it). A pass
//! that spreads its layers over the threads ([`super::par`]) lets gemm split a product over
//! them too: gemm cuts the output into blocks and keeps the depth loop whole, so the bits are
//! the same on one thread or many.

use super::par;

/// A `rows × cols` matrix inside a slice: element `(i, j)` at `at + i·rs + j·cs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct View {
    /// Where element `(0, 0)` is.
    pub at: usize,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Floats from a row to the next.
    pub rs: usize,
    /// Floats from a column to the next.
    pub cs: usize,
}

impl View {
    /// A row-major `rows × cols` matrix at `at`, its rows `stride` floats apart.
    pub fn rows(at: usize, rows: usize, cols: usize, stride: usize) -> View {
        View {
            at,
            rows,
            cols,
            rs: stride,
            cs: 1,
        }
    }

    /// A dense row-major `rows × cols` matrix at `at`.
    pub fn dense(at: usize, rows: usize, cols: usize) -> View {
        View::rows(at, rows, cols, cols)
    }

    /// The transpose (the same floats).
    pub fn t(self) -> View {
        View {
            at: self.at,
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
        }
    }

    /// One past the last float the view reaches.
    fn end(&self) -> usize {
        if self.rows == 0 || self.cols == 0 {
            return self.at;
        }
        self.at + (self.rows - 1) * self.rs + (self.cols - 1) * self.cs + 1
    }
}

/// Products of fewer multiply-adds than this stay on one thread even where the pass spreads its
/// layers: gemm's own threshold is for its largest products, and a small product split over
/// threads costs more in hand-offs than it saves.
const SPLIT_MIN_MACS: usize = 1 << 18;

/// `dst = scale · lhs · rhs`, or `dst += scale · lhs · rhs` with `accumulate`.
///
/// # Panics
/// If the shapes do not chain, a view reaches outside its slice, or `dst`'s view has a zero
/// stride (it would write one float twice).
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul(
    dst: &mut [f32],
    d: View,
    lhs: &[f32],
    a: View,
    rhs: &[f32],
    b: View,
    scale: f32,
    accumulate: bool,
) {
    assert!(
        d.rows == a.rows && d.cols == b.cols && a.cols == b.rows,
        "a product of {}×{} and {}×{} into {}×{}",
        a.rows,
        a.cols,
        b.rows,
        b.cols,
        d.rows,
        d.cols
    );
    assert!(
        d.end() <= dst.len() && a.end() <= lhs.len() && b.end() <= rhs.len(),
        "a matrix view reaches outside its buffer"
    );
    assert!(
        (d.rows <= 1 || d.rs > 0) && (d.cols <= 1 || d.cs > 0),
        "the destination's strides overlap"
    );
    if d.rows == 0 || d.cols == 0 {
        return;
    }
    if a.cols == 0 {
        if !accumulate {
            for i in 0..d.rows {
                for j in 0..d.cols {
                    dst[d.at + i * d.rs + j * d.cs] = 0.0;
                }
            }
        }
        return;
    }
    let macs = d.rows * d.cols * a.cols;
    let parallelism = if macs >= SPLIT_MIN_MACS && par::spreads() {
        gemm::Parallelism::Rayon(0)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: every element the views reach lies inside its slice (checked above), `dst` is a
    // `&mut` borrow and so overlaps neither input, and its strides write each element once.
    unsafe {
        gemm::gemm(
            d.rows,
            d.cols,
            a.cols,
            dst.as_mut_ptr().add(d.at),
            d.cs as isize,
            d.rs as isize,
            accumulate,
            lhs.as_ptr().add(a.at),
            a.cs as isize,
            a.rs as isize,
            rhs.as_ptr().add(b.at),
            b.cs as isize,
            b.rs as isize,
            1.0,
            scale,
            false,
            false,
            false,
            parallelism,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[f32], av: View, b: &[f32], bv: View) -> Vec<f32> {
        let mut out = vec![0.0; av.rows * bv.cols];
        for i in 0..av.rows {
            for j in 0..bv.cols {
                for k in 0..av.cols {
                    out[i * bv.cols + j] +=
                        a[av.at + i * av.rs + k * av.cs] * b[bv.at + k * bv.rs + j * bv.cs];
                }
            }
        }
        out
    }

    #[test]
    fn views_transpose_and_offset_without_copies() {
        let a: Vec<f32> = (0..40).map(|v| (v % 7) as f32 - 3.0).collect();
        let b: Vec<f32> = (0..48).map(|v| (v % 5) as f32 * 0.5).collect();
        // A 3×4 block of a 5×8 matrix at row 1, column 2, times the transpose of a 4×6 block.
        let av = View::rows(8 + 2, 3, 4, 8);
        let bv = View::rows(3, 6, 4, 7).t();
        let want = naive(&a, av, &b, bv);
        let mut out = vec![9.0; 3 * 6 + 2];
        matmul(&mut out, View::dense(2, 3, 6), &a, av, &b, bv, 1.0, false);
        assert_eq!(&out[..2], &[9.0, 9.0]);
        for (x, y) in out[2..].iter().zip(&want) {
            assert!((x - y).abs() < 1e-5, "{x} vs {y}");
        }
        matmul(&mut out, View::dense(2, 3, 6), &a, av, &b, bv, -2.0, true);
        for (x, y) in out[2..].iter().zip(&want) {
            assert!((x + y).abs() < 1e-5, "{x} vs {}", -y);
        }
    }

    #[test]
    #[should_panic(expected = "outside its buffer")]
    fn a_view_past_its_buffer_is_refused() {
        let a = vec![0.0; 11];
        let mut out = vec![0.0; 9];
        matmul(
            &mut out,
            View::dense(0, 3, 3),
            &a,
            View::dense(0, 3, 4),
            &a,
            View::dense(0, 4, 3),
            1.0,
            false,
        );
    }
}
