//! `dasim check`: run scenarios, once per seed, and judge their `[[expect]]` claims.
//!
//! Every scenario, under every seed, is loaded and checked before the first run starts (its
//! sections, its expectations, its data and model, its memory estimate), so bad input stops the
//! command with exit code 2 and nothing runs. Then each (scenario, seed) runs into its own directory (under
//! `--out`, or a temporary directory removed at the end), and each claim is evaluated on what
//! the run wrote ([`dasim_reports::claims`]). A claim with `seeds = "all"` gives one verdict
//! per seed; with `seeds = "mean"`, one on the means over the seeds. The verdicts are printed
//! as a table and, with `--junit`, written as JUnit XML. A run that fails (a deadlock, say)
//! fails its claims, as errors.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use dasim_models::BackendChoice;
use dasim_reports::claims::eval::short;
use dasim_reports::claims::junit::{self, Case, Outcome, Suite};
use dasim_reports::claims::{Claim, Seeds};
use dasim_reports::rundir::{CheckResult, CheckRow, write_atomic};

use crate::bar::Bar;
use crate::launch::{Launch, Ready, Sink, Source, Threads};
use crate::scenario::{Loaded, ScenarioError};
use crate::simulation::{Progress, Results};
use crate::{Error, Result};

/// How to check.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// The scenario files.
    pub scenarios: Vec<PathBuf>,
    /// The seeds, each replacing the scenario's; `None`: the scenario's own seed.
    pub seeds: Option<Vec<u64>>,
    /// The compute backend.
    pub backend: BackendChoice,
    /// The thread pool of the runs.
    pub threads: Threads,
    /// Where the run directories go (`DIR/<scenario>/seed-<seed>`); `None`: a temporary
    /// directory, removed at the end.
    pub out: Option<PathBuf>,
    /// The backend, progress lines and bars on stderr.
    pub progress: bool,
}

/// One verdict: a claim for one algorithm under one seed (or the mean over the seeds).
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// The seed: `1`, or `mean of 1, 2, 3`.
    pub seed: String,
    /// The claim as written ([`Claim::describe`]).
    pub claim: String,
    /// The row: observed value, bound, result, reason, note.
    pub row: CheckRow,
    /// The run failed: the claim could not be evaluated (reported as a JUnit error).
    pub run_error: bool,
}

/// The verdicts of one scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct ScenarioReport {
    /// The scenario file, as given.
    pub path: PathBuf,
    /// Its name (`name`, else the file stem).
    pub name: String,
    /// Host seconds its runs took.
    pub wall_s: f64,
    /// The seeds it ran under.
    pub seeds: Vec<u64>,
    /// Its verdicts, claim by claim, then seed by seed.
    pub verdicts: Vec<Verdict>,
}

/// The verdicts of a `dasim check`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// One entry per scenario, in the order given.
    pub scenarios: Vec<ScenarioReport>,
    /// The backend the runs used, in words (`flex (CPU)`).
    pub backend: String,
}

impl Report {
    fn verdicts(&self) -> impl Iterator<Item = &Verdict> {
        self.scenarios.iter().flat_map(|s| &s.verdicts)
    }

    /// Verdicts that failed (errors included).
    pub fn failures(&self) -> usize {
        self.verdicts()
            .filter(|v| v.row.result == CheckResult::Fail)
            .count()
    }

    /// Verdicts that were skipped.
    pub fn skipped(&self) -> usize {
        self.verdicts()
            .filter(|v| v.row.result == CheckResult::Skip)
            .count()
    }

    /// Every verdict.
    pub fn total(&self) -> usize {
        self.verdicts().count()
    }

    /// The table `dasim check` prints: one row per claim, algorithm and seed.
    pub fn table(&self) -> String {
        let header = [
            "scenario",
            "seed",
            "algorithm",
            "claim",
            "observed",
            "bound",
            "result",
            "detail",
        ];
        let mut rows: Vec<[String; 8]> = Vec::new();
        for s in &self.scenarios {
            let scenario = s.path.display().to_string();
            for v in &s.verdicts {
                rows.push([
                    scenario.clone(),
                    v.seed.clone(),
                    v.row.algorithm.clone(),
                    v.claim.clone(),
                    v.row.observed.map(short).unwrap_or_else(|| "—".into()),
                    bound_text(&v.row),
                    if v.run_error {
                        "error".into()
                    } else {
                        v.row.result.name().into()
                    },
                    detail(&v.row),
                ]);
            }
        }
        table(&header, &rows)
    }

    /// The JUnit XML document: one `testsuite` per scenario, one `testcase` per verdict.
    pub fn junit(&self) -> String {
        let suites: Vec<Suite> = self
            .scenarios
            .iter()
            .map(|s| Suite {
                name: s.path.display().to_string(),
                time_s: s.wall_s,
                properties: vec![
                    ("dasim".into(), env!("CARGO_PKG_VERSION").into()),
                    ("git_revision".into(), crate::outputs::GIT_REVISION.into()),
                    ("backend".into(), self.backend.clone()),
                    (
                        "seeds".into(),
                        s.seeds
                            .iter()
                            .map(u64::to_string)
                            .collect::<Vec<_>>()
                            .join(", "),
                    ),
                ],
                cases: s
                    .verdicts
                    .iter()
                    .map(|v| {
                        let message = format!(
                            "observed {}, bound {} {}{}",
                            v.row.observed.map(short).unwrap_or_else(|| "none".into()),
                            v.row.op,
                            bound_text(&v.row),
                            v.row
                                .reason
                                .as_ref()
                                .map(|r| format!(": {r}"))
                                .unwrap_or_default()
                        );
                        let mut detail = format!(
                            "{}: {} (expect[{}], {})",
                            v.row.algorithm, v.claim, v.row.expect, v.seed
                        );
                        if let Some(n) = &v.row.note {
                            let _ = write!(detail, "\nnote: {n}");
                        }
                        let outcome = match v.row.result {
                            CheckResult::Pass => Outcome::Pass,
                            CheckResult::Skip => Outcome::Skipped {
                                message: v.row.reason.clone().unwrap_or_default(),
                            },
                            CheckResult::Fail if v.run_error => Outcome::Error { message, detail },
                            CheckResult::Fail => Outcome::Failure { message, detail },
                        };
                        Case {
                            classname: format!("{}.{}", s.name, v.row.algorithm),
                            name: if v.seed.starts_with("mean") {
                                format!("expect[{}] {} [{}]", v.row.expect, v.claim, v.seed)
                            } else {
                                format!("expect[{}] {} [seed {}]", v.row.expect, v.claim, v.seed)
                            },
                            outcome,
                        }
                    })
                    .collect(),
            })
            .collect();
        junit::junit_xml(&suites)
    }
}

/// The bound with its tolerance: `7`, `7 ± 0.35`, or `—` when it could not be computed.
fn bound_text(row: &CheckRow) -> String {
    match (row.bound, row.tolerance) {
        (Some(b), Some(t)) => format!("{} ± {}", short(b), short(t)),
        (Some(b), None) => short(b),
        (None, _) => "—".into(),
    }
}

/// The reason of a verdict, else its note.
fn detail(row: &CheckRow) -> String {
    match (&row.reason, &row.note) {
        (Some(r), Some(n)) => format!("{r} — {n}"),
        (Some(r), None) => r.clone(),
        (None, Some(n)) => n.clone(),
        (None, None) => String::new(),
    }
}

/// A plain-text table with a header, columns padded to their widest cell (in characters).
pub fn table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(|h| h.chars().count());
    for r in rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, (c, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == N {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c}{}  ", " ".repeat(w - c.chars().count()));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
    out
}

/// A claim as `checks.csv` records it: `staleness.max <= 2 * n`, `loss < 0.1 (over max)`.
fn claim_text(r: &CheckRow) -> String {
    let mut s = format!("{} {} {}", r.metric, r.op, r.value);
    if !r.over.is_empty() && r.over != "final" {
        let _ = write!(s, " ({})", r.over.replace('=', " "));
    }
    s
}

/// The verdicts `dasim run` prints after a run: one line per claim and algorithm.
pub fn run_table(rows: &[CheckRow]) -> String {
    let header = [
        "algorithm",
        "claim",
        "observed",
        "bound",
        "result",
        "detail",
    ];
    let rows: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                r.algorithm.clone(),
                claim_text(r),
                r.observed.map(short).unwrap_or_else(|| "—".into()),
                bound_text(r),
                r.result.name().into(),
                detail(r),
            ]
        })
        .collect();
    table(&header, &rows)
}

/// A scenario ready to run under each seed.
struct Planned {
    path: PathBuf,
    name: String,
    ready: Ready,
}

/// The error for a scenario without `[[expect]]` entries: nothing to check.
pub(crate) fn nothing_to_check(path: &Path) -> Error {
    Error::Scenario(Box::new(ScenarioError {
        file: path.to_path_buf(),
        line: None,
        column: None,
        field: None,
        message: "the scenario has no [[expect]] entry: there is nothing to check".into(),
        hint: Some(
            "add [[expect]] tables (the book's chapter \"Testing claims\"), or run it with `dasim run`"
                .into(),
        ),
        source_line: None,
    }))
}

/// Loads and checks every scenario under every seed, before anything runs: a launch per
/// scenario, its runs into `root/<scenario>/seed-<seed>`.
fn plan(opts: &CheckOptions, root: &Path) -> Result<Vec<Planned>> {
    let mut planned: Vec<Planned> = Vec::new();
    let mut dirs: Vec<String> = Vec::new();
    for path in &opts.scenarios {
        let loaded = Loaded::from_file(path)?;
        if loaded.scenario.expect.is_empty() {
            return Err(nothing_to_check(path));
        }
        // One directory per scenario, named after its file, made unique.
        let stem = path
            .file_stem()
            .map_or_else(|| "scenario".into(), |s| s.to_string_lossy().into_owned());
        let mut dir = stem.clone();
        let mut k = 2;
        while dirs.contains(&dir) {
            dir = format!("{stem}-{k}");
            k += 1;
        }
        let name = loaded.scenario.display_name(path);
        let launch = Launch {
            backend: opts.backend,
            threads: opts.threads,
            seeds: opts.seeds.clone(),
            sink: Sink::SeedDirs {
                root: root.join(&dir),
                plots: opts.out.is_some(),
            },
            ..Launch::new(Source::Scenario(loaded))
        };
        let started = launch.start()?;
        if planned.is_empty() && opts.progress {
            eprintln!(
                "backend: {}, {} thread(s)",
                started.backend(),
                started.threads()
            );
        }
        dirs.push(dir);
        planned.push(Planned {
            path: path.clone(),
            name,
            ready: started.prepare()?,
        });
    }
    Ok(planned)
}

/// Runs every scenario under every seed and judges its claims. Bad input (a scenario that does
/// not load, an expectation that does not check) is an error before anything runs; failed
/// claims are not errors, they are in the report.
pub fn check(opts: &CheckOptions) -> Result<Report> {
    let temp;
    let root = match &opts.out {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::Builder::new()
                .prefix("dasim-check-")
                .tempdir()
                .map_err(|source| Error::Io {
                    context: "cannot create a temporary directory".into(),
                    source,
                })?;
            temp.path().to_path_buf()
        }
    };
    let mut planned = plan(opts, &root)?;
    let total: usize = planned.iter().map(|p| p.ready.len()).sum();
    let mut done = 0;
    let mut report = Report {
        backend: planned
            .first()
            .map(|p| p.ready.backend().to_string())
            .unwrap_or_default(),
        ..Report::default()
    };
    for p in &mut planned {
        let started = Instant::now();
        let path = &p.path;
        let verdicts = judge(
            &mut p.ready,
            &mut Bar::new(opts.progress),
            None,
            |seed| {
                done += 1;
                if opts.progress {
                    eprintln!("[{done}/{total}] {} seed {seed}", path.display());
                }
            },
            |result, wall_s| {
                if !opts.progress {
                    return;
                }
                match result {
                    Ok(r) => {
                        let failed = r
                            .checks
                            .iter()
                            .filter(|c| c.result == CheckResult::Fail)
                            .count();
                        eprintln!(
                            "      {} verdicts, {failed} failed ({wall_s:.1} s)",
                            r.checks.len()
                        );
                    }
                    Err(e) => eprintln!("      the run failed: {e}"),
                }
            },
        )?;
        report.scenarios.push(ScenarioReport {
            path: p.path.clone(),
            name: p.name.clone(),
            wall_s: started.elapsed().as_secs_f64(),
            seeds: (0..p.ready.len()).map(|i| p.ready.seed(i)).collect(),
            verdicts,
        });
    }
    Ok(report)
}

/// Runs the launch's every seed in turn and judges the scenario's claims on what each run
/// wrote: one verdict per claim, algorithm and seed, or per claim and algorithm for the mean
/// over the seeds (`seeds = "mean"`). `started` hears of each seed before its run, `ended` of
/// its result and wall seconds after. A run that fails fails its claims, as errors; an
/// interrupted one stops the checks (its error).
pub fn judge(
    ready: &mut Ready,
    progress: &mut (dyn Progress + Send),
    interrupt: Option<&AtomicBool>,
    mut started: impl FnMut(u64),
    mut ended: impl FnMut(&Result<Results>, f64),
) -> Result<Vec<Verdict>> {
    let mut per_seed = Vec::new();
    for i in 0..ready.len() {
        let seed = ready.seed(i);
        started(seed);
        let run_started = Instant::now();
        let result = ready.run(i, progress, interrupt);
        ended(&result, run_started.elapsed().as_secs_f64());
        match result {
            Ok(r) => per_seed.push((seed, Ok(r.checks))),
            Err(e @ Error::Interrupted(_)) => return Err(e),
            Err(e) => per_seed.push((seed, Err(e.to_string()))),
        }
    }
    Ok(verdicts(ready.claims(), &per_seed))
}

/// The verdicts of a scenario's claims from each seed's rows (or the error of its run).
fn verdicts(
    claims: &[Claim],
    per_seed: &[(u64, std::result::Result<Vec<CheckRow>, String>)],
) -> Vec<Verdict> {
    let mut out = Vec::new();
    // A failed run fails the claims that apply; a skip stays a skip.
    let errors = |claim: &Claim, seed: String, e: &str, out: &mut Vec<Verdict>| {
        for label in &claim.labels {
            let (row, run_error) = match claim.skip_row(label) {
                Some(row) => (row, false),
                None => {
                    let mut row = claim.row(label);
                    row.reason = Some(format!("the run failed: {e}"));
                    (row, true)
                }
            };
            out.push(Verdict {
                seed: seed.clone(),
                claim: claim.describe(),
                row,
                run_error,
            });
        }
    };
    for claim in claims {
        let own = |rows: &[CheckRow]| -> Vec<CheckRow> {
            rows.iter()
                .filter(|r| r.expect == claim.index as u64)
                .cloned()
                .collect()
        };
        match claim.expect.seeds {
            Seeds::All => {
                for (seed, result) in per_seed {
                    match result {
                        Ok(rows) => out.extend(own(rows).into_iter().map(|row| Verdict {
                            seed: seed.to_string(),
                            claim: claim.describe(),
                            row,
                            run_error: false,
                        })),
                        Err(e) => errors(claim, seed.to_string(), e, &mut out),
                    }
                }
            }
            Seeds::Mean => {
                let seeds = per_seed
                    .iter()
                    .map(|(s, _)| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                let label = format!("mean of seeds {seeds}");
                if let Some((_, Err(e))) = per_seed.iter().find(|(_, r)| r.is_err()) {
                    errors(claim, label, e, &mut out);
                    continue;
                }
                let rows: Vec<(u64, Vec<CheckRow>)> = per_seed
                    .iter()
                    .filter_map(|(s, r)| r.as_ref().ok().map(|rows| (*s, own(rows))))
                    .collect();
                out.extend(claim.aggregate_mean(&rows).into_iter().map(|row| Verdict {
                    seed: label.clone(),
                    claim: claim.describe(),
                    row,
                    run_error: false,
                }));
            }
        }
    }
    out
}

/// Writes the report's JUnit XML to `path`, atomically.
pub fn write_junit(report: &Report, path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            context: format!("cannot create {}", dir.display()),
            source,
        })?;
    }
    write_atomic(path, report.junit().as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run that fails fails its claims as errors (JUnit `<error>`), for `all` and `mean`
    /// claims alike; the other seeds' verdicts stand.
    #[test]
    fn a_failed_run_fails_its_claims_as_errors() {
        use dasim_reports::claims::{Bound, Expect, Facts, Op};
        let facts = Facts {
            algorithms: vec![("ps".into(), "ps".into()), ("sgp".into(), "sgp".into())],
            measured: crate::scenario::measured(),
            workers: 4,
            ..Facts::default()
        };
        let expect = |metric: &str, seeds| Expect {
            metric: metric.into(),
            algorithm: None,
            op: Op::Le,
            value: Bound::Number(10.0),
            rel_tol: None,
            abs_tol: None,
            over: None,
            at: None,
            seeds,
            note: None,
        };
        let claims = [
            Claim::new(0, &expect("staleness.max", Seeds::All), &facts).unwrap(),
            Claim::new(1, &expect("message_age.max", Seeds::Mean), &facts).unwrap(),
        ];
        let ok: Vec<CheckRow> = claims
            .iter()
            .flat_map(|c| {
                c.targets.iter().map(|l| CheckRow {
                    observed: Some(1.0),
                    bound: Some(10.0),
                    result: CheckResult::Pass,
                    ..c.row(l)
                })
            })
            .collect();
        let per_seed = vec![(1, Ok(ok)), (2, Err("deadlock: 0 waits for 1".to_owned()))];
        let v = verdicts(&claims, &per_seed);
        let summary: Vec<(&str, &str, bool)> = v
            .iter()
            .map(|v| (v.seed.as_str(), v.row.algorithm.as_str(), v.run_error))
            .collect();
        assert_eq!(
            summary,
            [
                ("1", "ps", false),
                ("1", "sgp", false),
                ("2", "ps", true),
                ("2", "sgp", true),
                ("mean of seeds 1, 2", "ps", false),
                ("mean of seeds 1, 2", "sgp", true),
            ]
        );
        assert_eq!(v[4].row.result, CheckResult::Skip, "a skip stays a skip");
        let report = Report {
            scenarios: vec![ScenarioReport {
                path: "s.toml".into(),
                name: "s".into(),
                wall_s: 0.5,
                seeds: vec![1, 2],
                verdicts: v,
            }],
            backend: "flex (CPU)".into(),
        };
        assert_eq!(
            (report.total(), report.failures(), report.skipped()),
            (6, 3, 1)
        );
        let xml = report.junit();
        assert_eq!(xml.matches("<error ").count(), 3, "{xml}");
        assert_eq!(xml.matches("<skipped ").count(), 1, "{xml}");
        assert!(
            xml.contains("the run failed: deadlock: 0 waits for 1"),
            "{xml}"
        );
        assert_eq!(
            report
                .table()
                .lines()
                .filter(|l| l.contains(" error "))
                .count(),
            3
        );
    }

    #[test]
    fn tables_pad_their_columns() {
        let t = table(
            &["a", "bb", "c"],
            &[
                ["xxx".into(), "y".into(), "z".into()],
                ["∞".into(), "".into(), "".into()],
            ],
        );
        assert_eq!(t, "a    bb  c\nxxx  y   z\n∞\n");
    }
}
