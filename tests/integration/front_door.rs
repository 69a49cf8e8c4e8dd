//! The library's front door: a scenario run through [`Plan::prepare`] and [`Simulation::run`]
//! into the in-memory sink gives the same tables, summary and verdicts as the run directory
//! `dasim run` writes, and the front door's modules neither print nor draw.

use crate::common;

use std::path::Path;

use dasim::launch::{Sink, Source, Threads};
use dasim::plan::Plan;
use dasim::simulation::{Silent, Simulation};
use dasim::{InMemory, Launch, Loaded};
use dasim_models::backend::{BackendChoice, select};
use dasim_reports::rundir::{
    CsvRow, LinkRow, Partition, RunData, WaitRow, read_csv, read_partition, read_summary,
};

/// Three algorithms on the digits, a crash and lost messages, every event log, and claims.
const SCENARIO: &str = r#"
name = "front door"
seed = 7

[cluster]
workers = 6
step_time_ms = 10.0

[[cluster.stragglers]]
workers = [2]
factor = 3.0

[network]
bandwidth_gbps = 10.0
latency_us = 5.0

[topology]
kind = "ring"

[model]
kind = "mlp"
hidden = [16]

[data]
dataset = "digits"
batch_size = 16

[optimizer]
lr = 0.05

[run]
sim_time_s = 0.4
eval_every_s = 0.1

[metrics]
log_gradients = true
log_messages = true

[[faults]]
kind = "loss"
probability = 0.05
workers = [0, 1]

[[faults]]
kind = "crash"
workers = [4]
at_s = 0.2
rejoin_after_s = 0.05

[[algorithms]]
kind = "ps"

[[algorithms]]
kind = "adpsgd"

[[algorithms]]
kind = "dasgd"

[[expect]]
metric = "row_staleness.mean"
algorithm = "ps"
op = ">="
value = "0"

[[expect]]
metric = "worker_steps"
op = ">"
value = "n"
"#;

fn rows<R: CsvRow>(dir: &Path) -> Vec<R> {
    read_csv::<R>(dir)
        .unwrap()
        .map_or_else(Vec::new, |f| f.rows)
}

/// JSON text: the summaries hold NaN (a consensus distance not measured), which `==` refuses.
fn json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap()
}

#[test]
fn the_in_memory_sink_holds_what_the_run_directory_holds() {
    let loaded = Loaded::from_str(Path::new("front-door.toml"), SCENARIO.to_owned())
        .unwrap_or_else(|e| panic!("{e}"));
    let backend = select(BackendChoice::Flex).unwrap();

    let plan = Plan::prepare(&loaded).unwrap();
    assert_eq!(plan.systems.len(), 3, "one system per algorithm");
    let mut memory = InMemory::default();
    let results = Simulation::new(&plan, backend)
        .run(&mut memory, &mut Silent)
        .unwrap();

    let out = tempfile::tempdir().unwrap();
    let dir = out.path();
    let launch = Launch {
        backend: BackendChoice::Flex,
        threads: Threads::Own(Some(1)),
        sink: Sink::Dir {
            out: dir.to_path_buf(),
            force: false,
            plots: true,
        },
        ..Launch::new(Source::Scenario(loaded.clone()))
    };
    let mut ready = launch.start().unwrap().prepare().unwrap();
    let written = ready.run(0, &mut Silent, None).unwrap();
    assert_eq!(ready.dir(0), Some(dir));
    let disk = RunData::load(dir).unwrap();

    // The streams and the tables, row for row.
    assert!(!memory.metrics.is_empty() && !memory.series.is_empty());
    assert_eq!(memory.metrics, disk.metrics);
    assert_eq!(memory.series, disk.series);
    assert!(!memory.gradients.is_empty() && !memory.messages.is_empty());
    assert_eq!(memory.gradients, rows(dir));
    assert_eq!(memory.messages, rows(dir));
    assert_eq!(memory.tables.staleness, disk.staleness);
    assert_eq!(memory.tables.utilization, disk.utilization);
    assert_eq!(memory.tables.timeline, disk.timeline);
    assert!(!memory.tables.faults.is_empty(), "the faults are recorded");
    assert_eq!(memory.tables.faults, disk.faults);
    assert_eq!(memory.tables.waits, rows::<WaitRow>(dir));
    assert_eq!(memory.tables.links, rows::<LinkRow>(dir));
    // The claims judged on memory are those judged on the files.
    assert_eq!(
        memory.checks.len(),
        4,
        "two claims, the second over every algorithm"
    );
    assert_eq!(memory.checks, disk.checks);
    assert_eq!(results.checks, written.checks);
    // The files that are not tables.
    assert_eq!(
        Some(memory.scenario_toml.as_str()),
        disk.scenario_toml.as_deref()
    );
    assert_eq!(memory.stamp, disk.stamp);
    let partition: Option<Partition> = read_partition(dir).unwrap().map(|f| f.rows);
    assert_eq!(memory.partition, partition);
    assert_eq!(
        json(&memory.summary),
        json(&read_summary(dir).unwrap()),
        "summary.json"
    );
    assert_eq!(json(&results.runs), json(&written.runs));
    // What a reader of the run directory sees (the plots and the report read it).
    let data = memory.run_data();
    assert_eq!(data.algorithms, disk.algorithms);
    assert_eq!(data.scenario_name(), "front door");
}

#[test]
fn a_plan_is_prepared_once_and_refuses_what_validate_refuses() {
    // A data file that cannot be read is located at `data.path`, before anything runs.
    let text = SCENARIO.replace(
        "dataset = \"digits\"",
        "dataset = \"csv\"\npath = \"no-such-file.csv\"",
    );
    let loaded =
        Loaded::from_str(Path::new("missing.toml"), text).unwrap_or_else(|e| panic!("{e}"));
    let err = Plan::prepare(&loaded)
        .err()
        .expect("a missing data file")
        .to_string();
    assert!(
        err.contains("missing.toml:") && err.contains("data.path"),
        "{err}"
    );
}

/// A launch resolves everything before anything runs: one plan per seed, each under its seed;
/// seeds listed twice, a run directory holding an earlier run's results (without `force`), one
/// directory for several seeds and a run directory without a checkpoint to resume are refused.
#[test]
fn a_launch_resolves_one_plan_per_seed_before_anything_runs() {
    let loaded = Loaded::from_str(Path::new("front-door.toml"), SCENARIO.to_owned())
        .unwrap_or_else(|e| panic!("{e}"));
    let launch = |seeds: &[u64], sink: Sink| Launch {
        backend: BackendChoice::Flex,
        threads: Threads::Own(Some(1)),
        seeds: Some(seeds.to_vec()),
        sink,
        ..Launch::new(Source::Scenario(loaded.clone()))
    };
    let ready = launch(&[3, 5], Sink::Memory)
        .start()
        .unwrap()
        .prepare()
        .unwrap();
    assert_eq!(ready.len(), 2);
    assert_eq!((ready.seed(0), ready.seed(1)), (3, 5));
    assert_eq!(ready.plan(1).loaded.scenario.seed, 5);
    assert_eq!(ready.claims().len(), 2);
    assert!(ready.memory(0).is_some() && ready.dir(0).is_none());
    let refused = |l: Launch| {
        l.start()
            .and_then(|s| s.prepare())
            .err()
            .unwrap()
            .to_string()
    };
    assert!(refused(launch(&[3, 3], Sink::Memory)).contains("seed 3 is listed twice"));

    let out = tempfile::tempdir().unwrap();
    std::fs::write(out.path().join("summary.json"), "{}").unwrap();
    let dir = |force| Sink::Dir {
        out: out.path().to_path_buf(),
        force,
        plots: false,
    };
    let err = refused(launch(&[3], dir(false)));
    assert!(err.contains("already holds the results of a run"), "{err}");
    assert!(refused(launch(&[3, 5], dir(true))).contains("several seeds"));

    let resume = Launch::new(Source::Resume {
        dir: out.path().to_path_buf(),
        scenario: None,
    });
    let err = resume.start().err().unwrap().to_string();
    assert!(err.contains("holds no checkpoint"), "{err}");
}

/// The front door does no I/O of its own to the terminal: no printing, no progress bar, no
/// argument parsing (`dasim::bar` and the binary do that).
#[test]
fn the_front_door_neither_prints_nor_parses_arguments() {
    let src = common::manifest_dir().join("src");
    for module in ["launch.rs", "plan.rs", "simulation.rs", "sink.rs"] {
        let text = std::fs::read_to_string(src.join(module)).unwrap();
        // The code, not its documentation (whose examples print).
        let code: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for forbidden in ["println!", "eprintln!", "print!(", "indicatif", "clap"] {
            assert!(
                !code.contains(forbidden),
                "src/{module} uses `{forbidden}`: the front door reports through RunSink and \
                 Progress"
            );
        }
    }
}
