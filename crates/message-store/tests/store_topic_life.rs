//! A topic's life beside crashes: made, deleted and made again under its
//! name, with a power cut between the store's records (the registry, the
//! dispatch checkpoint, the log's unflushed tail) — the topic a crash must not
//! bring back, the puts a crash must not hide, the keys a deletion must hide.

mod common;

use std::time::Duration;

use commitlog::FlushDiskType;
use common::{config, open, read_queue};
use message_store::{Message, MessageStoreConfig, StoreError};
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
