//! The whole pipeline on real gradients (flex): outputs, determinism, the straggler effect.

use crate::common;

use common::*;
use dasim_reports::rundir::{read_summary, read_timings};
use serde_json::Value;

#[test]
fn a_run_writes_every_output_and_is_byte_reproducible() {
    let (dir, path) = scenario(SMALL, "small.toml");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    run_flex(&path, &a);
    run_flex(&path, &b);

    for f in [
        "scenario.toml",
        "summary.json",
        "metrics.csv",
        "partition.csv",
        "loss.png",
        "loss.svg",
        "accuracy.png",
        "accuracy.svg",
    ] {
        let meta = std::fs::metadata(a.join(f)).unwrap_or_else(|_| panic!("{f} missing"));
        assert!(meta.len() > 100, "{f} is nearly empty");
    }
    let png = std::fs::read(a.join("loss.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");

    // Every CSV file is a function of simulated events only (no wall-time field): the same
    // bytes on every run.
    for f in [
        "metrics.csv",
        "series.csv",
        "staleness.csv",
        "utilization.csv",
        "waits.csv",
        "links.csv",
        "timeline.csv",
        "partition.csv",
        "scenario.toml",
        "summary.json",
    ] {
        let csv_a = std::fs::read(a.join(f)).unwrap_or_else(|_| panic!("{f} missing"));
        let csv_b = std::fs::read(b.join(f)).unwrap();
        assert_eq!(
            csv_a, csv_b,
            "{f} differs between two runs of the same scenario"
        );
    }
    // Each CSV: the stamp line, then the header.
    let partition = std::fs::read_to_string(a.join("partition.csv")).unwrap();
    let mut lines = partition.lines();
    assert!(lines.next().unwrap().starts_with("# dasim "), "{partition}");
    assert!(
        lines.next().unwrap().starts_with("worker,samples,class_0,"),
        "{partition}"
    );
    assert_eq!(partition.lines().count(), 2 + 8);
    let text = std::fs::read_to_string(a.join("metrics.csv")).unwrap();
    let header = text.lines().nth(1).unwrap();
    assert!(header.starts_with("algorithm,time_s,worker_steps,epoch,loss,accuracy,train_loss,"));
    // 0.0, 0.1, …, 0.5 for each algorithm.
    assert_eq!(text.lines().count(), 2 + 2 * 6);

    // The resolved scenario is itself a valid scenario.
    let o = dasim(&["validate", a.join("scenario.toml").to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));

    // The summary, read back with the run directory's own types (a missing key fails to read).
    let summary = read_summary(&a).unwrap().expect("summary.json");
    assert_eq!(summary.runs.len(), 2);
    for r in &summary.runs {
        assert_eq!(r.backend, "flex");
        assert_eq!(r.sim_time_s, 0.5);
        assert!(
            r.events > 0 && r.worker_steps > 0 && r.epochs > 0.0,
            "{r:?}"
        );
        assert!(
            r.final_loss.is_finite() && r.final_accuracy.is_finite(),
            "{r:?}"
        );
        assert_eq!(r.options["kind"], r.kind.as_str());
    }
    let raw: Value =
        serde_json::from_slice(&std::fs::read(a.join("summary.json")).unwrap()).unwrap();
    for r in raw["runs"].as_array().unwrap() {
        assert!(
            r.get("wall_time_s").is_none(),
            "host timings stay out of summary.json: {r}"
        );
    }
    // The host's speed goes beside it, one entry per algorithm.
    let timings = read_timings(&a).unwrap().expect("timings.json");
    assert_eq!(timings.runs.len(), 2);
    for (t, r) in timings.runs.iter().zip(&summary.runs) {
        assert_eq!(t.algorithm, r.algorithm);
        for x in [
            t.wall_time_s,
            t.gradient_wall_s,
            t.eval_wall_s,
            t.gradient_share,
            t.worker_steps_per_wall_s,
            t.sim_s_per_wall_s,
        ] {
            assert!(x >= 0.0, "{t:?}");
        }
    }
    assert!(timings.memory_estimate_bytes > 0);
}

/// Every file a run writes but `timings.json` (the host's speed), for comparisons.
fn outputs(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "csv" || e == "json"))
        .filter(|p| p.file_name().unwrap() != "timings.json")
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    files.sort();
    files
}

/// How the store executes — how many threads, how many requests per forward/backward pass —
/// changes nothing a run writes: every replica's gradient is computed on its own (all-reduce's
/// fused mean in passes fixed by its requests alone), and losses are summed on the host in
/// request order.
#[test]
fn threads_and_batch_limits_give_byte_identical_outputs() {
    // Momentum, a straggler and both a synchronous flush of every worker (all-reduce) and
    // asynchronous single requests (AD-PSGD); 16 workers so that flushes split unevenly (by
    // `--max-batch`: this model's flushes are too small to be spread over threads).
    let small = SMALL.replace("workers = 8", "workers = 16");
    // A model of 82,910 parameters, whose flushes are spread over the threads, and wide enough
    // for a row's optimizer step, AD-PSGD's average and all-reduce's mean to be split over them
    // too (`dasim_models::rows`).
    let wide = small
        .replace("hidden = [16]", "hidden = [1100]")
        .replace("sim_time_s = 0.5", "sim_time_s = 0.15");
    // The convolutional models run their CPU programs, which spread a pass's layers over the
    // threads when a flush has fewer requests than threads: the shipped ResNet (batch norm,
    // stride-2 convolutions, the option-A shortcuts) and LeNet scenarios, shortened.
    let shipped = |file: &str, from: &str, to: &str| {
        let path = common::manifest_dir().join("scenarios").join(file);
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.contains(from), "{file}: {from}");
        text.replace(from, to)
    };
    let resnet = shipped("resnet.toml", "sim_time_s = 1.5", "sim_time_s = 0.2");
    let lenet = shipped("lenet.toml", "sim_time_s = 2.5", "sim_time_s = 0.3");
    // The transformer's CPU program: the shipped GPT (all-reduce's flushes of 4, DiLoCo's
    // single requests) and the benchmark's 4 blocks of d = 128 at 16 workers (all-reduce and
    // AD-PSGD), two steps each. Their text path is made absolute, as the run resolves it.
    let text = common::manifest_dir().join("models/data/tinyshakespeare.txt.gz");
    let text = format!("path = {:?}", text.display().to_string());
    let gpt = shipped("transformer.toml", "sim_time_s = 8.0", "sim_time_s = 0.5")
        .replace("path = \"../models/data/tinyshakespeare.txt.gz\"", &text);
    let gpt_b = shipped(
        "perf/transformer-4x128.toml",
        "worker_steps = 48",
        "worker_steps = 2",
    )
    .replace("path = \"../../models/data/tinyshakespeare.txt.gz\"", &text);
    assert!(
        gpt.contains(&text) && gpt_b.contains(&text),
        "the text's path"
    );
    for (label, text) in [
        ("small", &small),
        ("wide", &wide),
        ("resnet", &resnet),
        ("lenet", &lenet),
        ("transformer", &gpt),
        ("transformer 4x128", &gpt_b),
    ] {
        let (dir, path) = scenario(text, "s.toml");
        let run = |name: &str, flags: &[&str]| {
            let out = dir.path().join(name);
            let o = dasim_run_flex(&path, &out, flags);
            assert!(o.status.success(), "{label} {flags:?}: {}", stderr(&o));
            outputs(&out)
        };
        let reference = run("t1", &["--threads", "1"]);
        assert!(
            reference.len() >= 8,
            "{:?}",
            reference.iter().map(|f| &f.0).collect::<Vec<_>>()
        );
        for (name, flags) in [
            ("t2", &["--threads", "2"][..]),
            ("t3", &["--threads", "3"]),
            ("b1", &["--threads", "1", "--max-batch", "1"]),
            ("b5", &["--threads", "2", "--max-batch", "5"]),
        ] {
            let other = run(name, flags);
            assert_eq!(other.len(), reference.len());
            for ((f, a), (_, b)) in reference.iter().zip(&other) {
                assert!(a == b, "{label}: {f} differs with {flags:?}");
            }
        }
    }
}

/// Simulated seconds per epoch of each algorithm, from `summary.json`.
fn seconds_per_epoch(text: &str) -> Vec<(String, f64)> {
    let (dir, path) = scenario(text, "s.toml");
    let out = dir.path().join("out");
    run_flex(&path, &out);
    let summary = read_summary(&out).unwrap().expect("summary.json");
    summary
        .runs
        .into_iter()
        .map(|r| (r.algorithm, r.sim_time_s / r.epochs))
        .collect()
}

#[test]
fn a_straggler_slows_allreduce_s_fold_and_adpsgd_little() {
    let s = 4.0;
    let healthy = seconds_per_epoch(&SMALL.replace("factor = 4.0", "factor = 1.0"));
    let straggling = seconds_per_epoch(SMALL);
    let ratio = |i: usize| straggling[i].1 / healthy[i].1;
    assert_eq!(healthy[0].0, "allreduce");
    assert_eq!(healthy[1].0, "adpsgd");
    assert!(
        (ratio(0) - s).abs() < 0.15 * s,
        "all-reduce: {:.2}x",
        ratio(0)
    );
    assert!(ratio(1) < 1.2, "AD-PSGD: {:.2}x", ratio(1));
}

#[test]
fn the_resolved_scenario_writes_powersgd_library_defaults_out_and_runs_again_the_same() {
    // The library variant's warm-up and compression-rate floor are defaulted in the entry; the
    // copy in the run directory names them, so a reader sees what ran.
    let text = format!(
        "{SMALL}\n[[algorithms]]\nkind = \"allreduce\"\nlabel = \"powersgd\"\ncompression = {{ kind = \"powersgd\", rank = 2, variant = \"library\" }}\n"
    );
    let (dir, path) = scenario(&text, "library.toml");
    let out = dir.path().join("out");
    run_flex(&path, &out);
    let resolved: toml::Table = std::fs::read_to_string(out.join("scenario.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let entries = resolved["algorithms"].as_array().unwrap();
    let c = &entries.last().unwrap()["compression"];
    assert_eq!(c["start_after"].as_integer(), Some(100), "{c}");
    assert_eq!(c["min_compression_rate"].as_float(), Some(2.0), "{c}");
    let again = dir.path().join("again");
    run_flex(&out.join("scenario.toml"), &again);
    assert_eq!(
        std::fs::read_to_string(out.join("metrics.csv")).unwrap(),
        std::fs::read_to_string(again.join("metrics.csv")).unwrap()
    );
}
