//! The theory suite: the papers' structural claims, written as `[[expect]]` entries of the
//! scenarios in `scenarios/claims/`, hold (`dasim check`, on flex). Each scenario states in its
//! comment the paper, the claim and how its bound is derived.

use crate::common;

use std::path::PathBuf;

use common::*;

fn claim_scenarios() -> Vec<PathBuf> {
    let dir = common::manifest_dir().join("scenarios/claims");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_paper_claim_holds() {
    let files = claim_scenarios();
    assert!(files.len() >= 7, "{} claim scenarios", files.len());
    let out = tempfile::tempdir().unwrap();
    let junit = out.path().join("claims.xml");
    let mut args = vec!["check".to_owned()];
    args.extend(files.iter().map(|f| f.to_str().unwrap().to_owned()));
    // Three seeds, as the README's command: a claim that holds for one realization only is no
    // claim.
    args.extend(
        [
            "--seeds",
            "1..3",
            "--backend",
            "flex",
            "--junit",
            junit.to_str().unwrap(),
        ]
        .map(str::to_owned),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = dasim(&args);
    let table = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "a claim failed:\n{table}\n{}",
        stderr(&o)
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("failures=\"0\""), "{xml}");
    // Every scenario is a suite, and none was skipped silently: every claim was judged.
    for f in &files {
        let name = f.file_name().unwrap().to_str().unwrap();
        assert!(table.contains(name), "{name} is not in the table:\n{table}");
    }
    let last = table.lines().last().unwrap_or("");
    assert!(
        last.ends_with(" 0 failed, 0 skipped"),
        "a claim failed or was skipped: {last}"
    );
}

/// Each claim scenario says where its claim comes from and has claims to check.
#[test]
fn every_claim_scenario_cites_its_paper() {
    for f in claim_scenarios() {
        let text = std::fs::read_to_string(&f).unwrap();
        let comment: String = text
            .lines()
            .take_while(|l| l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n");
        let cites_a_year = comment
            .split(|c: char| !c.is_ascii_digit())
            .any(|w| w.len() == 4 && (w.starts_with("19") || w.starts_with("20")));
        assert!(
            comment.contains("Claim") && cites_a_year,
            "{}: the opening comment must state the claim and cite the paper (author, year)",
            f.display()
        );
        assert!(
            text.matches("[[expect]]").count() >= 2,
            "{}: fewer than two claims",
            f.display()
        );
        assert!(
            text.matches("note = ").count() >= text.matches("[[expect]]").count(),
            "{}: every claim needs a note",
            f.display()
        );
    }
}
