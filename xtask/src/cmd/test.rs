//! `cargo xtask test`: the test suite, as CI runs it.

use std::path::Path;

use crate::process::cargo_tests;

/// The tests on what users get (default features, no planted bugs), then the one
/// optional feature's own tests; a test that runs past the hang limit
/// ([`watch`](crate::watch)) ends the run with its name.
pub fn run() -> Result<(), String> {
    cargo_tests(&["test", "--workspace"], &[])?;
    // The log's integration tests once more on the other write path: the default
    // writes with pwrite (`write_without_mmap`), this pass through the mapping.
    // Named one by one within the workspace, so the features are the workspace's
    // and nothing is compiled again (`-p commitlog` resolves others: ~75 s more).
    let targets = commitlog_test_targets()?;
    let mut args = vec!["test", "--workspace"];
    for target in &targets {
        args.extend(["--test", target.as_str()]);
    }
    cargo_tests(&args, &[("COMMITLOG_TEST_WRITE_WITHOUT_MMAP", "0")])?;
    // The same way for the one optional feature: the workspace build plus serde.
    cargo_tests(&["test", "--workspace", "--features", "commitlog/serde", "--test", "config_toml"], &[]).map(drop)
}

/// The commit log's integration tests that need no optional feature: every
/// `crates/commitlog/tests/*.rs` but those gated on one (`#![cfg(feature`).
fn commitlog_test_targets() -> Result<Vec<String>, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/commitlog/tests");
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut targets = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if text.contains("#![cfg(feature") {
            continue;
        }
        if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
            targets.push(stem.to_string());
        }
    }
    targets.sort();
    if targets.is_empty() {
        return Err(format!("no integration test in {}", dir.display()));
    }
    Ok(targets)
}
