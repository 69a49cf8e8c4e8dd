//! Text for language models: a character-level tokenizer and windows of `context + 1` tokens.
//!
//! - **Tokenizer** ([`Vocab`]): one token per Unicode scalar value (character) that occurs in
//!   the file, numbered in code-point order (nanoGPT's `shakespeare_char`). The vocabulary is
//!   that of the whole file, so that the held-out part has no unknown token.
//! - **Split**: the first `1 − test_fraction` of the tokens train, the rest is held out. The cut
//!   is contiguous (no shuffle): overlapping windows of a shuffled text would put the same
//!   characters on both sides.
//! - **Windows**: a sample is a window of `context + 1` consecutive tokens, the model's inputs
//!   and, shifted by one, its targets. The training split has a window at every position
//!   (stride 1: `n − context` samples, partitioned across workers and drawn at random as any
//!   other samples), the held-out split has windows side by side (stride `context`), so that
//!   an evaluation predicts every held-out token once. Windows are views of one token stream
//!   ([`Dataset::sample`]), never copied.

use std::io::Read;
use std::path::Path;

use flate2::read::GzDecoder;

use super::{Dataset, Split};
use crate::error::{Error, Result};

/// A character-level vocabulary: the distinct characters of a text, in code-point order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vocab {
    chars: Vec<char>,
}

impl Vocab {
    /// The vocabulary of `text`.
    pub fn of(text: &str) -> Self {
        let mut chars: Vec<char> = text.chars().collect();
        chars.sort_unstable();
        chars.dedup();
        Vocab { chars }
    }

    /// Tokens in the vocabulary.
    pub fn len(&self) -> usize {
        self.chars.len()
    }

    /// Whether the vocabulary has no token (the text was empty).
    pub fn is_empty(&self) -> bool {
        self.chars.is_empty()
    }

    /// The tokens of `text`.
    ///
    /// # Panics
    /// On a character outside the vocabulary.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        text.chars()
            .map(|c| {
                let i = self
                    .chars
                    .binary_search(&c)
                    .unwrap_or_else(|_| panic!("{c:?} is not in the vocabulary"));
                u32::try_from(i).expect("fewer than 2³² characters")
            })
            .collect()
    }

    /// The text of `tokens`.
    pub fn decode(&self, tokens: &[u32]) -> String {
        tokens.iter().map(|&t| self.chars[t as usize]).collect()
    }
}

/// Reads a UTF-8 text file, gunzipping it when its name ends in `.gz`.
pub fn read_text(path: &Path) -> Result<String> {
    let data_err = |reason: String| Error::Data {
        path: path.to_path_buf(),
        reason,
    };
    let raw = std::fs::read(path).map_err(|e| data_err(format!("cannot read the file: {e}")))?;
    let bytes = if path.extension().is_some_and(|e| e == "gz") {
        let mut out = Vec::new();
        GzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .map_err(|e| data_err(format!("not a valid gzip file: {e}")))?;
        out
    } else {
        raw
    };
    String::from_utf8(bytes).map_err(|e| {
        data_err(format!(
            "not UTF-8 text: invalid byte at offset {}",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// The split of the text at `path` into training windows (stride 1) and held-out windows
/// (stride `context`) of `context + 1` tokens, the held-out part the last `test_fraction` of
/// the tokens (see the module doc). A file that is empty, or whose either part is shorter than
/// one window, is an [`Error::Data`] naming the file.
pub fn load_text(path: &Path, context: usize, test_fraction: f64) -> Result<(Split, Vocab)> {
    let text = read_text(path)?;
    let vocab = Vocab::of(&text);
    let tokens = vocab.encode(&text);
    let n = tokens.len();
    let window = context + 1;
    let data_err = |reason: String| Error::Data {
        path: path.to_path_buf(),
        reason,
    };
    if n == 0 {
        return Err(data_err(
            "the file is empty: a language model needs text".into(),
        ));
    }
    let test_len = ((n as f64) * test_fraction).round() as usize;
    let train_len = n - test_len;
    for (part, len, fraction) in [
        ("training", train_len, 1.0 - test_fraction),
        ("held-out", test_len, test_fraction),
    ] {
        if len < window {
            return Err(data_err(format!(
                "{n} characters: its {part} part ({:.0}%, {len} tokens) is shorter than one window of context + 1 = {window} tokens; use a longer text, a shorter [data] context or another test_fraction",
                fraction * 100.0
            )));
        }
    }
    let v = vocab.len();
    let split = Split {
        train: Dataset::text(&tokens[..train_len], window, 1, v),
        test: Dataset::text(&tokens[train_len..], window, context, v),
    };
    Ok((split, vocab))
}
