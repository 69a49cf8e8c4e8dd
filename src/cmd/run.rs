//! `dasim run`: run a scenario into a run directory and print what each algorithm did.

use std::path::PathBuf;

use dasim::bar::Bar;
use dasim::launch::{Sink, Source, Threads};
use dasim::outputs::{fixed, sci};
use dasim::runtime::interrupt_flag;
use dasim::{Error, Launch, Loaded, Results};
use dasim_reports::rundir::{AlgorithmSummary, CheckResult, Stopped};

use super::LaunchArgs;

/// `dasim run`'s arguments.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The scenario file.
    #[arg(required_unless_present = "resume")]
    pub scenario: Option<PathBuf>,
    /// Output directory.
    #[arg(long, short, required_unless_present = "resume")]
    pub out: Option<PathBuf>,
    /// Write RUN_DIR/checkpoint.bin every this many simulated seconds of each algorithm's
    /// run (and between algorithms), so that `--resume` can continue it. Ctrl-C always
    /// stops after the current event and writes one.
    #[arg(long, value_name = "SECONDS")]
    pub checkpoint_every: Option<f64>,
    /// Continue the run in RUN_DIR from its checkpoint: the same scenario file (unchanged)
    /// and backend; the files come out as if the run had never stopped.
    #[arg(long, value_name = "RUN_DIR", conflicts_with_all = ["scenario", "out", "force"])]
    pub resume: Option<PathBuf>,
    #[command(flatten)]
    pub launch: LaunchArgs,
    /// Gradient requests per forward/backward pass at most (default: every pending one).
    /// Bounds the memory of a pass; results do not depend on it.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_batch: Option<u64>,
    /// Refuse to start when the memory estimate exceeds this size, e.g. 4GiB (default: the
    /// memory available on this machine).
    #[arg(long)]
    pub memory_limit: Option<dasim_models::Bytes>,
    /// Exit with code 1 when a claim of the scenario's `[[expect]]` entries fails (they are
    /// evaluated and recorded in any case).
    #[arg(long)]
    pub strict: bool,
    /// Replace the results of an earlier run in the output directory (without it, a
    /// directory holding summary.json or metrics.csv is refused).
    #[arg(long)]
    pub force: bool,
    /// Exit with code 0 when an algorithm diverged (without it: code 3). The run stops that
    /// algorithm at the point of divergence and runs the others in either case.
    #[arg(long)]
    pub keep_going: bool,
    /// Also write OUT/trace.json, the timeline for Perfetto or chrome://tracing (as `dasim
    /// trace OUT`; message flows need `[metrics] log_messages = true`).
    #[arg(long)]
    pub trace: bool,
}

/// Runs the scenario (or continues an interrupted run) and prints a line per algorithm.
pub fn run(args: RunArgs) -> dasim::Result<()> {
    let RunArgs {
        scenario,
        out,
        checkpoint_every,
        resume,
        launch: LaunchArgs {
            backend,
            quiet,
            threads,
        },
        max_batch,
        memory_limit,
        strict,
        force,
        keep_going,
        trace,
    } = args;
    let (source, out) = match resume {
        Some(dir) => (
            Source::Resume {
                dir: dir.clone(),
                scenario: None,
            },
            dir,
        ),
        None => {
            let loaded = Loaded::from_file(&scenario.expect("clap requires it"))?;
            (Source::Scenario(loaded), out.expect("clap requires it"))
        }
    };
    let launch = Launch {
        backend,
        threads: Threads::Process(threads),
        sink: Sink::Dir {
            out: out.clone(),
            force,
            plots: true,
        },
        max_batch: max_batch.map(|m| m as usize),
        memory_limit: memory_limit.map(|b| b.0),
        checkpoint_every,
        ..Launch::new(source)
    };
    let started = launch.start()?;
    eprintln!(
        "backend: {}, {} thread(s)",
        started.backend(),
        started.threads()
    );
    let interrupt = interrupt_flag();
    let summary = started
        .prepare()?
        .run(0, &mut Bar::new(!quiet), Some(interrupt))?;
    if let Some(t) = &summary.timed_as {
        println!("proxy: the model trains for real; its steps and messages are timed as {t}");
    }
    print_algorithms(&summary);
    let diverged: Vec<&str> = summary
        .runs
        .iter()
        .filter(|r| matches!(r.stopped, Some(Stopped::Diverged | Stopped::Stalled)))
        .filter_map(|r| r.stop_reason.as_deref())
        .collect();
    warn_of_stops(&summary);
    if !summary.checks.is_empty() {
        println!();
        print!("{}", dasim::check::run_table(&summary.checks));
    }
    println!("results in {}", out.display());
    if trace {
        super::trace::trace(&out, None)?;
    }
    exit_status(&summary, diverged.len(), strict, keep_going)
}

/// Prints two lines per algorithm: its simulated run and result, then its wall-clock timing.
fn print_algorithms(summary: &Results) {
    // One column for the labels, as wide as the longest.
    let width = summary
        .runs
        .iter()
        .map(|r| r.algorithm.chars().count())
        .max()
        .unwrap_or(0)
        .max(12);
    for (r, t) in summary.runs.iter().zip(&summary.timings) {
        let result = result_text(r, summary.timing_only);
        println!(
            "{:<width$} sim {:>8} s  {:>7} steps  {:>8} steps/s(sim)  epochs {:>6}  {result}",
            r.algorithm,
            fixed(r.sim_time_s, 3),
            r.worker_steps,
            fixed(r.steps_per_sim_s, 1),
            fixed(r.epochs, 2),
        );
        println!(
            "{:<width$} wall {} s  {} steps/s(wall)  {} sim s/wall s  gradient math {}% of wall",
            "",
            fixed(t.wall_time_s, 2),
            fixed(t.worker_steps_per_wall_s, 0),
            fixed(t.sim_s_per_wall_s, 3),
            fixed(100.0 * t.gradient_share, 0)
        );
    }
}

/// What an algorithm's run ended with, for its line: the final test loss (and accuracy and
/// suboptimality where there are some), prefixed with why it stopped early if it did.
fn result_text(r: &AlgorithmSummary, timing_only: bool) -> String {
    // Regression and the quadratic have no accuracy: say nothing rather than "NaN%".
    let mut accuracy = if r.final_accuracy.is_finite() {
        format!("  accuracy {}%", fixed(r.final_accuracy * 100.0, 2))
    } else {
        String::new()
    };
    if let Some(gap) = r.final_suboptimality {
        accuracy.push_str(&format!("  f-f* {}", sci(gap, 3)));
    }
    // A diverged loss can have hundreds of digits.
    let loss = if r.final_loss.abs() >= 1e6 {
        sci(r.final_loss, 3)
    } else {
        fixed(r.final_loss, 4)
    };
    let (measured, initial) = if timing_only {
        let none = "timing only: no gradient computed, no loss".to_owned();
        (none.clone(), none)
    } else {
        (
            format!("test loss {loss}{accuracy}"),
            format!("initial test loss {loss}"),
        )
    };
    match r.stopped {
        Some(Stopped::Diverged) => format!("DIVERGED: {measured}"),
        Some(Stopped::NoSteps) => {
            format!("NO STEP COMPLETED: nothing trained ({initial})")
        }
        Some(Stopped::Stalled) => format!("STALLED: {measured}"),
        None => measured,
    }
}

/// Warns of every algorithm that stopped early, with why.
fn warn_of_stops(summary: &Results) {
    for r in &summary.runs {
        if let (Some(stopped), Some(reason)) = (r.stopped, &r.stop_reason) {
            let kept = match stopped {
                Stopped::Diverged | Stopped::Stalled => "; its outputs up to that point are kept",
                Stopped::NoSteps => "",
            };
            eprintln!("warning: {reason}{kept}");
        }
    }
}

/// The command's result: an error when claims failed under `--strict` (and nothing
/// diverged), or when `diverged` algorithms diverged or stalled without `--keep-going`; a
/// failed claim otherwise is a warning.
fn exit_status(
    summary: &Results,
    diverged: usize,
    strict: bool,
    keep_going: bool,
) -> dasim::Result<()> {
    let failed = summary
        .checks
        .iter()
        .filter(|c| c.result == CheckResult::Fail)
        .count();
    if failed > 0 {
        let msg = format!(
            "{failed} of {} claim verdicts failed (checks.csv)",
            summary.checks.len()
        );
        if strict && diverged == 0 {
            return Err(Error::Claims(msg));
        }
        eprintln!("warning: {msg}");
    }
    if diverged > 0 && !keep_going {
        return Err(Error::Diverged(format!(
            "{} of {} algorithm(s) diverged or stalled (summary.json: \"stopped\": \
             \"diverged\" or \"stalled\"); --keep-going exits with code 0 nonetheless",
            diverged,
            summary.runs.len()
        )));
    }
    Ok(())
}
