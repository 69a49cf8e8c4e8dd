//! Reading a run directory back: the CSV files, `summary.json` and `timings.json`.
//!
//! Lines of a CSV file that start with `#` are skipped (the first is the [`Stamp`]), columns
//! are found by name (so a file may carry more columns than a reader needs, in any order) and
//! an empty cell means "not measured" (`None`). A missing file is not an error (`None`: its
//! plots are skipped); a file that is there but malformed is, and the [`Error::Format`] names
//! the file and the 1-based line.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::de::DeserializeOwned;

use crate::columns;
use crate::rundir::schema::{
    AlgorithmSummary, CheckRow, CsvRow, FaultRow, MetricRow, Partition, PartitionRow, SeriesRow,
    StalenessRow, Stamp, Summary, TimelineRow, Timings, UtilizationRow, files,
};
use crate::{Error, Result};

/// What one CSV file holds (its rows, or a [`Partition`]) and its stamp.
#[derive(Debug, Clone, PartialEq)]
pub struct CsvFile<T> {
    /// The stamp on its first line, if it has one.
    pub stamp: Option<Stamp>,
    /// Its rows, in file order.
    pub rows: T,
}

/// Reads `dir/R::FILE`; `None` when there is no such file.
pub fn read_csv<R: CsvRow>(dir: &Path) -> Result<Option<CsvFile<Vec<R>>>> {
    // Each record is converted as it is read: a table of millions of rows is never held twice.
    let mut rows = Vec::new();
    let Some(table) = Table::read_each(&dir.join(R::FILE), R::REQUIRED, |table, line, record| {
        rows.push(R::read(&Cells {
            table,
            line,
            record,
        })?);
        Ok(())
    })?
    else {
        return Ok(None);
    };
    Ok(Some(CsvFile {
        rows,
        stamp: table.stamp,
    }))
}

/// Reads `dir/partition.csv`; `None` when there is no such file.
pub fn read_partition(dir: &Path) -> Result<Option<CsvFile<Partition>>> {
    let Some(table) = Table::read(&dir.join(files::PARTITION), columns::PARTITION)? else {
        return Ok(None);
    };
    let classes = (0..)
        .take_while(|&c| table.columns.contains(&columns::class_column(c)))
        .count();
    let workers = table.rows(|r| {
        Ok(PartitionRow {
            worker: r.req("worker")?,
            samples: r.req("samples")?,
            class_counts: (0..classes)
                .map(|c| r.req(&columns::class_column(c)))
                .collect::<Result<_>>()?,
        })
    })?;
    Ok(Some(CsvFile {
        stamp: table.stamp,
        rows: Partition { classes, workers },
    }))
}

/// Reads a JSON file of the run directory; `None` when there is no such file. Invalid JSON,
/// or JSON that is not what dasim writes there, is an [`Error::Format`] at its line.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("read", path, e)),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| Error::Format {
            path: path.to_path_buf(),
            line: e.line() as u64,
            message: if e.is_data() {
                format!("not what dasim writes here: {e}")
            } else {
                format!("invalid JSON: {e}")
            },
        })
}

/// Reads `dir/summary.json`; `None` when there is none (an interrupted run).
pub fn read_summary(dir: &Path) -> Result<Option<Summary>> {
    read_json(&dir.join(files::SUMMARY))
}

/// Reads `dir/timings.json`; `None` when there is none.
pub fn read_timings(dir: &Path) -> Result<Option<Timings>> {
    read_json(&dir.join(files::TIMINGS))
}

/// Fails unless `dir` is a directory holding `metrics.csv` or `summary.json`.
fn check_run_dir(dir: &Path) -> Result<()> {
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
    if !dir.join(files::METRICS).is_file() && !dir.join(files::SUMMARY).is_file() {
        return Err(input(
            "not a run directory: it has neither metrics.csv nor summary.json \
             (write one with `dasim run SCENARIO --out DIR`)",
        ));
    }
    Ok(())
}

/// A file's stamp and rows (none when it is absent).
type Read<R> = Result<(Option<Stamp>, Vec<R>)>;

/// [`read_csv`]'s stamp and rows of `dir/R::FILE`; none when it is absent.
fn rows<R: CsvRow>(dir: &Path) -> Read<R> {
    Ok(read_csv::<R>(dir)?.map_or((None, Vec::new()), |f| (f.stamp, f.rows)))
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
    /// `faults.csv` (empty without faults).
    pub faults: Vec<FaultRow>,
    /// `checks.csv`: the verdicts of the scenario's claims (empty without claims).
    pub checks: Vec<CheckRow>,
    /// `summary.json`; `None` for an interrupted run.
    pub summary: Option<Summary>,
    /// `scenario.toml`, as written.
    pub scenario_toml: Option<String>,
}

impl RunData {
    /// Reads the run directory `dir`.
    ///
    /// Fails with [`Error::Input`] when `dir` does not exist, is not a directory, or holds
    /// neither `metrics.csv` nor `summary.json`; with [`Error::Format`] (file and line) when a
    /// file is malformed.
    pub fn load(dir: impl AsRef<Path>) -> Result<RunData> {
        let dir = dir.as_ref();
        check_run_dir(dir)?;
        let metrics = rows::<MetricRow>(dir)?;
        let series = rows::<SeriesRow>(dir)?;
        let staleness = rows::<StalenessRow>(dir)?;
        let utilization = rows::<UtilizationRow>(dir)?;
        let timeline = rows::<TimelineRow>(dir)?;
        let faults = rows::<FaultRow>(dir)?;
        let checks = rows::<CheckRow>(dir)?;
        // The stamp of the first file that has one.
        let stamp = [
            metrics.0,
            series.0,
            staleness.0,
            utilization.0,
            timeline.0,
            faults.0,
            checks.0,
        ]
        .into_iter()
        .find_map(|s| s);
        RunData {
            dir: dir.to_path_buf(),
            metrics: metrics.1,
            series: series.1,
            staleness: staleness.1,
            utilization: utilization.1,
            timeline: timeline.1,
            faults: faults.1,
            checks: checks.1,
            stamp,
            ..RunData::default()
        }
        .finish()
    }

    /// The run directory `dir` of a run that has just written it, with the tables it still
    /// holds in memory (`staleness`, `utilization`, `timeline`, `faults`: the rows its
    /// [`RunWriter`](crate::rundir::RunWriter) wrote, [`RunWriter::take_tables`](crate::rundir::RunWriter::take_tables))
    /// taken as they are instead of read back; the other files are read. `stamp` is the one the
    /// tables were written with.
    ///
    /// The same data as [`RunData::load`] of the directory: every float is written in its
    /// shortest form that reads back to the same bits, so reading a table back gives the rows
    /// that were written (`dasim run`'s plots and `dasim plot`'s are compared byte for byte in
    /// `tests/integration/plot.rs`). At a thousand workers the timeline alone is 100,000 rows to parse.
    pub fn with_tables(
        dir: impl AsRef<Path>,
        stamp: &Stamp,
        tables: crate::rundir::Tables,
    ) -> Result<RunData> {
        let dir = dir.as_ref();
        check_run_dir(dir)?;
        let metrics = rows::<MetricRow>(dir)?;
        let series = rows::<SeriesRow>(dir)?;
        let checks = rows::<CheckRow>(dir)?;
        // Written with `stamp` unless absent: the first stamp `load` would find.
        let stamp = metrics.0.or(series.0).or_else(|| Some(stamp.clone()));
        RunData {
            dir: dir.to_path_buf(),
            metrics: metrics.1,
            series: series.1,
            staleness: tables.staleness,
            utilization: tables.utilization,
            timeline: tables.timeline,
            faults: tables.faults,
            checks: checks.1,
            stamp,
            ..RunData::default()
        }
        .finish()
    }

    /// A run held in memory (the in-memory sink of `dasim::sink`): the same data as
    /// [`RunData::load`] of the run directory the run would have written, with no directory
    /// (`dir` is empty).
    #[allow(clippy::too_many_arguments)]
    pub fn in_memory(
        stamp: Stamp,
        metrics: Vec<MetricRow>,
        series: Vec<SeriesRow>,
        tables: crate::rundir::Tables,
        checks: Vec<CheckRow>,
        summary: Option<Summary>,
        scenario_toml: String,
    ) -> RunData {
        let mut data = RunData {
            dir: PathBuf::new(),
            stamp: Some(stamp),
            metrics,
            series,
            staleness: tables.staleness,
            utilization: tables.utilization,
            timeline: tables.timeline,
            faults: tables.faults,
            checks,
            summary,
            scenario_toml: Some(scenario_toml),
            ..RunData::default()
        };
        data.algorithms = data.collect_algorithms();
        data
    }

    /// Reads `summary.json` and `scenario.toml` and lists the algorithms.
    fn finish(mut self) -> Result<RunData> {
        self.summary = read_summary(&self.dir)?;
        let scenario_path = self.dir.join(files::SCENARIO);
        if scenario_path.is_file() {
            self.scenario_toml = Some(
                std::fs::read_to_string(&scenario_path)
                    .map_err(|e| Error::io("read", &scenario_path, e))?,
            );
        }
        self.algorithms = self.collect_algorithms();
        Ok(self)
    }

    /// The scenario's name: `summary.json`'s `scenario`, else the directory's name; for a timing
    /// run (`timing_only`), followed by `(timing only: no gradient computed)`, and in proxy mode
    /// by `(timed as resnet50)`.
    pub fn scenario_name(&self) -> String {
        match &self.summary {
            // Every plot's title starts with the name: a timing run says there what it is not.
            Some(s) if s.timing_only => format!(
                "{} (timing only: no gradient computed)",
                if s.scenario.is_empty() {
                    "run"
                } else {
                    &s.scenario
                }
            ),
            Some(s) if s.timed_as.is_some() => format!(
                "{} (timed as {})",
                if s.scenario.is_empty() {
                    "run"
                } else {
                    &s.scenario
                },
                s.timed_as
                    .as_deref()
                    .and_then(|t| t.split(" (").next())
                    .unwrap_or_default()
            ),
            Some(s) if !s.scenario.is_empty() => s.scenario.clone(),
            _ => self.dir.file_name().map_or_else(
                || self.dir.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            ),
        }
    }

    /// `summary.json`'s entry for the algorithm labelled `algorithm`.
    pub fn run_summary(&self, algorithm: &str) -> Option<&AlgorithmSummary> {
        self.summary.as_ref()?.run(algorithm)
    }

    /// The name to show for `algorithm` in legends and tables: the label itself when the
    /// scenario gave one (the user chose it), else the kind followed by the options the
    /// algorithm ran with (`summary.json`'s `options`), e.g. `overlap-sgp (tau = 1)`, so that a
    /// legend names the algorithm's key parameter. Options longer than 40 characters are left
    /// out, and so are they when two algorithms share the label.
    ///
    /// When the algorithms of the run did not all share one topology, or one learning rate
    /// (entries with their own `topology` or `optimizer`), the legend also says which each used:
    /// `adpsgd (ring, lr 0.1)`.
    pub fn legend(&self, algorithm: &str) -> String {
        let Some(summary) = &self.summary else {
            return algorithm.to_owned();
        };
        let mut same = summary.runs.iter().filter(|r| r.algorithm == algorithm);
        let (Some(run), None) = (same.next(), same.next()) else {
            return algorithm.to_owned();
        };
        let mut parts = Vec::new();
        if let Some(text) = options_text(run).filter(|t| t.chars().count() <= 40) {
            parts.push(text);
        }
        // Runs recorded before the sections were (no value) differ from none.
        let differ = |key: fn(&AlgorithmSummary) -> Option<&serde_json::Value>| {
            let mut values = summary.runs.iter().filter_map(key);
            let first = values.next();
            values.any(|v| Some(v) != first)
        };
        fn topology(r: &AlgorithmSummary) -> Option<&serde_json::Value> {
            r.topology.get("kind")
        }
        fn lr(r: &AlgorithmSummary) -> Option<&serde_json::Value> {
            r.optimizer.get("lr")
        }
        if differ(topology)
            && let Some(serde_json::Value::String(kind)) = topology(run)
        {
            parts.push(kind.clone());
        }
        if differ(lr)
            && let Some(rate) = lr(run).and_then(serde_json::Value::as_f64)
        {
            parts.push(format!("lr {rate}"));
        }
        if parts.is_empty() {
            algorithm.to_owned()
        } else {
            format!("{algorithm} ({})", parts.join(", "))
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
        for run in self.summary.iter().flat_map(|s| &s.runs) {
            add(&run.algorithm);
        }
        self.metrics.iter().for_each(|r| add(&r.algorithm));
        self.series.iter().for_each(|r| add(&r.algorithm));
        self.staleness.iter().for_each(|r| add(&r.algorithm));
        self.utilization.iter().for_each(|r| add(&r.algorithm));
        self.timeline.iter().for_each(|r| add(&r.algorithm));
        names
    }
}

/// The options of an algorithm the scenario did not label, as TOML `key = value` pairs joined
/// by `, ` (e.g. `h = 8, processes = 2`); `None` when it was labelled, or has no option (or the
/// summary predates the recorded options).
fn options_text(run: &AlgorithmSummary) -> Option<String> {
    if run.options.contains_key("label") {
        return None;
    }
    let pairs: Vec<String> = run
        .options
        .iter()
        // The entry's own topology and optimizer are named apart ([`RunData::legend`]).
        .filter(|(k, _)| !matches!(k.as_str(), "kind" | "topology" | "optimizer"))
        .filter_map(|(k, v)| Some(format!("{k} = {}", toml_value(v)?)))
        .collect();
    (!pairs.is_empty()).then(|| pairs.join(", "))
}

/// A JSON value as TOML writes it (`null`s, which TOML has not, left out).
fn toml_value(v: &serde_json::Value) -> Option<toml::Value> {
    use serde_json::Value as J;
    Some(match v {
        J::Null => return None,
        J::Bool(b) => toml::Value::Boolean(*b),
        J::Number(n) => match n.as_i64() {
            Some(i) => toml::Value::Integer(i),
            None => toml::Value::Float(n.as_f64()?),
        },
        J::String(s) => toml::Value::String(s.clone()),
        J::Array(a) => toml::Value::Array(a.iter().filter_map(toml_value).collect()),
        J::Object(m) => toml::Value::Table(
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), toml_value(v)?)))
                .collect(),
        ),
    })
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
        let mut records = Vec::new();
        let table = Self::read_each(path, required, |_, line, record| {
            records.push((line, record.clone()));
            Ok(())
        })?;
        Ok(table.map(|t| Table { records, ..t }))
    }

    /// [`Table::read`], handing each record to `each` with its line instead of keeping it (the
    /// table returned has no records).
    fn read_each(
        path: &Path,
        required: &[&str],
        mut each: impl FnMut(&Table, u64, &csv::StringRecord) -> Result<()>,
    ) -> Result<Option<Table>> {
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
        let mut table: Option<Table> = None;
        let mut lines = LineCounter::default();
        // One record buffer for the whole file: a thousand workers' timeline has a hundred
        // thousand rows.
        let mut record = csv::StringRecord::new();
        while reader
            .read_record(&mut record)
            .map_err(|e| Error::csv("read", path, e))?
        {
            let line = record
                .position()
                .map_or(0, |p| lines.line_of(&text, p.byte() as usize));
            let format_error = |message: String| Error::Format {
                path: path.to_path_buf(),
                line,
                message,
            };
            match &table {
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
                    table = Some(Table {
                        path: path.to_path_buf(),
                        stamp: stamp.clone(),
                        columns: header,
                        records: Vec::new(),
                    });
                }
                Some(t) => {
                    if record.len() != t.columns.len() {
                        return Err(format_error(format!(
                            "expected {} fields (as in the header), found {}",
                            t.columns.len(),
                            record.len()
                        )));
                    }
                    each(t, line, &record)?;
                }
            }
        }
        let Some(table) = table else {
            return Err(Error::Format {
                path: path.to_path_buf(),
                line: 1,
                message: format!("no header row, expected at least `{}`", required.join(",")),
            });
        };
        Ok(Some(table))
    }

    /// Converts every row with `f`.
    fn rows<T>(&self, f: impl Fn(&Cells) -> Result<T>) -> Result<Vec<T>> {
        self.records
            .iter()
            .map(|(line, record)| {
                f(&Cells {
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

/// The cells of one row of a CSV file being read ([`CsvRow::read`]), found by column name.
pub struct Cells<'a> {
    table: &'a Table,
    line: u64,
    record: &'a csv::StringRecord,
}

impl Cells<'_> {
    fn error(&self, message: String) -> Error {
        Error::Format {
            path: self.table.path.clone(),
            line: self.line,
            message,
        }
    }

    /// The cell of `column`; `None` if the file has no such column.
    pub fn cell(&self, column: &str) -> Option<&str> {
        let index = self.table.columns.iter().position(|c| c == column)?;
        self.record.get(index)
    }

    /// The text of a required column.
    pub fn text(&self, column: &str) -> Result<&str> {
        self.cell(column)
            .ok_or_else(|| self.error(format!("no column `{column}`")))
    }

    /// A required value: present and parseable.
    pub fn req<T: FromStr>(&self, column: &str) -> Result<T>
    where
        T::Err: std::fmt::Display,
    {
        self.opt(column)?
            .ok_or_else(|| self.error(format!("column `{column}`: empty, expected a value")))
    }

    /// An optional value: `None` when the column is absent or the cell empty.
    pub fn opt<T: FromStr>(&self, column: &str) -> Result<Option<T>>
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

    /// What `dasim run` plots from memory is what `dasim plot` reads back: the tables written
    /// and read again are the same rows, floats to the bit, absent values and omitted columns
    /// included.
    #[test]
    fn tables_in_memory_are_the_tables_read_back() {
        use crate::rundir::schema::Activity;
        use crate::rundir::{Tables, write_csv};
        let stamp = Stamp::of_scenario("0.1.0", "abc", "name = \"x\"\n");
        let awkward = [
            0.1 + 0.2,
            1e-7,
            123_456.789_012_345_67,
            5e-324,
            1.0 / 3.0,
            0.0,
        ];
        let label = "overlap-sgp (send = \"after-mix\", tau = 2)";
        let mut tables = Tables::default();
        for (i, &x) in awkward.iter().enumerate() {
            let w = i as u64;
            tables.timeline.push(TimelineRow {
                algorithm: label.into(),
                worker: w,
                activity: [Activity::Compute, Activity::Blocked, Activity::Down][i % 3],
                start_s: x,
                end_s: x * 3.0 + 1.0,
                waited_for: (i % 3 == 1).then_some(w + 1),
            });
            tables.staleness.push(StalenessRow {
                algorithm: "adpsgd".into(),
                measure: ["global", "row", "message_age", "mix_age"][i % 4].into(),
                worker: w,
                value: u64::MAX - w,
                count: w + 1,
            });
            tables.utilization.push(UtilizationRow {
                algorithm: label.into(),
                worker: w,
                steps: 10 * w,
                compute_s: x,
                communicate_s: x / 7.0,
                blocked_s: 2.0 * x,
                idle_s: 0.0,
                // None everywhere first: the column is left out of the file.
                down_s: None,
            });
            tables.faults.push(FaultRow {
                algorithm: label.into(),
                time_s: x,
                event: "lost".into(),
                node: w,
                peer: (i % 2 == 0).then_some(w + 2),
            });
        }
        for down in [false, true] {
            if down {
                for (u, &x) in tables.utilization.iter_mut().zip(&awkward) {
                    u.down_s = Some(x / 3.0);
                }
            }
            let dir = tempdir();
            write_csv::<MetricRow>(&dir, &stamp, &[]).unwrap();
            tables.write(&dir, &stamp).unwrap();
            let read = RunData::load(&dir).unwrap();
            assert_eq!(read.timeline, tables.timeline);
            assert_eq!(read.staleness, tables.staleness);
            assert_eq!(read.utilization, tables.utilization);
            assert_eq!(read.faults, tables.faults);
            let memory = RunData::with_tables(&dir, &stamp, tables.clone()).unwrap();
            assert_eq!(memory.timeline, read.timeline);
            assert_eq!(memory.staleness, read.staleness);
            assert_eq!(memory.utilization, read.utilization);
            assert_eq!(memory.faults, read.faults);
            assert_eq!(memory.metrics, read.metrics);
            assert_eq!(memory.stamp, read.stamp);
            assert_eq!(memory.algorithms, read.algorithms);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    fn run(label: &str, options: serde_json::Value) -> AlgorithmSummary {
        let serde_json::Value::Object(options) = options else {
            panic!("not an object")
        };
        AlgorithmSummary {
            algorithm: label.into(),
            kind: options["kind"].as_str().unwrap().into(),
            options,
            ..crate::rundir::tests::algorithm_summary()
        }
    }

    #[test]
    fn legends_name_the_options_of_unlabelled_algorithms() {
        use serde_json::json;
        let runs = vec![
            run("sgp", json!({"kind": "sgp"})),
            run("overlap-sgp", json!({"kind": "overlap-sgp", "tau": 1})),
            run(
                "o4",
                json!({"kind": "overlap-sgp", "label": "o4", "tau": 4}),
            ),
            run(
                "dasgd",
                json!({"kind": "dasgd", "broadcast": "all", "bound": null}),
            ),
            run(
                "lap-sgd",
                json!({"kind": "lap-sgd", "processes": 2, "h": 8, "lr_scale": 1.0}),
            ),
            run(
                "ps",
                json!({"kind": "ps", "nested": {"b": [1, 2], "a": 0.5}}),
            ),
            run(
                "long",
                json!({"kind": "local-sgd", "h": 8, "warmup_steps": 50, "another_option": 12345}),
            ),
        ];
        let data = RunData {
            summary: Some(Summary {
                runs,
                ..crate::rundir::tests::summary()
            }),
            ..RunData::default()
        };
        assert_eq!(data.legend("sgp"), "sgp");
        assert_eq!(data.legend("overlap-sgp"), "overlap-sgp (tau = 1)");
        assert_eq!(data.legend("o4"), "o4");
        assert_eq!(data.legend("dasgd"), "dasgd (broadcast = \"all\")");
        assert_eq!(
            data.legend("lap-sgd"),
            "lap-sgd (h = 8, lr_scale = 1.0, processes = 2)"
        );
        assert_eq!(data.legend("ps"), "ps (nested = { a = 0.5, b = [1, 2] })");
        assert_eq!(data.legend("long"), "long", "over 40 characters");
        assert_eq!(data.legend("other"), "other");
        assert_eq!(RunData::default().legend("sgp"), "sgp", "no summary");
    }

    #[test]
    fn legends_name_the_topology_and_rate_where_the_algorithms_differ() {
        use serde_json::json;
        let object = |v: serde_json::Value| match v {
            serde_json::Value::Object(o) => o,
            _ => panic!("not an object"),
        };
        let on =
            |label: &str, options: serde_json::Value, topology: &str, lr: f64| AlgorithmSummary {
                topology: object(json!({ "kind": topology })),
                optimizer: object(json!({ "lr": lr, "momentum": 0.0 })),
                ..run(label, options)
            };
        let data = |runs| RunData {
            summary: Some(Summary {
                runs,
                ..crate::rundir::tests::summary()
            }),
            ..RunData::default()
        };
        let mixed = data(vec![
            on(
                "adpsgd",
                json!({"kind": "adpsgd", "topology": {"kind": "ring"}}),
                "ring",
                0.1,
            ),
            on("sgp", json!({"kind": "sgp"}), "one-peer-exponential", 0.1),
            on(
                "dasgd",
                json!({"kind": "dasgd", "broadcast": "all", "optimizer": {"lr": 0.01}}),
                "one-peer-exponential",
                0.01,
            ),
        ]);
        assert_eq!(mixed.legend("adpsgd"), "adpsgd (ring, lr 0.1)");
        assert_eq!(mixed.legend("sgp"), "sgp (one-peer-exponential, lr 0.1)");
        assert_eq!(
            mixed.legend("dasgd"),
            "dasgd (broadcast = \"all\", one-peer-exponential, lr 0.01)"
        );
        let shared = data(vec![
            on("adpsgd", json!({"kind": "adpsgd"}), "ring", 0.1),
            on("allreduce", json!({"kind": "allreduce"}), "ring", 0.1),
        ]);
        assert_eq!(shared.legend("adpsgd"), "adpsgd", "one topology, one rate");
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
        let err = table.rows(MetricRow::read).unwrap_err();
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
            .rows(MetricRow::read)
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
