//! SGP and Overlap-SGP: the gradient is read at `x/w`; Overlap-SGP's send rules on a
//! hand-worked schedule; the paper's rule keeps its event trace.

use crate::common;

use std::cell::RefCell;
use std::ops::Range;
use std::rc::Rc;

use common::*;
use dasim_sim::engine::run_inspect;
use dasim_sim::prelude::*;
use dasim_sim::record::{MessageRecord, MetricsConfig};
use dasim_sim::store::{Evaluation, GradId, Layer, MsgId, ReferenceStore, Slot};

const SEED: u64 = 7;

/// The reference store, recording every `request_gradient_scaled(worker, scale)`.
struct Scales {
    inner: ReferenceStore,
    requests: Rc<RefCell<Vec<(usize, f64)>>>,
}

impl ReplicaStore for Scales {
    fn workers(&self) -> usize {
        self.inner.workers()
    }
    fn rows(&self) -> usize {
        self.inner.rows()
    }
    fn num_params(&self) -> usize {
        self.inner.num_params()
    }
    fn batch_size(&self) -> usize {
        self.inner.batch_size()
    }
    fn train_size(&self) -> usize {
        self.inner.train_size()
    }
    fn layers(&self) -> Vec<Layer> {
        self.inner.layers()
    }
    fn add_rows(&mut self, count: usize) -> usize {
        self.inner.add_rows(count)
    }
    fn request_gradient_scaled(&mut self, worker: usize, scale: f64) -> GradId {
        self.requests.borrow_mut().push((worker, scale));
        self.inner.request_gradient_scaled(worker, scale)
    }
    fn mean_gradient(&mut self, grads: &[GradId]) -> GradId {
        self.inner.mean_gradient(grads)
    }
    fn apply_gradient_block(&mut self, row: usize, grad: GradId, lr: f64, block: Range<usize>) {
        self.inner.apply_gradient_block(row, grad, lr, block)
    }
    fn release_gradient(&mut self, grad: GradId) {
        self.inner.release_gradient(grad)
    }
    fn swap_optimizer_state(&mut self, a: usize, b: usize) {
        self.inner.swap_optimizer_state(a, b)
    }
    fn reset_optimizer_state(&mut self, row: usize) {
        self.inner.reset_optimizer_state(row)
    }
    fn average(&mut self, rows: &[usize]) {
        self.inner.average(rows)
    }
    fn mix(&mut self, dst: usize, terms: &[(Slot, f64)]) {
        self.inner.mix(dst, terms)
    }
    fn new_msg(&mut self, terms: &[(Slot, f64)]) -> MsgId {
        self.inner.new_msg(terms)
    }
    fn release_msg(&mut self, msg: MsgId) {
        self.inner.release_msg(msg)
    }
    fn copy_block(&mut self, dst: usize, src: usize, block: Range<usize>) {
        self.inner.copy_block(dst, src, block)
    }
    fn evaluate(&mut self) -> Evaluation {
        self.inner.evaluate()
    }
    fn evaluate_mix(&mut self, terms: &[(usize, f64)]) -> Evaluation {
        self.inner.evaluate_mix(terms)
    }
    fn take_train_loss(&mut self) -> f64 {
        self.inner.take_train_loss()
    }
    fn consensus_distance(&mut self, scales: Option<&[f64]>) -> f64 {
        self.inner.consensus_distance(scales)
    }
    fn suboptimality(&mut self, terms: Option<&[(usize, f64)]>) -> Option<f64> {
        self.inner.suboptimality(terms)
    }
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

fn overlap(tau: u64, send: SendRule) -> AlgorithmConfig {
    AlgorithmConfig::from(AlgorithmKind::OverlapSgp(OverlapSgpConfig { tau, send }))
}

#[test]
fn sgp_reads_its_gradient_at_x_over_w() {
    // On a star the centre pushes to n − 1 leaves and each leaf to the centre only: the
    // centre's weight falls below 1 and the leaves' rise above it, for every variant.
    let n = 5;
    for cfg in [
        AlgorithmConfig::from(AlgorithmKind::Sgp(SgpConfig::default())),
        overlap(1, SendRule::EveryIteration),
        overlap(2, SendRule::AfterMix),
    ] {
        let requests = Rc::new(RefCell::new(Vec::new()));
        let mut store = Scales {
            inner: quadratic_store(n, SEED),
            requests: Rc::clone(&requests),
        };
        let opt = optimizer(0.05, 0.5);
        let mut world = world(
            &cfg,
            &cluster(n, &[(3, 3.0)]),
            &net(10.0, 5.0),
            TopologyConfig::Star {},
            &mut store,
            &opt,
            SEED,
        );
        let mut alg = match &cfg.algorithm {
            AlgorithmKind::Sgp(c) => Sgp::synchronous(c, world.topology.schedule()),
            AlgorithmKind::OverlapSgp(c) => Sgp::overlap(c, world.topology.schedule()),
            _ => unreachable!(),
        };
        let (mut checked, mut off_one) = (0u64, 0u64);
        run_inspect(
            &mut alg,
            &mut world,
            &stop_at(0.3),
            &mut Collect::default(),
            &mut |alg: &Sgp, _, _| {
                // A step begins last in the event that starts it: the node's weight is still the
                // one it read at.
                let scales = alg.replica_scales().unwrap();
                for (worker, scale) in requests.borrow_mut().drain(..) {
                    assert_eq!(scale, scales[worker], "{}: worker {worker}", cfg.kind());
                    checked += 1;
                    off_one += u64::from((scale - 1.0).abs() > 1e-9);
                }
            },
        )
        .unwrap();
        assert!(checked > 40, "{}: {checked} reads", cfg.kind());
        assert!(
            off_one > checked / 2,
            "{}: {off_one} of {checked}",
            cfg.kind()
        );
    }
}

/// 3 nodes on a ring (each pushes to both others), 10 ms steps, 1 ms links except `0 → 1`,
/// 25 ms; the message log and, per node, the times it blocked on its gossip.
fn three_nodes(cfg: &AlgorithmConfig, secs: f64) -> (Outcome, Vec<MessageRecord>, Vec<Vec<u64>>) {
    let n = 3;
    let net_cfg: NetworkConfig = toml::from_str(
        "bandwidth_gbps = 8000.0\nlatency_us = 1000.0\n\
         [[links]]\nlink = \"0 -> 1\"\nlatency_us = 25000.0\n",
    )
    .unwrap();
    let mut store = quadratic_store(n, SEED);
    let opt = optimizer(0.05, 0.5);
    let mut world = world(
        cfg,
        &cluster(n, &[]),
        &net_cfg,
        TopologyConfig::Ring {},
        &mut store,
        &opt,
        SEED,
    );
    world.set_metrics(&MetricsConfig {
        log_messages: true,
        ..Default::default()
    });
    let AlgorithmKind::OverlapSgp(c) = &cfg.algorithm else {
        unreachable!()
    };
    let mut alg = Sgp::overlap(c, world.topology.schedule());
    let mut obs = Messages::default();
    let mut was = vec![false; n];
    let mut blocked_at = vec![Vec::new(); n];
    let outcome = run_inspect(
        &mut alg,
        &mut world,
        &stop_at(secs),
        &mut obs,
        &mut |alg: &Sgp, _, now| {
            for (i, b) in alg.blocked().into_iter().enumerate() {
                if b && !was[i] {
                    blocked_at[i].push(now.as_nanos());
                }
                was[i] = b;
            }
            // At most one gossip in flight each, by construction; and nothing mixed twice.
            assert_eq!(alg.gossips_in_flight().len(), n);
        },
    )
    .unwrap();
    (outcome, obs.0, blocked_at)
}

/// `node`'s send times in ms, one per gossip (it pushes to both others at once).
fn sends_ms(log: &[MessageRecord], node: usize) -> Vec<f64> {
    let mut t: Vec<f64> = log
        .iter()
        .filter(|m| m.src == node)
        .map(|m| (m.send.as_nanos() as f64 / 1e4).round() / 100.0)
        .collect();
    t.dedup();
    t
}

fn ms(ts: &[u64]) -> Vec<f64> {
    ts.iter()
        .map(|&t| (t as f64 / 1e4).round() / 100.0)
        .collect()
}

#[test]
fn after_mix_sends_again_only_once_its_gossip_is_mixed() {
    // τ = 1 (the reference's --overlap True --synch_freq 0). Every node sends its round 0 at
    // t = 0. Node 2 has everything at 1 ms (its in-peers' messages and its own, all on 1 ms
    // links), so at its first step's end (10 ms) it mixes and sends round 1. Nodes 0 and 1
    // need the message 0 → 1, which lands at 25 ms: they block at 10 ms and at 25 ms both mix,
    // send round 1 and compute (until 35 ms). Node 2's round 1 needs their round-1 messages
    // (sent at 25, landed at 26): it blocks at 20 and sends round 2 at 26. Round 1 of nodes
    // 0 and 1 ends at 50 (0 → 1 again), so they block at 35 and send at 50, and so on: one
    // gossip per 25 ms, paced by the slow link, and node 2 sends 1 ms after them.
    let (_, log, blocked) = three_nodes(&overlap(1, SendRule::AfterMix), 0.09);
    assert_eq!(sends_ms(&log, 0), [0.0, 25.0, 50.0, 75.0]);
    assert_eq!(sends_ms(&log, 1), [0.0, 25.0, 50.0, 75.0]);
    assert_eq!(sends_ms(&log, 2), [0.0, 10.0, 26.0, 51.0, 76.0]);
    assert_eq!(log.iter().filter(|m| m.src == 0).count(), 8);
    assert_eq!(log.iter().filter(|m| m.src == 2).count(), 10);
    assert_eq!(ms(&blocked[0]), [10.0, 35.0, 60.0, 85.0]);
    assert_eq!(ms(&blocked[2]), [20.0, 36.0, 61.0, 86.0]);
    // No node has two gossips in flight: every message of a gossip landed before the node
    // sent the next one.
    for node in 0..3 {
        let mine: Vec<&MessageRecord> = log.iter().filter(|m| m.src == node).collect();
        for a in &mine {
            for b in &mine {
                assert!(
                    b.send <= a.send || a.arrive <= b.send,
                    "node {node}: {a:?} {b:?}"
                );
            }
        }
    }

    // τ = 2 (--synch_freq 1): a gossip may overlap two steps. The reference counts its first
    // forward pre-hook (no gossip yet) as an update, so the first gossip still blocks at 10 ms;
    // from then on nodes 0 and 1 compute 25–35 and 35–45, block 45–50, and so on: two steps
    // per gossip instead of one.
    let (o2, log, blocked) = three_nodes(&overlap(2, SendRule::AfterMix), 0.09);
    assert_eq!(sends_ms(&log, 0), [0.0, 25.0, 50.0, 75.0]);
    assert_eq!(ms(&blocked[0]), [10.0, 45.0, 70.0]);
    // Node 2: sends at 0, 10 (round 0 done), 30 (round 1 done at 26, seen at the end of its
    // step 20–30), blocks at 50 for round 2 (their messages sent at 50 land at 51).
    assert_eq!(sends_ms(&log, 2), [0.0, 10.0, 30.0, 51.0, 76.0]);
    assert_eq!(ms(&blocked[2]), [50.0, 71.0]);
    let (o1, ..) = three_nodes(&overlap(1, SendRule::AfterMix), 0.09);
    assert!(o2.worker_steps > o1.worker_steps);

    // τ = 0 (the reference without overlap): send after the step, wait for the gossip. Node 0
    // sends at 10 ms, mixes at 35 (its message to 1 lands), computes 35–45, sends at 45, …
    let (_, log, _) = three_nodes(&overlap(0, SendRule::AfterMix), 0.09);
    assert_eq!(sends_ms(&log, 0), [10.0, 45.0, 80.0]);

    // The paper's rule sends at the end of every step whatever is in flight: node 0 has sent
    // its second push before its first one to node 1 landed.
    let (_, log, _) = three_nodes(&overlap(1, SendRule::EveryIteration), 0.09);
    let first = log.iter().find(|m| m.src == 0 && m.dst == 1).unwrap();
    assert!(
        log.iter()
            .any(|m| m.src == 0 && m.send > first.send && m.send < first.arrive)
    );
}

/// A digest of a run: events, steps, the message log and the final loss.
fn trace(cfg: &AlgorithmConfig) -> (u64, u64, u64, u64) {
    let n = 6;
    let mut store = quadratic_store(n, SEED);
    let opt = optimizer(0.05, 0.5);
    let mut world = world(
        cfg,
        &cluster(n, &[(2, 3.0)]),
        &net(10.0, 5.0),
        TopologyConfig::OnePeerExponential {},
        &mut store,
        &opt,
        SEED,
    );
    world.set_metrics(&MetricsConfig {
        log_messages: true,
        ..Default::default()
    });
    let mut obs = Messages::default();
    let o = dasim_sim::algorithms::run_algorithm(cfg, &mut world, &stop_at(1.0), &mut obs).unwrap();
    let log = obs.0.iter().fold(0u64, |h, m| {
        let x = [
            m.src as u64,
            m.dst as u64,
            m.send.as_nanos(),
            m.arrive.as_nanos(),
        ];
        x.iter()
            .fold(h, |h, &v| (h ^ v).wrapping_mul(0x100_0000_01b3))
    });
    (o.events, o.worker_steps, log, o.final_eval.loss.to_bits())
}

#[test]
fn every_iteration_keeps_the_papers_event_trace() {
    // Recorded with the implementation before `send` existed (the paper's Algorithm 2 was
    // then the only rule).
    let want = [
        (1, (424, 212, 12758984138696079083, 4555992334660563229)),
        (3, (450, 225, 3586962443344178273, 4559911213600316163)),
    ];
    let got = want.map(|(tau, _)| (tau, trace(&overlap(tau, SendRule::EveryIteration))));
    assert_eq!(got, want);
}

#[test]
fn after_mix_loses_only_the_mass_of_lost_messages_and_stalls_on_a_crashed_peer() {
    #[derive(serde::Deserialize)]
    struct Doc {
        faults: Vec<dasim_sim::fault::FaultConfig>,
    }
    let go = |text: &str, secs: f64| {
        let n = 6;
        let cfg = overlap(2, SendRule::AfterMix);
        let mut store = quadratic_store(n, SEED);
        let opt = optimizer(0.05, 0.5);
        let mut world = world(
            &cfg,
            &cluster(n, &[(1, 2.0)]),
            &net(10.0, 5.0),
            TopologyConfig::OnePeerExponential {},
            &mut store,
            &opt,
            SEED,
        );
        let doc: Doc = toml::from_str(text).unwrap();
        let env = BuildEnv::new(SEED);
        world.set_faults(dasim_sim::fault::Faults::new(&doc.faults, n, &env).unwrap());
        let AlgorithmKind::OverlapSgp(c) = &cfg.algorithm else {
            unreachable!()
        };
        let mut alg = Sgp::overlap(c, world.topology.schedule());
        let out = run_inspect(
            &mut alg,
            &mut world,
            &stop_at(secs),
            &mut Collect::default(),
            &mut |a: &Sgp, _, _| {
                // Nodes + unmixed messages + the mass lost = n, at every event.
                let held: f64 =
                    a.weights().iter().sum::<f64>() + a.unmixed().iter().map(|m| m.1).sum::<f64>();
                assert!((held + a.mass_lost().unwrap() - n as f64).abs() < 1e-9);
            },
        )
        .unwrap();
        (out, alg)
    };
    // Random loss, and a crash with a rejoin: the run goes on, short of the mass lost.
    let (out, alg) = go(
        "[[faults]]\nkind = \"loss\"\nprobability = 0.2\n\
         [[faults]]\nkind = \"crash\"\nworkers = [3]\nat_s = 0.05\nrejoin_after_s = 0.03\n",
        0.5,
    );
    assert!(out.stalled.is_none());
    assert!(out.faults.as_ref().unwrap().stats.lost > 10);
    assert!(alg.mass_lost().unwrap() > 0.0);
    assert!(out.worker_steps > 150, "{}", out.worker_steps);
    // A crash without a rejoin: its out-peers wait for its next gossip, and say so.
    let (out, _) = go(
        "[[faults]]\nkind = \"crash\"\nworkers = [3]\nat_s = 0.05\n",
        1.0,
    );
    let stall = out.stalled.expect("a stall").to_string();
    assert!(
        stall.contains("gossip round") && stall.contains("from node 3 (down)"),
        "{stall}"
    );
}
