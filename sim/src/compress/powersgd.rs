//! PowerSGD: rank-`r` compression of the gradients' weight matrices for all-reduce.
//!
//! Vogels, Karimireddy & Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for
//! Distributed Optimization", NeurIPS 2019 (Algorithms 1 and 2). Two variants of its reference
//! code (`epfml/powersgd`), chosen by the `variant` option ([`Variant`]).
//!
//! **`variant = "paper"`** (the default), as the paper's code does it
//! (`paper-code/gradient_reducers.py`, class `RankKReducer`). Every weight matrix `M` (`a × b`,
//! as the row lays it out: [`Matrix`]) of every worker `w` is compressed with one step of power
//! iteration, warm started from the previous step's `Q`, with error feedback, and two all-reduces
//! per step:
//!
//! ```text
//! M_w ← g_w + e_w                               (the error of w's last step added back)
//! P_w ← M_w Q;          P ← all-reduce mean(P_w)   (first all-reduce: a·r values per matrix)
//! P̂ ← orthogonalize(P)                          (Gram–Schmidt on the columns)
//! Q_w ← M_w^T P̂;       Q ← all-reduce mean(Q_w)   (second all-reduce: b·r values per matrix)
//! e_w ← M_w − P̂ Q_wᵀ                            (what w's own message did not carry)
//! the update: P̂ Qᵀ = mean_w P̂ Q_wᵀ
//! ```
//!
//! `Q` starts as i.i.d. standard normal entries, the same on every worker (one shared stream).
//! Every other coordinate (biases, normalization weights, running statistics) is all-reduced
//! uncompressed in the first all-reduce, without error feedback, as in the reference code. A rank
//! above a matrix's smaller side is refused ([`PowerSgd::check`]).
//!
//! **`variant = "library"`**, as the library does it (`powersgd/powersgd.py`, classes
//! `PowerSGD` and `BasicPowerSGD`, with `num_iters_per_step = 1`): one all-reduce per step.
//!
//! ```text
//! steps 0 .. start_after − 1:  the plain all-reduce mean of the gradients, no error feedback
//! compressed step j = 0, 1, … (step start_after + j), M_w ← g_w + e_w:
//!   j even:  P̂ ← orthogonalize(P);  Q_w ← M_wᵀ P̂;  e_w ← M_w − P̂ Q_wᵀ
//!            Q ← all-reduce sum(Q_w)         (b·r' values per matrix)   update P̂ Qᵀ / n
//!   j odd:   Q̂ ← orthogonalize(Q);  P_w ← M_w Q̂;  e_w ← M_w − P_w Q̂ᵀ
//!            P ← all-reduce sum(P_w)         (a·r' values per matrix)   update P Q̂ᵀ / n
//! ```
//!
//! `P` starts as standard normal entries (`a × r'`), the same on every worker; `r' = min(r, a,
//! b)` (the library clamps the rank). A matrix is compressed only if its compression rate
//! `a·b / (½·r'·(a + b))` (the library's `avg_compressed_size`: half the two factors, as one is
//! sent per step) is above `min_compression_rate`; the others are all-reduced uncompressed with
//! the coordinates outside the matrices, in the same ring, without error feedback. Orthogonalize
//! is the library's: a single column divided by `max(‖·‖, 1e-16)`, several by a QR (here
//! Gram–Schmidt, the same span; the update does not depend on the columns' signs).
//!
//! **Orientation.** Both variants factor the matrix as the row lays it out, `P` on its rows. A
//! convolution (`cout × cin·k²`) and an embedding (`vocab × d`) are laid out as torch's weights
//! are, so `P` is torch's `P`; a dense layer is laid out `fan_in × fan_out`, the transpose of
//! torch's `out × in`, so for it dasim's `P` (`fan_in × r`) is torch's `Q` and the other way
//! round: the paper variant's first all-reduce carries `fan_in·r` per dense layer (torch:
//! `fan_out·r`), and the library variant's even steps `fan_out·r'` (torch: `fan_in·r'`). Over two
//! steps the bytes are the same; the rank clamp and the compression rate are symmetric.
//!
//! **Computed once.** The all-reduces are means (or sums), so every worker ends with the same
//! factors; this module computes them once, from every worker's `M_w`, when the step's last
//! all-reduce completes ([`PowerSgd::aggregate`]), and the all-reduces themselves are the rings
//! of [`crate::algorithms::ring`] with the factors' sizes ([`PowerSgd::factor_values`],
//! [`PowerSgd::exchange_values`]). Which all-reduce a step runs is a function of its step
//! number ([`PowerSgd::exchange`]) and its size of the shapes and options, decided at the
//! start: never of a value computed in the run. The arithmetic is in `f64` on the host; the
//! result is rounded to the store's precision once.

use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

use crate::clock::rng::{StreamKind, stream};
use crate::cluster::HostWork;
use crate::error::ConfigError;
use crate::store::{GradId, Matrix, MsgId, ReplicaStore};

/// Which of `epfml/powersgd`'s two codes PowerSGD follows (the `variant` option).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// The paper's code (`paper-code/gradient_reducers.py`, `RankKReducer`): two all-reduces per
    /// step, `P` then `Q`, from the first step.
    #[default]
    Paper,
    /// The library (`powersgd/powersgd.py`, `PowerSGD`): `start_after` uncompressed steps, then
    /// one all-reduce per step, of `Q` and of `P` in turn; matrices that compress too little
    /// skipped, the rank clamped.
    Library,
}

impl Variant {
    /// The option's value, as a scenario writes it.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Paper => "paper",
            Variant::Library => "library",
        }
    }
}

/// The library variant's `start_after` when not given: its `Config`'s
/// `start_compressing_after_num_steps = 100`.
pub const LIBRARY_START_AFTER: u64 = 100;

/// The library variant's `min_compression_rate` when not given: its `Config`'s
/// `min_compression_rate = 2`.
pub const LIBRARY_MIN_COMPRESSION_RATE: f64 = 2.0;

/// PowerSGD's options, resolved: every default filled in
/// ([`crate::compress::Compression::powersgd_options`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Options {
    /// The rank `r`.
    pub rank: usize,
    /// The variant.
    pub variant: Variant,
    /// Library: the steps all-reduced uncompressed before compressing (0 for the paper's).
    pub start_after: u64,
    /// Library: the compression rate a matrix must exceed to be compressed (unused by the
    /// paper's).
    pub min_compression_rate: f64,
}

/// Checks PowerSGD's options as the scenario gives them; `path` is the `compression` table's.
pub fn check_options(
    rank: usize,
    variant: Variant,
    start_after: Option<u64>,
    min_compression_rate: Option<f64>,
    path: &str,
) -> Result<(), ConfigError> {
    if rank == 0 {
        return Err(
            ConfigError::new(&format!("{path}.rank"), "rank must be at least 1")
                .hint("PowerSGD's paper uses rank 1, 2 or 4"),
        );
    }
    if variant == Variant::Paper {
        let given = [
            ("start_after", start_after.is_some()),
            ("min_compression_rate", min_compression_rate.is_some()),
        ];
        if let Some((key, _)) = given.iter().find(|(_, g)| *g) {
            return Err(ConfigError::new(
                &format!("{path}.{key}"),
                format!(
                    "{key} is an option of the library variant; the paper's code compresses every weight matrix from the first step"
                ),
            )
            .hint(format!(
                "add variant = \"library\" to follow powersgd/powersgd.py, or leave {key} out"
            )));
        }
    }
    if let Some(rate) = min_compression_rate
        && !(rate > 0.0 && rate.is_finite())
    {
        return Err(ConfigError::new(
            &format!("{path}.min_compression_rate"),
            format!("min_compression_rate must be a positive number, got {rate}"),
        )
        .hint(format!(
            "a matrix a × b is compressed when a·b / (½·r·(a + b)) exceeds it; the library's default is {LIBRARY_MIN_COMPRESSION_RATE}"
        )));
    }
    Ok(())
}

/// What one step of PowerSGD all-reduces ([`PowerSgd::exchange`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exchange {
    /// The paper's step: `P` with the uncompressed coordinates, then `Q`: two all-reduces.
    PThenQ,
    /// The library's warm-up: the whole gradient, uncompressed (one all-reduce).
    Dense,
    /// The library's even compressed steps: every `Q_w = M_wᵀ P̂` (`b·r'` values per compressed
    /// matrix) with the uncompressed coordinates (one all-reduce).
    Q,
    /// The library's odd compressed steps: every `P_w = M_w Q̂` (`a·r'` values per compressed
    /// matrix) with the uncompressed coordinates (one all-reduce).
    P,
}

/// The state of PowerSGD across steps: the warm-start factors and each worker's error-feedback
/// buffer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PowerSgd {
    options: Options,
    matrices: Vec<Matrix>,
    /// Per matrix, the rank it is compressed at: the paper's `r`; the library's `min(r, a, b)`,
    /// or 0 for a matrix all-reduced uncompressed.
    ranks: Vec<usize>,
    /// Per matrix, row-major, the warm start: the paper's `Q` (`b × r`); the library's last
    /// all-reduced factor, the next step's input (`P`, `a × r'`, before an even compressed step;
    /// `Q`, `b × r'`, before an odd one; empty for a matrix not compressed).
    factors: Vec<Vec<f64>>,
    /// Per worker: its error `e_w`, a message buffer of the store (none before its first
    /// compressed step).
    errors: Vec<Option<MsgId>>,
}

/// The stream id of the shared initial factors (beyond any worker's id).
const Q_STREAM: u64 = 1 << 40;

impl PowerSgd {
    /// The state for `workers` workers compressing `matrices` with `options`; the initial factor
    /// (the paper's `Q`, the library's `P`) is drawn from the run's `seed`.
    pub fn new(options: Options, matrices: Vec<Matrix>, workers: usize, seed: u64) -> Self {
        let mut rng = stream(seed, StreamKind::Algorithm, Q_STREAM);
        let ranks: Vec<usize> = matrices
            .iter()
            .map(|m| match options.variant {
                Variant::Paper => options.rank,
                Variant::Library => library_rank(&options, m),
            })
            .collect();
        let factors = matrices
            .iter()
            .zip(&ranks)
            .map(|(m, &r)| {
                // The paper starts from Q (b × r), the library from P (a × r').
                let side = match options.variant {
                    Variant::Paper => m.cols,
                    Variant::Library => m.rows,
                };
                (0..side * r)
                    .map(|_| StandardNormal.sample(&mut rng))
                    .collect()
            })
            .collect();
        PowerSgd {
            options,
            matrices,
            ranks,
            factors,
            errors: vec![None; workers],
        }
    }

    /// The paper's variant: refuses a rank larger than a matrix's smaller side (`path` is the
    /// `rank` field's). The library's clamps it, and takes any rank.
    pub fn check(options: &Options, matrices: &[Matrix], path: &str) -> Result<(), ConfigError> {
        let rank = options.rank;
        if options.variant == Variant::Library {
            return Ok(());
        }
        if let Some(m) = matrices.iter().find(|m| rank > m.rows.min(m.cols)) {
            let r = m.range();
            return Err(ConfigError::new(
                path,
                format!(
                    "rank {rank} is larger than the smaller side of the {} × {} weight matrix at parameters {}..{}",
                    m.rows, m.cols, r.start, r.end
                ),
            )
            .hint(format!(
                "a rank-r approximation of an a × b matrix needs r ≤ min(a, b); this model allows rank ≤ {}",
                matrices.iter().map(|m| m.rows.min(m.cols)).min().unwrap_or(0)
            )));
        }
        Ok(())
    }

    /// Values in the two all-reduces of one step, for a model of `params` coordinates: the
    /// first carries every `P` (`a·r` per matrix) and every coordinate outside the matrices,
    /// the second every `Q` (`b·r` per matrix).
    pub fn factor_values(rank: usize, matrices: &[Matrix], params: usize) -> (usize, usize) {
        let inside: usize = matrices.iter().map(|m| m.rows * m.cols).sum();
        let p: usize = matrices.iter().map(|m| m.rows * rank).sum();
        let q: usize = matrices.iter().map(|m| m.cols * rank).sum();
        (p + params - inside, q)
    }

    /// What step `step` (0-based, the workers' common step count) all-reduces: the paper's
    /// two factors; the library's whole gradient for its first `start_after` steps, then `Q` on
    /// even compressed steps and `P` on odd ones. A function of integers only.
    pub fn exchange(&self, step: u64) -> Exchange {
        let o = &self.options;
        match o.variant {
            Variant::Paper => Exchange::PThenQ,
            Variant::Library if step < o.start_after => Exchange::Dense,
            Variant::Library if (step - o.start_after).is_multiple_of(2) => Exchange::Q,
            Variant::Library => Exchange::P,
        }
    }

    /// One worker's host work ([`crate::cluster::host`]) in a step that exchanges `exchange`,
    /// in the order it is done: before its first all-reduce, between the paper's two, and after
    /// the last. Per compressed `a × b` matrix at rank `r`: the error feedback `M = g + e` (3
    /// values per coordinate) and the first product (`P = MQ`, or the library's one, `2abr`
    /// flops) with the orthogonalization of `P` (`2ar²`) before; the paper's `Q = MᵀP̂` (`2abr`)
    /// between; the decompression `P̂Q̂ᵀ` (`2abr`) and the new error `e = M − P̂Q̂ᵀ` (3 values
    /// per coordinate) after. The library's warm-up steps do none.
    pub fn host_work(&self, exchange: Exchange) -> [HostWork; 3] {
        if exchange == Exchange::Dense {
            return [HostWork::default(); 3];
        }
        let mut work = [HostWork::default(); 3];
        for (m, &r) in self.matrices.iter().zip(&self.ranks) {
            if r == 0 {
                continue;
            }
            let (a, b, r) = (m.rows as f64, m.cols as f64, r as f64);
            let coords = (m.rows * m.cols) as u64;
            let product = 2.0 * a * b * r;
            work[0] =
                work[0] + HostWork::touch(3 * coords) + HostWork::flops(product + 2.0 * a * r * r);
            if exchange == Exchange::PThenQ {
                work[1] = work[1] + HostWork::flops(product);
            }
            work[2] = work[2] + HostWork::touch(3 * coords) + HostWork::flops(product);
        }
        work
    }

    /// Values in the one all-reduce of a library step that exchanges `exchange`, for a model of
    /// `params` coordinates: every coordinate for [`Exchange::Dense`]; else the factor of every
    /// compressed matrix (`b·r'` for [`Exchange::Q`], `a·r'` for [`Exchange::P`]) and every
    /// coordinate outside the compressed matrices (the skipped matrices, the vectors). For
    /// [`Exchange::PThenQ`], the first of the paper's two ([`PowerSgd::factor_values`]).
    pub fn exchange_values(&self, exchange: Exchange, params: usize) -> usize {
        let compressed = || {
            self.matrices
                .iter()
                .zip(&self.ranks)
                .filter(|(_, r)| **r > 0)
        };
        let inside: usize = compressed().map(|(m, _)| m.rows * m.cols).sum();
        let rest = params - inside;
        match exchange {
            Exchange::Dense => params,
            Exchange::Q => rest + compressed().map(|(m, r)| m.cols * r).sum::<usize>(),
            Exchange::P => rest + compressed().map(|(m, r)| m.rows * r).sum::<usize>(),
            Exchange::PThenQ => {
                PowerSgd::factor_values(self.options.rank, &self.matrices, params).0
            }
        }
    }

    /// The options.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The rank asked for.
    pub fn rank(&self) -> usize {
        self.options.rank
    }

    /// Per matrix, the rank it is compressed at (the library's clamp `min(r, a, b)`; 0: the
    /// library all-reduces it uncompressed).
    pub fn ranks(&self) -> &[usize] {
        &self.ranks
    }

    /// The warm start of matrix `k` (in the order of the matrices given to [`PowerSgd::new`]),
    /// row-major: for the paper's variant the mean `Q` (`b × r`) of the last step, which the next
    /// step's `P = M Q` starts from (the initial draw before the first step); for the library's,
    /// the last all-reduced factor. For tests and inspection.
    pub fn warm_start(&self, k: usize) -> &[f64] {
        &self.factors[k]
    }

    /// Worker `w`'s error-feedback buffer, once it has one.
    pub fn error(&self, w: usize) -> Option<MsgId> {
        self.errors[w]
    }

    /// Frees every error buffer (a run's end is not a reason: the store goes with it; a crash
    /// that breaks the all-reduce for good is).
    pub fn release(&mut self, store: &mut dyn ReplicaStore) {
        for e in self.errors.iter_mut().filter_map(Option::take) {
            store.release_msg(e);
        }
    }

    /// The compressed mean of `grads` (worker `w`'s gradient at index `w`, all computed) at
    /// step `step` (the workers' common step count): a new gradient whose trainable part is the
    /// decoded update, every error buffer and the warm start advanced one step. The inputs are
    /// released. On a store that does not compute, and in the library's warm-up, the plain mean.
    pub fn aggregate(
        &mut self,
        store: &mut dyn ReplicaStore,
        grads: &[GradId],
        step: u64,
    ) -> GradId {
        if !store.computes() {
            return store.mean_gradient(grads);
        }
        match self.exchange(step) {
            Exchange::PThenQ => self.aggregate_paper(store, grads),
            Exchange::Dense => store.mean_gradient(grads),
            Exchange::Q => self.aggregate_library(store, grads, true),
            Exchange::P => self.aggregate_library(store, grads, false),
        }
    }

    /// The paper's step: `P`, then `Q`, from the warm-start `Q`.
    fn aggregate_paper(&mut self, store: &mut dyn ReplicaStore, grads: &[GradId]) -> GradId {
        let n = grads.len();
        let dim = store.num_params();
        let mut ms: Vec<Vec<f64>> = grads.iter().map(|&g| store.gradient_values(g)).collect();
        for (w, m) in ms.iter_mut().enumerate() {
            if let Some(e) = self.errors[w] {
                let e = store.msg_values(e);
                for mat in &self.matrices {
                    for c in mat.range() {
                        m[c] += e[c];
                    }
                }
            }
        }
        let mut out: Vec<f64> = (0..ms[0].len())
            .map(|c| ms.iter().map(|m| m[c]).sum::<f64>() / n as f64)
            .collect();
        let mut errors: Vec<Vec<f64>> = vec![vec![0.0; dim]; n];
        let r = self.options.rank;
        for (k, mat) in self.matrices.iter().enumerate() {
            let (a, b, start) = (mat.rows, mat.cols, mat.start);
            let q = &self.factors[k];
            // P = mean_w M_w Q  (a × r).
            let mut p = vec![0.0; a * r];
            for m in &ms {
                let m = &m[start..start + a * b];
                for i in 0..a {
                    for j in 0..b {
                        let v = m[i * b + j];
                        for t in 0..r {
                            p[i * r + t] += v * q[j * r + t];
                        }
                    }
                }
            }
            p.iter_mut().for_each(|v| *v /= n as f64);
            orthogonalize(&mut p, a, r);
            // Q_w = M_wᵀ P̂ (b × r); e_w = M_w − P̂ Q_wᵀ; Q = mean_w Q_w.
            let mut q_mean = vec![0.0; b * r];
            for (w, m) in ms.iter().enumerate() {
                let m = &m[start..start + a * b];
                let mut qw = vec![0.0; b * r];
                for i in 0..a {
                    for j in 0..b {
                        let v = m[i * b + j];
                        for t in 0..r {
                            qw[j * r + t] += v * p[i * r + t];
                        }
                    }
                }
                let e = &mut errors[w][start..start + a * b];
                for i in 0..a {
                    for j in 0..b {
                        let approx: f64 = (0..r).map(|t| p[i * r + t] * qw[j * r + t]).sum();
                        e[i * b + j] = m[i * b + j] - approx;
                    }
                }
                for (s, v) in q_mean.iter_mut().zip(&qw) {
                    *s += v;
                }
            }
            q_mean.iter_mut().for_each(|v| *v /= n as f64);
            let o = &mut out[start..start + a * b];
            for i in 0..a {
                for j in 0..b {
                    o[i * b + j] = (0..r).map(|t| p[i * r + t] * q_mean[j * r + t]).sum();
                }
            }
            self.factors[k] = q_mean;
        }
        for (w, e) in errors.iter().enumerate() {
            if let Some(old) = self.errors[w].replace(store.msg_from_values(e)) {
                store.release_msg(old);
            }
        }
        let mean = store.mean_gradient(grads);
        store.set_gradient_values(mean, &out);
        mean
    }
    /// One of the library's compressed steps (`BasicPowerSGD.aggregate`, one iteration): with
    /// `even`, `Q_w = M_wᵀ P̂` from the last `P`; else `P_w = M_w Q̂` from the last `Q`. The
    /// all-reduced factor is the sum over the workers (torch's `all_reduce`), kept as the next
    /// step's input; the update divides it by `n`. Matrices not compressed and the coordinates
    /// outside the matrices are the plain mean, without error feedback.
    fn aggregate_library(
        &mut self,
        store: &mut dyn ReplicaStore,
        grads: &[GradId],
        even: bool,
    ) -> GradId {
        let n = grads.len();
        let dim = store.num_params();
        let mut ms: Vec<Vec<f64>> = grads.iter().map(|&g| store.gradient_values(g)).collect();
        let compressed: Vec<usize> = (0..self.matrices.len())
            .filter(|&k| self.ranks[k] > 0)
            .collect();
        for (w, m) in ms.iter_mut().enumerate() {
            if let Some(e) = self.errors[w] {
                let e = store.msg_values(e);
                for &k in &compressed {
                    for c in self.matrices[k].range() {
                        m[c] += e[c];
                    }
                }
            }
        }
        let mut out: Vec<f64> = (0..ms[0].len())
            .map(|c| ms.iter().map(|m| m[c]).sum::<f64>() / n as f64)
            .collect();
        let mut errors: Vec<Vec<f64>> = vec![vec![0.0; dim]; n];
        for &k in &compressed {
            let mat = self.matrices[k];
            let (a, b, start, r) = (mat.rows, mat.cols, mat.start, self.ranks[k]);
            // `M[i][j]` of the matrix, or of its transpose on odd steps, so that both steps are
            // `out_w = Xᵀ in`, `e_w = X − in out_wᵀ` with `X` `rows_x × cols_x`.
            let (rows_x, cols_x) = if even { (a, b) } else { (b, a) };
            let at = |m: &[f64], i: usize, j: usize| {
                if even { m[i * b + j] } else { m[j * b + i] }
            };
            let mut input = std::mem::take(&mut self.factors[k]);
            orthogonalize_library(&mut input, rows_x, r);
            let mut sum = vec![0.0; cols_x * r];
            for (w, m) in ms.iter().enumerate() {
                let m = &m[start..start + a * b];
                let mut own = vec![0.0; cols_x * r];
                for i in 0..rows_x {
                    for j in 0..cols_x {
                        let v = at(m, i, j);
                        for t in 0..r {
                            own[j * r + t] += v * input[i * r + t];
                        }
                    }
                }
                let e = &mut errors[w][start..start + a * b];
                for i in 0..rows_x {
                    for j in 0..cols_x {
                        let approx: f64 = (0..r).map(|t| input[i * r + t] * own[j * r + t]).sum();
                        let c = if even { i * b + j } else { j * b + i };
                        e[c] = at(m, i, j) - approx;
                    }
                }
                for (s, v) in sum.iter_mut().zip(&own) {
                    *s += v;
                }
            }
            let o = &mut out[start..start + a * b];
            for i in 0..rows_x {
                for j in 0..cols_x {
                    let c = if even { i * b + j } else { j * b + i };
                    o[c] = (0..r)
                        .map(|t| input[i * r + t] * sum[j * r + t])
                        .sum::<f64>()
                        / n as f64;
                }
            }
            self.factors[k] = sum;
        }
        for (w, e) in errors.iter().enumerate() {
            if let Some(old) = self.errors[w].replace(store.msg_from_values(e)) {
                store.release_msg(old);
            }
        }
        let mean = store.mean_gradient(grads);
        store.set_gradient_values(mean, &out);
        mean
    }
}

/// The library's rank of `m`, `min(r, a, b)`, or 0 when its compression rate
/// `a·b / (½·r'·(a + b))` is not above `min_compression_rate` (`PowerSGD._should_compress`
/// with `avg_compressed_size`, the same arithmetic: decided once from the shape and the
/// options).
fn library_rank(options: &Options, m: &Matrix) -> usize {
    let r = options.rank.min(m.rows).min(m.cols);
    let compressed_size = 0.5 * r as f64 * (m.rows + m.cols) as f64;
    if (m.rows * m.cols) as f64 / compressed_size > options.min_compression_rate {
        r
    } else {
        0
    }
}

/// The library's orthogonalization (`powersgd/orthogonalization.py`) of the `r` columns of the
/// row-major `a × r` matrix `p`: one column is divided by `max(‖p‖, 1e-16)`; several are
/// replaced by the `Q` of their QR decomposition, here by modified Gram–Schmidt, which spans the
/// same columns (their signs may differ from a Householder QR's; the update `P̂ P̂ᵀ M` does not
/// depend on them), each column divided by `max(‖col‖, 1e-16)`.
pub fn orthogonalize_library(p: &mut [f64], a: usize, r: usize) {
    for i in 0..r {
        let norm = (0..a)
            .map(|k| p[k * r + i] * p[k * r + i])
            .sum::<f64>()
            .sqrt()
            .max(1e-16);
        for k in 0..a {
            p[k * r + i] /= norm;
        }
        for j in i + 1..r {
            let dot: f64 = (0..a).map(|k| p[k * r + i] * p[k * r + j]).sum();
            for k in 0..a {
                p[k * r + j] -= dot * p[k * r + i];
            }
        }
    }
}

/// Gram–Schmidt on the `r` columns of the row-major `a × r` matrix `p`, as PowerSGD's reference
/// code: each column is normalized (`/ (‖col‖ + 1e-8)`), then removed from the later ones.
pub fn orthogonalize(p: &mut [f64], a: usize, r: usize) {
    for i in 0..r {
        let norm = (0..a)
            .map(|k| p[k * r + i] * p[k * r + i])
            .sum::<f64>()
            .sqrt()
            + 1e-8;
        for k in 0..a {
            p[k * r + i] /= norm;
        }
        for j in i + 1..r {
            let dot: f64 = (0..a).map(|k| p[k * r + i] * p[k * r + j]).sum();
            for k in 0..a {
                p[k * r + j] -= dot * p[k * r + i];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orthogonalized_columns_are_orthonormal() {
        let (a, r) = (6, 3);
        let mut p: Vec<f64> = (0..a * r)
            .map(|i| ((i * 7 + 3) % 11) as f64 - 5.0)
            .collect();
        orthogonalize(&mut p, a, r);
        for i in 0..r {
            for j in 0..r {
                let dot: f64 = (0..a).map(|k| p[k * r + i] * p[k * r + j]).sum();
                let want = if i == j { 1.0 } else { 0.0 };
                // The reference code's `+ 1e-8` in the normalization leaves norms of 1 − O(1e-8).
                assert!((dot - want).abs() < 1e-7, "({i}, {j}): {dot}");
            }
        }
    }

    #[test]
    fn factor_sizes_count_the_matrices_and_the_rest() {
        let m = [
            Matrix {
                start: 0,
                rows: 784,
                cols: 64,
            },
            Matrix {
                start: 784 * 64 + 64,
                rows: 64,
                cols: 10,
            },
        ];
        let params = 784 * 64 + 64 + 640 + 10;
        assert_eq!(
            PowerSgd::factor_values(2, &m, params),
            (784 * 2 + 64 * 2 + 74, 64 * 2 + 10 * 2)
        );
        let paper = |rank| Options {
            rank,
            variant: Variant::Paper,
            start_after: 0,
            min_compression_rate: LIBRARY_MIN_COMPRESSION_RATE,
        };
        assert!(PowerSgd::check(&paper(10), &m, "rank").is_ok());
        let e = PowerSgd::check(&paper(11), &m, "rank").unwrap_err();
        assert!(e.message.contains("64 × 10"), "{}", e.message);
        // The library clamps instead.
        let library = Options {
            variant: Variant::Library,
            ..paper(11)
        };
        assert!(PowerSgd::check(&library, &m, "rank").is_ok());
    }

    #[test]
    fn host_work_counts_the_power_step_of_every_compressed_matrix() {
        let m = vec![Matrix {
            start: 0,
            rows: 40,
            cols: 30,
        }];
        let paper = Options {
            rank: 2,
            variant: Variant::Paper,
            start_after: 0,
            min_compression_rate: LIBRARY_MIN_COMPRESSION_RATE,
        };
        let p = PowerSgd::new(paper, m.clone(), 2, 1);
        let [before, between, after] = p.host_work(Exchange::PThenQ);
        let product = 2.0 * 40.0 * 30.0 * 2.0;
        assert_eq!(before.bytes, 3.0 * 1200.0 * 4.0);
        assert_eq!(before.flops, product + 2.0 * 40.0 * 4.0);
        assert_eq!((between.bytes, between.flops), (0.0, product));
        assert_eq!((after.bytes, after.flops), (3.0 * 1200.0 * 4.0, product));
        // The library's warm-up steps are dense all-reduces: no host work; a compressed step
        // has one product before its ring, none between.
        let lib = PowerSgd::new(library(2, 1.0), m, 2, 1);
        assert!(
            lib.host_work(Exchange::Dense)
                .iter()
                .all(HostWork::is_empty)
        );
        assert!(lib.host_work(Exchange::Q)[1].is_empty());
        assert_eq!(
            lib.host_work(Exchange::Q)[0].flops,
            product + 2.0 * 40.0 * 4.0
        );
    }

    fn library(rank: usize, min_compression_rate: f64) -> Options {
        Options {
            rank,
            variant: Variant::Library,
            start_after: 3,
            min_compression_rate,
        }
    }

    #[test]
    fn the_library_clamps_the_rank_and_skips_matrices_that_compress_too_little() {
        let m = |rows, cols| Matrix {
            start: 0,
            rows,
            cols,
        };
        // 64 × 10 at rank 2: 640 / (½·2·74) = 8.6 > 2.
        assert_eq!(library_rank(&library(2, 2.0), &m(64, 10)), 2);
        // 2 × 2 at rank 1: 4 / (½·1·4) = 2, not above 2 (the library's `>`).
        assert_eq!(library_rank(&library(1, 2.0), &m(2, 2)), 0);
        assert_eq!(library_rank(&library(1, 1.9), &m(2, 2)), 1);
        // Rank 11 of a 64 × 10 matrix is clamped to 10: 640 / (½·10·74) = 1.73.
        assert_eq!(library_rank(&library(11, 2.0), &m(64, 10)), 0);
        assert_eq!(library_rank(&library(11, 1.5), &m(64, 10)), 10);
    }

    #[test]
    fn library_steps_alternate_after_the_warm_up_with_their_factors_sizes() {
        let matrices = vec![
            Matrix {
                start: 0,
                rows: 2,
                cols: 5,
            },
            Matrix {
                start: 10,
                rows: 2,
                cols: 2,
            },
        ];
        let p = PowerSgd::new(library(1, 2.0), matrices, 3, 1);
        assert_eq!(p.ranks(), &[1, 0]);
        let kinds: Vec<Exchange> = (0..7).map(|s| p.exchange(s)).collect();
        use Exchange::*;
        assert_eq!(kinds, vec![Dense, Dense, Dense, Q, P, Q, P]);
        // 16 coordinates: the 2 × 5 matrix compressed, the 2 × 2 one and 2 more carried dense.
        assert_eq!(p.exchange_values(Dense, 16), 16);
        assert_eq!(p.exchange_values(Q, 16), 5 + 6);
        assert_eq!(p.exchange_values(P, 16), 2 + 6);
    }

    #[test]
    fn the_library_orthogonalization_normalizes_one_column_without_the_papers_epsilon() {
        let mut p = vec![3.0, 4.0];
        orthogonalize_library(&mut p, 2, 1);
        assert_eq!(p, vec![0.6, 0.8]);
        let mut z = vec![0.0, 0.0];
        orthogonalize_library(&mut z, 2, 1);
        assert_eq!(z, vec![0.0, 0.0]);
    }
}
