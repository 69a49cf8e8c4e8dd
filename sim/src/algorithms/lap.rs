//! LAP-SGD and LPP-SGD: local SGD meets asynchrony.
//!
//! Chatterjee, Kungurtsev & Alistarh, "Local SGD Meets Asynchrony", ICLR 2021 submission
//! (OpenReview `kqDCPX7eWS`); reference implementation `bapi/LPP-SGD` on GitHub
//! (`train/LAPSGD.py`, `train/LPPSGD.py`, `utilities/communicator.py`). Each node runs `P`
//! processes that update the node's shared model lock-free with small minibatches, and an
//! averaging thread that averages the node models without ever stopping the processes:
//!
//! ```text
//! process p of node i loops:
//!     read x̂ ← x_i; compute g on x̂ and a minibatch of node i's data     (compute time, below)
//!     x_i ← optimizer step with g                                          (LAP-SGD)
//!     c_i ← c_i + 1                                          (the node's minibatch counter)
//!     LPP-SGD, once node i is past pre_partial_epochs epochs: the process alternates full
//!              steps with partial ones, which differentiate and update only block p of x_i
//! averaging thread of node i loops (every node runs the same sequence of collectives):
//!     M ← all-reduce MAX of the counters c_j                       (a ring of small messages)
//!     H' ← 1 while M is within the first pre_post_epochs epochs, else H
//!     if M − last ≥ H':  last ← M
//!         snap_i ← x_i; ring all-reduce of the snapshots → avg = mean_j snap_j
//!         x_i ← x_i + (avg − snap_i)                  (in place: local steps made meanwhile stay)
//! ```
//!
//! **Paced by the fastest node.** The trigger is the maximum counter: an averaging happens when
//! the fastest node has made `H` minibatches since the last one, and every node contributes the
//! model it has at that moment, however few minibatches its own processes made. A straggler
//! slows only its own minibatches; the averaging rate is that of the fast nodes.
//!
//! **The counters' all-reduce.** The reference's averaging thread polls in a loop: an all-reduce
//! of the counters, then the model all-reduce when the trigger holds. dasim does not simulate the
//! idle polls (their messages would outnumber everything else, and they change nothing): the
//! poll that finds the trigger starts the instant the maximum counter reaches it, as a ring
//! all-reduce of an 8-byte payload over the network ([`super::ring`]); a node whose averaging
//! thread is still in the previous model all-reduce joins when it is done. The decision uses the
//! maximum of the counters the nodes contributed, and `last` becomes that maximum. (The
//! reference's code all-reduces `−last_averaged_at` with MAX too and sets `last_averaged_at` to
//! the node's own counter, so its test is `M − min_j last_j ≥ H'`: with nodes of equal speed the
//! same rule, under a straggler one that averages at every poll once the counters are `H` apart;
//! dasim follows the rule the paper states, every `H` minibatches of the fastest node.)
//!
//! **Warm-up.** During the first `pre_post_epochs` epochs, counted on the maximum counter in
//! epochs of one node's share of the training set (`c · batch · n / train_size`), the averaging
//! thread averages after every minibatch (`H' = 1`), as the reference does; its default is 0.
//!
//! **Processes** model `P` compute streams sharing one device: each process step draws the
//! node's next step duration from the cluster model and takes it times `step_time_factor`
//! (default `P`: the device is shared evenly, so a node applies one minibatch per step time, as
//! a single-process worker does). The `P` processes of a node share its row (its parameters);
//! each has its own optimizer state, as in the reference, where every process builds its own
//! optimizer over the shared model: process 0 steps with the node row's state, process `p > 0`
//! with the state of a row added for it ([`ReplicaStore::add_rows`], its parameters unused) through
//! [`ReplicaStore::apply_gradient_block_with_state`], so a process's momentum (or Adam's moments)
//! follows its own gradients only. An optimizer without state (plain SGD) adds no rows. A process
//! reads the row when its step starts and writes it when it ends, so concurrent processes see
//! each other's updates only between steps (lock-free, Hogwild-style).
//!
//! **LPP-SGD's partial steps.** The blocks are the `P` near-equal contiguous blocks of the
//! trainable parameters ([`blocks`]); process `p` owns block `p`. The state (batch norm's
//! running statistics) is no process's block: a partial step's forward pass runs in training
//! mode on the whole model, as every pass of the reference does, so every step, full or
//! partial, keeps its change to the statistics. Once the node's counter is past
//! `pre_partial_epochs` epochs (the reference's `--prepassmepochs`, default 10), each process
//! alternates: after each of its steps it switches between full and partial. A partial step
//! requests the gradient as a full step does (the store computes whole gradients) and applies
//! only its block; its compute time is the full step's times the cost fraction of the block, from
//! the model's layers ([`ReplicaStore::layers`]): the forward pass plus the backward pass down to
//! the first layer holding a coordinate of the block, with a layer's backward pass costing twice
//! its forward pass (the usual 3× rule of a training step),
//! `(F + 2·Σ_{l ≥ first} f_l) / 3F` with `f_l` a layer's forward FLOPs and `F = Σ f_l`.
//!
//! **Activities** ([`crate::record`]): a node always computes — its processes never wait; the
//! averaging thread's all-reduces run beside them. Its steps are its processes' steps.
//!
//! **Under faults**: a crash or a lost chunk would break the averaging all-reduce for good, as
//! it does for all-reduce SGD; but the processes never wait for the averaging thread, so the
//! run would not stall: every other node would go on with local steps only, never averaging
//! again, a silent degradation that the outputs do not report yet. So LAP-SGD and LPP-SGD
//! refuse `crash`, `link-down` and `loss` entries at validation
//! ([`AlgorithmSpec::fault_support`]); `delay` and `duplicate`, which every algorithm accepts,
//! only change when the averaging's messages land.
//!
//! **Invariant**: the in-place averaging keeps the sum of the node models: over a round,
//! `Σ_i (avg − snap_i) = 0`, so `Σ_i x_i` plus the corrections not yet applied changes only by
//! the processes' optimizer steps; and the local updates a node made during the all-reduce are
//! kept (`x_i − snap_i` survives the averaging).

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::ring::{Done, RingRound, RoundMean};
use crate::algorithm::{Algorithm, Ctx, World};
use crate::algorithms::{AlgorithmSpec, Runnable, Setup};
use crate::error::ConfigError;
use crate::store::{GradId, Layer, MsgId, ReplicaStore, Slot, blocks};

/// Payload of the counters' all-reduce: the reference all-reduces two 32-bit floats.
const POLL_BYTES: u64 = 8;

/// The ring of the counters.
const POLLS: usize = 0;
/// The ring of the models.
const MODELS: usize = 1;

fn two() -> usize {
    2
}

fn default_h() -> u32 {
    4
}

fn default_pre_partial() -> u32 {
    10
}

/// Options of LAP-SGD and LPP-SGD.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LapSgdConfig {
    /// Processes per node, `P ≥ 1` (default 2).
    #[serde(default = "two")]
    pub processes: usize,
    /// Minibatches of the fastest node (its counter, summed over its processes) between
    /// averagings, `H ≥ 1` (default 4, the reference's `--averaging_freq`).
    #[serde(default = "default_h")]
    pub h: u32,
    /// Epochs of warm-up during which the averaging thread averages after every minibatch of
    /// the fastest node before switching to every `H` (default 0, the reference's
    /// `--pre_post_epochs`).
    #[serde(default)]
    pub pre_post_epochs: u32,
    /// LPP-SGD: epochs of a node before its processes start alternating full and partial steps
    /// (default 10, the reference's `--prepassmepochs`). Ignored by LAP-SGD.
    #[serde(default = "default_pre_partial")]
    pub pre_partial_epochs: u32,
    /// A process step takes the node's step time times this factor (default `P`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_time_factor: Option<f64>,
}

impl Default for LapSgdConfig {
    fn default() -> Self {
        LapSgdConfig {
            processes: two(),
            h: default_h(),
            pre_post_epochs: 0,
            pre_partial_epochs: default_pre_partial(),
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
                    "h is the number of minibatches of the fastest node between averagings, e.g. 8",
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
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum Event {
    /// Process `process` of `node` finished computing its gradient.
    ProcessDone {
        /// The node.
        node: usize,
        /// The process.
        process: usize,
    },
    /// A node's all-reduce of the counters completed.
    PollDone(Done),
    /// A node's all-reduce of the models completed.
    RingDone(Done),
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Process {
    grad: Option<GradId>,
    /// The step in flight is partial (LPP-SGD).
    partial: bool,
    steps: u64,
}

/// What a node's averaging thread is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Thread {
    Idle,
    Polling,
    Averaging,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Node {
    processes: Vec<Process>,
    /// The node's minibatch counter (all its processes).
    counter: u64,
    thread: Thread,
    snapshot: Option<MsgId>,
}

/// The state machine of LAP-SGD and LPP-SGD.
#[derive(Serialize, Deserialize)]
pub struct LapSgd {
    partitioned: bool,
    h: u64,
    pre_post_epochs: u64,
    pre_partial_epochs: u64,
    factor: f64,
    nodes: Vec<Node>,
    blocks: Vec<Range<usize>>,
    /// The compute of a partial step of process `p`, as a fraction of a full step.
    partial_cost: Vec<f64>,
    /// `(batch · n, train_size)`: a counter `c` is `c · batch · n / train_size` epochs.
    epoch_unit: (u128, u128),
    /// The counters' ring and the models'.
    rings: RingRound,
    /// The maximum counter at the last averaging decision.
    last: u64,
    /// The poll opened and not yet decided: its round of the counters' all-reduce and the
    /// maximum counter contributed to it so far. The nodes still finishing an older round
    /// (already decided) do not touch it.
    poll: Option<(u64, u64)>,
    /// The mean of the snapshots of a round.
    avg: RoundMean<MsgId>,
    averagings: u64,
    rounds: u64,
    /// Per averaging round: the maximum counter it was decided on.
    decided_at: Vec<u64>,
    /// `state_rows[i][p]`: the row whose optimizer state process `p` of node `i` steps with.
    state_rows: Vec<Vec<usize>>,
}

impl LapSgd {
    /// A new instance for `n` nodes; `partitioned` for LPP-SGD.
    pub fn new(cfg: &LapSgdConfig, n: usize, partitioned: bool) -> Self {
        let p = cfg.processes.max(1);
        LapSgd {
            partitioned,
            h: u64::from(cfg.h.max(1)),
            pre_post_epochs: u64::from(cfg.pre_post_epochs),
            pre_partial_epochs: u64::from(cfg.pre_partial_epochs),
            factor: cfg.step_time_factor.unwrap_or(p as f64),
            nodes: vec![
                Node {
                    processes: vec![Process::default(); p],
                    counter: 0,
                    thread: Thread::Idle,
                    snapshot: None,
                };
                n
            ],
            blocks: Vec::new(),
            partial_cost: vec![1.0; p],
            epoch_unit: (1, 1),
            rings: RingRound::default(),
            last: 0,
            poll: None,
            avg: RoundMean::default(),
            averagings: 0,
            rounds: 0,
            decided_at: Vec::new(),
            state_rows: (0..n).map(|i| vec![i; p]).collect(),
        }
    }

    /// The row whose optimizer state process `process` of `node` steps the node's row with:
    /// the node's own row for process 0, a row of its own ([`ReplicaStore::add_rows`]) for each
    /// other process when the optimizer keeps a state (every row, when it keeps none).
    pub fn state_row(&self, node: usize, process: usize) -> usize {
        self.state_rows[node][process]
    }

    /// The snapshots taken and not yet averaged back, and the round average if computed: the
    /// pending corrections `avg − snap_i` are `(avg, snap_i)` for every node `i` listed.
    pub fn pending_corrections(&self) -> (Option<MsgId>, Vec<MsgId>) {
        match self.avg.current() {
            Some((round, m)) => {
                let ring = self.rings.ring(MODELS);
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

    /// Averaging rounds decided so far (one all-reduce of the models each).
    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    /// For each averaging round decided so far, the maximum counter it was decided on.
    pub fn decided_at(&self) -> &[u64] {
        &self.decided_at
    }

    /// Steps made so far by process `process` of `node`.
    pub fn process_steps(&self, node: usize, process: usize) -> u64 {
        self.nodes[node].processes[process].steps
    }

    /// The minibatch counter of `node` (all its processes).
    pub fn counter(&self, node: usize) -> u64 {
        self.nodes[node].counter
    }

    /// The compute of a partial step of process `process`, as a fraction of a full step (1 for
    /// LAP-SGD).
    pub fn partial_cost(&self, process: usize) -> f64 {
        self.partial_cost[process]
    }

    /// Whether a counter of `c` minibatches is past `epochs` epochs of one node's share.
    fn past(&self, c: u64, epochs: u64) -> bool {
        u128::from(c) * self.epoch_unit.0 >= u128::from(epochs) * self.epoch_unit.1
    }

    fn max_counter(&self) -> u64 {
        self.nodes.iter().map(|s| s.counter).max().unwrap_or(0)
    }

    fn begin(&mut self, node: usize, process: usize, cx: &mut Ctx<'_, '_, Event>) {
        let (grad, d) = cx.begin_step(node, 1.0);
        let proc_ = &mut self.nodes[node].processes[process];
        proc_.grad = Some(grad);
        let cost = if proc_.partial {
            self.partial_cost[process]
        } else {
            1.0
        };
        cx.after(
            d.scale(self.factor * cost),
            Event::ProcessDone { node, process },
        );
    }

    /// Opens a poll when the maximum counter reached the trigger and none is undecided.
    fn maybe_poll(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        if self.poll.is_some() {
            return;
        }
        let max = self.max_counter();
        let every = if self.past(max, self.pre_post_epochs) {
            self.h
        } else {
            1
        };
        if max < self.last + every {
            return;
        }
        // Round r of the counters' all-reduce decides averaging round r: the rounds decided so
        // far number the one opened now.
        self.poll = Some((self.rounds, 0));
        for node in 0..self.nodes.len() {
            if self.nodes[node].thread == Thread::Idle {
                self.join_poll(node, cx);
            }
        }
    }

    fn join_poll(&mut self, node: usize, cx: &mut Ctx<'_, '_, Event>) {
        let counter = self.nodes[node].counter;
        let polls = self.rings.ring_mut(POLLS);
        if let Some((round, max)) = &mut self.poll {
            debug_assert_eq!(polls.round(node), *round, "a node joins the open poll");
            *max = (*max).max(counter);
        }
        self.nodes[node].thread = Thread::Polling;
        // The processes keep computing: the averaging thread's wait is not the node's activity.
        let _ = polls.ready_all(node, cx, Event::PollDone);
    }

    fn polled(&mut self, node: usize, completed: u64, cx: &mut Ctx<'_, '_, Event>) {
        if let Some((round, max)) = self.poll
            && round == completed
        {
            // The first node to learn the maximum: the decision every node reaches with it.
            // The others finish this round later, while the next poll may be open already.
            self.poll = None;
            self.last = max;
            self.rounds += 1;
            self.decided_at.push(max);
        }
        let snap = cx.world.store.new_msg(&[(Slot::Row(node), 1.0)]);
        self.nodes[node].snapshot = Some(snap);
        self.nodes[node].thread = Thread::Averaging;
        let _ = self
            .rings
            .ring_mut(MODELS)
            .ready_all(node, cx, Event::RingDone);
        self.maybe_poll(cx);
    }

    fn averaged(&mut self, node: usize, round: u64, cx: &mut Ctx<'_, '_, Event>) {
        let n = self.nodes.len();
        let avg = self.avg.get(round, n, || {
            let terms: Vec<(Slot, f64)> = self
                .nodes
                .iter()
                .map(|s| {
                    let snap = s.snapshot.expect("every node contributed a snapshot");
                    (Slot::Msg(snap), 1.0 / n as f64)
                })
                .collect();
            cx.world.store.new_msg(&terms)
        });
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
        if let Some(m) = self.avg.used() {
            cx.world.store.release_msg(m);
        }
        self.nodes[node].thread = Thread::Idle;
        if self.poll.is_some() {
            self.join_poll(node, cx);
        }
    }
}

/// The compute of a step that differentiates only `block`, as a fraction of a full step: the
/// forward pass plus the backward pass down to the first layer holding a coordinate of `block`,
/// a layer's backward pass costing twice its forward pass. 1 without FLOPs to go by.
pub fn partial_step_cost(layers: &[Layer], block: &Range<usize>) -> f64 {
    let total: u64 = layers.iter().map(|l| l.forward_flops).sum();
    if total == 0 || block.is_empty() {
        return 1.0;
    }
    let first = layers
        .iter()
        .position(|l| l.params.start < block.end && block.start < l.params.end)
        .unwrap_or(0);
    let back: u64 = layers[first..].iter().map(|l| l.forward_flops).sum();
    (total as f64 + 2.0 * back as f64) / (3.0 * total as f64)
}

impl Algorithm for LapSgd {
    type Event = Event;

    fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        let n = self.nodes.len();
        let p = self.nodes[0].processes.len();
        let store = &mut cx.world.store;
        // The blocks split the trainable coordinates; the state (batch norm's running
        // statistics) is no process's: every training pass updates it.
        self.blocks = blocks(store.state().start, p);
        if self.partitioned {
            let layers = store.layers();
            self.partial_cost = self
                .blocks
                .iter()
                .map(|b| partial_step_cost(&layers, b))
                .collect();
        }
        self.epoch_unit = (
            (store.batch_size() as u128 * n as u128).max(1),
            (store.train_size() as u128).max(1),
        );
        // Each process has its own optimizer state, as in the reference (one optimizer per
        // process over the node's shared parameters): process 0 keeps the node row's, the others
        // one added row each, whose parameters are never used. Plain SGD keeps none: no rows.
        if p > 1 && cx.world.optimizer.has_momentum_buffer() {
            let first = store.add_rows(n * (p - 1));
            for (i, rows) in self.state_rows.iter_mut().enumerate() {
                for (q, row) in rows.iter_mut().enumerate().skip(1) {
                    *row = first + i * (p - 1) + q - 1;
                }
            }
        }
        self.rings.add(n, &[POLL_BYTES]);
        self.rings.add_model(cx.world);
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
                let partial = proc_.partial;
                proc_.steps += 1;
                let block = if partial {
                    self.blocks[process].clone()
                } else {
                    0..cx.world.store.num_params()
                };
                // The node's own counter under `progress = "node"`, as each process's scheduler
                // in the reference reads it.
                let lr = cx.lr_for(node);
                let state = self.state_rows[node][process];
                cx.world
                    .store
                    .apply_gradient_block_with_state(node, state, g, lr, block);
                if partial {
                    // A partial step's forward pass ran in training mode on the whole model,
                    // as every pass of the reference does: its change to the running
                    // statistics is kept, whatever the block.
                    let stats = cx.world.store.state();
                    if !stats.is_empty() {
                        cx.world
                            .store
                            .apply_gradient_block_with_state(node, state, g, lr, stats);
                    }
                }
                cx.world.store.release_gradient(g);
                cx.step_done(node);
                // The counter before this minibatch says the epoch, as in the reference.
                let before = self.nodes[node].counter;
                self.nodes[node].counter += 1;
                if self.partitioned && self.past(before, self.pre_partial_epochs) {
                    let proc_ = &mut self.nodes[node].processes[process];
                    proc_.partial = !proc_.partial;
                }
                self.begin(node, process, cx);
                self.maybe_poll(cx);
            }
            // No fault breaks a ring: LAP-SGD refuses those that would.
            Event::PollDone(done) => {
                if let Some(round) = self.rings.complete(POLLS, done) {
                    self.polled(done.worker, round, cx);
                }
            }
            Event::RingDone(done) => {
                if let Some(round) = self.rings.complete(MODELS, done) {
                    self.averaged(done.worker, round, cx);
                }
            }
        }
    }

    fn waiting(&self) -> Vec<String> {
        if !self.rings.is_started() {
            return Vec::new();
        }
        let (polls, ring) = (self.rings.ring(POLLS), self.rings.ring(MODELS));
        (0..self.nodes.len())
            .filter_map(|w| match self.nodes[w].thread {
                Thread::Idle => None,
                Thread::Polling => polls
                    .waiting(w)
                    .map(|s| format!("the averaging loop of {s} (the counters)")),
                Thread::Averaging => ring
                    .waiting(w)
                    .map(|s| format!("the averaging loop of {s}")),
            })
            .collect()
    }
}

impl AlgorithmSpec for LapSgdConfig {
    fn uses_topology(&self) -> bool {
        false
    }

    fn block_steps(&self, kind: &str) -> Option<&'static str> {
        (kind == "lpp-sgd").then_some("takes partial steps on blocks of the model")
    }

    fn fault_support(
        &self,
        _kind: &'static str,
        _fault: crate::fault::FaultKind,
    ) -> crate::fault::FaultSupport {
        Err(
            "its processes never wait for the averaging, so a crash or a lost chunk would stop \
             the averaging all-reduce for good while every node trains on alone: a silent \
             degradation, not a stall that dasim could detect and report",
        )
    }

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

    fn build(&self, kind: &'static str, world: &World<'_>) -> crate::Result<Box<dyn Runnable>> {
        let partitioned = kind == "lpp-sgd";
        Ok(Box::new(LapSgd::new(self, world.workers(), partitioned)))
    }
}
