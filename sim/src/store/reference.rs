//! An exact reference store: plain `f64` vectors and an analytic objective.
//!
//! The objective is a separable quadratic `f(x) = ½ Σ_k a_k (x_k − b_k)²`, whose stochastic
//! gradient adds Gaussian noise of standard deviation `σ` per coordinate, drawn from the worker's
//! data stream. Gradients are computed eagerly, in `f64`, with no batching, so tests of algorithm
//! semantics (invariants, equalities between algorithms) can compare numbers exactly.

use std::ops::Range;

use rand_distr::{Distribution, StandardNormal};

use crate::clock::rng::{Stream, StreamKind, stream};
use crate::store::optim::{self, Layout, State};
use crate::store::{
    Evaluation, GradId, HandleMap, Hidden, Layer, Matrix, MsgId, OptimizerConfig, ReplicaStore,
    Slot,
};

/// The analytic problem of a [`ReferenceStore`].
#[derive(Clone, Debug)]
pub struct Quadratic {
    /// Curvatures `a_k > 0`.
    pub curvature: Vec<f64>,
    /// Optimum `b`.
    pub optimum: Vec<f64>,
    /// Gradient noise σ.
    pub noise: f64,
    /// Per worker, its own optimum `b_i` (heterogeneous data): worker `i`'s gradient is
    /// `a·(x − b_i)`. Empty: every worker's is `b`. Set by [`Quadratic::heterogeneous`], which
    /// makes `b` their mean, the optimum of the workers' average objective.
    pub worker_optima: Vec<Vec<f64>>,
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
            worker_optima: Vec::new(),
        }
    }

    /// The same problem with worker `i`'s optimum `b_i = optima[i]`, and `b` their mean: the
    /// average of the workers' objectives is `f` plus a constant, so [`Quadratic::value`] of a
    /// model is its suboptimality on the average objective.
    pub fn heterogeneous(mut self, optima: Vec<Vec<f64>>) -> Self {
        let n = optima.len() as f64;
        self.optimum = (0..self.curvature.len())
            .map(|k| optima.iter().map(|b| b[k]).sum::<f64>() / n)
            .collect();
        self.worker_optima = optima;
        self
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
    train_size: usize,
    layers: Vec<Layer>,
    /// The layers and hidden matrices, as the rules take them.
    layout: Layout,
    matrices: Vec<Matrix>,
    tensors: Vec<Range<usize>>,
    state: ReferenceState,
}

impl ReferenceStore {
    /// `workers` replicas, all starting at zero.
    pub fn new(problem: Quadratic, workers: usize, optimizer: OptimizerConfig, seed: u64) -> Self {
        let dim = problem.curvature.len();
        // Adam's second moment and step counts (empty for the other rules).
        let adam = if optimizer.buffers().second { dim } else { 0 };
        ReferenceStore {
            workers,
            state: ReferenceState {
                params: vec![vec![0.0; dim]; workers],
                velocity: vec![vec![0.0; dim]; workers],
                second: vec![vec![0.0; adam]; workers],
                steps: vec![vec![0; adam]; workers],
                data: (0..workers)
                    .map(|w| stream(seed, StreamKind::Data, w as u64))
                    .collect(),
                grads: HandleMap::new(),
                next_grad: 0,
                msgs: HandleMap::new(),
                next_msg: 0,
                train_loss: (0.0, 0),
            },
            problem,
            optimizer,
            train_size: 1000,
            layers: vec![Layer {
                params: 0..dim,
                forward_flops: 2 * dim as u64,
            }],
            layout: Layout::flat(dim),
            matrices: Vec::new(),
            tensors: std::iter::once(0..dim).collect(),
        }
    }

    /// The same store, whose [`ReplicaStore::matrices`] answers `matrices` (by default none):
    /// for tests of low-rank compression. The objective is unchanged.
    pub fn with_matrices(mut self, matrices: Vec<Matrix>) -> Self {
        assert!(
            matrices.iter().all(|m| m.range().end <= self.num_params()),
            "the matrices lie inside a row"
        );
        self.matrices = matrices;
        self
    }

    /// The same store, whose [`ReplicaStore::hidden_matrices`] answers `hidden` (by default
    /// none), and whose [`ReplicaStore::matrices`] holds them: for tests of Muon. They must be
    /// disjoint, in row order; the objective is unchanged.
    pub fn with_hidden(mut self, hidden: Vec<Hidden>) -> Self {
        let mut end = 0;
        for h in &hidden {
            let r = h.matrix.range();
            assert!(
                r.start >= end && r.end <= self.num_params(),
                "the hidden matrices lie in order inside a row"
            );
            assert_eq!(h.fan_out * h.fan_in, h.matrix.rows * h.matrix.cols);
            end = r.end;
        }
        self.matrices = hidden.iter().map(|h| h.matrix).collect();
        self.layout.hidden = hidden;
        self
    }

    /// The same store, whose [`ReplicaStore::tensors`] answers `tensors` (by default one tensor
    /// of every coordinate): for tests of compressors that work tensor by tensor. They must be
    /// disjoint, increasing and cover `0..dim`; the objective is unchanged.
    pub fn with_tensors(mut self, tensors: Vec<Range<usize>>) -> Self {
        let mut end = 0;
        for t in &tensors {
            assert!(
                t.start == end && t.end > t.start,
                "the tensors tile the row in order"
            );
            end = t.end;
        }
        assert_eq!(end, self.num_params(), "the tensors cover every coordinate");
        self.tensors = tensors;
        self
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
        self.layout.layers = layers.iter().map(|l| l.params.clone()).collect();
        self.layers = layers;
        self
    }

    /// The analytic problem.
    pub fn problem(&self) -> &Quadratic {
        &self.problem
    }

    /// Row `row` (the replica of worker `row` for `row < workers()`).
    pub fn params(&self, row: usize) -> &[f64] {
        &self.state.params[row]
    }

    /// The momentum buffer of row `row` (SGD's and LARS's; Adam's first moment `m`).
    pub fn velocity(&self, row: usize) -> &[f64] {
        &self.state.velocity[row]
    }

    /// Adam's second moment `v` of row `row` (empty for the other rules).
    pub fn second_moment(&self, row: usize) -> &[f64] {
        &self.state.second[row]
    }

    /// Adam's step count of each coordinate of row `row` (empty for the other rules).
    pub fn steps(&self, row: usize) -> &[u64] {
        &self.state.steps[row]
    }

    /// Overwrites row `row` (for tests that start from distinct models).
    pub fn set_params(&mut self, row: usize, x: Vec<f64>) {
        self.state.params[row] = x;
    }

    /// The coordinate-wise sum of the worker rows.
    pub fn sum(&self) -> Vec<f64> {
        let mut s = vec![0.0; self.num_params()];
        for p in &self.state.params[..self.workers] {
            for (acc, v) in s.iter_mut().zip(p) {
                *acc += v;
            }
        }
        s
    }

    /// Gradients requested and not yet released.
    pub fn live_gradients(&self) -> usize {
        self.state.grads.len()
    }

    /// A live gradient's value.
    pub fn gradient(&self, grad: GradId) -> &[f64] {
        self.state.grads.get(grad.0).expect("live gradient")
    }

    /// Message buffers created and not yet released.
    pub fn live_msgs(&self) -> usize {
        self.state.msgs.len()
    }

    /// A live message buffer's value.
    pub fn msg(&self, msg: MsgId) -> &[f64] {
        self.state.msgs.get(msg.0).expect("live message buffer")
    }

    fn insert(&mut self, g: Vec<f64>) -> GradId {
        let id = GradId(self.state.next_grad);
        self.state.next_grad += 1;
        self.state.grads.insert(id.0, g);
        id
    }

    fn combine(&self, terms: &[(Slot, f64)]) -> Vec<f64> {
        assert!(!terms.is_empty(), "a combination needs a term");
        let mut out = vec![0.0; self.num_params()];
        for &(slot, weight) in terms {
            let src = match slot {
                Slot::Row(r) => &self.state.params[r],
                Slot::Msg(m) => self.state.msgs.get(m.0).expect("live message buffer"),
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
        self.state.params.len()
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
        let first = self.state.params.len();
        let dim = self.num_params();
        for _ in 0..count {
            self.state.params.push(self.state.params[0].clone());
            self.state.velocity.push(vec![0.0; dim]);
            let adam = self.state.second[0].len();
            self.state.second.push(vec![0.0; adam]);
            self.state.steps.push(vec![0; adam]);
        }
        first
    }

    fn request_gradient_scaled(&mut self, worker: usize, scale: f64) -> GradId {
        assert!(worker < self.workers, "row {worker} has no data stream");
        let x: Vec<f64> = self.state.params[worker]
            .iter()
            .map(|v| scale * v)
            .collect();
        let loss = self.problem.value(&x);
        let rng = &mut self.state.data[worker];
        let noise = self.problem.noise;
        let optimum = self
            .problem
            .worker_optima
            .get(worker)
            .unwrap_or(&self.problem.optimum);
        let g: Vec<f64> = x
            .iter()
            .zip(&self.problem.curvature)
            .zip(optimum)
            .map(|((x, a), b)| {
                let z: f64 = StandardNormal.sample(rng);
                a * (x - b) + noise * z
            })
            .collect();
        self.state.train_loss.0 += loss;
        self.state.train_loss.1 += 1;
        self.insert(g)
    }

    fn mean_gradient(&mut self, grads: &[GradId]) -> GradId {
        let mut mean = vec![0.0; self.num_params()];
        for id in grads {
            let g = self.state.grads.remove(id.0).expect("live gradient");
            for (m, v) in mean.iter_mut().zip(g) {
                *m += v;
            }
        }
        let n = grads.len() as f64;
        mean.iter_mut().for_each(|m| *m /= n);
        self.insert(mean)
    }

    fn apply_gradient_block(&mut self, row: usize, grad: GradId, lr: f64, block: Range<usize>) {
        let opt = &self.optimizer;
        let buffers = opt.buffers();
        let ReferenceState {
            params,
            velocity,
            second,
            steps,
            grads,
            ..
        } = &mut self.state;
        let g = grads.get(grad.0).expect("live gradient");
        // Clipping by the whole gradient's norm (the quadratic has no state coordinates).
        let clipped: Vec<f64>;
        let c = match opt.clip_norm {
            Some(_) => opt.clip_factor(g.iter().map(|v| v * v).sum::<f64>().sqrt()),
            None => 1.0,
        };
        let g: &[f64] = if c < 1.0 {
            clipped = g.iter().map(|v| v * c).collect();
            &clipped
        } else {
            g
        };
        // The rule, from its own file of `crate::store::optim`, in `f64`: the code the burn
        // store's rows run in `f32`. Every row keeps a momentum buffer, which the rule is handed
        // whether or not it keeps one for its settings (SGD without momentum leaves the last
        // step's direction in it).
        let state = State {
            first: Some(&mut velocity[row][block.clone()]),
            second: buffers.second.then(|| &mut second[row][block.clone()]),
            counts: buffers.counts.then(|| &mut steps[row][block.clone()]),
        };
        let x = &mut params[row][block.clone()];
        let (g, layout) = (&g[block.clone()], &self.layout);
        optim::step(
            opt,
            optim::Step {
                x,
                state,
                g,
                lr,
                block,
                layout,
            },
        );
    }

    fn release_gradient(&mut self, grad: GradId) {
        self.state.grads.remove(grad.0);
    }

    fn swap_optimizer_state(&mut self, a: usize, b: usize) {
        self.state.velocity.swap(a, b);
        self.state.second.swap(a, b);
        self.state.steps.swap(a, b);
    }

    fn reset_optimizer_state(&mut self, row: usize) {
        self.state.velocity[row].fill(0.0);
        self.state.second[row].fill(0.0);
        self.state.steps[row].fill(0);
    }

    fn average(&mut self, rows: &[usize]) {
        let dim = self.num_params();
        let mut mean = vec![0.0; dim];
        for &w in rows {
            for (m, v) in mean.iter_mut().zip(&self.state.params[w]) {
                *m += v;
            }
        }
        let n = rows.len() as f64;
        mean.iter_mut().for_each(|m| *m /= n);
        for &w in rows {
            self.state.params[w].clone_from(&mean);
        }
    }

    fn mix(&mut self, dst: usize, terms: &[(Slot, f64)]) {
        self.state.params[dst] = self.combine(terms);
    }

    fn new_msg(&mut self, terms: &[(Slot, f64)]) -> MsgId {
        let value = self.combine(terms);
        let id = MsgId(self.state.next_msg);
        self.state.next_msg += 1;
        self.state.msgs.insert(id.0, value);
        id
    }

    fn release_msg(&mut self, msg: MsgId) {
        self.state.msgs.remove(msg.0).expect("live message buffer");
    }

    fn copy_block(&mut self, dst: usize, src: usize, block: Range<usize>) {
        let values = self.state.params[src][block.clone()].to_vec();
        self.state.params[dst][block].copy_from_slice(&values);
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
        let (sum, count) = std::mem::take(&mut self.state.train_loss);
        if count == 0 {
            f64::NAN
        } else {
            sum / count as f64
        }
    }

    /// Computed on the differences to the first replica, `d_i = z_i − z_0`, so that equal
    /// replicas give exactly 0.
    fn matrices(&self) -> Vec<Matrix> {
        self.matrices.clone()
    }

    fn hidden_matrices(&self) -> Vec<Hidden> {
        self.layout.hidden.clone()
    }

    fn tensors(&self) -> Vec<Range<usize>> {
        self.tensors.clone()
    }

    fn msg_values(&mut self, msg: MsgId) -> Vec<f64> {
        self.msg(msg).to_vec()
    }

    fn msg_from_values(&mut self, values: &[f64]) -> MsgId {
        assert_eq!(
            values.len(),
            self.num_params(),
            "a buffer holds a whole row"
        );
        let id = MsgId(self.state.next_msg);
        self.state.next_msg += 1;
        self.state.msgs.insert(id.0, values.to_vec());
        id
    }

    fn gradient_values(&mut self, grad: GradId) -> Vec<f64> {
        self.gradient(grad).to_vec()
    }

    fn set_gradient_values(&mut self, grad: GradId, values: &[f64]) {
        let g = self.state.grads.get_mut(grad.0).expect("live gradient");
        g[..values.len()].copy_from_slice(values);
    }

    fn consensus_distance(&mut self, scales: Option<&[f64]>) -> f64 {
        let n = self.workers;
        let scale = |i: usize| scales.map_or(1.0, |s| s[i]);
        let z0: Vec<f64> = self.state.params[0].iter().map(|v| scale(0) * v).collect();
        let diffs: Vec<Vec<f64>> = (0..n)
            .map(|i| {
                self.state.params[i]
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

    fn save_state(&mut self) -> Result<Vec<u8>, String> {
        postcard::to_stdvec(&self.state).map_err(|e| e.to_string())
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), String> {
        let state: ReferenceState = postcard::from_bytes(state).map_err(|e| e.to_string())?;
        let dim = self.problem.curvature.len();
        if state.params.len() < self.workers || state.params.iter().any(|r| r.len() != dim) {
            return Err("the checkpoint's replicas do not fit this model".into());
        }
        self.state = state;
        Ok(())
    }
}

/// What changes in a [`ReferenceStore`] while a run goes on: what a checkpoint keeps (the
/// problem and the configuration are rebuilt with the store).
#[derive(serde::Serialize, serde::Deserialize)]
struct ReferenceState {
    /// The rows' parameters.
    params: Vec<Vec<f64>>,
    /// SGD's and LARS's momentum buffer, Adam's first moment.
    velocity: Vec<Vec<f64>>,
    /// Adam's second moment (empty for the other rules).
    second: Vec<Vec<f64>>,
    /// Adam's step counts, per coordinate (empty for the other rules).
    steps: Vec<Vec<u64>>,
    /// Each worker's data stream.
    data: Vec<Stream>,
    /// Live gradients by handle (as the checkpoint sees them: by increasing handle).
    grads: HandleMap<Vec<f64>>,
    next_grad: u64,
    /// Live message buffers by handle.
    msgs: HandleMap<Vec<f64>>,
    next_msg: u64,
    train_loss: (f64, usize),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::OptimizerKind;

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

    #[track_caller]
    fn close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len());
        for (k, (a, b)) in got.iter().zip(want).enumerate() {
            assert!((a - b).abs() < 1e-9, "coordinate {k}: {a}, expected {b}");
        }
    }

    fn step(s: &mut ReferenceStore, lr: f64, block: Range<usize>) {
        let g = s.request_gradient(0);
        s.apply_gradient_block(0, g, lr, block);
        s.release_gradient(g);
    }

    /// Adam against steps worked out by hand: `f(x) = ½(x₀ − 1)² + ½·4·(x₁ − 1)²` (curvatures 1
    /// and 4, no noise), `x = (0, 0.5)`, rate 0.1, β₁ = 0.9, β₂ = 0.999, ε = 1e-8.
    #[test]
    fn adam_steps_by_hand() {
        let opt = OptimizerConfig {
            kind: OptimizerKind::Adam,
            lr: 0.1,
            ..Default::default()
        };
        let mut s = ReferenceStore::new(Quadratic::new(2, 4.0, 0.0), 1, opt, 1);
        s.set_params(0, vec![0.0, 0.5]);
        // Step 1 (t = 1): g = (1·(0 − 1), 4·(0.5 − 1)) = (−1, −2).
        // m = 0.1·g = (−0.1, −0.2); v = 0.001·g² = (0.001, 0.004).
        // m̂ = m/(1 − 0.9) = g; v̂ = v/(1 − 0.999) = g²: the first step is η·g/(|g| + ε),
        // 0.1·1/(1 + 1e-8) = 0.099999999 and 0.1·2/(2 + 1e-8) = 0.0999999995.
        step(&mut s, 0.1, 0..2);
        close(s.params(0), &[0.099999999, 0.5999999995]);
        close(s.velocity(0), &[-0.1, -0.2]);
        close(s.second_moment(0), &[0.001, 0.004]);
        assert_eq!(s.steps(0), &[1, 1]);
        // Step 2 (t = 2): g = (0.099999999 − 1, 4·(0.5999999995 − 1)) = (−0.900000001, −1.600000002).
        // m = 0.9·(−0.1) + 0.1·(−0.900000001) = −0.1800000001
        //   and 0.9·(−0.2) + 0.1·(−1.600000002) = −0.3400000002;
        // v = 0.999·0.001 + 0.001·0.810000002 = 0.001809000002
        //   and 0.999·0.004 + 0.001·2.560000006 = 0.006556000006.
        // m̂ = m/(1 − 0.81) = (−0.947368422, −1.789473685);
        // v̂ = v/(1 − 0.998001) = (0.904952477, 3.279639823), √v̂ = (0.951289902, 1.810977588);
        // steps 0.1·m̂/(√v̂ + ε) = (−0.099587771, −0.098812580):
        // x = (0.099999999 + 0.099587771, 0.5999999995 + 0.098812580).
        step(&mut s, 0.1, 0..2);
        close(s.params(0), &[0.1995877702876619, 0.69881257937657]);
        close(s.velocity(0), &[-0.1800000001, -0.3400000002]);
        close(s.second_moment(0), &[0.001809000002, 0.006556000006]);
        assert_eq!(s.steps(0), &[2, 2]);
        // Step 3 on the block 0..1 only: coordinate 0 counts its third step, coordinate 1 keeps
        // t = 2 and its state. g₀ = 0.19958777 − 1 = −0.80041223;
        // m₀ = 0.9·(−0.1800000001) + 0.1·g₀ = −0.242041223;
        // v₀ = 0.999·0.001809000002 + 0.001·g₀² = 0.002447851;
        // m̂₀ = m₀/(1 − 0.729) = −0.893141045, v̂₀ = v₀/(1 − 0.997002999) = 0.816766741,
        // √v̂₀ = 0.903751482; step 0.1·0.893141045/0.903751482 = 0.098825955.
        step(&mut s, 0.1, 0..1);
        close(s.params(0), &[0.29841372549558504, 0.69881257937657]);
        close(s.velocity(0), &[-0.24204122306123377, -0.3400000002]);
        assert_eq!(s.steps(0), &[3, 2]);
    }

    /// LARS against steps worked out by hand: `f(x) = ½ Σ a_k (x_k − 1)²` with a = (1, 2, 4),
    /// no noise, two layers {0, 1} and {2}, `x = (3, 4, 0)`, rate η = 0.1, trust coefficient
    /// η_T = 0.1, momentum 0.9, weight decay 0.1.
    #[test]
    fn lars_steps_by_hand() {
        let opt = OptimizerConfig {
            kind: OptimizerKind::Lars,
            lr: 0.1,
            momentum: 0.9,
            weight_decay: 0.1,
            eta: Some(0.1),
            ..Default::default()
        };
        let layers = vec![
            Layer {
                params: 0..2,
                forward_flops: 4,
            },
            Layer {
                params: 2..3,
                forward_flops: 2,
            },
        ];
        let mut s = ReferenceStore::new(Quadratic::new(3, 4.0, 0.0), 1, opt, 1).with_layers(layers);
        s.set_params(0, vec![3.0, 4.0, 0.0]);
        // Step 1: g = (1·2, 2·3, 4·(−1)) = (2, 6, −4).
        // Layer {0, 1}: ‖x‖ = 5, ‖g‖ = √40 = 6.324555320; τ = 0.1·5/(6.324555320 + 0.1·5)
        //   = 0.073264847; d = g + 0.1·x = (2.3, 6.4); v = 0.1·τ·d = (0.016850915, 0.046889502).
        // Layer {2}: ‖x‖ = 0, so τ = 1; d = −4; v = 0.1·1·(−4) = −0.4.
        // x ← x − v.
        step(&mut s, 0.1, 0..3);
        close(
            s.velocity(0),
            &[0.01685091476323842, 0.04688950194988082, -0.4],
        );
        close(s.params(0), &[2.9831490852367617, 3.953110498050119, 0.4]);
        // Step 2: g = (1.983149085, 5.906220996, 4·(0.4 − 1) = −2.4).
        // Layer {0, 1}: ‖x‖ = 4.952399527, ‖g‖ = 6.230275014, τ = 0.495239953/6.725514967
        //   = 0.073635990; d = (2.281464, 6.301532), v = 0.9·v + 0.1·τ·d
        //   = (0.031965609, 0.088602507).
        // Layer {2}: ‖x‖ = 0.4, ‖g‖ = 2.4, τ = 0.1·0.4/(2.4 + 0.04) = 0.016393443;
        //   d = −2.4 + 0.04 = −2.36; v = 0.9·(−0.4) + 0.1·0.016393443·(−2.36) = −0.363868852;
        //   x = 0.4 + 0.363868852 = 0.763868852.
        step(&mut s, 0.1, 0..3);
        close(
            s.velocity(0),
            &[
                0.03196560926545142,
                0.08860250681428772,
                -0.36386885245901646,
            ],
        );
        close(
            s.params(0),
            &[2.9511834759713103, 3.8645079912358313, 0.7638688524590165],
        );
    }
}
