//! Communication graphs, built with petgraph.
//!
//! A [`Topology`] is an undirected graph over the workers `0..n`, plus the [`PeerSchedule`] that
//! says who sends to whom at each iteration. Algorithms ask it for a worker's neighbours (sorted,
//! so iteration order is deterministic), for its connected components, for a bipartition
//! (AD-PSGD's active/passive split), or for its schedule (SGP's time-varying directed peers).
//!
//! ## Kinds (`[topology] kind = …`)
//!
//! Static, undirected (the schedule sends to every neighbour at every iteration):
//!
//! | `kind` | keys | edges |
//! |--------|------|-------|
//! | `ring` | | `i — (i+1) mod n` |
//! | `complete` | | every pair |
//! | `star` | | `0 — i` for every `i ≥ 1` |
//! | `hypercube` | | `i — i xor 2^m`; `n` a power of two |
//! | `torus` | `rows`, `cols` | `(r,c) — (r, c+1 mod cols)`, `(r,c) — (r+1 mod rows, c)`; `rows·cols = n` |
//! | `exponential` | | `i — (i + 2^m) mod n` for `m = 0 … ⌈log2 n⌉ − 1` (the static exponential graph of Ying et al., NeurIPS 2021, undirected) |
//! | `random-regular` | `degree` | a random `degree`-regular graph (`n·degree` even), by the pairing algorithm of Steger & Wormald (1999) with restarts: asymptotically uniform |
//! | `erdos-renyi` | `p` | each pair independently with probability `p`, pairs in order `(0,1), (0,2), …, (n−2, n−1)` |
//! | `bipartite` | `active` (a worker set; default the even workers) | every active worker — every passive one (complete bipartite); `bipartition` returns this split |
//! | `edge-list` | `file` | the undirected edges listed in a file: one `i,j` (or `i j`) per line, `#` comments, an optional header line |
//!
//! Time-varying, directed (see [`crate::net::schedule`]); the undirected graph is the union of the
//! schedule's edges over one period (every pair for `random-peer`):
//!
//! | `kind` | schedule |
//! |--------|----------|
//! | `one-peer-exponential` | SGP, one peer: `i → (i + 2^(k mod τ)) mod n` |
//! | `two-peer-exponential` | SGP, two peers per iteration |
//! | `random-peer` | one uniformly random peer per node and iteration |
//!
//! Random graphs draw from the topology stream ([`crate::clock::rng::StreamKind::Topology`], id 0), so a
//! scenario's graph depends on its seed and `n` only.
//!
//! ## Validation
//!
//! [`Topology::build`] fails with a [`ConfigError`] when the graph is disconnected (naming the
//! components) or a time-varying schedule is not strongly connected over a period: every
//! decentralized algorithm needs it, and a disconnected graph is almost always a mistake.
//!
//! ## Mixing
//!
//! [`Topology::mixing_matrix`] uses Metropolis–Hastings weights,
//! `W_ij = 1 / (1 + max(d_i, d_j))` for each edge and `W_ii = 1 − Σ_j W_ij`: symmetric and doubly
//! stochastic on every graph, and equal to the uniform `(I + A)/(d + 1)` on a `d`-regular one.
//! [`Topology::spectral_gap`] is `1 − max(|λ₂|, |λ_n|)` of that matrix: 1 on the complete graph,
//! `1 − (1 + 2cos(2π/n))/3` on a ring of `n ≥ 4`, 0 on a disconnected graph.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use petgraph::graph::{NodeIndex, UnGraph};
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::clock::rng::{Stream, StreamKind, stream};
use crate::cluster::workerset::WorkerSet;
use crate::env::BuildEnv;
use crate::error::ConfigError;
use crate::net::schedule::PeerSchedule;
use crate::net::spectral::symmetric_eigenvalues;

/// The `[topology]` section of a scenario.
///
/// Kinds without keys are empty struct variants (`Ring {}`), not unit variants: serde ignores
/// unknown keys beside the tag of a unit variant, so `kind = "ring"` with a misspelt key would
/// pass silently.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum TopologyConfig {
    /// `i — (i+1) mod n`.
    Ring {},
    /// Every pair connected.
    Complete {},
    /// Worker 0 is the hub, connected to every other.
    Star {},
    /// `i — i xor 2^k`; `n` must be a power of two.
    Hypercube {},
    /// A 2-D torus of `rows × cols = n` workers; each connects to its four grid neighbours.
    Torus {
        /// Number of rows.
        rows: usize,
        /// Number of columns.
        cols: usize,
    },
    /// The static exponential graph: `i — (i + 2^m) mod n`.
    Exponential {},
    /// A random regular graph.
    RandomRegular {
        /// Every worker's degree (`n · degree` even, `degree < n`).
        degree: usize,
    },
    /// An Erdős–Rényi graph `G(n, p)`.
    ErdosRenyi {
        /// Probability of each edge, in `(0, 1]`.
        p: f64,
    },
    /// A complete bipartite graph between an active and a passive side.
    Bipartite {
        /// The active side (default: the even workers).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        active: Option<WorkerSet>,
    },
    /// Undirected edges from a file.
    EdgeList {
        /// The file, relative to the scenario file's directory.
        file: PathBuf,
    },
    /// SGP's one-peer time-varying directed exponential schedule.
    OnePeerExponential {},
    /// SGP's two-peer time-varying directed exponential schedule.
    TwoPeerExponential {},
    /// The exponential graph of SGP's reference implementation: peers `2^i` hops ahead and
    /// behind, `peers` of them per iteration in turn.
    BidirectionalExponential {
        /// Peers per iteration (default 1); before the first entry of `peers_schedule`.
        #[serde(default = "one")]
        peers: usize,
        /// The reference's `--ppi_schedule`: `[epoch, peers]` pairs, epochs increasing; from
        /// epoch `e` of training on (a node's iteration `k` with `k · batch · n ≥ e ·
        /// train_size`), `peers` per iteration, the rotation through the phone book restarting at
        /// its first entry. Empty (default): `peers` throughout.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        peers_schedule: Vec<(u64, usize)>,
    },
    /// AD-PSGD's bipartite exponential graph (its reference's `DynamicBipartiteExponentialGraph`):
    /// the even workers are passive, each odd worker is linked to the workers `1` and
    /// `1 + 2^i` hops ahead and behind; `n` must be even.
    BipartiteExponential {},
    /// One random peer per node and iteration.
    RandomPeer {},
}

fn one() -> usize {
    1
}

impl Default for TopologyConfig {
    fn default() -> Self {
        TopologyConfig::Ring {}
    }
}

impl TopologyConfig {
    /// Whether this is a time-varying schedule (its peers change with the iteration), which has
    /// no single mixing matrix: SGP's one- and two-peer exponential schedules, the reference's
    /// bidirectional exponential graph, and the random peer. The one list of them.
    pub fn is_time_varying(&self) -> bool {
        matches!(
            self,
            TopologyConfig::OnePeerExponential {}
                | TopologyConfig::TwoPeerExponential {}
                | TopologyConfig::BidirectionalExponential { .. }
                | TopologyConfig::RandomPeer {}
        )
    }

    /// The `kind` tag.
    pub fn kind(&self) -> &'static str {
        match self {
            TopologyConfig::Ring {} => "ring",
            TopologyConfig::Complete {} => "complete",
            TopologyConfig::Star {} => "star",
            TopologyConfig::Hypercube {} => "hypercube",
            TopologyConfig::Torus { .. } => "torus",
            TopologyConfig::Exponential {} => "exponential",
            TopologyConfig::RandomRegular { .. } => "random-regular",
            TopologyConfig::ErdosRenyi { .. } => "erdos-renyi",
            TopologyConfig::Bipartite { .. } => "bipartite",
            TopologyConfig::EdgeList { .. } => "edge-list",
            TopologyConfig::OnePeerExponential {} => "one-peer-exponential",
            TopologyConfig::TwoPeerExponential {} => "two-peer-exponential",
            TopologyConfig::BidirectionalExponential { .. } => "bidirectional-exponential",
            TopologyConfig::BipartiteExponential {} => "bipartite-exponential",
            TopologyConfig::RandomPeer {} => "random-peer",
        }
    }
}

/// Minimum, maximum and mean degree.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DegreeStats {
    /// Smallest degree.
    pub min: usize,
    /// Largest degree.
    pub max: usize,
    /// Mean degree.
    pub mean: f64,
}

/// An undirected communication graph over the workers, with its peer schedule.
#[derive(Clone, Debug)]
pub struct Topology {
    graph: UnGraph<(), ()>,
    neighbors: Vec<Vec<usize>>,
    sides: Option<Vec<bool>>,
    schedule: PeerSchedule,
    /// `(epoch, peers per iteration)` changes of the schedule over training.
    peer_phases: Vec<(u64, usize)>,
}

/// Checks a `peers_schedule`: epochs strictly increasing, each count in `1..=book_len`.
fn check_peers_schedule(phases: &[(u64, usize)], book_len: usize) -> Result<(), ConfigError> {
    for (i, &(epoch, peers)) in phases.iter().enumerate() {
        let at = format!("topology.peers_schedule[{i}]");
        if peers == 0 || peers > book_len {
            return Err(ConfigError::new(
                &at,
                format!(
                    "{peers} peers per iteration: must be between 1 and the phone book's length, {book_len}"
                ),
            )
            .hint("each entry is [epoch, peers]"));
        }
        if i > 0 && epoch <= phases[i - 1].0 {
            return Err(ConfigError::new(
                &at,
                format!(
                    "epoch {epoch} does not come after the previous entry's epoch {}",
                    phases[i - 1].0
                ),
            )
            .hint("list the [epoch, peers] entries by increasing epoch"));
        }
    }
    Ok(())
}

/// `{0, 1, 2} and {3, 4}`, shortened when long.
fn describe_sets(sets: &[Vec<usize>]) -> String {
    const SETS: usize = 8;
    const MEMBERS: usize = 12;
    let mut parts: Vec<String> = sets
        .iter()
        .take(SETS)
        .map(|c| {
            let mut items: Vec<String> = c.iter().take(MEMBERS).map(usize::to_string).collect();
            if c.len() > MEMBERS {
                items.push(format!("… ({} nodes)", c.len()));
            }
            format!("{{{}}}", items.join(", "))
        })
        .collect();
    if sets.len() > SETS {
        parts.push(format!("{} more", sets.len() - SETS));
    }
    match parts.len() {
        0 | 1 => parts.concat(),
        _ => {
            let last = parts.pop().expect("two or more");
            format!("{} and {last}", parts.join(", "))
        }
    }
}

/// Parses an edge list: `i,j` or `i j` per line, `#` comments, an optional header line.
fn parse_edges(text: &str, n: usize) -> Result<Vec<(usize, usize)>, String> {
    let mut edges = Vec::new();
    let mut first = true;
    for (no, line) in text.lines().enumerate() {
        let no = no + 1;
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|f| !f.is_empty())
            .collect();
        let parsed: Option<Vec<usize>> = fields.iter().map(|f| f.parse().ok()).collect();
        match parsed {
            Some(v) if v.len() == 2 => {
                let (a, b) = (v[0], v[1]);
                if let Some(bad) = [a, b].into_iter().find(|&x| x >= n) {
                    return Err(format!(
                        "line {no}: node {bad} is out of range: the cluster has {n} workers (0..={})",
                        n.saturating_sub(1)
                    ));
                }
                if a == b {
                    return Err(format!("line {no}: a self-loop {a} — {a}"));
                }
                edges.push((a, b));
            }
            None if first && fields.iter().any(|f| f.parse::<f64>().is_err()) => {}
            _ => {
                return Err(format!(
                    "line {no}: expected two node indices, got `{line}`"
                ));
            }
        }
        first = false;
    }
    if edges.is_empty() {
        return Err("the file lists no edge".into());
    }
    Ok(edges)
}

/// A random `d`-regular graph by Steger–Wormald pairing with restarts.
fn random_regular(n: usize, d: usize, rng: &mut Stream) -> Option<Vec<(usize, usize)>> {
    'attempt: for _ in 0..1000 {
        let mut points: Vec<usize> = (0..n).flat_map(|v| std::iter::repeat_n(v, d)).collect();
        let mut adj = vec![Vec::<usize>::with_capacity(d); n];
        let mut edges = Vec::with_capacity(n * d / 2);
        while !points.is_empty() {
            let len = points.len();
            let mut paired = false;
            for _ in 0..(4 * len + 64) {
                let (i, j) = (rng.random_range(0..len), rng.random_range(0..len));
                let (u, v) = (points[i], points[j]);
                if i == j || u == v || adj[u].contains(&v) {
                    continue;
                }
                adj[u].push(v);
                adj[v].push(u);
                edges.push((u.min(v), u.max(v)));
                points.swap_remove(i.max(j));
                points.swap_remove(i.min(j));
                paired = true;
                break;
            }
            if !paired {
                continue 'attempt;
            }
        }
        return Some(edges);
    }
    None
}

/// Refuses a graph of `cfg` on `n` workers that is too large to build: a complete graph or
/// random-peer union beyond [`MAX_EDGES`] edges, an Erdős–Rényi graph beyond [`MAX_PAIR_DRAWS`]
/// pair draws. (The bipartite graph's count is checked once its sides are known.)
fn check_size(cfg: &TopologyConfig, n: usize) -> Result<(), ConfigError> {
    let pairs = n as u128 * (n as u128).saturating_sub(1) / 2;
    match cfg {
        TopologyConfig::Complete {} | TopologyConfig::RandomPeer {} => {
            edge_budget(pairs, cfg, n, "topology.kind")
        }
        // One draw per pair, whatever p.
        TopologyConfig::ErdosRenyi { .. } if pairs > MAX_PAIR_DRAWS => Err(ConfigError::new(
            "topology.kind",
            format!(
                "an Erdős–Rényi graph on {n} workers draws {pairs} pairs, more than {MAX_PAIR_DRAWS}"
            ),
        )
        .hint("use a random regular graph (kind = \"random-regular\") at this size")),
        _ => Ok(()),
    }
}

/// A bipartite graph's edges, with each worker's side (`true`: active).
type SidedEdges = (Vec<(usize, usize)>, Vec<bool>);

/// Every pair of `0..n`.
fn complete_edges(n: usize) -> Vec<(usize, usize)> {
    let mut edges = Vec::new();
    for i in 0..n {
        edges.extend((i + 1..n).map(|j| (i, j)));
    }
    edges
}

/// The hypercube's edges `i — i xor 2^m`; `n` must be a power of two.
fn hypercube_edges(n: usize) -> Result<Vec<(usize, usize)>, ConfigError> {
    if !n.is_power_of_two() {
        return Err(ConfigError::new(
            "topology.kind",
            format!("a hypercube needs a power-of-two number of workers, got {n}"),
        )
        .hint("use 8, 16, 32, … workers, or another topology"));
    }
    let mut edges = Vec::new();
    for i in 0..n {
        let mut bit = 1;
        while bit < n {
            if i < i ^ bit {
                edges.push((i, i ^ bit));
            }
            bit <<= 1;
        }
    }
    Ok(edges)
}

/// The edges of a `rows × cols` torus, which must have `n` nodes.
fn torus_edges(rows: usize, cols: usize, n: usize) -> Result<Vec<(usize, usize)>, ConfigError> {
    if rows * cols != n || rows == 0 || cols == 0 {
        return Err(ConfigError::new(
            "topology.rows",
            format!(
                "a {rows}×{cols} torus has {} nodes, but the cluster has {n} workers",
                rows * cols
            ),
        )
        .hint("rows × cols must equal cluster.workers"));
    }
    let mut edges = Vec::new();
    for r in 0..rows {
        for c in 0..cols {
            let i = r * cols + c;
            edges.push((i, r * cols + (c + 1) % cols));
            edges.push((i, ((r + 1) % rows) * cols + c));
        }
    }
    Ok(edges)
}

/// The static exponential graph's edges `i — (i + 2^m) mod n`.
fn exponential_edges(n: usize) -> Vec<(usize, usize)> {
    let mut edges = Vec::new();
    let mut step = 1;
    while step < n {
        edges.extend((0..n).map(|i| (i, (i + step) % n)));
        step <<= 1;
    }
    edges
}

/// A random `degree`-regular graph on `n` workers, drawn from the topology stream of `seed`.
fn random_regular_edges(
    n: usize,
    degree: usize,
    seed: u64,
) -> Result<Vec<(usize, usize)>, ConfigError> {
    let blame = "topology.degree";
    if degree == 0 || degree >= n || (n * degree) % 2 == 1 {
        return Err(ConfigError::new(
            blame,
            format!("no {degree}-regular graph on {n} workers exists"),
        )
        .hint(format!(
            "degree must be between 1 and {} and n·degree even; degree ≥ 3 is connected with high probability",
            n.saturating_sub(1)
        )));
    }
    random_regular(n, degree, &mut stream(seed, StreamKind::Topology, 0)).ok_or_else(|| {
        ConfigError::new(
            blame,
            format!("could not draw a {degree}-regular graph on {n} workers"),
        )
        .hint("lower the degree, or use kind = \"complete\"")
    })
}

/// An Erdős–Rényi graph `G(n, p)`: one draw from the topology stream of `seed` per pair, in
/// order.
fn erdos_renyi_edges(n: usize, p: f64, seed: u64) -> Result<Vec<(usize, usize)>, ConfigError> {
    if !(p.is_finite() && p > 0.0 && p <= 1.0) {
        return Err(ConfigError::new(
            "topology.p",
            format!("an edge probability must be in (0, 1], got {p}"),
        )
        .hint(threshold_hint(n)));
    }
    let mut edges = Vec::new();
    let mut rng = stream(seed, StreamKind::Topology, 0);
    for i in 0..n {
        for j in i + 1..n {
            if rng.random_bool(p) {
                edges.push((i, j));
            }
        }
    }
    Ok(edges)
}

/// The complete bipartite graph between the `active` workers (default: the even ones) and the
/// others, with each worker's side (`true`: active).
fn bipartite_edges(
    cfg: &TopologyConfig,
    active: Option<&WorkerSet>,
    n: usize,
    seed: u64,
) -> Result<SidedEdges, ConfigError> {
    let blame = "topology.active";
    let active = match active {
        Some(set) => set.resolve(n, seed, blame)?,
        None => (0..n).step_by(2).collect(),
    };
    let mut side = vec![false; n];
    for &a in &active {
        side[a] = true;
    }
    if active.len() == n {
        return Err(
            ConfigError::new(blame, "every worker is active: the passive side is empty")
                .hint("leave some workers out of `active`"),
        );
    }
    let active_count = side.iter().filter(|&&s| s).count() as u128;
    edge_budget(active_count * (n as u128 - active_count), cfg, n, blame)?;
    let passive: Vec<usize> = (0..n).filter(|&b| !side[b]).collect();
    let mut edges = Vec::new();
    for a in (0..n).filter(|&a| side[a]) {
        edges.extend(passive.iter().map(|&b| (a, b)));
    }
    Ok((edges, side))
}

/// AD-PSGD's bipartite exponential graph on an even `n`, with each worker's side (`true`:
/// active, the odd workers).
fn bipartite_exponential_edges(n: usize) -> Result<SidedEdges, ConfigError> {
    if n % 2 == 1 {
        return Err(ConfigError::new(
            "topology.kind",
            format!(
                "the bipartite exponential graph needs an even number of workers (odd ones active, even ones passive), got {n}"
            ),
        ));
    }
    // The reference's phone book of an active (odd) rank: 1 and 1 + 2^i hops ahead
    // and behind, for i = 1 ..= floor(log2(n - 1)); every offset is odd, so every
    // peer is passive.
    let mut offsets = vec![1usize];
    let mut m = 1;
    while m < usize::BITS && (1usize << m) < n {
        offsets.push(1 + (1usize << m));
        m += 1;
    }
    let mut edges = Vec::new();
    for a in (1..n).step_by(2) {
        for &d in &offsets {
            edges.push((a, (a + d) % n));
            edges.push((a, (a + n - d % n) % n));
        }
    }
    Ok((edges, (0..n).map(|i| i % 2 == 1).collect()))
}

/// The edges listed in the file at `path` (already resolved), over `n` workers.
fn edge_list_edges(path: &Path, n: usize) -> Result<Vec<(usize, usize)>, ConfigError> {
    let blame = "topology.file";
    let hint = "one edge `i,j` (or `i j`) per line, `#` comments, an optional header; a relative path is resolved against the scenario file's directory";
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError::new(
            blame,
            format!("cannot read the edge list {}: {e}", path.display()),
        )
        .hint(hint)
    })?;
    parse_edges(&text, n).map_err(|m| {
        ConfigError::new(blame, format!("edge list {}: {m}", path.display())).hint(hint)
    })
}

/// The reference's bidirectional exponential schedule with `peers` per iteration, its
/// `peers_schedule` checked and every phase strongly connected over a period.
fn bidirectional_schedule(
    n: usize,
    peers: usize,
    peers_schedule: &[(u64, usize)],
) -> Result<PeerSchedule, ConfigError> {
    if peers == 0 {
        return Err(ConfigError::new(
            "topology.peers",
            "peers must be at least 1",
        ));
    }
    let s = PeerSchedule::bidirectional_exponential(n, peers);
    check_peers_schedule(peers_schedule, s.book_len().unwrap_or(0))?;
    for &(_, p) in peers_schedule {
        let comps = s
            .phase_schedule(p)
            .strong_components(s.phase_schedule(p).check_window());
        if comps.len() > 1 {
            return Err(ConfigError::new(
                "topology.peers_schedule",
                format!(
                    "the bidirectional-exponential schedule on {n} workers with {p} peers per iteration is not strongly connected over a period: components {}",
                    describe_sets(&comps)
                ),
            ));
        }
    }
    Ok(s)
}

impl Topology {
    /// Builds the graph of `cfg` over `n` workers. Random graphs draw from the topology stream of
    /// [`BuildEnv::seed`]; an edge-list file is read relative to [`BuildEnv::base_dir`]. Fails
    /// when a value is invalid, or when the graph is disconnected (a schedule: not strongly
    /// connected over a period), naming the components.
    pub fn build(cfg: &TopologyConfig, n: usize, env: &BuildEnv) -> Result<Self, ConfigError> {
        check_size(cfg, n)?;
        let mut sides = None;
        let edges = match cfg {
            TopologyConfig::Ring {} => (0..n).map(|i| (i, (i + 1) % n)).collect(),
            TopologyConfig::Complete {} => complete_edges(n),
            TopologyConfig::Star {} => (1..n).map(|i| (0, i)).collect(),
            TopologyConfig::Hypercube {} => hypercube_edges(n)?,
            &TopologyConfig::Torus { rows, cols } => torus_edges(rows, cols, n)?,
            TopologyConfig::Exponential {} => exponential_edges(n),
            &TopologyConfig::RandomRegular { degree } => random_regular_edges(n, degree, env.seed)?,
            &TopologyConfig::ErdosRenyi { p } => erdos_renyi_edges(n, p, env.seed)?,
            TopologyConfig::Bipartite { active } => {
                let (edges, side) = bipartite_edges(cfg, active.as_ref(), n, env.seed)?;
                sides = Some(side);
                edges
            }
            TopologyConfig::BipartiteExponential {} => {
                let (edges, side) = bipartite_exponential_edges(n)?;
                sides = Some(side);
                edges
            }
            TopologyConfig::EdgeList { file } => edge_list_edges(&env.resolve(file), n)?,
            TopologyConfig::OnePeerExponential {}
            | TopologyConfig::TwoPeerExponential {}
            | TopologyConfig::BidirectionalExponential { .. }
            | TopologyConfig::RandomPeer {} => return Self::scheduled(cfg, n, env.seed),
        };
        let mut t = Self::from_edges(n, edges);
        t.sides = sides;
        t.require_connected(cfg, n)
    }

    /// The topology of a time-varying schedule: the schedule of `cfg`, checked strongly
    /// connected over a period, over the union of its edges (every pair for `random-peer`).
    fn scheduled(cfg: &TopologyConfig, n: usize, seed: u64) -> Result<Self, ConfigError> {
        // `peers_schedule` of a bidirectional exponential schedule, in epochs.
        let mut peer_phases: Vec<(u64, usize)> = Vec::new();
        let schedule = match *cfg {
            TopologyConfig::OnePeerExponential {} => PeerSchedule::one_peer_exponential(n),
            TopologyConfig::TwoPeerExponential {} => PeerSchedule::two_peer_exponential(n),
            TopologyConfig::BidirectionalExponential {
                peers,
                ref peers_schedule,
            } => {
                let s = bidirectional_schedule(n, peers, peers_schedule)?;
                peer_phases.clone_from(peers_schedule);
                s
            }
            _ => PeerSchedule::random_peer(n, seed),
        };
        if schedule.period().is_some() {
            let comps = schedule.strong_components(schedule.check_window());
            if comps.len() > 1 {
                return Err(ConfigError::new(
                    "topology.kind",
                    format!(
                        "the {} schedule on {n} workers is not strongly connected over a period: components {}",
                        cfg.kind(),
                        describe_sets(&comps)
                    ),
                )
                .hint("use more workers, or another topology"));
            }
        }
        let union = match schedule.period() {
            Some(p) => schedule.union_edges(0..p),
            None => (0..n)
                .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
                .collect(),
        };
        let mut t = Self::from_edges(n, union);
        t.schedule = schedule;
        t.peer_phases = peer_phases;
        Ok(t)
    }

    /// `self`, or an error naming the components when the static graph of `cfg` is
    /// disconnected, blaming the key whose value made the graph what it is.
    fn require_connected(self, cfg: &TopologyConfig, n: usize) -> Result<Self, ConfigError> {
        if self.is_connected() {
            return Ok(self);
        }
        let blame = match cfg {
            TopologyConfig::RandomRegular { .. } => "topology.degree",
            TopologyConfig::ErdosRenyi { .. } => "topology.p",
            TopologyConfig::Bipartite { .. } => "topology.active",
            TopologyConfig::EdgeList { .. } => "topology.file",
            _ => "topology.kind",
        };
        let e = ConfigError::new(
            blame,
            format!(
                "the {} graph on {n} workers is disconnected: components {}",
                cfg.kind(),
                describe_sets(&self.components())
            ),
        );
        Err(match cfg {
            TopologyConfig::ErdosRenyi { .. } => e.hint(threshold_hint(n)),
            TopologyConfig::RandomRegular { .. } => {
                e.hint("a random regular graph of degree ≥ 3 is connected with high probability; or change the seed")
            }
            _ => e.hint("every worker must be able to reach every other; add the missing edges"),
        })
    }

    /// A graph over `n` nodes from an edge list; self-loops and duplicate edges are dropped.
    /// Callers bound the edges ([`MAX_EDGES`]).
    /// Its schedule sends to every neighbour at every iteration.
    pub fn from_edges(n: usize, edges: impl IntoIterator<Item = (usize, usize)>) -> Self {
        // Sorted and deduplicated as pairs: O(E log E), where testing each list for the edge
        // was quadratic in the degree (a star's hub, a complete graph).
        let mut pairs: Vec<(usize, usize)> = edges
            .into_iter()
            .filter(|(a, b)| a != b)
            .map(|(a, b)| (a.min(b), a.max(b)))
            .collect();
        pairs.sort_unstable();
        pairs.dedup();
        let mut neighbors = vec![Vec::new(); n];
        for &(a, b) in &pairs {
            neighbors[a].push(b);
            neighbors[b].push(a);
        }
        for list in &mut neighbors {
            list.sort_unstable();
        }
        let mut graph = UnGraph::with_capacity(n, 0);
        for _ in 0..n {
            graph.add_node(());
        }
        for (a, list) in neighbors.iter().enumerate() {
            for &b in list.iter().filter(|&&b| b > a) {
                graph.add_edge(NodeIndex::new(a), NodeIndex::new(b), ());
            }
        }
        let schedule = PeerSchedule::fixed(neighbors.clone());
        Topology {
            graph,
            neighbors,
            sides: None,
            schedule,
            peer_phases: Vec::new(),
        }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.neighbors.len()
    }

    /// Whether the graph has no node.
    pub fn is_empty(&self) -> bool {
        self.neighbors.is_empty()
    }

    /// The neighbours of `i`, in increasing order.
    pub fn neighbors(&self, i: usize) -> &[usize] {
        &self.neighbors[i]
    }

    /// Who sends to whom at each iteration (for a static graph: every neighbour, always).
    pub fn schedule(&self) -> &PeerSchedule {
        &self.schedule
    }

    /// The `(epoch, peers per iteration)` changes of the schedule over training
    /// (`peers_schedule`; empty: none).
    pub fn peer_phases(&self) -> &[(u64, usize)] {
        &self.peer_phases
    }

    /// The schedule a training run follows: [`Topology::schedule`] with the
    /// [`Topology::peer_phases`] placed at iterations. Epoch `e` begins at a node's first
    /// iteration `k` with `k · batch_size · n ≥ e · train_size` (the node has then processed `e`
    /// epochs of its equal share of the training set), in integers.
    pub fn training_schedule(&self, batch_size: usize, train_size: usize) -> PeerSchedule {
        if self.peer_phases.is_empty() {
            return self.schedule.clone();
        }
        let per_iter = (batch_size as u128 * self.len() as u128).max(1);
        let phases: Vec<(u64, usize)> = self
            .peer_phases
            .iter()
            .map(|&(e, p)| {
                let k = (u128::from(e) * train_size as u128).div_ceil(per_iter);
                (u64::try_from(k).unwrap_or(u64::MAX), p)
            })
            .collect();
        self.schedule.with_phases(&phases)
    }

    /// Whether the topology is a time-varying schedule (its graph is then the union of the
    /// schedule's edges over a period).
    pub fn is_time_varying(&self) -> bool {
        self.schedule.is_time_varying()
    }

    /// The connected components, each sorted, ordered by their smallest node.
    pub fn components(&self) -> Vec<Vec<usize>> {
        crate::net::schedule::strong_components(&self.graph)
    }

    /// Whether every node can reach every other.
    pub fn is_connected(&self) -> bool {
        petgraph::algo::connected_components(&self.graph) <= 1
    }

    /// A 2-colouring (`true` = active side), or `None` when the graph has an odd cycle. For a
    /// `bipartite` topology, its configured split; otherwise the side that contains the smallest
    /// node of each component is active.
    pub fn bipartition(&self) -> Option<Vec<bool>> {
        if let Some(s) = &self.sides {
            return Some(s.clone());
        }
        let n = self.len();
        let mut side: Vec<Option<bool>> = vec![None; n];
        for root in 0..n {
            if side[root].is_some() {
                continue;
            }
            side[root] = Some(true);
            let mut queue = std::collections::VecDeque::from([root]);
            while let Some(u) = queue.pop_front() {
                let su = side[u].expect("coloured when queued");
                for &v in &self.neighbors[u] {
                    match side[v] {
                        None => {
                            side[v] = Some(!su);
                            queue.push_back(v);
                        }
                        Some(sv) if sv == su => return None,
                        Some(_) => {}
                    }
                }
            }
        }
        Some(side.into_iter().map(|s| s.unwrap_or(true)).collect())
    }

    /// Describes the components for an error message: `{0, 1, 2} and {3, 4}`.
    pub fn describe_components(&self) -> String {
        self.components()
            .iter()
            .map(|c| {
                let items: Vec<String> = c.iter().map(usize::to_string).collect();
                format!("{{{}}}", items.join(", "))
            })
            .collect::<Vec<_>>()
            .join(" and ")
    }

    /// Smallest, largest and mean degree.
    pub fn degree_stats(&self) -> DegreeStats {
        let degrees = self.neighbors.iter().map(Vec::len);
        DegreeStats {
            min: degrees.clone().min().unwrap_or(0),
            max: degrees.clone().max().unwrap_or(0),
            mean: degrees.sum::<usize>() as f64 / self.len().max(1) as f64,
        }
    }

    /// The Metropolis–Hastings mixing matrix, row-major `n × n`:
    /// `W_ij = 1/(1 + max(d_i, d_j))` on edges, `W_ii = 1 − Σ_j W_ij`.
    pub fn mixing_matrix(&self) -> Vec<f64> {
        let n = self.len();
        let mut w = vec![0.0; n * n];
        for i in 0..n {
            let mut off = 0.0;
            for &j in &self.neighbors[i] {
                let v = 1.0 / (1 + self.neighbors[i].len().max(self.neighbors[j].len())) as f64;
                w[i * n + j] = v;
                off += v;
            }
            w[i * n + i] = 1.0 - off;
        }
        w
    }

    /// `1 − max(|λ₂|, |λ_n|)` of [`Topology::mixing_matrix`]: how fast gossip averaging on this
    /// graph converges (1: in one step; 0: never). `O(n³)`.
    pub fn spectral_gap(&self) -> f64 {
        let n = self.len();
        if n < 2 {
            return 1.0;
        }
        let ev = symmetric_eigenvalues(self.mixing_matrix(), n);
        1.0 - ev[1].abs().max(ev[n - 1].abs())
    }

    /// The smallest eigenvalue of [`Topology::mixing_matrix`] (1 for a single worker): D² needs
    /// it above `−1/3` ([`crate::algorithms::exact_diffusion`]); an even ring's is `−1/3`.
    /// `O(n³)`.
    pub fn smallest_mixing_eigenvalue(&self) -> f64 {
        let n = self.len();
        if n < 2 {
            return 1.0;
        }
        symmetric_eigenvalues(self.mixing_matrix(), n)[n - 1]
    }

    /// The edges as CSV: a header `src,dst`, then one row per edge with `src < dst`, sorted.
    pub fn to_edge_list(&self) -> String {
        let mut s = String::from("src,dst\n");
        for (a, list) in self.neighbors.iter().enumerate() {
            for &b in list.iter().filter(|&&b| b > a) {
                let _ = writeln!(s, "{a},{b}");
            }
        }
        s
    }

    /// The graph in Graphviz DOT (`graph topology { … }`), active workers of a bipartite
    /// topology drawn filled.
    pub fn to_dot(&self) -> String {
        let mut s = String::from("graph topology {\n  node [shape=circle];\n");
        for i in 0..self.len() {
            let filled = self.sides.as_ref().is_some_and(|sd| sd[i]);
            let style = if filled { " [style=filled]" } else { "" };
            let _ = writeln!(s, "  {i}{style};");
        }
        for (a, list) in self.neighbors.iter().enumerate() {
            for &b in list.iter().filter(|&&b| b > a) {
                let _ = writeln!(s, "  {a} -- {b};");
            }
        }
        s.push_str("}\n");
        s
    }
}

fn threshold_hint(n: usize) -> String {
    let t = (n.max(2) as f64).ln() / n.max(2) as f64;
    format!(
        "G(n, p) is connected with high probability when p is well above ln(n)/n = {t:.3}; or change the seed"
    )
}

/// The most edges a graph may have: 2^25. A complete graph (or the complete bipartite graph,
/// or the union of a random-peer schedule) is quadratic in the workers: at 1,048,576 workers it
/// would need terabytes. Beyond this, building is refused with the count.
pub const MAX_EDGES: u128 = 1 << 25;

/// The most pairs an Erdős–Rényi graph may draw from (one draw per pair): 2^28.
pub const MAX_PAIR_DRAWS: u128 = 1 << 28;

/// An error when a graph of `cfg` on `n` workers would have more than [`MAX_EDGES`] edges.
fn edge_budget(
    edges: u128,
    cfg: &TopologyConfig,
    n: usize,
    field: &str,
) -> Result<(), ConfigError> {
    if edges <= MAX_EDGES {
        return Ok(());
    }
    Err(ConfigError::new(
        field,
        format!(
            "the {} graph on {n} workers has {edges} edges, more than dasim holds ({MAX_EDGES})",
            cfg.kind()
        ),
    )
    .hint("use a sparse graph at this size: ring, torus, hypercube, exponential, random-regular, or the one-peer exponential schedule"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(cfg: &TopologyConfig, n: usize) -> Result<Topology, ConfigError> {
        Topology::build(cfg, n, &BuildEnv::new(1))
    }

    #[test]
    fn a_rings_smallest_mixing_eigenvalue_is_minus_a_third_when_even() {
        // The ring's Metropolis matrix has eigenvalues 1/3 + 2/3·cos(2πk/n).
        let even = build(&TopologyConfig::Ring {}, 16).unwrap();
        assert!((even.smallest_mixing_eigenvalue() + 1.0 / 3.0).abs() < 1e-12);
        let odd = build(&TopologyConfig::Ring {}, 5).unwrap();
        let want = 1.0 / 3.0 + 2.0 / 3.0 * (4.0 * std::f64::consts::PI / 5.0).cos();
        assert!((odd.smallest_mixing_eigenvalue() - want).abs() < 1e-12);
    }

    #[test]
    fn the_bipartite_exponential_graph_is_the_references() {
        // The reference (DynamicBipartiteExponentialGraph) at n = 16: an active (odd) rank r
        // has the peers r ± 1, r ± 3, r ± 5, r ± 9: 1 + 2^i for i = 1 ..= floor(log2 15) = 3.
        let t = build(&TopologyConfig::BipartiteExponential {}, 16).unwrap();
        assert_eq!(t.neighbors(1), [0, 2, 4, 6, 8, 10, 12, 14]);
        assert_eq!(t.neighbors(5), [0, 2, 4, 6, 8, 10, 12, 14]);
        assert_eq!(t.neighbors(7), [0, 2, 4, 6, 8, 10, 12, 14]);
        // A passive rank hears from the actives for which it is one of those offsets.
        assert_eq!(t.neighbors(0), [1, 3, 5, 7, 9, 11, 13, 15]);
        let sides = t.bipartition().unwrap();
        assert!(
            (0..16).all(|i| sides[i] == (i % 2 == 1)),
            "odd ranks active"
        );
        assert!(t.is_connected());
        // At 64 workers the degree is 2 · (1 + 5) = 12, far below n / 2.
        let t = build(&TopologyConfig::BipartiteExponential {}, 64).unwrap();
        assert_eq!(t.neighbors(1).len(), 12);
        assert_eq!(t.neighbors(1)[..4], [0, 2, 4, 6]);
        let e = build(&TopologyConfig::BipartiteExponential {}, 15).unwrap_err();
        assert!(e.message.contains("even number of workers"), "{e}");
    }

    #[test]
    fn ring_neighbors_and_bipartition() {
        let t = build(&TopologyConfig::Ring {}, 6).unwrap();
        assert_eq!(t.neighbors(0), &[1, 5]);
        assert!(t.is_connected());
        let sides = t.bipartition().unwrap();
        assert_eq!(sides, vec![true, false, true, false, true, false]);
        let odd = build(&TopologyConfig::Ring {}, 5).unwrap();
        assert!(odd.bipartition().is_none());
    }

    #[test]
    fn degrees_of_standard_graphs() {
        let h = build(&TopologyConfig::Hypercube {}, 16).unwrap();
        assert!((0..16).all(|i| h.neighbors(i).len() == 4));
        let t = build(&TopologyConfig::Torus { rows: 4, cols: 4 }, 16).unwrap();
        assert!((0..16).all(|i| t.neighbors(i).len() == 4));
        let c = build(&TopologyConfig::Complete {}, 5).unwrap();
        assert!((0..5).all(|i| c.neighbors(i).len() == 4));
        assert!(build(&TopologyConfig::Hypercube {}, 12).is_err());
    }

    #[test]
    fn components_are_named() {
        let t = Topology::from_edges(5, [(0, 1), (1, 2), (3, 4)]);
        assert!(!t.is_connected());
        assert_eq!(t.describe_components(), "{0, 1, 2} and {3, 4}");
        assert_eq!(describe_sets(&t.components()), "{0, 1, 2} and {3, 4}");
        let many: Vec<Vec<usize>> = (0..10).map(|i| vec![i]).collect();
        assert_eq!(
            describe_sets(&many),
            "{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7} and 2 more"
        );
    }

    #[test]
    fn edge_lists_parse() {
        assert_eq!(
            parse_edges("src,dst\n0,1\n# c\n1 2\n\n2, 0 # back\n", 3).unwrap(),
            vec![(0, 1), (1, 2), (2, 0)]
        );
        assert!(
            parse_edges("0,3\n", 3)
                .unwrap_err()
                .contains("line 1: node 3")
        );
        assert!(parse_edges("0,1\nx,y\n", 3).unwrap_err().contains("line 2"));
        assert!(parse_edges("1,1\n", 3).unwrap_err().contains("self-loop"));
        assert!(parse_edges("# nothing\n", 3).is_err());
    }
}
