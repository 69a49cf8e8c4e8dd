//! Per-worker minibatch sampling and image augmentation, on the host.

use rand::Rng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use dasim_sim::clock::rng::{Stream, StreamKind, stream};

use super::Dataset;

/// Worker `i`'s augmentation stream is (Data, `AUGMENT_STREAM_OFFSET + i`): a stream of its
/// own, so that turning augmentation on or off does not change any worker's minibatch order.
pub const AUGMENT_STREAM_OFFSET: u64 = 1 << 32;

/// Draws one worker's minibatches from its shard.
///
/// The order comes from stream (Data, `worker`) alone: at the start of every local epoch the
/// shard, in the order it was given, is shuffled (`SliceRandom::shuffle`, Fisher–Yates) and
/// dealt out; a minibatch that runs past the end continues into the next epoch's order, so all
/// samples of the shard are used equally often and one minibatch can hold a sample twice. The
/// `k`-th minibatch of a worker depends only on the seed, the worker and its shard — not on the
/// backend, the algorithm or the other workers.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sampler {
    shard: Vec<usize>,
    order: Vec<usize>,
    pos: usize,
    drawn: u64,
    rng: Stream,
    augment_rng: Stream,
}

impl Sampler {
    /// A sampler over `shard` (training-set indices) with worker `worker`'s data streams.
    ///
    /// # Panics
    /// If `shard` is empty ([`super::partition()`] never returns an empty shard).
    pub fn new(shard: Vec<usize>, seed: u64, worker: usize) -> Self {
        assert!(
            !shard.is_empty(),
            "worker {worker} has an empty shard: a sampler needs at least one sample"
        );
        Sampler {
            order: Vec::new(),
            pos: 0,
            drawn: 0,
            shard,
            rng: stream(seed, StreamKind::Data, worker as u64),
            augment_rng: stream(
                seed,
                StreamKind::Data,
                AUGMENT_STREAM_OFFSET + worker as u64,
            ),
        }
    }

    /// Appends the next `batch` sample indices to `out`.
    pub fn next_batch(&mut self, batch: usize, out: &mut Vec<usize>) {
        for _ in 0..batch {
            if self.pos == self.order.len() {
                self.order.clone_from(&self.shard);
                self.order.shuffle(&mut self.rng);
                self.pos = 0;
            }
            out.push(self.order[self.pos]);
            self.pos += 1;
        }
        self.drawn += batch as u64;
    }

    /// The worker's augmentation stream, for [`Augment::apply`].
    pub fn augment_stream(&mut self) -> &mut Stream {
        &mut self.augment_rng
    }

    /// The worker's shard.
    pub fn shard(&self) -> &[usize] {
        &self.shard
    }

    /// Samples drawn so far (the worker's contribution to the global epoch counter, `Σ drawn /
    /// training-set size`).
    pub fn drawn(&self) -> u64 {
        self.drawn
    }

    /// Local epochs completed: samples drawn / shard size.
    pub fn local_epochs(&self) -> f64 {
        self.drawn as f64 / self.shard.len() as f64
    }
}

fn is_zero(v: &usize) -> bool {
    *v == 0
}
fn is_false(b: &bool) -> bool {
    !*b
}

/// `data.augment`: random crop with zero padding and random horizontal flip of images.
///
/// For each sample of a minibatch, in order, [`Augment::apply`] makes these draws from the
/// worker's augmentation stream ([`Sampler::augment_stream`]):
///
/// 1. if `crop_padding = p > 0`: the row offset `dy`, then the column offset `dx`, each
///    `rng.random_range(0..=2p)` over `u32` (uniform in `0..=2p`);
/// 2. if `flip`: `rng.random_bool(0.5)` (one `u64`).
///
/// Output pixel `(c, y, x)` is the input pixel `(c, y + dy − p, x' + dx − p)`, where
/// `x' = width − 1 − x` if the sample is flipped and `x` otherwise, or 0 where that falls
/// outside the image (padding). This is torchvision's `RandomCrop(size, padding=p)` followed by
/// `RandomHorizontalFlip()`; as augmentation runs on normalized features, the padding is 0 in
/// normalized units (the channel mean under per-channel normalization). With neither option
/// (the default) nothing is drawn and the features are copied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Augment {
    /// Zero padding on each side before a random crop back to the image size (0: no crop).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub crop_padding: usize,
    /// Flip each image horizontally with probability ½.
    #[serde(default, skip_serializing_if = "is_false")]
    pub flip: bool,
}

impl Augment {
    /// Whether this changes nothing (and draws nothing).
    pub fn is_identity(&self) -> bool {
        self.crop_padding == 0 && !self.flip
    }

    /// Appends the (augmented) features of the samples `indices` of `data` to `out`:
    /// `indices.len() × data.dim` values, row-major. See the type's documentation for the draws.
    ///
    /// # Panics
    /// If augmentation is requested and `data` has no image shape
    /// ([`super::DataConfig::validate`] rejects that configuration).
    pub fn apply(&self, data: &Dataset, indices: &[usize], rng: &mut Stream, out: &mut Vec<f32>) {
        out.reserve(indices.len() * data.dim);
        if self.is_identity() {
            for &i in indices {
                out.extend_from_slice(data.sample(i));
            }
            return;
        }
        let shape = data
            .shape
            .expect("augmentation needs an image shape (checked by DataConfig::validate)");
        let (h, w) = (shape.height as isize, shape.width as isize);
        let p = self.crop_padding as isize;
        for &i in indices {
            let (dy, dx) = if p > 0 {
                let span = 2 * self.crop_padding as u32;
                let dy = rng.random_range(0..=span) as isize;
                let dx = rng.random_range(0..=span) as isize;
                (dy - p, dx - p)
            } else {
                (0, 0)
            };
            let flip = self.flip && rng.random_bool(0.5);
            let src = data.sample(i);
            for plane in src.chunks_exact(shape.height * shape.width) {
                for y in 0..h {
                    let sy = y + dy;
                    for x in 0..w {
                        let xs = if flip { w - 1 - x } else { x };
                        let sx = xs + dx;
                        out.push(if (0..h).contains(&sy) && (0..w).contains(&sx) {
                            plane[(sy * w + sx) as usize]
                        } else {
                            0.0
                        });
                    }
                }
            }
        }
    }
}
