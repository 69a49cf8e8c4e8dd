//! `dasim plot`: redraw one run directory, or overlay several.

use std::path::{Path, PathBuf};

use dasim::{Error, Result};

/// Redraws the plots of `dirs` into `out`.
///
/// One directory: every plot of [`dasim_reports::plot_run`], written to `out` (default: the
/// directory itself). Several: the overlay of [`dasim_reports::plot_runs`] (mean and min–max
/// band per algorithm), for which `out` is required so that no run directory is overwritten.
/// Returns the files written.
pub fn plot(dirs: &[PathBuf], out: Option<&Path>) -> Result<Vec<PathBuf>> {
    match (dirs, out) {
        ([], _) => Err(Error::Usage("give at least one run directory".into())),
        ([dir], out) => Ok(dasim_reports::plot_run_to(dir, out.unwrap_or(dir))?),
        (_, None) => Err(Error::Usage(format!(
            "{} run directories are overlaid into a new directory: give it with --out DIR",
            dirs.len()
        ))),
        (_, Some(out)) => Ok(dasim_reports::plot_runs(dirs, out)?),
    }
}
