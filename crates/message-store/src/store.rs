//! The store: its handle and shared state, the queues' ranges, stats and
//! shutdown. Its operations are in a file per job: `open.rs` (the open and
//! recovery), `topic/admin.rs` (topics), `put.rs` (puts), `get.rs` (reads),
//! `poll.rs` (waits), `offsets/api.rs` (consumer offsets), `maintenance.rs`
//! (the services' work on the derived data).

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use commitlog::{CommitLog, Storage};
use flush_service::{ServiceState, ServiceThread};
use parking_lot::Mutex;

use crate::config::MessageStoreConfig;
use crate::dispatch::Dispatcher;
use crate::error::StoreError;
use crate::offsets::ConsumerOffsets;
use crate::queues::{Queue, Queues};
use crate::topic::Registry;

/// Where the queue index of the store in `root` is.
pub(crate) fn queue_index_dir(root: &Path) -> PathBuf {
    root.join("queueindex")
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
    /// The dispatch service's rounds that found at least one record since
    /// open (open's replay of the log and [`MessageStore::dispatch_now`] are
    /// not counted): with
    /// [`dispatch_point`](Self::dispatch_point)'s records, how many records
    /// a round takes (a put that wakes dispatch makes a round of its own;
    /// dispatch's naps gather several).
    pub dispatch_rounds: u64,
    /// Appends of puts that waited while another put appended (write
    /// groups): each wrote every such put's message in one batch.
    pub put_groups: u64,
    /// Puts appended in those groups (the rest appended alone).
    pub puts_in_groups: u64,
    /// Messages put since open.
    pub messages_put: u64,
    /// Messages `get_messages` returned since open.
    pub messages_read: u64,
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

impl Core {
    /// The store's counts ([`MessageStore::stats`]).
    pub(crate) fn stats(&self) -> StoreStats {
        let dispatcher = &self.dispatcher;
        let index = &dispatcher.queue_index;
        StoreStats {
            dispatch_point: dispatcher.point(),
            dispatch_limit: dispatcher.limit(),
            log_max_offset: self.log.max_offset(),
            records_skipped: dispatcher.skipped.load(Ordering::Relaxed),
            indexed_queues: index.queue_count(),
            index_runs: index.run_count(),
            index_active_entries: index.active_entries(),
            index_sealed_to: index.sealed_to(),
            index_heap_bytes: index.heap_bytes(),
            queues_in_use: self.queues.live_count(),
            dispatch_error: dispatcher.error(),
            consumer_offsets: self.offsets.len(),
            consumer_offset_syncs: self.offsets.syncs(),
            entries_indexed_on_put: self.indexed_on_put.load(Ordering::Relaxed),
            dispatch_rounds: dispatcher.rounds(),
            put_groups: self.groups.counts().0,
            puts_in_groups: self.groups.counts().1,
            messages_put: self.put_messages.load(Ordering::Relaxed),
            messages_read: self.read_messages.load(Ordering::Relaxed),
        }
    }
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
    /// Dispatch naps between busy rounds (`dispatch_nap_us`, by the written
    /// end only): puts then wake it only if it does not nap.
    pub(crate) dispatch_naps: bool,
    /// Dispatch naps after a round whose records their puts had all indexed
    /// (`dispatch_tailed_nap_us`, by the written end only): puts that index
    /// their own messages then wake it only if it does not nap.
    pub(crate) dispatch_tailed_naps: bool,
    /// How long dispatch waits for a wake-up when it found nothing to read
    /// (100 ms; a unit test lengthens it to show a put wakes it).
    pub(crate) dispatch_idle_wait_ms: AtomicU64,
    pub(crate) shut_down: AtomicBool,
    /// The put path indexes its own message (dispatch by the written end).
    pub(crate) index_on_put: bool,
    /// Entries it did.
    pub(crate) indexed_on_put: AtomicU64,
    /// Puts that collide share appends.
    pub(crate) groups: crate::group::PutGroups,
    /// The members of each consumer group in this process.
    pub(crate) consumer_groups: crate::consumer::ConsumerGroups,
    /// Messages put since open (for the metrics).
    pub(crate) put_messages: AtomicU64,
    /// Messages `get_messages` returned since open.
    pub(crate) read_messages: AtomicU64,
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

    /// The configuration the store was opened with.
    pub fn config(&self) -> &MessageStoreConfig {
        &self.core.config
    }

    /// The commit log underneath (to read records, flush, or see its stats).
    pub fn log(&self) -> &CommitLog {
        &self.core.log
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

    /// What the services have done.
    pub fn stats(&self) -> StoreStats {
        self.core.stats()
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
        // Consumers waiting on no queue return too.
        self.consumer_groups.touch_all();
        self.dispatcher.queue_index.close();
        let closed = self.dispatcher.index.as_ref().map_or(Ok(()), |index| index.close());
        self.offsets.close();
        let log = self.log.shutdown();
        result?;
        closed?;
        log?;
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Waker};

    use commitlog::{CommitLogConfig, FlushDiskType};

    use super::*;
    use crate::config::DispatchLimit;
    use crate::message::set_queue_offset;
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
    /// A store on simulated storage with [`small_log`]'s log, and `topics`
    /// (name, queues) made.
    pub(crate) fn sim_store(flush: FlushDiskType, topics: &[(&str, u32)]) -> MessageStore {
        let sim = store_io::sim::SimStorage::new();
        let store =
            MessageStore::open_with_storage("/s", MessageStoreConfig::new(small_log(flush)), Arc::new(sim)).unwrap();
        for (topic, queues) in topics {
            store.create_topic(topic, *queues).unwrap();
        }
        store
    }

    pub(crate) fn small_log(flush: FlushDiskType) -> CommitLogConfig {
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

    /// `commit_offset("g", "t", 0, offset)` on a thread of its own, paused
    /// between its checks and its write: a second `wait` on the barrier lets
    /// it go on.
    fn commit_paused_after_its_checks(
        store: &MessageStore,
        offset: u64,
    ) -> (Arc<std::sync::Barrier>, std::thread::JoinHandle<Result<(), StoreError>>) {
        let barrier = store.core.commit_checked.arm();
        let committer = {
            let store = store.clone();
            std::thread::spawn(move || store.commit_offset("g", "t", 0, offset))
        };
        barrier.wait();
        (barrier, committer)
    }

    #[test]
    fn a_commit_that_checked_its_topic_never_lands_after_the_topics_deletion() {
        // The commit is paused between its checks and its write; the
        // deletion started then either waits for it (and removes its offset)
        // or, were it let through, would return first and leave the commit
        // to write an offset of a deleted topic, which a topic made again
        // under the name would start with.
        let store = sim_store(FlushDiskType::SyncFlush, &[("t", 1)]);
        for i in 0..4u8 {
            store.put_message(&Message::new("t", 0, vec![i])).unwrap().durability.wait().unwrap();
        }
        store.dispatch_now().unwrap();
        let (barrier, committer) = commit_paused_after_its_checks(&store, 3);
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
        assert_eq!(store.committed_offset("g", "t", 0).unwrap(), None, "the topic made again has no offset");
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

    /// A long-lived member's group forgets the marks of writes from outside
    /// once every member has seen them: they do not pile up with every topic
    /// ever reset, removed or cleaned (deleted since, or never made). They
    /// once did: 600 marks after 200 rounds below.
    #[test]
    fn reset_marks_of_deleted_or_unknown_topics_do_not_accumulate() {
        let store = sim_store(FlushDiskType::SyncFlush, &[("t", 1)]);
        let mut a = store.consumer("g", crate::ConsumerConfig::default()).unwrap();
        a.subscribe("t", crate::TagFilter::All).unwrap();
        let _ = a.poll(Duration::from_millis(1)).unwrap();
        for i in 0..200 {
            let tmp = format!("tmp{i}");
            store.create_topic(&tmp, 4).unwrap();
            store.reset_consumer_offsets("g", &tmp, Some(i % 4), crate::ResetTo::Earliest).unwrap();
            store.remove_consumer_offsets("g", Some(&tmp)).unwrap();
            store.delete_topic(&tmp).unwrap();
            store.clean_offsets_by_topic(&format!("never{i}")).unwrap();
            if i % 10 == 9 {
                let _ = a.poll(Duration::from_millis(1)).unwrap();
            }
        }
        let _ = a.poll(Duration::from_millis(1)).unwrap();
        let marks = store.core.consumer_groups.reset_marks("g");
        assert_eq!(marks, 0, "one live topic \"t\" (1 queue), yet the group keeps {marks} reset marks");
        drop(a);
        store.shutdown().unwrap();
    }

    /// An outside commit of a group with no member here holds the groups'
    /// map's lock throughout: a member joining meanwhile waits for it, then
    /// starts from it (it once joined between the lookup and the write,
    /// started from `StartFrom`, and its next `commit()` wrote its position
    /// over the commit).
    #[test]
    fn a_member_joining_during_an_outside_commit_of_a_memberless_group_takes_it() {
        let store = sim_store(FlushDiskType::SyncFlush, &[("t", 1)]);
        for i in 0..10u8 {
            store.put_message(&Message::new("t", 0, vec![i])).unwrap().durability.wait().unwrap();
        }
        store.dispatch_now().unwrap();
        // The outside commit found no group "g" and checked its offset.
        let (barrier, committer) = commit_paused_after_its_checks(&store, 3);
        let (sent, handed) = std::sync::mpsc::channel();
        let joiner = {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut a = store.consumer("g", crate::ConsumerConfig::default().max_batch(5)).unwrap();
                a.subscribe("t", crate::TagFilter::All).unwrap();
                let first: Vec<u64> =
                    a.poll(Duration::from_millis(50)).unwrap().iter().map(|m| m.queue_offset).collect();
                a.commit().unwrap();
                sent.send(first).unwrap();
            })
        };
        let early = handed.recv_timeout(Duration::from_millis(200));
        barrier.wait(); // the outside commit writes 3
        committer.join().unwrap().unwrap();
        let first = match early {
            Ok(first) => first,
            Err(_) => handed.recv().unwrap(),
        };
        joiner.join().unwrap();
        assert_eq!(
            first,
            vec![3, 4, 5, 6, 7],
            "offset 3 committed from outside while a member joined: the member handed out {first:?} and committed {:?}",
            store.committed_offset("g", "t", 0).unwrap()
        );
        assert_eq!(store.committed_offset("g", "t", 0).unwrap(), Some(8));
        store.shutdown().unwrap();
    }
}
