//! `cargo xtask miri`: the unit tests of the unsafe code under Miri (nightly).

use crate::process::{passed_count, rustup_cargo, rustup_install, rustup_succeeds};

/// The unsafe code's own tests under Miri: the write buffers of transient-pool and
/// the segment memory of mapped-file over heap memory (`SimStorage`). Tests that
/// need real files, mappings or `mlock` are ignored there (Miri cannot run those
/// system calls); the loom models cover the same protocol's interleavings.
pub fn run() -> Result<(), String> {
    if !rustup_succeeds(&["run", "nightly", "cargo", "miri", "--version"]) {
        rustup_install(
            &["component", "add", "--toolchain", "nightly", "miri", "rust-src"],
            "Miri needs the nightly toolchain with the miri component (rustup component add miri)",
        )?;
    }
    let out = rustup_cargo(
        "nightly",
        &["miri", "test", "-p", "transient-pool", "-p", "store-io", "-p", "mapped-file", "--lib"],
        &[("MIRIFLAGS", "-Zmiri-disable-isolation"), ("CARGO_TARGET_DIR", "target/miri")],
        true,
    )?;
    let passed = passed_count(&out).ok_or("the Miri run printed no test result")?;
    println!(
        "miri: {passed} unit tests of transient-pool, store-io and mapped-file passed under Miri (no undefined behaviour found)"
    );
    Ok(())
}
