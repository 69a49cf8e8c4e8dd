//! Data: the `[data]` section, the file formats (written here in their exact layouts, good and
//! malformed), the generators, normalization, partitions, sampling and augmentation.

use std::io::Write;
use std::path::{Path, PathBuf};

use dasim_models::data::{
    self, Augment, Cifar100Labels, CsvOptions, CsvTarget, DataConfig, Dataset, DatasetKind,
    ImageShape, Normalize, PartitionConfig, Sampler, SyntheticConfig, TargetKind, synthetic,
};
use dasim_models::{Error, LenetConfig, LinearConfig, ModelConfig, Problem, SoftmaxConfig};
use dasim_sim::clock::rng::{StreamKind, stream};
use rand::Rng;

// ---------------------------------------------------------------------------------------------
// helpers

fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// An IDX file of unsigned bytes.
fn idx(dims: &[u32], body: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 0, 0x08, dims.len() as u8];
    for d in dims {
        out.extend_from_slice(&d.to_be_bytes());
    }
    out.extend_from_slice(body);
    out
}

/// `n` images of `h × w` whose pixel `k` of image `i` is `(i * 16 + k) % 256`.
fn images(n: usize, h: usize, w: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| (0..h * w).map(move |k| ((i * 16 + k) % 256) as u8))
        .collect()
}

/// A directory with MNIST files: 5 training images (train-images gzipped), 3 test images, 4×3.
fn mnist_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::write(
        p.join("train-images-idx3-ubyte.gz"),
        gz(&idx(&[5, 4, 3], &images(5, 4, 3))),
    )
    .unwrap();
    std::fs::write(
        p.join("train-labels-idx1-ubyte"),
        idx(&[5], &[3, 1, 4, 1, 5]),
    )
    .unwrap();
    std::fs::write(
        p.join("t10k-images-idx3-ubyte"),
        idx(&[3, 4, 3], &images(3, 4, 3)),
    )
    .unwrap();
    std::fs::write(
        p.join("t10k-labels-idx1-ubyte.gz"),
        gz(&idx(&[3], &[9, 2, 6])),
    )
    .unwrap();
    dir
}

fn cfg(dataset: DatasetKind, path: &Path) -> DataConfig {
    DataConfig {
        dataset: Some(dataset),
        path: Some(path.to_path_buf()),
        normalize: Some(Normalize::None),
        ..Default::default()
    }
}

fn load_err(c: &DataConfig) -> String {
    match data::load(c, Path::new("."), 1) {
        Ok(_) => panic!("loading {c:?} should fail"),
        Err(e) => e.to_string(),
    }
}

fn contains_all(e: &str, parts: &[&str]) {
    for p in parts {
        assert!(e.contains(p), "`{e}` lacks `{p}`");
    }
}

/// A CIFAR record: label bytes then 3072 pixels, pixel `k` = `(seed + k) % 256`.
fn cifar_record(labels: &[u8], seed: usize) -> Vec<u8> {
    let mut r = labels.to_vec();
    r.extend((0..3072).map(|k| ((seed + k) % 256) as u8));
    r
}

fn cifar10_dir(dir: &Path) {
    for b in 1..=5u8 {
        let mut bytes = cifar_record(&[b], b as usize);
        bytes.extend(cifar_record(&[b + 4], 10 + b as usize));
        std::fs::write(dir.join(format!("data_batch_{b}.bin")), bytes).unwrap();
    }
    std::fs::write(dir.join("test_batch.bin"), cifar_record(&[7], 99)).unwrap();
}

fn digits_train() -> Dataset {
    data::load(&DataConfig::default(), Path::new("."), 42)
        .unwrap()
        .train
}

fn config_error(e: Error) -> dasim_sim::ConfigError {
    match e {
        Error::Config(c) => c,
        other => panic!("expected a configuration error, got {other}"),
    }
}

fn assert_exactly_once(shards: &[Vec<usize>], n: usize) {
    let mut all = shards.concat();
    all.sort_unstable();
    assert_eq!(all, (0..n).collect::<Vec<_>>(), "every sample exactly once");
    assert!(shards.iter().all(|s| !s.is_empty()), "no empty shard");
}

// ---------------------------------------------------------------------------------------------
// the [data] section

#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
struct Scenario {
    data: DataConfig,
}

fn parse(text: &str) -> Result<DataConfig, String> {
    toml::from_str::<Scenario>(text)
        .map(|s| s.data)
        .map_err(|e| e.to_string())
}

fn round_trip(c: &DataConfig) {
    let text = toml::to_string(&Scenario { data: c.clone() }).unwrap();
    assert_eq!(parse(&text).unwrap(), *c, "{text}");
}

#[test]
fn the_skeleton_forms_still_parse() {
    let c = parse("[data]\ndataset = \"digits\"\ntest_fraction = 0.2\nbatch_size = 32\n").unwrap();
    assert_eq!(c.kind(), DatasetKind::Digits);
    assert_eq!(c.test_fraction(), 0.2);
    c.validate().unwrap();
    let c = parse("[data]\npath = \"x.csv\"\n").unwrap();
    assert_eq!(c.kind(), DatasetKind::Csv);
    c.validate().unwrap();
    let c = parse("[data]\n").unwrap();
    assert_eq!(c, DataConfig::default());
    assert_eq!(c.normalization(), Normalize::StandardizeFeatures);
}

#[test]
fn every_shape_of_the_section_round_trips_through_toml() {
    let examples = [
        r#"[data]
dataset = "cifar10"
path = "data/cifar-10-batches-bin"
batch_size = 128
normalize = "per-channel"
augment = { crop_padding = 4, flip = true }

[data.partition]
kind = "dirichlet"
alpha = 0.5
"#,
        r#"[data]
dataset = "cifar100"
path = "c100"
labels = "coarse"
partition = { kind = "shards", per_worker = 2 }
"#,
        r#"[data]
dataset = "mnist"
path = "mnist"
[data.partition]
kind = "unequal"
power = 1.5
"#,
        r#"[data]
dataset = "csv"
path = "train.csv.gz"
test_fraction = 0.1
[data.csv]
label_column = 0
header = true
classes = 10
shape = [1, 28, 28]
[data.partition]
kind = "unequal"
weights = [4.0, 2.0, 1.0, 1.0]
"#,
        r#"[data]
dataset = "gaussian-mixture"
synthetic = { samples = 500, dim = 8, classes = 3, separation = 4.0 }
"#,
        r#"[data]
dataset = "linear-regression"
normalize = "standardize-features"
[data.synthetic]
samples = 300
noise = 0.1
"#,
    ];
    for text in examples {
        let c = parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        c.validate().unwrap_or_else(|e| panic!("{e}\n{text}"));
        round_trip(&c);
        let r = c.resolved();
        r.validate().unwrap_or_else(|e| panic!("{e}\n{text}"));
        round_trip(&r);
        assert_eq!(r.resolved(), r, "resolving is idempotent");
        assert_eq!(r.kind(), c.kind());
        assert_eq!(r.normalization(), c.normalization());
    }
    round_trip(&DataConfig::default());
    round_trip(&DataConfig::default().resolved());
}

#[test]
fn unknown_keys_and_names_are_rejected() {
    let e = parse("[data]\ndataset = \"imagenet\"\n").unwrap_err();
    assert!(
        e.contains("unknown variant") && e.contains("fashion-mnist"),
        "{e}"
    );
    let e = parse("[data]\n[data.partition]\nkind = \"iid\"\nalpha = 1.0\n").unwrap_err();
    assert!(e.contains("alpha"), "{e}");
    let e = parse("[data]\naugment = { crop = 4 }\n").unwrap_err();
    assert!(e.contains("crop"), "{e}");
    let e = parse("[data]\npartition = { kind = \"shards\", per_worker = 2, alpha = 1.0 }\n")
        .unwrap_err();
    assert!(e.contains("alpha"), "{e}");
    let e = parse("[data]\n[data.partition]\nkind = \"dirichlet\"\n").unwrap_err();
    assert!(e.contains("alpha"), "{e}");
}

#[test]
fn validation_names_the_exact_field() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "[data]\npartition = { kind = \"dirichlet\", alpha = 0.0 }\n",
            "data.partition.alpha",
            "positive",
        ),
        (
            "[data]\npartition = { kind = \"shards\", per_worker = 0 }\n",
            "data.partition.per_worker",
            "at least 1",
        ),
        (
            "[data]\npartition = { kind = \"unequal\", weights = [1.0, -2.0] }\n",
            "data.partition.weights[1]",
            "positive",
        ),
        (
            "[data]\npartition = { kind = \"unequal\", weights = [1.0], power = 1.0 }\n",
            "data.partition.power",
            "not both",
        ),
        (
            "[data]\npartition = { kind = \"unequal\" }\n",
            "data.partition.kind",
            "weights",
        ),
        (
            "[data]\ndataset = \"mnist\"\npath = \"m\"\ntest_fraction = 0.1\n",
            "data.test_fraction",
            "official test split",
        ),
        ("[data]\ndataset = \"mnist\"\n", "data.dataset", "directory"),
        (
            "[data]\ndataset = \"digits\"\npath = \"x.csv\"\n",
            "data.path",
            "built in",
        ),
        (
            "[data]\ndataset = \"gaussian-mixture\"\nnormalize = \"per-channel\"\n",
            "data.normalize",
            "images",
        ),
        (
            "[data]\npath = \"x.csv\"\naugment = { flip = true }\n",
            "data.augment",
            "images",
        ),
        (
            "[data]\ndataset = \"gaussian-mixture\"\nsynthetic = { noise = 1.0 }\n",
            "data.synthetic.noise",
            "linear-regression",
        ),
        (
            "[data]\ndataset = \"gaussian-mixture\"\nsynthetic = { classes = 1 }\n",
            "data.synthetic.classes",
            "at least 2",
        ),
        (
            "[data]\nsynthetic = { samples = 10 }\n",
            "data.synthetic",
            "generated",
        ),
        (
            "[data]\ndataset = \"linear-regression\"\npartition = { kind = \"dirichlet\", alpha = 1.0 }\n",
            "data.partition.kind",
            "real-valued",
        ),
        (
            "[data]\ndataset = \"cifar10\"\npath = \"c\"\nlabels = \"coarse\"\n",
            "data.labels",
            "cifar100",
        ),
        (
            "[data]\ntest_fraction = 1.5\n",
            "data.test_fraction",
            "between 0 and 1",
        ),
        ("[data]\nbatch_size = 0\n", "data.batch_size", "at least 1"),
    ];
    for (text, path, words) in cases {
        let c = parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let e = c.validate().expect_err(text);
        assert_eq!(e.path.to_string(), *path, "{text}: {e}");
        assert!(e.to_string().contains(words), "{text}: {e}");
    }
    // Augmentation is fine on a CSV of images.
    parse("[data]\npath = \"x.csv\"\naugment = { flip = true }\ncsv = { shape = [1, 2, 2] }\n")
        .unwrap()
        .validate()
        .unwrap();
}

// ---------------------------------------------------------------------------------------------
// MNIST and Fashion-MNIST (IDX)

#[test]
fn mnist_loads_from_idx_files_with_the_official_split() {
    let dir = mnist_dir();
    for kind in [DatasetKind::Mnist, DatasetKind::FashionMnist] {
        let s = data::load(&cfg(kind, dir.path()), Path::new("."), 1).unwrap();
        assert_eq!(s.train.len(), 5);
        assert_eq!(s.test.len(), 3);
        assert_eq!(s.train.labels, vec![3, 1, 4, 1, 5]);
        assert_eq!(s.test.labels, vec![9, 2, 6]);
        assert_eq!(s.train.target, TargetKind::Classes(10));
        assert_eq!(
            s.train.shape,
            Some(ImageShape {
                channels: 1,
                height: 4,
                width: 3
            })
        );
        assert_eq!(s.train.dim, 12);
        // Image 2, pixel 5: (2·16 + 5) / 255.
        assert_eq!(s.train.features[2 * 12 + 5], 37.0 / 255.0);
    }
}

#[test]
fn mnist_per_channel_normalization_uses_training_statistics() {
    let dir = mnist_dir();
    let mut c = cfg(DatasetKind::Mnist, dir.path());
    c.normalize = None; // the default for MNIST: per channel
    let s = data::load(&c, Path::new("."), 1).unwrap();
    let f = &s.train.features;
    let mean = f.iter().map(|&v| f64::from(v)).sum::<f64>() / f.len() as f64;
    let var = f
        .iter()
        .map(|&v| (f64::from(v) - mean).powi(2))
        .sum::<f64>()
        / f.len() as f64;
    assert!(
        mean.abs() < 1e-6 && (var - 1.0).abs() < 1e-5,
        "{mean} {var}"
    );
}

#[test]
fn malformed_idx_files_say_what_is_wrong() {
    // Bad magic number: a label file written as an image file.
    let dir = mnist_dir();
    std::fs::write(
        dir.path().join("train-labels-idx1-ubyte"),
        idx(&[5, 1, 1], &[0; 5]),
    )
    .unwrap();
    contains_all(
        &load_err(&cfg(DatasetKind::Mnist, dir.path())),
        &[
            "train-labels-idx1-ubyte",
            "bad magic number 0x00000803, expected 0x00000801",
        ],
    );

    // Truncated: the header says 5 images, the (gzipped) file holds 4 and a half.
    let dir = mnist_dir();
    let mut body = images(5, 4, 3);
    body.truncate(4 * 12 + 6);
    std::fs::write(
        dir.path().join("train-images-idx3-ubyte.gz"),
        gz(&idx(&[5, 4, 3], &body)),
    )
    .unwrap();
    contains_all(
        &load_err(&cfg(DatasetKind::Mnist, dir.path())),
        &[
            "train-images-idx3-ubyte.gz",
            "truncated record at byte 64",
            "record 4",
        ],
    );

    // A label out of range.
    let dir = mnist_dir();
    std::fs::write(
        dir.path().join("train-labels-idx1-ubyte"),
        idx(&[5], &[3, 12, 4, 1, 5]),
    )
    .unwrap();
    contains_all(
        &load_err(&cfg(DatasetKind::Mnist, dir.path())),
        &[
            "train-labels-idx1-ubyte",
            "label 12 of sample 1 (byte 9) out of range for 10 classes",
        ],
    );

    // As many labels as images.
    let dir = mnist_dir();
    std::fs::write(
        dir.path().join("train-labels-idx1-ubyte"),
        idx(&[4], &[3, 1, 4, 1]),
    )
    .unwrap();
    contains_all(
        &load_err(&cfg(DatasetKind::Mnist, dir.path())),
        &["4 labels", "5 images"],
    );

    // A missing file, and a missing directory.
    let dir = mnist_dir();
    std::fs::remove_file(dir.path().join("t10k-images-idx3-ubyte")).unwrap();
    contains_all(
        &load_err(&cfg(DatasetKind::Mnist, dir.path())),
        &["t10k-images-idx3-ubyte", "missing", ".gz"],
    );
    contains_all(
        &load_err(&cfg(DatasetKind::Mnist, Path::new("/no/such/mnist"))),
        &["/no/such/mnist", "cannot read"],
    );

    // Trailing bytes, and a header cut short.
    let dir = mnist_dir();
    let mut bytes = idx(&[3], &[9, 2, 6]);
    bytes.push(0);
    std::fs::write(dir.path().join("t10k-labels-idx1-ubyte.gz"), gz(&bytes)).unwrap();
    contains_all(
        &load_err(&cfg(DatasetKind::Mnist, dir.path())),
        &["1 unexpected bytes after the last record"],
    );
    std::fs::write(dir.path().join("t10k-labels-idx1-ubyte.gz"), gz(&[0, 0, 8])).unwrap();
    contains_all(
        &load_err(&cfg(DatasetKind::Mnist, dir.path())),
        &["truncated header"],
    );
}

#[test]
fn empty_and_false_gzip_files_are_named() {
    // An empty file, plain and named .gz.
    let dir = mnist_dir();
    std::fs::write(dir.path().join("train-labels-idx1-ubyte"), []).unwrap();
    contains_all(
        &load_err(&cfg(DatasetKind::Mnist, dir.path())),
        &["train-labels-idx1-ubyte", "empty file (0 bytes)"],
    );
    let dir = mnist_dir();
    std::fs::write(dir.path().join("train-images-idx3-ubyte.gz"), []).unwrap();
    contains_all(
        &load_err(&cfg(DatasetKind::Mnist, dir.path())),
        &["train-images-idx3-ubyte.gz", "empty file (0 bytes)"],
    );
    // A gzip stream of nothing, and a header that declares no images.
    let dir = mnist_dir();
    std::fs::write(dir.path().join("train-images-idx3-ubyte.gz"), gz(&[])).unwrap();
    contains_all(
        &load_err(&cfg(DatasetKind::Mnist, dir.path())),
        &["train-images-idx3-ubyte.gz", "decompresses to 0 bytes"],
    );
    let dir = mnist_dir();
    std::fs::write(
        dir.path().join("train-images-idx3-ubyte.gz"),
        gz(&idx(&[0, 4, 3], &[])),
    )
    .unwrap();
    contains_all(
        &load_err(&cfg(DatasetKind::Mnist, dir.path())),
        &[
            "train-images-idx3-ubyte.gz",
            "empty: the header declares dimensions [0, 4, 3]",
        ],
    );

    // Named .gz but not gzip-compressed (an IDX file that someone renamed).
    let dir = mnist_dir();
    std::fs::write(
        dir.path().join("t10k-labels-idx1-ubyte.gz"),
        idx(&[3], &[9, 2, 6]),
    )
    .unwrap();
    contains_all(
        &load_err(&cfg(DatasetKind::Mnist, dir.path())),
        &[
            "t10k-labels-idx1-ubyte.gz",
            "named .gz but not gzip-compressed",
            "00 00 08 01",
            "1f 8b",
        ],
    );

    // A gzip stream cut short, and one whose compressed bytes are garbage.
    let dir = mnist_dir();
    let whole = gz(&idx(&[5, 4, 3], &images(5, 4, 3)));
    std::fs::write(
        dir.path().join("train-images-idx3-ubyte.gz"),
        &whole[..whole.len() / 2],
    )
    .unwrap();
    contains_all(
        &load_err(&cfg(DatasetKind::Mnist, dir.path())),
        &[
            "train-images-idx3-ubyte.gz",
            "cannot decompress (gzip)",
            "truncated or corrupt",
        ],
    );
    let mut garbage = whole[..10].to_vec();
    garbage.extend_from_slice(&[0xff; 40]);
    std::fs::write(dir.path().join("train-images-idx3-ubyte.gz"), garbage).unwrap();
    contains_all(
        &load_err(&cfg(DatasetKind::Mnist, dir.path())),
        &["train-images-idx3-ubyte.gz", "cannot decompress (gzip)"],
    );

    // CIFAR and CSV: empty files too.
    let dir = tempfile::tempdir().unwrap();
    cifar10_dir(dir.path());
    std::fs::write(dir.path().join("data_batch_4.bin"), []).unwrap();
    contains_all(
        &load_err(&cfg(DatasetKind::Cifar10, dir.path())),
        &["data_batch_4.bin", "empty file (0 bytes)"],
    );
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("d.csv");
    std::fs::write(&p, "").unwrap();
    let c = DataConfig {
        path: Some(p.clone()),
        ..Default::default()
    };
    contains_all(&load_err(&c), &["d.csv", "empty file (0 bytes)"]);
    std::fs::write(&p, "# only a comment\n\n").unwrap();
    contains_all(&load_err(&c), &["d.csv", "no samples in the file"]);
}

#[test]
fn mnist_images_of_two_sizes_are_refused() {
    // Wrong dimensions: test images of 3×4 beside training images of 4×3.
    let dir = mnist_dir();
    std::fs::write(
        dir.path().join("t10k-images-idx3-ubyte"),
        idx(&[3, 3, 4], &images(3, 3, 4)),
    )
    .unwrap();
    contains_all(
        &load_err(&cfg(DatasetKind::Mnist, dir.path())),
        &[
            "t10k-images-idx3-ubyte",
            "images of 3×4",
            "training images are 4×3",
        ],
    );
    // A label file with two dimensions: the magic number says so.
    let dir = mnist_dir();
    std::fs::write(
        dir.path().join("train-labels-idx1-ubyte"),
        idx(&[5, 1], &[3, 1, 4, 1, 5]),
    )
    .unwrap();
    contains_all(
        &load_err(&cfg(DatasetKind::Mnist, dir.path())),
        &[
            "train-labels-idx1-ubyte",
            "bad magic number 0x00000802, expected 0x00000801",
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// CIFAR (binary version)

#[test]
fn cifar10_loads_the_five_batches_and_the_test_batch() {
    let dir = tempfile::tempdir().unwrap();
    cifar10_dir(dir.path());
    let s = data::load(&cfg(DatasetKind::Cifar10, dir.path()), Path::new("."), 1).unwrap();
    assert_eq!(s.train.len(), 10);
    assert_eq!(s.test.len(), 1);
    assert_eq!(s.train.labels, vec![1, 5, 2, 6, 3, 7, 4, 8, 5, 9]);
    assert_eq!(s.test.labels, vec![7]);
    assert_eq!(s.train.dim, 3072);
    assert_eq!(s.train.shape.unwrap().channels, 3);
    // Record 1 of batch 1 (sample 1): pixel seed 11; the green plane starts at 1024.
    assert_eq!(
        s.train.features[3072 + 1024],
        ((11 + 1024) % 256) as f32 / 255.0
    );

    // The usual nested directory is found too.
    let parent = tempfile::tempdir().unwrap();
    let nested = parent.path().join("cifar-10-batches-bin");
    std::fs::create_dir(&nested).unwrap();
    cifar10_dir(&nested);
    let t = data::load(&cfg(DatasetKind::Cifar10, parent.path()), Path::new("."), 1).unwrap();
    assert_eq!(t.train.features, s.train.features);
}

#[test]
fn malformed_cifar_files_say_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    cifar10_dir(dir.path());
    let p = dir.path().join("data_batch_2.bin");
    let mut bytes = std::fs::read(&p).unwrap();
    bytes.truncate(3073 + 100);
    std::fs::write(&p, bytes).unwrap();
    contains_all(
        &load_err(&cfg(DatasetKind::Cifar10, dir.path())),
        &[
            "data_batch_2.bin",
            "truncated record at byte 3073",
            "1 label byte + 3072 pixel bytes",
        ],
    );

    cifar10_dir(dir.path());
    std::fs::write(dir.path().join("test_batch.bin"), cifar_record(&[12], 0)).unwrap();
    contains_all(
        &load_err(&cfg(DatasetKind::Cifar10, dir.path())),
        &[
            "test_batch.bin",
            "label 12 in record 0 (byte 0) out of range for 10 classes",
        ],
    );

    cifar10_dir(dir.path());
    std::fs::remove_file(dir.path().join("data_batch_3.bin")).unwrap();
    contains_all(
        &load_err(&cfg(DatasetKind::Cifar10, dir.path())),
        &["data_batch_3.bin", "missing"],
    );
}

#[test]
fn cifar100_has_fine_and_coarse_labels() {
    let dir = tempfile::tempdir().unwrap();
    let mut train = cifar_record(&[3, 42], 0);
    train.extend(cifar_record(&[19, 99], 1));
    std::fs::write(dir.path().join("train.bin"), &train).unwrap();
    std::fs::write(dir.path().join("test.bin"), cifar_record(&[0, 7], 2)).unwrap();
    let mut c = cfg(DatasetKind::Cifar100, dir.path());
    let fine = data::load(&c, Path::new("."), 1).unwrap();
    assert_eq!(fine.train.labels, vec![42, 99]);
    assert_eq!(fine.train.target, TargetKind::Classes(100));
    c.labels = Some(Cifar100Labels::Coarse);
    let coarse = data::load(&c, Path::new("."), 1).unwrap();
    assert_eq!(coarse.train.labels, vec![3, 19]);
    assert_eq!(coarse.test.labels, vec![0]);
    assert_eq!(coarse.train.target, TargetKind::Classes(20));
    assert_eq!(coarse.train.features, fine.train.features);

    // A fine label of 120 is wrong even when the coarse labels are used.
    train.extend(cifar_record(&[1, 120], 3));
    std::fs::write(dir.path().join("train.bin"), &train).unwrap();
    contains_all(
        &load_err(&c),
        &[
            "train.bin",
            "fine label 120 in record 2 (byte 6149) out of range for 100 classes",
        ],
    );
    std::fs::write(dir.path().join("train.bin"), cifar_record(&[25, 1], 0)).unwrap();
    contains_all(&load_err(&c), &["coarse label 25", "20 classes"]);
}

// ---------------------------------------------------------------------------------------------
// CSV

#[test]
fn csv_with_header_label_first_and_an_image_shape() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("train.csv.gz");
    let mut text = String::from("label,p0,p1,p2,p3\n");
    for i in 0..10 {
        text.push_str(&format!("{},{},{},{},{}\n", i % 3, i, i + 1, i + 2, i + 3));
    }
    std::fs::write(&p, gz(text.as_bytes())).unwrap();
    let c = DataConfig {
        path: Some(PathBuf::from("train.csv.gz")),
        csv: Some(CsvOptions {
            label_column: 0,
            header: true,
            classes: Some(4),
            shape: Some([1, 2, 2]),
            ..Default::default()
        }),
        augment: Augment {
            crop_padding: 0,
            flip: true,
        },
        normalize: Some(Normalize::None),
        test_fraction: Some(0.3),
        ..Default::default()
    };
    c.validate().unwrap();
    let s = data::load(&c, dir.path(), 5).unwrap();
    assert_eq!(s.train.len() + s.test.len(), 10);
    assert_eq!(s.test.len(), 3);
    assert_eq!(s.train.target, TargetKind::Classes(4));
    assert_eq!(s.train.dim, 4);
    assert_eq!(s.train.shape.unwrap().len(), 4);
    for (row, &l) in s.train.features.chunks(4).zip(&s.train.labels) {
        assert_eq!(row[0] as u32 % 3, l, "the label came from column 0");
        assert_eq!(row[1], row[0] + 1.0);
    }

    // The declared shape must match the columns, and labels the declared classes.
    let mut bad = c.clone();
    bad.csv.as_mut().unwrap().shape = Some([1, 3, 3]);
    contains_all(
        &data::load(&bad, dir.path(), 5).unwrap_err().to_string(),
        &["train.csv.gz", "4 feature columns", "needs 9"],
    );
    let mut bad = c.clone();
    bad.csv.as_mut().unwrap().classes = Some(2);
    contains_all(
        &data::load(&bad, dir.path(), 5).unwrap_err().to_string(),
        &[
            "train.csv.gz",
            "line 4",
            "label 2 out of range for 2 classes",
        ],
    );
}

#[test]
fn csv_with_real_targets_is_a_regression_dataset() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("r.csv"), "1,2,0.5\n3,4,-1.25\n5,6,2\n").unwrap();
    let c = DataConfig {
        path: Some(PathBuf::from("r.csv")),
        csv: Some(CsvOptions {
            target: CsvTarget::Real,
            ..Default::default()
        }),
        ..Default::default()
    };
    c.validate().unwrap();
    let s = data::load(&c, dir.path(), 5).unwrap();
    assert_eq!(s.train.target, TargetKind::Real);
    assert!(s.train.labels.is_empty());
    let mut all: Vec<f32> = s
        .train
        .values
        .iter()
        .chain(&s.test.values)
        .copied()
        .collect();
    all.sort_by(f32::total_cmp);
    assert_eq!(all, vec![-1.25, 0.5, 2.0]);
    // An MLP trains on real targets with squared error (one output); softmax regression needs
    // classes: a clear error, not a panic.
    let pb = Problem::load(&ModelConfig::default(), &c, dir.path(), 5).unwrap();
    assert_eq!(pb.model.num_params(), 2 * 32 + 32 + 32 + 1);
    let e = Problem::load(
        &ModelConfig::Softmax(SoftmaxConfig { l2: 0.0 }),
        &c,
        dir.path(),
        5,
    )
    .err()
    .unwrap();
    assert_eq!(config_error(e).path.to_string(), "model.kind");
}

#[test]
fn a_missing_csv_file_is_named() {
    let c = DataConfig {
        path: Some("/nonexistent/d.csv".into()),
        ..Default::default()
    };
    contains_all(&load_err(&c), &["/nonexistent/d.csv", "cannot read"]);
}

// ---------------------------------------------------------------------------------------------
// generators

#[test]
fn gaussian_mixture_is_seeded_balanced_and_separable() {
    let a = synthetic::gaussian_mixture(600, 10, 3, 8.0, 7);
    assert_eq!(a, synthetic::gaussian_mixture(600, 10, 3, 8.0, 7));
    assert_ne!(
        a.features,
        synthetic::gaussian_mixture(600, 10, 3, 8.0, 8).features
    );
    assert_eq!(a.target, TargetKind::Classes(3));
    for c in 0..3 {
        assert_eq!(a.labels.iter().filter(|&&l| l == c).count(), 200);
    }
    // Nearest class mean: accurate when separated, near chance when not.
    let accuracy = |d: &Dataset| {
        let mut means = vec![0.0f64; 3 * d.dim];
        for (x, &l) in d.features.chunks(d.dim).zip(&d.labels) {
            for j in 0..d.dim {
                means[l as usize * d.dim + j] += f64::from(x[j]) / 200.0;
            }
        }
        let right = d
            .features
            .chunks(d.dim)
            .zip(&d.labels)
            .filter(|(x, l)| {
                let dist = |k: usize| {
                    (0..d.dim)
                        .map(|j| (f64::from(x[j]) - means[k * d.dim + j]).powi(2))
                        .sum::<f64>()
                };
                (0..3).min_by(|&p, &q| dist(p).total_cmp(&dist(q))) == Some(**l as usize)
            })
            .count();
        right as f64 / d.len() as f64
    };
    assert!(accuracy(&a) > 0.97, "{}", accuracy(&a));
    let blur = synthetic::gaussian_mixture(600, 10, 3, 0.0, 7);
    assert!(accuracy(&blur) < 0.6, "{}", accuracy(&blur));
}

#[test]
fn linear_regression_has_a_known_optimum() {
    let (d, truth) = synthetic::linear_regression(4000, 5, 0.3, 9);
    assert_eq!(d.target, TargetKind::Real);
    assert_eq!(d.len(), 4000);
    let fit = synthetic::least_squares(&d).unwrap();
    for (w, t) in fit.weights.iter().zip(&truth.weights) {
        assert!((w - t).abs() < 0.03, "{w} vs {t}");
    }
    assert!((fit.bias - truth.bias).abs() < 0.03);
    // The minimal mean squared error is close to noise², and below that of (w*, b*).
    assert!((fit.mse / 0.09 - 1.0).abs() < 0.1, "{}", fit.mse);
    let at_truth = d
        .features
        .chunks(5)
        .zip(&d.values)
        .map(|(x, &y)| {
            let p: f64 = x
                .iter()
                .zip(&truth.weights)
                .map(|(&a, w)| f64::from(a) * w)
                .sum();
            (p + truth.bias - f64::from(y)).powi(2)
        })
        .sum::<f64>()
        / 4000.0;
    assert!(fit.mse <= at_truth);

    // Through the configuration: same data, real targets, no normalization by default.
    let c = DataConfig {
        dataset: Some(DatasetKind::LinearRegression),
        synthetic: Some(SyntheticConfig {
            samples: Some(4000),
            dim: Some(5),
            noise: Some(0.3),
            ..Default::default()
        }),
        ..Default::default()
    };
    let s = data::load(&c, Path::new("."), 9).unwrap();
    assert_eq!(s.train.len() + s.test.len(), 4000);
    assert!(s.train.values.iter().all(|v| d.values.contains(v)));
    // Least squares fits it; softmax regression does not.
    let pb = Problem::load(
        &ModelConfig::Linear(LinearConfig { l2: 0.0 }),
        &c,
        Path::new("."),
        9,
    )
    .unwrap();
    assert_eq!(pb.model.num_params(), 6);
    let e = Problem::load(
        &ModelConfig::Softmax(SoftmaxConfig { l2: 0.0 }),
        &c,
        Path::new("."),
        9,
    )
    .err()
    .unwrap();
    assert_eq!(config_error(e).path.to_string(), "model.kind");
}

#[test]
fn a_generated_classification_problem_loads_and_trains() {
    let c =
        parse("[data]\ndataset = \"gaussian-mixture\"\nsynthetic = { samples = 400, dim = 6 }\n")
            .unwrap();
    let pb = Problem::load(&ModelConfig::default(), &c, Path::new("."), 3).unwrap();
    assert_eq!(pb.split.train.len(), 320);
    assert_eq!(pb.split.train.classes(), Some(4));
    use dasim_sim::store::{OptimizerConfig, ReplicaStore};
    let mut store = pb
        .try_store(
            burn::tensor::Device::flex(),
            4,
            16,
            OptimizerConfig::default(),
            3,
        )
        .unwrap();
    let g = store.request_gradient(2);
    store.apply_gradient(2, g, 0.1);
    assert!(store.evaluate().loss.is_finite());
}

// ---------------------------------------------------------------------------------------------
// partitions

/// Mean over workers of the share of a worker's samples in its most frequent class.
fn top_class_share(shards: &[Vec<usize>], train: &Dataset) -> f64 {
    data::class_counts(shards, train)
        .iter()
        .zip(shards)
        .map(|(c, s)| *c.iter().max().unwrap() as f64 / s.len() as f64)
        .sum::<f64>()
        / shards.len() as f64
}

#[test]
fn dirichlet_skew_follows_alpha_and_assigns_every_sample_once() {
    let train = digits_train();
    let n = train.len();
    let skewed =
        data::partition(&PartitionConfig::Dirichlet { alpha: 0.1 }, &train, 8, 42).unwrap();
    let uniform =
        data::partition(&PartitionConfig::Dirichlet { alpha: 1000.0 }, &train, 8, 42).unwrap();
    assert_exactly_once(&skewed, n);
    assert_exactly_once(&uniform, n);

    // Small α: a worker's class mix is far from the global one; large α: within a few points.
    let global = data::class_counts(&[(0..n).collect()], &train).remove(0);
    let distances = |shards: &[Vec<usize>]| -> Vec<f64> {
        data::class_counts(shards, &train)
            .iter()
            .zip(shards)
            .map(|(counts, shard)| {
                counts
                    .iter()
                    .zip(&global)
                    .map(|(&c, &g)| (c as f64 / shard.len() as f64 - g as f64 / n as f64).abs())
                    .sum::<f64>()
                    / 2.0
            })
            .collect()
    };
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let far = distances(&skewed);
    let near = distances(&uniform);
    assert!(mean(&far) > 0.5, "mean total variation {far:?}");
    assert!(near.iter().all(|&d| d < 0.05), "total variation {near:?}");
    assert!(top_class_share(&skewed, &train) > 0.4);
    assert!(top_class_share(&uniform, &train) < 0.15);
    // Sizes are roughly equal under large α.
    assert!(uniform.iter().all(|s| (170..190).contains(&s.len())));

    // Deterministic in the seed.
    let again = data::partition(&PartitionConfig::Dirichlet { alpha: 0.1 }, &train, 8, 42).unwrap();
    assert_eq!(skewed, again);
    let other = data::partition(&PartitionConfig::Dirichlet { alpha: 0.1 }, &train, 8, 43).unwrap();
    assert_ne!(skewed, other);
}

#[test]
fn a_dirichlet_partition_that_cannot_fill_every_worker_is_an_error() {
    let train = digits_train();
    let e =
        data::partition(&PartitionConfig::Dirichlet { alpha: 1e-4 }, &train, 64, 1).unwrap_err();
    let e = config_error(e);
    assert_eq!(e.path.to_string(), "data.partition.alpha");
    assert!(e.hint.unwrap().contains("raise alpha"));
}

#[test]
fn shards_per_worker_limit_the_classes_of_each_worker() {
    let train = digits_train();
    let n = train.len();
    let shards =
        data::partition(&PartitionConfig::Shards { per_worker: 2 }, &train, 10, 42).unwrap();
    assert_exactly_once(&shards, n);
    // 20 shards of 71 or 72 samples, classes of ~144: a shard spans at most two classes.
    for (counts, shard) in data::class_counts(&shards, &train).iter().zip(&shards) {
        assert!((142..=144).contains(&shard.len()), "{}", shard.len());
        let present = counts.iter().filter(|&&c| c > 0).count();
        assert!(present <= 4, "{counts:?}");
    }
    assert!(top_class_share(&shards, &train) > 0.45);

    let e =
        data::partition(&PartitionConfig::Shards { per_worker: 200 }, &train, 10, 42).unwrap_err();
    assert_eq!(
        config_error(e).path.to_string(),
        "data.partition.per_worker"
    );
}

#[test]
fn unequal_sizes_follow_weights_or_a_power_law() {
    let train = digits_train();
    let n = train.len();
    let weights = PartitionConfig::Unequal {
        weights: Some(vec![4.0, 2.0, 1.0, 1.0]),
        power: None,
    };
    let shards = data::partition(&weights, &train, 4, 42).unwrap();
    assert_exactly_once(&shards, n);
    let sizes: Vec<usize> = shards.iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![719, 359, 180, 180]);

    let power = PartitionConfig::Unequal {
        weights: None,
        power: Some(1.0),
    };
    let shards = data::partition(&power, &train, 8, 42).unwrap();
    assert_exactly_once(&shards, n);
    assert!(shards.windows(2).all(|w| w[0].len() >= w[1].len()));
    assert!(shards[0].len() >= 7 * shards[7].len());

    // Equal weights are the IID partition, sample for sample.
    let equal = PartitionConfig::Unequal {
        weights: Some(vec![1.0; 16]),
        power: None,
    };
    assert_eq!(
        data::partition(&equal, &train, 16, 42).unwrap(),
        data::partition(&PartitionConfig::Iid {}, &train, 16, 42).unwrap()
    );
    assert_eq!(
        data::partition(&PartitionConfig::Iid {}, &train, 16, 42).unwrap(),
        data::partition_iid(n, 16, 42)
    );

    // Weights for the wrong number of workers; a worker left with nothing.
    let e = data::partition(&weights, &train, 5, 42).unwrap_err();
    assert_eq!(config_error(e).path.to_string(), "data.partition.weights");
    let steep = PartitionConfig::Unequal {
        weights: None,
        power: Some(6.0),
    };
    let e = config_error(data::partition(&steep, &train, 16, 42).unwrap_err());
    assert_eq!(e.path.to_string(), "data.partition.power");
    assert!(e.message.contains("gets no sample"), "{e}");
}

#[test]
fn too_many_workers_is_an_error_not_a_panic() {
    let train = digits_train().subset(&[0, 1, 2]);
    let e = config_error(data::partition(&PartitionConfig::Iid {}, &train, 4, 1).unwrap_err());
    assert_eq!(e.path.to_string(), "cluster.workers");
    let pb = Problem::load(
        &ModelConfig::default(),
        &DataConfig::default(),
        Path::new("."),
        1,
    )
    .unwrap();
    use dasim_sim::store::OptimizerConfig;
    let e = pb
        .try_store(
            burn::tensor::Device::flex(),
            5000,
            8,
            OptimizerConfig::default(),
            1,
        )
        .err()
        .unwrap();
    assert_eq!(config_error(e).path.to_string(), "cluster.workers");
}

#[test]
fn the_problem_uses_the_configured_partition() {
    let c = parse("[data]\npartition = { kind = \"dirichlet\", alpha = 0.1 }\n").unwrap();
    let pb = Problem::load(&ModelConfig::default(), &c, Path::new("."), 42).unwrap();
    let shards = pb.partition(8, 42).unwrap();
    assert_eq!(
        shards,
        data::partition(&c.partition, &pb.split.train, 8, 42).unwrap()
    );
    assert_ne!(shards, data::partition_iid(pb.split.train.len(), 8, 42));
}

/// `partition.csv` (written by `dasim-reports`) lists each shard's size and class counts.
#[test]
fn class_counts_add_up_to_each_shard() {
    let train = digits_train();
    let shards = data::partition(&PartitionConfig::Dirichlet { alpha: 0.5 }, &train, 4, 1).unwrap();
    let counts = data::class_counts(&shards, &train);
    assert_eq!(counts.len(), 4);
    for (shard, c) in shards.iter().zip(&counts) {
        assert_eq!(c.len(), 10);
        assert_eq!(c.iter().sum::<usize>(), shard.len());
    }
    assert_eq!(shards.iter().map(Vec::len).sum::<usize>(), train.len());
    let (reg, _) = synthetic::linear_regression(10, 2, 0.1, 1);
    let counts = data::class_counts(&data::partition_iid(10, 3, 1), &reg);
    assert!(counts.iter().all(Vec::is_empty), "{counts:?}");
}

// ---------------------------------------------------------------------------------------------
// sampling and augmentation

#[test]
fn the_sampler_is_a_function_of_seed_worker_and_shard() {
    // Two stores built on different backends each make their samplers like this: the host-side
    // streams give identical minibatch indices, whatever the device.
    let pb = Problem::load(
        &ModelConfig::default(),
        &DataConfig::default(),
        Path::new("."),
        42,
    )
    .unwrap();
    let draw = |worker: usize| {
        let shards = pb.partition(16, 42).unwrap();
        let mut s = Sampler::new(shards[worker].clone(), 42, worker);
        let mut out = Vec::new();
        for _ in 0..10 {
            s.next_batch(32, &mut out);
        }
        assert_eq!(s.drawn(), 320);
        out
    };
    assert_eq!(draw(3), draw(3));
    assert_ne!(draw(3), draw(4));
    // Pinned: a change of the shuffle, the stream derivation or the partition shows up here.
    assert_eq!(&draw(0)[..8], &[644, 81, 916, 1066, 1140, 646, 474, 1234]);
}

#[test]
fn every_epoch_covers_the_shard_and_is_reshuffled() {
    let shard: Vec<usize> = (100..137).collect();
    let mut s = Sampler::new(shard.clone(), 9, 2);
    let mut out = Vec::new();
    s.next_batch(37 * 3, &mut out);
    let epochs: Vec<Vec<usize>> = out.chunks(37).map(<[usize]>::to_vec).collect();
    for e in &epochs {
        let mut sorted = e.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, shard);
    }
    assert_ne!(epochs[0], epochs[1]);
    assert!((s.local_epochs() - 3.0).abs() < 1e-12);
}

#[test]
fn augmentation_draws_from_its_own_stream() {
    let mut a = Sampler::new((0..50).collect(), 1, 0);
    let mut b = Sampler::new((0..50).collect(), 1, 0);
    let _: u64 = b.augment_stream().random();
    let (mut x, mut y) = (Vec::new(), Vec::new());
    a.next_batch(120, &mut x);
    b.next_batch(120, &mut y);
    assert_eq!(x, y, "augmentation draws do not move the minibatch order");
}

fn image_data() -> Dataset {
    // Two 2-channel 3×4 images with distinct values.
    let features: Vec<f32> = (0..2 * 24).map(|v| v as f32 + 1.0).collect();
    Dataset::classification(features, 24, vec![0, 1], 2).with_shape(ImageShape {
        channels: 2,
        height: 3,
        width: 4,
    })
}

#[test]
fn identity_augmentation_copies_and_draws_nothing() {
    let d = image_data();
    let mut rng = stream(1, StreamKind::Data, 0);
    let mut out = Vec::new();
    Augment::default().apply(&d, &[1, 0, 1], &mut rng, &mut out);
    assert_eq!(&out[..24], d.sample(1));
    assert_eq!(&out[24..48], d.sample(0));
    let next: u64 = rng.random();
    assert_eq!(next, stream(1, StreamKind::Data, 0).random::<u64>());
}

#[test]
fn crop_and_flip_make_exactly_the_documented_draws() {
    let d = image_data();
    let aug = Augment {
        crop_padding: 1,
        flip: true,
    };
    let indices: Vec<usize> = (0..200).map(|i| i % 2).collect();
    let mut rng = stream(5, StreamKind::Data, 1 << 32);
    let mut out = Vec::new();
    aug.apply(&d, &indices, &mut rng, &mut out);
    assert_eq!(out.len(), 200 * 24);

    // Replay the documented draws and rebuild every output pixel.
    let mut replay = stream(5, StreamKind::Data, 1 << 32);
    let (mut flips, mut shifted) = (0, 0);
    for (k, &i) in indices.iter().enumerate() {
        let dy = replay.random_range(0..=2u32) as isize - 1;
        let dx = replay.random_range(0..=2u32) as isize - 1;
        let flip = replay.random_bool(0.5);
        flips += usize::from(flip);
        shifted += usize::from(dy != 0 || dx != 0);
        let src = d.sample(i);
        for c in 0..2isize {
            for y in 0..3isize {
                for x in 0..4isize {
                    let xs = if flip { 3 - x } else { x };
                    let (sy, sx) = (y + dy, xs + dx);
                    let want = if (0..3).contains(&sy) && (0..4).contains(&sx) {
                        src[(c * 12 + sy * 4 + sx) as usize]
                    } else {
                        0.0
                    };
                    assert_eq!(out[k * 24 + (c * 12 + y * 4 + x) as usize], want);
                }
            }
        }
    }
    assert_eq!(rng.random::<u64>(), replay.random::<u64>(), "no other draw");
    assert!((60..140).contains(&flips), "{flips}");
    assert!(shifted > 120, "{shifted}");
}

#[test]
fn the_store_augments_minibatches_from_the_worker_stream_at_request_time() {
    use dasim_sim::store::{OptimizerConfig, ReplicaStore};
    let c = parse("[data]\naugment = { crop_padding = 2, flip = true }\n").unwrap();
    let pb = Problem::load(&ModelConfig::Lenet(LenetConfig {}), &c, Path::new("."), 7).unwrap();
    let plain = Problem::load(
        &ModelConfig::Lenet(LenetConfig {}),
        &DataConfig::default(),
        Path::new("."),
        7,
    )
    .unwrap();
    let opt = OptimizerConfig::default();
    let device = burn::tensor::Device::flex();
    let mut store = pb.try_store(device.clone(), 4, 8, opt.clone(), 7).unwrap();
    let mut unaugmented = plain.try_store(device, 4, 8, opt, 7).unwrap();
    let order = [2, 0, 2, 3];
    let ids: Vec<_> = order.iter().map(|&w| store.request_gradient(w)).collect();
    for &w in &order {
        unaugmented.request_gradient(w);
    }

    // Replay: the worker's sampler for indices, its augmentation stream for the draws, one
    // minibatch after the other in request order.
    let shards = pb.partition(4, 7).unwrap();
    let mut samplers: Vec<Sampler> = (0..4)
        .map(|w| Sampler::new(shards[w].clone(), 7, w))
        .collect();
    for (k, &w) in order.iter().enumerate() {
        let mut batch = Vec::new();
        samplers[w].next_batch(8, &mut batch);
        let mut want = Vec::new();
        pb.augment.apply(
            &pb.split.train,
            &batch,
            samplers[w].augment_stream(),
            &mut want,
        );
        let (indices, features) = store.pending_batch_host(k);
        assert_eq!(indices, batch, "request {k}: minibatch indices");
        assert_eq!(features, want, "request {k}: augmented features");
        // Augmentation changes the features, not the indices.
        let (same, raw) = unaugmented.pending_batch_host(k);
        assert_eq!(same, batch);
        assert_ne!(raw, features);
    }
    // The augmented batches train.
    for id in ids {
        store.apply_gradient(0, id, 0.05);
    }
    assert_eq!(store.stats().flushes, 1);
    assert!(store.evaluate().loss.is_finite());
}
