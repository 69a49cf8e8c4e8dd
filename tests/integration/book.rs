//! Keeps the book (`book/src`) true to the code.
//!
//! - Every chapter that `SUMMARY.md` links to exists, and every link from one chapter to another
//!   (`[text](other.md#anchor)`) names a chapter that exists and, when it has one, a heading
//!   anchor that chapter has.
//! - Every ```` ```toml ```` block parses as TOML.
//! - A block that is a whole scenario (it has `cluster` and `algorithms`) passes
//!   `dasim validate`.
//! - Any other block is a fragment: it is merged, table by table, into a minimal valid scenario
//!   ([`BASE`]: 16 workers on a ring, one all-reduce, 1 simulated second), its keys overriding
//!   the base's, and the result must pass `dasim validate` too.
//!
//! Two fence markers:
//!
//! - ```` ```toml,ignore ```` skips validation (the block must still parse). Use it for
//!   deliberately wrong examples, and rarely.
//! - ```` ```csv,file=traces/v100.csv ```` (any language) is an attachment: before a chapter's
//!   blocks are validated, the attachments of that chapter are written, at their relative paths,
//!   next to the scenario file, so a snippet can name a trace or an edge list shown in the text.
//! - ```` ```toml,base=scenarios/papers/side-by-side.toml ```` merges the fragment into that
//!   scenario file (relative to the repository root) instead of [`BASE`], for a fragment that
//!   needs a scenario's algorithms (claims naming them).
//!
//! Failures name the chapter file and the line of the block's opening fence.

use crate::common;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The scenario every fragment is merged into.
const BASE: &str = r#"
[cluster]
workers = 16

[topology]
kind = "ring"

[run]
sim_time_s = 1.0

[[algorithms]]
kind = "allreduce"
"#;

fn book_src() -> PathBuf {
    common::manifest_dir().join("book").join("src")
}

/// Every `.md` file under `book/src`, as paths relative to it, sorted.
fn chapters() -> Vec<PathBuf> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, root, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    let root = book_src();
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    assert!(!out.is_empty(), "no chapter under {}", root.display());
    out
}

fn read(chapter: &Path) -> String {
    let path = book_src().join(chapter);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// A fenced code block.
#[derive(Debug)]
struct Block {
    /// 1-based line of the opening fence.
    line: usize,
    /// The language: the first word of the info string.
    lang: String,
    /// The other words of the info string (`ignore`, `file=PATH`).
    attrs: Vec<String>,
    /// The content, indentation of the fence removed.
    text: String,
}

impl Block {
    fn attachment(&self) -> Option<&str> {
        self.attrs.iter().find_map(|a| a.strip_prefix("file="))
    }

    fn ignored(&self) -> bool {
        self.attrs.iter().any(|a| a == "ignore")
    }

    fn base(&self) -> Option<&str> {
        self.attrs.iter().find_map(|a| a.strip_prefix("base="))
    }
}

/// The fenced blocks of a Markdown text (backtick fences, possibly indented in a list).
fn blocks(md: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<(usize, usize, usize, String)> = None; // line, indent, fence length, info
    let mut text = String::new();
    for (i, line) in md.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let ticks = trimmed.chars().take_while(|&c| c == '`').count();
        match &open {
            None if ticks >= 3 => {
                open = Some((i + 1, indent, ticks, trimmed[ticks..].trim().to_string()));
                text.clear();
            }
            None => {}
            Some((start, _, len, info)) if ticks >= *len && trimmed[ticks..].trim().is_empty() => {
                let mut words = info
                    .split(|c: char| c == ',' || c.is_whitespace())
                    .filter(|w| !w.is_empty())
                    .map(str::to_string);
                out.push(Block {
                    line: *start,
                    lang: words.next().unwrap_or_default(),
                    attrs: words.collect(),
                    text: std::mem::take(&mut text),
                });
                open = None;
            }
            Some((_, fence_indent, _, _)) => {
                let strip = indent.min(*fence_indent);
                text.push_str(&line[strip..]);
                text.push('\n');
            }
        }
    }
    if let Some((start, ..)) = open {
        panic!("a code block opened at line {start} is never closed");
    }
    out
}

/// Merges `over` into `base`: tables merge key by key, anything else is replaced.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Runs `dasim validate` on `text` written as `scenario.toml` in a fresh directory that also
/// holds `attachments`; the error output on failure.
fn validate(text: &str, attachments: &[(String, String)]) -> Result<(), String> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    for (rel, content) in attachments {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
    }
    let path = dir.path().join("scenario.toml");
    std::fs::write(&path, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dasim"))
        .args(["validate", path.to_str().unwrap()])
        .output()
        .expect("the dasim binary runs");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "exit {:?}\n{}{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn indent(s: &str) -> String {
    let mut out = String::new();
    for l in s.lines() {
        let _ = writeln!(out, "    {l}");
    }
    out
}

#[test]
fn summary_chapters_exist() {
    let summary = read(Path::new("SUMMARY.md"));
    let mut missing = Vec::new();
    let mut linked = 0;
    for (no, line) in summary.lines().enumerate() {
        for target in link_targets(line) {
            linked += 1;
            if target.is_empty() {
                missing.push(format!(
                    "SUMMARY.md:{}: a draft chapter (empty link)",
                    no + 1
                ));
            } else if !book_src().join(&target).is_file() {
                missing.push(format!(
                    "SUMMARY.md:{}: `{target}` does not exist under book/src",
                    no + 1
                ));
            }
        }
    }
    assert!(linked > 0, "SUMMARY.md links no chapter");
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// The targets of the Markdown links `[text](target)` on a line, outside inline code.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'`' => in_code = !in_code,
            b']' if !in_code && bytes.get(i + 1) == Some(&b'(') => {
                if let Some(end) = line[i + 2..].find(')') {
                    let target = line[i + 2..i + 2 + end].trim();
                    out.push(target.split_whitespace().next().unwrap_or("").to_string());
                    i += 2 + end;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The anchor mdBook gives a heading: its text without markup, lower-cased, spaces to `-`,
/// punctuation other than `-` and `_` dropped; repeats get `-1`, `-2`, ….
fn anchors(md: &str) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    let mut in_fence = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence || !line.starts_with('#') {
            continue;
        }
        let text = line.trim_start_matches('#').trim();
        // Links in headings keep their text only.
        let mut plain = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            if c == ']' && chars.peek() == Some(&'(') {
                for c in chars.by_ref() {
                    if c == ')' {
                        break;
                    }
                }
            } else {
                plain.push(c);
            }
        }
        let id: String = plain
            .chars()
            .filter_map(|c| {
                if c.is_alphanumeric() || c == '_' || c == '-' {
                    Some(c.to_lowercase().next().unwrap_or(c))
                } else if c.is_whitespace() {
                    Some('-')
                } else {
                    None
                }
            })
            .collect();
        let count = counts.entry(id.clone()).or_insert(0);
        seen.push(if *count == 0 {
            id
        } else {
            format!("{id}-{count}")
        });
        *count += 1;
    }
    seen
}

#[test]
fn links_between_chapters_resolve() {
    let mut bad = Vec::new();
    for chapter in chapters() {
        let md = read(&chapter);
        let mut in_fence = false;
        for (no, line) in md.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                in_fence = !in_fence;
                continue;
            }
            if in_fence {
                continue;
            }
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (file, anchor) = match target.split_once('#') {
                    Some((f, a)) => (f, Some(a)),
                    None => (target.as_str(), None),
                };
                let path = if file.is_empty() {
                    chapter.clone()
                } else {
                    chapter.parent().unwrap_or(Path::new("")).join(file)
                };
                let at = format!("book/src/{}:{}", chapter.display(), no + 1);
                if !path.to_string_lossy().ends_with(".md") {
                    continue;
                }
                let full = book_src().join(&path);
                let Ok(target_md) = std::fs::read_to_string(&full) else {
                    bad.push(format!(
                        "{at}: link `{target}`: {} does not exist",
                        path.display()
                    ));
                    continue;
                };
                if let Some(a) = anchor
                    && !anchors(&target_md).iter().any(|x| x == a)
                {
                    bad.push(format!(
                        "{at}: link `{target}`: {} has no heading with anchor `#{a}`",
                        path.display()
                    ));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn toml_blocks_parse_and_validate() {
    let base: toml::Table = BASE.parse().expect("the base scenario parses");
    validate(BASE, &[]).expect("the base scenario validates");
    let mut failures = Vec::new();
    let mut checked = 0;
    for chapter in chapters() {
        let md = read(&chapter);
        let blocks = blocks(&md);
        let attachments: Vec<(String, String)> = blocks
            .iter()
            .filter_map(|b| {
                let rel = b.attachment()?;
                assert!(
                    Path::new(rel).is_relative() && !rel.contains(".."),
                    "book/src/{}:{}: an attachment path must be relative and stay below the scenario's directory: {rel}",
                    chapter.display(),
                    b.line
                );
                Some((rel.to_string(), b.text.clone()))
            })
            .collect();
        for b in blocks.iter().filter(|b| b.lang == "toml") {
            let at = format!("book/src/{}:{}", chapter.display(), b.line);
            let table: toml::Table = match b.text.parse() {
                Ok(t) => t,
                Err(e) => {
                    let line = e
                        .span()
                        .map(|s| b.line + 1 + b.text[..s.start].matches('\n').count());
                    let mut msg = format!("{at}: the toml block does not parse");
                    if let Some(l) = line {
                        let _ = write!(msg, " (error at line {l})");
                    }
                    let _ = write!(msg, ":\n{}", indent(e.message()));
                    failures.push(msg);
                    continue;
                }
            };
            if b.ignored() {
                continue;
            }
            checked += 1;
            let whole = table.contains_key("cluster") && table.contains_key("algorithms");
            let (text, what) = if whole {
                (b.text.clone(), "the scenario")
            } else {
                let mut merged = match b.base() {
                    None => base.clone(),
                    Some(rel) => {
                        let path = common::manifest_dir().join(rel);
                        std::fs::read_to_string(&path)
                            .unwrap_or_else(|e| panic!("{at}: base={rel}: {e}"))
                            .parse()
                            .unwrap_or_else(|e| panic!("{at}: base={rel} does not parse: {e}"))
                    }
                };
                merge(&mut merged, table);
                (
                    toml::to_string(&merged).expect("a merged table serializes"),
                    "the fragment, merged into the base scenario,",
                )
            };
            if let Err(e) = validate(&text, &attachments) {
                let mut msg = format!("{at}: {what} does not validate:\n{}", indent(&e));
                if !whole {
                    let _ = write!(msg, "  merged scenario:\n{}", indent(&text));
                }
                failures.push(msg);
            }
        }
    }
    assert!(checked > 0, "no toml block was checked");
    assert!(
        failures.is_empty(),
        "{} toml block(s) of the book are wrong:\n\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn the_block_scanner_finds_fences_and_markers() {
    let md = "text\n```toml,ignore\na = 1\n```\n\n- item\n\n  ```csv,file=t/x.csv\n  duration_ms\n  1\n  ```\n";
    let b = blocks(md);
    assert_eq!(b.len(), 2);
    assert_eq!(
        (b[0].line, b[0].lang.as_str(), b[0].ignored()),
        (2, "toml", true)
    );
    assert_eq!(b[0].text, "a = 1\n");
    assert_eq!(b[1].attachment(), Some("t/x.csv"));
    assert_eq!(b[1].text, "duration_ms\n1\n");
    let mut base: toml::Table = "[a]\nx = 1\ny = 2\n[[b]]\nk = 1\n".parse().unwrap();
    merge(&mut base, "[a]\ny = 3\n[[b]]\nk = 2\n".parse().unwrap());
    assert_eq!(base["a"]["x"].as_integer(), Some(1));
    assert_eq!(base["a"]["y"].as_integer(), Some(3));
    assert_eq!(base["b"].as_array().unwrap().len(), 1);
    assert_eq!(
        anchors("# The `[cluster]` model\n## Compute: base time\n## Compute: base time\n"),
        [
            "the-cluster-model",
            "compute-base-time",
            "compute-base-time-1"
        ]
    );
    assert_eq!(link_targets("see [a](x.md#y) and `[b](z.md)`"), ["x.md#y"]);
}

/// The tutorial builds `scenarios/papers/side-by-side.toml`: its last toml block is that
/// scenario (comments aside).
#[test]
fn the_tutorial_ends_at_the_shipped_scenario() {
    let md = read(Path::new("tutorial.md"));
    let last = blocks(&md)
        .into_iter()
        .rfind(|b| b.lang == "toml")
        .expect("the tutorial has a toml block");
    let shown: toml::Table = last.text.parse().expect("the tutorial's last block parses");
    let path = common::manifest_dir().join("scenarios/papers/side-by-side.toml");
    let shipped: toml::Table = std::fs::read_to_string(&path)
        .unwrap()
        .parse()
        .expect("side-by-side.toml parses");
    assert_eq!(
        shown,
        shipped,
        "book/src/tutorial.md:{}: the tutorial's final scenario differs from {}",
        last.line,
        path.display()
    );
}

/// Every source file of the workspace's crates, as text.
fn sources() -> Vec<(PathBuf, String)> {
    let root = common::manifest_dir();
    let mut out = Vec::new();
    let mut dirs: Vec<PathBuf> = ["src", "sim/src", "models/src", "reports/src"]
        .iter()
        .map(|d| root.join(d))
        .collect();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path, text));
            }
        }
    }
    out
}

/// The architecture chapter's table of random streams calls no stream "reserved" that the code
/// draws from (the fault stream was, long after faults had come).
#[test]
fn no_stream_the_code_uses_is_called_reserved() {
    let chapter = book_src().join("architecture.md");
    let text = read(&chapter);
    let sources = sources();
    let mut rows = 0;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("| `") else {
            continue;
        };
        let Some((kind, rest)) = rest.split_once('`') else {
            continue;
        };
        // Rows of the stream table: "| `Kind` (n) | entity | use |".
        if !rest.trim_start().starts_with('(') || !kind.chars().all(char::is_alphanumeric) {
            continue;
        }
        rows += 1;
        let used = sources.iter().any(|(_, s)| {
            s.contains(&format!("StreamKind::{kind},"))
                || s.contains(&format!("StreamKind::{kind})"))
        });
        let reserved = line.to_lowercase().contains("reserved");
        assert!(
            !(used && reserved),
            "{}: the `{kind}` stream is drawn from by the code but called reserved",
            chapter.display()
        );
    }
    assert!(rows >= 7, "the stream table has {rows} rows");
}

/// The chapter "Testing claims" holds the metric table exactly as the code renders it for the
/// algorithm registry's declarations: one owner, the code (a kind that starts or stops taking a
/// measurement changes the "defined for" column).
#[test]
fn the_book_lists_the_metric_set_of_the_code() {
    let path = book_src().join("testing-claims.md");
    let book = read(&path);
    let table = dasim_reports::claims::metrics::markdown_table(&dasim::scenario::measured());
    assert!(
        book.contains(&table),
        "the metric table of {} differs from the code's; paste:\n\n{table}",
        path.display()
    );
}
