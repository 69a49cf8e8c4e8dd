//! `dasim report`: one self-contained HTML page per run directory.

use std::path::{Path, PathBuf};

/// Writes the report of `dir` to `out` (default: `report.html` in `dir`) and returns its path.
/// `baseline` names the algorithm the summary compares the others with (default: the first).
pub fn report(dir: &Path, out: Option<&Path>, baseline: Option<&str>) -> dasim::Result<PathBuf> {
    let out = out.map_or_else(|| dir.join("report.html"), Path::to_path_buf);
    let opts = dasim_reports::ReportOptions {
        baseline: baseline.map(str::to_owned),
    };
    Ok(dasim_reports::write_report(dir, &out, &opts)?)
}
