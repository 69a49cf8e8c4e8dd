//! `dasim`: run and check scenario files, and draw what a run wrote.

mod plot_cmd;
mod report_cmd;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Parser, Subcommand};

use dasim::checkpoint::RunCheckpoint;
use dasim::outputs::{fixed, sci};
use dasim::runner::{load_problem, memory_estimate, preflight};
use dasim::{Error, Loaded, RunOptions, run_scenario};
use dasim_models::{BackendChoice, Execution};
use dasim_reports::rundir::{CheckResult, Stopped};

/// A gradient flush allocates and frees buffers of megabytes many times a second; the system
/// allocator hands each back to the kernel and pays page faults to zero it again on the next
/// flush. mimalloc keeps them (see [`keep_freed_memory`]).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (the 16th entry of `mi_option_e` in the bundled v3
/// `mimalloc.h`; the crate exports no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Tells mimalloc never to return freed memory to the kernel, unless the user set
/// `MIMALLOC_PURGE_DELAY` themselves. By default (mimalloc 3, `options.c`) it gives back memory
/// unused for a second, and a later flush's matrix products fault it in again as pages the
/// kernel must zero: on the 16-worker MLP 784-128-10 benchmark the page zeroing was a tenth to
/// a fifth of the samples. The cost can be a higher peak of resident memory (the book's
/// performance chapter has the figures).
fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: `mi_option_set` is not thread-safe; this runs first in `main`, before any
        // other thread exists.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) }
    }
}

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
        #[arg(required_unless_present = "resume")]
        scenario: Option<PathBuf>,
        /// Output directory.
        #[arg(long, short, required_unless_present = "resume")]
        out: Option<PathBuf>,
        /// Write RUN_DIR/checkpoint.bin every this many simulated seconds of each algorithm's
        /// run (and between algorithms), so that `--resume` can continue it. Ctrl-C always
        /// stops after the current event and writes one.
        #[arg(long, value_name = "SECONDS")]
        checkpoint_every: Option<f64>,
        /// Continue the run in RUN_DIR from its checkpoint: the same scenario file (unchanged)
        /// and backend; the files come out as if the run had never stopped.
        #[arg(long, value_name = "RUN_DIR", conflicts_with_all = ["scenario", "out", "force"])]
        resume: Option<PathBuf>,
        /// Compute backend: auto (a hardware GPU if present, else flex), wgpu or flex.
        #[arg(long, default_value = "auto")]
        backend: BackendChoice,
        /// No progress bar.
        #[arg(long, short)]
        quiet: bool,
        /// Threads for the gradient passes on flex and the row arithmetic (default: every core).
        /// On a GPU a flush stays one pass. Results do not depend on it.
        #[arg(long)]
        threads: Option<usize>,
        /// Gradient requests per forward/backward pass at most (default: every pending one).
        /// Bounds the memory of a pass; results do not depend on it.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        max_batch: Option<u64>,
        /// Refuse to start when the memory estimate exceeds this size, e.g. 4GiB (default: the
        /// memory available on this machine).
        #[arg(long)]
        memory_limit: Option<dasim_models::Bytes>,
        /// Exit with code 1 when a claim of the scenario's `[[expect]]` entries fails (they are
        /// evaluated and recorded in any case).
        #[arg(long)]
        strict: bool,
        /// Replace the results of an earlier run in the output directory (without it, a
        /// directory holding summary.json or metrics.csv is refused).
        #[arg(long)]
        force: bool,
        /// Exit with code 0 when an algorithm diverged (without it: code 3). The run stops that
        /// algorithm at the point of divergence and runs the others in either case.
        #[arg(long)]
        keep_going: bool,
    },
    /// Run scenarios (once per seed with --seeds) and check their `[[expect]]` claims: a table
    /// of verdicts, optionally JUnit XML; exit 0 if every claim holds, 1 if one fails, 2 on bad
    /// input.
    Check {
        /// The scenario files.
        #[arg(required = true)]
        scenarios: Vec<PathBuf>,
        /// Seeds to run each scenario under, replacing its own: `1..5` (1 to 5), `1,4,9` or `7`.
        #[arg(long, value_parser = dasim::check::parse_seed_list)]
        seeds: Option<dasim::check::SeedList>,
        /// Write the verdicts as JUnit XML to this file.
        #[arg(long)]
        junit: Option<PathBuf>,
        /// Compute backend: auto (a hardware GPU if present, else flex), wgpu or flex.
        #[arg(long, default_value = "auto")]
        backend: BackendChoice,
        /// Keep the run directories here (`DIR/<scenario>/seed-<seed>`, with plots); without
        /// it they go to a temporary directory that is removed.
        #[arg(long, short)]
        out: Option<PathBuf>,
        /// No progress lines or bars.
        #[arg(long, short)]
        quiet: bool,
        /// Threads for the gradient passes on flex and the row arithmetic (default: every core).
        /// On a GPU a flush stays one pass. Results do not depend on it.
        #[arg(long)]
        threads: Option<usize>,
    },
    /// Run every point of a scenario's [sweep] table (or one shard of them) in parallel worker
    /// processes, skipping points already complete; `dasim sweep merge DIR` gathers them.
    /// Exit 0 if every point completed, 1 if one failed, 2 on bad input.
    Sweep(Box<SweepCmd>),
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

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
struct SweepCmd {
    #[command(subcommand)]
    action: Option<SweepAction>,
    /// The scenario file, with a [sweep] table.
    #[arg(required = true)]
    scenario: Option<PathBuf>,
    /// The sweep directory: sweep.json and one run directory per point under points/.
    #[arg(long, short, required = true)]
    out: Option<PathBuf>,
    /// Points run at once (default: the cores divided by --threads).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    jobs: Option<u64>,
    /// Threads of each point's run. Results do not depend on it.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    threads: u64,
    /// Run only slice I of N (I from 1 to N): point i, from 0, belongs to slice i mod N + 1.
    #[arg(long)]
    shard: Option<dasim::sweep::Shard>,
    /// Compute backend of each run: auto (a hardware GPU if present, else flex), wgpu or flex.
    #[arg(long, default_value = "auto")]
    backend: BackendChoice,
    /// No progress bar and no line per point.
    #[arg(long, short)]
    quiet: bool,
    /// Write OUT/sweep.sbatch, a Slurm array script whose task $SLURM_ARRAY_TASK_ID runs its
    /// shard, instead of running.
    #[arg(long, conflicts_with_all = ["emit_k8s", "shard"], help_heading = "Cluster jobs")]
    emit_slurm: bool,
    /// Write OUT/sweep-job.yaml, a Kubernetes indexed Job whose completion index
    /// $JOB_COMPLETION_INDEX runs its shard, instead of running.
    #[arg(long, conflicts_with = "shard", help_heading = "Cluster jobs")]
    emit_k8s: bool,
    /// Array tasks (default: one per point).
    #[arg(long, help_heading = "Cluster jobs")]
    shards: Option<usize>,
    /// Slurm partition.
    #[arg(long, help_heading = "Cluster jobs")]
    partition: Option<String>,
    /// Slurm time limit of a task (e.g. 02:00:00).
    #[arg(long, help_heading = "Cluster jobs")]
    time: Option<String>,
    /// CPUs per task (default: --jobs × --threads).
    #[arg(long, help_heading = "Cluster jobs")]
    cpus_per_task: Option<usize>,
    /// GPUs per task (default: none).
    #[arg(long, help_heading = "Cluster jobs")]
    gpus_per_task: Option<usize>,
    /// Tasks running at once (default: no limit).
    #[arg(long, help_heading = "Cluster jobs")]
    array_parallelism: Option<usize>,
    /// Kubernetes: the container image with dasim on its PATH (default dasim:latest).
    #[arg(long, help_heading = "Cluster jobs")]
    image: Option<String>,
    /// Kubernetes: the persistent volume claim holding the scenario and OUT (default
    /// dasim-sweep), mounted as the working directory.
    #[arg(long, help_heading = "Cluster jobs")]
    pvc: Option<String>,
}

#[derive(Subcommand, Debug)]
enum SweepAction {
    /// Gather every point of a sweep directory into DIR/sweep.csv (a row per point and
    /// algorithm: swept values, metrics, claim verdicts; points without results listed with
    /// their status) and draw the sweep plots in DIR/plots. Exit 1 if a point has no results.
    Merge {
        /// The sweep directory.
        dir: PathBuf,
        /// A metric (a column of sweep.csv) to plot against the swept values; repeatable
        /// (default: time_per_epoch_s, final_loss, steps_per_sim_s).
        #[arg(long)]
        metric: Vec<String>,
        /// A swept key to put on the x axis; repeatable (default: every numeric swept key but
        /// seed).
        #[arg(long)]
        x: Vec<String>,
    },
    /// Run one point (what `dasim sweep` starts for each point).
    #[command(hide = true)]
    Point {
        /// The scenario file with the [sweep] table.
        scenario: PathBuf,
        /// The point's name.
        #[arg(long)]
        name: String,
        /// The point's run directory.
        #[arg(long)]
        out: PathBuf,
        /// Compute backend.
        #[arg(long, default_value = "auto")]
        backend: BackendChoice,
        /// Threads of the run.
        #[arg(long)]
        threads: Option<usize>,
        /// Exit when standard input closes (the sweep that started it is gone).
        #[arg(long)]
        watch_parent: bool,
    },
}

fn backend_name(b: BackendChoice) -> &'static str {
    match b {
        BackendChoice::Auto => "auto",
        BackendChoice::Wgpu => "wgpu",
        BackendChoice::Flex => "flex",
    }
}

fn sweep(cmd: SweepCmd) -> dasim::Result<()> {
    use dasim::sweep::{JobKind, MergeOptions, SweepOptions};
    match cmd.action {
        Some(SweepAction::Merge { dir, metric, x }) => {
            let report = dasim::sweep::merge(&dir, &MergeOptions { metrics: metric, x })?;
            println!(
                "{} of {} points complete: {} rows in {}, {} plot files in {}",
                report.complete,
                report.points,
                report.rows,
                report.csv.display(),
                report.plots.len(),
                dir.join(dasim::sweep::merge::PLOTS).display()
            );
            if !report.left_out.is_empty() {
                eprintln!(
                    "{} run(s) left out of the plots, stopped early (sweep.csv's stopped column):",
                    report.left_out.len()
                );
                for (point, algorithm, why) in &report.left_out {
                    eprintln!("  {why:<10} {point} ({algorithm})");
                }
            }
            if report.ran_by.len() > 1 {
                eprintln!(
                    "warning: the points ran by different builds of dasim or on different \
                     backends, so their results may not be comparable (`dasim sweep` runs again \
                     those of another build or --backend):"
                );
                for (by, points) in &report.ran_by {
                    eprintln!("  {by}: {}", dasim::sweep::exec::count_points(points.len()));
                    eprintln!("    {}", points.join(", "));
                }
            }
            if report.missing.is_empty() {
                return Ok(());
            }
            for (name, status, error) in &report.missing {
                let why = error
                    .lines()
                    .next()
                    .map(|l| format!(": {l}"))
                    .unwrap_or_default();
                eprintln!("  {status:<10} {name}{why}");
            }
            Err(Error::Sweep(format!(
                "{} of {} points have no results (listed above and in sweep.csv's status column)",
                report.missing.len(),
                report.points
            )))
        }
        Some(SweepAction::Point {
            scenario,
            name,
            out,
            backend,
            threads,
            watch_parent,
        }) => {
            if watch_parent {
                dasim::sweep::exec::exit_with_parent();
            }
            let threads = thread_pool(threads)?;
            let requested = backend_name(backend);
            let backend = dasim_models::backend::select(backend)?;
            eprintln!("backend: {backend}, {threads} thread(s)");
            let execution = Execution {
                threads,
                max_batch: None,
            };
            on_pool(|| {
                dasim::sweep::run_point(&scenario, &name, &out, (requested, backend), execution)
            })
        }
        None => {
            let (Some(scenario), Some(out)) = (cmd.scenario, cmd.out) else {
                unreachable!("clap requires both without a subcommand");
            };
            let opts = SweepOptions {
                scenario,
                out,
                jobs: cmd.jobs.map(|j| j as usize),
                threads: cmd.threads as usize,
                shard: cmd.shard,
                backend: backend_name(cmd.backend).into(),
                progress: !cmd.quiet,
            };
            let kind = match (cmd.emit_slurm, cmd.emit_k8s) {
                (true, _) => Some(JobKind::Slurm),
                (_, true) => Some(JobKind::Kubernetes),
                _ => None,
            };
            if let Some(kind) = kind {
                let res = dasim::sweep::emit::Resources {
                    partition: cmd.partition,
                    time: cmd.time,
                    cpus_per_task: cmd.cpus_per_task,
                    gpus_per_task: cmd.gpus_per_task,
                    array_parallelism: cmd.array_parallelism,
                    image: cmd.image,
                    pvc: cmd.pvc,
                    mount: None,
                };
                let path = dasim::sweep::emit_jobs(&opts, kind, cmd.shards, &res)?;
                let q = |p: &std::path::Path| dasim::sweep::emit::shell_quote(&p.to_string_lossy());
                println!("wrote {}", path.display());
                match kind {
                    JobKind::Slurm => {
                        println!("submit: sbatch {}", q(&path));
                        println!("watch:  squeue --me");
                    }
                    JobKind::Kubernetes => {
                        println!("submit: kubectl apply -f {}", q(&path));
                        println!("watch:  kubectl get jobs --watch");
                    }
                }
                println!("merge:  dasim sweep merge {}", q(&opts.out));
                return Ok(());
            }
            let report = dasim::sweep::run_sweep(&opts)?;
            println!(
                "{}{}: {} run now{}, {} complete already, {} failed; results in {}",
                dasim::sweep::exec::count_points(report.selected),
                opts.shard
                    .map(|s| format!(" (shard {s} of {} in all)", report.total))
                    .unwrap_or_default(),
                report.done,
                if report.rerun.is_empty() {
                    String::new()
                } else {
                    format!(
                        " ({} again: another build or --backend had run them)",
                        report.rerun.len()
                    )
                },
                report.skipped,
                report.failed.len(),
                opts.out.display()
            );
            if report.failed.is_empty() {
                return Ok(());
            }
            for (name, error) in &report.failed {
                eprintln!("FAILED {name}: {error}");
            }
            Err(Error::Sweep(format!(
                "{} of {} points failed (each has point.json and log.txt in its directory)",
                report.failed.len(),
                report.selected
            )))
        }
    }
}

#[derive(Subcommand, Debug)]
enum Inspect {
    /// A communication graph (edge list, DOT) or a time-varying peer schedule (CSV).
    Topology(dasim::inspect::TopologyArgs),
}

/// Raised by the first Ctrl-C of `dasim run`: the run stops after the current event and writes
/// a checkpoint. A second Ctrl-C ends the process at once.
fn interrupt_flag() -> &'static AtomicBool {
    static FLAG: AtomicBool = AtomicBool::new(false);
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let installed = ctrlc::set_handler(|| {
            if FLAG.swap(true, Ordering::SeqCst) {
                std::process::exit(130);
            }
            eprintln!("\ninterrupted: stopping after the current event to write a checkpoint (Ctrl-C again to quit now)");
        });
        if let Err(e) = installed {
            eprintln!("warning: Ctrl-C will not write a checkpoint: {e}");
        }
    });
    &FLAG
}

fn main() -> ExitCode {
    keep_freed_memory();
    quiet_display_probe();
    let cli = Cli::parse();
    let reads_runs = matches!(cli.command, Command::Plot { .. } | Command::Report { .. });
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

/// Probing for a GPU loads the Vulkan driver, whose window-system code prints
/// `error: XDG_RUNTIME_DIR is invalid or not set in the environment.` on a machine without a
/// desktop session, although nothing is wrong: dasim never opens a window. An absolute path is
/// all that check wants, so where the variable is unset it gets the temporary directory.
fn quiet_display_probe() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        // SAFETY: called first thing in `main`, before any other thread exists, so nothing can
        // read the environment concurrently.
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir()) };
    }
}

/// Starts the one thread pool of the process: the store's flush groups and the backend's own
/// parallel kernels share it, so `--threads 1` is one thread.
fn thread_pool(threads: Option<usize>) -> dasim::Result<usize> {
    let threads = match threads {
        Some(0) => return Err(Error::Usage("--threads must be at least 1".into())),
        Some(t) => t,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        // The simulation runs on one of these threads (`on_pool`): the main thread's stack.
        .stack_size(8 << 20)
        .build_global()
        .map_err(|e| Error::Usage(format!("cannot start {threads} threads: {e}")))?;
    Ok(threads)
}

/// Runs `work` on a thread of the pool that [`thread_pool`] started, and waits for it. The
/// simulation's own thread is then one of the pool's `--threads`: the splits it hands out
/// (a flush's groups, a long optimizer step or mean) run on it and on the others, instead of on
/// `--threads` other threads while it waits, so `--threads 2` is two busy threads, not three
/// competing for two cores.
fn on_pool<R: Send>(work: impl FnOnce() -> R + Send) -> R {
    rayon::scope(|_| work())
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
        Command::Sweep(cmd) => sweep(*cmd),
        Command::Validate { scenario } => {
            if std::fs::read_to_string(&scenario).is_ok_and(|t| dasim::sweep::has_sweep(&t)) {
                let (sweep, points) = dasim::sweep::exec::expand(&scenario)?;
                for (point, loaded) in &points {
                    let located = |e: Error| match e {
                        Error::Scenario(e) => Error::Scenario(sweep.relocate(point, &e)),
                        other => other,
                    };
                    let problem = load_problem(loaded).map_err(located)?;
                    preflight(loaded, &problem).map_err(located)?;
                }
                let keys: Vec<&str> = sweep.axes.iter().map(|a| a.key.as_str()).collect();
                println!(
                    "{}: ok — a sweep of {} points over {}",
                    scenario.display(),
                    points.len(),
                    keys.join(", ")
                );
                return Ok(());
            }
            let loaded = Loaded::from_file(&scenario)?;
            let problem = load_problem(&loaded)?;
            preflight(&loaded, &problem)?;
            let s = &loaded.scenario;
            let claims = match s.expect.len() {
                0 => String::new(),
                k => format!(", {k} claim(s)"),
            };
            // A model without data says what it is instead of "0 training / 0 test samples".
            let data = if !problem.computes() {
                "timing only: no gradient computed".to_owned()
            } else if !problem.has_data() {
                "no data (the quadratic)".to_owned()
            } else {
                format!(
                    "{} training / {} test samples",
                    problem.split.train.len(),
                    problem.split.test.len()
                )
            };
            let timed = s
                .timed_as
                .as_ref()
                .map_or_else(String::new, |t| format!(", timed as {}", t.describe()));
            println!(
                "{}: ok — {} workers, {} algorithm(s), model with {} parameters, {data}{timed}{claims}",
                scenario.display(),
                s.cluster.workers,
                s.algorithms.len(),
                problem.model.num_params(),
            );
            // What `dasim run` would check before it starts (without --max-batch), so that a
            // large run can be sized before it is submitted: on flex, and on a GPU where that
            // differs (a convolutional model's im2col columns), without looking for a GPU.
            let estimate = memory_estimate(&loaded, &problem, Execution::default(), false)?;
            println!("memory: estimated {estimate}");
            let on_gpu = memory_estimate(&loaded, &problem, Execution::default(), true)?;
            if on_gpu.total() != estimate.total() {
                println!(
                    "memory on a GPU (wgpu): estimated {on_gpu}, with the im2col columns of \
                     passes of {} or more requests",
                    dasim_models::lenet::IM2COL_MIN_REPLICAS
                );
            }
            Ok(())
        }
        Command::Run {
            scenario,
            out,
            checkpoint_every,
            resume,
            backend,
            quiet,
            threads,
            max_batch,
            memory_limit,
            strict,
            force,
            keep_going,
        } => {
            let (scenario, out, resume, backend, checkpoint_every) = match resume {
                Some(dir) => {
                    let ckpt = RunCheckpoint::read(&dir)?;
                    // The checkpoint's backend unless one is named (then it must be the same).
                    let backend = match backend {
                        BackendChoice::Auto => ckpt.backend.parse().map_err(Error::Usage)?,
                        named if backend_name(named) != ckpt.backend => {
                            return Err(Error::Usage(format!(
                                "the checkpoint's run used the {} backend, not {}: resume it \
                                 with --backend {} (or without --backend)",
                                ckpt.backend,
                                backend_name(named),
                                ckpt.backend
                            )));
                        }
                        named => named,
                    };
                    let every = checkpoint_every.or(ckpt.checkpoint_every_s);
                    if !ckpt.scenario_path.exists() {
                        return Err(Error::Usage(format!(
                            "the checkpoint's scenario file {} is gone: it is needed (unchanged) \
                             to continue the run",
                            ckpt.scenario_path.display()
                        )));
                    }
                    let path = ckpt.scenario_path.clone();
                    (path, dir, Some(Box::new(ckpt)), backend, every)
                }
                None => (
                    scenario.expect("clap requires it"),
                    out.expect("clap requires it"),
                    None,
                    backend,
                    checkpoint_every,
                ),
            };
            let loaded = Loaded::from_file(&scenario)?;
            let threads = thread_pool(threads)?;
            let backend = dasim_models::backend::select(backend)?;
            eprintln!("backend: {backend}, {threads} thread(s)");
            let opts = RunOptions {
                backend,
                checkpoint_every,
                interrupt: Some(interrupt_flag()),
                resume,
                out: out.clone(),
                progress: !quiet,
                execution: Execution {
                    threads,
                    max_batch: max_batch.map(|m| m as usize),
                },
                memory_limit: memory_limit.map(|b| b.0),
                force,
            };
            let summary = on_pool(|| run_scenario(&loaded, &opts))?;
            if let Some(t) = &summary.timed_as {
                println!(
                    "proxy: the model trains for real; its steps and messages are timed as {t}"
                );
            }
            for (r, t) in summary.runs.iter().zip(&summary.timings) {
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
                let (measured, initial) = if summary.timing_only {
                    let none = "timing only: no gradient computed, no loss".to_owned();
                    (none.clone(), none)
                } else {
                    (
                        format!("test loss {loss}{accuracy}"),
                        format!("initial test loss {loss}"),
                    )
                };
                let result = match r.stopped {
                    Some(Stopped::Diverged) => format!("DIVERGED: {measured}"),
                    Some(Stopped::NoSteps) => {
                        format!("NO STEP COMPLETED: nothing trained ({initial})")
                    }
                    Some(Stopped::Stalled) => format!("STALLED: {measured}"),
                    None => measured,
                };
                println!(
                    "{:<12} sim {:>8} s  {:>7} steps  {:>8} steps/s(sim)  epochs {:>6}  {result}",
                    r.algorithm,
                    fixed(r.sim_time_s, 3),
                    r.worker_steps,
                    fixed(r.steps_per_sim_s, 1),
                    fixed(r.epochs, 2),
                );
                println!(
                    "{:<12} wall {} s  {} steps/s(wall)  {} sim s/wall s  gradient math {}% of wall",
                    "",
                    fixed(t.wall_time_s, 2),
                    fixed(t.worker_steps_per_wall_s, 0),
                    fixed(t.sim_s_per_wall_s, 3),
                    fixed(100.0 * t.gradient_share, 0)
                );
            }
            let diverged: Vec<&str> = summary
                .runs
                .iter()
                .filter(|r| matches!(r.stopped, Some(Stopped::Diverged | Stopped::Stalled)))
                .filter_map(|r| r.stop_reason.as_deref())
                .collect();
            for r in &summary.runs {
                if let (Some(stopped), Some(reason)) = (r.stopped, &r.stop_reason) {
                    let kept = match stopped {
                        Stopped::Diverged | Stopped::Stalled => {
                            "; its outputs up to that point are kept"
                        }
                        Stopped::NoSteps => "",
                    };
                    eprintln!("warning: {reason}{kept}");
                }
            }
            if !summary.checks.is_empty() {
                println!();
                print!("{}", dasim::check::run_table(&summary.checks));
            }
            println!("results in {}", out.display());
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
                if strict && diverged.is_empty() {
                    return Err(Error::Claims(msg));
                }
                eprintln!("warning: {msg}");
            }
            if !diverged.is_empty() && !keep_going {
                return Err(Error::Diverged(format!(
                    "{} of {} algorithm(s) diverged or stalled (summary.json: \"stopped\": \
                     \"diverged\" or \"stalled\"); --keep-going exits with code 0 nonetheless",
                    diverged.len(),
                    summary.runs.len()
                )));
            }
            Ok(())
        }
        Command::Check {
            scenarios,
            seeds,
            junit,
            backend,
            out,
            quiet,
            threads,
        } => {
            let threads = thread_pool(threads)?;
            let backend = dasim_models::backend::select(backend)?;
            if !quiet {
                eprintln!("backend: {backend}, {threads} thread(s)");
            }
            let opts = dasim::check::CheckOptions {
                scenarios,
                seeds: seeds.map(|s| s.0),
                backend,
                out,
                progress: !quiet,
                execution: Execution {
                    threads,
                    max_batch: None,
                },
            };
            let report = on_pool(|| dasim::check::check(&opts))?;
            print!("{}", report.table());
            if let Some(path) = &junit {
                dasim::check::write_junit(&report, path)?;
            }
            let (total, failed, skipped) = (report.total(), report.failures(), report.skipped());
            let summary = format!(
                "{total} verdicts: {} passed, {failed} failed, {skipped} skipped",
                total - failed - skipped
            );
            println!("{summary}");
            if failed > 0 {
                return Err(Error::Claims(format!(
                    "{failed} of {total} claim verdicts failed"
                )));
            }
            Ok(())
        }
    }
}
