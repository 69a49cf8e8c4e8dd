//! SGP and Overlap-SGP: stochastic gradient push over a time-varying directed graph.
//!
//! Assran, Loizou, Ballas & Rabbat, "Stochastic Gradient Push for Distributed Deep Learning",
//! ICML 2019 (Algorithm 1, SGP; Algorithm 2, τ-Overlap SGP). Push-sum (Kempe et al., 2003)
//! with numerator `x_i` (the row in the store) and weight `w_i` (a scalar kept here; it is not a
//! parameter). Node `i` at iteration `k`, with out-peers `P = out_peers(i, k)` of the topology's
//! schedule ([`crate::net::schedule::PeerSchedule`]; SGP's one- or two-peer exponential graph, or any
//! static graph) and `d = |P|`:
//!
//! ```text
//! z_i ← x_i / w_i; compute g on z_i and a minibatch          (compute time; scale 1/w_i)
//! x_i ← optimizer step with g                                 (x^{k+½}; the rate in force now)
//! for j in P: push (x_i/(d+1), w_i/(d+1)) to j               (a message buffer and a scalar)
//! x_i ← x_i/(d+1);  w_i ← w_i/(d+1)                           (keep one share)
//! wait until every message sent to i at an iteration ≤ k − τ has arrived
//! x_i ← x_i + Σ x_m;  w_i ← w_i + Σ w_m                       (every arrived message of an
//!                                                              iteration ≤ k, then released)
//! k ← k + 1
//! ```
//!
//! `sgp` is the synchronous variant, `τ = 0`: a node waits for its in-peers' messages of its
//! own iteration. The pseudo-code above is also `overlap-sgp` with `send = "every-iteration"`.
//!
//! Running statistics (batch norm, [`crate::store::ReplicaStore::state`]) are coordinates of the
//! row: the numerator holds `w_i` times them and push-sum mixes them with the parameters. The
//! store hands the state part of a gradient requested at scale `1/w_i` in the row's units, `w_i`
//! times the change of the de-biased statistics, so `x_i / w_i` holds the statistics the pass
//! produced. (The reference gossips only `module.parameters()`, keeping buffers local.)
//!
//! **Overlap-SGP, `send = "after-mix"` (the default): the reference implementation's rule.** In
//! facebookresearch/stochastic_gradient_push (`gossip_module/distributed.py`, `--overlap True`,
//! `--synch_freq s`) a gossip thread runs one push-sum exchange at a time: it pushes the
//! shares it was handed to the out-peers of its own gossip round (the graph rotates once per
//! gossip, not per training iteration), receives its in-peers' messages of that round, waits
//! for its own sends to complete, and hands the sum of what it received back. At each
//! iteration's forward pre-hook the training thread (a) mixes that sum in if the gossip has
//! completed (and resets its counter `num_updates`), else blocks on it if
//! `num_updates ≥ synch_freq`, else counts one more update; then (b) if the last gossip has been
//! mixed, scales `(x_i, w_i)` by `1/(d+1)` and hands a copy to the gossip thread (a new gossip),
//! else sends nothing this iteration. dasim does the same at the end of each step (the
//! pre-hook of the next), with `τ = synch_freq + 1`, the number of the node's own steps a gossip
//! may overlap:
//!
//! ```text
//! start: push gossip 0 (shares to out_peers(i, 0)); updates ← 1
//! after a step:
//!   if the gossip is complete (every in-peer's message of its round arrived, every own
//!   message landed): mix it in; updates ← 0; push the next gossip
//!   else if updates + 1 ≥ τ: block until it is complete, then the same
//!   else: updates ← updates + 1 (and send nothing)
//! ```
//!
//! So a node has at most one gossip in flight. `updates ← 1` at the start is the reference's
//! count of its first pre-hook, which finds no gossip running: the first gossip overlaps at most
//! `max(1, τ − 1)` steps. With `τ = 0` (the reference without `--overlap`) a node pushes right
//! after its step and blocks until that gossip completes, then mixes: like `sgp`, but it also
//! waits for its own messages to land. Where dasim differs from the reference: a gossip ends when
//! its last message *lands* (the reference waits for its sends' completion, slightly earlier);
//! rounds are matched by number (the reference relies on FIFO point-to-point receives, which
//! gives the same matching); no epoch-end synchronization (the reference queries the gossip at
//! `eval()`); with faults, see below (the reference has no failure handling). Under a
//! persistent straggler a node's rounds are paced by the slowest node's, but it makes up to `τ`
//! steps per round: the fast nodes run at up to `τ` times the straggler's rate, and the age of
//! the information they mix (their iteration minus the sender's) is not bounded by `τ`.
//!
//! **Overlap-SGP, `send = "every-iteration"`: the paper's Algorithm 2.** A delay bound `τ ≥ 1`
//! (default 1): sending overlaps the next
//! computation, a node mixes whatever has arrived, and blocks only when a message sent to it `τ`
//! iterations ago is still missing. Messages of a later iteration than the node's own (from a
//! peer that is ahead) wait in its inbox until the node reaches that iteration, so with `τ = 0`
//! Overlap-SGP is exactly SGP. Blocking depends only on which messages have arrived, never on
//! the weights. A node waits only for messages of iterations `≤ k − τ ≤ k`, which their senders
//! push before they wait themselves: SGP cannot deadlock. A persistent straggler still sets the
//! pace in the long run: a node can lead a node `h` hops upstream by at most about `h·(τ + p)`
//! iterations (`p` the schedule's period), so `τ` buys slack, not independence.
//!
//! Evaluation points measure the de-biased average `Σ_i z_i / n = Σ_i x_i / (n·w_i)`; the
//! consensus distance and the replica evaluations use the de-biased `z_i`
//! ([`Algorithm::replica_scales`]); [`Algorithm::series`] reports the range of the weights,
//! `weight_min` and `weight_max`. Every mixed message's age in iterations (the receiver's
//! iteration minus the sender's, 0 when the sender is ahead, which only `after-mix` allows) is
//! recorded ([`crate::algorithm::Ctx::message_age`]). With `after-mix` a node's iteration is its
//! number of steps completed, so in lockstep a message pushed after step `k` and mixed after
//! step `k + τ` is `τ` old, as with `every-iteration`.
//!
//! **Activities** ([`crate::record`]): a node computes its gradient; sending overlaps the next
//! computation. When it must wait to mix, it is blocked while a message it needs has not been
//! sent yet (the wait attributed to the node whose push ends it), and communicates once every
//! message it needs is in flight (with `after-mix`: the messages of its gossip's round, its own
//! included).
//!
//! **Invariants**: the total push-sum weight of the nodes plus the messages in flight is `n` at
//! all times (up to rounding), and the sum of the numerators of the nodes and the messages in
//! flight changes only by optimizer steps (pushing and mixing preserve it). With
//! `every-iteration` a node never mixes a message sent more than `τ` iterations before its own;
//! with `after-mix` a node has at most one gossip in flight, all of whose own messages land
//! before it sends again. On a schedule where every node has one
//! in-peer and one out-peer per iteration (the one-peer exponential graph), synchronous SGP keeps
//! every `w_i = 1` exactly.
//!
//! **Under faults** ([`crate::fault`]; every kind is accepted): a push-sum message that is lost
//! (at random, or on a down link) takes its weight and numerator share with it. The sender
//! frees it and adds its weight to the mass lost ([`Algorithm::mass_lost`]); the receiver learns
//! of the loss when the message would have landed (a transport that detects a gap) and stops
//! waiting for it. A message that lands at a crashed node is dropped the same way. So the
//! weights then sum below `n` by exactly the mass lost, while the de-biased average
//! `Σ x_i / (n·w_i)` stays an average of the nodes' models (each `x_i / w_i` is unbiased by the
//! loss). A crashed node abandons its step, stops pushing and mixing; its out-peers wait for its
//! next message, so synchronous SGP stalls (and Overlap-SGP once `τ` iterations have passed)
//! unless it rejoins: it then resumes its iteration with the numerator, weight and inbox it had.
//! With `after-mix` a lost or dropped message also counts as landed for its sender (which learns
//! of it at the same moment), so the sender's gossip completes; a crashed node's gossip in
//! flight stays, and its out-peers wait for its next round (stalled runs name the round).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::algorithm::{Algorithm, Ctx, World, neighbour_model};
use crate::algorithms::{AlgorithmSpec, Declared, Runnable, Setup, measure};
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport, WorkerFault};
use crate::net::schedule::PeerSchedule;
use crate::record::Activity;
use crate::store::{GradId, MsgId, ReplicaStore, Slot};

/// Options of synchronous SGP.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SgpConfig {}

fn default_tau() -> u64 {
    1
}

/// When an Overlap-SGP node starts a new gossip (`send` in the scenario).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SendRule {
    /// The reference implementation's rule (the default): a node sends again only once its
    /// previous gossip has been mixed, so it has at most one gossip in flight; `τ` is the number
    /// of its own steps a gossip may overlap before the node blocks on it.
    #[default]
    AfterMix,
    /// The paper's Algorithm 2: a push at every iteration; a node mixes whatever has arrived and
    /// blocks on a message sent to it `τ` iterations ago.
    EveryIteration,
}

/// Options of Overlap-SGP.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverlapSgpConfig {
    /// The delay bound τ in iterations (default 1). With `send = "after-mix"`: how many of its
    /// own steps a gossip may overlap (the reference's `synch_freq + 1`; 0: no overlap). With
    /// `send = "every-iteration"`: the age of the oldest message a node may still be missing
    /// (0 is synchronous SGP).
    #[serde(default = "default_tau")]
    pub tau: u64,
    /// When a node starts a new gossip (default `after-mix`, the reference's rule).
    #[serde(default)]
    pub send: SendRule,
}

impl Default for OverlapSgpConfig {
    fn default() -> Self {
        OverlapSgpConfig {
            tau: default_tau(),
            send: SendRule::default(),
        }
    }
}

/// Events of SGP.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum Event {
    /// `node` finished computing its gradient (the second field: the node's crash count when
    /// the step started; a step abandoned by a crash is ignored).
    ComputeDone(usize, u64),
    /// A push-sum message of iteration `iter` from `from` reached `to`.
    Push {
        /// Sender.
        from: usize,
        /// Receiver.
        to: usize,
        /// The sender's iteration.
        iter: u64,
        /// The sender's gossip round (its gossips started before this one; with
        /// `send = "every-iteration"` it is `iter`).
        round: u64,
        /// The numerator share.
        msg: MsgId,
        /// The weight share.
        weight: f64,
    },
    /// A push-sum message of iteration `iter` from `from` to `to` was lost (`[[faults]]`): `to`
    /// learns it when the message would have landed, and stops waiting for it.
    Lost {
        /// Sender.
        from: usize,
        /// Receiver.
        to: usize,
        /// The sender's gossip round (with `send = "every-iteration"`, its iteration).
        round: u64,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Node {
    iter: u64,
    w: f64,
    grad: Option<GradId>,
    /// Pushed this iteration and waiting to mix.
    blocked: bool,
    /// Arrived and not yet mixed, by `(round, sender)`: the numerator share, the weight and
    /// the sender's iteration.
    inbox: BTreeMap<(u64, usize), (MsgId, f64, u64)>,
    /// Rounds `< complete` have had every message arrive.
    complete: u64,
    /// Messages arrived of rounds `≥ complete`.
    arrived: BTreeSet<(u64, usize)>,
    /// `after-mix`: gossips started.
    rounds: u64,
    /// `after-mix`: the gossip in flight (started, not mixed).
    gossip: Option<Gossip>,
    /// `after-mix`: the reference's `num_updates`, steps since the last mix that did not mix.
    updates: u64,
    /// Waiting to mix for a message not sent yet.
    stalled: bool,
    /// Crashes so far (a `ComputeDone` of an earlier life is ignored).
    life: u64,
    /// Down (crashed, not rejoined).
    down: bool,
    /// Held at a multiple of `hold_every` iterations until released (SlowMo's exact average).
    #[serde(default)]
    held: bool,
}

/// A node's gossip in flight (`send = "after-mix"`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Gossip {
    /// Its round.
    round: u64,
    /// Its own messages not yet landed (delivered, dropped or known lost).
    out_pending: usize,
}

/// The state machine of SGP and Overlap-SGP.
#[derive(Serialize, Deserialize)]
pub struct Sgp {
    #[serde(with = "crate::raw::static_str")]
    kind: crate::raw::StaticStr,
    tau: u64,
    /// `send = "after-mix"` (only `overlap-sgp`).
    after_mix: bool,
    schedule: PeerSchedule,
    nodes: Vec<Node>,
    /// The weight of every message not yet mixed (in flight or in an inbox).
    in_flight: BTreeMap<MsgId, f64>,
    max_age: u64,
    mixed: u64,
    /// Push-sum weight carried by messages that were lost or dropped.
    mass_lost: f64,
    /// Synchronous SGP inside SlowMo ([`super::slowmo`]): a node that completes an iteration
    /// that is a multiple of `hold_every` (0: never) is held there, not starting its next step,
    /// until [`Sgp::release`]; it is listed in `newly_held` until [`Sgp::take_held`].
    #[serde(default)]
    hold_every: u64,
    #[serde(default)]
    newly_held: Vec<usize>,
}

impl Sgp {
    /// Synchronous SGP on `schedule`.
    pub fn synchronous(_cfg: &SgpConfig, schedule: &PeerSchedule) -> Self {
        Sgp::with_tau("sgp", 0, false, schedule)
    }

    /// Overlap-SGP on `schedule`.
    pub fn overlap(cfg: &OverlapSgpConfig, schedule: &PeerSchedule) -> Self {
        let after_mix = cfg.send == SendRule::AfterMix;
        Sgp::with_tau("overlap-sgp", cfg.tau, after_mix, schedule)
    }

    fn with_tau(kind: &'static str, tau: u64, after_mix: bool, schedule: &PeerSchedule) -> Self {
        let n = schedule.len();
        Sgp {
            kind,
            tau,
            after_mix,
            schedule: schedule.clone(),
            nodes: vec![
                Node {
                    iter: 0,
                    w: 1.0,
                    grad: None,
                    blocked: false,
                    inbox: BTreeMap::new(),
                    complete: 0,
                    arrived: BTreeSet::new(),
                    stalled: false,
                    life: 0,
                    down: false,
                    rounds: 0,
                    gossip: None,
                    updates: 0,
                    held: false,
                };
                n
            ],
            in_flight: BTreeMap::new(),
            max_age: 0,
            mixed: 0,
            mass_lost: 0.0,
            hold_every: 0,
            newly_held: Vec::new(),
        }
    }

    /// Synchronous SGP whose nodes stop after every `every`-th iteration (after mixing it)
    /// until released: the base of SlowMo ([`super::slowmo`]), which takes its exact average
    /// there.
    pub(crate) fn holding_every(cfg: &SgpConfig, schedule: &PeerSchedule, every: u64) -> Self {
        let mut sgp = Sgp::synchronous(cfg, schedule);
        sgp.hold_every = every;
        sgp
    }

    /// The nodes held since the last call, in the order they stopped.
    pub(crate) fn take_held(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.newly_held)
    }

    /// Node `i`, held, goes on with its next step (unless it is down). Every node is held then
    /// with no message of its own in flight, and nothing in its inbox: synchronous SGP mixes
    /// every message of an iteration before it completes it, and no node has started the next.
    pub(crate) fn release(&mut self, i: usize, cx: &mut Ctx<'_, '_, Event>) {
        debug_assert!(self.nodes[i].held, "node {i} is not held");
        self.nodes[i].held = false;
        if !self.nodes[i].down {
            self.begin(i, cx);
        }
    }

    /// Sets every node's push-sum weight to `w` (after an exact average has set every
    /// numerator to the same model).
    pub(crate) fn set_weights(&mut self, w: f64) {
        for node in &mut self.nodes {
            node.w = w;
        }
    }

    /// The push-sum weight of every node.
    pub fn weights(&self) -> Vec<f64> {
        self.nodes.iter().map(|n| n.w).collect()
    }

    /// Which nodes have pushed this iteration and not yet mixed (waiting, or about to mix);
    /// with `send = "after-mix"`, which nodes are blocked on their gossip in flight.
    pub fn blocked(&self) -> Vec<bool> {
        self.nodes.iter().map(|n| n.blocked).collect()
    }

    /// The iteration every node is in (with `send = "after-mix"`: its steps completed).
    pub fn iterations(&self) -> Vec<u64> {
        self.nodes.iter().map(|n| n.iter).collect()
    }

    /// `send = "after-mix"`: the gossips every node has started (its next round); otherwise 0.
    pub fn rounds(&self) -> Vec<u64> {
        self.nodes.iter().map(|n| n.rounds).collect()
    }

    /// `send = "after-mix"`: the round of every node's gossip in flight (started, not yet
    /// mixed), if it has one; at most one each.
    pub fn gossips_in_flight(&self) -> Vec<Option<u64>> {
        self.nodes
            .iter()
            .map(|n| n.gossip.map(|g| g.round))
            .collect()
    }

    /// The messages in flight or waiting in an inbox (not yet mixed), with their weights: the
    /// push-sum mass outside the nodes.
    pub fn unmixed(&self) -> Vec<(MsgId, f64)> {
        self.in_flight.iter().map(|(&m, &w)| (m, w)).collect()
    }

    /// The largest age (receiver's iteration − sender's iteration) of a mixed message.
    pub fn max_mixed_age(&self) -> u64 {
        self.max_age
    }

    /// Messages mixed so far.
    pub fn mixed_messages(&self) -> u64 {
        self.mixed
    }

    fn begin(&mut self, i: usize, cx: &mut Ctx<'_, '_, Event>) {
        let scale = 1.0 / self.nodes[i].w;
        let (grad, d) = cx.begin_step(i, scale);
        self.nodes[i].grad = Some(grad);
        cx.after(d, Event::ComputeDone(i, self.nodes[i].life));
    }

    /// Pushes node `i`'s shares of round `round` (with `send = "every-iteration"`, its
    /// iteration) to its out-peers of that round, and keeps one share.
    fn push(&mut self, i: usize, round: u64, cx: &mut Ctx<'_, '_, Event>) {
        let k = self.nodes[i].iter;
        let peers = self.schedule.out_peers(i, round);
        let share = 1.0 / (peers.len() + 1) as f64;
        let weight = self.nodes[i].w * share;
        let bytes = cx.world.model_bytes;
        if self.after_mix {
            // Sent from here on (see `sent`), for the receivers' waits.
            self.nodes[i].rounds = round + 1;
            self.nodes[i].gossip = Some(Gossip {
                round,
                out_pending: peers.len(),
            });
        }
        // Every peer gets the same share: with several peers it is computed once, and each
        // peer's message is a copy of it, which the burn store makes by sharing the buffer
        // (messages are read-only), so a push costs one share of `P` floats, not one per peer.
        let shared = (peers.len() > 1).then(|| cx.world.store.new_msg(&[(Slot::Row(i), share)]));
        for &j in &peers {
            let msg = match shared {
                Some(m) => cx.world.store.new_msg(&[(Slot::Msg(m), 1.0)]),
                None => cx.world.store.new_msg(&[(Slot::Row(i), share)]),
            };
            self.in_flight.insert(msg, weight);
            if self.nodes[j].blocked && !self.nodes[j].down {
                self.wait(j, i, cx);
            }
            let sent = cx.send(
                i,
                j,
                bytes,
                Event::Push {
                    from: i,
                    to: j,
                    iter: k,
                    round,
                    msg,
                    weight,
                },
            );
            if sent.lost.is_some() {
                self.lose(msg, weight, cx);
                cx.at(
                    sent.arrive,
                    Event::Lost {
                        from: i,
                        to: j,
                        round,
                    },
                );
            }
        }
        if let Some(m) = shared {
            cx.world.store.release_msg(m);
        }
        cx.world.store.mix(i, &[(Slot::Row(i), share)]);
        self.nodes[i].w = weight;
    }

    /// A message's share is lost: its weight is counted and its buffer freed.
    fn lose(&mut self, msg: MsgId, weight: f64, cx: &mut Ctx<'_, '_, Event>) {
        self.mass_lost += weight;
        self.in_flight.remove(&msg);
        cx.world.store.release_msg(msg);
    }

    /// Node `to` will not get the message of round `round` from `from`: it counts as arrived
    /// (with nothing to mix), so `to` does not wait for it.
    fn missed(&mut self, from: usize, to: usize, round: u64, cx: &mut Ctx<'_, '_, Event>) {
        self.nodes[to].arrived.insert((round, from));
        self.advance_complete(to);
        if self.after_mix {
            self.landed(from, round);
            self.try_finish(to, cx);
            self.try_finish(from, cx);
        } else if self.nodes[to].blocked && !self.nodes[to].down && self.may_mix(to) {
            self.mix(to, cx);
        }
    }

    /// `every-iteration`: whether node `i` at its iteration may mix: every message of
    /// iterations `≤ k − τ` arrived.
    fn may_mix(&self, i: usize) -> bool {
        let node = &self.nodes[i];
        node.iter < self.tau || node.complete > node.iter - self.tau
    }

    /// Whether node `j` has pushed its messages of round `s`. With `every-iteration` it pushes
    /// them, then waits to mix, then moves to `s + 1`; with `after-mix` it has started gossip
    /// `s`.
    fn sent(&self, j: usize, s: u64) -> bool {
        let node = &self.nodes[j];
        if self.after_mix {
            return node.rounds > s;
        }
        node.iter > s || (node.iter == s && node.blocked)
    }

    /// Node `i` waits to mix: blocked while a message it needs has not been sent (of an
    /// iteration `≤ k − τ`; with `after-mix`, of its gossip's round), communicating once all are
    /// in flight (`by` ended the blocked part, if it did).
    fn wait(&mut self, i: usize, by: usize, cx: &mut Ctx<'_, '_, Event>) {
        let node = &self.nodes[i];
        let missing = |s: u64| {
            self.schedule
                .in_peers(i, s)
                .iter()
                .any(|&j| !node.arrived.contains(&(s, j)) && !self.sent(j, s))
        };
        let unsent = if self.after_mix {
            node.gossip
                .is_some_and(|g| node.complete <= g.round && missing(g.round))
        } else {
            let last = node.iter.saturating_sub(self.tau);
            (node.complete..=last).any(missing)
        };
        match (unsent, node.stalled) {
            (true, false) => {
                self.nodes[i].stalled = true;
                cx.block(i);
            }
            (false, true) => {
                self.nodes[i].stalled = false;
                cx.unblock(i, by, Activity::Communicate);
            }
            (false, false) => cx.activity(i, Activity::Communicate),
            (true, true) => {}
        }
    }

    fn advance_complete(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        loop {
            let s = node.complete;
            let expected = self.schedule.in_peers(i, s);
            if !expected.iter().all(|&j| node.arrived.contains(&(s, j))) {
                break;
            }
            for j in expected {
                node.arrived.remove(&(s, j));
            }
            node.complete += 1;
        }
    }

    /// Adds the messages `msgs` into node `i`'s numerator and weight, records their ages
    /// (node `i`'s iteration minus the sender's, 0 for a sender that is ahead) and frees them.
    fn mix_in(
        &mut self,
        i: usize,
        msgs: BTreeMap<(u64, usize), (MsgId, f64, u64)>,
        cx: &mut Ctx<'_, '_, Event>,
    ) {
        if msgs.is_empty() {
            return;
        }
        let k = self.nodes[i].iter;
        let mut terms = Vec::with_capacity(msgs.len() + 1);
        terms.push((Slot::Row(i), 1.0));
        let mut w = self.nodes[i].w;
        // The oldest message's age.
        let oldest = msgs.values().map(|&(_, _, s)| k.saturating_sub(s)).max();
        cx.mix_age(i, oldest.unwrap_or(0));
        for &(m, weight, s) in msgs.values() {
            terms.push((Slot::Msg(m), 1.0));
            w += weight;
            let age = k.saturating_sub(s);
            self.max_age = self.max_age.max(age);
            self.mixed += 1;
            cx.message_age(i, age);
        }
        cx.world.store.mix(i, &terms);
        for &(m, _, _) in msgs.values() {
            cx.world.store.release_msg(m);
            self.in_flight.remove(&m);
        }
        self.nodes[i].w = w;
    }

    /// `every-iteration`: node `i` mixes every arrived message of an iteration `≤ k` and moves
    /// to its next iteration.
    fn mix(&mut self, i: usize, cx: &mut Ctx<'_, '_, Event>) {
        let k = self.nodes[i].iter;
        let later = self.nodes[i].inbox.split_off(&(k + 1, 0));
        let now = std::mem::replace(&mut self.nodes[i].inbox, later);
        self.mix_in(i, now, cx);
        self.nodes[i].blocked = false;
        self.nodes[i].stalled = false;
        self.nodes[i].iter += 1;
        if self.hold_every > 0 && self.nodes[i].iter.is_multiple_of(self.hold_every) {
            self.nodes[i].held = true;
            self.newly_held.push(i);
            return;
        }
        self.begin(i, cx);
    }

    /// `after-mix`: whether node `i`'s gossip in flight is complete: every in-peer's message of
    /// its round arrived (or is known lost) and every message of its own landed.
    fn gossip_done(&self, i: usize) -> bool {
        let node = &self.nodes[i];
        node.gossip
            .is_some_and(|g| g.out_pending == 0 && node.complete > g.round)
    }

    /// `after-mix`: a message of node `from`'s gossip `round` landed (or was dropped, or is
    /// known lost).
    fn landed(&mut self, from: usize, round: u64) {
        let g = self.nodes[from]
            .gossip
            .as_mut()
            .expect("a node's messages belong to its gossip in flight");
        debug_assert_eq!(g.round, round);
        g.out_pending -= 1;
    }

    /// `after-mix`: node `i`, blocked on its gossip, goes on if the gossip is complete.
    fn try_finish(&mut self, i: usize, cx: &mut Ctx<'_, '_, Event>) {
        if self.nodes[i].blocked && !self.nodes[i].down && self.gossip_done(i) {
            self.finish(i, cx);
        }
    }

    /// `after-mix`: node `i`'s gossip is complete: it mixes the round's residuals in, starts its
    /// next gossip (with overlap, `τ ≥ 1`) and its next step.
    fn finish(&mut self, i: usize, cx: &mut Ctx<'_, '_, Event>) {
        let g = self.nodes[i].gossip.take().expect("a gossip in flight");
        let later = self.nodes[i].inbox.split_off(&(g.round + 1, 0));
        let now = std::mem::replace(&mut self.nodes[i].inbox, later);
        self.mix_in(i, now, cx);
        let node = &mut self.nodes[i];
        node.blocked = false;
        node.stalled = false;
        node.updates = 0;
        if self.tau >= 1 {
            let r = node.rounds;
            self.push(i, r, cx);
        }
        self.begin(i, cx);
    }

    /// `after-mix`: node `i` finished a step (the reference's forward pre-hook of the next
    /// one): without overlap it sends first; it mixes its gossip if complete, else blocks on it
    /// once it has overlapped `τ` steps, else goes on computing.
    fn boundary(&mut self, i: usize, cx: &mut Ctx<'_, '_, Event>) {
        self.nodes[i].iter += 1;
        if self.tau == 0 {
            let r = self.nodes[i].rounds;
            self.push(i, r, cx);
        }
        if self.gossip_done(i) {
            self.finish(i, cx);
        } else if self.nodes[i].updates + 1 >= self.tau {
            // The reference blocks when `num_updates >= synch_freq`, and `synch_freq = τ − 1`.
            self.nodes[i].blocked = true;
            self.wait(i, i, cx);
        } else {
            self.nodes[i].updates += 1;
            self.begin(i, cx);
        }
    }
}

impl Algorithm for Sgp {
    type Event = Event;

    fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        for i in 0..self.nodes.len() {
            self.advance_complete(i);
            if self.after_mix && self.tau >= 1 {
                self.push(i, 0, cx);
                // The reference's first forward pre-hook finds no gossip running, counts an
                // update, then starts the first gossip.
                self.nodes[i].updates = 1;
            }
            self.begin(i, cx);
        }
    }

    fn handle(&mut self, event: Event, cx: &mut Ctx<'_, '_, Event>) {
        match event {
            Event::ComputeDone(i, life) if life != self.nodes[i].life => {}
            Event::ComputeDone(i, _) => {
                let g = self.nodes[i].grad.take().expect("a gradient in flight");
                let lr = cx.lr_for(i);
                cx.world.store.apply_gradient(i, g, lr);
                cx.world.store.release_gradient(g);
                cx.step_done(i);
                if self.after_mix {
                    self.boundary(i, cx);
                    return;
                }
                // Pushed from here on (see `sent`), for the receivers' waits.
                self.nodes[i].blocked = true;
                let k = self.nodes[i].iter;
                self.push(i, k, cx);
                if self.may_mix(i) {
                    self.mix(i, cx);
                } else {
                    self.wait(i, i, cx);
                }
            }
            Event::Push {
                from,
                to,
                round,
                msg,
                weight,
                ..
            } if !cx.deliverable(to) => {
                self.lose(msg, weight, cx);
                self.missed(from, to, round, cx);
            }
            Event::Lost { from, to, round } => self.missed(from, to, round, cx),
            Event::Push {
                from,
                to,
                iter,
                round,
                msg,
                weight,
            } => {
                let node = &mut self.nodes[to];
                node.inbox.insert((round, from), (msg, weight, iter));
                node.arrived.insert((round, from));
                self.advance_complete(to);
                if self.after_mix {
                    self.landed(from, round);
                    self.try_finish(to, cx);
                    self.try_finish(from, cx);
                } else if self.nodes[to].blocked && self.may_mix(to) {
                    self.mix(to, cx);
                }
            }
        }
    }

    fn waiting(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            if !node.blocked || node.down {
                continue;
            }
            let (s, what) = match node.gossip {
                Some(g) if self.after_mix && node.complete <= g.round => (g.round, "gossip round"),
                _ if self.after_mix => continue,
                _ => (node.complete, "iteration"),
            };
            for j in self.schedule.in_peers(i, s) {
                if !node.arrived.contains(&(s, j)) {
                    let down = if self.nodes[j].down { " (down)" } else { "" };
                    out.push(format!(
                        "node {i} (iteration {}) waits for the push-sum message of {what} {s} from node {j}{down}",
                        node.iter
                    ));
                }
            }
        }
        out
    }

    fn on_fault(&mut self, fault: WorkerFault, cx: &mut Ctx<'_, '_, Event>) {
        match fault {
            WorkerFault::Crash(i) => {
                let node = &mut self.nodes[i];
                node.down = true;
                node.life += 1;
                node.stalled = false;
                if let Some(g) = node.grad.take() {
                    cx.world.store.release_gradient(g);
                }
            }
            WorkerFault::Rejoin(i) => {
                self.nodes[i].down = false;
                if !self.nodes[i].blocked {
                    self.begin(i, cx);
                } else if self.after_mix {
                    if self.gossip_done(i) {
                        self.finish(i, cx);
                    } else {
                        self.wait(i, i, cx);
                    }
                } else if self.may_mix(i) {
                    self.mix(i, cx);
                } else {
                    self.wait(i, i, cx);
                }
            }
        }
    }

    fn mass_lost(&self) -> Option<f64> {
        Some(self.mass_lost)
    }

    fn replica_scales(&self) -> Option<Vec<f64>> {
        Some(self.nodes.iter().map(|n| 1.0 / n.w).collect())
    }

    /// A rejoining node takes its neighbour's de-biased model and keeps its own weight:
    /// `x_i ← (w_i / w_j)·x_j`, so `z_i = z_j` and the weights still sum as before.
    fn rejoin_model(&self, worker: usize, world: &World<'_>) -> Option<Vec<(Slot, f64)>> {
        let j = neighbour_model(worker, world)?;
        Some(vec![(Slot::Row(j), self.nodes[worker].w / self.nodes[j].w)])
    }

    fn series(&mut self) -> Vec<(&'static str, f64)> {
        let w = self.weights();
        vec![
            (
                "weight_min",
                w.iter().copied().fold(f64::INFINITY, f64::min),
            ),
            (
                "weight_max",
                w.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            ),
        ]
    }

    fn eval_model(&self) -> Option<Vec<(usize, f64)>> {
        let n = self.nodes.len() as f64;
        Some(
            self.nodes
                .iter()
                .enumerate()
                .map(|(i, node)| (i, 1.0 / (n * node.w)))
                .collect(),
        )
    }
}

/// Push-sum handles every fault kind (see the module's "Under faults").
fn push_sum_support(_fault: FaultKind) -> FaultSupport {
    Ok(())
}

/// SGP and Overlap-SGP mix along the peer schedule: push-sum reaches the average only if every
/// node reaches every other over a window of the schedule.
pub(crate) fn require_strongly_connected(setup: &Setup<'_>, what: &str) -> Result<(), ConfigError> {
    if setup.topology.schedule().is_strongly_connected() {
        return Ok(());
    }
    Err(ConfigError::new(
        "topology.kind",
        format!(
            "{what} ({}) needs a peer schedule in which every worker reaches every other; this one has components {}",
            setup.path,
            setup.topology.describe_components()
        ),
    )
    .hint("use a connected topology, e.g. kind = \"one-peer-exponential\" or a ring"))
}

impl AlgorithmSpec for SgpConfig {
    /// The age of the messages it mixes in, and the push-sum weights.
    fn declared() -> Declared {
        Declared {
            measures: &[measure::MESSAGE_AGE, measure::PUSH_SUM_WEIGHT],
            quantities: &[],
        }
    }

    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        require_strongly_connected(setup, "SGP")
    }

    fn fault_support(&self, _kind: &'static str, fault: FaultKind) -> FaultSupport {
        push_sum_support(fault)
    }

    fn build(&self, _kind: &'static str, world: &World<'_>) -> crate::Result<Box<dyn Runnable>> {
        let schedule = world
            .topology
            .training_schedule(world.store.batch_size(), world.store.train_size());
        let alg = Sgp::synchronous(self, &schedule);
        Ok(Box::new(alg))
    }
}

impl AlgorithmSpec for OverlapSgpConfig {
    /// The age of the messages it mixes in, the push-sum weights, and its delay bound `tau`.
    fn declared() -> Declared {
        Declared {
            measures: &[measure::MESSAGE_AGE, measure::PUSH_SUM_WEIGHT],
            quantities: &[("tau", "its delay bound τ")],
        }
    }

    fn quantity(&self, name: &str) -> Option<f64> {
        (name == "tau").then_some(self.tau as f64)
    }

    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        require_strongly_connected(setup, "Overlap-SGP")
    }

    fn fault_support(&self, _kind: &'static str, fault: FaultKind) -> FaultSupport {
        push_sum_support(fault)
    }

    fn build(&self, _kind: &'static str, world: &World<'_>) -> crate::Result<Box<dyn Runnable>> {
        let schedule = world
            .topology
            .training_schedule(world.store.batch_size(), world.store.train_size());
        let alg = Sgp::overlap(self, &schedule);
        Ok(Box::new(alg))
    }
}
