//! The store's API as a program uses it: the configuration builder, commits
//! right after puts, RocketMQ's admin operations (offset resets, cleaning of
//! unused topics, message-count estimates, residency), and the lock a
//! message's body holds.

mod common;

use std::time::Duration;

use commitlog::{CommitLogConfig, FlushDiskType};
use common::{config, open};
use message_store::{
    CommittedOffset, GetRequest, Message, MessageLimits, MessageStore, MessageStoreConfig, ResetTo, StoreError,
    TagFilter, Waited,
};
use store_io::sim::SimStorage;

#[test]
fn the_builder_derives_limits_from_the_log_and_checks_what_it_builds() {
    let small = CommitLogConfig::builder().mapped_file_size_commit_log(1 << 20).build().unwrap();
    let config = MessageStoreConfig::builder().log(small.clone()).auto_create_topics(true).build().unwrap();
    assert!(config.auto_create_topics);
    assert_eq!(config.limits, MessageLimits::within(256 << 10), "limits within the log's records");
    let bad = MessageStoreConfig::builder().log(small.clone()).default_topic_queue_nums(0).build();
    assert!(matches!(bad, Err(StoreError::InvalidConfig { .. })), "{bad:?}");
    let too_large = MessageStoreConfig::builder().log(small).limits(MessageLimits::within(4 << 20)).build();
    assert!(matches!(too_large, Err(StoreError::InvalidConfig { .. })), "limits set explicitly are checked");
    let long_nap = MessageStoreConfig::builder().dispatch_nap_us(100_001).build();
    assert!(
        matches!(&long_nap, Err(StoreError::InvalidConfig { reason }) if reason.contains("dispatch_nap_us")),
        "a nap longer than dispatch's idle wait: {long_nap:?}"
    );
    let long_tailed_nap = MessageStoreConfig::builder().dispatch_tailed_nap_us(100_001).build();
    assert!(
        matches!(&long_tailed_nap, Err(StoreError::InvalidConfig { reason }) if reason.contains("dispatch_tailed_nap_us")),
        "a nap longer than dispatch's idle wait: {long_tailed_nap:?}"
    );
    let default = MessageStoreConfig::default();
    assert_eq!(default.dispatch_nap_us, 0, "naps off by default");
    assert_eq!(default.dispatch_tailed_nap_us, 0, "naps after tailed queues' rounds off by default");
    assert_eq!(default.log.mapped_file_size_commit_log, CommitLogConfig::DEFAULT_SEGMENT_SIZE);
    default.validate().unwrap();
}

#[test]
fn a_commit_right_after_a_durable_put_waits_for_dispatch_instead_of_failing() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 2).unwrap();
    for i in 0..200u64 {
        let put = store.put_message(&Message::new("t", (i % 2) as u32, format!("m{i}"))).unwrap();
        put.durability.wait().unwrap();
        store.commit_offset("g", "t", (i % 2) as u32, put.queue_offset + 1).unwrap_or_else(|e| panic!("put {i}: {e}"));
    }
    assert_eq!(store.committed_offset("g", "t", 0).unwrap(), Some(100));
    // Past what was put it is still refused, at once.
    let refused = store.commit_offset("g", "t", 0, 102);
    assert!(matches!(refused, Err(StoreError::OffsetBeyondQueue { offset: 102, max: 100, .. })), "{refused:?}");
    store.shutdown().unwrap();
}

#[test]
fn offsets_reset_to_each_end_an_offset_or_a_time_with_one_sync() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 2).unwrap();
    let mut times = Vec::new();
    for i in 0..10u32 {
        let put = store.put_message(&Message::new("t", 0, format!("m{i}"))).unwrap();
        put.durability.wait().unwrap();
        times.push(put.store_timestamp_ms);
        std::thread::sleep(Duration::from_millis(2));
    }
    store.wait_for("t", 0, 9, Duration::from_secs(10)).unwrap();
    let latest = store.reset_consumer_offsets("g", "t", None, ResetTo::Latest).unwrap();
    assert_eq!(latest, vec![(0, 10), (1, 0)]);
    let syncs = store.stats().consumer_offset_syncs;
    assert_eq!(store.reset_consumer_offsets("g", "t", None, ResetTo::Earliest).unwrap(), vec![(0, 0), (1, 0)]);
    assert_eq!(store.stats().consumer_offset_syncs, syncs + 1, "every queue in one sync");
    assert_eq!(store.reset_consumer_offsets("g", "t", Some(0), ResetTo::Offset(99)).unwrap(), vec![(0, 10)], "clamped");
    let at = store.reset_consumer_offsets("g", "t", Some(0), ResetTo::Time(times[4])).unwrap();
    assert!(at[0].1 <= 4 && times[at[0].1 as usize] >= times[4], "{at:?}");
    assert_eq!(store.committed_offset("g", "t", 0).unwrap(), Some(at[0].1));
    assert!(matches!(
        store.reset_consumer_offsets("g", "t", Some(2), ResetTo::Earliest),
        Err(StoreError::UnknownQueue { .. })
    ));
    assert!(matches!(
        store.reset_consumer_offsets("g", "nope", None, ResetTo::Earliest),
        Err(StoreError::UnknownTopic { .. })
    ));
    let mut offsets = store.committed_offsets();
    offsets.sort_by_key(|o| o.queue_id);
    assert_eq!(
        offsets.iter().map(|o: &CommittedOffset| (o.queue_id, o.offset)).collect::<Vec<_>>(),
        [(0, at[0].1), (1, 0)]
    );
    store.shutdown().unwrap();
}

#[test]
fn cleaning_unused_topics_deletes_all_but_the_retained() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    for topic in ["keep", "old", "older"] {
        store.create_topic(topic, 1).unwrap();
        store.put_message(&Message::new(topic, 0, "x")).unwrap().durability.wait().unwrap();
    }
    let mut deleted = store.clean_unused_topics(&["keep"]).unwrap();
    deleted.sort();
    assert_eq!(deleted, ["old", "older"]);
    assert_eq!(store.topics(), [("keep".to_string(), 1)]);
    assert!(matches!(store.queue_range("old", 0), Err(StoreError::UnknownTopic { .. })));
    assert!(store.clean_unused_topics(&["keep"]).unwrap().is_empty());
    store.shutdown().unwrap();
}

#[test]
fn message_counts_are_exact_for_all_and_estimated_by_tag() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 1).unwrap();
    for i in 0..100u32 {
        let tag = if i % 4 == 0 { "a" } else { "b" };
        store.put_message(&Message::new("t", 0, format!("m{i}")).with_tags(tag)).unwrap().durability.wait().unwrap();
    }
    store.wait_for("t", 0, 99, Duration::from_secs(10)).unwrap();
    assert_eq!(store.estimate_message_count("t", 0, 0, 100, &TagFilter::All).unwrap(), 100);
    assert_eq!(store.estimate_message_count("t", 0, 90, 1000, &TagFilter::All).unwrap(), 10, "clamped to the end");
    assert_eq!(store.estimate_message_count("t", 0, 0, 100, &TagFilter::parse("a").unwrap()).unwrap(), 25);
    assert_eq!(store.estimate_message_count("t", 0, 0, 100, &TagFilter::parse("a || b").unwrap()).unwrap(), 100);
    assert_eq!(store.estimate_message_count("t", 0, 50, 50, &TagFilter::parse("a").unwrap()).unwrap(), 0);
    store.shutdown().unwrap();
}

#[test]
fn residency_is_asked_of_the_log_for_the_queue_entries() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLogConfig::builder()
        .mapped_file_size_commit_log(1 << 20)
        .flush_disk_type(FlushDiskType::SyncFlush)
        .build()
        .unwrap();
    let store = MessageStore::open(dir.path(), MessageStoreConfig::builder().log(log).build().unwrap()).unwrap();
    store.create_topic("t", 1).unwrap();
    for i in 0..4 {
        store.put_message(&Message::new("t", 0, format!("m{i}"))).unwrap().durability.wait().unwrap();
    }
    store.wait_for("t", 0, 3, Duration::from_secs(10)).unwrap();
    assert!(store.check_in_mem_by_consume_offset("t", 0, 0, 4).unwrap(), "just written: in the page cache");
    assert!(!store.check_in_mem_by_consume_offset("t", 0, 4, 1).unwrap(), "an offset the queue does not hold");
    assert!(matches!(store.check_in_mem_by_consume_offset("u", 0, 0, 1), Err(StoreError::UnknownTopic { .. })));
    store.shutdown().unwrap();
}

#[test]
fn a_body_holds_the_store_lock_past_shutdown_until_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let config = || {
        let log = CommitLogConfig::builder().mapped_file_size_commit_log(1 << 20).build().unwrap();
        MessageStoreConfig::builder().log(log).build().unwrap()
    };
    let store = MessageStore::open(dir.path(), config()).unwrap();
    store.create_topic("t", 1).unwrap();
    store.put_message(&Message::new("t", 0, "kept")).unwrap();
    assert_eq!(store.wait_for("t", 0, 0, Duration::from_secs(10)).unwrap(), Waited::Arrived);
    let got = store.get_messages(&GetRequest::new("t", 0, 0)).unwrap();
    let owned = got.messages[0].clone().into_owned();
    store.shutdown().unwrap();
    drop(store);
    let locked = MessageStore::open(dir.path(), config());
    let Err(StoreError::Locked { holder: message_store::LockHolder::ThisProcess, dir: locked_dir }) = &locked else {
        panic!("the body's view still maps the log: {locked:?}");
    };
    assert!(locked_dir.starts_with(dir.path()), "{locked_dir:?}");
    let said = locked.as_ref().unwrap_err().to_string();
    assert!(said.contains("StoredMessage::body") && !said.contains("Record::body"), "in the store's terms: {said}");
    drop(got);
    let reopened = MessageStore::open(dir.path(), config()).expect("the lock goes with the last view");
    assert_eq!(&owned.body[..], b"kept", "a copied body outlives the store");
    reopened.shutdown().unwrap();
}

/// A store's user meets one error type: what a put's durability wait returns
/// converts into `StoreError` with `?`, a log error about the lock or a
/// durability wait arrives one level deep, and a query that can fail says so.
#[test]
fn errors_of_every_layer_convert_into_store_error_one_level_deep() {
    use message_store::{FlushError, NameError};
    let durability: StoreError = FlushError::Timeout { offset: 7, timeout_ms: 5 }.into();
    assert!(matches!(durability, StoreError::Durability(FlushError::Timeout { offset: 7, .. })), "{durability:?}");
    let via_log: StoreError = commitlog::Error::Durability(FlushError::Timeout { offset: 7, timeout_ms: 5 }).into();
    assert!(matches!(via_log, StoreError::Durability(FlushError::Timeout { offset: 7, .. })), "{via_log:?}");
    fn put_and_wait(store: &MessageStore) -> Result<u64, StoreError> {
        let put = store.put_message(&Message::new("t", 0, "x"))?;
        put.durability.wait()?; // FlushError into StoreError
        Ok(put.queue_offset)
    }
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 1).unwrap();
    assert_eq!(put_and_wait(&store).unwrap(), 0);
    assert_eq!(store.committed_offset("g", "t", 0).unwrap(), None);
    store.commit_offset("g", "t", 0, 1).unwrap();
    assert_eq!(store.committed_offset("g", "t", 0).unwrap(), Some(1));
    let bad = store.committed_offset("bad group", "t", 0);
    assert!(matches!(bad, Err(StoreError::Name(NameError::BadCharacter { .. }))), "{bad:?}");
    store.shutdown().unwrap();
    assert!(matches!(store.committed_offset("g", "t", 0), Err(StoreError::Shutdown)));
}

/// A reset planned first changes nothing and says where each queue goes and
/// what was clamped; `ShiftBy` moves from the committed offset; a message is
/// found by its log offset.
#[test]
fn a_reset_is_planned_before_it_is_applied_and_a_message_is_found_by_its_log_offset() {
    use message_store::ResetTo;
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 1).unwrap();
    let mut at = Vec::new();
    for i in 0..5u32 {
        let put = store.put_message(&Message::new("t", 0, format!("m{i}"))).unwrap();
        put.durability.wait().unwrap();
        at.push(put.log_offset);
    }
    // Durable is not yet dispatched: the queue's end is what dispatch reached.
    store.dispatch_now().unwrap();
    store.commit_offset("g", "t", 0, 3).unwrap();
    let plan = store.plan_offsets_reset("g", "t", None, ResetTo::Offset(9)).unwrap();
    assert_eq!((plan[0].current, plan[0].offset, plan[0].clamped_from), (Some(3), 5, Some(9)));
    assert_eq!(store.committed_offset("g", "t", 0).unwrap(), Some(3), "a plan changes nothing");
    let back = store.plan_offsets_reset("g", "t", Some(0), ResetTo::ShiftBy(-2)).unwrap();
    assert_eq!((back[0].offset, back[0].clamped_from), (1, None));
    let far = store.plan_offsets_reset("g", "t", Some(0), ResetTo::ShiftBy(-9)).unwrap();
    assert_eq!((far[0].offset, far[0].clamped_from), (0, Some(-6)));
    assert_eq!(store.reset_consumer_offsets("g", "t", None, ResetTo::ShiftBy(1)).unwrap(), [(0, 4)]);
    assert!(store.group_exists("g") && !store.group_exists("h"));
    let third = store.message_at_log_offset(at[2]).unwrap().unwrap();
    assert_eq!((&third.body[..], third.queue_offset), (&b"m2"[..], 2));
    assert!(store.message_at_log_offset(at[2] + 1).is_err(), "inside a record");
    store.shutdown().unwrap();
}
