//! dasim's writers and readers: the files a simulation run leaves behind, and the plots and
//! report drawn from them.
//!
//! This crate knows nothing about the simulator. It owns the run directory as one typed contract
//! ([`rundir`]): the file names, the row of each CSV file (the same type is written and read
//! back), `summary.json` and `timings.json`, the stamp line and the atomic write. The runner
//! converts the simulator's records into these rows; the plots and the report read them back.
//! A run directory typically holds:
//!
//! | file | written by | content |
//! |------|------------|---------|
//! | `scenario.toml`, `partition.csv`, `metrics.csv`, `series.csv`, `staleness.csv`, `utilization.csv`, `timeline.csv`, ... | [`rundir::RunWriter`] and its siblings, from rows the runner makes | the run-directory contract: [`rundir`] (read back by [`RunData`]) |
//! | `summary.json`, `timings.json` | [`write_json`] | [`Summary`], [`Timings`]: pretty-printed, replaced atomically (written to `summary.json.tmp`, synced, then renamed) |
//! | `<stem>.png`, `<stem>.svg` | [`plot_run`], [`line_plot`] | the run's plots (see [`plot_run`] for the list) |
//! | `report.html` | [`write_report`] | one self-contained page: summary table, plots, scenario |
//! | `checks.csv` | [`rundir::write_csv`] of [`rundir::CheckRow`]s | the verdicts of the scenario's `[[expect]]` claims ([`claims`]) |
//!
//! [`RunData::load`] reads a whole run directory (skipping `#` comment lines, finding columns
//! by name, an empty cell meaning "not measured"). The functions of the `data` module
//! ([`metric_series`], [`staleness_histograms`], [`band`], [`utilization`], ...) turn those rows
//! into the series that are drawn, so plots are tested on numbers, not pixels.
//!
//! Everything written but `timings.json` (the host's speed) is a function of the records only:
//! floats use Rust's shortest round-trip formatting and no wall-clock time or host detail is
//! recorded, so the same records give the same bytes. Text in plots is drawn
//! with DejaVu Sans, embedded in the crate (see `assets/DejaVuSans-LICENSE.txt`),
//! so rendering needs no system fonts.
//!
//! Every failure is an [`Error`] that names the path involved.

mod charts;
pub mod claims;
pub mod columns;
mod data;
mod error;
mod figure;
mod interactive;
mod plot;
mod report;
pub mod rundir;
mod runplots;
mod sweepplot;
mod sweepreport;
pub mod trace;

pub use data::{
    BandPoint, BinStat, GANTT_MAX_ROWS, Lane, LaneSample, LogCurve, Metric, PER_WORKER_BARS,
    StalenessHistogram, WorkerShare, XAxis, band, bin_fractions, bin_stats, metric_series,
    named_series, range_series, sample_lanes, staleness_histograms, timeline_lanes, utilization,
    worker_bin,
};
pub use error::{Error, Result};
pub use plot::{LinePlot, PALETTE, PLOT_HEIGHT, PLOT_WIDTH, Series, line_plot};
pub use report::{ReportOptions, report_html, write_report};
pub use rundir::{
    Activity, AlgorithmSummary, IntStats, MetricRow, RunData, SeriesRow, StalenessRow, Stamp,
    Summary, TimelineRow, Timings, UtilizationRow, write_atomic, write_json,
};
pub use runplots::{plot_run, plot_run_data, plot_run_to, plot_runs};
pub use sweepplot::{SweepLine, SweepPlot, SweepPoint, sweep_plot};
pub use sweepreport::{SweepFigure, SweepReport, sweep_report_html, write_sweep_report};
