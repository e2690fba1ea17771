//! The crash-consistency and fault suite: `cargo xtask crash [--soak]`.
//!
//! Layers (docs/durability.md): 1 corruption matrix, 2 simulated power loss, 2c
//! simulated power loss under the replicated log's store, 2d segment directories
//! that go missing, 2e truncations racing flushes and rounds, 2b crashes over
//! several generations (recover, append, crash again), 3 real SIGKILLs, 4 sync
//! failure, 5 disk full, the guard and the cleaning service; 2f the message store
//! (queue index, offsets, consumers) under simulated power loss; 2g its
//! derived data damaged at random; 2h simulated power loss while the next
//! segment is prepared in the background; 2i the whole message store's life
//! against its model (topics, offsets, deletions, power cuts). Layers 6 (fuzzing)
//! and 7 (loom models) are run by `cargo xtask crash` around this binary. Each
//! layer prints one line with its figure; the exit code is non-zero if any fails.
//! A run that does not end within `--run-limit` seconds (600, times 20 with
//! `--soak`) is taken for a hang: the watchdog names its layer and seed and
//! the suite fails at once.
//! `--planted` runs the planted bugs instead (a `--cfg planted_bugs` build only).

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

mod common;
mod corruption;
mod damage_layer;
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
mod store_life;
mod sync_failure;
mod watchdog;

/// The longest a run of the CI-sized suite may take, in seconds (times 20
/// with `--soak`), before the watchdog takes it for a hang.
const RUN_LIMIT_SECS: u64 = 600;

/// The watchdog's name for the planted bugs' run.
#[cfg(planted_bugs)]
const PLANTED: &str = "planted-bugs";

/// The command that runs `layer` under `seed` again (with `--soak`, as the
/// suite ran; the planted bugs' run in its own build).
fn reproduce(layer: &str, seed: u64, soak: bool, planted: bool) -> String {
    if planted {
        return format!(
            "RUSTFLAGS=\"--cfg planted_bugs\" CARGO_TARGET_DIR=target/planted cargo run --release -p crash-suite -- --planted --seed {seed}"
        );
    }
    format!("cargo xtask crash{} --layer {layer} --seed {seed}", if soak { " --soak" } else { "" })
}

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
    let soak = args.iter().any(|a| a == "--soak");
    let planted = args.iter().any(|a| a == "--planted");
    let scale = if soak { 20 } else { 1 };
    // A run (one seed of a layer, or a layer run as one; the planted bugs'
    // run as a whole) that takes longer than this is taken for a hang: named
    // with its reproducing command, and the suite fails at once, having killed
    // its child processes and detached its mounts. The CI-sized suite's
    // longest run takes seconds. `--run-limit SECS` sets it (a slow disk's soak).
    let limit_secs = arg(&args, "--run-limit").and_then(|s| s.parse().ok()).unwrap_or(RUN_LIMIT_SECS * scale as u64);
    let limit = std::time::Duration::from_secs(limit_secs);
    let watchdog = watchdog::Watchdog::start(limit, move |mark, ran| {
        println!();
        println!(
            "crash suite FAILED: layer {}, seed {}: the run did not end within {ran:.0?} (a deadlock or a lost wake-up?)",
            mark.layer, mark.seed
        );
        println!("  reproduce: {}", reproduce(mark.layer, mark.seed, soak, planted));
        watchdog::clean_up();
        std::process::exit(1);
    });
    if args.iter().any(|a| a == "--planted") {
        // The planted bugs: a suite that never catches them proves nothing. They
        // exist only in a build with `--cfg planted_bugs` (`cargo xtask crash`
        // makes one in its own target directory), never in what users get.
        #[cfg(planted_bugs)]
        {
            let seed = arg(&args, "--seed").and_then(|s| s.parse().ok()).unwrap_or(0x5EED);
            watchdog.mark(PLANTED, seed);
            return planted::run(seed, arg(&args, "--layer").as_deref());
        }
        #[cfg(not(planted_bugs))]
        {
            eprintln!("--planted needs a build with RUSTFLAGS=\"--cfg planted_bugs\" (cargo xtask crash makes one)");
            return ExitCode::from(2);
        }
    }
    // `--layer LAYER` (or `--only`) runs one layer; with `--seed S` as well it
    // reproduces one run: the one seed a failure named, nothing else, judged
    // by its violations only. Without `--layer`, `--seed` is the base seed.
    let only = arg(&args, "--layer").or_else(|| arg(&args, "--only"));
    let seed: u64 = arg(&args, "--seed").and_then(|s| s.parse().ok()).unwrap_or(0x5EED);
    let repro = only.is_some() && arg(&args, "--seed").is_some();
    let mut run = Runner { only, repro, seed, soak, failed: false, failures: Vec::new(), watchdog };

    if run.wanted("corruption") {
        // 1. Corruption matrix.
        let t0 = Instant::now();
        let mut c = corruption::Tally::default();
        for s in run.seeds(0, scale as u64) {
            let t = corruption::run(s, soak);
            let bad = t.panics + t.garbage + t.silent_below_checkpoint + t.unclear_errors;
            run.check("corruption", s, bad as u64, || corruption_line(&t, t0));
            c.cases += t.cases;
            c.panics += t.panics;
            c.garbage += t.garbage;
            c.silent_below_checkpoint += t.silent_below_checkpoint;
            c.unclear_errors += t.unclear_errors;
            if c.kinds.is_empty() {
                c.kinds = t.kinds;
            }
        }
        let bad = c.panics + c.garbage + c.silent_below_checkpoint + c.unclear_errors;
        run.report(bad == 0, corruption_line(&c, t0));
    }

    if run.wanted("power-loss") {
        // 2. Simulated power loss.
        let t0 = Instant::now();
        let mut p = power_loss::Tally::default();
        // Enough runs for the crash-state floor, however quickly flushes happen.
        let target_states = 110_000 * scale as u64;
        let mut seeds = 0u64;
        for s in run.seeds(0, 2000 * scale as u64) {
            if !run.repro && seeds >= 24 * scale as u64 && p.states >= target_states {
                break;
            }
            // One run in three injects a sync failure.
            let t = power_loss::run_seed(s, 48, s % 3 == 1, false);
            run.check("power-loss", s, t.violations(), || power_loss_line(&t, 1, t0));
            p.add(t);
            seeds += 1;
        }
        run.report(
            p.violations() == 0 && (run.repro || p.states >= 100_000 * scale as u64),
            power_loss_line(&p, seeds, t0),
        );
    }

    if run.wanted("prepared-segments") {
        // 2h. Simulated power loss with the next segment prepared (blocks
        // written and synced) in the background.
        let t0 = Instant::now();
        let mut p = power_loss::Tally::default();
        let seeds = run.seeds(21_000, 6 * scale as u64);
        let runs = seeds.len() as u64;
        for s in seeds {
            let t = power_loss::run_prepared_seed(s, 16, false);
            run.check("prepared-segments", s, t.violations(), || prepared_line(&t, 1, t0));
            p.add(t);
        }
        run.report(
            p.violations() == 0 && (run.repro || (p.states >= 5_000 * scale as u64 && p.prepared > 0)),
            prepared_line(&p, runs, t0),
        );
    }

    if run.wanted("raft-power-loss") {
        // 2c. Simulated power loss under the replicated log's store.
        let t0 = Instant::now();
        let mut r = power_loss::Tally::default();
        let seeds = run.seeds(7000, 4 * scale as u64);
        let runs = seeds.len() as u64;
        for s in seeds {
            let t = raft_power_loss::run_seed(s, 6, false);
            run.check("raft-power-loss", s, t.violations(), || raft_line(&t, 1, t0));
            r.add(t);
        }
        run.report(
            r.violations() == 0 && (run.repro || (r.states >= 10_000 * scale as u64 && r.rewritten > 0)),
            raft_line(&r, runs, t0),
        );
    }

    if run.wanted("segment-dirs") {
        // 2d. Segment directories that go missing, under power loss.
        let t0 = Instant::now();
        let mut d = segment_dirs::Tally::default();
        let seeds = run.seeds(13_000, 12 * scale as u64);
        let runs = seeds.len() as u64;
        for s in seeds {
            let t = segment_dirs::run_seed(s, 3, false);
            run.check("segment-dirs", s, t.violations(), || segment_dirs_line(&t, 1, t0));
            d.add(t);
        }
        run.report(
            d.violations() == 0 && (run.repro || (d.refused > 0 && d.deletions > 0 && d.states >= 2000 * scale as u64)),
            segment_dirs_line(&d, runs, t0),
        );
    }

    if run.wanted("message-store") {
        // 2f. The message store under simulated power loss.
        let t0 = Instant::now();
        let mut m = message_layer::Tally::default();
        let seeds = run.seeds(17_000, 24 * scale as u64);
        let runs = seeds.len() as u64;
        for s in seeds {
            let t = message_layer::run_seed(s, 1, false);
            run.check("message-store", s, t.violations(), || message_line(&t, 1, t0));
            m.add(t);
        }
        run.report(m.violations() == 0 && (run.repro || m.states >= 5_000 * scale as u64), message_line(&m, runs, t0));
    }

    if run.wanted("store-life") {
        // 2i. The whole message store's life against its model.
        let t0 = Instant::now();
        let mut l = store_life::Tally::default();
        let seeds = run.seeds(29_000, 48 * scale as u64);
        let runs = seeds.len() as u64;
        for s in seeds {
            let t = store_life::run_seed(s, 40);
            run.check("store-life", s, t.violations(), || store_life_line(&t, 1, t0));
            l.add(t);
        }
        run.report(l.violations() == 0, store_life_line(&l, runs, t0));
    }

    if run.wanted("message-damage") {
        // 2g. The message store's derived data damaged at random.
        let t0 = Instant::now();
        let mut d = damage_layer::Tally::default();
        let seeds = run.seeds(23_000, 16 * scale as u64);
        let runs = seeds.len() as u64;
        for s in seeds {
            let t = damage_layer::run_seed(s, 50, false);
            run.check("message-damage", s, t.violations(), || damage_line(&t, 1, t0));
            d.add(t);
        }
        run.report(
            d.violations() == 0 && (run.repro || (d.cases >= 800 * scale as u64 && d.repaired > 0)),
            damage_line(&d, runs, t0),
        );
    }

    if run.wanted("races") {
        // 2e. Truncations racing a flush and a group-commit round.
        let t0 = Instant::now();
        let r = races::run(seed, 50 * scale as u64);
        let line = format!(
            "races (truncate_from inside flush_all's window and inside a group-commit round, on the real queue): {} cases, {} checkpoints above the data, {} unopenable stores, {} unsynced bytes acknowledged, {} dead rounds ({:.1?})",
            r.cases,
            r.checkpoint_above,
            r.unopenable,
            r.acked_unsynced,
            r.dead_rounds,
            t0.elapsed()
        );
        run.check("races", seed, r.violations(), || line.clone());
        run.report(r.violations() == 0 && r.cases > 0, line);
    }

    if run.wanted("generations") {
        // 2b. Several generations: what a recovery cut never comes back.
        let t0 = Instant::now();
        let mut g = generations::Tally::default();
        let gen_seeds = 100 * scale as u64;
        for s in run.seeds(5000, gen_seeds) {
            let t = generations::run_seed(s, 50);
            run.check("generations", s, t.violations(), || generations_line(&t, t0));
            g.add(t);
        }
        run.report(
            g.violations() == 0
                && (run.repro || (g.states >= 5000 * scale as u64 && g.cuts > 0 && g.second_crashes > 0)),
            generations_line(&g, t0),
        );
    }

    if run.wanted("kill") {
        // 3. Real SIGKILLs.
        let t0 = Instant::now();
        let k = kill::run(seed, 200 * scale);
        let line = format!(
            "kill (write path switches each restart): {} SIGKILLs, {} acked records, {} acked lost, {} garbage ({:.1?})",
            k.kills,
            k.acked,
            k.lost,
            k.garbage,
            t0.elapsed()
        );
        run.check("kill", seed, (k.lost + k.garbage) as u64, || line.clone());
        run.report(k.lost + k.garbage == 0 && k.acked > 0, line);
    }

    if run.wanted("sync-failure") {
        // 4. Sync failure.
        let t0 = Instant::now();
        let f = sync_failure::run(seed, 50 * scale);
        let line = format!(
            "sync-failure (pwrite and mmap alternate): {} injected sync errors, {} acked before them, {} acked after, {} lost after restart, {}/{} refused further writes clearly ({:.1?})",
            f.failures_injected,
            f.acked_before,
            f.acked_after,
            f.lost,
            f.refused_clearly,
            f.failures_injected,
            t0.elapsed()
        );
        let bad = f.acked_after + f.lost + f.failures_injected.saturating_sub(f.refused_clearly);
        run.check("sync-failure", seed, bad as u64, || line.clone());
        run.report(bad == 0, line);
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
    for (layer, passed, disk_run) in disk_layers {
        if !run.wanted(layer) {
            continue;
        }
        let name = passed.split(':').next().unwrap_or(layer);
        match disk_run() {
            disk_full::Outcome::Passed { detail } => run.report(true, format!("{passed}{detail}")),
            disk_full::Outcome::Failed { detail } => {
                let line = format!("{name}: FAILED: {detail}");
                run.check(layer, seed, 1, || line.clone());
                run.report(false, line);
            }
            disk_full::Outcome::Skipped { reason } => run.report(true, format!("{name}: skipped: {reason}")),
        }
    }
    run.finish()
}

/// What a run of the suite has seen: whether anything failed, and the runs
/// (layer and seed) that saw violations, for the summary that ends the output.
struct Runner {
    /// `--soak`: the reproducing commands say so too.
    soak: bool,
    /// Names a run that hangs.
    watchdog: watchdog::Watchdog,
    /// The one layer to run, if given.
    only: Option<String>,
    /// Reproducing one run: that layer, that seed, nothing else.
    repro: bool,
    seed: u64,
    failed: bool,
    failures: Vec<Failure>,
}

/// A run that saw a violation.
struct Failure {
    layer: &'static str,
    seed: u64,
    line: String,
}

impl Runner {
    /// Whether `layer` runs; if so, it starts now (under the base seed, for
    /// the watchdog, until its first seed of its own).
    fn wanted(&self, layer: &'static str) -> bool {
        let wanted = self.only.as_deref().is_none_or(|o| o == layer);
        if wanted {
            self.watchdog.mark(layer, self.seed);
        }
        wanted
    }

    /// The seeds of a layer's `runs` runs (the base seed plus `offset` plus
    /// the run's number), or only the seed given when reproducing; each marks
    /// its run's start for the watchdog as it is taken.
    fn seeds(&self, offset: u64, runs: u64) -> watchdog::Seeds {
        let seeds = if self.repro { vec![self.seed] } else { (0..runs).map(|s| self.seed + offset + s).collect() };
        watchdog::Seeds { seeds: seeds.into_iter(), watchdog: self.watchdog.clone() }
    }

    /// Remembers the run of `layer` under `seed` if it saw `violations`.
    fn check(&mut self, layer: &'static str, seed: u64, violations: u64, line: impl FnOnce() -> String) {
        if violations > 0 {
            self.failures.push(Failure { layer, seed, line: line() });
        }
    }

    /// Prints a layer's line; `ok` false fails the suite.
    fn report(&mut self, ok: bool, line: String) {
        self.watchdog.clear();
        println!("{}{line}", if ok { "" } else { "FAILED: " });
        self.failed |= !ok;
    }

    /// Ends with what failed, each run with its seed and the command that
    /// reproduces it, so that the last lines of one CI log are enough.
    fn finish(self) -> ExitCode {
        if !self.failed {
            return ExitCode::SUCCESS;
        }
        println!();
        if self.failures.is_empty() {
            println!("crash suite FAILED: a layer ran too few cases to count (see the FAILED line above); no run saw a violation");
        }
        for f in &self.failures {
            println!("crash suite FAILED: layer {}, seed {}: {}", f.layer, f.seed, f.line);
            println!("  reproduce: {}", reproduce(f.layer, f.seed, self.soak, false));
        }
        ExitCode::FAILURE
    }
}

fn corruption_line(c: &corruption::Tally, t0: Instant) -> String {
    let kinds: Vec<String> = c.kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    format!(
        "corruption: {} cases ({}), {} panics, {} garbage records, {} silent losses below the checkpoint, {} unclear errors ({:.1?})",
        c.cases,
        kinds.join(", "),
        c.panics,
        c.garbage,
        c.silent_below_checkpoint,
        c.unclear_errors,
        t0.elapsed()
    )
}

fn power_loss_line(p: &power_loss::Tally, runs: u64, t0: Instant) -> String {
    format!(
        "power-loss (pwrite and mmap runs alternate; every fourth over two segment directories): {} crash states over {runs} runs, {} acked records, {} acked lost, {} garbage, {} failed recoveries ({:.1?})",
        p.states,
        p.acked,
        p.lost,
        p.garbage,
        p.open_errors,
        t0.elapsed()
    )
}

fn prepared_line(p: &power_loss::Tally, runs: u64, t0: Instant) -> String {
    format!(
        "prepared-segments (the next segment's blocks written and synced in the background, taken whole or half-prepared): {} crash states over {runs} runs, {} segments taken prepared, {} acked records, {} acked lost, {} garbage, {} failed recoveries ({:.1?})",
        p.states,
        p.prepared,
        p.acked,
        p.lost,
        p.garbage,
        p.open_errors,
        t0.elapsed()
    )
}

fn raft_line(r: &power_loss::Tally, runs: u64, t0: Instant) -> String {
    format!(
        "raft-power-loss (commitlog-raft: three groups on one log and one queue index, a group created and dropped midway, entries, votes, purges, truncations, rewrites of the lagging group, all on one simulated disk): {} crash states over {runs} runs, {} entries acked, {} rewritten, {} acked lost, {} garbage, {} failed opens ({:.1?})",
        r.states,
        r.acked,
        r.rewritten,
        r.lost,
        r.garbage,
        r.open_errors,
        t0.elapsed()
    )
}

fn segment_dirs_line(d: &segment_dirs::Tally, runs: u64, t0: Instant) -> String {
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
    )
}

fn message_line(m: &message_layer::Tally, runs: u64, t0: Instant) -> String {
    format!(
        "message-store (puts on shared queues, a consumer committing offsets; one run in four async, every other sealing the queue index every 5 entries, one in three deleting the log's first segment): {} crash states over {runs} runs, {} acked, {} consumed, {} acked or consumed lost, {} garbage, {} committed offsets lost, {} keys not found, {} offsets reused, {} failed opens, {} failed reads, {} repairs needed ({:.1?})",
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
        m.repaired,
        t0.elapsed()
    )
}

fn store_life_line(l: &store_life::Tally, runs: u64, t0: Instant) -> String {
    format!(
        "store-life (the whole message store against its model: topics made, deleted and made again, puts, reads, commits, removals, resets, a topic's offsets cleaned and journal compactions, seals, the log's front moving, reopens and power cuts; sync and async flush, the write-buffer pool on one run in three): {} steps over {runs} runs, {} runs failed a check ({:.1?}){}",
        l.steps,
        l.failed,
        t0.elapsed(),
        l.first.as_deref().map(|f| format!("; first: {f}")).unwrap_or_default()
    )
}

fn damage_line(d: &damage_layer::Tally, runs: u64, t0: Instant) -> String {
    format!(
        "message-damage (queue-index runs and table, the dispatch checkpoint, the topic registry and key-index files damaged at random): {} damaged stores over {runs} runs ({} damages, {} repairs said), {} acked, {} acked lost, {} garbage, {} committed offsets lowered, {} keys not found, {} offsets reused, {} failed opens ({:.1?})",
        d.cases,
        d.damages,
        d.repaired,
        d.acked,
        d.lost,
        d.garbage,
        d.offsets_lowered,
        d.keys_lost,
        d.reused,
        d.open_errors,
        t0.elapsed()
    )
}

fn generations_line(g: &generations::Tally, t0: Instant) -> String {
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
    )
}
