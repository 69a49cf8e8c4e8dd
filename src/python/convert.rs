//! Values across the boundary: Python dicts, lists and scalars as TOML, and back.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_owned()
    } else {
        format!("{at}.{key}")
    }
}

/// A Python dict as a TOML table; an error names the key path and says why.
pub(super) fn to_toml_table(
    d: &Bound<'_, PyDict>,
    at: &str,
) -> Result<toml::Table, (String, String)> {
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
pub(super) fn to_toml(v: &Bound<'_, PyAny>, at: &str) -> Result<toml::Value, (String, String)> {
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
pub(super) fn to_python<'py>(py: Python<'py>, v: &toml::Value) -> PyResult<Bound<'py, PyAny>> {
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
