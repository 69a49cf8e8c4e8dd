//! `dasim`: run and check scenario files, and draw what a run wrote. Each command is a module
//! of [`cmd`]; the process setup they share is [`dasim::runtime`].

mod cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use dasim::Error;

/// A gradient flush allocates and frees buffers of megabytes many times a second; the system
/// allocator hands each back to the kernel and pays page faults to zero it again on the next
/// flush. mimalloc keeps them ([`dasim::runtime::keep_freed_memory`]).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    Run(cmd::run::RunArgs),
    /// Run scenarios (once per seed with --seeds) and check their `[[expect]]` claims: a table
    /// of verdicts, optionally JUnit XML; exit 0 if every claim holds, 1 if one fails, 2 on bad
    /// input.
    Check(cmd::check::CheckArgs),
    /// Run every point of a scenario's [sweep] table (or one shard of them) in parallel worker
    /// processes, skipping points already complete; `dasim sweep merge DIR` gathers them.
    /// Exit 0 if every point completed, 1 if one failed, 2 on bad input.
    Sweep(Box<cmd::sweep::SweepCmd>),
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
    /// Write a run directory's timeline as a Chrome trace (trace.json) for Perfetto
    /// (ui.perfetto.dev) or chrome://tracing: a process per algorithm, a thread per worker,
    /// messages as flows (with [metrics] log_messages = true), faults as instants.
    Trace {
        /// The run directory (written by `dasim run`).
        run_dir: PathBuf,
        /// The JSON file to write (default: RUN_DIR/trace.json).
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
    /// Turn a public cluster trace into a file a scenario reads. `alibaba-pai`: Alibaba PAI's
    /// per-worker mini-batch times (cluster-trace-gpu-v2020/mini-batch-time/data/job_*_norm.csv)
    /// to a step-time trace for `[[cluster.stragglers]] kind = "trace"`.
    Import {
        /// What the file is.
        #[arg(value_enum)]
        kind: dasim::import::ImportKind,
        /// The trace file.
        file: PathBuf,
        /// The file to write (refused if it exists, unless --force).
        #[arg(long, short)]
        out: PathBuf,
        /// The job's mean step in milliseconds: the trace's times are normalized, so the import
        /// keeps their ratios and sets their scale.
        #[arg(long, default_value_t = 10.0)]
        mean_ms: f64,
        /// How the iterations between two samples (every 10th iteration) are filled.
        #[arg(long, value_enum, default_value_t = dasim::import::Between::Hold)]
        between: dasim::import::Between,
        /// Replace the output file if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Write a self-contained HTML report of a run directory: summary table, plots, scenario.
    Report {
        /// The run directory (written by `dasim run`).
        run_dir: PathBuf,
        /// The HTML file to write (default: RUN_DIR/report.html).
        #[arg(long, short)]
        out: Option<PathBuf>,
        /// The algorithm the summary compares the others with: its column comes first and
        /// every ratio is against it (default: the scenario's first algorithm).
        #[arg(long, value_name = "NAME")]
        baseline: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
enum Inspect {
    /// A communication graph (edge list, DOT) or a time-varying peer schedule (CSV).
    Topology(dasim::inspect::TopologyArgs),
}

fn main() -> ExitCode {
    // SAFETY: first thing in `main`: no other thread exists yet.
    unsafe {
        dasim::runtime::keep_freed_memory();
        dasim::runtime::quiet_display_probe();
    }
    let cli = Cli::parse();
    let reads_runs = matches!(
        cli.command,
        Command::Plot { .. } | Command::Report { .. } | Command::Trace { .. }
    );
    match execute(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Error::Interrupted(_) = e {
                // Not a failure: the user asked, and the run can continue.
                eprintln!("{e}");
                return ExitCode::from(130);
            }
            eprintln!("error: {e}");
            match e {
                Error::Scenario(_) | Error::Usage(_) | Error::Memory(_) => ExitCode::from(2),
                Error::Diverged(_) => ExitCode::from(3),
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
            let written = cmd::plot::plot(&run_dirs, out.as_deref())?;
            let dir = out.as_ref().unwrap_or(&run_dirs[0]);
            println!("{} plot files in {}", written.len(), dir.display());
            Ok(())
        }
        Command::Report {
            run_dir,
            out,
            baseline,
        } => {
            let path = cmd::report::report(&run_dir, out.as_deref(), baseline.as_deref())?;
            println!("report in {}", path.display());
            Ok(())
        }
        Command::Trace { run_dir, out } => cmd::trace::trace(&run_dir, out.as_deref()),
        Command::Import {
            kind: dasim::import::ImportKind::AlibabaPai,
            file,
            out,
            mean_ms,
            between,
            force,
        } => {
            if out.exists() && !force {
                return Err(Error::Usage(format!(
                    "{} exists: pass --force to replace it, or choose another --out",
                    out.display()
                )));
            }
            let text = dasim::import::alibaba_pai(&file, mean_ms, between)?;
            std::fs::write(&out, &text).map_err(|source| Error::Io {
                context: format!("writing {}", out.display()),
                source,
            })?;
            let summary = text.lines().next().unwrap_or_default();
            println!("{}", summary.trim_start_matches("# "));
            println!(
                "step-time trace in {}: [[cluster.stragglers]] kind = \"trace\", workers = \"all\", file = \"{}\"",
                out.display(),
                out.display()
            );
            Ok(())
        }
        Command::Sweep(args) => cmd::sweep::sweep(*args),
        Command::Validate { scenario } => cmd::validate::validate(&scenario),
        Command::Run(args) => cmd::run::run(args),
        Command::Check(args) => cmd::check::check(args),
    }
}
