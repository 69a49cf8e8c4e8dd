//! Per-worker plots at 1,024 workers: the Gantt chart shows a bounded sample of rows (the
//! slowest and fastest workers among them), the steps and utilization charts bin consecutive
//! workers, and each says so in its note; with 8 workers every worker is drawn as before.
//!
//! The run directories are generated: two algorithms, `allreduce` (every worker takes the same
//! steps, worker 5 computes 4× longer) and `adpsgd` (worker 5 takes the fewest steps, worker
//! 777 the most).

use crate::common;

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::time::Instant;

use common::{check_svg, decode_png};
use dasim_reports::{GANTT_MAX_ROWS, plot_run};

const STAMP: &str = "# dasim 0.1.0 git=unknown scenario_sha256=00\n";
/// Steps of each worker in the timeline window.
const WINDOW_STEPS: u64 = 10;

/// `(steps over the run, compute seconds per step)` of `worker` under `algorithm`.
fn speed(algorithm: &str, worker: u64) -> (u64, f64) {
    match (algorithm, worker) {
        ("allreduce", 5) => (100, 0.04),
        ("allreduce", _) => (100, 0.01),
        ("adpsgd", 5) => (25, 0.04),
        ("adpsgd", 777) => (150, 0.006),
        (_, w) => (90 + w % 11, 0.01),
    }
}

/// Writes a run directory of `workers` workers into `dir`.
fn write_run(dir: &Path, workers: u64) {
    fs::create_dir_all(dir).unwrap();
    let algorithms = ["allreduce", "adpsgd"];
    let mut metrics = format!("{STAMP}algorithm,time_s,worker_steps,epoch,loss,accuracy\n");
    let mut utilization =
        format!("{STAMP}algorithm,worker,steps,compute_s,communicate_s,blocked_s,idle_s\n");
    let mut timeline = format!("{STAMP}algorithm,worker,activity,start_s,end_s,waited_for\n");
    for alg in algorithms {
        for (i, t) in [0.0, 0.5, 1.0].iter().enumerate() {
            let steps = i as u64 * 50 * workers;
            writeln!(metrics, "{alg},{t},{steps},{i},{},0.5", 2.0 / (1.0 + t)).unwrap();
        }
        for w in 0..workers {
            let (steps, per_step) = speed(alg, w);
            let compute = steps as f64 * per_step;
            writeln!(
                utilization,
                "{alg},{w},{steps},{compute},{},{},0",
                steps as f64 * 0.001,
                (1.0 - compute - steps as f64 * 0.001).max(0.0)
            )
            .unwrap();
            let mut t = 0.0f64;
            for _ in 0..WINDOW_STEPS {
                let (a, b) = (t, t + per_step);
                writeln!(timeline, "{alg},{w},compute,{a},{b},").unwrap();
                writeln!(timeline, "{alg},{w},communicate,{b},{},", b + 0.001).unwrap();
                t = b + 0.001;
            }
        }
    }
    fs::write(dir.join("metrics.csv"), metrics).unwrap();
    fs::write(dir.join("utilization.csv"), utilization).unwrap();
    fs::write(dir.join("timeline.csv"), timeline).unwrap();
}

/// The texts of an SVG's `<text>` elements.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .map(|t| {
            let body = &t[t.find('>').unwrap() + 1..];
            body[..body.find("</text>").unwrap()].trim().to_owned()
        })
        .collect()
}

/// The texts right-aligned against the y axis: a Gantt chart's row labels.
fn row_labels(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter(|t| t[..t.find('>').unwrap()].contains("text-anchor=\"end\""))
        .map(|t| {
            let body = &t[t.find('>').unwrap() + 1..];
            body[..body.find("</text>").unwrap()].trim().to_owned()
        })
        .collect()
}

/// The note of a chart, its wrapped lines joined.
fn note(svg: &str) -> String {
    texts(svg)
        .into_iter()
        .skip(1)
        .take_while(|t| !["compute", "allreduce"].contains(&t.as_str()))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn plots_of_1024_workers_are_bounded_and_say_so() {
    let tmp = tempfile::tempdir().unwrap();
    // DASIM_PLOT_PREVIEW=DIR keeps the plots in DIR/run-1024, to look at them.
    let dir = std::env::var("DASIM_PLOT_PREVIEW").map_or_else(
        |_| tmp.path().join("run"),
        |d| Path::new(&d).join("run-1024"),
    );
    write_run(&dir, 1024);
    let started = Instant::now();
    plot_run(&dir).unwrap();
    eprintln!("plot_run of 1,024 workers: {:?}", started.elapsed());
    let svg = |stem: &str| fs::read_to_string(dir.join(format!("{stem}.svg"))).unwrap();

    for alg in ["allreduce", "adpsgd"] {
        let stem = format!("timeline_{alg}");
        let timeline = svg(&stem);
        let note = note(&timeline);
        assert!(note.contains("32 of 1,024 workers"), "{note}");
        // One rectangle per interval drawn, the background and the 4 keys: at most the bound's
        // lanes.
        let rects = check_svg(&timeline)["rect"];
        let per_lane = 2 * WINDOW_STEPS as usize;
        assert!(
            rects > 20 * per_lane && rects <= GANTT_MAX_ROWS * per_lane + 5,
            "{alg}: {rects} rectangles"
        );
        // One label per row, in worker order; worker 5, the slowest under both algorithms, is
        // among them.
        let labels = row_labels(&timeline);
        assert_eq!(labels.len(), GANTT_MAX_ROWS, "{alg}: {labels:?}");
        let workers: Vec<u64> = labels
            .iter()
            .map(|t| t.split(' ').next().unwrap().parse().unwrap())
            .collect();
        assert!(workers.windows(2).all(|w| w[0] < w[1]), "{workers:?}");
        assert!(labels.iter().any(|t| t == "5 slow"), "{alg}: {labels:?}");
        let png = decode_png(&fs::read(dir.join(format!("{stem}.png"))).unwrap());
        assert!(png.height <= 1100, "{alg}: {} px tall", png.height);
    }
    let adpsgd = note(&svg("timeline_adpsgd"));
    assert!(adpsgd.contains("the 4 slowest (5, "), "{adpsgd}");
    assert!(adpsgd.contains("the 4 fastest (777, "), "{adpsgd}");
    assert!(svg("timeline_adpsgd").contains(">\n777 fast\n</text>"));
    // All-reduce: equal steps, and worker 5 computes longest.
    let allreduce = note(&svg("timeline_allreduce"));
    assert!(
        allreduce.contains("the slowest (5) by local steps"),
        "{allreduce}"
    );

    // Steps: 64 bins of 16 workers, two bars each, and whiskers.
    let steps = svg("steps");
    let note_text = note(&steps);
    assert!(
        note_text.contains("1,024 workers in 64 bars of 16 consecutive workers"),
        "{note_text}"
    );
    let counts = check_svg(&steps);
    assert!(counts["rect"] <= 2 * 64 + 5, "{counts:?}");
    assert!(counts["rect"] >= 2 * 64, "{counts:?}");
    // Utilization: 64 bins per panel, up to 4 activities each.
    let utilization = svg("utilization");
    let note_text = note(&utilization);
    assert!(
        note_text.contains("1,024 workers in 64 bars of 16 consecutive workers"),
        "{note_text}"
    );
    assert!(check_svg(&utilization)["rect"] <= 2 * 64 * 4 + 5);
}

#[test]
fn plots_of_8_workers_show_every_worker() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::env::var("DASIM_PLOT_PREVIEW")
        .map_or_else(|_| tmp.path().join("run"), |d| Path::new(&d).join("run-8"));
    write_run(&dir, 8);
    plot_run(&dir).unwrap();
    let svg = |stem: &str| fs::read_to_string(dir.join(format!("{stem}.svg"))).unwrap();
    for alg in ["allreduce", "adpsgd"] {
        let timeline = svg(&format!("timeline_{alg}"));
        assert!(note(&timeline).ends_with("one row per worker"), "{alg}");
        assert_eq!(
            row_labels(&timeline),
            ["0", "1", "2", "3", "4", "5", "6", "7"],
            "{alg}"
        );
        let rects = check_svg(&timeline)["rect"];
        assert!(rects >= 8 * 2 * WINDOW_STEPS as usize + 4, "{rects}");
    }
    let steps = svg("steps");
    assert_eq!(
        note(&steps),
        "gradients each worker computed and applied over the whole run"
    );
    // One bar per worker and algorithm, every worker labelled.
    assert!(check_svg(&steps)["rect"] >= 16);
    let labels = texts(&steps);
    for w in 0..8 {
        assert!(labels.contains(&w.to_string()), "worker {w}");
    }
    assert!(!note(&svg("utilization")).contains("bars of"));
}
