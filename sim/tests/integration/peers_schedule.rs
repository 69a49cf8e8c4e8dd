//! `peers_schedule` of the bidirectional exponential graph (SGP's reference `--ppi_schedule`):
//! the number of peers per iteration changes at given epochs; the switch lands on the iteration
//! worked out by hand, SGP follows it, and push-sum conserves its weight across it.

use crate::common;

use common::*;
use dasim_sim::engine::run_inspect;
use dasim_sim::prelude::*;
use dasim_sim::record::{MessageRecord, MetricsConfig};

const SEED: u64 = 7;

fn topology(peers: usize, schedule: &[(u64, usize)]) -> TopologyConfig {
    TopologyConfig::BidirectionalExponential {
        peers,
        peers_schedule: schedule.to_vec(),
    }
}

#[test]
fn the_switch_lands_on_the_hand_worked_iteration() {
    // 8 nodes: the phone book is +1, −1, +2, −2, +4 (L = 5). The exact store has batch 1 and
    // 1000 training samples, so epoch e begins at iteration ⌈1000·e / (1·8)⌉ = 125·e.
    let t = Topology::build(&topology(1, &[(0, 1), (1, 2)]), 8, &BuildEnv::new(SEED)).unwrap();
    assert_eq!(t.peer_phases(), [(0, 1), (1, 2)]);
    let s = t.training_schedule(1, 1000);
    assert_eq!(s.period(), None);
    assert!(s.is_strongly_connected());
    // One peer per iteration until iteration 124: book[k mod 5].
    assert_eq!(s.out_peers(0, 0), [1]);
    assert_eq!(s.out_peers(0, 1), [7]);
    assert_eq!(s.out_peers(0, 123), [6]); // 123 mod 5 = 3: −2
    assert_eq!(s.out_peers(0, 124), [4]); // 124 mod 5 = 4: +4
    // From iteration 125 (epoch 1), two, the rotation restarting at the book's first entry:
    // (+1, −1), (+2, −2), (+4, +1), (−1, +2), (−2, +4), then again (+1, −1).
    assert_eq!(s.out_peers(0, 125), [1, 7]);
    assert_eq!(s.out_peers(0, 126), [2, 6]);
    assert_eq!(s.out_peers(0, 127), [4, 1]);
    assert_eq!(s.out_peers(0, 128), [7, 2]);
    assert_eq!(s.out_peers(0, 129), [6, 4]);
    assert_eq!(s.out_peers(0, 130), [1, 7]);
    assert_eq!(s.out_peers(3, 127), [7, 4]);
    assert_eq!(s.in_peers(0, 124), [4]);
    assert_eq!(s.in_peers(0, 125), [1, 7]);
    assert_eq!(s.in_peers(0, 127), [4, 7]);
    // The schedule as configured (before the epochs are placed) and without a schedule: one
    // peer throughout, unchanged.
    assert_eq!(t.schedule().out_peers(0, 125), [1]);
    let plain = Topology::build(&topology(1, &[]), 8, &BuildEnv::new(SEED)).unwrap();
    assert_eq!(plain.training_schedule(1, 1000), *plain.schedule());
    assert_eq!(
        plain.schedule(),
        &PeerSchedule::bidirectional_exponential(8, 1)
    );
    // Before the first entry, `peers`; a batch of 4 puts epoch 2 at ⌈2000 / 32⌉ = 63.
    let t = Topology::build(&topology(2, &[(2, 1)]), 8, &BuildEnv::new(SEED)).unwrap();
    let s = t.training_schedule(4, 1000);
    // (62 mod 5) · 2 = 4: (+4, +1); then one peer from the book's first entry.
    assert_eq!(s.out_peers(0, 62), [4, 1]);
    assert_eq!(s.out_peers(0, 63), [1]);
    assert_eq!(s.out_peers(0, 64), [7]);
}

#[test]
fn bad_schedules_are_refused_at_their_entry() {
    let err = |peers: usize, sched: &[(u64, usize)]| {
        Topology::build(&topology(peers, sched), 8, &BuildEnv::new(SEED))
            .unwrap_err()
            .to_string()
    };
    let e = err(1, &[(0, 1), (30, 6)]);
    assert!(e.contains("topology.peers_schedule[1]"), "{e}");
    assert!(e.contains("phone book's length, 5"), "{e}");
    let e = err(1, &[(0, 0)]);
    assert!(e.contains("topology.peers_schedule[0]"), "{e}");
    let e = err(1, &[(0, 1), (30, 2), (30, 1)]);
    assert!(e.contains("topology.peers_schedule[2]"), "{e}");
    assert!(e.contains("epoch 30 does not come after"), "{e}");
    let e = err(1, &[(5, 2), (3, 1)]);
    assert!(e.contains("topology.peers_schedule[1]"), "{e}");
    // The TOML form.
    let cfg: TopologyConfig = toml::from_str(
        "kind = \"bidirectional-exponential\"\npeers_schedule = [[0, 1], [30, 2]]\n",
    )
    .unwrap();
    assert_eq!(cfg, topology(1, &[(0, 1), (30, 2)]));
}

/// Keeps the message log.
#[derive(Default)]
struct Messages(Vec<MessageRecord>);

impl Observer for Messages {
    fn on_eval(&mut self, _: &EvalPoint) -> Result<(), String> {
        Ok(())
    }
    fn on_message(&mut self, r: &MessageRecord) -> Result<(), String> {
        self.0.push(*r);
        Ok(())
    }
}

#[test]
fn sgp_follows_the_switch_and_conserves_its_weight() {
    // 8 nodes, 1 peer per iteration, 2 from epoch 1 (iteration 125), for SGP and Overlap-SGP.
    let n = 8;
    for cfg in [
        AlgorithmConfig::from(AlgorithmKind::Sgp(SgpConfig::default())),
        AlgorithmConfig::from(AlgorithmKind::OverlapSgp(OverlapSgpConfig {
            tau: 1,
            send: SendRule::EveryIteration,
        })),
    ] {
        let mut store = quadratic_store(n, SEED);
        let opt = optimizer(0.05, 0.5);
        let mut world = world(
            &cfg,
            &cluster(n, &[(5, 1.5)]),
            &net(10.0, 500.0),
            topology(1, &[(0, 1), (1, 2)]),
            &mut store,
            &opt,
            SEED,
        );
        world.set_metrics(&MetricsConfig {
            log_messages: true,
            ..Default::default()
        });
        let schedule = world.topology.training_schedule(1, 1000);
        let mut alg = match &cfg.algorithm {
            AlgorithmKind::Sgp(c) => Sgp::synchronous(c, &schedule),
            AlgorithmKind::OverlapSgp(c) => Sgp::overlap(c, &schedule),
            _ => unreachable!(),
        };
        let mut obs = Messages::default();
        let mut events = 0u64;
        run_inspect(
            &mut alg,
            &mut world,
            &stop_at(2.5),
            &mut obs,
            &mut |alg: &Sgp, _, _| {
                // Push-sum: the nodes' weights and those of the messages not yet mixed sum to n.
                let total: f64 = alg.weights().iter().sum::<f64>()
                    + alg.unmixed().iter().map(|&(_, w)| w).sum::<f64>();
                assert!((total - n as f64).abs() < 1e-9, "{}: {total}", cfg.kind());
                events += 1;
            },
        )
        .unwrap();
        let iters = alg.iterations();
        assert!(iters.iter().all(|&k| k > 140), "{}: {iters:?}", cfg.kind());
        // Every node sends, in order, to the peers of the schedule at its iterations 0, 1, …:
        // one per iteration before iteration 125, two after.
        for i in 0..n {
            let mut sent: Vec<&MessageRecord> = obs.0.iter().filter(|m| m.src == i).collect();
            sent.sort_by_key(|m| m.send);
            let want: Vec<usize> = (0..)
                .flat_map(|k| schedule.out_peers(i, k))
                .take(sent.len())
                .collect();
            let got: Vec<usize> = sent.iter().map(|m| m.dst).collect();
            assert_eq!(got, want, "{}: node {i}", cfg.kind());
            let before: usize = (0..125).map(|k| schedule.out_peers(i, k).len()).sum();
            assert_eq!(before, 125);
            assert!(
                sent.len() > before + 2 * 10,
                "{}: {}",
                cfg.kind(),
                sent.len()
            );
        }
        assert!(events > 1000);
    }
}
