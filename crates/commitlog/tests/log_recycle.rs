//! Expired segments reused as spares: old bytes never come back, a clean restart
//! cuts nothing, a crash recovers a clean prefix.

mod common;

use std::sync::Arc;

use commitlog::{CommitLog, CommitLogConfig, FlushDiskType};
use common::{bodies, body, SEGMENT};
use mapped_file::Storage;

fn config() -> CommitLogConfig {
    CommitLogConfig { recycle_segments: 2, ..common::config(FlushDiskType::SyncFlush) }
}

/// Appends records until the log has `segments` segments; returns their bodies.
fn fill(log: &CommitLog, producer: u32, segments: u64, first_seq: u32) -> Vec<Vec<u8>> {
    let mut written = Vec::new();
    let mut seq = first_seq;
    while log.max_offset() < segments * SEGMENT as u64 - 2048 {
        let b = body(producer, seq, 700 + (seq as usize % 300));
        log.append(&b).unwrap().durability.wait().unwrap();
        written.push(b);
        seq += 1;
    }
    written
}

#[test]
fn segments_made_of_spares_hold_only_new_records_and_a_clean_restart_cuts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config()).unwrap();
    fill(&log, 1, 4, 0);
    // The first three segments expire: two become spares, one is deleted.
    assert_eq!(log.delete_segments_before(3 * SEGMENT as u64, 10).unwrap(), 3);
    let spares = dir.path().join(commitlog::SEGMENT_DIR).join(segment_queue::RECYCLE_DIR);
    assert_eq!(std::fs::read_dir(&spares).unwrap().count(), 2);
    let kept: Vec<Vec<u8>> = bodies(&log);
    // Two more segments: both made of the spares, full of old records at other offsets.
    let new = fill(&log, 2, 6, 0);
    assert_eq!(std::fs::read_dir(&spares).unwrap().count(), 0, "both spares reused");
    let expected: Vec<Vec<u8>> = kept.iter().chain(&new).cloned().collect();
    assert_eq!(bodies(&log), expected);
    log.shutdown().unwrap();
    drop(log);

    let listing = commitlog::inspect::list_segments(dir.path()).unwrap();
    assert!(listing.problems.is_empty(), "{:?}", listing.problems);
    let reopened = CommitLog::open(dir.path(), config()).unwrap();
    let report = reopened.recovery_report();
    assert!(report.clean_shutdown);
    assert_eq!(report.bytes_truncated, 0, "the end was marked: nothing to cut");
    assert_eq!(bodies(&reopened), expected);
    reopened.shutdown().unwrap();
}

#[test]
fn a_crash_in_a_segment_made_of_a_spare_recovers_every_acknowledged_record_and_no_old_one() {
    for seed in 0..6u64 {
        let sim = common::sim();
        let storage: Arc<dyn Storage> = Arc::new(sim.clone());
        let log = CommitLog::open_with_storage("/recycle", config(), Arc::clone(&storage)).unwrap();
        fill(&log, 1, 4, 0);
        assert_eq!(log.delete_segments_before(3 * SEGMENT as u64, 10).unwrap(), 3);
        let kept = bodies(&log);
        // Into the spare: acknowledged records, then some that are not (power goes).
        let acked = fill(&log, 2, 5, 0);
        sim.fail_all_syncs(true);
        for seq in 0..20 {
            let _ = log.append(&body(3, seq, 500));
        }
        drop(log);
        sim.crash_with_seed(seed);
        sim.fail_all_syncs(false);
        let reopened = CommitLog::open_with_storage("/recycle", config(), storage).unwrap();
        let recovered = bodies(&reopened);
        let prefix: Vec<Vec<u8>> = kept.iter().chain(&acked).cloned().collect();
        assert!(recovered.len() >= prefix.len(), "seed {seed}: acknowledged records lost");
        assert_eq!(recovered[..prefix.len()], prefix[..], "seed {seed}");
        // Past the acknowledged ones only the unacknowledged third producer, in order.
        for (i, b) in recovered[prefix.len()..].iter().enumerate() {
            assert_eq!(b, &body(3, i as u32, 500), "seed {seed}: a record that was never written here");
        }
        reopened.shutdown().unwrap();
    }
}

#[test]
fn spares_left_by_a_run_that_kept_them_go_when_recycling_is_off() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config()).unwrap();
    fill(&log, 1, 4, 0);
    assert_eq!(log.delete_segments_before(3 * SEGMENT as u64, 10).unwrap(), 3);
    log.shutdown().unwrap();
    drop(log);
    let spares = dir.path().join(commitlog::SEGMENT_DIR).join(segment_queue::RECYCLE_DIR);
    assert_eq!(std::fs::read_dir(&spares).unwrap().count(), 2);
    // Off now: the spares take disk space for nothing, and go at the next open.
    let off = CommitLogConfig { recycle_segments: 0, ..config() };
    let log = CommitLog::open(dir.path(), off).unwrap();
    assert_eq!(std::fs::read_dir(&spares).unwrap().count(), 0, "spares kept with recycling off");
    log.shutdown().unwrap();
    drop(log);
    // Fewer now: the ones beyond go.
    let log = CommitLog::open(dir.path(), config()).unwrap();
    fill(&log, 2, 7, 0);
    let first = log.min_offset();
    assert_eq!(log.delete_segments_before(first + 3 * SEGMENT as u64, 10).unwrap(), 3);
    log.shutdown().unwrap();
    drop(log);
    assert_eq!(std::fs::read_dir(&spares).unwrap().count(), 2);
    let one = CommitLogConfig { recycle_segments: 1, ..config() };
    CommitLog::open(dir.path(), one).unwrap().shutdown().unwrap();
    assert_eq!(std::fs::read_dir(&spares).unwrap().count(), 1);
}

#[test]
fn a_spare_never_becomes_the_segment_at_the_offset_it_once_held() {
    // An operator deleted the segments and the checkpoint by hand, leaving the
    // spares: the log starts at 0 again, beside a spare named 0 whose records
    // would pass their CRCs there after a crash.
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), CommitLogConfig { recycle_segments: 1, ..config() }).unwrap();
    let old = fill(&log, 1, 3, 0);
    assert_eq!(log.delete_segments_before(SEGMENT as u64, 10).unwrap(), 1);
    log.shutdown().unwrap();
    drop(log);
    let segments = dir.path().join(commitlog::SEGMENT_DIR);
    let spare = segments.join(segment_queue::RECYCLE_DIR).join(mapped_file::file_name(0));
    assert!(spare.exists(), "segment 0 kept as a spare");
    for entry in std::fs::read_dir(&segments).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::remove_file(path).unwrap();
        }
    }
    std::fs::remove_file(commitlog::Checkpoint::path(dir.path())).unwrap();
    // No preallocation: the only segment made next is the one at 0.
    let fresh = CommitLogConfig { recycle_segments: 1, preallocate_next_segment: false, ..config() };
    let log = CommitLog::open(dir.path(), fresh).unwrap();
    log.append(b"new").unwrap().durability.wait().unwrap();
    // A crash now: the segment at 0 holds the new record, then zeros or bytes
    // that fail their CRCs here, never the old records.
    let crashed = tempfile::tempdir().unwrap();
    common::copy_dir(dir.path(), crashed.path());
    drop(log);
    let log = CommitLog::open(crashed.path(), config()).unwrap();
    let got = bodies(&log);
    assert_eq!(got, [b"new".to_vec()], "old records came back: {} of {}", got.len(), old.len());
    assert!(spare.exists(), "the spare named 0 became the segment at 0");
}
