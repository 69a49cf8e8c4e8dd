//! `report.html`: one self-contained page per run directory.
//!
//! The page holds a summary table (one column per algorithm, from `summary.json`, each value
//! compared with the baseline's), the provenance of the run (dasim version, git revision,
//! SHA-256 of the resolved scenario), every plot of [`crate::plot_run`] as interactive charts
//! (the figures' data as JSON, drawn by the page's script with the vendored uPlot: hover values,
//! legend toggles, zoom; see [`crate::interactive`]), and the resolved `scenario.toml`. It
//! references nothing outside itself (no script, font, style sheet or image to fetch, and a
//! Content Security Policy that forbids any), so it opens offline and can be mailed or
//! archived as one file. The bytes depend only on the run directory's files: no date or host
//! name is written.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::Result;
use crate::interactive::{REPORT_JS, UPLOT_CSS, UPLOT_JS, chart_script_text};
use crate::rundir::{
    AlgorithmStaleness, AlgorithmSummary, IntStats, RunData, Stopped, TimeToTarget, Utilization,
    write_atomic,
};
use crate::runplots::{Chart, run_figures};

/// Writes the report of the run directory `run_dir` to `out` (default file name
/// `report.html`; the parent directory must exist) and returns `out`.
///
/// Fails when `run_dir` is not a run directory or one of its files is malformed (the error
/// names the file and line), or when the page cannot be written.
pub fn write_report(run_dir: &Path, out: &Path, opts: &ReportOptions) -> Result<PathBuf> {
    let data = RunData::load(run_dir)?;
    let html = report_html(&data, opts)?;
    write_atomic(out, html.as_bytes())?;
    Ok(out.to_path_buf())
}

/// What a report shows beyond the run directory's files.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReportOptions {
    /// The algorithm the others are compared with (its name in the scenario, or its legend):
    /// its column comes first and every ratio is against it. `None`: the first algorithm.
    pub baseline: Option<String>,
}

/// The report page of a loaded run directory, as HTML text.
///
/// Fails when `opts.baseline` names no algorithm of the run (the error lists them).
pub fn report_html(data: &RunData, opts: &ReportOptions) -> Result<String> {
    let order = column_order(data, opts.baseline.as_deref())?;
    let name = data.scenario_name();
    let mut html = String::new();
    let w = &mut html;
    page_start(w, &format!("dasim report: {name}"), &name);
    provenance(w, data);

    let figures = run_figures(data);
    let _ = writeln!(w, "<nav><a href=\"#summary\">Summary</a>");
    for f in &figures {
        let _ = writeln!(
            w,
            " · <a href=\"#fig-{}\">{}</a>",
            escape(&f.stem),
            escape(&f.heading)
        );
    }
    let _ = writeln!(w, " · <a href=\"#scenario\">Scenario</a></nav>");

    let _ = writeln!(w, "<section id=\"summary\">\n<h2>Summary</h2>");
    summary_table(w, data, &order);
    let _ = writeln!(w, "</section>");

    let _ = writeln!(w, "<section id=\"plots\">\n<h2>Plots</h2>");
    if figures.is_empty() {
        let _ = writeln!(w, "<p>No plottable data in this run directory.</p>");
    }
    for f in &figures {
        figure(w, &f.stem, &f.heading, &f.chart, "<code>dasim plot</code>");
    }
    if !figures.is_empty() {
        noscript(w);
    }
    let _ = writeln!(w, "</section>");

    let _ = writeln!(
        w,
        "<section id=\"scenario\">\n<h2>Scenario</h2>\n<p>The scenario as run \
         (<code>scenario.toml</code>, every default filled in):</p>"
    );
    match &data.scenario_toml {
        Some(text) => {
            let _ = writeln!(w, "<pre>{}</pre>", escape(text));
        }
        None => {
            let _ = writeln!(w, "<p>(no scenario.toml in the run directory)</p>");
        }
    }
    let _ = writeln!(w, "</section>");
    page_end(
        w,
        "Written by <code>dasim report</code> from the files of the run directory",
        !figures.is_empty(),
    );
    Ok(html)
}

/// Opens a page: the document's head (title `title`, the styles, the security policy) and
/// the `<h1>` heading `heading`.
pub(crate) fn page_start(w: &mut String, title: &str, heading: &str) {
    let _ = write!(
        w,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n\
         <title>{}</title>\n<style>{UPLOT_CSS}</style>\n<style>{STYLE}</style>\n\
         </head>\n<body>\n<h1>{}</h1>\n",
        escape(title),
        escape(heading)
    );
}

/// One figure: the element its chart is drawn in, its data, and a caption naming its heading
/// and where its files come from (`files`, HTML).
pub(crate) fn figure(w: &mut String, stem: &str, heading: &str, chart: &Chart, files: &str) {
    let _ = writeln!(
        w,
        "<figure id=\"fig-{stem}\">\n<div class=\"chart\" id=\"chart-{stem}\"></div>\n\
         <script type=\"application/json\" data-figure=\"{stem}\">{data}</script>\n\
         <figcaption>{alt} <span class=\"file\">({stem}.png and {stem}.svg from \
         {files})</span></figcaption>\n</figure>",
        stem = escape(stem),
        alt = escape(heading),
        data = chart_script_text(chart),
    );
}

/// What a browser without JavaScript shows in place of the charts.
pub(crate) fn noscript(w: &mut String) {
    let _ = writeln!(
        w,
        "<noscript><p>The plots are drawn by the page's script, which this browser does not \
         run; they are also written as PNG and SVG files.</p></noscript>"
    );
}

/// Closes a page: the footer (`written_by`, HTML) and, when the page has charts or a sortable
/// table (`scripts`), uPlot and the page's script.
pub(crate) fn page_end(w: &mut String, written_by: &str, scripts: bool) {
    let _ = writeln!(
        w,
        "<footer>{written_by}; its plots are drawn with uPlot (MIT licence, Leon Sorokin).\
         </footer>"
    );
    if scripts {
        let _ = writeln!(
            w,
            "<script>{UPLOT_JS}</script>\n<script>{REPORT_JS}</script>"
        );
    }
    let _ = writeln!(w, "</body>\n</html>");
}

/// The page's Content Security Policy: its own inline scripts and styles and nothing else, so
/// that the browser refuses any request the page (or the vendored library) might make.
const CSP: &str =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:";

const STYLE: &str = "
body { font-family: system-ui, -apple-system, 'Segoe UI', 'DejaVu Sans', sans-serif; color: #222;
       max-width: 1080px; margin: 2em auto; padding: 0 1em; line-height: 1.45; }
h1 { margin-bottom: 0.2em; }
h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 1.8em; }
dl.meta { display: grid; grid-template-columns: max-content auto; gap: 0.15em 1em; margin: 0.5em 0 1em; }
dl.meta dt { color: #666; }
dl.meta dd { margin: 0; font-family: ui-monospace, 'DejaVu Sans Mono', monospace; word-break: break-all; }
nav { font-size: 0.92em; color: #666; }
nav a { color: #0060a0; text-decoration: none; }
table { border-collapse: collapse; font-size: 0.95em; }
.scroll { overflow-x: auto; }
th, td { padding: 0.3em 0.8em; border-bottom: 1px solid #e4e4e4; text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; color: #444; }
table.summary th:first-child, table.summary td:first-child { position: sticky; left: 0; background: #fff; z-index: 1; }
table.summary td[title] { cursor: help; text-decoration: underline dotted #aaa; }
table.summary { font-size: 0.88em; }
table.summary thead th { white-space: normal; vertical-align: bottom; min-width: 5em; max-width: 9em; }
.wide { width: calc(100vw - 2.5em); margin-left: calc(50% - 50vw + 1em); }
table.summary th, table.summary td { padding: 0.3em 0.5em; }
table.summary .n { display: block; font-size: 0.85em; color: #777; }
.ratio { display: block; font-size: 0.8em; color: #777; }
thead th { border-bottom: 2px solid #bbb; }
tbody tr:nth-child(even) { background: #f7f7f7; }
table.summary tbody tr:nth-child(even) td:first-child { background: #f7f7f7; }
figure { margin: 1.5em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
.chart { width: 100%; min-height: 2em; }
.chart-title { font-weight: 600; font-size: 1.02em; }
.chart-note, .chart-readout { color: #666; font-size: 0.85em; margin-bottom: 0.3em; }
.chart-readout { font-family: ui-monospace, 'DejaVu Sans Mono', monospace; min-height: 1.4em; }
.chart-caption { font-size: 0.9em; margin-top: 0.6em; }
.chart-keys { font-size: 0.85em; margin: 0.2em 0 0.4em; }
.chart-key { margin-right: 1.2em; white-space: nowrap; }
.chart-key .swatch { display: inline-block; width: 0.9em; height: 0.9em; margin-right: 0.35em; vertical-align: -0.1em; }
.uplot { font-family: inherit; width: 100%; }
.u-legend { font-size: 0.85em; text-align: left; max-width: 100%; }
.u-legend .u-series { max-width: 100%; }
.u-legend .u-label { white-space: normal; }
table.points { font-size: 0.85em; }
table.points th { white-space: normal; vertical-align: bottom; max-width: 10em; overflow-wrap: anywhere; }
table.points th:first-child, table.points td:first-child { position: sticky; left: 0; background: #fff; z-index: 1; }
table.points tbody tr:nth-child(even) td:first-child { background: #f7f7f7; }
table.points th.key { color: #0060a0; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th[aria-sort=ascending]::after { content: ' ▲'; font-size: 0.8em; }
table.sortable th[aria-sort=descending]::after { content: ' ▼'; font-size: 0.8em; }
figcaption { color: #555; font-size: 0.92em; }
.file { color: #999; }
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; font-size: 0.88em; border: 1px solid #e4e4e4; }
footer { margin-top: 3em; color: #888; font-size: 0.85em; }
";

/// The version, revision and scenario hash, and the run's setting.
fn provenance(w: &mut String, data: &RunData) {
    let summary = data.summary.as_ref();
    let stamp = data.stamp.as_ref();
    let known = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    let mut rows: Vec<(&str, String)> = Vec::new();
    let unknown = || "unknown".to_owned();
    rows.push((
        "dasim version",
        summary
            .and_then(|s| known(&s.dasim_version))
            .or_else(|| stamp.map(|s| s.version.clone()))
            .unwrap_or_else(unknown),
    ));
    rows.push((
        "git revision",
        summary
            .and_then(|s| s.git_revision.clone())
            .or_else(|| stamp.and_then(|s| known(&s.git)))
            .unwrap_or_else(unknown),
    ));
    rows.push((
        "scenario sha256",
        summary
            .and_then(|s| known(&s.scenario_sha256))
            .or_else(|| stamp.and_then(|s| known(&s.scenario_sha256)))
            .unwrap_or_else(unknown),
    ));
    if let Some(s) = summary {
        rows.push(("seed", s.seed.to_string()));
        rows.push(("workers", s.workers.to_string()));
        rows.push(("parameters per replica", s.params.to_string()));
        rows.push(("backend", s.backend.clone()));
        rows.push(("device", s.device.clone()));
    }
    let _ = writeln!(w, "<dl class=\"meta\">");
    for (label, value) in rows {
        let _ = writeln!(w, "<dt>{}</dt><dd>{}</dd>", escape(label), escape(&value));
    }
    let _ = writeln!(w, "</dl>");
}

/// One column of the summary table: what `summary.json` says of an algorithm, or, for an
/// algorithm it does not have (an interrupted run), what its last evaluation point says.
/// `None`: not known (a float that is not finite included).
#[derive(Debug, Default)]
struct Column {
    kind: Option<String>,
    stopped: Option<(Stopped, Option<String>)>,
    sim_time_s: Option<f64>,
    events: Option<u64>,
    worker_steps: Option<u64>,
    steps_per_sim_s: Option<f64>,
    epochs: Option<f64>,
    final_loss: Option<f64>,
    final_accuracy: Option<f64>,
    global_staleness: Option<IntStats>,
    row_staleness: Option<IntStats>,
    message_age: Option<IntStats>,
    mix_age: Option<IntStats>,
    model_staleness: Option<AlgorithmStaleness>,
    final_consensus: Option<f64>,
    final_suboptimality: Option<f64>,
    time_to_target: Option<TimeToTarget>,
    messages: Option<u64>,
    bytes: Option<u64>,
    utilization: Option<Utilization>,
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

impl Column {
    fn of_summary(r: &AlgorithmSummary) -> Column {
        Column {
            kind: Some(r.kind.clone()),
            stopped: r.stopped.map(|s| (s, r.stop_reason.clone())),
            sim_time_s: finite(r.sim_time_s),
            events: Some(r.events),
            worker_steps: Some(r.worker_steps),
            steps_per_sim_s: finite(r.steps_per_sim_s),
            epochs: finite(r.epochs),
            final_loss: finite(r.final_loss),
            final_accuracy: finite(r.final_accuracy),
            global_staleness: r.global_staleness,
            row_staleness: r.row_staleness,
            message_age: r.message_age,
            mix_age: r.mix_age,
            model_staleness: r.model_staleness,
            final_consensus: finite(r.final_consensus),
            final_suboptimality: r.final_suboptimality.and_then(finite),
            time_to_target: Some(r.time_to_target),
            messages: Some(r.messages),
            bytes: Some(r.bytes),
            utilization: Some(r.utilization),
        }
    }

    /// A stand-in from the last row of `algorithm` in `metrics.csv`.
    fn of_metrics(data: &RunData, algorithm: &str) -> Column {
        let Some(last) = data.metrics.iter().rev().find(|r| r.algorithm == algorithm) else {
            return Column::default();
        };
        Column {
            sim_time_s: finite(last.time_s),
            worker_steps: last.worker_steps,
            epochs: last.epoch.and_then(finite),
            final_loss: last.loss.and_then(finite),
            final_accuracy: last.accuracy.and_then(finite),
            final_consensus: last.consensus.and_then(finite),
            final_suboptimality: last.suboptimality.and_then(finite),
            ..Column::default()
        }
    }
}

/// A row of the summary table: a short label, its definition (shown on hover), how to read the
/// cell from a column, and, for the rows where a ratio to the baseline means something, the
/// number to compare and which way is better.
struct Row {
    label: &'static str,
    definition: &'static str,
    cell: fn(&Column) -> Option<String>,
    compare: Option<Compare>,
}

/// How a row's values compare with the baseline's: the number, and whether lower is better.
struct Compare {
    value: fn(&Column) -> Option<f64>,
    lower_is_better: bool,
    /// The words for "the ratio says this one is better" and "worse": ("sooner", "later").
    words: (&'static str, &'static str),
    /// A share (an accuracy): compared by its difference in percentage points, not a ratio.
    points: bool,
}

fn row(label: &'static str, definition: &'static str, cell: fn(&Column) -> Option<String>) -> Row {
    Row {
        label,
        definition,
        cell,
        compare: None,
    }
}

fn compared(
    label: &'static str,
    definition: &'static str,
    cell: fn(&Column) -> Option<String>,
    value: fn(&Column) -> Option<f64>,
    lower_is_better: bool,
    words: (&'static str, &'static str),
) -> Row {
    Row {
        label,
        definition,
        cell,
        compare: Some(Compare {
            value,
            lower_is_better,
            words,
            points: false,
        }),
    }
}

/// The summary table's rows (the book's metrics chapter defines each measure).
fn table_rows() -> Vec<Row> {
    fn stats(s: Option<IntStats>) -> Option<String> {
        let s = s?;
        Some(format!(
            "{} / {} / {} <span class=\"n\">n = {}</span>",
            fmt_num(finite(s.mean)?),
            fmt_num(s.p99 as f64),
            fmt_num(s.max as f64),
            fmt_int(s.count),
        ))
    }
    fn share(u: Option<Utilization>, of: fn(&Utilization) -> f64) -> Option<String> {
        Some(format!("{:.1}%", finite(of(&u?))? * 100.0))
    }
    fn target(t: Option<TimeToTarget>, of: fn(&TimeToTarget) -> Option<f64>) -> Option<String> {
        Some(of(&t?).map_or_else(|| "—".into(), fmt_num))
    }
    vec![
        row("kind", "the algorithm's kind in the scenario", |c| {
            c.kind.as_deref().map(escape)
        }),
        row("stopped", "why the run stopped before its budget", |c| {
            let (stopped, reason) = c.stopped.as_ref()?;
            let what = match stopped {
                Stopped::Diverged => "DIVERGED",
                Stopped::NoSteps => "NO STEP COMPLETED",
                Stopped::Stalled => "STALLED",
            };
            Some(match reason {
                Some(r) => format!("<b>{what}</b> <span class=\"file\">({})</span>", escape(r)),
                None => format!("<b>{what}</b>"),
            })
        }),
        row(
            "sim time (s)",
            "simulated time at the end of the run, in seconds",
            |c| c.sim_time_s.map(fmt_num),
        ),
        row("events", "events the simulator processed", |c| {
            c.events.map(fmt_int)
        }),
        row(
            "worker steps",
            "gradient steps of all workers together",
            |c| c.worker_steps.map(fmt_int),
        ),
        compared(
            "steps / sim s",
            "worker steps per simulated second",
            |c| c.steps_per_sim_s.map(fmt_num),
            |c| c.steps_per_sim_s,
            false,
            ("faster", "slower"),
        ),
        row(
            "epochs",
            "passes over the training set, all workers together",
            |c| c.epochs.map(fmt_num),
        ),
        compared(
            "test loss",
            "held-out loss at the last evaluation",
            |c| c.final_loss.map(fmt_num),
            |c| c.final_loss,
            true,
            ("lower", "higher"),
        ),
        Row {
            label: "test accuracy",
            definition: "held-out accuracy at the last evaluation",
            cell: |c| c.final_accuracy.map(|a| format!("{:.2}%", a * 100.0)),
            compare: Some(Compare {
                value: |c| c.final_accuracy,
                lower_is_better: false,
                words: ("higher", "lower"),
                points: true,
            }),
        },
        row(
            "global staleness",
            "mean / p99 / max: global iterations between a gradient's read and its application",
            |c| stats(c.global_staleness),
        ),
        row(
            "row staleness",
            "mean / p99 / max: updates of the target row between a gradient's read and its application",
            |c| stats(c.row_staleness),
        ),
        row("message age", "mean / p99 / max, in iterations", |c| {
            stats(c.message_age)
        }),
        row(
            "oldest message / mix",
            "the oldest message of each mixing step, mean / p99 / max, in iterations",
            |c| stats(c.mix_age),
        ),
        row("DASGD staleness", "DASGD's staleness between models", |c| {
            let d = c.model_staleness?;
            let mean = finite(d.mean).map_or_else(|| "null".into(), fmt_num);
            Some(format!(
                "count {}, max {}, mean {}",
                fmt_num(d.count as f64),
                fmt_num(d.max as f64),
                escape(&mean)
            ))
        }),
        compared(
            "consensus",
            "final consensus distance: the workers' mean squared distance to their average",
            |c| c.final_consensus.map(fmt_num),
            |c| c.final_consensus,
            true,
            ("lower", "higher"),
        ),
        compared(
            "suboptimality",
            "final suboptimality f(x) − f*",
            |c| c.final_suboptimality.map(fmt_num),
            |c| c.final_suboptimality,
            true,
            ("lower", "higher"),
        ),
        compared(
            "to target acc. (s)",
            "simulated seconds to the target accuracy (— if never reached)",
            |c| target(c.time_to_target, |t| t.accuracy_s),
            |c| c.time_to_target?.accuracy_s,
            true,
            ("sooner", "later"),
        ),
        compared(
            "to target loss (s)",
            "simulated seconds to the target loss (— if never reached)",
            |c| target(c.time_to_target, |t| t.loss_s),
            |c| c.time_to_target?.loss_s,
            true,
            ("sooner", "later"),
        ),
        row("messages", "messages sent", |c| c.messages.map(fmt_int)),
        compared(
            "bytes sent",
            "bytes sent, summed over messages (compressed sizes where messages are compressed)",
            |c| {
                c.bytes
                    .map(|b| format!("{} <span class=\"n\">{}</span>", fmt_int(b), fmt_bytes(b)))
            },
            |c| c.bytes.map(|b| b as f64),
            true,
            ("fewer", "more"),
        ),
        row(
            "computing",
            "share of the workers' time spent computing",
            |c| share(c.utilization, |u| u.compute),
        ),
        row(
            "communicating",
            "share of the workers' time spent communicating",
            |c| share(c.utilization, |u| u.communicate),
        ),
        row(
            "blocked",
            "share of the workers' time blocked, waiting for others",
            |c| share(c.utilization, |u| u.blocked),
        ),
        row("idle", "share of the workers' time idle", |c| {
            share(c.utilization, |u| u.idle)
        }),
        // Only runs with `[[faults]]` have it; the row is left out when none has.
        row("down", "share of the workers' time down (faults)", |c| {
            Some(format!("{:.1}%", finite(c.utilization?.down?)? * 100.0))
        }),
    ]
}

/// The ratio of `value` to the baseline's `base`, in the row's words: "3.1× sooner", "2× more"
/// (a share's difference in points: "+0.56 pt"); `None` where no ratio means anything (a zero
/// or missing value).
fn ratio(value: f64, base: f64, compare: &Compare) -> Option<(String, bool)> {
    if compare.points && value.is_finite() && base.is_finite() {
        let d = (value - base) * 100.0;
        if d.abs() < 0.005 {
            return Some(("same".into(), false));
        }
        return Some((format!("{d:+.2} pt"), (d > 0.0) != compare.lower_is_better));
    }
    if !(value.is_finite() && base.is_finite()) || value <= 0.0 || base <= 0.0 {
        return None;
    }
    let better = if compare.lower_is_better {
        value < base
    } else {
        value > base
    };
    let factor = if value > base {
        value / base
    } else {
        base / value
    };
    if (factor - 1.0).abs() < 1e-9 {
        return Some(("same".into(), false));
    }
    let word = if better {
        compare.words.0
    } else {
        compare.words.1
    };
    Some((format!("{}× {word}", significant(factor, 2)), better))
}

/// The run's algorithms in the order of the summary's columns: the baseline first, then the
/// others in the run's order.
fn column_order<'a>(data: &'a RunData, baseline: Option<&str>) -> Result<Vec<&'a String>> {
    let mut order: Vec<&String> = data.algorithms.iter().collect();
    if let Some(name) = baseline {
        let Some(at) = order
            .iter()
            .position(|a| a.as_str() == name || data.legend(a) == name)
        else {
            return Err(crate::Error::Input {
                path: data.dir.clone(),
                message: format!(
                    "--baseline {name}: the run has no such algorithm; its algorithms: {}",
                    data.algorithms.join(", ")
                ),
            });
        };
        let base = order.remove(at);
        order.insert(0, base);
    }
    Ok(order)
}

/// The summary table: one column per algorithm; rows no run has are left out. Without
/// `summary.json` (an interrupted run), the last evaluation point of each algorithm stands in.
/// Each row's label is short, its definition on hover; where a ratio means something, each
/// value after the first (the baseline) shows its ratio to the baseline's, and the best value of
/// the row is marked.
fn summary_table(w: &mut String, data: &RunData, order: &[&String]) {
    let runs: Vec<(String, Column)> = order
        .iter()
        .map(|&alg| {
            let column = data
                .run_summary(alg)
                .map_or_else(|| Column::of_metrics(data, alg), Column::of_summary);
            (alg.clone(), column)
        })
        .collect();
    if data.summary.is_none() {
        let _ = writeln!(
            w,
            "<p>No summary.json (the run was interrupted?): figures from the last evaluation point.</p>"
        );
    }
    if runs.is_empty() {
        let _ = writeln!(w, "<p>No algorithm in this run directory.</p>");
        return;
    }
    if runs.len() > 1 {
        let _ = writeln!(
            w,
            "<p class=\"file\">Ratios are against the first column, {} (choose another with <code>dasim report --baseline NAME</code>); the best value of a row is in bold. Hover a label for its definition (the book's metrics chapter has them all).</p>",
            escape(&data.legend(&runs[0].0))
        );
    }
    let _ = write!(
        w,
        "<div class=\"scroll wide\"><table class=\"summary\">\n<thead><tr><th></th>"
    );
    for (alg, _) in &runs {
        let _ = write!(w, "<th>{}</th>", escape(&data.legend(alg)));
    }
    let _ = writeln!(w, "</tr></thead>\n<tbody>");
    for r in table_rows() {
        let cells: Vec<Option<String>> = runs.iter().map(|(_, run)| (r.cell)(run)).collect();
        if cells.iter().all(Option::is_none) {
            continue;
        }
        let values: Vec<Option<f64>> = match &r.compare {
            Some(c) => runs.iter().map(|(_, run)| (c.value)(run)).collect(),
            None => vec![None; runs.len()],
        };
        let best = r.compare.as_ref().and_then(|c| {
            let known: Vec<f64> = values
                .iter()
                .flatten()
                .copied()
                .filter(|v| v.is_finite())
                .collect();
            if known.len() < 2 {
                return None;
            }
            let pick = if c.lower_is_better {
                f64::min
            } else {
                f64::max
            };
            let b = known.iter().copied().reduce(pick)?;
            // No mark when every value is the best.
            (!known.iter().all(|&v| v == b)).then_some(b)
        });
        let _ = write!(
            w,
            "<tr><td title=\"{}\">{}</td>",
            escape(r.definition),
            escape(r.label)
        );
        for (k, c) in cells.into_iter().enumerate() {
            let text = c.unwrap_or_else(|| "—".into());
            let mut extra = String::new();
            if let (Some(cmp), Some(v), Some(base)) = (&r.compare, values[k], values[0])
                && k > 0
                && let Some((words, _)) = ratio(v, base, cmp)
            {
                extra = format!(" <span class=\"ratio\">{}</span>", escape(&words));
            }
            if best.is_some() && values[k] == best {
                let _ = write!(w, "<td class=\"best\"><b>{text}</b>{extra}</td>");
            } else {
                let _ = write!(w, "<td>{text}{extra}</td>");
            }
        }
        let _ = writeln!(w, "</tr>");
    }
    let _ = writeln!(w, "</tbody>\n</table></div>");
}

/// Four significant digits, no exponent between 1e-3 and 1e7.
fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        return x.to_string();
    }
    if x == 0.0 {
        return "0".into();
    }
    if x.fract() == 0.0 && x.abs() < 1e15 {
        return fmt_int_signed(x as i64);
    }
    let magnitude = x.abs();
    if !(1e-3..1e7).contains(&magnitude) {
        return format!("{x:.3e}");
    }
    significant(x, 4)
}

/// `x` (finite, not zero) with `digits` significant digits in fixed notation, trailing zeros
/// after the point dropped (`0.01230` → `0.0123`; `123457` keeps its zeros).
pub(crate) fn significant(x: f64, digits: i32) -> String {
    let decimals = (digits - 1 - x.abs().log10().floor() as i32).max(0) as usize;
    let text = format!("{x:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

fn fmt_int_signed(n: i64) -> String {
    let sign = if n < 0 { "-" } else { "" };
    format!("{sign}{}", fmt_int(n.unsigned_abs()))
}

/// An integer with thin spaces between groups of three digits.
fn fmt_int(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push('\u{2009}');
        }
        out.push(c);
    }
    out
}

/// Bytes in binary units (KiB, MiB, GiB).
fn fmt_bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = b as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < units.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} B")
    } else {
        format!("{value:.1} {}", units[unit])
    }
}

/// Escapes text for HTML content and attribute values.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_against_the_baseline() {
        let time = Compare {
            value: |_| None,
            lower_is_better: true,
            words: ("sooner", "later"),
            points: false,
        };
        assert_eq!(ratio(0.5, 1.0, &time), Some(("2× sooner".into(), true)));
        assert_eq!(ratio(3.1, 1.0, &time), Some(("3.1× later".into(), false)));
        assert_eq!(ratio(1.0, 1.0, &time), Some(("same".into(), false)));
        assert_eq!(ratio(1.0, 0.0, &time), None);
        let accuracy = Compare {
            value: |_| None,
            lower_is_better: false,
            words: ("higher", "lower"),
            points: true,
        };
        assert_eq!(
            ratio(0.9749, 0.8858, &accuracy),
            Some(("+8.91 pt".into(), true))
        );
    }

    #[test]
    fn escaping_and_numbers() {
        assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
        assert_eq!(fmt_num(3.0), "3");
        assert_eq!(fmt_num(0.116007953), "0.116");
        assert_eq!(fmt_num(394.6666666), "394.7");
        assert_eq!(fmt_num(1.5e-5), "1.500e-5");
        assert_eq!(fmt_int(21490920), "21\u{2009}490\u{2009}920");
        assert_eq!(fmt_bytes(21490920), "20.5 MiB");
        assert_eq!(fmt_bytes(10), "10 B");
    }
}
