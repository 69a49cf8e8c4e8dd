//! The conformance suite every [`ReplicaStore`] must pass.
//!
//! Algorithms are tested on the exact [`ReferenceStore`](crate::store::ReferenceStore) and run on
//! the burn store of `dasim-models`; what makes the first a test of the second is that both keep
//! the contract documented on [`ReplicaStore`] (and the optimizer rule of
//! [`crate::store::optimizer`]). This module states that contract as checks, one public function
//! per property, generic over a [`Fixture`] that builds fresh stores of one implementation — the
//! way burn runs one backend test suite against every backend. The macro
//! [`testgen_replica_store!`](crate::testgen_replica_store) turns the whole list into one `#[test]`
//! per check, so a failure names the property that broke.
//!
//! # What is checked
//!
//! The checks speak only the store's own language, so they hold for any model (the reference
//! store's quadratic, the burn store's networks): they never compute a gradient in closed form.
//! Where a value is needed, rows are read back through [`Fixture::read_row`], and a gradient is
//! *measured* by applying it with rate 1 on a plain-SGD store (`x − (x − g) = g`).
//!
//! - **Sizes and the initial model**: the sizes agree; a fresh store's rows are equal, and equal
//!   across fresh stores of any optimizer; the consensus distance is 0.
//! - **Added rows** ([`ReplicaStore::add_rows`]): appended after the others, copies of row 0's
//!   current parameters with a zero optimizer state, every operation works on them as on a
//!   worker's row, and they are part of neither [`ReplicaStore::evaluate`] nor the consensus
//!   distance.
//! - **Reads**: evaluations, consensus distance, suboptimality, gradient requests, means,
//!   messages and releases change no row.
//! - **Gradients**: a gradient is taken on the row as it was at the request, whatever is written
//!   after it (laziness is invisible); when pending requests are computed does not change them;
//!   each worker has its own data stream; `request_gradient` is `request_gradient_scaled(·, 1)`,
//!   and a scaled request is the gradient (and training loss) at the scaled row; releasing a
//!   pending gradient leaves the others; a gradient applies to any row and stays available;
//!   [`ReplicaStore::mean_gradient`] is the mean; and the same operations on two fresh stores give
//!   the same numbers (bit for bit when [`Fixture::reproducible`]).
//! - **The optimizer step**: plain SGD is linear in the rate; momentum, Nesterov momentum and
//!   weight decay follow [`crate::store::optimizer`] step after step; a block step touches only
//!   its block (parameters and optimizer state), block steps over a partition are one full step,
//!   and no operation but the step touches the optimizer state. Adam (bias correction by the
//!   row's own step count) and LARS (trust ratio per layer of [`ReplicaStore::layers`]) follow
//!   their rules step after step, and their state stays with its row through mixes, averages,
//!   copies and messages. The rule a store is held to is the rule's own code, run here in `f64`
//!   on the measured gradient ([`crate::store::optim`]): one statement of each rule, which the
//!   reference store runs in `f64` and the burn store's rows in `f32`, so that this suite checks
//!   a store's state handling and arithmetic against it, within the fixture's tolerance.
//! - **Mixing** ([`ReplicaStore::mix`]): the stated linear combination of rows and messages, into
//!   any row, atomically (a destination may be a source, even twice).
//! - **Messages**: [`ReplicaStore::new_msg`] holds its value as of the instant it was taken,
//!   whatever is written afterwards (to rows or by releasing the messages it was made from); on
//!   a store that computes, [`ReplicaStore::msg_values`] reads it back and
//!   [`ReplicaStore::msg_from_values`] writes one from the host.
//! - **Block copies and averages**: [`ReplicaStore::copy_block`] copies exactly its block and
//!   nothing else; [`ReplicaStore::average`] sets every listed row to their mean and leaves the
//!   others.
//! - **Evaluation and measures**: [`ReplicaStore::evaluate`] is the model of the workers' mean,
//!   [`ReplicaStore::evaluate_mix`] and [`ReplicaStore::evaluate_rows`] that of the stated
//!   combination, the consensus distance is `(1/n) Σ ‖s_i·x_i − z̄‖²`,
//!   [`ReplicaStore::suboptimality`] is consistent, and [`ReplicaStore::take_train_loss`] is the
//!   mean over the minibatches computed since the last call.
//! - **Handles** are never reused.
//! - **State** ([`ReplicaStore::state`]): a suffix of the row, empty for a model without state.
//!   On a store whose model has state ([`Fixture::stateful_store`]; batch norm's running
//!   statistics), the state rule of [`ReplicaStore::apply_gradient_block`]: a gradient's state
//!   change reaches only the rows that computed it (for a mean, its inputs' rows), any other row
//!   gets the trainable step alone; a scaled request's state change is in the row's units
//!   (push-sum's numerator gains `w` times the de-biased change).
//!
//! # Running it against a store
//!
//! Implement [`Fixture`] for a small type of the test crate (how to build a fresh store, how to
//! read a row, the tolerance), then generate the tests:
//!
//! ```
//! use dasim_sim::store::conformance::Fixture;
//! use dasim_sim::store::{OptimizerConfig, Quadratic, ReferenceStore};
//!
//! struct Exact;
//!
//! impl Fixture for Exact {
//!     type Store = ReferenceStore;
//!     fn store(&self, workers: usize, optimizer: &OptimizerConfig) -> ReferenceStore {
//!         ReferenceStore::new(Quadratic::new(8, 10.0, 0.5), workers, optimizer.clone(), 7)
//!     }
//!     fn read_row(&self, store: &ReferenceStore, row: usize) -> Vec<f64> {
//!         store.params(row).to_vec()
//!     }
//!     fn tolerance(&self) -> f64 {
//!         1e-12
//!     }
//! }
//!
//! // In a test file: one `#[test]` per check.
//! dasim_sim::testgen_replica_store!(Exact);
//! # fn main() {
//! # // (In a doctest, run a few of them by hand.)
//! # dasim_sim::store::conformance::mix_is_atomic(&Exact);
//! # dasim_sim::store::conformance::messages_are_snapshots(&Exact);
//! # assert!(dasim_sim::store::conformance::checks::<Exact>().len() > 30);
//! # }
//! ```
//!
//! `testgen_replica_store!(optional EXPR)` takes an `Option` of a fixture instead, and skips
//! every check (passing) when it is `None`: for a device that may be missing, such as a wgpu
//! adapter. [`checks`] lists the same checks by name, for a harness of one's own.
//!
//! The fixture's model must be fully trainable (no state coordinates, such as batch-norm running
//! statistics, that a gradient moves without the optimizer rule), and its gradients must differ
//! from worker to worker (a noisy gradient, or minibatches), so that the rows can be moved apart.
//! A store that also runs models with state gives one in [`Fixture::stateful_store`], on which
//! the state checks run (they pass without running where it gives none).
//!
//! # Adding a check
//!
//! Write a public function `fn(&F)` for `F: Fixture` here that panics when the property fails,
//! stating the property in its first doc line, and add its name to the list in
//! [`testgen_replica_store!`](crate::testgen_replica_store): every store's test file then runs
//! it.

use std::collections::BTreeSet;
use std::fmt::Display;
use std::ops::Range;

use crate::store::optim::{self, Layout, Sgd, State};
use crate::store::{GradId, MsgId, OptimizerConfig, OptimizerKind, ReplicaStore, Slot, blocks};

/// One store implementation under test: how to build a fresh store and how to read its rows.
///
/// The [`ReplicaStore`] trait has no read on purpose (algorithms never look at parameter
/// values, so that control flow cannot depend on them); the suite reads rows through the
/// fixture instead, from the store's own host-side accessor.
pub trait Fixture {
    /// The store implementation.
    type Store: ReplicaStore;

    /// A fresh store of `workers` workers applying the optimizer step `optimizer`. Everything else
    /// (model, data, seed) is fixed by the fixture: two calls give stores that start from the
    /// same model and draw the same minibatches, whatever the optimizer, so that a gradient
    /// measured on one store is the gradient the other computes. At least 1 and at most 8
    /// workers are asked for.
    fn store(&self, workers: usize, optimizer: &OptimizerConfig) -> Self::Store;

    /// Row `row`'s parameters as they are now, `num_params()` numbers. Only reads.
    fn read_row(&self, store: &Self::Store, row: usize) -> Vec<f64>;

    /// How far results computed two ways may differ, relative: vectors agree when every
    /// coordinate differs by at most `tolerance · max(1, largest |coordinate| of either)`, and
    /// scalars (losses, distances) by at most `tolerance · max(1, |a|, |b|)`. Copies and
    /// coordinates an operation must not touch are always compared exactly.
    fn tolerance(&self) -> f64;

    /// Whether the same operations on two fresh stores give bit-identical numbers (true of the
    /// reference store and of the burn store on the CPU; GPU reductions need not be). When
    /// false, [`same_operations_give_same_numbers`] compares within [`Fixture::tolerance`].
    fn reproducible(&self) -> bool {
        true
    }

    /// A fresh plain-SGD store of `workers` workers whose model has state (a non-empty
    /// [`ReplicaStore::state`], such as batch norm's running statistics), for the checks of the
    /// state rule; `None` (the default) for an implementation without such models.
    fn stateful_store(&self, _workers: usize) -> Option<Self::Store> {
        None
    }
}

/// Generates one `#[test]` per check of [`crate::store::conformance`] for a fixture.
///
/// `testgen_replica_store!(EXPR)` with `EXPR` a [`Fixture`](crate::store::conformance::Fixture)
/// (evaluated once per test); `testgen_replica_store!(optional EXPR)` with `EXPR` an
/// `Option<impl Fixture>`, every test passing without running when it is `None`. Invoke it once
/// per module; the tests are named after the checks.
///
/// This macro holds the list of checks: a new check is added here.
#[macro_export]
macro_rules! testgen_replica_store {
    (@each $mode:ident [$($arg:tt)*]) => {
        $crate::testgen_replica_store! { @$mode [$($arg)*]
            sizes_are_consistent,
            fresh_rows_are_equal,
            add_rows_appends_copies_of_row_zero,
            added_rows_have_zero_optimizer_state,
            added_rows_behave_like_rows,
            added_rows_are_not_workers,
            reads_and_requests_change_no_row,
            gradient_is_taken_at_the_request,
            flush_timing_does_not_change_gradients,
            data_streams_are_per_worker,
            request_gradient_is_scale_one,
            scaled_request_is_the_gradient_at_the_scaled_row,
            releasing_a_pending_gradient_leaves_the_others,
            gradient_applies_to_any_row_and_stays_available,
            mean_gradient_is_the_mean,
            same_operations_give_same_numbers,
            a_restored_store_goes_on_as_the_saved_one,
            sgd_step_is_linear_in_the_rate,
            plain_sgd_step_follows_the_rule,
            weight_decay_step_follows_the_rule,
            momentum_step_follows_the_rule,
            nesterov_step_follows_the_rule,
            nesterov_with_weight_decay_step_follows_the_rule,
            block_step_touches_only_its_block,
            block_steps_over_a_partition_make_a_full_step,
            row_operations_leave_optimizer_state,
            adam_step_follows_the_rule,
            adam_with_weight_decay_step_follows_the_rule,
            adamw_step_follows_the_rule,
            clipped_steps_follow_the_rule,
            lars_step_follows_the_rule,
            muon_step_follows_the_rule,
            adam_and_lars_state_is_per_row_and_never_mixed,
            optimizer_states_swap_and_step_other_rows,
            a_reset_optimizer_state_steps_as_a_fresh_one,
            mix_is_the_linear_combination,
            mix_is_atomic,
            messages_are_snapshots,
            released_messages_leave_the_others,
            message_values_read_back_and_write,
            copy_block_copies_only_its_block,
            average_sets_rows_to_their_mean,
            evaluate_is_the_mean_of_the_workers,
            evaluate_mix_is_the_model_of_the_combination,
            consensus_distance_is_the_spread_of_the_workers,
            suboptimality_is_consistent,
            train_loss_is_the_mean_since_the_last_take,
            handles_are_never_reused,
            state_is_a_suffix,
            gradient_state_reaches_only_the_rows_that_computed_it,
            mean_gradient_state_reaches_its_inputs_rows,
            scaled_request_state_is_in_the_rows_units,
        }
    };
    (@tests [$fixture:expr] $($check:ident),* $(,)?) => {
        $(
            #[test]
            fn $check() {
                if let ::core::option::Option::Some(fixture) = $fixture {
                    $crate::store::conformance::$check(&fixture);
                }
            }
        )*
    };
    (@list [$fixture:ty] $($check:ident),* $(,)?) => {
        ::std::vec![
            $((
                ::core::stringify!($check),
                $crate::store::conformance::$check::<$fixture> as fn(&$fixture),
            )),*
        ]
    };
    (optional $fixture:expr) => {
        $crate::testgen_replica_store!(@each tests [$fixture]);
    };
    ($fixture:expr) => {
        $crate::testgen_replica_store!(@each tests [::core::option::Option::Some($fixture)]);
    };
}

/// A check: panics when the store of the fixture breaks its property.
pub type Check<F> = fn(&F);

/// Every check, by name, for a harness of one's own (the same list the
/// [`testgen_replica_store!`](crate::testgen_replica_store) macro generates tests from).
pub fn checks<F: Fixture>() -> Vec<(&'static str, Check<F>)> {
    crate::testgen_replica_store!(@each list [F])
}

// ---------------------------------------------------------------------------------------------
// Helpers.

/// Worker rows of the stores the checks build (most checks; a few need more).
const WORKERS: usize = 4;

/// Accuracies of models within the tolerance may differ on a held-out sample or two, where two
/// logits nearly tie.
const ACCURACY_SLACK: f64 = 0.01;

fn plain() -> OptimizerConfig {
    OptimizerConfig::default()
}

fn optimizer(momentum: f64, nesterov: bool, weight_decay: f64) -> OptimizerConfig {
    OptimizerConfig {
        momentum,
        nesterov: Some(nesterov),
        weight_decay,
        ..Default::default()
    }
}

fn read_all<F: Fixture>(f: &F, s: &F::Store) -> Vec<Vec<f64>> {
    (0..s.rows()).map(|r| f.read_row(s, r)).collect()
}

/// `Σ weight · vector`.
fn lin(terms: &[(&[f64], f64)]) -> Vec<f64> {
    let mut out = vec![0.0; terms[0].0.len()];
    for (v, w) in terms {
        for (o, x) in out.iter_mut().zip(v.iter()) {
            *o += w * x;
        }
    }
    out
}

fn sub(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x - y).collect()
}

#[track_caller]
fn assert_close(what: impl Display, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    let scale = got.iter().chain(want).fold(
        1.0f64,
        |m, v| if v.is_finite() { m.max(v.abs()) } else { m },
    );
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= tol * scale,
            "{what}: coordinate {k} is {a}, expected {b} (tolerance {tol} × {scale})"
        );
    }
}

#[track_caller]
fn assert_same(what: impl Display, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            a == b,
            "{what}: coordinate {k} is {a}, expected exactly {b}"
        );
    }
}

#[track_caller]
fn assert_close_scalar(what: impl Display, got: f64, want: f64, tol: f64) {
    let scale = 1.0f64.max(got.abs()).max(want.abs());
    assert!(
        (got - want).abs() <= tol * scale,
        "{what}: {got}, expected {want} (tolerance {tol} × {scale})"
    );
}

#[track_caller]
fn assert_differ(what: impl Display, a: &[f64], b: &[f64]) {
    assert!(
        a != b,
        "{what}: the rows are equal; the fixture must let rows move apart (worker-dependent \
         gradients and a model where a step changes the parameters)"
    );
}

/// Rows not in `written` are exactly as in `before`.
#[track_caller]
fn assert_untouched<F: Fixture>(
    what: impl Display,
    f: &F,
    s: &F::Store,
    before: &[Vec<f64>],
    written: &[usize],
) {
    for (r, old) in before.iter().enumerate() {
        if !written.contains(&r) {
            assert_same(format!("{what}: row {r} changed"), &f.read_row(s, r), old);
        }
    }
}

/// Moves the rows apart, the same way on every store: worker `w` takes one step of its own
/// gradient (rate 0.2) and is scaled by `1 + w/8`; an added row `r` becomes
/// `0.5·row[r] + 0.75·row[r mod workers]`. Resets the training loss. Checks that all rows differ.
fn spread<F: Fixture>(f: &F, s: &mut F::Store) {
    let n = s.workers();
    let ids: Vec<GradId> = (0..n).map(|w| s.request_gradient(w)).collect();
    for (w, g) in ids.into_iter().enumerate() {
        s.apply_gradient(w, g, 0.2);
        s.release_gradient(g);
    }
    for w in 0..n {
        s.mix(w, &[(Slot::Row(w), 1.0 + w as f64 / 8.0)]);
    }
    for r in n..s.rows() {
        s.mix(r, &[(Slot::Row(r), 0.5), (Slot::Row(r % n), 0.75)]);
    }
    s.take_train_loss();
    let rows = read_all(f, s);
    for a in 0..rows.len() {
        for b in 0..a {
            assert_differ(
                format!("rows {b} and {a} after spreading"),
                &rows[a],
                &rows[b],
            );
        }
    }
}

/// A message's value, read by mixing it alone into row `scratch`.
fn read_msg<F: Fixture>(f: &F, s: &mut F::Store, scratch: usize, m: MsgId) -> Vec<f64> {
    s.mix(scratch, &[(Slot::Msg(m), 1.0)]);
    f.read_row(s, scratch)
}

/// The gradient worker 0 computes first on a fresh store of `workers` workers, measured on a
/// plain-SGD store by a step of rate 1 on row `row` (which it leaves at `x − g`): `(x, g)`.
fn first_gradient<F: Fixture>(f: &F, workers: usize) -> (Vec<f64>, Vec<f64>) {
    let mut s = f.store(workers, &plain());
    let x = f.read_row(&s, 0);
    let g = s.request_gradient(0);
    s.apply_gradient(0, g, 1.0);
    let g = sub(&x, &f.read_row(&s, 0));
    assert!(
        g.iter().any(|v| *v != 0.0),
        "the fixture's first gradient is zero: nothing about the step could be checked"
    );
    (x, g)
}

/// `x` and `v` after one SGD step with gradient `g` and rate `lr`: the rule of
/// [`crate::store::optim::sgd`], in `f64`.
fn rule_step(opt: &OptimizerConfig, x: &mut [f64], v: &mut [f64], g: &[f64], lr: f64) {
    Sgd::<f64>::of(opt).apply(x, Some(v), g, lr);
}

fn same_bits(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[track_caller]
fn assert_accuracy(what: impl Display, got: f64, want: f64) {
    if want.is_nan() {
        assert!(got.is_nan(), "{what}: accuracy {got}, expected NaN");
    } else {
        assert!(
            (0.0..=1.0).contains(&got) && (got - want).abs() <= ACCURACY_SLACK,
            "{what}: accuracy {got}, expected {want}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Sizes and the initial model.

/// The sizes agree: `workers()` is what was asked for, a fresh store has `rows() == workers()`,
/// and every row has `num_params() > 0` numbers; minibatches and the training split are not
/// empty.
pub fn sizes_are_consistent<F: Fixture>(f: &F) {
    for workers in [1, 3] {
        let s = f.store(workers, &plain());
        assert_eq!(s.workers(), workers, "workers()");
        assert_eq!(s.rows(), workers, "rows() of a fresh store");
        assert!(s.num_params() > 0, "num_params() is zero");
        assert!(s.batch_size() > 0, "batch_size() is zero");
        assert!(s.train_size() > 0, "train_size() is zero");
        for r in 0..workers {
            assert_eq!(f.read_row(&s, r).len(), s.num_params(), "row {r}'s length");
        }
    }
}

/// Every row of a fresh store holds the same initial model, whatever the optimizer, on every
/// fresh store; so their consensus distance is 0.
pub fn fresh_rows_are_equal<F: Fixture>(f: &F) {
    let mut s = f.store(WORKERS, &plain());
    let x0 = f.read_row(&s, 0);
    for r in 1..s.rows() {
        assert_same(
            format!("fresh row {r} against row 0"),
            &f.read_row(&s, r),
            &x0,
        );
    }
    let other = f.store(WORKERS, &optimizer(0.9, true, 0.1));
    for r in 0..other.rows() {
        assert_same(
            format!("row {r} of a second fresh store (another optimizer)"),
            &f.read_row(&other, r),
            &x0,
        );
    }
    let cd = s.consensus_distance(None);
    assert!(
        cd.abs() <= f.tolerance(),
        "consensus distance of equal rows: {cd}"
    );
}

// ---------------------------------------------------------------------------------------------
// Added rows.

/// `add_rows(count)` appends `count` rows after the existing ones, each a copy of row 0's current
/// parameters, returns the first index, and changes neither the existing rows nor `workers()`.
pub fn add_rows_appends_copies_of_row_zero<F: Fixture>(f: &F) {
    let mut s = f.store(WORKERS, &plain());
    spread(f, &mut s);
    let before = read_all(f, &s);
    let first = s.add_rows(2);
    assert_eq!(
        first, WORKERS,
        "add_rows returns the index of the first new row"
    );
    assert_eq!(s.rows(), WORKERS + 2, "rows() after add_rows(2)");
    assert_eq!(s.workers(), WORKERS, "added rows are not workers");
    for r in first..first + 2 {
        assert_same(
            format!("added row {r} against row 0"),
            &f.read_row(&s, r),
            &before[0],
        );
    }
    assert_untouched("add_rows", f, &s, &before, &[]);
    let next = s.add_rows(1);
    assert_eq!(
        next,
        WORKERS + 2,
        "a second add_rows appends after the first"
    );
    assert_eq!(s.rows(), WORKERS + 3, "rows() after a second add_rows");
    assert_same(
        "the row added second, against row 0",
        &f.read_row(&s, next),
        &before[0],
    );
}

/// An added row starts with a zero optimizer state (not row 0's): its first momentum step is the
/// step of a row that was never stepped.
pub fn added_rows_have_zero_optimizer_state<F: Fixture>(f: &F) {
    let mut s = f.store(WORKERS, &optimizer(0.9, false, 0.0));
    let g = s.request_gradient(0);
    s.apply_gradient(0, g, 0.1);
    s.apply_gradient(0, g, 0.1);
    let r = s.add_rows(1);
    // Row 1 was never stepped: a zero momentum buffer. Give it the added row's parameters.
    s.mix(1, &[(Slot::Row(r), 1.0)]);
    s.apply_gradient(r, g, 0.1);
    s.apply_gradient(1, g, 0.1);
    assert_close(
        "an added row after a momentum step, against a never-stepped row",
        &f.read_row(&s, r),
        &f.read_row(&s, 1),
        f.tolerance(),
    );
}

/// Every operation works on an added row as on a worker's row with the same parameters and
/// optimizer state: steps, block steps, mixes, block copies, messages and evaluations.
pub fn added_rows_behave_like_rows<F: Fixture>(f: &F) {
    let tol = f.tolerance();
    let mut s = f.store(WORKERS, &optimizer(0.5, false, 0.01));
    let r = s.add_rows(1);
    let p = s.num_params();
    let halves = blocks(p, 2);
    let g = s.request_gradient(0);
    let h = s.request_gradient(1);
    // Row 3 (a worker) and row r (added) hold the initial model with a zero state.
    for dst in [3, r] {
        s.apply_gradient(dst, g, 0.1);
        s.mix(dst, &[(Slot::Row(dst), 0.5), (Slot::Row(2), 0.5)]);
        s.apply_gradient(dst, h, 0.2);
        s.copy_block(dst, 1, halves[0].clone());
        s.apply_gradient_block(dst, g, 0.3, halves[1].clone());
        s.apply_gradient(dst, h, 0.1);
    }
    let (xr, x3) = (f.read_row(&s, r), f.read_row(&s, 3));
    assert_close("added row against worker row 3", &xr, &x3, tol);
    let mr = s.new_msg(&[(Slot::Row(r), 2.0)]);
    let m3 = s.new_msg(&[(Slot::Row(3), 2.0)]);
    s.mix(0, &[(Slot::Msg(mr), 1.0), (Slot::Row(2), 1.0)]);
    s.mix(1, &[(Slot::Msg(m3), 1.0), (Slot::Row(2), 1.0)]);
    assert_close(
        "a message of the added row, against one of row 3",
        &f.read_row(&s, 0),
        &f.read_row(&s, 1),
        tol,
    );
    let er = s.evaluate_mix(&[(r, 1.0)]);
    let e3 = s.evaluate_mix(&[(3, 1.0)]);
    assert_close_scalar("evaluate_mix of the added row", er.loss, e3.loss, tol);
    assert_accuracy("evaluate_mix of the added row", er.accuracy, e3.accuracy);
}

/// Added rows are part of neither `evaluate()` nor the consensus distance: changing one changes
/// neither.
pub fn added_rows_are_not_workers<F: Fixture>(f: &F) {
    let tol = f.tolerance();
    let mut s = f.store(WORKERS, &plain());
    let r = s.add_rows(1);
    spread(f, &mut s);
    let e = s.evaluate();
    let cd = s.consensus_distance(None);
    let g = s.request_gradient(1);
    s.mix(r, &[(Slot::Row(r), 3.0), (Slot::Row(0), 1.0)]);
    s.apply_gradient(r, g, 0.5);
    let e2 = s.evaluate();
    assert_close_scalar(
        "evaluate() after writing an added row",
        e2.loss,
        e.loss,
        tol,
    );
    assert_accuracy(
        "evaluate() after writing an added row",
        e2.accuracy,
        e.accuracy,
    );
    assert_close_scalar(
        "consensus distance after writing an added row",
        s.consensus_distance(None),
        cd,
        tol,
    );
}

/// Reads and bookkeeping change no row: evaluations, consensus distance, suboptimality, gradient
/// requests (scaled or not), means of gradients, new messages, the training loss and releases.
pub fn reads_and_requests_change_no_row<F: Fixture>(f: &F) {
    let mut s = f.store(WORKERS, &optimizer(0.5, true, 0.01));
    let r = s.add_rows(1);
    spread(f, &mut s);
    let before = read_all(f, &s);
    s.evaluate();
    s.evaluate_mix(&[(0, 0.5), (r, 0.5)]);
    s.evaluate_rows(&[1, r], None);
    s.evaluate_rows(&[2, 3], Some(&[0.5, 2.0]));
    s.consensus_distance(None);
    s.consensus_distance(Some(&[1.0, 0.5, 2.0, 1.5]));
    s.suboptimality(None);
    s.suboptimality(Some(&[(r, 1.0)]));
    let g = s.request_gradient(0);
    let h = s.request_gradient_scaled(1, 0.5);
    let k = s.request_gradient(2);
    let m = s.new_msg(&[(Slot::Row(0), 0.5), (Slot::Row(r), 0.5)]);
    let c = s.new_msg(&[(Slot::Row(3), 1.0)]);
    let mean = s.mean_gradient(&[g, h]);
    s.take_train_loss();
    s.release_msg(m);
    s.release_msg(c);
    s.release_gradient(mean);
    s.release_gradient(k);
    assert_untouched("reads and requests", f, &s, &before, &[]);
}

// ---------------------------------------------------------------------------------------------
// Gradients.

/// A gradient is taken on the row as it was at the request: writes to the row between the
/// request and the first use (steps, mixes, block copies, averages) do not change it, nor the
/// training loss recorded for it.
pub fn gradient_is_taken_at_the_request<F: Fixture>(f: &F) {
    let tol = f.tolerance();
    let p = f.store(1, &plain()).num_params();
    let run = |write: bool| {
        let mut s = f.store(WORKERS, &plain());
        // A gradient already computed, to write row 0 with after the request.
        let h = s.request_gradient(1);
        s.apply_gradient(1, h, 0.1);
        let g = s.request_gradient(0);
        if write {
            s.apply_gradient(0, h, 0.5);
            s.mix(0, &[(Slot::Row(0), 0.5), (Slot::Row(1), 0.5)]);
            s.copy_block(0, 3, 0..p / 2);
            s.average(&[0, 1]);
            s.mix(0, &[(Slot::Row(0), -2.0)]);
        }
        s.apply_gradient(2, g, 0.1);
        (f.read_row(&s, 2), s.take_train_loss())
    };
    let (written, loss_written) = run(true);
    let (quiet, loss_quiet) = run(false);
    assert_close(
        "a gradient used after its row was written, against one used at once",
        &written,
        &quiet,
        tol,
    );
    assert_close_scalar(
        "the training loss of a gradient whose row was written before use",
        loss_written,
        loss_quiet,
        tol,
    );
}

/// When pending requests are computed does not change them: requesting every worker's gradient
/// and then using them gives the numbers (rows and training loss) of using each one at once.
pub fn flush_timing_does_not_change_gradients<F: Fixture>(f: &F) {
    let tol = f.tolerance();
    let opt = optimizer(0.9, false, 0.0);
    let mut together = f.store(WORKERS, &opt);
    let ids: Vec<GradId> = (0..WORKERS).map(|w| together.request_gradient(w)).collect();
    for (w, &g) in ids.iter().enumerate().rev() {
        together.apply_gradient(w, g, 0.1);
    }
    let mut one_by_one = f.store(WORKERS, &opt);
    for w in 0..WORKERS {
        let g = one_by_one.request_gradient(w);
        one_by_one.apply_gradient(w, g, 0.1);
    }
    for w in 0..WORKERS {
        assert_close(
            format!("row {w}: gradients computed together, against one by one"),
            &f.read_row(&together, w),
            &f.read_row(&one_by_one, w),
            tol,
        );
    }
    assert_close_scalar(
        "training loss of gradients computed together, against one by one",
        together.take_train_loss(),
        one_by_one.take_train_loss(),
        tol,
    );
}

/// Each worker has its own data stream: worker 0's first gradient does not depend on how many
/// gradients other workers requested before it.
pub fn data_streams_are_per_worker<F: Fixture>(f: &F) {
    let mut busy = f.store(WORKERS, &plain());
    for _ in 0..2 {
        let h = busy.request_gradient(1);
        let k = busy.request_gradient(3);
        busy.apply_gradient(3, h, 0.1);
        busy.release_gradient(h);
        busy.release_gradient(k);
    }
    let g = busy.request_gradient(0);
    busy.apply_gradient(2, g, 0.1);
    let mut quiet = f.store(WORKERS, &plain());
    let g = quiet.request_gradient(0);
    quiet.apply_gradient(2, g, 0.1);
    assert_close(
        "worker 0's first gradient after other workers' requests, against alone",
        &f.read_row(&busy, 2),
        &f.read_row(&quiet, 2),
        f.tolerance(),
    );
}

/// `request_gradient(w)` is `request_gradient_scaled(w, 1)`.
pub fn request_gradient_is_scale_one<F: Fixture>(f: &F) {
    let mut a = f.store(WORKERS, &plain());
    let mut b = f.store(WORKERS, &plain());
    let ga = a.request_gradient(0);
    let gb = b.request_gradient_scaled(0, 1.0);
    a.apply_gradient(1, ga, 0.1);
    b.apply_gradient(1, gb, 0.1);
    assert_close(
        "request_gradient against request_gradient_scaled(·, 1)",
        &f.read_row(&a, 1),
        &f.read_row(&b, 1),
        f.tolerance(),
    );
    assert_close_scalar(
        "training loss of request_gradient against request_gradient_scaled(·, 1)",
        a.take_train_loss(),
        b.take_train_loss(),
        f.tolerance(),
    );
}

/// `request_gradient_scaled(w, s)` is the gradient at `s · row[w]` (the row itself unchanged),
/// and the training loss it records is the loss at that point: the same as scaling the row and
/// requesting at scale 1.
pub fn scaled_request_is_the_gradient_at_the_scaled_row<F: Fixture>(f: &F) {
    let tol = f.tolerance();
    let mut a = f.store(WORKERS, &plain());
    let mut b = f.store(WORKERS, &plain());
    spread(f, &mut a);
    spread(f, &mut b);
    let x0 = f.read_row(&a, 0);
    let ga = a.request_gradient_scaled(0, 0.5);
    b.mix(0, &[(Slot::Row(0), 0.5)]);
    let gb = b.request_gradient(0);
    a.apply_gradient(1, ga, 0.1);
    b.apply_gradient(1, gb, 0.1);
    assert_close(
        "gradient at scale 0.5, against the gradient at the row scaled by 0.5",
        &f.read_row(&a, 1),
        &f.read_row(&b, 1),
        tol,
    );
    assert_close_scalar(
        "training loss at scale 0.5, against at the scaled row",
        a.take_train_loss(),
        b.take_train_loss(),
        tol,
    );
    assert_same("a scaled request leaves its row", &f.read_row(&a, 0), &x0);
}

/// Releasing a gradient that was never used leaves the other pending gradients as they are.
pub fn releasing_a_pending_gradient_leaves_the_others<F: Fixture>(f: &F) {
    let run = |release: bool| {
        let mut s = f.store(WORKERS, &plain());
        let g0 = s.request_gradient(0);
        let g1 = s.request_gradient(1);
        let g2 = s.request_gradient(2);
        if release {
            s.release_gradient(g1);
        }
        s.apply_gradient(3, g2, 0.1);
        s.apply_gradient(3, g0, 0.1);
        f.read_row(&s, 3)
    };
    assert_close(
        "gradients used after another pending one was released, against none released",
        &run(true),
        &run(false),
        f.tolerance(),
    );
}

/// A gradient applies to any row (not only its worker's, added rows too), gives identical rows
/// the same step, and stays available after use: it may be applied again.
pub fn gradient_applies_to_any_row_and_stays_available<F: Fixture>(f: &F) {
    let tol = f.tolerance();
    let mut s = f.store(WORKERS, &plain());
    let r = s.add_rows(1);
    let g = s.request_gradient(0);
    for row in [1, 2, r] {
        s.apply_gradient(row, g, 0.1);
    }
    let x1 = f.read_row(&s, 1);
    assert_close(
        "the same step on rows 1 and 2",
        &f.read_row(&s, 2),
        &x1,
        tol,
    );
    assert_close(
        "the same step on rows 1 and an added row",
        &f.read_row(&s, r),
        &x1,
        tol,
    );
    // Used once, then again: two plain steps of 0.1 are one of 0.2.
    s.apply_gradient(1, g, 0.1);
    s.apply_gradient(3, g, 0.2);
    assert_close(
        "a gradient applied twice with rate 0.1, against once with 0.2",
        &f.read_row(&s, 1),
        &f.read_row(&s, 3),
        tol,
    );
}

/// `mean_gradient` is the mean of its inputs: a step with the mean of `g` and `h` at rate `2η`
/// is a step with each at rate `η` (plain SGD), and the mean of one gradient is that gradient.
pub fn mean_gradient_is_the_mean<F: Fixture>(f: &F) {
    let tol = f.tolerance();
    let mut s = f.store(WORKERS, &plain());
    let g = s.request_gradient(0);
    let h = s.request_gradient(1);
    let k = s.request_gradient(2);
    s.apply_gradient(1, g, 0.1);
    s.apply_gradient(1, h, 0.1);
    s.apply_gradient(3, k, 0.1);
    let mean = s.mean_gradient(&[g, h]);
    assert!(
        mean != g && mean != h,
        "mean_gradient returned one of its inputs ({mean:?})"
    );
    s.apply_gradient(2, mean, 0.2);
    assert_close(
        "a step with the mean of two gradients, against one with each",
        &f.read_row(&s, 2),
        &f.read_row(&s, 1),
        tol,
    );
    let single = s.mean_gradient(&[k]);
    s.apply_gradient(0, single, 0.1);
    assert_close(
        "a step with the mean of one gradient, against one with the gradient",
        &f.read_row(&s, 0),
        &f.read_row(&s, 3),
        tol,
    );
}

/// The operations the store defines, in one order, on two fresh stores.
fn script<S: ReplicaStore>(s: &mut S) -> Vec<f64> {
    let n = s.workers();
    let p = s.num_params();
    let r = s.add_rows(1);
    let mut trace = Vec::new();
    for round in 0..3 {
        let ids: Vec<GradId> = (0..n)
            .map(|w| s.request_gradient_scaled(w, 1.0 - 0.1 * round as f64))
            .collect();
        let m = s.new_msg(&[(Slot::Row(0), 0.5), (Slot::Row(1), 0.5)]);
        s.mix(2, &[(Slot::Row(2), 0.5), (Slot::Msg(m), 0.5)]);
        s.apply_gradient(0, ids[0], 0.1);
        let mean = s.mean_gradient(&ids[1..]);
        s.apply_gradient_block(r, mean, 0.05, 0..p / 2);
        s.apply_gradient(1, mean, 0.1);
        s.average(&[1, 3]);
        s.copy_block(3, r, p / 2..p);
        s.release_msg(m);
        s.release_gradient(ids[0]);
        s.release_gradient(mean);
        let e = s.evaluate();
        trace.extend([
            s.take_train_loss(),
            s.consensus_distance(None),
            e.loss,
            e.accuracy,
        ]);
    }
    trace
}

/// The same operations on two fresh stores give the same numbers: rows, training losses,
/// consensus distances, evaluations (bit for bit when the fixture is
/// [reproducible](Fixture::reproducible), else within the tolerance).
pub fn same_operations_give_same_numbers<F: Fixture>(f: &F) {
    let opt = optimizer(0.5, true, 0.01);
    let mut a = f.store(WORKERS, &opt);
    let mut b = f.store(WORKERS, &opt);
    let ta = script(&mut a);
    let tb = script(&mut b);
    let (ra, rb) = (read_all(f, &a), read_all(f, &b));
    if f.reproducible() {
        for (k, (x, y)) in ta.iter().zip(&tb).enumerate() {
            assert!(same_bits(*x, *y), "reading {k} of the script: {x} vs {y}");
        }
        for (r, (x, y)) in ra.iter().zip(&rb).enumerate() {
            assert_same(format!("row {r} after the script"), x, y);
        }
    } else {
        for (k, (x, y)) in ta.iter().zip(&tb).enumerate() {
            if !(x.is_nan() && y.is_nan()) {
                assert_close_scalar(format!("reading {k} of the script"), *x, *y, f.tolerance());
            }
        }
        for (r, (x, y)) in ra.iter().zip(&rb).enumerate() {
            assert_close(format!("row {r} after the script"), x, y, f.tolerance());
        }
    }
}

/// What [`a_restored_store_goes_on_as_the_saved_one`] does after the checkpoint: it uses the
/// gradient applied before (`g0`), the one pending (`g1`), the message (`m`) and the added row
/// `r`, requests and handles more; returns the readings and the new handles.
fn after_checkpoint<S: ReplicaStore>(
    s: &mut S,
    (g0, g1, m, r): (GradId, GradId, MsgId, usize),
) -> (Vec<f64>, Vec<u64>) {
    s.apply_gradient(r, g1, 0.1);
    s.apply_gradient(2, g1, 0.1);
    s.apply_gradient(0, g0, 0.05);
    s.mix(2, &[(Slot::Msg(m), 0.5), (Slot::Row(2), 0.5)]);
    let g2 = s.request_gradient(3);
    s.apply_gradient(3, g2, 0.1);
    s.apply_gradient(1, g0, 0.1);
    let m2 = s.new_msg(&[(Slot::Row(r), 1.0)]);
    s.mix(0, &[(Slot::Row(0), 0.5), (Slot::Msg(m2), 0.5)]);
    let e = s.evaluate();
    let trace = vec![
        s.take_train_loss(),
        s.consensus_distance(None),
        e.loss,
        e.accuracy,
    ];
    (trace, vec![g2.0, m2.0])
}

/// A store restored ([`ReplicaStore::restore_state`]) into a fresh store from what
/// [`ReplicaStore::save_state`] saved goes on as the saved one: its rows (those added too),
/// optimizer state, data streams, pending requests (what they read and their minibatches),
/// gradients computed and not released, message buffers, handle counter and the training loss
/// not yet read all carry over, bit for bit when the fixture is
/// [reproducible](Fixture::reproducible). A store that cannot be checkpointed (`save_state`
/// errs) passes.
pub fn a_restored_store_goes_on_as_the_saved_one<F: Fixture>(f: &F) {
    let opt = optimizer(0.5, true, 0.01);
    restores_exactly(f, f.store(WORKERS, &opt), || f.store(WORKERS, &opt));
    // A model with running statistics: which rows computed a gradient carries over too.
    if let Some(a) = f.stateful_store(WORKERS) {
        restores_exactly(f, a, || {
            f.stateful_store(WORKERS)
                .expect("the fixture gave a stateful store once")
        });
    }
}

fn restores_exactly<F: Fixture>(f: &F, mut a: F::Store, fresh: impl Fn() -> F::Store) {
    let r = a.add_rows(1);
    let g0 = a.request_gradient(0);
    a.apply_gradient(1, g0, 0.1);
    let g1 = a.request_gradient_scaled(2, 0.9);
    let m = a.new_msg(&[(Slot::Row(0), 0.5), (Slot::Row(3), 0.5)]);
    a.apply_gradient(0, g0, 0.05);
    let Ok(state) = a.save_state() else {
        return;
    };
    let mut b = fresh();
    b.restore_state(&state)
        .unwrap_or_else(|e| panic!("restoring what the store saved: {e}"));
    assert_eq!(b.rows(), a.rows(), "the added row is restored");
    let (ta, ha) = after_checkpoint(&mut a, (g0, g1, m, r));
    let (tb, hb) = after_checkpoint(&mut b, (g0, g1, m, r));
    assert_eq!(hb, ha, "handles after the restore");
    let (ra, rb) = (read_all(f, &a), read_all(f, &b));
    for (k, (x, y)) in ta.iter().zip(&tb).enumerate() {
        if f.reproducible() {
            assert!(
                same_bits(*x, *y),
                "reading {k} after the restore: {x} vs {y}"
            );
        } else if !(x.is_nan() && y.is_nan()) {
            assert_close_scalar(
                format!("reading {k} after the restore"),
                *x,
                *y,
                f.tolerance(),
            );
        }
    }
    for (row, (x, y)) in ra.iter().zip(&rb).enumerate() {
        if f.reproducible() {
            assert_same(format!("row {row} after the restore"), x, y);
        } else {
            assert_close(format!("row {row} after the restore"), x, y, f.tolerance());
        }
    }
    // A store refuses what it cannot have saved.
    let mut c = fresh();
    assert!(c.restore_state(b"not a store state").is_err());
}

// ---------------------------------------------------------------------------------------------
// The optimizer step.

/// A plain SGD step is `x ← x − η·g`: a step of rate `2η` moves a row twice as far as one of
/// rate `η`, and a step of rate 0 does not move it.
pub fn sgd_step_is_linear_in_the_rate<F: Fixture>(f: &F) {
    let mut s = f.store(WORKERS, &plain());
    let x = f.read_row(&s, 1);
    let g = s.request_gradient(0);
    s.apply_gradient(1, g, 0.05);
    s.apply_gradient(2, g, 0.1);
    s.apply_gradient(3, g, 0.0);
    let d1 = sub(&x, &f.read_row(&s, 1));
    let d2 = sub(&x, &f.read_row(&s, 2));
    assert_close(
        "the step of rate 0.1, against twice that of rate 0.05",
        &d2,
        &lin(&[(&d1, 2.0)]),
        f.tolerance(),
    );
    assert_close("a step of rate 0", &f.read_row(&s, 3), &x, f.tolerance());
}

/// Three steps of one gradient, against the rule of [`crate::store::optimizer`] applied to the
/// measured gradient.
fn check_rule<F: Fixture>(f: &F, opt: OptimizerConfig, name: &str) {
    let (x, g) = first_gradient(f, WORKERS);
    let mut s = f.store(WORKERS, &opt);
    let id = s.request_gradient(0);
    let (mut want, mut v) = (x.clone(), vec![0.0; x.len()]);
    for (k, lr) in [0.1, 0.05, 0.2].into_iter().enumerate() {
        s.apply_gradient(1, id, lr);
        rule_step(&opt, &mut want, &mut v, &g, lr);
        assert_close(
            format!("{name}: row after step {} (rate {lr})", k + 1),
            &f.read_row(&s, 1),
            &want,
            f.tolerance(),
        );
    }
}

/// [`ReplicaStore::swap_optimizer_state`] exchanges two rows' optimizer states and leaves their
/// parameters; [`ReplicaStore::apply_gradient_block_with_state`] steps one row's parameters with
/// another row's state, which alone takes the new state (momentum 0.9, worked with the rule).
pub fn optimizer_states_swap_and_step_other_rows<F: Fixture>(f: &F) {
    let tol = f.tolerance();
    let (x, g) = first_gradient(f, WORKERS);
    let opt = optimizer(0.9, false, 0.0);
    let mut s = f.store(WORKERS, &opt);
    let id = s.request_gradient(0);
    let zero = vec![0.0; x.len()];
    // Row 1 takes two steps: its momentum buffer v1 is built; rows 2 and 3 are never stepped.
    let (mut x1, mut v1) = (x.clone(), zero.clone());
    for lr in [0.1, 0.2] {
        s.apply_gradient(1, id, lr);
        rule_step(&opt, &mut x1, &mut v1, &g, lr);
    }
    s.swap_optimizer_state(1, 2);
    assert_close(
        "swap leaves row 1's parameters",
        &f.read_row(&s, 1),
        &x1,
        tol,
    );
    assert_close(
        "swap leaves row 2's parameters",
        &f.read_row(&s, 2),
        &x,
        tol,
    );
    // Row 2 now steps with v1, row 1 from a zero buffer.
    let (mut x2, mut v2) = (x.clone(), v1.clone());
    s.apply_gradient(2, id, 0.1);
    rule_step(&opt, &mut x2, &mut v2, &g, 0.1);
    assert_close(
        "row 2 steps with row 1's old state",
        &f.read_row(&s, 2),
        &x2,
        tol,
    );
    let mut v1 = zero.clone();
    s.apply_gradient(1, id, 0.1);
    rule_step(&opt, &mut x1, &mut v1, &g, 0.1);
    assert_close(
        "row 1 steps from a zero state",
        &f.read_row(&s, 1),
        &x1,
        tol,
    );
    // Row 3's parameters stepped with row 2's state: row 2's state advances, row 3's stays zero,
    // row 2's parameters stay.
    let mut x3 = x.clone();
    s.apply_gradient_block_with_state(3, 2, id, 0.2, 0..s.num_params());
    rule_step(&opt, &mut x3, &mut v2, &g, 0.2);
    assert_close(
        "row 3 stepped with row 2's state",
        &f.read_row(&s, 3),
        &x3,
        tol,
    );
    assert_close("row 2's parameters stay", &f.read_row(&s, 2), &x2, tol);
    s.apply_gradient(2, id, 0.1);
    rule_step(&opt, &mut x2, &mut v2, &g, 0.1);
    assert_close("row 2's state took that step", &f.read_row(&s, 2), &x2, tol);
    let mut v3 = zero;
    s.apply_gradient(3, id, 0.1);
    rule_step(&opt, &mut x3, &mut v3, &g, 0.1);
    assert_close(
        "row 3's own state stayed zero",
        &f.read_row(&s, 3),
        &x3,
        tol,
    );
    // A row with itself: a plain step.
    s.swap_optimizer_state(0, 0);
    s.apply_gradient_block_with_state(3, 3, id, 0.1, 0..s.num_params());
    rule_step(&opt, &mut x3, &mut v3, &g, 0.1);
    assert_close("a row's own state", &f.read_row(&s, 3), &x3, tol);
}

/// [`ReplicaStore::reset_optimizer_state`] zeroes a row's optimizer state and leaves its
/// parameters: with momentum and with Adam (whose step counts restart its bias correction), a
/// stepped row that is reset then moves by exactly what a row never stepped moves with the same
/// gradients and rates; without the reset it moves otherwise.
pub fn a_reset_optimizer_state_steps_as_a_fresh_one<F: Fixture>(f: &F) {
    let tol = f.tolerance();
    for opt in [optimizer(0.9, false, 0.0), adam(0.0)] {
        let mut s = f.store(WORKERS, &opt);
        let a = s.request_gradient(0);
        for lr in [0.1, 0.2] {
            s.apply_gradient(1, a, lr);
            s.apply_gradient(3, a, lr);
        }
        let x1 = f.read_row(&s, 1);
        s.reset_optimizer_state(1);
        assert_close(
            "a reset leaves the parameters",
            &f.read_row(&s, 1),
            &x1,
            tol,
        );
        // Another gradient than the state was built from (Adam's step on a constant gradient
        // is the same whatever its moments).
        let b = s.request_gradient(1);
        let before: Vec<Vec<f64>> = (0..WORKERS).map(|r| f.read_row(&s, r)).collect();
        for lr in [0.1, 0.05] {
            for r in [1, 2, 3] {
                s.apply_gradient(r, b, lr);
            }
        }
        let moved = |r: usize| -> Vec<f64> {
            let x = f.read_row(&s, r);
            x.iter().zip(&before[r]).map(|(a, b)| a - b).collect()
        };
        let kind = format!("{:?}", opt.kind);
        let (reset, kept, fresh) = (moved(1), moved(3), moved(2));
        assert_close(
            format!("{kind}: the reset row moves as a fresh one"),
            &reset,
            &fresh,
            tol,
        );
        let scale = fresh.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        let apart = kept
            .iter()
            .zip(&fresh)
            .any(|(a, b)| (a - b).abs() > 10.0 * tol * scale);
        assert!(
            apart,
            "{kind}: a row's state changed nothing, so the check would not see a reset"
        );
        s.release_gradient(a);
        s.release_gradient(b);
    }
}

/// Plain SGD (no momentum, no decay): `x ← x − η·g`, step after step.
pub fn plain_sgd_step_follows_the_rule<F: Fixture>(f: &F) {
    check_rule(f, plain(), "plain SGD");
}

/// Weight decay: `x ← x − η·(g + λ·x)`.
pub fn weight_decay_step_follows_the_rule<F: Fixture>(f: &F) {
    check_rule(f, optimizer(0.0, false, 0.1), "weight decay 0.1");
}

/// Heavy-ball momentum: `v ← μ·v + g`, `x ← x − η·v`.
pub fn momentum_step_follows_the_rule<F: Fixture>(f: &F) {
    check_rule(f, optimizer(0.9, false, 0.0), "momentum 0.9");
}

/// Nesterov momentum: `v ← μ·v + g`, `x ← x − η·(g + μ·v)`.
pub fn nesterov_step_follows_the_rule<F: Fixture>(f: &F) {
    check_rule(f, optimizer(0.9, true, 0.0), "Nesterov 0.9");
}

/// Nesterov momentum with weight decay: `d = g + λ·x`, `v ← μ·v + d`,
/// `x ← x − η·(d + μ·v)`.
pub fn nesterov_with_weight_decay_step_follows_the_rule<F: Fixture>(f: &F) {
    check_rule(
        f,
        optimizer(0.5, true, 0.05),
        "Nesterov 0.5, weight decay 0.05",
    );
}

/// `apply_gradient_block` changes only the coordinates of its block, to what a full step gives
/// them; an empty block changes nothing; other rows are untouched.
pub fn block_step_touches_only_its_block<F: Fixture>(f: &F) {
    let mut s = f.store(WORKERS, &optimizer(0.9, false, 0.01));
    let p = s.num_params();
    let block = blocks(p, 3)[1].clone();
    let g = s.request_gradient(0);
    let before = read_all(f, &s);
    s.apply_gradient_block(1, g, 0.1, block.clone());
    let x1 = f.read_row(&s, 1);
    assert_same(
        "a block step, before its block",
        &x1[..block.start],
        &before[1][..block.start],
    );
    assert_same(
        "a block step, after its block",
        &x1[block.end..],
        &before[1][block.end..],
    );
    assert_untouched("a block step on row 1", f, &s, &before, &[1]);
    s.apply_gradient(2, g, 0.1);
    assert_close(
        "a block step, inside its block, against a full step",
        &x1[block.clone()],
        &f.read_row(&s, 2)[block.clone()],
        f.tolerance(),
    );
    s.apply_gradient_block(3, g, 0.1, block.start..block.start);
    assert_same("an empty block step", &f.read_row(&s, 3), &before[3]);
}

/// Block steps over a partition of the coordinates, in any order, are one full step, optimizer
/// state included: rows stepped block by block and whole stay equal step after step.
pub fn block_steps_over_a_partition_make_a_full_step<F: Fixture>(f: &F) {
    let tol = f.tolerance();
    let mut s = f.store(WORKERS, &optimizer(0.9, true, 0.01));
    let parts = blocks(s.num_params(), 3);
    let g = s.request_gradient(0);
    let h = s.request_gradient(1);
    for b in parts.iter().rev() {
        s.apply_gradient_block(1, g, 0.1, b.clone());
    }
    s.apply_gradient(2, g, 0.1);
    assert_close(
        "step 1: by blocks (row 1), against whole (row 2)",
        &f.read_row(&s, 1),
        &f.read_row(&s, 2),
        tol,
    );
    s.apply_gradient(1, h, 0.1);
    for b in &parts {
        s.apply_gradient_block(2, h, 0.1, b.clone());
    }
    assert_close(
        "step 2: whole (row 1), against by blocks (row 2)",
        &f.read_row(&s, 1),
        &f.read_row(&s, 2),
        tol,
    );
    s.apply_gradient(1, g, 0.2);
    s.apply_gradient(2, g, 0.2);
    assert_close(
        "step 3: whole on both",
        &f.read_row(&s, 1),
        &f.read_row(&s, 2),
        tol,
    );
}

/// No operation but the optimizer step touches a row's optimizer state: after a mix, an
/// average, a block copy or a full copy (from a row whose state differs) and a message added in,
/// a momentum step moves each row exactly as far as it moves a row with the same history that
/// was left alone. (Without weight decay the step depends only on the gradient and the momentum
/// buffer, not on the parameters.)
pub fn row_operations_leave_optimizer_state<F: Fixture>(f: &F) {
    let workers = 6;
    let mut s = f.store(workers, &optimizer(0.9, false, 0.0));
    let p = s.num_params();
    let r = s.add_rows(1);
    // Row 0, the source, moves away with its own momentum.
    let h = s.request_gradient(workers - 1);
    s.apply_gradient(0, h, 0.5);
    // Rows 1..workers and r step once with the same gradient: the same momentum buffer.
    let g = s.request_gradient(1);
    for row in (1..workers).chain([r]) {
        s.apply_gradient(row, g, 0.1);
    }
    let m = s.new_msg(&[(Slot::Row(0), 1.0)]);
    s.mix(1, &[(Slot::Row(1), 0.5), (Slot::Row(0), 0.5)]);
    s.average(&[2, 0]);
    s.copy_block(3, 0, blocks(p, 2)[0].clone());
    s.mix(4, &[(Slot::Row(4), 1.0), (Slot::Msg(m), 0.5)]);
    s.copy_block(r, 3, 0..p);
    let control = workers - 1;
    let before = read_all(f, &s);
    for row in (1..workers).chain([r]) {
        s.apply_gradient(row, g, 0.1);
    }
    let moved = |s: &F::Store, row: usize| sub(&f.read_row(s, row), &before[row]);
    let want = moved(&s, control);
    for (row, op) in [
        (1, "mix"),
        (2, "average"),
        (3, "copy_block"),
        (4, "adding a message"),
        (r, "a full copy_block"),
    ] {
        assert_close(
            format!("the momentum step after {op} (row {row}), against an untouched row"),
            &moved(&s, row),
            &want,
            f.tolerance(),
        );
    }
}

/// One row's optimizer state, every buffer a rule may keep ([`crate::store::optim::Buffers`]).
#[derive(Clone)]
struct RuleState {
    v: Vec<f64>,
    s: Vec<f64>,
    t: Vec<u64>,
}

impl RuleState {
    fn new(p: usize) -> Self {
        RuleState {
            v: vec![0.0; p],
            s: vec![0.0; p],
            t: vec![0; p],
        }
    }
}

/// One full step of any rule of [`crate::store::optim`], in `f64`, after clipping the
/// gradient by its norm: the rule's own code, which every store runs (the reference store in
/// `f64`, the burn store's rows in `f32`).
fn any_rule_step(
    opt: &OptimizerConfig,
    layout: &Layout,
    x: &mut [f64],
    st: &mut RuleState,
    g: &[f64],
    lr: f64,
) {
    let c = opt.clip_factor(g.iter().map(|v| v * v).sum::<f64>().sqrt());
    let clipped: Vec<f64> = g.iter().map(|v| v * c).collect();
    let state = State {
        first: Some(&mut st.v),
        second: Some(&mut st.s),
        counts: Some(&mut st.t),
    };
    let block = 0..x.len();
    let g = &clipped[..];
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
}

/// The first gradient of each of the workers `0..count` on a fresh store of `workers` workers
/// (the data shards depend on it), exactly as the store holds it: requested, then the row
/// zeroed and the gradient applied with rate 1 on a plain-SGD store (`0 − 1·g`).
fn first_gradients<F: Fixture>(f: &F, workers: usize, count: usize) -> Vec<Vec<f64>> {
    let mut s = f.store(workers, &plain());
    let ids: Vec<GradId> = (0..count).map(|w| s.request_gradient(w)).collect();
    ids.into_iter()
        .enumerate()
        .map(|(w, id)| {
            s.mix(w, &[(Slot::Row(w), 0.0)]);
            s.apply_gradient(w, id, 1.0);
            f.read_row(&s, w).iter().map(|v| -v).collect()
        })
        .collect()
}

/// Three steps of one gradient with `opt`, against the suite's statement of its rule.
fn check_any_rule<F: Fixture>(f: &F, opt: OptimizerConfig, name: &str) {
    let g = first_gradients(f, WORKERS, 1).remove(0);
    let mut s = f.store(WORKERS, &opt);
    let layout = Layout::of(&s);
    let id = s.request_gradient(0);
    let mut want = f.read_row(&s, 1);
    let mut st = RuleState::new(want.len());
    for (k, lr) in [0.1, 0.05, 0.2].into_iter().enumerate() {
        s.apply_gradient(1, id, lr);
        any_rule_step(&opt, &layout, &mut want, &mut st, &g, lr);
        assert_close(
            format!("{name}: row after step {} (rate {lr})", k + 1),
            &f.read_row(&s, 1),
            &want,
            f.tolerance(),
        );
    }
}

fn adam(weight_decay: f64) -> OptimizerConfig {
    OptimizerConfig {
        kind: OptimizerKind::Adam,
        weight_decay,
        ..Default::default()
    }
}

fn muon() -> OptimizerConfig {
    OptimizerConfig {
        kind: OptimizerKind::Muon,
        lr: 0.02,
        momentum: 0.95,
        weight_decay: 0.01,
        adam_lr: Some(0.01),
        ..Default::default()
    }
}

fn lars() -> OptimizerConfig {
    OptimizerConfig {
        kind: OptimizerKind::Lars,
        momentum: 0.9,
        weight_decay: 0.01,
        eta: Some(0.5),
        ..Default::default()
    }
}

/// Adam: `t ← t + 1`, `m ← β₁m + (1 − β₁)g`, `v ← β₂v + (1 − β₂)g²`,
/// `x ← x − η·m̂/(√v̂ + ε)` with the bias corrections of the row's own step count.
pub fn adam_step_follows_the_rule<F: Fixture>(f: &F) {
    check_any_rule(f, adam(0.0), "Adam");
}

/// Adam with an L2 term (`d = g + λx` in place of `g`), and other β₁, β₂, ε.
pub fn adam_with_weight_decay_step_follows_the_rule<F: Fixture>(f: &F) {
    let opt = OptimizerConfig {
        beta1: Some(0.5),
        beta2: Some(0.9),
        eps: Some(1e-3),
        ..adam(0.01)
    };
    check_any_rule(f, opt, "Adam, weight decay 0.01");
}

/// AdamW: Adam's moments of the gradient alone, and the decay decoupled from them,
/// `x ← x − η·λ·x − η·m̂/(√v̂ + ε)` (a large λ, so that a decay folded into the gradient as
/// Adam's L2 term would fail).
pub fn adamw_step_follows_the_rule<F: Fixture>(f: &F) {
    let opt = OptimizerConfig {
        kind: OptimizerKind::AdamW,
        weight_decay: 0.5,
        beta2: Some(0.99),
        ..Default::default()
    };
    check_any_rule(f, opt, "AdamW, weight decay 0.5");
}

/// `clip_norm`: the gradient a step applies is scaled by `min(1, c/‖g‖)` first, for every rule
/// (a bound well under the first gradient's norm, so that the steps are clipped).
pub fn clipped_steps_follow_the_rule<F: Fixture>(f: &F) {
    let g = first_gradients(f, WORKERS, 1).remove(0);
    let norm = g.iter().map(|v| v * v).sum::<f64>().sqrt();
    assert!(norm > 0.0, "a zero gradient cannot show clipping");
    for (opt, name) in [
        (optimizer(0.9, true, 0.01), "SGD"),
        (adam(0.0), "Adam"),
        (lars(), "LARS"),
        (muon(), "Muon"),
    ] {
        let opt = OptimizerConfig {
            clip_norm: Some(norm / 4.0),
            ..opt
        };
        check_any_rule(f, opt, &format!("{name}, clipped to a quarter of the norm"));
    }
}

/// LARS: per layer of [`ReplicaStore::layers`], `τ = η_T‖x‖/(‖g‖ + λ‖x‖)`,
/// `v ← μv + η·τ·(g + λx)`, `x ← x − v`.
pub fn lars_step_follows_the_rule<F: Fixture>(f: &F) {
    check_any_rule(f, lars(), "LARS");
}

/// Muon: on each of [`ReplicaStore::hidden_matrices`], momentum, Nesterov's look-ahead and
/// five Newton–Schulz iterations, scaled by `√max(1, fan_out/fan_in)`; AdamW with its own rate
/// on every other coordinate.
pub fn muon_step_follows_the_rule<F: Fixture>(f: &F) {
    check_any_rule(f, muon(), "Muon");
}

/// Adam's, LARS's and Muon's state (moments, step counts, momentum) belongs to its row: after rows with
/// different histories are mixed, averaged, block-copied, fully copied and added a message, each
/// row's next step is the rule applied to its new parameters and its own, untouched state.
pub fn adam_and_lars_state_is_per_row_and_never_mixed<F: Fixture>(f: &F) {
    let workers = 6;
    let gs = first_gradients(f, workers, 2);
    for (opt, name) in [(adam(0.0), "Adam"), (lars(), "LARS"), (muon(), "Muon")] {
        let mut s = f.store(workers, &opt);
        let p = s.num_params();
        let layout = Layout::of(&s);
        let r = s.add_rows(1);
        let g0 = s.request_gradient(0);
        let g1 = s.request_gradient(1);
        let mut x: Vec<Vec<f64>> = read_all(f, &s);
        let mut st = vec![RuleState::new(p); s.rows()];
        // Histories: row 0 takes two steps of g1 at rate 0.5; row k takes 1 + k mod 2 steps of
        // g0 at rate 0.1.
        let mut step = |s: &mut F::Store, row: usize, g: GradId, gv: &[f64], lr: f64| {
            s.apply_gradient(row, g, lr);
            any_rule_step(&opt, &layout, &mut x[row], &mut st[row], gv, lr);
        };
        for _ in 0..2 {
            step(&mut s, 0, g1, &gs[1], 0.5);
        }
        for row in (1..workers).chain([r]) {
            for _ in 0..1 + row % 2 {
                step(&mut s, row, g0, &gs[0], 0.1);
            }
        }
        for (row, want) in x.iter().enumerate() {
            assert_close(
                format!("{name}: row {row} after its history"),
                &f.read_row(&s, row),
                want,
                f.tolerance(),
            );
        }
        let m = s.new_msg(&[(Slot::Row(0), 1.0)]);
        s.mix(1, &[(Slot::Row(1), 0.5), (Slot::Row(0), 0.5)]);
        s.average(&[2, 0]);
        s.copy_block(3, 0, blocks(p, 2)[0].clone());
        s.mix(4, &[(Slot::Row(4), 1.0), (Slot::Msg(m), 0.5)]);
        s.copy_block(r, 0, 0..p);
        s.release_msg(m);
        for (row, op) in [
            (0, "average (source)"),
            (1, "mix"),
            (2, "average"),
            (3, "copy_block"),
            (4, "adding a message"),
            (5, "nothing"),
            (r, "a full copy_block"),
        ] {
            let mut want = f.read_row(&s, row);
            let mut state = st[row].clone();
            s.apply_gradient(row, g0, 0.1);
            any_rule_step(&opt, &layout, &mut want, &mut state, &gs[0], 0.1);
            assert_close(
                format!("{name}: the step after {op} (row {row}), with the row's own state"),
                &f.read_row(&s, row),
                &want,
                f.tolerance(),
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Mixing and messages.

/// `mix(dst, terms)` sets `dst` to `Σ weight · source` over rows and messages (a source may
/// appear twice), leaves every other row, and scales a row with a single term.
pub fn mix_is_the_linear_combination<F: Fixture>(f: &F) {
    let tol = f.tolerance();
    let mut s = f.store(WORKERS, &plain());
    let r = s.add_rows(1);
    spread(f, &mut s);
    let x = read_all(f, &s);
    let m = s.new_msg(&[(Slot::Row(1), 0.5), (Slot::Row(r), 0.5)]);
    let mv = lin(&[(&x[1], 0.5), (&x[r], 0.5)]);
    s.mix(
        3,
        &[
            (Slot::Row(0), 0.5),
            (Slot::Row(1), -0.25),
            (Slot::Msg(m), 2.0),
            (Slot::Row(0), 0.125),
        ],
    );
    let want3 = lin(&[(&x[0], 0.625), (&x[1], -0.25), (&mv, 2.0)]);
    assert_close("mix of rows and a message", &f.read_row(&s, 3), &want3, tol);
    assert_untouched("mix into row 3", f, &s, &x, &[3]);
    s.mix(2, &[(Slot::Row(2), -1.5)]);
    let want2 = lin(&[(&x[2], -1.5)]);
    assert_close("scaling a row", &f.read_row(&s, 2), &want2, tol);
    s.mix(r, &[(Slot::Msg(m), 1.0), (Slot::Row(2), 1.0)]);
    assert_close(
        "mix into an added row",
        &f.read_row(&s, r),
        &lin(&[(&mv, 1.0), (&want2, 1.0)]),
        tol,
    );
    s.mix(0, &[(Slot::Row(1), 1.0)]);
    assert_close("mix of one row, weight 1", &f.read_row(&s, 0), &x[1], tol);
    s.release_msg(m);
}

/// `mix` is atomic: a term reading the destination reads it as it was, wherever it stands in
/// the list and however often.
pub fn mix_is_atomic<F: Fixture>(f: &F) {
    let tol = f.tolerance();
    let mut s = f.store(WORKERS, &plain());
    spread(f, &mut s);
    let x = read_all(f, &s);
    s.mix(0, &[(Slot::Row(1), 0.5), (Slot::Row(0), 0.5)]);
    assert_close(
        "mix(0, [row 1, row 0])",
        &f.read_row(&s, 0),
        &lin(&[(&x[1], 0.5), (&x[0], 0.5)]),
        tol,
    );
    s.mix(
        1,
        &[
            (Slot::Row(1), 2.0),
            (Slot::Row(2), 1.0),
            (Slot::Row(1), -1.0),
        ],
    );
    assert_close(
        "mix(1, [2·row 1, row 2, −row 1])",
        &f.read_row(&s, 1),
        &lin(&[(&x[1], 1.0), (&x[2], 1.0)]),
        tol,
    );
    let m = s.new_msg(&[(Slot::Row(3), 0.25)]);
    s.mix(3, &[(Slot::Row(3), 1.0), (Slot::Msg(m), 1.0)]);
    assert_close(
        "adding a message into a row",
        &f.read_row(&s, 3),
        &lin(&[(&x[3], 1.25)]),
        tol,
    );
    assert_same("a row no mix wrote", &f.read_row(&s, 2), &x[2]);
    s.release_msg(m);
}

/// `new_msg` holds `Σ weight · source` as of the instant it was taken — a copy of a row, a scaled
/// row, a combination, a copy or combination of another message — whatever is written to rows
/// afterwards.
pub fn messages_are_snapshots<F: Fixture>(f: &F) {
    let tol = f.tolerance();
    let mut s = f.store(WORKERS, &optimizer(0.5, false, 0.0));
    let scratch = s.add_rows(1);
    spread(f, &mut s);
    let x = read_all(f, &s);
    let p = s.num_params();
    let copy = s.new_msg(&[(Slot::Row(0), 1.0)]);
    let comb = s.new_msg(&[(Slot::Row(1), 0.5), (Slot::Row(2), -2.0)]);
    let of_msg = s.new_msg(&[(Slot::Msg(copy), 1.0)]);
    let mixed = s.new_msg(&[(Slot::Msg(copy), 0.5), (Slot::Row(1), 0.5)]);
    let scaled = s.new_msg(&[(Slot::Row(2), -0.5)]);
    // Every kind of write to the rows the messages read.
    let g = s.request_gradient(3);
    s.apply_gradient(0, g, 0.3);
    s.apply_gradient_block(1, g, 0.3, 0..p / 2);
    s.mix(2, &[(Slot::Row(2), 3.0)]);
    s.copy_block(0, 3, p / 2..p);
    s.average(&[1, 3]);
    s.mix(1, &[(Slot::Msg(comb), 1.0), (Slot::Row(1), 1.0)]);
    for (m, want, what) in [
        (copy, x[0].clone(), "a copy of a row"),
        (comb, lin(&[(&x[1], 0.5), (&x[2], -2.0)]), "a combination"),
        (of_msg, x[0].clone(), "a copy of a message"),
        (
            mixed,
            lin(&[(&x[0], 0.5), (&x[1], 0.5)]),
            "a message and a row",
        ),
        (scaled, lin(&[(&x[2], -0.5)]), "a scaled row"),
    ] {
        assert_close(
            format!("{what}, read after its sources were written"),
            &read_msg(f, &mut s, scratch, m),
            &want,
            tol,
        );
    }
    for m in [copy, comb, of_msg, mixed, scaled] {
        s.release_msg(m);
    }
}

/// Releasing a message leaves the messages made from it, and the rows.
pub fn released_messages_leave_the_others<F: Fixture>(f: &F) {
    let tol = f.tolerance();
    let mut s = f.store(WORKERS, &plain());
    let scratch = s.add_rows(1);
    spread(f, &mut s);
    let x = read_all(f, &s);
    let first = s.new_msg(&[(Slot::Row(0), 1.0)]);
    let copy = s.new_msg(&[(Slot::Msg(first), 1.0)]);
    let double = s.new_msg(&[(Slot::Msg(first), 2.0)]);
    let other = s.new_msg(&[(Slot::Row(1), 1.0)]);
    s.release_msg(first);
    s.mix(0, &[(Slot::Row(0), -1.0)]);
    s.release_msg(other);
    assert_untouched("releasing messages", f, &s, &x, &[0]);
    assert_close(
        "a copy of a released message",
        &read_msg(f, &mut s, scratch, copy),
        &x[0],
        tol,
    );
    s.release_msg(copy);
    assert_close(
        "twice a released message, after its copy was released too",
        &read_msg(f, &mut s, scratch, double),
        &lin(&[(&x[0], 2.0)]),
        tol,
    );
    s.release_msg(double);
}

/// On a store that computes, [`ReplicaStore::msg_values`] reads a message's values back as the
/// combination it holds, and [`ReplicaStore::msg_from_values`] makes a message that reads (by a
/// mix) as the values given, up to the store's precision; neither touches a row. What a
/// compressor, or Streaming DiLoCo's quantized outer gradients, rely on.
pub fn message_values_read_back_and_write<F: Fixture>(f: &F) {
    let tol = f.tolerance();
    let mut s = f.store(WORKERS, &plain());
    if !s.computes() {
        return;
    }
    let scratch = s.add_rows(1);
    spread(f, &mut s);
    let x = read_all(f, &s);
    let m = s.new_msg(&[(Slot::Row(1), 1.0), (Slot::Row(2), -1.0)]);
    let values = s.msg_values(m);
    assert_close(
        "msg_values of a combination",
        &values,
        &lin(&[(&x[1], 1.0), (&x[2], -1.0)]),
        tol,
    );
    let written: Vec<f64> = values
        .iter()
        .enumerate()
        .map(|(k, v)| (v * 0.5).round() + k as f64 / 4.0)
        .collect();
    let w = s.msg_from_values(&written);
    assert_untouched("reading and writing message values", f, &s, &x, &[]);
    assert_close(
        "a message written from values, read by a mix",
        &read_msg(f, &mut s, scratch, w),
        &written,
        tol,
    );
    assert_close(
        "a message written from values, read back",
        &s.msg_values(w),
        &written,
        tol,
    );
    s.release_msg(m);
    s.release_msg(w);
}

// ---------------------------------------------------------------------------------------------
// Block copies and averages.

/// `copy_block(dst, src, block)` copies exactly the coordinates `block` of `src` into `dst`, and
/// nothing else: the rest of `dst`, `src` and every other row are unchanged; a copy onto itself
/// or of an empty block changes nothing; added rows copy like rows.
pub fn copy_block_copies_only_its_block<F: Fixture>(f: &F) {
    let mut s = f.store(WORKERS, &plain());
    let r = s.add_rows(1);
    spread(f, &mut s);
    let p = s.num_params();
    let parts = blocks(p, 3);
    let mut want = read_all(f, &s);
    let copy =
        |s: &mut F::Store, want: &mut [Vec<f64>], dst: usize, src: usize, b: Range<usize>| {
            s.copy_block(dst, src, b.clone());
            let from = want[src][b.clone()].to_vec();
            want[dst][b.clone()].copy_from_slice(&from);
            for (row, w) in want.iter().enumerate() {
                assert_same(
                    format!("row {row} after copy_block({dst}, {src}, {b:?})"),
                    &f.read_row(s, row),
                    w,
                );
            }
        };
    copy(&mut s, &mut want, 2, 0, parts[1].clone());
    copy(&mut s, &mut want, r, 1, parts[2].clone());
    copy(&mut s, &mut want, 3, r, parts[0].clone());
    copy(&mut s, &mut want, 1, 1, 0..p);
    copy(&mut s, &mut want, 0, 3, parts[1].start..parts[1].start);
    copy(&mut s, &mut want, 0, 2, 0..p);
}

/// `average(rows)` sets every listed row to their mean (atomically: the mean of the values
/// before) and leaves the others; the sum of the listed rows is kept; averaging one row leaves
/// it.
pub fn average_sets_rows_to_their_mean<F: Fixture>(f: &F) {
    let tol = f.tolerance();
    let mut s = f.store(WORKERS, &plain());
    let r = s.add_rows(1);
    spread(f, &mut s);
    let x = read_all(f, &s);
    s.average(&[0, 2, r]);
    let mean = lin(&[(&x[0], 1.0 / 3.0), (&x[2], 1.0 / 3.0), (&x[r], 1.0 / 3.0)]);
    for row in [0, 2, r] {
        assert_close(
            format!("averaged row {row}"),
            &f.read_row(&s, row),
            &mean,
            tol,
        );
    }
    let sum = lin(&[
        (&f.read_row(&s, 0), 1.0),
        (&f.read_row(&s, 2), 1.0),
        (&f.read_row(&s, r), 1.0),
    ]);
    assert_close(
        "the sum of the averaged rows",
        &sum,
        &lin(&[(&x[0], 1.0), (&x[2], 1.0), (&x[r], 1.0)]),
        tol,
    );
    assert_untouched(
        "average of rows 0, 2 and an added row",
        f,
        &s,
        &x,
        &[0, 2, r],
    );
    s.average(&[1]);
    assert_close("the average of one row", &f.read_row(&s, 1), &x[1], tol);
    s.average(&[3, 1]);
    let mean13 = lin(&[(&x[1], 0.5), (&x[3], 0.5)]);
    assert_close("average(3, 1): row 1", &f.read_row(&s, 1), &mean13, tol);
    assert_close("average(3, 1): row 3", &f.read_row(&s, 3), &mean13, tol);
}

// ---------------------------------------------------------------------------------------------
// Evaluation and measures.

/// `evaluate()` is the model of the worker rows' mean, `evaluate_mix` with weights `1/n` on the
/// workers; it is the same when asked twice.
pub fn evaluate_is_the_mean_of_the_workers<F: Fixture>(f: &F) {
    let tol = f.tolerance();
    let mut s = f.store(WORKERS, &plain());
    s.add_rows(1);
    spread(f, &mut s);
    let e = s.evaluate();
    let again = s.evaluate();
    assert_close_scalar("evaluate() twice", again.loss, e.loss, tol);
    assert_accuracy("evaluate() twice", again.accuracy, e.accuracy);
    let terms: Vec<(usize, f64)> = (0..WORKERS).map(|w| (w, 1.0 / WORKERS as f64)).collect();
    let mix = s.evaluate_mix(&terms);
    assert!(e.loss.is_finite(), "evaluate(): loss {}", e.loss);
    assert_close_scalar(
        "evaluate() against evaluate_mix of the mean",
        e.loss,
        mix.loss,
        tol,
    );
    assert_accuracy(
        "evaluate() against evaluate_mix of the mean",
        e.accuracy,
        mix.accuracy,
    );
}

/// `evaluate_mix(terms)` evaluates the model `Σ weight · row` (as if mixed into a row), and
/// `evaluate_rows(rows, scales)` evaluates each `scales[k] · row[rows[k]]`.
pub fn evaluate_mix_is_the_model_of_the_combination<F: Fixture>(f: &F) {
    let tol = f.tolerance();
    let mut s = f.store(WORKERS, &plain());
    let r = s.add_rows(1);
    spread(f, &mut s);
    let terms = [(0, 0.5), (r, 0.25), (2, 0.25)];
    let e = s.evaluate_mix(&terms);
    let slots: Vec<(Slot, f64)> = terms.iter().map(|&(row, w)| (Slot::Row(row), w)).collect();
    s.mix(3, &slots);
    let mixed = s.evaluate_mix(&[(3, 1.0)]);
    assert_close_scalar(
        "evaluate_mix against the mixed row",
        e.loss,
        mixed.loss,
        tol,
    );
    assert_accuracy(
        "evaluate_mix against the mixed row",
        e.accuracy,
        mixed.accuracy,
    );
    let rows = [1, r, 3];
    let scales = [1.0, 0.5, 2.0];
    for (evals, scaled) in [
        (s.evaluate_rows(&rows, Some(&scales)), true),
        (s.evaluate_rows(&rows, None), false),
    ] {
        assert_eq!(
            evals.len(),
            rows.len(),
            "evaluate_rows: one evaluation per row"
        );
        for (k, ev) in evals.iter().enumerate() {
            let scale = if scaled { scales[k] } else { 1.0 };
            let want = s.evaluate_mix(&[(rows[k], scale)]);
            let what = format!("evaluate_rows, row {} at scale {scale}", rows[k]);
            assert_close_scalar(&what, ev.loss, want.loss, tol);
            assert_accuracy(&what, ev.accuracy, want.accuracy);
        }
    }
}

/// `consensus_distance(scales)` is `(1/n) Σ_i ‖s_i·x_i − z̄‖²` over the worker rows, with
/// `z̄ = (1/n) Σ_i s_i·x_i` (all `s_i = 1` for `None`); added rows are not part of it, and it
/// is 0 once the workers are averaged.
pub fn consensus_distance_is_the_spread_of_the_workers<F: Fixture>(f: &F) {
    let tol = f.tolerance();
    let mut s = f.store(WORKERS, &plain());
    s.add_rows(1);
    spread(f, &mut s);
    let x = read_all(f, &s);
    let want = |scales: &[f64]| {
        let n = WORKERS as f64;
        let z: Vec<Vec<f64>> = (0..WORKERS).map(|i| lin(&[(&x[i], scales[i])])).collect();
        let terms: Vec<(&[f64], f64)> = z.iter().map(|v| (v.as_slice(), 1.0 / n)).collect();
        let mean = lin(&terms);
        z.iter()
            .map(|v| {
                v.iter()
                    .zip(&mean)
                    .map(|(a, b)| (a - b) * (a - b))
                    .sum::<f64>()
            })
            .sum::<f64>()
            / n
    };
    let ones = [1.0; WORKERS];
    let cd = s.consensus_distance(None);
    assert!(cd > 0.0, "consensus distance of distinct rows: {cd}");
    assert_close_scalar("consensus_distance(None)", cd, want(&ones), tol);
    assert_close_scalar(
        "consensus_distance(all ones) against None",
        s.consensus_distance(Some(&ones)),
        cd,
        tol,
    );
    let scales = [1.0, 0.5, 2.0, 1.5];
    assert_close_scalar(
        "consensus_distance with scales",
        s.consensus_distance(Some(&scales)),
        want(&scales),
        tol,
    );
    let all: Vec<usize> = (0..WORKERS).collect();
    s.average(&all);
    let after = s.consensus_distance(None);
    assert!(
        after.abs() <= tol * cd.max(1.0),
        "consensus distance after averaging every worker: {after}"
    );
}

/// `suboptimality` is either unknown (`None`) for every model or known for every one; then it is
/// not negative, and `None` terms mean the workers' average.
pub fn suboptimality_is_consistent<F: Fixture>(f: &F) {
    let tol = f.tolerance();
    let mut s = f.store(WORKERS, &plain());
    let r = s.add_rows(1);
    spread(f, &mut s);
    let terms: Vec<(usize, f64)> = (0..WORKERS).map(|w| (w, 1.0 / WORKERS as f64)).collect();
    let avg = s.suboptimality(None);
    let mean = s.suboptimality(Some(&terms));
    let row = s.suboptimality(Some(&[(r, 1.0)]));
    match (avg, mean, row) {
        (None, None, None) => {}
        (Some(avg), Some(mean), Some(row)) => {
            assert_close_scalar(
                "suboptimality(None) against the workers' mean",
                avg,
                mean,
                tol,
            );
            for v in [avg, row] {
                assert!(v >= -tol * v.abs().max(1.0), "negative suboptimality {v}");
            }
        }
        other => panic!("suboptimality known for some models and not others: {other:?}"),
    }
}

/// `take_train_loss` is the mean loss of the minibatches whose gradients were computed since the
/// last call, and NaN when none was.
pub fn train_loss_is_the_mean_since_the_last_take<F: Fixture>(f: &F) {
    let tol = f.tolerance();
    let mut a = f.store(WORKERS, &plain());
    let nan = a.take_train_loss();
    assert!(nan.is_nan(), "training loss of a fresh store: {nan}");
    let g0 = a.request_gradient(0);
    a.apply_gradient(0, g0, 0.1);
    let l0 = a.take_train_loss();
    assert!(l0.is_finite(), "training loss after one gradient: {l0}");
    let again = a.take_train_loss();
    assert!(again.is_nan(), "training loss taken twice: {again}");
    let g1 = a.request_gradient(1);
    a.apply_gradient(1, g1, 0.1);
    let l1 = a.take_train_loss();
    let mut b = f.store(WORKERS, &plain());
    let h0 = b.request_gradient(0);
    let h1 = b.request_gradient(1);
    b.apply_gradient(0, h0, 0.1);
    b.apply_gradient(1, h1, 0.1);
    assert_close_scalar(
        "training loss of two gradients, against the mean of each alone",
        b.take_train_loss(),
        (l0 + l1) / 2.0,
        tol,
    );
}

/// Gradient and message handles are never reused, even after release.
pub fn handles_are_never_reused<F: Fixture>(f: &F) {
    let mut s = f.store(WORKERS, &plain());
    let mut grads = BTreeSet::new();
    let mut msgs = BTreeSet::new();
    let mut grad =
        |id: GradId| assert!(grads.insert(id), "gradient handle {id:?} handed out twice");
    let mut msg = |id: MsgId| assert!(msgs.insert(id), "message handle {id:?} handed out twice");
    for _ in 0..3 {
        let a = s.request_gradient(0);
        grad(a);
        let b = s.request_gradient_scaled(1, 0.5);
        grad(b);
        s.release_gradient(a);
        let c = s.request_gradient(2);
        grad(c);
        let mean = s.mean_gradient(&[b, c]);
        grad(mean);
        s.apply_gradient(3, mean, 0.01);
        s.release_gradient(mean);
        let m1 = s.new_msg(&[(Slot::Row(0), 1.0)]);
        msg(m1);
        let m2 = s.new_msg(&[(Slot::Msg(m1), 1.0)]);
        msg(m2);
        s.release_msg(m1);
        let m3 = s.new_msg(&[(Slot::Msg(m2), 0.5), (Slot::Row(1), 0.5)]);
        msg(m3);
        s.release_msg(m2);
        s.release_msg(m3);
    }
}

// ---------------------------------------------------------------------------------------------
// State (batch norm's running statistics).

/// [`ReplicaStore::state`] is a suffix of the row: it ends at `num_params()`, and leaves at
/// least one trainable coordinate; on [`Fixture::stateful_store`] it is not empty.
pub fn state_is_a_suffix<F: Fixture>(f: &F) {
    let s = f.store(WORKERS, &plain());
    let st = s.state();
    assert_eq!(st.end, s.num_params(), "the state ends the row");
    assert!(st.start > 0, "a row has trainable coordinates");
    if let Some(s) = f.stateful_store(WORKERS) {
        let st = s.state();
        assert_eq!(st.end, s.num_params(), "the state ends the row");
        assert!(
            st.start > 0 && !st.is_empty(),
            "the stateful store's state {st:?} of {} coordinates",
            s.num_params()
        );
    }
}

/// A gradient's state change reaches only the row that computed it: applied to worker 0's row
/// it moves the state; applied to rows 1 and an added row (equal to row 0 before), it moves their
/// trainable coordinates exactly as row 0's and leaves their state exactly as it was. Applied to
/// its own row again, the state moves by the same change again.
pub fn gradient_state_reaches_only_the_rows_that_computed_it<F: Fixture>(f: &F) {
    let Some(mut s) = f.stateful_store(WORKERS) else {
        return;
    };
    let tol = f.tolerance();
    let st = s.state();
    let t = st.start;
    let r = s.add_rows(1);
    let x = f.read_row(&s, 0);
    let g = s.request_gradient(0);
    for row in [0, 1, r] {
        s.apply_gradient(row, g, 0.1);
    }
    let x0 = f.read_row(&s, 0);
    let delta = sub(&x0[t..], &x[t..]);
    assert!(
        delta.iter().any(|d| *d != 0.0),
        "the training pass moved no state coordinate"
    );
    for row in [1, r] {
        let xr = f.read_row(&s, row);
        assert_close(
            format!("the trainable step on row {row}, against the computing row's"),
            &xr[..t],
            &x0[..t],
            tol,
        );
        assert_same(
            format!("the state of row {row}, which did not compute the gradient"),
            &xr[t..],
            &x[t..],
        );
    }
    s.apply_gradient(0, g, 0.0);
    let again = f.read_row(&s, 0);
    assert_close(
        "the state after the gradient applied twice to its own row",
        &again[t..],
        &lin(&[(&x0[t..], 1.0), (&delta, 1.0)]),
        tol,
    );
    assert_same(
        "the trainable coordinates after a step of rate 0",
        &again[..t],
        &x0[..t],
    );
}

/// A mean gradient's state change reaches the rows of its inputs' workers: the mean of worker
/// 0's and worker 1's gradients moves rows 0 and 1 (equal before) to the same state, the mean of
/// the two changes each alone makes, and leaves row 2's state as it was.
pub fn mean_gradient_state_reaches_its_inputs_rows<F: Fixture>(f: &F) {
    let Some(mut s) = f.stateful_store(WORKERS) else {
        return;
    };
    let tol = f.tolerance();
    let t = s.state().start;
    let x = f.read_row(&s, 0);
    // Each input's own change, measured on its own row of a second store.
    let mut alone = f.stateful_store(WORKERS).expect("a second stateful store");
    let ga = alone.request_gradient(0);
    let gb = alone.request_gradient(1);
    alone.apply_gradient(0, ga, 0.0);
    alone.apply_gradient(1, gb, 0.0);
    let d0 = sub(&f.read_row(&alone, 0)[t..], &x[t..]);
    let d1 = sub(&f.read_row(&alone, 1)[t..], &x[t..]);
    let g0 = s.request_gradient(0);
    let g1 = s.request_gradient(1);
    let m = s.mean_gradient(&[g0, g1]);
    for row in [0, 1, 2] {
        s.apply_gradient(row, m, 0.1);
    }
    let want = lin(&[(&x[t..], 1.0), (&d0, 0.5), (&d1, 0.5)]);
    for row in [0, 1] {
        assert_close(
            format!("the state of input row {row} after the mean"),
            &f.read_row(&s, row)[t..],
            &want,
            tol,
        );
    }
    let x2 = f.read_row(&s, 2);
    assert_same("the state of row 2, no input's", &x2[t..], &x[t..]);
    assert_close(
        "the trainable step on row 2, against row 0's",
        &x2[..t],
        &f.read_row(&s, 0)[..t],
        tol,
    );
}

/// A scaled request's state change is in the row's units (push-sum): with row 0 holding
/// `x = w·z` (`w = 1/4`) and the gradient requested at `1/w`, applying it leaves `x / w` with the
/// state that the same pass gives `z` on a row holding `z` itself, `z + Δ(z)`.
pub fn scaled_request_state_is_in_the_rows_units<F: Fixture>(f: &F) {
    let Some(mut s) = f.stateful_store(WORKERS) else {
        return;
    };
    let tol = f.tolerance();
    let t = s.state().start;
    let w = 0.25;
    s.mix(0, &[(Slot::Row(0), w)]);
    let g = s.request_gradient_scaled(0, 1.0 / w);
    s.apply_gradient(0, g, 0.0);
    let got: Vec<f64> = f.read_row(&s, 0)[t..].iter().map(|v| v / w).collect();

    let mut plain_row = f.stateful_store(WORKERS).expect("a second stateful store");
    let h = plain_row.request_gradient(0);
    plain_row.apply_gradient(0, h, 0.0);
    let want = f.read_row(&plain_row, 0);
    assert!(
        want[t..] != f.read_row(&f.stateful_store(WORKERS).unwrap(), 0)[t..],
        "the training pass moved no state coordinate"
    );
    assert_close(
        "the de-biased state x/w after a request at 1/w",
        &got,
        &want[t..],
        tol,
    );
}
