//! The run-directory contract, both ways: every file a run writes, written with the writers of
//! `dasim_reports::rundir` and read back with its readers, gives back what was written; and a
//! summary written before a field existed still reads.

use std::fs;
use std::path::Path;

use serde_json::json;

use dasim_reports::rundir::{
    Activity, AlgorithmStaleness, AlgorithmSummary, CheckResult, CheckRow, CsvRow, CsvStream,
    EventLogs, FaultRow, GradientRow, HostTimings, IntStats, LinkRow, MessageRow, MetricRow,
    Partition, PartitionRow, RunData, RunWriter, SeriesRow, StalenessRow, Stamp, Summary, Tables,
    TimeToTarget, TimelineRow, Timings, Utilization, UtilizationRow, WaitRow, files, read_csv,
    read_partition, read_summary, read_timings, write_csv, write_partition, write_scenario,
};

const SCENARIO: &str = "name = \"round trip\"\nseed = 7\n";

fn stamp() -> Stamp {
    Stamp::of_scenario("0.1.0", "abc123", SCENARIO)
}

fn metric_rows() -> Vec<MetricRow> {
    vec![
        MetricRow {
            algorithm: "sgp".into(),
            time_s: 0.0,
            worker_steps: Some(0),
            epoch: Some(0.0),
            loss: Some(2.297_310_741_423_417),
            accuracy: Some(0.1),
            train_loss: None,
            consensus: Some(0.0),
            replica_loss_min: Some(2.25),
            replica_loss_mean: Some(2.3),
            replica_loss_max: Some(2.4),
            replica_accuracy_min: Some(0.0625),
            replica_accuracy_mean: Some(0.1),
            replica_accuracy_max: Some(0.125),
            suboptimality: None,
        },
        MetricRow {
            algorithm: "a, \"quoted\" label".into(),
            time_s: 1.0 / 3.0,
            worker_steps: Some(u64::MAX),
            epoch: Some(1e-300),
            loss: Some(f64::INFINITY),
            accuracy: None,
            train_loss: Some(-0.0),
            consensus: Some(1.5e20),
            suboptimality: Some(3e-9),
            ..MetricRow::default()
        },
    ]
}

fn series_rows() -> Vec<SeriesRow> {
    vec![
        SeriesRow {
            algorithm: "sgp".into(),
            time_s: 0.125,
            name: "weight_min".into(),
            value: Some(0.7),
        },
        SeriesRow {
            algorithm: "sgp".into(),
            time_s: 0.25,
            name: "weight_max".into(),
            value: None,
        },
    ]
}

fn gradient_rows() -> Vec<GradientRow> {
    vec![GradientRow {
        algorithm: "ps".into(),
        worker: 3,
        row: 4,
        read_s: 0.01,
        apply_s: 0.0325,
        row_staleness: 2,
        global_staleness: 5,
    }]
}

fn message_rows() -> Vec<MessageRow> {
    vec![MessageRow {
        algorithm: "ps".into(),
        src: 3,
        dst: 4,
        bytes: 40_964,
        send_s: 0.01,
        arrive_s: 0.010_041_7,
    }]
}

fn tables() -> Tables {
    Tables {
        staleness: vec![
            StalenessRow {
                algorithm: "ps".into(),
                measure: "global".into(),
                worker: 0,
                value: 3,
                count: 17,
            },
            StalenessRow {
                algorithm: "sgp".into(),
                measure: "message_age".into(),
                worker: 1,
                value: 0,
                count: 2,
            },
        ],
        utilization: vec![UtilizationRow {
            algorithm: "ps".into(),
            worker: 0,
            steps: 12,
            compute_s: 0.12,
            communicate_s: 0.03,
            blocked_s: 0.0,
            idle_s: 0.05,
            down_s: Some(0.25),
        }],
        waits: vec![WaitRow {
            algorithm: "dpsgd".into(),
            worker: 2,
            waited_for: 1,
            seconds: 0.0125,
        }],
        links: vec![LinkRow {
            algorithm: "dpsgd".into(),
            src: 0,
            dst: 1,
            messages: 60,
            bytes: 96_000,
            busy_s: 0.0078125,
        }],
        timeline: vec![
            TimelineRow {
                algorithm: "dpsgd".into(),
                worker: 0,
                activity: Activity::Compute,
                start_s: 0.0,
                end_s: 0.01,
                waited_for: None,
            },
            TimelineRow {
                algorithm: "dpsgd".into(),
                worker: 0,
                activity: Activity::Blocked,
                start_s: 0.01,
                end_s: 0.02,
                waited_for: Some(3),
            },
        ],
        faults: vec![
            FaultRow {
                algorithm: "dpsgd".into(),
                time_s: 0.015,
                event: "lost-link-down".into(),
                node: 0,
                peer: Some(1),
            },
            FaultRow {
                algorithm: "dpsgd".into(),
                time_s: 0.0175,
                event: "dropped-down".into(),
                node: 2,
                peer: None,
            },
        ],
    }
}

fn summary() -> Summary {
    let mut options = serde_json::Map::new();
    options.insert("kind".into(), json!("overlap-sgp"));
    options.insert("tau".into(), json!(1));
    Summary {
        scenario: "round trip".into(),
        seed: 7,
        dasim_version: "0.1.0".into(),
        git_revision: Some("abc123".into()),
        scenario_sha256: stamp().scenario_sha256,
        backend: "flex".into(),
        device: "CPU".into(),
        workers: 4,
        params: 2410,
        timing_only: false,
        timed_as: None,
        runs: vec![
            AlgorithmSummary {
                algorithm: "overlap-sgp".into(),
                kind: "overlap-sgp".into(),
                options,
                topology: serde_json::from_value(json!({"kind": "one-peer-exponential"})).unwrap(),
                optimizer: serde_json::from_value(json!({"lr": 0.1, "momentum": 0.9})).unwrap(),
                backend: "flex".into(),
                stopped: None,
                stop_reason: None,
                sim_time_s: 0.5,
                events: 1234,
                worker_steps: 128,
                steps_per_sim_s: 256.0,
                epochs: 2.0,
                final_loss: 0.5,
                final_accuracy: 0.9375,
                final_perplexity: None,
                messages: 240,
                bytes: 384_000,
                gradient_flushes: 10,
                gradient_requests: 130,
                global_staleness: Some(IntStats {
                    count: 40,
                    mean: 1.5,
                    p99: 3,
                    max: 4,
                }),
                row_staleness: Some(IntStats {
                    count: 40,
                    mean: 0.25,
                    p99: 1,
                    max: 2,
                }),
                message_age: Some(IntStats {
                    count: 16,
                    mean: 1.3125,
                    p99: 2,
                    max: 2,
                }),
                mix_age: Some(IntStats {
                    count: 8,
                    mean: 1.5,
                    p99: 2,
                    max: 2,
                }),
                model_staleness: None,
                final_consensus: 0.03125,
                final_suboptimality: None,
                time_to_target: TimeToTarget {
                    accuracy_s: Some(0.375),
                    loss_s: None,
                },
                utilization: Utilization {
                    compute: 0.4375,
                    communicate: 0.09375,
                    blocked: 0.46875,
                    idle: 0.0,
                    down: None,
                },
                faults: None,
            },
            AlgorithmSummary {
                algorithm: "my dasgd".into(),
                kind: "dasgd".into(),
                options: serde_json::from_value(
                    json!({"kind": "dasgd", "label": "my dasgd", "broadcast": "all"}),
                )
                .unwrap(),
                topology: Default::default(),
                optimizer: Default::default(),
                backend: "flex".into(),
                stopped: None,
                stop_reason: None,
                sim_time_s: 0.5,
                events: 99,
                worker_steps: 256,
                steps_per_sim_s: 512.0,
                epochs: 4.0,
                final_loss: 1e-3,
                final_accuracy: 0.75,
                final_perplexity: None,
                messages: 0,
                bytes: 0,
                gradient_flushes: 3,
                gradient_requests: 256,
                global_staleness: None,
                row_staleness: None,
                message_age: None,
                mix_age: None,
                model_staleness: Some(AlgorithmStaleness {
                    count: 17,
                    mean: 1.0,
                    max: 4,
                }),
                final_consensus: 0.25,
                final_suboptimality: Some(1.5e-7),
                time_to_target: TimeToTarget::default(),
                utilization: Utilization {
                    compute: 1.0,
                    communicate: 0.0,
                    blocked: 0.0,
                    idle: 0.0,
                    down: None,
                },
                faults: None,
            },
        ],
        checks: check_rows(),
    }
}

/// Verdicts of three claims: a pass within a tolerance, a failure with a reason and a note
/// that needs quoting, and a skip.
fn check_rows() -> Vec<CheckRow> {
    let row = |expect: u64, algorithm: &str, result| CheckRow {
        expect,
        algorithm: algorithm.into(),
        metric: "message_age.max".into(),
        over: String::new(),
        op: "<=".into(),
        value: "tau".into(),
        observed: Some(1.0),
        bound: Some(1.0),
        tolerance: None,
        result,
        reason: None,
        note: None,
    };
    vec![
        CheckRow {
            metric: "consensus".into(),
            over: "at=0.25".into(),
            op: "~=".into(),
            value: "2 * n - 1e-3".into(),
            observed: Some(0.03125),
            bound: Some(0.03),
            tolerance: Some(0.0015),
            ..row(0, "overlap-sgp", CheckResult::Pass)
        },
        CheckRow {
            observed: None,
            reason: Some("not measured: no message age was measured".into()),
            note: Some("Assran et al., \"SGP\", Thm. 1: age <= tau, always".into()),
            ..row(1, "my dasgd", CheckResult::Fail)
        },
        CheckRow {
            reason: Some("not defined for dasgd".into()),
            ..row(2, "my dasgd", CheckResult::Skip)
        },
    ]
}

fn timings() -> Timings {
    Timings {
        threads: 2,
        max_batch: Some(64),
        memory_estimate_bytes: 123_456_789,
        cpu_kernels: "avx512f".into(),
        runs: vec![HostTimings {
            algorithm: "overlap-sgp".into(),
            wall_time_s: 1.25,
            gradient_wall_s: 0.75,
            eval_wall_s: 0.125,
            gradient_share: 0.6,
            gradient_passes: 20,
            worker_steps_per_wall_s: 102.4,
            sim_s_per_wall_s: 0.4,
        }],
    }
}

fn partition() -> Partition {
    Partition {
        classes: 3,
        workers: vec![
            PartitionRow {
                worker: 0,
                samples: 5,
                class_counts: vec![2, 3, 0],
            },
            PartitionRow {
                worker: 1,
                samples: 4,
                class_counts: vec![1, 1, 2],
            },
        ],
    }
}

/// Reads `R`'s file of `dir` back, checking its stamp.
fn read_back<R: CsvRow>(dir: &Path) -> Vec<R> {
    let file = read_csv::<R>(dir).unwrap().expect(R::FILE);
    assert_eq!(file.stamp, Some(stamp()), "{}", R::FILE);
    let text = fs::read_to_string(dir.join(R::FILE)).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(stamp().to_string().as_str()));
    assert_eq!(lines.next(), Some(R::COLUMNS.join(",").as_str()));
    file.rows
}

/// Writes every file of a run directory as `dasim run` does, then reads each back.
#[test]
fn every_file_reads_back_as_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_scenario(dir, SCENARIO).unwrap();
    write_partition(dir, &stamp(), &partition()).unwrap();
    let mut w = RunWriter::create(
        dir,
        stamp(),
        EventLogs {
            gradients: true,
            messages: true,
        },
    )
    .unwrap();
    metric_rows().iter().for_each(|r| w.metric(r).unwrap());
    series_rows().iter().for_each(|r| w.series(r).unwrap());
    gradient_rows().iter().for_each(|r| w.gradient(r).unwrap());
    message_rows().iter().for_each(|r| w.message(r).unwrap());
    // Two algorithms' tables: the files hold both, in order.
    let (mut first, mut second) = (tables(), tables());
    first.timeline.truncate(1);
    second.staleness.truncate(1);
    w.add_tables(first.clone()).unwrap();
    w.add_tables(second.clone()).unwrap();
    w.summary(&summary()).unwrap();
    w.timings(&timings()).unwrap();
    drop(w);
    write_csv(dir, &stamp(), &check_rows()).unwrap();

    assert_eq!(
        fs::read_to_string(dir.join(files::SCENARIO)).unwrap(),
        SCENARIO
    );
    assert_eq!(stamp().scenario_sha256.len(), 64);
    let part = read_partition(dir).unwrap().unwrap();
    assert_eq!(part.stamp, Some(stamp()));
    assert_eq!(part.rows, partition());
    assert_eq!(read_back::<MetricRow>(dir), metric_rows());
    assert_eq!(read_back::<SeriesRow>(dir), series_rows());
    assert_eq!(read_back::<GradientRow>(dir), gradient_rows());
    assert_eq!(read_back::<MessageRow>(dir), message_rows());
    assert_eq!(
        read_back::<StalenessRow>(dir),
        [first.staleness.clone(), second.staleness.clone()].concat()
    );
    assert_eq!(
        read_back::<UtilizationRow>(dir),
        [first.utilization.clone(), second.utilization.clone()].concat()
    );
    assert_eq!(
        read_back::<WaitRow>(dir),
        [first.waits.clone(), second.waits.clone()].concat()
    );
    assert_eq!(
        read_back::<LinkRow>(dir),
        [first.links.clone(), second.links.clone()].concat()
    );
    assert_eq!(
        read_back::<TimelineRow>(dir),
        [first.timeline.clone(), second.timeline.clone()].concat()
    );
    assert_eq!(
        read_back::<FaultRow>(dir),
        [first.faults.clone(), second.faults.clone()].concat()
    );
    assert_eq!(read_back::<CheckRow>(dir), check_rows());
    assert_eq!(read_summary(dir).unwrap(), Some(summary()));
    assert_eq!(read_timings(dir).unwrap(), Some(timings()));
    // No temporary file is left behind.
    for entry in fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name();
        assert!(!name.to_string_lossy().ends_with(".tmp"), "{name:?}");
    }

    // The whole directory, as the plots read it.
    let data = RunData::load(dir).unwrap();
    assert_eq!(data.stamp, Some(stamp()));
    assert_eq!(data.metrics, metric_rows());
    assert_eq!(data.summary, Some(summary()));
    assert_eq!(data.checks, check_rows());
    assert_eq!(data.scenario_toml.as_deref(), Some(SCENARIO));
    assert_eq!(
        data.algorithms,
        [
            "overlap-sgp",
            "my dasgd",
            "sgp",
            "a, \"quoted\" label",
            "ps",
            "dpsgd"
        ]
    );
    // Legends come from the summary's options: the kind and its options, unless labelled.
    assert_eq!(data.legend("overlap-sgp"), "overlap-sgp (tau = 1)");
    assert_eq!(data.legend("my dasgd"), "my dasgd");
    assert_eq!(data.legend("sgp"), "sgp");
}

#[test]
fn bytes_are_those_of_the_contract() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_csv(dir, &stamp(), &metric_rows()[1..]).unwrap();
    let text = fs::read_to_string(dir.join(files::METRICS)).unwrap();
    let rows: Vec<&str> = text.lines().skip(2).collect();
    // Quoted as CSV quotes; floats as Rust's `{}` writes them (no exponent), NaN and `None`
    // as empty cells.
    let tiny = format!("{}", 1e-300_f64);
    assert!(tiny.starts_with("0.000") && tiny.ends_with('1'), "{tiny}");
    assert_eq!(
        rows,
        [format!(
            "\"a, \"\"quoted\"\" label\",0.3333333333333333,18446744073709551615,{tiny},inf,,-0,\
             150000000000000000000,,,,,,,0.000000003"
        )]
    );
    write_partition(dir, &stamp(), &partition()).unwrap();
    assert_eq!(
        fs::read_to_string(dir.join(files::PARTITION)).unwrap(),
        format!(
            "{}\nworker,samples,class_0,class_1,class_2\n0,5,2,3,0\n1,4,1,1,2\n",
            stamp()
        )
    );
    let real = Partition {
        classes: 0,
        workers: vec![PartitionRow {
            worker: 0,
            samples: 9,
            class_counts: Vec::new(),
        }],
    };
    write_partition(dir, &stamp(), &real).unwrap();
    assert_eq!(read_partition(dir).unwrap().unwrap().rows, real);

    // A stream writes the same bytes as the table, row by row.
    let stream_dir = tmp.path().join("stream");
    fs::create_dir(&stream_dir).unwrap();
    let mut s = CsvStream::<MetricRow>::create(&stream_dir, &stamp()).unwrap();
    s.push(&metric_rows()[1]).unwrap();
    assert_eq!(
        fs::read_to_string(stream_dir.join(files::METRICS)).unwrap(),
        text
    );
}

/// Per-event logs that are not asked for are not written, and stale ones are removed.
#[test]
fn event_logs_only_when_asked_for() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    fs::write(dir.join(files::GRADIENTS), "stale").unwrap();
    let mut w = RunWriter::create(dir, stamp(), EventLogs::default()).unwrap();
    assert!(!w.logs_gradients() && !w.logs_messages());
    w.gradient(&gradient_rows()[0]).unwrap();
    w.message(&message_rows()[0]).unwrap();
    assert!(!dir.join(files::GRADIENTS).exists());
    assert!(!dir.join(files::MESSAGES).exists());
    assert!(read_csv::<GradientRow>(dir).unwrap().is_none());
}

/// A float JSON cannot hold (NaN, the accuracy of a regression) is `null`, read back as NaN.
#[test]
fn summary_nan_is_null() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = summary();
    s.runs[0].final_accuracy = f64::NAN;
    RunWriter::create(tmp.path(), stamp(), EventLogs::default())
        .unwrap()
        .summary(&s)
        .unwrap();
    let text = fs::read_to_string(tmp.path().join(files::SUMMARY)).unwrap();
    assert!(text.contains("\"final_accuracy\": null"), "{text}");
    let back = read_summary(tmp.path()).unwrap().unwrap();
    assert!(back.runs[0].final_accuracy.is_nan());
}

/// A summary written before `options` (and the fields after `final_loss` in older versions)
/// were recorded still reads: what it lacks is "not measured", and its host timings, which
/// now go to `timings.json`, are ignored.
#[test]
fn old_summaries_still_read() {
    let tmp = tempfile::tempdir().unwrap();
    let old = json!({
        "scenario": "old",
        "seed": 1,
        "dasim_version": "0.1.0",
        "backend": "flex",
        "device": "CPU",
        "workers": 4,
        "params": 10,
        "runs": [{
            "algorithm": "sgp",
            "kind": "sgp",
            "backend": "flex",
            "sim_time_s": 0.5,
            "wall_time_s": 0.25,
            "events": 10,
            "worker_steps": 8,
            "steps_per_sim_s": 16.0,
            "epochs": 1.0,
            "final_loss": 0.5,
            "final_accuracy": null,
            "messages": 4,
            "bytes": 400,
            "gradient_flushes": 2,
            "gradient_requests": 8
        }]
    });
    fs::write(
        tmp.path().join(files::SUMMARY),
        serde_json::to_string_pretty(&old).unwrap(),
    )
    .unwrap();
    let s = read_summary(tmp.path()).unwrap().unwrap();
    assert_eq!(s.git_revision, None);
    assert_eq!(s.scenario_sha256, "");
    let r = &s.runs[0];
    assert!(r.options.is_empty());
    assert!(r.final_accuracy.is_nan() && r.final_consensus.is_nan());
    assert!(r.utilization.compute.is_nan());
    assert_eq!(r.time_to_target, TimeToTarget::default());
    let data = RunData::load(tmp.path()).unwrap();
    assert_eq!(data.legend("sgp"), "sgp");

    // What is not a summary at all is located.
    fs::write(tmp.path().join(files::SUMMARY), "{\n  \"runs\": 3\n}\n").unwrap();
    let err = read_summary(tmp.path()).unwrap_err();
    assert!(err.to_string().contains("summary.json:2"), "{err}");
}

/// An algorithm's tables of `timeline_rows` timeline rows (with awkward floats), its
/// utilization with or without `down_s`, and faults only when asked for.
fn algorithm_tables(name: &str, timeline_rows: usize, down: bool, faults: bool) -> Tables {
    let mut t = tables();
    for r in &mut t.staleness {
        r.algorithm = name.into();
    }
    t.utilization[0].algorithm = name.into();
    t.utilization[0].down_s = down.then_some(0.1 + 0.2);
    t.timeline = (0..timeline_rows)
        .map(|i| TimelineRow {
            algorithm: name.into(),
            worker: (i % 7) as u64,
            activity: Activity::ALL[i % Activity::ALL.len()],
            start_s: i as f64 / 3.0,
            end_s: (i + 1) as f64 / 3.0 + 1e-17,
            waited_for: (i % 3 == 0).then_some(i as u64),
        })
        .collect();
    if !faults {
        t.faults.clear();
    }
    t
}

/// Every table file in `dir`, by name (a table absent from the directory is absent here).
fn table_files(dir: &Path) -> Vec<(&'static str, Option<Vec<u8>>)> {
    [
        files::STALENESS,
        files::UTILIZATION,
        files::WAITS,
        files::LINKS,
        files::TIMELINE,
        files::FAULTS,
    ]
    .into_iter()
    .map(|f| (f, fs::read(dir.join(f)).ok()))
    .collect()
}

/// The tables of `t` as one call of `write_csv` per table writes them (streamed, formatted
/// from the first row to the last).
fn written_whole(dir: &Path, t: &Tables) -> Vec<(&'static str, Option<Vec<u8>>)> {
    write_csv(dir, &stamp(), &t.staleness).unwrap();
    write_csv(dir, &stamp(), &t.utilization).unwrap();
    write_csv(dir, &stamp(), &t.waits).unwrap();
    write_csv(dir, &stamp(), &t.links).unwrap();
    write_csv(dir, &stamp(), &t.timeline).unwrap();
    if !t.faults.is_empty() {
        write_csv(dir, &stamp(), &t.faults).unwrap();
    }
    table_files(dir)
}

/// A run's tables are rewritten after each algorithm, formatting only the new algorithm's rows
/// (in chunks, side by side): after every algorithm each file holds the very bytes of one
/// write of all the rows so far, also when a later algorithm brings a column the earlier ones
/// left out (`down_s`), after a resume, and after the tables were taken for the plots.
#[test]
fn tables_rewritten_after_each_algorithm_are_the_bytes_of_one_write() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, whole) = (tmp.path().join("run"), tmp.path().join("whole"));
    fs::create_dir_all(&dir).unwrap();
    fs::create_dir_all(&whole).unwrap();
    let algorithms = [
        // More timeline rows than one chunk of formatting, and than two.
        algorithm_tables("first", 20_000, false, false),
        algorithm_tables("second", 3, true, true),
        algorithm_tables("third", 9_000, false, false),
    ];
    let mut w = RunWriter::create(&dir, stamp(), EventLogs::default()).unwrap();
    let mut so_far = Tables::default();
    for (i, t) in algorithms.iter().enumerate() {
        w.add_tables(t.clone()).unwrap();
        extend(&mut so_far, t);
        assert_eq!(
            table_files(&dir),
            written_whole(&whole, &so_far),
            "after algorithm {i}"
        );
        if i == 0 {
            // Resumed from a checkpoint here: the tables are rewritten from the state's rows,
            // and the next algorithm's are added to them.
            let state = w.state().unwrap();
            drop(w);
            w = RunWriter::resume(&dir, stamp(), EventLogs::default(), state).unwrap();
            assert_eq!(table_files(&dir), written_whole(&whole, &so_far));
        }
    }
    // Taken for the plots: a later algorithm's tables are written alone.
    assert_eq!(w.take_tables(), so_far);
    let last = algorithm_tables("after", 10, false, false);
    w.add_tables(last.clone()).unwrap();
    assert_eq!(table_files(&dir), written_whole(&whole, &last));
}

fn extend(all: &mut Tables, t: &Tables) {
    all.staleness.extend(t.staleness.iter().cloned());
    all.utilization.extend(t.utilization.iter().cloned());
    all.waits.extend(t.waits.iter().cloned());
    all.links.extend(t.links.iter().cloned());
    all.timeline.extend(t.timeline.iter().cloned());
    all.faults.extend(t.faults.iter().cloned());
}
