//! `[[faults]]` through the command line: a bad entry is a located error that writes nothing;
//! an all-reduce run with a crashed worker stops as stalled, naming that worker, keeps its
//! outputs and exits 3 (0 with `--keep-going`), while an algorithm that survives the crash
//! (AD-PSGD) runs to its stop in the same scenario.

use crate::common;

use common::*;
use dasim_reports::rundir::{Activity, RunData, Stopped};

/// The quadratic on 8 workers (10 ms steps) on a ring, with `[run]`, the algorithms and the
/// faults filled in.
fn scenario_text(algorithms: &str, faults: &str) -> String {
    format!(
        r#"name = "faults"
seed = 3

[cluster]
workers = 8
step_time_ms = 10.0

[network]
bandwidth_gbps = 10.0
latency_us = 5.0

[topology]
kind = "ring"

[model]
kind = "quadratic"
dim = 16
condition = 10.0
noise = 0.1

[optimizer]
lr = 0.05

[run]
sim_time_s = 0.5
eval_every_s = 0.02
{algorithms}
{faults}"#
    )
}

const ALLREDUCE_AND_ADPSGD: &str =
    "[[algorithms]]\nkind = \"allreduce\"\n\n[[algorithms]]\nkind = \"adpsgd\"\n";

#[test]
fn a_bad_fault_entry_is_located_and_nothing_is_written() {
    let text = scenario_text(
        "[[algorithms]]\nkind = \"allreduce\"\n",
        "[[faults]]\nkind = \"loss\"\nprobability = 1.5\n",
    );
    let line = text.lines().position(|l| l == "probability = 1.5").unwrap() + 1;
    let (dir, path) = scenario(&text, "bad.toml");
    let out = dir.path().join("out");
    for args in [
        vec!["validate", path.to_str().unwrap()],
        vec![
            "run",
            path.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--backend",
            "flex",
            "--quiet",
        ],
    ] {
        let o = dasim(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(&format!("bad.toml:{line}:15")), "{err}");
        assert!(
            err.contains("faults[0].probability: a probability must be in [0, 1], got 1.5"),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    assert!(!out.exists(), "nothing is written");

    // A kind the algorithm refuses is located at the entry's kind, naming the algorithm.
    let text = scenario_text(
        "[[algorithms]]\nkind = \"lap-sgd\"\n",
        "[[faults]]\nkind = \"crash\"\nworkers = [3]\nat_s = 0.05\n",
    );
    let line = text.lines().position(|l| l == "kind = \"crash\"").unwrap() + 1;
    let (_dir, path) = scenario(&text, "bad.toml");
    let o = dasim(&["validate", path.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("bad.toml:{line}:8")), "{err}");
    assert!(
        err.contains(
            "faults[0].kind: lap-sgd (algorithms[0], `lap-sgd`) does not handle crash faults"
        ),
        "{err}"
    );
}

#[test]
fn a_crashed_allreduce_worker_stalls_the_run_naming_it_and_exits_3() {
    let text = scenario_text(
        ALLREDUCE_AND_ADPSGD,
        "[[faults]]\nkind = \"crash\"\nworkers = [3]\nat_s = 0.055\n",
    );
    let (dir, path) = scenario(&text, "crash.toml");
    let out = dir.path().join("out");
    let o = dasim_run_flex(&path, &out, &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("allreduce stalled at simulated time 0.06"),
        "{err}"
    );
    assert!(
        err.contains("worker 0 waits for all-reduce 5, which cannot complete: worker 3 crashed at 0.055 s and never rejoins"),
        "{err}"
    );
    assert!(
        err.contains("worker 3 is down since 0.055 s and never rejoins"),
        "{err}"
    );
    assert!(
        err.contains("its outputs up to that point are kept"),
        "{err}"
    );
    let said = String::from_utf8_lossy(&o.stdout);
    let line = said.lines().find(|l| l.starts_with("allreduce")).unwrap();
    assert!(line.contains("STALLED"), "{line}");

    let data = RunData::load(&out).unwrap();
    let summary = data.summary.as_ref().unwrap();
    let (ar, ad) = (&summary.runs[0], &summary.runs[1]);
    // The stall ended the run just after the crash, long before the 0.5 s limit: five
    // iterations of 10 ms (and a ring of about 70 µs each), then the others finish their sixth
    // step and wait for worker 3.
    assert_eq!(ar.stopped, Some(Stopped::Stalled));
    assert!(ar.sim_time_s < 0.061, "{}", ar.sim_time_s);
    assert_eq!(ar.worker_steps, 5 * 8);
    let f = ar.faults.as_ref().unwrap();
    assert_eq!((f.crashes, f.rejoins), (1, 0));
    assert!(
        f.down_time_s[3] > 0.0 && f.down_time_s[0] == 0.0,
        "{:?}",
        f.down_time_s
    );
    // Its metrics up to the stall are kept.
    let rows: Vec<_> = data
        .metrics
        .iter()
        .filter(|m| m.algorithm == "allreduce")
        .collect();
    assert!(rows.len() >= 3, "{}", rows.len());
    assert!(rows.last().unwrap().time_s <= ar.sim_time_s);
    // AD-PSGD survives: the active neighbours of worker 3 time out when they pick it and ask
    // their other neighbour; it runs to the limit.
    assert_eq!(ad.stopped, None);
    assert_eq!(ad.sim_time_s, 0.5);
    assert!(ad.faults.as_ref().unwrap().algorithm_counts["partner_timeouts"] > 0);

    // --keep-going: the same run exits 0.
    let out2 = dir.path().join("out2");
    let o = dasim_run_flex(&path, &out2, &["--keep-going"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn a_crash_with_rejoin_is_down_time_on_the_timeline_in_utilization_and_on_the_gantt_chart() {
    // Worker 2 is down over [0.1 s, 0.25 s); the timeline window covers the whole run.
    let text = scenario_text(
        "[[algorithms]]\nkind = \"adpsgd\"\n\n[metrics]\ntimeline_s = [0.0, 0.5]\n",
        "[[faults]]\nkind = \"crash\"\nworkers = [2]\nat_s = 0.1\nrejoin_after_s = 0.15\n",
    );
    let (dir, path) = scenario(&text, "down.toml");
    let out = dir.path().join("out");
    run_flex(&path, &out);
    let data = RunData::load(&out).unwrap();

    // timeline.csv: exactly one down interval, worker 2's, with the crash's bounds.
    let down: Vec<_> = data
        .timeline
        .iter()
        .filter(|r| r.activity == Activity::Down)
        .collect();
    assert_eq!(down.len(), 1, "{down:?}");
    assert_eq!(down[0].worker, 2);
    assert_eq!((down[0].start_s, down[0].end_s), (0.1, 0.25));
    // The rest of worker 2's timeline tiles the run around it.
    let mut lane: Vec<_> = data.timeline.iter().filter(|r| r.worker == 2).collect();
    lane.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
    for w in lane.windows(2) {
        assert_eq!(w[0].end_s, w[1].start_s, "{:?} then {:?}", w[0], w[1]);
    }

    // utilization.csv: down_s is the down time, 0 for the others; the activities sum to the run.
    let header = std::fs::read_to_string(out.join("utilization.csv")).unwrap();
    assert!(
        header.contains("blocked_s,idle_s,down_s\n"),
        "the column is written with [[faults]]: {header}"
    );
    for r in &data.utilization {
        let expected = if r.worker == 2 { 0.15 } else { 0.0 };
        assert_eq!(r.down_s, Some(expected), "{r:?}");
        let total = r.compute_s + r.communicate_s + r.blocked_s + r.idle_s + expected;
        assert!((total - 0.5).abs() < 1e-9, "{r:?}: {total}");
    }
    let summary = data.summary.as_ref().unwrap();
    let u = summary.runs[0].utilization;
    let down = u.down.expect("utilization.down with [[faults]]");
    assert!((down - 0.15 / 0.5 / 8.0).abs() < 1e-12, "{down}");
    let sum = u.compute + u.communicate + u.blocked + u.idle + down;
    assert!((sum - 1.0).abs() < 1e-9, "{u:?}");
    let faults = summary.runs[0].faults.as_ref().unwrap();
    assert_eq!(faults.down_time_s[2], 0.15);

    // The Gantt chart draws it, with a `down` legend entry and the faults in its note; so does
    // the utilization plot; the HTML report has a `time down` row.
    assert!(out.join("timeline_adpsgd.png").is_file());
    let svg = std::fs::read_to_string(out.join("timeline_adpsgd.svg")).unwrap();
    assert!(
        svg.contains(">\ndown\n</text>"),
        "the legend names down time"
    );
    assert!(
        svg.contains("#8B0000"),
        "down intervals are drawn in their colour"
    );
    assert!(
        svg.contains("1 crash, 1 rejoin;"),
        "the note counts the faults"
    );
    let svg = std::fs::read_to_string(out.join("utilization.svg")).unwrap();
    assert!(
        svg.contains(">\ndown\n</text>") && svg.contains("down 3.8%"),
        "utilization plot"
    );
    let o = dasim(&["report", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("time down"), "the report's summary table");
}

#[test]
fn down_is_zero_without_crashes_and_absent_without_faults() {
    // A loss entry only: nobody is down, but the run has [[faults]], so down_s is there (0).
    let text = scenario_text(
        "[[algorithms]]\nkind = \"adpsgd\"\n\n[metrics]\ntimeline_s = [0.0, 0.5]\n",
        "[[faults]]\nkind = \"loss\"\nprobability = 0.1\n",
    );
    let (dir, path) = scenario(&text, "loss.toml");
    let out = dir.path().join("out");
    run_flex(&path, &out);
    let data = RunData::load(&out).unwrap();
    assert!(data.utilization.iter().all(|r| r.down_s == Some(0.0)));
    assert!(!data.timeline.iter().any(|r| r.activity == Activity::Down));
    let svg = std::fs::read_to_string(out.join("timeline_adpsgd.svg")).unwrap();
    assert!(
        !svg.contains(">\ndown\n</text>"),
        "no down key without down time"
    );
    // faults.csv: one row per lost message in the window, at its sender; as many as counted
    // (the window covers the run, far fewer than the cap); the chart marks them.
    let lost: Vec<_> = data.faults.iter().filter(|f| f.event == "lost").collect();
    let counted = data.summary.as_ref().unwrap().runs[0]
        .faults
        .as_ref()
        .unwrap()
        .messages_lost;
    assert!(counted > 0);
    assert_eq!(lost.len() as u64, counted);
    assert!(
        lost.iter()
            .all(|f| f.peer.is_some() && f.algorithm == "adpsgd")
    );
    assert!(lost.windows(2).all(|w| w[0].time_s <= w[1].time_s));
    assert!(
        svg.contains(">\nmessage lost\n</text>"),
        "a key for the marks"
    );
    assert!(!svg.contains(">\nduplicated or delayed\n</text>"));

    // Without [[faults]], the column and summary.json's utilization.down are absent.
    let text = scenario_text("[[algorithms]]\nkind = \"adpsgd\"\n", "");
    let (dir, path) = scenario(&text, "plain.toml");
    let out = dir.path().join("out");
    run_flex(&path, &out);
    let csv = std::fs::read_to_string(out.join("utilization.csv")).unwrap();
    assert!(csv.contains("blocked_s,idle_s\n"), "{csv}");
    let json = std::fs::read_to_string(out.join("summary.json")).unwrap();
    assert!(!json.contains("\"down\""), "{json}");
    let data = RunData::load(&out).unwrap();
    assert!(data.utilization.iter().all(|r| r.down_s.is_none()));
    assert!(!out.join("faults.csv").exists());
}
