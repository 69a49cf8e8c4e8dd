//! An `[[algorithms]]` entry may bring its own `topology` and `optimizer`: the algorithm then
//! runs exactly as it would in a scenario whose sections were the entry's (same cluster
//! realization, same bytes), the run directory says which graph and rate each algorithm used,
//! and a bad value in an entry's own section is reported at the entry's line.

use crate::common;

use common::*;
use dasim_reports::rundir::{RunData, Summary};

/// 8 workers on the quadratic, one 4× straggler and jittered step times (so that the
/// realization matters), the scenario-wide graph and optimizer given; `algorithms` appended.
fn quadratic(topology: &str, lr: f64, algorithms: &str) -> String {
    format!(
        r#"seed = 7

[cluster]
workers = 8
step_time_ms = 10.0

[[cluster.stragglers]]
workers = [3]
kind = "fixed"
factor = 4.0

[[cluster.stragglers]]
workers = "all"
kind = "jitter"
distribution = "lognormal"
mean = 1.0
cv = 0.2

[network]
bandwidth_gbps = 10.0
latency_us = 5.0

[topology]
kind = "{topology}"

[model]
kind = "quadratic"
dim = 50
condition = 10.0
noise = 0.1

[optimizer]
lr = {lr}

[run]
sim_time_s = 0.3
eval_every_s = 0.05

{algorithms}"#
    )
}

/// The data rows of `file` in `dir` for `algorithm` (the stamp line names the scenario's hash,
/// which differs between the two scenarios compared).
fn rows(dir: &std::path::Path, file: &str, algorithm: &str) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join(file)).unwrap();
    let rows: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with(&format!("{algorithm},")))
        .map(str::to_owned)
        .collect();
    rows
}

fn summary(dir: &std::path::Path) -> Summary {
    RunData::load(dir).unwrap().summary.unwrap()
}

const SIDE_BY_SIDE: &str = r#"[[algorithms]]
kind = "adpsgd"
topology = { kind = "ring" }

[[algorithms]]
kind = "sgp"

[[algorithms]]
kind = "dasgd"
broadcast = "topology"

[algorithms.optimizer]
lr = 0.02
"#;

#[test]
fn an_entry_with_its_own_sections_runs_as_if_they_were_the_scenarios() {
    let (dir, mixed) = scenario(
        &quadratic("one-peer-exponential", 0.1, SIDE_BY_SIDE),
        "mixed.toml",
    );
    let out = dir.path().join("mixed");
    run_flex(&mixed, &out);

    // Each algorithm alone, in a scenario whose sections are the ones it used.
    let alone = [
        (
            "adpsgd",
            quadratic("ring", 0.1, "[[algorithms]]\nkind = \"adpsgd\"\n"),
        ),
        (
            "sgp",
            quadratic(
                "one-peer-exponential",
                0.1,
                "[[algorithms]]\nkind = \"sgp\"\n",
            ),
        ),
        (
            "dasgd",
            quadratic(
                "one-peer-exponential",
                0.02,
                "[[algorithms]]\nkind = \"dasgd\"\nbroadcast = \"topology\"\n",
            ),
        ),
    ];
    for (label, text) in alone {
        let (d, path) = scenario(&text, &format!("{label}.toml"));
        let single = d.path().join("out");
        run_flex(&path, &single);
        for file in [
            "metrics.csv",
            "series.csv",
            "staleness.csv",
            "utilization.csv",
        ] {
            assert_eq!(
                rows(&out, file, label),
                rows(&single, file, label),
                "{label}: {file} differs from the run with the scenario-wide sections"
            );
        }
    }

    // The summary says which graph and rate each used; the resolved scenario keeps the entries'
    // own sections.
    let s = summary(&out);
    let used: Vec<(String, String, f64)> = s
        .runs
        .iter()
        .map(|r| {
            (
                r.algorithm.clone(),
                r.topology["kind"].as_str().unwrap().to_owned(),
                r.optimizer["lr"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        used,
        [
            ("adpsgd".to_owned(), "ring".to_owned(), 0.1),
            ("sgp".to_owned(), "one-peer-exponential".to_owned(), 0.1),
            ("dasgd".to_owned(), "one-peer-exponential".to_owned(), 0.02),
        ]
    );
    let resolved: toml::Table = std::fs::read_to_string(out.join("scenario.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let entries = resolved["algorithms"].as_array().unwrap();
    assert_eq!(entries[0]["topology"]["kind"].as_str(), Some("ring"));
    assert!(entries[1].get("topology").is_none());
    assert_eq!(entries[2]["optimizer"]["lr"].as_float(), Some(0.02));
    // The resolved scenario runs again to the same bytes.
    let again = dir.path().join("again");
    run_flex(&out.join("scenario.toml"), &again);
    assert_eq!(
        std::fs::read_to_string(out.join("metrics.csv")).unwrap(),
        std::fs::read_to_string(again.join("metrics.csv")).unwrap()
    );
    // The plots' legends name the graph and rate of each.
    let data = RunData::load(&out).unwrap();
    assert_eq!(data.legend("adpsgd"), "adpsgd (ring, lr 0.1)");
}

/// `dasim validate` on `text`: its stderr, after asserting that it failed with exit code 2.
fn invalid(text: &str) -> String {
    let (_dir, path) = scenario(text, "bad.toml");
    let o = dasim(&["validate", path.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    err
}

#[test]
fn errors_in_an_entrys_own_sections_name_the_entry() {
    let base = quadratic("ring", 0.1, "");
    let line_of =
        |text: &str, needle: &str| text.lines().position(|l| l.contains(needle)).unwrap() + 1;

    // AD-PSGD on its own odd ring: not bipartite; the entry's topology is blamed.
    let text = format!(
        "{base}[[algorithms]]\nkind = \"allreduce\"\n\n[[algorithms]]\nkind = \"adpsgd\"\ntopology = {{ kind = \"complete\" }}\n"
    );
    let err = invalid(&text);
    let line = line_of(&text, "kind = \"complete\"");
    assert!(
        err.contains(&format!("bad.toml:{line}:")) && err.contains("algorithms[1].topology.kind"),
        "{err}"
    );
    assert!(err.contains("bipartite"), "{err}");

    // The scenario's graph suits AD-PSGD; an entry's unsuitable one does not change that.
    let text = format!(
        "{base}[[algorithms]]\nkind = \"adpsgd\"\n\n[[algorithms]]\nkind = \"dpsgd\"\ntopology = {{ kind = \"one-peer-exponential\" }}\n"
    );
    let err = invalid(&text);
    assert!(err.contains("algorithms[1].topology.kind"), "{err}");
    assert!(err.contains("time-varying"), "{err}");

    // A bad rate in an entry's optimizer.
    let text =
        format!("{base}[[algorithms]]\nkind = \"dasgd\"\n\n[algorithms.optimizer]\nlr = -0.5\n");
    let err = invalid(&text);
    let line = line_of(&text, "lr = -0.5");
    assert!(
        err.contains(&format!("bad.toml:{line}:")) && err.contains("algorithms[0].optimizer.lr"),
        "{err}"
    );

    // A graph that cannot be built for the cluster (a 3×3 torus of 8 workers).
    let text = format!(
        "{base}[[algorithms]]\nkind = \"dpsgd\"\ntopology = {{ kind = \"torus\", rows = 3, cols = 3 }}\n"
    );
    let err = invalid(&text);
    assert!(err.contains("algorithms[0].topology"), "{err}");

    // An algorithm that reads no graph refuses one of its own rather than ignore it.
    let text = format!(
        "{base}[[algorithms]]\nkind = \"allreduce\"\ntopology = {{ kind = \"complete\" }}\n"
    );
    let err = invalid(&text);
    assert!(
        err.contains("algorithms[0].topology")
            && err.contains("does not use a communication graph"),
        "{err}"
    );

    // An unknown key in an entry's own section is located at the key.
    let text = format!(
        "{base}[[algorithms]]\nkind = \"sgp\"\n\n[algorithms.optimizer]\nlr = 0.1\nmomentun = 0.9\n"
    );
    let err = invalid(&text);
    let line = line_of(&text, "momentun");
    assert!(err.contains(&format!("bad.toml:{line}:")), "{err}");
    assert!(err.contains("momentun"), "{err}");
}
