//! # dasim-sim: the engine of dasim
//!
//! A deterministic discrete-event simulator of a training cluster. Time is modeled; numbers are
//! real: a worker's step takes the simulated time the [`cluster`] model says, messages take the
//! time the [`net`] model says, and the gradients and averages an [`algorithms`] module asks for
//! are computed for real by a [`ReplicaStore`](store::ReplicaStore) (burn tensors in
//! `dasim-models`, or the exact [`ReferenceStore`](store::ReferenceStore) here).
//!
//! The crate is grouped by concern:
//!
//! | module | what it holds |
//! |--------|---------------|
//! | [`algorithm`] | the author's API: [`Algorithm`][alg], [`Ctx`][ctx], [`World`][world] |
//! | [`algorithms`] | the library, one module per algorithm, and the registry of scenario `kind`s |
//! | [`engine`] | the driver: time, event queue, random streams, [`run`][run], [`run_inspect`][ri] |
//! | [`store`] | the replica stores, the `[optimizer]` section, learning-rate schedules |
//! | [`cluster`] | compute: base step times and stragglers |
//! | [`net`] | the network model, the communication graph, peer schedules |
//! | [`record`] | what a run records |
//!
//! [alg]: algorithm::Algorithm
//! [ctx]: algorithm::Ctx
//! [world]: algorithm::World
//! [run]: engine::run
//! [ri]: engine::run_inspect
//!
//! ## Running an algorithm
//!
//! Run AD-PSGD on 4 workers of an exact quadratic problem, one worker 4× slower:
//!
//! ```
//! use dasim_sim::prelude::*;
//!
//! let env = BuildEnv::new(7);
//! let cluster = ClusterConfig::new(4)
//!     .with_step_time_ms(10.0)
//!     .with_straggler(StragglerConfig::fixed([3], 4.0));
//! let topology = Topology::build(&TopologyConfig::Ring {}, 4, &env).unwrap();
//! let optimizer = OptimizerConfig { lr: 0.1, ..Default::default() };
//! let mut store = ReferenceStore::new(Quadratic::new(8, 10.0, 0.0), 4, optimizer.clone(), 7);
//! let sides = topology.bipartition().unwrap();
//! let mut world = World::new(
//!     Cluster::new(&cluster, &env).unwrap(),
//!     Network::new(&NetworkConfig::default(), 4, &env).unwrap(),
//!     topology,
//!     &mut store,
//!     &optimizer,
//!     7,
//! );
//! let stop = RunConfig {
//!     sim_time_s: Some(1.0), epochs: None, worker_steps: None,
//!     eval_every_s: 0.1, eval_every_steps: None, divergence_loss: None,
//! };
//! let mut alg = AdPsgd::new(&AdPsgdConfig::default(), &sides, 7);
//! let mut points = Collect::default();
//! let outcome = run(&mut alg, &mut world, &stop, &mut points).unwrap();
//! assert_eq!(outcome.sim_time, SimTime::from_secs_f64(1.0));
//! assert!(points.0.last().unwrap().eval.loss < points.0[0].eval.loss);
//! // What happened, recorded: every worker's time adds up to the run's simulated time, and the
//! // healthy workers spent most of it computing.
//! let usage = &outcome.record.usage;
//! assert!(usage.iter().all(|u| u.total() == outcome.sim_time));
//! assert!(usage[0].get(Activity::Compute) > outcome.sim_time.scale(0.9));
//! ```
//!
//! ## Authoring an algorithm
//!
//! An algorithm is a state machine over events of its own. The driver keeps them in one queue,
//! takes the earliest, advances the clock to it and hands it to
//! [`Algorithm::handle`](algorithm::Algorithm::handle) with a [`Ctx`](algorithm::Ctx): the current
//! time, a way to schedule later events, and the [`World`](algorithm::World) — the cluster, the
//! network, the graph and the replica store. Everything an algorithm does goes through that
//! context: it starts steps, sends messages, sets timers, operates on parameters through the
//! store and says what its workers are doing. It never reads a clock, never holds a parameter
//! value, and draws random numbers only from its own streams.
//!
//! This section writes one from scratch: *gossip SGD*. Every worker steps on its own replica and,
//! after each step, sends a copy of it to a neighbour, which averages it into its own. Nobody ever
//! waits:
//!
//! ```text
//! worker i, forever:
//!     read x_i; compute g on x_i and a minibatch        (as long as the cluster model says)
//!     x_i ← optimizer step with g                        (the rate in force now)
//!     pick a neighbour j uniformly at random; send a copy of x_i to j
//! worker j, when a copy m arrives:
//!     x_j ← (x_j + m) / 2
//! ```
//!
//! ### The events and the state
//!
//! An algorithm names its own events, and each carries what its handler will need. The end of a
//! step carries the gradient the step computed — a [`GradId`](store::GradId), a handle: the
//! values stay in the store, which may be computing them lazily on a GPU. A message carries the
//! model it transports — a [`MsgId`](store::MsgId), a message buffer in the store, taken when the
//! message was sent.
//!
//! The state is what the algorithm must remember between events: here, each worker's random
//! stream for its choice of neighbour ([`clock::rng::stream`], one stream per worker, so what
//! worker 0 draws does not depend on anyone else), the steps each worker has completed and the
//! number of copies in flight.
//!
//! ```
//! use dasim_sim::algorithm::Ctx;
//! use dasim_sim::clock::rng::{Stream, StreamKind, stream};
//! use dasim_sim::store::{GradId, MsgId};
//!
//! /// The events of gossip SGD.
//! #[derive(Debug)]
//! enum Event {
//!     /// `worker` finished computing the gradient `grad`.
//!     StepDone { worker: usize, grad: GradId },
//!     /// `model`, a copy of a neighbour's replica, reached worker `to`.
//!     Model { to: usize, model: MsgId },
//! }
//!
//! /// Gossip SGD.
//! struct Gossip {
//!     /// Per worker: its own stream, for its choice of neighbour.
//!     rngs: Vec<Stream>,
//!     /// Per worker: the steps it has completed.
//!     steps: Vec<u64>,
//!     /// Copies sent and not merged yet.
//!     in_flight: usize,
//! }
//!
//! impl Gossip {
//!     fn new(workers: usize, seed: u64) -> Self {
//!         Gossip {
//!             rngs: (0..workers)
//!                 .map(|w| stream(seed, StreamKind::Algorithm, w as u64))
//!                 .collect(),
//!             steps: vec![0; workers],
//!             in_flight: 0,
//!         }
//!     }
//!
//!     /// Starts `worker`'s next step.
//!     fn step(&mut self, worker: usize, cx: &mut Ctx<'_, '_, Event>) {
//!         let (grad, duration) = cx.begin_step(worker, 1.0);
//!         cx.after(duration, Event::StepDone { worker, grad });
//!     }
//! }
//! ```
//!
//! [`Ctx::begin_step`](algorithm::Ctx::begin_step) reads the worker's replica as it is now,
//! requests the gradient there on the worker's next minibatch, marks the worker as computing, and
//! returns the gradient and the step's duration, which the cluster model draws (base time ×
//! straggler factor). The algorithm schedules what happens when: here, one event at the step's
//! end. ([`Ctx::start_step`](algorithm::Ctx::start_step) does both at once, for algorithms that
//! keep the gradient in their state rather than in the event.)
//!
//! ### The state machine
//!
//! [`Algorithm::start`](algorithm::Algorithm::start) schedules the first events, at time 0, and
//! [`Algorithm::handle`](algorithm::Algorithm::handle) answers each event:
//!
//! ```
//! # use dasim_sim::algorithm::Ctx;
//! # use dasim_sim::clock::rng::Stream;
//! # use dasim_sim::store::{GradId, MsgId};
//! # #[derive(Debug)]
//! # enum Event {
//! #     StepDone { worker: usize, grad: GradId },
//! #     Model { to: usize, model: MsgId },
//! # }
//! # struct Gossip { rngs: Vec<Stream>, steps: Vec<u64>, in_flight: usize }
//! # impl Gossip {
//! #     fn step(&mut self, worker: usize, cx: &mut Ctx<'_, '_, Event>) {
//! #         let (grad, duration) = cx.begin_step(worker, 1.0);
//! #         cx.after(duration, Event::StepDone { worker, grad });
//! #     }
//! # }
//! use dasim_sim::algorithm::Algorithm;
//! use dasim_sim::store::{ReplicaStore, Slot}; // the store's operations are the trait's methods
//! use rand::Rng;
//!
//! impl Algorithm for Gossip {
//!     type Event = Event;
//!
//!     fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
//!         for worker in 0..self.steps.len() {
//!             self.step(worker, cx);
//!         }
//!     }
//!
//!     fn handle(&mut self, event: Event, cx: &mut Ctx<'_, '_, Event>) {
//!         match event {
//!             Event::StepDone { worker, grad } => {
//!                 // The step's gradient, applied to the worker's own replica.
//!                 let lr = cx.lr();
//!                 cx.world.store.apply_gradient(worker, grad, lr);
//!                 cx.world.store.release_gradient(grad);
//!                 cx.step_done(worker);
//!                 self.steps[worker] += 1;
//!                 // A copy of the new replica, to a neighbour drawn from the worker's stream.
//!                 let peers = cx.world.topology.neighbors(worker);
//!                 let to = peers[self.rngs[worker].random_range(0..peers.len())];
//!                 let model = cx.world.store.new_msg(&[(Slot::Row(worker), 1.0)]);
//!                 let bytes = cx.world.model_bytes;
//!                 cx.send(worker, to, bytes, Event::Model { to, model });
//!                 self.in_flight += 1;
//!                 // The next step starts at once: computing overlaps the communication.
//!                 self.step(worker, cx);
//!             }
//!             Event::Model { to, model } => {
//!                 cx.world.store.mix(to, &[(Slot::Row(to), 0.5), (Slot::Msg(model), 0.5)]);
//!                 cx.world.store.release_msg(model);
//!                 self.in_flight -= 1;
//!             }
//!         }
//!     }
//!
//!     fn waiting(&self) -> Vec<String> {
//!         Vec::new() // nobody ever waits
//!     }
//! }
//! ```
//!
//! Step by step:
//!
//! - The gradient is applied with the rate in force now ([`Ctx::lr`](algorithm::Ctx::lr): the
//!   `[optimizer]` schedule at the current time and progress) and then released: handles are
//!   freed by the algorithm that holds them. [`Ctx::step_done`](algorithm::Ctx::step_done) counts
//!   the step, for the stop rules, the epochs and the records.
//! - The copy is a message buffer taken now ([`new_msg`](store::ReplicaStore::new_msg)), so what
//!   travels is the replica as it was when sent, whatever its worker does while the copy is on the
//!   wire. [`Ctx::send`](algorithm::Ctx::send) asks the network when a message of
//!   `model_bytes` lands (serialization at both NICs, then latency) and schedules the arrival
//!   event then.
//! - The receiver merges the copy with one store operation,
//!   [`mix`](store::ReplicaStore::mix), which is atomic, and frees the buffer. The receiver may
//!   be computing a gradient meanwhile, on the replica it read before: the store layer measures
//!   that staleness for every algorithm alike ([`store::tracked`]).
//! - [`Algorithm::waiting`](algorithm::Algorithm::waiting) says who waits for whom. The driver
//!   asks when the event queue runs dry: an empty answer ends the run, any other is reported as a
//!   deadlock. Gossip never waits.
//! - The other methods have defaults: the model evaluation points measure (the mean of the worker
//!   replicas), the staleness the algorithm measures itself, the scales that de-bias the replicas
//!   (push-sum) and series of its own.
//!
//! What the handler does not do matters as much. Its control flow never depends on a parameter
//! value (the numbers may live on a GPU, and the timeline must be the same on every backend); it
//! never reads the host's clock; its only randomness is its workers' streams. And it declares no
//! activity besides the one `begin_step` sets, because its workers compute all the time; an
//! algorithm whose workers wait says so with [`Ctx::block`](algorithm::Ctx::block),
//! [`Ctx::unblock`](algorithm::Ctx::unblock) and [`Ctx::activity`](algorithm::Ctx::activity).
//!
//! ### Running it, and checking an invariant at every event
//!
//! An algorithm runs on a [`World`](algorithm::World) built from the cluster, network and
//! topology models and a store: here the exact [`ReferenceStore`](store::ReferenceStore) on a
//! quadratic, whose numbers are plain `f64`. [`run_inspect`](engine::run_inspect) is
//! [`run`](engine::run) with a hook, called after `start` and after every event with the
//! algorithm, the world and the time: where an algorithm's invariant is checked at every event,
//! not only at the end.
//!
//! Gossip's timing has a closed form. Nobody waits, so worker `w`, whose steps take `d_w`, ends
//! its `k`-th step at exactly `k · d_w`: after any event at time `t`, it has completed `⌊t / d_w⌋`
//! steps, or one fewer if its step ends at `t` and its event comes later in the `(time, sequence)`
//! order.
//!
//! ```
//! # use dasim_sim::algorithm::{Algorithm, Ctx};
//! # use dasim_sim::clock::rng::{Stream, StreamKind, stream};
//! # use dasim_sim::store::{GradId, MsgId, ReplicaStore, Slot};
//! # use rand::Rng;
//! # #[derive(Debug)]
//! # enum Event {
//! #     StepDone { worker: usize, grad: GradId },
//! #     Model { to: usize, model: MsgId },
//! # }
//! # struct Gossip { rngs: Vec<Stream>, steps: Vec<u64>, in_flight: usize }
//! # impl Gossip {
//! #     fn new(workers: usize, seed: u64) -> Self {
//! #         Gossip {
//! #             rngs: (0..workers)
//! #                 .map(|w| stream(seed, StreamKind::Algorithm, w as u64))
//! #                 .collect(),
//! #             steps: vec![0; workers],
//! #             in_flight: 0,
//! #         }
//! #     }
//! #     fn step(&mut self, worker: usize, cx: &mut Ctx<'_, '_, Event>) {
//! #         let (grad, duration) = cx.begin_step(worker, 1.0);
//! #         cx.after(duration, Event::StepDone { worker, grad });
//! #     }
//! # }
//! # impl Algorithm for Gossip {
//! #     type Event = Event;
//! #     fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
//! #         for worker in 0..self.steps.len() { self.step(worker, cx); }
//! #     }
//! #     fn handle(&mut self, event: Event, cx: &mut Ctx<'_, '_, Event>) {
//! #         match event {
//! #             Event::StepDone { worker, grad } => {
//! #                 let lr = cx.lr();
//! #                 cx.world.store.apply_gradient(worker, grad, lr);
//! #                 cx.world.store.release_gradient(grad);
//! #                 cx.step_done(worker);
//! #                 self.steps[worker] += 1;
//! #                 let peers = cx.world.topology.neighbors(worker);
//! #                 let to = peers[self.rngs[worker].random_range(0..peers.len())];
//! #                 let model = cx.world.store.new_msg(&[(Slot::Row(worker), 1.0)]);
//! #                 let bytes = cx.world.model_bytes;
//! #                 cx.send(worker, to, bytes, Event::Model { to, model });
//! #                 self.in_flight += 1;
//! #                 self.step(worker, cx);
//! #             }
//! #             Event::Model { to, model } => {
//! #                 cx.world.store.mix(to, &[(Slot::Row(to), 0.5), (Slot::Msg(model), 0.5)]);
//! #                 cx.world.store.release_msg(model);
//! #                 self.in_flight -= 1;
//! #             }
//! #         }
//! #     }
//! #     fn waiting(&self) -> Vec<String> { Vec::new() }
//! # }
//! use dasim_sim::prelude::*;
//!
//! // Four workers on a ring; worker 3 takes twice as long per step.
//! let (n, seed) = (4, 7);
//! let env = BuildEnv::new(seed);
//! let cluster = ClusterConfig::new(n)
//!     .with_step_time_ms(10.0)
//!     .with_straggler(StragglerConfig::fixed([3], 2.0));
//! let step_ns = |w: usize| if w == 3 { 20_000_000 } else { 10_000_000 };
//! let optimizer = OptimizerConfig { lr: 0.05, ..Default::default() };
//! let mut store = ReferenceStore::new(Quadratic::new(8, 10.0, 0.1), n, optimizer.clone(), seed);
//! let mut world = World::new(
//!     Cluster::new(&cluster, &env).unwrap(),
//!     Network::new(&NetworkConfig::uniform(10.0, 5.0), n, &env).unwrap(),
//!     Topology::build(&TopologyConfig::Ring {}, n, &env).unwrap(),
//!     &mut store,
//!     &optimizer,
//!     seed,
//! );
//! let stop = RunConfig {
//!     sim_time_s: Some(1.0), epochs: None, worker_steps: None,
//!     eval_every_s: 0.1, eval_every_steps: None, divergence_loss: None,
//! };
//!
//! let mut alg = Gossip::new(n, seed);
//! let mut points = Collect::default();
//! let mut calls = 0;
//! let outcome = run_inspect(
//!     &mut alg,
//!     &mut world,
//!     &stop,
//!     &mut points,
//!     &mut |alg: &Gossip, world: &World<'_>, now: SimTime| {
//!         calls += 1;
//!         let t = now.as_nanos();
//!         for w in 0..n {
//!             // The closed form, at every event...
//!             let done = alg.steps[w] * step_ns(w);
//!             assert!(done <= t && t <= done + step_ns(w), "worker {w} at {t} ns");
//!             // ...because every worker computes all the time.
//!             assert_eq!(world.recorder().activity(w), Activity::Compute);
//!         }
//!         assert_eq!(alg.steps.iter().sum::<u64>(), world.worker_steps());
//!     },
//! )
//! .unwrap();
//! // The hook ran after `start` and after every event.
//! assert_eq!(calls, outcome.events + 1);
//!
//! // At the stop: one second holds 100 steps of 10 ms and 50 of 20 ms, and all of it was compute.
//! assert_eq!(outcome.worker_steps, 3 * 100 + 50);
//! for (w, usage) in outcome.record.usage.iter().enumerate() {
//!     assert_eq!(usage.steps, 1_000_000_000 / step_ns(w));
//!     assert_eq!(usage.get(Activity::Compute), outcome.sim_time);
//! }
//! // The loss of the mean model falls by orders of magnitude.
//! let (first, last) = (&points.0[0], points.0.last().unwrap());
//! assert!(last.eval.loss < 1e-3 * first.eval.loss);
//! // Every handle is accounted for: one gradient per worker (its step in progress) and one
//! // buffer per copy still on the wire.
//! drop(world);
//! assert_eq!(store.live_gradients(), n);
//! assert_eq!(store.live_msgs(), alg.in_flight);
//! ```
//!
//! The hook sees the algorithm and the world, not the values of the replicas (the world holds the
//! store). To check an invariant on the parameters themselves at every event — AD-PSGD's averaging
//! keeps the sum of the replicas, SGP keeps the push-sum weight — the library's tests run on a
//! store that shares the reference store with the hook (`Checked`, in `sim/tests/integration/common/mod.rs`;
//! the checks are in `sim/tests/integration/library.rs`).
//!
//! Turning the algorithm into a scenario `kind` — its options, its
//! [`AlgorithmSpec`](algorithms::AlgorithmSpec), its line in the registry, its book chapter and
//! its tests — is the book's contributors' chapter, *Adding an algorithm*.
//!
//! ## Ordering guarantees
//!
//! - Simulated time is an integer count of nanoseconds ([`SimTime`](engine::SimTime)).
//! - Events are delivered in `(time, sequence)` order, the sequence being assigned when the event
//!   is scheduled ([`engine::EventQueue`]). Nothing else breaks ties.
//! - Every random draw comes from a stream seeded by (scenario seed,
//!   [`StreamKind`](clock::rng::StreamKind), entity id), so worker `i`'s `k`-th step takes the
//!   same time under every algorithm.
//! - Control flow never depends on floating-point values computed from parameters, so the event
//!   timeline is the same on every backend.
//! - Nothing in the simulation depends on the host: `sim/clippy.toml` disallows `HashMap` and
//!   `HashSet` (their iteration order is random) and `Instant::now` and `SystemTime::now` in this
//!   crate, and the workspace builds `rand` without its thread-local generator.
//!
//! ## What a run records
//!
//! Besides evaluation points ([`EvalPoint`](engine::EvalPoint): loss and accuracy, training loss,
//! consensus distance, replica spread, suboptimality, algorithm series), every run records what
//! happened, as a function of simulated events only ([`record`]): each worker's time computing,
//! communicating, blocked (and on whom) or idle, in integer nanoseconds that add up to the
//! simulated time; the activity timeline inside a window; per-link messages, bytes and busy time
//! ([`Network::link_stats`](net::Network::link_stats)); message ages; and, measured in the store
//! layer for every algorithm alike ([`store::tracked`]), the staleness of every applied gradient.
//! The [`Outcome`](engine::Outcome) carries it as a [`RunRecord`](record::RunRecord); per-event
//! logs go to the [`Observer`](engine::Observer).

pub mod algorithm;
pub mod algorithms;
pub mod clock;
pub mod cluster;
pub mod compress;
mod csv;
pub mod engine;
pub mod env;
pub mod error;
pub mod fault;
pub mod net;
mod raw;
pub mod record;
pub mod store;

pub use engine::error::{Error, Result};
pub use error::ConfigError;

/// The names most programs need.
pub mod prelude {
    pub use crate::algorithm::{Algorithm, Ctx, StalenessStats, World};
    // Every registered kind's options type is here: the registry (`algorithms/mod.rs`) names
    // each as `crate::prelude::…`, so that a kind added without its line here does not compile.
    pub use crate::algorithms::{
        AdPsgd, AdPsgdConfig, AlgorithmConfig, AlgorithmKind, AlgorithmSpec, AllReduceConfig,
        AllReduceSgd, AsyncLocalSgd, AsyncLocalSgdConfig, Averaging, Bound, Broadcast, Choco,
        ChocoConfig, ChocoScope, Combine, Dasgd, DasgdConfig, Demo, DemoConfig, Diloco,
        DilocoConfig, Dpsgd, DpsgdConfig, ExactDiffusion, ExactDiffusionConfig, FedAsyncConfig,
        FedAvgConfig, FedBuffConfig, FragmentPattern, GradientTracking, GradientTrackingConfig,
        LapSgd, LapSgdConfig, LocalSgd, LocalSgdConfig, MixingWeights, MulocoConfig,
        OverlapSgpConfig, ParameterServer, Partner, PsConfig, PushDiging, PushDigingConfig,
        Rennala, RennalaConfig, Ringmaster, RingmasterConfig, SendRule, Sgp, SgpConfig, Slowmo,
        SlowmoConfig, SparselocoConfig, Sparta, SpartaConfig, Staleness, StepRule, StreamingDiloco,
        StreamingDilocoConfig, UpdateOrder,
    };
    pub use crate::cluster::stragglers::{Distribution, StragglerModel};
    pub use crate::cluster::{
        Cluster, ClusterConfig, GroupConfig, HostWork, StragglerConfig, WorkerSet,
    };
    pub use crate::compress::{Compression, PowerSgd, PowerSgdVariant};
    pub use crate::engine::{
        Collect, EvalPoint, Observer, Outcome, RunConfig, SimTime, run, run_inspect,
    };
    pub use crate::env::BuildEnv;
    pub use crate::net::{
        Dtype, Fabric, LinkSpec, Network, NetworkConfig, PeerSchedule, Topology, TopologyConfig,
    };
    pub use crate::record::{Activity, Histogram, MetricsConfig, RunRecord};
    pub use crate::store::lr::{
        LrScaling, LrSchedule, ScheduleKind, ScheduleProgress, ScheduleUnit,
    };
    pub use crate::store::{
        Evaluation, GradId, Layer, Matrix, MsgId, OptimizerConfig, Quadratic, ReferenceStore,
        ReplicaStore, Slot,
    };
}
