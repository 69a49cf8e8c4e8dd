//! The plots of a run directory, and the overlay of several runs.
//!
//! [`plot_run`] reads whatever CSV files a run directory holds ([`RunData`]) and draws every
//! plot whose data is there; a plot whose data is absent is skipped, a malformed file is an
//! error naming the file and line. The same figures are what [`crate::write_report`] embeds.
//!
//! | file stem | drawn from | what |
//! |-----------|------------|------|
//! | `loss`, `accuracy` | `metrics.csv` | held-out loss (log y) and accuracy of the evaluated model against simulated time, all algorithms overlaid |
//! | `loss_epochs`, `accuracy_epochs` | `metrics.csv` | the same against epochs |
//! | `train_loss` | `metrics.csv` | mean minibatch loss between evaluation points (log y) |
//! | `suboptimality` | `metrics.csv` | `f(x) − f*` (log y), when the model knows its optimum |
//! | `replica_loss`, `replica_accuracy` | `metrics.csv` | mean over the worker replicas, with a min–max band |
//! | `consensus` | `metrics.csv` | consensus distance (log y); an algorithm whose distance is exactly 0 is named in the legend, zeros of the others are counted in the note |
//! | `pushsum_weights` | `series.csv` | push-sum weight range over workers (`weight_min`..`weight_max`) |
//! | `dasgd_staleness` | `series.csv` | DASGD's S_avg (solid) and S_max (dashed) |
//! | `series_<name>` | `series.csv` | any other named quantity |
//! | `staleness`, `row_staleness`, `message_age`, `mix_age` | `staleness.csv` | histograms, one panel per algorithm, with count, mean, p99 and max: the global staleness (`staleness`, the one to compare across algorithms), the row staleness, every mixed message's age and the oldest per mixing step |
//! | `steps` | `utilization.csv` | local steps per worker, one bar per algorithm; beyond [`PER_WORKER_BARS`](crate::PER_WORKER_BARS) workers, per bin of consecutive workers (mean, with a min–max whisker) |
//! | `utilization` | `utilization.csv` | each worker's time split into compute, communicate, blocked, idle and down (crashed, with `[[faults]]`), one panel per algorithm; binned like `steps` (mean shares) |
//! | `timeline_<algorithm>` | `timeline.csv` | Gantt chart of the timeline window, one row per worker up to [`GANTT_MAX_ROWS`](crate::GANTT_MAX_ROWS) workers, else that many: the slowest, the fastest and an even sample ([`sample_lanes`](crate::sample_lanes)) |
//!
//! Drawing cost does not grow with the number of workers beyond reading the files: the Gantt
//! chart draws at most [`GANTT_MAX_ROWS`](crate::GANTT_MAX_ROWS) lanes, and the bar charts at
//! most 64 groups of bars per panel ([`worker_bin`](crate::worker_bin)).
//!
//! [`plot_runs`] overlays several run directories (for example one scenario under several
//! seeds): for each algorithm, the mean across runs with a band from the minimum to the
//! maximum, for loss and accuracy against time and epochs (see [`band`](crate::band) for how
//! the runs are aligned).

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::charts::{
    Gantt, GroupedBars, HistogramPanel, HistogramPanels, StackedPanel, StackedPanels,
};
use crate::data::{
    GANTT_MAX_ROWS, Lane, LogCurve, Metric, WorkerShare, XAxis, attach_fault_marks, metric_series,
    named_series, range_series, sample_lanes, staleness_histograms, thousands, timeline_lanes,
    utilization, worker_bin,
};
use crate::figure::{DrawResult, Figure, format_tick, save};
use crate::plot::{Band, Line, LineChart};
use crate::rundir::{MetricRow, RunData};
use crate::{Result, Series};

mod overlay;

use overlay::overlay_figures;

/// Any figure of a run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Chart {
    Lines(LineChart),
    Histograms(HistogramPanels),
    Gantt(Gantt),
    Bars(GroupedBars),
    Stacked(StackedPanels),
}

impl Figure for Chart {
    fn size(&self) -> (u32, u32) {
        match self {
            Chart::Lines(c) => c.size(),
            Chart::Histograms(c) => c.size(),
            Chart::Gantt(c) => c.size(),
            Chart::Bars(c) => c.size(),
            Chart::Stacked(c) => c.size(),
        }
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        match self {
            Chart::Lines(c) => c.draw(root),
            Chart::Histograms(c) => c.draw(root),
            Chart::Gantt(c) => c.draw(root),
            Chart::Bars(c) => c.draw(root),
            Chart::Stacked(c) => c.draw(root),
        }
    }
}

/// A figure and the file stem it is saved under.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NamedFigure {
    /// File name without extension, e.g. `loss`.
    pub stem: String,
    /// A short heading, for the report.
    pub heading: String,
    /// The figure.
    pub chart: Chart,
}

/// Draws every plot of the run directory `run_dir` into it (PNG and SVG) and returns the
/// paths written, PNG before SVG for each plot.
///
/// Fails when `run_dir` is not a run directory or one of its files is malformed (the error
/// names the file and line), or when a plot cannot be written.
pub fn plot_run(run_dir: &Path) -> Result<Vec<PathBuf>> {
    plot_run_to(run_dir, run_dir)
}

/// [`plot_run`], writing the plots to `out_dir` (created if needed) instead.
pub fn plot_run_to(run_dir: &Path, out_dir: &Path) -> Result<Vec<PathBuf>> {
    plot_run_data(&RunData::load(run_dir)?, out_dir)
}

/// The plots of [`plot_run`] drawn from a run directory's data already in memory
/// ([`RunData::with_tables`]: `dasim run`, which has just written the tables), to `out_dir`.
pub fn plot_run_data(data: &RunData, out_dir: &Path) -> Result<Vec<PathBuf>> {
    save_all(out_dir, &run_figures(data))
}

/// Overlays the run directories `run_dirs` into `out_dir`: for each algorithm, the mean across
/// the runs that have it and a band from their minimum to their maximum, for held-out loss and
/// accuracy against simulated time (`loss`, `accuracy`) and against epochs (`loss_epochs`,
/// `accuracy_epochs`). Returns the paths written.
///
/// Runs are aligned on the evaluation times they all have, without interpolation (see
/// [`band`](crate::band)); against epochs, each point sits at the mean of the runs' epochs at
/// that time. Fails when a directory is not a run directory, a file is malformed, or an
/// algorithm present in several runs has no evaluation time common to them.
pub fn plot_runs(run_dirs: &[PathBuf], out_dir: &Path) -> Result<Vec<PathBuf>> {
    let runs = run_dirs
        .iter()
        .map(RunData::load)
        .collect::<Result<Vec<_>>>()?;
    save_all(out_dir, &overlay_figures(&runs)?)
}

/// Draws and writes every figure, spread over the threads of the current rayon pool: each
/// figure's bytes depend on its data alone, so they are the same whatever the threads. (At a
/// thousand workers, drawing a dozen figures one after another was a tenth of the run.)
fn save_all(out_dir: &Path, figures: &[NamedFigure]) -> Result<Vec<PathBuf>> {
    use rayon::prelude::*;
    let saved = figures
        .par_iter()
        .map(|f| save(out_dir, &f.stem, &f.chart))
        .collect::<Vec<_>>();
    let mut written = Vec::with_capacity(2 * figures.len());
    for s in saved {
        let (png, svg) = s?;
        written.push(png);
        written.push(svg);
    }
    Ok(written)
}

const TIME_LABEL: &str = "simulated time (s)";
const EPOCH_LABEL: &str = "epochs (passes over the training set)";
const EVAL_NOTE: &str = "held-out split; evaluated model: the replicas' average, or the algorithm's own (a server's, DiLoCo's global one, push-sum's de-biased average)";

/// The plots of one run, in the order the report shows them.
pub(crate) fn run_figures(data: &RunData) -> Vec<NamedFigure> {
    let name = data.scenario_name();
    let mut out = convergence_figures(data, &name);
    out.extend(replica_figures(data, &name));
    out.extend(consensus_figure(data, &name));
    out.extend(series_figures(data, &name));
    out.extend(staleness_figures(data, &name));
    let shares = worker_shares(data);
    if !shares.is_empty() {
        out.push(steps_figure(data, &name, &shares));
        out.push(utilization_figure(data, &name, &shares));
    }
    out.extend(timeline_figures(data, &name, &shares));
    mark_identical(&mut out);
    out
}

/// A [`NamedFigure`] from its stem, heading and chart.
fn named(stem: &str, heading: &str, chart: Chart) -> NamedFigure {
    NamedFigure {
        stem: stem.to_owned(),
        heading: heading.to_owned(),
        chart,
    }
}

/// Convergence: held-out loss and accuracy against time and epochs, then the training loss
/// and the suboptimality against time.
fn convergence_figures(data: &RunData, name: &str) -> Vec<NamedFigure> {
    let algs = &data.algorithms;
    let mut out = Vec::new();
    let percent = |series: Vec<Series>| -> Vec<Series> {
        series
            .into_iter()
            .map(|s| Series::new(s.label, s.points.into_iter().map(|(x, y)| (x, y * 100.0))))
            .collect()
    };
    for (x, suffix, x_label) in [
        (XAxis::Time, "", TIME_LABEL),
        (XAxis::Epoch, "_epochs", EPOCH_LABEL),
    ] {
        let against = if x == XAxis::Time { "time" } else { "epochs" };
        let loss = series_of(data, algs, x, Metric::Loss);
        if has_points(&loss) {
            out.push(named(
                &format!("loss{suffix}"),
                &format!("Held-out loss against {against}"),
                Chart::Lines(lines_chart(
                    format!("{name}: held-out loss"),
                    EVAL_NOTE,
                    x_label,
                    "test loss",
                    true,
                    &loss,
                )),
            ));
        }
        let accuracy = percent(series_of(data, algs, x, Metric::Accuracy));
        if has_points(&accuracy) {
            out.push(named(
                &format!("accuracy{suffix}"),
                &format!("Held-out accuracy against {against}"),
                Chart::Lines(lines_chart(
                    format!("{name}: held-out accuracy"),
                    EVAL_NOTE,
                    x_label,
                    "test accuracy (%)",
                    false,
                    &accuracy,
                )),
            ));
        }
    }
    let train = series_of(data, algs, XAxis::Time, Metric::TrainLoss);
    if has_points(&train) {
        out.push(named(
            "train_loss",
            "Training loss",
            Chart::Lines(lines_chart(
                format!("{name}: training loss"),
                "mean loss of the minibatches whose gradients were computed since the previous point",
                TIME_LABEL,
                "train loss",
                true,
                &train,
            )),
        ));
    }
    let subopt = series_of(data, algs, XAxis::Time, Metric::Suboptimality);
    if has_points(&subopt) {
        out.push(named(
            "suboptimality",
            "Suboptimality",
            Chart::Lines(lines_chart(
                format!("{name}: suboptimality"),
                "f(x) − f* of the training objective at the evaluated model",
                TIME_LABEL,
                "f(x) − f*",
                true,
                &subopt,
            )),
        ));
    }
    out
}

/// Held-out loss and accuracy across the worker replicas: the mean, with a min–max band.
fn replica_figures(data: &RunData, name: &str) -> Vec<NamedFigure> {
    let algs = &data.algorithms;
    let mut out = Vec::new();
    for (stem, heading, metric, min, max, y_label, scale, log) in [
        (
            "replica_loss",
            "Held-out loss across replicas",
            Metric::ReplicaLossMean,
            (|r: &MetricRow| r.replica_loss_min) as fn(&MetricRow) -> Option<f64>,
            (|r: &MetricRow| r.replica_loss_max) as fn(&MetricRow) -> Option<f64>,
            "test loss of a replica",
            1.0,
            true,
        ),
        (
            "replica_accuracy",
            "Held-out accuracy across replicas",
            Metric::ReplicaAccuracyMean,
            |r: &MetricRow| r.replica_accuracy_min,
            |r: &MetricRow| r.replica_accuracy_max,
            "test accuracy of a replica (%)",
            100.0,
            false,
        ),
    ] {
        let mut chart = LineChart {
            title: format!("{name}: {}", heading.to_lowercase()),
            note: "line: mean over the worker replicas; band: min to max".into(),
            x_label: TIME_LABEL.into(),
            y_label: y_label.into(),
            log_y: log,
            ..LineChart::default()
        };
        for (color, alg) in algs.iter().enumerate() {
            let rows = data.metrics.iter().filter(|r| &r.algorithm == alg);
            let mean: Vec<(f64, f64)> = rows
                .clone()
                .filter_map(|r| Some((r.time_s, metric.of(r)? * scale)))
                .collect();
            let range: Vec<(f64, f64, f64)> = rows
                .filter_map(|r| Some((r.time_s, min(r)? * scale, max(r)? * scale)))
                .collect();
            if mean.is_empty() && range.is_empty() {
                continue;
            }
            chart.lines.push(Line {
                label: data.legend(alg),
                points: mean,
                color,
                dashed: false,
            });
            chart.bands.push(Band {
                color,
                points: range,
            });
        }
        if !chart.lines.is_empty() {
            out.push(named(stem, heading, Chart::Lines(chart)));
        }
    }
    out
}

/// The consensus distance against time, when some algorithm has one.
fn consensus_figure(data: &RunData, name: &str) -> Option<NamedFigure> {
    let consensus = series_of(data, &data.algorithms, XAxis::Time, Metric::Consensus);
    has_points(&consensus).then(|| {
        named(
            "consensus",
            "Consensus distance",
            Chart::Lines(consensus_chart(name, &consensus)),
        )
    })
}

/// The staleness histograms (global, row, message age, oldest message per mixing step), one
/// panel per algorithm.
fn staleness_figures(data: &RunData, name: &str) -> Vec<NamedFigure> {
    let mut out = Vec::new();
    for (measure, stem, heading, x_label, y_label, note) in [
        (
            "global",
            "staleness",
            "Global staleness of applied gradients",
            "global staleness (global iterations between a gradient's read and its application)",
            "applications",
            "global staleness: gradients applied anywhere in the cluster (each counted once, at its first application) between the read a gradient was computed on and its application; summed over workers",
        ),
        (
            "row",
            "row_staleness",
            "Row staleness of applied gradients",
            "row staleness (updates of the target row between a gradient's read and its application)",
            "applications",
            "row staleness: updates the target row received between the read a gradient was computed on and its application (not comparable across algorithms); summed over workers",
        ),
        (
            "message_age",
            "message_age",
            "Age of mixed messages",
            "message age (iterations)",
            "messages",
            "age in iterations of each mixed message, counted at the receiver; summed over workers",
        ),
        (
            "mix_age",
            "mix_age",
            "Oldest message per mixing step",
            "age of the oldest message mixed in (receiver's iterations)",
            "steps",
            "at each step that mixed messages in, the age in the receiver's iterations of the oldest one; summed over workers",
        ),
    ] {
        let histograms = staleness_histograms(&data.staleness, &data.algorithms, measure);
        if histograms.is_empty() {
            continue;
        }
        let panels = histograms
            .iter()
            .map(|h| {
                let s = h.stats().expect("histograms are not empty");
                HistogramPanel {
                    caption: format!(
                        "{}: {} {}, mean {:.2}, p99 {}, max {}",
                        data.legend(&h.algorithm),
                        s.count,
                        y_label,
                        s.mean,
                        s.p99,
                        s.max
                    ),
                    color: data.color_of(&h.algorithm),
                    bins: h.bins.clone(),
                }
            })
            .collect();
        out.push(named(
            stem,
            heading,
            Chart::Histograms(HistogramPanels {
                title: format!("{name}: {}", heading.to_lowercase()),
                note: note.into(),
                x_label: x_label.into(),
                y_label: y_label.into(),
                panels,
            }),
        ));
    }
    out
}

/// One algorithm's per-worker shares of `utilization.csv`: its colour, its name, its workers.
type AlgorithmShares<'a> = (usize, &'a String, Vec<WorkerShare>);

/// The per-worker shares of every algorithm that has some, in the order of the algorithms.
fn worker_shares(data: &RunData) -> Vec<AlgorithmShares<'_>> {
    data.algorithms
        .iter()
        .enumerate()
        .map(|(i, a)| (i, a, utilization(&data.utilization, a)))
        .filter(|(_, _, s)| !s.is_empty())
        .collect()
}

/// Local steps per worker, one bar per algorithm, binned beyond a few workers.
fn steps_figure(data: &RunData, name: &str, shares: &[AlgorithmShares<'_>]) -> NamedFigure {
    let mut groups: Vec<u64> = shares
        .iter()
        .flat_map(|(_, _, s)| s.iter().map(|w| w.worker))
        .collect();
    groups.sort_unstable();
    groups.dedup();
    // Each share list is sorted by worker: a binary search per worker, not a scan.
    let series: Vec<(String, usize, Vec<f64>)> = shares
        .iter()
        .map(|(color, alg, s)| {
            let values = groups
                .iter()
                .map(|g| {
                    s.binary_search_by_key(g, |w| w.worker)
                        .map_or(f64::NAN, |i| s[i].steps as f64)
                })
                .collect();
            (data.legend(alg), *color, values)
        })
        .collect();
    let bin = worker_bin(groups.len(), series.len());
    let mut note = String::from("gradients each worker computed and applied over the whole run");
    if bin > 1 {
        note.push_str(&format!(
            "; {} workers in {} bars of {bin} consecutive workers: bar = their mean, whisker = their min to max",
            thousands(groups.len() as u64),
            groups.len().div_ceil(bin),
        ));
    }
    named(
        "steps",
        "Steps per worker",
        Chart::Bars(GroupedBars {
            title: format!("{name}: local steps per worker"),
            note,
            x_label: "worker".into(),
            y_label: "steps".into(),
            groups,
            series,
            bin,
        }),
    )
}

/// Where each worker's time went (compute, communicate, blocked, idle, down), one panel per
/// algorithm.
fn utilization_figure(data: &RunData, name: &str, shares: &[AlgorithmShares<'_>]) -> NamedFigure {
    let panels = shares
        .iter()
        .map(|(_, alg, s)| {
            let mean = |k: usize| s.iter().map(|w| w.fractions[k]).sum::<f64>() / s.len() as f64;
            // Down time is named only where a worker was down (a run with crashes).
            let down = if s.iter().any(|w| w.fractions[4] > 0.0) {
                format!(", down {:.1}%", mean(4) * 100.0)
            } else {
                String::new()
            };
            StackedPanel {
                caption: format!(
                    "{}: compute {:.1}%, communicate {:.1}%, blocked {:.1}%, idle {:.1}%{down} (mean over workers)",
                    data.legend(alg),
                    mean(0) * 100.0,
                    mean(1) * 100.0,
                    mean(2) * 100.0,
                    mean(3) * 100.0
                ),
                workers: s.iter().map(|w| w.worker).collect(),
                fractions: s.iter().map(|w| w.fractions).collect(),
                bin: worker_bin(s.len(), 1),
            }
        })
        .collect::<Vec<StackedPanel>>();
    let mut note = String::from(
        "blocked: waiting for a peer; communicate: sending or receiving and nothing else",
    );
    if let Some(widest) = panels
        .iter()
        .filter(|p| p.bin > 1)
        .max_by_key(|p| p.workers.len())
    {
        note.push_str(&format!(
            "; {} workers in {} bars of {} consecutive workers, each bar their mean shares",
            thousands(widest.workers.len() as u64),
            widest.workers.len().div_ceil(widest.bin),
            widest.bin,
        ));
    }
    named(
        "utilization",
        "Where each worker's time went",
        Chart::Stacked(StackedPanels {
            title: format!("{name}: where each worker's time went"),
            note,
            panels,
        }),
    )
}

/// One worker-timeline Gantt chart per algorithm with a timeline, its rows ranked by the
/// algorithm's `shares` when it has them.
fn timeline_figures(
    data: &RunData,
    name: &str,
    shares: &[AlgorithmShares<'_>],
) -> Vec<NamedFigure> {
    let mut out = Vec::new();
    let mut stems: Vec<String> = Vec::new();
    for alg in &data.algorithms {
        let mut lanes = timeline_lanes(&data.timeline, alg);
        if lanes.is_empty() {
            continue;
        }
        attach_fault_marks(&mut lanes, &data.faults, alg);
        let mut stem = format!("timeline_{}", slug(alg));
        if stems.contains(&stem) {
            stem = format!("{stem}_{}", data.color_of(alg));
        }
        stems.push(stem.clone());
        let steps = shares
            .iter()
            .find(|(_, a, _)| *a == alg)
            .map(|(_, _, s)| s.as_slice());
        let mut gantt = gantt_chart(
            format!("{name}: worker timeline, {}", data.legend(alg)),
            lanes,
            steps,
            GANTT_MAX_ROWS,
        );
        if let Some(f) = data.run_summary(alg).and_then(|r| r.faults.as_ref()) {
            gantt.note.push_str(&fault_note(f));
        }
        let marks: usize = gantt.lanes.iter().map(|l| l.marks.len()).sum();
        if marks > crate::charts::MAX_DRAWN_MARKS {
            gantt.note.push_str(&format!(
                "; one fault mark in {} of the {} on the rows shown is drawn",
                marks.div_ceil(crate::charts::MAX_DRAWN_MARKS),
                thousands(marks as u64)
            ));
        }
        out.push(NamedFigure {
            stem,
            heading: format!("Worker timeline: {}", data.legend(alg)),
            chart: Chart::Gantt(gantt),
        });
    }
    out
}

/// What the faults of a run did, for the note of its Gantt chart (`summary.json`'s `faults`):
/// crashes and rejoins (the down intervals are drawn), then the messages lost at random, on
/// down links and at down workers (over the whole run, not only the window).
pub(crate) fn fault_note(f: &crate::rundir::FaultSummary) -> String {
    let counted = |n: u64, one: &str, many: &str| {
        format!("{} {}", thousands(n), if n == 1 { one } else { many })
    };
    format!(
        "; faults over the run: {}, {}; messages lost {} at random, {} on down links, {} \
         dropped at down workers",
        counted(f.crashes, "crash", "crashes"),
        counted(f.rejoins, "rejoin", "rejoins"),
        thousands(f.messages_lost),
        thousands(f.messages_lost_link_down),
        thousands(f.messages_dropped_down),
    )
}

/// The Gantt chart of one algorithm's `lanes`: every worker when there are at most `max_rows`,
/// else `max_rows` of them ([`sample_lanes`]), ranked by their local steps over the run and,
/// at equal steps, their compute time per step (`utilization.csv`, when `shares` has every
/// worker), or else by the same measures inside the window. The x axis is the window of all
/// workers; the note says which workers are shown, and the rows of the slowest and fastest
/// are tagged `slow` and `fast`.
pub(crate) fn gantt_chart(
    title: String,
    lanes: Vec<Lane>,
    shares: Option<&[WorkerShare]>,
    max_rows: usize,
) -> Gantt {
    let intervals = || lanes.iter().flat_map(|l| &l.intervals);
    let start = intervals().map(|i| i.1).fold(f64::INFINITY, f64::min);
    let end = intervals().map(|i| i.2).fold(f64::NEG_INFINITY, f64::max);
    let shares = shares.unwrap_or_default();
    // (steps, compute seconds): over the run, or inside the window.
    let run_speed = |lane: &Lane| {
        shares
            .binary_search_by_key(&lane.worker, |w| w.worker)
            .ok()
            .map(|i| (shares[i].steps, shares[i].seconds[0]))
    };
    let by_run = lanes.iter().all(|l| run_speed(l).is_some());
    let sample = sample_lanes(
        lanes,
        |lane| {
            let (steps, compute_s) = run_speed(lane).filter(|_| by_run).unwrap_or_else(|| {
                let computes = lane
                    .intervals
                    .iter()
                    .filter(|i| i.0 == crate::rundir::Activity::Compute);
                (
                    computes.clone().count() as u64,
                    computes.map(|i| i.2 - i.1).sum(),
                )
            });
            (steps, compute_s / steps.max(1) as f64)
        },
        max_rows,
    );
    let by = if by_run {
        "local steps over the run, then compute time per step"
    } else {
        "steps in the window, then compute time per step"
    };
    let note = format!(
        "intervals in the timeline window, {} to {} s of simulated time; {}",
        format_tick(start),
        format_tick(end),
        sample.describe(by)
    );
    let tags = sample
        .slowest
        .iter()
        .map(|&w| (w, "slow".to_owned()))
        .chain(sample.fastest.iter().map(|&w| (w, "fast".to_owned())))
        .collect();
    Gantt {
        title,
        note,
        lanes: sample.lanes,
        window: (start < end).then_some((start, end)),
        tags,
    }
}

/// Figures from `series.csv`.
fn series_figures(data: &RunData, name: &str) -> Vec<NamedFigure> {
    let algs = &data.algorithms;
    let mut names: Vec<&str> = Vec::new();
    for r in &data.series {
        if !names.contains(&r.name.as_str()) {
            names.push(&r.name);
        }
    }
    let mut out = Vec::new();
    let has = |n: &str| names.contains(&n);

    if has("weight_min") && has("weight_max") {
        let mut chart = LineChart {
            title: format!("{name}: push-sum weights"),
            note: "range of the push-sum weights w_i over workers (band); min solid, max dashed"
                .into(),
            x_label: TIME_LABEL.into(),
            y_label: "push-sum weight w_i".into(),
            log_y: true,
            ..LineChart::default()
        };
        for (color, alg) in algs.iter().enumerate() {
            let range = range_series(&data.series, alg, "weight_min", "weight_max");
            if range.is_empty() {
                continue;
            }
            chart.lines.push(Line {
                label: format!("{}: min", data.legend(alg)),
                points: range.iter().map(|&(t, lo, _)| (t, lo)).collect(),
                color,
                dashed: false,
            });
            chart.lines.push(Line {
                label: format!("{}: max", data.legend(alg)),
                points: range.iter().map(|&(t, _, hi)| (t, hi)).collect(),
                color,
                dashed: true,
            });
            chart.bands.push(Band {
                color,
                points: range,
            });
        }
        out.push(NamedFigure {
            stem: "pushsum_weights".into(),
            heading: "Push-sum weights".into(),
            chart: Chart::Lines(chart),
        });
    }
    if has("staleness_avg") || has("staleness_max") {
        let mut chart = LineChart {
            title: format!("{name}: DASGD staleness between models"),
            note: "S_avg (solid) and S_max (dashed): gradient-set differences between the models"
                .into(),
            x_label: TIME_LABEL.into(),
            y_label: "staleness (gradients)".into(),
            ..LineChart::default()
        };
        let avg = relabel(data, named_series(&data.series, algs, "staleness_avg"));
        let max = relabel(data, named_series(&data.series, algs, "staleness_max"));
        for (color, (avg, max)) in avg.into_iter().zip(max).enumerate() {
            for (s, label, dashed) in [(avg, "S_avg", false), (max, "S_max", true)] {
                if !s.points.is_empty() {
                    chart.lines.push(Line {
                        label: format!("{}: {label}", s.label),
                        points: s.points,
                        color,
                        dashed,
                    });
                }
            }
        }
        out.push(NamedFigure {
            stem: "dasgd_staleness".into(),
            heading: "DASGD staleness between models".into(),
            chart: Chart::Lines(chart),
        });
    }
    let known = ["weight_min", "weight_max", "staleness_avg", "staleness_max"];
    for n in names.iter().filter(|n| !known.contains(n)) {
        let series = relabel(data, named_series(&data.series, algs, n));
        if has_points(&series) {
            out.push(NamedFigure {
                stem: format!("series_{}", slug(n)),
                heading: format!("Series `{n}`"),
                chart: Chart::Lines(lines_chart(
                    format!("{name}: {n}"),
                    "from series.csv",
                    TIME_LABEL,
                    n,
                    false,
                    &series,
                )),
            });
        }
    }
    out
}

/// The consensus chart: positive points on a log axis; an algorithm whose distance is exactly 0
/// throughout gets a legend entry saying so, zeros of the others are counted in the note.
fn consensus_chart(name: &str, series: &[Series]) -> LineChart {
    let curves: Vec<LogCurve> = series.iter().map(LogCurve::new).collect();
    let any_positive = curves.iter().any(|c| !c.series.points.is_empty());
    let mut note =
        String::from("(1/n) Σ_i ‖x_i − x_mean‖² over the worker replicas (push-sum: de-biased)");
    let mut chart = LineChart {
        title: format!("{name}: consensus distance"),
        x_label: TIME_LABEL.into(),
        y_label: "consensus distance (squared norm)".into(),
        log_y: any_positive,
        ..LineChart::default()
    };
    let mut partial = Vec::new();
    let mut only_first = true;
    for (color, (curve, raw)) in curves.iter().zip(series).enumerate() {
        if curve.measured == 0 {
            continue;
        }
        if curve.all_zero() {
            chart.lines.push(Line {
                label: format!("{}: exactly 0 (replicas equal)", raw.label),
                points: if any_positive {
                    Vec::new()
                } else {
                    raw.points.clone()
                },
                color,
                dashed: false,
            });
        } else {
            if curve.zeros > 0 {
                partial.push(format!(
                    "{} {} of {}",
                    raw.label, curve.zeros, curve.measured
                ));
                let first = raw
                    .points
                    .iter()
                    .find(|p| p.0.is_finite() && p.1.is_finite());
                only_first &= curve.zeros == 1 && first.is_some_and(|p| p.1 == 0.0);
            }
            chart.lines.push(Line {
                label: raw.label.clone(),
                points: curve.series.points.clone(),
                color,
                dashed: false,
            });
        }
    }
    if !partial.is_empty() && only_first {
        note.push_str("; the first point, 0 (replicas start equal), is not drawn on the log axis");
    } else if !partial.is_empty() {
        note.push_str("; points equal to 0 are not drawn on the log axis: ");
        note.push_str(&partial.join(", "));
    }
    chart.note = note;
    chart
}

/// Makes a line that lies exactly on an earlier one visible: it is drawn dashed (the earlier
/// line shows through the gaps) and its legend says `(same as <earlier>)`. Two algorithms can
/// give identical curves (e.g. a parameter server with one shard or four: sharding does not
/// change the arithmetic), and the later line would otherwise hide the earlier completely.
fn mark_identical(figures: &mut [NamedFigure]) {
    for figure in figures {
        let Chart::Lines(chart) = &mut figure.chart else {
            continue;
        };
        for i in 1..chart.lines.len() {
            let (earlier, rest) = chart.lines.split_at_mut(i);
            let line = &mut rest[0];
            if line.points.len() < 2 {
                continue;
            }
            if let Some(twin) = earlier.iter().find(|e| e.points == line.points) {
                line.dashed = true;
                if !line.label.is_empty() && !twin.label.is_empty() {
                    line.label = format!("{} (same as {})", line.label, twin.label);
                }
            }
        }
    }
}

/// A plain line chart of per-algorithm series (colour = position, empty series skipped).
fn lines_chart(
    title: String,
    note: &str,
    x_label: &str,
    y_label: &str,
    log_y: bool,
    series: &[Series],
) -> LineChart {
    LineChart {
        title,
        note: note.into(),
        x_label: x_label.into(),
        y_label: y_label.into(),
        log_y,
        lines: series
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.points.is_empty())
            .map(|(color, s)| Line {
                label: s.label.clone(),
                points: s.points.clone(),
                color,
                dashed: false,
            })
            .collect(),
        bands: Vec::new(),
    }
}

/// [`metric_series`] with the legend names of [`RunData::legend`].
fn series_of(data: &RunData, algs: &[String], x: XAxis, metric: Metric) -> Vec<Series> {
    relabel(data, metric_series(&data.metrics, algs, x, metric))
}

/// Replaces each series' label (an algorithm) by its legend name.
fn relabel(data: &RunData, series: Vec<Series>) -> Vec<Series> {
    series
        .into_iter()
        .map(|s| Series::new(data.legend(&s.label), s.points))
        .collect()
}

fn has_points(series: &[Series]) -> bool {
    series
        .iter()
        .any(|s| s.points.iter().any(|(x, y)| x.is_finite() && y.is_finite()))
}

/// A file-name-safe form of a label: lower-case ASCII letters and digits, other runs of
/// characters replaced by one `-`.
pub(crate) fn slug(label: &str) -> String {
    let mut out = String::new();
    for c in label.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let out = out.trim_matches('-').to_owned();
    if out.is_empty() {
        "algorithm".into()
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_on_top_of_another_is_dashed_and_named() {
        let line = |label: &str, points: Vec<(f64, f64)>| Line {
            label: label.into(),
            points,
            ..Line::default()
        };
        let same = vec![(0.0, 1.0), (1.0, 0.5)];
        let mut figures = vec![NamedFigure {
            stem: "loss".into(),
            heading: String::new(),
            chart: Chart::Lines(LineChart {
                lines: vec![
                    line("a", same.clone()),
                    line("b", vec![(0.0, 1.0), (1.0, 0.25)]),
                    line("c", same),
                ],
                ..LineChart::default()
            }),
        }];
        mark_identical(&mut figures);
        let Chart::Lines(chart) = &figures[0].chart else {
            unreachable!()
        };
        let marks: Vec<(&str, bool)> = chart
            .lines
            .iter()
            .map(|l| (l.label.as_str(), l.dashed))
            .collect();
        assert_eq!(marks, [("a", false), ("b", false), ("c (same as a)", true)]);
    }

    fn lanes(n: u64) -> Vec<Lane> {
        (0..n)
            .map(|worker| Lane {
                worker,
                intervals: vec![
                    (crate::rundir::Activity::Compute, 0.0, 0.5),
                    (
                        crate::rundir::Activity::Blocked,
                        0.5,
                        1.0 + worker as f64 * 1e-3,
                    ),
                ],
                marks: Vec::new(),
            })
            .collect()
    }

    fn shares(n: u64, steps: impl Fn(u64) -> u64) -> Vec<WorkerShare> {
        (0..n)
            .map(|worker| WorkerShare {
                worker,
                steps: steps(worker),
                seconds: [0.5, 0.0, 0.5, 0.0, 0.0],
                fractions: [0.5, 0.0, 0.5, 0.0, 0.0],
            })
            .collect()
    }

    #[test]
    fn a_gantt_of_1024_workers_shows_the_bound_with_the_extremes() {
        // Worker 900 is the slowest, worker 17 the fastest.
        let steps = |w: u64| match w {
            900 => 5,
            17 => 80,
            w => 40 + w % 5,
        };
        let gantt = gantt_chart(
            "t".into(),
            lanes(1024),
            Some(&shares(1024, steps)),
            GANTT_MAX_ROWS,
        );
        assert!(gantt.lanes.len() <= GANTT_MAX_ROWS, "{}", gantt.lanes.len());
        let shown: Vec<u64> = gantt.lanes.iter().map(|l| l.worker).collect();
        assert!(shown.contains(&900) && shown.contains(&17), "{shown:?}");
        assert!(
            gantt
                .note
                .contains("32 of 1,024 workers: the 4 slowest (900, "),
            "{}",
            gantt.note
        );
        assert!(gantt.note.contains("the 4 fastest (17, "), "{}", gantt.note);
        assert!(
            gantt.note.contains("by local steps over the run"),
            "{}",
            gantt.note
        );
        assert!(gantt.tags.contains(&(900, "slow".into())));
        assert!(gantt.tags.contains(&(17, "fast".into())));
        // The x axis is the window of every worker, not only of those shown.
        assert_eq!(gantt.window, Some((0.0, 1.0 + 1023.0 * 1e-3)));
        // Drawn at most the bound's rows tall.
        let (_, height) = gantt.size();
        let eight = gantt_chart("t".into(), lanes(8), None, GANTT_MAX_ROWS);
        assert!(height <= 1100, "{height}");
        assert!(eight.size().1 <= height);
        // DASIM_PLOT_PREVIEW=DIR writes the chart to DIR/gantt_1024.png, to look at it.
        if let Ok(dir) = std::env::var("DASIM_PLOT_PREVIEW") {
            crate::figure::save(Path::new(&dir), "gantt_1024", &gantt).unwrap();
        }
    }

    #[test]
    fn a_gantt_of_8_workers_shows_all_8() {
        let gantt = gantt_chart(
            "t".into(),
            lanes(8),
            Some(&shares(8, |w| 10 + w)),
            GANTT_MAX_ROWS,
        );
        let shown: Vec<u64> = gantt.lanes.iter().map(|l| l.worker).collect();
        assert_eq!(shown, [0, 1, 2, 3, 4, 5, 6, 7]);
        assert!(
            gantt.note.ends_with("; one row per worker"),
            "{}",
            gantt.note
        );
        assert!(gantt.tags.is_empty());
    }

    #[test]
    fn without_utilization_the_gantt_ranks_by_steps_in_the_window() {
        let mut lanes = lanes(64);
        // Worker 3 computed three times in the window, the others once.
        lanes[3].intervals = vec![
            (crate::rundir::Activity::Compute, 0.0, 0.2),
            (crate::rundir::Activity::Compute, 0.2, 0.4),
            (crate::rundir::Activity::Compute, 0.4, 0.6),
        ];
        let gantt = gantt_chart("t".into(), lanes, None, 16);
        assert_eq!(gantt.lanes.len(), 16);
        assert_eq!(gantt.tags, [(3, "fast".to_owned())]);
        assert!(
            gantt
                .note
                .contains("16 of 64 workers: the fastest (3) by steps in the window"),
            "{}",
            gantt.note
        );
    }

    #[test]
    fn slugs_are_file_names() {
        assert_eq!(slug("allreduce"), "allreduce");
        assert_eq!(slug("Local SGD, h=4"), "local-sgd-h-4");
        assert_eq!(slug("../x"), "x");
        assert_eq!(slug("é"), "algorithm");
    }
}
