//! All-reduce SGD: synchronous data-parallel SGD.
//!
//! Every worker computes a gradient on its replica and its own minibatch; the gradients are
//! averaged by a ring all-reduce (reduce-scatter then all-gather, `2(n−1)` steps, each worker
//! sending a chunk of `S/n` bytes to its successor per step); every worker applies the mean
//! gradient and starts its next step. The ring is made of real messages over the network model,
//! so a slow link slows the ring, and a straggler delays every worker.
//!
//! ```text
//! loop (worker i, iteration k):
//!     read x_i; compute g_i on x_i and a minibatch           (compute time from the cluster)
//!     ring all-reduce of the g_j, bucket by bucket            (waits for every worker)
//!     x_i ← optimizer step with mean_j g_j                    (rate in force now)
//! ```
//!
//! **Bucketing** (as PyTorch DDP does): with `buckets = B`, the gradient is split into `B`
//! equal buckets, each all-reduced by its own ring as soon as it is ready, so communication
//! overlaps the backward pass. The backward pass is the last `backward_fraction` of a step, and
//! bucket `b` is ready when `(b+1)/B` of it is done: at `start + d·(1 − f) + d·f·(b+1)/B` for a
//! step of duration `d` started at `start` (with `f = 0`, every bucket is ready at the end of the
//! step). The mean gradient is applied when every bucket's ring has completed. A worker's chunks
//! for different buckets share its NIC, FIFO.
//!
//! A worker sends its first chunk of a bucket when the bucket is ready; it sends chunk `k+1` once
//! it has received chunk `k` from its predecessor; it is done when it has received all
//! `2(n−1)` chunks of every bucket. It waits for its predecessor's chunks, which exist once every
//! worker has contributed: the ring cannot deadlock.
//!
//! **Activities** ([`crate::record`]): a worker computes from the start of its step to its end
//! (buckets already in the ring while it computes do not change that: computing is the foreground
//! activity); then it is blocked until every worker has contributed to the iteration's ring (the
//! wait attributed to the last contributor, typically a straggler), then communicates until its
//! ring completes ([`super::ring::mark`]).
//!
//! **PowerSGD** (`compression = { kind = "powersgd", rank = r }`; Vogels, Karimireddy & Jaggi,
//! NeurIPS 2019): each step's gradients are compressed to rank-`r` factors of every weight
//! matrix, with error feedback per worker and a warm-started `Q` ([`crate::compress::powersgd`]).
//! A step then runs two ring all-reduces one after the other: the first of every `P` (`a·r`
//! values per `a × b` matrix) and of every coordinate outside the matrices, the second of every
//! `Q` (`b·r` values per matrix), each `2(n−1)` chunks of a `1/n` share as above. The worker
//! applies the decoded mean `P̂ Qᵀ` when the second completes. The time between the two (the
//! orthogonalization and `M_wᵀ P̂`, a few `a·b·r` multiply-adds) is not charged: it is small
//! beside the gradient's. Buckets are not combined with PowerSGD (`buckets = 1`).
//!
//! With `variant = "library"` (`epfml/powersgd`'s `powersgd/powersgd.py`), a step runs one ring:
//! of the whole gradient for the first `start_after` steps (as without compression), then, in
//! turn, of every `Q` (`b·r'` values per compressed matrix) on even compressed steps and of every
//! `P` (`a·r'`) on odd ones, each with the coordinates left uncompressed. Which ring a step
//! joins is decided by the worker's step count alone ([`PowerSgd::exchange`]); the three rings'
//! sizes by the shapes and the options, at the start.
//!
//! **Invariant**: all replicas are equal whenever they are read — every worker's `k`-th gradient
//! is computed on the same parameters — because they start equal and apply the same mean
//! gradient in the same order.
//!
//! Reference: the ring all-reduce of Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms
//! for clusters of workstations", JPDC 2009; data-parallel SGD as in Goyal et al., "Accurate,
//! Large Minibatch SGD: Training ImageNet in 1 Hour", 2017; bucketing as in Li et al., "PyTorch
//! Distributed: Experiences on Accelerating Data Parallel Training", VLDB 2020.

use serde::{Deserialize, Serialize};

use super::ring::{Done, RingRound, RoundMean, bucket_bytes, ring_support};
use crate::algorithm::{Algorithm, Ctx, World};
use crate::algorithms::{AlgorithmSpec, Runnable, Setup};
use crate::compress::powersgd::{Exchange, Options as PowerSgdOptions};
use crate::compress::{Compression, PowerSgd};
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport, WorkerFault};
use crate::store::{GradId, ReplicaStore};

/// The ring of the gradients (with PowerSGD's paper variant: of the `P` factors; with the
/// library's: its warm-up's dense gradients).
const GRADIENTS: usize = 0;
/// PowerSGD: the ring of the `Q` factors (the paper's second all-reduce; the library's even
/// compressed steps).
const FACTORS: usize = 1;
/// PowerSGD's library variant: the ring of the `P` factors of its odd compressed steps.
const ALTERNATE: usize = 2;

fn one() -> usize {
    1
}

fn is_one(v: &usize) -> bool {
    *v == 1
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// Options of all-reduce SGD.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllReduceConfig {
    /// Number of gradient buckets, each all-reduced by its own ring (default 1).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub buckets: usize,
    /// Fraction of a step spent in the backward pass, in `[0, 1]`, over which the buckets become
    /// ready in order (default 0: every bucket is ready at the end of the step).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub backward_fraction: f64,
    /// Gradient compression: `{ kind = "powersgd", rank = r }`, optionally with `variant =
    /// "library"` and its `start_after` and `min_compression_rate` (none by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<Compression>,
}

impl Default for AllReduceConfig {
    fn default() -> Self {
        AllReduceConfig {
            buckets: 1,
            backward_fraction: 0.0,
            compression: None,
        }
    }
}

impl AllReduceConfig {
    /// Checks the options; `path` is where the entry sits (`algorithms[0]`).
    pub(crate) fn check(&self, path: &str) -> Result<(), ConfigError> {
        if self.buckets == 0 {
            return Err(
                ConfigError::new(&format!("{path}.buckets"), "buckets must be at least 1").hint(
                    "1 all-reduces the whole gradient at once; PyTorch DDP uses 25 MB buckets",
                ),
            );
        }
        if !(0.0..=1.0).contains(&self.backward_fraction) {
            return Err(ConfigError::new(
                &format!("{path}.backward_fraction"),
                format!(
                    "backward_fraction must be in [0, 1], got {}",
                    self.backward_fraction
                ),
            )
            .hint("the backward pass is typically about 2/3 of a step"));
        }
        if let Some(c) = &self.compression {
            let at = format!("{path}.compression");
            c.check(&at)?;
            if !matches!(c, Compression::PowerSgd { .. }) {
                return Err(ConfigError::new(
                    &format!("{at}.kind"),
                    format!(
                        "all-reduce SGD compresses with powersgd only; {} messages cannot be summed along a ring",
                        c.name()
                    ),
                )
                .hint("use compression = { kind = \"powersgd\", rank = 2 }, or gossip compressed messages with kind = \"choco\""));
            }
            if self.buckets > 1 {
                return Err(ConfigError::new(
                    &format!("{path}.buckets"),
                    "buckets are not combined with compression: PowerSGD all-reduces its factors, not buckets of the gradient",
                )
                .hint("leave buckets out (1) with powersgd"));
            }
        }
        Ok(())
    }

    /// PowerSGD's options, when compressed.
    fn powersgd(&self) -> Option<PowerSgdOptions> {
        self.compression.as_ref()?.powersgd_options()
    }
}

/// Events of all-reduce SGD.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum Event {
    /// Bucket `bucket` of `worker`'s gradient is computed (the last bucket: the step is done).
    BucketReady {
        /// The worker.
        worker: usize,
        /// The bucket.
        bucket: usize,
    },
    /// A worker's ring all-reduce completed (with PowerSGD's paper variant: the first, of the
    /// `P` factors).
    RingDone(Done),
    /// PowerSGD: a worker's ring all-reduce of the `Q` factors completed (the paper's second
    /// one; the library's of an even compressed step).
    FactorsDone(Done),
    /// PowerSGD's library variant: a worker's ring all-reduce of the `P` factors of an odd
    /// compressed step completed.
    AlternateDone(Done),
}

/// The state machine of all-reduce SGD.
#[derive(Serialize, Deserialize)]
pub struct AllReduceSgd {
    backward_fraction: f64,
    buckets: usize,
    grads: Vec<Option<GradId>>,
    /// The ring of the gradients; with PowerSGD, that of the `P` factors, then the `Q`
    /// factors'.
    rounds: RingRound,
    /// The mean gradient of the current iteration and its rate.
    mean: RoundMean<(GradId, f64)>,
    /// PowerSGD's options and its state (built at the start).
    options: Option<PowerSgdOptions>,
    powersgd: Option<PowerSgd>,
}

impl AllReduceSgd {
    /// A new instance for `n` workers.
    pub fn new(cfg: &AllReduceConfig, n: usize) -> Self {
        AllReduceSgd {
            backward_fraction: cfg.backward_fraction,
            buckets: cfg.buckets.max(1),
            grads: vec![None; n],
            rounds: RingRound::default(),
            mean: RoundMean::default(),
            options: cfg.powersgd(),
            powersgd: None,
        }
    }

    /// PowerSGD's state, when compressed (for tests: its error buffers).
    pub fn powersgd(&self) -> Option<&PowerSgd> {
        self.powersgd.as_ref()
    }

    fn begin(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let (grad, d) = cx.begin_step(w, 1.0);
        self.grads[w] = Some(grad);
        let b = self.buckets;
        for bucket in 0..b {
            let rest = d.scale(self.backward_fraction * (b - 1 - bucket) as f64 / b as f64);
            cx.after(d - rest, Event::BucketReady { worker: w, bucket });
        }
    }

    /// The step whose all-reduce `worker` completed as round `round` of its ring: the round
    /// itself when every step runs that ring (without compression, the paper's PowerSGD); the
    /// worker's step count with the library's, whose steps take turns on three rings.
    fn step(&self, worker: usize, round: u64, cx: &Ctx<'_, '_, Event>) -> u64 {
        match &self.powersgd {
            Some(p) if p.exchange(0) != Exchange::PThenQ => cx.world.worker_steps_of(worker),
            _ => round,
        }
    }

    /// `w`'s all-reduce of iteration `iter` is done: it applies the iteration's mean gradient
    /// and begins the next step.
    fn finish(&mut self, w: usize, iter: u64, cx: &mut Ctx<'_, '_, Event>) {
        let (mean, lr) = self.mean.get(iter, self.grads.len(), || {
            let grads: Vec<GradId> = self
                .grads
                .iter_mut()
                .map(|g| g.take().expect("every worker contributed a gradient"))
                .collect();
            let g = match &mut self.powersgd {
                Some(p) => p.aggregate(&mut cx.world.store, &grads, iter),
                None => cx.world.store.mean_gradient(&grads),
            };
            // One rate for the whole iteration, read when its mean is formed, so every worker
            // applies the same update even while a schedule changes the rate.
            (g, cx.lr())
        });
        if let Some(p) = &self.powersgd {
            // The decompression and the new error, before the next step.
            cx.host_work(w, p.host_work(p.exchange(iter))[2]);
        }
        cx.world.store.apply_gradient(w, mean, lr);
        cx.step_done(w);
        if let Some((g, _)) = self.mean.used() {
            cx.world.store.release_gradient(g);
        }
        self.begin(w, cx);
    }
}

impl Algorithm for AllReduceSgd {
    type Event = Event;

    fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        let n = self.grads.len();
        if let Some(options) = self.options {
            let matrices = cx.world.store.matrices();
            let params = cx.world.store.num_params();
            let bytes = |values: usize| cx.world.net.payload_bytes(values);
            let p = PowerSgd::new(options, matrices.clone(), n, cx.world.seed);
            if p.exchange(0) == Exchange::PThenQ {
                let (p, q) = PowerSgd::factor_values(options.rank, &matrices, params);
                self.rounds.add(n, &[bytes(p)]);
                self.rounds.add(n, &[bytes(q)]);
            } else {
                self.rounds.add(n, &bucket_bytes(cx.world, 1));
                self.rounds
                    .add(n, &[bytes(p.exchange_values(Exchange::Q, params))]);
                self.rounds
                    .add(n, &[bytes(p.exchange_values(Exchange::P, params))]);
            }
            self.powersgd = Some(p);
        } else {
            self.rounds.add(n, &bucket_bytes(cx.world, self.buckets));
        }
        for w in 0..n {
            self.begin(w, cx);
        }
    }

    fn handle(&mut self, event: Event, cx: &mut Ctx<'_, '_, Event>) {
        match event {
            // A crashed worker's step is abandoned; a broken ring completes no round.
            // With PowerSGD, a `Done` is checked against its own ring: a crash breaks both, and
            // a chunk lost on one is lost while no `Done` of the other is due.
            Event::BucketReady { worker, .. } if cx.is_down(worker) => {}
            Event::BucketReady { worker, bucket } => {
                // The library's compressed steps join the ring of what their step sends, by the
                // worker's step count (every worker's is the same at its k-th step).
                let step = cx.world.worker_steps_of(worker);
                if let Some(p) = &self.powersgd {
                    // The error feedback and the first product, before the ring.
                    cx.host_work(worker, p.host_work(p.exchange(step))[0]);
                }
                let (ring, wrap): (usize, fn(Done) -> Event) =
                    match self.powersgd.as_ref().map(|p| p.exchange(step)) {
                        Some(Exchange::Q) => (FACTORS, Event::FactorsDone),
                        Some(Exchange::P) => (ALTERNATE, Event::AlternateDone),
                        _ => (GRADIENTS, Event::RingDone),
                    };
                self.rounds.join_bucket(ring, worker, bucket, cx, wrap);
            }
            Event::RingDone(done) => {
                let Some(iter) = self.rounds.complete(GRADIENTS, done) else {
                    return;
                };
                let paper = self
                    .powersgd
                    .as_ref()
                    .is_some_and(|p| p.exchange(0) == Exchange::PThenQ);
                if paper {
                    // The `P` factors are in: the `Q` factors' ring follows once `Q = MᵀP̂` is
                    // computed. Every worker is past the first ring's barrier, so the second's
                    // waits are the network's.
                    if let Some(p) = &self.powersgd {
                        cx.host_work(done.worker, p.host_work(Exchange::PThenQ)[1]);
                    }
                    self.rounds
                        .join(FACTORS, done.worker, cx, Event::FactorsDone);
                } else {
                    self.finish(done.worker, self.step(done.worker, iter, cx), cx);
                }
            }
            Event::FactorsDone(done) => {
                if let Some(iter) = self.rounds.complete(FACTORS, done) {
                    self.finish(done.worker, self.step(done.worker, iter, cx), cx);
                }
            }
            Event::AlternateDone(done) => {
                if self.rounds.complete(ALTERNATE, done).is_some() {
                    let step = cx.world.worker_steps_of(done.worker);
                    self.finish(done.worker, step, cx);
                }
            }
        }
    }

    fn on_fault(&mut self, fault: WorkerFault, cx: &mut Ctx<'_, '_, Event>) {
        if let WorkerFault::Crash(w) = fault {
            if let Some(g) = self.grads[w].take() {
                cx.world.store.release_gradient(g);
            }
            self.rounds.crash(w, cx.now());
        }
    }

    /// Every worker's wait, a crashed one's too (it may have contributed before it crashed).
    fn waiting(&self) -> Vec<String> {
        (0..self.grads.len())
            .filter_map(|w| self.rounds.waits(w))
            .collect()
    }
}

impl AlgorithmSpec for AllReduceConfig {
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        self.check(setup.path)?;
        if let Some(options) = self.powersgd() {
            PowerSgd::check(&options, setup.matrices, &setup.at("compression.rank"))?;
        }
        Ok(())
    }

    fn buffers_per_worker(&self) -> usize {
        // PowerSGD's error feedback.
        usize::from(self.powersgd().is_some())
    }

    fn uses_topology(&self) -> bool {
        false
    }

    fn node_progress(&self) -> Result<(), &'static str> {
        Err(
            "its step is one averaged update of every replica, taken when all workers have the same step count, so a node's own counter is the global one",
        )
    }

    fn fault_support(&self, _kind: &'static str, fault: FaultKind) -> FaultSupport {
        ring_support(fault)
    }

    fn build(&self, _kind: &'static str, world: &World<'_>) -> crate::Result<Box<dyn Runnable>> {
        Ok(Box::new(AllReduceSgd::new(self, world.workers())))
    }
}
