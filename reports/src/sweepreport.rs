//! `report.html` of a sweep directory: one page with every point's results in a table that
//! sorts by any column, and the sweep's plots as interactive charts, in the style of a run's
//! report ([`crate::write_report`]) and as self-contained.

use std::fmt::Write as _;
use std::path::Path;

use crate::Result;
use crate::report::{escape, figure, noscript, page_end, page_start, significant};
use crate::rundir::write_atomic;
use crate::runplots::Chart;
use crate::sweepplot::{SweepLine, SweepPlot, sweep_chart};

/// A sweep plot with the data it is drawn from, kept for the sweep's report.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SweepFigure {
    /// File name of its PNG and SVG without extension (under `plots/`).
    pub stem: String,
    /// Caption above the plot.
    pub title: String,
    /// A grey line under the title.
    pub note: String,
    /// The swept key.
    pub x_label: String,
    /// The metric.
    pub y_label: String,
    /// Logarithmic y axis.
    pub log_y: bool,
    /// The lines.
    pub lines: Vec<SweepLine>,
}

impl SweepFigure {
    /// The figure as the plot [`crate::sweep_plot`] draws.
    pub fn plot(&self) -> SweepPlot<'_> {
        SweepPlot {
            title: &self.title,
            note: &self.note,
            x_label: &self.x_label,
            y_label: &self.y_label,
            log_y: self.log_y,
            lines: &self.lines,
        }
    }
}

/// What a sweep's page shows.
#[derive(Debug, Clone, Copy)]
pub struct SweepReport<'a> {
    /// The sweep's name.
    pub name: &'a str,
    /// Paragraphs above the table (points without results, runs left out, mixed builds).
    pub notes: &'a [String],
    /// The table's header (`sweep.csv`'s): `point`, then the swept keys, then the rest.
    pub header: &'a [String],
    /// How many columns after `point` are swept keys.
    pub keys: usize,
    /// The rows (`sweep.csv`'s), in the sweep's order.
    pub rows: &'a [Vec<String>],
    /// The sweep's plots.
    pub figures: &'a [SweepFigure],
}

/// Writes the page of `report` to `path` (replaced atomically).
pub fn write_sweep_report(path: &Path, report: &SweepReport) -> Result<()> {
    write_atomic(path, sweep_report_html(report).as_bytes())
}

/// A cell's number, when it is one.
fn number(cell: &str) -> Option<f64> {
    cell.parse::<f64>().ok().filter(|x| x.is_finite())
}

/// The page of `report`, as HTML text. Columns empty on every row are left out, and those with
/// one value on every row (the build, the backend, `done`) are said once above the table
/// instead; the point, the swept keys and the algorithm are always shown.
pub fn sweep_report_html(report: &SweepReport) -> String {
    let mut html = String::new();
    let w = &mut html;
    let title = format!("sweep {}", report.name);
    page_start(w, &format!("dasim sweep report: {}", report.name), &title);
    let _ = writeln!(
        w,
        "<nav><a href=\"#points\">Points</a> · <a href=\"#plots\">Plots</a></nav>"
    );
    let _ = writeln!(w, "<section id=\"points\">\n<h2>Points</h2>");
    for note in report.notes {
        let _ = writeln!(w, "<p>{}</p>", escape(note));
    }
    let cols = report.header.len();
    fn cell(row: &[String], c: usize) -> &str {
        row.get(c).map_or("", String::as_str)
    }
    let always = |c: usize| c <= report.keys || report.header[c] == "algorithm";
    let mut shown = Vec::new();
    let mut same = Vec::new();
    for c in 0..cols {
        let first = report.rows.first().map_or("", |r| cell(r, c));
        let constant = report.rows.iter().all(|r| cell(r, c) == first);
        if always(c) || !constant || report.rows.len() < 2 {
            if always(c) || report.rows.iter().any(|r| !cell(r, c).is_empty()) {
                shown.push(c);
            }
        } else if !first.is_empty() {
            same.push(format!("{} {first}", report.header[c]));
        }
    }
    if !same.is_empty() {
        let _ = writeln!(
            w,
            "<p class=\"file\">The same on every row: {}.</p>",
            escape(&same.join(", "))
        );
    }
    let _ = writeln!(
        w,
        "<p class=\"file\">{} rows (one per point and algorithm; <code>sweep.csv</code> has \
         every column). Click a column's name to sort by it, again to reverse.</p>",
        report.rows.len()
    );
    let _ = write!(
        w,
        "<div class=\"scroll wide\"><table class=\"points sortable\">\n<thead><tr>"
    );
    for &c in &shown {
        let numeric = report.rows.iter().all(|r| {
            let v = cell(r, c);
            v.is_empty() || number(v).is_some()
        }) && report.rows.iter().any(|r| !cell(r, c).is_empty());
        let class = if (1..=report.keys).contains(&c) {
            " class=\"key\""
        } else {
            ""
        };
        let _ = write!(
            w,
            "<th{class} data-type=\"{}\" tabindex=\"0\">{}</th>",
            if numeric { "number" } else { "text" },
            escape(&report.header[c])
        );
    }
    let _ = writeln!(w, "</tr></thead>\n<tbody>");
    for row in report.rows {
        let _ = write!(w, "<tr>");
        for &c in &shown {
            let v = cell(row, c);
            match number(v) {
                Some(x) if v.contains(['.', 'e', 'E']) => {
                    let _ = write!(
                        w,
                        "<td data-v=\"{}\" title=\"{}\">{}</td>",
                        escape(v),
                        escape(v),
                        escape(&significant(x, 5))
                    );
                }
                _ => {
                    let _ = write!(w, "<td>{}</td>", escape(v));
                }
            }
        }
        let _ = writeln!(w, "</tr>");
    }
    let _ = writeln!(w, "</tbody>\n</table></div>\n</section>");

    let _ = writeln!(w, "<section id=\"plots\">\n<h2>Plots</h2>");
    if report.figures.is_empty() {
        let _ = writeln!(
            w,
            "<p>No plot: the sweep varies no numeric key but the seed, or no point has results.</p>"
        );
    }
    for f in report.figures {
        let chart = Chart::Lines(sweep_chart(&f.plot()));
        figure(
            w,
            &f.stem,
            &f.title,
            &chart,
            "<code>dasim sweep merge</code>, in <code>plots/</code>",
        );
    }
    if !report.figures.is_empty() {
        noscript(w);
    }
    let _ = writeln!(w, "</section>");
    page_end(
        w,
        "Written by <code>dasim sweep merge</code> from the points' results",
        true,
    );
    html
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SweepPoint;

    fn page(rows: &[Vec<String>]) -> String {
        let header: Vec<String> = [
            "point",
            "lr",
            "algorithm",
            "status",
            "backend",
            "final_loss",
            "error",
        ]
        .map(String::from)
        .to_vec();
        let figures = [SweepFigure {
            stem: "final_loss-vs-lr".into(),
            title: "final_loss against lr".into(),
            x_label: "lr".into(),
            y_label: "final_loss".into(),
            lines: vec![SweepLine {
                label: "allreduce".into(),
                points: vec![SweepPoint {
                    x: 0.1,
                    mean: 0.5,
                    min: 0.5,
                    max: 0.5,
                    count: 1,
                }],
            }],
            ..SweepFigure::default()
        }];
        sweep_report_html(&SweepReport {
            name: "lr",
            notes: &["1 of 3 points has no results".into()],
            header: &header,
            keys: 1,
            rows,
            figures: &figures,
        })
    }

    fn row(cells: &[&str]) -> Vec<String> {
        cells.iter().map(|c| (*c).to_owned()).collect()
    }

    #[test]
    fn constant_and_empty_columns_are_said_once_and_numbers_sort_by_value() {
        let html = page(&[
            row(&[
                "lr=0.1",
                "0.1",
                "allreduce",
                "done",
                "flex",
                "0.123456789",
                "",
            ]),
            row(&["lr=1", "1", "allreduce", "done", "flex", "2.5", ""]),
        ]);
        assert!(
            html.contains("The same on every row: status done, backend flex."),
            "{html}"
        );
        assert!(
            html.contains(
                "<th data-type=\"text\" tabindex=\"0\">point</th>\
             <th class=\"key\" data-type=\"number\" tabindex=\"0\">lr</th>\
             <th data-type=\"text\" tabindex=\"0\">algorithm</th>\
             <th data-type=\"number\" tabindex=\"0\">final_loss</th></tr>"
            ),
            "{html}"
        );
        assert!(!html.contains(">error</th>"), "an empty column is left out");
        assert!(html.contains("<td data-v=\"0.123456789\" title=\"0.123456789\">0.12346</td>"));
        assert!(html.contains("<p>1 of 3 points has no results</p>"));
        assert_eq!(html.matches("data-figure=\"final_loss-vs-lr\"").count(), 1);
        assert!(html.contains("table class=\"points sortable\""));
    }
}
