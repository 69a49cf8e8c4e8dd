//! The report's figures as data for the page's own charts: each [`Chart`] becomes a JSON
//! description that `assets/report.js` draws with uPlot (vendored under `assets/`, MIT), with
//! hover values, legend toggles and zoom. The PNG and SVG files of `dasim plot` are drawn from
//! the same [`Chart`]s, so the page and the files show the same data.
//!
//! The JSON holds the values as the figures hold them (no rounding, no resampling), so the
//! page's bytes depend on the run directory alone. Numbers are written by `serde_json`
//! (shortest round-trip form); non-finite values become `null`, which the charts leave out.

use serde_json::{Value, json};

use crate::charts::{
    Gantt, GroupedBars, HistogramPanels, StackedPanels, activity_color, mark_color,
};
use crate::data::FaultMarkKind;
use crate::plot::LineChart;
use crate::rundir::Activity;
use crate::runplots::Chart;

/// uPlot 1.6.32 (`leeoniya/uPlot`, `dist/uPlot.iife.min.js`), MIT licence in
/// `assets/uPlot.LICENSE`.
pub(crate) const UPLOT_JS: &str = include_str!("../assets/uPlot.iife.min.js");
/// uPlot's style sheet (`dist/uPlot.min.css`).
pub(crate) const UPLOT_CSS: &str = include_str!("../assets/uPlot.min.css");
/// The page's code that turns each figure's JSON into uPlot charts.
pub(crate) const REPORT_JS: &str = include_str!("../assets/report.js");

/// `#rrggbb` of a plotters colour.
fn hex(c: plotters::style::RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// `#rrggbb` of the palette's colour `index`.
fn palette_hex(index: usize) -> String {
    hex(crate::figure::palette(index))
}

/// A finite number, or `null`.
fn num(x: f64) -> Value {
    if x.is_finite() { json!(x) } else { Value::Null }
}

/// The JSON description of `chart` (its `kind` says which of the page's renderers draws it).
pub(crate) fn chart_json(chart: &Chart) -> Value {
    match chart {
        Chart::Lines(c) => lines(c),
        Chart::Histograms(c) => histograms(c),
        Chart::Gantt(c) => gantt(c),
        Chart::Bars(c) => bars(c),
        Chart::Stacked(c) => stacked(c),
    }
}

/// The JSON text of `chart`, safe inside a `<script type="application/json">` element (no
/// `</` sequence can close it).
pub(crate) fn chart_script_text(chart: &Chart) -> String {
    chart_json(chart).to_string().replace("</", "<\\/")
}

fn lines(c: &LineChart) -> Value {
    let lines: Vec<Value> = c
        .lines
        .iter()
        .map(|l| {
            json!({
                "label": l.label,
                "color": palette_hex(l.color),
                "dash": l.dashed,
                "x": l.points.iter().map(|p| num(p.0)).collect::<Vec<_>>(),
                "y": l.points.iter().map(|p| num(p.1)).collect::<Vec<_>>(),
            })
        })
        .collect();
    let bands: Vec<Value> = c
        .bands
        .iter()
        .map(|b| {
            json!({
                "color": palette_hex(b.color),
                "x": b.points.iter().map(|p| num(p.0)).collect::<Vec<_>>(),
                "lo": b.points.iter().map(|p| num(p.1)).collect::<Vec<_>>(),
                "hi": b.points.iter().map(|p| num(p.2)).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "kind": "lines",
        "title": c.title,
        "note": c.note,
        "x_label": c.x_label,
        "y_label": c.y_label,
        "log_y": c.log_y,
        "lines": lines,
        "bands": bands,
    })
}

fn histograms(c: &HistogramPanels) -> Value {
    let panels: Vec<Value> = c
        .panels
        .iter()
        .map(|p| {
            json!({
                "caption": p.caption,
                "color": palette_hex(p.color),
                "x": p.bins.iter().map(|b| b.0).collect::<Vec<_>>(),
                "y": p.bins.iter().map(|b| b.1).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "kind": "histograms",
        "title": c.title,
        "note": c.note,
        "x_label": c.x_label,
        "y_label": c.y_label,
        "panels": panels,
    })
}

fn bars(c: &GroupedBars) -> Value {
    let series: Vec<Value> = c
        .series
        .iter()
        .map(|(label, color, values)| {
            json!({
                "label": label,
                "color": palette_hex(*color),
                "values": values.iter().map(|&v| num(v)).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "kind": "bars",
        "title": c.title,
        "note": c.note,
        "x_label": c.x_label,
        "y_label": c.y_label,
        "groups": c.groups,
        "series": series,
    })
}

/// The activities, in [`Activity::ALL`] order, with their colours.
fn activities() -> Vec<Value> {
    Activity::ALL
        .iter()
        .map(|&a| json!({"label": a.name(), "color": hex(activity_color(a))}))
        .collect()
}

fn stacked(c: &StackedPanels) -> Value {
    let panels: Vec<Value> = c
        .panels
        .iter()
        .map(|p| {
            let share = |k: usize| p.fractions.iter().map(|f| num(f[k])).collect::<Vec<_>>();
            json!({
                "caption": p.caption,
                "workers": p.workers,
                "shares": (0..Activity::ALL.len()).map(share).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "kind": "stacked",
        "title": c.title,
        "note": c.note,
        "activities": activities(),
        "panels": panels,
    })
}

fn gantt(c: &Gantt) -> Value {
    let tag = |worker: u64| {
        c.tags
            .iter()
            .find(|(w, _)| *w == worker)
            .map(|(_, t)| t.clone())
    };
    let lanes: Vec<Value> = c
        .lanes
        .iter()
        .map(|l| {
            json!({
                "worker": l.worker,
                "tag": tag(l.worker),
                "intervals": l.intervals.iter()
                    .map(|&(a, s, e)| json!([a as usize, num(s), num(e)]))
                    .collect::<Vec<_>>(),
                "marks": l.marks.iter()
                    .map(|&(t, k)| json!([num(t), mark_index(k)]))
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "kind": "gantt",
        "title": c.title,
        "note": c.note,
        "window": c.window.map(|(s, e)| json!([num(s), num(e)])),
        "activities": activities(),
        "marks": [
            {"label": "message lost", "color": hex(mark_color(FaultMarkKind::Lost))},
            {"label": "duplicated or delayed", "color": hex(mark_color(FaultMarkKind::Disturbed))},
        ],
        "lanes": lanes,
    })
}

fn mark_index(kind: FaultMarkKind) -> usize {
    match kind {
        FaultMarkKind::Lost => 0,
        FaultMarkKind::Disturbed => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::{Band, Line};

    #[test]
    fn lines_keep_every_point_and_drop_non_finite_values() {
        let chart = Chart::Lines(LineChart {
            title: "t".into(),
            lines: vec![Line {
                label: "a</script>".into(),
                points: vec![(0.0, 1.5), (0.25, f64::NAN), (1.0, 0.125)],
                color: 1,
                dashed: true,
            }],
            bands: vec![Band {
                color: 1,
                points: vec![(0.0, 1.0, 2.0)],
            }],
            ..LineChart::default()
        });
        let v = chart_json(&chart);
        assert_eq!(v["kind"], "lines");
        assert_eq!(v["lines"][0]["x"], json!([0.0, 0.25, 1.0]));
        assert_eq!(v["lines"][0]["y"], json!([1.5, null, 0.125]));
        assert_eq!(v["lines"][0]["color"], palette_hex(1));
        assert_eq!(v["lines"][0]["dash"], true);
        assert_eq!(v["bands"][0]["hi"], json!([2.0]));
        let text = chart_script_text(&chart);
        assert!(!text.contains("</"), "{text}");
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back["lines"][0]["label"], "a</script>");
    }

    #[test]
    fn activities_follow_the_outputs_order() {
        let names: Vec<String> = activities()
            .iter()
            .map(|a| a["label"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(names, ["compute", "communicate", "blocked", "idle", "down"]);
    }
}
