//! Fault injection (`[[faults]]`): every kind changes a small run as worked out by hand, push-sum
//! accounts for the mass it loses, a crashed all-reduce worker stalls the run, and runs with
//! faults are deterministic.

use crate::common;

use dasim_sim::algorithms::{AlgorithmConfig, SgpConfig, run_algorithm};
use dasim_sim::engine::run_inspect;
use dasim_sim::fault::{FaultConfig, Faults, WorkerFault};
use dasim_sim::prelude::*;
use dasim_sim::record::{FaultEvent, FaultMark};

use common::*;

/// Parses `[[faults]]` entries from TOML.
fn faults(text: &str) -> Vec<FaultConfig> {
    #[derive(serde::Deserialize)]
    struct Doc {
        faults: Vec<FaultConfig>,
    }
    toml::from_str::<Doc>(text).expect("valid faults").faults
}

fn realize(text: &str, n: usize) -> Faults {
    Faults::new(&faults(text), n, &BuildEnv::new(11)).unwrap()
}

/// 1 byte per ns, no latency, no header: a message of 1,000 bytes posted at `t` lands at
/// `t + 1 µs`.
fn plain_net() -> NetworkConfig {
    let mut n = NetworkConfig::uniform(8.0, 0.0);
    n.header_bytes = 0;
    n
}

/// Sends one 1,000-byte message per `(time_ns, src, dst)` and records what lands, and the
/// crashes and rejoins it is told of.
struct Probe {
    sends: Vec<(u64, usize, usize)>,
    landed: Vec<(u64, usize, usize)>,
    dropped: Vec<(u64, usize, usize)>,
    lost: Vec<(u64, usize, usize)>,
    faults: Vec<(u64, WorkerFault)>,
}

#[derive(Clone, Copy, Debug)]
enum Ev {
    Send(usize),
    Land(usize, usize),
}

impl Probe {
    fn new(sends: &[(u64, usize, usize)]) -> Self {
        Probe {
            sends: sends.to_vec(),
            landed: Vec::new(),
            dropped: Vec::new(),
            lost: Vec::new(),
            faults: Vec::new(),
        }
    }
}

impl Algorithm for Probe {
    type Event = Ev;
    fn start(&mut self, cx: &mut Ctx<'_, '_, Ev>) {
        for (k, &(t, _, _)) in self.sends.iter().enumerate() {
            cx.at(SimTime::from_nanos(t), Ev::Send(k));
        }
    }
    fn handle(&mut self, e: Ev, cx: &mut Ctx<'_, '_, Ev>) {
        let now = cx.now().as_nanos();
        match e {
            Ev::Send(k) => {
                let (_, src, dst) = self.sends[k];
                let sent = cx.send(src, dst, 1000, Ev::Land(src, dst));
                if sent.lost.is_some() {
                    self.lost.push((now, src, dst));
                }
            }
            Ev::Land(src, dst) if !cx.deliverable(dst) => self.dropped.push((now, src, dst)),
            Ev::Land(src, dst) => self.landed.push((now, src, dst)),
        }
    }
    fn waiting(&self) -> Vec<String> {
        Vec::new()
    }
    fn on_fault(&mut self, f: WorkerFault, cx: &mut Ctx<'_, '_, Ev>) {
        self.faults.push((cx.now().as_nanos(), f));
    }
}

/// Runs the probe on 4 workers with the given faults; returns it and the outcome.
fn probe(sends: &[(u64, usize, usize)], text: &str) -> (Probe, Outcome) {
    let n = 4;
    let env = BuildEnv::new(11);
    let mut store = quadratic_store(n, 11);
    let opt = optimizer(0.05, 0.0);
    let mut world = World::new(
        Cluster::new(&cluster(n, &[]), &env).unwrap(),
        Network::new(&plain_net(), n, &env).unwrap(),
        Topology::build(&TopologyConfig::Ring {}, n, &env).unwrap(),
        &mut store,
        &opt,
        11,
    );
    world.set_faults(realize(text, n));
    let mut p = Probe::new(sends);
    let out = run(&mut p, &mut world, &stop_at(0.01), &mut Collect::default()).unwrap();
    (p, out)
}

const MS: u64 = 1_000_000;

#[test]
fn loss_with_probability_one_loses_every_message_of_its_link_only() {
    let sends = [(0, 0, 1), (MS, 0, 1), (0, 1, 0), (0, 2, 3)];
    let (p, out) = probe(
        &sends,
        r#"[[faults]]
kind = "loss"
probability = 1.0
links = ["0 -> 1"]"#,
    );
    assert_eq!(p.lost, vec![(0, 0, 1), (MS, 0, 1)]);
    assert_eq!(p.landed, vec![(1000, 1, 0), (1000, 2, 3)]);
    let f = out.faults.unwrap().stats;
    assert_eq!((f.lost, f.lost_link_down, f.duplicated), (2, 0, 0));
    // A lost message still left its sender: the network carried all four.
    assert_eq!(out.network.messages, 4);
    // The timeline marks each at its sender, when it was posted.
    let lost = |t: u64| FaultEvent {
        time: SimTime::from_nanos(t),
        mark: FaultMark::Lost,
        node: 0,
        peer: Some(1),
    };
    assert_eq!(out.record.fault_events, vec![lost(0), lost(MS)]);
}

#[test]
fn random_loss_is_the_same_realization_on_every_run() {
    let sends: Vec<(u64, usize, usize)> = (0..200).map(|k| (k * 10_000, 0, 1)).collect();
    let text = r#"[[faults]]
kind = "loss"
probability = 0.25"#;
    let (a, _) = probe(&sends, text);
    let (b, _) = probe(&sends, text);
    assert_eq!(a.lost, b.lost);
    // About a quarter lost (200 draws: within 5 standard deviations).
    assert!((25..=75).contains(&a.lost.len()), "{}", a.lost.len());
    // Another link's traffic does not change link 0 -> 1's realization.
    let mut more = sends.clone();
    more.extend((0..50).map(|k| (k * 7_000 + 3, 2, 3)));
    let (c, _) = probe(&more, text);
    let on01: Vec<_> = c.lost.iter().filter(|l| l.1 == 0).copied().collect();
    assert_eq!(on01, a.lost);
}

#[test]
fn a_link_down_window_loses_what_is_posted_inside_it() {
    // Every link of worker 1 is down over [1 ms, 2 ms).
    let sends = [
        (MS / 2, 0, 1),
        (3 * MS / 2, 0, 1),
        (3 * MS / 2, 1, 2),
        (3 * MS / 2, 2, 3),
        (2 * MS, 1, 0),
    ];
    let (p, out) = probe(
        &sends,
        r#"[[faults]]
kind = "link-down"
workers = [1]
start_s = 0.001
end_s = 0.002"#,
    );
    assert_eq!(p.lost, vec![(3 * MS / 2, 0, 1), (3 * MS / 2, 1, 2)]);
    assert_eq!(
        p.landed,
        vec![
            (MS / 2 + 1000, 0, 1),
            (3 * MS / 2 + 1000, 2, 3),
            (2 * MS + 1000, 1, 0)
        ]
    );
    assert_eq!(out.faults.unwrap().stats.lost_link_down, 2);
    let marks: Vec<_> = out
        .record
        .fault_events
        .iter()
        .map(|e| (e.time.as_nanos(), e.mark, e.node, e.peer))
        .collect();
    assert_eq!(
        marks,
        [
            (3 * MS / 2, FaultMark::LostLinkDown, 0, Some(1)),
            (3 * MS / 2, FaultMark::LostLinkDown, 1, Some(2)),
        ]
    );
}

#[test]
fn a_partition_cuts_the_links_between_groups() {
    let sends = [(0, 0, 1), (0, 1, 2), (0, 2, 0), (0, 3, 2)];
    let (p, _) = probe(
        &sends,
        r#"[[faults]]
kind = "link-down"
groups = [[0], [1, 2]]"#,
    );
    // Worker 3 is in no group: a group of its own.
    assert_eq!(p.lost, vec![(0, 0, 1), (0, 2, 0), (0, 3, 2)]);
    assert_eq!(p.landed, vec![(1000, 1, 2)]);
}

#[test]
fn a_duplicate_occupies_the_wire_but_is_delivered_once() {
    let (p, out) = probe(
        &[(0, 0, 1)],
        r#"[[faults]]
kind = "duplicate"
probability = 1.0"#,
    );
    assert_eq!(p.landed, vec![(1000, 0, 1)]);
    assert_eq!(out.network.messages, 2);
    assert_eq!(out.network.bytes, 2000);
    // The copy followed the original on 0's uplink: busy for 2 µs.
    assert_eq!(out.record.links[&(0, 1)].busy.as_nanos(), 2000);
    assert_eq!(out.faults.unwrap().stats.duplicated, 1);
    let marks: Vec<_> = out.record.fault_events.iter().map(|e| e.mark).collect();
    assert_eq!(marks, [FaultMark::Duplicated]);
}

#[test]
fn a_delay_lands_later_and_keeps_links_fifo() {
    // Only the first message is delayed (its window closes at 1 µs): 3 ms more. The second,
    // posted at 2 µs, would land at 3 µs but waits behind the first (links stay FIFO); 2 -> 3 is
    // not covered.
    let (p, out) = probe(
        &[(0, 0, 1), (2000, 0, 1), (2000, 2, 3)],
        r#"[[faults]]
kind = "delay"
mean_ms = 3.0
links = ["0 <-> 1"]
end_s = 0.000001"#,
    );
    assert_eq!(
        p.landed,
        vec![(3000, 2, 3), (3 * MS + 1000, 0, 1), (3 * MS + 1000, 0, 1)]
    );
    let f = out.faults.unwrap().stats;
    assert_eq!((f.delayed, f.delay_total.as_nanos()), (1, 3 * MS));
    assert_eq!(
        out.record.fault_events,
        [FaultEvent {
            time: SimTime::ZERO,
            mark: FaultMark::Delayed,
            node: 0,
            peer: Some(1),
        }]
    );
}

#[test]
fn a_random_delay_draws_from_its_distribution() {
    let sends: Vec<(u64, usize, usize)> = (0..100).map(|k| (k * 100_000, 0, 1)).collect();
    let (p, out) = probe(
        &sends,
        r#"[[faults]]
kind = "delay"
distribution = "exponential"
mean_ms = 0.01"#,
    );
    let f = out.faults.unwrap().stats;
    assert_eq!(f.delayed, 100);
    let mean_ns = f.delay_total.as_nanos() as f64 / 100.0;
    assert!((5_000.0..20_000.0).contains(&mean_ns), "{mean_ns}");
    assert_eq!(p.landed.len(), 100);
}

#[test]
fn a_crashed_worker_drops_what_lands_and_rejoins() {
    // Worker 1 is down over [1 ms, 3 ms).
    let sends = [
        (MS / 2, 0, 1),
        (3 * MS / 2, 0, 1),
        (3 * MS - 500, 0, 1),
        (4 * MS, 0, 1),
    ];
    let (p, out) = probe(
        &sends,
        r#"[[faults]]
kind = "crash"
workers = [1]
at_s = 0.001
rejoin_after_s = 0.002"#,
    );
    assert_eq!(
        p.faults,
        vec![
            (MS, WorkerFault::Crash(1)),
            (3 * MS, WorkerFault::Rejoin(1))
        ]
    );
    // The message posted 0.5 µs before the rejoin lands 0.5 µs after it.
    assert_eq!(p.dropped, vec![(3 * MS / 2 + 1000, 0, 1)]);
    assert_eq!(
        p.landed,
        vec![
            (MS / 2 + 1000, 0, 1),
            (3 * MS + 500, 0, 1),
            (4 * MS + 1000, 0, 1)
        ]
    );
    let f = out.faults.unwrap().stats;
    assert_eq!((f.crashes, f.rejoins, f.dropped_down), (1, 1, 1));
    // A dropped message is marked at its down receiver, when it landed.
    assert_eq!(
        out.record.fault_events,
        [FaultEvent {
            time: SimTime::from_nanos(3 * MS / 2 + 1000),
            mark: FaultMark::DroppedDown,
            node: 1,
            peer: None,
        }]
    );
    assert_eq!(f.down_time[1].as_nanos(), 2 * MS);
    assert_eq!(f.down_time[0], SimTime::ZERO);
}

#[test]
fn random_crashes_follow_the_mtbf_and_do_not_depend_on_the_algorithm() {
    let text = r#"[[faults]]
kind = "crash"
workers = "all"
mtbf_s = 0.002
rejoin_after_s = 0.001"#;
    // A run with nothing left to do ends: the probe keeps it going to 9.9 ms.
    let (a, _) = probe(&[(9_900_000, 0, 1)], text);
    let (b, _) = probe(&[(0, 0, 1), (5, 2, 3), (9_900_000, 0, 1)], text);
    assert_eq!(a.faults, b.faults);
    let crashes = a
        .faults
        .iter()
        .filter(|f| matches!(f.1, WorkerFault::Crash(_)))
        .count();
    // 4 workers over 10 ms, each up 2 ms on average then down 1 ms: about 13 crashes.
    assert!((5..=25).contains(&crashes), "{crashes}");
    // Every crash of a worker is followed by its rejoin 1 ms later.
    for (t, f) in &a.faults {
        if let WorkerFault::Crash(w) = f
            && t + MS <= 9_900_000
        {
            assert!(a.faults.contains(&(t + MS, WorkerFault::Rejoin(*w))));
        }
    }
}

fn sgp_world<'s>(store: &'s mut dyn ReplicaStore, text: &str) -> World<'s> {
    let n = 4;
    let alg: AlgorithmConfig = SgpConfig::default().into();
    let mut w = world(
        &alg,
        &cluster(n, &[]),
        &plain_net(),
        TopologyConfig::OnePeerExponential {},
        store,
        &optimizer(0.05, 0.0),
        11,
    );
    w.set_faults(realize(text, n));
    w
}

#[test]
fn sgp_reports_the_mass_of_the_messages_it_lost() {
    // One-peer exponential graph on 4 nodes: at iteration 0 node i pushes half its weight to
    // i + 1. The push 0 -> 1 is lost: after the first mix (before the second step ends at
    // 20 ms) node 1 holds only its own half, node 0 its half and node 3's, and the half node 0
    // pushed is the mass lost.
    let text = r#"[[faults]]
kind = "loss"
probability = 1.0
links = ["0 -> 1"]"#;
    let mut store = quadratic_store(4, 11);
    let mut world = sgp_world(&mut store, text);
    let mut alg =
        dasim_sim::algorithms::Sgp::synchronous(&SgpConfig::default(), world.topology.schedule());
    let mut checked = 0;
    let out = run_inspect(
        &mut alg,
        &mut world,
        &stop_at(0.015),
        &mut Collect::default(),
        &mut |a: &dasim_sim::algorithms::Sgp, _, _| {
            // Weight is conserved but for the mass lost: nodes + unmixed messages + lost = n.
            let held: f64 =
                a.weights().iter().sum::<f64>() + a.unmixed().iter().map(|m| m.1).sum::<f64>();
            assert!((held + a.mass_lost().unwrap() - 4.0).abs() < 1e-12);
            checked += 1;
        },
    )
    .unwrap();
    assert!(checked > 4);
    assert_eq!(alg.weights(), vec![1.0, 0.5, 1.0, 1.0]);
    let f = out.faults.unwrap();
    assert_eq!(f.mass_lost, Some(0.5));
    assert_eq!(f.stats.lost, 1);
    // The run goes on: node 1 learnt of the loss and mixed without it.
    assert_eq!(out.worker_steps, 4);
    assert!(out.stalled.is_none());
}

#[test]
fn sgp_under_random_loss_loses_exactly_the_weight_of_the_dropped_messages() {
    let text = r#"[[faults]]
kind = "loss"
probability = 0.2"#;
    let mut store = quadratic_store(4, 11);
    let mut world = sgp_world(&mut store, text);
    let mut alg =
        dasim_sim::algorithms::Sgp::synchronous(&SgpConfig::default(), world.topology.schedule());
    let out = run_inspect(
        &mut alg,
        &mut world,
        &stop_at(0.5),
        &mut Collect::default(),
        &mut |a: &dasim_sim::algorithms::Sgp, _, _| {
            let held: f64 =
                a.weights().iter().sum::<f64>() + a.unmixed().iter().map(|m| m.1).sum::<f64>();
            assert!((held + a.mass_lost().unwrap() - 4.0).abs() < 1e-9);
        },
    )
    .unwrap();
    let f = out.faults.unwrap();
    assert!(f.stats.lost > 10, "{}", f.stats.lost);
    let lost = f.mass_lost.unwrap();
    assert!(lost > 0.0 && alg.weights().iter().sum::<f64>() < 4.0 - lost + 1e-9);
    assert!(out.stalled.is_none());
    assert!(out.worker_steps > 100);
}

#[test]
fn sgp_with_a_crashed_node_stalls_naming_it_and_runs_on_when_it_rejoins() {
    let mut store = quadratic_store(4, 11);
    let text = r#"[[faults]]
kind = "crash"
workers = [2]
at_s = 0.015"#;
    let mut world = sgp_world(&mut store, text);
    let alg: AlgorithmConfig = SgpConfig::default().into();
    let out = run_algorithm(&alg, &mut world, &stop_at(1.0), &mut Collect::default()).unwrap();
    let stall = out.stalled.expect("a stall");
    let text_ = stall.to_string();
    assert!(text_.contains("from node 2 (down)"), "{text_}");
    assert!(text_.contains("worker 2 is down since 0.015 s"), "{text_}");
    assert!(out.sim_time < SimTime::from_secs_f64(0.1));
    // Dropped at the crashed node: the pushes of iteration 1 to it.
    assert!(out.faults.unwrap().stats.dropped_down >= 1);

    let mut store = quadratic_store(4, 11);
    let text = r#"[[faults]]
kind = "crash"
workers = [2]
at_s = 0.015
rejoin_after_s = 0.05"#;
    let mut world = sgp_world(&mut store, text);
    let out = run_algorithm(&alg, &mut world, &stop_at(0.3), &mut Collect::default()).unwrap();
    assert!(out.stalled.is_none());
    // Down 50 ms of 300: about 25 synchronous iterations of 10 ms, 4 workers each.
    assert!(out.worker_steps >= 4 * 24, "{}", out.worker_steps);
    assert_eq!(out.faults.unwrap().stats.down_time[2].as_nanos(), 50 * MS);
}

#[test]
fn an_allreduce_worker_that_crashes_stalls_the_run_naming_it() {
    let n = 4;
    let alg: AlgorithmConfig = AllReduceConfig::default().into();
    let mut store = quadratic_store(n, 11);
    let mut world = world(
        &alg,
        &cluster(n, &[]),
        &plain_net(),
        TopologyConfig::Ring {},
        &mut store,
        &optimizer(0.05, 0.0),
        11,
    );
    world.set_faults(realize(
        r#"[[faults]]
kind = "crash"
workers = [2]
at_s = 0.025"#,
        n,
    ));
    // A time limit of 1,000 s: the stall ends the run right after the crash, in a few events.
    let out = run_algorithm(&alg, &mut world, &stop_at(1000.0), &mut Collect::default()).unwrap();
    let stall = out.stalled.expect("a stall");
    // Two iterations completed (10 ms steps and a short ring); worker 2 crashed in its third
    // step; the others finished theirs and wait for it.
    assert_eq!(out.worker_steps, 8);
    assert_eq!(stall.waiting.len(), 4, "{:?}", stall.waiting);
    for (line, w) in stall.waiting.iter().zip([0, 1, 3]) {
        assert_eq!(
            line,
            &format!(
                "worker {w} waits for all-reduce 2, which cannot complete: worker 2 crashed at \
                 0.025 s and never rejoins"
            )
        );
    }
    assert!(stall.to_string().contains("worker 2 is down since 0.025 s"));
    assert!(stall.time < SimTime::from_secs_f64(0.04));
    assert_eq!(out.sim_time, stall.time);
}

#[test]
fn an_allreduce_chunk_lost_breaks_the_ring() {
    let n = 4;
    let alg: AlgorithmConfig = AllReduceConfig::default().into();
    let mut store = quadratic_store(n, 11);
    let mut world = world(
        &alg,
        &cluster(n, &[]),
        &plain_net(),
        TopologyConfig::Ring {},
        &mut store,
        &optimizer(0.05, 0.0),
        11,
    );
    world.set_faults(realize(
        r#"[[faults]]
kind = "link-down"
links = ["1 -> 2"]
start_s = 0.015"#,
        n,
    ));
    let out = run_algorithm(&alg, &mut world, &stop_at(1.0), &mut Collect::default()).unwrap();
    let stall = out.stalled.expect("a stall");
    assert_eq!(out.worker_steps, 4);
    assert!(
        stall.waiting[0]
            .contains("a chunk of all-reduce 1 from worker 1 to worker 2 was lost at 0.02"),
        "{:?}",
        stall.waiting
    );
}

/// Runs SGP under every fault kind at once and returns the outcome and evaluation points.
fn sgp_under_everything() -> (Outcome, Vec<EvalPoint>) {
    let text = r#"
[[faults]]
kind = "loss"
probability = 0.1
[[faults]]
kind = "duplicate"
probability = 0.1
[[faults]]
kind = "delay"
distribution = "gamma"
mean_ms = 0.5
cv = 0.5
probability = 0.5
[[faults]]
kind = "crash"
workers = { count = 2 }
mtbf_s = 0.05
rejoin_after_s = 0.01
[[faults]]
kind = "link-down"
groups = [[0, 1, 2], [3, 4, 5, 6, 7]]
start_s = 0.1
end_s = 0.12
"#;
    let n = 8;
    let alg: AlgorithmConfig = OverlapSgpConfig::default().into();
    let mut store = quadratic_store(n, 11);
    let mut world = world(
        &alg,
        &cluster(n, &[(3, 2.0)]),
        &plain_net(),
        TopologyConfig::OnePeerExponential {},
        &mut store,
        &optimizer(0.05, 0.0),
        11,
    );
    world.set_faults(realize(text, n));
    let mut points = Collect::default();
    let out = run_algorithm(&alg, &mut world, &stop_at(0.3), &mut points).unwrap();
    (out, points.0)
}

#[test]
fn runs_with_faults_are_deterministic() {
    // Compared as text: the quadratic has no accuracy, and NaN != NaN.
    let (a, pa) = sgp_under_everything();
    let (b, pb) = sgp_under_everything();
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    assert_eq!(format!("{pa:?}"), format!("{pb:?}"));
    let f = a.faults.as_ref().unwrap().stats.clone();
    assert!(
        f.lost > 0 && f.duplicated > 0 && f.delayed > 0 && f.crashes > 0 && f.lost_link_down > 0
    );
}

#[test]
fn no_faults_changes_nothing() {
    let run_with = |faults: Option<Faults>| {
        let n = 4;
        let alg: AlgorithmConfig = SgpConfig::default().into();
        let mut store = quadratic_store(n, 11);
        let mut world = world(
            &alg,
            &cluster(n, &[(1, 1.5)]),
            &plain_net(),
            TopologyConfig::OnePeerExponential {},
            &mut store,
            &optimizer(0.05, 0.0),
            11,
        );
        if let Some(f) = faults {
            world.set_faults(f);
        }
        run_algorithm(&alg, &mut world, &stop_at(0.2), &mut Collect::default()).unwrap()
    };
    let plain = run_with(None);
    let empty = run_with(Some(Faults::new(&[], 4, &BuildEnv::new(11)).unwrap()));
    assert_eq!(format!("{plain:?}"), format!("{empty:?}"));
    assert!(plain.faults.is_none());
}

#[test]
fn bad_fault_entries_name_their_field() {
    let err = |text: &str| {
        Faults::new(&faults(text), 4, &BuildEnv::new(1))
            .unwrap_err()
            .to_string()
    };
    let e = err("[[faults]]\nkind = \"crash\"\nworkers = [7]\nat_s = 1.0");
    assert!(e.starts_with("faults[0].workers: "), "{e}");
    let e = err("[[faults]]\nkind = \"loss\"\nprobability = -0.1");
    assert!(
        e.starts_with("faults[0].probability: a probability must be in [0, 1], got -0.1"),
        "{e}"
    );
    let e =
        err("[[faults]]\nkind = \"link-down\"\nlinks = [\"0 <-> 1\"]\nstart_s = 2.0\nend_s = 1.0");
    assert!(
        e.starts_with("faults[0].end_s: the window ends at 1 s, not after it starts at 2 s"),
        "{e}"
    );
    let e = err("[[faults]]\nkind = \"crash\"\nworkers = [1]\nat_s = 1e30");
    assert!(e.starts_with("faults[0].at_s: "), "{e}");
    let e = err("[[faults]]\nkind = \"delay\"\nmean_ms = 1e300");
    assert!(e.starts_with("faults[0].mean_ms: "), "{e}");
    let e = err("[[faults]]\nkind = \"link-down\"\nlinks = [\"0 -> 9\"]");
    assert!(
        e.starts_with("faults[0].links[0]: the link 0 -> 9 names worker 9"),
        "{e}"
    );
    let e = err("[[faults]]\nkind = \"link-down\"\ngroups = [[0, 1], [1, 2]]");
    assert!(
        e.starts_with("faults[0].groups[1][0]: worker 1 is in two groups"),
        "{e}"
    );
    let e = err("[[faults]]\nkind = \"crash\"\nworkers = [1]");
    assert!(
        e.starts_with("faults[0].at_s: a crash needs its time"),
        "{e}"
    );
    let e = err("[[faults]]\nkind = \"crash\"\nworkers = [1]\nmtbf_s = 0.0");
    assert!(e.starts_with("faults[0].mtbf_s: "), "{e}");
}

#[test]
fn an_algorithm_refuses_a_fault_it_does_not_handle() {
    let f = faults(
        "[[faults]]\nkind = \"delay\"\nmean_ms = 1.0\n[[faults]]\nkind = \"crash\"\nworkers = [1]\nat_s = 1.0\nrejoin_after_s = 1.0",
    );
    let allreduce: AlgorithmConfig = AllReduceConfig::default().into();
    let e = allreduce
        .check_fault_support(&f, "algorithms[0]")
        .unwrap_err();
    assert_eq!(e.path.to_string(), "faults[1].kind");
    assert!(e.message.contains("allreduce (algorithms[0], `allreduce`) does not handle crash with rejoin_after_s faults"), "{}", e.message);
    let sgp: AlgorithmConfig = SgpConfig::default().into();
    sgp.check_fault_support(&f, "algorithms[0]").unwrap();
}

/// A world of `n` workers on `topology` with the plain network and the given faults, for `alg`.
fn faulty_world<'s>(
    alg: &AlgorithmConfig,
    n: usize,
    topology: TopologyConfig,
    store: &'s mut dyn ReplicaStore,
    lr: f64,
    text: &str,
) -> World<'s> {
    let mut w = world(
        alg,
        &cluster(n, &[]),
        &plain_net(),
        topology,
        store,
        &optimizer(lr, 0.0),
        11,
    );
    w.set_faults(realize(text, n));
    w
}

fn counts(out: &Outcome) -> std::collections::BTreeMap<&'static str, u64> {
    out.faults
        .as_ref()
        .unwrap()
        .counts
        .iter()
        .copied()
        .collect()
}

fn adpsgd_cfg(partner: Partner, averaging: Averaging, timeout_ms: Option<f64>) -> AlgorithmConfig {
    AdPsgdConfig {
        partner,
        averaging,
        partner_timeout_ms: timeout_ms,
        ..Default::default()
    }
    .into()
}

#[test]
fn adpsgd_gives_up_on_a_crashed_partner_after_its_timeout_and_retries() {
    // Two workers: 0 active, 1 passive; a model is 16 × 4 = 64 bytes, 64 ns on the wire. Worker 1
    // crashes at 5 ms (abandoning its first step) and rejoins at 15 ms. Worker 0's step ends at
    // 10 ms: its requests at 10, 12 and 14 ms land at the crashed worker and are dropped; each
    // times out 2 ms later. The request of 16 ms is answered: the reply is back at 16.000128 ms,
    // and worker 0 applies its gradient then. Worker 1's new step (15 ms) ends at 25 ms.
    let alg = adpsgd_cfg(Partner::Cycle, Averaging::PerStep, Some(2.0));
    let mut store = quadratic_store(2, 11);
    let mut world = faulty_world(
        &alg,
        2,
        TopologyConfig::Ring {},
        &mut store,
        0.05,
        r#"[[faults]]
kind = "crash"
workers = [1]
at_s = 0.005
rejoin_after_s = 0.01"#,
    );
    let out = run_algorithm(&alg, &mut world, &stop_at(0.02), &mut Collect::default()).unwrap();
    assert!(out.stalled.is_none());
    assert_eq!(out.worker_steps, 1);
    let c = counts(&out);
    assert_eq!(c["partner_timeouts"], 3);
    assert_eq!((c["late_replies"], c["replies_lost"]), (0, 0));
    let f = out.faults.unwrap().stats;
    assert_eq!(f.dropped_down, 3);
    assert_eq!(f.down_time[1].as_nanos(), 10 * MS);
    // Four requests and one reply on the wire.
    assert_eq!(out.network.messages, 5);
    let step = out
        .record
        .timeline
        .iter()
        .find(|s| s.worker == 0 && s.activity == Activity::Communicate)
        .expect("worker 0 communicated");
    assert_eq!(
        (step.start.as_nanos(), step.end.as_nanos()),
        (10 * MS, 16 * MS + 128)
    );
}

#[test]
fn adpsgd_asks_the_other_neighbour_when_one_is_down_and_stalls_when_all_are() {
    // Four workers on a ring: 0 and 2 active, 1 and 3 passive. Worker 1 is down from the start:
    // every request to it times out once, and the retry goes to worker 3, the only other
    // neighbour. Nobody stalls.
    let alg = adpsgd_cfg(Partner::Uniform, Averaging::PerStep, None);
    let mut store = quadratic_store(4, 11);
    let crash1 = "[[faults]]\nkind = \"crash\"\nworkers = [1]\nat_s = 0.0";
    let mut world = faulty_world(&alg, 4, TopologyConfig::Ring {}, &mut store, 0.05, crash1);
    let per_step = AdPsgdConfig {
        averaging: Averaging::PerStep,
        ..Default::default()
    };
    let mut a = AdPsgd::new(&per_step, &[true, false, true, false], 11)
        .with_timeout(per_step.partner_timeout(&world));
    let out = run(&mut a, &mut world, &stop_at(0.2), &mut Collect::default()).unwrap();
    assert!(out.stalled.is_none());
    let to1 = a.pair_counts().get(&(0, 1)).copied().unwrap_or(0)
        + a.pair_counts().get(&(2, 1)).copied().unwrap_or(0);
    assert!(to1 > 5, "{to1}");
    assert_eq!(a.timeouts(), to1);
    assert_eq!(out.faults.as_ref().unwrap().stats.dropped_down, to1);
    // Worker 3 makes its 20 steps of 10 ms; the active workers about as many, a timeout of a
    // microsecond at a time.
    assert!(out.worker_steps >= 55, "{}", out.worker_steps);

    // Both passive workers down for good: each active worker's first timeout finds every
    // neighbour gone, it stops retrying, and the run stalls, naming both. The default timeout
    // is 8 × 64 ns, raised to 1 µs.
    let both = "[[faults]]\nkind = \"crash\"\nworkers = [1, 3]\nat_s = 0.0";
    let mut store = quadratic_store(4, 11);
    let mut world = faulty_world(&alg, 4, TopologyConfig::Ring {}, &mut store, 0.05, both);
    let out = run_algorithm(&alg, &mut world, &stop_at(1000.0), &mut Collect::default()).unwrap();
    let stall = out.stalled.clone().expect("a stall");
    assert_eq!(stall.time.as_nanos(), 10 * MS + 1000);
    assert_eq!(counts(&out)["partner_timeouts"], 2);
    let text = stall.to_string();
    for w in [0, 2] {
        assert!(
            text.contains(&format!("worker {w} waits for a neighbour to average with")),
            "{text}"
        );
    }
    assert!(
        text.contains("worker 1 is down since 0 s and never rejoins"),
        "{text}"
    );
    assert!(
        text.contains("worker 3 is down since 0 s and never rejoins"),
        "{text}"
    );
}

#[test]
fn adpsgd_loses_the_correction_of_a_lost_reply_and_adds_late_ones() {
    // Two workers, timeout 1 ms, learning rate 0 (so only averaging moves the replicas).
    // The link 1 -> 0 is down until 10.5 ms: the reply to the request of 10 ms is lost after
    // worker 1 averaged (replies_lost); worker 0 times out at 11 ms and asks again.
    let alg = adpsgd_cfg(Partner::Cycle, Averaging::PerStep, Some(1.0));
    let mut store = quadratic_store(2, 11);
    store.set_params(1, vec![1.0; 16]);
    let mut world = faulty_world(
        &alg,
        2,
        TopologyConfig::Ring {},
        &mut store,
        0.0,
        r#"[[faults]]
kind = "link-down"
links = ["1 -> 0"]
end_s = 0.0105"#,
    );
    let out = run_algorithm(&alg, &mut world, &stop_at(0.0115), &mut Collect::default()).unwrap();
    let c = counts(&out);
    assert_eq!(
        (c["partner_timeouts"], c["replies_lost"], c["late_replies"]),
        (1, 1, 0)
    );
    // Worker 1's step of 10 ms, worker 0's at 11.000128 ms.
    assert_eq!(out.worker_steps, 2);
    drop(world);
    // x0 = 0, x1 = 1: worker 1 averaged to 1/2 and the reply δ = −1/2 was lost; the second
    // exchange averaged 0 and 1/2 to 1/4 each. The sum lost the δ: 1/2 instead of 1.
    let (x0, x1) = (store.params(0)[0], store.params(1)[0]);
    assert_eq!((x0, x1), (0.25, 0.25), "start {:?}", store.params(0));

    // A delay of 3 ms on the first reply (posted at 10.000064 ms, inside the window): worker 0
    // times out at 11, 12 and 13 ms; the replies to its retries queue behind the delayed one
    // (links stay FIFO), so all four land at 13.000128 ms, in order: three late, the fourth
    // ends the wait. Every correction is added, so the sum is kept.
    let mut store = quadratic_store(2, 11);
    store.set_params(1, vec![1.0; 16]);
    let mut world = faulty_world(
        &alg,
        2,
        TopologyConfig::Ring {},
        &mut store,
        0.0,
        r#"[[faults]]
kind = "delay"
mean_ms = 3.0
links = ["1 -> 0"]
end_s = 0.0101"#,
    );
    let out = run_algorithm(&alg, &mut world, &stop_at(0.0135), &mut Collect::default()).unwrap();
    let c = counts(&out);
    assert_eq!(
        (c["partner_timeouts"], c["replies_lost"], c["late_replies"]),
        (3, 0, 3)
    );
    assert_eq!(out.worker_steps, 2);
    let comm = out
        .record
        .timeline
        .iter()
        .find(|s| s.worker == 0 && s.activity == Activity::Communicate)
        .unwrap();
    assert_eq!(comm.end.as_nanos(), 13 * MS + 128);
    drop(world);
    let sum = store.params(0)[0] + store.params(1)[0];
    assert!((sum - 1.0).abs() < 1e-12, "{sum}");
}

fn ps_cfg(staleness: Option<u64>, retransmit_ms: Option<f64>) -> AlgorithmConfig {
    PsConfig {
        servers: 1,
        staleness,
        retransmit_ms,
        ..Default::default()
    }
    .into()
}

/// When `worker`'s `k`-th compute interval (from 0) started, in ns.
fn compute_start(out: &Outcome, worker: usize, k: usize) -> u64 {
    out.record
        .timeline
        .iter()
        .filter(|s| s.worker == worker && s.activity == Activity::Compute)
        .nth(k)
        .map(|s| s.start.as_nanos())
        .expect("a compute interval")
}

#[test]
fn ps_drops_a_crashed_workers_gradient_and_the_others_go_on() {
    // Two workers, one shard (node 2). Pull requests are headers only (0 bytes here), replies
    // and pushes 64 bytes. Worker 1 crashes at 15 ms, in its second step: that gradient is
    // dropped. Worker 0 goes on alone: steps of 10 ms plus a round trip of 128 ns, four by
    // 50 ms; worker 1 made one.
    let alg = ps_cfg(None, None);
    let mut store = quadratic_store(2, 11);
    let crash = "[[faults]]\nkind = \"crash\"\nworkers = [1]\nat_s = 0.015";
    let mut world = faulty_world(&alg, 2, TopologyConfig::Ring {}, &mut store, 0.05, crash);
    let out = run_algorithm(&alg, &mut world, &stop_at(0.05), &mut Collect::default()).unwrap();
    assert!(out.stalled.is_none());
    assert_eq!(out.worker_steps, 5);
    let c = counts(&out);
    assert_eq!(
        (
            c["gradients_dropped"],
            c["pushes_dropped"],
            c["retransmissions"]
        ),
        (1, 0, 0)
    );

    // Bulk-synchronous (staleness 0): worker 0's pull for its third step needs worker 1's
    // second gradient, which never comes: the run stalls, naming the held pull and the crash.
    let alg = ps_cfg(Some(0), None);
    let mut store = quadratic_store(2, 11);
    let mut world = faulty_world(&alg, 2, TopologyConfig::Ring {}, &mut store, 0.05, crash);
    let out = run_algorithm(&alg, &mut world, &stop_at(1000.0), &mut Collect::default()).unwrap();
    let stall = out.stalled.clone().expect("a stall");
    let text = stall.to_string();
    assert!(
        text.contains("worker 0 (step 2) waits for server shard 0 to serve its pull"),
        "{text}"
    );
    assert!(text.contains("worker 1 is down since 0.015 s"), "{text}");
    assert_eq!(out.worker_steps, 3);
    assert!(stall.time < SimTime::from_secs_f64(0.021));
}

#[test]
fn ps_retransmits_a_lost_push_and_pull() {
    // Worker 0's first push (posted at 10.000064 ms, its first reply having landed at 64 ns)
    // and the pull right behind it are lost on the link to the shard, 0 -> 2 (a loss on every
    // link of worker 0 for 0.1 µs). Both are posted again 1 ms later, in that
    // order: the push lands at 11.000128 ms, the pull right after it, and the reply at
    // 11.000192 ms, when worker 0's second step starts (not 10.000192 ms).
    let alg = ps_cfg(None, Some(1.0));
    let mut store = quadratic_store(2, 11);
    let mut world = faulty_world(
        &alg,
        2,
        TopologyConfig::Ring {},
        &mut store,
        0.05,
        r#"[[faults]]
kind = "loss"
probability = 1.0
workers = [0]
start_s = 0.01
end_s = 0.0100001"#,
    );
    let out = run_algorithm(&alg, &mut world, &stop_at(0.015), &mut Collect::default()).unwrap();
    assert_eq!(counts(&out)["retransmissions"], 2);
    assert_eq!(out.faults.as_ref().unwrap().stats.lost, 2);
    assert_eq!(compute_start(&out, 0, 1), 11 * MS + 192);
    // Both gradients of the first steps are applied: nothing dropped.
    assert_eq!(out.worker_steps, 2);
    assert_eq!(counts(&out)["gradients_dropped"], 0);
}

#[test]
fn ps_gives_up_on_a_link_down_for_good() {
    // Every link of worker 0 goes down for good at 10.00005 ms, just before its first push:
    // the push is lost for good (its gradient dropped, no step counted) and so is the pull
    // behind it; worker 0 waits for ever, worker 1 goes on (two steps by 30 ms).
    let alg = ps_cfg(None, None);
    let mut store = quadratic_store(2, 11);
    let mut world = faulty_world(
        &alg,
        2,
        TopologyConfig::Ring {},
        &mut store,
        0.05,
        "[[faults]]\nkind = \"link-down\"\nworkers = [0]\nstart_s = 0.01000005",
    );
    let out = run_algorithm(&alg, &mut world, &stop_at(0.03), &mut Collect::default()).unwrap();
    let c = counts(&out);
    assert_eq!(
        (
            c["pushes_dropped"],
            c["gradients_dropped"],
            c["retransmissions"]
        ),
        (1, 1, 0)
    );
    assert_eq!(out.worker_steps, 2);
    assert_eq!(out.faults.as_ref().unwrap().stats.lost_link_down, 2);
}

#[test]
fn dasgd_counts_the_gradients_lost_and_its_staleness_keeps_them() {
    // Four workers on a ring, gradients forwarded along each origin's breadth-first tree:
    // origin 0's tree is 0 -> 1 -> 2 and 0 -> 3, origin 3's is 3 -> 0 -> 1 and 3 -> 2. Every
    // message on 0 -> 1 is lost: each gradient of origin 0 never reaches 1 nor 2 (2 applications
    // lost), each of origin 3 never reaches 1 (1 lost). Two rounds of 10 ms steps by 25 ms:
    // 6 applications of 4 gradients lost.
    let cfg = DasgdConfig {
        broadcast: Broadcast::Topology,
    };
    let alg: AlgorithmConfig = cfg.clone().into();
    let mut store = quadratic_store(4, 11);
    let mut world = faulty_world(
        &alg,
        4,
        TopologyConfig::Ring {},
        &mut store,
        0.05,
        "[[faults]]\nkind = \"loss\"\nprobability = 1.0\nlinks = [\"0 -> 1\"]",
    );
    let mut a = Dasgd::new(&cfg, &world.topology).with_faults();
    let mut points = Collect::default();
    let out = run(&mut a, &mut world, &stop_at(0.025), &mut points).unwrap();
    assert_eq!(out.worker_steps, 8);
    let c = counts(&out);
    assert_eq!((c["applications_lost"], c["gradients_lost"]), (6, 4));
    assert_eq!(out.faults.as_ref().unwrap().stats.lost, 4);
    // Model 1 lacks origins 0's and 3's gradients for good, model 2 origin 0's.
    assert_eq!(a.counts()[1], vec![0, 2, 2, 0]);
    assert_eq!(a.counts()[2], vec![0, 2, 2, 2]);
    assert_eq!(a.staleness_between(1, 0), 4);
    assert_eq!(a.staleness_between(2, 0), 2);
    assert_eq!(a.staleness_between(1, 2), 2);
    assert_eq!(a.lost_divergence_max(), 4);
    // The series reports the floor at each point with applications since the previous one.
    let last = points
        .0
        .iter()
        .rev()
        .find(|p| !p.series.is_empty())
        .unwrap();
    assert!(
        last.series.contains(&("lost_divergence_max", 4.0)),
        "{:?}",
        last.series
    );
}

#[test]
fn dasgd_misses_what_lands_at_a_crashed_worker() {
    // Three workers, every gradient sent to every other. Worker 2 is down over [5 ms, 15 ms):
    // it abandons its first step and misses the first gradients of 0 and 1 (10 ms); its next
    // step starts at 15 ms. By 22 ms: 0 and 1 made 2 steps, 2 none; model 2 applied the second
    // gradients of 0 and 1 only.
    let cfg = DasgdConfig::default();
    let alg: AlgorithmConfig = cfg.clone().into();
    let mut store = quadratic_store(3, 11);
    let mut world = faulty_world(
        &alg,
        3,
        TopologyConfig::Ring {},
        &mut store,
        0.05,
        "[[faults]]\nkind = \"crash\"\nworkers = [2]\nat_s = 0.005\nrejoin_after_s = 0.01",
    );
    let mut a = Dasgd::new(&cfg, &world.topology).with_faults();
    let out = run(&mut a, &mut world, &stop_at(0.022), &mut Collect::default()).unwrap();
    assert_eq!(out.worker_steps, 4);
    assert_eq!(out.faults.as_ref().unwrap().stats.dropped_down, 2);
    assert_eq!(counts(&out)["applications_lost"], 2);
    assert_eq!(a.counts()[2], vec![2, 2, 0]);
    assert_eq!(a.staleness_between(2, 0), 2);
    // Models 0 and 1 agree: each has both gradients of 0 and of 1.
    assert_eq!(a.staleness_between(0, 1), 0);
}

#[test]
fn dpsgd_stalls_when_a_neighbour_crashes_naming_who_waits_for_what() {
    // Four workers on a ring, 10 ms steps, models sent when an iteration starts. Worker 2
    // crashes at 15 ms, in iteration 1, after sending its models of iteration 1: its
    // neighbours 1 and 3 finish iteration 1 at 20 ms and wait in iteration 2 for its model (the
    // ones they sent it are dropped). Worker 0 has 1's and 3's models of iteration 2 and
    // finishes it at 30 ms; in iteration 3 (40 ms) it waits for theirs. Steps: 4 + 3 + 1.
    let alg: AlgorithmConfig = DpsgdConfig::default().into();
    let mut store = quadratic_store(4, 11);
    let mut world = faulty_world(
        &alg,
        4,
        TopologyConfig::Ring {},
        &mut store,
        0.05,
        "[[faults]]\nkind = \"crash\"\nworkers = [2]\nat_s = 0.015",
    );
    let out = run_algorithm(&alg, &mut world, &stop_at(1000.0), &mut Collect::default()).unwrap();
    let stall = out.stalled.clone().expect("a stall");
    assert_eq!(stall.time.as_nanos(), 40 * MS);
    assert_eq!(out.worker_steps, 8);
    assert_eq!(out.faults.as_ref().unwrap().stats.dropped_down, 2);
    assert_eq!(
        stall.waiting,
        vec![
            "worker 0 waits for the model of iteration 3 from worker 1",
            "worker 0 waits for the model of iteration 3 from worker 3",
            "worker 1 waits for the model of iteration 2 from worker 2 (down)",
            "worker 3 waits for the model of iteration 2 from worker 2 (down)",
            "worker 2 is down since 0.015 s and never rejoins",
        ]
    );
}

#[test]
fn dpsgd_stalls_on_a_lost_model() {
    // Worker 0's model of iteration 1 to worker 1 (sent at 10 ms) is lost: worker 1 waits for
    // it from 20 ms; 0 and 2 finish iteration 1 and wait in iteration 2 for 1's model (30 ms);
    // 3 finishes iteration 2 and waits in iteration 3 (40 ms). Steps: 4 + 3 + 1.
    let alg: AlgorithmConfig = DpsgdConfig::default().into();
    let mut store = quadratic_store(4, 11);
    let mut world = faulty_world(
        &alg,
        4,
        TopologyConfig::Ring {},
        &mut store,
        0.05,
        "[[faults]]\nkind = \"loss\"\nprobability = 1.0\nlinks = [\"0 -> 1\"]\nstart_s = 0.01\nend_s = 0.011",
    );
    let out = run_algorithm(&alg, &mut world, &stop_at(1000.0), &mut Collect::default()).unwrap();
    let stall = out.stalled.clone().expect("a stall");
    assert_eq!(stall.time.as_nanos(), 40 * MS);
    assert_eq!(out.worker_steps, 8);
    assert_eq!(
        stall.waiting,
        vec![
            "worker 0 waits for the model of iteration 2 from worker 1",
            "worker 1 waits for the model of iteration 1 from worker 0 (lost on the way)",
            "worker 2 waits for the model of iteration 2 from worker 1",
            "worker 3 waits for the model of iteration 3 from worker 0",
            "worker 3 waits for the model of iteration 3 from worker 2",
        ]
    );
}

#[test]
fn local_sgd_stalls_at_the_model_all_reduce_after_a_crash() {
    // H = 2: the model all-reduce follows every second step (20 ms). Worker 2 crashes at 15 ms
    // in its second step; the others finish theirs and wait at the ring for good.
    let alg = AlgorithmConfig::from(AlgorithmKind::LocalSgd(LocalSgdConfig {
        h: 2,
        warmup_steps: None,
    }));
    let mut store = quadratic_store(4, 11);
    let mut world = faulty_world(
        &alg,
        4,
        TopologyConfig::Ring {},
        &mut store,
        0.05,
        "[[faults]]\nkind = \"crash\"\nworkers = [2]\nat_s = 0.015",
    );
    let out = run_algorithm(&alg, &mut world, &stop_at(1000.0), &mut Collect::default()).unwrap();
    let stall = out.stalled.clone().expect("a stall");
    assert_eq!(stall.time.as_nanos(), 20 * MS);
    assert_eq!(out.worker_steps, 7);
    for (line, w) in stall.waiting.iter().zip([0, 1, 3]) {
        assert_eq!(
            line,
            &format!(
                "worker {w} waits for all-reduce 0, which cannot complete: worker 2 crashed at \
                 0.015 s and never rejoins"
            )
        );
    }
    assert_eq!(stall.waiting.len(), 4);
}

#[test]
fn which_algorithms_refuse_which_faults() {
    let f = faults(
        "[[faults]]\nkind = \"crash\"\nworkers = [1]\nat_s = 1.0\nrejoin_after_s = 1.0\n\
         [[faults]]\nkind = \"loss\"\nprobability = 0.1",
    );
    let check = |alg: AlgorithmConfig| {
        alg.check_fault_support(&f, "algorithms[0]")
            .map_err(|e| e.path.to_string())
    };
    // Every kind: the asynchronous ones and push-sum.
    check(AdPsgdConfig::default().into()).unwrap();
    check(PsConfig::default().into()).unwrap();
    check(DasgdConfig::default().into()).unwrap();
    check(OverlapSgpConfig::default().into()).unwrap();
    // No rejoin: the synchronous ones.
    for alg in [
        AlgorithmConfig::from(DpsgdConfig::default()),
        AlgorithmKind::LocalSgd(LocalSgdConfig::default()).into(),
        AllReduceConfig::default().into(),
    ] {
        assert_eq!(check(alg), Err("faults[0].kind".into()));
    }
    let loss_only = &f[1..];
    for alg in [
        AlgorithmConfig::from(DpsgdConfig::default()),
        AlgorithmKind::LocalSgd(LocalSgdConfig::default()).into(),
    ] {
        alg.check_fault_support(loss_only, "algorithms[0]").unwrap();
    }
    // LAP-SGD refuses all three, saying why.
    let lap: AlgorithmConfig = AlgorithmKind::LapSgd(LapSgdConfig::default()).into();
    let e = lap
        .check_fault_support(loss_only, "algorithms[0]")
        .unwrap_err();
    assert!(e.message.contains("silent degradation"), "{}", e.message);
}

/// The rows of workers 2, 3 and 4 (a ring of 6) when worker 3 crashes at 0.1 s and just after it
/// rejoins at 0.2 s under `rejoin_state`, for the algorithm `make` builds on the world; and, for
/// push-sum, the weights then.
type Rows = [Vec<f64>; 3];
fn around_the_rejoin<A: Algorithm>(
    rejoin_state: &str,
    cfg: &AlgorithmConfig,
    make: impl FnOnce(&World<'_>) -> A,
    weights: impl Fn(&A) -> Vec<f64>,
) -> (Rows, Rows, Vec<f64>, Vec<f64>) {
    let text = format!(
        "[[faults]]\nkind = \"crash\"\nworkers = [3]\nat_s = 0.1\nrejoin_after_s = 0.1\n\
         rejoin_state = \"{rejoin_state}\""
    );
    let mut store = Checked::new(quadratic_store(6, 11));
    let shared = store.shared();
    let mut world = world(
        cfg,
        &cluster(6, &[]),
        &plain_net(),
        TopologyConfig::Ring {},
        &mut store,
        &optimizer(0.05, 0.5),
        11,
    );
    world.set_faults(realize(&text, 6));
    let mut alg = make(&world);
    let rows = || -> Rows {
        let s = shared.borrow();
        [
            s.params(2).to_vec(),
            s.params(3).to_vec(),
            s.params(4).to_vec(),
        ]
    };
    let (crash, rejoin) = (SimTime::from_secs_f64(0.1), SimTime::from_secs_f64(0.2));
    let mut at_crash = None;
    let mut at_rejoin = None;
    let mut w_before = Vec::new();
    let mut w_after = Vec::new();
    run_inspect(
        &mut alg,
        &mut world,
        &stop_at(0.3),
        &mut Collect::default(),
        &mut |a: &A, _, t| {
            if t < rejoin {
                // The last state before the rejoin, and the weights just before it.
                w_before = weights(a);
            }
            if t == crash && at_crash.is_none() {
                at_crash = Some(rows());
            }
            if t == rejoin && at_rejoin.is_none() {
                at_rejoin = Some(rows());
                w_after = weights(a);
            }
        },
    )
    .unwrap();
    (at_crash.unwrap(), at_rejoin.unwrap(), w_before, w_after)
}

fn adpsgd(rejoin_state: &str) -> (Rows, Rows) {
    let cfg: AlgorithmConfig = AdPsgdConfig::default().into();
    let options = AdPsgdConfig::default();
    let (c, r, _, _) = around_the_rejoin(
        rejoin_state,
        &cfg,
        |w| {
            let sides = w.topology.bipartition().unwrap();
            AdPsgd::new(&options, &sides, w.seed).with_timeout(options.partner_timeout(w))
        },
        |_| Vec::new(),
    );
    (c, r)
}

#[test]
fn a_worker_rejoins_with_its_last_state_or_its_neighbours_model() {
    // Last state: worker 3's row is the one it crashed with; nothing touched it while down.
    let (crash, rejoin) = adpsgd("last");
    assert_eq!(rejoin[1], crash[1]);
    assert_ne!(rejoin[1], rejoin[0], "the neighbours moved on meanwhile");
    // Neighbour: its row is a copy of its lowest-numbered live neighbour's, worker 2's.
    let (crash, rejoin) = adpsgd("neighbour");
    assert_eq!(rejoin[1], rejoin[0]);
    assert_ne!(rejoin[1], crash[1]);
}

#[test]
fn a_push_sum_node_rejoins_with_its_neighbours_debiased_model_and_its_own_weight() {
    let cfg: AlgorithmConfig = SgpConfig::default().into();
    let (_, rejoin, before, after) = around_the_rejoin(
        "neighbour",
        &cfg,
        |w| dasim_sim::algorithms::Sgp::synchronous(&SgpConfig::default(), w.topology.schedule()),
        |a: &dasim_sim::algorithms::Sgp| a.weights(),
    );
    // The weights are unchanged by the rejoin, so their sum too.
    assert_eq!(after, before);
    // z_3 = x_3 / w_3 = x_2 / w_2 = z_2 (up to rounding: x_3 = (w_3 / w_2)·x_2).
    for (x3, x2) in rejoin[1].iter().zip(&rejoin[0]) {
        let (z3, z2) = (x3 / after[3], x2 / after[2]);
        assert!((z3 - z2).abs() <= 1e-12 * z2.abs().max(1.0), "{z3} vs {z2}");
    }
    assert_ne!(after[3], after[2], "a case where the factor matters");
}

#[test]
fn rejoin_state_needs_a_rejoin() {
    let text =
        "[[faults]]\nkind = \"crash\"\nworkers = [1]\nat_s = 0.1\nrejoin_state = \"neighbour\"";
    let e = Faults::new(&faults(text), 4, &BuildEnv::new(1)).unwrap_err();
    assert_eq!(e.path.to_string(), "faults[0].rejoin_state");
    assert!(e.to_string().contains("rejoin_after_s"), "{e}");
}

#[test]
fn the_bias_corrected_methods_stall_when_a_neighbour_crashes_naming_the_wait() {
    // As D-PSGD, with no recovery protocol: worker 2 crashes at 15 ms, during its second step,
    // so its message of iteration 1 is never sent and its neighbours (in-peers' receivers) wait
    // for it for good.
    let cases: [(AlgorithmConfig, TopologyConfig, &str); 3] = [
        (
            GradientTrackingConfig::default().into(),
            TopologyConfig::Ring {},
            "worker 1 waits for the model and tracker of iteration 1 from worker 2 (down)",
        ),
        (
            AlgorithmKind::ExactDiffusion(ExactDiffusionConfig::default()).into(),
            TopologyConfig::Ring {},
            "worker 1 waits for the φ of iteration 1 from worker 2 (down)",
        ),
        (
            PushDigingConfig::default().into(),
            TopologyConfig::OnePeerExponential {},
            // On the one-peer exponential graph of 4, node i pushes to i + 1 at even iterations
            // and to i + 2 at odd ones: node 2's shares of iteration 1 were for node 0.
            "worker 0 waits for the shares of iteration 1 from worker 2 (down)",
        ),
    ];
    for (alg, topology, line) in cases {
        let mut store = quadratic_store(4, 11);
        let mut world = faulty_world(
            &alg,
            4,
            topology,
            &mut store,
            0.05,
            "[[faults]]\nkind = \"crash\"\nworkers = [2]\nat_s = 0.015",
        );
        let out =
            run_algorithm(&alg, &mut world, &stop_at(1000.0), &mut Collect::default()).unwrap();
        let stall = out.stalled.clone().expect("a stall");
        assert!(
            stall.waiting.iter().any(|l| l == line),
            "{}: {:?}",
            alg.label(),
            stall.waiting
        );
        assert!(
            stall
                .waiting
                .contains(&"worker 2 is down since 0.015 s and never rejoins".to_owned()),
            "{}: {:?}",
            alg.label(),
            stall.waiting
        );
    }
}

/// A fresh directory for test `name`'s files (under cargo's temporary directory for integration
/// tests).
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes an availability file and the `[[faults]]` entry that reads it.
fn availability(dir: &std::path::Path, csv: &str) -> String {
    let file = dir.join("availability.csv");
    std::fs::write(&file, csv).unwrap();
    format!(
        "[[faults]]\nkind = \"availability\"\npath = \"{}\"",
        file.display()
    )
}

#[test]
fn an_availability_interval_is_a_crash_and_a_rejoin_at_its_ends() {
    // Worker 2 off from 50 ms to 60 ms, read from a file, is the crash entry with that time
    // and rejoin delay: the same run, event for event.
    let dir = scratch("availability-equivalence");
    let alg: AlgorithmConfig = PsConfig::default().into();
    let run = |text: &str| {
        let mut store = quadratic_store(4, 11);
        let mut world = faulty_world(&alg, 4, TopologyConfig::Ring {}, &mut store, 0.05, text);
        run_algorithm(&alg, &mut world, &stop_at(0.3), &mut Collect::default()).unwrap()
    };
    let traced = run(&availability(&dir, "worker,off_s,on_s\n2,0.05,0.06\n"));
    let crash =
        run("[[faults]]\nkind = \"crash\"\nworkers = [2]\nat_s = 0.05\nrejoin_after_s = 0.01");
    assert_eq!(traced.events, crash.events);
    assert_eq!(traced.worker_steps, crash.worker_steps);
    assert_eq!(
        format!("{:?}", traced.network),
        format!("{:?}", crash.network)
    );
    let stats = &traced.faults.as_ref().unwrap().stats;
    assert_eq!((stats.crashes, stats.rejoins), (1, 1));
    assert_eq!(stats.down_time[2], SimTime::from_millis_f64(10.0));
}

#[test]
fn an_availability_trace_takes_workers_off_and_on_and_for_good() {
    // Worker 1 off twice (the second time for good), worker 3 once; the rows in any order.
    let dir = scratch("availability-trace");
    let alg: AlgorithmConfig = PsConfig::default().into();
    let text = availability(&dir, "worker,off_s,on_s\n1,0.35,\n3,0.02,0.03\n1,0.1,0.2\n");
    let mut store = quadratic_store(4, 11);
    let mut world = faulty_world(&alg, 4, TopologyConfig::Ring {}, &mut store, 0.05, &text);
    let out = run_algorithm(&alg, &mut world, &stop_at(0.5), &mut Collect::default()).unwrap();
    let stats = &out.faults.as_ref().unwrap().stats;
    assert_eq!((stats.crashes, stats.rejoins), (3, 2));
    assert_eq!(stats.down_time[3], SimTime::from_millis_f64(10.0));
    assert!(stats.down_time[1] >= SimTime::from_millis_f64(100.0));
    assert!(out.stalled.is_none(), "the others go on");
}

#[test]
fn an_availability_trace_is_refused_by_an_algorithm_without_rejoins_and_when_unreadable() {
    let dir = scratch("availability-refusals");
    let text = availability(&dir, "worker,off_s,on_s\n1,0.1,0.2\n");
    let dpsgd: AlgorithmConfig = DpsgdConfig::default().into();
    let e = dpsgd
        .check_fault_support(&faults(&text), "algorithms[0]")
        .unwrap_err();
    assert_eq!(e.path.to_string(), "faults[0].kind", "{e}");
    assert!(e.to_string().contains("availability"), "{e}");
    // A missing file, and a bad line, are located at the entry's path and name the file.
    for (csv, needle) in [
        (None, "cannot read the availability file"),
        (
            Some("worker,off_s,on_s\n9,0.1,0.2\n"),
            "line 2: worker 9, but the cluster has 4",
        ),
    ] {
        let text = match csv {
            Some(c) => availability(&dir, c),
            None => "[[faults]]\nkind = \"availability\"\npath = \"/nonexistent/availability.csv\""
                .to_owned(),
        };
        let e = Faults::new(&faults(&text), 4, &BuildEnv::new(11)).unwrap_err();
        assert_eq!(e.path.to_string(), "faults[0].path", "{e}");
        assert!(e.to_string().contains(needle), "{e}");
        assert!(e.to_string().contains("availability.csv"), "{e}");
    }
}

#[test]
fn the_llama_3_preset_is_its_gpus_mtbf_divided_by_the_chips_of_a_worker() {
    // 419 unexpected interruptions in 54 days on 16,384 GPUs: a GPU fails every 5.8 years, an
    // 8-GPU worker 8 times as often.
    let entry = |text: &str| match faults(text).remove(0) {
        FaultConfig::Crash(c) => c,
        other => panic!("{other:?}"),
    };
    let preset = "[[faults]]\nkind = \"crash\"\nworkers = \"all\"\nmtbf_preset = \"llama3\"\nchips_per_worker = 8";
    let gpu: f64 = 54.0 * 86_400.0 * 16_384.0 / 419.0;
    assert!((gpu / (365.25 * 86_400.0) - 5.78).abs() < 0.01);
    let c = entry(preset);
    assert_eq!(c.worker_mtbf_s(), Some(gpu / 8.0));
    // The same realization as the mean written out: the same stream, the same crash times.
    let by_hand = format!(
        "[[faults]]\nkind = \"crash\"\nworkers = \"all\"\nmtbf_s = {}",
        gpu / 8.0
    );
    let (mut a, mut b) = (realize(preset, 16), realize(&by_hand, 16));
    for _ in 0..16 {
        let (ta, tb) = (a.next_time(), b.next_time());
        assert_eq!(ta, tb);
        a.pop(ta.unwrap());
        b.pop(tb.unwrap());
    }
    // Refusals, at the key.
    for (text, key) in [
        (
            "[[faults]]\nkind = \"crash\"\nworkers = [1]\nmtbf_s = 10.0\nmtbf_preset = \"llama3\"",
            "faults[0].mtbf_preset",
        ),
        (
            "[[faults]]\nkind = \"crash\"\nworkers = [1]\nat_s = 1.0\nchips_per_worker = 8",
            "faults[0].chips_per_worker",
        ),
        (
            "[[faults]]\nkind = \"crash\"\nworkers = [1]\nmtbf_preset = \"llama3\"\nchips_per_worker = 0",
            "faults[0].chips_per_worker",
        ),
    ] {
        let e = Faults::new(&faults(text), 4, &BuildEnv::new(11)).unwrap_err();
        assert_eq!(e.path.to_string(), key, "{e}");
    }
}
