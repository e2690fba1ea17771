//! Recovery speed: scanning a log of 1 KiB records with CRC checks, in GB/s.
//! `RECOVERY_BENCH_MB` sets the log size (default 1024).

#![allow(missing_docs)]

use commitlog::{CommitLog, CommitLogConfig};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn recovery(c: &mut Criterion) {
    let mb: u64 = std::env::var("RECOVERY_BENCH_MB").ok().and_then(|v| v.parse().ok()).unwrap_or(1024);
    let dir = tempfile::tempdir().unwrap();
    let config = CommitLogConfig::builder().mapped_file_size_commit_log(128 << 20).build().unwrap();
    let log = CommitLog::open(dir.path(), config.clone()).unwrap();
    let body = vec![7u8; 1024 - commitlog::format::HEADER_SIZE];
    while log.max_offset() < mb << 20 {
        log.append(&body).unwrap();
    }
    log.shutdown().unwrap();
    let log = CommitLog::open(dir.path(), config).unwrap();
    let bytes = log.max_offset();
    let mut group = c.benchmark_group("recovery");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(bytes));
    group.bench_function(format!("scan_{mb}MiB_of_1KiB_records"), |b| {
        b.iter(|| {
            let end = commitlog::scan(log.segment_queue(), 0).unwrap();
            assert_eq!(end.end_offset, bytes);
            end.records
        })
    });
    group.finish();
}

criterion_group!(benches, recovery);
criterion_main!(benches);
