//! Compressors: what a compressed message carries, what it decodes to, and its size on the wire.
//!
//! One `compression` table serves every algorithm that accepts it (each declares which kinds):
//!
//! ```toml
//! [[algorithms]]
//! kind = "choco"
//! consensus_lr = 0.5
//! compression = { kind = "top-k", fraction = 0.01 }
//! ```
//!
//! The operators are those of Koloskova, Stich & Jaggi, "Decentralized Stochastic Optimization and
//! Gossip Algorithms with Compressed Communication", ICML 2019 (§5, "compression operators"),
//! which CHOCO-SGD needs to be contractions, `E‖Q(x) − x‖² ≤ (1 − δ)‖x‖²`; for a vector
//! `x ∈ ℝ^d`:
//!
//! | `kind` | `Q(x)` | `E[Q(x)]` | bytes on the wire |
//! |---|---|---|---|
//! | `top-k` (`fraction` f) | the `k = max(1, ⌊f·d⌋)` largest `|x_i|` kept, the rest zero | — (biased) | `k·(v + 4)`: values and 32-bit indices |
//! | `random-k` (`fraction` f) | `k` coordinates drawn uniformly without replacement, the rest zero | `(k/d)·x` | `k·v + 8`: values and the 64-bit seed both ends draw the indices from |
//! | `sign` | `(‖x‖₁/d)·sign(x)` (EF-signSGD's scaled sign; `sign(0) = +1`) | — (biased) | `⌈d/8⌉ + v`: one bit per coordinate and the scale |
//! | `qsgd` (`levels` s) | `sign(x_i)·‖x‖₂/(s·τ)·⌊s·|x_i|/‖x‖₂ + ξ_i⌋`, `ξ_i ~ U[0, 1)`, `τ = 1 + min(d/s², √d/s)` | `x/τ` | `⌈d·b/8⌉ + v`, `b = 1 + ⌈log₂(s + 1)⌉` bits per coordinate, and the norm |
//! | `powersgd` (`rank` r) | rank-`r` power iteration per weight matrix ([`powersgd`]) | — (biased) | all-reduces of the factors: two per step (`variant = "paper"`), or one, alternating (`"library"`) |
//!
//! `v` is the bytes of one value (`[network] dtype`: 4 for fp32). `qsgd` is the QSGD quantizer
//! of Alistarh et al. (NeurIPS 2017), which is unbiased, divided by `τ` as CHOCO's paper does so
//! that it is a contraction. Top-k breaks ties by the lower index, so a message is a function of
//! its input alone; random-k and qsgd draw from the sender's own stream
//! ([`crate::clock::rng::StreamKind::Algorithm`]), so a run is reproducible.
//!
//! Sizes depend on `d` and the options only, never on the values: the timing of a run does not
//! depend on floating-point numbers ([`Compression::payload_bytes`]).

pub mod chunked;
pub mod dct;
pub mod powersgd;

use std::ops::Range;

use rand::Rng;
use rand::seq::index;
use serde::{Deserialize, Serialize};

use crate::clock::rng::Stream;
use crate::error::ConfigError;

pub use powersgd::{PowerSgd, Variant as PowerSgdVariant};

/// The `compression` table of an algorithm entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", deny_unknown_fields)]
pub enum Compression {
    /// Keep the `⌊fraction·d⌋` coordinates of largest magnitude.
    #[serde(rename = "top-k")]
    TopK {
        /// Fraction of the coordinates kept, in `(0, 1]`.
        fraction: f64,
    },
    /// Keep `⌊fraction·d⌋` coordinates drawn uniformly.
    #[serde(rename = "random-k")]
    RandomK {
        /// Fraction of the coordinates kept, in `(0, 1]`.
        fraction: f64,
    },
    /// One bit per coordinate, scaled by the mean magnitude. (A variant with braces, so that an
    /// unknown key beside `kind = "sign"` is refused as for the others.)
    #[serde(rename = "sign")]
    Sign {},
    /// Stochastic quantization to `levels` levels per sign (QSGD).
    #[serde(rename = "qsgd")]
    Qsgd {
        /// Quantization levels `s ≥ 1`.
        levels: u32,
    },
    /// Rank-`rank` PowerSGD of each weight matrix, for all-reduce (Vogels et al., 2019).
    #[serde(rename = "powersgd")]
    PowerSgd {
        /// The rank `r ≥ 1` of the approximation.
        rank: usize,
        /// Which reference code it follows: `"paper"` (default) or `"library"`.
        #[serde(default)]
        variant: PowerSgdVariant,
        /// Library variant: steps all-reduced uncompressed first (default
        /// [`powersgd::LIBRARY_START_AFTER`], 100).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start_after: Option<u64>,
        /// Library variant: a matrix is compressed only above this compression rate (default
        /// [`powersgd::LIBRARY_MIN_COMPRESSION_RATE`], 2).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min_compression_rate: Option<f64>,
    },
}

impl Compression {
    /// The `kind` string.
    pub fn name(&self) -> &'static str {
        match self {
            Compression::TopK { .. } => "top-k",
            Compression::RandomK { .. } => "random-k",
            Compression::Sign {} => "sign",
            Compression::Qsgd { .. } => "qsgd",
            Compression::PowerSgd { .. } => "powersgd",
        }
    }

    /// Checks the options; `path` is the table's (`algorithms[0].compression`).
    pub fn check(&self, path: &str) -> Result<(), ConfigError> {
        let error = match *self {
            Compression::TopK { fraction } | Compression::RandomK { fraction }
                if !(fraction > 0.0 && fraction <= 1.0) =>
            {
                ConfigError::new(
                    &format!("{path}.fraction"),
                    format!("fraction must be in (0, 1], got {fraction}"),
                )
                .hint("the fraction of coordinates a message keeps: 0.01 sends 1% of them (CHOCO-SGD's top-1%)")
            }
            Compression::Qsgd { levels: 0 } => {
                ConfigError::new(&format!("{path}.levels"), "levels must be at least 1").hint(
                    "QSGD with s levels sends 1 + ⌈log₂(s + 1)⌉ bits per coordinate; s = 16 is 6 bits",
                )
            }
            Compression::PowerSgd {
                rank,
                variant,
                start_after,
                min_compression_rate,
            } => {
                return powersgd::check_options(
                    rank,
                    variant,
                    start_after,
                    min_compression_rate,
                    path,
                );
            }
            _ => return Ok(()),
        };
        Err(error)
    }

    /// The compression with every default written out, for a run's resolved `scenario.toml`:
    /// the library variant of PowerSGD gains its `start_after` and `min_compression_rate` (the
    /// paper's variant uses neither); the other kinds have no defaulted option left unset.
    pub fn resolved(&self) -> Compression {
        match (self, self.powersgd_options()) {
            (Compression::PowerSgd { variant, .. }, Some(o))
                if *variant == PowerSgdVariant::Library =>
            {
                Compression::PowerSgd {
                    rank: o.rank,
                    variant: o.variant,
                    start_after: Some(o.start_after),
                    min_compression_rate: Some(o.min_compression_rate),
                }
            }
            _ => self.clone(),
        }
    }

    /// PowerSGD's options with every default filled in (`None` for the other kinds): the
    /// library's `start_after` and `min_compression_rate` default to its `Config`'s 100 and 2;
    /// the paper's variant has no warm-up.
    pub fn powersgd_options(&self) -> Option<powersgd::Options> {
        match *self {
            Compression::PowerSgd {
                rank,
                variant,
                start_after,
                min_compression_rate,
            } => Some(powersgd::Options {
                rank,
                variant,
                start_after: match variant {
                    PowerSgdVariant::Paper => 0,
                    PowerSgdVariant::Library => {
                        start_after.unwrap_or(powersgd::LIBRARY_START_AFTER)
                    }
                },
                min_compression_rate: min_compression_rate
                    .unwrap_or(powersgd::LIBRARY_MIN_COMPRESSION_RATE),
            }),
            _ => None,
        }
    }

    /// Coordinates a sparsifier keeps of `d`: `max(1, ⌊fraction·d⌋)`, at most `d`; `d` for the
    /// others.
    pub fn kept(&self, d: usize) -> usize {
        match *self {
            Compression::TopK { fraction } | Compression::RandomK { fraction } => {
                ((fraction * d as f64).floor() as usize).clamp(1, d.max(1))
            }
            _ => d,
        }
    }

    /// Bits per coordinate of a QSGD message with `levels` levels: a sign and
    /// `⌈log₂(levels + 1)⌉` bits of level.
    pub fn qsgd_bits(levels: u32) -> u64 {
        1 + u64::from(32 - levels.leading_zeros())
    }

    /// QSGD's contraction factor `τ = 1 + min(d/s², √d/s)` (CHOCO-SGD's paper, §5).
    pub fn qsgd_tau(d: usize, levels: u32) -> f64 {
        let (d, s) = (d as f64, f64::from(levels));
        1.0 + (d / (s * s)).min(d.sqrt() / s)
    }

    /// Payload bytes of one compressed message of a `d`-coordinate vector whose values take
    /// `value_bytes` each (the table in the module documentation). PowerSGD's messages are its
    /// factors ([`PowerSgd::factor_values`]); this answers the dense size for it.
    pub fn payload_bytes(&self, d: usize, value_bytes: u64) -> u64 {
        let d64 = d as u64;
        match *self {
            Compression::TopK { .. } => self.kept(d) as u64 * (value_bytes + 4),
            Compression::RandomK { .. } => self.kept(d) as u64 * value_bytes + 8,
            Compression::Sign {} => d64.div_ceil(8) + value_bytes,
            Compression::Qsgd { levels } => {
                (d64 * Self::qsgd_bits(levels)).div_ceil(8) + value_bytes
            }
            Compression::PowerSgd { .. } => d64 * value_bytes,
        }
    }

    /// Payload bytes of one message that compresses each of the tensors of `sizes` coordinates
    /// on its own and sends them together: each tensor keeps its own `k` (top-k, random-k) or
    /// carries its own scale (sign, qsgd); the bits of sign and qsgd are packed across tensors
    /// and random-k's seed is sent once. For one tensor it is [`Compression::payload_bytes`].
    pub fn payload_bytes_of(&self, sizes: &[usize], value_bytes: u64) -> u64 {
        let d: usize = sizes.iter().sum();
        let scales = sizes.len().saturating_sub(1) as u64 * value_bytes;
        match *self {
            Compression::TopK { .. } => sizes
                .iter()
                .map(|&t| self.payload_bytes(t, value_bytes))
                .sum(),
            Compression::RandomK { .. } => {
                sizes.iter().map(|&t| self.kept(t) as u64).sum::<u64>() * value_bytes + 8
            }
            Compression::Sign {} | Compression::Qsgd { .. } => {
                self.payload_bytes(d, value_bytes) + scales
            }
            Compression::PowerSgd { .. } => self.payload_bytes(d, value_bytes),
        }
    }

    /// `x ← Q(x)` tensor by tensor: [`Compression::apply`] on each range of `tensors` (disjoint),
    /// each with its own `k`, norm or scale, its draws from `rng` in tensor order. Coordinates
    /// outside every tensor (running statistics) are not sent: they decode to zero.
    pub fn apply_to_tensors(&self, x: &mut [f64], tensors: &[Range<usize>], rng: &mut Stream) {
        let mut end = 0;
        for t in tensors {
            x[end..t.start].fill(0.0);
            self.apply(&mut x[t.clone()], rng);
            end = t.end;
        }
        x[end..].fill(0.0);
    }

    /// `x ← Q(x)`: the value the receiver decodes. Random choices come from `rng`. PowerSGD is
    /// not a per-vector operator ([`PowerSgd`]), and leaves `x` as it is.
    pub fn apply(&self, x: &mut [f64], rng: &mut Stream) {
        let d = x.len();
        if d == 0 {
            return;
        }
        match *self {
            Compression::TopK { .. } => top_k(x, self.kept(d)),
            Compression::RandomK { .. } => {
                let k = self.kept(d);
                let mut keep = vec![false; d];
                for i in index::sample(rng, d, k) {
                    keep[i] = true;
                }
                for (v, k) in x.iter_mut().zip(keep) {
                    if !k {
                        *v = 0.0;
                    }
                }
            }
            Compression::Sign {} => {
                let scale = x.iter().map(|v| v.abs()).sum::<f64>() / d as f64;
                for v in x.iter_mut() {
                    *v = if *v >= 0.0 { scale } else { -scale };
                }
            }
            Compression::Qsgd { levels } => {
                let norm = x.iter().map(|v| v * v).sum::<f64>().sqrt();
                let s = f64::from(levels);
                let unit = if norm > 0.0 {
                    norm / (s * Self::qsgd_tau(d, levels))
                } else {
                    0.0
                };
                for v in x.iter_mut() {
                    // One draw per coordinate, zero or not, so the stream's position does not
                    // depend on the values.
                    let xi: f64 = rng.random();
                    let level = if norm > 0.0 {
                        (s * v.abs() / norm + xi).floor()
                    } else {
                        0.0
                    };
                    *v = v.signum() * unit * level;
                }
            }
            Compression::PowerSgd { .. } => {}
        }
    }
}

/// [`Compression`] in an algorithm's checkpointed state: `#[serde(with = "crate::compress::stored")]`.
/// The scenario's form is tagged by `kind`, which a checkpoint's compact encoding cannot read
/// back; this one names the variant by position.
pub(crate) mod stored {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Compression;

    #[derive(Serialize, Deserialize)]
    enum Stored {
        TopK(f64),
        RandomK(f64),
        Sign,
        Qsgd(u32),
        PowerSgd(usize, super::PowerSgdVariant, Option<u64>, Option<f64>),
    }

    pub fn serialize<S: Serializer>(c: &Compression, s: S) -> Result<S::Ok, S::Error> {
        match *c {
            Compression::TopK { fraction } => Stored::TopK(fraction),
            Compression::RandomK { fraction } => Stored::RandomK(fraction),
            Compression::Sign {} => Stored::Sign,
            Compression::Qsgd { levels } => Stored::Qsgd(levels),
            Compression::PowerSgd {
                rank,
                variant,
                start_after,
                min_compression_rate,
            } => Stored::PowerSgd(rank, variant, start_after, min_compression_rate),
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Compression, D::Error> {
        Ok(match Stored::deserialize(d)? {
            Stored::TopK(fraction) => Compression::TopK { fraction },
            Stored::RandomK(fraction) => Compression::RandomK { fraction },
            Stored::Sign => Compression::Sign {},
            Stored::Qsgd(levels) => Compression::Qsgd { levels },
            Stored::PowerSgd(rank, variant, start_after, min_compression_rate) => {
                Compression::PowerSgd {
                    rank,
                    variant,
                    start_after,
                    min_compression_rate,
                }
            }
        })
    }
}

/// Keeps the `k` coordinates of largest magnitude (ties: the lower index), zeroing the rest.
fn top_k(x: &mut [f64], k: usize) {
    if k >= x.len() {
        return;
    }
    let mut order: Vec<usize> = (0..x.len()).collect();
    // Larger magnitude first, then the lower index: a total order, so the kept set is unique.
    let by = |a: &usize, b: &usize| x[*b].abs().total_cmp(&x[*a].abs()).then(a.cmp(b));
    order.select_nth_unstable_by(k - 1, by);
    let mut keep = vec![false; x.len()];
    for &i in &order[..k] {
        keep[i] = true;
    }
    for (v, k) in x.iter_mut().zip(keep) {
        if !k {
            *v = 0.0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::rng::{StreamKind, stream};

    fn rng() -> Stream {
        stream(3, StreamKind::Algorithm, 0)
    }

    #[test]
    fn top_k_keeps_the_largest_magnitudes_and_breaks_ties_by_index() {
        let mut x = vec![0.5, -3.0, 2.0, -2.0, 0.1];
        Compression::TopK { fraction: 0.4 }.apply(&mut x, &mut rng());
        assert_eq!(x, vec![0.0, -3.0, 2.0, 0.0, 0.0]);
    }

    #[test]
    fn sizes_follow_the_encodings() {
        let v = 4;
        assert_eq!(
            Compression::TopK { fraction: 0.01 }.payload_bytes(1000, v),
            10 * 8
        );
        assert_eq!(
            Compression::TopK { fraction: 0.001 }.payload_bytes(10, v),
            8
        );
        assert_eq!(
            Compression::RandomK { fraction: 0.1 }.payload_bytes(1000, v),
            408
        );
        assert_eq!(Compression::Sign {}.payload_bytes(1001, v), 126 + 4);
        // 16 levels: a sign and 5 bits.
        assert_eq!(Compression::qsgd_bits(16), 6);
        assert_eq!(Compression::qsgd_bits(1), 2);
        assert_eq!(
            Compression::Qsgd { levels: 16 }.payload_bytes(1000, v),
            750 + 4
        );
    }

    /// Tensor by tensor, each tensor is compressed as a vector of its own (top-k keeps its own
    /// largest, sign and qsgd take its own norm and `τ` from its own size), and coordinates
    /// outside every tensor (running statistics) decode to zero; on the whole row, the large
    /// tensor takes every kept coordinate and sets the one scale.
    #[test]
    fn per_tensor_compression_treats_each_tensor_as_its_own_vector() {
        let x = vec![9.0, -8.0, 7.0, 6.0, 0.3, -0.2, 0.1, 0.4, 5.0, 5.0];
        let tensors = [0..4, 4..8];
        let run = |c: &Compression, per_tensor: bool| {
            let mut q = x.clone();
            if per_tensor {
                c.apply_to_tensors(&mut q, &tensors, &mut rng());
            } else {
                c.apply(&mut q[..8], &mut rng());
            }
            q
        };
        let top = Compression::TopK { fraction: 0.5 };
        assert_eq!(
            run(&top, true),
            vec![9.0, -8.0, 0.0, 0.0, 0.3, 0.0, 0.0, 0.4, 0.0, 0.0]
        );
        assert_eq!(
            &run(&top, false)[..8],
            &[9.0, -8.0, 7.0, 6.0, 0.0, 0.0, 0.0, 0.0]
        );
        let sign = run(&Compression::Sign {}, true);
        assert_eq!(&sign[..4], &[7.5, -7.5, 7.5, 7.5]);
        for (q, want) in sign[4..8].iter().zip([0.25, -0.25, 0.25, 0.25]) {
            assert!((q - want).abs() < 1e-12, "{sign:?}");
        }
        assert_eq!(&sign[8..], &[0.0, 0.0]);
        // qsgd: every value is a whole multiple of its own tensor's unit ‖x_t‖₂/(s·τ(d_t)).
        let levels = 4;
        let q = run(&Compression::Qsgd { levels }, true);
        for t in &tensors {
            let norm = x[t.clone()].iter().map(|v| v * v).sum::<f64>().sqrt();
            let unit = norm / (f64::from(levels) * Compression::qsgd_tau(t.len(), levels));
            for v in &q[t.clone()] {
                let l = v.abs() / unit;
                assert!((l - l.round()).abs() < 1e-9, "{q:?} in {t:?}");
            }
            assert!(q[t.clone()].iter().any(|v| *v != 0.0), "{q:?}");
        }
        assert_eq!(&q[8..], &[0.0, 0.0]);
    }

    #[test]
    fn the_checkpoint_encoding_keeps_powersgds_options() {
        #[derive(Serialize, Deserialize)]
        struct Held(#[serde(with = "stored")] Compression);
        for c in [
            Compression::PowerSgd {
                rank: 3,
                variant: PowerSgdVariant::Library,
                start_after: Some(7),
                min_compression_rate: Some(1.5),
            },
            Compression::PowerSgd {
                rank: 2,
                variant: PowerSgdVariant::Paper,
                start_after: None,
                min_compression_rate: None,
            },
        ] {
            let bytes = postcard::to_stdvec(&Held(c.clone())).unwrap();
            let back: Held = postcard::from_bytes(&bytes).unwrap();
            assert_eq!(back.0, c);
        }
    }

    #[test]
    fn sign_scales_by_the_mean_magnitude() {
        let mut x = vec![1.0, -3.0, 0.0, 2.0];
        Compression::Sign {}.apply(&mut x, &mut rng());
        assert_eq!(x, vec![1.5, -1.5, 1.5, 1.5]);
    }

    #[test]
    fn qsgd_levels_are_multiples_of_the_unit() {
        let mut x: Vec<f64> = (0..50).map(|i| (i as f64 - 20.0) / 7.0).collect();
        let norm = x.iter().map(|v| v * v).sum::<f64>().sqrt();
        let unit = norm / (4.0 * Compression::qsgd_tau(50, 4));
        let orig = x.clone();
        Compression::Qsgd { levels: 4 }.apply(&mut x, &mut rng());
        for (q, o) in x.iter().zip(&orig) {
            let l = q.abs() / unit;
            assert!(
                (l - l.round()).abs() < 1e-9 && l.round() <= 4.0,
                "{q} from {o}"
            );
            assert!(*q == 0.0 || q.signum() == o.signum());
        }
    }
}
