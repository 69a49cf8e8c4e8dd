//! Elementwise functions written so that the compiler vectorizes them: `exp` (Cephes' `expf`),
//! the normal distribution's CDF (through `erfc` of Numerical Recipes' `erfcc`), and GELU with
//! its slope in one pass.
//!
//! A call of `f32::exp` or `libm::erff` in a loop is a scalar function call per element (10 to
//! 20 ns each); the transformer's GELU and softmaxes make millions per pass, as many as a tenth
//! of the pass's matrix products' time. These are straight-line arithmetic (a polynomial, a
//! division, an exponent built from its bits), so a loop of them becomes vector code inside the
//! layer kit's `#[target_feature]` entry points ([`super::simd`]). They use no fused
//! multiply-add the compiler could choose or not (Rust never contracts `a·b + c`), so their bits
//! are the same on AVX-512, AVX2 and portable code.
//!
//! Accuracy: `exp` within 2.5e-7 relative of the exact value on `[−86, 88)` (below, it
//! returns about 1e-38 rather than 0; NaN stays NaN); `normal_cdf` within 2e-7 absolute
//! everywhere and 2e-6 relative from −4 up (`e^(−x²/2)` in `f32` carries the rounding of `x²`
//! into the tail, where GELU's value `x · Φ(x)` is below 1e-4 anyway). The tests hold both
//! against libm's.

use super::simd::dispatch;

const LOG2_E: f32 = std::f32::consts::LOG2_E;
/// `ln 2` in two parts (Cephes): `C1` exact in a few bits, `C2` the rest.
const LN2_C1: f32 = 0.693_359_4;
const LN2_C2: f32 = -2.121_944_4e-4;
/// `1.5 · 2²³`: adding and subtracting it rounds to the nearest integer.
const ROUND: f32 = 12_582_912.0;
/// `1/√(2π)`.
const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;

/// `e^x` for `x ≤ 88` (Cephes' `expf`: `2^n · e^r` with `|r| ≤ ln 2 / 2`, `e^r` a polynomial).
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    let nan = x.is_nan();
    // `max` and `min` return the number where the other is NaN: a NaN becomes −87 here, and
    // NaN again at the end.
    #[allow(clippy::manual_clamp)] // `clamp` keeps the NaN, which the conversion below must not see
    let x = x.max(-87.0).min(88.0);
    let n = (x * LOG2_E + ROUND) - ROUND;
    let r = (x - n * LN2_C1) - n * LN2_C2;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    // SAFETY: `n` is an integer in [−126, 127] (x was clamped), so the conversion is exact and
    // `n + 127` is a normal float's exponent.
    let n = unsafe { n.to_int_unchecked::<i32>() };
    let e = y * f32::from_bits(((n + 127) as u32) << 23);
    if nan { f32::NAN } else { e }
}

/// `Φ(x)`, the standard normal distribution's CDF, as `erfc(−x/√2) / 2` with Numerical Recipes'
/// `erfcc` (a Chebyshev fit, relative error below 1.2e-7 in exact arithmetic).
#[inline(always)]
pub(crate) fn normal_cdf(x: f32) -> f32 {
    let z = x * std::f32::consts::FRAC_1_SQRT_2;
    let a = z.abs();
    let t = 1.0 / (1.0 + 0.5 * a);
    let mut p = 0.170_872_77f32;
    p = p * t - 0.822_152_23;
    p = p * t + 1.488_515_9;
    p = p * t - 1.135_204;
    p = p * t + 0.278_868_07;
    p = p * t - 0.186_288_06;
    p = p * t + 0.096_784_18;
    p = p * t + 0.374_091_96;
    p = p * t + 1.000_023_7;
    p = p * t - 1.265_512_2;
    // erfc(a) for a = |x|/√2.
    let e = t * exp(p - a * a);
    if x < 0.0 { 0.5 * e } else { 1.0 - 0.5 * e }
}

/// GELU (exact, `x · Φ(x)`) and its slope `Φ(x) + x · φ(x)`.
#[inline(always)]
pub(crate) fn gelu_and_slope(x: f32) -> (f32, f32) {
    let cdf = normal_cdf(x);
    (x * cdf, cdf + x * FRAC_1_SQRT_2PI * exp(-0.5 * x * x))
}

/// Lanes of a [`sum`]: partial sums `k, k + 16, k + 32, …`, added in a fixed tree at the end.
const SUM_LANES: usize = 16;

/// `Σ f(i)` for `i < n` in [`SUM_LANES`] partial sums and a fixed tree: a vector of them on
/// every instruction set (one AVX-512 register, two AVX2 ones), the same bits on each, and no
/// chain of dependent additions (a sum in order waits four cycles per element).
#[inline(always)]
fn lane_sum(n: usize, f: impl Fn(usize) -> f32) -> f32 {
    let mut acc = [0.0f32; SUM_LANES];
    let full = n - n % SUM_LANES;
    let mut i = 0;
    while i < full {
        for (l, a) in acc.iter_mut().enumerate() {
            *a += f(i + l);
        }
        i += SUM_LANES;
    }
    for (a, j) in acc.iter_mut().zip(full..n) {
        *a += f(j);
    }
    let mut w = SUM_LANES / 2;
    while w > 0 {
        for l in 0..w {
            acc[l] += acc[l + w];
        }
        w /= 2;
    }
    acc[0]
}

/// `Σ x[i]` ([`lane_sum`]'s order).
#[inline(always)]
pub(crate) fn sum(x: &[f32]) -> f32 {
    lane_sum(x.len(), |i| x[i])
}

/// `Σ a[i] · b[i]` ([`lane_sum`]'s order).
#[inline(always)]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let b = &b[..a.len()];
    lane_sum(a.len(), |i| a[i] * b[i])
}

/// `Σ (x[i] − c)²` ([`lane_sum`]'s order).
#[inline(always)]
pub(crate) fn sum_sq_dev(x: &[f32], c: f32) -> f32 {
    lane_sum(x.len(), |i| (x[i] - c) * (x[i] - c))
}

dispatch! {
    /// `g[i] = GELU(x[i])`, and `x[i]` replaced by GELU's slope there (what the backward pass
    /// multiplies the gradient by).
    pub(crate) fn gelu_in_place<V>(x: &mut [f32], g: &mut [f32]) {
        for (x, g) in x.iter_mut().zip(g.iter_mut()) {
            let (v, slope) = gelu_and_slope(*x);
            *g = v;
            *x = slope;
        }
    }
}

dispatch! {
    /// `g[i] = GELU(x[i])` alone (an evaluation's forward pass).
    pub(crate) fn gelu_into<V>(x: &[f32], g: &mut [f32]) {
        for (&x, g) in x.iter().zip(g.iter_mut()) {
            *g = x * normal_cdf(x);
        }
    }
}

dispatch! {
    /// Layer norm of the rows of `x` (each `gain.len()` floats) into `y`: `(x − mean) · rstd ·
    /// gain + bias` with the biased variance and `eps`, each row's mean and `rstd` into
    /// `stats` (two floats a row).
    pub(crate) fn layer_norm_rows<V>(
        x: &[f32],
        gain: &[f32],
        bias: &[f32],
        eps: f32,
        y: &mut [f32],
        stats: &mut [f32],
    ) {
        let d = gain.len();
        for ((xr, yr), st) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)).zip(stats.chunks_exact_mut(2)) {
            let mean = sum(xr) / d as f32;
            let var = sum_sq_dev(xr, mean) / d as f32;
            let rstd = 1.0 / (var + eps).sqrt();
            for (((o, &v), &g), &b) in yr.iter_mut().zip(xr).zip(gain).zip(bias) {
                *o = (v - mean) * rstd * g + b;
            }
            st[0] = mean;
            st[1] = rstd;
        }
    }
}

dispatch! {
    /// The input gradient of [`layer_norm_rows`] from the output gradient `dy`, **added** into
    /// `dx`: `rstd · (ĝ − mean(ĝ) − x̂ · mean(ĝ · x̂))` with `ĝ = dy · gain`, `x̂` the normalized
    /// input; `scratch` holds a row.
    pub(crate) fn layer_norm_grad_rows<V>(
        x: &[f32],
        stats: &[f32],
        dy: &[f32],
        gain: &[f32],
        dx: &mut [f32],
        scratch: &mut [f32],
    ) {
        let d = gain.len();
        let (gh, xh) = scratch[..2 * d].split_at_mut(d);
        let rows = x.chunks_exact(d).zip(dy.chunks_exact(d)).zip(dx.chunks_exact_mut(d));
        for (((xr, dr), out), st) in rows.zip(stats.chunks_exact(2)) {
            let (mean, rstd) = (st[0], st[1]);
            for j in 0..d {
                gh[j] = dr[j] * gain[j];
                xh[j] = (xr[j] - mean) * rstd;
            }
            let m1 = sum(gh) / d as f32;
            let m2 = dot(gh, xh) / d as f32;
            for j in 0..d {
                out[j] += rstd * (gh[j] - m1 - xh[j] * m2);
            }
        }
    }
}

dispatch! {
    /// `x[i] ← e^(x[i] − shift)`.
    pub(crate) fn exp_shifted<V>(x: &mut [f32], shift: f32) {
        for v in x.iter_mut() {
            *v = exp(*v - shift);
        }
    }
}

dispatch! {
    /// `a[i] ← a[i] · b[i]`.
    pub(crate) fn mul_in_place<V>(a: &mut [f32], b: &[f32]) {
        for (a, &b) in a.iter_mut().zip(b) {
            *a *= b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid() -> impl Iterator<Item = f32> {
        (-40_000..=40_000).map(|i| i as f32 * 2.5e-4)
    }

    #[test]
    fn exp_is_within_two_ulps_of_the_exact_value() {
        let mut worst = 0f64;
        for x in (-86_000..=87_900).map(|i| i as f32 * 1e-3) {
            let want = f64::from(x).exp();
            worst = worst.max(((f64::from(exp(x)) - want) / want).abs());
        }
        eprintln!("exp: relative error {worst:e}");
        assert!(worst < 2.5e-7, "relative error {worst:e}");
        assert!(exp(-1000.0) < 1e-37 && exp(-1000.0) >= 0.0);
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(f32::NAN).is_nan(), "a diverged value stays NaN");
    }

    #[test]
    fn the_normal_cdf_matches_erfc_relatively_where_gelu_needs_it() {
        let (mut relative, mut absolute) = (0f64, 0f64);
        for x in grid() {
            let x = f64::from(x);
            let want = 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2);
            let got = f64::from(normal_cdf(x as f32));
            absolute = absolute.max((got - want).abs());
            if x >= -4.0 {
                relative = relative.max(((got - want) / want).abs());
            }
        }
        eprintln!("normal_cdf: relative error {relative:e} above -4, absolute {absolute:e}");
        assert!(
            relative < 2e-6 && absolute < 2e-7,
            "{relative:e}, {absolute:e}"
        );
    }

    #[test]
    fn lane_sums_are_sums_in_a_fixed_order() {
        for n in [0usize, 1, 5, 16, 17, 31, 64, 100] {
            let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let y: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let want: f64 = x.iter().map(|&v| f64::from(v)).sum();
            assert!((f64::from(sum(&x)) - want).abs() < 1e-5, "n = {n}");
            let want: f64 = x
                .iter()
                .zip(&y)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            assert!((f64::from(dot(&x, &y)) - want).abs() < 1e-5, "n = {n}");
            let want: f64 = x.iter().map(|&v| (f64::from(v) - 0.25).powi(2)).sum();
            assert!(
                (f64::from(sum_sq_dev(&x, 0.25)) - want).abs() < 1e-5,
                "n = {n}"
            );
        }
        // Lane k holds the elements k, k + 16, …, and lanes k and k + 8 meet first: 2²⁴ + 1 is
        // not a float (it rounds to 2²⁴), so the order shows in the last bits.
        let mut x = vec![0.0f32; 32];
        x[0] = 16_777_216.0;
        x[1] = 1.0;
        x[9] = 1.0;
        assert_eq!(
            sum(&x),
            16_777_218.0,
            "the two 1s meet before they reach 2²⁴"
        );
        x.swap(9, 16);
        assert_eq!(sum(&x), 16_777_216.0, "a 1 in lane 0 meets 2²⁴ alone");
    }

    #[test]
    fn gelu_and_its_slope_match_libm_and_a_difference_quotient() {
        for x in grid().step_by(97) {
            let (g, s) = gelu_and_slope(x);
            let xd = f64::from(x);
            let cdf = 0.5 * libm::erfc(-xd / std::f64::consts::SQRT_2);
            let want = xd * cdf;
            assert!(
                (f64::from(g) - want).abs() <= 1e-6 * (1.0 + want.abs()),
                "GELU({x}) = {g}, want {want}"
            );
            let slope = cdf + xd * (-0.5 * xd * xd).exp() / (2.0 * std::f64::consts::PI).sqrt();
            assert!(
                (f64::from(s) - slope).abs() <= 1e-6,
                "GELU'({x}) = {s}, want {slope}"
            );
        }
        let mut x = vec![-2.0f32, -0.5, 0.0, 0.5, 2.0, 3.0, -3.0, 1.0, 7.0];
        let mut g = vec![0.0; x.len()];
        let want: Vec<(f32, f32)> = x.iter().map(|&v| gelu_and_slope(v)).collect();
        gelu_in_place(&mut x, &mut g);
        for (i, (gv, sv)) in want.into_iter().enumerate() {
            assert_eq!(
                (g[i], x[i]),
                (gv, sv),
                "the vector loop computes the scalar's bits"
            );
        }
    }
}
