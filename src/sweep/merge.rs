//! `dasim sweep merge`: every point's results in one table, `sweep.csv`, the sweep plots, and
//! `report.html`, the page that shows both (the table sortable by any column).
//!
//! `sweep.csv` has one row per point and algorithm: the point's name and swept values, the
//! algorithm, the point's status (`done`, or `failed`, `incomplete`, `not-run` on a row of its
//! own with the error), why the run stopped early if it did, the dasim build and backend that
//! ran it, the summary's metrics, and the verdicts of the `[[expect]]` claims. Every point of
//! `sweep.json` has a row: a point without results is listed, not dropped.
//!
//! The plots draw only the runs that ended normally: a run that diverged, stalled or completed
//! no step has no result to average in, so it is left out, and every plot's note and the
//! report say how many were. Points run by different builds of dasim or on different backends
//! are merged, and the report says so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dasim_reports::rundir::{AlgorithmSummary, CheckResult, CheckRow, Summary, num, read_summary};
use dasim_reports::{
    SweepFigure, SweepLine, SweepPoint, SweepReport, sweep_plot, write_sweep_report,
};

use crate::sweep::layout::{Manifest, PointStatus, State, point_dir, short_revision};
use crate::{Error, Result};

/// The table merged from a sweep directory.
pub const SWEEP_CSV: &str = "sweep.csv";
/// The sweep's page: the table, sortable, and the plots.
pub const REPORT_HTML: &str = "report.html";
/// The directory of the sweep plots.
pub const PLOTS: &str = "plots";
/// The metrics plotted when none is asked for.
pub const DEFAULT_PLOT_METRICS: &[&str] = &["time_per_epoch_s", "final_loss", "steps_per_sim_s"];

type Getter = fn(&AlgorithmSummary) -> Option<f64>;

/// The metric columns of `sweep.csv`, from each algorithm's entry of `summary.json`.
pub const METRICS: &[(&str, Getter)] = &[
    ("sim_time_s", |r| Some(r.sim_time_s)),
    ("events", |r| Some(r.events as f64)),
    ("worker_steps", |r| Some(r.worker_steps as f64)),
    ("steps_per_sim_s", |r| Some(r.steps_per_sim_s)),
    ("epochs", |r| Some(r.epochs)),
    ("time_per_epoch_s", |r| {
        (r.epochs > 0.0).then(|| r.sim_time_s / r.epochs)
    }),
    ("final_loss", |r| Some(r.final_loss)),
    ("final_accuracy", |r| Some(r.final_accuracy)),
    ("final_suboptimality", |r| r.final_suboptimality),
    ("final_consensus", |r| Some(r.final_consensus)),
    ("messages", |r| Some(r.messages as f64)),
    ("bytes", |r| Some(r.bytes as f64)),
    ("global_staleness_mean", |r| {
        r.global_staleness.map(|s| s.mean)
    }),
    ("global_staleness_p99", |r| {
        r.global_staleness.map(|s| s.p99 as f64)
    }),
    ("global_staleness_max", |r| {
        r.global_staleness.map(|s| s.max as f64)
    }),
    ("row_staleness_mean", |r| r.row_staleness.map(|s| s.mean)),
    ("row_staleness_p99", |r| {
        r.row_staleness.map(|s| s.p99 as f64)
    }),
    ("row_staleness_max", |r| {
        r.row_staleness.map(|s| s.max as f64)
    }),
    ("message_age_mean", |r| r.message_age.map(|s| s.mean)),
    ("message_age_max", |r| r.message_age.map(|s| s.max as f64)),
    ("mix_age_mean", |r| r.mix_age.map(|s| s.mean)),
    ("mix_age_max", |r| r.mix_age.map(|s| s.max as f64)),
    ("dasgd_staleness_mean", |r| {
        r.model_staleness.map(|s| s.mean)
    }),
    ("dasgd_staleness_max", |r| {
        r.model_staleness.map(|s| s.max as f64)
    }),
    ("time_to_target_accuracy_s", |r| r.time_to_target.accuracy_s),
    ("time_to_target_loss_s", |r| r.time_to_target.loss_s),
    ("utilization_compute", |r| Some(r.utilization.compute)),
    ("utilization_communicate", |r| {
        Some(r.utilization.communicate)
    }),
    ("utilization_blocked", |r| Some(r.utilization.blocked)),
    ("utilization_idle", |r| Some(r.utilization.idle)),
];

/// Where a point of the sweep stands.
#[derive(Clone, Debug, PartialEq)]
pub enum PointResult {
    /// It completed: its summary.
    Done(Box<Summary>),
    /// Its run failed: why.
    Failed(String),
    /// Its run started but did not end (it is running, or was killed).
    Incomplete,
    /// Its run never started.
    NotRun,
}

impl PointResult {
    /// `done`, `failed`, `incomplete` or `not-run`, as in `sweep.csv`'s `status` column.
    pub fn name(&self) -> &'static str {
        match self {
            PointResult::Done(_) => "done",
            PointResult::Failed(_) => "failed",
            PointResult::Incomplete => "incomplete",
            PointResult::NotRun => "not-run",
        }
    }
}

/// Reads where each point of the sweep in `dir` stands, in the sweep's order.
pub fn point_results(dir: &Path, manifest: &Manifest) -> Result<Vec<PointResult>> {
    manifest
        .points
        .iter()
        .map(|p| {
            let pdir = point_dir(dir, &p.name);
            if !pdir.exists() {
                return Ok(PointResult::NotRun);
            }
            Ok(match PointStatus::read(&pdir) {
                Some(s) if s.sha256 != p.sha256 => PointResult::Incomplete,
                Some(s) if s.state == State::Done => match read_summary(&pdir)? {
                    Some(summary) => PointResult::Done(Box::new(summary)),
                    None => PointResult::Incomplete,
                },
                Some(s) => PointResult::Failed(s.error.unwrap_or_default()),
                None => PointResult::Incomplete,
            })
        })
        .collect()
}

/// What to draw: the metrics (columns of `sweep.csv`) and the swept keys to put on the x axis.
#[derive(Clone, Debug, Default)]
pub struct MergeOptions {
    /// Metrics to plot (default: [`DEFAULT_PLOT_METRICS`]).
    pub metrics: Vec<String>,
    /// Swept keys to plot against (default: every numeric swept key but `seed` that takes
    /// more than one value).
    pub x: Vec<String>,
}

/// What [`merge`] wrote and found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MergeReport {
    /// Points of the sweep.
    pub points: usize,
    /// Points with results.
    pub complete: usize,
    /// Rows of `sweep.csv` with results.
    pub rows: usize,
    /// The points without results: name, status (`failed`, `incomplete`, `not-run`), error.
    pub missing: Vec<(String, String, String)>,
    /// The runs left out of the plots because they stopped early: point, algorithm, why
    /// (`diverged`, `stalled`, `no-steps`).
    pub left_out: Vec<(String, String, String)>,
    /// What ran the complete points (the dasim build and the backend, in words), each with the
    /// points it ran, in the sweep's order; more than one entry means the results are mixed.
    pub ran_by: Vec<(String, Vec<String>)>,
    /// `sweep.csv`.
    pub csv: PathBuf,
    /// The plot files written (PNG and SVG).
    pub plots: Vec<PathBuf>,
    /// `report.html`.
    pub report: PathBuf,
}

/// One complete row: the point's values, the algorithm and its metrics.
struct Row<'a> {
    values: &'a [String],
    algorithm: &'a str,
    summary: &'a AlgorithmSummary,
}

/// Merges the sweep directory `dir`: writes `sweep.csv`, the plots under `plots/` and
/// `report.html` (the table, sortable, and the plots, interactive).
pub fn merge(dir: &Path, opts: &MergeOptions) -> Result<MergeReport> {
    let manifest = Manifest::read(dir)?;
    let results = point_results(dir, &manifest)?;
    let expects = expect_numbers(&results);

    let mut out = csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    let csv_err = |e: csv::Error| Error::Usage(format!("cannot write {SWEEP_CSV}: {e}"));
    let header = csv_header(&manifest, &expects);
    out.write_record(&header).map_err(csv_err)?;
    // The rows again, for the report's table.
    let mut table: Vec<Vec<String>> = Vec::new();
    let mut report = MergeReport {
        points: manifest.points.len(),
        csv: dir.join(SWEEP_CSV),
        ..MergeReport::default()
    };
    let mut rows: Vec<Row> = Vec::new();
    // The blank cells of a point without results, after its status: `stopped`, the build and
    // backend, the metrics, the check counts and the claims' verdicts.
    let blank_metrics = 3 + METRICS.len() + 3 + 2 * expects.len();
    for (point, result) in manifest.points.iter().zip(&results) {
        let mut lead = vec![point.name.clone()];
        lead.extend(point.values.iter().cloned());
        match result {
            PointResult::Done(summary) => {
                report.complete += 1;
                let by = ran_by(summary);
                match report.ran_by.iter_mut().find(|(b, _)| *b == by) {
                    Some((_, points)) => points.push(point.name.clone()),
                    None => report.ran_by.push((by, vec![point.name.clone()])),
                }
                for run in &summary.runs {
                    let record = run_record(&lead, summary, run, &expects);
                    out.write_record(&record).map_err(csv_err)?;
                    table.push(record);
                    report.rows += 1;
                    if let Some(stopped) = run.stopped {
                        // No result to average in: a diverged loss, or a stalled or empty run.
                        report.left_out.push((
                            point.name.clone(),
                            run.algorithm.clone(),
                            stopped.name().to_owned(),
                        ));
                        continue;
                    }
                    rows.push(Row {
                        values: &point.values,
                        algorithm: &run.algorithm,
                        summary: run,
                    });
                }
            }
            other => {
                let error = match other {
                    PointResult::Failed(e) => e.clone(),
                    _ => String::new(),
                };
                let mut record = lead;
                record.extend([String::new(), String::new(), other.name().to_owned()]);
                record.extend(std::iter::repeat_n(String::new(), 1 + blank_metrics));
                record.push(error.clone());
                out.write_record(&record).map_err(csv_err)?;
                table.push(record);
                report
                    .missing
                    .push((point.name.clone(), other.name().to_owned(), error));
            }
        }
    }
    let bytes = out
        .into_inner()
        .map_err(|e| Error::Usage(format!("cannot write {SWEEP_CSV}: {e}")))?;
    dasim_reports::write_atomic(&report.csv, &bytes)?;

    let what = what_ran(&results);
    let caveats = caveats(&report);
    let figures = plots(dir, &manifest, &rows, opts, &what, &caveats)?;
    for f in &figures {
        report
            .plots
            .push(dir.join(PLOTS).join(format!("{}.png", f.stem)));
        report
            .plots
            .push(dir.join(PLOTS).join(format!("{}.svg", f.stem)));
    }
    let notes = report_notes(&report);
    let name = manifest.scenario.file_stem().map_or_else(
        || dir.display().to_string(),
        |s| s.to_string_lossy().into_owned(),
    );
    report.report = dir.join(REPORT_HTML);
    write_sweep_report(
        &report.report,
        &SweepReport {
            name: &name,
            notes: &notes,
            header: &header,
            keys: manifest.keys.len(),
            rows: &table,
            figures: &figures,
        },
    )?;
    Ok(report)
}

/// The numbers of the `[[expect]]` claims of the complete points, sorted, each once.
fn expect_numbers(results: &[PointResult]) -> Vec<u64> {
    let mut e: Vec<u64> = results
        .iter()
        .filter_map(|r| match r {
            PointResult::Done(s) => Some(s.checks.iter().map(|c| c.expect)),
            _ => None,
        })
        .flatten()
        .collect();
    e.sort_unstable();
    e.dedup();
    e
}

/// The header of `sweep.csv`: the point, the swept keys, the run's identity and status, the
/// metrics, the check counts, each claim's verdict and observed value, the error.
fn csv_header(manifest: &Manifest, expects: &[u64]) -> Vec<String> {
    let mut header: Vec<String> = vec!["point".into()];
    header.extend(manifest.keys.iter().cloned());
    header.extend(
        [
            "algorithm",
            "kind",
            "status",
            "stopped",
            "dasim_version",
            "git_revision",
            "backend",
        ]
        .map(String::from),
    );
    header.extend(METRICS.iter().map(|(n, _)| (*n).to_owned()));
    header.extend(["checks_passed", "checks_failed", "checks_skipped"].map(String::from));
    for k in expects {
        header.push(format!("expect{k}"));
        header.push(format!("expect{k}_observed"));
    }
    header.push("error".into());
    header
}

/// The `sweep.csv` row of one algorithm's `run` of a complete point (`lead`: its name and
/// swept values).
fn run_record(
    lead: &[String],
    summary: &Summary,
    run: &AlgorithmSummary,
    expects: &[u64],
) -> Vec<String> {
    let mut record = lead.to_vec();
    record.push(run.algorithm.clone());
    record.push(run.kind.clone());
    record.push("done".into());
    record.push(run.stopped.map(|s| s.name().to_owned()).unwrap_or_default());
    record.push(summary.dasim_version.clone());
    record.push(summary.git_revision.clone().unwrap_or_default());
    record.push(run.backend.clone());
    for (_, get) in METRICS {
        record.push(get(run).map(num).unwrap_or_default());
    }
    let checks: Vec<&CheckRow> = summary
        .checks
        .iter()
        .filter(|c| c.algorithm == run.algorithm)
        .collect();
    for want in [CheckResult::Pass, CheckResult::Fail, CheckResult::Skip] {
        let n = checks.iter().filter(|c| c.result == want).count();
        record.push(n.to_string());
    }
    for k in expects {
        let check = checks.iter().find(|c| c.expect == *k);
        record.push(
            check
                .map(|c| c.result.name().to_owned())
                .unwrap_or_default(),
        );
        record.push(check.and_then(|c| c.observed).map(num).unwrap_or_default());
    }
    record.push(String::new());
    record
}

/// What the points ran, when it is not a model trained for real, for every plot's title:
/// ` (timing only: no gradient computed)`, ` (timed as …)`, or nothing.
fn what_ran(results: &[PointResult]) -> String {
    let done = || {
        results.iter().filter_map(|r| match r {
            PointResult::Done(s) => Some(s),
            _ => None,
        })
    };
    if done().next().is_some() && done().all(|s| s.timing_only) {
        " (timing only: no gradient computed)".to_owned()
    } else {
        let timed: Vec<&str> = done()
            .filter_map(|s| s.timed_as.as_deref())
            .map(|t| t.split(" (").next().unwrap_or(t))
            .collect();
        match timed.first() {
            Some(first) if timed.iter().all(|t| t == first) => format!(" (timed as {first})"),
            _ => String::new(),
        }
    }
}

/// The paragraphs above the report's table: the points without results, the runs left out of
/// the plots, the builds that ran the points when there were several.
fn report_notes(report: &MergeReport) -> Vec<String> {
    let mut notes = Vec::new();
    if !report.missing.is_empty() {
        let names: Vec<String> = report
            .missing
            .iter()
            .map(|(name, status, _)| format!("{name} ({status})"))
            .collect();
        notes.push(format!(
            "{} of {} points have no results (the status column says why): {}.",
            report.missing.len(),
            report.points,
            names.join(", ")
        ));
    }
    if !report.left_out.is_empty() {
        let runs: Vec<String> = report
            .left_out
            .iter()
            .map(|(point, alg, why)| format!("{point} {alg} ({why})"))
            .collect();
        notes.push(format!(
            "Left out of the plots, stopped early: {}.",
            runs.join(", ")
        ));
    }
    if report.ran_by.len() > 1 {
        let by: Vec<String> = report
            .ran_by
            .iter()
            .map(|(by, points)| format!("{by}: {}", points.join(", ")))
            .collect();
        notes.push(format!(
            "Warning: the points ran by different builds of dasim or on different backends, \
             so their results may not be comparable: {}.",
            by.join("; ")
        ));
    }
    notes
}

/// The caveats every plot's note carries: runs left out, points ran by different builds.
fn caveats(report: &MergeReport) -> Vec<String> {
    let mut caveats = Vec::new();
    if !report.left_out.is_empty() {
        let n = report.left_out.len();
        caveats.push(format!(
            "left out: {n} run{} that stopped early (sweep.csv's stopped column)",
            if n == 1 { "" } else { "s" }
        ));
    }
    if report.ran_by.len() > 1 {
        caveats.push(format!(
            "points ran by {} different builds or backends",
            report.ran_by.len()
        ));
    }
    caveats
}

/// The dasim build and backend that ran a point, in words.
fn ran_by(summary: &Summary) -> String {
    let git = short_revision(summary.git_revision.as_deref().unwrap_or("unknown"));
    format!(
        "dasim {} (git {git}) on {}",
        summary.dasim_version, summary.backend
    )
}

/// A swept value as a number, when it is one.
fn number(v: &str) -> Option<f64> {
    v.parse::<f64>().ok().filter(|x| x.is_finite())
}

/// Draws every requested metric against every requested swept key.
fn plots(
    dir: &Path,
    manifest: &Manifest,
    rows: &[Row],
    opts: &MergeOptions,
    what: &str,
    caveats: &[String],
) -> Result<Vec<SweepFigure>> {
    let numeric = |k: usize| {
        manifest
            .points
            .iter()
            .all(|p| number(&p.values[k]).is_some())
    };
    let varies = |k: usize| {
        let first = &manifest.points[0].values[k];
        manifest.points.iter().any(|p| &p.values[k] != first)
    };
    let xs: Vec<usize> = if opts.x.is_empty() {
        (0..manifest.keys.len())
            .filter(|&k| manifest.keys[k] != "seed" && numeric(k) && varies(k))
            .collect()
    } else {
        opts.x
            .iter()
            .map(|x| {
                let k = manifest
                    .keys
                    .iter()
                    .position(|key| key == x)
                    .ok_or_else(|| {
                        Error::Usage(format!(
                            "--x {x}: not a swept key (the sweep varies {})",
                            manifest.keys.join(", ")
                        ))
                    })?;
                if !numeric(k) {
                    return Err(Error::Usage(format!(
                        "--x {x}: its values are not all numbers, so it cannot be an axis"
                    )));
                }
                Ok(k)
            })
            .collect::<Result<_>>()?
    };
    let metrics: Vec<String> = if opts.metrics.is_empty() {
        DEFAULT_PLOT_METRICS
            .iter()
            .map(|m| (*m).to_owned())
            .collect()
    } else {
        opts.metrics.clone()
    };
    let mut getters = Vec::new();
    for m in &metrics {
        let Some((_, get)) = METRICS.iter().find(|(n, _)| n == m) else {
            let known: Vec<&str> = METRICS.iter().map(|(n, _)| *n).collect();
            return Err(Error::Usage(format!(
                "--metric {m}: not a metric of sweep.csv (one of {})",
                known.join(", ")
            )));
        };
        getters.push((m.as_str(), *get));
    }
    let seed = manifest.keys.iter().position(|k| k == "seed");
    let mut figures = Vec::new();
    for &x in &xs {
        for &(metric, get) in &getters {
            let lines = sweep_lines(manifest, rows, x, seed, get);
            if lines.iter().all(|l| l.points.is_empty()) {
                continue;
            }
            let repeats = lines
                .iter()
                .flat_map(|l| l.points.iter().map(|p| p.count))
                .max()
                .unwrap_or(1);
            let mut notes = Vec::new();
            if repeats > 1 {
                notes.push(format!("line: mean over {repeats} seeds; band: min to max"));
            }
            notes.extend(caveats.iter().cloned());
            let note = notes.join("; ");
            let figure = SweepFigure {
                title: format!("{metric} against {}{what}", manifest.keys[x]),
                stem: format!("{metric}-vs-{}", manifest.short[x]).replace(['[', ']', '/'], "_"),
                note,
                x_label: manifest.keys[x].clone(),
                y_label: metric.to_owned(),
                log_y: false,
                lines,
            };
            sweep_plot(dir.join(PLOTS), &figure.stem, &figure.plot())?;
            figures.push(figure);
        }
    }
    Ok(figures)
}

/// The lines of one plot: `metric` against swept key `x`, one line per algorithm and
/// combination of the other swept values (but the seed), each value of `x` the mean, minimum
/// and maximum over the rows that share it (the seeds). Lines are in the order their first row
/// comes; non-finite values are left out.
fn sweep_lines(
    manifest: &Manifest,
    rows: &[Row],
    x: usize,
    seed: Option<usize>,
    metric: Getter,
) -> Vec<SweepLine> {
    let others: Vec<usize> = (0..manifest.keys.len())
        .filter(|&k| k != x && Some(k) != seed)
        .filter(|&k| {
            let first = &manifest.points[0].values[k];
            manifest.points.iter().any(|p| &p.values[k] != first)
        })
        .collect();
    let mut order: Vec<String> = Vec::new();
    let mut groups: BTreeMap<String, BTreeMap<u64, (f64, Vec<f64>)>> = BTreeMap::new();
    for row in rows {
        let mut label = row.algorithm.to_owned();
        if !others.is_empty() {
            let rest: Vec<String> = others
                .iter()
                .map(|&k| format!("{}={}", manifest.short[k], row.values[k]))
                .collect();
            label = format!("{label} ({})", rest.join(", "));
        }
        let (Some(xv), Some(y)) = (number(&row.values[x]), metric(row.summary)) else {
            continue;
        };
        if !y.is_finite() {
            continue;
        }
        if !order.contains(&label) {
            order.push(label.clone());
        }
        // Keyed by the bits of a non-negative float's order-preserving image.
        let key = ordered_bits(xv);
        groups
            .entry(label)
            .or_default()
            .entry(key)
            .or_insert((xv, Vec::new()))
            .1
            .push(y);
    }
    order
        .into_iter()
        .map(|label| {
            let points = groups[&label]
                .values()
                .map(|(xv, ys)| SweepPoint {
                    x: *xv,
                    mean: ys.iter().sum::<f64>() / ys.len() as f64,
                    min: ys.iter().copied().fold(f64::INFINITY, f64::min),
                    max: ys.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                    count: ys.len(),
                })
                .collect();
            SweepLine { label, points }
        })
        .collect()
}

/// A key that sorts like the float `x` (finite).
fn ordered_bits(x: f64) -> u64 {
    let b = x.to_bits();
    if b >> 63 == 1 { !b } else { b | (1 << 63) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::layout::ManifestPoint;

    fn summary(alg: &str, sim: f64, epochs: f64) -> AlgorithmSummary {
        let json = format!(
            r#"{{"algorithm":"{alg}","kind":"{alg}","backend":"flex","sim_time_s":{sim},"events":1,
            "worker_steps":1,"steps_per_sim_s":1,"epochs":{epochs},"final_loss":1,"final_accuracy":null,
            "messages":0,"bytes":0,"gradient_flushes":0,"gradient_requests":0}}"#
        );
        serde_json::from_str(&json).unwrap()
    }

    #[test]
    fn lines_average_over_seeds_and_split_by_the_other_keys() {
        let point = |f: &str, s: &str, w: &str| ManifestPoint {
            name: format!("{f}{s}{w}"),
            values: vec![f.into(), s.into(), w.into()],
            sha256: String::new(),
        };
        let manifest = Manifest {
            scenario: "s.toml".into(),
            scenario_sha256: String::new(),
            keys: vec!["factor".into(), "seed".into(), "cluster.workers".into()],
            short: vec!["factor".into(), "seed".into(), "workers".into()],
            points: vec![point("1", "1", "4"), point("2", "2", "8")],
        };
        let values = [
            vec!["1".to_string(), "1".into(), "4".into()],
            vec!["1".to_string(), "2".into(), "4".into()],
            vec!["4".to_string(), "1".into(), "4".into()],
            vec!["4".to_string(), "2".into(), "4".into()],
            vec!["1".to_string(), "1".into(), "8".into()],
        ];
        let sums = [
            summary("a", 1.0, 1.0),
            summary("a", 3.0, 1.0),
            summary("a", 8.0, 2.0),
            summary("a", 8.0, 1.0),
            summary("a", 5.0, 1.0),
        ];
        let rows: Vec<Row> = values
            .iter()
            .zip(&sums)
            .map(|(v, s)| Row {
                values: v,
                algorithm: "a",
                summary: s,
            })
            .collect();
        let get = METRICS
            .iter()
            .find(|(n, _)| *n == "time_per_epoch_s")
            .unwrap()
            .1;
        let lines = sweep_lines(&manifest, &rows, 0, Some(1), get);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].label, "a (workers=4)");
        let p = &lines[0].points;
        assert_eq!(p.len(), 2);
        assert_eq!(
            (p[0].x, p[0].mean, p[0].min, p[0].max, p[0].count),
            (1.0, 2.0, 1.0, 3.0, 2)
        );
        assert_eq!(
            (p[1].x, p[1].mean, p[1].min, p[1].max),
            (4.0, 6.0, 4.0, 8.0)
        );
        assert_eq!(lines[1].label, "a (workers=8)");
        assert_eq!(lines[1].points[0].count, 1);
    }

    #[test]
    fn ordered_bits_sort_like_floats() {
        let mut xs = [3.0, -1.0, 0.5, -7.25, 0.0, 1e9];
        let mut keys: Vec<u64> = xs.iter().map(|&x| ordered_bits(x)).collect();
        keys.sort_unstable();
        xs.sort_by(f64::total_cmp);
        assert_eq!(
            keys,
            xs.iter().map(|&x| ordered_bits(x)).collect::<Vec<_>>()
        );
    }
}
