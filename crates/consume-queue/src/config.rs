//! [`ConsumeQueueConfig`]: RocketMQ's knobs for a consume queue.

use flush_service::FlushConfig;

use crate::entry::{CQ_STORE_UNIT_SIZE, ENTRIES_PER_SEGMENT_MULTIPLE};
use crate::error::CqError;

/// Configuration of a [`ConsumeQueue`](crate::ConsumeQueue), with RocketMQ's knob names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumeQueueConfig {
    /// Segment size in bytes (`mappedFileSizeConsumeQueue`; RocketMQ: 300,000
    /// entries). A multiple of 20 × 4096 = 81,920 bytes here
    /// ([`ENTRIES_PER_SEGMENT_MULTIPLE`] entries); the default is 300 × 1024 entries
    /// (6,144,000 bytes).
    pub mapped_file_size_consume_queue: usize,
    /// How often the flush service runs (`flushIntervalConsumeQueue`, 1000 ms).
    pub flush_interval_consume_queue_ms: u64,
    /// Pages that must be dirty before a flush (`flushConsumeQueueLeastPages`, 2).
    pub flush_consume_queue_least_pages: usize,
    /// A flush of whatever is dirty at least this often
    /// (`flushConsumeQueueThoroughInterval`, 60,000 ms).
    pub flush_consume_queue_thorough_interval_ms: u64,
    /// Prepare the next segment in the background.
    pub preallocate_next_segment: bool,
    /// Run the queue's own flush service (a thread). An owner of many queues
    /// turns it off and flushes them all from one thread
    /// ([`ConsumeQueue::flush_with`](crate::ConsumeQueue::flush_with)), as
    /// RocketMQ's `FlushConsumeQueueService` does.
    pub own_flush_service: bool,
    /// The queue owns its storage: closing the queue (drop) releases it. An
    /// owner whose queues share one storage with each other or with a log
    /// turns it off, so closing a queue leaves the storage usable.
    pub owns_storage: bool,
}

impl Default for ConsumeQueueConfig {
    fn default() -> Self {
        Self::with_entries_per_segment(300 * ENTRIES_PER_SEGMENT_MULTIPLE)
    }
}

impl ConsumeQueueConfig {
    /// The defaults with segments of `entries` entries.
    pub fn with_entries_per_segment(entries: usize) -> Self {
        ConsumeQueueConfig {
            mapped_file_size_consume_queue: entries.saturating_mul(CQ_STORE_UNIT_SIZE),
            flush_interval_consume_queue_ms: 1000,
            flush_consume_queue_least_pages: 2,
            flush_consume_queue_thorough_interval_ms: 60_000,
            preallocate_next_segment: true,
            own_flush_service: true,
            owns_storage: true,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), CqError> {
        let unit = CQ_STORE_UNIT_SIZE.saturating_mul(ENTRIES_PER_SEGMENT_MULTIPLE);
        let size = self.mapped_file_size_consume_queue;
        if size == 0 || !size.is_multiple_of(unit) {
            return Err(CqError::InvalidConfig {
                reason: format!("mapped_file_size_consume_queue {size} must be a positive multiple of {unit}"),
            });
        }
        if self.flush_interval_consume_queue_ms == 0 {
            return Err(CqError::InvalidConfig { reason: "flush_interval_consume_queue_ms must be positive".into() });
        }
        Ok(())
    }

    pub(crate) fn flush_config(&self) -> FlushConfig {
        FlushConfig {
            flush_interval_commit_log_ms: self.flush_interval_consume_queue_ms,
            flush_commit_log_least_pages: self.flush_consume_queue_least_pages,
            flush_commit_log_thorough_interval_ms: self.flush_consume_queue_thorough_interval_ms,
            ..FlushConfig::default()
        }
    }
}
