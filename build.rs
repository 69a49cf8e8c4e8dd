//! Stamps the git revision dasim is built from into the binary (`DASIM_GIT_REVISION`), so every
//! run directory says which dasim produced it. Outside a git checkout, or without git, the
//! revision is `unknown`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// Rebuild when HEAD moves: HEAD itself, the branch it points to, and the packed refs.
fn watch(git_dir: &Path) {
    let head = git_dir.join("HEAD");
    let mut paths: Vec<PathBuf> = vec![head.clone(), git_dir.join("packed-refs")];
    if let Ok(text) = std::fs::read_to_string(&head)
        && let Some(r) = text.trim().strip_prefix("ref: ")
    {
        paths.push(git_dir.join(r));
    }
    // Only existing paths: a missing one would make cargo rerun this script on every build.
    for p in paths.into_iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", p.display());
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let revision = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        watch(Path::new(&dir));
    }
    println!("cargo:rustc-env=DASIM_GIT_REVISION={revision}");
}
