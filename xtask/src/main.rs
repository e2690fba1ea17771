//! `cargo xtask`: the one entry point for CI chores.
//!
//! ```text
//! cargo xtask ci                         fmt --check, clippy -D warnings, tests, loom, rustdoc -D warnings
//! cargo xtask test                       the test suite (what CI runs)
//! cargo xtask proptest --cases N [--seed S]
//!                                        the property tests (`prop_*`) with N cases, optimised build
//! cargo xtask loom                       the loom models of the flush services (`--cfg loom`)
//! ```
//!
//! Dependencies: none beyond std, so it builds in seconds.

use std::env;
use std::process::{exit, Command};
use std::time::Instant;

const USAGE: &str = "usage: cargo xtask <ci | test | proptest --cases N [--seed S] | loom>";

fn main() {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("test") => test(),
        Some("proptest") => proptest(&args[1..]),
        Some("loom") => loom(),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(())
        }
        _ => Err(USAGE.to_string()),
    };
    if let Err(message) = result {
        eprintln!("xtask: {message}");
        exit(1);
    }
}

/// Runs `cargo <args>` with extra environment variables, failing on a non-zero exit.
fn cargo(args: &[&str], envs: &[(&str, &str)]) -> Result<(), String> {
    let started = Instant::now();
    eprintln!("xtask: cargo {}", args.join(" "));
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(args)
        .envs(envs.iter().copied())
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    eprintln!("xtask: cargo {} took {:.1?}", args[0], started.elapsed());
    if status.success() {
        Ok(())
    } else {
        Err(format!("`cargo {}` failed ({status})", args.join(" ")))
    }
}

fn ci() -> Result<(), String> {
    cargo(&["fmt", "--all", "--check"], &[])?;
    cargo(&["clippy", "--workspace", "--all-targets", "--all-features", "--", "-D", "warnings"], &[])?;
    test()?;
    loom()?;
    cargo(&["doc", "--workspace", "--no-deps"], &[("RUSTDOCFLAGS", "-D warnings")])
}

fn test() -> Result<(), String> {
    cargo(&["test", "--workspace", "--all-features"], &[])
}

fn proptest(args: &[String]) -> Result<(), String> {
    let mut cases = None;
    let mut seed = None;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--cases" => cases = iter.next().cloned(),
            "--seed" => seed = iter.next().cloned(),
            other => return Err(format!("unknown proptest option {other}\n{USAGE}")),
        }
    }
    let cases = cases.ok_or("proptest needs --cases N")?;
    cases.parse::<u32>().map_err(|_| format!("--cases takes a number, not {cases}"))?;
    let mut envs = vec![("PROPTEST_CASES", cases.as_str())];
    if let Some(seed) = &seed {
        seed.parse::<u64>().map_err(|_| format!("--seed takes a number, not {seed}"))?;
        envs.push(("PROPTEST_RNG_SEED", seed.as_str()));
    }
    cargo(&["test", "--workspace", "--release", "--", "prop_"], &envs)
}

fn loom() -> Result<(), String> {
    cargo(
        &["test", "--release", "-p", "flush-service", "--lib", "--", "loom_"],
        &[("RUSTFLAGS", "--cfg loom"), ("CARGO_TARGET_DIR", "target/loom")],
    )
}
