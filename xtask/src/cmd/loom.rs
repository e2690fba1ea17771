//! `cargo xtask loom`: the loom models (`--cfg loom`).

use crate::process::{cargo_output, passed_count};

/// Runs the loom models; returns how many passed, as the test runner counted them.
pub fn run() -> Result<u64, String> {
    let out = cargo_output(
        &["test", "--release", "-p", "flush-service", "-p", "mapped-file", "--lib", "--", "loom_"],
        &[("RUSTFLAGS", "--cfg loom"), ("CARGO_TARGET_DIR", "target/loom")],
    )?;
    let passed = passed_count(&out).ok_or("the loom run printed no test result")?;
    if passed == 0 {
        return Err("no loom model ran".into());
    }
    Ok(passed)
}
