//! The replica-store conformance suite ([`dasim_sim::store::conformance`]) against the burn
//! store: a small MLP (64 → 8 → 10) on the shipped digits, 8 samples per minibatch.
//!
//! - `flex`: the CPU backend, every flush in one pass;
//! - `flex_grouped`: the same store cutting each flush into passes of at most 2 requests spread
//!   over 2 threads, however small the flush (the results must not depend on it);
//! - `wgpu`: any wgpu adapter (lavapipe where there is no GPU), within a looser tolerance; skipped
//!   when `DASIM_SKIP_WGPU` is set or no adapter is found;
//! - `quadratic`: the store of `kind = "quadratic"` runs ([`QuadraticStore`], the exact reference
//!   store with a run's counters).
//!
//! The burn fixtures' stateful store, for the checks of the state rule, is a ResNet-8 of width 4
//! on the same digits (batch norm's running statistics are its state).
//!
//! Every check is a test of its own in each module, named after the property.

use std::path::Path;
use std::sync::OnceLock;

use burn::tensor::Device;
use dasim_models::backend::{BackendChoice, select};
use dasim_models::model::QuadraticShape;
use dasim_models::{
    Activation, BurnStore, DataConfig, MlpConfig, ModelConfig, Problem, QuadraticStore,
    ResnetConfig,
};
use dasim_sim::store::conformance::Fixture;
use dasim_sim::store::{OptimizerConfig, ReplicaStore};

const SEED: u64 = 3;

/// The digits and the MLP, loaded once for every test.
fn problem() -> &'static Problem {
    static PROBLEM: OnceLock<Problem> = OnceLock::new();
    PROBLEM.get_or_init(|| {
        let model = ModelConfig::Mlp(MlpConfig {
            hidden: vec![8],
            activation: Activation::Relu,
        });
        Problem::load(&model, &DataConfig::default(), Path::new("."), SEED).unwrap()
    })
}

/// The digits and a ResNet-8 of width 4 (batch norm: a state suffix), loaded once.
fn resnet_problem() -> &'static Problem {
    static PROBLEM: OnceLock<Problem> = OnceLock::new();
    PROBLEM.get_or_init(|| {
        let model = ModelConfig::Resnet(ResnetConfig { depth: 8, width: 4 });
        Problem::load(&model, &DataConfig::default(), Path::new("."), SEED).unwrap()
    })
}

/// The burn store on one device, executing flushes as `threads` and `max_batch` say.
struct Burn {
    device: Device,
    threads: usize,
    max_batch: Option<usize>,
    tolerance: f64,
    reproducible: bool,
}

impl Burn {
    fn flex() -> Self {
        Burn {
            device: Device::flex(),
            threads: 1,
            max_batch: None,
            // f32 arithmetic against the suite's f64 predictions.
            tolerance: 1e-5,
            reproducible: true,
        }
    }
}

impl Fixture for Burn {
    type Store = BurnStore;

    fn store(&self, workers: usize, optimizer: &OptimizerConfig) -> BurnStore {
        problem()
            .store(self.device.clone(), workers, 8, optimizer.clone(), SEED)
            .with_threads(self.threads)
            .with_max_batch(self.max_batch)
            .with_parallel_flush_flops(0.0)
    }

    fn read_row(&self, store: &BurnStore, row: usize) -> Vec<f64> {
        let p = store.num_params();
        store.params_host()[row * p..(row + 1) * p]
            .iter()
            .map(|&v| f64::from(v))
            .collect()
    }

    fn tolerance(&self) -> f64 {
        self.tolerance
    }

    fn reproducible(&self) -> bool {
        self.reproducible
    }

    fn stateful_store(&self, workers: usize) -> Option<BurnStore> {
        Some(
            resnet_problem()
                .store(
                    self.device.clone(),
                    workers,
                    8,
                    OptimizerConfig::default(),
                    SEED,
                )
                .with_threads(self.threads)
                .with_max_batch(self.max_batch)
                .with_parallel_flush_flops(0.0),
        )
    }
}

/// A wgpu adapter, looked up once; `None` (and a note on stderr) when `DASIM_SKIP_WGPU` is set or
/// none is found.
fn wgpu() -> Option<Burn> {
    static DEVICE: OnceLock<Option<Device>> = OnceLock::new();
    let device = DEVICE.get_or_init(|| {
        if std::env::var_os("DASIM_SKIP_WGPU").is_some() {
            eprintln!("DASIM_SKIP_WGPU is set: skipping the wgpu conformance checks");
            return None;
        }
        match select(BackendChoice::Wgpu) {
            Ok(backend) => {
                eprintln!("wgpu adapter: {}", backend.device_name);
                Some(backend.device)
            }
            Err(e) => {
                eprintln!("skipping the wgpu conformance checks: {e}");
                None
            }
        }
    });
    Some(Burn {
        device: device.clone()?,
        threads: 1,
        max_batch: None,
        // Gradients on the device are not bit-reproducible; row arithmetic is on the host.
        tolerance: 1e-4,
        reproducible: false,
    })
}

/// The store of the synthetic quadratic.
struct Quadratic;

impl Fixture for Quadratic {
    type Store = QuadraticStore;

    fn store(&self, workers: usize, optimizer: &OptimizerConfig) -> QuadraticStore {
        let shape = QuadraticShape {
            dim: 8,
            condition: 10.0,
            noise: 0.5,
        };
        QuadraticStore::new(shape, workers, optimizer.clone(), SEED)
    }

    fn read_row(&self, store: &QuadraticStore, row: usize) -> Vec<f64> {
        store.inner().params(row).to_vec()
    }

    fn tolerance(&self) -> f64 {
        1e-12
    }
}

mod flex {
    dasim_sim::testgen_replica_store!(super::Burn::flex());
}

mod flex_grouped {
    dasim_sim::testgen_replica_store!(super::Burn {
        threads: 2,
        max_batch: Some(2),
        ..super::Burn::flex()
    });
}

mod wgpu {
    dasim_sim::testgen_replica_store!(optional super::wgpu());
}

mod quadratic {
    dasim_sim::testgen_replica_store!(super::Quadratic);
}
