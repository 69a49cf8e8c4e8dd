//! The replica store: the one seam between the engine and the numbers.
//!
//! Algorithms never touch parameters directly. They speak this small language — read a replica
//! and request a gradient on what was read, apply a gradient, mix replicas and message buffers,
//! evaluate — and a store answers it. `dasim-models` implements it on burn tensors (all rows
//! stacked in one `[rows, params]` tensor, gradients evaluated lazily in batches);
//! [`crate::store::reference`] implements it exactly on `f64` vectors with an analytic objective, for
//! tests of algorithm semantics.
//!
//! # What a store holds
//!
//! - **Rows.** `rows()` parameter vectors of `num_params()` each, every one with its own
//!   optimizer state (SGD's or LARS's momentum buffer, Adam's moments and step counts). Rows `0..workers()` are the workers'
//!   replicas; an algorithm may append more ([`ReplicaStore::add_rows`]: a parameter server's
//!   model). Every operation on rows is a row operation on a stacked `[rows, params]` tensor.
//! - **Gradients** ([`GradId`]): requested on a worker's row, used by applying them to any row.
//! - **Message buffers** ([`MsgId`]): parameter vectors that are not rows — what a worker put in a
//!   message, or a snapshot an algorithm keeps — taken at one instant as a linear combination of
//!   rows and buffers ([`ReplicaStore::new_msg`]), read by [`ReplicaStore::mix`] and `new_msg`,
//!   and freed by [`ReplicaStore::release_msg`]. They have no optimizer state.
//!
//! Handles ([`GradId`], [`MsgId`]) are never reused within a store.
//!
//! # Laziness
//!
//! [`ReplicaStore::request_gradient_scaled`] only records *what* to compute: the parameters the
//! worker holds at that instant (times a scale) and its next minibatch. A store may defer the
//! computation until a result is first used ([`ReplicaStore::apply_gradient_block`],
//! [`ReplicaStore::mean_gradient`]), and then evaluate every pending request in one batch.
//! Because requests and uses happen in event order, the batches — and so the numbers — are the
//! same on every run. Every other operation takes effect at once: later reads see it.
//!
//! # The optimizer step
//!
//! The store applies the `[optimizer]` section's local update; its rule is stated in
//! [`crate::store::optimizer`].

use serde::{Deserialize, Serialize};
use std::ops::Range;

/// A handle to a requested gradient. Handles are never reused within a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GradId(pub u64);

/// A handle to a message buffer. Handles are never reused within a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MsgId(pub u64);

/// What a term of a linear combination reads: a row or a message buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Slot {
    /// Row `i` (a worker's replica for `i < workers()`).
    Row(usize),
    /// A live message buffer.
    Msg(MsgId),
}

/// Loss and accuracy of a model on the held-out split.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// Mean loss (cross-entropy for classifiers, the objective for analytic problems).
    pub loss: f64,
    /// Fraction of correct predictions in `[0, 1]`; NaN where accuracy has no meaning.
    pub accuracy: f64,
}

/// A layer of the model, for cost models: where its parameters sit in a row, and the FLOPs of
/// its forward pass for one sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layer {
    /// The coordinates of its parameters in a row.
    pub params: Range<usize>,
    /// FLOPs (two per multiply-add) of its forward pass, for one sample.
    pub forward_flops: u64,
}

/// A weight matrix inside a row, for low-rank compressors ([`crate::compress::PowerSgd`]): the
/// coordinates `start..start + rows·cols`, row-major. A convolution's weight `[cout, cin, k, k]`
/// is the matrix `cout × (cin·k²)`, as PowerSGD's reference code reshapes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Matrix {
    /// Its first coordinate in a row.
    pub start: usize,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
}

impl Matrix {
    /// Its coordinates in a row.
    pub fn range(&self) -> Range<usize> {
        self.start..self.start + self.rows * self.cols
    }
}

/// A hidden layer's weight matrix, for Muon ([`crate::store::optim::muon`]): every weight
/// matrix of the model but its embeddings and its output layer, as Muon's reference code splits
/// them. `matrix` is how it lies in a row (row-major); `fan_out` and `fan_in` are the layer's
/// output and input sizes (`fan_out · fan_in = rows · cols`), which set Muon's scale
/// `√max(1, fan_out / fan_in)` whatever the layout (a dense layer lies `fan_in × fan_out`, a
/// convolution `cout × (cin·k²)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hidden {
    /// The matrix in the row.
    pub matrix: Matrix,
    /// The layer's outputs (a dense layer's `fan_out`, a convolution's `cout`).
    pub fan_out: usize,
    /// The layer's inputs per output (a dense layer's `fan_in`, a convolution's `cin·k²`).
    pub fan_in: usize,
}

impl Hidden {
    /// A dense layer's weight, `fan_in × fan_out` in the row.
    pub fn dense(matrix: Matrix) -> Self {
        Hidden {
            matrix,
            fan_out: matrix.cols,
            fan_in: matrix.rows,
        }
    }

    /// A convolution's weight, `cout × (cin·k²)` in the row.
    pub fn conv(matrix: Matrix) -> Self {
        Hidden {
            matrix,
            fan_out: matrix.rows,
            fan_in: matrix.cols,
        }
    }
}

/// Everything an algorithm may do with parameters.
///
/// Every operation names rows by index and is a row operation on a stacked `[rows, params]`
/// tensor (plus a map of message buffers and one of gradients). "Atomically" means that every
/// source is read before any destination is written, so a destination may also be a source.
/// No operation but the optimizer step ([`ReplicaStore::apply_gradient_block`]) touches a row's
/// optimizer state.
pub trait ReplicaStore {
    /// Number of worker replicas: rows `0..workers()`, each with its own data stream.
    fn workers(&self) -> usize;
    /// Number of rows: the workers' replicas and the rows added by [`ReplicaStore::add_rows`].
    fn rows(&self) -> usize;
    /// Parameters per row.
    fn num_params(&self) -> usize;
    /// Samples in one minibatch.
    fn batch_size(&self) -> usize;
    /// Samples in the training split (defines an epoch).
    fn train_size(&self) -> usize;
    /// Whether the store computes: gradients, losses, accuracies. `false` for a store that only
    /// carries a model's size and cost through a run (`kind = "timing"`): its evaluations are
    /// NaN by design, not by divergence, and no stop rule reads them.
    fn computes(&self) -> bool {
        true
    }
    /// The model's layers in forward order (input first): where each one's parameters sit in a
    /// row and its forward FLOPs per sample. Their ranges are disjoint, in increasing order, and
    /// cover `0..num_params()`. For the cost models of steps that differentiate part of the model
    /// (LPP-SGD's partial steps); a model without layers answers one layer holding every
    /// parameter. Never used for control flow other than timing.
    fn layers(&self) -> Vec<Layer>;
    /// The state suffix of a row: coordinates that are not trained by the optimizer but updated
    /// by the training pass itself (batch normalization's running statistics), the last ones of
    /// the row, `T..num_params()`. Empty (the default, `num_params()..num_params()`) for a model
    /// without state. How a gradient moves them is stated at
    /// [`ReplicaStore::apply_gradient_block`]; mixing, averaging, messages and copies treat them
    /// like parameters.
    fn state(&self) -> Range<usize> {
        let p = self.num_params();
        p..p
    }

    /// The model's weight matrices, in row order, disjoint and inside the trainable coordinates
    /// `0..state().start`; every other coordinate (biases, normalization weights) is a vector to
    /// a low-rank compressor. Empty by default (an analytic problem has no matrices).
    fn matrices(&self) -> Vec<Matrix> {
        Vec::new()
    }

    /// The weight matrices of the model's hidden layers, in row order ([`Hidden`]): those
    /// Muon orthogonalizes, every other coordinate going to its AdamW. A subset of
    /// [`ReplicaStore::matrices`]; empty by default (an analytic problem has none).
    fn hidden_matrices(&self) -> Vec<Hidden> {
        Vec::new()
    }

    /// The model's parameter tensors in row order, as its modules hold them (each weight, bias,
    /// normalization gain and shift): disjoint, increasing, and covering the trainable
    /// coordinates `0..state().start` exactly (the running statistics are no tensor's). For
    /// compressors that work tensor by tensor, as CHOCO-SGD's reference code does
    /// ([`crate::compress::Compression::apply_to_tensors`]). Never used for control flow other
    /// than message sizes. One tensor of every trainable coordinate by default (an analytic
    /// problem is one vector).
    fn tensors(&self) -> Vec<Range<usize>> {
        std::iter::once(0..self.state().start).collect()
    }

    /// Appends `count` rows after the existing ones and returns the index of the first. Each new
    /// row is a copy of row 0's current parameters, with a zero optimizer state. Added rows have
    /// no data stream (no gradient is ever requested on them) and are not part of
    /// [`ReplicaStore::evaluate`]. Algorithms call this in `start`, when every row still holds
    /// the initial model.
    fn add_rows(&mut self, count: usize) -> usize;

    /// Reads `worker`'s row as it is now and requests the gradient of the loss at `scale ·
    /// row[worker]`, on the next minibatch of `worker`'s data stream. The loss recorded for
    /// [`ReplicaStore::take_train_loss`] is the loss at that same point. (Push-sum algorithms
    /// keep a numerator `x` in the row and a weight `w` outside the store, and evaluate the
    /// gradient at the de-biased `x / w` with `scale = 1/w`.)
    fn request_gradient_scaled(&mut self, worker: usize, scale: f64) -> GradId;
    /// [`ReplicaStore::request_gradient_scaled`] with `scale = 1`: the gradient at `worker`'s row
    /// as it is now.
    fn request_gradient(&mut self, worker: usize) -> GradId {
        self.request_gradient_scaled(worker, 1.0)
    }
    /// The mean of several gradients, as a new gradient; the inputs are released.
    fn mean_gradient(&mut self, grads: &[GradId]) -> GradId;
    /// One optimizer step on the coordinates `block` of `row` (any row, not only the worker that
    /// requested the gradient) with gradient `grad` and rate `lr`: the update of
    /// [`crate::store::optimizer`] on the coordinates of `block` (coordinate by coordinate for
    /// SGD and Adam; for LARS, per layer over the part of each layer inside `block`).
    /// Parameters and optimizer state outside `block` are unchanged. The gradient stays
    /// available (it may be applied to several rows, or block by block).
    ///
    /// **The state rule.** On the coordinates of `block` inside [`ReplicaStore::state`] there is
    /// no optimizer step: the gradient carries there the change its training pass made to the
    /// running statistics, in the units of the requesting row — `(new state) / scale − state
    /// read`, so that a row read at `scale` (push-sum's numerator `x = w·z`, read at `1/w`)
    /// gains `w` times the change of the de-biased statistics. That change is added only to a
    /// row that computed the gradient: the worker that requested it, or, for a
    /// [`ReplicaStore::mean_gradient`], the worker of any of its inputs (then the inputs' mean
    /// change is added). Applied to any other row (a DASGD broadcast, a parameter server's row),
    /// a gradient moves only the trainable coordinates: running statistics are local to the
    /// replica whose passes produced them, and reach other rows only through mixing.
    fn apply_gradient_block(&mut self, row: usize, grad: GradId, lr: f64, block: Range<usize>);
    /// One optimizer step on all of `row`: [`ReplicaStore::apply_gradient_block`] over
    /// `0..num_params()`.
    fn apply_gradient(&mut self, row: usize, grad: GradId, lr: f64) {
        let p = self.num_params();
        self.apply_gradient_block(row, grad, lr, 0..p);
    }
    /// Frees a gradient.
    fn release_gradient(&mut self, grad: GradId);
    /// Exchanges the optimizer states of rows `a` and `b` (momentum buffers, Adam's moments and
    /// step counts); their parameters stay. With it, several optimizer states can step one set
    /// of parameters: LPP-SGD's processes each keep theirs in a row of its own
    /// ([`ReplicaStore::add_rows`]) and step the node's row with it
    /// ([`ReplicaStore::apply_gradient_block_with_state`]). `a == b` changes nothing.
    fn swap_optimizer_state(&mut self, a: usize, b: usize);
    /// Zeroes `row`'s optimizer state (momentum buffers, Adam's moments and step counts), as a
    /// freshly built optimizer has it; its parameters stay. For methods whose reference code
    /// builds a new inner optimizer every round (asynchronous Local-SGD's `inner_reset`).
    fn reset_optimizer_state(&mut self, row: usize);
    /// One optimizer step on the coordinates `block` of `row`'s parameters with the optimizer
    /// state of row `state` (which takes the step's new state): as
    /// [`ReplicaStore::apply_gradient_block`] on `row`, had `row` held `state`'s optimizer state.
    /// `row`'s own state and `state`'s parameters are unchanged.
    fn apply_gradient_block_with_state(
        &mut self,
        row: usize,
        state: usize,
        grad: GradId,
        lr: f64,
        block: Range<usize>,
    ) {
        self.swap_optimizer_state(row, state);
        self.apply_gradient_block(row, grad, lr, block);
        self.swap_optimizer_state(row, state);
    }

    /// Sets every listed row to their mean, atomically.
    fn average(&mut self, rows: &[usize]);
    /// Sets row `dst` to `Σ weight · source` over `terms`, atomically (a `Slot::Row(dst)` term
    /// reads `dst` as it was). Scaling a row is `mix(i, &[(Row(i), a)])`; adding a message into
    /// a row is `mix(i, &[(Row(i), 1.0), (Msg(m), 1.0)])`. `terms` is never empty.
    fn mix(&mut self, dst: usize, terms: &[(Slot, f64)]);
    /// A new message buffer holding `Σ weight · source` over `terms`, read now (a copy of row
    /// `i` is `new_msg(&[(Row(i), 1.0)])`). `terms` is never empty.
    fn new_msg(&mut self, terms: &[(Slot, f64)]) -> MsgId;
    /// Frees a message buffer.
    fn release_msg(&mut self, msg: MsgId);
    /// Copies the coordinates `block` of row `src` into row `dst`; the rest of `dst` is
    /// unchanged.
    fn copy_block(&mut self, dst: usize, src: usize, block: Range<usize>);

    /// The values of message buffer `msg`, `num_params()` of them, on the host: what a compressor
    /// ([`crate::compress`]) reads. Stores that compute implement it; algorithms call it only
    /// when [`ReplicaStore::computes`] (a timing store carries no values).
    fn msg_values(&mut self, _msg: MsgId) -> Vec<f64> {
        panic!("this store does not read message buffers back")
    }
    /// A new message buffer holding `values` (`num_params()` of them), rounded to the store's
    /// precision: what a compressor decoded. As [`ReplicaStore::msg_values`], only when the
    /// store computes.
    fn msg_from_values(&mut self, _values: &[f64]) -> MsgId {
        panic!("this store does not write message buffers")
    }
    /// The trainable part `0..state().start` of gradient `grad`, on the host, as computed (before
    /// any `clip_norm`, which applies when the gradient is applied). Only when the store computes.
    fn gradient_values(&mut self, _grad: GradId) -> Vec<f64> {
        panic!("this store does not read gradients back")
    }
    /// Replaces the trainable part `0..state().start` of gradient `grad` by `values` (rounded to
    /// the store's precision); its state part, and which rows it belongs to, are unchanged. A
    /// compressed all-reduce puts its decoded mean here. Only when the store computes.
    fn set_gradient_values(&mut self, _grad: GradId, _values: &[f64]) {
        panic!("this store does not write gradients")
    }

    /// Loss and accuracy, on the held-out split, of the average of the worker rows
    /// `0..workers()` (added rows excluded).
    fn evaluate(&mut self) -> Evaluation;
    /// Loss and accuracy, on the held-out split, of the model `Σ weight · row` over `terms`
    /// (e.g. a parameter server's row, or push-sum's de-biased average `Σ x_i / (n·w_i)`).
    fn evaluate_mix(&mut self, terms: &[(usize, f64)]) -> Evaluation;
    /// Mean loss of the minibatches whose gradients were computed since the last call
    /// (the running training loss); NaN if none was.
    fn take_train_loss(&mut self) -> f64;

    /// The consensus distance of the worker replicas: `(1/n) Σ_i ‖s_i·x_i − z̄‖²` over the worker
    /// rows `i < n = workers()`, with `z̄ = (1/n) Σ_i s_i·x_i` and `s_i = scales[i]` (all 1 when
    /// `None`; push-sum passes `1/w_i`, so the distance is that of the de-biased `z_i`).
    fn consensus_distance(&mut self, scales: Option<&[f64]>) -> f64;

    /// Loss and accuracy, on the held-out split, of each listed row, scaled by `scales[k]` when
    /// given (the model `scales[k] · row[rows[k]]`). The default evaluates them one by one with
    /// [`ReplicaStore::evaluate_mix`].
    fn evaluate_rows(&mut self, rows: &[usize], scales: Option<&[f64]>) -> Vec<Evaluation> {
        rows.iter()
            .enumerate()
            .map(|(k, &r)| self.evaluate_mix(&[(r, scales.map_or(1.0, |s| s[k]))]))
            .collect()
    }

    /// `f(x) − f*`, the suboptimality on the training objective of the model `Σ weight · row`
    /// over `terms` (`None`: the average of the worker rows), for models that know their optimum
    /// value `f*`; `None` (the default) for the others.
    fn suboptimality(&mut self, _terms: Option<&[(usize, f64)]>) -> Option<f64> {
        None
    }

    /// The store's whole state, for a checkpoint ([`crate::engine::checkpoint`]): every row and
    /// its optimizer state, the data streams' positions, the pending gradient requests (the
    /// values they read and their minibatches), the gradients computed and not yet released,
    /// the message buffers, the handle counter, the training loss since the last read and the
    /// batching counters. What the store was built from (model, data, configuration) is not in
    /// it: [`ReplicaStore::restore_state`] restores into a store built the same way. `Err` when
    /// the store cannot be checkpointed.
    fn save_state(&mut self) -> Result<Vec<u8>, String> {
        Err("this store cannot be checkpointed".into())
    }

    /// Restores what [`ReplicaStore::save_state`] saved, into a store built as the saved one
    /// was. Afterwards every operation gives what it would have given on the saved store.
    fn restore_state(&mut self, _state: &[u8]) -> Result<(), String> {
        Err("this store cannot be checkpointed".into())
    }
}

/// Splits `0..len` into `parts` contiguous blocks whose lengths differ by at most one, the
/// longer ones first: block `b` is `[b·q + min(b, r), (b+1)·q + min(b+1, r))` with
/// `q = len / parts`, `r = len % parts`. (Parameter-server shards, LPP-SGD's blocks and
/// all-reduce buckets.)
pub fn blocks(len: usize, parts: usize) -> Vec<Range<usize>> {
    let parts = parts.max(1);
    let (q, r) = (len / parts, len % parts);
    (0..parts)
        .map(|b| b * q + b.min(r)..(b + 1) * q + (b + 1).min(r))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_the_range_in_order() {
        assert_eq!(blocks(10, 3), vec![0..4, 4..7, 7..10]);
        assert_eq!(blocks(2, 1), vec![0..2]);
        assert_eq!(blocks(5, 5).len(), 5);
    }
}
