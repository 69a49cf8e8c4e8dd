//! Gradient staleness, measured in the store layer for every algorithm alike.
//!
//! [`Tracked`] wraps the run's [`ReplicaStore`]: it forwards every operation unchanged and keeps
//! versions beside it, so no algorithm needs to count anything. It measures two things at every
//! application of a gradient: its **global staleness** and its **row staleness**.
//!
//! # Global staleness
//!
//! The global staleness of a gradient applied to a row is the number of *global iterations*
//! between the read of the model the gradient was computed on and this application. A global
//! iteration is one gradient (a worker's, or a mean of several) entering the training: the
//! counter advances once per gradient handle, at its first application, wherever that is. So
//! all-reduce SGD, which applies one averaged gradient to every replica, advances it once per
//! round; DASGD, which applies each gradient at every model, once per gradient (at its origin);
//! a parameter server, once per push (at the first shard that applies it); every other
//! algorithm, once per worker step. This is the iteration counter of the analyses: AD-PSGD's
//! `T_k` counts updates of the global iterate, one per worker step (Lian et al. 2018), and
//! asynchronous parallel SGD's `τ` counts server updates (Lian et al. 2015).
//!
//! - **Read**: the instant the values the gradient was computed on were current — the request
//!   for a row that holds its own values; for a row (or a block of it) that is a pure copy of
//!   another row or of a message buffer (see *Lineage* below), the instant the copy was taken
//!   from its source. A parameter-server worker's gradient is thus read when the server served
//!   the pull. A mean of several gradients is read at its oldest part.
//! - **Application** of gradient `g` to a block: the global iterations after the read (of the
//!   parts of the lineage that overlap the block), not counting `g`'s own. Updates handled at
//!   the same simulated instant count in the order the engine handles them: if `n` workers apply
//!   their own gradients, all read at one instant, at one later instant, they measure
//!   `0, 1, …, n − 1`.
//!
//! # Row staleness
//!
//! The row staleness of a gradient applied to row `t` is the number of updates row `t` received
//! between the read the gradient was computed on and its application. In detail:
//!
//! - **Writes.** Every operation that writes a row is an update of that row: an optimizer step
//!   ([`ReplicaStore::apply_gradient_block`]), an average, a mix, a copy. Writes are numbered by
//!   one global counter and each row keeps the list of its writes with the coordinates they
//!   touched (a block write touches only its block).
//! - **Lineage.** Each coordinate block of a row remembers where its values come from: the row
//!   itself, or — after a *pure copy*, [`ReplicaStore::copy_block`] or a mix or message buffer
//!   made of a single term of weight 1 — the row it was copied from, as of the write that was
//!   last before the copy. Message buffers carry the lineage of what they copied (a combination
//!   of several terms is fresh content of no row). So a parameter-server worker's gradient,
//!   computed on a pulled copy of the server's model, is measured against the server's row.
//! - **Read.** A gradient request records the lineage of the worker's row and the write counter
//!   at that instant.
//! - **Application** of the gradient to block `B` of row `t`: for each block of the read lineage
//!   that overlaps `B`, the threshold is the write number the copy was taken at when the lineage
//!   names `t` itself, else the write counter at the request; the staleness is the number of
//!   writes of `t` that touched such a block after its threshold. The update itself is not
//!   counted.
//! - **Means** ([`ReplicaStore::mean_gradient`]): applied to row `t`, a mean is measured by its
//!   part computed on `t` itself if it has one (so all-reduce SGD, whose replicas are equal when
//!   read, measures 0), else by its oldest read.
//!
//! What this gives, algorithm by algorithm: a parameter server counts the gradients its model (or
//! the shard's block of it) received between serving a worker's pull and applying that worker's
//! push, as [`crate::algorithms::ParameterServer`]'s own counter does — `n − 1` in steady state
//! for `n` equal workers; DASGD counts the gradients the receiving model applied between the
//! origin's read and the arrival; decentralized methods count the averagings and local steps a
//! replica received while the gradient was computed (AD-PSGD's averaging, LAP-SGD's concurrent
//! processes, D-PSGD's mixing between read and step); all-reduce and local SGD measure 0.
//!
//! An application whose block lies inside the state suffix ([`ReplicaStore::state`]: a
//! parameter-server worker taking its own pass's running statistics) is a write of the row but
//! no optimizer step: it is neither measured nor a global iteration; and every measure is taken
//! on the trainable coordinates of the applied block, so writes of state alone are not counted.
//!
//! Both measures are taken at every application (a gradient applied to `n` rows, or block by
//! block, is measured `n` times, or once per block). Histograms are kept per worker (the worker
//! that computed the gradient; for a mean applied to a worker's row, that worker); with
//! [`Tracked::log_gradients`] every application is also kept as a [`GradientRecord`] until the
//! run loop hands it to the observer. Old writes are forgotten once no lineage, buffer or pending
//! gradient can refer to them, so memory stays bounded.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use std::ops::Range;

use crate::clock::time::SimTime;
use crate::record::{GradientRecord, Histogram};
use crate::store::handles::HandleMap;
use crate::store::{Evaluation, GradId, MsgId, ReplicaStore, Slot};

/// Not a row: the origin of content that is a combination of several terms.
const FRESH: usize = usize::MAX;

/// Where the values of a block come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Origin {
    /// The row's own latest values.
    Own,
    /// Row `row` as it was after global write `seq` (`row == FRESH`: a combination taken then).
    From { row: usize, seq: u64 },
}

/// Sorted, non-overlapping blocks covering `0..num_params`.
type Lineage = Vec<(Range<usize>, Origin)>;

/// A resolved lineage: every block names a row (or `FRESH`) and a write number. Nearly always
/// one block over the whole row, kept without allocating.
#[derive(Clone, Debug, Serialize, Deserialize)]
enum Resolved {
    /// All of the row comes from `row` after write `seq`.
    Whole { row: usize, seq: u64 },
    /// Sorted blocks covering the row.
    Blocks(Vec<(Range<usize>, usize, u64)>),
}

impl Resolved {
    /// The blocks, for a row of `p` parameters.
    fn pieces(&self, p: usize) -> impl Iterator<Item = (Range<usize>, usize, u64)> + '_ {
        let (one, many) = match self {
            Resolved::Whole { row, seq } => (Some((0..p, *row, *seq)), &[][..]),
            Resolved::Blocks(v) => (None, &v[..]),
        };
        one.into_iter().chain(many.iter().cloned())
    }

    /// The oldest write number named.
    fn oldest(&self) -> u64 {
        match self {
            Resolved::Whole { seq, .. } => *seq,
            Resolved::Blocks(v) => v.iter().map(|(_, _, s)| *s).min().unwrap_or(u64::MAX),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct RowVersions {
    lineage: Lineage,
    /// The write numbers of the row's writes, in increasing order: 8 bytes each, since a row
    /// of DASGD at a thousand workers is written a thousand times per step, and they are
    /// searched at every application.
    writes: Vec<u64>,
    /// `(write number, coordinates touched)` of the writes among `writes` that touched only part
    /// of the row, in increasing order (none, nearly always: counting is then a search).
    partial: Vec<(u64, Range<usize>)>,
    /// Writes of the row so far (forgotten ones included): the writes after a read of the row
    /// are this count now less the count at the read.
    total: u64,
    /// The lineage is one block of the row's own values (nearly always): known without reading
    /// the lineage, which lives in an allocation of its own.
    own: bool,
}

/// The live gradients' reads, by handle.
type GradTable = HandleMap<Entry>;

/// A pending gradient's reads, and whether it has been counted as a global iteration (applied
/// once): a flag beside its reads instead of a set of handles searched at every application.
#[derive(Clone, Serialize, Deserialize)]
struct Entry {
    reads: Reads,
    counted: bool,
}

/// The reads of a gradient: one, or several for a mean.
#[derive(Clone, Debug, Serialize, Deserialize)]
enum Reads {
    One(Read),
    Many(Vec<Read>),
}

impl Reads {
    fn as_slice(&self) -> &[Read] {
        match self {
            Reads::One(r) => std::slice::from_ref(r),
            Reads::Many(v) => v,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Read {
    worker: usize,
    time: SimTime,
    seq: u64,
    lineage: Resolved,
    /// Global iterations when read: those after the read are the count now less this one.
    iters: u64,
    /// Writes of row `worker` when read ([`RowVersions::total`]).
    row_writes: u64,
}

/// What a checkpoint keeps of a [`Tracked`] store: its versions and histograms, and the wrapped
/// store's own state ([`ReplicaStore::save_state`]).
#[derive(Serialize, Deserialize)]
struct TrackedState {
    seq: u64,
    rows: Vec<RowVersions>,
    msgs: HandleMap<Resolved>,
    grads: GradTable,
    row_staleness: Vec<Histogram>,
    global_staleness: Vec<Histogram>,
    iterations: VecDeque<u64>,
    global_total: u64,
    logged_writes: usize,
    next_prune: usize,
    inner: Vec<u8>,
}

/// The store of a run, with versions kept beside it (see the [module documentation](self)).
pub struct Tracked<'s> {
    inner: &'s mut dyn ReplicaStore,
    now: SimTime,
    seq: u64,
    rows: Vec<RowVersions>,
    msgs: HandleMap<Resolved>,
    grads: GradTable,
    /// Parameters per row (constant).
    params: usize,
    row_staleness: Vec<Histogram>,
    global_staleness: Vec<Histogram>,
    /// Measurements not yet counted in the histograms, `(worker, row, global)` in the order
    /// taken: counted by the batch ([`Tracked::count_measured`]), where a histogram update that
    /// misses the cache (two per worker, thousands of values long at 1,024 workers) overlaps
    /// the next ones instead of stalling an event.
    measured: Vec<(usize, u64, u64)>,
    /// The write number of every global iteration not yet forgotten, increasing.
    iterations: VecDeque<u64>,
    /// Global iterations so far.
    global_total: u64,
    log: Option<Vec<GradientRecord>>,
    logged_writes: usize,
    next_prune: usize,
}

const FIRST_PRUNE: usize = 4096;

/// Measurements kept before they are counted in the histograms.
const MEASURED_BATCH: usize = 1024;

impl<'s> Tracked<'s> {
    /// Wraps `inner`, whose rows all hold their own values.
    pub fn new(inner: &'s mut dyn ReplicaStore) -> Self {
        let p = inner.num_params();
        let rows = (0..inner.rows())
            .map(|_| RowVersions {
                lineage: vec![(0..p, Origin::Own)],
                own: true,
                ..Default::default()
            })
            .collect();
        let workers = inner.workers();
        Tracked {
            inner,
            now: SimTime::ZERO,
            seq: 0,
            rows,
            msgs: HandleMap::default(),
            grads: GradTable::default(),
            params: p,
            row_staleness: vec![Histogram::default(); workers],
            global_staleness: vec![Histogram::default(); workers],
            measured: Vec::with_capacity(MEASURED_BATCH),
            iterations: VecDeque::new(),
            global_total: 0,
            log: None,
            logged_writes: 0,
            next_prune: FIRST_PRUNE,
        }
    }

    /// The wrapped store.
    pub fn inner(&mut self) -> &mut dyn ReplicaStore {
        self.inner
    }

    /// Sets the simulated time stamped on gradient records (the run loop does, before each
    /// event).
    pub fn set_now(&mut self, now: SimTime) {
        self.now = now;
    }

    /// Keeps every application as a [`GradientRecord`] (see [`Tracked::take_gradients`]).
    pub fn log_gradients(&mut self, on: bool) {
        self.log = on.then(Vec::new);
    }

    /// Whether applications were logged since the last [`Tracked::take_gradients`].
    pub fn has_gradients(&self) -> bool {
        self.log.as_ref().is_some_and(|l| !l.is_empty())
    }

    /// The applications logged since the last call.
    pub fn take_gradients(&mut self) -> Vec<GradientRecord> {
        self.log.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Per worker: the row staleness of every application of the gradients it computed.
    pub fn row_staleness(&mut self) -> &[Histogram] {
        self.count_measured();
        &self.row_staleness
    }

    /// Per worker: the global staleness of every application of the gradients it computed.
    pub fn global_staleness(&mut self) -> &[Histogram] {
        self.count_measured();
        &self.global_staleness
    }

    /// Counts the measurements kept so far in the histograms, in the order they were taken (so
    /// the histograms are the same, layout included, as if each had been counted at once).
    fn count_measured(&mut self) {
        for &(worker, stale, global) in &self.measured {
            if let Some(h) = self.row_staleness.get_mut(worker) {
                h.record(stale);
            }
            if let Some(h) = self.global_staleness.get_mut(worker) {
                h.record(global);
            }
        }
        self.measured.clear();
    }

    /// Global iterations so far: gradients applied at least once.
    pub fn global_iterations(&self) -> u64 {
        self.global_total
    }

    fn full(&self) -> Range<usize> {
        0..self.params
    }

    /// Row `r`'s lineage with `Own` resolved to (r, now).
    fn resolve_row(&self, r: usize) -> Resolved {
        let resolve = |o: &Origin| match *o {
            Origin::Own => (r, self.seq),
            Origin::From { row, seq } => (row, seq),
        };
        let v = &self.rows[r];
        if v.own {
            return Resolved::Whole {
                row: r,
                seq: self.seq,
            };
        }
        match &v.lineage[..] {
            [(_, o)] => {
                let (row, seq) = resolve(o);
                Resolved::Whole { row, seq }
            }
            blocks => Resolved::Blocks(
                blocks
                    .iter()
                    .map(|(b, o)| {
                        let (row, seq) = resolve(o);
                        (b.clone(), row, seq)
                    })
                    .collect(),
            ),
        }
    }

    fn resolve(&self, slot: Slot) -> Resolved {
        match slot {
            Slot::Row(r) => self.resolve_row(r),
            // A buffer that is not a pure copy is fresh content of no row; its write number
            // matters to nobody (a threshold on a row other than the target is the request's).
            Slot::Msg(m) => self.msgs.get(m.0).cloned().unwrap_or(Resolved::Whole {
                row: FRESH,
                seq: self.seq,
            }),
        }
    }

    /// A pure copy: a single term of weight 1.
    fn pure(terms: &[(Slot, f64)]) -> Option<Slot> {
        match terms {
            [(slot, w)] if *w == 1.0 => Some(*slot),
            _ => None,
        }
    }

    /// Records a write of `block` of `row` whose values are `pieces` there (`None`: the row's
    /// own new values). Inline: nearly every write is a row's own new values over all of it,
    /// which changes no lineage and is a push and two counts.
    #[inline(always)]
    fn write(&mut self, row: usize, block: Range<usize>, pieces: Option<Resolved>) {
        let seq = self.seq;
        let full = block == (0..self.params);
        let v = &mut self.rows[row];
        if pieces.is_some() || !full || !v.own {
            self.relineage(row, &block, pieces);
        }
        let v = &mut self.rows[row];
        v.writes.push(seq);
        if !full {
            v.partial.push((seq, block));
        }
        v.total += 1;
        self.logged_writes += 1;
    }

    /// The lineage of `row` after a write of `block` whose values are `pieces` there.
    fn relineage(&mut self, row: usize, block: &Range<usize>, pieces: Option<Resolved>) {
        let p = self.params;
        let v = &mut self.rows[row];
        let new: Lineage = match pieces {
            None => vec![(block.clone(), Origin::Own)],
            Some(pieces) => pieces
                .pieces(p)
                .filter_map(|(b, r, s)| {
                    let b = b.start.max(block.start)..b.end.min(block.end);
                    (!b.is_empty()).then_some((b, Origin::From { row: r, seq: s }))
                })
                .collect(),
        };
        v.lineage = splice(&v.lineage, block, new);
        v.own = matches!(v.lineage[..], [(_, Origin::Own)]);
    }

    /// Starts a write operation: a new write number for the rows it writes.
    fn bump(&mut self) {
        self.seq += 1;
    }

    /// Forgets old writes once enough have been logged: a test per write, inline, and the
    /// pass over the tables ([`Tracked::prune`]) rarely.
    #[inline(always)]
    fn maybe_prune(&mut self) {
        if self.logged_writes >= self.next_prune {
            self.prune();
        }
    }

    /// Forgets the writes nothing can compare against any more.
    fn prune(&mut self) {
        // The oldest threshold anything may still compare against.
        let mut keep_after = self.seq;
        for read in self.grads.values().flat_map(|e| e.reads.as_slice()) {
            keep_after = keep_after.min(read.seq).min(read.lineage.oldest());
        }
        for l in self.msgs.values() {
            keep_after = keep_after.min(l.oldest());
        }
        for v in self.rows.iter().filter(|v| !v.own) {
            for (_, o) in &v.lineage {
                if let Origin::From { seq, .. } = o {
                    keep_after = keep_after.min(*seq);
                }
            }
        }
        let mut left = 0;
        for v in &mut self.rows {
            let cut = v.writes.partition_point(|s| *s <= keep_after);
            v.writes.drain(..cut);
            let cut = v.partial.partition_point(|(s, _)| *s <= keep_after);
            v.partial.drain(..cut);
            left += v.writes.len();
        }
        let cut = self.iterations.partition_point(|s| *s <= keep_after);
        self.iterations.drain(..cut);
        self.logged_writes = left;
        self.next_prune = (2 * left).max(FIRST_PRUNE);
    }

    /// The global staleness of `grad` applied to `block`: the global iterations after the
    /// oldest read of the parts that overlap `block`, `grad`'s own not counted.
    fn measure_global(&self, entry: &Entry, block: &Range<usize>) -> Option<u64> {
        let own = u64::from(entry.counted);
        let p = self.params;
        // Nearly always: one read of values from one source, taken at the read itself.
        if let Reads::One(r) = &entry.reads
            && let Resolved::Whole { seq, .. } = r.lineage
            && seq == r.seq
        {
            let overlaps = 0 < block.end && block.start < p;
            return overlaps.then(|| (self.global_total - r.iters).saturating_sub(own));
        }
        let reads = entry.reads.as_slice();
        let oldest = reads
            .iter()
            .flat_map(|r| r.lineage.pieces(p))
            .filter(|(b, _, _)| b.start < block.end && block.start < b.end)
            .map(|(_, _, s)| s)
            .min()?;
        // The iterations after write `oldest`. When it is a read's own instant (a worker's
        // gradient on its own values, nearly always), they are those counted since that read;
        // otherwise (a copy taken earlier) they are searched among the iterations kept.
        let after = match reads.iter().find(|r| r.seq == oldest) {
            Some(r) => (self.global_total - r.iters) as usize,
            None => {
                let it = &self.iterations;
                it.len() - rank(it.len(), |k| it[k], oldest)
            }
        };
        Some((after as u64).saturating_sub(own))
    }

    /// The row staleness of the gradient `entry` applied to `block` of row `t`, the worker that
    /// computed it and when it was read.
    fn measure(
        &self,
        entry: &Entry,
        t: usize,
        block: &Range<usize>,
    ) -> Option<(usize, u64, SimTime)> {
        let v = &self.rows[t];
        // Nearly always: one read of values from one source, and a row whose writes all
        // touched all of it.
        if let Reads::One(read) = &entry.reads
            && let Resolved::Whole { row, seq } = read.lineage
            && v.partial.is_empty()
        {
            if block.start >= block.end.min(self.params) {
                return None;
            }
            let threshold = if row == t { seq } else { read.seq };
            let stale = if read.worker == t && threshold == read.seq {
                v.total - read.row_writes
            } else {
                let writes = &v.writes;
                (writes.len() - rank(writes.len(), |k| writes[k], threshold)) as u64
            };
            return Some((read.worker, stale, read.time));
        }
        let reads = entry.reads.as_slice();
        let read = reads
            .iter()
            .find(|r| r.worker == t)
            .or_else(|| reads.iter().min_by_key(|r| (r.seq, r.worker)))?;
        let p = self.params;
        let parts = read.lineage.pieces(p).filter_map(|(b, row, s)| {
            let b = b.start.max(block.start)..b.end.min(block.end);
            let threshold = if row == t { s } else { read.seq };
            (!b.is_empty()).then_some((b, threshold))
        });
        let writes = &v.writes;
        if v.partial.is_empty() {
            // Every write touched the whole row, so every part: count those after the oldest
            // threshold. When that is the read of this very row, they are the row's writes
            // since the read; otherwise they are searched.
            let oldest = parts.map(|(_, s)| s).min()?;
            let stale = if read.worker == t && oldest == read.seq {
                (v.total - read.row_writes) as usize
            } else {
                writes.len() - rank(writes.len(), |k| writes[k], oldest)
            };
            return Some((read.worker, stale as u64, read.time));
        }
        let parts: Vec<(Range<usize>, u64)> = parts.collect();
        let oldest = parts.iter().map(|(_, s)| *s).min()?;
        let mut stale = 0;
        // Newest first; a write is partial when it is the next of `partial` from the end.
        let mut partial = v.partial.iter().rev().peekable();
        for seq in writes.iter().rev() {
            if *seq <= oldest {
                break;
            }
            let touched = match partial.next_if(|(s, _)| s == seq) {
                Some((_, b)) => b.clone(),
                None => 0..self.params,
            };
            if parts
                .iter()
                .any(|(b, s)| seq > s && touched.start < b.end && b.start < touched.end)
            {
                stale += 1;
            }
        }
        Some((read.worker, stale, read.time))
    }
}

/// `lineage` with `block` replaced by `new` (which covers exactly `block`), adjacent blocks of
/// the same origin merged.
/// `⌊offset · last / span⌋` (`offset ≤ span`, `span > 0`): where a key `offset` past the
/// first lies among `last + 1` evenly spread keys. In 64 bits where the product fits (a 128-bit
/// division is a library call, and this runs at every application).
fn interpolate(offset: u64, last: usize, span: u64) -> usize {
    match offset.checked_mul(last as u64) {
        Some(p) => (p / span) as usize,
        None => (u128::from(offset) * last as u128 / u128::from(span)) as usize,
    }
}

/// How many of the `len` sorted keys `at(0..len)` are at most `x`: the `partition_point` of
/// `|k| k <= x`, found by interpolation (the keys here are write numbers, spread nearly evenly)
/// and then galloping and bisecting from the guess. A measurement at 1,024 workers searches
/// tables of thousands of writes at every application; a plain binary search there misses the
/// cache at every probe, where this typically touches two or three neighbouring entries.
fn rank(len: usize, at: impl Fn(usize) -> u64, x: u64) -> usize {
    if len == 0 || at(0) > x {
        return 0;
    }
    if at(len - 1) <= x {
        return len;
    }
    // at(0) <= x < at(len − 1).
    let (first, last) = (at(0), at(len - 1));
    let guess = interpolate(x - first, len - 1, last - first);
    // Bracket: at(lo) <= x < at(hi).
    let (mut lo, mut hi) = if at(guess) <= x {
        let (mut lo, mut step) = (guess, 1);
        while lo + step < len - 1 && at(lo + step) <= x {
            lo += step;
            step *= 2;
        }
        (lo, (lo + step).min(len - 1))
    } else {
        let (mut hi, mut step) = (guess, 1);
        while hi > step && at(hi - step) > x {
            hi -= step;
            step *= 2;
        }
        (hi.saturating_sub(step), hi)
    };
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if at(mid) <= x {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

fn splice(lineage: &Lineage, block: &Range<usize>, new: Lineage) -> Lineage {
    let mut out: Lineage = Vec::with_capacity(lineage.len() + new.len());
    let push = |b: Range<usize>, o: Origin, out: &mut Lineage| {
        if b.is_empty() {
            return;
        }
        if let Some((last, lo)) = out.last_mut()
            && *lo == o
            && last.end == b.start
        {
            last.end = b.end;
            return;
        }
        out.push((b, o));
    };
    for (b, o) in lineage {
        push(b.start..b.end.min(block.start), *o, &mut out);
    }
    for (b, o) in new {
        push(b, o, &mut out);
    }
    for (b, o) in lineage {
        push(b.start.max(block.end)..b.end, *o, &mut out);
    }
    out
}

impl ReplicaStore for Tracked<'_> {
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

    fn computes(&self) -> bool {
        self.inner.computes()
    }

    fn save_state(&mut self) -> Result<Vec<u8>, String> {
        self.count_measured();
        let state = TrackedState {
            seq: self.seq,
            rows: self.rows.clone(),
            msgs: self.msgs.clone(),
            grads: self.grads.clone(),
            row_staleness: self.row_staleness.clone(),
            global_staleness: self.global_staleness.clone(),
            iterations: self.iterations.clone(),
            global_total: self.global_total,
            logged_writes: self.logged_writes,
            next_prune: self.next_prune,
            inner: self.inner.save_state()?,
        };
        postcard::to_stdvec(&state).map_err(|e| e.to_string())
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), String> {
        let state: TrackedState = postcard::from_bytes(state).map_err(|e| e.to_string())?;
        self.inner.restore_state(&state.inner)?;
        self.seq = state.seq;
        self.rows = state.rows;
        self.msgs = state.msgs;
        self.grads = state.grads;
        self.row_staleness = state.row_staleness;
        self.global_staleness = state.global_staleness;
        self.measured.clear();
        self.iterations = state.iterations;
        self.global_total = state.global_total;
        self.logged_writes = state.logged_writes;
        self.next_prune = state.next_prune;
        Ok(())
    }

    fn layers(&self) -> Vec<crate::store::Layer> {
        self.inner.layers()
    }

    fn state(&self) -> Range<usize> {
        self.inner.state()
    }

    fn add_rows(&mut self, count: usize) -> usize {
        let first = self.inner.add_rows(count);
        let p = self.params;
        for _ in 0..count {
            self.rows.push(RowVersions {
                lineage: vec![(0..p, Origin::Own)],
                own: true,
                ..Default::default()
            });
        }
        first
    }

    fn request_gradient_scaled(&mut self, worker: usize, scale: f64) -> GradId {
        let g = self.inner.request_gradient_scaled(worker, scale);
        let read = Read {
            worker,
            time: self.now,
            seq: self.seq,
            lineage: self.resolve_row(worker),
            iters: self.global_total,
            row_writes: self.rows[worker].total,
        };
        self.grads.insert(
            g.0,
            Entry {
                reads: Reads::One(read),
                counted: false,
            },
        );
        g
    }

    fn mean_gradient(&mut self, grads: &[GradId]) -> GradId {
        let g = self.inner.mean_gradient(grads);
        let mut reads = Vec::new();
        for id in grads {
            match self.grads.remove(id.0).map(|e| e.reads) {
                Some(Reads::One(r)) => reads.push(r),
                Some(Reads::Many(v)) => reads.extend(v),
                None => {}
            }
        }
        self.grads.insert(
            g.0,
            Entry {
                reads: Reads::Many(reads),
                counted: false,
            },
        );
        g
    }

    fn apply_gradient_block(&mut self, row: usize, grad: GradId, lr: f64, block: Range<usize>) {
        let state = self.inner.state().start;
        if !block.is_empty() && block.start >= state {
            // Only state coordinates (a parameter-server worker's own running statistics): a
            // write of the row, but no optimizer step, so neither measured nor a global
            // iteration.
            self.inner
                .apply_gradient_block(row, grad, lr, block.clone());
            self.bump();
            self.write(row, block, None);
            self.maybe_prune();
            return;
        }
        // Measured on the trainable coordinates: writes of state alone (a parameter server's
        // running statistics following a worker's) are not updates a gradient can be stale by.
        let measured = block.start..block.end.min(state);
        // The gradient's slot, found once for the measures and the count below.
        let slot = self.grads.slot(grad.0);
        if !block.is_empty()
            && let Some(entry) = slot.and_then(|k| self.grads.at(k))
            && let Some((worker, stale, read)) = self.measure(entry, row, &measured)
        {
            let global = self.measure_global(entry, &measured).unwrap_or(0);
            if self.measured.len() == MEASURED_BATCH {
                self.count_measured();
            }
            self.measured.push((worker, stale, global));
            if let Some(log) = &mut self.log {
                log.push(GradientRecord {
                    worker,
                    row,
                    read,
                    apply: self.now,
                    row_staleness: stale,
                    global_staleness: global,
                });
            }
        }
        self.inner
            .apply_gradient_block(row, grad, lr, block.clone());
        if !block.is_empty() {
            self.bump();
            // Counted as a global iteration at its first application.
            if let Some(e) = slot.and_then(|k| self.grads.at_mut(k))
                && !std::mem::replace(&mut e.counted, true)
            {
                self.iterations.push_back(self.seq);
                self.global_total += 1;
            }
            self.write(row, block, None);
            self.maybe_prune();
        }
    }

    fn release_gradient(&mut self, grad: GradId) {
        self.grads.remove(grad.0);
        self.inner.release_gradient(grad);
    }

    fn swap_optimizer_state(&mut self, a: usize, b: usize) {
        // Optimizer state is not parameters: no version, no write of either row.
        self.inner.swap_optimizer_state(a, b);
    }

    fn reset_optimizer_state(&mut self, row: usize) {
        // Optimizer state is not parameters: no version, no write of the row.
        self.inner.reset_optimizer_state(row);
    }

    fn average(&mut self, rows: &[usize]) {
        self.inner.average(rows);
        self.bump();
        let full = self.full();
        for &r in rows {
            self.write(r, full.clone(), None);
        }
        self.maybe_prune();
    }

    fn mix(&mut self, dst: usize, terms: &[(Slot, f64)]) {
        let source = Self::pure(terms);
        if source == Some(Slot::Row(dst)) {
            return self.inner.mix(dst, terms);
        }
        let pieces = source.map(|s| self.resolve(s));
        self.inner.mix(dst, terms);
        self.bump();
        let full = self.full();
        self.write(dst, full, pieces);
        self.maybe_prune();
    }

    /// Only pure copies are remembered: any other buffer is fresh content, which
    /// the lineage lookup assumes of a buffer it does not know.
    fn new_msg(&mut self, terms: &[(Slot, f64)]) -> MsgId {
        let lineage = Self::pure(terms).map(|s| self.resolve(s));
        let m = self.inner.new_msg(terms);
        if let Some(l) = lineage {
            self.msgs.insert(m.0, l);
        }
        m
    }

    fn release_msg(&mut self, msg: MsgId) {
        self.msgs.remove(msg.0);
        self.inner.release_msg(msg);
    }

    fn matrices(&self) -> Vec<crate::store::Matrix> {
        self.inner.matrices()
    }

    fn hidden_matrices(&self) -> Vec<crate::store::Hidden> {
        self.inner.hidden_matrices()
    }

    fn tensors(&self) -> Vec<Range<usize>> {
        self.inner.tensors()
    }

    fn msg_values(&mut self, msg: MsgId) -> Vec<f64> {
        self.inner.msg_values(msg)
    }

    /// Fresh content: no lineage, as any buffer that is not a pure copy.
    fn msg_from_values(&mut self, values: &[f64]) -> MsgId {
        self.inner.msg_from_values(values)
    }

    fn gradient_values(&mut self, grad: GradId) -> Vec<f64> {
        self.inner.gradient_values(grad)
    }

    /// The gradient keeps its reads: a compressed mean is as stale as the gradients it stands
    /// for.
    fn set_gradient_values(&mut self, grad: GradId, values: &[f64]) {
        self.inner.set_gradient_values(grad, values)
    }

    fn copy_block(&mut self, dst: usize, src: usize, block: Range<usize>) {
        if dst == src || block.is_empty() {
            return self.inner.copy_block(dst, src, block);
        }
        let pieces = self.resolve_row(src);
        self.inner.copy_block(dst, src, block.clone());
        self.bump();
        self.write(dst, block, Some(pieces));
        self.maybe_prune();
    }

    fn evaluate(&mut self) -> Evaluation {
        self.inner.evaluate()
    }

    fn evaluate_mix(&mut self, terms: &[(usize, f64)]) -> Evaluation {
        self.inner.evaluate_mix(terms)
    }

    fn take_train_loss(&mut self) -> f64 {
        self.inner.take_train_loss()
    }

    fn consensus_distance(&mut self, scales: Option<&[f64]>) -> f64 {
        self.inner.consensus_distance(scales)
    }

    fn evaluate_rows(&mut self, rows: &[usize], scales: Option<&[f64]>) -> Vec<Evaluation> {
        self.inner.evaluate_rows(rows, scales)
    }

    fn suboptimality(&mut self, terms: Option<&[(usize, f64)]>) -> Option<f64> {
        self.inner.suboptimality(terms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::OptimizerConfig;
    use crate::store::reference::{Quadratic, ReferenceStore};

    fn store() -> ReferenceStore {
        ReferenceStore::new(
            Quadratic::new(4, 1.0, 0.0),
            2,
            OptimizerConfig::default(),
            1,
        )
    }

    fn only(t: &mut Tracked<'_>, worker: usize) -> Vec<(u64, u64)> {
        t.row_staleness()[worker].iter().collect()
    }

    fn global(t: &mut Tracked<'_>, worker: usize) -> Vec<(u64, u64)> {
        t.global_staleness()[worker].iter().collect()
    }

    #[test]
    fn a_copy_is_measured_against_its_source_block_by_block() {
        let mut inner = store();
        let mut t = Tracked::new(&mut inner);
        let server = t.add_rows(1);
        // Worker 0 pulls both halves, computes; worker 1 updates the first half twice meanwhile.
        t.copy_block(0, server, 0..2);
        t.copy_block(0, server, 2..4);
        let g0 = t.request_gradient(0);
        let g1 = t.request_gradient(1);
        t.apply_gradient_block(server, g1, 0.1, 0..2);
        t.apply_gradient_block(server, g1, 0.1, 0..2);
        t.apply_gradient_block(server, g0, 0.1, 0..2);
        t.apply_gradient_block(server, g0, 0.1, 2..4);
        assert_eq!(only(&mut t, 0), vec![(0, 1), (2, 1)]);
        assert_eq!(only(&mut t, 1), vec![(0, 1), (1, 1)]);
        // Globally: g1's first application is one iteration, its second is not another. g0's
        // first half was served before it, its second half too (both count g1); g0's second
        // application does not count g0's first.
        assert_eq!(global(&mut t, 0), vec![(1, 2)]);
        assert_eq!(global(&mut t, 1), vec![(0, 2)]);
        assert_eq!(t.global_iterations(), 2);
    }

    #[test]
    fn a_mean_is_measured_by_its_own_part_on_each_row() {
        let mut inner = store();
        let mut t = Tracked::new(&mut inner);
        let g0 = t.request_gradient(0);
        let g = t.request_gradient(1);
        // Row 1 is written before the mean is applied to it: measured by its own part, the mean
        // is stale by one there and fresh on row 0.
        t.mix(1, &[(Slot::Row(1), 0.5)]);
        let mean = t.mean_gradient(&[g0, g]);
        t.apply_gradient(0, mean, 0.1);
        t.apply_gradient(1, mean, 0.1);
        assert_eq!(only(&mut t, 0), vec![(0, 1)]);
        assert_eq!(only(&mut t, 1), vec![(1, 1)]);
        // One mean is one global iteration: fresh on both rows (the mix is no gradient).
        assert_eq!(global(&mut t, 0), vec![(0, 1)]);
        assert_eq!(global(&mut t, 1), vec![(0, 1)]);
        assert_eq!(t.global_iterations(), 1);
    }

    #[test]
    fn every_gradient_applied_meanwhile_anywhere_counts_globally() {
        let mut inner = store();
        let mut t = Tracked::new(&mut inner);
        let g0 = t.request_gradient(0);
        // Worker 1 takes three steps on its own row while worker 0 computes.
        for _ in 0..3 {
            let g = t.request_gradient(1);
            t.apply_gradient(1, g, 0.1);
            t.release_gradient(g);
        }
        t.apply_gradient(0, g0, 0.1);
        assert_eq!(only(&mut t, 0), vec![(0, 1)], "row 0 was not written");
        assert_eq!(global(&mut t, 0), vec![(3, 1)]);
        assert_eq!(global(&mut t, 1), vec![(0, 3)]);
    }

    #[test]
    fn the_gradient_table_finds_handles_in_any_order() {
        let read = |w| Entry {
            reads: Reads::One(Read {
                worker: w,
                time: SimTime::ZERO,
                seq: 0,
                lineage: Resolved::Whole { row: w, seq: 0 },
                iters: 0,
                row_writes: 0,
            }),
            counted: false,
        };
        let mut t = GradTable::default();
        for id in [3, 7, 5, 1] {
            t.insert(id, read(id as usize));
        }
        let worker = |t: &GradTable, id| t.get(id).map(|e| e.reads.as_slice()[0].worker);
        assert_eq!(worker(&t, 5), Some(5));
        assert!(t.remove(1).is_some());
        assert!(t.remove(7).is_some());
        assert_eq!(t.len(), 2);
        assert_eq!(worker(&t, 7), None);
        assert_eq!(worker(&t, 3), Some(3));
        assert_eq!(t.values().count(), 2);
    }

    #[test]
    fn rank_agrees_with_partition_point() {
        // Even, sparse, lopsided, repeated keys and single ones.
        let tables: Vec<Vec<u64>> = vec![
            (0..50).collect(),
            (0..50).map(|i| i * 7 + 3).collect(),
            std::iter::once(2).chain(1000..1040).collect(),
            (10..40).chain(500..503).chain(900..960).collect(),
            vec![1, 1, 1, 4, 4, 9, 9, 9, 9, 30],
            vec![5],
            vec![],
        ];
        for keys in tables {
            for x in 0..keys.last().copied().unwrap_or(0) + 3 {
                assert_eq!(
                    rank(keys.len(), |k| keys[k], x),
                    keys.partition_point(|&k| k <= x),
                    "{x} in {keys:?}"
                );
            }
        }
    }

    #[test]
    fn old_writes_are_forgotten() {
        let mut inner = store();
        let mut t = Tracked::new(&mut inner);
        for _ in 0..3 * FIRST_PRUNE {
            let g = t.request_gradient(0);
            t.apply_gradient(0, g, 0.0);
            t.release_gradient(g);
        }
        assert!(t.logged_writes < FIRST_PRUNE);
        assert!(t.iterations.len() < FIRST_PRUNE);
        assert_eq!(only(&mut t, 0), vec![(0, 3 * FIRST_PRUNE as u64)]);
        assert_eq!(global(&mut t, 0), vec![(0, 3 * FIRST_PRUNE as u64)]);
    }
}
