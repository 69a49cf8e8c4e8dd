//! The events of AD-PSGD: the [`Algorithm`] implementation, whose `handle` sends each event to a
//! handler of its own, and those handlers.
//!
//! Each handler decides what its event means for the worker it reaches (a stale step, a request
//! at a crashed worker, a reply after its timeout) and then drives the steps and averagings of
//! `exchange`, or the rotation of `schedule`.

use super::{AdPsgd, Averaging, Event, Outgoing};
use crate::algorithm::{Algorithm, Ctx};
use crate::fault::WorkerFault;
use crate::record::Activity;
use crate::store::{MsgId, ReplicaStore, Slot};

impl Algorithm for AdPsgd {
    type Event = Event;

    fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        for w in 0..self.workers.len() {
            self.next_step(w, cx);
        }
        if self.averaging == Averaging::Thread {
            // The gossip loops start with the computation.
            for w in 0..self.workers.len() {
                self.maybe_average(w, cx);
            }
        }
    }

    fn handle(&mut self, event: Event, cx: &mut Ctx<'_, '_, Event>) {
        match event {
            Event::ComputeDone(w, life) => self.on_compute_done(w, life, cx),
            Event::Timeout { worker, attempt } => self.on_timeout(worker, attempt, cx),
            Event::AverageRequest {
                from,
                to,
                snap,
                attempt,
            } => self.on_average_request(from, to, snap, attempt, cx),
            Event::AverageReply { to, delta, attempt } => {
                self.on_average_reply(to, delta, attempt, cx)
            }
            Event::Depart { from, msg } => self.on_depart(from, msg, cx),
            Event::ScheduleRequest {
                from,
                to,
                snap,
                round,
            } => self.on_schedule_request(from, to, snap, round, cx),
            Event::ScheduleReply { to, model, round } => {
                self.on_schedule_reply(to, model, round, cx)
            }
        }
    }

    fn on_fault(&mut self, fault: WorkerFault, cx: &mut Ctx<'_, '_, Event>) {
        match fault {
            WorkerFault::Crash(w) => {
                let st = &mut self.workers[w];
                st.down = true;
                st.life += 1;
                st.waiting_for = None;
                st.parked = false;
                st.started_since_step = 0;
                st.steps_since_average = 0;
                st.held = false;
                st.avoid = None;
                // A timeout of the abandoned request is stale now.
                st.attempt += 1;
                if let Some(g) = st.grad.take() {
                    cx.world.store.release_gradient(g);
                }
            }
            WorkerFault::Rejoin(w) => {
                self.workers[w].down = false;
                self.next_step(w, cx);
                if self.averaging == Averaging::Thread {
                    self.maybe_average(w, cx);
                }
            }
        }
    }

    fn fault_counts(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("partner_timeouts", self.timeouts),
            ("late_replies", self.late_replies),
            ("replies_lost", self.replies_lost),
        ]
    }

    fn waiting(&self) -> Vec<String> {
        let what = match self.averaging {
            Averaging::PerStep => "worker",
            Averaging::Thread => "the communication thread of worker",
        };
        self.workers
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.down)
            .filter_map(|(w, s)| {
                if s.parked {
                    return Some(format!(
                        "{what} {w} waits for a neighbour to average with: every neighbour is \
                         down for good or behind a link that stays down"
                    ));
                }
                let j = s.waiting_for?;
                if let Some(sched) = &self.schedule {
                    return Some(sched.waits(what, w, j));
                }
                Some(format!(
                    "{what} {w} waits for the averaging reply of worker {j}"
                ))
            })
            .collect()
    }
}

impl AdPsgd {
    /// [`Event::ComputeDone`]: `w` has its gradient. Per-step mode: an active worker averages
    /// before applying it, a passive one applies it and starts its next step; thread mode: see
    /// `thread_step_done`. A step begun before a crash of `w` (`life` behind) is ignored.
    #[inline]
    fn on_compute_done(&mut self, w: usize, life: u64, cx: &mut Ctx<'_, '_, Event>) {
        if life != self.workers[w].life {
            return;
        }
        match self.averaging {
            Averaging::PerStep if self.workers[w].active => {
                cx.activity(w, Activity::Communicate);
                self.average_step(w, cx);
            }
            Averaging::PerStep => {
                self.apply(w, cx);
                self.next_step(w, cx);
            }
            Averaging::Thread => self.thread_step_done(w, cx),
        }
    }

    /// [`Event::Timeout`]: `worker`'s request `attempt` has had no reply for the partner
    /// timeout. It counts only while the worker is up and still waits for that very request.
    #[inline]
    fn on_timeout(&mut self, worker: usize, attempt: u64, cx: &mut Ctx<'_, '_, Event>) {
        let st = &self.workers[worker];
        if !st.down && st.attempt == attempt && st.waiting_for.is_some() {
            self.timed_out(worker, cx);
        }
    }

    /// [`Event::AverageRequest`]: the model of active `from` reached passive `to`, which
    /// averages now and replies. Without a snapshot the two live rows are averaged at once; with
    /// one, `x_to ← (x_to + snap)/2` and the reply carries `δ = x_to − snap`. A request that
    /// reaches a crashed `to` is dropped, and the requester's timeout takes over.
    #[inline]
    fn on_average_request(
        &mut self,
        from: usize,
        to: usize,
        snap: Option<MsgId>,
        attempt: u64,
        cx: &mut Ctx<'_, '_, Event>,
    ) {
        if !cx.deliverable(to) {
            // Dropped at a crashed passive worker: the requester's timeout takes over.
            if let Some(m) = snap {
                cx.world.store.release_msg(m);
            }
            return;
        }
        let delta = match snap {
            None => {
                cx.world.store.average(&[from, to]);
                None
            }
            Some(snap) => {
                let store = &mut cx.world.store;
                store.mix(to, &[(Slot::Row(to), 0.5), (Slot::Msg(snap), 0.5)]);
                let delta = store.new_msg(&[(Slot::Row(to), 1.0), (Slot::Msg(snap), -1.0)]);
                store.release_msg(snap);
                self.in_flight.push_back(delta);
                Some(delta)
            }
        };
        let delay = self.reply_delay(to, cx.now());
        self.depart(
            to,
            delay,
            Outgoing::Reply {
                to: from,
                delta,
                attempt,
            },
            cx,
        );
    }

    /// [`Event::AverageReply`]: the reply to request `attempt` is back at active `to`, which adds
    /// its correction `delta` if it carries one. It ends `to`'s wait if `to` still waits for that
    /// request; a reply after its timeout is counted late, its correction added all the same. A
    /// reply that reaches a crashed `to` loses its correction.
    #[inline]
    fn on_average_reply(
        &mut self,
        to: usize,
        delta: Option<MsgId>,
        attempt: u64,
        cx: &mut Ctx<'_, '_, Event>,
    ) {
        if !cx.deliverable(to) {
            if let Some(m) = delta {
                self.reply_lost(m, cx);
            }
            return;
        }
        if let Some(delta) = delta {
            let store = &mut cx.world.store;
            store.mix(to, &[(Slot::Row(to), 1.0), (Slot::Msg(delta), 1.0)]);
            store.release_msg(delta);
            self.landed(delta);
        }
        let st = &self.workers[to];
        if st.waiting_for.is_some() && st.attempt == attempt {
            self.wait_over(to, cx);
        } else {
            // The worker gave up on this partner: the correction still keeps the sum.
            self.late_replies += 1;
        }
    }

    /// [`Event::Depart`]: `from`'s host is done with `msg`, which goes on the network now,
    /// unless `from` crashed meanwhile: then the message never leaves, and a reply's correction
    /// is lost.
    #[inline]
    fn on_depart(&mut self, from: usize, msg: Outgoing, cx: &mut Ctx<'_, '_, Event>) {
        if cx.world.faults().is_down(from) {
            // Its sender crashed before the message left.
            match msg {
                Outgoing::Request { snap: Some(m), .. } => cx.world.store.release_msg(m),
                Outgoing::Reply { delta: Some(m), .. } => self.reply_lost(m, cx),
                _ => {}
            }
            return;
        }
        self.post(from, msg, cx);
    }
}
