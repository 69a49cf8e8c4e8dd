//! Recording what happened: utilization, waits, message ages, the worker timeline, and the
//! optional per-event logs.
//!
//! Everything here is a function of simulated events only, so a run records the same figures on
//! every backend and every host. The [`Recorder`] is owned by the [`crate::algorithm::World`] and fed by
//! the algorithms through [`crate::algorithm::Ctx`]:
//!
//! - **Activities.** Every worker is in exactly one [`Activity`] at every instant: it starts
//!   [`Activity::Idle`]; [`crate::algorithm::Ctx::begin_step`] makes it [`Activity::Compute`]; an
//!   algorithm declares the other transitions ([`crate::algorithm::Ctx::activity`],
//!   [`crate::algorithm::Ctx::block`], [`crate::algorithm::Ctx::unblock`]). Each algorithm's module
//!   documentation states its rule. A worker crashed by a `[[faults]]` entry is
//!   [`Activity::Down`] from the crash until it rejoins (or the run ends), whatever the
//!   algorithm says meanwhile ([`Recorder::crash`], [`Recorder::rejoin`]). Time in each activity
//!   is summed per worker in integer nanoseconds, so compute + communicate + blocked + idle +
//!   down is the run's simulated time exactly.
//! - **Waits.** A blocked interval is attributed, when it ends, to the peer whose arrival (a
//!   message sent, a contribution to a barrier, a gradient applied) ended it: `waits[(w, p)]` is
//!   the time worker `w` spent blocked on peer `p`.
//! - **Timeline.** The intervals of every worker's activity inside a window (clipped to it) are
//!   kept for a Gantt chart: by default from the start until every worker has completed 20 steps
//!   ([`DEFAULT_TIMELINE_STEPS`]), or `[metrics] timeline_s = [start, end]`.
//! - **Message ages** ([`crate::algorithm::Ctx::message_age`]): a histogram per receiving worker
//!   of every mixed message's age; and, per mixing step of a push-sum method
//!   ([`crate::algorithm::Ctx::mix_age`]), the age of the oldest message mixed in at that step.
//! - **Per-event logs** (off by default): every message ([`MessageRecord`]) and, from the store
//!   layer ([`crate::store::tracked`]), every applied gradient ([`GradientRecord`]), buffered during an
//!   event and handed to the [`crate::engine::Observer`] after it.
//!
//! Gradient staleness (global and per row) is measured in the store layer
//! ([`crate::store::tracked::Tracked`]) and link
//! totals in the network ([`crate::net::Network::link_stats`]); a finished run gathers all of
//! it in a [`RunRecord`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::time::SimTime;
use crate::error::ConfigError;
use crate::net::LinkStats;

/// What a worker is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Activity {
    /// Computing a gradient (the foreground activity whenever computation overlaps
    /// communication).
    Compute,
    /// Waiting on its own transfers, which only the network delays (a ring all-reduce once every
    /// worker has contributed, a parameter server's pull and push round trip, a message in
    /// flight).
    Communicate,
    /// Waiting for a peer's progress: a barrier, a neighbour's message not yet sent, a pull held
    /// back by a staleness bound.
    Blocked,
    /// Nothing to do.
    Idle,
    /// Crashed by a `[[faults]]` entry and not rejoined: set by the driver alone
    /// ([`Recorder::crash`], ended by [`Recorder::rejoin`] or the run's end); an algorithm's
    /// changes of a down worker's activity are ignored.
    Down,
}

impl Activity {
    /// Every activity, in output order.
    pub const ALL: [Activity; 5] = [
        Activity::Compute,
        Activity::Communicate,
        Activity::Blocked,
        Activity::Idle,
        Activity::Down,
    ];

    /// The name in outputs: `compute`, `communicate`, `blocked`, `idle`, `down`.
    pub fn name(self) -> &'static str {
        match self {
            Activity::Compute => "compute",
            Activity::Communicate => "communicate",
            Activity::Blocked => "blocked",
            Activity::Idle => "idle",
            Activity::Down => "down",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Reads an activity back from its name in the outputs ([`Activity::name`]).
impl std::str::FromStr for Activity {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Activity::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown activity `{s}` (expected compute, communicate, blocked, idle or down)"
                )
            })
    }
}

/// The dense window may always span this many values, however few of them were seen.
const DENSE: usize = 256;

/// A histogram of non-negative integer measurements (staleness, message ages).
///
/// Values are counted in a dense window `base..base + len` as far as it stays at most about
/// twice as long as the number of distinct values recorded (at least 256 long), the others in a
/// map. The window starts at the first value and grows towards later ones: the staleness at
/// 1,024 workers sits in a few hundred values near `n` (and a map lookup per application, the
/// recorder measures every one, cost more than the rest of the bookkeeping), so a window from
/// zero would be mostly empty counters, 8 KB per worker touched at every measurement.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Histogram {
    /// The value counted by `dense[0]`.
    base: u64,
    /// Counts of the values `base..base + dense.len()`.
    dense: Vec<u64>,
    /// Counts of the values outside the window.
    sparse: BTreeMap<u64, u64>,
    /// Distinct values recorded.
    distinct: usize,
}

impl PartialEq for Histogram {
    /// The same measurements, however they are laid out.
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Histogram {}

impl Histogram {
    /// Adds one measurement.
    pub fn record(&mut self, value: u64) {
        self.record_n(value, 1);
    }

    /// Inline: a value inside the window (nearly all of them) is an increment.
    #[inline(always)]
    fn record_n(&mut self, value: u64, count: u64) {
        if let Ok(at) = usize::try_from(value.wrapping_sub(self.base))
            && let Some(c) = self.dense.get_mut(at)
            && count > 0
        {
            self.distinct += usize::from(*c == 0);
            *c += count;
            return;
        }
        self.record_outside(value, count);
    }

    /// [`Histogram::record_n`] of a value outside the window: the window grows over it, or the
    /// map counts it.
    fn record_outside(&mut self, value: u64, count: u64) {
        if count == 0 {
            return;
        }
        let len = self.dense.len() as u64;
        if len == 0 {
            self.base = value;
        }
        let bound = DENSE.max(2 * (self.distinct + 1)) as u64;
        let (lo, hi) = (
            self.base.min(value),
            (self.base + len).max(value.saturating_add(1)),
        );
        if hi - lo <= bound {
            self.grow_to(lo, hi, bound);
            let c = &mut self.dense[(value - self.base) as usize];
            self.distinct += usize::from(*c == 0);
            *c += count;
        } else {
            let c = self.sparse.entry(value).or_default();
            self.distinct += usize::from(*c == 0);
            *c += count;
        }
    }

    /// Widens the window to cover `lo..hi` (at most `bound` long): geometrically, towards the
    /// side the new value lies on, taking in the map's values it now covers.
    fn grow_to(&mut self, lo: u64, hi: u64, bound: u64) {
        let len = self.dense.len() as u64;
        let new_len = (hi - lo).max(2 * len).min(bound);
        let (base, end) = if lo < self.base {
            // Down: keep the top, start low enough (and not below zero).
            let end = self.base + len;
            (end.saturating_sub(new_len).min(lo), end)
        } else {
            (self.base, self.base + new_len)
        };
        let mut dense = vec![0; (end - base) as usize];
        let at = (self.base - base) as usize;
        dense[at..at + self.dense.len()].copy_from_slice(&self.dense);
        self.base = base;
        self.dense = dense;
        let inside: Vec<u64> = self.sparse.range(base..end).map(|(&v, _)| v).collect();
        for v in inside {
            self.dense[(v - base) as usize] = self.sparse.remove(&v).unwrap_or(0);
        }
    }

    /// Adds every measurement of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (v, c) in other.iter() {
            self.record_n(v, c);
        }
    }

    /// Number of measurements.
    pub fn count(&self) -> u64 {
        self.iter().map(|(_, c)| c).sum()
    }

    /// Whether nothing was measured.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// Their mean (NaN when empty).
    pub fn mean(&self) -> f64 {
        let count = self.count();
        if count == 0 {
            return f64::NAN;
        }
        let sum: u128 = self
            .iter()
            .map(|(v, c)| u128::from(v) * u128::from(c))
            .sum();
        sum as f64 / count as f64
    }

    /// Their maximum (0 when empty).
    pub fn max(&self) -> u64 {
        self.iter().last().map_or(0, |(v, _)| v)
    }

    /// The `q`-quantile by the nearest-rank rule: the smallest value `v` such that at least
    /// `⌈q · count⌉` measurements are `≤ v` (0 when empty). `quantile(0.99)` is the p99.
    pub fn quantile(&self, q: f64) -> u64 {
        let count = self.count();
        let rank = ((q.clamp(0.0, 1.0) * count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (v, c) in self.iter() {
            seen += c;
            if seen >= rank {
                return v;
            }
        }
        0
    }

    /// `(value, count)` pairs with a nonzero count, by increasing value.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let (base, end) = (self.base, self.base + self.dense.len() as u64);
        let dense = self
            .dense
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(move |(k, &c)| (base + k as u64, c));
        let pair = |(&v, &c): (&u64, &u64)| (v, c);
        let below = self.sparse.range(..base).map(pair);
        let above = self.sparse.range(end..).map(pair);
        below.chain(dense).chain(above)
    }
}

/// Steps and time in each activity of one worker over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerUsage {
    /// Steps the worker completed (gradients of its own applied, as the algorithm counts them).
    pub steps: u64,
    /// Time in each activity, indexed like [`Activity::ALL`].
    pub time: [SimTime; 5],
}

impl WorkerUsage {
    /// Time spent in `activity`.
    pub fn get(&self, activity: Activity) -> SimTime {
        self.time[activity.index()]
    }

    /// Time in all activities together: the run's simulated time, once the run has finished.
    pub fn total(&self) -> SimTime {
        self.time.iter().fold(SimTime::ZERO, |a, &t| a + t)
    }
}

/// One interval of a worker's timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interval {
    /// The worker.
    pub worker: usize,
    /// What it did.
    pub activity: Activity,
    /// Start (clipped to the window).
    pub start: SimTime,
    /// End (clipped to the window).
    pub end: SimTime,
    /// For a blocked interval, the peer whose arrival ended it (none when the run ended first).
    pub waited_for: Option<usize>,
}

/// One applied gradient (the per-event log `gradients.csv`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GradientRecord {
    /// The worker that computed it.
    pub worker: usize,
    /// The row it was applied to.
    pub row: usize,
    /// When the parameters it was computed on were read (its request).
    pub read: SimTime,
    /// When it was applied.
    pub apply: SimTime,
    /// Row staleness: updates the row received between the read and the application
    /// ([`crate::store::tracked`]).
    pub row_staleness: u64,
    /// Global staleness: global iterations (gradients applied anywhere, each counted once)
    /// between the read and the application ([`crate::store::tracked`]).
    pub global_staleness: u64,
}

/// One message (the per-event log `messages.csv`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageRecord {
    /// Sender node.
    pub src: usize,
    /// Receiver node.
    pub dst: usize,
    /// Bytes on the wire (header included).
    pub bytes: u64,
    /// When it was posted.
    pub send: SimTime,
    /// When it was delivered.
    pub arrive: SimTime,
}

/// Steps of every worker the default timeline window covers.
pub const DEFAULT_TIMELINE_STEPS: u64 = 20;

/// At most this many timeline intervals are kept; the window ends where the cap is reached.
pub const MAX_TIMELINE_INTERVALS: usize = 200_000;

/// The `[metrics]` section: what a run records besides the defaults.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Also evaluate every worker replica at each evaluation point (min/mean/max columns).
    #[serde(default)]
    pub eval_replicas: bool,
    /// Report the first simulated time the evaluated model reaches this held-out accuracy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_accuracy: Option<f64>,
    /// Report the first simulated time the evaluated model's held-out loss is at most this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_loss: Option<f64>,
    /// The timeline window `[start, end]` in simulated seconds (default: from 0 until every
    /// worker has completed 20 steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline_s: Option<[f64; 2]>,
    /// Write every applied gradient (`gradients.csv`).
    #[serde(default)]
    pub log_gradients: bool,
    /// Write every message (`messages.csv`).
    #[serde(default)]
    pub log_messages: bool,
    /// At each evaluation point, record the most bytes posted on one link (an ordered pair of
    /// nodes) since the previous point: the series `peak_link_bytes` of `series.csv`, the
    /// claim metric of that name.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub link_peaks: bool,
}

impl MetricsConfig {
    /// Checks every value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(a) = self.target_accuracy
            && !(a.is_finite() && a > 0.0 && a <= 1.0)
        {
            return Err(ConfigError::new(
                "metrics.target_accuracy",
                format!("target_accuracy is a fraction in (0, 1], got {a}"),
            )
            .hint("e.g. target_accuracy = 0.9 for 90%"));
        }
        if let Some(l) = self.target_loss
            && !l.is_finite()
        {
            return Err(ConfigError::new(
                "metrics.target_loss",
                format!("target_loss must be a finite number, got {l}"),
            ));
        }
        if let Some([start, end]) = self.timeline_s {
            if !(start.is_finite() && start >= 0.0) {
                return Err(ConfigError::new(
                    "metrics.timeline_s",
                    format!("the timeline window starts at {start} s; it must start at 0 or later"),
                )
                .hint("timeline_s = [start, end] in simulated seconds, e.g. [0.0, 0.5]"));
            }
            if !(end.is_finite() && end > start) {
                return Err(ConfigError::new(
                    "metrics.timeline_s",
                    format!(
                        "the timeline window ends at {end} s, not after it starts at {start} s"
                    ),
                )
                .hint("timeline_s = [start, end] with end > start, e.g. [0.0, 0.5]"));
            }
            SimTime::checked_from_secs_f64(start, "metrics.timeline_s")?;
            SimTime::checked_from_secs_f64(end, "metrics.timeline_s")?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct TimelineWindow {
    start: SimTime,
    /// `None` while the default window's end is not known yet.
    end: Option<SimTime>,
    /// The default window: it ends when every worker has this many steps.
    until_steps: Option<u64>,
    reached: usize,
}

/// The recorder of one run (see the [module documentation](self)).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Recorder {
    usage: Vec<WorkerUsage>,
    current: Vec<(Activity, SimTime)>,
    waits: BTreeMap<(usize, usize), SimTime>,
    message_age: Vec<Histogram>,
    mix_age: Vec<Histogram>,
    window: TimelineWindow,
    timeline: Vec<Interval>,
    messages: Option<Vec<MessageRecord>>,
    faults: Vec<FaultEvent>,
}

impl Recorder {
    /// A recorder for `workers` workers, all idle at time zero, with the default options.
    pub fn new(workers: usize) -> Self {
        let mut r = Recorder {
            usage: vec![WorkerUsage::default(); workers],
            current: vec![(Activity::Idle, SimTime::ZERO); workers],
            waits: BTreeMap::new(),
            message_age: vec![Histogram::default(); workers],
            mix_age: vec![Histogram::default(); workers],
            window: TimelineWindow {
                start: SimTime::ZERO,
                end: None,
                until_steps: None,
                reached: 0,
            },
            timeline: Vec::new(),
            messages: None,
            faults: Vec::new(),
        };
        r.configure(&MetricsConfig::default());
        r
    }

    /// Applies the `[metrics]` options (timeline window, message log). Call before the run.
    pub fn configure(&mut self, cfg: &MetricsConfig) {
        self.window = match cfg.timeline_s {
            Some([a, b]) => TimelineWindow {
                start: SimTime::from_secs_f64(a),
                end: Some(SimTime::from_secs_f64(b)),
                until_steps: None,
                reached: 0,
            },
            None => TimelineWindow {
                start: SimTime::ZERO,
                end: None,
                until_steps: Some(DEFAULT_TIMELINE_STEPS),
                reached: 0,
            },
        };
        self.messages = cfg.log_messages.then(Vec::new);
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.usage.len()
    }

    /// What `worker` is doing now.
    pub fn activity(&self, worker: usize) -> Activity {
        self.current[worker].0
    }

    /// `worker` switches to `next` at `now`; a blocked interval that ends here is attributed to
    /// `waited_for`. Switching to the current activity (other than blocked-to-blocked with a
    /// known peer) changes nothing.
    /// While `worker` is down ([`Recorder::crash`]) this changes nothing: only
    /// [`Recorder::rejoin`] ends a down interval.
    pub fn set(&mut self, worker: usize, next: Activity, now: SimTime, waited_for: Option<usize>) {
        if self.current[worker].0 == Activity::Down {
            return;
        }
        self.switch(worker, next, now, waited_for);
    }

    /// `worker` crashes at `now`: its current interval ends (a blocked one with no peer) and a
    /// down interval begins, which only [`Recorder::rejoin`] or the run's end closes.
    pub fn crash(&mut self, worker: usize, now: SimTime) {
        self.switch(worker, Activity::Down, now, None);
    }

    /// `worker` rejoins at `now`: its down interval ends and it is idle until the algorithm
    /// says otherwise. Nothing happens when it was not down.
    pub fn rejoin(&mut self, worker: usize, now: SimTime) {
        if self.current[worker].0 == Activity::Down {
            self.switch(worker, Activity::Idle, now, None);
        }
    }

    fn switch(&mut self, worker: usize, next: Activity, now: SimTime, waited_for: Option<usize>) {
        let (activity, since) = self.current[worker];
        if activity == next {
            return;
        }
        let span = now - since;
        self.usage[worker].time[activity.index()] += span;
        if activity == Activity::Blocked
            && let Some(peer) = waited_for
            && span > SimTime::ZERO
        {
            *self.waits.entry((worker, peer)).or_default() += span;
        }
        self.interval(Interval {
            worker,
            activity,
            start: since,
            end: now,
            waited_for: if activity == Activity::Blocked {
                waited_for
            } else {
                None
            },
        });
        self.current[worker] = (next, now);
    }

    /// Ends `worker`'s current interval at `now` and opens another of the same activity: a new
    /// step begins while the worker was already computing. The totals are unchanged; the
    /// timeline shows the step boundary.
    pub fn split(&mut self, worker: usize, now: SimTime) {
        let (activity, since) = self.current[worker];
        if now == since || activity == Activity::Down {
            return;
        }
        self.usage[worker].time[activity.index()] += now - since;
        self.interval(Interval {
            worker,
            activity,
            start: since,
            end: now,
            waited_for: None,
        });
        self.current[worker] = (activity, now);
    }

    /// `worker` completed a step at `now`.
    pub fn step(&mut self, worker: usize, now: SimTime) {
        self.usage[worker].steps += 1;
        if let Some(k) = self.window.until_steps
            && self.usage[worker].steps == k
        {
            self.window.reached += 1;
            if self.window.reached == self.usage.len() && self.window.end.is_none() {
                self.window.end = Some(now);
            }
        }
    }

    /// `receiver` mixed a message `age` iterations old.
    pub fn message_age(&mut self, receiver: usize, age: u64) {
        if let Some(h) = self.message_age.get_mut(receiver) {
            h.record(age);
        }
    }

    /// `receiver` mixed messages in one step, the oldest `age` iterations old.
    pub fn mix_age(&mut self, receiver: usize, age: u64) {
        if let Some(h) = self.mix_age.get_mut(receiver) {
            h.record(age);
        }
    }

    /// A message was sent (kept only when the message log is on).
    pub fn message(&mut self, record: MessageRecord) {
        if let Some(m) = &mut self.messages {
            m.push(record);
        }
    }

    /// A message a fault touched: kept when it falls inside the timeline window, up to
    /// [`MAX_FAULT_EVENTS`].
    pub fn fault(&mut self, event: FaultEvent) {
        let inside =
            event.time >= self.window.start && self.window.end.is_none_or(|end| event.time <= end);
        if inside && self.faults.len() < MAX_FAULT_EVENTS {
            self.faults.push(event);
        }
    }

    /// Whether every message is logged (`messages.csv`).
    pub fn logs_messages(&self) -> bool {
        self.messages.is_some()
    }

    /// Whether messages were logged since the last [`Recorder::take_messages`].
    pub fn has_messages(&self) -> bool {
        self.messages.as_ref().is_some_and(|m| !m.is_empty())
    }

    /// The messages logged since the last call.
    pub fn take_messages(&mut self) -> Vec<MessageRecord> {
        self.messages
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn interval(&mut self, iv: Interval) {
        let start = iv.start.max(self.window.start);
        let end = match self.window.end {
            Some(e) => iv.end.min(e),
            None => iv.end,
        };
        if start >= end {
            return;
        }
        self.timeline.push(Interval { start, end, ..iv });
        if self.window.end.is_none() && self.timeline.len() >= MAX_TIMELINE_INTERVALS {
            self.window.end = Some(end);
        }
    }

    /// Closes every worker's current interval at `now`, the end of the run, and returns the
    /// per-worker usage, the waits, the message ages and the timeline with its window (the
    /// timeline moves out of the recorder).
    pub fn finish(&mut self, now: SimTime) -> RunRecord {
        for w in 0..self.usage.len() {
            let (activity, _) = self.current[w];
            // Close at `now` by switching to a sentinel and back: the open interval is counted
            // and clipped like any other; a blocked one has no peer yet.
            let other = if activity == Activity::Idle {
                Activity::Compute
            } else {
                Activity::Idle
            };
            self.switch(w, other, now, None);
            self.current[w] = (activity, now);
        }
        let end = self
            .window
            .end
            .unwrap_or(now)
            .min(now)
            .max(self.window.start);
        RunRecord {
            usage: self.usage.clone(),
            waits: self.waits.clone(),
            message_age: self.message_age.clone(),
            mix_age: self.mix_age.clone(),
            timeline: std::mem::take(&mut self.timeline),
            timeline_window: (self.window.start, end),
            // A default window's end is known only now.
            fault_events: std::mem::take(&mut self.faults)
                .into_iter()
                .filter(|e| e.time <= end)
                .collect(),
            row_staleness: Vec::new(),
            global_staleness: Vec::new(),
            links: BTreeMap::new(),
        }
    }
}

/// What a fault did to one message ([`crate::fault`]), as the timeline marks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum FaultMark {
    /// Lost at random (`loss`).
    Lost,
    /// Lost because its link was down (`link-down`).
    LostLinkDown,
    /// Dropped at its receiver, which was down (`crash`).
    DroppedDown,
    /// Sent twice (`duplicate`).
    Duplicated,
    /// Delivered late (`delay`).
    Delayed,
}

impl FaultMark {
    /// Every mark, in column order.
    pub const ALL: [FaultMark; 5] = [
        FaultMark::Lost,
        FaultMark::LostLinkDown,
        FaultMark::DroppedDown,
        FaultMark::Duplicated,
        FaultMark::Delayed,
    ];

    /// The name `faults.csv` writes.
    pub fn name(self) -> &'static str {
        match self {
            FaultMark::Lost => "lost",
            FaultMark::LostLinkDown => "lost-link-down",
            FaultMark::DroppedDown => "dropped-down",
            FaultMark::Duplicated => "duplicated",
            FaultMark::Delayed => "delayed",
        }
    }
}

/// A message a fault touched, at the instant it did ([`Recorder::fault`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultEvent {
    /// When: the message's posting (lost, duplicated, delayed), or its landing (dropped).
    pub time: SimTime,
    /// What happened to it.
    pub mark: FaultMark,
    /// The node whose timeline shows it: the sender, or the down receiver of a dropped message.
    pub node: usize,
    /// The other end (the receiver; none for a dropped message, whose sender is not known).
    pub peer: Option<usize>,
}

/// At most this many fault events are kept per run (the first ones inside the timeline window);
/// the counts in [`crate::fault::FaultStats`] cover every message.
pub const MAX_FAULT_EVENTS: usize = 100_000;

/// Everything recorded over one run, for the writers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Per worker: steps and time in each activity (summing to the run's simulated time).
    pub usage: Vec<WorkerUsage>,
    /// `(worker, peer)`: the time `worker` was blocked on `peer`.
    pub waits: BTreeMap<(usize, usize), SimTime>,
    /// Per worker: the global staleness of the gradients it computed, at every application
    /// ([`crate::store::tracked`]): global iterations between the read and the application.
    pub global_staleness: Vec<Histogram>,
    /// Per worker: the row staleness of the gradients it computed, at every application
    /// ([`crate::store::tracked`]): updates of the target row between the read and the
    /// application.
    pub row_staleness: Vec<Histogram>,
    /// Per receiving worker: the age in iterations of the messages it mixed (SGP).
    pub message_age: Vec<Histogram>,
    /// Per receiving worker: at every step that mixed messages in, the age in iterations of the
    /// oldest one (SGP).
    pub mix_age: Vec<Histogram>,
    /// Per ordered pair of nodes that carried traffic.
    pub links: BTreeMap<(usize, usize), LinkStats>,
    /// The activity intervals inside the window, clipped to it, in the order they ended.
    pub timeline: Vec<Interval>,
    /// The timeline window `[start, end]`.
    pub timeline_window: (SimTime, SimTime),
    /// The messages faults touched inside the window (at most [`MAX_FAULT_EVENTS`]), in order.
    pub fault_events: Vec<FaultEvent>,
}

impl RunRecord {
    /// Every application's global staleness, all workers together.
    pub fn all_global_staleness(&self) -> Histogram {
        merged(&self.global_staleness)
    }

    /// Every application's row staleness, all workers together.
    pub fn all_row_staleness(&self) -> Histogram {
        merged(&self.row_staleness)
    }

    /// The age of the oldest message of every mixing step, all receivers together.
    pub fn mix_ages(&self) -> Histogram {
        merged(&self.mix_age)
    }

    /// Every mixed message's age, all receivers together.
    pub fn message_ages(&self) -> Histogram {
        merged(&self.message_age)
    }

    /// The fraction of worker-time in each activity (indexed like [`Activity::ALL`]): each
    /// worker's time divided by the run's simulated time, averaged over workers.
    pub fn utilization(&self) -> [f64; 5] {
        let mut out = [0.0; 5];
        let n = self.usage.len();
        for u in &self.usage {
            let total = u.total().as_nanos();
            if total == 0 {
                continue;
            }
            for (o, t) in out.iter_mut().zip(u.time) {
                *o += t.as_nanos() as f64 / total as f64 / n as f64;
            }
        }
        out
    }

    /// Time `worker` was blocked on anyone, and on `peer`.
    pub fn waited(&self, worker: usize, peer: usize) -> SimTime {
        self.waits
            .get(&(worker, peer))
            .copied()
            .unwrap_or(SimTime::ZERO)
    }
}

fn merged(hs: &[Histogram]) -> Histogram {
    let mut all = Histogram::default();
    for h in hs {
        all.merge(h);
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ns: u64) -> SimTime {
        SimTime::from_nanos(ns)
    }

    #[test]
    fn large_values_are_counted_too() {
        let mut h = Histogram::default();
        h.record(5);
        h.record(5000);
        h.record(3);
        assert_eq!(
            h.iter().collect::<Vec<_>>(),
            vec![(3, 1), (5, 1), (5000, 1)]
        );
        assert_eq!(h.max(), 5000);
        let mut g = Histogram::default();
        g.merge(&h);
        g.merge(&h);
        assert_eq!(g.count(), 6);
        assert_eq!(g.quantile(0.5), 5);
    }

    /// Values spread past the dense part in any order: the counts are those of a plain map,
    /// the dense part grows only as far as the distinct values justify, and histograms with
    /// the same counts are equal however their parts are laid out.
    #[test]
    fn counts_agree_with_a_map_whatever_the_layout() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut h = Histogram::default();
        let mut reference = BTreeMap::new();
        let mut values = Vec::new();
        for _ in 0..20_000 {
            let v = match rng.random_range(0..3) {
                0 => rng.random_range(0..1_500),
                1 => rng.random_range(0..6_000),
                _ => rng.random_range(0..1u64 << 40),
            };
            h.record(v);
            values.push(v);
            *reference.entry(v).or_insert(0u64) += 1;
            assert!(h.dense.len() <= DENSE.max(2 * (reference.len() + 1)));
        }
        assert_eq!(
            h.iter().collect::<Vec<_>>(),
            reference.into_iter().collect::<Vec<_>>()
        );
        assert!(
            h.dense.len() > DENSE,
            "the dense part grew with the distinct values"
        );
        // The same values recorded in reverse order lay out differently but are equal.
        let mut g = Histogram::default();
        values.iter().rev().for_each(|&v| g.record(v));
        assert_eq!(g, h);
        g.record(7);
        assert_ne!(g, h);
    }

    /// Staleness near `n` (here 1,000 to 1,300, arriving in both directions from the first)
    /// is counted in a window as long as its spread, not in one from zero, and nothing goes to
    /// the map.
    #[test]
    fn the_window_follows_the_values_not_zero() {
        let mut h = Histogram::default();
        let values: Vec<u64> = (0..3_000).map(|k| 1_150 + (k * 37 % 301) - 150).collect();
        for &v in &values {
            h.record(v);
        }
        assert!(h.sparse.is_empty());
        assert!(h.base >= 1_000 - 300, "window starts at {}", h.base);
        assert!(h.dense.len() <= 602, "window of {}", h.dense.len());
        let mut reference = BTreeMap::new();
        values
            .iter()
            .for_each(|&v| *reference.entry(v).or_insert(0u64) += 1);
        assert_eq!(
            h.iter().collect::<Vec<_>>(),
            reference.into_iter().collect::<Vec<_>>()
        );
        // A value far below the window goes to the map, and still comes first.
        h.record(3);
        assert_eq!(h.iter().next(), Some((3, 1)));
        assert_eq!(h.quantile(0.0), 3);
    }

    #[test]
    fn quantiles_follow_the_nearest_rank_rule() {
        let mut h = Histogram::default();
        for v in 1..=100 {
            h.record(v);
        }
        assert_eq!(h.quantile(0.99), 99);
        assert_eq!(h.quantile(1.0), 100);
        assert_eq!(h.quantile(0.0), 1);
        assert_eq!(h.mean(), 50.5);
        assert_eq!(h.max(), 100);
        assert_eq!(Histogram::default().quantile(0.5), 0);
    }

    #[test]
    fn activities_sum_to_the_run_time_and_waits_are_attributed() {
        let mut r = Recorder::new(2);
        r.set(0, Activity::Compute, t(0), None);
        r.set(1, Activity::Compute, t(0), None);
        r.set(0, Activity::Blocked, t(10), None);
        r.set(1, Activity::Communicate, t(40), None);
        r.set(0, Activity::Communicate, t(40), Some(1));
        r.set(0, Activity::Compute, t(45), None);
        let rec = r.finish(t(50));
        for u in &rec.usage {
            assert_eq!(u.total(), t(50));
        }
        assert_eq!(rec.usage[0].get(Activity::Blocked), t(30));
        assert_eq!(rec.waited(0, 1), t(30));
        assert_eq!(rec.timeline.len(), 6);
        let blocked: Vec<_> = rec
            .timeline
            .iter()
            .filter(|i| i.activity == Activity::Blocked)
            .collect();
        assert_eq!(blocked.len(), 1);
        assert_eq!((blocked[0].start, blocked[0].end), (t(10), t(40)));
        assert_eq!(blocked[0].waited_for, Some(1));
    }

    #[test]
    fn a_down_worker_stays_down_until_it_rejoins_whatever_the_algorithm_says() {
        let mut r = Recorder::new(2);
        r.set(0, Activity::Compute, t(0), None);
        r.set(0, Activity::Blocked, t(5), None);
        r.crash(0, t(10));
        // The algorithm's changes while it is down are ignored.
        r.set(0, Activity::Compute, t(12), None);
        r.split(0, t(14));
        r.rejoin(1, t(15)); // not down: nothing happens
        r.rejoin(0, t(20));
        r.set(0, Activity::Compute, t(25), None);
        r.crash(1, t(40)); // down at the end of the run: closed there
        let rec = r.finish(t(50));
        let spans: Vec<_> = rec
            .timeline
            .iter()
            .map(|i| (i.worker, i.activity, i.start, i.end))
            .collect();
        assert!(
            spans.contains(&(0, Activity::Down, t(10), t(20))),
            "{spans:?}"
        );
        assert!(
            spans.contains(&(0, Activity::Idle, t(20), t(25))),
            "{spans:?}"
        );
        assert!(
            spans.contains(&(1, Activity::Down, t(40), t(50))),
            "{spans:?}"
        );
        assert_eq!(rec.usage[0].get(Activity::Down), t(10));
        assert_eq!(rec.usage[1].get(Activity::Down), t(10));
        for u in &rec.usage {
            assert_eq!(u.total(), t(50));
        }
        assert_eq!(rec.utilization()[4], 0.2);
    }

    #[test]
    fn back_to_back_steps_stay_apart_on_the_timeline() {
        let mut r = Recorder::new(1);
        r.set(0, Activity::Compute, t(0), None);
        r.split(0, t(10));
        r.split(0, t(10)); // a zero-length split adds nothing
        r.split(0, t(25));
        let rec = r.finish(t(30));
        assert_eq!(rec.usage[0].get(Activity::Compute), t(30));
        let spans: Vec<_> = rec.timeline.iter().map(|i| (i.start, i.end)).collect();
        assert_eq!(spans, vec![(t(0), t(10)), (t(10), t(25)), (t(25), t(30))]);
    }

    #[test]
    fn the_timeline_is_clipped_to_its_window() {
        let mut r = Recorder::new(1);
        r.configure(&MetricsConfig {
            timeline_s: Some([1e-8, 3e-8]),
            ..Default::default()
        });
        r.set(0, Activity::Compute, t(0), None);
        r.set(0, Activity::Communicate, t(20), None);
        let rec = r.finish(t(100));
        assert_eq!(rec.timeline_window, (t(10), t(30)));
        let spans: Vec<_> = rec.timeline.iter().map(|i| (i.start, i.end)).collect();
        assert_eq!(spans, vec![(t(10), t(20)), (t(20), t(30))]);
        assert_eq!(rec.usage[0].total(), t(100));
    }
}
