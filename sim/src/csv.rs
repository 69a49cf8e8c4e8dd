//! The small CSV files a scenario names (step-time traces, availability traces): their data
//! lines, numbered from 1, with `#` comments and blank lines skipped.

/// The non-empty lines of `text`, each with its 1-based line number, a `#` comment cut and the
/// rest trimmed.
pub(crate) fn data_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split('#').next().unwrap_or("").trim()))
        .filter(|(_, l)| !l.is_empty())
}
