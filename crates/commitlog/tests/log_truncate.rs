//! Cutting the log's tail while it is open (`CommitLog::truncate_from`), as a
//! replicated log drops a conflicting suffix: exact, checked, and crash-safe.

mod common;

use std::sync::Arc;

use commitlog::{CommitLog, Error, FlushDiskType};
use common::{bodies, body};
use mapped_file::sim::SimSnapshot;
use mapped_file::Storage;

/// Appends `n` durable records of varied sizes; returns (offset, body) of each.
fn fill(log: &CommitLog, producer: u32, n: u32) -> Vec<(u64, Vec<u8>)> {
    (0..n)
        .map(|seq| {
            let b = body(producer, seq, 200 + (seq as usize * 37) % 3000);
            let put = log.append(&b).unwrap();
            put.durability.wait().unwrap();
            (put.wrote_offset, b)
        })
        .collect()
}

#[test]
fn the_tail_is_cut_at_a_record_new_records_follow_and_a_restart_agrees() {
    let dir = tempfile::tempdir().unwrap();
    let config = common::config(FlushDiskType::SyncFlush);
    let log = CommitLog::open(dir.path(), config.clone()).unwrap();
    let old = fill(&log, 1, 120); // several 64 KiB segments
    let (cut, _) = old[50];
    let report = log.truncate_from(cut).unwrap();
    assert!(report.segments_deleted > 0, "{report:?}");
    assert_eq!(log.max_offset(), cut);
    assert!(log.flushed_offset() <= cut);
    let mut want: Vec<Vec<u8>> = old[..50].iter().map(|(_, b)| b.clone()).collect();
    assert_eq!(bodies(&log), want);
    // New records take the freed offsets; old ones never come back.
    let new = fill(&log, 2, 30);
    assert_eq!(new[0].0, cut);
    want.extend(new.iter().map(|(_, b)| b.clone()));
    assert_eq!(bodies(&log), want);
    log.shutdown().unwrap();
    let log = CommitLog::open(dir.path(), config.clone()).unwrap();
    assert_eq!(bodies(&log), want);
    log.shutdown().unwrap();
    // After a crash too (no clean shutdown): the same log.
    let crashed = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), config.clone()).unwrap();
    let (cut, _) = new[10];
    log.truncate_from(cut).unwrap();
    want.truncate(50 + 10);
    common::copy_dir(dir.path(), crashed.path());
    drop(log);
    let log = CommitLog::open(crashed.path(), config).unwrap();
    assert!(!log.recovery_report().clean_shutdown);
    assert_eq!(bodies(&log), want);
}

#[test]
fn an_offset_that_is_not_a_record_start_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), common::config(FlushDiskType::SyncFlush)).unwrap();
    let old = fill(&log, 1, 40);
    let all = bodies(&log);
    let end = log.max_offset();
    for bad in [old[10].0 + 1, old[10].0 + 8, end + 1, end + 100_000] {
        let err = log.truncate_from(bad).unwrap_err();
        assert!(matches!(err, Error::NoRecord { .. } | Error::InsideRecord { .. }), "{bad}: {err}");
        assert_eq!(bodies(&log), all, "{bad}");
    }
    assert_eq!(log.truncate_from(end).unwrap(), Default::default(), "the end: nothing to cut");
    // A reader's view of a record above the cut refuses it.
    let held = log.read(old[30].0).unwrap();
    // One path per failure: a segment's error is `Error::File`, whoever met it.
    match log.truncate_from(old[30].0) {
        Err(Error::File(commitlog::MappedFileError::ViewsOutstanding { .. })) => {}
        other => panic!("{other:?}"),
    }
    drop(held);
    assert_eq!(bodies(&log), all);
    log.truncate_from(old[30].0).unwrap();
    assert_eq!(bodies(&log).len(), 30);
}

#[test]
fn a_crash_during_truncation_recovers_a_prefix_of_the_old_log_never_less_than_the_kept_part() {
    let mut states = 0;
    for seed in 0..6u64 {
        let sim = common::sim();
        let storage: Arc<dyn Storage> = Arc::new(sim.clone());
        let config = common::config(FlushDiskType::SyncFlush);
        let log = CommitLog::open_with_storage("/store", config.clone(), Arc::clone(&storage)).unwrap();
        let old = fill(&log, 1, 60 + seed as u32 * 5);
        let keep = 20 + seed as usize * 3;
        let old_bodies: Vec<Vec<u8>> = old.iter().map(|(_, b)| b.clone()).collect();
        // Wait for the checkpoint service to write the end of data: a truncation
        // that cut below the checkpoint without lowering it then recovers as damage.
        let end = log.max_offset();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while commitlog::Checkpoint::load(&sim, "/store".as_ref()).unwrap().is_none_or(|c| c.flushed_offset < end) {
            assert!(std::time::Instant::now() < deadline, "the checkpoint never reached the end of data");
            std::thread::yield_now();
        }
        // Every storage event of the truncation is a point where the power may go.
        let (tx, rx) = std::sync::mpsc::sync_channel::<SimSnapshot>(100_000);
        sim.set_snapshot_sink(Some(tx));
        log.truncate_from(old[keep].0).unwrap();
        sim.set_snapshot_sink(None);
        let snapshots: Vec<SimSnapshot> = rx.try_iter().collect();
        assert!(snapshots.len() > 3, "the truncation wrote nothing?");
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        for snapshot in &snapshots {
            for _ in 0..4 {
                let image = snapshot.crash_image(|_| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng & 1 == 1
                });
                image.set_write_without_mmap(common::write_without_mmap());
                let recovered = CommitLog::open_with_storage("/store", config.clone(), Arc::new(image))
                    .unwrap_or_else(|e| panic!("seed {seed}, event {}: {e}", snapshot.event));
                let got = bodies(&recovered);
                assert!(
                    got.len() >= keep && got.len() <= old_bodies.len() && got[..] == old_bodies[..got.len()],
                    "seed {seed}, event {}: recovered {} records, not a prefix of the {} old ones keeping {keep}",
                    snapshot.event,
                    got.len(),
                    old_bodies.len()
                );
                states += 1;
            }
        }
    }
    assert!(states > 50, "{states}");
}

#[test]
fn a_truncation_inside_a_group_commit_round_neither_kills_it_nor_acknowledges_unsynced_bytes() {
    use flush_service::{FlushTarget, GroupCommit, GroupCommitConfig, ManualClock};
    use segment_queue::{QueueConfig, SegmentQueue};

    let sim = common::sim();
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let config = QueueConfig { preallocate_next_segment: false, ..QueueConfig::new(common::SEGMENT) };
    let queue = Arc::new(SegmentQueue::load(Arc::clone(&storage), "/q".as_ref(), config, None).unwrap());
    let append = |queue: &SegmentQueue, bytes: usize| {
        let file = queue.roll_to_writable_segment(0).unwrap();
        file.append_bytes(0, &vec![7u8; bytes]).unwrap();
        queue.max_wrote_position()
    };
    let target = flush_service::testing::HookAfterFlush::new(commitlog::QueueTarget::new(Arc::clone(&queue)));
    let gc =
        Arc::new(GroupCommit::new(target.clone(), Arc::new(ManualClock::new()), GroupCommitConfig::default(), None));
    let end = append(&queue, 3000); // E
    let early = gc.put_request(end);
    let late = Arc::new(std::sync::Mutex::new(None));
    {
        let (gc, queue, late) = (Arc::clone(&gc), Arc::clone(&queue), Arc::clone(&late));
        target.arm(move || {
            // The cut and a new record below E, before the round answers.
            queue.truncate_dirty_files(1000).unwrap();
            let next = append(&queue, 100);
            assert_eq!(next, 1100);
            *late.lock().unwrap() = Some(gc.put_request(next));
        });
    }
    gc.swap();
    let acknowledged = gc.flush_swapped(); // panicked here (an assert on the stale end)
    let late = late.lock().unwrap().take().expect("the hook ran");
    assert_eq!(acknowledged, 0);
    assert!(!late.is_done(), "bytes written after the cut were acknowledged before a sync covered them");
    assert_eq!(target.state().flushed_where, 1000);
    // The next round syncs them (the cut's own sync made nothing above 1000
    // durable) and answers.
    gc.run_round();
    assert!(late.wait_timeout(std::time::Duration::from_secs(10)).unwrap().is_ok());
    assert_eq!(queue.flushed_where(), 1100);
    assert!(!early.is_done(), "the request for the cut bytes is never answered as durable by a later round");
}

#[test]
fn durability_handles_of_records_a_truncation_cuts_resolve_durable_before_the_cut() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), common::config(FlushDiskType::SyncFlush)).unwrap();
    let puts: Vec<_> = (0..50u32).map(|i| log.append(&body(1, i, 500)).unwrap()).collect();
    let cut = puts[20].wrote_offset;
    log.truncate_from(cut).unwrap();
    for put in puts {
        let answer = put.durability.wait_timeout(std::time::Duration::from_secs(10)).expect("answered");
        assert!(answer.is_ok(), "a record cut after it was made durable is answered durable: {answer:?}");
    }
    log.shutdown().unwrap();
}
