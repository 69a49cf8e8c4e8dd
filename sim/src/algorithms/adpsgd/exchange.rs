//! The steps and averagings of AD-PSGD that the event handlers drive.
//!
//! A worker's computation applies its gradient and starts its next step; an active worker picks
//! a partner, sends its request after the host time of an averaging, and ends its wait when the
//! reply comes or its partner timeout passes; a correction that will never be added is counted
//! lost. These are the pieces each handler of [`super::handlers`] puts together.

use rand::Rng;

use super::{AdPsgd, Averaging, Event, Outgoing, Partner};
use crate::algorithm::Ctx;
use crate::engine::SimTime;
use crate::record::Activity;
use crate::store::{MsgId, ReplicaStore, Slot};

impl AdPsgd {
    /// A reply `delta` is no longer in flight.
    #[inline]
    pub(super) fn landed(&mut self, delta: MsgId) {
        if let Some(k) = self.in_flight.iter().position(|&m| m == delta) {
            self.in_flight.remove(k);
        }
    }

    /// Active `w` picks its next partner among `peers` and counts the pair.
    fn pick(&mut self, w: usize, peers: &[usize]) -> usize {
        let j = self.draw(w, peers);
        self.count_pair(w, j);
        j
    }

    /// Counts one averaging started by active `w` with passive `j`.
    #[inline]
    pub(super) fn count_pair(&mut self, w: usize, j: usize) {
        let pairs = &mut self.workers[w].pairs;
        match pairs.binary_search_by_key(&j, |&(p, _)| p) {
            Ok(k) => pairs[k].1 += 1,
            Err(k) => pairs.insert(k, (j, 1)),
        }
    }

    /// The partner rule's choice among `peers`, without counting it.
    fn draw(&mut self, w: usize, peers: &[usize]) -> usize {
        let st = &mut self.workers[w];
        let rng = &mut self.rngs[w];
        // After a timeout: another neighbour than the one that did not answer, if there is one.
        let avoid = st.avoid.take().filter(|&a| peers.iter().any(|&p| p != a));
        match self.partner {
            Partner::Uniform => match avoid {
                None => peers[rng.random_range(0..peers.len())],
                Some(a) => {
                    let others: Vec<usize> = peers.iter().copied().filter(|&p| p != a).collect();
                    others[rng.random_range(0..others.len())]
                }
            },
            Partner::Schedule => unreachable!("the schedule draws no partner"),
            Partner::Cycle => {
                let mut j = peers[st.next_partner % peers.len()];
                st.next_partner += 1;
                if Some(j) == avoid {
                    j = peers[st.next_partner % peers.len()];
                    st.next_partner += 1;
                }
                j
            }
        }
    }

    /// Applies `w`'s gradient with the learning rate in force now and counts the step.
    #[inline]
    pub(super) fn apply(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let g = self.workers[w].grad.take().expect("a gradient in flight");
        let lr = cx.lr_for(w);
        cx.world.store.apply_gradient(w, g, lr);
        cx.world.store.release_gradient(g);
        cx.step_done(w);
        let st = &mut self.workers[w];
        st.started_since_step = 0;
        st.steps_since_average = st.steps_since_average.saturating_add(1);
    }

    /// Starts `w`'s next gradient computation, tagged with its crash count so that a crash
    /// abandons it.
    #[inline]
    pub(super) fn next_step(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let life = self.workers[w].life;
        self.workers[w].grad = Some(cx.start_step(w, Event::ComputeDone(w, life)));
    }

    /// Thread mode: the gossip loop of active `w` starts its next averaging, unless one is in
    /// flight or the bound `max_averagings_per_step` holds it until the next gradient step.
    #[inline]
    pub(super) fn maybe_average(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let st = &self.workers[w];
        if !st.active || st.waiting_for.is_some() || st.parked || st.down {
            return;
        }
        if self.ahead.is_some_and(|k| st.started_since_step >= k) {
            return;
        }
        let st = &mut self.workers[w];
        st.started_since_step = st.started_since_step.saturating_add(1);
        if self.schedule.is_some() {
            self.schedule_round(w, cx);
            return;
        }
        let snap = cx.world.store.new_msg(&[(Slot::Row(w), 1.0)]);
        self.request_average(w, Some(snap), cx);
    }

    /// The delay before passive `p`'s reply leaves, from `now`: its gossip loop does one
    /// averaging's host work at a time.
    #[inline]
    pub(super) fn reply_delay(&mut self, p: usize, now: SimTime) -> SimTime {
        if self.overhead == SimTime::ZERO {
            return SimTime::ZERO;
        }
        let leaves = self.busy_until[p].max(now) + self.overhead;
        self.busy_until[p] = leaves;
        leaves - now
    }

    /// Sends `msg` from `from` after `delay` (at once when it is zero).
    #[inline]
    pub(super) fn depart(
        &mut self,
        from: usize,
        delay: SimTime,
        msg: Outgoing,
        cx: &mut Ctx<'_, '_, Event>,
    ) {
        if delay == SimTime::ZERO {
            self.post(from, msg, cx);
        } else {
            cx.after(delay, Event::Depart { from, msg });
        }
    }

    /// Puts `msg` on the network from `from`.
    #[inline]
    pub(super) fn post(&mut self, from: usize, msg: Outgoing, cx: &mut Ctx<'_, '_, Event>) {
        let bytes = cx.world.model_bytes;
        match msg {
            Outgoing::Request { to, snap, attempt } => {
                let sent = cx.send(
                    from,
                    to,
                    bytes,
                    Event::AverageRequest {
                        from,
                        to,
                        snap,
                        attempt,
                    },
                );
                if let Some(timeout) = self.timeout {
                    if sent.lost.is_some()
                        && let Some(m) = snap
                    {
                        cx.world.store.release_msg(m);
                    }
                    cx.after(
                        timeout,
                        Event::Timeout {
                            worker: from,
                            attempt,
                        },
                    );
                }
            }
            Outgoing::Reply { to, delta, attempt } => {
                let sent = cx.send(from, to, bytes, Event::AverageReply { to, delta, attempt });
                if sent.lost.is_some()
                    && let Some(m) = delta
                {
                    self.reply_lost(m, cx);
                }
            }
            Outgoing::ScheduleRequest { to, snap, round } => {
                cx.send(
                    from,
                    to,
                    bytes,
                    Event::ScheduleRequest {
                        from,
                        to,
                        snap,
                        round,
                    },
                );
            }
            Outgoing::ScheduleReply { to, model, round } => {
                cx.send(from, to, bytes, Event::ScheduleReply { to, model, round });
            }
        }
    }

    /// Active `w` picks a passive neighbour, sends it its model and waits for the reply;
    /// `snap` is the model sent (thread mode), `None` when `w` averages its live row.
    fn request_average(&mut self, w: usize, snap: Option<MsgId>, cx: &mut Ctx<'_, '_, Event>) {
        let j = self.pick(w, cx.world.topology.neighbors(w));
        let st = &mut self.workers[w];
        st.waiting_for = Some(j);
        st.attempt += 1;
        st.started += 1;
        let attempt = st.attempt;
        self.depart(
            w,
            self.overhead,
            Outgoing::Request {
                to: j,
                snap,
                attempt,
            },
            cx,
        );
    }

    /// Per-step mode: `w` has its gradient and averages before applying it (under faults with a
    /// snapshot, see "Under faults").
    #[inline]
    pub(super) fn average_step(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let snap = self
            .timeout
            .map(|_| cx.world.store.new_msg(&[(Slot::Row(w), 1.0)]));
        self.request_average(w, snap, cx);
    }

    /// The wait of `w` for its reply ended (the reply came, or `w` gave up): per-step mode
    /// applies the gradient and starts the next step; thread mode completed an averaging: a
    /// gradient held for it is applied (and the next step starts), then the gossip loop goes on.
    #[inline]
    pub(super) fn wait_over(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        self.workers[w].waiting_for = None;
        self.workers[w].completed += 1;
        match self.averaging {
            Averaging::PerStep => {
                self.apply(w, cx);
                self.next_step(w, cx);
            }
            Averaging::Thread => {
                self.workers[w].steps_since_average = 0;
                if std::mem::take(&mut self.workers[w].held) {
                    self.apply(w, cx);
                    self.next_step(w, cx);
                }
                self.maybe_average(w, cx);
            }
        }
    }

    /// Thread mode: `w`'s gradient is ready. It is applied now, unless `w` is active and has
    /// applied `max_steps_per_averaging` gradients since its last completed averaging: then its
    /// computation waits, holding the gradient, until the averaging in flight completes.
    #[inline]
    pub(super) fn thread_step_done(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let st = &self.workers[w];
        if st.active && self.behind.is_some_and(|m| st.steps_since_average >= m) {
            self.workers[w].held = true;
            cx.activity(w, Activity::Communicate);
            return;
        }
        self.apply(w, cx);
        self.next_step(w, cx);
        self.maybe_average(w, cx);
    }

    /// Active `w` had no reply from its partner in time: it asks another neighbour, unless every
    /// neighbour is cut off for good (then it waits, and the run may stall).
    #[inline]
    pub(super) fn timed_out(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        self.timeouts += 1;
        let j = self.workers[w].waiting_for.take().expect("waiting");
        let now = cx.now();
        let peers = cx.world.topology.neighbors(w).to_vec();
        if peers.iter().all(|&p| {
            cx.world.faults().cut_for_good(w, p, now) || cx.world.faults().cut_for_good(p, w, now)
        }) {
            self.workers[w].parked = true;
            return;
        }
        self.workers[w].avoid = Some(j);
        match self.averaging {
            Averaging::PerStep => self.average_step(w, cx),
            Averaging::Thread => {
                // The averaging under way is abandoned: start another now, whatever the bound.
                let st = &mut self.workers[w];
                st.started_since_step = st.started_since_step.saturating_sub(1);
                self.maybe_average(w, cx);
            }
        }
    }

    /// A correction `δ` that will never be added: its mass is lost.
    #[inline]
    pub(super) fn reply_lost(&mut self, delta: MsgId, cx: &mut Ctx<'_, '_, Event>) {
        self.replies_lost += 1;
        self.landed(delta);
        cx.world.store.release_msg(delta);
    }
}
