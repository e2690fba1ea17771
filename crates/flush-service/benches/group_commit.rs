//! Group commit with 1, 4 and 16 producers against the in-memory target with a
//! simulated sync latency: throughput (criterion) plus requests per flush and ack
//! latency percentiles (printed after each group).

#![forbid(unsafe_code)]
// criterion's macros generate undocumented items.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use flush_service::testing::MemoryTarget;
use flush_service::{FlushConfig, FlushStrategy, SyncFlush, SystemClock};

/// Roughly this machine kind's fdatasync on preallocated blocks.
const SYNC_LATENCY: Duration = Duration::from_micros(100);
const REQUESTS_PER_PRODUCER: usize = 200;

fn run(producers: usize) -> (Duration, u64, Vec<Duration>) {
    let target = MemoryTarget::new();
    target.set_flush_latency(SYNC_LATENCY);
    let flush = Arc::new(
        SyncFlush::start(target.clone(), Arc::new(SystemClock::new()), &FlushConfig::default(), false, None).unwrap(),
    );
    let started = Instant::now();
    let threads: Vec<_> = (0..producers)
        .map(|_| {
            let (flush, target) = (Arc::clone(&flush), target.clone());
            std::thread::spawn(move || {
                let mut latencies = Vec::with_capacity(REQUESTS_PER_PRODUCER);
                for _ in 0..REQUESTS_PER_PRODUCER {
                    let t = Instant::now();
                    flush.submit(target.append(1024)).wait().expect("durable");
                    latencies.push(t.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut latencies: Vec<Duration> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    let elapsed = started.elapsed();
    flush.shutdown();
    latencies.sort();
    (elapsed, flush.stats().group_commit.flushes, latencies)
}

fn group_commit(c: &mut Criterion) {
    let mut group = c.benchmark_group("group_commit");
    group.sample_size(10);
    for producers in [1, 4, 16] {
        group.throughput(Throughput::Elements((producers * REQUESTS_PER_PRODUCER) as u64));
        let mut flushes = 0u64;
        let mut requests = 0u64;
        let mut all = Vec::new();
        group.bench_function(format!("{producers}_producers"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let (elapsed, f, lat) = run(producers);
                    total += elapsed;
                    flushes += f;
                    requests += lat.len() as u64;
                    all.extend(lat);
                }
                total
            })
        });
        if all.is_empty() {
            continue; // filtered out on the command line
        }
        all.sort();
        let pct = |p: f64| {
            all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1))).copied().unwrap_or_default()
        };
        println!(
            "group_commit/{producers}_producers: {:.1} requests per flush, ack latency p50 {:?} p99 {:?}",
            requests as f64 / flushes.max(1) as f64,
            pct(0.50),
            pct(0.99)
        );
    }
    group.finish();
}

criterion_group!(benches, group_commit);
criterion_main!(benches);
