//! The run-directory contract, through the binary on a tiny flex scenario: every file exists with
//! the stamp line and its header, the stamp's hash is the hash of `scenario.toml`, the summary has
//! every key, and the files agree with each other and with the summary.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use serde_json::Value;
use sha2::{Digest, Sha256};

const TINY: &str = r#"name = "tiny"
seed = 3

[cluster]
workers = 4
step_time_ms = 10.0

[[cluster.stragglers]]
workers = [1]
factor = 3.0

[network]
bandwidth_gbps = 10.0
latency_us = 5.0

[topology]
kind = "ring"

[model]
kind = "mlp"
hidden = [8]

[data]
batch_size = 16

[optimizer]
lr = 0.05

[run]
sim_time_s = 0.2
eval_every_s = 0.05
eval_every_steps = 25

[metrics]
eval_replicas = true
target_accuracy = 0.2
target_loss = 0.01
timeline_s = [0.0, 0.1]
log_gradients = true
log_messages = true

[[algorithms]]
kind = "ps"

[[algorithms]]
kind = "overlap-sgp"

[[algorithms]]
kind = "dasgd"
"#;

const CONTRACT: &[(&str, &str)] = &[
    (
        "metrics.csv",
        "algorithm,time_s,worker_steps,epoch,loss,accuracy,train_loss,consensus,replica_loss_min,replica_loss_mean,replica_loss_max,replica_accuracy_min,replica_accuracy_mean,replica_accuracy_max,suboptimality",
    ),
    ("series.csv", "algorithm,time_s,name,value"),
    ("staleness.csv", "algorithm,measure,worker,value,count"),
    (
        "utilization.csv",
        "algorithm,worker,steps,compute_s,communicate_s,blocked_s,idle_s",
    ),
    ("waits.csv", "algorithm,worker,waited_for,seconds"),
    ("links.csv", "algorithm,src,dst,messages,bytes,busy_s"),
    (
        "timeline.csv",
        "algorithm,worker,activity,start_s,end_s,waited_for",
    ),
    (
        "gradients.csv",
        "algorithm,worker,row,read_s,apply_s,row_staleness,global_staleness",
    ),
    ("messages.csv", "algorithm,src,dst,bytes,send_s,arrive_s"),
    ("partition.csv", "worker,samples,class_0"),
];

/// The rows of a contract CSV (stamp and header checked), as maps from column to cell.
fn rows(dir: &Path, file: &str) -> Vec<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(dir.join(file)).unwrap();
    let mut lines = text.lines();
    lines.next();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines
        .map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            assert_eq!(cells.len(), header.len(), "{file}: {l}");
            header
                .iter()
                .zip(cells)
                .map(|(h, c)| (h.to_string(), c.to_string()))
                .collect()
        })
        .collect()
}

fn f(row: &BTreeMap<String, String>, col: &str) -> f64 {
    row[col]
        .parse()
        .unwrap_or_else(|_| panic!("{col} = {:?}", row[col]))
}

#[test]
fn a_run_directory_follows_the_contract() {
    let (tmp, path) = scenario(TINY, "tiny.toml");
    let dir = tmp.path().join("out");
    run_flex(&path, &dir);

    // The stamp: version, revision, and the hash of the scenario.toml written beside it.
    let toml = std::fs::read(dir.join("scenario.toml")).unwrap();
    let sha: String = Sha256::digest(&toml)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let summary: Value =
        serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    let git = summary["git_revision"].as_str().unwrap_or("unknown");
    let stamp = format!(
        "# dasim {} git={git} scenario_sha256={sha}",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(summary["scenario_sha256"], sha.as_str());
    for (file, header) in CONTRACT {
        let text =
            std::fs::read_to_string(dir.join(file)).unwrap_or_else(|_| panic!("{file} missing"));
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some(stamp.as_str()), "{file}");
        assert!(lines.next().unwrap().starts_with(header), "{file}");
        assert!(lines.next().is_some(), "{file} has no row");
    }

    // The summary: every key of the contract.
    for key in [
        "scenario",
        "seed",
        "dasim_version",
        "git_revision",
        "scenario_sha256",
        "backend",
        "device",
        "workers",
        "params",
        "runs",
    ] {
        assert!(summary.get(key).is_some(), "summary lacks {key}");
    }
    let runs = summary["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    for r in runs {
        for key in [
            "algorithm",
            "kind",
            "options",
            "backend",
            "sim_time_s",
            "events",
            "worker_steps",
            "steps_per_sim_s",
            "epochs",
            "final_loss",
            "final_accuracy",
            "messages",
            "bytes",
            "gradient_flushes",
            "gradient_requests",
            "global_staleness",
            "row_staleness",
            "final_consensus",
            "time_to_target",
            "utilization",
        ] {
            assert!(r.get(key).is_some(), "run lacks {key}: {r}");
        }
        for key in ["count", "mean", "p99", "max"] {
            assert!(r["global_staleness"][key].is_number(), "{r}");
            assert!(r["row_staleness"][key].is_number(), "{r}");
        }
        assert!(r.get("staleness").is_none(), "the measure is named: {r}");
        // A loss of 0.01 is out of reach in 0.2 s.
        assert!(r["time_to_target"]["loss_s"].is_null(), "{r}");
        let u = &r["utilization"];
        let total: f64 = ["compute", "communicate", "blocked", "idle"]
            .iter()
            .map(|k| u[k].as_f64().unwrap())
            .sum();
        assert!((total - 1.0).abs() < 1e-9, "{u}");
    }
    assert!(
        runs.iter()
            .any(|r| r["time_to_target"]["accuracy_s"].is_number()),
        "no run reached 20% accuracy"
    );
    let by_kind = |k: &str| runs.iter().find(|r| r["kind"] == k).unwrap();
    assert!(
        by_kind("overlap-sgp")["message_age"]["count"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(by_kind("ps").get("message_age").is_none());
    // One step's oldest message is one of the messages: at most as many, never older.
    let osgp = by_kind("overlap-sgp");
    assert!(osgp["mix_age"]["count"].as_u64() <= osgp["message_age"]["count"].as_u64());
    assert_eq!(osgp["mix_age"]["max"], osgp["message_age"]["max"]);
    assert!(by_kind("ps").get("mix_age").is_none());
    // Each run records the `[[algorithms]]` entry it ran, every default filled in, so that no
    // reader parses `scenario.toml` for labels, kinds or options.
    for r in runs {
        assert_eq!(r["options"]["kind"], r["kind"], "{r}");
        assert!(
            r["options"].get("label").is_none(),
            "no label was given: {r}"
        );
    }
    assert_eq!(
        by_kind("overlap-sgp")["options"],
        serde_json::json!({"kind": "overlap-sgp", "send": "after-mix", "tau": 1})
    );
    assert!(by_kind("dasgd")["dasgd"]["mean"].as_f64().unwrap() > 0.0);
    // The parameter server's 4 workers, one 3× slower: about 3 updates between pull and push
    // for the healthy ones, about 3·3 for the straggler.
    let ps = &by_kind("ps");
    let row = ps["row_staleness"]["mean"].as_f64().unwrap();
    assert!((2.5..5.0).contains(&row), "ps staleness {row}");
    // One server model: every gradient application is a server update, so both measures agree.
    assert_eq!(ps["global_staleness"], ps["row_staleness"]);

    // The files agree with each other and with the summary.
    for r in runs {
        let alg = r["algorithm"].as_str().unwrap();
        let mine = |file: &str| -> Vec<BTreeMap<String, String>> {
            rows(&dir, file)
                .into_iter()
                .filter(|row| row["algorithm"] == alg)
                .collect()
        };
        let sim = r["sim_time_s"].as_f64().unwrap();
        let usage = mine("utilization.csv");
        assert_eq!(usage.len(), 4);
        let mut steps = 0;
        for u in &usage {
            let t: f64 = ["compute_s", "communicate_s", "blocked_s", "idle_s"]
                .iter()
                .map(|c| f(u, c))
                .sum();
            assert!((t - sim).abs() < 1e-9, "{alg}: {t} s of {sim}");
            steps += f(u, "steps") as u64;
        }
        assert_eq!(steps, r["worker_steps"].as_u64().unwrap());
        let links = mine("links.csv");
        let messages: f64 = links.iter().map(|l| f(l, "messages")).sum();
        let bytes: f64 = links.iter().map(|l| f(l, "bytes")).sum();
        assert_eq!(messages as u64, r["messages"].as_u64().unwrap());
        assert_eq!(bytes as u64, r["bytes"].as_u64().unwrap());
        assert_eq!(
            mine("messages.csv").len() as u64,
            r["messages"].as_u64().unwrap()
        );
        let gradients = mine("gradients.csv");
        for measure in ["global", "row"] {
            let staleness = mine("staleness.csv");
            let bins: Vec<_> = staleness
                .iter()
                .filter(|s| s["measure"] == measure)
                .collect();
            let count: f64 = bins.iter().map(|s| f(s, "count")).sum();
            let key = format!("{measure}_staleness");
            assert_eq!(count as u64, r[&key]["count"].as_u64().unwrap());
            assert_eq!(gradients.len() as u64, count as u64);
            // The log's column sums to the histogram's total.
            let total: f64 = bins.iter().map(|s| f(s, "value") * f(s, "count")).sum();
            let logged: f64 = gradients.iter().map(|g| f(g, &key)).sum();
            assert_eq!(total, logged, "{alg} {measure}");
        }
        // The timeline covers [0, 0.1] for every worker.
        for w in 0..4 {
            let ivs: Vec<_> = mine("timeline.csv")
                .into_iter()
                .filter(|i| i["worker"] == w.to_string())
                .collect();
            let covered: f64 = ivs.iter().map(|i| f(i, "end_s") - f(i, "start_s")).sum();
            assert!((covered - 0.1).abs() < 1e-9, "{alg} worker {w}: {covered}");
        }
        // Points on the 0.05 s grid and every 25 worker steps; replicas evaluated.
        let points = mine("metrics.csv");
        // The time to target accuracy is the first point at or above it.
        let first = points
            .iter()
            .find(|p| f(p, "accuracy") >= 0.2)
            .map(|p| f(p, "time_s"));
        assert_eq!(r["time_to_target"]["accuracy_s"].as_f64(), first, "{alg}");
        assert!(points.len() > 5, "{alg}: {} points", points.len());
        assert!(points.iter().all(|p| !p["consensus"].is_empty()));
        assert!(
            points
                .iter()
                .all(|p| f(p, "replica_loss_min") <= f(p, "replica_loss_max"))
        );
    }
    let series = rows(&dir, "series.csv");
    let names: std::collections::BTreeSet<&str> =
        series.iter().map(|s| s["name"].as_str()).collect();
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["staleness_avg", "staleness_max", "weight_max", "weight_min"]
    );

    // Without the logs, a rerun into the same directory (--force) leaves no stale log behind.
    let quiet = TINY
        .replace("log_gradients = true", "log_gradients = false")
        .replace("log_messages = true", "")
        .replace("eval_replicas = true", "");
    std::fs::write(&path, quiet).unwrap();
    let o = dasim_run_flex(&path, &dir, &["--force"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!dir.join("gradients.csv").exists());
    assert!(!dir.join("messages.csv").exists());
    let points = rows(&dir, "metrics.csv");
    assert!(points.iter().all(|p| p["replica_loss_min"].is_empty()));
}

#[test]
fn bad_metrics_values_are_located_in_the_file() {
    for (from, to, needles) in [
        (
            "timeline_s = [0.0, 0.1]",
            "timeline_s = [0.1, 0.05]",
            [
                "bad.toml:38:14",
                "metrics.timeline_s",
                "not after it starts",
            ],
        ),
        (
            "target_accuracy = 0.2",
            "target_accuracy = 20",
            ["bad.toml:36:19", "metrics.target_accuracy", "(0, 1]"],
        ),
        (
            "eval_every_steps = 25",
            "eval_every_steps = 0",
            ["bad.toml:32:20", "run.eval_every_steps", "at least 1"],
        ),
    ] {
        let (_dir, path) = scenario(&TINY.replace(from, to), "bad.toml");
        let o = dasim(&["validate", path.to_str().unwrap()]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        for n in needles {
            assert!(err.contains(n), "`{n}` not in:\n{err}");
        }
    }
}
