// Test arithmetic works on small, known values.
#![allow(clippy::arithmetic_side_effects, clippy::cast_possible_truncation, clippy::cast_sign_loss)]

use super::*;
use mapped_file::{file_name, AppendStatus, MappedFileError, MmapStorage, SimStorage};
use std::sync::atomic::Ordering;
use transient_pool::{LockMemory, PoolConfig};

const SIZE: usize = 16 * 1024;

fn sim() -> (SimStorage, Arc<dyn Storage>) {
    let sim = SimStorage::new();
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    (sim, storage)
}

fn config() -> QueueConfig {
    QueueConfig { preallocate_next_segment: false, ..QueueConfig::new(SIZE) }
}

fn dir() -> &'static Path {
    Path::new("/q")
}

/// Appends `data`, rolling to a new segment (padding the old one's tail with
/// 0xFF) when it does not fit. Returns the absolute offset written at.
fn append(queue: &SegmentQueue, data: &[u8]) -> u64 {
    loop {
        let file = queue.roll_to_writable_segment(0).unwrap();
        match file.append_bytes(7, data).unwrap() {
            mapped_file::Appended::Written { wrote_offset, .. } => return wrote_offset,
            mapped_file::Appended::DoesNotFit { .. } => {
                file.append_with(7, |_, tail| {
                    tail.fill(0xFF);
                    AppendStatus::Written { bytes: tail.len(), value: () }
                })
                .unwrap();
            }
        }
    }
}

#[test]
fn first_segment_starts_at_an_aligned_offset_and_rolls_over() {
    let (_sim, storage) = sim();
    let queue = SegmentQueue::load(storage, dir(), config(), None).unwrap();
    assert!(queue.last_mapped_file().is_none());
    let first = queue.roll_to_writable_segment(SIZE as u64 * 3 + 100).unwrap();
    assert_eq!(first.file_from_offset(), SIZE as u64 * 3);
    assert_eq!(first.path(), dir().join(file_name(SIZE as u64 * 3)));
    for _ in 0..3 {
        append(&queue, &[1; 10_000]);
    }
    assert_eq!(queue.segment_count(), 3);
    assert_eq!(queue.min_offset(), SIZE as u64 * 3);
    let last = queue.last_mapped_file().unwrap();
    assert_eq!(last.file_from_offset(), SIZE as u64 * 5);
    assert_eq!(queue.max_offset(), SIZE as u64 * 5 + 10_000);
}

#[test]
fn lookup_by_offset_is_exact_at_boundaries() {
    let (_sim, storage) = sim();
    let queue = SegmentQueue::load(storage, dir(), config(), None).unwrap();
    for _ in 0..3 {
        append(&queue, &[1; 10_000]);
    }
    let find = |o| queue.find_mapped_file_by_offset(o, false).map(|f| f.file_from_offset());
    assert_eq!(find(0), Some(0));
    assert_eq!(find(SIZE as u64 - 1), Some(0));
    assert_eq!(find(SIZE as u64), Some(SIZE as u64));
    assert_eq!(find(3 * SIZE as u64 - 1), Some(2 * SIZE as u64));
    assert_eq!(find(3 * SIZE as u64), None);
    assert_eq!(queue.find_mapped_file_by_offset(3 * SIZE as u64, true).unwrap().file_from_offset(), 0);
}

#[test]
fn lookup_during_roll_over_never_misses_written_data() {
    let (_sim, storage) = sim();
    let queue = Arc::new(SegmentQueue::load(storage, dir(), QueueConfig::new(SIZE), None).unwrap());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let lookups = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let reader = {
        let (queue, stop, lookups) = (Arc::clone(&queue), Arc::clone(&stop), Arc::clone(&lookups));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                let max = queue.max_offset();
                if max == 0 {
                    std::thread::yield_now();
                    continue;
                }
                // Every offset below max_offset must be found, during roll-over too.
                let probe = max - 1;
                let file = queue.find_mapped_file_by_offset(probe, false).expect("written offset not found");
                assert!(file.file_from_offset() <= probe && probe < file.file_from_offset() + SIZE as u64);
                lookups.fetch_add(1, Ordering::Release);
            }
        })
    };
    // Keep rolling over until the reader has demonstrably run alongside.
    let mut i = 0u32;
    while i < 2000 || lookups.load(Ordering::Acquire) < 1000 {
        append(&queue, &i.to_le_bytes().repeat(100));
        i += 1;
    }
    stop.store(true, Ordering::Release);
    reader.join().unwrap();
    assert!(queue.segment_count() > 40);
}

#[test]
fn a_flush_spanning_two_segments_covers_both() {
    let (sim, storage) = sim();
    let queue = SegmentQueue::load(storage, dir(), config(), None).unwrap();
    append(&queue, &[1; 10_000]);
    queue.flush(0).unwrap();
    append(&queue, &[2; 7000]); // does not fit: pads segment 0, goes to segment 1
    let end = queue.max_offset();
    assert_eq!(end, SIZE as u64 + 7000);
    // One flush must make the tail of segment 0 *and* the head of segment 1 durable.
    let progress = queue.flush(0).unwrap();
    assert_eq!(progress, QueueProgress { from: 10_000, to: end });
    assert_eq!(queue.flushed_where(), end);
    assert_eq!(sim.dirty_sectors(), 0, "everything up to the request is durable");
    assert_eq!(queue.flush(0).unwrap().moved(), 0);
}

#[test]
fn least_pages_holds_back_small_flushes_but_not_full_segments() {
    let (_sim, storage) = sim();
    let queue = SegmentQueue::load(storage, dir(), config(), None).unwrap();
    append(&queue, &[1; 100]);
    assert_eq!(queue.flush(1).unwrap().moved(), 0, "less than a page");
    append(&queue, &[1; SIZE - 100]); // fills segment 0 exactly
    assert_eq!(queue.flush(4).unwrap().to, SIZE as u64, "a full segment always qualifies");
}

#[test]
fn write_buffers_are_committed_across_segments_and_returned() {
    let (_sim, storage) = sim();
    let mut pool_config = PoolConfig::new(2, SIZE);
    pool_config.lock_memory = LockMemory::Never;
    let pool = TransientStorePool::new(pool_config).unwrap();
    let queue = SegmentQueue::load(storage, dir(), config(), Some(pool.clone())).unwrap();
    append(&queue, &[1; 10_000]);
    assert_eq!(pool.available_buffer_nums(), 1);
    assert_eq!(queue.max_offset(), 0, "nothing committed yet");
    assert_eq!(queue.remain_how_many_data_to_commit(), 10_000);
    append(&queue, &[2; 10_000]);
    assert_eq!(pool.available_buffer_nums(), 0);
    assert_eq!(queue.commit(0).unwrap(), QueueProgress { from: 0, to: SIZE as u64 + 10_000 });
    assert_eq!(pool.available_buffer_nums(), 1, "full segment gave its buffer back");
    assert_eq!(queue.flush(0).unwrap().to, SIZE as u64 + 10_000);
    assert_eq!(&queue.read(SIZE as u64, 4).unwrap()[..], &[2; 4]);
}

#[test]
fn an_empty_pool_is_a_choice() {
    let (_sim, storage) = sim();
    let mut pool_config = PoolConfig::new(1, SIZE);
    pool_config.lock_memory = LockMemory::Never;
    let pool = TransientStorePool::new(pool_config).unwrap();
    let _held = pool.try_borrow().unwrap();
    let strict = QueueConfig { pool_exhausted_policy: PoolExhaustedPolicy::Fail, ..config() };
    let queue = SegmentQueue::load(Arc::clone(&storage), dir(), strict, Some(pool.clone())).unwrap();
    assert!(matches!(queue.roll_to_writable_segment(0), Err(QueueError::PoolExhausted { pool_size: 1, offset: 0 })));
    assert_eq!(queue.segment_count(), 0, "nothing half-made");
    let lenient = SegmentQueue::load(storage, Path::new("/q2"), config(), Some(pool)).unwrap();
    let file = lenient.roll_to_writable_segment(0).unwrap();
    assert!(!file.has_write_buffer());
}

#[test]
fn load_rejects_wrong_sizes_bad_names_and_gaps_naming_the_file() {
    type Case = (&'static str, Vec<(String, usize)>, &'static str);
    let cases: Vec<Case> = vec![
        ("wrong size", vec![(file_name(0), SIZE), (file_name(SIZE as u64), SIZE - 1)], "00000000000000016384"),
        ("zero-length middle", vec![(file_name(0), 0), (file_name(SIZE as u64), SIZE)], "00000000000000000000"),
        ("bad name", vec![(file_name(0), SIZE), ("notes.txt".into(), 10)], "notes.txt"),
        ("gap", vec![(file_name(0), SIZE), (file_name(2 * SIZE as u64), SIZE)], "00000000000000032768"),
        ("misaligned", vec![(file_name(100), SIZE)], "00000000000000000100"),
    ];
    for (what, files, named) in cases {
        let (sim, storage) = sim();
        for (name, len) in &files {
            sim.write_file(&dir().join(name), &vec![0; *len]);
        }
        let err = SegmentQueue::load(storage, dir(), config(), None).unwrap_err();
        assert!(err.to_string().contains(named), "{what}: {err}");
    }
}

#[test]
fn a_zero_length_last_file_is_deleted_on_load() {
    let (sim, storage) = sim();
    sim.write_file(&dir().join(file_name(0)), &vec![5; SIZE]);
    sim.write_file(&dir().join(file_name(SIZE as u64)), &[]);
    let queue = SegmentQueue::load(storage, dir(), config(), None).unwrap();
    assert_eq!(queue.segment_count(), 1);
    assert_eq!(queue.load_report().removed_empty_tail, Some(dir().join(file_name(SIZE as u64))));
    assert!(sim.file_bytes(&dir().join(file_name(SIZE as u64))).is_none());
    assert_eq!(queue.max_offset(), SIZE as u64, "loaded files are marked full");
}

#[test]
fn truncate_drops_the_dirty_tail_and_later_files() {
    let (_sim, storage) = sim();
    let queue = SegmentQueue::load(storage, dir(), config(), None).unwrap();
    for _ in 0..3 {
        append(&queue, &[1; 10_000]);
    }
    queue.flush(0).unwrap();
    let report = queue.truncate_dirty_files(SIZE as u64 + 500).unwrap();
    assert_eq!(report.segments_deleted, 1);
    assert_eq!(report.bytes_dropped_in_place, SIZE as u64 - 500, "segment 1 was padded full");
    assert_eq!(queue.max_offset(), SIZE as u64 + 500);
    assert_eq!(queue.flushed_where(), SIZE as u64 + 500);
    assert_eq!(append(&queue, &[9; 10]), SIZE as u64 + 500);
}

#[test]
fn expired_files_go_from_the_front_only_never_the_last_nor_past_a_live_one() {
    let (_sim, storage) = sim();
    let queue = SegmentQueue::load(storage, dir(), config(), None).unwrap();
    for _ in 0..4 {
        append(&queue, &[1; 10_000]);
    }
    queue.flush(0).unwrap();
    let files = queue.segments();
    files[0].set_store_timestamp(100);
    files[1].set_store_timestamp(5000); // not expired: blocks files[2]
    files[2].set_store_timestamp(100);
    files[3].set_store_timestamp(100);
    assert_eq!(queue.delete_expired_file_by_time(1000, 2000, 10).unwrap(), 1);
    assert_eq!(queue.min_offset(), SIZE as u64, "no hole");
    files[1].set_store_timestamp(100);
    assert_eq!(queue.delete_expired_file_by_time(1000, 2000, 10).unwrap(), 2);
    assert_eq!(queue.segment_count(), 1, "the last file stays");
    assert_eq!(queue.delete_expired_file_by_offset(u64::MAX, 10).unwrap(), 0);
}

#[test]
fn deleting_to_free_space_stops_once_enough_is_gone_and_counts_views_still_held() {
    let (_sim, storage) = sim();
    let queue = SegmentQueue::load(storage, dir(), config(), None).unwrap();
    for _ in 0..5 {
        append(&queue, &[1; 10_000]);
    }
    let held = queue.read(0, 100).unwrap(); // a view of the first segment
    assert_eq!(queue.delete_oldest_to_free(dir(), 1, 10).unwrap(), 0, "nothing durable yet");
    queue.flush(0).unwrap();
    assert_eq!(queue.delete_oldest_to_free(dir(), 1, 10).unwrap(), 1, "one byte: one segment");
    assert_eq!(queue.bytes_awaiting_release(dir()), SIZE as u64, "the view holds the first segment's space");
    assert_eq!(queue.bytes_awaiting_release(Path::new("/elsewhere")), 0);
    assert_eq!(queue.delete_oldest_to_free(dir(), SIZE as u64 + 1, 10).unwrap(), 2);
    assert_eq!(
        queue.delete_oldest_to_free(Path::new("/elsewhere"), 1, 10).unwrap(),
        1,
        "frees nothing there: to the last"
    );
    assert_eq!(queue.segment_count(), 1, "the last file stays");
    assert_eq!(queue.delete_oldest_to_free(dir(), u64::MAX, 10).unwrap(), 0);
    drop(held);
    assert_eq!(queue.bytes_awaiting_release(dir()), 0);
}

#[test]
fn the_front_hold_keeps_every_segment_reaching_its_offset_but_from_a_full_disk() {
    let (_sim, storage) = sim();
    let queue = SegmentQueue::load(storage, dir(), config(), None).unwrap();
    for _ in 0..5 {
        append(&queue, &[1; 10_000]);
    }
    queue.flush(0).unwrap();
    let hold = Arc::new(std::sync::atomic::AtomicU64::new(SIZE as u64 + 1));
    let given = Arc::clone(&hold);
    queue.set_front_hold(Box::new(move || given.load(std::sync::atomic::Ordering::SeqCst)));
    // The hold lies inside segment 1: only segment 0 may go, by age or offset.
    assert_eq!(queue.delete_expired_file_by_offset(u64::MAX, 10).unwrap(), 1);
    assert_eq!(queue.delete_expired_file_by_time(0, u64::MAX, 10).unwrap(), 0);
    assert_eq!(queue.min_offset(), SIZE as u64);
    // Raised past segment 2's end: segments 1 and 2 go, the rest stays.
    hold.store(3 * SIZE as u64, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(queue.delete_expired_file_by_time(0, u64::MAX, 10).unwrap(), 2);
    assert_eq!(queue.min_offset(), 3 * SIZE as u64);
    // Freeing space on a full disk goes past it: appends matter more.
    assert_eq!(queue.delete_oldest_to_free(dir(), 1, 10).unwrap(), 1);
    assert_eq!(queue.min_offset(), 4 * SIZE as u64);
}

#[test]
fn unflushed_files_are_not_deleted() {
    let (_sim, storage) = sim();
    let queue = SegmentQueue::load(storage, dir(), config(), None).unwrap();
    for _ in 0..3 {
        append(&queue, &[1; 10_000]);
    }
    assert_eq!(queue.delete_expired_file_by_offset(2 * SIZE as u64, 10).unwrap(), 0, "nothing flushed yet");
    queue.flush(0).unwrap();
    assert_eq!(queue.delete_expired_file_by_offset(2 * SIZE as u64, 10).unwrap(), 2);
}

#[test]
fn preallocation_prepares_the_next_segment() {
    let dir = tempfile::tempdir().unwrap();
    let config = QueueConfig { warm_mapped_file_enable: true, ..QueueConfig::new(SIZE) };
    let queue = SegmentQueue::load(Arc::new(MmapStorage::lock(dir.path()).unwrap()), dir.path(), config, None).unwrap();
    append(&queue, &[1; 10]);
    // The next segment appears on disk without any append asking for it.
    let next = dir.path().join(file_name(SIZE as u64));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !next.exists() {
        assert!(std::time::Instant::now() < deadline, "preallocation never happened");
        std::thread::yield_now();
    }
    append(&queue, &[2; SIZE - 5]);
    assert_eq!(queue.segment_count(), 2);
    assert_eq!(queue.last_mapped_file().unwrap().path(), next);
    // Shutdown removes a prepared segment nobody used.
    let third = dir.path().join(file_name(2 * SIZE as u64));
    while !third.exists() {
        assert!(std::time::Instant::now() < deadline, "preallocation never happened");
        std::thread::yield_now();
    }
    queue.shutdown();
    assert!(!third.exists());
}

#[test]
fn reload_after_clean_stop_reads_everything_back() {
    let dir = tempfile::tempdir().unwrap();
    let queue =
        SegmentQueue::load(Arc::new(MmapStorage::lock(dir.path()).unwrap()), dir.path(), QueueConfig::new(SIZE), None)
            .unwrap();
    let mut offsets = Vec::new();
    for i in 0..5u8 {
        offsets.push(append(&queue, &[i; 9000]));
    }
    queue.flush(0).unwrap();
    let end = queue.max_offset();
    queue.shutdown();
    drop(queue);
    let queue =
        SegmentQueue::load(Arc::new(MmapStorage::lock(dir.path()).unwrap()), dir.path(), QueueConfig::new(SIZE), None)
            .unwrap();
    queue.truncate_dirty_files(end).unwrap();
    for (i, offset) in offsets.iter().enumerate() {
        assert_eq!(&queue.read(*offset, 9000).unwrap()[..], &[i as u8; 9000][..]);
    }
    assert!(matches!(queue.read(end + 1, 1), Err(QueueError::OffsetOutOfRange { .. }) | Err(QueueError::File(_))));
}

#[test]
fn a_sync_error_stops_flushed_where() {
    let (sim, storage) = sim();
    let queue = SegmentQueue::load(storage, dir(), config(), None).unwrap();
    append(&queue, &[1; 100]);
    queue.flush(0).unwrap();
    append(&queue, &[1; 100]);
    sim.fail_nth_sync(1);
    assert!(queue.flush(0).is_err());
    assert_eq!(queue.flushed_where(), 100);
    assert!(queue.flush(0).is_err(), "latched");
    assert_eq!(queue.flushed_where(), 100);
}

#[test]
fn truncating_above_the_flushed_point_does_not_claim_durability() {
    // Found by the model test: truncation once set `flushed` to the truncation
    // point, so bytes below it that were never synced were lost in a power cut.
    let (sim, storage) = sim();
    let queue = SegmentQueue::load(storage, dir(), config(), None).unwrap();
    append(&queue, &[1, 1]);
    queue.truncate_dirty_files(1).unwrap();
    append(&queue, &[0]);
    queue.flush(0).unwrap();
    sim.crash_losing_unsynced();
    assert_eq!(&sim.file_bytes(&dir().join(file_name(0))).unwrap()[..2], &[1, 0]);
}

#[test]
fn max_offset_does_not_count_uncommitted_bytes_of_an_earlier_segment() {
    // Found by the model test: right after a roll, the last segment's read position
    // is 0 while the previous one still holds uncommitted write-buffer bytes.
    let (_sim, storage) = sim();
    let mut pool_config = PoolConfig::new(2, SIZE);
    pool_config.lock_memory = LockMemory::Never;
    let pool = TransientStorePool::new(pool_config).unwrap();
    let queue = SegmentQueue::load(storage, dir(), config(), Some(pool)).unwrap();
    append(&queue, &[1; 10_000]);
    append(&queue, &[2; 10_000]);
    assert_eq!(queue.segment_count(), 2);
    assert_eq!(queue.max_offset(), 0, "nothing is readable yet");
    queue.commit(0).unwrap();
    assert_eq!(queue.max_offset(), SIZE as u64 + 10_000);
}

#[test]
fn flushing_and_committing_at_the_end_of_a_full_last_segment_terminate() {
    // Found by the model test: with the position at the very end of the last
    // segment, the "first file on not found" fallback returned a full segment that
    // never moved the position, and the loop spun forever.
    let (_sim, storage) = sim();
    let queue = SegmentQueue::load(storage, dir(), config(), None).unwrap();
    append(&queue, &[1; SIZE]);
    assert_eq!(queue.flush(0).unwrap().to, SIZE as u64);
    assert_eq!(queue.flush(0).unwrap().moved(), 0);
    assert_eq!(queue.commit(0).unwrap().to, SIZE as u64);
    assert_eq!(queue.commit(0).unwrap().moved(), 0);
}

#[test]
fn truncation_erases_and_syncs_what_it_cuts() {
    // Bytes past the cut are zeroed and synced, whatever they were: with them left
    // in place, a power cut (or a new append that ends where old bytes start) would
    // bring them back.
    let (sim, storage) = sim();
    let queue = SegmentQueue::load(Arc::clone(&storage), dir(), config(), None).unwrap();
    append(&queue, &[1; 1000]);
    queue.flush(0).unwrap();
    let report = queue.truncate_dirty_files(400).unwrap();
    assert_eq!(report.bytes_dropped_in_place, 600);
    sim.crash_losing_unsynced();
    let bytes = sim.file_bytes(&dir().join(file_name(0))).unwrap();
    assert!(bytes[..400].iter().all(|&b| b == 1));
    assert!(bytes[400..].iter().all(|&b| b == 0), "cut bytes survived a power cut");
}

#[test]
fn a_refused_truncation_leaves_the_queue_as_it_was() {
    // A reader's view above the cut refuses the truncation; the queue once came
    // back empty from that error, so reads failed and a roll recreated segment 0.
    let (_sim, storage) = sim();
    let queue = SegmentQueue::load(storage, dir(), config(), None).unwrap();
    let offsets: Vec<u64> = (0..3u8).map(|i| append(&queue, &[i + 1; 10_000])).collect();
    queue.flush(0).unwrap();
    let view = queue.read(offsets[1], 10_000).unwrap();
    let err = queue.truncate_dirty_files(offsets[1] + 10).unwrap_err();
    assert!(matches!(err, QueueError::File(MappedFileError::ViewsOutstanding { .. })), "{err}");
    assert_eq!(queue.segment_count(), 3, "no segment dropped");
    for (i, offset) in offsets.iter().enumerate() {
        assert_eq!(&queue.read(*offset, 10_000).unwrap()[..], &[i as u8 + 1; 10_000][..]);
    }
    drop(view);
    queue.truncate_dirty_files(offsets[1] + 10).unwrap();
    assert_eq!(queue.max_offset(), offsets[1] + 10);
}

#[test]
fn a_failed_deletion_during_truncation_leaves_a_consistent_prefix() {
    let (sim, storage) = sim();
    let queue = SegmentQueue::load(storage, dir(), config(), None).unwrap();
    let offsets: Vec<u64> = (0..3u8).map(|i| append(&queue, &[i + 1; 10_000])).collect();
    queue.flush(0).unwrap();
    let end = queue.max_offset();
    sim.fail_removes(true);
    assert!(queue.truncate_dirty_files(offsets[0] + 10).is_err());
    assert_eq!(queue.segment_count(), 3, "the segment that could not be deleted stays listed");
    assert_eq!(queue.max_offset(), end);
    assert_eq!(&queue.read(offsets[2], 10_000).unwrap()[..], &[3; 10_000][..], "and usable");
    sim.fail_removes(false);
    let report = queue.truncate_dirty_files(offsets[0] + 10).unwrap();
    assert_eq!(report.segments_deleted, 2);
    assert_eq!(queue.max_offset(), offsets[0] + 10);
}

#[test]
fn a_failed_warm_up_leaves_no_half_made_segment_behind() {
    // The file used to stay, so every later roll failed with "file exists".
    for preallocate in [false, true] {
        let (sim, storage) = sim();
        let config = QueueConfig { preallocate_next_segment: preallocate, warm_mapped_file_enable: true, ..config() };
        let queue = SegmentQueue::load(storage, dir(), config, None).unwrap();
        sim.fail_all_syncs(true);
        let err = queue.roll_to_writable_segment(0).unwrap_err();
        assert!(matches!(err, QueueError::File(MappedFileError::SyncFailed { .. })), "{err}");
        assert!(sim.file_bytes(&dir().join(file_name(0))).is_none(), "half-made segment left behind");
        sim.fail_all_syncs(false);
        append(&queue, &[1; 10_000]);
        // Roll over onto a segment the allocator prepared (and warmed) or in place.
        assert_eq!(append(&queue, &[2; 10_000]), SIZE as u64, "preallocate: {preallocate}");
        queue.shutdown();
    }
}

#[test]
fn expired_segments_become_spares_up_to_the_limit_and_new_segments_are_made_of_them() {
    let (sim, storage) = sim();
    let config = QueueConfig { recycle_segments: 1, ..config() };
    let queue = SegmentQueue::load(Arc::clone(&storage), dir(), config.clone(), None).unwrap();
    for i in 0..4u8 {
        append(&queue, &[i + 1; 10_000]);
    }
    queue.flush(0).unwrap();
    let spare_dir = dir().join(RECYCLE_DIR);
    let held = queue.segments()[1].read(0, 4).unwrap(); // a reader still holds segment 1
    assert_eq!(queue.delete_expired_file_by_offset(2 * SIZE as u64, 10).unwrap(), 2);
    let spares = storage.list(&spare_dir).unwrap();
    assert_eq!(spares.len(), 1, "one kept, as configured");
    assert_eq!(spares[0].name, file_name(0), "segment 0; segment 1 had a view and was deleted");
    assert!(sim.file_bytes(&dir().join(file_name(SIZE as u64))).is_none());
    assert_eq!(&held[..], &[2; 4], "the deleted segment's view is still whole");
    drop(held);

    // The queue holds segments 2 and 3 (3 not full); the next roll takes the spare.
    let next = 4 * SIZE as u64;
    let mut wrote = append(&queue, &[9; 10_000]);
    while wrote < next {
        wrote = append(&queue, &[9; 10_000]);
    }
    assert!(storage.list(&spare_dir).unwrap().is_empty(), "the spare was used");
    let reused = queue.last_mapped_file().unwrap();
    assert_eq!(reused.file_from_offset(), next);
    assert_eq!(&reused.read(0, 10_000).unwrap()[..], &[9; 10_000][..]);
    assert_eq!(
        sim.file_bytes(reused.path()).unwrap()[10_000],
        0xFF,
        "old bytes (segment 0's padding) past the new data, unreadable"
    );
    assert!(reused.read(10_000, 1).is_err());

    // The spare directory is not part of the segment layout: a reload loads.
    drop(queue);
    let reloaded = SegmentQueue::load(storage, dir(), config, None).unwrap();
    assert_eq!(reloaded.segment_count(), 3);
}

#[test]
fn without_recycling_expired_segments_are_deleted_and_no_spare_directory_appears() {
    let (sim, storage) = sim();
    let queue = SegmentQueue::load(Arc::clone(&storage), dir(), config(), None).unwrap();
    for _ in 0..3 {
        append(&queue, &[1; 10_000]);
    }
    queue.flush(0).unwrap();
    assert_eq!(queue.delete_expired_file_by_offset(2 * SIZE as u64, 10).unwrap(), 2);
    assert!(sim.snapshot().files.iter().all(|f| !f.path.starts_with(dir().join(RECYCLE_DIR))));
}

fn three_dirs() -> Vec<SegmentDir> {
    vec![SegmentDir::writable("/disk1/log"), SegmentDir::writable("/disk2/log"), SegmentDir::read_only("/old/log")]
}

/// The directory each segment of the queue lives in, oldest first.
fn homes(queue: &SegmentQueue) -> Vec<PathBuf> {
    queue.segments().iter().map(|f| f.path().parent().unwrap().to_path_buf()).collect()
}

#[test]
fn segments_alternate_over_writable_dirs_skipping_full_and_read_only_ones() {
    for preallocate in [false, true] {
        let (sim, storage) = sim();
        // The read-only directory holds the oldest segment.
        sim.write_file(&Path::new("/old/log").join(file_name(0)), &[0; SIZE]);
        let config = QueueConfig { preallocate_next_segment: preallocate, ..config() };
        let queue = SegmentQueue::load_dirs(Arc::clone(&storage), three_dirs(), config.clone(), None).unwrap();
        assert_eq!(queue.segment_count(), 1);
        let (d1, d2, old) = (PathBuf::from("/disk1/log"), PathBuf::from("/disk2/log"), PathBuf::from("/old/log"));
        for _ in 0..3 {
            append(&queue, &[3; 10_000]); // one segment each (loaded segments count as full)
        }
        // Segment i goes to writable dir i % 2: 1 → disk2, 2 → disk1, 3 → disk2.
        assert_eq!(homes(&queue), [old.clone(), d2.clone(), d1.clone(), d2.clone()], "preallocate: {preallocate}");
        if preallocate {
            // Segment 4 is prepared on disk1 before disk1 fills: it must not stay there.
            let started = std::time::Instant::now();
            while !queue.allocator.lock().as_ref().unwrap().is_ready(4 * SIZE as u64) {
                assert!(started.elapsed() < std::time::Duration::from_secs(10), "never prepared");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            assert!(sim.file_bytes(&d1.join(file_name(4 * SIZE as u64))).is_some());
        }
        // disk1 full: every new segment goes to disk2; both full: both are used again.
        assert!(queue.set_dir_full(&d1, true));
        assert_eq!(queue.dir_for(4 * SIZE as u64), d2);
        assert_eq!(queue.dir_for(5 * SIZE as u64), d2);
        assert!(queue.set_dir_full(&d2, true));
        assert_eq!(queue.dir_for(4 * SIZE as u64), d1);
        assert_eq!(queue.dir_for(5 * SIZE as u64), d2);
        assert!(!queue.set_dir_full(Path::new("/elsewhere"), true));
        assert!(queue.set_dir_full(&d2, false));
        for _ in 0..2 {
            append(&queue, &[4; 10_000]);
        }
        assert_eq!(homes(&queue)[4..], [d2.clone(), d2.clone()], "preallocate: {preallocate}");
        assert!(sim.file_bytes(&d1.join(file_name(4 * SIZE as u64))).is_none(), "the prepared one is gone");
        queue.flush(0).unwrap();
        queue.shutdown();
        let end = queue.max_offset();
        drop(queue);

        // Reload: one sequence over every directory, the read-only one included.
        let reloaded = SegmentQueue::load_dirs(Arc::clone(&storage), three_dirs(), config.clone(), None).unwrap();
        assert_eq!(reloaded.segment_count(), 6);
        assert_eq!(reloaded.max_offset(), 6 * SIZE as u64, "loaded segments are full");
        assert!(end <= reloaded.max_offset());
        assert_eq!(&reloaded.read(3 * SIZE as u64, 4).unwrap()[..], &[3; 4]);
        drop(reloaded);
        // A directory left out is a missing segment, named.
        let without = vec![SegmentDir::writable("/disk1/log"), SegmentDir::read_only("/old/log")];
        let err = SegmentQueue::load_dirs(Arc::clone(&storage), without, config, None).unwrap_err();
        assert!(matches!(err, QueueError::Gap { expected, .. } if expected == SIZE as u64), "{err}");
    }
}

#[test]
fn truncation_and_deletion_reach_every_dir_and_spares_stay_in_their_own() {
    let (sim, storage) = sim();
    let config = QueueConfig { recycle_segments: 2, ..config() };
    let queue = SegmentQueue::load_dirs(Arc::clone(&storage), three_dirs()[..2].to_vec(), config, None).unwrap();
    for _ in 0..6 {
        append(&queue, &[5; 10_000]);
    }
    queue.flush(0).unwrap();
    // Segment 0 lives on disk1, segment 1 on disk2: each becomes a spare there.
    assert_eq!(queue.delete_expired_file_by_offset(2 * SIZE as u64, 10).unwrap(), 2);
    let spares = |d: &str| storage.list(&Path::new(d).join(RECYCLE_DIR)).map(|l| l.len()).unwrap_or(0);
    assert_eq!((spares("/disk1/log"), spares("/disk2/log")), (1, 1));
    // Truncating deletes the later segments wherever they live.
    queue.truncate_dirty_files(3 * SIZE as u64 + 100).unwrap();
    assert_eq!(queue.segment_count(), 2);
    for offset in [4, 5] {
        let name = file_name(offset * SIZE as u64);
        assert!(sim.file_bytes(&Path::new("/disk1/log").join(&name)).is_none());
        assert!(sim.file_bytes(&Path::new("/disk2/log").join(&name)).is_none());
    }
    // The next segments are made of the spare of the directory they go to (the
    // first append still fits in segment 3).
    for _ in 0..3 {
        append(&queue, &[6; 10_000]);
    }
    assert_eq!(homes(&queue)[2..], [PathBuf::from("/disk1/log"), PathBuf::from("/disk2/log")]);
    assert_eq!((spares("/disk1/log"), spares("/disk2/log")), (0, 0), "each taken where it was");
}

#[test]
fn bad_dir_sets_are_refused_clearly() {
    let (sim, storage) = sim();
    let only_read = vec![SegmentDir::read_only("/a")];
    let nested = vec![SegmentDir::writable("/a"), SegmentDir::writable("/a/b")];
    let twice = vec![SegmentDir::writable("/a"), SegmentDir::read_only("/a")];
    for dirs in [only_read, nested, twice] {
        let err = SegmentQueue::load_dirs(Arc::clone(&storage), dirs.clone(), config(), None).unwrap_err();
        assert!(matches!(err, QueueError::InvalidConfig { .. }), "{dirs:?}: {err}");
    }
    // The same segment in two directories: which is the log's is not for us to guess.
    sim.write_file(&Path::new("/a").join(file_name(0)), &[0; SIZE]);
    sim.write_file(&Path::new("/b").join(file_name(0)), &[0; SIZE]);
    let dirs = vec![SegmentDir::writable("/a"), SegmentDir::writable("/b")];
    let err = SegmentQueue::load_dirs(storage, dirs, config(), None).unwrap_err();
    assert!(matches!(err, QueueError::Duplicate { offset: 0, .. }), "{err}");
    assert!(err.to_string().contains("/a/") && err.to_string().contains("/b/"), "{err}");
}

#[test]
fn clear_deletes_every_segment_and_the_next_one_starts_anywhere() {
    let (sim, storage) = sim();
    let queue = SegmentQueue::load(Arc::clone(&storage), dir(), config(), None).unwrap();
    for _ in 0..3 {
        append(&queue, &[1; 10_000]);
    }
    queue.flush(0).unwrap();
    let held = queue.segments()[0].read(0, 4).unwrap();
    assert!(matches!(queue.clear(), Err(QueueError::File(MappedFileError::ViewsOutstanding { .. }))));
    assert_eq!(queue.segment_count(), 3, "refused: nothing deleted");
    drop(held);
    assert_eq!(queue.clear().unwrap(), 3);
    assert_eq!((queue.segment_count(), queue.max_offset(), queue.flushed_where()), (0, 0, 0));
    assert!(storage.list(dir()).unwrap().is_empty());
    let file = queue.roll_to_writable_segment(40 * SIZE as u64 + 5).unwrap();
    assert_eq!(file.file_from_offset(), 40 * SIZE as u64);
    file.append_bytes(0, b"again").unwrap();
    assert_eq!(queue.flush(0).unwrap().to, 40 * SIZE as u64 + 5);
    drop(sim);
}

/// Length-prefixed records: a `u32` length, then the body; zeros where a
/// length would be end the segment (it was sealed), a length past the segment
/// or a body shorter than it says ends the data.
fn parse_record(bytes: &[u8]) -> Scan {
    let Some(head) = bytes.get(..4) else { return Scan::End };
    let len = u32::from_le_bytes(head.try_into().unwrap()) as usize;
    if len == 0 {
        return Scan::SegmentEnd;
    }
    match bytes.get(4..4 + len) {
        Some(body) if body.iter().all(|&b| b != 0) => Scan::Record(4 + len),
        _ => Scan::End,
    }
}

/// Appends one record, sealing the segment when it does not fit. Returns its offset.
fn put_record(queue: &SegmentQueue, body: &[u8]) -> u64 {
    let mut record = (body.len() as u32).to_le_bytes().to_vec();
    record.extend_from_slice(body);
    loop {
        let file = queue.roll_to_writable_segment(0).unwrap();
        match file.append_bytes(0, &record).unwrap() {
            mapped_file::Appended::Written { wrote_offset, .. } => return wrote_offset,
            mapped_file::Appended::DoesNotFit { .. } => {
                queue.seal().unwrap();
            }
        }
    }
}

#[test]
fn recover_with_a_record_parser_finds_the_end_across_sealed_segments_and_cuts_a_torn_tail() {
    let (_sim, storage) = sim();
    let queue = SegmentQueue::load(Arc::clone(&storage), dir(), config(), None).unwrap();
    let mut written = Vec::new();
    for i in 0..40u8 {
        let body = vec![i + 1; 1000 + usize::from(i) * 7];
        written.push((put_record(&queue, &body), body));
    }
    assert!(queue.segment_count() >= 3, "records crossed sealed segments");
    let end = queue.max_offset();
    // A torn record: a header promising more than was written.
    let file = queue.roll_to_writable_segment(0).unwrap();
    file.append_bytes(0, &500u32.to_le_bytes()).unwrap();
    file.append_bytes(0, &[9u8; 100]).unwrap();
    queue.flush(0).unwrap();
    queue.shutdown();
    drop(queue);

    let queue = SegmentQueue::load(Arc::clone(&storage), dir(), config(), None).unwrap();
    assert_eq!(queue.max_offset() % SIZE as u64, 0, "loaded segments read as full until recovered");
    assert_eq!(queue.recover_with(parse_record).unwrap(), end);
    assert_eq!((queue.max_offset(), queue.flushed_where()), (end, end));
    for (offset, body) in &written {
        let head = queue.read(*offset, 4).unwrap();
        assert_eq!(u32::from_le_bytes(head[..].try_into().unwrap()) as usize, body.len());
        assert_eq!(&queue.read(offset + 4, body.len()).unwrap()[..], &body[..]);
    }
    // Appends go on at the end, and the cut bytes never come back.
    let next = put_record(&queue, b"after");
    assert_eq!(next, end);
    queue.shutdown();
    drop(queue);
    let queue = SegmentQueue::load(storage, dir(), config(), None).unwrap();
    assert_eq!(queue.recover_with(parse_record).unwrap(), end + 4 + 5);
}

#[test]
fn seal_starts_the_next_append_at_the_next_segment() {
    let (_sim, storage) = sim();
    let queue = SegmentQueue::load(storage, dir(), config(), None).unwrap();
    assert_eq!(queue.seal().unwrap(), None, "nothing to seal yet");
    put_record(&queue, b"one");
    assert_eq!(queue.seal().unwrap(), Some(SIZE as u64));
    assert_eq!(put_record(&queue, b"two"), SIZE as u64);
    assert_eq!(queue.segment_count(), 2);
}

/// Preparation on, in steps of a page, with the given budget.
fn prepared_config(bytes_per_sec: u64) -> QueueConfig {
    QueueConfig {
        segment_preparation: SegmentPreparation::Written,
        preparation_chunk_bytes: 4096,
        preparation_bytes_per_sec: bytes_per_sec,
        ..QueueConfig::new(SIZE)
    }
}

/// Waits (bounded) until the queue's preparation counters satisfy `done`.
fn wait_for_preparation(queue: &SegmentQueue, what: &str, done: impl Fn(&PreparationStats) -> bool) {
    let started = std::time::Instant::now();
    while !done(&queue.preparation_stats()) {
        assert!(started.elapsed() < std::time::Duration::from_secs(20), "{what}: {:?}", queue.preparation_stats());
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn a_roll_over_takes_the_segment_prepared_with_its_blocks_written_and_synced() {
    let (sim, storage) = sim();
    let queue = SegmentQueue::load(storage, dir(), prepared_config(0), None).unwrap();
    append(&queue, &[1; 100]);
    // The first segment of a new queue had nothing prepared for it.
    assert_eq!(queue.preparation_stats().made_unprepared, 1);
    wait_for_preparation(&queue, "segment 1 prepared", |s| s.prepared == 1);
    let stats = queue.preparation_stats();
    assert_eq!((stats.bytes_written, stats.steps), (SIZE as u64, (SIZE / 4096) as u64), "{stats:?}");
    assert!(sim.sync_count() >= stats.steps, "every step is synced: {} syncs", sim.sync_count());
    let prepared = dir().join(file_name(SIZE as u64));
    assert_eq!(sim.file_bytes(&prepared).unwrap(), vec![0; SIZE]);
    append(&queue, &[2; 10_000]);
    append(&queue, &[3; 10_000]); // rolls over onto segment 1
    let last = queue.last_mapped_file().unwrap();
    assert_eq!(last.path(), prepared);
    let stats = queue.preparation_stats();
    assert_eq!((stats.made_unprepared, stats.handed_over_early), (1, 0), "{stats:?}");
    queue.flush(0).unwrap();
    assert_eq!(&sim.file_bytes(&prepared).unwrap()[..10_000], &[3; 10_000][..]);
}

#[test]
fn a_roll_over_that_outruns_preparation_takes_the_segment_as_far_as_it_got() {
    let (_sim, storage) = sim();
    // One page a second: a segment takes four; the roll-over comes after one step.
    let queue = SegmentQueue::load(storage, dir(), prepared_config(4096), None).unwrap();
    append(&queue, &[1; 10_000]);
    wait_for_preparation(&queue, "the first step", |s| s.steps >= 1);
    append(&queue, &[2; 10_000]); // rolls over: segment 1 is taken mid-preparation
    assert_eq!(queue.last_mapped_file().unwrap().file_from_offset(), SIZE as u64);
    let stats = queue.preparation_stats();
    assert_eq!((stats.prepared, stats.handed_over_early), (0, 1), "{stats:?}");
    assert!(stats.steps < (SIZE / 4096) as u64, "the roll-over waited for the whole preparation: {stats:?}");
    // The preparer let go: the segment it handed over is written only by appends.
    let steps = stats.steps;
    append(&queue, &[3; 4_000]);
    queue.flush(0).unwrap();
    let file = queue.last_mapped_file().unwrap();
    assert_eq!(&file.read(0, 10_000).unwrap()[..], &[2; 10_000][..]);
    assert_eq!(&file.read(10_000, 4_000).unwrap()[..], &[3; 4_000][..]);
    // The next segment is being prepared now; nothing more went into segment 1.
    assert!(queue.preparation_stats().steps >= steps);
}

#[test]
fn no_preparation_step_starts_while_a_sync_of_the_queue_is_in_flight() {
    let (sim, storage) = sim();
    let queue = SegmentQueue::load(storage, dir(), prepared_config(0), None).unwrap();
    let syncing = queue.activity.begin();
    let syncs = sim.sync_count();
    append(&queue, &[1; 100]); // asks for segment 1
    wait_for_preparation(&queue, "a wait for the sync", |s| s.waits_for_syncs >= 1);
    // Counters, not timing: however long the sync lasts, no step has started.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let stats = queue.preparation_stats();
    assert_eq!((stats.steps, stats.bytes_written), (0, 0), "{stats:?}");
    assert_eq!(sim.sync_count(), syncs, "the preparer synced during the queue's sync");
    drop(syncing);
    wait_for_preparation(&queue, "segment 1 prepared after the sync", |s| s.prepared == 1);
}

#[test]
fn a_preparation_step_that_is_not_a_page_multiple_is_refused() {
    for chunk in [0, 100, 4096 + 1] {
        let (_sim, storage) = sim();
        let config = QueueConfig { preparation_chunk_bytes: chunk, ..prepared_config(0) };
        let err = SegmentQueue::load(storage, dir(), config, None).unwrap_err();
        assert!(matches!(err, QueueError::InvalidConfig { .. }), "{chunk}: {err}");
    }
}

/// The default step (1 MiB) with segments smaller than it: one step per segment.
#[test]
fn a_step_larger_than_a_segment_prepares_the_segment_in_one_step() {
    let (_sim, storage) = sim();
    let config = QueueConfig { preparation_chunk_bytes: 2 * SIZE, ..prepared_config(0) };
    let queue = SegmentQueue::load(storage, dir(), config, None).unwrap();
    append(&queue, &[1; 100]); // asks for segment 1
    wait_for_preparation(&queue, "segment 1 prepared", |s| s.prepared == 1);
    let stats = queue.preparation_stats();
    assert_eq!((stats.steps, stats.bytes_written), (1, SIZE as u64), "{stats:?}");
}

#[test]
fn a_prepared_segment_survives_a_power_cut_and_reloads_as_the_empty_tail() {
    let (sim, storage) = sim();
    let queue = SegmentQueue::load(Arc::clone(&storage), dir(), prepared_config(0), None).unwrap();
    append(&queue, &[1; 100]);
    wait_for_preparation(&queue, "segment 1 prepared", |s| s.prepared == 1);
    queue.flush(0).unwrap();
    // The power cut, while the prepared segment waits to be taken.
    let image = sim.snapshot().crash_image(|_| false);
    let reloaded = SegmentQueue::load(
        Arc::new(image.clone()),
        dir(),
        QueueConfig { preallocate_next_segment: false, ..config() },
        None,
    )
    .unwrap();
    // Segment 1 is there, all zeros: a recovery that scans it finds no record.
    assert_eq!(reloaded.segment_count(), 2);
    assert_eq!(image.file_bytes(&dir().join(file_name(SIZE as u64))).unwrap(), vec![0; SIZE]);
    drop(storage);
}

#[test]
fn the_active_segment_made_before_any_writer_is_prepared_whole_and_synced() {
    let (sim, storage) = sim();
    let config = QueueConfig { preallocate_next_segment: false, ..prepared_config(0) };
    let queue = SegmentQueue::load(storage, dir(), config, None).unwrap();
    assert!(!queue.prepare_active_segment().unwrap(), "no active segment yet");
    let first = queue.roll_to_writable_segment(0).unwrap();
    let syncs = sim.sync_count();
    assert!(queue.prepare_active_segment().unwrap());
    let stats = queue.preparation_stats();
    assert_eq!((stats.prepared_in_place, stats.bytes_written), (1, SIZE as u64), "{stats:?}");
    assert!(sim.sync_count() > syncs, "the zeros were never synced");
    assert_eq!(sim.file_bytes(first.path()).unwrap(), vec![0; SIZE]);
    // Appends go over the zeros; the segment is not prepared again.
    let at = append(&queue, &[5; 3000]);
    assert_eq!(at, 0);
    assert!(!queue.prepare_active_segment().unwrap(), "prepared over appended bytes");
    queue.flush(0).unwrap();
    assert_eq!(&sim.file_bytes(first.path()).unwrap()[..3000], &[5; 3000][..]);
    assert_eq!(queue.preparation_stats().prepared_in_place, 1);
}

#[test]
fn an_allocated_or_warmed_queue_prepares_nothing_in_place() {
    for config in [
        QueueConfig { segment_preparation: SegmentPreparation::Allocated, ..config() },
        QueueConfig { warm_mapped_file_enable: true, ..prepared_config(0) },
    ] {
        let (sim, storage) = sim();
        let queue = SegmentQueue::load(storage, dir(), config.clone(), None).unwrap();
        queue.roll_to_writable_segment(0).unwrap();
        let events = sim.event_count();
        assert!(!queue.prepare_active_segment().unwrap(), "{config:?}");
        assert_eq!(sim.event_count(), events, "{config:?}: wrote");
    }
}

/// Appends racing the preparation in place: whichever comes first, every
/// appended byte is there afterwards (zeros never land on them).
#[test]
fn a_preparation_in_place_racing_an_append_never_writes_over_appended_bytes() {
    for round in 0..200u8 {
        let (_sim, storage) = sim();
        let config = QueueConfig { preallocate_next_segment: false, ..prepared_config(0) };
        let queue = Arc::new(SegmentQueue::load(storage, dir(), config, None).unwrap());
        let file = queue.roll_to_writable_segment(0).unwrap();
        let appender = {
            let queue = Arc::clone(&queue);
            std::thread::spawn(move || append(&queue, &[round | 1; 1000]))
        };
        let prepared = queue.prepare_active_segment().unwrap();
        assert_eq!(appender.join().unwrap(), 0);
        assert_eq!(&file.read(0, 1000).unwrap()[..], &[round | 1; 1000][..], "round {round} (prepared: {prepared})");
    }
}
