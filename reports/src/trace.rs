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
use crate::rundir::{FaultRow, MessageRow, RunData, TimelineRow, read_csv, write_atomic};
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
    let mut trace = Trace::default();
    let mut notes = BTreeMap::new();
    let workers = data.summary.as_ref().map(|s| s.workers as u64);
    for (i, alg) in data.algorithms.iter().enumerate() {
        let note = trace.add_algorithm(data, i, alg, workers, messages.unwrap_or_default());
        if let Some(note) = note {
            notes.insert(alg.clone(), note);
        }
    }
    let other = other_data(data, messages, notes);
    let json = json!({
        "traceEvents": trace.events,
        "displayTimeUnit": "ms",
        "otherData": other,
    });
    (json, trace.counts)
}

/// The trace being built: its events, what they hold, and the last flow id given out (flows
/// are numbered from 1 across the whole trace).
#[derive(Default)]
struct Trace {
    events: Vec<Value>,
    counts: TraceCounts,
    flow_id: u64,
}

/// What the trace shows of one algorithm, its process: the window and the workers of its Gantt
/// chart.
struct Process<'a> {
    /// The algorithm's label.
    alg: &'a str,
    /// The process id: the algorithm's position in the run, from 1.
    pid: usize,
    /// The timeline window, in simulated seconds.
    window: (f64, f64),
    /// The workers shown.
    shown: BTreeSet<u64>,
    /// The run's number of workers, when the summary gives it.
    workers: Option<u64>,
}

impl Process<'_> {
    /// Whether `node` is a server node, beyond the workers. A server node has no timeline: it
    /// gets a thread of its own once a message or a fault touches it.
    fn is_server(&self, node: u64) -> bool {
        self.workers.is_some_and(|n| node >= n)
    }

    /// Whether `node` has a thread in the trace: a shown worker, or a server node.
    fn shows(&self, node: u64) -> bool {
        self.shown.contains(&node) || self.is_server(node)
    }

    /// Whether simulated time `t` falls in the window.
    fn in_window(&self, t: f64) -> bool {
        (self.window.0..=self.window.1).contains(&t)
    }
}

impl Trace {
    /// Adds algorithm `alg`, the `i`th of the run, as a process: a thread per shown worker and
    /// per server node touched, its timeline slices, the flows of its `messages` and the
    /// instants of its faults. Returns the Gantt chart's note on what is shown, or `None` (and
    /// adds nothing) when the algorithm has no timeline.
    fn add_algorithm(
        &mut self,
        data: &RunData,
        i: usize,
        alg: &str,
        workers: Option<u64>,
        messages: &[MessageRow],
    ) -> Option<String> {
        let lanes = timeline_lanes(&data.timeline, alg);
        if lanes.is_empty() {
            return None;
        }
        let shares = utilization(&data.utilization, alg);
        let gantt = gantt_chart(
            String::new(),
            lanes,
            (!shares.is_empty()).then_some(shares.as_slice()),
            GANTT_MAX_ROWS,
        );
        let window = gantt.window?;
        let pid = i + 1;
        self.events
            .push(json!({"name": "process_name", "ph": "M", "pid": pid,
            "args": {"name": data.legend(alg)}}));
        self.events
            .push(json!({"name": "process_sort_index", "ph": "M", "pid": pid,
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
            self.thread(pid, w, name);
        }
        let process = Process {
            alg,
            pid,
            window,
            shown,
            workers,
        };
        self.slices(&data.timeline, &process);
        let mut servers: BTreeSet<u64> = BTreeSet::new();
        self.flows(messages, &process, &mut servers);
        self.instants(&data.faults, &process, &mut servers);
        for k in servers {
            self.thread(pid, k, format!("node {k} (server)"));
        }
        Some(gantt.note)
    }

    /// Names thread `tid` of process `pid` `name`, and sorts it by its id.
    fn thread(&mut self, pid: usize, tid: u64, name: String) {
        self.events.push(
            json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
            "args": {"name": name}}),
        );
        self.events.push(
            json!({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
            "args": {"sort_index": tid}}),
        );
    }

    /// Adds a complete slice for each interval of `timeline` of a shown worker of `process`.
    fn slices(&mut self, timeline: &[TimelineRow], process: &Process<'_>) {
        for r in timeline
            .iter()
            .filter(|r| r.algorithm == process.alg && process.shown.contains(&r.worker))
        {
            let mut e = json!({"name": r.activity.name(), "cat": "activity", "ph": "X",
                "pid": process.pid, "tid": r.worker, "ts": us(r.start_s),
                "dur": us(r.end_s - r.start_s)});
            if let Some(p) = r.waited_for {
                e["args"] = json!({"waited_for": p});
            }
            self.events.push(e);
            self.counts.slices += 1;
        }
    }

    /// Adds a flow for each of `messages` of `process` posted in the window whose both ends
    /// have a thread, and collects the server nodes among those ends into `servers`.
    fn flows(
        &mut self,
        messages: &[MessageRow],
        process: &Process<'_>,
        servers: &mut BTreeSet<u64>,
    ) {
        for m in messages
            .iter()
            .filter(|m| m.algorithm == process.alg && process.in_window(m.send_s))
        {
            let ends = [m.src, m.dst];
            if !ends.iter().all(|&e| process.shows(e)) {
                continue;
            }
            servers.extend(ends.into_iter().filter(|&e| process.is_server(e)));
            self.flow_id += 1;
            self.events.push(
                json!({"name": "message", "cat": "message", "ph": "s", "id": self.flow_id,
                "pid": process.pid, "tid": m.src, "ts": us(m.send_s),
                "args": {"bytes": m.bytes, "to": m.dst}}),
            );
            self.events.push(
                json!({"name": "message", "cat": "message", "ph": "f", "bp": "e",
                "id": self.flow_id, "pid": process.pid, "tid": m.dst, "ts": us(m.arrive_s)}),
            );
            self.counts.flows += 1;
        }
    }

    /// Adds an instant event for each of `faults` of `process` in the window on a node that has
    /// a thread, and collects the server nodes among those into `servers`.
    fn instants(
        &mut self,
        faults: &[FaultRow],
        process: &Process<'_>,
        servers: &mut BTreeSet<u64>,
    ) {
        for f in faults.iter().filter(|f| {
            f.algorithm == process.alg && process.in_window(f.time_s) && process.shows(f.node)
        }) {
            if process.is_server(f.node) {
                servers.insert(f.node);
            }
            let mut e = json!({"name": f.event, "cat": "fault", "ph": "i", "s": "t",
                "pid": process.pid, "tid": f.node, "ts": us(f.time_s)});
            if let Some(p) = f.peer {
                e["args"] = json!({"peer": p});
            }
            self.events.push(e);
            self.counts.instants += 1;
        }
    }
}

/// The trace's `otherData`: the scenario, the version and seed that ran it, the time unit,
/// whether messages were logged, and per algorithm (`notes`) which window and workers are
/// shown.
fn other_data(
    data: &RunData,
    messages: Option<&[MessageRow]>,
    notes: BTreeMap<String, String>,
) -> serde_json::Map<String, Value> {
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
    other
}
