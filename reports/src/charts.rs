//! The bar-like figures of a run: staleness histograms, a worker timeline (Gantt chart),
//! grouped bars (steps per worker) and stacked bars (where each worker's time went).
//!
//! Each is a [`Figure`] built from the numbers of [`crate::data`]; sizes grow with the number
//! of panels or workers so that labels stay readable. Activities have fixed colours in every
//! figure (compute blue, communicate green, blocked vermillion, idle grey).

use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::data::{FaultMarkKind, Lane, bin_fractions, bin_stats};
use crate::figure::{
    AXIS_COLOR, AXIS_DESC_SIZE, DrawResult, FONT_FAMILY, Figure, GRID_BOLD, Key, LABEL_SIZE,
    TEXT_COLOR, Ticked, format_tick, header, palette,
};
use crate::plot::{PLOT_HEIGHT, PLOT_WIDTH};
use crate::rundir::Activity;

/// Height of one panel of a multi-panel figure, in pixels.
const PANEL_HEIGHT: u32 = 250;
/// Most intervals in one Gantt lane for which step boundaries are drawn.
const SEPARATED_INTERVALS: usize = 300;
/// Height reserved for a figure's header (title, note, keys), in pixels.
const HEADER_HEIGHT: u32 = 100;

/// The colour of an activity, the same in every figure.
pub(crate) fn activity_color(activity: Activity) -> RGBColor {
    match activity {
        Activity::Compute => RGBColor(0x00, 0x72, 0xB2),
        Activity::Communicate => RGBColor(0x00, 0x9E, 0x73),
        Activity::Blocked => RGBColor(0xD5, 0x5E, 0x00),
        Activity::Idle => RGBColor(0xC8, 0xC8, 0xC8),
        // Dark red: a crashed worker stands out from every other activity.
        Activity::Down => RGBColor(0x8B, 0x00, 0x00),
    }
}

/// The keys of the activities: `down` only when `down` (some worker was down), so a figure of
/// a run without crashes is what it was before workers could crash.
fn activity_keys(down: bool) -> Vec<Key> {
    Activity::ALL
        .iter()
        .filter(|&&a| down || a != Activity::Down)
        .map(|&a| Key {
            label: a.name().to_owned(),
            color: activity_color(a),
        })
        .collect()
}

/// The colour of a Gantt chart's mark of a message a fault touched: black crosses for lost or
/// dropped messages, reddish purple circles for duplicated or delayed ones (apart from every
/// activity's colour).
pub(crate) fn mark_color(kind: FaultMarkKind) -> RGBColor {
    match kind {
        FaultMarkKind::Lost => RGBColor(0x00, 0x00, 0x00),
        FaultMarkKind::Disturbed => RGBColor(0xCC, 0x79, 0xA7),
    }
}

/// The most fault marks a Gantt chart draws; beyond it, every k-th (the note says so).
pub(crate) const MAX_DRAWN_MARKS: usize = 20_000;

/// Height of a figure of `panels` panels.
fn panels_height(panels: usize) -> u32 {
    PLOT_HEIGHT.max(HEADER_HEIGHT + PANEL_HEIGHT * panels as u32)
}

/// About `target` integer ticks in `[lo, hi]`, at multiples of 1, 2 or 5 times a power of ten.
pub(crate) fn integer_ticks(lo: f64, hi: f64, target: u32) -> Vec<f64> {
    let first = lo.ceil().max(0.0);
    let span = (hi.floor() - first).max(0.0);
    let raw = (span / f64::from(target.max(1))).max(1.0);
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = match raw / magnitude {
        n if n <= 1.0 => 1.0,
        n if n <= 2.0 => 2.0,
        n if n <= 5.0 => 5.0,
        _ => 10.0,
    } * magnitude;
    let start = (first / step).ceil() * step;
    let mut ticks = Vec::new();
    let mut t = start;
    while t <= hi {
        ticks.push(t);
        t += step;
    }
    ticks
}

/// The bins whose counts can be written above their bars without two labels overlapping, by
/// increasing value: labels are placed greedily from the smallest count up, each about 8 px
/// per digit wide, at `px_per_unit` pixels per unit of value.
pub(crate) fn count_labels(bins: &[(u64, u64)], px_per_unit: f64) -> Vec<(u64, u64)> {
    let mut order: Vec<&(u64, u64)> = bins.iter().collect();
    order.sort_by_key(|&&(v, c)| (c, v));
    let mut placed: Vec<(f64, f64, (u64, u64))> = Vec::new();
    for &(v, c) in order {
        let half = (c.to_string().len() as f64 * 8.0 + 6.0) / 2.0;
        let center = v as f64 * px_per_unit;
        let (left, right) = (center - half, center + half);
        if placed.iter().all(|&(l, r, _)| right <= l || left >= r) {
            placed.push((left, right, (v, c)));
        }
    }
    let mut out: Vec<(u64, u64)> = placed.into_iter().map(|p| p.2).collect();
    out.sort_unstable();
    out
}

/// Most bars a histogram panel draws (about 4 pixels each). Past this many values between the
/// smallest and the largest, consecutive values are summed into bins of equal width (1, 2 or 5
/// times a power of ten), so that each bar stays several pixels wide: a thousand-worker
/// run's staleness spans thousands of values, most of them held by a few applications, and one
/// bar per value drew slivers narrower than a pixel, labelled `1` where the labels fitted.
pub(crate) const MAX_BARS: u64 = 200;

/// The width of the bins of a histogram of values `lo..=hi`: 1 while the span has at most
/// [`MAX_BARS`] values, else the smallest width of 1, 2 or 5 times a power of ten that makes
/// at most [`MAX_BARS`] bins aligned at its multiples.
pub(crate) fn bin_width(lo: u64, hi: u64) -> u64 {
    let mut magnitude = 1u64;
    loop {
        for step in [1, 2, 5] {
            let width = step * magnitude;
            if hi / width - lo / width < MAX_BARS {
                return width;
            }
        }
        magnitude *= 10;
    }
}

/// `(value, count)` bins, by increasing value, summed into bins of `width` values aligned at
/// its multiples: `(first value of the bin, count)`, empty bins left out.
pub(crate) fn rebin(bins: &[(u64, u64)], width: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &(v, c) in bins {
        let start = v - v % width;
        match out.last_mut() {
            Some(last) if last.0 == start => last.1 += c,
            _ => out.push((start, c)),
        }
    }
    out
}

/// Fewest bars a panel keeps on an x range shared with the other panels, where its own range
/// would give it more ([`panel_axes`]).
pub(crate) const MIN_SHARED_BARS: usize = 10;

/// The x range of a histogram panel, whole bins, and the width of its bins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PanelAxis {
    pub lo: u64,
    pub hi: u64,
    pub width: u64,
}

impl PanelAxis {
    /// The range of values `lo..=hi` in bins of [`bin_width`], widened to whole bins, and to
    /// at least [`MIN_SHARED_BARS`] values (a single value drawn alone filled the panel with
    /// one bar).
    fn of(lo: u64, hi: u64) -> Self {
        let hi = hi.max(lo.saturating_add(MIN_SHARED_BARS as u64 - 1));
        let width = bin_width(lo, hi);
        PanelAxis {
            lo: lo - lo % width,
            hi: hi - hi % width + width - 1,
            width,
        }
    }
}

/// Whether the panels share one x range, and each panel's range. They share it, binned alike
/// so that bars line up and heights compare, unless that would sum some panel's values into
/// fewer than [`MIN_SHARED_BARS`] bars where its own range gives it more: a DASGD row
/// staleness of 0 to 170 beside AD-PSGD's up to 4,201 became two bars of 50 values. Then each
/// panel gets its own range, binned by its own span.
pub(crate) fn panel_axes(panels: &[HistogramPanel]) -> (bool, Vec<PanelAxis>) {
    let span = |p: &HistogramPanel| Some((p.bins.first()?.0, p.bins.last()?.0));
    let (lo, hi) = panels
        .iter()
        .filter_map(span)
        .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)))
        .unwrap_or((0, 0));
    let all = PanelAxis::of(lo, hi);
    let own: Vec<PanelAxis> = panels
        .iter()
        .map(|p| span(p).map_or(all, |(lo, hi)| PanelAxis::of(lo, hi)))
        .collect();
    let readable = panels.iter().zip(&own).all(|(p, own)| {
        let kept = rebin(&p.bins, all.width).len();
        kept >= rebin(&p.bins, own.width).len().min(MIN_SHARED_BARS)
    });
    if readable {
        (true, vec![all; panels.len()])
    } else {
        (false, own)
    }
}

/// One panel of a [`HistogramPanels`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HistogramPanel {
    /// Text above the panel.
    pub caption: String,
    /// Index into the palette.
    pub color: usize,
    /// `(value, count)`, values increasing.
    pub bins: Vec<(u64, u64)>,
}

/// Histograms stacked vertically, one panel per algorithm, sharing the x range where that
/// keeps every panel readable ([`panel_axes`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HistogramPanels {
    pub title: String,
    pub note: String,
    pub x_label: String,
    pub y_label: String,
    pub panels: Vec<HistogramPanel>,
}

impl Figure for HistogramPanels {
    fn size(&self) -> (u32, u32) {
        (PLOT_WIDTH, panels_height(self.panels.len()))
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let (shared, axes) = panel_axes(&self.panels);
        let note = match (shared, axes.first().map_or(1, |a| a.width)) {
            (true, 1) => self.note.clone(),
            (true, width) => format!("{}; each bar sums {width} consecutive values", self.note),
            (false, _) => format!(
                "{}; each panel has its own x range (one shared would hide a panel's shape)",
                self.note
            ),
        };
        let area = header(root, &self.title, &note, &[])?;
        let panels = area.split_evenly((self.panels.len().max(1), 1));
        for (index, ((panel, axis), spot)) in self.panels.iter().zip(&axes).zip(&panels).enumerate()
        {
            let last = index + 1 == self.panels.len();
            let PanelAxis { lo, hi, width } = *axis;
            let x_range = (lo as f64 - 0.6)..(hi as f64 + 0.6);
            let caption = if shared || width == 1 {
                panel.caption.clone()
            } else {
                format!("{}; bars of {width} values", panel.caption)
            };
            let bins = rebin(&panel.bins, width);
            let top = bins.iter().map(|b| b.1).max().unwrap_or(1).max(1) as f64;
            let x_spec = Ticked {
                range: x_range.clone(),
                ticks: integer_ticks(x_range.start, x_range.end, 12),
            };
            let mut chart = ChartBuilder::on(spot)
                .margin(8)
                .margin_right(30)
                .caption(
                    caption.as_str(),
                    (FONT_FAMILY, LABEL_SIZE + 1).into_font().color(&TEXT_COLOR),
                )
                .x_label_area_size(if last { 52 } else { 30 })
                .y_label_area_size(84)
                .build_cartesian_2d(x_spec, 0.0..top * 1.18)?;
            let x_format = |v: &f64| format!("{}", v.round() as i64);
            let y_format = |v: &f64| format_tick(*v);
            let mut mesh = chart.configure_mesh();
            mesh.disable_x_mesh()
                .y_desc(self.y_label.as_str())
                .x_label_formatter(&x_format)
                .y_label_formatter(&y_format)
                .y_labels(5)
                .label_style((FONT_FAMILY, LABEL_SIZE).into_font().color(&TEXT_COLOR))
                .axis_desc_style((FONT_FAMILY, AXIS_DESC_SIZE).into_font().color(&TEXT_COLOR))
                .axis_style(AXIS_COLOR)
                .bold_line_style(GRID_BOLD)
                .light_line_style(WHITE);
            if last {
                mesh.x_desc(self.x_label.as_str());
            }
            mesh.draw()?;
            let color = palette(panel.color);
            let (plot_px, _) = chart.plotting_area().dim_in_pixel();
            let px_per_unit = f64::from(plot_px) / (x_range.end - x_range.start);
            // A bar covers its bin's values, less a tenth of its width on each side, and is at
            // least a pixel wide (one narrower is not drawn at all, however tall).
            let w = width as f64;
            let half = (0.4 * w).max(0.6 / px_per_unit);
            let center = |start: u64| start as f64 + (w - 1.0) / 2.0;
            chart.draw_series(bins.iter().map(|&(v, c)| {
                let v = center(v);
                Rectangle::new([(v - half, 0.0), (v + half, c as f64)], color.filled())
            }))?;
            // Counts above the bars, where they do not overlap: small bars first, since tall
            // ones can be read off the axis. (Placed in units of bins.)
            let by_bin: Vec<(u64, u64)> = bins.iter().map(|&(v, c)| (v / width, c)).collect();
            let labelled = count_labels(&by_bin, px_per_unit * w);
            let style = (FONT_FAMILY, 13)
                .into_font()
                .color(&TEXT_COLOR)
                .pos(Pos::new(HPos::Center, VPos::Bottom));
            chart.draw_series(labelled.into_iter().map(|(b, c)| {
                Text::new(
                    c.to_string(),
                    (center(b * width), c as f64 + top * 0.02),
                    style.clone(),
                )
            }))?;
        }
        Ok(())
    }
}

/// A worker timeline: one row per lane (worker), coloured by activity, x in simulated seconds.
/// The lanes may be a sample of the workers ([`crate::data::sample_lanes`]); the note says so.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Gantt {
    pub title: String,
    pub note: String,
    pub lanes: Vec<Lane>,
    /// The x range, in simulated seconds: the timeline window of every worker, shown or not
    /// (`None`: the extent of the lanes drawn).
    pub window: Option<(f64, f64)>,
    /// Words after some workers' row labels, e.g. `(5, "slow")`.
    pub tags: Vec<(u64, String)>,
}

/// The coordinates a [`Gantt`] is drawn in: simulated seconds across, lanes down.
type GanttChart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, Ticked>>;

impl Gantt {
    /// The height of one lane, in pixels: smaller the more lanes there are, from 26 down to 6.
    fn row_height(&self) -> u32 {
        (2400 / self.lanes.len().max(1) as u32).clamp(6, 26)
    }

    /// The rows of the chart: one per lane, at least one.
    fn rows(&self) -> usize {
        self.lanes.len().max(1)
    }

    /// Where lane `i` is drawn: worker 0 on top, so lane `i` is at y = rows − 1 − i.
    fn lane_y(&self, i: usize) -> f64 {
        (self.rows() - 1 - i) as f64
    }

    /// The keys of the header: the activities (with `down` when a worker was down), then the
    /// kinds of fault marks that some lane has.
    fn keys(&self) -> Vec<Key> {
        let down = self
            .lanes
            .iter()
            .any(|l| l.intervals.iter().any(|i| i.0 == Activity::Down));
        let mut keys = activity_keys(down);
        for (kind, label) in [
            (FaultMarkKind::Lost, "message lost"),
            (FaultMarkKind::Disturbed, "duplicated or delayed"),
        ] {
            if self
                .lanes
                .iter()
                .any(|l| l.marks.iter().any(|m| m.1 == kind))
            {
                keys.push(Key {
                    label: label.to_owned(),
                    color: mark_color(kind),
                });
            }
        }
        keys
    }

    /// The x range: the window, or else the extent of the lanes' intervals (`0..1` when that
    /// is empty).
    fn x_range(&self) -> Range<f64> {
        let intervals = || self.lanes.iter().flat_map(|l| &l.intervals);
        let (start, end) = self.window.unwrap_or_else(|| {
            (
                intervals().map(|i| i.1).fold(f64::INFINITY, f64::min),
                intervals().map(|i| i.2).fold(f64::NEG_INFINITY, f64::max),
            )
        });
        if start < end { start..end } else { 0.0..1.0 }
    }

    /// The y axis: a row per lane, at most 32 of them labelled (every how many it takes).
    fn y_axis(&self) -> Ticked {
        let n = self.rows();
        let every = n.div_ceil(32);
        let y_keys: Vec<f64> = (0..n)
            .filter(|i| i % every == 0)
            .map(|i| self.lane_y(i))
            .collect();
        Ticked {
            range: -0.5..n as f64 - 0.5,
            ticks: y_keys,
        }
    }

    /// The label of the row at `y`: its worker, followed by the worker's tag if it has one
    /// (empty where no lane is).
    fn worker_label(&self, y: f64) -> String {
        let i = self.rows() as i64 - 1 - y.round() as i64;
        usize::try_from(i)
            .ok()
            .and_then(|i| self.lanes.get(i))
            .map_or_else(String::new, |l| {
                match self.tags.iter().find(|(w, _)| *w == l.worker) {
                    Some((_, tag)) => format!("{} {tag}", l.worker),
                    None => l.worker.to_string(),
                }
            })
    }

    /// Draws each lane's intervals in their activities' colours.
    ///
    /// Successive steps are told apart by a thin white line at the start of every compute
    /// interval (and between back-to-back intervals of one activity), as long as there is
    /// room for them (a few pixels per interval): a step that follows a sub-pixel
    /// communication (AD-PSGD's averaging) would otherwise merge with the previous one.
    fn draw_intervals<DB: DrawingBackend>(&self, chart: &mut GanttChart<'_, DB>) -> DrawResult<DB> {
        let separate = self
            .lanes
            .iter()
            .all(|l| l.intervals.len() <= SEPARATED_INTERVALS);
        for (i, lane) in self.lanes.iter().enumerate() {
            let y = self.lane_y(i);
            chart.draw_series(lane.intervals.iter().map(|&(activity, a, b)| {
                Rectangle::new(
                    [(a, y - 0.4), (b, y + 0.4)],
                    activity_color(activity).filled(),
                )
            }))?;
            if separate {
                chart.draw_series(
                    lane.intervals
                        .windows(2)
                        .filter(|w| {
                            (w[0].0 == w[1].0 || w[1].0 == Activity::Compute) && w[0].2 == w[1].1
                        })
                        .map(|w| {
                            PathElement::new(
                                vec![(w[1].1, y - 0.4), (w[1].1, y + 0.4)],
                                WHITE.stroke_width(1),
                            )
                        }),
                )?;
            }
        }
        Ok(())
    }

    /// Draws the fault marks on top of the intervals (a cross for a lost message, a circle for
    /// a disturbed one), thinned evenly beyond [`MAX_DRAWN_MARKS`].
    fn draw_marks<DB: DrawingBackend>(&self, chart: &mut GanttChart<'_, DB>) -> DrawResult<DB> {
        let marks: usize = self.lanes.iter().map(|l| l.marks.len()).sum();
        let every = marks.div_ceil(MAX_DRAWN_MARKS).max(1);
        let mut k = 0usize;
        for (i, lane) in self.lanes.iter().enumerate() {
            let y = self.lane_y(i);
            for &(t, kind) in &lane.marks {
                k += 1;
                if !k.is_multiple_of(every) {
                    continue;
                }
                let style = mark_color(kind).stroke_width(2);
                match kind {
                    FaultMarkKind::Lost => {
                        chart.draw_series(std::iter::once(Cross::new((t, y), 4, style)))?;
                    }
                    FaultMarkKind::Disturbed => {
                        chart.draw_series(std::iter::once(Circle::new((t, y), 3, style)))?;
                    }
                }
            }
        }
        Ok(())
    }
}

impl Figure for Gantt {
    fn size(&self) -> (u32, u32) {
        let rows = self.lanes.len() as u32 * self.row_height();
        (PLOT_WIDTH, PLOT_HEIGHT.max(HEADER_HEIGHT + 90 + rows))
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let area = header(root, &self.title, &self.note, &self.keys())?;
        let worker_of = |y: &f64| self.worker_label(*y);
        let mut chart = ChartBuilder::on(&area)
            .margin(12)
            .margin_right(30)
            .x_label_area_size(58)
            .y_label_area_size(if self.tags.is_empty() { 84 } else { 124 })
            .build_cartesian_2d(self.x_range(), self.y_axis())?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc("simulated time (s)")
            .y_desc("worker")
            .x_label_formatter(&|v| format_tick(*v))
            .y_label_formatter(&worker_of)
            .label_style((FONT_FAMILY, LABEL_SIZE).into_font().color(&TEXT_COLOR))
            .axis_desc_style((FONT_FAMILY, AXIS_DESC_SIZE).into_font().color(&TEXT_COLOR))
            .axis_style(AXIS_COLOR)
            .bold_line_style(GRID_BOLD)
            .light_line_style(WHITE)
            .draw()?;
        self.draw_intervals(&mut chart)?;
        self.draw_marks(&mut chart)
    }
}

/// Bars grouped by worker, one bar per series (algorithm) in each group. With `bin` > 1,
/// each group is `bin` consecutive workers: the bar is their mean, a whisker spans their
/// minimum to their maximum, and the x axis is labelled at round worker positions.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GroupedBars {
    pub title: String,
    pub note: String,
    pub x_label: String,
    pub y_label: String,
    /// The workers' labels (worker ids), left to right.
    pub groups: Vec<u64>,
    /// `(label, palette index, one value per worker)`.
    pub series: Vec<(String, usize, Vec<f64>)>,
    /// Consecutive workers per bar (1: one bar per worker).
    pub bin: usize,
}

impl Figure for GroupedBars {
    fn size(&self) -> (u32, u32) {
        (PLOT_WIDTH, PLOT_HEIGHT)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let keys: Vec<Key> = self
            .series
            .iter()
            .map(|(label, color, _)| Key {
                label: label.clone(),
                color: palette(*color),
            })
            .collect();
        let area = header(root, &self.title, &self.note, &keys)?;
        let n = self.groups.len().max(1);
        let top = self
            .series
            .iter()
            .flat_map(|s| s.2.iter().copied())
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max);
        let top = if top > 0.0 { top * 1.08 } else { 1.0 };
        let mut chart = ChartBuilder::on(&area)
            .margin(12)
            .margin_right(30)
            .x_label_area_size(58)
            .y_label_area_size(84)
            .build_cartesian_2d(worker_axis(n, self.bin), 0.0..top)?;
        let groups = &self.groups;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc(self.x_label.as_str())
            .y_desc(self.y_label.as_str())
            .x_label_formatter(&|v| group_label(groups, *v))
            .y_label_formatter(&|v| format_tick(*v))
            .label_style((FONT_FAMILY, LABEL_SIZE).into_font().color(&TEXT_COLOR))
            .axis_desc_style((FONT_FAMILY, AXIS_DESC_SIZE).into_font().color(&TEXT_COLOR))
            .axis_style(AXIS_COLOR)
            .bold_line_style(GRID_BOLD)
            .light_line_style(WHITE)
            .draw()?;
        let series = self.series.len().max(1) as f64;
        if self.bin <= 1 {
            let width = 0.8 / series;
            for (j, (_, color, values)) in self.series.iter().enumerate() {
                let color = palette(*color);
                chart.draw_series(
                    values
                        .iter()
                        .enumerate()
                        .filter(|(_, v)| v.is_finite())
                        .map(|(i, &v)| {
                            let left = i as f64 - 0.4 + j as f64 * width;
                            Rectangle::new([(left, 0.0), (left + width, v)], color.filled())
                        }),
                )?;
            }
            return Ok(());
        }
        for (j, (_, color, values)) in self.series.iter().enumerate() {
            let color = palette(*color);
            let bars: Vec<(f64, f64, crate::data::BinStat)> = bin_stats(values, self.bin)
                .into_iter()
                .enumerate()
                .filter_map(|(b, stat)| {
                    let (lo, hi) = bin_span(b, self.bin, n);
                    let width = 0.8 * (hi - lo) / series;
                    let left = lo + 0.1 * (hi - lo) + j as f64 * width;
                    Some((left, width, stat?))
                })
                .collect();
            chart.draw_series(bars.iter().map(|&(left, width, stat)| {
                Rectangle::new([(left, 0.0), (left + width, stat.mean)], color.filled())
            }))?;
            chart.draw_series(bars.iter().filter(|b| b.2.min < b.2.max).map(
                |&(left, width, stat)| {
                    let x = left + width / 2.0;
                    let cap = width / 4.0;
                    PathElement::new(
                        vec![
                            (x - cap, stat.min),
                            (x + cap, stat.min),
                            (x, stat.min),
                            (x, stat.max),
                            (x - cap, stat.max),
                            (x + cap, stat.max),
                        ],
                        TEXT_COLOR.stroke_width(1),
                    )
                },
            ))?;
        }
        Ok(())
    }
}

/// An x axis of `n` groups centred on `0..n`, labelled at most about 32 times.
fn group_axis(n: usize) -> Ticked {
    let every = n.div_ceil(32);
    Ticked {
        range: -0.5..n as f64 - 0.5,
        ticks: (0..n)
            .filter(|i| i % every == 0)
            .map(|i| i as f64)
            .collect(),
    }
}

/// An x axis of `n` workers centred on `0..n`: labelled at most about 32 times with one bar per
/// worker (`bin` 1), at about 10 round positions when workers share bars.
fn worker_axis(n: usize, bin: usize) -> Ticked {
    if bin <= 1 {
        return group_axis(n);
    }
    Ticked {
        range: -0.5..n as f64 - 0.5,
        ticks: integer_ticks(0.0, n.saturating_sub(1) as f64, 10),
    }
}

/// The x extent of the `b`-th bin of `bin` workers among `n`, on a [`worker_axis`].
fn bin_span(b: usize, bin: usize, n: usize) -> (f64, f64) {
    let first = b * bin;
    let end = ((b + 1) * bin).min(n);
    (first as f64 - 0.5, end as f64 - 0.5)
}

/// The label of the group at x position `v`.
fn group_label(groups: &[u64], v: f64) -> String {
    usize::try_from(v.round() as i64)
        .ok()
        .and_then(|i| groups.get(i))
        .map_or_else(String::new, u64::to_string)
}

/// One panel of [`StackedPanels`]: each worker's time split into the four activities.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StackedPanel {
    pub caption: String,
    pub workers: Vec<u64>,
    /// Per worker, the fractions in [`Activity::ALL`] order.
    pub fractions: Vec<[f64; 5]>,
    /// Consecutive workers per bar (1: one bar per worker); a bar of several is their mean.
    pub bin: usize,
}

/// Stacked bars of where each worker's time went, one panel per algorithm.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StackedPanels {
    pub title: String,
    pub note: String,
    pub panels: Vec<StackedPanel>,
}

impl Figure for StackedPanels {
    fn size(&self) -> (u32, u32) {
        (PLOT_WIDTH, panels_height(self.panels.len()))
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let down = self
            .panels
            .iter()
            .any(|p| p.fractions.iter().any(|f| f[4] > 0.0));
        let area = header(root, &self.title, &self.note, &activity_keys(down))?;
        let spots = area.split_evenly((self.panels.len().max(1), 1));
        for (index, (panel, spot)) in self.panels.iter().zip(&spots).enumerate() {
            let last = index + 1 == self.panels.len();
            let n = panel.workers.len().max(1);
            let mut chart = ChartBuilder::on(spot)
                .margin(8)
                .margin_right(30)
                .caption(
                    panel.caption.as_str(),
                    (FONT_FAMILY, LABEL_SIZE + 1).into_font().color(&TEXT_COLOR),
                )
                .x_label_area_size(if last { 52 } else { 30 })
                .y_label_area_size(84)
                .build_cartesian_2d(worker_axis(n, panel.bin), 0.0..1.0)?;
            let workers = &panel.workers;
            let x_format = |v: &f64| group_label(workers, *v);
            let y_format = |v: &f64| format!("{:.0}%", v * 100.0);
            let mut mesh = chart.configure_mesh();
            mesh.disable_x_mesh()
                .y_desc("share of time")
                .x_label_formatter(&x_format)
                .y_label_formatter(&y_format)
                .y_labels(5)
                .label_style((FONT_FAMILY, LABEL_SIZE).into_font().color(&TEXT_COLOR))
                .axis_desc_style((FONT_FAMILY, AXIS_DESC_SIZE).into_font().color(&TEXT_COLOR))
                .axis_style(AXIS_COLOR)
                .bold_line_style(GRID_BOLD)
                .light_line_style(WHITE);
            if last {
                mesh.x_desc("worker");
            }
            mesh.draw()?;
            let bin = panel.bin.max(1);
            let mut bars = Vec::new();
            for (b, fractions) in bin_fractions(&panel.fractions, bin).iter().enumerate() {
                let (lo, hi) = bin_span(b, bin, panel.fractions.len());
                let (left, right) = (lo + 0.1 * (hi - lo), hi - 0.1 * (hi - lo));
                let mut bottom = 0.0;
                for (activity, &f) in Activity::ALL.iter().zip(fractions) {
                    if f > 0.0 {
                        bars.push(Rectangle::new(
                            [(left, bottom), (right, (bottom + f).min(1.0))],
                            activity_color(*activity).filled(),
                        ));
                    }
                    bottom += f;
                }
            }
            chart.draw_series(bars)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tall_bar_among_thousands_of_values_is_drawn() {
        // A thousand-worker run: thousands of distinct staleness values, a unit a fraction of a
        // pixel wide, and most applications at one value. That bar must be visible.
        let mut bins: Vec<(u64, u64)> = (0..5000).map(|v| (v, 1)).collect();
        bins[1022].1 = 775_000;
        let figure = HistogramPanels {
            title: "t".into(),
            note: String::new(),
            x_label: "x".into(),
            y_label: "y".into(),
            panels: vec![HistogramPanel {
                caption: "c".into(),
                color: 0,
                bins,
            }],
        };
        assert!(crate::figure::font_registered());
        let (w, h) = figure.size();
        let mut pixels = vec![0u8; w as usize * h as usize * 3];
        crate::figure::draw_on(BitMapBackend::with_buffer(&mut pixels, (w, h)), &figure)
            .expect("draws");
        // The longest vertical run of the bars' colour in any column of pixels.
        let RGBColor(r, g, b) = crate::figure::palette(0);
        let bar = |x: usize, y: usize| {
            let i = (y * w as usize + x) * 3;
            pixels[i..i + 3] == [r, g, b]
        };
        let tallest = (0..w as usize)
            .map(|x| (0..h as usize).filter(|&y| bar(x, y)).count())
            .max()
            .unwrap_or(0);
        assert!(tallest > 200, "the tallest bar drawn is {tallest} px high");
    }

    #[test]
    fn bins_widen_past_two_hundred_values_and_keep_every_count() {
        assert_eq!(bin_width(0, 0), 1);
        assert_eq!(bin_width(0, 199), 1);
        assert_eq!(bin_width(1022, 1221), 1);
        assert_eq!(bin_width(0, 200), 2);
        // The quickstart's row staleness (0 to 1,656): 166 bins of 10.
        assert_eq!(bin_width(0, 1656), 10);
        // A hundred thousand workers' global staleness: 200 bins of 2,000.
        assert_eq!(bin_width(0, 399_996), 2000);
        for (lo, hi) in [
            (0, 201),
            (7, 12_345),
            (1_000_000, 1_000_350),
            (3, u64::MAX / 2),
        ] {
            let w = bin_width(lo, hi);
            assert!(hi / w - lo / w < MAX_BARS, "{lo}..={hi}: width {w}");
            let digits = w / 10u64.pow(w.ilog10());
            assert!(
                [1, 2, 5].contains(&digits),
                "{w} is not 1, 2 or 5 times a power of ten"
            );
        }
        let bins: Vec<(u64, u64)> = (0..5000).map(|v| (v, v % 3 + 1)).collect();
        let binned = rebin(&bins, 50);
        assert_eq!(binned.len(), 100);
        assert!(binned.iter().all(|&(start, _)| start % 50 == 0));
        let total = |b: &[(u64, u64)]| b.iter().map(|x| x.1).sum::<u64>();
        assert_eq!(total(&binned), total(&bins));
        // Empty bins are left out; a width of 1 changes nothing.
        assert_eq!(rebin(&[(3, 1), (250, 2), (299, 4)], 50), [(0, 1), (250, 6)]);
        assert_eq!(rebin(&bins[..7], 1), bins[..7]);
    }

    #[test]
    fn a_binned_histogram_says_so_and_draws_few_bars() {
        let panel = |color, bins| HistogramPanel {
            caption: "c".into(),
            color,
            bins,
        };
        let figure = HistogramPanels {
            title: "t".into(),
            note: "summed over workers".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            panels: vec![
                panel(0, (0..5000).map(|v| (v, 1)).collect()),
                panel(1, vec![(0, 10)]),
            ],
        };
        assert!(crate::figure::font_registered());
        let (w, h) = figure.size();
        let mut svg = String::new();
        crate::figure::draw_on(SVGBackend::with_string(&mut svg, (w, h)), &figure).expect("draws");
        assert!(svg.contains("each bar sums 50 consecutive values"));
        // 100 bars of 50 values and one, where one per value drew 5,001.
        let bars = svg.matches("<rect").count();
        assert!(bars < 150, "{bars} rectangles");
        // A span of two hundred values or fewer is drawn one bar per value, as before.
        let figure = HistogramPanels {
            panels: vec![panel(0, (0..200).map(|v| (v, 1)).collect())],
            ..figure
        };
        let mut svg = String::new();
        crate::figure::draw_on(SVGBackend::with_string(&mut svg, (w, h)), &figure).expect("draws");
        assert!(!svg.contains("each bar sums"));
        assert!(svg.matches("<rect").count() >= 200);
    }

    #[test]
    fn panels_get_their_own_range_where_a_shared_one_would_hide_a_shape() {
        let panel = |bins: Vec<(u64, u64)>| HistogramPanel {
            caption: "c".into(),
            color: 0,
            bins,
        };
        let wide = panel((200..=4201).step_by(7).map(|v| (v, 1)).collect());
        let narrow = panel((0..=170).map(|v| (v, 2)).collect());
        let single = panel(vec![(0, 416)]);
        // Shared (bins of 50), the narrow panel would be 4 bars instead of 171.
        let (shared, axes) = panel_axes(&[single.clone(), wide.clone(), narrow.clone()]);
        assert!(!shared);
        assert_eq!(
            axes,
            [
                PanelAxis {
                    lo: 0,
                    hi: 9,
                    width: 1
                },
                PanelAxis {
                    lo: 200,
                    hi: 4199,
                    width: 20
                },
                PanelAxis {
                    lo: 0,
                    hi: 170,
                    width: 1
                },
            ]
        );
        // A panel of one value loses nothing on a shared range: shared, one width.
        let (shared, axes) = panel_axes(&[single.clone(), wide.clone()]);
        assert!(shared);
        assert_eq!(
            axes,
            [PanelAxis {
                lo: 0,
                hi: 4199,
                width: 50
            }; 2]
        );
        // Panels of spans alike share their range, in bins of one value.
        let (shared, axes) = panel_axes(&[narrow.clone(), panel(vec![(3, 1), (120, 4)])]);
        assert!(shared);
        assert_eq!(
            axes,
            [PanelAxis {
                lo: 0,
                hi: 170,
                width: 1
            }; 2]
        );
        assert_eq!(panel_axes(&[]), (true, vec![]));
        // Drawn: the note and the wide panel's caption say so.
        let figure = HistogramPanels {
            title: "t".into(),
            note: "summed over workers".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            panels: vec![wide, narrow],
        };
        let (w, h) = figure.size();
        let mut svg = String::new();
        crate::figure::draw_on(SVGBackend::with_string(&mut svg, (w, h)), &figure).expect("draws");
        assert!(svg.contains("each panel has its own x range"));
        assert!(svg.contains("c; bars of 20 values"));
        assert!(!svg.contains("each bar sums"));
    }

    #[test]
    fn integer_ticks_are_round() {
        assert_eq!(integer_ticks(-0.6, 3.6, 12), vec![0.0, 1.0, 2.0, 3.0]);
        assert_eq!(
            integer_ticks(-0.6, 40.6, 12),
            vec![0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0, 40.0]
        );
        assert_eq!(integer_ticks(0.4, 0.6, 12), Vec::<f64>::new());
    }

    #[test]
    fn count_labels_do_not_overlap() {
        // 14 px per unit: 3340 (38 px wide) and 1100 side by side overlap; the smaller wins.
        let bins = [(14, 3340), (15, 1100), (60, 76)];
        assert_eq!(count_labels(&bins, 14.0), [(15, 1100), (60, 76)]);
        // Wide bars: every count fits.
        assert_eq!(count_labels(&bins, 100.0), bins);
    }
}
