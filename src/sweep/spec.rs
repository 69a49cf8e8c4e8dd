//! The `[sweep]` table: which keys vary over which values, and the points it expands to.
//!
//! The sweep works on the scenario's TOML document, not on the typed [`Scenario`]: every
//! point is the document without `[sweep]`, with each swept key set to one of its values,
//! written back to TOML text and loaded (parsed and validated) like any scenario file. An error
//! of a point is located back in the original file: at the `[sweep]` entry when it is about a
//! swept value, else where the same key is in the file, and it names the point.
//!
//! [`Scenario`]: crate::scenario::Scenario

use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use dasim_sim::error::{FieldPath, PathSeg};

use crate::scenario::{Loaded, ScenarioError, locate, span_of};

/// The key of a `[sweep]` table that groups swept keys which vary together.
const ZIP: &str = "zip";
/// Most values an integer range may expand to.
const MAX_RANGE: i64 = 100_000;
/// Most points a sweep may have.
const MAX_POINTS: usize = 1_000_000;
/// Longest point name kept as is; longer ones are shortened (with a hash, to stay unique).
const MAX_NAME: usize = 120;

/// One swept key: its path, its values, and where they are written in the file.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    /// The key path as written in `[sweep]`, normalized (`cluster.stragglers[0].factor`).
    pub key: String,
    /// The same path, parsed.
    pub path: Vec<PathSeg>,
    /// Its values, in order.
    pub values: Vec<toml::Value>,
    /// The short name used in point names (`factor`, or a longer suffix of the path where
    /// two axes end alike).
    pub short: String,
    /// Byte span of the key in the file.
    key_span: Range<usize>,
    /// Byte span of each value in the file (a range string's span for each of its values).
    value_spans: Vec<Range<usize>>,
}

/// One point of a sweep: a value for every swept key.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// Its position in the sweep's order, from 0.
    pub index: usize,
    /// Its name, unique in the sweep, made from its values (`workers=16,factor=4,seed=2`); the
    /// name of its run directory.
    pub name: String,
    /// The swept keys and their values at this point, in the order of the `[sweep]` table.
    pub values: Vec<(String, toml::Value)>,
    /// The scenario of this point: the file without `[sweep]`, the swept keys set.
    pub text: String,
    /// The index of each axis' value.
    choice: Vec<usize>,
}

/// A scenario file with a `[sweep]` table, parsed: the document without it and the axes.
#[derive(Clone, Debug)]
pub struct Sweep {
    /// The scenario file.
    pub path: PathBuf,
    /// Its text.
    pub text: String,
    /// The swept keys, in the order of the file.
    pub axes: Vec<Axis>,
    /// Groups of axes that vary together (`zip`), by index into `axes`, in the order of each
    /// group's first axis; an axis not zipped is a group of its own. The product runs over
    /// the groups, the last one varying fastest.
    pub groups: Vec<Vec<usize>>,
    /// The document without `[sweep]`.
    base: toml::Table,
}

/// Parses a key path: keys separated by dots, each optionally followed by `[i]` indices
/// (`cluster.stragglers[0].factor`). Keys are TOML bare keys (letters, digits, `_`, `-`).
pub fn parse_key_path(s: &str) -> Result<Vec<PathSeg>, String> {
    let bad = |why: &str| {
        Err(format!(
            "`{s}` is not a key path ({why}); write keys separated by dots, with [i] for an entry of a list, e.g. \"cluster.stragglers[0].factor\""
        ))
    };
    if s.is_empty() {
        return bad("it is empty");
    }
    let mut segs = Vec::new();
    for part in s.split('.') {
        let (key, mut rest) = part.split_at(part.find('[').unwrap_or(part.len()));
        if key.is_empty() {
            return bad("a key is missing");
        }
        if !key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return bad(&format!("`{key}` is not a bare key"));
        }
        segs.push(PathSeg::Key(key.to_owned()));
        while !rest.is_empty() {
            let Some(close) = rest.find(']').filter(|_| rest.starts_with('[')) else {
                return bad("unbalanced brackets");
            };
            match rest[1..close].parse::<usize>() {
                Ok(i) => segs.push(PathSeg::Index(i)),
                Err(_) => return bad(&format!("`{}` is not an index", &rest[1..close])),
            }
            rest = &rest[close + 1..];
        }
    }
    Ok(segs)
}

/// Whether the file's TOML document has a top-level `sweep` key (without validating anything
/// else; a file that does not parse has none).
pub fn has_sweep(text: &str) -> bool {
    DeTable::parse(text).is_ok_and(|t| t.get_ref().iter().any(|(k, _)| k.get_ref() == "sweep"))
}

/// A value as it reads in a point's name: numbers and booleans as written, strings as they
/// are, a table by its `kind`, anything else by its position in the list (`#2`).
fn value_label(value: &toml::Value, position: usize) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Table(t) => match t.get("kind") {
            Some(toml::Value::String(k)) => k.clone(),
            _ => format!("#{}", position + 1),
        },
        _ => format!("#{}", position + 1),
    }
}

/// `s` with every character a file name should not carry replaced by `-`; index brackets
/// become dots (`stragglers.0.factor`), so that a name is never a shell glob.
fn file_safe(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        match c {
            c if c.is_ascii_alphanumeric() || "._+-=,".contains(c) => out.push(c),
            '[' => out.push('.'),
            ']' => {}
            _ => out.push('-'),
        }
    }
    if out.starts_with('.') {
        out.insert(0, '_');
    }
    out
}

/// A path's text from segment `from` on (`stragglers[0].factor`).
fn path_text(path: &[PathSeg]) -> String {
    FieldPath(path.to_vec()).to_string()
}

/// For each axis, the shortest suffix of its path starting at a key that no other axis ends
/// with.
fn short_names(paths: &[Vec<PathSeg>]) -> Vec<String> {
    let starts = |p: &[PathSeg]| -> Vec<usize> {
        (0..p.len())
            .rev()
            .filter(|&i| matches!(p[i], PathSeg::Key(_)))
            .collect()
    };
    paths
        .iter()
        .enumerate()
        .map(|(a, p)| {
            for from in starts(p) {
                let suffix = &p[from..];
                let clash = paths
                    .iter()
                    .enumerate()
                    .any(|(b, q)| b != a && q.len() >= suffix.len() && q.ends_with(suffix));
                if !clash {
                    return path_text(suffix);
                }
            }
            path_text(p)
        })
        .collect()
}

/// A scenario file, for locating the errors of its `[sweep]` table.
#[derive(Clone, Copy)]
struct InFile<'a> {
    path: &'a Path,
    text: &'a str,
}

impl InFile<'_> {
    /// The error `message` located at the start of `span` in the file, with an optional hint.
    fn err(
        &self,
        span: Option<Range<usize>>,
        message: String,
        hint: Option<&str>,
    ) -> Box<ScenarioError> {
        Box::new(locate(
            self.path,
            self.text,
            span.map(|s| s.start),
            None,
            message,
            hint.map(str::to_owned),
        ))
    }
}

/// A swept key of the `[sweep]` table, nested tables flattened: its path, where it is, and
/// its value in the spanned and in the typed document.
struct Leaf<'a> {
    path: Vec<PathSeg>,
    key_span: Range<usize>,
    de: &'a Spanned<DeValue<'a>>,
    value: toml::Value,
}

/// The `zip` entry of a `[sweep]` table: its key's span and its value.
type ZipEntry<'a> = (Range<usize>, &'a Spanned<DeValue<'a>>);

/// Flattens nested tables (`cluster.workers = [..]` without quotes nests) into `leaves`; the
/// `zip` entry at the `top` level goes to `zip`. Fails with the span of a malformed key path.
fn flatten<'a>(
    de: &'a DeTable<'a>,
    typed: &toml::Table,
    prefix: &[PathSeg],
    top: bool,
    leaves: &mut Vec<Leaf<'a>>,
    zip: &mut Option<ZipEntry<'a>>,
) -> Result<(), (Range<usize>, String)> {
    for (k, v) in de.iter() {
        let name = k.get_ref().as_ref();
        let typed_v = typed
            .get(name)
            .expect("the typed and the spanned documents agree");
        if top && name == ZIP {
            *zip = Some((k.span(), v));
            continue;
        }
        let mut path = prefix.to_vec();
        path.extend(parse_key_path(name).map_err(|m| (k.span(), m))?);
        match (v.get_ref(), typed_v) {
            (DeValue::Table(t), toml::Value::Table(tt)) => {
                flatten(t, tt, &path, false, leaves, zip)?
            }
            _ => leaves.push(Leaf {
                path,
                key_span: k.span(),
                de: v,
                value: typed_v.clone(),
            }),
        }
    }
    Ok(())
}

/// The axes of the swept keys `leaves`, in their order, with their short names; a key swept
/// twice is an error.
fn axes_of(leaves: Vec<Leaf<'_>>, file: InFile<'_>) -> Result<Vec<Axis>, Box<ScenarioError>> {
    let mut axes: Vec<Axis> = Vec::new();
    for leaf in leaves {
        if let Some(other) = axes.iter().find(|a| a.path == leaf.path) {
            return Err(file.err(
                Some(leaf.key_span),
                format!(
                    "`{}` is swept twice (also as `{}`)",
                    path_text(&leaf.path),
                    other.key
                ),
                None,
            ));
        }
        axes.push(axis_of(leaf, file)?);
    }
    let shorts = short_names(&axes.iter().map(|a| a.path.clone()).collect::<Vec<_>>());
    for (axis, short) in axes.iter_mut().zip(shorts) {
        axis.short = short;
    }
    Ok(axes)
}

/// The axis of one swept key: its values from a non-empty list or an integer range string
/// (its short name left empty).
fn axis_of(leaf: Leaf<'_>, file: InFile<'_>) -> Result<Axis, Box<ScenarioError>> {
    let key = path_text(&leaf.path);
    let (values, value_spans) = match (&leaf.value, leaf.de.get_ref()) {
        (toml::Value::Array(items), DeValue::Array(de_items)) => {
            if items.is_empty() {
                return Err(file.err(
                    Some(leaf.de.span()),
                    format!("`{key}` is swept over an empty list"),
                    Some("give at least one value"),
                ));
            }
            (items.clone(), de_items.iter().map(|d| d.span()).collect())
        }
        (toml::Value::String(s), _) => {
            let values = parse_range(s)
                .map_err(|m| file.err(Some(leaf.de.span()), format!("`{key}`: {m}"), None))?;
            let spans = vec![leaf.de.span(); values.len()];
            (values, spans)
        }
        _ => {
            return Err(file.err(
                Some(leaf.de.span()),
                format!("`{key}` must be swept over a list of values or an integer range"),
                Some("write `[1, 2, 4]` or `\"1..=5\"` (a string for a range)"),
            ));
        }
    };
    Ok(Axis {
        key,
        path: leaf.path,
        values,
        short: String::new(),
        key_span: leaf.key_span,
        value_spans,
    })
}

/// The groups of axes the product runs over: each `zip` entry is one, every other axis its
/// own, in the order of each group's first axis.
fn groups_of(
    zip: Option<ZipEntry<'_>>,
    axes: &[Axis],
    file: InFile<'_>,
) -> Result<Vec<Vec<usize>>, Box<ScenarioError>> {
    let mut group_of: Vec<Option<usize>> = vec![None; axes.len()];
    let mut zipped: Vec<Vec<usize>> = Vec::new();
    if let Some((zip_key, zip_value)) = zip {
        let DeValue::Array(groups) = zip_value.get_ref() else {
            return Err(file.err(Some(zip_key), ZIP_SHAPE.into(), None));
        };
        for group in groups.iter() {
            let members = zip_group(group, axes, &mut group_of, zipped.len(), file)?;
            if !members.is_empty() {
                zipped.push(members);
            }
        }
    }
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut placed = vec![false; zipped.len()];
    for (a, group) in group_of.iter().enumerate() {
        match *group {
            None => groups.push(vec![a]),
            Some(g) if !placed[g] => {
                placed[g] = true;
                groups.push(zipped[g].clone());
            }
            Some(_) => {}
        }
    }
    Ok(groups)
}

/// What a `zip` entry must look like.
const ZIP_SHAPE: &str =
    "`zip` is a list of groups of swept keys, e.g. zip = [[\"cluster.workers\", \"seed\"]]";

/// The axes of one `zip` group, marked in `group_of` as group `index`: swept keys, each in
/// one group only, with as many values each.
fn zip_group(
    group: &Spanned<DeValue<'_>>,
    axes: &[Axis],
    group_of: &mut [Option<usize>],
    index: usize,
    file: InFile<'_>,
) -> Result<Vec<usize>, Box<ScenarioError>> {
    let DeValue::Array(keys) = group.get_ref() else {
        return Err(file.err(Some(group.span()), ZIP_SHAPE.into(), None));
    };
    let mut members: Vec<usize> = Vec::new();
    for k in keys.iter() {
        let Some(name) = k.get_ref().as_str() else {
            return Err(file.err(Some(k.span()), ZIP_SHAPE.into(), None));
        };
        let p = parse_key_path(name).map_err(|m| file.err(Some(k.span()), m, None))?;
        let Some(a) = axes.iter().position(|a| a.path == p) else {
            return Err(file.err(
                Some(k.span()),
                format!("`zip` names `{name}`, which is not swept"),
                Some("zip groups keys of the [sweep] table itself"),
            ));
        };
        if group_of[a].is_some() {
            return Err(file.err(
                Some(k.span()),
                format!("`{name}` is in two zip groups (or twice in one)"),
                None,
            ));
        }
        if let Some(&first) = members.first() {
            let (n, m) = (axes[first].values.len(), axes[a].values.len());
            if n != m {
                return Err(file.err(
                    Some(k.span()),
                    format!(
                        "zipped keys need as many values each: `{}` has {n}, `{name}` has {m}",
                        axes[first].key
                    ),
                    None,
                ));
            }
        }
        group_of[a] = Some(index);
        members.push(a);
    }
    Ok(members)
}

impl Sweep {
    /// Parses the `[sweep]` table of scenario text; `Ok(None)` when it has none. Errors in the
    /// table itself (a malformed key path, a value that is neither a list nor a range, a `zip`
    /// group naming an unswept key or of unequal lengths) are located in the file.
    pub fn parse(path: &Path, text: &str) -> Result<Option<Sweep>, Box<ScenarioError>> {
        let file = InFile { path, text };
        let doc = match DeTable::parse(text) {
            Ok(d) => d,
            // Not TOML: the scenario loader says why, located.
            Err(_) => {
                return Loaded::from_str(path, text.to_owned()).map(|_| None);
            }
        };
        let mut base: toml::Table = toml::from_str(text)
            .map_err(|e| file.err(e.span(), e.message().trim_end().to_owned(), None))?;
        let Some((sweep_key, sweep_value)) =
            doc.get_ref().iter().find(|(k, _)| k.get_ref() == "sweep")
        else {
            return Ok(None);
        };
        let Some(toml::Value::Table(raw)) = base.remove("sweep") else {
            return Err(file.err(
                Some(sweep_key.span()),
                "`sweep` must be a table: [sweep] followed by `key = [values]` lines".into(),
                None,
            ));
        };
        let DeValue::Table(table) = sweep_value.get_ref() else {
            unreachable!("the typed and the spanned documents agree");
        };

        let mut leaves = Vec::new();
        let mut zip = None;
        flatten(table, &raw, &[], true, &mut leaves, &mut zip)
            .map_err(|(span, m)| file.err(Some(span), m, None))?;
        leaves.sort_by_key(|l| l.key_span.start);
        if leaves.is_empty() {
            return Err(file.err(
                Some(sweep_key.span()),
                "the [sweep] table sweeps no key".into(),
                Some("add `\"cluster.workers\" = [8, 16]` or `seed = \"1..=5\"` under [sweep]"),
            ));
        }
        let axes = axes_of(leaves, file)?;
        let groups = groups_of(zip, &axes, file)?;
        let count = groups
            .iter()
            .try_fold(1usize, |n, g| n.checked_mul(axes[g[0]].values.len()));
        if count.is_none_or(|c| c > MAX_POINTS) {
            return Err(file.err(
                Some(sweep_key.span()),
                format!("the sweep has more than {MAX_POINTS} points"),
                None,
            ));
        }
        Ok(Some(Sweep {
            path: path.to_path_buf(),
            text: text.to_owned(),
            axes,
            groups,
            base,
        }))
    }

    /// How many points the sweep has.
    pub fn len(&self) -> usize {
        self.groups
            .iter()
            .map(|g| self.axes[g[0]].values.len())
            .product()
    }

    /// Whether the sweep has no point (never: every axis has a value).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every point, in order: the Cartesian product of the groups, the last group varying
    /// fastest. Each point's text is built but not yet loaded ([`Sweep::load`]); an error
    /// setting a value (an index past the end of a list, a key under a value that is not a
    /// table) is located at the `[sweep]` entry and names the point.
    pub fn points(&self) -> Result<Vec<Point>, Box<ScenarioError>> {
        let n = self.len();
        let mut points = Vec::with_capacity(n);
        let mut names: Vec<String> = Vec::with_capacity(n);
        for index in 0..n {
            let mut choice = vec![0; self.axes.len()];
            let mut rest = index;
            for g in self.groups.iter().rev() {
                let len = self.axes[g[0]].values.len();
                for &a in g {
                    choice[a] = rest % len;
                }
                rest /= len;
            }
            let mut name = self
                .axes
                .iter()
                .zip(&choice)
                .map(|(a, &c)| format!("{}={}", a.short, value_label(&a.values[c], c)))
                .collect::<Vec<_>>()
                .join(",");
            name = file_safe(&name);
            if name.len() > MAX_NAME {
                let hash = dasim_reports::rundir::sha256_hex(name.as_bytes());
                let mut cut = MAX_NAME - 10;
                while !name.is_char_boundary(cut) {
                    cut -= 1;
                }
                name = format!("{}~{}", &name[..cut], &hash[..8]);
            }
            if names.contains(&name) {
                name = format!("{name}~{}", index + 1);
            }
            names.push(name.clone());
            let values: Vec<(String, toml::Value)> = self
                .axes
                .iter()
                .zip(&choice)
                .map(|(a, &c)| (a.key.clone(), a.values[c].clone()))
                .collect();
            let mut doc = self.base.clone();
            for (a, &c) in self.axes.iter().zip(&choice) {
                set(&mut doc, &a.path, a.values[c].clone()).map_err(|m| {
                    Box::new(locate(
                        &self.path,
                        &self.text,
                        Some(a.key_span.start),
                        Some(a.key.clone()),
                        format!("sweep point `{name}`: {m}"),
                        None,
                    ))
                })?;
            }
            let text = toml::to_string(&doc).expect("a TOML table serializes");
            points.push(Point {
                index,
                name,
                values,
                text,
                choice,
            });
        }
        Ok(points)
    }

    /// The file name a point's scenario is loaded under: beside the sweep's file (so relative
    /// paths in the scenario resolve as in the file), named after it and the point.
    pub fn point_path(&self, point: &Point) -> PathBuf {
        let stem = self
            .path
            .file_stem()
            .map_or_else(|| "scenario".into(), |s| s.to_string_lossy().into_owned());
        self.path
            .with_file_name(format!("{stem}@{}.toml", point.name))
    }

    /// Loads (parses and validates) one point like a scenario file. An error is located in the
    /// sweep's file, at the `[sweep]` value when it concerns a swept key (at its key when the
    /// key is unknown), else where the key it names is in the file, and names the point.
    pub fn load(&self, point: &Point) -> Result<Loaded, Box<ScenarioError>> {
        Loaded::from_str(&self.point_path(point), point.text.clone())
            .map_err(|e| self.relocate(point, &e))
    }

    /// Loads every point, failing at the first that does not load.
    pub fn load_all(&self) -> Result<Vec<(Point, Loaded)>, Box<ScenarioError>> {
        self.points()?
            .into_iter()
            .map(|p| self.load(&p).map(|l| (p, l)))
            .collect()
    }

    /// Locates an error of `point`'s text in the sweep's file (see [`Sweep::load`]).
    pub fn relocate(&self, point: &Point, e: &ScenarioError) -> Box<ScenarioError> {
        // The key the error is about: the field it names, else the deepest key at its position
        // in the point's text.
        let about: Option<Vec<PathSeg>> = match &e.field {
            Some(f) => Some(FieldPath::parse(f).0),
            None => e
                .line
                .zip(e.column)
                .and_then(|(l, c)| offset_of(&point.text, l, c))
                .and_then(|off| path_at(&point.text, off)),
        };
        let message = match &e.field {
            Some(f) if !e.message.contains(f.as_str()) => {
                format!("sweep point `{}`: {f}: {}", point.name, e.message)
            }
            _ => format!("sweep point `{}`: {}", point.name, e.message),
        };
        let swept = about.as_ref().and_then(|p| {
            self.axes
                .iter()
                .enumerate()
                .find(|(_, a)| p.starts_with(&a.path))
        });
        let offset = match (swept, &about) {
            (Some((i, a)), _) => {
                if e.message.starts_with("unknown field") {
                    Some(a.key_span.start)
                } else {
                    Some(a.value_spans[point.choice[i]].start)
                }
            }
            (None, Some(p)) => span_of(&self.text, p),
            (None, None) => None,
        };
        let hint = match (swept, &e.hint) {
            (None, h) if about.is_some() => {
                let sets = point
                    .values
                    .iter()
                    .map(|(k, v)| format!("{k} = {v}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                Some(match h {
                    Some(h) => format!("{h} (the point sets {sets})"),
                    None => format!("the point sets {sets}"),
                })
            }
            (_, h) => h.clone(),
        };
        Box::new(locate(
            &self.path,
            &self.text,
            offset,
            e.field.clone(),
            message,
            hint,
        ))
    }
}

/// The values of an integer range string: `"1..=5"` (inclusive) or `"0..4"` (exclusive).
fn parse_range(s: &str) -> Result<Vec<toml::Value>, String> {
    let bad = || {
        format!(
            "`{s}` is not an integer range; write \"1..=5\" (1 to 5) or \"0..4\" (0 to 3), or a list of values"
        )
    };
    let (lo, hi, inclusive) = if let Some((a, b)) = s.split_once("..=") {
        (a, b, true)
    } else if let Some((a, b)) = s.split_once("..") {
        (a, b, false)
    } else {
        return Err(bad());
    };
    let lo: i64 = lo.trim().parse().map_err(|_| bad())?;
    let hi: i64 = hi.trim().parse().map_err(|_| bad())?;
    let end = if inclusive {
        hi.checked_add(1)
    } else {
        Some(hi)
    }
    .ok_or_else(bad)?;
    if end <= lo {
        return Err(format!("the range `{s}` is empty"));
    }
    if end - lo > MAX_RANGE {
        return Err(format!("the range `{s}` has more than {MAX_RANGE} values"));
    }
    Ok((lo..end).map(toml::Value::Integer).collect())
}

/// The kind of a TOML value, in words.
fn kind_of(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a date",
        toml::Value::Array(_) => "a list",
        toml::Value::Table(_) => "a table",
    }
}

/// A scenario file's text without its `[sweep]` table, and the table. The table's lines are
/// blanked (from its header to the next table header), so that every other line keeps its
/// number and errors point into the file; where that cannot be done faithfully (the blanked
/// text is not the document without the table), the document is written anew.
pub fn without_sweep(text: &str) -> (String, Option<toml::Table>) {
    let Ok(mut doc) = toml::from_str::<toml::Table>(text) else {
        return (text.to_owned(), None);
    };
    let grid = match doc.remove("sweep") {
        Some(toml::Value::Table(t)) => Some(t),
        _ => None,
    };
    let header = |l: &str| {
        let t = l.trim_start();
        let t = t
            .strip_prefix("[[")
            .or_else(|| t.strip_prefix('['))
            .unwrap_or("");
        t.trim_start()
            .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    let mut inside = false;
    let blanked: Vec<&str> = text
        .lines()
        .map(|l| {
            if header(l) {
                inside = l
                    .trim_start()
                    .trim_start_matches('[')
                    .trim_start()
                    .starts_with("sweep")
                    && l.trim_end()
                        .trim_end_matches(']')
                        .trim_end()
                        .ends_with("sweep");
            }
            if inside { "" } else { l }
        })
        .collect();
    let mut blanked = blanked.join("\n");
    blanked.push('\n');
    match toml::from_str::<toml::Table>(&blanked) {
        Ok(t) if t == doc => (blanked, grid),
        _ => (
            toml::to_string(&doc).unwrap_or_else(|_| text.to_owned()),
            grid,
        ),
    }
}

/// Sets `value` at the key path `key` (as a `[sweep]` key is written:
/// `cluster.stragglers[0].factor`) in the scenario document `doc`, as a sweep sets a point's
/// values: missing tables on the way are created, list entries must exist, an integer where the
/// document has a float becomes a float.
pub fn set_key(doc: &mut toml::Table, key: &str, value: toml::Value) -> Result<(), String> {
    let path = parse_key_path(key)?;
    set(doc, &path, value)
}

/// Sets `value` at `path` in `doc`: missing tables on the way are created, list entries must
/// exist. An integer where the document has a float becomes a float (`factor = [1, 2, 4]`).
fn set(doc: &mut toml::Table, path: &[PathSeg], value: toml::Value) -> Result<(), String> {
    let mut value = value;
    let Some((PathSeg::Key(first), rest)) = path.split_first() else {
        return Err("a key path starts with a key".into());
    };
    let mut node: &mut toml::Value =
        doc.entry(first.clone())
            .or_insert_with(|| match rest.first() {
                Some(PathSeg::Index(_)) => toml::Value::Array(Vec::new()),
                _ => toml::Value::Table(toml::Table::new()),
            });
    if rest.is_empty() {
        coerce(node, &mut value);
        *node = value;
        return Ok(());
    }
    for (i, seg) in rest.iter().enumerate() {
        let here = path_text(&path[..=i]);
        let last = i + 1 == rest.len();
        let next_is_index = matches!(rest.get(i + 1), Some(PathSeg::Index(_)));
        node = match (seg, node) {
            (PathSeg::Key(k), toml::Value::Table(t)) => t.entry(k.clone()).or_insert_with(|| {
                if next_is_index {
                    toml::Value::Array(Vec::new())
                } else {
                    toml::Value::Table(toml::Table::new())
                }
            }),
            (PathSeg::Index(n), toml::Value::Array(items)) => {
                let len = items.len();
                items.get_mut(*n).ok_or_else(|| {
                    format!(
                        "`{here}` has {len} entr{} in the scenario, so [{n}] is past its end",
                        if len == 1 { "y" } else { "ies" }
                    )
                })?
            }
            (PathSeg::Key(k), other) => {
                return Err(format!(
                    "`{here}` is {}, so it has no key `{k}`",
                    kind_of(other)
                ));
            }
            (PathSeg::Index(n), other) => {
                return Err(format!(
                    "`{here}` is {}, not a list, so it has no entry [{n}]",
                    kind_of(other)
                ));
            }
        };
        if last {
            coerce(node, &mut value);
            *node = value;
            return Ok(());
        }
    }
    unreachable!("the loop returns at the last segment")
}

/// An integer swept where the document holds a float becomes that float.
fn coerce(existing: &toml::Value, value: &mut toml::Value) {
    if let (toml::Value::Float(_), toml::Value::Integer(i)) = (existing, &*value) {
        *value = toml::Value::Float(*i as f64);
    }
}

/// The key path (`cluster.stragglers[0].factor`) of the deepest key at 1-based `line` and
/// `column` of the TOML document `text`, if any.
pub fn key_at(text: &str, line: usize, column: usize) -> Option<String> {
    let path = path_at(text, offset_of(text, line, column)?)?;
    Some(path_text(&path))
}

/// The byte offset of 1-based `line` and `column` (in characters) of `text`.
fn offset_of(text: &str, line: usize, column: usize) -> Option<usize> {
    let start: usize = text
        .split_inclusive('\n')
        .take(line.checked_sub(1)?)
        .map(str::len)
        .sum();
    let rest = text.get(start..)?;
    let within = rest
        .char_indices()
        .nth(column.checked_sub(1)?)
        .map_or(rest.len(), |(i, _)| i);
    Some(start + within)
}

/// The deepest key whose key or value span holds byte `offset` of `text`.
fn path_at(text: &str, offset: usize) -> Option<Vec<PathSeg>> {
    fn walk(v: &Spanned<DeValue>, offset: usize, path: &mut Vec<PathSeg>) -> bool {
        match v.get_ref() {
            DeValue::Table(t) => {
                for (k, child) in t.iter() {
                    path.push(PathSeg::Key(k.get_ref().to_string()));
                    if k.span().contains(&offset)
                        || walk(child, offset, path)
                        || child.span().contains(&offset)
                    {
                        return true;
                    }
                    path.pop();
                }
                false
            }
            DeValue::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    path.push(PathSeg::Index(i));
                    if walk(child, offset, path) || child.span().contains(&offset) {
                        return true;
                    }
                    path.pop();
                }
                false
            }
            _ => false,
        }
    }
    let table = DeTable::parse(text).ok()?;
    let root = Spanned::new(table.span(), DeValue::Table(table.into_inner()));
    let mut path = Vec::new();
    walk(&root, offset, &mut path).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_sweep_blanks_the_table_and_keeps_every_other_line() {
        let text = "seed = 1\n[sweep]\n\"cluster.workers\" = [2, 4]\nzip = [\n  [\"a\", \"b\"],\n]\n\n[[expect]]\nmetric = \"loss\"\n";
        let (base, grid) = without_sweep(text);
        let grid = grid.expect("the table");
        assert_eq!(grid.len(), 2);
        assert!(!base.contains("sweep") && !base.contains("zip"));
        let lines: Vec<&str> = base.lines().collect();
        assert_eq!(lines.len(), text.lines().count());
        assert_eq!(
            (lines[0], lines[7], lines[8]),
            ("seed = 1", "[[expect]]", "metric = \"loss\"")
        );
        assert_eq!(without_sweep("seed = 1\n"), ("seed = 1\n".to_owned(), None));
    }

    #[test]
    fn key_paths_parse_strictly() {
        let p = parse_key_path("cluster.stragglers[0].factor").unwrap();
        assert_eq!(path_text(&p), "cluster.stragglers[0].factor");
        assert_eq!(p.len(), 4);
        for bad in ["", "a..b", "a[x]", "[0]", "a[0", "a.b c", "a]"] {
            assert!(parse_key_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ranges_expand() {
        let ints = |s| {
            parse_range(s)
                .unwrap()
                .into_iter()
                .map(|v| v.as_integer().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(ints("1..=5"), [1, 2, 3, 4, 5]);
        assert_eq!(ints("0..3"), [0, 1, 2]);
        assert_eq!(ints("-2..=-1"), [-2, -1]);
        assert!(parse_range("5..=1").is_err());
        assert!(parse_range("1..1").is_err());
        assert!(parse_range("ring").is_err());
        assert!(parse_range("0..=1000000").is_err());
    }

    #[test]
    fn short_names_grow_only_where_they_clash() {
        let paths: Vec<_> = ["algorithms[0].tau", "algorithms[1].tau", "cluster.workers"]
            .iter()
            .map(|p| parse_key_path(p).unwrap())
            .collect();
        assert_eq!(
            short_names(&paths),
            ["algorithms[0].tau", "algorithms[1].tau", "workers"]
        );
    }

    #[test]
    fn names_are_file_safe() {
        assert_eq!(file_safe("stragglers[0].factor=4"), "stragglers.0.factor=4");
        assert_eq!(file_safe("kind=a b/c"), "kind=a-b-c");
    }

    #[test]
    fn set_creates_tables_and_refuses_missing_entries() {
        let mut doc: toml::Table = "[cluster]\nworkers = 4\n[[cluster.stragglers]]\nfactor = 2.0\n"
            .parse()
            .unwrap();
        set(
            &mut doc,
            &parse_key_path("optimizer.lr").unwrap(),
            toml::Value::Float(0.1),
        )
        .unwrap();
        assert_eq!(doc["optimizer"]["lr"].as_float(), Some(0.1));
        let factor = parse_key_path("cluster.stragglers[0].factor").unwrap();
        set(&mut doc, &factor, toml::Value::Integer(8)).unwrap();
        assert_eq!(
            doc["cluster"]["stragglers"][0]["factor"].as_float(),
            Some(8.0)
        );
        let past = parse_key_path("cluster.stragglers[1].factor").unwrap();
        let e = set(&mut doc, &past, toml::Value::Integer(8)).unwrap_err();
        assert!(e.contains("has 1 entry"), "{e}");
        let e = set(
            &mut doc,
            &parse_key_path("cluster.workers.x").unwrap(),
            1.into(),
        )
        .unwrap_err();
        assert!(e.contains("is an integer"), "{e}");
    }

    #[test]
    fn offsets_and_paths_round_trip() {
        let text = "a = 1\n[b]\nc = [1, 2]\n";
        let off = offset_of(text, 3, 9).unwrap();
        assert_eq!(&text[off..off + 1], "2");
        let p = path_at(text, off).unwrap();
        assert_eq!(path_text(&p), "b.c[1]");
        assert_eq!(span_of(text, &p), Some(off));
    }
}
