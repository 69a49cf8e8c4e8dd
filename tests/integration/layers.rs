//! The modules' imports, read from the sources: every `crate::MODULE` path of each crate's
//! top-level modules, outside comments and test modules. No crate of the workspace has an import
//! cycle between its modules, and the simulator's modules are layers (the architecture
//! chapter's "Layers"): the clock below everything, the models of the cluster, network,
//! parameters, records and faults on it, the algorithm API on them, the driver above the API and
//! the algorithms on top; no module imports one of a higher layer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

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

/// The simulator's top-level modules and their layers, lowest first.
const SIM_LAYERS: &[(&str, u8)] = &[
    ("error", 0),
    ("raw", 0),
    ("csv", 0),
    ("env", 0),
    ("clock", 1),
    ("cluster", 2),
    ("net", 2),
    ("store", 2),
    ("record", 2),
    ("fault", 2),
    ("compress", 2),
    ("algorithm", 3),
    ("engine", 4),
    ("algorithms", 5),
];

/// The top-level modules of the crate at `src` and the ones each names, with a file that does.
fn graph(src: &Path) -> BTreeMap<String, BTreeMap<String, PathBuf>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let module = |f: &Path| -> String {
        let rel = f.strip_prefix(src).unwrap();
        let first = rel.iter().next().unwrap().to_string_lossy().into_owned();
        first.trim_end_matches(".rs").to_owned()
    };
    let modules: BTreeSet<String> = files.iter().map(|f| module(f)).collect();
    let mut g: BTreeMap<String, BTreeMap<String, PathBuf>> = BTreeMap::new();
    for f in &files {
        let from = module(f);
        if from == "lib" || from == "main" {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        let text = text.split("#[cfg(test)]").next().unwrap_or(&text);
        let code: String = text
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        for (at, _) in code.match_indices("crate::") {
            let name: String = code[at + 7..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if name != from && modules.contains(&name) {
                g.entry(from.clone())
                    .or_default()
                    .entry(name)
                    .or_insert_with(|| f.strip_prefix(src).unwrap().to_path_buf());
            }
        }
    }
    g
}

/// A cycle of `g`, if it has one.
fn cycle(g: &BTreeMap<String, BTreeMap<String, PathBuf>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        g: &BTreeMap<String, BTreeMap<String, PathBuf>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(k) = path.iter().position(|p| p == m) {
            let mut c = path[k..].to_vec();
            c.push(m.to_owned());
            return Some(c);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_owned());
        for to in g.get(m).into_iter().flat_map(|t| t.keys()) {
            if let Some(c) = visit(to, g, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|m| visit(m, g, &mut Vec::new(), &mut done))
}

#[test]
fn no_crate_of_the_workspace_has_an_import_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for krate in ["src", "sim/src", "models/src", "reports/src"] {
        let g = graph(&root.join(krate));
        assert!(!g.is_empty(), "{krate}: no module found");
        if let Some(c) = cycle(&g) {
            panic!("{krate}: an import cycle: {}", c.join(" -> "));
        }
    }
}

#[test]
fn no_simulator_module_imports_a_higher_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("sim/src");
    let g = graph(&src);
    let layer: BTreeMap<&str, u8> = SIM_LAYERS.iter().copied().collect();
    let mut wrong = Vec::new();
    for (from, tos) in &g {
        let Some(&lf) = layer.get(from.as_str()) else {
            panic!(
                "sim/src: module `{from}` has no layer in SIM_LAYERS (tests/integration/layers.rs)"
            );
        };
        for (to, file) in tos {
            let lt = layer[to.as_str()];
            if lt > lf {
                wrong.push(format!(
                    "sim/src/{}: `{from}` (layer {lf}) imports `{to}` (layer {lt})",
                    file.display()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that run back up:\n{}",
        wrong.join("\n")
    );
    // The clock imports nothing of the simulator but the configuration errors.
    let clock: Vec<&String> = g.get("clock").into_iter().flat_map(|t| t.keys()).collect();
    assert!(clock.iter().all(|m| *m == "error"), "{clock:?}");
}
