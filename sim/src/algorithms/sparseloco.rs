//! SparseLoCo: DiLoCo whose outer gradients are sparse and 2-bit, with error feedback in place
//! of the outer momentum.
//!
//! Sarfi, Thérien, Lidin & Belilovsky, "Communication Efficient LLM Pre-training with
//! SparseLoCo", arXiv:2508.15706 (2025); the compressor follows the reference code's
//! `ChunkingTransform` and `TopKCompressor` (tplr-ai/SparseLoCo, from Templar's `CCLoco`), see
//! [`crate::compress::chunked`].
//!
//! ```text
//! every worker r, every H inner steps (as DiLoCo, super::diloco):
//!     Δ_r = θ − θ_r                                 its outer gradient
//!     e_r ← β·e_r + Δ_r                             error feedback, decayed
//!     ĉ_r = Q(TopK_chunks(e_r))                     k values per chunk, quantized to `bits`
//!     e_r ← e_r − ĉ_r                               what was not sent stays
//! all-gather the ĉ_r (ring, n − 1 steps of one worker's message each)
//! θ ← θ − α·(1/n) Σ_r ĉ_r                           no outer momentum
//! ```
//!
//! It is [`Diloco`] with its outer step's average replaced ([`Diloco::compressed`]): the inner
//! steps, the rounds, faults, evaluation (the global model) and host work are DiLoCo's. The
//! outer step is SGD without momentum at rate `α` (`outer_lr`): the error feedback plays the
//! momentum's part, as the paper argues. Each worker's error buffer is a store row.
//!
//! **Defaults.** `chunk = 64` (blocks of up to 64 × 64 = 4,096 values of a matrix), `top_k = 32`
//! per chunk and `error_decay = 0.999` are the reference code's defaults; `bits = 2` is the
//! paper's quantization (the reference defaults to 256 bins, 8 bits), over `range_sigmas = 6`
//! standard deviations (the reference's `quantization_range`). `outer_lr = 1`, which the
//! reference's optimizer takes as an argument. **Where dasim differs**: the reference
//! accumulates `lr·Δ` in the error buffer and then steps by `lr` again; dasim applies `α` once,
//! as the paper's equations (the same at `α = 1`); the reference averages each coordinate over
//! the workers that sent it (`scatter_reduce(mean)`), dasim over all `n` workers, as the paper's
//! `(1/R) Σ_r`.
//!
//! **Bytes**: one worker's message is [`ChunkedTopK::payload_bytes`] (2-byte positions,
//! bit-packed values, the quantizer's mean and lookup table per tensor); the all-gather sends
//! `n − 1` of them per worker and outer step.

use serde::{Deserialize, Serialize};

use super::diloco::{Diloco, DilocoConfig, default_inner_steps};
use super::ring::ring_support;
use crate::algorithm::World;
use crate::algorithms::{AlgorithmSpec, Runnable, Setup};
use crate::compress::chunked::ChunkedTopK;
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport};
use crate::store::optim::outer;

fn default_outer_lr() -> f64 {
    1.0
}

fn default_chunk() -> usize {
    64
}

fn default_top_k() -> usize {
    32
}

fn default_error_decay() -> f64 {
    0.999
}

fn default_bits() -> Option<u32> {
    Some(2)
}

fn default_range_sigmas() -> f64 {
    6.0
}

/// Options of SparseLoCo.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SparselocoConfig {
    /// Inner steps per worker between two outer steps, `H ≥ 1` (default 500, DiLoCo's).
    #[serde(default = "default_inner_steps")]
    pub inner_steps: u32,
    /// The outer learning rate `α` (default 1).
    #[serde(default = "default_outer_lr")]
    pub outer_lr: f64,
    /// The target chunk side (default 64: chunks of up to 64 × 64 values of a matrix, of up to
    /// 64 of a vector).
    #[serde(default = "default_chunk")]
    pub chunk: usize,
    /// Values kept per chunk (default 32; at most `chunk²`).
    #[serde(default = "default_top_k")]
    pub top_k: usize,
    /// The error feedback's decay `β`, in `[0, 1]` (default 0.999).
    #[serde(default = "default_error_decay")]
    pub error_decay: f64,
    /// Bits per value sent: 1, 2, 4 or 8 (default 2); 0 sends values at the network's dtype.
    #[serde(default = "default_bits", with = "bits")]
    pub bits: Option<u32>,
    /// The quantizer's range in standard deviations (default 6).
    #[serde(default = "default_range_sigmas")]
    pub range_sigmas: f64,
}

/// `bits` as written in a scenario: a number, 0 for none.
pub(super) mod bits {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bits: &Option<u32>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(bits.unwrap_or(0))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
        let b = u32::deserialize(d)?;
        Ok((b > 0).then_some(b))
    }
}

impl Default for SparselocoConfig {
    fn default() -> Self {
        SparselocoConfig {
            inner_steps: default_inner_steps(),
            outer_lr: default_outer_lr(),
            chunk: default_chunk(),
            top_k: default_top_k(),
            error_decay: default_error_decay(),
            bits: default_bits(),
            range_sigmas: default_range_sigmas(),
        }
    }
}

impl SparselocoConfig {
    /// The compressor these options set.
    pub fn compressor(&self) -> ChunkedTopK {
        ChunkedTopK {
            chunk: self.chunk,
            top_k: Some(self.top_k),
            bits: self.bits,
            range_sigmas: self.range_sigmas,
        }
    }

    /// DiLoCo's options for the rest: its inner steps, SGD without momentum at `outer_lr`.
    fn diloco(&self) -> DilocoConfig {
        DilocoConfig {
            inner_steps: self.inner_steps,
            outer_lr: self.outer_lr,
            outer_momentum: 0.0,
            nesterov: false,
        }
    }
}

impl AlgorithmSpec for SparselocoConfig {
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        let path = setup.path;
        let field = |key: &str| format!("{path}.{key}");
        if self.inner_steps == 0 {
            return Err(
                ConfigError::new(&field("inner_steps"), "inner_steps must be at least 1")
                    .hint("inner_steps is H, the inner optimizer steps between outer steps"),
            );
        }
        outer::check_rate(
            path,
            "outer_lr",
            self.outer_lr,
            "SparseLoCo's outer step is θ ← θ − outer_lr·Δ; 1 applies the sparse average as is",
        )?;
        check_compression(path, &self.compressor(), self.error_decay)
    }

    fn extra_rows(&self) -> usize {
        3
    }

    fn buffers_per_worker(&self) -> usize {
        1
    }

    fn uses_topology(&self) -> bool {
        false
    }

    fn fault_support(&self, _kind: &'static str, fault: FaultKind) -> FaultSupport {
        ring_support(fault)
    }

    fn build(&self, _kind: &'static str, world: &World<'_>) -> crate::Result<Box<dyn Runnable>> {
        Ok(Box::new(Diloco::compressed(
            &self.diloco(),
            world.workers(),
            self.compressor(),
            self.error_decay,
        )))
    }
}

/// Checks a compressor's options and an error feedback's decay, as SparseLoCo and MuLoCo name
/// them (`chunk`, `top_k`, `bits`, `range_sigmas`, `error_decay`), at their field under `path`.
pub(super) fn check_compression(
    path: &str,
    c: &ChunkedTopK,
    error_decay: f64,
) -> Result<(), ConfigError> {
    let field = |key: &str| format!("{path}.{key}");
    if !(1..=256).contains(&c.chunk) {
        return Err(ConfigError::new(
            &field("chunk"),
            format!("chunk = {} is not in 1..=256", c.chunk),
        )
        .hint(
            "chunk is the side of a chunk: 64 cuts a matrix into 64 × 64 blocks; a chunk \
             holds at most 256 × 256 values, so that a position fits in 2 bytes",
        ));
    }
    if let Some(k) = c.top_k
        && (k == 0 || k > c.chunk * c.chunk)
    {
        return Err(ConfigError::new(
            &field("top_k"),
            format!(
                "top_k = {k} is not in 1..={}: a chunk holds at most chunk² values",
                c.chunk * c.chunk
            ),
        )
        .hint("SparseLoCo's reference keeps 32 of every 64 × 64 chunk (0.8% of a matrix)"));
    }
    if !(0.0..=1.0).contains(&error_decay) {
        return Err(ConfigError::new(
            &field("error_decay"),
            format!("error_decay = {error_decay} is not in [0, 1]"),
        )
        .hint("the error buffer's decay β in e ← β·e + Δ (SparseLoCo's 0.999, MuLoCo's 1)"));
    }
    if let Some(b) = c.bits
        && ![1, 2, 4, 8].contains(&b)
    {
        return Err(ConfigError::new(
            &field("bits"),
            format!("bits = {b} is not 1, 2, 4 or 8 (or 0 for no quantization)"),
        )
        .hint("both papers send 2-bit values"));
    }
    if !(c.range_sigmas.is_finite() && c.range_sigmas > 0.0) {
        return Err(ConfigError::new(
            &field("range_sigmas"),
            format!("range_sigmas = {} must be positive", c.range_sigmas),
        )
        .hint("the quantizer's range in standard deviations (the reference's 6)"));
    }
    Ok(())
}
