//! Simulated time: integer nanoseconds.
//!
//! Every instant and duration in the simulator is a [`SimTime`], a count of nanoseconds held in a
//! `u64` (enough for 584 years). Integer time makes event ordering exact: two events scheduled for
//! the same instant compare equal, and the tie is broken by their sequence number, never by
//! floating-point rounding.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

use crate::error::ConfigError;

/// An instant or a duration of simulated time, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimTime(u64);

impl SimTime {
    /// Time zero, the start of every run.
    pub const ZERO: SimTime = SimTime(0);
    /// The largest representable time; used as "never".
    pub const MAX: SimTime = SimTime(u64::MAX);

    /// From a count of nanoseconds.
    pub const fn from_nanos(ns: u64) -> Self {
        SimTime(ns)
    }

    /// From seconds, rounded to the nearest nanosecond. Negative or NaN input gives zero;
    /// scenario validation rejects such values before they reach here.
    pub fn from_secs_f64(s: f64) -> Self {
        Self::from_nanos_f64(s * 1e9)
    }

    /// From milliseconds, rounded to the nearest nanosecond.
    pub fn from_millis_f64(ms: f64) -> Self {
        Self::from_nanos_f64(ms * 1e6)
    }

    /// From microseconds, rounded to the nearest nanosecond.
    pub fn from_micros_f64(us: f64) -> Self {
        Self::from_nanos_f64(us * 1e3)
    }

    fn from_nanos_f64(ns: f64) -> Self {
        if ns.is_nan() || ns <= 0.0 {
            SimTime(0)
        } else if ns >= u64::MAX as f64 {
            SimTime::MAX
        } else {
            SimTime(ns.round() as u64)
        }
    }

    /// The count of nanoseconds.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// In seconds (for reporting only; never feed this back into control flow).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// Scales a duration by a factor (a straggler slowdown), rounded to the nearest nanosecond.
    pub fn scale(self, factor: f64) -> Self {
        Self::from_nanos_f64(self.0 as f64 * factor)
    }

    /// `self + rhs`, saturating at [`SimTime::MAX`].
    pub const fn saturating_add(self, rhs: SimTime) -> Self {
        SimTime(self.0.saturating_add(rhs.0))
    }
}

impl Add for SimTime {
    type Output = SimTime;
    fn add(self, rhs: SimTime) -> SimTime {
        self.saturating_add(rhs)
    }
}

impl AddAssign for SimTime {
    fn add_assign(&mut self, rhs: SimTime) {
        *self = *self + rhs;
    }
}

impl Sub for SimTime {
    type Output = SimTime;
    /// Saturating difference: an earlier minus a later instant is zero.
    fn sub(self, rhs: SimTime) -> SimTime {
        SimTime(self.0.saturating_sub(rhs.0))
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.as_secs_f64();
        if s >= 1.0 {
            write!(f, "{s:.3} s")
        } else if s >= 1e-3 {
            write!(f, "{:.3} ms", s * 1e3)
        } else {
            write!(f, "{:.3} µs", s * 1e6)
        }
    }
}

/// A time window of a scenario, `[start_s, end_s)` in simulated seconds (`end_s` absent: never
/// closes), checked and converted; `at(key)` is a key's field path, for errors.
pub(crate) fn window(
    start_s: f64,
    end_s: Option<f64>,
    at: &dyn Fn(&str) -> String,
) -> Result<(SimTime, SimTime), ConfigError> {
    if !(start_s.is_finite() && start_s >= 0.0) {
        return Err(ConfigError::new(
            &at("start_s"),
            format!("a window must start at zero or a positive time, got {start_s}"),
        )
        .hint("start_s is in simulated seconds from the start of the run"));
    }
    let end = match end_s {
        None => SimTime::MAX,
        Some(e) if e.is_finite() && e > start_s => SimTime::from_secs_f64(e),
        Some(e) => {
            return Err(ConfigError::new(
                &at("end_s"),
                format!("the window ends at {e} s, not after it starts at {start_s} s"),
            )
            .hint(
                "end_s must be greater than start_s; omit end_s for a window that never closes",
            ));
        }
    };
    Ok((SimTime::from_secs_f64(start_s), end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_round_to_nearest_nanosecond() {
        assert_eq!(SimTime::from_secs_f64(1.5).as_nanos(), 1_500_000_000);
        assert_eq!(SimTime::from_millis_f64(2.0000004).as_nanos(), 2_000_000);
        assert_eq!(SimTime::from_micros_f64(0.0006).as_nanos(), 1);
        assert_eq!(SimTime::from_secs_f64(-1.0), SimTime::ZERO);
        assert_eq!(SimTime::from_secs_f64(f64::NAN), SimTime::ZERO);
    }

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(SimTime::MAX + SimTime::from_nanos(1), SimTime::MAX);
        assert_eq!(
            SimTime::from_nanos(1) - SimTime::from_nanos(2),
            SimTime::ZERO
        );
        assert_eq!(SimTime::from_nanos(10).scale(4.0).as_nanos(), 40);
    }
}
