//! Timelines for Perfetto and `chrome://tracing`: a run directory as `trace.json`, in the Chrome
//! trace event format (the JSON object form: `traceEvents`, `displayTimeUnit`, `otherData`),
//! which the PyTorch profiler, ASTRA-sim and SimAI also write.
//!
//! | what | trace event |
//! |---|---|
//! | an algorithm | a process (`pid` = its position in the run, from 1), named by its label |
//! | a worker | a thread of its algorithm (`tid` = the worker), `worker i` (`slow`/`fast` tags as the Gantt chart's) |
//! | a server node (a parameter-server shard, Rennala's server) | a thread `node k`, when a message touches it |
//! | an interval of `timeline.csv` | a complete slice (`ph: "X"`) named by the activity (`compute`, `communicate`, `blocked`, `idle`, `down`); a `blocked` slice's `args.waited_for` is the peer whose progress ended it |
//! | a message of `messages.csv` | a flow (`ph: "s"` on the sender at its posting, `ph: "f"`, `bp: "e"` on the receiver at its arrival), `args.bytes` on the start |
//! | a fault of `faults.csv` | an instant event (`ph: "i"`, thread scope) named by the fault (`lost`, `dropped-down`, …) |
//!
//! Times are simulated microseconds (`ts`, `dur`), whatever the run's wall time was.
//!
//! **Large runs.** The trace shows what the Gantt chart shows: the timeline window that
//! `timeline.csv` holds (`[metrics] timeline_*`), and every worker up to
//! [`GANTT_MAX_ROWS`], else that many (the slowest, the fastest and an
//! even sample). Messages and faults are kept when they fall in the window and both ends are
//! shown. `otherData` says, per algorithm, which window and workers are shown, and whether
//! messages were logged (`[metrics] log_messages = true`; without it the trace has no flows).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::data::{timeline_lanes, utilization};
use crate::rundir::{MessageRow, RunData, read_csv, write_atomic};
use crate::runplots::gantt_chart;
use crate::{GANTT_MAX_ROWS, Result};

/// The file `dasim trace` and `dasim run --trace` write in a run directory.
pub const TRACE_FILE: &str = "trace.json";

/// What a trace holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceCounts {
    /// Complete slices: timeline intervals.
    pub slices: usize,
    /// Flows: messages.
    pub flows: usize,
    /// Instant events: faults.
    pub instants: usize,
}

/// Writes the trace of run directory `dir` to `out` (default `dir/trace.json`); returns its
/// path and what it holds.
pub fn write_trace(dir: &Path, out: Option<&Path>) -> Result<(PathBuf, TraceCounts)> {
    let data = RunData::load(dir)?;
    let messages = read_csv::<MessageRow>(dir)?.map(|f| f.rows);
    let (trace, counts) = trace_json(&data, messages.as_deref());
    let out = out.map_or_else(|| dir.join(TRACE_FILE), Path::to_path_buf);
    let text = serde_json::to_string(&trace).expect("a trace serializes");
    write_atomic(&out, text.as_bytes())?;
    Ok((out, counts))
}

/// Simulated seconds as trace microseconds.
fn us(s: f64) -> f64 {
    s * 1e6
}

/// The trace of a loaded run directory, and what it holds. `messages` are `messages.csv`'s rows
/// (`None` when the run did not log them).
pub fn trace_json(data: &RunData, messages: Option<&[MessageRow]>) -> (Value, TraceCounts) {
    let mut events: Vec<Value> = Vec::new();
    let mut counts = TraceCounts::default();
    let mut notes = BTreeMap::new();
    let workers = data.summary.as_ref().map(|s| s.workers as u64);
    let mut flow_id = 0u64;
    for (i, alg) in data.algorithms.iter().enumerate() {
        let pid = i + 1;
        let lanes = timeline_lanes(&data.timeline, alg);
        if lanes.is_empty() {
            continue;
        }
        let shares = utilization(&data.utilization, alg);
        let gantt = gantt_chart(
            String::new(),
            lanes,
            (!shares.is_empty()).then_some(shares.as_slice()),
            GANTT_MAX_ROWS,
        );
        let Some((start, end)) = gantt.window else {
            continue;
        };
        notes.insert(alg.clone(), gantt.note.clone());
        events.push(json!({"name": "process_name", "ph": "M", "pid": pid,
            "args": {"name": data.legend(alg)}}));
        events.push(json!({"name": "process_sort_index", "ph": "M", "pid": pid,
            "args": {"sort_index": i}}));
        let tags: BTreeMap<u64, &str> = gantt.tags.iter().map(|(w, t)| (*w, t.as_str())).collect();
        let mut shown: BTreeSet<u64> = BTreeSet::new();
        for lane in &gantt.lanes {
            let w = lane.worker;
            shown.insert(w);
            let name = match tags.get(&w) {
                Some(tag) => format!("worker {w} ({tag})"),
                None => format!("worker {w}"),
            };
            events.push(
                json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": w,
                "args": {"name": name}}),
            );
            events.push(
                json!({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": w,
                "args": {"sort_index": w}}),
            );
        }
        for r in data
            .timeline
            .iter()
            .filter(|r| &r.algorithm == alg && shown.contains(&r.worker))
        {
            let mut e = json!({"name": r.activity.name(), "cat": "activity", "ph": "X",
                "pid": pid, "tid": r.worker, "ts": us(r.start_s), "dur": us(r.end_s - r.start_s)});
            if let Some(p) = r.waited_for {
                e["args"] = json!({"waited_for": p});
            }
            events.push(e);
            counts.slices += 1;
        }
        // Server nodes (beyond the workers) have no timeline: a thread each, once a message
        // touches them.
        let is_server = |node: u64| workers.is_some_and(|n| node >= n);
        let in_window = |t: f64| (start..=end).contains(&t);
        let mut servers: BTreeSet<u64> = BTreeSet::new();
        for m in messages
            .unwrap_or_default()
            .iter()
            .filter(|m| &m.algorithm == alg && in_window(m.send_s))
        {
            let ends = [m.src, m.dst];
            if !ends.iter().all(|&e| shown.contains(&e) || is_server(e)) {
                continue;
            }
            servers.extend(ends.into_iter().filter(|&e| is_server(e)));
            flow_id += 1;
            events.push(
                json!({"name": "message", "cat": "message", "ph": "s", "id": flow_id,
                "pid": pid, "tid": m.src, "ts": us(m.send_s),
                "args": {"bytes": m.bytes, "to": m.dst}}),
            );
            events.push(
                json!({"name": "message", "cat": "message", "ph": "f", "bp": "e",
                "id": flow_id, "pid": pid, "tid": m.dst, "ts": us(m.arrive_s)}),
            );
            counts.flows += 1;
        }
        for f in data.faults.iter().filter(|f| {
            &f.algorithm == alg
                && in_window(f.time_s)
                && (shown.contains(&f.node) || is_server(f.node))
        }) {
            if is_server(f.node) {
                servers.insert(f.node);
            }
            let mut e = json!({"name": f.event, "cat": "fault", "ph": "i", "s": "t",
                "pid": pid, "tid": f.node, "ts": us(f.time_s)});
            if let Some(p) = f.peer {
                e["args"] = json!({"peer": p});
            }
            events.push(e);
            counts.instants += 1;
        }
        for k in servers {
            events.push(
                json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": k,
                "args": {"name": format!("node {k} (server)")}}),
            );
            events.push(
                json!({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": k,
                "args": {"sort_index": k}}),
            );
        }
    }
    let mut other = serde_json::Map::new();
    other.insert("scenario".into(), json!(data.scenario_name()));
    if let Some(s) = &data.summary {
        other.insert("dasim_version".into(), json!(s.dasim_version));
        other.insert("scenario_sha256".into(), json!(s.scenario_sha256));
        other.insert("seed".into(), json!(s.seed.to_string()));
    }
    other.insert(
        "time".into(),
        json!("simulated time, in microseconds (ts, dur)"),
    );
    other.insert(
        "messages".into(),
        json!(match messages {
            Some(_) =>
                "flows from messages.csv: every message in the window between two shown threads",
            None =>
                "not logged: set [metrics] log_messages = true in the scenario for message flows",
        }),
    );
    for (alg, note) in notes {
        other.insert(format!("shown: {alg}"), json!(note));
    }
    let trace = json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": other,
    });
    (trace, counts)
}
