//! `dasim report`: one self-contained HTML page per run directory.

use std::path::{Path, PathBuf};

/// Writes the report of `dir` to `out` (default: `report.html` in `dir`) and returns its path.
pub fn report(dir: &Path, out: Option<&Path>) -> dasim::Result<PathBuf> {
    let out = out.map_or_else(|| dir.join("report.html"), Path::to_path_buf);
    Ok(dasim_reports::write_report(dir, &out)?)
}
