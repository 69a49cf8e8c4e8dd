//! The options of AD-PSGD, their checks against the scenario, and the state machine built from
//! them.
//!
//! Everything here runs before the first event: an option that cannot work on the scenario's
//! topology or network is refused with a message that names it, so that the event handlers never
//! meet a setting they cannot honour.

use serde::{Deserialize, Serialize};

use super::AdPsgd;
use super::schedule::phone_book;
use crate::algorithm::World;
use crate::algorithms::{AlgorithmSpec, Runnable, Setup};
use crate::clock::time::TimeUnit;
use crate::engine::SimTime;
use crate::error::ConfigError;
use crate::fault::{FaultKind, FaultSupport};

/// How an active worker picks its averaging partner.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Partner {
    /// Uniformly at random among its neighbours.
    #[default]
    Uniform,
    /// Its neighbours in turn, in increasing order.
    Cycle,
    /// The reference's fixed rotation over the bipartite exponential graph
    /// (`DynamicBipartiteExponentialGraph` with `BilatPushPull`): in round `k` every worker
    /// sends to `i + o_k` and hears from `i − o_k` only, `o_k` the `k`-th offset of the phone
    /// book in turn ([`phone_book`]); a round of an active worker ends when its passive has
    /// taken its model and the reply it is scheduled to hear has come.
    Schedule,
}

/// When averaging happens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Averaging {
    /// In a communication thread beside the computation, its gossip loop running freely (the
    /// paper's implementation and the reference's; optionally bounded, see
    /// [`AdPsgdConfig::max_averagings_per_step`] and [`AdPsgdConfig::max_steps_per_averaging`]).
    #[default]
    Thread,
    /// Once per gradient step, between computing and applying the gradient (the paper's
    /// Algorithm 1 read literally).
    PerStep,
}

/// A bound on how far one side of thread mode may run ahead of the other: a positive count, or
/// `"unbounded"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Bound {
    /// At most this many (at least 1).
    At(u32),
    /// No bound.
    Unbounded(Unbounded),
}

/// The word `"unbounded"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unbounded {
    /// No bound.
    Unbounded,
}

impl Bound {
    /// No bound.
    pub const UNBOUNDED: Bound = Bound::Unbounded(Unbounded::Unbounded);

    /// The count, `None` when unbounded.
    pub fn count(self) -> Option<u32> {
        match self {
            Bound::At(k) => Some(k),
            Bound::Unbounded(_) => None,
        }
    }

    fn is_unbounded(&self) -> bool {
        self.count().is_none()
    }

    fn is_one(&self) -> bool {
        *self == Bound::At(1)
    }
}

impl Default for Bound {
    fn default() -> Self {
        Bound::UNBOUNDED
    }
}

fn one() -> Bound {
    Bound::At(1)
}

/// Options of AD-PSGD.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdPsgdConfig {
    /// `uniform` (default) or `cycle`.
    #[serde(default)]
    pub partner: Partner,
    /// `thread` (default) or `per-step`.
    #[serde(default)]
    pub averaging: Averaging,
    /// Thread mode: the communication thread of an active worker starts at most this many
    /// averagings between two gradient applications of its computation (how far the gossip loop
    /// may run ahead of the computation). Default `"unbounded"`: the gossip loop runs freely, as
    /// in the reference.
    #[serde(default, skip_serializing_if = "Bound::is_unbounded")]
    pub max_averagings_per_step: Bound,
    /// Thread mode: the computation of an active worker applies at most this many gradients
    /// between two completed averagings of its communication thread; a gradient beyond waits for
    /// the averaging in flight (how far the computation may run ahead of the gossip loop).
    /// Default 1: the reference hands one gradient at a time to its gossip thread, which applies
    /// it between two averagings. `"unbounded"`: the computation never waits.
    #[serde(default = "one", skip_serializing_if = "Bound::is_one")]
    pub max_steps_per_averaging: Bound,
    /// Under `[[faults]]`: how long an active worker waits for its partner's reply before it
    /// gives up and asks another neighbour, milliseconds (default: four round trips of a model
    /// on an idle network, `8·(S/B + α)`). Unused without faults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partner_timeout_ms: Option<f64>,
    /// Host time of one averaging besides its transfers, microseconds (default 0): the
    /// reference's gossip loop copies the model into its send buffer under a lock, and mixes
    /// the reply back, every iteration. An active worker's request leaves this long after its
    /// averaging starts; a passive worker's reply leaves this long after the request arrives,
    /// one request at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub averaging_overhead_us: Option<f64>,
}

impl Default for AdPsgdConfig {
    fn default() -> Self {
        AdPsgdConfig {
            partner: Partner::default(),
            averaging: Averaging::default(),
            max_averagings_per_step: Bound::UNBOUNDED,
            max_steps_per_averaging: one(),
            partner_timeout_ms: None,
            averaging_overhead_us: None,
        }
    }
}

impl AdPsgdConfig {
    /// The host time of one averaging ([`AdPsgdConfig::averaging_overhead_us`]; 0 by default).
    pub fn averaging_overhead(&self) -> SimTime {
        self.averaging_overhead_us
            .map_or(SimTime::ZERO, SimTime::from_micros_f64)
    }

    /// The partner timeout on `world`'s network: the option, else `8·(S/B + α)` (at least
    /// 1 µs).
    pub fn partner_timeout(&self, world: &World<'_>) -> SimTime {
        match self.partner_timeout_ms {
            Some(ms) => SimTime::from_millis_f64(ms),
            None => {
                let one_way = world
                    .net
                    .serialization_time(world.model_bytes + world.net.header_bytes())
                    .saturating_add(world.net.latency());
                one_way.scale(8.0).max(SimTime::from_nanos(1_000))
            }
        }
    }
}

impl AdPsgdConfig {
    /// `partner = "schedule"` needs the thread and the reference's graph: the odd workers
    /// active, and every pair the rotation schedules an edge.
    fn check_schedule(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        let at = setup.at("partner");
        if self.averaging != Averaging::Thread {
            return Err(ConfigError::new(
                &at,
                "partner = \"schedule\" is the reference's gossip loop: it needs averaging = \"thread\"",
            )
            .hint("per-step averaging draws a partner per step: use partner = \"uniform\" or \"cycle\""));
        }
        let topology = setup.topology;
        let n = topology.len();
        let hint = "the schedule is the reference's rotation over its bipartite exponential graph: \
                    set [topology] kind = \"bipartite-exponential\" (or this entry's topology)";
        let sides = topology.bipartition();
        let odd_active = sides
            .as_ref()
            .is_some_and(|s| s.iter().enumerate().all(|(i, &a)| a == (i % 2 == 1)));
        if n % 2 == 1 || !odd_active {
            return Err(ConfigError::new(
                &at,
                format!(
                    "partner = \"schedule\" ({}) needs the odd workers active and the even ones \
                     passive, as in the reference; this topology ({n} workers) splits them otherwise",
                    setup.path
                ),
            )
            .hint(hint));
        }
        for off in phone_book(n) {
            for a in (1..n).step_by(2) {
                for (i, j) in [(a, (a + off) % n), ((a + n - off) % n, a)] {
                    if !topology.neighbors(i).contains(&j) {
                        return Err(ConfigError::new(
                            &at,
                            format!(
                                "partner = \"schedule\" ({}) pairs workers {i} and {j}, which this \
                                 topology does not link",
                                setup.path
                            ),
                        )
                        .hint(hint));
                    }
                }
            }
        }
        Ok(())
    }
}

impl AlgorithmSpec for AdPsgdConfig {
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError> {
        setup.require_connected("AD-PSGD")?;
        if setup.topology.bipartition().is_none() {
            return Err(ConfigError::new(
                "topology.kind",
                format!("AD-PSGD ({}) needs a bipartite topology (active/passive split), but this graph has an odd cycle", setup.path),
            )
            .hint("a ring with an even number of workers, a hypercube or an even torus is bipartite"));
        }
        for (key, bound, default) in [
            (
                "max_averagings_per_step",
                self.max_averagings_per_step,
                Bound::UNBOUNDED,
            ),
            (
                "max_steps_per_averaging",
                self.max_steps_per_averaging,
                one(),
            ),
        ] {
            if bound == Bound::At(0) {
                return Err(ConfigError::new(
                    &setup.at(key),
                    format!("{key} must be a positive number or \"unbounded\", got 0"),
                )
                .hint("1 is the tightest bound"));
            }
            if self.averaging == Averaging::PerStep && bound != default {
                return Err(ConfigError::new(
                    &setup.at(key),
                    format!(
                        "{key} bounds the communication thread: it needs averaging = \"thread\""
                    ),
                )
                .hint(
                    "per-step averaging makes exactly one averaging per step of an active worker",
                ));
            }
        }
        if let Some(us) = self.averaging_overhead_us {
            SimTime::checked_from_f64(us, TimeUnit::Micros, &setup.at("averaging_overhead_us"))
                .map_err(|e| {
                    e.hint("the host time of one averaging besides its transfers; 0 (the default) charges none")
                })?;
        }
        if self.partner == Partner::Schedule {
            self.check_schedule(setup)?;
        }
        if let Some(ms) = self.partner_timeout_ms {
            let at = setup.at("partner_timeout_ms");
            if !(ms.is_finite() && ms > 0.0) {
                return Err(ConfigError::new(
                    &at,
                    format!(
                        "partner_timeout_ms must be a positive number of milliseconds, got {ms}"
                    ),
                )
                .hint(
                    "leave it out for the default, four round trips of a model on an idle network",
                ));
            }
            SimTime::checked_nonzero_from_f64(ms, TimeUnit::Millis, &at)?;
        }
        Ok(())
    }

    fn fault_support(&self, _kind: &'static str, fault: FaultKind) -> FaultSupport {
        if self.partner == Partner::Schedule
            && !matches!(fault, FaultKind::Delay | FaultKind::Duplicate)
        {
            return Err(
                "with partner = \"schedule\" every round waits for the workers scheduled in it, \
                 as in the reference, which has no failure handling: one worker down or one \
                 message lost stops the rotation of every worker for good (delayed and \
                 duplicated messages are fine)",
            );
        }
        // Every kind: see the module's "Under faults".
        Ok(())
    }

    fn build(&self, _kind: &'static str, world: &World<'_>) -> crate::Result<Box<dyn Runnable>> {
        let sides = world.topology.bipartition().ok_or_else(|| {
            ConfigError::new("topology.kind", "AD-PSGD needs a bipartite topology")
        })?;
        let mut alg = AdPsgd::new(self, &sides, world.seed);
        if world.faults().configured() {
            alg = alg.with_timeout(self.partner_timeout(world));
        }
        Ok(Box::new(alg))
    }
}
