//! Bad input gets a clear error naming the file, line, column and field, a non-zero exit, and
//! never a panic.

use crate::common;

use common::*;

fn expect_error(text: &str, needles: &[&str]) {
    let (dir, path) = scenario(text, "bad.toml");
    for args in [
        vec!["validate", path.to_str().unwrap()],
        vec![
            "run",
            path.to_str().unwrap(),
            "--out",
            dir.path().join("out").to_str().unwrap(),
            "--backend",
            "flex",
            "--quiet",
        ],
    ] {
        let o = dasim(&args);
        let err = stderr(&o);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: exit code; stderr:\n{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        for n in needles {
            assert!(err.contains(n), "{args:?}: `{n}` not in:\n{err}");
        }
    }
}

#[test]
fn unknown_key() {
    expect_error(
        &SMALL.replace(
            "step_time_ms = 10.0",
            "step_time_ms = 10.0\nstep_tme_ms = 3",
        ),
        &["bad.toml:7:1", "unknown field `step_tme_ms`"],
    );
}

#[test]
fn negative_bandwidth() {
    expect_error(
        &SMALL.replace("bandwidth_gbps = 10.0", "bandwidth_gbps = -10.0"),
        &[
            "bad.toml:13:18",
            "network.bandwidth_gbps",
            "positive",
            "-10",
        ],
    );
}

#[test]
fn zero_workers() {
    expect_error(
        &SMALL.replace("workers = 8", "workers = 0"),
        &["bad.toml:5:11", "workers must be at least 2, got 0"],
    );
}

#[test]
fn missing_data_file() {
    expect_error(
        &SMALL.replace(
            "batch_size = 16",
            "batch_size = 16\npath = \"no/such/file.csv\"",
        ),
        &[
            "bad.toml:25:8",
            "data.path",
            "no/such/file.csv",
            "cannot read",
        ],
    );
}

#[test]
fn malformed_data_file() {
    let text = SMALL.replace("batch_size = 16", "batch_size = 16\npath = \"d.csv\"");
    let (dir, path) = scenario(&text, "bad.toml");
    std::fs::write(dir.path().join("d.csv"), "1,2,0\n3,x,1\n").unwrap();
    let o = dasim(&["validate", path.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("d.csv: line 2: column 2: `x` is not a number"),
        "{err}"
    );
}

#[test]
fn adpsgd_needs_a_bipartite_graph() {
    expect_error(
        &SMALL.replace("workers = 8", "workers = 7"),
        &["bad.toml:17:8", "bipartite", "hint"],
    );
}

/// AD-PSGD's reference rotation needs the reference's graph and its gossip thread; the host
/// time of an averaging is a duration.
#[test]
fn adpsgd_schedule_and_overhead_are_checked_where_they_are_written() {
    expect_error(
        &SMALL.replace(
            "kind = \"adpsgd\"",
            "kind = \"adpsgd\"\npartner = \"schedule\"",
        ),
        &[
            "bad.toml:39:11",
            "algorithms[1].partner",
            "odd workers active",
            "bipartite-exponential",
        ],
    );
    expect_error(
        &SMALL.replace(
            "kind = \"adpsgd\"",
            "kind = \"adpsgd\"\npartner = \"schedule\"\naveraging = \"per-step\"",
        ),
        &["algorithms[1].partner", "averaging = \"thread\""],
    );
    expect_error(
        &SMALL.replace(
            "kind = \"adpsgd\"",
            "kind = \"adpsgd\"\naveraging_overhead_us = -5",
        ),
        &[
            "bad.toml:39:25",
            "algorithms[1].averaging_overhead_us",
            "zero or a positive number",
        ],
    );
}

/// Checks that need the model (here, its 1,210 parameters) are made by `dasim validate` and
/// before the first algorithm starts: the allreduce entry before the bad one never runs, and
/// nothing is written.
#[test]
fn model_dependent_checks_come_before_the_first_algorithm() {
    for (entry, needles) in [
        (
            "kind = \"lpp-sgd\"\nprocesses = 5000",
            [
                "bad.toml:39:13",
                "algorithms[1].processes",
                "1210 parameters",
            ],
        ),
        (
            "kind = \"ps\"\nservers = 2000",
            ["bad.toml:39:11", "algorithms[1].servers", "1210 parameters"],
        ),
    ] {
        let text = SMALL.replace("kind = \"adpsgd\"", entry);
        expect_error(&text, &needles);
        let (dir, path) = scenario(&text, "bad.toml");
        let out = dir.path().join("out");
        let o = dasim_run_flex(&path, &out, &["--quiet"]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(
            !out.join("metrics.csv").exists(),
            "the first algorithm ran before the error"
        );
    }
}

#[test]
fn a_straggler_index_out_of_range() {
    expect_error(
        &SMALL.replace("workers = [3]", "workers = [8]"),
        &["bad.toml:9:11", "worker index 8 is out of range"],
    );
}

#[test]
fn no_stop_rule() {
    expect_error(
        &SMALL.replace("sim_time_s = 0.5", ""),
        &[
            "bad.toml:30:1",
            "no stop rule",
            "hint: set at least one of run.sim_time_s",
        ],
    );
}

#[test]
fn an_unknown_algorithm() {
    expect_error(
        &SMALL.replace("kind = \"adpsgd\"", "kind = \"adpsgdd\""),
        &["bad.toml:38:8", "unknown variant `adpsgdd`"],
    );
}

#[test]
fn a_syntax_error() {
    expect_error(&SMALL.replace("seed = 7", "seed = = 7"), &["bad.toml:2:"]);
}

#[test]
fn a_missing_file() {
    let o = dasim(&["validate", "/no/such/scenario.toml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("/no/such/scenario.toml: cannot read the scenario file"));
}

/// Every scenario under `scenarios/`, subdirectories (the benchmarks of `perf/`) included.
#[test]
fn every_shipped_scenario_validates() {
    let mut dirs = vec![common::manifest_dir().join("scenarios")];
    let mut seen = 0;
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "toml") {
                let o = dasim(&["validate", path.to_str().unwrap()]);
                assert!(o.status.success(), "{}: {}", path.display(), stderr(&o));
                seen += 1;
            }
        }
    }
    assert!(seen >= 17, "{seen} scenarios");
}

/// `validate` sizes a run on flex, and adds the GPU's estimate where it differs: a
/// convolutional model's passes there keep im2col's columns, an MLP's do not.
#[test]
fn validate_adds_the_gpu_estimate_where_it_differs() {
    let scenarios = common::manifest_dir().join("scenarios");
    let memory_lines = |file: &str| -> Vec<String> {
        let o = dasim(&["validate", scenarios.join(file).to_str().unwrap()]);
        assert!(o.status.success(), "{file}: {}", stderr(&o));
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.starts_with("memory"))
            .map(str::to_owned)
            .collect()
    };
    let total = |line: &str| -> f64 {
        let after = line.split("estimated ").nth(1).unwrap();
        let (value, unit) = after.split_once(' ').unwrap();
        let scale = match unit.split_whitespace().next().unwrap() {
            "KiB" => 1.0,
            "MiB" => 1024.0,
            "GiB" => 1024.0 * 1024.0,
            other => panic!("unit {other} in {line}"),
        };
        value.parse::<f64>().unwrap() * scale
    };
    let conv = memory_lines("lenet.toml");
    assert_eq!(conv.len(), 2, "{conv:?}");
    assert!(conv[0].starts_with("memory: estimated "), "{conv:?}");
    assert!(
        conv[1].starts_with("memory on a GPU (wgpu): estimated ") && conv[1].contains("im2col"),
        "{conv:?}"
    );
    assert!(total(&conv[1]) > total(&conv[0]), "{conv:?}");
    let mlp = memory_lines("quickstart.toml");
    assert_eq!(mlp.len(), 1, "{mlp:?}");
}

/// A run refused by the memory check: exit code 2, no panic, every `needle` in its message, and
/// nothing written to `out`.
fn assert_refused(o: &std::process::Output, out: &std::path::Path, needles: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    for needle in needles {
        assert!(err.contains(needle), "`{needle}` not in:\n{err}");
    }
    assert!(!out.exists(), "a refused run writes nothing");
}

/// A run whose memory estimate exceeds the limit is refused before anything is written, with
/// the estimate and what would help.
#[test]
fn memory_estimate_over_the_limit_is_refused_before_the_run() {
    let (dir, path) = scenario(SMALL, "big.toml");
    let out = dir.path().join("out");
    let o = dasim_run_flex(&path, &out, &["--memory-limit", "1KiB"]);
    assert_refused(
        &o,
        &out,
        &[
            "estimated",
            "parameters",
            "more than the limit set by --memory-limit (1.0 KiB)",
            "hint: use fewer workers",
        ],
    );
    // The same run under a generous limit goes ahead.
    let o = dasim_run_flex(&path, &out, &["--memory-limit", "4GiB"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// DASGD broadcasting ResNet-50-sized gradients (102 MB) over 10 GbE posts its messages far
/// faster than the uplinks carry them, so they pile up for the whole run: the estimate counts
/// them and the run is refused, with a hint about what grows. Forwarding along the ring posts
/// two per step instead of 255, and goes ahead under the same limit.
#[test]
fn messages_piling_up_behind_the_uplinks_are_estimated_and_refused() {
    let text = |broadcast: &str| {
        format!(
            r#"
[cluster]
workers = 256
device_tflops = 15.7
[network]
preset = "10gbe"
[topology]
kind = "ring"
[model]
kind = "timing"
preset = "resnet50"
[data]
batch_size = 32
[run]
sim_time_s = 20.0
eval_every_s = 10.0
[[algorithms]]
kind = "dasgd"
broadcast = "{broadcast}"
"#
        )
    };
    let (dir, path) = scenario(&text("all"), "all.toml");
    // `validate` prints the estimate, so a run can be sized before it is submitted.
    let o = dasim(&["validate", path.to_str().unwrap()]);
    let printed = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        printed.contains("memory: estimated") && printed.contains("queued in the network"),
        "{printed}"
    );
    let out = dir.path().join("out");
    let o = dasim_run_flex(&path, &out, &["--memory-limit", "1GiB"]);
    assert_refused(
        &o,
        &out,
        &[
            "queued in the network",
            "more than the limit set by --memory-limit (1.0 GiB)",
            "messages waiting behind the workers' uplinks",
            "broadcast = \"topology\"",
        ],
    );
    let (dir, path) = scenario(&text("topology"), "topology.toml");
    let out = dir.path().join("out");
    let o = dasim_run_flex(&path, &out, &["--memory-limit", "1GiB"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn zero_threads_and_batches_are_usage_errors() {
    let (dir, path) = scenario(SMALL, "s.toml");
    for (flag, value) in [
        ("--threads", "0"),
        ("--max-batch", "0"),
        ("--memory-limit", "3 parsecs"),
    ] {
        let o = dasim(&[
            "run",
            path.to_str().unwrap(),
            "--out",
            dir.path().join("out").to_str().unwrap(),
            "--quiet",
            flag,
            value,
        ]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(err.contains(flag) || err.contains("parsecs"), "{err}");
        assert!(!dir.path().join("out").exists());
    }
}

/// A time limit beyond what simulated time can hold (it used to be accepted, and the run never
/// ended) is refused at its value, with the maximum in seconds.
#[test]
fn a_time_limit_beyond_the_clock() {
    expect_error(
        &SMALL.replace("sim_time_s = 0.5", "sim_time_s = 1e30"),
        &[
            "bad.toml:31:14",
            "run.sim_time_s = 1e30 s",
            "at most 9223372036.854776 s",
        ],
    );
}

/// A fixed straggler factor of 1e300 on a 10 ms step is refused at the factor, with the largest
/// factor that step allows.
#[test]
fn a_step_time_times_a_factor_beyond_the_clock() {
    expect_error(
        &SMALL.replace("factor = 4.0", "factor = 1e300"),
        &[
            "bad.toml:10:10",
            "cluster.stragglers[0].factor",
            "factor can be at most 922337203685.4775",
        ],
    );
}

/// A bandwidth below 1 byte/s is refused with the slowest rate the model counts; the slowest
/// legal one runs: no message arrives within the run, all-reduce completes no step, and the run
/// ends at its stop with exit code 0.
#[test]
fn a_bandwidth_below_one_byte_per_second_and_the_slowest_legal_one() {
    expect_error(
        &SMALL.replace("bandwidth_gbps = 10.0", "bandwidth_gbps = 1e-12"),
        &[
            "bad.toml:13:18",
            "network.bandwidth_gbps",
            "at least 8e-9 Gbit/s",
        ],
    );
    let (dir, path) = scenario(
        &SMALL.replace("bandwidth_gbps = 10.0", "bandwidth_gbps = 8e-9"),
        "slow.toml",
    );
    let out = dir.path().join("out");
    let o = dasim_run_flex(&path, &out, &[]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let allreduce = &summary["runs"][0];
    assert_eq!(allreduce["algorithm"], "allreduce");
    assert_eq!(allreduce["worker_steps"], 0);
    assert_eq!(allreduce["sim_time_s"], 0.5);
}

/// `compression` is refused on an algorithm that sends no compressed messages (with a hint naming
/// those that do), and checked at its key where it applies: a fraction outside (0, 1], a PowerSGD
/// rank beyond the model's smallest weight matrix (a check that needs the model).
#[test]
fn compression_is_refused_where_it_does_not_apply_and_checked_where_it_does() {
    let entry = |e: &str| SMALL.replace("kind = \"adpsgd\"", e);
    expect_error(
        &entry("kind = \"adpsgd\"\ncompression = { kind = \"top-k\", fraction = 0.01 }"),
        &[
            "bad.toml:39:1",
            "unknown field `compression`",
            "kind = \"choco\"",
        ],
    );
    expect_error(
        &entry(
            "kind = \"choco\"\nconsensus_lr = 0.5\ncompression = { kind = \"top-k\", fraction = 1.5 }",
        ),
        &[
            "bad.toml:40:",
            "algorithms[1].compression.fraction",
            "(0, 1]",
        ],
    );
    expect_error(
        &entry(
            "kind = \"allreduce\"\nlabel = \"powersgd\"\ncompression = { kind = \"powersgd\", rank = 64 }",
        ),
        &[
            "bad.toml:40:",
            "algorithms[1].compression.rank",
            "larger than the smaller side",
        ],
    );
}

/// The shipped language-model scenario with its corpus at an absolute path, `from` replaced by
/// `to`; and the `bad.toml:LINE:` prefix of the line that holds `to`'s last line.
fn lm_scenario(from: &str, to: &str) -> (String, String) {
    let text = lm_text(None).replace(from, to);
    assert!(text.contains(to), "{from}");
    let last = to.lines().last().unwrap();
    let line = text.lines().position(|l| l == last).unwrap() + 1;
    (text, format!("bad.toml:{line}:"))
}

/// The shipped language-model scenario reading `path`, or the shipped corpus by its absolute
/// path.
fn lm_text(path: Option<&str>) -> String {
    let shipped =
        std::fs::read_to_string(common::manifest_dir().join("scenarios/transformer.toml")).unwrap();
    let corpus = common::manifest_dir().join("models/data/tinyshakespeare.txt.gz");
    let path = path.map_or(corpus.display().to_string(), str::to_owned);
    let from = "path = \"../models/data/tinyshakespeare.txt.gz\"";
    assert!(shipped.contains(from));
    shipped.replace(from, &format!("path = {path:?}"))
}

#[test]
fn a_language_model_is_checked_against_its_text_before_anything_runs() {
    let (text, at) = lm_scenario("batch_size = 8", "batch_size = 8\ncontext = 40");
    expect_error(
        &text,
        &[&at, "data.context", "longer than the model's context of 32"],
    );
    let (text, at) = lm_scenario(
        "heads = 4                    # of 16 features each",
        "heads = 3",
    );
    expect_error(&text, &[&at, "model.heads", "do not divide d_model = 64"]);
    // An MLP on text: the model section replaced whole.
    let text = lm_text(None);
    let (model, data) = (text.find("[model]").unwrap(), text.find("[data]").unwrap());
    let text = format!(
        "{}[model]\nkind = \"mlp\"\n\n{}",
        &text[..model],
        &text[data..]
    );
    let line = text.lines().position(|l| l == "kind = \"mlp\"").unwrap() + 1;
    expect_error(
        &text,
        &[
            &format!("bad.toml:{line}:"),
            "model.kind",
            "does not read text",
        ],
    );
    // A text too short for one window, and an empty one: at data.path, naming the file.
    for (name, content, needle) in [
        (
            "short.txt",
            "Now is the winter of our discontent",
            "shorter than one window",
        ),
        ("empty.txt", "", "the file is empty"),
    ] {
        let text = lm_text(Some(name));
        let (dir, path) = scenario(&text, "bad.toml");
        std::fs::write(dir.path().join(name), content).unwrap();
        let o = dasim(&["validate", path.to_str().unwrap()]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(!err.contains("panicked"), "{err}");
        let line = text.lines().position(|l| l.starts_with("path = ")).unwrap() + 1;
        for n in [
            &format!("bad.toml:{line}:") as &str,
            "data.path",
            name,
            needle,
        ] {
            assert!(err.contains(n), "`{n}` not in:\n{err}");
        }
    }
}

#[test]
fn streaming_diloco_fragments_are_checked_against_the_models_layers_before_anything_runs() {
    // The MLP 64-16-10 has two layers: three fragments of whole layers cannot be made.
    expect_error(
        &SMALL.replace(
            "kind = \"adpsgd\"",
            "kind = \"streaming-diloco\"\ninner_steps = 12\nfragments = 3",
        ),
        &[
            "bad.toml:40:",
            "algorithms[1].fragments",
            "3 fragments for a model of 2 layers",
        ],
    );
}
