//! The neighbour-synchronous exchange: every iteration, each worker sends one message to every
//! neighbour of a static graph and goes on once it holds every neighbour's message of its own
//! iteration (D-PSGD, [`super::dpsgd`]; CHOCO-SGD, [`super::choco`]; gradient tracking and exact
//! diffusion, [`super::gradient_tracking`], [`super::exact_diffusion`]). On a peer schedule
//! ([`Peers::Schedule`]: SGP's directed, possibly time-varying graphs) a worker sends to its
//! out-peers of the iteration and waits for its in-peers' messages of it (Push-DIGing,
//! [`super::push_diging`]).
//!
//! [`Exchange`] owns what these methods share: the worker's iteration and gradient in flight,
//! the inbox of neighbours' messages keyed by `(iteration, sender)`, the wait (blocked while a
//! missing message is not sent yet, attributed to the neighbour whose sending ends it, then
//! communicating while every missing one is in flight), and the faults (a crashed worker
//! abandons its step and sends nothing more; a lost message is never replaced). The method keeps
//! what it sends and what it does with a full inbox.
//!
//! ```text
//! worker i, iteration k:
//!     begin:   compute g_i                                   (Exchange::begin)
//!     send its message of k to every neighbour               (Exchange::send; when, is SendsAt)
//!     ready:   the method's part before the exchange is done (Exchange::set_ready)
//!     when ready and every neighbour's message of k is in:   (Exchange::gather)
//!         the method combines them;  k ← k + 1               (Exchange::advance)
//! ```
//!
//! A method is an [`ExchangeMethod`]: its part before the exchange ([`ExchangeMethod::computed`])
//! and what it does with a full inbox ([`ExchangeMethod::combine`]). `exchange_algorithm!` then
//! writes its [`crate::algorithm::Algorithm`]: the events ([`Event`]), the wait, the stalled
//! run's report and the crash, the same for every method.
//!
//! **Rules it keeps.** A worker combines only messages of its own iteration, one per neighbour;
//! neighbours are at most one iteration apart (a message of `k + 1` may wait in the inbox); every
//! message a worker waits for is sent before its sender waits, so the exchange cannot deadlock
//! without a fault. Under faults the wait spreads along the graph until the run stalls, and
//! [`Exchange::waiting`] names each wait and whether its message was lost or its sender is down.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use std::borrow::Cow;

use crate::algorithm::Ctx;
use crate::fault::WorkerFault;
use crate::net::schedule::PeerSchedule;
use crate::record::Activity;
use crate::store::{GradId, MsgId, ReplicaStore};

/// When a worker's message of iteration `k` goes out, which decides whether a neighbour waiting
/// for it is blocked (not sent yet) or communicating (in flight).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SendsAt {
    /// When iteration `k` begins (D-PSGD combine-then-adapt: the model `x^k`).
    Begin,
    /// Once the worker is ready in iteration `k` (its step is computed: adapt-then-combine,
    /// CHOCO-SGD).
    Ready,
}

/// What a message holds in the store: released when it is lost or dropped.
pub trait Payload: Copy {
    /// Frees the store's buffers of the message.
    fn release(self, store: &mut dyn ReplicaStore);
}

impl Payload for MsgId {
    fn release(self, store: &mut dyn ReplicaStore) {
        store.release_msg(self);
    }
}

/// The events of a method on the exchange.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum Event<P = MsgId> {
    /// `worker` finished computing its gradient.
    ComputeDone(usize),
    /// `from`'s message of iteration `iter` reached `to`.
    Message {
        /// Sender.
        from: usize,
        /// Receiver.
        to: usize,
        /// The sender's iteration.
        iter: u64,
        /// What was sent.
        msg: P,
    },
}

/// The exchange a method holds: `exchange_algorithm!` implements it from the field's name.
pub trait HasExchange {
    /// What one message holds.
    type Payload: Payload;
    /// The exchange.
    fn exchange(&self) -> &Exchange<Self::Payload>;
    /// The exchange, to change.
    fn exchange_mut(&mut self) -> &mut Exchange<Self::Payload>;
}

/// A neighbour-synchronous method: its state around an [`Exchange`], its part of an iteration
/// before the exchange and its combination of a full inbox. `exchange_algorithm!` makes it an
/// [`crate::algorithm::Algorithm`]:
///
/// ```text
/// start:                         prepare; begin every worker
/// ComputeDone(w), w up:          computed(w); try to finish w
/// Message lands at `to`, up:     into the inbox; try to finish `to`
/// finish w (ready, inbox full):  combine(w, messages); advance w; begin(w)
/// crash of w:                    the exchange abandons w's step (no rejoin)
/// ```
pub trait ExchangeMethod: HasExchange {
    /// What a message is, in a stalled run's report ("the {MESSAGE} of iteration k").
    const MESSAGE: &'static str;
    /// Before the first iteration: rows and buffers the method adds. The default adds none.
    fn prepare(&mut self, _cx: &mut Ctx<'_, '_, Event<Self::Payload>>) {}
    /// Worker `w` begins an iteration; the default computes a gradient at its row
    /// ([`Exchange::begin`]).
    fn begin(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event<Self::Payload>>) {
        self.exchange_mut().begin(w, Event::ComputeDone(w), cx);
    }
    /// Worker `w`'s gradient is computed: the method's part before the exchange, which ends
    /// with [`Exchange::set_ready`] (and, where the method sends then, [`Exchange::send`]).
    fn computed(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event<Self::Payload>>);
    /// Worker `w` is ready and holds every neighbour's message of its iteration, `msgs`, in
    /// neighbour order: the method combines and releases them (then `w` advances and begins).
    fn combine(
        &mut self,
        w: usize,
        msgs: Vec<Self::Payload>,
        cx: &mut Ctx<'_, '_, Event<Self::Payload>>,
    );
    /// [`crate::algorithm::Algorithm::eval_model`]; the default is the average of the rows.
    fn eval_model(&self) -> Option<Vec<(usize, f64)>> {
        None
    }
    /// [`crate::algorithm::Algorithm::replica_scales`]; the default is all 1.
    fn replica_scales(&self) -> Option<Vec<f64>> {
        None
    }
    /// [`crate::algorithm::Algorithm::series`]; the default is none.
    fn series(&mut self) -> Vec<(&'static str, f64)> {
        Vec::new()
    }
}

/// [`crate::algorithm::Algorithm::start`] of an exchange method.
pub fn start<M: ExchangeMethod>(m: &mut M, cx: &mut Ctx<'_, '_, Event<M::Payload>>) {
    m.prepare(cx);
    for w in 0..m.exchange().len() {
        m.begin(w, cx);
    }
}

/// [`crate::algorithm::Algorithm::handle`] of an exchange method.
pub fn handle<M: ExchangeMethod>(
    m: &mut M,
    event: Event<M::Payload>,
    cx: &mut Ctx<'_, '_, Event<M::Payload>>,
) {
    let w = match event {
        // A crashed worker's step is abandoned; what lands at it is dropped.
        Event::ComputeDone(w) if cx.is_down(w) => return,
        Event::ComputeDone(w) => {
            m.computed(w, cx);
            w
        }
        Event::Message {
            from,
            to,
            iter,
            msg,
        } => {
            if !m.exchange_mut().receive(from, to, iter, msg, cx) {
                return;
            }
            to
        }
    };
    if let Some(msgs) = m.exchange_mut().gather(w, cx) {
        m.combine(w, msgs, cx);
        m.exchange_mut().advance(w);
        m.begin(w, cx);
    }
}

/// [`crate::algorithm::Algorithm::on_fault`] of an exchange method: a crashed worker abandons
/// its step and sends nothing more (the methods' specs refuse rejoins).
pub fn on_fault<M: ExchangeMethod>(
    m: &mut M,
    fault: WorkerFault,
    cx: &mut Ctx<'_, '_, Event<M::Payload>>,
) {
    if let WorkerFault::Crash(w) = fault {
        m.exchange_mut().crash(w, cx);
    }
}

/// Implements [`crate::algorithm::Algorithm`] for an [`ExchangeMethod`], the same for every one
/// (a blanket implementation would clash with the star's, [`super::star`]), and [`HasExchange`]
/// from its exchange's field: `exchange_algorithm!(Dpsgd, exchange: MsgId)`.
macro_rules! exchange_algorithm {
    ($method:ty, $field:ident: $payload:ty) => {
        impl $crate::algorithms::neighbours::HasExchange for $method {
            type Payload = $payload;

            fn exchange(&self) -> &$crate::algorithms::neighbours::Exchange<$payload> {
                &self.$field
            }

            fn exchange_mut(&mut self) -> &mut $crate::algorithms::neighbours::Exchange<$payload> {
                &mut self.$field
            }
        }

        impl $crate::algorithm::Algorithm for $method {
            type Event = $crate::algorithms::neighbours::Event<
                <$method as $crate::algorithms::neighbours::HasExchange>::Payload,
            >;

            fn start(&mut self, cx: &mut $crate::algorithm::Ctx<'_, '_, Self::Event>) {
                $crate::algorithms::neighbours::start(self, cx);
            }

            fn handle(
                &mut self,
                event: Self::Event,
                cx: &mut $crate::algorithm::Ctx<'_, '_, Self::Event>,
            ) {
                $crate::algorithms::neighbours::handle(self, event, cx);
            }

            fn waiting(&self) -> Vec<String> {
                use $crate::algorithms::neighbours::{ExchangeMethod, HasExchange};
                self.exchange().waiting(<Self as ExchangeMethod>::MESSAGE)
            }

            fn on_fault(
                &mut self,
                fault: $crate::fault::WorkerFault,
                cx: &mut $crate::algorithm::Ctx<'_, '_, Self::Event>,
            ) {
                $crate::algorithms::neighbours::on_fault(self, fault, cx);
            }

            fn eval_model(&self) -> Option<Vec<(usize, f64)>> {
                $crate::algorithms::neighbours::ExchangeMethod::eval_model(self)
            }

            fn replica_scales(&self) -> Option<Vec<f64>> {
                $crate::algorithms::neighbours::ExchangeMethod::replica_scales(self)
            }

            fn series(&mut self) -> Vec<(&'static str, f64)> {
                $crate::algorithms::neighbours::ExchangeMethod::series(self)
            }
        }
    };
}
pub(crate) use exchange_algorithm;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Worker<P> {
    iter: u64,
    grad: Option<GradId>,
    /// The method's part of the iteration before the exchange is done.
    ready: bool,
    inbox: BTreeMap<(u64, usize), P>,
    /// Waiting for a neighbour's message that is not sent yet.
    blocked: bool,
}

impl<P> Default for Worker<P> {
    fn default() -> Self {
        Worker {
            iter: 0,
            grad: None,
            ready: false,
            inbox: BTreeMap::new(),
            blocked: false,
        }
    }
}

/// Whom a worker sends to and hears from, iteration by iteration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Peers {
    /// A static undirected graph: each worker's neighbours, in the order its messages are
    /// gathered, at every iteration.
    Static(Vec<Vec<usize>>),
    /// A peer schedule: at iteration `k` worker `w` sends to `out_peers(w, k)` and hears from
    /// `in_peers(w, k)` (gathered in increasing order).
    Schedule(PeerSchedule),
}

impl Peers {
    fn len(&self) -> usize {
        match self {
            Peers::Static(nb) => nb.len(),
            Peers::Schedule(s) => s.len(),
        }
    }

    /// Whom worker `w` sends its message of iteration `k` to.
    pub fn out(&self, w: usize, k: u64) -> Cow<'_, [usize]> {
        match self {
            Peers::Static(nb) => Cow::Borrowed(&nb[w]),
            Peers::Schedule(s) => Cow::Owned(s.out_peers(w, k)),
        }
    }

    /// Whose messages of iteration `k` worker `w` waits for, in the order they are gathered.
    pub fn expected(&self, w: usize, k: u64) -> Cow<'_, [usize]> {
        match self {
            Peers::Static(nb) => Cow::Borrowed(&nb[w]),
            Peers::Schedule(s) => Cow::Owned(s.in_peers(w, k)),
        }
    }
}

/// The state of a neighbour-synchronous exchange over a static graph or a peer schedule.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Exchange<P = MsgId> {
    sends_at: SendsAt,
    peers: Peers,
    workers: Vec<Worker<P>>,
    /// Under faults: workers down (they never rejoin), and the messages lost on the way,
    /// `(iteration, from, to)`.
    down: BTreeSet<usize>,
    lost: BTreeSet<(u64, usize, usize)>,
}

impl<P: Payload> Exchange<P> {
    /// An exchange over `neighbors` (each worker's, in the order its messages are gathered).
    pub fn new(neighbors: Vec<Vec<usize>>, sends_at: SendsAt) -> Self {
        Exchange::over(Peers::Static(neighbors), sends_at)
    }

    /// An exchange over `peers`.
    pub fn over(peers: Peers, sends_at: SendsAt) -> Self {
        let n = peers.len();
        Exchange {
            sends_at,
            peers,
            workers: (0..n).map(|_| Worker::default()).collect(),
            down: BTreeSet::new(),
            lost: BTreeSet::new(),
        }
    }

    /// Number of workers.
    pub fn len(&self) -> usize {
        self.workers.len()
    }

    /// Whether there are no workers.
    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    /// Whom worker `w` sends to and hears from.
    pub fn peers(&self) -> &Peers {
        &self.peers
    }

    /// Worker `w`'s iteration: exchanges it has completed.
    pub fn iteration(&self, w: usize) -> u64 {
        self.workers[w].iter
    }

    /// Whether worker `w` is ready in its iteration.
    pub fn is_ready(&self, w: usize) -> bool {
        self.workers[w].ready
    }

    /// Worker `w` is ready in its iteration: from here on [`Exchange::gather`] may combine.
    pub fn set_ready(&mut self, w: usize) {
        self.workers[w].ready = true;
    }

    /// Worker `w` begins its iteration: not ready, computing a gradient whose completion is
    /// `done`.
    pub fn begin<E>(&mut self, w: usize, done: E, cx: &mut Ctx<'_, '_, E>) {
        self.begin_scaled(w, 1.0, done, cx);
    }

    /// [`Exchange::begin`], the gradient taken at `scale ·` the worker's row (push-sum's
    /// de-biased model, `1/v_w`; [`Ctx::begin_step`]).
    pub fn begin_scaled<E>(&mut self, w: usize, scale: f64, done: E, cx: &mut Ctx<'_, '_, E>) {
        self.workers[w].ready = false;
        let (grad, d) = cx.begin_step(w, scale);
        cx.after(d, done);
        self.workers[w].grad = Some(grad);
    }

    /// The gradient worker `w` computed (once its completion event came).
    pub fn take_gradient(&mut self, w: usize) -> GradId {
        self.workers[w].grad.take().expect("a gradient in flight")
    }

    /// Sends worker `w`'s message of its iteration to every neighbour (out-peer) `j`, in order:
    /// `post(j, cx)` makes the message, sent with `bytes`. A lost message is released and
    /// remembered; a neighbour already ready waits anew (its wait may now be in flight only,
    /// ended by `w`).
    pub fn send(
        &mut self,
        w: usize,
        bytes: u64,
        cx: &mut Ctx<'_, '_, Event<P>>,
        mut post: impl FnMut(usize, &mut Ctx<'_, '_, Event<P>>) -> P,
    ) {
        let iter = self.workers[w].iter;
        let out = self.peers.out(w, iter).into_owned();
        for j in out {
            let msg = post(j, cx);
            let event = Event::Message {
                from: w,
                to: j,
                iter,
                msg,
            };
            if cx.send(w, j, bytes, event).lost.is_some() {
                msg.release(&mut cx.world.store);
                self.lost.insert((iter, w, j));
            }
            if self.workers[j].ready {
                self.wait(j, w, cx);
            }
        }
    }

    /// Whether worker `j` has sent its message of iteration `k`.
    fn sent(&self, j: usize, k: u64) -> bool {
        let st = &self.workers[j];
        match self.sends_at {
            SendsAt::Begin => st.iter >= k,
            SendsAt::Ready => st.iter > k || (st.iter == k && st.ready),
        }
    }

    /// Worker `w` waits for its neighbours' messages: blocked while one is not sent yet,
    /// communicating once all are in flight (`by` ended the blocked part, if it did).
    fn wait<E>(&mut self, w: usize, by: usize, cx: &mut Ctx<'_, '_, E>) {
        let st = &self.workers[w];
        let iter = st.iter;
        let unsent = self
            .peers
            .expected(w, iter)
            .iter()
            .any(|&j| !st.inbox.contains_key(&(iter, j)) && !self.sent(j, iter));
        match (unsent, st.blocked) {
            (true, false) => {
                self.workers[w].blocked = true;
                cx.block(w);
            }
            (false, true) => {
                self.workers[w].blocked = false;
                cx.unblock(w, by, Activity::Communicate);
            }
            (false, false) => cx.activity(w, Activity::Communicate),
            (true, true) => {}
        }
    }

    /// `from`'s message of iteration `iter` lands at `to`: `true` when it went into the inbox
    /// (the method then tries [`Exchange::gather`]); `false`, and the message released, when
    /// `to` is down.
    pub fn receive<E>(
        &mut self,
        from: usize,
        to: usize,
        iter: u64,
        msg: P,
        cx: &mut Ctx<'_, '_, E>,
    ) -> bool {
        if !cx.deliverable(to) {
            msg.release(&mut cx.world.store);
            return false;
        }
        debug_assert!(
            matches!(self.peers, Peers::Schedule(_))
                || iter == self.workers[to].iter
                || iter == self.workers[to].iter + 1,
            "neighbours on a static graph are at most one iteration apart"
        );
        self.workers[to].inbox.insert((iter, from), msg);
        true
    }

    /// Once worker `w` is ready and holds every neighbour's message of its iteration: those
    /// messages, taken out of the inbox in neighbour order (the method combines and releases
    /// them, then calls [`Exchange::advance`]). Else `None`, and a ready worker waits.
    pub fn gather<E>(&mut self, w: usize, cx: &mut Ctx<'_, '_, E>) -> Option<Vec<P>> {
        let st = &self.workers[w];
        let iter = st.iter;
        if !st.ready {
            return None;
        }
        let expected = self.peers.expected(w, iter);
        if !expected.iter().all(|j| st.inbox.contains_key(&(iter, *j))) {
            self.wait(w, w, cx);
            return None;
        }
        let st = &mut self.workers[w];
        st.blocked = false;
        let msgs = expected
            .iter()
            .map(|j| st.inbox.remove(&(iter, *j)).expect("checked above"))
            .collect();
        Some(msgs)
    }

    /// Worker `w` has combined its iteration: on to the next.
    pub fn advance(&mut self, w: usize) {
        self.workers[w].iter += 1;
    }

    /// Worker `w` crashed: it abandons its step (its gradient released) and sends nothing
    /// more; it never rejoins.
    pub fn crash<E>(&mut self, w: usize, cx: &mut Ctx<'_, '_, E>) {
        self.down.insert(w);
        let st = &mut self.workers[w];
        st.ready = false;
        st.blocked = false;
        if let Some(g) = st.grad.take() {
            cx.world.store.release_gradient(g);
        }
    }

    /// Every wait of a ready worker that is up, for a stalled run's report: `worker w waits for
    /// the {what} of iteration k from worker j`, with why when the message was lost or its
    /// sender is down.
    pub fn waiting(&self, what: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (w, st) in self.workers.iter().enumerate() {
            if !st.ready || self.down.contains(&w) {
                continue;
            }
            for &j in self.peers.expected(w, st.iter).iter() {
                if !st.inbox.contains_key(&(st.iter, j)) {
                    let why = if self.lost.contains(&(st.iter, j, w)) {
                        " (lost on the way)"
                    } else if self.down.contains(&j) {
                        " (down)"
                    } else {
                        ""
                    };
                    out.push(format!(
                        "worker {w} waits for the {what} of iteration {} from worker {j}{why}",
                        st.iter
                    ));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testkit;
    use crate::cluster::{ClusterConfig, StragglerConfig};
    use crate::engine::{Collect, Outcome, run};
    use crate::store::Slot;

    /// A message that says which iteration and which sender it is of.
    #[derive(Clone, Copy, Debug, Serialize, Deserialize)]
    struct Tagged {
        msg: MsgId,
        iter: u64,
        from: usize,
    }

    impl Payload for Tagged {
        fn release(self, store: &mut dyn ReplicaStore) {
            store.release_msg(self.msg);
        }
    }

    type Ev = Event<Tagged>;

    /// Plain neighbour averaging on the exchange, checking its rules at every combination.
    #[derive(Serialize, Deserialize)]
    struct Avg {
        ex: Exchange<Tagged>,
        combined: Vec<u64>,
    }

    impl Avg {
        fn post(&mut self, w: usize, cx: &mut Ctx<'_, '_, Ev>) {
            let iter = self.ex.iteration(w);
            self.ex.send(w, 1000, cx, |_, cx| {
                let msg = cx.world.store.new_msg(&[(Slot::Row(w), 1.0)]);
                Tagged { msg, iter, from: w }
            });
        }
    }

    impl ExchangeMethod for Avg {
        const MESSAGE: &'static str = "model";

        fn begin(&mut self, w: usize, cx: &mut Ctx<'_, '_, Ev>) {
            if self.ex.sends_at == SendsAt::Begin {
                self.post(w, cx);
            }
            self.ex.begin(w, Ev::ComputeDone(w), cx);
        }

        fn computed(&mut self, w: usize, cx: &mut Ctx<'_, '_, Ev>) {
            let g = self.ex.take_gradient(w);
            cx.world.store.release_gradient(g);
            cx.step_done(w);
            self.ex.set_ready(w);
            if self.ex.sends_at == SendsAt::Ready {
                self.post(w, cx);
            }
        }

        fn combine(&mut self, w: usize, msgs: Vec<Tagged>, cx: &mut Ctx<'_, '_, Ev>) {
            let iter = self.ex.iteration(w);
            let from: Vec<usize> = msgs.iter().map(|t| t.from).collect();
            assert_eq!(
                from,
                self.ex.peers().expected(w, 0).to_vec(),
                "one message per neighbour, in order"
            );
            assert!(
                msgs.iter().all(|t| t.iter == iter),
                "only its own iteration's"
            );
            let e = 1.0 / (msgs.len() + 1) as f64;
            let mut terms = vec![(Slot::Row(w), e)];
            terms.extend(msgs.iter().map(|t| (Slot::Msg(t.msg), e)));
            cx.world.store.mix(w, &terms);
            for t in msgs {
                cx.world.store.release_msg(t.msg);
            }
            self.combined[w] += 1;
            for i in 0..self.ex.len() {
                for &j in self.ex.peers().out(i, 0).iter() {
                    let (a, b) = (self.ex.iteration(i), self.ex.iteration(j));
                    assert!(a.abs_diff(b) <= 1, "neighbours {i} and {j} at {a} and {b}");
                }
            }
        }
    }

    exchange_algorithm!(Avg, ex: Tagged);

    /// Runs `Avg` on a ring of 4 (worker 1 three times slower), 10 ms steps, 1 byte per ns,
    /// with the faults of `faults` (TOML), for 0.2 s.
    fn ring(sends_at: SendsAt, faults: &str) -> (Avg, Outcome) {
        let n = 4;
        let cluster = ClusterConfig::new(n)
            .with_step_time_ms(10.0)
            .with_straggler(StragglerConfig::fixed([1], 3.0));
        let mut store = testkit::store(n, 3);
        let mut world = testkit::world(&cluster, &testkit::plain_net(), n, &mut store, faults);
        let topology = world.topology.clone();
        let neighbors = (0..n).map(|i| topology.neighbors(i).to_vec()).collect();
        let mut alg = Avg {
            ex: Exchange::new(neighbors, sends_at),
            combined: vec![0; n],
        };
        let stop = testkit::stop_at(0.2);
        let out = run(&mut alg, &mut world, &stop, &mut Collect::default()).unwrap();
        (alg, out)
    }

    /// Whichever the send rule, a worker combines only its neighbours' messages of its own
    /// iteration (checked in `Avg`), neighbours stay one iteration apart, and the straggler sets
    /// everyone's pace: worker 1 does 30 ms steps, so its neighbours can lead it by one only,
    /// and worker 3 (at distance 2) by two.
    #[test]
    fn the_exchange_keeps_neighbours_in_step_at_the_stragglers_pace() {
        for sends_at in [SendsAt::Begin, SendsAt::Ready] {
            let (alg, out) = ring(sends_at, "");
            assert!(out.stalled.is_none());
            let c = &alg.combined;
            assert!(c[1] >= 5, "{sends_at:?}: {c:?}");
            assert!(c[0] <= c[1] + 1 && c[2] <= c[1] + 1, "{sends_at:?}: {c:?}");
            assert!(c[3] <= c[1] + 2, "{sends_at:?}: {c:?}");
            assert!(alg.ex.waiting("model").iter().all(|l| !l.contains('(')));
        }
    }

    /// `sent` follows the send rule: at `Begin` a worker's message of `k` is out as soon as
    /// its iteration `k` begins; at `Ready` only once it is ready in `k`.
    #[test]
    fn a_message_counts_as_sent_by_the_rule() {
        for (sends_at, sent_when_not_ready) in [(SendsAt::Begin, true), (SendsAt::Ready, false)] {
            let mut ex: Exchange<MsgId> = Exchange::new(vec![vec![1], vec![0]], sends_at);
            ex.workers[1].iter = 2;
            assert!(ex.sent(1, 1), "an older iteration's is out");
            assert_eq!(ex.sent(1, 2), sent_when_not_ready);
            assert!(!ex.sent(1, 3));
            ex.set_ready(1);
            assert!(ex.sent(1, 2));
            assert!(!ex.sent(1, 3));
        }
    }

    /// A crashed worker sends nothing more and its neighbours wait for it for good; a lost
    /// message is never replaced: the run stalls, and `waiting` says which wait is whose fault.
    #[test]
    fn a_crash_or_a_loss_stalls_the_exchange_naming_why() {
        let crash = "[[faults]]\nkind = \"crash\"\nworkers = [2]\nat_s = 0.015";
        let (alg, out) = ring(SendsAt::Ready, crash);
        let stall = out.stalled.expect("a stall");
        let waits = alg.ex.waiting("model");
        assert!(
            waits.iter().any(|l| l.ends_with("from worker 2 (down)")),
            "{waits:?}"
        );
        assert!(
            waits.iter().all(|l| !l.starts_with("worker 2 ")),
            "{waits:?}"
        );
        assert!(stall.waiting.iter().any(|l| l.contains("worker 2 is down")));
        let loss = "[[faults]]\nkind = \"loss\"\nprobability = 1.0\nlinks = [\"0 -> 3\"]\nstart_s = 0.0\nend_s = 0.001";
        let (alg, out) = ring(SendsAt::Begin, loss);
        assert!(out.stalled.is_some());
        assert_eq!(alg.combined[3], 0);
        let waits = alg.ex.waiting("model");
        assert!(
            waits.contains(
                &"worker 3 waits for the model of iteration 0 from worker 0 (lost on the way)"
                    .to_string()
            ),
            "{waits:?}"
        );
    }
}
