//! The replica store: the trait every algorithm speaks to, the exact reference store, the
//! staleness-measuring wrapper, the `[optimizer]` section, its rules (one file each, in
//! [`optim`]) and learning-rate schedules.

pub mod conformance;
pub mod handles;
pub mod lr;
pub mod optim;
pub mod optimizer;
pub mod reference;
pub mod replica;
pub mod tracked;

pub use handles::HandleMap;
pub use optimizer::{OptimizerConfig, OptimizerKind};
pub use reference::{Quadratic, ReferenceStore};
pub use replica::{Evaluation, GradId, Hidden, Layer, Matrix, MsgId, ReplicaStore, Slot, blocks};
pub use tracked::Tracked;
