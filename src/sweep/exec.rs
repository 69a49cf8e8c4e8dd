//! Running a sweep on one machine: every point of this shard in its own worker process, a
//! few at a time, with one progress bar; points already complete are skipped.
//!
//! A point runs in a fresh process (`dasim sweep point`, a hidden subcommand, of the same
//! executable), so a crash, an abort or memory exhaustion of one point cannot take the others
//! down, and each process has its own thread pool. The process takes a lock on the point's
//! directory while it runs, writes `point.json` when it ends (done, or failed with the error),
//! and, started by a sweep, exits when the sweep's process is gone (it watches a pipe from its
//! parent), so a killed sweep leaves no point running behind it.

use std::collections::VecDeque;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use dasim_models::BackendChoice;
use dasim_reports::rundir::sha256_hex;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::bar::Bar;
use crate::launch::{Launch, Sink, Source, Threads};
use crate::simulation::Results;
use crate::sweep::layout::{
    Completeness, Manifest, POINT_LOCK, POINT_LOG, POINT_TOML, PointStatus, RanBy, State,
    completeness, log_tail, point_dir, write_unique,
};
use crate::sweep::spec::{Point, Sweep};
use crate::{Error, Loaded, Result};

/// One of `count` deterministic slices of a sweep: point `i` (from 0, in the sweep's order)
/// belongs to slice `i mod count + 1`. Written `I/N`, `I` from 1 to `N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// Which slice, from 1.
    pub index: usize,
    /// How many slices.
    pub count: usize,
}

impl Shard {
    /// Whether point `i` (from 0) belongs to this slice.
    pub fn holds(&self, i: usize) -> bool {
        i % self.count + 1 == self.index
    }
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let bad = || format!("`{s}` is not a shard: write I/N with 1 <= I <= N, e.g. 2/8");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: usize = i.trim().parse().map_err(|_| bad())?;
        let count: usize = n.trim().parse().map_err(|_| bad())?;
        if index == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// How to run a sweep.
#[derive(Clone, Debug)]
pub struct SweepOptions {
    /// The scenario file with a `[sweep]` table.
    pub scenario: PathBuf,
    /// The sweep directory.
    pub out: PathBuf,
    /// Points run at once (default: the cores divided by `threads`).
    pub jobs: Option<usize>,
    /// Threads of each point's run.
    pub threads: usize,
    /// Only this slice of the points.
    pub shard: Option<Shard>,
    /// The `--backend` of each point's run.
    pub backend: BackendChoice,
    /// Show the progress bar and a line per finished point.
    pub progress: bool,
}

/// What a sweep did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SweepReport {
    /// Points of the sweep.
    pub total: usize,
    /// Points of this shard.
    pub selected: usize,
    /// Points found complete, not run again.
    pub skipped: usize,
    /// Points complete, but by another build of dasim or with another `--backend`, so run
    /// again: name and what had run them.
    pub rerun: Vec<(String, String)>,
    /// Points run to completion now.
    pub done: usize,
    /// Points that failed: name and error.
    pub failed: Vec<(String, String)>,
}

/// `n points`, or `1 point`.
pub fn count_points(n: usize) -> String {
    if n == 1 {
        "1 point".into()
    } else {
        format!("{n} points")
    }
}

/// The number of points run at once by default: the cores divided by the threads of one run,
/// at least 1.
pub fn default_jobs(threads: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / threads.max(1)).max(1)
}

/// Parses the sweep of `scenario` and loads every point; any error, located, comes before
/// anything is run or written.
pub fn expand(scenario: &Path) -> Result<(Sweep, Vec<(Point, Loaded)>)> {
    let text = std::fs::read_to_string(scenario).map_err(|e| Error::Io {
        context: format!("cannot read the scenario file {}", scenario.display()),
        source: e,
    })?;
    let sweep = Sweep::parse(scenario, &text)?.ok_or_else(|| {
        Error::Usage(format!(
            "{} has no [sweep] table; `dasim run` runs a single scenario",
            scenario.display()
        ))
    })?;
    let points = sweep.load_all()?;
    Ok((sweep, points))
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { context, source }
}

/// Runs the points of `opts.shard` (every point without one) that are not complete yet, each
/// in a worker process, `jobs` at a time. A failing point does not stop the others; the
/// report lists it.
pub fn run_sweep(opts: &SweepOptions) -> Result<SweepReport> {
    let (sweep, points) = expand(&opts.scenario)?;
    let (mut report, mut queue, jobs) = start(&sweep, &points, opts)?;
    let current = RanBy::current(opts.backend);
    let shard = opts
        .shard
        .map(|s| format!(" (shard {s})"))
        .unwrap_or_default();
    if opts.progress {
        eprintln!(
            "sweep of {}: {}{shard}, {} complete already, {} to run, {jobs} at a time, {} thread(s) each",
            sweep.path.display(),
            count_points(report.selected),
            report.skipped,
            queue.len(),
            opts.threads
        );
        if !report.rerun.is_empty() {
            eprintln!(
                "{} complete by another build or backend, run again with {current}:",
                count_points(report.rerun.len())
            );
            for (name, other) in &report.rerun {
                eprintln!("  rerun  {name} (ran by {other})");
            }
        }
    }

    let bar = if opts.progress {
        ProgressBar::new(queue.len() as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} points  {msg}  ETA {eta}",
        )
        .expect("valid template"),
    );
    let exe = std::env::current_exe().map_err(io("cannot find the dasim executable".into()))?;
    let mut running: Vec<(Child, Point, Instant)> = Vec::new();
    let say = |line: String| {
        if opts.progress {
            bar.suspend(|| eprintln!("{line}"));
        }
    };
    loop {
        while running.len() < jobs
            && let Some(point) = queue.pop_front()
        {
            match spawn_point(&exe, opts, &point) {
                Ok(child) => running.push((child, point, Instant::now())),
                Err(e) => {
                    let msg = e.to_string();
                    say(format!("FAILED {}: {msg}", point.name));
                    report.failed.push((point.name.clone(), msg));
                    bar.inc(1);
                }
            }
        }
        bar.set_message(format!(
            "{} done, {} failed, {} running",
            report.done,
            report.failed.len(),
            running.len()
        ));
        if running.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        bar.tick();
        let mut i = 0;
        while i < running.len() {
            let exited = running[i]
                .0
                .try_wait()
                .map_err(io("cannot wait for a point's process".into()))?;
            let Some(status) = exited else {
                i += 1;
                continue;
            };
            let (_, point, started) = running.swap_remove(i);
            let secs = started.elapsed().as_secs_f64();
            let dir = point_dir(&opts.out, &point.name);
            match point_ended(&dir, &point, status, &current)? {
                None => {
                    report.done += 1;
                    say(format!("done   {} ({secs:.1} s)", point.name));
                }
                Some(error) => {
                    say(format!(
                        "FAILED {} ({secs:.1} s): {}\n       (log: {})",
                        point.name,
                        error.lines().next().unwrap_or(""),
                        dir.join(POINT_LOG).display()
                    ));
                    report.failed.push((point.name.clone(), error));
                }
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    Ok(report)
}

/// How the process of `point` (run into `dir`) ended, with exit `status`: `None` when it is
/// done, else its error, which `point.json` holds (written here, as run by `current`, for a
/// process that died without saying why).
fn point_ended(
    dir: &Path,
    point: &Point,
    status: std::process::ExitStatus,
    current: &RanBy,
) -> Result<Option<String>> {
    match PointStatus::read(dir) {
        Some(s) if status.success() && s.state == State::Done => Ok(None),
        Some(PointStatus {
            state: State::Failed,
            error: Some(e),
            ..
        }) => Ok(Some(e)),
        _ => {
            // It died without saying why: say it for it.
            let tail = log_tail(dir, 5);
            let error = format!("the point's process {status}; its output ends:\n{tail}");
            PointStatus {
                name: point.name.clone(),
                state: State::Failed,
                sha256: sha256_hex(point.text.as_bytes()),
                ran_by: Some(current.clone()),
                error: Some(error.clone()),
            }
            .write(dir)?;
            Ok(Some(error))
        }
    }
}

/// What both ways of running a sweep do first: create the sweep directory, write its
/// manifest, select the points to run ([`select`]) and decide how many run at once.
fn start(
    sweep: &Sweep,
    points: &[(Point, Loaded)],
    opts: &SweepOptions,
) -> Result<(SweepReport, VecDeque<Point>, usize)> {
    std::fs::create_dir_all(&opts.out)
        .map_err(io(format!("cannot create {}", opts.out.display())))?;
    let plain: Vec<Point> = points.iter().map(|(p, _)| p.clone()).collect();
    Manifest::new(sweep, &plain).write(&opts.out)?;
    let (report, queue) = select(opts, points);
    let jobs = opts
        .jobs
        .unwrap_or_else(|| default_jobs(opts.threads))
        .clamp(1, queue.len().max(1));
    Ok((report, queue, jobs))
}

/// The points of `opts.shard` (every point without one) that are not complete yet, in order,
/// and the report so far (the points counted, those skipped, those run again).
fn select(opts: &SweepOptions, points: &[(Point, Loaded)]) -> (SweepReport, VecDeque<Point>) {
    let mut report = SweepReport {
        total: points.len(),
        ..SweepReport::default()
    };
    let mut queue = VecDeque::new();
    let current = RanBy::current(opts.backend);
    for (point, loaded) in points {
        if opts.shard.is_some_and(|s| !s.holds(point.index)) {
            continue;
        }
        report.selected += 1;
        let dir = point_dir(&opts.out, &point.name);
        let sha = sha256_hex(point.text.as_bytes());
        match completeness(&dir, &sha, loaded.scenario.algorithms.len(), &current) {
            Completeness::Complete => report.skipped += 1,
            Completeness::Incomplete => queue.push_back(point.clone()),
            Completeness::RanByOther(other) => {
                report.rerun.push((point.name.clone(), other));
                queue.push_back(point.clone());
            }
        }
    }
    (report, queue)
}

/// Starts the worker process of `point`: `dasim sweep point`, its output to the point's
/// `log.txt`, its standard input a pipe it watches to exit with this process.
fn spawn_point(exe: &Path, opts: &SweepOptions, point: &Point) -> Result<Child> {
    let dir = point_dir(&opts.out, &point.name);
    std::fs::create_dir_all(&dir).map_err(io(format!("cannot create {}", dir.display())))?;
    let log_path = dir.join(POINT_LOG);
    let log = std::fs::File::create(&log_path)
        .map_err(io(format!("cannot create {}", log_path.display())))?;
    let err = log
        .try_clone()
        .map_err(io(format!("cannot open {}", log_path.display())))?;
    Command::new(exe)
        .arg("sweep")
        .arg("point")
        .arg(&opts.scenario)
        .arg("--name")
        .arg(&point.name)
        .arg("--out")
        .arg(&dir)
        .arg("--backend")
        .arg(opts.backend.to_string())
        .arg("--threads")
        .arg(opts.threads.to_string())
        .arg("--watch-parent")
        .stdin(Stdio::piped())
        .stdout(log)
        .stderr(err)
        .spawn()
        .map_err(io(format!("cannot start {}", exe.display())))
}

/// Exits this process when its standard input reaches its end: started by a sweep, that is
/// when the sweep's process is gone (killed included), since it holds the pipe's other end.
pub fn exit_with_parent() {
    std::thread::spawn(|| {
        let mut sink = [0u8; 64];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        eprintln!("the sweep that started this point is gone: stopping");
        std::process::exit(130);
    });
}

/// Runs point `name` of the sweep of `scenario` into `out` (the body of `dasim sweep point`):
/// waits for any other process running it, skips it when complete (by this build, with this
/// `--backend`), else runs it on the process's pool of `threads` (replacing a partial run or
/// one by another build or backend) and records how it ended, and what ran it, in
/// `point.json`.
pub fn run_point(
    scenario: &Path,
    name: &str,
    out: &Path,
    backend: BackendChoice,
    threads: Option<usize>,
) -> Result<()> {
    let (sweep, points) = expand(scenario)?;
    let Some((point, loaded)) = points.into_iter().find(|(p, _)| p.name == name) else {
        return Err(Error::Usage(format!(
            "the sweep of {} has no point named `{name}`",
            sweep.path.display()
        )));
    };
    let point = PointRun {
        sweep: &sweep,
        point: &point,
        loaded: &loaded,
        out,
        backend,
        threads: Threads::Process(threads),
        interrupt: None,
        announce: true,
    };
    if let Some(results) = point.run()? {
        for r in &results.runs {
            println!(
                "{name}: {} sim {} s, {} steps, final loss {}",
                r.algorithm,
                crate::outputs::fixed(r.sim_time_s, 3),
                r.worker_steps,
                r.final_loss
            );
        }
    }
    Ok(())
}

/// One point of a sweep, to run into its directory.
pub struct PointRun<'a> {
    /// The sweep.
    pub sweep: &'a Sweep,
    /// The point.
    pub point: &'a Point,
    /// Its scenario, loaded.
    pub loaded: &'a Loaded,
    /// Its run directory.
    pub out: &'a Path,
    /// The backend asked for (it is recorded).
    pub backend: BackendChoice,
    /// The thread pool of its run.
    pub threads: Threads,
    /// Raised from outside: the run stops after the current event (left incomplete, so the
    /// sweep runs it again).
    pub interrupt: Option<&'a AtomicBool>,
    /// Say on stderr which backend and how many threads the run has (the point's `log.txt`).
    pub announce: bool,
}

impl PointRun<'_> {
    /// Skips the point when complete (by this build, with this backend), else runs it
    /// (replacing a partial run or one by another build or backend) and records how it ended,
    /// and what ran it, in `point.json`. `None`: it was complete already.
    pub fn run(&self) -> Result<Option<Results>> {
        let PointRun {
            sweep, point, out, ..
        } = *self;
        let name = &point.name;
        // One process at a time runs a point (waiting for any other running it).
        std::fs::create_dir_all(out).map_err(io(format!("cannot create {}", out.display())))?;
        let lock_path = out.join(POINT_LOCK);
        let lock = std::fs::File::create(&lock_path)
            .map_err(io(format!("cannot create {}", lock_path.display())))?;
        lock.lock()
            .map_err(io(format!("cannot lock {}", lock_path.display())))?;
        let sha = sha256_hex(point.text.as_bytes());
        let current = RanBy::current(self.backend);
        match completeness(out, &sha, self.loaded.scenario.algorithms.len(), &current) {
            Completeness::Complete => {
                eprintln!("{name}: complete already");
                return Ok(None);
            }
            Completeness::RanByOther(other) => {
                eprintln!("{name}: its results are by {other}; running it again with {current}");
            }
            Completeness::Incomplete => {}
        }
        let _ = std::fs::remove_file(out.join(crate::sweep::layout::POINT_STATUS));
        write_unique(&out.join(POINT_TOML), point.text.as_bytes())?;
        // A check that needs the model or the data, failing now, is located in the sweep's
        // file.
        let result = self.launch().map_err(|e| match e {
            Error::Scenario(e) => Error::Scenario(sweep.relocate(point, &e)),
            other => other,
        });
        if matches!(result, Err(Error::Interrupted(_))) {
            // Neither done nor failed: the next sweep runs it again.
            return result.map(Some);
        }
        let status = PointStatus {
            name: name.to_owned(),
            state: if result.is_ok() {
                State::Done
            } else {
                State::Failed
            },
            sha256: sha,
            ran_by: Some(current),
            error: result.as_ref().err().map(|e| e.to_string()),
        };
        status.write(out)?;
        result.map(Some)
    }

    /// The point's run: a launch of its scenario into its directory (replacing what is there).
    fn launch(&self) -> Result<Results> {
        let launch = Launch {
            backend: self.backend,
            threads: self.threads,
            sink: Sink::Dir {
                out: self.out.to_path_buf(),
                force: true,
                plots: true,
            },
            ..Launch::new(Source::Scenario(self.loaded.clone()))
        };
        let started = launch.start()?;
        if self.announce {
            eprintln!(
                "backend: {}, {} thread(s)",
                started.backend(),
                started.threads()
            );
        }
        started
            .prepare()?
            .run(0, &mut Bar::new(false), self.interrupt)
    }
}

/// What a sweep run in this process ([`run_sweep_here`]) reports as it goes.
pub trait SweepProgress {
    /// The sweep starts: `report` counts the points selected and skipped; `to_run` will run.
    fn started(&mut self, report: &SweepReport, to_run: usize);
    /// Point `name` ended after `wall_s` seconds: `None` when it is done, else its error.
    fn point_ended(&mut self, name: &str, error: Option<&str>, wall_s: f64);
}

/// [`run_sweep`] inside this process, for a program that embeds dasim (the Python package):
/// the points of `opts.shard` that are not complete run on `opts.jobs` threads of this process
/// (a panicking point fails alone, with the panic as its error), each with `opts.threads`
/// threads of its own; the sweep directory is the one `run_sweep` writes, so either continues
/// the other's sweep. `sweep` and `points` are [`expand`]'s (`opts.scenario` is not read). When
/// `interrupt` is raised, the points running stop after their current event, are left
/// incomplete, and no other point starts.
pub fn run_sweep_here(
    sweep: &Sweep,
    points: &[(Point, Loaded)],
    opts: &SweepOptions,
    interrupt: &AtomicBool,
    progress: &Mutex<dyn SweepProgress + Send>,
) -> Result<SweepReport> {
    let (report, queue, jobs) = start(sweep, points, opts)?;
    // A backend that cannot be had fails the sweep, not each point.
    crate::runtime::backend(opts.backend)?;
    lock(progress).started(&report, queue.len());
    let report = Mutex::new(report);
    let queue = Mutex::new(queue);
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| {
                while !interrupt.load(Ordering::SeqCst) {
                    let Some(point) = lock(&queue).pop_front() else {
                        break;
                    };
                    let started = Instant::now();
                    // Each point on a pool of its own: points in one pool would take turns.
                    let run = PointRun {
                        sweep,
                        point: &point,
                        loaded: &points[point.index].1,
                        out: &point_dir(&opts.out, &point.name),
                        backend: opts.backend,
                        threads: Threads::Own(Some(opts.threads)),
                        interrupt: Some(interrupt),
                        announce: false,
                    };
                    let result =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run.run()))
                            .unwrap_or_else(|panic| {
                                Err(Error::Usage(format!(
                                    "dasim bug: the point's run panicked: {}",
                                    panic_message(&*panic)
                                )))
                            });
                    let error = match result {
                        Ok(_) => None,
                        Err(Error::Interrupted(_)) => break,
                        Err(e) => Some(e.to_string()),
                    };
                    let secs = started.elapsed().as_secs_f64();
                    let mut report = lock(&report);
                    match &error {
                        None => report.done += 1,
                        Some(e) => report.failed.push((point.name.clone(), e.clone())),
                    }
                    drop(report);
                    lock(progress).point_ended(&point.name, error.as_deref(), secs);
                }
            });
        }
    });
    let report = report.into_inner().unwrap_or_else(|e| e.into_inner());
    if interrupt.load(Ordering::SeqCst) {
        return Err(Error::Interrupted(format!(
            "interrupted: {} of {} run; run the sweep again to run the others",
            count_points(report.done + report.failed.len()),
            count_points(report.selected - report.skipped)
        )));
    }
    Ok(report)
}

fn lock<T: ?Sized>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The message of a panic's payload (a `&str` or a `String`, as `panic!` makes them).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}
