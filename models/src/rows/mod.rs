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
//!
//! The rooms: this module holds the rows and their operations ([`Rows`]); `queue` the queued SGD
//! steps and their one-pass settle (the optimizer rules themselves are `dasim_sim`'s, one file
//! each in `dasim_sim::store::optim`); `combine` the linear combinations and means of rows.

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

mod combine;
mod queue;
#[cfg(test)]
mod tests;

use dasim_sim::store::optim::{self, Layout, Sgd, State};
use dasim_sim::store::{OptimizerConfig, OptimizerKind};

pub use combine::{
    PARALLEL_FLOATS, combine, combine_in_place, combine_in_place_split, combine_into,
    combine_into_split, mean_into, mean_into_split,
};
pub(crate) use queue::same_row;
pub use queue::{Blocks, MAX_QUEUE, QUEUE_FLOATS};
use queue::{Grad, Queued, Settled, apply_queue, queue_cap, sgd_apply};

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

impl Rows {
    /// `count` rows equal to `init`, with the zero state of `optimizer`: the buffers its rule
    /// keeps ([`OptimizerConfig::buffers`]: a momentum buffer or first moment, Adam's second
    /// moment and step counts).
    pub fn new(init: Vec<f32>, count: usize, optimizer: &OptimizerConfig) -> Self {
        let p = init.len();
        let first: Row = Arc::new(init);
        let buffers = optimizer.buffers();
        Rows {
            p,
            params: (0..count)
                .map(|_| Arc::new(first.as_ref().clone()))
                .collect(),
            // One zero buffer, shared until each row's first step.
            velocity: buffers.first.then(|| {
                let zeros = Arc::new(vec![0.0; p]);
                (0..count).map(|_| Arc::clone(&zeros)).collect()
            }),
            second: buffers.second.then(|| vec![vec![0.0; p]; count]),
            steps: buffers.counts.then(|| vec![vec![0; p]; count]),
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

    /// Zeroes row `r`'s optimizer state (after the steps queued beside it).
    pub fn reset_optimizer_state(&mut self, r: usize) {
        self.settle(r);
        if let Some(v) = self.velocity.as_mut() {
            v[r] = Arc::new(vec![0.0; self.p]);
        }
        if let Some(v) = self.second.as_mut() {
            v[r].fill(0.0);
        }
        if let Some(t) = self.steps.as_mut() {
            t[r].fill(0);
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
    /// of `block` only) and rate `lr`, by the rule of `opt` as `dasim_sim::store::optimizer`
    /// states it. `layout` is the model's shape (LARS's trust ratio is per layer, over the part
    /// of each layer inside `block`; Muon orthogonalizes the hidden matrices inside it).
    pub fn step(
        &mut self,
        r: usize,
        g: &[f32],
        lr: f64,
        block: Range<usize>,
        opt: &OptimizerConfig,
        layout: &Layout,
    ) {
        debug_assert_eq!(g.len(), block.len());
        self.settle(r);
        if opt.kind == OptimizerKind::Sgd {
            return self.sgd_step(r, g, lr, block, opt);
        }
        // Any other rule, from its own file of `dasim_sim::store::optim`, in `f32`, with the
        // row's state on `block`. The buffers are taken out so that the row can be borrowed
        // mutably beside them.
        let mut first = self.velocity.take();
        let mut second = self.second.take();
        let mut counts = self.steps.take();
        let x = &mut self.get_mut(r)[block.clone()];
        let state = State {
            first: first
                .as_mut()
                .map(|v| &mut Arc::make_mut(&mut v[r])[block.clone()]),
            second: second.as_mut().map(|v| &mut v[r][block.clone()]),
            counts: counts.as_mut().map(|t| &mut t[r][block.clone()]),
        };
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
        self.velocity = first;
        self.second = second;
        self.steps = counts;
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
        layout: &Layout,
    ) {
        self.queue_step(r, g, lr, block, opt, layout, false);
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
        layout: &Layout,
    ) {
        self.queue_step(r, g, lr, block, opt, layout, true);
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
        layout: &Layout,
        common: bool,
    ) {
        debug_assert_eq!(g.len(), self.p);
        if opt.kind != OptimizerKind::Sgd || block.is_empty() {
            self.step(r, &g[block.clone()], lr, block, opt, layout);
            return;
        }
        self.push_step(r, Grad::Row(Arc::clone(g)), block, lr, opt, common);
        if self.queued[r].len() >= queue_cap(self.p) {
            self.settle(r);
        }
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
        sgd_apply(Sgd::of(opt), x, v, g, lr as f32);
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
