//! Token and position embeddings of the flat layout (burn pass only).

use std::ops::Range;

use burn::tensor::{Int, Tensor};

use super::ParamRows;

/// A table of `rows` vectors of `dim` numbers (row-major) at `weight`: token `t` reads row `t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Embedding {
    /// Offset of the table.
    pub weight: usize,
    /// Rows: the vocabulary (token embedding) or the longest context (position embedding).
    pub rows: usize,
    /// Numbers per row.
    pub dim: usize,
}

impl Embedding {
    /// Parameters of the table.
    pub fn len(&self) -> usize {
        self.rows * self.dim
    }

    /// The one block the layer reads.
    pub fn block(&self) -> Range<usize> {
        self.weight..self.weight + self.len()
    }

    /// The table as a matrix `rows × dim`, for low-rank compressors.
    pub fn matrix(&self) -> dasim_sim::store::Matrix {
        dasim_sim::store::Matrix {
            start: self.weight,
            rows: self.rows,
            cols: self.dim,
        }
    }

    /// The table of every replica, `[R, rows, dim]`.
    pub fn table(&self, params: &ParamRows) -> Tensor<3> {
        let r = params.replicas();
        params
            .get(self.weight, self.len())
            .reshape([r, self.rows, self.dim])
    }

    /// Tokens `[R, N]` (replica `r`'s tokens look up replica `r`'s table) → `[R, N, dim]`: one
    /// `select` on the replicas' tables stacked as `[R·rows, dim]`, whose backward pass adds
    /// each position's gradient into the row it read.
    pub fn lookup(&self, params: &ParamRows, tokens: Tensor<2, Int>) -> Tensor<3> {
        let [r, n] = tokens.dims();
        let device = tokens.device();
        let base: Tensor<2, Int> = Tensor::<1, Int>::arange(0..r as i64, &device)
            .mul_scalar(self.rows as i64)
            .reshape([r, 1]);
        let index = (tokens + base).reshape([r * n]);
        self.table(params)
            .reshape([r * self.rows, self.dim])
            .select(0, index)
            .reshape([r, n, self.dim])
    }
}
