//! `dasim report`: a self-contained HTML page (no external references), checked in headless
//! Chromium: the screenshot shows the plots, every figure is drawn and answers the mouse
//! (hover values, legend toggles, zoom), the page makes no request, and the summary's columns
//! fit a 1280-pixel window.
//!
//! The Chromium checks skip with a note when no `chromium` is installed, unless
//! `DASIM_REQUIRE_CHROMIUM` is set (as `tests/run.sh` does after installing it).

use crate::common;
use crate::images;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use images::{Image, decode_png, fixture};

/// Writes the report of the fixture run `run-a` to `out` and returns its text.
fn fixture_report(out: &Path) -> String {
    let o = dasim(&[
        "report",
        fixture("run-a").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(&format!("report in {}", out.display())),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    fs::read_to_string(out).unwrap()
}

/// uPlot, vendored into every report that has a plot; the only text of the page that names a
/// web address (its licence banner).
const UPLOT: &str = include_str!("../../reports/assets/uPlot.iife.min.js");

#[test]
fn report_is_self_contained() {
    let tmp = tempfile::tempdir().unwrap();
    let html = fixture_report(&tmp.path().join("r.html"));
    assert_eq!(html.matches(UPLOT).count(), 1, "uPlot inlined once");
    let text = html.replace(UPLOT, "");
    for needle in [
        "http:",
        "https:",
        "<img",
        "<link",
        "<iframe",
        "@import",
        "url(",
        " src=",
        "fetch(",
        "XMLHttpRequest",
        "WebSocket",
    ] {
        assert!(!text.contains(needle), "external reference `{needle}`");
    }
    // Links only within the page.
    for (i, _) in html.match_indices(" href=\"") {
        assert!(html[i..].starts_with(" href=\"#"), "{}", &html[i..i + 40]);
    }
    // The browser is told to refuse any request whatever the scripts do.
    assert!(
        html.contains(
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        )
    );
    // One figure's data per plot, each valid JSON that names its renderer.
    let figures: Vec<&str> = html
        .split("<script type=\"application/json\" data-figure=\"")
        .skip(1)
        .collect();
    assert_eq!(figures.len(), 16);
    for f in &figures {
        let json = &f[f.find('>').unwrap() + 1..f.find("</script>").unwrap()];
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        let kind = v["kind"].as_str().unwrap();
        assert!(
            ["lines", "histograms", "bars", "stacked", "gantt"].contains(&kind),
            "{kind}"
        );
    }
    assert!(html.contains("<h2>Summary</h2>") && html.contains("<h2>Scenario</h2>"));
    assert!(html.contains("scenario_sha256") || html.contains("scenario sha256"));

    // Default location: RUN_DIR/report.html.
    let run = tmp.path().join("run-a");
    fs::create_dir(&run).unwrap();
    for entry in fs::read_dir(fixture("run-a")).unwrap() {
        let entry = entry.unwrap();
        fs::copy(entry.path(), run.join(entry.file_name())).unwrap();
    }
    let o = dasim(&["report", run.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(fs::read_to_string(run.join("report.html")).unwrap(), html);
}

#[test]
fn baseline_moves_first_and_unknown_baselines_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let first = fixture_report(&tmp.path().join("a.html"));
    let head = |html: &str| {
        let t = &html[html.find("<table class=\"summary\">").unwrap()..];
        t[..t.find("</tr>").unwrap()].to_owned()
    };
    let heads: Vec<String> = head(&first)
        .split("<th>")
        .skip(2)
        .map(|h| h.trim_end_matches("</th>").to_owned())
        .collect();
    assert!(heads.len() >= 2, "{heads:?}");
    let last = heads.last().unwrap();
    let out = tmp.path().join("b.html");
    let o = dasim(&[
        "report",
        fixture("run-a").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--baseline",
        last,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let second = fs::read_to_string(&out).unwrap();
    assert!(
        head(&second).starts_with(&format!(
            "<table class=\"summary\">\n<thead><tr><th></th><th>{last}</th>"
        )),
        "{}",
        head(&second)
    );
    assert!(second.contains(&format!("Ratios are against the first column, {last}")));

    let o = dasim(&[
        "report",
        fixture("run-a").to_str().unwrap(),
        "--out",
        tmp.path().join("c.html").to_str().unwrap(),
        "--baseline",
        "nosuch",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("--baseline nosuch: the run has no such algorithm; its algorithms: "),
        "{e}"
    );
    assert!(!tmp.path().join("c.html").exists());
}

/// The Chromium binary, or `None` (after printing why) when the check is to be skipped.
pub(crate) fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser"].iter().find_map(|name| {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join(name))
                .find(|p| p.is_file())
        })
    });
    if found.is_none() {
        assert!(
            std::env::var_os("DASIM_REQUIRE_CHROMIUM").is_none(),
            "DASIM_REQUIRE_CHROMIUM is set but no chromium is on PATH"
        );
        eprintln!(
            "note: chromium not found; skipping the headless rendering check (install the \
             Debian package `chromium`, or run tests/run.sh)"
        );
    }
    found
}

/// Runs headless Chromium on `page` with `args`; returns stdout.
fn headless(chromium: &Path, profile: &Path, args: &[&str], page: &Path) -> String {
    let o = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    assert!(
        o.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Pixels within `tolerance` of `rgb` on every channel.
fn near(pixels: &[[u8; 3]], rgb: [u8; 3], tolerance: u8) -> usize {
    pixels
        .iter()
        .filter(|p| (0..3).all(|c| p[c].abs_diff(rgb[c]) <= tolerance))
        .count()
}

#[test]
fn report_renders_in_headless_chromium() {
    let Some(chromium) = chromium() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let page = tmp.path().join("report.html");
    let html = fixture_report(&page);

    // Screenshot: the summary table, then the first plot, whose curves are drawn in the
    // palette's blue and vermillion (colours no text of the page uses).
    let shot = tmp.path().join("shot.png");
    let profile = tmp.path().join("profile");
    headless(
        &chromium,
        &profile,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1200,2000",
        ],
        &page,
    );
    let image = decode_png(&fs::read(&shot).expect("chromium wrote the screenshot"));
    assert_eq!((image.width, image.height), (1200, 2000));
    let all = image.region(0, 0, 1200, 2000);
    assert!(
        Image::distinct(&all) > 100,
        "{} colours",
        Image::distinct(&all)
    );
    let ink = Image::non_white(&all);
    assert!(ink > 0.03, "the page is nearly blank: {ink}");
    let blue = near(&all, [0x00, 0x72, 0xB2], 12);
    let vermillion = near(&all, [0xD5, 0x5E, 0x00], 12);
    assert!(
        blue > 300 && vermillion > 300,
        "plot curves not visible: {blue} blue, {vermillion} vermillion pixels"
    );
    // The plot sits in the lower part of the window (below the table), and is not blank.
    let lower = image.region(0, 1000, 1200, 2000);
    assert!(near(&lower, [0x00, 0x72, 0xB2], 12) > 300);
    assert!(Image::distinct(&lower) > 50);

    // The page as a reader uses it: every figure drawn, a value under the cursor, a legend
    // entry that hides its line, a drag that zooms, the timeline's read-out, and no request.
    let dom = probe(&chromium, &profile, &html, INTERACT, "1280,900");
    let attr = |name: &str| attribute(&dom, name);
    assert_eq!(attr("data-drawn"), "16/16", "every figure drawn");
    assert_eq!(
        attr("data-canvas"),
        "ok",
        "every chart has a canvas with pixels"
    );
    let hover = attr("data-hover");
    let values: Vec<&str> = hover.split('|').collect();
    assert!(
        values.len() >= 6 && values.iter().all(|v| v.parse::<f64>().is_ok()),
        "hovering the loss plots shows x and each line's value: {hover}"
    );
    assert_eq!(
        attr("data-toggle"),
        "hidden/shown",
        "a legend click hides, then shows"
    );
    let zoom: Vec<f64> = attr("data-zoom")
        .split('|')
        .map(|v| v.parse().unwrap())
        .collect();
    assert!(
        zoom[2] > zoom[0] && zoom[3] < zoom[1] && zoom[3] > zoom[2],
        "dragging across the plot zooms into that range: {zoom:?}"
    );
    assert_eq!(zoom[4..], zoom[..2], "a double click zooms back out");
    let readout = attr("data-gantt");
    assert!(
        readout.starts_with("worker ") && readout.contains(" s: "),
        "hovering a timeline lane names the interval: {readout}"
    );
    assert_eq!(attr("data-requests"), "0 requests, 0 refused");
}

/// The value of the body's attribute `name` in a page's dumped DOM (empty when absent).
pub(crate) fn attribute(dom: &str, name: &str) -> String {
    dom.split(&format!("{name}=\""))
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap_or_default()
        .replace("&amp;", "&")
}

/// Runs `script` (a function body, called once the page has loaded and drawn) on a copy of
/// the report `html` in a window of `size` (`W,H`), and returns the DOM after it ran. The
/// script reports by setting attributes on the body.
pub(crate) fn probe(
    chromium: &Path,
    profile: &Path,
    html: &str,
    script: &str,
    size: &str,
) -> String {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("probe.html");
    let at = html.rfind("</body>").unwrap();
    let wrapped = format!(
        "{}<script>window.addEventListener('load', function () {{ setTimeout(function () {{\n{script}\n}}, 20); }});</script>\n{}",
        &html[..at],
        &html[at..]
    );
    fs::write(&page, wrapped).unwrap();
    headless(
        chromium,
        profile,
        &[
            "--dump-dom",
            "--virtual-time-budget=8000",
            &format!("--window-size={size}"),
        ],
        &page,
    )
}

/// The interactions of [`report_renders_in_headless_chromium`], as a script for [`probe`].
const INTERACT: &str = r#"
var body = document.body, set = function (k, v) { body.setAttribute(k, v); };
var refused = 0;
document.addEventListener('securitypolicyviolation', function () { refused++; });
var figures = document.querySelectorAll('figure .chart');
var drawn = document.querySelectorAll('figure .chart.drawn');
set('data-drawn', drawn.length + '/' + figures.length);
var canvases = Array.prototype.every.call(drawn, function (c) {
  var cv = c.querySelector('canvas'); return cv && cv.width > 100 && cv.height > 50;
});
set('data-canvas', canvases ? 'ok' : 'missing');
function mouse(target, type, x, y) {
  // uPlot ignores a move without movement while dragging (a stray event of some browsers).
  target.dispatchEvent(new MouseEvent(type, {clientX: x, clientY: y, movementX: 1, bubbles: true,
    button: 0, buttons: type === 'mouseup' ? 0 : 1}));
}
function chart(id) { return window.dasimCharts.filter(function (c) { return c.el.id === id; })[0]; }
function hoverMiddle(c) {
  var b = c.u.over.getBoundingClientRect();
  mouse(c.u.over, 'mouseenter', b.left + b.width / 2, b.top + b.height / 2);
  mouse(c.u.over, 'mousemove', b.left + b.width / 2, b.top + b.height / 2);
}
function legendValues(c) {
  return Array.prototype.map.call(c.el.querySelectorAll('.u-legend .u-series'), function (row) {
    return row.style.display === 'none' ? null : row.querySelector('.u-value').textContent;
  }).filter(function (v) { return v !== null; }).join('|');
}
var loss = chart('chart-loss'), epochs = chart('chart-loss_epochs');
var over = loss.u.over, r = over.getBoundingClientRect();
hoverMiddle(loss);
// Against epochs, the lines' x values differ: each line shows its own nearest point.
hoverMiddle(epochs);
setTimeout(function () {
  set('data-hover', legendValues(loss) + '|' + legendValues(epochs));
  var entry = loss.el.querySelectorAll('.u-legend .u-series')[1].querySelector('.u-label');
  entry.click();
  var hidden = !loss.u.series[1].show;
  entry.click();
  set('data-toggle', (hidden ? 'hidden' : 'visible') + '/' + (loss.u.series[1].show ? 'shown' : 'hidden'));
  var x0 = [loss.u.scales.x.min, loss.u.scales.x.max];
  mouse(over, 'mousedown', r.left + r.width * 0.25, r.top + r.height / 2);
  mouse(over, 'mousemove', r.left + r.width * 0.5, r.top + r.height / 2);
  mouse(document, 'mouseup', r.left + r.width * 0.5, r.top + r.height / 2);
  // uPlot applies a new scale in a micro-task, after the event.
  setTimeout(function () {
    var x1 = [loss.u.scales.x.min, loss.u.scales.x.max];
    over.dispatchEvent(new MouseEvent('dblclick', {bubbles: true}));
    setTimeout(function () {
      var x2 = [loss.u.scales.x.min, loss.u.scales.x.max];
      set('data-zoom', x0.concat(x1, x2).join('|'));
      var gantt = window.dasimCharts.filter(function (c) { return c.el.id.indexOf('chart-timeline') === 0; })[0];
      var g = gantt.u.over.getBoundingClientRect();
      mouse(gantt.u.over, 'mouseenter', g.left + g.width * 0.3, g.top + 10);
      mouse(gantt.u.over, 'mousemove', g.left + g.width * 0.3, g.top + 10);
      setTimeout(function () {
        set('data-gantt', gantt.el.querySelector('.chart-readout').textContent);
        set('data-requests', performance.getEntriesByType('resource').length + ' requests, ' + refused + ' refused');
      }, 50);
    }, 50);
  }, 50);
}, 50);
"#;

/// The summary of a real run fits a laptop's window: at 1280 × 900, every algorithm's column
/// is inside the window and the page does not scroll sideways.
const FITS: &str = r#"
var heads = document.querySelectorAll('table.summary thead th');
var right = Math.max.apply(null, Array.prototype.map.call(heads, function (h) { return h.getBoundingClientRect().right; }));
var doc = document.documentElement;
document.body.setAttribute('data-fit', (heads.length - 1) + ' columns, right ' + Math.ceil(right) + ', window ' + window.innerWidth + ', page ' + doc.scrollWidth);
document.body.setAttribute('data-fits', right <= window.innerWidth && doc.scrollWidth <= window.innerWidth ? 'yes' : 'no');
"#;

/// Every file of a directory with its bytes, by name.
fn files(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

#[test]
fn every_column_fits_at_1280_for_the_quickstart_and_the_papers_side_by_side() {
    let chromium = chromium();
    let tmp = tempfile::tempdir().unwrap();
    // Today's quickstart report (with its plots as PNG data) was 1,181,636 bytes: no larger.
    for (scenario, columns, limit) in [
        ("scenarios/quickstart.toml", 2, 1_181_636),
        ("scenarios/papers/side-by-side.toml", 7, usize::MAX),
    ] {
        let out = tmp.path().join(columns.to_string());
        run_flex(&manifest_dir().join(scenario), &out);
        let before = files(&out);
        let o = dasim(&["report", out.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        let mut after = files(&out);
        let html = String::from_utf8(after.remove("report.html").unwrap()).unwrap();
        assert_eq!(
            after, before,
            "{scenario}: the run directory's other files unchanged"
        );
        assert!(html.len() <= limit, "{scenario}: {} bytes", html.len());
        let Some(chromium) = &chromium else {
            continue;
        };
        let dom = probe(
            chromium,
            &tmp.path().join("profile"),
            &html,
            FITS,
            "1280,900",
        );
        let fit = attribute(&dom, "data-fit");
        assert!(
            fit.starts_with(&format!("{columns} columns")),
            "{scenario}: {fit}"
        );
        assert_eq!(attribute(&dom, "data-fits"), "yes", "{scenario}: {fit}");
    }
}

#[test]
fn report_of_a_real_run() {
    // A tiny real run (the CLI tests' scenario): the report and the plots come from the files
    // `dasim run` wrote, whatever they are.
    let (dir, path) = scenario(SMALL, "small.toml");
    let out = dir.path().join("out");
    run_flex(&path, &out);
    let o = dasim(&["plot", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = dasim(&["report", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = fs::read_to_string(out.join("report.html")).unwrap();
    let text = html.replace(UPLOT, "");
    assert!(!text.contains("http:") && !text.contains("https:"));
    assert!(
        html.contains("<th>allreduce</th><th>adpsgd</th>"),
        "one column per algorithm"
    );
    assert!(
        html.matches("data-figure=\"").count() >= 4,
        "loss and accuracy, against time and epochs"
    );
    for stem in ["loss", "accuracy", "loss_epochs", "accuracy_epochs"] {
        let png = decode_png(&fs::read(out.join(format!("{stem}.png"))).unwrap());
        assert_eq!(png.width, 1000, "{stem}");
    }
}
