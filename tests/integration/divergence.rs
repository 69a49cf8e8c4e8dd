//! A run that diverges, trains nothing or would write over earlier results says so: a diverged
//! algorithm stops at the evaluation point that saw it, keeps its outputs and exits 3 (0 with
//! `--keep-going`) while the others still run; a run in which no step completed says that
//! nothing was trained; a directory holding results is refused unless `--force`.

use crate::common;

use common::*;
use dasim_reports::rundir::{RunData, Stopped};

/// The quadratic of `scenarios/quadratic.toml` (f(x) = ½ Σ a_k (x_k − 1)², curvatures in
/// [1, 10]), 16 workers, two algorithms; the learning rate and `[run]` are filled in.
fn quadratic(lr: &str, run: &str, algorithms: &str) -> String {
    format!(
        r#"name = "quadratic"
seed = 42

[cluster]
workers = 16
step_time_ms = 10.0

[network]
bandwidth_gbps = 10.0
latency_us = 5.0

[topology]
kind = "ring"

[model]
kind = "quadratic"
dim = 100
condition = 10.0
noise = 0.1

[optimizer]
lr = {lr}

[run]
{run}
{algorithms}"#
    )
}

const TWO: &str = "[[algorithms]]\nkind = \"allreduce\"\n\n[[algorithms]]\nkind = \"adpsgd\"\n";

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn a_huge_learning_rate_diverges_keeps_its_outputs_and_exits_3() {
    let text = quadratic("1e6", "sim_time_s = 3.0\neval_every_s = 0.1", TWO);
    let (dir, path) = scenario(&text, "q.toml");
    let out = dir.path().join("out");
    let o = dasim_run_flex(&path, &out, &[]);
    let (err, said) = (stderr(&o), stdout(&o));
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    for alg in ["allreduce", "adpsgd"] {
        assert!(
            err.contains(&format!("{alg} diverged at simulated time 0.1 s"))
                && err.contains("last finite loss 196.2369135224947 at 0 s"),
            "{alg}: {err}"
        );
        let line = said.lines().find(|l| l.starts_with(alg)).unwrap();
        assert!(line.contains("DIVERGED: test loss"), "{line}");
    }
    // A valid partial run directory: each algorithm's rows up to the point that saw it, and
    // the second algorithm ran after the first diverged.
    let data = RunData::load(&out).unwrap();
    let summary = data.summary.as_ref().unwrap();
    assert_eq!(summary.runs.len(), 2);
    for run in &summary.runs {
        assert_eq!(run.stopped, Some(Stopped::Diverged), "{}", run.algorithm);
        assert!(
            run.stop_reason.as_deref().unwrap().contains("diverged"),
            "{:?}",
            run.stop_reason
        );
        assert_eq!(run.sim_time_s, 0.1);
        let times: Vec<f64> = data
            .metrics
            .iter()
            .filter(|m| m.algorithm == run.algorithm)
            .map(|m| m.time_s)
            .collect();
        assert_eq!(times, [0.0, 0.1], "{}", run.algorithm);
    }
    let json = std::fs::read_to_string(out.join("summary.json")).unwrap();
    assert!(json.contains("\"stopped\": \"diverged\""), "{json}");
    // The HTML report says so too.
    let o = dasim(&["report", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains(">stopped</td>") && html.contains("<b>DIVERGED</b>"),
        "no stopped row"
    );

    // --keep-going: the same run, exit code 0 (and --force to replace the results).
    let o = dasim_run_flex(&path, &out, &["--keep-going", "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("DIVERGED"));
}

#[test]
fn a_loss_that_overflows_is_divergence_whatever_the_bound() {
    let text = quadratic(
        "1e6",
        "sim_time_s = 3.0\neval_every_s = 0.1\ndivergence_loss = 1e300",
        "[[algorithms]]\nkind = \"allreduce\"\n",
    );
    let (dir, path) = scenario(&text, "q.toml");
    let out = dir.path().join("out");
    let o = dasim_run_flex(&path, &out, &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("held-out loss inf"), "{err}");
    let data = RunData::load(&out).unwrap();
    let last = data.metrics.last().unwrap();
    assert_eq!(last.loss, Some(f64::INFINITY));
    assert_eq!(data.summary.unwrap().runs[0].sim_time_s, last.time_s);
}

#[test]
fn dasgd_on_the_quadratic_with_16_workers_diverges() {
    // The issue's example: every gradient is applied to every model, 16x the updates.
    let text = quadratic(
        "0.01",
        "sim_time_s = 3.0\neval_every_s = 0.1",
        "[[algorithms]]\nkind = \"dasgd\"\n",
    );
    let (dir, path) = scenario(&text, "q.toml");
    let out = dir.path().join("out");
    let o = dasim_run_flex(&path, &out, &[]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let run = &RunData::load(&out).unwrap().summary.unwrap().runs[0];
    assert_eq!(run.stopped, Some(Stopped::Diverged));
    assert!(run.sim_time_s < 3.0, "{}", run.sim_time_s);
}

#[test]
fn a_run_that_converges_has_no_stopped_field() {
    let text = quadratic("0.05", "sim_time_s = 0.3\neval_every_s = 0.1", TWO);
    let (dir, path) = scenario(&text, "q.toml");
    let out = dir.path().join("out");
    let o = dasim_run_flex(&path, &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let json = std::fs::read_to_string(out.join("summary.json")).unwrap();
    assert!(!json.contains("stopped"), "{json}");
    assert!(!stdout(&o).contains("DIVERGED"));
}

#[test]
fn a_bad_divergence_bound_is_located() {
    let text = quadratic(
        "0.05",
        "sim_time_s = 0.3\ndivergence_loss = -1.0",
        "[[algorithms]]\nkind = \"allreduce\"\n",
    );
    let (_dir, path) = scenario(&text, "q.toml");
    let o = dasim(&["validate", path.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("q.toml:") && err.contains("divergence_loss"),
        "{err}"
    );
}

#[test]
fn a_run_in_which_no_step_completes_says_nothing_was_trained() {
    let text = quadratic("0.05", "sim_time_s = 1.0\neval_every_s = 0.5", TWO)
        .replace("step_time_ms = 10.0", "step_time_ms = 5000.0");
    let (dir, path) = scenario(&text, "q.toml");
    let out = dir.path().join("out");
    let o = dasim_run_flex(&path, &out, &[]);
    let (err, said) = (stderr(&o), stdout(&o));
    assert_eq!(o.status.code(), Some(0), "{err}");
    for alg in ["allreduce", "adpsgd"] {
        let line = said.lines().find(|l| l.starts_with(alg)).unwrap();
        assert!(
            line.contains("NO STEP COMPLETED: nothing trained (initial test loss 196.2369)"),
            "{line}"
        );
        assert!(
            err.contains(&format!("warning: {alg}: no worker completed a step")),
            "{err}"
        );
    }
    let summary = RunData::load(&out).unwrap().summary.unwrap();
    for run in &summary.runs {
        assert_eq!(run.worker_steps, 0);
        assert_eq!(run.stopped, Some(Stopped::NoSteps));
    }
    let json = std::fs::read_to_string(out.join("summary.json")).unwrap();
    assert!(json.contains("\"stopped\": \"no-steps\""), "{json}");
}

#[test]
fn an_event_beyond_the_end_of_simulated_time_is_located_at_run() {
    // Steps of 9e9 s and no time limit: the third step would end after the clock's last
    // nanosecond (about 1.8e10 s). A coarse grid keeps the evaluation points few.
    let text = quadratic(
        "0.05",
        "worker_steps = 1000\neval_every_s = 1e9",
        "[[algorithms]]\nkind = \"allreduce\"\n",
    )
    .replace("step_time_ms = 10.0", "step_time_ms = 9e12");
    let (dir, path) = scenario(&text, "q.toml");
    let o = dasim_run_flex(&path, &dir.path().join("out"), &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("q.toml:24:1: run:") && err.contains("after the end of simulated time"),
        "{err}"
    );
}

#[test]
fn a_directory_with_results_is_refused_unless_forced() {
    let text = quadratic(
        "0.05",
        "sim_time_s = 0.2\neval_every_s = 0.1",
        "[[algorithms]]\nkind = \"allreduce\"\n\n[metrics]\nlog_gradients = true\n",
    );
    let (dir, path) = scenario(&text, "q.toml");
    let out = dir.path().join("out");
    run_flex(&path, &out);
    assert!(out.join("gradients.csv").exists());
    let mine = out.join("notes.txt");
    std::fs::write(&mine, "mine").unwrap();
    let before = std::fs::read(out.join("metrics.csv")).unwrap();

    let o = dasim_run_flex(&path, &out, &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{} already holds the results of a run",
            out.display()
        )) && err.contains("--force"),
        "{err}"
    );
    assert_eq!(std::fs::read(out.join("metrics.csv")).unwrap(), before);

    // --force replaces them; a file the new run does not write (no gradient log now) goes,
    // files that are not a run's stay.
    std::fs::write(&path, text.replace("log_gradients = true", "")).unwrap();
    let o = dasim_run_flex(&path, &out, &["--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!out.join("gradients.csv").exists());
    assert!(out.join("summary.json").exists() && out.join("loss.png").exists());
    assert_eq!(std::fs::read_to_string(&mine).unwrap(), "mine");
}

/// A claim about a run that diverged fails, whatever its numbers say: `worker_steps > 0` holds
/// numerically, but the run has no result to hold it against.
#[test]
fn a_claim_on_a_diverged_run_fails_with_the_reason() {
    let claim = "\n[[expect]]\nmetric = \"worker_steps\"\nop = \">\"\nvalue = 0\n";
    let text = quadratic(
        "1e6",
        "sim_time_s = 1.0\neval_every_s = 0.1",
        &format!("[[algorithms]]\nkind = \"allreduce\"\n{claim}"),
    );
    let (_dir, path) = scenario(&text, "q.toml");
    let o = dasim(&["check", path.to_str().unwrap(), "--backend", "flex"]);
    let said = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{said}\n{}", stderr(&o));
    assert!(said.contains("the run stopped early"), "{said}");
    assert!(said.contains("diverged"), "{said}");
}
