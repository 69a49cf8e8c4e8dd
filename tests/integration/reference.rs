//! Keeps the scenario reference (`book/src/scenario-reference.md`) and the schema the loader
//! accepts the same: a key the loader accepts but the reference does not document fails this
//! test, and so does a key the reference documents but the loader refuses.
//!
//! **What the loader accepts** is asked of the real serde types, never written down here: every
//! table of a scenario is deserialized with `deny_unknown_fields`, so a table holding an unknown
//! key `zzz_probe` is refused with serde's "unknown field `zzz_probe`, expected one of `a`, `b`,
//! …", which lists the table's keys. For a table selected by `kind`, a `kind = "zzz_probe"` is
//! refused with "unknown variant, expected one of …", which lists the kinds, and each kind is
//! then probed on its own. What a kind's probe cannot see (the keys every entry of a list has
//! beside its kind's: a straggler's `workers`, an algorithm's `label`, `topology` and
//! `optimizer`, which custom or flattened deserializers handle) is read from the TOML that
//! serializing such an entry produces. [`SITES`] names the tables to probe; a key of a probed
//! table that is itself a table (or a list of tables) and is not one of them fails the test, so
//! a new sub-table cannot go unnoticed either.
//!
//! **What the reference documents** is read from its Markdown tables: a heading whose first
//! code span is a table (`` ## `[cluster]` ``, `` ### `[[network.links]]` ``,
//! `` ### `optimizer.schedule` ``) opens that section (a heading without one continues the
//! enclosing section, or at level 2 closes it, except "Top level"); in a table of the section
//! with a `key` column, every code span of that column that is a bare key documents that key;
//! with a `kind` column too, the row's key belongs to that kind (a row with no key documents a
//! kind without keys). A sub-section's heading documents its key in the parent (`[data.csv]`
//! documents `csv` in `[data]`), for every kind unless the parent's kind table lists the key for
//! the kinds that take it (`algorithms.compression`).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use dasim::scenario::Scenario;
use dasim_sim::algorithms::{AlgorithmConfig, AlgorithmKind};

/// The unknown key (and kind) the probes use.
const PROBE: &str = "zzz_probe";

/// A valid scenario every probe modifies in one place.
const BASE: &str = r#"
[cluster]
workers = 4

[run]
sim_time_s = 1.0

[[algorithms]]
kind = "allreduce"
"#;

/// A table of the schema: the reference's section name and where the table sits.
struct Site {
    /// As the reference's headings name it, without brackets: `cluster.stragglers`; `` for
    /// the top level.
    section: &'static str,
    /// Keys from the top of the scenario to the table.
    path: &'static [&'static str],
    /// The table is an entry of a list (`[[cluster.stragglers]]`).
    list: bool,
    /// Keys an entry needs before its own keys are even looked at (a custom deserializer).
    needs: &'static [(&'static str, &'static str)],
}

const fn site(section: &'static str, path: &'static [&'static str]) -> Site {
    Site {
        section,
        path,
        list: false,
        needs: &[],
    }
}

const fn list(section: &'static str, path: &'static [&'static str]) -> Site {
    Site {
        section,
        path,
        list: true,
        needs: &[],
    }
}

/// Every table of a scenario. A sub-table missing here fails
/// [`every_sub_table_is_probed`].
const SITES: &[Site] = &[
    site("", &[]),
    site("cluster", &["cluster"]),
    list("cluster.groups", &["cluster", "groups"]),
    Site {
        needs: &[("workers", "\"all\"")],
        ..list("cluster.stragglers", &["cluster", "stragglers"])
    },
    site("network", &["network"]),
    list("network.nics", &["network", "nics"]),
    list("network.links", &["network", "links"]),
    list("network.congestion", &["network", "congestion"]),
    list(
        "network.random_congestion",
        &["network", "random_congestion"],
    ),
    site("topology", &["topology"]),
    site("model", &["model"]),
    site("timed_as", &["timed_as"]),
    site("data", &["data"]),
    site("data.augment", &["data", "augment"]),
    site("data.csv", &["data", "csv"]),
    site("data.synthetic", &["data", "synthetic"]),
    site("data.partition", &["data", "partition"]),
    site("optimizer", &["optimizer"]),
    site("optimizer.schedule", &["optimizer", "schedule"]),
    site("run", &["run"]),
    site("metrics", &["metrics"]),
    list("algorithms", &["algorithms"]),
    // Inside the base scenario's all-reduce entry.
    site("algorithms.compression", &["algorithms", "compression"]),
    list("expect", &["expect"]),
    list("faults", &["faults"]),
];

/// Tables that are the same type as a probed one, documented there: an algorithm's own
/// `topology` and `optimizer`.
const ALIASES: &[(&str, &str)] = &[
    ("algorithms.topology", "topology"),
    ("algorithms.optimizer", "optimizer"),
];

/// Keys of a worker set's table forms (`{ fraction = 0.25 }`, `{ count = 3 }`), documented in
/// the reference's "Worker sets" section; any key whose table form takes exactly these is a
/// worker set, a value rather than a section.
const WORKER_SET_KEYS: &[&str] = &["count", "fraction"];

/// The keys a section accepts: beside every kind's (`None`), and each kind's own.
#[derive(Debug, Default, PartialEq)]
struct Keys {
    common: BTreeSet<String>,
    kinds: BTreeMap<String, BTreeSet<String>>,
}

fn base() -> toml::Table {
    BASE.parse().expect("the base scenario parses")
}

/// The base scenario with `entry` as the table at `site` (for a list, its only entry; for the
/// top level, its keys added).
fn with_entry(site: &Site, entry: toml::Table) -> toml::Table {
    let mut doc = base();
    let mut entry = entry;
    for (k, v) in site.needs {
        entry.insert(
            (*k).into(),
            toml::from_str::<toml::Table>(&format!("v = {v}")).unwrap()["v"].clone(),
        );
    }
    if site.path.is_empty() {
        doc.extend(entry);
        return doc;
    }
    let value = if site.list {
        toml::Value::Array(vec![toml::Value::Table(entry)])
    } else {
        toml::Value::Table(entry)
    };
    set(&mut doc, site.path, value);
    doc
}

fn set(doc: &mut toml::Table, path: &[&str], value: toml::Value) {
    let (last, parents) = path.split_last().unwrap();
    let mut t = doc;
    for p in parents {
        let v = t
            .entry(*p)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        // Through a list of tables, into its first entry (`algorithms.compression`).
        let v = match v {
            toml::Value::Array(entries) => &mut entries[0],
            v => v,
        };
        t = v
            .as_table_mut()
            .unwrap_or_else(|| panic!("`{p}` is not a table in the base scenario"));
    }
    t.insert((*last).into(), value);
}

/// The loader's answer to `doc`: `Ok`, or serde's message.
fn load(doc: &toml::Table) -> Result<(), String> {
    let text = toml::to_string(doc).expect("a table serializes");
    toml::from_str::<Scenario>(&text)
        .map(|_| ())
        .map_err(|e| e.message().trim().to_owned())
}

/// The names serde lists after `what` (`unknown field `zzz_probe``): "expected one of `a`, `b`",
/// "expected `a` or `b`", "expected `a`", "there are no fields" (none); `None` when the message
/// is not about `what`.
fn listed(message: &str, what: &str) -> Option<BTreeSet<String>> {
    let rest = &message[message.find(what)? + what.len()..];
    let rest = rest.lines().next().unwrap_or("");
    Some(
        rest.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect(),
    )
}

fn table(pairs: &[(&str, &str)]) -> toml::Table {
    let text: String = pairs.iter().map(|(k, v)| format!("{k} = {v}\n")).collect();
    text.parse().unwrap()
}

/// The keys the table at `site` accepts, with `kind = k` when given.
fn fields(site: &Site, kind: Option<&str>) -> BTreeSet<String> {
    let mut pairs = vec![(PROBE, "0")];
    let quoted = kind.map(|k| format!("\"{k}\""));
    if let Some(q) = &quoted {
        pairs.push(("kind", q));
    }
    let doc = with_entry(site, table(&pairs));
    match load(&doc) {
        Err(m) => listed(&m, &format!("unknown field `{PROBE}`")).unwrap_or_else(|| {
            panic!(
                "probing `{}`{}: expected an unknown-field error, got: {m}",
                site.section,
                kind.map(|k| format!(" (kind = \"{k}\")"))
                    .unwrap_or_default()
            )
        }),
        Ok(()) => panic!(
            "probing `{}`: a table with an unknown key `{PROBE}` was accepted",
            site.section
        ),
    }
}

/// The kinds of a table selected by `kind`, or `None` for a plain table.
fn kinds(site: &Site) -> Option<BTreeSet<String>> {
    let doc = with_entry(site, table(&[("kind", &format!("\"{PROBE}\""))]));
    listed(&load(&doc).err()?, &format!("unknown variant `{PROBE}`"))
}

/// The TOML keys of a serialized value.
fn serialized_keys<T: serde::Serialize>(value: &T) -> BTreeSet<String> {
    toml::Table::try_from(value)
        .expect("serializes to a table")
        .keys()
        .cloned()
        .collect()
}

/// The keys every entry of a kinded list has beside its kind's own, from the TOML of a
/// serialized entry with every such key set.
fn common_keys(site: &Site) -> BTreeSet<String> {
    let mut common = BTreeSet::from(["kind".to_owned()]);
    match site.section {
        "algorithms" => {
            let mut doc = base();
            doc.insert("topology".into(), table(&[("kind", "\"ring\"")]).into());
            let scenario: Scenario = toml::from_str(&toml::to_string(&doc).unwrap()).unwrap();
            for kind in AlgorithmKind::KINDS {
                let entry: AlgorithmConfig = toml::from_str(&format!(
                    "kind = \"{kind}\"\n{}",
                    match *kind {
                        "post-local-sgd" => "warmup_steps = 1",
                        "rennala" => "batch = 2",
                        "ringmaster" => "max_delay = 2",
                        "choco" => "consensus_lr = 0.5\ncompression = { kind = \"sign\" }",
                        _ => "",
                    }
                ))
                .unwrap_or_else(|e| panic!("a default `{kind}` entry: {e}"));
                let entry = entry
                    .with_label("label")
                    .with_topology(scenario.topology.clone())
                    .with_optimizer(scenario.optimizer.clone());
                let own = fields(site, Some(kind));
                common.extend(
                    serialized_keys(&entry)
                        .into_iter()
                        .filter(|k| !own.contains(k)),
                );
            }
        }
        "cluster.stragglers" => {
            let entry: dasim_sim::cluster::StragglerConfig =
                toml::from_str("workers = \"all\"\nfactor = 2.0").unwrap();
            let own = fields(site, Some("fixed"));
            common.extend(
                serialized_keys(&entry)
                    .into_iter()
                    .filter(|k| !own.contains(k)),
            );
        }
        _ => {}
    }
    common
}

/// What the loader accepts, by section.
fn accepted() -> BTreeMap<String, Keys> {
    let mut out = BTreeMap::new();
    for site in SITES {
        let mut keys = Keys::default();
        match kinds(site) {
            Some(names) => {
                for k in &names {
                    keys.kinds.insert(k.clone(), fields(site, Some(k)));
                }
                if keys.kinds.values().all(|f| f.contains("kind")) {
                    // A plain table with an enumerated `kind` key (`optimizer.schedule`).
                    keys.common = keys.kinds.values().flatten().cloned().collect();
                    keys.kinds.clear();
                } else {
                    keys.common = common_keys(site);
                }
            }
            None => keys.common = fields(site, None),
        }
        out.insert(site.section.to_owned(), keys);
    }
    let algorithms: BTreeSet<&str> = out["algorithms"].kinds.keys().map(String::as_str).collect();
    assert_eq!(
        algorithms,
        AlgorithmKind::KINDS.iter().copied().collect(),
        "the algorithms' kinds, as serde lists them, are the registry's"
    );
    // `[sweep]` is read by `dasim sweep` from the document, not by serde: any key path, and
    // `zip`. The top level accepts it there.
    let sweep = "[sweep]\nseed = [1, 2]\nzip = [[\"seed\"]]\n";
    let text = format!("{BASE}\n{sweep}");
    let parsed = dasim::sweep::Sweep::parse(Path::new("s.toml"), &text)
        .unwrap_or_else(|e| panic!("a sweep with zip: {e}"))
        .expect("the sweep is found");
    assert_eq!(parsed.groups, [[0]], "zip is read as a group");
    out.get_mut("").unwrap().common.insert("sweep".into());
    out.insert(
        "sweep".into(),
        Keys {
            common: BTreeSet::from(["zip".to_owned()]),
            kinds: BTreeMap::new(),
        },
    );
    out
}

/// Whether `s` is a bare TOML key as the schema spells them (lower-case, digits, `_`).
fn is_key(s: &str) -> bool {
    !s.is_empty()
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The code spans of a Markdown line.
fn code_spans(s: &str) -> Vec<&str> {
    s.split('`').skip(1).step_by(2).collect()
}

/// The table a heading names (`[cluster]`, `[[network.links]]`, `optimizer.schedule`), without
/// brackets.
fn heading_section(text: &str) -> Option<String> {
    let span = code_spans(text).into_iter().next()?;
    let inner = span.trim_start_matches('[').trim_end_matches(']');
    let table_like = span.starts_with('[') || inner.contains('.');
    (table_like && !inner.is_empty() && inner.split('.').all(is_key)).then(|| inner.to_owned())
}

/// A documented key: its section, its kind (`None`: every kind), its name, and its line.
#[derive(Debug)]
struct Documented {
    section: String,
    kind: Option<String>,
    key: Option<String>,
    line: usize,
}

/// What the reference documents.
fn documented(md: &str) -> (Vec<Documented>, Vec<String>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    let mut section: Option<String> = None;
    let mut in_fence = false;
    let mut header: Option<(Option<usize>, Option<usize>)> = None; // key, kind columns
    let mut worker_sets = false;
    for (no, line) in md.lines().enumerate() {
        let line_no = no + 1;
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        if line.starts_with('#') {
            let level = line.chars().take_while(|&c| c == '#').count();
            let text = line[level..].trim();
            worker_sets = text == "Worker sets";
            if let Some(s) = heading_section(text) {
                if let Some((parent, key)) = s.rsplit_once('.') {
                    out.push(Documented {
                        section: parent.to_owned(),
                        kind: None,
                        key: Some(key.to_owned()),
                        line: line_no,
                    });
                } else {
                    out.push(Documented {
                        section: String::new(),
                        kind: None,
                        key: Some(s.clone()),
                        line: line_no,
                    });
                }
                section = Some(s);
            } else if text == "Top level" {
                section = Some(String::new());
            } else if level <= 2 {
                section = None;
            }
            header = None;
            continue;
        }
        if !line.trim_start().starts_with('|') {
            header = None;
            continue;
        }
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        let Some((key_col, kind_col)) = header else {
            let name = |c: &&str| c.trim_matches('`').to_owned();
            let names: Vec<String> = cells.iter().map(name).collect();
            header = Some((
                names.iter().position(|n| n == "key"),
                names.iter().position(|n| n == "kind"),
            ));
            if worker_sets {
                // The worker set's table forms: their keys are documented in the examples.
                for k in WORKER_SET_KEYS {
                    if !md.contains(&format!("{{ {k} = ")) {
                        problems.push(format!(
                            "scenario-reference.md: Worker sets: the `{{ {k} = … }}` form is not shown"
                        ));
                    }
                }
            }
            continue;
        };
        if cells
            .iter()
            .all(|c| c.chars().all(|ch| ch == '-' || ch == ':'))
        {
            continue; // the separator row
        }
        let Some(key_col) = key_col else { continue };
        let Some(sec) = &section else {
            problems.push(format!(
                "scenario-reference.md:{line_no}: a table of keys outside a section (its heading names no table)"
            ));
            continue;
        };
        let kind = kind_col.and_then(|c| {
            code_spans(cells.get(c)?)
                .first()
                .map(|k| k.trim_matches('"').to_owned())
        });
        if kind_col.is_some() {
            out.push(Documented {
                section: sec.clone(),
                kind: None,
                key: Some("kind".into()),
                line: line_no,
            });
        }
        let keys: Vec<&str> = cells
            .get(key_col)
            .map(|c| code_spans(c).into_iter().filter(|s| is_key(s)).collect())
            .unwrap_or_default();
        if keys.is_empty() {
            out.push(Documented {
                section: sec.clone(),
                kind: kind.clone(),
                key: None,
                line: line_no,
            });
        }
        for k in keys {
            out.push(Documented {
                section: sec.clone(),
                kind: kind.clone(),
                key: Some(k.to_owned()),
                line: line_no,
            });
        }
    }
    // A sub-section of a key that only some kinds take (`algorithms.compression`) documents
    // its table; the parent's kind table says which kinds take the key, not its heading.
    let per_kind: BTreeSet<(String, String)> = out
        .iter()
        .filter(|d| d.kind.is_some())
        .filter_map(|d| Some((d.section.clone(), d.key.clone()?)))
        .collect();
    out.retain(|d| {
        d.kind.is_some()
            || d.key
                .as_ref()
                .is_none_or(|k| !per_kind.contains(&(d.section.clone(), k.clone())))
    });
    (out, problems)
}

fn section_name(s: &str) -> String {
    if s.is_empty() {
        "the top level".into()
    } else {
        format!("[{s}]")
    }
}

/// The differences between what the loader accepts and what the reference documents.
fn differences(accepted: &BTreeMap<String, Keys>, docs: &[Documented]) -> Vec<String> {
    let mut out = Vec::new();
    for d in docs {
        if !accepted.contains_key(&d.section) {
            out.push(format!(
                "scenario-reference.md:{}: documents a section {} that the loader does not have",
                d.line,
                section_name(&d.section)
            ));
        }
    }
    for (section, keys) in accepted {
        let here: Vec<&Documented> = docs.iter().filter(|d| &d.section == section).collect();
        let name = section_name(section);
        if here.is_empty() {
            out.push(format!(
                "{name}: accepted, but the reference has no section for it"
            ));
            continue;
        }
        let doc_common: BTreeSet<&str> = here
            .iter()
            .filter(|d| d.kind.is_none())
            .filter_map(|d| d.key.as_deref())
            .collect();
        let doc_kinds: BTreeSet<&str> = here.iter().filter_map(|d| d.kind.as_deref()).collect();
        if keys.kinds.is_empty() {
            for k in &keys.common {
                if !doc_common.contains(k.as_str()) {
                    out.push(format!("{name}: `{k}` is accepted but not documented"));
                }
            }
            for d in here.iter().filter(|d| d.kind.is_none()) {
                if let Some(k) = &d.key
                    && !keys.common.contains(k)
                {
                    out.push(format!(
                        "scenario-reference.md:{}: {name}: `{k}` is documented but not accepted",
                        d.line
                    ));
                }
            }
            for d in here.iter().filter(|d| d.kind.is_some()) {
                out.push(format!(
                    "scenario-reference.md:{}: {name} has no kinds, but a row documents kind `{}`",
                    d.line,
                    d.kind.as_deref().unwrap()
                ));
            }
            continue;
        }
        for kind in keys.kinds.keys() {
            if !doc_kinds.contains(kind.as_str()) {
                out.push(format!(
                    "{name}: kind = \"{kind}\" is accepted but not documented"
                ));
            }
        }
        for k in &doc_kinds {
            if !keys.kinds.contains_key(*k) {
                out.push(format!(
                    "{name}: kind = \"{k}\" is documented but not accepted"
                ));
            }
        }
        for (kind, own) in &keys.kinds {
            if !doc_kinds.contains(kind.as_str()) {
                continue;
            }
            let documented: BTreeMap<&str, usize> = here
                .iter()
                .filter(|d| d.kind.as_deref() == Some(kind) || d.kind.is_none())
                .filter_map(|d| Some((d.key.as_deref()?, d.line)))
                .collect();
            for k in own.iter().chain(&keys.common) {
                if !documented.contains_key(k.as_str()) {
                    out.push(format!(
                        "{name} (kind = \"{kind}\"): `{k}` is accepted but not documented"
                    ));
                }
            }
            for (k, line) in &documented {
                if !own.contains(*k) && !keys.common.contains(*k) {
                    out.push(format!(
                        "scenario-reference.md:{line}: {name} (kind = \"{kind}\"): `{k}` is documented but not accepted"
                    ));
                }
            }
        }
    }
    out
}

fn reference() -> String {
    let path = common::manifest_dir().join("book/src/scenario-reference.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_reference_documents_every_accepted_key_and_no_other() {
    let accepted = accepted();
    let (docs, mut problems) = documented(&reference());
    problems.extend(differences(&accepted, &docs));
    assert!(
        problems.is_empty(),
        "book/src/scenario-reference.md and the scenario schema differ ({}):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

/// Every key of a probed table whose value may be a table (or a list of tables) is a probed
/// table, an alias of one, or a worker set.
#[test]
fn every_sub_table_is_probed() {
    let accepted = accepted();
    let probed: BTreeSet<&str> = SITES
        .iter()
        .map(|s| s.section)
        .chain(ALIASES.iter().map(|a| a.0))
        .collect();
    let mut unknown = Vec::new();
    for site in SITES {
        let keys = &accepted[site.section];
        let kinds: Vec<Option<&str>> = if keys.kinds.is_empty() {
            vec![None]
        } else {
            keys.kinds.keys().map(|k| Some(k.as_str())).collect()
        };
        for kind in kinds {
            let own = kind.map_or(&keys.common, |k| &keys.kinds[k]);
            for key in own
                .iter()
                .chain(if kind.is_some() { &keys.common } else { own })
            {
                if key == "kind" {
                    continue;
                }
                let sub = if site.section.is_empty() {
                    key.clone()
                } else {
                    format!("{}.{key}", site.section)
                };
                if probed.contains(sub.as_str()) {
                    continue;
                }
                for as_list in [false, true] {
                    let probe = table(&[(PROBE, "0")]);
                    let value = if as_list {
                        toml::Value::Array(vec![probe.into()])
                    } else {
                        probe.into()
                    };
                    let mut entry = toml::Table::new();
                    if let Some(k) = kind {
                        entry.insert("kind".into(), k.into());
                    }
                    entry.insert(key.clone(), value);
                    let doc = with_entry(site, entry);
                    let Err(m) = load(&doc) else { continue };
                    let fields = listed(&m, &format!("unknown field `{PROBE}`"));
                    let worker_set = fields.as_ref().is_some_and(|f| {
                        f.iter()
                            .map(String::as_str)
                            .eq(WORKER_SET_KEYS.iter().copied())
                    });
                    if (fields.is_some() && !worker_set) || m.contains("missing field `kind`") {
                        unknown.push(format!(
                            "{}{}: `{key}` is a table that this test does not probe; add it to SITES",
                            section_name(site.section),
                            kind.map(|k| format!(" (kind = \"{k}\")")).unwrap_or_default()
                        ));
                    }
                }
            }
        }
    }
    unknown.sort();
    unknown.dedup();
    assert!(unknown.is_empty(), "{}", unknown.join("\n"));
}

/// An algorithm's own `topology` and `optimizer` take the keys of `[topology]` and
/// `[optimizer]`, which the reference documents once.
#[test]
fn an_algorithms_own_sections_take_the_scenario_sections_keys() {
    let accepted = accepted();
    for (alias, of) in ALIASES {
        let key = alias.rsplit_once('.').unwrap().1;
        // Probe the table inside the base scenario's one algorithm.
        let probe = |entry: toml::Table| {
            let mut doc = base();
            let alg = doc["algorithms"].as_array_mut().unwrap()[0]
                .as_table_mut()
                .unwrap();
            alg.insert(key.into(), entry.into());
            load(&doc)
        };
        let keys = &accepted[*of];
        if keys.kinds.is_empty() {
            let m = probe(table(&[(PROBE, "0")])).expect_err("an unknown key is refused");
            assert_eq!(
                listed(&m, &format!("unknown field `{PROBE}`")).as_ref(),
                Some(&keys.common),
                "{alias}: {m}"
            );
        } else {
            let m = probe(table(&[("kind", &format!("\"{PROBE}\""))]))
                .expect_err("an unknown kind is refused");
            let names: BTreeSet<String> = keys.kinds.keys().cloned().collect();
            assert_eq!(
                listed(&m, &format!("unknown variant `{PROBE}`")).as_ref(),
                Some(&names),
                "{alias}: {m}"
            );
            for (kind, own) in &keys.kinds {
                let m = probe(table(&[(PROBE, "0"), ("kind", &format!("\"{kind}\""))]))
                    .expect_err("an unknown key is refused");
                assert_eq!(
                    listed(&m, &format!("unknown field `{PROBE}`")).as_ref(),
                    Some(own),
                    "{alias} (kind = \"{kind}\"): {m}"
                );
            }
        }
    }
}

#[test]
fn the_reference_parser_reads_sections_kinds_and_keys() {
    let md = "# T\n## Top level\n| key | type |\n|-----|------|\n| `seed` | integer |\n\
              ## `[cluster]` (required)\n| key | meaning |\n|--|--|\n| `workers` | n |\n\
              ### `[[cluster.groups]]`\n| key | m |\n|--|--|\n| `rel_tol`, `abs_tol` | `1e-6` |\n\
              ### Notes\n| `kind` | key | m |\n|--|--|--|\n| `\"ring\"` | | |\n| [`\"torus\"`](x.md) | `rows` | |\n\
              ## Limits\n| what | keys |\n|--|--|\n| a | `x` |\n";
    let (docs, problems) = documented(md);
    assert!(problems.is_empty(), "{problems:?}");
    let got: Vec<(String, Option<String>, Option<String>)> = docs
        .into_iter()
        .map(|d| (d.section, d.kind, d.key))
        .collect();
    let s = |x: &str| Some(x.to_owned());
    assert_eq!(
        got,
        [
            (String::new(), None, s("seed")),
            (String::new(), None, s("cluster")),
            ("cluster".into(), None, s("workers")),
            ("cluster".into(), None, s("groups")),
            ("cluster.groups".into(), None, s("rel_tol")),
            ("cluster.groups".into(), None, s("abs_tol")),
            ("cluster.groups".into(), None, s("kind")),
            ("cluster.groups".into(), s("ring"), None),
            ("cluster.groups".into(), None, s("kind")),
            ("cluster.groups".into(), s("torus"), s("rows")),
        ]
    );
    assert_eq!(
        listed(
            "unknown field `zzz_probe`, expected one of `a`, `b`\nmore `c`",
            "unknown field `zzz_probe`"
        ),
        Some(BTreeSet::from(["a".to_owned(), "b".to_owned()]))
    );
    assert_eq!(
        listed(
            "unknown field `zzz_probe`, there are no fields",
            "unknown field `zzz_probe`"
        ),
        Some(BTreeSet::new())
    );
}
