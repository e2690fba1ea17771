//! Reading a queue (RocketMQ's `getMessage`): statuses, tag filters, offsets by
//! store time.

use crate::message::{tags_code, StoredMessage};
use crate::store::Named;
use crate::{MessageStore, StoreError};

/// What a consumer wants of a queue's messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum TagFilter {
    /// Every message (RocketMQ's `*`).
    #[default]
    All,
    /// Messages whose tag is one of these (RocketMQ's `a || b`). Compared by
    /// hash in the queue index, then by string in the message: a hash
    /// collision never hands out a message of another tag (ROCKETMQ-134).
    Tags(Vec<String>),
}

impl TagFilter {
    /// Parses RocketMQ's subscription expression: `*` (or empty) for all, else
    /// tags separated by `||`.
    pub fn parse(expression: &str) -> Self {
        let expression = expression.trim();
        if expression.is_empty() || expression == "*" {
            return TagFilter::All;
        }
        TagFilter::Tags(expression.split("||").map(|t| t.trim().to_string()).filter(|t| !t.is_empty()).collect())
    }

    fn passes_code(&self, code: u64) -> bool {
        match self {
            TagFilter::All => true,
            TagFilter::Tags(tags) => tags.iter().any(|t| tags_code(t) == code),
        }
    }

    pub(crate) fn passes(&self, message: &StoredMessage) -> bool {
        match self {
            TagFilter::All => true,
            TagFilter::Tags(tags) => message.tags.as_ref().is_some_and(|tag| tags.iter().any(|t| t == tag)),
        }
    }
}

/// RocketMQ's `GetMessageStatus`, for a queue that exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetStatus {
    /// Messages were found.
    Found,
    /// The queue has never held a message (`NO_MESSAGE_IN_QUEUE`).
    NoMessageInQueue,
    /// The offset is below the queue's first (its messages expired):
    /// `next_offset` is the first (`OFFSET_TOO_SMALL`).
    OffsetTooSmall,
    /// The offset is the queue's end: no new message yet (`OFFSET_OVERFLOW_ONE`);
    /// wait with [`MessageStore::wait_for`] or [`MessageStore::arrival`].
    NoNewMessage,
    /// The offset is past the queue's end: `next_offset` is the end
    /// (`OFFSET_OVERFLOW_BADLY`).
    OffsetOverflow,
    /// Entries were scanned but none passed the filter; go on from `next_offset`
    /// (`NO_MATCHED_MESSAGE`).
    NoMatchedMessage,
}

/// The answer to [`MessageStore::get_messages`].
#[derive(Debug, Clone)]
pub struct GetResult {
    /// What happened.
    pub status: GetStatus,
    /// The offset to ask for next.
    pub next_offset: u64,
    /// The queue's first offset.
    pub min_offset: u64,
    /// The queue's end (the offset its next message gets).
    pub max_offset: u64,
    /// The messages, in queue order.
    pub messages: Vec<StoredMessage>,
}

/// Which end of equal store times [`MessageStore::offset_by_time`] picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeBound {
    /// The first message stored at or after the time.
    Lower,
    /// The last message stored at or before the time (+1 gives the first after).
    Upper,
}

impl MessageStore {
    /// Reads up to `max_count` messages (and `max_bytes` of log records, at
    /// least one message) of `topic`'s queue from `offset` that pass `filter`,
    /// scanning at most `max(max_filter_entries, max_count)` entries. `group`
    /// names the reader in tracing only.
    #[allow(clippy::too_many_arguments)] // RocketMQ's signature, one name each
    pub fn get_messages(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        offset: u64,
        max_count: usize,
        max_bytes: u64,
        filter: &TagFilter,
    ) -> Result<GetResult, StoreError> {
        let key = self.queue_key_of(topic, queue_id)?;
        let index = &self.core.dispatcher.queue_index;
        let (min, max) = index.extent(key).unwrap_or((0, 0));
        let answer = |status, next_offset| GetResult {
            status,
            next_offset,
            min_offset: min,
            max_offset: max,
            messages: Vec::new(),
        };
        if max == 0 {
            return Ok(answer(GetStatus::NoMessageInQueue, 0));
        }
        if offset < min {
            return Ok(answer(GetStatus::OffsetTooSmall, min));
        }
        if offset == max {
            return Ok(answer(GetStatus::NoNewMessage, offset));
        }
        if offset > max {
            return Ok(answer(GetStatus::OffsetOverflow, max));
        }
        let scan = self.core.config.max_filter_entries.max(max_count as u64).min(max - offset);
        let entries = index.get(key, offset, usize::try_from(scan).unwrap_or(usize::MAX));
        let mismatch = |queue_offset: u64, log_offset: u64| StoreError::IndexMismatch {
            topic: topic.to_string(),
            queue_id,
            queue_offset,
            log_offset,
        };
        let mut result = answer(GetStatus::NoMatchedMessage, offset);
        let mut bytes = 0u64;
        let mut at = offset;
        for entry in entries {
            if result.messages.len() >= max_count
                || (!result.messages.is_empty() && bytes.saturating_add(u64::from(entry.size)) > max_bytes)
            {
                break;
            }
            if !filter.passes_code(entry.tag) {
                at += 1;
                continue;
            }
            let message = match self.core.message_at_entry(&entry)? {
                Named::Message(message) => message,
                Named::Expired => {
                    at += 1; // expired with the log's front meanwhile
                    continue;
                }
                Named::Other => return Err(mismatch(at, entry.log_offset)),
            };
            if message.topic != topic || message.queue_id != queue_id || message.queue_offset != at {
                return Err(mismatch(at, entry.log_offset));
            }
            at += 1;
            if filter.passes(&message) {
                bytes = bytes.saturating_add(message.log_size);
                result.messages.push(message);
            }
        }
        result.next_offset = at;
        if !result.messages.is_empty() {
            result.status = GetStatus::Found;
        }
        tracing::trace!(group, topic, queue_id, offset, found = result.messages.len(), "get_messages");
        Ok(result)
    }

    /// The offset in `topic`'s queue of the first message stored at or after
    /// `timestamp_ms` ([`TimeBound::Lower`]), or of the last stored at or
    /// before it ([`TimeBound::Upper`]), by binary search on the queue (store
    /// times grow with log order). Clamped to the queue's `[min, max]`: a time
    /// after every message gives `max`, one before every message gives `min`.
    pub fn offset_by_time(
        &self,
        topic: &str,
        queue_id: u32,
        timestamp_ms: u64,
        bound: TimeBound,
    ) -> Result<u64, StoreError> {
        let key = self.queue_key_of(topic, queue_id)?;
        let (min, max) = self.core.dispatcher.queue_index.extent(key).unwrap_or((0, 0));
        // The first index whose message is later than `timestamp_ms` (Upper)
        // or not earlier (Lower); entries whose record is gone count as earlier.
        let later = |index: u64| -> Result<bool, StoreError> {
            let time = self.store_time(key, index)?;
            Ok(match bound {
                TimeBound::Lower => time.is_some_and(|t| t >= timestamp_ms),
                TimeBound::Upper => time.is_some_and(|t| t > timestamp_ms),
            })
        };
        let (mut low, mut high) = (min, max);
        while low < high {
            let mid = low + (high - low) / 2;
            if later(mid)? {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        Ok(match bound {
            TimeBound::Lower => low,
            TimeBound::Upper => low.saturating_sub(1).max(min),
        })
    }

    /// The store time of entry `index`'s message; `None` if its record is gone.
    fn store_time(&self, key: u64, index: u64) -> Result<Option<u64>, StoreError> {
        let Some(entry) = self.core.dispatcher.queue_index.get(key, index, 1).first().copied() else {
            return Ok(None);
        };
        match self.core.log.read(entry.log_offset) {
            Ok(record) => Ok(Some(record.store_timestamp_ms)),
            Err(commitlog::Error::NoRecord { .. }) => Ok(None),
            Err(err) => Err(err.into()),
        }
    }
}
