//! One failure latch: a failed sync stops the log whoever hit it.

mod common;

use std::error::Error as _;
use std::sync::Arc;

use commitlog::{CommitLog, Error, FlushConfig, FlushDiskType};
use common::config;
use mapped_file::{SimStorage, Storage};

fn open(sim: &SimStorage, flush_disk_type: FlushDiskType) -> CommitLog {
    // Services that never flush on their own, so only the manual flush syncs.
    let mut config = config(flush_disk_type);
    config.flush = FlushConfig { flush_interval_commit_log_ms: 3_600_000, ..config.flush };
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    CommitLog::open_with_storage("/latch", config, storage).unwrap()
}

#[test]
fn a_sync_that_fails_in_flush_all_stops_every_later_append() {
    // Before the latch was shared, only the flush services' own failures counted:
    // after `flush_all` hit EIO the log went on accepting (and later syncing over)
    // appends, which fsyncgate makes unsafe.
    let sim = common::sim();
    let log = open(&sim, FlushDiskType::AsyncFlush);
    // Into the second segment, so the failing sync (of the first) is in a segment
    // later appends never touch: a per-segment latch would not stop them.
    let mut last = 0;
    while last < common::SEGMENT as u64 {
        last = log.append(&[7; 1000]).unwrap().wrote_offset;
    }
    sim.fail_nth_sync(1);
    let first = log.flush_all().unwrap_err();
    assert!(matches!(first, Error::NotWriteable { .. } | Error::Queue(_)), "{first}");
    let err = log.append(b"after").unwrap_err();
    let Error::NotWriteable { cause } = &err else { panic!("append after a failed sync: {err:?}") };
    assert_eq!(cause.source.raw_os_error(), Some(libc_eio()), "the first failure, with its OS error");
    assert!(err.source().is_some(), "the cause is a source, not a string");
    assert!(matches!(log.flush_all(), Err(Error::NotWriteable { .. })));
    assert!(matches!(log.shutdown(), Err(Error::NotWriteable { .. })), "shutdown reports it too");
}

#[test]
fn a_sync_that_fails_at_shutdown_is_reported_and_leaves_the_abort_marker() {
    let sim = common::sim();
    let log = open(&sim, FlushDiskType::AsyncFlush);
    log.append(b"unflushed").unwrap();
    sim.fail_all_syncs(true);
    assert!(log.shutdown().is_err());
    assert!(log.failure().is_some(), "the failed final flush set the latch");
    assert!(matches!(log.append(b"late"), Err(Error::Shutdown)));
    sim.fail_all_syncs(false);
    // The abort marker stayed: the next open recovers abnormally.
    let reopened = open(&sim, FlushDiskType::AsyncFlush);
    assert!(!reopened.recovery_report().clean_shutdown);
}

fn libc_eio() -> i32 {
    5 // EIO on Linux, what SimStorage injects
}

#[test]
fn a_failed_write_is_a_clear_error_that_loses_nothing_and_leaves_the_log_writeable() {
    // The write path without mmap: a pwrite can fail (EIO) where a copy into a
    // mapping cannot. The append must fail cleanly, write nothing that a later
    // append or a recovery could mistake for a record, and not stop the log.
    let sim = SimStorage::new();
    sim.set_write_without_mmap(true);
    let log = open(&sim, FlushDiskType::SyncFlush);
    let kept: Vec<u64> = (0..5u8)
        .map(|i| {
            let put = log.append(&[i; 300]).unwrap();
            put.durability.wait().unwrap();
            put.wrote_offset
        })
        .collect();
    sim.fail_writes(true);
    let err = log.append(&[9; 300]).unwrap_err();
    assert!(err.to_string().contains("cannot write"), "{err}");
    assert!(err.source().is_some(), "the OS error is a source");
    sim.fail_writes(false);
    let after = log.append(&[10; 300]).unwrap();
    after.durability.wait().unwrap();
    assert_eq!(after.wrote_offset, kept[4] + 332, "the next record goes where the failed one would have");
    // Power is cut: nothing more becomes durable, and what was not is lost.
    sim.fail_all_syncs(true);
    drop(log);
    sim.crash_losing_unsynced();
    sim.fail_all_syncs(false);
    let reopened = open(&sim, FlushDiskType::SyncFlush);
    let bodies = common::bodies(&reopened);
    assert_eq!(bodies.len(), 6);
    assert!(bodies.iter().take(5).enumerate().all(|(i, b)| b == &vec![i as u8; 300]));
    assert_eq!(bodies[5], vec![10u8; 300]);
}
