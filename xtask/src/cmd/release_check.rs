//! `cargo xtask release-check`: no simulation, fail point or planted bug in the
//! release tool.

use std::env;
use std::path::Path;

use crate::process::{cargo, cargo_output};

/// What users get contains no test machinery: the release build of the tool
/// (and so of every library under it) resolves no simulation or fail-point
/// feature (`cargo tree -e features`), and its binary holds no symbol of the
/// simulation, the fail points or the planted bugs.
pub fn run() -> Result<(), String> {
    const FORBIDDEN_FEATURES: [&str; 3] =
        ["store-io feature \"sim\"", "mapped-file feature \"sim\"", "commitlog feature \"failpoints\""];
    const FORBIDDEN_SYMBOLS: [&str; 4] = ["SimStorage", "failpoints", "planted", "HookAfterFlush"];
    let tree = cargo_output(&["tree", "--quiet", "-p", "commitlog-cli", "-e", "features,normal"], &[])?;
    if let Some(found) = FORBIDDEN_FEATURES.iter().find(|f| tree.contains(**f)) {
        return Err(format!("the release build of commitlog-cli resolves {found}"));
    }
    cargo(&["build", "--release", "-p", "commitlog-cli"], &[])?;
    let target = env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let binary = Path::new(&target).join("release/commitlog");
    let bytes = std::fs::read(&binary).map_err(|e| format!("{}: {e}", binary.display()))?;
    let contains = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    if let Some(found) = FORBIDDEN_SYMBOLS.iter().find(|s| contains(s.as_bytes())) {
        return Err(format!("the release binary {} contains {found}", binary.display()));
    }
    // The check can see symbols of the libraries: their own types are there.
    if !contains(b"SegmentQueue") || !contains(b"MappedFile") {
        return Err(format!("{} holds no symbol of the libraries: the check cannot see", binary.display()));
    }
    println!(
        "release: commitlog-cli resolves no sim or failpoints feature, and its binary holds none of {}",
        FORBIDDEN_SYMBOLS.join(", ")
    );
    Ok(())
}
