//! Host work: what a node computes outside its gradient steps, and the simulated time it takes.
//!
//! An algorithm's arithmetic between steps (DiLoCo's outer step, a compressor's top-k, PowerSGD's
//! power iteration, a server's update) is done for real on the replicas, and by default takes no
//! simulated time, as the papers' analyses assume. `[cluster] host_gbps` and `host_tflops` give
//! it a cost: each piece of work is described by the bytes it reads and writes and the
//! floating-point operations it does ([`HostWork`]), and takes, by the roofline model,
//!
//! ```text
//! t = max(bytes / (host_gbps · 10⁹), flops / (host_tflops · 10¹²))   seconds
//! ```
//!
//! (a rate that is not set makes its term zero). The work occupies its node: the node's next
//! gradient step, its next message and its next contribution to an all-reduce start once the
//! work is done ([`Host::free_at`]). Work charged while earlier work, or a gradient step, is
//! still running queues behind it: a device does one thing at a time, while its transfers
//! overlap its computation. The per-algorithm charges are tabled in the book's cluster-model chapter.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::time::SimTime;

/// Bytes of one parameter value in the store (f32).
pub const VALUE_BYTES: f64 = 4.0;

/// One piece of host work: the bytes it reads and writes and its floating-point operations.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HostWork {
    /// Bytes read and written.
    pub bytes: f64,
    /// Floating-point operations.
    pub flops: f64,
}

impl HostWork {
    /// Elementwise work that reads or writes `values` parameter values in all (a vector of `d`
    /// values read twice and written once is `3d`).
    pub fn touch(values: u64) -> Self {
        HostWork {
            bytes: values as f64 * VALUE_BYTES,
            flops: 0.0,
        }
    }

    /// `flops` floating-point operations (a matrix product `m × k` by `k × n` is `2mkn`).
    pub fn flops(flops: f64) -> Self {
        HostWork { bytes: 0.0, flops }
    }

    /// Whether the work is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes <= 0.0 && self.flops <= 0.0
    }
}

impl std::ops::Add for HostWork {
    type Output = HostWork;
    fn add(self, rhs: HostWork) -> HostWork {
        HostWork {
            bytes: self.bytes + rhs.bytes,
            flops: self.flops + rhs.flops,
        }
    }
}

/// The nodes' host work: the rates of `[cluster]`, and when each node's queued work ends.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Host {
    /// Bytes per second (`host_gbps · 10⁹`); `None`: moving bytes is free.
    bytes_per_s: Option<f64>,
    /// Operations per second (`host_tflops · 10¹²`); `None`: arithmetic is free.
    flops_per_s: Option<f64>,
    /// Per node that has done host work: when its last piece of work ends.
    busy: BTreeMap<usize, SimTime>,
    /// Per worker, once host work costs time: when its gradient step in progress ends.
    computing: BTreeMap<usize, SimTime>,
    /// Per node: the host time charged in all.
    total: BTreeMap<usize, SimTime>,
}

impl Host {
    /// Host work at `host_gbps` GB/s and `host_tflops` TFLOP/s (each `None`: free).
    pub fn new(host_gbps: Option<f64>, host_tflops: Option<f64>) -> Self {
        Host {
            bytes_per_s: host_gbps.map(|g| g * 1e9),
            flops_per_s: host_tflops.map(|t| t * 1e12),
            busy: BTreeMap::new(),
            computing: BTreeMap::new(),
            total: BTreeMap::new(),
        }
    }

    /// Whether any host work costs time (a rate is set).
    pub fn is_charged(&self) -> bool {
        self.bytes_per_s.is_some() || self.flops_per_s.is_some()
    }

    /// How long `work` takes: the roofline time above, rounded to the nanosecond.
    pub fn duration(&self, work: HostWork) -> SimTime {
        let memory = self.bytes_per_s.map_or(0.0, |r| work.bytes / r);
        let compute = self.flops_per_s.map_or(0.0, |r| work.flops / r);
        SimTime::from_secs_f64(memory.max(compute))
    }

    /// `node` does `work` from `now`, or after the work it has queued: returns when it ends.
    pub fn charge(&mut self, node: usize, now: SimTime, work: HostWork) -> SimTime {
        let d = self.duration(work);
        if d == SimTime::ZERO {
            return self.free_at(node, now);
        }
        let start = self
            .free_at(node, now)
            .max(self.computing.get(&node).map_or(now, |&t| t));
        let end = start + d;
        self.busy.insert(node, end);
        *self.total.entry(node).or_default() += d;
        end
    }

    /// `worker` computes a gradient step until `end`: host work charged before then starts at
    /// `end`. Recorded only when host work costs time.
    pub fn computing(&mut self, worker: usize, end: SimTime) {
        if self.is_charged() {
            self.computing.insert(worker, end);
        }
    }

    /// When `node` is free of host work, `now` at the earliest.
    pub fn free_at(&self, node: usize, now: SimTime) -> SimTime {
        self.busy.get(&node).map_or(now, |&t| t.max(now))
    }

    /// The host time `node` has been charged in all.
    pub fn total(&self, node: usize) -> SimTime {
        self.total.get(&node).copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_takes_the_roofline_time_and_queues_on_its_node() {
        // 4 GB/s and 1 TFLOP/s: 1e6 values (4 MB) take 1 ms; 3e9 flops take 3 ms.
        let mut h = Host::new(Some(4.0), Some(1.0));
        let t0 = SimTime::from_millis_f64(10.0);
        assert_eq!(
            h.duration(HostWork::touch(1_000_000)),
            SimTime::from_millis_f64(1.0)
        );
        let both = HostWork::touch(1_000_000) + HostWork::flops(3e9);
        assert_eq!(h.duration(both), SimTime::from_millis_f64(3.0));
        assert_eq!(h.charge(2, t0, both), SimTime::from_millis_f64(13.0));
        // Queued behind the first, not beside it; other nodes are free.
        let end = h.charge(
            2,
            SimTime::from_millis_f64(11.0),
            HostWork::touch(1_000_000),
        );
        assert_eq!(end, SimTime::from_millis_f64(14.0));
        assert_eq!(h.free_at(2, t0), end);
        assert_eq!(h.free_at(3, t0), t0);
        assert_eq!(h.total(2), SimTime::from_millis_f64(4.0));
        // Work charged during a gradient step runs after it.
        h.computing(5, SimTime::from_millis_f64(20.0));
        assert_eq!(
            h.charge(5, t0, HostWork::touch(1_000_000)),
            SimTime::from_millis_f64(21.0)
        );
    }

    #[test]
    fn without_rates_host_work_is_free() {
        let mut h = Host::new(None, None);
        let t0 = SimTime::from_millis_f64(10.0);
        let end = h.charge(0, t0, HostWork::touch(1 << 30) + HostWork::flops(1e15));
        assert_eq!(end, t0);
        assert!(!h.is_charged());
        assert_eq!(h.total(0), SimTime::ZERO);
    }
}
