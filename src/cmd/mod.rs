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

/// The flags of every command that runs scenarios (`run`, `check`, `sweep`): what a
/// [`Launch`](dasim::Launch) runs on, and how much it says while it runs.
#[derive(clap::Args, Debug)]
pub struct LaunchArgs {
    /// Compute backend: auto (a hardware GPU if present, else flex), wgpu or flex.
    #[arg(long, default_value = "auto")]
    pub backend: BackendChoice,
    /// No progress bar or progress lines.
    #[arg(long, short)]
    pub quiet: bool,
    /// Threads for the gradient passes on flex and the row arithmetic (default: every core).
    /// On a GPU a flush stays one pass. Results do not depend on it.
    #[arg(long)]
    pub threads: Option<usize>,
}
