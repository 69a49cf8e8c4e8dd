//! Speed of the bare engine: events per second with a store that does no math, so what is
//! measured is the event queue, the cluster and network models and the algorithms' bookkeeping.
//!
//! `cargo bench -p dasim-sim --bench engine`

use divan::Bencher;
use divan::counter::ItemsCount;

use dasim_sim::prelude::*;
use dasim_sim::store::GradId;

fn main() {
    divan::main();
}

/// A store that answers every request at once and computes nothing.
struct NullStore {
    workers: usize,
    rows: usize,
    next: u64,
}

impl ReplicaStore for NullStore {
    fn workers(&self) -> usize {
        self.workers
    }
    fn num_params(&self) -> usize {
        1_000_000
    }
    fn batch_size(&self) -> usize {
        32
    }
    fn train_size(&self) -> usize {
        50_000
    }
    fn layers(&self) -> Vec<dasim_sim::store::Layer> {
        vec![dasim_sim::store::Layer {
            params: 0..1_000_000,
            forward_flops: 2_000_000,
        }]
    }
    fn rows(&self) -> usize {
        self.rows
    }
    fn add_rows(&mut self, count: usize) -> usize {
        self.rows += count;
        self.rows - count
    }
    fn request_gradient_scaled(&mut self, _: usize, _: f64) -> GradId {
        self.next += 1;
        GradId(self.next)
    }
    fn mean_gradient(&mut self, _: &[GradId]) -> GradId {
        self.next += 1;
        GradId(self.next)
    }
    fn apply_gradient_block(&mut self, _: usize, _: GradId, _: f64, _: std::ops::Range<usize>) {}
    fn release_gradient(&mut self, _: GradId) {}
    fn swap_optimizer_state(&mut self, _: usize, _: usize) {}
    fn reset_optimizer_state(&mut self, _: usize) {}
    fn average(&mut self, _: &[usize]) {}
    fn mix(&mut self, _: usize, _: &[(Slot, f64)]) {}
    fn new_msg(&mut self, _: &[(Slot, f64)]) -> MsgId {
        self.next += 1;
        MsgId(self.next)
    }
    fn release_msg(&mut self, _: MsgId) {}
    fn copy_block(&mut self, _: usize, _: usize, _: std::ops::Range<usize>) {}
    fn evaluate(&mut self) -> Evaluation {
        Evaluation {
            loss: 0.0,
            accuracy: 0.0,
        }
    }
    fn evaluate_mix(&mut self, _: &[(usize, f64)]) -> Evaluation {
        self.evaluate()
    }
    fn take_train_loss(&mut self) -> f64 {
        0.0
    }
    fn consensus_distance(&mut self, _: Option<&[f64]>) -> f64 {
        0.0
    }
}

fn simulate(alg: &AlgorithmConfig, workers: usize) -> u64 {
    simulate_steps(alg, workers, 100_000)
}

fn simulate_steps(alg: &AlgorithmConfig, workers: usize, steps: u64) -> u64 {
    let cluster = ClusterConfig::new(workers)
        .with_step_time_ms(10.0)
        .with_straggler(StragglerConfig::fixed([1], 4.0));
    let env = BuildEnv::new(1);
    let mut store = NullStore {
        workers,
        rows: workers,
        next: 0,
    };
    let mut world = World::new(
        Cluster::new(&cluster, &env).unwrap(),
        Network::new(&NetworkConfig::default(), workers + alg.extra_nodes(), &env).unwrap(),
        Topology::build(&TopologyConfig::Ring {}, workers, &env).unwrap(),
        &mut store,
        &OptimizerConfig::default(),
        1,
    );
    let stop = RunConfig {
        sim_time_s: None,
        epochs: None,
        worker_steps: Some(steps),
        eval_every_s: 1e9,
        eval_every_steps: None,
        divergence_loss: None,
    };
    let out = dasim_sim::algorithms::run_algorithm(alg, &mut world, &stop, &mut Collect::default())
        .unwrap();
    out.events
}

fn bench(bencher: Bencher, alg: AlgorithmConfig, workers: usize) {
    let events = simulate(&alg, workers);
    bencher
        .counter(ItemsCount::new(events))
        .bench(|| simulate(&alg, workers));
}

/// AD-PSGD: 100k worker steps (about 200k events; about `n` of them pending at any time).
#[divan::bench(args = [16, 256, 1024], sample_count = 10)]
fn adpsgd(bencher: Bencher, workers: usize) {
    bench(
        bencher,
        AlgorithmConfig::from(AlgorithmKind::AdPsgd(AdPsgdConfig::default())),
        workers,
    );
}

/// All-reduce SGD: 100k worker steps (about 2·(n−1)+1 events per worker step).
#[divan::bench(args = [16, 64], sample_count = 10)]
fn allreduce(bencher: Bencher, workers: usize) {
    bench(
        bencher,
        AlgorithmConfig::from(AlgorithmKind::AllReduce(AllReduceConfig::default())),
        workers,
    );
}

/// Synchronous SGP on the ring (two peers per iteration): 100k worker steps.
#[divan::bench(args = [16, 64], sample_count = 10)]
fn sgp(bencher: Bencher, workers: usize) {
    bench(
        bencher,
        AlgorithmConfig::from(AlgorithmKind::Sgp(SgpConfig::default())),
        workers,
    );
}

/// DASGD: 100k worker steps, each gradient sent to every other worker (n − 1 events each).
#[divan::bench(args = [16, 64], sample_count = 10)]
fn dasgd(bencher: Bencher, workers: usize) {
    bench(
        bencher,
        AlgorithmConfig::from(AlgorithmKind::Dasgd(DasgdConfig::default())),
        workers,
    );
}

/// DASGD forwarding along the ring (`broadcast = "topology"`): 20 worker steps per worker, so
/// every gradient crosses `n − 1` links and is applied `n` times (events per second; the
/// staleness of an application costs one lookup per origin its model had heard of).
#[divan::bench(args = [16, 64, 256], sample_count = 3)]
fn dasgd_topology(bencher: Bencher, workers: usize) {
    let alg = AlgorithmConfig::from(AlgorithmKind::Dasgd(DasgdConfig {
        broadcast: Broadcast::Topology,
    }));
    let steps = 20 * workers as u64;
    let events = simulate_steps(&alg, workers, steps);
    bencher
        .counter(ItemsCount::new(events))
        .bench(|| simulate_steps(&alg, workers, steps));
}

/// The event queue alone, in the classic "hold" model: `pending` events wait; each operation
/// takes the earliest and schedules one in its place a random delay later (up to 10 ms, in
/// steps of 256 ns so that some tie), 200,000 times. The queue is filled outside the timing.
/// Events per second here are what the queue costs; the benches above add the cluster, network,
/// algorithm and staleness recorder around it.
#[divan::bench(args = [1024, 100_000], sample_count = 10)]
fn queue_hold(bencher: Bencher, pending: usize) {
    use dasim_sim::engine::{EventQueue, SimTime};
    use rand::{Rng, SeedableRng};
    const HOLDS: u64 = 200_000;
    bencher
        .counter(ItemsCount::new(HOLDS))
        .with_inputs(|| {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
            let mut q = EventQueue::new();
            for i in 0..pending {
                q.push(
                    SimTime::from_nanos(rng.random_range(0..10_000_000)),
                    i as u64,
                );
            }
            (q, rng)
        })
        .bench_values(|(mut q, mut rng)| {
            let mut sum = 0u64;
            for _ in 0..HOLDS {
                let (t, e) = q.pop().expect("pending events");
                sum = sum.wrapping_add(e);
                let delay = rng.random_range(0..10_000_000u64) & !0xff;
                q.push(SimTime::from_nanos(t.as_nanos() + delay), e);
            }
            sum
        });
}
