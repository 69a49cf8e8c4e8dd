//! `dasim.Scenario`: a scenario parsed and validated, from a file, TOML text or a dict, with
//! its keys set as a `[sweep]` names them.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::launch::{Launch, Source};
use crate::sweep::Sweep;
use crate::sweep::spec::{set_key, without_sweep};
use crate::{Error, Loaded};

use super::convert::{to_python, to_toml, to_toml_table};
use super::{DICT, Origin, dict_error, guard, scenario_error, to_py};

/// A scenario, parsed and validated: `dasim.Scenario` holds one.
#[pyclass(name = "Scenario", module = "dasim._core", frozen)]
pub(super) struct PyScenario {
    pub(super) loaded: Loaded,
    pub(super) origin: Origin,
    /// The `[sweep]` table of the file it was loaded from.
    pub(super) grid: Option<toml::Table>,
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
        let launch = Launch::new(Source::Scenario(self.loaded.clone()));
        py.detach(|| guard(|| launch.plans().map(drop).map_err(|e| self.err(e))))
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
