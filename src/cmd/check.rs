//! `dasim check`: run scenarios under seeds and judge their claims.

use std::path::PathBuf;

use dasim::Error;
use dasim::runtime::{on_pool, thread_pool};
use dasim_models::{BackendChoice, Execution};

/// `dasim check`'s arguments.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The scenario files.
    #[arg(required = true)]
    pub scenarios: Vec<PathBuf>,
    /// Seeds to run each scenario under, replacing its own: `1..5` (1 to 5), `1,4,9` or `7`.
    #[arg(long, value_parser = dasim::check::parse_seed_list)]
    pub seeds: Option<dasim::check::SeedList>,
    /// Write the verdicts as JUnit XML to this file.
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Compute backend: auto (a hardware GPU if present, else flex), wgpu or flex.
    #[arg(long, default_value = "auto")]
    pub backend: BackendChoice,
    /// Keep the run directories here (`DIR/<scenario>/seed-<seed>`, with plots); without
    /// it they go to a temporary directory that is removed.
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// No progress lines or bars.
    #[arg(long, short)]
    pub quiet: bool,
    /// Threads for the gradient passes on flex and the row arithmetic (default: every core).
    /// On a GPU a flush stays one pass. Results do not depend on it.
    #[arg(long)]
    pub threads: Option<usize>,
}

/// Runs every scenario under every seed, prints the verdicts, and fails when one failed.
pub fn check(args: CheckArgs) -> dasim::Result<()> {
    let CheckArgs {
        scenarios,
        seeds,
        junit,
        backend,
        out,
        quiet,
        threads,
    } = args;
    let threads = thread_pool(threads)?;
    let backend = dasim::runtime::backend(backend)?;
    if !quiet {
        eprintln!("backend: {backend}, {threads} thread(s)");
    }
    let opts = dasim::check::CheckOptions {
        scenarios,
        seeds: seeds.map(|s| s.0),
        backend,
        out,
        progress: !quiet,
        execution: Execution {
            threads,
            max_batch: None,
        },
    };
    let report = on_pool(|| dasim::check::check(&opts))?;
    print!("{}", report.table());
    if let Some(path) = &junit {
        dasim::check::write_junit(&report, path)?;
    }
    let (total, failed, skipped) = (report.total(), report.failures(), report.skipped());
    let summary = format!(
        "{total} verdicts: {} passed, {failed} failed, {skipped} skipped",
        total - failed - skipped
    );
    println!("{summary}");
    if failed > 0 {
        return Err(Error::Claims(format!(
            "{failed} of {total} claim verdicts failed"
        )));
    }
    Ok(())
}
