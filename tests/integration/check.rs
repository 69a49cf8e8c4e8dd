//! `[[expect]]` claims end to end: `dasim check` (exit codes, the table, JUnit XML, seeds, the
//! temporary directory) and `dasim run` (`checks.csv`, `summary.json`, `--strict`), and every
//! kind of bad expectation refused with its position before anything runs.
//!
//! The scenarios train the quadratic (no data to read) for 0.2 simulated seconds: each run takes
//! milliseconds.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;

/// Four workers, worker 1 twice as slow (a jitter on every worker, so that seeds differ), an
/// all-reduce and a parameter server; one claim that holds and one placeholder.
const QUAD: &str = r#"name = "quad"
seed = 3

[cluster]
workers = 4
step_time_ms = 10.0

[[cluster.stragglers]]
workers = [1]
factor = 2.0

[[cluster.stragglers]]
kind = "jitter"
workers = "all"
distribution = "lognormal"
mean = 1.0
cv = 0.3

[topology]
kind = "ring"

[model]
kind = "quadratic"
dim = 8

[optimizer]
lr = 0.05

[run]
sim_time_s = 0.2
eval_every_s = 0.05

[[algorithms]]
kind = "allreduce"

[[algorithms]]
kind = "ps"

# A-PSGD: with n workers the server applies about n - 1 pushes during a worker's step.
[[expect]]
metric = "staleness.mean"
algorithm = "ps"
op = "~="
value = "n - 1"
rel_tol = 0.5
note = "Lian et al. 2015: staleness about n - 1"

[[expect]]
metric = "final_consensus"
algorithm = "allreduce"
op = "=="
value = 0
"#;

/// A claim that fails: the server's gradients are not fresh.
const FAILING: &str = r#"
[[expect]]
metric = "staleness.max"
algorithm = "ps"
op = "<"
value = 1
"#;

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn check(args: &[&str]) -> std::process::Output {
    let mut all = vec!["check", "--backend", "flex", "--quiet"];
    all.extend_from_slice(args);
    dasim(&all)
}

/// The table's rows (the header left out), split into cells on runs of two or more spaces.
fn table_rows(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .skip(1)
        .take_while(|l| !l.contains(" verdicts: "))
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

/// A minimal XML well-formedness check: balanced tags, quoted attributes, known entities, one
/// root. Returns every element's name and attributes, in document order.
fn xml_elements(x: &str) -> Vec<(String, BTreeMap<String, String>)> {
    fn entities_ok(s: &str) -> bool {
        let mut rest = s;
        while let Some(i) = rest.find('&') {
            let tail = &rest[i..];
            let ok = ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                .iter()
                .any(|e| tail.starts_with(e));
            if !ok {
                return false;
            }
            rest = &tail[1..];
        }
        true
    }
    let mut s = x.trim_start();
    if let Some(rest) = s.strip_prefix("<?xml") {
        s = &rest[rest.find("?>").expect("the declaration ends") + 2..];
    }
    let mut stack: Vec<String> = Vec::new();
    let mut elements = Vec::new();
    let mut roots = 0;
    loop {
        let Some(open) = s.find('<') else {
            assert!(s.trim().is_empty(), "text after the root: {s:?}");
            break;
        };
        let text = &s[..open];
        assert!(entities_ok(text), "bad entity in {text:?}");
        assert!(
            !stack.is_empty() || text.trim().is_empty(),
            "text outside the root"
        );
        let close = s[open..].find('>').expect("a tag ends") + open;
        let tag = &s[open + 1..close];
        s = &s[close + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(
                stack.pop().as_deref(),
                Some(name.trim()),
                "unbalanced </{name}>"
            );
            continue;
        }
        let self_closing = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let name_end = tag.find(char::is_whitespace).unwrap_or(tag.len());
        let name = tag[..name_end].to_owned();
        assert!(!name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_'));
        let mut attrs = BTreeMap::new();
        let mut rest = tag[name_end..].trim();
        while !rest.is_empty() {
            let eq = rest.find('=').expect("an attribute has a value");
            let key = rest[..eq].trim().to_owned();
            let after = rest[eq + 1..].trim_start();
            assert!(after.starts_with('"'), "unquoted attribute {key}");
            let end = after[1..].find('"').expect("a closing quote") + 1;
            let value = &after[1..end];
            assert!(
                !value.contains('<') && entities_ok(value),
                "bad value {value:?}"
            );
            assert!(
                attrs.insert(key.clone(), value.to_owned()).is_none(),
                "{key} twice"
            );
            rest = after[end + 1..].trim_start();
        }
        if stack.is_empty() {
            roots += 1;
        }
        elements.push((name.clone(), attrs));
        if !self_closing {
            stack.push(name);
        }
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
    assert_eq!(roots, 1, "one root element");
    elements
}

#[test]
fn a_passing_claim_exits_0_and_a_failing_one_1_with_junit_counts_matching_the_table() {
    let (dir, pass) = scenario(QUAD, "pass.toml");
    let fail = dir.path().join("fail.toml");
    std::fs::write(&fail, format!("{QUAD}{FAILING}")).unwrap();

    let o = check(&[pass.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    let rows = table_rows(&out);
    assert_eq!(rows.len(), 2, "{out}");
    assert!(rows.iter().all(|r| r.contains(&"pass".to_owned())), "{out}");
    assert!(
        out.contains("2 verdicts: 2 passed, 0 failed, 0 skipped"),
        "{out}"
    );
    assert!(out.contains("staleness.mean ~= n - 1 (±50%)"), "{out}");

    let junit = dir.path().join("reports/junit.xml");
    let o = check(&[
        pass.to_str().unwrap(),
        fail.to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    let rows = table_rows(&out);
    let failed_rows = rows
        .iter()
        .filter(|r| r.contains(&"fail".to_owned()))
        .count();
    assert_eq!((rows.len(), failed_rows), (5, 1), "{out}");
    assert!(
        out.contains("5 verdicts: 4 passed, 1 failed, 0 skipped"),
        "{out}"
    );

    let xml = std::fs::read_to_string(&junit).unwrap();
    let elements = xml_elements(&xml);
    let count = |name: &str| elements.iter().filter(|(n, _)| n == name).count();
    assert_eq!(count("testsuites"), 1);
    assert_eq!(count("testsuite"), 2, "one per scenario");
    assert_eq!(count("testcase"), rows.len(), "one per table row");
    assert_eq!(count("failure"), failed_rows);
    let (_, root) = &elements[0];
    assert_eq!(root["tests"], rows.len().to_string());
    assert_eq!(root["failures"], failed_rows.to_string());
    assert_eq!(root["errors"], "0");
    let suites: Vec<_> = elements.iter().filter(|(n, _)| n == "testsuite").collect();
    assert!(suites[1].1["name"].ends_with("fail.toml"));
    assert_eq!(
        (
            suites[1].1["tests"].as_str(),
            suites[1].1["failures"].as_str()
        ),
        ("3", "1")
    );
    let failure = &elements.iter().find(|(n, _)| n == "failure").unwrap().1;
    assert!(
        failure["message"].starts_with("observed ")
            && failure["message"].contains(", bound &lt; 1"),
        "{failure:?}"
    );
    // The failing test case names the claim, escaped.
    assert!(
        xml.contains("name=\"expect[2] staleness.max &lt; 1 [seed 3]\""),
        "{xml}"
    );
}

/// Writes `text` as `bad.toml` and checks that `check`, `run` and `validate` refuse it with
/// exit code 2 at `position`, with `needles` in the message, and write nothing.
fn refused(text: &str, position: &str, needles: &[&str]) {
    let (dir, path) = scenario(text, "bad.toml");
    let (good, out) = (dir.path().join("good.toml"), dir.path().join("out"));
    std::fs::write(&good, QUAD).unwrap();
    let out_s = out.to_str().unwrap();
    let bad = path.to_str().unwrap();
    for args in [
        // The good scenario comes first: it must not run either.
        vec![
            "check",
            "--backend",
            "flex",
            "--quiet",
            "--out",
            out_s,
            good.to_str().unwrap(),
            bad,
        ],
        vec!["run", bad, "--out", out_s, "--backend", "flex", "--quiet"],
        vec!["validate", bad],
    ] {
        let o = dasim(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(
            err.contains(&format!("bad.toml:{position}")),
            "{args:?}: `{position}` not in:\n{err}"
        );
        for n in needles {
            assert!(err.contains(n), "{args:?}: `{n}` not in:\n{err}");
        }
        assert!(
            !out.exists(),
            "{args:?}: something ran and wrote {}",
            out.display()
        );
    }
}

#[test]
fn every_kind_of_bad_expectation_is_refused_with_its_position_before_anything_runs() {
    let line = |needle: &str| QUAD.lines().position(|l| l.starts_with(needle)).unwrap() + 1;
    let value = line("value = \"n - 1\"");
    // An unknown metric, with a suggestion.
    refused(
        &QUAD.replace("\"staleness.mean\"", "\"staleness.maen\""),
        &format!("{}:10", line("metric = \"staleness.mean\"")),
        &[
            "expect[0].metric",
            "unknown metric `staleness.maen`",
            "did you mean `row_staleness.mean`",
        ],
    );
    // An algorithm label that is not in the scenario.
    refused(
        &QUAD.replace("algorithm = \"ps\"", "algorithm = \"a-psgd\""),
        &format!("{}:13", line("algorithm = \"ps\"")),
        &[
            "expect[0].algorithm",
            "no algorithm of the scenario is labelled `a-psgd`",
            "allreduce, ps",
        ],
    );
    // An expression that does not parse: the caret at the end of the expression.
    refused(
        &QUAD.replace("value = \"n - 1\"", "value = \"(n - 1\""),
        &format!("{value}:16"),
        &[
            "expect[0].value",
            "does not parse",
            "column 7 of the expression",
        ],
    );
    // An unknown quantity: the valid ones are listed.
    refused(
        &QUAD.replace("value = \"n - 1\"", "value = \"n - spectral_gap\""),
        &format!("{value}:14"),
        &[
            "unknown name `spectral_gap`",
            "n, s, tau, gap, degree, P, batch, step_s",
        ],
    );
    // `n-1` is one name: the hint says to write spaces.
    refused(
        &QUAD.replace("value = \"n - 1\"", "value = \"n-s\""),
        &format!("{value}:10"),
        &["unknown name `n-s`", "write `n - s` with spaces"],
    );
    // `over` on a scalar metric.
    refused(
        &QUAD.replace("value = 0\n", "value = 0\nover = \"max\"\n"),
        &format!("{}:8", line("value = 0") + 1),
        &["expect[1].over", "one number per run"],
    );
    // `tau` without Overlap-SGP.
    refused(
        &QUAD.replace("value = \"n - 1\"", "value = \"2 * tau\""),
        &format!("{value}:14"),
        &[
            "`tau`",
            "no `overlap-sgp` algorithm (tau is its delay bound τ)",
        ],
    );
    // A metric the named algorithm does not define.
    refused(
        &QUAD.replace("\"final_consensus\"", "\"message_age.max\""),
        &format!("{}:10", line("metric = \"final_consensus\"")),
        &[
            "`message_age.max` is not defined for allreduce",
            "sgp, overlap-sgp",
        ],
    );
    // A metric the model does not measure (the quadratic has no accuracy): found once the
    // model is known, still before anything runs.
    refused(
        &QUAD.replace("\"final_consensus\"", "\"final_accuracy\""),
        &format!("{}:10", line("metric = \"final_consensus\"")),
        &["needs a model with accuracy"],
    );
    // `~=` without a tolerance.
    refused(
        &QUAD.replace("rel_tol = 0.5\n", ""),
        &format!("{}:6", line("op = \"~=\"")),
        &["needs a tolerance"],
    );
    // A worker that does not exist.
    refused(
        &QUAD.replace("\"final_consensus\"", "\"worker[4].steps\""),
        &format!("{}:10", line("metric = \"final_consensus\"")),
        &["worker 4 is out of range"],
    );
    // An unknown key and an unknown comparison are serde's errors, located as usual.
    refused(
        &format!("{QUAD}tolerance = 0.1\n"),
        &format!("{}:1", QUAD.lines().count() + 1),
        &["unknown field `tolerance`"],
    );
    refused(
        &QUAD.replace("op = \"==\"", "op = \"=\""),
        &format!("{}:6", line("op = \"==\"")),
        &["unknown variant `=`"],
    );
}

#[test]
fn a_scenario_without_claims_is_bad_input_for_check() {
    let text = &QUAD[..QUAD.find("# A-PSGD").unwrap()];
    let (_dir, path) = scenario(text, "none.toml");
    let o = check(&[path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no [[expect]] entry"), "{}", stderr(&o));
}

/// The value of `column` in every row of a run's `checks.csv` (stamp line skipped).
fn checks_column(run: &Path, column: &str) -> Vec<String> {
    let text = std::fs::read_to_string(run.join("checks.csv")).unwrap();
    let mut lines = text.lines();
    assert!(lines.next().unwrap().starts_with("# dasim "), "stamped");
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let at = header.iter().position(|h| *h == column).unwrap();
    lines
        .map(|l| l.split(',').nth(at).unwrap().to_owned())
        .collect()
}

#[test]
fn seeds_run_each_seed_and_mean_aggregates() {
    let text = format!(
        "{QUAD}\n[[expect]]\nmetric = \"worker[1].staleness.mean\"\nalgorithm = \"ps\"\nop = \">\"\nvalue = \"n - 1\"\nseeds = \"mean\"\n"
    );
    let (dir, path) = scenario(&text, "q.toml");
    let out = dir.path().join("runs");
    let o = check(&[
        path.to_str().unwrap(),
        "--seeds",
        "1..3",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        o.status.code() == Some(0) || o.status.code() == Some(1),
        "{}",
        stderr(&o)
    );
    let table = stdout(&o);
    let rows = table_rows(&table);
    // Two claims per seed, then one row for the mean.
    let seeds: Vec<&str> = rows.iter().map(|r| r[1].as_str()).collect();
    assert_eq!(
        seeds,
        ["1", "2", "3", "1", "2", "3", "mean of seeds 1, 2, 3"],
        "{table}"
    );
    let mut per_seed = Vec::new();
    for seed in 1..=3 {
        let run = out.join("q").join(format!("seed-{seed}"));
        let resolved = std::fs::read_to_string(run.join("scenario.toml")).unwrap();
        assert!(resolved.contains(&format!("seed = {seed}\n")), "{resolved}");
        assert!(run.join("loss.png").exists(), "--out keeps the plots");
        let observed = checks_column(&run, "observed");
        per_seed.push(observed[2].parse::<f64>().unwrap());
    }
    assert!(
        per_seed[0] != per_seed[1] || per_seed[1] != per_seed[2],
        "the jitter differs between seeds: {per_seed:?}"
    );
    let mean_row = rows.last().unwrap();
    let mean = per_seed.iter().sum::<f64>() / 3.0;
    let shown: f64 = mean_row[4].parse().unwrap();
    assert!(
        (shown - mean).abs() < 1e-4 * mean,
        "{shown} vs {mean} ({per_seed:?})"
    );
    assert!(
        mean_row
            .last()
            .unwrap()
            .starts_with("mean over seeds 1, 2, 3 of"),
        "{table}"
    );
    // The run directory of a seed is a normal run directory: its resolved scenario, with its
    // [[expect]] entries, validates.
    let resolved = out.join("q/seed-2/scenario.toml");
    let o = dasim(&["validate", resolved.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn without_out_the_runs_go_to_a_temporary_directory_that_is_removed() {
    let (dir, path) = scenario(QUAD, "q.toml");
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_dasim"))
        .args([
            "check",
            path.to_str().unwrap(),
            "--backend",
            "flex",
            "--seeds",
            "1,2",
        ])
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Progress names each scenario and seed.
    let err = stderr(&o);
    assert!(
        err.contains("[1/2]") && err.contains("q.toml seed 1"),
        "{err}"
    );
    assert!(
        err.contains("[2/2]") && err.contains("q.toml seed 2"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(&tmp).unwrap().count(),
        0,
        "left behind in TMPDIR"
    );
}

#[test]
fn dasim_run_records_the_verdicts_and_fails_only_with_strict() {
    let (dir, path) = scenario(&format!("{QUAD}{FAILING}"), "q.toml");
    let out = dir.path().join("out");
    let o = dasim_run_flex(&path, &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let printed = stdout(&o);
    assert!(printed.contains("staleness.max < 1"), "{printed}");
    assert!(
        stderr(&o).contains("1 of 3 claim verdicts failed"),
        "{}",
        stderr(&o)
    );
    assert_eq!(checks_column(&out, "result"), ["pass", "pass", "fail"]);
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let checks = summary["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 3);
    assert_eq!(checks[2]["result"], "fail");
    assert_eq!(checks[0]["note"], "Lian et al. 2015: staleness about n - 1");
    let o = dasim_run_flex(&path, &out, &["--strict", "--force"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));

    // Without claims: no checks.csv (a stale one is removed), no `checks` key.
    let (_d, plain) = scenario(&QUAD[..QUAD.find("# A-PSGD").unwrap()], "plain.toml");
    let o = dasim_run_flex(&plain, &out, &["--strict", "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!out.join("checks.csv").exists());
    let summary = std::fs::read_to_string(out.join("summary.json")).unwrap();
    assert!(!summary.contains("\"checks\""), "{summary}");
    let resolved = std::fs::read_to_string(out.join("scenario.toml")).unwrap();
    assert!(!resolved.contains("expect"), "{resolved}");
}

/// The quantities a bound may name are computed from the scenario: every name of the table in
/// `dasim_reports::claims::QUANTITIES` has a value, and each is the documented one.
#[test]
fn the_quantities_are_computed_from_the_scenario() {
    use dasim::Loaded;
    use dasim::Plan;
    use dasim_reports::claims::QUANTITIES;

    let names: Vec<&str> = QUANTITIES.iter().map(|&(q, _)| q).collect();
    let text = format!(
        r#"seed = 5
[cluster]
workers = 8
step_time_ms = 20.0

[[cluster.groups]]
workers = [7]
step_time_ms = 5.0

[[cluster.stragglers]]
workers = [2, 3]
factor = 2.0

[[cluster.stragglers]]
kind = "markov"
workers = [3]
factor = 3.0
mean_fast_steps = 10.0
mean_slow_steps = 10.0

[[cluster.stragglers]]
kind = "delay"
workers = "all"
distribution = "exponential"
mean_ms = 100.0

[topology]
kind = "torus"
rows = 2
cols = 4

[model]
kind = "quadratic"
dim = 12

[run]
sim_time_s = 0.1

[[algorithms]]
kind = "allreduce"

[[algorithms]]
kind = "overlap-sgp"
label = "osgp"
tau = 3

[[expect]]
metric = "bytes"
algorithm = "osgp"
op = ">="
value = "{}"
"#,
        names.join(" + ")
    );
    let loaded = Loaded::from_str(Path::new("q.toml"), text).unwrap_or_else(|e| panic!("{e}"));
    let q = Plan::prepare(&loaded).unwrap().quantities;
    for name in &names {
        assert!(q.get(name, "osgp").is_some(), "`{name}` has no value");
    }
    let get = |name| q.get(name, "osgp").unwrap();
    assert_eq!(get("n"), 8.0);
    // Worker 3: the fixed factor 2 times the Markov slow state 3; the delay is not a factor.
    assert_eq!(get("s"), 6.0);
    assert_eq!(get("tau"), 3.0);
    // A 2×4 torus: every node has the neighbours left, right and the other row (twice the same).
    assert_eq!(get("degree"), 3.0);
    let topology =
        dasim_sim::net::topology::Topology::build(&loaded.scenario.topology, 8, &loaded.env())
            .unwrap();
    assert_eq!(get("gap"), topology.spectral_gap());
    assert!(get("gap") > 0.0 && get("gap") < 1.0);
    assert_eq!(get("P"), 12.0);
    assert_eq!(get("batch"), 32.0);
    assert_eq!(get("step_s"), 0.005, "worker 7's group is the fastest");
    // tau is the algorithm's own; with one Overlap-SGP entry it is also everyone's.
    assert_eq!(q.get("tau", "allreduce"), Some(3.0));
}

/// `gap` and `degree` of a time-varying schedule are decided before anything runs: `gap` is
/// refused for every time-varying kind (the bidirectional exponential graph of SGP's reference
/// included), and `degree` is the most peers a node has in any iteration, over the whole
/// schedule, `peers_schedule` phases included (not iteration 0's).
#[test]
fn gap_and_degree_of_a_time_varying_schedule_are_decided_before_the_run() {
    use dasim::Loaded;
    use dasim::Plan;

    let scenario = |value: &str| {
        format!(
            r#"[cluster]
workers = 8
step_time_ms = 10.0

[topology]
kind = "bidirectional-exponential"
peers = 1
peers_schedule = [[2, 3]]

[model]
kind = "quadratic"
dim = 4

[run]
sim_time_s = 0.1

[[algorithms]]
kind = "sgp"

[[expect]]
metric = "bytes"
op = ">="
value = "{value}"
"#
        )
    };
    let Err(err) = Loaded::from_str(Path::new("g.toml"), scenario("gap")) else {
        panic!("gap of a time-varying schedule is refused when the scenario loads");
    };
    let err = err.to_string();
    assert!(
        err.contains("g.toml:23:10") && err.contains("time-varying"),
        "{err}"
    );
    let text = scenario("degree");
    let loaded = Loaded::from_str(Path::new("d.toml"), text).unwrap_or_else(|e| panic!("{e}"));
    let q = Plan::prepare(&loaded).unwrap().quantities;
    assert_eq!(
        q.get("degree", "sgp"),
        Some(3.0),
        "three peers per iteration from epoch 2"
    );
}

/// The book's Overlap-SGP example (`testing-claims.md`) holds as written, and still holds under
/// a straggler: it claims the delay bound of the paper's Algorithm 2, which sends at every
/// iteration. (Under the default `send = "after-mix"` a 2× straggler breaks it.)
#[test]
fn the_books_overlap_sgp_example_holds_under_a_straggler() {
    let chapter = common::manifest_dir().join("book/src/testing-claims.md");
    let text = std::fs::read_to_string(&chapter).unwrap();
    let at = text
        .find("For instance, Overlap-SGP's delay bound")
        .expect("the example's introduction");
    let block = &text[at..];
    let start = block.find("```toml\n").expect("the example's block") + "```toml\n".len();
    let end = start + block[start..].find("```").expect("the block's end");
    let example = &block[start..end];
    let straggler = example.replace(
        "[topology]",
        "[[cluster.stragglers]]\nworkers = [7]\nfactor = 2.0\n\n[topology]",
    );
    assert_ne!(straggler, example, "the example has a [topology] table");
    for (name, scenario) in [("as-written.toml", example), ("straggler.toml", &straggler)] {
        let (_dir, path) = common::scenario(scenario, name);
        let o = check(&[path.to_str().unwrap()]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{name}: {}{}",
            stdout(&o),
            stderr(&o)
        );
    }
}
