//! The run directory's checkpoint: `dasim run --checkpoint-every SECONDS`, Ctrl-C, and
//! `dasim run --resume RUN_DIR`.
//!
//! `RUN_DIR/checkpoint.bin` holds where a scenario's run stands: which algorithm is running and
//! the engine's checkpoint of it ([`dasim_sim::engine::checkpoint`]: clock, event queue, random
//! streams, replicas, optimizer state, pending gradients, messages in flight, recorder), the
//! length of every streamed CSV file and the tables' rows so far
//! ([`dasim_reports::rundir::WriterState`]), `summary.json` and `timings.json` so far, what the
//! running algorithm's summary has gathered from its evaluation points, and which scenario file
//! (with the SHA-256 of the scenario as run) and backend the run used (by its name, `flex` or
//! `wgpu`: [`BackendChoice`]'s `Display` and `FromStr`). It is written atomically
//! (temporary file, fsync, rename, fsync of the directory), after every streamed row it counts
//! is synced, so a run killed at any point leaves either the previous checkpoint or the new one,
//! each consistent with the files.
//!
//! A resumed run cuts every stream back to its length at the checkpoint, rewrites the tables,
//! `summary.json` and `timings.json` as they were, and goes on: on `flex` its files are
//! byte-identical to those of a run that was never interrupted (`timings.json`'s wall times
//! aside). The checkpoint is removed when the run finishes.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use dasim_reports::rundir::{Summary, Timings, WriterState, write_atomic};
use dasim_sim::engine::checkpoint::{decode, encode};

use dasim_models::BackendChoice;

use crate::plan::Plan;
use crate::{Error, Result};

/// The checkpoint's file name in a run directory.
pub const FILE: &str = "checkpoint.bin";

/// What the summary of the algorithm in progress has gathered from its evaluation points so far.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Seen {
    /// The first time the held-out accuracy reached `[metrics] target_accuracy`.
    pub accuracy_s: Option<f64>,
    /// The first time the held-out loss reached `[metrics] target_loss`.
    pub loss_s: Option<f64>,
    /// The consensus distance at the last point.
    pub consensus: Option<f64>,
    /// The suboptimality at the last point.
    pub suboptimality: Option<f64>,
}

/// `RUN_DIR/checkpoint.bin`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunCheckpoint {
    /// The scenario file, absolute.
    pub scenario_path: PathBuf,
    /// SHA-256 of the scenario as run (`scenario.toml`), as every CSV's stamp has it.
    pub scenario_sha256: String,
    /// The backend the run used (`flex` or `wgpu`; stored by its name).
    #[serde(with = "by_name")]
    pub backend: BackendChoice,
    /// `--checkpoint-every`, simulated seconds.
    pub checkpoint_every_s: Option<f64>,
    /// The algorithm in progress (or the next to start), by its index in the scenario.
    pub algorithm: usize,
    /// Simulated time of the checkpoint in that algorithm's run (0 before it starts).
    pub sim_time_s: f64,
    /// The engine's checkpoint of the algorithm in progress; `None` before it starts.
    pub engine: Option<Vec<u8>>,
    /// The streamed files' lengths and the tables so far.
    pub writer: WriterState,
    /// `summary.json` so far (JSON: it has optional fields).
    pub summary_json: String,
    /// `timings.json` so far.
    pub timings_json: String,
    /// What the algorithm in progress gathered from its points.
    pub seen: Seen,
    /// Wall seconds the algorithm in progress ran before the checkpoint.
    pub wall_s: f64,
}

impl RunCheckpoint {
    /// The summary so far.
    pub fn summary(&self) -> Result<Summary> {
        serde_json::from_str(&self.summary_json).map_err(|e| corrupt(&e.to_string()))
    }

    /// The timings so far.
    pub fn timings(&self) -> Result<Timings> {
        serde_json::from_str(&self.timings_json).map_err(|e| corrupt(&e.to_string()))
    }

    /// Writes `dir/checkpoint.bin` atomically.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let bytes = encode(self)?;
        write_atomic(&dir.join(FILE), &bytes)?;
        crash_point("checkpoint");
        Ok(())
    }

    /// Reads `dir/checkpoint.bin`, saying what to do when there is none.
    pub fn read(dir: &Path) -> Result<RunCheckpoint> {
        let path = dir.join(FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::Usage(format!(
                    "{} holds no checkpoint ({FILE}): its run finished, or was started without \
                     --checkpoint-every and not stopped with Ctrl-C, so there is nothing to \
                     continue",
                    dir.display()
                )));
            }
            Err(source) => {
                return Err(Error::Io {
                    context: format!("cannot read {}", path.display()),
                    source,
                });
            }
        };
        decode(&bytes).map_err(|e| Error::Usage(format!("{}: {e}", path.display())))
    }

    /// Removes `dir/checkpoint.bin` (the run finished), if there is one.
    pub fn remove(dir: &Path) -> Result<()> {
        let path = dir.join(FILE);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::Io {
                context: format!("cannot remove {}", path.display()),
                source: e,
            }),
            _ => Ok(()),
        }
    }
}

/// A test hook: with `DASIM_CRASH_AT=POINT` or `POINT:N` in the environment, the process ends
/// abruptly ([`std::process::abort`]: no destructor runs and nothing buffered is written, as
/// under SIGKILL) the `N`-th time (default: the first) the run passes `POINT`:
///
/// - `checkpoint`: just after a checkpoint was written;
/// - `tables`: after an algorithm's tables were rewritten, before its summary;
/// - `summary`: after `summary.json` was rewritten, before the next checkpoint;
/// - `plots`: when every file but the plots is written.
///
/// `tests/integration/resume.rs` kills runs there and checks that resuming gives the same files.
pub fn crash_point(point: &str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static PASSED: AtomicU64 = AtomicU64::new(0);
    let Ok(spec) = std::env::var("DASIM_CRASH_AT") else {
        return;
    };
    let (name, n) = spec.split_once(':').unwrap_or((spec.as_str(), "1"));
    if name != point {
        return;
    }
    let n: u64 = n.parse().unwrap_or(1);
    if PASSED.fetch_add(1, Ordering::SeqCst) + 1 == n {
        eprintln!("DASIM_CRASH_AT={spec}: aborting");
        std::process::abort();
    }
}

fn corrupt(why: &str) -> Error {
    Error::Usage(format!("the checkpoint is damaged: {why}"))
}

impl RunCheckpoint {
    /// The backend to continue the run on: the checkpoint's when `requested` is `auto`, else
    /// `requested`, which must then be the checkpoint's.
    pub fn backend_choice(&self, requested: BackendChoice) -> Result<BackendChoice> {
        match requested {
            BackendChoice::Auto => Ok(self.backend),
            named if named != self.backend => Err(Error::Usage(format!(
                "the checkpoint's run used the {} backend, not {named}: resume it with --backend \
                 {} (or without --backend)",
                self.backend, self.backend
            ))),
            named => Ok(named),
        }
    }

    /// Refuses to continue the checkpoint's run with a plan that is not of the scenario it ran
    /// (its SHA-256 as run) or on another backend than `backend` (the numbers would differ
    /// from the run's own).
    pub fn check_resumable(&self, plan: &Plan, backend: BackendChoice) -> Result<()> {
        if plan.stamp.scenario_sha256 != self.scenario_sha256 {
            return Err(Error::Usage(format!(
                "{} is not the scenario of the checkpoint: its SHA-256 as run is {}, the \
                 checkpoint's {}; the file changed since the run started (restore it, or start a \
                 new run)",
                plan.loaded.path.display(),
                plan.stamp.scenario_sha256,
                self.scenario_sha256
            )));
        }
        if backend != self.backend {
            return Err(Error::Usage(format!(
                "the checkpoint's run used the {} backend, this one {backend}: resume it with \
                 --backend {}",
                self.backend, self.backend
            )));
        }
        Ok(())
    }

    /// The scenario file the checkpoint's run read, which must still be there (unchanged) to
    /// continue it.
    pub fn scenario_file(&self) -> Result<&Path> {
        if !self.scenario_path.exists() {
            return Err(Error::Usage(format!(
                "the checkpoint's scenario file {} is gone: it is needed (unchanged) to continue \
                 the run",
                self.scenario_path.display()
            )));
        }
        Ok(&self.scenario_path)
    }
}

/// The backend as a checkpoint stores it: its name, the bytes every checkpoint has held.
mod by_name {
    use dasim_models::BackendChoice;
    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

    pub fn serialize<S: Serializer>(b: &BackendChoice, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&b.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BackendChoice, D::Error> {
        String::deserialize(d)?.parse().map_err(D::Error::custom)
    }
}
