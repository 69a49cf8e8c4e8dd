//! `dasim report`: a self-contained HTML page (no external references), checked in headless
//! Chromium: the screenshot shows the plots, and every embedded image decodes.
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

#[test]
fn report_is_self_contained() {
    let tmp = tempfile::tempdir().unwrap();
    let html = fixture_report(&tmp.path().join("r.html"));
    // The page without its embedded images' payloads.
    let mut text = String::new();
    for (i, part) in html.split("base64,").enumerate() {
        text.push_str(if i == 0 {
            part
        } else {
            &part[part.find('"').unwrap()..]
        });
    }
    for needle in [
        "http:", "https:", "//", "<script", "<link", "@import", "url(",
    ] {
        assert!(!text.contains(needle), "external reference `{needle}`");
    }
    // Every src is a data URI.
    for (i, _) in html.match_indices(" src=\"") {
        assert!(html[i..].starts_with(" src=\"data:image/png;base64,"));
    }
    assert_eq!(html.matches("<img ").count(), 16);
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

/// The Chromium binary, or `None` (after printing why) when the check is to be skipped.
fn chromium() -> Option<PathBuf> {
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

    // Every embedded image decodes: a copy of the page reports, once loaded, how many
    // images it has and how many have a natural width.
    let probe = tmp.path().join("probe.html");
    let script = "<script>window.addEventListener('load', function () {\
        var all = Array.prototype.slice.call(document.images);\
        var ok = all.filter(function (i) { return i.complete && i.naturalWidth > 0; });\
        document.body.setAttribute('data-images', all.length + '/' + ok.length);\
        });</script></body>";
    fs::write(&probe, html.replace("</body>", script)).unwrap();
    let dom = headless(
        &chromium,
        &profile,
        &["--dump-dom", "--virtual-time-budget=5000"],
        &probe,
    );
    assert!(
        dom.contains("data-images=\"16/16\""),
        "images did not all load: {}",
        dom.split("data-images=")
            .nth(1)
            .map_or("no data-images attribute", |s| &s[..s.len().min(20)])
    );
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
    assert!(!html.contains("http:") && !html.contains("https:"));
    assert!(
        html.contains("<th>allreduce</th><th>adpsgd</th>"),
        "one column per algorithm"
    );
    assert!(
        html.matches("<img ").count() >= 4,
        "loss and accuracy, against time and epochs"
    );
    for stem in ["loss", "accuracy", "loss_epochs", "accuracy_epochs"] {
        let png = decode_png(&fs::read(out.join(format!("{stem}.png"))).unwrap());
        assert_eq!(png.width, 1000, "{stem}");
    }
}
