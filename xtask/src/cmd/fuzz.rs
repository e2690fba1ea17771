//! `cargo xtask fuzz --seconds N`: coverage-guided fuzzing (nightly, cargo-fuzz).

use std::process::Command;
use std::time::Instant;

use crate::process::{rustup_install, rustup_succeeds};
use crate::USAGE;

/// `--seconds N`, the only form `fuzz` takes.
pub fn parse_args(args: &[String]) -> Result<u64, String> {
    match args {
        [flag, n] if flag == "--seconds" => n.parse().map_err(|_| format!("--seconds takes a number, not {n}")),
        _ => Err(format!("fuzz needs --seconds N\n{USAGE}")),
    }
}

/// The cargo-fuzz targets (fuzz/Cargo.toml), each with what it feeds.
const FUZZ_TARGETS: [(&str, &str); 2] =
    [("parse_segment", "the recovery parser"), ("open_store_files", "the message store's own files, through an open")];

/// Runs each cargo-fuzz target on the nightly toolchain for its share of
/// `seconds` (at least one each), installing cargo-fuzz first if it is
/// missing; stops at the first target that finds a crash.
pub fn run(seconds: u64) -> Result<(), String> {
    if !rustup_succeeds(&["run", "nightly", "rustc", "--version"]) {
        return Err("fuzzing needs the nightly toolchain (rustup toolchain install nightly)".into());
    }
    if !rustup_succeeds(&["run", "nightly", "cargo", "fuzz", "--version"]) {
        rustup_install(
            &["run", "stable", "cargo", "install", "--locked", "cargo-fuzz"],
            "installing cargo-fuzz failed",
        )?;
    }
    let share = (seconds / FUZZ_TARGETS.len() as u64).max(1);
    for (target, what) in FUZZ_TARGETS {
        fuzz_target(target, what, share)?;
    }
    Ok(())
}

/// Runs the cargo-fuzz target `target` (which fuzzes `what`) for `seconds`.
fn fuzz_target(target: &str, what: &str, seconds: u64) -> Result<(), String> {
    let started = Instant::now();
    let out = Command::new("rustup")
        .args(["run", "nightly", "cargo", "fuzz", "run", target, "--"])
        .arg(format!("-max_total_time={seconds}"))
        .arg("-print_final_stats=1")
        .output()
        .map_err(|e| format!("cannot run cargo fuzz: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let execs =
        stderr.lines().find_map(|l| l.strip_prefix("stat::number_of_executed_units:")).map(|n| n.trim().to_string());
    match (out.status.success(), execs) {
        (true, Some(execs)) => {
            println!("fuzz {target}: {execs} executions of {what} in {seconds} s of fuzzing, 0 crashes ({:.0?} with the build)", started.elapsed());
            Ok(())
        }
        (true, None) => Err(format!("cargo fuzz {target} printed no execution count:\n{stderr}")),
        (false, execs) => {
            eprintln!("{stderr}");
            Err(format!(
                "fuzzing {target} found a crash (see fuzz/artifacts/{target}/); {} executions",
                execs.as_deref().unwrap_or("an unknown number of")
            ))
        }
    }
}
