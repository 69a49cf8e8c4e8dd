//! Parameter sweeps: one scenario file, many points, each an ordinary run.
//!
//! A `[sweep]` table in a scenario lists values for keys of the scenario, named by their
//! dotted path with `[i]` for an entry of a list ([`spec`]):
//!
//! ```toml
//! [sweep]
//! "cluster.stragglers[0].factor" = [1, 2, 4, 8]
//! seed = "1..=3"                      # an integer range: 1, 2, 3
//! zip = [["cluster.workers", "run.sim_time_s"]]   # these vary together
//! "cluster.workers" = [8, 16]
//! "run.sim_time_s" = [1.0, 2.0]
//! ```
//!
//! The points are the Cartesian product of the keys (the keys of one `zip` group vary
//! together), in the order of the file, the last key varying fastest. Each point is the
//! scenario without `[sweep]` and with the swept keys set, loaded and validated like any
//! scenario file before anything runs; an error names the point and is located in the file.
//! A point's name is made of its values (`factor=4,seed=2,workers=8,sim_time_s=1`).
//!
//! A sweep directory ([`layout`]) holds `sweep.json` (the points) and one run directory per
//! point under `points/`. [`exec::run_sweep`] runs the points of one machine (or of one shard:
//! [`exec::Shard`]) in worker processes and skips the points already complete, so a killed
//! sweep resumes; [`merge::merge`] gathers every point into `sweep.csv` and draws the sweep
//! plots; [`emit`] writes the Slurm array script and the Kubernetes indexed Job that run the
//! shards on a cluster.

pub mod emit;
pub mod exec;
pub mod layout;
pub mod merge;
pub mod spec;

use std::path::{Path, PathBuf};

pub use exec::{Shard, SweepOptions, SweepReport, run_point, run_sweep};
pub use merge::{MergeOptions, MergeReport, merge};
pub use spec::{Point, Sweep, has_sweep};

use crate::sweep::emit::{EmitSpec, K8S_MANIFEST, Resources, SLURM_LOGS, SLURM_SCRIPT};
use crate::sweep::layout::Manifest;
use crate::{Error, Result};

/// Which job file [`emit_jobs`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobKind {
    /// A Slurm array script (`sweep.sbatch`).
    Slurm,
    /// A Kubernetes indexed Job (`sweep-job.yaml`).
    Kubernetes,
}

/// Validates the sweep of `opts.scenario` (every point), writes `sweep.json` and the job file
/// of `kind` into `opts.out`, and returns its path. `shards` is the number of array tasks
/// (default: one per point, at most the number of points).
pub fn emit_jobs(
    opts: &SweepOptions,
    kind: JobKind,
    shards: Option<usize>,
    res: &Resources,
) -> Result<PathBuf> {
    let (sweep, points) = exec::expand(&opts.scenario)?;
    let plain: Vec<Point> = points.iter().map(|(p, _)| p.clone()).collect();
    let io = |what: &Path| {
        let what = what.display().to_string();
        move |source| Error::Io {
            context: format!("cannot write {what}"),
            source,
        }
    };
    std::fs::create_dir_all(&opts.out).map_err(io(&opts.out))?;
    Manifest::new(&sweep, &plain).write(&opts.out)?;
    let shards = match shards {
        Some(0) => return Err(Error::Usage("--shards must be at least 1".into())),
        Some(s) => s.min(plain.len()),
        None => plain.len(),
    };
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let (scenario, out, exe) = match kind {
        // Array tasks start in the directory of `sbatch`, maybe on another node: absolute paths.
        JobKind::Slurm => (
            absolute(&opts.scenario),
            absolute(&opts.out),
            std::env::current_exe().map_err(|e| Error::Io {
                context: "cannot find the dasim executable".into(),
                source: e,
            })?,
        ),
        // The container sees the volume: paths as given, relative to its mount.
        JobKind::Kubernetes => (opts.scenario.clone(), opts.out.clone(), "dasim".into()),
    };
    let spec = EmitSpec {
        exe,
        scenario,
        out,
        name: sweep
            .path
            .file_stem()
            .map_or_else(|| "sweep".into(), |s| s.to_string_lossy().into_owned()),
        points: plain.len(),
        shards,
        jobs: opts
            .jobs
            .unwrap_or_else(|| match res.cpus_per_task {
                Some(c) => (c / opts.threads.max(1)).max(1),
                None => 1,
            })
            .max(1),
        threads: opts.threads,
        backend: opts.backend,
    };
    let (path, text) = match kind {
        JobKind::Slurm => {
            let logs = opts.out.join(SLURM_LOGS);
            std::fs::create_dir_all(&logs).map_err(io(&logs))?;
            (opts.out.join(SLURM_SCRIPT), emit::slurm_script(&spec, res))
        }
        JobKind::Kubernetes => (opts.out.join(K8S_MANIFEST), emit::k8s_manifest(&spec, res)),
    };
    layout::write_unique(&path, text.as_bytes())?;
    #[cfg(unix)]
    if kind == JobKind::Slurm {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755));
    }
    Ok(path)
}
