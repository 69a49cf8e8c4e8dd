//! The replica store on burn: parameters on the host, gradients batched on the device.
//!
//! - **Rows on the host, copy-on-write.** Row `i < workers` is worker `i`'s model; rows after
//!   them are an algorithm's extra models (a parameter server's). Every row is its own buffer
//!   ([`crate::rows`]), so the optimizer step, averaging, mixing and block copies are `O(P)`
//!   loops over the rows they touch, with no tensor dispatch and nothing proportional to the
//!   number of rows. Message buffers (what a worker sent) are buffers of the same kind; a plain
//!   copy of a row shares the row's buffer until the row is next written.
//! - **Lazy, batched gradients.** [`ReplicaStore::request_gradient`] takes a reference to the
//!   worker's row (the snapshot it read, in `O(1)`) and draws its minibatch indices from the
//!   worker's data stream, and returns at once. The first time a result is needed, every pending
//!   request is evaluated together: snapshots stacked into `[R, params]` and uploaded in one
//!   transfer, minibatches gathered into `[R, batch, inputs]`, one forward and one backward pass
//!   on the autodiff device, gradients and losses read back in one transfer. Requests and uses
//!   come in event order, so the batches are the same on every run. A flush may be cut into
//!   groups ([`BurnStore::with_max_batch`]) and the groups evaluated on several threads
//!   ([`BurnStore::with_threads`]); each replica's gradient is computed on its own (a batched
//!   matrix product per replica, reductions over its own minibatch), so the numbers are the same
//!   for every grouping and every number of threads.
//! - **A mean at one point is one pass.** A mean of pending requests all read from rows of the
//!   same bits (all-reduce's, at every step) is one model's gradient on the union of their
//!   minibatches, and is computed so, on the models that treat each sample on its own
//!   ([`Model::fuses_means`]): one row uploaded, matrix products `R` times taller, one gradient
//!   read back, on the CPU in passes of [`fused_chunk`] requests whatever the threads and batch
//!   limit, on a GPU in one pass (or passes of the batch limit).
//! - **Losses follow the data.** Softmax cross-entropy for class labels, `½·(ŷ − y)²` for real
//!   targets ([`Loss`]), the mean over the minibatch, plus `½·l2·‖θ‖²` for the convex models.
//! - **Model state.** A model with batch normalization keeps its running statistics as the last
//!   `S` coordinates of the row ([`Model::state_len`], [`ReplicaStore::state`]). A training pass
//!   returns them updated; the gradient of a request carries, on those coordinates, the state
//!   delta in the row's units, `Δ = new state / scale − snapshot's state` (the change of the
//!   statistics of the model the pass ran on, `scale · snapshot`, times `1/scale`), instead of a
//!   derivative. Applying a gradient adds `Δ` to the row's state only if the row computed it (the
//!   requesting worker's row, or for a mean, the row of one of its inputs: the store remembers
//!   each gradient's owners); other rows get the optimizer step on the trainable prefix only (no
//!   learning rate, momentum or weight decay on the state in any case). This is the state rule
//!   of [`ReplicaStore::apply_gradient_block`]: running statistics are local to the replica
//!   whose passes produced them. [`ReplicaStore::mean_gradient`] averages `Δ` like the rest, so
//!   all-reduce keeps replicas equal. Averaging, mixing and messages treat the state like
//!   parameters, so the evaluated average carries the replicas' average statistics (the SGP
//!   reference gossips only parameters; see the book's "Batch-norm state"). Evaluation uses the
//!   running statistics.
//! - **Augmentation on the host.** With a non-identity [`Augment`], a request also builds its
//!   minibatch's features on the host, drawing from the worker's augmentation stream at request
//!   time (so the `k`-th minibatch of a worker is the same whatever the flush order), and the
//!   flush uploads them as `[R, batch, inputs]`. Without augmentation the minibatch is gathered
//!   on the device from the uploaded training split.
//! - **No autodiff outside the gradient pass.** Parameters, updates and evaluation live on the
//!   plain device; only the stacked snapshots of a flush are moved to the autodiff device, and
//!   their graph is consumed by the backward pass, so nothing leaks.
//! - **Few host reads.** A flush reads its gradients and per-replica losses in one transfer;
//!   training losses are summed on the host in request order. An evaluation runs the test split in chunks of [`EVAL_CHUNK`] samples and reads
//!   loss and accuracy in one transfer. The suboptimality of a convex model evaluates the
//!   training objective of its row in `f64` on the host ([`crate::convex`]).
//!
//! **Rooms.** This module holds the store's shape (its types, builders and the
//! [`ReplicaStore`] face); the rest is one room per concern: `flush` (the request queue, a
//! flush and fused means), `pass_burn` (the gradient pass through burn's autodiff),
//! `pass_cpu` (the pass and the evaluation through a model's CPU program), `eval` (held-out
//! evaluation and the convex objective), `host` (host views and slot combinations), `data`
//! (the splits where the passes read them) and `checkpoint` (the store's part of a run
//! checkpoint).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::tensor::{Device, Int, Tensor, TensorData, Transaction, activation};
use rayon::prelude::*;

use dasim_sim::clock::rng::{StreamKind, stream};
use dasim_sim::store::optim::Layout;
use dasim_sim::store::{
    Evaluation, GradId, HandleMap, MsgId, OptimizerConfig, OptimizerKind, ReplicaStore, Slot,
};

use crate::convex::Objective;
use crate::data::{Augment, Dataset, Sampler, Split, TargetKind};
use crate::layers::{CpuNet, Targets as HostTargets, with_inner_parallelism};
use crate::rows::{
    Blocks, Row, Rows, combine, combine_in_place_split, combine_into_split, mean_into_split,
    same_row,
};
use crate::spec::{Loss, Model};

mod checkpoint;
mod data;
mod eval;
mod flush;
mod host;
mod pass_burn;
mod pass_cpu;

use data::{CpuScratch, DeviceData, Held};

/// Requests per pass of a fused mean (all-reduce's: see `BurnStore::fused_mean`), at most. A
/// pass of 16 requests of 32 samples has matrix products 512 rows tall. The pass size depends
/// on the model and the minibatch only ([`fused_chunk`]), so that the grouping of the sum, and
/// so its bits, are the same for any threads and batch limit.
pub const FUSED_CHUNK: usize = 16;

/// Floating-point operations of a fused pass above which its requests are halved (to
/// `FUSED_CHUNK / 2`): one pass runs its elementwise work on one thread and splits only its
/// large products, so a 16-worker mean of a real model is faster as two passes side by side
/// (MLP784, two threads: 4.2–4.5 ms per mean against 4.8–5.3), where a small model's passes are
/// bound by burn's cost per operation and gain from being few.
pub const FUSED_PASS_FLOPS: f64 = 2e8;

/// Requests per pass of a fused mean of `model` at `batch` samples per request.
pub fn fused_chunk(model: &Model, batch: usize) -> usize {
    let flops = FUSED_CHUNK as f64 * batch as f64 * model.train_flops_per_sample();
    if flops > FUSED_PASS_FLOPS {
        FUSED_CHUNK / 2
    } else {
        FUSED_CHUNK
    }
}

/// Floating-point operations of a flush (its requests' forward and backward passes) from which
/// its requests are spread over several threads. Waking a sleeping thread costs tens of
/// microseconds, and each group of requests pays burn's fixed cost per operation again, so a
/// flush of a few small-model requests (the quickstart's sixteen: 7 MFLOP, mostly that fixed
/// cost) is faster on one thread; one request of MLP784 (20 MFLOP) is worth splitting. The
/// results are the same for any grouping.
pub const PARALLEL_FLUSH_FLOPS: f64 = 1e7;

/// Test samples per forward pass of an evaluation (bounds the memory of the convolutional
/// models' activations).
pub const EVAL_CHUNK: usize = 1000;

/// Terms of a combination gathered on the stack ([`BurnStore::with_slots`]).
const STACK_TERMS: usize = 4;

/// Counters of the batching, for reports and benchmarks.
///
/// The wall-clock durations are measured on the host for reporting only; nothing in a run
/// depends on them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreStats {
    /// Gradients requested.
    pub requests: u64,
    /// Flushes of pending requests the simulator asked for (independent of how they execute).
    pub flushes: u64,
    /// Forward/backward passes run: one per flush, or more where a flush was cut into groups
    /// for threads or a batch limit ([`Execution`]); an execution detail, not a result.
    pub passes: u64,
    /// Evaluations run.
    pub evaluations: u64,
    /// Means of gradients taken as one model's gradient on the union of their minibatches
    /// (all-reduce's; see [`BurnStore`]'s module documentation).
    pub fused_means: u64,
    /// Host wall time spent in batched forward/backward passes.
    pub gradient_wall: Duration,
    /// Host wall time spent evaluating.
    pub eval_wall: Duration,
    /// Floats copied because a row was written while a snapshot or a message still held it
    /// (at most `P` per write; see [`crate::rows`]).
    pub floats_copied: u64,
}

/// How a store executes a flush. Results never depend on it: outputs are byte-identical for
/// every value (on flex).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Execution {
    /// Threads a flush's requests are spread over (see [`BurnStore::with_threads`]).
    pub threads: usize,
    /// Requests per forward/backward pass at most (see [`BurnStore::with_max_batch`]).
    pub max_batch: Option<usize>,
}

impl Default for Execution {
    fn default() -> Self {
        Execution {
            threads: 1,
            max_batch: None,
        }
    }
}

/// A store the runner drives: the replica-store language plus its batching counters.
/// [`BurnStore`] for the network models, [`crate::quadratic::QuadraticStore`] for the synthetic
/// quadratic.
pub trait RunStore: ReplicaStore {
    /// Batching counters so far.
    fn stats(&self) -> StoreStats;
}

#[derive(Serialize, Deserialize)]
struct Pending {
    id: GradId,
    /// The row as it was read; the gradient is taken at `scale · snapshot`.
    snapshot: Row,
    scale: f64,
    batch: Vec<usize>,
    /// Augmented features of the minibatch (`batch × dim`), when augmentation is on.
    features: Option<Vec<f32>>,
}

/// A flush group's gradients as read back: per parameter block of the model, the `R`
/// requests' gradients on it, `[R, len]`, in request order. The blocks tile `0..P` in order.
struct ReadBack {
    parts: Vec<(Range<usize>, TensorData)>,
}

impl ReadBack {
    /// Request `i`'s gradient on part `k`.
    fn part(&self, k: usize, i: usize) -> &[f32] {
        let (range, data) = &self.parts[k];
        let data = data.as_slice::<f32>().expect("f32 gradients");
        &data[i * range.len()..(i + 1) * range.len()]
    }

    /// Request `i`'s whole gradient, copied into `out` (`P` long).
    fn copy_into(&self, i: usize, out: &mut [f32]) {
        for (k, (range, _)) in self.parts.iter().enumerate() {
            out[range.clone()].copy_from_slice(self.part(k, i));
        }
    }

    /// Request `i`'s gradient on `coords` (the state suffix) divided by `scale`, in `f64`.
    fn unscale(&mut self, i: usize, coords: &Range<usize>, scale: f64) {
        for (range, data) in &mut self.parts {
            let (lo, hi) = (range.start.max(coords.start), range.end.min(coords.end));
            if lo < hi {
                let data = data.as_mut_slice::<f32>().expect("f32 gradients");
                let row = i * range.len();
                for d in &mut data[row + lo - range.start..row + hi - range.start] {
                    *d = (f64::from(*d) / scale) as f32;
                }
            }
        }
    }
}

impl Blocks for ReadBack {
    fn block(&self, k: usize) -> &[f32] {
        self.parts[k].1.as_slice::<f32>().expect("f32 gradients")
    }
}

/// A computed gradient.
enum Ready {
    /// In its own buffer.
    Host(Arc<Vec<f32>>),
    /// Request `.1` of a flush group, still in the group's read-back blocks: a mean of such
    /// gradients reads them there, without copying each into its own buffer first.
    Read(Arc<ReadBack>, usize),
}

/// Targets on the device, one per sample.
enum Targets {
    Classes(Tensor<1, Int>),
    Real(Tensor<1>),
}

/// The targets of `R` minibatches of `B` samples.
enum BatchTargets {
    /// `[R, B, 1]` labels.
    Classes(Tensor<3, Int>),
    /// `[R, B]` values.
    Real(Tensor<2>),
}

impl BatchTargets {
    fn autodiff(self) -> Self {
        match self {
            BatchTargets::Classes(y) => BatchTargets::Classes(y.autodiff()),
            BatchTargets::Real(y) => BatchTargets::Real(y.autodiff()),
        }
    }
}

/// Every worker's replica, optimizer state, data shard and pending gradients, on one device.
pub struct BurnStore {
    device: Device,
    model: Model,
    loss: Loss,
    rows: Rows,
    optimizer: OptimizerConfig,
    /// The model's layers and hidden matrices, as the optimizer rules take them.
    layout: Layout,
    train: Held,
    /// Samples in an epoch ([`Dataset::epoch_samples`]).
    epoch_samples: usize,
    test: Held,
    /// The model's CPU program, on `flex` where the model has one: every gradient and
    /// evaluation runs there instead of on burn.
    cpu: Option<Arc<dyn CpuNet>>,
    dim: usize,
    batch: usize,
    samplers: Vec<Sampler>,
    augment: Augment,
    /// The training split on the host, kept only when augmentation is on.
    train_host: Option<Dataset>,
    objective: Option<Arc<Objective>>,
    pending: Vec<Pending>,
    ready: BTreeMap<GradId, Ready>,
    /// Gradients of past flushes that may still be [`Ready::Read`], in flush order.
    unread: Vec<GradId>,
    /// The rows that computed each live gradient (a mean's: its inputs' workers), sorted: the
    /// only rows its state part is added to.
    owners: BTreeMap<GradId, Vec<usize>>,
    /// Under `clip_norm`: the clipped copies of the live gradients that needed clipping, made
    /// at their first step ([`BurnStore::clipped`]; not checkpointed: they follow from the
    /// gradients).
    clipped: BTreeMap<GradId, Row>,
    /// Message buffers by handle: made, read and released several times per averaging (a
    /// hash probe each, where a `BTreeMap` walked its nodes).
    msgs: HandleMap<Row>,
    next_id: u64,
    /// Sum (in request order, in `f64`) and count of the training losses since the last read.
    train_loss: f64,
    train_loss_count: usize,
    threads: usize,
    /// Whether the device is `flex`: only there are a flush's requests spread over the threads.
    on_cpu: bool,
    /// [`PARALLEL_FLUSH_FLOPS`], or what [`BurnStore::with_parallel_flush_flops`] set.
    parallel_flops: f64,
    max_batch: Option<usize>,
    stats: StoreStats,
}

impl BurnStore {
    /// A store of `shards.len()` replicas of `model`, all initialized to the same parameters
    /// drawn from the run's init stream, on `device`. The loss follows the targets of `split`.
    ///
    /// # Panics
    /// For a model without a network: the quadratic (it runs on
    /// [`crate::quadratic::QuadraticStore`]) and a timing model (on
    /// [`crate::timing_store::TimingStore`]).
    pub fn new(
        device: Device,
        model: Model,
        split: &Split,
        shards: Vec<Vec<usize>>,
        batch: usize,
        optimizer: OptimizerConfig,
        seed: u64,
    ) -> Self {
        assert!(
            matches!(model, Model::Net(_)),
            "`{}` has no network: it runs on its own store (Problem::run_store)",
            model.name()
        );
        // Gradients are the blocks' gradients concatenated: the blocks must tile the row.
        let mut end = 0;
        for b in model.blocks() {
            assert_eq!(
                b.start,
                end,
                "{}: parameter blocks out of order",
                model.name()
            );
            end = b.end;
        }
        assert_eq!(
            end,
            model.num_params(),
            "{}: blocks do not cover the row",
            model.name()
        );
        let device = device.without_autodiff();
        let on_cpu = crate::backend::is_flex(&device);
        let cpu = if on_cpu { model.cpu_program() } else { None };
        let workers = shards.len();
        let init = model.init(&mut stream(seed, StreamKind::Init, 0));
        let rows = Rows::new(init, workers, &optimizer);
        let layout = Layout {
            layers: model.layers().into_iter().map(|l| l.params).collect(),
            hidden: model.hidden_matrices(),
        };
        let loss = match split.train.target {
            TargetKind::Classes(_) | TargetKind::Tokens(_) => Loss::CrossEntropy,
            TargetKind::Real => Loss::SquaredError,
        };
        BurnStore {
            train: Held::new(&split.train, &device, cpu.is_some()),
            epoch_samples: split.train.epoch_samples(),
            test: Held::new(&split.test, &device, cpu.is_some()),
            cpu,
            dim: split.train.dim,
            samplers: shards
                .into_iter()
                .enumerate()
                .map(|(w, shard)| Sampler::new(shard, seed, w))
                .collect(),
            device,
            model,
            loss,
            rows,
            optimizer,
            layout,
            batch,
            augment: Augment::default(),
            train_host: None,
            objective: None,
            pending: Vec::new(),
            ready: BTreeMap::new(),
            unread: Vec::new(),
            owners: BTreeMap::new(),
            clipped: BTreeMap::new(),
            msgs: HandleMap::new(),
            next_id: 0,
            train_loss: 0.0,
            train_loss_count: 0,
            threads: 1,
            on_cpu,
            parallel_flops: PARALLEL_FLUSH_FLOPS,
            max_batch: None,
            stats: StoreStats::default(),
        }
    }

    /// This store with every gradient and evaluation through burn's pass of the model, never its
    /// CPU program ([`Model::cpu_program`]): the reference the CPU programs are tested and
    /// benchmarked against, on `flex`. A store without a CPU program is unchanged.
    pub fn with_reference_pass(mut self) -> Self {
        if self.cpu.take().is_some() {
            let upload =
                |held: &Held| Held::Device(Box::new(DeviceData::upload(held.host(), &self.device)));
            self.train = upload(&self.train);
            self.test = upload(&self.test);
        }
        self
    }

    /// This store with a flush's requests evaluated on up to `threads` threads of the current
    /// rayon pool (at least 1): the pending requests of a flush of at least
    /// [`PARALLEL_FLUSH_FLOPS`] are cut into that many groups of nearly equal size on `flex`; on
    /// a GPU a flush stays one pass, and the threads share the rows' arithmetic only. The results
    /// do not depend on it.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self.rows.set_threads(self.threads);
        self
    }

    /// This store spreading over its threads every flush of at least `flops` floating-point
    /// operations instead of [`PARALLEL_FLUSH_FLOPS`] (0: every flush of several requests), for
    /// checks that the results do not depend on it.
    pub fn with_parallel_flush_flops(mut self, flops: f64) -> Self {
        self.parallel_flops = flops;
        self
    }

    /// This store with at most `max_batch` requests per forward/backward pass (`None`: all
    /// pending requests in one). Bounds the memory of a pass's activations; the results do not
    /// depend on it.
    pub fn with_max_batch(mut self, max_batch: Option<usize>) -> Self {
        self.max_batch = max_batch.map(|m| m.max(1));
        self
    }

    /// This store with training minibatches augmented by `augment` (see [`Augment::apply`]);
    /// `train` is the training split the store was built with. The identity keeps the
    /// device-side gather.
    pub fn with_augment(mut self, augment: Augment, train: &Dataset) -> Self {
        self.augment = augment;
        self.train_host = (!augment.is_identity()).then(|| train.clone());
        self
    }

    /// This store with the full-training-set objective of its (convex) model, for
    /// [`ReplicaStore::suboptimality`].
    pub fn with_objective(mut self, objective: Arc<Objective>) -> Self {
        self.objective = Some(objective);
        self
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The loss the store trains with.
    pub fn loss(&self) -> Loss {
        self.loss
    }

    /// The device the replicas live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Batching counters.
    pub fn stats(&self) -> StoreStats {
        StoreStats {
            floats_copied: self.rows.floats_copied(),
            ..self.stats
        }
    }
}

impl RunStore for BurnStore {
    fn stats(&self) -> StoreStats {
        self.stats
    }
}

impl ReplicaStore for BurnStore {
    fn workers(&self) -> usize {
        self.samplers.len()
    }

    fn rows(&self) -> usize {
        self.rows.len()
    }

    fn num_params(&self) -> usize {
        self.model.num_params()
    }

    fn batch_size(&self) -> usize {
        self.batch
    }

    fn train_size(&self) -> usize {
        self.epoch_samples
    }

    fn layers(&self) -> Vec<dasim_sim::store::Layer> {
        self.model.layers()
    }

    fn state(&self) -> Range<usize> {
        self.model.trainable().end..self.model.num_params()
    }

    fn add_rows(&mut self, count: usize) -> usize {
        self.rows.push_copies_of_first(count)
    }

    fn matrices(&self) -> Vec<dasim_sim::store::Matrix> {
        self.model.matrices()
    }

    fn hidden_matrices(&self) -> Vec<dasim_sim::store::Hidden> {
        self.model.hidden_matrices()
    }

    fn tensors(&self) -> Vec<Range<usize>> {
        self.model.tensors()
    }

    fn msg_values(&mut self, msg: MsgId) -> Vec<f64> {
        self.slot(Slot::Msg(msg))
            .iter()
            .map(|&v| f64::from(v))
            .collect()
    }

    fn msg_from_values(&mut self, values: &[f64]) -> MsgId {
        assert_eq!(
            values.len(),
            self.model.num_params(),
            "a buffer holds a whole row"
        );
        let mut buffer = self.rows.buffer();
        for (b, &v) in buffer.iter_mut().zip(values) {
            *b = v as f32;
        }
        let id = MsgId(self.next_id);
        self.next_id += 1;
        self.msgs.insert(id.0, Arc::new(buffer));
        id
    }

    fn gradient_values(&mut self, grad: GradId) -> Vec<f64> {
        let split = self.model.trainable().end;
        self.gradient(grad)[..split]
            .iter()
            .map(|&v| f64::from(v))
            .collect()
    }

    fn set_gradient_values(&mut self, grad: GradId, values: &[f64]) {
        let g = self.gradient(grad);
        let mut out = self.rows.buffer();
        out.copy_from_slice(&g);
        for (o, &v) in out.iter_mut().zip(values) {
            *o = v as f32;
        }
        self.rows.recycle(g);
        if let Some(c) = self.clipped.remove(&grad) {
            self.rows.recycle(c);
        }
        self.ready.insert(grad, Ready::Host(Arc::new(out)));
    }

    fn request_gradient_scaled(&mut self, worker: usize, scale: f64) -> GradId {
        let id = GradId(self.next_id);
        self.next_id += 1;
        let mut batch = Vec::with_capacity(self.batch);
        let sampler = &mut self.samplers[worker];
        sampler.next_batch(self.batch, &mut batch);
        let features = self.train_host.as_ref().map(|train| {
            let mut out = Vec::with_capacity(batch.len() * train.dim);
            self.augment
                .apply(train, &batch, sampler.augment_stream(), &mut out);
            out
        });
        self.owners.insert(id, vec![worker]);
        self.pending.push(Pending {
            id,
            snapshot: self.rows.share(worker),
            scale,
            batch,
            features,
        });
        self.stats.requests += 1;
        id
    }

    fn mean_gradient(&mut self, grads: &[GradId]) -> GradId {
        if let Some(mean) = self.fused_mean(grads) {
            return mean;
        }
        if grads.iter().any(|g| !self.ready.contains_key(g)) {
            self.flush();
        }
        let mut mean = self.rows.buffer();
        if grads
            .iter()
            .all(|g| matches!(self.ready.get(g), Some(Ready::Read(..))))
        {
            // Straight from the read-back blocks, block by block: per coordinate the same
            // operations as on copies, so the same bits.
            let terms: Vec<(Arc<ReadBack>, usize)> = grads
                .iter()
                .map(|g| match self.ready.remove(g) {
                    Some(Ready::Read(read, i)) => (read, i),
                    _ => unreachable!("checked above"),
                })
                .collect();
            for (k, (range, _)) in terms[0].0.parts.iter().enumerate() {
                let parts: Vec<&[f32]> = terms.iter().map(|(read, i)| read.part(k, *i)).collect();
                mean_into_split(&mut mean[range.clone()], &parts, self.threads);
            }
        } else {
            let parts: Vec<Arc<Vec<f32>>> = grads.iter().map(|&g| self.gradient(g)).collect();
            for g in grads {
                self.ready.remove(g);
            }
            let terms: Vec<&[f32]> = parts.iter().map(|p| &p[..]).collect();
            mean_into_split(&mut mean, &terms, self.threads);
            for part in parts {
                self.rows.recycle(part);
            }
        }
        self.insert_mean(grads, mean)
    }

    fn apply_gradient_block(&mut self, row: usize, grad: GradId, lr: f64, block: Range<usize>) {
        if block.is_empty() {
            return;
        }
        let split = self.model.trainable().end;
        if !self.ready.contains_key(&grad) {
            self.flush();
        }
        let owner = self
            .owners
            .get(&grad)
            .is_some_and(|o| o.binary_search(&row).is_ok());
        if owner
            && self.optimizer.kind == OptimizerKind::Sgd
            && self.optimizer.clip_norm.is_none()
            && let Some(Ready::Read(read, i)) = self.ready.get(&grad)
        {
            // A worker applying the gradient it computed, straight from the read-back blocks
            // and at once (it reads its row right after: its next request), so that nothing
            // keeps the blocks alive; any other use copies the flush's gradients out.
            let (read, i) = (Arc::clone(read), *i);
            let mut steps = Vec::new();
            for (k, (range, _)) in read.parts.iter().enumerate() {
                let at = i * range.len();
                let (lo, hi) = (range.start.max(block.start), range.end.min(block.end));
                if lo >= hi {
                    continue;
                }
                // The state part: the state delta, added (the row computed it).
                let state = lo.max(split)..hi;
                if !state.is_empty() {
                    let g = &read.block(k)[at + state.start - range.start..at + hi - range.start];
                    self.rows.add_block(row, g, state);
                }
                if lo < hi.min(split) {
                    // The gradient on `lo..` is at `at + lo − range.start..` of the block.
                    steps.push((k, at + lo - range.start, lo..hi.min(split)));
                }
            }
            let blocks: Arc<dyn Blocks> = read;
            self.rows
                .step_from_blocks(row, &blocks, &steps, lr, &self.optimizer);
            return;
        }
        let g = self.clipped(grad, split);
        // The state part of the block: the state delta, added only to a row that computed the
        // gradient (the state rule of `ReplicaStore::apply_gradient_block`).
        let state = block.start.max(split)..block.end;
        if !state.is_empty()
            && self
                .owners
                .get(&grad)
                .is_some_and(|o| o.binary_search(&row).is_ok())
        {
            self.rows.add_block(row, &g[state.clone()], state);
        }
        // The trainable part: the optimizer step.
        let block = block.start..block.end.min(split);
        if !block.is_empty() {
            // An SGD step is queued on the row, and applied with the others at its next read. A
            // mean of several workers' gradients (all-reduce's) goes to several rows, which
            // then share one settled result where their values were the same.
            let common = self.owners.get(&grad).is_some_and(|o| o.len() > 1);
            if common {
                self.rows
                    .step_common(row, &g, lr, block, &self.optimizer, &self.layout);
            } else {
                self.rows
                    .step_shared(row, &g, lr, block, &self.optimizer, &self.layout);
            }
        }
    }

    fn release_gradient(&mut self, grad: GradId) {
        self.owners.remove(&grad);
        if let Some(c) = self.clipped.remove(&grad) {
            self.rows.recycle(c);
        }
        match self.ready.remove(&grad) {
            Some(Ready::Host(g)) => self.rows.recycle(g),
            Some(Ready::Read(..)) => {}
            None => self.pending.retain(|p| p.id != grad),
        }
    }

    fn swap_optimizer_state(&mut self, a: usize, b: usize) {
        self.rows.swap_optimizer_state(a, b);
    }

    fn reset_optimizer_state(&mut self, row: usize) {
        self.rows.reset_optimizer_state(row);
    }

    fn average(&mut self, rows: &[usize]) {
        self.rows.average(rows);
    }

    fn mix(&mut self, dst: usize, terms: &[(Slot, f64)]) {
        self.settle(terms);
        // A mix led by the row itself (`x_i ← w·x_i + …`, push-sum's shares and receipts) is
        // done in the row's own buffer when nobody else holds it, with the same arithmetic.
        if let Some((&(Slot::Row(r), w0), rest)) = terms.split_first()
            && r == dst
            && rest.iter().all(|&(s, _)| s != Slot::Row(dst))
            && let Some(mut row) = self.rows.take_unique(dst)
        {
            self.with_slots(rest, |rest| {
                combine_in_place_split(&mut row, w0, rest, self.threads)
            });
            self.rows.set(dst, row);
            return;
        }
        // Otherwise the combination goes into a spare buffer and becomes the row: nothing is
        // copied, and the old buffer is a spare unless a snapshot or a message holds it.
        let value = self.combine_spare(terms);
        self.rows.set(dst, value);
    }

    fn new_msg(&mut self, terms: &[(Slot, f64)]) -> MsgId {
        let value = match *terms {
            // A plain copy shares the buffer (copied only if the row is written while it lives).
            [(Slot::Row(r), 1.0)] => self.rows.share(r),
            [(Slot::Msg(m), 1.0)] => Arc::clone(
                self.msgs
                    .get(m.0)
                    .unwrap_or_else(|| panic!("message buffer {m:?} was released or never made")),
            ),
            _ => Arc::new(self.combine_spare(terms)),
        };
        let id = MsgId(self.next_id);
        self.next_id += 1;
        self.msgs.insert(id.0, value);
        id
    }

    fn release_msg(&mut self, msg: MsgId) {
        if let Some(buffer) = self.msgs.remove(msg.0) {
            self.rows.recycle(buffer);
        }
    }

    fn copy_block(&mut self, dst: usize, src: usize, block: Range<usize>) {
        self.rows.copy_block(dst, src, block);
    }

    fn evaluate(&mut self) -> Evaluation {
        let mean = self.mean_of_workers();
        self.evaluate_model(mean)
    }

    fn evaluate_mix(&mut self, terms: &[(usize, f64)]) -> Evaluation {
        let terms: Vec<(Slot, f64)> = terms.iter().map(|&(r, w)| (Slot::Row(r), w)).collect();
        self.settle(&terms);
        let model = self.combine(&terms);
        self.evaluate_model(model)
    }

    fn take_train_loss(&mut self) -> f64 {
        let count = std::mem::take(&mut self.train_loss_count);
        let sum = std::mem::take(&mut self.train_loss);
        if count > 0 {
            sum / count as f64
        } else {
            f64::NAN
        }
    }

    /// Computed on the host in `f64` on the differences to the first replica,
    /// `d_i = s_i·x_i − s_0·x_0`, so that equal replicas give exactly 0.
    fn consensus_distance(&mut self, scales: Option<&[f64]>) -> f64 {
        let n = self.workers();
        let p = self.model.num_params();
        let scale = |i: usize| scales.map_or(1.0, |s| s[i]);
        self.rows.settle_all();
        let first = self.rows.get(0);
        let s0 = scale(0);
        let d = |i: usize, k: usize| {
            scale(i) * f64::from(self.rows.get(i)[k]) - s0 * f64::from(first[k])
        };
        // Two passes: the mean difference d̄, then Σ_i ‖d_i − d̄‖².
        let mut mean = vec![0.0f64; p];
        for i in 0..n {
            for (k, m) in mean.iter_mut().enumerate() {
                *m += d(i, k);
            }
        }
        for m in &mut mean {
            *m /= n as f64;
        }
        let mut sum = 0.0;
        for i in 0..n {
            for (k, m) in mean.iter().enumerate() {
                let c = d(i, k) - m;
                sum += c * c;
            }
        }
        sum / n as f64
    }

    fn save_state(&mut self) -> Result<Vec<u8>, String> {
        self.save()
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), String> {
        self.restore(state)
    }

    fn suboptimality(&mut self, terms: Option<&[(usize, f64)]>) -> Option<f64> {
        let objective = self.objective.clone()?;
        objective.optimum()?;
        let theta = self.model_host(terms, true)?;
        objective.suboptimality(&theta)
    }
}
