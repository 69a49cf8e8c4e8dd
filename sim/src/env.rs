//! What building the run's models needs besides their scenario sections.
//!
//! [`crate::cluster::Cluster::new`], [`crate::net::Network::new`] and
//! [`crate::net::topology::Topology::build`] turn a validated section into a model. Besides the section
//! they need a few facts that live elsewhere: the scenario seed (random worker subsets, random
//! graphs, congestion processes), the directory that relative file paths are resolved against
//! (trace files, edge lists), and what the model contributes (its training FLOPs per sample and
//! the minibatch size, for step times derived from a device speed). A [`BuildEnv`] carries them.
//!
//! ```
//! use dasim_sim::env::BuildEnv;
//!
//! let env = BuildEnv::new(7)
//!     .with_base_dir("scenarios")
//!     .with_flops_per_sample(3.0e9)
//!     .with_batch_size(32);
//! assert_eq!(env.resolve("traces/a.csv").to_str(), Some("scenarios/traces/a.csv"));
//! ```

use std::path::{Path, PathBuf};

/// The seed, the base directory and the model's facts that building a cluster, a network or a
/// topology needs.
#[derive(Clone, Debug, PartialEq)]
pub struct BuildEnv {
    /// The scenario seed every random stream derives from.
    pub seed: u64,
    /// The directory relative paths are resolved against (the scenario file's directory).
    pub base_dir: PathBuf,
    /// Training FLOPs of one sample (forward and backward pass together), as the model counts
    /// them. Used when a worker's step time is derived from a device speed; `cluster.
    /// flops_per_sample` overrides it.
    pub flops_per_sample: Option<f64>,
    /// Samples per minibatch step of one worker.
    pub batch_size: Option<usize>,
}

impl BuildEnv {
    /// An environment with `seed`, the current directory as base and no model facts.
    pub fn new(seed: u64) -> Self {
        BuildEnv {
            seed,
            base_dir: PathBuf::from("."),
            flops_per_sample: None,
            batch_size: None,
        }
    }

    /// Sets the directory relative paths are resolved against.
    pub fn with_base_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.base_dir = dir.into();
        self
    }

    /// Sets the model's training FLOPs per sample.
    pub fn with_flops_per_sample(mut self, flops: f64) -> Self {
        self.flops_per_sample = Some(flops);
        self
    }

    /// Sets the minibatch size.
    pub fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = Some(batch_size);
        self
    }

    /// `path` if absolute, else `path` under [`BuildEnv::base_dir`].
    pub fn resolve(&self, path: impl AsRef<Path>) -> PathBuf {
        let path = path.as_ref();
        if path.is_absolute() || self.base_dir.as_os_str() == "." {
            path.to_path_buf()
        } else {
            self.base_dir.join(path)
        }
    }
}

impl Default for BuildEnv {
    /// Seed 0, the current directory, no model facts.
    fn default() -> Self {
        BuildEnv::new(0)
    }
}
