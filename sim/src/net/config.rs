//! The `[network]` section: NIC defaults and presets, per-worker and per-link overrides,
//! congestion windows and random congestion; [`super::Network`] is the model it configures.
//!
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
use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::clock::time::{SimTime, TimeUnit, num, window};
use crate::cluster::workerset::WorkerSet;
use crate::error::ConfigError;

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
    #[serde(default, skip_serializing_if = "crate::raw::is_false")]
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

/// The slowest bandwidth the network model counts, Gbit/s: 1 byte/s (rates are whole bytes per
/// second).
pub const MIN_BANDWIDTH_GBPS: f64 = 8e-9;
/// The fastest bandwidth the network model counts, Gbit/s: `u64::MAX` bytes/s.
pub const MAX_BANDWIDTH_GBPS: f64 = u64::MAX as f64 * 8.0 / 1e9;
/// The largest `header_bytes`: 2³² bytes (4 GiB), so that message sizes and the byte counters
/// of a run stay far from overflowing.
pub const MAX_HEADER_BYTES: u64 = 1 << 32;

fn check_gbps(v: Option<f64>, path: &str) -> Result<(), ConfigError> {
    match v {
        Some(b) if !(b.is_finite() && b > 0.0) => Err(ConfigError::new(
            path,
            format!("bandwidth must be a positive number of Gbit/s, got {b}"),
        )
        .hint("10 GbE is 10.0; a preset such as preset = \"25gbe\" sets it for you")),
        Some(b) if b < MIN_BANDWIDTH_GBPS => Err(ConfigError::new(
            path,
            format!(
                "{path} = {} Gbit/s is slower than 1 byte/s, the slowest rate the network model \
                 counts (rates are whole bytes per second): at least {} Gbit/s",
                num(b),
                num(MIN_BANDWIDTH_GBPS)
            ),
        )
        .hint("a slow link is legal down to that rate: messages still in flight at the stop are simply not delivered")),
        Some(b) if b > MAX_BANDWIDTH_GBPS => Err(ConfigError::new(
            path,
            format!(
                "{path} = {} Gbit/s is faster than the network model counts (rates are 64-bit \
                 bytes per second): at most {} Gbit/s",
                num(b),
                num(MAX_BANDWIDTH_GBPS)
            ),
        )
        .hint("NVLink 4 is 3600 Gbit/s per direction")),
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
        Some(l) => SimTime::checked_from_f64(l, TimeUnit::Micros, path).map(drop),
        None => Ok(()),
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
        if self.header_bytes > MAX_HEADER_BYTES {
            return Err(ConfigError::new(
                "network.header_bytes",
                format!(
                    "network.header_bytes = {} is more than a message header can be: at most {MAX_HEADER_BYTES} bytes (4 GiB)",
                    self.header_bytes
                ),
            )
            .hint("the bytes every message adds on the wire, e.g. 64 for TCP/IP framing"));
        }
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
                SimTime::checked_nonzero_from_f64(v, TimeUnit::Seconds, &at(key))?;
            }
            check_scope(&r.links, &r.workers, nodes, &prefix)?;
        }
        Ok(())
    }
}
