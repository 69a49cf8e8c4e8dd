//! Simulated time: integer nanoseconds.
//!
//! Every instant and duration in the simulator is a [`SimTime`], a count of nanoseconds held in a
//! `u64` (enough for 584 years). Integer time makes event ordering exact: two events scheduled for
//! the same instant compare equal, and the tie is broken by their sequence number, never by
//! floating-point rounding.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, AddAssign, Sub};

use crate::error::ConfigError;

/// An instant or a duration of simulated time, in nanoseconds.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct SimTime(u64);

impl SimTime {
    /// Time zero, the start of every run.
    pub const ZERO: SimTime = SimTime(0);
    /// The largest representable time; used as "never".
    pub const MAX: SimTime = SimTime(u64::MAX);
    /// The longest instant or duration a scenario may give: 2⁶³ ns, about 292 years, half the
    /// clock's range. A step or a message that starts before a run's stop (at most this) and
    /// lasts at most this long ends by the clock's last instant, [`SimTime::MAX`]. Every
    /// scenario field that holds a time is checked against it ([`SimTime::checked_from_f64`]).
    pub const MAX_CONFIG: SimTime = SimTime(1 << 63);

    /// From a count of nanoseconds.
    pub const fn from_nanos(ns: u64) -> Self {
        SimTime(ns)
    }

    /// From seconds, rounded to the nearest nanosecond. Negative or NaN input gives zero, and
    /// input beyond [`SimTime::MAX`] saturates there, silently: a scenario's values go through
    /// [`SimTime::checked_from_secs_f64`] instead, which rejects both.
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

    /// [`SimTime::MAX_CONFIG`] in `unit`: the largest value a scenario field in that unit may
    /// hold.
    pub fn max_config_in(unit: TimeUnit) -> f64 {
        Self::MAX_CONFIG.0 as f64 / unit.nanos()
    }

    /// A scenario's time value `value`, in seconds, checked: zero or positive, and at most
    /// [`SimTime::MAX_CONFIG`] (so that the conversion never saturates). `field` is the value's
    /// path (`run.sim_time_s`); errors name it and state the maximum in seconds.
    pub fn checked_from_secs_f64(value: f64, field: &str) -> Result<SimTime, ConfigError> {
        Self::checked_from_f64(value, TimeUnit::Seconds, field)
    }

    /// [`SimTime::checked_from_secs_f64`] for a value in milliseconds.
    pub fn checked_from_millis_f64(value: f64, field: &str) -> Result<SimTime, ConfigError> {
        Self::checked_from_f64(value, TimeUnit::Millis, field)
    }

    /// [`SimTime::checked_from_secs_f64`] for a value in microseconds.
    pub fn checked_from_micros_f64(value: f64, field: &str) -> Result<SimTime, ConfigError> {
        Self::checked_from_f64(value, TimeUnit::Micros, field)
    }

    /// A scenario's time value `value`, in `unit`, checked and rounded to the nearest
    /// nanosecond: it must be finite, zero or positive, and at most [`SimTime::MAX_CONFIG`].
    /// Errors are at `field` and state the limit in `unit`. This is the one rule every
    /// validator applies to an instant or a duration, after its own checks of the value's
    /// meaning.
    pub fn checked_from_f64(
        value: f64,
        unit: TimeUnit,
        field: &str,
    ) -> Result<SimTime, ConfigError> {
        let sym = unit.symbol();
        if !(value.is_finite() && value >= 0.0) {
            return Err(ConfigError::new(
                field,
                format!(
                    "{field} must be zero or a positive number of {}, got {}",
                    unit.name(),
                    num(value)
                ),
            ));
        }
        let max = Self::max_config_in(unit);
        if value * unit.nanos() > Self::MAX_CONFIG.0 as f64 {
            return Err(ConfigError::new(
                field,
                format!(
                    "{field} = {} {sym} is more than simulated time can hold: at most {} {sym} \
                     (2^63 ns, about 292 years)",
                    num(value),
                    num(max)
                ),
            )
            .hint(CLOCK_HINT));
        }
        Ok(Self::from_nanos_f64(value * unit.nanos()))
    }

    /// [`SimTime::checked_from_f64`] for a duration that must also last at least 1 ns, the
    /// clock's resolution: a step time, a sojourn, an evaluation interval. A duration that
    /// rounds to zero would let the run loop at one instant.
    pub fn checked_nonzero_from_f64(
        value: f64,
        unit: TimeUnit,
        field: &str,
    ) -> Result<SimTime, ConfigError> {
        let t = Self::checked_from_f64(value, unit, field)?;
        if value * unit.nanos() < 1.0 {
            let sym = unit.symbol();
            return Err(ConfigError::new(
                field,
                format!(
                    "{field} = {} {sym} is shorter than 1 ns, the resolution of simulated time: \
                     at least {} {sym}",
                    num(value),
                    num(1.0 / unit.nanos())
                ),
            )
            .hint(
                "simulated time counts whole nanoseconds: a shorter duration would round to 0 ns \
                 (a step of 0 ns makes the run loop at one instant)",
            ));
        }
        Ok(t)
    }

    /// The count of nanoseconds.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// In seconds (for reporting only; never feed this back into control flow).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// Scales a duration by a factor (a straggler slowdown), rounded to the nearest nanosecond,
    /// saturating at [`SimTime::MAX`]. Validation bounds every deterministic product of a step
    /// time and its factors by [`SimTime::MAX_CONFIG`]; a random factor's tail (or a sum of long
    /// durations) can still saturate, and an event at [`SimTime::MAX`] lies beyond the end of simulated time (the
    /// driver never handles one; see [`crate::engine::run`]).
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

/// The hint of every error about a time beyond [`SimTime::MAX_CONFIG`].
pub(crate) const CLOCK_HINT: &str = "simulated time counts nanoseconds in 64 bits; a scenario's times stay within half that range, so that a step or message started before the stop ends within it";

/// The unit of a scenario field that holds a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeUnit {
    /// Seconds (`sim_time_s`, `start_s`, `mean_fast_s`, …).
    Seconds,
    /// Milliseconds (`step_time_ms`, `mean_ms`, trace durations).
    Millis,
    /// Microseconds (`latency_us`).
    Micros,
}

impl TimeUnit {
    /// Nanoseconds in one unit.
    pub fn nanos(self) -> f64 {
        match self {
            TimeUnit::Seconds => 1e9,
            TimeUnit::Millis => 1e6,
            TimeUnit::Micros => 1e3,
        }
    }

    /// The unit's symbol: `s`, `ms`, `µs`.
    pub fn symbol(self) -> &'static str {
        match self {
            TimeUnit::Seconds => "s",
            TimeUnit::Millis => "ms",
            TimeUnit::Micros => "µs",
        }
    }

    fn name(self) -> &'static str {
        match self {
            TimeUnit::Seconds => "seconds",
            TimeUnit::Millis => "milliseconds",
            TimeUnit::Micros => "microseconds",
        }
    }
}

/// A number as an error message shows it: plain when it reads well, in exponent form when it
/// is very large or very small (`1e30`, not thirty-one digits).
pub(crate) fn num(x: f64) -> String {
    let a = x.abs();
    if a != 0.0 && a.is_finite() && !(1e-4..1e15).contains(&a) {
        format!("{x:e}")
    } else {
        format!("{x}")
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
    let start = SimTime::checked_from_secs_f64(start_s, &at("start_s"))?;
    let end = match end_s {
        None => SimTime::MAX,
        Some(e) if e.is_finite() && e > start_s => SimTime::checked_from_secs_f64(e, &at("end_s"))?,
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
    Ok((start, end))
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
    fn scenario_times_are_checked_against_the_clock() {
        let max_s = SimTime::max_config_in(TimeUnit::Seconds);
        assert_eq!(
            SimTime::checked_from_secs_f64(max_s, "run.sim_time_s").unwrap(),
            SimTime::MAX_CONFIG
        );
        assert_eq!(
            SimTime::checked_from_millis_f64(2.5, "x").unwrap(),
            SimTime::from_micros_f64(2500.0)
        );
        assert_eq!(
            SimTime::checked_from_micros_f64(0.0, "x").unwrap(),
            SimTime::ZERO
        );
        let e = SimTime::checked_from_secs_f64(1e30, "run.sim_time_s").unwrap_err();
        assert_eq!(e.path.to_string(), "run.sim_time_s");
        assert_eq!(
            e.message,
            "run.sim_time_s = 1e30 s is more than simulated time can hold: at most \
             9223372036.854776 s (2^63 ns, about 292 years)"
        );
        assert!(e.hint.is_some());
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            let e = SimTime::checked_from_millis_f64(bad, "a.b").unwrap_err();
            assert!(
                e.message
                    .contains("zero or a positive number of milliseconds")
            );
        }
        let e = SimTime::checked_nonzero_from_f64(0.0004, TimeUnit::Micros, "a.c").unwrap_err();
        assert!(e.message.contains("at least 0.001 µs"), "{e}");
        assert_eq!(
            SimTime::checked_nonzero_from_f64(1e-6, TimeUnit::Millis, "x").unwrap(),
            SimTime::from_nanos(1)
        );
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
