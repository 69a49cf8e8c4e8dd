//! Buffers that a CPU pass reuses from call to call, one set per thread.
//!
//! A pass of a convolutional model needs tens of megabytes of maps. Allocating them per pass
//! costs the kernel's zeroing of fresh pages (16% of a ResNet-20 run's samples when burn did it),
//! so each thread keeps the last few workspaces it built, keyed by what shapes them (the
//! model's geometry, the batch, the mode), and hands them back on the next pass of the same
//! shape. Buffers keep the invariants their pass relies on (zero padding stays zero), so a
//! reused workspace is as good as a new one, and results do not depend on which thread ran a
//! pass or what it ran before.

use std::any::Any;
use std::cell::RefCell;

/// Workspaces a thread keeps: a training pass, an inference pass, and one more shape.
const KEPT: usize = 3;

thread_local! {
    static KEEP: RefCell<Vec<Box<dyn Any>>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's workspace for `key`, built by `build` the first time (or when
/// it was dropped for others since).
pub(crate) fn with_workspace<K, W, R>(
    key: &K,
    build: impl FnOnce() -> W,
    f: impl FnOnce(&mut W) -> R,
) -> R
where
    K: PartialEq + Clone + 'static,
    W: 'static,
{
    let taken = KEEP.with(|keep| {
        let mut keep = keep.borrow_mut();
        let at = keep
            .iter()
            .position(|e| e.downcast_ref::<(K, W)>().is_some_and(|(k, _)| k == key));
        at.map(|i| keep.remove(i))
    });
    let mut entry = taken.unwrap_or_else(|| Box::new((key.clone(), build())));
    let result = f(&mut entry
        .downcast_mut::<(K, W)>()
        .expect("a workspace of its own key")
        .1);
    KEEP.with(|keep| {
        let mut keep = keep.borrow_mut();
        keep.insert(0, entry);
        keep.truncate(KEPT);
    });
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_is_reused_by_key() {
        let built = std::cell::Cell::new(0);
        let run = |key: u32| {
            with_workspace(
                &key,
                || {
                    built.set(built.get() + 1);
                    vec![0u8; 4]
                },
                |w: &mut Vec<u8>| {
                    w[0] += 1;
                    w[0]
                },
            )
        };
        assert_eq!(run(1), 1);
        assert_eq!(run(1), 2);
        assert_eq!(run(2), 1);
        assert_eq!(run(1), 3);
        assert_eq!(built.get(), 2);
    }
}
