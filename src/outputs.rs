//! The CSV files of a run directory, written to the run-directory contract.
//!
//! Every file starts with a stamp comment, `# dasim <version> git=<revision> scenario_sha256=<hex>`
//! (the SHA-256 of the resolved `scenario.toml` in the same directory), then a header row. Readers
//! skip lines that start with `#` (pandas: `pd.read_csv(f, comment="#")`; polars:
//! `comment_prefix="#"`). An empty cell means "not measured" (a NaN is written as an empty cell).
//! Numbers use Rust's shortest round-trip formatting (`{}`), times are in seconds.
//!
//! Two kinds of files:
//!
//! - **Streams** (`metrics.csv`, `series.csv`, and `gradients.csv` and `messages.csv` when asked
//!   for): a row is written and flushed as soon as it is known, so an interrupted run keeps
//!   everything up to its last row.
//! - **Tables** (`staleness.csv`, `utilization.csv`, `waits.csv`, `links.csv`, `timeline.csv`):
//!   rewritten after each algorithm with the rows of every algorithm so far, atomically (written
//!   to `<file>.tmp`, then renamed), so a reader never sees half a file.
//!
//! Everything written is a function of simulated events: two runs of a scenario write the same
//! bytes.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use dasim_reports::columns::{
    GRADIENTS, LINKS, MESSAGES, METRICS, SERIES, STALENESS, TIMELINE, UTILIZATION, WAITS,
};
use dasim_sim::record::{Activity, GradientRecord, MessageRecord, RunRecord};
use dasim_sim::run::EvalPoint;
use dasim_sim::time::SimTime;

use crate::{Error, Result};

/// The git revision this dasim was built from (`unknown` outside a git checkout).
pub const GIT_REVISION: &str = env!("DASIM_GIT_REVISION");

/// The git revision, `None` when unknown.
pub fn git_revision() -> Option<&'static str> {
    (GIT_REVISION != "unknown").then_some(GIT_REVISION)
}

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The first line of every CSV file of a run, without its newline.
pub fn stamp_line(scenario_sha256: &str) -> String {
    format!(
        "# dasim {} git={GIT_REVISION} scenario_sha256={scenario_sha256}",
        env!("CARGO_PKG_VERSION")
    )
}

/// A float as written: Rust's `{}`, or an empty cell for NaN ("not measured").
pub fn num(x: f64) -> String {
    if x.is_nan() {
        String::new()
    } else {
        x.to_string()
    }
}

fn opt(x: Option<f64>) -> String {
    x.map(num).unwrap_or_default()
}

fn secs(t: SimTime) -> String {
    t.as_secs_f64().to_string()
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { context, source }
}

fn csv_err(path: &Path) -> impl FnOnce(csv::Error) -> Error + '_ {
    move |e| Error::Io {
        context: format!("cannot write {}", path.display()),
        source: std::io::Error::other(e),
    }
}

/// A CSV file written row by row, each row flushed.
pub struct Stream {
    path: PathBuf,
    writer: csv::Writer<File>,
}

impl Stream {
    /// Creates (or truncates) `path` and writes the stamp and the header.
    pub fn create(path: PathBuf, stamp: &str, header: &[&str]) -> Result<Self> {
        let mut file =
            File::create(&path).map_err(io(format!("cannot create {}", path.display())))?;
        writeln!(file, "{stamp}").map_err(io(format!("cannot write {}", path.display())))?;
        let writer = csv::WriterBuilder::new()
            .terminator(csv::Terminator::Any(b'\n'))
            .from_writer(file);
        let mut s = Stream { path, writer };
        s.row(header.iter().map(|h| h.to_string()))?;
        Ok(s)
    }

    /// Appends one row and flushes it.
    pub fn row(&mut self, fields: impl IntoIterator<Item = String>) -> Result<()> {
        let fields: Vec<String> = fields.into_iter().collect();
        self.writer
            .write_record(&fields)
            .map_err(csv_err(&self.path))?;
        self.writer
            .flush()
            .map_err(io(format!("cannot write {}", self.path.display())))
    }
}

/// Writes `rows` under the stamp and the header to `path`, atomically.
pub fn write_table(path: &Path, stamp: &str, header: &[&str], rows: &[Vec<String>]) -> Result<()> {
    let mut w = csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    w.write_record(header).map_err(csv_err(path))?;
    for r in rows {
        w.write_record(r).map_err(csv_err(path))?;
    }
    let body = w
        .into_inner()
        .map_err(|e| io(format!("cannot write {}", path.display()))(e.into_error()))?;
    let mut bytes = format!("{stamp}\n").into_bytes();
    bytes.extend(body);
    write_atomic(path, &bytes)
}

/// Replaces `path` with `bytes`: written to `<path>.tmp`, then renamed over it.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    let tmp = path.with_file_name(name);
    std::fs::write(&tmp, bytes).map_err(io(format!("cannot write {}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(io(format!("cannot write {}", path.display())))
}

/// Prepends the stamp to a CSV file another crate wrote (`partition.csv`).
pub fn stamp_file(path: &Path, stamp: &str) -> Result<()> {
    let text =
        std::fs::read_to_string(path).map_err(io(format!("cannot read {}", path.display())))?;
    write_atomic(path, format!("{stamp}\n{text}").as_bytes())
}

/// The rows of the per-algorithm tables, accumulated over the algorithms of a run.
#[derive(Default)]
struct Tables {
    staleness: Vec<Vec<String>>,
    utilization: Vec<Vec<String>>,
    waits: Vec<Vec<String>>,
    links: Vec<Vec<String>>,
    timeline: Vec<Vec<String>>,
}

/// Every CSV file of a run directory.
pub struct Outputs {
    dir: PathBuf,
    stamp: String,
    metrics: Stream,
    series: Stream,
    gradients: Option<Stream>,
    messages: Option<Stream>,
    tables: Tables,
}

impl Outputs {
    /// Creates the streamed files in `dir` (the per-event logs only when asked for; stale ones
    /// from an earlier run in the same directory are removed otherwise).
    pub fn create(
        dir: &Path,
        stamp: String,
        log_gradients: bool,
        log_messages: bool,
    ) -> Result<Self> {
        let optional = |name: &str, on: bool| -> Result<Option<Stream>> {
            let path = dir.join(name);
            if on {
                let header = if name == "gradients.csv" {
                    GRADIENTS
                } else {
                    MESSAGES
                };
                Stream::create(path, &stamp, header).map(Some)
            } else {
                if path.exists() {
                    std::fs::remove_file(&path)
                        .map_err(io(format!("cannot remove {}", path.display())))?;
                }
                Ok(None)
            }
        };
        let gradients = optional("gradients.csv", log_gradients)?;
        let messages = optional("messages.csv", log_messages)?;
        Ok(Outputs {
            dir: dir.to_path_buf(),
            metrics: Stream::create(dir.join("metrics.csv"), &stamp, METRICS)?,
            series: Stream::create(dir.join("series.csv"), &stamp, SERIES)?,
            gradients,
            messages,
            stamp,
            tables: Tables::default(),
        })
    }

    /// Streams an evaluation point of `algorithm` to `metrics.csv` and its series to
    /// `series.csv`.
    pub fn point(&mut self, algorithm: &str, p: &EvalPoint) -> Result<()> {
        let time = secs(p.time);
        let (rl, ra) = match p.replicas {
            Some(r) => (
                [r.loss.min, r.loss.mean, r.loss.max].map(num),
                [r.accuracy.min, r.accuracy.mean, r.accuracy.max].map(num),
            ),
            None => (
                [String::new(), String::new(), String::new()],
                [String::new(), String::new(), String::new()],
            ),
        };
        let mut row = vec![
            algorithm.to_string(),
            time.clone(),
            p.worker_steps.to_string(),
            num(p.epoch),
            num(p.eval.loss),
            num(p.eval.accuracy),
            num(p.train_loss),
            num(p.consensus),
        ];
        row.extend(rl);
        row.extend(ra);
        row.push(opt(p.suboptimality));
        self.metrics.row(row)?;
        for (name, value) in &p.series {
            self.series.row([
                algorithm.to_string(),
                time.clone(),
                name.to_string(),
                num(*value),
            ])?;
        }
        Ok(())
    }

    /// Streams an applied gradient to `gradients.csv`, when it is written.
    pub fn gradient(&mut self, algorithm: &str, g: &GradientRecord) -> Result<()> {
        match &mut self.gradients {
            Some(s) => s.row([
                algorithm.to_string(),
                g.worker.to_string(),
                g.row.to_string(),
                secs(g.read),
                secs(g.apply),
                g.staleness.to_string(),
            ]),
            None => Ok(()),
        }
    }

    /// Streams a message to `messages.csv`, when it is written.
    pub fn message(&mut self, algorithm: &str, m: &MessageRecord) -> Result<()> {
        match &mut self.messages {
            Some(s) => s.row([
                algorithm.to_string(),
                m.src.to_string(),
                m.dst.to_string(),
                m.bytes.to_string(),
                secs(m.send),
                secs(m.arrive),
            ]),
            None => Ok(()),
        }
    }

    /// Adds a finished algorithm's record and rewrites the tables.
    pub fn record(&mut self, algorithm: &str, r: &RunRecord) -> Result<()> {
        let a = || algorithm.to_string();
        let t = &mut self.tables;
        for (measure, hs) in [
            ("gradient", &r.gradient_staleness),
            ("message_age", &r.message_age),
        ] {
            for (w, h) in hs.iter().enumerate() {
                for (value, count) in h.iter() {
                    t.staleness.push(vec![
                        a(),
                        measure.into(),
                        w.to_string(),
                        value.to_string(),
                        count.to_string(),
                    ]);
                }
            }
        }
        for (w, u) in r.usage.iter().enumerate() {
            let mut row = vec![a(), w.to_string(), u.steps.to_string()];
            row.extend(Activity::ALL.iter().map(|&x| secs(u.get(x))));
            t.utilization.push(row);
        }
        for (&(w, p), &d) in &r.waits {
            t.waits
                .push(vec![a(), w.to_string(), p.to_string(), secs(d)]);
        }
        for (&(src, dst), l) in &r.links {
            t.links.push(vec![
                a(),
                src.to_string(),
                dst.to_string(),
                l.messages.to_string(),
                l.bytes.to_string(),
                secs(l.busy),
            ]);
        }
        let mut timeline = r.timeline.clone();
        timeline.sort_by_key(|i| (i.worker, i.start));
        for i in &timeline {
            t.timeline.push(vec![
                a(),
                i.worker.to_string(),
                i.activity.name().into(),
                secs(i.start),
                secs(i.end),
                i.waited_for.map(|p| p.to_string()).unwrap_or_default(),
            ]);
        }
        for (name, header, rows) in [
            ("staleness.csv", STALENESS, &t.staleness),
            ("utilization.csv", UTILIZATION, &t.utilization),
            ("waits.csv", WAITS, &t.waits),
            ("links.csv", LINKS, &t.links),
            ("timeline.csv", TIMELINE, &t.timeline),
        ] {
            write_table(&self.dir.join(name), &self.stamp, header, rows)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_the_empty_string() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn nan_is_an_empty_cell() {
        assert_eq!(num(f64::NAN), "");
        assert_eq!(num(0.1), "0.1");
        assert_eq!(num(2.0), "2");
        assert_eq!(opt(None), "");
    }

    #[test]
    fn the_stamp_names_version_revision_and_hash() {
        let s = stamp_line("ab");
        assert!(s.starts_with("# dasim "), "{s}");
        assert!(
            s.contains(" git=") && s.ends_with(" scenario_sha256=ab"),
            "{s}"
        );
    }
}
