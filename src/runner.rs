//! Running a scenario into a run directory with a progress bar on the terminal: what
//! `dasim run`, `dasim check` and `dasim sweep` do with the library's front door
//! ([`Plan::prepare`], then [`Simulation::run`] into a [`RunDir`]).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use indicatif::{ProgressBar, ProgressStyle};

use dasim_models::{Backend, Execution};
use dasim_sim::engine::RunProgress;

use crate::Result;
use crate::checkpoint::RunCheckpoint;
use crate::plan::Plan;
use crate::scenario::Loaded;
use crate::simulation::{Checkpoints, Progress, Results, Simulation};
use crate::sink::RunDir;

/// How to run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Compute backend ([`crate::runtime::backend`]).
    pub backend: Backend,
    /// Output directory (created if needed).
    pub out: PathBuf,
    /// Show a progress bar on stderr.
    pub progress: bool,
    /// How the store executes gradient flushes (threads, batch limit); results do not depend
    /// on it.
    pub execution: Execution,
    /// Refuse to start when the memory estimate exceeds this many bytes (default: the memory
    /// the machine has available).
    pub memory_limit: Option<u64>,
    /// Replace the results of an earlier run in `out` ([`RunDir::create`]); without it, a
    /// directory that holds `summary.json` or `metrics.csv` is refused.
    pub force: bool,
    /// Write `out/checkpoint.bin` every this many simulated seconds of an algorithm's run, and
    /// when an algorithm finishes ([`crate::checkpoint`]).
    pub checkpoint_every: Option<f64>,
    /// Raised by a Ctrl-C handler: the run stops after the event being handled, writes a
    /// checkpoint and fails with [`Error::Interrupted`](crate::Error::Interrupted).
    pub interrupt: Option<&'static AtomicBool>,
    /// Continue the run of `out` from this checkpoint (read from `out/checkpoint.bin`) instead
    /// of starting it.
    pub resume: Option<Box<RunCheckpoint>>,
}

/// Runs every algorithm of the scenario and writes the run directory, plots included.
pub fn run_scenario(loaded: &Loaded, opts: &RunOptions) -> Result<Results> {
    run_scenario_with(loaded, opts, true)
}

/// [`run_scenario`], drawing the plots at the end only when `plots` is set (`dasim check`
/// leaves them out of the temporary run directories it removes).
pub fn run_scenario_with(loaded: &Loaded, opts: &RunOptions, plots: bool) -> Result<Results> {
    run_into_dir(
        loaded,
        opts,
        plots,
        opts.interrupt.map(|f| f as &AtomicBool),
    )
}

/// [`run_scenario`] stopped by `interrupt` (rather than `opts.interrupt`, which must live for
/// the whole program): a sweep's points in one process share a flag of the sweep's
/// ([`crate::sweep::exec::run_sweep_here`]).
pub fn run_scenario_interruptible(
    loaded: &Loaded,
    opts: &RunOptions,
    interrupt: Option<&AtomicBool>,
) -> Result<Results> {
    run_into_dir(loaded, opts, true, interrupt)
}

fn run_into_dir(
    loaded: &Loaded,
    opts: &RunOptions,
    plots: bool,
    interrupt: Option<&AtomicBool>,
) -> Result<Results> {
    let resume = opts.resume.as_deref();
    let mut sink = match resume {
        Some(_) => RunDir::resume(&opts.out, &loaded.path),
        None => RunDir::create(&opts.out, &loaded.path, opts.force)?,
    }
    .plots(plots);
    let plan = Plan::prepare(loaded)?;
    let mut progress = Bar::new(opts.progress);
    Simulation::new(&plan, opts.backend.clone())
        .execution(opts.execution)
        .memory_limit(opts.memory_limit)
        .checkpoints(Checkpoints {
            every_s: opts.checkpoint_every,
            interrupt,
            resume,
        })
        .run(&mut sink, &mut progress)
}

/// The terminal's [`Progress`]: a bar per algorithm with its simulated time, steps and rate,
/// and notes on stderr (when shown); warnings are printed in any case.
pub struct Bar {
    show: bool,
    bar: ProgressBar,
}

impl Bar {
    /// A bar on stderr; `show = false` keeps it hidden (warnings are still printed).
    pub fn new(show: bool) -> Bar {
        Bar {
            show,
            bar: ProgressBar::hidden(),
        }
    }
}

impl Progress for Bar {
    fn algorithm_started(&mut self, _label: &str) {
        self.bar = if self.show {
            ProgressBar::new(1000)
        } else {
            ProgressBar::hidden()
        };
        self.bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {percent:>3}%  {msg}",
            )
            .expect("valid template"),
        );
    }

    fn advanced(&mut self, label: &str, p: &RunProgress, wall_s: f64) {
        let wall = wall_s.max(1e-9);
        self.bar.set_position((p.fraction * 1000.0).round() as u64);
        self.bar.set_message(format!(
            "{label}  sim {:.2} s  {} steps  {:.0} steps/s",
            p.time.as_secs_f64(),
            p.worker_steps,
            p.worker_steps as f64 / wall
        ));
    }

    fn algorithm_finished(&mut self, _label: &str) {
        self.bar.finish_and_clear();
    }

    fn note(&mut self, message: &str) {
        if self.show {
            self.bar.suspend(|| eprintln!("{message}"));
        }
    }

    fn warning(&mut self, message: &str) {
        self.bar.suspend(|| eprintln!("warning: {message}"));
    }
}
