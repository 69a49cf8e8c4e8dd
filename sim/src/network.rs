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
//! ## Scenario section
//!
//! ```toml
//! [network]
//! preset = "25gbe"                 # named defaults (see Fabric); explicit keys override them
//! latency_us = 3.0
//! dtype = "bf16"
//! header_bytes = 64
//!
//! [[network.nics]]                 # per-worker overrides
//! workers = [3]
//! uplink_gbps = 1.0
//!
//! [[network.links]]                # per-link overrides, "i -> j" or both ways "i <-> j"
//! link = "0 <-> 1"
//! bandwidth_gbps = 2400.0
//! latency_us = 1.0
//! dedicated = true
//!
//! [[network.congestion]]           # background traffic during a window
//! start_s = 2.0
//! end_s = 4.0
//! bandwidth_factor = 0.25          # whole network, unless `links` or `workers` is given
//!
//! [[network.random_congestion]]    # on/off Markov congestion, one process per covered link
//! mean_on_s = 0.5
//! mean_off_s = 5.0
//! bandwidth_factor = 0.3
//! workers = "8..16"
//! ```
//!
//! ## Randomness
//!
//! Each random congestion process `p` (its index in `random_congestion`) has, on each link
//! `i → j` it covers, its own on/off path drawn from sub-stream `p` of that link's stream
//! ([`StreamKind::Link`], id `i · 2³² + j`): a stationary start (congested with probability
//! `mean_on / (mean_on + mean_off)`), then alternating exponential sojourns with the given means.
//! The path is a function of simulated time only, so every algorithm meets the same congestion
//! at the same instants.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use rand::Rng;
use rand_distr::{Distribution as _, Exp};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::env::BuildEnv;
use crate::error::ConfigError;
use crate::rng::{Stream, StreamKind, stream};
use crate::time::SimTime;
use crate::workerset::WorkerSet;

/// Bandwidth when neither `bandwidth_gbps` nor a preset is given (the `10gbe` preset).
pub const DEFAULT_BANDWIDTH_GBPS: f64 = 10.0;
/// Latency when neither `latency_us` nor a preset is given (the `10gbe` preset).
pub const DEFAULT_LATENCY_US: f64 = 5.0;

/// Named fabrics: defaults for the bandwidth and latency of every NIC.
///
/// Bandwidths are nominal line rates per direction; latencies are round one-way figures for a
/// small message at the transport level (kernel TCP for Ethernet up to 40 GbE, RDMA for 100 GbE
/// RoCE and InfiniBand, GPU-to-GPU for NVLink), without a collective library's software overhead.
/// They are starting points: set `bandwidth_gbps` and `latency_us` next to `preset` to override.
///
/// | `preset` | bandwidth (Gbit/s) | latency (µs) | what |
/// |----------|-------------------:|-------------:|------|
/// | `1gbe` | 1 | 50 | Gigabit Ethernet, TCP |
/// | `10gbe` | 10 | 5 | 10 GbE, TCP (also the default when nothing is set) |
/// | `25gbe` | 25 | 5 | 25 GbE, TCP |
/// | `40gbe` | 40 | 5 | 40 GbE, TCP |
/// | `100gbe` | 100 | 2 | 100 GbE with RoCE v2 |
/// | `ib-edr` | 100 | 1 | InfiniBand EDR 4x |
/// | `ib-hdr` | 200 | 1 | InfiniBand HDR 4x |
/// | `ib-ndr` | 400 | 1 | InfiniBand NDR 4x |
/// | `nvlink3` | 2400 | 1 | NVLink 3 (A100): 12 links × 25 GB/s = 300 GB/s per direction |
/// | `nvlink4` | 3600 | 1 | NVLink 4 (H100 SXM): 18 links × 25 GB/s = 450 GB/s per direction |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Fabric {
    /// Gigabit Ethernet.
    #[serde(rename = "1gbe")]
    Gbe1,
    /// 10 Gigabit Ethernet.
    #[serde(rename = "10gbe")]
    Gbe10,
    /// 25 Gigabit Ethernet.
    #[serde(rename = "25gbe")]
    Gbe25,
    /// 40 Gigabit Ethernet.
    #[serde(rename = "40gbe")]
    Gbe40,
    /// 100 Gigabit Ethernet (RoCE).
    #[serde(rename = "100gbe")]
    Gbe100,
    /// InfiniBand EDR, 100 Gbit/s.
    #[serde(rename = "ib-edr")]
    IbEdr,
    /// InfiniBand HDR, 200 Gbit/s.
    #[serde(rename = "ib-hdr")]
    IbHdr,
    /// InfiniBand NDR, 400 Gbit/s.
    #[serde(rename = "ib-ndr")]
    IbNdr,
    /// NVLink 3 (A100).
    #[serde(rename = "nvlink3")]
    NvLink3,
    /// NVLink 4 (H100).
    #[serde(rename = "nvlink4")]
    NvLink4,
}

impl Fabric {
    /// Every preset.
    pub const ALL: [Fabric; 10] = [
        Fabric::Gbe1,
        Fabric::Gbe10,
        Fabric::Gbe25,
        Fabric::Gbe40,
        Fabric::Gbe100,
        Fabric::IbEdr,
        Fabric::IbHdr,
        Fabric::IbNdr,
        Fabric::NvLink3,
        Fabric::NvLink4,
    ];

    /// `(name, bandwidth in Gbit/s, latency in µs, description)`.
    pub fn figures(self) -> (&'static str, f64, f64, &'static str) {
        match self {
            Fabric::Gbe1 => ("1gbe", 1.0, 50.0, "Gigabit Ethernet, TCP"),
            Fabric::Gbe10 => ("10gbe", 10.0, 5.0, "10 GbE, TCP"),
            Fabric::Gbe25 => ("25gbe", 25.0, 5.0, "25 GbE, TCP"),
            Fabric::Gbe40 => ("40gbe", 40.0, 5.0, "40 GbE, TCP"),
            Fabric::Gbe100 => ("100gbe", 100.0, 2.0, "100 GbE, RoCE v2"),
            Fabric::IbEdr => ("ib-edr", 100.0, 1.0, "InfiniBand EDR 4x"),
            Fabric::IbHdr => ("ib-hdr", 200.0, 1.0, "InfiniBand HDR 4x"),
            Fabric::IbNdr => ("ib-ndr", 400.0, 1.0, "InfiniBand NDR 4x"),
            Fabric::NvLink3 => (
                "nvlink3",
                2400.0,
                1.0,
                "NVLink 3 (A100), 300 GB/s per direction",
            ),
            Fabric::NvLink4 => (
                "nvlink4",
                3600.0,
                1.0,
                "NVLink 4 (H100), 450 GB/s per direction",
            ),
        }
    }

    /// The preset's name in a scenario.
    pub fn name(self) -> &'static str {
        self.figures().0
    }

    /// Its bandwidth per direction, in Gbit/s.
    pub fn bandwidth_gbps(self) -> f64 {
        self.figures().1
    }

    /// Its one-way latency, in µs.
    pub fn latency_us(self) -> f64 {
        self.figures().2
    }
}

/// The element type of parameters and gradients in messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dtype {
    /// 32-bit floats, 4 bytes.
    #[default]
    Fp32,
    /// IEEE half precision, 2 bytes.
    Fp16,
    /// bfloat16, 2 bytes.
    Bf16,
}

impl Dtype {
    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::Fp32 => 4,
            Dtype::Fp16 | Dtype::Bf16 => 2,
        }
    }
}

/// A directed link `i -> j`, or both directions `i <-> j`; written as that string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkSpec {
    /// Sender.
    pub src: usize,
    /// Receiver.
    pub dst: usize,
    /// Also `dst -> src`.
    pub both: bool,
}

impl LinkSpec {
    /// The directed pairs it names.
    pub fn pairs(self) -> Vec<(usize, usize)> {
        if self.both {
            vec![(self.src, self.dst), (self.dst, self.src)]
        } else {
            vec![(self.src, self.dst)]
        }
    }

    fn validate(self, nodes: usize, path: &str) -> Result<(), ConfigError> {
        if self.src == self.dst {
            return Err(ConfigError::new(
                path,
                format!("the link {self} connects node {} to itself", self.src),
            )
            .hint("a link joins two different workers"));
        }
        if let Some(bad) = [self.src, self.dst].into_iter().find(|&v| v >= nodes) {
            return Err(ConfigError::new(
                path,
                format!(
                    "the link {self} names node {bad}, out of range: the network has {nodes} nodes (0..={})",
                    nodes.saturating_sub(1)
                ),
            )
            .hint("worker indices run from 0 to workers − 1"));
        }
        Ok(())
    }
}

impl fmt::Display for LinkSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let arrow = if self.both { "<->" } else { "->" };
        write!(f, "{} {arrow} {}", self.src, self.dst)
    }
}

impl std::str::FromStr for LinkSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!("invalid link \"{s}\": write \"i -> j\" (one direction) or \"i <-> j\" (both)")
        };
        let (a, b, both) = if let Some((a, b)) = s.split_once("<->") {
            (a, b, true)
        } else if let Some((a, b)) = s.split_once("->") {
            (a, b, false)
        } else {
            return Err(bad());
        };
        Ok(LinkSpec {
            src: a.trim().parse().map_err(|_| bad())?,
            dst: b.trim().parse().map_err(|_| bad())?,
            both,
        })
    }
}

impl Serialize for LinkSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for LinkSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = LinkSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a link \"i -> j\" or \"i <-> j\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<LinkSpec, E> {
                s.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// One `[[network.nics]]` entry: overrides for the NICs of a set of workers. Later entries
/// override earlier ones, key by key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicConfig {
    /// The workers whose NICs these are.
    pub workers: WorkerSet,
    /// Uplink and downlink bandwidth, Gbit/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_gbps: Option<f64>,
    /// Uplink bandwidth, Gbit/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uplink_gbps: Option<f64>,
    /// Downlink bandwidth, Gbit/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub downlink_gbps: Option<f64>,
    /// The NIC's latency, µs (a link's latency is the larger of its two ends').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<f64>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// One `[[network.links]]` entry: overrides for one link (or both directions of a pair).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    /// `"i -> j"` or `"i <-> j"`.
    pub link: LinkSpec,
    /// The link's bandwidth, Gbit/s: a cap below the NICs' rates, or the dedicated link's rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_gbps: Option<f64>,
    /// The link's latency, µs, instead of the larger of its two NICs' latencies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<f64>,
    /// The link has its own wire and queue and bypasses both NICs (needs `bandwidth_gbps`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub dedicated: bool,
}

/// One `[[network.congestion]]` entry: during `[start_s, end_s)` the covered links' bandwidth is
/// multiplied by `bandwidth_factor`. A transfer in flight at a boundary changes rate there.
/// Without `links`, it covers the shared network (every link, or those of `workers`), which
/// excludes dedicated links; list a dedicated link in `links` to congest it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CongestionWindow {
    /// Start, simulated seconds (included).
    pub start_s: f64,
    /// End, simulated seconds (excluded); none: until the end of the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_s: Option<f64>,
    /// Bandwidth multiplier in `(0, 1]`.
    pub bandwidth_factor: f64,
    /// The links it covers (none, and no `workers`: every link).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links: Option<Vec<LinkSpec>>,
    /// The workers whose links (in and out) it covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<WorkerSet>,
}

/// One `[[network.random_congestion]]` entry: every covered link alternates between clear and
/// congested (bandwidth × `bandwidth_factor`), with exponential sojourns of the given means.
/// Coverage is as for [`CongestionWindow`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomCongestion {
    /// Mean duration of a congested period, seconds.
    pub mean_on_s: f64,
    /// Mean duration of a clear period, seconds.
    pub mean_off_s: f64,
    /// Bandwidth multiplier while congested, in `(0, 1]`.
    pub bandwidth_factor: f64,
    /// The links it covers (none, and no `workers`: every link).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links: Option<Vec<LinkSpec>>,
    /// The workers whose links (in and out) it covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<WorkerSet>,
}

/// The `[network]` section of a scenario.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkConfig {
    /// Named defaults for bandwidth and latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<Fabric>,
    /// NIC bandwidth, uplink and downlink each, in Gbit/s (default: the preset's, else 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_gbps: Option<f64>,
    /// NIC latency in µs (default: the preset's, else 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<f64>,
    /// Element type of parameters in messages.
    #[serde(default)]
    pub dtype: Dtype,
    /// Bytes added to every message on the wire.
    #[serde(default)]
    pub header_bytes: u64,
    /// Per-worker NIC overrides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nics: Vec<NicConfig>,
    /// Per-link overrides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<LinkConfig>,
    /// Congestion windows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub congestion: Vec<CongestionWindow>,
    /// Random on/off congestion processes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub random_congestion: Vec<RandomCongestion>,
}

fn check_gbps(v: Option<f64>, path: &str) -> Result<(), ConfigError> {
    match v {
        Some(b) if !(b.is_finite() && b > 0.0) => Err(ConfigError::new(
            path,
            format!("bandwidth must be a positive number of Gbit/s, got {b}"),
        )
        .hint("10 GbE is 10.0; a preset such as preset = \"25gbe\" sets it for you")),
        _ => Ok(()),
    }
}

fn check_latency(v: Option<f64>, path: &str) -> Result<(), ConfigError> {
    match v {
        Some(l) if !(l.is_finite() && l >= 0.0) => Err(ConfigError::new(
            path,
            format!("latency must be zero or a positive number of microseconds, got {l}"),
        )
        .hint("a one-way latency, e.g. 5.0 for TCP over 10 GbE")),
        _ => Ok(()),
    }
}

fn check_factor(f: f64, path: &str) -> Result<(), ConfigError> {
    if f.is_finite() && f > 0.0 && f <= 1.0 {
        Ok(())
    } else {
        Err(ConfigError::new(
            path,
            format!("a bandwidth factor must be in (0, 1], got {f}"),
        )
        .hint("bandwidth_factor = 0.25 leaves a quarter of the bandwidth"))
    }
}

fn check_scope(
    links: &Option<Vec<LinkSpec>>,
    workers: &Option<WorkerSet>,
    nodes: Option<usize>,
    prefix: &str,
) -> Result<(), ConfigError> {
    if links.is_some() && workers.is_some() {
        return Err(ConfigError::new(
            &format!("{prefix}.workers"),
            "congestion covers `links` or the links of `workers`, not both",
        )
        .hint("split it into two entries"));
    }
    if let Some(n) = nodes {
        for (k, l) in links.iter().flatten().enumerate() {
            l.validate(n, &format!("{prefix}.links[{k}]"))?;
        }
        if let Some(w) = workers {
            w.validate(n, &format!("{prefix}.workers"))?;
        }
    }
    Ok(())
}

impl NetworkConfig {
    /// A uniform network: every NIC with `bandwidth_gbps` each way and `latency_us`.
    pub fn uniform(bandwidth_gbps: f64, latency_us: f64) -> Self {
        NetworkConfig {
            bandwidth_gbps: Some(bandwidth_gbps),
            latency_us: Some(latency_us),
            ..Default::default()
        }
    }

    /// A preset's network.
    pub fn preset(fabric: Fabric) -> Self {
        NetworkConfig {
            preset: Some(fabric),
            ..Default::default()
        }
    }

    /// The default NIC bandwidth, Gbit/s: `bandwidth_gbps`, else the preset's, else 10.
    pub fn default_bandwidth_gbps(&self) -> f64 {
        self.bandwidth_gbps
            .or(self.preset.map(Fabric::bandwidth_gbps))
            .unwrap_or(DEFAULT_BANDWIDTH_GBPS)
    }

    /// The default NIC latency, µs: `latency_us`, else the preset's, else 5.
    pub fn default_latency_us(&self) -> f64 {
        self.latency_us
            .or(self.preset.map(Fabric::latency_us))
            .unwrap_or(DEFAULT_LATENCY_US)
    }

    /// This config with the preset's (or the built-in) defaults written out in `bandwidth_gbps`
    /// and `latency_us`, for a resolved scenario.
    pub fn resolved(&self) -> Self {
        NetworkConfig {
            bandwidth_gbps: Some(self.default_bandwidth_gbps()),
            latency_us: Some(self.default_latency_us()),
            ..self.clone()
        }
    }

    /// Payload bytes of a message of `num_params` parameters: `num_params · element width`.
    pub fn payload_bytes(&self, num_params: usize) -> u64 {
        num_params as u64 * self.dtype.bytes()
    }

    /// Bytes on the wire of a message of `num_params` parameters: payload plus header.
    pub fn message_bytes(&self, num_params: usize) -> u64 {
        self.payload_bytes(num_params) + self.header_bytes
    }

    /// Checks every value that does not depend on the number of nodes.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check(None)
    }

    /// Checks every value, worker and link indices included, for a network of `nodes` nodes.
    pub fn validate_nodes(&self, nodes: usize) -> Result<(), ConfigError> {
        self.check(Some(nodes))
    }

    fn check(&self, nodes: Option<usize>) -> Result<(), ConfigError> {
        check_gbps(self.bandwidth_gbps, "network.bandwidth_gbps")?;
        check_latency(self.latency_us, "network.latency_us")?;
        for (i, nic) in self.nics.iter().enumerate() {
            let at = |k: &str| format!("network.nics[{i}].{k}");
            check_gbps(nic.bandwidth_gbps, &at("bandwidth_gbps"))?;
            check_gbps(nic.uplink_gbps, &at("uplink_gbps"))?;
            check_gbps(nic.downlink_gbps, &at("downlink_gbps"))?;
            check_latency(nic.latency_us, &at("latency_us"))?;
            if nic.bandwidth_gbps.is_some()
                && (nic.uplink_gbps.is_some() || nic.downlink_gbps.is_some())
            {
                return Err(ConfigError::new(
                    &at("bandwidth_gbps"),
                    "bandwidth_gbps sets both directions; it cannot be combined with uplink_gbps or downlink_gbps",
                )
                .hint("keep bandwidth_gbps, or set uplink_gbps and downlink_gbps"));
            }
            if nic.bandwidth_gbps.is_none()
                && nic.uplink_gbps.is_none()
                && nic.downlink_gbps.is_none()
                && nic.latency_us.is_none()
            {
                return Err(
                    ConfigError::new(&at("workers"), "this NIC override sets nothing")
                        .hint("set bandwidth_gbps, uplink_gbps, downlink_gbps or latency_us"),
                );
            }
            if let Some(n) = nodes {
                nic.workers.validate(n, &at("workers"))?;
            }
        }
        for (i, l) in self.links.iter().enumerate() {
            let at = |k: &str| format!("network.links[{i}].{k}");
            check_gbps(l.bandwidth_gbps, &at("bandwidth_gbps"))?;
            check_latency(l.latency_us, &at("latency_us"))?;
            if l.dedicated && l.bandwidth_gbps.is_none() {
                return Err(ConfigError::new(
                    &at("bandwidth_gbps"),
                    "a dedicated link needs its own bandwidth",
                )
                .hint("bandwidth_gbps = 2400.0 is an NVLink 3 pair"));
            }
            if l.bandwidth_gbps.is_none() && l.latency_us.is_none() {
                return Err(
                    ConfigError::new(&at("link"), "this link override sets nothing")
                        .hint("set bandwidth_gbps or latency_us"),
                );
            }
            if let Some(n) = nodes {
                l.link.validate(n, &at("link"))?;
            }
        }
        for (i, c) in self.congestion.iter().enumerate() {
            let prefix = format!("network.congestion[{i}]");
            let at = |k: &str| format!("{prefix}.{k}");
            check_factor(c.bandwidth_factor, &at("bandwidth_factor"))?;
            window(c.start_s, c.end_s, &at)?;
            check_scope(&c.links, &c.workers, nodes, &prefix)?;
        }
        for (i, r) in self.random_congestion.iter().enumerate() {
            let prefix = format!("network.random_congestion[{i}]");
            let at = |k: &str| format!("{prefix}.{k}");
            check_factor(r.bandwidth_factor, &at("bandwidth_factor"))?;
            for (key, v) in [("mean_on_s", r.mean_on_s), ("mean_off_s", r.mean_off_s)] {
                if !(v.is_finite() && v > 0.0) {
                    return Err(ConfigError::new(
                        &at(key),
                        format!("a mean sojourn must be a positive number of seconds, got {v}"),
                    )
                    .hint("mean_on_s = 0.5 and mean_off_s = 5.0: congested about 9% of the time"));
                }
            }
            check_scope(&r.links, &r.workers, nodes, &prefix)?;
        }
        Ok(())
    }
}

fn window(
    start_s: f64,
    end_s: Option<f64>,
    at: &dyn Fn(&str) -> String,
) -> Result<(SimTime, SimTime), ConfigError> {
    if !(start_s.is_finite() && start_s >= 0.0) {
        return Err(ConfigError::new(
            &at("start_s"),
            format!("a window must start at zero or a positive time, got {start_s}"),
        )
        .hint("start_s is in simulated seconds from the start of the run"));
    }
    let end = match end_s {
        None => SimTime::MAX,
        Some(e) if e.is_finite() && e > start_s => SimTime::from_secs_f64(e),
        Some(e) => {
            return Err(ConfigError::new(
                &at("end_s"),
                format!("the window ends at {e} s, not after it starts at {start_s} s"),
            )
            .hint(
                "end_s must be greater than start_s; omit end_s for a window that never closes",
            ));
        }
    };
    Ok((SimTime::from_secs_f64(start_s), end))
}

/// Totals over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Messages sent from `src` to `dst`.
    pub messages: u64,
    /// Bytes sent from `src` to `dst` (headers included).
    pub bytes: u64,
    /// Time a message of the pair was being transmitted.
    pub busy: SimTime,
}

/// Which links a congestion entry covers.
#[derive(Clone, Debug)]
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

#[derive(Clone, Debug)]
struct Window {
    start: SimTime,
    end: SimTime,
    factor: f64,
    scope: Scope,
}

#[derive(Clone, Debug)]
struct Process {
    factor: f64,
    p_on: f64,
    sojourn: [Exp<f64>; 2], // [clear, congested]
    scope: Scope,
}

/// One link's realization of one random congestion process.
#[derive(Clone, Debug)]
struct OnOff {
    rng: Stream,
    on: bool,
    until: SimTime,
}

#[derive(Clone, Copy, Debug, Default)]
struct LinkParams {
    bytes_per_s: Option<u64>,
    latency: Option<SimTime>,
    dedicated: bool,
}

fn bytes_per_s(gbps: f64) -> u64 {
    (gbps * 1e9 / 8.0).round().max(1.0) as u64
}

/// The network state of a run: when each NIC direction is next free, and the congestion state.
#[derive(Clone, Debug)]
pub struct Network {
    default_bps: u64,
    default_latency: SimTime,
    up_bps: Vec<u64>,
    down_bps: Vec<u64>,
    nic_latency: Vec<SimTime>,
    links: BTreeMap<(usize, usize), LinkParams>,
    link_free: BTreeMap<(usize, usize), SimTime>,
    windows: Vec<Window>,
    processes: Vec<Process>,
    paths: BTreeMap<(usize, usize, usize), OnOff>,
    seed: u64,
    uplink_free: Vec<SimTime>,
    downlink_free: Vec<SimTime>,
    element_bytes: u64,
    header_bytes: u64,
    stats: NetworkStats,
    /// Per sender, per receiver it sent to: the pair's totals and the end of its last
    /// transmission (a short list per sender, searched linearly).
    links_used: Vec<Vec<(usize, LinkStats, SimTime)>>,
    /// The last serialization time computed, `(bytes, bytes/s, time)`: collectives send the same
    /// size over links of the same rate again and again, and a division per message shows.
    last_transfer: (u64, u64, SimTime),
}

impl Network {
    /// A network of `nodes` NICs (the workers, plus any extra nodes the algorithm needs, such
    /// as servers, numbered after them). Validates `cfg` against `nodes`; random worker sets and
    /// congestion processes draw from [`BuildEnv::seed`].
    pub fn new(cfg: &NetworkConfig, nodes: usize, env: &BuildEnv) -> Result<Self, ConfigError> {
        cfg.validate_nodes(nodes)?;
        let default_bps = bytes_per_s(cfg.default_bandwidth_gbps());
        let default_latency = SimTime::from_micros_f64(cfg.default_latency_us());
        let mut up_bps = vec![default_bps; nodes];
        let mut down_bps = vec![default_bps; nodes];
        let mut nic_latency = vec![default_latency; nodes];
        for (i, nic) in cfg.nics.iter().enumerate() {
            let path = format!("network.nics[{i}].workers");
            for w in nic.workers.resolve(nodes, env.seed, &path)? {
                if let Some(b) = nic.bandwidth_gbps {
                    up_bps[w] = bytes_per_s(b);
                    down_bps[w] = bytes_per_s(b);
                }
                if let Some(b) = nic.uplink_gbps {
                    up_bps[w] = bytes_per_s(b);
                }
                if let Some(b) = nic.downlink_gbps {
                    down_bps[w] = bytes_per_s(b);
                }
                if let Some(l) = nic.latency_us {
                    nic_latency[w] = SimTime::from_micros_f64(l);
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
            windows.push(Window {
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
            processes.push(Process {
                factor: r.bandwidth_factor,
                p_on: r.mean_on_s / (r.mean_on_s + r.mean_off_s),
                sojourn: [exp(r.mean_off_s), exp(r.mean_on_s)],
                scope: Scope::new(&r.links, &r.workers, nodes, env.seed, &prefix)?,
            });
        }
        Ok(Network {
            default_bps,
            default_latency,
            up_bps,
            down_bps,
            nic_latency,
            links,
            link_free: BTreeMap::new(),
            windows,
            processes,
            paths: BTreeMap::new(),
            seed: env.seed,
            uplink_free: vec![SimTime::ZERO; nodes],
            downlink_free: vec![SimTime::ZERO; nodes],
            element_bytes: cfg.dtype.bytes(),
            header_bytes: cfg.header_bytes,
            stats: NetworkStats::default(),
            links_used: vec![Vec::new(); nodes],
            last_transfer: (0, 0, SimTime::ZERO),
        })
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.uplink_free.len()
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
            None => self.nic_latency[src].max(self.nic_latency[dst]),
        }
    }

    /// The rate of link `src -> dst` without congestion, bytes/s.
    pub fn link_bandwidth(&self, src: usize, dst: usize) -> u64 {
        let nic = self.up_bps[src].min(self.down_bps[dst]);
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

    /// Payload bytes of a message of `num_params` parameters (element width × parameters).
    pub fn payload_bytes(&self, num_params: usize) -> u64 {
        num_params as u64 * self.element_bytes
    }

    /// Bytes every message adds on the wire.
    pub fn header_bytes(&self) -> u64 {
        self.header_bytes
    }

    /// Posts a message with `payload` bytes (the header is added) from `src` to `dst` at `now`;
    /// returns its delivery time.
    pub fn send(&mut self, now: SimTime, src: usize, dst: usize, payload: u64) -> SimTime {
        let bytes = payload + self.header_bytes;
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
            let up_start = now.max(self.uplink_free[src]);
            let up_end = self.transmit(src, dst, up_start, bytes);
            let down_start = up_start.max(self.downlink_free[dst]);
            let down_end = up_end.max(self.transmit(src, dst, down_start, bytes));
            self.uplink_free[src] = up_end;
            self.downlink_free[dst] = down_end;
            (up_start, down_end)
        };
        self.stats.messages += 1;
        self.stats.bytes += bytes;
        let out = &mut self.links_used[src];
        let k = match out.iter().position(|(d, _, _)| *d == dst) {
            Some(k) => k,
            None => {
                out.push((dst, LinkStats::default(), SimTime::ZERO));
                out.len() - 1
            }
        };
        let (_, link, busy_until) = &mut out[k];
        link.messages += 1;
        link.bytes += bytes;
        link.busy += end - start.max(*busy_until);
        *busy_until = (*busy_until).max(end);
        end + self.link_latency(src, dst)
    }

    /// The totals of every ordered pair `(src, dst)` that carried a message, in pair order.
    pub fn link_stats(&self) -> BTreeMap<(usize, usize), LinkStats> {
        self.links_used
            .iter()
            .enumerate()
            .flat_map(|(src, out)| out.iter().map(move |&(dst, l, _)| ((src, dst), l)))
            .collect()
    }

    /// When the last byte of `bytes` posted on `src -> dst` at `start` leaves.
    fn transmit(&mut self, src: usize, dst: usize, start: SimTime, bytes: u64) -> SimTime {
        let base = self.link_bandwidth(src, dst);
        if self.windows.is_empty() && self.processes.is_empty() {
            if (self.last_transfer.0, self.last_transfer.1) != (bytes, base) {
                self.last_transfer = (bytes, base, transfer_ns(bytes, base));
            }
            return start + self.last_transfer.2;
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

/// An exponential sojourn, at least 1 ns so that time always advances.
fn sojourn(d: &Exp<f64>, rng: &mut Stream) -> SimTime {
    SimTime::from_secs_f64(d.sample(rng)).max(SimTime::from_nanos(1))
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
