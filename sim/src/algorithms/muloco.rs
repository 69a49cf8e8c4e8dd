//! MuLoCo: DiLoCo with Muon as its inner optimizer and its outer gradients quantized with error
//! feedback.
//!
//! Thérien, Huang, Rish & Belilovsky, "MuLoCo: Muon is a practical inner optimizer for DiLoCo",
//! arXiv:2505.23725 (2025).
//!
//! ```text
//! every worker r, every H inner steps of Muon (as DiLoCo, super::diloco):
//!     Δ_r = θ − θ_r                                 its outer gradient
//!     e_r ← β·e_r + Δ_r                             error feedback (β = 1: the paper's e ← e + Δ)
//!     ĉ_r = Q(e_r)                                  every value, `bits` bits, per tensor
//!     e_r ← e_r − ĉ_r                               the quantization error stays
//! all-gather the ĉ_r (ring, n − 1 steps of one worker's message each)
//! Δ = (1/n) Σ_r ĉ_r
//! m ← μ·m + Δ;  θ ← θ − η·(Δ + μ·m)                 DiLoCo's Nesterov outer step
//! ```
//!
//! It is [`Diloco`] with its outer average replaced ([`Diloco::compressed`]), as SparseLoCo
//! ([`super::sparseloco`]) is, but it keeps DiLoCo's outer Nesterov momentum and quantizes every
//! value rather than a top-k (`top_k` adds the paper's Top-k ablation: that many values of
//! every chunk of `chunk × chunk`). The quantizer is SparseLoCo's statistical one
//! ([`crate::compress::chunked::quantize`]): the paper names its quantization without its
//! code, and its authors' released compressor (tplr-ai/SparseLoCo, from the same group) is
//! that one. The inner optimizer must be Muon (`kind = "muon"`, the entry's or the scenario's):
//! a compressed DiLoCo with another inner optimizer is the paper's baseline, and is
//! `kind = "sparseloco"` with outer momentum 0 or DiLoCo uncompressed.
//!
//! **Bytes**: every worker's message is `⌈P_t·bits/8⌉` bytes per tensor of `P_t` values plus
//! the quantizer's mean and `2^bits` lookup values (`f32`), and the all-gather sends `n − 1` of
//! them per worker and outer step. A ring all-reduce of fp32 values sends `2(n−1)/n · 4P`; at
//! 2 bits the all-gather sends `(n−1)·P/4`: 8× less with 4 workers, 4× less with 8 (the
//! paper's "8× less" compares 2 bits with bf16, message for message).

use serde::{Deserialize, Serialize};

use super::diloco::{Diloco, DilocoConfig, default_inner_steps};
use super::ring::ring_support;
use super::sparseloco::check_compression;
use crate::algorithm::World;
use crate::algorithms::{AlgorithmSpec, Runnable, Setup};
use crate::compress::chunked::ChunkedTopK;
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport};
use crate::store::{OptimizerConfig, OptimizerKind};

fn default_outer_lr() -> f64 {
    0.7
}

fn default_outer_momentum() -> f64 {
    0.9
}

fn default_true() -> bool {
    true
}

fn default_bits() -> Option<u32> {
    Some(2)
}

fn default_error_decay() -> f64 {
    1.0
}

fn default_range_sigmas() -> f64 {
    6.0
}

fn default_chunk() -> usize {
    64
}

/// Options of MuLoCo.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MulocoConfig {
    /// Inner steps per worker between two outer steps, `H ≥ 1` (default 500, DiLoCo's).
    #[serde(default = "default_inner_steps")]
    pub inner_steps: u32,
    /// The outer learning rate `η` (default 0.7, DiLoCo's).
    #[serde(default = "default_outer_lr")]
    pub outer_lr: f64,
    /// The outer momentum `μ` (default 0.9, DiLoCo's).
    #[serde(default = "default_outer_momentum")]
    pub outer_momentum: f64,
    /// Nesterov momentum in the outer step (default true).
    #[serde(default = "default_true")]
    pub nesterov: bool,
    /// Bits per value of the outer gradient (1, 2, 4 or 8; default 2, the paper's), or 0 for
    /// none (then, without `top_k`, MuLoCo is DiLoCo with Muon and its all-reduce).
    #[serde(default = "default_bits", with = "super::sparseloco::bits")]
    pub bits: Option<u32>,
    /// The error feedback's decay `β` in `e ← β·e + Δ` (default 1, the paper's accumulator).
    #[serde(default = "default_error_decay")]
    pub error_decay: f64,
    /// The quantizer's range in standard deviations (default 6).
    #[serde(default = "default_range_sigmas")]
    pub range_sigmas: f64,
    /// Values kept per chunk for the paper's Top-k ablation (default none: every value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<usize>,
    /// A chunk's side for `top_k` (default 64).
    #[serde(default = "default_chunk")]
    pub chunk: usize,
}

impl Default for MulocoConfig {
    fn default() -> Self {
        MulocoConfig {
            inner_steps: default_inner_steps(),
            outer_lr: default_outer_lr(),
            outer_momentum: default_outer_momentum(),
            nesterov: true,
            bits: default_bits(),
            error_decay: default_error_decay(),
            range_sigmas: default_range_sigmas(),
            top_k: None,
            chunk: default_chunk(),
        }
    }
}

impl MulocoConfig {
    /// The compressor these options set.
    pub fn compressor(&self) -> ChunkedTopK {
        ChunkedTopK {
            chunk: self.chunk,
            top_k: self.top_k,
            bits: self.bits,
            range_sigmas: self.range_sigmas,
        }
    }

    /// DiLoCo's options: the inner steps and the outer Nesterov step.
    pub fn diloco(&self) -> DilocoConfig {
        DilocoConfig {
            inner_steps: self.inner_steps,
            outer_lr: self.outer_lr,
            outer_momentum: self.outer_momentum,
            nesterov: self.nesterov,
        }
    }
}

impl AlgorithmSpec for MulocoConfig {
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        self.diloco().check(setup.path)?;
        check_compression(setup.path, &self.compressor(), self.error_decay)
    }

    fn optimizer_support(&self, optimizer: &OptimizerConfig) -> Result<(), (&'static str, String)> {
        if optimizer.kind == OptimizerKind::Muon {
            return Ok(());
        }
        Err((
            "kind",
            format!(
                "runs Muon as its inner optimizer, not {:?}",
                optimizer.kind.name()
            ),
        ))
    }

    fn optimizer_hint(&self) -> &'static str {
        "give this entry its own [algorithms.optimizer] with kind = \"muon\" (or compare with kind = \"diloco\", which takes any inner optimizer)"
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
        if self.bits.is_none() && self.top_k.is_none() {
            // Nothing compressed, nothing to feed back: DiLoCo, with its all-reduce.
            return Ok(Box::new(Diloco::new(&self.diloco(), world.workers())));
        }
        Ok(Box::new(Diloco::compressed(
            &self.diloco(),
            world.workers(),
            self.compressor(),
            self.error_decay,
        )))
    }
}
