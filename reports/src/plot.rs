//! Line plots (with optional min–max bands), drawn to PNG and SVG with plotters.
//!
//! [`line_plot`] is the public entry point for a plain line plot; the run plots use the
//! crate-internal [`LineChart`], which adds dashed lines, filled bands between a lower and an
//! upper curve, legend-only entries (for a series with nothing to draw, e.g. a distance that is
//! exactly zero on a log axis) and a note under the title.

use std::ops::Range;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use crate::Result;
use crate::figure::{
    AXIS_COLOR, AXIS_DESC_SIZE, DrawResult, FONT_FAMILY, Figure, GRID_BOLD, GRID_LIGHT, LABEL_SIZE,
    TEXT_COLOR, format_tick, header, palette,
};

/// Width of the PNG, in pixels (also the SVG's width).
pub const PLOT_WIDTH: u32 = 1000;
/// Height of the PNG, in pixels (also the SVG's height).
pub const PLOT_HEIGHT: u32 = 620;

/// Line colours as RGB, used in order and cycled past the eighth series.
///
/// The Okabe-Ito palette (distinguishable with the common forms of colour
/// blindness), reordered so the first colours have the most contrast on white.
pub const PALETTE: [(u8, u8, u8); 8] = [
    (0x00, 0x72, 0xB2), // blue
    (0xD5, 0x5E, 0x00), // vermillion
    (0x00, 0x9E, 0x73), // bluish green
    (0xCC, 0x79, 0xA7), // reddish purple
    (0xE6, 0x9F, 0x00), // orange
    (0x56, 0xB4, 0xE9), // sky blue
    (0x00, 0x00, 0x00), // black
    (0xF0, 0xE4, 0x42), // yellow
];

/// Fraction of the data span added on each side of a linear axis.
const MARGIN: f64 = 0.04;
const LINE_WIDTH: u32 = 2;
/// Opacity of a band's fill.
const BAND_ALPHA: f64 = 0.18;

/// A named line for a plot.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Series {
    /// Name shown in the legend (an empty label gets no legend entry).
    pub label: String,
    /// `(x, y)` points, drawn in order; non-finite points are skipped.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// A series from a label and its points.
    pub fn new(label: impl Into<String>, points: impl IntoIterator<Item = (f64, f64)>) -> Self {
        Self {
            label: label.into(),
            points: points.into_iter().collect(),
        }
    }
}

/// Description of a line plot.
#[derive(Debug, Clone, Copy)]
pub struct LinePlot<'a> {
    /// Caption above the plot (none if empty).
    pub title: &'a str,
    /// Description under the x axis.
    pub x_label: &'a str,
    /// Description left of the y axis.
    pub y_label: &'a str,
    /// Use a logarithmic y axis. Ignored (the axis stays linear) unless every
    /// finite y value is positive.
    pub log_y: bool,
    /// The lines, coloured in order from [`PALETTE`].
    pub series: &'a [Series],
}

/// Draws `plot` to `<dir>/<stem>.png` (1000x620) and `<dir>/<stem>.svg`, and
/// returns the two paths in that order.
///
/// `dir` is created if needed. Axis ranges are fitted to the data with a
/// small margin (a linear axis does not cross zero unless the data does; a log
/// axis is labelled at powers of ten, 1-2-5 multiples or finer, whatever gives
/// at least four labels). Points with a non-finite coordinate are skipped (and, on a log
/// axis, so would be non-positive y values, but those switch the axis back to
/// linear); an empty plot gets unit axes. A series with a single point is drawn
/// as a dot. The legend lists each labelled series and sits in the corner of the
/// plot with the least data in it.
///
/// Both files are written atomically (temporary file, then rename).
pub fn line_plot(dir: impl AsRef<Path>, stem: &str, plot: &LinePlot) -> Result<(PathBuf, PathBuf)> {
    let chart = LineChart {
        title: plot.title.to_owned(),
        x_label: plot.x_label.to_owned(),
        y_label: plot.y_label.to_owned(),
        log_y: plot.log_y,
        lines: plot
            .series
            .iter()
            .enumerate()
            .map(|(color, s)| Line {
                label: s.label.clone(),
                points: s.points.clone(),
                color,
                dashed: false,
            })
            .collect(),
        ..LineChart::default()
    };
    crate::figure::save(dir.as_ref(), stem, &chart)
}

/// One line of a [`LineChart`].
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Line {
    /// Legend text (none if empty). A labelled line without points is a legend entry only.
    pub label: String,
    /// `(x, y)` points; non-finite ones are skipped.
    pub points: Vec<(f64, f64)>,
    /// Index into [`PALETTE`] (cycled).
    pub color: usize,
    /// Drawn dashed rather than solid.
    pub dashed: bool,
}

/// A band filled between a lower and an upper curve, `(x, low, high)`, in a light tint.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Band {
    /// Index into [`PALETTE`] (cycled).
    pub color: usize,
    /// `(x, low, high)`; points with a non-finite value are skipped.
    pub points: Vec<(f64, f64, f64)>,
}

/// A line chart: lines over bands, a legend, a header with an optional note.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct LineChart {
    /// Caption above the plot (none if empty).
    pub title: String,
    /// A grey line of explanation under the title (none if empty).
    pub note: String,
    /// Description under the x axis.
    pub x_label: String,
    /// Description left of the y axis.
    pub y_label: String,
    /// Log y axis, when every finite y value (bands included) is positive.
    pub log_y: bool,
    /// The lines, drawn over the bands in order.
    pub lines: Vec<Line>,
    /// The bands.
    pub bands: Vec<Band>,
}

impl Figure for LineChart {
    fn size(&self) -> (u32, u32) {
        (PLOT_WIDTH, PLOT_HEIGHT)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let prepared = Prepared::new(self);
        let area = header(root, &self.title, &self.note, &[])?;
        match &prepared.y {
            YAxis::Linear(y) => draw_chart(&area, self, &prepared, y.clone()),
            YAxis::Log(y) => {
                let (bold, light) = log_ticks(y);
                let spec = y.clone().log_scale().with_key_points(bold);
                draw_chart(&area, self, &prepared, spec.with_light_points(light))
            }
        }
    }
}

/// The y axis to draw.
#[derive(Debug, Clone, PartialEq)]
enum YAxis {
    Linear(Range<f64>),
    Log(Range<f64>),
}

/// What to draw, once the data is cleaned and the axes fitted.
#[derive(Debug)]
struct Prepared {
    x: Range<f64>,
    y: YAxis,
    /// Drawable points per line, in the order of `LineChart::lines`.
    points: Vec<Vec<(f64, f64)>>,
    /// Drawable points per band, in the order of `LineChart::bands`.
    bands: Vec<Vec<(f64, f64, f64)>>,
    legend: SeriesLabelPosition,
}

impl Prepared {
    fn new(chart: &LineChart) -> Self {
        let points: Vec<Vec<(f64, f64)>> = chart
            .lines
            .iter()
            .map(|l| {
                l.points
                    .iter()
                    .filter(|(x, y)| x.is_finite() && y.is_finite())
                    .copied()
                    .collect()
            })
            .collect();
        let bands: Vec<Vec<(f64, f64, f64)>> = chart
            .bands
            .iter()
            .map(|b| {
                b.points
                    .iter()
                    .filter(|(x, lo, hi)| x.is_finite() && lo.is_finite() && hi.is_finite())
                    .copied()
                    .collect()
            })
            .collect();
        let all = || {
            let line_points = points.iter().flatten().copied();
            let band_points = bands
                .iter()
                .flatten()
                .flat_map(|&(x, lo, hi)| [(x, lo), (x, hi)]);
            line_points.chain(band_points)
        };
        let log = chart.log_y && all().next().is_some() && all().all(|(_, y)| y > 0.0);

        let x = linear_range(min_max(all().map(|p| p.0)));
        let y = if log {
            YAxis::Log(log_range(
                min_max(all().map(|p| p.1)).expect("log_y implies data"),
            ))
        } else {
            YAxis::Linear(linear_range(min_max(all().map(|p| p.1))))
        };

        let labels: Vec<&str> = chart.lines.iter().map(|s| s.label.as_str()).collect();
        let legend = legend_position(&points, &x, &y, &labels);
        Self {
            x,
            y,
            points,
            bands,
            legend,
        }
    }
}

fn min_max(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

/// A linear axis range around `[lo, hi]` with a small margin, not crossing
/// zero unless the data does; `0..1` without data.
fn linear_range(bounds: Option<(f64, f64)>) -> Range<f64> {
    let Some((lo, hi)) = bounds else {
        return 0.0..1.0;
    };
    let pad = if hi > lo {
        (hi - lo) * MARGIN
    } else if lo == 0.0 {
        1.0
    } else {
        lo.abs() * 0.1
    };
    let (mut start, mut end) = (lo - pad, hi + pad);
    if !(start.is_finite() && end.is_finite()) {
        (start, end) = (lo, hi);
    }
    if lo >= 0.0 && start < 0.0 {
        start = 0.0;
    }
    if hi <= 0.0 && end > 0.0 {
        end = 0.0;
    }
    if start >= end {
        // Only reachable with spans too wide or too narrow for f64.
        end = start + 1.0;
    }
    start..end
}

/// A log axis range around `[lo, hi]` (both positive), with a small margin in
/// log space (half a decade each side for a single value).
fn log_range((lo, hi): (f64, f64)) -> Range<f64> {
    let (mut a, mut b) = (lo.log10(), hi.log10());
    let pad = if b - a < 1e-9 { 0.5 } else { (b - a) * MARGIN };
    a -= pad;
    b += pad;
    let (start, end) = (10f64.powf(a), 10f64.powf(b));
    if start > 0.0 && end.is_finite() && start < end {
        start..end
    } else {
        // The margin left f64's range (or rounding collapsed it): no margin.
        lo..if hi > lo { hi } else { hi * 2.0 }
    }
}

/// Tick marks for a log axis: `(labelled, grid only)`.
///
/// Prefers powers of ten, then 1-2-5 multiples, then every multiple 1..9 of a
/// power of ten, taking the first that gives at least four ticks in range;
/// for a range too narrow for any of those (less than about a factor of two),
/// evenly spaced round values as on a linear axis. plotters' own log ticks
/// leave a range within one decade with a single label or none.
fn log_ticks(range: &Range<f64>) -> (Vec<f64>, Vec<f64>) {
    const MIN_TICKS: usize = 4;
    const MAX_TICKS: usize = 12;
    let (lo, hi) = (range.start, range.end);
    let decades = lo.log10().floor() as i32..=hi.log10().ceil() as i32;
    let multiples = |mults: &[u8], step: i32| -> Vec<f64> {
        decades
            .clone()
            .filter(|k| k.rem_euclid(step) == 0)
            .flat_map(|k| mults.iter().map(move |m| decimal(*m, k)))
            .filter(|v| (lo..=hi).contains(v))
            .collect()
    };
    let all: &[u8] = &[1, 2, 3, 4, 5, 6, 7, 8, 9];

    let powers = multiples(&[1], 1);
    if powers.len() >= MIN_TICKS {
        let step = powers.len().div_ceil(MAX_TICKS - 2) as i32;
        let light = if step == 1 && powers.len() <= 8 {
            multiples(&all[1..], 1)
        } else {
            Vec::new()
        };
        return (multiples(&[1], step), light);
    }
    let one_two_five = multiples(&[1, 2, 5], 1);
    if one_two_five.len() >= MIN_TICKS {
        let light = multiples(&[3, 4, 6, 7, 8, 9], 1);
        return (one_two_five, light);
    }
    let every = multiples(all, 1);
    if every.len() >= MIN_TICKS && covers(&every, lo, hi) {
        return (every, Vec::new());
    }
    (linear_ticks(lo, hi, 6), Vec::new())
}

/// Whether `ticks` (increasing) leave no gap wider than 40% of `[lo, hi]` in log space, ends
/// included: multiples of one decade's power of ten leave the next decade's part of a narrow
/// range unlabelled (0.6 to 1.8 would get 0.6, 0.7, 0.8, 0.9, 1 and nothing above).
fn covers(ticks: &[f64], lo: f64, hi: f64) -> bool {
    let total = (hi / lo).log10();
    let mut previous = lo;
    for &t in ticks.iter().chain(std::iter::once(&hi)) {
        if (t / previous).log10() > 0.4 * total {
            return false;
        }
        previous = t;
    }
    true
}

/// `mantissa * 10^exponent`, correctly rounded (so `3e-1` is exactly the f64 nearest 0.3).
fn decimal(mantissa: u8, exponent: i32) -> f64 {
    format!("{mantissa}e{exponent}")
        .parse()
        .expect("a decimal literal parses")
}

/// About `target` round values (multiples of 1, 2 or 5 times a power of ten) in `[lo, hi]`.
fn linear_ticks(lo: f64, hi: f64, target: u32) -> Vec<f64> {
    let raw = (hi - lo) / f64::from(target);
    if !(raw.is_finite() && raw > 0.0) {
        return vec![lo, hi];
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = match raw / magnitude {
        n if n < 1.5 => 1.0,
        n if n < 3.0 => 2.0,
        n if n < 7.0 => 5.0,
        _ => 10.0,
    } * magnitude;
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

/// The corner (or the middle of a side) of the plotting area that the data crosses least.
fn legend_position(
    points: &[Vec<(f64, f64)>],
    x: &Range<f64>,
    y: &YAxis,
    labels: &[&str],
) -> SeriesLabelPosition {
    let entries = labels.iter().filter(|l| !l.is_empty()).count();
    let longest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    // Rough size of the legend box as a fraction of the plotting area (about 850x470 px).
    let width = ((longest as f64 * 9.0 + 60.0) / 850.0).min(1.0);
    let height = ((entries as f64 * 22.0 + 20.0) / 470.0).min(1.0);

    let norm_x = |v: f64| (v - x.start) / (x.end - x.start);
    let norm_y = |v: f64| match y {
        YAxis::Linear(r) => (v - r.start) / (r.end - r.start),
        YAxis::Log(r) => (v.ln() - r.start.ln()) / (r.end.ln() - r.start.ln()),
    };

    // Sample every line at a fine, fixed spacing in normalised coordinates.
    let mut samples = Vec::new();
    for line in points {
        let normalised: Vec<(f64, f64)> =
            line.iter().map(|&(a, b)| (norm_x(a), norm_y(b))).collect();
        samples.extend(normalised.first().copied());
        for pair in normalised.windows(2) {
            let ((x0, y0), (x1, y1)) = (pair[0], pair[1]);
            let steps = ((x1 - x0).hypot(y1 - y0) * 100.0).ceil().clamp(1.0, 1000.0) as usize;
            samples.extend((1..=steps).map(|i| {
                let t = i as f64 / steps as f64;
                (x0 + (x1 - x0) * t, y0 + (y1 - y0) * t)
            }));
        }
    }

    let corners = [
        (SeriesLabelPosition::UpperRight, 1.0 - width, 1.0 - height),
        (SeriesLabelPosition::LowerRight, 1.0 - width, 0.0),
        (SeriesLabelPosition::UpperLeft, 0.0, 1.0 - height),
        (SeriesLabelPosition::LowerLeft, 0.0, 0.0),
        // When lines run along the top and the bottom, the middle of a side may be free.
        (
            SeriesLabelPosition::MiddleRight,
            1.0 - width,
            0.5 - height / 2.0,
        ),
        (SeriesLabelPosition::MiddleLeft, 0.0, 0.5 - height / 2.0),
    ];
    let crossings = |&(_, left, bottom): &(SeriesLabelPosition, f64, f64)| {
        samples
            .iter()
            .filter(|&&(px, py)| {
                px >= left && px <= left + width && py >= bottom && py <= bottom + height
            })
            .count()
    };
    // `min_by_key` keeps the first of equals, so ties prefer the upper right.
    let (best, _, _) = corners
        .into_iter()
        .min_by_key(crossings)
        .expect("four corners");
    best
}

fn draw_chart<DB, Y>(
    area: &DrawingArea<DB, Shift>,
    chart_spec: &LineChart,
    prepared: &Prepared,
    y_spec: Y,
) -> DrawResult<DB>
where
    DB: DrawingBackend,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .margin_right(30)
        .x_label_area_size(58)
        .y_label_area_size(84)
        .build_cartesian_2d(prepared.x.clone(), y_spec)?;

    let tick = |v: &f64| format_tick(*v);
    chart
        .configure_mesh()
        .x_desc(chart_spec.x_label.as_str())
        .y_desc(chart_spec.y_label.as_str())
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .label_style((FONT_FAMILY, LABEL_SIZE).into_font().color(&TEXT_COLOR))
        .axis_desc_style((FONT_FAMILY, AXIS_DESC_SIZE).into_font().color(&TEXT_COLOR))
        .axis_style(AXIS_COLOR)
        .bold_line_style(GRID_BOLD)
        .light_line_style(GRID_LIGHT)
        .max_light_lines(4)
        .draw()?;

    for (band, points) in chart_spec.bands.iter().zip(&prepared.bands) {
        if points.len() < 2 {
            continue;
        }
        let outline: Vec<(f64, f64)> = points
            .iter()
            .map(|&(x, _, hi)| (x, hi))
            .chain(points.iter().rev().map(|&(x, lo, _)| (x, lo)))
            .collect();
        let fill = palette(band.color).mix(BAND_ALPHA).filled();
        chart.draw_series(std::iter::once(Polygon::new(outline, fill)))?;
    }

    for (line, points) in chart_spec.lines.iter().zip(&prepared.points) {
        let style = palette(line.color).stroke_width(LINE_WIDTH);
        let annotation = if points.len() == 1 {
            chart.draw_series(
                LineSeries::new(points.iter().copied(), style.filled()).point_size(4),
            )?
        } else if line.dashed {
            chart.draw_series(DashedLineSeries::new(points.iter().copied(), 8, 5, style))?
        } else {
            chart.draw_series(LineSeries::new(points.iter().copied(), style))?
        };
        if !line.label.is_empty() {
            let dashed = line.dashed;
            annotation.label(line.label.as_str()).legend(move |(x, y)| {
                if dashed {
                    PathElement::new(vec![(x, y), (x + 9, y)], style)
                } else {
                    PathElement::new(vec![(x, y), (x + 24, y)], style)
                }
            });
        }
    }

    if chart_spec.lines.iter().any(|s| !s.label.is_empty()) {
        chart
            .configure_series_labels()
            .position(prepared.legend.clone())
            .margin(12)
            .legend_area_size(32)
            .label_font((FONT_FAMILY, LABEL_SIZE).into_font().color(&TEXT_COLOR))
            .background_style(WHITE.mix(0.9))
            .border_style(GRID_BOLD)
            .draw()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_range_has_margin_and_respects_zero() {
        let r = linear_range(Some((0.0, 100.0)));
        assert_eq!(r.start, 0.0);
        assert!(r.end > 100.0 && r.end < 110.0);
        let r = linear_range(Some((10.0, 20.0)));
        assert!(r.start < 10.0 && r.start > 9.0 && r.end > 20.0);
        assert_eq!(linear_range(None), 0.0..1.0);
    }

    #[test]
    fn linear_range_of_a_single_value_is_not_empty() {
        for v in [0.0, 5.0, -3.0, 1e-12, 1e300] {
            let r = linear_range(Some((v, v)));
            assert!(r.start < r.end, "{v}: {r:?}");
            assert!(r.start <= v && v <= r.end, "{v}: {r:?}");
        }
    }

    #[test]
    fn log_range_contains_the_data() {
        for (lo, hi) in [
            (0.3, 0.9),
            (0.02, 2.3),
            (1.0, 1.0),
            (5e-7, 7e-7),
            (1e-300, 1e300),
        ] {
            let r = log_range((lo, hi));
            assert!(
                r.start > 0.0 && r.start <= lo && r.end >= hi,
                "{lo}..{hi}: {r:?}"
            );
            assert!(r.start < r.end && r.end.is_finite(), "{lo}..{hi}: {r:?}");
        }
    }

    #[test]
    fn log_axes_get_enough_ticks() {
        let cases: [(f64, f64, &[f64]); 6] = [
            (0.6, 1.8, &[0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8]),
            (0.48, 1.0, &[0.5, 0.6, 0.7, 0.8, 0.9, 1.0]),
            (0.08, 2.6, &[0.1, 0.2, 0.5, 1.0, 2.0]),
            (0.0009, 3.0, &[0.001, 0.01, 0.1, 1.0]),
            (0.9, 1.1, &[0.9, 0.95, 1.0, 1.05, 1.1]),
            (1e-300, 1e300, &[]),
        ];
        for (lo, hi, expected) in cases {
            let (bold, _) = log_ticks(&(lo..hi));
            assert!((4..=12).contains(&bold.len()), "{lo}..{hi}: {bold:?}");
            assert!(
                bold.iter().all(|t| (lo..=hi).contains(t)),
                "{lo}..{hi}: {bold:?}"
            );
            if !expected.is_empty() {
                let labels: Vec<String> = bold.iter().map(|t| format_tick(*t)).collect();
                let want: Vec<String> = expected.iter().map(|t| format_tick(*t)).collect();
                assert_eq!(labels, want, "{lo}..{hi}");
            }
        }
    }

    #[test]
    fn non_finite_points_are_dropped_and_log_falls_back_to_linear() {
        let series = [
            Series::new(
                "a",
                [
                    (0.0, 1.0),
                    (f64::NAN, 2.0),
                    (2.0, f64::INFINITY),
                    (3.0, 0.5),
                ],
            ),
            Series::new("b", [(1.0, -1.0)]),
        ];
        let chart = |series: &[Series]| LineChart {
            log_y: true,
            lines: series
                .iter()
                .map(|s| Line {
                    label: s.label.clone(),
                    points: s.points.clone(),
                    ..Line::default()
                })
                .collect(),
            ..LineChart::default()
        };
        let prepared = Prepared::new(&chart(&series));
        assert_eq!(prepared.points[0], vec![(0.0, 1.0), (3.0, 0.5)]);
        assert!(matches!(prepared.y, YAxis::Linear(_)));

        let prepared = Prepared::new(&chart(&series[..1]));
        assert!(matches!(prepared.y, YAxis::Log(_)));
    }

    #[test]
    fn legend_avoids_the_data() {
        // A rising curve fills the upper right; a falling one the lower right.
        let rising = vec![(0..=100).map(|i| (f64::from(i), f64::from(i))).collect()];
        let falling = vec![
            (0..=100)
                .map(|i| (f64::from(i), f64::from(100 - i)))
                .collect(),
        ];
        let axis = YAxis::Linear(0.0..100.0);
        let pos = legend_position(&rising, &(0.0..100.0), &axis, &["a"]);
        assert!(matches!(pos, SeriesLabelPosition::LowerRight), "{pos:?}");
        let pos = legend_position(&falling, &(0.0..100.0), &axis, &["a"]);
        assert!(matches!(pos, SeriesLabelPosition::UpperRight), "{pos:?}");
    }
}
