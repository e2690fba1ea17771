//! Helpers shared by the message store's tests.

#![allow(dead_code)]

use std::sync::Arc;

use commitlog::{CommitLogConfig, FlushDiskType, Storage};
use message_store::{MessageStore, MessageStoreConfig};
use store_io::sim::SimStorage;

/// The store's root in a simulated disk.
pub const ROOT: &str = "/store";

/// A small store: 64 KiB log segments, a small key index,
/// fast flushes of the derived data.
pub fn config(flush: FlushDiskType) -> MessageStoreConfig {
    let log = CommitLogConfig {
        disk_space_warning_level_ratio: 100,
        disk_max_used_space_ratio: 100,
        clean_file_forcibly_enable: false,
        ..CommitLogConfig::builder()
            .mapped_file_size_commit_log(64 << 10)
            .max_message_size(4096)
            .flush_disk_type(flush)
            .build()
            .unwrap()
    };
    {
        let mut config = MessageStoreConfig::new(log);
        config.flush_interval_consume_queue_ms = 10;
        config.flush_consume_queue_thorough_interval_ms = 50;
        config.index = message_store::IndexConfig::new(64, 1024);
        config.consumer_offsets_journal_size = 64 << 10;
        config
    }
}

/// Opens the store at [`ROOT`] on `sim`.
pub fn open(sim: &SimStorage, config: MessageStoreConfig) -> MessageStore {
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    MessageStore::open_with_storage(ROOT, config, storage).unwrap()
}

/// The bodies of `topic`'s queue from its first offset, with their offsets.
pub fn read_queue(store: &MessageStore, topic: &str, queue_id: u32) -> Vec<(u64, Vec<u8>)> {
    let std::ops::Range { start: mut offset, end: _ } = store.queue_range(topic, queue_id).unwrap();
    let mut out = Vec::new();
    loop {
        let got = store
            .get_messages(&message_store::GetRequest::new(topic, queue_id, offset).max_count(64).max_bytes(u64::MAX))
            .unwrap();
        if got.messages.is_empty() && got.next_offset == offset {
            return out;
        }
        for message in got.messages {
            assert_eq!(message.topic, topic);
            assert_eq!(message.queue_id, queue_id);
            out.push((message.queue_offset, message.body.to_vec()));
        }
        offset = got.next_offset;
    }
}

/// Waits (up to 10 s) until the store's flush service has sealed the queue
/// index past `offset` (a run per log segment dispatch passed): the log
/// deletes no segment whose entries are not sealed.
pub fn wait_sealed_past(store: &MessageStore, offset: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while store.stats().index_sealed_to < offset {
        assert!(
            std::time::Instant::now() < deadline,
            "the queue index was not sealed past {offset}: {:?}",
            store.stats()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
