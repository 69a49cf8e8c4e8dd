//! Wall time of the quickstart, end to end on the CPU backend: loading the data, both
//! algorithms (all-reduce SGD and AD-PSGD, 16 workers, 3 simulated seconds each) and writing
//! every output. `timings.json` of the run splits each algorithm's wall time into batched
//! gradient passes, evaluation and the rest (engine, bookkeeping, writers).
//!
//! `cargo bench --bench quickstart`

use std::path::Path;

use dasim::{Loaded, RunOptions, run_scenario};
use dasim_models::backend::{BackendChoice, select};

fn main() {
    divan::main();
}

#[divan::bench(sample_count = 5)]
fn quickstart_flex(bencher: divan::Bencher) {
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.toml");
    let loaded = Loaded::from_file(&scenario).expect("the quickstart loads");
    let out = tempfile::tempdir().unwrap();
    let opts = RunOptions {
        backend: select(BackendChoice::Flex).unwrap(),
        out: out.path().to_path_buf(),
        progress: false,
        execution: Default::default(),
        memory_limit: None,
        force: true,
        checkpoint_every: None,
        interrupt: None,
        resume: None,
    };
    bencher.bench(|| run_scenario(&loaded, &opts).expect("the quickstart runs"));
    let summary = run_scenario(&loaded, &opts).unwrap();
    for (r, t) in summary.runs.iter().zip(&summary.timings) {
        eprintln!(
            "{}: wall {:.3} s = gradients {:.3} s + evaluation {:.3} s + other {:.3} s ({:.0}% outside gradient and evaluation math); {} events, {} worker steps",
            r.algorithm,
            t.wall_time_s,
            t.gradient_wall_s,
            t.eval_wall_s,
            t.wall_time_s - t.gradient_wall_s - t.eval_wall_s,
            100.0 * (1.0 - (t.gradient_wall_s + t.eval_wall_s) / t.wall_time_s),
            r.events,
            r.worker_steps
        );
    }
}
