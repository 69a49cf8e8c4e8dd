//! Kill and resume: a run stopped at any point — killed (abort, SIGKILL) just after a
//! checkpoint, between events, while it writes an algorithm's tables or its summary, before its
//! plots, or interrupted with Ctrl-C — and continued with `dasim run --resume` leaves, on flex,
//! the same files byte for byte as a run that was never stopped (`timings.json`'s wall times
//! aside). And a resume that cannot be exact is refused: a changed scenario, another backend, a
//! directory without a checkpoint.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{dasim, dasim_run_flex, scenario, stderr};

/// Three algorithms with per-event logs and a claim, so that every file is written: streams,
/// tables, `checks.csv`; random jitter, so random streams are mid-sequence at a checkpoint.
fn text(sim_time_s: f64) -> String {
    format!(
        r#"name = "resume"
seed = 5

[cluster]
workers = 6
step_time_ms = 10.0

[[cluster.stragglers]]
kind = "jitter"
workers = "all"
distribution = "gamma"
mean = 1.0
cv = 0.3

[[cluster.stragglers]]
workers = [2]
factor = 3.0

[network]
bandwidth_gbps = 5.0
latency_us = 20.0

[topology]
kind = "ring"

[model]
kind = "mlp"
hidden = [16]

[data]
batch_size = 16

[optimizer]
lr = 0.05
momentum = 0.9

[metrics]
log_gradients = true
log_messages = true

[run]
sim_time_s = {sim_time_s}
eval_every_s = 0.05

[[algorithms]]
kind = "allreduce"

[[algorithms]]
kind = "adpsgd"

[[algorithms]]
kind = "sgp"

[[expect]]
metric = "final_loss"
op = "<"
value = "10"
"#
    )
}

const EVERY: &str = "0.04";

/// The files a run writes that must come out the same; `timings.json` (wall times) and the
/// plots (drawn from these files) aside.
fn outputs(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.ends_with(".csv") || name == "summary.json" || name == "scenario.toml"
        })
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

fn assert_same(expected: &Path, got: &Path, what: &str) {
    let (e, g) = (outputs(expected), outputs(got));
    let names = |v: &[(String, Vec<u8>)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&g), names(&e), "{what}: the files");
    for ((name, a), (_, b)) in e.iter().zip(&g) {
        assert!(
            a == b,
            "{what}: {name} differs from the uninterrupted run's"
        );
    }
    assert!(got.join("timings.json").exists(), "{what}: timings.json");
    assert!(got.join("loss.png").exists(), "{what}: the plots");
    assert!(
        !got.join("checkpoint.bin").exists(),
        "{what}: a finished run keeps no checkpoint"
    );
}

fn resume(dir: &Path) {
    let o = dasim(&["run", "--resume", dir.to_str().unwrap(), "--quiet"]);
    assert!(o.status.success(), "resume failed:\n{}", stderr(&o));
}

/// `dasim run SCENARIO --out DIR` on flex with checkpoints, killed by abort at `point`
/// (`DASIM_CRASH_AT`); fails unless it was.
fn killed_at(path: &Path, dir: &Path, point: &str) {
    let o = Command::new(env!("CARGO_BIN_EXE_dasim"))
        .args([
            "run",
            path.to_str().unwrap(),
            "--out",
            dir.to_str().unwrap(),
        ])
        .args(["--backend", "flex", "--quiet", "--checkpoint-every", EVERY])
        .env("DASIM_CRASH_AT", point)
        .output()
        .unwrap();
    assert!(!o.status.success(), "{point}: the run was not killed");
    assert!(stderr(&o).contains("aborting"), "{point}: {}", stderr(&o));
}

/// The uninterrupted run, with checkpoints and without: the same files.
fn reference(path: &Path, root: &Path) -> std::path::PathBuf {
    let with = root.join("whole");
    let o = dasim_run_flex(path, &with, &["--checkpoint-every", EVERY]);
    assert!(o.status.success(), "{}", stderr(&o));
    let without = root.join("plain");
    let o = dasim_run_flex(path, &without, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_same(&without, &with, "checkpoints taken");
    with
}

#[test]
fn a_run_killed_anywhere_resumes_to_the_same_files() {
    let (tmp, path) = scenario(&text(0.3), "resume.toml");
    let whole = reference(&path, tmp.path());
    // Checkpoints in the first, second and third algorithm; the tables, the summary and the
    // plots of an algorithm being written.
    for point in [
        "checkpoint:1",
        "checkpoint:4",
        "checkpoint:12",
        "checkpoint:20",
        "tables:1",
        "summary:2",
        "tables:3",
        "plots:1",
    ] {
        let dir = tmp.path().join(point.replace(':', "-"));
        killed_at(&path, &dir, point);
        resume(&dir);
        assert_same(&whole, &dir, point);
    }
}

#[test]
fn a_run_killed_twice_resumes_to_the_same_files() {
    let (tmp, path) = scenario(&text(0.3), "resume.toml");
    let whole = reference(&path, tmp.path());
    let dir = tmp.path().join("twice");
    killed_at(&path, &dir, "checkpoint:5");
    // The resumed run is killed too, five checkpoints further on.
    let o = Command::new(env!("CARGO_BIN_EXE_dasim"))
        .args(["run", "--resume", dir.to_str().unwrap(), "--quiet"])
        .env("DASIM_CRASH_AT", "checkpoint:5")
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", stderr(&o));
    resume(&dir);
    assert_same(&whole, &dir, "killed twice");
}

/// Starts a run in the background and waits until its first checkpoint is on disk.
fn started(path: &Path, dir: &Path) -> std::process::Child {
    let child = Command::new(env!("CARGO_BIN_EXE_dasim"))
        .args([
            "run",
            path.to_str().unwrap(),
            "--out",
            dir.to_str().unwrap(),
        ])
        .args(["--backend", "flex", "--quiet", "--checkpoint-every", EVERY])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dir.join("checkpoint.bin").exists() {
        assert!(Instant::now() < deadline, "no checkpoint after 60 s");
        std::thread::sleep(Duration::from_millis(2));
    }
    child
}

#[test]
fn a_run_killed_with_sigkill_resumes_to_the_same_files() {
    // Long enough that the kill lands while it runs.
    let (tmp, path) = scenario(&text(3.0), "resume.toml");
    let whole = reference(&path, tmp.path());
    let dir = tmp.path().join("sigkill");
    let mut child = started(&path, &dir);
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "the run ended before the kill");
    resume(&dir);
    assert_same(&whole, &dir, "SIGKILL");
}

#[test]
fn ctrl_c_writes_a_checkpoint_and_says_how_to_resume() {
    let (tmp, path) = scenario(&text(3.0), "resume.toml");
    let whole = reference(&path, tmp.path());
    let dir = tmp.path().join("sigint");
    let child = started(&path, &dir);
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(
        err.contains(&format!(
            "continue with: dasim run --resume {}",
            dir.display()
        )),
        "{err}"
    );
    assert!(
        !err.contains("error"),
        "an interrupt is not an error: {err}"
    );
    resume(&dir);
    assert_same(&whole, &dir, "Ctrl-C");
}

#[test]
fn a_resume_that_cannot_be_exact_is_refused() {
    let (tmp, path) = scenario(&text(0.3), "resume.toml");
    let dir = tmp.path().join("run");
    killed_at(&path, &dir, "checkpoint:3");
    let metrics = std::fs::read(dir.join("metrics.csv")).unwrap();

    // Another backend than the run's.
    let o = dasim(&[
        "run",
        "--resume",
        dir.to_str().unwrap(),
        "--backend",
        "wgpu",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("resume it with --backend flex"),
        "{}",
        stderr(&o)
    );

    // The scenario changed since.
    std::fs::write(&path, text(0.3).replace("lr = 0.05", "lr = 0.06")).unwrap();
    let o = dasim(&["run", "--resume", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("is not the scenario of the checkpoint") && err.contains("SHA-256"),
        "{err}"
    );
    // Nothing was touched.
    assert_eq!(std::fs::read(dir.join("metrics.csv")).unwrap(), metrics);

    // The scenario is gone.
    std::fs::remove_file(&path).unwrap();
    let o = dasim(&["run", "--resume", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("is gone"), "{}", stderr(&o));

    // A finished run has nothing to continue.
    std::fs::write(&path, text(0.3)).unwrap();
    resume(&dir);
    let o = dasim(&["run", "--resume", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("holds no checkpoint"), "{}", stderr(&o));

    // --resume takes the directory alone.
    let o = dasim(&[
        "run",
        path.to_str().unwrap(),
        "--resume",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // And a non-positive interval is refused before anything is written.
    let fresh = tmp.path().join("fresh");
    let o = dasim_run_flex(&path, &fresh, &["--checkpoint-every", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--checkpoint-every"), "{}", stderr(&o));
    assert!(!fresh.join("metrics.csv").exists());
}
