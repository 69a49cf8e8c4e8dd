//! Configuration errors: what is wrong in a scenario, and where ([`FieldPath`]). The bottom
//! of the simulator: it imports nothing of it. The run's errors are [`crate::engine::error`].

use std::fmt;

/// One segment of the path to a scenario field: a table key or an array index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathSeg {
    /// A key in a table.
    Key(String),
    /// An index into an array.
    Index(usize),
}

/// Where in a scenario a value lives, e.g. `cluster.stragglers[0].factor`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldPath(pub Vec<PathSeg>);

impl FieldPath {
    /// Parses a dotted path with `[i]` indices: `"algorithms[1].kind"`.
    pub fn parse(s: &str) -> Self {
        let mut segs = Vec::new();
        for part in s.split('.').filter(|p| !p.is_empty()) {
            let mut rest = part;
            if let Some(open) = rest.find('[') {
                segs.push(PathSeg::Key(rest[..open].to_string()));
                rest = &rest[open..];
                while let Some(close) = rest.find(']') {
                    if let Ok(i) = rest[1..close].parse() {
                        segs.push(PathSeg::Index(i));
                    }
                    rest = &rest[close + 1..];
                }
            } else {
                segs.push(PathSeg::Key(rest.to_string()));
            }
        }
        FieldPath(segs)
    }

    /// This path with one more key.
    pub fn key(mut self, k: &str) -> Self {
        self.0.push(PathSeg::Key(k.to_string()));
        self
    }

    /// This path with one more index.
    pub fn index(mut self, i: usize) -> Self {
        self.0.push(PathSeg::Index(i));
        self
    }

    /// Prefixes this path with `prefix` (used when a crate validates its own section and the
    /// composing crate knows where that section sits).
    pub fn within(self, prefix: &FieldPath) -> Self {
        let mut segs = prefix.0.clone();
        segs.extend(self.0);
        FieldPath(segs)
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                PathSeg::Key(k) if i == 0 => write!(f, "{k}")?,
                PathSeg::Key(k) => write!(f, ".{k}")?,
                PathSeg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// An invalid value in a scenario: where it is, what is wrong, and how to fix it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The field that holds the bad value.
    pub path: FieldPath,
    /// What is wrong, e.g. `workers must be at least 2, got 0`.
    pub message: String,
    /// How to fix it, when there is something useful to say.
    pub hint: Option<String>,
}

impl ConfigError {
    /// An error at `path` (dotted, see [`FieldPath::parse`]).
    pub fn new(path: &str, message: impl Into<String>) -> Self {
        Self {
            path: FieldPath::parse(path),
            message: message.into(),
            hint: None,
        }
    }

    /// Adds a hint.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Moves the error under a section prefix.
    pub fn within(mut self, prefix: &str) -> Self {
        self.path = self.path.within(&FieldPath::parse(prefix));
        self
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)?;
        if let Some(h) = &self.hint {
            write!(f, " (hint: {h})")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_round_trip() {
        for s in ["cluster.workers", "algorithms[1].kind", "a[0][2].b", "seed"] {
            assert_eq!(FieldPath::parse(s).to_string(), s);
        }
    }
}
