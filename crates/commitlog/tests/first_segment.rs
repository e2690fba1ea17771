//! A new log's first segment is prepared by the open (zeros written and synced
//! before any writer), so its first durable batches sync written blocks; an
//! open that finds an active segment with records leaves it as it is.

mod common;

use std::path::Path;
use std::sync::Arc;

use commitlog::{CommitLog, FlushDiskType, SegmentPreparation};

fn open(sim: &mapped_file::SimStorage, config: commitlog::CommitLogConfig) -> CommitLog {
    CommitLog::open_with_storage(Path::new("/log"), config, Arc::new(sim.clone())).unwrap()
}

#[test]
fn a_new_logs_open_prepares_its_first_segment_whole_and_syncs_it() {
    let sim = common::sim();
    let syncs = sim.sync_count();
    // No spare made beside: its preparation, in the background, would add its
    // bytes to the statistics at a moment of its own.
    let mut config = common::config(FlushDiskType::SyncFlush);
    config.preallocate_next_segment = false;
    let log = open(&sim, config);
    let stats = log.preparation_stats();
    assert_eq!(stats.prepared_in_place, 1, "{stats:?}");
    assert_eq!(stats.bytes_written, common::SEGMENT as u64, "{stats:?}");
    assert!(sim.sync_count() > syncs);
    let first = common::segment_path(Path::new("/log"), 0);
    assert_eq!(sim.file_bytes(&first).unwrap(), vec![0; common::SEGMENT]);
    let put = log.append(b"first").unwrap();
    put.durability.wait().unwrap();
    assert_eq!(&log.read(put.wrote_offset).unwrap().body[..], b"first");
    log.shutdown().unwrap();
}

/// The class of defect this guards against: zeros written over records. Every
/// reopen (clean, or after a power cut keeping only what was synced) finds the
/// acknowledged records, and prepares nothing in their segment.
#[test]
fn a_reopen_never_prepares_a_segment_holding_records() {
    let sim = common::sim();
    let log = open(&sim, common::config(FlushDiskType::SyncFlush));
    let mut offsets = Vec::new();
    for i in 0..20u32 {
        let put = log.append(&common::body(0, i, 100)).unwrap();
        put.durability.wait().unwrap();
        offsets.push(put.wrote_offset);
    }
    drop(log);
    sim.crash_losing_unsynced();
    let log = open(&sim, common::config(FlushDiskType::SyncFlush));
    assert_eq!(log.preparation_stats().prepared_in_place, 0, "{:?}", log.preparation_stats());
    for (i, offset) in offsets.iter().enumerate() {
        let i = u32::try_from(i).unwrap();
        assert_eq!(log.read(*offset).unwrap().body.to_vec(), common::body(0, i, 100), "record {i}");
    }
    log.shutdown().unwrap();
}

#[test]
fn allocated_segments_are_one_setting_away() {
    let sim = common::sim();
    let mut config = common::config(FlushDiskType::SyncFlush);
    config.segment_preparation = SegmentPreparation::Allocated;
    let log = open(&sim, config);
    let stats = log.preparation_stats();
    assert_eq!((stats.prepared_in_place, stats.bytes_written), (0, 0), "{stats:?}");
    log.shutdown().unwrap();
}

/// A power cut anywhere in a new log's open, its preparation of the first
/// segment included (each zero write and each sync), leaves a directory that
/// opens, takes durable records, and keeps them through the next power cut.
#[test]
fn a_power_cut_anywhere_in_a_new_logs_open_leaves_a_log_that_opens_and_keeps_what_it_acknowledges() {
    let sim = common::sim();
    let (tx, rx) = std::sync::mpsc::sync_channel(1 << 16);
    sim.set_snapshot_sink(Some(tx));
    let log = open(&sim, common::config(FlushDiskType::SyncFlush));
    sim.set_snapshot_sink(None);
    log.shutdown().unwrap();
    let snapshots: Vec<_> = rx.try_iter().collect();
    assert!(snapshots.len() > 3, "{} storage events in an open", snapshots.len());
    for (event, snapshot) in snapshots.iter().enumerate() {
        for (image_kind, image) in
            [("nothing unsynced", snapshot.crash_image(|_| false)), ("everything", snapshot.crash_image(|_| true))]
        {
            image.set_write_without_mmap(common::write_without_mmap());
            let log = CommitLog::open_with_storage(
                Path::new("/log"),
                common::config(FlushDiskType::SyncFlush),
                Arc::new(image.clone()),
            )
            .unwrap_or_else(|err| panic!("event {event} ({image_kind}): the open failed: {err}"));
            let put = log.append(b"after the cut").unwrap();
            put.durability.wait().unwrap();
            drop(log);
            image.crash_losing_unsynced();
            let log = CommitLog::open_with_storage(
                Path::new("/log"),
                common::config(FlushDiskType::SyncFlush),
                Arc::new(image),
            )
            .unwrap_or_else(|err| panic!("event {event} ({image_kind}): the second open failed: {err}"));
            assert_eq!(&log.read(put.wrote_offset).unwrap().body[..], b"after the cut", "event {event} ({image_kind})");
        }
    }
}
