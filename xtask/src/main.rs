//! `cargo xtask`: the one entry point for CI chores.
//!
//! ```text
//! cargo xtask ci                         fmt --check, clippy -D warnings, tests, the CI-sized crash suite
//!                                        (loom included), the raft kill test, the release check (no test
//!                                        machinery in what users get), rustdoc -D warnings; stable Rust only
//! cargo xtask release-check              no simulation, fail point or planted bug in the release tool
//! cargo xtask test                       the test suite (what CI runs)
//! cargo xtask proptest --cases N [--seed S]
//!                                        the property tests (`prop_*`) with N cases, optimised build
//! cargo xtask loom                       the loom models: flush-service wake-ups and group commit,
//!                                        mapped-file's append/commit/read/reset protocol (`--cfg loom`)
//! cargo xtask miri                       the unit tests of transient-pool and mapped-file under Miri
//!                                        (heap-backed memory; nightly with the miri component)
//! cargo xtask crash [--soak]             the crash-consistency suite and loom (CI-sized, or hours with --soak)
//! cargo xtask crash --layer L [--seed S]  one layer of the suite (with a seed: the one run a failure named)
//! cargo xtask fuzz --seconds N           coverage-guided fuzzing of the recovery parser and the message store's
//!                                        own files, the seconds split between the targets (nightly and
//!                                        cargo-fuzz; not part of ci, its own CI job)
//! cargo xtask msrv                       cargo check of the workspace on the declared rust-version
//! cargo xtask bench-compare [--quick] [--baseline FILE] [--cpu-load N]
//!                                      this project and the peer crates side by side, 5 interleaved rounds; writes
//!                                      docs/benchmarks.md, .svg and .json; with a baseline document, the ratios to it;
//!                                      with N busy loops beside, docs/benchmarks-loaded.md (.svg, .json) instead
//! cargo xtask raft-kill [--kills N] [--groups G]
//!                                        a 3-node cluster of real processes (the raft-node example), G raft groups
//!                                        (8) on each node's one log: SIGKILL the node leading the most groups N
//!                                        times (20; the CI-sized run in ci), then count committed entries lost
//! cargo xtask raft-bench [--seconds S]   the storage API beside openraft-sledstore and -rocksstore (raft-compare/,
//!                                        needs libclang), then committed entries/s of that cluster with 1, 8 and 64
//!                                        raft groups: one commit log, a commit log per group, in memory; 3
//!                                        interleaved rounds each; writes its sections of docs/benchmarks.md
//! cargo xtask scale [--queues N]         the message store with N queues (50,000) on a real disk: throughput, memory,
//!                                        open files and mappings (docs/message-store.md)
//! cargo xtask index-lookup [--keys N]    query_by_key latency (p50/p99) over N keys (10,000,000) on a real disk
//! cargo xtask latency [--rate R]         message store: put-to-consumer lag under async flush at R msgs/s (100,000),
//!                                        ack and end-to-end latency under sync flush
//! ```
//!
//! Dependencies: none beyond std, so it builds in seconds.

#![forbid(unsafe_code)]

use std::env;
use std::path::Path;
use std::process::{exit, Command};
use std::time::Instant;

const USAGE: &str =
    "usage: cargo xtask <ci | release-check | test | proptest --cases N [--seed S] | loom | miri | crash [--soak] [--layer L [--seed S]] | fuzz --seconds N | msrv | bench-compare [--quick] [--baseline FILE] [--cpu-load N] | raft-kill [--kills N] [--groups G] | raft-bench [--seconds S] | scale [--queues N] | index-lookup [--keys N] | latency [--rate R]>";

fn main() {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("release-check") => release_check(),
        Some("test") => test(),
        Some("proptest") => proptest(&args[1..]),
        Some("loom") => loom().map(|passed| println!("loom: {passed} models passed")),
        Some("crash") => crash_args(&args[1..]).and_then(|(soak, layer)| crash(soak, layer)),
        Some("fuzz") => seconds_arg(&args[1..]).and_then(fuzz),
        Some("miri") => miri(),
        Some("msrv") => msrv(),
        Some("bench-compare") => bench_compare(&args[1..]),
        Some("raft-kill") => raft_kill_args(&args[1..]).and_then(|(kills, groups)| raft_kill(kills, groups)),
        Some("raft-bench") => number_arg(&args[1..], "--seconds", 5).and_then(raft_bench),
        Some("scale") => number_arg(&args[1..], "--queues", 50_000)
            .and_then(|n| message_store_example("scale", &["--queues", &n.to_string()])),
        Some("index-lookup") => number_arg(&args[1..], "--keys", 10_000_000)
            .and_then(|n| message_store_example("index_lookup", &["--keys", &n.to_string()])),
        Some("latency") => number_arg(&args[1..], "--rate", 100_000)
            .and_then(|n| message_store_example("latency", &["--rate", &n.to_string()])),
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
    run_cargo(args, envs, false).map(drop)
}

/// As [`cargo`], but captures standard output (and echoes it) for the caller to read.
fn cargo_output(args: &[&str], envs: &[(&str, &str)]) -> Result<String, String> {
    run_cargo(args, envs, true)
}

/// Runs cargo, timing it; with `capture`, standard output is collected (and
/// echoed) and returned, else it streams and the result is empty.
fn run_cargo(args: &[&str], envs: &[(&str, &str)], capture: bool) -> Result<String, String> {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run_timed(Command::new(cargo), "cargo", args, envs, capture)
}

/// Runs `command` with `args` appended (shown as `label args...`), timing it;
/// fails on a non-zero exit. `capture` as for [`run_cargo`].
fn run_timed(
    mut command: Command,
    label: &str,
    args: &[&str],
    envs: &[(&str, &str)],
    capture: bool,
) -> Result<String, String> {
    let started = Instant::now();
    eprintln!("xtask: {label} {}", args.join(" "));
    command.args(args).envs(envs.iter().copied());
    let (status, stdout) = if capture {
        let out =
            command.stderr(std::process::Stdio::inherit()).output().map_err(|e| format!("cannot run {label}: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        print!("{stdout}");
        (out.status, stdout)
    } else {
        (command.status().map_err(|e| format!("cannot run {label}: {e}"))?, String::new())
    };
    eprintln!("xtask: {label} {} took {:.1?}", args[0], started.elapsed());
    if status.success() {
        Ok(stdout)
    } else {
        Err(format!("`{label} {}` failed ({status})", args.join(" ")))
    }
}

fn ci() -> Result<(), String> {
    cargo(&["fmt", "--all", "--check"], &[])?;
    cargo(&["clippy", "--workspace", "--all-targets", "--all-features", "--", "-D", "warnings"], &[])?;
    test()?;
    crash(false, None)?;
    raft_kill(20, 8)?;
    release_check()?;
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

/// What users get contains no test machinery: the release build of the tool
/// (and so of every library under it) resolves no simulation or fail-point
/// feature (`cargo tree -e features`), and its binary holds no symbol of the
/// simulation, the fail points or the planted bugs.
fn release_check() -> Result<(), String> {
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

/// The tests on what users get (default features, no planted bugs), then the one
/// optional feature's own tests.
fn test() -> Result<(), String> {
    cargo(&["test", "--workspace"], &[])?;
    // The log's integration tests once more on the other write path: the default
    // writes with pwrite (`write_without_mmap`), this pass through the mapping.
    // Named one by one within the workspace, so the features are the workspace's
    // and nothing is compiled again (`-p commitlog` resolves others: ~75 s more).
    let targets = commitlog_test_targets()?;
    let mut args = vec!["test", "--workspace"];
    for target in &targets {
        args.extend(["--test", target.as_str()]);
    }
    cargo(&args, &[("COMMITLOG_TEST_WRITE_WITHOUT_MMAP", "0")])?;
    // The same way for the one optional feature: the workspace build plus serde.
    cargo(&["test", "--workspace", "--features", "commitlog/serde", "--test", "config_toml"], &[])
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

/// Runs the loom models; returns how many passed, as the test runner counted them.
fn loom() -> Result<u64, String> {
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

/// Sum of `N passed` over the `test result:` lines of a cargo test run.
fn passed_count(output: &str) -> Option<u64> {
    let counts: Vec<u64> = output
        .lines()
        .filter_map(|l| l.strip_prefix("test result: ok. "))
        .filter_map(|rest| rest.split(' ').next()?.parse().ok())
        .collect();
    (!counts.is_empty()).then(|| counts.iter().sum())
}

/// The suite's layers 1-5 (the crash-suite binary, built as users get the crates),
/// the planted bugs (the same binary built with `--cfg planted_bugs` in its own
/// target directory, so no other build contains them), then 7 (loom), each
/// printing one line with its figure. Layer 6, fuzzing, needs nightly and runs on
/// its own (`cargo xtask fuzz`), so this stays on stable Rust.
/// One layer of the crash suite, and the one seed of it to run (a failure's).
type CrashLayer = (String, Option<String>);

fn crash(soak: bool, layer: Option<CrashLayer>) -> Result<(), String> {
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
    let passed = loom()?;
    println!(
        "concurrency: {passed} loom models passed (flush-service: no lost wake-up; no ack above the flushed offset, flushed offset monotonic, every waiter answered; mapped-file: readers see only whole appends and commits, no byte changes under a view)"
    );
    Ok(())
}

/// `crash`'s options: `--soak`, and `--layer L [--seed S]` (one layer, or the
/// one run of it a failure named).
fn crash_args(args: &[String]) -> Result<(bool, Option<CrashLayer>), String> {
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

/// Runs `rustup run <toolchain> cargo <args>`, failing on a non-zero exit; with
/// `capture`, standard output is echoed and returned.
fn rustup_cargo(toolchain: &str, args: &[&str], envs: &[(&str, &str)], capture: bool) -> Result<String, String> {
    let mut command = Command::new("rustup");
    command.args(["run", toolchain, "cargo"]);
    run_timed(command, &format!("cargo +{toolchain}"), args, envs, capture)
}

/// True when `rustup <args>` runs and exits with success (a probe: output dropped).
fn rustup_succeeds(args: &[&str]) -> bool {
    Command::new("rustup").args(args).output().is_ok_and(|o| o.status.success())
}

/// Runs `rustup <args>` to install something, streaming its output; `failure` is
/// the error when it does not succeed.
fn rustup_install(args: &[&str], failure: &str) -> Result<(), String> {
    eprintln!("xtask: rustup {}", args.join(" "));
    let status = Command::new("rustup").args(args).status().map_err(|e| format!("cannot run rustup: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(failure.to_string())
    }
}

/// The unsafe code's own tests under Miri: the write buffers of transient-pool and
/// the segment memory of mapped-file over heap memory (`SimStorage`). Tests that
/// need real files, mappings or `mlock` are ignored there (Miri cannot run those
/// system calls); the loom models cover the same protocol's interleavings.
fn miri() -> Result<(), String> {
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

/// The workspace checked on the `rust-version` the manifests declare, so the
/// declaration stays true. Installs that toolchain with rustup if it is missing.
fn msrv() -> Result<(), String> {
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

fn seconds_arg(args: &[String]) -> Result<u64, String> {
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
fn fuzz(seconds: u64) -> Result<(), String> {
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

/// Builds and runs the comparison runner (its own manifest, so the peers never
/// enter the main build), writing docs/benchmarks.md, its plot docs/benchmarks.svg
/// and the results document docs/benchmarks.json. `--baseline FILE` (a results
/// document of another run or machine, or of `commitlog bench --json`) adds the
/// ratios to it to the report and its bars to the plot.
fn bench_compare(args: &[String]) -> Result<(), String> {
    let cwd = std::env::current_dir().map_err(|e| e.to_string())?;
    let (mut quick, mut baseline, mut load) = (false, None, None);
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--cpu-load" => {
                let loops = rest.next().ok_or("--cpu-load needs a number of busy loops")?;
                loops.parse::<usize>().map_err(|_| format!("--cpu-load {loops}: not a number"))?;
                load = Some(loops.clone());
            }
            "--baseline" => {
                let file = rest.next().ok_or("--baseline needs a file")?;
                // Absolute, whichever directory the runner works in.
                baseline = Some(cwd.join(file).to_str().ok_or("non-UTF-8 path")?.to_string());
            }
            other => return Err(format!("bench-compare: unknown option {other}\n{USAGE}")),
        }
    }
    // A run with busy loops beside writes its own report: the quiet one stays.
    let out = cwd.join(if load.is_some() { "docs/benchmarks-loaded.md" } else { "docs/benchmarks.md" });
    let out = out.to_str().ok_or("non-UTF-8 path")?.to_string();
    let mut run = vec!["run", "--release", "--manifest-path", "bench-compare/Cargo.toml", "--", "--out", &out];
    if quick {
        run.push("--quick");
    }
    if let Some(loops) = &load {
        run.extend(["--cpu-load", loops]);
    }
    if let Some(file) = &baseline {
        run.extend(["--baseline", file]);
    }
    cargo(&run, &[])
}

/// `--name N` among `args`, or `default`.
fn number_arg(args: &[String], name: &str, default: u64) -> Result<u64, String> {
    match args.iter().position(|a| a == name) {
        None if args.is_empty() => Ok(default),
        None => Err(format!("unknown option {}\n{USAGE}", args[0])),
        Some(i) => {
            let value = args.get(i + 1).ok_or(format!("{name} needs a number"))?;
            value.parse().map_err(|_| format!("{name} takes a number, not {value}"))
        }
    }
}

/// `[--kills N] [--groups G]`, in any order.
fn raft_kill_args(args: &[String]) -> Result<(u64, u64), String> {
    let (mut kills, mut groups) = (20, 8);
    let mut rest = args.iter();
    while let Some(name) = rest.next() {
        let slot = match name.as_str() {
            "--kills" => &mut kills,
            "--groups" => &mut groups,
            other => return Err(format!("unknown option {other}\n{USAGE}")),
        };
        let value = rest.next().ok_or(format!("{name} needs a number"))?;
        *slot = value.parse().map_err(|_| format!("{name} takes a number, not {value}"))?;
    }
    Ok((kills, groups))
}

/// The leader-kill test on real processes, `groups` raft groups on each node's
/// one log, the node leading the most groups killed each time; fails unless no
/// committed entry was lost and every group went on committing. The example is
/// built as `cargo test --workspace` builds it (the test profile, the
/// workspace's features), so in `ci` nothing is compiled again, and the test
/// profile's optimisation keeps the cluster quick.
fn raft_kill(kills: u64, groups: u64) -> Result<(), String> {
    cargo(&["build", "-q", "--workspace", "--profile", "test", "--examples"], &[])?;
    let target = env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let exe = Path::new(&target).join("debug/examples/raft-node");
    let (kills, groups) = (kills.to_string(), groups.to_string());
    let args = ["kill-test", "--kills", &kills, "--groups", &groups];
    let out = run_timed(Command::new(&exe), "raft-node", &args, &[], true)?;
    let line = out.lines().rev().find(|l| l.contains("leader kills")).ok_or("raft-kill printed no result line")?;
    if line.contains(", 0 committed entries lost") && line.contains("every group committed after the last kill: true") {
        Ok(())
    } else {
        Err(format!("raft-kill: {line}"))
    }
}

/// Runs one of the message store's measuring examples (release build, real disk).
fn message_store_example(name: &str, args: &[&str]) -> Result<(), String> {
    let mut all = vec!["run", "--release", "--quiet", "-p", "message-store", "--example", name, "--"];
    all.extend_from_slice(args);
    cargo(&all, &[])
}

/// Committed entries/s of the 3-node cluster for 1, 8 and 64 raft groups:
/// every group on one commit log, a commit log per group, and in memory; 3
/// rounds with the order rotating. The medians and their ratios go into
/// docs/benchmarks.md between the markers that bench-compare keeps.
fn raft_bench(seconds: u64) -> Result<(), String> {
    const GROUPS: [u64; 3] = [1, 8, 64];
    const STORES: [&str; 3] = ["commitlog", "separate", "memory"];
    raft_api(seconds.min(3))?;
    cargo(&["build", "-q", "--release", "-p", "commitlog-raft", "--example", "raft-node"], &[])?;
    let exe = Path::new("target/release/examples/raft-node");
    let secs = seconds.to_string();
    /// A run's committed entries/s, the group-0 leader's and the busiest node's
    /// log syncs per committed entry, and how many nodes led a group.
    type Run = (f64, f64, f64, f64);
    let mut rates: std::collections::BTreeMap<(u64, &str), Vec<Run>> = Default::default();
    for round in 0..3 {
        for groups in GROUPS {
            for k in 0..STORES.len() {
                let store = STORES[(k + round) % STORES.len()];
                // 32 clients for one group, 4 per group beyond (every group busy).
                let clients = (4 * groups).max(32).to_string();
                let groups_arg = groups.to_string();
                let args =
                    ["bench", "--store", store, "--groups", &groups_arg, "--seconds", &secs, "--clients", &clients];
                let out = run_timed(Command::new(exe), "raft-node", &args, &[], true)?;
                let run = (
                    json_number(&out, "committed_per_sec")?,
                    json_number(&out, "group0_leader_syncs_per_entry")?,
                    json_number(&out, "max_node_syncs_per_entry")?,
                    json_number(&out, "leading_nodes")?,
                );
                rates.entry((groups, store)).or_default().push(run);
            }
        }
    }
    let mut rows = String::new();
    for groups in GROUPS {
        let run = |store: &str| median_by(&rates[&(groups, store)], |r| r.0);
        let m = |store: &str| run(store).0;
        let runs =
            |store: &str| rates[&(groups, store)].iter().map(|r| format!("{:.0}", r.0)).collect::<Vec<_>>().join(", ");
        let syncs = |store: &str| format!("{:.2} / {:.2}", run(store).1, run(store).2);
        let leading = |store: &str| format!("{:.0}", run(store).3);
        rows.push_str(&format!(
            "| {groups} | {:.0} | {:.0} | {:.0} | {:.2}x | {:.2}x | {} | {} | {} / {} | {} / {} / {} |\n",
            m("commitlog"),
            m("separate"),
            m("memory"),
            m("commitlog") / m("separate"),
            m("commitlog") / m("memory"),
            syncs("commitlog"),
            syncs("separate"),
            leading("commitlog"),
            leading("separate"),
            runs("commitlog"),
            runs("separate"),
            runs("memory"),
        ));
    }
    let one = median_by(&rates[&(1, "commitlog")], |r| r.0).0;
    let eight = median_by(&rates[&(8, "commitlog")], |r| r.0).0;
    let section = format!(
        "<!-- raft-bench:start -->\n## Replicated log: a 3-node openraft cluster on loopback\n\n\
         `cargo xtask raft-bench` ({seconds} s per run; G raft groups per node, keys sharded over them; 32 clients for \
         one group, 4 per group beyond, each writing 100-byte values to its group's leader, a write counted once \
         committed and applied; 3 rounds, the order rotating; the `raft-node` example's processes, JSON over \
         TCP, snapshots off). *shared*: every group of a node on one commit log (`RaftLogEngine`); *separate*: \
         a commit log per group (its own syncs); *memory*: an in-memory log store reporting every append durable \
         at once (the ceiling). *syncs/entry*: log syncs (group-commit flushes that made bytes durable, \
         from each node's `Syncs` RPC before and after the run) per committed entry, of the node leading group 0 \
         / of the busiest node, in the median run; *leaders on*: how many nodes led a group in that run (one: \
         group 0's leader's figure is every group's leader's).\n\n\
         | groups | shared (entries/s) | separate | memory | shared / separate | shared / memory | syncs/entry shared | syncs/entry separate | leaders on (shared / separate) | runs (shared / separate / memory) |\n\
         |---|---|---|---|---|---|---|---|---|---|\n{rows}\n\
         8 groups on one log: **{:.2}x** the 1-group figure. See docs/replication.md for where the time goes.\n\
         <!-- raft-bench:end -->\n",
        eight / one
    );
    print!("{section}");
    replace_section("docs/benchmarks.md", "raft-bench", &section)
}

/// The number after `"name": ` in a run's one-line JSON output.
fn json_number(out: &str, name: &str) -> Result<f64, String> {
    out.split(&format!("\"{name}\": "))
        .nth(1)
        .and_then(|r| r.split([',', '}']).next())
        .and_then(|r| r.trim().parse::<f64>().ok())
        .ok_or(format!("no {name} in {out:?}"))
}

/// The run whose `key` is the median of `runs` (the upper one of an even count).
fn median_by<T: Copy>(runs: &[T], key: impl Fn(&T) -> f64) -> T {
    let mut runs = runs.to_vec();
    runs.sort_by(|a, b| key(a).total_cmp(&key(b)));
    runs[runs.len() / 2]
}

/// Writes `section` between `<!-- {marker}:start -->` and `<!-- {marker}:end -->`
/// of the document at `path` (appended if it has no such markers).
fn replace_section(path: &str, marker: &str, section: &str) -> Result<(), String> {
    let (start, end) = (format!("<!-- {marker}:start -->"), format!("<!-- {marker}:end -->\n"));
    let old = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let new = match (old.find(&start), old.find(end.trim_end())) {
        (Some(a), Some(b)) => {
            let b = (b + end.len()).min(old.len());
            format!("{}{section}{}", &old[..a], &old[b..])
        }
        _ => format!("{old}\n{section}"),
    };
    std::fs::write(path, new).map_err(|e| format!("{path}: {e}"))
}

/// `commitlog-raft` at openraft's storage API (append a batch, await its
/// callback) beside openraft's own durable stores, sled and RocksDB, built in
/// `raft-compare/` (the v1 storage trait, without the workspace's
/// `storage-v2`; RocksDB needs libclang): batches of 1 and 64 entries, 3
/// rounds with the order rotating; the medians go into docs/benchmarks.md.
fn raft_api(seconds: u64) -> Result<(), String> {
    const STORES: [&str; 3] = ["commitlog", "sled", "rocks"];
    const BATCHES: [u64; 2] = [1, 64];
    cargo(&["build", "-q", "--release", "-p", "commitlog-raft", "--example", "storage_api"], &[])?;
    cargo(&["build", "-q", "--release", "--manifest-path", "raft-compare/Cargo.toml", "--features", "rocks"], &[])
        .map_err(|e| {
            format!("{e}: raft-compare builds RocksDB, which needs libclang (apt-get install libclang-dev)")
        })?;
    let ours = Path::new("target/release/examples/storage_api");
    let peers = Path::new("raft-compare/target/release/commitlog-raft-compare");
    let secs = seconds.to_string();
    /// A run's entries/s, p50 and p99 (µs).
    type Run = (f64, f64, f64);
    let mut runs: std::collections::BTreeMap<(u64, &str), Vec<Run>> = Default::default();
    for round in 0..3 {
        for batch in BATCHES {
            for k in 0..STORES.len() {
                let store = STORES[(k + round) % STORES.len()];
                let batch_arg = batch.to_string();
                let out = if store == "commitlog" {
                    let args = ["--batch", batch_arg.as_str(), "--seconds", &secs];
                    run_timed(Command::new(ours), "storage_api", &args, &[], true)?
                } else {
                    let args = ["--store", store, "--batch", batch_arg.as_str(), "--seconds", &secs];
                    run_timed(Command::new(peers), "raft-compare", &args, &[], true)?
                };
                let figures =
                    (json_number(&out, "entries_per_sec")?, json_number(&out, "p50_us")?, json_number(&out, "p99_us")?);
                runs.entry((batch, store)).or_default().push(figures);
            }
        }
    }
    let median = |v: &[Run]| median_by(v, |r| r.0);
    let mut rows = String::new();
    for batch in BATCHES {
        let ours = median(&runs[&(batch, "commitlog")]);
        // rocksstore does not sync its appends: the durable peer is sled.
        let best = median(&runs[&(batch, "sled")]).0;
        for store in STORES {
            let (rate, p50, p99) = median(&runs[&(batch, store)]);
            let all = runs[&(batch, store)].iter().map(|r| format!("{:.0}", r.0)).collect::<Vec<_>>().join(", ");
            let ratio = if store == "commitlog" {
                format!("**{:.2}x** sled", ours.0 / best)
            } else {
                format!("{:.2}x", ours.0 / rate)
            };
            rows.push_str(&format!("| {batch} | {store} | {rate:.0} | {p50:.0} | {p99:.0} | {ratio} | {all} |\n"));
        }
    }
    let section = format!(
        "<!-- raft-api:start -->\n## Replicated log: openraft's storage API\n\n\
         `cargo xtask raft-bench` (its first part; {seconds} s per run): append a batch of entries (a key and a \
         100-byte value each) and await it, as `RaftCore` does, one batch at a time: `commitlog-raft` \
         (`examples/storage_api.rs`: `append`, then its flush callback) against openraft's own stores \
         `openraft-sledstore` 0.9 and `openraft-rocksstore` 0.9 (`raft-compare/`: `append_to_log`, the v1 \
         trait). sled's `append_to_log` flushes its log (`flush_async`) before it returns; rocksstore's writes \
         the entries with RocksDB's default write options, which do not sync the write-ahead log: its figures \
         are of an append that a power cut can take back, so the ratio that counts is to sled. 3 rounds, the \
         order rotating; medians.\n\n\
         | batch | store | entries/s | p50 (µs) | p99 (µs) | commitlog / this | runs (entries/s) |\n\
         |---|---|---|---|---|---|---|\n{rows}\
         <!-- raft-api:end -->\n"
    );
    print!("{section}");
    replace_section("docs/benchmarks.md", "raft-api", &section)
}
