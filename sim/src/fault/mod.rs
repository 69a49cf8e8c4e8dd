//! Fault injection: the `[[faults]]` entries ([`config`]) and their realization in a run
//! ([`Faults`]).
//!
//! ## What each kind does
//!
//! - **crash**: at its time, a worker stops. Its step under way is abandoned (its gradient is
//!   never applied), it sends nothing, and every message that reaches it while it is down is
//!   dropped and counted ([`FaultStats::dropped_down`]). With `rejoin_after_s`, it comes back that
//!   long after with the state it had when it crashed, and the algorithm restarts it
//!   ([`crate::algorithm::Algorithm::on_fault`]). With `mtbf_s`, a worker's time up before each
//!   crash is exponential with that mean.
//! - **link-down**: a message posted on a link while the link is down is lost
//!   ([`FaultStats::lost_link_down`]). It still leaves the sender (its NIC time is spent): the
//!   sender does not know the link is down. A partition (`groups`) takes down every link
//!   between two workers of different groups; links to extra nodes (a parameter server) stay up.
//! - **loss**: each message posted on a covered link during the window is lost with the
//!   probability ([`FaultStats::lost`]); like a message on a down link, it occupies the sender's
//!   NIC.
//! - **duplicate**: each covered message is sent a second time right after the first with the
//!   probability; the copy occupies the NICs and counts in the network totals, and the receiver
//!   discards it (a transport with sequence numbers), so algorithms never see it.
//! - **availability**: each worker's off intervals from a CSV file ([`availability`]): every
//!   interval is a crash at its start and, unless it is open-ended, a rejoin at its end.
//! - **delay**: each covered message, with the probability, lands an extra time later, drawn
//!   from the distribution; a message never overtakes an earlier one of the same pair (links stay
//!   FIFO), so a later message can be held up behind a delayed one.
//!
//! Which kinds an algorithm accepts, and what it does under each, is its own documented rule
//! ([`crate::algorithms::AlgorithmSpec::fault_support`], checked by
//! [`crate::algorithms::AlgorithmConfig::check_fault_support`]); a scenario that pairs an algorithm with
//! a kind it does not handle is refused at validation. Delay and duplication are invisible to
//! algorithms and accepted by all.
//!
//! ## Randomness and ordering
//!
//! Entry `f` of `[[faults]]` draws from its own stream ([`StreamKind::Fault`], id `f`): a crash
//! entry's worker `w` from sub-stream `w`, a message entry's link `i → j` from sub-stream
//! `i · 2³² + j`. So the `k`-th message on a link meets the same fate under every algorithm,
//! crash times do not depend on the algorithm, and a scenario without faults draws nothing.
//! A crash or a rejoin due at the same instant as an algorithm event is handled first.

pub mod availability;
pub mod config;

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

use rand::Rng;
use rand_distr::Exp;

pub use config::{
    AvailabilityFault, CrashFault, DelayFault, FaultConfig, FaultKind, FaultSupport, LinkDownFault,
    MessageFault, RejoinState,
};

use crate::clock::rng::{Stream, StreamKind, sojourn, stream};
use crate::clock::time::{SimTime, window};
use crate::cluster::slowdown::Variate;
use crate::env::BuildEnv;
use crate::error::ConfigError;

/// Why a message was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LossCause {
    /// Random loss (a `loss` entry).
    Random,
    /// Its link was down (a `link-down` entry).
    LinkDown,
}

/// What became of a message posted with [`crate::algorithm::Ctx::send`] or
/// [`crate::algorithm::Ctx::transfer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sent {
    /// When it lands (when it would have landed, if it is lost).
    pub arrive: SimTime,
    /// `Some` when it is lost: it never lands, and [`crate::algorithm::Ctx::send`] scheduled
    /// nothing.
    pub lost: Option<LossCause>,
}

/// A worker crashed or rejoined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkerFault {
    /// The worker crashed now.
    Crash(usize),
    /// The worker rejoined now, with the state it had when it crashed.
    Rejoin(usize),
}

/// Counts of what the faults did over a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FaultStats {
    /// Messages lost at random.
    pub lost: u64,
    /// Messages lost because their link was down.
    pub lost_link_down: u64,
    /// Messages dropped because their receiver was down when they landed.
    pub dropped_down: u64,
    /// Messages sent twice.
    pub duplicated: u64,
    /// Messages delayed.
    pub delayed: u64,
    /// Their extra delays, summed.
    pub delay_total: SimTime,
    /// Crashes.
    pub crashes: u64,
    /// Rejoins.
    pub rejoins: u64,
    /// Per worker: time down.
    pub down_time: Vec<SimTime>,
}

/// Which links an entry covers.
#[derive(Clone, Debug, Serialize, Deserialize)]
enum Cover {
    All,
    Links(BTreeSet<(usize, usize)>),
    Workers(Vec<bool>),
    /// A partition: the group of every worker (links between groups are cut).
    Groups(Vec<usize>),
}

impl Cover {
    fn covers(&self, src: usize, dst: usize) -> bool {
        match self {
            Cover::All => true,
            Cover::Links(l) => l.contains(&(src, dst)),
            Cover::Workers(on) => {
                on.get(src).copied().unwrap_or(false) || on.get(dst).copied().unwrap_or(false)
            }
            Cover::Groups(g) => match (g.get(src), g.get(dst)) {
                (Some(a), Some(b)) => a != b,
                _ => false,
            },
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
enum Effect {
    Down,
    Loss(f64),
    Duplicate(f64),
    Delay(f64, Variate),
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Rule {
    entry: usize,
    effect: Effect,
    cover: Cover,
    start: SimTime,
    end: SimTime,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct CrashProcess {
    entry: usize,
    mtbf: Option<Exp<f64>>,
    rejoin: Option<SimTime>,
    state: RejoinState,
}

/// A pending crash or rejoin: `(time, sequence, worker, entry, rejoin)`.
type Transition = (SimTime, u64, usize, usize, bool);

/// The faults of a run: the crash and rejoin schedule, the state of every worker, and the rules
/// that decide each message's fate. Built afresh for every algorithm from the same entries and
/// seed, so every algorithm meets the same realization.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Faults {
    configured: bool,
    seed: u64,
    crashes: Vec<CrashProcess>,
    streams: BTreeMap<(usize, u64), Stream>,
    pending: BTreeSet<Transition>,
    seq: u64,
    rules: Vec<Rule>,
    has_delay: bool,
    /// Per worker: the entry that crashed it and when, while it is down.
    down: Vec<Option<(usize, SimTime)>>,
    /// The state the worker of the last rejoin popped comes back with.
    rejoin_state: RejoinState,
    last_arrival: BTreeMap<(usize, usize), SimTime>,
    stats: FaultStats,
}

impl Faults {
    /// No faults.
    pub fn none() -> Self {
        Faults::default()
    }

    /// The realization of `entries` on a cluster of `n` workers (the entries are validated
    /// here too; errors name `faults[i]`).
    pub fn new(entries: &[FaultConfig], n: usize, env: &BuildEnv) -> Result<Self, ConfigError> {
        let mut f = Faults {
            configured: !entries.is_empty(),
            seed: env.seed,
            down: vec![None; n],
            stats: FaultStats {
                down_time: vec![SimTime::ZERO; n],
                ..FaultStats::default()
            },
            ..Faults::default()
        };
        for (e, entry) in entries.iter().enumerate() {
            let path = format!("faults[{e}]");
            entry.validate(n, &path)?;
            let at = |k: &str| format!("{path}.{k}");
            let cover = |links: &Option<Vec<_>>, workers: &Option<crate::cluster::WorkerSet>| {
                Ok::<_, ConfigError>(match (links, workers) {
                    (Some(l), _) => Cover::Links(
                        l.iter()
                            .flat_map(|s: &crate::net::config::LinkSpec| s.pairs())
                            .collect(),
                    ),
                    (None, Some(w)) => {
                        let mut on = vec![false; n];
                        for i in w.resolve(n, env.seed, &at("workers"))? {
                            on[i] = true;
                        }
                        Cover::Workers(on)
                    }
                    (None, None) => Cover::All,
                })
            };
            match entry {
                FaultConfig::Crash(c) => {
                    let proc_ = CrashProcess {
                        entry: e,
                        mtbf: c
                            .worker_mtbf_s()
                            .map(|m| Exp::new(1.0 / m).expect("a positive mean")),
                        rejoin: c.rejoin_after_s.map(SimTime::from_secs_f64),
                        state: c.rejoin_state,
                    };
                    let workers = c.workers.resolve(n, env.seed, &at("workers"))?;
                    f.crashes.push(proc_);
                    let k = f.crashes.len() - 1;
                    for w in workers {
                        let t = match c.at_s {
                            Some(t) => SimTime::from_secs_f64(t),
                            None => f.uptime(k, w, SimTime::ZERO),
                        };
                        f.push(t, w, e, false);
                    }
                }
                FaultConfig::LinkDown(l) => {
                    let (start, end) = window(l.start_s, l.end_s, &at)?;
                    let cover = match &l.groups {
                        Some(groups) => {
                            // Workers in no group form a group of their own each.
                            let mut g: Vec<usize> = (groups.len()..groups.len() + n).collect();
                            for (k, group) in groups.iter().enumerate() {
                                for &w in group {
                                    g[w] = k;
                                }
                            }
                            Cover::Groups(g)
                        }
                        None => cover(&l.links, &l.workers)?,
                    };
                    f.rules.push(Rule {
                        entry: e,
                        effect: Effect::Down,
                        cover,
                        start,
                        end,
                    });
                }
                FaultConfig::Loss(m) | FaultConfig::Duplicate(m) => {
                    let (start, end) = window(m.start_s, m.end_s, &at)?;
                    let effect = if matches!(entry, FaultConfig::Loss(_)) {
                        Effect::Loss(m.probability)
                    } else {
                        Effect::Duplicate(m.probability)
                    };
                    f.rules.push(Rule {
                        entry: e,
                        effect,
                        cover: cover(&m.links, &m.workers)?,
                        start,
                        end,
                    });
                }
                FaultConfig::Availability(a) => {
                    let file = env.resolve(&a.path);
                    let located =
                        |m: String| ConfigError::new(&at("path"), m).hint(availability::HINT);
                    let text = std::fs::read_to_string(&file).map_err(|err| {
                        located(format!(
                            "cannot read the availability file {}: {err}",
                            file.display()
                        ))
                    })?;
                    let offs = availability::parse(&text, n).map_err(|m| {
                        located(format!("availability file {}: {m}", file.display()))
                    })?;
                    // A crash process with no clock of its own: the file gives every crash and
                    // every rejoin.
                    f.crashes.push(CrashProcess {
                        entry: e,
                        mtbf: None,
                        rejoin: None,
                        state: a.rejoin_state,
                    });
                    for o in offs {
                        f.push(o.off, o.worker, e, false);
                        if let Some(on) = o.on {
                            f.push(on, o.worker, e, true);
                        }
                    }
                }
                FaultConfig::Delay(d) => {
                    let (start, end) = window(d.start_s, d.end_s, &at)?;
                    f.has_delay = true;
                    f.rules.push(Rule {
                        entry: e,
                        effect: Effect::Delay(d.probability, d.variate(&path)?),
                        cover: cover(&d.links, &d.workers)?,
                        start,
                        end,
                    });
                }
            }
        }
        Ok(f)
    }

    /// Whether the scenario has any fault entry.
    pub fn configured(&self) -> bool {
        self.configured
    }

    fn rng(&mut self, entry: usize, sub: u64) -> &mut Stream {
        let seed = self.seed;
        self.streams.entry((entry, sub)).or_insert_with(|| {
            let mut r = stream(seed, StreamKind::Fault, entry as u64);
            r.set_stream(sub);
            r
        })
    }

    /// The next crash of worker `w` under crash process `k`, its time up drawn from `from`.
    fn uptime(&mut self, k: usize, w: usize, from: SimTime) -> SimTime {
        let p = self.crashes[k].clone();
        let exp = p.mtbf.expect("a random crash process");
        from.saturating_add(sojourn(&exp, self.rng(p.entry, w as u64)))
    }

    fn push(&mut self, t: SimTime, w: usize, entry: usize, rejoin: bool) {
        self.pending.insert((t, self.seq, w, entry, rejoin));
        self.seq += 1;
    }

    /// When the next crash or rejoin is due.
    pub fn next_time(&self) -> Option<SimTime> {
        self.pending.first().map(|p| p.0)
    }

    /// Whether a rejoin is pending (one that may wake waiting workers).
    pub fn rejoin_pending(&self) -> bool {
        self.pending.iter().any(|p| p.4)
    }

    /// Takes the next crash or rejoin, due at `now`, and applies it to the workers' states.
    /// Returns it, or `None` when it changes nothing (the worker was down already, or was
    /// brought down by another entry).
    pub fn pop(&mut self, now: SimTime) -> Option<WorkerFault> {
        let (_, _, w, entry, rejoin) = self.pending.pop_first()?;
        let k = self.crashes.iter().position(|c| c.entry == entry)?;
        if rejoin {
            if !matches!(self.down[w], Some((e, _)) if e == entry) {
                return None;
            }
            let (_, since) = self.down[w].take().expect("down");
            self.stats.down_time[w] += now - since;
            self.stats.rejoins += 1;
            if self.crashes[k].mtbf.is_some() {
                let t = self.uptime(k, w, now);
                self.push(t, w, entry, false);
            }
            self.rejoin_state = self.crashes[k].state;
            return Some(WorkerFault::Rejoin(w));
        }
        if self.down[w].is_some() {
            return None;
        }
        self.down[w] = Some((entry, now));
        self.stats.crashes += 1;
        if let Some(r) = self.crashes[k].rejoin {
            self.push(now.saturating_add(r), w, entry, true);
        }
        Some(WorkerFault::Crash(w))
    }

    /// The state the worker of the last rejoin [`Faults::pop`] returned comes back with (its
    /// crash entry's `rejoin_state`).
    pub fn rejoin_state(&self) -> RejoinState {
        self.rejoin_state
    }

    /// Whether worker `w` is down now.
    pub fn is_down(&self, w: usize) -> bool {
        self.down.get(w).is_some_and(Option::is_some)
    }

    /// The workers down now, with when each went down.
    pub fn down_workers(&self) -> Vec<(usize, SimTime)> {
        self.down
            .iter()
            .enumerate()
            .filter_map(|(w, d)| d.map(|(_, t)| (w, t)))
            .collect()
    }

    /// Whether no message from `src` can ever reach `dst` again, from `now` on: either of them is
    /// down with no rejoin pending, or a `link-down` window that never closes covers the link
    /// now. An algorithm that retries (AD-PSGD's partner timeout) stops retrying a peer cut for
    /// good, so a run whose workers can never make progress again stalls instead of retrying
    /// forever.
    pub fn cut_for_good(&self, src: usize, dst: usize, now: SimTime) -> bool {
        let gone = |w: usize| self.is_down(w) && !self.pending.iter().any(|p| p.2 == w && p.4);
        gone(src)
            || gone(dst)
            || self.rules.iter().any(|r| {
                matches!(r.effect, Effect::Down)
                    && r.end == SimTime::MAX
                    && r.start <= now
                    && r.cover.covers(src, dst)
            })
    }

    /// A message landing at `dst` now: `false` (and counted as dropped) when `dst` is down.
    pub fn deliverable(&mut self, dst: usize) -> bool {
        if self.is_down(dst) {
            self.stats.dropped_down += 1;
            return false;
        }
        true
    }

    /// The fate of a message posted on `src -> dst` at `at`: whether it is lost, sent twice,
    /// and its extra delay. Draws from the streams of the entries that cover it.
    pub(crate) fn message(
        &mut self,
        at: SimTime,
        src: usize,
        dst: usize,
    ) -> (Option<LossCause>, bool, SimTime) {
        let mut lost = None;
        let mut duplicate = false;
        let mut delay = SimTime::ZERO;
        let sub = (src as u64) << 32 | dst as u64;
        for r in 0..self.rules.len() {
            let rule = &self.rules[r];
            if at < rule.start || at >= rule.end || !rule.cover.covers(src, dst) {
                continue;
            }
            let entry = rule.entry;
            match rule.effect.clone() {
                Effect::Down => {
                    lost = lost.or(Some(LossCause::LinkDown));
                }
                Effect::Loss(p) => {
                    if self.rng(entry, sub).random_bool(p) {
                        lost = lost.or(Some(LossCause::Random));
                    }
                }
                Effect::Duplicate(p) => {
                    duplicate |= self.rng(entry, sub).random_bool(p);
                }
                Effect::Delay(p, variate) => {
                    let rng = self.rng(entry, sub);
                    if p >= 1.0 || rng.random_bool(p) {
                        let ms = variate.sample(rng);
                        delay = delay.saturating_add(SimTime::from_millis_f64(ms));
                    }
                }
            }
        }
        match lost {
            Some(LossCause::Random) => self.stats.lost += 1,
            Some(LossCause::LinkDown) => self.stats.lost_link_down += 1,
            None => {}
        }
        if duplicate {
            self.stats.duplicated += 1;
        }
        if lost.is_none() && delay > SimTime::ZERO {
            self.stats.delayed += 1;
            self.stats.delay_total = self.stats.delay_total.saturating_add(delay);
        }
        (lost, duplicate, delay)
    }

    /// The landing time of a message of `src -> dst` that would land at `t`: never before an
    /// earlier message of the pair (only tracked when some entry delays messages).
    pub(crate) fn fifo(&mut self, src: usize, dst: usize, t: SimTime) -> SimTime {
        if !self.has_delay {
            return t;
        }
        let last = self.last_arrival.entry((src, dst)).or_default();
        *last = (*last).max(t);
        *last
    }

    /// The counts so far, the down time of workers still down counted up to `now`.
    pub fn stats(&self, now: SimTime) -> FaultStats {
        let mut s = self.stats.clone();
        for (w, d) in self.down.iter().enumerate() {
            if let Some((_, since)) = d {
                s.down_time[w] += now - *since;
            }
        }
        s
    }
}

/// A run that stopped because workers wait and no event can wake them: a crashed worker that
/// never rejoins, a partition, a lost message a synchronous algorithm waits for.
#[derive(Clone, Debug, PartialEq)]
pub struct Stall {
    /// When the run stopped (the last event's time).
    pub time: SimTime,
    /// Who waits for what, one line per waiting worker, then the workers down.
    pub waiting: Vec<String>,
}

impl std::fmt::Display for Stall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "stalled at simulated time {} s: no event can wake the waiting workers: {}",
            crate::clock::time::num(self.time.as_secs_f64()),
            self.waiting.join("; ")
        )
    }
}
