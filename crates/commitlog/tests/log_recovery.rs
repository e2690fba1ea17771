//! Recovery after clean and unclean shutdowns, and from damaged files.

mod common;

use commitlog::format::Invalid;
use commitlog::{CommitLog, Error, FlushDiskType};
use common::*;

/// A log with `n` records, flushed and checkpointed, then copied while still open:
/// the copy is what a killed process leaves (abort marker present).
fn crashed_copy(n: u32, extra_unflushed: u32) -> (tempfile::TempDir, tempfile::TempDir, Vec<(u64, Vec<u8>)>) {
    let live = tempfile::tempdir().unwrap();
    let mut c = config(FlushDiskType::AsyncFlush);
    c.flush.flush_interval_commit_log_ms = 3_600_000; // only explicit flushes
    c.checkpoint_interval_ms = 3_600_000;
    let log = CommitLog::open(live.path(), c).unwrap();
    let mut written = Vec::new();
    for seq in 0..n {
        let b = body(0, seq, 300 + seq as usize % 500);
        written.push((log.append(&b).unwrap().wrote_offset, b));
    }
    log.flush_all().unwrap();
    log.shutdown().unwrap(); // writes the checkpoint at the flushed end...
    let log = CommitLog::open(live.path(), config(FlushDiskType::AsyncFlush)).unwrap();
    for seq in n..n + extra_unflushed {
        let b = body(0, seq, 300);
        written.push((log.append(&b).unwrap().wrote_offset, b));
    }
    let copy = tempfile::tempdir().unwrap();
    copy_dir(live.path(), copy.path()); // ...then records appended after it, unflushed
    drop(log);
    (live, copy, written)
}

#[test]
fn clean_shutdown_recovers_normally_with_nothing_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap();
    for seq in 0..500 {
        log.append(&body(0, seq, 200)).unwrap().durability.wait().unwrap();
    }
    let end = log.max_offset();
    log.shutdown().unwrap();
    assert!(!dir.path().join(commitlog::ABORT_FILE).exists(), "abort marker removed");
    let log = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap();
    let report = log.recovery_report().clone();
    assert!(report.clean_shutdown);
    assert_eq!(report.durable_offset, end);
    assert_eq!(report.end_offset, end);
    assert_eq!(report.bytes_truncated, 0);
    assert!(!report.cut_anything());
    assert_eq!(bodies(&log).len(), 500);
    assert_eq!(log.append(b"next").unwrap().wrote_offset, end, "appends continue at the end");
}

#[test]
fn unclean_shutdown_recovers_every_record_in_the_page_cache() {
    let (_live, copy, written) = crashed_copy(200, 50);
    let log = CommitLog::open(copy.path(), config(FlushDiskType::AsyncFlush)).unwrap();
    let report = log.recovery_report().clone();
    assert!(!report.clean_shutdown, "abort marker seen");
    assert!(report.durable_offset < report.end_offset, "recovered past the checkpoint");
    let got = bodies(&log);
    assert_eq!(got.len(), written.len());
    assert!(got.iter().zip(&written).all(|(a, (_, b))| a == b));
}

#[test]
fn a_torn_tail_above_the_checkpoint_is_truncated_and_reported() {
    let (_live, copy, written) = crashed_copy(200, 10);
    let (last_offset, last_body) = written.last().unwrap().clone();
    // Tear the last record: its second half never reached the disk.
    let path = segment_path(copy.path(), last_offset);
    let in_file = last_offset % SEGMENT as u64;
    patch(&path, in_file + 32 + last_body.len() as u64 / 2, &vec![0xAB; last_body.len() / 2]);
    let log = CommitLog::open(copy.path(), config(FlushDiskType::AsyncFlush)).unwrap();
    let report = log.recovery_report().clone();
    assert_eq!(report.end_offset, last_offset);
    assert!(matches!(report.stopped_at, Some((o, Invalid::BadCrc { .. })) if o == last_offset));
    assert!(report.bytes_truncated > 0 && report.cut_anything());
    assert_eq!(bodies(&log).len(), written.len() - 1, "a clean prefix, no garbage");
    assert_eq!(log.append(b"after").unwrap().wrote_offset, last_offset, "the torn bytes are reused");
    drop(log);
    // The dropped bytes were erased: nothing of the torn record is left after the end.
    let bytes = std::fs::read(&path).unwrap();
    let after = (in_file + 32 + 5) as usize;
    assert!(bytes[after..].iter().all(|&b| b == 0), "torn bytes left on disk");
}

#[test]
fn damage_below_the_checkpoint_is_reported_as_corruption_naming_file_and_offset() {
    let (_live, copy, written) = crashed_copy(200, 0);
    // The last flushed record: in the segment recovery scans, below the checkpoint.
    let (victim, _) = written[199];
    let path = segment_path(copy.path(), victim);
    patch(&path, victim % SEGMENT as u64 + 40, &[0xFF]);
    let err = CommitLog::open(copy.path(), config(FlushDiskType::AsyncFlush)).unwrap_err();
    match &err {
        Error::Corrupt { path: p, offset, reason, .. } => {
            assert_eq!(p, &path);
            assert_eq!(*offset, victim);
            assert!(matches!(reason, Invalid::BadCrc { .. }));
        }
        other => panic!("expected Corrupt, got {other}"),
    }
    assert!(err.to_string().contains(&format!("{}", victim)));
    // Nothing was truncated: the damaged file still holds everything after it.
    assert!(std::fs::metadata(&path).unwrap().len() == SEGMENT as u64);
}

#[test]
fn a_failed_open_leaves_no_abort_marker_behind_a_clean_shutdown() {
    // Damage below the checkpoint of a store shut down cleanly: the open fails,
    // and the store must stay as it was found (no marker saying "open now, or
    // the last process died").
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap();
    let offsets: Vec<u64> = (0..150)
        .map(|seq| {
            let put = log.append(&body(0, seq, 500)).unwrap();
            put.durability.wait().unwrap();
            put.wrote_offset
        })
        .collect();
    log.shutdown().unwrap();
    drop(log);
    let victim = offsets[140];
    patch(&segment_path(dir.path(), victim), victim % SEGMENT as u64 + 40, &[0xFF]);
    for _ in 0..2 {
        assert!(matches!(CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)), Err(Error::Corrupt { .. })));
        assert!(!dir.path().join(commitlog::ABORT_FILE).exists(), "a failed open left the abort marker");
        assert!(!commitlog::inspect::store_files(dir.path()).abort_marker);
    }
}

#[test]
fn salvage_keeps_every_record_before_damage_below_the_checkpoint_and_moves_the_rest_aside() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap();
    let written: Vec<(u64, Vec<u8>)> = (0..300)
        .map(|seq| {
            let b = body(0, seq, 500);
            let put = log.append(&b).unwrap();
            put.durability.wait().unwrap();
            (put.wrote_offset, b)
        })
        .collect();
    log.shutdown().unwrap();
    drop(log);
    // One byte of an older segment's record, well below the checkpoint.
    let (victim, _) = written[100];
    let path = segment_path(dir.path(), victim);
    patch(&path, victim % SEGMENT as u64 + 40, &[0xFF]);
    let later_segments = written.iter().filter(|(o, _)| o / SEGMENT as u64 > victim / SEGMENT as u64).count();
    assert!(later_segments > 0);

    let report = commitlog::admin::salvage(dir.path()).unwrap();
    assert_eq!(report.end, victim);
    assert!(report.stopped_by.as_deref().is_some_and(|s| s.contains(&victim.to_string())), "{report:?}");
    assert!(report.durable_lost.is_some_and(|(from, _)| from == victim), "{report:?}");
    // The rest of the damaged segment, copied; every later segment, moved.
    let tail = &report.moved[0];
    assert_eq!((tail.from.as_path(), tail.offset), (path.as_path(), Some(victim)));
    assert!(report.moved.len() >= 2, "{report:?}");
    for moved in &report.moved {
        assert!(moved.to.exists(), "{moved:?}");
        assert!(moved.to.parent().unwrap().file_name().unwrap().to_string_lossy().starts_with("salvaged-"));
    }
    let copied = std::fs::read(&tail.to).unwrap();
    assert_eq!(copied.len() as u64, tail.bytes);

    let log = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap();
    let kept: Vec<Vec<u8>> = written[..100].iter().map(|(_, b)| b.clone()).collect();
    assert_eq!(bodies(&log), kept, "every record before the damage, nothing after it");
    assert_eq!(log.max_offset(), victim);
    log.append(b"after").unwrap().durability.wait().unwrap();
    log.shutdown().unwrap();
    assert!(commitlog::inspect::list_segments(dir.path()).unwrap().problems.is_empty());
}

#[test]
fn a_checkpoint_at_the_very_end_of_the_last_segment_scans_that_segment_only() {
    // No next segment yet (a crash right after the last one filled): recovery
    // scanned the whole log from segment 0.
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(FlushDiskType::SyncFlush);
    c.preallocate_next_segment = false;
    let log = CommitLog::open(dir.path(), c.clone()).unwrap();
    let mut seq = 0;
    while log.max_offset() < 4 * SEGMENT as u64 {
        log.append(&body(0, seq, 700)).unwrap().durability.wait().unwrap();
        seq += 1;
    }
    log.shutdown().unwrap();
    drop(log);
    // Drop the fifth segment (one record in it) and put the checkpoint at the
    // fourth's end: what a crash after its blank and before the next leaves.
    let fifth = segment_path(dir.path(), 4 * SEGMENT as u64);
    std::fs::remove_file(&fifth).unwrap();
    let end = 4 * SEGMENT as u64;
    let cp = commitlog::Checkpoint { flushed_offset: end, physic_msg_timestamp: 1, front_offset: Some(0) };
    std::fs::write(commitlog::Checkpoint::path(dir.path()), cp.encode()).unwrap();
    let log = CommitLog::open(dir.path(), c).unwrap();
    let report = log.recovery_report().clone();
    assert_eq!(report.scanned_from, 3 * SEGMENT as u64, "{report:?}");
    assert_eq!(report.end_offset, end);
    let in_last = bodies(&log).len() as u64;
    assert!(report.records_recovered < in_last / 2, "scanned more than the last segment: {report:?}");
    log.shutdown().unwrap();
}

#[test]
fn a_stale_record_planted_in_the_tail_is_never_returned() {
    // RocketMQ #10017 (https://github.com/apache/rocketmq/issues/10017): a valid record from
    // elsewhere (e.g. a reused file) sits where the next record would go. Its CRC covers its own
    // offset, so it is rejected.
    let (_live, copy, written) = crashed_copy(100, 0);
    let (src_offset, src_body) = written[10].clone();
    let end = written.last().map(|(o, b)| o + 32 + b.len() as u64).unwrap();
    let src_path = segment_path(copy.path(), src_offset);
    let bytes = std::fs::read(&src_path).unwrap();
    let start = (src_offset % SEGMENT as u64) as usize;
    let stale = bytes[start..start + 32 + src_body.len()].to_vec();
    patch(&segment_path(copy.path(), end), end % SEGMENT as u64, &stale);
    let log = CommitLog::open(copy.path(), config(FlushDiskType::AsyncFlush)).unwrap();
    assert!(
        matches!(log.recovery_report().stopped_at, Some((o, Invalid::WrongOffset(s))) if o == end && s == src_offset)
    );
    assert_eq!(bodies(&log).len(), 100);
}

#[test]
fn bit_flips_anywhere_in_the_unflushed_tail_never_yield_garbage() {
    let (_live, copy, written) = crashed_copy(20, 5);
    let tail_start = written[20].0;
    let end = written.last().map(|(o, b)| o + 32 + b.len() as u64).unwrap();
    let path = segment_path(copy.path(), tail_start);
    for (i, at) in (tail_start..end).step_by(97).enumerate() {
        let trial = tempfile::tempdir().unwrap();
        copy_dir(copy.path(), trial.path());
        patch(&segment_path(trial.path(), at), at % SEGMENT as u64, &[1 << (i % 8)]);
        let log = CommitLog::open(trial.path(), config(FlushDiskType::AsyncFlush)).unwrap();
        let got = bodies(&log);
        assert!(got.len() >= 20, "the durable prefix survives");
        for (b, (_, w)) in got.iter().zip(&written) {
            assert_eq!(b, w, "only valid records are returned");
        }
    }
    let _ = path;
}

#[test]
fn wrong_size_and_foreign_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::AsyncFlush)).unwrap();
    log.append(b"x").unwrap();
    log.shutdown().unwrap();
    drop(log);
    let segment = dir.path().join(commitlog::SEGMENT_DIR).join(format!("{:020}", 0));
    let file = std::fs::OpenOptions::new().write(true).open(&segment).unwrap();
    file.set_len(1000).unwrap();
    let err = CommitLog::open(dir.path(), config(FlushDiskType::AsyncFlush)).unwrap_err();
    assert!(err.to_string().contains("00000000000000000000") && err.to_string().contains("1000"), "{err}");
    file.set_len(SEGMENT as u64).unwrap();
    std::fs::write(dir.path().join(commitlog::SEGMENT_DIR).join("notes.txt"), b"hi").unwrap();
    let err = CommitLog::open(dir.path(), config(FlushDiskType::AsyncFlush)).unwrap_err();
    assert!(err.to_string().contains("notes.txt"), "{err}");
}

#[test]
fn a_damaged_checkpoint_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    CommitLog::open(dir.path(), config(FlushDiskType::AsyncFlush)).unwrap().shutdown().unwrap();
    std::fs::write(dir.path().join("checkpoint"), b"garbage").unwrap();
    let err = CommitLog::open(dir.path(), config(FlushDiskType::AsyncFlush)).unwrap_err();
    assert!(err.to_string().contains("checkpoint"), "{err}");
}

#[test]
fn damage_in_an_older_segment_is_not_truncated_and_surfaces_on_read() {
    // Recovery scans from the checkpoint's segment (as RocketMQ scans the newest
    // files); older segments are checked by every read and by a full `scan`.
    let (_live, copy, written) = crashed_copy(200, 0);
    let (victim, _) = written[5];
    assert_eq!(victim / SEGMENT as u64, 0);
    patch(&segment_path(copy.path(), victim), victim % SEGMENT as u64 + 40, &[0xFF]);
    let log = CommitLog::open(copy.path(), config(FlushDiskType::AsyncFlush)).unwrap();
    assert_eq!(log.max_offset(), written.last().map(|(o, b)| o + 32 + b.len() as u64).unwrap(), "nothing truncated");
    assert!(matches!(log.read(victim), Err(Error::BadRecord { reason: Invalid::BadCrc { .. }, .. })));
    let full = log.scan(0).unwrap();
    assert!(matches!(full.invalid, Some((o, _)) if o == victim), "a full scan names it");
    assert_eq!(log.read(written[6].0).unwrap().body.len(), written[6].1.len(), "its neighbours are fine");
}

#[test]
fn a_zeroed_record_in_an_older_segment_is_an_error_not_the_end_of_the_log() {
    // Found by the crash suite's corruption matrix: zeros at a record boundary in an
    // old segment read as "end of data" and iteration stopped quietly.
    let (_live, copy, written) = crashed_copy(200, 0);
    let (victim, _) = written[3];
    patch(&segment_path(copy.path(), victim), victim % SEGMENT as u64, &[0; 512]);
    let log = CommitLog::open(copy.path(), config(FlushDiskType::AsyncFlush)).unwrap();
    let results: Vec<_> = log.iter_from(0).collect();
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 3);
    assert!(matches!(results.last(), Some(Err(Error::BadRecord { reason: Invalid::UnexpectedEnd, .. }))));
    assert!(matches!(log.read(victim), Err(Error::BadRecord { .. })));
}

#[test]
fn records_after_a_lost_header_never_come_back_after_new_appends() {
    // A lost sector holds record 5's header (zeros); records 6.. are intact behind
    // it: an ordinary power-loss state. Recovery ends the log at record 5. Same-size
    // records appended then end exactly where the old record 6 starts, so unless
    // recovery erased everything after its end, records 6.. would be valid again
    // at their own offsets and come back after the new data.
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap();
    let old: Vec<u64> = (0..10)
        .map(|seq| {
            let put = log.append(&body(0, seq, 68)).unwrap();
            put.durability.wait().unwrap();
            put.wrote_offset
        })
        .collect();
    log.shutdown().unwrap();
    std::fs::remove_file(commitlog::Checkpoint::path(dir.path())).unwrap();
    std::fs::write(dir.path().join(commitlog::ABORT_FILE), b"0").unwrap();
    patch(&segment_path(dir.path(), old[5]), old[5] % SEGMENT as u64, &[0; 8]);

    let log = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap();
    let report = log.recovery_report().clone();
    assert_eq!(report.end_offset, old[5]);
    assert_eq!(report.records_recovered, 5);
    let cut = old[9] + 100 - old[5]; // from the end to the last non-zero byte
    assert_eq!(report.bytes_truncated, cut, "what recovery cut is reported");
    let new = log.append(&body(1, 0, 68)).unwrap();
    new.durability.wait().unwrap();
    assert_eq!(new.wrote_offset, old[5]);
    log.shutdown().unwrap();

    // A clean reopen, and a crash-style reopen that scans everything.
    for crashed in [false, true] {
        if crashed {
            std::fs::remove_file(commitlog::Checkpoint::path(dir.path())).unwrap();
            std::fs::write(dir.path().join(commitlog::ABORT_FILE), b"0").unwrap();
        }
        let log = CommitLog::open(dir.path(), config(FlushDiskType::SyncFlush)).unwrap();
        let mut expected: Vec<Vec<u8>> = (0..5).map(|seq| body(0, seq, 68)).collect();
        expected.push(body(1, 0, 68));
        assert_eq!(bodies(&log), expected, "records cut by recovery came back (crashed reopen: {crashed})");
        assert_eq!(log.max_offset(), old[6]);
        log.shutdown().unwrap();
    }
}

#[test]
fn the_end_of_the_offset_space_is_a_clear_error_not_a_wrap() {
    // The last segment that fits below u64::MAX; rolling past it must fail with a
    // typed error, never wrap offsets around to 0.
    let last_start = (u64::MAX / 4096 - 1) * 4096;
    let dir = tempfile::tempdir().unwrap();
    let sim = common::sim();
    sim.write_file(&dir.path().join(commitlog::SEGMENT_DIR).join(format!("{last_start:020}")), &[0; 4096]);
    let config = commitlog::CommitLogConfig::builder()
        .write_without_mmap(common::write_without_mmap())
        .mapped_file_size_commit_log(4096)
        .max_message_size(1024)
        .preallocate_next_segment(false)
        .build()
        .unwrap();
    let log = CommitLog::open_with_storage(dir.path(), config, std::sync::Arc::new(sim)).unwrap();
    assert_eq!(log.max_offset(), last_start);
    let err = loop {
        match log.append(&[7; 1000]) {
            Ok(put) => assert!(put.wrote_offset >= last_start, "offsets wrapped to {}", put.wrote_offset),
            Err(err) => break err,
        }
    };
    assert_eq!(commitlog::PutMessageStatus::from_error(&err), commitlog::PutMessageStatus::CreateMappedFileFailed);
    assert!(err.to_string().contains("overflow"), "{err}");
    assert_eq!(log.iter_from(last_start).count(), 3, "what fitted is readable");
}
