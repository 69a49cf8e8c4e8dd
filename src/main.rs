//! `dasim`: run and check scenario files, and draw what a run wrote.

mod plot_cmd;
mod report_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use dasim::runner::{build_system, load_problem, partition};
use dasim::{Error, Loaded, RunOptions, run_scenario};
use dasim_models::BackendChoice;

/// A deterministic simulator of asynchronous and decentralized SGD on a training cluster.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a scenario and write metrics, a summary and plots.
    Run {
        /// The scenario file.
        scenario: PathBuf,
        /// Output directory.
        #[arg(long, short)]
        out: PathBuf,
        /// Compute backend: auto (a hardware GPU if present, else flex), wgpu or flex.
        #[arg(long, default_value = "auto")]
        backend: BackendChoice,
        /// No progress bar.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Print what a scenario or flags describe.
    #[command(subcommand)]
    Inspect(Inspect),
    /// Check a scenario (and that its data loads) without running it.
    Validate {
        /// The scenario file.
        scenario: PathBuf,
    },
    /// Redraw the plots of a run directory, or overlay several (mean and min–max band per
    /// algorithm, e.g. one scenario under several seeds).
    Plot {
        /// Run directories (written by `dasim run`).
        #[arg(required = true)]
        run_dirs: Vec<PathBuf>,
        /// Where the plots go (default: the run directory; required with several).
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
    /// Write a self-contained HTML report of a run directory: summary table, plots, scenario.
    Report {
        /// The run directory (written by `dasim run`).
        run_dir: PathBuf,
        /// The HTML file to write (default: RUN_DIR/report.html).
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum Inspect {
    /// A communication graph (edge list, DOT) or a time-varying peer schedule (CSV).
    Topology(dasim::inspect::TopologyArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let reads_runs = matches!(cli.command, Command::Plot { .. } | Command::Report { .. });
    match execute(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            match e {
                Error::Scenario(_) | Error::Usage(_) => ExitCode::from(2),
                // A run directory that is missing, not one, or malformed is bad input.
                Error::Reports(r) if reads_runs && r.is_input() => ExitCode::from(2),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

fn execute(command: Command) -> dasim::Result<()> {
    match command {
        Command::Inspect(Inspect::Topology(args)) => {
            print!("{}", dasim::inspect::inspect_topology(&args)?);
            Ok(())
        }
        Command::Plot { run_dirs, out } => {
            let written = plot_cmd::plot(&run_dirs, out.as_deref())?;
            let dir = out.as_ref().unwrap_or(&run_dirs[0]);
            println!("{} plot files in {}", written.len(), dir.display());
            Ok(())
        }
        Command::Report { run_dir, out } => {
            let path = report_cmd::report(&run_dir, out.as_deref())?;
            println!("report in {}", path.display());
            Ok(())
        }
        Command::Validate { scenario } => {
            let loaded = Loaded::from_file(&scenario)?;
            let problem = load_problem(&loaded)?;
            partition(&loaded, &problem)?;
            for alg in &loaded.scenario.algorithms {
                build_system(&loaded, &problem, alg)?;
            }
            let s = &loaded.scenario;
            println!(
                "{}: ok — {} workers, {} algorithm(s), model with {} parameters, {} training / {} test samples",
                scenario.display(),
                s.cluster.workers,
                s.algorithms.len(),
                problem.model.num_params(),
                problem.split.train.len(),
                problem.split.test.len()
            );
            Ok(())
        }
        Command::Run {
            scenario,
            out,
            backend,
            quiet,
        } => {
            let loaded = Loaded::from_file(&scenario)?;
            let backend = dasim_models::backend::select(backend)?;
            eprintln!("backend: {backend}");
            let opts = RunOptions {
                backend,
                out: out.clone(),
                progress: !quiet,
            };
            let summary = run_scenario(&loaded, &opts)?;
            for r in &summary.runs {
                // Regression and the quadratic have no accuracy: say nothing rather than "NaN%".
                let mut accuracy = if r.final_accuracy.is_finite() {
                    format!("  accuracy {:.2}%", r.final_accuracy * 100.0)
                } else {
                    String::new()
                };
                if let Some(gap) = r.final_suboptimality {
                    accuracy.push_str(&format!("  f-f* {gap:.3e}"));
                }
                println!(
                    "{:<12} sim {:>8.3} s  {:>7} steps  {:>8.1} steps/s(sim)  epochs {:>6.2}  test loss {:.4}{accuracy}  wall {:.1} s",
                    r.algorithm,
                    r.sim_time_s,
                    r.worker_steps,
                    r.steps_per_sim_s,
                    r.epochs,
                    r.final_loss,
                    r.wall_time_s
                );
            }
            println!("results in {}", out.display());
            Ok(())
        }
    }
}
