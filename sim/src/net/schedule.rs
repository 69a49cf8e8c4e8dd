//! Time-varying directed communication: who sends to whom at iteration `k`.
//!
//! A [`PeerSchedule`] answers, for node `i` and iteration `k`, the nodes `i` sends to
//! ([`PeerSchedule::out_peers`]) and receives from ([`PeerSchedule::in_peers`]). It is a pure
//! function of `(i, k)` (and, for the random schedule, the seed), so it can be queried in any
//! order. Every [`crate::net::topology::Topology`] carries one: a static graph gives the schedule in
//! which every node sends to all its neighbours at every iteration (period 1).
//!
//! Schedules (`n` nodes):
//!
//! - **One-peer exponential** (Assran et al., "Stochastic Gradient Push for Distributed Deep
//!   Learning", ICML 2019): at iteration `k`, node `i` sends to `(i + 2^(k mod τ)) mod n`, with
//!   `τ = ⌈log2 n⌉` (the number of bits of `n − 1`; `log2 n` when `n` is a power of two).
//!   Period `τ`.
//! - **Two-peer exponential** (the same paper; the `NPeerDynamicDirectedExponentialGraph` of its
//!   reference code with two peers per iteration): the phone book of node `i` lists the offsets
//!   `j·3^m mod n` for `m = 0, 1, …, ⌊log3(n−1)⌋` and `j = 1, 2` in that order (`1, 2, 3, 6, 9,
//!   18, …`), dropping `0` and repeats; at iteration `k`, node `i` sends to `i + book[2k mod L]`
//!   and `i + book[(2k+1) mod L]` (mod `n`), `L` the book's length. Period `L / gcd(L, 2)`.
//! - **Random peer**: at iteration `k`, node `i` sends to one other node drawn uniformly, by
//!   hashing `(key, k, i)` with a key drawn from the topology stream ([`StreamKind::Topology`],
//!   id 0). No period.
//!
//! A rotating schedule can change its number of peers per iteration over training
//! ([`PeerSchedule::with_phases`], the reference's `--ppi_schedule`): from a phase's first
//! iteration on, its count applies and the rotation restarts at the phone book's first entry.
//!
//! The one- and two-peer schedules are strongly connected over every period: the union of their
//! edges over a period contains the cycle `i → i + 1`.

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::ops::Range;

use petgraph::graph::{DiGraph, NodeIndex};
use rand::Rng;

use crate::clock::rng::{StreamKind, splitmix64, stream};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Kind {
    /// Every node sends to its neighbours at every iteration.
    Fixed(Vec<Vec<usize>>),
    /// Node `i` sends to `i + book[(per·k + j) mod L]`, `j < per`; from each phase's first
    /// iteration `s` on, `per` is the phase's and the rotation restarts: `book[(per·(k − s) + j)
    /// mod L]`.
    Rotating {
        #[serde(with = "crate::raw::static_str")]
        name: crate::raw::StaticStr,
        book: Vec<usize>,
        per: usize,
        /// `(first iteration, peers per iteration)`, first iterations increasing; empty: one
        /// phase, `per` from iteration 0.
        phases: Vec<(u64, usize)>,
    },
    /// One uniform peer per node and iteration.
    Random { key: u64 },
}

/// Who sends to whom at each iteration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerSchedule {
    n: usize,
    kind: Kind,
}

/// Number of base-`b` digits of `n − 1` (0 for `n ≤ 1`): `⌊log_b(n−1)⌋ + 1`, in integers.
fn digits(n: usize, b: usize) -> u32 {
    let mut x = n.saturating_sub(1);
    let mut d = 0;
    while x > 0 {
        x /= b;
        d += 1;
    }
    d
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

impl PeerSchedule {
    /// The static schedule of an undirected graph: every node sends to all its neighbours.
    pub fn fixed(neighbors: Vec<Vec<usize>>) -> Self {
        PeerSchedule {
            n: neighbors.len(),
            kind: Kind::Fixed(neighbors),
        }
    }

    /// SGP's one-peer exponential schedule over `n` nodes.
    pub fn one_peer_exponential(n: usize) -> Self {
        let book = (0..digits(n, 2)).map(|m| (1usize << m) % n).collect();
        PeerSchedule {
            n,
            kind: Kind::Rotating {
                name: "one-peer-exponential",
                book,
                per: 1,
                phases: Vec::new(),
            },
        }
    }

    /// The exponential graph of SGP's reference implementation (`DynamicDirectedExponentialGraph`
    /// of facebookresearch/stochastic_gradient_push, `--graph_type 0` in its job scripts): each
    /// node's phone book holds the peers `2^i` hops ahead and `2^i` hops behind, for
    /// `i = 0 … ⌊log2(n − 1)⌋`, in the order `+1, −1, +2, −2, +4, −4, …` without repeats; it
    /// sends to `per` of them per iteration, rotating through the book.
    pub fn bidirectional_exponential(n: usize, per: usize) -> Self {
        let mut book: Vec<usize> = Vec::new();
        for m in 0..digits(n, 2) {
            let step = (1usize << m) % n;
            for d in [step, (n - step) % n] {
                if d != 0 && !book.contains(&d) {
                    book.push(d);
                }
            }
        }
        PeerSchedule {
            n,
            kind: Kind::Rotating {
                name: "bidirectional-exponential",
                book,
                per: per.max(1),
                phases: Vec::new(),
            },
        }
    }

    /// SGP's two-peer exponential schedule over `n` nodes.
    pub fn two_peer_exponential(n: usize) -> Self {
        let mut book: Vec<usize> = Vec::new();
        let mut power = 1usize;
        for _ in 0..digits(n, 3) {
            for j in 1..=2 {
                let d = (j * power) % n;
                if d != 0 && !book.contains(&d) {
                    book.push(d);
                }
            }
            power = power.saturating_mul(3);
        }
        PeerSchedule {
            n,
            kind: Kind::Rotating {
                name: "two-peer-exponential",
                book,
                per: 2,
                phases: Vec::new(),
            },
        }
    }

    /// One uniformly random peer per node and iteration, keyed by the seed's topology stream.
    pub fn random_peer(n: usize, seed: u64) -> Self {
        let key = stream(seed, StreamKind::Topology, 0).random();
        PeerSchedule {
            n,
            kind: Kind::Random { key },
        }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether there is no node.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The schedule's name: `static`, `one-peer-exponential`, `two-peer-exponential` or
    /// `random-peer`.
    pub fn name(&self) -> &'static str {
        match &self.kind {
            Kind::Fixed(_) => "static",
            Kind::Rotating { name, .. } => name,
            Kind::Random { .. } => "random-peer",
        }
    }

    /// Whether the peers change with the iteration.
    pub fn is_time_varying(&self) -> bool {
        !matches!(self.kind, Kind::Fixed(_))
    }

    /// The length of a rotating schedule's phone book (`None` for the others).
    pub fn book_len(&self) -> Option<usize> {
        match &self.kind {
            Kind::Rotating { book, .. } => Some(book.len()),
            _ => None,
        }
    }

    /// This schedule with the number of peers per iteration changing over training: from
    /// iteration `s` of each `(s, p)` of `phases` on, every node sends to `p` peers per iteration,
    /// and the rotation through the phone book restarts at its first entry (as the reference's
    /// `GraphManager.peers_per_itr` setter resets its group indices); before the first phase,
    /// the schedule's own count. `phases` must have increasing first iterations and counts of at
    /// least 1 (the topology checks both). Only a rotating schedule has phases: the others, or
    /// empty `phases`, are returned unchanged.
    pub fn with_phases(&self, phases: &[(u64, usize)]) -> PeerSchedule {
        let mut s = self.clone();
        if let Kind::Rotating { phases: p, .. } = &mut s.kind {
            p.clear();
            p.extend(phases.iter().map(|&(k, per)| (k, per.max(1))));
        }
        s
    }

    /// The peers per iteration of a rotating schedule at iteration `k`, with the iteration its
    /// rotation counts from.
    fn phase_at(per: usize, phases: &[(u64, usize)], k: u64) -> (usize, u64) {
        match phases.iter().rev().find(|&&(s, _)| s <= k) {
            Some(&(s, p)) => (p, s),
            None => (per, 0),
        }
    }

    /// The offsets used at iteration `k` by a rotating schedule.
    fn rotating_offsets(book: &[usize], per: usize, phases: &[(u64, usize)], k: u64) -> Vec<usize> {
        let (per, start) = Self::phase_at(per, phases, k);
        Self::offsets(book, per, k - start)
    }

    /// The offsets used at iteration `k` of a phase of `per` peers per iteration.
    fn offsets(book: &[usize], per: usize, k: u64) -> Vec<usize> {
        let len = book.len();
        if len == 0 {
            return Vec::new();
        }
        let base = (k % len as u64) as usize * per;
        let mut out = Vec::with_capacity(per);
        for j in 0..per.min(len) {
            let d = book[(base + j) % len];
            if !out.contains(&d) {
                out.push(d);
            }
        }
        out
    }

    fn random_peer_of(&self, key: u64, node: usize, k: u64) -> usize {
        let h = splitmix64(key ^ splitmix64(k ^ splitmix64(node as u64)));
        let r = ((u128::from(h) * (self.n as u128 - 1)) >> 64) as usize;
        (node + 1 + r) % self.n
    }

    /// The nodes `node` sends to at iteration `k`: a static graph's sorted neighbours, or the
    /// schedule's peers in the order of its phone book.
    pub fn out_peers(&self, node: usize, k: u64) -> Vec<usize> {
        match &self.kind {
            Kind::Fixed(nb) => nb[node].clone(),
            Kind::Rotating {
                book, per, phases, ..
            } => Self::rotating_offsets(book, *per, phases, k)
                .into_iter()
                .map(|d| (node + d) % self.n)
                .collect(),
            Kind::Random { .. } if self.n < 2 => Vec::new(),
            Kind::Random { key } => vec![self.random_peer_of(*key, node, k)],
        }
    }

    /// The nodes that send to `node` at iteration `k`, in increasing order.
    pub fn in_peers(&self, node: usize, k: u64) -> Vec<usize> {
        let mut v = match &self.kind {
            Kind::Fixed(nb) => nb[node].clone(),
            Kind::Rotating {
                book, per, phases, ..
            } => Self::rotating_offsets(book, *per, phases, k)
                .into_iter()
                .map(|d| (node + self.n - d) % self.n)
                .collect(),
            Kind::Random { .. } => (0..self.n)
                .filter(|&i| i != node && self.out_peers(i, k).contains(&node))
                .collect(),
        };
        v.sort_unstable();
        v
    }

    /// The period in iterations (`None` for the random schedule, and for a schedule whose peers
    /// per iteration change, [`PeerSchedule::with_phases`]): `out_peers(i, k + period) ==
    /// out_peers(i, k)` for every `i` and `k`.
    pub fn period(&self) -> Option<u64> {
        match &self.kind {
            Kind::Fixed(_) => Some(1),
            Kind::Rotating { phases, .. } if !phases.is_empty() => None,
            Kind::Rotating { book, per, .. } => {
                let len = book.len().max(1);
                Some((len / gcd(len, *per)) as u64)
            }
            Kind::Random { .. } => None,
        }
    }

    /// The directed edges `(src, dst)` used over `iterations`, sorted and without repeats.
    pub fn union_edges(&self, iterations: Range<u64>) -> Vec<(usize, usize)> {
        let mut edges = Vec::new();
        for k in iterations {
            for i in 0..self.n {
                edges.extend(self.out_peers(i, k).into_iter().map(|j| (i, j)));
            }
        }
        edges.sort_unstable();
        edges.dedup();
        edges
    }

    /// The strongly connected components of the union of the edges over `iterations`, each
    /// sorted, ordered by their smallest node.
    pub fn strong_components(&self, iterations: Range<u64>) -> Vec<Vec<usize>> {
        let mut g = DiGraph::<(), ()>::with_capacity(self.n, 0);
        for _ in 0..self.n {
            g.add_node(());
        }
        for (a, b) in self.union_edges(iterations) {
            g.add_edge(NodeIndex::new(a), NodeIndex::new(b), ());
        }
        strong_components(&g)
    }

    /// The iterations a connectivity check covers: one period, or the first `n` iterations of
    /// the random schedule.
    pub fn check_window(&self) -> Range<u64> {
        0..self.period().unwrap_or(self.n as u64)
    }

    /// Whether every node reaches every other over [`PeerSchedule::check_window`]; for a
    /// schedule with phases, over a period of each phase (and of the count before the first).
    pub fn is_strongly_connected(&self) -> bool {
        if let Kind::Rotating { per, phases, .. } = &self.kind
            && !phases.is_empty()
        {
            return std::iter::once(*per)
                .chain(phases.iter().map(|&(_, p)| p))
                .all(|p| self.phase_schedule(p).is_strongly_connected());
        }
        self.strong_components(self.check_window()).len() <= 1
    }

    /// The most peers a node sends to in one iteration, over the whole schedule: a static
    /// graph's largest degree; a rotating schedule's over a period of each of its phases (and of
    /// the count before the first); 1 for the random peer.
    pub fn max_out_peers(&self) -> usize {
        let per_period = |s: &PeerSchedule| {
            (0..s.period().unwrap_or(1))
                .map(|k| {
                    let mut peers = s.out_peers(0, k);
                    peers.sort_unstable();
                    peers.dedup();
                    peers.len()
                })
                .max()
                .unwrap_or(0)
        };
        match &self.kind {
            Kind::Fixed(nb) => nb.iter().map(Vec::len).max().unwrap_or(0),
            Kind::Rotating { per, phases, .. } => std::iter::once(*per)
                .chain(phases.iter().map(|&(_, p)| p))
                .map(|p| per_period(&self.phase_schedule(p)))
                .max()
                .unwrap_or(0),
            Kind::Random { .. } => usize::from(self.n >= 2),
        }
    }

    /// This rotating schedule with `per` peers per iteration throughout and no phases.
    pub fn phase_schedule(&self, per: usize) -> PeerSchedule {
        let mut s = self.clone();
        if let Kind::Rotating { per: p, phases, .. } = &mut s.kind {
            *p = per.max(1);
            phases.clear();
        }
        s
    }

    /// The schedule over `iterations` as CSV: a header `iteration,src,dst`, then one row per
    /// message, by iteration, then sender, then the sender's peer order.
    pub fn to_csv(&self, iterations: Range<u64>) -> String {
        let mut s = String::from("iteration,src,dst\n");
        for k in iterations {
            for i in 0..self.n {
                for j in self.out_peers(i, k) {
                    let _ = writeln!(s, "{k},{i},{j}");
                }
            }
        }
        s
    }
}

/// The strongly connected components of `g` (for an undirected graph: its connected
/// components), each sorted, ordered by their smallest node — a deterministic order for error
/// messages and tests.
pub(crate) fn strong_components<Ty: petgraph::EdgeType>(
    g: &petgraph::Graph<(), (), Ty>,
) -> Vec<Vec<usize>> {
    // Kosaraju's algorithm runs on explicit stacks; Tarjan's (petgraph's) recurses once per
    // node and overflows the stack on a ring of a million workers.
    let mut comps: Vec<Vec<usize>> = petgraph::algo::kosaraju_scc(g)
        .into_iter()
        .map(|c| {
            let mut v: Vec<usize> = c.into_iter().map(NodeIndex::index).collect();
            v.sort_unstable();
            v
        })
        .collect();
    comps.sort_unstable_by_key(|c| c[0]);
    comps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bidirectional_book_is_the_reference_phone_book() {
        // The reference's phone book of rank 0 (DynamicDirectedExponentialGraph._make_graph):
        // forward then backward 2^i for i = 0 ..= floor(log2(n - 1)), repeats skipped.
        let peers = |n: usize| -> Vec<usize> {
            let s = PeerSchedule::bidirectional_exponential(n, 1);
            (0..16).map(|k| s.out_peers(0, k)[0]).take(16).collect()
        };
        assert_eq!(peers(8)[..5], [1, 7, 2, 6, 4]);
        assert_eq!(peers(8)[5], 1, "period 5");
        assert_eq!(peers(9)[..6], [1, 8, 2, 7, 4, 5]);
        assert_eq!(peers(2)[..2], [1, 1]);
        assert_eq!(peers(16)[..8], [1, 15, 2, 14, 4, 12, 8, 1]);
        // Two peers per iteration: (+1, -1), then (+2, -2), ...
        let two = PeerSchedule::bidirectional_exponential(16, 2);
        assert_eq!(two.out_peers(3, 0), [4, 2]);
        assert_eq!(two.out_peers(3, 1), [5, 1]);
        assert!(two.is_strongly_connected());
    }

    #[test]
    fn digits_count_without_floats() {
        assert_eq!(digits(8, 2), 3);
        assert_eq!(digits(9, 2), 4);
        assert_eq!(digits(2, 2), 1);
        assert_eq!(digits(10, 3), 3);
        assert_eq!(digits(9, 3), 2);
        assert_eq!(digits(1, 2), 0);
    }

    #[test]
    fn random_peers_are_others_and_reproducible() {
        let s = PeerSchedule::random_peer(5, 3);
        for k in 0..50 {
            for i in 0..5 {
                let p = s.out_peers(i, k);
                assert_eq!(p.len(), 1);
                assert_ne!(p[0], i);
                assert_eq!(p, PeerSchedule::random_peer(5, 3).out_peers(i, k));
            }
        }
        assert_ne!(
            (0..20).map(|k| s.out_peers(0, k)[0]).collect::<Vec<_>>(),
            (0..20)
                .map(|k| PeerSchedule::random_peer(5, 4).out_peers(0, k)[0])
                .collect::<Vec<_>>()
        );
    }
}
