//! `cargo xtask crash [--soak] [--layer L [--seed S]]`: the crash-consistency
//! suite, its planted bugs and loom.

use std::env;

use crate::cmd::loom;
use crate::process::cargo;

/// One layer of the crash suite, and the one seed of it to run (a failure's).
pub type CrashLayer = (String, Option<String>);

/// The suite's layers 1-5 (the crash-suite binary, built as users get the crates),
/// the planted bugs (the same binary built with `--cfg planted_bugs` in its own
/// target directory, so no other build contains them), then 7 (loom), each
/// printing one line with its figure. Layer 6, fuzzing, needs nightly and runs on
/// its own (`cargo xtask fuzz`), so this stays on stable Rust.
pub fn run(soak: bool, layer: Option<CrashLayer>) -> Result<(), String> {
    let mut args = vec!["run", "--release", "--quiet", "-p", "crash-suite", "--"];
    if soak {
        args.push("--soak");
    }
    if let Some((layer, seed)) = &layer {
        // One layer, or one run of it: the suite alone, no planted bugs, no loom.
        args.extend(["--layer", layer]);
        if let Some(seed) = seed {
            args.extend(["--seed", seed]);
        }
        return cargo(&args, &[]);
    }
    cargo(&args, &[])?;
    let rustflags = format!("{} --cfg planted_bugs", env::var("RUSTFLAGS").unwrap_or_default());
    cargo(
        &["run", "--release", "--quiet", "-p", "crash-suite", "--", "--planted"],
        &[("RUSTFLAGS", rustflags.trim()), ("CARGO_TARGET_DIR", "target/planted")],
    )?;
    let passed = loom::run()?;
    println!(
        "concurrency: {passed} loom models passed (flush-service: no lost wake-up, a napping service misses no work; no ack above the flushed offset, flushed offset monotonic, every waiter answered, also beside waiters that run rounds themselves; mapped-file: readers see only whole appends and commits, no byte changes under a view)"
    );
    Ok(())
}

/// `crash`'s options: `--soak`, and `--layer L [--seed S]` (one layer, or the
/// one run of it a failure named).
pub fn parse_args(args: &[String]) -> Result<(bool, Option<CrashLayer>), String> {
    let value = |name: &str| args.iter().position(|a| a == name).map(|i| args.get(i + 1).cloned());
    let layer = match value("--layer") {
        Some(Some(layer)) => Some(layer),
        Some(None) => {
            return Err("--layer needs a layer name (as the suite prints them: power-loss, message-store, ...)".into())
        }
        None => None,
    };
    let seed = match value("--seed") {
        Some(Some(seed)) if seed.parse::<u64>().is_ok() => Some(seed),
        Some(_) => return Err("--seed needs a number".into()),
        None => None,
    };
    if seed.is_some() && layer.is_none() {
        return Err("--seed reproduces one run of a layer: give --layer too".into());
    }
    Ok((args.iter().any(|a| a == "--soak"), layer.map(|l| (l, seed))))
}
