//! `cargo xtask ci`: everything CI checks, in one run.

use crate::cmd::{crash, raft_kill, release_check, test};
use crate::process::cargo;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// The lock file, fmt, clippy, the tests, the CI-sized crash suite (loom
/// included), the raft kill test, the release check, packaging and rustdoc:
/// stable Rust only.
pub fn run() -> Result<(), String> {
    // Each committed Cargo.lock must hold its workspace's resolution: a
    // dependency added without its lock-file change builds here (cargo
    // rewrites the file) and fails a `--locked` build elsewhere. The fuzz
    // targets and the two comparison workspaces lock the layer crates'
    // dependencies too.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for manifest in LOCKED_WORKSPACES {
        let path = root.join(manifest).to_string_lossy().into_owned();
        cargo(&["tree", "--workspace", "--locked", "--depth", "0", "--quiet", "--manifest-path", &path], &[]).map_err(
            |e| {
                format!(
                    "the lock file of {manifest} is stale, or the registry could not be read: run `cargo tree \
                     --manifest-path {manifest}` (it updates the lock file) and commit the change ({e})"
                )
            },
        )?;
    }
    cargo(&["fmt", "--all", "--check"], &[])?;
    cargo(&["clippy", "--workspace", "--all-targets", "--all-features", "--", "-D", "warnings"], &[])?;
    test::run()?;
    crash::run(false, None)?;
    raft_kill::run(20, 8)?;
    release_check::run()?;
    package()?;
    cargo(&["doc", "--workspace", "--no-deps"], &[("RUSTDOCFLAGS", "-D warnings")])
}

/// The manifests of the workspaces whose Cargo.lock is committed.
const LOCKED_WORKSPACES: [&str; 4] =
    ["Cargo.toml", "fuzz/Cargo.toml", "bench-compare/Cargo.toml", "raft-compare/Cargo.toml"];

/// The crates that are not published (tests, benchmarks, build chores).
const UNPUBLISHED: [&str; 4] = ["crash-suite", "commitlog-bench", "test-support", "xtask"];

/// Packages every published crate and builds each from its package (`cargo
/// package --workspace`, verify on), so a change that breaks packaging (a
/// missing file, a dependency without a version, a path outside the crate)
/// fails CI. The layer crates pin each other at `=` their shared version, so the
/// verify builds use the workspace's packages even where crates.io holds a
/// crate of the same name (`commitlog`, `store-io` and `mapped-file` are taken
/// there: CHANGELOG.md and README.md say what that means for publishing).
///
/// The packages go to a target directory of their own, named for this run and
/// removed after it. Cargo serves the verify builds the workspace's packages
/// from a registry under the target directory and unpacks each into
/// `$CARGO_HOME/registry/src/<hash of that registry's path>/`, skipping any it
/// finds already unpacked: with the usual `target/package`, a checkout at the
/// same path as an earlier run (a CI machine's) builds against the earlier run's
/// sources of a crate whose version did not change, and fails on what changed
/// since (or passes on what a fresh machine would reject). A path of its own
/// each run gets a registry of its own.
fn package() -> Result<(), String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let target = root.join("target").join(format!("package-check-{}-{stamp}", std::process::id()));
    let target_arg = target.to_string_lossy().into_owned();
    let mut args = vec!["package", "--workspace", "--allow-dirty", "--quiet", "--target-dir", &target_arg];
    for crate_name in UNPUBLISHED {
        args.extend(["--exclude", crate_name]);
    }
    let packaged = cargo(&args, &[]);
    if packaged.is_ok() {
        std::fs::remove_dir_all(&target).map_err(|e| format!("cannot remove {}: {e}", target.display()))?;
    }
    packaged
}
