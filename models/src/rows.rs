//! The replicas' parameters on the host: one buffer per row, shared copy-on-write.
//!
//! Every parameter operation an algorithm asks for (the optimizer step, mixing, averaging, block
//! copies, message buffers) is elementwise work of `O(P)` per row touched. Here it is a plain
//! loop over `f32`s on the host: no tensor dispatch, no allocation when nobody else holds the
//! row, no kernel launch, and nothing proportional to the number of rows.
//!
//! A row is an `Arc<Vec<f32>>`. A gradient request's snapshot, or a message holding a plain copy
//! of a row, is a second reference to the same buffer, taken in `O(1)`. A later write to that row
//! copies it first ([`Arc::make_mut`]), once: the reader keeps the value it read and the writer
//! gets its own buffer, while every other row is left alone. So memory is `P` floats per row plus
//! `P` per snapshot or message still alive — linear in what the algorithm holds — and a write
//! costs `O(P)` whatever the number of rows. [`Rows::floats_copied`] counts the copies, for the
//! tests that keep it so.
//!
//! The arithmetic is `f32`, term by term in a fixed order, so results do not depend on threads
//! or on how requests were batched. Its loops are compiled twice, for the baseline x86-64 (SSE2,
//! four floats a step) and for AVX2 (eight), and the AVX2 copy runs where the CPU has it (the
//! `wide!` macro): the same multiplications and additions per coordinate, never fused (no FMA
//! is enabled), so the same bits on either.
//!
//! A long pass — settling a row's queued steps, a mean of rows or gradients, a gossip mix, at
//! least [`PARALLEL_FLOATS`] floats of work — is cut into contiguous parts of whole tiles that run on
//! up to [`Rows::with_threads`] threads of the current rayon pool. Each coordinate still gets the
//! same operations in the same order, so the bits do not depend on the number of threads. On a
//! model of a hundred thousand parameters these passes were a quarter of the wall time on one
//! thread while the other waited for the next gradient flush.
//!
//! Buffers of `P` floats that nobody holds any more (a row's old value once it is replaced, a
//! released message, an evaluated snapshot, a released gradient) go to a pool of spares, and
//! every new buffer comes from it ([`Rows::buffer`]). A run at steady state therefore allocates
//! nothing on the hot path: without the pool, each mix, share or gradient asked the allocator
//! for fresh memory, which at a thousand workers it had returned to the kernel and got back as
//! freshly zeroed pages (a quarter of SGP's wall time). The pool never holds more buffers than
//! were alive at once before, so the peak memory is what it would be without it.
//!
//! SGD steps given a shared gradient buffer ([`Rows::step_shared`]) are queued on their row and
//! applied when the row is next read or written, all of them in one pass ([`Rows::settle`]):
//! each coordinate is updated by every queued gradient in order, with the arithmetic of
//! [`Rows::step`], so the values are the same bits as applying them one by one. A worker of
//! DASGD applies about a thousand gradients between two of its own reads at a thousand workers;
//! one by one, each was a pass over its parameters and momentum, cold in the cache by the next.
//! Every method that reads or writes a row settles it first; [`Rows::get`] takes `&self`, so it
//! asks for a settled row ([`Rows::settle`] or [`Rows::settle_all`]) and panics otherwise. A
//! step can also read its gradient in place in blocks that hold several gradients (a flush's
//! read-back blocks, [`Blocks`]): [`Rows::step_from_blocks`] queues it part by part and settles
//! the row at once, so no queue keeps such a block alive.
//!
//! All-reduce applies one mean gradient to every row, and its rows hold the same bits from the
//! first step to the last: sixteen identical passes per step, a tenth of an MLP's wall time. So
//! a settle of steps of one gradient common to several rows ([`Rows::step_common`]) is
//! remembered with its inputs, and a row whose parameters and momentum are the same bits (the
//! same buffers, or compared) and whose queued steps are the same takes the remembered result,
//! shared copy-on-write like a snapshot, instead of computing it again. The values are those of
//! computing it: the same operations on the same bits.

use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::sync::Arc;

/// Defines `fn $name` so that its body runs compiled for AVX2 where the CPU has it, and for the
/// baseline target elsewhere. Only `avx2` is enabled, not `fma`: Rust never contracts `a * b + c`
/// into a fused multiply-add, and without the `fma` feature the compiler cannot emit one either,
/// so both copies compute the same bits (`fused_combinations_match_one_pass_per_term_bit_for_bit`
/// and the golden digests check it). On rows of thousands of floats the wider loads and
/// arithmetic take a two-term combination from about 420–510 ns to 170–340 ns per 2,410 floats
/// (the book's performance chapter).
macro_rules! wide {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn imp($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2")]
                fn avx2($($arg: $ty),*) {
                    imp($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2, the only feature `avx2` is compiled with.
                    return unsafe { avx2($($arg),*) };
                }
            }
            imp($($arg),*)
        }
    };
}

use dasim_sim::params::{OptimizerConfig, OptimizerKind};

/// A row's parameters, shared copy-on-write.
pub type Row = Arc<Vec<f32>>;

/// Every row's parameters and optimizer state (never shared, never mixed: only a step of the
/// row's own touches it).
#[derive(Serialize, Deserialize)]
pub struct Rows {
    p: usize,
    params: Vec<Row>,
    /// SGD's and LARS's momentum buffer, Adam's first moment; shared copy-on-write like the
    /// parameters (rows whose settled steps were the same share theirs, see [`Rows::settle`]).
    velocity: Option<Vec<Row>>,
    /// Adam's second moment.
    second: Option<Vec<Vec<f32>>>,
    /// Adam's step count of each coordinate.
    steps: Option<Vec<Vec<u32>>>,
    copied: u64,
    /// Buffers of `p` floats nobody holds, for reuse. Not part of a checkpoint: it changes the
    /// allocator's work, never a value.
    #[serde(skip)]
    spare: Vec<Vec<f32>>,
    /// Buffers [`Rows::buffer`] had to allocate (the spares were empty), for checks.
    #[serde(skip)]
    allocated: u64,
    /// SGD steps queued on each row, oldest first (missing rows have none). Not part of a
    /// checkpoint: a store settles every row before it saves.
    #[serde(skip)]
    queued: Vec<Vec<Queued>>,
    /// Threads a large row operation is split over ([`Rows::with_threads`]); 0 or 1: none.
    #[serde(skip)]
    threads: usize,
    /// The last settle whose steps other rows had queued too, to give a row with the same
    /// values and the same steps its result instead of computing it again.
    #[serde(skip)]
    settled: Option<Settled>,
}

/// A settle's inputs and outputs ([`Rows::settle`]). Holding every buffer it names keeps their
/// addresses from being reused, so a pointer that matches is the same buffer.
struct Settled {
    params: Row,
    velocity: Option<Row>,
    steps: Vec<Queued>,
    out_params: Row,
    out_velocity: Option<Row>,
}

impl Settled {
    /// Whether a row at `params` and `velocity` with `steps` queued settles to this one's
    /// result: the same steps (the same gradient buffers, blocks, rates and rules) from the same
    /// bits.
    fn matches(&self, params: &Row, velocity: Option<&Row>, steps: &[Queued]) -> bool {
        self.steps.len() == steps.len()
            && self.steps.iter().zip(steps).all(|(a, b)| a.same_step(b))
            && match (&self.velocity, velocity) {
                (Some(a), Some(b)) => same_row(a, b),
                (None, None) => true,
                _ => false,
            }
            && same_row(&self.params, params)
    }
}

/// Whether two rows hold the same bits: the same buffer, or equal bit for bit.
pub(crate) fn same_row(a: &Row, b: &Row) -> bool {
    Arc::ptr_eq(a, b) || same_bits(a, b)
}

/// Bit-for-bit equality (`==` on floats would call `-0.0` and `0.0` equal, and `NaN` unequal).
fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && a.chunks(1024)
            .zip(b.chunks(1024))
            .all(|(a, b)| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()))
}

/// Floats of gradients one row's queue may keep alive (4 MiB): a row of 2,410 parameters queues
/// [`MAX_QUEUE`] steps, one of 101,770 ten, one of a ResNet's millions one (applied at once).
pub const QUEUE_FLOATS: usize = 1 << 20;

/// Steps a row's queue holds at most: one pass over the row per this many gradients.
pub const MAX_QUEUE: usize = 64;

/// Blocks of floats a gradient step can read in place: a gradient flush's read-back blocks,
/// each holding several requests' gradients on one range of coordinates.
pub trait Blocks: Send + Sync {
    /// Block `k`, whole.
    fn block(&self, k: usize) -> &[f32];
}

/// The gradient a queued step reads.
#[derive(Clone)]
enum Grad {
    /// A whole gradient of its own, `P` long.
    Row(Row),
    /// The coordinates from `start` on of a gradient, at `at..` of `blocks`' block `k`.
    Part {
        blocks: Arc<dyn Blocks>,
        k: usize,
        at: usize,
        start: usize,
    },
}

impl Grad {
    /// The gradient on the coordinates `a..b`.
    fn slice(&self, a: usize, b: usize) -> &[f32] {
        match self {
            Grad::Row(g) => &g[a..b],
            Grad::Part {
                blocks,
                k,
                at,
                start,
            } => &blocks.block(*k)[at + a - start..at + b - start],
        }
    }

    /// The same buffer, at the same place.
    fn same(&self, other: &Grad) -> bool {
        match (self, other) {
            (Grad::Row(a), Grad::Row(b)) => Arc::ptr_eq(a, b),
            (
                Grad::Part {
                    blocks: a,
                    k,
                    at,
                    start,
                },
                Grad::Part {
                    blocks: b,
                    k: k2,
                    at: at2,
                    start: start2,
                },
            ) => Arc::ptr_eq(a, b) && (k, at, start) == (k2, at2, start2),
            _ => false,
        }
    }
}

/// An SGD step waiting on its row.
#[derive(Clone)]
struct Queued {
    /// The gradient; the step uses the coordinates `block`.
    g: Grad,
    block: Range<usize>,
    lr: f32,
    rule: Sgd,
    /// Queued by [`Rows::step_common`]: the gradient is applied to several rows.
    common: bool,
}

impl Queued {
    /// The same gradient buffer, block, rate and rule.
    fn same_step(&self, other: &Queued) -> bool {
        self.g.same(&other.g)
            && self.block == other.block
            && self.lr.to_bits() == other.lr.to_bits()
            && self.rule.bits() == other.rule.bits()
    }
}

/// SGD's settings as [`Rows::step`] uses them, in `f32`.
#[derive(Clone, Copy)]
struct Sgd {
    mu: f32,
    wd: f32,
    decay: bool,
    nesterov: bool,
}

impl Sgd {
    /// The settings as bits, for comparing two rules exactly.
    fn bits(self) -> (u32, u32, bool, bool) {
        (
            self.mu.to_bits(),
            self.wd.to_bits(),
            self.decay,
            self.nesterov,
        )
    }

    fn of(opt: &OptimizerConfig) -> Self {
        Sgd {
            mu: opt.momentum as f32,
            wd: opt.weight_decay as f32,
            decay: opt.weight_decay > 0.0,
            nesterov: opt.nesterov,
        }
    }

    /// `d = g + λx; v = μv + d; x -= lr·(nesterov ? d + μv : v)` over `x`, `v` and `g` (of one
    /// length), or without `v`: `x -= lr·d`. The one copy of SGD's arithmetic.
    fn apply(self, x: &mut [f32], v: Option<&mut [f32]>, g: &[f32], lr: f32) {
        sgd_apply(self, x, v, g, lr);
    }
}

wide! {
    /// The loop of [`Sgd::apply`].
    fn sgd_apply(rule: Sgd, x: &mut [f32], v: Option<&mut [f32]>, g: &[f32], lr: f32) {
        let Sgd {
            mu,
            wd,
            decay,
            nesterov,
        } = rule;
        match v {
            Some(v) => {
                for ((x, v), &g) in x.iter_mut().zip(v.iter_mut()).zip(g) {
                    let d = if decay { g + *x * wd } else { g };
                    *v = *v * mu + d;
                    let step = if nesterov { d + *v * mu } else { *v };
                    *x -= step * lr;
                }
            }
            None => {
                for (x, &g) in x.iter_mut().zip(g) {
                    let d = if decay { g + *x * wd } else { g };
                    *x -= d * lr;
                }
            }
        }
    }
}

impl Rows {
    /// `count` rows equal to `init`, with the zero state of `optimizer`: a momentum buffer
    /// when it has one ([`OptimizerConfig::has_momentum_buffer`]), and Adam's second moment and
    /// step counts.
    pub fn new(init: Vec<f32>, count: usize, optimizer: &OptimizerConfig) -> Self {
        let p = init.len();
        let first: Row = Arc::new(init);
        let adam = optimizer.kind.is_adam();
        Rows {
            p,
            params: (0..count)
                .map(|_| Arc::new(first.as_ref().clone()))
                .collect(),
            // One zero buffer, shared until each row's first step.
            velocity: optimizer.has_momentum_buffer().then(|| {
                let zeros = Arc::new(vec![0.0; p]);
                (0..count).map(|_| Arc::clone(&zeros)).collect()
            }),
            second: adam.then(|| vec![vec![0.0; p]; count]),
            steps: adam.then(|| vec![vec![0; p]; count]),
            copied: 0,
            spare: Vec::new(),
            allocated: 0,
            queued: Vec::new(),
            threads: 1,
            settled: None,
        }
    }

    /// These rows with the settling of a row's queued steps and the means split over up to
    /// `threads` threads of the current rayon pool, where a pass is large enough to gain from
    /// it ([`PARALLEL_FLOATS`]). Each coordinate is computed by the same operations in the same
    /// order, so the values do not depend on it.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.set_threads(threads);
        self
    }

    /// [`Rows::with_threads`] on rows already built (a store's, after a restore).
    pub fn set_threads(&mut self, threads: usize) {
        self.threads = threads.max(1);
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.params.len()
    }

    /// Whether there is no row.
    pub fn is_empty(&self) -> bool {
        self.params.is_empty()
    }

    /// Numbers per row.
    pub fn width(&self) -> usize {
        self.p
    }

    /// Row `r` as it is now.
    ///
    /// # Panics
    /// If steps are queued on the row: settle it first ([`Rows::settle`]).
    pub fn get(&self, r: usize) -> &[f32] {
        assert!(
            self.is_settled(r),
            "row {r} was read with SGD steps queued: settle it first"
        );
        &self.params[r]
    }

    /// A reference to row `r` as it is now, in `O(1)`: later writes to the row do not change it.
    pub fn share(&mut self, r: usize) -> Row {
        self.settle(r);
        Arc::clone(&self.params[r])
    }

    /// Whether row `r` has no step queued.
    pub fn is_settled(&self, r: usize) -> bool {
        self.queued.get(r).is_none_or(Vec::is_empty)
    }

    /// Applies the steps queued on row `r`, in order, in one pass over the row: tiles of the
    /// coordinates small enough for the row's and its momentum's tile to stay in the first-level
    /// cache, each updated by every queued gradient in turn. Per coordinate these are the
    /// operations of applying the steps one by one, so the values are the same bits. A row
    /// shared with a snapshot or a message is read, and the result written to a spare buffer,
    /// the copy inside the same pass. Steps of one gradient queued with [`Rows::step_common`]
    /// are remembered with their inputs and result, and a row with the same bits and the same
    /// steps takes that result, shared, without computing it (see the module's documentation).
    #[inline]
    pub fn settle(&mut self, r: usize) {
        // Nearly always nothing is queued: that test inline, the settling out of line.
        if self.queued.get(r).is_some_and(|q| !q.is_empty()) {
            self.settle_queued(r);
        }
    }

    fn settle_queued(&mut self, r: usize) {
        let mut queue = std::mem::take(&mut self.queued[r]);
        let hit = self
            .settled
            .as_ref()
            .filter(|m| m.matches(&self.params[r], self.velocity_of(r), &queue))
            .map(|m| (Arc::clone(&m.out_params), m.out_velocity.clone()));
        if let Some((params, velocity)) = hit {
            // The same steps from the same values: the same result, shared.
            let old = std::mem::replace(&mut self.params[r], params);
            self.recycle(old);
            let old = match (self.velocity.as_mut(), velocity) {
                (Some(vs), Some(v)) => Some(std::mem::replace(&mut vs[r], v)),
                _ => None,
            };
            if let Some(old) = old {
                self.recycle(old);
            }
        } else {
            // Remembered where another row may settle the same: steps of one common gradient
            // (all-reduce's mean, queued block by block on every row, so every row after the
            // first takes the result).
            let remember = queue.iter().all(|q| q.common && q.g.same(&queue[0].g));
            let inputs = remember.then(|| {
                (
                    Arc::clone(&self.params[r]),
                    self.velocity_of(r).map(Arc::clone),
                )
            });
            self.apply_queued(r, &queue);
            if let Some((params, velocity)) = inputs {
                let out = Settled {
                    params,
                    velocity,
                    steps: queue.clone(),
                    out_params: Arc::clone(&self.params[r]),
                    out_velocity: self.velocity_of(r).map(Arc::clone),
                };
                if let Some(old) = self.settled.replace(out) {
                    self.forget(old);
                }
            }
        }
        for q in queue.drain(..) {
            if let Grad::Row(g) = q.g {
                self.recycle(g);
            }
        }
        // The emptied queue keeps its capacity for the next steps.
        self.queued[r] = queue;
    }

    /// Row `r`'s momentum buffer, if the optimizer has one.
    fn velocity_of(&self, r: usize) -> Option<&Row> {
        self.velocity.as_ref().map(|v| &v[r])
    }

    /// Applies `queue` to row `r` and its momentum, in one pass ([`apply_queue`]). A buffer
    /// someone else holds is read, and the result written to a spare buffer: the copy a write
    /// needs is part of the same pass.
    fn apply_queued(&mut self, r: usize, queue: &[Queued]) {
        let threads = self.threads;
        let mut velocity = self.velocity.take();
        let mut v_src = None;
        if let Some(vs) = velocity.as_mut()
            && Arc::strong_count(&vs[r]) > 1
        {
            let fresh = Arc::new(self.buffer());
            v_src = Some(std::mem::replace(&mut vs[r], fresh));
        }
        let v = velocity.as_mut().map(|vs| {
            Arc::get_mut(&mut vs[r])
                .expect("a buffer no one else holds")
                .as_mut_slice()
        });
        let v_src_slice = v_src.as_ref().map(|s| s.as_slice());
        if Arc::strong_count(&self.params[r]) > 1 {
            self.copied += self.p as u64;
            let mut fresh = self.buffer();
            apply_queue(
                &mut fresh,
                v,
                queue,
                threads,
                Some(&self.params[r]),
                v_src_slice,
            );
            self.params[r] = Arc::new(fresh);
        } else {
            apply_queue(self.get_mut(r), v, queue, threads, None, v_src_slice);
        }
        self.velocity = velocity;
        if let Some(old) = v_src {
            self.recycle(old);
        }
    }

    /// Drops a remembered settle, taking back the buffers only it held.
    fn forget(&mut self, old: Settled) {
        self.recycle(old.params);
        self.recycle(old.out_params);
        for v in [old.velocity, old.out_velocity].into_iter().flatten() {
            self.recycle(v);
        }
        for q in old.steps {
            if let Grad::Row(g) = q.g {
                self.recycle(g);
            }
        }
    }

    /// Row `r` as it will be once settled, without settling it (a copy, for inspection).
    pub fn value(&self, r: usize) -> Vec<f32> {
        let mut x = self.params[r].as_ref().clone();
        if let Some(queue) = self.queued.get(r).filter(|q| !q.is_empty()) {
            let mut v = self.velocity.as_ref().map(|v| v[r].as_ref().clone());
            apply_queue(&mut x, v.as_deref_mut(), queue, 1, None, None);
        }
        x
    }

    /// [`Rows::settle`] on every row.
    pub fn settle_all(&mut self) {
        for r in 0..self.queued.len() {
            self.settle(r);
        }
    }

    /// Steps queued on all rows together, for checks.
    pub fn queued_steps(&self) -> usize {
        self.queued.iter().map(Vec::len).sum()
    }

    /// Floats copied because a row was written while someone else held it.
    pub fn floats_copied(&self) -> u64 {
        self.copied
    }

    /// A buffer of `P` floats from the spares, or a new one: its values are arbitrary, for the
    /// caller to overwrite.
    pub fn buffer(&mut self) -> Vec<f32> {
        self.spare.pop().unwrap_or_else(|| {
            self.allocated += 1;
            vec![0.0; self.p]
        })
    }

    /// Takes back a buffer nobody else holds (a row's old value, a message, a snapshot, a
    /// gradient) into the spares; a buffer still held elsewhere is only dropped.
    pub fn recycle(&mut self, buffer: Row) {
        if let Ok(v) = Arc::try_unwrap(buffer) {
            self.recycle_vec(v);
        }
    }

    /// [`Rows::recycle`] for a plain buffer.
    pub fn recycle_vec(&mut self, v: Vec<f32>) {
        // Not bounded by the rows: the buffers alive at once swing by several per worker (a
        // flush's gradients, a gossip round's messages), and every buffer dropped at the top of
        // a swing is allocated again, as fresh pages, at the next. The spares never outnumber
        // the buffers that were alive at once, so the peak memory is unchanged.
        if v.len() == self.p {
            self.spare.push(v);
        }
    }

    /// Buffers in the spares, for checks.
    pub fn spares(&self) -> usize {
        self.spare.len()
    }

    /// Buffers [`Rows::buffer`] has allocated because the spares were empty, for checks.
    pub fn buffers_allocated(&self) -> u64 {
        self.allocated
    }

    /// Row `r` for writing: copied first (into a spare buffer) if a snapshot or a message still
    /// holds it. Its queued steps are the caller's to settle first.
    fn get_mut(&mut self, r: usize) -> &mut [f32] {
        if Arc::strong_count(&self.params[r]) > 1 {
            self.copied += self.p as u64;
            let mut copy = self.buffer();
            copy.copy_from_slice(&self.params[r]);
            self.params[r] = Arc::new(copy);
        }
        Arc::get_mut(&mut self.params[r])
            .expect("a row no one else holds")
            .as_mut_slice()
    }

    /// Replaces row `r` by `value` (a snapshot or message holding the old one keeps it; else
    /// the old buffer becomes a spare).
    pub fn set(&mut self, r: usize, value: Vec<f32>) {
        debug_assert_eq!(value.len(), self.p);
        // The queued steps move the momentum even though the value is replaced.
        self.settle(r);
        match Arc::get_mut(&mut self.params[r]) {
            // Nobody else holds the row (or `take_unique` left it empty): the value goes into
            // the row's own `Arc`, with no allocation, and the old buffer is a spare.
            Some(slot) => {
                let old = std::mem::replace(slot, value);
                self.recycle_vec(old);
            }
            None => {
                let old = std::mem::replace(&mut self.params[r], Arc::new(value));
                self.recycle(old);
            }
        }
    }

    /// Row `r`'s buffer, taken out for writing in place when nobody else holds it (the row is
    /// left empty until [`Rows::set`] puts a value back); `None`, and the row untouched, when a
    /// snapshot or a message shares it.
    pub fn take_unique(&mut self, r: usize) -> Option<Vec<f32>> {
        self.settle(r);
        // The buffer is taken out of the row's `Arc`, which stays (empty) for `set` to refill.
        Arc::get_mut(&mut self.params[r]).map(std::mem::take)
    }

    /// Exchanges the optimizer states of rows `a` and `b`; their parameters stay.
    pub fn swap_optimizer_state(&mut self, a: usize, b: usize) {
        // Each queued step belongs with the state it was queued beside.
        self.settle(a);
        self.settle(b);
        if let Some(v) = self.velocity.as_mut() {
            v.swap(a, b);
        }
        if let Some(v) = self.second.as_mut() {
            v.swap(a, b);
        }
        if let Some(t) = self.steps.as_mut() {
            t.swap(a, b);
        }
    }

    /// Appends `count` copies of row 0 with a zero optimizer state; returns the index of the
    /// first.
    pub fn push_copies_of_first(&mut self, count: usize) -> usize {
        let first = self.len();
        self.settle(0);
        for _ in 0..count {
            let copy = Arc::new(self.params[0].as_ref().clone());
            self.params.push(copy);
            if let Some(v) = self.velocity.as_mut() {
                v.push(Arc::new(vec![0.0; self.p]));
            }
            if let Some(v) = self.second.as_mut() {
                v.push(vec![0.0; self.p]);
            }
            if let Some(t) = self.steps.as_mut() {
                t.push(vec![0; self.p]);
            }
        }
        first
    }

    /// Copies the coordinates `block` of row `src` into row `dst`.
    pub fn copy_block(&mut self, dst: usize, src: usize, block: Range<usize>) {
        if dst == src || block.is_empty() {
            return;
        }
        self.settle(src);
        self.settle(dst);
        let from = Arc::clone(&self.params[src]);
        self.get_mut(dst)[block.clone()].copy_from_slice(&from[block]);
    }

    /// Adds `delta` (the batch-norm state change a gradient carries) to the coordinates `block`
    /// of row `r`, as it is: no rate, momentum or decay.
    pub fn add_block(&mut self, r: usize, delta: &[f32], block: Range<usize>) {
        self.settle(r);
        let x = &mut self.get_mut(r)[block];
        for (x, d) in x.iter_mut().zip(delta) {
            *x += d;
        }
    }

    /// One optimizer step on the coordinates `block` of row `r` with gradient `g` (the gradient
    /// of `block` only) and rate `lr`, by the rule of `opt` as `dasim_sim::params::optimizer`
    /// states it. `layers` are the model's layers' parameter ranges (LARS's trust ratio is per
    /// layer, over the part of each layer inside `block`).
    pub fn step(
        &mut self,
        r: usize,
        g: &[f32],
        lr: f64,
        block: Range<usize>,
        opt: &OptimizerConfig,
        layers: &[Range<usize>],
    ) {
        debug_assert_eq!(g.len(), block.len());
        self.settle(r);
        match opt.kind {
            OptimizerKind::Sgd => self.sgd_step(r, g, lr, block, opt),
            OptimizerKind::Adam | OptimizerKind::AdamW => self.adam_step(r, g, lr, block, opt),
            OptimizerKind::Lars => self.lars_step(r, g, lr, block, opt, layers),
        }
    }

    /// [`Rows::step`] with the whole gradient `g` (its coordinates `block` are used), held by
    /// reference: an SGD step is queued on the row and applied at its next read or write
    /// ([`Rows::settle`]), the other optimizers step at once (Adam's bias correction and LARS's
    /// trust ratio read the row as it is).
    pub fn step_shared(
        &mut self,
        r: usize,
        g: &Row,
        lr: f64,
        block: Range<usize>,
        opt: &OptimizerConfig,
        layers: &[Range<usize>],
    ) {
        self.queue_step(r, g, lr, block, opt, layers, false);
    }

    /// [`Rows::step_shared`] with a gradient common to several rows (a mean of several workers'
    /// gradients, which all-reduce applies to every worker): a settle of this step alone is
    /// remembered, and a row with the same values and the same step takes its result, shared,
    /// instead of computing it again ([`Rows::settle`]).
    pub fn step_common(
        &mut self,
        r: usize,
        g: &Row,
        lr: f64,
        block: Range<usize>,
        opt: &OptimizerConfig,
        layers: &[Range<usize>],
    ) {
        self.queue_step(r, g, lr, block, opt, layers, true);
    }

    /// An SGD step of a gradient held in `blocks`, applied now, with the steps queued before it,
    /// in one settle of the row: `parts` are `(k, at, coords)`, the gradient on `coords` being
    /// at `at..` of block `k`. Nothing of `blocks` is kept. Per coordinate the operations of
    /// [`Rows::step_shared`] with the gradient in a buffer of its own, so the same bits.
    ///
    /// # Panics
    /// If the optimizer is not SGD (Adam and LARS read whole gradients).
    pub fn step_from_blocks(
        &mut self,
        r: usize,
        blocks: &Arc<dyn Blocks>,
        parts: &[(usize, usize, Range<usize>)],
        lr: f64,
        opt: &OptimizerConfig,
    ) {
        assert_eq!(opt.kind, OptimizerKind::Sgd, "a step from blocks is SGD's");
        for (k, at, coords) in parts {
            if coords.is_empty() {
                continue;
            }
            let g = Grad::Part {
                blocks: Arc::clone(blocks),
                k: *k,
                at: *at,
                start: coords.start,
            };
            self.push_step(r, g, coords.clone(), lr, opt, false);
        }
        self.settle(r);
    }

    /// Queues an SGD step on row `r` (settled by the caller or at the row's next use).
    fn push_step(
        &mut self,
        r: usize,
        g: Grad,
        block: Range<usize>,
        lr: f64,
        opt: &OptimizerConfig,
        common: bool,
    ) {
        if self.queued.len() <= r {
            self.queued.resize_with(self.params.len(), Vec::new);
        }
        self.queued[r].push(Queued {
            g,
            block,
            lr: lr as f32,
            rule: Sgd::of(opt),
            common,
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn queue_step(
        &mut self,
        r: usize,
        g: &Row,
        lr: f64,
        block: Range<usize>,
        opt: &OptimizerConfig,
        layers: &[Range<usize>],
        common: bool,
    ) {
        debug_assert_eq!(g.len(), self.p);
        if opt.kind != OptimizerKind::Sgd || block.is_empty() {
            self.step(r, &g[block.clone()], lr, block, opt, layers);
            return;
        }
        self.push_step(r, Grad::Row(Arc::clone(g)), block, lr, opt, common);
        if self.queued[r].len() >= queue_cap(self.p) {
            self.settle(r);
        }
    }

    /// Adam: `d = g + λx; t += 1; m = β₁m + (1 − β₁)d; v = β₂v + (1 − β₂)d²;
    /// x -= lr·(m/(1 − β₁ᵗ))/(√(v/(1 − β₂ᵗ)) + ε)`, `t` per coordinate.
    fn adam_step(
        &mut self,
        r: usize,
        g: &[f32],
        lr: f64,
        block: Range<usize>,
        opt: &OptimizerConfig,
    ) {
        let (b1, b2) = (opt.beta1(), opt.beta2());
        let (b1f, b2f, eps, lrf, wd) = (
            b1 as f32,
            b2 as f32,
            opt.eps() as f32,
            lr as f32,
            opt.weight_decay as f32,
        );
        let mut m = self.velocity.take().expect("Adam rows have a first moment");
        let mut v = self.second.take().expect("Adam rows have a second moment");
        let mut t = self.steps.take().expect("Adam rows have step counts");
        let x = &mut self.get_mut(r)[block.clone()];
        let (m_r, v_r, t_r) = (
            &mut Arc::make_mut(&mut m[r])[block.clone()],
            &mut v[r][block.clone()],
            &mut t[r][block],
        );
        // Bias corrections, computed in f64 once per distinct step count (all coordinates of a
        // block usually share one).
        let mut cached: Option<(u32, f32, f32)> = None;
        // AdamW: the moments see the gradient alone; the decay shrinks x beside the step.
        let (l2, decay) = if opt.kind == OptimizerKind::AdamW {
            (0.0, lrf * wd)
        } else {
            (wd, 0.0)
        };
        for k in 0..x.len() {
            let d = g[k] + x[k] * l2;
            t_r[k] += 1;
            let tk = t_r[k];
            let (c1, c2) = match cached {
                Some((t, c1, c2)) if t == tk => (c1, c2),
                _ => {
                    let e = tk.min(i32::MAX as u32) as i32;
                    let c = ((1.0 - b1.powi(e)) as f32, (1.0 - b2.powi(e)) as f32);
                    cached = Some((tk, c.0, c.1));
                    c
                }
            };
            m_r[k] = b1f * m_r[k] + (1.0 - b1f) * d;
            v_r[k] = b2f * v_r[k] + (1.0 - b2f) * d * d;
            let m_hat = m_r[k] / c1;
            let v_hat = v_r[k] / c2;
            x[k] -= x[k] * decay;
            x[k] -= lrf * m_hat / (v_hat.sqrt() + eps);
        }
        self.velocity = Some(m);
        self.second = Some(v);
        self.steps = Some(t);
    }

    /// LARS, layer by layer: `τ = η_T‖x‖/(‖g‖ + λ‖x‖)` (1 when `‖x‖ = 0` or the denominator
    /// is 0), norms in f64; `v = μv + lr·τ·(g + λx); x -= v`.
    fn lars_step(
        &mut self,
        r: usize,
        g: &[f32],
        lr: f64,
        block: Range<usize>,
        opt: &OptimizerConfig,
        layers: &[Range<usize>],
    ) {
        let (eta, wd) = (opt.eta(), opt.weight_decay);
        let (mu, wdf) = (opt.momentum as f32, wd as f32);
        let mut velocity = self.velocity.take();
        let start = block.start;
        let x = &mut self.get_mut(r)[block.clone()];
        for layer in layers {
            let part = layer.start.max(block.start)..layer.end.min(block.end);
            if part.is_empty() {
                continue;
            }
            // Offsets inside the block.
            let local = part.start - start..part.end - start;
            let norm = |v: &[f32]| {
                v.iter()
                    .map(|&a| f64::from(a) * f64::from(a))
                    .sum::<f64>()
                    .sqrt()
            };
            let (xn, gn) = (norm(&x[local.clone()]), norm(&g[local.clone()]));
            let den = gn + wd * xn;
            let trust = if xn > 0.0 && den > 0.0 {
                eta * xn / den
            } else {
                1.0
            };
            let rate = (lr * trust) as f32;
            match velocity.as_mut() {
                Some(v) => {
                    let v = &mut Arc::make_mut(&mut v[r])[part];
                    for ((x, v), &g) in x[local.clone()].iter_mut().zip(v.iter_mut()).zip(&g[local])
                    {
                        let d = g + *x * wdf;
                        *v = *v * mu + rate * d;
                        *x -= *v;
                    }
                }
                None => {
                    for (x, &g) in x[local.clone()].iter_mut().zip(&g[local]) {
                        let d = g + *x * wdf;
                        *x -= rate * d;
                    }
                }
            }
        }
        self.velocity = velocity;
    }

    /// SGD: `d = g + λx; v = μv + d; x -= lr·(nesterov ? d + μv : v)`.
    fn sgd_step(
        &mut self,
        r: usize,
        g: &[f32],
        lr: f64,
        block: Range<usize>,
        opt: &OptimizerConfig,
    ) {
        // The momentum buffer is taken out so that the row can be borrowed mutably beside it.
        let mut velocity = self.velocity.take();
        let x = &mut self.get_mut(r)[block.clone()];
        let v = velocity
            .as_mut()
            .map(|v| &mut Arc::make_mut(&mut v[r])[block]);
        Sgd::of(opt).apply(x, v, g, lr as f32);
        self.velocity = velocity;
    }

    /// Sets every listed row to their mean, atomically: `(Σ rows) / k`, summed in list order.
    pub fn average(&mut self, rows: &[usize]) {
        if rows.is_empty() {
            return;
        }
        for &r in rows {
            self.settle(r);
        }
        let mut mean = self.buffer();
        let terms: Vec<&[f32]> = rows.iter().map(|&r| &self.params[r][..]).collect();
        mean_into_split(&mut mean, &terms, self.threads);
        let mean = Arc::new(mean);
        for &r in rows {
            // The rows share one buffer: a later write to one of them copies it.
            let old = std::mem::replace(&mut self.params[r], Arc::clone(&mean));
            self.recycle(old);
        }
    }

    /// The mean of the rows `range`, summed in order.
    pub fn mean_of(&mut self, range: Range<usize>) -> Vec<f32> {
        for r in range.clone() {
            self.settle(r);
        }
        let mut mean = vec![0.0; self.p];
        let terms: Vec<&[f32]> = self.params[range].iter().map(|r| &r[..]).collect();
        mean_into_split(&mut mean, &terms, self.threads);
        mean
    }
}

/// Floats of work (coordinates times terms or queued steps) from which a row operation is
/// split over the rows' threads: a pass this long takes tens of microseconds, several times
/// what handing half of it to another thread and waiting for it costs. Smaller ones (every row
/// of the quickstart's model) stay on the calling thread.
pub const PARALLEL_FLOATS: usize = 1 << 16;

/// How many parts of whole `tile`s to cut `len` coordinates into, `work` floats in all, for
/// `threads` threads: one below [`PARALLEL_FLOATS`].
fn parts(len: usize, work: usize, threads: usize, tile: usize) -> usize {
    if threads <= 1 || work < PARALLEL_FLOATS {
        1
    } else {
        threads.min(len.div_ceil(tile))
    }
}

/// Applies `queue` to the row `x` and its momentum `v`, in tiles of the coordinates small enough
/// for both tiles to stay in the first-level cache, each tile updated by every queued step in
/// turn: per coordinate, the operations of applying the steps one by one. With `src`, the row's
/// values are read from `src` and `x` is overwritten: each tile is copied in just before its
/// steps. A long pass is cut into parts of whole tiles run on up to `threads` threads
/// ([`parts`]); per coordinate the operations are the same.
fn apply_queue(
    x: &mut [f32],
    v: Option<&mut [f32]>,
    queue: &[Queued],
    threads: usize,
    src: Option<&[f32]>,
    v_src: Option<&[f32]>,
) {
    use rayon::prelude::*;
    const TILE: usize = 2048;
    let lo = queue.iter().map(|q| q.block.start).min().unwrap_or(0);
    let hi = queue.iter().map(|q| q.block.end).max().unwrap_or(0).max(lo);
    let mut v = v;
    if let Some(src) = src {
        x[..lo].copy_from_slice(&src[..lo]);
        x[hi..].copy_from_slice(&src[hi..]);
    }
    if let (Some(v), Some(src)) = (v.as_deref_mut(), v_src) {
        v[..lo].copy_from_slice(&src[..lo]);
        v[hi..].copy_from_slice(&src[hi..]);
    }
    if lo == hi {
        return;
    }
    let x = &mut x[lo..hi];
    let v = v.map(|v| &mut v[lo..hi]);
    let src = src.map(|s| &s[lo..hi]);
    let v_src = v_src.map(|s| &s[lo..hi]);
    let parts = parts(hi - lo, (hi - lo) * queue.len(), threads, TILE);
    if parts <= 1 {
        return apply_tiles(x, v, Sources { x: src, v: v_src }, queue, lo, TILE);
    }
    let chunk = (hi - lo).div_ceil(parts).next_multiple_of(TILE);
    let sources = |i: usize, len: usize| {
        let at = i * chunk..i * chunk + len;
        Sources {
            x: src.map(|s| &s[at.clone()]),
            v: v_src.map(|s| &s[at]),
        }
    };
    match v {
        Some(v) => x
            .par_chunks_mut(chunk)
            .zip(v.par_chunks_mut(chunk))
            .enumerate()
            .for_each(|(i, (x, v))| {
                let from = sources(i, x.len());
                apply_tiles(x, Some(v), from, queue, lo + i * chunk, TILE);
            }),
        None => x.par_chunks_mut(chunk).enumerate().for_each(|(i, x)| {
            let from = sources(i, x.len());
            apply_tiles(x, None, from, queue, lo + i * chunk, TILE);
        }),
    }
}

/// Where [`apply_tiles`] reads the row and its momentum from when not in place.
#[derive(Clone, Copy)]
struct Sources<'a> {
    x: Option<&'a [f32]>,
    v: Option<&'a [f32]>,
}

/// [`apply_queue`] on the coordinates `offset..offset + x.len()` of a row (`x`, `v` and
/// `from` are those coordinates), tile by tile.
fn apply_tiles(
    x: &mut [f32],
    mut v: Option<&mut [f32]>,
    from: Sources,
    queue: &[Queued],
    offset: usize,
    tile: usize,
) {
    for start in (0..x.len()).step_by(tile) {
        let end = (start + tile).min(x.len());
        if let Some(src) = from.x {
            x[start..end].copy_from_slice(&src[start..end]);
        }
        if let (Some(v), Some(src)) = (v.as_deref_mut(), from.v) {
            v[start..end].copy_from_slice(&src[start..end]);
        }
        for q in queue {
            let a = q.block.start.max(offset + start);
            let b = q.block.end.min(offset + end);
            if a < b {
                let local = a - offset..b - offset;
                let v = v.as_deref_mut().map(|v| &mut v[local.clone()]);
                q.rule.apply(&mut x[local], v, q.g.slice(a, b), q.lr);
            }
        }
    }
}

/// Steps a row's queue holds for rows of `p` parameters: [`MAX_QUEUE`], fewer for large rows.
fn queue_cap(p: usize) -> usize {
    (QUEUE_FLOATS / p.max(1)).clamp(1, MAX_QUEUE)
}

/// Coordinates per tile of the combinations below: the output's tile (4 KB) stays in the
/// first-level cache while every term is added to it, so a combination of `k` terms is one pass
/// over memory instead of `k` (or `k + 1` with a copy first). Per coordinate the operations are
/// those of one pass per term, in the same order, so the values are the same bits.
const COMBINE_TILE: usize = 1024;

/// The tiles of `0..len`.
fn tiles(len: usize) -> impl Iterator<Item = Range<usize>> {
    (0..len)
        .step_by(COMBINE_TILE)
        .map(move |start| start..(start + COMBINE_TILE).min(len))
}

/// `Σ weight · term` over `terms`, in order, in `f32`: the first term (times its weight unless
/// the weight is 1), then each further one added.
///
/// # Panics
/// If `terms` is empty.
pub fn combine(terms: &[(&[f32], f64)]) -> Vec<f32> {
    let first = terms
        .first()
        .expect("a combination has at least one term")
        .0;
    let mut out = vec![0.0; first.len()];
    combine_into(&mut out, terms);
    out
}

/// [`combine`] into `out` (overwritten, `P` long).
///
/// # Panics
/// If `terms` is empty.
pub fn combine_into(out: &mut [f32], terms: &[(&[f32], f64)]) {
    let (&(first, w), rest) = terms
        .split_first()
        .expect("a combination has at least one term");
    if let [(second, v)] = *rest {
        // Two terms, the usual case (a pairwise average, a difference): one loop.
        mix_two_into(out, first, w, second, v);
        return;
    }
    for t in tiles(out.len()) {
        let o = &mut out[t.clone()];
        o.copy_from_slice(&first[t.clone()]);
        scale_add(o, w, rest, t);
    }
}

/// `out = w₀·out + Σ wₖ·termₖ`, in place: the arithmetic of [`combine`] with `out` as its first
/// term.
pub fn combine_in_place(out: &mut [f32], w0: f64, rest: &[(&[f32], f64)]) {
    if let [(second, v)] = *rest {
        // Two terms, the usual case (a pairwise mix, a received message added): one loop.
        mix_two(out, w0, second, v);
        return;
    }
    for t in tiles(out.len()) {
        scale_add(&mut out[t.clone()], w0, rest, t);
    }
}

/// [`combine_into`], cut into parts of whole tiles run on up to `threads` threads of the current
/// rayon pool when the combination is long enough ([`PARALLEL_FLOATS`]); per coordinate the same
/// operations, so the same bits.
///
/// # Panics
/// If `terms` is empty.
pub fn combine_into_split(out: &mut [f32], terms: &[(&[f32], f64)], threads: usize) {
    let work = out.len() * terms.len();
    let split = in_parts(out, work, threads, |at, o| {
        combine_into(
            o,
            &terms
                .iter()
                .map(|&(t, w)| (&t[at.clone()], w))
                .collect::<Vec<_>>(),
        );
    });
    if !split {
        combine_into(out, terms);
    }
}

/// [`combine_in_place`], split like [`combine_into_split`].
pub fn combine_in_place_split(out: &mut [f32], w0: f64, rest: &[(&[f32], f64)], threads: usize) {
    let work = out.len() * (rest.len() + 1);
    let split = in_parts(out, work, threads, |at, o| {
        let rest: Vec<(&[f32], f64)> = rest.iter().map(|&(t, w)| (&t[at.clone()], w)).collect();
        combine_in_place(o, w0, &rest);
    });
    if !split {
        combine_in_place(out, w0, rest);
    }
}

/// Runs `part` on contiguous parts of whole combination tiles of `out`, one per thread of up to
/// `threads` of the current rayon pool, each given its coordinates in `out` and its slice; or,
/// when `work` floats are too few to gain from it ([`parts`]), does nothing and says so.
fn in_parts(
    out: &mut [f32],
    work: usize,
    threads: usize,
    part: impl Fn(Range<usize>, &mut [f32]) + Sync,
) -> bool {
    use rayon::prelude::*;
    let parts = parts(out.len(), work, threads, COMBINE_TILE);
    if parts <= 1 {
        return false;
    }
    let chunk = out.len().div_ceil(parts).next_multiple_of(COMBINE_TILE);
    out.par_chunks_mut(chunk)
        .enumerate()
        .for_each(|(i, o)| part(i * chunk..i * chunk + o.len(), o));
    true
}

wide! {
    /// `o = w₀·a + w₁·b`, a weight of 1 multiplying nothing.
    fn mix_two_into(out: &mut [f32], first: &[f32], w: f64, second: &[f32], v: f64) {
        let f = |x: f32, w: f64| if w == 1.0 { x } else { x * w as f32 };
        for ((o, &a), &b) in out.iter_mut().zip(first).zip(second) {
            *o = f(a, w) + f(b, v);
        }
    }
}

wide! {
    /// `o = w₀·o + w₁·b`, a weight of 1 multiplying nothing.
    fn mix_two(out: &mut [f32], w0: f64, second: &[f32], v: f64) {
        let f = |x: f32, w: f64| if w == 1.0 { x } else { x * w as f32 };
        for (o, &b) in out.iter_mut().zip(second) {
            *o = f(*o, w0) + f(b, v);
        }
    }
}

wide! {
    /// One tile of a combination: `o = w₀·o + Σ wₖ·termₖ[tile]`, a weight of 1 multiplying
    /// nothing.
    fn scale_add(o: &mut [f32], w0: f64, rest: &[(&[f32], f64)], tile: Range<usize>) {
        if w0 != 1.0 {
            let w = w0 as f32;
            for o in o.iter_mut() {
                *o *= w;
            }
        }
        for &(t, w) in rest {
            let t = &t[tile.clone()];
            if w == 1.0 {
                for (o, &x) in o.iter_mut().zip(t) {
                    *o += x;
                }
            } else {
                let w = w as f32;
                for (o, &x) in o.iter_mut().zip(t) {
                    *o += x * w;
                }
            }
        }
    }
}

wide! {
    /// The mean of `terms` into `out`: summed in order, then divided by their number, in `f32`.
    ///
    /// # Panics
    /// If `terms` is empty.
    pub fn mean_into(out: &mut [f32], terms: &[&[f32]]) {
        let (first, rest) = terms.split_first().expect("a mean has at least one term");
        let k = terms.len() as f32;
        for t in tiles(out.len()) {
            let o = &mut out[t.clone()];
            o.copy_from_slice(&first[t.clone()]);
            for x in rest {
                for (o, &x) in o.iter_mut().zip(&x[t.clone()]) {
                    *o += x;
                }
            }
            for o in o.iter_mut() {
                *o /= k;
            }
        }
    }
}

/// [`mean_into`], cut into parts of whole tiles run on up to `threads` threads of the current
/// rayon pool when the mean is long enough ([`PARALLEL_FLOATS`]); per coordinate the same
/// operations, so the same bits.
///
/// # Panics
/// If `terms` is empty.
pub fn mean_into_split(out: &mut [f32], terms: &[&[f32]], threads: usize) {
    let split = in_parts(out, out.len() * terms.len(), threads, |at, o| {
        mean_into(o, &terms.iter().map(|t| &t[at.clone()]).collect::<Vec<_>>());
    });
    if !split {
        mean_into(out, terms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: usize, p: usize) -> Rows {
        let mut rows = Rows::new(vec![0.0; p], n, &OptimizerConfig::default());
        for r in 0..n {
            rows.set(r, (0..p).map(|k| (r * p + k) as f32).collect());
        }
        rows
    }

    #[test]
    fn writes_while_snapshots_are_held_copy_only_the_row_written() {
        let (n, p) = (64, 100);
        let mut rows = rows(n, p);
        let snaps: Vec<Row> = (0..8).map(|r| rows.share(r)).collect();
        // Writing rows nobody holds copies nothing, however many snapshots are pending.
        for r in 8..n {
            rows.step(
                r,
                &vec![1.0; p],
                0.1,
                0..p,
                &OptimizerConfig::default(),
                &[],
            );
        }
        assert_eq!(rows.floats_copied(), 0);
        // A held row is copied once on its first write, then written in place.
        rows.step(
            3,
            &vec![1.0; p],
            0.1,
            0..p,
            &OptimizerConfig::default(),
            &[],
        );
        rows.step(
            3,
            &vec![1.0; p],
            0.1,
            0..p,
            &OptimizerConfig::default(),
            &[],
        );
        assert_eq!(rows.floats_copied(), p as u64);
        // The snapshot kept what was read.
        assert_eq!(snaps[3][0], (3 * p) as f32);
        assert!((rows.get(3)[0] - ((3 * p) as f32 - 0.2)).abs() < 1e-3);
        // Memory: n rows plus one buffer per snapshot whose row changed since.
        let live: std::collections::BTreeSet<*const f32> = (0..n)
            .map(|r| rows.get(r).as_ptr())
            .chain(snaps.iter().map(|s| s.as_ptr()))
            .collect();
        assert_eq!(live.len(), n + 1);
    }

    #[test]
    fn in_place_combination_is_bit_identical_to_a_fresh_one() {
        let p = 257;
        let a: Vec<f32> = (0..p)
            .map(|k| ((k * 7919) % 113) as f32 / 17.0 - 3.0)
            .collect();
        let b: Vec<f32> = (0..p)
            .map(|k| ((k * 104_729) % 97) as f32 / 13.0 - 2.5)
            .collect();
        let c: Vec<f32> = (0..p).map(|k| (k as f32).sin()).collect();
        for (w0, wb, wc) in [(1.0, 1.0, 1.0), (1.0 / 3.0, 1.0, 0.7), (0.5, -1.0, 1e-3)] {
            let fresh = combine(&[(&a, w0), (&b, wb), (&c, wc)]);
            let mut into = vec![f32::NAN; p];
            combine_into(&mut into, &[(&a, w0), (&b, wb), (&c, wc)]);
            let mut in_place = a.clone();
            combine_in_place(&mut in_place, w0, &[(&b, wb), (&c, wc)]);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&into), bits(&fresh), "weights {w0} {wb} {wc}");
            assert_eq!(bits(&in_place), bits(&fresh), "weights {w0} {wb} {wc}");
        }
    }

    #[test]
    fn a_steady_gossip_cycle_allocates_nothing_after_its_first_rounds() {
        // Each round every row is snapshotted (a gradient request), sends a share (a message
        // buffer), mixes a neighbour's message in and is stepped; then the snapshots and the
        // messages are released. Once the spares hold a round's swing, no round allocates.
        let (n, p) = (32, 50);
        let mut rows = rows(n, p);
        let opt = OptimizerConfig::default();
        let round = |rows: &mut Rows| {
            let snaps: Vec<Row> = (0..n).map(|r| rows.share(r)).collect();
            let msgs: Vec<Row> = (0..n)
                .map(|r| {
                    let mut m = rows.buffer();
                    combine_into(&mut m, &[(rows.get(r), 0.5)]);
                    Arc::new(m)
                })
                .collect();
            for r in 0..n {
                let mut mixed = rows.buffer();
                combine_into(&mut mixed, &[(rows.get(r), 0.5), (&msgs[(r + 1) % n], 1.0)]);
                rows.set(r, mixed);
                rows.step(r, &vec![1.0; p], 0.1, 0..p, &opt, &[]);
            }
            for s in snaps.into_iter().chain(msgs) {
                rows.recycle(s);
            }
        };
        for _ in 0..3 {
            round(&mut rows);
        }
        let warm = rows.buffers_allocated();
        assert!(warm > 0);
        for _ in 0..20 {
            round(&mut rows);
        }
        assert_eq!(
            rows.buffers_allocated(),
            warm,
            "steady rounds allocate nothing"
        );
        // The spares never outnumber what a round had alive at once besides the rows.
        assert!(rows.spares() <= 2 * n, "{} spares", rows.spares());
    }

    #[test]
    fn a_row_shared_with_a_snapshot_is_never_taken_for_in_place_writes() {
        let mut rows = rows(2, 4);
        let snap = rows.share(0);
        assert!(rows.take_unique(0).is_none());
        assert_eq!(rows.get(0), &[0.0, 1.0, 2.0, 3.0]);
        drop(snap);
        let mut row = rows.take_unique(0).expect("nobody else holds it");
        row[0] = 9.0;
        rows.set(0, row);
        assert_eq!(rows.get(0), &[9.0, 1.0, 2.0, 3.0]);
    }

    #[test]
    fn average_is_atomic_and_leaves_other_rows() {
        let mut rows = rows(4, 3);
        rows.average(&[1, 3]);
        assert_eq!(rows.get(1), &[6.0, 7.0, 8.0]);
        assert_eq!(rows.get(3), &[6.0, 7.0, 8.0]);
        assert_eq!(rows.get(0), &[0.0, 1.0, 2.0]);
        // The averaged rows share a buffer until one of them is written.
        rows.copy_block(1, 0, 0..1);
        assert_eq!(rows.get(1), &[0.0, 7.0, 8.0]);
        assert_eq!(rows.get(3), &[6.0, 7.0, 8.0]);
    }

    #[test]
    fn momentum_nesterov_and_decay_follow_the_store_contract() {
        let opt = OptimizerConfig {
            momentum: 0.5,
            nesterov: true,
            weight_decay: 0.1,
            ..Default::default()
        };
        let mut rows = Rows::new(vec![1.0, 2.0], 1, &opt);
        rows.step(0, &[1.0], 0.5, 1..2, &opt, &[]);
        // d = 1 + 0.1·2 = 1.2; v = 1.2; step = 1.2 + 0.5·1.2 = 1.8; x = 2 − 0.9.
        assert_eq!(rows.get(0)[0], 1.0, "outside the block nothing moves");
        assert!((rows.get(0)[1] - 1.1).abs() < 1e-6);
        rows.step(0, &[0.0], 1.0, 1..2, &opt, &[]);
        // d = 0.11; v = 0.6 + 0.11 = 0.71; step = 0.11 + 0.355 = 0.465.
        assert!((rows.get(0)[1] - (1.1 - 0.465)).abs() < 1e-6);
    }

    /// A gradient of `p` floats from a seed, with values of mixed signs and magnitudes.
    fn gradient(seed: usize, p: usize) -> Row {
        Arc::new(
            (0..p)
                .map(|k| (((k + 31 * seed) * 7919) % 211) as f32 / 37.0 - 2.9)
                .collect(),
        )
    }

    /// Asserts the same bits, naming the first coordinate that differs rather than printing two
    /// vectors of thousands.
    fn same(got: &[f32], want: &[f32], what: &str) {
        let diff = bits(got).iter().zip(bits(want)).position(|(a, b)| *a != b);
        assert_eq!(
            diff,
            None,
            "{what}: {got:?} and {want:?} at the first difference",
            got = diff.map(|i| got[i]),
            want = diff.map(|i| want[i])
        );
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn queued_steps_are_bit_identical_to_steps_one_by_one() {
        // Rows wider than a tile, blocks that cross tiles and overlap, momentum, Nesterov and
        // decay, rates that change from step to step, and more steps than a queue holds.
        let p = 5000;
        for opt in [
            OptimizerConfig::default(),
            OptimizerConfig {
                momentum: 0.9,
                ..Default::default()
            },
            OptimizerConfig {
                momentum: 0.7,
                nesterov: true,
                weight_decay: 1e-3,
                ..Default::default()
            },
        ] {
            let init: Vec<f32> = (0..p).map(|k| (k as f32 * 0.37).sin()).collect();
            let mut eager = Rows::new(init.clone(), 2, &opt);
            let mut lazy = Rows::new(init, 2, &opt);
            let blocks = [0..p, 1000..4500, 2047..2049, 0..1, 3000..p];
            for step in 0..3 * MAX_QUEUE + 5 {
                let g = gradient(step, p);
                let block = blocks[step % blocks.len()].clone();
                let lr = 0.01 + 0.001 * (step % 7) as f64;
                let r = step % 2;
                eager.step(r, &g[block.clone()], lr, block.clone(), &opt, &[]);
                lazy.step_shared(r, &g, lr, block, &opt, &[]);
            }
            assert!(lazy.queued_steps() > 0, "some steps are still queued");
            for r in 0..2 {
                assert_eq!(bits(&lazy.value(r)), bits(eager.get(r)), "{opt:?} row {r}");
            }
            lazy.settle_all();
            assert_eq!(lazy.queued_steps(), 0);
            for r in 0..2 {
                assert_eq!(bits(lazy.get(r)), bits(eager.get(r)), "{opt:?} row {r}");
            }
            // The momentum moved the same way: one more step agrees too.
            let g = gradient(999, p);
            eager.step(0, &g, 0.05, 0..p, &opt, &[]);
            lazy.step(0, &g, 0.05, 0..p, &opt, &[]);
            assert_eq!(bits(lazy.get(0)), bits(eager.get(0)), "{opt:?} after");
        }
    }

    #[test]
    fn passes_split_over_threads_are_bit_identical_to_one_thread() {
        // Rows long enough to be split (not a whole number of tiles, so the parts differ in
        // length), blocks that end inside a part, momentum with decay, and three threads.
        let p = 3 * PARALLEL_FLOATS / 2 + 77;
        assert!(parts(p, p, 3, 2048) == 3 && parts(p, 2 * p, 3, COMBINE_TILE) == 3);
        let opt = OptimizerConfig {
            momentum: 0.9,
            weight_decay: 1e-3,
            ..Default::default()
        };
        let init: Vec<f32> = (0..p).map(|k| (k as f32 * 0.37).sin()).collect();
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let mut rows = Rows::new(init.clone(), 3, &opt).with_threads(threads);
                let blocks = [0..p, 1000..p - 5000, 70_000..70_001, 0..p];
                for step in 0..8 {
                    let g = gradient(step, p);
                    let r = step % 3;
                    rows.step_shared(r, &g, 0.01, blocks[step % 4].clone(), &opt, &[]);
                    if step % 3 == 2 {
                        rows.average(&[0, 2]);
                    }
                }
                let mean = rows.mean_of(0..3);
                let mut split = vec![0.0; p];
                let terms: Vec<&[f32]> = (0..3).map(|r| rows.get(r)).collect();
                mean_into_split(&mut split, &terms, threads);
                let out: Vec<Vec<f32>> = (0..3).map(|r| rows.get(r).to_vec()).collect();
                (out, mean, split)
            })
        };
        let (one, mean_one, split_one) = run(1);
        let (three, mean_three, split_three) = run(3);
        for r in 0..3 {
            same(&three[r], &one[r], &format!("row {r}"));
        }
        same(&mean_three, &mean_one, "mean_of");
        same(&split_three, &split_one, "mean_into_split");
        same(&split_one, &mean_one, "mean_into_split and mean_of");
        // The combinations: two terms and three, weights of one and not, out of place and in.
        let a = gradient(1, p);
        let b = gradient(2, p);
        let c = gradient(3, p);
        for terms in [
            vec![(&a[..], 0.5), (&b[..], 0.5)],
            vec![(&a[..], 1.0), (&b[..], 0.3), (&c[..], 1.0 / 3.0)],
        ] {
            let mut want = vec![0.0; p];
            combine_into(&mut want, &terms);
            let mut want_in = a.to_vec();
            combine_in_place(&mut want_in, 0.7, &terms[1..]);
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(3)
                .build()
                .unwrap();
            pool.install(|| {
                let mut got = vec![0.0; p];
                combine_into_split(&mut got, &terms, 3);
                same(&got, &want, "combine_into_split");
                let mut got_in = a.to_vec();
                combine_in_place_split(&mut got_in, 0.7, &terms[1..], 3);
                same(&got_in, &want_in, "combine_in_place_split");
            });
        }
    }

    #[test]
    fn settling_a_held_row_copies_it_in_the_same_pass_with_the_same_bits() {
        // Queued steps on a row a snapshot holds: the settled row is a new buffer with the
        // values of steps applied one by one (inside the blocks and outside them), the
        // snapshot keeps what was read, and the copy is counted once. On one thread and split.
        let p = 3 * PARALLEL_FLOATS / 2 + 77;
        let opt = OptimizerConfig {
            momentum: 0.9,
            ..Default::default()
        };
        let init: Vec<f32> = (0..p).map(|k| (k as f32 * 0.11).cos()).collect();
        let blocks = [1000..p - 5000, 3000..4000, 2..70_001];
        let mut eager = Rows::new(init.clone(), 1, &opt);
        for (step, block) in blocks.iter().enumerate() {
            let g = gradient(step, p);
            eager.step(0, &g[block.clone()], 0.02, block.clone(), &opt, &[]);
        }
        for threads in [1, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let mut lazy = Rows::new(init.clone(), 1, &opt).with_threads(threads);
                let snapshot = lazy.share(0);
                for (step, block) in blocks.iter().enumerate() {
                    lazy.step_shared(0, &gradient(step, p), 0.02, block.clone(), &opt, &[]);
                }
                lazy.settle(0);
                same(lazy.get(0), eager.get(0), &format!("{threads} threads"));
                same(&snapshot, &init, "the snapshot");
                assert_eq!(lazy.floats_copied(), p as u64);
            });
        }
    }

    #[test]
    fn rows_with_the_same_values_and_a_common_step_share_its_result() {
        // All-reduce's pattern: the same mean gradient queued block by block on every row, each
        // row settled in turn (at its next request). Rows 0-2 hold the same bits in separate
        // buffers; row 3 differs only in the sign of one zero; row 4 elsewhere.
        let p = 3000;
        let opt = OptimizerConfig {
            momentum: 0.9,
            ..Default::default()
        };
        let base: Vec<f32> = (0..p).map(|k| (k as f32 * 0.21).sin()).collect();
        let mut signed = base.clone();
        signed[0] = -0.0;
        let mut unsigned = base.clone();
        unsigned[0] = 0.0;
        let mut other = unsigned.clone();
        other[p - 1] += 1.0;
        let starts = [&unsigned, &unsigned, &unsigned, &signed, &other];
        let mut lazy = Rows::new(unsigned.clone(), 5, &opt);
        let mut eager = Rows::new(unsigned.clone(), 5, &opt);
        for (r, start) in starts.iter().enumerate() {
            lazy.set(r, start.to_vec());
            eager.set(r, start.to_vec());
        }
        for round in 0..3 {
            let g = gradient(round, p);
            for r in 0..5 {
                for block in [0..1000, 1000..p] {
                    lazy.step_common(r, &g, 0.05, block.clone(), &opt, &[]);
                    eager.step(r, &g[block.clone()], 0.05, block, &opt, &[]);
                }
            }
            for r in 0..5 {
                lazy.settle(r);
                same(
                    lazy.get(r),
                    eager.get(r),
                    &format!("round {round}, row {r}"),
                );
            }
            let ptr = |r: usize| lazy.get(r).as_ptr();
            assert!(
                ptr(1) == ptr(0) && ptr(2) == ptr(0),
                "round {round}: rows 0-2 share"
            );
            assert!(ptr(4) != ptr(0), "round {round}: row 4 does not");
            // Row 3's `-0.0` becomes the others' value at its first step (`-0.0 - d` and
            // `0.0 - d` are the same bits), computed apart from theirs; from the next step on,
            // its inputs are theirs and it shares their result.
            assert_eq!(bits(lazy.get(3)), bits(lazy.get(0)));
            assert_eq!(ptr(3) == ptr(0), round > 0, "round {round}: row 3");
        }
        // A write to one of the sharing rows leaves the others.
        lazy.step(1, &gradient(7, p), 0.05, 0..p, &opt, &[]);
        eager.step(1, &gradient(7, p), 0.05, 0..p, &opt, &[]);
        for r in 0..5 {
            same(
                lazy.get(r),
                eager.get(r),
                &format!("after a write, row {r}"),
            );
        }
    }

    #[test]
    fn every_access_to_a_row_applies_its_queue_first() {
        let p = 8;
        let opt = OptimizerConfig {
            momentum: 0.5,
            ..Default::default()
        };
        let fresh = || {
            let mut rows = Rows::new(vec![1.0; p], 3, &opt);
            rows.step_shared(0, &gradient(1, p), 0.1, 0..p, &opt, &[]);
            rows.step_shared(1, &gradient(2, p), 0.1, 0..p, &opt, &[]);
            rows
        };
        let mut want = {
            let mut rows = Rows::new(vec![1.0; p], 3, &opt);
            rows.step(0, &gradient(1, p), 0.1, 0..p, &opt, &[]);
            rows.step(1, &gradient(2, p), 0.1, 0..p, &opt, &[]);
            rows
        };
        // A snapshot sees the queued steps.
        let mut rows = fresh();
        assert_eq!(bits(&rows.share(0)), bits(want.get(0)));
        // An average, a block copy, an in-place take and a mean read them.
        let mut rows = fresh();
        rows.average(&[0, 1]);
        let mut expect = want.get(0).to_vec();
        for (e, x) in expect.iter_mut().zip(want.get(1)) {
            *e = (*e + x) / 2.0;
        }
        assert_eq!(bits(rows.get(0)), bits(&expect));
        let mut rows = fresh();
        rows.copy_block(2, 1, 0..p);
        assert_eq!(bits(rows.get(2)), bits(want.get(1)));
        let mut rows = fresh();
        let row = rows.take_unique(0).expect("nobody else holds it");
        assert_eq!(bits(&row), bits(want.get(0)));
        let mut rows = fresh();
        assert_eq!(bits(&rows.mean_of(0..3)), bits(&want.mean_of(0..3)));
        // Replacing a row still moves its momentum by the queued step.
        let mut rows = fresh();
        rows.set(0, vec![0.0; p]);
        rows.step(0, &gradient(3, p), 0.1, 0..p, &opt, &[]);
        let mut reference = Rows::new(vec![1.0; p], 1, &opt);
        reference.step(0, &gradient(1, p), 0.1, 0..p, &opt, &[]);
        reference.set(0, vec![0.0; p]);
        reference.step(0, &gradient(3, p), 0.1, 0..p, &opt, &[]);
        assert_eq!(bits(rows.get(0)), bits(reference.get(0)));
        // Swapping optimizer states applies each row's steps with its own state first.
        let mut rows = fresh();
        rows.swap_optimizer_state(0, 1);
        assert_eq!(rows.queued_steps(), 0);
        assert_eq!(bits(rows.get(1)), bits(want.get(1)));
    }

    #[test]
    #[should_panic(expected = "settle it first")]
    fn reading_a_row_with_queued_steps_is_refused() {
        let opt = OptimizerConfig::default();
        let mut rows = Rows::new(vec![0.0; 4], 1, &opt);
        rows.step_shared(0, &gradient(0, 4), 0.1, 0..4, &opt, &[]);
        let _ = rows.get(0);
    }

    #[test]
    fn a_queue_is_bounded_and_gives_its_gradients_back_to_the_spares() {
        let opt = OptimizerConfig::default();
        let p = 100;
        let mut rows = Rows::new(vec![0.0; p], 1, &opt);
        for k in 0..MAX_QUEUE - 1 {
            rows.step_shared(0, &gradient(k, p), 0.1, 0..p, &opt, &[]);
        }
        assert_eq!(rows.queued_steps(), MAX_QUEUE - 1);
        // The gradients were handed over (their other holders dropped them): the queue holds the
        // last references, and settling recycles them.
        assert_eq!(rows.spares(), 0);
        rows.step_shared(0, &gradient(0, p), 0.1, 0..p, &opt, &[]);
        assert_eq!(rows.queued_steps(), 0, "a full queue is settled");
        // The last gradient's caller still held it while the queue was settled.
        assert_eq!(rows.spares(), MAX_QUEUE - 1);
        // Large rows queue fewer steps: a row of 2^20 floats or more, none.
        assert_eq!(queue_cap(2410), MAX_QUEUE);
        assert_eq!(queue_cap(101_770), 10);
        assert_eq!(queue_cap(25_000_000), 1);
        // Adam and LARS step at once.
        let adam = OptimizerConfig {
            kind: OptimizerKind::Adam,
            ..Default::default()
        };
        let mut rows = Rows::new(vec![0.0; p], 1, &adam);
        rows.step_shared(0, &gradient(0, p), 0.1, 0..p, &adam, &[]);
        assert_eq!(rows.queued_steps(), 0);
    }

    #[test]
    fn combine_weighs_terms_in_order() {
        let a = [1.0f32, 2.0];
        let b = [10.0f32, 20.0];
        assert_eq!(combine(&[(&a, 1.0), (&b, 0.5)]), vec![6.0, 12.0]);
        assert_eq!(combine(&[(&a, 2.0)]), vec![2.0, 4.0]);
    }

    /// The fused and tiled loops give the bits of the definition: one pass per term over the
    /// whole row (scale the first unless its weight is 1, then add each term, times its weight
    /// unless 1), and the mean summed in order then divided. Rows longer than a tile, with a
    /// ragged last tile, two terms (the fused loop) and more (the tiled one), weights 1, −1 and
    /// others.
    #[test]
    fn fused_combinations_match_one_pass_per_term_bit_for_bit() {
        fn passes(terms: &[(&[f32], f64)]) -> Vec<f32> {
            let mut out = terms[0].0.to_vec();
            if terms[0].1 != 1.0 {
                for o in &mut out {
                    *o *= terms[0].1 as f32;
                }
            }
            for &(t, w) in &terms[1..] {
                for (o, &x) in out.iter_mut().zip(t) {
                    *o += if w == 1.0 { x } else { x * w as f32 };
                }
            }
            out
        }
        let p = 2 * COMBINE_TILE + 77;
        let data: Vec<Vec<f32>> = (0..5)
            .map(|t| gradient(t, p).iter().map(|x| x * 3.7 + t as f32).collect())
            .collect();
        let weights = [
            [1.0, 1.0, 1.0, 1.0, 1.0],
            [0.5, 0.3, -1.0, 0.7, 1.0],
            [0.1, 1.0, 0.7, 1.0, -1.0],
            [1.0, 0.37, 1.0, 0.5, 0.2],
        ];
        for w in weights {
            for k in 1..=5 {
                let terms: Vec<(&[f32], f64)> = (0..k).map(|t| (&data[t][..], w[t])).collect();
                let want = passes(&terms);
                same(
                    &combine(&terms),
                    &want,
                    &format!("combine, {k} terms, {w:?}"),
                );
                let mut out = vec![f32::NAN; p];
                combine_into(&mut out, &terms);
                same(&out, &want, &format!("combine_into, {k} terms, {w:?}"));
                let mut out = data[0].clone();
                combine_in_place(&mut out, w[0], &terms[1..]);
                same(&out, &want, &format!("combine_in_place, {k} terms, {w:?}"));
            }
        }
        for k in 1..=5 {
            let terms: Vec<&[f32]> = data[..k].iter().map(|d| &d[..]).collect();
            let mut want = passes(&terms.iter().map(|&t| (t, 1.0)).collect::<Vec<_>>());
            for m in &mut want {
                *m /= k as f32;
            }
            let mut out = vec![f32::NAN; p];
            mean_into(&mut out, &terms);
            same(&out, &want, &format!("mean of {k}"));
        }
    }

    /// SGD's loop, run in its AVX2 copy where the CPU has it, against the formula written out
    /// here and compiled for the baseline target: the same bits for every variant of the rule.
    #[test]
    fn sgd_steps_match_the_formula_bit_for_bit() {
        let p = 3 * 1024 + 5;
        let (x0, v0, g) = (gradient(1, p), gradient(2, p), gradient(3, p));
        let (mu, wd, lr) = (0.9f32, 0.013f32, 0.07f32);
        for (momentum, decay, nesterov) in [
            (false, false, false),
            (false, true, false),
            (true, false, false),
            (true, true, false),
            (true, false, true),
            (true, true, true),
        ] {
            let rule = Sgd {
                mu,
                wd,
                decay,
                nesterov,
            };
            let (mut x, mut v) = (x0.to_vec(), v0.to_vec());
            rule.apply(&mut x, momentum.then_some(&mut v[..]), &g, lr);
            let (mut wx, mut wv) = (x0.to_vec(), v0.to_vec());
            for k in 0..p {
                let d = if decay { g[k] + wx[k] * wd } else { g[k] };
                if momentum {
                    wv[k] = wv[k] * mu + d;
                    let step = if nesterov { d + wv[k] * mu } else { wv[k] };
                    wx[k] -= step * lr;
                } else {
                    wx[k] -= d * lr;
                }
            }
            let what = format!("momentum {momentum}, decay {decay}, nesterov {nesterov}");
            same(&x, &wx, &format!("parameters, {what}"));
            same(&v, &wv, &format!("momentum, {what}"));
        }
    }
}
