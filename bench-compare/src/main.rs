//! Side-by-side comparison with peer crates, in one process and one run:
//! `cargo xtask bench-compare [--quick]` (writes docs/benchmarks.md).
//!
//! Work, with 1 KiB records:
//! (a) durable batches: one producer, 64 records per durable wait;
//! (b) group commit: 16 producers, each waits for its own record to be durable;
//! (c) no sync: one producer appending.
//! Plus the physical limits of this machine in the same run: memcpy into an
//! already-faulted mapping, and fdatasync latency.

#![forbid(unsafe_code)]

use std::path::Path;
use std::time::Instant;

mod peers;

const RECORD: usize = 1024;

/// One measured line.
#[derive(Clone, Debug)]
pub struct Line {
    pub system: &'static str,
    pub records: u64,
    pub seconds: f64,
    /// Latency of the unit of work (a batch, a record), sorted, in nanoseconds.
    pub latencies: Vec<u64>,
}

impl Line {
    pub fn new(system: &'static str, records: u64, seconds: f64, mut latencies: Vec<u64>) -> Self {
        latencies.sort_unstable();
        Line { system, records, seconds, latencies }
    }
    pub fn rate(&self) -> f64 {
        self.records as f64 / self.seconds
    }
    pub fn mb_s(&self) -> f64 {
        self.rate() * RECORD as f64 / 1e6
    }
    pub fn pct_us(&self, q: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let i = ((self.latencies.len() as f64 * q) as usize).min(self.latencies.len() - 1);
        self.latencies[i] as f64 / 1000.0
    }
}

/// Outcome of one system on one workload.
pub enum Result {
    Measured(Line),
    NotApplicable(&'static str, &'static str),
}

pub fn scratch() -> tempfile::TempDir {
    // Real disk: the point is the sync path. Set BENCH_DIR to choose the file system.
    match std::env::var_os("BENCH_DIR") {
        Some(dir) => tempfile::tempdir_in(dir).expect("BENCH_DIR"),
        None => tempfile::tempdir_in(".").expect("temporary directory"),
    }
}

fn ours_config(flush: commitlog::FlushDiskType) -> commitlog::CommitLogConfig {
    let mut flush_config = commitlog::FlushConfig::default();
    if std::env::var_os("BENCH_NO_BACKGROUND_FLUSH").is_some() {
        flush_config.flush_interval_commit_log_ms = 3_600_000;
        flush_config.flush_commit_log_thorough_interval_ms = 3_600_000;
    }
    commitlog::CommitLogConfig::builder()
        .flush(flush_config)
        .mapped_file_size_commit_log(128 << 20)
        .flush_disk_type(flush)
        .warm_mapped_file_enable(std::env::var_os("BENCH_WARM").is_some())
        .build()
        .expect("config")
}

/// (a) ours: sync flush, a batch of 64 per durable wait.
fn ours_durable_batches(batches: usize) -> Line {
    let dir = scratch();
    let log = commitlog::CommitLog::open(dir.path(), ours_config(commitlog::FlushDiskType::SyncFlush)).expect("open");
    let bodies: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8; RECORD]).collect();
    let mut lat = Vec::with_capacity(batches);
    let start = Instant::now();
    for _ in 0..batches {
        let t = Instant::now();
        log.append_batch(&bodies).expect("append").durability.wait().expect("durable");
        lat.push(t.elapsed().as_nanos() as u64);
    }
    let seconds = start.elapsed().as_secs_f64();
    log.shutdown().expect("shutdown");
    Line::new("commitlog (this)", (batches * 64) as u64, seconds, lat)
}

/// (b) ours: 16 producers, each waits for its own record.
fn ours_group_commit(per_producer: usize) -> Line {
    let dir = scratch();
    let log = commitlog::CommitLog::open(dir.path(), ours_config(commitlog::FlushDiskType::SyncFlush)).expect("open");
    let start = Instant::now();
    let threads: Vec<_> = (0..16)
        .map(|p| {
            let log = log.clone();
            std::thread::spawn(move || {
                let body = vec![p as u8; RECORD];
                let mut lat = Vec::with_capacity(per_producer);
                for _ in 0..per_producer {
                    let t = Instant::now();
                    log.append(&body).expect("append").durability.wait().expect("durable");
                    lat.push(t.elapsed().as_nanos() as u64);
                }
                lat
            })
        })
        .collect();
    let lat: Vec<u64> = threads.into_iter().flat_map(|t| t.join().expect("producer")).collect();
    let seconds = start.elapsed().as_secs_f64();
    log.shutdown().expect("shutdown");
    Line::new("commitlog (this)", lat.len() as u64, seconds, lat)
}

/// (c) ours: async flush, one producer.
fn ours_no_sync(records: usize) -> Line {
    let dir = scratch();
    let log = commitlog::CommitLog::open(dir.path(), ours_config(commitlog::FlushDiskType::AsyncFlush)).expect("open");
    let body = vec![7u8; RECORD];
    let mut lat = Vec::with_capacity(records);
    let start = Instant::now();
    for _ in 0..records {
        let t = Instant::now();
        log.append(&body).expect("append");
        lat.push(t.elapsed().as_nanos() as u64);
    }
    let seconds = start.elapsed().as_secs_f64();
    log.shutdown().expect("shutdown");
    Line::new("commitlog (this)", records as u64, seconds, lat)
}

/// memcpy of 1 KiB records into an already-faulted anonymous mapping.
fn memcpy_limit(records: usize) -> Line {
    let len = records * RECORD;
    let mut map = memmap2::MmapMut::map_anon(len).expect("map");
    map.iter_mut().step_by(4096).for_each(|b| *b = 1); // fault every page in
    let body = vec![7u8; RECORD];
    let start = Instant::now();
    for i in 0..records {
        map[i * RECORD..(i + 1) * RECORD].copy_from_slice(&body);
    }
    std::hint::black_box(&map);
    Line::new("memcpy into a faulted mapping", records as u64, start.elapsed().as_secs_f64(), Vec::new())
}

/// fdatasync after overwriting 4 KiB of a preallocated file.
fn fdatasync_limit(samples: usize) -> Line {
    use std::os::unix::fs::FileExt;
    let dir = scratch();
    let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(dir.path().join("f")).expect("file");
    file.set_len(64 << 20).expect("len");
    file.write_all_at(&vec![0u8; 64 << 20], 0).expect("fill");
    file.sync_all().expect("sync");
    let page = vec![9u8; 4096];
    let mut lat = Vec::with_capacity(samples);
    let start = Instant::now();
    for i in 0..samples {
        file.write_all_at(&page, (i as u64 * 4096) % (64 << 20)).expect("write");
        let t = Instant::now();
        file.sync_data().expect("fdatasync");
        lat.push(t.elapsed().as_nanos() as u64);
    }
    Line::new("fdatasync (4 KiB overwrite, preallocated)", samples as u64, start.elapsed().as_secs_f64(), lat)
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string()))
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| s.lines().next().map(|l| l.split_whitespace().nth(1).unwrap_or("0").parse::<u64>().unwrap_or(0) / 1024 / 1024))
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
    let fs = fs_type(Path::new("."));
    format!("{cores} x {cpu}, {mem} GiB RAM, Linux {kernel}, bench directory on {fs}")
}

fn fs_type(path: &Path) -> String {
    let abs = std::fs::canonicalize(path).unwrap_or_default();
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && abs.starts_with(f[1])).then(|| (f[1].len(), format!("{} ({})", f[2], f[0])))
        })
        .max()
        .map(|(_, s)| s)
        .unwrap_or_else(|| "unknown".into())
}

fn fmt_ratio(ours: &Line, peer: &Result) -> String {
    match peer {
        Result::Measured(p) => format!("{:.2}x", ours.rate() / p.rate()),
        Result::NotApplicable(..) => "-".into(),
    }
}

fn table(title: &str, ours: &Line, peers: &[Result], latency: &str) -> String {
    let mut out = format!("### {title}\n\n| system | records/s | MB/s | {latency} p50 / p99 / p99.9 (µs) | ours / peer |\n|---|---|---|---|---|\n");
    let row = |l: &Line, ratio: String| {
        format!(
            "| {} | {:.0} | {:.1} | {:.1} / {:.1} / {:.1} | {ratio} |\n",
            l.system,
            l.rate(),
            l.mb_s(),
            l.pct_us(0.5),
            l.pct_us(0.99),
            l.pct_us(0.999)
        )
    };
    out.push_str(&row(ours, "-".into()));
    for p in peers {
        match p {
            Result::Measured(l) => out.push_str(&row(l, fmt_ratio(ours, p))),
            Result::NotApplicable(system, why) => out.push_str(&format!("| {system} | n/a | n/a | {why} | n/a |\n")),
        }
    }
    out
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let scale = if quick { 1 } else { 4 };
    let out_path = std::env::args().skip_while(|a| a != "--out").nth(1);
    let started = Instant::now();

    eprintln!("limits...");
    let memcpy = memcpy_limit(1 << 20);
    let fsync = fdatasync_limit(500 * scale);

    eprintln!("(a) durable batches...");
    let batches = 200 * scale;
    let a_ours = ours_durable_batches(batches);
    let a_peers = vec![peers::rocketmq_durable_batches(batches), peers::raft_engine_durable_batches(batches), peers::okaywal_durable_batches(batches)];

    eprintln!("(b) group commit...");
    let per = 100 * scale;
    let b_ours = ours_group_commit(per);
    let b_peers = vec![
        Result::NotApplicable("rocketmq-store 1.0.0", "no multi-producer durable wait in its MappedFileQueue"),
        peers::raft_engine_group_commit(per),
        peers::okaywal_group_commit(per),
    ];

    eprintln!("(c) no sync...");
    let records = 200_000 * scale;
    let c_ours = ours_no_sync(records);
    let c_peers = vec![
        peers::rocketmq_no_sync(records),
        peers::raft_engine_no_sync(records),
        Result::NotApplicable("okaywal 0.3.1", "always syncs on commit"),
    ];

    let mut md = String::new();
    md.push_str("# Benchmarks\n\n");
    md.push_str("Produced by `cargo xtask bench-compare` (the comparison runner in `bench-compare/`), all systems in one process, one after another, on the same directory's file system. Ratios are ours / peer throughput from this one run; runs on this shared VM vary by 10-30 %, so compare ratios, not absolute numbers across runs.\n\n");
    md.push_str(&format!("Machine: {}.\n\nRun took {:.0?}{}.\n\n", machine(), started.elapsed(), if quick { " (--quick)" } else { "" }));
    md.push_str("## Physical limits in the same run\n\n| line | records/s | MB/s | latency p50 / p99 (µs) |\n|---|---|---|---|\n");
    md.push_str(&format!("| {} | {:.0} | {:.0} | |\n", memcpy.system, memcpy.rate(), memcpy.mb_s()));
    md.push_str(&format!("| {} | | | {:.1} / {:.1} |\n\n", fsync.system, fsync.pct_us(0.5), fsync.pct_us(0.99)));
    md.push_str("## Results (1 KiB records)\n\n");
    md.push_str(&table("(a) durable batches: one producer, 64 records per durable wait", &a_ours, &a_peers, "batch latency"));
    md.push_str(&format!("\nOurs reaches {:.1} % of the preallocated-fdatasync line ({:.0} MB/s if every 64 KiB batch paid one p50 fdatasync).\n\n", 100.0 * a_ours.mb_s() / (64.0 * RECORD as f64 / (fsync.pct_us(0.5) / 1e6) / 1e6), 64.0 * RECORD as f64 / (fsync.pct_us(0.5) / 1e6) / 1e6));
    md.push_str(&table("(b) group commit: 16 producers, each waits for its own record", &b_ours, &b_peers, "ack latency"));
    md.push_str(&format!("\nOur ack p99 is {:.1}x the fdatasync p99 of the same run.\n\n", b_ours.pct_us(0.99) / fsync.pct_us(0.99)));
    md.push_str(&table("(c) no sync: one producer", &c_ours, &c_peers, "append latency"));
    md.push_str(&format!("\nOurs reaches {:.1} % of the faulted-memcpy line.\n", 100.0 * c_ours.rate() / memcpy.rate()));
    // The maintained analysis goes with every run's numbers.
    if let Ok(analysis) = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/ANALYSIS.md")) {
        md.push('\n');
        md.push_str(&analysis);
    }
    md.push_str("\nCommand: `cargo xtask bench-compare` (add `--quick` for a short run; `BENCH_DIR` picks the file system, `BENCH_WARM=1` turns segment warm-up on, `BENCH_NO_BACKGROUND_FLUSH=1` keeps the async flusher idle).\n");
    println!("{md}");
    if let Some(path) = out_path {
        std::fs::write(&path, &md).expect("write results");
        eprintln!("wrote {path}");
    }
}
