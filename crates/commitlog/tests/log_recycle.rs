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
