//! A decoder-only transformer language model (GPT; Radford et al., 2019) on the flat layout.
//!
//! ```text
//! tokens x_1 … x_T (a window of T + 1 tokens: inputs x_1 … x_T, targets x_2 … x_{T+1})
//! h ← wte[x_t] + wpe[t]                                  token and learned position embeddings
//! for each of the `layers` blocks (pre-norm):
//!     h ← h + proj(CausalSelfAttention(LN₁(h)))          `heads` heads, position t sees 1..=t
//!     h ← h + fc₂(GELU(fc₁(LN₂(h))))                     d → d_ff → d
//! logits_t ← LN_f(h_t) · wteᵀ                            the output layer is tied to wte
//! loss = mean over the B·T positions of −log softmax(logits_t)[x_{t+1}]
//! ```
//!
//! The output layer is **tied** to the token embedding (as GPT-2 and nanoGPT): the logits are
//! the final features times `wteᵀ`, no separate `d × vocab` matrix and no output bias, so `wte`
//! receives gradient from both ends. GELU is the exact one (`x·Φ(x)`, PyTorch's default), where
//! GPT-2 used the tanh approximation. Attention has no dropout and no other regularization:
//! dasim's runs compare optimizers, not recipes.
//!
//! **Layout** (one row of `P` numbers, each weight and bias its own block): `wte [vocab, d]`,
//! `wpe [context, d]`, then per block `LN₁ (gain, bias)`, `qkv [d, 3d] + [3d]`, `proj [d, d] +
//! [d]`, `LN₂`, `fc₁ [d, d_ff] + [d_ff]`, `fc₂ [d_ff, d] + [d]`, and last `LN_f`. Linear weights
//! are `[fan_in, fan_out]` row-major, as everywhere in the layer kit.
//!
//! **Initialization** (GPT-2's, as nanoGPT): every weight matrix and both embeddings
//! `N(0, 0.02²)`, the two residual projections of every block (`proj`, `fc₂`)
//! `N(0, (0.02/√(2·layers))²)`, biases 0, layer-norm gains 1.
//!
//! **Batched replicas.** `R` replicas run as one pass: inputs `[R, B, T + 1]` (token ids as
//! floats, exact below 2²⁴), each replica's weights its own slice of `[R, …]`; the products are
//! batched matrix products over `R` (and `R·B·heads` for attention). The outputs are `[R, B·T,
//! vocab]`, one row of logits per position, which the store's cross-entropy averages over the
//! `B·T` positions: the loss is in nats per token.
//!
//! **On the CPU** (`flex`) the model runs its own program (`transformer::cpu`): one replica's
//! forward and backward pass written on row-major activations, layer norm, the causal softmax,
//! GELU and the embeddings fused around gemm's matrix products. burn's pass above is the
//! reference it is tested against, and the pass on a GPU.

use std::ops::Range;
use std::sync::Arc;

use burn::tensor::{Int, Tensor, activation};
use rand::Rng;
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};

use dasim_sim::ConfigError;
use dasim_sim::clock::rng::Stream;

use crate::convex::Objective;
use crate::data::{self, DataConfig, Dataset, DatasetKind, Split};
use crate::layers::attention::CausalSelfAttention;
use crate::layers::embedding::Embedding;
use crate::layers::layer_norm::LayerNorm;
use crate::layers::linear::Linear;
use crate::layers::{CpuNet, ParamRows};
use crate::spec::{Load, Model, ModelSpec, NeuralNet};

pub(crate) mod cpu;

fn default_layers() -> usize {
    2
}

fn default_d_model() -> usize {
    64
}

fn default_heads() -> usize {
    4
}

fn default_context() -> usize {
    64
}

/// `[model] kind = "transformer"`: a decoder-only transformer language model, its output layer
/// tied to the token embedding. Needs text (`[data] dataset = "text"`); the vocabulary comes
/// from the tokenizer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransformerConfig {
    /// Transformer blocks.
    #[serde(default = "default_layers")]
    pub layers: usize,
    /// Width of the residual stream.
    #[serde(default = "default_d_model")]
    pub d_model: usize,
    /// Attention heads; they divide `d_model`.
    #[serde(default = "default_heads")]
    pub heads: usize,
    /// Hidden width of each block's MLP (default `4 · d_model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub d_ff: Option<usize>,
    /// The longest window of tokens the model reads (its position embeddings).
    #[serde(default = "default_context")]
    pub context: usize,
}

impl Default for TransformerConfig {
    fn default() -> Self {
        TransformerConfig {
            layers: default_layers(),
            d_model: default_d_model(),
            heads: default_heads(),
            d_ff: None,
            context: default_context(),
        }
    }
}

impl TransformerConfig {
    /// The shape over a vocabulary of `vocab` tokens (`d_ff` resolved).
    pub fn shape(&self, vocab: usize) -> TransformerShape {
        TransformerShape {
            vocab,
            context: self.context,
            d_model: self.d_model,
            heads: self.heads,
            d_ff: self.d_ff.unwrap_or(4 * self.d_model),
            layers: self.layers,
        }
    }
}

impl ModelSpec for TransformerConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        self.shape(1).check().map_err(|(key, e)| {
            let err = ConfigError::new(&format!("model.{key}"), e);
            if key == "heads" {
                err.hint("GPT-2 small: d_model = 768 with 12 heads of 64")
            } else {
                err
            }
        })
    }

    /// The text, in windows of `[data] context` tokens (default: the model's), or an error: at
    /// `model.kind` for data that is not text, at `data.context` for a window longer than the
    /// model's context.
    fn load(&self, load: &Load<'_>) -> crate::Result<Option<Split>> {
        let data = load.data;
        if data.kind() != DatasetKind::Text {
            return Err(ConfigError::new(
                "model.kind",
                format!(
                    "a transformer is a language model and needs text; `{}` is not text",
                    data.kind()
                ),
            )
            .hint("[data] dataset = \"text\" with path = a UTF-8 file (dasim ships models/data/tinyshakespeare.txt.gz)")
            .into());
        }
        if let Some(context) = data.context
            && context > self.context
        {
            return Err(ConfigError::new(
                "data.context",
                format!(
                    "windows of {context} tokens are longer than the model's context of {}",
                    self.context
                ),
            )
            .hint("raise [model] context (its position embeddings), or shorten data.context")
            .into());
        }
        let data = DataConfig {
            context: Some(data.context.unwrap_or(self.context)),
            ..data.clone()
        };
        data::load(&data, load.base_dir, load.seed).map(Some)
    }

    fn build(
        &self,
        _load: &Load<'_>,
        train: &Dataset,
    ) -> crate::Result<(Model, Option<Arc<Objective>>)> {
        let net = Transformer::new(self.shape(train.outputs()));
        Ok((Model::net(net), None))
    }

    /// Its next-token accuracy.
    fn accuracy(&self) -> Option<bool> {
        Some(true)
    }
}

/// GPT-2's initial standard deviation of weights and embeddings.
const INIT_STD: f64 = 0.02;

/// One pre-norm transformer block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Block {
    ln1: LayerNorm,
    attn: CausalSelfAttention,
    ln2: LayerNorm,
    fc1: Linear,
    fc2: Linear,
}

impl Block {
    /// `[R, B, T, d]` → `[R, B, T, d]`.
    fn forward(&self, params: &ParamRows, x: Tensor<4>) -> Tensor<4> {
        let [r, b, t, d] = x.dims();
        let flat = |x: Tensor<4>| x.reshape([r, b * t, d]);
        let a = self.attn.forward(
            params,
            self.ln1
                .forward(params, flat(x.clone()))
                .reshape([r, b, t, d]),
        );
        let x = x + a;
        let m = self
            .fc1
            .forward(params, self.ln2.forward(params, flat(x.clone())));
        let m = self.fc2.forward(params, activation::gelu(m));
        x + m.reshape([r, b, t, d])
    }

    fn linears(&self) -> [Linear; 4] {
        [self.attn.qkv, self.attn.proj, self.fc1, self.fc2]
    }

    fn blocks(&self) -> Vec<Range<usize>> {
        let mut v = Vec::new();
        v.extend(self.ln1.blocks());
        v.extend(self.attn.qkv.blocks());
        v.extend(self.attn.proj.blocks());
        v.extend(self.ln2.blocks());
        v.extend(self.fc1.blocks());
        v.extend(self.fc2.blocks());
        v
    }
}

/// The shape of a transformer: what `[model] kind = "transformer"` sets, and the vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransformerShape {
    /// Tokens of the vocabulary (from the tokenizer).
    pub vocab: usize,
    /// The longest window the model reads (its position embeddings).
    pub context: usize,
    /// Width `d` of the residual stream.
    pub d_model: usize,
    /// Attention heads; they divide `d_model`.
    pub heads: usize,
    /// Hidden width of each block's MLP.
    pub d_ff: usize,
    /// Blocks.
    pub layers: usize,
}

impl TransformerShape {
    /// An error naming the key (`heads`, `d_model`, …) that makes the shape impossible.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        for (key, v) in [
            ("layers", self.layers),
            ("d_model", self.d_model),
            ("heads", self.heads),
            ("d_ff", self.d_ff),
            ("context", self.context),
        ] {
            if v == 0 {
                return Err((key, format!("{key} must be at least 1")));
            }
        }
        if !self.d_model.is_multiple_of(self.heads) {
            return Err((
                "heads",
                format!(
                    "{} heads do not divide d_model = {}: every head takes d_model / heads features",
                    self.heads, self.d_model
                ),
            ));
        }
        Ok(())
    }
}

/// A GPT over the flat layout (see the module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct Transformer {
    shape: TransformerShape,
    wte: Embedding,
    wpe: Embedding,
    blocks: Vec<Block>,
    ln_f: LayerNorm,
    params: usize,
}

impl Transformer {
    /// The model of `shape`.
    ///
    /// # Panics
    /// If [`TransformerShape::check`] fails.
    pub fn new(shape: TransformerShape) -> Self {
        if let Err((key, e)) = shape.check() {
            panic!("transformer.{key}: {e}");
        }
        let d = shape.d_model;
        let wte = Embedding {
            weight: 0,
            rows: shape.vocab,
            dim: d,
        };
        let wpe = Embedding {
            weight: wte.len(),
            rows: shape.context,
            dim: d,
        };
        let mut at = wpe.weight + wpe.len();
        let blocks: Vec<Block> = (0..shape.layers)
            .map(|_| {
                let ln1 = LayerNorm { gain: at, dim: d };
                at += ln1.len();
                let qkv = Linear {
                    weight: at,
                    fan_in: d,
                    fan_out: 3 * d,
                };
                at += qkv.len();
                let proj = Linear {
                    weight: at,
                    fan_in: d,
                    fan_out: d,
                };
                at += proj.len();
                let ln2 = LayerNorm { gain: at, dim: d };
                at += ln2.len();
                let fc1 = Linear {
                    weight: at,
                    fan_in: d,
                    fan_out: shape.d_ff,
                };
                at += fc1.len();
                let fc2 = Linear {
                    weight: at,
                    fan_in: shape.d_ff,
                    fan_out: d,
                };
                at += fc2.len();
                Block {
                    ln1,
                    attn: CausalSelfAttention {
                        qkv,
                        proj,
                        heads: shape.heads,
                    },
                    ln2,
                    fc1,
                    fc2,
                }
            })
            .collect();
        let ln_f = LayerNorm { gain: at, dim: d };
        Transformer {
            shape,
            wte,
            wpe,
            blocks,
            ln_f,
            params: at + ln_f.len(),
        }
    }

    /// The shape.
    pub fn shape(&self) -> TransformerShape {
        self.shape
    }

    /// FLOPs of the tied output layer on one window.
    fn head_flops(&self) -> u64 {
        2 * (self.shape.context * self.shape.d_model * self.shape.vocab) as u64
    }

    /// Logits `[R, B·T, vocab]` of `R` models on windows `[R, B, T + 1]` of token ids (as
    /// floats), replica `r` on its own windows; `T ≤ context`. The last token of each window is
    /// only a target.
    pub fn forward(&self, params: Tensor<2>, x: Tensor<3>) -> Tensor<3> {
        self.logits(&ParamRows::Whole(Box::new(params)), x)
    }

    /// [`Transformer::forward`] on rows given as their [`Transformer::blocks`].
    pub fn forward_blocks(&self, blocks: Vec<Tensor<2>>, x: Tensor<3>) -> Tensor<3> {
        let rows = ParamRows::from_blocks(self.blocks(), blocks);
        self.logits(&rows, x)
    }

    fn logits(&self, params: &ParamRows, x: Tensor<3>) -> Tensor<3> {
        let [r, b, window] = x.dims();
        let t = window - 1;
        assert!(
            (1..=self.shape.context).contains(&t),
            "windows of {window} tokens for a context of {}",
            self.shape.context
        );
        let d = self.shape.d_model;
        let tokens: Tensor<2, Int> = x.slice_dim(2, 0..t).int().reshape([r, b * t]);
        let tok = self.wte.lookup(params, tokens).reshape([r, b, t, d]);
        let pos = self
            .wpe
            .table(params)
            .slice_dim(1, 0..t)
            .reshape([r, 1, t, d]);
        let mut h = tok + pos;
        for block in &self.blocks {
            h = block.forward(params, h);
        }
        let h = self.ln_f.forward(params, h.reshape([r, b * t, d]));
        h.matmul(self.wte.table(params).swap_dims(1, 2))
    }
}

impl NeuralNet for Transformer {
    fn name(&self) -> &'static str {
        "transformer"
    }

    /// Parameters per replica.
    fn num_params(&self) -> usize {
        self.params
    }

    /// The weight matrices in row order, for low-rank compressors: the two embeddings
    /// (`vocab × d`, `context × d`) and every block's four linear weights.
    fn matrices(&self) -> Vec<dasim_sim::store::Matrix> {
        let mut m = vec![self.wte.matrix(), self.wpe.matrix()];
        for b in &self.blocks {
            m.extend(b.linears().iter().map(Linear::matrix));
        }
        m
    }

    /// Every block's four linear weights; not the embeddings (the token embedding is also the
    /// tied output layer), which Muon's reference leaves to AdamW.
    fn hidden_matrices(&self) -> Vec<dasim_sim::store::Hidden> {
        self.blocks
            .iter()
            .flat_map(|b| {
                b.linears()
                    .map(|l| dasim_sim::store::Hidden::dense(l.matrix()))
            })
            .collect()
    }

    /// In row order: the two embeddings, each block's normalizations and linear layers (weight,
    /// then bias), the final normalization.
    fn tensors(&self) -> Vec<std::ops::Range<usize>> {
        let mut t = vec![self.wte.block(), self.wpe.block()];
        for b in &self.blocks {
            t.extend(b.ln1.blocks());
            t.extend(b.attn.qkv.blocks().into_iter().chain(b.attn.proj.blocks()));
            t.extend(b.ln2.blocks());
            t.extend(b.fc1.blocks().into_iter().chain(b.fc2.blocks()));
        }
        t.extend(self.ln_f.blocks());
        t
    }

    /// FLOPs (two per multiply-add) of one forward pass on one window of `context` positions:
    /// every block's projections and attention, and the tied output layer. The embedding
    /// lookups and the normalizations are not counted (no multiply-adds of note).
    fn forward_flops(&self) -> u64 {
        let t = self.shape.context;
        let blocks: u64 = self
            .blocks
            .iter()
            .map(|b| b.attn.flops(t) + t as u64 * (b.fc1.flops() + b.fc2.flops()))
            .sum();
        blocks + self.head_flops()
    }

    /// The layers in forward order with their FLOPs per window: the embeddings (which own the
    /// tied output layer's FLOPs, as they own its weight), then each block.
    fn layer_starts(&self) -> Vec<(usize, u64)> {
        let t = self.shape.context as u64;
        let mut l = vec![(self.wte.weight, self.head_flops())];
        l.extend(self.blocks.iter().map(|b| {
            (
                b.ln1.gain,
                b.attn.flops(self.shape.context) + t * (b.fc1.flops() + b.fc2.flops()),
            )
        }));
        l
    }

    /// Floats one window keeps through a forward and backward pass (an estimate): per block
    /// and position the residual, two normalized copies, `q, k, v`, the attention output and
    /// the MLP's two hidden vectors, plus the attention probabilities (`heads × T` per
    /// position, twice: scores and softmax); and the logits and their softmax.
    fn activations_per_sample(&self) -> u64 {
        let s = self.shape;
        let per_position = s.layers * (8 * s.d_model + 2 * s.d_ff + 2 * s.heads * s.context)
            + 2 * s.d_model
            + 2 * s.vocab;
        (s.context * per_position) as u64
    }

    /// Initial parameters (GPT-2's, see the module doc), drawn in layout order.
    fn init(&self, rng: &mut Stream) -> Vec<f32> {
        let mut p = vec![0.0f32; self.params];
        let mut normal = |p: &mut [f32], std: f64| {
            for v in p {
                let z: f64 = rng.sample(StandardNormal);
                *v = (z * std) as f32;
            }
        };
        normal(&mut p[self.wte.block()], INIT_STD);
        normal(&mut p[self.wpe.block()], INIT_STD);
        let residual = INIT_STD / (2.0 * self.shape.layers as f64).sqrt();
        for b in &self.blocks {
            b.ln1.init(&mut p);
            b.ln2.init(&mut p);
            for (l, std) in [
                (b.attn.qkv, INIT_STD),
                (b.attn.proj, residual),
                (b.fc1, INIT_STD),
                (b.fc2, residual),
            ] {
                let [w, _bias] = l.blocks();
                normal(&mut p[w], std);
            }
        }
        self.ln_f.init(&mut p);
        p
    }

    /// The blocks the forward pass reads, in layout order (they tile `0..P`).
    fn blocks(&self) -> Vec<Range<usize>> {
        let mut v = vec![self.wte.block(), self.wpe.block()];
        for b in &self.blocks {
            v.extend(b.blocks());
        }
        v.extend(self.ln_f.blocks());
        v
    }

    fn forward_blocks(
        &self,
        blocks: Vec<Tensor<2>>,
        x: Tensor<3>,
        _train: bool,
    ) -> (Tensor<3>, Option<Tensor<2>>) {
        (Transformer::forward_blocks(self, blocks, x), None)
    }

    fn forward(
        &self,
        params: Tensor<2>,
        x: Tensor<3>,
        _train: bool,
    ) -> (Tensor<3>, Option<Tensor<2>>) {
        (Transformer::forward(self, params, x), None)
    }

    fn is_language_model(&self) -> bool {
        true
    }

    fn cpu_program(&self) -> Option<Arc<dyn CpuNet>> {
        Some(Arc::new(cpu::TransformerCpu::new(self)))
    }
}
