//! `dasim validate`: every check a run makes before it starts (a [`Launch`]'s plans), and the
//! memory estimate, without running.

use std::path::Path;

use dasim::launch::Source;
use dasim::{Error, Launch, Loaded};
use dasim_models::Execution;

/// Checks the scenario (every point of a sweep) and prints what it describes.
pub fn validate(scenario: &Path) -> dasim::Result<()> {
    if std::fs::read_to_string(scenario).is_ok_and(|t| dasim::sweep::has_sweep(&t)) {
        let (sweep, points) = dasim::sweep::exec::expand(scenario)?;
        for (point, loaded) in &points {
            let launch = Launch::new(Source::Scenario(loaded.clone()));
            launch.plans().map_err(|e| match e {
                Error::Scenario(e) => Error::Scenario(sweep.relocate(point, &e)),
                other => other,
            })?;
        }
        let keys: Vec<&str> = sweep.axes.iter().map(|a| a.key.as_str()).collect();
        println!(
            "{}: ok — a sweep of {} points over {}",
            scenario.display(),
            points.len(),
            keys.join(", ")
        );
        return Ok(());
    }
    let loaded = Loaded::from_file(scenario)?;
    let plan = Launch::new(Source::Scenario(loaded)).plans()?.remove(0);
    let (s, problem) = (&plan.loaded.scenario, &plan.problem);
    let claims = match s.expect.len() {
        0 => String::new(),
        k => format!(", {k} claim(s)"),
    };
    // A model without data says what it is instead of "0 training / 0 test samples".
    let data = if !problem.computes() {
        "timing only: no gradient computed".to_owned()
    } else if !problem.has_data() {
        "no data (the quadratic)".to_owned()
    } else {
        format!(
            "{} training / {} test samples",
            problem.split.train.len(),
            problem.split.test.len()
        )
    };
    let timed = s
        .timed_as
        .as_ref()
        .map_or_else(String::new, |t| format!(", timed as {}", t.describe()));
    println!(
        "{}: ok — {} workers, {} algorithm(s), model with {} parameters, {data}{timed}{claims}",
        scenario.display(),
        s.cluster.workers,
        s.algorithms.len(),
        plan.params(),
    );
    // What `dasim run` would check before it starts (without --max-batch), so that a large run
    // can be sized before it is submitted: on flex, and on a GPU where that differs (a
    // convolutional model's im2col columns), without looking for a GPU.
    let estimate = plan.memory_estimate(Execution::default(), false);
    println!("memory: estimated {estimate}");
    let on_gpu = plan.memory_estimate(Execution::default(), true);
    if on_gpu.total() != estimate.total() {
        println!(
            "memory on a GPU (wgpu): estimated {on_gpu}, with the im2col columns of passes of {} \
             or more requests",
            dasim_models::lenet::IM2COL_MIN_REPLICAS
        );
    }
    Ok(())
}
