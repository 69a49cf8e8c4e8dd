//! `dasim check`: run scenarios under seeds and judge their claims.

use std::path::PathBuf;

use dasim::Error;
use dasim::launch::Threads;

use super::LaunchArgs;

/// `dasim check`'s arguments.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The scenario files.
    #[arg(required = true)]
    pub scenarios: Vec<PathBuf>,
    /// Seeds to run each scenario under, replacing its own: `1..5` (1 to 5), `1,4,9` or `7`.
    #[arg(long, value_parser = dasim::launch::parse_seed_list)]
    pub seeds: Option<dasim::launch::SeedList>,
    /// Write the verdicts as JUnit XML to this file.
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Keep the run directories here (`DIR/<scenario>/seed-<seed>`, with plots); without
    /// it they go to a temporary directory that is removed.
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub launch: LaunchArgs,
}

/// Runs every scenario under every seed, prints the verdicts, and fails when one failed.
pub fn check(args: CheckArgs) -> dasim::Result<()> {
    let CheckArgs {
        scenarios,
        seeds,
        junit,
        out,
        launch: LaunchArgs {
            backend,
            quiet,
            threads,
        },
    } = args;
    let opts = dasim::check::CheckOptions {
        scenarios,
        seeds: seeds.map(|s| s.0),
        backend,
        threads: Threads::Process(threads),
        out,
        progress: !quiet,
    };
    let report = dasim::check::check(&opts)?;
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
