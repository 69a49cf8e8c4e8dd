//! Deadlock freedom: every shipped scenario runs to its stop rule on the exact store (its
//! cluster, network, topology, optimizer and algorithms; a quadratic in place of its model), and a
//! run whose event queue empties while workers wait stops with an error naming who waits for
//! whom.

mod common;

use std::path::PathBuf;

use dasim_sim::Error;
use dasim_sim::algorithm::Ctx;
use dasim_sim::prelude::*;

/// The sections of a scenario file the engine owns (the model and data sections belong to
/// `dasim-models`).
#[derive(serde::Deserialize)]
struct Sections {
    #[serde(default)]
    seed: u64,
    cluster: ClusterConfig,
    #[serde(default)]
    network: NetworkConfig,
    #[serde(default)]
    topology: TopologyConfig,
    #[serde(default)]
    optimizer: OptimizerConfig,
    run: RunConfig,
    algorithms: Vec<AlgorithmConfig>,
}

fn scenario_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

fn run_scenario(path: &PathBuf) -> Vec<(String, Outcome)> {
    let text = std::fs::read_to_string(path).unwrap();
    let s: Sections = toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let env = BuildEnv::new(s.seed).with_base_dir(path.parent().unwrap());
    s.cluster.validate().unwrap();
    s.network.validate_nodes(s.cluster.workers).unwrap();
    s.optimizer.validate().unwrap();
    s.run.validate().unwrap();
    let n = s.cluster.workers;
    let topology = Topology::build(&s.topology, n, &env).unwrap();
    let mut out = Vec::new();
    for (i, alg) in s.algorithms.iter().enumerate() {
        alg.validate(&topology, &format!("algorithms[{i}]"), Some(256))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // A 256-parameter quadratic stands in for the model (the digits MLP has 2410): smaller
        // messages, the same protocol.
        let mut store = ReferenceStore::new(
            Quadratic::new(256, 10.0, 0.1),
            n,
            s.optimizer.clone(),
            s.seed,
        );
        let mut world = World::new(
            Cluster::new(&s.cluster, &env).unwrap(),
            Network::new(&s.network, n + alg.extra_nodes(), &env).unwrap(),
            topology.clone(),
            &mut store,
            &s.optimizer,
            s.seed,
        );
        let mut run_cfg = s.run.clone();
        run_cfg.eval_every_s = run_cfg.eval_every_s.max(0.5);
        let outcome = dasim_sim::algorithms::run_algorithm(
            alg,
            &mut world,
            &run_cfg,
            &mut Collect::default(),
        )
        .unwrap_or_else(|e| panic!("{} / {}: {e}", path.display(), alg.label()));
        out.push((alg.label(), outcome));
    }
    out
}

fn check_scenario(file: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let s: Sections = toml::from_str(&text).unwrap();
    for (label, outcome) in run_scenario(&path) {
        let limit = s.run.sim_time_s.unwrap();
        assert_eq!(
            outcome.sim_time,
            SimTime::from_secs_f64(limit),
            "{file} / {label} stopped early"
        );
        assert!(outcome.worker_steps > 1000, "{file} / {label}");
    }
}

macro_rules! scenario_tests {
    ($($name:ident => $file:literal),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                check_scenario($file);
            }
        )*
        const TESTED: &[&str] = &[$($file),*];
    };
}

scenario_tests! {
    quickstart_runs_without_deadlock => "quickstart.toml",
    allreduce_scenario_runs_without_deadlock => "allreduce.toml",
    local_sgd_scenario_runs_without_deadlock => "local-sgd.toml",
    ps_scenario_runs_without_deadlock => "ps.toml",
    dpsgd_scenario_runs_without_deadlock => "dpsgd.toml",
    adpsgd_scenario_runs_without_deadlock => "adpsgd.toml",
    sgp_scenario_runs_without_deadlock => "sgp.toml",
    overlap_sgp_scenario_runs_without_deadlock => "overlap-sgp.toml",
    dasgd_scenario_runs_without_deadlock => "dasgd.toml",
    lap_sgd_scenario_runs_without_deadlock => "lap-sgd.toml",
    lpp_sgd_scenario_runs_without_deadlock => "lpp-sgd.toml",
    lenet_scenario_runs_without_deadlock => "lenet.toml",
    quadratic_scenario_runs_without_deadlock => "quadratic.toml",
    softmax_regression_scenario_runs_without_deadlock => "softmax-regression.toml",
}

#[test]
fn every_shipped_scenario_is_run_and_every_algorithm_has_one() {
    let files: Vec<String> = scenario_files()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for f in &files {
        assert!(
            TESTED.contains(&f.as_str()),
            "scenarios/{f} has no deadlock test here: add it to scenario_tests!"
        );
    }
    let mut kinds = std::collections::BTreeSet::new();
    for path in scenario_files() {
        let s: Sections = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        kinds.extend(s.algorithms.iter().map(|a| a.kind()));
    }
    // Every registered kind, so a new algorithm cannot ship without a scenario.
    for kind in AlgorithmKind::KINDS {
        assert!(kinds.contains(kind), "no scenario runs {kind}");
    }
}

/// Two workers that each wait for the other's message, which neither sends.
struct Stuck;

impl Algorithm for Stuck {
    type Event = ();
    fn name(&self) -> &str {
        "stuck"
    }
    fn start(&mut self, cx: &mut Ctx<'_, '_, ()>) {
        cx.after(SimTime::from_nanos(1_000), ());
    }
    fn handle(&mut self, _: (), _: &mut Ctx<'_, '_, ()>) {}
    fn waiting(&self) -> Vec<String> {
        vec![
            "worker 0 waits for the model of iteration 3 from worker 1".into(),
            "worker 1 waits for the model of iteration 3 from worker 0".into(),
        ]
    }
}

#[test]
fn an_empty_queue_with_waiting_workers_is_a_deadlock_naming_who_waits_for_whom() {
    let n = 2;
    let env = BuildEnv::new(1);
    let opt = OptimizerConfig::default();
    let mut store = ReferenceStore::new(Quadratic::new(4, 1.0, 0.0), n, opt.clone(), 1);
    let mut world = World::new(
        Cluster::new(&common::cluster(n, &[]), &env).unwrap(),
        Network::new(&common::net(10.0, 5.0), n, &env).unwrap(),
        Topology::build(&TopologyConfig::Ring {}, n, &env).unwrap(),
        &mut store,
        &opt,
        1,
    );
    let err = run(
        &mut Stuck,
        &mut world,
        &common::stop_at(1.0),
        &mut Collect::default(),
    )
    .unwrap_err();
    match &err {
        Error::Deadlock { time, waiting } => {
            assert_eq!(*time, SimTime::from_nanos(1_000));
            assert_eq!(waiting.len(), 2);
        }
        other => panic!("{other}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("worker 0 waits for the model of iteration 3 from worker 1"),
        "{msg}"
    );
}

#[test]
fn every_algorithm_reports_who_waits_for_whom_mid_run() {
    // Stopped mid-run, the synchronous algorithms have workers waiting, and say for whom.
    let n = 8;
    let cases = [
        (
            AlgorithmConfig::from(AlgorithmKind::AllReduce(AllReduceConfig::default())),
            "to contribute to all-reduce",
        ),
        (
            AlgorithmConfig::from(AlgorithmKind::LocalSgd(LocalSgdConfig {
                h: 1,
                ..Default::default()
            })),
            "to contribute to all-reduce",
        ),
        (
            AlgorithmConfig::from(AlgorithmKind::Dpsgd(DpsgdConfig::default())),
            "waits for the model of iteration",
        ),
        (
            AlgorithmConfig::from(AlgorithmKind::Sgp(SgpConfig::default())),
            "waits for the push-sum message of iteration",
        ),
        (
            AlgorithmConfig::from(AlgorithmKind::Ps(PsConfig {
                staleness: Some(0),
                ..Default::default()
            })),
            "waits for server shard 0 to serve its pull",
        ),
        (
            AlgorithmConfig::from(AlgorithmKind::AdPsgd(AdPsgdConfig::default())),
            "waits for the averaging reply of worker",
        ),
        (
            AlgorithmConfig::from(AlgorithmKind::LapSgd(LapSgdConfig {
                processes: 1,
                h: 1,
                step_time_factor: Some(1.0),
            })),
            "the averaging loop of worker",
        ),
    ];
    for (cfg, expect) in cases {
        let env = BuildEnv::new(3);
        let opt = OptimizerConfig::default();
        let mut store = ReferenceStore::new(Quadratic::new(64, 1.0, 0.0), n, opt.clone(), 3);
        let mut world = World::new(
            Cluster::new(&common::cluster(n, &[(2, 8.0)]), &env).unwrap(),
            Network::new(&common::net(0.01, 50.0), n + cfg.extra_nodes(), &env).unwrap(),
            Topology::build(&TopologyConfig::Ring {}, n, &env).unwrap(),
            &mut store,
            &opt,
            3,
        );
        let mut seen = Vec::new();
        macro_rules! go {
            ($alg:expr) => {{
                let mut alg = $alg;
                run_inspect(
                    &mut alg,
                    &mut world,
                    &common::stop_at(0.3),
                    &mut Collect::default(),
                    &mut |a, _, _| seen.extend(a.waiting()),
                )
                .unwrap();
            }};
        }
        let topo = world.topology.clone();
        match &cfg.algorithm {
            AlgorithmKind::AllReduce(c) => go!(AllReduceSgd::new(c, n)),
            AlgorithmKind::LocalSgd(c) => go!(LocalSgd::new(c, n)),
            AlgorithmKind::Dpsgd(c) => go!(Dpsgd::new(c, &topo)),
            AlgorithmKind::Sgp(c) => go!(Sgp::synchronous(c, topo.schedule())),
            AlgorithmKind::Ps(c) => go!(ParameterServer::new(c, n)),
            AlgorithmKind::AdPsgd(c) => go!(AdPsgd::new(c, &topo.bipartition().unwrap(), 3)),
            AlgorithmKind::LapSgd(c) => go!(LapSgd::new(c, n, false)),
            _ => unreachable!(),
        }
        assert!(
            seen.iter().any(|s| s.contains(expect)),
            "{}: {:?}",
            cfg.kind(),
            seen.first()
        );
    }
}
