//! One module per command of the `dasim` binary: each turns its arguments into calls of the
//! library and prints what the user reads.

pub mod check;
pub mod plot;
pub mod report;
pub mod run;
pub mod sweep;
pub mod trace;
pub mod validate;

use dasim_models::BackendChoice;

/// The name of a `--backend` choice, as a checkpoint or a sweep point records it.
pub fn backend_name(b: BackendChoice) -> &'static str {
    match b {
        BackendChoice::Auto => "auto",
        BackendChoice::Wgpu => "wgpu",
        BackendChoice::Flex => "flex",
    }
}
