//! The Python extension module `dasim._core` (the `python` feature; `pip install .` builds it
//! with maturin, `pyproject.toml`). It is a thin shell of type conversions and errors over the
//! library: a scenario is a [`Loaded`] ([`scenario`]), a run or a check is a [`Launch`] (the
//! door `dasim run` and `dasim check` go through), a sweep is [`run_sweep_here`] then
//! [`merge`]. The Python layer (`src/py/dasim`) turns what it returns into DataFrames and
//! figures.
//!
//! Across the boundary:
//! - errors are Python exceptions with the command line's message: [`ScenarioError`] (with its
//!   file, line, column, field and hint as attributes) for bad input, `KeyboardInterrupt` for
//!   an interrupted run, `DasimError` for the rest; a Rust panic is caught and raised as
//!   `InternalError`, which names it a bug;
//! - values: dicts, lists and scalars as TOML and back ([`convert`]);
//! - a run or a sweep runs on a thread of its own, without the GIL ([`wait`]); the calling
//!   thread waits for it, hands its progress to a Python reporter, and checks for signals ten
//!   times a second: Ctrl-C (or an exception from the reporter) stops the run after its current
//!   event, with a checkpoint in a run directory, and is raised once the run has stopped.

mod convert;
mod scenario;
mod wait;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;

use pyo3::exceptions::{PyException, PyKeyboardInterrupt, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use dasim_models::BackendChoice;

use crate::launch::{Sink, Source, Threads};
use crate::simulation::Progress;
use crate::sweep::exec::{panic_message, run_sweep_here};
use crate::sweep::spec::key_at;
use crate::sweep::{MergeOptions, Sweep, SweepOptions, merge};
use crate::{Error, InMemory, Launch, ScenarioError};

use convert::to_toml_table;
use scenario::PyScenario;
use wait::{Events, wait_for};

pyo3::create_exception!(
    _core,
    DasimError,
    PyException,
    "A dasim run or sweep failed (`kind` says how: usage, memory, sim, models, reports, io, claims, sweep)."
);
pyo3::create_exception!(
    _core,
    ScenarioErrorPy,
    DasimError,
    "A scenario is malformed or invalid: `file`, `line`, `column`, `field`, `message`, `hint`."
);
pyo3::create_exception!(
    _core,
    InternalError,
    DasimError,
    "A bug in dasim (a Rust panic, caught at the boundary): please report it."
);

/// What a dict scenario is called in errors.
const DICT: &str = "<dict>";

/// Runs `f`, turning a panic into [`InternalError`].
fn guard<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| Err(bug(&*panic)))
}

fn bug(panic: &(dyn std::any::Any + Send)) -> PyErr {
    InternalError::new_err(format!(
        "dasim bug: a Rust panic reached the Python boundary: {} (please report it with the \
         scenario that caused it)",
        panic_message(panic)
    ))
}

/// The Python exception for `e`; a scenario error of a dict scenario is named after the dict.
fn to_py(e: Error, origin: Option<&Origin>) -> PyErr {
    match e {
        Error::Scenario(e) => scenario_error(*e, origin),
        Error::Interrupted(msg) => PyKeyboardInterrupt::new_err(msg),
        other => {
            let kind = match &other {
                Error::Usage(_) => "usage",
                Error::Memory(_) => "memory",
                Error::Sim(_) => "sim",
                Error::Models(_) => "models",
                Error::Reports(_) => "reports",
                Error::Claims(_) => "claims",
                Error::Sweep(_) => "sweep",
                Error::Diverged(_) => "diverged",
                Error::Io { .. } => "io",
                Error::Scenario(_) | Error::Interrupted(_) => unreachable!("matched above"),
            };
            let err = DasimError::new_err(other.to_string());
            Python::attach(|py| {
                let _ = err.value(py).setattr("kind", kind);
            });
            err
        }
    }
}

fn scenario_error(mut e: ScenarioError, origin: Option<&Origin>) -> PyErr {
    if let Some(Origin::Dict(path, text)) = origin
        && e.file == *path
    {
        // A dict has no lines: the error names the key path instead (found at the error's
        // position in the dict's TOML text where the error names none).
        e.file = PathBuf::from(DICT);
        if e.field.is_none()
            && let (Some(l), Some(c)) = (e.line, e.column)
        {
            e.field = key_at(text, l, c);
        }
        e.line = None;
        e.column = None;
        e.source_line = None;
    }
    let err = ScenarioErrorPy::new_err(e.to_string());
    Python::attach(|py| {
        let v = err.value(py);
        let _ = v.setattr("file", e.file.display().to_string());
        let _ = v.setattr("line", e.line);
        let _ = v.setattr("column", e.column);
        let _ = v.setattr("field", e.field.clone());
        let _ = v.setattr("message", e.message.clone());
        let _ = v.setattr("hint", e.hint.clone());
    });
    err
}

/// Where a scenario came from.
#[derive(Clone, Debug)]
pub(crate) enum Origin {
    /// A file (or text named after one).
    File,
    /// A dict: errors name `<dict>` and a key path instead of this path (the dict's base
    /// directory joined with `<dict>`, which anchors its relative paths) and a line of this
    /// text (the dict written as TOML).
    Dict(PathBuf, String),
}

fn dict_error(path: &Path, field: String, message: String) -> PyErr {
    scenario_error(
        ScenarioError {
            file: path.to_path_buf(),
            line: None,
            column: None,
            field: (!field.is_empty()).then_some(field),
            message,
            hint: None,
            source_line: None,
        },
        Some(&Origin::Dict(path.to_path_buf(), String::new())),
    )
}

fn backend_choice(name: &str) -> PyResult<BackendChoice> {
    name.parse::<BackendChoice>()
        .map_err(|e| to_py(Error::Usage(e), None))
}

/// The files of a run kept in memory, by name.
type Files = Vec<(&'static str, String)>;

/// What `_core.run` returns: the run directory written (`None` in memory), the files of a run
/// kept in memory (`None` with a directory), and the backend's name.
type RunReturn = (Option<PathBuf>, Option<Files>, String);

/// Runs a scenario (or continues an interrupted run from its directory): into `out`, or kept
/// in memory without it.
#[pyfunction]
#[pyo3(signature = (scenario, out, backend, threads, force, checkpoint_every, resume, max_batch, memory_limit, reporter))]
#[allow(clippy::too_many_arguments)]
fn run(
    py: Python<'_>,
    scenario: Option<&PyScenario>,
    out: Option<PathBuf>,
    backend: &str,
    threads: Option<usize>,
    force: bool,
    checkpoint_every: Option<f64>,
    resume: Option<PathBuf>,
    max_batch: Option<usize>,
    memory_limit: Option<u64>,
    reporter: Option<Bound<'_, PyAny>>,
) -> PyResult<RunReturn> {
    guard(|| {
        let origin = scenario.map(|s| &s.origin);
        let source = match (resume, scenario) {
            (Some(dir), s) => Source::Resume {
                dir,
                scenario: s.map(|s| s.loaded.clone()),
            },
            (None, Some(s)) => Source::Scenario(s.loaded.clone()),
            (None, None) => {
                let e = Error::Usage("run needs a scenario, or resume= a run directory".into());
                return Err(to_py(e, None));
            }
        };
        let launch = Launch {
            backend: backend_choice(backend)?,
            threads: Threads::Own(threads),
            sink: match out {
                Some(out) => Sink::Dir {
                    out,
                    force,
                    plots: true,
                },
                None => Sink::Memory,
            },
            max_batch,
            memory_limit,
            checkpoint_every,
            ..Launch::new(source)
        };
        let started = launch.start().map_err(|e| to_py(e, origin))?;
        let used = started.backend().to_string();
        let events = Events::default();
        let stop = AtomicBool::new(false);
        let (result, raised) = wait_for(py, reporter.as_ref(), &events, &stop, || {
            let mut ready = started.prepare()?;
            ready.run(0, &mut events.clone(), Some(&stop))?;
            let dir = ready.dir(0).map(Path::to_path_buf);
            Ok((dir, ready.memory(0).map(InMemory::files)))
        });
        let (dir, files) = stopped(py, raised, result?, origin)?;
        Ok((dir, files, used))
    })
}

/// What a call's work ended with: the exception of a signal or of the reporter, raised while it
/// ran (Ctrl-C's with the run's own message, which says where its checkpoint is), else its
/// result.
fn stopped<T>(
    py: Python<'_>,
    raised: Option<PyErr>,
    result: crate::Result<T>,
    origin: Option<&Origin>,
) -> PyResult<T> {
    match (raised, result) {
        (Some(e), Err(Error::Interrupted(msg))) if e.is_instance_of::<PyKeyboardInterrupt>(py) => {
            Err(PyKeyboardInterrupt::new_err(msg))
        }
        (Some(e), _) => Err(e),
        (None, Err(e)) => Err(to_py(e, origin)),
        (None, Ok(r)) => Ok(r),
    }
}

/// Runs the scenario under each of `seeds` (its own seed without them), each run kept in
/// memory, and judges its `[[expect]]` entries as `dasim check` does ([`crate::check::judge`]):
/// one verdict per claim, algorithm and seed, or per claim and algorithm for the mean over the
/// seeds (`seeds = "mean"`). Every seed is loaded and planned before the first runs; a run that
/// fails fails its claims (`run_error`), and Ctrl-C stops the checks. Returns the verdicts as
/// dicts, in the order of the command's report.
#[pyfunction]
#[pyo3(signature = (scenario, seeds, backend, threads, reporter))]
fn check<'py>(
    py: Python<'py>,
    scenario: &PyScenario,
    seeds: Option<Vec<u64>>,
    backend: &str,
    threads: Option<usize>,
    reporter: Option<Bound<'py, PyAny>>,
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    guard(|| {
        let origin = Some(&scenario.origin);
        let loaded = &scenario.loaded;
        if loaded.scenario.expect.is_empty() {
            return Err(to_py(crate::check::nothing_to_check(&loaded.path), origin));
        }
        let launch = Launch {
            backend: backend_choice(backend)?,
            threads: Threads::Own(threads),
            seeds,
            ..Launch::new(Source::Scenario(loaded.clone()))
        };
        let started = launch.start().map_err(|e| to_py(e, origin))?;
        let events = Events::default();
        let stop = AtomicBool::new(false);
        let (result, raised) = wait_for(py, reporter.as_ref(), &events, &stop, || {
            let mut ready = started.prepare()?;
            let mut notes = events.clone();
            let mut progress = events.clone();
            let started = |seed| notes.note(&format!("seed {seed}"));
            crate::check::judge(&mut ready, &mut progress, Some(&stop), started, |_, _| {})
        });
        let verdicts = stopped(py, raised, result?, origin)?;
        verdicts
            .iter()
            .map(|v| {
                let d = PyDict::new(py);
                let r = &v.row;
                d.set_item("seed", &v.seed)?;
                d.set_item("claim", &v.claim)?;
                d.set_item("expect", r.expect)?;
                d.set_item("algorithm", &r.algorithm)?;
                d.set_item("metric", &r.metric)?;
                d.set_item("over", &r.over)?;
                d.set_item("op", &r.op)?;
                d.set_item("value", &r.value)?;
                d.set_item("observed", r.observed)?;
                d.set_item("bound", r.bound)?;
                d.set_item("tolerance", r.tolerance)?;
                d.set_item("result", r.result.name())?;
                d.set_item("reason", &r.reason)?;
                d.set_item("note", &r.note)?;
                d.set_item("run_error", v.run_error)?;
                Ok(d)
            })
            .collect()
    })
}

/// Parses seeds as `dasim check --seeds` does: `1..5` (both ends included), `1..=5`, `1,4,9`
/// or `7`; a `ValueError` says what is wrong.
#[pyfunction]
fn parse_seeds(text: &str) -> PyResult<Vec<u64>> {
    crate::launch::parse_seeds(text).map_err(|e| PyValueError::new_err(format!("seeds: {e}")))
}

/// What `_core.sweep` returns: the points of the sweep, those run now, those skipped as
/// complete, the failed ones (name, error), and the path of `sweep.csv`.
type SweepReturn = (usize, usize, usize, Vec<(String, String)>, PathBuf);

/// Runs the sweep of `scenario` over `grid` (a `[sweep]` table: key paths to lists of values,
/// or integer ranges such as `"1..=3"`; `zip` as in a file) into the sweep directory `out`,
/// points `jobs` at a time in this process, then merges it; returns the counts of the points
/// (total, run now, skipped as complete, failed) and the path of `sweep.csv`.
#[pyfunction]
#[pyo3(signature = (scenario, grid, out, jobs, threads, backend, reporter))]
#[allow(clippy::too_many_arguments)]
fn sweep(
    py: Python<'_>,
    scenario: &PyScenario,
    grid: Option<&Bound<'_, PyDict>>,
    out: PathBuf,
    jobs: Option<usize>,
    threads: usize,
    backend: &str,
    reporter: Option<Bound<'_, PyAny>>,
) -> PyResult<SweepReturn> {
    guard(|| {
        let origin = Some(&scenario.origin);
        let backend = backend_choice(backend)?;
        let mut doc: toml::Table = toml::from_str(&scenario.loaded.text)
            .map_err(|e| to_py(Error::Usage(format!("the scenario's text: {e}")), origin))?;
        let table = match grid {
            Some(g) => to_toml_table(g, "sweep").map_err(|(field, message)| {
                to_py(Error::Usage(format!("grid: `{field}`: {message}")), origin)
            })?,
            None => scenario.grid.clone().unwrap_or_default(),
        };
        if table.is_empty() {
            return Err(to_py(
                Error::Usage("the grid is empty: give at least one key and its values".into()),
                origin,
            ));
        }
        doc.insert("sweep".into(), toml::Value::Table(table));
        let text = toml::to_string(&doc)
            .map_err(|e| to_py(Error::Usage(format!("cannot write TOML: {e}")), origin))?;
        let path = &scenario.loaded.path;
        let parsed = Sweep::parse(path, &text)
            .map_err(|e| scenario_error(*e, origin))?
            .expect("the document has a [sweep] table");
        let points = parsed.load_all().map_err(|e| scenario_error(*e, origin))?;
        let opts = SweepOptions {
            scenario: path.clone(),
            out: out.clone(),
            jobs,
            threads,
            shard: None,
            backend,
            progress: false,
        };
        let events = Events::default();
        let stop = AtomicBool::new(false);
        let progress: Mutex<Events> = Mutex::new(events.clone());
        let (result, raised) = wait_for(py, reporter.as_ref(), &events, &stop, || {
            run_sweep_here(&parsed, &points, &opts, &stop, &progress)
        });
        let report = stopped(py, raised, result?, origin)?;
        let merged = py
            .detach(|| merge(&out, &MergeOptions::default()))
            .map_err(|e| to_py(e, origin))?;
        Ok((
            report.total,
            report.done,
            report.skipped,
            report.failed,
            merged.csv,
        ))
    })
}

/// Writes `trace.json` (the Chrome trace of the run directory's timeline) into `run_dir` and
/// returns its path, as `dasim trace RUN_DIR` does.
#[pyfunction]
fn trace(py: Python<'_>, run_dir: PathBuf) -> PyResult<PathBuf> {
    guard(|| {
        py.detach(|| dasim_reports::trace::write_trace(&run_dir, None))
            .map(|(path, _)| path)
            .map_err(|e| to_py(e.into(), None))
    })
}

/// Panics inside the boundary's guard: the test that a panic becomes `InternalError`.
#[pyfunction]
fn _panic_for_test(message: &str) -> PyResult<()> {
    guard(|| panic!("{message}"))
}

/// The extension module.
#[pymodule]
#[pyo3(name = "_core")]
fn core_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // SAFETY: setting an environment variable while another thread reads the environment is
    // the hazard; at import, the only Rust code running is this.
    unsafe { crate::runtime::quiet_display_probe() };
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add(
        "git_revision",
        crate::outputs::git_revision().unwrap_or("unknown"),
    )?;
    m.add("DasimError", py.get_type::<DasimError>())?;
    m.add("ScenarioError", py.get_type::<ScenarioErrorPy>())?;
    m.add("InternalError", py.get_type::<InternalError>())?;
    m.add_class::<PyScenario>()?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(parse_seeds, m)?)?;
    m.add_function(wrap_pyfunction!(sweep, m)?)?;
    m.add_function(wrap_pyfunction!(trace, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_test, m)?)?;
    Ok(())
}
