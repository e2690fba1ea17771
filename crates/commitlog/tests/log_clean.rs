//! The cleaning service (RocketMQ's CleanCommitLogService): expired segments go at
//! the delete hours or when space is short, unexpired ones only when space is
//! very short; never the last, never past a kept one; readers' views survive.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use commitlog::{CommitLog, CommitLogConfig, FlushDiskType};
use common::{body, SEGMENT};
use mapped_file::{DiskSpace, SimStorage, Storage};

const DIR: &str = "/clean";

use test_support::now_ms;

/// This hour and the next, UTC: "now" for `delete_when` even across an hour's end.
fn this_hour() -> String {
    let hour = now_ms() / 3_600_000 % 24;
    format!("{hour};{}", (hour + 1) % 24)
}

/// An hour that is not now nor next.
fn other_hour() -> String {
    ((now_ms() / 3_600_000 + 12) % 24).to_string()
}

fn config(delete_when: &str) -> CommitLogConfig {
    CommitLogConfig {
        clean_resource_interval_ms: 5,
        delete_when: delete_when.into(),
        file_reserved_time_ms: 72 * 3600 * 1000,
        ..common::rocketmq_disk_ratios(common::config(FlushDiskType::SyncFlush))
    }
}

fn space(used_percent: u64) -> Option<DiskSpace> {
    common::disk_at(used_percent)
}

/// A store of four full-ish segments whose first two are `age_h` hours old;
/// returns the storage and every record's (offset, body).
fn aged_store(age_h: u64) -> (SimStorage, Vec<(u64, Vec<u8>)>) {
    let sim = common::sim();
    let log = CommitLog::open_with_storage(DIR, config(""), Arc::new(sim.clone())).unwrap();
    let mut records = Vec::new();
    let mut seq = 0;
    while log.max_offset() < 4 * SEGMENT as u64 - 2048 {
        let b = body(1, seq, 1000);
        let put = log.append(&b).unwrap();
        put.durability.wait().unwrap();
        records.push((put.wrote_offset, b));
        seq += 1;
    }
    log.shutdown().unwrap();
    for segment in 0..2u64 {
        let path = Path::new(DIR).join(commitlog::SEGMENT_DIR).join(mapped_file::file_name(segment * SEGMENT as u64));
        sim.set_modified_ms(&path, now_ms() - age_h * 3_600_000);
    }
    (sim, records)
}

/// Waits until `done` or at least `runs` more cleaning runs have passed.
fn wait_runs(log: &CommitLog, runs: u64, done: impl Fn(&CommitLog) -> bool) {
    let start = log.clean_stats().runs;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done(log) && log.clean_stats().runs < start + runs {
        assert!(Instant::now() < deadline, "the cleaning service does not run");
        std::thread::yield_now();
    }
}

#[test]
fn expired_segments_go_at_the_delete_hour_and_only_then() {
    let (sim, records) = aged_store(100);
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let log = CommitLog::open_with_storage(DIR, config(&other_hour()), Arc::clone(&storage)).unwrap();
    wait_runs(&log, 10, |_| false);
    assert_eq!(log.clean_stats().expired_deleted, 0, "not the hour, and space is fine");
    assert_eq!(log.min_offset(), 0);
    log.shutdown().unwrap();

    let log = CommitLog::open_with_storage(DIR, config(&this_hour()), storage).unwrap();
    wait_runs(&log, 1000, |l| l.clean_stats().expired_deleted == 2);
    assert_eq!(log.clean_stats().expired_deleted, 2);
    assert_eq!(log.min_offset(), 2 * SEGMENT as u64, "the two old ones, not the young ones after them");
    wait_runs(&log, 10, |_| false);
    assert_eq!(log.clean_stats().expired_deleted, 2, "the rest have not expired");
    for (offset, b) in records.iter().filter(|(o, _)| *o >= 2 * SEGMENT as u64) {
        assert_eq!(&log.read(*offset).unwrap().body[..], &b[..]);
    }
    log.shutdown().unwrap();
}

#[test]
fn short_space_deletes_expired_segments_at_any_hour_and_drops_spares() {
    let (sim, _) = aged_store(100);
    let spares = Path::new(DIR).join(commitlog::SEGMENT_DIR).join(segment_queue::RECYCLE_DIR);
    sim.write_file(&spares.join(mapped_file::file_name(1 << 40)), &vec![0; SEGMENT]);
    sim.set_disk_space(space(80)); // above disk_max_used_space_ratio (75)
    let config = CommitLogConfig { recycle_segments: 2, ..config(&other_hour()) };
    let log = CommitLog::open_with_storage(DIR, config, Arc::new(sim.clone())).unwrap();
    wait_runs(&log, 1000, |l| l.clean_stats().expired_deleted == 2);
    assert_eq!(log.min_offset(), 2 * SEGMENT as u64);
    assert_eq!(log.clean_stats().forcibly_deleted, 0, "below the forcible ratio: only expired ones");
    assert!(
        sim.snapshot().files.iter().all(|f| !f.path.starts_with(&spares)),
        "the spare there was deleted, and none was kept while space is short"
    );
    log.shutdown().unwrap();
}

#[test]
fn very_short_space_deletes_the_oldest_unexpired_segments_in_budgets_never_the_last() {
    let (sim, records) = aged_store(0); // nothing expired
                                        // 89 % used, below the guard (90); the forcible ratio (20) cannot be reached
                                        // even with the last segment alone.
    sim.set_disk_size(Some(4 * SEGMENT as u64 + SEGMENT as u64 / 2));
    let config = CommitLogConfig {
        delete_file_batch_max: 1,
        disk_max_used_space_ratio: 15,
        disk_space_clean_forcibly_ratio: 20,
        ..config(&other_hour())
    };
    let log = CommitLog::open_with_storage(DIR, config, Arc::new(sim.clone())).unwrap();
    // A reader holds a record of the first segment: its view survives the deletion.
    let (first_offset, first_body) = &records[0];
    let held = log.read(*first_offset).unwrap();
    // The counter moves after the deletion it counts: wait for it, not for the
    // segment count (which a look can see one deletion before the counter).
    wait_runs(&log, 1000, |l| l.clean_stats().forcibly_deleted >= 3);
    let stats = log.clean_stats();
    assert_eq!(stats.forcibly_deleted, 3, "all but the last, one per run: {stats:?}");
    assert_eq!(log.segment_count(), 1, "never the last: {stats:?}");
    assert!(stats.runs >= 3, "a budget of one per run: {stats:?}");
    assert_eq!(&held.body[..], &first_body[..], "the reader's view of a deleted segment is whole");
    assert!(!log.is_disk_full());
    // The last segment and the log's end stay.
    let (last_offset, last_body) = records.last().unwrap();
    assert_eq!(&log.read(*last_offset).unwrap().body[..], &last_body[..]);
    log.append(b"still writeable").unwrap().durability.wait().unwrap();
    log.shutdown().unwrap();
}

#[test]
fn forcible_cleaning_can_be_switched_off() {
    let (sim, _) = aged_store(0);
    sim.set_disk_space(space(87));
    let config = CommitLogConfig { clean_file_forcibly_enable: false, ..config(&other_hour()) };
    let log = CommitLog::open_with_storage(DIR, config, Arc::new(sim)).unwrap();
    wait_runs(&log, 10, |_| false);
    assert_eq!(log.clean_stats().forcibly_deleted, 0);
    assert_eq!(log.min_offset(), 0);
    log.shutdown().unwrap();
}

#[test]
fn shutdown_does_not_run_the_cleaning_service_once_more() {
    // Shutdown wakes the service from its sleep to stop it; a loop that went on to
    // its run before looking at the stop flag deleted unexpired segments of a
    // disk short of space during every shutdown.
    let (sim, records) = aged_store(0);
    sim.set_disk_space(space(87)); // forcible cleaning would delete
    let config = CommitLogConfig { clean_resource_interval_ms: 3_600_000, ..config(&other_hour()) };
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let log = CommitLog::open_with_storage(DIR, config.clone(), Arc::clone(&storage)).unwrap();
    log.shutdown().unwrap();
    assert_eq!(log.clean_stats().runs, 0, "no run within the hour, not even at shutdown");
    let reopened = CommitLog::open_with_storage(DIR, config, storage).unwrap();
    assert_eq!(common::bodies(&reopened).len(), records.len(), "nothing deleted");
    reopened.shutdown().unwrap();
}

/// A store of four segments on a simulated disk of four and a half: 89 % used,
/// above the forcible ratio (85); one segment deleted brings it to 67 %.
fn store_on_a_small_disk() -> (SimStorage, Vec<(u64, Vec<u8>)>) {
    let (sim, records) = aged_store(0); // nothing expired
    assert_eq!(sim.snapshot().files.iter().filter(|f| f.durable.len() == SEGMENT).count(), 4);
    sim.set_disk_size(Some(4 * SEGMENT as u64 + SEGMENT as u64 / 2));
    (sim, records)
}

#[test]
fn forcible_cleaning_deletes_only_what_brings_the_disk_back_below_the_ratio() {
    // It deleted every segment but the last in one run (RocketMQ's batch): on a
    // small disk, most of the log, and the newest records with it when the
    // last segment had just begun.
    let (sim, records) = store_on_a_small_disk();
    let log = CommitLog::open_with_storage(DIR, config(&other_hour()), Arc::new(sim.clone())).unwrap();
    wait_runs(&log, 1000, |l| l.clean_stats().forcibly_deleted > 0);
    wait_runs(&log, 20, |_| false);
    let stats = log.clean_stats();
    assert_eq!(stats.forcibly_deleted, 1, "one segment is enough: {stats:?}");
    assert_eq!(log.min_offset(), SEGMENT as u64);
    assert!(log.disk_used_percent().unwrap() < 85.0);
    for (offset, b) in records.iter().filter(|(o, _)| *o >= SEGMENT as u64) {
        assert_eq!(&log.read(*offset).unwrap().body[..], &b[..]);
    }
    log.shutdown().unwrap();
}

#[test]
fn space_a_reader_still_holds_is_not_freed_twice() {
    // A deleted segment's blocks stay in use while a view of its bytes is alive:
    // the next look still sees the disk full, and must not delete another
    // segment for space that is already on its way back.
    let (sim, records) = store_on_a_small_disk();
    let log = CommitLog::open_with_storage(DIR, config(&other_hour()), Arc::new(sim.clone())).unwrap();
    let (first_offset, first_body) = &records[0];
    let held = log.read(*first_offset).unwrap();
    wait_runs(&log, 1000, |l| l.clean_stats().forcibly_deleted > 0);
    wait_runs(&log, 20, |_| false);
    assert!(log.disk_used_percent().unwrap() > 85.0, "the view holds the deleted segment's space");
    assert_eq!(log.clean_stats().forcibly_deleted, 1, "{:?}", log.clean_stats());
    assert_eq!(&held.body[..], &first_body[..]);
    drop(held);
    wait_runs(&log, 1000, |l| l.disk_used_percent().is_some_and(|u| u < 85.0));
    wait_runs(&log, 20, |_| false);
    assert_eq!(log.clean_stats().forcibly_deleted, 1, "{:?}", log.clean_stats());
    assert_eq!(log.min_offset(), SEGMENT as u64);
    log.shutdown().unwrap();
}

#[test]
fn expired_segments_deleted_first_spare_unexpired_ones_the_same_run_would_have_taken() {
    // The look at the disk comes before the run's deletions: the forcible step
    // computed its need from it after the expired ones had already freed enough.
    let (sim, records) = aged_store(100); // the first two expired
    sim.set_disk_size(Some(4 * SEGMENT as u64 + SEGMENT as u64 / 2)); // 89 %: past 75 and 85
    let log = CommitLog::open_with_storage(DIR, config(&other_hour()), Arc::new(sim.clone())).unwrap();
    wait_runs(&log, 1000, |l| l.clean_stats().expired_deleted == 2);
    wait_runs(&log, 20, |_| false);
    let stats = log.clean_stats();
    assert_eq!((stats.expired_deleted, stats.forcibly_deleted), (2, 0), "{stats:?}");
    assert_eq!(log.min_offset(), 2 * SEGMENT as u64);
    for (offset, b) in records.iter().filter(|(o, _)| *o >= 2 * SEGMENT as u64) {
        assert_eq!(&log.read(*offset).unwrap().body[..], &b[..]);
    }
    log.shutdown().unwrap();
}
