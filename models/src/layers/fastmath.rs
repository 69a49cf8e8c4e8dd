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
