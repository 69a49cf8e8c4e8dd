//! The simulator's layers (the architecture chapter's "Layers"): the clock below everything, the
//! models of the cluster, network, parameters, records and faults on it, the algorithm API on
//! them, the driver above the API and the algorithms on top. No module imports one of a higher
//! layer, and no two modules import each other, directly or through others.
//!
//! Read from the sources: every `crate::MODULE` path outside comments and test modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module of `sim/src` and its layer, lowest first.
const LAYERS: &[(&str, u8)] = &[
    ("error", 0),
    ("raw", 0),
    ("env", 0),
    ("clock", 1),
    ("cluster", 2),
    ("net", 2),
    ("params", 2),
    ("record", 2),
    ("fault", 2),
    ("algorithm", 3),
    ("engine", 4),
    ("algorithms", 5),
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a source file without its comments and its `#[cfg(test)]` module.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or(text);
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules each top-level module names (`crate::net::…`), with a file that does.
fn imports(src: &Path) -> BTreeMap<String, BTreeMap<String, PathBuf>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    files.sort();
    let modules: BTreeSet<&str> = LAYERS.iter().map(|(m, _)| *m).collect();
    let mut graph: BTreeMap<String, BTreeMap<String, PathBuf>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap();
        let first = rel.iter().next().unwrap().to_string_lossy().into_owned();
        let from = first.trim_end_matches(".rs").to_owned();
        if from == "lib" {
            continue;
        }
        assert!(
            modules.contains(from.as_str()),
            "sim/src/{}: module `{from}` has no layer in LAYERS (tests/layers.rs)",
            rel.display()
        );
        let text = code(&std::fs::read_to_string(&file).unwrap());
        for (at, _) in text.match_indices("crate::") {
            let rest = &text[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if name != from && modules.contains(name.as_str()) {
                graph
                    .entry(from.clone())
                    .or_default()
                    .entry(name)
                    .or_insert_with(|| rel.to_path_buf());
            }
        }
    }
    graph
}

#[test]
fn no_module_imports_a_higher_layer_and_no_import_cycle_remains() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = imports(&src);
    let layer: BTreeMap<&str, u8> = LAYERS.iter().copied().collect();
    let mut wrong = Vec::new();
    for (from, tos) in &graph {
        for (to, file) in tos {
            if layer[to.as_str()] > layer[from.as_str()] {
                wrong.push(format!(
                    "sim/src/{}: `{from}` (layer {}) imports `{to}` (layer {})",
                    file.display(),
                    layer[from.as_str()],
                    layer[to.as_str()]
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that run back up:\n{}",
        wrong.join("\n")
    );
    // No cycle: a depth-first search finds no edge back to a module on its path.
    fn visit<'g>(
        m: &'g str,
        graph: &'g BTreeMap<String, BTreeMap<String, PathBuf>>,
        path: &mut Vec<&'g str>,
        done: &mut BTreeSet<&'g str>,
    ) {
        if let Some(k) = path.iter().position(|p| *p == m) {
            panic!("an import cycle: {} -> {m}", path[k..].join(" -> "));
        }
        if done.contains(m) {
            return;
        }
        path.push(m);
        for to in graph.get(m).into_iter().flat_map(|t| t.keys()) {
            visit(to, graph, path, done);
        }
        path.pop();
        done.insert(m);
    }
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        visit(m, &graph, &mut Vec::new(), &mut done);
    }
    // The clock imports nothing of the simulator but the configuration errors.
    let clock: Vec<&String> = graph
        .get("clock")
        .into_iter()
        .flat_map(|t| t.keys())
        .collect();
    assert!(clock.iter().all(|m| *m == "error"), "{clock:?}");
}
