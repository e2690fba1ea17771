//! `cargo xtask msrv`: the workspace checked on its declared rust-version.

use crate::process::{rustup_cargo, rustup_install, rustup_succeeds};

/// The workspace checked on the `rust-version` the manifests declare, so the
/// declaration stays true. Installs that toolchain with rustup if it is missing.
pub fn run() -> Result<(), String> {
    let manifest = std::fs::read_to_string("Cargo.toml").map_err(|e| format!("cannot read Cargo.toml: {e}"))?;
    let version = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("rust-version = "))
        .map(|v| v.trim_matches('"').to_string())
        .ok_or("Cargo.toml declares no rust-version")?;
    if !rustup_succeeds(&["run", &version, "rustc", "--version"]) {
        let failure = format!("cannot install Rust {version}");
        rustup_install(&["toolchain", "install", "--profile", "minimal", &version], &failure)?;
    }
    rustup_cargo(&version, &["check", "--workspace", "--all-targets"], &[("CARGO_TARGET_DIR", "target/msrv")], false)?;
    println!("msrv: the workspace builds on Rust {version}, its declared rust-version");
    Ok(())
}
