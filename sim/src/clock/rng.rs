//! Seeded random streams, one per entity.
//!
//! Every source of randomness in a run is its own stream, derived from the scenario seed, the
//! [`StreamKind`] and the entity's id (a worker, a link, …). Streams never share state, so adding
//! a worker, or running another algorithm on the same scenario, does not change what any other
//! worker draws: algorithms are compared on common random numbers.
//!
//! ```
//! use dasim_sim::clock::rng::{stream, StreamKind};
//! use rand::Rng;
//!
//! let a: u64 = stream(7, StreamKind::Compute, 3).random();
//! let b: u64 = stream(7, StreamKind::Compute, 3).random();
//! let c: u64 = stream(7, StreamKind::Data, 3).random();
//! assert_eq!(a, b);
//! assert_ne!(a, c);
//! ```

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::clock::time::SimTime;

/// The random number generator of every stream: ChaCha with 8 rounds, portable and reproducible
/// across platforms and versions of this crate.
pub type Stream = ChaCha8Rng;

/// What a stream is for. The discriminant is part of the stream's seed, so it must never change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u64)]
pub enum StreamKind {
    /// Per worker: compute-time jitter and straggler processes.
    Compute = 1,
    /// Per worker `i`: minibatch sampling from the worker's shard (id `i`) and image
    /// augmentation (id `2³² + i`).
    Data = 2,
    /// Per link: congestion processes.
    Link = 3,
    /// Per fault process.
    Fault = 4,
    /// One per run (id 0): random topologies and random worker subsets.
    Topology = 5,
    /// One per run: model initialization (id 0), the train/test split (id 1) and the
    /// partition of the training set across workers (id 2) and the synthetic data generators
    /// (id 3).
    Init = 6,
    /// Per worker: the algorithm's own choices (e.g. AD-PSGD's averaging partner).
    Algorithm = 7,
}

/// SplitMix64 finalizer: a bijective mixer with good avalanche, used to derive stream seeds.
pub(crate) fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A sojourn drawn from the exponential `d` (seconds), in simulated time: at least 1 ns, so that
/// an on/off process always moves forward.
pub(crate) fn sojourn(d: &rand_distr::Exp<f64>, rng: &mut Stream) -> SimTime {
    use rand_distr::Distribution as _;
    SimTime::from_secs_f64(d.sample(rng)).max(SimTime::from_nanos(1))
}

/// The stream of entity `id` of the given kind, for a scenario `seed`.
pub fn stream(seed: u64, kind: StreamKind, id: u64) -> Stream {
    let mut state = splitmix64(seed) ^ splitmix64((kind as u64) << 56 ^ id);
    let mut key = [0u8; 32];
    for chunk in key.chunks_exact_mut(8) {
        state = splitmix64(state);
        chunk.copy_from_slice(&state.to_le_bytes());
    }
    ChaCha8Rng::from_seed(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn streams_are_distinct_by_seed_kind_and_id() {
        let draw = |s, k, i| stream(s, k, i).random::<u64>();
        let base = draw(1, StreamKind::Compute, 0);
        assert_ne!(base, draw(2, StreamKind::Compute, 0));
        assert_ne!(base, draw(1, StreamKind::Data, 0));
        assert_ne!(base, draw(1, StreamKind::Compute, 1));
        assert_eq!(base, draw(1, StreamKind::Compute, 0));
    }

    #[test]
    fn stream_values_are_pinned() {
        // Golden values: changing the derivation (or the generator) would silently change every
        // scenario's realization, so the first draws of two streams are pinned here.
        let mut s = stream(42, StreamKind::Compute, 0);
        let a: [u64; 2] = [s.random(), s.random()];
        let b: u64 = stream(0, StreamKind::Data, 5).random();
        assert_eq!((a, b), GOLDEN);
    }

    const GOLDEN: ([u64; 2], u64) = (
        [1_341_002_199_731_924_957, 7_453_603_378_751_472_488],
        13_314_472_380_444_608_862,
    );
}
