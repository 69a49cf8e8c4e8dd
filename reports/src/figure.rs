//! Rendering a figure to PNG and SVG, and the pieces every figure shares.
//!
//! A [`Figure`] draws itself on any plotters drawing area; [`render`] draws it twice, once on
//! an RGB bitmap (encoded as PNG here, so that the bytes can be embedded in a report without
//! touching the disk) and once on an SVG string. [`save`] writes both next to each other,
//! atomically. The header of a figure (title, an optional note in grey, an optional row of
//! colour keys) is drawn by [`header`], so every plot of a run looks alike.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{FontStyle, register_font};

use crate::rundir::write_atomic;
use crate::{Error, Result};

/// DejaVu Sans, embedded so that rendering needs no system fonts.
static FONT_TTF: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
/// The family name every text style here uses (and the embedded font is registered under).
pub(crate) const FONT_FAMILY: &str = "sans-serif";

pub(crate) const TEXT_COLOR: RGBColor = RGBColor(0x22, 0x22, 0x22);
pub(crate) const NOTE_COLOR: RGBColor = RGBColor(0x66, 0x66, 0x66);
pub(crate) const AXIS_COLOR: RGBColor = RGBColor(0x55, 0x55, 0x55);
pub(crate) const GRID_BOLD: RGBColor = RGBColor(0xDD, 0xDD, 0xDD);
pub(crate) const GRID_LIGHT: RGBColor = RGBColor(0xF1, 0xF1, 0xF1);

/// Font sizes, in pixels.
pub(crate) const TITLE_SIZE: u32 = 24;
pub(crate) const NOTE_SIZE: u32 = 15;
pub(crate) const LABEL_SIZE: u32 = 16;
pub(crate) const AXIS_DESC_SIZE: u32 = 18;

/// The error type of drawing on backend `DB`.
pub(crate) type DrawError<DB> = DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>;
/// The result of drawing on backend `DB`.
pub(crate) type DrawResult<DB> = std::result::Result<(), DrawError<DB>>;

/// Something that can be drawn on a plotters drawing area of a fixed size.
pub(crate) trait Figure {
    /// Width and height in pixels (of the PNG; the SVG has the same size).
    fn size(&self) -> (u32, u32);
    /// Draws the whole figure on `root`, which is `size()` large and already white.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB>;
}

/// A figure drawn both ways.
#[derive(Debug, Clone)]
pub(crate) struct Rendered {
    /// The PNG file's bytes.
    pub png: Vec<u8>,
    /// The SVG document.
    pub svg: String,
}

/// Registers the embedded font with plotters, once per process.
pub(crate) fn font_registered() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    *REGISTERED.get_or_init(|| register_font(FONT_FAMILY, FontStyle::Normal, FONT_TTF).is_ok())
}

/// Draws `figure` as PNG bytes and as an SVG document. `path` names the figure in errors.
pub(crate) fn render(figure: &impl Figure, path: &Path) -> Result<Rendered> {
    let plot_error = |path: PathBuf| move |message: String| Error::Plot { path, message };
    if !font_registered() {
        return Err(plot_error(path.to_path_buf())(
            "cannot load the embedded DejaVu Sans font".into(),
        ));
    }
    let (width, height) = figure.size();
    let mut svg = String::new();
    draw_on(SVGBackend::with_string(&mut svg, (width, height)), figure)
        .map_err(plot_error(path.with_extension("svg")))?;

    let mut pixels = vec![0u8; width as usize * height as usize * 3];
    draw_on(
        BitMapBackend::with_buffer(&mut pixels, (width, height)),
        figure,
    )
    .map_err(plot_error(path.with_extension("png")))?;
    let png = encode_png(&pixels, width, height)
        .map_err(|e| plot_error(path.with_extension("png"))(e.to_string()))?;
    Ok(Rendered { png, svg })
}

/// Draws `figure` to `<dir>/<stem>.png` and `<dir>/<stem>.svg` (each replaced atomically) and
/// returns the two paths in that order. `dir` is created if needed.
pub(crate) fn save(dir: &Path, stem: &str, figure: &impl Figure) -> Result<(PathBuf, PathBuf)> {
    let png = dir.join(format!("{stem}.png"));
    let svg = dir.join(format!("{stem}.svg"));
    let rendered = render(figure, &dir.join(stem))?;
    std::fs::create_dir_all(dir).map_err(|e| Error::io("create directory", dir, e))?;
    write_atomic(&svg, rendered.svg.as_bytes())?;
    write_atomic(&png, &rendered.png)?;
    Ok((png, svg))
}

pub(crate) fn draw_on<DB: DrawingBackend>(
    backend: DB,
    figure: &impl Figure,
) -> std::result::Result<(), String> {
    let root = backend.into_drawing_area();
    root.fill(&WHITE)
        .and_then(|()| figure.draw(&root))
        .and_then(|()| root.present())
        .map_err(|e| e.to_string())
}

/// Encodes 8-bit RGB pixels as a PNG.
fn encode_png(
    pixels: &[u8],
    width: u32,
    height: u32,
) -> std::result::Result<Vec<u8>, png::EncodingError> {
    let mut bytes = Vec::new();
    let mut encoder = png::Encoder::new(&mut bytes, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    // A filter chosen per row: plots come out a quarter of the size they have with one fixed
    // filter, at the same speed.
    encoder.set_adaptive_filter(png::AdaptiveFilterType::Adaptive);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(pixels)?;
    writer.finish()?;
    Ok(bytes)
}

/// An RGB colour of the palette, by index (cycled).
pub(crate) fn palette(index: usize) -> RGBColor {
    let (r, g, b) = crate::PALETTE[index % crate::PALETTE.len()];
    RGBColor(r, g, b)
}

/// A coloured square and its label, for [`header`]'s key row.
#[derive(Debug, Clone)]
pub(crate) struct Key {
    /// Text after the square.
    pub label: String,
    /// Colour of the square.
    pub color: RGBColor,
}

/// Draws a figure's header at the top of `root` and returns the area below it: the title
/// (bold-sized, centred), then `note` in grey if not empty (wrapped to the width), then a centred row of colour keys
/// if `keys` is not empty (wrapped onto more rows when it does not fit).
pub(crate) fn header<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    note: &str,
    keys: &[Key],
) -> std::result::Result<DrawingArea<DB, Shift>, DrawError<DB>> {
    let (width, _) = root.dim_in_pixel();
    let title_font = (FONT_FAMILY, TITLE_SIZE).into_font().color(&TEXT_COLOR);
    let note_font = (FONT_FAMILY, NOTE_SIZE).into_font().color(&NOTE_COLOR);
    let key_font = (FONT_FAMILY, LABEL_SIZE).into_font().color(&TEXT_COLOR);
    let center = |font: TextStyle<'static>| font.pos(Pos::new(HPos::Center, VPos::Top));

    let mut y = 10i32;
    if !title.is_empty() {
        root.draw(&Text::new(
            title.to_owned(),
            (width as i32 / 2, y),
            center(title_font),
        ))?;
        y += TITLE_SIZE as i32 + 8;
    }
    if !note.is_empty() {
        // Wrapped at spaces to the figure's width.
        let mut lines: Vec<String> = Vec::new();
        for word in note.split(' ') {
            let candidate = match lines.last() {
                Some(line) => format!("{line} {word}"),
                None => word.to_owned(),
            };
            let (w, _) = root.estimate_text_size(&candidate, &note_font)?;
            match lines.last_mut() {
                Some(line) if w <= width.saturating_sub(60) => *line = candidate,
                Some(_) => lines.push(word.to_owned()),
                None => lines.push(candidate),
            }
        }
        for line in lines {
            root.draw(&Text::new(
                line,
                (width as i32 / 2, y),
                center(note_font.clone()),
            ))?;
            y += NOTE_SIZE as i32 + 5;
        }
        y += 3;
    }
    if !keys.is_empty() {
        let square = 14i32;
        let gap = 26i32;
        // Lay the keys out in rows no wider than the figure.
        let mut rows: Vec<Vec<(&Key, i32)>> = vec![Vec::new()];
        let mut row_width = 0i32;
        for key in keys {
            let (text_w, _) = root.estimate_text_size(&key.label, &key_font)?;
            let w = square + 6 + text_w as i32;
            if row_width > 0 && row_width + gap + w > width as i32 - 40 {
                rows.push(Vec::new());
                row_width = 0;
            }
            row_width += if row_width > 0 { gap } else { 0 } + w;
            rows.last_mut().expect("one row").push((key, w));
        }
        for row in rows {
            let total: i32 = row.iter().map(|(_, w)| w).sum::<i32>() + gap * (row.len() as i32 - 1);
            let mut x = (width as i32 - total) / 2;
            for (key, w) in row {
                root.draw(&Rectangle::new(
                    [(x, y + 2), (x + square, y + 2 + square)],
                    key.color.filled(),
                ))?;
                root.draw(&Text::new(
                    key.label.clone(),
                    (x + square + 6, y),
                    key_font.clone(),
                ))?;
                x += w + gap;
            }
            y += LABEL_SIZE as i32 + 8;
        }
    }
    let (_, rest) = root.split_vertically(y + 4);
    Ok(rest)
}

/// A linear f64 axis with the tick marks given (and no light grid lines). plotters' own
/// `with_key_points` on an `f64` range loses the axis' label formatter, so this small
/// coordinate stands in for it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ticked {
    /// The axis range.
    pub range: Range<f64>,
    /// Where the labelled ticks go.
    pub ticks: Vec<f64>,
}

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = self.range.end - self.range.start;
        if span <= 0.0 {
            return (limit.0 + limit.1) / 2;
        }
        let t = (value - self.range.start) / span;
        let pixels = f64::from(limit.1 - limit.0) * t;
        limit.0 + pixels.clamp(-1e6, 1e6).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.range.clone()
    }
}

/// Formats a tick value compactly: at most six significant digits, no
/// trailing zeros, scientific notation for very large or small magnitudes.
pub(crate) fn format_tick(value: f64) -> String {
    if value == 0.0 {
        return "0".into();
    }
    let magnitude = value.abs();
    if !value.is_finite() {
        return value.to_string();
    }
    if !(1e-4..1e6).contains(&magnitude) {
        let text = format!("{value:.2e}");
        let (mantissa, exponent) = text.split_once('e').expect("`e` format has an exponent");
        return format!("{}e{exponent}", trim_zeros(mantissa));
    }
    let decimals = (5 - magnitude.log10().floor() as i32).clamp(0, 10) as usize;
    trim_zeros(&format!("{value:.decimals$}")).to_owned()
}

/// Strips trailing zeros (and then a trailing point) after a decimal point.
fn trim_zeros(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_are_compact() {
        assert_eq!(format_tick(0.0), "0");
        assert_eq!(format_tick(-0.0), "0");
        assert_eq!(format_tick(0.30000000000000004), "0.3");
        assert_eq!(format_tick(1000.0), "1000");
        assert_eq!(format_tick(12345.5), "12345.5");
        assert_eq!(format_tick(0.0001), "0.0001");
        assert_eq!(format_tick(-2.5), "-2.5");
        assert_eq!(format_tick(1e-5), "1e-5");
        assert_eq!(format_tick(2.5e7), "2.5e7");
    }

    #[test]
    fn png_encoding_has_the_signature_and_size() {
        let bytes = encode_png(&[255; 4 * 3 * 3], 4, 3).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&bytes[12..16], b"IHDR");
        assert_eq!(u32::from_be_bytes(bytes[16..20].try_into().unwrap()), 4);
        assert_eq!(u32::from_be_bytes(bytes[20..24].try_into().unwrap()), 3);
    }
}
