//! The numbers a rule computes in: [`Float`] (`f64` in the reference store and the conformance
//! suite, `f32` in the burn store's rows) and [`Count`] (Adam's step counts: `u64` and `u32`).
//!
//! Only what the rules use, each operation IEEE's own: `+`, `−`, `×`, `÷` and `√` are correctly
//! rounded in either width, so a rule written once gives each store the bits it would get from
//! a loop written for its type, as long as the rule fixes the order of the operations. Nothing
//! here fuses a multiply-add (Rust never contracts `a * b + c`).

use std::fmt::Debug;
use std::ops::{Add, Div, Mul, Sub, SubAssign};

/// `f32` or `f64`, as a rule computes in it.
pub trait Float:
    Copy
    + Debug
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + SubAssign
    + Send
    + Sync
    + 'static
{
    /// `0`.
    const ZERO: Self;
    /// `1`.
    const ONE: Self;
    /// The nearest value to `v` (`v as f32`; `v` itself in `f64`).
    fn from_f64(v: f64) -> Self;
    /// The value, exactly, in `f64`.
    fn to_f64(self) -> f64;
    /// The correctly rounded square root.
    fn sqrt(self) -> Self;
    /// The bits, for comparing settings exactly (`-0.0` is not `0.0`, a NaN equals itself).
    fn bits(self) -> u64;
}

impl Float for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;

    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }

    #[inline(always)]
    fn to_f64(self) -> f64 {
        f64::from(self)
    }

    #[inline(always)]
    fn sqrt(self) -> Self {
        f32::sqrt(self)
    }

    #[inline(always)]
    fn bits(self) -> u64 {
        u64::from(self.to_bits())
    }
}

impl Float for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;

    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }

    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }

    #[inline(always)]
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }

    #[inline(always)]
    fn bits(self) -> u64 {
        self.to_bits()
    }
}

/// A coordinate's step count (Adam's `t`): `u64` in the reference store, `u32` in the rows.
pub trait Count: Copy + Debug + PartialEq + Send + Sync + 'static {
    /// `t ← t + 1`.
    fn increment(&mut self);
    /// `t` as the exponent of a bias correction (`β^t`), at most `i32::MAX`.
    fn exponent(self) -> i32;
}

impl Count for u32 {
    #[inline(always)]
    fn increment(&mut self) {
        *self += 1;
    }

    #[inline(always)]
    fn exponent(self) -> i32 {
        self.min(i32::MAX as u32) as i32
    }
}

impl Count for u64 {
    #[inline(always)]
    fn increment(&mut self) {
        *self += 1;
    }

    #[inline(always)]
    fn exponent(self) -> i32 {
        self.min(i32::MAX as u64) as i32
    }
}
