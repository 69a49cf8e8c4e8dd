//! The replica-store conformance suite ([`dasim_sim::store::conformance`]) against the exact
//! reference store: an 8-dimensional quadratic with noisy gradients (so that workers' rows move
//! apart), in `f64`. Every check is a test of its own, named after the property.

use dasim_sim::store::conformance::Fixture;
use dasim_sim::store::{Hidden, Matrix, OptimizerConfig, Quadratic, ReferenceStore};

/// The reference store, as the algorithm tests use it, with a hidden 2 × 3 matrix on the
/// coordinates 2..8 (Muon's; the first two go to its AdamW).
struct Reference;

impl Fixture for Reference {
    type Store = ReferenceStore;

    fn store(&self, workers: usize, optimizer: &OptimizerConfig) -> ReferenceStore {
        let matrix = Matrix {
            start: 2,
            rows: 2,
            cols: 3,
        };
        ReferenceStore::new(Quadratic::new(8, 10.0, 0.5), workers, optimizer.clone(), 7)
            .with_hidden(vec![Hidden::dense(matrix)])
    }

    fn read_row(&self, store: &ReferenceStore, row: usize) -> Vec<f64> {
        store.params(row).to_vec()
    }

    /// Exact arithmetic in `f64`; only the order of the terms may differ from the suite's.
    fn tolerance(&self) -> f64 {
        1e-12
    }
}

dasim_sim::testgen_replica_store!(Reference);
