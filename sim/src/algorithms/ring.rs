//! The ring all-reduce, made of messages over the network model: shared by all-reduce SGD
//! (gradients), local SGD (models) and LAP-SGD (model snapshots).
//!
//! The payload is split into `B` buckets; each bucket is all-reduced by its own ring of `n`
//! workers (reduce-scatter then all-gather, `2(n−1)` steps, worker `w` sending a chunk of
//! `ceil(S_b / n)` bytes to `(w + 1) mod n` per step). For every bucket, a worker sends its first
//! chunk when its data for the bucket is ready and chunk `k + 1` once it has received chunk `k`
//! from its predecessor; it is done with a bucket when it has received all `2(n−1)` chunks, and
//! done with a round when it is done with every bucket. A round cannot complete anywhere before
//! every worker has contributed to it. Links are FIFO, so chunks arrive in order.
//!
//! **Barrier.** A worker that has contributed every bucket of its round waits for the ring. Until
//! every worker has contributed to the round, the round cannot complete: the worker waits for the
//! last contributor's progress ([`Barrier::Wait`]); from then on it waits only for the network.
//! [`Ring::ready`] reports which it is, and [`mark`] turns that into activities: blocked until the
//! last worker contributes (the wait attributed to that worker), then communicating until the
//! ring completes.
//!
//! Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of workstations",
//! JPDC 2009.

use std::collections::BTreeMap;

use crate::record::Activity;
use crate::run::Ctx;

/// What a worker's full contribution to its round means for its wait.
#[derive(Clone, Debug, PartialEq, Eq)]
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

/// A ring chunk in flight: step `step` of bucket `bucket` of round `round`, to `worker`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Receiver.
    pub worker: usize,
    /// The round (all-reduce) it belongs to.
    pub round: u64,
    /// The bucket.
    pub bucket: u32,
    /// Ring step, in `0..2(n−1)`.
    pub step: u32,
}

#[derive(Clone, Copy, Debug, Default)]
struct Lane {
    ready: bool,
    sent: u32,
    received: u32,
}

/// The state of a bucketed ring all-reduce over workers `0..n`.
#[derive(Clone, Debug)]
pub struct Ring {
    n: usize,
    chunk_bytes: Vec<u64>,
    lanes: Vec<Vec<Lane>>,
    round: Vec<u64>,
    done: Vec<usize>,
    /// Per round: the workers that have contributed every bucket, in order.
    contributed: BTreeMap<u64, Vec<usize>>,
}

impl Ring {
    /// A ring over `n` workers for payloads whose buckets carry `bucket_bytes` each.
    pub fn new(n: usize, bucket_bytes: &[u64]) -> Self {
        let b = bucket_bytes.len().max(1);
        Ring {
            n,
            chunk_bytes: bucket_bytes.iter().map(|s| s.div_ceil(n as u64)).collect(),
            lanes: vec![vec![Lane::default(); b]; n],
            round: vec![0; n],
            done: vec![0; n],
            contributed: BTreeMap::new(),
        }
    }

    /// Ring steps per bucket: `2(n−1)`.
    pub fn steps(&self) -> u32 {
        2 * (self.n as u32 - 1)
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
        self.lanes[worker].iter().all(|l| l.ready)
    }

    /// `worker`'s data for `bucket` of its current round is ready: send what can be sent.
    /// When that completes the worker's contribution to the round, returns the
    /// [`Barrier`] it reaches.
    pub fn ready<E>(
        &mut self,
        worker: usize,
        bucket: usize,
        cx: &mut Ctx<'_, '_, E>,
        wrap: fn(Chunk) -> E,
    ) -> Option<Barrier> {
        let was = self.contributing(worker);
        self.lanes[worker][bucket].ready = true;
        self.try_send(worker, bucket, cx, wrap);
        (!was && self.contributing(worker)).then(|| self.contribute(worker))
    }

    /// Every bucket of `worker`'s current round is ready; returns the [`Barrier`] it reaches.
    pub fn ready_all<E>(
        &mut self,
        worker: usize,
        cx: &mut Ctx<'_, '_, E>,
        wrap: fn(Chunk) -> E,
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

    fn try_send<E>(
        &mut self,
        w: usize,
        bucket: usize,
        cx: &mut Ctx<'_, '_, E>,
        wrap: fn(Chunk) -> E,
    ) {
        let total = self.steps();
        let next = (w + 1) % self.n;
        let bytes = self.chunk_bytes[bucket];
        let round = self.round[w];
        let lane = &mut self.lanes[w][bucket];
        while lane.ready && lane.sent < total && (lane.sent == 0 || lane.received >= lane.sent) {
            let ev = wrap(Chunk {
                worker: next,
                round,
                bucket: bucket as u32,
                step: lane.sent,
            });
            cx.send(w, next, bytes, ev);
            lane.sent += 1;
        }
    }

    /// A chunk arrived. Returns true when its receiver has thereby completed every bucket of its
    /// round; its state then moves to the next round.
    pub fn on_chunk<E>(&mut self, c: Chunk, cx: &mut Ctx<'_, '_, E>, wrap: fn(Chunk) -> E) -> bool {
        let w = c.worker;
        let b = c.bucket as usize;
        debug_assert_eq!(
            (c.round, c.step),
            (self.round[w], self.lanes[w][b].received),
            "FIFO ring order"
        );
        self.lanes[w][b].received += 1;
        self.try_send(w, b, cx, wrap);
        if self.lanes[w][b].received < self.steps() {
            return false;
        }
        self.done[w] += 1;
        if self.done[w] < self.buckets() {
            return false;
        }
        self.done[w] = 0;
        self.round[w] += 1;
        for lane in &mut self.lanes[w] {
            *lane = Lane::default();
        }
        true
    }

    /// What `worker` waits for in the ring, if it has contributed to its round.
    pub fn waiting(&self, worker: usize) -> Option<String> {
        if !self.contributing(worker) {
            return None;
        }
        let pred = (worker + self.n - 1) % self.n;
        let (b, lane) = self.lanes[worker]
            .iter()
            .enumerate()
            .find(|(_, l)| l.received < self.steps())?;
        Some(format!(
            "worker {worker} waits for ring chunk {} of bucket {b} of all-reduce {} from worker {pred}",
            lane.received, self.round[worker]
        ))
    }
}
