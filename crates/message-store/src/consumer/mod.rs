//! The consumer ([`Consumer`]: a member of a consumer group, its queues, its
//! fetch, hand-out and commit, its waits and its `Stream`); `config.rs` its
//! settings; `group.rs` how a group's members in this process share the
//! queues.

mod config;
mod group;

use std::collections::{HashMap, HashSet, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use futures_core::Stream;

use crate::get::{GetRequest, GetStatus, TagFilter, TimeBound};
use crate::message::StoredMessage;
use crate::offsets::Staged;
use crate::poll::ThreadWaker;
use crate::queues::Queue;
use crate::signal::new_token;
use crate::topic::{validate_group, validate_topic};
use crate::{MessageStore, StoreError};

pub use config::{ConsumerConfig, OutOfRange, StartFrom};
pub(crate) use group::{ConsumerGroups, Scope};
use group::{Group, Members};

/// A queue the consumer owns.
#[derive(Debug)]
struct Owned {
    topic: Arc<str>,
    /// The topic's id when the share was taken: a topic deleted and made
    /// again under its name has another.
    topic_id: u32,
    queue_id: u32,
    /// The queue, held (so its signal is the one puts wake).
    queue: Arc<Queue>,
    /// Where the next read starts; `None` until resolved (the committed
    /// offset, else where [`StartFrom`] says).
    next: Option<u64>,
    /// Where the group's offset goes at the next commit: past every message
    /// handed out (and every one the filter passed over).
    handed: u64,
    /// What this consumer last committed (or found committed).
    committed: u64,
}

/// A message fetched and not handed out yet.
#[derive(Debug)]
struct Fetched {
    /// Its queue, as an index into `owned` when fetched.
    queue: (Arc<str>, u32),
    message: StoredMessage,
    /// Its queue's position once it is handed out: past it, and for the
    /// last of a read, past what the filter passed over after it.
    then: u64,
}

/// A member of a consumer group (RocketMQ's lite pull consumer, rdkafka's
/// `StreamConsumer`): it follows topics, takes its share of their queues,
/// waits on all of them at once and hands out their messages as a blocking
/// batch ([`poll`](Self::poll)), an [`Iterator`] ([`messages`](Self::messages))
/// or a `futures` [`Stream`]; it commits what it handed out, on request
/// ([`commit`](Self::commit)) or on an interval, in one sync. The members of
/// one group in this process divide the queues between them; when one joins
/// or leaves, the queues move with their committed offsets. Made by
/// [`MessageStore::consumer`]; leaves its group when dropped (without
/// committing: [`close`](Self::close) commits first).
///
/// Delivery is at least once: a message handed out and not committed before
/// its queue moved to another member (or before a crash) is handed out again,
/// by the queue's next owner, from the committed offset. A committed message
/// is never handed out again, and none is skipped: a member hands out and
/// commits only while the group's generation is the one its share came from
/// (both under the group's lock), so the next owner starts where the last
/// commit left the queue.
///
/// ```
/// use std::time::Duration;
/// use message_store::{ConsumerConfig, Message, MessageStore, MessageStoreConfig, TagFilter};
///
/// let dir = tempfile::tempdir()?;
/// let store = MessageStore::open(dir.path(), MessageStoreConfig::default())?;
/// store.create_topic("orders", 4)?;
/// for i in 0..8u32 {
///     store.put_message(&Message::new("orders", i % 4, format!("order {i}")))?;
/// }
/// let mut consumer = store.consumer("billing", ConsumerConfig::default())?;
/// consumer.subscribe("orders", TagFilter::All)?;
/// let mut seen = 0;
/// for message in consumer.messages(Duration::from_millis(200)) {
///     let message = message?;
///     assert!(message.body.starts_with(b"order "));
///     seen += 1;
/// }
/// assert_eq!(seen, 8);
/// consumer.commit()?; // at least once: commit what was processed
/// consumer.close()?;
/// store.shutdown()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Consumer {
    store: MessageStore,
    name: String,
    group: Arc<Group>,
    id: u64,
    config: ConsumerConfig,
    /// The topics followed, each with its filter.
    topics: Vec<(Arc<str>, TagFilter)>,
    /// The generation `owned` is the share of; `None` before the first.
    generation: Option<u64>,
    /// The group's resets this member's positions have taken in.
    resets: u64,
    owned: Vec<Owned>,
    by_queue: HashMap<(Arc<str>, u32), usize>,
    fetched: VecDeque<Fetched>,
    /// The owned queue the next fetch starts at (they take turns).
    cursor: usize,
    last_commit: Instant,
    /// This consumer's registration with its queues' signals.
    token: u64,
    /// An error ended the iterator or stream (it returned it once).
    ended: bool,
    /// Commits staged (in the table, appended to the journal) whose sync
    /// nothing has waited for yet: nothing is handed out before it is
    /// durable (a start committed must be, before messages after it go out).
    unsynced: Option<Staged>,
}

impl MessageStore {
    /// A new member of consumer group `group`, following no topic yet
    /// ([`Consumer::subscribe`]). Several members of one group (in this
    /// process) share the queues of the topics they follow.
    pub fn consumer(&self, group: &str, config: ConsumerConfig) -> Result<Consumer, StoreError> {
        self.check_open()?;
        validate_group(group)?;
        let (shared, id) = self.core.consumer_groups.join(group);
        Ok(Consumer {
            store: self.clone(),
            name: group.to_string(),
            group: shared,
            id,
            config: ConsumerConfig { max_batch: config.max_batch.max(1), ..config },
            topics: Vec::new(),
            generation: None,
            resets: 0,
            owned: Vec::new(),
            by_queue: HashMap::new(),
            fetched: VecDeque::new(),
            cursor: 0,
            last_commit: Instant::now(),
            token: new_token(),
            ended: false,
            unsynced: None,
        })
    }
}

impl Consumer {
    /// Follows `topic`, with `filter` (a topic followed already takes the new
    /// filter from its next read). The group's members share its queues again.
    pub fn subscribe(&mut self, topic: &str, filter: TagFilter) -> Result<(), StoreError> {
        self.store.check_open()?;
        validate_topic(topic)?;
        if self.store.core.queues.topic(topic).is_none() {
            return Err(StoreError::UnknownTopic { topic: topic.to_string() });
        }
        match self.topics.iter_mut().find(|(t, _)| &**t == topic) {
            Some((_, known)) => *known = filter,
            None => {
                self.topics.push((Arc::from(topic), filter));
                self.group.follow(self.id, topic, true);
            }
        }
        Ok(())
    }

    /// Stops following `topic`; its queues go to the group's other members
    /// (from the committed offsets: commit first to keep what was handed out).
    pub fn unsubscribe(&mut self, topic: &str) {
        if let Some(at) = self.topics.iter().position(|(t, _)| &**t == topic) {
            self.topics.remove(at);
            self.group.follow(self.id, topic, false);
        }
    }

    /// The topics followed.
    pub fn subscriptions(&self) -> Vec<String> {
        self.topics.iter().map(|(t, _)| t.to_string()).collect()
    }

    /// The queues this member read from at its last poll, `(topic, queue)`.
    pub fn assignment(&self) -> Vec<(String, u32)> {
        self.owned.iter().map(|o| (o.topic.to_string(), o.queue_id)).collect()
    }

    /// Up to [`max_batch`](ConsumerConfig::max_batch) messages of the queues
    /// this member owns, waiting up to `timeout` for one; empty after the
    /// timeout, or when the consumer follows no topic (every topic it
    /// followed deleted). Commits first if [`auto_commit`](ConsumerConfig::auto_commit)
    /// is due. Fails if the store shut down.
    pub fn poll(&mut self, timeout: Duration) -> Result<Vec<StoredMessage>, StoreError> {
        let deadline = Instant::now().checked_add(timeout);
        let max = self.config.max_batch;
        loop {
            let batch = ready(self.step(max, None))?;
            if !batch.is_empty() || self.topics.is_empty() {
                return Ok(batch);
            }
            if !self.wait(deadline) {
                return Ok(Vec::new());
            }
        }
    }

    /// The messages one at a time, each call waiting up to `timeout` for the
    /// next: the iterator ends when one does not come in time, or the
    /// consumer follows no topic. An error (the store shut down) is returned
    /// once, and ends it.
    pub fn messages(&mut self, timeout: Duration) -> Messages<'_> {
        self.ended = false;
        Messages { consumer: self, timeout }
    }

    /// Commits, in one sync, the group's offset in each queue this member
    /// owns past everything it handed out. A queue that moved to another
    /// member since is not committed (its owner commits it; what this member
    /// handed out of it is handed out again). The offsets are set under the
    /// group's lock; the sync is waited for after it, in this thread.
    pub fn commit(&mut self) -> Result<(), StoreError> {
        self.stage_commit()?;
        ready(self.settle(None))
    }

    /// [`commit`](Self::commit) as a future: the sync is the store's offsets
    /// sync service's, shared with every commit waiting so, and the thread
    /// that polls it never blocks on it.
    pub async fn commit_async(&mut self) -> Result<(), StoreError> {
        self.stage_commit()?;
        std::future::poll_fn(|cx| self.settle(Some(cx))).await
    }

    /// Sets the group's offsets of the owned queues past what was handed
    /// out (under the group's lock), appending their records; the sync is
    /// left in `unsynced`.
    fn stage_commit(&mut self) -> Result<(), StoreError> {
        self.forget_deleted_topics();
        let group = Arc::clone(&self.group);
        let mut members = group.lock();
        self.take_share(&mut members)?;
        self.last_commit = Instant::now();
        let due: Vec<usize> = (0..self.owned.len())
            .filter(|&i| {
                let o = &self.owned[i];
                o.next.is_some() && o.handed != o.committed && !o.queue.signal.is_closed()
            })
            .collect();
        if due.is_empty() {
            // Nothing new: the offsets the table holds for this member's
            // queues are made durable (one an earlier commit staged may not
            // be yet, or its sync failed).
            let staged = self.store.core.offsets.stage_table(&*self.store.core.storage)?;
            self.stage(staged);
            return Ok(());
        }
        let commits: Vec<(&str, u32, u64)> =
            due.iter().map(|&i| &self.owned[i]).map(|o| (&*o.topic, o.queue_id, o.handed)).collect();
        let ids: Vec<u32> = due.iter().map(|&i| self.owned[i].topic_id).collect();
        // Under the group's lock: no other member takes these queues (and
        // reads their committed offsets) before the commit is in. A queue
        // whose topic was deleted since (or made again) is left out.
        let (taken, staged) = self.store.stage_offsets_of(&self.name, &commits, Some(&ids))?;
        self.stage(staged);
        for (&i, taken) in due.iter().zip(taken) {
            if taken {
                self.owned[i].committed = self.owned[i].handed;
            }
        }
        Ok(())
    }

    /// Adds `staged` to what is waiting for a sync.
    fn stage(&mut self, staged: Staged) {
        self.unsynced = Some(match self.unsynced.take() {
            Some(earlier) => earlier.max(staged),
            None => staged,
        });
    }

    /// Waits until the commits staged are durable: blocking (in this
    /// thread) without a context, else by the offsets sync service. If
    /// their sync failed, every owned queue starts again from the table's
    /// offsets (made durable first) at the next round: nothing is handed out
    /// past a start no sync kept, and a commit tried again is not answered
    /// before it is durable.
    fn settle(&mut self, cx: Option<&mut Context<'_>>) -> Poll<Result<(), StoreError>> {
        let offsets = &self.store.core.offsets;
        let done = match (cx, self.unsynced.take()) {
            (_, None) => Ok(()),
            (None, Some(staged)) => offsets.wait_staged(staged),
            (Some(cx), Some(staged)) => match offsets.poll_durable(&staged, self.token, cx) {
                Poll::Ready(done) => done,
                Poll::Pending => {
                    self.unsynced = Some(staged);
                    return Poll::Pending;
                }
            },
        };
        if done.is_err() {
            for owned in &mut self.owned {
                owned.next = None;
            }
            self.fetched.clear();
        }
        Poll::Ready(done)
    }

    /// Commits what was handed out (with auto-commit on) and leaves the
    /// group: its queues go to the other members.
    pub fn close(mut self) -> Result<(), StoreError> {
        if self.commits_on_close() {
            self.commit()?;
        }
        Ok(())
    }

    /// [`close`](Self::close), its commit as a future
    /// ([`commit_async`](Self::commit_async)).
    pub async fn close_async(mut self) -> Result<(), StoreError> {
        if self.commits_on_close() {
            self.commit_async().await?;
        }
        Ok(())
    }

    /// Whether closing commits: with auto-commit on, in a store not shut down.
    fn commits_on_close(&self) -> bool {
        self.config.auto_commit.is_some() && !self.store.core.shut_down.load(std::sync::atomic::Ordering::Acquire)
    }

    /// One round: commits if due, takes the share and resolves where new
    /// queues start, waits for those commits' sync (blocking without a
    /// context; pending, the sync service asked, with one), reads the owned
    /// queues if nothing is fetched, and hands out up to `max` messages.
    fn step(&mut self, max: usize, cx: Option<&mut Context<'_>>) -> Poll<Result<Vec<StoredMessage>, StoreError>> {
        let staged = (|| {
            self.store.check_open()?;
            self.forget_deleted_topics();
            if self.config.auto_commit.is_some_and(|every| self.last_commit.elapsed() >= every) {
                self.stage_commit()?;
            }
            let group = Arc::clone(&self.group);
            let mut members = group.lock();
            self.take_share(&mut members)?;
            self.resolve_starts()
        })();
        if let Err(err) = staged {
            return Poll::Ready(Err(err));
        }
        match self.settle(cx) {
            Poll::Ready(Ok(())) => {}
            other => return other.map(|done| done.map(|()| Vec::new())),
        }
        Poll::Ready((|| {
            if self.fetched.is_empty() {
                self.fetch()?;
            }
            self.hand_out(max)
        })())
    }

    /// Stops following the topics deleted since the last round, and takes
    /// its share again if a queue it holds was closed (its topic deleted and
    /// made again under the name: a new queue).
    fn forget_deleted_topics(&mut self) {
        let queues = &self.store.core.queues;
        let deleted: Vec<Arc<str>> =
            self.topics.iter().filter(|(t, _)| queues.topic(t).is_none()).map(|(t, _)| Arc::clone(t)).collect();
        for topic in deleted {
            tracing::info!(group = %self.name, %topic, "consumer: topic deleted; no longer followed");
            self.unsubscribe(&topic);
        }
        if self.owned.iter().any(|o| o.queue.signal.is_closed()) {
            self.generation = None;
        }
    }

    /// Takes this member's share of its topics' queues if the group changed
    /// since it last did: keeps the queues it still owns (and where it is in
    /// them), adds the new ones (their start resolved before a read), drops
    /// the others with what was fetched of them. A queue kept whose committed
    /// offset is not the one this member last knew was another member's
    /// meanwhile (a change this member never saw, between two of its
    /// rounds): it starts again from the committed offset, as a new one.
    fn take_share(&mut self, members: &mut Members) -> Result<(), StoreError> {
        if self.generation == Some(members.generation()) {
            return Ok(());
        }
        let mut before: HashMap<(Arc<str>, u32), Owned> =
            self.owned.drain(..).map(|o| ((Arc::clone(&o.topic), o.queue_id), o)).collect();
        // Queues whose fetched messages go: new ones (of a topic made again,
        // a fetch may have read the new topic at the old one's position) and
        // ones starting again from the committed offset.
        let mut restarted: HashSet<(Arc<str>, u32)> = HashSet::new();
        for (topic, _) in &self.topics {
            let Some(entry) = self.store.core.queues.topic(topic) else { continue };
            for queue_id in members.share(self.id, topic, entry.queues) {
                let key = (Arc::clone(topic), queue_id);
                let kept = match before.remove(&key) {
                    Some(o) if o.topic_id == entry.id && !o.queue.signal.is_closed() => Some(o),
                    Some(unfit) => {
                        unfit.queue.signal.forget(self.token);
                        None
                    }
                    None => None,
                };
                let owned = match kept {
                    Some(mut owned) => {
                        if owned.next.is_some()
                            && (members.reset_since(topic, queue_id, self.resets)
                                || self.store.core.offsets.get(&self.name, topic, queue_id) != Some(owned.committed))
                        {
                            owned.next = None;
                            restarted.insert(key);
                        }
                        owned
                    }
                    None => match self.store.queue(topic, queue_id) {
                        Ok(queue) => {
                            restarted.insert(key);
                            let topic = Arc::clone(topic);
                            Owned { topic, topic_id: entry.id, queue_id, queue, next: None, handed: 0, committed: 0 }
                        }
                        // Deleted meanwhile: the next read drops the topic.
                        Err(StoreError::UnknownTopic { .. } | StoreError::UnknownQueue { .. }) => continue,
                        Err(err) => return Err(err),
                    },
                };
                self.owned.push(owned);
            }
        }
        for gone in before.values() {
            gone.queue.signal.forget(self.token);
        }
        self.by_queue = self.owned.iter().enumerate().map(|(i, o)| ((Arc::clone(&o.topic), o.queue_id), i)).collect();
        let by_queue = &self.by_queue;
        self.fetched.retain(|f| by_queue.contains_key(&f.queue) && !restarted.contains(&f.queue));
        self.cursor = 0;
        self.generation = Some(members.generation());
        self.resets = members.saw_resets(self.id);
        Ok(())
    }

    /// Resolves where each newly owned queue starts: the group's committed
    /// offset, else where [`StartFrom`] says, which is committed at once (in
    /// one sync, left in `unsynced`) so a later owner starts there too.
    /// Under the group's lock.
    fn resolve_starts(&mut self) -> Result<(), StoreError> {
        let mut fresh = Vec::new();
        let mut changed = false;
        let mut from_table = false;
        for (i, owned) in self.owned.iter_mut().enumerate() {
            if owned.next.is_some() {
                continue;
            }
            let start = match self.store.core.offsets.get(&self.name, &owned.topic, owned.queue_id) {
                Some(committed) => {
                    owned.committed = committed;
                    from_table = true;
                    committed
                }
                None => {
                    let start = match self.store.queue_range(&owned.topic, owned.queue_id) {
                        Ok(range) => match self.config.start_from {
                            StartFrom::Earliest => Ok(range.start),
                            StartFrom::Latest => Ok(range.end),
                            StartFrom::Time(ms) => {
                                self.store.offset_by_time(&owned.topic, owned.queue_id, ms, TimeBound::Lower)
                            }
                        },
                        Err(err) => Err(err),
                    };
                    match start {
                        Ok(start) => {
                            fresh.push(i);
                            start
                        }
                        // Deleted meanwhile: the next round drops the topic,
                        // or takes the share of the one made again.
                        Err(StoreError::UnknownTopic { .. } | StoreError::UnknownQueue { .. }) => {
                            changed = true;
                            continue;
                        }
                        Err(err) => return Err(err),
                    }
                }
            };
            owned.next = Some(start);
            owned.handed = start;
        }
        if from_table {
            // An offset in the table may be one another member (or this
            // one) staged and whose sync is still under way, or failed: made
            // durable before anything after it is handed out.
            let staged = self.store.core.offsets.stage_table(&*self.store.core.storage)?;
            self.stage(staged);
        }
        if !fresh.is_empty() {
            let commits: Vec<(&str, u32, u64)> =
                fresh.iter().map(|&i| &self.owned[i]).map(|o| (&*o.topic, o.queue_id, o.handed)).collect();
            let ids: Vec<u32> = fresh.iter().map(|&i| self.owned[i].topic_id).collect();
            let (taken, staged) = self.store.stage_offsets_of(&self.name, &commits, Some(&ids))?;
            self.stage(staged);
            for (i, taken) in fresh.into_iter().zip(taken) {
                if taken {
                    self.owned[i].committed = self.owned[i].handed;
                } else {
                    self.owned[i].next = None;
                    changed = true;
                }
            }
        }
        if changed {
            self.generation = None;
        }
        Ok(())
    }

    /// Reads the owned queues in turn (from where the last read stopped)
    /// until a batch is fetched or each was read once. A topic deleted is
    /// dropped.
    fn fetch(&mut self) -> Result<(), StoreError> {
        let max = self.config.max_batch;
        let count = self.owned.len();
        let mut deleted = false;
        for step in 0..count {
            if self.fetched.len() >= max {
                break;
            }
            let at = (self.cursor + step) % count;
            let owned = &mut self.owned[at];
            let Some(next) = owned.next else { continue };
            let Some((_, filter)) = self.topics.iter().find(|(t, _)| *t == owned.topic) else { continue };
            let request = GetRequest::new(&*owned.topic, owned.queue_id, next)
                .max_count(max - self.fetched.len())
                .filter(filter.clone())
                .group(&self.name);
            let got = match self.store.get_messages(&request) {
                Ok(got) => got,
                Err(StoreError::UnknownTopic { .. } | StoreError::UnknownQueue { .. }) => {
                    deleted = true;
                    continue;
                }
                Err(err) => return Err(err),
            };
            match got.status {
                GetStatus::Found => {
                    let last = got.messages.len().saturating_sub(1);
                    for (i, message) in got.messages.into_iter().enumerate() {
                        let then = if i == last { got.next_offset } else { message.queue_offset + 1 };
                        let queue = (Arc::clone(&owned.topic), owned.queue_id);
                        self.fetched.push_back(Fetched { queue, message, then });
                    }
                }
                // Nothing of this queue is fetched and not handed out (a
                // fetch starts with none): its position moves past what the
                // filter passed over.
                GetStatus::NoMatchedMessage => owned.handed = got.next_offset,
                GetStatus::OffsetTooSmall | GetStatus::OffsetOverflow
                    if self.config.out_of_range == OutOfRange::Fail =>
                {
                    return Err(StoreError::OffsetOutOfRange {
                        group: self.name.clone(),
                        topic: owned.topic.to_string(),
                        queue_id: owned.queue_id,
                        offset: next,
                        min: got.min_offset,
                        max: got.max_offset,
                    });
                }
                GetStatus::OffsetTooSmall => {
                    tracing::warn!(group = %self.name, topic = %owned.topic, queue = owned.queue_id, from = next, to = got.next_offset, "consumer: messages expired before they were read; going on from the queue's first");
                }
                GetStatus::OffsetOverflow => {
                    tracing::warn!(group = %self.name, topic = %owned.topic, queue = owned.queue_id, offset = next, end = got.max_offset, "consumer: offset past the queue's end; going on from its end");
                    owned.handed = got.max_offset;
                }
                _ => {}
            }
            owned.next = Some(got.next_offset);
        }
        self.cursor = if count == 0 { 0 } else { (self.cursor + 1) % count };
        if deleted {
            self.forget_deleted_topics();
        }
        Ok(())
    }

    /// Hands out up to `max` fetched messages, moving their queues'
    /// positions, under the group's lock and only from queues still owned.
    fn hand_out(&mut self, max: usize) -> Result<Vec<StoredMessage>, StoreError> {
        let group = Arc::clone(&self.group);
        let mut members = group.lock();
        self.take_share(&mut members)?;
        let mut out = Vec::with_capacity(max.min(self.fetched.len()));
        while out.len() < max {
            let Some(fetched) = self.fetched.pop_front() else { break };
            let at = self.by_queue[&fetched.queue];
            self.owned[at].handed = fetched.then;
            out.push(fetched.message);
        }
        Ok(out)
    }

    /// Ready when an owned queue has a message past where it is read, a
    /// queue's start is unresolved, the group changed, or a queue was closed.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.group.changed_since(self.id, self.generation.unwrap_or(u64::MAX), cx.waker()) {
            return Poll::Ready(());
        }
        for owned in &self.owned {
            let Some(next) = owned.next else { return Poll::Ready(()) };
            if owned.queue.signal.poll_past(next, self.token, cx.waker()).is_some() {
                return Poll::Ready(());
            }
        }
        if self.topics.is_empty() {
            return Poll::Ready(());
        }
        Poll::Pending
    }

    /// Blocks until [`poll_ready`](Self::poll_ready) or `deadline`; false at
    /// the deadline.
    fn wait(&mut self, deadline: Option<Instant>) -> bool {
        let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        loop {
            if self.poll_ready(&mut cx).is_ready() {
                return true;
            }
            match deadline {
                None => std::thread::park(),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return false;
                    }
                    std::thread::park_timeout(deadline - now);
                }
            }
        }
    }

    /// The next message for the iterator and the stream: `Ready(None)` when
    /// the consumer follows no topic, or after an error it returned.
    fn poll_one(
        &mut self,
        cx: Option<&mut Context<'_>>,
        deadline: Option<Instant>,
    ) -> Poll<Option<Result<StoredMessage, StoreError>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let mut cx = cx;
        loop {
            match self.step(1, cx.as_deref_mut()) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(err)) => {
                    self.ended = true;
                    return Poll::Ready(Some(Err(err)));
                }
                Poll::Ready(Ok(mut one)) if !one.is_empty() => return Poll::Ready(one.pop().map(Ok)),
                Poll::Ready(Ok(_)) if self.topics.is_empty() => return Poll::Ready(None),
                Poll::Ready(Ok(_)) => {}
            }
            match cx.as_deref_mut() {
                Some(cx) => {
                    if self.poll_ready(cx).is_pending() {
                        return Poll::Pending;
                    }
                }
                None => {
                    if !self.wait(deadline) {
                        return Poll::Ready(None);
                    }
                }
            }
        }
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        for owned in &self.owned {
            owned.queue.signal.forget(self.token);
        }
        self.group.forget_waker(self.id);
        self.store.core.offsets.forget(self.token);
        self.store.core.consumer_groups.leave(&self.name, &self.group, self.id);
    }
}

/// What a blocking call (no context) returns: it is never pending.
fn ready<T>(poll: Poll<T>) -> T {
    match poll {
        Poll::Ready(value) => value,
        Poll::Pending => unreachable!("a blocking wait is never pending"),
    }
}

/// The messages of a [`Consumer`], one at a time: [`Consumer::messages`].
#[derive(Debug)]
pub struct Messages<'a> {
    consumer: &'a mut Consumer,
    timeout: Duration,
}

impl Iterator for Messages<'_> {
    type Item = Result<StoredMessage, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        let deadline = Instant::now().checked_add(self.timeout);
        ready(self.consumer.poll_one(None, deadline))
    }
}

/// The messages as they come, for async code: never blocks a runtime thread
/// waiting for a message (it is woken by the puts, and by a change of the
/// group). It ends when the consumer follows no topic (every topic it
/// followed deleted), and after an error (the store shut down), which it
/// yields once.
impl Stream for Consumer {
    type Item = Result<StoredMessage, StoreError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_one(Some(cx), None)
    }
}
