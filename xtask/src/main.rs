//! `cargo xtask`: the one entry point for CI chores.
//!
//! ```text
//! cargo xtask ci                         Cargo.lock --locked, fmt --check, clippy -D warnings, tests, the CI-sized crash suite
//!                                        (loom included), the raft kill test, the release check (no test
//!                                        machinery in what users get), rustdoc -D warnings; stable Rust only
//! cargo xtask release-check              no simulation, fail point or planted bug in the release tool
//! cargo xtask test                       the test suite (what CI runs); a test running over 10 minutes
//!                                        (XTASK_TEST_HANG_SECS) is a hang: the run is killed, the test named
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
//!
//! Each subcommand is a file of `cmd/`; `process.rs` runs cargo, rustup and the
//! project's programs for them.

#![forbid(unsafe_code)]

mod cmd;
mod process;
mod watch;

use std::env;
use std::process::exit;

use cmd::{
    bench_compare, ci, crash, fuzz, loom, miri, msrv, proptest, raft_bench, raft_kill, release_check, store_examples,
    test,
};

/// What `cargo xtask --help` prints, and every usage error after its message.
const USAGE: &str =
    "usage: cargo xtask <ci | release-check | test | proptest --cases N [--seed S] | loom | miri | crash [--soak] [--layer L [--seed S]] | fuzz --seconds N | msrv | bench-compare [--quick] [--baseline FILE] [--cpu-load N] | raft-kill [--kills N] [--groups G] | raft-bench [--seconds S] | scale [--queues N] | index-lookup [--keys N] | latency [--rate R]>";

fn main() {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci::run(),
        Some("release-check") => release_check::run(),
        Some("test") => test::run(),
        Some("proptest") => proptest::run(&args[1..]),
        Some("loom") => loom::run().map(|passed| println!("loom: {passed} models passed")),
        Some("crash") => crash::parse_args(&args[1..]).and_then(|(soak, layer)| crash::run(soak, layer)),
        Some("fuzz") => fuzz::parse_args(&args[1..]).and_then(fuzz::run),
        Some("miri") => miri::run(),
        Some("msrv") => msrv::run(),
        Some("bench-compare") => bench_compare::run(&args[1..]),
        Some("raft-kill") => {
            raft_kill::parse_args(&args[1..]).and_then(|(kills, groups)| raft_kill::run(kills, groups))
        }
        Some("raft-bench") => number_arg(&args[1..], "--seconds", 5).and_then(raft_bench::run),
        Some("scale") => number_arg(&args[1..], "--queues", 50_000).and_then(store_examples::scale),
        Some("index-lookup") => number_arg(&args[1..], "--keys", 10_000_000).and_then(store_examples::index_lookup),
        Some("latency") => number_arg(&args[1..], "--rate", 100_000).and_then(store_examples::latency),
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
