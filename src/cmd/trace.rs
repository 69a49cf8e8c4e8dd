//! `dasim trace`: a run directory's timeline in the Chrome trace event format, for Perfetto.

use std::path::Path;

/// Writes the trace of `dir` to `out` (default `dir/trace.json`) and says what it holds.
pub fn trace(dir: &Path, out: Option<&Path>) -> dasim::Result<()> {
    let (path, counts) = dasim_reports::trace::write_trace(dir, out)?;
    if !dir.join("messages.csv").exists() {
        eprintln!(
            "note: the run did not log its messages, so the trace has no message flows \
             (set [metrics] log_messages = true in the scenario)"
        );
    }
    println!(
        "trace in {}: {} slices, {} message flows, {} fault marks; open it in \
         https://ui.perfetto.dev or chrome://tracing",
        path.display(),
        counts.slices,
        counts.flows,
        counts.instants
    );
    Ok(())
}
