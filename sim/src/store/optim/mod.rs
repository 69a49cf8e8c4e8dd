//! The optimizer rules, one file each, and their registry.
//!
//! | kind | file | state per row and coordinate |
//! |------|------|------------------------------|
//! | `sgd` (default) | [`sgd`] | a momentum buffer, with `momentum > 0` |
//! | `adam` | [`adam`] | two moments and a step count |
//! | `adamw` | [`adamw`] | Adam's |
//! | `lars` | [`lars`] | a momentum buffer, with `momentum > 0` |
//! | `muon` | [`muon`] | its momentum on the hidden matrices, Adam's two moments and step count elsewhere |
//!
//! The outer optimizers of the local-update family (DiLoCo's outer SGD, SlowMo's slow
//! momentum, Delayed Nesterov) run on whole rows instead and are in [`outer`], one file each.
//!
//! Shared parts: [`momentum`] (heavy-ball and Nesterov), [`decay`] (the L2 term and the
//! decoupled decay), [`clip`] (clipping by global norm, applied by the store before any rule).
//!
//! A rule's file holds its settings (a struct built from the `[optimizer]` section), the keys it
//! reads, the state it keeps, its checks and its update — written once, generic over the
//! [`Float`] it computes in. The exact reference store runs it in `f64`
//! ([`crate::store::ReferenceStore`]), the burn store's rows in `f32` (`dasim_models::rows`),
//! and the conformance suite's oracle in `f64` ([`crate::store::conformance`]); the rule fixes
//! the order of every operation, so each gets the same bits as a loop of its own written in that
//! order.
//!
//! # Adding a rule
//!
//! 1. **A file here**, `optim/<name>.rs`: its formula in the module documentation, its settings
//!    as a struct generic over [`Float`], and `impl` [`Rule`]: [`Rule::KEYS`], the optional
//!    keys of `[optimizer]` it reads (any other kind refuses them at their field);
//!    [`Rule::buffers`], the state it keeps per row ([`Buffers`]: a first buffer, a second, a
//!    step count), which the stores allocate and hand back to it at every step ([`State`]);
//!    [`Rule::validate`], the checks only it makes; and [`Rule::step`], its update of the
//!    coordinates of one step. Build the per-coordinate arithmetic from [`momentum`] and
//!    [`decay`] where they apply. A new key is a field of [`OptimizerConfig`] (with its range
//!    check there).
//! 2. **Its line in the registry** below: `Name = "name" => file::Type,`, with the variant's
//!    documentation. It generates the [`OptimizerKind`] variant (the scenario's `kind`), its
//!    name, the field checks and the dispatch of [`step`]; every store and the conformance
//!    oracle then run it.
//! 3. **Tests**: a step worked by hand in the file; the conformance suite's rule checks
//!    (`check_any_rule` in `conformance.rs`) with a configuration of the new kind, which run it
//!    on every store; a scenario in `tests/integration/optimizers.rs`.
//!
//! The book's contributors' chapter (*Adding an optimizer rule*) walks through it, with a rule
//! written in full (RMSprop, compiled and tested in this module's `example.rs`).

pub mod adam;
pub mod adamw;
pub mod clip;
pub mod decay;
#[cfg(test)]
mod example;
mod float;
pub mod lars;
pub mod momentum;
pub mod muon;
pub mod outer;
pub mod sgd;

use std::ops::Range;

use serde::{Deserialize, Serialize};

pub use adam::Adam;
pub use adamw::AdamW;
pub use float::{Count, Float};
pub use lars::Lars;
pub use muon::Muon;
pub use sgd::Sgd;

use crate::error::ConfigError;
use crate::store::{Hidden, OptimizerConfig, ReplicaStore};

/// The state a rule keeps per row and coordinate; a store allocates what is set (zero at the
/// start and for an added row), moves it with its row, and hands it to every step ([`State`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Buffers {
    /// A first buffer: SGD's and LARS's momentum, Adam's first moment.
    pub first: bool,
    /// A second buffer: Adam's second moment.
    pub second: bool,
    /// A step count: Adam's `t`.
    pub counts: bool,
}

impl Buffers {
    /// No state.
    pub const NONE: Buffers = Buffers {
        first: false,
        second: false,
        counts: false,
    };

    /// All three.
    pub const ALL: Buffers = Buffers {
        first: true,
        second: true,
        counts: true,
    };

    /// Numbers kept per parameter and row (for memory estimates).
    pub fn count(self) -> u64 {
        u64::from(self.first) + u64::from(self.second) + u64::from(self.counts)
    }
}

/// One row's optimizer state on the coordinates of a step, as [`Rule::step`] receives it: a
/// buffer is `Some` where the rule's [`Buffers`] ask for it (a store may hand a first buffer to
/// a rule that keeps none for its settings: the step is the same).
pub struct State<'a, F, C> {
    /// The first buffer ([`Buffers::first`]).
    pub first: Option<&'a mut [F]>,
    /// The second buffer ([`Buffers::second`]).
    pub second: Option<&'a mut [F]>,
    /// The step counts ([`Buffers::counts`]).
    pub counts: Option<&'a mut [C]>,
}

/// The model's shape as the rules see it, which a store builds once ([`Layout::of`]): its
/// layers' coordinate ranges (for a rule that scales by layer, LARS) and its hidden layers'
/// weight matrices (for a rule that steps whole matrices, Muon).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Layout {
    /// The layers' coordinate ranges in a row ([`crate::store::ReplicaStore::layers`]).
    pub layers: Vec<Range<usize>>,
    /// The hidden layers' weight matrices ([`crate::store::ReplicaStore::hidden_matrices`]).
    pub hidden: Vec<Hidden>,
}

impl Layout {
    /// The layout of the store `s`.
    pub fn of<S: ReplicaStore + ?Sized>(s: &S) -> Self {
        Layout {
            layers: s.layers().into_iter().map(|l| l.params).collect(),
            hidden: s.hidden_matrices(),
        }
    }

    /// One layer holding the coordinates `0..dim`, no hidden matrices.
    pub fn flat(dim: usize) -> Self {
        Layout {
            layers: std::iter::once(0..dim).collect(),
            hidden: Vec::new(),
        }
    }
}

/// One step of a rule, as [`Rule::step`] receives it: with rate `lr` on the coordinates `block`
/// of a row, `x`, its `state` and the gradient `g` (already clipped) are those coordinates;
/// `layout` is the model's shape in the whole row (for a rule that scales by layer or steps
/// whole matrices).
pub struct Step<'a, F, C> {
    /// The row's coordinates `block`.
    pub x: &'a mut [F],
    /// The row's optimizer state on those coordinates.
    pub state: State<'a, F, C>,
    /// The gradient on those coordinates, already clipped.
    pub g: &'a [F],
    /// The rate.
    pub lr: f64,
    /// The coordinates of the row that `x` holds.
    pub block: Range<usize>,
    /// The model's layers and hidden matrices in the whole row.
    pub layout: &'a Layout,
}

/// An optimizer rule: what its line in the registry names.
pub trait Rule {
    /// The optional keys of `[optimizer]` this rule reads (`beta1`, `eta`, `nesterov`, …); a
    /// kind that does not list a key refuses it at its field. The keys every rule reads (`lr`,
    /// `momentum`, `weight_decay`, `clip_norm`, the schedule) are not listed.
    const KEYS: &'static [&'static str];

    /// The state it keeps per row for the settings `opt`.
    fn buffers(opt: &OptimizerConfig) -> Buffers;

    /// The checks only this rule makes, after the keys' own ranges (nothing by default).
    fn validate(_opt: &OptimizerConfig) -> Result<(), ConfigError> {
        Ok(())
    }

    /// One step on the coordinates of a row that `s` holds ([`Step`]).
    fn step<F: Float, C: Count>(opt: &OptimizerConfig, s: Step<'_, F, C>);
}

/// The registry: one line per rule. Generates [`OptimizerKind`] (its serde names are the
/// scenario's `kind`), [`OptimizerKind::ALL`], `name`, `keys`, `buffers`, `validate` and
/// [`step`].
macro_rules! rules {
    ($($(#[$meta:meta])* $variant:ident = $name:literal => $rule:ty,)*) => {
        /// Which update rule the store applies ([`crate::store::optimizer`]; one file each in
        /// [`crate::store::optim`]).
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub enum OptimizerKind {
            $($(#[$meta])* #[serde(rename = $name)] $variant,)*
        }

        impl OptimizerKind {
            /// Every kind, in the registry's order.
            pub const ALL: &'static [OptimizerKind] = &[$(OptimizerKind::$variant),*];

            /// The name used in scenario files.
            pub fn name(self) -> &'static str {
                match self {
                    $(OptimizerKind::$variant => $name,)*
                }
            }

            /// The optional keys of `[optimizer]` this kind reads ([`Rule::KEYS`]).
            pub fn keys(self) -> &'static [&'static str] {
                match self {
                    $(OptimizerKind::$variant => <$rule as Rule>::KEYS,)*
                }
            }

            /// The state this kind keeps per row with the settings `opt` ([`Rule::buffers`]).
            pub fn buffers(self, opt: &OptimizerConfig) -> Buffers {
                match self {
                    $(OptimizerKind::$variant => <$rule as Rule>::buffers(opt),)*
                }
            }

            /// This kind's own checks of `opt` ([`Rule::validate`]).
            pub fn validate(self, opt: &OptimizerConfig) -> Result<(), ConfigError> {
                match self {
                    $(OptimizerKind::$variant => <$rule as Rule>::validate(opt),)*
                }
            }
        }

        /// One step of the rule of `opt` ([`Rule::step`]), in the float type of the store.
        #[inline]
        pub fn step<F: Float, C: Count>(opt: &OptimizerConfig, s: Step<'_, F, C>) {
            match opt.kind {
                $(OptimizerKind::$variant => <$rule as Rule>::step(opt, s),)*
            }
        }
    };
}

rules! {
    /// SGD with optional (Nesterov) momentum and weight decay.
    #[default]
    Sgd = "sgd" => sgd::Sgd,
    /// Adam, with bias correction by the row's own step count.
    Adam = "adam" => adam::Adam,
    /// AdamW: Adam with weight decay decoupled from the gradient (Loshchilov & Hutter 2019).
    AdamW = "adamw" => adamw::AdamW,
    /// LARS: layer-wise trust ratio, momentum and weight decay as You et al. (2017) define them.
    Lars = "lars" => lars::Lars,
    /// Muon: momentum orthogonalized by Newton–Schulz on the hidden layers' matrices, AdamW on
    /// every other parameter (Jordan et al. 2024).
    Muon = "muon" => muon::Muon,
}

impl OptimizerKind {
    /// The kinds that read `key`, as a validation message lists them: `"adam" or "adamw"`.
    pub(crate) fn readers(key: &str) -> String {
        let names: Vec<String> = OptimizerKind::ALL
            .iter()
            .filter(|k| k.keys().contains(&key))
            .map(|k| format!("\"{}\"", k.name()))
            .collect();
        names.join(" or ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_names_every_kind_once_and_round_trips() {
        let names: Vec<&str> = OptimizerKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names, ["sgd", "adam", "adamw", "lars", "muon"]);
        for &kind in OptimizerKind::ALL {
            let text = format!("kind = \"{}\"", kind.name());
            #[derive(Deserialize)]
            struct K {
                kind: OptimizerKind,
            }
            let back: K = toml::from_str(&text).unwrap();
            assert_eq!(back.kind, kind);
        }
        assert_eq!(OptimizerKind::default(), OptimizerKind::Sgd);
        assert_eq!(
            OptimizerKind::readers("beta1"),
            "\"adam\" or \"adamw\" or \"muon\""
        );
        assert_eq!(OptimizerKind::readers("nesterov"), "\"sgd\" or \"muon\"");
    }

    /// The same rule in `f32` and `f64` from the same inputs: the same step within `f32`'s
    /// precision, for every kind (the stores' agreement, in small).
    #[test]
    fn every_rule_agrees_in_both_widths() {
        let p = 6;
        // Two layers, the second a hidden 2 × 2 matrix (Muon's; the first goes to its AdamW).
        let matrix = crate::store::Matrix {
            start: 2,
            rows: 2,
            cols: 2,
        };
        let layout = Layout {
            layers: vec![0..2, 2..6],
            hidden: vec![Hidden::dense(matrix)],
        };
        for &kind in OptimizerKind::ALL {
            let opt = OptimizerConfig {
                kind,
                momentum: match kind {
                    OptimizerKind::Adam | OptimizerKind::AdamW => 0.0,
                    _ => 0.9,
                },
                weight_decay: 0.01,
                ..Default::default()
            };
            opt.validate().unwrap();
            let g: Vec<f64> = (0..p).map(|k| (k as f64 * 0.7).sin()).collect();
            let mut x: Vec<f64> = (0..p).map(|k| (k as f64 * 0.3).cos()).collect();
            let mut x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
            let g32: Vec<f32> = g.iter().map(|&v| v as f32).collect();
            let (mut a, mut b, mut t) = (vec![0.0; p], vec![0.0; p], vec![0u64; p]);
            let (mut a32, mut b32, mut t32) = (vec![0.0f32; p], vec![0.0f32; p], vec![0u32; p]);
            for _ in 0..3 {
                let st = State {
                    first: Some(&mut a[..]),
                    second: Some(&mut b[..]),
                    counts: Some(&mut t[..]),
                };
                step(
                    &opt,
                    Step {
                        x: &mut x,
                        state: st,
                        g: &g,
                        lr: 0.1,
                        block: 0..p,
                        layout: &layout,
                    },
                );
                let st = State {
                    first: Some(&mut a32[..]),
                    second: Some(&mut b32[..]),
                    counts: Some(&mut t32[..]),
                };
                step(
                    &opt,
                    Step {
                        x: &mut x32,
                        state: st,
                        g: &g32,
                        lr: 0.1,
                        block: 0..p,
                        layout: &layout,
                    },
                );
            }
            for k in 0..p {
                let d = (x[k] - f64::from(x32[k])).abs();
                assert!(d < 1e-5, "{}: coordinate {k} differs by {d}", kind.name());
            }
            assert!(x[0] != (0.0f64).cos(), "{}: the rule moved x", kind.name());
        }
    }
}
