//! The store's own records beside crashes: topics made, deleted and made
//! again under their name, with a power cut between the store's records (the
//! registry, the dispatch checkpoint, the offsets journal, the queue index,
//! the key index, the log's unflushed tail) — the topic a crash must not bring
//! back, the puts a crash must not hide, the keys a deletion must hide, the
//! offsets a compaction must keep readable, the ends an expiry must keep. The
//! shortest lives that broke them (several first found by `store_life.rs`).

mod common;

use std::time::Duration;

use commitlog::FlushDiskType;
use common::{config, open, read_queue};
use message_store::{GetRequest, Message, MessageStoreConfig, StoreError};
use store_io::sim::SimStorage;

const WAIT: Duration = Duration::from_secs(10);

/// Async flush with nothing flushed or recorded in the background: what is
/// durable is what a test (or the store's own open and admin calls) made so.
fn quiet_async() -> MessageStoreConfig {
    let mut config = config(FlushDiskType::AsyncFlush);
    config.log.flush.flush_interval_commit_log_ms = 3_600_000;
    config.flush_interval_consume_queue_ms = 3_600_000;
    config.flush_consume_queue_thorough_interval_ms = 3_600_000;
    config
}

#[test]
fn puts_after_a_power_cut_reach_a_topic_made_past_the_durable_log() {
    // The topic's creation point is the log's end when it was made, which
    // under async flush lies past what a power cut keeps: the registry must
    // not keep a point the log no longer reaches, or every later put to the
    // topic falls below it and is skipped by dispatch.
    let sim = SimStorage::new();
    let store = open(&sim, quiet_async());
    store.create_topic("a", 1).unwrap();
    for i in 0..20u8 {
        store.put_message(&Message::new("a", 0, vec![i; 64])).unwrap();
    }
    store.create_topic("t", 1).unwrap();
    let snapshot = sim.snapshot();
    store.shutdown().unwrap();
    let image = snapshot.crash_image(|_| false);
    let reopened = open(&image, quiet_async());
    assert!(reopened.log().max_offset() < 20 * 64, "the power cut took the unflushed puts back");
    for i in 0..3u8 {
        let put = reopened.put_message(&Message::new("t", 0, vec![i; 8])).unwrap();
        assert_eq!(put.queue_offset, u64::from(i));
    }
    reopened.log().flush_all().unwrap();
    assert!(reopened.wait_for("t", 0, 2, WAIT).unwrap().arrived(), "the puts reach the topic's queue");
    assert_eq!(reopened.stats().records_skipped, 0);
    let read: Vec<(u64, Vec<u8>)> = read_queue(&reopened, "t", 0);
    assert_eq!(read, (0..3u8).map(|i| (u64::from(i), vec![i; 8])).collect::<Vec<_>>());
    reopened.shutdown().unwrap();
    // And on every later open.
    let again = open(&image, quiet_async());
    assert_eq!(again.queue_range("t", 0).unwrap(), 0..3);
    again.shutdown().unwrap();
}

#[test]
fn a_deleted_topic_stays_deleted_after_a_crash_before_the_next_checkpoint() {
    let sim = SimStorage::new();
    let store = open(&sim, quiet_async());
    store.create_topic("t", 2).unwrap();
    store.create_topic("kept", 1).unwrap();
    for i in 0..10u8 {
        store.put_message(&Message::new("t", u32::from(i % 2), vec![i; 8]).with_key(format!("k{i}"))).unwrap();
        store.put_message(&Message::new("kept", 0, vec![i; 8])).unwrap();
    }
    // Sealed and recorded: the checkpoint names the topic.
    store.seal_index().unwrap();
    store.shutdown().unwrap();
    let store = open(&sim, quiet_async());
    assert!(store.delete_topic("t").unwrap());
    let snapshot = sim.snapshot();
    store.shutdown().unwrap();
    for keep_unsynced in [false, true] {
        let image = snapshot.crash_image(|_| keep_unsynced);
        let reopened = open(&image, quiet_async());
        let topics: Vec<String> = reopened.topics().into_iter().map(|(t, _)| t).collect();
        assert_eq!(topics, vec!["kept".to_string()], "the deleted topic is not back");
        assert!(matches!(reopened.queue_range("t", 0), Err(StoreError::UnknownTopic { .. })));
        assert_eq!(reopened.stats().indexed_queues, 1, "the deleted topic's queues are not in the index");
        assert_eq!(reopened.queue_range("kept", 0).unwrap(), 0..10);
        // Made again, it starts empty.
        reopened.create_topic("t", 2).unwrap();
        assert_eq!(reopened.queue_range("t", 0).unwrap(), 0..0);
        assert!(reopened.query_by_key("t", "k0", 0, u64::MAX, 8).unwrap().is_empty());
        reopened.shutdown().unwrap();
    }
}

#[test]
fn a_deleted_topics_keys_are_never_found_again_nor_as_a_new_topics() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 1).unwrap();
    for i in 0..5u8 {
        store.put_message(&Message::new("t", 0, vec![i; 8]).with_key("k")).unwrap().durability.wait().unwrap();
    }
    store.dispatch_now().unwrap();
    assert_eq!(store.query_by_key("t", "k", 0, u64::MAX, 16).unwrap().len(), 5);
    assert!(store.delete_topic("t").unwrap());
    assert!(
        matches!(store.query_by_key("t", "k", 0, u64::MAX, 16), Err(StoreError::UnknownTopic { .. })),
        "a deleted topic has no keys to find"
    );
    store.create_topic("t", 1).unwrap();
    store.put_message(&Message::new("t", 0, &b"new"[..]).with_key("k")).unwrap().durability.wait().unwrap();
    store.dispatch_now().unwrap();
    let found = store.query_by_key("t", "k", 0, u64::MAX, 16).unwrap();
    let bodies: Vec<&[u8]> = found.iter().map(|m| &m.body[..]).collect();
    assert_eq!(bodies, vec![&b"new"[..]], "only the new topic's message");
    store.shutdown().unwrap();
    let reopened = open(&sim, config(FlushDiskType::SyncFlush));
    assert_eq!(reopened.query_by_key("t", "k", 0, u64::MAX, 16).unwrap().len(), 1, "after a reopen too");
    reopened.shutdown().unwrap();
}

/// [`common::config`] with the log's write-buffer pool on.
fn with_pool(flush: FlushDiskType) -> MessageStoreConfig {
    let mut config = config(flush);
    config.log.transient_store_pool_enable = true;
    config.log.transient_store_pool_size = 4;
    config
}

/// A power cut keeping only what was synced, on the store `store` open on
/// `sim`: returns the storage as the power cut left it.
fn power_loss(sim: &SimStorage, store: message_store::MessageStore) -> SimStorage {
    let snapshot = sim.snapshot();
    store.shutdown().unwrap();
    snapshot.crash_image(|_| false)
}

/// A topic deleted through `clean_unused_topics` stays deleted after a power
/// cut too (store_life: `Reopen`, `CleanUnused(2)`, `PowerLoss`).
#[test]
fn a_topic_cleaned_as_unused_stays_deleted_after_power_loss() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 1).unwrap();
    store.shutdown().unwrap();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    assert_eq!(store.clean_unused_topics(&[]).unwrap(), vec!["t".to_string()]);
    let sim = power_loss(&sim, store);
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    assert_eq!(store.topics(), Vec::<(String, u32)>::new(), "the cleaned topic came back");
    store.shutdown().unwrap();
}

/// Async flush with the write-buffer pool: a put to a tailed queue does not
/// index its message before the record is readable, so a read right after
/// never gets `IndexMismatch` (store_life: `Put`, `Put`, `Put` on one queue
/// once a wait tailed it).
#[test]
fn a_tailed_queue_reads_back_its_puts_with_the_write_buffer_pool() {
    let sim = SimStorage::new();
    let store = open(&sim, with_pool(FlushDiskType::AsyncFlush));
    store.create_topic("t", 1).unwrap();
    store.put_message(&Message::new("t", 0, "first")).unwrap();
    // A consumer waits for it: the queue is tailed from now on, and its
    // puts index their own messages.
    assert!(store.wait_for("t", 0, 0, WAIT).unwrap().arrived());
    for k in 1..20u64 {
        let put = store.put_message(&Message::new("t", 0, format!("m{k}"))).unwrap();
        assert_eq!(put.queue_offset, k);
        let got = store.get_messages(&GetRequest::new("t", 0, k).max_count(1).max_bytes(u64::MAX));
        match got {
            Ok(got) => assert!(got.messages.iter().all(|m| m.body[..] == *format!("m{k}").as_bytes())),
            Err(err) => panic!("offset {k}: {err}"),
        }
    }
    store.shutdown().unwrap();
}

/// After the log's front passed the key index's last keyed message, a clean
/// reopen keeps the key index (its last item names a record the log no
/// longer holds, which is no damage) (store_life: `Put` with a key, `Fill`,
/// `Fill`, `MoveFront`, `Reopen`).
#[test]
fn a_clean_reopen_keeps_the_key_index_after_the_log_front_passed_its_last_key() {
    for flush in [FlushDiskType::SyncFlush, FlushDiskType::AsyncFlush] {
        let sim = SimStorage::new();
        let store = open(&sim, config(flush));
        store.create_topic("t", 1).unwrap();
        store.put_message(&Message::new("t", 0, "keyed").with_key("k")).unwrap().durability.wait().unwrap();
        // Two 64 KiB segments of messages without keys, then the log's
        // cleaning deletes the first: the keyed message goes with it.
        for _ in 0..2 {
            let batch: Vec<Message> = (0..16).map(|_| Message::new("t", 0, vec![7u8; 2000])).collect();
            store.put_messages(&batch).unwrap().durability.wait().unwrap();
        }
        store.log().flush_all().unwrap();
        store.dispatch_now().unwrap();
        store.seal_index().unwrap(); // the log deletes only what the queue index sealed
        assert!(store.log().delete_segments_before(store.log().max_offset(), usize::MAX).unwrap() > 0);
        store.shutdown().unwrap();
        let store = open(&sim, config(flush));
        assert!(!store.open_report().index_rebuilt, "{flush:?}: {:?}", store.open_report());
        store.shutdown().unwrap();
    }
}

/// A group whose offsets were all removed, a compaction of the offsets
/// journal, then a commit by the group: the next open reads the journal (it
/// failed with "refers to a group or topic never named" when the compaction
/// kept the group's id in memory) (store_life: `Commit`, `Delete`,
/// `CommitBurst`, `Commit`, `Reopen`).
#[test]
fn offsets_committed_after_a_compaction_that_followed_a_removal_reopen() {
    let flush = FlushDiskType::SyncFlush;
    let sim = SimStorage::new();
    let store = open(&sim, config(flush));
    store.create_topic("t", 1).unwrap();
    store.put_message(&Message::new("t", 0, "m")).unwrap().durability.wait().unwrap();
    assert!(store.wait_for("t", 0, 0, WAIT).unwrap().arrived());
    // "gone" names itself in the journal, then loses its only offset.
    store.commit_offset("gone", "t", 0, 1).unwrap();
    assert_eq!(store.remove_consumer_offsets("gone", None).unwrap(), 1);
    // Enough commits to overflow the 64 KiB journal: the offsets are
    // compacted into a new generation (no offset of "gone" in its snapshot).
    let burst: Vec<(&str, u32, u64)> = (0..2400u64).map(|i| ("t", 0, 1 - i % 2)).collect();
    store.commit_offsets("other", &burst).unwrap();
    // "gone" commits again.
    store.commit_offset("gone", "t", 0, 1).unwrap();
    store.shutdown().unwrap();
    let store = match message_store::MessageStore::open_with_storage(
        common::ROOT,
        config(flush),
        std::sync::Arc::new(sim.clone()),
    ) {
        Ok(store) => store,
        Err(err) => panic!("the store does not open: {err}"),
    };
    assert_eq!(store.committed_offset("gone", "t", 0).unwrap(), Some(1));
    assert_eq!(store.committed_offset("other", "t", 0).unwrap(), Some(0));
    store.shutdown().unwrap();
}

/// Sync flush: the log keeps the segments whose queue-index entries are not
/// sealed yet, so a queue whose messages all go with the log's front keeps
/// its end through a power cut (were they deleted first, it restarted at 0
/// and offsets consumers were given were given again) (store_life: `Fill`
/// t0, `Fill` t1, `MoveFront`, `PowerLoss`).
#[test]
fn a_queue_whose_messages_all_expired_keeps_its_end_after_power_loss() {
    for seal in [true, false] {
        let flush = FlushDiskType::SyncFlush;
        let sim = SimStorage::new();
        let store = open(&sim, config(flush));
        store.create_topic("a", 1).unwrap();
        store.create_topic("b", 1).unwrap();
        // Three quarters of a segment each: "a"'s messages fill the first
        // segment, "b"'s go to the second.
        for topic in ["a", "b"] {
            let batch: Vec<Message> = (0..24).map(|_| Message::new(topic, 0, vec![7u8; 2000])).collect();
            store.put_messages(&batch).unwrap().durability.wait().unwrap();
        }
        if seal {
            store.dispatch_now().unwrap();
            store.seal_index().unwrap();
        }
        // The log's cleaning deletes the first segment once the queue index
        // sealed its entries: every message of "a" expires.
        let deleted = store.log().delete_segments_before(store.log().max_offset(), usize::MAX).unwrap();
        assert_eq!(deleted > 0, seal, "the log keeps the segments of unsealed entries");
        let sim = power_loss(&sim, store);
        let store = open(&sim, config(flush));
        assert_eq!(store.queue_range("a", 0).unwrap().end, 24, "sealed first: {seal}; {:?}", store.open_report());
        assert_eq!(store.queue_range("a", 0).unwrap().start, if seal { 24 } else { 0 });
        // So the next put does not take an offset consumers were given.
        assert_eq!(store.put_message(&Message::new("a", 0, "next")).unwrap().queue_offset, 24, "sealed first: {seal}");
        store.shutdown().unwrap();
    }
}

/// A power cut at any storage event inside `delete_topic` (the registry
/// written, the queue table, the offsets journal's removal): a topic made
/// again under the name never starts with the deleted topic's offsets (the
/// open removes the offsets of topics the registry no longer has).
#[test]
fn a_crash_inside_delete_topic_never_gives_a_topic_made_again_the_old_offsets() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 1).unwrap();
    for i in 0..4u8 {
        store.put_message(&Message::new("t", 0, vec![i; 16])).unwrap().durability.wait().unwrap();
    }
    store.dispatch_now().unwrap();
    store.commit_offset("g", "t", 0, 3).unwrap();
    let (sink, snapshots) = std::sync::mpsc::sync_channel(100_000);
    sim.set_snapshot_sink(Some(sink));
    assert!(store.delete_topic("t").unwrap());
    sim.set_snapshot_sink(None);
    store.shutdown().unwrap();
    let snapshots: Vec<_> = snapshots.try_iter().collect();
    assert!(!snapshots.is_empty());
    let mut bad = Vec::new();
    for snapshot in &snapshots {
        let reopened = open(&snapshot.crash_image(|_| false), config(FlushDiskType::SyncFlush));
        if reopened.topics().iter().all(|(t, _)| t != "t") {
            reopened.create_topic("t", 1).unwrap();
            if let Some(offset) = reopened.committed_offset("g", "t", 0).unwrap() {
                bad.push((snapshot.event, offset));
            }
        }
        reopened.shutdown().unwrap();
    }
    assert!(bad.is_empty(), "crash states (event, offset) giving the topic made again the old offset: {bad:?}");
}

/// A store whose topic "busy" the dispatch checkpoint names (offset 1
/// committed) and whose topic "idle" (two queues, offset 0 committed on its
/// second queue) was made after it, with no message; then a power cut, and
/// the registry overwritten with bytes it cannot read.
fn registry_lost_after_a_topic_only_offsets_name() -> SimStorage {
    let sim = SimStorage::new();
    let store = open(&sim, quiet_async());
    store.create_topic("busy", 1).unwrap();
    store.put_message(&Message::new("busy", 0, vec![1; 16])).unwrap();
    store.shutdown().unwrap();
    let store = open(&sim, quiet_async());
    store.create_topic("idle", 2).unwrap();
    store.commit_offset("g", "busy", 0, 1).unwrap();
    store.commit_offset("g", "idle", 1, 0).unwrap();
    let sim = power_loss(&sim, store);
    let registry = std::path::Path::new(common::ROOT).join("config/topics");
    let len = sim.file_bytes(&registry).expect("the registry").len();
    sim.write_file(&registry, &vec![0x5A; len]);
    sim
}

/// A damaged topic registry is recovered from the dispatch checkpoint and the
/// log, which know only the topics made before the checkpoint or with a
/// message in the log: a topic made after, with no message yet, is known by
/// its committed offsets alone. They are kept, through this open and the
/// next (whose registry is whole again), the topic made again from them.
/// Found by `store_bad_bytes.rs`: the open removed them as a deleted topic's.
#[test]
fn offsets_of_a_topic_a_damaged_registry_cannot_recover_are_kept() {
    let sim = registry_lost_after_a_topic_only_offsets_name();
    for open_kind in ["the open that recovers the registry", "the next open"] {
        let store = open(&sim, quiet_async());
        assert_eq!(store.committed_offset("g", "busy", 0).unwrap(), Some(1), "{open_kind}");
        assert_eq!(
            store.committed_offset("g", "idle", 1).unwrap(),
            Some(0),
            "{open_kind}: the offset of a topic the registry lost"
        );
        assert!(
            store.topics().iter().any(|(t, queues)| t == "idle" && *queues >= 2),
            "{open_kind}: {:?}",
            store.topics()
        );
        store.shutdown().unwrap();
    }
}

/// As `offsets_of_a_topic_a_damaged_registry_cannot_recover_are_kept`, with a
/// power cut at every storage event of the open that recovers the registry:
/// the recovered registry is written once, with the topics only offsets name
/// (an earlier open wrote it without them first, and made them again only at
/// its end: a cut between the two left a registry read whole that lacked
/// "idle", and the next open removed its offsets as a deleted topic's).
#[test]
fn a_power_cut_inside_the_recovering_open_keeps_the_offsets_of_a_topic_the_registry_lost() {
    let sim = registry_lost_after_a_topic_only_offsets_name();
    let (tx, rx) = std::sync::mpsc::sync_channel(1 << 20);
    sim.set_snapshot_sink(Some(tx));
    let store = open(&sim, quiet_async());
    sim.set_snapshot_sink(None);
    assert_eq!(store.committed_offset("g", "idle", 1).unwrap(), Some(0), "the open without a cut");
    store.shutdown().unwrap();
    let snapshots: Vec<_> = rx.try_iter().collect();
    let mut lost = Vec::new();
    for (event, snapshot) in snapshots.iter().enumerate() {
        let image = snapshot.crash_image(|_| false);
        let storage: std::sync::Arc<dyn commitlog::Storage> = std::sync::Arc::new(image.clone());
        let store = message_store::MessageStore::open_with_storage(common::ROOT, quiet_async(), storage)
            .unwrap_or_else(|err| panic!("event {event}: {err}"));
        if store.committed_offset("g", "idle", 1).unwrap() != Some(0) {
            lost.push((event, store.topics()));
        }
        store.shutdown().unwrap();
    }
    assert!(
        lost.is_empty(),
        "of {} events, cuts after which the offsets of \"idle\" were gone: {lost:?}",
        snapshots.len()
    );
}
