//! The two [`RunSink`]s: the run directory ([`RunDir`]) and the tables in memory
//! ([`InMemory`]).
//!
//! The run directory ([`dasim_reports::rundir`], which owns its files and their rows) receives
//! `scenario.toml` (the scenario with every default filled in) and `partition.csv`; then,
//! streamed, `metrics.csv` and `series.csv` (and `gradients.csv` and `messages.csv` when
//! `[metrics]` asks for them); after each algorithm, the tables `staleness.csv`,
//! `utilization.csv`, `waits.csv`, `links.csv`, `timeline.csv`, then `summary.json` and
//! `timings.json` are rewritten, so an interrupted run keeps everything up to the last
//! evaluation point (`dasim plot` draws its plots). The claims' verdicts go to `checks.csv` and
//! to `summary.json`'s `checks`; the plots are drawn once, at the end. Every CSV file starts
//! with the stamp line `# dasim <version> git=<revision> scenario_sha256=<hex>` ([`Stamp`]), the
//! hash being that of the `scenario.toml` written beside it; `summary.json` carries the same
//! facts.

use std::path::{Path, PathBuf};

use dasim_reports::rundir::{
    CheckRow, EventLogs, GradientRow, MessageRow, MetricRow, Partition, RunData, RunWriter,
    SeriesRow, Stamp, Summary, Tables, Timings, csv_text, files, json_text, partition_text,
    write_csv, write_partition, write_scenario,
};

use crate::checkpoint::{self, RunCheckpoint, crash_point};
use crate::simulation::{CheckpointAt, RunSink, RunStart};
use crate::{Error, Result};

fn io(context: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { context, source }
}

/// Removes a file an earlier run left in the output directory, if there is one.
fn remove_stale(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(io(format!("cannot remove {}", path.display()))(e))
        }
        _ => Ok(()),
    }
}

/// The files of a run directory that `dasim run` writes (plots aside), and `dasim report`'s page.
const RUN_FILES: [&str; 17] = [
    files::SCENARIO,
    files::SUMMARY,
    files::TIMINGS,
    files::METRICS,
    files::SERIES,
    files::STALENESS,
    files::UTILIZATION,
    files::WAITS,
    files::LINKS,
    files::TIMELINE,
    files::GRADIENTS,
    files::MESSAGES,
    files::PARTITION,
    files::CHECKS,
    files::FAULTS,
    "report.html",
    checkpoint::FILE,
];

/// A run directory being written: `dasim run --out DIR`.
pub struct RunDir {
    dir: PathBuf,
    plots: bool,
    writer: Option<RunWriter>,
    scenario_path: PathBuf,
    wrote_checks: bool,
}

impl RunDir {
    /// The run directory `dir` for a new run of the scenario file `scenario` (which its
    /// checkpoints name): refuses one that already holds a run's results (`summary.json` or
    /// `metrics.csv`) unless `force`, and with `force` removes the earlier run's files (every
    /// file `dasim run` writes, `report.html`, and the plots: every `*.png` and `*.svg`), so
    /// that no file of the old run survives beside the new one. Other files are left alone. The
    /// directory is created when the run starts.
    pub fn create(dir: &Path, scenario: &Path, force: bool) -> Result<RunDir> {
        prepare_out(dir, force)?;
        Ok(Self::at(dir, scenario))
    }

    /// The run directory `dir` of an interrupted run, to continue from its checkpoint
    /// ([`Checkpoints::resume`](crate::simulation::Checkpoints::resume)).
    pub fn resume(dir: &Path, scenario: &Path) -> RunDir {
        Self::at(dir, scenario)
    }

    fn at(dir: &Path, scenario: &Path) -> RunDir {
        RunDir {
            dir: dir.to_path_buf(),
            plots: true,
            writer: None,
            scenario_path: std::path::absolute(scenario).unwrap_or_else(|_| scenario.into()),
            wrote_checks: false,
        }
    }

    /// Whether to draw the plots at the end (default: yes; `dasim check` leaves them out of the
    /// temporary run directories it removes).
    pub fn plots(mut self, plots: bool) -> Self {
        self.plots = plots;
        self
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn writer(&mut self) -> &mut RunWriter {
        self.writer
            .as_mut()
            .expect("the run directory is written only after the run started")
    }
}

impl RunSink for RunDir {
    fn start(&mut self, run: &RunStart<'_>) -> Result<()> {
        let dir = &self.dir;
        std::fs::create_dir_all(dir).map_err(io(format!("cannot create {}", dir.display())))?;
        if run.resume.is_none() {
            write_scenario(dir, run.scenario_toml)?;
            if let Some(partition) = &run.partition {
                write_partition(dir, run.stamp, partition)?;
            }
        }
        let stamp = run.stamp.clone();
        let writer = match run.resume {
            Some(ckpt) => RunWriter::resume(dir, stamp, run.logs, ckpt.writer.clone())?,
            None => RunWriter::create(dir, stamp, run.logs)?,
        };
        if let Some(ckpt) = run.resume {
            // The files as they were at the checkpoint (a later algorithm may have rewritten
            // them before the run was stopped).
            let summary = ckpt.summary()?;
            if summary.runs.is_empty() {
                remove_stale(&dir.join(files::SUMMARY))?;
                remove_stale(&dir.join(files::TIMINGS))?;
            } else {
                writer.summary(&summary)?;
                writer.timings(&ckpt.timings()?)?;
            }
            remove_stale(&dir.join(files::CHECKS))?;
        }
        self.writer = Some(writer);
        Ok(())
    }

    fn metric(&mut self, row: &MetricRow) -> Result<()> {
        Ok(self.writer().metric(row)?)
    }

    fn series(&mut self, row: &SeriesRow) -> Result<()> {
        Ok(self.writer().series(row)?)
    }

    fn gradient(&mut self, row: &GradientRow) -> Result<()> {
        Ok(self.writer().gradient(row)?)
    }

    fn message(&mut self, row: &MessageRow) -> Result<()> {
        Ok(self.writer().message(row)?)
    }

    fn checkpoint(&mut self, at: &CheckpointAt<'_>) -> Result<()> {
        let writer = self.writer().state()?;
        RunCheckpoint {
            scenario_path: self.scenario_path.clone(),
            scenario_sha256: at.scenario_sha256.to_string(),
            backend: at.backend,
            checkpoint_every_s: at.every_s,
            algorithm: at.algorithm,
            sim_time_s: at.sim_time_s,
            engine: at.engine.map(<[u8]>::to_vec),
            writer,
            summary_json: at.summary_json.to_string(),
            timings_json: at.timings_json.to_string(),
            seen: at.seen.clone(),
            wall_s: at.wall_s,
        }
        .write(&self.dir)
    }

    fn algorithm_done(
        &mut self,
        tables: Tables,
        summary: &Summary,
        timings: &Timings,
    ) -> Result<()> {
        let writer = self.writer();
        writer.add_tables(tables)?;
        crash_point("tables");
        writer.summary(summary)?;
        writer.timings(timings)?;
        crash_point("summary");
        Ok(())
    }

    /// The claims read the files every reader reads.
    fn run_data(&mut self) -> Result<RunData> {
        Ok(RunData::load(&self.dir)?)
    }

    fn checks(&mut self, summary: &Summary) -> Result<()> {
        let writer = self
            .writer
            .as_ref()
            .expect("the run directory is written only after the run started");
        write_csv(&self.dir, writer.stamp(), &summary.checks)?;
        writer.summary(summary)?;
        self.wrote_checks = true;
        Ok(())
    }

    fn finish(&mut self, _summary: &Summary) -> Result<()> {
        if !self.wrote_checks {
            remove_stale(&self.dir.join(files::CHECKS))?;
        }
        // Every file of every algorithm is on disk: draw every plot once, from what the files
        // hold: the tables as they were written (still in memory; read back they are the same
        // rows, so the plots of a run and of `dasim plot` are the same bytes, `tests/integration/plot.rs`),
        // the rest read. (Not after each algorithm: at 1,024 workers redrawing is not free, and
        // `dasim plot` draws an interrupted run's plots from the files it kept.)
        crash_point("plots");
        if self.plots {
            let writer = self.writer();
            let tables = writer.take_tables();
            let stamp = writer.stamp().clone();
            let data = RunData::with_tables(&self.dir, &stamp, tables)?;
            dasim_reports::plot_run_data(&data, &self.dir)?;
        }
        // Every file is complete: nothing is left to continue.
        RunCheckpoint::remove(&self.dir)
    }

    fn resume_hint(&self) -> Option<String> {
        Some(format!(
            "a checkpoint is in {}; continue with: dasim run --resume {}",
            self.dir.join(checkpoint::FILE).display(),
            self.dir.display()
        ))
    }
}

/// Gets the output directory ready ([`RunDir::create`]).
fn prepare_out(out: &Path, force: bool) -> Result<()> {
    let holds = [files::SUMMARY, files::METRICS]
        .iter()
        .any(|f| out.join(f).exists());
    if !holds {
        return Ok(());
    }
    if !force {
        let resumable = if out.join(checkpoint::FILE).exists() {
            format!(
                ", or continue its interrupted run with dasim run --resume {}",
                out.display()
            )
        } else {
            String::new()
        };
        return Err(Error::Usage(format!(
            "{} already holds the results of a run (summary.json, metrics.csv); pass --force to \
             replace them, or choose another --out{resumable}",
            out.display()
        )));
    }
    let entries = std::fs::read_dir(out).map_err(io(format!("cannot read {}", out.display())))?;
    for entry in entries {
        let entry = entry.map_err(io(format!("cannot read {}", out.display())))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let plot = name.ends_with(".png") || name.ends_with(".svg");
        if (plot || RUN_FILES.contains(&name.as_ref()))
            && entry.file_type().is_ok_and(|t| t.is_file())
        {
            remove_stale(&entry.path())?;
        }
    }
    Ok(())
}

/// A run kept in memory: every row and file a run directory would hold, nothing written.
/// [`InMemory::run_data`] gives them as a reader of the run directory would see them
/// ([`RunData`]: what the plots and the report read).
#[derive(Debug, Default)]
pub struct InMemory {
    /// The stamp the run's files would carry.
    pub stamp: Option<Stamp>,
    /// `scenario.toml`.
    pub scenario_toml: String,
    /// `partition.csv`; `None` for a model without data.
    pub partition: Option<Partition>,
    /// `metrics.csv`.
    pub metrics: Vec<MetricRow>,
    /// `series.csv`.
    pub series: Vec<SeriesRow>,
    /// `gradients.csv` (with `[metrics] log_gradients`).
    pub gradients: Vec<GradientRow>,
    /// `messages.csv` (with `[metrics] log_messages`).
    pub messages: Vec<MessageRow>,
    /// `staleness.csv`, `utilization.csv`, `waits.csv`, `links.csv`, `timeline.csv` and
    /// `faults.csv`.
    pub tables: Tables,
    /// `summary.json` (after the first algorithm).
    pub summary: Option<Summary>,
    /// `timings.json` (after the first algorithm).
    pub timings: Option<Timings>,
    /// `checks.csv`.
    pub checks: Vec<CheckRow>,
    /// Which per-event logs the scenario asked for (a run directory then has
    /// `gradients.csv` or `messages.csv`, even with no row).
    pub logs: EventLogs,
}

impl InMemory {
    /// The run as a reader of its run directory would see it (a clone of the rows).
    pub fn run_data(&self) -> RunData {
        RunData::in_memory(
            self.stamp.clone().unwrap_or_default(),
            self.metrics.clone(),
            self.series.clone(),
            self.tables.clone(),
            self.checks.clone(),
            self.summary.clone(),
            self.scenario_toml.clone(),
        )
    }
}

impl InMemory {
    /// The files a run directory of the same run would hold (the plots, `report.html` and
    /// `checkpoint.bin` aside), by name, each with the bytes it would hold: `scenario.toml`,
    /// `partition.csv` (with data), the CSV files (`gradients.csv` and `messages.csv` when
    /// logged, `faults.csv` when a fault happened, `checks.csv` with claims), `summary.json`
    /// and `timings.json` (once an algorithm finished). `tests/python` checks them against
    /// the files `dasim run` writes, byte for byte.
    pub fn files(&self) -> Vec<(&'static str, String)> {
        let stamp = self.stamp.clone().unwrap_or_default();
        let t = &self.tables;
        let mut out = vec![(files::SCENARIO, self.scenario_toml.clone())];
        if let Some(p) = &self.partition {
            out.push((files::PARTITION, partition_text(&stamp, p)));
        }
        out.push((files::METRICS, csv_text(&stamp, &self.metrics)));
        out.push((files::SERIES, csv_text(&stamp, &self.series)));
        if self.logs.gradients {
            out.push((files::GRADIENTS, csv_text(&stamp, &self.gradients)));
        }
        if self.logs.messages {
            out.push((files::MESSAGES, csv_text(&stamp, &self.messages)));
        }
        if let Some(summary) = &self.summary {
            out.push((files::STALENESS, csv_text(&stamp, &t.staleness)));
            out.push((files::UTILIZATION, csv_text(&stamp, &t.utilization)));
            out.push((files::WAITS, csv_text(&stamp, &t.waits)));
            out.push((files::LINKS, csv_text(&stamp, &t.links)));
            out.push((files::TIMELINE, csv_text(&stamp, &t.timeline)));
            if !t.faults.is_empty() {
                out.push((files::FAULTS, csv_text(&stamp, &t.faults)));
            }
            if !self.checks.is_empty() {
                out.push((files::CHECKS, csv_text(&stamp, &self.checks)));
            }
            out.push((files::SUMMARY, json_text(summary)));
        }
        if let Some(timings) = &self.timings {
            out.push((files::TIMINGS, json_text(timings)));
        }
        out
    }
}

impl RunSink for InMemory {
    fn start(&mut self, run: &RunStart<'_>) -> Result<()> {
        if run.resume.is_some() {
            return Err(Error::Usage(
                "an in-memory run keeps no checkpoint to resume from".into(),
            ));
        }
        *self = InMemory {
            stamp: Some(run.stamp.clone()),
            scenario_toml: run.scenario_toml.to_owned(),
            partition: run.partition.clone(),
            logs: run.logs,
            ..InMemory::default()
        };
        Ok(())
    }

    fn metric(&mut self, row: &MetricRow) -> Result<()> {
        self.metrics.push(row.clone());
        Ok(())
    }

    fn series(&mut self, row: &SeriesRow) -> Result<()> {
        self.series.push(row.clone());
        Ok(())
    }

    fn gradient(&mut self, row: &GradientRow) -> Result<()> {
        self.gradients.push(row.clone());
        Ok(())
    }

    fn message(&mut self, row: &MessageRow) -> Result<()> {
        self.messages.push(row.clone());
        Ok(())
    }

    /// Kept nowhere: an in-memory run cannot be resumed.
    fn checkpoint(&mut self, _at: &CheckpointAt<'_>) -> Result<()> {
        Ok(())
    }

    fn algorithm_done(
        &mut self,
        tables: Tables,
        summary: &Summary,
        timings: &Timings,
    ) -> Result<()> {
        self.tables.extend(tables);
        self.summary = Some(summary.clone());
        self.timings = Some(timings.clone());
        Ok(())
    }

    fn run_data(&mut self) -> Result<RunData> {
        Ok(InMemory::run_data(self))
    }

    fn checks(&mut self, summary: &Summary) -> Result<()> {
        self.checks = summary.checks.clone();
        self.summary = Some(summary.clone());
        Ok(())
    }

    fn finish(&mut self, summary: &Summary) -> Result<()> {
        self.summary = Some(summary.clone());
        Ok(())
    }
}
