//! The store's configuration, with RocketMQ's knob names where it has them.

use commitlog::{CommitLogConfig, FlushDiskType};

use crate::error::StoreError;
use crate::index::IndexConfig;
use crate::message::MessageLimits;

/// How far the dispatcher may read the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchLimit {
    /// Only what is durable: consumers never see a message a crash can take
    /// back (RocketMQ #8239). Required under sync flush.
    Durable,
    /// Everything written (RocketMQ's default under async flush): lower latency;
    /// after a power loss, messages consumers saw may be gone, and their queue
    /// offsets given again.
    Written,
}

/// Configuration of a [`MessageStore`](crate::MessageStore).
#[derive(Debug, Clone)]
pub struct MessageStoreConfig {
    /// The commit log's configuration (flush mode, segment size, retention, …).
    pub log: CommitLogConfig,
    /// How far dispatch reads: `None` picks [`DispatchLimit::Durable`] under
    /// sync flush and [`DispatchLimit::Written`] under async flush.
    pub dispatch_limit: Option<DispatchLimit>,
    /// How often the flush service looks at the derived data
    /// (`flushIntervalConsumeQueue`, 1,000 ms): it seals the queue index when
    /// dispatch has passed a log segment's end or the active run is full, and
    /// flushes the key index.
    pub flush_interval_consume_queue_ms: u64,
    /// Pages of the key index that must be dirty before it is flushed between
    /// thorough flushes (`flushConsumeQueueLeastPages`, 2).
    pub flush_consume_queue_least_pages: usize,
    /// The key index is flushed whole, both indexes expired against the log's
    /// front, and the dispatch checkpoint recorded, at least this often
    /// (`flushConsumeQueueThoroughInterval`; RocketMQ: 60,000 ms, here 10,000 ms).
    pub flush_consume_queue_thorough_interval_ms: u64,
    /// The most entries the queue index keeps in memory before it seals them
    /// (1,048,576: about 40 MiB; it seals at each log segment's end anyway).
    /// What a crash makes recovery dispatch again is at most a segment or
    /// this many messages.
    pub queue_index_seal_entries: usize,
    /// Create a topic with [`default_topic_queue_nums`](Self::default_topic_queue_nums)
    /// queues on its first put (`autoCreateTopicEnable`); off by default.
    pub auto_create_topics: bool,
    /// Queues of an auto-created topic (`defaultTopicQueueNums`, 8).
    pub default_topic_queue_nums: u32,
    /// The most queues a topic may have.
    pub max_queues_per_topic: u32,
    /// Limits on each message.
    pub limits: MessageLimits,
    /// Build the key index (`messageIndexEnable`, on): messages with keys are
    /// found by [`MessageStore::query_by_key`](crate::MessageStore::query_by_key).
    pub message_index_enable: bool,
    /// The index files' shape.
    pub index: IndexConfig,
    /// The longest a get scans a queue for matching messages: at least this many
    /// entries (RocketMQ's `maxFilterMessageSize` / 20 = 800) or `max_count`.
    pub max_filter_entries: u64,
    /// The smallest consumer-offsets journal file, in bytes (4 MiB: about
    /// 145,000 commits between compactions). A journal is sized to twice its
    /// snapshot when that is larger, so compactions stay rare at any number of
    /// offsets. At least 64 KiB, a multiple of 4 KiB.
    pub consumer_offsets_journal_size: usize,
}

impl MessageStoreConfig {
    /// The defaults over the commit log configured as `log`.
    pub fn new(log: CommitLogConfig) -> Self {
        MessageStoreConfig {
            limits: MessageLimits::within(log.max_message_size),
            log,
            dispatch_limit: None,
            flush_interval_consume_queue_ms: 1000,
            flush_consume_queue_least_pages: 2,
            flush_consume_queue_thorough_interval_ms: 10_000,
            auto_create_topics: false,
            default_topic_queue_nums: 8,
            max_queues_per_topic: 65_536,
            max_filter_entries: 800,
            consumer_offsets_journal_size: 4 << 20,
            queue_index_seal_entries: 1 << 20,
            message_index_enable: true,
            index: IndexConfig::default(),
        }
    }

    /// The dispatch limit in force.
    pub fn effective_dispatch_limit(&self) -> DispatchLimit {
        self.dispatch_limit.unwrap_or(match self.log.flush_disk_type {
            FlushDiskType::SyncFlush => DispatchLimit::Durable,
            FlushDiskType::AsyncFlush => DispatchLimit::Written,
        })
    }

    pub(crate) fn validate(&self) -> Result<(), StoreError> {
        let bad = |reason: String| Err(StoreError::InvalidConfig { reason });
        if self.log.flush_disk_type == FlushDiskType::SyncFlush && self.dispatch_limit == Some(DispatchLimit::Written) {
            return bad("dispatch_limit Written under sync flush would show consumers messages a crash can take back (RocketMQ #8239)".into());
        }
        if self.index.hash_slots == 0 || self.index.max_items == 0 {
            return bad("index hash_slots and max_items must be positive".into());
        }
        let journal = self.consumer_offsets_journal_size;
        if journal < 64 << 10 || !journal.is_multiple_of(4096) {
            return bad(format!(
                "consumer_offsets_journal_size {journal} must be at least 64 KiB and a multiple of 4 KiB"
            ));
        }
        if self.queue_index_seal_entries == 0 {
            return bad("queue_index_seal_entries must be positive".into());
        }
        if self.flush_interval_consume_queue_ms == 0 || self.flush_consume_queue_thorough_interval_ms == 0 {
            return bad("flush intervals must be positive".into());
        }
        if self.default_topic_queue_nums == 0 || self.default_topic_queue_nums > self.max_queues_per_topic {
            return bad(format!(
                "default_topic_queue_nums {} must be between 1 and max_queues_per_topic {}",
                self.default_topic_queue_nums, self.max_queues_per_topic
            ));
        }
        let room = self.log.max_message_size;
        let need = self.limits.max_body_size.saturating_add(self.limits.max_properties_size);
        if need > room || u32::try_from(need).is_err() {
            return bad(format!(
                "max_body_size + max_properties_size ({need}) must fit the log's max_message_size ({room})"
            ));
        }
        Ok(())
    }
}
