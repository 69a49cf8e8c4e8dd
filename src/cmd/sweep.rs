//! `dasim sweep`: run a scenario's [sweep] points in parallel, emit them as cluster jobs, or
//! merge their results.

use std::path::PathBuf;

use clap::Subcommand;

use dasim::Error;
use dasim_models::BackendChoice;

use super::LaunchArgs;

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
// A sweep's points run on one thread each unless told otherwise.
#[command(mut_arg("threads", |a| a
    .help("Threads of each point's run. Results do not depend on it.")
    .default_value("1")
    .value_parser(clap::builder::RangedU64ValueParser::<usize>::new().range(1..))))]
pub struct SweepCmd {
    #[command(subcommand)]
    pub action: Option<SweepAction>,
    /// The scenario file, with a [sweep] table.
    #[arg(required = true)]
    pub scenario: Option<PathBuf>,
    /// The sweep directory: sweep.json and one run directory per point under points/.
    #[arg(long, short, required = true)]
    pub out: Option<PathBuf>,
    /// Points run at once (default: the cores divided by --threads).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub jobs: Option<u64>,
    /// Run only slice I of N (I from 1 to N): point i, from 0, belongs to slice i mod N + 1.
    #[arg(long)]
    pub shard: Option<dasim::sweep::Shard>,
    #[command(flatten)]
    pub launch: LaunchArgs,
    /// Write OUT/sweep.sbatch, a Slurm array script whose task $SLURM_ARRAY_TASK_ID runs its
    /// shard, instead of running.
    #[arg(long, conflicts_with_all = ["emit_k8s", "shard"], help_heading = "Cluster jobs")]
    pub emit_slurm: bool,
    /// Write OUT/sweep-job.yaml, a Kubernetes indexed Job whose completion index
    /// $JOB_COMPLETION_INDEX runs its shard, instead of running.
    #[arg(long, conflicts_with = "shard", help_heading = "Cluster jobs")]
    pub emit_k8s: bool,
    /// Array tasks (default: one per point).
    #[arg(long, help_heading = "Cluster jobs")]
    pub shards: Option<usize>,
    /// Slurm partition.
    #[arg(long, help_heading = "Cluster jobs")]
    pub partition: Option<String>,
    /// Slurm time limit of a task (e.g. 02:00:00).
    #[arg(long, help_heading = "Cluster jobs")]
    pub time: Option<String>,
    /// CPUs per task (default: --jobs × --threads).
    #[arg(long, help_heading = "Cluster jobs")]
    pub cpus_per_task: Option<usize>,
    /// GPUs per task (default: none).
    #[arg(long, help_heading = "Cluster jobs")]
    pub gpus_per_task: Option<usize>,
    /// Tasks running at once (default: no limit).
    #[arg(long, help_heading = "Cluster jobs")]
    pub array_parallelism: Option<usize>,
    /// Kubernetes: the container image with dasim on its PATH (default dasim:latest).
    #[arg(long, help_heading = "Cluster jobs")]
    pub image: Option<String>,
    /// Kubernetes: the persistent volume claim holding the scenario and OUT (default
    /// dasim-sweep), mounted as the working directory.
    #[arg(long, help_heading = "Cluster jobs")]
    pub pvc: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum SweepAction {
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

/// Runs, emits or merges a sweep, or runs one of its points.
pub fn sweep(cmd: SweepCmd) -> dasim::Result<()> {
    match cmd.action {
        Some(SweepAction::Merge { dir, metric, x }) => merge(dir, metric, x),
        Some(SweepAction::Point {
            scenario,
            name,
            out,
            backend,
            threads,
            watch_parent,
        }) => point(scenario, name, out, backend, threads, watch_parent),
        None => run_or_emit(cmd),
    }
}

/// `dasim sweep merge`: merges the sweep directory `dir` and says what it found; fails when
/// a point has no results.
fn merge(dir: PathBuf, metric: Vec<String>, x: Vec<String>) -> dasim::Result<()> {
    use dasim::sweep::MergeOptions;
    let report = dasim::sweep::merge(&dir, &MergeOptions { metrics: metric, x })?;
    println!(
        "{} of {} points complete: {} rows in {}, {} plot files in {}, the page in {}",
        report.complete,
        report.points,
        report.rows,
        report.csv.display(),
        report.plots.len(),
        dir.join(dasim::sweep::merge::PLOTS).display(),
        report.report.display()
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

/// `dasim sweep point`: runs the point `name` of the sweep of `scenario` into `out`.
fn point(
    scenario: PathBuf,
    name: String,
    out: PathBuf,
    backend: BackendChoice,
    threads: Option<usize>,
    watch_parent: bool,
) -> dasim::Result<()> {
    if watch_parent {
        dasim::sweep::exec::exit_with_parent();
    }
    dasim::sweep::run_point(&scenario, &name, &out, backend, threads)
}

/// `dasim sweep SCENARIO --out DIR`: runs the points, or with `--emit-slurm` or
/// `--emit-k8s` writes them as cluster jobs instead.
fn run_or_emit(cmd: SweepCmd) -> dasim::Result<()> {
    use dasim::sweep::{JobKind, SweepOptions};
    let (Some(scenario), Some(out)) = (cmd.scenario, cmd.out) else {
        unreachable!("clap requires both without a subcommand");
    };
    let opts = SweepOptions {
        scenario,
        out,
        jobs: cmd.jobs.map(|j| j as usize),
        threads: cmd.launch.threads.expect("it has a default"),
        shard: cmd.shard,
        backend: cmd.launch.backend,
        progress: !cmd.launch.quiet,
    };
    let kind = match (cmd.emit_slurm, cmd.emit_k8s) {
        (true, _) => Some(JobKind::Slurm),
        (_, true) => Some(JobKind::Kubernetes),
        _ => None,
    };
    let Some(kind) = kind else {
        return run_points(&opts);
    };
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
    Ok(())
}

/// Runs the points of the sweep `opts` not complete already and says how it went; fails
/// when a point failed.
fn run_points(opts: &dasim::sweep::SweepOptions) -> dasim::Result<()> {
    let report = dasim::sweep::run_sweep(opts)?;
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
