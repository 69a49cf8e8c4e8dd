//! Writing a run directory: the one atomic write, the streamed and the rewritten CSV files,
//! `summary.json` and `timings.json`.
//!
//! Two kinds of CSV files:
//!
//! - **Streams** ([`CsvStream`]: `metrics.csv`, `series.csv`, and `gradients.csv` and
//!   `messages.csv` when asked for): a row is written and flushed as soon as it is known, so an
//!   interrupted run keeps everything up to its last row.
//! - **Tables** ([`write_csv`]: `staleness.csv`, `utilization.csv`, `waits.csv`, `links.csv`,
//!   `timeline.csv`, `partition.csv`): written whole, atomically ([`write_atomic`]), so a reader
//!   never sees half a file.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use crate::rundir::schema::{
    CsvRow, FaultRow, GradientRow, LinkRow, MessageRow, MetricRow, Partition, SeriesRow,
    StalenessRow, Stamp, Summary, TimelineRow, Timings, UtilizationRow, WaitRow, files,
};
use crate::{Error, Result};

/// Replaces the file at `path` with `bytes` atomically and durably.
///
/// The bytes are written and synced to `<path>.tmp` (same directory), which is then renamed
/// over `path`, and the directory is synced (where the platform can: not on Windows): a reader
/// sees either the previous file or the complete new one, and after a crash the rename is
/// either lost or complete. On failure the temporary file is removed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_with(path, |w| {
        w.write_all(bytes).map_err(|e| Error::io("write", path, e))
    })
}

/// [`write_atomic`] of what `write` writes, streamed to the temporary file through a buffer: a
/// table of millions of rows never has to be held in memory as bytes.
pub fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<()>,
) -> Result<()> {
    let tmp = tmp_path(path);
    let written = write_synced(&tmp, write)
        .and_then(|()| fs::rename(&tmp, path).map_err(|e| Error::io("rename", path, e)));
    if written.is_err() {
        // Best effort: do not leave a stale temporary behind.
        let _ = fs::remove_file(&tmp);
    }
    written?;
    sync_dir(path)
}

/// `<path>.tmp`, next to `path`.
fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map_or_else(OsString::new, OsString::from);
    name.push(".tmp");
    path.with_file_name(name)
}

fn write_synced(path: &Path, write: impl FnOnce(&mut BufWriter<File>) -> Result<()>) -> Result<()> {
    let file = File::create(path).map_err(|e| Error::io("create", path, e))?;
    let mut w = BufWriter::new(file);
    write(&mut w)?;
    let file = w
        .into_inner()
        .map_err(|e| Error::io("write", path, e.into_error()))?;
    file.sync_all().map_err(|e| Error::io("write", path, e))
}

/// Syncs the directory holding `path`, so that a rename into it is durable.
#[cfg(unix)]
fn sync_dir(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match File::open(dir).and_then(|d| d.sync_all()) {
        Ok(()) => Ok(()),
        // Some file systems cannot sync a directory: the rename is as durable as they make it.
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Ok(()),
        Err(e) => Err(Error::io("sync", dir, e)),
    }
}

/// Windows cannot open a directory as a file to sync it.
#[cfg(not(unix))]
fn sync_dir(_path: &Path) -> Result<()> {
    Ok(())
}

/// Writes `value` as pretty-printed JSON with a trailing newline, atomically ([`write_atomic`]).
///
/// The parent directory must exist. Non-finite floats are written as `null` (JSON has no NaN
/// or infinity); map keys keep the order the value serializes them in.
pub fn write_json(path: impl AsRef<Path>, value: &impl serde::Serialize) -> Result<()> {
    let path = path.as_ref();
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|source| Error::Json {
        path: path.to_path_buf(),
        source,
    })?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

fn csv_writer<W: Write>(w: W) -> csv::Writer<W> {
    csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(w)
}

/// Writes the CSV file `path` atomically ([`write_atomic_with`]): the stamp line, the header,
/// then what `body` writes after them, streamed.
fn write_csv_file(
    path: &Path,
    stamp: &Stamp,
    header: &[&str],
    body: impl FnOnce(&mut BufWriter<File>) -> csv::Result<()>,
) -> Result<()> {
    write_atomic_with(path, |out| {
        writeln!(out, "{stamp}").map_err(|e| Error::io("write", path, e))?;
        let mut w = csv_writer(&mut *out);
        w.write_record(header)
            .and_then(|()| w.flush().map_err(csv::Error::from))
            .map_err(|e| Error::csv("write", path, e))?;
        drop(w);
        body(out).map_err(|e| Error::csv("write", path, e))
    })
}

/// A [`write_csv_file`] body: the records `rows` writes, through a CSV writer flushed at the
/// end.
fn records(
    rows: impl FnOnce(&mut csv::Writer<&mut BufWriter<File>>) -> csv::Result<()>,
) -> impl FnOnce(&mut BufWriter<File>) -> csv::Result<()> {
    |out| {
        let mut w = csv_writer(out);
        rows(&mut w)?;
        Ok(w.flush()?)
    }
}

/// Writes `rows` under the stamp and the header to `dir/R::FILE`, atomically.
/// A column of [`CsvRow::OMITTED_WHEN_EMPTY`] whose cells are all empty is left out.
///
/// The rows are formatted one at a time and streamed to the file, so the memory is that of one
/// row (a 1,024-worker run's `staleness.csv` has millions).
pub fn write_csv<R: CsvRow>(dir: &Path, stamp: &Stamp, rows: &[R]) -> Result<()> {
    let path = dir.join(R::FILE);
    let keep = kept_columns(rows);
    write_csv_file(
        &path,
        stamp,
        &header(R::COLUMNS, &keep),
        records(|w| write_rows(w, rows, &keep)),
    )
}

/// The bytes [`write_csv`] writes for `rows`: the stamp line, the header and the rows, as one
/// string (a run kept in memory renders its tables with it; `tests/python` checks that they
/// equal the files of a run directory).
pub fn csv_text<R: CsvRow>(stamp: &Stamp, rows: &[R]) -> String {
    let keep = kept_columns(rows);
    let mut out = format!("{stamp}\n").into_bytes();
    let mut w = csv_writer(&mut out);
    w.write_record(header(R::COLUMNS, &keep))
        .and_then(|()| write_rows(&mut w, rows, &keep))
        .and_then(|()| w.flush().map_err(csv::Error::from))
        .expect("writing CSV to memory cannot fail");
    drop(w);
    String::from_utf8(out).expect("CSV cells are UTF-8")
}

/// The bytes [`write_partition`] writes, as one string.
pub fn partition_text(stamp: &Stamp, partition: &Partition) -> String {
    let mut out = format!("{stamp}\n").into_bytes();
    let mut w = csv_writer(&mut out);
    std::iter::once(partition.columns())
        .chain(partition.workers.iter().map(Partition::cells))
        .try_for_each(|cells| w.write_record(cells))
        .and_then(|()| w.flush().map_err(csv::Error::from))
        .expect("writing CSV to memory cannot fail");
    drop(w);
    String::from_utf8(out).expect("CSV cells are UTF-8")
}

/// The bytes [`write_json`] writes for `value`, as one string.
pub fn json_text(value: &impl serde::Serialize) -> String {
    let mut text = serde_json::to_string_pretty(value).expect("the run's JSON serializes");
    text.push('\n');
    text
}

/// Which of `R`'s columns a table of `rows` keeps: all but those of
/// [`CsvRow::OMITTED_WHEN_EMPTY`] whose cells are all empty (a pass over the rows only for a
/// table that can omit some).
fn kept_columns<R: CsvRow>(rows: &[R]) -> Vec<bool> {
    let mut keep: Vec<bool> = R::COLUMNS
        .iter()
        .map(|c| !R::OMITTED_WHEN_EMPTY.contains(c))
        .collect();
    if keep.contains(&false) {
        let mut cells: Vec<String> = Vec::new();
        for row in rows {
            row.fill(&mut cells);
            for (k, cell) in keep.iter_mut().zip(&cells) {
                *k |= !cell.is_empty();
            }
        }
    }
    keep
}

fn header<'a>(columns: &[&'a str], keep: &[bool]) -> Vec<&'a str> {
    columns
        .iter()
        .zip(keep)
        .filter_map(|(c, &k)| k.then_some(*c))
        .collect()
}

/// Writes the kept cells of `rows`, one buffer of cells filled by each row in turn
/// ([`CsvRow::fill`]).
fn write_rows<R: CsvRow, W: Write>(
    w: &mut csv::Writer<W>,
    rows: &[R],
    keep: &[bool],
) -> csv::Result<()> {
    let mut cells: Vec<String> = Vec::new();
    for row in rows {
        row.fill(&mut cells);
        w.write_record(cells.iter().zip(keep).filter_map(|(c, &k)| k.then_some(c)))?;
    }
    Ok(())
}

/// The rows of a table formatted so far, so that rewriting the table with more rows formats
/// only the new ones: a run's tables are rewritten after each algorithm with the rows of every
/// algorithm so far, and formatting the earlier algorithms' rows again made the writing
/// quadratic in their number.
#[derive(Debug, Default)]
struct Formatted {
    /// How many of the table's first rows `body` holds.
    rows: usize,
    /// The columns they were formatted with.
    keep: Vec<bool>,
    /// Their CSV lines.
    body: Vec<u8>,
}

/// Rows formatted by one task of [`write_table`].
const FORMAT_CHUNK: usize = 8192;

/// Writes `rows` like [`write_csv`], formatting only those after the ones `formatted` holds
/// (and keeping them there). The table's rows must extend the ones it was last written with;
/// when the kept columns change, every row is formatted again.
fn write_table<R: CsvRow + Sync>(
    dir: &Path,
    stamp: &Stamp,
    rows: &[R],
    formatted: &mut Formatted,
) -> Result<()> {
    let path = dir.join(R::FILE);
    let keep = kept_columns(rows);
    if formatted.keep != keep || formatted.rows > rows.len() {
        *formatted = Formatted {
            keep: keep.clone(),
            ..Formatted::default()
        };
    }
    // The new rows in chunks formatted side by side, then joined in order: a row's line
    // depends on that row alone.
    let chunks: Vec<csv::Result<Vec<u8>>> = rows[formatted.rows..]
        .par_chunks(FORMAT_CHUNK)
        .map(|chunk| {
            let mut lines = Vec::new();
            let mut w = csv_writer(&mut lines);
            write_rows(&mut w, chunk, &keep)?;
            w.flush()?;
            drop(w);
            Ok(lines)
        })
        .collect();
    for lines in chunks {
        let lines = lines.map_err(|e| Error::csv("write", &path, e))?;
        formatted.body.extend_from_slice(&lines);
    }
    formatted.rows = rows.len();
    write_csv_file(&path, stamp, &header(R::COLUMNS, &keep), |out| {
        Ok(out.write_all(&formatted.body)?)
    })
}

/// Writes `partition.csv` to `dir`, atomically.
pub fn write_partition(dir: &Path, stamp: &Stamp, partition: &Partition) -> Result<()> {
    let path = dir.join(files::PARTITION);
    let header = partition.columns();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    write_csv_file(
        &path,
        stamp,
        &header,
        records(|w| {
            partition
                .workers
                .iter()
                .try_for_each(|r| w.write_record(Partition::cells(r)))
        }),
    )
}

/// Writes the resolved scenario, `scenario.toml`, to `dir`, atomically.
pub fn write_scenario(dir: &Path, scenario_toml: &str) -> Result<()> {
    write_atomic(&dir.join(files::SCENARIO), scenario_toml.as_bytes())
}

/// A CSV file of rows `R` written row by row, each row flushed to the file.
pub struct CsvStream<R> {
    path: PathBuf,
    writer: csv::Writer<File>,
    row: PhantomData<fn(&R)>,
}

impl<R: CsvRow> CsvStream<R> {
    /// Creates (or truncates) `dir/R::FILE` and writes the stamp and the header.
    pub fn create(dir: &Path, stamp: &Stamp) -> Result<Self> {
        let path = dir.join(R::FILE);
        let mut file = File::create(&path).map_err(|e| Error::io("create", &path, e))?;
        writeln!(file, "{stamp}").map_err(|e| Error::io("write", &path, e))?;
        let mut s = CsvStream {
            writer: csv_writer(file),
            path,
            row: PhantomData,
        };
        s.record(R::COLUMNS)?;
        Ok(s)
    }

    /// Reopens `dir/R::FILE` to append after its first `len` bytes, cutting off anything
    /// after them (what a run wrote after its checkpoint).
    pub fn resume(dir: &Path, len: u64) -> Result<Self> {
        let path = dir.join(R::FILE);
        let file = fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(|e| Error::io("open", &path, e))?;
        let have = file
            .metadata()
            .map_err(|e| Error::io("read", &path, e))?
            .len();
        if have < len {
            return Err(Error::io(
                "resume",
                &path,
                std::io::Error::other(format!(
                    "it holds {have} bytes, fewer than the {len} it held at the checkpoint"
                )),
            ));
        }
        file.set_len(len)
            .map_err(|e| Error::io("truncate", &path, e))?;
        let mut file = file;
        std::io::Seek::seek(&mut file, std::io::SeekFrom::End(0))
            .map_err(|e| Error::io("seek", &path, e))?;
        Ok(CsvStream {
            writer: csv_writer(file),
            path,
            row: PhantomData,
        })
    }

    /// The file's length so far, every row on disk (synced: a checkpoint counts on it).
    pub fn synced_len(&mut self) -> Result<u64> {
        self.writer
            .flush()
            .map_err(|e| Error::io("write", &self.path, e))?;
        let file = self.writer.get_ref();
        file.sync_data()
            .map_err(|e| Error::io("sync", &self.path, e))?;
        Ok(file
            .metadata()
            .map_err(|e| Error::io("read", &self.path, e))?
            .len())
    }

    /// Appends `row` and flushes it.
    pub fn push(&mut self, row: &R) -> Result<()> {
        self.record(row.cells())
    }

    fn record<I: IntoIterator<Item = T>, T: AsRef<[u8]>>(&mut self, fields: I) -> Result<()> {
        self.writer
            .write_record(fields)
            .map_err(|e| Error::csv("write", &self.path, e))?;
        self.writer
            .flush()
            .map_err(|e| Error::io("write", &self.path, e))
    }
}

/// The rows of the tables one algorithm adds: `staleness.csv`, `utilization.csv`, `waits.csv`,
/// `links.csv` and `timeline.csv`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tables {
    /// `staleness.csv`.
    pub staleness: Vec<StalenessRow>,
    /// `utilization.csv`.
    pub utilization: Vec<UtilizationRow>,
    /// `waits.csv`.
    pub waits: Vec<WaitRow>,
    /// `links.csv`.
    pub links: Vec<LinkRow>,
    /// `timeline.csv`.
    pub timeline: Vec<TimelineRow>,
    /// `faults.csv`: written only when some algorithm has a row.
    pub faults: Vec<FaultRow>,
}

impl Tables {
    /// Appends `more`'s rows to each table.
    pub fn extend(&mut self, more: Tables) {
        self.staleness.extend(more.staleness);
        self.utilization.extend(more.utilization);
        self.waits.extend(more.waits);
        self.links.extend(more.links);
        self.timeline.extend(more.timeline);
        self.faults.extend(more.faults);
    }

    /// Writes the tables to `dir`, each atomically (`faults.csv` only when it has rows).
    pub fn write(&self, dir: &Path, stamp: &Stamp) -> Result<()> {
        self.write_formatted(dir, stamp, &mut TablesFormatted::default())
    }

    /// [`write`](Self::write), formatting only the rows after those `formatted` holds. The
    /// files are independent: they are formatted and written side by side on the current
    /// rayon pool (the two large ones, `staleness.csv` and `timeline.csv`, in different halves
    /// of the list), and the first error in the list's order is returned.
    fn write_formatted(
        &self,
        dir: &Path,
        stamp: &Stamp,
        formatted: &mut TablesFormatted,
    ) -> Result<()> {
        type Job<'a> = Box<dyn FnOnce() -> Result<()> + Send + 'a>;
        let f = formatted;
        let mut jobs: Vec<Job<'_>> = vec![
            Box::new(|| write_table(dir, stamp, &self.staleness, &mut f.staleness)),
            Box::new(|| write_table(dir, stamp, &self.utilization, &mut f.utilization)),
            Box::new(|| write_table(dir, stamp, &self.waits, &mut f.waits)),
            Box::new(|| write_table(dir, stamp, &self.links, &mut f.links)),
            Box::new(|| write_table(dir, stamp, &self.timeline, &mut f.timeline)),
        ];
        if !self.faults.is_empty() {
            jobs.push(Box::new(|| {
                write_table(dir, stamp, &self.faults, &mut f.faults)
            }));
        }
        let results: Vec<Result<()>> = jobs.into_par_iter().map(|job| job()).collect();
        results.into_iter().collect()
    }
}

/// What [`Tables::write_formatted`] keeps of each table between two writes.
#[derive(Debug, Default)]
struct TablesFormatted {
    staleness: Formatted,
    utilization: Formatted,
    waits: Formatted,
    links: Formatted,
    timeline: Formatted,
    faults: Formatted,
}

/// Where a [`RunWriter`] stands, for a checkpoint: the length of each streamed file and the
/// tables' rows so far. [`RunWriter::resume`] cuts the streams back to these lengths.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WriterState {
    /// `(file name, bytes)` of every streamed file.
    pub streams: Vec<(String, u64)>,
    /// The rows of the tables of the algorithms finished so far.
    pub tables: Tables,
}

/// Which per-event logs a run writes (`[metrics] log_gradients`, `log_messages`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventLogs {
    /// `gradients.csv`.
    pub gradients: bool,
    /// `messages.csv`.
    pub messages: bool,
}

/// The files of a run directory that are written while the algorithms run: the streams, the
/// tables (rewritten after each algorithm with the rows of every algorithm so far, of which
/// only the new algorithm's are formatted: the writer keeps the earlier ones' text),
/// `summary.json` and `timings.json`. (`scenario.toml` and `partition.csv` come before it:
/// [`write_scenario`], [`write_partition`].)
pub struct RunWriter {
    dir: PathBuf,
    stamp: Stamp,
    metrics: CsvStream<MetricRow>,
    series: CsvStream<SeriesRow>,
    gradients: Option<CsvStream<GradientRow>>,
    messages: Option<CsvStream<MessageRow>>,
    tables: Tables,
    /// The tables' rows formatted so far.
    formatted: TablesFormatted,
}

impl RunWriter {
    /// Creates the streamed files in `dir` (the per-event logs only when asked for; stale ones
    /// from an earlier run in the same directory are removed otherwise).
    pub fn create(dir: &Path, stamp: Stamp, logs: EventLogs) -> Result<Self> {
        fn optional<R: CsvRow>(
            dir: &Path,
            stamp: &Stamp,
            on: bool,
        ) -> Result<Option<CsvStream<R>>> {
            if on {
                return CsvStream::create(dir, stamp).map(Some);
            }
            let path = dir.join(R::FILE);
            match fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(Error::io("remove", &path, e))
                }
                _ => Ok(None),
            }
        }
        Ok(RunWriter {
            dir: dir.to_path_buf(),
            gradients: optional(dir, &stamp, logs.gradients)?,
            messages: optional(dir, &stamp, logs.messages)?,
            metrics: CsvStream::create(dir, &stamp)?,
            series: CsvStream::create(dir, &stamp)?,
            stamp,
            tables: Tables::default(),
            formatted: TablesFormatted::default(),
        })
    }

    /// Reopens the run directory `dir` as it was at a checkpoint ([`RunWriter::state`]): every
    /// stream is cut back to its length then and appended to; the tables are rewritten with the
    /// rows they had (or removed when no algorithm had finished).
    pub fn resume(dir: &Path, stamp: Stamp, logs: EventLogs, state: WriterState) -> Result<Self> {
        let len = |file: &str| -> Result<u64> {
            state
                .streams
                .iter()
                .find(|(f, _)| f == file)
                .map(|(_, l)| *l)
                .ok_or_else(|| {
                    Error::io(
                        "resume",
                        &dir.join(file),
                        std::io::Error::other("the checkpoint has no length for it"),
                    )
                })
        };
        fn optional<R: CsvRow>(
            dir: &Path,
            on: bool,
            len: &dyn Fn(&str) -> Result<u64>,
        ) -> Result<Option<CsvStream<R>>> {
            on.then(|| CsvStream::resume(dir, len(R::FILE)?))
                .transpose()
        }
        let mut writer = RunWriter {
            dir: dir.to_path_buf(),
            gradients: optional(dir, logs.gradients, &len)?,
            messages: optional(dir, logs.messages, &len)?,
            metrics: CsvStream::resume(dir, len(MetricRow::FILE)?)?,
            series: CsvStream::resume(dir, len(SeriesRow::FILE)?)?,
            stamp,
            tables: state.tables,
            formatted: TablesFormatted::default(),
        };
        if writer.tables == Tables::default() {
            for file in [
                StalenessRow::FILE,
                UtilizationRow::FILE,
                WaitRow::FILE,
                LinkRow::FILE,
                TimelineRow::FILE,
                FaultRow::FILE,
            ] {
                let path = dir.join(file);
                match fs::remove_file(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(Error::io("remove", &path, e));
                    }
                    _ => {}
                }
            }
        } else {
            writer
                .tables
                .write_formatted(dir, &writer.stamp, &mut writer.formatted)?;
        }
        Ok(writer)
    }

    /// Where the writer stands, every streamed row synced to disk: what a checkpoint records.
    pub fn state(&mut self) -> Result<WriterState> {
        let mut streams = vec![
            (MetricRow::FILE.to_string(), self.metrics.synced_len()?),
            (SeriesRow::FILE.to_string(), self.series.synced_len()?),
        ];
        if let Some(g) = &mut self.gradients {
            streams.push((GradientRow::FILE.to_string(), g.synced_len()?));
        }
        if let Some(m) = &mut self.messages {
            streams.push((MessageRow::FILE.to_string(), m.synced_len()?));
        }
        Ok(WriterState {
            streams,
            tables: self.tables.clone(),
        })
    }

    /// The stamp of every CSV file.
    pub fn stamp(&self) -> &Stamp {
        &self.stamp
    }

    /// The rows of every table written so far, taken out of the writer: for a run that has
    /// written its last table and draws its plots from memory ([`RunData::with_tables`](crate::RunData::with_tables)).
    /// A later [`add_tables`](Self::add_tables) would write only the rows added after it.
    pub fn take_tables(&mut self) -> Tables {
        self.formatted = TablesFormatted::default();
        std::mem::take(&mut self.tables)
    }

    /// Streams an evaluation point to `metrics.csv`.
    pub fn metric(&mut self, row: &MetricRow) -> Result<()> {
        self.metrics.push(row)
    }

    /// Streams a named quantity to `series.csv`.
    pub fn series(&mut self, row: &SeriesRow) -> Result<()> {
        self.series.push(row)
    }

    /// Whether `gradients.csv` is written.
    pub fn logs_gradients(&self) -> bool {
        self.gradients.is_some()
    }

    /// Whether `messages.csv` is written.
    pub fn logs_messages(&self) -> bool {
        self.messages.is_some()
    }

    /// Streams an applied gradient to `gradients.csv`, when it is written.
    pub fn gradient(&mut self, row: &GradientRow) -> Result<()> {
        self.gradients.as_mut().map_or(Ok(()), |s| s.push(row))
    }

    /// Streams a message to `messages.csv`, when it is written.
    pub fn message(&mut self, row: &MessageRow) -> Result<()> {
        self.messages.as_mut().map_or(Ok(()), |s| s.push(row))
    }

    /// Adds a finished algorithm's tables and rewrites them (formatting only the new rows).
    pub fn add_tables(&mut self, tables: Tables) -> Result<()> {
        self.tables.extend(tables);
        self.tables
            .write_formatted(&self.dir, &self.stamp, &mut self.formatted)
    }

    /// Rewrites `summary.json`.
    pub fn summary(&self, summary: &Summary) -> Result<()> {
        write_json(self.dir.join(files::SUMMARY), summary)
    }

    /// Rewrites `timings.json`.
    pub fn timings(&self, timings: &Timings) -> Result<()> {
        write_json(self.dir.join(files::TIMINGS), timings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tmp_path_appends_suffix() {
        assert_eq!(
            tmp_path(Path::new("runs/x/summary.json")),
            Path::new("runs/x/summary.json.tmp")
        );
    }
}
