//! The gradient pass through burn's autodiff: the stacked snapshots and minibatches of a
//! flush, the losses, and one backward pass (the path on a GPU, and the reference on the CPU).

use super::*;

impl BurnStore {
    /// `weight` times the gradient of the sum of `chunk`'s losses, all its requests read from
    /// the first one's snapshot: one model on the chunk's `R · batch` samples. Read back as
    /// one row of blocks, with the `R` requests' own losses.
    pub(super) fn fused_gradient(&self, chunk: &[Pending], weight: f64) -> (ReadBack, Vec<f32>) {
        let r = chunk.len();
        let (indices, features) = self.requests_batches(chunk);
        let blocks = self.block_tensors(&[(&chunk[0].snapshot[..], chunk[0].scale)]);
        let (x, y) = self.minibatches(r, &indices, features);
        let [_, b, dim] = x.dims();
        let leaves: Vec<Tensor<2>> = blocks
            .iter()
            .map(|t| t.clone().autodiff().require_grad())
            .collect();
        let x = x.reshape([1, r * b, dim]).autodiff();
        let (out, state) = self.model.forward_blocks(leaves.clone(), x, true);
        debug_assert!(state.is_none(), "a per-sample model has no state");
        let [_, _, outputs] = out.dims();
        let mut losses = Self::data_loss(out.reshape([r, b, outputs]), y.autodiff());
        losses = self.with_l2(losses, &leaves);
        let grads = losses.clone().sum().mul_scalar(weight).backward();
        let parts = leaves
            .iter()
            .zip(self.model.blocks())
            .map(|(leaf, range)| {
                let g = leaf
                    .grad(&grads)
                    .unwrap_or_else(|| Tensor::zeros([1, range.len()], &self.device));
                (range, g)
            })
            .collect();
        Self::read_gradients(parts, losses.without_autodiff())
    }

    /// `losses` `[R]` plus the L2 term `½·l2·‖θ‖²` of each model, whose parameter blocks are
    /// `leaves` (`[R, len]` each, or `[1, len]`: one model for all `R` losses), when the model
    /// has one.
    pub(super) fn with_l2(&self, losses: Tensor<1>, leaves: &[Tensor<2>]) -> Tensor<1> {
        let l2 = self.model.l2();
        if l2 == 0.0 {
            return losses;
        }
        let trainable = self.model.trainable();
        let sq = leaves
            .iter()
            .zip(self.model.blocks())
            .filter(|(_, b)| b.end <= trainable.end)
            .map(|(leaf, _)| leaf.clone().square().sum_dim(1))
            .reduce(|a, b| a + b)
            .expect("a model with an l2 term has trainable blocks");
        let [rows, _] = sq.dims();
        let sq = sq.reshape([rows]).mul_scalar(0.5 * l2);
        let r = losses.dims()[0];
        losses + if rows == r { sq } else { sq.repeat_dim(0, r) }
    }

    /// Rows, each read at its scale, as one tensor `[R, len]` per block of the model's
    /// [`Model::blocks`], each gathered contiguous on the host and uploaded once. (Uploading
    /// `[R, P]` and slicing it on the device cost two more passes over the rows: the stacking,
    /// and the copy that makes each strided slice contiguous for its matrix product.)
    pub(super) fn block_tensors(&self, rows: &[(&[f32], f64)]) -> Vec<Tensor<2>> {
        let r = rows.len();
        self.model
            .blocks()
            .into_iter()
            .map(|b| {
                let mut block = Vec::with_capacity(r * b.len());
                for &(row, scale) in rows {
                    if scale == 1.0 {
                        block.extend_from_slice(&row[b.clone()]);
                    } else {
                        let s = scale as f32;
                        block.extend(row[b.clone()].iter().map(|&x| x * s));
                    }
                }
                Tensor::from_data(TensorData::new(block, [r, b.len()]), &self.device)
            })
            .collect()
    }

    /// Minibatch inputs `[R, B, dim]` and targets for `R·B` training indices: gathered on the
    /// device, or uploaded from `features` (host-built, augmented) when given.
    pub(super) fn minibatches(
        &self,
        r: usize,
        indices: &[usize],
        features: Option<Vec<f32>>,
    ) -> (Tensor<3>, BatchTargets) {
        let b = indices.len() / r;
        let train = self.train.device();
        if train.windows.is_some() {
            debug_assert!(features.is_none(), "a text is not augmented");
            return train.windows(indices.iter().copied(), r, b);
        }
        let idx: Vec<i64> = indices.iter().map(|&i| i as i64).collect();
        let idx: Tensor<1, Int> = Tensor::from_data(TensorData::new(idx, [r * b]), &self.device);
        let x = match features {
            Some(f) => Tensor::from_data(TensorData::new(f, [r, b, self.dim]), &self.device),
            None => self
                .train
                .device()
                .x
                .clone()
                .select(0, idx.clone())
                .reshape([r, b, self.dim]),
        };
        (x, self.train.device().select(idx, r, b))
    }

    /// The objective of each of `R` models on its own minibatch, `[R]` (mean loss plus the L2
    /// term), and with `train` the models' updated state `[R, S]` if they have one.
    pub(super) fn losses(
        &self,
        params: Tensor<2>,
        x: Tensor<3>,
        y: BatchTargets,
        train: bool,
    ) -> (Tensor<1>, Option<Tensor<2>>) {
        let (out, state) = self.model.forward(params.clone(), x, train);
        let mut loss = Self::data_loss(out, y);
        let l2 = self.model.l2();
        if l2 > 0.0 {
            let r = params.dims()[0];
            let sq = params
                .slice_dim(1, self.model.trainable())
                .square()
                .sum_dim(1)
                .reshape([r]);
            loss = loss + sq.mul_scalar(0.5 * l2);
        }
        (loss, state)
    }

    /// Mean loss of each of `R` models on its own minibatch, from its outputs `[R, B, outputs]`:
    /// softmax cross-entropy on class labels, `½·(ŷ − y)²` on real targets.
    pub(super) fn data_loss(out: Tensor<3>, y: BatchTargets) -> Tensor<1> {
        let [r, b, _] = out.dims();
        let data = match y {
            BatchTargets::Classes(y) => activation::log_softmax(out, 2)
                .gather(2, y)
                .neg()
                .sum_dim(1)
                .reshape([r]),
            BatchTargets::Real(y) => (out.reshape([r, b]) - y)
                .square()
                .sum_dim(1)
                .reshape([r])
                .mul_scalar(0.5),
        };
        data.div_scalar(b as f64)
    }

    /// Gradients `[R, params]` and losses `[R]` of `R` models (rows of `params`), model `r` on
    /// the `r`-th block of `indices.len() / R` training samples: one forward and one backward
    /// pass on the autodiff device. On the state suffix the gradient holds the state delta.
    /// Both results are plain (non-autodiff) tensors.
    pub(super) fn batched_gradient(
        &self,
        blocks: Vec<Tensor<2>>,
        indices: &[usize],
        features: Option<Vec<f32>>,
    ) -> (Vec<(Range<usize>, Tensor<2>)>, Tensor<1>) {
        let r = blocks[0].dims()[0];
        let (x, y) = self.minibatches(r, indices, features);
        // One autodiff leaf per parameter block rather than slices of one `[R, P]` leaf: the
        // backward pass of every slice would write and sum a zero-filled `[R, P]` buffer. The
        // gradient is the same, block for block.
        let ranges = self.model.blocks();
        debug_assert_eq!(ranges.len(), blocks.len(), "one tensor per parameter block");
        let leaves: Vec<Tensor<2>> = blocks
            .iter()
            .map(|b| b.clone().autodiff().require_grad())
            .collect();
        let (out, state) = self
            .model
            .forward_blocks(leaves.clone(), x.autodiff(), true);
        let mut losses = Self::data_loss(out, y.autodiff());
        losses = self.with_l2(losses, &leaves);
        let grads = losses.clone().sum().backward();
        let parts: Vec<Tensor<2>> = leaves
            .iter()
            .zip(&ranges)
            .map(|(leaf, b)| {
                // A block the pass does not read (running statistics in training mode) has no
                // gradient.
                leaf.grad(&grads)
                    .unwrap_or_else(|| Tensor::zeros([r, b.len()], &self.device))
            })
            .collect();
        let mut parts: Vec<(Range<usize>, Tensor<2>)> = ranges.iter().cloned().zip(parts).collect();
        if let Some(state) = state {
            // The running statistics' part is the change of the state, not a gradient.
            let p = self.model.num_params();
            let s = self.model.state_len();
            parts.retain(|(b, _)| b.end <= p - s);
            debug_assert_eq!(parts.last().map_or(0, |(b, _)| b.end), p - s);
            // The state's blocks tile `P − S..P`, in order.
            let state_blocks: Vec<Tensor<2>> = ranges
                .iter()
                .zip(blocks)
                .filter(|(b, _)| b.start >= p - s)
                .map(|(_, t)| t)
                .collect();
            let old = Tensor::cat(state_blocks, 1);
            parts.push((p - s..p, state.without_autodiff() - old));
        }
        (parts, losses.without_autodiff())
    }
}
