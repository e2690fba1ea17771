//! Store defects found by the whole-store model test (`tests/store_life.rs`),
//! each as the smallest sequence that shows it: what the store's docs promise,
//! checked after the shortest life that breaks it.

mod common;

use std::time::Duration;

use commitlog::FlushDiskType;
use common::{config, open};
use message_store::{GetRequest, Message, MessageStoreConfig};
use store_io::sim::SimStorage;

const WAIT: Duration = Duration::from_secs(10);

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

/// `delete_topic` is durable when it returns, but an open after a power cut
/// adds back a topic the dispatch checkpoint still names (store_life: both
/// topics made, `Reopen`, `Delete(0)`, `PowerLoss`).
#[test]
fn a_deleted_topic_stays_deleted_after_power_loss() {
    for flush in [FlushDiskType::SyncFlush, FlushDiskType::AsyncFlush] {
        let sim = SimStorage::new();
        let store = open(&sim, config(flush));
        store.create_topic("t", 1).unwrap();
        // A clean shutdown records the topic in the dispatch checkpoint.
        store.shutdown().unwrap();
        let store = open(&sim, config(flush));
        assert!(store.delete_topic("t").unwrap());
        let sim = power_loss(&sim, store);
        let store = open(&sim, config(flush));
        assert_eq!(store.topics(), Vec::<(String, u32)>::new(), "{flush:?}: the deleted topic came back");
        assert!(!store.open_report().topics_recovered, "{flush:?}: {:?}", store.open_report());
        store.shutdown().unwrap();
    }
}

/// The same through `clean_unused_topics` (`Reopen`, `CleanUnused(2)`, `PowerLoss`).
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

/// `query_by_key` returns a deleted topic's messages, also under a topic made
/// again under its name (store_life: `Put` with a key, `CleanUnused(0)`).
#[test]
fn query_by_key_finds_nothing_of_a_deleted_topic() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 1).unwrap();
    let put = store.put_message(&Message::new("t", 0, "old").with_key("k")).unwrap();
    put.durability.wait().unwrap();
    store.dispatch_now().unwrap();
    assert_eq!(store.query_by_key("t", "k", 0, u64::MAX, 10).unwrap().len(), 1);
    assert!(store.delete_topic("t").unwrap());
    let found = store.query_by_key("t", "k", 0, u64::MAX, 10).unwrap();
    assert!(found.is_empty(), "the deleted topic's message is found by its key");
    // Nor under a topic made again under its name.
    store.create_topic("t", 1).unwrap();
    let found = store.query_by_key("t", "k", 0, u64::MAX, 10).unwrap();
    assert!(found.is_empty(), "the deleted topic's message is found in the topic made again");
    store.shutdown().unwrap();
}

/// Async flush with the write-buffer pool: a put to a tailed queue indexes
/// its message before the record is readable, and a read gets `IndexMismatch`
/// (store_life: `Put`, `Put`, `Put` on one queue once a wait tailed it).
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

/// Async flush: a topic made while the log held unflushed messages, then a
/// power cut taking the log below the topic's creation offset: its later
/// puts are never dispatched (store_life: `Fill`, `Create`, `PowerLoss`, `Put`).
#[test]
fn puts_to_a_topic_made_past_what_a_power_loss_kept_are_dispatched() {
    let flush = FlushDiskType::AsyncFlush;
    let sim = SimStorage::new();
    let store = open(&sim, config(flush));
    store.create_topic("a", 1).unwrap();
    // Messages the log has not flushed: the next topic is made past them.
    for k in 0..16u32 {
        store.put_message(&Message::new("a", 0, vec![k as u8; 2000])).unwrap();
    }
    store.create_topic("b", 1).unwrap();
    // The power cut takes the unflushed messages back: the log ends below
    // where "b" was made, and "b" (its registry durable) is still there.
    let sim = power_loss(&sim, store);
    let store = open(&sim, config(flush));
    assert!(store.topics().contains(&("b".to_string(), 1)));
    let put = store.put_message(&Message::new("b", 0, "after")).unwrap();
    assert_eq!(put.queue_offset, 0);
    assert!(store.wait_for("b", 0, 0, WAIT).unwrap().arrived(), "the put is never dispatched: {:?}", store.stats());
    let got = store.get_messages(&GetRequest::new("b", 0, 0).max_bytes(u64::MAX)).unwrap();
    assert_eq!(got.messages.len(), 1);
    assert_eq!(&got.messages[0].body[..], b"after");
    store.shutdown().unwrap();
}

/// After the log's front passed the key index's last keyed message, a clean
/// reopen rebuilds the whole key index (its last item names no message)
/// (store_life: `Put` with a key, `Fill`, `Fill`, `MoveFront`, `Reopen`).
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
        assert!(store.log().delete_segments_before(store.log().max_offset(), usize::MAX).unwrap() > 0);
        store.shutdown().unwrap();
        let store = open(&sim, config(flush));
        assert!(!store.open_report().index_rebuilt, "{flush:?}: {:?}", store.open_report());
        store.shutdown().unwrap();
    }
}

/// A group whose offsets were all removed, a compaction of the offsets
/// journal, then a commit by the group: the next open fails, "refers to a
/// group or topic never named" (store_life: `Commit`, `Delete`, `CommitBurst`,
/// `Commit`, `Reopen`).
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
    assert_eq!(store.committed_offset("gone", "t", 0), Some(1));
    assert_eq!(store.committed_offset("other", "t", 0), Some(0));
    store.shutdown().unwrap();
}

/// Sync flush: a queue whose messages all went with the log's front before
/// the queue index sealed their run restarts at offset 0 after a power cut,
/// so offsets consumers were given are given again (store_life: `Fill` t0,
/// `Fill` t1, `MoveFront`, `PowerLoss`). Sealed first, its end is kept.
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
        // The log's cleaning deletes the first segment: every message of "a" expires.
        assert!(store.log().delete_segments_before(store.log().max_offset(), usize::MAX).unwrap() > 0);
        let sim = power_loss(&sim, store);
        let store = open(&sim, config(flush));
        assert_eq!(store.queue_range("a", 0).unwrap().end, 24, "sealed first: {seal}; {:?}", store.open_report());
        // So the next put does not take an offset consumers were given.
        assert_eq!(store.put_message(&Message::new("a", 0, "next")).unwrap().queue_offset, 24, "sealed first: {seal}");
        store.shutdown().unwrap();
    }
}
