//! `[optimizer.schedule] progress = "global" | "node"`, worked out by hand.
//!
//! 3 workers whose steps take 10, 10 and 30 ms (worker 2 slowed 3×), a fast network
//! (100 Gbit/s, 1 µs), plain SGD at 0.1 with a step schedule that divides the rate by 10 at
//! 2 steps (`unit = "steps"`, `milestones = [2.0]`, `gamma = 0.1`), and a run of 60.5 ms. Every
//! optimizer step is logged by the test store with the rate it was given.
//!
//! A rate is read before the step is counted (as the LAP-SGD reference reads its counter before
//! incrementing it). AD-PSGD runs on a star around worker 0, whose averagings with its leaves
//! make its k-th step end 2k µs after k·10 ms; so in each round worker 1 applies before worker
//! 0, and at 30 and 60 ms worker 2 (its step scheduled earliest) before both.
//!
//! - `global`: progress = all steps so far / 3. At 10 ms: w1 0/3, w0 1/3; at 20 ms: w1 2/3,
//!   w0 3/3; at 30 ms: w2 4/3, w1 5/3 (still 0.1), w0 6/3 = 2 (0.01); from 40 ms every step
//!   reads ≥ 7/3 (0.01), worker 2's second step at 60 ms included.
//! - `node`: a worker's own steps so far. Workers 0 and 1 read 0, 1, 2, … : 0.1, 0.1, then 0.01
//!   from their third step (30 ms). Worker 2 reads 0 at 30 ms and 1 at 60 ms: 0.1 both times.
//!
//! So the two differ at worker 1's step at 30 ms (node 0.01, global 0.1) and at worker 2's at
//! 60 ms (node 0.1, global 0.01), and agree elsewhere.

use crate::common;

use common::*;
use dasim_sim::algorithms::run_algorithm;
use dasim_sim::prelude::*;

fn schedule(progress: ScheduleProgress, unit: ScheduleUnit, milestone: f64) -> OptimizerConfig {
    OptimizerConfig {
        schedule: LrSchedule {
            kind: ScheduleKind::Step,
            unit,
            progress,
            milestones: vec![milestone],
            gamma: 0.1,
            ..Default::default()
        },
        ..optimizer(0.1, 0.0)
    }
}

/// Runs `kind` under `opt` and returns every optimizer step as `(ms, worker, row, rate)`.
fn run(kind: AlgorithmKind, opt: &OptimizerConfig) -> Vec<(u64, usize, usize, f64)> {
    opt.validate().unwrap();
    let topology = match kind {
        AlgorithmKind::AdPsgd(_) => TopologyConfig::Star {},
        _ => TopologyConfig::Complete {},
    };
    let cfg = AlgorithmConfig::from(kind);
    let mut store = Checked::new(ReferenceStore::new(
        Quadratic::new(16, 10.0, 0.1),
        3,
        opt.clone(),
        5,
    ));
    let times = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    {
        let mut world = world(
            &cfg,
            &cluster(3, &[(2, 3.0)]),
            &net(100.0, 1.0),
            topology,
            &mut store,
            opt,
            5,
        );
        world.set_metrics(&MetricsConfig {
            log_gradients: true,
            ..Default::default()
        });
        let mut log = GradLog(times.clone());
        run_algorithm(&cfg, &mut world, &stop_at(0.0605), &mut log).unwrap();
    }
    let times = times.borrow();
    let worker_of = |g: GradId| {
        store
            .log
            .iter()
            .find_map(|op| match *op {
                Op::Request { worker, grad } if grad == g => Some(worker),
                _ => None,
            })
            .expect("a requested gradient")
    };
    assert_eq!(times.len(), store.applications.len());
    store
        .applications
        .iter()
        .zip(&store.rates)
        .zip(times.iter())
        .map(|(((row, g, _), &lr), &(ms, row2))| {
            assert_eq!(*row, row2);
            (ms, worker_of(*g), *row, lr)
        })
        .collect()
}

/// The application times, from the gradient log (`(ms, row)`, in application order).
struct GradLog(std::rc::Rc<std::cell::RefCell<Vec<(u64, usize)>>>);

impl Observer for GradLog {
    fn on_eval(&mut self, _p: &dasim_sim::engine::EvalPoint) -> Result<(), String> {
        Ok(())
    }
    fn on_gradient(&mut self, r: &dasim_sim::record::GradientRecord) -> Result<(), String> {
        self.0
            .borrow_mut()
            .push((r.apply.as_nanos() / 1_000_000, r.row));
        Ok(())
    }
}

/// The rates of worker `w`'s own steps.
fn own(steps: &[(u64, usize, usize, f64)], w: usize) -> Vec<(u64, f64)> {
    steps
        .iter()
        .filter(|s| s.1 == w && s.2 == w)
        .map(|s| (s.0, s.3))
        .collect()
}

const HI: f64 = 0.1;
const LO: f64 = 0.1 * 0.1;

fn fast(rates: [f64; 6]) -> Vec<(u64, f64)> {
    (1..=6).map(|k| (10 * k as u64, rates[k - 1])).collect()
}

#[test]
fn adpsgd_node_progress_follows_each_workers_own_counter() {
    // Per-step averaging: the active workers' steps end a round trip after the passive ones',
    // which orders the timeline below.
    let kind = || {
        AlgorithmKind::AdPsgd(AdPsgdConfig {
            averaging: Averaging::PerStep,
            ..Default::default()
        })
    };
    let global = run(
        kind(),
        &schedule(ScheduleProgress::Global, ScheduleUnit::Steps, 2.0),
    );
    assert_eq!(own(&global, 0), fast([HI, HI, LO, LO, LO, LO]));
    assert_eq!(own(&global, 1), fast([HI, HI, HI, LO, LO, LO]));
    assert_eq!(own(&global, 2), vec![(30, HI), (60, LO)]);

    let node = run(
        kind(),
        &schedule(ScheduleProgress::Node, ScheduleUnit::Steps, 2.0),
    );
    assert_eq!(own(&node, 0), fast([HI, HI, LO, LO, LO, LO]));
    assert_eq!(own(&node, 1), fast([HI, HI, LO, LO, LO, LO]));
    assert_eq!(own(&node, 2), vec![(30, HI), (60, HI)]);

    // In epochs a node's progress is its steps over its share of the training set,
    // c · batch / (train size / n): the milestone of 2 steps is 2 · batch · 3 / train size
    // epochs, and the rates are the same.
    let store = ReferenceStore::new(Quadratic::new(16, 10.0, 0.1), 3, optimizer(0.1, 0.0), 5);
    let two_steps = 2.0 * store.batch_size() as f64 * 3.0 / store.train_size() as f64;
    let epochs = run(
        kind(),
        &schedule(ScheduleProgress::Node, ScheduleUnit::Epochs, two_steps),
    );
    assert_eq!(epochs, node);
}

#[test]
fn dasgd_node_progress_follows_the_counter_of_the_replica_it_updates() {
    // Every model applies every worker's gradient; under "node" the rate is that of the model's
    // owner, whichever worker computed the gradient: in application order, 0.1 while fewer than
    // 2 of the owner's own gradients have been applied to its model, 0.01 after.
    let kind = || AlgorithmKind::Dasgd(Default::default());
    let node = run(
        kind(),
        &schedule(ScheduleProgress::Node, ScheduleUnit::Steps, 2.0),
    );
    let mut own_steps = [0u32; 3];
    for s in &node {
        let expect = if own_steps[s.2] < 2 { HI } else { LO };
        assert_eq!(s.3, expect, "{s:?}");
        if s.1 == s.2 {
            own_steps[s.2] += 1;
        }
    }
    // Worker 2's model takes its second own step at 60 ms: the gradients of workers 0 and 1
    // it applies between 40 and 60 ms get 0.1 under "node", 0.01 under "global".
    let between = |v: &[(u64, usize, usize, f64)]| -> Vec<f64> {
        v.iter()
            .filter(|s| s.2 == 2 && s.1 != 2 && (40..60).contains(&s.0))
            .map(|s| s.3)
            .collect()
    };
    let global = run(
        kind(),
        &schedule(ScheduleProgress::Global, ScheduleUnit::Steps, 2.0),
    );
    assert_eq!(between(&node), vec![HI; 4]);
    assert_eq!(between(&global), vec![LO; 4]);
}

#[test]
fn default_progress_is_global_and_left_out_of_a_written_scenario() {
    let opt = schedule(ScheduleProgress::Global, ScheduleUnit::Steps, 2.0);
    assert_eq!(
        OptimizerConfig::default().schedule.progress,
        ScheduleProgress::Global
    );
    let text = toml::to_string(&opt).unwrap();
    assert!(!text.contains("progress"), "{text}");
    let node = schedule(ScheduleProgress::Node, ScheduleUnit::Steps, 2.0);
    let text = toml::to_string(&node).unwrap();
    assert!(text.contains("progress = \"node\""), "{text}");
}

#[test]
fn algorithms_without_a_single_workers_update_refuse_node_progress() {
    let node = schedule(ScheduleProgress::Node, ScheduleUnit::Steps, 2.0);
    for kind in [
        AlgorithmKind::AllReduce(AllReduceConfig::default()),
        AlgorithmKind::Ps(PsConfig::default()),
    ] {
        let cfg = AlgorithmConfig::from(kind);
        let e = cfg.check_optimizer(&node, "algorithms[0]").unwrap_err();
        assert_eq!(e.path.to_string(), "optimizer.schedule.progress");
        assert!(
            e.to_string()
                .contains("cannot follow a node's own progress"),
            "{e}"
        );
        // The entry's own optimizer is named as the entry's.
        let own = cfg.clone().with_optimizer(node.clone());
        let e = own.check_optimizer(&node, "algorithms[0]").unwrap_err();
        assert_eq!(
            e.path.to_string(),
            "algorithms[0].optimizer.schedule.progress"
        );
    }
    for kind in [
        AlgorithmKind::AdPsgd(Default::default()),
        AlgorithmKind::Dasgd(Default::default()),
    ] {
        AlgorithmConfig::from(kind)
            .check_optimizer(&node, "algorithms[0]")
            .unwrap();
    }
    // Seconds are one clock for every worker.
    let e = schedule(ScheduleProgress::Node, ScheduleUnit::Seconds, 2.0)
        .validate()
        .unwrap_err();
    assert_eq!(e.path.to_string(), "optimizer.schedule.progress");
}
