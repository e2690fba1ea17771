// Test arithmetic works on small, known values.
#![allow(clippy::arithmetic_side_effects, clippy::cast_possible_truncation, clippy::cast_sign_loss)]

use super::*;
use commitlog::{CommitLog, CommitLogConfig, FlushDiskType, Record};
use mapped_file::SimStorage;
use std::path::PathBuf;

const PER_SEGMENT: usize = 1024;

fn config() -> ConsumeQueueConfig {
    ConsumeQueueConfig {
        preallocate_next_segment: false,
        flush_interval_consume_queue_ms: 10,
        ..ConsumeQueueConfig::with_entries_per_segment(PER_SEGMENT)
    }
}

fn entry(i: u64) -> CqEntry {
    CqEntry { offset: i * 100, size: 100, tag: i % 7 }
}

fn open(sim: &SimStorage) -> ConsumeQueue {
    ConsumeQueue::open(Arc::new(sim.clone()), Path::new("/cq"), config()).unwrap()
}

#[test]
fn entries_are_found_by_index_across_segments_and_after_a_restart() {
    let sim = SimStorage::new();
    let cq = open(&sim);
    assert!(cq.is_empty());
    for i in 0..2500u64 {
        cq.put(i, entry(i)).unwrap();
    }
    assert_eq!((cq.min_index(), cq.next_index()), (0, 2500));
    for i in [0u64, 1, 1023, 1024, 2047, 2048, 2499] {
        assert_eq!(cq.get(i).unwrap(), Some(entry(i)), "{i}");
    }
    assert_eq!(cq.get(2500).unwrap(), None);
    // Never an earlier index, never an empty entry.
    assert!(matches!(cq.put(7, entry(7)), Err(CqError::OutOfOrder { index: 7, next: 2500 })));
    assert!(matches!(cq.put(2500, CqEntry { size: 0, ..entry(1) }), Err(CqError::EmptyEntry { .. })));
    cq.shutdown().unwrap();
    drop(cq);
    let cq = open(&sim);
    assert_eq!((cq.min_index(), cq.next_index()), (0, 2500));
    assert_eq!(cq.get(2048).unwrap(), Some(entry(2048)));
    assert_eq!(cq.last().unwrap(), Some((2499, entry(2499))));
    // A later index leaves a gap that reads as none (into the next segment here).
    cq.put(3100, entry(3100)).unwrap();
    assert_eq!((cq.get(2500).unwrap(), cq.get(3099).unwrap()), (None, None));
    assert_eq!(cq.get(3100).unwrap(), Some(entry(3100)));
    assert_eq!(cq.next_index(), 3101);
}

#[test]
fn an_empty_queue_starts_at_any_index() {
    let sim = SimStorage::new();
    let cq = open(&sim);
    cq.put_batch(1500, &[entry(1500), entry(1501)]).unwrap();
    assert_eq!((cq.min_index(), cq.next_index()), (1500, 1502));
    assert_eq!(cq.get(1499).unwrap(), None);
    cq.shutdown().unwrap();
    drop(cq);
    let cq = open(&sim);
    assert_eq!((cq.min_index(), cq.next_index()), (1500, 1502), "leading zeros are the queue's start");
    // Cleared, it starts again anywhere, even below.
    cq.clear().unwrap();
    assert!(cq.is_empty());
    cq.put(3, entry(3)).unwrap();
    assert_eq!((cq.min_index(), cq.next_index()), (3, 4));
    // Within a segment that already has data, the past is never overwritten.
    cq.truncate_from(3).unwrap();
    cq.put(10, entry(10)).unwrap();
    assert_eq!(cq.get(10).unwrap(), Some(entry(10)));
}

#[test]
fn truncation_and_front_deletion_keep_the_rest() {
    let sim = SimStorage::new();
    let cq = open(&sim);
    for i in 0..4000u64 {
        cq.put(i, entry(i)).unwrap();
    }
    cq.truncate_from(2100).unwrap();
    assert_eq!(cq.next_index(), 2100);
    assert_eq!(cq.get(2100).unwrap(), None);
    cq.put(2100, CqEntry { tag: 99, ..entry(2100) }).unwrap();
    assert_eq!(cq.delete_before(2048).unwrap(), 2, "the two segments below 2048");
    assert_eq!(cq.min_index(), 2048);
    assert_eq!(cq.get(1000).unwrap(), None);
    assert_eq!(cq.get(2050).unwrap(), Some(entry(2050)));
    cq.shutdown().unwrap();
    drop(cq);
    let cq = open(&sim);
    assert_eq!((cq.min_index(), cq.next_index()), (2048, 2101));
    assert_eq!(cq.get(2100).unwrap().unwrap().tag, 99, "the truncated entry never comes back");
}

/// A sync-flush log of small segments.
fn log_config() -> CommitLogConfig {
    CommitLogConfig::builder()
        .mapped_file_size_commit_log(64 * 1024)
        .max_message_size(1024)
        .flush_disk_type(FlushDiskType::SyncFlush)
        .build()
        .unwrap()
}

/// Appends one durable record per index, its body the index, and indexes it.
fn append_indexed(log: &CommitLog, cq: &ConsumeQueue, indexes: std::ops::Range<u64>) {
    for i in indexes {
        let put = log.append(&i.to_le_bytes()).unwrap();
        put.durability.wait().unwrap();
        let size = u32::try_from(log.read(put.wrote_offset).unwrap().size).unwrap();
        cq.put(i, CqEntry { offset: put.wrote_offset, size, tag: 0 }).unwrap();
    }
}

#[test]
fn a_crash_hole_ends_the_queue_and_repair_puts_back_what_the_log_holds() {
    // The log: one record per entry, its body the entry's index.
    let sim = SimStorage::new();
    let log_config = log_config();
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let log = CommitLog::open_with_storage("/log", log_config.clone(), Arc::clone(&storage)).unwrap();
    let cq = open(&sim);
    append_indexed(&log, &cq, 0..1500);
    cq.flush().unwrap();
    // More entries, not flushed; then the power goes, keeping every other dirty sector.
    append_indexed(&log, &cq, 1500..1800);
    let mut n = 0;
    sim.fail_all_syncs(true);
    drop(cq);
    drop(log);
    sim.crash(|_, _| {
        n += 1;
        n % 2 == 0
    });
    sim.fail_all_syncs(false);

    let log = CommitLog::open_with_storage("/log", log_config, storage).unwrap();
    let cq = open(&sim);
    assert!(cq.next_index() >= 1500 && cq.next_index() < 1800, "the hole ends it: {}", cq.next_index());
    let index_of = |r: &Record| Some(Dispatch { index: u64::from_le_bytes(r.body[..8].try_into().unwrap()), tag: 0 });
    let report = cq.repair(&log, 0, index_of).unwrap();
    assert_eq!(cq.next_index(), 1800, "{report:?}");
    for i in 0..1800u64 {
        let e = cq.get(i).unwrap().unwrap_or_else(|| panic!("entry {i} missing"));
        assert_eq!(&log.read(e.offset).unwrap().body[..], &i.to_le_bytes(), "entry {i}");
    }

    // The log loses its tail (a truncation): the index drops what it no longer holds.
    let cut = cq.get(1700).unwrap().unwrap().offset;
    log.truncate_from(cut).unwrap();
    let report = cq.repair(&log, 0, index_of).unwrap();
    assert_eq!(report, RepairReport { entries_expired: 0, entries_dropped: 100, entries_dispatched: 0 });
    assert_eq!(cq.next_index(), 1700);
}

#[test]
fn bad_configs_are_refused() {
    for size in [0, 20 * 1000, 4096 * 3] {
        let config = ConsumeQueueConfig { mapped_file_size_consume_queue: size, ..config() };
        let err = ConsumeQueue::open(Arc::new(SimStorage::new()), Path::new("/cq"), config).unwrap_err();
        assert!(matches!(err, CqError::InvalidConfig { .. }), "{size}: {err}");
    }
}

/// A log of `n` records whose bodies are their index, and a queue indexing them,
/// both shut down cleanly on one simulated disk.
fn indexed_log(sim: &SimStorage, n: u64) -> CommitLogConfig {
    let log_config = log_config();
    let log = CommitLog::open_with_storage("/log", log_config.clone(), Arc::new(sim.clone())).unwrap();
    let cq = open(sim);
    append_indexed(&log, &cq, 0..n);
    cq.shutdown().unwrap();
    log.shutdown().unwrap();
    log_config
}

#[test]
fn torn_entries_a_lost_front_and_a_zeroed_queue_are_all_rebuilt_from_the_log() {
    let index_of = |r: &Record| Some(Dispatch { index: u64::from_le_bytes(r.body[..8].try_into().unwrap()), tag: 0 });
    let segment = |k: u64| Path::new("/cq").join(mapped_file::file_name(k * PER_SEGMENT as u64 * 20));
    // What a power cut can leave in entries written since the last flush: the
    // sector holding the first bytes of entry 300's offset lost (entry 300
    // starts at byte 6000, so its offset's first two bytes lie in the sector
    // ending at 6002, the rest of the entry in the next one); the sectors of
    // the first entries lost (zeros that look like the queue's later start);
    // and every sector lost.
    /// Bytes zeroed: (segment file, position, how many).
    type Patch = (PathBuf, usize, Vec<u8>);
    let damages: [(&str, Vec<Patch>); 3] = [
        ("torn entry 300", vec![(segment(0), 6000, vec![0; 2])]),
        ("front lost", vec![(segment(0), 0, vec![0; 512])]),
        ("all lost", vec![(segment(0), 0, vec![0; PER_SEGMENT * 20]), (segment(1), 0, vec![0; 476 * 20])]),
    ];
    for (what, patches) in damages {
        let sim = SimStorage::new();
        let log_config = indexed_log(&sim, 1500);
        for (path, at, bytes) in &patches {
            assert!(sim.patch_file(path, *at, bytes), "{what}");
        }
        let log = CommitLog::open_with_storage("/log", log_config, Arc::new(sim.clone())).unwrap();
        let cq = open(&sim);
        cq.repair(&log, 0, index_of).unwrap();
        assert_eq!((cq.min_index(), cq.next_index()), (0, 1500), "{what}");
        for i in 0..1500u64 {
            let entry = cq.get(i).unwrap().unwrap_or_else(|| panic!("{what}: entry {i} missing"));
            assert_eq!(&log.read(entry.offset).unwrap().body[..], &i.to_le_bytes(), "{what}: entry {i}");
        }
    }
}

#[test]
fn entries_of_records_the_log_deleted_expire_at_runtime_and_at_repair() {
    // RocketMQ's CleanConsumeQueueService: once the log's cleaning deletes its
    // oldest segments, the entries naming their records go too.
    let index_of = |r: &Record| Some(Dispatch { index: u64::from_le_bytes(r.body[..8].try_into().unwrap()), tag: 0 });
    let sim = SimStorage::new();
    let log_config = indexed_log(&sim, 6000); // 5.9 index segments, ~4 log segments
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let log = CommitLog::open_with_storage("/log", log_config.clone(), Arc::clone(&storage)).unwrap();
    assert_eq!(log.delete_segments_before(2 * 64 * 1024, 10).unwrap(), 2);
    let min = log.min_offset();
    let cq = open(&sim);
    assert_eq!(cq.min_index(), 0);
    let first_live = cq.first_index_at_or_after(min).unwrap();
    assert!(first_live > PER_SEGMENT as u64 && first_live < 5000, "{first_live}");
    assert_eq!(cq.get(first_live).unwrap().unwrap().offset, min);
    assert!(cq.get(first_live - 1).unwrap().unwrap().offset < min);
    assert_eq!(cq.first_index_at_or_after(0).unwrap(), 0);
    assert_eq!(cq.first_index_at_or_after(u64::MAX).unwrap(), 6000);

    // At repair: the front expires, nothing is dropped as damage nor rebuilt.
    let report = cq.repair(&log, 0, index_of).unwrap();
    assert_eq!(report, RepairReport { entries_expired: first_live, entries_dropped: 0, entries_dispatched: 0 });
    assert_eq!((cq.min_index(), cq.next_index()), (first_live, 6000));
    assert_eq!(cq.get(first_live - 1).unwrap(), None, "an entry naming a deleted record reads as none");
    assert_eq!(cq.queue.segment_count(), 6 - (first_live as usize / PER_SEGMENT));
    drop(cq);
    let cq = open(&sim);
    assert_eq!(cq.repair(&log, 0, index_of).unwrap().entries_dispatched, 0);
    assert_eq!(cq.min_index(), first_live, "the same after a restart");

    // At runtime: the log deletes more, the queue follows.
    assert_eq!(log.delete_segments_before(3 * 64 * 1024, 10).unwrap(), 1);
    let expired = cq.delete_expired(log.min_offset()).unwrap();
    assert_eq!(cq.min_index(), cq.first_index_at_or_after(log.min_offset()).unwrap());
    assert!(cq.min_index() > first_live, "{expired} segments deleted");
    for i in [cq.min_index(), 5999] {
        let e = cq.get(i).unwrap().unwrap();
        assert_eq!(&log.read(e.offset).unwrap().body[..], &i.to_le_bytes());
    }
    cq.shutdown().unwrap();
    log.shutdown().unwrap();
}

#[test]
fn a_torn_entry_past_the_expired_front_expires_nothing_it_should_not() {
    // A binary search over entries a crash tore could land on one whose offset
    // is garbage below the log's first offset, and expire valid entries after
    // the true boundary. It never sees one: open ends the queue at the first
    // entry whose offset does not grow, so the entries searched are in order.
    let index_of = |r: &Record| Some(Dispatch { index: u64::from_le_bytes(r.body[..8].try_into().unwrap()), tag: 0 });
    let sim = SimStorage::new();
    let log_config = indexed_log(&sim, 6000);
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let log = CommitLog::open_with_storage("/log", log_config.clone(), Arc::clone(&storage)).unwrap();
    assert_eq!(log.delete_segments_before(2 * 64 * 1024, 10).unwrap(), 2);
    let boundary = {
        let cq = open(&sim);
        let boundary = cq.first_index_at_or_after(log.min_offset()).unwrap();
        assert!(boundary > 3 * PER_SEGMENT as u64 && boundary < 4500, "in the last three segments: {boundary}");
        boundary
    };
    // Entry 4500 (where a search over [0, 6000) looks second) torn: offset 5.
    let at = 4500 * 20 - 4 * PER_SEGMENT * 20;
    let segment4 = Path::new("/cq").join(mapped_file::file_name(4 * PER_SEGMENT as u64 * 20));
    assert!(sim.patch_file(&segment4, at, &5u64.to_le_bytes()));
    let cq = open(&sim);
    assert_eq!(cq.next_index(), 4500, "the torn entry ends the queue");
    assert_eq!(cq.first_index_at_or_after(log.min_offset()).unwrap(), boundary);
    let report = cq.repair(&log, 0, index_of).unwrap();
    assert_eq!(report.entries_expired, boundary);
    assert_eq!((cq.min_index(), cq.next_index()), (boundary, 6000), "{report:?}");
    for i in boundary..6000 {
        let e = cq.get(i).unwrap().unwrap_or_else(|| panic!("entry {i} missing"));
        assert_eq!(&log.read(e.offset).unwrap().body[..], &i.to_le_bytes(), "entry {i}");
    }
    cq.shutdown().unwrap();
    log.shutdown().unwrap();
}

#[test]
fn a_queue_truncated_to_its_start_reopens_empty() {
    let sim = SimStorage::new();
    let cq = open(&sim);
    cq.put(0, entry(0)).unwrap();
    drop(cq);
    let cq = open(&sim);
    assert_eq!((cq.min_index(), cq.next_index()), (0, 1));
    cq.truncate_from(0).unwrap();
    assert_eq!(cq.next_index(), 0);
    drop(cq);
    let cq = open(&sim);
    assert_eq!((cq.min_index(), cq.next_index()), (0, 0), "the cut entry stays cut");
    cq.put(1, entry(1)).unwrap();
    drop(cq);
    let cq = open(&sim);
    assert_eq!(cq.get(0).unwrap(), None);
    assert_eq!((cq.min_index(), cq.next_index()), (1, 2));
}

#[test]
fn a_queue_closed_unflushed_reopens_where_it_ended_and_goes_on() {
    let sim = SimStorage::new();
    let quiet = ConsumeQueueConfig { own_flush_service: false, ..config() };
    let cq = ConsumeQueue::open(Arc::new(sim.clone()), Path::new("/cq"), quiet.clone()).unwrap();
    for i in 0..1500u64 {
        cq.put(i, entry(i)).unwrap();
    }
    cq.close_unflushed();
    assert!(sim.dirty_sectors() > 0, "nothing was synced by the close");
    let cq = ConsumeQueue::reopen(Arc::new(sim.clone()), Path::new("/cq"), quiet).unwrap();
    assert_eq!((cq.min_index(), cq.next_index()), (0, 1500));
    assert_eq!(cq.get(1499).unwrap(), Some(entry(1499)));
    cq.put(1500, entry(1500)).unwrap();
    assert!(matches!(cq.put(10, entry(10)), Err(CqError::OutOfOrder { .. })));
    cq.flush().unwrap();
    drop(cq);
    let cq = open(&sim);
    assert_eq!(cq.next_index(), 1501);
    assert_eq!(cq.get(1500).unwrap(), Some(entry(1500)));
}
