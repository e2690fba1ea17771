//! Reading a queue (RocketMQ's `getMessage`): statuses, tag filters, offsets by
//! store time; messages by key (`queryMessage`).

use crate::error::FilterError;
use crate::index::key_hash;
use crate::message::{tags_code, StoredMessage};
use crate::records::{message_at, QueueWalk, Read};
use crate::{MessageStore, StoreError};

/// The most messages one [`MessageStore::query_by_key`] returns.
const MAX_QUERY: usize = 1024;

/// What a consumer wants of a queue's messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Parses RocketMQ's subscription expression: `*` (or empty) for every
    /// message, else tags separated by `||`, each trimmed (`"new || paid"`).
    /// An empty tag (`"a ||"`, `"a || || b"`) or a tag holding `|` or `*`
    /// (`"a ||| b"`, `"a | b"`, `"a || *"`) is refused: a filter that matches
    /// nothing the writer meant would move a group's offset past every message.
    ///
    /// ```
    /// use message_store::{FilterError, TagFilter};
    ///
    /// assert_eq!(TagFilter::parse("*")?, TagFilter::All);
    /// assert_eq!(TagFilter::parse(" new || paid ")?, TagFilter::Tags(vec!["new".into(), "paid".into()]));
    /// assert!(matches!(TagFilter::parse("new ||| paid"), Err(FilterError::BadTag { bad: '|', .. })));
    /// # Ok::<(), FilterError>(())
    /// ```
    pub fn parse(expression: &str) -> Result<Self, FilterError> {
        let trimmed = expression.trim();
        if trimmed.is_empty() || trimmed == "*" {
            return Ok(TagFilter::All);
        }
        let mut tags = Vec::new();
        for tag in trimmed.split("||").map(str::trim) {
            if tag.is_empty() {
                return Err(FilterError::EmptyTag { expression: expression.to_string() });
            }
            if let Some(bad) = tag.chars().find(|c| matches!(c, '|' | '*')) {
                return Err(FilterError::BadTag { expression: expression.to_string(), tag: tag.to_string(), bad });
            }
            if !tags.iter().any(|t| t == tag) {
                tags.push(tag.to_string());
            }
        }
        Ok(TagFilter::Tags(tags))
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

impl std::str::FromStr for TagFilter {
    type Err = FilterError;

    /// [`TagFilter::parse`].
    fn from_str(expression: &str) -> Result<Self, FilterError> {
        TagFilter::parse(expression)
    }
}

/// RocketMQ's `GetMessageStatus`, for a queue that exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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
#[non_exhaustive]
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

/// What [`MessageStore::get_messages`] reads: a queue, where to start, how
/// much, and which messages (RocketMQ's `getMessage` arguments, named).
///
/// ```
/// use message_store::{GetRequest, TagFilter};
///
/// let request = GetRequest::new("orders", 2, 0).max_count(64).filter(TagFilter::parse("new || paid")?);
/// assert_eq!((request.topic.as_str(), request.queue_id, request.max_count), ("orders", 2, 64));
/// # Ok::<(), message_store::FilterError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GetRequest {
    /// The topic.
    pub topic: String,
    /// The queue of the topic.
    pub queue_id: u32,
    /// The queue offset to read from.
    pub offset: u64,
    /// The most messages returned (default 32, RocketMQ's pull batch).
    pub max_count: usize,
    /// The most bytes of log records returned, at least one message (default
    /// 256 KiB, RocketMQ's `maxTransferBytesOnMessageInMemory`).
    pub max_bytes: u64,
    /// Which messages pass (default: all).
    pub filter: TagFilter,
    /// Who reads, for tracing only (default: none).
    pub group: Option<String>,
}

impl GetRequest {
    /// Reads `topic`'s queue `queue_id` from `offset`, with the defaults.
    pub fn new(topic: impl Into<String>, queue_id: u32, offset: u64) -> Self {
        GetRequest {
            topic: topic.into(),
            queue_id,
            offset,
            max_count: 32,
            max_bytes: 256 << 10,
            filter: TagFilter::All,
            group: None,
        }
    }

    /// Sets [`max_count`](Self::max_count).
    pub fn max_count(mut self, max_count: usize) -> Self {
        self.max_count = max_count;
        self
    }

    /// Sets [`max_bytes`](Self::max_bytes).
    pub fn max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// Sets [`filter`](Self::filter).
    pub fn filter(mut self, filter: TagFilter) -> Self {
        self.filter = filter;
        self
    }

    /// Sets [`group`](Self::group).
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// Sets [`offset`](Self::offset): the same request further on.
    pub fn offset(mut self, offset: u64) -> Self {
        self.offset = offset;
        self
    }
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
    /// Reads up to `request.max_count` messages (and `max_bytes` of log
    /// records, at least one message) of the request's queue from its offset
    /// that pass its filter, scanning at most `max(max_filter_entries,
    /// max_count)` entries. The status says what was found (RocketMQ's
    /// `GetMessageStatus`); `next_offset` is where to read next.
    pub fn get_messages(&self, request: &GetRequest) -> Result<GetResult, StoreError> {
        let GetRequest { topic, queue_id, offset, max_count, max_bytes, filter, group } = request;
        let (topic, queue_id, offset, max_count, max_bytes) =
            (topic.as_str(), *queue_id, *offset, *max_count, *max_bytes);
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
        let mut walk = QueueWalk::new(&self.core.log, topic, queue_id, offset);
        for entry in entries {
            if result.messages.len() >= max_count
                || (!result.messages.is_empty() && bytes.saturating_add(u64::from(entry.size)) > max_bytes)
            {
                break;
            }
            if !filter.passes_code(entry.tag) {
                walk.skip();
                continue;
            }
            match walk.read(&entry)? {
                Read::Message(message) => {
                    if filter.passes(&message) {
                        bytes = bytes.saturating_add(message.log_size);
                        result.messages.push(message);
                    }
                }
                Read::Expired => {} // expired with the log's front meanwhile
                Read::Damaged => return Err(mismatch(walk.at(), entry.log_offset)),
            }
        }
        result.next_offset = walk.at();
        if !result.messages.is_empty() {
            result.status = GetStatus::Found;
            self.core.read_messages.fetch_add(result.messages.len() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        tracing::trace!(
            group = group.as_deref(),
            topic,
            queue_id,
            offset,
            found = result.messages.len(),
            "get_messages"
        );
        Ok(result)
    }

    /// The message whose log record starts at `log_offset` (RocketMQ's
    /// `lookMessageByOffset`; a `PutResult::log_offset`, or a
    /// `StoredMessage::log_offset`): `None` if it expired with the log's
    /// front, or is of a topic deleted since (never read again). What is
    /// read there must be the message its queue's entry names: an offset
    /// inside a record (which may read as one: a body can hold any bytes) is
    /// [`StoreError::NotAMessageStart`], as is one past the dispatched end.
    pub fn message_at_log_offset(&self, log_offset: u64) -> Result<Option<StoredMessage>, StoreError> {
        self.check_open()?;
        let not_a_start = || StoreError::NotAMessageStart { log_offset };
        let message = match message_at(&self.core.log, log_offset) {
            Ok(Some(message)) => message,
            Ok(None) => return Ok(None),
            Err(StoreError::Log(
                commitlog::Error::BadRecord { .. }
                | commitlog::Error::InsideRecord { .. }
                | commitlog::Error::NoRecord { .. }
                | commitlog::Error::NotYetDurable { .. },
            ))
            | Err(StoreError::Message(_)) => return Err(not_a_start()),
            Err(err) => return Err(err),
        };
        let Some(key) = self.core.queues.key_of_record(&message.topic, message.queue_id, log_offset) else {
            return Ok(None); // a deleted topic's
        };
        match self.core.dispatcher.queue_index.get(key, message.queue_offset, 1).first() {
            Some(entry) if entry.log_offset == log_offset => Ok(Some(message)),
            // Expired from the index with the log's front meanwhile.
            None if self.core.dispatcher.queue_index.extent(key).is_some_and(|(min, _)| min > message.queue_offset) => {
                Ok(None)
            }
            _ => Err(not_a_start()),
        }
    }

    /// The messages of `topic` with `key` stored within `[begin_ms, end_ms]`,
    /// newest first, at most `max` (and at most 1,024: RocketMQ #7948 ran out of
    /// memory on a huge `maxNum`). Candidates are checked against their record:
    /// another key with the same hash is never returned, nor a message of a
    /// topic of the same name deleted before. Empty when the index is off;
    /// [`StoreError::UnknownTopic`] for a topic that does not exist.
    pub fn query_by_key(
        &self,
        topic: &str,
        key: &str,
        begin_ms: u64,
        end_ms: u64,
        max: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        self.check_open()?;
        if self.core.queues.topic(topic).is_none() {
            return Err(StoreError::UnknownTopic { topic: topic.to_string() });
        }
        let Some(index) = &self.core.dispatcher.index else { return Ok(Vec::new()) };
        let max = max.min(MAX_QUERY);
        let mut found = Vec::new();
        // Ask for more candidates than wanted: collisions are dropped below.
        for offset in index.candidates(key_hash(topic, key), begin_ms, end_ms, max.saturating_mul(2).max(16))? {
            if found.len() >= max {
                break;
            }
            let Some(message) = message_at(&self.core.log, offset)? else { continue };
            // Only the topic's own: not a record of a topic of its name
            // deleted before (below its creation point).
            let own = self.core.queues.key_of_record(topic, message.queue_id, message.log_offset).is_some();
            if own && message.topic == topic && message.keys.iter().any(|k| k == key) {
                found.push(message);
            }
        }
        Ok(found)
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

    /// About how many messages of `topic`'s queue in `[from, to)` pass
    /// `filter` (RocketMQ's `estimateMessageCount`): exact for
    /// [`TagFilter::All`] (the range clamped to the queue's); otherwise by the
    /// tag hashes of up to 20,000 entries from `from`, scaled to the range
    /// (a hash shared by another tag counts as a match). Reads only the
    /// queue index, never the log.
    pub fn estimate_message_count(
        &self,
        topic: &str,
        queue_id: u32,
        from: u64,
        to: u64,
        filter: &TagFilter,
    ) -> Result<u64, StoreError> {
        const SAMPLE: u64 = 20_000;
        let key = self.queue_key_of(topic, queue_id)?;
        let index = &self.core.dispatcher.queue_index;
        let (min, max) = index.extent(key).unwrap_or((0, 0));
        let (from, to) = (from.max(min), to.min(max));
        let Some(total) = to.checked_sub(from).filter(|&n| n > 0) else { return Ok(0) };
        if *filter == TagFilter::All {
            return Ok(total);
        }
        let sample = total.min(SAMPLE);
        let entries = index.get(key, from, usize::try_from(sample).unwrap_or(usize::MAX));
        let scanned = entries.len() as u64;
        if scanned == 0 {
            return Ok(0);
        }
        let matched = entries.iter().filter(|entry| filter.passes_code(entry.tag)).count() as u64;
        // total * matched / scanned, without overflow: matched <= scanned.
        Ok(u64::try_from(u128::from(total) * u128::from(matched) / u128::from(scanned)).unwrap_or(total))
    }

    /// Whether the records of `topic`'s queue from `offset` (`batch` of them,
    /// at least one) are all in memory now, so reading them takes no disk I/O
    /// (RocketMQ's `checkInMemByConsumeOffset`, by `mincore` on the log's
    /// mapping). False for an offset the queue does not hold. A snapshot:
    /// advice for a broker choosing how to serve a read, not a promise.
    pub fn check_in_mem_by_consume_offset(
        &self,
        topic: &str,
        queue_id: u32,
        offset: u64,
        batch: usize,
    ) -> Result<bool, StoreError> {
        let key = self.queue_key_of(topic, queue_id)?;
        let entries = self.core.dispatcher.queue_index.get(key, offset, batch.max(1));
        Ok(!entries.is_empty()
            && entries.iter().all(|entry| self.core.log.is_resident(entry.log_offset, u64::from(entry.size))))
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
