//! The parameter server with `aggregate = M`: each update is the mean of the first `M`
//! gradients to arrive, applied as one optimizer step; on the exact reference store.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use dasim_sim::prelude::*;
use dasim_sim::store::blocks;

const SEED: u64 = 11;
const MS: u64 = 1_000_000;

/// Plain SGD at a constant rate: the server model is then `x0 − η Σ` of what it applied.
fn sgd(lr: f64) -> OptimizerConfig {
    optimizer(lr, 0.0)
}

fn store_with(n: usize, lr: f64) -> Checked {
    Checked::new(ReferenceStore::new(
        Quadratic::new(16, 10.0, 0.1),
        n,
        sgd(lr),
        SEED,
    ))
}

/// What a run of the parameter server showed: every aggregate formed (its mean and members,
/// in arrival order), the simulated time (ns) at which each `k`-th aggregate was done at every
/// shard, and the server model after each.
#[derive(Default)]
struct Seen {
    formed: Vec<(GradId, Vec<GradId>)>,
    done_at: Vec<u64>,
    server_after: Vec<Vec<f64>>,
}

fn run_ps(
    c: &PsConfig,
    cluster_cfg: &ClusterConfig,
    store: &mut Checked,
    lr: f64,
    stop: &RunConfig,
) -> (Outcome, ParameterServer, Seen) {
    let n = cluster_cfg.workers;
    let cfg = AlgorithmConfig::from(AlgorithmKind::Ps(c.clone()));
    let shared = store.shared();
    let mut world = world(
        &cfg,
        cluster_cfg,
        &net(10.0, 5.0),
        TopologyConfig::Ring {},
        store,
        &sgd(lr),
        SEED,
    );
    let mut alg = ParameterServer::new(c, n);
    let mut seen = Seen::default();
    let outcome = run_inspect(
        &mut alg,
        &mut world,
        stop,
        &mut Collect::default(),
        &mut |a: &ParameterServer, _, now: SimTime| {
            if let (count, Some((mean, members))) = a.last_formed()
                && count as usize > seen.formed.len()
            {
                seen.formed.push((mean, members.to_vec()));
            }
            if a.aggregates_done() as usize > seen.done_at.len() {
                seen.done_at.push(now.as_nanos());
                seen.server_after
                    .push(shared.borrow().params(a.server_row()).to_vec());
            }
        },
    )
    .unwrap();
    (outcome, alg, seen)
}

/// The worker that requested `g`, and which of its gradients it was (0-based).
fn origin(store: &Checked, g: GradId) -> (usize, usize) {
    let mut count = BTreeMap::new();
    for op in &store.log {
        if let Op::Request { worker, grad } = op {
            let k = count.entry(*worker).or_insert(0);
            if *grad == g {
                return (*worker, *k);
            }
            *k += 1;
        }
    }
    panic!("{g:?} was never requested")
}

fn mean_of(store: &Checked, members: &[GradId]) -> Vec<f64> {
    let mut m = vec![0.0; 16];
    for g in members {
        for (a, v) in m.iter_mut().zip(&store.values[g]) {
            *a += v / members.len() as f64;
        }
    }
    m
}

/// 4 workers with fixed step times T = 10, 20, 30, 40 ms (workers 1–3 are 2, 3, 4× stragglers),
/// one server, M = 2, 10 Gb/s and 5 µs latency (serialization of these 16-parameter messages is
/// well under a µs). A worker's first push lands after its pull request, the reply, its step
/// and the push (3 × 5 µs); afterwards it posts its pull right behind its push, so each further
/// cycle adds 10 µs: worker i's k-th push (k = 1, 2, …) lands at k·T_i + (10k + 5) µs. Up to
/// 65 ms, at (ms + µs):
///
/// ```text
/// w0: 10+15  20+25  30+35  40+45  50+55  60+65
/// w1:        20+15         40+25         60+35
/// w2:               30+15                60+25
/// w3:                      40+15
/// ```
///
/// In arrival order: w0₀ w1₀ | w0₁ w2₀ | w0₂ w3₀ | w1₁ w0₃ | w0₄ w2₁ | w1₂ w0₅ (subscript: the
/// worker's gradient number), so the six updates are those pairs, each applied when its second
/// member lands: at 20.015, 30.015, 40.015, 40.045, 60.025 and 60.065 ms.
///
/// Staleness (updates between the serving of the pull a gradient was computed on and its
/// update; the server's version v counts updates): w0₀, w1₀ read v0, applied at v0: 0, 0. w0₁
/// read v0 (pulled at 10 ms), w2₀ v0, applied at v1: 1, 1. w0₂ read v1 (pulled at 20.025 ms,
/// after the first update), w3₀ v0, at v2: 1, 2. w1₁ read v1, w0₃ v2, at v3: 2, 1. w0₄ read
/// v4 (its pull lands right after its own push made the fourth update), w2₁ v2, at v4: 0, 2.
/// w1₂ read v3, w0₅ v4, at v5: 2, 1. In all 13 over 12 gradients, at most 2.
#[test]
fn the_server_applies_the_mean_of_each_pair_in_arrival_order() {
    let n = 4;
    let lr = 0.02;
    let c = PsConfig {
        aggregate: 2,
        ..Default::default()
    };
    let mut store = store_with(n, lr);
    let (outcome, alg, seen) = run_ps(
        &c,
        &cluster(n, &[(1, 2.0), (2, 3.0), (3, 4.0)]),
        &mut store,
        lr,
        &stop_at(0.065),
    );
    let pairs: Vec<Vec<(usize, usize)>> = seen
        .formed
        .iter()
        .map(|(_, m)| m.iter().map(|&g| origin(&store, g)).collect())
        .collect();
    assert_eq!(
        pairs,
        vec![
            vec![(0, 0), (1, 0)],
            vec![(0, 1), (2, 0)],
            vec![(0, 2), (3, 0)],
            vec![(1, 1), (0, 3)],
            vec![(0, 4), (2, 1)],
            vec![(1, 2), (0, 5)],
        ]
    );
    let ms: Vec<u64> = seen.done_at.iter().map(|t| t / MS).collect();
    assert_eq!(ms, vec![20, 30, 40, 40, 60, 60]);
    // Within a millisecond, the µs of the table: 20 ms + 15 µs, …, 60 ms + 65 µs.
    let us: Vec<u64> = seen.done_at.iter().map(|t| t % MS / 1_000).collect();
    assert_eq!(us, vec![15, 15, 15, 45, 25, 65], "{:?}", seen.done_at);
    // Each update is one optimizer step with the mean of its pair, and nothing else is applied.
    let applied: Vec<GradId> = store.applications.iter().map(|a| a.1).collect();
    let means: Vec<GradId> = seen.formed.iter().map(|f| f.0).collect();
    assert_eq!(applied, means);
    let x0 = store.reads[0][0].clone();
    let mut x = x0.clone();
    for (k, (_, members)) in seen.formed.iter().enumerate() {
        let m = mean_of(&store, members);
        for (a, g) in x.iter_mut().zip(&m) {
            *a -= lr * g;
        }
        assert!(rel_diff(&seen.server_after[k], &x) < 1e-12, "update {k}");
    }
    // Pulls are served from the current model: worker 0's second pull (served at 10 ms, its
    // gradient buffered until worker 1's lands) reads x0, without its own first gradient.
    assert_eq!(store.reads[0][1], x0);
    // Every applied gradient counts its worker's step; none is left buffered at 65 ms.
    assert_eq!(outcome.worker_steps, 12);
    assert!(alg.buffered().is_empty());
    // Staleness, as worked out above.
    let st = outcome.staleness.unwrap();
    assert_eq!((st.count, st.max), (12, 2));
    assert!((st.mean * 12.0 - 13.0).abs() < 1e-9, "{st:?}");
}

/// `aggregate = 1` (the default) is today's server: one update per gradient, as it lands, and
/// the key is not written back.
#[test]
fn one_gradient_per_update_is_the_asynchronous_server() {
    let n = 4;
    let lr = 0.02;
    let go = |c: &PsConfig| {
        let mut store = store_with(n, lr);
        let (outcome, alg, _) = run_ps(
            c,
            &cluster(n, &[(1, 2.0), (2, 3.0), (3, 4.0)]),
            &mut store,
            lr,
            &stop_at(0.065),
        );
        assert_eq!(alg.last_formed(), (0, None));
        (outcome.worker_steps, store.log, store.applications)
    };
    let plain = go(&PsConfig::default());
    let one = go(&PsConfig {
        aggregate: 1,
        ..Default::default()
    });
    assert_eq!(plain, one);
    // Every pushed gradient is applied as is, the moment it lands.
    assert!(plain.2.iter().all(|(_, g, _)| {
        plain
            .1
            .iter()
            .any(|op| matches!(op, Op::Request { grad, .. } if grad == g))
    }));
    assert_eq!(plain.2.len(), 12);
    let toml = toml::to_string(&AlgorithmConfig::from(AlgorithmKind::Ps(
        PsConfig::default(),
    )))
    .unwrap();
    assert!(!toml.contains("aggregate"), "{toml}");
}

/// Several shards, a straggler, M = 3: every gradient pushed is applied exactly once, as a
/// member of one aggregate, whose mean each shard applies exactly once to its block.
#[test]
fn every_gradient_is_applied_once_as_part_of_one_aggregate() {
    let n = 6;
    let servers = 3;
    let m = 3;
    let lr = 0.02;
    let c = PsConfig {
        servers,
        aggregate: m,
        ..Default::default()
    };
    let mut store = store_with(n, lr);
    let (outcome, alg, seen) = run_ps(&c, &cluster(n, &[(4, 3.0)]), &mut store, lr, &stop_at(1.0));
    let requested: BTreeSet<GradId> = store
        .log
        .iter()
        .filter_map(|op| match op {
            Op::Request { grad, .. } => Some(*grad),
            _ => None,
        })
        .collect();
    let mut members = BTreeSet::new();
    for (_, ms) in &seen.formed {
        assert_eq!(ms.len(), m);
        for g in ms {
            assert!(requested.contains(g));
            assert!(members.insert(*g), "{g:?} in two aggregates");
        }
    }
    let buffered = alg.buffered();
    assert!(buffered.len() < m);
    // The rest are in flight: at most one per worker (being computed, or its push on the way).
    let left = requested.len() - members.len() - buffered.len();
    assert!(left <= n, "{left}");
    // Each mean is applied once per shard block, at most; those done at every shard are the
    // aggregates counted, and each counts its M workers' steps.
    let shards = blocks(16, servers);
    let mut per_mean: BTreeMap<GradId, Vec<std::ops::Range<usize>>> = BTreeMap::new();
    for (row, g, block) in &store.applications {
        assert_eq!(*row, alg.server_row());
        per_mean.entry(*g).or_default().push(block.clone());
    }
    let means: BTreeMap<GradId, &Vec<GradId>> = seen.formed.iter().map(|(g, m)| (*g, m)).collect();
    let mut complete = 0;
    for (g, mut b) in per_mean {
        assert!(means.contains_key(&g), "{g:?} is no aggregate's mean");
        b.sort_by_key(|r| r.start);
        b.dedup();
        assert!(b.len() <= servers);
        complete += usize::from(b == shards);
    }
    assert_eq!(complete as u64, alg.aggregates_done());
    assert_eq!(outcome.worker_steps, m as u64 * alg.aggregates_done());
    assert!(outcome.worker_steps > 200, "{}", outcome.worker_steps);
    // Plain SGD: the server model is x0 − η Σ block of each applied mean of its members.
    let mut x = store.reads[0][0].clone();
    for (_, g, block) in &store.applications {
        let mean = mean_of(&store, means[g]);
        for k in block.clone() {
            x[k] -= lr * mean[k];
        }
    }
    assert!(rel_diff(&store.params(alg.server_row()), &x) < 1e-12);
    // And it converges.
    let start = store.shared().borrow().problem().value(&store.reads[0][0]);
    assert!(
        outcome.final_eval.loss < start / 10.0,
        "{:?}",
        outcome.final_eval
    );
}

#[test]
fn aggregate_must_be_between_one_and_the_number_of_workers() {
    let env = BuildEnv::new(1);
    let ring = Topology::build(&TopologyConfig::Ring {}, 8, &env).unwrap();
    for (m, ok) in [(0, false), (1, true), (8, true), (9, false)] {
        let cfg: AlgorithmConfig =
            toml::from_str(&format!("kind = \"ps\"\naggregate = {m}")).unwrap();
        match cfg.validate(&ring, "algorithms[2]", Some(100)) {
            Ok(()) => assert!(ok, "aggregate = {m} accepted"),
            Err(e) => {
                assert!(!ok, "aggregate = {m}: {e}");
                assert_eq!(e.path.to_string(), "algorithms[2].aggregate");
                assert!(e.hint.is_some());
                assert!(e.to_string().contains("aggregate"), "{e}");
            }
        }
    }
}
