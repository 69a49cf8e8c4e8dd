//! The overlay of several runs ([`plot_runs`](crate::plot_runs)): for each algorithm, the mean
//! across the runs with a band from their minimum to their maximum, for the held-out loss and
//! accuracy against simulated time and against epochs.

use crate::data::{BandPoint, Metric, band};
use crate::plot::{Band, Line, LineChart};
use crate::rundir::{MetricRow, RunData};
use crate::{Error, Result};

use super::{Chart, EPOCH_LABEL, NamedFigure, TIME_LABEL, mark_identical};

/// A metric the overlay draws, and how it is drawn.
struct Overlaid {
    /// The column of `metrics.csv`.
    metric: Metric,
    /// The file stem of its figure against time (`<stem>_epochs` against epochs).
    stem: &'static str,
    /// What it is, in words, for the title and the heading.
    what: &'static str,
    /// The label of the y axis.
    y_label: &'static str,
    /// The factor the values are drawn at (100 for a percentage).
    scale: f64,
    /// Whether the y axis is logarithmic.
    log_y: bool,
}

/// The metrics of the overlay, in the order their figures come: the held-out loss (log y),
/// then the held-out accuracy in percent.
const OVERLAID: [Overlaid; 2] = [
    Overlaid {
        metric: Metric::Loss,
        stem: "loss",
        what: "held-out loss",
        y_label: "test loss",
        scale: 1.0,
        log_y: true,
    },
    Overlaid {
        metric: Metric::Accuracy,
        stem: "accuracy",
        what: "held-out accuracy",
        y_label: "test accuracy (%)",
        scale: 100.0,
        log_y: false,
    },
];

/// The overlay of several runs: loss and accuracy bands against time and epochs.
pub(crate) fn overlay_figures(runs: &[RunData]) -> Result<Vec<NamedFigure>> {
    let algorithms = algorithms_of(runs);
    let name = scenario_names(runs);
    let seeds = seeds_note(runs);
    let mut out = Vec::new();
    for overlaid in &OVERLAID {
        let (by_time, by_epoch) = overlay_charts(runs, &algorithms, overlaid, &name, &seeds)?;
        let what = overlaid.what;
        let heading = format!("{}{} across runs", what[..1].to_uppercase(), &what[1..]);
        if by_time.lines.iter().any(|l| !l.points.is_empty()) {
            out.push(NamedFigure {
                stem: overlaid.stem.into(),
                heading: format!("{heading}, against time"),
                chart: Chart::Lines(by_time),
            });
        }
        if by_epoch.lines.iter().any(|l| !l.points.is_empty()) {
            out.push(NamedFigure {
                stem: format!("{}_epochs", overlaid.stem),
                heading: format!("{heading}, against epochs"),
                chart: Chart::Lines(by_epoch),
            });
        }
    }
    mark_identical(&mut out);
    Ok(out)
}

/// Every algorithm of the runs, once each, in the order they first appear.
fn algorithms_of(runs: &[RunData]) -> Vec<String> {
    let mut algorithms: Vec<String> = Vec::new();
    for run in runs {
        for a in &run.algorithms {
            if !algorithms.contains(a) {
                algorithms.push(a.clone());
            }
        }
    }
    algorithms
}

/// The runs' scenario names joined by ` / `, a name that repeats the one before it left out.
fn scenario_names(runs: &[RunData]) -> String {
    let mut names: Vec<String> = runs.iter().map(RunData::scenario_name).collect();
    names.dedup();
    names.join(" / ")
}

/// ` (seeds 1, 2, …)` when every run has a summary to take its seed from, else nothing.
fn seeds_note(runs: &[RunData]) -> String {
    let seeds: Vec<String> = runs
        .iter()
        .filter_map(|r| r.summary.as_ref().map(|s| s.seed.to_string()))
        .collect();
    if seeds.len() == runs.len() {
        format!(" (seeds {})", seeds.join(", "))
    } else {
        String::new()
    }
}

/// The two charts of one metric, against simulated time and against epochs: for each
/// algorithm that some run measured it for, a line (the mean over those runs) and a band (their
/// minimum to their maximum). `name` is the scenarios' ([`scenario_names`]), `seeds` says
/// which seeds ran ([`seeds_note`]). Fails when several runs have the algorithm but no
/// evaluation time in common.
fn overlay_charts(
    runs: &[RunData],
    algorithms: &[String],
    overlaid: &Overlaid,
    name: &str,
    seeds: &str,
) -> Result<(LineChart, LineChart)> {
    let mut by_time = LineChart {
        title: format!("{name}: {}, {} runs", overlaid.what, runs.len()),
        note: format!(
            "line: mean over runs{seeds}; band: min to max; aligned on the evaluation times common to all runs (no interpolation)"
        ),
        x_label: TIME_LABEL.into(),
        y_label: overlaid.y_label.into(),
        log_y: overlaid.log_y,
        ..LineChart::default()
    };
    let mut by_epoch = LineChart {
        note: format!(
            "line: mean over runs{seeds}; band: min to max; at each common evaluation time, x = the runs' mean epoch"
        ),
        x_label: EPOCH_LABEL.into(),
        ..by_time.clone()
    };
    for (color, alg) in algorithms.iter().enumerate() {
        let per_run = rows_of(runs, alg, overlaid.metric);
        if per_run.is_empty() {
            continue;
        }
        let points = band(&per_run, overlaid.metric);
        if points.is_empty() && per_run.len() > 1 {
            return Err(no_common_time(runs, alg, per_run.len()));
        }
        let legend = first_with(runs, alg).map_or_else(|| alg.clone(), |r| r.legend(alg));
        let label = format!("{legend} ({} runs)", per_run.len());
        let scale = overlaid.scale;
        let at_time = points.iter().map(|p| (p.time_s, p));
        add_band(&mut by_time, label.clone(), color, at_time, scale);
        let at_epoch = points.iter().filter_map(|p| Some((p.epoch?, p)));
        add_band(&mut by_epoch, label, color, at_epoch, scale);
    }
    Ok((by_time, by_epoch))
}

/// The rows of algorithm `alg`, one list per run, for the runs that measured `metric` for it.
fn rows_of<'a>(runs: &'a [RunData], alg: &str, metric: Metric) -> Vec<Vec<&'a MetricRow>> {
    runs.iter()
        .map(|r| {
            r.metrics
                .iter()
                .filter(|m| m.algorithm == alg)
                .collect::<Vec<_>>()
        })
        .filter(|rows| rows.iter().any(|m| metric.of(m).is_some()))
        .collect()
}

/// The first run that has algorithm `alg`.
fn first_with<'a>(runs: &'a [RunData], alg: &str) -> Option<&'a RunData> {
    runs.iter().find(|r| r.algorithms.iter().any(|a| a == alg))
}

/// The error for algorithm `alg`, which `with` of the runs have, when those runs have no
/// evaluation time in common: it names the first run's directory.
fn no_common_time(runs: &[RunData], alg: &str, with: usize) -> Error {
    let run = first_with(runs, alg).expect("the algorithm comes from a run");
    Error::Input {
        path: run.dir.clone(),
        message: format!(
            "algorithm `{alg}` has no evaluation time common to all {with} runs that have it; \
             overlay runs with the same [run] eval_every_s"
        ),
    }
}

/// Adds one algorithm to `chart`: its mean line and its band from the minimum to the maximum,
/// each point at the x that `points` pairs it with, the values multiplied by `scale`.
fn add_band<'a>(
    chart: &mut LineChart,
    label: String,
    color: usize,
    points: impl Iterator<Item = (f64, &'a BandPoint)> + Clone,
    scale: f64,
) {
    chart.lines.push(Line {
        label,
        points: points.clone().map(|(x, p)| (x, p.mean * scale)).collect(),
        color,
        dashed: false,
    });
    chart.bands.push(Band {
        color,
        points: points
            .map(|(x, p)| (x, p.min * scale, p.max * scale))
            .collect(),
    });
}
