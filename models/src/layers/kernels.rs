//! The convolution kernels of the CPU path: a direct correlation over flat planes, its weight
//! gradient, and the im2col/col2im pair for strided convolutions.
//!
//! **Flat planes.** Every map is stored channel by channel, each channel a plane of `plane`
//! floats holding the image's rows one after the other at a row stride `row` that leaves room
//! for zero padding (the layout of [`super::cpu::Geom`]). A `k × k` stride-1 correlation is then
//! one formula over a flat output index `q = y·row + x`:
//!
//! `out[co][q] = bias[co] + Σ_ci Σ_{ky,kx} w[co][ci][ky][kx] · in[ci][q + ky·row + kx]`
//!
//! with `in` read from the padded plane's top-left corner. Positions with `x ≥` the output width
//! are computed too and fall on the padding columns of the output (the callers mask them); in
//! exchange the inner loop has no boundary test, and reads each input row contiguously, so the
//! vector lanes run along `q` and every filter tap is an unaligned load at a fixed shift.
//!
//! **Register tiles.** [`conv_forward`] keeps an `MR × NB` tile of accumulators (`MR` output
//! channels by `NB` vectors of positions: 8 × 3 with AVX-512, 4 × 3 with AVX2) and, per input
//! channel and tap, loads `NB` input vectors and broadcasts `MR` weights from a packed copy of
//! the filters ([`Packed`]). [`conv_weight_grad`] keeps `MG × NT` vector accumulators
//! (output channels by taps of one kernel row, or by input channels for `k = 1`), each a dot
//! product along `q`, summed across the lanes in a fixed order at the end of a sample; samples
//! are added in order. Nothing depends on the number of threads: a call is single-threaded, and
//! parallel callers split work by replica or by sample, never inside a sum.
//!
//! **Bounds.** Vectors run past the last position by less than one vector (`len` rounded up to
//! the lanes), so a plane must have that much slack after its last position read or written;
//! [`Packed`]'s callers in [`super::cpu`] size planes accordingly, and every entry point checks
//! the extent it touches against its slices before the unchecked loops run.

use super::par::tasks;
use super::simd::{Isa, Vf32, dispatch, isa};

/// A correlation over flat planes: kernel side `k` (1, 3 or 5), input row stride `row`, and
/// `len` output positions per plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Flat {
    /// Kernel side.
    pub k: usize,
    /// Row stride of the input plane (the step of `ky`).
    pub row: usize,
    /// Output positions per plane.
    pub len: usize,
}

/// Where a tensor's planes are in a slice: sample `n`, channel `c` starts at
/// `offset + n·sample + c·plane`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Planes {
    /// Index of position 0 of sample 0, channel 0.
    pub offset: usize,
    /// Floats between two channels of a sample.
    pub plane: usize,
    /// Floats between two samples.
    pub sample: usize,
}

impl Planes {
    /// Index of position 0 of sample `n`, channel `c`.
    pub fn at(&self, n: usize, c: usize) -> usize {
        self.offset + n * self.sample + c * self.plane
    }

    /// The same planes, starting `by` floats later in each plane.
    pub fn shifted(self, by: usize) -> Self {
        Planes {
            offset: self.offset + by,
            ..self
        }
    }
}

/// A buffer that several threads write at once, each its own positions (the planes of its
/// samples, or its output channels): a raw pointer and the length checked against, so that no
/// two `&mut` slices of one buffer ever exist.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Out {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: an `Out` is made from a `&mut [f32]` that its maker does not touch while the `Out` is
// in use, and every user writes positions no other user writes (each function taking one says
// which).
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

impl Out {
    /// The buffer `data`, to be written through this handle only until the call returns.
    pub fn new(data: &mut [f32]) -> Out {
        Out {
            ptr: data.as_mut_ptr(),
            len: data.len(),
        }
    }

    /// Floats in the buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The first float.
    pub fn ptr(&self) -> *mut f32 {
        self.ptr
    }
}

/// The widest vector of any instruction set (the slack a plane needs after its last position).
pub(crate) const MAX_LANES: usize = 16;

fn lanes() -> usize {
    match isa() {
        Isa::Avx512 => 16,
        Isa::Avx2 | Isa::Portable => 8,
    }
}

/// `len` rounded up to whole vectors of this CPU's lanes: the positions a kernel touches.
pub(crate) fn touched(len: usize) -> usize {
    len.next_multiple_of(lanes())
}

/// Output channels per register tile of [`conv_forward`] on this CPU.
fn forward_mr() -> usize {
    match isa() {
        Isa::Avx512 => 8,
        Isa::Avx2 | Isa::Portable => 4,
    }
}

/// Filters packed for [`conv_forward`]: tiles of `mr` output channels, each `[cin][k²][mr]`
/// (zero past the last output channel), so that the kernel broadcasts a tile's weights from
/// consecutive addresses.
#[derive(Clone, Debug, Default)]
pub(crate) struct Packed {
    data: Vec<f32>,
    mr: usize,
    cout: usize,
    cin: usize,
    kk: usize,
}

impl Packed {
    /// Packs filters `w` in PyTorch's `[cout][cin][k][k]` order.
    #[cfg(test)]
    pub fn forward(w: &[f32], cout: usize, cin: usize, k: usize) -> Self {
        let mut p = Packed::default();
        p.pack(w, cout, cin, k, false);
        p
    }

    /// Packs `w` (PyTorch's `[cout][cin][k][k]`) into this buffer, reusing its memory: as it
    /// is, or `turned` for the input gradient of a stride-1 convolution, a correlation from
    /// `cout` to `cin` channels with every filter turned by 180°,
    /// `w'[ci][co][ky][kx] = w[co][ci][k−1−ky][k−1−kx]`.
    pub fn pack(&mut self, w: &[f32], cout: usize, cin: usize, k: usize, turned: bool) {
        let kk = k * k;
        assert_eq!(w.len(), cout * cin * kk, "filters of the wrong size");
        let mr = forward_mr();
        // The correlation this packing computes: `(to, from)` channels.
        let (to, from) = if turned { (cin, cout) } else { (cout, cin) };
        let tiles = to.div_ceil(mr);
        self.data.clear();
        self.data.resize(tiles * from * kk * mr, 0.0);
        for o in 0..to {
            let (tile, m) = (o / mr, o % mr);
            for i in 0..from {
                for t in 0..kk {
                    let v = if turned {
                        w[(i * cin + o) * kk + (kk - 1 - t)]
                    } else {
                        w[(o * cin + i) * kk + t]
                    };
                    self.data[((tile * from + i) * kk + t) * mr + m] = v;
                }
            }
        }
        self.mr = mr;
        self.cout = to;
        self.cin = from;
        self.kk = kk;
    }
}

/// One call of [`conv_forward`].
pub(crate) struct ConvCall<'a> {
    /// The input planes (each read from its top-left corner).
    pub x: &'a [f32],
    /// Where they are.
    pub xp: Planes,
    /// The packed filters.
    pub w: &'a Packed,
    /// A bias per output channel, or none.
    pub bias: Option<&'a [f32]>,
    /// The geometry.
    pub flat: Flat,
    /// Samples.
    pub samples: usize,
}

/// Checks that `reach` floats from the start of every plane of `samples × channels` planes at
/// `p` are inside a slice of `len` floats, and for a written tensor (`writes`) that they do not
/// run into the next plane.
fn check_extent(
    what: &str,
    p: Planes,
    samples: usize,
    channels: usize,
    reach: usize,
    len: usize,
    writes: bool,
) {
    if samples == 0 || channels == 0 {
        return;
    }
    let last = p.at(samples - 1, channels - 1) + reach;
    assert!(
        last <= len,
        "{what}: the kernel would touch index {last} of a slice of {len}"
    );
    assert!(
        !writes || channels == 1 || p.plane >= reach,
        "{what}: planes of {} floats overlap a reach of {reach}",
        p.plane
    );
}

/// `y[n][co][q] = bias[co] + Σ_ci Σ_taps w · x` for every sample `n`, output channel `co` and
/// position `q < flat.len` (see the module doc); `y` is written at `yp`, past `len` up to the
/// next whole vector.
pub(crate) fn conv_forward(call: &ConvCall<'_>, y: &mut [f32], yp: Planes) {
    let f = call.flat;
    let reach = touched(f.len);
    check_extent(
        "conv input",
        call.xp,
        call.samples,
        call.w.cin,
        reach + (f.k - 1) * (f.row + 1),
        call.x.len(),
        false,
    );
    check_extent(
        "conv output",
        yp,
        call.samples,
        call.w.cout,
        reach,
        y.len(),
        true,
    );
    assert_eq!(
        call.w.kk,
        f.k * f.k,
        "filters packed for another kernel size"
    );
    if let Some(b) = call.bias {
        assert_eq!(b.len(), call.w.cout, "one bias per output channel");
    }
    // One task per sample and tile of output channels: each writes its own planes, and each
    // output value is the same sum whichever thread computes it.
    let tiles = call.w.cout.div_ceil(call.w.mr);
    let out = Out::new(y);
    tasks(call.samples * tiles, |task| {
        forward_dispatch(call, task / tiles, task % tiles, out, yp)
    });
}

dispatch! {
    fn forward_dispatch<V>(call: &ConvCall<'_>, n: usize, tile: usize, y: Out, yp: Planes) {
        match (V::LANES, call.flat.k) {
            (16, 1) => forward_tile::<V, 8, 3, 1>(call, n, tile, y, yp),
            (16, 3) => forward_tile::<V, 8, 3, 3>(call, n, tile, y, yp),
            (16, 5) => forward_tile::<V, 8, 3, 5>(call, n, tile, y, yp),
            (_, 1) => forward_tile::<V, 4, 3, 1>(call, n, tile, y, yp),
            (_, 3) => forward_tile::<V, 4, 3, 3>(call, n, tile, y, yp),
            (_, 5) => forward_tile::<V, 4, 3, 5>(call, n, tile, y, yp),
            (_, k) => panic!("no kernel for {k}×{k} filters"),
        }
    }
}

/// Sample `n`'s output channels of tile `tile`, every position.
#[inline(always)]
fn forward_tile<V: Vf32, const MR: usize, const NB: usize, const K: usize>(
    call: &ConvCall<'_>,
    n: usize,
    tile: usize,
    y: Out,
    yp: Planes,
) {
    let w = call.w;
    assert_eq!(w.mr, MR, "filters packed for another instruction set");
    let l = V::LANES;
    let f = call.flat;
    let tile_len = w.cin * K * K * MR;
    let x = call.x.as_ptr();
    let yptr = y.ptr();
    let co0 = tile * MR;
    let valid = MR.min(w.cout - co0);
    let mut bias = [0.0f32; MR];
    if let Some(b) = call.bias {
        bias[..valid].copy_from_slice(&b[co0..co0 + valid]);
    }
    let wt = w.data[tile * tile_len..(tile + 1) * tile_len].as_ptr();
    // SAFETY: `conv_forward` checked that every read (positions up to `len` rounded up
    // to a vector, plus the filter's reach) and every write of valid output channels
    // is inside the slices.
    unsafe {
        let xn = x.add(call.xp.at(n, 0));
        let mut yrows = [yptr; MR];
        for (m, y) in yrows.iter_mut().enumerate() {
            *y = yptr.add(yp.at(n, co0 + m.min(valid - 1)));
        }
        let mut q = 0;
        while q + NB * l <= f.len.next_multiple_of(l) {
            tile_kernel::<V, MR, NB, K>(
                xn.add(q),
                call.xp.plane,
                f.row,
                w.cin,
                wt,
                &yrows,
                q,
                valid,
                &bias,
            );
            q += NB * l;
        }
        while q < f.len {
            tile_kernel::<V, MR, 1, K>(
                xn.add(q),
                call.xp.plane,
                f.row,
                w.cin,
                wt,
                &yrows,
                q,
                valid,
                &bias,
            );
            q += l;
        }
    }
}

/// One register tile: `MR` output channels × `NB` vectors of positions from `q`. The loops
/// index the register arrays by their constant bounds, which the compiler unrolls.
#[inline(always)]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
unsafe fn tile_kernel<V: Vf32, const MR: usize, const NB: usize, const K: usize>(
    x: *const f32,
    x_plane: usize,
    row: usize,
    cin: usize,
    w: *const f32,
    y: &[*mut f32; MR],
    q: usize,
    valid: usize,
    bias: &[f32; MR],
) {
    let l = V::LANES;
    // No closures in here: a closure is a function of its own, compiled without the
    // instruction set of the kernel, so its intrinsics would not be inlined.
    unsafe {
        let mut acc = [[V::zero(); NB]; MR];
        for m in 0..MR {
            for v in 0..NB {
                acc[m][v] = V::splat(bias[m]);
            }
        }
        for ci in 0..cin {
            let xc = x.add(ci * x_plane);
            let wc = w.add(ci * K * K * MR);
            for ky in 0..K {
                let xr = xc.add(ky * row);
                for kx in 0..K {
                    let mut xin = [V::zero(); NB];
                    for v in 0..NB {
                        xin[v] = V::load(xr.add(kx + v * l));
                    }
                    let wt = wc.add((ky * K + kx) * MR);
                    for m in 0..MR {
                        let b = V::bcast(wt.add(m));
                        for v in 0..NB {
                            acc[m][v] = V::fma(b, xin[v], acc[m][v]);
                        }
                    }
                }
            }
        }
        for m in 0..valid {
            for v in 0..NB {
                acc[m][v].store(y[m].add(q + v * l));
            }
        }
    }
}

/// One call of [`conv_weight_grad`].
pub(crate) struct WeightGradCall<'a> {
    /// The gradient of the output, `cout` planes per sample, read at positions `0..len`:
    /// zero at every position that is not an output (the padding columns).
    pub dy: &'a [f32],
    /// Where it is.
    pub dyp: Planes,
    /// The input of the forward pass (read as [`conv_forward`] reads it).
    pub x: &'a [f32],
    /// Where it is.
    pub xp: Planes,
    /// The geometry of the forward pass.
    pub flat: Flat,
    /// Input channels.
    pub cin: usize,
    /// Output channels.
    pub cout: usize,
    /// Samples.
    pub samples: usize,
}

/// Output channels per task of [`conv_weight_grad`] (the register tile of its kernel, as
/// `weight_grad_dispatch` picks it) for `k × k` filters on this CPU.
fn grad_tile(k: usize) -> usize {
    match (isa(), k) {
        (Isa::Avx512, _) => 4,
        (_, 1) => 3,
        (_, 3) => 4,
        _ => 2,
    }
}

/// The filters' gradient `gw[co][ci][ky][kx] = Σ_n Σ_q dy[n][co][q] · x[n][ci][q + ky·row +
/// kx]`, in PyTorch's order, written to `gw` (`cout·cin·k²`). The sums of a chunk of samples
/// ([`grad_chunk`]) are taken in vector lanes along `q`, reduced across the lanes in a fixed
/// order, and added to `gw` chunk after chunk.
pub(crate) fn conv_weight_grad(call: &WeightGradCall<'_>, gw: &mut [f32]) {
    let f = call.flat;
    let reach = touched(f.len);
    check_extent(
        "weight-gradient dy",
        call.dyp,
        call.samples,
        call.cout,
        reach,
        call.dy.len(),
        false,
    );
    check_extent(
        "weight-gradient input",
        call.xp,
        call.samples,
        call.cin,
        reach + (f.k - 1) * (f.row + 1),
        call.x.len(),
        false,
    );
    assert_eq!(gw.len(), call.cout * call.cin * f.k * f.k);
    gw.fill(0.0);
    if call.samples == 0 {
        return;
    }
    // One task per tile of output channels: each writes its own rows of `gw`, summing over
    // the samples in the same order whichever thread runs it.
    let out = Out::new(gw);
    if let Some(nv) = outer_vectors(call.cout, f.k) {
        let tile = nv * lanes();
        tasks(call.cout.div_ceil(tile), |t| {
            weight_grad_outer_dispatch(call, t * tile, nv, out)
        });
        return;
    }
    let mg = grad_tile(f.k);
    tasks(call.cout.div_ceil(mg), |tile| {
        weight_grad_dispatch(call, tile * mg, out)
    });
}

/// Vectors of output channels per task of the broadcast form of the weight gradient
/// ([`weight_grad_outer`]), where it is the faster form on this CPU; `None` where the dot
/// products along the positions are. Measured one thread at a time on ResNet-20's and LeNet's
/// shapes (best of six rounds, GFLOP/s, AVX-512 host): 3×3 with 16 output channels, dot 94–98
/// against broadcast 67–73 (the transposition and one broadcast per multiply-add weigh more
/// with one vector of channels); with 32 and 64, 91 and 70 against 115–120 (two vectors); the
/// stride-2 convolutions' 1×1 correlations of 144 and 288 columns, 23–31 against 81–87; LeNet's
/// 5×5 with 16, 93 against 119. With AVX2 the broadcast form with one vector is the faster for
/// 3×3 (65 against 43–50) and 1×1 (26–33 against 16–22), the dot form for 5×5 (40 against 33).
/// Fewer output channels than a vector's lanes keep the dot products (LeNet's first layer).
fn outer_vectors(cout: usize, k: usize) -> Option<usize> {
    let l = lanes();
    if cout < l {
        return None;
    }
    match (isa(), k) {
        (Isa::Avx512, 3) => (cout > l).then_some(2),
        (Isa::Avx512, 1) => Some(if cout > l { 2 } else { 1 }),
        (Isa::Avx512, 5) => Some(1),
        (_, 3) | (_, 1) => Some(1),
        _ => None,
    }
}

dispatch! {
    fn weight_grad_outer_dispatch<V>(call: &WeightGradCall<'_>, co0: usize, nv: usize, gw: Out) {
        match (V::LANES, call.flat.k, nv) {
            (16, 3, 2) => weight_grad_outer::<V, 2, 1, 3>(call, co0, gw),
            (16, 5, 1) => weight_grad_outer::<V, 1, 1, 5>(call, co0, gw),
            (16, 1, 1) => weight_grad_outer::<V, 1, 8, 1>(call, co0, gw),
            (16, 1, 2) => weight_grad_outer::<V, 2, 8, 1>(call, co0, gw),
            (_, 3, 1) => weight_grad_outer::<V, 1, 1, 3>(call, co0, gw),
            (_, 1, 1) => weight_grad_outer::<V, 1, 8, 1>(call, co0, gw),
            (l, k, v) => panic!("no broadcast weight-gradient tile for {l} lanes, {k}×{k}, {v} vectors"),
        }
    }
}

/// Bytes of a chunk's transposed output gradient in [`weight_grad_outer`] at most: it stays in
/// the second-level cache while every group of input channels reads it.
const OUTER_CHUNK_BYTES: usize = 256 << 10;

thread_local! {
    /// A task's transposed output gradient, reused from call to call.
    static TRANSPOSED: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The weight gradient in its broadcast form: the positions are the sum's outer loop, and a
/// register tile keeps `CG` input channels × `K²` taps × `NV` vectors of output channels (from
/// `co0`). Each step loads `NV` vectors of the output gradient at one position (transposed
/// first, a chunk of samples at a time, so that a position's channels are contiguous) and
/// broadcasts each tap's input value: no reduction across lanes, and `NV` loads for
/// `CG·K²·NV` multiply-adds besides the broadcasts. Sums run over the positions of each sample
/// of a chunk in order, and chunks are added to `gw` in order.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
fn weight_grad_outer<V: Vf32, const NV: usize, const CG: usize, const K: usize>(
    call: &WeightGradCall<'_>,
    co0: usize,
    gw: Out,
) {
    let f = call.flat;
    assert_eq!(f.k, K);
    let l = V::LANES;
    let width = NV * l;
    let (cin, kk, len) = (call.cin, K * K, f.len);
    let valid = width.min(call.cout - co0);
    assert!((co0 + valid) * cin * kk <= gw.len());
    let chunk = (OUTER_CHUNK_BYTES / (len * width * 4).max(1)).clamp(1, call.samples);
    // The buffer is taken out of the thread-local for the loops: a closure would be compiled
    // without the kernel's instruction set (see `tile_kernel`).
    let mut t = TRANSPOSED.with(|t| std::mem::take(&mut *t.borrow_mut()));
    if t.len() < chunk * len * width {
        t.resize(chunk * len * width, 0.0);
    }
    {
        let dyt = &mut t[..chunk * len * width];
        for n0 in (0..call.samples).step_by(chunk) {
            let ns = chunk.min(call.samples - n0);
            // The tile's output gradient, position-major: `dyt[(s·len + q)·width + c]`; lanes
            // past the last channel are zero.
            for s in 0..ns {
                let rows = &mut dyt[s * len * width..(s + 1) * len * width];
                for c in 0..width {
                    if c < valid {
                        let at = call.dyp.at(n0 + s, co0 + c);
                        let src = &call.dy[at..at + len];
                        for (q, &v) in src.iter().enumerate() {
                            rows[q * width + c] = v;
                        }
                    } else {
                        for q in 0..len {
                            rows[q * width + c] = 0.0;
                        }
                    }
                }
            }
            for ci0 in (0..cin).step_by(CG) {
                let inputs = CG.min(cin - ci0);
                // SAFETY: `conv_weight_grad` checked the extents of both inputs; the positions
                // run to `len` exactly, and `dyt` holds `ns · len · width` floats. This task
                // alone writes rows `co0..co0 + valid` of `gw` (checked above).
                unsafe {
                    let mut acc = [[[[V::zero(); NV]; K]; K]; CG];
                    for s in 0..ns {
                        let mut rows = [[call.x.as_ptr(); K]; CG];
                        for g in 0..CG {
                            let base = call.xp.at(n0 + s, ci0 + g.min(inputs - 1));
                            for ky in 0..K {
                                rows[g][ky] = call.x.as_ptr().add(base + ky * f.row);
                            }
                        }
                        let d0 = dyt.as_ptr().add(s * len * width);
                        let mut d = [V::zero(); NV];
                        for q in 0..len {
                            for v in 0..NV {
                                d[v] = V::load(d0.add(q * width + v * l));
                            }
                            for g in 0..CG {
                                for ky in 0..K {
                                    for kx in 0..K {
                                        let b = V::bcast(rows[g][ky].add(q + kx));
                                        for v in 0..NV {
                                            acc[g][ky][kx][v] = V::fma(b, d[v], acc[g][ky][kx][v]);
                                        }
                                    }
                                }
                            }
                        }
                    }
                    let mut lanes = [0.0f32; MAX_LANES];
                    for g in 0..inputs {
                        for ky in 0..K {
                            for kx in 0..K {
                                for v in 0..NV {
                                    acc[g][ky][kx][v].store(lanes.as_mut_ptr());
                                    for (j, &value) in lanes.iter().enumerate().take(l) {
                                        let c = v * l + j;
                                        if c < valid {
                                            let at = ((co0 + c) * cin + ci0 + g) * kk + ky * K + kx;
                                            *gw.ptr().add(at) += value;
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    TRANSPOSED.with(|cell| *cell.borrow_mut() = t);
}

dispatch! {
    fn weight_grad_dispatch<V>(call: &WeightGradCall<'_>, co0: usize, gw: Out) {
        match (V::LANES, call.flat.k) {
            (16, 1) => weight_grad_pointwise::<V, 4, 6>(call, co0, gw),
            (16, 3) => weight_grad_taps::<V, 4, 3>(call, co0, gw),
            (16, 5) => weight_grad_taps::<V, 4, 5>(call, co0, gw),
            (_, 1) => weight_grad_pointwise::<V, 3, 4>(call, co0, gw),
            (_, 3) => weight_grad_taps::<V, 4, 3>(call, co0, gw),
            (_, 5) => weight_grad_taps::<V, 2, 5>(call, co0, gw),
            (_, k) => panic!("no kernel for {k}×{k} filters"),
        }
    }
}

/// Bytes of planes a weight-gradient tile reads per chunk of samples at most: the chunk's
/// output-gradient planes (one per output channel of the tile) and input plane stay in the
/// first-level cache while the tile runs over every input channel and kernel row, so that its
/// loads, more than one per two multiply-adds, are served there.
const GRAD_CHUNK_BYTES: usize = 24 << 10;

/// Samples whose sums a weight-gradient tile keeps in its registers before reducing them
/// across the lanes (the reduction's cost is paid once per chunk, not per sample: small maps
/// have few positions): as many as fit [`GRAD_CHUNK_BYTES`] with `streams` planes of `len`
/// positions each, from 1 to 8. It depends on the shapes only, so the order of the sums does
/// too.
fn grad_chunk(streams: usize, len: usize) -> usize {
    (GRAD_CHUNK_BYTES / (streams * len * 4).max(1)).clamp(1, 8)
}

/// `k > 1`: a tile is `MG` output channels (from `co0`) × the `K` taps of one kernel row of
/// one input channel, over a chunk of samples. Writes the tile's rows of `gw`.
#[inline(always)]
fn weight_grad_taps<V: Vf32, const MG: usize, const K: usize>(
    call: &WeightGradCall<'_>,
    co0: usize,
    gw: Out,
) {
    let f = call.flat;
    assert_eq!(f.k, K);
    let (cin, kk) = (call.cin, K * K);
    let valid = MG.min(call.cout - co0);
    assert!((co0 + valid) * cin * kk <= gw.len());
    let (dy, x) = (call.dy.as_ptr(), call.x.as_ptr());
    let chunk = grad_chunk(MG + 1, f.len + (K - 1) * f.row);
    for n0 in (0..call.samples).step_by(chunk) {
        let ns = chunk.min(call.samples - n0);
        // SAFETY: `conv_weight_grad` checked the extents of both inputs, and this task alone
        // writes rows `co0..co0 + valid` of `gw` (checked above).
        unsafe {
            let mut dys = [dy; MG];
            for (m, d) in dys.iter_mut().enumerate() {
                *d = dy.add(call.dyp.at(n0, co0 + m.min(valid - 1)));
            }
            for ci in 0..cin {
                for ky in 0..K {
                    let xr = x.add(call.xp.at(n0, ci) + ky * f.row);
                    let mut xs = [xr; K];
                    for (kx, p) in xs.iter_mut().enumerate() {
                        *p = xr.add(kx);
                    }
                    let sums =
                        dot_tile::<V, MG, K>(&dys, call.dyp.sample, &xs, call.xp.sample, ns, f.len);
                    for (m, s) in sums.iter().enumerate().take(valid) {
                        let at = gw.ptr().add(((co0 + m) * cin + ci) * kk + ky * K);
                        for (t, v) in s.iter().enumerate() {
                            *at.add(t) += v;
                        }
                    }
                }
            }
        }
    }
}

/// `k = 1`: a tile is `MG` output channels (from `co0`) × `NT` input channels, over a chunk of
/// samples. Writes the tile's rows of `gw`.
#[inline(always)]
fn weight_grad_pointwise<V: Vf32, const MG: usize, const NT: usize>(
    call: &WeightGradCall<'_>,
    co0: usize,
    gw: Out,
) {
    let cin = call.cin;
    let valid = MG.min(call.cout - co0);
    assert!((co0 + valid) * cin <= gw.len());
    let (dy, x) = (call.dy.as_ptr(), call.x.as_ptr());
    let chunk = grad_chunk(MG + NT, call.flat.len);
    for n0 in (0..call.samples).step_by(chunk) {
        let ns = chunk.min(call.samples - n0);
        for ci0 in (0..cin).step_by(NT) {
            let inputs = NT.min(cin - ci0);
            // SAFETY: `conv_weight_grad` checked the extents of both inputs, and this task
            // alone writes rows `co0..co0 + valid` of `gw` (checked above).
            unsafe {
                let mut dys = [dy; MG];
                for (m, d) in dys.iter_mut().enumerate() {
                    *d = dy.add(call.dyp.at(n0, co0 + m.min(valid - 1)));
                }
                let mut xs = [x; NT];
                for (t, p) in xs.iter_mut().enumerate() {
                    *p = x.add(call.xp.at(n0, ci0 + t.min(inputs - 1)));
                }
                let sums = dot_tile::<V, MG, NT>(
                    &dys,
                    call.dyp.sample,
                    &xs,
                    call.xp.sample,
                    ns,
                    call.flat.len,
                );
                for (m, s) in sums.iter().enumerate().take(valid) {
                    let at = gw.ptr().add((co0 + m) * cin + ci0);
                    for (t, v) in s.iter().enumerate().take(inputs) {
                        *at.add(t) += v;
                    }
                }
            }
        }
    }
}

/// Ones, then zeros: `RAMP[16 − r..]` loads as a mask of the first `r` lanes.
static RAMP: [f32; 2 * MAX_LANES] = {
    let mut r = [0.0; 2 * MAX_LANES];
    let mut i = 0;
    while i < MAX_LANES {
        r[i] = 1.0;
        i += 1;
    }
    r
};

/// `MG × NT` dot products of length `len` over `samples` samples: `Σ_n dy[m] · xs[t]`, sample
/// `n` at `n · dy_sample` and `n · x_sample` floats past the given pointers. The last vector of
/// each sample, past `len`, is masked (both factors), so what lies there does not count.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
unsafe fn dot_tile<V: Vf32, const MG: usize, const NT: usize>(
    dy: &[*const f32; MG],
    dy_sample: usize,
    xs: &[*const f32; NT],
    x_sample: usize,
    samples: usize,
    len: usize,
) -> [[f32; NT]; MG] {
    // No closures in here (see `tile_kernel`).
    unsafe {
        let mut acc = [[V::zero(); NT]; MG];
        let full = len - len % V::LANES;
        let mut d = [V::zero(); MG];
        for n in 0..samples {
            let (dn, xn) = (n * dy_sample, n * x_sample);
            let mut q = 0;
            while q < full {
                for m in 0..MG {
                    d[m] = V::load(dy[m].add(dn + q));
                }
                for t in 0..NT {
                    let xv = V::load(xs[t].add(xn + q));
                    for m in 0..MG {
                        acc[m][t] = V::fma(d[m], xv, acc[m][t]);
                    }
                }
                q += V::LANES;
            }
            if full < len {
                let mask = V::load(RAMP.as_ptr().add(MAX_LANES - (len - full)));
                for m in 0..MG {
                    d[m] = V::select_positive(mask, V::load(dy[m].add(dn + q)));
                }
                for t in 0..NT {
                    let xv = V::select_positive(mask, V::load(xs[t].add(xn + q)));
                    for m in 0..MG {
                        acc[m][t] = V::fma(d[m], xv, acc[m][t]);
                    }
                }
            }
        }
        let mut sums = [[0.0f32; NT]; MG];
        for m in 0..MG {
            for t in 0..NT {
                sums[m][t] = acc[m][t].hsum();
            }
        }
        sums
    }
}

/// A strided convolution's input as columns for a `k = 1` correlation: for one sample,
/// `cols[ci·k² + ky·k + kx][y·out_row + x] = x[ci][(y·s + ky)·in_row + x·s + kx]` for the
/// `ho × wo` outputs, zero at `wo ≤ x < out_row`. `x` is the sample's first padded plane
/// (channel stride `x_plane`), `cols` the sample's first column plane (stride `col_plane`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn im2col(
    x: &[f32],
    x_plane: usize,
    in_row: usize,
    cin: usize,
    k: usize,
    s: usize,
    [ho, wo]: [usize; 2],
    out_row: usize,
    cols: &mut [f32],
    col_plane: usize,
) {
    for ci in 0..cin {
        let xc = &x[ci * x_plane..];
        for ky in 0..k {
            for kx in 0..k {
                let c = &mut cols[((ci * k + ky) * k + kx) * col_plane..];
                for y in 0..ho {
                    let src = &xc[(y * s + ky) * in_row + kx..];
                    let dst = &mut c[y * out_row..(y + 1) * out_row];
                    for (xo, d) in dst[..wo].iter_mut().enumerate() {
                        *d = src[xo * s];
                    }
                    dst[wo..].fill(0.0);
                }
            }
        }
    }
}

/// The adjoint of [`im2col`]: adds each column value back to the input position it was read
/// from (`x` must hold what is added to, usually zeros).
#[allow(clippy::too_many_arguments)]
pub(crate) fn col2im_add(
    cols: &[f32],
    col_plane: usize,
    cin: usize,
    k: usize,
    s: usize,
    [ho, wo]: [usize; 2],
    out_row: usize,
    x: &mut [f32],
    x_plane: usize,
    in_row: usize,
) {
    for ci in 0..cin {
        let xc = &mut x[ci * x_plane..];
        for ky in 0..k {
            for kx in 0..k {
                let c = &cols[((ci * k + ky) * k + kx) * col_plane..];
                for y in 0..ho {
                    let src = &c[y * out_row..y * out_row + wo];
                    let base = (y * s + ky) * in_row + kx;
                    for (xo, v) in src.iter().enumerate() {
                        xc[base + xo * s] += v;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect()
    }

    /// A plain convolution of one sample `[cin][h][w]` → `[cout][ho][wo]`.
    fn reference(
        x: &[f32],
        w: &[f32],
        [cin, h, wd]: [usize; 3],
        cout: usize,
        k: usize,
        pad: usize,
    ) -> Vec<f32> {
        let (ho, wo) = (h + 2 * pad - k + 1, wd + 2 * pad - k + 1);
        let mut out = vec![0.0f64; cout * ho * wo];
        for co in 0..cout {
            for y in 0..ho {
                for xo in 0..wo {
                    let mut s = 0.0f64;
                    for ci in 0..cin {
                        for ky in 0..k {
                            for kx in 0..k {
                                let (iy, ix) = (y + ky, xo + kx);
                                if iy < pad || ix < pad || iy - pad >= h || ix - pad >= wd {
                                    continue;
                                }
                                s += f64::from(w[((co * cin + ci) * k + ky) * k + kx])
                                    * f64::from(x[(ci * h + iy - pad) * wd + ix - pad]);
                            }
                        }
                    }
                    out[(co * ho + y) * wo + xo] = s;
                }
            }
        }
        out.into_iter().map(|v| v as f32).collect()
    }

    /// Pads `[c][h][w]` into planes of `plane` floats with row stride `w + 2·pad`.
    fn padded(x: &[f32], [c, h, w]: [usize; 3], pad: usize, plane: usize) -> Vec<f32> {
        let row = w + 2 * pad;
        let mut out = vec![0.0; c * plane];
        for ch in 0..c {
            for y in 0..h {
                for xo in 0..w {
                    out[ch * plane + (y + pad) * row + xo + pad] = x[(ch * h + y) * w + xo];
                }
            }
        }
        out
    }

    #[test]
    fn the_flat_correlation_is_a_convolution() {
        for (cin, cout, h, w, k, pad) in [
            (3, 16, 9, 11, 3, 1),
            (5, 7, 8, 8, 3, 1),
            (1, 6, 12, 12, 5, 2),
            (6, 9, 7, 10, 5, 0),
            (13, 5, 4, 6, 1, 0),
        ] {
            let x = values(cin * h * w, 1);
            let wt = values(cout * cin * k * k, 2);
            let want = reference(&x, &wt, [cin, h, w], cout, k, pad);
            let (ho, wo) = (h + 2 * pad - k + 1, w + 2 * pad - k + 1);
            let row = w + 2 * pad;
            let plane = (h + 2 * pad) * row + (k + 1) * row + 2 * MAX_LANES;
            let xp = padded(&x, [cin, h, w], pad, plane);
            let mut y = vec![f32::NAN; cout * plane];
            let planes = Planes {
                offset: 0,
                plane,
                sample: cin * plane,
            };
            let out_planes = Planes {
                offset: 0,
                plane,
                sample: cout * plane,
            };
            let packed = Packed::forward(&wt, cout, cin, k);
            conv_forward(
                &ConvCall {
                    x: &xp,
                    xp: planes,
                    w: &packed,
                    bias: None,
                    flat: Flat {
                        k,
                        row,
                        len: ho * row,
                    },
                    samples: 1,
                },
                &mut y,
                out_planes,
            );
            for co in 0..cout {
                for yy in 0..ho {
                    for xx in 0..wo {
                        let got = y[co * plane + yy * row + xx];
                        let want = want[(co * ho + yy) * wo + xx];
                        assert!(
                            (got - want).abs() < 1e-5,
                            "{cin}->{cout} k{k}: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}
