// Included twice from lib.rs, once per write path: `WRITE_WITHOUT_MMAP` is
// defined by the including module. Test arithmetic works on small, known values.

use super::*;
use std::sync::atomic::AtomicBool;
use store_io::SimStorage;
use transient_pool::{LockMemory, PoolConfig, TransientStorePool};

// Smaller under Miri, which interprets every byte access.
const SIZE: usize = if cfg!(miri) { 8 * 1024 } else { 64 * 1024 };

/// A simulated storage writing the way this copy of the tests is about.
fn sim() -> SimStorage {
    let storage = SimStorage::new();
    storage.set_write_without_mmap(WRITE_WITHOUT_MMAP);
    storage
}

/// A real storage over `dir`, writing the way this copy of the tests is about.
fn real(dir: &Path) -> MmapStorage {
    MmapStorage::lock(dir).unwrap().write_without_mmap(WRITE_WITHOUT_MMAP)
}

fn sim_file(size: usize) -> (SimStorage, MappedFile) {
    let storage = sim();
    let file = MappedFile::create(&storage, Path::new("/s"), 0, size).unwrap();
    (storage, file)
}

fn pool(size: usize, n: usize) -> TransientStorePool {
    let mut config = PoolConfig::new(n, size);
    config.lock_memory = LockMemory::Never;
    TransientStorePool::new(config).unwrap()
}

fn put(file: &MappedFile, data: &[u8]) -> u64 {
    file.append_bytes(1, data).unwrap().wrote_offset().expect("fits")
}

#[test]
fn file_names_are_twenty_digits_and_round_trip() {
    assert_eq!(file_name(0), "00000000000000000000");
    assert_eq!(file_name(1 << 30), "00000000001073741824");
    assert_eq!(parse_file_name(&file_name(123_456)), Some(123_456));
    for bad in
        ["", "0000000000000000000", "000000000000000000000", "0000000000000000000a", "+0000000000000000001", "abc"]
    {
        assert_eq!(parse_file_name(bad), None, "{bad}");
    }
}

#[test]
fn least_pages_decisions_follow_rocketmq() {
    let size = 16 * OS_PAGE_SIZE;
    assert!(!is_due(0, 0, size, 0), "nothing dirty");
    assert!(is_due(0, 1, size, 0), "0 pages: any dirty byte");
    assert!(!is_due(0, 3 * OS_PAGE_SIZE, size, 4), "3 pages < 4");
    assert!(is_due(0, 4 * OS_PAGE_SIZE, size, 4), "4 pages");
    assert!(is_due(OS_PAGE_SIZE - 1, 4 * OS_PAGE_SIZE + 10, size, 4), "pages counted by index, not bytes");
    assert!(!is_due(10, 4 * OS_PAGE_SIZE - 1, size, 4), "3 page boundaries crossed");
    assert!(is_due(size - 1, size, size, 4), "a full file always qualifies");
    assert!(!is_due(size, size, size, 0), "full and done");
}

#[test]
#[cfg_attr(miri, ignore = "real files and mappings: system calls Miri cannot run")]
fn append_read_and_flush_on_a_real_mapping() {
    let dir = tempfile::tempdir().unwrap();
    let storage = real(dir.path());
    let file = MappedFile::create(&storage, dir.path(), 1 << 20, SIZE).unwrap();
    assert_eq!(file.path().file_name().unwrap(), "00000000000001048576");
    assert_eq!(std::fs::metadata(file.path()).unwrap().len(), SIZE as u64, "preallocated");
    assert_eq!(put(&file, b"abc"), 1 << 20);
    assert_eq!(put(&file, b"defg"), (1 << 20) + 3);
    assert_eq!(file.read_position(), 7);
    assert_eq!(&file.read(1, 4).unwrap()[..], b"bcde");
    assert_eq!(file.flush(0).unwrap(), Progress { from: 0, to: 7 });
    assert_eq!(file.flush(0).unwrap().moved(), 0, "nothing moved is plain 0, not `true`");
    let on_disk = std::fs::read(file.path()).unwrap();
    assert_eq!(&on_disk[..7], b"abcdefg");

    // Reopen: the bytes are there; positions are the caller's to set.
    drop(file);
    let path = dir.path().join(file_name(1 << 20));
    let file = MappedFile::open(&storage, &path, SIZE).unwrap();
    assert_eq!(file.file_from_offset(), 1 << 20);
    file.set_positions(7).unwrap();
    assert_eq!(&file.read(0, 7).unwrap()[..], b"abcdefg");
}

#[test]
#[cfg_attr(miri, ignore = "real files and mappings: system calls Miri cannot run")]
fn creating_over_an_existing_file_or_beyond_the_disk_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let storage = real(dir.path());
    let _first = MappedFile::create(&storage, dir.path(), 0, SIZE).unwrap();
    assert!(matches!(MappedFile::create(&storage, dir.path(), 0, SIZE), Err(MappedFileError::Create { .. })));
    // Far larger than any disk here: fallocate refuses up front, and no file is left.
    let huge = 1usize << 52;
    let err = MappedFile::create(&storage, dir.path(), huge as u64, huge).unwrap_err();
    assert!(matches!(err, MappedFileError::Create { .. }), "{err}");
    assert!(!dir.path().join(file_name(huge as u64)).exists());
}

#[test]
#[cfg_attr(miri, ignore = "real files and mappings: system calls Miri cannot run")]
fn opening_checks_name_and_size() {
    let dir = tempfile::tempdir().unwrap();
    let storage = real(dir.path());
    let bad = dir.path().join("not-a-segment");
    std::fs::write(&bad, vec![0; SIZE]).unwrap();
    assert!(matches!(MappedFile::open(&storage, &bad, SIZE), Err(MappedFileError::BadName { .. })));
    let short = dir.path().join(file_name(0));
    std::fs::write(&short, vec![0; 100]).unwrap();
    let err = MappedFile::open(&storage, &short, SIZE).unwrap_err();
    assert!(err.to_string().contains("00000000000000000000"), "{err}");
}

#[test]
fn a_record_that_does_not_fit_writes_nothing() {
    let (_s, file) = sim_file(OS_PAGE_SIZE);
    put(&file, &[1; 4000]);
    let result = file.append_bytes(2, &[2; 200]).unwrap();
    assert!(matches!(result, Appended::DoesNotFit { remaining: 96 }));
    assert_eq!(file.wrote_position(), 4000);
    assert_eq!(file.store_timestamp(), 1, "unchanged by a failed append");
    put(&file, &[3; 96]);
    assert!(file.is_full());
    assert!(matches!(file.append_bytes(3, b"x").unwrap(), Appended::DoesNotFit { remaining: 0 }));
}

#[test]
fn a_closure_claiming_too_much_is_refused() {
    let (_s, file) = sim_file(OS_PAGE_SIZE);
    let err = file.append_with(0, |_, tail| AppendStatus::Written { bytes: tail.len() + 1, value: () }).unwrap_err();
    assert!(matches!(err, MappedFileError::AppendOverrun { claimed: 4097, remaining: 4096, .. }));
    assert_eq!(file.wrote_position(), 0);
}

#[test]
fn closure_gets_absolute_offsets() {
    let storage = sim();
    let file = MappedFile::create(&storage, Path::new("/s"), 8192, OS_PAGE_SIZE).unwrap();
    put(&file, b"12");
    let seen = file.append_with(0, |offset, _| {
        assert_eq!(offset, 8194);
        AppendStatus::Written { bytes: 0, value: offset }
    });
    assert!(matches!(seen.unwrap(), Appended::Written { value: 8194, .. }));
}

#[test]
fn write_buffer_holds_bytes_until_commit_and_returns_when_full() {
    let pool = pool(OS_PAGE_SIZE * 4, 1);
    let (_s, file) = sim_file(OS_PAGE_SIZE * 4);
    file.attach_write_buffer(pool.try_borrow().unwrap()).unwrap();
    assert_eq!(pool.available_buffer_nums(), 0);
    put(&file, &[7; 5000]);
    assert_eq!(file.wrote_position(), 5000);
    assert_eq!(file.read_position(), 0, "readers see committed bytes only");
    assert!(file.read(0, 1).is_err());
    assert_eq!(file.flush(0).unwrap().moved(), 0, "nothing committed, nothing to flush");

    assert_eq!(file.commit(4).unwrap().moved(), 0, "one page pending < 4");
    assert_eq!(file.commit(0).unwrap(), Progress { from: 0, to: 5000 });
    assert_eq!(&file.read(4990, 10).unwrap()[..], &[7; 10]);
    assert_eq!(file.flush(0).unwrap(), Progress { from: 0, to: 5000 });

    put(&file, &vec![8; OS_PAGE_SIZE * 4 - 5000]);
    assert!(file.is_full());
    assert!(file.has_write_buffer());
    assert_eq!(file.commit(4).unwrap().to, OS_PAGE_SIZE * 4, "a full file always qualifies");
    assert!(!file.has_write_buffer(), "buffer handed back");
    assert_eq!(pool.available_buffer_nums(), 1);
}

#[test]
fn write_buffer_of_the_wrong_size_is_rejected() {
    let pool = pool(OS_PAGE_SIZE, 1);
    let (_s, file) = sim_file(OS_PAGE_SIZE * 2);
    let err = file.attach_write_buffer(pool.try_borrow().unwrap()).unwrap_err();
    assert!(matches!(err, MappedFileError::WriteBufferRejected { .. }));
    assert_eq!(pool.available_buffer_nums(), 1, "rejected buffer went back");
}

#[test]
fn failed_sync_latches_the_file() {
    let (storage, file) = sim_file(SIZE);
    put(&file, b"durable");
    file.flush(0).unwrap();
    put(&file, b"lost");
    storage.fail_nth_sync(1);
    let err = file.flush(0).unwrap_err();
    assert!(matches!(&err, MappedFileError::SyncFailed(f) if (f.from, f.to) == (7, 11)), "{err}");
    assert_eq!(file.flushed_position(), 7, "flushed did not advance");
    assert!(file.is_latched());
    // The next sync would succeed, but the file must not believe it (fsyncgate).
    assert!(matches!(file.flush(0), Err(MappedFileError::Latched { .. })));
    assert!(matches!(file.append_bytes(0, b"more"), Err(MappedFileError::Latched { .. })));
    assert!(matches!(file.commit(0), Err(MappedFileError::Latched { .. })));
    assert_eq!(file.flushed_position(), 7);
    // And indeed the failed range never became durable.
    storage.crash_losing_unsynced();
    assert_eq!(&storage.file_bytes(Path::new("/s/00000000000000000000")).unwrap()[..11], b"durable\0\0\0\0");
}

#[test]
fn only_flushed_bytes_survive_a_power_cut() {
    let (storage, file) = sim_file(SIZE);
    put(&file, &[1; 1000]);
    file.flush(0).unwrap();
    put(&file, &[2; 1000]);
    assert!(storage.dirty_sectors() > 0);
    storage.crash_losing_unsynced();
    drop(file);
    let file = MappedFile::open(&storage, Path::new("/s/00000000000000000000"), SIZE).unwrap();
    file.set_positions(2000).unwrap();
    let bytes = file.read(0, 2000).unwrap();
    assert!(bytes[..1000].iter().all(|&b| b == 1));
    assert!(bytes[1000..].iter().all(|&b| b == 0), "unsynced bytes are gone");
}

#[test]
fn views_keep_memory_alive_and_block_truncation_below_them() {
    let (_s, file) = sim_file(SIZE);
    put(&file, b"hello world");
    let view = file.read(6, 5).unwrap();
    assert_eq!(file.outstanding_views(), 1);
    assert!(matches!(file.set_positions(3), Err(MappedFileError::ViewsOutstanding { views: 1, .. })));
    file.set_positions(20).unwrap(); // raising is harmless
    file.flush(0).unwrap();
    assert_eq!(file.flushed_position(), 20);
    file.destroy().unwrap();
    assert!(matches!(file.append_bytes(0, b"x"), Err(MappedFileError::Destroyed { .. })));
    assert_eq!(&view[..], b"world", "view outlives destroy");
    drop(view);
    assert_eq!(file.outstanding_views(), 0);
    file.set_positions(3).unwrap();
    assert_eq!(file.flushed_position(), 3, "lowered with the data");
    file.set_positions(10).unwrap();
    assert_eq!(file.flushed_position(), 3, "never raised: those bytes were not synced");
    assert!(matches!(file.set_positions(SIZE + 1), Err(MappedFileError::BadPosition { .. })));
}

#[test]
#[cfg_attr(miri, ignore = "real files and mappings: system calls Miri cannot run")]
fn a_locked_directory_cannot_be_mapped_by_a_second_storage_until_every_mapping_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let storage = real(dir.path());
    let file = MappedFile::create(&storage, dir.path(), 0, SIZE).unwrap();
    put(&file, b"seen");
    let view = file.read(0, 4).unwrap();
    assert!(matches!(MmapStorage::lock(dir.path()), Err(LockError::Locked { .. })));
    // Paths outside the root are refused, whatever the caller passes.
    let elsewhere = tempfile::tempdir().unwrap();
    assert!(MappedFile::create(&storage, elsewhere.path(), 0, SIZE).is_err());
    // Released: nothing new is mapped, but the live mapping keeps the lock.
    storage.release();
    assert!(MappedFile::create(&storage, dir.path(), SIZE as u64, SIZE).is_err());
    drop(storage);
    drop(file);
    assert!(matches!(MmapStorage::lock(dir.path()), Err(LockError::Locked { .. })), "a view is still alive");
    assert_eq!(&view[..], b"seen");
    drop(view);
    assert!(MmapStorage::lock(dir.path()).is_ok(), "the last mapping is gone");
}

#[test]
#[cfg_attr(miri, ignore = "real files and mappings: system calls Miri cannot run")]
fn a_storage_over_several_directories_locks_each_and_refuses_overlaps() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let storage = MmapStorage::lock_all([a.path(), b.path()]).unwrap();
    assert_eq!(storage.root(), a.path());
    // Segments in either directory; each directory is locked against others.
    let in_a = MappedFile::create(&storage, a.path(), 0, SIZE).unwrap();
    let in_b = MappedFile::create(&storage, b.path(), SIZE as u64, SIZE).unwrap();
    put(&in_b, b"second disk");
    assert!(matches!(MmapStorage::lock(a.path()), Err(LockError::Locked { .. })));
    assert!(matches!(MmapStorage::lock(b.path()), Err(LockError::Locked { .. })));
    let elsewhere = tempfile::tempdir().unwrap();
    assert!(MappedFile::create(&storage, elsewhere.path(), 0, SIZE).is_err(), "outside every root");
    drop((in_a, in_b, storage));
    // One lock fails: none stays taken.
    let holder = MmapStorage::lock(b.path()).unwrap();
    assert!(matches!(MmapStorage::lock_all([a.path(), b.path()]), Err(LockError::Locked { .. })));
    assert!(MmapStorage::lock(a.path()).is_ok(), "the first lock was given back");
    drop(holder);
    // Nested or equal directories would be locked twice.
    let inner = a.path().join("inner");
    for roots in [vec![a.path().to_path_buf(), inner.clone()], vec![inner.clone(), a.path().to_path_buf()], vec![inner.clone(), inner]] {
        assert!(matches!(MmapStorage::lock_all(&roots), Err(LockError::Overlapping { .. })), "{roots:?}");
    }
}

#[test]
#[cfg_attr(miri, ignore = "real files and mappings: system calls Miri cannot run")]
fn warm_up_zeroes_and_syncs_only_an_unused_file() {
    let dir = tempfile::tempdir().unwrap();
    let storage = real(dir.path());
    let file = MappedFile::create(&storage, dir.path(), 0, SIZE).unwrap();
    assert!(file.warm_up(false).unwrap());
    put(&file, b"x");
    assert!(!file.warm_up(false).unwrap(), "never on a file in use");
    assert_eq!(&file.read(0, 1).unwrap()[..], b"x");
}

#[test]
fn appender_flusher_and_readers_run_concurrently() {
    // Under Miri (which checks these threads for data races) a smaller file.
    let size: usize = if cfg!(miri) { 1 << 10 } else { 1 << 20 };
    let storage = sim();
    let file = Arc::new(MappedFile::create(&storage, Path::new("/c"), 0, size).unwrap());
    let pool = pool(size, 1);
    file.attach_write_buffer(pool.try_borrow().unwrap()).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let record = |i: u32| -> [u8; 8] {
        let mut r = [0u8; 8];
        r[..4].copy_from_slice(&i.to_le_bytes());
        r[4..].copy_from_slice(&(!i).to_le_bytes());
        r
    };
    let background: Vec<_> = (0..3)
        .map(|role| {
            let (file, done) = (Arc::clone(&file), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut checked = 0usize;
                while !done.load(Ordering::Acquire) {
                    if cfg!(miri) {
                        std::thread::yield_now(); // let the appender progress
                    }
                    match role {
                        0 => {
                            file.commit(0).unwrap();
                        }
                        1 => {
                            let p = file.flush(0).unwrap();
                            assert!(p.to <= file.read_position());
                        }
                        _ => {
                            let end = file.read_position() / 8 * 8;
                            let bytes = file.read(0, end).unwrap();
                            for chunk in bytes.chunks(8) {
                                let a = u32::from_le_bytes(chunk[..4].try_into().unwrap());
                                let b = u32::from_le_bytes(chunk[4..].try_into().unwrap());
                                assert_eq!(a, !b, "torn read");
                            }
                            checked = checked.max(end);
                        }
                    }
                }
                checked
            })
        })
        .collect();
    for i in 0..(size / 8) as u32 {
        put(&file, &record(i));
    }
    assert!(file.is_full());
    while file.commit(0).unwrap().to < file.file_size() {}
    done.store(true, Ordering::Release);
    for h in background {
        h.join().unwrap();
    }
    file.flush(0).unwrap();
    assert_eq!(file.flushed_position(), size);
    assert_eq!(pool.available_buffer_nums(), 1);
    assert_eq!(storage.dirty_sectors(), 0);
}

#[test]
fn truncating_with_a_write_buffer_keeps_uncommitted_bytes_below_the_cut() {
    // Found by the segment-queue model test: a reset jumped `committed` past bytes
    // still only in the write buffer, exposing zeros in their place.
    let pool = pool(OS_PAGE_SIZE, 1);
    let (_s, file) = sim_file(OS_PAGE_SIZE);
    file.attach_write_buffer(pool.try_borrow().unwrap()).unwrap();
    put(&file, &[1, 2, 3]);
    file.set_positions(2).unwrap();
    assert_eq!(&file.read(0, 2).unwrap()[..], &[1, 2]);
    put(&file, &[9]);
    file.commit(0).unwrap();
    assert_eq!(&file.read(0, 3).unwrap()[..], &[1, 2, 9]);
}

#[test]
#[cfg_attr(miri, ignore = "real files and mappings: system calls Miri cannot run")]
fn segments_are_written_the_way_their_storage_says_and_the_file_sees_every_byte() {
    let dir = tempfile::tempdir().unwrap();
    let storage = real(dir.path());
    let file = MappedFile::create(&storage, dir.path(), 0, SIZE).unwrap();
    assert_eq!(file.writes_without_mmap(), WRITE_WITHOUT_MMAP);
    put(&file, b"abc");
    // Before any sync: a shared mapping and pwrite both put the bytes in the page
    // cache, which an ordinary read of the file sees.
    assert_eq!(&std::fs::read(file.path()).unwrap()[..3], b"abc");
    assert_eq!(file.commit(0).unwrap().moved(), 0, "nothing to commit without a write buffer");
    assert_eq!(file.flush(0).unwrap().to, 3);
    let (_sim, simulated) = sim_file(SIZE);
    assert_eq!(simulated.writes_without_mmap(), WRITE_WITHOUT_MMAP);
}

#[test]
fn a_bounded_append_sees_at_most_its_bound() {
    let (_storage, file) = sim_file(SIZE);
    let seen = file
        .append_sized(1, 100, |_, tail| {
            let len = tail.len();
            tail[..len].fill(5);
            AppendStatus::Written { bytes: len, value: len }
        })
        .unwrap();
    assert!(matches!(seen, Appended::Written { bytes: 100, value: 100, .. }));
    let claimed_too_much = file.append_sized(1, 10, |_, _| AppendStatus::Written { bytes: 11, value: () });
    assert!(matches!(claimed_too_much, Err(MappedFileError::AppendOverrun { claimed: 11, .. })));
    assert_eq!(file.wrote_position(), 100, "a refused append publishes nothing");
    assert_eq!(&file.read(0, 100).unwrap()[..], &[5u8; 100][..]);
}

#[test]
fn a_recycled_file_becomes_a_later_segment_whose_old_bytes_are_never_readable() {
    let storage = sim();
    let dir = Path::new("/r");
    let old = MappedFile::create(&storage, dir, 0, SIZE).unwrap();
    put(&old, b"old bytes of the first life");
    old.flush(0).unwrap();
    let view = old.read(0, 3).unwrap();
    let spare = dir.join("recycled").join("spare");
    assert!(!old.recycle(&spare).unwrap(), "refused while a view is held");
    assert_eq!(&old.read(0, 3).unwrap()[..], b"old", "and the segment is still whole");
    drop(view);
    assert!(old.recycle(&spare).unwrap());
    assert!(old.is_destroyed());
    assert!(old.read(0, 3).is_err(), "a recycled segment gives no view");
    assert!(!old.recycle(&dir.join("again")).unwrap(), "only once");

    let new = MappedFile::create_from_recycled(&storage, &spare, dir, SIZE as u64, SIZE).unwrap();
    assert_eq!(new.file_from_offset(), SIZE as u64);
    assert_eq!((new.wrote_position(), new.read_position(), new.flushed_position()), (0, 0, 0));
    assert!(new.read(0, 1).is_err(), "nothing of the old life is readable");
    assert_eq!(storage.file_bytes(new.path()).unwrap()[..3], *b"old", "though it is still in the file");
    put(&new, b"new");
    assert_eq!(&new.read(0, 3).unwrap()[..], b"new");
    assert!(new.is_from_spare() && !old.is_from_spare());
    new.flush(0).unwrap();
    // A cut at the end erases the old life's bytes past the data, durably.
    assert_eq!(new.truncate(3).unwrap(), b"old bytes of the first life".len() - 3);
    storage.crash_losing_unsynced();
    let bytes = storage.file_bytes(new.path()).unwrap();
    assert_eq!(&bytes[..3], b"new");
    assert!(bytes[3..].iter().all(|&b| b == 0), "nothing of the old life is left");
    assert!(storage.file_bytes(&spare).is_none(), "the spare name is gone");
}

#[test]
#[cfg_attr(miri, ignore = "real files and mappings: system calls Miri cannot run")]
fn a_real_file_is_recycled_by_a_durable_rename_and_reused_under_its_new_name() {
    let dir = tempfile::tempdir().unwrap();
    let storage = real(dir.path());
    let old = MappedFile::create(&storage, dir.path(), 0, SIZE).unwrap();
    put(&old, b"first life");
    let spare_dir = dir.path().join("recycled");
    storage.create_dir_all(&spare_dir).unwrap();
    let spare = spare_dir.join("0");
    assert!(old.recycle(&spare).unwrap());
    assert!(spare.exists() && !old.path().exists());
    let new = MappedFile::create_from_recycled(&storage, &spare, dir.path(), SIZE as u64, SIZE).unwrap();
    assert!(!spare.exists() && new.path().exists());
    assert_eq!(new.writes_without_mmap(), WRITE_WITHOUT_MMAP);
    put(&new, b"second");
    new.flush(0).unwrap();
    assert_eq!(&std::fs::read(new.path()).unwrap()[..10], b"secondlife", "old bytes past the new ones");
    let missing = MappedFile::create_from_recycled(&storage, &spare, dir.path(), 2 * SIZE as u64, SIZE);
    assert!(matches!(missing, Err(MappedFileError::Create { .. })), "a spare taken twice is a clear error");
}

#[test]
#[cfg_attr(miri, ignore = "real files and mappings: system calls Miri cannot run")]
fn a_real_storage_reports_the_space_of_its_file_system() {
    let dir = tempfile::tempdir().unwrap();
    let storage = real(dir.path());
    let space = storage.disk_space(dir.path()).unwrap().expect("statvfs works here");
    assert!(space.total > 0 && space.available <= space.total, "{space:?}");
    assert!((0.0..=100.0).contains(&space.used_percent()));
    assert!(storage.disk_space(Path::new("/elsewhere")).is_err(), "only under its own root");
    assert_eq!(sim().disk_space(Path::new("/s")).unwrap(), None, "unknown unless a test sets it");
}

#[test]
fn the_used_share_is_the_one_df_shows_space_reserved_for_root_aside() {
    let space = DiskSpace { total: 250, free: 190, available: 40 };
    assert_eq!(space.used_percent(), 60.0, "60 used of 100 usable: the 150 reserved count as neither");
    assert_eq!(DiskSpace { total: 100, free: 100, available: 100 }.used_percent(), 0.0);
    assert_eq!(DiskSpace { total: 0, free: 0, available: 0 }.used_percent(), 100.0);
    // The bytes above a share, counted the same way: 60 used of 100 usable.
    assert_eq!(space.bytes_above(50.0), 10);
    assert_eq!(space.bytes_above(60.0), 0);
    assert_eq!(space.bytes_above(0.0), 60, "never more than is used");
}

#[test]
fn place_writes_what_fits_with_room_to_spare_and_pads_the_rest_otherwise() {
    let (_storage, file) = sim_file(SIZE);
    let record = 1000;
    let mut placed = Vec::new();
    while let Placed::Appended { offset } =
        file.place(5, record, 64, |_, out| out.fill(0xAB), |_, rest| rest.fill(0xEE)).unwrap()
    {
        placed.push(offset);
    }
    // Every record left room for a pad of 64 bytes; the pad filled the rest.
    assert_eq!(placed.len(), (SIZE - 64) / record);
    assert!(file.is_full());
    let bytes = file.read(0, SIZE).unwrap();
    let end = placed.len() * record;
    assert!(bytes[..end].iter().all(|&b| b == 0xAB));
    assert!(bytes[end..].iter().all(|&b| b == 0xEE), "the pad covers every remaining byte");
    // A full segment pads nothing and places nothing.
    assert_eq!(file.place(5, 1, 0, |_, _| unreachable!(), |_, rest| assert!(rest.is_empty())).unwrap(), Placed::Padded);
}

#[test]
fn a_read_past_the_data_names_absolute_offsets() {
    let storage = SimStorage::new();
    let file = MappedFile::create(&storage, Path::new("/s"), 4096, 4096).unwrap();
    file.append_bytes(0, &[1u8; 100]).unwrap();
    let err = file.read(50, 100).unwrap_err();
    assert!(matches!(err, MappedFileError::OutOfRange { file_from_offset: 4096, pos: 50, .. }));
    let text = err.to_string();
    assert!(text.contains("[4146, 4246)") && text.contains("ends at 4196"), "{text}");
    let err = file.read_from(200).unwrap_err().to_string();
    assert!(err.contains("[4296, 4296)") && err.contains("ends at 4196"), "{err}");
}

/// Preparation writes zeros only over a segment nothing was appended to: once
/// a record is in, no range is zeroed, neither over it nor past it (an
/// appender may be filling the rest), and the record's bytes stay.
#[test]
fn a_preparation_step_never_writes_once_something_was_appended() {
    let (storage, file) = sim_file(SIZE);
    assert!(file.prepare_range(0, OS_PAGE_SIZE).unwrap(), "an empty segment is prepared");
    put(&file, &[7; 100]);
    for (pos, len) in [(0, OS_PAGE_SIZE), (OS_PAGE_SIZE, OS_PAGE_SIZE), (0, SIZE)] {
        assert!(!file.prepare_range(pos, len).unwrap(), "zeros at {pos}+{len} after an append");
    }
    file.flush(0).unwrap();
    assert_eq!(&storage.file_bytes(file.path()).unwrap()[..100], &[7; 100][..]);
    assert_eq!(&file.read(0, 100).unwrap()[..], &[7; 100][..]);
}
