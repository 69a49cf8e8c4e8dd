//! Checkpoints of the engine ([`dasim_sim::engine::checkpoint`]): for every algorithm, under
//! random stragglers, random congestion and faults that draw from their own streams, a run
//! resumed from any of its checkpoints — into an algorithm and a world built afresh from the
//! scenario, as `dasim run --resume` builds them — goes on exactly as the run that was never
//! interrupted: the same evaluation points, applied gradients and messages after the
//! checkpoint, and the same outcome (time, events, steps, staleness, utilization, links, faults).

use std::sync::atomic::AtomicBool;

use dasim_sim::Error;
use dasim_sim::algorithms::run_algorithm_checkpointed;
use dasim_sim::engine::Checkpointing;
use dasim_sim::fault::{FaultConfig, Faults};
use dasim_sim::prelude::*;
use dasim_sim::record::{GradientRecord, MessageRecord};

/// The engine's sections of a scenario.
#[derive(serde::Deserialize)]
struct Sections {
    seed: u64,
    cluster: ClusterConfig,
    network: NetworkConfig,
    topology: TopologyConfig,
    optimizer: OptimizerConfig,
    run: RunConfig,
    #[serde(default)]
    faults: Vec<FaultConfig>,
    algorithms: Vec<AlgorithmConfig>,
}

/// Jitter and a Markov straggler (their own streams), random congestion (its own streams),
/// delayed and duplicated messages (every algorithm accepts them).
const BASE: &str = r#"
seed = 11

[cluster]
workers = 6
step_time_ms = 10.0

[[cluster.stragglers]]
kind = "jitter"
workers = "all"
distribution = "lognormal"
mean = 1.0
cv = 0.2

[[cluster.stragglers]]
kind = "markov"
workers = [2]
factor = 4.0
mean_fast_steps = 5.0
mean_slow_steps = 3.0

[network]
bandwidth_gbps = 1.0
latency_us = 50.0

[[network.random_congestion]]
mean_on_s = 0.02
mean_off_s = 0.05
bandwidth_factor = 0.25

[topology]
kind = "ring"

[optimizer]
lr = 0.05
momentum = 0.5

[run]
sim_time_s = 0.6
eval_every_s = 0.05
divergence_loss = 1e300

[[faults]]
kind = "delay"
probability = 0.2
mean_ms = 2.0
distribution = "exponential"

[[faults]]
kind = "duplicate"
probability = 0.1
"#;

/// Crashes with a rejoin, and lost messages: for the algorithms that define what they do then.
const CRASH_AND_LOSS: &str = r#"
[[faults]]
kind = "crash"
workers = [4]
at_s = 0.2
rejoin_after_s = 0.1

[[faults]]
kind = "loss"
probability = 0.05
"#;

/// What an observer saw, as text (NaNs compare equal), and the checkpoints it was handed, each
/// with how much it had seen by then.
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

/// Runs entry `i` of `s` on a fresh world, as `ckpt` says.
fn run(
    s: &Sections,
    i: usize,
    observer: &mut Seen,
    ckpt: Checkpointing<'_>,
) -> dasim_sim::Result<Outcome> {
    let alg = &s.algorithms[i];
    let n = s.cluster.workers;
    let env = BuildEnv::new(s.seed);
    let mut store =
        ReferenceStore::new(Quadratic::new(8, 10.0, 0.1), n, s.optimizer.clone(), s.seed)
            // A 2 × 3 weight matrix and two vector coordinates, for PowerSGD.
            .with_matrices(vec![Matrix {
                start: 0,
                rows: 2,
                cols: 3,
            }]);
    let mut world = World::new(
        Cluster::new(&s.cluster, &env).unwrap(),
        Network::new(&s.network, n + alg.extra_nodes(), &env).unwrap(),
        Topology::build(&s.topology, n, &env).unwrap(),
        &mut store,
        &s.optimizer,
        s.seed,
    );
    world.set_metrics(&MetricsConfig {
        log_gradients: true,
        log_messages: true,
        ..Default::default()
    });
    world.set_faults(Faults::new(&s.faults, n, &env).unwrap());
    run_algorithm_checkpointed(alg, &mut world, &s.run, observer, ckpt)
}

fn sections(algorithm: &str, crash_and_loss: bool) -> Sections {
    let mut text = format!("{BASE}\n[[algorithms]]\n{algorithm}\n");
    if crash_and_loss {
        text.push_str(CRASH_AND_LOSS);
    }
    toml::from_str(&text).unwrap_or_else(|e| panic!("{algorithm}: {e}"))
}

fn check(algorithm: &str, crash_and_loss: bool) {
    check_sections(&sections(algorithm, crash_and_loss), algorithm);
}

fn check_sections(s: &Sections, algorithm: &str) {
    let every = SimTime::from_millis_f64(70.0);
    let mut whole = Seen::default();
    let ckpt = Checkpointing {
        every: Some(every),
        ..Default::default()
    };
    let expected = run(s, 0, &mut whole, ckpt).unwrap();
    let plain = run(s, 0, &mut Seen::default(), Checkpointing::default()).unwrap();
    assert_eq!(
        format!("{expected:?}"),
        format!("{plain:?}"),
        "{algorithm}: taking checkpoints changed the run"
    );
    assert!(
        whole.checkpoints.len() >= 6,
        "{algorithm}: {} checkpoints",
        whole.checkpoints.len()
    );
    assert!(
        !whole.messages.is_empty() || algorithm.contains("\"ps\"") || !whole.gradients.is_empty()
    );
    let last = whole.checkpoints.len() - 1;
    for k in [0, last / 2, last] {
        let (bytes, [p, g, m]) = &whole.checkpoints[k];
        let mut resumed = Seen::default();
        let ckpt = Checkpointing {
            every: Some(every),
            resume: Some(bytes),
            ..Default::default()
        };
        let outcome = run(s, 0, &mut resumed, ckpt).unwrap();
        let at = format!("{algorithm}, resumed from checkpoint {k}");
        assert_eq!(
            resumed.points,
            whole.points[*p..],
            "{at}: evaluation points"
        );
        assert_eq!(resumed.gradients, whole.gradients[*g..], "{at}: gradients");
        assert_eq!(resumed.messages, whole.messages[*m..], "{at}: messages");
        assert_eq!(
            format!("{outcome:?}"),
            format!("{expected:?}"),
            "{at}: outcome"
        );
        // The resumed run takes the later checkpoints too, with the same bytes.
        let later: Vec<&Vec<u8>> = whole.checkpoints[k + 1..].iter().map(|(b, _)| b).collect();
        let again: Vec<&Vec<u8>> = resumed.checkpoints.iter().map(|(b, _)| b).collect();
        assert_eq!(again, later, "{at}: later checkpoints");
    }
}

#[test]
fn allreduce_resumes_exactly() {
    check("kind = \"allreduce\"", false);
}

#[test]
fn local_sgd_resumes_exactly() {
    check("kind = \"local-sgd\"\nh = 3", false);
}

#[test]
fn diloco_resumes_exactly() {
    check("kind = \"diloco\"\ninner_steps = 3", false);
}

#[test]
fn sparta_resumes_exactly_alone_and_with_diloco() {
    // The shared stream's draws, the sparse ring and (with DiLoCo) the outer ring and rows.
    check("kind = \"sparta\"\np = 0.3", false);
    check("kind = \"sparta\"\np = 0.3\ninner_steps = 3", false);
}

#[test]
fn sparseloco_resumes_exactly() {
    // The error rows and the all-gather ring, with a round under way at some checkpoints.
    check(
        "kind = \"sparseloco\"\ninner_steps = 3\nchunk = 4\ntop_k = 2\nerror_decay = 0.9",
        false,
    );
}

#[test]
fn slowmo_resumes_exactly() {
    // Every base: local steps, gradient rings, and SGP's state machine with messages in flight.
    check("kind = \"slowmo\"\ntau = 3", false);
    check("kind = \"slowmo\"\nbase = \"allreduce\"\ntau = 3", false);
    check("kind = \"slowmo\"\nbase = \"sgp\"\ntau = 3", false);
}

#[test]
fn streaming_diloco_resumes_exactly() {
    // Fragments in flight across a checkpoint, quantized or not, merged at once or later.
    check(
        "kind = \"streaming-diloco\"\ninner_steps = 4\nfragments = 2\noverlap_steps = 1\nouter_bits = 4",
        false,
    );
    check(
        "kind = \"streaming-diloco\"\ninner_steps = 3\nfragments = 3\nmixing = 0.0",
        false,
    );
}

#[test]
fn async_local_sgd_resumes_exactly() {
    // A crash with rejoin and lost messages (retransmitted), and without faults.
    let alg = "kind = \"async-local-sgd\"\ninner_steps = 3\nmomentum_every = 2\ndynamic_local_steps = true";
    check(alg, true);
    check(alg, false);
}

#[test]
fn rennala_and_ringmaster_resume_exactly() {
    // With and without stops: models and stops in flight, a batch half collected.
    check("kind = \"rennala\"\nbatch = 3", false);
    check("kind = \"rennala\"\nbatch = 3\nstops = true", false);
    check("kind = \"ringmaster\"\nmax_delay = 2", false);
    check("kind = \"ringmaster\"\nmax_delay = 2\nstops = false", false);
    // A crash with rejoin (they refuse lost messages: they do not retransmit).
    let crash = "[[faults]]\nkind = \"crash\"\nworkers = [4]\nat_s = 0.2\nrejoin_after_s = 0.1\n";
    for algorithm in [
        "kind = \"rennala\"\nbatch = 2",
        "kind = \"ringmaster\"\nmax_delay = 3",
    ] {
        let text = format!("{BASE}\n[[algorithms]]\n{algorithm}\n{crash}");
        let s: Sections = toml::from_str(&text).unwrap();
        check_sections(&s, algorithm);
    }
}

#[test]
fn choco_and_powersgd_resume_exactly() {
    // Random compressors draw from each node's stream; PowerSGD keeps its Q and the errors.
    check(
        "kind = \"choco\"\nconsensus_lr = 0.3\ncompression = { kind = \"random-k\", fraction = 0.5 }",
        false,
    );
    check(
        "kind = \"choco\"\nconsensus_lr = 0.5\ncompression = { kind = \"qsgd\", levels = 4 }",
        false,
    );
    check(
        "kind = \"allreduce\"\ncompression = { kind = \"powersgd\", rank = 2 }",
        false,
    );
    // The library's variant: its warm-up, then P and Q in turn (rank 1 of the 2 × 3 matrix;
    // rank 4, clamped to 2, below the default rate and so with a lower one).
    check(
        "kind = \"allreduce\"\ncompression = { kind = \"powersgd\", rank = 1, variant = \"library\", start_after = 3 }",
        false,
    );
    check(
        "kind = \"allreduce\"\ncompression = { kind = \"powersgd\", rank = 4, variant = \"library\", start_after = 2, min_compression_rate = 1.0 }",
        false,
    );
}

#[test]
fn dpsgd_resumes_exactly() {
    check("kind = \"dpsgd\"", false);
}

#[test]
fn adpsgd_resumes_exactly() {
    // Both averaging modes: the default communication thread, and one average per step.
    check("kind = \"adpsgd\"", true);
    check("kind = \"adpsgd\"\naveraging = \"per-step\"", true);
    check("kind = \"adpsgd\"\naveraging = \"thread\"", false);
    // The reference's rotation, with the host time of each averaging (messages leave later),
    // on the reference's graph.
    let schedule = "kind = \"adpsgd\"\npartner = \"schedule\"\naveraging_overhead_us = 30.0";
    let mut s = sections(schedule, false);
    s.topology = TopologyConfig::BipartiteExponential {};
    check_sections(&s, schedule);
    check("kind = \"adpsgd\"\naveraging_overhead_us = 30.0", true);
}

#[test]
fn sgp_and_overlap_sgp_resume_exactly() {
    check("kind = \"sgp\"", true);
    check("kind = \"overlap-sgp\"\ntau = 2", true);
}

#[test]
fn parameter_server_resumes_exactly() {
    check("kind = \"ps\"\nservers = 2", true);
}

#[test]
fn dasgd_resumes_exactly() {
    check("kind = \"dasgd\"", true);
}

#[test]
fn lap_and_lpp_sgd_resume_exactly() {
    check("kind = \"lap-sgd\"\nprocesses = 2\nh = 3", false);
    check("kind = \"lpp-sgd\"\nprocesses = 2\nh = 3", false);
}

#[test]
fn an_interrupt_stops_after_the_current_event_with_a_checkpoint() {
    let s = sections("kind = \"adpsgd\"", false);
    let mut whole = Seen::default();
    let expected = run(&s, 0, &mut whole, Checkpointing::default()).unwrap();
    let raised = AtomicBool::new(true);
    let mut first = Seen::default();
    let ckpt = Checkpointing {
        interrupt: Some(&raised),
        ..Default::default()
    };
    match run(&s, 0, &mut first, ckpt) {
        Err(Error::Interrupted { time }) => assert_eq!(time, SimTime::ZERO),
        other => panic!("not interrupted: {other:?}"),
    }
    assert_eq!(
        first.checkpoints.len(),
        1,
        "one checkpoint, at the interrupt"
    );
    let (bytes, _) = &first.checkpoints[0];
    let mut rest = Seen::default();
    let ckpt = Checkpointing {
        resume: Some(bytes),
        ..Default::default()
    };
    let outcome = run(&s, 0, &mut rest, ckpt).unwrap();
    assert_eq!(format!("{outcome:?}"), format!("{expected:?}"));
    let mut points = first.points.clone();
    points.extend(rest.points);
    assert_eq!(points, whole.points);
}

#[test]
fn a_damaged_or_foreign_checkpoint_is_refused() {
    let s = sections("kind = \"allreduce\"", false);
    let mut whole = Seen::default();
    let ckpt = Checkpointing {
        every: Some(SimTime::from_millis_f64(100.0)),
        ..Default::default()
    };
    run(&s, 0, &mut whole, ckpt).unwrap();
    let (bytes, _) = &whole.checkpoints[1];
    let refused = |bytes: &[u8]| {
        let ckpt = Checkpointing {
            resume: Some(bytes),
            ..Default::default()
        };
        match run(&s, 0, &mut Seen::default(), ckpt) {
            Err(Error::Checkpoint(m)) => m,
            other => panic!("accepted: {other:?}"),
        }
    };
    assert!(refused(b"not a checkpoint").contains("bad magic number"));
    assert!(refused(&bytes[..bytes.len() / 2]).contains("cannot decode"));
    let mut other_version = bytes.clone();
    other_version[8] = 99;
    assert!(refused(&other_version).contains("format version 99"));
    // Another algorithm's state does not decode as this one's.
    let sgp = sections("kind = \"sgp\"", false);
    let mut seen = Seen::default();
    let ckpt = Checkpointing {
        every: Some(SimTime::from_millis_f64(100.0)),
        ..Default::default()
    };
    run(&sgp, 0, &mut seen, ckpt).unwrap();
    assert!(refused(&seen.checkpoints[1].0).contains("cannot"));
}

#[test]
fn gradient_tracking_resumes_exactly() {
    // Trackers and held gradients across a checkpoint; plain SGD, as the method needs.
    let alg = "kind = \"gradient-tracking\"";
    let mut s = sections(alg, false);
    s.optimizer.momentum = 0.0;
    check_sections(&s, alg);
}

#[test]
fn demo_resumes_exactly() {
    // The momentum rows and the gradients held for the all-gather, across a checkpoint; DeMo
    // steps at a plain SGD rate.
    let alg = "kind = \"demo\"\nchunk = 4\ntop_k = 2\nweight_decay = 0.01";
    let mut s = sections(alg, false);
    s.optimizer.momentum = 0.0;
    check_sections(&s, alg);
}

#[test]
fn exact_diffusion_and_d2_resume_exactly() {
    // The ψ rows and each worker's own φ waiting for its neighbours', across a checkpoint; D² on
    // an odd ring, whose W it accepts.
    for (alg, workers) in [("kind = \"exact-diffusion\"", 6), ("kind = \"d2\"", 5)] {
        let mut s = sections(alg, false);
        s.optimizer.momentum = 0.0;
        s.cluster.workers = workers;
        check_sections(&s, alg);
    }
}

#[test]
fn push_diging_resumes_exactly() {
    // Weights, trackers and shares in flight on a random-peer schedule, across a checkpoint.
    let alg = "kind = \"push-diging\"";
    let mut s = sections(alg, false);
    s.optimizer.momentum = 0.0;
    s.topology = TopologyConfig::RandomPeer {};
    check_sections(&s, alg);
}

#[test]
fn host_work_in_flight_resumes_exactly() {
    // At 1e-4 GB/s an outer step of the 8-coordinate model takes a few milliseconds: checkpoints
    // fall while a worker's or the server's host work is queued, and the resumed run must wait
    // for it as the whole run did.
    for alg in [
        "kind = \"diloco\"\ninner_steps = 3",
        "kind = \"streaming-diloco\"\ninner_steps = 4\nfragments = 2\noverlap_steps = 1\nouter_bits = 4",
        "kind = \"async-local-sgd\"\ninner_steps = 3\nmomentum_every = 2",
        "kind = \"choco\"\nconsensus_lr = 0.3\ncompression = { kind = \"top-k\", fraction = 0.5 }",
    ] {
        let free = sections(alg, false);
        let mut s = sections(alg, false);
        s.cluster.host_gbps = Some(1e-4);
        let outcome = |s: &Sections| {
            let o = run(s, 0, &mut Seen::default(), Checkpointing::default()).unwrap();
            (o.worker_steps, o.sim_time, format!("{:?}", o.network))
        };
        assert_ne!(
            outcome(&s),
            outcome(&free),
            "{alg}: host work changed nothing"
        );
        check_sections(&s, alg);
    }
}
