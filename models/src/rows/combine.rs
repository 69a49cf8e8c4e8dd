//! Linear combinations and means of rows, in `f32`, term by term in a fixed order: fused into
//! one pass over tiles small enough for the first-level cache, split over threads for long
//! passes ([`PARALLEL_FLOATS`]), compiled for AVX2 where the CPU has it. Per coordinate the
//! operations are those of one pass per term, so the bits do not depend on any of it.

use std::ops::Range;

/// Floats of work (coordinates times terms or queued steps) from which a row operation is
/// split over the rows' threads: a pass this long takes tens of microseconds, several times
/// what handing half of it to another thread and waiting for it costs. Smaller ones (every row
/// of the quickstart's model) stay on the calling thread.
pub const PARALLEL_FLOATS: usize = 1 << 16;

/// How many parts of whole `tile`s to cut `len` coordinates into, `work` floats in all, for
/// `threads` threads: one below [`PARALLEL_FLOATS`].
pub(super) fn parts(len: usize, work: usize, threads: usize, tile: usize) -> usize {
    if threads <= 1 || work < PARALLEL_FLOATS {
        1
    } else {
        threads.min(len.div_ceil(tile))
    }
}

/// Coordinates per tile of the combinations below: the output's tile (4 KB) stays in the
/// first-level cache while every term is added to it, so a combination of `k` terms is one pass
/// over memory instead of `k` (or `k + 1` with a copy first). Per coordinate the operations are
/// those of one pass per term, in the same order, so the values are the same bits.
pub(super) const COMBINE_TILE: usize = 1024;

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
