//! Criterion, side by side in one process on a real disk (a temporary
//! directory): the dispatch path's cost of a message for a queue never seen
//! before, in the queue index (a table row) and as a consume queue of its own
//! would (a directory and a preallocated, mapped file: the message store's
//! layout before the index); a message for a known queue; a seal of a run of 65,536
//! entries over 50,000 queues; and a read at an old offset (the queue's run
//! found among 1,000 runs). It also prints the resident memory per queue after
//! 1,000,000 queues (`QI_QUEUES` to change).

// criterion_group! makes an undocumented public function.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use mapped_file::{MappedFile, MmapStorage, Storage};
use queue_index::{Entry, QueueIndex};

fn entry(log_offset: u64) -> Entry {
    Entry { log_offset, size: 1100, tag: 7 }
}

/// Resident anonymous memory (the heap; not the runs' mapped file pages).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("RssAnon")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// An empty index in a new temporary directory on the real disk.
fn on_disk() -> (tempfile::TempDir, MmapStorage, QueueIndex) {
    let scratch = tempfile::tempdir().expect("scratch");
    let storage = MmapStorage::lock(scratch.path()).expect("lock");
    let (index, _) = QueueIndex::open(&storage, &scratch.path().join("queueindex")).expect("open");
    (scratch, storage, index)
}

/// Appends queue `q`'s next entry, for the record at `log`.
fn put(index: &QueueIndex, ends: &mut [u64], q: u64, log: u64) {
    index.append(q, ends[q as usize], entry(log)).expect("append");
    ends[q as usize] += 1;
}

fn new_queue(c: &mut Criterion) {
    let (scratch, storage, index) = on_disk();
    let mut group = c.benchmark_group("a message for a new queue");
    let (mut queue, mut log) = (0u64, 0u64);
    group.bench_function("queue index", |b| {
        b.iter(|| {
            index.append(queue, 0, entry(log)).expect("append");
            queue += 1;
            log += 1100;
        })
    });
    // What a consume queue per queue costs a new queue (the message store's
    // layout before the index): a directory, and a preallocated, mapped
    // segment of 4,096 entries holding its first one.
    let mut next = 0u64;
    group.sample_size(20);
    group.bench_function("a directory and a mapped file per queue", |b| {
        b.iter_batched(
            || {
                next += 1;
                (scratch.path().join("consumequeue").join("t").join(next.to_string()), next * 1100)
            },
            |(dir, offset)| {
                storage.create_dir_all(&dir).expect("directory");
                let file = MappedFile::create(&storage, &dir, 0, 4096 * 20).expect("segment");
                let mut bytes = [0u8; 20];
                bytes[..8].copy_from_slice(&offset.to_le_bytes());
                file.append_bytes(0, &bytes).expect("entry");
                file
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

fn known_queue(c: &mut Criterion) {
    let (_scratch, storage, index) = on_disk();
    let queues = 50_000u64;
    let mut ends = vec![0u64; queues as usize];
    let (mut i, mut log) = (0u64, 0u64);
    c.bench_function("a message for one of 50,000 known queues", |b| {
        b.iter(|| {
            put(&index, &mut ends, i % queues, log);
            i += 1;
            log += 1100;
            if index.active_entries() >= 1 << 16 {
                index.seal(&storage, log).expect("seal");
            }
        })
    });
}

fn seal(c: &mut Criterion) {
    let (_scratch, storage, index) = on_disk();
    let queues = 50_000u64;
    let mut ends = vec![0u64; queues as usize];
    let log = std::cell::Cell::new(0u64);
    let mut group = c.benchmark_group("seal");
    group.sample_size(20);
    group.bench_function("65,536 entries over 50,000 queues", |b| {
        b.iter_batched(
            || {
                for i in 0..(1u64 << 16) {
                    put(&index, &mut ends, (i * 7919) % queues, log.get());
                    log.set(log.get() + 1100);
                }
            },
            |()| index.seal(&storage, log.get()).expect("seal"),
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

fn old_read(c: &mut Criterion) {
    let (_scratch, storage, index) = on_disk();
    let (queues, runs, per_run) = (1_000u64, 1_000u64, 4_000u64);
    let mut ends = vec![0u64; queues as usize];
    let mut log = 0u64;
    for _ in 0..runs {
        for i in 0..per_run {
            put(&index, &mut ends, (i * 31) % queues, log);
            log += 1100;
        }
        index.seal(&storage, log).expect("seal");
    }
    let mut x = 1u64;
    c.bench_function("32 entries at a random old offset (1,000 queues, 1,000 runs)", |b| {
        b.iter(|| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let q = x % queues;
            let at = (x >> 20) % (ends[q as usize] / 2);
            let got = index.get(q, at, 32);
            assert!(!got.is_empty());
            got
        })
    });
}

fn memory(_: &mut Criterion) {
    let queues: u64 = std::env::var("QI_QUEUES").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let scratch = tempfile::tempdir().expect("scratch");
    let storage = MmapStorage::lock(scratch.path()).expect("lock");
    let dir = scratch.path().join("queueindex");
    let (index, _) = QueueIndex::open(&storage, &dir).expect("open");
    let before = rss_kib();
    for q in 0..queues {
        index.append(q, 0, entry(q * 1100)).expect("append");
    }
    let active = rss_kib();
    let active_heap = index.heap_bytes();
    index.seal(&storage, queues * 1100).expect("seal");
    let after = rss_kib();
    let idle_heap = index.heap_bytes();
    let started = std::time::Instant::now();
    drop(index);
    let (reopened, report) = QueueIndex::open(&storage, &dir).expect("reopen");
    println!(
        "queue index: {queues} queues: with an entry each in the active run {:.0} bytes of heap per queue ({:.0} by the tables' capacities); sealed and idle {:.0} by capacities (resident {:.0}: the allocator keeps what the run freed); reopened in {:.2?} ({} runs, {} queues)",
        (active.saturating_sub(before) * 1024) as f64 / queues as f64,
        active_heap as f64 / queues as f64,
        idle_heap as f64 / queues as f64,
        (after.saturating_sub(before) * 1024) as f64 / queues as f64,
        started.elapsed(),
        report.runs,
        reopened.queue_count()
    );
}

criterion_group!(benches, memory, new_queue, known_queue, seal, old_read);
criterion_main!(benches);
