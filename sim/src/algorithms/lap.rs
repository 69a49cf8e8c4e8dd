//! LAP-SGD and LPP-SGD: local SGD meets asynchrony.
//!
//! Chatterjee, Kungurtsev & Alistarh, "Local SGD Meets Asynchrony", ICLR 2021 submission
//! (OpenReview `kqDCPX7eWS`). Each node runs `P` processes that update the node's shared model
//! lock-free with small minibatches, and a separate averaging loop that averages the node models
//! without ever stopping the processes:
//!
//! ```text
//! process p of node i loops:
//!     read x̂ ← x_i; compute g on x̂ and a minibatch of node i's data     (compute time, below)
//!     x_i ← optimizer step with g                                          (LAP-SGD)
//!     LPP-SGD: on the process's odd steps, only on block p of x_i (P near-equal contiguous
//!              blocks); on its even steps, on all of x_i
//! averaging loop of node i, once H local minibatches were applied since its last snapshot:
//!     snap_i ← x_i; ring all-reduce of the snapshots → avg = mean_j snap_j
//!     x_i ← x_i + (avg − snap_i)                      (in place: local steps made meanwhile stay)
//! ```
//!
//! The processes model `P` compute streams sharing one device: each process step draws the
//! node's next step duration from the cluster model and takes it times `step_time_factor`
//! (default `P`: the device is shared evenly, so a node applies one minibatch per step time, as
//! a single-process worker does). The `P` processes of a node share its row and its optimizer
//! state. A process reads the row when its step starts and writes it when it ends, so concurrent
//! processes see each other's updates only between steps (lock-free, Hogwild-style). The
//! all-reduce is a ring of messages over the network ([`super::ring`]); each node's averaging
//! loop waits for it, but its processes never wait, so a straggler delays only the averaging.
//! A node counts local minibatches made while an all-reduce is in flight towards its next one.
//! The averaging loops run the same sequence of all-reduces, so the rounds line up and cannot
//! deadlock.
//!
//! **Activities** ([`crate::record`]): a node always computes — its processes never wait; the
//! averaging loop's all-reduce runs beside them. Its steps are its processes' steps.
//!
//! **Invariant**: the in-place averaging keeps the sum of the node models: over a round,
//! `Σ_i (avg − snap_i) = 0`, so `Σ_i x_i` plus the corrections not yet applied changes only by
//! the processes' optimizer steps; and the local updates a node made during the all-reduce are
//! kept (`x_i − snap_i` survives the averaging).

use serde::{Deserialize, Serialize};

use super::allreduce::bucket_bytes;
use super::ring::{Done, Ring};
use crate::algorithm::{Algorithm, Ctx, World};
use crate::algorithms::{AlgorithmSpec, Setup};
use crate::engine::{Observer, Outcome, RunConfig, run};
use crate::error::ConfigError;
use crate::params::{GradId, MsgId, ReplicaStore, Slot, blocks};

fn two() -> usize {
    2
}

fn default_h() -> u32 {
    4
}

/// Options of LAP-SGD and LPP-SGD.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LapSgdConfig {
    /// Processes per node, `P ≥ 1` (default 2).
    #[serde(default = "two")]
    pub processes: usize,
    /// Local minibatches (summed over the node's processes) between averagings, `H ≥ 1`
    /// (default 4).
    #[serde(default = "default_h")]
    pub h: u32,
    /// A process step takes the node's step time times this factor (default `P`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_time_factor: Option<f64>,
}

impl Default for LapSgdConfig {
    fn default() -> Self {
        LapSgdConfig {
            processes: two(),
            h: default_h(),
            step_time_factor: None,
        }
    }
}

impl LapSgdConfig {
    /// Checks the options.
    pub(crate) fn check(&self, path: &str) -> Result<(), ConfigError> {
        if self.processes == 0 {
            return Err(ConfigError::new(
                &format!("{path}.processes"),
                "a node needs at least one process",
            )
            .hint("the paper runs several processes per GPU, e.g. processes = 4"));
        }
        if self.h == 0 {
            return Err(
                ConfigError::new(&format!("{path}.h"), "h must be at least 1").hint(
                    "h is the number of local minibatches of a node between averagings, e.g. 8",
                ),
            );
        }
        if let Some(f) = self.step_time_factor
            && !(f.is_finite() && f > 0.0)
        {
            return Err(ConfigError::new(
                &format!("{path}.step_time_factor"),
                format!("step_time_factor must be positive, got {f}"),
            )
            .hint("the default, the number of processes, shares the device evenly"));
        }
        Ok(())
    }
}

/// Events of LAP-SGD.
#[derive(Debug, Clone, Copy)]
pub enum Event {
    /// Process `process` of `node` finished computing its gradient.
    ProcessDone {
        /// The node.
        node: usize,
        /// The process.
        process: usize,
    },
    /// A worker's ring all-reduce completed.
    RingDone(Done),
}

#[derive(Debug, Clone, Default)]
struct Process {
    grad: Option<GradId>,
    steps: u64,
}

#[derive(Debug, Clone, Default)]
struct Node {
    processes: Vec<Process>,
    since: u64,
    snapshot: Option<MsgId>,
}

/// The state machine of LAP-SGD and LPP-SGD.
pub struct LapSgd {
    partitioned: bool,
    h: u64,
    factor: f64,
    nodes: Vec<Node>,
    blocks: Vec<std::ops::Range<usize>>,
    ring: Option<Ring>,
    /// The mean of the snapshots of a round, with how many nodes have yet to apply it.
    avg: Option<(u64, MsgId, usize)>,
    averagings: u64,
}

impl LapSgd {
    /// A new instance for `n` nodes; `partitioned` for LPP-SGD.
    pub fn new(cfg: &LapSgdConfig, n: usize, partitioned: bool) -> Self {
        let p = cfg.processes.max(1);
        LapSgd {
            partitioned,
            h: u64::from(cfg.h.max(1)),
            factor: cfg.step_time_factor.unwrap_or(p as f64),
            nodes: vec![
                Node {
                    processes: vec![Process::default(); p],
                    since: 0,
                    snapshot: None,
                };
                n
            ],
            blocks: Vec::new(),
            ring: None,
            avg: None,
            averagings: 0,
        }
    }

    /// The snapshots taken and not yet averaged back, and the round average if computed: the
    /// pending corrections `avg − snap_i` are `(avg, snap_i)` for every node `i` listed.
    pub fn pending_corrections(&self) -> (Option<MsgId>, Vec<MsgId>) {
        match self.avg {
            Some((round, m, _)) => {
                let ring = self.ring.as_ref().expect("started");
                let snaps = (0..self.nodes.len())
                    .filter(|&i| ring.round(i) == round)
                    .filter_map(|i| self.nodes[i].snapshot)
                    .collect();
                (Some(m), snaps)
            }
            None => (None, Vec::new()),
        }
    }

    /// In-place averagings applied so far (node-rounds).
    pub fn averagings(&self) -> u64 {
        self.averagings
    }

    fn ring(&mut self) -> &mut Ring {
        self.ring.as_mut().expect("started")
    }

    fn begin(&mut self, node: usize, process: usize, cx: &mut Ctx<'_, '_, Event>) {
        let (grad, d) = cx.begin_step(node, 1.0);
        self.nodes[node].processes[process].grad = Some(grad);
        cx.after(d.scale(self.factor), Event::ProcessDone { node, process });
    }

    fn maybe_average(&mut self, node: usize, cx: &mut Ctx<'_, '_, Event>) {
        if self.nodes[node].snapshot.is_some() || self.nodes[node].since < self.h {
            return;
        }
        let snap = cx.world.store.new_msg(&[(Slot::Row(node), 1.0)]);
        self.nodes[node].snapshot = Some(snap);
        self.nodes[node].since = 0;
        // The processes keep computing: the averaging loop's wait is not the node's activity.
        let _ = self.ring().ready_all(node, cx, Event::RingDone);
    }

    fn averaged(&mut self, node: usize, cx: &mut Ctx<'_, '_, Event>) {
        let round = self.ring().round(node) - 1;
        let avg = match self.avg {
            Some((r, m, _)) if r == round => m,
            _ => {
                let n = self.nodes.len();
                let terms: Vec<(Slot, f64)> = self
                    .nodes
                    .iter()
                    .map(|s| {
                        let snap = s.snapshot.expect("every node contributed a snapshot");
                        (Slot::Msg(snap), 1.0 / n as f64)
                    })
                    .collect();
                let m = cx.world.store.new_msg(&terms);
                self.avg = Some((round, m, n));
                m
            }
        };
        let snap = self.nodes[node].snapshot.take().expect("a snapshot");
        let store = &mut cx.world.store;
        store.mix(
            node,
            &[
                (Slot::Row(node), 1.0),
                (Slot::Msg(avg), 1.0),
                (Slot::Msg(snap), -1.0),
            ],
        );
        store.release_msg(snap);
        self.averagings += 1;
        if let Some((_, m, left)) = &mut self.avg {
            *left -= 1;
            if *left == 0 {
                cx.world.store.release_msg(*m);
                self.avg = None;
            }
        }
        self.maybe_average(node, cx);
    }
}

impl Algorithm for LapSgd {
    type Event = Event;

    fn name(&self) -> &str {
        if self.partitioned {
            "lpp-sgd"
        } else {
            "lap-sgd"
        }
    }

    fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        let n = self.nodes.len();
        let p = self.nodes[0].processes.len();
        self.blocks = blocks(cx.world.store.num_params(), p);
        self.ring = Some(Ring::new(n, &bucket_bytes(cx.world, 1)));
        for node in 0..n {
            for process in 0..p {
                self.begin(node, process, cx);
            }
        }
    }

    fn handle(&mut self, event: Event, cx: &mut Ctx<'_, '_, Event>) {
        match event {
            Event::ProcessDone { node, process } => {
                let proc_ = &mut self.nodes[node].processes[process];
                let g = proc_.grad.take().expect("a gradient in flight");
                let partial = self.partitioned && proc_.steps % 2 == 1;
                proc_.steps += 1;
                let lr = cx.lr();
                if partial {
                    let block = self.blocks[process].clone();
                    cx.world.store.apply_gradient_block(node, g, lr, block);
                } else {
                    cx.world.store.apply_gradient(node, g, lr);
                }
                cx.world.store.release_gradient(g);
                cx.step_done(node);
                self.nodes[node].since += 1;
                self.begin(node, process, cx);
                self.maybe_average(node, cx);
            }
            Event::RingDone(done) => {
                self.ring().complete(done);
                self.averaged(done.worker, cx);
            }
        }
    }

    fn waiting(&self) -> Vec<String> {
        let Some(ring) = &self.ring else {
            return Vec::new();
        };
        (0..self.nodes.len())
            .filter_map(|w| ring.waiting(w))
            .map(|s| format!("the averaging loop of {s}"))
            .collect()
    }
}

impl AlgorithmSpec for LapSgdConfig {
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        self.check(setup.path)?;
        if setup.kind == "lpp-sgd"
            && let Some(params) = setup.params
            && self.processes > params
        {
            return Err(ConfigError::new(
                &setup.at("processes"),
                format!(
                    "LPP-SGD splits the model into one block per process: {} processes cannot split {params} parameters",
                    self.processes
                ),
            )
            .hint("use at most as many processes as the model has parameters"));
        }
        Ok(())
    }

    fn run(
        &self,
        kind: &'static str,
        world: &mut World<'_>,
        run_cfg: &RunConfig,
        observer: &mut dyn Observer,
    ) -> crate::Result<Outcome> {
        let partitioned = kind == "lpp-sgd";
        run(
            &mut LapSgd::new(self, world.workers(), partitioned),
            world,
            run_cfg,
            observer,
        )
    }
}
