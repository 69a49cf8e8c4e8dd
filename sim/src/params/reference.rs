//! An exact reference store: plain `f64` vectors and an analytic objective.
//!
//! The objective is a separable quadratic `f(x) = ½ Σ_k a_k (x_k − b_k)²`, whose stochastic
//! gradient adds Gaussian noise of standard deviation `σ` per coordinate, drawn from the worker's
//! data stream. Gradients are computed eagerly, in `f64`, with no batching, so tests of algorithm
//! semantics (invariants, equalities between algorithms) can compare numbers exactly.

use std::collections::BTreeMap;
use std::ops::Range;

use rand_distr::{Distribution, StandardNormal};

use crate::engine::rng::{Stream, StreamKind, stream};
use crate::params::{Evaluation, GradId, Layer, MsgId, OptimizerConfig, ReplicaStore, Slot};

/// The analytic problem of a [`ReferenceStore`].
#[derive(Clone, Debug)]
pub struct Quadratic {
    /// Curvatures `a_k > 0`.
    pub curvature: Vec<f64>,
    /// Optimum `b`.
    pub optimum: Vec<f64>,
    /// Gradient noise σ.
    pub noise: f64,
}

impl Quadratic {
    /// A `dim`-dimensional problem with curvatures spread geometrically over `[1, condition]`
    /// and optimum `b_k = 1`.
    pub fn new(dim: usize, condition: f64, noise: f64) -> Self {
        let curvature = (0..dim)
            .map(|k| {
                let t = if dim > 1 {
                    k as f64 / (dim - 1) as f64
                } else {
                    0.0
                };
                condition.powf(t)
            })
            .collect();
        Quadratic {
            curvature,
            optimum: vec![1.0; dim],
            noise,
        }
    }

    /// `f(x)`.
    pub fn value(&self, x: &[f64]) -> f64 {
        x.iter()
            .zip(&self.curvature)
            .zip(&self.optimum)
            .map(|((x, a), b)| 0.5 * a * (x - b) * (x - b))
            .sum()
    }
}

/// Replicas as `f64` vectors, for exact tests.
pub struct ReferenceStore {
    problem: Quadratic,
    optimizer: OptimizerConfig,
    workers: usize,
    params: Vec<Vec<f64>>,
    velocity: Vec<Vec<f64>>,
    data: Vec<Stream>,
    grads: BTreeMap<GradId, Vec<f64>>,
    next_grad: u64,
    msgs: BTreeMap<MsgId, Vec<f64>>,
    next_msg: u64,
    train_size: usize,
    train_loss: (f64, usize),
    layers: Vec<Layer>,
}

impl ReferenceStore {
    /// `workers` replicas, all starting at zero.
    pub fn new(problem: Quadratic, workers: usize, optimizer: OptimizerConfig, seed: u64) -> Self {
        let dim = problem.curvature.len();
        ReferenceStore {
            workers,
            params: vec![vec![0.0; dim]; workers],
            velocity: vec![vec![0.0; dim]; workers],
            data: (0..workers)
                .map(|w| stream(seed, StreamKind::Data, w as u64))
                .collect(),
            problem,
            optimizer,
            grads: BTreeMap::new(),
            next_grad: 0,
            msgs: BTreeMap::new(),
            next_msg: 0,
            train_size: 1000,
            train_loss: (0.0, 0),
            layers: vec![Layer {
                params: 0..dim,
                forward_flops: 2 * dim as u64,
            }],
        }
    }

    /// The same store, whose [`ReplicaStore::layers`] answers `layers` (by default one layer
    /// holding every coordinate, of `2·dim` FLOPs): for tests of cost models of partial steps.
    /// The layers must cover `0..dim` in order; the objective is unchanged.
    pub fn with_layers(mut self, layers: Vec<Layer>) -> Self {
        assert_eq!(
            layers.last().map(|l| l.params.end),
            Some(self.num_params()),
            "the layers cover every coordinate"
        );
        self.layers = layers;
        self
    }

    /// The analytic problem.
    pub fn problem(&self) -> &Quadratic {
        &self.problem
    }

    /// Row `row` (the replica of worker `row` for `row < workers()`).
    pub fn params(&self, row: usize) -> &[f64] {
        &self.params[row]
    }

    /// The momentum buffer of row `row`.
    pub fn velocity(&self, row: usize) -> &[f64] {
        &self.velocity[row]
    }

    /// Overwrites row `row` (for tests that start from distinct models).
    pub fn set_params(&mut self, row: usize, x: Vec<f64>) {
        self.params[row] = x;
    }

    /// The coordinate-wise sum of the worker rows.
    pub fn sum(&self) -> Vec<f64> {
        let mut s = vec![0.0; self.num_params()];
        for p in &self.params[..self.workers] {
            for (acc, v) in s.iter_mut().zip(p) {
                *acc += v;
            }
        }
        s
    }

    /// Gradients requested and not yet released.
    pub fn live_gradients(&self) -> usize {
        self.grads.len()
    }

    /// A live gradient's value.
    pub fn gradient(&self, grad: GradId) -> &[f64] {
        &self.grads[&grad]
    }

    /// Message buffers created and not yet released.
    pub fn live_msgs(&self) -> usize {
        self.msgs.len()
    }

    /// A live message buffer's value.
    pub fn msg(&self, msg: MsgId) -> &[f64] {
        &self.msgs[&msg]
    }

    fn insert(&mut self, g: Vec<f64>) -> GradId {
        let id = GradId(self.next_grad);
        self.next_grad += 1;
        self.grads.insert(id, g);
        id
    }

    fn combine(&self, terms: &[(Slot, f64)]) -> Vec<f64> {
        assert!(!terms.is_empty(), "a combination needs a term");
        let mut out = vec![0.0; self.num_params()];
        for &(slot, weight) in terms {
            let src = match slot {
                Slot::Row(r) => &self.params[r],
                Slot::Msg(m) => self.msgs.get(&m).expect("live message buffer"),
            };
            for (o, v) in out.iter_mut().zip(src) {
                *o += weight * v;
            }
        }
        out
    }
}

impl ReplicaStore for ReferenceStore {
    fn workers(&self) -> usize {
        self.workers
    }

    fn rows(&self) -> usize {
        self.params.len()
    }

    fn num_params(&self) -> usize {
        self.problem.curvature.len()
    }

    fn batch_size(&self) -> usize {
        1
    }

    fn train_size(&self) -> usize {
        self.train_size
    }

    fn layers(&self) -> Vec<Layer> {
        self.layers.clone()
    }

    fn add_rows(&mut self, count: usize) -> usize {
        let first = self.params.len();
        let dim = self.num_params();
        for _ in 0..count {
            self.params.push(self.params[0].clone());
            self.velocity.push(vec![0.0; dim]);
        }
        first
    }

    fn request_gradient_scaled(&mut self, worker: usize, scale: f64) -> GradId {
        assert!(worker < self.workers, "row {worker} has no data stream");
        let x: Vec<f64> = self.params[worker].iter().map(|v| scale * v).collect();
        let loss = self.problem.value(&x);
        let rng = &mut self.data[worker];
        let noise = self.problem.noise;
        let g: Vec<f64> = x
            .iter()
            .zip(&self.problem.curvature)
            .zip(&self.problem.optimum)
            .map(|((x, a), b)| {
                let z: f64 = StandardNormal.sample(rng);
                a * (x - b) + noise * z
            })
            .collect();
        self.train_loss.0 += loss;
        self.train_loss.1 += 1;
        self.insert(g)
    }

    fn mean_gradient(&mut self, grads: &[GradId]) -> GradId {
        let mut mean = vec![0.0; self.num_params()];
        for id in grads {
            let g = self.grads.remove(id).expect("live gradient");
            for (m, v) in mean.iter_mut().zip(g) {
                *m += v;
            }
        }
        let n = grads.len() as f64;
        mean.iter_mut().for_each(|m| *m /= n);
        self.insert(mean)
    }

    fn apply_gradient_block(&mut self, row: usize, grad: GradId, lr: f64, block: Range<usize>) {
        let g = self.grads.get(&grad).expect("live gradient");
        let OptimizerConfig {
            momentum,
            nesterov,
            weight_decay,
            ..
        } = self.optimizer;
        let x = &mut self.params[row];
        let v = &mut self.velocity[row];
        for k in block {
            let d = g[k] + weight_decay * x[k];
            v[k] = momentum * v[k] + d;
            let step = if nesterov { d + momentum * v[k] } else { v[k] };
            x[k] -= lr * step;
        }
    }

    fn release_gradient(&mut self, grad: GradId) {
        self.grads.remove(&grad);
    }

    fn average(&mut self, rows: &[usize]) {
        let dim = self.num_params();
        let mut mean = vec![0.0; dim];
        for &w in rows {
            for (m, v) in mean.iter_mut().zip(&self.params[w]) {
                *m += v;
            }
        }
        let n = rows.len() as f64;
        mean.iter_mut().for_each(|m| *m /= n);
        for &w in rows {
            self.params[w].clone_from(&mean);
        }
    }

    fn mix(&mut self, dst: usize, terms: &[(Slot, f64)]) {
        self.params[dst] = self.combine(terms);
    }

    fn new_msg(&mut self, terms: &[(Slot, f64)]) -> MsgId {
        let value = self.combine(terms);
        let id = MsgId(self.next_msg);
        self.next_msg += 1;
        self.msgs.insert(id, value);
        id
    }

    fn release_msg(&mut self, msg: MsgId) {
        self.msgs.remove(&msg).expect("live message buffer");
    }

    fn copy_block(&mut self, dst: usize, src: usize, block: Range<usize>) {
        let values = self.params[src][block.clone()].to_vec();
        self.params[dst][block].copy_from_slice(&values);
    }

    fn evaluate(&mut self) -> Evaluation {
        let n = self.workers as f64;
        let mean: Vec<f64> = self.sum().into_iter().map(|s| s / n).collect();
        Evaluation {
            loss: self.problem.value(&mean),
            accuracy: f64::NAN,
        }
    }

    fn evaluate_mix(&mut self, terms: &[(usize, f64)]) -> Evaluation {
        let terms: Vec<(Slot, f64)> = terms.iter().map(|&(r, w)| (Slot::Row(r), w)).collect();
        let x = self.combine(&terms);
        Evaluation {
            loss: self.problem.value(&x),
            accuracy: f64::NAN,
        }
    }

    fn take_train_loss(&mut self) -> f64 {
        let (sum, count) = std::mem::take(&mut self.train_loss);
        if count == 0 {
            f64::NAN
        } else {
            sum / count as f64
        }
    }

    /// Computed on the differences to the first replica, `d_i = z_i − z_0`, so that equal
    /// replicas give exactly 0.
    fn consensus_distance(&mut self, scales: Option<&[f64]>) -> f64 {
        let n = self.workers;
        let scale = |i: usize| scales.map_or(1.0, |s| s[i]);
        let z0: Vec<f64> = self.params[0].iter().map(|v| scale(0) * v).collect();
        let diffs: Vec<Vec<f64>> = (0..n)
            .map(|i| {
                self.params[i]
                    .iter()
                    .zip(&z0)
                    .map(|(v, a)| scale(i) * v - a)
                    .collect()
            })
            .collect();
        let mut mean = vec![0.0; self.num_params()];
        for d in &diffs {
            for (m, v) in mean.iter_mut().zip(d) {
                *m += v;
            }
        }
        mean.iter_mut().for_each(|m| *m /= n as f64);
        let mut sum = 0.0;
        for d in &diffs {
            for (m, v) in mean.iter().zip(d) {
                sum += (v - m) * (v - m);
            }
        }
        sum / n as f64
    }

    /// The quadratic's minimum is 0 (at `b`), so this is `f(x)`.
    fn suboptimality(&mut self, terms: Option<&[(usize, f64)]>) -> Option<f64> {
        Some(match terms {
            Some(t) => self.evaluate_mix(t).loss,
            None => self.evaluate().loss,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn averaging_keeps_the_sum() {
        let mut s = ReferenceStore::new(
            Quadratic::new(3, 10.0, 0.0),
            3,
            OptimizerConfig::default(),
            1,
        );
        s.set_params(0, vec![1.0, 2.0, 3.0]);
        s.set_params(1, vec![-1.0, 0.5, 9.0]);
        let before = s.sum();
        s.average(&[0, 1]);
        assert_eq!(s.params(0), s.params(1));
        assert_eq!(s.sum(), before);
    }

    #[test]
    fn noiseless_sgd_converges_to_the_optimum() {
        let opt = OptimizerConfig {
            lr: 0.5,
            ..Default::default()
        };
        let mut s = ReferenceStore::new(Quadratic::new(2, 1.0, 0.0), 2, opt, 1);
        for _ in 0..50 {
            let g = s.request_gradient(0);
            s.apply_gradient(0, g, 0.5);
            s.release_gradient(g);
        }
        assert!(s.params(0).iter().all(|x| (x - 1.0).abs() < 1e-9));
        assert_eq!(s.live_gradients(), 0);
    }
}
