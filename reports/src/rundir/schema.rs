//! What each file of a run directory holds: its name, its row type (the same type is written
//! and read back), `summary.json`, `timings.json` and the stamp.
//!
//! A CSV row type implements [`CsvRow`]: its file, its header ([`crate::columns`]), how its
//! cells are written ([`CsvRow::cells`]) and how they are read back ([`CsvRow::read`]). A float
//! is written with Rust's shortest round-trip formatting (`{}`), so it reads back to the same
//! bits; an optional value that is `None` is an empty cell ("not measured").

use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize};
use sha2::{Digest, Sha256};

use crate::Result;
use crate::columns;
use crate::rundir::read::Cells;

mod summary;
mod timings;

pub use summary::{
    AlgorithmStaleness, AlgorithmSummary, FaultSummary, IntStats, Stopped, Summary, TimeToTarget,
    Utilization,
};
pub use timings::{HostTimings, Timings};

/// The names of the files of a run directory.
pub mod files {
    /// The scenario as run, every default filled in.
    pub const SCENARIO: &str = "scenario.toml";
    /// The simulation's results: [`super::Summary`].
    pub const SUMMARY: &str = "summary.json";
    /// The host's speed: [`super::Timings`].
    pub const TIMINGS: &str = "timings.json";
    /// Evaluation points: [`super::MetricRow`].
    pub const METRICS: &str = "metrics.csv";
    /// Algorithm-specific quantities at evaluation points: [`super::SeriesRow`].
    pub const SERIES: &str = "series.csv";
    /// Staleness and message-age histograms: [`super::StalenessRow`].
    pub const STALENESS: &str = "staleness.csv";
    /// Where each worker's time went: [`super::UtilizationRow`].
    pub const UTILIZATION: &str = "utilization.csv";
    /// Time blocked, per worker and peer: [`super::WaitRow`].
    pub const WAITS: &str = "waits.csv";
    /// Traffic per directed link: [`super::LinkRow`].
    pub const LINKS: &str = "links.csv";
    /// Intervals of worker activity: [`super::TimelineRow`].
    pub const TIMELINE: &str = "timeline.csv";
    /// Every applied gradient, when `[metrics] log_gradients`: [`super::GradientRow`].
    pub const GRADIENTS: &str = "gradients.csv";
    /// Every message, when `[metrics] log_messages`: [`super::MessageRow`].
    pub const MESSAGES: &str = "messages.csv";
    /// The data shards: [`super::Partition`].
    pub const PARTITION: &str = "partition.csv";
    /// The verdicts of the scenario's `[[expect]]` entries: [`super::CheckRow`].
    pub const CHECKS: &str = "checks.csv";
    /// The messages faults touched, under `[[faults]]`: [`super::FaultRow`].
    pub const FAULTS: &str = "faults.csv";
}

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The first line of every CSV file of a run:
/// `# dasim <version> git=<revision> scenario_sha256=<hex>`. [`Display`](std::fmt::Display)
/// writes it (without a newline), [`Stamp::parse`] reads it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Stamp {
    /// dasim's version.
    pub version: String,
    /// The git revision dasim was built from (`unknown` when it was not known).
    pub git: String,
    /// SHA-256 of the resolved `scenario.toml` written beside the file, in hex.
    pub scenario_sha256: String,
}

impl Stamp {
    /// The stamp of a run of dasim `version`, built from git revision `git`, whose resolved
    /// scenario is `scenario_toml`.
    pub fn of_scenario(version: &str, git: &str, scenario_toml: &str) -> Stamp {
        Stamp {
            version: version.to_owned(),
            git: git.to_owned(),
            scenario_sha256: sha256_hex(scenario_toml.as_bytes()),
        }
    }

    /// Parses a stamp line (with or without the leading `#`); `None` if it is not one.
    pub fn parse(line: &str) -> Option<Stamp> {
        let mut words = line.trim_start_matches('#').split_whitespace();
        if words.next()? != "dasim" {
            return None;
        }
        let mut stamp = Stamp {
            version: words.next()?.to_owned(),
            ..Stamp::default()
        };
        for word in words {
            if let Some(v) = word.strip_prefix("git=") {
                stamp.git = v.to_owned();
            } else if let Some(v) = word.strip_prefix("scenario_sha256=") {
                stamp.scenario_sha256 = v.to_owned();
            }
        }
        Some(stamp)
    }
}

impl std::fmt::Display for Stamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "# dasim {} git={} scenario_sha256={}",
            self.version, self.git, self.scenario_sha256
        )
    }
}

/// A row of one CSV file of the run directory: the file, its header, and how a row is written
/// and read back.
pub trait CsvRow: Sized {
    /// The file's name in the run directory ([`files`]).
    const FILE: &'static str;
    /// Its header, in column order ([`crate::columns`]).
    const COLUMNS: &'static [&'static str];
    /// The columns a file must have to be read; any other column may be absent (its values
    /// read as `None`).
    const REQUIRED: &'static [&'static str] = Self::COLUMNS;
    /// Columns left out of a file written whole ([`crate::rundir::write_csv`]) when every row's
    /// cell in them is empty: a file without them reads the same, and a run that has nothing
    /// to put there writes the bytes it wrote before the column existed.
    const OMITTED_WHEN_EMPTY: &'static [&'static str] = &[];

    /// The row's cells, in [`COLUMNS`](Self::COLUMNS) order.
    fn cells(&self) -> Vec<String>;

    /// [`cells`](Self::cells) written over `out` (one string per column, in order), reusing
    /// its strings' buffers: the rows of the large tables (a thousand workers' timeline, the
    /// staleness histograms) fill one buffer each instead of allocating a string per cell.
    fn fill(&self, out: &mut Vec<String>) {
        *out = self.cells();
    }

    /// Reads a row back, its columns found by name.
    fn read(cells: &Cells) -> Result<Self>;
}

/// A float as written: Rust's `{}`, or an empty cell for NaN ("not measured").
pub fn num(x: f64) -> String {
    if x.is_nan() {
        String::new()
    } else {
        x.to_string()
    }
}

/// `x`, or `None` when it is NaN ("not measured").
pub fn measured(x: f64) -> Option<f64> {
    (!x.is_nan()).then_some(x)
}

/// Replaces the text of `cell` with `value` written by `{}`, keeping its buffer.
fn put(cell: &mut String, value: impl std::fmt::Display) {
    use std::fmt::Write;
    cell.clear();
    write!(cell, "{value}").expect("writing to a String cannot fail");
}

/// [`num`] into `cell` ([`put`]).
fn put_num(cell: &mut String, x: f64) {
    if x.is_nan() {
        cell.clear();
    } else {
        put(cell, x);
    }
}

/// `out` as `n` cells, keeping the strings it has.
fn cells_of(out: &mut Vec<String>, n: usize) -> &mut [String] {
    out.resize_with(n, String::new);
    out
}

fn opt_num(x: Option<f64>) -> String {
    x.map(num).unwrap_or_default()
}

fn opt_int(x: Option<u64>) -> String {
    x.map(|x| x.to_string()).unwrap_or_default()
}

/// One row of `metrics.csv`: an evaluation point of one algorithm. Every value but the
/// algorithm and the time is optional (`None`: not measured, or the column is absent).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MetricRow {
    /// The algorithm's label.
    pub algorithm: String,
    /// Simulated time of the evaluation, in seconds.
    pub time_s: f64,
    /// Local steps taken by all workers so far.
    pub worker_steps: Option<u64>,
    /// Samples processed so far, in training-set sizes.
    pub epoch: Option<f64>,
    /// Held-out loss of the evaluated model.
    pub loss: Option<f64>,
    /// Held-out accuracy of the evaluated model, in `[0, 1]`.
    pub accuracy: Option<f64>,
    /// Mean minibatch loss since the previous point.
    pub train_loss: Option<f64>,
    /// Consensus distance `(1/n) Σ_i ‖x_i − x̄‖²`.
    pub consensus: Option<f64>,
    /// Smallest held-out loss over the worker replicas.
    pub replica_loss_min: Option<f64>,
    /// Mean held-out loss over the worker replicas.
    pub replica_loss_mean: Option<f64>,
    /// Largest held-out loss over the worker replicas.
    pub replica_loss_max: Option<f64>,
    /// Smallest held-out accuracy over the worker replicas.
    pub replica_accuracy_min: Option<f64>,
    /// Mean held-out accuracy over the worker replicas.
    pub replica_accuracy_mean: Option<f64>,
    /// Largest held-out accuracy over the worker replicas.
    pub replica_accuracy_max: Option<f64>,
    /// `f(x) − f*` of the training objective.
    pub suboptimality: Option<f64>,
}

impl CsvRow for MetricRow {
    const FILE: &'static str = files::METRICS;
    const COLUMNS: &'static [&'static str] = columns::METRICS;
    const REQUIRED: &'static [&'static str] = &["algorithm", "time_s"];

    fn cells(&self) -> Vec<String> {
        vec![
            self.algorithm.clone(),
            num(self.time_s),
            opt_int(self.worker_steps),
            opt_num(self.epoch),
            opt_num(self.loss),
            opt_num(self.accuracy),
            opt_num(self.train_loss),
            opt_num(self.consensus),
            opt_num(self.replica_loss_min),
            opt_num(self.replica_loss_mean),
            opt_num(self.replica_loss_max),
            opt_num(self.replica_accuracy_min),
            opt_num(self.replica_accuracy_mean),
            opt_num(self.replica_accuracy_max),
            opt_num(self.suboptimality),
        ]
    }

    fn read(r: &Cells) -> Result<Self> {
        Ok(MetricRow {
            algorithm: r.text("algorithm")?.to_owned(),
            time_s: r.req("time_s")?,
            worker_steps: r.opt("worker_steps")?,
            epoch: r.opt("epoch")?,
            loss: r.opt("loss")?,
            accuracy: r.opt("accuracy")?,
            train_loss: r.opt("train_loss")?,
            consensus: r.opt("consensus")?,
            replica_loss_min: r.opt("replica_loss_min")?,
            replica_loss_mean: r.opt("replica_loss_mean")?,
            replica_loss_max: r.opt("replica_loss_max")?,
            replica_accuracy_min: r.opt("replica_accuracy_min")?,
            replica_accuracy_mean: r.opt("replica_accuracy_mean")?,
            replica_accuracy_max: r.opt("replica_accuracy_max")?,
            suboptimality: r.opt("suboptimality")?,
        })
    }
}

/// One row of `series.csv`: a named algorithm-specific quantity at an evaluation point.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SeriesRow {
    /// The algorithm's label.
    pub algorithm: String,
    /// Simulated time, in seconds.
    pub time_s: f64,
    /// The quantity, e.g. `weight_min`, `staleness_avg`.
    pub name: String,
    /// Its value (`None`: not measured).
    pub value: Option<f64>,
}

impl CsvRow for SeriesRow {
    const FILE: &'static str = files::SERIES;
    const COLUMNS: &'static [&'static str] = columns::SERIES;

    fn cells(&self) -> Vec<String> {
        vec![
            self.algorithm.clone(),
            num(self.time_s),
            self.name.clone(),
            opt_num(self.value),
        ]
    }

    fn read(r: &Cells) -> Result<Self> {
        Ok(SeriesRow {
            algorithm: r.text("algorithm")?.to_owned(),
            time_s: r.req("time_s")?,
            name: r.text("name")?.to_owned(),
            value: r.opt("value")?,
        })
    }
}

/// One row of `staleness.csv`: a histogram bin.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StalenessRow {
    /// The algorithm's label.
    pub algorithm: String,
    /// Which measure: `global` (global staleness: global iterations between a gradient's read
    /// and its application), `row` (row staleness: updates of the target row between them),
    /// `message_age` (every mixed message's age in iterations) or `mix_age` (per mixing step,
    /// the oldest message's age). Files written before the global measure call `row`
    /// `gradient`; it is read as `row`.
    pub measure: String,
    /// The worker that computed the gradient (`global`, `row`) or received the message
    /// (`message_age`, `mix_age`).
    pub worker: u64,
    /// The staleness, in global iterations (`global`) or updates of the row (`row`); the age,
    /// in the receiver's iterations.
    pub value: u64,
    /// How many applications (messages, mixing steps) had it.
    pub count: u64,
}

impl CsvRow for StalenessRow {
    const FILE: &'static str = files::STALENESS;
    const COLUMNS: &'static [&'static str] = columns::STALENESS;

    fn cells(&self) -> Vec<String> {
        vec![
            self.algorithm.clone(),
            self.measure.clone(),
            self.worker.to_string(),
            self.value.to_string(),
            self.count.to_string(),
        ]
    }

    fn fill(&self, out: &mut Vec<String>) {
        let [algorithm, measure, worker, value, count] = cells_of(out, 5) else {
            unreachable!("five cells")
        };
        put(algorithm, &self.algorithm);
        put(measure, &self.measure);
        put(worker, self.worker);
        put(value, self.value);
        put(count, self.count);
    }

    fn read(r: &Cells) -> Result<Self> {
        Ok(StalenessRow {
            algorithm: r.text("algorithm")?.to_owned(),
            measure: match r.text("measure")? {
                "gradient" => "row".to_owned(),
                m => m.to_owned(),
            },
            worker: r.req("worker")?,
            value: r.req("value")?,
            count: r.req("count")?,
        })
    }
}

/// One row of `utilization.csv`: where a worker's simulated time went.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct UtilizationRow {
    /// The algorithm's label.
    pub algorithm: String,
    /// The worker.
    pub worker: u64,
    /// Local steps the worker completed.
    pub steps: u64,
    /// Seconds computing gradients.
    pub compute_s: f64,
    /// Seconds communicating (and nothing else).
    pub communicate_s: f64,
    /// Seconds blocked waiting for a peer.
    pub blocked_s: f64,
    /// Seconds idle.
    pub idle_s: f64,
    /// Seconds down (crashed by a `[[faults]]` entry, not rejoined): `None` for a run without
    /// `[[faults]]`, and read as `None` from a file without the column.
    pub down_s: Option<f64>,
}

impl CsvRow for UtilizationRow {
    const FILE: &'static str = files::UTILIZATION;
    const COLUMNS: &'static [&'static str] = columns::UTILIZATION;
    // `down_s` only with `[[faults]]`: older files, and runs without faults, lack it.
    const REQUIRED: &'static [&'static str] = &[
        "algorithm",
        "worker",
        "steps",
        "compute_s",
        "communicate_s",
        "blocked_s",
        "idle_s",
    ];
    const OMITTED_WHEN_EMPTY: &'static [&'static str] = &["down_s"];

    fn cells(&self) -> Vec<String> {
        vec![
            self.algorithm.clone(),
            self.worker.to_string(),
            self.steps.to_string(),
            num(self.compute_s),
            num(self.communicate_s),
            num(self.blocked_s),
            num(self.idle_s),
            opt_num(self.down_s),
        ]
    }

    fn read(r: &Cells) -> Result<Self> {
        Ok(UtilizationRow {
            algorithm: r.text("algorithm")?.to_owned(),
            worker: r.req("worker")?,
            steps: r.req("steps")?,
            compute_s: r.req("compute_s")?,
            communicate_s: r.req("communicate_s")?,
            blocked_s: r.req("blocked_s")?,
            idle_s: r.req("idle_s")?,
            down_s: r.opt("down_s")?,
        })
    }
}

/// One row of `waits.csv`: how long a worker was blocked on one peer, in total.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct WaitRow {
    /// The algorithm's label.
    pub algorithm: String,
    /// The worker that waited.
    pub worker: u64,
    /// The peer whose arrival ended the waits.
    pub waited_for: u64,
    /// Simulated seconds blocked on it.
    pub seconds: f64,
}

impl CsvRow for WaitRow {
    const FILE: &'static str = files::WAITS;
    const COLUMNS: &'static [&'static str] = columns::WAITS;

    fn cells(&self) -> Vec<String> {
        vec![
            self.algorithm.clone(),
            self.worker.to_string(),
            self.waited_for.to_string(),
            num(self.seconds),
        ]
    }

    fn read(r: &Cells) -> Result<Self> {
        Ok(WaitRow {
            algorithm: r.text("algorithm")?.to_owned(),
            worker: r.req("worker")?,
            waited_for: r.req("waited_for")?,
            seconds: r.req("seconds")?,
        })
    }
}

/// One row of `links.csv`: the traffic of one directed link.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LinkRow {
    /// The algorithm's label.
    pub algorithm: String,
    /// Sending node.
    pub src: u64,
    /// Receiving node.
    pub dst: u64,
    /// Messages sent.
    pub messages: u64,
    /// Bytes sent (headers included).
    pub bytes: u64,
    /// Simulated seconds a message of the pair was being transmitted.
    pub busy_s: f64,
}

impl CsvRow for LinkRow {
    const FILE: &'static str = files::LINKS;
    const COLUMNS: &'static [&'static str] = columns::LINKS;

    fn cells(&self) -> Vec<String> {
        vec![
            self.algorithm.clone(),
            self.src.to_string(),
            self.dst.to_string(),
            self.messages.to_string(),
            self.bytes.to_string(),
            num(self.busy_s),
        ]
    }

    fn read(r: &Cells) -> Result<Self> {
        Ok(LinkRow {
            algorithm: r.text("algorithm")?.to_owned(),
            src: r.req("src")?,
            dst: r.req("dst")?,
            messages: r.req("messages")?,
            bytes: r.req("bytes")?,
            busy_s: r.req("busy_s")?,
        })
    }
}

/// A row of `faults.csv`: one message a fault touched, inside the timeline window (at most
/// 100,000 per algorithm; `summary.json`'s `faults` counts them all).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultRow {
    /// The algorithm's label.
    pub algorithm: String,
    /// When, seconds: the message's posting, or its landing for `dropped-down`.
    pub time_s: f64,
    /// `lost`, `lost-link-down`, `dropped-down`, `duplicated` or `delayed`.
    pub event: String,
    /// The node whose timeline shows it: the sender, or the down receiver of a dropped message.
    pub node: u64,
    /// The receiver; none for a dropped message.
    pub peer: Option<u64>,
}

impl CsvRow for FaultRow {
    const FILE: &'static str = files::FAULTS;
    const COLUMNS: &'static [&'static str] = columns::FAULTS;

    fn cells(&self) -> Vec<String> {
        vec![
            self.algorithm.clone(),
            num(self.time_s),
            self.event.clone(),
            self.node.to_string(),
            self.peer.map(|p| p.to_string()).unwrap_or_default(),
        ]
    }

    fn read(r: &Cells) -> Result<Self> {
        Ok(FaultRow {
            algorithm: r.text("algorithm")?.to_owned(),
            time_s: r.req("time_s")?,
            event: r.text("event")?.to_owned(),
            node: r.req("node")?,
            peer: r.opt("peer")?,
        })
    }
}

/// What a worker is doing during a [`TimelineRow`]'s interval: the engine's own
/// ([`dasim_sim::record::Activity`]), whose `name` is what `timeline.csv` holds and whose
/// `FromStr` reads it back.
pub use dasim_sim::record::Activity;

/// One row of `timeline.csv`: an interval of one worker's activity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelineRow {
    /// The algorithm's label.
    pub algorithm: String,
    /// The worker.
    pub worker: u64,
    /// What it was doing.
    pub activity: Activity,
    /// Start, in simulated seconds.
    pub start_s: f64,
    /// End, in simulated seconds.
    pub end_s: f64,
    /// For `blocked`: the peer whose arrival ended the wait.
    pub waited_for: Option<u64>,
}

impl CsvRow for TimelineRow {
    const FILE: &'static str = files::TIMELINE;
    const COLUMNS: &'static [&'static str] = columns::TIMELINE;
    // `waited_for` may be absent: only blocked intervals have one.
    const REQUIRED: &'static [&'static str] =
        &["algorithm", "worker", "activity", "start_s", "end_s"];

    fn cells(&self) -> Vec<String> {
        vec![
            self.algorithm.clone(),
            self.worker.to_string(),
            self.activity.name().to_owned(),
            num(self.start_s),
            num(self.end_s),
            opt_int(self.waited_for),
        ]
    }

    fn fill(&self, out: &mut Vec<String>) {
        let [algorithm, worker, activity, start, end, waited_for] = cells_of(out, 6) else {
            unreachable!("six cells")
        };
        put(algorithm, &self.algorithm);
        put(worker, self.worker);
        put(activity, self.activity.name());
        put_num(start, self.start_s);
        put_num(end, self.end_s);
        match self.waited_for {
            Some(w) => put(waited_for, w),
            None => waited_for.clear(),
        }
    }

    fn read(r: &Cells) -> Result<Self> {
        Ok(TimelineRow {
            algorithm: r.text("algorithm")?.to_owned(),
            worker: r.req("worker")?,
            activity: r.req("activity")?,
            start_s: r.req("start_s")?,
            end_s: r.req("end_s")?,
            waited_for: r.opt("waited_for")?,
        })
    }
}

/// One row of `gradients.csv`: an applied gradient.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GradientRow {
    /// The algorithm's label.
    pub algorithm: String,
    /// The worker that computed it.
    pub worker: u64,
    /// The replica (store row) it was applied to.
    pub row: u64,
    /// When the parameters it was computed on were read, in simulated seconds.
    pub read_s: f64,
    /// When it was applied, in simulated seconds.
    pub apply_s: f64,
    /// Row staleness: updates the row received between the read and the application.
    pub row_staleness: u64,
    /// Global staleness: global iterations (gradients applied anywhere, each counted at its
    /// first application) between the read and the application.
    pub global_staleness: u64,
}

impl CsvRow for GradientRow {
    const FILE: &'static str = files::GRADIENTS;
    const COLUMNS: &'static [&'static str] = columns::GRADIENTS;

    fn cells(&self) -> Vec<String> {
        vec![
            self.algorithm.clone(),
            self.worker.to_string(),
            self.row.to_string(),
            num(self.read_s),
            num(self.apply_s),
            self.row_staleness.to_string(),
            self.global_staleness.to_string(),
        ]
    }

    fn read(r: &Cells) -> Result<Self> {
        Ok(GradientRow {
            algorithm: r.text("algorithm")?.to_owned(),
            worker: r.req("worker")?,
            row: r.req("row")?,
            read_s: r.req("read_s")?,
            apply_s: r.req("apply_s")?,
            row_staleness: r.req("row_staleness")?,
            global_staleness: r.req("global_staleness")?,
        })
    }
}

/// One row of `messages.csv`: a message on the network.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MessageRow {
    /// The algorithm's label.
    pub algorithm: String,
    /// Sending node.
    pub src: u64,
    /// Receiving node.
    pub dst: u64,
    /// Size, in bytes (headers included).
    pub bytes: u64,
    /// When it was sent, in simulated seconds.
    pub send_s: f64,
    /// When it arrived, in simulated seconds.
    pub arrive_s: f64,
}

impl CsvRow for MessageRow {
    const FILE: &'static str = files::MESSAGES;
    const COLUMNS: &'static [&'static str] = columns::MESSAGES;

    fn cells(&self) -> Vec<String> {
        vec![
            self.algorithm.clone(),
            self.src.to_string(),
            self.dst.to_string(),
            self.bytes.to_string(),
            num(self.send_s),
            num(self.arrive_s),
        ]
    }

    fn read(r: &Cells) -> Result<Self> {
        Ok(MessageRow {
            algorithm: r.text("algorithm")?.to_owned(),
            src: r.req("src")?,
            dst: r.req("dst")?,
            bytes: r.req("bytes")?,
            send_s: r.req("send_s")?,
            arrive_s: r.req("arrive_s")?,
        })
    }
}

/// The verdict on a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckResult {
    /// It holds.
    Pass,
    /// It does not hold, or its value could not be read.
    Fail,
    /// It does not apply (the algorithm does not define the metric).
    Skip,
}

impl CheckResult {
    /// `pass`, `fail` or `skip`.
    pub fn name(self) -> &'static str {
        match self {
            CheckResult::Pass => "pass",
            CheckResult::Fail => "fail",
            CheckResult::Skip => "skip",
        }
    }
}

impl FromStr for CheckResult {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        [CheckResult::Pass, CheckResult::Fail, CheckResult::Skip]
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| format!("unknown result `{s}` (expected pass, fail or skip)"))
    }
}

/// One row of `checks.csv` (and of `summary.json`'s `checks`): the verdict on one `[[expect]]`
/// entry for one algorithm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckRow {
    /// The entry's index among the scenario's `[[expect]]` entries, from 0.
    pub expect: u64,
    /// The algorithm's label.
    pub algorithm: String,
    /// The metric, as written.
    pub metric: String,
    /// How a time series was reduced: `final`, `max`, `min`, `mean` or `at=T`; empty for a
    /// scalar metric.
    pub over: String,
    /// The comparison: `<`, `<=`, `>`, `>=`, `==` or `~=`.
    pub op: String,
    /// The bound as written: a number or an expression.
    pub value: String,
    /// The observed value (`+∞`: a target not reached, written `inf` in `checks.csv` and
    /// `null` in `summary.json`); `None` when it could not be read.
    pub observed: Option<f64>,
    /// The bound's value; `None` when it could not be computed.
    pub bound: Option<f64>,
    /// For `~=`: the allowance `max(abs_tol, rel_tol · |bound|)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<f64>,
    /// The verdict.
    pub result: CheckResult,
    /// Why it failed or was skipped, when it was not a plain comparison (a value not
    /// measured, a target not reached), or how it was aggregated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The entry's `note`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl CsvRow for CheckRow {
    const FILE: &'static str = files::CHECKS;
    const COLUMNS: &'static [&'static str] = columns::CHECKS;
    const REQUIRED: &'static [&'static str] = &["expect", "algorithm", "metric", "op", "result"];

    fn cells(&self) -> Vec<String> {
        vec![
            self.expect.to_string(),
            self.algorithm.clone(),
            self.metric.clone(),
            self.over.clone(),
            self.op.clone(),
            self.value.clone(),
            opt_num(self.observed),
            opt_num(self.bound),
            opt_num(self.tolerance),
            self.result.name().to_owned(),
            self.reason.clone().unwrap_or_default(),
            self.note.clone().unwrap_or_default(),
        ]
    }

    fn read(r: &Cells) -> Result<Self> {
        let text = |c: &str| r.cell(c).unwrap_or_default().to_owned();
        let opt_text = |c: &str| r.cell(c).filter(|s| !s.is_empty()).map(str::to_owned);
        Ok(CheckRow {
            expect: r.req("expect")?,
            algorithm: r.text("algorithm")?.to_owned(),
            metric: r.text("metric")?.to_owned(),
            over: text("over"),
            op: r.text("op")?.to_owned(),
            value: text("value"),
            observed: r.opt("observed")?,
            bound: r.opt("bound")?,
            tolerance: r.opt("tolerance")?,
            result: r.req("result")?,
            reason: opt_text("reason"),
            note: opt_text("note"),
        })
    }
}

/// `partition.csv`: the training samples of each worker's shard, per class. Its header is
/// `worker,samples,class_0,…,class_{C−1}` ([`columns::PARTITION`], then
/// [`columns::class_column`]); just `worker,samples` for real-valued targets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Partition {
    /// Classes of the dataset (0 for real-valued targets).
    pub classes: usize,
    /// One row per worker.
    pub workers: Vec<PartitionRow>,
}

/// One row of `partition.csv`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PartitionRow {
    /// The worker.
    pub worker: u64,
    /// Training samples in its shard.
    pub samples: u64,
    /// Of those, how many of each class (`classes` entries).
    pub class_counts: Vec<u64>,
}

impl Partition {
    /// The header.
    pub fn columns(&self) -> Vec<String> {
        columns::PARTITION
            .iter()
            .map(|c| c.to_string())
            .chain((0..self.classes).map(columns::class_column))
            .collect()
    }

    /// The cells of `row`, in [`columns`](Self::columns) order.
    pub fn cells(row: &PartitionRow) -> Vec<String> {
        [row.worker, row.samples]
            .into_iter()
            .chain(row.class_counts.iter().copied())
            .map(|x| x.to_string())
            .collect()
    }
}

/// A float that JSON wrote as `null` (it has no NaN) reads back as NaN (for the floats of
/// `summary.json` and `timings.json`).
fn nan_if_null<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows filling one buffer in turn give each its own cells, whatever the previous row
    /// left there (longer text, a value where this row has none).
    #[test]
    fn filling_a_reused_buffer_gives_the_cells() {
        let timeline = [
            TimelineRow {
                algorithm: "overlap-sgp (send = \"after-mix\", tau = 2)".into(),
                worker: 1023,
                activity: Activity::Blocked,
                start_s: 0.123_456_789_012_345_68,
                end_s: 1e-7,
                waited_for: Some(17),
            },
            TimelineRow {
                algorithm: "adpsgd".into(),
                worker: 3,
                activity: Activity::Compute,
                start_s: 0.5,
                end_s: f64::NAN,
                waited_for: None,
            },
        ];
        let staleness = [
            StalenessRow {
                algorithm: "dasgd".into(),
                measure: "message_age".into(),
                worker: 99_999,
                value: u64::MAX,
                count: 12_345,
            },
            StalenessRow {
                algorithm: "ps".into(),
                measure: "row".into(),
                worker: 0,
                value: 0,
                count: 1,
            },
        ];
        fn check<R: CsvRow>(rows: &[R]) {
            let mut buffer = Vec::new();
            for row in rows.iter().chain(rows.iter().rev()) {
                row.fill(&mut buffer);
                assert_eq!(buffer, row.cells());
                assert_eq!(buffer.len(), R::COLUMNS.len());
            }
        }
        check(&timeline);
        check(&staleness);
    }
}
