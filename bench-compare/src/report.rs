//! docs/benchmarks.md and its plot, from one run.

use std::fmt::Write as _;
use std::time::Duration;

use crate::{Line, Runs, Sizes, Workload, BATCH, PRODUCERS, RECORD};

/// What the report needs besides the systems' runs.
pub struct Context {
    pub machine: String,
    pub took: Duration,
    pub rounds: usize,
    pub quick: bool,
    /// Busy loops run beside the benchmark (`--cpu-load`).
    pub cpu_load: usize,
    /// The plot's file name, beside the report.
    pub plot: String,
    pub sizes: Sizes,
    pub memcpy: Line,
    pub pwrite_fdatasync: Line,
    pub pwrite_fdatasync_fallocated: Line,
    pub fdatasync_4k: Line,
    /// The simplest group commit of 16 producers ([`crate::physical::group_commit`]).
    pub group_commit: Line,
}

/// What a report of a run with a CPU load beside says in place of the analysis.
const LOADED_NOTE: &str = "## Read against the quiet run\n\nThis run had busy loops beside it (`--cpu-load`): \
    each row's ratio to a peer here, divided by the same ratio in the quiet run (docs/benchmarks.md), says what \
    the load cost it beyond what it cost the peer (target: no row below 0.9x its quiet ratio). The analysis of \
    both is in docs/benchmarks.md.\n\n";

/// The rows the goals are measured on.
const DEFAULT_ROW: &str = "commitlog, pwrite (default)";
const SPARE_ROW: &str = "commitlog, pwrite, spare segments";
const POOL_ROW: &str = "commitlog, pwrite, write-buffer pool";
const PREPARED_ROW: &str = "commitlog, pwrite, prepared segments";

fn title(w: Workload) -> String {
    match w {
        Workload::A => format!("(a) durable batches: one producer, {BATCH} records per durable wait"),
        Workload::B => format!("(b) group commit: {PRODUCERS} producers, each waits for its own record"),
        Workload::C => format!("(c) no sync: one producer, batches of {BATCH}"),
        Workload::CSingle => {
            format!("(c') no sync, single records: one producer, {BATCH} appends of one record per unit")
        }
    }
}

fn unit(w: Workload) -> &'static str {
    match w {
        Workload::A => "batch",
        Workload::B => "ack",
        Workload::C => "batch",
        Workload::CSingle => "64 appends",
    }
}

/// This project's row named `pick` (the first of ours if empty) and the best
/// peer of a workload.
fn ours_and_best_peer<'a>(runs: &'a [Runs], pick: &str) -> (Option<&'a Runs>, Option<&'a Runs>) {
    let ours = runs.iter().find(|r| r.ours && r.system.starts_with(pick) && r.median().is_some());
    let best = runs
        .iter()
        .filter(|r| !r.ours && r.median().is_some())
        .max_by(|a, b| a.median().unwrap().rate().total_cmp(&b.median().unwrap().rate()));
    (ours, best)
}

fn named<'a>(runs: &'a [Runs], prefix: &str) -> Option<&'a Line> {
    runs.iter().find(|r| r.system.starts_with(prefix)).and_then(Runs::median)
}

fn table(out: &mut String, w: Workload, runs: &[Runs]) {
    let (ours, _) = ours_and_best_peer(runs, "");
    let ours_rate = ours.and_then(Runs::median).map(Line::rate);
    let _ = writeln!(out, "### {}\n", title(w));
    let extra = if w == Workload::B { " records per sync | CPU per record (µs) |" } else { "" };
    let _ = writeln!(
        out,
        "| system | records/s median (min - max) | MB/s | {} latency p50 / p99 / p99.9 / max (µs) | run spread |{extra} default / this |",
        unit(w)
    );
    let _ = writeln!(out, "|---|---|---|---|---|{}---|", if extra.is_empty() { "" } else { "---|---|" });
    for r in runs {
        let Some(m) = r.median() else {
            let why = r.not_applicable.unwrap_or("did not run");
            let pad = if extra.is_empty() { "" } else { " n/a | n/a |" };
            let _ = writeln!(out, "| {} | n/a | n/a | {why} | n/a |{pad} n/a |", r.system);
            continue;
        };
        let ratio = match ours_rate {
            Some(o) if !std::ptr::eq(r, ours.unwrap()) => format!("{:.2}x", o / m.rate()),
            _ => "-".into(),
        };
        let per_sync = if w == Workload::B {
            format!(
                " {} | {} |",
                m.records_per_sync.map_or("n/a".into(), |v| format!("{v:.1}")),
                m.cpu_us_per_record.map_or("n/a".into(), |v| format!("{v:.1}"))
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "| {} | {:.0} ({:.0} - {:.0}) | {:.1} | {:.1} / {:.1} / {:.1} / {:.1} | {:.0} % |{per_sync} {ratio} |",
            r.system,
            m.rate(),
            r.min_rate(),
            r.max_rate(),
            m.mb_s(),
            m.pct_us(0.5),
            m.pct_us(0.99),
            m.pct_us(0.999),
            m.max_us(),
            100.0 * r.spread(),
        );
    }
    out.push('\n');
}

/// One goal: what it asks, what was measured, and whether it holds.
struct Goal {
    text: String,
    measured: String,
    met: bool,
}

/// The goals, measured on this project's row named `pick`.
fn goals(ctx: &Context, results: &[Vec<Runs>], pick: &str) -> Vec<Goal> {
    let mut goals = Vec::new();
    let mut push = |text: String, measured: String, met: bool| goals.push(Goal { text, measured, met });
    let (a, b, c, c_single) = (&results[0], &results[1], &results[2], &results[3]);

    if let (Some(ours), Some(best)) = ours_and_best_peer(a, pick) {
        let (o, p) = (ours.median().unwrap(), best.median().unwrap());
        let ratio = o.rate() / p.rate();
        push("(a) ≥ 1.1x the best peer".into(), format!("{ratio:.2}x {}", best.system), ratio >= 1.1);
        let line = o.mb_s() / ctx.pwrite_fdatasync.mb_s();
        push(
            "(a) ≥ 90 % of 64 KiB pwrite + fdatasync into written blocks".into(),
            format!(
                "{:.0} % ({:.0} of {:.0} MB/s; {:.0} % of the same into fresh fallocated blocks, {:.0} MB/s)",
                100.0 * line,
                o.mb_s(),
                ctx.pwrite_fdatasync.mb_s(),
                100.0 * o.mb_s() / ctx.pwrite_fdatasync_fallocated.mb_s(),
                ctx.pwrite_fdatasync_fallocated.mb_s()
            ),
            line >= 0.9,
        );
        let tail = o.pct_us(0.999) / o.pct_us(0.5);
        push("(a) batch p99.9 ≤ 3x p50".into(), format!("{tail:.1}x"), tail <= 3.0);
    }
    if let (Some(ours), Some(best)) = ours_and_best_peer(b, pick) {
        let (o, p) = (ours.median().unwrap(), best.median().unwrap());
        let ratio = o.rate() / p.rate();
        push(
            "(b) ≥ 1.5x the best peer".into(),
            format!(
                "{ratio:.2}x {} (this row {:.2}x, the peer {:.2}x the simplest group commit's {:.0} records/s)",
                best.system,
                o.rate() / ctx.group_commit.rate(),
                p.rate() / ctx.group_commit.rate(),
                ctx.group_commit.rate()
            ),
            ratio >= 1.5,
        );
        let per_sync = o.records_per_sync.unwrap_or(0.0);
        push("(b) records per sync reported".into(), format!("{per_sync:.1} records per sync"), per_sync > 0.0);
        let ack = o.pct_us(0.99) / ctx.fdatasync_4k.pct_us(0.99);
        push(
            "(b) ack p99 ≤ 3x the fdatasync p99".into(),
            format!("{ack:.1}x ({:.0} vs {:.0} µs)", o.pct_us(0.99), ctx.fdatasync_4k.pct_us(0.99)),
            ack <= 3.0,
        );
    }
    // (c)'s targets against the peers, in (c) and where a caller appends one
    // record at a time (c').
    let unsynced_ratios = |label: &str, runs: &[Runs], push: &mut dyn FnMut(String, String, bool)| {
        let Some(o) = ours_and_best_peer(runs, pick).0.and_then(Runs::median) else { return };
        for (peer, want) in [("rocketmq-store", 2.0), ("raft-engine", 3.0)] {
            if let Some(p) = named(runs, peer) {
                let ratio = o.rate() / p.rate();
                push(format!("{label} ≥ {want}x {peer}"), format!("{ratio:.2}x"), ratio >= want);
            }
        }
    };
    unsynced_ratios("(c)", c, &mut push);
    if let (Some(ours), _) = ours_and_best_peer(c, pick) {
        let o = ours.median().unwrap();
        let share = o.rate() / ctx.memcpy.rate();
        push("(c) ≥ 25 % of memcpy into a faulted mapping".into(), format!("{:.1} %", 100.0 * share), share >= 0.25);
        let per_record = o.pct_us(0.999) / BATCH as f64;
        push(
            format!("(c) append p99.9 ≤ 20 µs per record (batch p99.9 / {BATCH}; max batch in brackets)"),
            format!("{per_record:.2} µs ({:.0} µs)", o.max_us()),
            per_record <= 20.0,
        );
        push("(c) run spread ≤ 30 %".into(), format!("{:.0} %", 100.0 * ours.spread()), ours.spread() <= 0.30);
    }
    unsynced_ratios("(c')", c_single, &mut push);
    goals
}

/// The report.
pub fn markdown(ctx: &Context, results: &[Vec<Runs>]) -> String {
    let mut md = String::new();
    md.push_str("# Benchmarks\n\n");
    let _ = writeln!(
        md,
        "Produced by `cargo xtask bench-compare` (the comparison runner in `bench-compare/`): every system in one process, \
         on the same file system, {} rounds interleaved (each round runs every system once per workload, in an order \
         rotated each round). Shown: the median run by throughput, the min and max over the rounds, and the median \
         run's latencies. Ratios come from this one run; this shared VM drifts 10-30 % between runs and more between \
         days, so compare ratios, not absolute numbers across runs.\n",
        ctx.rounds
    );
    let _ = writeln!(
        md,
        "Machine: {}. Run took {:.0?}{}{}. Per run: (a) {} batches, (b) {} records per producer, (c) and (c') {} batches; {} KiB records.\n",
        ctx.machine,
        ctx.took,
        if ctx.quick { " (--quick: a hint, not a result)" } else { "" },
        if ctx.cpu_load > 0 { format!(", with {} busy loops beside (--cpu-load)", ctx.cpu_load) } else { String::new() },
        ctx.sizes.a_batches,
        ctx.sizes.b_per_producer,
        ctx.sizes.c_batches,
        RECORD / 1024
    );
    let _ = writeln!(md, "![throughput and p99.9 per system]({})\n", ctx.plot);
    md.push_str("## Physical lines in the same run (medians over the rounds)\n\n");
    md.push_str("| line | MB/s | latency p50 / p99 / p99.9 (µs) |\n|---|---|---|\n");
    let _ = writeln!(md, "| memcpy of 1 KiB records into a faulted mapping | {:.0} | |", ctx.memcpy.mb_s());
    let latencies = |l: &Line| format!("{:.1} / {:.1} / {:.1}", l.pct_us(0.5), l.pct_us(0.99), l.pct_us(0.999));
    for (name, line) in [
        ("64 KiB pwrite + fdatasync into written blocks", &ctx.pwrite_fdatasync),
        ("64 KiB pwrite + fdatasync into fresh fallocated (unwritten) blocks", &ctx.pwrite_fdatasync_fallocated),
    ] {
        let _ = writeln!(md, "| {name} | {:.0} | {} |", line.mb_s(), latencies(line));
    }
    let _ =
        writeln!(md, "| fdatasync after a 4 KiB overwrite of written blocks | | {} |", latencies(&ctx.fdatasync_4k));
    let _ = writeln!(
        md,
        "| {PRODUCERS} producers, each a 1 KiB `pwrite` under a lock and a wait for a waiter's `fdatasync` (the simplest group commit: {:.0} records/s) | {:.0} | {} |\n",
        ctx.group_commit.rate(),
        ctx.group_commit.mb_s(),
        latencies(&ctx.group_commit)
    );
    md.push_str("## Results (1 KiB records)\n\n");
    for (w, runs) in Workload::ALL.iter().zip(results) {
        table(&mut md, *w, runs);
    }
    let _ = writeln!(
        md,
        "## Goals (DESIGN.md §5), this run\n\nMeasured on the default row (a fresh store), on the row of an aged \
         store with spare segments (`recycle_segments`: the steady state of a store whose retention deletes), on \
         the row with prepared segments (`segment_preparation`, a store past its first segment) and on the row with \
         the write-buffer pool.\n\n\
         | goal | {DEFAULT_ROW} | | {SPARE_ROW} | | {PREPARED_ROW} | | {POOL_ROW} | |\n|---|---|---|---|---|---|---|---|---|"
    );
    let verdict = |met: bool| if met { "met" } else { "**not met**" };
    let others = [goals(ctx, results, SPARE_ROW), goals(ctx, results, PREPARED_ROW), goals(ctx, results, POOL_ROW)];
    for goal in goals(ctx, results, DEFAULT_ROW) {
        let mut line = format!("| {} | {} | {} |", goal.text, goal.measured, verdict(goal.met));
        for other in &others {
            // Paired by the goal's text: a row that did not run has none.
            match other.iter().find(|g| g.text == goal.text) {
                Some(g) => {
                    let _ = write!(line, " {} | {} |", g.measured, verdict(g.met));
                }
                None => line.push_str(" n/a | |"),
            }
        }
        let _ = writeln!(md, "{line}");
    }
    md.push('\n');
    // The maintained analysis goes with every quiet run's numbers; a run with
    // a CPU load beside is read against the quiet one, whose report has it.
    if ctx.cpu_load > 0 {
        md.push_str(LOADED_NOTE);
    } else if let Ok(analysis) = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/ANALYSIS.md")) {
        md.push_str(&analysis);
        md.push('\n');
    }
    md.push_str(
        "Command: `cargo xtask bench-compare` (`--quick` for a short run, `--rounds N`; `BENCH_DIR` picks the file \
         system, `BENCH_WARM=1` turns segment warm-up on, `BENCH_POOL=1` sends the log's appends through the write-buffer pool, `BENCH_NO_BACKGROUND_FLUSH=1` keeps the async flusher idle, `BENCH_PREP_CHUNK` and `BENCH_PREP_RATE` set the prepared-segments row's step and budget, `BENCH_PREP_FAULTED=1` faults its segments in and `BENCH_PREP_MMAP=1` writes them through the mapping, `BENCH_SPIN_US` and `BENCH_GATHER_US` set the group-commit spin and gather bounds; `--only SYSTEM[,SYSTEM…][:abcsd]` runs a subset, for profiling or a pair; `BENCH_D_QUEUES=1,1024` picks (d)'s queue counts, `BENCH_D_FLUSH=async` (or `sync`) one flush mode, `BENCH_D_MESSAGES` its messages per producer; `--cpu-load N` runs N busy loops beside the whole run (through xtask, the report goes to docs/benchmarks-loaded.md); `--baseline FILE` adds the ratios to an earlier run's results document, docs/benchmarks.json, or to `commitlog bench --json`).\n",
    );
    md
}

/// The results document's rows of (a)-(c): the median run of each system
/// with the slowest and fastest, and the median run's latencies.
pub fn rows(results: &[Vec<Runs>]) -> Vec<crate::bench_doc::Row> {
    let workload_name = |w: Workload| match w {
        Workload::A => "a",
        Workload::B => "b",
        Workload::C => "c",
        Workload::CSingle => "c-single",
    };
    let mut rows = Vec::new();
    for (w, runs) in Workload::ALL.iter().zip(results) {
        for r in runs {
            let Some(m) = r.median() else { continue };
            rows.push(crate::bench_doc::Row {
                workload: workload_name(*w).into(),
                title: title(*w),
                system: r.system.into(),
                config: String::new(),
                ours: r.ours,
                records_per_sec: m.rate(),
                min_records_per_sec: Some(r.min_rate()),
                max_records_per_sec: Some(r.max_rate()),
                mb_per_sec: m.mb_s(),
                latency: crate::bench_doc::Latency::of(m.latencies.clone()),
                detail: serde_json::json!({
                    "unit": unit(*w),
                    "runs": r.runs.len(),
                    "records_per_sync": m.records_per_sync,
                    "cpu_us_per_record": m.cpu_us_per_record,
                }),
            });
        }
    }
    rows
}
