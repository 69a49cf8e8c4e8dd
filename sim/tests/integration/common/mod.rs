//! Shared helpers of the engine's integration tests: small scenarios on the exact store.
#![allow(dead_code)]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::Range;
use std::rc::Rc;

use dasim_sim::prelude::*;

pub fn cluster(workers: usize, stragglers: &[(usize, f64)]) -> ClusterConfig {
    stragglers.iter().fold(
        ClusterConfig::new(workers).with_step_time_ms(10.0),
        |c, &(w, f)| c.with_straggler(StragglerConfig::fixed([w], f)),
    )
}

pub fn net(bandwidth_gbps: f64, latency_us: f64) -> NetworkConfig {
    NetworkConfig::uniform(bandwidth_gbps, latency_us)
}

pub fn stop_after_steps(steps: u64) -> RunConfig {
    RunConfig {
        sim_time_s: None,
        epochs: None,
        worker_steps: Some(steps),
        eval_every_s: 1.0,
        eval_every_steps: None,
        // These runs measure timelines and protocols, whatever the loss does: no bound
        // stops them (a NaN or infinite loss still would).
        divergence_loss: Some(f64::MAX),
    }
}

pub fn stop_at(seconds: f64) -> RunConfig {
    RunConfig {
        sim_time_s: Some(seconds),
        epochs: None,
        worker_steps: None,
        eval_every_s: 0.05,
        eval_every_steps: None,
        // These runs measure timelines and protocols, whatever the loss does: no bound
        // stops them (a NaN or infinite loss still would).
        divergence_loss: Some(f64::MAX),
    }
}

pub fn optimizer(lr: f64, momentum: f64) -> OptimizerConfig {
    OptimizerConfig {
        lr,
        momentum,
        ..Default::default()
    }
}

pub fn quadratic_store(workers: usize, seed: u64) -> ReferenceStore {
    ReferenceStore::new(
        Quadratic::new(16, 10.0, 0.1),
        workers,
        optimizer(0.05, 0.5),
        seed,
    )
}

/// A world for `cluster_cfg` on the exact store, its network sized for `alg`.
pub fn world<'s>(
    alg: &AlgorithmConfig,
    cluster_cfg: &ClusterConfig,
    net_cfg: &NetworkConfig,
    topology: TopologyConfig,
    store: &'s mut dyn ReplicaStore,
    opt: &OptimizerConfig,
    seed: u64,
) -> World<'s> {
    let n = cluster_cfg.workers;
    let env = BuildEnv::new(seed);
    World::new(
        Cluster::new(cluster_cfg, &env).unwrap(),
        Network::new(net_cfg, n + alg.extra_nodes(), &env).unwrap(),
        Topology::build(&topology, n, &env).unwrap(),
        store,
        opt,
        seed,
    )
}

/// Runs `alg` on the exact store and returns the outcome and the evaluation points. The entry's
/// own optimizer and topology, where it has them, replace momentum SGD at 0.05 and `topology`,
/// as a scenario resolves them.
pub fn run_on<S: ReplicaStore>(
    alg: &AlgorithmConfig,
    cluster_cfg: &ClusterConfig,
    net_cfg: &NetworkConfig,
    topology: TopologyConfig,
    store: &mut S,
    stop: &RunConfig,
    seed: u64,
) -> (Outcome, Vec<EvalPoint>) {
    let opt = alg.optimizer_or(&optimizer(0.05, 0.5)).clone();
    let topology = alg.topology_or(&topology).clone();
    let mut world = world(alg, cluster_cfg, net_cfg, topology, store, &opt, seed);
    let mut points = Collect::default();
    let outcome = dasim_sim::algorithms::run_algorithm(alg, &mut world, stop, &mut points).unwrap();
    (outcome, points.0)
}

/// A recorded store operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Request { worker: usize, grad: GradId },
    Apply { row: usize, grad: GradId },
}

/// A store that records and checks every operation on the exact store it wraps, which it shares
/// (so a test can read it between events, from a `run_inspect` hook).
pub struct Checked {
    pub inner: Rc<RefCell<ReferenceStore>>,
    /// `reads[w][k]`: the point worker `w`'s `k`-th gradient was computed at.
    pub reads: Vec<Vec<Vec<f64>>>,
    /// `grads[w][k]`: the value of worker `w`'s `k`-th gradient.
    pub grads: Vec<Vec<Vec<f64>>>,
    /// Every optimizer step: `(row, gradient, block)`.
    pub applications: Vec<(usize, GradId, Range<usize>)>,
    /// The learning rate of every optimizer step, in the order of `applications`.
    pub rates: Vec<f64>,
    /// Gradient requests and optimizer steps, in order.
    pub log: Vec<Op>,
    /// The value of every gradient requested.
    pub values: BTreeMap<GradId, Vec<f64>>,
    pub averages: usize,
    pub max_sum_drift: f64,
    /// The change of the sum of the worker rows caused by operations other than optimizer
    /// steps, accumulated over the run (shared, so a `run_inspect` hook can read it).
    pub mix_drift: Rc<RefCell<Vec<f64>>>,
}

impl Checked {
    pub fn new(inner: ReferenceStore) -> Self {
        let n = inner.workers();
        let dim = inner.num_params();
        Checked {
            inner: Rc::new(RefCell::new(inner)),
            reads: vec![Vec::new(); n],
            grads: vec![Vec::new(); n],
            applications: Vec::new(),
            rates: Vec::new(),
            log: Vec::new(),
            values: BTreeMap::new(),
            averages: 0,
            max_sum_drift: 0.0,
            mix_drift: Rc::new(RefCell::new(vec![0.0; dim])),
        }
    }

    pub fn shared(&self) -> Rc<RefCell<ReferenceStore>> {
        Rc::clone(&self.inner)
    }

    pub fn drift(&self) -> Rc<RefCell<Vec<f64>>> {
        Rc::clone(&self.mix_drift)
    }

    pub fn params(&self, row: usize) -> Vec<f64> {
        self.inner.borrow().params(row).to_vec()
    }

    fn tracked<T>(&mut self, op: impl FnOnce(&mut ReferenceStore) -> T) -> T {
        let before = self.inner.borrow().sum();
        let out = op(&mut self.inner.borrow_mut());
        let after = self.inner.borrow().sum();
        for ((d, b), a) in self
            .mix_drift
            .borrow_mut()
            .iter_mut()
            .zip(&before)
            .zip(&after)
        {
            *d += a - b;
        }
        out
    }
}

impl ReplicaStore for Checked {
    fn workers(&self) -> usize {
        self.inner.borrow().workers()
    }
    fn rows(&self) -> usize {
        self.inner.borrow().rows()
    }
    fn num_params(&self) -> usize {
        self.inner.borrow().num_params()
    }
    fn batch_size(&self) -> usize {
        self.inner.borrow().batch_size()
    }
    fn train_size(&self) -> usize {
        self.inner.borrow().train_size()
    }
    fn layers(&self) -> Vec<Layer> {
        self.inner.borrow().layers()
    }
    fn add_rows(&mut self, count: usize) -> usize {
        self.inner.borrow_mut().add_rows(count)
    }
    fn request_gradient_scaled(&mut self, worker: usize, scale: f64) -> GradId {
        let mut inner = self.inner.borrow_mut();
        let x: Vec<f64> = inner.params(worker).iter().map(|v| v * scale).collect();
        self.reads[worker].push(x);
        let g = inner.request_gradient_scaled(worker, scale);
        self.grads[worker].push(inner.gradient(g).to_vec());
        self.log.push(Op::Request { worker, grad: g });
        self.values.insert(g, inner.gradient(g).to_vec());
        g
    }
    fn mean_gradient(&mut self, grads: &[GradId]) -> GradId {
        self.inner.borrow_mut().mean_gradient(grads)
    }
    fn apply_gradient_block(&mut self, row: usize, grad: GradId, lr: f64, block: Range<usize>) {
        self.applications.push((row, grad, block.clone()));
        self.rates.push(lr);
        self.log.push(Op::Apply { row, grad });
        self.inner
            .borrow_mut()
            .apply_gradient_block(row, grad, lr, block)
    }
    fn release_gradient(&mut self, grad: GradId) {
        self.inner.borrow_mut().release_gradient(grad)
    }
    fn swap_optimizer_state(&mut self, a: usize, b: usize) {
        self.inner.borrow_mut().swap_optimizer_state(a, b)
    }
    fn reset_optimizer_state(&mut self, row: usize) {
        self.inner.borrow_mut().reset_optimizer_state(row)
    }
    fn average(&mut self, rows: &[usize]) {
        let before = self.inner.borrow().sum();
        self.tracked(|s| s.average(rows));
        let after = self.inner.borrow().sum();
        for (b, a) in before.iter().zip(&after) {
            let drift = (a - b).abs() / b.abs().max(1.0);
            self.max_sum_drift = self.max_sum_drift.max(drift);
        }
        self.averages += 1;
    }
    fn mix(&mut self, dst: usize, terms: &[(Slot, f64)]) {
        self.tracked(|s| s.mix(dst, terms))
    }
    fn new_msg(&mut self, terms: &[(Slot, f64)]) -> MsgId {
        self.inner.borrow_mut().new_msg(terms)
    }
    fn release_msg(&mut self, msg: MsgId) {
        self.inner.borrow_mut().release_msg(msg)
    }
    fn matrices(&self) -> Vec<dasim_sim::store::Matrix> {
        self.inner.borrow().matrices()
    }
    fn tensors(&self) -> Vec<std::ops::Range<usize>> {
        self.inner.borrow().tensors()
    }
    fn msg_values(&mut self, msg: MsgId) -> Vec<f64> {
        self.inner.borrow_mut().msg_values(msg)
    }
    fn msg_from_values(&mut self, values: &[f64]) -> MsgId {
        self.inner.borrow_mut().msg_from_values(values)
    }
    fn gradient_values(&mut self, grad: GradId) -> Vec<f64> {
        self.inner.borrow_mut().gradient_values(grad)
    }
    fn set_gradient_values(&mut self, grad: GradId, values: &[f64]) {
        self.inner.borrow_mut().set_gradient_values(grad, values)
    }
    fn copy_block(&mut self, dst: usize, src: usize, block: Range<usize>) {
        self.tracked(|s| s.copy_block(dst, src, block))
    }
    fn evaluate(&mut self) -> Evaluation {
        self.inner.borrow_mut().evaluate()
    }
    fn evaluate_mix(&mut self, terms: &[(usize, f64)]) -> Evaluation {
        self.inner.borrow_mut().evaluate_mix(terms)
    }
    fn take_train_loss(&mut self) -> f64 {
        self.inner.borrow_mut().take_train_loss()
    }
    fn consensus_distance(&mut self, scales: Option<&[f64]>) -> f64 {
        self.inner.borrow_mut().consensus_distance(scales)
    }
    fn suboptimality(&mut self, terms: Option<&[(usize, f64)]>) -> Option<f64> {
        self.inner.borrow_mut().suboptimality(terms)
    }
}

/// Coordinate-wise `a + b`.
pub fn add(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

/// The largest `|a_k − b_k| / max(1, |b_k|)`.
pub fn rel_diff(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / y.abs().max(1.0))
        .fold(0.0, f64::max)
}

/// The package's directory: the running `cargo test`'s, else the one this test was built in. A
/// target directory shared between clones keeps test binaries that another clone built (cargo
/// does not rebuild them for a new path), with that clone's path compiled in.
pub fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), Into::into)
}

/// Asserts `a` and `b` agree coordinate by coordinate to 1e-12 (relative, plus 1e-12).
pub fn assert_close(a: &[f64], b: &[f64], what: &str) {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-12 * (1.0 + y.abs()),
            "{what}: coordinate {i}: {x} vs {y}"
        );
    }
}

/// `Σ a_k · v_k` over `terms` `(a_k, v_k)`.
pub fn axpy(terms: &[(f64, &[f64])]) -> Vec<f64> {
    let dim = terms[0].1.len();
    (0..dim)
        .map(|j| terms.iter().map(|(a, v)| a * v[j]).sum())
        .collect()
}

/// SparseLoCo's compressor written out for the tests' rows of two vectors of 8 (`0..8`,
/// `8..16`), apart from the library's: each vector cut into runs of `side`, the `top_k`
/// largest magnitudes of each run kept (ties to the lower position; all without `top_k`), and,
/// with `bits`, the kept values of each vector read back as the mean of their bin of width
/// `range · σ / 2^bits` around their mean (σ unbiased; bins rounded half to even and clamped),
/// as tplr-ai/SparseLoCo's `_quantize`. Everything not kept is 0.
pub fn reference_chunked(
    x: &[f64],
    side: usize,
    top_k: Option<usize>,
    bits: Option<u32>,
    range: f64,
) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    for tensor in [0..8usize, 8..16] {
        let mut kept = Vec::new();
        for run in tensor.clone().step_by(side) {
            let mut idx: Vec<usize> = (run..run + side).collect();
            idx.sort_by(|&a, &b| x[b].abs().total_cmp(&x[a].abs()).then(a.cmp(&b)));
            idx.truncate(top_k.unwrap_or(side));
            kept.extend(idx);
        }
        kept.sort_unstable();
        let Some(bits) = bits else {
            kept.iter().for_each(|&i| out[i] = x[i]);
            continue;
        };
        let bins = 1usize << bits;
        let n = kept.len() as f64;
        let mean = kept.iter().map(|&i| x[i]).sum::<f64>() / n;
        let var = kept.iter().map(|&i| (x[i] - mean).powi(2)).sum::<f64>() / (n - 1.0);
        let mut scale = range * var.sqrt() / bins as f64;
        if scale == 0.0 || !scale.is_finite() {
            scale = 1.0;
        }
        let bin_of = |v: f64| {
            ((v - mean) / scale + (bins / 2) as f64)
                .round_ties_even()
                .clamp(0.0, (bins - 1) as f64) as usize
        };
        for &i in &kept {
            let b = bin_of(x[i]);
            let same: Vec<f64> = kept
                .iter()
                .filter(|&&j| bin_of(x[j]) == b)
                .map(|&j| x[j] - mean)
                .collect();
            out[i] = same.iter().sum::<f64>() / same.len() as f64 + mean;
        }
    }
    out
}
