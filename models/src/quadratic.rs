//! The synthetic quadratic, run on the exact reference store of `dasim-sim`.
//!
//! `kind = "quadratic"` is `f(x) = ½ Σ_k a_k (x_k − 1)²` with curvatures `a_k` spread
//! geometrically over `[1, condition]` (so the condition number is exactly `condition`), whose
//! stochastic gradient adds Gaussian noise of standard deviation `noise` to every coordinate,
//! drawn from the worker's data stream (Data, `i`). It reads no data, so there is nothing to put
//! on a device: it runs on [`dasim_sim::store::reference::ReferenceStore`], in `f64`, and every number
//! is exact and backend-independent. Replicas start at `x = 0`, the optimum is `x* = 1` with
//! `f* = 0`, so the reported loss of the average model is its suboptimality. A minibatch is one
//! noisy gradient, and an "epoch" is the reference store's nominal 1,000 of them.

use std::ops::Range;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use dasim_sim::ConfigError;
use dasim_sim::store::reference::{Quadratic, ReferenceStore};
use dasim_sim::store::{Evaluation, GradId, MsgId, OptimizerConfig, ReplicaStore, Slot};

use crate::convex::Objective;
use crate::data::{DataConfig, Dataset, Split};
use crate::spec::{Load, Model, ModelSpec, QuadraticShape};
use crate::store::{RunStore, StoreStats};

/// Default dimension of the synthetic quadratic.
pub const DEFAULT_QUADRATIC_DIM: usize = 100;
/// Default condition number of the synthetic quadratic.
pub const DEFAULT_QUADRATIC_CONDITION: f64 = 10.0;
/// Default gradient-noise standard deviation of the synthetic quadratic.
pub const DEFAULT_QUADRATIC_NOISE: f64 = 0.1;

fn default_dim() -> usize {
    DEFAULT_QUADRATIC_DIM
}

fn default_condition() -> f64 {
    DEFAULT_QUADRATIC_CONDITION
}

fn default_noise() -> f64 {
    DEFAULT_QUADRATIC_NOISE
}

/// `[model] kind = "quadratic"`: the synthetic quadratic `½ Σ_k a_k (x_k − 1)²` with
/// curvatures spread geometrically over `[1, condition]` and Gaussian gradient noise; reads no
/// data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuadraticConfig {
    /// Number of parameters.
    #[serde(default = "default_dim")]
    pub dim: usize,
    /// Condition number `max a_k / min a_k ≥ 1`.
    #[serde(default = "default_condition")]
    pub condition: f64,
    /// Standard deviation σ of the noise added to every gradient coordinate.
    #[serde(default = "default_noise")]
    pub noise: f64,
}

impl Default for QuadraticConfig {
    fn default() -> Self {
        QuadraticConfig {
            dim: default_dim(),
            condition: default_condition(),
            noise: default_noise(),
        }
    }
}

impl ModelSpec for QuadraticConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let QuadraticConfig {
            dim,
            condition,
            noise,
        } = *self;
        if dim == 0 {
            return Err(ConfigError::new("model.dim", "dim must be at least 1"));
        }
        if !(condition.is_finite() && condition >= 1.0) {
            return Err(ConfigError::new(
                "model.condition",
                format!("the condition number must be at least 1, got {condition}"),
            ));
        }
        if !(noise.is_finite() && noise >= 0.0) {
            return Err(ConfigError::new(
                "model.noise",
                format!("noise must be zero or positive, got {noise}"),
            ));
        }
        Ok(())
    }

    /// No data: an error at `data` where `[data]` sets anything.
    fn load(&self, load: &Load<'_>) -> crate::Result<Option<Split>> {
        if load.data.resolved() != DataConfig::default().resolved() {
            return Err(ConfigError::new(
                "data",
                "the quadratic model reads no data: its gradient noise comes from each worker's data stream",
            )
            .hint("remove the [data] section (batch size, dataset and partition do not apply)")
            .into());
        }
        Ok(None)
    }

    fn build(
        &self,
        _load: &Load<'_>,
        _train: &Dataset,
    ) -> crate::Result<(Model, Option<Arc<Objective>>)> {
        let shape = QuadraticShape {
            dim: self.dim,
            condition: self.condition,
            noise: self.noise,
        };
        Ok((Model::Quadratic(shape), None))
    }

    fn accuracy(&self) -> Option<bool> {
        Some(false)
    }

    /// `f* = 0`, at `x* = 1`.
    fn optimum(&self) -> Option<bool> {
        Some(true)
    }

    fn reads_data(&self) -> bool {
        false
    }
}

/// The reference store of a quadratic, with the counters a run reports.
pub struct QuadraticStore {
    inner: ReferenceStore,
    stats: StoreStats,
}

impl QuadraticStore {
    /// `workers` replicas of the quadratic `shape`, all at zero.
    pub fn new(
        shape: QuadraticShape,
        workers: usize,
        optimizer: OptimizerConfig,
        seed: u64,
    ) -> Self {
        QuadraticStore {
            inner: ReferenceStore::new(
                Quadratic::new(shape.dim, shape.condition, shape.noise),
                workers,
                optimizer,
                seed,
            ),
            stats: StoreStats::default(),
        }
    }

    /// The exact store underneath.
    pub fn inner(&self) -> &ReferenceStore {
        &self.inner
    }
}

impl RunStore for QuadraticStore {
    fn stats(&self) -> StoreStats {
        self.stats
    }
}

impl ReplicaStore for QuadraticStore {
    fn workers(&self) -> usize {
        self.inner.workers()
    }

    fn rows(&self) -> usize {
        self.inner.rows()
    }

    fn num_params(&self) -> usize {
        self.inner.num_params()
    }

    fn batch_size(&self) -> usize {
        self.inner.batch_size()
    }

    fn train_size(&self) -> usize {
        self.inner.train_size()
    }

    fn layers(&self) -> Vec<dasim_sim::store::Layer> {
        self.inner.layers()
    }

    fn add_rows(&mut self, count: usize) -> usize {
        self.inner.add_rows(count)
    }

    fn msg_values(&mut self, msg: MsgId) -> Vec<f64> {
        self.inner.msg_values(msg)
    }

    fn msg_from_values(&mut self, values: &[f64]) -> MsgId {
        self.inner.msg_from_values(values)
    }

    fn gradient_values(&mut self, grad: GradId) -> Vec<f64> {
        self.inner.gradient_values(grad)
    }

    fn set_gradient_values(&mut self, grad: GradId, values: &[f64]) {
        self.inner.set_gradient_values(grad, values)
    }

    fn request_gradient_scaled(&mut self, worker: usize, scale: f64) -> GradId {
        // Eager: every request is its own "pass".
        self.stats.requests += 1;
        self.stats.flushes += 1;
        self.stats.passes += 1;
        self.inner.request_gradient_scaled(worker, scale)
    }

    fn mean_gradient(&mut self, grads: &[GradId]) -> GradId {
        self.inner.mean_gradient(grads)
    }

    fn apply_gradient_block(&mut self, row: usize, grad: GradId, lr: f64, block: Range<usize>) {
        self.inner.apply_gradient_block(row, grad, lr, block);
    }

    fn release_gradient(&mut self, grad: GradId) {
        self.inner.release_gradient(grad);
    }

    fn swap_optimizer_state(&mut self, a: usize, b: usize) {
        self.inner.swap_optimizer_state(a, b);
    }

    fn reset_optimizer_state(&mut self, row: usize) {
        self.inner.reset_optimizer_state(row);
    }

    fn average(&mut self, rows: &[usize]) {
        self.inner.average(rows);
    }

    fn mix(&mut self, dst: usize, terms: &[(Slot, f64)]) {
        self.inner.mix(dst, terms);
    }

    fn new_msg(&mut self, terms: &[(Slot, f64)]) -> MsgId {
        self.inner.new_msg(terms)
    }

    fn release_msg(&mut self, msg: MsgId) {
        self.inner.release_msg(msg);
    }

    fn copy_block(&mut self, dst: usize, src: usize, block: Range<usize>) {
        self.inner.copy_block(dst, src, block);
    }

    fn evaluate(&mut self) -> Evaluation {
        self.stats.evaluations += 1;
        self.inner.evaluate()
    }

    fn evaluate_mix(&mut self, terms: &[(usize, f64)]) -> Evaluation {
        self.stats.evaluations += 1;
        self.inner.evaluate_mix(terms)
    }

    fn take_train_loss(&mut self) -> f64 {
        self.inner.take_train_loss()
    }

    fn consensus_distance(&mut self, scales: Option<&[f64]>) -> f64 {
        self.inner.consensus_distance(scales)
    }

    fn evaluate_rows(&mut self, rows: &[usize], scales: Option<&[f64]>) -> Vec<Evaluation> {
        self.stats.evaluations += rows.len() as u64;
        self.inner.evaluate_rows(rows, scales)
    }

    fn suboptimality(&mut self, terms: Option<&[(usize, f64)]>) -> Option<f64> {
        // f* = 0 at x* = 1: the objective is the suboptimality.
        self.inner.suboptimality(terms)
    }

    fn save_state(&mut self) -> Result<Vec<u8>, String> {
        let state = (self.stats, self.inner.save_state()?);
        postcard::to_stdvec(&state).map_err(|e| e.to_string())
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), String> {
        let (stats, inner): (StoreStats, Vec<u8>) =
            postcard::from_bytes(state).map_err(|e| e.to_string())?;
        self.inner.restore_state(&inner)?;
        self.stats = stats;
        Ok(())
    }
}
