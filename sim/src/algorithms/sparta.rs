//! SPARTA: sparse parameter averaging. Every step each worker takes its own optimizer step, then
//! a random subset of the parameters, the same on every worker, is averaged across the workers.
//!
//! Beton, Howes, Cheema & Baioumy (EXO), "Improving the Efficiency of Distributed Training using
//! Sparse Parameter Averaging" (SPARTA, 2025). The reference code is EXO Gym's
//! `exogym/strategy/sparta.py` (`SPARTAStrategy`, `SparseCommunicator`, `RandomIndexSelector`),
//! which this module follows:
//!
//! ```text
//! reference (every step, every node)            dasim (worker i, step k)
//! optim.step()                                  x_i ← optimizer step with g_i     (local step)
//! every sparta_interval steps:                  every `interval` steps:
//!   for each parameter tensor:                    I ~ Bernoulli(p) per coordinate, from the run's
//!     mask ~ Bernoulli(p), broadcast from 0         shared stream (the same on every worker)
//!     v ← all_reduce(param[mask]) / n             ring all-reduce of the |I| values (no indices)
//!     param[mask] ← v                             x_i[I] ← mean_j x_j[I]            (waits for all)
//! ```
//!
//! The reference's mask is a tensor of every parameter's size drawn by rank 0 and broadcast;
//! dasim draws the same Bernoulli mask from a stream every worker shares, as the paper's
//! "shared random seed" does, so only the `|I|` values travel: a ring of `2(n−1)` chunks of
//! `⌈|I|·w/n⌉` bytes. The coordinates are drawn by geometric skips (the gaps between selected
//! coordinates), which is exactly a Bernoulli(p) per coordinate at a cost of `|I|` draws.
//! Running statistics (batch norm) are not parameters and are not averaged, as in the reference
//! (`named_parameters`).
//!
//! The averaging is a ring all-reduce like local SGD's, so every worker waits for every other
//! every `interval` steps; it is done when the first worker completes the ring, when every
//! worker has contributed and waits. The store has no operation on a set of coordinates, so the
//! average is formed on the host from the rows' values (`2n` rows read and written each time).
//!
//! **With DiLoCo** (`inner_steps = H`, the reference's `SPARTADiLoCoStrategy` in
//! `exogym/strategy/sparta_diloco.py`): every `H` steps of a worker, after that step's sparse
//! averaging (the order of the reference's communication modules), DiLoCo's outer step over a
//! second ring, the model's: `outer_step_from` (in [`super::diloco`]) on the global model, the
//! outer momentum and the average, three rows after the workers'. A worker is in one ring at a
//! time.
//!
//! **Under faults** as local SGD ([`super::local_sgd`]): a crash or a lost chunk breaks the ring
//! for good and the run stalls; a rejoin is refused.
//!
//! **Invariant** (checked at every averaging by `tests/sparta.rs`): on the coordinates drawn,
//! every row becomes the mean of the rows before it; every other coordinate is unchanged.

use rand_distr::{Distribution, Geometric};
use serde::{Deserialize, Serialize};

use super::diloco::{DilocoConfig, outer_step_from};
use super::ring::{Done, RingRound, RoundEvent, RoundMethod, dispatch, local_step, ring_support};
use crate::algorithm::{Algorithm, Ctx, World};
use crate::algorithms::{AlgorithmSpec, Runnable, Setup};
use crate::clock::rng::{Stream, StreamKind, stream};
use crate::cluster::HostWork;
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport, WorkerFault};
use crate::store::optim::outer;
use crate::store::{GradId, ReplicaStore, Slot};

fn default_p() -> f64 {
    0.005
}

fn one() -> u32 {
    1
}

fn default_outer_lr() -> f64 {
    0.7
}

fn default_outer_momentum() -> f64 {
    0.9
}

fn default_true() -> bool {
    true
}

/// Options of SPARTA.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpartaConfig {
    /// The share of the parameters averaged each time, `p ∈ (0, 1]` (default 0.005, the
    /// reference's `p_sparta`).
    #[serde(default = "default_p")]
    pub p: f64,
    /// Steps between two averagings, `≥ 1` (default 1, the reference's `sparta_interval`).
    #[serde(default = "one")]
    pub interval: u32,
    /// With DiLoCo (the reference's `SPARTADiLoCoStrategy`): a DiLoCo outer step every
    /// `inner_steps` steps of every worker, after that step's sparse averaging; `None`
    /// (default): SPARTA alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inner_steps: Option<u32>,
    /// The outer learning rate of the DiLoCo steps (default 0.7, as DiLoCo's).
    #[serde(default = "default_outer_lr")]
    pub outer_lr: f64,
    /// Their outer momentum (default 0.9).
    #[serde(default = "default_outer_momentum")]
    pub outer_momentum: f64,
    /// Nesterov momentum in them (default true).
    #[serde(default = "default_true")]
    pub nesterov: bool,
}

impl Default for SpartaConfig {
    fn default() -> Self {
        SpartaConfig {
            p: default_p(),
            interval: 1,
            inner_steps: None,
            outer_lr: default_outer_lr(),
            outer_momentum: default_outer_momentum(),
            nesterov: true,
        }
    }
}

impl SpartaConfig {
    fn check(&self, path: &str) -> Result<(), ConfigError> {
        if !(self.p.is_finite() && self.p > 0.0 && self.p <= 1.0) {
            return Err(ConfigError::new(
                &format!("{path}.p"),
                format!("p must be in (0, 1], not {}", self.p),
            )
            .hint("p is the share of the parameters averaged every step (the reference's 0.005)"));
        }
        if self.interval == 0 {
            return Err(ConfigError::new(
                &format!("{path}.interval"),
                "interval must be at least 1",
            )
            .hint("interval = 1 averages after every step, as the reference's default"));
        }
        if let Some(outer) = self.outer() {
            outer.check(path)?;
        }
        Ok(())
    }

    /// The DiLoCo outer steps' options, when `inner_steps` asks for them.
    pub fn outer(&self) -> Option<DilocoConfig> {
        self.inner_steps.map(|h| DilocoConfig {
            inner_steps: h,
            outer_lr: self.outer_lr,
            outer_momentum: self.outer_momentum,
            nesterov: self.nesterov,
        })
    }
}

/// Events of SPARTA: a worker's gradient computed, a worker's ring completed.
pub type Event = RoundEvent;

/// The state machine of SPARTA.
#[derive(Serialize, Deserialize)]
pub struct Sparta {
    p: f64,
    interval: u64,
    /// Each worker's gradient in flight and steps taken.
    grads: Vec<Option<GradId>>,
    steps: Vec<u64>,
    /// The ring of the drawn coordinates' values.
    rounds: RingRound,
    /// The stream every worker shares, which draws the coordinates.
    shared: Stream,
    /// The coordinates of the current round, drawn as its first worker joins.
    drawn: Vec<usize>,
    drawn_for: Option<u64>,
    /// The last round averaged, and how many so far.
    averaged: Option<u64>,
    averagings: u64,
    /// With DiLoCo: its outer steps' options, the global model's row (then the outer momentum
    /// and the average), the last outer round stepped, the outer steps so far, and which
    /// workers are in the outer ring (ring 1) rather than the sparse one (ring 0).
    #[serde(default)]
    outer: Option<DilocoConfig>,
    #[serde(default)]
    global: usize,
    #[serde(default)]
    stepped: Option<u64>,
    #[serde(default)]
    outer_steps: u64,
    #[serde(default)]
    in_outer: Vec<bool>,
}

impl Sparta {
    /// A new instance for `n` workers, its shared stream from `seed`.
    pub fn new(cfg: &SpartaConfig, n: usize, seed: u64) -> Self {
        Sparta {
            p: cfg.p,
            interval: u64::from(cfg.interval.max(1)),
            grads: vec![None; n],
            steps: vec![0; n],
            rounds: RingRound::default(),
            // One stream for the run, shared by every worker (id n: after the workers' own).
            shared: stream(seed, StreamKind::Algorithm, n as u64),
            drawn: Vec::new(),
            drawn_for: None,
            averaged: None,
            averagings: 0,
            outer: cfg.outer(),
            global: 0,
            stepped: None,
            outer_steps: 0,
            in_outer: vec![false; n],
        }
    }

    /// DiLoCo outer steps taken so far (with `inner_steps`).
    pub fn outer_steps(&self) -> u64 {
        self.outer_steps
    }

    /// The global model's row, with `inner_steps` (valid once the run started); the outer
    /// momentum's is the next.
    pub fn global_row(&self) -> usize {
        self.global
    }

    /// Whether `w` has just ended a round of `inner_steps` steps: its DiLoCo outer ring is due.
    fn outer_due(&self, w: usize) -> bool {
        self.outer
            .as_ref()
            .is_some_and(|o| self.steps[w].is_multiple_of(u64::from(o.inner_steps)))
    }

    /// `w` joins the outer ring, or starts its next step.
    fn after_averaging(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        if self.outer_due(w) {
            self.in_outer[w] = true;
            self.rounds.join(1, w, cx, Event::RingDone);
        } else {
            self.begin(w, cx);
        }
    }

    /// The coordinates the current (or last) round averages.
    pub fn drawn(&self) -> &[usize] {
        &self.drawn
    }

    /// Averagings done so far.
    pub fn averagings(&self) -> u64 {
        self.averagings
    }

    fn begin(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        self.grads[w] = Some(cx.start_step(w, Event::ComputeDone(w)));
    }

    /// Draws round `round`'s coordinates (each parameter with probability `p`, the running
    /// statistics never) and sizes the ring for their values.
    fn draw(&mut self, round: u64, cx: &mut Ctx<'_, '_, Event>) {
        if self.drawn_for == Some(round) {
            return;
        }
        let params = cx.world.store.num_params();
        let state = cx.world.store.state();
        self.drawn.clear();
        let gaps = Geometric::new(self.p).expect("p in (0, 1] (checked)");
        let mut i = gaps.sample(&mut self.shared);
        while let Ok(at) = usize::try_from(i)
            && at < params
        {
            if !state.contains(&at) {
                self.drawn.push(at);
            }
            i = i.saturating_add(1 + gaps.sample(&mut self.shared));
        }
        self.drawn_for = Some(round);
        let bytes = cx.world.net.payload_bytes(self.drawn.len());
        self.rounds.ring_mut(0).resize(&[bytes]);
    }

    /// `x_w[I] ← mean_j x_j[I]` for every worker `w`, on the host.
    fn average(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        let n = self.grads.len();
        let store = &mut cx.world.store;
        if store.computes() && !self.drawn.is_empty() {
            let mut rows: Vec<Vec<f64>> = (0..n)
                .map(|w| {
                    let m = store.new_msg(&[(Slot::Row(w), 1.0)]);
                    let v = store.msg_values(m);
                    store.release_msg(m);
                    v
                })
                .collect();
            for &i in &self.drawn {
                let mean = rows.iter().map(|r| r[i]).sum::<f64>() / n as f64;
                for r in &mut rows {
                    r[i] = mean;
                }
            }
            for (w, r) in rows.iter().enumerate() {
                let m = store.msg_from_values(r);
                store.mix(w, &[(Slot::Msg(m), 1.0)]);
                store.release_msg(m);
            }
        }
        // Each worker gathers its |I| values and scatters the mean back.
        let k = self.drawn.len() as u64;
        for w in 0..n {
            cx.host_work(w, HostWork::touch(2 * k));
        }
        self.averagings += 1;
    }
}

impl RoundMethod<Event> for Sparta {
    fn rounds(&mut self) -> &mut RingRound {
        &mut self.rounds
    }

    fn ring_of(&self, done: Done) -> usize {
        usize::from(self.in_outer[done.worker])
    }

    fn computed(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let g = self.grads[w].take().expect("a gradient in flight");
        local_step(w, g, cx);
        self.steps[w] += 1;
        if self.steps[w].is_multiple_of(self.interval) {
            let round = self.rounds.ring(0).round(w);
            self.draw(round, cx);
            self.rounds.join(0, w, cx, Event::RingDone);
        } else {
            self.after_averaging(w, cx);
        }
    }

    fn ring_done(&mut self, w: usize, round: u64, cx: &mut Ctx<'_, '_, Event>) {
        if self.in_outer[w] {
            // DiLoCo's outer step, once per round, when the first worker's ring completes.
            self.in_outer[w] = false;
            if self.stepped != Some(round) {
                let outer = self.outer.as_ref().expect("an outer ring only with DiLoCo");
                outer_step_from(
                    outer,
                    &mut cx.world.store,
                    self.global,
                    self.grads.len(),
                    false,
                );
                self.stepped = Some(round);
                self.outer_steps += 1;
            }
            let params = cx.world.store.num_params() as u64;
            cx.host_work(w, outer::step_work(outer::sgd::VALUES_TOUCHED, params));
            self.begin(w, cx);
            return;
        }
        if self.averaged != Some(round) {
            self.average(cx);
            self.averaged = Some(round);
        }
        self.after_averaging(w, cx);
    }
}

impl Algorithm for Sparta {
    type Event = Event;

    fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        self.rounds.add(self.grads.len(), &[0]);
        if self.outer.is_some() {
            // DiLoCo's rows and its model ring (ring 1).
            let store = &mut cx.world.store;
            self.global = store.add_rows(3);
            let m = self.global + 1;
            store.mix(m, &[(Slot::Row(m), 0.0)]);
            self.rounds.add_model(cx.world);
        }
        for w in 0..self.grads.len() {
            self.begin(w, cx);
        }
    }

    fn handle(&mut self, event: Event, cx: &mut Ctx<'_, '_, Event>) {
        dispatch(self, event, cx);
    }

    fn waiting(&self) -> Vec<String> {
        self.rounds.waiting()
    }

    fn series(&mut self) -> Vec<(&'static str, f64)> {
        vec![("averaged_coordinates", self.drawn.len() as f64)]
    }

    fn on_fault(&mut self, fault: WorkerFault, cx: &mut Ctx<'_, '_, Event>) {
        if let WorkerFault::Crash(w) = fault {
            if let Some(g) = self.grads[w].take() {
                cx.world.store.release_gradient(g);
            }
            self.rounds.crash(w, cx.now());
        }
    }
}

impl AlgorithmSpec for SpartaConfig {
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        self.check(setup.path)
    }

    fn extra_rows(&self) -> usize {
        if self.inner_steps.is_some() { 3 } else { 0 }
    }

    fn uses_topology(&self) -> bool {
        false
    }

    fn fault_support(&self, _kind: &'static str, fault: FaultKind) -> FaultSupport {
        ring_support(fault)
    }

    fn build(&self, _kind: &'static str, world: &World<'_>) -> crate::Result<Box<dyn Runnable>> {
        Ok(Box::new(Sparta::new(self, world.workers(), world.seed)))
    }
}
