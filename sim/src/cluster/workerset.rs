//! Sets of workers, as a scenario names them.
//!
//! Several options apply to "some workers": straggler models, device groups, NIC overrides,
//! congestion scopes, the active side of a bipartite graph. All of them take a [`WorkerSet`],
//! written in one of five ways:
//!
//! ```toml
//! workers = [1, 5, 7]              # these indices
//! workers = "all"                  # every worker
//! workers = "8..16"                # a half-open range: 8, 9, …, 15 (a rack)
//! workers = "8..=15"               # the same range, inclusive
//! workers = { fraction = 0.25 }    # round(0.25·n) workers drawn at random
//! workers = { count = 3 }          # 3 workers drawn at random
//! ```
//!
//! Random subsets come from the topology stream ([`StreamKind::Topology`], id 0), each from its
//! own sub-stream named by the option's field path (e.g. `cluster.stragglers[2].workers`): the
//! subset depends on the seed, the number of workers and that path only, so adding another
//! option elsewhere in the scenario does not redraw it. `round` rounds halves up.

use std::fmt;

use rand::seq::index;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::clock::rng::{Stream, StreamKind, stream};
use crate::error::ConfigError;

/// A set of workers: a list, a range, all, or a random subset.
#[derive(Clone, Debug, PartialEq)]
pub enum WorkerSet {
    /// Every worker.
    All,
    /// These indices (in any order; duplicates are ignored).
    List(Vec<usize>),
    /// The half-open range `start..end`.
    Range {
        /// First worker.
        start: usize,
        /// One past the last worker.
        end: usize,
    },
    /// `round(fraction · n)` workers drawn at random, `0 < fraction ≤ 1`.
    Fraction(f64),
    /// This many workers drawn at random, `1 ≤ count ≤ n`.
    Count(usize),
}

impl From<Vec<usize>> for WorkerSet {
    fn from(v: Vec<usize>) -> Self {
        WorkerSet::List(v)
    }
}

impl<const N: usize> From<[usize; N]> for WorkerSet {
    fn from(v: [usize; N]) -> Self {
        WorkerSet::List(v.to_vec())
    }
}

impl From<std::ops::Range<usize>> for WorkerSet {
    fn from(r: std::ops::Range<usize>) -> Self {
        WorkerSet::Range {
            start: r.start,
            end: r.end,
        }
    }
}

/// FNV-1a, 64 bits: names a sub-stream after a field path.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The sub-stream of the topology stream named `name` (a field path). Sub-stream 0 is the
/// topology's own (random graphs); named ones never collide with it.
pub(crate) fn named_topology_stream(seed: u64, name: &str) -> Stream {
    let mut s = stream(seed, StreamKind::Topology, 0);
    s.set_stream(fnv1a(name) | 1 << 63);
    s
}

impl WorkerSet {
    /// Checks the set against a cluster of `n` workers; `path` is the option's field path.
    pub fn validate(&self, n: usize, path: &str) -> Result<(), ConfigError> {
        let last = n.saturating_sub(1);
        match self {
            WorkerSet::All => Ok(()),
            WorkerSet::List(list) => {
                if list.is_empty() {
                    return Err(ConfigError::new(path, "the worker list is empty")
                        .hint("list at least one worker index, or remove this entry"));
                }
                match list.iter().find(|&&w| w >= n) {
                    Some(w) => Err(ConfigError::new(
                        path,
                        format!(
                            "worker index {w} is out of range: the cluster has {n} workers (0..={last})"
                        ),
                    )
                    .hint(format!("worker indices run from 0 to {last}"))),
                    None => Ok(()),
                }
            }
            &WorkerSet::Range { start, end } => {
                if start >= end {
                    Err(
                        ConfigError::new(path, format!("the worker range {start}..{end} is empty"))
                            .hint(
                                "a range `a..b` holds a, a+1, …, b−1; write `a..=b` to include b",
                            ),
                    )
                } else if end > n {
                    Err(ConfigError::new(
                        path,
                        format!(
                            "the worker range {start}..{end} goes past the last worker: the cluster has {n} workers (0..={last})"
                        ),
                    )
                    .hint(format!("the widest range is \"0..{n}\", or write \"all\"")))
                } else {
                    Ok(())
                }
            }
            &WorkerSet::Fraction(f) => {
                if !(f.is_finite() && f > 0.0 && f <= 1.0) {
                    return Err(ConfigError::new(
                        path,
                        format!("a fraction of the workers must be in (0, 1], got {f}"),
                    )
                    .hint("{ fraction = 0.25 } draws a quarter of the workers at random"));
                }
                if fraction_count(f, n) == 0 {
                    return Err(ConfigError::new(
                        path,
                        format!("a fraction of {f} of {n} workers selects none"),
                    )
                    .hint("raise the fraction, or name the workers with a list"));
                }
                Ok(())
            }
            &WorkerSet::Count(c) => {
                if c == 0 || c > n {
                    Err(ConfigError::new(
                        path,
                        format!("cannot draw {c} workers from a cluster of {n}"),
                    )
                    .hint(format!("count must be between 1 and {n}")))
                } else {
                    Ok(())
                }
            }
        }
    }

    /// The workers of the set in a cluster of `n`, sorted and without duplicates. Random subsets
    /// are drawn from the seed's topology stream, sub-stream named `path`.
    pub fn resolve(&self, n: usize, seed: u64, path: &str) -> Result<Vec<usize>, ConfigError> {
        self.validate(n, path)?;
        let mut out = match self {
            WorkerSet::All => (0..n).collect(),
            WorkerSet::List(list) => list.clone(),
            &WorkerSet::Range { start, end } => (start..end).collect(),
            &WorkerSet::Fraction(f) => draw(n, fraction_count(f, n), seed, path),
            &WorkerSet::Count(c) => draw(n, c, seed, path),
        };
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// Whether the set is drawn at random.
    pub fn is_random(&self) -> bool {
        matches!(self, WorkerSet::Fraction(_) | WorkerSet::Count(_))
    }
}

/// `round(f · n)`, halves up.
fn fraction_count(f: f64, n: usize) -> usize {
    (f * n as f64 + 0.5).floor() as usize
}

fn draw(n: usize, k: usize, seed: u64, path: &str) -> Vec<usize> {
    let mut rng = named_topology_stream(seed, path);
    index::sample(&mut rng, n, k).into_vec()
}

impl fmt::Display for WorkerSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkerSet::All => write!(f, "all"),
            WorkerSet::List(l) => write!(f, "{l:?}"),
            WorkerSet::Range { start, end } => write!(f, "{start}..{end}"),
            WorkerSet::Fraction(x) => write!(f, "{{ fraction = {x} }}"),
            WorkerSet::Count(c) => write!(f, "{{ count = {c} }}"),
        }
    }
}

impl Serialize for WorkerSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            WorkerSet::All => s.serialize_str("all"),
            WorkerSet::List(l) => l.serialize(s),
            WorkerSet::Range { start, end } => s.serialize_str(&format!("{start}..{end}")),
            WorkerSet::Fraction(x) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("fraction", x)?;
                m.end()
            }
            WorkerSet::Count(c) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("count", c)?;
                m.end()
            }
        }
    }
}

const EXPECTED: &str = "a worker set: a list of indices [1, 5], \"all\", a range \"8..16\" or \"8..=15\", { fraction = 0.25 } or { count = 3 }";

/// Parses `"all"`, `"a..b"` or `"a..=b"`.
fn parse_str(s: &str) -> Result<WorkerSet, String> {
    let t = s.trim();
    if t == "all" {
        return Ok(WorkerSet::All);
    }
    let bad = || {
        format!(
            "invalid worker set \"{s}\": expected \"all\", a range \"a..b\" (b excluded) or \"a..=b\" (b included)"
        )
    };
    let (a, b, inclusive) = if let Some((a, b)) = t.split_once("..=") {
        (a, b, true)
    } else if let Some((a, b)) = t.split_once("..") {
        (a, b, false)
    } else {
        return Err(bad());
    };
    let a: usize = a.trim().parse().map_err(|_| bad())?;
    let b: usize = b.trim().parse().map_err(|_| bad())?;
    let end = if inclusive { b + 1 } else { b };
    Ok(WorkerSet::Range { start: a, end })
}

impl<'de> Deserialize<'de> for WorkerSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = WorkerSet;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(EXPECTED)
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<WorkerSet, E> {
                parse_str(s).map_err(E::custom)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<WorkerSet, A::Error> {
                let mut out = Vec::new();
                while let Some(w) = seq.next_element::<usize>()? {
                    out.push(w);
                }
                Ok(WorkerSet::List(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<WorkerSet, A::Error> {
                let Some(key) = map.next_key::<String>()? else {
                    return Err(de::Error::custom(format!(
                        "empty table: expected {EXPECTED}"
                    )));
                };
                let set = match key.as_str() {
                    "fraction" => WorkerSet::Fraction(map.next_value()?),
                    "count" => WorkerSet::Count(map.next_value()?),
                    other => {
                        return Err(de::Error::unknown_field(other, &["fraction", "count"]));
                    }
                };
                if let Some(extra) = map.next_key::<String>()? {
                    return Err(de::Error::custom(format!(
                        "unexpected key `{extra}`: a random worker set has one key, `fraction` or `count`"
                    )));
                }
                Ok(set)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_parse() {
        assert_eq!(parse_str("all"), Ok(WorkerSet::All));
        assert_eq!(parse_str("2..5"), Ok((2..5).into()));
        assert_eq!(parse_str(" 2 ..= 5 "), Ok((2..6).into()));
        assert!(parse_str("2-5").is_err());
        assert!(parse_str("..5").is_err());
    }

    #[test]
    fn sets_resolve_and_validate() {
        let r = |s: WorkerSet| s.resolve(8, 1, "x.workers");
        assert_eq!(r(WorkerSet::All).unwrap(), (0..8).collect::<Vec<_>>());
        assert_eq!(r(vec![5, 1, 5].into()).unwrap(), vec![1, 5]);
        assert_eq!(r((6..8).into()).unwrap(), vec![6, 7]);
        let f = r(WorkerSet::Fraction(0.25)).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f, r(WorkerSet::Fraction(0.25)).unwrap(), "deterministic");
        assert_eq!(r(WorkerSet::Count(8)).unwrap().len(), 8);
        for bad in [
            WorkerSet::List(vec![8]),
            WorkerSet::List(vec![]),
            WorkerSet::Range { start: 3, end: 3 },
            WorkerSet::Range { start: 3, end: 9 },
            WorkerSet::Fraction(0.0),
            WorkerSet::Fraction(1.5),
            WorkerSet::Fraction(0.01),
            WorkerSet::Count(9),
        ] {
            let e = r(bad.clone()).unwrap_err();
            assert_eq!(e.path.to_string(), "x.workers", "{bad}");
            assert!(e.hint.is_some(), "{bad}");
        }
    }

    #[test]
    fn random_subsets_depend_on_the_path() {
        let a = WorkerSet::Count(4).resolve(64, 3, "a").unwrap();
        let b = WorkerSet::Count(4).resolve(64, 3, "b").unwrap();
        assert_ne!(a, b);
    }
}
