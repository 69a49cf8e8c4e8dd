//! dasim's end-to-end tests (the `dasim` binary and library), as one test binary: one link of the
//! crate and its dependencies instead of one per file, and the generic code they share compiled
//! once. Each file of this folder is a module, `common` their shared helpers; a file's tests are
//! those under its module: `cargo test --release -p dasim --test integration -- scenarios::`.

mod common;
/// The reports crate's test helpers (its fixture run directories, PNG decoding, SVG checks), for
/// the plot and report tests.
#[path = "../../reports/tests/integration/common/mod.rs"]
mod images;

mod book;
mod check;
mod claims;
mod cli_errors;
mod cli_inspect;
mod divergence;
mod edge_sizes;
mod faults;
mod front_door;
mod fuzz;
mod import;
mod layers;
mod metrics;
mod optimizers;
mod papers;
mod per_algorithm;
mod pipeline;
mod plot;
mod reference;
mod report;
mod resume;
mod scenarios;
mod slurm;
mod sweep;
mod timing;
mod trace;
