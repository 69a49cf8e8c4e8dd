//! `summary.json`: pretty-printed, atomically replaced, byte-identical for the same value.

use std::fs;

use dasim_reports::write_json;

#[derive(serde::Serialize)]
struct Row {
    time_s: f64,
    worker_steps: u64,
}

#[derive(serde::Serialize)]
struct Summary {
    name: &'static str,
    final_accuracy: f64,
    diverged: f64,
    rows: Vec<Row>,
}

#[test]
fn summary_json_is_valid_and_pretty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("summary.json");
    let summary = Summary {
        name: "demo",
        final_accuracy: 0.97,
        diverged: f64::NAN,
        rows: vec![Row {
            time_s: 0.5,
            worker_steps: 1_234_567,
        }],
    };
    write_json(&path, &summary).unwrap();

    let text = fs::read_to_string(&path).unwrap();
    assert!(text.ends_with("}\n"), "{text}");
    assert!(
        text.contains("\n  \"name\": \"demo\""),
        "pretty-printed: {text}"
    );
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["final_accuracy"], 0.97);
    assert!(value["diverged"].is_null());
    assert_eq!(value["rows"][0]["worker_steps"], 1_234_567);
    assert!(!dir.path().join("summary.json.tmp").exists());

    // Rewriting replaces the file, and the same value gives the same bytes.
    write_json(&path, &summary).unwrap();
    assert_eq!(fs::read_to_string(&path).unwrap(), text);
    write_json(&path, &[1, 2, 3]).unwrap();
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        "[\n  1,\n  2,\n  3\n]\n"
    );
}

#[test]
fn summary_json_in_a_missing_directory_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gone/summary.json");
    let err = write_json(&path, &1).unwrap_err();
    assert!(err.to_string().contains("gone/summary.json"), "{err}");
}
