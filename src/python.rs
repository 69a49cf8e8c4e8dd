//! The Python extension module `dasim._core` (the `python` feature; `pip install .` builds it
//! with maturin, `pyproject.toml`). It is a thin shell over the library's front door: a
//! scenario is a [`Loaded`], a run is [`Plan::prepare`] then [`Simulation::run`] into a
//! [`RunDir`] or an [`InMemory`] sink, a sweep is [`run_sweep_here`] then [`merge`]. The Python
//! layer (`src/py/dasim`) turns what it returns into DataFrames and figures.
//!
//! Across the boundary:
//! - errors are Python exceptions with the command line's message: [`ScenarioError`] (with its
//!   file, line, column, field and hint as attributes) for bad input, `KeyboardInterrupt` for
//!   an interrupted run, `DasimError` for the rest; a Rust panic is caught and raised as
//!   `InternalError`, which names it a bug;
//! - a run or a sweep runs on a thread of its own, without the GIL; the calling thread waits
//!   for it, hands its progress to a Python reporter, and checks for signals ten times a
//!   second: Ctrl-C (or an exception from the reporter) stops the run after its current event,
//!   with a checkpoint in a run directory, and is raised once the run has stopped.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use pyo3::exceptions::{PyException, PyKeyboardInterrupt, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use dasim_models::{BackendChoice, Execution};
use dasim_sim::engine::RunProgress;

use crate::checkpoint::RunCheckpoint;
use crate::simulation::{Checkpoints, Progress};
use crate::sweep::exec::{SweepProgress, SweepReport, panic_message, run_sweep_here};
use crate::sweep::spec::{key_at, set_key, without_sweep};
use crate::sweep::{MergeOptions, Sweep, SweepOptions, merge};
use crate::{Error, InMemory, Loaded, Plan, RunDir, RunSink, ScenarioError, Simulation};

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
enum Origin {
    /// A file (or text named after one).
    File,
    /// A dict: errors name `<dict>` and a key path instead of this path (the dict's base
    /// directory joined with `<dict>`, which anchors its relative paths) and a line of this
    /// text (the dict written as TOML).
    Dict(PathBuf, String),
}

/// A scenario, parsed and validated: `dasim.Scenario` holds one.
#[pyclass(name = "Scenario", module = "dasim._core", frozen)]
struct PyScenario {
    loaded: Loaded,
    origin: Origin,
    /// The `[sweep]` table of the file it was loaded from.
    grid: Option<toml::Table>,
}

impl PyScenario {
    fn from_text(path: PathBuf, text: String, origin: Origin) -> PyResult<PyScenario> {
        let loaded =
            Loaded::from_str(&path, text).map_err(|e| scenario_error(*e, Some(&origin)))?;
        Ok(PyScenario {
            loaded,
            origin,
            grid: None,
        })
    }

    fn err(&self, e: impl Into<Error>) -> PyErr {
        to_py(e.into(), Some(&self.origin))
    }
}

#[pymethods]
impl PyScenario {
    /// Reads, parses and validates a scenario file. A file with a `[sweep]` table is checked
    /// as `dasim validate` checks it (every point loads), and gives its base scenario (the file
    /// without the table; the table is `sweep_grid`).
    #[staticmethod]
    fn load(path: PathBuf) -> PyResult<PyScenario> {
        guard(|| {
            let text = std::fs::read_to_string(&path).ok();
            if let Some(text) = text.filter(|t| crate::sweep::has_sweep(t)) {
                let sweep = Sweep::parse(&path, &text)
                    .map_err(|e| scenario_error(*e, None))?
                    .expect("has_sweep found the table");
                sweep.load_all().map_err(|e| scenario_error(*e, None))?;
                let (base, grid) = without_sweep(&text);
                let loaded = Loaded::from_str(&path, base).map_err(|e| scenario_error(*e, None))?;
                return Ok(PyScenario {
                    loaded,
                    origin: Origin::File,
                    grid,
                });
            }
            let loaded = Loaded::from_file(&path).map_err(|e| scenario_error(*e, None))?;
            Ok(PyScenario {
                loaded,
                origin: Origin::File,
                grid: None,
            })
        })
    }

    /// The `[sweep]` table of the file the scenario was loaded from, as a dict (`None`
    /// without one).
    #[getter]
    fn sweep_grid<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.grid
            .as_ref()
            .map(|g| to_python(py, &toml::Value::Table(g.clone())))
            .transpose()
    }

    /// Parses and validates scenario text; `path` names it in errors and anchors its relative
    /// paths.
    #[staticmethod]
    fn from_toml(text: String, path: PathBuf) -> PyResult<PyScenario> {
        guard(|| PyScenario::from_text(path, text, Origin::File))
    }

    /// A scenario from a dict of TOML values (nested dicts are tables, lists are arrays);
    /// relative paths in it are resolved against `base_dir`.
    #[staticmethod]
    fn from_dict(d: &Bound<'_, PyDict>, base_dir: PathBuf) -> PyResult<PyScenario> {
        guard(|| {
            let path = base_dir.join(DICT);
            let table = to_toml_table(d, "")
                .map_err(|(field, message)| dict_error(&path, field, message))?;
            let text = toml::to_string(&table).map_err(|e| {
                dict_error(
                    &path,
                    String::new(),
                    format!("cannot write it as TOML: {e}"),
                )
            })?;
            PyScenario::from_text(path.clone(), text.clone(), Origin::Dict(path, text))
        })
    }

    /// The scenario's TOML text.
    fn to_toml(&self) -> String {
        self.loaded.text.clone()
    }

    /// The scenario's TOML document as nested dicts and lists.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let table: toml::Table = toml::from_str(&self.loaded.text)
            .map_err(|e| self.err(Error::Usage(format!("the scenario's text: {e}"))))?;
        to_python(py, &toml::Value::Table(table))
    }

    /// The scenario with the keys of `values` set (`"cluster.stragglers[0].factor"`, written
    /// as a `[sweep]` key), validated again.
    fn with_values(&self, values: &Bound<'_, PyDict>) -> PyResult<PyScenario> {
        guard(|| {
            let mut doc: toml::Table = toml::from_str(&self.loaded.text)
                .map_err(|e| self.err(Error::Usage(format!("the scenario's text: {e}"))))?;
            for (k, v) in values.iter() {
                let key: String = k.extract()?;
                let value = to_toml(&v, &key).map_err(|(f, m)| {
                    to_py(Error::Usage(format!("`{f}`: {m}")), Some(&self.origin))
                })?;
                set_key(&mut doc, &key, value).map_err(|m| {
                    to_py(Error::Usage(format!("`{key}`: {m}")), Some(&self.origin))
                })?;
            }
            let text = toml::to_string(&doc)
                .map_err(|e| self.err(Error::Usage(format!("cannot write TOML: {e}"))))?;
            let origin = match &self.origin {
                Origin::Dict(p, _) => Origin::Dict(p.clone(), text.clone()),
                Origin::File => Origin::File,
            };
            PyScenario::from_text(self.loaded.path.clone(), text, origin)
        })
    }

    /// Every check a run makes before it starts (`dasim validate`): the model, the data, the
    /// topologies, the claims.
    fn validate(&self, py: Python<'_>) -> PyResult<()> {
        let loaded = &self.loaded;
        py.detach(|| guard(|| Plan::prepare(loaded).map(drop).map_err(|e| self.err(e))))
    }

    /// The file the scenario was read from (or anchors it: a dict's base directory joined with
    /// `<dict>`).
    #[getter]
    fn path(&self) -> PathBuf {
        self.loaded.path.clone()
    }

    /// The scenario's name, as the plots title it.
    #[getter]
    fn name(&self) -> String {
        self.loaded.scenario.display_name(&self.loaded.path)
    }

    /// The algorithms' labels, in order.
    #[getter]
    fn algorithms(&self) -> Vec<String> {
        self.loaded
            .scenario
            .algorithms
            .iter()
            .map(|a| a.label())
            .collect()
    }

    /// The seed.
    #[getter]
    fn seed(&self) -> u64 {
        self.loaded.scenario.seed
    }

    /// The number of workers.
    #[getter]
    fn workers(&self) -> usize {
        self.loaded.scenario.cluster.workers
    }
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

fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_owned()
    } else {
        format!("{at}.{key}")
    }
}

/// A Python dict as a TOML table; an error names the key path and says why.
fn to_toml_table(d: &Bound<'_, PyDict>, at: &str) -> Result<toml::Table, (String, String)> {
    let mut table = toml::Table::new();
    for (k, v) in d.iter() {
        let Ok(key) = k.extract::<String>() else {
            return Err((
                at.to_owned(),
                format!("a key must be a string, not {}", type_name(&k)),
            ));
        };
        let here = join(at, &key);
        table.insert(key, to_toml(&v, &here)?);
    }
    Ok(table)
}

fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map_or_else(|_| "?".into(), |n| n.to_string())
}

/// A Python value as a TOML value: bool, int, float, str, list or tuple, dict.
fn to_toml(v: &Bound<'_, PyAny>, at: &str) -> Result<toml::Value, (String, String)> {
    if v.is_instance_of::<PyBool>() {
        return Ok(toml::Value::Boolean(v.extract().expect("a bool")));
    }
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(toml::Value::String(s.to_string()));
    }
    if let Ok(d) = v.cast::<PyDict>() {
        return to_toml_table(d, at).map(toml::Value::Table);
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let items: Vec<Bound<'_, PyAny>> = v
            .try_iter()
            .and_then(|it| it.collect())
            .map_err(|e| (at.to_owned(), e.to_string()))?;
        return items
            .iter()
            .enumerate()
            .map(|(i, x)| to_toml(x, &format!("{at}[{i}]")))
            .collect::<Result<_, _>>()
            .map(toml::Value::Array);
    }
    if v.is_instance_of::<PyInt>() || v.hasattr("__index__").unwrap_or(false) {
        return v
            .extract::<i64>()
            .map(toml::Value::Integer)
            .map_err(|_| (at.to_owned(), "the integer does not fit in 64 bits".into()));
    }
    if v.is_instance_of::<PyFloat>() || v.hasattr("__float__").unwrap_or(false) {
        return v
            .extract::<f64>()
            .map(toml::Value::Float)
            .map_err(|e| (at.to_owned(), e.to_string()));
    }
    let hint = if v.is_none() {
        ": leave the key out for its default"
    } else {
        ""
    };
    Err((
        at.to_owned(),
        format!("a {} has no TOML form{hint}", type_name(v)),
    ))
}

/// A TOML value as Python: tables are dicts, arrays lists, datetimes their text.
fn to_python<'py>(py: Python<'py>, v: &toml::Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        toml::Value::String(s) => s.into_pyobject(py)?.into_any(),
        toml::Value::Integer(i) => i.into_pyobject(py)?.into_any(),
        toml::Value::Float(f) => f.into_pyobject(py)?.into_any(),
        toml::Value::Boolean(b) => b.into_pyobject(py)?.to_owned().into_any(),
        toml::Value::Datetime(d) => d.to_string().into_pyobject(py)?.into_any(),
        toml::Value::Array(items) => {
            let list = PyList::empty(py);
            for x in items {
                list.append(to_python(py, x)?)?;
            }
            list.into_any()
        }
        toml::Value::Table(t) => {
            let dict = PyDict::new(py);
            for (k, x) in t {
                dict.set_item(k, to_python(py, x)?)?;
            }
            dict.into_any()
        }
    })
}

/// What a run or a sweep reports while it goes, queued for the waiting Python thread.
#[derive(Debug)]
enum Event {
    Started(String),
    Advanced {
        label: String,
        fraction: f64,
        sim_time_s: f64,
        steps: u64,
        wall_s: f64,
    },
    Finished(String),
    Note(String),
    Warning(String),
    SweepStarted {
        total: usize,
        selected: usize,
        skipped: usize,
        to_run: usize,
    },
    PointEnded {
        name: String,
        error: Option<String>,
        wall_s: f64,
    },
}

/// The queue of [`Event`]s; consecutive `Advanced` events are merged into the last.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<Event>>>);

impl Events {
    fn push(&self, e: Event) {
        let mut q = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(e, Event::Advanced { .. }) && matches!(q.last(), Some(Event::Advanced { .. })) {
            q.pop();
        }
        q.push(e);
    }

    fn take(&self) -> Vec<Event> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Progress for Events {
    fn algorithm_started(&mut self, label: &str) {
        self.push(Event::Started(label.to_owned()));
    }
    fn advanced(&mut self, label: &str, p: &RunProgress, wall_s: f64) {
        self.push(Event::Advanced {
            label: label.to_owned(),
            fraction: p.fraction,
            sim_time_s: p.time.as_secs_f64(),
            steps: p.worker_steps,
            wall_s,
        });
    }
    fn algorithm_finished(&mut self, label: &str) {
        self.push(Event::Finished(label.to_owned()));
    }
    fn note(&mut self, message: &str) {
        self.push(Event::Note(message.to_owned()));
    }
    fn warning(&mut self, message: &str) {
        self.push(Event::Warning(message.to_owned()));
    }
}

impl SweepProgress for Events {
    fn started(&mut self, report: &SweepReport, to_run: usize) {
        self.push(Event::SweepStarted {
            total: report.total,
            selected: report.selected,
            skipped: report.skipped,
            to_run,
        });
    }
    fn point_ended(&mut self, name: &str, error: Option<&str>, wall_s: f64) {
        self.push(Event::PointEnded {
            name: name.to_owned(),
            error: error.map(str::to_owned),
            wall_s,
        });
    }
}

/// Hands `events` to the reporter's methods (`started`, `advanced`, `finished`, `note`,
/// `warning`, `sweep_started`, `point_ended`).
fn report(reporter: &Bound<'_, PyAny>, events: Vec<Event>) -> PyResult<()> {
    for e in events {
        match e {
            Event::Started(label) => reporter.call_method1("started", (label,))?,
            Event::Advanced {
                label,
                fraction,
                sim_time_s,
                steps,
                wall_s,
            } => reporter.call_method1("advanced", (label, fraction, sim_time_s, steps, wall_s))?,
            Event::Finished(label) => reporter.call_method1("finished", (label,))?,
            Event::Note(m) => reporter.call_method1("note", (m,))?,
            Event::Warning(m) => reporter.call_method1("warning", (m,))?,
            Event::SweepStarted {
                total,
                selected,
                skipped,
                to_run,
            } => reporter.call_method1("sweep_started", (total, selected, skipped, to_run))?,
            Event::PointEnded {
                name,
                error,
                wall_s,
            } => reporter.call_method1("point_ended", (name, error, wall_s))?,
        };
    }
    Ok(())
}

/// Runs `work` on a thread of its own, the GIL released, while this thread hands its events to
/// `reporter` and checks for signals every tenth of a second. A signal's exception (Ctrl-C's
/// `KeyboardInterrupt`) or the reporter's raises `stop` and is returned once `work` has
/// returned; a panic in `work` is [`InternalError`].
fn wait_for<T: Send>(
    py: Python<'_>,
    reporter: Option<&Bound<'_, PyAny>>,
    events: &Events,
    stop: &AtomicBool,
    work: impl FnOnce() -> T + Send,
) -> (PyResult<T>, Option<PyErr>) {
    let mut raised: Option<PyErr> = None;
    let result = std::thread::scope(|s| {
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let handle = s.spawn(move || {
            let r = catch_unwind(AssertUnwindSafe(work));
            let _ = done_tx.send(());
            r
        });
        let mut done_rx = Some(done_rx);
        loop {
            let rx = done_rx.take().expect("put back below");
            let (finished, rx) = py.detach(move || {
                let r = rx.recv_timeout(Duration::from_millis(100));
                let timeout = matches!(r, Err(std::sync::mpsc::RecvTimeoutError::Timeout));
                (!timeout, rx)
            });
            done_rx = Some(rx);
            let pending = events.take();
            if let Some(r) = reporter
                && raised.is_none()
                && let Err(e) = report(r, pending)
            {
                stop.store(true, Ordering::SeqCst);
                raised = Some(e);
            }
            if let Err(e) = py.check_signals() {
                stop.store(true, Ordering::SeqCst);
                raised.get_or_insert(e);
            }
            if finished {
                break;
            }
        }
        handle.join().expect("the work's panics are caught")
    });
    (result.map_err(|panic| bug(&*panic)), raised)
}

/// The thread pools of runs, one per number of threads, kept for the next run.
fn pool(threads: usize) -> PyResult<Arc<rayon::ThreadPool>> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
    let mut pools = POOLS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(p) = pools.get(&threads) {
        return Ok(p.clone());
    }
    let p = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .stack_size(8 << 20)
        .build()
        .map_err(|e| {
            to_py(
                Error::Usage(format!("cannot start {threads} threads: {e}")),
                None,
            )
        })?;
    let p = Arc::new(p);
    pools.insert(threads, p.clone());
    Ok(p)
}

fn threads_or_cores(threads: Option<usize>) -> PyResult<usize> {
    match threads {
        Some(0) => Err(to_py(
            Error::Usage("threads must be at least 1".into()),
            None,
        )),
        Some(t) => Ok(t),
        None => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
    }
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
        let choice = backend_choice(backend)?;
        let (loaded_here, ckpt, choice, out, every) = match resume {
            Some(dir) => {
                let ckpt = RunCheckpoint::read(&dir).map_err(|e| to_py(e, None))?;
                let choice = ckpt.backend_choice(choice).map_err(|e| to_py(e, None))?;
                let loaded = match scenario {
                    Some(_) => None,
                    None => {
                        let path = ckpt.scenario_file().map_err(|e| to_py(e, None))?;
                        Some(Loaded::from_file(path).map_err(|e| scenario_error(*e, None))?)
                    }
                };
                let every = checkpoint_every.or(ckpt.checkpoint_every_s);
                (loaded, Some(Box::new(ckpt)), choice, Some(dir), every)
            }
            None => (None, None, choice, out, checkpoint_every),
        };
        let (loaded, origin) = match (&loaded_here, scenario) {
            (Some(l), _) => (l, None),
            (None, Some(s)) => (&s.loaded, Some(&s.origin)),
            (None, None) => {
                return Err(to_py(
                    Error::Usage("run needs a scenario, or resume= a run directory".into()),
                    None,
                ));
            }
        };
        let threads = threads_or_cores(threads)?;
        let pool = pool(threads)?;
        let backend = crate::runtime::backend(choice).map_err(|e| to_py(e, origin))?;
        let backend_name = backend.to_string();
        let mut dir = match (&out, &ckpt) {
            (Some(dir), Some(_)) => Some(RunDir::resume(dir, &loaded.path)),
            (Some(dir), None) => {
                Some(RunDir::create(dir, &loaded.path, force).map_err(|e| to_py(e, origin))?)
            }
            (None, _) => None,
        };
        let mut memory = InMemory::default();
        let events = Events::default();
        let stop = AtomicBool::new(false);
        let execution = Execution { threads, max_batch };
        let (result, raised) = wait_for(py, reporter.as_ref(), &events, &stop, || {
            let mut progress = events.clone();
            let sink: &mut (dyn RunSink + Send) = match &mut dir {
                Some(d) => d,
                None => &mut memory,
            };
            pool.install(|| {
                let plan = Plan::prepare(loaded)?;
                Simulation::new(&plan, backend)
                    .execution(execution)
                    .memory_limit(memory_limit)
                    .checkpoints(Checkpoints {
                        every_s: every,
                        interrupt: Some(&stop),
                        resume: ckpt.as_deref(),
                    })
                    .run(sink, &mut progress)
            })
        });
        let result = result?;
        match (raised, result) {
            // Ctrl-C: the run stopped and says where its checkpoint is.
            (Some(e), Err(Error::Interrupted(msg)))
                if e.is_instance_of::<PyKeyboardInterrupt>(py) =>
            {
                Err(PyKeyboardInterrupt::new_err(msg))
            }
            (Some(e), _) => Err(e),
            (None, Err(e)) => Err(to_py(e, origin)),
            (None, Ok(_)) => Ok(match out {
                Some(dir) => (Some(dir), None, backend_name),
                None => (None, Some(memory.files()), backend_name),
            }),
        }
    })
}

/// Runs the scenario under each of `seeds` (its own seed without them), each run kept in
/// memory, and judges its `[[expect]]` entries as `dasim check` does: one verdict per claim,
/// algorithm and seed, or per claim and algorithm for the mean over the seeds (`seeds =
/// "mean"`). Every seed is loaded and planned before the first runs; a run that fails fails
/// its claims (`run_error`), and Ctrl-C stops the checks. Returns the verdicts as dicts, in the
/// order of the command's report.
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
        let seeds = seeds.unwrap_or_else(|| vec![loaded.scenario.seed]);
        crate::check::distinct_seeds(&seeds)
            .map_err(|e| to_py(Error::Usage(format!("seeds: {e}")), origin))?;
        let mut plans = Vec::new();
        for &seed in &seeds {
            let l = loaded
                .with_seed(seed)
                .map_err(|e| scenario_error(*e, origin))?;
            plans.push((seed, Plan::prepare(&l).map_err(|e| to_py(e, origin))?));
        }
        let claims = plans[0].1.claims.clone();
        let threads = threads_or_cores(threads)?;
        let pool = pool(threads)?;
        let backend =
            crate::runtime::backend(backend_choice(backend)?).map_err(|e| to_py(e, origin))?;
        let events = Events::default();
        let stop = AtomicBool::new(false);
        let execution = Execution {
            threads,
            max_batch: None,
        };
        let (result, raised) = wait_for(py, reporter.as_ref(), &events, &stop, || {
            let mut progress = events.clone();
            pool.install(|| {
                let mut per_seed = Vec::new();
                for (seed, plan) in &plans {
                    progress.note(&format!("seed {seed}"));
                    let checks = Simulation::new(plan, backend.clone())
                        .execution(execution)
                        .checkpoints(Checkpoints {
                            every_s: None,
                            interrupt: Some(&stop),
                            resume: None,
                        })
                        .run(&mut InMemory::default(), &mut progress);
                    match checks {
                        Ok(results) => per_seed.push((*seed, Ok(results.checks))),
                        Err(e @ Error::Interrupted(_)) => return Err(e),
                        Err(e) => per_seed.push((*seed, Err(e.to_string()))),
                    }
                }
                Ok(crate::check::verdicts(&claims, &per_seed))
            })
        });
        let verdicts = match (raised, result?) {
            (Some(e), _) => return Err(e),
            (None, Err(e)) => return Err(to_py(e, origin)),
            (None, Ok(v)) => v,
        };
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
    crate::check::parse_seeds(text).map_err(|e| PyValueError::new_err(format!("seeds: {e}")))
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
        let choice = backend_choice(backend)?;
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
            backend: crate::runtime::backend_name(choice).to_owned(),
            progress: false,
        };
        let events = Events::default();
        let stop = AtomicBool::new(false);
        let progress: Mutex<Events> = Mutex::new(events.clone());
        let (result, raised) = wait_for(py, reporter.as_ref(), &events, &stop, || {
            run_sweep_here(&parsed, &points, &opts, &stop, &progress)
        });
        let result = result?;
        let report = match (raised, result) {
            (Some(e), Err(Error::Interrupted(msg)))
                if e.is_instance_of::<PyKeyboardInterrupt>(py) =>
            {
                return Err(PyKeyboardInterrupt::new_err(msg));
            }
            (Some(e), _) => return Err(e),
            (None, Err(e)) => return Err(to_py(e, origin)),
            (None, Ok(r)) => r,
        };
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
