//! Streaming DiLoCo: DiLoCo whose model is synchronised one fragment at a time, each fragment's
//! outer gradient all-reduced while the workers go on computing, optionally quantized.
//!
//! Douillard, Donchev, Rush, Kale, Charles, Garrett, Teston, Lacey, McIlroy, Shen, Ramé, Szlam,
//! Ranzato & Barham, "Streaming DiLoCo with overlapping communication: Towards a Distributed
//! Free Lunch", arXiv:2501.18512 (2025), Algorithm 2; the reference implementation is torchft's
//! `DiLoCo` (`torchft/local_sgd.py`, `fragment_sync_delay` τ, `fragment_update_alpha` α,
//! `should_quantize`).
//!
//! ```text
//! paper (replica m, inner step t)                  dasim (worker w, after its inner step t ≥ 1)
//! θ_m ← InnerOpt(θ_m, ∇L)                          the worker's optimizer step   (compute time)
//! for each fragment p:                             1. fragment p due for merging at t (sent at
//!   if t − t_p ≡ τ (mod H):                           t − τ): wait for its all-reduce if it has
//!     block-receive Δ_p                               not arrived, then merge (below)
//!     θ̃_p ← OuterOpt(θ_p, Δ_p)                     2. fragment p due for sending at t
//!     θ_{m,p} ← α·θ_{m,p} + (1 − α)·θ̃_p              (t ≡ o_p mod H): Δ_{w,p} = θ_p − θ_{w,p},
//!   if t − t_p ≡ 0 (mod H):                           quantized, enters fragment p's ring
//!     Δ_{m,p} ← θ_p − θ_{m,p}                        all-reduce (over the network, in the
//!     Δ_p ← async-send (1/M) Σ_m Δ_{m,p}             background)
//!                                                  3. τ = 0: merge p at once (wait for it)
//!                                                  4. the next inner step
//! ```
//!
//! θ_p is the global model's fragment `p` (one row, the same on every worker, `θ̃_p` once the
//! outer step took it). The outer step on fragment `p` is DiLoCo's ([`super::diloco`]): torch's
//! `SGD(lr = η, momentum = μ, nesterov)` on the fragment's coordinates only, `m_p ← μ·m_p + Δ_p`,
//! `θ_p ← θ_p − η·(Δ_p + μ·m_p)`; it is taken once per round of fragment `p`, when the first
//! worker's ring completes (every worker has contributed then; the outer gradients were read at
//! each worker's send, so later steps of the workers do not enter them). A worker merges at its
//! merge step, `τ` inner steps after its send: `θ_{w,p} ← α·θ_{w,p} + (1 − α)·θ_p` (`mixing` α;
//! 0 by default, torchft's, which adopts the global fragment; the paper's is 0.5).
//!
//! **Defaults** are torchft's (`fragment_update_alpha = 0`, `fragment_sync_delay = 0`, no
//! quantization, one fragment): an entry that sets none of `fragments`, `overlap_steps`,
//! `mixing` and `outer_bits` is DiLoCo. The paper's setting (strided `P > 1`, `τ ≥ 1`, 4-bit
//! outer gradients, `α = 0.5`) is what `scenarios/streaming-diloco.toml` writes out.
//!
//! **Schedule.** Fragment `p = 0, …, P − 1` is sent after inner steps `o_p, o_p + H, o_p + 2H, …`
//! with `o_p = ⌊(p + 1)·H/P⌋`: the paper's `t_p = p·H/P` (`p = 1, …, P`) and torchft's
//! `fragment_sync_offset`, so the last fragment is synchronised at `H, 2H, …` as DiLoCo's model,
//! and the others are staggered `H/P` steps apart; each is sent once per `H` steps per worker.
//! `τ < H/P` (`overlap_steps · fragments < inner_steps`, as torchft requires): a fragment is
//! merged before the next one is sent (at the same step, the merge comes first), so each worker
//! has at most one fragment in flight. A worker blocks only if it reaches the merge step before
//! its ring completes; until then communication overlaps compute.
//!
//! **Fragments.** A fragment is a set of whole layers ([`ReplicaStore::layers`], the trainable
//! ones; the running-statistics layer is not one): the paper's *strided* pattern by default
//! (`pattern = "strided"`: layer `k` in fragment `k mod P`, the paper's choice), or
//! *sequential* (`P` runs of consecutive layers, as [`crate::store::blocks`] splits them). A
//! model of one layer (the analytic problems, which have no layers) is split into `P`
//! contiguous coordinate blocks instead. `P` is at most the number of layers (`dasim validate`
//! refuses more, at `fragments`, before anything runs). Running statistics (batch norm) travel
//! with the last fragment and, as in DiLoCo, the global model takes the exact mean of the
//! workers' (as each sent them): no outer step, and no quantization (below).
//!
//! **Quantization** (`outer_bits` `b < 32`). Each worker's outer gradient on the fragment is
//! quantized before it is sent, and the reduced mean again before it is gathered (a ring
//! reduces in full precision and carries `b`-bit values, as torchft's quantized all-reduce),
//! with [`quantize`]: a uniform symmetric quantizer, one scale per fragment, over its trainable
//! coordinates only. The last fragment's running statistics travel beside them in full
//! precision, each worker's own: their global value is the exact mean, and a large change of a
//! running variance cannot set the weights' scale (which at 4 bits would round their outer
//! gradients to zero; `tests/streaming_diloco.rs`). The paper quantizes to 4-bit floats (E3M0,
//! whose levels are powers of two); dasim's levels are uniform (see the book's chapter). A
//! fragment of `c` trainable parameters and `r` running statistics (`r > 0` only for the last
//! fragment of a model with state) is a payload of `⌈c·b/8⌉ + v + r·v` bytes (`v` the bytes of
//! one value: the scale, and each statistic at full width); `b = 32` is no quantization,
//! `(c + r)·v` bytes as every model message. Each fragment has its own ring ([`super::ring`]):
//! `2(n − 1)` chunks of `⌈bytes/n⌉` per worker and round. Sizes depend on the options only,
//! never on values.
//!
//! **Reduction.** With `fragments = 1`, `overlap_steps = 0`, `mixing = 0` and `outer_bits = 32`
//! every step of DiLoCo is taken on the same values, with the same events, messages and
//! activities: a worker sends after every `H` steps, waits for the ring, and adopts the global
//! model. One difference remains: DiLoCo sets every worker to the global model when the first
//! ring completes, Streaming DiLoCo each worker when its own ring completes (when it learns the
//! result), so between the two the workers' consensus distance differs
//! (`tests/streaming_diloco.rs`).
//!
//! **Rows.** The global model, the outer momentum, the outer average `a = θ − Δ` and a scratch
//! row are four store rows after the workers'; each worker's contribution to the round under
//! way is a message buffer. Evaluation points measure the global model, as DiLoCo's.
//!
//! **Activities** ([`crate::record`]): a worker computes during its inner steps, also while its
//! fragment is all-reduced. At a merge step whose ring has not completed it is blocked while a
//! worker has yet to contribute (the wait attributed to the last contributor), then
//! communicates until its ring completes.
//!
//! **Under faults** (as DiLoCo): a crashed worker abandons its step, and a crash or a chunk lost
//! on the network breaks the rings for good (a crash all of them, a lost chunk its fragment's);
//! the others compute up to their next merge step of a broken ring and wait there, and the run
//! stops as stalled. A crash with `rejoin_after_s` is refused.
//!
//! **Host work** ([`crate::cluster::host`]), per worker and fragment of `f` coordinates: `5f`
//! values touched to form and quantize its outer gradient before the ring (quantized only), the
//! outer step `5f` (`8f` with the mean quantized again) when the ring completes, and the merge
//! `3f` (`2f` with α = 0).
//!
//! **Invariants**: the global model's fragment `p` changes only at fragment `p`'s outer steps;
//! each worker sends each fragment once per `H` steps; after a merge with `α = 0` the worker's
//! fragment equals the global one.

use serde::{Deserialize, Serialize};
use std::ops::Range;

use super::diloco::{
    DilocoConfig, default_inner_steps, default_nesterov, default_outer_lr, default_outer_momentum,
};
use super::ring::{
    Barrier, Done, RingRound, RoundEvent, RoundMethod, dispatch, local_step, ring_support,
};
use crate::algorithm::{Algorithm, Ctx, World};
use crate::algorithms::{AlgorithmSpec, Runnable, Setup};
use crate::cluster::HostWork;
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport, WorkerFault};
use crate::record::Activity;
use crate::store::optim::outer;
use crate::store::{GradId, Layer, MsgId, ReplicaStore, Slot, blocks};

fn default_fragments() -> u32 {
    1
}

/// torchft's `fragment_update_alpha = 0.0`: with the other defaults (`P = 1`, `τ = 0`, 32 bits),
/// an entry that sets none of the streaming options is DiLoCo.
fn default_mixing() -> f64 {
    0.0
}

fn default_outer_bits() -> u32 {
    32
}

/// How layers are grouped into fragments.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FragmentPattern {
    /// Layer `k` in fragment `k mod P` (the paper's choice).
    #[default]
    Strided,
    /// `P` runs of consecutive layers.
    Sequential,
}

/// Options of Streaming DiLoCo.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamingDilocoConfig {
    /// Inner steps between two synchronisations of a fragment, `H ≥ 1` (default 500, DiLoCo's).
    #[serde(default = "default_inner_steps")]
    pub inner_steps: u32,
    /// The outer learning rate η (default 0.7, DiLoCo's).
    #[serde(default = "default_outer_lr")]
    pub outer_lr: f64,
    /// The outer momentum μ, in `[0, 1)` (default 0.9).
    #[serde(default = "default_outer_momentum")]
    pub outer_momentum: f64,
    /// Nesterov momentum in the outer step (default true).
    #[serde(default = "default_nesterov")]
    pub nesterov: bool,
    /// Fragments `P ≥ 1`, each a set of whole layers, at most the model's layers (default 1).
    #[serde(default = "default_fragments")]
    pub fragments: u32,
    /// How layers are grouped into fragments (default strided, the paper's).
    #[serde(default)]
    pub pattern: FragmentPattern,
    /// τ: inner steps between sending a fragment's outer gradient and merging the result,
    /// `τ·P < H` (default 0: merge at once, waiting for the all-reduce).
    #[serde(default)]
    pub overlap_steps: u32,
    /// α: a merged fragment is `α·local + (1 − α)·global`, in `[0, 1]` (default 0.5, the
    /// paper's).
    #[serde(default = "default_mixing")]
    pub mixing: f64,
    /// Bits per value of the communicated outer gradients, `1..=32`; 32 is no quantization
    /// (default 32; the paper's is 4).
    #[serde(default = "default_outer_bits")]
    pub outer_bits: u32,
}

impl Default for StreamingDilocoConfig {
    fn default() -> Self {
        StreamingDilocoConfig {
            inner_steps: default_inner_steps(),
            outer_lr: default_outer_lr(),
            outer_momentum: default_outer_momentum(),
            nesterov: default_nesterov(),
            fragments: default_fragments(),
            pattern: FragmentPattern::default(),
            overlap_steps: 0,
            mixing: default_mixing(),
            outer_bits: default_outer_bits(),
        }
    }
}

impl StreamingDilocoConfig {
    /// The options the outer step shares with DiLoCo.
    pub fn outer(&self) -> DilocoConfig {
        DilocoConfig {
            inner_steps: self.inner_steps,
            outer_lr: self.outer_lr,
            outer_momentum: self.outer_momentum,
            nesterov: self.nesterov,
        }
    }

    fn check(&self, path: &str, params: Option<usize>) -> Result<(), ConfigError> {
        self.outer().check(path)?;
        let (h, p) = (self.inner_steps, self.fragments);
        if p == 0 {
            return Err(ConfigError::new(
                &format!("{path}.fragments"),
                "fragments must be at least 1",
            )
            .hint("fragments = 1 synchronises the whole model at once, as DiLoCo"));
        }
        if p > h {
            return Err(ConfigError::new(
                &format!("{path}.fragments"),
                format!(
                    "{p} fragments cannot be synchronised at distinct steps of inner_steps = {h}"
                ),
            )
            .hint("fragments are sent H/P steps apart: use at most inner_steps fragments"));
        }
        if let Some(params) = params
            && p as usize > params
        {
            return Err(ConfigError::new(
                &format!("{path}.fragments"),
                format!("{p} fragments for a model of {params} parameters"),
            )
            .hint("each fragment needs at least one layer"));
        }
        if u64::from(self.overlap_steps) * u64::from(p) >= u64::from(h) {
            return Err(ConfigError::new(
                &format!("{path}.overlap_steps"),
                format!(
                    "overlap_steps = {} must be less than inner_steps / fragments = {h}/{p}",
                    self.overlap_steps
                ),
            )
            .hint(
                "a fragment must be merged before the next one is sent (τ < H/P, as torchft's \
                 fragment_sync_delay); the paper overlaps a few steps, e.g. 1 to 5",
            ));
        }
        if !(0.0..=1.0).contains(&self.mixing) {
            return Err(ConfigError::new(
                &format!("{path}.mixing"),
                format!("mixing must be in [0, 1], not {}", self.mixing),
            )
            .hint("mixing is α, the local share of a merged fragment: the paper's 0.5; 0 adopts the global fragment"));
        }
        if !(1..=32).contains(&self.outer_bits) {
            return Err(ConfigError::new(
                &format!("{path}.outer_bits"),
                format!("outer_bits must be in 1..=32, not {}", self.outer_bits),
            )
            .hint("the paper sends 4-bit outer gradients; 32 sends them unquantized"));
        }
        Ok(())
    }

    /// The inner step after which fragment `p` is first sent: `⌊(p + 1)·H/P⌋`, in `1..=H`.
    pub fn offsets(&self) -> Vec<u64> {
        let (h, p) = (
            u64::from(self.inner_steps),
            u64::from(self.fragments.max(1)),
        );
        (1..=p).map(|k| k * h / p).collect()
    }

    /// The coordinates of each fragment, for a model with `layers` whose running statistics
    /// are `state` (the last fragment gets them), or why the model cannot be split so. `path` is
    /// the entry's, for the error.
    pub fn fragments_of(
        &self,
        layers: &[Layer],
        state: Range<usize>,
        path: &str,
    ) -> Result<Vec<Vec<Range<usize>>>, ConfigError> {
        let p = self.fragments.max(1) as usize;
        let end = state.start;
        let units: Vec<Range<usize>> = layers
            .iter()
            .map(|l| l.params.start..l.params.end.min(end))
            .filter(|r| !r.is_empty())
            .collect();
        let units = if units.len() > 1 {
            units
        } else {
            // A model of one layer: contiguous coordinate blocks.
            blocks(end, p)
                .into_iter()
                .filter(|r| !r.is_empty())
                .collect()
        };
        if units.len() < p {
            return Err(ConfigError::new(
                &format!("{path}.fragments"),
                format!(
                    "{p} fragments for a model of {} layers (fragments are made of whole layers)",
                    units.len()
                ),
            )
            .hint(format!("use at most {} fragments", units.len())));
        }
        let mut fragments: Vec<Vec<Range<usize>>> = vec![Vec::new(); p];
        match self.pattern {
            FragmentPattern::Strided => {
                for (k, u) in units.into_iter().enumerate() {
                    fragments[k % p].push(u);
                }
            }
            FragmentPattern::Sequential => {
                for (f, run) in blocks(units.len(), p).into_iter().enumerate() {
                    fragments[f].extend(units[run].iter().cloned());
                }
            }
        }
        if !state.is_empty() {
            fragments[p - 1].push(state);
        }
        // Adjacent ranges as one.
        for f in &mut fragments {
            let mut merged: Vec<Range<usize>> = Vec::with_capacity(f.len());
            for r in f.drain(..) {
                match merged.last_mut() {
                    Some(last) if last.end == r.start => last.end = r.end,
                    _ => merged.push(r),
                }
            }
            *f = merged;
        }
        Ok(fragments)
    }

    /// Payload bytes of one fragment of `weights` trainable coordinates and `state` running
    /// statistics on `world`'s network: quantized, `⌈weights·b/8⌉`, one value for the scale and
    /// the statistics at full width (`state` values); else `weights + state` values.
    pub fn fragment_bytes(&self, world: &World<'_>, weights: usize, state: usize) -> u64 {
        if self.outer_bits >= 32 {
            world.net.payload_bytes(weights + state)
        } else {
            let bits = weights as u64 * u64::from(self.outer_bits);
            let values = 1 + state as u64;
            world
                .net
                .scaled_payload(bits.div_ceil(8) + values * world.net.value_bytes())
        }
    }
}

/// The trainable coordinates of `fragment`: its ranges without the running statistics `state`
/// (the row's suffix `T..`), which are never quantized.
fn weights_of(fragment: &[Range<usize>], state: &Range<usize>) -> Vec<Range<usize>> {
    fragment
        .iter()
        .map(|r| r.start..r.end.min(state.start))
        .filter(|r| !r.is_empty())
        .collect()
}

/// Quantizes the coordinates `coords` of `values` in place to `bits` bits per value (`1..=31`),
/// with one scale `s`, returned: for `b ≥ 2` the `2L + 1` uniform levels `s·k/L`,
/// `|k| ≤ L = 2^(b−1) − 1`, with `s = max |x|` and rounding to the nearest level (ties away
/// from zero), so `|x − Q(x)| ≤ s/(2L)`; for `b = 1`, `s·sign(x)` with `s` the mean `|x|`
/// (`sign(0) = +1`, as the `sign` compressor). An all-zero input stays zero. A function of the
/// values alone: deterministic, no random rounding.
pub fn quantize(values: &mut [f64], coords: &[Range<usize>], bits: u32) -> f64 {
    let all = || coords.iter().flat_map(|r| r.clone());
    let count = all().count();
    if bits >= 32 || count == 0 {
        return 0.0;
    }
    if bits == 1 {
        let s = all().map(|j| values[j].abs()).sum::<f64>() / count as f64;
        for j in all() {
            values[j] = if values[j] >= 0.0 { s } else { -s };
        }
        return s;
    }
    let s = all().map(|j| values[j].abs()).fold(0.0, f64::max);
    if s == 0.0 {
        return s;
    }
    let levels = ((1u64 << (bits - 1)) - 1) as f64;
    for j in all() {
        values[j] = (values[j] / s * levels).round() * s / levels;
    }
    s
}

/// Events of Streaming DiLoCo: a worker's gradient computed, a worker's ring all-reduce of its
/// fragment in flight completed.
pub type Event = RoundEvent;

/// A fragment a worker has sent and not yet merged.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct InFlight {
    fragment: usize,
    /// The inner step after which it is merged.
    merge_at: u64,
    /// Its ring completed for this worker.
    received: bool,
    /// Every worker has contributed to its round: the ring is under way.
    launched: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct WorkerState {
    grad: Option<GradId>,
    /// Inner steps taken in all.
    step: u64,
    /// The step after which it last sent a fragment.
    sent_at: Option<u64>,
    in_flight: Option<InFlight>,
    /// Waiting at its merge step for the ring.
    waiting: bool,
}

/// The state machine of Streaming DiLoCo.
#[derive(Serialize, Deserialize)]
pub struct StreamingDiloco {
    cfg: StreamingDilocoConfig,
    workers: Vec<WorkerState>,
    /// The coordinates of each fragment (known once the run started).
    fragments: Vec<Vec<Range<usize>>>,
    offsets: Vec<u64>,
    /// One ring per fragment.
    rounds: RingRound,
    /// Per fragment, per worker: its contribution to the round under way.
    sent: Vec<Vec<Option<MsgId>>>,
    /// Per fragment: the last round whose outer step was taken.
    stepped: Vec<Option<u64>>,
    /// Per fragment: outer steps taken.
    syncs: Vec<u64>,
    /// Per worker, per fragment: sends and merges.
    sends: Vec<Vec<u64>>,
    merges: Vec<Vec<u64>>,
    /// The global model's row; the outer momentum's, the average's and a scratch row follow.
    global: usize,
    /// Whether outer gradients are quantized (fewer than 32 bits, on a store that computes).
    quantized: bool,
    /// Outer steps taken, over all fragments.
    outer_steps: u64,
}

impl StreamingDiloco {
    /// A new instance for `n` workers.
    pub fn new(cfg: &StreamingDilocoConfig, n: usize) -> Self {
        StreamingDiloco {
            cfg: cfg.clone(),
            workers: vec![
                WorkerState {
                    grad: None,
                    step: 0,
                    sent_at: None,
                    in_flight: None,
                    waiting: false,
                };
                n
            ],
            fragments: Vec::new(),
            offsets: cfg.offsets(),
            rounds: RingRound::default(),
            sent: Vec::new(),
            stepped: Vec::new(),
            syncs: Vec::new(),
            sends: Vec::new(),
            merges: Vec::new(),
            global: 0,
            quantized: false,
            outer_steps: 0,
        }
    }

    /// The global model's row (valid once the run started).
    pub fn global_row(&self) -> usize {
        self.global
    }

    /// The outer momentum's row (valid once the run started).
    pub fn momentum_row(&self) -> usize {
        self.global + 1
    }

    fn average_row(&self) -> usize {
        self.global + 2
    }

    fn scratch_row(&self) -> usize {
        self.global + 3
    }

    /// Outer steps taken so far, over all fragments.
    pub fn outer_steps(&self) -> u64 {
        self.outer_steps
    }

    /// The coordinates of each fragment (known once the run started).
    pub fn fragments(&self) -> &[Vec<Range<usize>>] {
        &self.fragments
    }

    /// Outer steps taken so far on fragment `f`.
    pub fn syncs(&self, f: usize) -> u64 {
        self.syncs[f]
    }

    /// Inner steps `worker` has taken.
    pub fn steps(&self, worker: usize) -> u64 {
        self.workers[worker].step
    }

    /// How many times `worker` has sent each fragment.
    pub fn sends(&self, worker: usize) -> &[u64] {
        &self.sends[worker]
    }

    /// How many times `worker` has merged each fragment.
    pub fn merges(&self, worker: usize) -> &[u64] {
        &self.merges[worker]
    }

    /// Whether `worker` waits at a merge step for its fragment's all-reduce.
    pub fn is_waiting(&self, worker: usize) -> bool {
        self.workers[worker].waiting
    }

    /// The fragment sent after inner step `t`, if any.
    fn fragment_at(&self, t: u64) -> Option<usize> {
        if t == 0 {
            return None;
        }
        let h = u64::from(self.cfg.inner_steps);
        let r = (t - 1) % h + 1;
        self.offsets.iter().position(|&o| o == r)
    }

    /// Whether fragment `f` carries the running statistics `state` (the last one, if any).
    fn holds_state(&self, f: usize, state: &Range<usize>) -> bool {
        f + 1 == self.fragments.len() && !state.is_empty()
    }

    /// Whether fragment `f` is the whole row.
    fn whole(&self, f: usize, params: usize) -> bool {
        matches!(&self.fragments[f][..], [r] if *r == (0..params))
    }

    fn begin(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        self.workers[w].grad = Some(cx.start_step(w, Event::ComputeDone(w)));
    }

    /// After inner step `t`: merge the fragment due (waiting for it if need be), send the
    /// fragment due, and go on with the next step.
    fn advance(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        loop {
            let t = self.workers[w].step;
            if let Some(f) = &self.workers[w].in_flight
                && f.merge_at == t
            {
                if !f.received {
                    let launched = f.launched;
                    self.workers[w].waiting = true;
                    if launched {
                        cx.activity(w, Activity::Communicate);
                    } else {
                        cx.block(w);
                    }
                    return;
                }
                let f = self.in_flight(w);
                self.merge(w, &mut cx.world.store);
                // The merge reads the worker's and the global fragment and writes the worker's
                // (α = 0: a copy, one read and one write).
                let per = if self.cfg.mixing == 0.0 { 2 } else { 3 };
                cx.host_work(w, HostWork::touch(per * self.coords(f)));
                continue;
            }
            if self.workers[w].sent_at != Some(t)
                && let Some(f) = self.fragment_at(t)
            {
                self.send(w, f, cx);
                continue;
            }
            break;
        }
        self.begin(w, cx);
    }

    /// `w` sends fragment `f`: its outer gradient, read now, enters the fragment's ring.
    fn send(&mut self, w: usize, f: usize, cx: &mut Ctx<'_, '_, Event>) {
        let t = self.workers[w].step;
        debug_assert!(
            self.workers[w].in_flight.is_none(),
            "τ < H/P: one fragment in flight"
        );
        let store = &mut cx.world.store;
        let msg = if self.quantized {
            // Δ_{w,f} = θ − θ_w on the fragment's weights, quantized under their own scale; the
            // running statistics (the last fragment's) are the worker's own, in full precision.
            let g = self.global;
            let state = store.state();
            let d = store.new_msg(&[(Slot::Row(g), 1.0), (Slot::Row(w), -1.0)]);
            let mut values = store.msg_values(d);
            store.release_msg(d);
            quantize(
                &mut values,
                &weights_of(&self.fragments[f], &state),
                self.cfg.outer_bits,
            );
            if self.holds_state(f, &state) {
                let own = store.new_msg(&[(Slot::Row(w), 1.0)]);
                let row = store.msg_values(own);
                store.release_msg(own);
                values[state.clone()].copy_from_slice(&row[state]);
            }
            store.msg_from_values(&values)
        } else {
            store.new_msg(&[(Slot::Row(w), 1.0)])
        };
        if self.quantized {
            // Δ formed (two reads, one write), its scale found and the values rounded (one
            // read, one write), before the fragment enters the ring.
            cx.host_work(w, HostWork::touch(5 * self.coords(f)));
        }
        self.sent[f][w] = Some(msg);
        self.sends[w][f] += 1;
        self.workers[w].sent_at = Some(t);
        self.workers[w].in_flight = Some(InFlight {
            fragment: f,
            merge_at: t + u64::from(self.cfg.overlap_steps),
            received: false,
            launched: false,
        });
        let barrier = self.rounds.ring_mut(f).ready_all(w, cx, Event::RingDone);
        if let Some(Barrier::Last(waiters)) = barrier {
            for v in waiters {
                if let Some(i) = &mut self.workers[v].in_flight {
                    i.launched = true;
                }
                if self.workers[v].waiting {
                    cx.unblock(v, w, Activity::Communicate);
                }
            }
            if let Some(i) = &mut self.workers[w].in_flight {
                i.launched = true;
            }
        }
    }

    /// The outer step on fragment `f`, from every worker's contribution to the round.
    fn outer_step(&mut self, f: usize, store: &mut crate::store::tracked::Tracked<'_>) {
        let n = self.workers.len();
        let (g, a, t) = (self.global, self.average_row(), self.scratch_row());
        let msgs: Vec<MsgId> = self.sent[f]
            .iter_mut()
            .map(|m| m.take().expect("every worker contributed"))
            .collect();
        let share = 1.0 / n as f64;
        let terms: Vec<(Slot, f64)> = msgs.iter().map(|&m| (Slot::Msg(m), share)).collect();
        let state = store.state();
        if self.quantized {
            // The mean of the quantized outer gradients, quantized again (the weights only) for
            // the gather; then a = θ − Δ. The running statistics' mean is exact: the mean of the
            // workers' own, as unquantized.
            let d = store.new_msg(&terms);
            let mut values = store.msg_values(d);
            store.release_msg(d);
            quantize(
                &mut values,
                &weights_of(&self.fragments[f], &state),
                self.cfg.outer_bits,
            );
            let q = store.msg_from_values(&values);
            store.mix(a, &[(Slot::Row(g), 1.0), (Slot::Msg(q), -1.0)]);
            store.release_msg(q);
            if self.holds_state(f, &state) {
                store.mix(t, &terms);
                store.copy_block(a, t, state.clone());
            }
        } else {
            store.mix(a, &terms);
        }
        for m in msgs {
            store.release_msg(m);
        }
        let outer = self.cfg.outer().outer_sgd();
        let rows = [g, self.momentum_row(), a];
        if self.whole(f, store.num_params()) {
            outer.step(store, rows, None);
        } else {
            outer.step(store, rows, Some((t, &self.fragments[f])));
        }
        // Running statistics are averaged, not extrapolated.
        if self.holds_state(f, &state) {
            store.copy_block(g, a, state);
        }
        self.syncs[f] += 1;
        self.outer_steps += 1;
    }

    /// `w` merges its fragment in flight: `α·θ_w + (1 − α)·θ` on its coordinates.
    fn merge(&mut self, w: usize, store: &mut crate::store::tracked::Tracked<'_>) {
        let f = self.workers[w]
            .in_flight
            .take()
            .expect("a fragment in flight")
            .fragment;
        let (g, t) = (self.global, self.scratch_row());
        let alpha = self.cfg.mixing;
        let whole = self.whole(f, store.num_params());
        let mixed = [(Slot::Row(w), alpha), (Slot::Row(g), 1.0 - alpha)];
        match (alpha == 0.0, whole) {
            (true, true) => store.mix(w, &[(Slot::Row(g), 1.0)]),
            (true, false) => {
                for b in &self.fragments[f] {
                    store.copy_block(w, g, b.clone());
                }
            }
            (false, true) => store.mix(w, &mixed),
            (false, false) => {
                store.mix(t, &mixed);
                for b in &self.fragments[f] {
                    store.copy_block(w, t, b.clone());
                }
            }
        }
        self.merges[w][f] += 1;
    }

    /// Coordinates of fragment `f`.
    fn coords(&self, f: usize) -> u64 {
        self.fragments[f].iter().map(|r| r.len() as u64).sum()
    }

    /// The fragment `w` has in flight.
    fn in_flight(&self, w: usize) -> usize {
        self.workers[w]
            .in_flight
            .as_ref()
            .expect("a ring completes for a fragment in flight")
            .fragment
    }
}

impl RoundMethod<Event> for StreamingDiloco {
    fn rounds(&mut self) -> &mut RingRound {
        &mut self.rounds
    }

    fn ring_of(&self, done: Done) -> usize {
        self.in_flight(done.worker)
    }

    fn computed(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let g = self.workers[w].grad.take().expect("a gradient in flight");
        local_step(w, g, cx);
        self.workers[w].step += 1;
        self.advance(w, cx);
    }

    fn ring_done(&mut self, w: usize, round: u64, cx: &mut Ctx<'_, '_, Event>) {
        let f = self.in_flight(w);
        if self.stepped[f] != Some(round) {
            self.outer_step(f, &mut cx.world.store);
            self.stepped[f] = Some(round);
        }
        // Every worker takes the fragment's outer step on its own copy (the mean quantized
        // again first, when quantized): before its next inner step.
        let requantize = if self.quantized { 3 } else { 0 };
        let values = (outer::sgd::VALUES_TOUCHED + requantize) * self.coords(f);
        cx.host_work(w, HostWork::touch(values));
        if let Some(i) = &mut self.workers[w].in_flight {
            i.received = true;
        }
        if self.workers[w].waiting {
            self.workers[w].waiting = false;
            self.advance(w, cx);
        }
    }
}

impl Algorithm for StreamingDiloco {
    type Event = Event;

    fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        let n = self.workers.len();
        let store = &mut cx.world.store;
        self.fragments = self
            .cfg
            .fragments_of(&store.layers(), store.state(), "algorithms")
            .unwrap_or_else(|e| panic!("unchecked options: {e}"));
        self.quantized = self.cfg.outer_bits < 32 && store.computes();
        // Added rows copy row 0: every worker's initial model, so the global model; the
        // momentum starts at zero.
        self.global = store.add_rows(4);
        let m = self.momentum_row();
        store.mix(m, &[(Slot::Row(m), 0.0)]);
        let p = self.fragments.len();
        let state = cx.world.store.state();
        for f in 0..p {
            let weights = weights_of(&self.fragments[f], &state)
                .iter()
                .map(|r| r.len())
                .sum();
            let stats = if self.holds_state(f, &state) {
                state.len()
            } else {
                0
            };
            self.rounds
                .add(n, &[self.cfg.fragment_bytes(cx.world, weights, stats)]);
        }
        self.sent = vec![vec![None; n]; p];
        self.stepped = vec![None; p];
        self.syncs = vec![0; p];
        self.sends = vec![vec![0; p]; n];
        self.merges = vec![vec![0; p]; n];
        for w in 0..n {
            self.begin(w, cx);
        }
    }

    fn handle(&mut self, event: Event, cx: &mut Ctx<'_, '_, Event>) {
        dispatch(self, event, cx);
    }

    /// Only a worker waiting at its merge step waits (for its fragment's ring).
    fn waiting(&self) -> Vec<String> {
        (0..self.workers.len())
            .filter(|&w| !self.rounds.is_down(w) && self.workers[w].waiting)
            .filter_map(|w| {
                let f = self.workers[w].in_flight.as_ref()?.fragment;
                let why = self.rounds.ring(f).waiting(w)?;
                Some(format!("{why} (fragment {f})"))
            })
            .collect()
    }

    fn eval_model(&self) -> Option<Vec<(usize, f64)>> {
        Some(vec![(self.global, 1.0)])
    }

    fn series(&mut self) -> Vec<(&'static str, f64)> {
        vec![("outer_steps", self.outer_steps as f64)]
    }

    fn on_fault(&mut self, fault: WorkerFault, cx: &mut Ctx<'_, '_, Event>) {
        if let WorkerFault::Crash(w) = fault {
            if let Some(g) = self.workers[w].grad.take() {
                cx.world.store.release_gradient(g);
            }
            self.rounds.crash(w, cx.now());
        }
    }
}

impl AlgorithmSpec for StreamingDilocoConfig {
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        self.check(setup.path, setup.params)?;
        if !setup.layers.is_empty() {
            self.fragments_of(setup.layers, setup.state.clone(), setup.path)?;
        }
        Ok(())
    }

    fn extra_rows(&self) -> usize {
        4
    }

    /// The contribution to the round under way.
    fn buffers_per_worker(&self) -> usize {
        1
    }

    fn uses_topology(&self) -> bool {
        false
    }

    fn fault_support(&self, _kind: &'static str, fault: FaultKind) -> FaultSupport {
        ring_support(fault)
    }

    fn build(&self, _kind: &'static str, world: &World<'_>) -> crate::Result<Box<dyn Runnable>> {
        Ok(Box::new(StreamingDiloco::new(self, world.workers())))
    }
}
