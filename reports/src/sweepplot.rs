//! The plots of a parameter sweep: a metric against a swept value, one line per algorithm (and
//! per combination of the other swept values), the mean over the repeated points (seeds) with
//! a band from their minimum to their maximum.

use std::path::{Path, PathBuf};

use crate::Result;
use crate::plot::{Band, Line, LineChart};

/// One value of the swept key on a [`SweepLine`]: the mean, minimum and maximum of the metric
/// over the points that share it (the seeds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SweepPoint {
    /// The swept value.
    pub x: f64,
    /// Mean of the metric.
    pub mean: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// How many points were averaged.
    pub count: usize,
}

/// One line of a sweep plot.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SweepLine {
    /// Legend text: the algorithm, and the other swept values when they vary.
    pub label: String,
    /// Its points, by increasing `x`.
    pub points: Vec<SweepPoint>,
}

/// Description of a sweep plot.
#[derive(Debug, Clone, Copy)]
pub struct SweepPlot<'a> {
    /// Caption above the plot.
    pub title: &'a str,
    /// A grey line under the title (what the line and the band are).
    pub note: &'a str,
    /// The swept key, under the x axis.
    pub x_label: &'a str,
    /// The metric, left of the y axis.
    pub y_label: &'a str,
    /// Logarithmic y axis (ignored unless every value is positive).
    pub log_y: bool,
    /// The lines, coloured in order from [`crate::PALETTE`].
    pub lines: &'a [SweepLine],
}

/// Draws `plot` to `<dir>/<stem>.png` and `<dir>/<stem>.svg` (replaced atomically; `dir` is
/// created if needed) and returns the two paths in that order. Each line is the mean over its
/// points' repetitions, over a light band from their minimum to their maximum; a line of one
/// value is drawn as a dot.
pub fn sweep_plot(
    dir: impl AsRef<Path>,
    stem: &str,
    plot: &SweepPlot,
) -> Result<(PathBuf, PathBuf)> {
    crate::figure::save(dir.as_ref(), stem, &sweep_chart(plot))
}

/// The chart of a sweep plot (drawn to files by [`sweep_plot`], and in a sweep's report).
pub(crate) fn sweep_chart(plot: &SweepPlot) -> LineChart {
    let mut chart = LineChart {
        title: plot.title.to_owned(),
        note: plot.note.to_owned(),
        x_label: plot.x_label.to_owned(),
        y_label: plot.y_label.to_owned(),
        log_y: plot.log_y,
        ..LineChart::default()
    };
    for (color, line) in plot.lines.iter().enumerate() {
        chart.lines.push(Line {
            label: line.label.clone(),
            points: line.points.iter().map(|p| (p.x, p.mean)).collect(),
            color,
            dashed: false,
        });
        if line.points.iter().any(|p| p.count > 1) {
            chart.bands.push(Band {
                color,
                points: line.points.iter().map(|p| (p.x, p.min, p.max)).collect(),
            });
        }
    }
    chart
}
