//! `dasim import`: public cluster traces turned into the files a scenario reads.
//!
//! **`alibaba-pai`**: the per-worker mini-batch times of Alibaba PAI's
//! `cluster-trace-gpu-v2020/mini-batch-time/data/job_*_norm.csv` (Weng et al., "MLaaS in the
//! Wild", NSDI 2022; the mini-batch data as released with Xiao et al., "AntMan", OSDI 2020). Each
//! file is one training job of 10 workers, sampled every 10th iteration:
//!
//! ```text
//! ,worker,gpu,time,batch_time_norm
//! 0,0,25,1,476          (row index, worker, GPU share in %, iteration, mini-batch time)
//! 1,1,25,1,509
//! …
//! 10,0,25,11,476
//! ```
//!
//! The times are normalized to 0–1000: their unit is gone, their ratios (between workers, and
//! over the job) are what the trace keeps. The import keeps the ratios and sets the scale: every
//! value is multiplied by `mean_ms / m`, `m` the mean of all the job's values, so the job's mean
//! step is `mean_ms` milliseconds. The iterations between two samples hold the earlier sample
//! (`hold`) or follow the straight line to the next (`interpolate`); the last sample holds for
//! the same gap. The output is dasim's per-worker step-time trace (`worker,duration_ms`, one row
//! per iteration, in milliseconds to the nanosecond: [`dasim_sim::cluster::stragglers`]'s
//! `kind = "trace"`).

use std::collections::BTreeMap;
use std::path::Path;

use clap::ValueEnum;

use crate::Error;

/// What `dasim import` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ImportKind {
    /// Alibaba PAI's per-worker mini-batch times (`job_*_norm.csv`) to a step-time trace.
    AlibabaPai,
}

/// How the iterations between two samples are filled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Between {
    /// The earlier sample's value.
    #[default]
    Hold,
    /// The straight line between the two samples.
    Interpolate,
}

/// One worker's samples: `(iteration, normalized time)`, in iteration order.
type Samples = Vec<(u64, f64)>;

fn bad(file: &Path, line: usize, what: impl std::fmt::Display) -> Error {
    Error::Usage(format!("{}:{line}: {what}", file.display()))
}

/// Reads a PAI `job_*_norm.csv`: each worker's samples.
fn read_pai(file: &Path, text: &str) -> Result<BTreeMap<usize, Samples>, Error> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((_, header)) = lines.next() else {
        return Err(bad(file, 1, "the file is empty"));
    };
    let names: Vec<&str> = header.split(',').map(str::trim).collect();
    let column = |name: &str| {
        names.iter().position(|n| *n == name).ok_or_else(|| {
            bad(
                file,
                1,
                format!(
                    "no `{name}` column: a PAI mini-batch file's header is `,worker,gpu,time,batch_time_norm`, this one is `{header}`"
                ),
            )
        })
    };
    let (w_col, t_col, v_col) = (
        column("worker")?,
        column("time")?,
        column("batch_time_norm")?,
    );
    let mut workers: BTreeMap<usize, Samples> = BTreeMap::new();
    for (no, line) in lines {
        let line_no = no + 1;
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        let cell = |i: usize, name: &str| {
            cells.get(i).copied().ok_or_else(|| {
                bad(
                    file,
                    line_no,
                    format!("{} columns, no `{name}`", cells.len()),
                )
            })
        };
        let worker: usize = cell(w_col, "worker")?.parse().map_err(|_| {
            bad(
                file,
                line_no,
                format!("worker `{}` is not a worker index", cells[w_col]),
            )
        })?;
        let iteration: u64 = cell(t_col, "time")?.parse().map_err(|_| {
            bad(
                file,
                line_no,
                format!("time `{}` is not an iteration", cells[t_col]),
            )
        })?;
        let value: f64 = cell(v_col, "batch_time_norm")?.parse().map_err(|_| {
            bad(
                file,
                line_no,
                format!("batch_time_norm `{}` is not a number", cells[v_col]),
            )
        })?;
        if !(value.is_finite() && value > 0.0) {
            return Err(bad(
                file,
                line_no,
                format!("batch_time_norm = {value}: a mini-batch time must be positive"),
            ));
        }
        let samples = workers.entry(worker).or_default();
        if let Some(&(last, _)) = samples.last()
            && iteration <= last
        {
            return Err(bad(
                file,
                line_no,
                format!("worker {worker}'s iteration {iteration} comes after its iteration {last}"),
            ));
        }
        samples.push((iteration, value));
    }
    if workers.is_empty() {
        return Err(bad(file, 2, "no samples"));
    }
    Ok(workers)
}

/// One worker's durations, iteration by iteration from its first sample, before scaling.
fn fill(samples: &[(u64, f64)], between: Between) -> Vec<f64> {
    let mut out = Vec::new();
    for (i, &(t, v)) in samples.iter().enumerate() {
        // The gap to the next sample; the last holds for the gap before it (or one iteration).
        let (gap, next) = match samples.get(i + 1) {
            Some(&(t2, v2)) => (t2 - t, v2),
            None => (i.checked_sub(1).map_or(1, |p| t - samples[p].0), v),
        };
        for k in 0..gap {
            out.push(match between {
                Between::Hold => v,
                Between::Interpolate => v + (next - v) * k as f64 / gap as f64,
            });
        }
    }
    out
}

/// The step-time trace of `file` (a PAI `job_*_norm.csv`) as CSV text: the job's mean step
/// `mean_ms`, the iterations between samples filled as `between` says.
pub fn alibaba_pai(file: &Path, mean_ms: f64, between: Between) -> Result<String, Error> {
    if !(mean_ms.is_finite() && mean_ms > 0.0) {
        return Err(Error::Usage(format!(
            "--mean-ms {mean_ms}: the job's mean step must be a positive number of milliseconds"
        )));
    }
    let text = std::fs::read_to_string(file)
        .map_err(|e| Error::Usage(format!("{}: cannot be read: {e}", file.display())))?;
    let workers = read_pai(file, &text)?;
    let filled: BTreeMap<usize, Vec<f64>> = workers
        .iter()
        .map(|(&w, s)| (w, fill(s, between)))
        .collect();
    let (sum, count) = workers
        .values()
        .flatten()
        .fold((0.0, 0usize), |(s, c), &(_, v)| (s + v, c + 1));
    let scale = mean_ms / (sum / count as f64);
    let longest = filled.values().map(Vec::len).max().unwrap_or(0);
    let mut out = format!(
        "# dasim import alibaba-pai {}: {} workers, {} samples, mean step {mean_ms} ms \
         (normalized times × {scale:.6}), between samples: {}\n",
        file.display(),
        workers.len(),
        count,
        match between {
            Between::Hold => "hold",
            Between::Interpolate => "interpolate",
        },
    );
    out.push_str("worker,duration_ms\n");
    for k in 0..longest {
        for (w, d) in &filled {
            if let Some(v) = d.get(k) {
                // Nanosecond resolution, what the trace reader keeps.
                out.push_str(&format!("{w},{:.6}\n", v * scale));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_held_or_interpolated_between_iterations() {
        let s = [(1, 100.0), (11, 200.0)];
        let held = fill(&s, Between::Hold);
        assert_eq!(held.len(), 20);
        assert!(held[..10].iter().all(|&v| v == 100.0));
        assert!(held[10..].iter().all(|&v| v == 200.0));
        let line = fill(&s, Between::Interpolate);
        assert_eq!(line[0], 100.0);
        assert_eq!(line[5], 150.0);
        assert_eq!(line[9], 190.0);
        assert_eq!(line[10], 200.0);
        assert_eq!(fill(&[(1, 5.0)], Between::Hold), vec![5.0]);
    }
}
