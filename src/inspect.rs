//! `dasim inspect topology`: print a communication graph or a peer schedule.
//!
//! The topology comes from a scenario's `[topology]` section, from flags, or both (flags
//! override the scenario). Static graphs are printed as an edge list or in DOT with their degree
//! and the spectral gap of their Metropolis mixing matrix; time-varying schedules as a CSV
//! `iteration,src,dst` of who sends to whom, with their period and whether the union over one
//! period is strongly connected.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use dasim_sim::ConfigError;
use dasim_sim::env::BuildEnv;
use dasim_sim::net::topology::{Topology, TopologyConfig};

use crate::scenario::Loaded;
use crate::{Error, Result};

/// What to print.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Properties, then the edge list or the schedule.
    #[default]
    Summary,
    /// The edge list `src,dst` (undirected graphs: each edge once, src < dst).
    Edges,
    /// Graphviz DOT (active side of a bipartite graph filled).
    Dot,
    /// The schedule `iteration,src,dst` over `--iters` iterations.
    Schedule,
}

/// Flags of `dasim inspect topology`.
#[derive(Args, Debug, Clone)]
pub struct TopologyArgs {
    /// A scenario whose `[topology]`, worker count and seed to start from.
    pub scenario: Option<PathBuf>,
    /// With a scenario: the graph of the algorithm with this label (its own `topology`, else
    /// the scenario's).
    #[arg(long, requires = "scenario")]
    pub algorithm: Option<String>,
    /// Topology kind (ring, torus, complete, star, hypercube, exponential, random-regular,
    /// erdos-renyi, bipartite, edge-list, one-peer-exponential, two-peer-exponential,
    /// random-peer).
    #[arg(long)]
    pub kind: Option<String>,
    /// Number of workers.
    #[arg(long, short = 'n')]
    pub workers: Option<usize>,
    /// Peers per iteration of SGP's exponential schedule (1 or 2); selects the one-peer or
    /// two-peer schedule when no --kind is given.
    #[arg(long)]
    pub peers: Option<usize>,
    /// Degree of a random regular graph.
    #[arg(long)]
    pub degree: Option<usize>,
    /// Edge probability of an Erdős–Rényi graph.
    #[arg(long)]
    pub p: Option<f64>,
    /// Torus rows.
    #[arg(long)]
    pub rows: Option<usize>,
    /// Torus columns.
    #[arg(long)]
    pub cols: Option<usize>,
    /// Edge-list file.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Iterations of a schedule to print (default: one period, or n for random schedules).
    #[arg(long)]
    pub iters: Option<u64>,
    /// Seed of random graphs and schedules.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

fn flag_error(flag: &str, e: impl std::fmt::Display) -> Error {
    Error::Usage(format!("--{flag}: {e}"))
}

/// Resolves the flags (and scenario) to a topology config, a worker count and a build env.
fn resolve(args: &TopologyArgs) -> Result<(TopologyConfig, usize, BuildEnv)> {
    let (mut cfg, mut workers, mut env) = match &args.scenario {
        Some(path) => {
            let loaded = Loaded::from_file(path)?;
            let s = &loaded.scenario;
            let topology = match &args.algorithm {
                None => &s.topology,
                Some(label) => {
                    let i = s
                        .algorithms
                        .iter()
                        .position(|a| a.label() == *label)
                        .ok_or_else(|| {
                            let labels: Vec<String> =
                                s.algorithms.iter().map(|a| a.label()).collect();
                            flag_error(
                                "algorithm",
                                format!(
                                    "{} has no algorithm labelled `{label}`; it has {}",
                                    path.display(),
                                    labels.join(", ")
                                ),
                            )
                        })?;
                    s.topology_of(i)
                }
            };
            (
                Some(topology.clone()),
                Some(s.cluster.workers),
                loaded.env(),
            )
        }
        None => (None, None, BuildEnv::new(0)),
    };
    if let Some(seed) = args.seed {
        env.seed = seed;
    }
    if let Some(n) = args.workers {
        workers = Some(n);
    }
    let kind = match (&args.kind, args.peers) {
        (Some(k), _) => Some(k.clone()),
        (None, Some(1)) => Some("one-peer-exponential".into()),
        (None, Some(2)) => Some("two-peer-exponential".into()),
        (None, Some(p)) => {
            return Err(flag_error(
                "peers",
                format!("SGP's exponential schedules have 1 or 2 peers, got {p}"),
            ));
        }
        (None, None) => None,
    };
    let has_params = args.degree.is_some()
        || args.p.is_some()
        || args.rows.is_some()
        || args.cols.is_some()
        || args.file.is_some();
    if kind.is_some() || has_params {
        let mut table = toml::Table::new();
        let kind = kind.or_else(|| cfg.as_ref().map(|c| c.kind().to_string()));
        let Some(kind) = kind else {
            return Err(Error::Usage("give a scenario or --kind".into()));
        };
        table.insert("kind".into(), kind.into());
        if let Some(d) = args.degree {
            table.insert("degree".into(), (d as i64).into());
        }
        if let Some(p) = args.p {
            table.insert("p".into(), p.into());
        }
        if let Some(r) = args.rows {
            table.insert("rows".into(), (r as i64).into());
        }
        if let Some(c) = args.cols {
            table.insert("cols".into(), (c as i64).into());
        }
        if let Some(f) = &args.file {
            table.insert("file".into(), f.to_string_lossy().into_owned().into());
        }
        cfg = Some(
            TopologyConfig::deserialize(toml::Value::Table(table))
                .map_err(|e| flag_error("kind", e.to_string().trim_end()))?,
        );
    }
    let cfg = cfg.ok_or_else(|| Error::Usage("give a scenario or --kind".into()))?;
    let workers = workers.ok_or_else(|| Error::Usage("give a scenario or --workers".into()))?;
    if workers < 2 {
        return Err(flag_error(
            "workers",
            format!("at least 2 workers are needed, got {workers}"),
        ));
    }
    Ok((cfg, workers, env))
}

use serde::Deserialize as _;

fn config_error(e: ConfigError) -> Error {
    let mut msg = e.message;
    if let Some(h) = e.hint {
        msg = format!("{msg} (hint: {h})");
    }
    Error::Usage(format!("{}: {msg}", e.path))
}

/// Renders what `dasim inspect topology` prints.
pub fn inspect_topology(args: &TopologyArgs) -> Result<String> {
    let (cfg, n, env) = resolve(args)?;
    let topology = Topology::build(&cfg, n, &env).map_err(config_error)?;
    let schedule = topology.schedule();
    let iters = args
        .iters
        .unwrap_or_else(|| schedule.period().unwrap_or(n as u64));
    let mut out = String::new();
    match args.format {
        Format::Edges => out.push_str(&topology.to_edge_list()),
        Format::Dot => out.push_str(&topology.to_dot()),
        Format::Schedule => out.push_str(&schedule.to_csv(0..iters)),
        Format::Summary => {
            let _ = writeln!(out, "# topology: {} over {n} workers", cfg.kind());
            if topology.is_time_varying() {
                match schedule.period() {
                    Some(p) => {
                        let _ = writeln!(
                            out,
                            "# time-varying directed schedule, period {p} iterations"
                        );
                    }
                    None => {
                        let _ =
                            writeln!(out, "# time-varying directed schedule, random (no period)");
                    }
                }
                let _ = writeln!(
                    out,
                    "# strongly connected over a period: {}",
                    if schedule.is_strongly_connected() {
                        "yes"
                    } else {
                        "no"
                    }
                );
                out.push_str(&schedule.to_csv(0..iters));
            } else {
                let d = topology.degree_stats();
                let _ = writeln!(
                    out,
                    "# degree: min {} / mean {} / max {}",
                    d.min,
                    crate::outputs::fixed(d.mean, 2),
                    d.max
                );
                let _ = writeln!(
                    out,
                    "# connected: {}",
                    if topology.is_connected() { "yes" } else { "no" }
                );
                let _ = writeln!(
                    out,
                    "# spectral gap of the Metropolis mixing matrix: {}",
                    crate::outputs::fixed(topology.spectral_gap(), 6)
                );
                let lambda = topology.smallest_mixing_eigenvalue();
                let _ = writeln!(
                    out,
                    "# smallest eigenvalue of the Metropolis mixing matrix: {} ({})",
                    crate::outputs::fixed(lambda, 6),
                    if dasim_sim::algorithms::exact_diffusion::d2_accepts(lambda) {
                        "above -1/3: D² accepts it"
                    } else {
                        "at or below -1/3: D² refuses it, exact diffusion runs"
                    }
                );
                let _ = writeln!(
                    out,
                    "# bipartite: {}",
                    if topology.bipartition().is_some() {
                        "yes"
                    } else {
                        "no"
                    }
                );
                out.push_str(&topology.to_edge_list());
            }
        }
    }
    Ok(out)
}
