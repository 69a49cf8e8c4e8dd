//! Wall time of the quickstart, end to end on the CPU backend: loading the data, both
//! algorithms (all-reduce SGD and AD-PSGD, 16 workers, 3 simulated seconds each) and writing
//! every output. `timings.json` of the run splits each algorithm's wall time into batched
//! gradient passes, evaluation and the rest (engine, bookkeeping, writers).
//!
//! `cargo bench --bench quickstart`

use std::path::Path;

use dasim::launch::{Sink, Source, Threads};
use dasim::simulation::{Results, Silent};
use dasim::{Launch, Loaded};
use dasim_models::BackendChoice;

fn main() {
    divan::main();
}

#[divan::bench(sample_count = 5)]
fn quickstart_flex(bencher: divan::Bencher) {
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.toml");
    let loaded = Loaded::from_file(&scenario).expect("the quickstart loads");
    let out = tempfile::tempdir().unwrap();
    let run = || -> dasim::Result<Results> {
        let launch = Launch {
            backend: BackendChoice::Flex,
            threads: Threads::Own(Some(1)),
            sink: Sink::Dir {
                out: out.path().to_path_buf(),
                force: true,
                plots: true,
            },
            ..Launch::new(Source::Scenario(loaded.clone()))
        };
        launch.start()?.prepare()?.run(0, &mut Silent, None)
    };
    bencher.bench(|| run().expect("the quickstart runs"));
    let summary = run().unwrap();
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
