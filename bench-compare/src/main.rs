//! Side-by-side comparison with peer crates, in one process and one run:
//! `cargo xtask bench-compare [--quick] [--baseline FILE]` (writes
//! docs/benchmarks.md, its plot docs/benchmarks.svg and the results document
//! docs/benchmarks.json; with a baseline document, the ratios to it).
//!
//! Work, with 1 KiB records:
//! (a) durable batches: one producer, 64 records per durable wait;
//! (b) group commit: 16 producers, each waits for its own record to be durable;
//! (c) no sync: one producer appending batches of 64;
//! (c') no sync, single records: one producer, 64 appends of one record each
//!     per timed unit (the API a caller without batches uses; where the log's
//!     default write path makes one `pwrite` per record);
//! (d) many queues: 4 producers putting 1 KiB messages round-robin over N
//!     queues of one store, async and sync flush (see `queues.rs`).
//!
//! Every (system, workload) runs `ROUNDS` times, interleaved: round after round,
//! each system once per workload, the order rotated each round, so drift of this
//! shared machine spreads over all systems. The physical lines run in every round
//! too: memcpy into a faulted mapping, 64 KiB `pwrite` + `fdatasync` into blocks
//! written before, `fdatasync` of a 4 KiB overwrite, and the simplest group
//! commit of (b)'s 16 producers (a `pwrite` each under a lock, a waiter's
//! `fdatasync` for all). Reported: the median run
//! (by throughput) with the min and max, and the median run's latencies.

#![forbid(unsafe_code)]

use std::path::Path;
use std::time::Instant;

// The results document, shared with `commitlog bench --json`.
#[path = "../../crates/commitlog-cli/src/bench_doc.rs"]
mod bench_doc;
mod ours;
mod peers;
mod physical;
mod queues;
mod queues_ours;
mod queues_peers;
mod queues_rocketmq;
mod report;
mod report_queues;

/// Record body size.
pub const RECORD: usize = 1024;
/// Records per batch in (a) and (c).
pub const BATCH: usize = 64;
/// Producers in (b).
pub const PRODUCERS: usize = 16;
/// Segment size of the logs that have one (ours, rocketmq-store).
pub const SEGMENT: usize = 128 << 20;

/// One measured run.
#[derive(Clone, Debug)]
pub struct Line {
    /// Records written (for the physical lines: 1 KiB units).
    pub records: u64,
    /// Wall time of the run.
    pub seconds: f64,
    /// Latency of the unit of work (a batch, a record, a sync), sorted, in ns.
    pub latencies: Vec<u64>,
    /// Records per sync, where the system reports it.
    pub records_per_sync: Option<f64>,
    /// CPU time of the whole process per record during the run (µs), all threads.
    pub cpu_us_per_record: Option<f64>,
}

impl Line {
    pub fn new(records: u64, seconds: f64, mut latencies: Vec<u64>) -> Self {
        latencies.sort_unstable();
        Line { records, seconds, latencies, records_per_sync: None, cpu_us_per_record: None }
    }
    pub fn rate(&self) -> f64 {
        self.records as f64 / self.seconds
    }
    pub fn mb_s(&self) -> f64 {
        self.rate() * RECORD as f64 / 1e6
    }
    /// The `q` quantile of the latencies, in µs.
    pub fn pct_us(&self, q: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let i = ((self.latencies.len() as f64 * q) as usize).min(self.latencies.len() - 1);
        self.latencies[i] as f64 / 1000.0
    }
    pub fn max_us(&self) -> f64 {
        self.latencies.last().map_or(f64::NAN, |&l| l as f64 / 1000.0)
    }
}

/// Outcome of one system on one workload.
pub enum Outcome {
    Measured(Line),
    /// The system cannot do this work: why.
    NotApplicable(&'static str),
}

/// How much work one run does.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// (a): batches of 64 per run.
    pub a_batches: usize,
    /// (b): records per producer per run.
    pub b_per_producer: usize,
    /// (c): batches of 64 per run.
    pub c_batches: usize,
}

/// A system able to run some of the workloads.
pub struct System {
    pub name: &'static str,
    /// True for this project's rows.
    pub ours: bool,
    pub a: fn(&Sizes) -> Outcome,
    pub b: fn(&Sizes) -> Outcome,
    pub c: fn(&Sizes) -> Outcome,
    /// (c'): as (c), one record per append.
    pub c_single: fn(&Sizes) -> Outcome,
}

/// The workloads, in report order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    A,
    B,
    C,
    CSingle,
}

impl Workload {
    pub const ALL: [Workload; 4] = [Workload::A, Workload::B, Workload::C, Workload::CSingle];
    fn run(self, system: &System, sizes: &Sizes) -> Outcome {
        match self {
            Workload::A => (system.a)(sizes),
            Workload::B => (system.b)(sizes),
            Workload::C => (system.c)(sizes),
            Workload::CSingle => (system.c_single)(sizes),
        }
    }
}

pub fn scratch() -> tempfile::TempDir {
    // Real disk: the point is the sync path. Set BENCH_DIR to choose the file system.
    match std::env::var_os("BENCH_DIR") {
        Some(dir) => tempfile::tempdir_in(dir).expect("BENCH_DIR"),
        None => tempfile::tempdir_in(".").expect("temporary directory"),
    }
}

/// Every run of one system on one workload.
pub struct Runs {
    pub system: &'static str,
    pub ours: bool,
    pub runs: Vec<Line>,
    pub not_applicable: Option<&'static str>,
}

impl Runs {
    /// The median run by throughput.
    pub fn median(&self) -> Option<&Line> {
        let mut sorted: Vec<&Line> = self.runs.iter().collect();
        sorted.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
        sorted.get(sorted.len() / 2).copied()
    }
    pub fn min_rate(&self) -> f64 {
        self.runs.iter().map(Line::rate).fold(f64::INFINITY, f64::min)
    }
    pub fn max_rate(&self) -> f64 {
        self.runs.iter().map(Line::rate).fold(0.0, f64::max)
    }
    /// (max - min) / median of the throughputs.
    pub fn spread(&self) -> f64 {
        self.median().map_or(f64::NAN, |m| (self.max_rate() - self.min_rate()) / m.rate())
    }
}

/// The physical lines of all rounds.
#[derive(Default)]
pub struct Physical {
    pub memcpy: Vec<Line>,
    pub pwrite_fdatasync: Vec<Line>,
    pub pwrite_fdatasync_fallocated: Vec<Line>,
    pub fdatasync_4k: Vec<Line>,
    pub group_commit: Vec<Line>,
}

fn median_line(lines: &[Line]) -> &Line {
    let mut sorted: Vec<&Line> = lines.iter().collect();
    sorted.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
    sorted[sorted.len() / 2]
}

/// Where the runs write: `BENCH_DIR`, or the working directory.
fn bench_dir() -> std::path::PathBuf {
    std::env::var_os("BENCH_DIR").map_or_else(|| ".".into(), std::path::PathBuf::from)
}

/// User + system CPU time of this process so far (all threads, exited ones
/// included: `CLOCK_PROCESS_CPUTIME_ID`, nanosecond resolution).
pub fn process_cpu_seconds() -> Option<f64> {
    cpu_time::ProcessTime::try_now().ok().map(|t| t.as_duration().as_secs_f64())
}

/// Between runs: write back what the last one left and let the disk go idle, so
/// no run pays for its predecessor's writeback or deletes (the bench file system
/// may discard freed blocks at its next journal commit).
fn settle() {
    let _ = std::process::Command::new("sync").status();
    std::thread::sleep(std::time::Duration::from_millis(200));
}

/// `--cpu-load N`: N busy loops (`sh -c 'while :; do :; done'`, one process
/// each) run beside the whole benchmark, as compilers or other tenants would;
/// killed when the run ends.
struct CpuLoad(Vec<std::process::Child>);

impl CpuLoad {
    fn start(loops: usize) -> Self {
        CpuLoad(
            (0..loops)
                .map(|_| {
                    std::process::Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .spawn()
                        .expect("start a busy loop (sh)")
                })
                .collect(),
        )
    }
}

impl Drop for CpuLoad {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn arg(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

/// `--only SYSTEM[,SYSTEM…][:WORKLOADS]` (e.g. `--only pwrite:c`, `--only
/// default,okaywal:ab`; `s` is (c')) runs what matches: for profiling one
/// system, or comparing two. Reports from such runs are partial.
fn wanted(system: &str, workload: Workload) -> bool {
    let letter = match workload {
        Workload::A => 'a',
        Workload::B => 'b',
        Workload::C => 'c',
        Workload::CSingle => 's',
    };
    wanted_letter(system, letter)
}

/// [`wanted`] for a workload's letter (`d` for the queues).
fn wanted_letter(system: &str, letter: char) -> bool {
    let Some(only) = arg("--only") else {
        return true;
    };
    let (names, workloads) = only.split_once(':').unwrap_or((&only, "abcsd"));
    names.split(',').any(|name| system.contains(name)) && workloads.contains(letter)
}

/// Whether (d) runs at `queues` queues: `BENCH_D_QUEUES` (a comma-separated
/// list of the counts, for a pair of builds side by side) or every count.
fn d_queue_count_wanted(queues: u32) -> bool {
    std::env::var("BENCH_D_QUEUES")
        .map_or(true, |wanted| wanted.split(',').any(|n| n.trim().parse::<u32>().is_ok_and(|n| n == queues)))
}

/// Whether (d) runs under `flush`: `BENCH_D_FLUSH` (`async` or `sync`) picks
/// one mode, for profiling; both by default.
fn d_flush_wanted(flush: queues::Flush) -> bool {
    std::env::var("BENCH_D_FLUSH").map_or(true, |wanted| flush.name().starts_with(wanted.trim()))
}

/// Where `cargo xtask raft-bench` keeps its section of docs/benchmarks.md.
const RAFT_START: &str = "<!-- raft-bench:start -->";
const RAFT_END: &str = "<!-- raft-bench:end -->";
/// Where its storage-API section is.
const RAFT_API_START: &str = "<!-- raft-api:start -->";
const RAFT_API_END: &str = "<!-- raft-api:end -->";

/// The used share of a file system, in percent, at which rocketmq-store's
/// message store refuses puts (`ServiceNotAvailable`): each of its (d) runs
/// would then wait out its timeout and the run's figures mean nothing.
const PEER_DISK_REFUSAL_PERCENT: u32 = 75;

/// The used share, in percent, of the file system the runs write to (where
/// [`scratch`] makes its directories), as `df` shows it; `None` if `df`
/// cannot say.
fn scratch_disk_used_percent() -> Option<u32> {
    let dir = std::env::var_os("BENCH_DIR").unwrap_or_else(|| ".".into());
    let out = std::process::Command::new("df").arg("--output=pcent").arg(&dir).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    text.lines().nth(1)?.trim().trim_end_matches('%').parse().ok()
}

/// Refuses to start on a file system so full that a peer refuses puts; warns
/// when a run's own writes (a few GiB) could take it there.
fn check_scratch_disk() {
    let Some(used) = scratch_disk_used_percent() else {
        eprintln!("note: could not read the scratch file system's use (df); not checked");
        return;
    };
    if used >= PEER_DISK_REFUSAL_PERCENT {
        eprintln!(
            "the scratch file system is {used} % full: rocketmq-store refuses puts from {PEER_DISK_REFUSAL_PERCENT} % on, \
             which makes its runs wait out their timeouts and their figures meaningless. Free space, or set \
             BENCH_DIR to a directory on another file system."
        );
        std::process::exit(2);
    }
    if used + 10 >= PEER_DISK_REFUSAL_PERCENT {
        eprintln!(
            "warning: the scratch file system is {used} % full; rocketmq-store refuses puts from \
             {PEER_DISK_REFUSAL_PERCENT} % on, and a run writes a few GiB"
        );
    }
}

fn main() {
    check_scratch_disk();
    if let Ok(flush) = std::env::var("BENCH_D_FLUSH") {
        if !matches!(flush.trim(), "async" | "sync") {
            eprintln!("BENCH_D_FLUSH is {flush:?}: it takes async or sync");
            std::process::exit(2);
        }
    }
    let quick = std::env::args().any(|a| a == "--quick");
    let rounds: usize = arg("--rounds").and_then(|r| r.parse().ok()).unwrap_or(if quick { 2 } else { 5 });
    let sizes = if quick {
        Sizes { a_batches: 300, b_per_producer: 150, c_batches: 2_000 }
    } else {
        Sizes { a_batches: 2_000, b_per_producer: 1_500, c_batches: 12_000 }
    };
    let d_sizes = if let Some(async_per_producer) = std::env::var("BENCH_D_MESSAGES").ok().and_then(|n| n.parse().ok())
    {
        queues::DSizes { async_per_producer, sync_per_producer: (async_per_producer / 5).max(1) }
    } else if quick {
        queues::DSizes { async_per_producer: 2_000, sync_per_producer: 400 }
    } else {
        queues::DSizes { async_per_producer: 5_000, sync_per_producer: 1_000 }
    };
    let d_systems = [
        queues_ours::MESSAGE_STORE,
        queues_ours::MESSAGE_STORE_ALONE,
        queues_ours::MESSAGE_STORE_TAILED_NAPS,
        queues_ours::MESSAGE_STORE_NAPS,
        queues_ours::MESSAGE_STORE_NO_KEY_INDEX,
        queues_rocketmq::LOCAL_FILE_MESSAGE_STORE,
        queues_peers::RAFT_ENGINE_REGIONS,
        queues_peers::FJALL_KEYED,
        queues_peers::FILE_PER_QUEUE,
    ];
    let mut d_results = report_queues::Results::new(&d_systems);
    let out_path = arg("--out");
    // A results document of an earlier run (this tool's or `commitlog bench
    // --json`): read before the run, so a wrong file costs nothing.
    let baseline = arg("--baseline").map(|path| match bench_doc::Doc::read(Path::new(&path)) {
        Ok(doc) => doc,
        Err(e) => {
            eprintln!("baseline {path}: {e}");
            std::process::exit(2);
        }
    });
    let cpu_load: usize = arg("--cpu-load").and_then(|n| n.parse().ok()).unwrap_or(0);
    let _load = CpuLoad::start(cpu_load);
    let started = Instant::now();

    let systems = [
        ours::PWRITE,
        ours::ALLOCATED,
        ours::GROUPS_OFF_ROW,
        ours::ROUNDS_IN_SERVICE_ROW,
        ours::MMAP,
        ours::RECYCLING,
        ours::PREPARED,
        ours::POOL,
        ours::BATCH_WRITER,
        ours::PREPARED_MAPPING,
        peers::ROCKETMQ,
        peers::RAFT_ENGINE,
        peers::OKAYWAL,
    ];
    let mut results: Vec<Vec<Runs>> = Workload::ALL
        .iter()
        .map(|_| {
            systems
                .iter()
                .map(|s| Runs { system: s.name, ours: s.ours, runs: Vec::new(), not_applicable: None })
                .collect()
        })
        .collect();
    let mut physical = Physical::default();

    for round in 0..rounds {
        if arg("--only").is_none() || round == 0 {
            // Under `--only` (profiling) once, so the profile is of the system.
            eprintln!("round {}/{rounds}: physical lines", round + 1);
            physical.memcpy.push(physical::memcpy_into_faulted_mapping(256 << 10));
            physical.pwrite_fdatasync.push(physical::pwrite_fdatasync_written(sizes.a_batches));
            physical.pwrite_fdatasync_fallocated.push(physical::pwrite_fdatasync_fallocated(sizes.a_batches));
            physical.fdatasync_4k.push(physical::fdatasync_4k(500));
            physical.group_commit.push(physical::group_commit(sizes.b_per_producer));
        }
        for (w, workload) in Workload::ALL.iter().enumerate() {
            for i in 0..systems.len() {
                // Rotate the order every round.
                let s = (i + round) % systems.len();
                let system = &systems[s];
                if !wanted(system.name, *workload) {
                    continue;
                }
                eprintln!("round {}/{rounds}: {workload:?} {}", round + 1, system.name);
                let cpu_before = process_cpu_seconds();
                match workload.run(system, &sizes) {
                    Outcome::Measured(mut line) => {
                        if let (Some(before), Some(after)) = (cpu_before, process_cpu_seconds()) {
                            line.cpu_us_per_record = Some((after - before) * 1e6 / line.records as f64);
                        }
                        results[w][s].runs.push(line)
                    }
                    Outcome::NotApplicable(why) => results[w][s].not_applicable = Some(why),
                }
                settle();
            }
        }
        for flush in queues::Flush::ALL.into_iter().filter(|&f| d_flush_wanted(f)) {
            for &n in &queues::QUEUE_COUNTS {
                if !d_queue_count_wanted(n) {
                    continue;
                }
                for i in 0..d_systems.len() {
                    let system = &d_systems[(i + round) % d_systems.len()];
                    if !wanted_letter(system.name, 'd') {
                        continue;
                    }
                    eprintln!("round {}/{rounds}: (d) {} {n} queues, {}", round + 1, flush.name(), system.name);
                    let outcome = (system.run)(n, flush, d_sizes.per_producer(flush));
                    if let Err(e) = &outcome {
                        eprintln!("  failed: {e}");
                    }
                    d_results.push(system.name, flush, n, outcome);
                    settle();
                }
            }
        }
    }

    let context = report::Context {
        machine: bench_doc::machine(&bench_dir()),
        took: started.elapsed(),
        rounds,
        quick,
        cpu_load,
        plot: out_path
            .as_deref()
            .and_then(|path| {
                Path::new(path).with_extension("svg").file_name().map(|n| n.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "benchmarks.svg".into()),
        sizes,
        memcpy: median_line(&physical.memcpy).clone(),
        pwrite_fdatasync: median_line(&physical.pwrite_fdatasync).clone(),
        pwrite_fdatasync_fallocated: median_line(&physical.pwrite_fdatasync_fallocated).clone(),
        fdatasync_4k: median_line(&physical.fdatasync_4k).clone(),
        group_commit: median_line(&physical.group_commit).clone(),
    };
    let doc = bench_doc::Doc::new(&bench_dir(), [report::rows(&results), d_results.rows()].concat());
    let mut md = report::markdown(&context, &results);
    if d_systems.iter().any(|system| wanted_letter(system.name, 'd')) {
        md.push_str(&report_queues::markdown(&d_results, &d_sizes, rounds));
    }
    if let Some(baseline) = &baseline {
        md.push_str("\n## Against the baseline\n\n");
        md.push_str(&bench_doc::ratio_table(&doc, baseline));
    }
    println!("{md}");
    if let Some(path) = out_path {
        // The replicated-log sections come from their own run (`cargo xtask
        // raft-bench`: the cluster, and the storage API) and stay as they were.
        let mut md = md;
        if let Ok(old) = std::fs::read_to_string(&path) {
            for (start, end) in [(RAFT_START, RAFT_END), (RAFT_API_START, RAFT_API_END)] {
                if let (Some(a), Some(b)) = (old.find(start), old.find(end)) {
                    md.push('\n');
                    md.push_str(&old[a..b + end.len()]);
                    md.push('\n');
                }
            }
        }
        std::fs::write(&path, &md).expect("write results");
        let svg_path = Path::new(&path).with_extension("svg");
        std::fs::write(&svg_path, bench_doc::svg(&doc, baseline.as_ref())).expect("write plot");
        let json_path = Path::new(&path).with_extension("json");
        std::fs::write(&json_path, serde_json::to_string_pretty(&doc).expect("serialisable")).expect("write document");
        eprintln!("wrote {path}, {} and {}", svg_path.display(), json_path.display());
    }
}
