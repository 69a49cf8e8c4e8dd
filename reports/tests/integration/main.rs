//! The run directory's, the claims' and the plots' integration tests (`dasim-reports`), as one test
//! binary: one link of the crate and its dependencies instead of one per file, and the generic code
//! they share compiled once. Each file of this folder is a module, `common` their shared helpers; a
//! file's tests are those under its module: `cargo test --release -p dasim-reports --test
//! integration -- claims::`.

mod common;

mod claims;
mod json;
mod many_workers;
mod plot;
mod run_plots;
mod rundir;
