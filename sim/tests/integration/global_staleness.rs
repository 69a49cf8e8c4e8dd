//! Global staleness, worked out by hand on a schedule small enough to follow: 3 workers whose
//! steps take 10, 20 and 30 ms (a 10 ms base step, workers 1 and 2 slowed 2× and 3×), a fast
//! network (100 Gbit/s, 1 µs: every message lands within a few µs), plain SGD, and a run of
//! 60.5 ms. Every applied gradient is logged; the test compares, for each algorithm, every
//! application: `(apply time in whole ms, worker, row, global staleness)`.
//!
//! The rule ([`dasim_sim::store::tracked`]): a global iteration is a gradient's first
//! application, anywhere; the global staleness of an application is the number of global
//! iterations after the read of the values the gradient was computed on, its own excluded.
//! Events at one instant are handled in the order they were scheduled, so at 20 ms worker 1's
//! step (scheduled at 0) completes before worker 0's second (scheduled at 10 ms); a worker that
//! starts its next step right after applying reads a model that has its own update and none of
//! the updates handled after it at that instant.
//!
//! In the comments, `w0@20` is worker 0's gradient first applied at 20 ms, and "read 10" the
//! read it was computed on.

use crate::common;

use common::*;
use dasim_sim::algorithms::{AlgorithmConfig, run_algorithm};
use dasim_sim::engine::EvalPoint;
use dasim_sim::prelude::*;
use dasim_sim::record::GradientRecord;

#[derive(Default)]
struct Log {
    gradients: Vec<GradientRecord>,
}

impl Observer for Log {
    fn on_eval(&mut self, _p: &EvalPoint) -> Result<(), String> {
        Ok(())
    }
    fn on_gradient(&mut self, r: &GradientRecord) -> Result<(), String> {
        self.gradients.push(*r);
        Ok(())
    }
}

/// Runs `kind` on the schedule (AD-PSGD on a star around worker 0, which is bipartite; every
/// other algorithm on the complete graph) and returns the outcome and every application as
/// `(ms, worker, row, global staleness)`.
fn run_kind(kind: AlgorithmKind) -> (Outcome, Vec<(u64, usize, usize, u64)>) {
    let topology = match kind {
        AlgorithmKind::AdPsgd(_) => TopologyConfig::Star {},
        _ => TopologyConfig::Complete {},
    };
    let cfg = AlgorithmConfig::from(kind);
    let cluster = cluster(3, &[(1, 2.0), (2, 3.0)]);
    let mut store = quadratic_store(3, 5);
    let opt = optimizer(0.05, 0.0);
    let mut world = world(
        &cfg,
        &cluster,
        &net(100.0, 1.0),
        topology,
        &mut store,
        &opt,
        5,
    );
    world.set_metrics(&MetricsConfig {
        log_gradients: true,
        ..Default::default()
    });
    let mut log = Log::default();
    let outcome = run_algorithm(&cfg, &mut world, &stop_at(0.0605), &mut log).unwrap();
    let rows = log
        .gradients
        .iter()
        .map(|g| {
            let ms = g.apply.as_nanos() / 1_000_000;
            (ms, g.worker, g.row, g.global_staleness)
        })
        .collect();
    (outcome, rows)
}

/// Every worker applies to its own row: `(ms, worker, global)` with row = worker.
fn own(v: &[(u64, usize, u64)]) -> Vec<(u64, usize, usize, u64)> {
    v.iter().map(|&(t, w, g)| (t, w, w, g)).collect()
}

#[test]
fn all_reduce_applies_one_fresh_mean_per_round() {
    // Rounds end at 30 and 60 ms (the slowest step, plus the ring's few µs). Each round's mean
    // is one global iteration, read when the round began and applied to the three rows before
    // any other gradient: 0 everywhere. The mean is measured at each row, attributed to the
    // row's worker (the ring finishes at rows 1, 2, 0 in that order).
    let (_, got) = run_kind(AlgorithmKind::AllReduce(AllReduceConfig::default()));
    assert_eq!(
        got,
        own(&[
            (30, 1, 0),
            (30, 2, 0),
            (30, 0, 0),
            (60, 1, 0),
            (60, 2, 0),
            (60, 0, 0)
        ])
    );
}

#[test]
fn local_sgd_counts_the_others_local_steps() {
    // H = 4 local steps, so no averaging before 60 ms (worker 2 has taken 2 steps by then);
    // worker 0 stops after 4 steps at 40 ms and waits for the averaging.
    //   w0@10 read 0: nothing before                                   0
    //   w1@20 read 0: w0@10                                            1
    //   w0@20 read 10: w1@20 (handled first at 20)                     1
    //   w2@30 read 0: w0@10, w1@20, w0@20                              3
    //   w0@30 read 20: w2@30                                           1
    //   w1@40 read 20 (before w0@20): w0@20, w2@30, w0@30              3
    //   w0@40 read 30: w1@40                                           1
    //   w2@60 read 30 (before w0@30): w0@30, w1@40, w0@40              3
    //   w1@60 read 40 (before w0@40): w0@40, w2@60                     2
    let (_, got) = run_kind(AlgorithmKind::LocalSgd(LocalSgdConfig::default()));
    assert_eq!(
        got,
        own(&[
            (10, 0, 0),
            (20, 1, 1),
            (20, 0, 1),
            (30, 2, 3),
            (30, 0, 1),
            (40, 1, 3),
            (40, 0, 1),
            (60, 2, 3),
            (60, 1, 2),
        ])
    );
}

#[test]
fn the_parameter_server_counts_server_updates_as_a_psgd_does() {
    // One shard (row 3). A gradient is read when the server serves the pull (a µs after the
    // worker's previous push was applied), applied when the push lands (a few µs after the
    // step): the server updates between, as Lian et al.'s τ. With one shard every gradient
    // application is a server update, so the global and row measures agree.
    //   w0@10 read 0: 0;  w1@20 read 0: w0@10: 1;  w0@20 read 10: w1@20: 1
    //   w2@30 read 0: w0@10, w1@20, w0@20: 3;      w0@30 read 20: w2@30: 1
    //   w1@40 read 20 (before w0@20): w0@20, w2@30, w0@30: 3;  w0@40 read 30: w1@40: 1
    //   w0@50 read 40: 0;  w2@60 read 30: w0@30, w1@40, w0@40, w0@50: 4
    //   w1@60 read 40: w0@40, w0@50, w2@60: 3;     w0@60 read 50: w2@60, w1@60: 2
    let (outcome, got) = run_kind(AlgorithmKind::Ps(PsConfig::default()));
    let want: Vec<_> = [
        (10, 0, 0),
        (20, 1, 1),
        (20, 0, 1),
        (30, 2, 3),
        (30, 0, 1),
        (40, 1, 3),
        (40, 0, 1),
        (50, 0, 0),
        (60, 2, 4),
        (60, 1, 3),
        (60, 0, 2),
    ]
    .iter()
    .map(|&(t, w, g)| (t, w, 3, g))
    .collect();
    assert_eq!(got, want);
    assert_eq!(
        outcome.record.all_global_staleness(),
        outcome.record.all_row_staleness()
    );
}

#[test]
fn d_psgd_counts_every_step_of_the_round_before() {
    // Synchronous gossip: a worker reads its model when it starts a step and applies the
    // gradient once it has mixed its neighbours' models of the same round. Worker 0 starts its
    // second step at 10 ms but applies it only at 30 ms, once worker 2's model arrived.
    //   w0@10 read 0: 0;  w1@20 read 0: w0@10: 1;  w2@30 read 0: w0@10, w1@20: 2
    //   w0@30 read 10: w1@20, w2@30: 2;  w1@40 read 20: w2@30, w0@30: 2
    //   w2@60 read 30: w0@30, w1@40: 2;  w0@60 read 30 (after w0@30): w1@40, w2@60: 2
    //   w1@60 read 40: w2@60, w0@60: 2
    let (_, got) = run_kind(AlgorithmKind::Dpsgd(DpsgdConfig::default()));
    assert_eq!(
        got,
        own(&[
            (10, 0, 0),
            (20, 1, 1),
            (30, 2, 2),
            (30, 0, 2),
            (40, 1, 2),
            (60, 2, 2),
            (60, 0, 2),
            (60, 1, 2),
        ])
    );
}

#[test]
fn ad_psgd_counts_every_update_of_the_global_iterate() {
    // On the star, worker 0 (the centre) steps every 10 ms, and the leaves every 20 and 30 ms;
    // both averaging modes give the same order of gradient applications (per-step mode's
    // averaging adds a few µs to worker 0's steps). Between a leaf's read and its application,
    // every other worker's steps count: T_k of the AD-PSGD paper.
    //   w0@10 read 0: 0;  w1@20 read 0: w0@10: 1;  w0@20 read 10: w1@20: 1
    //   w2@30 read 0: w0@10, w1@20, w0@20: 3;   w0@30 read 20: w2@30: 1
    //   w1@40 read 20: w0@20, w2@30, w0@30: 3;  w0@40 read 30: w1@40: 1;  w0@50 read 40: 0
    //   w2@60 read 30: w0@30, w1@40, w0@40, w0@50: 4
    //   w1@60 read 40: w0@40, w0@50, w2@60: 3;  w0@60 read 50: w2@60, w1@60: 2
    let want = own(&[
        (10, 0, 0),
        (20, 1, 1),
        (20, 0, 1),
        (30, 2, 3),
        (30, 0, 1),
        (40, 1, 3),
        (40, 0, 1),
        (50, 0, 0),
        (60, 2, 4),
        (60, 1, 3),
        (60, 0, 2),
    ]);
    for averaging in [Averaging::PerStep, Averaging::Thread] {
        let (_, got) = run_kind(AlgorithmKind::AdPsgd(AdPsgdConfig {
            averaging,
            ..Default::default()
        }));
        assert_eq!(got, want, "{averaging:?}");
    }
}

#[test]
fn sgp_gradients_are_stale_under_a_straggler() {
    // Synchronous SGP on the complete graph: a node mixes once both others' messages of its
    // iteration arrived. Worker 2 finishes iteration 0 at 30 ms, finds both messages there and
    // starts iteration 1 at once (read 30.000); workers 0 and 1 get its message a µs later and
    // start theirs at 30.001.
    //   w0@10 read 0: 0;  w1@20 read 0: w0@10: 1;  w2@30 read 0: w0@10, w1@20: 2
    //   w0@40 read 30.001: 0;  w1@50 read 30.001: w0@40: 1
    //   w2@60 read 30.000: w0@40, w1@50: 2
    // The per-row measure is 0 throughout: nothing writes a node's row while it computes.
    let (outcome, got) = run_kind(AlgorithmKind::Sgp(SgpConfig::default()));
    assert_eq!(
        got,
        own(&[
            (10, 0, 0),
            (20, 1, 1),
            (30, 2, 2),
            (40, 0, 0),
            (50, 1, 1),
            (60, 2, 2),
        ])
    );
    assert_eq!(outcome.record.all_row_staleness().max(), 0);
    assert!(outcome.record.all_global_staleness().mean() > 0.0);
    // Synchronous SGP mixes only messages of its own iteration: every step's oldest is 0. Six
    // mixing steps: iteration 0 at 30 ms and iteration 1 at 60 ms, at every node.
    let ages = outcome.record.mix_ages();
    assert_eq!((ages.count(), ages.max()), (6, 0), "{ages:?}");
}

#[test]
fn overlap_sgp_counts_the_steps_its_delay_lets_through() {
    // τ = 1: a node mixes whatever arrived and waits only for messages of iterations ≤ k − 1.
    //   w0@10 read 0: 0 (iteration 0 mixes at once; iteration 1 starts at 10)
    //   w1@20 read 0: w0@10: 1;  w0@20 read 10: w1@20: 1
    //   then w0 (iteration 2) waits for worker 2's message of iteration 0, sent at 30
    //   w2@30 read 0: w0@10, w1@20, w0@20: 3;  w1@40 read 20: w0@20, w2@30: 2
    //   w0@40 read 30.001: w1@40: 1;  w2@60 read 30.000: w1@40, w0@40: 2
    //   w1@60 read 40: w0@40, w2@60: 2 (then w0 waits for worker 2's iteration 1, sent at 60)
    let (outcome, got) = run_kind(AlgorithmKind::OverlapSgp(OverlapSgpConfig::default()));
    assert_eq!(
        got,
        own(&[
            (10, 0, 0),
            (20, 1, 1),
            (20, 0, 1),
            (30, 2, 3),
            (40, 1, 2),
            (40, 0, 1),
            (60, 2, 2),
            (60, 1, 2),
        ])
    );
    // Per mixing step, the age of the oldest message mixed in: one of the messages' ages, so
    // no more steps than messages and the same maximum. (Which messages a node mixes when
    // depends on Overlap-SGP's send rule; synchronous SGP's ages are worked out above.)
    let (steps, messages) = (outcome.record.mix_ages(), outcome.record.message_ages());
    assert!(steps.count() > 0 && steps.count() <= messages.count());
    assert_eq!(steps.max(), messages.max());
}

#[test]
fn dasgd_counts_each_gradient_once_though_every_model_applies_it() {
    // Every gradient is applied at its origin at once and at the two other models a µs later.
    // Its first application is the global iteration; the later ones count what was applied
    // anywhere since the read, their own gradient excluded.
    //   w0@10 read 0: at rows 0, 1, 2: 0 (only itself was applied)
    //   w1@20 read 0: at row 1: w0@10: 1; at rows 0 and 2 (20.001): w0@10, w0@20: 2
    //   w0@20 read 10: at rows 0, 1, 2: w1@20: 1
    //   w2@30 read 0: at row 2: w0@10, w1@20, w0@20: 3; at rows 0, 1: and w0@30: 4
    //   w0@30 read 20: w2@30: 1 everywhere
    //   w1@40 read 20: at row 1: w0@20, w2@30, w0@30: 3; elsewhere and w0@40: 4
    //   w0@40 read 30: w1@40: 1;  w0@50 read 40: 0
    //   w2@60 read 30: at row 2: w0@30, w1@40, w0@40, w0@50: 4; elsewhere and w1@60, w0@60: 6
    //   w1@60 read 40: at row 1: w0@40, w0@50, w2@60: 3; elsewhere and w0@60: 4
    //   w0@60 read 50: w2@60, w1@60: 2 everywhere
    let (_, got) = run_kind(AlgorithmKind::Dasgd(DasgdConfig::default()));
    let want = vec![
        (10, 0, 0, 0),
        (10, 0, 1, 0),
        (10, 0, 2, 0),
        (20, 1, 1, 1),
        (20, 0, 0, 1),
        (20, 1, 0, 2),
        (20, 0, 1, 1),
        (20, 1, 2, 2),
        (20, 0, 2, 1),
        (30, 2, 2, 3),
        (30, 0, 0, 1),
        (30, 2, 0, 4),
        (30, 2, 1, 4),
        (30, 0, 2, 1),
        (30, 0, 1, 1),
        (40, 1, 1, 3),
        (40, 0, 0, 1),
        (40, 1, 0, 4),
        (40, 0, 1, 1),
        (40, 1, 2, 4),
        (40, 0, 2, 1),
        (50, 0, 0, 0),
        (50, 0, 1, 0),
        (50, 0, 2, 0),
        (60, 2, 2, 4),
        (60, 1, 1, 3),
        (60, 0, 0, 2),
        (60, 2, 0, 6),
        (60, 2, 1, 6),
        (60, 1, 0, 4),
        (60, 1, 2, 4),
        (60, 0, 1, 2),
        (60, 0, 2, 2),
    ];
    assert_eq!(got, want);
}

#[test]
fn lap_sgd_counts_the_concurrent_processes_of_every_node() {
    // Two processes per node share its device: each step takes twice the node's step time
    // (20, 40, 60 ms), both processes read at the same instant, and the second to apply counts
    // the first. No averaging before 60 ms (H = 4).
    //   w0 (20) read 0: 0, 1
    //   w1 (40) read 0: w0@20 ×2: 2; and the first of w1: 3
    //   w0 (40) read 20 (one before, one after the second w0@20): w0@20, w1@40 ×2: 3;
    //     w1@40 ×2, the first w0@40: 3
    //   w2 (60) read 0: w0@20 ×2, w1@40 ×2, w0@40 ×2: 6; and the first of w2: 7
    //   w0 (60) read 40: the second w0@40, w2@60 ×2: 3; w2@60 ×2, the first w0@60: 3
    // LPP-SGD runs the same schedule (its processes take full steps until its pre-phase ends).
    let want = own(&[
        (20, 0, 0),
        (20, 0, 1),
        (40, 1, 2),
        (40, 1, 3),
        (40, 0, 3),
        (40, 0, 3),
        (60, 2, 6),
        (60, 2, 7),
        (60, 0, 3),
        (60, 0, 3),
    ]);
    let (_, got) = run_kind(AlgorithmKind::LapSgd(LapSgdConfig::default()));
    assert_eq!(got, want, "lap-sgd");
}
