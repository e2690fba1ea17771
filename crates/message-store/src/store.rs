//! The store: its handle and shared state, topics, puts, consumer offsets,
//! the background services' work, shutdown (the open is in `open.rs`).

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use commitlog::{CommitLog, DurabilityHandle, Storage};
use flush_service::{ServiceState, ServiceThread};
use parking_lot::Mutex;
use queue_index::Entry;

use crate::checkpoint;
use crate::config::{DispatchLimit, MessageStoreConfig};
use crate::dispatch::Dispatcher;
use crate::error::{MessageError, StoreError};
use crate::index::key_hash;
use crate::message::{decode, set_queue_offset, Message, StoredMessage};
use crate::offsets::ConsumerOffsets;
use crate::queues::{Queue, Queues};
use crate::topic::{validate_group, validate_topic, Registry};

/// The most messages one [`MessageStore::query_by_key`] returns.
const MAX_QUERY: usize = 1024;

/// Where the queue index of the store in `root` is.
pub(crate) fn queue_index_dir(root: &Path) -> PathBuf {
    root.join("queueindex")
}

/// Where a message went.
#[derive(Debug)]
#[non_exhaustive]
pub struct PutResult {
    /// Its offset in its queue.
    pub queue_offset: u64,
    /// The commit-log offset of its record.
    pub log_offset: u64,
    /// When it was stored (ms since the Unix epoch).
    pub store_timestamp_ms: u64,
    /// Resolves when the message is durable (sync flush; resolved at once
    /// under async flush).
    pub durability: DurabilityHandle,
}

/// Where a batch went: consecutive queue offsets from `first_queue_offset`.
#[derive(Debug)]
#[non_exhaustive]
pub struct BatchPutResult {
    /// The first message's queue offset; the others follow.
    pub first_queue_offset: u64,
    /// The commit-log offset of each message's record.
    pub log_offsets: Vec<u64>,
    /// When the batch was stored.
    pub store_timestamp_ms: u64,
    /// Resolves when the whole batch is durable.
    pub durability: DurabilityHandle,
}

/// A consumer group's committed offset in a queue
/// ([`MessageStore::committed_offsets`], [`inspect::consumer_offsets`](crate::inspect::consumer_offsets)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommittedOffset {
    /// The group.
    pub group: String,
    /// The topic.
    pub topic: String,
    /// The queue.
    pub queue_id: u32,
    /// The next offset it consumes.
    pub offset: u64,
}

impl CommittedOffset {
    pub(crate) fn new(((group, topic, queue_id), offset): ((String, String, u32), u64)) -> Self {
        CommittedOffset { group, topic, queue_id, offset }
    }
}

/// Where [`MessageStore::reset_consumer_offsets`] moves a group's offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResetTo {
    /// Each queue's first offset (RocketMQ's `CONSUME_FROM_FIRST_OFFSET`).
    Earliest,
    /// Each queue's end: only messages put from now on are consumed.
    Latest,
    /// This offset, clamped to each queue's `[min, end]`.
    Offset(u64),
    /// The first message stored at or after this time (ms since the Unix
    /// epoch; RocketMQ's `resetOffsetByTimestamp`), by [`MessageStore::offset_by_time`].
    Time(u64),
}

/// One queue as [`MessageStore::queue_stats`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueStats {
    /// The topic.
    pub topic: String,
    /// The queue.
    pub queue_id: u32,
    /// Its first offset.
    pub min_offset: u64,
    /// Its end (the offset its next message gets once dispatched).
    pub max_offset: u64,
}

/// What the store's services have done.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreStats {
    /// Where dispatch stands in the log.
    pub dispatch_point: u64,
    /// How far dispatch may read now (the log's flushed or written end).
    pub dispatch_limit: u64,
    /// The log's end.
    pub log_max_offset: u64,
    /// Records skipped by dispatch (not messages of a known queue).
    pub records_skipped: u64,
    /// Queues with an entry in the queue index (in this index's life, minus
    /// deleted topics').
    pub indexed_queues: usize,
    /// Sealed runs of the queue index (each one file and one mapping, however
    /// many queues).
    pub index_runs: usize,
    /// Entries of the queue index in memory, not sealed yet (dispatched again
    /// after a crash).
    pub index_active_entries: usize,
    /// Where the queue index's active run starts: every entry of a record
    /// below it is in a sealed, synced run.
    pub index_sealed_to: u64,
    /// Heap bytes of the queue index's tables.
    pub index_heap_bytes: usize,
    /// Queues in use (a put lock and a wait signal in memory): those being
    /// put to or waited on; idle ones are dropped at each thorough flush.
    pub queues_in_use: usize,
    /// Why dispatch is stopped, if it is.
    pub dispatch_error: Option<String>,
    /// Consumer offsets committed ((group, topic, queue) triples).
    pub consumer_offsets: usize,
    /// Syncs of the consumer-offsets journal since open: commits that arrive
    /// together share one.
    pub consumer_offset_syncs: u64,
    /// Entries the put path put into the queue index itself since open
    /// (dispatch by the written end: a message is readable once its put
    /// returned; dispatch found them there).
    pub entries_indexed_on_put: u64,
}

/// What recovery did at open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenReport {
    /// Where dispatch started again: the lower of the queue index's sealed
    /// end and the key index's recorded point.
    pub recovered_from: u64,
    /// Messages dispatched again.
    pub redispatched: u64,
    /// Consumer offsets lowered to their queue's end (only where the log
    /// itself ends there: under async flush, after a crash took messages back,
    /// or after damage to the log's tail that its recovery cut).
    pub offsets_lowered: usize,
    /// Why the whole queue index was rebuilt from the log, if it was: a store
    /// of the consume-queue layout converted, topic ids lost with the topic
    /// registry, or an index ahead of the log.
    pub rebuilt_all: Option<String>,
    /// The topic registry (`config/topics`) was missing or damaged and was
    /// recovered from the checkpoint and the log.
    pub topics_recovered: bool,
    /// Queue-index runs dropped (damaged, or after a damaged or missing one),
    /// each with why: their log ranges were dispatched again.
    pub index_runs_dropped: Vec<String>,
    /// The key index was rebuilt from the log (damaged, of another shape, or
    /// nothing recorded of it).
    pub index_rebuilt: bool,
}

/// The shared state of a store.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) root: PathBuf,
    pub(crate) config: MessageStoreConfig,
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) log: CommitLog,
    pub(crate) queues: Arc<Queues>,
    pub(crate) registry: Mutex<Registry>,
    pub(crate) dispatcher: Arc<Dispatcher>,
    pub(crate) offsets: ConsumerOffsets,
    /// The log's first offset the indexes last expired against.
    pub(crate) expired_to: AtomicU64,
    /// One seal of the queue index at a time, with the flush it needs.
    pub(crate) sealing: Mutex<()>,
    /// The queue index's sealed end as of its last seal: the log's front
    /// hold (read under the log's segment lock, so never the index's).
    pub(crate) sealed_mark: Arc<AtomicU64>,
    pub(crate) dispatch_wake: Arc<ServiceState>,
    pub(crate) shut_down: AtomicBool,
    /// The put path indexes its own message (dispatch by the written end).
    pub(crate) index_on_put: bool,
    /// Entries it did.
    pub(crate) indexed_on_put: AtomicU64,
    /// Held shared by a call that checks a topic exists and then writes for
    /// it (an offset commit or reset), exclusive by `delete_topic`: no such
    /// write lands after the deletion it raced.
    pub(crate) topic_life: parking_lot::RwLock<()>,
    /// Pauses an offset commit between its checks and its write (tests of
    /// the race with `delete_topic`).
    #[cfg(test)]
    pub(crate) commit_checked: crate::pause::Pause,
    /// Meets a test once, as an offset commit is about to wait for dispatch.
    #[cfg(test)]
    pub(crate) commit_waiting: crate::pause::Pause,
    /// Pauses a lookup of a queue between finding its key and getting the
    /// queue (tests of a wait that races a shutdown or a topic's deletion).
    #[cfg(test)]
    pub(crate) queue_looked_up: crate::pause::Pause,
}

/// RocketMQ's `DefaultMessageStore`: topics of queues over one commit log.
/// Every message of every queue is appended to the log; dispatch builds the
/// queue index (every queue's entries) from it in the background; consumers read a queue by
/// offset, wait for new messages, and commit their offsets.
///
/// Cheap to clone; `Send + Sync`.
///
/// **Drop:** when the last clone is dropped without [`shutdown`](Self::shutdown),
/// the store shuts down then and logs any error through `tracing`.
#[derive(Debug, Clone)]
pub struct MessageStore {
    pub(crate) core: Arc<Core>,
    pub(crate) life: Arc<Life>,
    pub(crate) report: OpenReport,
}

/// The store's services, shut down with the last handle.
#[derive(Debug)]
pub(crate) struct Life {
    pub(crate) core: Arc<Core>,
    pub(crate) services: Mutex<Vec<ServiceThread>>,
}

impl Drop for Life {
    fn drop(&mut self) {
        if let Err(err) = self.core.shutdown(&self.services) {
            tracing::error!(root = %self.core.root.display(), %err, "message store shutdown on drop failed");
        }
    }
}

impl MessageStore {
    /// Opens (or creates) the store in `root`: the commit log in `root` itself
    /// (`commitlog/`, `checkpoint`, `lock`, `abort`), the queue index in
    /// `root/queueindex/`, the key index in `root/index/`, topics, consumer
    /// offsets and the dispatch checkpoint in `root/config/`. A store of the
    /// earlier layout (`root/consumequeue/`) is converted: its queue index is
    /// built from the log and the consume-queue files deleted.
    pub fn open(root: impl AsRef<Path>, config: MessageStoreConfig) -> Result<Self, StoreError> {
        config.validate()?;
        let log = CommitLog::open(root.as_ref(), config.log.clone())?;
        Self::open_over(log, config)
    }

    /// [`open`](Self::open) with every file on `storage` (a simulated disk in
    /// fault-injection tests).
    pub fn open_with_storage(
        root: impl AsRef<Path>,
        config: MessageStoreConfig,
        storage: Arc<dyn Storage>,
    ) -> Result<Self, StoreError> {
        config.validate()?;
        let log = CommitLog::open_with_storage(root.as_ref(), config.log.clone(), storage)?;
        Self::open_over(log, config)
    }

    /// What recovery did when the store was opened.
    pub fn open_report(&self) -> OpenReport {
        self.report.clone()
    }

    /// The commit log underneath (to read records, flush, or see its stats).
    pub fn log(&self) -> &CommitLog {
        &self.core.log
    }

    /// Creates `topic` with `queues` queues (no change if it exists with as many).
    pub fn create_topic(&self, topic: &str, queues: u32) -> Result<(), StoreError> {
        self.check_open()?;
        if queues > self.core.config.max_queues_per_topic {
            return Err(StoreError::InvalidConfig {
                reason: format!(
                    "topic {topic:?}: {queues} queues exceed max_queues_per_topic {}",
                    self.core.config.max_queues_per_topic
                ),
            });
        }
        let mut registry = self.core.registry.lock();
        let entry = registry.create(&*self.core.storage, topic, queues, self.core.log.max_offset())?;
        self.core.queues.add_topic(topic, entry);
        // Room in the tables now, not by growing them on the put and
        // dispatch paths as the queues are first used.
        self.core.queues.reserve(queues as usize);
        self.core.dispatcher.queue_index.reserve(queues as usize);
        Ok(())
    }

    /// Deletes `topic` (RocketMQ's `deleteTopics`): it is gone from the
    /// registry, its queues from the queue index and every group's offsets in
    /// it from the consumer offsets, durably, before this returns; consumers
    /// waiting on it return. Offset commits and resets that checked the topic
    /// before are waited for (their offsets go with the topic's). Its messages stay in the log until the log's
    /// cleaning deletes their segments, but are never read again: a topic
    /// created later under the same name starts empty, with new queue keys,
    /// and dispatch gives it none of the old topic's records. Returns whether
    /// the topic existed.
    pub fn delete_topic(&self, topic: &str) -> Result<bool, StoreError> {
        self.check_open()?;
        validate_topic(topic)?;
        // No commit that checked the topic is between its check and its write.
        let _life = self.core.topic_life.write();
        let mut registry = self.core.registry.lock();
        let Some(entry) = registry.remove(&*self.core.storage, topic)? else { return Ok(false) };
        // No record of the topic between its queue's lookup and its append:
        // dispatch would put a forgotten queue back into the index.
        let dispatch = self.core.dispatcher.hold();
        self.core.queues.remove_topic(topic);
        let id = u64::from(entry.id);
        self.core.dispatcher.queue_index.forget(&*self.core.storage, |key| key >> 32 == id)?;
        drop(dispatch);
        drop(registry);
        self.core.offsets.remove_topic(&*self.core.storage, topic)?;
        tracing::info!(topic, "topic deleted");
        Ok(true)
    }

    /// Deletes every topic not in `retain` (RocketMQ's `cleanUnusedTopic`,
    /// given the topics a broker's configuration still names), each as
    /// [`delete_topic`](Self::delete_topic) does. Returns the topics deleted.
    pub fn clean_unused_topics(&self, retain: &[&str]) -> Result<Vec<String>, StoreError> {
        let mut deleted = Vec::new();
        for (topic, _) in self.topics() {
            if !retain.contains(&topic.as_str()) && self.delete_topic(&topic)? {
                deleted.push(topic);
            }
        }
        Ok(deleted)
    }

    /// Every topic with its queue count.
    pub fn topics(&self) -> Vec<(String, u32)> {
        self.core.registry.lock().topics().map(|(t, e)| (t.to_string(), e.queues)).collect()
    }

    /// Puts `message` on its topic's queue: appended to the log with the queue's
    /// next offset, assigned under the queue's put lock (the log holds a queue's
    /// messages in offset order, offsets dense from 0). Nothing is appended, and
    /// no offset used, if it is refused.
    pub fn put_message(&self, message: &Message) -> Result<PutResult, StoreError> {
        let mut encoded = message.encode(&self.core.config.limits, born_or_now(message.born_timestamp_ms))?;
        let queue = self.queue_for_put(&message.topic, message.queue_id)?;
        #[cfg(planted_bugs)]
        if crate::planted::is_active(crate::planted::Bug::OffsetOutsidePutLock) {
            let offset = {
                let mut next = queue.next_offset.lock();
                self.next_offset_locked((&message.topic, message.queue_id), &queue, &mut next)?
            };
            set_queue_offset(&mut encoded, offset);
            std::thread::yield_now();
            let appended = self.core.log.append(&encoded)?;
            let mut next = queue.next_offset.lock();
            *next = Some(next.unwrap_or(0).max(offset.saturating_add(1)));
            drop(next);
            self.after_put();
            return Ok(PutResult {
                queue_offset: offset,
                log_offset: appended.wrote_offset,
                store_timestamp_ms: appended.store_timestamp_ms,
                durability: appended.durability,
            });
        }
        let (queue_offset, appended) = {
            let mut next = queue.next_offset.lock();
            let offset = self.next_offset_locked((&message.topic, message.queue_id), &queue, &mut next)?;
            set_queue_offset(&mut encoded, offset);
            let appended = self.core.log.append(&encoded)?;
            *next = Some(offset.saturating_add(1));
            let size = u32::try_from(appended.wrote_bytes).unwrap_or(u32::MAX);
            let entry = Entry { log_offset: appended.wrote_offset, size, tag: message.tags_code() };
            self.core.index_on_put(&queue, offset, entry);
            (offset, appended)
        };
        self.after_put();
        Ok(PutResult {
            queue_offset,
            log_offset: appended.wrote_offset,
            store_timestamp_ms: appended.store_timestamp_ms,
            durability: appended.durability,
        })
    }

    /// Puts `messages`, all of one topic and queue, under one lock and in one
    /// log append: consecutive queue offsets, one durability handle.
    pub fn put_messages(&self, messages: &[Message]) -> Result<BatchPutResult, StoreError> {
        let first = messages.first().ok_or(StoreError::BadBatch { reason: "empty" })?;
        if messages.iter().any(|m| m.topic != first.topic || m.queue_id != first.queue_id) {
            return Err(StoreError::BadBatch { reason: "messages of several topics or queues" });
        }
        let mut encoded = messages
            .iter()
            .map(|m| m.encode(&self.core.config.limits, born_or_now(m.born_timestamp_ms)))
            .collect::<Result<Vec<_>, MessageError>>()?;
        let queue = self.queue_for_put(&first.topic, first.queue_id)?;
        let (first_offset, appended) = {
            let mut next = queue.next_offset.lock();
            let offset = self.next_offset_locked((&first.topic, first.queue_id), &queue, &mut next)?;
            for (k, body) in encoded.iter_mut().enumerate() {
                set_queue_offset(body, offset.saturating_add(k as u64));
            }
            let appended = self.core.log.append_batch(&encoded)?;
            *next = Some(offset.saturating_add(messages.len() as u64));
            let ends = appended.offsets.iter().skip(1).copied().chain([appended.offsets[0] + appended.wrote_bytes]);
            for (k, (m, (&at, end))) in messages.iter().zip(appended.offsets.iter().zip(ends)).enumerate() {
                let size = u32::try_from(end - at).unwrap_or(u32::MAX);
                let entry = Entry { log_offset: at, size, tag: m.tags_code() };
                self.core.index_on_put(&queue, offset.saturating_add(k as u64), entry);
            }
            (offset, appended)
        };
        self.after_put();
        Ok(BatchPutResult {
            first_queue_offset: first_offset,
            log_offsets: appended.offsets,
            store_timestamp_ms: appended.store_timestamp_ms,
            durability: appended.durability,
        })
    }

    /// The queue's next offset, under its put lock: known, or (first put since
    /// it was in use) the queue index's end of it, which every message put
    /// before has reached (recovery dispatched the whole log; a queue in use
    /// is never dropped with a put past the index's end). Refused if
    /// `topic` was deleted since `queue` was looked up: a put holding the
    /// lock either sees the deletion here or finishes before it completes
    /// ([`Queues::remove_topic`](crate::queues::Queues::remove_topic)), so no
    /// put of a deleted topic lands after a topic made again under its name.
    fn next_offset_locked(
        &self,
        (topic, queue_id): (&str, u32),
        queue: &Queue,
        next: &mut Option<u64>,
    ) -> Result<u64, StoreError> {
        if self.core.queues.key(topic, queue_id)? != queue.key {
            return Err(StoreError::UnknownTopic { topic: topic.to_string() });
        }
        if let Some(next) = *next {
            return Ok(next);
        }
        let offset = self.core.dispatcher.queue_index.extent(queue.key).map_or(0, |(_, end)| end);
        *next = Some(offset);
        Ok(offset)
    }

    fn after_put(&self) {
        #[cfg(planted_bugs)]
        if crate::planted::is_active(crate::planted::Bug::DispatchBeforeDurable) {
            // The bug as it would be written: dispatch by the written end, woken by puts.
            self.core.dispatch_wake.wakeup();
        }
        if self.core.dispatcher_limit() == DispatchLimit::Written {
            self.core.dispatch_wake.wakeup();
        }
    }

    /// The queue to put on: the topic exists (or is created, with auto-creation
    /// on) and has the queue.
    fn queue_for_put(&self, topic: &str, queue_id: u32) -> Result<Arc<Queue>, StoreError> {
        self.check_open()?;
        if self.core.queues.topic(topic).is_none() && self.core.config.auto_create_topics {
            self.create_topic(topic, self.core.config.default_topic_queue_nums)?;
        }
        self.queue(topic, queue_id)
    }

    /// The queue `topic`/`queue_id` in use (made if it is not), or why there is none.
    pub(crate) fn queue(&self, topic: &str, queue_id: u32) -> Result<Arc<Queue>, StoreError> {
        let key = self.core.queues.key(topic, queue_id)?;
        #[cfg(test)]
        self.core.queue_looked_up.reached();
        self.core.queues.get_or_make((topic, queue_id), key, &self.core.dispatcher.queue_index)
    }

    /// The key of `topic`/`queue_id` in the queue index, the store checked open.
    pub(crate) fn queue_key_of(&self, topic: &str, queue_id: u32) -> Result<u64, StoreError> {
        self.check_open()?;
        self.core.queues.key(topic, queue_id)
    }

    /// The offsets `topic`'s queue holds: from its first (RocketMQ's
    /// `getMinOffsetInQueue`) to its end, exclusive (`getMaxOffsetInQueue`:
    /// the offset its next message takes once dispatched). Reads the queue
    /// index's table only: no file, and nothing changes.
    pub fn queue_range(&self, topic: &str, queue_id: u32) -> Result<Range<u64>, StoreError> {
        let key = self.queue_key_of(topic, queue_id)?;
        let (min, end) = self.core.dispatcher.queue_index.extent(key).unwrap_or((0, 0));
        Ok(min..end)
    }

    /// Every queue of every topic with its range.
    pub fn queue_stats(&self) -> Result<Vec<QueueStats>, StoreError> {
        let mut stats = Vec::new();
        for (topic, count) in self.topics() {
            for queue_id in 0..count {
                let Range { start: min_offset, end: max_offset } = self.queue_range(&topic, queue_id)?;
                stats.push(QueueStats { topic: topic.clone(), queue_id, min_offset, max_offset });
            }
        }
        Ok(stats)
    }

    /// Commits `group`'s offset in `topic`'s queue (the next offset it will
    /// consume); durable when this returns. Refused beyond the queue's end; a
    /// lower offset than the committed one is taken (a reset: the group
    /// consumes again from there). A commit costs one small journal record, and
    /// commits from many threads share syncs.
    ///
    /// An offset the queue's puts have reached but dispatch has not yet (a
    /// commit right after a put) waits for dispatch, up to
    /// [`commit_dispatch_wait_ms`](MessageStoreConfig::commit_dispatch_wait_ms):
    /// an offset is never committed past what the queue index holds.
    pub fn commit_offset(&self, group: &str, topic: &str, queue_id: u32, offset: u64) -> Result<(), StoreError> {
        self.commit_offsets(group, &[(topic, queue_id, offset)])
    }

    /// Commits several of `group`'s offsets, each `(topic, queue_id, offset)`,
    /// with one sync: what a broker does with the offsets its consumers report.
    /// Checked like [`commit_offset`](Self::commit_offset), all before any is
    /// taken: one refused, none committed.
    pub fn commit_offsets(&self, group: &str, commits: &[(&str, u32, u64)]) -> Result<(), StoreError> {
        self.check_open()?;
        validate_group(group)?;
        // Waits for dispatch first, outside the topics' lock: a deletion
        // meanwhile closes the queue and wakes the wait.
        for &(topic, queue_id, offset) in commits {
            self.wait_for_dispatch_of(topic, queue_id, offset)?;
        }
        let _life = self.core.topic_life.read();
        for &(topic, queue_id, offset) in commits {
            let max = self.queue_range(topic, queue_id)?.end;
            if offset > max {
                return Err(StoreError::OffsetBeyondQueue {
                    group: group.to_string(),
                    topic: topic.to_string(),
                    queue_id,
                    offset,
                    max,
                });
            }
        }
        #[cfg(test)]
        self.core.commit_checked.reached();
        self.core.offsets.commit_many(&*self.core.storage, group, commits)
    }

    /// Waits, for a commit of `offset` in `topic`'s queue, until dispatch
    /// has reached it if the queue's puts have (or the wait's bound has
    /// passed, or the queue was closed).
    fn wait_for_dispatch_of(&self, topic: &str, queue_id: u32, offset: u64) -> Result<(), StoreError> {
        let key = self.queue_key_of(topic, queue_id)?;
        let end = self.core.dispatcher.queue_index.extent(key).map_or(0, |(_, end)| end);
        if offset <= end || self.core.config.commit_dispatch_wait_ms == 0 {
            return Ok(());
        }
        let Some(queue) = self.core.queues.live(key) else { return Ok(()) };
        let put_end = *queue.next_offset.lock();
        if put_end.is_none_or(|put_end| offset > put_end) {
            return Ok(());
        }
        #[cfg(test)]
        self.core.commit_waiting.reached();
        let deadline = Instant::now().checked_add(Duration::from_millis(self.core.config.commit_dispatch_wait_ms));
        queue.signal.wait_past(offset - 1, deadline);
        Ok(())
    }

    /// Moves `group`'s offsets in `topic` (every queue, or only `queue_id`)
    /// to `to` (RocketMQ's `resetOffset` and `resetOffsetByTimestamp`), with
    /// one sync; durable when this returns. Returns each queue's new offset.
    pub fn reset_consumer_offsets(
        &self,
        group: &str,
        topic: &str,
        queue_id: Option<u32>,
        to: ResetTo,
    ) -> Result<Vec<(u32, u64)>, StoreError> {
        self.check_open()?;
        validate_group(group)?;
        let _life = self.core.topic_life.read();
        let queues =
            self.core.queues.topic(topic).ok_or_else(|| StoreError::UnknownTopic { topic: topic.into() })?.queues;
        // A queue the topic does not have is refused by `queue_range` below.
        let ids: Vec<u32> = queue_id.map_or_else(|| (0..queues).collect(), |id| vec![id]);
        let mut moved = Vec::with_capacity(ids.len());
        for id in ids {
            let range = self.queue_range(topic, id)?;
            let offset = match to {
                ResetTo::Earliest => range.start,
                ResetTo::Latest => range.end,
                ResetTo::Offset(offset) => offset.clamp(range.start, range.end),
                ResetTo::Time(ms) => self.offset_by_time(topic, id, ms, crate::TimeBound::Lower)?,
            };
            moved.push((id, offset));
        }
        let commits: Vec<(&str, u32, u64)> = moved.iter().map(|&(id, offset)| (topic, id, offset)).collect();
        self.core.offsets.commit_many(&*self.core.storage, group, &commits)?;
        tracing::info!(group, topic, ?queue_id, ?to, "consumer offsets reset");
        Ok(moved)
    }

    /// Removes `group`'s committed offsets: in every topic (RocketMQ's
    /// `removeOffset`), or in `topic` only. Durable when this returns; returns
    /// how many were removed. The group then consumes as a new one.
    pub fn remove_consumer_offsets(&self, group: &str, topic: Option<&str>) -> Result<usize, StoreError> {
        self.check_open()?;
        validate_group(group)?;
        let storage = &*self.core.storage;
        match topic {
            Some(topic) => self.core.offsets.remove_group_topic(storage, group, topic),
            None => self.core.offsets.remove_group(storage, group),
        }
    }

    /// Removes every group's committed offsets in `topic` (RocketMQ's
    /// `cleanOffsetByTopic`). Durable when this returns; returns how many were
    /// removed.
    pub fn clean_offsets_by_topic(&self, topic: &str) -> Result<usize, StoreError> {
        self.check_open()?;
        validate_topic(topic)?;
        self.core.offsets.remove_topic(&*self.core.storage, topic)
    }

    /// `group`'s committed offset in `topic`'s queue, if it committed one.
    pub fn committed_offset(&self, group: &str, topic: &str, queue_id: u32) -> Option<u64> {
        self.core.offsets.get(group, topic, queue_id)
    }

    /// Every committed offset.
    pub fn committed_offsets(&self) -> Vec<CommittedOffset> {
        self.core.offsets.all().into_iter().map(CommittedOffset::new).collect()
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
            let Some(message) = self.core.message_at(offset)? else { continue };
            // Only the topic's own: not a record of a topic of its name
            // deleted before (below its creation point).
            let own = self.core.queues.key_of_record(topic, message.queue_id, message.log_offset).is_some();
            if own && message.topic == topic && message.keys.iter().any(|k| k == key) {
                found.push(message);
            }
        }
        Ok(found)
    }

    /// What the services have done.
    pub fn stats(&self) -> StoreStats {
        let dispatcher = &self.core.dispatcher;
        let index = &dispatcher.queue_index;
        StoreStats {
            dispatch_point: dispatcher.point(),
            dispatch_limit: dispatcher.limit(),
            log_max_offset: self.core.log.max_offset(),
            records_skipped: dispatcher.skipped.load(Ordering::Relaxed),
            indexed_queues: index.queue_count(),
            index_runs: index.run_count(),
            index_active_entries: index.active_entries(),
            index_sealed_to: index.sealed_to(),
            index_heap_bytes: index.heap_bytes(),
            queues_in_use: self.core.queues.live_count(),
            dispatch_error: dispatcher.error(),
            consumer_offsets: self.core.offsets.len(),
            consumer_offset_syncs: self.core.offsets.syncs(),
            entries_indexed_on_put: self.core.indexed_on_put.load(Ordering::Relaxed),
        }
    }

    /// Seals the queue index up to the dispatch point now (what the flush
    /// service does at each log segment's end, and when the active run holds
    /// `queue_index_seal_entries`): the log is flushed first if it must be.
    /// An open after a crash then dispatches again only what came after.
    pub fn seal_index(&self) -> Result<(), StoreError> {
        self.check_open()?;
        self.core.seal(self.core.dispatcher.point())
    }

    /// Rebuilds the key index from the log (where
    /// [`inspect::check`](crate::inspect::check) found it damaged): every file
    /// deleted, then the keys of every dispatched message added again.
    /// Returns the messages indexed (0 with the index off).
    pub fn rebuild_index(&self) -> Result<u64, StoreError> {
        self.check_open()?;
        self.core.dispatcher.rebuild_index()
    }

    /// Dispatches everything up to the limit now (what the dispatch thread does
    /// when woken); returns how many messages.
    pub fn dispatch_now(&self) -> Result<u64, StoreError> {
        self.check_open()?;
        self.core.dispatcher.dispatch_available()
    }

    /// Why dispatch is stopped, if it is (it retries on its own).
    pub fn dispatch_error(&self) -> Option<String> {
        self.core.dispatcher.error()
    }

    pub(crate) fn check_open(&self) -> Result<(), StoreError> {
        if self.core.shut_down.load(Ordering::Acquire) {
            return Err(StoreError::Shutdown);
        }
        Ok(())
    }

    /// Stops the services, dispatches and flushes what is left, records the
    /// dispatch point and shuts the log down. Waiting consumers return.
    pub fn shutdown(&self) -> Result<(), StoreError> {
        self.core.shutdown(&self.life.services)
    }
}

impl Core {
    /// The message at log `offset`, or `None` if the log's cleaning deleted its
    /// record (an index entry read before the deletion).
    pub(crate) fn message_at(&self, offset: u64) -> Result<Option<StoredMessage>, StoreError> {
        match self.log.read(offset) {
            Ok(record) => Ok(Some(decode(&record)?)),
            Err(commitlog::Error::NoRecord { .. }) if offset < self.log.min_offset() => Ok(None),
            Err(err) => Err(err.into()),
        }
    }

    /// The message a queue-index entry names: [`Named::Expired`] if its
    /// record went with the log's front, [`Named::Other`] if no message of the
    /// entry's size starts there (a damaged entry).
    pub(crate) fn message_at_entry(&self, entry: &queue_index::Entry) -> Result<Named, StoreError> {
        if entry.log_offset < self.log.min_offset() {
            return Ok(Named::Expired);
        }
        if entry.log_offset.saturating_add(u64::from(entry.size)) > self.log.max_offset() {
            return Ok(Named::Other);
        }
        match self.log.read(entry.log_offset) {
            Ok(record) if record.size == u64::from(entry.size) => {
                Ok(decode(&record).map_or(Named::Other, Named::Message))
            }
            Ok(_)
            | Err(
                commitlog::Error::NoRecord { .. }
                | commitlog::Error::InsideRecord { .. }
                | commitlog::Error::BadRecord { .. },
            ) if entry.log_offset >= self.log.min_offset() => Ok(Named::Other),
            Ok(_) | Err(commitlog::Error::NoRecord { .. }) => Ok(Named::Expired), // deleted while read
            Err(err) => Err(err.into()),
        }
    }

    /// Stops `services`, flushes the log, dispatches what is left, seals the
    /// queue index to the end and records the dispatch point, then shuts the
    /// log down: the next open dispatches nothing again.
    fn shutdown(&self, services: &Mutex<Vec<ServiceThread>>) -> Result<(), StoreError> {
        if self.shut_down.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        for mut service in services.lock().drain(..) {
            service.shutdown(Duration::from_secs(30));
        }
        let result = (|| {
            self.log.flush_all()?;
            self.dispatcher.dispatch_up_to(self.log.flushed_offset())?;
            self.seal(self.dispatcher.point())?;
            self.flush_derived(true)
        })();
        // Whatever failed above, waiters return, the index's runs are
        // unmapped and the log shuts down.
        self.queues.close_all();
        self.dispatcher.queue_index.close();
        let closed = self.dispatcher.index.as_ref().map_or(Ok(()), |index| index.close());
        self.offsets.close();
        let log = self.log.shutdown();
        result?;
        closed?;
        log?;
        Ok(())
    }

    /// Puts a message's entry into the queue index from the put path, under
    /// its queue's put lock, and wakes the queue's waiters, if the queue is
    /// tailed (a consumer waits on it, or has since it came into use): with
    /// dispatch by the written end, a consumer tailing the queue reads a
    /// message as soon as its put returned, not once dispatch reached it (as
    /// a raft-engine region is read once written), even while it is busy
    /// with the messages before. A queue no one tails leaves it to dispatch,
    /// which runs beside the producers (a lone producer of a million queues
    /// put 0.72x as fast indexing every message itself). Dispatch still passes every record
    /// (its keys, the dispatch point, what a seal covers) and finds the entry
    /// there; where the put could not append it (dispatch did first, or an
    /// earlier message of the queue is not indexed yet), dispatch's own
    /// append stands, so this is an early copy, never the only one.
    fn index_on_put(&self, queue: &Queue, offset: u64, entry: Entry) {
        if !self.index_on_put || !queue.is_tailed() {
            return;
        }
        // A record still in the write buffer (the write-buffer pool) lies
        // past the log's readable end until the commit service copies it:
        // dispatch indexes it then, so no consumer is woken for a message it
        // cannot read yet.
        #[cfg(planted_bugs)]
        let unreadable_ok = crate::planted::is_active(crate::planted::Bug::WokenBeforeReadable);
        #[cfg(not(planted_bugs))]
        let unreadable_ok = false;
        if entry.log_offset.saturating_add(u64::from(entry.size)) > self.log.max_offset() && !unreadable_ok {
            return;
        }
        let index = &self.dispatcher.queue_index;
        let end = index.extent(queue.key).map_or(0, |(_, end)| end);
        // Only the queue's next entry: where one before it is not indexed
        // yet (dispatch behind), it is dispatch's to put, and a queue never
        // starts, nor goes on, past an entry it has not got (the index would
        // take either, as it does a queue's first entry after expiry).
        let indexed = if end != offset {
            end > offset
        } else {
            match index.append(queue.key, offset, entry) {
                Ok(()) => {
                    self.indexed_on_put.fetch_add(1, Ordering::Relaxed);
                    true
                }
                // Dispatch got there first: it is readable all the same.
                Err(_) => index.extent(queue.key).is_some_and(|(_, end)| end > offset),
            }
        };
        if indexed {
            queue.signal.arrive(offset.saturating_add(1));
        }
    }

    pub(crate) fn dispatcher_limit(&self) -> DispatchLimit {
        self.config.effective_dispatch_limit()
    }

    /// Seals the queue index's entries of records below `to` (a record
    /// boundary at or below the dispatch point), after flushing the log if
    /// `to` lies past its durable end: a sealed entry never names a record a
    /// crash can take back.
    pub(crate) fn seal(&self, to: u64) -> Result<(), StoreError> {
        let _one = self.sealing.lock();
        let index = &self.dispatcher.queue_index;
        if to <= index.sealed_to() {
            return Ok(());
        }
        #[cfg(planted_bugs)]
        let flush_first = !crate::planted::is_active(crate::planted::Bug::IndexBeforeRecords);
        #[cfg(not(planted_bugs))]
        let flush_first = true;
        if flush_first && to > self.log.flushed_offset() {
            self.log.flush_all()?;
        }
        index.seal(&*self.storage, to)?;
        self.sealed_mark.store(index.sealed_to(), Ordering::Release);
        Ok(())
    }

    /// The flush service's tick. Seals the queue index when dispatch has
    /// passed the end of a log segment (at that segment's end: a run per
    /// segment, deleted with it) or the active run holds
    /// `queue_index_seal_entries` (at the dispatch point). When `thorough`,
    /// also expires both indexes against the log's front, flushes the key
    /// index whole and records the dispatch checkpoint (recording after
    /// flushing is what makes the point safe to recover from: RocketMQ #678
    /// recorded first), and drops the queues no one uses; else the key index
    /// flushes once enough pages are dirty.
    pub(crate) fn flush_derived(&self, thorough: bool) -> Result<(), StoreError> {
        let point = self.dispatcher.point();
        let index = &self.dispatcher.queue_index;
        let segment = (self.log.config().mapped_file_size_commit_log as u64).max(1);
        let segment_start = point - point % segment;
        let sealed_to = index.sealed_to();
        if segment_start > sealed_to {
            // A run per segment dispatch passed (several if it ran ahead).
            let mut end = sealed_to - sealed_to % segment + segment;
            while end <= segment_start {
                self.seal(end)?;
                end += segment;
            }
        } else if index.active_entries() >= self.config.queue_index_seal_entries {
            self.seal(point)?;
        }
        let min_offset = self.log.min_offset();
        if thorough {
            self.expire(min_offset)?;
        }
        let recorded = thorough.then(|| self.dispatcher.sample(self.registry.lock().next_id()));
        if recorded.as_ref().is_some_and(|r| r.point > self.log.flushed_offset()) {
            self.log.flush_all()?;
        }
        let least_pages = if thorough { 0 } else { self.config.flush_consume_queue_least_pages };
        #[cfg(planted_bugs)]
        let key_index =
            self.dispatcher.index.as_ref().filter(|_| !crate::planted::is_active(crate::planted::Bug::IndexNotFlushed));
        #[cfg(not(planted_bugs))]
        let key_index = self.dispatcher.index.as_ref();
        if let Some(key_index) = key_index {
            key_index.flush(least_pages)?;
        }
        if let Some(recorded) = recorded {
            checkpoint::store(&*self.storage, &self.root, &recorded)?;
            self.queues.drop_idle(index);
        }
        Ok(())
    }

    /// Expires, once per move of the log's front, the queue index's runs and
    /// the key index's files wholly below `log_min` (RocketMQ's
    /// `CleanConsumeQueueService`): every queue's first offset moves past its
    /// messages the log deleted, open or not, with no file per queue to touch.
    fn expire(&self, log_min: u64) -> Result<(), StoreError> {
        if self.expired_to.load(Ordering::Acquire) >= log_min {
            return Ok(());
        }
        #[cfg(planted_bugs)]
        let log_min = if crate::planted::is_active(crate::planted::Bug::IndexExpiredEarly) {
            log_min.saturating_add(self.log.config().mapped_file_size_commit_log as u64)
        } else {
            log_min
        };
        #[cfg(planted_bugs)]
        let kept = crate::planted::is_active(crate::planted::Bug::IndexKeptAfterSegment);
        #[cfg(not(planted_bugs))]
        let kept = false;
        if !kept {
            self.dispatcher.queue_index.expire(&*self.storage, log_min)?;
        }
        if let Some(index) = &self.dispatcher.index {
            index.delete_expired(log_min)?;
        }
        self.expired_to.store(log_min, Ordering::Release);
        Ok(())
    }
}

/// What a queue-index entry names in the log.
#[derive(Debug)]
pub(crate) enum Named {
    /// A message (the caller checks it is the queue's, at the entry's offset).
    Message(StoredMessage),
    /// A record the log's cleaning deleted.
    Expired,
    /// No message of the entry's size: the entry is damaged.
    Other,
}

/// `born`, or now if it is 0.
fn born_or_now(born: u64) -> u64 {
    if born != 0 {
        return born;
    }
    store_io::epoch_ms(std::time::SystemTime::now())
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Waker};

    use commitlog::{CommitLogConfig, FlushDiskType};

    use super::*;
    use crate::{Message, Waited};

    /// `delete_topic(topic)` on a thread of its own, and a channel told
    /// when it returns (a test of a race waits on it with a bound).
    fn delete_in_background(
        store: &MessageStore,
        topic: &'static str,
    ) -> (std::thread::JoinHandle<Result<bool, StoreError>>, std::sync::mpsc::Receiver<()>) {
        let (returned, deleted) = std::sync::mpsc::channel();
        let store = store.clone();
        let deleter = std::thread::spawn(move || {
            let result = store.delete_topic(topic);
            let _ = returned.send(());
            result
        });
        (deleter, deleted)
    }

    /// A log of 64 KiB segments on a simulated disk, whose disk guard never refuses.
    fn small_log(flush: FlushDiskType) -> CommitLogConfig {
        let log = CommitLogConfig::builder()
            .mapped_file_size_commit_log(64 << 10)
            .max_message_size(4096)
            .flush_disk_type(flush)
            .build()
            .unwrap();
        CommitLogConfig { disk_space_warning_level_ratio: 100, disk_max_used_space_ratio: 100, ..log }
    }

    #[test]
    fn a_record_dispatched_across_its_topics_deletion_never_puts_a_queue_back() {
        // Dispatch is paused between a record's queue lookup and its append;
        // the deletion started then waits for it (and forgets the entry), or,
        // were it let through, would forget the queue first and dispatch
        // would put it back into the index (its table and extents) as a
        // queue of no topic.
        let store = MessageStore::open_with_storage(
            "/s",
            MessageStoreConfig::new(small_log(FlushDiskType::AsyncFlush)),
            Arc::new(store_io::sim::SimStorage::new()),
        )
        .unwrap();
        store.create_topic("t", 1).unwrap();
        let barrier = store.core.dispatcher.queue_looked_up.arm();
        store.put_message(&Message::new("t", 0, &b"m"[..])).unwrap();
        barrier.wait(); // dispatch has looked the record's queue up
        let (deleter, deleted) = delete_in_background(&store, "t");
        let returned_first = deleted.recv_timeout(Duration::from_millis(200)).is_ok();
        barrier.wait(); // dispatch goes on
        assert!(deleter.join().unwrap().unwrap());
        store.dispatch_now().unwrap();
        assert_eq!(store.stats().indexed_queues, 0, "no queue of the deleted topic is in the index");
        assert!(!returned_first, "the deletion returned while a record of the topic was being dispatched");
        store.shutdown().unwrap();
    }

    #[test]
    fn a_commit_waiting_for_dispatch_never_holds_up_the_topics_deletion() {
        // Dispatch limited to the durable end and nothing flushing: a commit
        // of an offset the queue's puts reached waits for dispatch (up to a
        // minute here). The deletion meanwhile neither waits for it nor lets
        // it commit: it closes the queue, the commit wakes and is refused.
        let mut config = MessageStoreConfig::new(small_log(FlushDiskType::AsyncFlush));
        config.log.flush.flush_interval_commit_log_ms = 3_600_000;
        config.log.flush.flush_commit_log_thorough_interval_ms = 3_600_000;
        config.log.flush.wake_flush_when_put_message = false;
        config.flush_interval_consume_queue_ms = 3_600_000;
        config.flush_consume_queue_thorough_interval_ms = 3_600_000;
        config.dispatch_limit = Some(DispatchLimit::Durable);
        config.commit_dispatch_wait_ms = 60_000;
        let store = MessageStore::open_with_storage("/s", config, Arc::new(store_io::sim::SimStorage::new())).unwrap();
        store.create_topic("t", 1).unwrap();
        store.put_message(&Message::new("t", 0, &b"not dispatched"[..])).unwrap();
        let barrier = store.core.commit_waiting.arm();
        let committer = {
            let store = store.clone();
            std::thread::spawn(move || store.commit_offset("g", "t", 0, 1))
        };
        barrier.wait(); // the commit is about to wait for dispatch
        let (deleter, deleted) = delete_in_background(&store, "t");
        let returned = deleted.recv_timeout(Duration::from_secs(20)).is_ok();
        assert!(returned, "the deletion waited for a commit waiting for dispatch");
        assert!(deleter.join().unwrap().unwrap());
        barrier.wait(); // the commit goes on
        let committed = committer.join().unwrap();
        assert!(matches!(committed, Err(StoreError::UnknownTopic { .. })), "{committed:?}");
        assert_eq!(store.committed_offsets(), vec![]);
        store.shutdown().unwrap();
    }

    #[test]
    fn a_commit_that_checked_its_topic_never_lands_after_the_topics_deletion() {
        // The commit is paused between its checks and its write; the
        // deletion started then either waits for it (and removes its offset)
        // or, were it let through, would return first and leave the commit
        // to write an offset of a deleted topic, which a topic made again
        // under the name would start with.
        let sim = store_io::sim::SimStorage::new();
        let log = small_log(FlushDiskType::SyncFlush);
        let store = MessageStore::open_with_storage("/s", MessageStoreConfig::new(log), Arc::new(sim)).unwrap();
        store.create_topic("t", 1).unwrap();
        for i in 0..4u8 {
            store.put_message(&Message::new("t", 0, vec![i])).unwrap().durability.wait().unwrap();
        }
        store.dispatch_now().unwrap();
        let barrier = store.core.commit_checked.arm();
        let committer = {
            let store = store.clone();
            std::thread::spawn(move || store.commit_offset("g", "t", 0, 3))
        };
        barrier.wait(); // the commit has checked the topic
        let (deleter, deleted) = delete_in_background(&store, "t");
        // A deletion that does not wait for the commit returns meanwhile.
        let returned_first = deleted.recv_timeout(Duration::from_millis(200)).is_ok();
        barrier.wait(); // the commit goes on
        let committed = committer.join().unwrap();
        assert!(deleter.join().unwrap().unwrap());
        assert!(!returned_first, "the deletion returned while a commit of the topic was under way");
        assert!(committed.is_ok() || matches!(committed, Err(StoreError::UnknownTopic { .. })), "{committed:?}");
        assert_eq!(store.committed_offsets(), vec![], "no offset of the deleted topic is left");
        store.create_topic("t", 1).unwrap();
        assert_eq!(store.committed_offset("g", "t", 0), None, "the topic made again has no offset");
        store.shutdown().unwrap();
    }

    /// How the waits of [`wait_across`] are ended.
    #[derive(Debug, Clone, Copy)]
    enum Ending {
        Shutdown,
        Deletion,
    }

    /// Opens a store with topic `t` of one queue and, for each way to wait on
    /// its queue (`wait_for`, `arrival`, `arrivals`, `wait_for_any`), runs
    /// the wait on a thread paused between looking up the queue's key and
    /// getting the queue, ends the waits by `ending` meanwhile, lets the
    /// thread go and checks the wait ends: with `Closed`, nothing arrived,
    /// or the error of a store shut down or a topic unknown. With
    /// `in_use`, another consumer waits on the queue from before, so it is
    /// in the table of queues in use when the waits end.
    fn wait_across(ending: Ending, in_use: bool) {
        fn ended(result: &Result<(), StoreError>) -> bool {
            matches!(result, Ok(()) | Err(StoreError::Shutdown | StoreError::UnknownTopic { .. }))
        }
        type Wait = Box<dyn FnOnce(&MessageStore) -> Result<(), StoreError> + Send>;
        let mut cx = Context::from_waker(Waker::noop());
        let waits: Vec<(&str, Wait)> = vec![
            (
                "wait_for",
                Box::new(|store| match store.wait_for("t", 0, 0, Duration::MAX)? {
                    Waited::Closed => Ok(()),
                    other => panic!("wait_for returned {other:?}"),
                }),
            ),
            (
                "arrival",
                Box::new(|store| {
                    let mut arrival = store.arrival("t", 0, 0)?;
                    let polled = Pin::new(&mut arrival).poll(&mut Context::from_waker(Waker::noop()));
                    assert_eq!(polled, std::task::Poll::Ready(Waited::Closed), "the arrival waits on");
                    Ok(())
                }),
            ),
            (
                "arrivals",
                Box::new(|store| {
                    let mut arrivals = store.arrivals(&[("t", 0, 0)])?;
                    let polled = Pin::new(&mut arrivals).poll(&mut Context::from_waker(Waker::noop()));
                    assert_eq!(polled, std::task::Poll::Ready(vec![]), "the arrivals wait on");
                    Ok(())
                }),
            ),
            (
                "wait_for_any",
                Box::new(|store| {
                    assert_eq!(store.wait_for_any(&[("t", 0, 0)], Duration::MAX)?, Vec::<usize>::new());
                    Ok(())
                }),
            ),
        ];
        for (name, wait) in waits {
            let sim = store_io::sim::SimStorage::new();
            let log = small_log(FlushDiskType::SyncFlush);
            let store = MessageStore::open_with_storage("/s", MessageStoreConfig::new(log), Arc::new(sim)).unwrap();
            store.create_topic("t", 1).unwrap();
            let mut before = in_use.then(|| store.arrival("t", 0, 0).unwrap());
            if let Some(before) = &mut before {
                assert!(Pin::new(before).poll(&mut cx).is_pending());
            }
            let barrier = store.core.queue_looked_up.arm();
            let (done_tx, done) = std::sync::mpsc::channel();
            let waiter = {
                let store = store.clone();
                std::thread::spawn(move || {
                    let _ = done_tx.send(wait(&store));
                })
            };
            barrier.wait(); // the wait has looked up its queue's key
            match ending {
                Ending::Shutdown => store.shutdown().unwrap(),
                Ending::Deletion => assert!(store.delete_topic("t").unwrap()),
            }
            barrier.wait(); // the wait goes on
                            // A bound on a failure only: the wait ends at once, or never.
            let result = done.recv_timeout(Duration::from_secs(10));
            let ended_ok = result.as_ref().is_ok_and(ended);
            assert!(ended_ok, "{name} after the {ending:?} (queue in use: {in_use}): {result:?}");
            waiter.join().unwrap();
            if let Some(before) = &mut before {
                assert_eq!(Pin::new(before).poll(&mut cx), std::task::Poll::Ready(Waited::Closed));
            }
            store.shutdown().unwrap();
        }
    }

    #[test]
    fn a_wait_that_looked_up_its_queue_before_a_shutdown_returns() {
        wait_across(Ending::Shutdown, false);
        wait_across(Ending::Shutdown, true);
    }

    #[test]
    fn a_wait_that_looked_up_its_queue_before_its_topics_deletion_returns() {
        wait_across(Ending::Deletion, false);
        wait_across(Ending::Deletion, true);
    }

    #[test]
    fn a_put_through_the_write_buffer_pool_wakes_consumers_only_once_its_record_is_readable() {
        // The record stays in the write buffer until the commit service
        // copies it into the segment (every 200 ms and 4 pages by default):
        // past the log's readable end meanwhile, so the put must not index it
        // and wake a consumer who would then fail to read it.
        let sim = store_io::sim::SimStorage::new();
        let mut log = small_log(FlushDiskType::AsyncFlush);
        log.transient_store_pool_enable = true;
        log.transient_store_pool_size = 2;
        log.flush.commit_interval_commit_log_ms = 3_600_000; // copied out of the buffer only by `flush_all`
        log.flush.commit_commit_log_thorough_interval_ms = 3_600_000;
        log.flush.wake_commit_when_put_message = false;
        let store = MessageStore::open_with_storage("/s", MessageStoreConfig::new(log), Arc::new(sim)).unwrap();
        store.create_topic("t", 1).unwrap();
        let mut cx = Context::from_waker(Waker::noop());
        let mut arrival = store.arrival("t", 0, 0).unwrap();
        assert!(Pin::new(&mut arrival).poll(&mut cx).is_pending());
        let put = store.put_message(&Message::new("t", 0, &b"in the buffer"[..])).unwrap();
        let readable = put.log_offset < store.log().max_offset();
        if Pin::new(&mut arrival).poll(&mut cx).is_ready() || readable {
            // Woken (or readable at once): the message must read.
            let got = store.get_messages(&crate::GetRequest::new("t", 0, 0));
            assert_eq!(got.map(|g| g.messages.len()).ok(), Some(1), "a woken consumer reads the message");
        }
        store.log().flush_all().unwrap();
        assert!(store.wait_for("t", 0, 0, Duration::from_secs(10)).unwrap().arrived());
        let got = store.get_messages(&crate::GetRequest::new("t", 0, 0)).unwrap();
        assert_eq!(&got.messages[0].body[..], b"in the buffer");
        store.shutdown().unwrap();
    }

    #[test]
    fn a_record_with_the_last_queue_offset_is_skipped_and_counted_never_a_panic() {
        // No put makes one (a queue's end would pass u64::MAX), but a record
        // appended to the log directly can: dispatch skips it as it does a
        // record that is not a message, and the store still opens.
        let sim = store_io::sim::SimStorage::new();
        let log = small_log(FlushDiskType::SyncFlush);
        let config = MessageStoreConfig::new(log);
        let storage: Arc<dyn Storage> = Arc::new(sim);
        let store = MessageStore::open_with_storage("/s", config.clone(), Arc::clone(&storage)).unwrap();
        store.create_topic("t", 2).unwrap();
        let bad = |queue| {
            let mut bad = Message::new("t", queue, &b"bad"[..]).encode(&config.limits, 1).unwrap();
            set_queue_offset(&mut bad, u64::MAX);
            store.log().append(&bad).unwrap().durability.wait().unwrap();
        };
        // The first record of queue 0; one after a message in queue 1.
        bad(0);
        store.put_message(&Message::new("t", 1, &b"0"[..])).unwrap().durability.wait().unwrap();
        bad(1);
        store.put_message(&Message::new("t", 1, &b"1"[..])).unwrap().durability.wait().unwrap();
        store.put_message(&Message::new("t", 0, &b"0"[..])).unwrap().durability.wait().unwrap();
        store.dispatch_now().unwrap();
        let stats = store.stats();
        assert_eq!((stats.dispatch_error, stats.records_skipped), (None, 2));
        assert_eq!((store.queue_range("t", 0).unwrap(), store.queue_range("t", 1).unwrap()), (0..1, 0..2));
        store.shutdown().unwrap();
        let reopened = MessageStore::open_with_storage("/s", config.clone(), storage).unwrap();
        assert_eq!((reopened.queue_range("t", 0).unwrap(), reopened.queue_range("t", 1).unwrap()), (0..1, 0..2));
        reopened.shutdown().unwrap();
    }

    #[test]
    fn a_put_indexes_only_its_queues_next_entry_never_one_past_what_dispatch_has_not_put() {
        let sim = store_io::sim::SimStorage::new();
        let log = small_log(FlushDiskType::AsyncFlush);
        let store = MessageStore::open_with_storage("/s", MessageStoreConfig::new(log), Arc::new(sim)).unwrap();
        store.create_topic("t", 1).unwrap();
        let mut cx = Context::from_waker(Waker::noop());
        {
            let _held = store.core.dispatcher.hold();
            // Offset 0 with no one waiting: left to dispatch, which is held.
            store.put_message(&Message::new("t", 0, &b"0"[..])).unwrap();
            // Offset 1 with a consumer waiting: offset 0 is not indexed, so
            // the put must not start the queue at 1 (dispatch would then
            // meet offset 0 past the queue's end and stop).
            let mut arrival = store.arrival("t", 0, 1).unwrap();
            assert!(Pin::new(&mut arrival).poll(&mut cx).is_pending());
            store.put_message(&Message::new("t", 0, &b"1"[..])).unwrap();
            assert_eq!(store.stats().entries_indexed_on_put, 0);
            assert_eq!(store.queue_range("t", 0).unwrap(), 0..0);
        }
        store.dispatch_now().unwrap();
        assert_eq!((store.stats().dispatch_error, store.queue_range("t", 0).unwrap()), (None, 0..2));
        // Caught up, the next put with a consumer waiting indexes itself.
        let mut arrival = store.arrival("t", 0, 2).unwrap();
        assert!(Pin::new(&mut arrival).poll(&mut cx).is_pending());
        store.put_message(&Message::new("t", 0, &b"2"[..])).unwrap();
        assert!(Pin::new(&mut arrival).poll(&mut cx).is_ready());
        assert_eq!(store.queue_range("t", 0).unwrap(), 0..3);
        store.shutdown().unwrap();
    }
}
