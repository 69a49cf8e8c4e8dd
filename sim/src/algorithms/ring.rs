//! The ring all-reduce, made of messages over the network model: shared by all-reduce SGD
//! (gradients), local SGD, DiLoCo, SlowMo and Streaming DiLoCo (models, outer gradients,
//! fragments) and LAP-SGD (model snapshots).
//!
//! The payload is split into `B` buckets; each bucket is all-reduced by its own ring of `n`
//! workers (reduce-scatter then all-gather, `2(n−1)` steps, worker `w` sending a chunk of
//! `ceil(S_b / n)` bytes to `(w + 1) mod n` per step). For every bucket, a worker sends its first
//! chunk when its data for the bucket is ready and chunk `k + 1` once it has received chunk `k`
//! from its predecessor; it is done with a bucket when it has received all `2(n−1)` chunks, and
//! done with a round when it is done with every bucket. Links are FIFO, so chunks arrive in
//! order.
//!
//! An all-gather ring ([`Ring::gather`]: SparseLoCo's sparse outer gradients) is the second
//! half alone: `n − 1` steps, each worker forwarding one worker's whole payload per step.
//!
//! **A round is computed as a whole.** Every chunk goes through the network model
//! ([`Ctx::transfer`]) with the time the worker would post it, but no chunk is an event. A round
//! cannot complete anywhere before every worker has contributed to it, and once the last one has,
//! nothing but the round's own chunks happens on the ring's links until it completes: each
//! worker's uplink carries only its chunks to its successor, each downlink only those from the
//! predecessor. So when the last worker contributes, the round's `2(n−1)·n·B` transfers are
//! computed on the spot, in the order each link would carry them, from the times the workers'
//! buckets were ready; the network sees every transfer with the same posting time and in the same
//! per-link order as if each chunk were an event, so every arrival time is the same. What is
//! scheduled is one [`Done`] event per worker, at the arrival of its last chunk. With one bucket
//! the round is a loop over the ring steps (`O(n)` per step, no queue); with several, the buckets
//! of a worker share its NIC, and the transfers are ordered by a small local queue.
//!
//! This needs the ring's links to carry nothing else while a round is under way, which holds for
//! the algorithms that use it: their workers send nothing but ring chunks (SlowMo's SGP base
//! gossips too, but every gossip message of a round is posted before the round is computed).
//!
//! **Barrier.** A worker that has contributed every bucket of its round waits for the ring. Until
//! every worker has contributed to the round, the round cannot complete: the worker waits for the
//! last contributor's progress ([`Barrier::Wait`]); from then on it waits only for the network.
//! [`Ring::ready`] reports which it is, and [`mark`] turns that into activities: blocked until the
//! last worker contributes (the wait attributed to that worker), then communicating until the
//! ring completes.
//!
//! **What the methods on a ring share** is written here once: [`RingRound`] holds a method's
//! rings and its crashed workers (joining a round, completing one, a crash, the stall report);
//! [`RoundMethod`] and [`dispatch`] are the event handling of a method whose workers compute and
//! then join a ring (a crashed worker's computation and a broken ring's rounds are ignored, the
//! rest goes to the method's own handlers); [`RoundMean`] is what the first worker whose round
//! completes forms for all (a mean gradient). A method keeps only what is its own: when its
//! workers join, and what a completed round does.
//!
//! ```text
//! method (start):           rounds.add_model(world)                    (RingRound::add)
//! worker w, computed:       its own step; at a round:  rounds.join(0, w) (ready_all + mark)
//! Done of w's round r:      dispatch → rounds.complete → method.ring_done(w, r)
//! crash of w:               rounds.crash(w, now): w down, every ring broken
//! stall:                    rounds.waiting(): every live worker's wait
//! ```
//!
//! Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of workstations",
//! JPDC 2009.

use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use crate::algorithm::{Ctx, World};
use crate::clock::time::{SimTime, num};
use crate::fault::{FaultKind, FaultSupport};
use crate::record::Activity;
use crate::store::{GradId, ReplicaStore, blocks};

/// What a worker's full contribution to its round means for its wait.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Barrier {
    /// Others have yet to contribute: the worker waits for them.
    Wait,
    /// It was the last to contribute: the listed workers, which were waiting, can go on.
    Last(Vec<usize>),
}

/// Marks `worker`'s activity after its full contribution: [`Barrier::Wait`] blocks it;
/// [`Barrier::Last`] unblocks the waiters (their waits attributed to `worker`), and the worker and
/// the waiters communicate until the ring completes.
pub fn mark<E>(cx: &mut Ctx<'_, '_, E>, worker: usize, barrier: Option<Barrier>) {
    match barrier {
        None => {}
        Some(Barrier::Wait) => cx.block(worker),
        Some(Barrier::Last(waiters)) => {
            for w in waiters {
                cx.unblock(w, worker, Activity::Communicate);
            }
            cx.activity(worker, Activity::Communicate);
        }
    }
}

/// `worker` has received the last chunk of every bucket of round `round`: its all-reduce is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Done {
    /// The worker.
    pub worker: usize,
    /// The round (all-reduce) it completed.
    pub round: u64,
}

/// The state of a bucketed ring all-reduce over workers `0..n`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Ring {
    n: usize,
    /// An all-gather instead of an all-reduce ([`Ring::gather`]).
    #[serde(default)]
    gather: bool,
    chunk_bytes: Vec<u64>,
    /// `ready[w][b]`: when worker `w`'s data for bucket `b` of its current round was ready.
    ready: Vec<Vec<Option<SimTime>>>,
    round: Vec<u64>,
    /// When each worker's current round completes, once the round is computed.
    completes: Vec<Option<SimTime>>,
    /// Per round: the workers that have contributed every bucket, in order.
    contributed: BTreeMap<u64, Vec<usize>>,
    /// Why no round can complete any more (a crash, a lost chunk), once one happened.
    broken: Option<String>,
}

impl Ring {
    /// A ring over `n` workers for payloads whose buckets carry `bucket_bytes` each.
    pub fn new(n: usize, bucket_bytes: &[u64]) -> Self {
        let b = bucket_bytes.len().max(1);
        let mut chunk_bytes: Vec<u64> = bucket_bytes.iter().map(|s| s.div_ceil(n as u64)).collect();
        chunk_bytes.resize(b, 0);
        Ring {
            n,
            gather: false,
            chunk_bytes,
            ready: vec![vec![None; b]; n],
            round: vec![0; n],
            completes: vec![None; n],
            contributed: BTreeMap::new(),
            broken: None,
        }
    }

    /// A ring all-gather over `n` workers of a payload of `bytes` per worker (SparseLoCo's
    /// sparse outer gradients, whose kept coordinates differ between workers): `n − 1` steps,
    /// each worker forwarding one payload to its successor per step, so that every worker
    /// ends with all `n` (the all-reduce's all-gather half, with whole payloads for chunks).
    pub fn gather(n: usize, bytes: u64) -> Self {
        let mut ring = Ring::new(n, &[bytes]);
        ring.gather = true;
        ring.chunk_bytes = vec![bytes];
        ring
    }

    /// Its buckets carry `bucket_bytes` each from the next round on (SPARTA's coordinates,
    /// drawn anew every round). Called before any worker contributes to that round: a round's
    /// timing is computed when its last worker contributes.
    pub fn resize(&mut self, bucket_bytes: &[u64]) {
        assert_eq!(
            bucket_bytes.len(),
            self.chunk_bytes.len(),
            "the same buckets"
        );
        debug_assert!(
            self.contributed.is_empty(),
            "no round is under way when the ring is resized"
        );
        let n = if self.gather { 1 } else { self.n as u64 };
        for (c, s) in self.chunk_bytes.iter_mut().zip(bucket_bytes) {
            *c = s.div_ceil(n);
        }
    }

    /// Ring steps per bucket: `2(n−1)` (`n − 1` for an all-gather).
    pub fn steps(&self) -> u32 {
        let steps = self.n as u32 - 1;
        if self.gather { steps } else { 2 * steps }
    }

    /// Number of buckets.
    pub fn buckets(&self) -> usize {
        self.chunk_bytes.len()
    }

    /// The round `worker` is in (rounds it has completed).
    pub fn round(&self, worker: usize) -> u64 {
        self.round[worker]
    }

    /// Whether `worker` has contributed every bucket of its current round (and so waits for the
    /// ring to complete).
    pub fn contributing(&self, worker: usize) -> bool {
        self.ready[worker].iter().all(Option::is_some)
    }

    /// `worker`'s data for `bucket` of its current round is ready now. When that completes the
    /// worker's contribution to the round, returns the [`Barrier`] it reaches; when it was the
    /// last contribution, the round is computed and every worker's [`Done`] scheduled (wrapped
    /// by `wrap`).
    pub fn ready<E>(
        &mut self,
        worker: usize,
        bucket: usize,
        cx: &mut Ctx<'_, '_, E>,
        wrap: fn(Done) -> E,
    ) -> Option<Barrier> {
        let was = self.contributing(worker);
        // Host work before the contribution (a compression) delays it.
        let now = cx.world.cluster.host().free_at(worker, cx.now());
        self.ready[worker][bucket].get_or_insert(now);
        if was || !self.contributing(worker) {
            return None;
        }
        let barrier = self.contribute(worker);
        if matches!(barrier, Barrier::Last(_)) {
            self.run_round(cx, wrap);
        }
        Some(barrier)
    }

    /// Every bucket of `worker`'s current round is ready; returns the [`Barrier`] it reaches.
    pub fn ready_all<E>(
        &mut self,
        worker: usize,
        cx: &mut Ctx<'_, '_, E>,
        wrap: fn(Done) -> E,
    ) -> Option<Barrier> {
        let mut barrier = None;
        for b in 0..self.buckets() {
            barrier = barrier.or(self.ready(worker, b, cx, wrap));
        }
        barrier
    }

    fn contribute(&mut self, worker: usize) -> Barrier {
        let round = self.round[worker];
        let list = self.contributed.entry(round).or_default();
        list.push(worker);
        if list.len() < self.n {
            return Barrier::Wait;
        }
        let mut waiters = self.contributed.remove(&round).unwrap_or_default();
        waiters.pop();
        Barrier::Last(waiters)
    }

    /// Every worker has contributed to the round: computes its transfers and schedules each
    /// worker's [`Done`].
    fn run_round<E>(&mut self, cx: &mut Ctx<'_, '_, E>, wrap: fn(Done) -> E) {
        let ready: Vec<Vec<SimTime>> = self
            .ready
            .iter()
            .map(|r| {
                r.iter()
                    .map(|t| t.expect("every bucket contributed"))
                    .collect()
            })
            .collect();
        if self.broken.is_some() {
            return;
        }
        let done = if self.buckets() == 1 {
            self.transfers_one_bucket(&ready, cx)
        } else {
            self.transfers_queued(&ready, cx)
        };
        let done = match done {
            Ok(done) => done,
            Err((t, w)) => {
                let round = self.round[w];
                self.broken = Some(format!(
                    "a chunk of {} {round} from worker {w} to worker {} was lost at {} s",
                    if self.gather {
                        "all-gather"
                    } else {
                        "all-reduce"
                    },
                    (w + 1) % self.n,
                    num(t.as_secs_f64())
                ));
                return;
            }
        };
        for (w, t) in done.into_iter().enumerate() {
            self.completes[w] = Some(t);
            let round = self.round[w];
            cx.at(t, wrap(Done { worker: w, round }));
        }
    }

    /// One bucket: a worker posts chunk `k` at `max(ready, arrival of chunk k − 1)`, and each
    /// link carries one lane, so the steps can be computed in order, every worker's at each.
    /// Returns when each worker receives its last chunk, or the posting time and sender of a
    /// chunk that was lost ([`crate::fault`]).
    fn transfers_one_bucket<E>(
        &self,
        ready: &[Vec<SimTime>],
        cx: &mut Ctx<'_, '_, E>,
    ) -> Result<Vec<SimTime>, (SimTime, usize)> {
        let n = self.n;
        if n == 1 {
            // No step: the round completes when the only worker contributes.
            return Ok(vec![cx.now()]);
        }
        let bytes = self.chunk_bytes[0];
        let start: Vec<SimTime> = ready.iter().map(|r| r[0]).collect();
        // Without faults and without a log of every message, the round has a closed form in
        // `O(n)` ([`crate::net::Network::ring_round`]) where the network allows it: the same
        // arrivals and network state as the loop below, which costs `2n(n − 1)` sends.
        if !self.gather
            && !cx.world.faults.configured()
            && !cx.world.recorder.logs_messages()
            && let Some(got) = cx.world.net.ring_round(&start, bytes)
        {
            return Ok(got);
        }
        // `got[w]`: when worker w received the previous step's chunk (none before step 0).
        let mut got = start.clone();
        let mut next = vec![SimTime::ZERO; n];
        for _ in 0..self.steps() {
            for w in 0..n {
                let post = start[w].max(got[w]);
                let sent = cx.transfer(post, w, (w + 1) % n, bytes);
                if sent.lost.is_some() {
                    return Err((post, w));
                }
                next[(w + 1) % n] = sent.arrive;
            }
            std::mem::swap(&mut got, &mut next);
        }
        Ok(got)
    }

    /// Several buckets share each worker's NIC: the transfers are posted in time order (ties in
    /// the order they became possible), as the event loop would, with a local queue of posts and
    /// arrivals. Returns when each worker receives its last chunk of every bucket, or the
    /// posting time and sender of a chunk that was lost.
    fn transfers_queued<E>(
        &self,
        ready: &[Vec<SimTime>],
        cx: &mut Ctx<'_, '_, E>,
    ) -> Result<Vec<SimTime>, (SimTime, usize)> {
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
        enum Step {
            /// `w` posts chunk `k` of bucket `b` to its successor.
            Post,
            /// Chunk `k` of bucket `b` arrives at `w`.
            Arrive,
        }
        let n = self.n;
        let steps = self.steps();
        if steps == 0 {
            return Ok(vec![cx.now(); n]);
        }
        let mut done = vec![SimTime::ZERO; n];
        let mut queue = BinaryHeap::new();
        let mut seq = 0u64;
        let mut push = |queue: &mut BinaryHeap<_>, t: SimTime, step, w: usize, b: usize, k: u32| {
            queue.push(Reverse((t, seq, step, w, b, k)));
            seq += 1;
        };
        for (w, buckets) in ready.iter().enumerate() {
            for (b, &t) in buckets.iter().enumerate() {
                push(&mut queue, t, Step::Post, w, b, 0);
            }
        }
        while let Some(Reverse((t, _, step, w, b, k))) = queue.pop() {
            match step {
                Step::Post => {
                    let to = (w + 1) % n;
                    let sent = cx.transfer(t, w, to, self.chunk_bytes[b]);
                    if sent.lost.is_some() {
                        return Err((t, w));
                    }
                    let arrive = sent.arrive;
                    push(&mut queue, arrive, Step::Arrive, to, b, k);
                }
                Step::Arrive if k + 1 == steps => done[w] = done[w].max(t),
                Step::Arrive => push(&mut queue, t.max(ready[w][b]), Step::Post, w, b, k + 1),
            }
        }
        Ok(done)
    }

    /// `worker` crashed at `now`: the ring is broken for good. No round completes any more —
    /// not even one under way, whose later chunks the crashed worker would have had to forward
    /// — so every worker ends up waiting, and the run stalls.
    pub fn crash(&mut self, worker: usize, now: SimTime) {
        self.broken.get_or_insert_with(|| {
            format!(
                "worker {worker} crashed at {} s and never rejoins",
                num(now.as_secs_f64())
            )
        });
    }

    /// Whether no round can complete any more ([`Ring::crash`], or a lost chunk); the
    /// algorithm then ignores the [`Done`] events still due.
    pub fn is_broken(&self) -> bool {
        self.broken.is_some()
    }

    /// `worker`'s [`Done`] for its current round has come: it moves to the next round.
    pub fn complete(&mut self, done: Done) {
        let w = done.worker;
        debug_assert_eq!(done.round, self.round[w], "rounds complete in order");
        self.round[w] += 1;
        self.completes[w] = None;
        self.ready[w].iter_mut().for_each(|r| *r = None);
    }

    /// What `worker` waits for in the ring, if it has contributed to its round.
    pub fn waiting(&self, worker: usize) -> Option<String> {
        if !self.contributing(worker) {
            return None;
        }
        let round = self.round[worker];
        if let Some(why) = &self.broken {
            return Some(format!(
                "worker {worker} waits for all-reduce {round}, which cannot complete: {why}"
            ));
        }
        if let Some(t) = self.completes[worker] {
            return Some(format!(
                "worker {worker} waits for all-reduce {round} to complete at {t}"
            ));
        }
        let missing: Vec<String> = (0..self.n)
            .filter(|&w| self.round[w] != round || !self.contributing(w))
            .map(|w| w.to_string())
            .collect();
        let shown = missing.len().min(8);
        let more = if missing.len() > shown {
            format!(" and {} more", missing.len() - shown)
        } else {
            String::new()
        };
        Some(format!(
            "worker {worker} waits for worker(s) {}{more} to contribute to all-reduce {round}",
            missing[..shown].join(", ")
        ))
    }
}

/// What the ring-based methods handle: a crash or a lost chunk breaks the ring for good, and
/// the run stalls ([`Ring::crash`]).
pub(crate) fn ring_support(fault: FaultKind) -> FaultSupport {
    match fault {
        FaultKind::Rejoin => Err(
            "a ring all-reduce has no membership change: a crash breaks the ring and the run \
             stalls; rejoining is not modelled (leave out rejoin_after_s to see the stall)",
        ),
        _ => Ok(()),
    }
}

/// Payload bytes of `buckets` equal buckets of `world`'s model.
pub(crate) fn bucket_bytes(world: &World<'_>, buckets: usize) -> Vec<u64> {
    blocks(world.store.num_params(), buckets)
        .into_iter()
        .map(|b| world.net.payload_bytes(b.len()))
        .collect()
}

/// The events of a method whose workers compute, then join a ring ([`dispatch`]): local SGD's,
/// DiLoCo's and Streaming DiLoCo's, and SlowMo's beside its SGP base's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RoundEvent {
    /// `worker` finished computing its gradient.
    ComputeDone(usize),
    /// A worker's ring all-reduce completed.
    RingDone(Done),
}

/// The rings of a method and its workers that are down: what the ring-based methods share
/// around [`Ring`] (all-reduce SGD, local SGD, DiLoCo, SlowMo, Streaming DiLoCo, LAP-SGD).
///
/// The rings are numbered in the order they are added ([`RingRound::add`], in the method's
/// `start`): most methods have one, of the whole model; all-reduce SGD with PowerSGD has two
/// (its `P` and `Q` factors), Streaming DiLoCo one per fragment, LAP-SGD the counters' and the
/// models'. A worker joins a ring with every bucket ready ([`RingRound::join`]) or bucket by
/// bucket ([`RingRound::join_bucket`]), its activity marked by [`mark`].
///
/// **Faults.** A crash marks the worker down and breaks every ring for good
/// ([`RingRound::crash`]); a lost chunk breaks the ring it was on. A broken ring completes no
/// round: [`RingRound::complete`] ignores the [`Done`] events still due, and
/// [`RingRound::waiting`] names every live worker's wait, until the run stalls.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RingRound {
    rings: Vec<Ring>,
    /// Workers down (crashed; they never rejoin).
    down: BTreeSet<usize>,
}

impl RingRound {
    /// Adds a ring over `n` workers for payloads whose buckets carry `bucket_bytes` each;
    /// returns its number.
    pub fn add(&mut self, n: usize, bucket_bytes: &[u64]) -> usize {
        self.rings.push(Ring::new(n, bucket_bytes));
        self.rings.len() - 1
    }

    /// Adds an all-gather ring over `n` workers of `bytes` per worker ([`Ring::gather`]);
    /// returns its number.
    pub fn add_gather(&mut self, n: usize, bytes: u64) -> usize {
        self.rings.push(Ring::gather(n, bytes));
        self.rings.len() - 1
    }

    /// Adds a ring over `world`'s workers for its whole model in one bucket (a model
    /// all-reduce); returns its number.
    pub fn add_model(&mut self, world: &World<'_>) -> usize {
        self.add(world.workers(), &bucket_bytes(world, 1))
    }

    /// Whether a ring was added (the method started).
    pub fn is_started(&self) -> bool {
        !self.rings.is_empty()
    }

    /// Ring `ring`.
    pub fn ring(&self, ring: usize) -> &Ring {
        &self.rings[ring]
    }

    /// Ring `ring`, to contribute to it without [`mark`] (Streaming DiLoCo, LAP-SGD).
    pub fn ring_mut(&mut self, ring: usize) -> &mut Ring {
        &mut self.rings[ring]
    }

    /// Every bucket of `worker`'s current round of ring `ring` is ready now: the worker joins
    /// the round, its activity marked ([`mark`]); `wrap` makes the ring's [`Done`] events.
    pub fn join<E>(
        &mut self,
        ring: usize,
        worker: usize,
        cx: &mut Ctx<'_, '_, E>,
        wrap: fn(Done) -> E,
    ) {
        let barrier = self.rings[ring].ready_all(worker, cx, wrap);
        mark(cx, worker, barrier);
    }

    /// Bucket `bucket` of `worker`'s current round of ring `ring` is ready now, its activity
    /// marked once that completes its contribution ([`Ring::ready`], [`mark`]).
    pub fn join_bucket<E>(
        &mut self,
        ring: usize,
        worker: usize,
        bucket: usize,
        cx: &mut Ctx<'_, '_, E>,
        wrap: fn(Done) -> E,
    ) {
        let barrier = self.rings[ring].ready(worker, bucket, cx, wrap);
        mark(cx, worker, barrier);
    }

    /// `done` has come for ring `ring`: the round its worker completed, the worker moved to
    /// the next ([`Ring::complete`]); `None`, and nothing done, when the ring is broken.
    pub fn complete(&mut self, ring: usize, done: Done) -> Option<u64> {
        let ring = &mut self.rings[ring];
        if ring.is_broken() {
            return None;
        }
        ring.complete(done);
        Some(done.round)
    }

    /// `worker` crashed at `now`: it is down for good, and every ring is broken
    /// ([`Ring::crash`]).
    pub fn crash(&mut self, worker: usize, now: SimTime) {
        self.down.insert(worker);
        for ring in &mut self.rings {
            ring.crash(worker, now);
        }
    }

    /// Whether `worker` crashed.
    pub fn is_down(&self, worker: usize) -> bool {
        self.down.contains(&worker)
    }

    /// What `worker` waits for: its wait in the first ring where it has contributed, down or
    /// not ([`Ring::waiting`]).
    pub fn waits(&self, worker: usize) -> Option<String> {
        self.rings.iter().find_map(|r| r.waiting(worker))
    }

    /// What every live worker waits for, in worker order ([`RingRound::waits`]); nothing before
    /// the start.
    pub fn waiting(&self) -> Vec<String> {
        let n = self.rings.first().map_or(0, |r| r.n);
        (0..n)
            .filter(|&w| !self.is_down(w))
            .filter_map(|w| self.waits(w))
            .collect()
    }
}

/// A method on a [`RingRound`]: its own rules for a worker whose computation is done and for a
/// worker whose round completed. [`dispatch`] calls them, or ignores the event.
pub trait RoundMethod<E> {
    /// The method's rings.
    fn rounds(&mut self) -> &mut RingRound;

    /// The ring `done` is of (by default the first: a method with one ring).
    fn ring_of(&self, _done: Done) -> usize {
        0
    }

    /// `worker`, which is up, finished computing.
    fn computed(&mut self, worker: usize, cx: &mut Ctx<'_, '_, E>);

    /// `worker` completed round `round` of a ring that is not broken; the ring has moved it to
    /// the next round.
    fn ring_done(&mut self, worker: usize, round: u64, cx: &mut Ctx<'_, '_, E>);
}

/// Handles a [`RoundEvent`] of `method`: a crashed worker's computation is abandoned; a broken
/// ring completes no round; else the method's [`RoundMethod::computed`] or
/// [`RoundMethod::ring_done`] (the ring completed first).
pub fn dispatch<E, M: RoundMethod<E>>(method: &mut M, event: RoundEvent, cx: &mut Ctx<'_, '_, E>) {
    match event {
        RoundEvent::ComputeDone(w) if cx.is_down(w) => {}
        RoundEvent::ComputeDone(w) => method.computed(w, cx),
        RoundEvent::RingDone(done) => {
            let ring = method.ring_of(done);
            if let Some(round) = method.rounds().complete(ring, done) {
                method.ring_done(done.worker, round, cx);
            }
        }
    }
}

/// `worker`'s own optimizer step with the gradient `grad` it computed, at its rate
/// ([`Ctx::lr_for`]), counted as a step; the gradient is released. Local SGD's local step,
/// DiLoCo's and Streaming DiLoCo's inner steps, SlowMo's local-SGD base.
pub fn local_step<E>(worker: usize, grad: GradId, cx: &mut Ctx<'_, '_, E>) {
    let lr = cx.lr_for(worker);
    cx.world.store.apply_gradient(worker, grad, lr);
    cx.world.store.release_gradient(grad);
    cx.step_done(worker);
}

/// What the first worker whose round completes forms for the whole round, every worker of the
/// round uses once, and the last one hands back to be released: the mean gradient of a
/// gradient all-reduce, with its rate (all-reduce SGD, post-local SGD's warm-up, SlowMo's
/// all-reduce base), the mean of LAP-SGD's snapshots. Forming it at the first completion reads
/// every worker's contribution at an instant when all have contributed and wait.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RoundMean<T> {
    /// The round, its value, and how many workers have yet to use it.
    held: Option<(u64, T, usize)>,
}

impl<T> Default for RoundMean<T> {
    fn default() -> Self {
        RoundMean { held: None }
    }
}

impl<T: Copy> RoundMean<T> {
    /// The value of round `round`, formed by `form` when this is the round's first use; `n`
    /// workers use it.
    pub fn get(&mut self, round: u64, n: usize, form: impl FnOnce() -> T) -> T {
        match self.held {
            Some((r, value, _)) if r == round => value,
            _ => {
                let value = form();
                self.held = Some((round, value, n));
                value
            }
        }
    }

    /// One worker has used the value: after the last use, the value, for the caller to release.
    pub fn used(&mut self) -> Option<T> {
        let (_, value, left) = self.held.as_mut()?;
        *left -= 1;
        if *left > 0 {
            return None;
        }
        let value = *value;
        self.held = None;
        Some(value)
    }

    /// The round held and its value, if formed and not yet used by every worker.
    pub fn current(&self) -> Option<(u64, T)> {
        self.held.map(|(r, value, _)| (r, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Algorithm, World};
    use crate::cluster::{Cluster, ClusterConfig};
    use crate::engine::{Collect, RunConfig, run};
    use crate::env::BuildEnv;
    use crate::net::topology::{Topology, TopologyConfig};
    use crate::net::{Network, NetworkConfig, RandomCongestion};
    use crate::store::reference::{Quadratic, ReferenceStore};

    /// Computes one round on a fresh network, one bucket or through the queue, and returns the
    /// completion times and the network's state afterwards.
    struct OneRound {
        ready: Vec<SimTime>,
        queued: bool,
        result: Vec<SimTime>,
    }

    #[derive(Debug, Clone, Copy)]
    struct Go;

    impl Algorithm for OneRound {
        type Event = Go;
        fn start(&mut self, cx: &mut Ctx<'_, '_, Go>) {
            cx.after(SimTime::from_nanos(1_000_000), Go);
        }
        fn handle(&mut self, _: Go, cx: &mut Ctx<'_, '_, Go>) {
            let n = self.ready.len();
            let ring = Ring::new(n, &[1_000_000]);
            let ready: Vec<Vec<SimTime>> = self.ready.iter().map(|&t| vec![t]).collect();
            self.result = if self.queued {
                ring.transfers_queued(&ready, cx).unwrap()
            } else {
                ring.transfers_one_bucket(&ready, cx).unwrap()
            };
        }
        fn waiting(&self) -> Vec<String> {
            Vec::new()
        }
    }

    /// Runs `alg` on `n` workers of a quadratic over `net` for up to 10 s; the run's result and
    /// the network's link statistics afterwards.
    fn drive<A: Algorithm>(
        alg: &mut A,
        n: usize,
        net: &NetworkConfig,
    ) -> (crate::engine::Result<crate::engine::Outcome>, String) {
        let env = BuildEnv::new(7);
        let mut store = ReferenceStore::new(Quadratic::new(4, 10.0, 0.0), n, Default::default(), 7);
        let mut world = World::new(
            Cluster::new(&ClusterConfig::new(n), &env).unwrap(),
            Network::new(net, n, &env).unwrap(),
            Topology::build(&TopologyConfig::Ring {}, n, &env).unwrap(),
            &mut store,
            &Default::default(),
            7,
        );
        let stop = RunConfig {
            sim_time_s: Some(10.0),
            epochs: None,
            worker_steps: None,
            eval_every_s: 100.0,
            eval_every_steps: None,
            divergence_loss: None,
        };
        let out = run(alg, &mut world, &stop, &mut Collect::default());
        (out, format!("{:?}", world.net.link_stats()))
    }

    fn round(ready: &[u64], queued: bool, net: &NetworkConfig) -> (Vec<SimTime>, String) {
        let mut alg = OneRound {
            ready: ready.iter().map(|&t| SimTime::from_nanos(t)).collect(),
            queued,
            result: Vec::new(),
        };
        let (out, links) = drive(&mut alg, ready.len(), net);
        out.unwrap();
        (alg.result, links)
    }

    /// With one bucket, the step-by-step loop and the queue post the same transfers in the same
    /// per-link order, so they agree to the nanosecond, whatever the ready times, also under
    /// congestion processes that advance with each link's time.
    #[test]
    fn one_bucket_loop_agrees_with_the_queue() {
        let ready = [
            1_000_000, 1_300_000, 1_000_000, 4_000_000, 1_000_500, 2_000_000,
        ];
        let plain = NetworkConfig::uniform(10.0, 5.0);
        let mut congested = NetworkConfig::uniform(10.0, 5.0);
        congested.random_congestion = vec![RandomCongestion {
            mean_on_s: 0.0002,
            mean_off_s: 0.0003,
            bandwidth_factor: 0.2,
            links: None,
            workers: None,
        }];
        for net in [&plain, &congested] {
            let (a, links_a) = round(&ready, false, net);
            let (b, links_b) = round(&ready, true, net);
            assert_eq!(a, b);
            assert_eq!(links_a, links_b);
            assert!(a.iter().all(|&t| t > SimTime::from_nanos(4_000_000)));
        }
    }

    /// Workers that compute for `1 + w` ms, join the ring, and go on after every round until
    /// `rounds` are done; worker `crash` (if any) crashes when it joins round `at`.
    struct Rounds {
        rounds: RingRound,
        n: usize,
        last: u64,
        crash: Option<(usize, u64)>,
        /// `(worker, round)` of every round completed, in order.
        done: Vec<(usize, u64)>,
        /// The computations done.
        computed: Vec<usize>,
    }

    impl Rounds {
        fn new(n: usize, last: u64, crash: Option<(usize, u64)>) -> Self {
            Rounds {
                rounds: RingRound::default(),
                n,
                last,
                crash,
                done: Vec::new(),
                computed: Vec::new(),
            }
        }

        fn begin(&self, w: usize, cx: &mut Ctx<'_, '_, RoundEvent>) {
            let d = SimTime::from_nanos(1_000_000 * (1 + w as u64));
            cx.after(d, RoundEvent::ComputeDone(w));
        }
    }

    impl RoundMethod<RoundEvent> for Rounds {
        fn rounds(&mut self) -> &mut RingRound {
            &mut self.rounds
        }

        fn computed(&mut self, w: usize, cx: &mut Ctx<'_, '_, RoundEvent>) {
            self.computed.push(w);
            self.rounds.join(0, w, cx, RoundEvent::RingDone);
            if self.crash == Some((w, self.rounds.ring(0).round(w))) {
                self.rounds.crash(w, cx.now());
            }
        }

        fn ring_done(&mut self, w: usize, round: u64, cx: &mut Ctx<'_, '_, RoundEvent>) {
            assert_eq!(self.rounds.ring(0).round(w), round + 1);
            self.done.push((w, round));
            if round + 1 < self.last {
                self.begin(w, cx);
            }
        }
    }

    impl Algorithm for Rounds {
        type Event = RoundEvent;
        fn start(&mut self, cx: &mut Ctx<'_, '_, RoundEvent>) {
            assert!(
                self.rounds.waiting().is_empty(),
                "nothing waits before the start"
            );
            assert_eq!(self.rounds.add(self.n, &[1_000, 1_000]), 0);
            for w in 0..self.n {
                self.begin(w, cx);
            }
        }
        fn handle(&mut self, event: RoundEvent, cx: &mut Ctx<'_, '_, RoundEvent>) {
            dispatch(self, event, cx);
        }
        fn waiting(&self) -> Vec<String> {
            self.rounds.waiting()
        }
    }

    /// Every worker completes every round, in order, each once; a round completes only after
    /// its slowest worker joined it.
    #[test]
    fn every_worker_completes_its_rounds_in_order() {
        let mut alg = Rounds::new(3, 3, None);
        let (out, _) = drive(&mut alg, 3, &NetworkConfig::uniform(10.0, 5.0));
        let out = out.unwrap();
        assert!(out.stalled.is_none());
        for w in 0..3 {
            let rounds: Vec<u64> = alg.done.iter().filter(|d| d.0 == w).map(|d| d.1).collect();
            assert_eq!(rounds, [0, 1, 2], "worker {w}");
        }
        // The first round's Done events come after the slowest worker's 3 ms.
        assert_eq!(alg.computed.len(), 9);
        assert!(alg.rounds.waiting().is_empty());
    }

    /// A crash breaks the ring: the round under way completes nowhere, the crashed worker
    /// is down, and the wait report names the live workers only.
    #[test]
    fn a_crash_breaks_every_round_and_the_live_workers_wait() {
        let mut alg = Rounds::new(3, 3, Some((0, 1)));
        let (out, _) = drive(&mut alg, 3, &NetworkConfig::uniform(10.0, 5.0));
        // Without `[[faults]]` the engine calls the stall a deadlock; it names the waits.
        let Err(crate::engine::Error::Deadlock { waiting, .. }) = out else {
            panic!("a deadlock, not {out:?}");
        };
        assert_eq!(alg.done.iter().filter(|d| d.1 == 1).count(), 0);
        assert_eq!(alg.done.len(), 3, "round 0 only: {:?}", alg.done);
        assert!(alg.rounds.is_down(0) && !alg.rounds.is_down(1));
        assert!(alg.rounds.ring(0).is_broken());
        assert_eq!(waiting, alg.rounds.waiting());
        assert_eq!(waiting.len(), 2);
        for (line, w) in waiting.iter().zip([1, 2]) {
            assert!(
                line.starts_with(&format!(
                    "worker {w} waits for all-reduce 1, which cannot complete: worker 0 crashed"
                )),
                "{line}"
            );
        }
        // The crashed worker had joined: its wait is still there to read.
        assert!(alg.rounds.waits(0).is_some());
        // A Done still due of a broken ring is ignored.
        let done = Done {
            worker: 1,
            round: 1,
        };
        assert_eq!(alg.rounds.complete(0, done), None);
    }

    /// The value of a round is formed once, by its first use, and handed back after the last.
    #[test]
    fn a_round_mean_is_formed_once_and_handed_back_after_the_last_use() {
        let mut mean = RoundMean::default();
        let mut formed = 0;
        for w in 0..3 {
            let v = mean.get(4, 3, || {
                formed += 1;
                10 + formed
            });
            assert_eq!(v, 11);
            assert_eq!(mean.current(), Some((4, 11)));
            assert_eq!(mean.used(), (w == 2).then_some(11));
        }
        assert_eq!(formed, 1);
        assert_eq!(mean.current(), None);
        assert_eq!(mean.get(5, 1, || 20), 20);
        assert_eq!(mean.used(), Some(20));
        assert_eq!(mean.used(), None);
    }
}
