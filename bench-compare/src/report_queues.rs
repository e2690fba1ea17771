//! The section of docs/benchmarks.md on workload (d), from the same run.

use std::fmt::Write as _;

use crate::queues::{pct_us, DLine, DSizes, Flush, QueueSystem, HOT, HOT_SHARE, PRODUCERS, QUEUE_COUNTS};

/// The runs of one system at one (flush, queue count).
#[derive(Default)]
struct Cell {
    runs: Vec<DLine>,
    /// Why runs failed, one entry per failed run.
    failed: Vec<String>,
}

impl Cell {
    fn median(&self) -> Option<&DLine> {
        let mut sorted: Vec<&DLine> = self.runs.iter().collect();
        sorted.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
        sorted.get(sorted.len() / 2).copied()
    }
    fn min(&self) -> f64 {
        self.runs.iter().map(DLine::rate).fold(f64::INFINITY, f64::min)
    }
    fn max(&self) -> f64 {
        self.runs.iter().map(DLine::rate).fold(0.0, f64::max)
    }
}

/// Every run of workload (d).
pub struct Results {
    systems: Vec<(&'static str, bool)>,
    /// [flush][queue count][system]
    cells: Vec<Vec<Vec<Cell>>>,
}

impl Results {
    pub fn new(systems: &[QueueSystem]) -> Self {
        let cells = Flush::ALL
            .iter()
            .map(|_| QUEUE_COUNTS.iter().map(|_| systems.iter().map(|_| Cell::default()).collect()).collect())
            .collect();
        Results { systems: systems.iter().map(|s| (s.name, s.ours)).collect(), cells }
    }

    pub fn push(&mut self, system: &str, flush: Flush, queues: u32, outcome: Result<DLine, String>) {
        let f = Flush::ALL.iter().position(|x| *x == flush).expect("flush");
        let n = QUEUE_COUNTS.iter().position(|x| *x == queues).expect("queue count");
        let s = self.systems.iter().position(|(name, _)| *name == system).expect("system");
        let cell = &mut self.cells[f][n][s];
        match outcome {
            Ok(line) => cell.runs.push(line),
            Err(e) => cell.failed.push(e),
        }
    }

    /// The results document's rows: one per system, flush mode and queue
    /// count that has a run; the latency is the put's acknowledgement.
    pub fn rows(&self) -> Vec<crate::bench_doc::Row> {
        let mut rows = Vec::new();
        for (f, flush) in Flush::ALL.iter().enumerate() {
            for (n, queues) in QUEUE_COUNTS.iter().enumerate() {
                for (s, (system, ours)) in self.systems.iter().enumerate() {
                    let cell = &self.cells[f][n][s];
                    let Some(m) = cell.median() else { continue };
                    let mode = flush.name().split(' ').next().unwrap_or("");
                    rows.push(crate::bench_doc::Row {
                        workload: format!("d-{mode}-{queues}"),
                        title: format!("(d) {PRODUCERS} producers over {queues} queues, {}", flush.name()),
                        system: system.to_string(),
                        config: String::new(),
                        ours: *ours,
                        records_per_sec: m.rate(),
                        min_records_per_sec: Some(cell.min()),
                        max_records_per_sec: Some(cell.max()),
                        mb_per_sec: m.rate() * crate::RECORD as f64 / 1e6,
                        latency: crate::bench_doc::Latency::of(m.acks.clone()),
                        detail: serde_json::json!({
                            "e2e_p99_us": pct_us(&m.e2e, 0.99),
                            "dispatch_lag_p99_us": pct_us(&m.lag, 0.99),
                            "hot_tail_p99_us": pct_us(&m.tail, 0.99),
                            "hot_tail_read_ns_per_message": m.tail_read_ns,
                            "failed_runs": cell.failed.len(),
                        }),
                    });
                }
            }
        }
        rows
    }

    fn cell(&self, flush: Flush, queues: u32, prefix: &str) -> Option<&Cell> {
        let f = Flush::ALL.iter().position(|x| *x == flush)?;
        let n = QUEUE_COUNTS.iter().position(|x| *x == queues)?;
        let s = self.systems.iter().position(|(name, _)| name.starts_with(prefix))?;
        Some(&self.cells[f][n][s])
    }

    fn rate(&self, flush: Flush, queues: u32, prefix: &str) -> Option<f64> {
        self.cell(flush, queues, prefix).and_then(Cell::median).map(DLine::rate)
    }

    fn ours(&self) -> &'static str {
        self.systems.iter().find(|(_, ours)| *ours).map_or("", |(name, _)| name)
    }
}

fn pair(v: &[u64]) -> String {
    if v.is_empty() {
        return "n/a".into();
    }
    format!("{:.0} / {:.0}", pct_us(v, 0.5), pct_us(v, 0.99))
}

fn table(md: &mut String, results: &Results, flush: Flush) {
    let _ = writeln!(md, "### (d) {}\n", flush.name());
    md.push_str(
        "| queues | system | messages/s median (min - max) | ack p50 / p99 (µs) | dispatch lag p50 / p99 (µs) | \
         end-to-end p50 / p99 (µs) | hot tail p50 / p99 (µs) | drain (ms) | CPU per message (µs) | RSS growth (MiB) | files | mappings | this / that |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let ours = results.ours();
    for &n in &QUEUE_COUNTS {
        let our_rate = results.rate(flush, n, ours);
        for (name, is_ours) in &results.systems {
            let Some(cell) = results.cell(flush, n, name) else { continue };
            let failures = match cell.failed.first() {
                Some(why) => format!(
                    "; **{} of {} runs failed**: {}",
                    cell.failed.len(),
                    cell.failed.len() + cell.runs.len(),
                    why.replace('|', "/")
                ),
                None => String::new(),
            };
            let Some(m) = cell.median() else {
                if !failures.is_empty() {
                    let _ = writeln!(md, "| {n} | {name} | n/a{failures} | | | | | | | | | | |");
                }
                continue; // not run (`--only`)
            };
            let ratio = match our_rate {
                Some(o) if !is_ours => format!("{:.2}x", o / m.rate()),
                _ => "-".into(),
            };
            let _ = writeln!(
                md,
                "| {n} | {name} | {:.0} ({:.0} - {:.0}){failures} | {} | {} | {} | {} | {} | {:.1} | {:.0} | {} | {} | {ratio} |",
                m.rate(),
                cell.min(),
                cell.max(),
                pair(&m.acks),
                pair(&m.lag),
                pair(&m.e2e),
                pair(&m.tail),
                m.drain.map_or("n/a".into(), |d| format!("{:.0}", d * 1e3)),
                m.cpu_us_per_message,
                m.rss_mib,
                m.files,
                m.maps,
            );
        }
    }
    md.push('\n');
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "**not met**"
    }
}

/// The peers of the rate and tail targets, by name prefix.
const PEERS: [&str; 2] = ["raft-engine", "fjall"];

/// The queue counts of the async rate target.
const RATE_COUNTS: [u32; 3] = [1, 1_024, 50_000];

/// The section.
pub fn markdown(results: &Results, sizes: &DSizes, rounds: usize) -> String {
    let mut md = String::new();
    md.push_str("## (d) Many queues on one store\n\n");
    let _ = writeln!(
        md,
        "The same run, {rounds} rounds interleaved (every system at every queue count once per round, the order \
         rotated). {PRODUCERS} producers put 1 KiB messages, producer p's i-th on queue (p + {PRODUCERS} i) mod N, \
         except one in {HOT_SHARE}, which goes to one of the first {HOT} queues (all of them below that count; \
         round-robin over them): the hot queues: \
         {} messages per producer under async flush (a put returns when written), {} under sync flush (it returns \
         when durable; every producer waits for its own message). messages/s: the messages over the time until the \
         last put returned. Dispatch lag: a put's return until its queue shows it; end-to-end: a put's start until a \
         consumer has read it; both sampled on every 8th message of producer 0 by one consumer (this project: long \
         polling with `wait_for`; rocketmq-store has no long polling in its store, its consumer polls the queue's end \
         every 20 µs). Hot tail: one more consumer reads every message of the hot queues as it comes, up to 64 at a time, from the message's put start until it has read it (this \
         project: `wait_for` and `get_messages`; raft-engine: its regions polled every 20 µs until the message is \
         there; fjall: its keys polled the same way, then read on in key order; the others: not measured). Drain: the last put's return until every message is in its queue. Systems without dispatch \
         (raft-engine, fjall, the file per queue) show a message as soon as its put returns. RSS growth, files and mappings: \
         what the process held at the end of the puts beyond what it held before the system opened. CPU per message: \
         the process's CPU time (every thread: the system's, the producers', the consumers') from the first put \
         until every message was in its queue, over the messages.\n",
        sizes.async_per_producer, sizes.sync_per_producer
    );
    md.push_str(
        "Set-ups: this project's message store with its defaults (key index on, the queue index: entries in \
         memory, sealed into one run file per log range); rocketmq-store's `LocalFileMessageStore` through its `StoreFactory` with its defaults \
         except consume-queue files of the same 4,096 entries (its default of 300,000 would take 6 MB per queue), \
         the timer wheel off and micro-batching off (its default waits up to 50 µs for 32 puts, which 4 producers \
         never fill, and its runtime's 1 ms timer made every put take 1.3 ms: 3.1 k messages/s against 45 k at 1 \
         queue); raft-engine 0.4.2 with a region per queue (`LogBatch::put`, `write(sync)`), its \
         defaults; fjall 3.1.13 (an LSM tree, as RocketMQ 5's RocksDB consume queue) with one keyspace keyed by \
         queue and offset (big-endian, so a queue is one key range), `insert` and, under sync flush, \
         `persist(SyncData)` after it, its defaults; a Kafka-style layout of one append file per queue built here as a reference model (`pwrite` to \
         the queue's file, group commit over files: a round `fdatasync`s every file written since the last, 4,096 \
         files open at most). Commit-log segments of 128 MiB where a system has them.\n\n",
    );
    for flush in Flush::ALL {
        table(&mut md, results, flush);
    }
    md.push_str("### (d) targets, this run\n\n| target | measured | |\n|---|---|---|\n");
    let ours = results.ours();
    // The targets' queue count (the largest, 200,000, is shown beside it).
    let most = 50_000;
    for flush in Flush::ALL {
        if let (Some(one), Some(wide)) = (results.rate(flush, 1, ours), results.rate(flush, most, ours)) {
            let r = wide / one;
            let _ = writeln!(
                md,
                "| {}: {most} queues ≥ 0.9x the store's 1-queue figure | {r:.2}x ({wide:.0} vs {one:.0}) | {} |",
                flush.name(),
                verdict(r >= 0.9)
            );
        }
    }
    if let (Some(o), Some(p)) =
        (results.rate(Flush::Sync, 16_384, ours), results.rate(Flush::Sync, 16_384, "file per queue"))
    {
        let r = o / p;
        let _ = writeln!(md, "| sync flush: 16384 queues ≥ 3x the file per queue | {r:.2}x | {} |", verdict(r >= 3.0));
    }
    // The peers of (d)'s rate and tail targets: raft-engine with a region per
    // queue and fjall keyed by queue and offset; the better of the two at
    // each count.
    let best_peer = |flush: Flush, n: u32| {
        PEERS
            .iter()
            .filter_map(|prefix| results.rate(flush, n, prefix).map(|rate| (rate, *prefix)))
            .max_by(|a, b| a.0.total_cmp(&b.0))
    };
    for (flush, counts, goal) in [(Flush::Async, &RATE_COUNTS[..], 1.2), (Flush::Sync, &QUEUE_COUNTS[..], 1.5)] {
        for &n in counts {
            if let (Some(o), Some((p, peer))) = (results.rate(flush, n, ours), best_peer(flush, n)) {
                let r = o / p;
                let _ = writeln!(
                    md,
                    "| {}, {n} queues: ≥ {goal}x the best of raft-engine and fjall | {r:.2}x {peer} | {} |",
                    flush.name(),
                    verdict(r >= goal)
                );
            }
        }
    }
    for flush in Flush::ALL {
        let mut worst: Option<(f64, u32)> = None;
        let mut missing = Vec::new();
        for &n in &QUEUE_COUNTS {
            match (results.rate(flush, n, ours), results.rate(flush, n, "rocketmq-store")) {
                (Some(o), Some(p)) => {
                    let r = o / p;
                    if worst.is_none_or(|(w, _)| r < w) {
                        worst = Some((r, n));
                    }
                }
                _ => missing.push(n.to_string()),
            }
        }
        let missing =
            if missing.is_empty() { String::new() } else { format!("; no figure at {} queues", missing.join(", ")) };
        if let Some((r, n)) = worst {
            let _ = writeln!(
                md,
                "| {}: ≥ 1.5x rocketmq-store at every N | lowest {r:.2}x (at {n} queues){missing} | {} |",
                flush.name(),
                verdict(r >= 1.5 && missing.is_empty())
            );
        }
    }
    for &n in &QUEUE_COUNTS {
        if let Some(m) = results.cell(Flush::Sync, n, ours).and_then(Cell::median) {
            let r = pct_us(&m.e2e, 0.99) / pct_us(&m.acks, 0.99);
            let _ = writeln!(
                md,
                "| sync flush, {n} queues: end-to-end p99 ≤ 2x ack p99 | {r:.2}x | {} |",
                verdict(r <= 2.0)
            );
        }
    }
    for &n in &QUEUE_COUNTS {
        let tail = |prefix| results.cell(Flush::Async, n, prefix).and_then(Cell::median).map(|m| pct_us(&m.tail, 0.99));
        let best =
            PEERS.iter().filter_map(|prefix| tail(prefix).map(|p99| (p99, *prefix))).min_by(|a, b| a.0.total_cmp(&b.0));
        if let (Some(o), Some((p, peer))) = (tail(ours), best) {
            let _ = writeln!(
                md,
                "| async flush, {n} queues: hot-tail p99 ≤ the best peer's (consumers polling raft-engine's regions, fjall's keys) | {o:.0} vs {p:.0} µs {peer} ({:.2}x) | {} |",
                o / p,
                verdict(o <= p)
            );
        }
    }
    md.push_str(
        "\nDispatch lag at a paced 100,000 messages/s (target p99 ≤ 1 ms) is measured by `cargo xtask latency` \
         (docs/message-store.md); the lag columns above are under unpaced producers, where a backlog shows as lag.\n\n",
    );
    if let Ok(analysis) = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/ANALYSIS-QUEUES.md")) {
        md.push_str(&analysis);
        md.push('\n');
    }
    md
}
