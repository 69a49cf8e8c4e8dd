//! `dasim plot`: redraws a run directory in place or elsewhere, overlays several runs with a
//! mean and min–max band, and rejects bad input with the path and exit code 2.

use crate::common;
use crate::images;

use std::fs;
use std::path::Path;

use common::*;
use images::{check_svg, copy_fixture, decode_png, fixture};

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn plot_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".png") || n.ends_with(".svg"))
        .collect();
    names.sort();
    names
}

#[test]
fn redraws_a_run_directory_in_place() {
    let (_tmp, dir) = copy_fixture("run-a");
    let o = dasim(&["plot", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("32 plot files in {}", dir.display())),
        "{}",
        stdout(&o)
    );
    let files = plot_files(&dir);
    assert_eq!(files.len(), 32, "{files:?}");
    for stem in [
        "loss",
        "accuracy_epochs",
        "consensus",
        "staleness",
        "message_age",
        "steps",
        "utilization",
        "timeline_allreduce",
        "pushsum_weights",
    ] {
        let png = decode_png(&fs::read(dir.join(format!("{stem}.png"))).unwrap());
        assert_eq!(png.width, 1000, "{stem}");
        let svg = fs::read_to_string(dir.join(format!("{stem}.svg"))).unwrap();
        check_svg(&svg);
    }

    // Elsewhere with --out, byte for byte the same files.
    redraws_the_same_bytes(&dir, &dir.parent().unwrap().join("elsewhere"), &files);
}

/// `dasim plot dir --out out` writes the plot files `files` of `dir`, each the same bytes.
fn redraws_the_same_bytes(dir: &Path, out: &Path, files: &[String]) {
    let o = dasim(&[
        "plot",
        dir.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(plot_files(out), files);
    for name in files {
        assert!(
            fs::read(dir.join(name)).unwrap() == fs::read(out.join(name)).unwrap(),
            "{name}: not the same bytes as in {}",
            dir.display()
        );
    }
}

#[test]
fn overlays_runs_with_a_band() {
    let out = tempfile::tempdir().unwrap();
    let o = dasim(&[
        "plot",
        fixture("run-a").to_str().unwrap(),
        fixture("run-b").to_str().unwrap(),
        "--out",
        out.path().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        plot_files(out.path()),
        [
            "accuracy.png",
            "accuracy.svg",
            "accuracy_epochs.png",
            "accuracy_epochs.svg",
            "loss.png",
            "loss.svg",
            "loss_epochs.png",
            "loss_epochs.svg"
        ]
    );
    let svg = fs::read_to_string(out.path().join("loss.svg")).unwrap();
    let counts = check_svg(&svg);
    assert_eq!(counts.get("polygon"), Some(&4), "one band per algorithm");
    assert!(svg.contains("adpsgd (2 runs)"));
    assert!(svg.contains("aligned on the evaluation times common to all runs"));
    // The fixtures are untouched.
    assert!(!fixture("run-a").join("loss.png").exists());
}

fn expect_bad_input(args: &[&str], needles: &[&str]) {
    let o = dasim(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: `{n}` not in:\n{err}");
    }
}

#[test]
fn bad_inputs_exit_2_with_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-run");
    expect_bad_input(
        &["plot", missing.to_str().unwrap()],
        &["no-such-run", "no such directory"],
    );
    expect_bad_input(
        &["report", missing.to_str().unwrap()],
        &["no-such-run", "no such directory"],
    );
    expect_bad_input(
        &["plot", tmp.path().to_str().unwrap()],
        &["not a run directory", "dasim run"],
    );

    let (_keep, dir) = copy_fixture("run-a");
    let metrics = dir.join("metrics.csv");
    let text = fs::read_to_string(&metrics).unwrap();
    fs::write(&metrics, text.replacen("adpsgd,0.125,", "adpsgd,soon,", 1)).unwrap();
    let line = 1 + text
        .lines()
        .position(|l| l.starts_with("adpsgd,0.125,"))
        .unwrap();
    let located = format!("{}:{line}:", metrics.display());
    expect_bad_input(
        &["plot", dir.to_str().unwrap()],
        &[&located, "`time_s`", "soon"],
    );
    expect_bad_input(&["report", dir.to_str().unwrap()], &[&located]);
    assert!(
        !dir.join("loss.png").exists(),
        "nothing drawn from a bad file"
    );

    // Several runs need --out; no run at all is a usage error.
    expect_bad_input(
        &[
            "plot",
            fixture("run-a").to_str().unwrap(),
            fixture("run-b").to_str().unwrap(),
        ],
        &["--out"],
    );
    expect_bad_input(&["plot"], &["RUN_DIRS"]);
}

#[test]
fn a_runs_own_plots_are_the_bytes_dasim_plot_draws_from_its_files() {
    // `dasim run` draws from the tables it has just written, still in memory; `dasim plot`
    // reads them back. Several algorithms (SGP's series, AD-PSGD's message buffers, DASGD's
    // message ages), a straggler, a crash with rejoin (down time, faults.csv) and floats of
    // every kind must give the same figures either way.
    let base = SMALL.split("[[algorithms]]").next().unwrap();
    let text = format!(
        "{base}[metrics]\ntimeline_s = [0.0, 0.5]\n\n\
         [[algorithms]]\nkind = \"adpsgd\"\n\n\
         [[algorithms]]\nkind = \"sgp\"\n\n\
         [[algorithms]]\nkind = \"dasgd\"\n\n\
         [algorithms.optimizer]\nlr = 0.005\nmomentum = 0.9\n\n\
         [[faults]]\nkind = \"crash\"\nworkers = [2]\nat_s = 0.1\nrejoin_after_s = 0.15\n"
    );
    let (dir, path) = scenario(&text, "memory.toml");
    let run = dir.path().join("run");
    run_flex(&path, &run);
    assert!(run.join("faults.csv").is_file());
    let files = plot_files(&run);
    assert!(files.len() >= 20, "{files:?}");

    redraws_the_same_bytes(&run, &dir.path().join("redrawn"), &files);
}
