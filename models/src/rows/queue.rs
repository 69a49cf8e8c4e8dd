//! The SGD steps queued on a row, and their settle in one pass
//! ([`Rows::settle`](super::Rows::settle)): the gradient a step reads ([`Grad`], a buffer of its
//! own or a part of a flush's read-back [`Blocks`]), the queue's bound, the remembered settle
//! that rows with the same bits share ([`Settled`]), and the tiled, threaded pass that applies a
//! queue with SGD's own loop ([`sgd_apply`]).

use std::ops::Range;
use std::sync::Arc;

use dasim_sim::store::optim::Sgd;

use super::Row;
use super::combine::parts;

/// A settle's inputs and outputs ([`Rows::settle`](super::Rows::settle)). Holding every buffer
/// it names keeps their addresses from being reused, so a pointer that matches is the same
/// buffer.
pub(super) struct Settled {
    pub(super) params: Row,
    pub(super) velocity: Option<Row>,
    pub(super) steps: Vec<Queued>,
    pub(super) out_params: Row,
    pub(super) out_velocity: Option<Row>,
}

impl Settled {
    /// Whether a row at `params` and `velocity` with `steps` queued settles to this one's
    /// result: the same steps (the same gradient buffers, blocks, rates and rules) from the same
    /// bits.
    pub(super) fn matches(&self, params: &Row, velocity: Option<&Row>, steps: &[Queued]) -> bool {
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
pub(super) enum Grad {
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
    pub(super) fn slice(&self, a: usize, b: usize) -> &[f32] {
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
    pub(super) fn same(&self, other: &Grad) -> bool {
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
pub(super) struct Queued {
    /// The gradient; the step uses the coordinates `block`.
    pub(super) g: Grad,
    pub(super) block: Range<usize>,
    pub(super) lr: f32,
    pub(super) rule: Sgd<f32>,
    /// Queued by [`Rows::step_common`](super::Rows::step_common): the gradient is applied to
    /// several rows.
    pub(super) common: bool,
}

impl Queued {
    /// The same gradient buffer, block, rate and rule.
    fn same_step(&self, other: &Queued) -> bool {
        self.g.same(&other.g)
            && self.block == other.block
            && self.lr.to_bits() == other.lr.to_bits()
            && self.rule.same(other.rule)
    }
}

wide! {
    /// SGD's step ([`Sgd::apply`], the rule's own loop in `dasim_sim::store::optim::sgd`),
    /// compiled for AVX2 where the CPU has it: every SGD step of the rows, queued or not, runs
    /// here.
    pub(super) fn sgd_apply(
        rule: Sgd<f32>,
        x: &mut [f32],
        v: Option<&mut [f32]>,
        g: &[f32],
        lr: f32,
    ) {
        rule.apply(x, v, g, lr);
    }
}

/// Applies `queue` to the row `x` and its momentum `v`, in tiles of the coordinates small enough
/// for both tiles to stay in the first-level cache, each tile updated by every queued step in
/// turn: per coordinate, the operations of applying the steps one by one. With `src`, the row's
/// values are read from `src` and `x` is overwritten: each tile is copied in just before its
/// steps. A long pass is cut into parts of whole tiles run on up to `threads` threads
/// ([`parts`]); per coordinate the operations are the same.
pub(super) fn apply_queue(
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
                sgd_apply(q.rule, &mut x[local], v, q.g.slice(a, b), q.lr);
            }
        }
    }
}

/// Steps a row's queue holds for rows of `p` parameters: [`MAX_QUEUE`], fewer for large rows.
pub(super) fn queue_cap(p: usize) -> usize {
    (QUEUE_FLOATS / p.max(1)).clamp(1, MAX_QUEUE)
}
