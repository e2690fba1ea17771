//! The consumer offsets' operations on a store: commits (waiting for dispatch
//! where the queue's puts are ahead of it), resets, removals, reads.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Removal, Staged};
use crate::consumer::Scope;
use crate::error::StoreError;
use crate::get::TimeBound;
use crate::poll::Arrival;
use crate::queues::Queue;
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
    /// The group's committed offset moved by this many messages (back when
    /// negative), clamped to each queue's `[min, end]`; from the queue's
    /// first offset where the group has none.
    ShiftBy(i64),
}

/// One queue of a planned offset reset ([`MessageStore::plan_offsets_reset`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct OffsetReset {
    /// The queue.
    pub queue_id: u32,
    /// The group's committed offset now, if it has one.
    pub current: Option<u64>,
    /// Where the reset moves it.
    pub offset: u64,
    /// The offset asked for, where it was outside the queue's `[min, end]`
    /// and `offset` is it clamped.
    pub clamped_from: Option<i128>,
    /// The queue's first offset whose message the log holds.
    pub min_offset: u64,
    /// The queue's end.
    pub max_offset: u64,
}

impl MessageStore {
    /// Commits `group`'s offset in `topic`'s queue (the next offset it will
    /// consume); durable when this returns. Refused beyond the queue's end; a
    /// lower offset than the committed one is taken (a reset: the group
    /// consumes again from there). A commit costs one small journal record, and
    /// commits from many threads share syncs.
    ///
    /// This is a commit from outside the group's [`Consumer`](crate::Consumer)s
    /// (a member commits its own position with
    /// [`Consumer::commit`](crate::Consumer::commit)): once it is taken, the
    /// member in this process that owns the queue starts it again from the
    /// committed offset (even one equal to what the member last committed),
    /// and none commits over it; the member's other queues keep their
    /// positions. One refused changes nothing.
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
        self.commit_offsets_of(group, commits, None).map(drop)
    }

    /// Commits `group`'s offset in `topic`'s queue as
    /// [`commit_offset`](Self::commit_offset) does, as a future: it waits for
    /// dispatch and for the journal's sync without blocking the thread that
    /// polls it (the store's offsets sync service syncs for every commit
    /// waiting so; commits from many tasks share syncs). The wait for
    /// dispatch has no timer of its own here: wrap the future in the
    /// runtime's timeout if dispatch may be stopped.
    ///
    /// ```
    /// # use message_store::{Message, MessageStore, MessageStoreConfig};
    /// # let dir = tempfile::tempdir()?;
    /// # let store = MessageStore::open(dir.path(), MessageStoreConfig::default())?;
    /// # store.create_topic("orders", 1)?;
    /// # store.put_message(&Message::new("orders", 0, "one"))?;
    /// let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    /// runtime.block_on(store.commit_offset_async("billing", "orders", 0, 1))?;
    /// assert_eq!(store.committed_offset("billing", "orders", 0)?, Some(1));
    /// # store.shutdown()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn commit_offset_async(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        offset: u64,
    ) -> Result<(), StoreError> {
        self.commit_offsets_async(group, &[(topic, queue_id, offset)]).await
    }

    /// [`commit_offsets`](Self::commit_offsets) as a future, as
    /// [`commit_offset_async`](Self::commit_offset_async) is.
    pub async fn commit_offsets_async(&self, group: &str, commits: &[(&str, u32, u64)]) -> Result<(), StoreError> {
        self.check_open()?;
        validate_group(group)?;
        for &(topic, queue_id, offset) in commits {
            if let Some(queue) = self.dispatch_wait_of(topic, queue_id, offset)? {
                Arrival::of(queue, offset - 1).await;
            }
        }
        let (_, staged) = self.stage_offsets_of(group, commits, None)?;
        self.core.offsets.durable(staged).await
    }

    /// [`commit_offsets`](Self::commit_offsets); with `topic_ids` (a
    /// consumer's: the id of the topic each commit's position was read
    /// from), a commit whose topic was deleted since, or deleted and made
    /// again under its name, is left out instead of refused (or, worse,
    /// taken as a position in the new topic). Returns whether each was taken.
    pub(crate) fn commit_offsets_of(
        &self,
        group: &str,
        commits: &[(&str, u32, u64)],
        topic_ids: Option<&[u32]>,
    ) -> Result<Vec<bool>, StoreError> {
        let (taken, staged) = self.stage_offsets_of(group, commits, topic_ids)?;
        self.core.offsets.wait_staged(staged)?;
        Ok(taken)
    }

    /// The first half of [`commit_offsets_of`](Self::commit_offsets_of):
    /// waits for dispatch where a commit needs it, checks, sets the offsets
    /// in the table (seen at once) and appends their records; the sync is
    /// the caller's to wait for.
    pub(crate) fn stage_offsets_of(
        &self,
        group: &str,
        commits: &[(&str, u32, u64)],
        topic_ids: Option<&[u32]>,
    ) -> Result<(Vec<bool>, Staged), StoreError> {
        self.check_open()?;
        validate_group(group)?;
        let live = |i: usize, topic: &str| {
            topic_ids.is_none_or(|ids| self.core.queues.topic(topic).is_some_and(|entry| entry.id == ids[i]))
        };
        // Waits for dispatch first, outside the topics' lock: a deletion
        // meanwhile closes the queue and wakes the wait.
        for (i, &(topic, queue_id, offset)) in commits.iter().enumerate() {
            match self.wait_for_dispatch_of(topic, queue_id, offset) {
                Err(StoreError::UnknownTopic { .. } | StoreError::UnknownQueue { .. }) if !live(i, topic) => {}
                other => other?,
            }
        }
        let check_and_stage = || self.check_and_stage(group, commits, topic_ids, live);
        match topic_ids {
            // A member's commit, under its group's lock.
            Some(_) => check_and_stage(),
            // A commit from outside the group's members (`commit_offset`'s
            // doc): under the group's lock, so none commits over it, and
            // each queue whose committed offset it moved starts again from
            // it. The group's lock first, then the topics' (as a member's
            // commit).
            None => self.core.consumer_groups.while_changing(group, Scope::Commits(commits), check_and_stage),
        }
    }

    /// The rest of [`stage_offsets_of`](Self::stage_offsets_of) once
    /// dispatch was waited for: under the topics' lock, checks each commit
    /// (`live` says whether its topic is the one it was read from), sets the
    /// offsets in the table and appends their records.
    fn check_and_stage(
        &self,
        group: &str,
        commits: &[(&str, u32, u64)],
        topic_ids: Option<&[u32]>,
        live: impl Fn(usize, &str) -> bool,
    ) -> Result<(Vec<bool>, Staged), StoreError> {
        let _life = self.core.topic_life.read();
        let mut taken = Vec::with_capacity(commits.len());
        for (i, &(topic, queue_id, offset)) in commits.iter().enumerate() {
            if !live(i, topic) {
                taken.push(false);
                continue;
            }
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
            taken.push(true);
        }
        #[cfg(test)]
        self.core.commit_checked.reached();
        let kept: Vec<(&str, u32, u64)> = commits.iter().zip(&taken).filter(|(_, t)| **t).map(|(c, _)| *c).collect();
        let staged = if !kept.is_empty() || topic_ids.is_none() {
            self.core.offsets.stage_commits(&*self.core.storage, group, &kept)?
        } else {
            Staged::nothing()
        };
        Ok((taken, staged))
    }

    /// Waits, for a commit of `offset` in `topic`'s queue, until dispatch
    /// has reached it if the queue's puts have (or the wait's bound has
    /// passed, or the queue was closed).
    fn wait_for_dispatch_of(&self, topic: &str, queue_id: u32, offset: u64) -> Result<(), StoreError> {
        let Some(queue) = self.dispatch_wait_of(topic, queue_id, offset)? else { return Ok(()) };
        #[cfg(test)]
        self.core.commit_waiting.reached();
        let deadline = Instant::now().checked_add(Duration::from_millis(self.core.config.commit_dispatch_wait_ms));
        queue.signal.wait_past(offset - 1, deadline);
        Ok(())
    }

    /// The queue a commit of `offset` in `topic`'s queue waits on: one the
    /// queue's puts have reached and dispatch has not (`offset` > 0 then).
    fn dispatch_wait_of(&self, topic: &str, queue_id: u32, offset: u64) -> Result<Option<Arc<Queue>>, StoreError> {
        let key = self.queue_key_of(topic, queue_id)?;
        let end = self.core.dispatcher.queue_index.extent(key).map_or(0, |(_, end)| end);
        if offset <= end || self.core.config.commit_dispatch_wait_ms == 0 {
            return Ok(None);
        }
        let Some(queue) = self.core.queues.live(key) else { return Ok(None) };
        let put_end = *queue.next_offset.lock();
        if put_end.is_none_or(|put_end| offset > put_end) {
            return Ok(None);
        }
        Ok(Some(queue))
    }

    /// Where [`reset_consumer_offsets`](Self::reset_consumer_offsets) would
    /// move `group`'s offsets in `topic` (every queue, or only `queue_id`),
    /// changing nothing: each queue's current offset, the new one, and
    /// whether the target was clamped to the queue's range (a dry run, as
    /// `kafka-consumer-groups --reset-offsets` prints by default).
    pub fn plan_offsets_reset(
        &self,
        group: &str,
        topic: &str,
        queue_id: Option<u32>,
        to: ResetTo,
    ) -> Result<Vec<OffsetReset>, StoreError> {
        self.check_open()?;
        validate_group(group)?;
        let queues =
            self.core.queues.topic(topic).ok_or_else(|| StoreError::UnknownTopic { topic: topic.into() })?.queues;
        // A queue the topic does not have is refused by `queue_range` below.
        let ids: Vec<u32> = queue_id.map_or_else(|| (0..queues).collect(), |id| vec![id]);
        let mut plan = Vec::with_capacity(ids.len());
        for id in ids {
            let range = self.queue_range(topic, id)?;
            let current = self.core.offsets.get(group, topic, id);
            let wanted: i128 = match to {
                ResetTo::Earliest => range.start.into(),
                ResetTo::Latest => range.end.into(),
                ResetTo::Offset(offset) => offset.into(),
                ResetTo::Time(ms) => self.offset_by_time(topic, id, ms, TimeBound::Lower)?.into(),
                ResetTo::ShiftBy(by) => i128::from(current.unwrap_or(range.start)) + i128::from(by),
            };
            let offset = u64::try_from(wanted.clamp(range.start.into(), range.end.into())).expect("within the range");
            let clamped_from = (i128::from(offset) != wanted).then_some(wanted);
            plan.push(OffsetReset {
                queue_id: id,
                current,
                offset,
                clamped_from,
                min_offset: range.start,
                max_offset: range.end,
            });
        }
        Ok(plan)
    }

    /// Moves `group`'s offsets in `topic` (every queue, or only `queue_id`)
    /// to `to` (RocketMQ's `resetOffset` and `resetOffsetByTimestamp`), with
    /// one sync; durable when this returns. Returns each queue's new offset
    /// (each clamped to its queue's range: [`plan_offsets_reset`](Self::plan_offsets_reset)
    /// says where, first).
    pub fn reset_consumer_offsets(
        &self,
        group: &str,
        topic: &str,
        queue_id: Option<u32>,
        to: ResetTo,
    ) -> Result<Vec<(u32, u64)>, StoreError> {
        // The group's members here start from the reset, none commits over
        // it. The group's lock first, then the topics' (as a member's commit).
        // The sync is waited for after the lock: a commit of the group
        // meanwhile (a member's, or an async one's first poll) waits for the
        // reset's staging only.
        let scope = queue_id.map_or(Scope::Topic(topic), |queue| Scope::Queue(topic, queue));
        let (plan, staged) = self.core.consumer_groups.while_changing(group, scope, || {
            let _life = self.core.topic_life.read();
            let plan = self.plan_offsets_reset(group, topic, queue_id, to)?;
            let commits: Vec<(&str, u32, u64)> = plan.iter().map(|r| (topic, r.queue_id, r.offset)).collect();
            let staged = self.core.offsets.stage_commits(&*self.core.storage, group, &commits)?;
            Ok::<_, StoreError>((plan, staged))
        })?;
        self.core.offsets.wait_staged(staged)?;
        tracing::info!(group, topic, ?queue_id, ?to, "consumer offsets reset");
        Ok(plan.iter().map(|r| (r.queue_id, r.offset)).collect())
    }

    /// Whether `group` has a committed offset anywhere.
    pub fn group_exists(&self, group: &str) -> bool {
        self.core.offsets.all().iter().any(|((g, _, _), _)| g == group)
    }

    /// Removes `group`'s committed offsets: in every topic (RocketMQ's
    /// `removeOffset`), or in `topic` only. Durable when this returns; returns
    /// how many were removed. The group then consumes as a new one.
    pub fn remove_consumer_offsets(&self, group: &str, topic: Option<&str>) -> Result<usize, StoreError> {
        self.check_open()?;
        validate_group(group)?;
        let storage = &*self.core.storage;
        let (removal, scope) = match topic {
            Some(topic) => (Removal::GroupTopic(group, topic), Scope::Topic(topic)),
            None => (Removal::Group(group), Scope::Group),
        };
        // The sync after the lock, as a reset's.
        let (removed, staged) = self
            .core
            .consumer_groups
            .while_changing(group, scope, || self.core.offsets.stage_removal(storage, removal))?;
        self.core.offsets.wait_staged(staged)?;
        Ok(removed)
    }

    /// Removes every group's committed offsets in `topic` (RocketMQ's
    /// `cleanOffsetByTopic`). Durable when this returns; returns how many were
    /// removed. Members of groups in this process start again as a new group
    /// would (their [`StartFrom`](crate::StartFrom)), and none commits over
    /// the removal, as after [`remove_consumer_offsets`](Self::remove_consumer_offsets).
    pub fn clean_offsets_by_topic(&self, topic: &str) -> Result<usize, StoreError> {
        self.check_open()?;
        validate_topic(topic)?;
        let storage = &*self.core.storage;
        let (removed, staged) = self
            .core
            .consumer_groups
            .while_changing_all(topic, || self.core.offsets.stage_removal(storage, Removal::Topic(topic)))?;
        self.core.offsets.wait_staged(staged)?;
        Ok(removed)
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
