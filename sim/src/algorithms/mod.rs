//! The algorithms, one module each.
//!
//! Each is a state machine over its own events ([`crate::algorithm::Algorithm`]), touches parameters
//! only through the [`crate::store::ReplicaStore`], cites its paper, states the per-worker
//! procedure and its invariant.
//!
//! | `kind` | module | synchrony |
//! |--------|--------|-----------|
//! | `allreduce` | [`allreduce`] | synchronous: gradient ring all-reduce every step (optional buckets) |
//! | `local-sgd`, `post-local-sgd` | [`local_sgd`] | synchronous every `H` steps (post-local: every step during a warm-up) |
//! | `ps` | [`ps`] | asynchronous parameter server, sharded, optionally stale-synchronous |
//! | `dpsgd` | [`dpsgd`] | neighbour-synchronous averaging every step |
//! | `adpsgd` | [`adpsgd`] | asynchronous pairwise averaging |
//! | `sgp`, `overlap-sgp` | [`sgp`] | push-sum, synchronous or with delay bound τ |
//! | `dasgd` | [`dasgd`] | asynchronous, no averaging: every gradient applied everywhere |
//! | `lap-sgd`, `lpp-sgd` | [`lap`] | `P` lock-free processes per node, non-blocking in-place averaging |
//! | `diloco` | [`diloco`] | synchronous every `H` inner steps: outer Nesterov step on the averaged change |
//! | `rennala` | [`rennala`] | asynchronous workers, one server stepping on the first `B` gradients at its current point |
//! | `ringmaster` | [`ringmaster`] | asynchronous SGD with one server, ignoring (and stopping) gradients of delay ≥ `R` |
//! | `choco` | [`choco`] | neighbour-synchronous gossip of compressed differences of public copies |
//! | `slowmo` | [`slowmo`] | synchronous every `τ` base iterations (local SGD, SGP or all-reduce): exact average, slow momentum step |
//! | `async-local-sgd` | [`async_local_sgd`] | asynchronous: `H` inner steps, then the outer gradient to a server (Delayed Nesterov, DyLU) |
//! | `streaming-diloco` | [`streaming_diloco`] | DiLoCo one fragment at a time, every `H/P` steps, its all-reduce overlapping `τ` inner steps |
//!
//! ## The registry
//!
//! Every kind is listed once, in the `registry!` table below: its `kind` string, its variant of
//! [`AlgorithmKind`] and its options type. The options type implements [`AlgorithmSpec`]: how
//! the entry is checked against the topology and the model ([`AlgorithmSpec::validate`]), which
//! network nodes it needs besides the workers ([`AlgorithmSpec::extra_nodes`]) and how it is
//! built ([`AlgorithmSpec::build`]; running and resuming it is written once,
//! [`AlgorithmSpec::run`]). What every entry has (`label`) lives once, in [`AlgorithmConfig`].
//! Adding an algorithm is a module, an options type with its `AlgorithmSpec`, and one line in
//! the table (see the contributors' chapter of the book).
//!
//! ## Shared shapes
//!
//! What several methods share is written once, each shape with unit tests of the rules it owns;
//! a method keeps only what is its own:
//!
//! - [`neighbours::Exchange`]: the neighbour-synchronous exchange (the inbox by iteration and
//!   sender, the blocked/communicating wait, crashes and the stall report); a method on it is a
//!   [`neighbours::ExchangeMethod`], its part before the exchange and its combination:
//!   D-PSGD, CHOCO-SGD, gradient tracking, exact diffusion, D², Push-DIGing.
//! - [`star`]: one server and its workers (the protocol, the replies, the calculation stops,
//!   crashes and rejoins); a method on it is its rule for a landed gradient: Rennala,
//!   Ringmaster.
//! - [`retransmit::Retransmit`]: retransmission on loss after a timeout, a message lost for good
//!   handed back: the parameter server, asynchronous Local-SGD.
//! - [`ring`]: the bucketed ring all-reduce and its barrier: all-reduce SGD, local SGD, DiLoCo,
//!   SlowMo, Streaming DiLoCo, LAP-SGD.
//!
//! Learning-rate schedules, momentum, Nesterov and weight decay are the shared `[optimizer]`
//! section ([`crate::store::OptimizerConfig`], [`crate::store::lr`]), not options of an algorithm.

pub mod adpsgd;
pub mod allreduce;
pub mod async_local_sgd;
pub mod choco;
pub mod dasgd;
pub mod demo;
pub mod diloco;
pub mod dpsgd;
pub mod exact_diffusion;
pub mod fed;
pub mod gradient_tracking;
pub mod lap;
pub mod local_sgd;
pub mod muloco;
pub mod neighbours;
pub mod ps;
pub mod push_diging;
pub mod rennala;
pub mod retransmit;
pub mod ring;
pub mod ringmaster;
pub mod sgp;
pub mod slowmo;
pub mod sparseloco;
pub mod sparta;
pub mod star;
pub mod streaming_diloco;
#[cfg(test)]
mod testkit;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize, Serializer};

use crate::algorithm::{Algorithm, World};
use crate::engine::{Checkpointing, Observer, Outcome, RunConfig};
use crate::error::ConfigError;
use crate::net::topology::{Topology, TopologyConfig};
use crate::store::{OptimizerConfig, ReplicaStore};

pub use adpsgd::{AdPsgd, AdPsgdConfig, Averaging, Bound, Partner};
pub use allreduce::{AllReduceConfig, AllReduceSgd};
pub use async_local_sgd::{AsyncLocalSgd, AsyncLocalSgdConfig};
pub use choco::{Choco, ChocoConfig, ChocoScope};
pub use dasgd::{Broadcast, Dasgd, DasgdConfig};
pub use demo::{Demo, DemoConfig};
pub use diloco::{Diloco, DilocoConfig};
pub use dpsgd::{Dpsgd, DpsgdConfig, MixingWeights, UpdateOrder};
pub use exact_diffusion::{Combine, ExactDiffusion, ExactDiffusionConfig};
pub use fed::{FedAsyncConfig, FedAvgConfig, FedBuffConfig, Staleness, StalenessFn};
pub use gradient_tracking::{GradientTracking, GradientTrackingConfig};
pub use lap::{LapSgd, LapSgdConfig};
pub use local_sgd::{LocalSgd, LocalSgdConfig};
pub use muloco::MulocoConfig;
pub use ps::{ParameterServer, PsConfig, StepRule};
pub use push_diging::{PushDiging, PushDigingConfig};
pub use rennala::{Rennala, RennalaConfig};
pub use ringmaster::{Ringmaster, RingmasterConfig};
pub use sgp::{OverlapSgpConfig, SendRule, Sgp, SgpConfig};
pub use slowmo::{Slowmo, SlowmoConfig};
pub use sparseloco::SparselocoConfig;
pub use sparta::{Sparta, SpartaConfig};
pub use streaming_diloco::{FragmentPattern, StreamingDiloco, StreamingDilocoConfig};

/// What an entry's checks and its construction know besides its own options.
#[derive(Clone, Copy, Debug)]
pub struct Setup<'a> {
    /// The entry's kind (`local-sgd` and `post-local-sgd` share their options type, as do
    /// `lap-sgd` and `lpp-sgd`).
    pub kind: &'static str,
    /// Where the entry sits in the scenario, e.g. `algorithms[1]`: the prefix of the field
    /// paths its errors name.
    pub path: &'a str,
    /// The communication graph.
    pub topology: &'a Topology,
    /// Parameters per replica; `None` when the check runs before the model is known.
    pub params: Option<usize>,
    /// The model's weight matrices ([`ReplicaStore::matrices`]); empty when the check runs
    /// before the model is known, or the model has none.
    pub matrices: &'a [crate::store::Matrix],
    /// The model's layers ([`ReplicaStore::layers`]); empty when the check runs before the
    /// model is known.
    pub layers: &'a [crate::store::Layer],
    /// The model's running statistics ([`ReplicaStore::state`]); empty when it has none or
    /// the check runs before the model is known.
    pub state: &'a std::ops::Range<usize>,
}

impl Setup<'_> {
    /// The field path of `key` of this entry (`algorithms[1].servers`).
    pub fn at(&self, key: &str) -> String {
        format!("{}.{key}", self.path)
    }

    /// An error unless the topology is connected; `what` names the algorithm.
    pub fn require_connected(&self, what: &str) -> Result<(), ConfigError> {
        if self.topology.is_connected() {
            return Ok(());
        }
        Err(ConfigError::new(
            "topology.kind",
            format!(
                "{what} ({}) needs a connected topology; this one has components {}",
                self.path,
                self.topology.describe_components()
            ),
        ))
    }
}

/// The names of the measurements some algorithms take beyond what every algorithm reports
/// ([`AlgorithmSpec::declared`]): each is a summary entry and the claim metrics that read it.
pub mod measure {
    /// The age of every message mixed in, and of the oldest one at each mixing step (push-sum's
    /// bounded delay): `summary.json`'s `message_age` and `mix_age`.
    pub const MESSAGE_AGE: &str = "message_age";
    /// The range of the push-sum weights over the nodes: `series.csv`'s `weight_min` and
    /// `weight_max`.
    pub const PUSH_SUM_WEIGHT: &str = "pushsum_weight";
    /// The staleness between models of every gradient applied to a model it was not computed on
    /// (DASGD's `S_avg`, `S_max`): `summary.json`'s `dasgd` entry, named for the paper that
    /// defines it.
    pub const MODEL_STALENESS: &str = "model_staleness";
}

/// What a kind declares of itself to the reports, known without its options: the measurements it
/// takes beyond every algorithm's ([`measure`]), and the numbers of its options that a claim's
/// bound may name (Overlap-SGP's `tau`), with what they mean. Both empty by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Declared {
    /// Names from [`measure`].
    pub measures: &'static [&'static str],
    /// `(quantity, meaning)`: the quantity's name in a bound, and what it is for this kind
    /// ("its delay bound τ"); the value is [`AlgorithmSpec::quantity`].
    pub quantities: &'static [(&'static str, &'static str)],
}

/// One algorithm's entry in the registry: how its `[[algorithms]]` options are checked, what
/// network it needs and how it runs. Implemented by each options type.
pub trait AlgorithmSpec {
    /// What the kind declares of itself to the reports ([`Declared`]): nothing by default. The
    /// registry reads it without an entry ([`AlgorithmKind::declarations`]), so it is a function
    /// of the type.
    fn declared() -> Declared
    where
        Self: Sized,
    {
        Declared::default()
    }

    /// The value of a quantity of [`Declared::quantities`] for these options; `None` for the
    /// others (the default).
    fn quantity(&self, _name: &str) -> Option<f64> {
        None
    }

    /// Checks the options and the algorithm's needs against the topology and, when
    /// [`Setup::params`] is known, the model. `dasim validate` and `dasim run` call it for every
    /// entry before the first algorithm starts.
    fn validate(&self, setup: &Setup<'_>) -> Result<(), ConfigError>;

    /// Network nodes the algorithm needs besides the workers, numbered
    /// `workers..workers + extra_nodes()` (a parameter server's shards); 0 by default.
    fn extra_nodes(&self) -> usize {
        0
    }

    /// Store rows the algorithm adds after the workers' ([`ReplicaStore::add_rows`]): a
    /// parameter server's model, DiLoCo's global model and outer momentum. For the memory
    /// estimate; the default is one per extra node.
    fn extra_rows(&self) -> usize {
        self.extra_nodes()
    }

    /// Row-sized buffers the algorithm keeps for every worker besides its row, for the memory
    /// estimate: CHOCO-SGD's public copy and neighbourhood sum, PowerSGD's error feedback. 0 by
    /// default.
    fn buffers_per_worker(&self) -> usize {
        0
    }

    /// Whole-model messages worker `worker` posts on its own uplink per step without waiting
    /// for anything (no reply, no barrier, no bound on what it has in flight), for the memory
    /// estimate: where they come faster than the uplink carries them, they queue for the rest
    /// of the run. 0 by default: every other algorithm waits for something before it posts
    /// again, so what it has queued is bounded by the workers.
    fn unthrottled_posts(&self, _worker: usize, _topology: &Topology) -> usize {
        0
    }

    /// Whether the algorithm reads the communication graph (`[topology]`, or the entry's own);
    /// `true` by default. All-reduce SGD, local SGD and LAP/LPP-SGD run their ring over worker
    /// ids, the parameter server talks to its shards, and DASGD broadcasting to all uses no
    /// graph: an entry of theirs with its own `topology` is refused, and `summary.json` records
    /// no topology for them.
    fn uses_topology(&self) -> bool {
        true
    }

    /// Whether the algorithm runs with `optimizer` (the entry's own, else the scenario's):
    /// `Err((field, why))` names the `[optimizer]` field it cannot take and says why, and the
    /// scenario is refused. Every optimizer is accepted by default; gradient tracking needs
    /// plain SGD.
    fn optimizer_support(
        &self,
        _optimizer: &OptimizerConfig,
    ) -> Result<(), (&'static str, String)> {
        Ok(())
    }

    /// The hint of an [`AlgorithmSpec::optimizer_support`] refusal: how to give the entry an
    /// optimizer it takes.
    fn optimizer_hint(&self) -> &'static str {
        "give this entry its own [algorithms.optimizer] with kind = \"sgd\" and no momentum, weight decay or clipping"
    }

    /// Why the algorithm (as `kind`) steps blocks of a row that may cut a weight matrix, or
    /// `None` when its every step is on the whole row: Muon, which orthogonalizes whole
    /// matrices, is refused where it is `Some`. The parameter server with several shards and
    /// LPP-SGD's partial steps say why.
    fn block_steps(&self, _kind: &str) -> Option<&'static str> {
        None
    }

    /// Whether the algorithm accepts `[optimizer.schedule] progress = "node"`
    /// ([`crate::algorithm::World::lr_for`]): `Err` says why not, and the scenario is refused.
    /// Accepted by default: every update of the algorithm belongs to one worker (its own step, or
    /// a gradient applied to its replica), whose counter the schedule then follows.
    fn node_progress(&self) -> Result<(), &'static str> {
        Ok(())
    }

    /// Whether the algorithm handles a fault kind ([`crate::fault`]), as its documentation
    /// defines; `Err` says why not, and a scenario pairing them is refused. Delay and
    /// duplication are invisible to algorithms and never asked about. The default handles none.
    fn fault_support(
        &self,
        _kind: &'static str,
        _fault: crate::fault::FaultKind,
    ) -> crate::fault::FaultSupport {
        Err("its behaviour under this fault is not defined yet")
    }

    /// Builds the algorithm on `world` (whose topology [`AlgorithmSpec::validate`] accepted, and
    /// whose network has `workers + extra_nodes()` nodes), ready to run: any [`Algorithm`] whose
    /// state and events serialize is a [`Runnable`] (`Ok(Box::new(alg))`).
    ///
    /// `kind` is the entry's kind, for options types shared by two kinds.
    fn build(&self, kind: &'static str, world: &World<'_>) -> crate::Result<Box<dyn Runnable>>;

    /// Builds the algorithm ([`AlgorithmSpec::build`]) and runs it until a stop rule of
    /// `run_cfg` fires. Checkpoints are taken, and a run resumed, as `ckpt` says
    /// ([`crate::engine::run_checkpointed`]). Written once, for every kind.
    fn run(
        &self,
        kind: &'static str,
        world: &mut World<'_>,
        run_cfg: &RunConfig,
        observer: &mut dyn Observer,
        ckpt: Checkpointing<'_>,
    ) -> crate::Result<Outcome> {
        self.build(kind, world)?
            .run_checkpointed(world, run_cfg, observer, ckpt)
    }
}

/// An algorithm built for a run ([`AlgorithmSpec::build`]): what the engine runs, checkpoints
/// and resumes. Implemented for every [`Algorithm`] whose state and events serialize.
pub trait Runnable {
    /// Runs until a stop rule of `run_cfg` fires, with checkpoints as `ckpt` says
    /// ([`crate::engine::run_checkpointed`]).
    fn run_checkpointed(
        &mut self,
        world: &mut World<'_>,
        run_cfg: &RunConfig,
        observer: &mut dyn Observer,
        ckpt: Checkpointing<'_>,
    ) -> crate::Result<Outcome>;
}

impl<A> Runnable for A
where
    A: Algorithm + Serialize + DeserializeOwned,
    A::Event: Serialize + DeserializeOwned,
{
    fn run_checkpointed(
        &mut self,
        world: &mut World<'_>,
        run_cfg: &RunConfig,
        observer: &mut dyn Observer,
        ckpt: Checkpointing<'_>,
    ) -> crate::Result<Outcome> {
        crate::engine::run_checkpointed(self, world, run_cfg, observer, ckpt)
    }
}

/// The registry: one line per kind. Generates [`AlgorithmKind`] (the serde schema of an entry's
/// options, tagged by `kind`) and the one dispatch from a kind to its [`AlgorithmSpec`].
macro_rules! registry {
    ($( $(#[$doc:meta])* $kind:literal => $variant:ident($options:ident), )*) => {
        /// The prelude ([`crate::prelude`]) holds every kind's options type: this does not
        /// compile when one is missing there.
        #[allow(dead_code)]
        fn prelude_holds_every_kind() {
            $( let _: Option<crate::prelude::$options> = None; )*
        }

        /// An `[[algorithms]]` entry's kind and options (everything but the common fields of
        /// [`AlgorithmConfig`]).
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "kind", deny_unknown_fields)]
        pub enum AlgorithmKind {
            $( $(#[$doc])* #[serde(rename = $kind)] $variant($options), )*
        }

        impl AlgorithmKind {
            /// Every kind, in registry order.
            pub const KINDS: &[&str] = &[$( $kind ),*];

            /// The `kind` string.
            pub fn kind(&self) -> &'static str {
                match self {
                    $( AlgorithmKind::$variant(_) => $kind, )*
                }
            }

            /// The options, as their [`AlgorithmSpec`].
            pub fn spec(&self) -> &dyn AlgorithmSpec {
                match self {
                    $( AlgorithmKind::$variant(options) => options, )*
                }
            }

            /// What this entry's kind declares of itself ([`AlgorithmSpec::declared`]).
            pub fn declared(&self) -> Declared {
                match self {
                    $( AlgorithmKind::$variant(_) => <$options as AlgorithmSpec>::declared(), )*
                }
            }

            /// Every kind with what it declares, in registry order: the reports' table of which
            /// kinds take which measurement and give which quantity.
            pub fn declarations() -> Vec<(&'static str, Declared)> {
                vec![$( ($kind, <$options as AlgorithmSpec>::declared()), )*]
            }

            /// Serializes as one table: `kind`, then `label` (when set), then the options, then
            /// the entry's own `topology` and `optimizer` (when set).
            fn serialize_entry<S: Serializer>(
                &self,
                entry: &AlgorithmConfig,
                s: S,
            ) -> Result<S::Ok, S::Error> {
                let (label, topology, optimizer) = (&entry.label, &entry.topology, &entry.optimizer);
                match self {
                    $( AlgorithmKind::$variant(options) => Entry { kind: $kind, label, options, topology, optimizer }.serialize(s), )*
                }
            }
        }
    };
}

registry! {
    /// Synchronous data-parallel SGD with a ring all-reduce of gradients.
    "allreduce" => AllReduce(AllReduceConfig),
    /// Local SGD: `H` local steps, then a model all-reduce (Stich, 2019).
    "local-sgd" => LocalSgd(LocalSgdConfig),
    /// Post-local SGD: mini-batch SGD for a warm-up, then local SGD (Lin et al., 2020).
    "post-local-sgd" => PostLocalSgd(LocalSgdConfig),
    /// Asynchronous SGD with a sharded parameter server (A-PSGD; Lian et al., 2015).
    "ps" => Ps(PsConfig),
    /// Decentralized parallel SGD (Lian et al., 2017).
    "dpsgd" => Dpsgd(DpsgdConfig),
    /// Asynchronous decentralized parallel SGD (Lian et al., 2018).
    "adpsgd" => AdPsgd(AdPsgdConfig),
    /// Stochastic gradient push, synchronous (Assran et al., 2019).
    "sgp" => Sgp(SgpConfig),
    /// Overlap-SGP with delay bound τ (Assran et al., 2019).
    "overlap-sgp" => OverlapSgp(OverlapSgpConfig),
    /// Decentralized asynchronous SGD (Tosi & Theobald, 2023).
    "dasgd" => Dasgd(DasgdConfig),
    /// Local SGD meets asynchrony: LAP-SGD (Chatterjee et al.).
    "lap-sgd" => LapSgd(LapSgdConfig),
    /// Local SGD meets asynchrony: LPP-SGD, with partitioned updates (Chatterjee et al.).
    "lpp-sgd" => LppSgd(LapSgdConfig),
    /// DiLoCo: `H` inner steps, then an outer Nesterov step on the all-reduced change
    /// (Douillard et al., 2023).
    "diloco" => Diloco(DilocoConfig),
    /// Rennala SGD: one server, stepping on the first `B` gradients computed at its current
    /// point (Tyurin & Richtárik, 2023).
    "rennala" => Rennala(RennalaConfig),
    /// Ringmaster ASGD: asynchronous SGD ignoring, and stopping, gradients of delay ≥ `R`
    /// (Maranjyan, Tyurin & Richtárik, 2025).
    "ringmaster" => Ringmaster(RingmasterConfig),
    /// CHOCO-SGD: decentralized SGD gossiping compressed differences of public copies
    /// (Koloskova, Stich & Jaggi, 2019).
    "choco" => Choco(ChocoConfig),
    /// SlowMo: `τ` iterations of a base algorithm, an exact average, then a slow momentum step
    /// (Wang et al., 2020).
    "slowmo" => Slowmo(SlowmoConfig),
    /// Asynchronous Local-SGD: `H` inner steps, then the outer gradient to a server that steps
    /// at once (Delayed Nesterov, dynamic local steps; Liu et al., 2024).
    "async-local-sgd" => AsyncLocalSgd(AsyncLocalSgdConfig),
    /// FedAsync: clients push their models after `E` local steps; the server mixes each in
    /// with a staleness-scaled weight (Xie, Koyejo & Gupta, 2019).
    "fedasync" => FedAsync(FedAsyncConfig),
    /// FedBuff: clients push deltas after `E` local steps; the server steps on every `K`
    /// buffered ones (Nguyen et al., 2022).
    "fedbuff" => FedBuff(FedBuffConfig),
    /// FedAvg with a server: `M` clients a round, the first `K` pushes kept or a deadline
    /// (McMahan et al., 2017; FedScale's over-commitment).
    "fedavg" => FedAvg(FedAvgConfig),
    /// SPARTA: a local step, then a random share `p` of the parameters averaged (Beton et al.,
    /// 2025).
    "sparta" => Sparta(SpartaConfig),
    /// SparseLoCo: DiLoCo whose outer gradients are chunked top-k, 2-bit and all-gathered, with
    /// error feedback in place of the outer momentum (Sarfi et al., 2025).
    "sparseloco" => Sparseloco(SparselocoConfig),
    /// MuLoCo: DiLoCo with Muon inside and its outer gradients quantized with error feedback,
    /// all-gathered (Thérien et al., 2025).
    "muloco" => Muloco(MulocoConfig),
    /// DeMo: every step, the largest DCT coefficients of each worker's local momentum
    /// all-gathered and stepped by their sign (Peng, Quesnelle & Kingma, 2024).
    "demo" => Demo(DemoConfig),
    /// Gradient tracking (DSGT): decentralized SGD along a tracker of the average gradient,
    /// exact on heterogeneous data (Pu & Nedić, 2021).
    "gradient-tracking" => GradientTracking(GradientTrackingConfig),
    /// Exact diffusion: adapt, correct, combine with `(I + W)/2`; exact on heterogeneous data
    /// at D-PSGD's communication (Yuan et al., 2019).
    "exact-diffusion" => ExactDiffusion(ExactDiffusionConfig),
    /// D²: exact diffusion's correction combined with `W`, for `λ_min(W) > −1/3` (Tang et al.,
    /// 2018).
    "d2" => D2(ExactDiffusionConfig),
    /// Push-DIGing: gradient tracking over push-sum on directed, time-varying graphs (Nedić,
    /// Olshevsky & Shi, 2017).
    "push-diging" => PushDiging(PushDigingConfig),
    /// Streaming DiLoCo: DiLoCo one fragment at a time, overlapping its all-reduce with inner
    /// steps, outer gradients optionally quantized (Douillard et al., 2025).
    "streaming-diloco" => StreamingDiloco(StreamingDilocoConfig),
}

/// The serialized form of an entry. The tables come last, as TOML needs them after the values.
#[derive(Serialize)]
struct Entry<'a, T> {
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    label: &'a Option<String>,
    #[serde(flatten)]
    options: &'a T,
    #[serde(skip_serializing_if = "Option::is_none")]
    topology: &'a Option<TopologyConfig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    optimizer: &'a Option<OptimizerConfig>,
}

/// One entry of a scenario's `[[algorithms]]` list: what every entry has, and its kind and
/// options.
///
/// An entry may bring its own communication graph and optimizer, replacing the scenario's
/// `[topology]` and `[optimizer]` for this algorithm only (AD-PSGD on a bipartite ring beside SGP
/// on the exponential graph, DASGD at its own rate). Each replaces the whole section: keys the
/// entry leaves out take their defaults, not the scenario's values. Every algorithm still runs
/// on the same cluster realization.
///
/// ```toml
/// [[algorithms]]
/// kind = "overlap-sgp"
/// label = "osgp-tau-2"     # name in outputs (default: the kind)
/// tau = 2
/// topology = { kind = "one-peer-exponential" }   # default: the scenario's [topology]
/// optimizer = { lr = 0.05, momentum = 0.9 }      # default: the scenario's [optimizer]
/// ```
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct AlgorithmConfig {
    /// Name in outputs (default: the kind). Two entries of a scenario need different labels.
    #[serde(default)]
    pub label: Option<String>,
    /// This algorithm's communication graph, in place of the scenario's `[topology]`.
    #[serde(default)]
    pub topology: Option<TopologyConfig>,
    /// This algorithm's optimizer, in place of the scenario's `[optimizer]`.
    #[serde(default)]
    pub optimizer: Option<OptimizerConfig>,
    /// The kind and its options.
    #[serde(flatten)]
    pub algorithm: AlgorithmKind,
}

impl Serialize for AlgorithmConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.algorithm.serialize_entry(self, s)
    }
}

impl<T: Into<AlgorithmKind>> From<T> for AlgorithmConfig {
    fn from(algorithm: T) -> Self {
        AlgorithmConfig {
            label: None,
            topology: None,
            optimizer: None,
            algorithm: algorithm.into(),
        }
    }
}

impl AlgorithmConfig {
    /// The same entry with `label`.
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// The same entry on its own communication graph.
    pub fn with_topology(mut self, topology: TopologyConfig) -> Self {
        self.topology = Some(topology);
        self
    }

    /// The same entry with its own optimizer.
    pub fn with_optimizer(mut self, optimizer: OptimizerConfig) -> Self {
        self.optimizer = Some(optimizer);
        self
    }

    /// The communication graph this entry runs on: its own, else the scenario's.
    pub fn topology_or<'a>(&'a self, scenario: &'a TopologyConfig) -> &'a TopologyConfig {
        self.topology.as_ref().unwrap_or(scenario)
    }

    /// The optimizer this entry runs with: its own, else the scenario's.
    pub fn optimizer_or<'a>(&'a self, scenario: &'a OptimizerConfig) -> &'a OptimizerConfig {
        self.optimizer.as_ref().unwrap_or(scenario)
    }

    /// The short name of the kind (`allreduce`, `adpsgd`, …).
    pub fn kind(&self) -> &'static str {
        self.algorithm.kind()
    }

    /// The label used in outputs: the `label` field if set, else the kind.
    pub fn label(&self) -> String {
        self.label
            .clone()
            .unwrap_or_else(|| self.kind().to_string())
    }

    /// Whether the algorithm reads the communication graph ([`AlgorithmSpec::uses_topology`]).
    pub fn uses_topology(&self) -> bool {
        self.algorithm.spec().uses_topology()
    }

    /// Whole-model messages `worker` posts per step without waiting for anything, on
    /// `topology` ([`AlgorithmSpec::unthrottled_posts`]).
    pub fn unthrottled_posts(&self, worker: usize, topology: &Topology) -> usize {
        self.algorithm.spec().unthrottled_posts(worker, topology)
    }

    /// Network nodes the algorithm needs besides the workers ([`AlgorithmSpec::extra_nodes`]).
    /// The network of a run of this algorithm must have `workers + extra_nodes()` nodes.
    pub fn extra_nodes(&self) -> usize {
        self.algorithm.spec().extra_nodes()
    }

    /// Store rows the algorithm adds after the workers' ([`AlgorithmSpec::extra_rows`]), and
    /// the row-sized buffers it keeps per worker ([`AlgorithmSpec::buffers_per_worker`]), for
    /// `workers` workers.
    pub fn extra_rows(&self, workers: usize) -> usize {
        let spec = self.algorithm.spec();
        spec.extra_rows() + workers * spec.buffers_per_worker()
    }

    /// Checks that this algorithm handles every kind of `faults`: an error at the first entry
    /// whose kind it does not handle, saying why (`faults[1].kind`), naming the algorithm (at
    /// `path`, e.g. `algorithms[0]`). Delayed and duplicated messages every algorithm handles.
    pub fn check_fault_support(
        &self,
        faults: &[crate::fault::FaultConfig],
        path: &str,
    ) -> Result<(), ConfigError> {
        use crate::fault::FaultKind;
        for (i, f) in faults.iter().enumerate() {
            let kind = f.kind();
            if matches!(kind, FaultKind::Delay | FaultKind::Duplicate) {
                continue;
            }
            if let Err(why) = self.algorithm.spec().fault_support(self.kind(), kind) {
                return Err(ConfigError::new(
                    &format!("faults[{i}].kind"),
                    format!(
                        "{} ({path}, `{}`) does not handle {} faults: {why}",
                        self.kind(),
                        self.label(),
                        f.describe()
                    ),
                )
                .hint(
                    "remove this fault, or run it with an algorithm that handles it (see the \
                     algorithm's chapter of the book, \"Under faults\")",
                ));
            }
        }
        Ok(())
    }

    /// Checks the entry against `topology` (the graph it runs on: its own, built from
    /// [`AlgorithmConfig::topology`], else the scenario's) and, when `params` is known, the model;
    /// `path` is where it sits, e.g. `algorithms[1]`. An error about the entry's own topology or
    /// optimizer names the entry's field (`algorithms[1].topology.kind`), not the scenario's.
    pub fn validate(
        &self,
        topology: &Topology,
        path: &str,
        params: Option<usize>,
    ) -> Result<(), ConfigError> {
        self.validate_model(topology, path, params, &[], &[], 0..0)
    }

    /// [`AlgorithmConfig::validate`] knowing the model's weight matrices (PowerSGD's rank is
    /// checked against them), layers and running statistics (Streaming DiLoCo's fragments are
    /// made of whole layers) too.
    pub fn validate_model(
        &self,
        topology: &Topology,
        path: &str,
        params: Option<usize>,
        matrices: &[crate::store::Matrix],
        layers: &[crate::store::Layer],
        state: std::ops::Range<usize>,
    ) -> Result<(), ConfigError> {
        if self.label.as_deref().is_some_and(|l| l.trim().is_empty()) {
            return Err(
                ConfigError::new(&format!("{path}.label"), "a label cannot be empty").hint(
                    "leave label out to use the kind, or give a name such as \"adpsgd-ring\"",
                ),
            );
        }
        if let Some(optimizer) = &self.optimizer {
            optimizer.validate().map_err(|e| e.within(path))?;
        }
        if self.topology.is_some() && !self.uses_topology() {
            return Err(ConfigError::new(
                &format!("{path}.topology"),
                format!(
                    "{} ({path}) does not use a communication graph: its own topology would be ignored",
                    self.kind()
                ),
            )
            .hint("remove this entry's topology (all-reduce, local SGD and LAP-SGD run their ring over worker ids, the parameter server talks to its shards, DASGD with broadcast = \"all\" sends to every worker)"));
        }
        self.algorithm
            .spec()
            .validate(&Setup {
                kind: self.kind(),
                path,
                topology,
                params,
                matrices,
                layers,
                state: &state,
            })
            .map_err(|e| self.own_field(e, path))
    }

    /// Checks the optimizer this entry runs with (its own, else the scenario's) against the
    /// algorithm: `progress = "node"` is refused where no single worker's counter applies
    /// ([`AlgorithmSpec::node_progress`]). The error names the entry's own `optimizer` when it
    /// has one (`algorithms[1].optimizer.schedule.progress`), else the scenario's.
    pub fn check_optimizer(
        &self,
        optimizer: &OptimizerConfig,
        path: &str,
    ) -> Result<(), ConfigError> {
        let spec = self.algorithm.spec();
        spec.optimizer_support(optimizer).map_err(|(field, why)| {
            self.own_field(
                ConfigError::new(
                    &format!("optimizer.{field}"),
                    format!("{} ({path}) {why}", self.kind()),
                )
                .hint(spec.optimizer_hint()),
                path,
            )
        })?;
        if optimizer.kind == crate::store::OptimizerKind::Muon
            && let Some(why) = self.algorithm.spec().block_steps(self.kind())
        {
            return Err(self.own_field(
                ConfigError::new(
                    "optimizer.kind",
                    format!(
                        "{} ({path}) {why}, which cut the hidden matrices that Muon orthogonalizes whole",
                        self.kind()
                    ),
                )
                .hint("run this entry with another optimizer (its own [algorithms.optimizer], e.g. kind = \"adamw\")"),
                path,
            ));
        }
        if optimizer.schedule.progress != crate::store::lr::ScheduleProgress::Node {
            return Ok(());
        }
        self.algorithm.spec().node_progress().map_err(|why| {
            self.own_field(
                ConfigError::new(
                    "optimizer.schedule.progress",
                    format!(
                        "{} ({path}) cannot follow a node's own progress: {why}",
                        self.kind()
                    ),
                )
                .hint("leave progress out (or set progress = \"global\") for this algorithm; an [[algorithms]] entry may bring its own [algorithms.optimizer]"),
                path,
            )
        })
    }

    /// Moves an error about a `topology.*` or `optimizer.*` field under this entry (`path`)
    /// when the entry brings its own section: the value to fix is the entry's.
    pub fn own_field(&self, e: ConfigError, path: &str) -> ConfigError {
        let section = match e.path.0.first() {
            Some(crate::error::PathSeg::Key(k)) => k.as_str(),
            _ => return e,
        };
        let own = match section {
            "topology" => self.topology.is_some(),
            "optimizer" => self.optimizer.is_some(),
            _ => false,
        };
        if own { e.within(path) } else { e }
    }
}

macro_rules! into_kind {
    ($( $options:ty => $variant:ident ),*) => {
        $( impl From<$options> for AlgorithmKind {
            fn from(options: $options) -> Self {
                AlgorithmKind::$variant(options)
            }
        } )*
    };
}

// The options types that belong to one kind only; `LocalSgdConfig` and `LapSgdConfig` name their
// variant (`AlgorithmKind::PostLocalSgd(..)`, `AlgorithmKind::LppSgd(..)`).
into_kind!(
    AllReduceConfig => AllReduce,
    PsConfig => Ps,
    DpsgdConfig => Dpsgd,
    AdPsgdConfig => AdPsgd,
    SgpConfig => Sgp,
    OverlapSgpConfig => OverlapSgp,
    DasgdConfig => Dasgd,
    DilocoConfig => Diloco,
    RennalaConfig => Rennala,
    RingmasterConfig => Ringmaster,
    AsyncLocalSgdConfig => AsyncLocalSgd,
    StreamingDilocoConfig => StreamingDiloco,
    SlowmoConfig => Slowmo,
    ChocoConfig => Choco,
    GradientTrackingConfig => GradientTracking,
    ExactDiffusionConfig => ExactDiffusion,
    PushDigingConfig => PushDiging,
    FedAsyncConfig => FedAsync,
    FedBuffConfig => FedBuff,
    FedAvgConfig => FedAvg,
    SpartaConfig => Sparta,
    SparselocoConfig => Sparseloco,
    MulocoConfig => Muloco,
    DemoConfig => Demo
);

/// Runs the algorithm `cfg` describes on `world` until a stop rule of `run_cfg` fires. The
/// entry is checked against the world's topology and model first (errors name `algorithms`;
/// a scenario checks every entry, with its index, before the first one runs).
pub fn run_algorithm(
    cfg: &AlgorithmConfig,
    world: &mut World<'_>,
    run_cfg: &RunConfig,
    observer: &mut dyn Observer,
) -> crate::Result<Outcome> {
    run_algorithm_checkpointed(cfg, world, run_cfg, observer, Checkpointing::default())
}

/// [`run_algorithm`] with checkpoints taken, or continuing from one, as `ckpt` says
/// ([`crate::engine::checkpoint`]). To resume, `world` must be built from the same scenario as
/// the checkpointed run's, with the same metrics options and faults.
pub fn run_algorithm_checkpointed(
    cfg: &AlgorithmConfig,
    world: &mut World<'_>,
    run_cfg: &RunConfig,
    observer: &mut dyn Observer,
    ckpt: Checkpointing<'_>,
) -> crate::Result<Outcome> {
    cfg.check_optimizer(&world.optimizer, "algorithms")?;
    let spec = cfg.algorithm.spec();
    let matrices = world.store.matrices();
    let layers = world.store.layers();
    spec.validate(&Setup {
        kind: cfg.kind(),
        path: "algorithms",
        topology: &world.topology,
        params: Some(world.store.num_params()),
        matrices: &matrices,
        layers: &layers,
        state: &world.store.state(),
    })?;
    spec.run(cfg.kind(), world, run_cfg, observer, ckpt)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The declarations cover every kind in registry order, name only measurements of
    /// [`measure`], and every quantity a kind declares has a value in its options.
    #[test]
    fn declarations_cover_the_registry() {
        let declared = AlgorithmKind::declarations();
        let kinds: Vec<&str> = declared.iter().map(|(k, _)| *k).collect();
        assert_eq!(kinds, AlgorithmKind::KINDS);
        let known = [
            measure::MESSAGE_AGE,
            measure::PUSH_SUM_WEIGHT,
            measure::MODEL_STALENESS,
        ];
        for (kind, d) in &declared {
            for m in d.measures {
                assert!(
                    known.contains(m),
                    "{kind} declares the unknown measurement {m}"
                );
            }
        }
        let find = |k: &str| declared.iter().find(|(kind, _)| *kind == k).unwrap().1;
        assert_eq!(find("dasgd").measures, [measure::MODEL_STALENESS]);
        assert!(find("sgp").measures.contains(&measure::MESSAGE_AGE));
        assert!(find("allreduce").measures.is_empty());
        assert_eq!(find("overlap-sgp").quantities.len(), 1);
        let osgp = AlgorithmKind::OverlapSgp(OverlapSgpConfig {
            tau: 3,
            ..OverlapSgpConfig::default()
        });
        assert_eq!(osgp.declared(), find("overlap-sgp"));
        assert_eq!(osgp.spec().quantity("tau"), Some(3.0));
        assert_eq!(osgp.spec().quantity("gap"), None);
        let sgp = AlgorithmKind::Sgp(SgpConfig::default());
        assert_eq!(sgp.spec().quantity("tau"), None);
    }
}
