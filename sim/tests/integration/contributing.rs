//! The book's contributors' chapter, *Adding an algorithm*, compiled and tested: gossip SGD as a
//! complete algorithm written outside the crate, as a contributor writes it in
//! `sim/src/algorithms/gossip.rs` (where `dasim_sim::` is `crate::`). The chapter includes its
//! code from this file, between the `ANCHOR` comments (`{{#include
//! ../../sim/tests/integration/contributing.rs:algorithm}}`), so what the book shows is what compiles here:
//! the imports, the state and the events, `impl Algorithm`, the options and `impl AlgorithmSpec`.
//!
//! The state machine is the walkthrough's at the top of the crate's documentation
//! (`sim/src/lib.rs`), with the one option of the chapter, `weight` (the walkthrough's is 0.5,
//! the default). The tests check what the chapter promises: `validate` names the key it refuses,
//! the run through `AlgorithmSpec::run` (which runs what `build` returns) trains and keeps the
//! walkthrough's invariants at every event, and a run resumed from a checkpoint goes on exactly
//! as the run never interrupted — which holds only because the state and the events serialize
//! whole.

// ANCHOR: imports
use dasim_sim::ConfigError;
use dasim_sim::algorithm::{Algorithm, Ctx, World};
use dasim_sim::algorithms::{AlgorithmSpec, Runnable, Setup};
use dasim_sim::clock::rng::{Stream, StreamKind, stream};
use dasim_sim::store::{GradId, MsgId, ReplicaStore, Slot};
use rand::Rng;
use serde::{Deserialize, Serialize};
// ANCHOR_END: imports

// The tests' own imports.
use crate::common;

use std::cell::RefCell;
use std::rc::Rc;

use common::{Checked, optimizer, quadratic_store, stop_at};
use dasim_sim::engine::{Checkpointing, Observer, Outcome};
use dasim_sim::prelude::{
    Activity, BuildEnv, Cluster, ClusterConfig, Collect, EvalPoint, MetricsConfig, Network,
    NetworkConfig, OptimizerConfig, ReferenceStore, SimTime, StragglerConfig, Topology,
    TopologyConfig, run_inspect,
};
use dasim_sim::record::{GradientRecord, MessageRecord};

// ANCHOR: state
/// The events of gossip SGD.
#[derive(Debug, Serialize, Deserialize)]
pub enum Event {
    /// A worker finished computing a gradient.
    StepDone {
        /// The worker.
        worker: usize,
        /// The gradient its step computed.
        grad: GradId,
    },
    /// A copy of a neighbour's replica reached a worker.
    Model {
        /// The receiver.
        to: usize,
        /// The copy, a message buffer taken when it was sent.
        model: MsgId,
    },
}

/// Gossip SGD.
#[derive(Serialize, Deserialize)]
pub struct Gossip {
    /// The weight of an incoming copy in the receiver's average.
    weight: f64,
    /// Per worker: its own stream, for its choice of neighbour.
    rngs: Vec<Stream>,
    /// Per worker: the steps it has completed.
    steps: Vec<u64>,
    /// Copies sent and not merged yet.
    in_flight: usize,
}

impl Gossip {
    /// A new instance for `workers` workers; the streams derive from the scenario's `seed`.
    pub fn new(cfg: &GossipConfig, workers: usize, seed: u64) -> Self {
        Gossip {
            weight: cfg.weight,
            rngs: (0..workers)
                .map(|w| stream(seed, StreamKind::Algorithm, w as u64))
                .collect(),
            steps: vec![0; workers],
            in_flight: 0,
        }
    }

    /// Starts `worker`'s next step.
    fn step(&mut self, worker: usize, cx: &mut Ctx<'_, '_, Event>) {
        let (grad, duration) = cx.begin_step(worker, 1.0);
        cx.after(duration, Event::StepDone { worker, grad });
    }
}
// ANCHOR_END: state

// ANCHOR: algorithm
impl Algorithm for Gossip {
    type Event = Event;

    fn start(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        for worker in 0..self.steps.len() {
            self.step(worker, cx);
        }
    }

    fn handle(&mut self, event: Event, cx: &mut Ctx<'_, '_, Event>) {
        match event {
            Event::StepDone { worker, grad } => {
                // The step's gradient, applied to the worker's own replica.
                let lr = cx.lr();
                cx.world.store.apply_gradient(worker, grad, lr);
                cx.world.store.release_gradient(grad);
                cx.step_done(worker);
                self.steps[worker] += 1;
                // A copy of the new replica, to a neighbour drawn from the worker's stream.
                let peers = cx.world.topology.neighbors(worker);
                let to = peers[self.rngs[worker].random_range(0..peers.len())];
                let model = cx.world.store.new_msg(&[(Slot::Row(worker), 1.0)]);
                let bytes = cx.world.model_bytes;
                cx.send(worker, to, bytes, Event::Model { to, model });
                self.in_flight += 1;
                // The next step starts at once: computing overlaps the communication.
                self.step(worker, cx);
            }
            Event::Model { to, model } => {
                // The receiver's average: its own replica and the copy, `weight` to the copy.
                let own = 1.0 - self.weight;
                cx.world
                    .store
                    .mix(to, &[(Slot::Row(to), own), (Slot::Msg(model), self.weight)]);
                cx.world.store.release_msg(model);
                self.in_flight -= 1;
            }
        }
    }

    fn waiting(&self) -> Vec<String> {
        Vec::new() // nobody ever waits
    }
}
// ANCHOR_END: algorithm

// ANCHOR: config
/// Options of gossip SGD.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GossipConfig {
    /// The weight of the incoming copy in the receiver's average, in (0, 1] (default 0.5).
    #[serde(default = "half")]
    pub weight: f64,
}

fn half() -> f64 {
    0.5
}

impl Default for GossipConfig {
    fn default() -> Self {
        GossipConfig { weight: half() }
    }
}
// ANCHOR_END: config

// ANCHOR: spec
impl AlgorithmSpec for GossipConfig {
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        setup.require_connected("gossip SGD")?;
        if !(self.weight > 0.0 && self.weight <= 1.0) {
            return Err(ConfigError::new(
                &setup.at("weight"),
                format!("weight must be in (0, 1], got {}", self.weight),
            )
            .hint("the weight of the incoming copy: 0.5 averages the two models"));
        }
        Ok(())
    }

    fn build(
        &self,
        _kind: &'static str,
        world: &World<'_>,
    ) -> dasim_sim::Result<Box<dyn Runnable>> {
        Ok(Box::new(Gossip::new(self, world.workers(), world.seed)))
    }
}
// ANCHOR_END: spec

const SEED: u64 = 7;

/// The entry as `dasim validate` checks it: first in `[[algorithms]]`, on `topology`.
fn validate(cfg: &GossipConfig, topology: &Topology) -> Result<(), ConfigError> {
    cfg.validate(&Setup {
        kind: "gossip",
        path: "algorithms[0]",
        topology,
        params: None,
        matrices: &[],
        layers: &[],
        state: &(0..0),
    })
}

fn ring(n: usize) -> Topology {
    Topology::build(&TopologyConfig::Ring {}, n, &BuildEnv::new(SEED)).unwrap()
}

/// A world on `store`, built as `dasim run` builds it (gossip needs no extra network nodes).
fn world<'s>(
    cluster: &ClusterConfig,
    net: &NetworkConfig,
    store: &'s mut dyn ReplicaStore,
    opt: &OptimizerConfig,
) -> World<'s> {
    let n = cluster.workers;
    let env = BuildEnv::new(SEED);
    World::new(
        Cluster::new(cluster, &env).unwrap(),
        Network::new(net, n, &env).unwrap(),
        Topology::build(&TopologyConfig::Ring {}, n, &env).unwrap(),
        store,
        opt,
        SEED,
    )
}

/// The walkthrough's cluster: four workers, worker 3 twice as slow, and their step times.
fn four_workers() -> (ClusterConfig, impl Fn(usize) -> u64) {
    let cluster = ClusterConfig::new(4)
        .with_step_time_ms(10.0)
        .with_straggler(StragglerConfig::fixed([3], 2.0));
    (cluster, |w| if w == 3 { 20_000_000 } else { 10_000_000 })
}

#[test]
fn validate_refuses_a_weight_outside_0_1_at_its_key() {
    let topology = ring(4);
    for weight in [0.5, 1.0, 1e-9] {
        assert_eq!(validate(&GossipConfig { weight }, &topology), Ok(()));
    }
    for weight in [0.0, -0.5, 1.5, f64::NAN, f64::INFINITY] {
        let e = validate(&GossipConfig { weight }, &topology).unwrap_err();
        assert_eq!(
            e.path.to_string(),
            "algorithms[0].weight",
            "weight {weight}"
        );
        assert!(e.message.contains("weight must be in (0, 1]"), "{e}");
        assert!(e.hint.is_some(), "{e}: no hint");
    }
    // Two components: some worker would have no neighbour to draw from.
    let split = Topology::from_edges(4, [(0, 1), (2, 3)]);
    let e = validate(&GossipConfig::default(), &split).unwrap_err();
    assert_eq!(e.path.to_string(), "topology.kind");
    assert!(e.message.contains("gossip SGD (algorithms[0])"), "{e}");
}

#[test]
fn the_options_default_round_trip_and_refuse_unknown_keys() {
    let default: GossipConfig = toml::from_str("").unwrap();
    assert_eq!(default, GossipConfig::default());
    assert_eq!(default.weight, 0.5);
    let quarter: GossipConfig = toml::from_str("weight = 0.25").unwrap();
    assert_eq!(quarter.weight, 0.25);
    let text = toml::to_string(&quarter).unwrap();
    assert_eq!(toml::from_str::<GossipConfig>(&text).unwrap(), quarter);
    let e = toml::from_str::<GossipConfig>("wieght = 0.25").unwrap_err();
    assert!(e.to_string().contains("unknown field `wieght`"), "{e}");
}

#[test]
fn gossip_run_through_its_spec_trains_the_quadratic_on_the_closed_form_timeline() {
    let (cluster, step_ns) = four_workers();
    let n = cluster.workers;
    let opt = optimizer(0.05, 0.5);
    let mut store = quadratic_store(n, SEED);
    let mut world = world(
        &cluster,
        &NetworkConfig::uniform(10.0, 5.0),
        &mut store,
        &opt,
    );
    let spec = GossipConfig::default();
    let mut points = Collect::default();
    let outcome = spec
        .run(
            "gossip",
            &mut world,
            &stop_at(1.0),
            &mut points,
            Checkpointing::default(),
        )
        .unwrap();
    assert_eq!(outcome.sim_time, SimTime::from_secs_f64(1.0));
    // Nobody waits: one second holds 100 steps of 10 ms and 50 of 20 ms, all of it compute, and
    // every step sent one copy.
    assert_eq!(outcome.worker_steps, 3 * 100 + 50);
    for (w, usage) in outcome.record.usage.iter().enumerate() {
        assert_eq!(usage.steps, 1_000_000_000 / step_ns(w), "worker {w}");
        assert_eq!(usage.get(Activity::Compute), outcome.sim_time, "worker {w}");
    }
    assert_eq!(outcome.network.messages, outcome.worker_steps);
    // The loss of the mean model falls by orders of magnitude, from one point to the next
    // at first.
    let losses: Vec<f64> = points.0.iter().map(|p| p.eval.loss).collect();
    assert!(losses[1] < losses[0], "{losses:?}");
    assert!(losses[losses.len() - 1] < 1e-3 * losses[0], "{losses:?}");
    // One gradient per worker is still being computed; the copies still on the wire hold their
    // buffers, no more than one per worker (a copy lands long before the next step ends).
    drop(world);
    assert_eq!(store.live_gradients(), n);
    assert!(store.live_msgs() <= n, "{} buffers", store.live_msgs());
}

#[test]
fn gossip_keeps_the_walkthrough_invariants_at_every_event() {
    let (cluster, step_ns) = four_workers();
    let n = cluster.workers;
    let opt = optimizer(0.05, 0.5);
    // The exact store, shared with the hook, which reads its handles between events.
    let mut store = Checked::new(quadratic_store(n, SEED));
    let shared: Rc<RefCell<ReferenceStore>> = store.shared();
    let mut world = world(
        &cluster,
        &NetworkConfig::uniform(10.0, 5.0),
        &mut store,
        &opt,
    );
    let cfg = GossipConfig { weight: 0.25 };
    cfg.validate(&Setup {
        kind: "gossip",
        path: "algorithms[0]",
        topology: &world.topology,
        params: Some(world.store.num_params()),
        matrices: &[],
        layers: &[],
        state: &(0..0),
    })
    .unwrap();
    let mut alg = Gossip::new(&cfg, n, SEED);
    let mut calls = 0;
    let mut most_in_flight = 0;
    let outcome = run_inspect(
        &mut alg,
        &mut world,
        &stop_at(1.0),
        &mut Collect::default(),
        &mut |alg: &Gossip, world: &World<'_>, now: SimTime| {
            calls += 1;
            let t = now.as_nanos();
            for w in 0..n {
                // Worker w ends its k-th step at exactly k · d_w...
                let done = alg.steps[w] * step_ns(w);
                assert!(done <= t && t <= done + step_ns(w), "worker {w} at {t} ns");
                // ...because it computes all the time.
                assert_eq!(world.recorder().activity(w), Activity::Compute);
            }
            assert_eq!(alg.steps.iter().sum::<u64>(), world.worker_steps());
            // Every handle is accounted for: one gradient per worker (its step under way), one
            // message buffer per copy on the wire.
            let store = shared.borrow();
            assert_eq!(store.live_gradients(), n, "at {t} ns");
            assert_eq!(store.live_msgs(), alg.in_flight, "at {t} ns");
            most_in_flight = most_in_flight.max(alg.in_flight);
        },
    )
    .unwrap();
    assert_eq!(
        calls,
        outcome.events + 1,
        "the hook ran after start and every event"
    );
    assert!(most_in_flight > 0, "copies were in flight");
    assert_eq!(
        outcome.network.messages, outcome.worker_steps,
        "one copy per step"
    );
}

/// What an observer saw, as text, and the checkpoints it was handed, each with how much it had
/// seen by then.
#[derive(Default)]
struct Seen {
    points: Vec<String>,
    gradients: Vec<String>,
    messages: Vec<String>,
    checkpoints: Vec<(Vec<u8>, [usize; 3])>,
}

impl Observer for Seen {
    fn on_eval(&mut self, p: &EvalPoint) -> Result<(), String> {
        self.points.push(format!("{p:?}"));
        Ok(())
    }
    fn on_gradient(&mut self, g: &GradientRecord) -> Result<(), String> {
        self.gradients.push(format!("{g:?}"));
        Ok(())
    }
    fn on_message(&mut self, m: &MessageRecord) -> Result<(), String> {
        self.messages.push(format!("{m:?}"));
        Ok(())
    }
    fn on_checkpoint(&mut self, state: &[u8], _time: SimTime) -> Result<(), String> {
        let seen = [self.points.len(), self.gradients.len(), self.messages.len()];
        self.checkpoints.push((state.to_vec(), seen));
        Ok(())
    }
}

/// Six workers with jittered step times and a Markov straggler (their own streams), so that
/// what comes next depends on every stream a checkpoint must carry: the cluster's, the
/// network's and each worker's choice of neighbour.
const CLUSTER: &str = r#"
workers = 6
step_time_ms = 10.0

[[stragglers]]
kind = "jitter"
workers = "all"
distribution = "lognormal"
mean = 1.0
cv = 0.2

[[stragglers]]
kind = "markov"
workers = [2]
factor = 4.0
mean_fast_steps = 5.0
mean_slow_steps = 3.0
"#;

/// Runs gossip SGD through its spec on a fresh store and world, as `dasim run` (with
/// `--checkpoint-every` or `--resume`) builds them.
fn run_checkpointed_gossip(observer: &mut Seen, ckpt: Checkpointing<'_>) -> Outcome {
    let cluster: ClusterConfig = toml::from_str(CLUSTER).unwrap();
    let opt = optimizer(0.05, 0.5);
    let mut store = quadratic_store(cluster.workers, SEED);
    // A copy takes half a step on the wire: checkpoints catch copies in flight, whose events
    // and message buffers they must carry.
    let mut world = world(
        &cluster,
        &NetworkConfig::uniform(1.0, 5000.0),
        &mut store,
        &opt,
    );
    world.set_metrics(&MetricsConfig {
        log_gradients: true,
        log_messages: true,
        ..Default::default()
    });
    GossipConfig { weight: 0.3 }
        .run("gossip", &mut world, &stop_at(0.6), observer, ckpt)
        .unwrap()
}

#[test]
fn a_gossip_run_resumed_from_a_checkpoint_goes_on_exactly_as_the_uninterrupted_run() {
    let every = SimTime::from_millis_f64(70.0);
    let mut whole = Seen::default();
    let expected = run_checkpointed_gossip(
        &mut whole,
        Checkpointing {
            every: Some(every),
            ..Default::default()
        },
    );
    let plain = run_checkpointed_gossip(&mut Seen::default(), Checkpointing::default());
    assert_eq!(
        format!("{expected:?}"),
        format!("{plain:?}"),
        "taking checkpoints changed the run"
    );
    assert!(
        whole.checkpoints.len() >= 8,
        "{} checkpoints",
        whole.checkpoints.len()
    );
    let last = whole.checkpoints.len() - 1;
    for k in [0, last / 2, last] {
        let (bytes, [p, g, m]) = &whole.checkpoints[k];
        let mut resumed = Seen::default();
        let outcome = run_checkpointed_gossip(
            &mut resumed,
            Checkpointing {
                every: Some(every),
                resume: Some(bytes),
                ..Default::default()
            },
        );
        let at = format!("resumed from checkpoint {k}");
        assert_eq!(
            resumed.points,
            whole.points[*p..],
            "{at}: evaluation points"
        );
        assert_eq!(resumed.gradients, whole.gradients[*g..], "{at}: gradients");
        // The same copies, to the same neighbours, at the same times: the streams resumed.
        assert_eq!(resumed.messages, whole.messages[*m..], "{at}: messages");
        assert_eq!(
            format!("{outcome:?}"),
            format!("{expected:?}"),
            "{at}: outcome"
        );
        let later: Vec<&Vec<u8>> = whole.checkpoints[k + 1..].iter().map(|(b, _)| b).collect();
        let again: Vec<&Vec<u8>> = resumed.checkpoints.iter().map(|(b, _)| b).collect();
        assert_eq!(again, later, "{at}: later checkpoints");
    }
}
