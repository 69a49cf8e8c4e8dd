//! The store of a timing-only run ([`crate::timing`]): it hands out handles and computes
//! nothing.

use std::ops::Range;

use dasim_sim::store::{Evaluation, GradId, Layer, MsgId, ReplicaStore, Slot};

use crate::store::{RunStore, StoreStats};
use crate::timing::TimingShape;

/// The store of a timing run: it knows how many rows and parameters there are and hands out
/// handles, and computes nothing ([`ReplicaStore::computes`] is false): every row operation is a
/// no-op and every loss NaN. Memory is independent of the parameter count.
pub struct TimingStore {
    workers: usize,
    rows: usize,
    shape: TimingShape,
    batch: usize,
    next_grad: u64,
    next_msg: u64,
    stats: StoreStats,
}

impl TimingStore {
    /// `workers` replicas of `shape`, with minibatches of `batch` samples.
    pub fn new(shape: TimingShape, workers: usize, batch: usize) -> Self {
        TimingStore {
            workers,
            rows: workers,
            shape,
            batch,
            next_grad: 0,
            next_msg: 0,
            stats: StoreStats::default(),
        }
    }

    fn nothing() -> Evaluation {
        Evaluation {
            loss: f64::NAN,
            accuracy: f64::NAN,
        }
    }
}

impl RunStore for TimingStore {
    fn stats(&self) -> StoreStats {
        self.stats
    }
}

impl ReplicaStore for TimingStore {
    fn workers(&self) -> usize {
        self.workers
    }

    fn rows(&self) -> usize {
        self.rows
    }

    fn num_params(&self) -> usize {
        usize::try_from(self.shape.params).expect("the parameter count fits the address space")
    }

    fn batch_size(&self) -> usize {
        self.batch
    }

    fn train_size(&self) -> usize {
        usize::try_from(self.shape.train_samples).unwrap_or(usize::MAX)
    }

    fn computes(&self) -> bool {
        false
    }

    fn layers(&self) -> Vec<Layer> {
        vec![Layer {
            params: 0..self.num_params(),
            forward_flops: self.shape.forward_flops,
        }]
    }

    fn add_rows(&mut self, count: usize) -> usize {
        let first = self.rows;
        self.rows += count;
        first
    }

    fn request_gradient_scaled(&mut self, _worker: usize, _scale: f64) -> GradId {
        self.stats.requests += 1;
        self.next_grad += 1;
        GradId(self.next_grad - 1)
    }

    fn mean_gradient(&mut self, _grads: &[GradId]) -> GradId {
        self.next_grad += 1;
        GradId(self.next_grad - 1)
    }

    fn apply_gradient_block(&mut self, _row: usize, _g: GradId, _lr: f64, _b: Range<usize>) {}

    fn release_gradient(&mut self, _grad: GradId) {}

    fn swap_optimizer_state(&mut self, _a: usize, _b: usize) {}

    fn reset_optimizer_state(&mut self, _row: usize) {}

    fn average(&mut self, _rows: &[usize]) {}

    fn mix(&mut self, _dst: usize, _terms: &[(Slot, f64)]) {}

    fn new_msg(&mut self, _terms: &[(Slot, f64)]) -> MsgId {
        self.next_msg += 1;
        MsgId(self.next_msg - 1)
    }

    fn release_msg(&mut self, _msg: MsgId) {}

    fn copy_block(&mut self, _dst: usize, _src: usize, _block: Range<usize>) {}

    fn evaluate(&mut self) -> Evaluation {
        Self::nothing()
    }

    fn evaluate_mix(&mut self, _terms: &[(usize, f64)]) -> Evaluation {
        Self::nothing()
    }

    fn take_train_loss(&mut self) -> f64 {
        f64::NAN
    }

    fn save_state(&mut self) -> Result<Vec<u8>, String> {
        let state = (self.rows, self.next_grad, self.next_msg, self.stats);
        postcard::to_stdvec(&state).map_err(|e| e.to_string())
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), String> {
        (self.rows, self.next_grad, self.next_msg, self.stats) =
            postcard::from_bytes(state).map_err(|e| e.to_string())?;
        Ok(())
    }

    fn consensus_distance(&mut self, _scales: Option<&[f64]>) -> f64 {
        f64::NAN
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timing::Preset;

    #[test]
    fn the_store_holds_no_parameter_and_computes_nothing() {
        let shape = TimingShape::resolve(Some(Preset::Vgg16), None, None, None).unwrap();
        let mut s = TimingStore::new(shape, 1024, 32);
        assert_eq!(s.num_params(), 138_357_544);
        assert!(!s.computes());
        assert_eq!(s.add_rows(2), 1024);
        assert_eq!(s.rows(), 1026);
        let a = s.request_gradient(3);
        let b = s.request_gradient(4);
        assert_ne!(a, b, "handles are never reused");
        assert!(s.evaluate().loss.is_nan());
        assert_eq!(s.layers()[0].params, 0..138_357_544);
        assert!(std::mem::size_of_val(&s) < 256);
    }
}
