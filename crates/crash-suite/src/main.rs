//! The crash-consistency and fault suite: `cargo xtask crash [--soak]`.
//!
//! Layers (docs/durability.md): 1 corruption matrix, 2 simulated power loss, 2c
//! simulated power loss under the replicated log's store, 2d segment directories
//! that go missing, 2e truncations racing flushes and rounds, 2b crashes over
//! several generations (recover, append, crash again), 3 real SIGKILLs, 4 sync
//! failure, 5 disk full, the guard and the cleaning service; 2f the message store
//! (consume queues, offsets, consumers) under simulated power loss. Layers 6 (fuzzing)
//! and 7 (loom models) are run by `cargo xtask crash` around this binary. Each
//! layer prints one line with its figure; the exit code is non-zero if any fails.
//! `--planted` runs the planted bugs instead (a `--cfg planted_bugs` build only).

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

mod common;
mod corruption;
mod disk_full;
mod generations;
mod kill;
mod message_layer;
#[cfg(planted_bugs)]
mod planted;
mod power_loss;
mod races;
mod raft_power_loss;
mod segment_dirs;
mod sync_failure;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("child") => {
            let dir = PathBuf::from(arg(&args, "--dir").expect("--dir"));
            let start = arg(&args, "--start").and_then(|s| s.parse().ok()).unwrap_or(0);
            let write_without_mmap = arg(&args, "--write-without-mmap").as_deref() != Some("0");
            return match kill::child(&dir, start, write_without_mmap) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("child: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Some("child-disk-full") => {
            let dir = PathBuf::from(arg(&args, "--dir").expect("--dir"));
            return ExitCode::from(disk_full::child(&dir) as u8);
        }
        _ => {}
    }
    if args.iter().any(|a| a == "--planted") {
        // The planted bugs: a suite that never catches them proves nothing. They
        // exist only in a build with `--cfg planted_bugs` (`cargo xtask crash`
        // makes one in its own target directory), never in what users get.
        #[cfg(planted_bugs)]
        return planted::run(arg(&args, "--seed").and_then(|s| s.parse().ok()).unwrap_or(0x5EED));
        #[cfg(not(planted_bugs))]
        {
            eprintln!("--planted needs a build with RUSTFLAGS=\"--cfg planted_bugs\" (cargo xtask crash makes one)");
            return ExitCode::from(2);
        }
    }
    let soak = args.iter().any(|a| a == "--soak");
    // `--only LAYER` runs one layer (for working on it); CI runs them all.
    let only = arg(&args, "--only");
    let layer_wanted = |name: &str| only.as_deref().is_none_or(|o| o == name);
    let seed: u64 = arg(&args, "--seed").and_then(|s| s.parse().ok()).unwrap_or(0x5EED);
    let scale = if soak { 20 } else { 1 };
    let mut failed = false;
    let mut report = |ok: bool, line: String| {
        println!("{line}");
        failed |= !ok;
    };

    if layer_wanted("corruption") {
        // 1. Corruption matrix.
        let t0 = Instant::now();
        let mut c = corruption::Tally::default();
        for s in 0..scale as u64 {
            let t = corruption::run(seed + s, soak);
            c.cases += t.cases;
            c.panics += t.panics;
            c.garbage += t.garbage;
            c.silent_below_checkpoint += t.silent_below_checkpoint;
            c.unclear_errors += t.unclear_errors;
            if c.kinds.is_empty() {
                c.kinds = t.kinds;
            }
        }
        let kinds: Vec<String> = c.kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
        report(
            c.panics + c.garbage + c.silent_below_checkpoint + c.unclear_errors == 0,
            format!(
                "corruption: {} cases ({}), {} panics, {} garbage records, {} silent losses below the checkpoint, {} unclear errors ({:.1?})",
                c.cases,
                kinds.join(", "),
                c.panics,
                c.garbage,
                c.silent_below_checkpoint,
                c.unclear_errors,
                t0.elapsed()
            ),
        );
    }

    if layer_wanted("power-loss") {
        // 2. Simulated power loss, then the planted bugs.
        let t0 = Instant::now();
        let mut p = power_loss::Tally::default();
        // Enough runs for the crash-state floor, however quickly flushes happen.
        let target_states = 110_000 * scale as u64;
        let mut seeds = 0u64;
        while (seeds < 24 * scale as u64 || p.states < target_states) && seeds < 2000 * scale as u64 {
            p.add(power_loss::run_seed(seed + seeds, 48, seeds % 3 == 2, false));
            seeds += 1;
        }
        report(
            p.violations() == 0 && p.states >= 100_000 * scale as u64,
            format!(
                "power-loss (pwrite and mmap runs alternate; every fourth over two segment directories): {} crash states over {seeds} runs, {} acked records, {} acked lost, {} garbage, {} failed recoveries ({:.1?})",
                p.states,
                p.acked,
                p.lost,
                p.garbage,
                p.open_errors,
                t0.elapsed()
            ),
        );
    }

    if layer_wanted("raft-power-loss") {
        // 2c. Simulated power loss under the replicated log's store.
        let t0 = Instant::now();
        let mut r = raft_power_loss::Tally::default();
        let runs = 4 * scale as u64;
        for s in 0..runs {
            r.add(raft_power_loss::run_seed(seed + 7000 + s, 2, false));
        }
        report(
            r.violations() == 0 && r.states >= 10_000 * scale as u64 && r.rewritten > 0,
            format!(
                "raft-power-loss (commitlog-raft: two groups on one log, entries, indexes, vote, purges, truncations, rewrites of the lagging group on one simulated disk): {} crash states over {runs} runs, {} entries acked, {} rewritten, {} acked lost, {} garbage, {} failed opens ({:.1?})",
                r.states,
                r.acked,
                r.rewritten,
                r.lost,
                r.garbage,
                r.open_errors,
                t0.elapsed()
            ),
        );
    }

    if layer_wanted("segment-dirs") {
        // 2d. Segment directories that go missing, under power loss.
        let t0 = Instant::now();
        let mut d = segment_dirs::Tally::default();
        let runs = 12 * scale as u64;
        for s in 0..runs {
            d.add(segment_dirs::run_seed(seed + 13_000 + s, 3, false));
        }
        report(
            d.violations() == 0 && d.refused > 0 && d.deletions > 0 && d.states >= 2000 * scale as u64,
            format!(
                "segment-dirs (a retired disk, front deletions, one directory unmounted): {} crash states over {runs} runs, {} acked, {} segments deleted from the front; unmounted: {} refused, {} opened whole, {} opened short; {} complete stores refused, {} acked lost, {} garbage ({:.1?})",
                d.states,
                d.acked,
                d.deletions,
                d.refused,
                d.whole_without,
                d.silent_losses,
                d.false_refusals,
                d.lost,
                d.garbage,
                t0.elapsed()
            ),
        );
    }

    if layer_wanted("message-store") {
        // 2f. The message store under simulated power loss.
        let t0 = Instant::now();
        let mut m = message_layer::Tally::default();
        let runs = 24 * scale as u64;
        for s in 0..runs {
            m.add(message_layer::run_seed(seed + 17_000 + s, 4, false));
        }
        report(
            m.violations() == 0 && m.states >= 5_000 * scale as u64,
            format!(
                "message-store (puts on shared queues, a consumer committing offsets; one run in four async, every other with two consume queues open at most): {} crash states over {runs} runs, {} acked, {} consumed, {} acked or consumed lost, {} garbage, {} committed offsets lost, {} keys not found, {} offsets reused, {} failed opens, {} failed reads ({:.1?})",
                m.states,
                m.acked,
                m.consumed,
                m.lost,
                m.garbage,
                m.offsets_lost,
                m.keys_lost,
                m.reused,
                m.open_errors,
                m.read_errors,
                t0.elapsed()
            ),
        );
    }

    if layer_wanted("races") {
        // 2e. Truncations racing a flush and a group-commit round.
        let t0 = Instant::now();
        let r = races::run(seed, 50 * scale as u64);
        report(
            r.violations() == 0 && r.cases > 0,
            format!(
                "races (truncate_from inside flush_all's window and inside a group-commit round, on the real queue): {} cases, {} checkpoints above the data, {} unopenable stores, {} unsynced bytes acknowledged, {} dead rounds ({:.1?})",
                r.cases,
                r.checkpoint_above,
                r.unopenable,
                r.acked_unsynced,
                r.dead_rounds,
                t0.elapsed()
            ),
        );
    }

    if layer_wanted("generations") {
        // 2b. Several generations: what a recovery cut never comes back.
        let t0 = Instant::now();
        let mut g = generations::Tally::default();
        let gen_seeds = 100 * scale as u64;
        for s in 0..gen_seeds {
            g.add(generations::run_seed(seed + 5000 + s, 50));
        }
        report(
            g.violations() == 0 && g.states >= 5000 * scale as u64 && g.cuts > 0 && g.second_crashes > 0,
            format!(
                "generations (write path switches each generation): {} states crash -> recover -> append -> shutdown or crash ({} crashed again) -> recover, {} recoveries cut bytes, {} acked, {} resurrected, {} out of order, {} acked lost, {} garbage, {} failed opens ({:.1?})",
                g.states,
                g.second_crashes,
                g.cuts,
                g.acked,
                g.resurrected,
                g.misordered,
                g.lost,
                g.garbage,
                g.open_errors,
                t0.elapsed()
            ),
        );
    }

    if layer_wanted("kill") {
        // 3. Real SIGKILLs.
        let t0 = Instant::now();
        let k = kill::run(seed, 200 * scale);
        report(
            k.lost + k.garbage == 0 && k.acked > 0,
            format!(
                "kill (write path switches each restart): {} SIGKILLs, {} acked records, {} acked lost, {} garbage ({:.1?})",
                k.kills,
                k.acked,
                k.lost,
                k.garbage,
                t0.elapsed()
            ),
        );
    }

    if layer_wanted("sync-failure") {
        // 4. Sync failure.
        let t0 = Instant::now();
        let f = sync_failure::run(seed, 50 * scale);
        report(
            f.acked_after + f.lost == 0 && f.refused_clearly == f.failures_injected,
            format!(
                "sync-failure (pwrite and mmap alternate): {} injected sync errors, {} acked before them, {} acked after, {} lost after restart, {}/{} refused further writes clearly ({:.1?})",
                f.failures_injected,
                f.acked_before,
                f.acked_after,
                f.lost,
                f.refused_clearly,
                f.failures_injected,
                t0.elapsed()
            ),
        );
    }

    // 5. Disk full; 5b. the disk-space guard and the cleaning service, each on a
    // small real file system.
    type DiskLayer = (&'static str, &'static str, fn() -> disk_full::Outcome);
    let disk_layers: [DiskLayer; 4] = [
        ("disk-full", "disk-full: an error, not SIGBUS: ", disk_full::run),
        ("disk-guard", "disk-guard: ", disk_full::run_guard),
        ("disk-guard", "disk-fast-fill: ", disk_full::run_fast_fill),
        ("disk-guard", "disk-clean: ", disk_full::run_clean),
    ];
    for (layer, passed, run) in disk_layers {
        if !layer_wanted(layer) {
            continue;
        }
        let name = passed.split(':').next().unwrap_or(layer);
        match run() {
            disk_full::Outcome::Passed { detail } => report(true, format!("{passed}{detail}")),
            disk_full::Outcome::Failed { detail } => report(false, format!("{name}: FAILED: {detail}")),
            disk_full::Outcome::Skipped { reason } => report(true, format!("{name}: skipped: {reason}")),
        }
    }

    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
