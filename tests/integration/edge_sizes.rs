//! The smallest and oddest sizes a scenario may ask for: two workers, a model of one parameter,
//! a minibatch larger than a worker's shard, a delay bound longer than the run. Each is handled
//! correctly (the run trains, every algorithm completes steps) or refused with a reason.

use crate::common;

use common::*;
use dasim_reports::rundir::RunData;

const EVERY_ALGORITHM: &str = r#"
[[algorithms]]
kind = "allreduce"
[[algorithms]]
kind = "local-sgd"
[[algorithms]]
kind = "ps"
[[algorithms]]
kind = "dpsgd"
[[algorithms]]
kind = "adpsgd"
[[algorithms]]
kind = "sgp"
[[algorithms]]
kind = "overlap-sgp"
tau = 1000                     # longer than the run: never binds
[[algorithms]]
kind = "dasgd"
[[algorithms]]
kind = "lap-sgd"
[[algorithms]]
kind = "lpp-sgd"
processes = 1                  # one parameter: one block
"#;

#[test]
fn two_workers_and_one_parameter_train_under_every_algorithm() {
    let text = format!(
        "[cluster]\nworkers = 2\n\n[topology]\nkind = \"ring\"\n\n[model]\nkind = \"quadratic\"\ndim = 1\n\n[optimizer]\nlr = 0.1\n\n[run]\nsim_time_s = 0.3\neval_every_s = 0.1\n{EVERY_ALGORITHM}"
    );
    let (dir, path) = scenario(&text, "tiny.toml");
    let out = dir.path().join("out");
    run_flex(&path, &out);
    let summary = RunData::load(&out).unwrap().summary.unwrap();
    assert_eq!(summary.runs.len(), 10);
    assert_eq!(summary.params, 1);
    for r in &summary.runs {
        assert!(r.stopped.is_none(), "{}: {:?}", r.algorithm, r.stop_reason);
        assert!(
            r.worker_steps >= 40,
            "{}: {} steps",
            r.algorithm,
            r.worker_steps
        );
        // f(x) = a/2 (x - 1)^2 from x = 0: the loss falls from a/2 = 0.5.
        assert!(
            r.final_loss < 0.05,
            "{}: final loss {}",
            r.algorithm,
            r.final_loss
        );
    }
}

#[test]
fn a_minibatch_larger_than_a_shard_is_drawn_with_a_warning() {
    let text = "[cluster]\nworkers = 16\n\n[model]\nkind = \"mlp\"\nhidden = [8]\n\n[data]\nbatch_size = 500\n\n[run]\nsim_time_s = 0.1\n\n[[algorithms]]\nkind = \"allreduce\"\n";
    let (dir, path) = scenario(text, "big-batch.toml");
    let out = dir.path().join("out");
    let o = dasim_run_flex(&path, &out, &[]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(
            "warning: data.batch_size = 500 is larger than the smallest shard (89 samples)"
        ),
        "{err}"
    );
    let summary = RunData::load(&out).unwrap().summary.unwrap();
    // All-reduce rounds of 16 steps, each of 500 samples (some drawn twice or more).
    let run = &summary.runs[0];
    assert!(
        run.worker_steps > 0 && run.worker_steps.is_multiple_of(16),
        "{}",
        run.worker_steps
    );
    assert!((run.epochs - run.worker_steps as f64 * 500.0 / 1438.0).abs() < 1e-9);
}

#[test]
fn more_lpp_processes_than_parameters_is_refused_with_a_reason() {
    let text = "[cluster]\nworkers = 2\n\n[model]\nkind = \"quadratic\"\ndim = 1\n\n[run]\nsim_time_s = 0.1\n\n[[algorithms]]\nkind = \"lpp-sgd\"\nprocesses = 2\n";
    let (_dir, path) = scenario(text, "lpp.toml");
    let o = dasim(&["validate", path.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("algorithms[0].processes"), "{err}");
}
