//! Criterion benchmarks: async append, sync group commit, reads, iteration,
//! recovery, and segment roll-over. `cargo bench -p commitlog-bench`.
//! `RECOVERY_BENCH_MB` sets the recovery log size (default 1024).

#![forbid(unsafe_code)]
// criterion's macros generate undocumented items.
#![allow(missing_docs)]

use std::time::{Duration, Instant};

use commitlog::FlushDiskType;
use commitlog_bench::{open, percentile_us};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

/// Async append: record sizes x producers.
fn async_append(c: &mut Criterion) {
    let mut group = c.benchmark_group("async_append");
    group.sample_size(10);
    for size in [128usize, 1024, 16 * 1024] {
        for producers in [1usize, 4] {
            let per = (64 << 20) / size / producers; // 64 MiB per sample
            group.throughput(Throughput::Bytes((per * producers * size) as u64));
            group.bench_with_input(
                BenchmarkId::new(format!("{size}B"), format!("{producers}p")),
                &(size, producers),
                |b, &(size, producers)| {
                    b.iter_custom(|iters| {
                        let mut total = Duration::ZERO;
                        for _ in 0..iters {
                            let dir = tempfile::tempdir().unwrap();
                            let log = open(dir.path(), 256 << 20, FlushDiskType::AsyncFlush, true, true);
                            let start = Instant::now();
                            let threads: Vec<_> = (0..producers)
                                .map(|_| {
                                    let log = log.clone();
                                    std::thread::spawn(move || {
                                        let body = vec![7u8; size];
                                        for _ in 0..per {
                                            log.append(&body).unwrap();
                                        }
                                    })
                                })
                                .collect();
                            threads.into_iter().for_each(|t| t.join().unwrap());
                            total += start.elapsed();
                            log.shutdown().unwrap();
                        }
                        total
                    })
                },
            );
        }
    }
    group.finish();
}

/// Sync group commit: producers each wait for their own 1 KiB record.
fn group_commit(c: &mut Criterion) {
    let mut group = c.benchmark_group("sync_group_commit");
    group.sample_size(10);
    for producers in [1usize, 4, 16] {
        let per = 2000 / producers;
        group.throughput(Throughput::Elements((per * producers) as u64));
        let mut latencies = Vec::new();
        group.bench_function(format!("{producers}p"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let dir = tempfile::tempdir().unwrap();
                    let log = open(dir.path(), 64 << 20, FlushDiskType::SyncFlush, true, true);
                    let start = Instant::now();
                    let threads: Vec<_> = (0..producers)
                        .map(|_| {
                            let log = log.clone();
                            std::thread::spawn(move || {
                                let body = vec![7u8; 1024];
                                (0..per)
                                    .map(|_| {
                                        let t = Instant::now();
                                        log.append(&body).unwrap().durability.wait().unwrap();
                                        t.elapsed().as_nanos() as u64
                                    })
                                    .collect::<Vec<_>>()
                            })
                        })
                        .collect();
                    latencies.extend(threads.into_iter().flat_map(|t| t.join().unwrap()));
                    total += start.elapsed();
                    let stats = log.flush_stats().group_commit;
                    log.shutdown().unwrap();
                    let _ = stats;
                }
                total
            })
        });
        latencies.sort_unstable();
        if !latencies.is_empty() {
            println!(
                "sync_group_commit/{producers}p: ack latency p50 {:.0} µs, p99 {:.0} µs, p99.9 {:.0} µs",
                percentile_us(&latencies, 0.5),
                percentile_us(&latencies, 0.99),
                percentile_us(&latencies, 0.999)
            );
        }
    }
    group.finish();
}

/// Reads by offset and iteration over 64 MiB of 1 KiB records.
fn reads(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), 64 << 20, FlushDiskType::AsyncFlush, false, false);
    let body = vec![7u8; 1024 - 32];
    let offsets: Vec<u64> = (0..65_536).map(|_| log.append(&body).unwrap().wrote_offset).collect();
    let mut group = c.benchmark_group("read");
    group.throughput(Throughput::Elements(offsets.len() as u64));
    group.sample_size(10);
    group.bench_function("by_offset_1KiB", |b| {
        b.iter(|| offsets.iter().map(|&o| log.read(o).unwrap().body.len()).sum::<usize>())
    });
    group.bench_function("iterate_1KiB", |b| b.iter(|| log.iter_from(0).map(|r| r.unwrap().body.len()).sum::<usize>()));
    group.finish();
    log.shutdown().unwrap();
}

/// Recovery: scanning a log of 1 KiB records with CRC checks.
fn recovery(c: &mut Criterion) {
    let mb: u64 = std::env::var("RECOVERY_BENCH_MB").ok().and_then(|v| v.parse().ok()).unwrap_or(1024);
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), 128 << 20, FlushDiskType::AsyncFlush, true, false);
    let body = vec![7u8; 1024 - 32];
    while log.max_offset() < mb << 20 {
        log.append(&body).unwrap();
    }
    log.shutdown().unwrap();
    drop(log);
    let log = open(dir.path(), 128 << 20, FlushDiskType::AsyncFlush, false, false);
    let bytes = log.max_offset();
    let mut group = c.benchmark_group("recovery");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(bytes));
    group.bench_function(format!("scan_{mb}MiB_1KiB_records"), |b| b.iter(|| log.scan(0).unwrap().records));
    group.finish();
}

/// Latency of the append that rolls to a new segment, with and without
/// preallocation and warm-up.
fn roll_over(c: &mut Criterion) {
    let mut group = c.benchmark_group("roll_over");
    group.sample_size(10);
    for (name, preallocate, warm) in
        [("in_place", false, false), ("preallocated", true, false), ("preallocated_warmed", true, true)]
    {
        let mut worst = Vec::new();
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let dir = tempfile::tempdir().unwrap();
                    let segment = 16 << 20;
                    let log = open(dir.path(), segment, FlushDiskType::AsyncFlush, preallocate, warm);
                    let body = vec![7u8; 4096 - 32];
                    // Fill the first segment; give preallocation a moment off the clock.
                    while log.max_offset() < (segment as u64) - 8192 {
                        log.append(&body).unwrap();
                    }
                    std::thread::sleep(Duration::from_millis(if preallocate { 200 } else { 0 }));
                    let mut slowest = Duration::ZERO;
                    for _ in 0..4 {
                        let t = Instant::now();
                        log.append(&body).unwrap();
                        slowest = slowest.max(t.elapsed());
                    }
                    total += slowest;
                    worst.push(slowest.as_nanos() as u64);
                    log.shutdown().unwrap();
                }
                total
            })
        });
        worst.sort_unstable();
        println!(
            "roll_over/{name}: slowest append around the roll, median of samples {:.0} µs",
            percentile_us(&worst, 0.5)
        );
    }
    group.finish();
}

/// A tail in another thread, under sync flush: the time from the moment an
/// append's durability handle resolves in the producer to the moment the
/// tail (`TailLimit::Durable`, blocked in `next`) has the record. Criterion
/// times the whole round trip; the durable-to-delivered percentiles are printed.
fn tail(c: &mut Criterion) {
    use commitlog::TailLimit;
    use std::sync::mpsc;
    let mut group = c.benchmark_group("tail");
    group.sample_size(10);
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), 64 << 20, FlushDiskType::SyncFlush, true, false);
    let base = Instant::now();
    let (delivered_tx, delivered_rx) = mpsc::channel::<u64>();
    let reader = {
        let mut tail = log.tail(log.max_offset(), TailLimit::Durable);
        std::thread::spawn(move || {
            while let Some(Ok(_record)) = tail.next() {
                if delivered_tx.send(base.elapsed().as_nanos() as u64).is_err() {
                    break;
                }
            }
        })
    };
    let mut latencies = Vec::new();
    let body = vec![7u8; 1024];
    group.bench_function("durable_to_delivered", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                log.append(&body).unwrap().durability.wait().unwrap();
                let durable = base.elapsed().as_nanos() as u64;
                let delivered = delivered_rx.recv().unwrap();
                latencies.push(delivered.saturating_sub(durable));
            }
            start.elapsed()
        })
    });
    group.finish();
    log.shutdown().unwrap();
    reader.join().unwrap();
    latencies.sort_unstable();
    if !latencies.is_empty() {
        println!(
            "tail/durable_to_delivered: p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs over {} records (0: the tail had it before the producer heard)",
            percentile_us(&latencies, 0.5),
            percentile_us(&latencies, 0.99),
            percentile_us(&latencies, 0.999),
            latencies.len()
        );
    }
}

criterion_group!(benches, async_append, group_commit, reads, recovery, roll_over, tail);
criterion_main!(benches);
