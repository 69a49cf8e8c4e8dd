//! How a CPU pass shares its work with the other threads.
//!
//! A store's flush of many requests runs one replica per thread: each pass then stays on its
//! thread, with its maps in that core's caches. A flush of fewer requests than threads (an
//! asynchronous algorithm's, often one) would leave threads idle; there a pass spreads each
//! layer over the threads instead: a convolution by samples and output channels, a weight
//! gradient by output channels, batch norm by channels. No split ever cuts a sum, so the
//! numbers are the same bits either way.
//!
//! The choice is the caller's ([`with_inner_parallelism`]); a pass started without one spreads
//! its layers.

use std::cell::Cell;

use rayon::prelude::*;

thread_local! {
    static INNER: Cell<bool> = const { Cell::new(true) };
}

/// Runs `f` with this thread's passes spreading their layers over the threads (`on`) or not.
pub fn with_inner_parallelism<R>(on: bool, f: impl FnOnce() -> R) -> R {
    let before = INNER.with(|i| i.replace(on));
    let result = f();
    INNER.with(|i| i.set(before));
    result
}

fn inner() -> bool {
    INNER.with(Cell::get)
}

/// Whether this pass spreads its layers over more than one thread.
pub(crate) fn spreads() -> bool {
    inner() && rayon::current_num_threads() > 1
}

/// `f(i)` for every `i < count`: on every thread where this pass spreads its layers.
pub(crate) fn tasks(count: usize, f: impl Fn(usize) + Sync + Send) {
    if count > 1 && inner() {
        (0..count).into_par_iter().for_each(f);
    } else {
        (0..count).for_each(f);
    }
}

/// `[f(0), …, f(count − 1)]`, as [`tasks`].
pub(crate) fn map_tasks<T: Send>(count: usize, f: impl Fn(usize) -> T + Sync + Send) -> Vec<T> {
    if count > 1 && inner() {
        (0..count).into_par_iter().map(f).collect()
    } else {
        (0..count).map(f).collect()
    }
}

/// `f(i, chunk)` for the consecutive chunks of `size` floats of `data`, as [`tasks`].
pub(crate) fn chunks(data: &mut [f32], size: usize, f: impl Fn(usize, &mut [f32]) + Sync + Send) {
    if data.len() > size && inner() {
        data.par_chunks_mut(size)
            .enumerate()
            .for_each(|(i, c)| f(i, c));
    } else {
        data.chunks_mut(size).enumerate().for_each(|(i, c)| f(i, c));
    }
}

/// `f(i, a_chunk, b_chunk)` for the consecutive chunks of `a` (of `size_a`) and of `b` (of
/// `size_b`) together, as [`tasks`].
pub(crate) fn chunks2<B: Send>(
    a: &mut [f32],
    size_a: usize,
    b: &mut [B],
    size_b: usize,
    f: impl Fn(usize, &mut [f32], &mut [B]) + Sync + Send,
) {
    if a.len() > size_a && inner() {
        a.par_chunks_mut(size_a)
            .zip(b.par_chunks_mut(size_b))
            .enumerate()
            .for_each(|(i, (x, y))| f(i, x, y));
    } else {
        a.chunks_mut(size_a)
            .zip(b.chunks_mut(size_b))
            .enumerate()
            .for_each(|(i, (x, y))| f(i, x, y));
    }
}
