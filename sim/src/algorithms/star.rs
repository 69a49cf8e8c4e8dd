//! The star of the time-optimal asynchronous methods: one server, `n` workers, each computing a
//! gradient at the point the server last sent it ([`super::rennala`], [`super::ringmaster`]).
//!
//! Tyurin & Richtárik (NeurIPS 2023) and Maranjyan, Tyurin & Richtárik (ICML 2025) state their
//! methods in one protocol, which this module runs; the methods differ only in what the server
//! does with a gradient that lands, and which workers it stops:
//!
//! ```text
//! server: x_0, k = 0; every worker starts computing at x_0
//! worker i, given point x_v:  compute ∇f(x_v; ξ) (compute time); push it with v to the server;
//!                             wait for the server's reply
//! server, on (g, v) from i:   the method decides: use g, or ignore it; then i computes at x_k
//! server, after an update:    the method may stop workers whose computation it would ignore
//!                             (the papers' "calculation stops"): it sends them x_k at once
//! ```
//!
//! **Messages.** The server's node is `n` (one extra network node, its own NIC) and its model one
//! added store row. A push carries the gradient (the model's size on the wire); the server's
//! answer carries the model `x_k` only when the worker does not have it: to a worker whose
//! gradient was computed at the current point it is a header-only "go on" (the worker still has
//! `x_k`), and to a worker that has already been sent `x_k` (a stop in flight) nothing at all.
//! A model message is copied when it is sent ([`ReplicaStore::new_msg`]) and lands in the
//! worker's row on arrival.
//!
//! **The worker's side.** A model (or a "go on") starts a computation at its point, unless the
//! worker is already computing at that point or a newer one (then it is ignored). A model that
//! reaches a worker computing at an older point is a stop: that computation is abandoned (its
//! gradient released, counted in the `stopped` series) and the worker starts again at once.
//!
//! **Under faults.** A crashed worker abandons its computation; what reaches it while it is down
//! is dropped, and a gradient of its that lands at the server while it is down is discarded
//! (`gradients_dropped`). On rejoin it asks the server for the model (a header-only request) and
//! computes at `x_k` when the reply lands. Lost messages are not retransmitted, so a loss or a
//! link-down fault would leave a worker waiting for good: those faults are refused (the
//! parameter server, `kind = "ps"`, retransmits).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::algorithm::{Algorithm, Ctx, StalenessStats, World};
use crate::algorithms::{AlgorithmSpec, Runnable, Setup};
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport, WorkerFault};
use crate::record::Activity;
use crate::store::{GradId, MsgId, ReplicaStore, Slot};

/// Events of the star.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum Event {
    /// `worker` finished its computation number `job` (a stopped or crashed one is ignored).
    ComputeDone {
        /// The worker.
        worker: usize,
        /// Its computation number.
        job: u64,
    },
    /// `worker`'s gradient `grad`, computed at `x_version`, reached the server.
    Push {
        /// The worker.
        worker: usize,
        /// The server iteration of the point it was computed at.
        version: u64,
        /// The gradient.
        grad: GradId,
    },
    /// The server's reply reached `worker`: the model `x_version` (`msg`), or, without a
    /// message, "go on at `x_version`", the point the worker has.
    Model {
        /// The worker.
        worker: usize,
        /// The server iteration of the point.
        version: u64,
        /// The model, when the worker does not have it.
        msg: Option<MsgId>,
    },
    /// A rejoined `worker`'s request for the model reached the server.
    Hello {
        /// The worker.
        worker: usize,
    },
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Worker {
    /// The point it computes at, or last computed at.
    version: u64,
    /// Its computation number (a `ComputeDone` of an older one is ignored).
    job: u64,
    /// The gradient being computed.
    grad: Option<GradId>,
    /// Whether it is computing (else it waits for the server).
    computing: bool,
    /// The newest point the server has sent it (in flight or delivered).
    offered: u64,
}

/// The server and its workers: what both methods share.
#[derive(Serialize, Deserialize)]
pub(crate) struct Star {
    workers: Vec<Worker>,
    /// The server's model row.
    pub(crate) row: usize,
    /// The server's network node.
    node: usize,
    /// Server iterations `k` (updates of `x`).
    pub(crate) k: u64,
    /// Gradients that landed and were not used (computed at a point the method refuses).
    pub(crate) ignored: u64,
    /// Computations abandoned by a stop.
    pub(crate) stopped: u64,
    /// Gradients lost to a crash (abandoned, or landed while their worker was down).
    pub(crate) dropped: u64,
}

impl Star {
    pub fn new(n: usize) -> Self {
        Star {
            workers: vec![Worker::default(); n],
            row: 0,
            node: n,
            k: 0,
            ignored: 0,
            stopped: 0,
            dropped: 0,
        }
    }

    /// The server's row, and every worker computing at `x_0`.
    pub fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        let n = self.workers.len();
        assert!(
            cx.world.net.nodes() > n,
            "the network needs the server's node (AlgorithmConfig::extra_nodes)"
        );
        // Added rows copy row 0: the initial model x_0, which every worker holds.
        self.row = cx.world.store.add_rows(1);
        for w in 0..n {
            self.begin(w, 0, cx);
        }
    }

    fn begin(&mut self, w: usize, version: u64, cx: &mut Ctx<'_, '_, Event>) {
        let (grad, d) = cx.begin_step(w, 1.0);
        let st = &mut self.workers[w];
        st.version = version;
        st.job += 1;
        st.grad = Some(grad);
        st.computing = true;
        let job = st.job;
        cx.after(d, Event::ComputeDone { worker: w, job });
    }

    /// Handles every event but a gradient landing at the server, which it returns for the
    /// method to decide on: `(worker, version, grad)`.
    pub fn handle(
        &mut self,
        event: Event,
        cx: &mut Ctx<'_, '_, Event>,
    ) -> Option<(usize, u64, GradId)> {
        match event {
            Event::ComputeDone { worker, job } => self.computed(worker, job, cx),
            Event::Push {
                worker,
                version,
                grad,
            } => return self.landed(worker, grad, cx).map(|g| (worker, version, g)),
            Event::Model {
                worker,
                version,
                msg,
            } => self.arrived(worker, version, msg, cx),
            Event::Hello { worker } => self.hello(worker, cx),
        }
        None
    }

    /// A crash abandons the worker's computation; on rejoin it asks for the model.
    pub fn on_fault(&mut self, fault: WorkerFault, cx: &mut Ctx<'_, '_, Event>) {
        match fault {
            WorkerFault::Crash(w) => self.crash(w, cx),
            WorkerFault::Rejoin(w) => self.rejoin(w, cx),
        }
    }

    /// `ComputeDone`: the gradient goes to the server, and the worker waits for its reply.
    fn computed(&mut self, w: usize, job: u64, cx: &mut Ctx<'_, '_, Event>) {
        let st = &mut self.workers[w];
        if cx.is_down(w) || job != st.job || !st.computing {
            return;
        }
        st.computing = false;
        let grad = st.grad.take().expect("a computing worker has a gradient");
        let version = st.version;
        // The running statistics of the pass are the worker's own (the state rule).
        let state = cx.world.store.state();
        if !state.is_empty() {
            cx.world.store.apply_gradient_block(w, grad, 0.0, state);
        }
        let bytes = cx.world.net.payload_bytes(cx.world.store.num_params());
        let node = self.node;
        cx.send(
            w,
            node,
            bytes,
            Event::Push {
                worker: w,
                version,
                grad,
            },
        );
        cx.activity(w, Activity::Communicate);
    }

    /// `Push`: `Some` when the server is to decide on the gradient; `None` when it was discarded
    /// because its worker is down.
    fn landed(&mut self, w: usize, grad: GradId, cx: &mut Ctx<'_, '_, Event>) -> Option<GradId> {
        if cx.is_down(w) {
            cx.world.store.release_gradient(grad);
            self.dropped += 1;
            return None;
        }
        Some(grad)
    }

    /// The server's answer to `w`'s gradient computed at `x_version`, once the method has
    /// handled it: compute at `x_k`. A "go on" when `w` has `x_k`, nothing when `x_k` is
    /// already on its way to it, else the model.
    pub fn reply(&mut self, w: usize, version: u64, cx: &mut Ctx<'_, '_, Event>) {
        if self.workers[w].offered == self.k {
            if version == self.k {
                let node = self.node;
                let k = self.k;
                cx.send(
                    node,
                    w,
                    0,
                    Event::Model {
                        worker: w,
                        version: k,
                        msg: None,
                    },
                );
            }
            return;
        }
        self.offer(w, cx);
    }

    /// Sends `x_k` to `w` (a stop when `w` computes at an older point).
    pub fn offer(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let msg = cx.world.store.new_msg(&[(Slot::Row(self.row), 1.0)]);
        let bytes = cx.world.net.payload_bytes(cx.world.store.num_params());
        self.workers[w].offered = self.k;
        let (node, k) = (self.node, self.k);
        cx.send(
            node,
            w,
            bytes,
            Event::Model {
                worker: w,
                version: k,
                msg: Some(msg),
            },
        );
    }

    /// The newest point sent to `w`.
    pub fn offered(&self, w: usize) -> u64 {
        self.workers[w].offered
    }

    /// `Model`: the worker computes at the point it brings, unless it already computes at that
    /// point or a newer one.
    fn arrived(&mut self, w: usize, version: u64, msg: Option<MsgId>, cx: &mut Ctx<'_, '_, Event>) {
        let release = |msg: Option<MsgId>, cx: &mut Ctx<'_, '_, Event>| {
            if let Some(m) = msg {
                cx.world.store.release_msg(m);
            }
        };
        if !cx.deliverable(w) {
            release(msg, cx);
            return;
        }
        let st = &mut self.workers[w];
        if st.computing && st.version >= version {
            release(msg, cx);
            return;
        }
        if st.computing {
            // A stop: the computation at the older point is abandoned.
            if let Some(g) = st.grad.take() {
                cx.world.store.release_gradient(g);
            }
            st.computing = false;
            self.stopped += 1;
        }
        if let Some(m) = msg {
            cx.world.store.mix(w, &[(Slot::Msg(m), 1.0)]);
            cx.world.store.release_msg(m);
        }
        self.begin(w, version, cx);
    }

    /// The method ignores `w`'s gradient computed at `x_version`: it is released and counted,
    /// and `w` is answered (it computes at `x_k`).
    pub fn ignore(&mut self, w: usize, version: u64, grad: GradId, cx: &mut Ctx<'_, '_, Event>) {
        cx.world.store.release_gradient(grad);
        self.ignored += 1;
        self.reply(w, version, cx);
    }

    /// The server steps with `grad` (released), its running statistics following `w`'s; each
    /// of `members` (the workers whose gradients `grad` is made of) counts a step; `k ← k + 1`.
    pub fn step(&mut self, w: usize, grad: GradId, members: &[usize], cx: &mut Ctx<'_, '_, Event>) {
        let lr = cx.lr();
        cx.world.store.apply_gradient(self.row, grad, lr);
        cx.world.store.release_gradient(grad);
        self.follow_statistics(w, cx);
        for &m in members {
            cx.step_done(m);
        }
        self.k += 1;
    }

    /// The papers' calculation stops: sends `x_k` to every worker computing whose newest point
    /// offered is `stale(offered, k)`, in worker order.
    pub fn stop(&mut self, stale: impl Fn(u64, u64) -> bool, cx: &mut Ctx<'_, '_, Event>) {
        let k = self.k;
        let stale: Vec<usize> = self
            .computing()
            .map(|(v, _)| v)
            .filter(|&v| stale(self.offered(v), k))
            .collect();
        for v in stale {
            self.offer(v, cx);
        }
    }

    /// The server's running statistics follow the worker whose gradient it applied (as the
    /// parameter server's, [`super::ps`]).
    fn follow_statistics(&self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let state = cx.world.store.state();
        if !state.is_empty() {
            cx.world.store.copy_block(self.row, w, state);
        }
    }

    /// A crash of `w`: its computation is abandoned.
    fn crash(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let st = &mut self.workers[w];
        st.computing = false;
        if let Some(g) = st.grad.take() {
            cx.world.store.release_gradient(g);
            self.dropped += 1;
        }
    }

    /// A rejoin of `w`: it asks the server for the model.
    fn rejoin(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        let node = self.node;
        cx.send(w, node, 0, Event::Hello { worker: w });
        cx.activity(w, Activity::Communicate);
    }

    /// `Hello`: the server sends `x_k` to the rejoined worker.
    fn hello(&mut self, w: usize, cx: &mut Ctx<'_, '_, Event>) {
        if !cx.is_down(w) {
            self.offer(w, cx);
        }
    }

    /// Workers waiting for the server, for a stalled run's report.
    pub fn waiting(&self, down: impl Fn(usize) -> bool) -> Vec<String> {
        self.workers
            .iter()
            .enumerate()
            .filter(|&(w, st)| !st.computing && !down(w))
            .map(|(w, st)| {
                format!(
                    "worker {w} waits for the server's reply to its gradient at x_{} (the server is at x_{})",
                    st.version, self.k
                )
            })
            .collect()
    }

    /// Workers computing, with the point they compute at.
    pub fn computing(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.workers
            .iter()
            .enumerate()
            .filter(|(_, st)| st.computing)
            .map(|(w, st)| (w, st.version))
    }

    /// The series every star method records.
    pub fn series(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("iterations", self.k as f64),
            ("ignored", self.ignored as f64),
            ("stopped", self.stopped as f64),
        ]
    }
}

/// Why neither method follows a node's own progress (`progress = "node"`).
pub(crate) const NODE_PROGRESS: &str = "the server's model is one model that every worker's gradients update, so its rate follows the server's progress (the run's), not the counter of whichever worker pushed";

/// Which faults the star handles: crashes, with or without rejoin.
pub(crate) fn star_support(fault: FaultKind) -> FaultSupport {
    match fault {
        FaultKind::Crash | FaultKind::Rejoin => Ok(()),
        _ => Err(
            "a lost gradient or model would leave its worker waiting for good: this method does \
             not retransmit (the parameter server, kind = \"ps\", does)",
        ),
    }
}

/// A method on the star: what the server does with a gradient that lands (Rennala's batch at
/// the current point, Ringmaster's delay threshold). The star runs everything else, so
/// [`Algorithm`] is implemented once for every method.
pub(crate) trait StarMethod {
    /// The star the method runs on.
    fn star(&self) -> &Star;
    /// The star, to change.
    fn star_mut(&mut self) -> &mut Star;
    /// `w`'s gradient computed at `x_version` landed at the server: the method uses it
    /// ([`Star::step`], [`Star::stop`]) or ignores it ([`Star::ignore`]), and answers `w`
    /// ([`Star::reply`]).
    fn push(&mut self, w: usize, version: u64, grad: GradId, cx: &mut Ctx<'_, '_, Event>);
    /// The staleness of the gradients used, where the method reports it.
    fn staleness(&self) -> Option<StalenessStats> {
        None
    }
}

impl<M: StarMethod> Algorithm for M {
    type Event = Event;

    fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        self.star_mut().start(cx);
    }

    fn handle(&mut self, event: Event, cx: &mut Ctx<'_, '_, Event>) {
        if let Some((worker, version, grad)) = self.star_mut().handle(event, cx) {
            self.push(worker, version, grad, cx);
        }
    }

    fn waiting(&self) -> Vec<String> {
        // Only a crash makes workers wait with nothing in flight; `is_down` is not visible
        // here, so every waiting worker is listed.
        self.star().waiting(|_| false)
    }

    fn eval_model(&self) -> Option<Vec<(usize, f64)>> {
        Some(vec![(self.star().row, 1.0)])
    }

    fn staleness(&self) -> Option<StalenessStats> {
        StarMethod::staleness(self)
    }

    fn series(&mut self) -> Vec<(&'static str, f64)> {
        self.star().series()
    }

    fn on_fault(&mut self, fault: WorkerFault, cx: &mut Ctx<'_, '_, Event>) {
        self.star_mut().on_fault(fault, cx);
    }

    fn fault_counts(&self) -> Vec<(&'static str, u64)> {
        vec![("gradients_dropped", self.star().dropped)]
    }
}

/// The options of a method on the star: their check and the method they build. The star's
/// needs (the server's node, no graph, the run's progress, crashes only) are written once, so
/// [`AlgorithmSpec`] is implemented once for every method's options.
pub(crate) trait StarOptions {
    /// The method.
    type Method: StarMethod + Serialize + DeserializeOwned + 'static;
    /// Checks the options; `path` is the entry's.
    fn check(&self, path: &str) -> Result<(), ConfigError>;
    /// The method for `workers` workers.
    fn method(&self, workers: usize) -> Self::Method;
}

impl<C: StarOptions> AlgorithmSpec for C {
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        self.check(setup.path)
    }

    fn extra_nodes(&self) -> usize {
        1
    }

    fn uses_topology(&self) -> bool {
        false
    }

    fn node_progress(&self) -> Result<(), &'static str> {
        Err(NODE_PROGRESS)
    }

    fn fault_support(&self, _kind: &'static str, fault: FaultKind) -> FaultSupport {
        star_support(fault)
    }

    fn build(&self, _kind: &'static str, world: &World<'_>) -> crate::Result<Box<dyn Runnable>> {
        let method = self.method(world.workers());
        Ok(Box::new(method))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testkit;
    use crate::cluster::{ClusterConfig, StragglerConfig};
    use crate::engine::{Collect, Outcome, run};
    use crate::net::NetworkConfig;

    /// The least method on the star: steps with every gradient computed at the current point,
    /// ignores the others, and (with `stops`) stops every worker computing at an older point.
    #[derive(Serialize, Deserialize)]
    struct Fresh {
        star: Star,
        stops: bool,
    }

    impl StarMethod for Fresh {
        fn star(&self) -> &Star {
            &self.star
        }
        fn star_mut(&mut self) -> &mut Star {
            &mut self.star
        }
        fn push(&mut self, w: usize, version: u64, grad: GradId, cx: &mut Ctx<'_, '_, Event>) {
            if version != self.star.k {
                self.star.ignore(w, version, grad, cx);
                return;
            }
            self.star.step(w, grad, &[w], cx);
            if self.stops {
                self.star.stop(|offered, k| offered < k, cx);
            }
            self.star.reply(w, version, cx);
        }
    }

    /// Two workers and the server (node 2), worker 1 four times slower, for 1 s.
    fn run_fresh(stops: bool) -> (Fresh, Outcome) {
        let n = 2;
        let cluster = ClusterConfig::new(n)
            .with_step_time_ms(10.0)
            .with_straggler(StragglerConfig::fixed([1], 4.0));
        let mut store = testkit::store(n, 9);
        let net = NetworkConfig::uniform(10.0, 5.0);
        let mut world = testkit::world(&cluster, &net, n + 1, &mut store, "");
        let mut alg = Fresh {
            star: Star::new(n),
            stops,
        };
        let stop = testkit::stop_at(1.0);
        let out = run(&mut alg, &mut world, &stop, &mut Collect::default()).unwrap();
        (alg, out)
    }

    /// Every server update counts the steps of the gradients it used and moves `k` by one.
    /// Without stops, the slow worker's gradients are always stale: each is ignored, counts no
    /// step, and its worker is answered (it computes again, at `x_k`). With stops, it is sent
    /// `x_k` after every update while it computes at an older point: it abandons that
    /// computation, and no gradient is ignored any more.
    #[test]
    fn the_star_steps_ignores_and_stops_by_the_methods_rule() {
        let (plain, out) = run_fresh(false);
        assert_eq!(plain.star.k, out.worker_steps);
        assert_eq!(plain.star.stopped, 0);
        assert!(
            plain.star.ignored >= 20,
            "the slow worker's gradients: {}",
            plain.star.ignored
        );
        let (stopping, out) = run_fresh(true);
        assert_eq!(stopping.star.k, out.worker_steps);
        assert!(stopping.star.stopped >= 20, "{}", stopping.star.stopped);
        assert_eq!(stopping.star.ignored, 0);
        assert_eq!(stopping.eval_model(), Some(vec![(stopping.star.row, 1.0)]));
    }
}
