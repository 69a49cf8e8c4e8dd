//! `partner = "schedule"`: the reference's rotation over the bipartite exponential graph.
//!
//! In round `k` every worker sends its model to `i + o_k` and hears from `i − o_k` only, `o_k`
//! the `k`-th offset of the phone book ([`phone_book`]). A passive worker takes a request only in
//! its own round, so a request or a reply that comes early waits here, by round, until its
//! receiver gets there; an active worker's round ends when its passive has taken its model and
//! the model it hears has come.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{AdPsgd, Event, Outgoing};
use crate::algorithm::Ctx;
use crate::store::{MsgId, ReplicaStore, Slot};

/// The reference's phone book of the bipartite exponential graph on `n` workers, as offsets
/// modulo `n` in the order it rotates through them: `+1, −1, +(1 + 2^i), −(1 + 2^i)` for
/// `i = 1 ..= floor(log2(n − 1))`, each offset once (`_add_peers` skips a peer already listed).
pub fn phone_book(n: usize) -> Vec<usize> {
    let mut book = Vec::new();
    let mut add = |off: usize| {
        if !book.contains(&off) {
            book.push(off);
        }
    };
    let mut m = 0;
    while m < usize::BITS && (1usize << m) < n {
        let d = if m == 0 { 1 } else { 1 + (1usize << m) } % n;
        add(d);
        add((n - d) % n);
        m += 1;
    }
    book
}

/// `partner = "schedule"`: where each worker is in the reference's rotation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Schedule {
    /// The phone book's offsets ([`phone_book`]).
    book: Vec<usize>,
    /// Rounds completed: an active worker's exchanges, a passive worker's requests taken.
    round: Vec<u64>,
    /// Active: its model when its current round started, for the reply's correction.
    own: Vec<Option<MsgId>>,
    /// Active: its passive has taken its request of the current round.
    taken: Vec<bool>,
    /// Active: the reply of its current round, once here.
    reply: Vec<Option<MsgId>>,
    /// Active: replies of rounds it has not started yet.
    early_replies: Vec<BTreeMap<u64, MsgId>>,
    /// Passive: requests of rounds it has not reached yet, with their sender.
    early_requests: Vec<BTreeMap<u64, (usize, MsgId)>>,
}

impl Schedule {
    pub(super) fn new(n: usize) -> Self {
        Schedule {
            book: phone_book(n),
            round: vec![0; n],
            own: vec![None; n],
            taken: vec![false; n],
            reply: vec![None; n],
            early_replies: vec![BTreeMap::new(); n],
            early_requests: vec![BTreeMap::new(); n],
        }
    }

    /// The offset of round `k`.
    fn offset(&self, k: u64) -> usize {
        self.book[(k % self.book.len() as u64) as usize]
    }

    /// The rounds `worker` has completed (an active worker's exchanges, a passive worker's
    /// requests taken).
    pub(super) fn rounds(&self, worker: usize) -> u64 {
        self.round[worker]
    }

    /// What active `w`, waiting for the model of `j`, still waits for in its current round, as
    /// the stall report words it; `what` names the waiting side (the worker or its
    /// communication thread).
    pub(super) fn waits(&self, what: &str, w: usize, j: usize) -> String {
        let n = self.round.len();
        let k = self.round[w];
        let to = (w + self.offset(k)) % n;
        let mut wants = Vec::new();
        if !self.taken[w] {
            wants.push(format!("worker {to} to take its model"));
        }
        if self.reply[w].is_none() {
            wants.push(format!("the model of worker {j}"));
        }
        format!(
            "{what} {w} waits in round {k} of the schedule for {}",
            wants.join(" and ")
        )
    }
}

impl AdPsgd {
    /// [`Event::ScheduleRequest`]: the model of active `from` reached passive `to`, its request
    /// of round `round`. `to` takes it if it is in that round, and then every request that came
    /// early for the rounds that follow; a request of a later round waits for `to` to get there.
    #[inline]
    pub(super) fn on_schedule_request(
        &mut self,
        from: usize,
        to: usize,
        snap: MsgId,
        round: u64,
        cx: &mut Ctx<'_, '_, Event>,
    ) {
        let sched = self.schedule.as_mut().expect("schedule");
        if sched.round[to] < round {
            // It listens to the active worker of its current round only.
            sched.early_requests[to].insert(round, (from, snap));
            return;
        }
        self.serve(to, from, snap, round, cx);
        loop {
            let sched = self.schedule.as_mut().expect("schedule");
            let next = sched.round[to];
            let Some((a, snap)) = sched.early_requests[to].remove(&next) else {
                break;
            };
            self.serve(to, a, snap, next, cx);
        }
    }

    /// [`Event::ScheduleReply`]: the model a passive worker had when it took its request of
    /// round `round` reached active `to`. It counts towards `to`'s round if `to` is in it, and
    /// waits for `to` to start that round otherwise.
    #[inline]
    pub(super) fn on_schedule_reply(
        &mut self,
        to: usize,
        model: MsgId,
        round: u64,
        cx: &mut Ctx<'_, '_, Event>,
    ) {
        let sched = self.schedule.as_mut().expect("schedule");
        if sched.round[to] == round && sched.own[to].is_some() {
            sched.reply[to] = Some(model);
            self.try_complete(to, cx);
        } else {
            // A reply of a round `to` has not started yet.
            sched.early_replies[to].insert(round, model);
        }
    }

    /// `partner = "schedule"`: active `w` starts its next round `k`: its model goes to
    /// `w + o_k`, and it waits for that passive to take it and for the model of `w − o_k`.
    pub(super) fn schedule_round(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let sched = self.schedule.as_mut().expect("schedule");
        let n = sched.round.len();
        let k = sched.round[w];
        let off = sched.offset(k);
        let (to, hears) = ((w + off) % n, (w + n - off) % n);
        let store = &mut cx.world.store;
        sched.own[w] = Some(store.new_msg(&[(Slot::Row(w), 1.0)]));
        let snap = store.new_msg(&[(Slot::Row(w), 1.0)]);
        sched.taken[w] = false;
        sched.reply[w] = sched.early_replies[w].remove(&k);
        let st = &mut self.workers[w];
        st.waiting_for = Some(hears);
        st.attempt += 1;
        st.started += 1;
        self.count_pair(w, to);
        self.depart(
            w,
            self.overhead,
            Outgoing::ScheduleRequest { to, snap, round: k },
            cx,
        );
    }

    /// `partner = "schedule"`: passive `p` takes the request of round `k` from active `a`: its
    /// model before mixing goes to `p + o_k`, and it mixes in `a`'s.
    fn serve(&mut self, p: usize, a: usize, snap: MsgId, k: u64, cx: &mut Ctx<'_, '_, Event>) {
        let sched = self.schedule.as_mut().expect("schedule");
        let n = sched.round.len();
        let to = (p + sched.offset(k)) % n;
        debug_assert_eq!(
            sched.round[a], k,
            "an active worker waits in the round it asked for"
        );
        let store = &mut cx.world.store;
        let model = store.new_msg(&[(Slot::Row(p), 1.0)]);
        store.mix(p, &[(Slot::Row(p), 0.5), (Slot::Msg(snap), 0.5)]);
        store.release_msg(snap);
        sched.round[p] += 1;
        sched.taken[a] = true;
        let delay = self.reply_delay(p, cx.now());
        self.depart(
            p,
            delay,
            Outgoing::ScheduleReply {
                to,
                model,
                round: k,
            },
            cx,
        );
        self.try_complete(a, cx);
    }

    /// `partner = "schedule"`: active `a`'s round ends once its passive took its model and the
    /// model it hears has come: `x_a ← x_a + (model − own)/2`, which is `(own + model)/2` plus
    /// the steps `a` applied meanwhile.
    fn try_complete(&mut self, a: usize, cx: &mut Ctx<'_, '_, Event>) {
        let sched = self.schedule.as_mut().expect("schedule");
        if !sched.taken[a] || sched.reply[a].is_none() {
            return;
        }
        let model = sched.reply[a].take().expect("checked");
        let own = sched.own[a].take().expect("a round under way");
        sched.taken[a] = false;
        sched.round[a] += 1;
        let store = &mut cx.world.store;
        store.mix(
            a,
            &[
                (Slot::Row(a), 1.0),
                (Slot::Msg(model), 0.5),
                (Slot::Msg(own), -0.5),
            ],
        );
        store.release_msg(model);
        store.release_msg(own);
        self.wait_over(a, cx);
    }
}
