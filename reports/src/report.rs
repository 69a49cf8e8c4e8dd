//! `report.html`: one self-contained page per run directory.
//!
//! The page holds a summary table (one column per algorithm, from `summary.json`), the
//! provenance of the run (dasim version, git revision, SHA-256 of the resolved scenario), every
//! plot of [`crate::plot_run`] embedded as a base64 PNG data URI, and the resolved
//! `scenario.toml`. It references nothing outside itself (no scripts, fonts, style sheets or
//! images to fetch), so it opens offline and can be mailed or archived as one file. The bytes
//! depend only on the run directory's files: no date or host name is written.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::Result;
use crate::figure::{Figure, render};
use crate::fsutil::write_atomic;
use crate::rundir::RunData;
use crate::runplots::run_figures;

/// Writes the report of the run directory `run_dir` to `out` (default file name
/// `report.html`; the parent directory must exist) and returns `out`.
///
/// Fails when `run_dir` is not a run directory or one of its files is malformed (the error
/// names the file and line), or when the page cannot be written.
pub fn write_report(run_dir: &Path, out: &Path) -> Result<PathBuf> {
    let data = RunData::load(run_dir)?;
    let html = report_html(&data)?;
    write_atomic(out, html.as_bytes())?;
    Ok(out.to_path_buf())
}

/// The report page of a loaded run directory, as HTML text.
pub fn report_html(data: &RunData) -> Result<String> {
    let name = data.scenario_name();
    let mut html = String::new();
    let w = &mut html;
    let _ = write!(
        w,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>dasim report: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        escape(&name)
    );
    let _ = writeln!(w, "<h1>{}</h1>", escape(&name));
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
    summary_table(w, data);
    let _ = writeln!(w, "</section>");

    let _ = writeln!(w, "<section id=\"plots\">\n<h2>Plots</h2>");
    if figures.is_empty() {
        let _ = writeln!(w, "<p>No plottable data in this run directory.</p>");
    }
    for f in &figures {
        let rendered = render(&f.chart, &data.dir.join(&f.stem))?;
        let (width, height) = f.chart.size();
        let _ = writeln!(
            w,
            "<figure id=\"fig-{stem}\">\n<img alt=\"{alt}\" width=\"{width}\" height=\"{height}\" \
             src=\"data:image/png;base64,{data}\">\n<figcaption>{alt} \
             <span class=\"file\">({stem}.png)</span></figcaption>\n</figure>",
            stem = escape(&f.stem),
            alt = escape(&f.heading),
            data = base64(&rendered.png),
        );
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
    let _ = writeln!(
        w,
        "<footer>Written by <code>dasim report</code> from the files of the run directory.</footer>\n\
         </body>\n</html>"
    );
    Ok(html)
}

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
thead th { border-bottom: 2px solid #bbb; }
tbody tr:nth-child(even) { background: #f7f7f7; }
figure { margin: 1.5em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.92em; }
.file { color: #999; }
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; font-size: 0.88em; border: 1px solid #e4e4e4; }
footer { margin-top: 3em; color: #888; font-size: 0.85em; }
";

/// The version, revision and scenario hash, and the run's setting.
fn provenance(w: &mut String, data: &RunData) {
    let top = |key: &str| -> Option<String> {
        match data.summary.as_ref()?.get(key)? {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        }
    };
    let stamp = data.stamp.as_ref();
    let mut rows: Vec<(&str, String)> = Vec::new();
    let unknown = || "unknown".to_owned();
    rows.push((
        "dasim version",
        top("dasim_version")
            .or_else(|| stamp.map(|s| s.version.clone()))
            .unwrap_or_else(unknown),
    ));
    rows.push((
        "git revision",
        top("git_revision")
            .or_else(|| stamp.map(|s| s.git.clone()).filter(|g| !g.is_empty()))
            .unwrap_or_else(unknown),
    ));
    rows.push((
        "scenario sha256",
        top("scenario_sha256")
            .or_else(|| {
                stamp
                    .map(|s| s.scenario_sha256.clone())
                    .filter(|h| !h.is_empty())
            })
            .unwrap_or_else(unknown),
    ));
    for (label, key) in [
        ("seed", "seed"),
        ("workers", "workers"),
        ("parameters per replica", "params"),
        ("backend", "backend"),
        ("device", "device"),
    ] {
        if let Some(v) = top(key) {
            rows.push((label, v));
        }
    }
    let _ = writeln!(w, "<dl class=\"meta\">");
    for (label, value) in rows {
        let _ = writeln!(w, "<dt>{}</dt><dd>{}</dd>", escape(label), escape(&value));
    }
    let _ = writeln!(w, "</dl>");
}

/// A row of the summary table: a label and how to read the cell from a run's JSON.
type Cell = fn(&Value) -> Option<String>;

/// The summary table's rows.
fn table_rows() -> Vec<(&'static str, Cell)> {
    fn num(v: &Value, key: &str) -> Option<f64> {
        v.get(key)?.as_f64()
    }
    fn stats(v: &Value, key: &str) -> Option<String> {
        let s = v.get(key)?;
        Some(format!(
            "{} / {} / {} <span class=\"file\">(n = {})</span>",
            fmt_num(s.get("mean")?.as_f64()?),
            fmt_num(s.get("p99")?.as_f64()?),
            fmt_num(s.get("max")?.as_f64()?),
            fmt_int(s.get("count").and_then(Value::as_u64).unwrap_or(0)),
        ))
    }
    fn share(v: &Value, key: &str) -> Option<String> {
        Some(format!(
            "{:.1}%",
            v.get("utilization")?.get(key)?.as_f64()? * 100.0
        ))
    }
    fn target(v: &Value, key: &str) -> Option<String> {
        let t = v.get("time_to_target")?;
        Some(match t.get(key) {
            Some(Value::Number(n)) => fmt_num(n.as_f64()?),
            _ => "—".into(),
        })
    }
    vec![
        ("kind", |v| Some(escape(v.get("kind")?.as_str()?))),
        ("simulated time (s)", |v| num(v, "sim_time_s").map(fmt_num)),
        ("wall time (s)", |v| num(v, "wall_time_s").map(fmt_num)),
        ("events", |v| v.get("events")?.as_u64().map(fmt_int)),
        ("worker steps", |v| {
            v.get("worker_steps")?.as_u64().map(fmt_int)
        }),
        ("steps per simulated second", |v| {
            num(v, "steps_per_sim_s").map(fmt_num)
        }),
        ("epochs", |v| num(v, "epochs").map(fmt_num)),
        ("final test loss", |v| num(v, "final_loss").map(fmt_num)),
        ("final test accuracy", |v| {
            num(v, "final_accuracy").map(|a| format!("{:.2}%", a * 100.0))
        }),
        ("staleness, mean / p99 / max (updates)", |v| {
            stats(v, "staleness")
        }),
        ("message age, mean / p99 / max (iterations)", |v| {
            stats(v, "message_age")
        }),
        ("DASGD staleness between models", |v| {
            let d = v.get("dasgd")?.as_object()?;
            Some(
                d.iter()
                    .map(|(k, x)| {
                        let x = x.as_f64().map_or_else(|| x.to_string(), fmt_num);
                        format!("{} {}", escape(k), escape(&x))
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        }),
        ("final consensus distance", |v| {
            num(v, "final_consensus").map(fmt_num)
        }),
        ("final suboptimality f(x) − f*", |v| {
            num(v, "final_suboptimality").map(fmt_num)
        }),
        ("time to target accuracy (s)", |v| target(v, "accuracy_s")),
        ("time to target loss (s)", |v| target(v, "loss_s")),
        ("messages", |v| v.get("messages")?.as_u64().map(fmt_int)),
        ("bytes sent", |v| {
            v.get("bytes")?.as_u64().map(|b| {
                format!(
                    "{} <span class=\"file\">({})</span>",
                    fmt_int(b),
                    fmt_bytes(b)
                )
            })
        }),
        ("time computing", |v| share(v, "compute")),
        ("time communicating", |v| share(v, "communicate")),
        ("time blocked", |v| share(v, "blocked")),
        ("time idle", |v| share(v, "idle")),
    ]
}

/// The summary table: one column per algorithm; rows no run has are left out. Without
/// `summary.json` (an interrupted run), the last evaluation point of each algorithm stands in.
fn summary_table(w: &mut String, data: &RunData) {
    let runs: Vec<(String, Value)> = data
        .algorithms
        .iter()
        .map(|alg| {
            let run = data
                .summary_run(alg)
                .cloned()
                .unwrap_or_else(|| from_metrics(data, alg));
            (alg.clone(), run)
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
    let _ = write!(w, "<div class=\"scroll\"><table>\n<thead><tr><th></th>");
    for (alg, _) in &runs {
        let _ = write!(w, "<th>{}</th>", escape(&data.legend(alg)));
    }
    let _ = writeln!(w, "</tr></thead>\n<tbody>");
    for (label, cell) in table_rows() {
        let cells: Vec<Option<String>> = runs.iter().map(|(_, run)| cell(run)).collect();
        if cells.iter().all(Option::is_none) {
            continue;
        }
        let _ = write!(w, "<tr><td>{}</td>", escape(label));
        for c in cells {
            let _ = write!(w, "<td>{}</td>", c.unwrap_or_else(|| "—".into()));
        }
        let _ = writeln!(w, "</tr>");
    }
    let _ = writeln!(w, "</tbody>\n</table></div>");
}

/// A stand-in summary of `algorithm` from its last row in `metrics.csv`.
fn from_metrics(data: &RunData, algorithm: &str) -> Value {
    let mut run = serde_json::Map::new();
    if let Some(last) = data.metrics.iter().rev().find(|r| r.algorithm == algorithm) {
        run.insert("sim_time_s".into(), last.time_s.into());
        let mut put = |key: &str, v: Option<f64>| {
            if let Some(v) = v.filter(|v| v.is_finite()) {
                run.insert(key.into(), v.into());
            }
        };
        put("epochs", last.epoch);
        put("final_loss", last.loss);
        put("final_accuracy", last.accuracy);
        put("final_consensus", last.consensus);
        put("final_suboptimality", last.suboptimality);
        if let Some(s) = last.worker_steps {
            run.insert("worker_steps".into(), s.into());
        }
    }
    Value::Object(run)
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
    let decimals = (3 - magnitude.log10().floor() as i32).max(0) as usize;
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

/// Standard base64 (RFC 4648, with padding).
pub(crate) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648() {
        for (input, expected) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), expected, "{input}");
        }
        assert_eq!(base64(&[0xff, 0xfe, 0xfd]), "//79");
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
