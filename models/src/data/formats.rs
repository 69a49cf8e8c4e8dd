//! Readers for the shipped digits and the standard formats researchers already have.
//!
//! - **digits**: the UCI optical digits shipped with dasim (1,797 samples, 8×8 counts in
//!   `0..=16`, 10 classes); shape 1×8×8.
//! - **MNIST, Fashion-MNIST** ([`read_mnist`]): a directory holding `train-images-idx3-ubyte`,
//!   `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte` and `t10k-labels-idx1-ubyte`, each
//!   possibly gzipped (`….gz`). The official split: `train-*` for training, `t10k-*` for testing.
//!   Pixels are scaled to `[0, 1]`; shape `1 × rows × cols` from the file header; 10 classes.
//! - **CIFAR-10** ([`read_cifar10`]): the binary version, a directory holding `data_batch_1.bin` …
//!   `data_batch_5.bin` (training, in that order) and `test_batch.bin` (the directory itself or its
//!   `cifar-10-batches-bin/` subdirectory). Records of 1 label byte and 3,072 pixel bytes (the
//!   1,024 red, then green, then blue values, row-major: already CHW). Shape 3×32×32, 10 classes.
//! - **CIFAR-100** ([`read_cifar100`]): the binary version, `train.bin` and `test.bin` (in the
//!   directory or its `cifar-100-binary/` subdirectory). Records of a coarse label byte (`0..20`),
//!   a fine label byte (`0..100`) and 3,072 pixel bytes. Shape 3×32×32; 100 fine classes, or 20
//!   coarse ones.
//! - **CSV** ([`read_csv`]): numeric feature columns and a label column.
//!
//! Any file may be gzip-compressed: it is recognised by the gzip magic bytes `1f 8b`, whatever
//! its name; a file named `….gz` must be. Every error names the file and what was wrong with
//! it: empty, truncated (header, record or gzip stream), a wrong magic number, dimensions that
//! disagree (labels and images, training and test images, CSV columns), a label out of range,
//! trailing bytes, a `.gz` that is not gzip.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

use super::config::{Cifar100Labels, CsvOptions, CsvTarget};
use super::{Dataset, ImageShape, Split};

/// The UCI optical-recognition digits, as shipped with scikit-learn (see `models/data/README.md`).
const DIGITS_CSV_GZ: &[u8] = include_bytes!("../../data/digits.csv.gz");

fn data_err(path: &Path, reason: impl Into<String>) -> Error {
    Error::Data {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// The shipped digits: 1,797 samples, 64 features (an 8×8 image), 10 classes.
pub fn digits() -> Result<Dataset> {
    let path = Path::new("<built-in digits>");
    let text = String::from_utf8(gunzip(DIGITS_CSV_GZ, path)?)
        .map_err(|_| data_err(path, "not UTF-8 text"))?;
    Ok(
        parse_csv(&text, &CsvOptions::default(), path)?.with_shape(ImageShape {
            channels: 1,
            height: 8,
            width: 8,
        }),
    )
}

fn gunzip(bytes: &[u8], path: &Path) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .map_err(|e| {
            data_err(
                path,
                format!(
                    "cannot decompress (gzip): not a valid gzip stream, truncated or corrupt: {e}"
                ),
            )
        })?;
    Ok(out)
}

/// Reads a file, decompressing it if it starts with the gzip magic bytes. An empty file, a file
/// named `….gz` that is not gzip-compressed, and a gzip stream that is cut short, corrupt or
/// empty are errors naming the file.
fn read_file(path: &Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path)
        .map_err(|e| data_err(path, format!("cannot read the data file: {e}")))?;
    if bytes.is_empty() {
        return Err(data_err(path, "empty file (0 bytes)"));
    }
    if bytes.starts_with(&[0x1f, 0x8b]) {
        let out = gunzip(&bytes, path)?;
        if out.is_empty() {
            return Err(data_err(
                path,
                "empty: the gzip stream decompresses to 0 bytes",
            ));
        }
        Ok(out)
    } else if path.extension().is_some_and(|e| e == "gz") {
        let start: Vec<String> = bytes.iter().take(4).map(|b| format!("{b:02x}")).collect();
        Err(data_err(
            path,
            format!(
                "named .gz but not gzip-compressed: it starts with bytes {}, not the gzip magic \
                 bytes 1f 8b (decompress it with gzip, or drop the .gz from its name)",
                start.join(" ")
            ),
        ))
    } else {
        Ok(bytes)
    }
}

/// Checks that `dir` is a readable directory.
fn check_dir(dir: &Path, what: &str) -> Result<()> {
    let meta = std::fs::metadata(dir)
        .map_err(|e| data_err(dir, format!("cannot read the data directory: {e}")))?;
    if !meta.is_dir() {
        return Err(data_err(
            dir,
            format!("not a directory; {what} is read from a directory"),
        ));
    }
    Ok(())
}

/// `dir/name`, or `dir/name.gz` when only that exists.
fn find(dir: &Path, name: &str) -> Result<PathBuf> {
    let plain = dir.join(name);
    if plain.exists() {
        return Ok(plain);
    }
    let gz = dir.join(format!("{name}.gz"));
    if gz.exists() {
        return Ok(gz);
    }
    Err(data_err(
        &plain,
        format!(
            "missing: neither {name} nor {name}.gz is in {}",
            dir.display()
        ),
    ))
}

// ---------------------------------------------------------------------------------------------
// CSV

/// Reads a CSV file (see [`parse_csv`]).
pub fn read_csv(path: &Path, opts: &CsvOptions) -> Result<Dataset> {
    let text = String::from_utf8(read_file(path)?)
        .map_err(|_| data_err(path, "not UTF-8 text; a CSV file was expected"))?;
    parse_csv(&text, opts, path)
}

/// Parses CSV text: comma-separated numeric columns, one of them (`opts.label_column`, the last
/// by default) the target; an optional header line (`opts.header`); empty lines and lines that
/// start with `#` are skipped. Class labels are non-negative integers (`3` or `3.0`) below
/// `opts.classes`, which defaults to `max label + 1` (at least 2); real targets are finite
/// numbers. `path` names the source in errors, with the line number.
pub fn parse_csv(text: &str, opts: &CsvOptions, path: &Path) -> Result<Dataset> {
    let bad = |line: usize, reason: String| data_err(path, format!("line {line}: {reason}"));
    let mut features = Vec::new();
    let mut targets: Vec<f64> = Vec::new();
    let mut columns = None;
    let mut label_col = 0;
    let mut header_pending = opts.header;
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if header_pending {
            header_pending = false;
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        match columns {
            None => {
                label_col = csv_label_column(fields.len(), opts).map_err(|e| bad(line_no, e))?;
                columns = Some(fields.len());
            }
            Some(expected) if expected != fields.len() => {
                return Err(bad(
                    line_no,
                    format!("{} columns, but the first row has {expected}", fields.len()),
                ));
            }
            _ => {}
        }
        csv_features(&fields, label_col, &mut features).map_err(|e| bad(line_no, e))?;
        targets.push(csv_target(fields[label_col], opts).map_err(|e| bad(line_no, e))?);
    }
    let Some(columns) = columns else {
        return Err(data_err(path, "no samples in the file"));
    };
    csv_dataset(features, &targets, columns - 1, opts, path)
}

/// The label column of rows of `k` fields (`opts.label_column`, counted from the end when
/// negative), checked on the first row: the other rows must have as many fields. The error is
/// the reason alone; the caller adds the file and line.
fn csv_label_column(k: usize, opts: &CsvOptions) -> std::result::Result<usize, String> {
    if k < 2 {
        return Err("expected feature columns and a label column".into());
    }
    let k = k as i64;
    let c = if opts.label_column < 0 {
        k + opts.label_column
    } else {
        opts.label_column
    };
    if !(0..k).contains(&c) {
        return Err(format!(
            "label column {} does not exist in a row of {k} columns (data.csv.label_column)",
            opts.label_column
        ));
    }
    Ok(c as usize)
}

/// Appends a row's features (every field but the label's) to `features`, each a finite number.
/// The error is the reason alone; the caller adds the file and line.
fn csv_features(
    fields: &[&str],
    label_col: usize,
    features: &mut Vec<f32>,
) -> std::result::Result<(), String> {
    for (c, f) in fields.iter().enumerate() {
        if c == label_col {
            continue;
        }
        let v: f32 = f
            .parse()
            .map_err(|_| format!("column {}: `{f}` is not a number", c + 1))?;
        if !v.is_finite() {
            return Err(format!("column {}: `{f}` is not finite", c + 1));
        }
        features.push(v);
    }
    Ok(())
}

/// A row's target from its label field: a class index below `opts.classes` (when set), or a
/// finite real number. The error is the reason alone; the caller adds the file and line.
fn csv_target(field: &str, opts: &CsvOptions) -> std::result::Result<f64, String> {
    let t: f64 = field
        .parse()
        .map_err(|_| format!("label `{field}` is not a number"))?;
    match opts.target {
        CsvTarget::Class => {
            if t < 0.0 || t.fract() != 0.0 || t > 1e6 {
                return Err(format!(
                    "label `{field}` is not a class index (a non-negative integer)"
                ));
            }
            if let Some(classes) = opts.classes
                && t as usize >= classes
            {
                return Err(format!(
                    "label {t} out of range for {classes} classes (data.csv.classes)"
                ));
            }
        }
        CsvTarget::Real => {
            if !t.is_finite() {
                return Err(format!("target `{field}` is not finite"));
            }
        }
    }
    Ok(t)
}

/// The dataset of the parsed rows: `dim` features each, and their targets as class labels
/// (the classes `opts.classes`, else `max label + 1`, at least 2) or real values.
fn csv_dataset(
    features: Vec<f32>,
    targets: &[f64],
    dim: usize,
    opts: &CsvOptions,
    path: &Path,
) -> Result<Dataset> {
    match opts.target {
        CsvTarget::Class => {
            let labels: Vec<u32> = targets.iter().map(|&t| t as u32).collect();
            let classes = opts
                .classes
                .unwrap_or_else(|| labels.iter().max().map_or(0, |&m| m as usize + 1));
            if classes < 2 {
                return Err(data_err(
                    path,
                    "all samples have the same label; a classification dataset needs two or more classes",
                ));
            }
            Ok(Dataset::classification(features, dim, labels, classes))
        }
        CsvTarget::Real => Ok(Dataset::regression(
            features,
            dim,
            targets.iter().map(|&t| t as f32).collect(),
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// IDX (MNIST, Fashion-MNIST)

const IDX_UBYTE: u8 = 0x08;

/// Parses an IDX file of unsigned bytes with `ndims` dimensions: its dimensions and its data.
fn parse_idx<'a>(
    bytes: &'a [u8],
    ndims: u8,
    what: &str,
    path: &Path,
) -> Result<(Vec<usize>, &'a [u8])> {
    let expected = u32::from_be_bytes([0, 0, IDX_UBYTE, ndims]);
    if bytes.len() < 4 {
        return Err(data_err(
            path,
            format!(
                "truncated header: {} bytes, but an IDX file starts with a 4-byte magic number (0x{expected:08x} for {what})",
                bytes.len()
            ),
        ));
    }
    let magic = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    if magic != expected {
        return Err(data_err(
            path,
            format!(
                "bad magic number 0x{magic:08x}, expected 0x{expected:08x} (IDX {what}: unsigned bytes, {ndims} dimension{})",
                if ndims == 1 { "" } else { "s" }
            ),
        ));
    }
    let header = 4 + 4 * usize::from(ndims);
    if bytes.len() < header {
        return Err(data_err(
            path,
            format!(
                "truncated header: {} bytes, but the header of IDX {what} is {header} bytes",
                bytes.len()
            ),
        ));
    }
    let dims: Vec<usize> = bytes[4..header]
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as usize)
        .collect();
    if dims.contains(&0) {
        return Err(data_err(
            path,
            format!("empty: the header declares dimensions {dims:?}"),
        ));
    }
    let record: usize = dims[1..].iter().product();
    let count = dims[0];
    let Some(body) = count.checked_mul(record) else {
        return Err(data_err(
            path,
            format!("the header declares impossible dimensions {dims:?}"),
        ));
    };
    let have = bytes.len() - header;
    if have < body {
        let k = have / record;
        return Err(data_err(
            path,
            format!(
                "truncated record at byte {}: the header declares {count} records of {record} byte{} ({} bytes in all), but the file ends inside record {k}",
                header + k * record,
                if record == 1 { "" } else { "s" },
                header + body
            ),
        ));
    }
    if have > body {
        return Err(data_err(
            path,
            format!(
                "{} unexpected bytes after the last record (from byte {}); the header declares {count} records of {record} byte{}",
                have - body,
                header + body,
                if record == 1 { "" } else { "s" },
            ),
        ));
    }
    Ok((dims, &bytes[header..]))
}

/// Reads an IDX image file and its label file into a dataset of 10 classes.
fn read_idx_pair(images: &Path, labels: &Path) -> Result<Dataset> {
    let img_bytes = read_file(images)?;
    let (dims, pixels) = parse_idx(&img_bytes, 3, "images", images)?;
    let lab_bytes = read_file(labels)?;
    let (ldims, labs) = parse_idx(&lab_bytes, 1, "labels", labels)?;
    if ldims[0] != dims[0] {
        return Err(data_err(
            labels,
            format!(
                "{} labels, but {} holds {} images",
                ldims[0],
                images.display(),
                dims[0]
            ),
        ));
    }
    const CLASSES: usize = 10;
    if let Some(i) = labs.iter().position(|&l| usize::from(l) >= CLASSES) {
        return Err(data_err(
            labels,
            format!(
                "label {} of sample {i} (byte {}) out of range for {CLASSES} classes",
                labs[i],
                8 + i
            ),
        ));
    }
    let features = pixels.iter().map(|&p| f32::from(p) / 255.0).collect();
    let shape = ImageShape {
        channels: 1,
        height: dims[1],
        width: dims[2],
    };
    Ok(Dataset::classification(
        features,
        shape.len(),
        labs.iter().map(|&l| u32::from(l)).collect(),
        CLASSES,
    )
    .with_shape(shape))
}

/// MNIST or Fashion-MNIST from `dir`, with the official train/test split.
pub fn read_mnist(dir: &Path) -> Result<Split> {
    check_dir(
        dir,
        "MNIST (train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte)",
    )?;
    let train_images = find(dir, "train-images-idx3-ubyte")?;
    let train_labels = find(dir, "train-labels-idx1-ubyte")?;
    let test_images = find(dir, "t10k-images-idx3-ubyte")?;
    let test_labels = find(dir, "t10k-labels-idx1-ubyte")?;
    let train = read_idx_pair(&train_images, &train_labels)?;
    let test = read_idx_pair(&test_images, &test_labels)?;
    if train.shape != test.shape {
        let s = |d: &Dataset| d.shape.map(|s| format!("{}×{}", s.height, s.width));
        return Err(data_err(
            &test_images,
            format!(
                "images of {}, but the training images are {}",
                s(&test).unwrap_or_default(),
                s(&train).unwrap_or_default()
            ),
        ));
    }
    Ok(Split { train, test })
}

// ---------------------------------------------------------------------------------------------
// CIFAR (binary version)

const CIFAR_PIXELS: usize = 3 * 32 * 32;
const CIFAR_SHAPE: ImageShape = ImageShape {
    channels: 3,
    height: 32,
    width: 32,
};

/// `dir`, or its subdirectory `sub` when `first` is there and not in `dir`.
fn cifar_dir(dir: &Path, sub: &str, first: &str, what: &str) -> Result<PathBuf> {
    check_dir(dir, what)?;
    let nested = dir.join(sub);
    if !dir.join(first).exists() && nested.join(first).exists() {
        Ok(nested)
    } else {
        Ok(dir.to_path_buf())
    }
}

/// Parses CIFAR binary records: `label_bytes` label bytes (each checked against its class
/// count in `classes`), then 3,072 pixel bytes; the label used is byte `use_label`.
fn parse_cifar(
    bytes: &[u8],
    classes: &[(usize, &str)],
    use_label: usize,
    path: &Path,
    out: &mut Dataset,
) -> Result<()> {
    let label_bytes = classes.len();
    let record = label_bytes + CIFAR_PIXELS;
    let layout = if label_bytes == 1 {
        "1 label byte + 3072 pixel bytes".to_string()
    } else {
        format!("{label_bytes} label bytes + 3072 pixel bytes")
    };
    if bytes.is_empty() {
        return Err(data_err(path, "empty: no records"));
    }
    if !bytes.len().is_multiple_of(record) {
        let whole = bytes.len() / record;
        return Err(data_err(
            path,
            format!(
                "truncated record at byte {}: {} bytes is not a whole number of {record}-byte records ({layout}); record {whole} has only {} bytes",
                whole * record,
                bytes.len(),
                bytes.len() % record
            ),
        ));
    }
    for (i, rec) in bytes.chunks_exact(record).enumerate() {
        for (k, &(n, name)) in classes.iter().enumerate() {
            if usize::from(rec[k]) >= n {
                return Err(data_err(
                    path,
                    format!(
                        "{name}label {} in record {i} (byte {}) out of range for {n} classes",
                        rec[k],
                        i * record + k
                    ),
                ));
            }
        }
        out.labels.push(u32::from(rec[use_label]));
        out.features
            .extend(rec[label_bytes..].iter().map(|&p| f32::from(p) / 255.0));
    }
    Ok(())
}

fn empty_cifar(classes: usize) -> Dataset {
    Dataset::classification(Vec::new(), CIFAR_PIXELS, Vec::new(), classes).with_shape(CIFAR_SHAPE)
}

/// CIFAR-10 (binary version) from `dir`: `data_batch_1.bin` … `data_batch_5.bin` for training,
/// `test_batch.bin` for testing.
pub fn read_cifar10(dir: &Path) -> Result<Split> {
    let what = "CIFAR-10 (data_batch_1.bin … data_batch_5.bin, test_batch.bin)";
    let dir = cifar_dir(dir, "cifar-10-batches-bin", "data_batch_1.bin", what)?;
    let classes = [(10, "")];
    let mut train = empty_cifar(10);
    for b in 1..=5 {
        let p = find(&dir, &format!("data_batch_{b}.bin"))?;
        parse_cifar(&read_file(&p)?, &classes, 0, &p, &mut train)?;
    }
    let mut test = empty_cifar(10);
    let p = find(&dir, "test_batch.bin")?;
    parse_cifar(&read_file(&p)?, &classes, 0, &p, &mut test)?;
    Ok(Split { train, test })
}

/// CIFAR-100 (binary version) from `dir`: `train.bin` and `test.bin`, with fine (100) or coarse
/// (20) labels.
pub fn read_cifar100(dir: &Path, labels: Cifar100Labels) -> Result<Split> {
    let dir = cifar_dir(
        dir,
        "cifar-100-binary",
        "train.bin",
        "CIFAR-100 (train.bin, test.bin)",
    )?;
    let classes = [(20, "coarse "), (100, "fine ")];
    let (use_label, n) = match labels {
        Cifar100Labels::Coarse => (0, 20),
        Cifar100Labels::Fine => (1, 100),
    };
    let load = |name: &str| -> Result<Dataset> {
        let p = find(&dir, name)?;
        let mut d = empty_cifar(n);
        parse_cifar(&read_file(&p)?, &classes, use_label, &p, &mut d)?;
        Ok(d)
    };
    Ok(Split {
        train: load("train.bin")?,
        test: load("test.bin")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_digits_load() {
        let d = digits().unwrap();
        assert_eq!(d.len(), 1797);
        assert_eq!(d.dim, 64);
        assert_eq!(d.classes(), Some(10));
        assert_eq!(d.shape.map(|s| s.len()), Some(64));
    }

    #[test]
    fn malformed_csv_is_named() {
        let p = Path::new("x.csv");
        let o = CsvOptions::default();
        let e = parse_csv("1,2,0\n1,0\n", &o, p).unwrap_err().to_string();
        assert!(e.contains("x.csv") && e.contains("line 2"), "{e}");
        let e = parse_csv("1,a,0\n", &o, p).unwrap_err().to_string();
        assert!(e.contains("`a` is not a number"), "{e}");
        let e = parse_csv("1,2,-1\n", &o, p).unwrap_err().to_string();
        assert!(e.contains("not a class index"), "{e}");
    }
}
