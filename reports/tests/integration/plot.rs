//! `line_plot`: PNG and SVG output.

use std::fs;
use std::path::Path;

use dasim_reports::{Error, LinePlot, PLOT_HEIGHT, PLOT_WIDTH, Series, line_plot};

const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1A, b'\n'];

/// Checks the PNG signature and IHDR chunk and returns (width, height).
fn png_dimensions(path: &Path) -> (u32, u32) {
    let bytes = fs::read(path).unwrap();
    assert!(bytes.len() > 33, "{} is too short", path.display());
    assert_eq!(bytes[..8], PNG_SIGNATURE, "PNG signature");
    assert_eq!(&bytes[12..16], b"IHDR", "first chunk is IHDR");
    let be = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap());
    assert_eq!(
        &bytes[bytes.len() - 8..bytes.len() - 4],
        b"IEND",
        "ends with IEND"
    );
    (be(16), be(20))
}

fn curves() -> Vec<Series> {
    let decay = |rate: f64| {
        (0..=50).map(move |i| {
            (
                f64::from(i) * 2.0,
                2.3 * (-rate * f64::from(i)).exp() + 0.05,
            )
        })
    };
    vec![
        Series::new("sync-sgd", decay(0.08)),
        Series::new("async-sgd (stale)", decay(0.05)),
        Series::new("gossip ring", decay(0.03)),
    ]
}

fn plot(series: &[Series], log_y: bool) -> LinePlot<'_> {
    LinePlot {
        title: "Evaluation loss",
        x_label: "simulated time (s)",
        y_label: "loss",
        log_y,
        series,
    }
}

#[test]
fn writes_png_and_svg() {
    let dir = tempfile::tempdir().unwrap();
    let series = curves();
    for (stem, log_y) in [("loss", false), ("loss_log", true)] {
        let (png, svg) = line_plot(dir.path(), stem, &plot(&series, log_y)).unwrap();
        assert_eq!(png, dir.path().join(format!("{stem}.png")));
        assert_eq!(svg, dir.path().join(format!("{stem}.svg")));
        assert_eq!(png_dimensions(&png), (PLOT_WIDTH, PLOT_HEIGHT));
        assert_eq!((PLOT_WIDTH, PLOT_HEIGHT), (1000, 620));

        let text = fs::read_to_string(&svg).unwrap();
        assert!(text.starts_with("<svg"), "{}", &text[..60]);
        assert!(text.trim_end().ends_with("</svg>"));
        assert!(text.contains(r#"width="1000" height="620""#));
        for s in &series {
            assert!(text.contains(&s.label), "SVG lacks label {:?}", s.label);
        }
        assert!(text.contains("Evaluation loss") && text.contains("simulated time (s)"));
    }
    assert!(!dir.path().join("loss.svg.tmp").exists());
}

#[test]
fn output_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let series = curves();
    let (png_a, svg_a) = line_plot(dir.path().join("a"), "p", &plot(&series, true)).unwrap();
    let (png_b, svg_b) = line_plot(dir.path().join("b"), "p", &plot(&series, true)).unwrap();
    assert_eq!(fs::read(png_a).unwrap(), fs::read(png_b).unwrap());
    assert_eq!(fs::read(svg_a).unwrap(), fs::read(svg_b).unwrap());
}

#[test]
fn degenerate_data_does_not_panic() {
    let dir = tempfile::tempdir().unwrap();
    let nan = f64::NAN;
    let inf = f64::INFINITY;
    let cases: Vec<(&str, Vec<Series>)> = vec![
        ("no_series", vec![]),
        (
            "empty_series",
            vec![Series::new("empty", []), Series::new("", [])],
        ),
        ("single_point", vec![Series::new("one", [(3.0, 0.5)])]),
        (
            "constant",
            vec![Series::new("flat", [(0.0, 1.0), (1.0, 1.0), (2.0, 1.0)])],
        ),
        (
            "vertical",
            vec![Series::new("same x", [(5.0, 1.0), (5.0, 2.0)])],
        ),
        (
            "all_nan",
            vec![Series::new("nan", [(nan, nan), (1.0, nan), (nan, 1.0)])],
        ),
        (
            "mixed",
            vec![
                Series::new(
                    "gaps",
                    [(0.0, 1.0), (1.0, nan), (2.0, inf), (3.0, -inf), (4.0, 0.25)],
                ),
                Series::new("negative", [(0.0, -1.0), (4.0, 0.0)]),
                Series::new("unlabelled", []),
            ],
        ),
        (
            "huge",
            vec![Series::new("huge", [(0.0, 1e300), (f64::MAX, -1e300)])],
        ),
        (
            "tiny",
            vec![Series::new("tiny", [(0.0, 1e-300), (1e-300, 2e-300)])],
        ),
    ];
    for (stem, series) in &cases {
        for log_y in [false, true] {
            let stem = format!("{stem}_{log_y}");
            let (png, svg) = line_plot(dir.path(), &stem, &plot(series, log_y))
                .unwrap_or_else(|e| panic!("{stem}: {e}"));
            assert_eq!(png_dimensions(&png), (1000, 620), "{stem}");
            let text = fs::read_to_string(&svg).unwrap();
            for s in series.iter().filter(|s| !s.label.is_empty()) {
                assert!(
                    text.contains(&s.label),
                    "{stem}: SVG lacks label {:?}",
                    s.label
                );
            }
        }
    }
}

#[test]
fn creates_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("runs/x/plots");
    let (png, _) = line_plot(&nested, "acc", &plot(&curves(), false)).unwrap();
    assert!(png.starts_with(&nested) && png.exists());
}

#[test]
fn unwritable_directory_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    // A regular file where a directory should be: fails even when running as root.
    let blocker = dir.path().join("not-a-dir");
    fs::write(&blocker, "").unwrap();

    let err = line_plot(&blocker, "loss", &plot(&curves(), false)).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    assert!(err.path().starts_with(&blocker), "{err:?}");
    assert!(err.to_string().contains("not-a-dir"), "{err}");

    let err = line_plot(blocker.join("sub"), "loss", &plot(&curves(), false)).unwrap_err();
    assert!(err.to_string().contains("not-a-dir"), "{err}");
}

#[cfg(unix)]
#[test]
fn read_only_directory_names_the_path() {
    use std::os::unix::fs::PermissionsExt;

    let dir = tempfile::tempdir().unwrap();
    let locked = dir.path().join("locked");
    fs::create_dir(&locked).unwrap();
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o555)).unwrap();
    if fs::write(locked.join("probe"), "").is_ok() {
        // Running with CAP_DAC_OVERRIDE (root): permissions are not enforced.
        return;
    }
    let err = line_plot(&locked, "loss", &plot(&curves(), false)).unwrap_err();
    assert!(err.to_string().contains("locked"), "{err}");
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o755)).unwrap();
}
