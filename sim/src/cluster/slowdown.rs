//! The runtime half of the straggler models: each worker's realization of each
//! `[[cluster.stragglers]]` entry, drawn from its own stream (see [`super::stragglers`]).

use rand::Rng;
use rand_distr::{Distribution as _, Exp, Gamma, Geometric, LogNormal, Pareto, Uniform};
use serde::{Deserialize, Serialize};

use crate::clock::rng::{self, Stream, StreamKind, stream};
use crate::clock::time::SimTime;
use crate::cluster::stragglers::{
    Clock, Distribution, MarkovStart, StragglerModel, markov_clock, positive, window_bounds,
};
use crate::error::ConfigError;

/// A validated distribution, ready to sample.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum Variate {
    Constant(f64),
    Uniform(Uniform<f64>),
    LogNormal(LogNormal<f64>),
    Gamma(Gamma<f64>),
    Exp(Exp<f64>),
    Pareto(Pareto<f64>),
}

/// One distribution's parameters under check, with what the error messages name: the
/// distribution, the key of its mean, and each key's field path (`at(key)`).
struct Params<'a> {
    d: Distribution,
    name: &'static str,
    mean: f64,
    mean_key: &'a str,
    at: &'a dyn Fn(&str) -> String,
}

impl Params<'_> {
    /// The mean must be a positive number, whatever the distribution.
    fn check_mean(&self) -> Result<(), ConfigError> {
        let mean = self.mean;
        if positive(mean) {
            return Ok(());
        }
        Err(ConfigError::new(
            &(self.at)(self.mean_key),
            format!("the mean must be a positive number, got {mean}"),
        )
        .hint(if self.mean_key == "mean_ms" {
            "mean_ms = 5.0 adds 5 ms to a step on average"
        } else {
            "mean = 1.0 keeps the average speed; 1.2 makes steps 20% slower on average"
        }))
    }

    /// Refuses `key` when it is given: this distribution has no use for it (`why`).
    fn none(&self, key: &str, v: Option<f64>, why: &str) -> Result<(), ConfigError> {
        let name = self.name;
        match v {
            Some(_) => Err(ConfigError::new(
                &(self.at)(key),
                format!("a {name} distribution takes no `{key}`: {why}"),
            )
            .hint(format!("remove `{key}`"))),
            None => Ok(()),
        }
    }

    /// `c` as the cv, if it lies in the range the distribution can take: above 0 (`lo_open`) or
    /// from 0, up to `hi` (infinite: no upper end).
    fn cv_in(&self, c: f64, lo_open: bool, hi: f64) -> Result<f64, ConfigError> {
        let name = self.name;
        let ok = c.is_finite() && (if lo_open { c > 0.0 } else { c >= 0.0 }) && c <= hi;
        if ok {
            Ok(c)
        } else {
            let range = if hi.is_finite() {
                format!("in [0, {hi:.4}]")
            } else if lo_open {
                "positive".to_string()
            } else {
                "zero or positive".to_string()
            };
            Err(ConfigError::new(
                &(self.at)("cv"),
                format!("a {name} distribution's cv must be {range}, got {c}"),
            )
            .hint("cv is the coefficient of variation, standard deviation / mean"))
        }
    }

    /// The cv, which this distribution cannot do without.
    fn need_cv(&self, c: Option<f64>) -> Result<f64, ConfigError> {
        let name = self.name;
        c.ok_or_else(|| {
            ConfigError::new(
                &(self.at)("cv"),
                format!("a {name} distribution needs its spread `cv`"),
            )
            .hint("cv = 0.2 gives a standard deviation of 20% of the mean")
        })
    }

    /// Exactly one of `cv` and `shape` sets the spread (gamma and Pareto take either).
    fn one_of(&self, cv: Option<f64>, shape: Option<f64>) -> Result<(), ConfigError> {
        let name = self.name;
        match (cv, shape) {
            (Some(_), Some(_)) => Err(ConfigError::new(
                &(self.at)("shape"),
                format!("a {name} distribution takes `cv` or `shape`, not both"),
            )
            .hint("keep the one your source states")),
            (None, None) => Err(ConfigError::new(
                &(self.at)("cv"),
                format!("a {name} distribution needs its spread: `cv` or `shape`"),
            )
            .hint(if self.d == Distribution::Pareto {
                "shape = 3.0 is a heavy tail with finite variance"
            } else {
                "cv = 0.5, or shape = 4.0 (cv = 1/√shape)"
            })),
            _ => Ok(()),
        }
    }

    /// The sampler refused parameters that passed the checks above (`e`, its reason).
    fn bad(&self, e: &dyn std::fmt::Display) -> ConfigError {
        let name = self.name;
        ConfigError::new(
            &(self.at)(self.mean_key),
            format!("invalid {name} parameters: {e}"),
        )
        .hint("see the distribution table in the scenario reference")
    }

    /// A gamma distribution of this mean, its shape `k` given or set by the cv (`k = 1/cv²`).
    fn gamma(&self, cv: Option<f64>, shape: Option<f64>) -> Result<Variate, ConfigError> {
        self.one_of(cv, shape)?;
        let k = match (cv, shape) {
            (Some(c), _) => {
                let c = self.cv_in(c, true, f64::INFINITY)?;
                1.0 / (c * c)
            }
            (_, Some(k)) if positive(k) => k,
            (_, Some(k)) => {
                return Err(ConfigError::new(
                    &(self.at)("shape"),
                    format!("a gamma distribution's shape must be positive, got {k}"),
                )
                .hint("shape k gives cv = 1/√k: shape = 4.0 is cv = 0.5"));
            }
            _ => unreachable!("checked by one_of"),
        };
        Gamma::new(k, self.mean / k)
            .map(Variate::Gamma)
            .map_err(|e| self.bad(&e))
    }

    /// A Pareto distribution of this mean, its shape `α` given (above 1, for the mean to exist)
    /// or set by the cv (`α = 1 + √(1 + 1/cv²)`).
    fn pareto(&self, cv: Option<f64>, shape: Option<f64>) -> Result<Variate, ConfigError> {
        self.one_of(cv, shape)?;
        let alpha = match (cv, shape) {
            (Some(c), _) => {
                let c = self.cv_in(c, true, f64::INFINITY)?;
                1.0 + (1.0 + 1.0 / (c * c)).sqrt()
            }
            (_, Some(a)) if a.is_finite() && a > 1.0 => a,
            (_, Some(a)) => {
                return Err(ConfigError::new(
                    &(self.at)("shape"),
                    format!("a Pareto distribution's shape must be above 1 for its mean to exist, got {a}"),
                )
                .hint("shape = 3.0 is a heavy tail with finite variance; above 2 the variance is finite"));
            }
            _ => unreachable!("checked by one_of"),
        };
        Pareto::new(self.mean * (alpha - 1.0) / alpha, alpha)
            .map(Variate::Pareto)
            .map_err(|e| self.bad(&e))
    }
}

impl Variate {
    /// Checks the parameters (`at(key)` is a key's field path) and builds the sampler.
    pub(crate) fn new(
        d: Distribution,
        mean: f64,
        mean_key: &str,
        cv: Option<f64>,
        shape: Option<f64>,
        at: &dyn Fn(&str) -> String,
    ) -> Result<Variate, ConfigError> {
        let p = Params {
            d,
            name: d.name(),
            mean,
            mean_key,
            at,
        };
        p.check_mean()?;
        match d {
            Distribution::Constant => {
                p.none("cv", cv, "it has no spread")?;
                p.none("shape", shape, "it has no spread")?;
                Ok(Variate::Constant(mean))
            }
            Distribution::Exponential => {
                p.none("cv", cv, "its cv is always 1")?;
                p.none("shape", shape, "it has none")?;
                Exp::new(1.0 / mean)
                    .map(Variate::Exp)
                    .map_err(|e| p.bad(&e))
            }
            Distribution::Uniform => {
                p.none("shape", shape, "it is set by `cv`")?;
                let c = p.cv_in(p.need_cv(cv)?, false, 1.0 / 3f64.sqrt())?;
                let h = 3f64.sqrt() * c * mean;
                Uniform::new_inclusive((mean - h).max(0.0), mean + h)
                    .map(Variate::Uniform)
                    .map_err(|e| p.bad(&e))
            }
            Distribution::Lognormal => {
                p.none("shape", shape, "it is set by `cv`")?;
                let c = p.cv_in(p.need_cv(cv)?, false, f64::INFINITY)?;
                LogNormal::from_mean_cv(mean, c)
                    .map(Variate::LogNormal)
                    .map_err(|e| p.bad(&e))
            }
            Distribution::Gamma => p.gamma(cv, shape),
            Distribution::Pareto => p.pareto(cv, shape),
        }
    }

    pub(crate) fn sample(&self, rng: &mut Stream) -> f64 {
        match self {
            Variate::Constant(m) => *m,
            Variate::Uniform(d) => d.sample(rng),
            Variate::LogNormal(d) => d.sample(rng),
            Variate::Gamma(d) => d.sample(rng),
            Variate::Exp(d) => d.sample(rng),
            Variate::Pareto(d) => d.sample(rng),
        }
    }
}

/// A worker's realization of one entry.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum ModelState {
    Fixed(f64),
    Jitter {
        sampler: Variate,
        rng: Stream,
    },
    Delay {
        sampler: Variate,
        rng: Stream,
    },
    MarkovSteps {
        factor: f64,
        sojourn: [Geometric; 2],
        slow: bool,
        left: u64,
        rng: Stream,
    },
    MarkovTime {
        factor: f64,
        sojourn: [Exp<f64>; 2],
        slow: bool,
        until: SimTime,
        rng: Stream,
    },
    Window {
        factor: f64,
        start: SimTime,
        end: SimTime,
    },
}

/// Sub-stream `1 + entry` of `worker`'s compute stream.
fn model_stream(seed: u64, worker: usize, entry: usize) -> Stream {
    let mut s = stream(seed, StreamKind::Compute, worker as u64);
    s.set_stream(1 + entry as u64);
    s
}

fn initial_slow(start: MarkovStart, fast: f64, slow: f64, rng: &mut Stream) -> bool {
    match start {
        MarkovStart::Fast => false,
        MarkovStart::Slow => true,
        MarkovStart::Stationary => rng.random_bool(slow / (fast + slow)),
    }
}

impl ModelState {
    /// The state of entry `entry` (a validated model) for `worker`; `None` for a trace, which
    /// the cluster handles itself.
    pub(crate) fn new(
        model: &StragglerModel,
        seed: u64,
        worker: usize,
        entry: usize,
        at: &dyn Fn(&str) -> String,
    ) -> Result<Option<ModelState>, ConfigError> {
        let state = match model {
            StragglerModel::Fixed { factor } => ModelState::Fixed(*factor),
            StragglerModel::Jitter(j) => ModelState::Jitter {
                sampler: Variate::new(j.distribution, j.mean, "mean", j.cv, j.shape, at)?,
                rng: model_stream(seed, worker, entry),
            },
            StragglerModel::Delay(j) => ModelState::Delay {
                sampler: Variate::new(j.distribution, j.mean_ms, "mean_ms", j.cv, j.shape, at)?,
                rng: model_stream(seed, worker, entry),
            },
            StragglerModel::Markov(m) => {
                let mut rng = model_stream(seed, worker, entry);
                match markov_clock(m, at)? {
                    Clock::Steps(f, s) => {
                        let geo = |mean: f64| {
                            Geometric::new(1.0 / mean).expect("a mean ≥ 1 gives p in (0, 1]")
                        };
                        let sojourn = [geo(f), geo(s)];
                        let slow = initial_slow(m.start, f, s, &mut rng);
                        let left = sojourn[usize::from(slow)]
                            .sample(&mut rng)
                            .saturating_add(1);
                        ModelState::MarkovSteps {
                            factor: m.factor,
                            sojourn,
                            slow,
                            left,
                            rng,
                        }
                    }
                    Clock::Seconds(f, s) => {
                        let exp = |mean: f64| Exp::new(1.0 / mean).expect("a positive mean");
                        let sojourn = [exp(f), exp(s)];
                        let slow = initial_slow(m.start, f, s, &mut rng);
                        let until = rng::sojourn(&sojourn[usize::from(slow)], &mut rng);
                        ModelState::MarkovTime {
                            factor: m.factor,
                            sojourn,
                            slow,
                            until,
                            rng,
                        }
                    }
                }
            }
            StragglerModel::Window(w) => {
                let (start, end) = window_bounds(w, at)?;
                ModelState::Window {
                    factor: w.factor,
                    start,
                    end,
                }
            }
            StragglerModel::Trace(_) => return Ok(None),
        };
        Ok(Some(state))
    }

    /// Applies this entry to a step starting at `now`: multiplies `factor`, adds to `delay_ms`.
    pub(crate) fn apply(&mut self, now: SimTime, factor: &mut f64, delay_ms: &mut f64) {
        match self {
            ModelState::Fixed(f) => *factor *= *f,
            ModelState::Jitter { sampler, rng } => *factor *= sampler.sample(rng),
            ModelState::Delay { sampler, rng } => *delay_ms += sampler.sample(rng),
            ModelState::MarkovSteps {
                factor: f,
                sojourn,
                slow,
                left,
                rng,
            } => {
                if *left == 0 {
                    *slow = !*slow;
                    *left = sojourn[usize::from(*slow)].sample(rng).saturating_add(1);
                }
                *left -= 1;
                if *slow {
                    *factor *= *f;
                }
            }
            ModelState::MarkovTime {
                factor: f,
                sojourn,
                slow,
                until,
                rng,
            } => {
                while *until <= now {
                    *slow = !*slow;
                    *until += rng::sojourn(&sojourn[usize::from(*slow)], rng);
                }
                if *slow {
                    *factor *= *f;
                }
            }
            ModelState::Window {
                factor: f,
                start,
                end,
            } => {
                if *start <= now && now < *end {
                    *factor *= *f;
                }
            }
        }
    }
}
