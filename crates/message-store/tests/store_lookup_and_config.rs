//! A configuration file as documented, unknown keys in its sections, a
//! message found by its log offset (never inside a record, never a deleted
//! topic's), and a reset a running member takes even to the offset it knew.

mod common;

use commitlog::FlushDiskType;
use common::{config, open};
use message_store::commitlog::format::{body_crc, encode_record, HEADER_SIZE};
#[cfg(feature = "serde")]
use message_store::MessageStoreConfig;
use message_store::{ConsumerConfig, Message, ResetTo, TagFilter};
use store_io::sim::SimStorage;

/// The TOML example in `MessageStoreConfig`'s docs sets a 1 MiB segment and
/// no `max_message_size`: it gets the builder's (a quarter of the segment),
/// so the configuration validates and the log's own check passes.
#[cfg(feature = "serde")]
#[test]
fn the_documented_toml_example_opens() {
    let text = "auto_create_topics = true\ndispatch_limit = \"durable\"\n\n[log]\nmapped_file_size_commit_log = 1048576\nflush_disk_type = \"sync_flush\"\n";
    let config: MessageStoreConfig = toml::from_str(text).unwrap();
    config.validate().unwrap();
    let log = config.log.validate();
    assert!(log.is_ok(), "max_message_size {}: {log:?}", config.log.max_message_size);
}

/// An unknown key is an error at every level: a typo under `[log]` (or
/// `[index]`, `[limits]`) is refused, not dropped.
#[cfg(feature = "serde")]
#[test]
fn an_unknown_key_in_a_section_is_an_error() {
    let typo = toml::from_str::<MessageStoreConfig>("[log]\nflush_disk_typ = \"sync_flush\"\n");
    assert!(typo.is_err(), "accepted; flush_disk_type = {:?}", typo.map(|c| c.log.flush_disk_type));
}

/// A deleted topic's messages are never read again (`delete_topic`):
/// `message_at_log_offset` does not hand out the old topic's message under
/// the coordinates of a topic made again under its name.
#[test]
fn message_at_log_offset_does_not_return_a_deleted_topics_message() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 1).unwrap();
    let old = store.put_message(&Message::new("t", 0, "old, deleted")).unwrap();
    old.durability.wait().unwrap();
    assert!(store.delete_topic("t").unwrap());
    store.create_topic("t", 1).unwrap();
    let new = store.put_message(&Message::new("t", 0, "new")).unwrap();
    new.durability.wait().unwrap();
    assert_eq!(new.queue_offset, 0);
    let got = store.message_at_log_offset(old.log_offset);
    assert!(
        !matches!(got, Ok(Some(_))),
        "{:?}",
        got.map(|m| m.map(|m| (m.topic, m.queue_id, m.queue_offset, String::from_utf8_lossy(&m.body).into_owned())))
    );
    store.shutdown().unwrap();
}

/// An offset inside a record is an error even where a body holds a
/// well-formed log record (magic, length, its own offset, CRC) at the offset
/// it lands at: the record is checked against its queue's entry.
#[test]
fn an_offset_inside_a_record_is_an_error_even_for_a_crafted_body() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("a", 1).unwrap();
    store.create_topic("secret", 1).unwrap();
    // What a message of "secret" encodes to (a record's body).
    let s = store.put_message(&Message::new("secret", 0, "forged by a producer of a")).unwrap();
    s.durability.wait().unwrap();
    let inner = store.log().read(s.log_offset).unwrap().body.to_vec();
    let len = HEADER_SIZE + inner.len();
    // Where a body of `len` bytes lies in a record of "a".
    let probe = store.put_message(&Message::new("a", 0, vec![b'P'; len])).unwrap();
    probe.durability.wait().unwrap();
    let record = store.log().read(probe.log_offset).unwrap().body.to_vec();
    let at = record.windows(len).position(|w| w.iter().all(|&b| b == b'P')).unwrap();
    let target = store.log().max_offset() + HEADER_SIZE as u64 + at as u64;
    let mut forged = vec![0u8; len];
    encode_record(&mut forged, target, 0, &inner, body_crc(&inner));
    let put = store.put_message(&Message::new("a", 0, forged)).unwrap();
    put.durability.wait().unwrap();
    assert!(put.log_offset < target && target < put.log_offset + record.len() as u64 + HEADER_SIZE as u64);
    let got = store.message_at_log_offset(target);
    assert!(
        got.is_err(),
        "offset {target} inside the record at {}: {:?}",
        put.log_offset,
        got.map(|m| m.map(|m| (m.topic, m.queue_id, String::from_utf8_lossy(&m.body).into_owned())))
    );
    store.shutdown().unwrap();
}

/// `reset_consumer_offsets` makes a running member start again from the
/// reset even when the reset moves the offset to where it already was (the
/// member had handed out messages past it): none commits over the reset.
#[test]
fn a_running_member_starts_from_a_reset_to_the_committed_offset() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 1).unwrap();
    for i in 0..5 {
        store.put_message(&Message::new("t", 0, format!("m{i}"))).unwrap().durability.wait().unwrap();
    }
    store.dispatch_now().unwrap();
    let mut consumer = store.consumer("g", ConsumerConfig::default().max_batch(3)).unwrap();
    consumer.subscribe("t", TagFilter::All).unwrap();
    let first = consumer.poll(std::time::Duration::from_secs(5)).unwrap();
    assert_eq!(first.iter().map(|m| m.queue_offset).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(store.committed_offset("g", "t", 0).unwrap(), Some(0), "the start, committed at once");
    // An operator replays the queue from its first message.
    assert_eq!(store.reset_consumer_offsets("g", "t", None, ResetTo::Earliest).unwrap(), [(0, 0)]);
    let next = consumer.poll(std::time::Duration::from_secs(5)).unwrap();
    consumer.commit().unwrap();
    let committed = store.committed_offset("g", "t", 0).unwrap();
    assert_eq!(
        next.first().map(|m| m.queue_offset),
        Some(0),
        "after the reset to 0 the member handed out {:?} and committed {committed:?}",
        next.iter().map(|m| m.queue_offset).collect::<Vec<_>>()
    );
    drop(consumer);
    store.shutdown().unwrap();
}

/// An offset inside a body's zeros is `NotAMessageStart`, not reported as
/// damage to the log.
#[test]
fn an_offset_inside_a_records_zeros_names_the_record() {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::SyncFlush));
    store.create_topic("t", 1).unwrap();
    let put = store.put_message(&Message::new("t", 0, vec![0u8; 256])).unwrap();
    put.durability.wait().unwrap();
    let size = store.log().read(put.log_offset).unwrap().size;
    let inside = put.log_offset + size - 64;
    let err = store.message_at_log_offset(inside).map(|m| m.map(|m| m.queue_offset)).unwrap_err();
    assert!(
        matches!(err, message_store::StoreError::NotAMessageStart { log_offset } if log_offset == inside),
        "offset {inside}: {err}"
    );
    store.shutdown().unwrap();
}
