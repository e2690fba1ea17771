//! The queues of the store: each one's put lock (which assigns queue offsets),
//! its consume queue (opened on first use, made consistent with the log then),
//! and the signal long-polling consumers wait on.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Waker;

use consume_queue::{ConsumeQueue, ConsumeQueueConfig, CqEntry};
use parking_lot::{Condvar, Mutex, RwLock};
use store_io::Storage;

use crate::error::StoreError;
use crate::message::decode_header;

/// The directory of a queue's consume queue: `<root>/consumequeue/<topic>/<queue>`.
pub(crate) fn queue_dir(root: &Path, topic: &str, queue_id: u32) -> PathBuf {
    root.join("consumequeue").join(topic).join(queue_id.to_string())
}

/// Where dispatched messages are announced: the queue's dispatched end, and who
/// waits for it to pass an offset.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    state: Mutex<SignalState>,
    arrived: Condvar,
}

#[derive(Debug, Default)]
struct SignalState {
    /// The offset the next dispatched message of the queue gets (its max).
    dispatched: u64,
    /// Set at shutdown: waiters return.
    closed: bool,
    /// Futures waiting (see [`Arrival`](crate::Arrival)).
    wakers: Vec<Waker>,
}

impl Signal {
    /// Announces that the queue's dispatched end is `end`.
    pub(crate) fn arrive(&self, end: u64) {
        let wakers = {
            let mut state = self.state.lock();
            if end <= state.dispatched {
                return;
            }
            state.dispatched = end;
            std::mem::take(&mut state.wakers)
        };
        self.arrived.notify_all();
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Wakes every waiter for good.
    pub(crate) fn close(&self) {
        let wakers = {
            let mut state = self.state.lock();
            state.closed = true;
            std::mem::take(&mut state.wakers)
        };
        self.arrived.notify_all();
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Blocks until the dispatched end passes `offset`, the signal closes, or
    /// `deadline`; returns whether it passed.
    pub(crate) fn wait_past(&self, offset: u64, deadline: std::time::Instant) -> bool {
        let mut state = self.state.lock();
        while state.dispatched <= offset && !state.closed {
            if self.arrived.wait_until(&mut state, deadline).timed_out() {
                break;
            }
        }
        state.dispatched > offset
    }

    /// Polls for the dispatched end passing `offset`: `Some(passed)` when it did
    /// or the signal closed, else `None` with `waker` registered.
    pub(crate) fn poll_past(&self, offset: u64, waker: &Waker) -> Option<bool> {
        let mut state = self.state.lock();
        if state.dispatched > offset || state.closed {
            return Some(state.dispatched > offset);
        }
        if !state.wakers.iter().any(|w| w.will_wake(waker)) {
            state.wakers.push(waker.clone());
        }
        None
    }
}

/// One queue of a topic.
#[derive(Debug)]
pub(crate) struct Queue {
    pub(crate) topic: String,
    pub(crate) queue_id: u32,
    /// The put lock: the offset the next message put gets. Held while the
    /// message is appended, so the log holds a queue's messages in offset order.
    pub(crate) next_offset: Mutex<Option<u64>>,
    /// The consume queue while it is open.
    consume_queue: Mutex<Option<Arc<ConsumeQueue>>>,
    /// When it was last used (the context's clock), for closing idle ones.
    last_used: AtomicU64,
    /// Made consistent with the log (at its first open in this process).
    checked: AtomicBool,
    pub(crate) signal: Signal,
}

/// What the queues need from the store to open their consume queues.
#[derive(Debug)]
pub(crate) struct QueueContext {
    pub(crate) root: PathBuf,
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) config: ConsumeQueueConfig,
    /// The dispatch point this open recovered from: entries a consume queue
    /// holds at or past it when first opened are stale (their records were
    /// re-dispatched, or lost with the log's tail) and are cut.
    pub(crate) recovered_from: u64,
    /// Every queue, to close idle ones from.
    pub(crate) queues: Arc<Queues>,
    /// The most consume queues open at once (each holds a file and a mapping
    /// per segment): beyond it the least recently used idle ones are closed.
    pub(crate) budget: usize,
    /// Consume queues open now.
    pub(crate) open: AtomicUsize,
    /// A counter that orders uses.
    pub(crate) clock: AtomicU64,
    /// Consume queues closed to keep within the budget.
    pub(crate) closed_idle: AtomicU64,
    /// Idle queues are closed, and new consume-queue files created
    /// ([`DeferredCreates`](crate::deferred::DeferredCreates)), without a sync
    /// of their own; the next thorough flush syncs them all at once
    /// (`Storage::sync_all_under`), before it records the dispatch point. Off
    /// where the storage cannot: each is flushed as it closes, and created
    /// durably.
    pub(crate) defer_syncs: bool,
    /// Closes hold it shared; a thorough flush holds it exclusively from its
    /// flushes to its record of the dispatch point, so every queue is either
    /// open (and flushed by it) or closed before it (and synced by it).
    pub(crate) closing: RwLock<()>,
    /// A queue was closed, or a consume-queue file created, without a sync
    /// since the last thorough flush (shared with the storage that creates).
    pub(crate) unsynced: Arc<AtomicBool>,
}

impl QueueContext {
    /// Closes the least recently used consume queues no one is using until at
    /// most nine tenths of the budget are open (a batch, so that the scan over
    /// every queue is paid once per many opens). Queues in use are skipped.
    fn trim(&self) -> Result<(), StoreError> {
        if self.open.load(Ordering::Acquire) <= self.budget {
            return Ok(());
        }
        let mut candidates: Vec<(u64, Arc<Queue>)> = self
            .queues
            .all()
            .into_iter()
            .filter(|q| q.is_open())
            .map(|q| (q.last_used.load(Ordering::Relaxed), q))
            .collect();
        candidates.sort_unstable_by_key(|(used, _)| *used);
        let target = self.budget.saturating_mul(9) / 10;
        let _closing = self.closing.read();
        for (_, queue) in candidates {
            if self.open.load(Ordering::Acquire) <= target {
                break;
            }
            if queue.close_if_idle(self)? {
                self.open.fetch_sub(1, Ordering::AcqRel);
                self.closed_idle.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

impl Queue {
    fn new(topic: &str, queue_id: u32) -> Self {
        Queue {
            topic: topic.to_string(),
            queue_id,
            next_offset: Mutex::new(None),
            consume_queue: Mutex::new(None),
            last_used: AtomicU64::new(0),
            checked: AtomicBool::new(false),
            signal: Signal::default(),
        }
    }

    /// The consume queue, opened if it is not (and made consistent with `log`
    /// at its first open in this process), then others closed if more than
    /// the budget are open.
    pub(crate) fn consume_queue(
        &self,
        context: &QueueContext,
        log: &commitlog::CommitLog,
    ) -> Result<Arc<ConsumeQueue>, StoreError> {
        self.last_used.store(context.clock.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        let cq = {
            let mut slot = self.consume_queue.lock();
            if let Some(cq) = &*slot {
                return Ok(Arc::clone(cq));
            }
            let dir = queue_dir(&context.root, &self.topic, self.queue_id);
            // Later opens (after an idle close) find what this process wrote:
            // nothing to cut or check then.
            let cq = if self.checked.load(Ordering::Acquire) {
                ConsumeQueue::reopen(Arc::clone(&context.storage), &dir, context.config.clone())?
            } else {
                let cq = ConsumeQueue::open(Arc::clone(&context.storage), &dir, context.config.clone())?;
                self.make_consistent(&cq, context.recovered_from, log)?;
                self.checked.store(true, Ordering::Release);
                cq
            };
            let cq = Arc::new(cq);
            self.signal.arrive(cq.next_index());
            *slot = Some(Arc::clone(&cq));
            context.open.fetch_add(1, Ordering::AcqRel);
            cq
        };
        context.trim()?;
        Ok(cq)
    }

    /// The consume queue if it is open.
    pub(crate) fn open_consume_queue(&self) -> Option<Arc<ConsumeQueue>> {
        self.consume_queue.lock().clone()
    }

    fn is_open(&self) -> bool {
        self.consume_queue.try_lock().is_some_and(|slot| slot.is_some())
    }

    /// Closes the consume queue if it is open and no one else holds it (nor
    /// its slot); returns whether it closed. The caller holds
    /// [`QueueContext::closing`] shared. Unsynced when the context defers syncs
    /// (marked for the next thorough flush before it closes), else flushed
    /// under the slot's lock.
    fn close_if_idle(&self, context: &QueueContext) -> Result<bool, StoreError> {
        let Some(mut slot) = self.consume_queue.try_lock() else { return Ok(false) };
        match slot.take() {
            Some(cq) if Arc::strong_count(&cq) == 1 => {
                if context.defer_syncs {
                    context.unsynced.store(true, Ordering::Release);
                    match Arc::try_unwrap(cq) {
                        Ok(cq) => cq.close_unflushed(), // its segments are unmapped and closed
                        Err(cq) => {
                            *slot = Some(cq);
                            return Ok(false);
                        }
                    }
                } else {
                    cq.flush()?;
                    drop(cq);
                }
                Ok(true)
            }
            other => {
                *slot = other;
                Ok(false)
            }
        }
    }

    /// Cuts the entries at or past `from` (stale: see
    /// [`QueueContext::recovered_from`]), then every last entry that does not
    /// name this queue's message of its offset in `log` (a torn entry: written
    /// after the last flush, partly kept), and expires the entries of records
    /// the log's cleaning deleted.
    fn make_consistent(&self, cq: &ConsumeQueue, from: u64, log: &commitlog::CommitLog) -> Result<(), StoreError> {
        #[cfg(planted_bugs)]
        if crate::planted::is_active(crate::planted::Bug::QueueNotCut) {
            return Ok(());
        }
        let stale = cq.first_index_at_or_after(from)?;
        if stale < cq.next_index() {
            tracing::debug!(topic = %self.topic, queue = self.queue_id, from = stale, "consume queue: entries past the dispatch point cut");
            cq.truncate_from(stale)?;
        }
        while let Some((index, entry)) = cq.last()? {
            if self.names_its_message(log, index, &entry) {
                break;
            }
            tracing::warn!(topic = %self.topic, queue = self.queue_id, index, "consume queue: an entry that does not name its message cut");
            cq.truncate_from(index)?;
        }
        cq.delete_expired(log.min_offset())?;
        Ok(())
    }

    /// True when `entry` (entry `index` of this queue) names this queue's
    /// message `index` in `log`, or a record the log's cleaning deleted.
    pub(crate) fn names_its_message(&self, log: &commitlog::CommitLog, index: u64, entry: &CqEntry) -> bool {
        if entry.offset < log.min_offset() {
            return true; // expired with the log's front; not this check's business
        }
        log.read(entry.offset).ok().is_some_and(|record| {
            record.size == u64::from(entry.size)
                && decode_header(&record.body)
                    .is_ok_and(|h| h.topic == self.topic && h.queue_id == self.queue_id && h.queue_offset == index)
        })
    }

    /// Flushes and closes the consume queue, and wakes the waiters for good.
    pub(crate) fn close(&self) -> Result<(), StoreError> {
        self.signal.close();
        if let Some(cq) = self.consume_queue.lock().take() {
            cq.shutdown()?;
        }
        Ok(())
    }
}

/// The queues of every topic, by topic and id.
#[derive(Debug, Default)]
pub(crate) struct Queues {
    topics: RwLock<HashMap<String, Arc<[Arc<Queue>]>>>,
}

impl Queues {
    /// The queue `topic`/`queue_id`, if the topic has it.
    pub(crate) fn get(&self, topic: &str, queue_id: u32) -> Option<Arc<Queue>> {
        let topics = self.topics.read();
        topics.get(topic)?.get(usize::try_from(queue_id).ok()?).cloned()
    }

    /// The queues of `topic`.
    pub(crate) fn of_topic(&self, topic: &str) -> Option<Arc<[Arc<Queue>]>> {
        self.topics.read().get(topic).cloned()
    }

    /// Adds `topic` with `count` queues (nothing if it is there).
    pub(crate) fn add_topic(&self, topic: &str, count: u32) {
        let mut topics = self.topics.write();
        topics
            .entry(topic.to_string())
            .or_insert_with(|| (0..count).map(|id| Arc::new(Queue::new(topic, id))).collect());
    }

    /// Every queue of every topic.
    pub(crate) fn all(&self) -> Vec<Arc<Queue>> {
        self.topics.read().values().flat_map(|queues| queues.iter().cloned()).collect()
    }
}
