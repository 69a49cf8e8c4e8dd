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

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::tensor::{Device, Int, Tensor, TensorData, Transaction, activation};
use rayon::prelude::*;

use dasim_sim::clock::rng::{StreamKind, stream};
use dasim_sim::params::{
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

struct DeviceData {
    /// `[len, dim]` samples; a text's token stream `[tokens, 1]`, which its windows view.
    x: Tensor<2>,
    y: Targets,
    len: usize,
    /// A text's windows: `(stride, window)`; `None` for datasets of separate samples.
    windows: Option<(usize, usize)>,
}

impl DeviceData {
    fn upload(data: &Dataset, device: &Device) -> Self {
        if let TargetKind::Tokens(_) = data.target {
            let n = data.features.len();
            let tokens: Vec<i64> = data.features.iter().map(|&t| t as i64).collect();
            return DeviceData {
                x: Tensor::from_data(TensorData::new(data.features.clone(), [n, 1]), device),
                y: Targets::Classes(Tensor::from_data(TensorData::new(tokens, [n]), device)),
                len: data.len(),
                windows: Some((data.stride, data.dim)),
            };
        }
        let x = Tensor::from_data(
            TensorData::new(data.features.clone(), [data.len(), data.dim]),
            device,
        );
        let y = match data.target {
            TargetKind::Classes(_) => {
                let labels: Vec<i64> = data.labels.iter().map(|&l| i64::from(l)).collect();
                Targets::Classes(Tensor::from_data(
                    TensorData::new(labels, [data.len()]),
                    device,
                ))
            }
            TargetKind::Real => Targets::Real(Tensor::from_data(
                TensorData::new(data.values.clone(), [data.len()]),
                device,
            )),
            TargetKind::Tokens(_) => unreachable!("handled above"),
        };
        DeviceData {
            x,
            y,
            len: data.len(),
            windows: None,
        }
    }

    /// A text's windows `samples` as positions in its token stream: the window's tokens
    /// (`[n·window]`), and the positions the window predicts, each one ahead of an input
    /// (`[n·(window − 1)]`).
    fn window_positions(
        &self,
        samples: impl Iterator<Item = usize>,
    ) -> (Tensor<1, Int>, Tensor<1, Int>) {
        let (stride, window) = self.windows.expect("a text");
        let mut inputs = Vec::new();
        let mut targets = Vec::new();
        for i in samples {
            let start = (i * stride) as i64;
            inputs.extend(start..start + window as i64);
            targets.extend(start + 1..start + window as i64);
        }
        let device = self.x.device();
        let (ni, nt) = (inputs.len(), targets.len());
        (
            Tensor::from_data(TensorData::new(inputs, [ni]), &device),
            Tensor::from_data(TensorData::new(targets, [nt]), &device),
        )
    }

    /// The windows `samples` (`r·b` of them) of a text: inputs `[r, b, window]` and the
    /// targets of their `window − 1` positions, `[r, b·(window − 1), 1]`.
    fn windows(
        &self,
        samples: impl Iterator<Item = usize>,
        r: usize,
        b: usize,
    ) -> (Tensor<3>, BatchTargets) {
        let (_, window) = self.windows.expect("a text");
        let (inputs, targets) = self.window_positions(samples);
        let x = self.x.clone().select(0, inputs).reshape([r, b, window]);
        let Targets::Classes(tokens) = &self.y else {
            unreachable!("a text's targets are its tokens")
        };
        let y = tokens
            .clone()
            .select(0, targets)
            .reshape([r, b * (window - 1), 1]);
        (x, BatchTargets::Classes(y))
    }

    /// The targets of the samples `idx` (`R·B` of them), shaped for `R` minibatches.
    fn select(&self, idx: Tensor<1, Int>, r: usize, b: usize) -> BatchTargets {
        match &self.y {
            Targets::Classes(y) => {
                BatchTargets::Classes(y.clone().select(0, idx).reshape([r, b, 1]))
            }
            Targets::Real(y) => BatchTargets::Real(y.clone().select(0, idx).reshape([r, b])),
        }
    }

    /// The samples `range`, as one minibatch.
    fn rows(&self, range: Range<usize>) -> (Tensor<3>, BatchTargets) {
        let b = range.len();
        if self.windows.is_some() {
            return self.windows(range, 1, b);
        }
        let dim = self.x.dims()[1];
        let x = self
            .x
            .clone()
            .slice_dim(0, range.clone())
            .reshape([1, b, dim]);
        let y = match &self.y {
            Targets::Classes(y) => {
                BatchTargets::Classes(y.clone().slice_dim(0, range).reshape([1, b, 1]))
            }
            Targets::Real(y) => BatchTargets::Real(y.clone().slice_dim(0, range).reshape([1, b])),
        };
        (x, y)
    }
}

/// A thread's buffers for gathering a minibatch on the CPU path.
#[derive(Default)]
struct CpuScratch {
    params: Vec<f32>,
    x: Vec<f32>,
    labels: Vec<u32>,
    values: Vec<f32>,
}

/// Where the store keeps a split: on the device for burn's passes, or on the host for a
/// model's CPU program ([`CpuNet`], on `flex`), which reads it in place.
enum Held {
    Device(Box<DeviceData>),
    Host(Dataset),
}

impl Held {
    fn new(data: &Dataset, device: &Device, host: bool) -> Self {
        if host {
            Held::Host(data.clone())
        } else {
            Held::Device(Box::new(DeviceData::upload(data, device)))
        }
    }

    fn len(&self) -> usize {
        match self {
            Held::Device(d) => d.len,
            Held::Host(d) => d.len(),
        }
    }

    /// The split on the device, for burn's passes.
    fn device(&self) -> &DeviceData {
        match self {
            Held::Device(d) => d,
            Held::Host(_) => unreachable!("burn's passes run off the CPU path only"),
        }
    }

    /// The split on the host, for the CPU programs.
    fn host(&self) -> &Dataset {
        match self {
            Held::Host(d) => d,
            Held::Device(_) => unreachable!("the CPU programs run on flex only"),
        }
    }
}

/// What a checkpoint keeps of a [`BurnStore`], borrowed for writing ([`BurnState`] reads it
/// back): everything that changes while a run goes on. The model, the data on the device and
/// the configuration are rebuilt with the store.
#[derive(Serialize)]
struct BurnStateRef<'a> {
    rows: &'a Rows,
    samplers: &'a [Sampler],
    pending: &'a [Pending],
    ready: &'a BTreeMap<GradId, Arc<Vec<f32>>>,
    owners: &'a BTreeMap<GradId, Vec<usize>>,
    msgs: BTreeMap<MsgId, Row>,
    next_id: u64,
    train_loss: (f64, usize),
    stats: StoreStats,
}

/// [`BurnStateRef`], owned.
#[derive(Deserialize)]
struct BurnState {
    rows: Rows,
    samplers: Vec<Sampler>,
    pending: Vec<Pending>,
    ready: BTreeMap<GradId, Arc<Vec<f32>>>,
    owners: BTreeMap<GradId, Vec<usize>>,
    msgs: BTreeMap<MsgId, Row>,
    next_id: u64,
    train_loss: (f64, usize),
    stats: StoreStats,
}

/// Every worker's replica, optimizer state, data shard and pending gradients, on one device.
pub struct BurnStore {
    device: Device,
    model: Model,
    loss: Loss,
    rows: Rows,
    optimizer: OptimizerConfig,
    /// The model's layers' parameter ranges (LARS's trust ratio is per layer).
    layers: Vec<Range<usize>>,
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
        let layers = model.layers().into_iter().map(|l| l.params).collect();
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
            layers,
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

    /// Parameter buffers alive (rows, snapshots of pending requests, messages, gradients), in
    /// floats: what the store holds on the host now. Rows shared between a snapshot and its row
    /// count once.
    pub fn floats_held(&mut self) -> usize {
        self.rows.settle_all();
        let mut seen = std::collections::BTreeSet::new();
        let mut floats = 0;
        let mut count = |ptr: *const f32, len: usize| {
            if seen.insert(ptr as usize) {
                floats += len;
            }
        };
        for r in 0..self.rows.len() {
            count(self.rows.get(r).as_ptr(), self.rows.width());
        }
        for p in &self.pending {
            count(p.snapshot.as_ptr(), p.snapshot.len());
        }
        for m in self.msgs.values() {
            count(m.as_ptr(), m.len());
        }
        for g in self.ready.values() {
            match g {
                Ready::Host(g) => count(g.as_ptr(), g.len()),
                Ready::Read(read, _) => {
                    for (_, data) in &read.parts {
                        let data = data.as_slice::<f32>().expect("f32 gradients");
                        count(data.as_ptr(), data.len());
                    }
                }
            }
        }
        floats
    }

    /// `f*`, the minimum of the training objective, for the convex models where it is known
    /// (see [`crate::convex`]); computed on first use.
    pub fn optimum(&self) -> Option<f64> {
        self.objective.as_ref()?.optimum().map(|o| o.value)
    }

    /// The training objective `f` (mean training loss plus the L2 term, in `f64` on the host)
    /// of the model `Σ weight · row` over `terms`, or of the average of the worker rows for
    /// `None`; `None` for models without a convex objective.
    pub fn objective(&mut self, terms: Option<&[(usize, f64)]>) -> Option<f64> {
        let theta = self.model_host(terms, self.objective.is_some())?;
        Some(self.objective.as_ref()?.value(&theta))
    }

    fn model_host(&mut self, terms: Option<&[(usize, f64)]>, wanted: bool) -> Option<Vec<f64>> {
        if !wanted {
            return None;
        }
        let model = match terms {
            Some(terms) => {
                let terms: Vec<(Slot, f64)> =
                    terms.iter().map(|&(r, w)| (Slot::Row(r), w)).collect();
                self.settle(&terms);
                self.combine(&terms)
            }
            None => self.mean_of_workers(),
        };
        Some(model.into_iter().map(f64::from).collect())
    }

    /// All replicas, read back to the host (row-major `[workers, params]`).
    pub fn params_host(&self) -> Vec<f32> {
        (0..self.rows.len())
            .flat_map(|r| self.rows.value(r))
            .collect()
    }

    /// Overwrites row `row` (for tests that start replicas from distinct models).
    pub fn set_params_host(&mut self, row: usize, values: &[f32]) {
        assert_eq!(
            values.len(),
            self.model.num_params(),
            "one value per parameter"
        );
        self.rows.set(row, values.to_vec());
    }

    /// A requested gradient, read back to the host (evaluating pending requests if needed).
    pub fn gradient_host(&mut self, grad: GradId) -> Vec<f32> {
        self.gradient(grad).as_ref().clone()
    }

    /// The features of the `k`-th pending request's minibatch as the gradient pass will see
    /// them (`batch × dim`, augmented if augmentation is on), and its sample indices; for checks.
    pub fn pending_batch_host(&self, k: usize) -> (Vec<usize>, Vec<f32>) {
        let p = &self.pending[k];
        let features = match &p.features {
            Some(f) => f.clone(),
            None => match &self.train {
                Held::Host(train) => p
                    .batch
                    .iter()
                    .flat_map(|&i| train.sample(i))
                    .copied()
                    .collect(),
                Held::Device(_) => {
                    let (x, _) = self.minibatches(1, &p.batch, None);
                    x.into_data().try_into_vec().expect("f32 features")
                }
            },
        };
        (p.batch.clone(), features)
    }

    /// Gradient `id` as a step applies it: clipped by `clip_norm` over its trainable part
    /// `..split` (the state delta after it is not a gradient, and is kept as it is). The
    /// clipped copy is made once per gradient and kept until the gradient is released, so the
    /// rows a mean is applied to share it.
    fn clipped(&mut self, id: GradId, split: usize) -> Arc<Vec<f32>> {
        let g = self.gradient(id);
        if self.optimizer.clip_norm.is_none() {
            return g;
        }
        if let Some(c) = self.clipped.get(&id) {
            return Arc::clone(c);
        }
        let norm = g[..split]
            .iter()
            .map(|v| f64::from(*v) * f64::from(*v))
            .sum::<f64>()
            .sqrt();
        let c = self.optimizer.clip_factor(norm);
        if c >= 1.0 {
            return g;
        }
        let mut scaled = self.rows.buffer();
        for (s, v) in scaled[..split].iter_mut().zip(&g[..split]) {
            *s = (f64::from(*v) * c) as f32;
        }
        scaled[split..].copy_from_slice(&g[split..]);
        let scaled = Arc::new(scaled);
        self.clipped.insert(id, Arc::clone(&scaled));
        scaled
    }

    fn gradient(&mut self, id: GradId) -> Arc<Vec<f32>> {
        // One lookup when it is in its buffer (nearly always: DASGD applies each gradient `n`
        // times).
        if let Some(Ready::Host(g)) = self.ready.get(&id) {
            return Arc::clone(g);
        }
        if !self.ready.contains_key(&id) {
            self.flush();
        }
        self.copy_out();
        match self.ready.get(&id) {
            Some(Ready::Host(g)) => Arc::clone(g),
            _ => panic!("gradient {id:?} was released or never requested"),
        }
    }

    /// Copies every gradient still in its flush's read-back blocks into a buffer of its own
    /// (spread over the threads when long), for a use other than a mean: the copy a flush would
    /// otherwise make of each, made at the first such use instead.
    fn copy_out(&mut self) {
        if self.unread.is_empty() {
            return;
        }
        let started = Instant::now();
        let mut work: Vec<(GradId, Arc<ReadBack>, usize, Vec<f32>)> = Vec::new();
        for id in std::mem::take(&mut self.unread) {
            if matches!(self.ready.get(&id), Some(Ready::Read(..)))
                && let Some(Ready::Read(read, i)) = self.ready.remove(&id)
            {
                work.push((id, read, i, self.rows.buffer()));
            }
        }
        let floats = work.len() * self.rows.width();
        if self.threads > 1 && work.len() > 1 && floats >= crate::rows::PARALLEL_FLOATS {
            let per_thread = work.len().div_ceil(self.threads);
            work.par_iter_mut()
                .with_min_len(per_thread)
                .for_each(|(_, read, i, out)| read.copy_into(*i, out));
        } else {
            for (_, read, i, out) in &mut work {
                read.copy_into(*i, out);
            }
        }
        for (id, _, _, out) in work {
            self.ready.insert(id, Ready::Host(Arc::new(out)));
        }
        self.stats.gradient_wall += started.elapsed();
    }

    /// Evaluates every pending request: in one batched forward/backward pass, or in groups of
    /// at most `max_batch`, cut further so that each of `threads` threads has one.
    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        // A past flush's gradient still in its blocks (one no mean has used, as a crashed
        // worker's) gets its own buffer now, so that it keeps no more than that alive.
        self.copy_out();
        let started = Instant::now();
        let pending = std::mem::take(&mut self.pending);
        let r = pending.len();
        // A flush too small to gain from a second thread stays on this one: waking a sleeping
        // thread costs tens of microseconds here, more than a small model's whole flush. On a
        // GPU a flush is one pass whatever the threads: the device runs the replicas in
        // parallel already, and each more pass pays the launches and the read-back again.
        let flops = r as f64 * self.batch as f64 * self.model.train_flops_per_sample();
        let threads = if flops < self.parallel_flops || !self.on_cpu {
            1
        } else {
            self.threads
        };
        if let Some(cpu) = self.cpu.clone() {
            self.cpu_flush(&*cpu, pending, threads);
            self.stats.gradient_wall += started.elapsed();
            return;
        }
        let groups = r.div_ceil(self.max_batch.unwrap_or(r)).max(threads.min(r));
        let bounds = dasim_sim::params::blocks(r, groups);
        let results: Vec<(ReadBack, Vec<f32>)> = if groups > 1 && threads > 1 {
            bounds
                .par_iter()
                .map(|b| self.group_gradients(&pending[b.clone()]))
                .collect()
        } else {
            bounds
                .iter()
                .map(|b| self.group_gradients(&pending[b.clone()]))
                .collect()
        };
        let mut pending = pending.into_iter();
        let state = self.model.trainable().end..self.model.num_params();
        for (mut read, losses) in results {
            let group: Vec<Pending> = pending.by_ref().take(losses.len()).collect();
            for (i, q) in group.iter().enumerate() {
                if q.scale != 1.0 {
                    // The state delta in the row's units: a row read at `scale` holds the
                    // statistics times `1/scale` (push-sum's numerator `w·z`).
                    read.unscale(i, &state, q.scale);
                }
            }
            // The gradients stay in the read-back blocks until a use other than a mean
            // ([`BurnStore::copy_out`]).
            let read = Arc::new(read);
            for (i, (q, loss)) in group.into_iter().zip(losses).enumerate() {
                self.ready.insert(q.id, Ready::Read(Arc::clone(&read), i));
                self.unread.push(q.id);
                self.rows.recycle(q.snapshot);
                self.train_loss += f64::from(loss);
            }
            self.stats.passes += 1;
        }
        self.stats.flushes += 1;
        self.train_loss_count += r;
        self.stats.gradient_wall += started.elapsed();
    }

    /// The mean of `grads` as one model's gradient on the union of their minibatches, where
    /// that is what it is: every input still pending, all read at the same scale from rows of
    /// the same bits, on a model whose mean is so taken ([`Model::fuses_means`]).
    /// All-reduce's mean is such a mean at every step (its replicas hold the same bits from
    /// the first step to the last). Then `Σ_r ∇ℓ_r(θ) / R = ∇(Σ_r ℓ_r / R)(θ)`: one pass of
    /// `R · batch` samples through one copy of the parameters instead of `R` replicas' passes
    /// and a mean over `R` gradients, with matrix products `R` times taller, one row uploaded
    /// and one gradient read back. On the CPU the requests go in passes of [`fused_chunk`] (in
    /// the order of `grads`), whose gradients are summed in that order: the same bits for any
    /// threads and `max_batch`. On a GPU they go in one pass, or passes of `max_batch`, as a
    /// flush does. The per-request losses are each request's own, as in a flush. `None`
    /// (nothing done) where the mean is not such a mean.
    fn fused_mean(&mut self, grads: &[GradId]) -> Option<GradId> {
        if grads.len() < 2 || !self.model.fuses_means() {
            return None;
        }
        // Pending requests are in request order, so by handle.
        let at: Vec<usize> = grads
            .iter()
            .map(|g| self.pending.binary_search_by_key(g, |p| p.id).ok())
            .collect::<Option<_>>()?;
        let first = &self.pending[at[0]];
        let same = at[1..].iter().all(|&i| {
            let q = &self.pending[i];
            q.scale == first.scale && same_row(&q.snapshot, &first.snapshot)
        });
        if !same {
            return None;
        }
        let started = Instant::now();
        let mut slots: Vec<Option<Pending>> = std::mem::take(&mut self.pending)
            .into_iter()
            .map(Some)
            .collect();
        let taken: Vec<Pending> = at
            .iter()
            .map(|&i| slots[i].take().expect("a gradient listed twice in a mean"))
            .collect();
        self.pending = slots.into_iter().flatten().collect();
        let r = taken.len();
        // On the CPU the passes are fixed by the model and the minibatch, so the bits are the
        // same for any threads and batch limit. On a GPU (whose sums are not bit-reproducible
        // anyway) a pass is bound by launches and the read-back, not by arithmetic: the mean is
        // one pass, or passes of `max_batch` requests, as a flush is.
        let chunk = if self.on_cpu {
            fused_chunk(&self.model, self.batch)
        } else {
            self.max_batch.unwrap_or(r)
        };
        let chunks: Vec<&[Pending]> = taken.chunks(chunk).collect();
        let flops = r as f64 * self.batch as f64 * self.model.train_flops_per_sample();
        let parallel =
            chunks.len() > 1 && self.threads > 1 && self.on_cpu && flops >= self.parallel_flops;
        let weight = 1.0 / r as f64;
        let results: Vec<(ReadBack, Vec<f32>)> = if parallel {
            chunks
                .par_iter()
                .map(|c| self.fused_gradient(c, weight))
                .collect()
        } else {
            chunks
                .iter()
                .map(|c| self.fused_gradient(c, weight))
                .collect()
        };
        let passes = chunks.len() as u64;
        let mut mean = self.rows.buffer();
        let mut results = results.into_iter();
        let (read, losses) = results.next().expect("at least one chunk");
        read.copy_into(0, &mut mean);
        let mut all_losses = losses;
        for (read, losses) in results {
            for (k, (range, _)) in read.parts.iter().enumerate() {
                for (m, g) in mean[range.clone()].iter_mut().zip(read.part(k, 0)) {
                    *m += g;
                }
            }
            all_losses.extend(losses);
        }
        for (q, loss) in taken.into_iter().zip(all_losses) {
            self.rows.recycle(q.snapshot);
            self.train_loss += f64::from(loss);
        }
        self.train_loss_count += r;
        self.stats.passes += passes;
        self.stats.flushes += 1;
        self.stats.fused_means += 1;
        self.stats.gradient_wall += started.elapsed();
        Some(self.insert_mean(grads, mean))
    }

    /// A new gradient holding `mean`, the mean of `grads`, owned by their owners.
    fn insert_mean(&mut self, grads: &[GradId], mean: Vec<f32>) -> GradId {
        let mut owners = Vec::new();
        for g in grads {
            owners.extend(self.owners.remove(g).unwrap_or_default());
        }
        owners.sort_unstable();
        owners.dedup();
        let id = GradId(self.next_id);
        self.next_id += 1;
        self.ready.insert(id, Ready::Host(Arc::new(mean)));
        self.owners.insert(id, owners);
        id
    }

    /// `weight` times the gradient of the sum of `chunk`'s losses, all its requests read from
    /// the first one's snapshot: one model on the chunk's `R · batch` samples. Read back as
    /// one row of blocks, with the `R` requests' own losses.
    fn fused_gradient(&self, chunk: &[Pending], weight: f64) -> (ReadBack, Vec<f32>) {
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
    fn with_l2(&self, losses: Tensor<1>, leaves: &[Tensor<2>]) -> Tensor<1> {
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

    /// The training indices of `requests`' minibatches, one after the other, and their
    /// augmented features when they have them.
    fn requests_batches(&self, requests: &[Pending]) -> (Vec<usize>, Option<Vec<f32>>) {
        let r = requests.len();
        let mut indices = Vec::with_capacity(r * self.batch);
        let mut features = requests[0]
            .features
            .is_some()
            .then(|| Vec::with_capacity(r * self.batch * self.dim));
        for q in requests {
            indices.extend_from_slice(&q.batch);
            if let (Some(all), Some(f)) = (features.as_mut(), q.features.as_ref()) {
                all.extend_from_slice(f);
            }
        }
        (indices, features)
    }

    /// A flush on the CPU path: each request's gradient through the model's CPU program,
    /// into a spare buffer of the rows, the requests spread over `threads` threads one by one
    /// (a replica's pass is single-threaded and the same whichever thread runs it).
    fn cpu_flush(&mut self, cpu: &dyn CpuNet, pending: Vec<Pending>, threads: usize) {
        let r = pending.len();
        let mut grads: Vec<Vec<f32>> = (0..r).map(|_| self.rows.buffer()).collect();
        // A replica per thread where the requests fill the threads evenly enough; otherwise
        // one request after another, each spreading its layers over the threads.
        let by_request = threads > 1 && (r == threads || r >= 2 * threads);
        let run = |(q, g): (&Pending, &mut Vec<f32>)| {
            let (batch, features) = (&q.batch, q.features.as_deref());
            with_inner_parallelism(!by_request, || {
                self.cpu_gradient(cpu, &q.snapshot, q.scale, batch, features, g)
            })
        };
        let losses: Vec<f32> = if by_request {
            pending
                .par_iter()
                .zip(grads.par_iter_mut())
                .map(run)
                .collect()
        } else {
            pending.iter().zip(grads.iter_mut()).map(run).collect()
        };
        let state = self.model.trainable().end..self.model.num_params();
        for ((q, mut g), loss) in pending.into_iter().zip(grads).zip(losses) {
            if q.scale != 1.0 {
                // The state delta in the row's units (see `flush`).
                for v in &mut g[state.clone()] {
                    *v = (f64::from(*v) / q.scale) as f32;
                }
            }
            self.ready.insert(q.id, Ready::Host(Arc::new(g)));
            self.rows.recycle(q.snapshot);
            self.train_loss += f64::from(loss);
        }
        self.stats.passes += r as u64;
        self.stats.flushes += 1;
        self.train_loss_count += r;
    }

    /// Gradients and losses `[R]` of a group of requests, read back in one transfer.
    fn group_gradients(&self, group: &[Pending]) -> (ReadBack, Vec<f32>) {
        let (indices, features) = self.requests_batches(group);
        let rows: Vec<(&[f32], f64)> = group.iter().map(|q| (&q.snapshot[..], q.scale)).collect();
        let blocks = self.block_tensors(&rows);
        let (parts, losses) = self.batched_gradient(blocks, &indices, features);
        Self::read_gradients(parts, losses)
    }

    /// Rows, each read at its scale, as one tensor `[R, len]` per block of the model's
    /// [`Model::blocks`], each gathered contiguous on the host and uploaded once. (Uploading
    /// `[R, P]` and slicing it on the device cost two more passes over the rows: the stacking,
    /// and the copy that makes each strided slice contiguous for its matrix product.)
    fn block_tensors(&self, rows: &[(&[f32], f64)]) -> Vec<Tensor<2>> {
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
    fn minibatches(
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
    fn losses(
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
    fn data_loss(out: Tensor<3>, y: BatchTargets) -> Tensor<1> {
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
    fn batched_gradient(
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

    /// The gradient of the row `row` read at `scale` on the minibatch `batch` (training
    /// indices, or the augmented `features` when there are any) through the model's CPU
    /// program, into `grad` (`P`), with the state delta on the state suffix as
    /// [`BurnStore::batched_gradient`]'s; returns the minibatch's mean loss. The minibatch is
    /// gathered into this thread's scratch buffers.
    fn cpu_gradient(
        &self,
        cpu: &dyn CpuNet,
        row: &[f32],
        scale: f64,
        batch: &[usize],
        features: Option<&[f32]>,
        grad: &mut [f32],
    ) -> f32 {
        thread_local! {
            static SCRATCH: std::cell::RefCell<CpuScratch> = Default::default();
        }
        let train = self.train.host();
        let dim = train.dim;
        SCRATCH.with(|scratch| {
            let CpuScratch {
                params,
                x,
                labels,
                values,
            } = &mut *scratch.borrow_mut();
            let params: &[f32] = if scale == 1.0 {
                row
            } else {
                let s = scale as f32;
                params.clear();
                params.extend(row.iter().map(|&v| v * s));
                params
            };
            x.clear();
            match features {
                Some(f) => x.extend_from_slice(f),
                None => {
                    for &i in batch {
                        x.extend_from_slice(train.sample(i));
                    }
                }
            }
            let targets = match train.target {
                TargetKind::Tokens(_) => {
                    // Every position's target is the window's next token.
                    labels.clear();
                    for window in x.chunks(dim) {
                        labels.extend(window[1..].iter().map(|&t| t as u32));
                    }
                    HostTargets::Tokens(labels)
                }
                TargetKind::Classes(_) => {
                    labels.clear();
                    labels.extend(batch.iter().map(|&i| train.labels[i]));
                    HostTargets::Classes(labels)
                }
                TargetKind::Real => {
                    values.clear();
                    values.extend(batch.iter().map(|&i| train.values[i]));
                    HostTargets::Real(values)
                }
            };
            let b = batch.len();
            let per_sample = cpu.train(params, x, targets, 1.0 / b as f32, grad);
            // The state part holds the new state: its change from the state read.
            for k in self.model.trainable().end..self.model.num_params() {
                grad[k] -= params[k];
            }
            let sum: f64 = per_sample.iter().map(|&l| f64::from(l)).sum();
            (sum / b as f64) as f32
        })
    }

    /// Held-out loss and accuracy of `model` on the CPU path: the test split in chunks of a
    /// minibatch's size (spread over the store's threads; each reuses its thread's buffers of
    /// a training pass), each sample's (or a text's each position's) loss summed in order in
    /// `f64`.
    fn cpu_evaluate(&self, cpu: &dyn CpuNet, model: &[f32]) -> Evaluation {
        let test = self.test.host();
        let n = test.len();
        let k = cpu.outputs();
        // A text's windows predict `window − 1` positions each, every one scored.
        let positions = test.positions_per_sample();
        let chunk = |range: Range<usize>| -> Vec<(f64, bool)> {
            let mut x = Vec::with_capacity(self.batch * test.dim);
            for i in range.clone() {
                x.extend_from_slice(test.sample(i));
            }
            // The last chunk is padded with zero samples to a whole minibatch, so that it runs
            // on the same buffers; evaluation treats each sample on its own.
            x.resize(self.batch * test.dim, 0.0);
            if let TargetKind::Tokens(_) = test.target {
                let labels: Vec<u32> = x
                    .chunks(test.dim)
                    .flat_map(|w| w[1..].iter().map(|&t| t as u32))
                    .collect();
                if let Some(scored) = cpu.infer_scored(model, &x, self.batch, &labels) {
                    return scored[..range.len() * positions]
                        .iter()
                        .map(|&(l, c)| (f64::from(l), c))
                        .collect();
                }
            }
            let mut out = vec![0.0f32; self.batch * positions * k];
            cpu.infer(model, &x, self.batch, &mut out);
            let mut scored = Vec::with_capacity(range.len() * positions);
            for (j, i) in range.enumerate() {
                for t in 0..positions {
                    let at = (j * positions + t) * k;
                    let o = &out[at..at + k];
                    let label = match test.target {
                        TargetKind::Classes(_) => test.labels[i] as usize,
                        TargetKind::Tokens(_) => x[j * test.dim + t + 1] as usize,
                        TargetKind::Real => {
                            let e = f64::from(o[0]) - f64::from(test.values[i]);
                            scored.push((0.5 * e * e, false));
                            continue;
                        }
                    };
                    let max = o.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let log_sum = o.iter().map(|&v| (v - max).exp()).sum::<f32>().ln() + max;
                    let best = o
                        .iter()
                        .enumerate()
                        .fold(0, |b, (c, &v)| if v > o[b] { c } else { b });
                    scored.push((f64::from(log_sum - o[label]), best == label));
                }
            }
            scored
        };
        let ranges: Vec<Range<usize>> = (0..n)
            .step_by(self.batch)
            .map(|s| s..(s + self.batch).min(n))
            .collect();
        let parts: Vec<Vec<(f64, bool)>> = if self.threads > 1 && ranges.len() > 1 {
            ranges
                .into_par_iter()
                .map(|r| with_inner_parallelism(false, || chunk(r)))
                .collect()
        } else {
            ranges.into_iter().map(chunk).collect()
        };
        let (mut loss, mut correct) = (0.0f64, 0usize);
        for (l, c) in parts.into_iter().flatten() {
            loss += l;
            correct += usize::from(c);
        }
        let scored = (n * positions) as f64;
        Evaluation {
            loss: loss / scored,
            accuracy: match test.target {
                TargetKind::Classes(_) | TargetKind::Tokens(_) => correct as f64 / scored,
                TargetKind::Real => f64::NAN,
            },
        }
    }

    /// Reads a batch's gradient blocks and losses back in one transfer, with no concatenation
    /// on the device.
    fn read_gradients(
        parts: Vec<(Range<usize>, Tensor<2>)>,
        losses: Tensor<1>,
    ) -> (ReadBack, Vec<f32>) {
        let mut read = Transaction::default();
        let mut ranges = Vec::with_capacity(parts.len());
        for (range, t) in parts {
            ranges.push(range);
            read = read.register(t);
        }
        let mut data = read.register(losses).execute().into_iter();
        let parts = ranges
            .into_iter()
            .map(|range| (range, data.next().expect("one result per block")))
            .collect();
        let losses: Vec<f32> = data
            .next()
            .expect("losses")
            .try_into_vec()
            .expect("f32 losses");
        (ReadBack { parts }, losses)
    }

    /// Gradients and losses of the models `rows` (each `params` long) on the minibatches
    /// `batches` (one per row, equal sizes), computed in one batch and read back to the host.
    /// This is the computation behind every gradient request, exposed for checks.
    pub fn gradients_host(
        &self,
        rows: &[Vec<f32>],
        batches: &[Vec<usize>],
    ) -> (Vec<Vec<f32>>, Vec<f32>) {
        let p = self.model.num_params();
        let scaled: Vec<(&[f32], f64)> = rows.iter().map(|r| (&r[..], 1.0)).collect();
        if let Some(cpu) = &self.cpu {
            let mut grads = Vec::with_capacity(rows.len());
            let mut losses = Vec::with_capacity(rows.len());
            for (row, batch) in rows.iter().zip(batches) {
                let mut g = vec![0.0; p];
                losses.push(self.cpu_gradient(&**cpu, row, 1.0, batch, None, &mut g));
                grads.push(g);
            }
            return (grads, losses);
        }
        let blocks = self.block_tensors(&scaled);
        let (parts, losses) = self.batched_gradient(blocks, &batches.concat(), None);
        let (read, losses) = Self::read_gradients(parts, losses);
        let grads = (0..rows.len())
            .map(|i| {
                let mut g = vec![0.0; p];
                read.copy_into(i, &mut g);
                g
            })
            .collect();
        (grads, losses)
    }

    /// The training objective of the models `rows` on the minibatches `batches` (the quantity
    /// [`BurnStore::gradients_host`] differentiates: training mode, batch statistics), without
    /// autodiff.
    pub fn losses_host(&self, rows: &[Vec<f32>], batches: &[Vec<usize>]) -> Vec<f32> {
        if self.cpu.is_some() {
            return self.gradients_host(rows, batches).1;
        }
        let params = self.host_rows(rows);
        let (x, y) = self.minibatches(rows.len(), &batches.concat(), None);
        self.losses(params, x, y, true)
            .0
            .into_data()
            .try_into_vec()
            .expect("f32 losses")
    }

    fn host_rows(&self, rows: &[Vec<f32>]) -> Tensor<2> {
        let p = self.model.num_params();
        Tensor::from_data(
            TensorData::new(rows.concat(), [rows.len(), p]),
            &self.device,
        )
    }

    fn mean_of_workers(&mut self) -> Vec<f32> {
        self.rows.mean_of(0..self.workers())
    }

    fn slot(&self, slot: Slot) -> &[f32] {
        match slot {
            Slot::Row(r) => self.rows.get(r),
            Slot::Msg(m) => self
                .msgs
                .get(m.0)
                .unwrap_or_else(|| panic!("message buffer {m:?} was released or never made")),
        }
    }

    /// `f` of the values of `terms`' slots with their weights: gathered on the stack for up to
    /// [`STACK_TERMS`] terms (every pairwise average and its reply, many per worker step), in
    /// a vector beyond.
    fn with_slots<R>(&self, terms: &[(Slot, f64)], f: impl FnOnce(&[(&[f32], f64)]) -> R) -> R {
        if terms.len() <= STACK_TERMS {
            let mut gathered: [(&[f32], f64); STACK_TERMS] = [(&[], 0.0); STACK_TERMS];
            for (g, &(s, w)) in gathered.iter_mut().zip(terms) {
                *g = (self.slot(s), w);
            }
            f(&gathered[..terms.len()])
        } else {
            let gathered: Vec<(&[f32], f64)> =
                terms.iter().map(|&(s, w)| (self.slot(s), w)).collect();
            f(&gathered)
        }
    }

    /// Settles the rows among `terms` ([`Rows::settle`]), so that [`BurnStore::slot`] can read
    /// them.
    fn settle(&mut self, terms: &[(Slot, f64)]) {
        for &(slot, _) in terms {
            if let Slot::Row(r) = slot {
                self.rows.settle(r);
            }
        }
    }

    /// `Σ weight · slot`, of settled rows.
    fn combine(&self, terms: &[(Slot, f64)]) -> Vec<f32> {
        self.with_slots(terms, combine)
    }

    /// `Σ weight · slot` in a spare buffer of the rows (the hot path: no allocation).
    fn combine_spare(&mut self, terms: &[(Slot, f64)]) -> Vec<f32> {
        self.settle(terms);
        let mut out = self.rows.buffer();
        self.with_slots(terms, |terms| {
            combine_into_split(&mut out, terms, self.threads)
        });
        out
    }

    /// Held-out loss and accuracy (NaN for real targets) of one model `[1, params]`, the test
    /// split run in chunks of [`EVAL_CHUNK`] with the running statistics, read back in one
    /// transfer.
    fn evaluate_model(&mut self, model: Vec<f32>) -> Evaluation {
        let started = Instant::now();
        self.stats.evaluations += 1;
        if let Some(cpu) = &self.cpu {
            let evaluation = self.cpu_evaluate(&**cpu, &model);
            self.stats.eval_wall += started.elapsed();
            return evaluation;
        }
        let p = model.len();
        let model: Tensor<2> = Tensor::from_data(TensorData::new(model, [1, p]), &self.device);
        let n = self.test.len();
        let mut loss_sum: Option<Tensor<1>> = None;
        let mut correct: Option<Tensor<1>> = None;
        let add = |acc: &mut Option<Tensor<1>>, t: Tensor<1>| {
            *acc = Some(match acc.take() {
                Some(a) => a + t,
                None => t,
            });
        };
        for start in (0..n).step_by(EVAL_CHUNK) {
            let (x, y) = self.test.device().rows(start..(start + EVAL_CHUNK).min(n));
            let (out, _) = self.model.forward(model.clone(), x, false);
            match y {
                BatchTargets::Classes(y) => {
                    let logp = activation::log_softmax(out, 2);
                    add(&mut loss_sum, logp.clone().gather(2, y.clone()).neg().sum());
                    add(&mut correct, logp.argmax(2).equal(y).float().sum());
                }
                BatchTargets::Real(y) => {
                    let b = y.dims()[1];
                    let sq = (out.reshape([1, b]) - y).square().sum().mul_scalar(0.5);
                    add(&mut loss_sum, sq);
                }
            }
        }
        let loss_sum = loss_sum.expect("the test split has at least one sample");
        let sums = match correct {
            Some(c) => Tensor::cat(vec![loss_sum, c], 0),
            None => loss_sum,
        };
        let sums = sums.into_data().try_into_vec::<f32>().expect("f32 metrics");
        self.stats.eval_wall += started.elapsed();
        // A text's loss and accuracy are per predicted token: `window − 1` per window.
        let positions = n * self.test.device().windows.map_or(1, |(_, w)| w - 1);
        Evaluation {
            loss: f64::from(sums[0]) / positions as f64,
            accuracy: sums
                .get(1)
                .map_or(f64::NAN, |&c| f64::from(c) / positions as f64),
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

    fn layers(&self) -> Vec<dasim_sim::params::Layer> {
        self.model.layers()
    }

    fn state(&self) -> Range<usize> {
        self.model.trainable().end..self.model.num_params()
    }

    fn add_rows(&mut self, count: usize) -> usize {
        self.rows.push_copies_of_first(count)
    }

    fn matrices(&self) -> Vec<dasim_sim::params::Matrix> {
        self.model.matrices()
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
                    .step_common(row, &g, lr, block, &self.optimizer, &self.layers);
            } else {
                self.rows
                    .step_shared(row, &g, lr, block, &self.optimizer, &self.layers);
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
        // Queued steps are not part of a checkpoint: apply them first. Gradients are written
        // each in its own buffer.
        self.rows.settle_all();
        self.copy_out();
        let ready: BTreeMap<GradId, Arc<Vec<f32>>> = self
            .ready
            .iter()
            .map(|(&id, g)| match g {
                Ready::Host(g) => (id, Arc::clone(g)),
                Ready::Read(..) => unreachable!("copied out above"),
            })
            .collect();
        let state = BurnStateRef {
            rows: &self.rows,
            samplers: &self.samplers,
            pending: &self.pending,
            ready: &ready,
            owners: &self.owners,
            msgs: self
                .msgs
                .sorted()
                .into_iter()
                .map(|(id, m)| (MsgId(id), Arc::clone(m)))
                .collect(),
            next_id: self.next_id,
            train_loss: (self.train_loss, self.train_loss_count),
            stats: self.stats,
        };
        postcard::to_stdvec(&state).map_err(|e| e.to_string())
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), String> {
        let state: BurnState = postcard::from_bytes(state).map_err(|e| e.to_string())?;
        if state.rows.width() != self.rows.width() || state.samplers.len() != self.samplers.len() {
            return Err(format!(
                "the checkpoint holds {} replicas of {} parameters, this run {} of {}",
                state.samplers.len(),
                state.rows.width(),
                self.samplers.len(),
                self.rows.width()
            ));
        }
        self.rows = state.rows;
        self.rows.set_threads(self.threads);
        self.samplers = state.samplers;
        self.pending = state.pending;
        self.ready = state
            .ready
            .into_iter()
            .map(|(id, g)| (id, Ready::Host(g)))
            .collect();
        self.unread.clear();
        self.owners = state.owners;
        self.msgs = state.msgs.into_iter().map(|(id, m)| (id.0, m)).collect();
        self.next_id = state.next_id;
        (self.train_loss, self.train_loss_count) = state.train_loss;
        self.stats = state.stats;
        Ok(())
    }

    fn suboptimality(&mut self, terms: Option<&[(usize, f64)]>) -> Option<f64> {
        let objective = self.objective.clone()?;
        objective.optimum()?;
        let theta = self.model_host(terms, true)?;
        objective.suboptimality(&theta)
    }
}
