//! DASGD's staleness bookkeeping against the definition, on random schedules: random speeds,
//! both broadcast modes, several topologies, lost messages and crashes. The reference keeps
//! every model's gradient set and every read as sets of gradient ids and measures `|G_j Δ R|`
//! by walking them (`O(n)` and more per application); the algorithm's running statistics must
//! be the same numbers after every single application (count, maximum, and the running mean to
//! the bit), and its pairwise staleness and lost-gradient floor the same at the end.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use dasim_sim::algorithm::Algorithm;
use dasim_sim::algorithms::AlgorithmConfig;
use dasim_sim::algorithms::dasgd::{Broadcast, Dasgd, DasgdConfig};
use dasim_sim::cluster::stragglers::JitterConfig;
use dasim_sim::engine::run_inspect;
use dasim_sim::fault::{FaultConfig, Faults};
use dasim_sim::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use common::*;

fn faults(text: &str, n: usize, seed: u64) -> Faults {
    #[derive(serde::Deserialize)]
    struct Doc {
        #[serde(default)]
        faults: Vec<FaultConfig>,
    }
    let doc: Doc = toml::from_str(text).expect("valid faults");
    Faults::new(&doc.faults, n, &BuildEnv::new(seed)).unwrap()
}

/// One random schedule: returns how many applications were checked.
fn check(seed: u64) -> (u64, u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = rng.random_range(2..=10usize);
    let broadcast = if rng.random_bool(0.5) {
        Broadcast::All
    } else {
        Broadcast::Topology
    };
    let topology = match rng.random_range(0..4) {
        0 => TopologyConfig::Ring {},
        1 => TopologyConfig::Complete {},
        2 => TopologyConfig::Star {},
        _ if n > 3 && n % 2 == 0 => TopologyConfig::RandomRegular { degree: 3 },
        _ => TopologyConfig::Ring {},
    };
    // Random speeds: a lognormal factor per step for everyone, a mean per worker.
    let mut cluster_cfg = ClusterConfig::new(n).with_step_time_ms(rng.random_range(2.0..10.0));
    for w in 0..n {
        cluster_cfg = cluster_cfg.with_straggler(StragglerConfig::new(
            vec![w],
            StragglerModel::Jitter(JitterConfig {
                distribution: Distribution::Lognormal,
                mean: rng.random_range(1.0..4.0),
                cv: Some(rng.random_range(0.05..1.0)),
                shape: None,
            }),
        ));
    }
    // A network slow enough that gradients overtake each other across links.
    let net_cfg =
        NetworkConfig::uniform(rng.random_range(0.01..1.0), rng.random_range(0.0..3000.0));
    let mut text = String::new();
    if rng.random_bool(0.6) {
        text += &format!(
            "[[faults]]\nkind = \"loss\"\nprobability = {}\n",
            rng.random_range(0.01..0.3)
        );
    }
    if rng.random_bool(0.3) {
        text += &format!(
            "[[faults]]\nkind = \"crash\"\nworkers = [{}]\nat_s = {}\nrejoin_after_s = {}\n",
            rng.random_range(0..n),
            rng.random_range(0.01..0.1),
            rng.random_range(0.005..0.05)
        );
    }
    let cfg = DasgdConfig { broadcast };
    let alg_cfg = AlgorithmConfig::from(cfg.clone());
    let mut store = Checked::new(ReferenceStore::new(
        Quadratic::new(4, 10.0, 0.1),
        n,
        optimizer(0.01, 0.0),
        seed,
    ));
    let mut world = world(
        &alg_cfg,
        &cluster_cfg,
        &net_cfg,
        topology,
        &mut store,
        &optimizer(0.01, 0.0),
        seed,
    );
    let faulty = !text.is_empty();
    world.set_faults(faults(&text, n, seed));
    let mut alg = Dasgd::new(&cfg, &world.topology);
    if faulty {
        alg = alg.with_faults();
    }
    // The statistics after each application (an event applies at most one gradient).
    let mut seen: Vec<StalenessStats> = Vec::new();
    let stop = stop_at(rng.random_range(0.1..0.4));
    run_inspect(
        &mut alg,
        &mut world,
        &stop,
        &mut Collect::default(),
        &mut |a: &Dasgd, _, _| {
            let s = a.staleness().unwrap();
            if s.count > seen.len() as u64 {
                assert_eq!(s.count, seen.len() as u64 + 1, "one application per event");
                seen.push(s);
            }
        },
    )
    .unwrap();

    // The definition, on sets of gradient ids.
    let mut sets: Vec<BTreeSet<GradId>> = vec![BTreeSet::new(); n];
    let mut read: BTreeMap<GradId, BTreeSet<GradId>> = BTreeMap::new();
    let mut stats = StalenessStats::default();
    let mut k = 0;
    for op in &store.log {
        match *op {
            Op::Request { worker, grad } => {
                read.insert(grad, sets[worker].clone());
            }
            Op::Apply { row, grad } => {
                let s = sets[row].symmetric_difference(&read[&grad]).count() as u64;
                stats.record(s);
                let got = seen[k];
                assert_eq!(
                    (got.count, got.max, got.mean.to_bits()),
                    (stats.count, stats.max, stats.mean.to_bits()),
                    "seed {seed}: application {k} ({row} applies {grad:?}): measured {got:?}, expected {stats:?} (last {s})"
                );
                k += 1;
                sets[row].insert(grad);
            }
        }
    }
    assert_eq!(k, seen.len(), "seed {seed}");
    for i in 0..n {
        for j in 0..n {
            assert_eq!(
                alg.staleness_between(i, j),
                sets[i].symmetric_difference(&sets[j]).count() as u64,
                "seed {seed}: models {i} and {j}"
            );
        }
    }
    // The floor of lost gradients, as the definition says it, over every pair and origin.
    let none = BTreeSet::new();
    let mut floor = 0;
    for i in 0..n {
        for j in i + 1..n {
            let d: u64 = (0..n)
                .map(|o| {
                    let (a, b) = (
                        alg.lost(i, o).unwrap_or(&none),
                        alg.lost(j, o).unwrap_or(&none),
                    );
                    a.symmetric_difference(b).count() as u64
                })
                .sum();
            floor = floor.max(d);
        }
    }
    assert_eq!(alg.lost_divergence_max(), floor, "seed {seed}");
    (k as u64, floor)
}

#[test]
fn dasgd_staleness_equals_the_definition_on_random_schedules() {
    let mut applications = 0;
    let mut with_losses = 0;
    for seed in 0..150 {
        let (k, floor) = check(seed);
        applications += k;
        with_losses += (floor > 0) as u64;
    }
    // The schedules exercise what they should: many applications, and lost gradients in some.
    assert!(applications > 20_000, "{applications}");
    assert!(with_losses > 20, "{with_losses}");
}
