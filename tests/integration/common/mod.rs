//! Helpers of the end-to-end tests: write a scenario to a temporary directory, run the binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A small scenario in the quickstart's shape: fast enough for a test, real gradients.
pub const SMALL: &str = r#"name = "small"
seed = 7

[cluster]
workers = 8
step_time_ms = 10.0

[[cluster.stragglers]]
workers = [3]
factor = 4.0

[network]
bandwidth_gbps = 10.0
latency_us = 5.0

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

[run]
sim_time_s = 0.5
eval_every_s = 0.1

[[algorithms]]
kind = "allreduce"

[[algorithms]]
kind = "adpsgd"
"#;

/// Writes `text` as `name` in a fresh temporary directory.
pub fn scenario(text: &str, name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// Runs `dasim` with `args`.
pub fn dasim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dasim"))
        .args(args)
        .output()
        .expect("the dasim binary runs")
}

/// Runs `scenario` on flex into `out`, quietly, with the further `flags`.
pub fn dasim_run_flex(scenario: &Path, out: &Path, flags: &[&str]) -> Output {
    let mut args = vec![
        "run",
        scenario.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--backend",
        "flex",
        "--quiet",
    ];
    args.extend_from_slice(flags);
    dasim(&args)
}

/// Runs `scenario` on flex into `out`; panics with stderr on failure.
pub fn run_flex(scenario: &Path, out: &Path) {
    let o = dasim_run_flex(scenario, out, &[]);
    assert!(
        o.status.success(),
        "dasim run failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A tiny quadratic scenario with two algorithms and one claim, which the sweep tests
/// (`tests/integration/sweep.rs`, `tests/integration/slurm.rs`) append a `[sweep]` table to.
pub const SWEEP_BASE: &str = r#"name = "tiny"
seed = 1

[cluster]
workers = 4
step_time_ms = 10.0

[[cluster.stragglers]]
workers = [1]
factor = 2.0

[topology]
kind = "ring"

[model]
kind = "quadratic"
dim = 8

[optimizer]
lr = 0.05

[run]
sim_time_s = 0.2
eval_every_s = 0.05

[[algorithms]]
kind = "allreduce"

[[algorithms]]
kind = "adpsgd"

[[expect]]
metric = "final_consensus"
algorithm = "allreduce"
op = "=="
value = 0
"#;

/// The package's directory: the running `cargo test`'s, else the one this test was built in. A
/// target directory shared between clones keeps test binaries that another clone built (cargo
/// does not rebuild them for a new path), with that clone's path compiled in.
pub fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), Into::into)
}
