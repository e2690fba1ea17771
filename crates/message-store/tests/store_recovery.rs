//! Recovery: after a power cut at any point, every acknowledged message is found
//! at its (topic, queue, offset), no entry names a missing or different record,
//! offsets are dense and go on from the end, and consume queues that ran ahead of
//! the log or lost files are made to agree with it.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use commitlog::{FlushDiskType, Storage};
use common::{config, open, read_queue, ROOT};
use message_store::{Message, MessageStore};
use parking_lot::Mutex;
use store_io::sim::SimStorage;
use test_support::Rng;

const WAIT: Duration = Duration::from_secs(10);

/// Acknowledged messages: (queue, offset, body).
type Acked = Arc<Mutex<Vec<(u32, u64, Vec<u8>)>>>;

/// Checks that `store` holds every message of `acked` at its offset, that every
/// queue reads back densely from its first offset, and that a new put goes on
/// from each queue's end.
fn check(store: &MessageStore, acked: &[(u32, u64, Vec<u8>)], queues: u32) {
    for queue in 0..queues {
        let read = read_queue(store, "t", queue);
        let std::ops::Range { start: min, end: max } = store.queue_range("t", queue).unwrap();
        assert_eq!(read.len() as u64, max - min, "queue {queue} reads densely from {min} to {max}");
        for (k, (offset, _)) in read.iter().enumerate() {
            assert_eq!(*offset, min + k as u64, "queue {queue}: offsets dense");
        }
        for (q, offset, body) in acked.iter().filter(|(q, ..)| *q == queue) {
            let found = read.iter().find(|(o, _)| o == offset);
            assert_eq!(found.map(|(_, b)| b), Some(body), "acknowledged message {q}/{offset} is found");
        }
        let next = store.put_message(&Message::new("t", queue, &b"after"[..])).unwrap();
        assert_eq!(next.queue_offset, max, "queue {queue}: the next offset is the end, never one used");
    }
}

#[test]
fn power_cuts_at_any_point_keep_every_acknowledged_message_at_its_offset() {
    for seed in 0..12u64 {
        let sim = SimStorage::new();
        let store = open(&sim, config(FlushDiskType::SyncFlush));
        store.create_topic("t", 3).unwrap();
        let acked: Acked = Arc::new(Mutex::new(Vec::new()));
        let producers: Vec<_> = (0..2u8)
            .map(|p| {
                let (store, acked) = (store.clone(), Arc::clone(&acked));
                std::thread::spawn(move || {
                    let mut rng = Rng(seed * 31 + u64::from(p));
                    for i in 0..150u32 {
                        let queue = rng.range(0, 3) as u32;
                        let key = format!("{seed}-{p}-{i}");
                        let body = key.clone().into_bytes();
                        let message = Message::new("t", queue, body.clone()).with_key(key);
                        let Ok(put) = store.put_message(&message) else { return };
                        if put.durability.wait().is_ok() {
                            acked.lock().push((queue, put.queue_offset, body));
                        }
                    }
                })
            })
            .collect();
        let mut rng = Rng(seed);
        let mut images = Vec::new();
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(rng.range(1, 15)));
            // Everything acknowledged so far was durable before this instant.
            let list = acked.lock();
            let snapshot = sim.snapshot();
            images.push((snapshot, list.clone()));
        }
        producers.into_iter().for_each(|t| t.join().unwrap());
        store.shutdown().unwrap();
        for (n, (snapshot, list)) in images.into_iter().enumerate() {
            let mut keep = Rng(seed ^ n as u64);
            let image = snapshot.crash_image(|_| keep.next() & 1 == 1);
            let reopened = open(&image, config(FlushDiskType::SyncFlush));
            check(&reopened, &list, 3);
            for (_, _, body) in &list {
                let key = String::from_utf8(body.clone()).unwrap();
                let found = reopened.query_by_key("t", &key, 0, u64::MAX, 4).unwrap();
                assert_eq!(found.len(), 1, "acknowledged key {key} is found by the index (seed {seed})");
            }
            reopened.shutdown().unwrap();
        }
    }
}

#[test]
fn the_recorded_dispatch_point_never_passes_what_a_crash_keeps_of_the_log_under_async_flush() {
    let sim = SimStorage::new();
    let mut config = config(FlushDiskType::AsyncFlush);
    config.log.flush.flush_interval_commit_log_ms = 3_600_000; // the log is never flushed in the background
    let store = open(&sim, config.clone());
    store.create_topic("t", 2).unwrap();
    for i in 0..10u8 {
        store.put_message(&Message::new("t", u32::from(i % 2), vec![i; 8])).unwrap();
    }
    store.log().flush_all().unwrap();
    for i in 10..40u8 {
        store.put_message(&Message::new("t", u32::from(i % 2), vec![i; 8])).unwrap();
    }
    assert!(store.wait_for("t", 0, 19, WAIT).unwrap().arrived() && store.wait_for("t", 1, 19, WAIT).unwrap().arrived());
    // Wait until the consume-queue service has recorded a dispatch point past
    // every message (written dispatch read them before they were durable).
    let dispatched = store.stats().dispatch_point;
    let checkpoint = Path::new(ROOT).join("config/dispatch");
    let recorded = || sim.file_bytes(&checkpoint).map_or(0, |b| u64::from_le_bytes(b[8..16].try_into().unwrap()));
    let deadline = std::time::Instant::now() + WAIT;
    while recorded() < dispatched {
        assert!(std::time::Instant::now() < deadline, "the dispatch point was not recorded within {WAIT:?}");
        std::thread::yield_now();
    }
    let snapshot = sim.snapshot();
    store.shutdown().unwrap();
    // A power cut that keeps nothing unsynced: the log was flushed before the
    // point was recorded, so it keeps every message below it.
    let image = snapshot.crash_image(|_| false);
    let reopened = open(&image, config);
    assert_eq!(reopened.open_report().rebuilt_all, None);
    for queue in 0..2 {
        assert_eq!(store_range(&reopened, queue), (0, 20), "queue {queue} keeps what was recorded");
    }
    let expected: Vec<(u32, u64, Vec<u8>)> =
        (0..40u8).map(|i| (u32::from(i % 2), u64::from(i / 2), vec![i; 8])).collect();
    check(&reopened, &expected, 2);
    reopened.shutdown().unwrap();
}

#[test]
fn a_checkpoint_or_a_queue_index_past_the_logs_end_is_rebuilt_from_the_log() {
    // A checkpoint of a longer log (as after salvaging the log's damaged tail).
    let longer = SimStorage::new();
    let store = open(&longer, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 1).unwrap();
    for i in 0..10u8 {
        store.put_message(&Message::new("t", 0, vec![i; 8])).unwrap().durability.wait().unwrap();
    }
    store.shutdown().unwrap();
    let checkpoint = Path::new(ROOT).join("config/dispatch");
    let ahead = longer.file_bytes(&checkpoint).unwrap();
    let index_dir = Path::new(ROOT).join("queueindex");
    let index_ahead: Vec<_> = longer
        .list(&index_dir)
        .unwrap()
        .into_iter()
        .map(|f| (index_dir.join(&f.name), longer.file_bytes(&index_dir.join(&f.name)).unwrap()))
        .collect();
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 1).unwrap();
    let mut expected = Vec::new();
    for i in 0..5u8 {
        let put = store.put_message(&Message::new("t", 0, vec![i; 8])).unwrap();
        put.durability.wait().unwrap();
        expected.push((0, put.queue_offset, vec![i; 8]));
    }
    store.shutdown().unwrap();
    sim.write_file(&checkpoint, &ahead);
    let reopened = open(&sim, config(FlushDiskType::SyncFlush));
    let report = reopened.open_report();
    assert!(report.index_rebuilt && report.rebuilt_all.is_none(), "the key index only: {report:?}");
    assert_eq!(store_range(&reopened, 0), (0, 5));
    reopened.shutdown().unwrap();
    for (path, bytes) in &index_ahead {
        sim.write_file(path, bytes);
    }
    let reopened = open(&sim, config(FlushDiskType::SyncFlush));
    let report = reopened.open_report();
    assert!(report.rebuilt_all.as_deref().is_some_and(|why| why.contains("past its end")), "{report:?}");
    assert_eq!(store_range(&reopened, 0), (0, 5));
    check(&reopened, &expected, 1); // the next put takes offset 5
    reopened.shutdown().unwrap();
}

fn store_range(store: &MessageStore, queue: u32) -> (u64, u64) {
    let range = store.queue_range("t", queue).unwrap();
    (range.start, range.end)
}

#[test]
fn a_queue_index_that_lost_its_files_is_rebuilt_from_the_log() {
    let sim = SimStorage::new();
    let config = {
        let mut config = config(FlushDiskType::SyncFlush);
        config.flush_consume_queue_thorough_interval_ms = 3_600_000;
        config
    };
    let mut store = open(&sim, config.clone());
    store.create_topic("t", 1).unwrap();
    let mut expected = Vec::new();
    for i in 0..30u8 {
        if i == 25 {
            // A clean restart records the dispatch point past the first 25.
            store.shutdown().unwrap();
            store = open(&sim, config.clone());
        }
        let put = store.put_message(&Message::new("t", 0, vec![i; 4])).unwrap();
        put.durability.wait().unwrap();
        expected.push((0, put.queue_offset, vec![i; 4]));
    }
    let snapshot = sim.snapshot();
    store.shutdown().unwrap();
    let image = snapshot.crash_image(|_| true);
    let dir = Path::new(ROOT).join("queueindex");
    let files = image.list(&dir).unwrap();
    assert!(!files.is_empty(), "the clean restart sealed a run: {files:?}");
    for file in files {
        image.remove(&dir.join(file.name)).unwrap();
    }
    let reopened = open(&image, config);
    assert_eq!(reopened.open_report().recovered_from, 0, "the whole log dispatched again");
    assert_eq!(reopened.open_report().redispatched, 30);
    assert_eq!(reopened.stats().dispatch_rounds, 0, "open's replay is no round of the dispatch service");
    check(&reopened, &expected, 1);
    reopened.shutdown().unwrap();
}

#[test]
fn a_clean_reopen_on_a_real_disk_dispatches_nothing_again() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(FlushDiskType::SyncFlush);
    let store = MessageStore::open(dir.path(), config.clone()).unwrap();
    store.create_topic("t", 2).unwrap();
    let mut expected = Vec::new();
    for i in 0..20u8 {
        let put = store.put_message(&Message::new("t", u32::from(i % 2), vec![i; 16])).unwrap();
        put.durability.wait().unwrap();
        expected.push((u32::from(i % 2), put.queue_offset, vec![i; 16]));
    }
    store.commit_offset("g", "t", 0, 4).unwrap_or_else(|_| {
        // Not dispatched yet: wait, then commit.
        assert!(store.wait_for("t", 0, 3, WAIT).unwrap().arrived());
        store.commit_offset("g", "t", 0, 4).unwrap();
    });
    store.shutdown().unwrap();
    let reopened = MessageStore::open(dir.path(), config.clone()).unwrap();
    assert_eq!(reopened.open_report().redispatched, 0, "the point was recorded at shutdown");
    assert_eq!(reopened.committed_offset("g", "t", 0).unwrap(), Some(4));
    check(&reopened, &expected, 2);
    // Dropped without shutdown: the last handle shuts it down.
    drop(reopened);
    let again = MessageStore::open(dir.path(), config).unwrap();
    assert_eq!(again.queue_range("t", 0).unwrap(), 0..11);
    again.shutdown().unwrap();
}

#[test]
fn a_clean_open_whose_log_recovery_cut_a_record_lowers_offsets_past_the_queues_end() {
    // RocketMQ's `testRecoverDamagedCommitLogNormalShutdown`: a clean shutdown,
    // then the log's checkpoint lost and its last record damaged (cut by the
    // log's recovery) or zeroed (gone without a cut: the queue index is ahead).
    for damage in ["a byte flipped", "zeroed"] {
        let sim = SimStorage::new();
        let store = open(&sim, config(FlushDiskType::SyncFlush));
        store.create_topic("t", 1).unwrap();
        let (mut last, mut size) = (0, 0);
        for i in 0..3u8 {
            let put = store.put_message(&Message::new("t", 0, vec![i; 8])).unwrap();
            put.durability.wait().unwrap();
            last = put.log_offset;
            size = store.log().max_offset() - last;
        }
        assert!(store.wait_for("t", 0, 2, WAIT).unwrap().arrived());
        store.commit_offset("g", "t", 0, 3).unwrap();
        store.shutdown().unwrap();
        sim.remove(&Path::new(ROOT).join(commitlog::CHECKPOINT_FILE)).unwrap();
        let segment = Path::new(ROOT).join(commitlog::SEGMENT_DIR).join(format!("{:020}", 0));
        let at = usize::try_from(last).unwrap();
        if damage == "zeroed" {
            assert!(sim.patch_file(&segment, at, &vec![0; usize::try_from(size).unwrap()]));
        } else {
            let at = at + commitlog::format::HEADER_SIZE + 1;
            let byte = sim.file_bytes(&segment).unwrap()[at];
            assert!(sim.patch_file(&segment, at, &[!byte]));
        }

        let reopened = open(&sim, config(FlushDiskType::SyncFlush));
        let recovery = reopened.log().recovery_report().clone();
        assert!(recovery.clean_shutdown && recovery.end_offset == last, "{damage}: {recovery:?}");
        assert_eq!(recovery.cut_anything(), damage != "zeroed", "{damage}: {recovery:?}");
        assert_eq!(store_range(&reopened, 0), (0, 2), "{damage}: the damaged record is gone");
        assert_eq!(reopened.open_report().offsets_lowered, 1, "{damage}");
        assert_eq!(reopened.committed_offset("g", "t", 0).unwrap(), Some(2), "{damage}: lowered to the queue's end");
        let put = reopened.put_message(&Message::new("t", 0, &b"after"[..])).unwrap();
        assert_eq!(put.queue_offset, 2, "{damage}");
        put.durability.wait().unwrap();
        assert!(reopened.wait_for("t", 0, 2, WAIT).unwrap().arrived());
        let got = reopened.get_messages(&message_store::GetRequest::new("t", 0, 2).max_count(4)).unwrap();
        assert_eq!(got.messages.len(), 1, "{damage}: the group's next message is the new one");
        assert_eq!(&got.messages[0].body[..], b"after", "{damage}");
        reopened.shutdown().unwrap();
    }
}
