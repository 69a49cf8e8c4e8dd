//! Every shipped scenario runs to its budget on real gradients (flex) without deadlock, and
//! every algorithm in it trains its model.
//!
//! "Trained" is a held-out accuracy of at least 93% on the digits (the MLP, softmax regression
//! and LeNet scenarios): chance is 10%, the best linear model on these 8×8 digits reaches about
//! 95–96%, and a one-hidden-layer MLP trained synchronously to convergence about 97–98%; 93%
//! leaves room for the slower-mixing asynchronous methods at the scenarios' 2–3-second budgets
//! while failing anything that did not learn. A model without accuracy (the quadratic, whose
//! loss is its suboptimality, starting from about 196) is trained when its final loss is below
//! [`TRAINED_LOSS`]. A language model (the transformer on Tiny Shakespeare, whose next-token
//! accuracy is no measure of training) is trained when its held-out loss is below
//! [`TRAINED_LM_LOSS`], the entropy of the text's character frequencies: it has learned more
//! than how often each character occurs.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use sha2::{Digest, Sha256};

use dasim::launch::{Sink, Source, Threads};
use dasim::simulation::{Results, Silent};
use dasim::{Launch, Loaded};
use dasim_models::BackendChoice;

const TRAINED: f64 = 0.93;
const TRAINED_LOSS: f64 = 1e-2;
/// Nats per character of Tiny Shakespeare's unigram distribution (a uniform guess is ln 65 =
/// 4.17; the best bigram model 2.45).
const TRAINED_LM_LOSS: f64 = 3.31;

#[test]
fn every_scenario_trains_every_algorithm() {
    let dir = common::manifest_dir().join("scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "{} scenarios", files.len());
    let mut failures = Vec::new();
    let mut golden = Golden::load();
    for file in &files {
        let loaded = Loaded::from_file(file).unwrap_or_else(|e| panic!("{e}"));
        let out = tempfile::tempdir().unwrap();
        let summary =
            run(&loaded, out.path()).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert_eq!(summary.runs.len(), loaded.scenario.algorithms.len());
        golden.check(&file.file_name().unwrap().to_string_lossy(), out.path());
        // What the run says it trained on is what it trained on: the quadratic reads no data,
        // so its run directory has neither a `[data]` section nor a partition.
        let reads_data = loaded.scenario.model.name() != "quadratic";
        let resolved = std::fs::read_to_string(out.path().join("scenario.toml")).unwrap();
        assert_eq!(
            resolved.lines().any(|l| l == "[data]"),
            reads_data,
            "{}",
            file.display()
        );
        assert_eq!(out.path().join("partition.csv").exists(), reads_data);
        for r in &summary.runs {
            if let Some(limit) = loaded.scenario.run.sim_time_s {
                assert_eq!(
                    r.sim_time_s,
                    limit,
                    "{}: {} stopped early",
                    file.display(),
                    r.algorithm
                );
            }
            if matches!(r.kind.as_str(), "ps" | "dasgd") {
                let st = r.row_staleness.as_ref().unwrap_or_else(|| {
                    panic!(
                        "{}: {} reports no row staleness",
                        file.display(),
                        r.algorithm
                    )
                });
                assert!(st.count > 0 && st.mean > 0.0, "{}: {st:?}", r.algorithm);
            }
            // Every algorithm that applied a gradient has a global staleness, measured at the
            // same applications as the row staleness.
            let global = r.global_staleness.as_ref().unwrap_or_else(|| {
                panic!(
                    "{}: {} reports no global staleness",
                    file.display(),
                    r.algorithm
                )
            });
            assert_eq!(
                Some(global.count),
                r.row_staleness.map(|s| s.count),
                "{}: one measurement of each per application",
                r.algorithm
            );
            if r.algorithm == "ps" {
                // A fully asynchronous server with n workers sees about n − 1 updates between a
                // worker's pull and its push.
                let n = loaded.scenario.cluster.workers as f64;
                let mean = r.row_staleness.as_ref().unwrap().mean;
                assert!(
                    (mean - (n - 1.0)).abs() < 1.0,
                    "ps staleness {mean}, n = {n}"
                );
            }
            let trained = if r.final_perplexity.is_some() {
                r.final_loss < TRAINED_LM_LOSS
            } else if r.final_accuracy.is_nan() {
                r.final_loss < TRAINED_LOSS
            } else {
                r.final_accuracy >= TRAINED
            };
            if !trained {
                failures.push(format!(
                    "{}: {} reached {:.2}% (loss {:.4})",
                    file.display(),
                    r.algorithm,
                    r.final_accuracy * 100.0,
                    r.final_loss
                ));
            }
        }
    }
    assert!(failures.is_empty(), "not trained:\n{}", failures.join("\n"));
    // The language-model benchmark (4 blocks of d = 128, context 128, 16 workers, all-reduce
    // and AD-PSGD) at two worker steps: the transformer's CPU program at a realistic shape.
    let bench = dir.join("perf/transformer-4x128.toml");
    let mut loaded = Loaded::from_file(&bench).unwrap_or_else(|e| panic!("{e}"));
    loaded.scenario.run.worker_steps = Some(2);
    let out = tempfile::tempdir().unwrap();
    run(&loaded, out.path()).unwrap_or_else(|e| panic!("{e}"));
    golden.check("perf/transformer-4x128.toml at 2 worker steps", out.path());
    golden.finish();
}

/// A quiet run on flex, on one thread, into `out`.
fn run(loaded: &Loaded, out: &Path) -> dasim::Result<Results> {
    let launch = Launch {
        backend: BackendChoice::Flex,
        threads: Threads::Own(Some(1)),
        sink: Sink::Dir {
            out: out.to_path_buf(),
            force: false,
            plots: true,
        },
        ..Launch::new(Source::Scenario(loaded.clone()))
    };
    launch.start()?.prepare()?.run(0, &mut Silent, None)
}

/// What every shipped scenario wrote when the golden file was blessed: the SHA-256 of each CSV
/// file and of the resolved `scenario.toml` (stamp line left out: it names the git revision),
/// and `summary.json` itself (without `git_revision`).
///
/// A change that moves a number, an event or a byte of any output on flex fails here. When the
/// change is meant to (a fix to an algorithm, a new column), re-bless with
/// `DASIM_BLESS=1 cargo test --release --test integration -- scenarios::` and say in the commit why the outputs
/// moved. Blessing writes every entry with this host's [`KERNELS`]; where a change moved only
/// some scenarios, keep the others' entries as they were, so that they stay exact on their
/// CPUs. `summary.json` is compared as a subset: a new field does not fail, a changed or removed
/// one does.
///
/// An entry may also hold what other kernels wrote ([`ALSO`]), so that a host with those
/// compares exactly too: `DASIM_BLESS=also` adds this host's outputs to every entry blessed
/// with other kernels and changes nothing else. A scenario whose numbers are discontinuous in
/// its inputs (a quantized exchange, Streaming DiLoCo's 4-bit outer step) moves by more than
/// any tolerance from one set of kernels to another, and needs one. Blessing with
/// `DASIM_BLESS=1` writes entries without alternates: a change that moves an entry's outputs
/// leaves the other kernels' record stale.
struct Golden {
    path: std::path::PathBuf,
    bless: bool,
    /// `DASIM_BLESS=also`: record this host's outputs beside the entries of other kernels.
    also: bool,
    expected: BTreeMap<String, BTreeMap<String, Value>>,
    seen: BTreeMap<String, BTreeMap<String, Value>>,
    mismatches: Vec<String>,
}

impl Golden {
    fn load() -> Golden {
        let path = common::manifest_dir().join("tests/golden/outputs.json");
        let also = std::env::var("DASIM_BLESS").is_ok_and(|v| v == "also");
        let bless = std::env::var_os("DASIM_BLESS").is_some() && !also;
        let expected = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap(),
            Err(_) if bless => BTreeMap::new(),
            Err(e) => panic!("{}: {e}", path.display()),
        };
        Golden {
            path,
            bless,
            also,
            expected,
            seen: BTreeMap::new(),
            mismatches: Vec::new(),
        }
    }

    /// Compares the outputs in `out` with the entry `name` (a scenario's file name).
    fn check(&mut self, name: &str, out: &Path) {
        let name = name.to_owned();
        let mut files: Vec<_> = std::fs::read_dir(out)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                let f = p.file_name().unwrap().to_string_lossy();
                f.ends_with(".csv") || f == "scenario.toml"
            })
            .collect();
        files.sort();
        // A scenario that reads a data file (the transformer's text) has its path made absolute
        // in the resolved copy: hashed with the checkout's directory written `<repo>`, so that
        // the digest is the same in every clone.
        let repo = common::manifest_dir().canonicalize().unwrap();
        let repo = repo.to_string_lossy().into_owned();
        let mut reads_a_file = false;
        let mut got = BTreeMap::new();
        for f in files {
            let mut text = std::fs::read_to_string(&f).unwrap();
            if f.file_name().is_some_and(|n| n == "scenario.toml") && text.contains(&repo) {
                reads_a_file = true;
                text = text.replace(&repo, "<repo>");
            }
            let body: String = text
                .split_inclusive('\n')
                .filter(|l| !l.starts_with("# dasim "))
                .collect();
            let digest = format!("{:x}", Sha256::digest(body.as_bytes()));
            got.insert(
                f.file_name().unwrap().to_string_lossy().into_owned(),
                Value::String(digest),
            );
        }
        let mut summary: Value =
            serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
        summary.as_object_mut().unwrap().remove("git_revision");
        if reads_a_file {
            // The hash of the resolved scenario, which holds the checkout's directory.
            summary.as_object_mut().unwrap().remove("scenario_sha256");
        }
        got.insert("summary.json".into(), summary);
        got.insert(
            KERNELS.into(),
            Value::String(dasim_models::backend::cpu_kernels().into()),
        );
        if self.also
            && let Some(entry) = self.expected.get_mut(&name)
            && !blessed_here(entry)
        {
            let here = dasim_models::backend::cpu_kernels();
            let also = entry
                .entry(ALSO.into())
                .or_insert_with(|| Value::Object(Default::default()));
            also.as_object_mut()
                .expect("an entry's alternates are an object")
                .insert(here.into(), serde_json::to_value(&got).unwrap());
        }
        if let Some(entry) = self.expected.get(&name) {
            let expected = alternate_here(entry).unwrap_or_else(|| entry.clone());
            let exact = blessed_here(&expected);
            for (file, want) in &expected {
                match got.get(file) {
                    _ if file == KERNELS || file == ALSO => {}
                    None => self
                        .mismatches
                        .push(format!("{name}: {file} is no longer written")),
                    Some(have) if file == "summary.json" => subset(
                        want,
                        have,
                        &format!("{name}: summary.json"),
                        exact,
                        &mut self.mismatches,
                    ),
                    // Its losses and accuracies round with the host's kernels; the summary's
                    // final values stand for them, within a tolerance.
                    Some(_) if !exact && file == MODEL_FILE => {}
                    Some(have) if have != want => {
                        self.mismatches.push(format!("{name}: {file} changed"))
                    }
                    Some(_) => {}
                }
            }
        } else if !self.bless {
            self.mismatches
                .push(format!("{name}: not in the golden file (bless it)"));
        }
        self.seen.insert(name, got);
    }

    fn finish(self) {
        if self.also {
            let text = serde_json::to_string_pretty(&self.expected).unwrap() + "\n";
            std::fs::write(&self.path, text).unwrap();
            return;
        }
        if self.bless {
            std::fs::create_dir_all(self.path.parent().unwrap()).unwrap();
            let text = serde_json::to_string_pretty(&self.seen).unwrap() + "\n";
            std::fs::write(&self.path, text).unwrap();
            return;
        }
        assert!(
            self.mismatches.is_empty(),
            "outputs differ from tests/golden/outputs.json (re-bless with DASIM_BLESS=1 only if \
             the change is meant to move them){}:\n{}",
            host_hint(&self.expected),
            self.mismatches.join("\n")
        );
    }
}

/// The output file of the model's numbers: held-out loss and accuracy, training loss, consensus
/// distance. Every other file (timeline, staleness, waits, links, utilization, series, the
/// partition) is the simulation's events, which do not depend on how sums round.
const MODEL_FILE: &str = "metrics.csv";

/// The summary's values computed from the model's numbers, compared within [`MODEL_TOLERANCE`]
/// on a host whose kernels differ from the golden file's.
const MODEL_VALUES: [&str; 4] = [
    "final_loss",
    "final_accuracy",
    "final_consensus",
    "final_suboptimality",
];

/// Relative tolerance of [`MODEL_VALUES`] across kernels. Last-bit differences in the matrix
/// products grow through training: AVX2 against AVX-512 on the shipped scenarios, about 1e-7 of
/// an MLP's loss and 1e-4 of a consensus distance of 1e-6, but 2% of LeNet's final loss and one
/// test sample of 359 in its accuracy (0.3%). Loose, since training amplifies any difference;
/// the event files, compared byte for byte, catch a change to an algorithm's control flow, and
/// a host with an entry's kernels compares its every number exactly.
const MODEL_TOLERANCE: f64 = 0.05;

/// Every value of `want` is in `have`, recursively; `have` may hold more keys. With `exact`
/// unset, [`MODEL_VALUES`] need only agree within [`MODEL_TOLERANCE`].
fn subset(want: &Value, have: &Value, at: &str, exact: bool, out: &mut Vec<String>) {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => {
            for (k, v) in w {
                match h.get(k) {
                    Some(hv) if !exact && MODEL_VALUES.contains(&k.as_str()) => {
                        if !close(v, hv) {
                            out.push(format!(
                                "{at}.{k}: {v} became {hv} (beyond {MODEL_TOLERANCE} relative)"
                            ));
                        }
                    }
                    Some(hv) => subset(v, hv, &format!("{at}.{k}"), exact, out),
                    None => out.push(format!("{at}.{k} is gone")),
                }
            }
        }
        (Value::Array(w), Value::Array(h)) if w.len() == h.len() => {
            for (i, (wv, hv)) in w.iter().zip(h).enumerate() {
                subset(wv, hv, &format!("{at}[{i}]"), exact, out);
            }
        }
        _ if want == have => {}
        _ => out.push(format!("{at}: {want} became {have}")),
    }
}

/// Equal, or two numbers within [`MODEL_TOLERANCE`] of the larger's magnitude.
fn close(want: &Value, have: &Value) -> bool {
    match (want.as_f64(), have.as_f64()) {
        (Some(w), Some(h)) => (w - h).abs() <= MODEL_TOLERANCE * w.abs().max(h.abs()),
        _ => want == have,
    }
}

/// The key of a golden entry naming the kernels of the CPU that blessed it
/// ([`dasim_models::backend::cpu_kernels`]); an entry without it was blessed with `avx512f`.
const KERNELS: &str = "kernels";

/// The key of a golden entry's record of what other kernels wrote: kernels → an entry of the
/// same form, compared exactly on a host with those kernels.
const ALSO: &str = "also";

/// What `entry`'s scenario wrote with this host's kernels, where the entry records it.
fn alternate_here(entry: &BTreeMap<String, Value>) -> Option<BTreeMap<String, Value>> {
    let here = entry.get(ALSO)?.get(dasim_models::backend::cpu_kernels())?;
    Some(serde_json::from_value(here.clone()).expect("an alternate is an entry"))
}

/// The kernels that blessed a golden entry.
fn entry_kernels(entry: &BTreeMap<String, Value>) -> &str {
    entry
        .get(KERNELS)
        .and_then(Value::as_str)
        .unwrap_or("avx512f")
}

/// Whether this host runs the kernels that blessed `entry`. gemm (flex's matrix products) picks
/// its kernels at run time (AVX-512, AVX2, ...), and sums round differently with each, so a
/// model's numbers move in their last bits while the timeline stays (the book's architecture
/// chapter, "Determinism rules"). Where the kernels differ, every file but [`MODEL_FILE`] is
/// still compared byte for byte, and the summary's [`MODEL_VALUES`] within a tolerance. Each
/// entry names its kernels: most were blessed on a CPU with AVX-512, and those a later change
/// moved on one without it, so that each host compares exactly what it can.
fn blessed_here(entry: &BTreeMap<String, Value>) -> bool {
    entry_kernels(entry) == dasim_models::backend::cpu_kernels()
}

/// Said in the failure, where some entries were blessed with other kernels than this host's.
fn host_hint(expected: &BTreeMap<String, BTreeMap<String, Value>>) -> String {
    let here = dasim_models::backend::cpu_kernels();
    let other: Vec<String> = expected
        .iter()
        .filter(|(_, entry)| !blessed_here(entry) && alternate_here(entry).is_none())
        .map(|(name, entry)| format!("{name} ({})", entry_kernels(entry)))
        .collect();
    if other.is_empty() {
        return String::new();
    }
    format!(
        "; this CPU's kernels are `{here}`, and these entries were blessed with others, so their \
         `{MODEL_FILE}` was left out and their summary's model values compared within \
         {MODEL_TOLERANCE} relative (what differs there is more than rounding): {}",
        other.join(", ")
    )
}
