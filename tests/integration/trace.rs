//! `dasim run --trace` and `dasim trace`: the timeline as a Chrome trace (`trace.json`).
//!
//! No consumer of the format works offline here (the `perfetto` Python package downloads its
//! trace processor at run time), so every event is checked field by field against the trace
//! event format's specification ("Trace Event Format", the JSON object form), and the trace
//! against the run directory it came from: one complete slice per `timeline.csv` interval with
//! its start and duration, one flow per message of `messages.csv` in the window, one instant per
//! fault of `faults.csv`.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::*;
use serde_json::Value;

/// AD-PSGD and a parameter server (a server node besides the workers), messages logged, and lost
/// messages (both retry).
fn text() -> String {
    SMALL
        .replace(
            "[[algorithms]]\nkind = \"allreduce\"\n",
            "[[algorithms]]\nkind = \"ps\"\n",
        )
        .replace("momentum = 0.9", "momentum = 0.0")
        .replace(
            "[run]",
            "[metrics]\nlog_messages = true\n\n[[faults]]\nkind = \"loss\"\nprobability = 0.05\n\n[run]",
        )
}

/// The rows of a CSV of the run directory (its stamp line skipped), as maps by column.
fn csv(dir: &Path, name: &str) -> Vec<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(dir.join(name)).unwrap();
    let mut lines = text.lines().filter(|l| !l.starts_with('#'));
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines
        .map(|l| {
            header
                .iter()
                .zip(l.split(','))
                .map(|(h, v)| (h.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

fn f(row: &BTreeMap<String, String>, k: &str) -> f64 {
    row[k].parse().unwrap()
}

fn int(e: &Value, k: &str) -> u64 {
    e[k].as_u64()
        .unwrap_or_else(|| panic!("`{k}` is not a non-negative integer in {e}"))
}

fn num(e: &Value, k: &str) -> f64 {
    e[k].as_f64()
        .unwrap_or_else(|| panic!("`{k}` is not a number in {e}"))
}

#[test]
fn the_trace_holds_every_interval_message_and_fault_in_the_trace_event_format() {
    let (dir, path) = scenario(&text(), "s.toml");
    let out = dir.path().join("out");
    let o = dasim_run_flex(&path, &out, &["--trace"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let printed = String::from_utf8_lossy(&o.stdout);
    assert!(printed.contains("trace in"), "{printed}");
    let bytes = std::fs::read(out.join("trace.json")).unwrap();
    let trace: Value = serde_json::from_slice(&bytes).unwrap();

    // The JSON object form: traceEvents, displayTimeUnit ("ms" or "ns"), otherData.
    assert_eq!(trace["displayTimeUnit"], "ms");
    let other = trace["otherData"].as_object().unwrap();
    assert!(other.values().all(Value::is_string), "{other:?}");
    assert!(other["time"].as_str().unwrap().contains("microseconds"));
    let events = trace["traceEvents"].as_array().unwrap();

    // The labels in run order: process `i + 1` is the `i`-th.
    let mut labels: Vec<String> = Vec::new();
    for r in csv(&out, "metrics.csv") {
        if !labels.contains(&r["algorithm"]) {
            labels.push(r["algorithm"].clone());
        }
    }
    assert_eq!(labels, ["ps", "adpsgd"]);
    let mut processes: BTreeMap<u64, String> = BTreeMap::new();
    let mut threads: BTreeSet<(u64, u64)> = BTreeSet::new();
    let mut used: BTreeSet<(u64, u64)> = BTreeSet::new();
    let mut slices: BTreeMap<u64, Vec<(String, i64, i64)>> = BTreeMap::new();
    let mut starts: BTreeMap<u64, (u64, f64)> = BTreeMap::new();
    let mut finishes: BTreeMap<u64, (u64, f64)> = BTreeMap::new();
    let mut instants: BTreeMap<u64, usize> = BTreeMap::new();
    for e in events {
        let ph = e["ph"].as_str().unwrap_or_else(|| panic!("no ph: {e}"));
        assert!(e["name"].is_string(), "{e}");
        let pid = int(e, "pid");
        assert!(pid >= 1);
        match ph {
            "M" => {
                let args = e["args"].as_object().unwrap();
                match e["name"].as_str().unwrap() {
                    "process_name" => {
                        processes.insert(pid, args["name"].as_str().unwrap().to_owned());
                    }
                    "thread_name" => {
                        assert!(args["name"].as_str().unwrap().contains(' '));
                        threads.insert((pid, int(e, "tid")));
                    }
                    "process_sort_index" | "thread_sort_index" => {
                        assert!(args["sort_index"].is_u64(), "{e}");
                    }
                    other => panic!("unexpected metadata event {other}"),
                }
            }
            "X" => {
                let (ts, dur) = (num(e, "ts"), num(e, "dur"));
                assert!(ts >= 0.0 && dur >= 0.0, "{e}");
                assert_eq!(e["cat"], "activity");
                let tid = int(e, "tid");
                used.insert((pid, tid));
                // In nanoseconds, to compare with the CSV's seconds exactly enough.
                slices.entry(pid).or_default().push((
                    format!("{tid} {}", e["name"].as_str().unwrap()),
                    (ts * 1e3).round() as i64,
                    (dur * 1e3).round() as i64,
                ));
            }
            "s" | "f" => {
                assert_eq!(e["cat"], "message");
                let (id, ts, tid) = (int(e, "id"), num(e, "ts"), int(e, "tid"));
                used.insert((pid, tid));
                let seen = if ph == "s" {
                    int(&e["args"], "bytes");
                    starts.insert(id, (pid, ts))
                } else {
                    assert_eq!(e["bp"], "e", "a flow ends on its enclosing slice");
                    finishes.insert(id, (pid, ts))
                };
                assert!(seen.is_none(), "flow id {id} used twice as {ph}");
            }
            "i" => {
                assert_eq!(e["s"], "t", "a fault is a thread-scoped instant");
                assert_eq!(e["cat"], "fault");
                assert!(num(e, "ts") >= 0.0);
                used.insert((pid, int(e, "tid")));
                *instants.entry(pid).or_default() += 1;
            }
            other => panic!("unexpected phase {other}"),
        }
    }
    // Every process and thread an event names has its name.
    // Named by their legends: the label, then the options that distinguish it.
    assert_eq!(processes.len(), labels.len());
    for (pid, name) in &processes {
        assert!(name.starts_with(&labels[*pid as usize - 1]), "{name}");
    }
    let processes: BTreeMap<u64, String> = (1..=labels.len() as u64)
        .map(|p| (p, labels[p as usize - 1].clone()))
        .collect();
    assert!(used.is_subset(&threads), "{:?}", used.difference(&threads));
    // Flows: every start has its end, at or after it, in the same process.
    assert_eq!(
        starts.keys().collect::<Vec<_>>(),
        finishes.keys().collect::<Vec<_>>()
    );
    for (id, (pid, ts)) in &starts {
        let (fpid, fts) = finishes[id];
        assert!(*pid == fpid && fts >= *ts, "flow {id}");
    }
    // The parameter server's node (8, after the 8 workers) is a thread of its process.
    let ps = processes
        .iter()
        .find(|(_, l)| *l == "ps")
        .map(|(p, _)| *p)
        .unwrap();
    assert!(threads.contains(&(ps, 8)));

    // Against the run directory: every interval, message and fault (8 workers: all shown).
    let timeline = csv(&out, "timeline.csv");
    let messages = csv(&out, "messages.csv");
    let faults = csv(&out, "faults.csv");
    assert!(!faults.is_empty(), "the scenario loses messages");
    for (pid, label) in &processes {
        let rows: Vec<&BTreeMap<String, String>> = timeline
            .iter()
            .filter(|r| &r["algorithm"] == label)
            .collect();
        let mut want: Vec<(String, i64, i64)> = rows
            .iter()
            .map(|r| {
                let (s, e) = (f(r, "start_s"), f(r, "end_s"));
                (
                    format!("{} {}", r["worker"], r["activity"]),
                    (s * 1e9).round() as i64,
                    ((e - s) * 1e9).round() as i64,
                )
            })
            .collect();
        let mut got = slices[pid].clone();
        want.sort();
        got.sort();
        assert_eq!(got.len(), want.len(), "{label}: one slice per interval");
        for (g, w) in got.iter().zip(&want) {
            assert!(
                g.0 == w.0 && (g.1 - w.1).abs() <= 1 && (g.2 - w.2).abs() <= 1,
                "{g:?} {w:?}"
            );
        }
        let start = rows
            .iter()
            .map(|r| f(r, "start_s"))
            .fold(f64::INFINITY, f64::min);
        let end = rows.iter().map(|r| f(r, "end_s")).fold(0.0, f64::max);
        let sent = messages
            .iter()
            .filter(|m| &m["algorithm"] == label && (start..=end).contains(&f(m, "send_s")))
            .count();
        let flows = starts.values().filter(|(p, _)| p == pid).count();
        assert_eq!(flows, sent, "{label}: one flow per message");
        assert!(flows > 0);
        let lost = faults.iter().filter(|r| &r["algorithm"] == label).count();
        assert_eq!(
            instants.get(pid).copied().unwrap_or(0),
            lost,
            "{label}: faults"
        );
    }

    // `dasim trace` writes the same file.
    let again = dir.path().join("again.json");
    let o = dasim(&[
        "trace",
        out.to_str().unwrap(),
        "--out",
        again.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(&again).unwrap(), bytes);
}

#[test]
fn a_trace_of_a_missing_run_directory_is_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let o = dasim(&["trace", dir.path().join("nothing").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"));
}
