//! A mutation fuzzer over the scenario loader and validator: every shipped scenario and the seed
//! corpus of `tests/fuzz/corpus/` is mutated at random (hostile values on a key, deleted,
//! duplicated or swapped lines, truncation, foreign keys and tables), and each mutant is loaded,
//! validated and preflighted (`dasim validate`'s checks, the data and model included). Nothing
//! may panic or hang, and every rejection must be an error that names the file.
//!
//! The suite runs a bounded number of cases from a fixed seed (`DASIM_FUZZ_CASES`, default 2,000;
//! `DASIM_FUZZ_SEED`, default 1). A longer session:
//!
//! ```sh
//! DASIM_FUZZ_CASES=200000 DASIM_FUZZ_SEED=$RANDOM cargo test --release --test fuzz -- --nocapture
//! ```
//!
//! A failing case prints its seed, case number and the mutated text; add the text to
//! `tests/fuzz/corpus/` once the bug is fixed, so that it is replayed for ever. A case that
//! aborts the process (a stack overflow cannot be caught) is left in the file named by
//! `DASIM_FUZZ_TRACE`, when set.

use crate::common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dasim::Plan;
use dasim::scenario::Loaded;

/// splitmix64: a tiny deterministic generator, enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Values a hostile or careless user writes.
const VALUES: &[&str] = &[
    "0",
    "-1",
    "1",
    "2",
    "3",
    "7",
    "65536",
    "1048576",
    "1048577",
    "100000000",
    "1e9",
    "4294967296",
    "9223372036854775807",
    "18446744073709551615",
    "0.0",
    "-0.0",
    "1e-12",
    "1e-300",
    "1e308",
    "-1e308",
    "nan",
    "inf",
    "-inf",
    "0.5",
    "100.0",
    "\"\"",
    "\"x\"",
    "\"all\"",
    "\"ring\"",
    "\"complete\"",
    "\"0..=1000000\"",
    "\"5..1\"",
    "\"i -> i\"",
    "\"0 <-> 99999\"",
    "[]",
    "[-1]",
    "[0, 0]",
    "[1048576]",
    "[[1, 2], [3]]",
    "{}",
    "{ kind = \"ring\" }",
    "{ kind = \"nope\" }",
    "true",
    "1979-05-27",
];

/// Keys to plant where they may or may not belong.
const KEYS: &[&str] = &[
    "workers",
    "kind",
    "factor",
    "step_time_ms",
    "device_tflops",
    "bandwidth_gbps",
    "latency_us",
    "sim_time_s",
    "eval_every_s",
    "eval_every_steps",
    "worker_steps",
    "epochs",
    "lr",
    "momentum",
    "tau",
    "h",
    "processes",
    "servers",
    "batch_size",
    "degree",
    "p",
    "rows",
    "cols",
    "dim",
    "hidden",
    "start_s",
    "end_s",
    "preset",
    "params",
    "topology",
    "optimizer",
    "label",
    "seed",
    "path",
    "metric",
    "value",
    "op",
];

const TABLES: &[&str] = &[
    "[cluster]",
    "[[cluster.stragglers]]",
    "[[cluster.groups]]",
    "[network]",
    "[[network.links]]",
    "[[network.congestion]]",
    "[topology]",
    "[model]",
    "[timed_as]",
    "[data]",
    "[data.partition]",
    "[optimizer]",
    "[optimizer.schedule]",
    "[run]",
    "[metrics]",
    "[[algorithms]]",
    "[algorithms.topology]",
    "[[expect]]",
    "[[faults]]",
    "[sweep]",
];

fn mutate(text: &str, rng: &mut Rng) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        if lines.is_empty() {
            lines.push(rng.pick(TABLES).to_string());
        }
        let i = rng.below(lines.len());
        match rng.below(8) {
            // A hostile value on an existing key.
            0..=2 => {
                if let Some(eq) = lines[i].find(" = ") {
                    let key = lines[i][..eq].to_owned();
                    lines[i] = format!("{key} = {}", rng.pick(VALUES));
                } else {
                    let key = rng.pick(KEYS);
                    lines.insert(i, format!("{key} = {}", rng.pick(VALUES)));
                }
            }
            3 => {
                lines.remove(i);
            }
            4 => {
                let copy = lines[i].clone();
                lines.insert(i, copy);
            }
            5 => {
                let j = rng.below(lines.len());
                lines.swap(i, j);
            }
            6 => {
                let header = rng.pick(TABLES).to_string();
                let key = rng.pick(KEYS);
                let value = rng.pick(VALUES);
                lines.insert(i, format!("{header}\n{key} = {value}"));
            }
            _ => {
                // Truncate, at a character boundary.
                let joined = lines.join("\n");
                let mut cut = rng.below(joined.len() + 1);
                while !joined.is_char_boundary(cut) {
                    cut -= 1;
                }
                lines = joined[..cut].lines().map(str::to_owned).collect();
            }
        }
    }
    lines.join("\n") + "\n"
}

fn corpus() -> Vec<(PathBuf, String)> {
    let root = common::manifest_dir();
    let mut dirs = vec![root.join("scenarios"), root.join("tests/fuzz/corpus")];
    let mut out = Vec::new();
    while let Some(dir) = dirs.pop() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "toml") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path, text));
            }
        }
    }
    out
}

/// Loads, validates and preflights `text` as if it were the file `path`: `Ok` when valid, the
/// error's text otherwise.
fn check(path: &Path, text: &str) -> Result<(), String> {
    let loaded = Loaded::from_str(path, text.to_owned()).map_err(|e| e.to_string())?;
    Plan::prepare(&loaded).map(drop).map_err(|e| e.to_string())
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn the_loader_neither_panics_nor_hangs_and_names_the_file_in_every_error() {
    let cases = env_u64("DASIM_FUZZ_CASES", 2000);
    let seed = env_u64("DASIM_FUZZ_SEED", 1);
    let corpus = corpus();
    assert!(corpus.len() >= 20, "{} corpus files", corpus.len());
    let mut rng = Rng(seed);
    let (mut valid, mut rejected) = (0u64, 0u64);
    let started = Instant::now();
    // Quiet the default hook: a panic is reported below with the mutant that caused it.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut failures = Vec::new();
    for case in 0..cases {
        let (path, text) = &corpus[rng.below(corpus.len())];
        let mutant = mutate(text, &mut rng);
        // A crash that unwinding cannot catch (a stack overflow aborts) leaves its case here.
        if let Ok(trace) = std::env::var("DASIM_FUZZ_TRACE") {
            std::fs::write(&trace, &mutant).unwrap();
        }
        let t0 = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| check(path, &mutant)));
        let took = t0.elapsed();
        let name = path.file_name().unwrap().to_string_lossy();
        match outcome {
            Err(panic) => {
                let what = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(format!(
                    "seed {seed} case {case} (from {name}) panicked: {what}\n{mutant}"
                ));
            }
            Ok(Err(e)) => {
                rejected += 1;
                if !e.contains(&path.display().to_string()) {
                    failures.push(format!(
                        "seed {seed} case {case} (from {name}): the error does not name the file: {e}\n{mutant}"
                    ));
                }
            }
            Ok(Ok(())) => valid += 1,
        }
        if took > Duration::from_secs(30) {
            failures.push(format!(
                "seed {seed} case {case} (from {name}) took {took:?} to validate\n{mutant}"
            ));
        }
        if failures.len() >= 3 {
            break;
        }
    }
    std::panic::set_hook(hook);
    println!(
        "{cases} cases from seed {seed}: {valid} valid, {rejected} rejected, in {:?}",
        started.elapsed()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(
        valid > 0 && rejected > 0,
        "the mutations should produce both"
    );
}

/// What the fuzzer found, replayed with its expected outcome: sizes that exhausted memory, time
/// or the stack are refused (or handled) with clear errors.
#[test]
fn sizes_that_would_exhaust_memory_time_or_stack_are_refused_or_handled() {
    let path = Path::new("big.toml");
    let scenario = |workers: &str, topology: &str, run: &str| {
        format!(
            "[cluster]\nworkers = {workers}\n\n[topology]\n{topology}\n\n[model]\nkind = \"quadratic\"\n\n[run]\n{run}\n\n[[algorithms]]\nkind = \"sgp\"\n"
        )
    };
    let fails = |text: &str, needle: &str| {
        let e = check(path, text).expect_err(text);
        assert!(e.contains(needle), "`{needle}` not in: {e}");
    };
    let run = "sim_time_s = 1.0";
    fails(
        &scenario("18446744073709551615", "kind = \"ring\"", run),
        "workers must be at most 1048576",
    );
    fails(
        &scenario("100000000", "kind = \"ring\"", run),
        "workers must be at most 1048576",
    );
    fails(
        &scenario("1048576", "kind = \"complete\"", run),
        "has 549755289600 edges, more than dasim holds",
    );
    fails(
        &scenario("100000", "kind = \"random-peer\"", run),
        "more than dasim holds",
    );
    fails(
        &scenario("100000", "kind = \"erdos-renyi\"\np = 0.001", run),
        "draws 4999950000 pairs",
    );
    fails(
        &scenario(
            "8",
            "kind = \"ring\"",
            "sim_time_s = 1e6\neval_every_s = 1e-6",
        ),
        "1000000000000 evaluation points",
    );
    fails(
        &scenario(
            "8",
            "kind = \"ring\"",
            "worker_steps = 100000000\neval_every_steps = 1\neval_every_s = 0",
        ),
        "100000000 evaluation points",
    );
    // A large sparse graph is fine, on a test thread's small stack too: the schedule's strong
    // components are found without recursion, and a star's hub without a quadratic scan.
    check(
        path,
        &scenario("65536", "kind = \"one-peer-exponential\"", run),
    )
    .unwrap();
    check(path, &scenario("65536", "kind = \"star\"", run)).unwrap();
}
