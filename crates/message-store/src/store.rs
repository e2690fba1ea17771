//! The store: open and recover, topics, puts, consumer offsets, the background
//! services, shutdown.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use commitlog::{CommitLog, DurabilityHandle, Storage};
use consume_queue::ConsumeQueue;
use flush_service::{ServiceState, ServiceThread};
use parking_lot::Mutex;

use crate::checkpoint::{self, Loaded, Recorded};
use crate::config::{DispatchLimit, MessageStoreConfig};
use crate::deferred::DeferredCreates;
use crate::dispatch::Dispatcher;
use crate::error::{MessageError, StoreError};
use crate::index::{key_hash, Index};
use crate::message::{decode, set_queue_offset, Message, StoredMessage};
use crate::offsets::ConsumerOffsets;
use crate::queues::{queue_dir, Queue, QueueContext, Queues};
use crate::topic::{validate_group, validate_topic, Registry};

/// The most messages one [`MessageStore::query_by_key`] returns.
const MAX_QUERY: usize = 1024;

/// Where a message went.
#[derive(Debug)]
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

/// One queue as [`MessageStore::queue_stats`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
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
pub struct StoreStats {
    /// Where dispatch stands in the log.
    pub dispatch_point: u64,
    /// How far dispatch may read now (the log's flushed or written end).
    pub dispatch_limit: u64,
    /// The log's end.
    pub log_max_offset: u64,
    /// Records skipped by dispatch (not messages of a known queue).
    pub records_skipped: u64,
    /// Consume queues found damaged (entries missing, out of order, or naming
    /// another record) and repaired from the log, at open or since.
    pub queues_rebuilt: u64,
    /// Entries those repairs put again.
    pub entries_repaired: u64,
    /// Consume queues open now.
    pub open_consume_queues: usize,
    /// Consume queues closed because more than `max_open_consume_queues` were open.
    pub consume_queues_closed_idle: u64,
    /// Why dispatch is stopped, if it is.
    pub dispatch_error: Option<String>,
    /// Consumer offsets committed ((group, topic, queue) triples).
    pub consumer_offsets: usize,
    /// Syncs of the consumer-offsets journal since open: commits that arrive
    /// together share one.
    pub consumer_offset_syncs: u64,
}

/// What recovery did at open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenReport {
    /// The dispatch point recovery started from.
    pub recovered_from: u64,
    /// Messages dispatched again.
    pub redispatched: u64,
    /// Consumer offsets lowered to their queue's end (only where the log
    /// itself ends there: under async flush, after a crash took messages back).
    pub offsets_lowered: usize,
    /// Why every consume queue and the key index were rebuilt from the log
    /// (the dispatch checkpoint missing, damaged or of the first version).
    pub rebuilt_all: Option<String>,
    /// The topic registry (`config/topics`) was missing or damaged and was
    /// recovered from the checkpoint and the log.
    pub topics_recovered: bool,
    /// Consume queues whose directory held no file, rebuilt in one pass.
    pub queues_rebuilt_whole: u64,
    /// Consume queues found damaged and repaired from the log while opening
    /// (those rebuilt whole included).
    pub queues_repaired: u64,
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
    registry: Mutex<Registry>,
    pub(crate) dispatcher: Arc<Dispatcher>,
    offsets: ConsumerOffsets,
    /// The log's first offset the consume queues last expired against.
    expired_to: AtomicU64,
    dispatch_wake: Arc<ServiceState>,
    shut_down: AtomicBool,
}

/// RocketMQ's `DefaultMessageStore`: topics of queues over one commit log.
/// Every message of every queue is appended to the log; dispatch builds each
/// queue's consume queue from it in the background; consumers read a queue by
/// offset, wait for new messages, and commit their offsets.
///
/// Cheap to clone; `Send + Sync`.
///
/// **Drop:** when the last clone is dropped without [`shutdown`](Self::shutdown),
/// the store shuts down then and logs any error through `tracing`.
#[derive(Debug, Clone)]
pub struct MessageStore {
    pub(crate) core: Arc<Core>,
    life: Arc<Life>,
    report: OpenReport,
}

/// The store's services, shut down with the last handle.
#[derive(Debug)]
struct Life {
    core: Arc<Core>,
    services: Mutex<Vec<ServiceThread>>,
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
    /// (`commitlog/`, `checkpoint`, `lock`, `abort`), consume queues in
    /// `root/consumequeue/<topic>/<queue>/`, topics, consumer offsets and the
    /// dispatch checkpoint in `root/config/`.
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

    /// Opens the store over its opened log, on the log's storage.
    fn open_over(log: CommitLog, config: MessageStoreConfig) -> Result<Self, StoreError> {
        let root = log.dir().to_path_buf();
        let storage = Arc::clone(log.storage());
        let limit = config.effective_dispatch_limit();
        if limit == DispatchLimit::Durable {
            log.flush_all()?; // what recovery found is durable before it is dispatched
        }
        let (recorded, rebuild_all) = Self::trusted_checkpoint(&*storage, &root, &log)?;
        let (registry, topics_recovered) = recover_registry(&*storage, &root, recorded.as_ref(), &log)?;
        let queues = Arc::new(Queues::default());
        for (topic, count) in registry.topics() {
            queues.add_topic(topic, count);
        }
        // Below the recorded point every entry and index item was flushed
        // before it was recorded; from it on, the messages are dispatched again.
        let recovered_from = recorded.as_ref().map_or(0, |r| r.point).max(log.min_offset());
        let defer = defer_syncs(&*storage, &root)?;
        let unsynced = Arc::new(AtomicBool::new(false));
        let queue_storage: Arc<dyn Storage> = if defer {
            Arc::new(DeferredCreates { inner: Arc::clone(&storage), unsynced: Arc::clone(&unsynced) })
        } else {
            Arc::clone(&storage)
        };
        let (index, index_rebuilt) = if config.message_index_enable {
            let (index, rebuilt) = Index::open(
                Arc::clone(&storage),
                &root,
                config.index,
                recorded.as_ref().map(|r| r.index),
                recovered_from,
                recorded.as_ref().is_some_and(|r| log.min_offset() > r.log_min),
                &log,
            )?;
            (Some(Arc::new(index)), rebuilt)
        } else {
            (None, false)
        };
        let recorded = recorded.map(Arc::new);
        let context = QueueContext {
            root: root.clone(),
            storage: queue_storage,
            config: config.consume_queue(),
            recovered_from,
            recorded: recorded.clone(),
            queues: Arc::clone(&queues),
            budget: config.max_open_consume_queues,
            open: AtomicUsize::new(0),
            clock: AtomicU64::new(0),
            closed_idle: AtomicU64::new(0),
            repaired: AtomicU64::new(0),
            entries_repaired: AtomicU64::new(0),
            defer_syncs: defer,
            closing: parking_lot::RwLock::new(()),
            unsynced,
        };
        let dispatcher = Arc::new(Dispatcher::new(log.clone(), context, limit, recovered_from, index));
        let queues_rebuilt_whole = Self::rebuild_missing(&dispatcher, recorded.as_deref(), index_rebuilt)?;
        let redispatched = dispatcher.dispatch_up_to(log.max_offset())?;
        let offsets = ConsumerOffsets::load(&*storage, &root, config.consumer_offsets_journal_size)?;
        let core = Arc::new(Core {
            root,
            offsets,
            config,
            storage,
            log,
            queues,
            registry: Mutex::new(registry),
            dispatcher,
            expired_to: AtomicU64::new(0),
            dispatch_wake: ServiceState::new(),
            shut_down: AtomicBool::new(false),
        });
        core.flush_consume_queues(true)?;
        // Offsets lowered only to an end the log itself holds: each queue is
        // checked (and repaired if damaged) at its open here. Only after a
        // crash (a clean shutdown flushed the log, and a commit is never
        // beyond its queue's end when it is made), or for offsets just
        // converted from an older store's file.
        let clean = core.log.recovery_report().clean_shutdown && !core.offsets.converted();
        let offsets_lowered = if clean { 0 } else { Self::lower_offsets(&core)? };
        let context = &core.dispatcher.context;
        let report = OpenReport {
            recovered_from,
            redispatched,
            offsets_lowered,
            rebuilt_all: rebuild_all,
            topics_recovered,
            queues_rebuilt_whole,
            queues_repaired: context.repaired.load(Ordering::Relaxed),
            index_rebuilt,
        };
        let store = MessageStore {
            life: Arc::new(Life { core: Arc::clone(&core), services: Mutex::new(Vec::new()) }),
            report,
            core,
        };
        store.start_services()?;
        tracing::info!(root = %store.core.root.display(), recovered_from, redispatched, "message store open");
        Ok(store)
    }

    /// The dispatch checkpoint if recovery can trust it, else why not (then
    /// every queue and the index are rebuilt from the log, said loudly unless
    /// the store is new).
    fn trusted_checkpoint(
        storage: &dyn Storage,
        root: &Path,
        log: &CommitLog,
    ) -> Result<(Option<Recorded>, Option<String>), StoreError> {
        let why = match checkpoint::load(storage, root)? {
            Loaded::Recorded(recorded) if recorded.point <= log.max_offset() => return Ok((Some(recorded), None)),
            Loaded::Recorded(recorded) => {
                format!("its dispatch point {} is past the log's end {}", recorded.point, log.max_offset())
            }
            Loaded::PointOnly(_) => "it is of the first version, without the queues' ends".to_string(),
            Loaded::Damaged(why) => why,
            Loaded::Missing if log.max_offset() == log.min_offset() => return Ok((None, None)),
            Loaded::Missing => "it is missing".to_string(),
        };
        tracing::warn!(path = %checkpoint::checkpoint_path(root).display(), why, "dispatch checkpoint not usable; every consume queue and the key index are rebuilt from the log");
        Ok((None, Some(why)))
    }

    /// Before dispatch starts: the queues whose directory holds no file while
    /// the checkpoint recorded entries for them, and the index if it was
    /// emptied, are rebuilt from the log below the recovered point in one pass
    /// (instead of a pass each). Returns the queues rebuilt so.
    fn rebuild_missing(
        dispatcher: &Dispatcher,
        recorded: Option<&Recorded>,
        index_rebuilt: bool,
    ) -> Result<u64, StoreError> {
        let context = &dispatcher.context;
        let log = &dispatcher.log;
        let mut missing = Vec::new();
        if let Some(recorded) = recorded {
            for queue in context.queues.all() {
                let (min, end) = recorded.extent(&queue.topic, queue.queue_id);
                if min < end && !has_files(&*context.storage, &queue_dir(&context.root, &queue.topic, queue.queue_id))?
                {
                    queue.rebuild_at_open();
                    missing.push(queue);
                }
            }
        }
        let reindex = index_rebuilt && context.recovered_from > log.min_offset();
        if missing.is_empty() && !reindex {
            return Ok(0);
        }
        tracing::warn!(
            queues = missing.len(),
            reindex,
            "consume queues missing whole, or the key index emptied: rebuilt from the log"
        );
        dispatcher.rebuild_below(&missing, reindex, log.min_offset(), context.recovered_from)?;
        for queue in &missing {
            let (_, end) = recorded.map_or((0, 0), |r| r.extent(&queue.topic, queue.queue_id));
            let cq = queue.consume_queue(context, log)?;
            if cq.is_empty() && cq.next_index() < end {
                cq.clear()?;
                cq.start_empty_at(end)?; // its messages expired: it goes on from its end
            } else if cq.next_index() != end {
                tracing::warn!(topic = %queue.topic, queue = queue.queue_id, end = cq.next_index(), recorded = end, "consume queue rebuilt to another end than the checkpoint recorded: the log holds that");
            }
        }
        context.repaired.fetch_add(missing.len() as u64, Ordering::Relaxed);
        Ok(missing.len() as u64)
    }

    /// Starts dispatch and the consume-queue flush service.
    fn start_services(&self) -> Result<(), StoreError> {
        let io = |source| StoreError::Io { path: self.core.root.clone(), source };
        if self.core.dispatcher_limit() == DispatchLimit::Durable {
            let wake = Arc::downgrade(&self.core.dispatch_wake);
            self.core.log.on_flushed(Arc::new(move |_| {
                if let Some(wake) = wake.upgrade() {
                    wake.wakeup();
                }
            }));
        }
        let core = Arc::clone(&self.core);
        let dispatch =
            ServiceThread::spawn("ReputMessageService", Arc::clone(&self.core.dispatch_wake), move |state| {
                loop {
                    // A failure is kept (`dispatch_error`) and retried: on the next
                    // wake-up, or within 100 ms.
                    let _ = core.dispatcher.dispatch_available();
                    if state.is_stopped() {
                        return;
                    }
                    state.wait_for_running(Duration::from_millis(100), || {});
                }
            })
            .map_err(io)?;
        let core = Arc::clone(&self.core);
        let interval = Duration::from_millis(self.core.config.flush_interval_consume_queue_ms);
        let thorough = Duration::from_millis(self.core.config.flush_consume_queue_thorough_interval_ms);
        let mut last_thorough = Instant::now();
        let flush = ServiceThread::spawn_every("FlushConsumeQueueService", interval, move || {
            let is_thorough = last_thorough.elapsed() >= thorough;
            match core.flush_consume_queues(is_thorough) {
                Ok(()) if is_thorough => last_thorough = Instant::now(),
                Ok(()) => {}
                Err(err) => tracing::error!(%err, "consume queue flush failed; retrying"),
            }
        })
        .map_err(io)?;
        self.life.services.lock().extend([dispatch, flush]);
        Ok(())
    }

    /// Lowers consumer offsets beyond their queue's end (after a crash that
    /// took messages back); returns how many moved.
    fn lower_offsets(core: &Core) -> Result<usize, StoreError> {
        core.offsets.clamp(&*core.storage, |(_, topic, queue)| {
            let queue = core.queues.get(topic, *queue)?;
            match queue.consume_queue(&core.dispatcher.context, &core.log) {
                Ok(cq) => Some(cq.next_index()),
                Err(err) => {
                    tracing::warn!(topic, queue = queue.queue_id, %err, "consumer offsets: queue not checked");
                    None
                }
            }
        })
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
        self.core.registry.lock().create(&*self.core.storage, topic, queues)?;
        self.core.queues.add_topic(topic, queues);
        Ok(())
    }

    /// Every topic with its queue count.
    pub fn topics(&self) -> Vec<(String, u32)> {
        self.core.registry.lock().topics().map(|(t, q)| (t.to_string(), q)).collect()
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
                self.next_offset_locked(&queue, &mut next)?
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
            let offset = self.next_offset_locked(&queue, &mut next)?;
            set_queue_offset(&mut encoded, offset);
            let appended = self.core.log.append(&encoded)?;
            *next = Some(offset.saturating_add(1));
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
            let offset = self.next_offset_locked(&queue, &mut next)?;
            for (k, body) in encoded.iter_mut().enumerate() {
                set_queue_offset(body, offset.saturating_add(k as u64));
            }
            let appended = self.core.log.append_batch(&encoded)?;
            *next = Some(offset.saturating_add(messages.len() as u64));
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
    /// open) its consume queue's end, which recovery brought up to the log's.
    fn next_offset_locked(&self, queue: &Queue, next: &mut Option<u64>) -> Result<u64, StoreError> {
        if let Some(next) = *next {
            return Ok(next);
        }
        let context = &self.core.dispatcher.context;
        // A queue without consume-queue files that the checkpoint recorded
        // nothing for never had a message this store holds (recovery has
        // dispatched the whole log): 0, without opening it.
        let recorded_nothing = context.recorded.as_ref().is_none_or(|r| r.extent(&queue.topic, queue.queue_id).1 == 0);
        let unopened = !queue.is_checked() && queue.open_consume_queue().is_none();
        let offset = if unopened
            && recorded_nothing
            && !has_files(&*context.storage, &queue_dir(&context.root, &queue.topic, queue.queue_id))?
        {
            0
        } else {
            queue.consume_queue(context, &self.core.log)?.next_index()
        };
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
        if self.core.queues.of_topic(topic).is_none() && self.core.config.auto_create_topics {
            self.create_topic(topic, self.core.config.default_topic_queue_nums)?;
        }
        self.queue(topic, queue_id)
    }

    /// The queue `topic`/`queue_id`, or why there is none.
    pub(crate) fn queue(&self, topic: &str, queue_id: u32) -> Result<Arc<Queue>, StoreError> {
        let Some(queues) = self.core.queues.of_topic(topic) else {
            return Err(StoreError::UnknownTopic { topic: topic.to_string() });
        };
        let count = u32::try_from(queues.len()).unwrap_or(u32::MAX);
        usize::try_from(queue_id).ok().and_then(|i| queues.get(i)).cloned().ok_or(StoreError::UnknownQueue {
            topic: topic.to_string(),
            queue_id,
            queues: count,
        })
    }

    /// The consume queue of `topic`/`queue_id`, opened if it was not.
    pub(crate) fn consume_queue_of(&self, topic: &str, queue_id: u32) -> Result<Arc<ConsumeQueue>, StoreError> {
        self.check_open()?;
        let queue = self.queue(topic, queue_id)?;
        queue.consume_queue(&self.core.dispatcher.context, &self.core.log)
    }

    /// The first offset and the end of `topic`'s queue.
    pub fn queue_range(&self, topic: &str, queue_id: u32) -> Result<(u64, u64), StoreError> {
        let cq = self.consume_queue_of(topic, queue_id)?;
        Ok((cq.min_index(), cq.next_index()))
    }

    /// The end of `topic`'s queue (the offset its next message takes), without
    /// opening its consume queue when this process knows it already. The
    /// caller has checked the store is open.
    fn queue_end(&self, topic: &str, queue_id: u32) -> Result<u64, StoreError> {
        match self.queue(topic, queue_id)?.extent() {
            Some((_, end)) => Ok(end),
            None => Ok(self.queue_range(topic, queue_id)?.1),
        }
    }

    /// Every queue of every topic with its range (opening each consume queue).
    pub fn queue_stats(&self) -> Result<Vec<QueueStats>, StoreError> {
        let mut stats = Vec::new();
        for (topic, count) in self.topics() {
            for queue_id in 0..count {
                let (min_offset, max_offset) = self.queue_range(&topic, queue_id)?;
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
        for &(topic, queue_id, offset) in commits {
            let max = self.queue_end(topic, queue_id)?;
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
        self.core.offsets.commit_many(&*self.core.storage, group, commits)
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

    /// Every committed offset: ((group, topic, queue), offset).
    pub fn committed_offsets(&self) -> Vec<((String, String, u32), u64)> {
        self.core.offsets.all()
    }

    /// The messages of `topic` with `key` stored within `[begin_ms, end_ms]`,
    /// newest first, at most `max` (and at most 1,024: RocketMQ #7948 ran out of
    /// memory on a huge `maxNum`). Candidates are checked against their record:
    /// another key with the same hash is never returned. Empty when the index is
    /// off.
    pub fn query_by_key(
        &self,
        topic: &str,
        key: &str,
        begin_ms: u64,
        end_ms: u64,
        max: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        self.check_open()?;
        let Some(index) = &self.core.dispatcher.index else { return Ok(Vec::new()) };
        let max = max.min(MAX_QUERY);
        let mut found = Vec::new();
        // Ask for more candidates than wanted: collisions are dropped below.
        for offset in index.candidates(key_hash(topic, key), begin_ms, end_ms, max.saturating_mul(2).max(16))? {
            if found.len() >= max {
                break;
            }
            let Some(message) = self.core.message_at(offset)? else { continue };
            if message.topic == topic && message.keys.iter().any(|k| k == key) {
                found.push(message);
            }
        }
        Ok(found)
    }

    /// What the services have done.
    pub fn stats(&self) -> StoreStats {
        let dispatcher = &self.core.dispatcher;
        StoreStats {
            dispatch_point: dispatcher.point(),
            dispatch_limit: dispatcher.limit(),
            log_max_offset: self.core.log.max_offset(),
            records_skipped: dispatcher.skipped.load(Ordering::Relaxed),
            queues_rebuilt: dispatcher.context.repaired.load(Ordering::Relaxed),
            entries_repaired: dispatcher.context.entries_repaired.load(Ordering::Relaxed),
            open_consume_queues: dispatcher.context.open.load(Ordering::Relaxed),
            consume_queues_closed_idle: dispatcher.context.closed_idle.load(Ordering::Relaxed),
            dispatch_error: dispatcher.error(),
            consumer_offsets: self.core.offsets.len(),
            consumer_offset_syncs: self.core.offsets.syncs(),
        }
    }

    /// Repairs `topic`'s queue from queue offset `from` (where
    /// [`inspect::check`](crate::inspect::check) found it damaged): its entries
    /// from there are cut and its messages put again from the log, up to the
    /// dispatch point. Returns the entries put. The store finds damage itself
    /// at open and on reads; this is for damage a check found first.
    pub fn repair_queue(&self, topic: &str, queue_id: u32, from: u64) -> Result<u64, StoreError> {
        self.check_open()?;
        let queue = self.queue(topic, queue_id)?;
        Ok(self.core.dispatcher.repair_live(&queue, from, "asked to")?.1)
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

    fn check_open(&self) -> Result<(), StoreError> {
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

    /// The message a consume-queue entry names: [`Named::Expired`] if its
    /// record went with the log's front, [`Named::Other`] if no message of the
    /// entry's size starts there (a damaged entry).
    pub(crate) fn message_at_entry(&self, entry: &consume_queue::CqEntry) -> Result<Named, StoreError> {
        if entry.offset < self.log.min_offset() {
            return Ok(Named::Expired);
        }
        if entry.end() > self.log.max_offset() {
            return Ok(Named::Other);
        }
        match self.log.read(entry.offset) {
            Ok(record) if record.size == u64::from(entry.size) => {
                Ok(decode(&record).map_or(Named::Other, Named::Message))
            }
            Ok(_)
            | Err(
                commitlog::Error::NoRecord { .. }
                | commitlog::Error::InsideRecord { .. }
                | commitlog::Error::BadRecord { .. },
            ) if entry.offset >= self.log.min_offset() => Ok(Named::Other),
            Ok(_) | Err(commitlog::Error::NoRecord { .. }) => Ok(Named::Expired), // deleted while read
            Err(err) => Err(err.into()),
        }
    }

    /// Stops `services`, flushes the log, dispatches what is left, flushes the
    /// consume queues and records the dispatch point, then shuts the log down.
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
            self.flush_consume_queues(true)
        })();
        // Whatever failed above, the queues close, waiters return and the log shuts down.
        let closed = self.queues.all().iter().try_for_each(|queue| queue.close());
        let closed = closed.and(self.dispatcher.index.as_ref().map_or(Ok(()), |index| index.close()));
        self.offsets.close();
        let log = self.log.shutdown();
        result?;
        closed?;
        log?;
        Ok(())
    }

    fn dispatcher_limit(&self) -> DispatchLimit {
        self.config.effective_dispatch_limit()
    }

    /// Flushes the open consume queues (every dirty byte when `thorough`, else
    /// those with enough dirty pages). When thorough, first expires every
    /// queue's entries of records the log's cleaning deleted, and samples what
    /// the checkpoint records (the dispatch point, each queue's extent, the
    /// index's live file), then flushes, then records it: recording after
    /// flushing is what makes the point safe to recover from (RocketMQ #678
    /// recorded first). The log is flushed first if dispatch read past its
    /// durable end (written dispatch under async flush), so the recorded point
    /// never lies beyond what a crash keeps of the log.
    pub(crate) fn flush_consume_queues(&self, thorough: bool) -> Result<(), StoreError> {
        let context = &self.dispatcher.context;
        let min_offset = self.log.min_offset();
        if thorough {
            self.expire_queues(min_offset)?;
        }
        let recorded = thorough.then(|| self.dispatcher.sample());
        if recorded.as_ref().is_some_and(|r| r.point > self.log.flushed_offset()) {
            self.log.flush_all()?;
        }
        let _closing = thorough.then(|| context.closing.write());
        let least_pages = if thorough { 0 } else { self.config.flush_consume_queue_least_pages };
        for queue in self.queues.all() {
            if let Some(cq) = queue.open_consume_queue() {
                cq.flush_with(least_pages)?;
            }
        }
        if thorough && context.unsynced.swap(false, Ordering::AcqRel) {
            let dir = self.root.join("consumequeue");
            if let Err(source) = self.storage.sync_all_under(&dir) {
                context.unsynced.store(true, Ordering::Release);
                return Err(StoreError::Io { path: dir, source });
            }
        }
        #[cfg(planted_bugs)]
        let index =
            self.dispatcher.index.as_ref().filter(|_| !crate::planted::is_active(crate::planted::Bug::IndexNotFlushed));
        #[cfg(not(planted_bugs))]
        let index = self.dispatcher.index.as_ref();
        if let Some(index) = index {
            if thorough {
                index.delete_expired(min_offset)?;
            }
            index.flush(least_pages)?;
        }
        if let Some(recorded) = recorded {
            checkpoint::store(&*self.storage, &self.root, &recorded)?;
        }
        Ok(())
    }

    /// Expires, in every queue that can hold some, the entries of records below
    /// `log_min` (RocketMQ's `CleanConsumeQueueService`), once per move of the
    /// log's front: open queues at once; closed ones are opened for it when
    /// their first segment may go, and queues not yet opened in this process
    /// are opened (and checked) the first time, so that no queue keeps expired
    /// files or reports a first offset whose message is gone.
    fn expire_queues(&self, log_min: u64) -> Result<(), StoreError> {
        if self.expired_to.load(Ordering::Acquire) >= log_min {
            return Ok(());
        }
        let context = &self.dispatcher.context;
        for queue in self.queues.all() {
            if let Some(cq) = queue.open_consume_queue() {
                cq.delete_expired(log_min)?;
            } else if queue.may_expire(log_min) {
                // Opening it expires it (and checks it, the first time).
                queue.consume_queue(context, &self.log)?;
            }
        }
        self.expired_to.store(log_min, Ordering::Release);
        Ok(())
    }
}

/// The topic registry of the store in `root`, recovered if its file is
/// missing while the store holds messages, or damaged: the topics the dispatch
/// checkpoint recorded, with their queue counts, and those of the log's
/// messages past its point (or all of them, with no checkpoint), each with one
/// queue past the highest it used. A topic the checkpoint knows and the file
/// lacks is added back. Said loudly; the recovered registry is written at once.
/// The second value says whether it was recovered.
fn recover_registry(
    storage: &dyn Storage,
    root: &Path,
    recorded: Option<&Recorded>,
    log: &CommitLog,
) -> Result<(Registry, bool), StoreError> {
    let (mut registry, why) = Registry::load_or_empty(storage, root)?;
    let mut added = 0usize;
    let known: std::collections::HashSet<String> = registry.topics().map(|(t, _)| t.to_string()).collect();
    for (topic, entry) in recorded.iter().flat_map(|r| &r.topics) {
        if !known.contains(topic) && registry.add_at_least(topic, entry.queues) {
            added += 1;
        }
    }
    if why.is_some() {
        // Topics made after the checkpoint (or with none) are known only by
        // their messages, which lie past its point.
        let from = recorded.map_or(log.min_offset(), |r| r.point).max(log.min_offset());
        for record in log.iter_from(from) {
            let record = record?;
            let Ok(header) = crate::message::decode_header(&record.body) else { continue };
            if registry.add_at_least(&header.topic, header.queue_id.saturating_add(1)) {
                added += 1;
            }
        }
    }
    if added == 0 {
        return Ok((registry, false));
    }
    tracing::warn!(path = %registry.path().display(), why = why.as_deref().unwrap_or("topics missing from it"), topics = added, "topic registry recovered from the dispatch checkpoint and the log");
    registry.persist(storage)?;
    Ok((registry, true))
}

/// True when `dir` holds a file.
fn has_files(storage: &dyn Storage, dir: &Path) -> Result<bool, StoreError> {
    match storage.list(dir) {
        Ok(files) => Ok(!files.is_empty()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(StoreError::Io { path: dir.to_path_buf(), source }),
    }
}

/// Whether consume-queue files can be created, and idle ones closed, without a
/// sync each: the storage can
/// sync every file under their directory at once (tried once here).
fn defer_syncs(storage: &dyn Storage, root: &Path) -> Result<bool, StoreError> {
    let dir = root.join("consumequeue");
    storage.create_dir_all(&dir).map_err(|source| StoreError::Io { path: dir.clone(), source })?;
    match storage.sync_all_under(&dir) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == std::io::ErrorKind::Unsupported => Ok(false),
        Err(source) => Err(StoreError::Io { path: dir, source }),
    }
}

/// What a consume-queue entry names in the log.
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
