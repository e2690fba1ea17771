//! This project's rows: the log on each write path, and on the default one in the
//! steady state of a store that keeps spare segments.

use std::time::Instant;

use commitlog::{BatchWriter, CommitLog, CommitLogConfig, FlushConfig, FlushDiskType, SegmentPreparation};

use crate::{scratch, Line, Outcome, Sizes, System, BATCH, PRODUCERS, RECORD, SEGMENT};

/// How a row's log is set up.
#[derive(Clone, Copy)]
struct Variant {
    write_without_mmap: bool,
    /// Keep expired segments as spares, and age the store before the timed part.
    spares: bool,
    /// Appends go through the write-buffer pool (`transient_store_pool_enable`).
    pool: bool,
    /// New segments prepared with their blocks written (`segment_preparation`),
    /// and the store written up to the end of its first segment before the timed
    /// part, so the run rolls into a prepared segment at once.
    prepared: bool,
    /// Prepared segments are faulted in too (`WrittenAndFaulted`).
    faulted: bool,
    /// New segments allocated only (`SegmentPreparation::Allocated`, the
    /// default before segments were prepared by default): the first segment
    /// too, so every sync meets unwritten blocks.
    allocated: bool,
    /// Concurrent appends each take the put lock and write alone
    /// (`append_write_groups` off, the behaviour before write groups).
    groups_off: bool,
    /// The group-commit service thread runs every round, a waiter never
    /// (`group_commit_in_waiter` off, the behaviour before).
    rounds_in_service: bool,
}

const DEFAULT: Variant = Variant {
    write_without_mmap: true,
    spares: false,
    pool: false,
    prepared: false,
    faulted: false,
    allocated: false,
    groups_off: false,
    rounds_in_service: false,
};
const MAPPED: Variant = Variant { write_without_mmap: false, ..DEFAULT };
const SPARES: Variant = Variant { spares: true, ..DEFAULT };
const POOLED: Variant = Variant { pool: true, ..DEFAULT };
const PREPARED_MAPPED: Variant = Variant { write_without_mmap: false, prepared: true, faulted: true, ..DEFAULT };
const ALLOCATED_SEGMENTS: Variant = Variant { allocated: true, ..DEFAULT };
const GROUPS_OFF: Variant = Variant { groups_off: true, ..DEFAULT };
const ROUNDS_IN_SERVICE: Variant = Variant { rounds_in_service: true, ..DEFAULT };
const PREPARED_SEGMENTS: Variant = Variant { prepared: true, ..DEFAULT };

/// The log writing with pwrite + fdatasync (the default).
pub const PWRITE: System = System {
    name: "commitlog, pwrite (default)",
    ours: true,
    a: |s| durable_batches(s, DEFAULT),
    b: |s| group_commit(s, DEFAULT),
    c: |s| no_sync(s, DEFAULT, Unit::Batch),
    c_single: |s| no_sync(s, DEFAULT, Unit::Appends),
};

/// The default write path with segments allocated only, not prepared (the
/// default before `SegmentPreparation::Written` was): a fresh store whose
/// syncs all meet unwritten blocks.
pub const ALLOCATED: System = System {
    name: "commitlog, pwrite, allocated segments (the former default)",
    ours: true,
    a: |s| durable_batches(s, ALLOCATED_SEGMENTS),
    b: |s| group_commit(s, ALLOCATED_SEGMENTS),
    c: |s| no_sync(s, ALLOCATED_SEGMENTS, Unit::Batch),
    c_single: |s| no_sync(s, ALLOCATED_SEGMENTS, Unit::Appends),
};

/// The log writing through a read-write mapping, synced with msync.
pub const MMAP: System = System {
    name: "commitlog, mmap",
    ours: true,
    a: |s| durable_batches(s, MAPPED),
    b: |s| group_commit(s, MAPPED),
    c: |s| no_sync(s, MAPPED, Unit::Batch),
    c_single: |s| no_sync(s, MAPPED, Unit::Appends),
};

/// The default write path in a store that keeps two spare segments
/// (`recycle_segments`), aged before the timed part so the run writes into
/// segments made of spares: the steady state of a store whose retention deletes.
pub const RECYCLING: System = System {
    name: "commitlog, pwrite, spare segments (aged store)",
    ours: true,
    a: |s| durable_batches(s, SPARES),
    b: |s| group_commit(s, SPARES),
    c: |s| no_sync(s, SPARES, Unit::Batch),
    c_single: |s| no_sync(s, SPARES, Unit::Appends),
};

/// The default write path with new segments prepared in the background
/// (`SegmentPreparation::Written`: zeros written and synced, paced), in a store
/// written to the end of its first segment before the timed part: the steady
/// state of a store past its first segment, which keeps no spares. The next
/// segment is prepared while the timed run writes, so preparation competes with
/// the run for the disk, as it would for a user.
pub const PREPARED: System = System {
    name: "commitlog, pwrite, prepared segments (past its first segment)",
    ours: true,
    a: |s| durable_batches(s, PREPARED_SEGMENTS),
    b: |s| group_commit(s, PREPARED_SEGMENTS),
    c: |s| no_sync(s, PREPARED_SEGMENTS, Unit::Batch),
    c_single: |s| no_sync(s, PREPARED_SEGMENTS, Unit::Appends),
};

/// The default write path with write groups off (`append_write_groups`):
/// concurrent producers each take the put lock and write their own record,
/// as before write groups were the default. Batches are never grouped, so
/// only (b) and (c') tell the two apart.
pub const GROUPS_OFF_ROW: System = System {
    name: "commitlog, pwrite, write groups off (the former default)",
    ours: true,
    a: single_appends_only,
    b: |s| group_commit(s, GROUPS_OFF),
    c: single_appends_only,
    c_single: |s| no_sync(s, GROUPS_OFF, Unit::Appends),
};

/// The default write path with every group-commit round run by the service
/// thread (`group_commit_in_waiter` off): a durable wait is a hand-off to it
/// and a wake-up back, as before waiters ran rounds themselves. Only the
/// durable workloads ((a), (b)) tell the two apart.
pub const ROUNDS_IN_SERVICE_ROW: System = System {
    name: "commitlog, pwrite, rounds in the service thread (the former default)",
    ours: true,
    a: |s| durable_batches(s, ROUNDS_IN_SERVICE),
    b: |s| group_commit(s, ROUNDS_IN_SERVICE),
    c: durable_waits_only,
    c_single: durable_waits_only,
};

/// What the rounds-in-the-service row answers without sync.
fn durable_waits_only(_: &Sizes) -> Outcome {
    Outcome::NotApplicable("no durable wait: the default row's path")
}

/// What the write-groups row answers where appends are batches.
fn single_appends_only(_: &Sizes) -> Outcome {
    Outcome::NotApplicable("batches are not grouped: the default row's path")
}

/// What the single-record candidates answer outside (c').
fn single_records_only(_: &Sizes) -> Outcome {
    Outcome::NotApplicable("a path for single records, measured in (c') only")
}

/// (c') only: single records pushed one at a time into a [`BatchWriter`] (64
/// records at most), which appends them as one batch when full: a candidate
/// path for single records, where a kill loses only what was never appended.
pub const BATCH_WRITER: System = System {
    name: "commitlog, pwrite, batch writer (single records only)",
    ours: true,
    a: single_records_only,
    b: single_records_only,
    c: single_records_only,
    c_single: |s| no_sync(s, DEFAULT, Unit::Pushes),
};

/// (c') only: single records copied into the mapping of segments prepared
/// and faulted in the background (`SegmentPreparation::WrittenAndFaulted`,
/// `write_without_mmap` off), in a store past its first segment: the other
/// candidate path for single records.
pub const PREPARED_MAPPING: System = System {
    name: "commitlog, mmap, prepared and faulted segments (single records only)",
    ours: true,
    a: single_records_only,
    b: single_records_only,
    c: single_records_only,
    c_single: |s| no_sync(s, PREPARED_MAPPED, Unit::Appends),
};

/// The default write path behind the write-buffer pool (RocketMQ's
/// `transientStorePoolEnable`): appends copy into off-heap buffers, and the
/// commit service writes them to the segment in large `pwrite`s.
pub const POOL: System = System {
    name: "commitlog, pwrite, write-buffer pool",
    ours: true,
    a: |s| durable_batches(s, POOLED),
    b: |s| group_commit(s, POOLED),
    c: |s| no_sync(s, POOLED, Unit::Batch),
    c_single: |s| no_sync(s, POOLED, Unit::Appends),
};

fn config(flush: FlushDiskType, variant: Variant) -> CommitLogConfig {
    let defaults = CommitLogConfig::default();
    let mut flush_config = FlushConfig::default();
    flush_config.group_commit_spin_us = env_or("BENCH_SPIN_US", flush_config.group_commit_spin_us);
    flush_config.group_commit_gather_us = env_or("BENCH_GATHER_US", flush_config.group_commit_gather_us);
    flush_config.group_commit_in_waiter = !variant.rounds_in_service;
    if std::env::var_os("BENCH_NO_BACKGROUND_FLUSH").is_some() {
        flush_config.flush_interval_commit_log_ms = 3_600_000;
        flush_config.flush_commit_log_thorough_interval_ms = 3_600_000;
    }
    CommitLogConfig::builder()
        .flush(flush_config)
        .mapped_file_size_commit_log(SEGMENT)
        .flush_disk_type(flush)
        .write_without_mmap(
            variant.write_without_mmap && !(variant.prepared && std::env::var_os("BENCH_PREP_MMAP").is_some()),
        )
        .recycle_segments(if variant.spares { 2 } else { 0 })
        .append_write_groups(!variant.groups_off)
        .warm_mapped_file_enable(std::env::var_os("BENCH_WARM").is_some())
        .transient_store_pool(variant.pool || std::env::var_os("BENCH_POOL").is_some(), 3)
        .segment_preparation(
            if variant.allocated {
                SegmentPreparation::Allocated
            } else if variant.faulted || (variant.prepared && std::env::var_os("BENCH_PREP_FAULTED").is_some()) {
                SegmentPreparation::WrittenAndFaulted
            } else {
                defaults.segment_preparation
            },
            env_or("BENCH_PREP_CHUNK", defaults.preparation_chunk_bytes),
            env_or("BENCH_PREP_RATE", defaults.preparation_bytes_per_sec),
        )
        .build()
        .expect("config")
}

/// A number from the environment (for trying the preparation's knobs), or `default`.
fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn bodies() -> Vec<Vec<u8>> {
    (0..BATCH).map(|i| vec![i as u8; RECORD]).collect()
}

/// A log in a scratch directory; aged first for the spare-segment rows.
fn open(flush: FlushDiskType, variant: Variant) -> (tempfile::TempDir, CommitLog) {
    let dir = scratch();
    let log = CommitLog::open(dir.path(), config(flush, variant)).expect("open");
    if variant.spares {
        age(&log);
    }
    if variant.prepared {
        past_first_segment(&log);
    }
    (dir, log)
}

/// Writes a new store up to the end of its first segment, untimed, and waits
/// for the next segment's preparation to end (whole, or as far as the budget
/// let it while the store was written), so the timed run rolls into it at once.
fn past_first_segment(log: &CommitLog) {
    let batch = bodies();
    let until = SEGMENT as u64 - 2 * (BATCH * (RECORD + 32)) as u64;
    let mut end = 0;
    while end < until {
        let put = log.append_batch(&batch).expect("fill");
        end = put.offsets.last().copied().unwrap_or(0);
    }
    log.flush_all().expect("flush");
    let started = Instant::now();
    let patience = std::time::Duration::from_secs(30);
    while log.preparation_stats().prepared == 0 {
        if started.elapsed() >= patience {
            let stats = log.preparation_stats();
            eprintln!(
                "bench-compare: the next segment was not prepared whole within {patience:?} ({stats:?}); the prepared-segments row rolls into it as far as it got"
            );
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Brings a store that recycles to a steady state, untimed: segments 0 and 1
/// written and expired into spares, then written on to the end of segment 3
/// (prepared before the spares existed), so the timed run rolls at once into
/// segments 4 and 5, made of the spares.
fn age(log: &CommitLog) {
    let batch = bodies();
    let write_until = |until: u64| {
        let mut end = 0;
        while end < until {
            let put = log.append_batch(&batch).expect("age");
            end = put.offsets.last().copied().unwrap_or(0);
        }
    };
    let seg = SEGMENT as u64;
    write_until(2 * seg + seg / 2);
    log.flush_all().expect("flush");
    assert_eq!(log.delete_segments_before(2 * seg, 10).expect("expire"), 2, "two spares");
    write_until(4 * seg - 2 * (BATCH * (RECORD + 32)) as u64);
    log.flush_all().expect("flush");
}

/// (a): sync flush, a batch of 64 per durable wait.
fn durable_batches(sizes: &Sizes, variant: Variant) -> Outcome {
    let (_dir, log) = open(FlushDiskType::SyncFlush, variant);
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
fn group_commit(sizes: &Sizes, variant: Variant) -> Outcome {
    let (_dir, log) = open(FlushDiskType::SyncFlush, variant);
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
/// (c), or with `single` (c'): the same records, one per append.
/// How (c)'s units of 64 records reach the log.
#[derive(Clone, Copy)]
enum Unit {
    /// One `append_batch` of 64 ((c)).
    Batch,
    /// 64 `append`s ((c')).
    Appends,
    /// 64 pushes into a [`BatchWriter`], which appends when full (so a unit's
    /// time holds one batch append, the previous unit's), and the last ones
    /// at the end ((c') through the writer).
    Pushes,
}

fn no_sync(sizes: &Sizes, variant: Variant, unit: Unit) -> Outcome {
    let (_dir, log) = open(FlushDiskType::AsyncFlush, variant);
    let bodies = bodies();
    let mut writer = matches!(unit, Unit::Pushes).then(|| BatchWriter::new(log.clone()));
    let mut lat = Vec::with_capacity(sizes.c_batches);
    let start = Instant::now();
    for _ in 0..sizes.c_batches {
        let t = Instant::now();
        match unit {
            Unit::Batch => {
                log.append_batch(&bodies).expect("append");
            }
            Unit::Appends => {
                for body in &bodies {
                    log.append(body).expect("append");
                }
            }
            Unit::Pushes => {
                let writer = writer.as_mut().expect("pushes have a writer");
                for body in &bodies {
                    writer.push(body).expect("push");
                }
            }
        }
        lat.push(t.elapsed().as_nanos() as u64);
    }
    if let Some(writer) = writer.as_mut() {
        writer.flush().expect("flush");
    }
    let seconds = start.elapsed().as_secs_f64();
    drop(writer);
    log.shutdown().expect("shutdown");
    Outcome::Measured(Line::new((sizes.c_batches * BATCH) as u64, seconds, lat))
}
