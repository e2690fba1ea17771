//! `cargo xtask ci`: everything CI checks, in one run.

use crate::cmd::{crash, raft_kill, release_check, test};
use crate::process::cargo;

/// fmt, clippy, the tests, the CI-sized crash suite (loom included), the raft
/// kill test, the release check, packaging and rustdoc: stable Rust only.
pub fn run() -> Result<(), String> {
    cargo(&["fmt", "--all", "--check"], &[])?;
    cargo(&["clippy", "--workspace", "--all-targets", "--all-features", "--", "-D", "warnings"], &[])?;
    test::run()?;
    crash::run(false, None)?;
    raft_kill::run(20, 8)?;
    release_check::run()?;
    package()?;
    cargo(&["doc", "--workspace", "--no-deps"], &[("RUSTDOCFLAGS", "-D warnings")])
}

/// The crates that are not published (tests, benchmarks, build chores).
const UNPUBLISHED: [&str; 4] = ["crash-suite", "commitlog-bench", "test-support", "xtask"];

/// Packages every published crate and builds each from its package (`cargo
/// package --workspace`, verify on), so a change that breaks packaging (a
/// missing file, a dependency without a version, a path outside the crate)
/// fails CI. The layer crates pin each other at `=` their shared version, so the
/// verify builds use the workspace's packages even where crates.io holds a
/// crate of the same name (`commitlog`, `store-io` and `mapped-file` are taken
/// there: CHANGELOG.md and README.md say what that means for publishing).
fn package() -> Result<(), String> {
    let mut args = vec!["package", "--workspace", "--allow-dirty", "--quiet"];
    for crate_name in UNPUBLISHED {
        args.extend(["--exclude", crate_name]);
    }
    cargo(&args, &[])
}
