//! Checks shared by the plot and report tests: the fixture run directories, decode a PNG, check
//! an SVG is well-formed XML. (Also used by the `dasim` package's tests, through `#[path]`.)
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::PathBuf;

/// The hand-written fixture run directory `name` (`reports/tests/fixtures/NAME`), from the tests
/// of either package.
pub fn fixture(name: &str) -> PathBuf {
    let manifest = manifest_dir();
    let here = manifest.join("tests/fixtures");
    let dir = if here.is_dir() {
        here
    } else {
        manifest.join("reports/tests/fixtures")
    };
    dir.join(name)
}

/// A writable copy of a fixture run directory.
pub fn copy_fixture(name: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(name);
    fs::create_dir(&dir).unwrap();
    for entry in fs::read_dir(fixture(name)).unwrap() {
        let entry = entry.unwrap();
        fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    (tmp, dir)
}

/// A decoded image, as 8-bit RGB pixels (alpha dropped), row by row.
#[derive(Debug)]
pub struct Image {
    pub width: u32,
    pub height: u32,
    pub pixels: Vec<[u8; 3]>,
}

impl Image {
    /// The pixels of the rectangle `[x0, x1) × [y0, y1)` (clipped to the image).
    pub fn region(&self, x0: u32, y0: u32, x1: u32, y1: u32) -> Vec<[u8; 3]> {
        let mut out = Vec::new();
        for y in y0..y1.min(self.height) {
            for x in x0..x1.min(self.width) {
                out.push(self.pixels[(y * self.width + x) as usize]);
            }
        }
        out
    }

    /// Distinct colours in a set of pixels.
    pub fn distinct(pixels: &[[u8; 3]]) -> usize {
        pixels.iter().collect::<BTreeSet<_>>().len()
    }

    /// Share of pixels that are not (nearly) white.
    pub fn non_white(pixels: &[[u8; 3]]) -> f64 {
        let n = pixels.iter().filter(|p| p.iter().any(|&c| c < 240)).count();
        n as f64 / pixels.len().max(1) as f64
    }
}

/// Checks the PNG signature, the IHDR chunk and IEND, decodes the image and returns it.
pub fn decode_png(bytes: &[u8]) -> Image {
    assert!(bytes.len() > 33, "PNG too short: {} bytes", bytes.len());
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    assert_eq!(&bytes[12..16], b"IHDR", "first chunk is IHDR");
    assert_eq!(
        &bytes[bytes.len() - 8..bytes.len() - 4],
        b"IEND",
        "ends with IEND"
    );
    let ihdr_w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let ihdr_h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());

    let mut decoder = png::Decoder::new(bytes);
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().expect("PNG header decodes");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("PNG data decodes");
    assert_eq!((info.width, info.height), (ihdr_w, ihdr_h));
    let samples = info.color_type.samples();
    let mut pixels = Vec::with_capacity((info.width * info.height) as usize);
    for row in buf.chunks(info.line_size).take(info.height as usize) {
        for px in row[..info.width as usize * samples].chunks(samples) {
            pixels.push(match samples {
                1 | 2 => [px[0]; 3],
                _ => [px[0], px[1], px[2]],
            });
        }
    }
    Image {
        width: info.width,
        height: info.height,
        pixels,
    }
}

/// Checks that `text` is well-formed XML (balanced, properly nested tags; quoted attributes)
/// whose root element is `<svg>`, and returns how many elements of each name it has.
pub fn check_svg(text: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    let mut stack: Vec<String> = Vec::new();
    let mut root: Option<String> = None;
    let mut rest = text;
    while let Some(open) = rest.find('<') {
        let after = &rest[open..];
        if let Some(body) = after.strip_prefix("<?") {
            let end = body.find("?>").expect("unterminated <? ?>");
            rest = &body[end + 2..];
            continue;
        }
        if let Some(body) = after.strip_prefix("<!--") {
            let end = body.find("-->").expect("unterminated comment");
            rest = &body[end + 3..];
            continue;
        }
        // Find the end of the tag, skipping quoted attribute values.
        let bytes = after.as_bytes();
        let mut i = 1;
        let mut quote: Option<u8> = None;
        while i < bytes.len() {
            match (quote, bytes[i]) {
                (None, b'"' | b'\'') => quote = Some(bytes[i]),
                (Some(q), c) if c == q => quote = None,
                (None, b'>') => break,
                (None, b'<') => panic!("`<` inside a tag near {:?}", &after[..i.min(80)]),
                _ => {}
            }
            i += 1;
        }
        assert!(
            i < bytes.len(),
            "unterminated tag near {:?}",
            &after[..after.len().min(80)]
        );
        let tag = &after[1..i];
        rest = &after[i + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            let name = name.trim();
            let top = stack.pop().unwrap_or_else(|| panic!("stray </{name}>"));
            assert_eq!(top, name, "</{name}> closes <{top}>");
            continue;
        }
        let self_closing = tag.ends_with('/');
        let name: String = tag
            .trim_end_matches('/')
            .split(|c: char| c.is_whitespace())
            .next()
            .unwrap()
            .to_owned();
        assert!(!name.is_empty(), "empty tag name");
        assert_eq!(
            tag.matches('"').count() % 2,
            0,
            "unbalanced quotes in <{tag}>"
        );
        if stack.is_empty() {
            assert!(root.is_none(), "a second root element <{name}>");
            root = Some(name.clone());
        }
        *counts.entry(name.clone()).or_default() += 1;
        if !self_closing {
            stack.push(name);
        }
    }
    assert!(stack.is_empty(), "unclosed elements: {stack:?}");
    assert_eq!(root.as_deref(), Some("svg"), "root element");
    counts
}

/// The package's directory: the running `cargo test`'s, else the one this test was built in. A
/// target directory shared between clones keeps test binaries that another clone built (cargo
/// does not rebuild them for a new path), with that clone's path compiled in.
pub fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), Into::into)
}
