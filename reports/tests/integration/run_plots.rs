//! Reading a run directory back and drawing it: the data behind each plot checked against
//! hand-computed numbers on the fixtures in `tests/fixtures` (two runs of a 4-worker scenario
//! with all-reduce, AD-PSGD, SGP and DASGD, written by hand to the run-directory contract),
//! then the plot files, the overlay and the report page.

use crate::common;

use std::fs;
use std::path::Path;

use common::{Image, check_svg, copy_fixture, decode_png, fixture};
use dasim_reports::{
    Activity, Error, LogCurve, Metric, MetricRow, RunData, XAxis, band, metric_series, plot_run,
    plot_run_to, plot_runs, range_series, report_html, staleness_histograms, timeline_lanes,
    utilization,
};

fn algs(data: &RunData) -> Vec<&str> {
    data.algorithms.iter().map(String::as_str).collect()
}

#[test]
fn run_directory_reads_back() {
    let data = RunData::load(fixture("run-a")).unwrap();
    assert_eq!(algs(&data), ["allreduce", "adpsgd", "sgp", "dasgd"]);
    assert_eq!(data.metrics.len(), 20);
    let stamp = data.stamp.as_ref().unwrap();
    assert_eq!(stamp.version, "0.1.0");
    assert_eq!(stamp.git, "unknown");
    assert_eq!(stamp.scenario_sha256.len(), 64);
    assert_eq!(
        data.summary.as_ref().unwrap().scenario_sha256,
        stamp.scenario_sha256
    );
    // Empty cells are "not measured".
    let first = &data.metrics[0];
    assert_eq!(first.train_loss, None);
    assert_eq!(first.replica_loss_min, None);
    assert_eq!(first.consensus, Some(0.0));
    assert_eq!(data.scenario_name(), "fixture");
    assert!(
        data.scenario_toml
            .as_ref()
            .unwrap()
            .contains("[[algorithms]]")
    );
}

#[test]
fn convergence_series_are_the_metrics_columns() {
    let data = RunData::load(fixture("run-a")).unwrap();
    let loss = metric_series(&data.metrics, &data.algorithms, XAxis::Time, Metric::Loss);
    assert_eq!(loss.len(), 4);
    assert_eq!(loss[1].label, "adpsgd");
    assert_eq!(
        loss[1].points,
        [
            (0.0, 2.25),
            (0.125, 1.25),
            (0.25, 0.75),
            (0.375, 0.5),
            (0.5, 0.375)
        ]
    );
    let acc = metric_series(
        &data.metrics,
        &data.algorithms,
        XAxis::Epoch,
        Metric::Accuracy,
    );
    assert_eq!(
        acc[3].points,
        [
            (0.0, 0.125),
            (1.0, 0.25),
            (2.0, 0.5),
            (3.0, 0.625),
            (4.0, 0.75)
        ]
    );
    // Train loss is not measured at t = 0.
    let train = metric_series(
        &data.metrics,
        &data.algorithms,
        XAxis::Time,
        Metric::TrainLoss,
    );
    assert_eq!(train[0].points.first(), Some(&(0.125, 1.875)));
    assert_eq!(train[0].points.len(), 4);
    // No suboptimality in this scenario: every series is empty, so the plot is skipped.
    let sub = metric_series(
        &data.metrics,
        &data.algorithms,
        XAxis::Time,
        Metric::Suboptimality,
    );
    assert!(sub.iter().all(|s| s.points.is_empty()));
}

#[test]
fn staleness_histograms_sum_over_workers() {
    let data = RunData::load(fixture("run-a")).unwrap();
    let gradient = staleness_histograms(&data.staleness, &data.algorithms, "global");
    let names: Vec<&str> = gradient.iter().map(|h| h.algorithm.as_str()).collect();
    assert_eq!(names, ["allreduce", "adpsgd", "sgp", "dasgd"]);
    assert_eq!(gradient[0].bins, [(0, 40)]);
    // AD-PSGD: workers 0..3 hold (0:5, 1:3), (0:4, 1:4, 2:1), (0:6, 1:2), (1:1, 3:2).
    assert_eq!(gradient[1].bins, [(0, 15), (1, 10), (2, 1), (3, 2)]);
    let s = gradient[1].stats().unwrap();
    assert_eq!((s.count, s.p99, s.max), (28, 3, 3));
    assert!((s.mean - 18.0 / 28.0).abs() < 1e-12, "{}", s.mean);
    // p99 by nearest rank: rank ceil(0.99 * 17) = 17 of DASGD's 10 + 6 + 1 is the 7.
    let s = gradient[3].stats().unwrap();
    assert_eq!((s.count, s.p99, s.max), (17, 7, 7));
    assert!((s.mean - (20.0 + 24.0 + 7.0) / 17.0).abs() < 1e-12);

    let age = staleness_histograms(&data.staleness, &data.algorithms, "message_age");
    assert_eq!(age.len(), 1);
    assert_eq!(age[0].algorithm, "sgp");
    assert_eq!(age[0].bins, [(1, 11), (2, 5)]);

    // run-b was written before the global measure: its `gradient` rows are the row staleness.
    let old = RunData::load(fixture("run-b")).unwrap();
    assert!(old.staleness.iter().all(|r| r.measure != "gradient"));
    assert!(!staleness_histograms(&old.staleness, &old.algorithms, "row").is_empty());
    assert!(staleness_histograms(&old.staleness, &old.algorithms, "global").is_empty());
}

#[test]
fn consensus_zeros_are_counted_not_dropped() {
    let data = RunData::load(fixture("run-a")).unwrap();
    let series = metric_series(
        &data.metrics,
        &data.algorithms,
        XAxis::Time,
        Metric::Consensus,
    );
    let curves: Vec<LogCurve> = series.iter().map(LogCurve::new).collect();
    assert!(curves[0].all_zero(), "all-reduce keeps replicas equal");
    assert_eq!((curves[0].zeros, curves[0].measured), (5, 5));
    assert_eq!((curves[1].zeros, curves[1].measured), (1, 5));
    assert_eq!(
        curves[1].series.points,
        [(0.125, 0.5), (0.25, 0.25), (0.375, 0.125), (0.5, 0.0625)]
    );
}

#[test]
fn series_utilization_and_timeline() {
    let data = RunData::load(fixture("run-a")).unwrap();
    assert_eq!(
        range_series(&data.series, "sgp", "weight_min", "weight_max"),
        [
            (0.0, 1.0, 1.0),
            (0.125, 0.875, 1.25),
            (0.25, 0.75, 1.5),
            (0.375, 0.625, 1.75),
            (0.5, 0.625, 1.75)
        ]
    );
    let shares = utilization(&data.utilization, "allreduce");
    assert_eq!(shares.len(), 4);
    assert_eq!(shares[0].seconds, [0.125, 0.0625, 0.3125, 0.0, 0.0]);
    assert_eq!(shares[0].fractions, [0.25, 0.125, 0.625, 0.0, 0.0]);
    assert_eq!(
        shares[3].fractions,
        [1.0, 0.0, 0.0, 0.0, 0.0],
        "the straggler never waits"
    );
    assert_eq!(shares[3].steps, 10);

    let lanes = timeline_lanes(&data.timeline, "allreduce");
    assert_eq!(lanes.len(), 4);
    assert_eq!(lanes[0].worker, 0);
    assert_eq!(lanes[0].intervals.len(), 5);
    assert_eq!(lanes[0].intervals[0], (Activity::Compute, 0.0, 0.01));
    assert_eq!(lanes[0].intervals[1], (Activity::Blocked, 0.01, 0.04));
    assert_eq!(lanes[3].intervals.len(), 3);
    let blocked: f64 = data
        .timeline
        .iter()
        .filter(|r| r.algorithm == "allreduce" && r.activity == Activity::Blocked)
        .map(|r| {
            assert_eq!(r.waited_for, Some(3), "everyone waits for the straggler");
            r.end_s - r.start_s
        })
        .sum();
    assert!((blocked - 3.0 * (0.03 + 0.0075)).abs() < 1e-12, "{blocked}");
    assert!(timeline_lanes(&data.timeline, "sgp").is_empty());
}

#[test]
fn band_aligns_runs_on_common_times() {
    let a = RunData::load(fixture("run-a")).unwrap();
    let b = RunData::load(fixture("run-b")).unwrap();
    fn rows<'a>(d: &'a RunData, alg: &str) -> Vec<&'a MetricRow> {
        d.metrics.iter().filter(|r| r.algorithm == alg).collect()
    }
    let runs: Vec<Vec<&MetricRow>> = vec![rows(&a, "allreduce"), rows(&b, "allreduce")];
    let points = band(&runs, Metric::Loss);
    // run-b has one more evaluation (t = 0.625): it is not common, so it is left out.
    let times: Vec<f64> = points.iter().map(|p| p.time_s).collect();
    assert_eq!(times, [0.0, 0.125, 0.25, 0.375, 0.5]);
    let triples: Vec<(f64, f64, f64)> = points.iter().map(|p| (p.min, p.mean, p.max)).collect();
    assert_eq!(
        triples,
        [
            (2.25, 2.25, 2.25),
            (1.5, 1.625, 1.75),
            (1.0, 1.125, 1.25),
            (0.5, 0.625, 0.75),
            (0.25, 0.375, 0.5)
        ]
    );
    // Epochs are averaged across runs at each common time.
    let runs = vec![rows(&a, "adpsgd"), rows(&b, "adpsgd")];
    let epochs: Vec<Option<f64>> = band(&runs, Metric::Accuracy)
        .iter()
        .map(|p| p.epoch)
        .collect();
    assert_eq!(
        epochs,
        [Some(0.0), Some(1.0), Some(2.0), Some(3.0), Some(4.0)]
    );
    // A single run is its own band; no run gives nothing.
    let single = band(&runs[..1], Metric::Loss);
    assert!(single.iter().all(|p| p.min == p.mean && p.mean == p.max));
    assert_eq!(single.len(), 5);
    assert!(band(&[], Metric::Loss).is_empty());
}

const RUN_STEMS: [&str; 17] = [
    "loss",
    "accuracy",
    "loss_epochs",
    "accuracy_epochs",
    "train_loss",
    "replica_loss",
    "replica_accuracy",
    "consensus",
    "pushsum_weights",
    "dasgd_staleness",
    "staleness",
    "message_age",
    "steps",
    "utilization",
    "timeline_allreduce",
    "timeline_adpsgd",
    // The 17th is checked absent below.
    "suboptimality",
];

/// Checks a PNG/SVG pair and returns the SVG's element counts.
fn check_plot(dir: &Path, stem: &str) -> std::collections::BTreeMap<String, usize> {
    let png = fs::read(dir.join(format!("{stem}.png"))).unwrap();
    let image = decode_png(&png);
    assert_eq!(image.width, 1000, "{stem}");
    assert!(image.height >= 620, "{stem}");
    let all = image.region(0, 0, image.width, image.height);
    assert!(Image::distinct(&all) >= 8, "{stem}: too few colours");
    let inked = Image::non_white(&all);
    assert!(
        inked > 0.02 && inked < 0.9,
        "{stem}: {inked} of the pixels are inked"
    );

    let svg = fs::read_to_string(dir.join(format!("{stem}.svg"))).unwrap();
    let counts = check_svg(&svg);
    assert!(
        counts.get("text").copied().unwrap_or(0) >= 5,
        "{stem}: {counts:?}"
    );
    counts
}

#[test]
fn plot_run_writes_every_plot_with_data() {
    let (_tmp, dir) = copy_fixture("run-a");
    let written = plot_run(&dir).unwrap();
    let stems = &RUN_STEMS[..16];
    assert_eq!(written.len(), 2 * stems.len(), "{written:?}");
    for (pair, stem) in written.chunks(2).zip(stems) {
        assert_eq!(pair[0], dir.join(format!("{stem}.png")));
        assert_eq!(pair[1], dir.join(format!("{stem}.svg")));
        check_plot(&dir, stem);
    }
    assert!(!dir.join("suboptimality.png").exists(), "no data, no plot");

    let svg = |stem: &str| fs::read_to_string(dir.join(format!("{stem}.svg"))).unwrap();
    // Lines are polylines, one per algorithm with points, and the legend names them.
    let loss = svg("loss");
    let lines: Vec<usize> = loss
        .split("<polyline")
        .skip(1)
        .map(|p| &p[..p.find('>').unwrap()])
        .filter(|p| p.contains("stroke-width=\"2\""))
        .map(|p| {
            let points = p.split("points=\"").nth(1).unwrap();
            points[..points.find('"').unwrap()]
                .split_whitespace()
                .count()
        })
        .collect();
    // Four curves of five evaluation points, then the four legend keys.
    assert_eq!(lines, [5, 5, 5, 5, 2, 2, 2, 2]);
    for alg in ["allreduce", "adpsgd", "sgp", "dasgd"] {
        assert!(loss.contains(&format!(">\n{alg}\n</text>")), "{alg}");
    }
    assert!(loss.contains("simulated time (s)") && loss.contains("test loss"));
    // All-reduce's consensus distance is exactly 0: named in the legend, not silently dropped.
    let consensus = svg("consensus");
    assert!(consensus.contains("allreduce: exactly 0"), "legend");
    assert!(
        consensus.contains("the first point, 0 (replicas start equal), is not drawn"),
        "the note says where the zeros went"
    );
    // One bar per histogram bin: 1 + 4 + 1 + 3 (plus the counts above them).
    let staleness = svg("staleness");
    assert!(staleness.contains("adpsgd: 28 applications, mean 0.64, p99 3, max 3"));
    assert!(
        staleness.contains("global staleness"),
        "the plot names its measure"
    );
    for count in [">\n40\n<", ">\n15\n<", ">\n10\n<", ">\n6\n<"] {
        assert!(staleness.contains(count), "{count}");
    }
    // Gantt: one rectangle per interval plus the background and the 4 keys.
    let intervals = RunData::load(&dir)
        .unwrap()
        .timeline
        .iter()
        .filter(|r| r.algorithm == "allreduce")
        .count();
    assert_eq!(intervals, 18);
    let rects = check_svg(&svg("timeline_allreduce"))["rect"];
    assert!(rects >= intervals + 4, "{rects}");
    let utilization = svg("utilization");
    assert!(utilization.contains("allreduce: compute 43.8%, communicate 9.4%, blocked 46.9%"));
}

#[test]
fn plots_are_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let a = plot_run_to(&fixture("run-a"), &dir.path().join("a")).unwrap();
    let b = plot_run_to(&fixture("run-a"), &dir.path().join("b")).unwrap();
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(
            fs::read(x).unwrap(),
            fs::read(y).unwrap(),
            "{}",
            x.display()
        );
    }
}

#[test]
fn missing_files_skip_their_plots() {
    // An interrupted run, or one from before the recorder: metrics.csv alone, no stamp,
    // seven columns, NaN where nothing was measured.
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("metrics.csv"),
        "algorithm,time_s,worker_steps,epoch,loss,accuracy,train_loss\n\
         allreduce,0,0,0,2.3,0.1,NaN\n\
         allreduce,0.1,32,0.7,2.2,0.15,2.3\n",
    )
    .unwrap();
    let written = plot_run(dir.path()).unwrap();
    let names: Vec<String> = written
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "loss.png",
            "loss.svg",
            "accuracy.png",
            "accuracy.svg",
            "loss_epochs.png",
            "loss_epochs.svg",
            "accuracy_epochs.png",
            "accuracy_epochs.svg",
            "train_loss.png",
            "train_loss.svg"
        ]
    );
    let html = report_html(&RunData::load(dir.path()).unwrap(), &Default::default()).unwrap();
    assert!(html.contains("No summary.json"));
}

#[test]
fn bad_inputs_name_the_path_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let err = plot_run(&missing).unwrap_err();
    assert!(
        matches!(err, Error::Input { .. }) && err.is_input(),
        "{err:?}"
    );
    assert!(err.to_string().contains("nope") && err.to_string().contains("no such directory"));

    let empty = tmp.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let err = plot_run(&empty).unwrap_err();
    assert!(err.to_string().contains("not a run directory"), "{err}");

    let file = tmp.path().join("file");
    fs::write(&file, "x").unwrap();
    assert!(
        plot_run(&file)
            .unwrap_err()
            .to_string()
            .contains("not a directory")
    );

    // A malformed cell on line 5 of staleness.csv (the stamp is line 1).
    let (_tmp, dir) = copy_fixture("run-a");
    let path = dir.join("staleness.csv");
    let text = fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[4] = "allreduce,gradient,2,zero,10";
    fs::write(&path, lines.join("\n")).unwrap();
    let err = plot_run(&dir).unwrap_err();
    assert!(matches!(err, Error::Format { line: 5, .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.starts_with(&format!("{}:5: ", path.display())),
        "{message}"
    );
    assert!(
        message.contains("`value`") && message.contains("zero"),
        "{message}"
    );

    // A row with a missing field, and a header without a needed column.
    let path = dir.join("utilization.csv");
    fs::write(
        &path,
        "# dasim 0.1.0 git=unknown scenario_sha256=00\nalgorithm,worker,steps\nx,0,1\n",
    )
    .unwrap();
    let err = RunData::load(&dir).unwrap_err();
    assert!(
        matches!(err, Error::Format { line: 5, .. }),
        "staleness first: {err}"
    );
    fs::copy(
        fixture("run-a").join("staleness.csv"),
        dir.join("staleness.csv"),
    )
    .unwrap();
    let err = RunData::load(&dir).unwrap_err();
    assert!(matches!(err, Error::Format { line: 2, .. }), "{err}");
    assert!(err.to_string().contains("compute_s"), "{err}");

    let path = dir.join("summary.json");
    fs::copy(
        fixture("run-a").join("utilization.csv"),
        dir.join("utilization.csv"),
    )
    .unwrap();
    fs::write(&path, "{\n  \"runs\": [\n}\n").unwrap();
    let err = RunData::load(&dir).unwrap_err();
    assert!(matches!(err, Error::Format { line: 3, .. }), "{err}");
    assert!(err.to_string().contains("summary.json"), "{err}");
}

#[test]
fn overlay_draws_mean_and_band() {
    let out = tempfile::tempdir().unwrap();
    let written = plot_runs(&[fixture("run-a"), fixture("run-b")], out.path()).unwrap();
    assert_eq!(written.len(), 8);
    for stem in ["loss", "accuracy", "loss_epochs", "accuracy_epochs"] {
        let counts = check_plot(out.path(), stem);
        // One filled band per algorithm, under its mean line.
        assert_eq!(counts.get("polygon"), Some(&4), "{stem}: {counts:?}");
        let svg = fs::read_to_string(out.path().join(format!("{stem}.svg"))).unwrap();
        assert!(svg.contains("allreduce (2 runs)"), "{stem}");
        assert!(svg.contains("seeds 1, 2"), "{stem}");
    }

    // Runs with no evaluation time in common cannot be aligned.
    let (_tmp, shifted) = copy_fixture("run-b");
    let path = shifted.join("metrics.csv");
    let text = fs::read_to_string(&path).unwrap();
    let moved: Vec<String> = text
        .lines()
        .enumerate()
        .map(|(i, line)| {
            if i < 2 {
                return line.to_owned();
            }
            let mut fields: Vec<String> = line.split(',').map(str::to_owned).collect();
            fields[1] = (fields[1].parse::<f64>().unwrap() + 0.001).to_string();
            fields.join(",")
        })
        .collect();
    fs::write(&path, moved.join("\n")).unwrap();
    let err = plot_runs(&[fixture("run-a"), shifted], out.path()).unwrap_err();
    assert!(err.is_input(), "{err:?}");
    assert!(
        err.to_string().contains("no evaluation time common"),
        "{err}"
    );
}

#[test]
fn report_is_self_contained() {
    let data = RunData::load(fixture("run-a")).unwrap();
    let html = report_html(&data, &Default::default()).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    // The vendored chart library is the only text that names a web address (its banner).
    let text = html.replace(include_str!("../../assets/uPlot.iife.min.js"), "");
    assert!(text.len() < html.len(), "uPlot is inlined");
    for needle in [
        "http:", "https:", " src=", "<img", "<link", "@import", "url(",
    ] {
        assert!(!text.contains(needle), "external reference `{needle}`");
    }
    // Each figure as its data, for the page's charts.
    assert_eq!(
        html.matches("<script type=\"application/json\" data-figure=")
            .count(),
        16
    );
    // One column per algorithm; the summary's figures.
    assert!(html.contains("<th>allreduce</th><th>adpsgd</th><th>sgp</th><th>dasgd</th>"));
    // Short labels with their definition on hover; each value after the baseline (the first
    // column) with its difference to it, and the row's best in bold.
    assert!(html.contains(
        "<tr><td title=\"held-out accuracy at the last evaluation\">test accuracy</td>\
         <td class=\"best\"><b>93.75%</b></td>\
         <td class=\"best\"><b>93.75%</b> <span class=\"ratio\">same</span></td>\
         <td>81.25% <span class=\"ratio\">-12.50 pt</span></td>\
         <td>75.00% <span class=\"ratio\">-18.75 pt</span></td></tr>"
    ));
    assert!(html.contains("× lower</span>"), "a ratio of losses");
    assert!(
        html.contains("0.6429 / 3 / 3"),
        "AD-PSGD staleness mean / p99 / max"
    );
    assert!(html.contains(&data.summary.as_ref().unwrap().scenario_sha256));
    assert!(html.contains("<dt>git revision</dt><dd>unknown</dd>"));
    assert!(html.contains("<pre>name = &quot;fixture&quot;"));
    // Deterministic.
    assert_eq!(html, report_html(&data, &Default::default()).unwrap());
}
