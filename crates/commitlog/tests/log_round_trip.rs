//! Appends and reads: round trips across roll-over, batches, limits.

mod common;

use commitlog::{CommitLog, Error, FlushDiskType, PutMessageStatus};
use common::*;

#[test]
fn records_round_trip_across_segment_roll_over() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::AsyncFlush)).unwrap();
    let mut written = Vec::new();
    for seq in 0..2000u32 {
        let b = body(0, seq, (seq as usize * 37) % 9000 + 8);
        let put = log.append(&b).unwrap();
        // Read-your-writes: visible at once.
        assert_eq!(&log.read(put.wrote_offset).unwrap().body[..], &b[..]);
        written.push((put.wrote_offset, b));
    }
    assert!(log.segment_count() > 50, "many roll-overs");
    for (offset, b) in &written {
        let record = log.read(*offset).unwrap();
        assert_eq!(&record.body[..], &b[..]);
        assert_eq!(record.size, (b.len() + commitlog::format::HEADER_SIZE) as u64);
    }
    let all = bodies(&log);
    assert_eq!(all.len(), written.len());
    assert!(all.iter().zip(&written).all(|(a, (_, b))| a == b), "iteration skips blanks and keeps order");
    // A record never straddles two segments.
    for (offset, b) in &written {
        let end = offset + (b.len() + 32) as u64;
        assert_eq!(offset / SEGMENT as u64, (end - 1) / SEGMENT as u64);
    }
    log.shutdown().unwrap();
}

#[test]
fn batches_are_contiguous_and_share_one_handle() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap();
    let batch: Vec<Vec<u8>> = (0..10).map(|i| body(1, i, 100 + i as usize)).collect();
    let put = log.append_batch(&batch).unwrap();
    assert!(put.durability.wait().is_ok());
    assert_eq!(put.offsets.len(), 10);
    for (offset, b) in put.offsets.iter().zip(&batch) {
        assert_eq!(&log.read(*offset).unwrap().body[..], &b[..]);
    }
    assert_eq!(put.offsets[0] + put.wrote_bytes, log.max_offset());
    // A batch that does not fit the current segment's tail goes to the next one.
    let big: Vec<Vec<u8>> = (0..7).map(|i| body(2, i, 9000)).collect();
    let first = log.append_batch(&big).unwrap().offsets[0];
    let second = log.append_batch(&big).unwrap().offsets[0];
    assert_eq!(second % SEGMENT as u64, 0, "rolled over whole");
    assert!(second > first);
    assert!(matches!(log.append_batch::<Vec<u8>>(&[]), Err(Error::EmptyBatch)));
    let too_big: Vec<Vec<u8>> = (0..8).map(|i| body(3, i, 9000)).collect();
    let max = log.max_offset();
    assert!(matches!(log.append_batch(&too_big), Err(Error::BatchTooLarge { records: 8, .. })));
    assert_eq!(log.max_offset(), max, "nothing written");
    log.shutdown().unwrap();
}

#[test]
fn oversized_records_are_rejected_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::AsyncFlush)).unwrap();
    log.append(b"before").unwrap();
    let max = log.max_offset();
    let err = log.append(&vec![0; 16 * 1024 + 1]).unwrap_err();
    assert!(matches!(err, Error::RecordTooLarge { size: 16385, max: 16384 }), "{err}");
    assert_eq!(PutMessageStatus::from_error(&err), PutMessageStatus::MessageIllegal);
    assert_eq!(log.max_offset(), max);
    assert!(log.append(&vec![0; 16 * 1024]).is_ok(), "exactly the limit is fine");
    log.shutdown().unwrap();
}

#[test]
fn reads_at_bad_offsets_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::AsyncFlush)).unwrap();
    let first = log.append(b"hello world").unwrap();
    let put = log.append(b"second record").unwrap();
    // Inside a record: a wrong offset, not damage ("bad magic code" said so before).
    for inside in [put.wrote_offset + 1, put.wrote_offset + 8, put.wrote_offset + 40, first.wrote_offset + 3] {
        let err = log.read(inside).unwrap_err();
        let start = if inside > put.wrote_offset { put.wrote_offset } else { first.wrote_offset };
        assert!(matches!(err, Error::InsideRecord { offset, record } if offset == inside && record == start), "{err}");
        assert!(err.to_string().contains("not a record boundary"), "{err}");
    }
    assert!(matches!(log.read(1 << 40), Err(Error::NoRecord { .. })));
    assert!(matches!(log.read(log.max_offset()), Err(Error::NoRecord { .. })));
    log.shutdown().unwrap();
}

#[test]
fn appends_after_shutdown_fail_and_the_directory_is_released() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap();
    log.append(b"x").unwrap().durability.wait().unwrap();
    log.shutdown().unwrap();
    assert!(matches!(log.append(b"y"), Err(Error::Shutdown)));
    assert_eq!(PutMessageStatus::from_error(&log.append(b"y").unwrap_err()), PutMessageStatus::ServiceNotAvailable);
    let again = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap();
    assert_eq!(bodies(&again), vec![b"x".to_vec()]);
}

#[test]
fn a_second_open_of_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::AsyncFlush)).unwrap();
    let err = CommitLog::open(dir.path(), config(FlushDiskType::AsyncFlush)).unwrap_err();
    assert!(matches!(err, Error::Locked { .. }), "{err}");
    assert!(err.to_string().contains("locked"));
    drop(log);
    assert!(CommitLog::open(dir.path(), config(FlushDiskType::AsyncFlush)).is_ok());
}

#[test]
fn sync_flush_confirm_offset_is_the_flushed_offset() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap();
    for i in 0..50 {
        let put = log.append(&body(0, i, 500)).unwrap();
        let end = put.next_offset();
        assert_eq!(put.wait_status(), PutMessageStatus::PutOk);
        assert!(log.flushed_offset() >= end, "acknowledged means flushed");
        assert!(log.confirm_offset() <= log.flushed_offset());
    }
    log.shutdown().unwrap();
}

#[test]
fn bad_configs_are_rejected_clearly() {
    let bad = commitlog::CommitLogConfig::builder().mapped_file_size_commit_log(1000).build().unwrap_err();
    assert!(bad.to_string().contains("multiple of 4096"), "{bad}");
    let bad = commitlog::CommitLogConfig::builder()
        .mapped_file_size_commit_log(1 << 20)
        .max_message_size(4 << 20)
        .build()
        .unwrap_err();
    assert!(bad.to_string().contains("max_message_size"), "{bad}");
}

#[test]
fn an_empty_body_is_a_record_and_an_empty_batch_is_an_error() {
    // A record with no body has an offset and reads back empty (a tombstone, a
    // marker); a batch with no record has nothing to return an offset for.
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap();
    let empty = log.append(b"").unwrap();
    empty.durability.wait().unwrap();
    assert_eq!(empty.wrote_bytes, commitlog::format::HEADER_SIZE as u64);
    assert!(log.read(empty.wrote_offset).unwrap().body.is_empty());
    let batch = log.append_batch(&[&b""[..], b"x", b""]).unwrap();
    batch.durability.wait().unwrap();
    assert_eq!(batch.offsets.len(), 3);
    let err = log.append_batch::<&[u8]>(&[]).unwrap_err();
    assert!(matches!(err, Error::EmptyBatch), "{err}");
    assert_eq!(PutMessageStatus::from_error(&err), PutMessageStatus::MessageIllegal);
    let end = log.max_offset();
    log.shutdown().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap();
    assert_eq!(bodies(&log), [vec![], vec![], b"x".to_vec(), vec![]]);
    assert_eq!(log.max_offset(), end);
    log.shutdown().unwrap();
}

#[test]
fn a_second_open_in_this_process_says_the_holder_is_this_process() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap();
    let err = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap_err();
    assert!(matches!(err, Error::Locked { holder: commitlog::LockHolder::ThisProcess, .. }), "{err}");
    assert!(err.to_string().contains("this process"), "{err}");
    assert!(!err.to_string().contains("another process"), "{err}");
    // A record view of a shut-down log holds the lock too, and says so.
    let put = log.append(b"held").unwrap();
    put.durability.wait().unwrap();
    let held = log.read(put.wrote_offset).unwrap();
    log.shutdown().unwrap();
    let err = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap_err();
    assert!(err.to_string().contains("record view"), "{err}");
    drop(held);
    CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap().shutdown().unwrap();
}

#[test]
fn a_regular_file_as_the_store_directory_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let err = CommitLog::open(&file, config(FlushDiskType::SyncFlush)).unwrap_err();
    assert!(matches!(&err, Error::NotADirectory { path } if path == &file), "{err}");
    assert!(err.to_string().contains("is not a directory"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"x", "left as it was");
}

#[test]
fn a_store_reopens_with_its_own_segment_size_whatever_the_configuration_says() {
    let dir = tempfile::tempdir().unwrap();
    let small = config(FlushDiskType::SyncFlush);
    let size = small.mapped_file_size_commit_log;
    let log = CommitLog::open(dir.path(), small.clone()).unwrap();
    let first = log.append(b"made with small segments").unwrap().wrote_offset;
    log.shutdown().unwrap();
    // Configured for segments four times larger: the store keeps its own.
    let larger = commitlog::CommitLogConfig { mapped_file_size_commit_log: size * 4, ..small.clone() };
    let log = CommitLog::open(dir.path(), larger).unwrap();
    assert_eq!(log.config().mapped_file_size_commit_log, size);
    assert_eq!(&log.read(first).unwrap().body[..], b"made with small segments");
    let mut last = first;
    while log.segment_count() < 3 {
        last = log.append(&[7u8; 4000]).unwrap().wrote_offset;
    }
    log.shutdown().unwrap();
    for entry in std::fs::read_dir(dir.path().join("commitlog")).unwrap() {
        let entry = entry.unwrap();
        assert_eq!(entry.metadata().unwrap().len(), size as u64, "{:?}", entry.file_name());
    }
    let log = CommitLog::open(dir.path(), small).unwrap();
    assert_eq!(&log.read(last).unwrap().body[..], &[7u8; 4000][..]);
    log.shutdown().unwrap();
}

#[test]
fn a_first_store_with_default_settings_takes_two_small_segments_of_disk() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), commitlog::CommitLogConfig::default()).unwrap();
    log.append(b"hello").unwrap();
    log.shutdown().unwrap();
    let mut allocated = 0u64;
    for entry in walk(dir.path()) {
        allocated += std::fs::metadata(&entry).unwrap().blocks() * 512;
    }
    // The segment and the one prepared after it, 64 MiB each, and small files.
    assert_eq!(commitlog::CommitLogConfig::DEFAULT_SEGMENT_SIZE, 64 << 20);
    assert!(allocated <= (2 * 64 + 1) << 20, "{allocated} bytes allocated for one 5-byte record");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn every_failure_has_the_status_rocketmq_would_answer() {
    use commitlog::CommitLogConfig;
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap();
    let status = |e: &Error| PutMessageStatus::from_error(e);
    // A store another open holds is not available.
    let locked = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap_err();
    assert!(matches!(locked, Error::Locked { .. }), "{locked}");
    assert_eq!(status(&locked), PutMessageStatus::ServiceNotAvailable);
    // Neither is one that could not open with its configuration.
    let invalid = CommitLogConfig::builder().mapped_file_size_commit_log(1000).build().unwrap_err();
    assert_eq!(status(&invalid), PutMessageStatus::ServiceNotAvailable);
    // A failed write is RocketMQ's UNKNOWN_ERROR (the log then latches and is not available).
    let io = Error::Io { path: dir.path().into(), source: std::io::Error::other("write failed") };
    assert_eq!(status(&io), PutMessageStatus::UnknownError);
    // Read errors never come from an append.
    let no_record = log.read(7).unwrap_err();
    assert_eq!(status(&no_record), PutMessageStatus::UnknownError);
    log.shutdown().unwrap();
    assert_eq!(status(&log.append(b"late").unwrap_err()), PutMessageStatus::ServiceNotAvailable);
}
