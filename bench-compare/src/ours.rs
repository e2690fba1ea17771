//! This project's rows: the log on each write path.

use std::time::Instant;

use commitlog::{CommitLog, CommitLogConfig, FlushConfig, FlushDiskType};

use crate::{scratch, Line, Outcome, Sizes, System, BATCH, PRODUCERS, RECORD, SEGMENT};

/// The log writing with pwrite + fdatasync (the default).
pub const PWRITE: System = System {
    name: "commitlog, pwrite (default)",
    ours: true,
    a: |s| durable_batches(s, true),
    b: |s| group_commit(s, true),
    c: |s| no_sync(s, true),
};

/// The log writing through a read-write mapping, synced with msync.
pub const MMAP: System = System {
    name: "commitlog, mmap",
    ours: true,
    a: |s| durable_batches(s, false),
    b: |s| group_commit(s, false),
    c: |s| no_sync(s, false),
};

fn config(flush: FlushDiskType, write_without_mmap: bool) -> CommitLogConfig {
    let mut flush_config = FlushConfig::default();
    if std::env::var_os("BENCH_NO_BACKGROUND_FLUSH").is_some() {
        flush_config.flush_interval_commit_log_ms = 3_600_000;
        flush_config.flush_commit_log_thorough_interval_ms = 3_600_000;
    }
    CommitLogConfig::builder()
        .flush(flush_config)
        .mapped_file_size_commit_log(SEGMENT)
        .flush_disk_type(flush)
        .write_without_mmap(write_without_mmap)
        .warm_mapped_file_enable(std::env::var_os("BENCH_WARM").is_some())
        .transient_store_pool(std::env::var_os("BENCH_POOL").is_some(), 3)
        .build()
        .expect("config")
}

fn bodies() -> Vec<Vec<u8>> {
    (0..BATCH).map(|i| vec![i as u8; RECORD]).collect()
}

/// (a): sync flush, a batch of 64 per durable wait.
fn durable_batches(sizes: &Sizes, write_without_mmap: bool) -> Outcome {
    let dir = scratch();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush, write_without_mmap)).expect("open");
    let bodies = bodies();
    let mut lat = Vec::with_capacity(sizes.a_batches);
    let start = Instant::now();
    for _ in 0..sizes.a_batches {
        let t = Instant::now();
        log.append_batch(&bodies).expect("append").durability.wait().expect("durable");
        lat.push(t.elapsed().as_nanos() as u64);
    }
    let seconds = start.elapsed().as_secs_f64();
    log.shutdown().expect("shutdown");
    Outcome::Measured(Line::new((sizes.a_batches * BATCH) as u64, seconds, lat))
}

/// (b): 16 producers, each waits for its own record.
fn group_commit(sizes: &Sizes, write_without_mmap: bool) -> Outcome {
    let dir = scratch();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush, write_without_mmap)).expect("open");
    let per_producer = sizes.b_per_producer;
    let flushes_before = log.flush_stats().group_commit.flushes;
    let start = Instant::now();
    let threads: Vec<_> = (0..PRODUCERS)
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
    let flushes = log.flush_stats().group_commit.flushes - flushes_before;
    log.shutdown().expect("shutdown");
    let mut line = Line::new(lat.len() as u64, seconds, lat);
    line.records_per_sync = (flushes > 0).then(|| line.records as f64 / flushes as f64);
    Outcome::Measured(line)
}

/// (c): async flush, batches of 64.
fn no_sync(sizes: &Sizes, write_without_mmap: bool) -> Outcome {
    let dir = scratch();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::AsyncFlush, write_without_mmap)).expect("open");
    let bodies = bodies();
    let mut lat = Vec::with_capacity(sizes.c_batches);
    let start = Instant::now();
    for _ in 0..sizes.c_batches {
        let t = Instant::now();
        log.append_batch(&bodies).expect("append");
        lat.push(t.elapsed().as_nanos() as u64);
    }
    let seconds = start.elapsed().as_secs_f64();
    log.shutdown().expect("shutdown");
    Outcome::Measured(Line::new((sizes.c_batches * BATCH) as u64, seconds, lat))
}
