//! The sweep directory: `sweep.json` (the points), one run directory per point under
//! `points/`, and in each, `point.toml` (the point's scenario as swept), the files of
//! `dasim run`, `log.txt` (the run's output) and `point.json` (whether it completed).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use dasim_models::BackendChoice;
use dasim_reports::rundir::{files, read_summary, sha256_hex};

use crate::sweep::spec::{Point, Sweep};
use crate::{Error, Result};

/// The file listing a sweep's points, at the top of the sweep directory.
pub const MANIFEST: &str = "sweep.json";
/// The directory holding one run directory per point.
pub const POINTS: &str = "points";
/// A point's scenario, as swept (before defaults are filled in: `scenario.toml` has those).
pub const POINT_TOML: &str = "point.toml";
/// A point's status, written when its run ends: [`PointStatus`].
pub const POINT_STATUS: &str = "point.json";
/// The output of a point's run (standard output and error).
pub const POINT_LOG: &str = "log.txt";
/// Held while a process runs the point, so two never run it at once.
pub const POINT_LOCK: &str = ".lock";

/// `sweep.json`: what a sweep directory holds, so `dasim sweep merge` needs nothing else.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The scenario file swept, as given on the command line.
    pub scenario: PathBuf,
    /// SHA-256 of its text, in hex.
    pub scenario_sha256: String,
    /// The swept keys, in the order of the `[sweep]` table.
    pub keys: Vec<String>,
    /// Their short names (as in point names).
    pub short: Vec<String>,
    /// Every point, in the sweep's order.
    pub points: Vec<ManifestPoint>,
}

/// One point of [`Manifest`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ManifestPoint {
    /// The point's name (its directory under `points/`).
    pub name: String,
    /// The value of each swept key, as text: a string as it is, any other value as TOML.
    pub values: Vec<String>,
    /// SHA-256 of the point's scenario text (`point.toml`), in hex.
    pub sha256: String,
}

/// A swept value as text: a string as it is, anything else as TOML writes it.
pub fn value_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Manifest {
    /// The manifest of `sweep` and its `points`.
    pub fn new(sweep: &Sweep, points: &[Point]) -> Manifest {
        Manifest {
            scenario: sweep.path.clone(),
            scenario_sha256: sha256_hex(sweep.text.as_bytes()),
            keys: sweep.axes.iter().map(|a| a.key.clone()).collect(),
            short: sweep.axes.iter().map(|a| a.short.clone()).collect(),
            points: points
                .iter()
                .map(|p| ManifestPoint {
                    name: p.name.clone(),
                    values: p.values.iter().map(|(_, v)| value_text(v)).collect(),
                    sha256: sha256_hex(p.text.as_bytes()),
                })
                .collect(),
        }
    }

    /// Reads `dir/sweep.json`.
    pub fn read(dir: &Path) -> Result<Manifest> {
        let path = dir.join(MANIFEST);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::Usage(format!(
                    "{} is not a sweep directory: it has no {MANIFEST} (written by `dasim sweep SCENARIO --out {}`)",
                    dir.display(),
                    dir.display()
                ))
            } else {
                Error::Io {
                    context: format!("cannot read {}", path.display()),
                    source: e,
                }
            }
        })?;
        serde_json::from_str(&text)
            .map_err(|e| Error::Usage(format!("{} is malformed: {e}", path.display())))
    }

    /// Writes `dir/sweep.json`. Every shard of a sweep writes the same bytes, and each through
    /// a temporary file of its own, so concurrent shards never see a partial file.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join(MANIFEST);
        let mut bytes = serde_json::to_vec_pretty(self).expect("the manifest serializes");
        bytes.push(b'\n');
        if std::fs::read(&path).is_ok_and(|old| old == bytes) {
            return Ok(());
        }
        write_unique(&path, &bytes)
    }
}

/// Writes `bytes` to `path` through a temporary file of a unique name beside it (shards on
/// other machines may write the same file at once), then renames it into place.
pub fn write_unique(path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |e: std::io::Error| Error::Io {
        context: format!("cannot write {}", path.display()),
        source: e,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".dasim-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(io)?;
    std::io::Write::write_all(&mut tmp, bytes).map_err(io)?;
    tmp.as_file().sync_all().map_err(io)?;
    tmp.persist(path).map_err(|e| io(e.error))?;
    Ok(())
}

/// How a point's run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// It ran to the end; its run directory is complete.
    Done,
    /// It failed; `error` says why.
    Failed,
}

/// Which dasim ran a point, and with which `--backend`: a result of another build or backend
/// is not reused as this sweep's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RanBy {
    /// dasim's version.
    pub dasim_version: String,
    /// The git revision dasim was built from (`unknown` outside a git checkout).
    pub git_revision: String,
    /// The `--backend` the point was run with (`auto`, `flex` or `wgpu`), as asked: `auto`
    /// may have found a GPU on one machine and none on another, which `dasim sweep merge`
    /// reports from the summaries.
    pub backend: String,
}

impl RanBy {
    /// This executable, running points with `--backend backend`.
    pub fn current(backend: BackendChoice) -> RanBy {
        RanBy {
            dasim_version: env!("CARGO_PKG_VERSION").to_owned(),
            git_revision: crate::outputs::GIT_REVISION.to_owned(),
            backend: backend.to_string(),
        }
    }
}

impl std::fmt::Display for RanBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let git = short_revision(&self.git_revision);
        write!(
            f,
            "dasim {} (git {git}) with --backend {}",
            self.dasim_version, self.backend
        )
    }
}

/// The first 12 characters of a git revision, as the sweep's messages show it.
pub fn short_revision(git: &str) -> String {
    git.chars().take(12).collect()
}

/// `point.json`: how a point's run ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PointStatus {
    /// The point's name.
    pub name: String,
    /// How it ended.
    pub state: State,
    /// SHA-256 of the point's scenario text it ran, in hex: a result of another scenario is
    /// not this point's.
    pub sha256: String,
    /// Which dasim ran it, with which backend; absent in points written before it was
    /// recorded (they are run again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ran_by: Option<RanBy>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl PointStatus {
    /// Reads `dir/point.json`; `None` when there is none or it cannot be read.
    pub fn read(dir: &Path) -> Option<PointStatus> {
        let text = std::fs::read_to_string(dir.join(POINT_STATUS)).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Writes `dir/point.json`, atomically.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("a status serializes");
        bytes.push(b'\n');
        write_unique(&dir.join(POINT_STATUS), &bytes)
    }
}

/// The run directory of point `name` in sweep directory `out`.
pub fn point_dir(out: &Path, name: &str) -> PathBuf {
    out.join(POINTS).join(name)
}

/// Whether a point's results in its directory can stand as this sweep's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completeness {
    /// It ran this very scenario to the end, by this dasim with this `--backend`.
    Complete,
    /// It has no complete results of this scenario.
    Incomplete,
    /// It ran this scenario to the end, but by another build of dasim or with another
    /// `--backend`: what ran it, in words. It is run again.
    RanByOther(String),
}

/// Whether the point whose scenario text hashes to `sha256` is complete in `dir`: its
/// `point.json` says it ran that very scenario to the end, by `current` (the same build of
/// dasim, with the same `--backend`), and its `summary.json` holds `algorithms` runs.
pub fn completeness(dir: &Path, sha256: &str, algorithms: usize, current: &RanBy) -> Completeness {
    let Some(status) = PointStatus::read(dir) else {
        return Completeness::Incomplete;
    };
    if status.state != State::Done || status.sha256 != sha256 {
        return Completeness::Incomplete;
    }
    let summarized = dir.join(files::SUMMARY).is_file()
        && read_summary(dir).is_ok_and(|s| s.is_some_and(|s| s.runs.len() == algorithms));
    if !summarized {
        return Completeness::Incomplete;
    }
    match status.ran_by {
        Some(r) if &r == current => Completeness::Complete,
        Some(r) => Completeness::RanByOther(r.to_string()),
        None => Completeness::RanByOther("a dasim that did not record its version".into()),
    }
}

/// The last `lines` non-empty lines of `dir/log.txt`, joined (empty when there is none).
pub fn log_tail(dir: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(dir.join(POINT_LOG)).unwrap_or_default();
    let kept: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    kept[kept.len().saturating_sub(lines)..].join("\n")
}
