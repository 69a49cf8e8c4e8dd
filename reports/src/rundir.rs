//! Reading a run directory back: the CSV files and `summary.json` that `dasim run` writes.
//!
//! Every CSV file of a run starts with a stamp comment
//! (`# dasim <version> git=<revision> scenario_sha256=<hex>`) and a header row; lines that start
//! with `#` are skipped, columns are found by name (so a file may carry more columns than a
//! reader needs, in any order) and an empty cell means "not measured" (`None`). A missing file
//! is not an error (its plots are skipped); a file that is there but malformed is, and the
//! [`Error::Format`] names the file and the 1-based line.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::{Error, Result, columns};

/// The stamp of a run's CSV files: `# dasim <version> git=<revision> scenario_sha256=<hex>`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Stamp {
    /// dasim's version.
    pub version: String,
    /// The git revision dasim was built from (`unknown` when it was not known).
    pub git: String,
    /// SHA-256 of the resolved `scenario.toml`, in hex.
    pub scenario_sha256: String,
}

impl Stamp {
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

/// One row of `metrics.csv`: an evaluation point of one algorithm. Every value but the
/// algorithm and the time is optional (`None`: the column is absent or the cell empty).
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

/// One row of `staleness.csv`: a histogram bin.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StalenessRow {
    /// The algorithm's label.
    pub algorithm: String,
    /// `gradient` or `message_age`.
    pub measure: String,
    /// The worker that computed the gradient (`gradient`) or received the message (`message_age`).
    pub worker: u64,
    /// The staleness, in updates (or the age, in iterations).
    pub value: u64,
    /// How many gradients (messages) had it.
    pub count: u64,
}

/// One row of `utilization.csv`: where a worker's simulated time went.
#[derive(Debug, Clone, PartialEq, Default)]
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
}

/// What a worker is doing during a [`TimelineRow`]'s interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Activity {
    /// Computing a gradient.
    Compute,
    /// Sending or receiving (and nothing else).
    Communicate,
    /// Waiting for a peer.
    Blocked,
    /// Nothing to do.
    Idle,
}

impl Activity {
    /// All four, in the order of the `utilization.csv` columns.
    pub const ALL: [Activity; 4] = [
        Activity::Compute,
        Activity::Communicate,
        Activity::Blocked,
        Activity::Idle,
    ];

    /// The name used in `timeline.csv`.
    pub fn name(self) -> &'static str {
        match self {
            Activity::Compute => "compute",
            Activity::Communicate => "communicate",
            Activity::Blocked => "blocked",
            Activity::Idle => "idle",
        }
    }
}

impl FromStr for Activity {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Activity::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                format!("unknown activity `{s}` (expected compute, communicate, blocked or idle)")
            })
    }
}

/// One row of `timeline.csv`: an interval of one worker's activity.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TimelineRow {
    /// The algorithm's label.
    pub algorithm: String,
    /// The worker.
    pub worker: u64,
    /// What it was doing.
    pub activity: Option<Activity>,
    /// Start, in simulated seconds.
    pub start_s: f64,
    /// End, in simulated seconds.
    pub end_s: f64,
    /// For `blocked`: the peer whose arrival ended the wait.
    pub waited_for: Option<u64>,
}

/// Everything of a run directory that the plots and the report read.
#[derive(Debug, Clone, Default)]
pub struct RunData {
    /// The directory.
    pub dir: PathBuf,
    /// The stamp of the first CSV file that has one.
    pub stamp: Option<Stamp>,
    /// The algorithms, in run order: `summary.json`'s `runs`, then any other label met in the
    /// CSV files in order of appearance. Colours follow this order in every plot.
    pub algorithms: Vec<String>,
    /// `metrics.csv`.
    pub metrics: Vec<MetricRow>,
    /// `series.csv`.
    pub series: Vec<SeriesRow>,
    /// `staleness.csv`.
    pub staleness: Vec<StalenessRow>,
    /// `utilization.csv`.
    pub utilization: Vec<UtilizationRow>,
    /// `timeline.csv`.
    pub timeline: Vec<TimelineRow>,
    /// `summary.json`, as JSON.
    pub summary: Option<serde_json::Value>,
    /// `scenario.toml`, as written.
    pub scenario_toml: Option<String>,
    /// For each `[[algorithms]]` entry of `scenario.toml`: its label (explicit or the kind) and
    /// its options other than `kind` and `label`, as `key = value` text.
    pub algorithm_options: Vec<(String, bool, String)>,
}

impl RunData {
    /// Reads the run directory `dir`.
    ///
    /// Fails with [`Error::Input`] when `dir` does not exist, is not a directory, or holds
    /// neither `metrics.csv` nor `summary.json`; with [`Error::Format`] (file and line) when a
    /// file is malformed.
    pub fn load(dir: impl AsRef<Path>) -> Result<RunData> {
        let dir = dir.as_ref();
        let input = |message: &str| Error::Input {
            path: dir.to_path_buf(),
            message: message.to_owned(),
        };
        match std::fs::metadata(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(input("no such directory"));
            }
            Err(e) => return Err(Error::io("read", dir, e)),
            Ok(m) if !m.is_dir() => return Err(input("not a directory")),
            Ok(_) => {}
        }
        if !dir.join("metrics.csv").is_file() && !dir.join("summary.json").is_file() {
            return Err(input(
                "not a run directory: it has neither metrics.csv nor summary.json \
                 (write one with `dasim run SCENARIO --out DIR`)",
            ));
        }

        let mut data = RunData {
            dir: dir.to_path_buf(),
            ..RunData::default()
        };
        let mut stamp = None;
        let mut read = |name: &str, required: &[&str]| -> Result<Option<Table>> {
            let table = Table::read(&dir.join(name), required)?;
            if stamp.is_none() {
                stamp = table.as_ref().and_then(|t| t.stamp.clone());
            }
            Ok(table)
        };
        if let Some(t) = read("metrics.csv", &["algorithm", "time_s"])? {
            data.metrics = t.rows(metric_row)?;
        }
        if let Some(t) = read("series.csv", columns::SERIES)? {
            data.series = t.rows(|r| {
                Ok(SeriesRow {
                    algorithm: r.text("algorithm")?.to_owned(),
                    time_s: r.req("time_s")?,
                    name: r.text("name")?.to_owned(),
                    value: r.opt("value")?,
                })
            })?;
        }
        if let Some(t) = read("staleness.csv", columns::STALENESS)? {
            data.staleness = t.rows(|r| {
                Ok(StalenessRow {
                    algorithm: r.text("algorithm")?.to_owned(),
                    measure: r.text("measure")?.to_owned(),
                    worker: r.req("worker")?,
                    value: r.req("value")?,
                    count: r.req("count")?,
                })
            })?;
        }
        if let Some(t) = read("utilization.csv", columns::UTILIZATION)? {
            data.utilization = t.rows(|r| {
                Ok(UtilizationRow {
                    algorithm: r.text("algorithm")?.to_owned(),
                    worker: r.req("worker")?,
                    steps: r.req("steps")?,
                    compute_s: r.req("compute_s")?,
                    communicate_s: r.req("communicate_s")?,
                    blocked_s: r.req("blocked_s")?,
                    idle_s: r.req("idle_s")?,
                })
            })?;
        }
        // `waited_for` may be absent: only blocked intervals have one.
        if let Some(t) = read(
            "timeline.csv",
            &["algorithm", "worker", "activity", "start_s", "end_s"],
        )? {
            data.timeline = t.rows(|r| {
                Ok(TimelineRow {
                    algorithm: r.text("algorithm")?.to_owned(),
                    worker: r.req("worker")?,
                    activity: Some(r.req("activity")?),
                    start_s: r.req("start_s")?,
                    end_s: r.req("end_s")?,
                    waited_for: r.opt("waited_for")?,
                })
            })?;
        }
        data.stamp = stamp;

        let summary_path = dir.join("summary.json");
        if summary_path.is_file() {
            let text = read_text(&summary_path)?;
            let value: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| Error::Format {
                    path: summary_path.clone(),
                    line: e.line() as u64,
                    message: format!("invalid JSON: {e}"),
                })?;
            data.summary = Some(value);
        }
        let scenario_path = dir.join("scenario.toml");
        if scenario_path.is_file() {
            let text = read_text(&scenario_path)?;
            data.algorithm_options = algorithm_options(&text);
            data.scenario_toml = Some(text);
        }
        data.algorithms = data.collect_algorithms();
        Ok(data)
    }

    /// The scenario's name: `summary.json`'s `scenario`, else the directory's name.
    pub fn scenario_name(&self) -> String {
        self.summary_str("scenario").unwrap_or_else(|| {
            self.dir.file_name().map_or_else(
                || self.dir.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            )
        })
    }

    /// A top-level string of `summary.json`.
    pub fn summary_str(&self, key: &str) -> Option<String> {
        self.summary.as_ref()?.get(key)?.as_str().map(str::to_owned)
    }

    /// `summary.json`'s entry in `runs` for `algorithm`.
    pub fn summary_run(&self, algorithm: &str) -> Option<&serde_json::Value> {
        self.summary
            .as_ref()?
            .get("runs")?
            .as_array()?
            .iter()
            .find(|r| r.get("algorithm").and_then(|a| a.as_str()) == Some(algorithm))
    }

    /// The name to show for `algorithm` in legends and tables: the label itself when the
    /// scenario gave one (the user chose it), else the kind followed by the options the
    /// scenario sets for it, e.g. `overlap-sgp (tau = 1)`, so that a legend names the
    /// algorithm's key parameter. Options longer than 40 characters are left out.
    pub fn legend(&self, algorithm: &str) -> String {
        let same_label = self
            .algorithm_options
            .iter()
            .filter(|(label, _, _)| label == algorithm)
            .count();
        match self
            .algorithm_options
            .iter()
            .find(|(label, _, _)| label == algorithm)
        {
            Some((_, false, options))
                if same_label == 1 && !options.is_empty() && options.chars().count() <= 40 =>
            {
                format!("{algorithm} ({options})")
            }
            _ => algorithm.to_owned(),
        }
    }

    /// The position of `algorithm` in [`algorithms`](Self::algorithms): its colour index.
    pub fn color_of(&self, algorithm: &str) -> usize {
        self.algorithms
            .iter()
            .position(|a| a == algorithm)
            .unwrap_or(self.algorithms.len())
    }

    fn collect_algorithms(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        let mut add = |name: &str| {
            if !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        };
        if let Some(runs) = self
            .summary
            .as_ref()
            .and_then(|s| s.get("runs"))
            .and_then(|r| r.as_array())
        {
            for run in runs {
                if let Some(a) = run.get("algorithm").and_then(|a| a.as_str()) {
                    add(a);
                }
            }
        }
        self.metrics.iter().for_each(|r| add(&r.algorithm));
        self.series.iter().for_each(|r| add(&r.algorithm));
        self.staleness.iter().for_each(|r| add(&r.algorithm));
        self.utilization.iter().for_each(|r| add(&r.algorithm));
        self.timeline.iter().for_each(|r| add(&r.algorithm));
        names
    }
}

/// `(label, labelled explicitly, options)` of each `[[algorithms]]` entry of a scenario; an
/// unparsable scenario gives none (the plots then show plain labels).
fn algorithm_options(scenario: &str) -> Vec<(String, bool, String)> {
    let Ok(table) = scenario.parse::<toml::Table>() else {
        return Vec::new();
    };
    let Some(entries) = table.get("algorithms").and_then(toml::Value::as_array) else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(toml::Value::as_table)
        .filter_map(|entry| {
            let kind = entry.get("kind")?.as_str()?;
            let label = entry.get("label").and_then(toml::Value::as_str);
            let options: Vec<String> = entry
                .iter()
                .filter(|(k, _)| *k != "kind" && *k != "label")
                .map(|(k, v)| format!("{k} = {v}"))
                .collect();
            Some((
                label.unwrap_or(kind).to_owned(),
                label.is_some(),
                options.join(", "),
            ))
        })
        .collect()
}

fn metric_row(r: &Row) -> Result<MetricRow> {
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

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::io("read", path, e))
}

/// A CSV file of a run directory, its columns found by name.
struct Table {
    path: PathBuf,
    stamp: Option<Stamp>,
    columns: Vec<String>,
    /// `(line, record)`.
    records: Vec<(u64, csv::StringRecord)>,
}

impl Table {
    /// Reads `path`; `None` if there is no such file. The header must name every `required`
    /// column, and every row must have as many fields as the header.
    fn read(path: &Path, required: &[&str]) -> Result<Option<Table>> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(Error::Format {
                    path: path.to_path_buf(),
                    line: 1,
                    message: "not UTF-8 text".into(),
                });
            }
            Err(e) => return Err(Error::io("read", path, e)),
        };
        let stamp = text.lines().next().and_then(Stamp::parse);
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .comment(Some(b'#'))
            .from_reader(text.as_bytes());
        let mut columns: Option<Vec<String>> = None;
        let mut records = Vec::new();
        let mut lines = LineCounter::default();
        for record in reader.records() {
            let record = record.map_err(|e| Error::csv("read", path, e))?;
            let line = record
                .position()
                .map_or(0, |p| lines.line_of(&text, p.byte() as usize));
            let format_error = |message: String| Error::Format {
                path: path.to_path_buf(),
                line,
                message,
            };
            match &columns {
                None => {
                    let header: Vec<String> = record.iter().map(str::to_owned).collect();
                    if let Some(missing) = required.iter().find(|c| !header.iter().any(|h| h == *c))
                    {
                        return Err(format_error(format!(
                            "the header `{}` lacks the column `{missing}` (expected at least `{}`)",
                            header.join(","),
                            required.join(",")
                        )));
                    }
                    columns = Some(header);
                }
                Some(header) => {
                    if record.len() != header.len() {
                        return Err(format_error(format!(
                            "expected {} fields (as in the header), found {}",
                            header.len(),
                            record.len()
                        )));
                    }
                    records.push((line, record));
                }
            }
        }
        let Some(columns) = columns else {
            return Err(Error::Format {
                path: path.to_path_buf(),
                line: 1,
                message: format!("no header row, expected at least `{}`", required.join(",")),
            });
        };
        Ok(Some(Table {
            path: path.to_path_buf(),
            stamp,
            columns,
            records,
        }))
    }

    /// Converts every row with `f`.
    fn rows<T>(&self, f: impl Fn(&Row) -> Result<T>) -> Result<Vec<T>> {
        self.records
            .iter()
            .map(|(line, record)| {
                f(&Row {
                    table: self,
                    line: *line,
                    record,
                })
            })
            .collect()
    }
}

/// Line numbers of records at increasing byte offsets of one text, found by counting the
/// newlines between one offset and the next, so that numbering every record of a file is linear
/// in its size (counting from the start each time was quadratic: minutes for the timeline of
/// 1,024 workers).
#[derive(Debug, Default)]
struct LineCounter {
    /// The last offset asked about.
    offset: usize,
    /// Newlines before it.
    newlines: u64,
}

impl LineCounter {
    /// [`line_of`], for an `offset` not before the previous one (else counted from the start).
    fn line_of(&mut self, text: &str, offset: usize) -> u64 {
        let offset = offset.min(text.len());
        if offset < self.offset {
            *self = LineCounter::default();
        }
        self.newlines += text.as_bytes()[self.offset..offset]
            .iter()
            .filter(|&&b| b == b'\n')
            .count() as u64;
        self.offset = offset;
        record_line(text, offset, self.newlines)
    }
}

/// The 1-based line of the record that starts at or after byte `offset` of `text`: csv's own
/// line count points at the comment lines it skipped before the record, not at the record.
#[cfg(test)]
fn line_of(text: &str, offset: usize) -> u64 {
    let offset = offset.min(text.len());
    let newlines = text.as_bytes()[..offset]
        .iter()
        .filter(|&&b| b == b'\n')
        .count() as u64;
    record_line(text, offset, newlines)
}

/// The line of the record at or after `offset`, given the `newlines` before `offset`: skips
/// the comment and blank lines that start there.
fn record_line(text: &str, offset: usize, newlines: u64) -> u64 {
    let mut line = newlines + 1;
    let rest = text.get(offset..).unwrap_or("");
    for l in rest.split('\n') {
        if l.starts_with('#') || l.trim().is_empty() {
            line += 1;
        } else {
            break;
        }
    }
    line
}

/// One row of a [`Table`].
struct Row<'a> {
    table: &'a Table,
    line: u64,
    record: &'a csv::StringRecord,
}

impl Row<'_> {
    fn error(&self, message: String) -> Error {
        Error::Format {
            path: self.table.path.clone(),
            line: self.line,
            message,
        }
    }

    /// The cell of `column`; `None` if the file has no such column.
    fn cell(&self, column: &str) -> Option<&str> {
        let index = self.table.columns.iter().position(|c| c == column)?;
        self.record.get(index)
    }

    /// The text of a required column.
    fn text(&self, column: &str) -> Result<&str> {
        self.cell(column)
            .ok_or_else(|| self.error(format!("no column `{column}`")))
    }

    /// A required value: present and parseable.
    fn req<T: FromStr>(&self, column: &str) -> Result<T>
    where
        T::Err: std::fmt::Display,
    {
        self.opt(column)?
            .ok_or_else(|| self.error(format!("column `{column}`: empty, expected a value")))
    }

    /// An optional value: `None` when the column is absent or the cell empty.
    fn opt<T: FromStr>(&self, column: &str) -> Result<Option<T>>
    where
        T::Err: std::fmt::Display,
    {
        match self.cell(column).map(str::trim) {
            None | Some("") => Ok(None),
            Some(text) => text
                .parse()
                .map(Some)
                .map_err(|e| self.error(format!("column `{column}`: cannot parse `{text}`: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn tempdir() -> PathBuf {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("dasim-rundir-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn legends_name_the_options_of_unlabelled_algorithms() {
        let text = "[[algorithms]]\nkind = \"sgp\"\n\n[[algorithms]]\nkind = \"overlap-sgp\"\ntau = 1\n\n\
                    [[algorithms]]\nkind = \"overlap-sgp\"\nlabel = \"o4\"\ntau = 4\n";
        let data = RunData {
            algorithm_options: algorithm_options(text),
            ..RunData::default()
        };
        assert_eq!(data.legend("sgp"), "sgp");
        assert_eq!(data.legend("overlap-sgp"), "overlap-sgp (tau = 1)");
        assert_eq!(data.legend("o4"), "o4");
        assert_eq!(data.legend("other"), "other");
        assert!(algorithm_options("not [toml").is_empty());
    }

    #[test]
    fn stamp_parses() {
        let s = Stamp::parse("# dasim 0.1.0 git=abc123 scenario_sha256=00ff").unwrap();
        assert_eq!(s.version, "0.1.0");
        assert_eq!(s.git, "abc123");
        assert_eq!(s.scenario_sha256, "00ff");
        assert_eq!(Stamp::parse("algorithm,time_s"), None);
    }

    #[test]
    fn comments_are_skipped_and_lines_counted_from_the_file_start() {
        let dir = tempdir();
        let path = write(
            &dir,
            "metrics.csv",
            "# dasim 0.1.0 git=unknown scenario_sha256=ab\n\
             algorithm,time_s,loss,extra\n\
             a,0,2.5,x\n\
             a,0.5,,y\n\
             a,1,oops,z\n",
        );
        let table = Table::read(&path, &["algorithm", "time_s"])
            .unwrap()
            .unwrap();
        assert_eq!(table.stamp.as_ref().unwrap().git, "unknown");
        let err = table.rows(metric_row).unwrap_err();
        assert!(matches!(err, Error::Format { line: 5, .. }), "{err}");
        assert!(
            err.to_string().contains("`loss`") && err.to_string().contains("oops"),
            "{err}"
        );

        let path = write(
            &dir,
            "m2.csv",
            "# stamp\nalgorithm,time_s,loss\na,0,2.5\na,0.5,\n",
        );
        let rows = Table::read(&path, &["algorithm", "time_s"])
            .unwrap()
            .unwrap()
            .rows(metric_row)
            .unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].loss, Some(2.5));
        assert_eq!(rows[1].loss, None);
        assert_eq!(rows[1].accuracy, None, "absent column");
    }

    #[test]
    fn line_numbers_are_counted_incrementally() {
        let text = "# stamp\na,b\n1,2\n# note\n\n3,4\n5,6\n";
        let mut counter = LineCounter::default();
        for offset in 0..=text.len() {
            assert_eq!(
                counter.line_of(text, offset),
                line_of(text, offset),
                "{offset}"
            );
        }
        // Going back starts over (line 1 is a comment: the record at 0 is on line 2).
        assert_eq!(counter.line_of(text, 0), 2);
        assert_eq!(counter.line_of(text, text.find("3,4").unwrap()), 6);
    }

    #[test]
    fn ragged_rows_and_missing_columns_are_located() {
        let dir = tempdir();
        let path = write(&dir, "x.csv", "# s\nalgorithm,time_s\na,1\na,2,3\n");
        let err = Table::read(&path, &["algorithm"]).err().unwrap();
        assert!(matches!(err, Error::Format { line: 4, .. }), "{err}");
        let err = Table::read(&path, &["algorithm", "loss"]).err().unwrap();
        assert!(matches!(err, Error::Format { line: 2, .. }), "{err}");
        assert!(err.to_string().contains("`loss`"), "{err}");
        let path = write(&dir, "y.csv", "# only a stamp\n");
        assert!(matches!(
            Table::read(&path, &["a"]),
            Err(Error::Format { line: 1, .. })
        ));
        assert!(
            Table::read(&dir.join("absent.csv"), &["a"])
                .unwrap()
                .is_none()
        );
    }
}
