//! The disk-space guard: appends are refused once the disk's used share reaches
//! the limit, nothing acknowledged is lost, and appends come back with space.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use commitlog::{CommitLog, CommitLogConfig, Error, FlushDiskType, PutMessageStatus};
use common::{bodies, body};
use mapped_file::{DiskSpace, Storage};

/// The guard alone: the cleaning service would delete segments at these ratios.
fn config() -> CommitLogConfig {
    CommitLogConfig {
        disk_space_warning_level_ratio: 90,
        clean_resource_interval_ms: 5,
        clean_file_forcibly_enable: false,
        disk_max_used_space_ratio: 100,
        delete_when: String::new(),
        ..common::config(FlushDiskType::SyncFlush)
    }
}

fn space(used_percent: u64) -> Option<DiskSpace> {
    common::disk_at(used_percent)
}

/// Appends until one fails (the guard's next look), or gives up.
fn until_refused(log: &CommitLog, acked: &mut Vec<Vec<u8>>) -> Error {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let b = body(1, acked.len() as u32, 300);
        match log.append(&b) {
            Ok(put) => {
                put.durability.wait().unwrap();
                acked.push(b);
            }
            Err(err) => return err,
        }
        assert!(Instant::now() < deadline, "the guard never refused an append");
    }
}

#[test]
fn a_full_disk_refuses_appends_keeps_what_was_acknowledged_and_space_brings_them_back() {
    let sim = common::sim();
    sim.set_disk_space(space(50));
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let log = CommitLog::open_with_storage("/disk", config(), Arc::clone(&storage)).unwrap();
    let mut acked = Vec::new();
    for _ in 0..300 {
        let b = body(1, acked.len() as u32, 300);
        log.append(&b).unwrap().durability.wait().unwrap();
        acked.push(b);
    }
    assert!(!log.is_disk_full());
    assert_eq!(log.disk_used_percent(), Some(50.0));

    sim.set_disk_space(space(95));
    let err = until_refused(&log, &mut acked);
    assert!(matches!(err, Error::DiskFull { limit_percent: 90, .. }), "{err}");
    assert!(err.to_string().contains("95.0 % full"), "{err}");
    assert_eq!(PutMessageStatus::from_error(&err), PutMessageStatus::ServiceNotAvailable);
    assert!(matches!(log.append_batch(&[b"x"]), Err(Error::DiskFull { .. })), "batches too");
    assert!(log.is_disk_full());
    // Reads, flushes and deleting segments go on while full.
    assert_eq!(bodies(&log), acked);
    log.flush_all().unwrap();
    assert!(log.delete_segments_before(common::SEGMENT as u64, 10).unwrap() <= 1);

    // Space comes back: so do appends.
    sim.set_disk_space(space(60));
    let deadline = Instant::now() + Duration::from_secs(20);
    while log.is_disk_full() {
        assert!(Instant::now() < deadline, "appends never came back");
        std::thread::yield_now();
    }
    let b = body(2, 0, 300);
    log.append(&b).unwrap().durability.wait().unwrap();
    let kept = bodies(&log);
    assert_eq!(kept.last(), Some(&b));
    log.shutdown().unwrap();

    // Nothing acknowledged was lost or damaged.
    let reopened = CommitLog::open_with_storage("/disk", config(), storage).unwrap();
    assert_eq!(bodies(&reopened), kept);
}

#[test]
fn a_disk_already_full_at_open_refuses_the_first_append() {
    let sim = common::sim();
    sim.set_disk_space(space(99));
    let log = CommitLog::open_with_storage("/full", config(), Arc::new(sim)).unwrap();
    assert!(matches!(log.append(b"first"), Err(Error::DiskFull { .. })));
    assert!(log.is_disk_full());
    log.shutdown().unwrap();
}

#[test]
fn a_disk_too_small_for_one_segment_says_so_and_how_big_a_segment_is() {
    let sim = common::sim();
    // An empty disk of one segment: 90 % of it is less than a segment.
    let total = common::SEGMENT as u64;
    sim.set_disk_space(Some(DiskSpace { total, free: total, available: total }));
    let log = CommitLog::open_with_storage("/small", config(), Arc::new(sim.clone())).unwrap();
    let mut acked = Vec::new();
    let err = until_refused(&log, &mut acked);
    match &err {
        Error::SegmentLargerThanDisk { segment_bytes, disk_bytes, limit_percent, .. } => {
            assert_eq!((*segment_bytes, *disk_bytes, *limit_percent), (common::SEGMENT as u64, total, 90));
        }
        other => panic!("expected SegmentLargerThanDisk, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains("does not fit") && message.contains("make segments smaller"), "{message}");
    assert!(matches!(log.append(b"again"), Err(Error::SegmentLargerThanDisk { .. })));
    assert_eq!(bodies(&log), acked, "nothing acknowledged lost");
    log.shutdown().unwrap();
}

#[test]
fn the_limit_must_be_a_percentage() {
    for bad in [0, 101] {
        for config in [
            CommitLogConfig { disk_space_warning_level_ratio: bad, ..config() },
            CommitLogConfig { disk_max_used_space_ratio: bad, ..config() },
            CommitLogConfig { disk_space_clean_forcibly_ratio: bad, ..config() },
        ] {
            assert!(matches!(config.validate(), Err(Error::InvalidConfig { .. })), "{bad}");
        }
    }
    for bad in ["24", "4;x", "-1"] {
        let config = CommitLogConfig { delete_when: bad.into(), ..config() };
        let err = config.validate().unwrap_err();
        assert!(err.to_string().contains("delete_when"), "{err}");
    }
    assert!(CommitLogConfig { delete_when: "01; 13;".into(), ..config() }.validate().is_ok());
}

#[test]
fn a_producer_faster_than_the_guards_timer_is_refused_before_the_file_system_runs_out() {
    // The guard's timer never looks (an hour); the disk holds twelve segments.
    // The next segment's creation ran into the file system's ENOSPC with 8 %
    // free: the guard at 90 % never refused.
    let sim = common::sim();
    sim.set_disk_size(Some(12 * common::SEGMENT as u64));
    let config = CommitLogConfig { clean_resource_interval_ms: 3_600_000, ..config() };
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let log = CommitLog::open_with_storage("/fast", config.clone(), Arc::clone(&storage)).unwrap();
    let mut acked = Vec::new();
    let err = until_refused(&log, &mut acked);
    match &err {
        Error::DiskFull { used_percent, limit_percent: 90, .. } => {
            assert!(*used_percent < 90.0, "refused before a segment took the disk past 90 %: {err}")
        }
        other => panic!("refused by the file system, not the guard: {other}"),
    }
    assert!(log.is_disk_full(), "later appends are refused at once");
    assert!(matches!(log.append(b"again"), Err(Error::DiskFull { .. })));
    assert!(acked.len() > 1000, "{}", acked.len());
    let space = storage.disk_space("/fast".as_ref()).unwrap().unwrap();
    assert!(space.used_percent() < 90.0, "{}", space.used_percent());
    assert_eq!(bodies(&log), acked);
    log.shutdown().unwrap();
    let reopened = CommitLog::open_with_storage("/fast", config, storage).unwrap();
    assert_eq!(bodies(&reopened), acked);
    reopened.shutdown().unwrap();
}
