//! The network: NICs with FIFO serialization, per-link overrides, congestion and latency.
//!
//! ## The model
//!
//! Every node (worker, or an extra node such as a parameter server) has a NIC with an uplink of
//! `U_i` and a downlink of `D_i` bytes/s and a latency `α_i`. A message of `b` bytes from `i` to
//! `j` posted at time `t` is serialized first come, first served at `i`'s uplink and, in the
//! order messages were posted, at `j`'s downlink, each for its own transmission time at the
//! link's rate `B_ij(τ)`. Transmission is cut-through: the downlink may start a message as soon
//! as its first byte leaves the sender and cannot finish it before the last byte has left; the
//! fabric buffers, so a busy receiver never holds up the sender's uplink (no head-of-line
//! blocking). The message is delivered one link latency `α_ij` after its last byte arrived:
//!
//! ```text
//! up_start   = max(t, uplink_free[i])
//! up_end     = up_start + T(up_start, b)
//! down_start = max(up_start, downlink_free[j])
//! down_end   = max(up_end, down_start + T(down_start, b))
//! delivered  = down_end + α_ij
//! uplink_free[i] = up_end;  downlink_free[j] = down_end
//! T(s, b)    = the shortest d with ∫_s^{s+d} B_ij(τ) dτ ≥ b      (rounded up to the ns)
//! B_ij(τ)    = min(U_i, D_j, L_ij) · Π c(τ)                       bytes/s
//! α_ij       = the link's latency override, else max(α_i, α_j)
//! ```
//!
//! where `L_ij` is the link's bandwidth override (none: no cap) and `c(τ)` the bandwidth factors
//! of the congestion windows and random congestion processes that cover the link at `τ`. With no
//! congestion, `T(s, b) = ceil(b · 1e9 / B_ij)` ns. Rates are integers (bytes/s) and the
//! integral is computed exactly in integer arithmetic, segment by segment between the instants
//! where a factor changes. Messages between the same pair arrive in the order they were sent.
//!
//! So a node that receives from many (a parameter server, a hub) serializes them at its downlink:
//! `n` simultaneous messages of `S` bytes finish arriving after `n·S/B`; split over `k` servers
//! (shards), each receives `n·S/(kB)` in `n·S/(kB)` — while each sender's uplink serializes its
//! `k` pieces. A ring of `n` nodes each sending to its successor uses disjoint uplink/downlink
//! pairs, so every ring step costs `α + b/B` and a ring all-reduce of `S` bytes costs
//! `2(n−1)(α + S/(nB))`.
//!
//! A link marked `dedicated` (an intra-node NVLink between two GPUs, say) bypasses both NICs: its
//! messages queue FIFO on the link itself, at its own bandwidth `L_ij`, and do not delay the NICs'
//! other traffic. Congestion of the whole network or of a worker's NIC does not reach it; only a
//! congestion entry that lists it in `links` does.
//!
//! ## Message sizes
//!
//! A message carrying `p` parameters has `p · w` payload bytes, `w` the element width of `dtype`
//! (fp32: 4, fp16 and bf16: 2), and every message on the wire adds `header_bytes`:
//! [`Network::send`] takes the payload and adds the header itself, so a ring all-reduce's chunks
//! each pay one header.
//!
//! ## Randomness
//!
//! Each random congestion process `p` (its index in `random_congestion`) has, on each link
//! `i → j` it covers, its own on/off path drawn from sub-stream `p` of that link's stream
//! ([`StreamKind::Link`], id `i · 2³² + j`): a stationary start (congested with probability
//! `mean_on / (mean_on + mean_off)`), then alternating exponential sojourns with the given means.
//! The path is a function of simulated time only, so every algorithm meets the same congestion
//! at the same instants.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use rand::Rng;
use rand_distr::Exp;

use crate::clock::rng::{Stream, StreamKind, sojourn, stream};
use crate::clock::time::{SimTime, window};
use crate::cluster::workerset::WorkerSet;
use crate::env::BuildEnv;
use crate::error::ConfigError;
use crate::net::config::{LinkSpec, NetworkConfig};

/// Totals over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkStats {
    /// Messages sent.
    pub messages: u64,
    /// Bytes sent (headers included).
    pub bytes: u64,
}

/// Totals of one ordered pair of nodes `src -> dst` over a run ([`Network::link_stats`]).
///
/// `busy` is the time during which at least one message of the pair was being transmitted: the
/// union of the intervals from the instant a message's first byte leaves the sender's uplink
/// (`up_start`, or the start on a dedicated link) to the instant its last byte has arrived at the
/// receiver's downlink (`down_end`), latency excluded. Summed over the pairs, `messages` and
/// `bytes` are the run's [`NetworkStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkStats {
    /// Messages sent from `src` to `dst`.
    pub messages: u64,
    /// Bytes sent from `src` to `dst` (headers included).
    pub bytes: u64,
    /// Time a message of the pair was being transmitted.
    pub busy: SimTime,
}

/// Which links a congestion entry covers.
#[derive(Clone, Debug, Serialize, Deserialize)]
enum Scope {
    All,
    Links(BTreeSet<(usize, usize)>),
    Nodes(Vec<bool>),
}

impl Scope {
    fn new(
        links: &Option<Vec<LinkSpec>>,
        workers: &Option<WorkerSet>,
        nodes: usize,
        seed: u64,
        prefix: &str,
    ) -> Result<Scope, ConfigError> {
        Ok(match (links, workers) {
            (Some(l), _) => Scope::Links(l.iter().flat_map(|s| s.pairs()).collect()),
            (None, Some(w)) => {
                let mut on = vec![false; nodes];
                for i in w.resolve(nodes, seed, &format!("{prefix}.workers"))? {
                    on[i] = true;
                }
                Scope::Nodes(on)
            }
            (None, None) => Scope::All,
        })
    }

    /// Whether it covers `src -> dst`. A dedicated link is not part of the shared fabric or of
    /// the NICs: only an explicit `links` scope reaches it.
    fn covers(&self, src: usize, dst: usize, dedicated: bool) -> bool {
        match self {
            Scope::All => !dedicated,
            Scope::Links(l) => l.contains(&(src, dst)),
            Scope::Nodes(on) => !dedicated && (on[src] || on[dst]),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct CongestionSpan {
    start: SimTime,
    end: SimTime,
    factor: f64,
    scope: Scope,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct CongestionProcess {
    factor: f64,
    p_on: f64,
    sojourn: [Exp<f64>; 2], // [clear, congested]
    scope: Scope,
}

/// One link's realization of one random congestion process.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct OnOff {
    rng: Stream,
    on: bool,
    until: SimTime,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
struct LinkParams {
    bytes_per_s: Option<u64>,
    latency: Option<SimTime>,
    dedicated: bool,
}

fn bytes_per_s(gbps: f64) -> u64 {
    (gbps * 1e9 / 8.0).round().max(1.0) as u64
}

/// One node's NIC: its rates and latency, and when each direction is next free. One record
/// per node (a cache line), so that a message reads the sender's and the receiver's, where
/// one array per field had it read a line of each of them at both ends.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[repr(align(64))]
struct Nic {
    /// Uplink rate, bytes/s.
    up_bps: u64,
    /// Downlink rate, bytes/s.
    down_bps: u64,
    /// Latency; a link without its own takes the larger of its two NICs'.
    latency: SimTime,
    /// When the uplink has sent every message posted so far.
    uplink_free: SimTime,
    /// When the downlink has received every message addressed to it so far.
    downlink_free: SimTime,
    /// As a sender, the index in `links_used` of its last receiver: a sender that broadcasts
    /// visits its receivers in order, and one that talks to a few repeats them, so the entry
    /// is nearly always found there or next to it without a search over `n` receivers.
    last_link: usize,
}

/// The network state of a run: when each NIC direction is next free, and the congestion state.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Network {
    default_bps: u64,
    default_latency: SimTime,
    /// Every node's NIC, by node.
    nics: Vec<Nic>,
    links: BTreeMap<(usize, usize), LinkParams>,
    link_free: BTreeMap<(usize, usize), SimTime>,
    windows: Vec<CongestionSpan>,
    processes: Vec<CongestionProcess>,
    paths: BTreeMap<(usize, usize, usize), OnOff>,
    seed: u64,
    element_bytes: u64,
    /// Proxy mode ([`Network::timed_as`]): messages are sized as if the model had `.1`
    /// parameters where it has `.0`.
    payload_scale: Option<(u64, u64)>,
    header_bytes: u64,
    stats: NetworkStats,
    /// Per sender, per receiver it sent to (sorted by receiver): the pair's totals and the end
    /// of its last transmission.
    links_used: Vec<Vec<(usize, LinkStats, SimTime)>>,
    /// The last serialization time computed, `(bytes, bytes/s, time)`: collectives send the same
    /// size over links of the same rate again and again, and a division per message shows.
    last_transfer: (u64, u64, SimTime),
    /// The bytes each pair had carried at the last [`Network::take_peak_link_bytes`].
    marks: BTreeMap<(usize, usize), u64>,
}

impl Network {
    /// A network of `nodes` NICs (the workers, plus any extra nodes the algorithm needs, such
    /// as servers, numbered after them). Validates `cfg` against `nodes`; random worker sets and
    /// congestion processes draw from [`BuildEnv::seed`].
    pub fn new(cfg: &NetworkConfig, nodes: usize, env: &BuildEnv) -> Result<Self, ConfigError> {
        cfg.validate_nodes(nodes)?;
        let default_bps = bytes_per_s(cfg.default_bandwidth_gbps());
        let default_latency = SimTime::from_micros_f64(cfg.default_latency_us());
        let mut nics = vec![
            Nic {
                up_bps: default_bps,
                down_bps: default_bps,
                latency: default_latency,
                uplink_free: SimTime::ZERO,
                downlink_free: SimTime::ZERO,
                last_link: 0,
            };
            nodes
        ];
        for (i, nic) in cfg.nics.iter().enumerate() {
            let path = format!("network.nics[{i}].workers");
            for w in nic.workers.resolve(nodes, env.seed, &path)? {
                let card = &mut nics[w];
                if let Some(b) = nic.bandwidth_gbps {
                    card.up_bps = bytes_per_s(b);
                    card.down_bps = bytes_per_s(b);
                }
                if let Some(b) = nic.uplink_gbps {
                    card.up_bps = bytes_per_s(b);
                }
                if let Some(b) = nic.downlink_gbps {
                    card.down_bps = bytes_per_s(b);
                }
                if let Some(l) = nic.latency_us {
                    card.latency = SimTime::from_micros_f64(l);
                }
            }
        }
        let mut links: BTreeMap<(usize, usize), LinkParams> = BTreeMap::new();
        for l in &cfg.links {
            for pair in l.link.pairs() {
                let p = links.entry(pair).or_default();
                if let Some(b) = l.bandwidth_gbps {
                    p.bytes_per_s = Some(bytes_per_s(b));
                }
                if let Some(lat) = l.latency_us {
                    p.latency = Some(SimTime::from_micros_f64(lat));
                }
                p.dedicated |= l.dedicated;
            }
        }
        let mut windows = Vec::new();
        for (i, c) in cfg.congestion.iter().enumerate() {
            let prefix = format!("network.congestion[{i}]");
            let (start, end) = window(c.start_s, c.end_s, &|k| format!("{prefix}.{k}"))?;
            windows.push(CongestionSpan {
                start,
                end,
                factor: c.bandwidth_factor,
                scope: Scope::new(&c.links, &c.workers, nodes, env.seed, &prefix)?,
            });
        }
        let mut processes = Vec::new();
        for (i, r) in cfg.random_congestion.iter().enumerate() {
            let prefix = format!("network.random_congestion[{i}]");
            let exp = |mean: f64| Exp::new(1.0 / mean).expect("a positive mean");
            processes.push(CongestionProcess {
                factor: r.bandwidth_factor,
                p_on: r.mean_on_s / (r.mean_on_s + r.mean_off_s),
                sojourn: [exp(r.mean_off_s), exp(r.mean_on_s)],
                scope: Scope::new(&r.links, &r.workers, nodes, env.seed, &prefix)?,
            });
        }
        Ok(Network {
            default_bps,
            default_latency,
            nics,
            links,
            link_free: BTreeMap::new(),
            windows,
            processes,
            paths: BTreeMap::new(),
            seed: env.seed,
            element_bytes: cfg.dtype.bytes(),
            payload_scale: None,
            header_bytes: cfg.header_bytes,
            stats: NetworkStats::default(),
            links_used: vec![Vec::new(); nodes],
            last_transfer: (0, 0, SimTime::ZERO),
            marks: BTreeMap::new(),
        })
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.nics.len()
    }

    /// Time to push `bytes` through one NIC direction at the default bandwidth (no override, no
    /// congestion), rounded up to the nanosecond.
    pub fn serialization_time(&self, bytes: u64) -> SimTime {
        transfer_ns(bytes, self.default_bps)
    }

    /// The default latency (of links whose NICs and link have no override).
    pub fn latency(&self) -> SimTime {
        self.default_latency
    }

    /// The latency of link `src -> dst`.
    pub fn link_latency(&self, src: usize, dst: usize) -> SimTime {
        match self.links.get(&(src, dst)).and_then(|l| l.latency) {
            Some(l) => l,
            None => self.nics[src].latency.max(self.nics[dst].latency),
        }
    }

    /// The rate at which `node`'s NIC sends, without congestion, bytes/s.
    pub fn uplink_bandwidth(&self, node: usize) -> u64 {
        self.nics[node].up_bps
    }

    /// The rate of link `src -> dst` without congestion, bytes/s.
    pub fn link_bandwidth(&self, src: usize, dst: usize) -> u64 {
        let nic = self.nics[src].up_bps.min(self.nics[dst].down_bps);
        match self.links.get(&(src, dst)) {
            Some(LinkParams {
                bytes_per_s: Some(b),
                dedicated: true,
                ..
            }) => *b,
            Some(LinkParams {
                bytes_per_s: Some(b),
                ..
            }) => nic.min(*b),
            _ => nic,
        }
    }

    /// Proxy mode: the model trained has `trained` parameters, but messages are sized as those
    /// of a model of `timed` parameters. A payload of `k` parameters (a whole model, a bucket, a
    /// shard) then carries `round(k · timed / trained)`, so the whole model carries exactly
    /// `timed`. Integer arithmetic: the sizes are the same on every machine.
    pub fn timed_as(mut self, trained: usize, timed: u64) -> Self {
        self.payload_scale = (trained as u64 != timed).then_some((trained as u64, timed));
        self
    }

    /// Bytes of one value in a message (`[network] dtype`: 4 for fp32).
    pub fn value_bytes(&self) -> u64 {
        self.element_bytes
    }

    /// A compressed payload of `bytes` for the model trained, as the network carries it: in
    /// proxy mode scaled as a whole model's is (`round(bytes · timed / trained)`), so a message
    /// compressed to a fraction of the trained model is that fraction of the timed one.
    pub fn scaled_payload(&self, bytes: u64) -> u64 {
        match self.payload_scale {
            None => bytes,
            Some((trained, timed)) => {
                let scaled =
                    (bytes as u128 * timed as u128 + trained as u128 / 2) / trained.max(1) as u128;
                u64::try_from(scaled).unwrap_or(u64::MAX)
            }
        }
    }

    /// Payload bytes of a message of `num_params` parameters (element width × parameters; in
    /// proxy mode, of the parameters they stand for, see [`Network::timed_as`]).
    pub fn payload_bytes(&self, num_params: usize) -> u64 {
        let params = match self.payload_scale {
            None => num_params as u64,
            Some((trained, timed)) => {
                let scaled = (num_params as u128 * timed as u128 + trained as u128 / 2)
                    / trained.max(1) as u128;
                u64::try_from(scaled).unwrap_or(u64::MAX)
            }
        };
        params.saturating_mul(self.element_bytes)
    }

    /// Bytes every message adds on the wire.
    pub fn header_bytes(&self) -> u64 {
        self.header_bytes
    }

    /// Posts a message with `payload` bytes (the header is added) from `src` to `dst` at `now`;
    /// returns its delivery time.
    pub fn send(&mut self, now: SimTime, src: usize, dst: usize, payload: u64) -> SimTime {
        // Saturating, as the counters below: validation keeps every figure far from `u64::MAX`.
        let bytes = payload.saturating_add(self.header_bytes);
        if self.links.is_empty() && self.windows.is_empty() && self.processes.is_empty() {
            // Only NICs, no link of its own and no congestion (the common case): the pair's rate
            // and latency are its NICs', and one serialization time serves both of them. The
            // same arithmetic as the general path below, without its lookups.
            let base = self.nics[src].up_bps.min(self.nics[dst].down_bps);
            let span = self.transfer_time(bytes, base);
            let up_start = now.max(self.nics[src].uplink_free);
            let up_end = up_start + span;
            let down_end = up_end.max(up_start.max(self.nics[dst].downlink_free) + span);
            self.nics[src].uplink_free = up_end;
            self.nics[dst].downlink_free = down_end;
            self.count(src, dst, bytes, up_start, down_end);
            return down_end + self.nics[src].latency.max(self.nics[dst].latency);
        }
        let dedicated = self.links.get(&(src, dst)).is_some_and(|l| l.dedicated);
        let (start, end) = if dedicated {
            let start = now.max(self.link_free.get(&(src, dst)).copied().unwrap_or_default());
            let end = self.transmit(src, dst, start, bytes);
            self.link_free.insert((src, dst), end);
            (start, end)
        } else {
            // The sender's uplink serves its messages in posting order; the receiver's downlink
            // serves the messages addressed to it in posting order too, each for its own
            // transmission time, never finishing before the message's last byte left the sender
            // (cut-through: the fabric buffers, so a busy receiver does not hold the sender's
            // uplink).
            let up_start = now.max(self.nics[src].uplink_free);
            let up_end = self.transmit(src, dst, up_start, bytes);
            let down_start = up_start.max(self.nics[dst].downlink_free);
            let down_end = up_end.max(self.transmit(src, dst, down_start, bytes));
            self.nics[src].uplink_free = up_end;
            self.nics[dst].downlink_free = down_end;
            (up_start, down_end)
        };
        self.count(src, dst, bytes, start, end);
        end + self.link_latency(src, dst)
    }

    /// Counts a message of `bytes` on `src -> dst`, transmitted from `start` to `end`, in the
    /// run's and the pair's totals.
    /// Inline: the pair's entry is nearly always the sender's last one or the next.
    #[inline(always)]
    fn count(&mut self, src: usize, dst: usize, bytes: u64, start: SimTime, end: SimTime) {
        self.stats.messages = self.stats.messages.saturating_add(1);
        self.stats.bytes = self.stats.bytes.saturating_add(bytes);
        let out = &self.links_used[src];
        let last = self.nics[src].last_link;
        let k = if out.get(last).is_some_and(|(d, _, _)| *d == dst) {
            last
        } else if out.get(last + 1).is_some_and(|(d, _, _)| *d == dst) {
            last + 1
        } else {
            self.find_link(src, dst)
        };
        self.nics[src].last_link = k;
        let (_, link, busy_until) = &mut self.links_used[src][k];
        link.messages = link.messages.saturating_add(1);
        link.bytes = link.bytes.saturating_add(bytes);
        link.busy += end - start.max(*busy_until);
        *busy_until = (*busy_until).max(end);
    }

    /// The index of `dst` among `src`'s receivers, a new entry if it has none.
    fn find_link(&mut self, src: usize, dst: usize) -> usize {
        let out = &mut self.links_used[src];
        match out.binary_search_by_key(&dst, |(d, _, _)| *d) {
            Ok(k) => k,
            Err(k) => {
                out.insert(k, (dst, LinkStats::default(), SimTime::ZERO));
                k
            }
        }
    }

    /// One round of a ring all-reduce of one bucket, in closed form: worker `w` (of the first
    /// `starts.len()` nodes) is ready at `starts[w]` and sends `2(n − 1)` chunks of `payload`
    /// bytes to `w + 1 (mod n)`, chunk `k + 1` once it has received chunk `k` from `w − 1`.
    /// Returns when each worker receives its last chunk, with the network's state and totals
    /// exactly as `2n(n − 1)` calls of [`Network::send`] in step order would leave them — or
    /// `None`, changing nothing, where the closed form does not hold: congestion, a dedicated
    /// ring link, ring links of different rates or latencies, or a NIC of the ring still busy
    /// at its worker's start.
    ///
    /// Why it holds: with a rate giving each chunk `T` ns and a latency `α`, the downlink of
    /// `w + 1` carries only `w`'s chunks, so chunk `s` of `w` leaves at
    /// `u(w, s) = max(start_w, u(w − 1, s − 1) + T + α, u(w, s − 1) + T)` and arrives
    /// `T + α` later. Every path through that recurrence from `start_{w−j}` takes `j` ring hops
    /// and `s − j` uplink waits, so `u(w, s) = s·T + max_j (start_{w−j} + j·α)` over
    /// `0 ≤ j ≤ s`, and for `s = 2n − 3` only the largest `j` of each residue mod `n` matters:
    /// a sliding maximum over the ring, `O(n)` for the round instead of `O(n²)` sends.
    pub fn ring_round(&mut self, starts: &[SimTime], payload: u64) -> Option<Vec<SimTime>> {
        let n = starts.len();
        if n < 2 || n > self.nodes() || !self.windows.is_empty() || !self.processes.is_empty() {
            return None;
        }
        let bytes = payload.saturating_add(self.header_bytes);
        let rate = self.link_bandwidth(0, 1);
        let alpha = self.link_latency(0, 1);
        for (w, &start) in starts.iter().enumerate() {
            let d = (w + 1) % n;
            if self.links.get(&(w, d)).is_some_and(|l| l.dedicated)
                || self.link_bandwidth(w, d) != rate
                || self.link_latency(w, d) != alpha
                || self.nics[w].uplink_free > start
                || self.nics[d].downlink_free > start
            {
                return None;
            }
            let out = &self.links_used[w];
            if let Ok(k) = out.binary_search_by_key(&d, |(dst, _, _)| *dst)
                && out[k].2 > start
            {
                return None;
            }
        }
        let t = u128::from(transfer_ns(bytes, rate).as_nanos());
        let a = u128::from(alpha.as_nanos());
        let steps = 2 * (n as u128 - 1);
        let start = |m: usize| u128::from(starts[m % n].as_nanos());
        // j ≡ k (mod n), largest j ≤ 2n − 3: k + n for k ≤ n − 3, else k. The terms k ≤ n − 3,
        // start_{w−k} + (k + n)·α, are b(m) + w·α over m = w + n − k in [w + 3, w + n].
        let b = |m: usize| start(m) + (2 * n - m) as u128 * a;
        let mut window: VecDeque<usize> = VecDeque::new();
        let mut next = 3;
        let mut last_post = Vec::with_capacity(n);
        for w in 0..n {
            while next <= w + n {
                let v = b(next);
                while window.back().is_some_and(|&m| b(m) <= v) {
                    window.pop_back();
                }
                window.push_back(next);
                next += 1;
            }
            while window.front().is_some_and(|&m| m < w + 3) {
                window.pop_front();
            }
            let wrapped = window.front().map_or(0, |&m| b(m) + w as u128 * a);
            let near = (start(w + 2) + (n as u128 - 2) * a).max(start(w + 1) + (n as u128 - 1) * a);
            let u = (steps - 1) * t + wrapped.max(near);
            // When chunk 2n − 3 of `w` leaves, and (`+ T`) when its last byte has arrived.
            last_post.push(u64::try_from(u + t + a).ok()?);
        }
        let t = t as u64;
        let a = a as u64;
        let steps = steps as u64;
        let mut got = vec![SimTime::ZERO; n];
        for (w, &arrive) in last_post.iter().enumerate() {
            let d = (w + 1) % n;
            let end = SimTime::from_nanos(arrive - a);
            got[d] = SimTime::from_nanos(arrive);
            self.nics[w].uplink_free = end;
            self.nics[d].downlink_free = end;
            let out = &mut self.links_used[w];
            let k = match out.binary_search_by_key(&d, |(dst, _, _)| *dst) {
                Ok(k) => k,
                Err(k) => {
                    out.insert(k, (d, LinkStats::default(), SimTime::ZERO));
                    k
                }
            };
            self.nics[w].last_link = k;
            let (_, link, busy_until) = &mut out[k];
            link.messages = link.messages.saturating_add(steps);
            link.bytes = link.bytes.saturating_add(bytes.saturating_mul(steps));
            link.busy += SimTime::from_nanos(t * steps);
            *busy_until = end;
        }
        let messages = steps * n as u64;
        self.stats.messages = self.stats.messages.saturating_add(messages);
        self.stats.bytes = self
            .stats
            .bytes
            .saturating_add(bytes.saturating_mul(messages));
        self.last_transfer = (bytes, rate, SimTime::from_nanos(t));
        Some(got)
    }

    /// The most bytes posted on one ordered pair `src -> dst` since the last call (since the
    /// start, the first time), and a new mark. A message counts when it is posted (a ring
    /// all-reduce round's chunks, when the round is), headers included.
    pub fn take_peak_link_bytes(&mut self) -> u64 {
        let mut peak = 0;
        for (src, out) in self.links_used.iter().enumerate() {
            for &(dst, link, _) in out {
                let before = self.marks.insert((src, dst), link.bytes).unwrap_or(0);
                peak = peak.max(link.bytes.saturating_sub(before));
            }
        }
        peak
    }

    /// The totals of every ordered pair `(src, dst)` that carried a message, in pair order.
    pub fn link_stats(&self) -> BTreeMap<(usize, usize), LinkStats> {
        self.links_used
            .iter()
            .enumerate()
            .flat_map(|(src, out)| out.iter().map(move |&(dst, l, _)| ((src, dst), l)))
            .collect()
    }

    /// The time to push `bytes` at `bytes_per_s` without congestion ([`transfer_ns`]),
    /// remembered for the next message of the same size and rate.
    fn transfer_time(&mut self, bytes: u64, bytes_per_s: u64) -> SimTime {
        if (self.last_transfer.0, self.last_transfer.1) != (bytes, bytes_per_s) {
            self.last_transfer = (bytes, bytes_per_s, transfer_ns(bytes, bytes_per_s));
        }
        self.last_transfer.2
    }

    /// When the last byte of `bytes` posted on `src -> dst` at `start` leaves.
    fn transmit(&mut self, src: usize, dst: usize, start: SimTime, bytes: u64) -> SimTime {
        let base = self.link_bandwidth(src, dst);
        if self.windows.is_empty() && self.processes.is_empty() {
            return start + self.transfer_time(bytes, base);
        }
        // Work in byte-nanoseconds-per-second: a rate of r bytes/s does r units per ns.
        let mut work = u128::from(bytes) * 1_000_000_000;
        let mut t = start;
        loop {
            let (factor, next) = self.rate_at(src, dst, t);
            let rate = u128::from(((base as f64 * factor).round() as u64).max(1));
            let need = work.div_ceil(rate);
            let span = u128::from((next - t).as_nanos());
            if next == SimTime::MAX || need <= span {
                return t + SimTime::from_nanos(need.min(u128::from(u64::MAX)) as u64);
            }
            work -= rate * span;
            t = next;
        }
    }

    /// The congestion factor of `src -> dst` at `t`, and the next instant it may change.
    fn rate_at(&mut self, src: usize, dst: usize, t: SimTime) -> (f64, SimTime) {
        let dedicated = self.links.get(&(src, dst)).is_some_and(|l| l.dedicated);
        let mut factor = 1.0;
        let mut next = SimTime::MAX;
        for w in &self.windows {
            if !w.scope.covers(src, dst, dedicated) {
                continue;
            }
            if t < w.start {
                next = next.min(w.start);
            } else if t < w.end {
                factor *= w.factor;
                next = next.min(w.end);
            }
        }
        for (p, proc_) in self.processes.iter().enumerate() {
            if !proc_.scope.covers(src, dst, dedicated) {
                continue;
            }
            let seed = self.seed;
            let path = self.paths.entry((p, src, dst)).or_insert_with(|| {
                let mut rng = stream(seed, StreamKind::Link, (src as u64) << 32 | dst as u64);
                rng.set_stream(p as u64);
                let on = rng.random_bool(proc_.p_on);
                let until = sojourn(&proc_.sojourn[usize::from(on)], &mut rng);
                OnOff { rng, on, until }
            });
            while path.until <= t {
                path.on = !path.on;
                path.until += sojourn(&proc_.sojourn[usize::from(path.on)], &mut path.rng);
            }
            if path.on {
                factor *= proc_.factor;
            }
            next = next.min(path.until);
        }
        (factor, next)
    }

    /// Totals so far.
    pub fn stats(&self) -> NetworkStats {
        self.stats
    }
}

fn transfer_ns(bytes: u64, bytes_per_s: u64) -> SimTime {
    // Messages below 18 GB (all of them, in practice) stay in 64-bit arithmetic: a 128-bit
    // division is a library call, and this runs for every message.
    if let Some(work) = bytes.checked_mul(1_000_000_000) {
        return SimTime::from_nanos(work.div_ceil(bytes_per_s));
    }
    let ns = (u128::from(bytes) * 1_000_000_000).div_ceil(u128::from(bytes_per_s));
    SimTime::from_nanos(ns.min(u128::from(u64::MAX)) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(nodes: usize) -> Network {
        // 8 Gbit/s = 1e9 bytes/s: 1 ns per byte.
        Network::new(&NetworkConfig::uniform(8.0, 2.0), nodes, &BuildEnv::new(0)).unwrap()
    }

    #[test]
    fn one_message_costs_serialization_plus_latency() {
        let mut n = net(2);
        let t = n.send(SimTime::from_nanos(100), 0, 1, 1000);
        assert_eq!(t.as_nanos(), 100 + 1000 + 2000);
    }

    #[test]
    fn a_receiver_serializes_simultaneous_senders() {
        let mut n = net(5);
        let arrivals: Vec<u64> = (1..5)
            .map(|i| n.send(SimTime::ZERO, i, 0, 1000).as_nanos())
            .collect();
        assert_eq!(arrivals, vec![3000, 4000, 5000, 6000]);
    }

    #[test]
    fn disjoint_pairs_do_not_interfere() {
        let mut n = net(4);
        assert_eq!(n.send(SimTime::ZERO, 0, 1, 1000).as_nanos(), 3000);
        assert_eq!(n.send(SimTime::ZERO, 2, 3, 1000).as_nanos(), 3000);
        assert_eq!(n.stats().bytes, 2000);
    }

    #[test]
    fn link_busy_time_is_the_union_of_transmissions() {
        let mut n = net(3);
        // Two back-to-back messages 0 -> 1: busy 0..1000 and 1000..2000.
        n.send(SimTime::ZERO, 0, 1, 1000);
        n.send(SimTime::ZERO, 0, 1, 1000);
        // 2 -> 1 queues behind them at 1's downlink: transmitted 0..3000 (cut-through: its
        // first byte leaves at 0, its last arrives at 3000).
        n.send(SimTime::ZERO, 2, 1, 1000);
        let links = n.link_stats();
        assert_eq!(links[&(0, 1)].busy.as_nanos(), 2000);
        assert_eq!(links[&(0, 1)].messages, 2);
        assert_eq!(links[&(2, 1)].busy.as_nanos(), 3000);
        let total: u64 = links.values().map(|l| l.bytes).sum();
        assert_eq!(total, n.stats().bytes);
    }

    #[test]
    fn the_peak_link_bytes_are_those_of_the_busiest_pair_since_the_last_mark() {
        let mut n = net(4);
        assert_eq!(n.take_peak_link_bytes(), 0);
        n.send(SimTime::ZERO, 0, 1, 1000);
        n.send(SimTime::ZERO, 0, 1, 500);
        n.send(SimTime::ZERO, 2, 3, 1200);
        // 0 -> 1 carried 1,500 bytes; 2 -> 3, 1,200 (no header in this network).
        assert_eq!(n.take_peak_link_bytes(), 1500);
        assert_eq!(n.take_peak_link_bytes(), 0);
        n.send(SimTime::ZERO, 2, 3, 700);
        assert_eq!(n.take_peak_link_bytes(), 700);
        // A ring round in closed form counts each link's 2(n - 1) chunks at once.
        let mut r = net(4);
        r.ring_round(&[SimTime::ZERO; 4], 100).unwrap();
        assert_eq!(r.take_peak_link_bytes(), 6 * 100);
    }

    /// The loop the closed form replaces: `2(n − 1)` steps, every worker posting its chunk once
    /// ready and once it has received the previous one ([`crate::algorithms::ring`]).
    fn ring_by_sends(net: &mut Network, starts: &[SimTime], payload: u64) -> Vec<SimTime> {
        let n = starts.len();
        let mut got = starts.to_vec();
        let mut next = vec![SimTime::ZERO; n];
        for _ in 0..2 * (n - 1) {
            for w in 0..n {
                next[(w + 1) % n] = net.send(starts[w].max(got[w]), w, (w + 1) % n, payload);
            }
            std::mem::swap(&mut got, &mut next);
        }
        got
    }

    type State = (
        Vec<SimTime>,
        Vec<SimTime>,
        NetworkStats,
        Vec<Vec<(usize, LinkStats, SimTime)>>,
    );

    fn state(net: &Network) -> State {
        (
            net.nics.iter().map(|c| c.uplink_free).collect(),
            net.nics.iter().map(|c| c.downlink_free).collect(),
            net.stats(),
            net.links_used.clone(),
        )
    }

    /// Rounds of random sizes, ready times (a straggler far behind, ties, spreads around the
    /// chunk time and the latency), chunk sizes and latencies, one after another: the closed
    /// form gives the loop's arrivals and leaves the network exactly as the loop does.
    #[test]
    fn a_ring_round_in_closed_form_is_the_loop_of_sends() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut closed_rounds = 0;
        for case in 0..300 {
            let n = if case % 10 == 0 {
                rng.random_range(20..80)
            } else {
                rng.random_range(2..10)
            };
            let latency_us = [0.0, 0.001, 0.5, 2.0][rng.random_range(0..4)];
            let cfg = NetworkConfig::uniform(8.0, latency_us);
            let mut slow = Network::new(&cfg, n + 1, &BuildEnv::new(0)).unwrap();
            let mut fast = slow.clone();
            let mut now = 0u64;
            for _ in 0..3 {
                let payload = rng.random_range(0..3000);
                let starts: Vec<SimTime> = (0..n)
                    .map(|_| {
                        let d = match rng.random_range(0..4) {
                            0 => 0,
                            1 => rng.random_range(0..50),
                            2 => rng.random_range(0..5000),
                            _ => rng.random_range(0..1_000_000),
                        };
                        SimTime::from_nanos(now + d)
                    })
                    .collect();
                let expected = ring_by_sends(&mut slow, &starts, payload);
                match fast.ring_round(&starts, payload) {
                    Some(got) => {
                        closed_rounds += 1;
                        assert_eq!(got, expected, "n = {n}, starts {starts:?}");
                    }
                    None => {
                        // Refused (a NIC still busy): nothing changed, the loop then runs.
                        assert_eq!(ring_by_sends(&mut fast, &starts, payload), expected);
                    }
                }
                assert_eq!(state(&fast), state(&slow), "n = {n}");
                now = expected.iter().map(|t| t.as_nanos()).max().unwrap()
                    + rng.random_range(0..3) * 1000;
            }
        }
        assert!(closed_rounds > 500, "{closed_rounds} rounds in closed form");
    }

    /// Where a NIC of the ring is still busy, or the network has congestion, the closed form
    /// declines and leaves the network untouched.
    #[test]
    fn a_ring_round_declines_what_it_cannot_compute() {
        let mut n = net(3);
        n.send(SimTime::ZERO, 1, 0, 5000);
        let before = state(&n);
        assert_eq!(n.ring_round(&[SimTime::ZERO; 3], 100), None);
        assert_eq!(state(&n), before);
        let mut cfg = NetworkConfig::uniform(8.0, 2.0);
        cfg.congestion
            .push(toml::from_str("start_s = 0.0\nend_s = 1.0\nbandwidth_factor = 0.5").unwrap());
        let mut c = Network::new(&cfg, 3, &BuildEnv::new(0)).unwrap();
        assert_eq!(c.ring_round(&[SimTime::ZERO; 3], 100), None);
        assert_eq!(
            net(3).ring_round(&[SimTime::ZERO; 3], 100).map(|g| g.len()),
            Some(3)
        );
    }

    #[test]
    fn bad_bandwidth_is_rejected() {
        let cfg = NetworkConfig::uniform(-1.0, 1.0);
        assert_eq!(
            cfg.validate().unwrap_err().path.to_string(),
            "network.bandwidth_gbps"
        );
    }

    #[test]
    fn links_parse_and_print() {
        let l: LinkSpec = " 3 <-> 4".parse().unwrap();
        assert_eq!(l.pairs(), vec![(3, 4), (4, 3)]);
        assert_eq!(l.to_string(), "3 <-> 4");
        assert_eq!("0->1".parse::<LinkSpec>().unwrap().to_string(), "0 -> 1");
        assert!("0 - 1".parse::<LinkSpec>().is_err());
        assert!("a -> 1".parse::<LinkSpec>().is_err());
    }
}
