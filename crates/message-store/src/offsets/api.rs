//! The consumer offsets' operations on a store: commits (waiting for dispatch
//! where the queue's puts are ahead of it), resets, removals, reads.

use std::time::{Duration, Instant};

use crate::error::StoreError;
use crate::get::TimeBound;
use crate::store::MessageStore;
use crate::topic::{validate_group, validate_topic};

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
    /// One entry of the offsets table: ((group, topic, queue), offset).
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

impl MessageStore {
    /// Commits `group`'s offset in `topic`'s queue (the next offset it will
    /// consume); durable when this returns. Refused beyond the queue's end; a
    /// lower offset than the committed one is taken (a reset: the group
    /// consumes again from there). A commit costs one small journal record, and
    /// commits from many threads share syncs.
    ///
    /// An offset the queue's puts have reached but dispatch has not yet (a
    /// commit right after a put) waits for dispatch, up to
    /// [`commit_dispatch_wait_ms`](crate::MessageStoreConfig::commit_dispatch_wait_ms):
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
                ResetTo::Time(ms) => self.offset_by_time(topic, id, ms, TimeBound::Lower)?,
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

    /// `group`'s committed offset in `topic`'s queue: `None` if it committed
    /// none there. A name no group or topic may have is refused
    /// ([`StoreError::Name`]), as is a store shut down
    /// ([`StoreError::Shutdown`]).
    pub fn committed_offset(&self, group: &str, topic: &str, queue_id: u32) -> Result<Option<u64>, StoreError> {
        self.check_open()?;
        validate_group(group)?;
        validate_topic(topic)?;
        Ok(self.core.offsets.get(group, topic, queue_id))
    }

    /// Every committed offset.
    pub fn committed_offsets(&self) -> Vec<CommittedOffset> {
        self.core.offsets.all().into_iter().map(CommittedOffset::new).collect()
    }
}
