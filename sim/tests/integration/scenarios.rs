//! Deadlock freedom: every shipped scenario runs to its stop rule on the exact store (its
//! cluster, network, topology, optimizer and algorithms; a quadratic in place of its model), and a
//! run whose event queue empties while workers wait stops with an error naming who waits for
//! whom.

use crate::common;

use std::path::PathBuf;

use dasim_sim::Error;
use dasim_sim::algorithm::Ctx;
use dasim_sim::clock::time::TimeUnit;
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
    let dir = common::manifest_dir().join("../scenarios");
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
        // The entry's own optimizer where it has one, as a scenario resolves it.
        let opt = alg.optimizer_or(&s.optimizer).clone();
        let mut store = ReferenceStore::new(Quadratic::new(256, 10.0, 0.1), n, opt.clone(), s.seed);
        let mut world = World::new(
            Cluster::new(&s.cluster, &env).unwrap(),
            Network::new(&s.network, n + alg.extra_nodes(), &env).unwrap(),
            topology.clone(),
            &mut store,
            &opt,
            s.seed,
        );
        let mut run_cfg = s.run.clone();
        run_cfg.eval_every_s = run_cfg.eval_every_s.max(0.5);
        // The scenarios' learning rates are set for their models, not for this quadratic, on
        // which some diverge: only the protocol is checked here, so no bound stops a run (a NaN
        // or infinite loss still would).
        run_cfg.divergence_loss = Some(f64::MAX);
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
    let path = common::manifest_dir().join("../scenarios").join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let s: Sections = toml::from_str(&text).unwrap();
    for (label, outcome) in run_scenario(&path) {
        let limit = s.run.sim_time_s.unwrap();
        assert_eq!(
            outcome.sim_time,
            SimTime::from_secs_f64(limit),
            "{file} / {label} stopped early"
        );
        // About a hundred steps at least (all-reduce over diloco.toml's 20 ms WAN takes 280 ms a
        // step, over transformer.toml's 50 ms WAN 320 ms: 4 workers × 25 steps in 8 s): the run
        // went on to its stop, it did not just survive it.
        assert!(
            outcome.worker_steps >= 80,
            "{file} / {label}: {} worker steps",
            outcome.worker_steps
        );
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
    diloco_scenario_runs_without_deadlock => "diloco.toml",
    streaming_diloco_scenario_runs_without_deadlock => "streaming-diloco.toml",
    async_local_sgd_scenario_runs_without_deadlock => "async-local-sgd.toml",
    slowmo_scenario_runs_without_deadlock => "slowmo.toml",
    time_optimal_scenario_runs_without_deadlock => "time-optimal.toml",
    choco_scenario_runs_without_deadlock => "choco.toml",
    powersgd_scenario_runs_without_deadlock => "powersgd.toml",
    lenet_scenario_runs_without_deadlock => "lenet.toml",
    resnet_scenario_runs_without_deadlock => "resnet.toml",
    transformer_scenario_runs_without_deadlock => "transformer.toml",
    muon_scenario_runs_without_deadlock => "muon.toml",
    sparseloco_scenario_runs_without_deadlock => "sparseloco.toml",
    muloco_scenario_runs_without_deadlock => "muloco.toml",
    demo_scenario_runs_without_deadlock => "demo.toml",
    quadratic_scenario_runs_without_deadlock => "quadratic.toml",
    softmax_regression_scenario_runs_without_deadlock => "softmax-regression.toml",
    gradient_tracking_scenario_runs_without_deadlock => "gradient-tracking.toml",
    exact_diffusion_scenario_runs_without_deadlock => "exact-diffusion.toml",
    d2_scenario_runs_without_deadlock => "d2.toml",
    push_diging_scenario_runs_without_deadlock => "push-diging.toml",
    federated_scenario_runs_without_deadlock => "federated.toml",
    sparta_scenario_runs_without_deadlock => "sparta.toml",
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
                ..Default::default()
            })),
            "the averaging loop of worker",
        ),
        (
            AlgorithmConfig::from(AlgorithmKind::Rennala(RennalaConfig {
                batch: 4,
                stops: false,
            })),
            "waits for the server's reply to its gradient at x_",
        ),
        (
            AlgorithmConfig::from(AlgorithmKind::Ringmaster(RingmasterConfig {
                max_delay: 2,
                stops: true,
            })),
            "waits for the server's reply to its gradient at x_",
        ),
        (
            AlgorithmConfig::from(AlgorithmKind::AsyncLocalSgd(
                dasim_sim::algorithms::AsyncLocalSgdConfig {
                    inner_steps: 1,
                    ..Default::default()
                },
            )),
            "waits for the server's model answering its request",
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
            AlgorithmKind::Rennala(c) => go!(Rennala::new(c, n)),
            AlgorithmKind::Ringmaster(c) => go!(Ringmaster::new(c, n)),
            AlgorithmKind::AsyncLocalSgd(c) => {
                go!(dasim_sim::algorithms::AsyncLocalSgd::new(c, n))
            }
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

/// An `[[algorithms]]` entry of `kind` with its defaults (and the options a kind requires).
/// An entry's own optimizer: plain SGD.
const PLAIN_SGD: &str = "\noptimizer = { kind = \"sgd\", lr = 0.05, momentum = 0.0 }";

fn default_entry(kind: &str) -> AlgorithmConfig {
    let required = match kind {
        "post-local-sgd" => "\nwarmup_steps = 10",
        "diloco" => "\ninner_steps = 10",
        "streaming-diloco" => "\ninner_steps = 10",
        "sparseloco" => "\ninner_steps = 10",
        // MuLoCo runs Muon inside (on the quadratic, which has no matrix: Muon's AdamW).
        "muloco" => "\ninner_steps = 10\noptimizer = { kind = \"muon\", lr = 0.02 }",
        "rennala" => "\nbatch = 2",
        "ringmaster" => "\nmax_delay = 3",
        "choco" => "\nconsensus_lr = 0.5\ncompression = { kind = \"top-k\", fraction = 0.5 }",
        // The bias-corrected methods take plain SGD steps; D² needs λ_min(W) > −1/3, which a
        // ring of 4 does not have and the complete graph does.
        "gradient-tracking" | "exact-diffusion" | "push-diging" | "demo" => PLAIN_SGD,
        "d2" => {
            "\ntopology = { kind = \"complete\" }\noptimizer = { kind = \"sgd\", lr = 0.05, momentum = 0.0 }"
        }
        _ => "",
    };
    toml::from_str(&format!("kind = \"{kind}\"{required}"))
        .unwrap_or_else(|e| panic!("{kind}: {e}"))
}

/// A run with no time limit, steps of `step_ms` and the stop rule `stop`, on four workers of a
/// ring with all-reduce.
fn allreduce_run(step_ms: f64, stop: &RunConfig) -> Result<(Outcome, Vec<EvalPoint>), Error> {
    let n = 4;
    let alg = default_entry("allreduce");
    let cluster = ClusterConfig::new(n).with_step_time_ms(step_ms);
    cluster.validate().unwrap();
    stop.validate().unwrap();
    let mut store = common::quadratic_store(n, 5);
    let opt = common::optimizer(0.05, 0.5);
    let mut world = common::world(
        &alg,
        &cluster,
        &common::net(10.0, 5.0),
        TopologyConfig::Ring {},
        &mut store,
        &opt,
        5,
    );
    let mut points = Collect::default();
    let outcome = dasim_sim::algorithms::run_algorithm(&alg, &mut world, stop, &mut points)?;
    Ok((outcome, points.0))
}

fn max_s() -> f64 {
    SimTime::max_config_in(TimeUnit::Seconds)
}

/// The largest time limit a scenario may set, on a tiny scenario whose step budget ends it
/// first: nothing overflows, and the run stops at its budget.
#[test]
fn the_largest_time_limit_runs_a_small_scenario_to_its_step_budget() {
    let stop = RunConfig {
        sim_time_s: Some(max_s()),
        epochs: None,
        worker_steps: Some(40),
        eval_every_s: max_s(),
        eval_every_steps: None,
        divergence_loss: None,
    };
    let (outcome, points) = allreduce_run(10.0, &stop).unwrap();
    assert_eq!(outcome.worker_steps, 40);
    assert!(outcome.sim_time < SimTime::from_secs_f64(1.0));
    let times: Vec<SimTime> = points.iter().map(|p| p.time).collect();
    assert_eq!(times, [SimTime::ZERO, outcome.sim_time]);
}

/// Steps as long as the clock allows, under the largest time limit: every first step ends
/// exactly at the limit and is handled; what follows would happen after it, and is not. The
/// all-reduce completes no step, and the outcome says so (`worker_steps == 0`, the model as it
/// started).
#[test]
fn steps_as_long_as_the_clock_allows_end_at_the_limit() {
    let step_ms = SimTime::max_config_in(TimeUnit::Millis);
    let stop = RunConfig {
        sim_time_s: Some(max_s()),
        epochs: None,
        worker_steps: None,
        eval_every_s: max_s(),
        eval_every_steps: None,
        divergence_loss: None,
    };
    let (outcome, points) = allreduce_run(step_ms, &stop).unwrap();
    assert_eq!(outcome.sim_time, SimTime::MAX_CONFIG);
    assert!(outcome.events >= 4, "the four first steps end at the limit");
    assert_eq!(outcome.worker_steps, 0);
    assert_eq!(points.first().unwrap().eval.loss, outcome.final_eval.loss);
    let times: Vec<SimTime> = points.iter().map(|p| p.time).collect();
    assert_eq!(times, [SimTime::ZERO, SimTime::MAX_CONFIG]);
}

/// Without a time limit, a run whose next event lies beyond the end of simulated time (the
/// second steps of maximal length would end past 2^64 ns) stops with an error at `run` saying
/// so, instead of running on at a saturated clock.
#[test]
fn a_run_past_the_end_of_simulated_time_fails_at_run() {
    let stop = RunConfig {
        sim_time_s: None,
        epochs: None,
        worker_steps: Some(1000),
        eval_every_s: max_s(),
        eval_every_steps: None,
        divergence_loss: None,
    };
    let err = allreduce_run(SimTime::max_config_in(TimeUnit::Millis), &stop).unwrap_err();
    let Error::Config(e) = &err else {
        panic!("{err}")
    };
    assert_eq!(e.path.to_string(), "run");
    assert!(e.message.contains("after the end of simulated time"), "{e}");
    assert!(e.hint.as_deref().unwrap().contains("run.sim_time_s"), "{e}");
}

/// The slowest legal link, 1 byte/s: a message of the 16-parameter quadratic (64 bytes) takes
/// 64 s, so in a 1 s run none is delivered. Every algorithm runs to its stop without a panic or
/// an overflow, its messages still in flight; all-reduce completes no step and leaves the model
/// as it started.
#[test]
fn the_slowest_link_leaves_messages_in_flight_and_every_run_ends_at_its_stop() {
    let n = 4;
    let slow = common::net(8e-9, 5.0);
    slow.validate().unwrap();
    for kind in AlgorithmKind::KINDS {
        let alg = default_entry(kind);
        let mut store = common::quadratic_store(n, 5);
        let (outcome, points) = common::run_on(
            &alg,
            &common::cluster(n, &[]),
            &slow,
            TopologyConfig::Ring {},
            &mut store,
            &common::stop_at(1.0),
            5,
        );
        assert_eq!(outcome.sim_time, SimTime::from_secs_f64(1.0), "{kind}");
        assert!(outcome.network.messages > 0, "{kind} sent nothing");
        if *kind == "allreduce" {
            assert_eq!(outcome.worker_steps, 0);
            assert_eq!(points[0].eval.loss, outcome.final_eval.loss);
        }
    }
}
