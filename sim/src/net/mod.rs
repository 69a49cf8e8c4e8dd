//! The network: its `[network]` section ([`config`]), the NIC and link model ([`network`]), the
//! communication graph ([`topology`]), the time-varying peer schedule ([`schedule`]) and the
//! spectral analysis of mixing matrices ([`spectral`]).

pub mod config;
pub mod network;
pub mod schedule;
pub mod spectral;
pub mod topology;

pub use config::{
    CongestionWindow, DEFAULT_BANDWIDTH_GBPS, DEFAULT_LATENCY_US, Dtype, Fabric, LinkConfig,
    LinkSpec, NetworkConfig, NicConfig, RandomCongestion,
};
pub use network::{LinkStats, Network, NetworkStats};
pub use schedule::PeerSchedule;
pub use topology::{Topology, TopologyConfig};
