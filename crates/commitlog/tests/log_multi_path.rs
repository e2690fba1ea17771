//! A store spread over several segment directories (`store_path_commit_log`,
//! RocketMQ's `MultiPathMappedFileQueue`): placement, reopening, the recorded
//! directory list, read-only and full directories, crashes.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use commitlog::{
    admin, inspect, CommitLog, CommitLogConfig, Error, FlushDiskType, SegmentDir, ABORT_FILE, SEGMENT_PATHS_FILE,
};
use common::{bodies, body, SEGMENT};
use mapped_file::{DiskSpace, Storage};

fn config(paths: &[&Path], read_only: &[&Path]) -> CommitLogConfig {
    CommitLogConfig {
        store_path_commit_log: paths.iter().map(|p| p.to_path_buf()).collect(),
        read_only_commit_log_store_paths: read_only.iter().map(|p| p.to_path_buf()).collect(),
        ..common::config(FlushDiskType::SyncFlush)
    }
}

/// Appends `n` records of 1 KiB, each acknowledged durable; returns their bodies.
fn append(log: &CommitLog, first: u32, n: u32) -> Vec<Vec<u8>> {
    (first..first + n)
        .map(|seq| {
            let b = body(1, seq, 1024);
            log.append(&b).unwrap().durability.wait().unwrap();
            b
        })
        .collect()
}

/// The directory of every segment of the log, oldest first.
fn homes(log: &CommitLog) -> Vec<PathBuf> {
    let listing = inspect::list_segments(log.dir()).unwrap();
    listing.segments.iter().map(|s| s.path.parent().unwrap().to_path_buf()).collect()
}

#[test]
fn segments_alternate_over_disks_and_the_log_reopens_whole_from_all_of_them() {
    let (store, a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (a.path().join("commitlog"), b.path().join("commitlog"));
    let log = CommitLog::open(store.path(), config(&[&a, &b], &[])).unwrap();
    // Each directory outside the store directory is locked like the store's own.
    assert!(mapped_file::MmapStorage::lock(&b).is_err(), "the second disk is not locked");
    let mut acked = append(&log, 0, 300); // about five 64 KiB segments
    let h = homes(&log);
    assert!(h.len() >= 4, "{h:?}");
    for (i, home) in h.iter().enumerate() {
        assert_eq!(home, if i % 2 == 0 { &a } else { &b }, "segment {i} in the wrong directory: {h:?}");
    }
    assert_eq!(log.segment_dirs(), [SegmentDir::writable(&a), SegmentDir::writable(&b)]);
    log.shutdown().unwrap();

    // Reopened with the same directories: every record, in order; more appends.
    let log = CommitLog::open(store.path(), config(&[&a, &b], &[])).unwrap();
    assert_eq!(bodies(&log), acked);
    acked.extend(append(&log, 300, 50));
    log.shutdown().unwrap();

    // The read-only tools find every segment through the recorded list.
    let listing = inspect::list_segments(store.path()).unwrap();
    assert!(listing.problems.is_empty(), "{:?}", listing.problems);
    let recorded = inspect::segment_dirs(store.path()).unwrap();
    assert_eq!(recorded, [SegmentDir::writable(&a), SegmentDir::writable(&b)]);
    drop(acked);
}

#[test]
fn an_open_without_a_directory_holding_segments_is_refused_and_changes_nothing() {
    let (store, a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (a.path().to_path_buf(), b.path().to_path_buf());
    let log = CommitLog::open(store.path(), config(&[&a, &b], &[])).unwrap();
    let acked = append(&log, 0, 200);
    log.shutdown().unwrap();
    let before = std::fs::read(store.path().join(SEGMENT_PATHS_FILE)).unwrap();

    for (what, config) in [
        ("only the first", config(&[&a], &[])),
        ("only the second", config(&[&b], &[])),
        ("the default", config(&[], &[])),
    ] {
        match CommitLog::open(store.path(), config) {
            Err(Error::SegmentDirNotConfigured { dir, .. }) => assert!(dir == a || dir == b, "{what}: {dir:?}"),
            Err(other) => panic!("{what}: {other}"),
            Ok(_) => panic!("{what}: opened without a directory holding segments"),
        }
        assert!(!store.path().join(ABORT_FILE).exists(), "{what}: the refused open wrote the abort marker");
        assert_eq!(std::fs::read(store.path().join(SEGMENT_PATHS_FILE)).unwrap(), before, "{what}");
    }
    // Nothing was lost by the refusals.
    let log = CommitLog::open(store.path(), config(&[&a, &b], &[])).unwrap();
    assert!(log.recovery_report().clean_shutdown);
    assert_eq!(bodies(&log), acked);
}

#[test]
fn a_read_only_directory_gets_no_new_segment_and_leaves_the_store_once_empty() {
    let (store, a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (a.path().to_path_buf(), b.path().to_path_buf());
    let log = CommitLog::open(store.path(), config(&[&a, &b], &[])).unwrap();
    let mut acked = append(&log, 0, 200);
    log.shutdown().unwrap();
    let in_b = homes_of(store.path(), &b);
    assert!(in_b > 0);

    // Retire b: read-only, its segments still read; new ones only in a.
    let log = CommitLog::open(store.path(), config(&[&a], &[&b])).unwrap();
    assert_eq!(bodies(&log), acked);
    let segments_before = homes(&log).len();
    acked.extend(append(&log, 200, 200));
    let h = homes(&log);
    assert!(h[segments_before..].iter().all(|d| d == &a), "a new segment went to the read-only directory: {h:?}");
    assert_eq!(homes_of(store.path(), &b), in_b);
    // Retention deletes the oldest segments, b's among them.
    let last_in_b = inspect::list_segments(store.path())
        .unwrap()
        .segments
        .iter()
        .filter(|s| s.path.starts_with(&b))
        .map(|s| s.start_offset + SEGMENT as u64)
        .max()
        .unwrap();
    while log.min_offset() < last_in_b {
        assert!(log.delete_segments_before(last_in_b, 10).unwrap() > 0);
    }
    let kept: Vec<Vec<u8>> = bodies(&log);
    log.shutdown().unwrap();
    assert_eq!(homes_of(store.path(), &b), 0);

    // Empty, b is still recorded: the store forgets a directory only when the
    // operator says so, and opening without it is refused until then.
    let log = CommitLog::open(store.path(), config(&[&a], &[&b])).unwrap();
    log.shutdown().unwrap();
    assert_eq!(inspect::segment_dirs(store.path()).unwrap(), [SegmentDir::writable(&a), SegmentDir::read_only(&b)]);
    assert!(matches!(
        CommitLog::open(store.path(), config(&[&a], &[])),
        Err(Error::SegmentDirNotConfigured { dir, .. }) if dir == b
    ));
    // The documented step: forget it, then drop it from the configuration.
    let report = admin::forget_segment_dir(store.path(), &b).unwrap();
    assert_eq!(report.remaining, [SegmentDir::writable(&a)]);
    assert_eq!(report.front_missing, None);
    assert_eq!(inspect::segment_dirs(store.path()).unwrap(), [SegmentDir::writable(&a)]);
    let log = CommitLog::open(store.path(), config(&[&a], &[])).unwrap();
    assert_eq!(bodies(&log), kept);
    assert_eq!(kept[..], acked[acked.len() - kept.len()..]);
    // Refused while the log is open, and for a directory that holds segments.
    assert!(matches!(admin::forget_segment_dir(store.path(), &a), Err(Error::Locked { .. })));
    log.shutdown().unwrap();
    drop(log);
    let err = admin::forget_segment_dir(store.path(), &a).unwrap_err();
    assert!(matches!(&err, Error::Refused { step: "forget-dir", .. }), "{err}");
}

/// The store: segments from 0 on disk `old`, later made read-only, new
/// segments on disk `new`; returns (store, old, new, every record acknowledged).
fn retired_disk_store() -> (tempfile::TempDir, tempfile::TempDir, PathBuf, PathBuf, Vec<Vec<u8>>) {
    let (store, disks) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (old, new) = (disks.path().join("old"), disks.path().join("new"));
    let log = CommitLog::open(store.path(), config(&[&old], &[])).unwrap();
    let mut acked = append(&log, 0, 150);
    log.shutdown().unwrap();
    let log = CommitLog::open(store.path(), config(&[&new], &[&old])).unwrap();
    acked.extend(append(&log, 150, 150));
    log.shutdown().unwrap();
    assert!(homes_of(store.path(), &old) >= 2 && homes_of(store.path(), &new) >= 2);
    (store, disks, old, new, acked)
}

/// What the refusals must leave as they were.
fn store_files(store: &Path) -> (Vec<u8>, Vec<u8>, bool) {
    (
        std::fs::read(store.join(SEGMENT_PATHS_FILE)).unwrap(),
        std::fs::read(store.join(commitlog::CHECKPOINT_FILE)).unwrap(),
        store.join(ABORT_FILE).exists(),
    )
}

#[test]
fn a_recorded_directory_whose_disk_is_not_mounted_is_refused_by_name_and_nothing_is_lost() {
    let (store, _disks, old, new, acked) = retired_disk_store();
    let before = store_files(store.path());
    let config = config(&[&new], &[&old]);
    let unmounted = old.with_extension("unmounted");

    // The mount point is gone: refused, naming it; it is not created again.
    std::fs::rename(&old, &unmounted).unwrap();
    match CommitLog::open(store.path(), config.clone()) {
        Err(Error::SegmentDirMissing { dir, .. }) => assert_eq!(dir, old),
        other => panic!("opened without the old disk: {other:?}"),
    }
    assert!(!old.exists(), "the missing directory was created");
    assert_eq!(store_files(store.path()), before);

    // The mount point is there, empty: refused, naming the empty directory.
    std::fs::create_dir(&old).unwrap();
    match CommitLog::open(store.path(), config.clone()) {
        Err(err @ Error::SegmentsMissing { .. }) => {
            let Error::SegmentsMissing { empty_dirs, front, found, .. } = &err else { unreachable!() };
            assert_eq!(empty_dirs, std::slice::from_ref(&old), "{err}");
            assert_eq!(*front, Some(0));
            assert!(found.is_some_and(|(first, _)| first > 0), "{err}");
            assert!(err.to_string().contains(&old.display().to_string()), "{err}");
        }
        other => panic!("opened without the old disk's segments: {other:?}"),
    }
    assert_eq!(store_files(store.path()), before, "a refused open changed the store");
    // The read-only tools say so too.
    let listing = inspect::list_segments(store.path()).unwrap();
    assert!(listing.problems.iter().any(|p| p.message.contains("missing")), "{:?}", listing.problems);

    // Mounted again: every acknowledged record is there.
    std::fs::remove_dir(&old).unwrap();
    std::fs::rename(&unmounted, &old).unwrap();
    let log = CommitLog::open(store.path(), config).unwrap();
    assert_eq!(bodies(&log), acked);
    log.shutdown().unwrap();
}

#[test]
fn a_writable_directory_holding_only_the_oldest_segments_is_refused_when_empty() {
    // Segments 0.. on `a`, then `a` filled up (past the forcible ratio: no new
    // segment goes there) and new ones went to `b`. `a` unmounted.
    let sim = common::sim();
    let (a, b) = (PathBuf::from("/disks/a"), PathBuf::from("/disks/b"));
    let config = config(&[&a, &b], &[]);
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    sim.set_disk_space_of(&a, space(10));
    sim.set_disk_space_of(&b, space(99));
    let log = CommitLog::open_with_storage("/store", config.clone(), Arc::clone(&storage)).unwrap();
    let mut acked = append(&log, 0, 150);
    log.shutdown().unwrap();
    sim.set_disk_space_of(&b, space(10));
    sim.set_disk_space_of(&a, space(99));
    let log = CommitLog::open_with_storage("/store", config.clone(), Arc::clone(&storage)).unwrap();
    acked.extend(append(&log, 150, 150));
    log.shutdown().unwrap();
    let in_a = sim.snapshot().files.iter().filter(|f| f.path.starts_with(&a)).count();
    assert!(in_a >= 2, "{in_a}");

    let unmounted = sim.unmount(&a);
    match CommitLog::open_with_storage("/store", config.clone(), Arc::clone(&storage)) {
        Err(Error::SegmentsMissing { empty_dirs, .. }) => assert_eq!(empty_dirs, std::slice::from_ref(&a)),
        other => panic!("opened without a's segments: {other:?}"),
    }
    assert!(sim.file_bytes(Path::new("/store").join(ABORT_FILE).as_path()).is_none(), "abort marker written");
    sim.mount(unmounted);
    let log = CommitLog::open_with_storage("/store", config, storage).unwrap();
    assert_eq!(bodies(&log), acked);
    log.shutdown().unwrap();
}

#[test]
fn losing_the_old_disk_for_good_takes_forget_dir_and_salvage_and_says_what_was_lost() {
    let (store, _disks, old, new, acked) = retired_disk_store();
    std::fs::remove_dir_all(&old).unwrap();
    // Forgetting it is allowed (it holds nothing now), and says the front is gone.
    let report = admin::forget_segment_dir(store.path(), &old).unwrap();
    let (front, first) = report.front_missing.expect("the front was on the lost disk");
    assert_eq!(front, 0);
    let config = config(&[&new], &[]);
    assert!(matches!(CommitLog::open(store.path(), config.clone()), Err(Error::SegmentsMissing { .. })));
    // Accepting the loss is a second explicit step.
    let salvaged = admin::salvage(store.path()).unwrap();
    assert_eq!(salvaged.front_lost, Some((0, first)));
    assert!(salvaged.moved.is_empty(), "{salvaged:?}");
    let log = CommitLog::open(store.path(), config).unwrap();
    let kept = bodies(&log);
    assert!(!kept.is_empty() && kept.len() < acked.len());
    assert_eq!(kept[..], acked[acked.len() - kept.len()..], "the newest records, all of them");
    log.shutdown().unwrap();
}

/// How many segment files `dir` holds.
fn homes_of(store: &Path, dir: &Path) -> usize {
    inspect::list_segments(store).unwrap().segments.iter().filter(|s| s.path.starts_with(dir)).count()
}

fn space(used_percent: u64) -> Option<DiskSpace> {
    common::disk_at(used_percent)
}

#[test]
fn a_full_disk_is_skipped_and_appends_stop_only_when_every_disk_is_full() {
    let sim = common::sim();
    let (a, b) = (Path::new("/disk-a/log"), Path::new("/disk-b/log"));
    sim.set_disk_space_of(a, space(88)); // past disk_space_clean_forcibly_ratio (85)
    sim.set_disk_space_of(b, space(40));
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let config = CommitLogConfig {
        disk_space_warning_level_ratio: 90,
        clean_file_forcibly_enable: false, // the guard and placement alone
        disk_max_used_space_ratio: 100,
        delete_when: String::new(),
        clean_resource_interval_ms: 5,
        ..config(&[a, b], &[])
    };
    let log = CommitLog::open_with_storage("/store", config, Arc::clone(&storage)).unwrap();
    assert_eq!(log.disk_used_percent(), Some(40.0), "the least used writable disk");
    let mut acked = append(&log, 0, 300);
    let in_store = |d: &Path| {
        let listed = storage.list(d).unwrap();
        listed.iter().filter(|e| mapped_file::parse_file_name(&e.name).is_some()).count()
    };
    assert_eq!(in_store(a), 0, "a segment went to the full disk");
    assert!(in_store(b) >= 4);
    assert!(!log.is_disk_full());

    // One past the warning level (90), the other short of it: appends go on.
    sim.set_disk_space_of(b, space(95));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while log.disk_used_percent() != Some(88.0) {
        assert!(std::time::Instant::now() < deadline, "the guard never looked again");
        std::thread::yield_now();
    }
    acked.extend(append(&log, acked.len() as u32, 50));
    // Both past it: appends refused, naming the roomier disk.
    sim.set_disk_space_of(a, space(91));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let refused = loop {
        let b = body(1, acked.len() as u32, 1024);
        match log.append(&b) {
            Ok(put) => {
                put.durability.wait().unwrap();
                acked.push(b);
            }
            Err(err) => break err,
        }
        assert!(std::time::Instant::now() < deadline, "never refused");
    };
    match refused {
        Error::DiskFull { dir, used_percent, .. } => {
            assert_eq!(dir, a, "the least used disk (91 %)");
            assert_eq!(used_percent, 91.0);
        }
        other => panic!("{other}"),
    }
    assert_eq!(bodies(&log), acked);
}

#[test]
fn a_power_cut_loses_nothing_acknowledged_wherever_the_segments_were() {
    for seed in 0..20u64 {
        let sim = common::sim();
        let storage: Arc<dyn Storage> = Arc::new(sim.clone());
        let (a, b) = (Path::new("/disk-a/log"), Path::new("/disk-b/log"));
        let config = config(&[a, b], &[]);
        let log = CommitLog::open_with_storage("/store", config.clone(), Arc::clone(&storage)).unwrap();
        let acked = append(&log, 0, 150 + seed as u32 * 7);
        // Unacknowledged appends in flight when the power goes.
        for seq in 0..20 {
            let _ = log.append(&body(2, seq, 700));
        }
        // The power goes: nothing becomes durable from here on.
        sim.fail_all_syncs(true);
        drop(log);
        sim.crash_with_seed(seed);
        sim.fail_all_syncs(false);
        let log = CommitLog::open_with_storage("/store", config, Arc::clone(&storage)).unwrap();
        let got = bodies(&log);
        assert!(got.len() >= acked.len(), "seed {seed}: {} of {} acknowledged records", got.len(), acked.len());
        assert_eq!(got[..acked.len()], acked[..], "seed {seed}");
        assert!(got[acked.len()..].iter().all(|b| b[..4] == 2u32.to_le_bytes()), "seed {seed}: garbage after");
    }
}

#[test]
fn bad_directory_lists_are_refused_clearly() {
    let store = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let a = other.path().join("a");
    let cases: Vec<(&str, CommitLogConfig)> = vec![
        ("relative", config(&[Path::new("relative/log")], &[])),
        ("nested", config(&[&a, &a.join("inner")], &[])),
        ("all read-only", config(&[&a], &[&a])),
        ("holds the store", config(&[store.path().parent().unwrap()], &[])),
    ];
    for (what, config) in cases {
        match CommitLog::open(store.path(), config) {
            Err(Error::InvalidConfig { reason }) => assert!(!reason.is_empty(), "{what}"),
            Err(other) => panic!("{what}: {other}"),
            Ok(_) => panic!("{what}: opened"),
        }
    }
    // A damaged list is an error naming the file, for the log and for the tools.
    let log = CommitLog::open(store.path(), config(&[&a, &other.path().join("b")], &[])).unwrap();
    log.shutdown().unwrap();
    std::fs::write(store.path().join(SEGMENT_PATHS_FILE), "sometimes /x\n").unwrap();
    let err = CommitLog::open(store.path(), config(&[&a, &other.path().join("b")], &[])).unwrap_err();
    assert!(matches!(&err, Error::SegmentPaths { path, .. } if path.ends_with(SEGMENT_PATHS_FILE)), "{err}");
    assert!(matches!(inspect::list_segments(store.path()), Err(Error::SegmentPaths { .. })));
}
