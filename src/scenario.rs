//! Scenario files: the serde types of each crate composed into one document, and errors that
//! point at the file, line and column of the offending value.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use toml::de::{DeTable, DeValue};

use dasim_models::{DataConfig, ModelConfig, TimedAs};
use dasim_reports::claims::{Claim, ClaimError, Expect, Facts};
use dasim_sim::ConfigError;
use dasim_sim::algorithms::{AlgorithmConfig, AlgorithmKind};
use dasim_sim::cluster::ClusterConfig;
use dasim_sim::engine::RunConfig;
use dasim_sim::env::BuildEnv;
use dasim_sim::error::{FieldPath, PathSeg};
use dasim_sim::fault::{FaultConfig, Faults};
use dasim_sim::net::NetworkConfig;
use dasim_sim::net::topology::{Topology, TopologyConfig};
use dasim_sim::record::MetricsConfig;
use dasim_sim::store::OptimizerConfig;

/// A whole scenario: the cluster and its network, the topology, the learning problem, when to
/// stop, and the algorithms to compare on the same realization.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// A short name for outputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The seed every random stream derives from.
    #[serde(default)]
    pub seed: u64,
    /// Workers and their compute speed.
    pub cluster: ClusterConfig,
    /// NICs and links.
    #[serde(default)]
    pub network: NetworkConfig,
    /// The communication graph.
    #[serde(default)]
    pub topology: TopologyConfig,
    /// The model trained.
    #[serde(default)]
    pub model: ModelConfig,
    /// Proxy mode: the model trains for real, but its steps and messages cost what this
    /// model's would ([`TimedAs`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_as: Option<TimedAs>,
    /// The data it is trained on.
    #[serde(default)]
    pub data: DataConfig,
    /// The local update.
    #[serde(default)]
    pub optimizer: OptimizerConfig,
    /// Stop rules and evaluation cadence.
    pub run: RunConfig,
    /// What the run records besides the defaults: replica evaluations, targets, the timeline
    /// window, per-event logs.
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// The algorithms to compare, each run on the same cluster realization.
    pub algorithms: Vec<AlgorithmConfig>,
    /// Faults injected into every algorithm's run, the same realization for all
    /// ([`dasim_sim::fault`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<FaultConfig>,
    /// Claims checked after the run (`dasim run`, `dasim check`): see
    /// [`dasim_reports::claims`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expect: Vec<Expect>,
}

impl Scenario {
    /// Checks every value and the fit between sections (e.g. AD-PSGD needs a bipartite graph);
    /// `env` gives the seed and the directory relative paths are resolved against. Checks that
    /// need the model (step times from FLOPs) and the data happen when the run is built.
    pub fn validate(&self, env: &BuildEnv) -> Result<(), ConfigError> {
        self.cluster.validate()?;
        let extra = self
            .algorithms
            .iter()
            .map(AlgorithmConfig::extra_nodes)
            .max()
            .unwrap_or(0);
        self.network.validate_nodes(self.cluster.workers + extra)?;
        self.model.validate()?;
        if let Some(t) = &self.timed_as {
            if !self.model.spec().computes() {
                return Err(ConfigError::new(
                    "timed_as",
                    "a timing model is timed by its own preset or params",
                )
                .hint("remove [timed_as], or train a real model in [model]"));
            }
            t.shape()?;
        }
        self.data.validate()?;
        self.optimizer.validate()?;
        self.run.validate()?;
        self.metrics.validate()?;
        if self.algorithms.is_empty() {
            return Err(ConfigError::new("algorithms", "no algorithm to run")
                .hint("add an [[algorithms]] table, e.g. kind = \"allreduce\""));
        }
        let topology = Topology::build(&self.topology, self.cluster.workers, env)?;
        let mut labels = Vec::new();
        for (i, alg) in self.algorithms.iter().enumerate() {
            let label = alg.label();
            if labels.contains(&label) {
                return Err(ConfigError::new(
                    &format!("algorithms[{i}]"),
                    format!("two algorithms are labelled `{label}`"),
                )
                .hint("give one of them a distinct `label`"));
            }
            labels.push(label);
            let path = format!("algorithms[{i}]");
            if alg.topology.is_some() {
                alg.validate(&self.build_topology(i, env)?, &path, None)?;
            } else {
                alg.validate(&topology, &path, None)?;
            }
            alg.check_optimizer(self.optimizer_of(i), &path)?;
            alg.check_fault_support(&self.faults, &path)?;
        }
        Faults::new(&self.faults, self.cluster.workers, env)?;
        Ok(())
    }

    /// Builds the communication graph of the `i`-th algorithm (its own, else the scenario's);
    /// an error in the entry's own `topology` names it (`algorithms[1].topology.kind`).
    pub fn build_topology(&self, i: usize, env: &BuildEnv) -> Result<Topology, ConfigError> {
        let alg = &self.algorithms[i];
        Topology::build(alg.topology_or(&self.topology), self.cluster.workers, env)
            .map_err(|e| alg.own_field(e, &format!("algorithms[{i}]")))
    }

    /// The communication graph of the `i`-th algorithm: its own `topology`, else the scenario's.
    pub fn topology_of(&self, i: usize) -> &TopologyConfig {
        self.algorithms[i].topology_or(&self.topology)
    }

    /// The optimizer of the `i`-th algorithm: its own `optimizer`, else the scenario's.
    pub fn optimizer_of(&self, i: usize) -> &OptimizerConfig {
        self.algorithms[i].optimizer_or(&self.optimizer)
    }

    /// The values of `quantity`, a quantity of claims' bounds that algorithms' own options give
    /// (Overlap-SGP's `tau`; [`AlgorithmSpec::quantity`](dasim_sim::algorithms::AlgorithmSpec::quantity)),
    /// by label: every entry whose kind has it.
    pub fn own_quantity(&self, quantity: &str) -> Vec<(String, f64)> {
        self.algorithms
            .iter()
            .filter_map(|a| Some((a.label(), a.algorithm.spec().quantity(quantity)?)))
            .collect()
    }

    /// What the expectations may rely on, before any simulation: the algorithms, the workers,
    /// what `[metrics]` enables, and which quantities cannot be given (`tau` without
    /// Overlap-SGP, `gap` of a time-varying schedule). `accuracy` and `optimum` say whether
    /// the model has them; `None` asks the model's configuration, which knows unless the
    /// model is an MLP (whose data decide).
    pub fn claim_facts(&self, accuracy: Option<bool>, optimum: Option<bool>) -> Facts {
        let spec = self.model.spec();
        let (model_accuracy, model_optimum) = (spec.accuracy(), spec.optimum());
        let numerics = spec.computes();
        // A timing model has neither, whatever the (empty) data says.
        let (accuracy, optimum) = if numerics {
            (accuracy, optimum)
        } else {
            (None, None)
        };
        let mut unavailable = Vec::new();
        for (quantity, owners, meaning) in own_quantities() {
            self.own_quantity_facts(quantity, &owners, meaning, &mut unavailable);
        }
        let time_varying = TopologyConfig::is_time_varying;
        let why = |t: &TopologyConfig| {
            format!(
                "the {} topology is a time-varying schedule, which has no single mixing matrix",
                t.kind()
            )
        };
        if self.algorithms.iter().all(|a| a.topology.is_none()) {
            if time_varying(&self.topology) {
                unavailable.push(("gap".to_owned(), None, why(&self.topology)));
            }
        } else {
            for (i, alg) in self.algorithms.iter().enumerate() {
                let t = self.topology_of(i);
                if time_varying(t) {
                    unavailable.push(("gap".to_owned(), Some(alg.label()), why(t)));
                }
            }
        }
        Facts {
            algorithms: self
                .algorithms
                .iter()
                .map(|a| (a.label(), a.kind().to_owned()))
                .collect(),
            measured: measured(),
            workers: self.cluster.workers,
            accuracy: accuracy.or(model_accuracy),
            optimum: optimum.or(model_optimum),
            target_accuracy: self.metrics.target_accuracy.is_some(),
            target_loss: self.metrics.target_loss.is_some(),
            eval_replicas: self.metrics.eval_replicas,
            link_peaks: self.metrics.link_peaks,
            timing_only: !numerics,
            sim_time_s: self.run.sim_time_s,
            unavailable,
        }
    }

    /// Why `quantity`, which the options of `owners` give, cannot be named in a bound: no entry
    /// has it, or entries have different values and the others must not guess.
    fn own_quantity_facts(
        &self,
        quantity: &str,
        owners: &str,
        meaning: &str,
        unavailable: &mut Vec<(String, Option<String>, String)>,
    ) {
        let values = self.own_quantity(quantity);
        let Some((_, first)) = values.first() else {
            unavailable.push((
                quantity.to_owned(),
                None,
                format!("the scenario has no {owners} algorithm ({quantity} is {meaning})"),
            ));
            return;
        };
        if values.iter().all(|(_, v)| v == first) {
            return;
        }
        let listed = values
            .iter()
            .map(|(l, v)| format!("{l}: {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        for alg in &self.algorithms {
            let label = alg.label();
            if !values.iter().any(|(l, _)| *l == label) {
                unavailable.push((
                    quantity.to_owned(),
                    Some(label.clone()),
                    format!(
                        "`{label}` has no {quantity} of its own and the scenario's {owners} entries have different ones ({listed}): write the number, or name one of them"
                    ),
                ));
            }
        }
    }

    /// The name used in outputs: `name`, else the file stem.
    pub fn display_name(&self, path: &Path) -> String {
        self.name.clone().unwrap_or_else(|| {
            path.file_stem()
                .map_or_else(|| "scenario".into(), |s| s.to_string_lossy().into_owned())
        })
    }
}

/// Which kinds take which measurements beyond every algorithm's, as the algorithm registry
/// declares them ([`AlgorithmKind::declarations`]): the claims' [`Facts::measured`], and the
/// "defined for" column of the metric table.
pub fn measured() -> Vec<(&'static str, &'static [&'static str])> {
    AlgorithmKind::declarations()
        .into_iter()
        .map(|(kind, declared)| (kind, declared.measures))
        .collect()
}

/// The quantities of claims' bounds that algorithms' own options give, as the registry declares
/// them: `(quantity, owners, meaning)`, the owners as the kinds in backquotes (`` `overlap-sgp` ``)
/// and the meaning as the first owner declares it ("its delay bound τ").
pub fn own_quantities() -> Vec<(&'static str, String, &'static str)> {
    let mut out: Vec<(&'static str, Vec<&'static str>, &'static str)> = Vec::new();
    for (kind, declared) in AlgorithmKind::declarations() {
        for &(quantity, meaning) in declared.quantities {
            match out.iter_mut().find(|(q, _, _)| *q == quantity) {
                Some((_, owners, _)) => owners.push(kind),
                None => out.push((quantity, vec![kind], meaning)),
            }
        }
    }
    out.into_iter()
        .map(|(q, owners, meaning)| {
            let owners: Vec<String> = owners.iter().map(|k| format!("`{k}`")).collect();
            (q, owners.join(" or "), meaning)
        })
        .collect()
}

/// A scenario that failed to load, located in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// The field, when known (`cluster.workers`).
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub hint: Option<String>,
    /// The source line, for display.
    pub source_line: Option<String>,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let (Some(l), Some(c)) = (self.line, self.column) {
            write!(f, ":{l}:{c}")?;
        }
        write!(f, ": ")?;
        if let Some(field) = &self.field
            && !self.message.contains(field.as_str())
        {
            write!(f, "{field}: ")?;
        }
        write!(f, "{}", self.message)?;
        if let (Some(src), Some(l), Some(c)) = (&self.source_line, self.line, self.column) {
            let gutter = l.to_string().len();
            write!(
                f,
                "\n{:gutter$} |\n{l} | {src}\n{:gutter$} | {:>c$}",
                "",
                "",
                "^",
                c = c
            )?;
        }
        if let Some(h) = &self.hint {
            let gutter = self.line.map_or(1, |l| l.to_string().len());
            write!(f, "\n{:gutter$} = hint: {h}", "")?;
        }
        Ok(())
    }
}

impl std::error::Error for ScenarioError {}

/// A parsed scenario with the text it came from (to locate later errors, such as a data file
/// that cannot be read).
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The scenario.
    pub scenario: Scenario,
    /// Its file.
    pub path: PathBuf,
    /// Its text.
    pub text: String,
}

impl Loaded {
    /// Reads, parses and validates a scenario file.
    pub fn from_file(path: &Path) -> Result<Self, Box<ScenarioError>> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Box::new(ScenarioError {
                file: path.to_path_buf(),
                line: None,
                column: None,
                field: None,
                message: format!("cannot read the scenario file: {e}"),
                hint: None,
                source_line: None,
            })
        })?;
        Self::from_str(path, text)
    }

    /// Parses and validates scenario text; `path` names it in errors and anchors relative paths.
    pub fn from_str(path: &Path, text: String) -> Result<Self, Box<ScenarioError>> {
        let scenario: Scenario = toml::from_str(&text).map_err(|e| {
            let span = e.span();
            let message = e.message().trim_end().to_string();
            let hint = message.starts_with("unknown field").then(|| {
                if message.starts_with("unknown field `sweep`") {
                    return "a scenario with a [sweep] table is run by `dasim sweep SCENARIO --out DIR` (one run per point)".to_string();
                }
                if message.starts_with("unknown field `compression`") {
                    return "this algorithm sends no compressed messages: compression is an option of kind = \"choco\" (top-k, random-k, sign, qsgd) and kind = \"allreduce\" (powersgd)".to_string();
                }
                "check the spelling against the scenario reference in the book".to_string()
            });
            let offset = span.map(|s| unknown_key_offset(&text, s.start, &message));
            Box::new(locate(path, &text, offset, None, message, hint))
        })?;
        let loaded = Loaded {
            scenario,
            path: path.to_path_buf(),
            text,
        };
        loaded
            .scenario
            .validate(&loaded.env())
            .map_err(|e| loaded.config_error(&e))?;
        loaded.claims(None, None)?;
        Ok(loaded)
    }

    /// The same scenario under another seed (`dasim check --seeds`), checked again: random
    /// graphs and worker subsets depend on the seed.
    pub fn with_seed(&self, seed: u64) -> Result<Loaded, Box<ScenarioError>> {
        let mut scenario = self.scenario.clone();
        scenario.seed = seed;
        let loaded = Loaded {
            scenario,
            path: self.path.clone(),
            text: self.text.clone(),
        };
        loaded
            .scenario
            .validate(&loaded.env())
            .map_err(|e| loaded.config_error(&e))?;
        loaded.claims(None, None)?;
        Ok(loaded)
    }

    /// The scenario's `[[expect]]` entries, checked ([`Claim::new`]) against the scenario and,
    /// when given, what the model has (`accuracy`, `optimum`). An error is located at the
    /// entry's key, and inside an expression at the character it is about.
    pub fn claims(
        &self,
        accuracy: Option<bool>,
        optimum: Option<bool>,
    ) -> Result<Vec<Claim>, Box<ScenarioError>> {
        let facts = self.scenario.claim_facts(accuracy, optimum);
        self.scenario
            .expect
            .iter()
            .enumerate()
            .map(|(i, e)| Claim::new(i, e, &facts).map_err(|err| self.claim_error(i, &err)))
            .collect()
    }

    /// Locates an expectation's error: at `expect[i].<key>`, moved to the column inside the
    /// expression when it names one (and the string has no escape before it).
    fn claim_error(&self, index: usize, e: &ClaimError) -> Box<ScenarioError> {
        let field = format!("expect[{index}].{}", e.key);
        let mut offset = span_of(&self.text, &FieldPath::parse(&field).0);
        let mut message = e.message.clone();
        if let Some(column) = e.column {
            offset = offset.map(|o| inside_string(&self.text, o, column));
            message.push_str(&format!(" (column {column} of the expression)"));
        }
        Box::new(locate(
            &self.path,
            &self.text,
            offset,
            Some(field),
            message,
            e.hint.clone(),
        ))
    }

    /// The seed and base directory of this scenario, for building its cluster, network and
    /// topology.
    pub fn env(&self) -> BuildEnv {
        BuildEnv::new(self.scenario.seed)
            .with_base_dir(self.base_dir())
            .with_batch_size(self.scenario.data.batch_size)
    }

    /// The directory relative paths in the scenario are resolved against.
    pub fn base_dir(&self) -> PathBuf {
        self.path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."))
    }

    /// The checks of each `[[algorithms]]` entry that need the model (an LPP-SGD process or a
    /// parameter-server shard needs at least one parameter, PowerSGD's rank fits the weight
    /// matrices, Streaming DiLoCo's fragments the layers), located at the entry's key.
    pub fn check_against_model(
        &self,
        model: &dasim_models::Model,
    ) -> Result<(), Box<ScenarioError>> {
        let (params, matrices, layers) = (model.num_params(), model.matrices(), model.layers());
        let state = model.trainable().end..params;
        let s = &self.scenario;
        for (i, alg) in s.algorithms.iter().enumerate() {
            let topology = s
                .build_topology(i, &self.env())
                .map_err(|e| self.config_error(&e))?;
            alg.validate_model(
                &topology,
                &format!("algorithms[{i}]"),
                Some(params),
                &matrices,
                &layers,
                state.clone(),
            )
            .map_err(|e| self.config_error(&e))?;
        }
        Ok(())
    }

    /// Locates a validation error in the file.
    pub fn config_error(&self, e: &ConfigError) -> Box<ScenarioError> {
        let offset = span_of(&self.text, &e.path.0);
        Box::new(locate(
            &self.path,
            &self.text,
            offset,
            Some(e.path.to_string()),
            e.message.clone(),
            e.hint.clone(),
        ))
    }
}

/// The byte offset of character `column` (1-based) of the single-line string value that
/// starts at `offset` (its opening quote); `offset` itself when the value is not such a string
/// or an escape comes first, so the position would be wrong.
fn inside_string(text: &str, offset: usize, column: usize) -> usize {
    let rest = &text[offset.min(text.len())..];
    let quote = match rest.chars().next() {
        Some(q @ ('"' | '\'')) if !rest.starts_with("\"\"\"") && !rest.starts_with("\'\'\'") => q,
        _ => return offset,
    };
    let mut at = offset + quote.len_utf8();
    for c in rest[quote.len_utf8()..].chars().take(column - 1) {
        if c == quote || c == '\n' || (quote == '"' && c == '\\') {
            return offset;
        }
        at += c.len_utf8();
    }
    at
}

/// The byte offset of the value at `path`, or of its deepest ancestor present in the text.
/// Where to point for a parse error at `offset`: for "unknown field `k`" reported at a table
/// header (serde reports keys of internally tagged tables, such as `[topology]` or a
/// `[[cluster.stragglers]]` entry, at the table), the line of key `k` inside that table; for
/// "unknown variant" reported there, the value of its `kind`; otherwise `offset` itself.
fn unknown_key_offset(text: &str, offset: usize, message: &str) -> usize {
    // An unknown `kind` of a tagged table is reported at the table too: point at its value.
    let (key, at_value) = if message.starts_with("unknown variant `") {
        ("kind", true)
    } else if let Some(key) = message
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split('`').next())
    {
        (key, false)
    } else {
        return offset;
    };
    if !text[offset..].starts_with('[') {
        return offset;
    }
    let mut at = offset
        + text[offset..]
            .find('\n')
            .map_or(text.len() - offset, |i| i + 1);
    for line in text[at..].split_inclusive('\n') {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            break;
        }
        let name = trimmed
            .split('=')
            .next()
            .unwrap_or("")
            .trim()
            .trim_matches('"');
        if trimmed.contains('=') && name == key {
            let key_at = at + (line.len() - trimmed.len());
            if !at_value {
                return key_at;
            }
            let eq = trimmed.find('=').unwrap_or(0) + 1;
            let value = trimmed[eq..].len() - trimmed[eq..].trim_start().len();
            return key_at + eq + value;
        }
        at += line.len();
    }
    offset
}

/// The byte offset of the value at `path` in `text`, or of its deepest ancestor present.
pub(crate) fn span_of(text: &str, path: &[PathSeg]) -> Option<usize> {
    let table = DeTable::parse(text).ok()?;
    let root = toml::Spanned::new(table.span(), DeValue::Table(table.into_inner()));
    let mut node = &root;
    let mut best = None;
    for seg in path {
        let next = match seg {
            PathSeg::Key(k) => node.get_ref().get(k.as_str()),
            PathSeg::Index(i) => node.get_ref().get(*i),
        };
        match next {
            Some(n) => {
                node = n;
                best = Some(n.span().start);
            }
            None => break,
        }
    }
    best
}

/// A [`ScenarioError`] at byte `offset` of `text` (line, column and the source line).
pub(crate) fn locate(
    path: &Path,
    text: &str,
    offset: Option<usize>,
    field: Option<String>,
    message: String,
    hint: Option<String>,
) -> ScenarioError {
    let (line, column, source_line) = match offset {
        Some(off) => {
            let off = off.min(text.len());
            let before = &text[..off];
            let line = before.matches('\n').count() + 1;
            let line_start = before.rfind('\n').map_or(0, |i| i + 1);
            let column = text[line_start..off].chars().count() + 1;
            let src = text[line_start..].lines().next().unwrap_or("").to_string();
            (Some(line), Some(column), Some(src))
        }
        None => (None, None, None),
    };
    ScenarioError {
        file: path.to_path_buf(),
        line,
        column,
        field,
        message,
        hint,
        source_line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
seed = 1
[cluster]
workers = 4
[run]
sim_time_s = 1.0
[[algorithms]]
kind = "allreduce"
"#;

    fn load(text: &str) -> Result<Loaded, Box<ScenarioError>> {
        Loaded::from_str(Path::new("s.toml"), text.to_string())
    }

    #[test]
    fn a_minimal_scenario_loads_with_defaults() {
        let l = load(GOOD).unwrap();
        assert_eq!(l.scenario.cluster.workers, 4);
        assert_eq!(l.scenario.data.batch_size, 32);
    }

    #[test]
    fn a_bad_value_is_located() {
        let e = load(&GOOD.replace("workers = 4", "workers = 0")).unwrap_err();
        assert_eq!((e.line, e.column), (Some(4), Some(11)));
        assert_eq!(e.field.as_deref(), Some("cluster.workers"));
        let shown = e.to_string();
        assert!(shown.starts_with("s.toml:4:11: "), "{shown}");
        assert!(
            shown.contains("workers must be at least 2, got 0"),
            "{shown}"
        );
    }

    #[test]
    fn unknown_keys_are_errors() {
        let e = load(&GOOD.replace("workers = 4", "workers = 4\nwrokers = 5")).unwrap_err();
        assert_eq!(e.line, Some(5));
        assert!(
            e.message.contains("unknown field `wrokers`"),
            "{}",
            e.message
        );
    }

    #[test]
    fn unknown_keys_of_tagged_tables_point_at_the_key() {
        // serde reports these at the table header; the error points at the key's own line.
        let text = format!("{GOOD}[topology]\nkind = \"ring\"\n\npeers = 2\n");
        let e = load(&text).unwrap_err();
        assert!(e.message.contains("unknown field `peers`"), "{}", e.message);
        assert_eq!((e.line, e.column), (Some(12), Some(1)));
        let text = GOOD.replace(
            "workers = 4",
            "workers = 4\n[[cluster.stragglers]]\nworkers = [1]\n  factr = 2.0",
        );
        let e = load(&text).unwrap_err();
        assert!(e.message.contains("unknown field `factr`"), "{}", e.message);
        assert_eq!((e.line, e.column), (Some(7), Some(3)));
    }

    #[test]
    fn the_metrics_section_is_optional_and_checked() {
        let l = load(GOOD).unwrap();
        assert_eq!(l.scenario.metrics, MetricsConfig::default());
        let text = format!("{GOOD}\n[metrics]\ntarget_accuracy = 0.9\ntimeline_s = [0.2, 0.1]\n");
        let e = load(&text).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("metrics.timeline_s"));
        assert_eq!(e.line, Some(12));
        let text = GOOD.replace("sim_time_s = 1.0", "sim_time_s = 1.0\neval_every_steps = 0");
        let e = load(&text).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("run.eval_every_steps"));
    }

    #[test]
    fn adpsgd_on_an_odd_ring_is_rejected() {
        let text = GOOD
            .replace("workers = 4", "workers = 5")
            .replace("\"allreduce\"", "\"adpsgd\"");
        let e = load(&text).unwrap_err();
        assert!(e.message.contains("bipartite"), "{}", e.message);
    }
}
