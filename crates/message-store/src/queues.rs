//! The queues of the store: each one's put lock (which assigns queue offsets),
//! its consume queue (opened on first use, made consistent with the log then),
//! and the signal long-polling consumers wait on.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use consume_queue::{ConsumeQueue, ConsumeQueueConfig, CqEntry, CqError};
use parking_lot::{Mutex, RwLock};
use store_io::Storage;

use crate::checkpoint::{Extent, Recorded};
use crate::error::StoreError;
use crate::message::decode_header;
use crate::signal::Signal;

/// The directory of a queue's consume queue: `<root>/consumequeue/<topic>/<queue>`.
pub(crate) fn queue_dir(root: &Path, topic: &str, queue_id: u32) -> PathBuf {
    root.join("consumequeue").join(topic).join(queue_id.to_string())
}

/// How many of a queue's last consume-queue segments its first open reads.
const CHECKED_SEGMENTS: usize = 3;

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
    /// Its extent when it was last closed (for the checkpoint: what a closed
    /// queue holds, without opening it).
    closed_extent: Mutex<Option<Extent>>,
    /// When it was last closed: the log's first offset from which its first
    /// segment can expire (`u64::MAX`: it has one segment, which never does).
    closed_expiry: AtomicU64,
    /// Rebuilt from the log by the open's own pass: its first open starts it
    /// empty instead of repairing it.
    rebuild_at_open: AtomicBool,
    pub(crate) signal: Signal,
}

/// What the queues need from the store to open their consume queues.
#[derive(Debug)]
pub(crate) struct QueueContext {
    pub(crate) root: PathBuf,
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) config: ConsumeQueueConfig,
    /// The dispatch point this open recovered from: every queue's entries
    /// below it are what the checkpoint recorded (`recorded`), and its messages
    /// from it on are dispatched again.
    pub(crate) recovered_from: u64,
    /// What the dispatch checkpoint recorded of each queue (`None`: nothing
    /// usable, every queue is rebuilt from the log).
    pub(crate) recorded: Option<Arc<Recorded>>,
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
    /// Consume queues found damaged and repaired from the log.
    pub(crate) repaired: AtomicU64,
    /// Entries put again by those repairs.
    pub(crate) entries_repaired: AtomicU64,
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

    /// What the checkpoint recorded of `queue` (`None`: nothing usable).
    fn recorded_extent(&self, queue: &Queue) -> Option<Extent> {
        self.recorded.as_ref().map(|r| r.extent(&queue.topic, queue.queue_id))
    }
}

impl Queue {
    pub(crate) fn new(topic: &str, queue_id: u32) -> Self {
        Queue {
            topic: topic.to_string(),
            queue_id,
            next_offset: Mutex::new(None),
            consume_queue: Mutex::new(None),
            last_used: AtomicU64::new(0),
            checked: AtomicBool::new(false),
            closed_extent: Mutex::new(None),
            closed_expiry: AtomicU64::new(0),
            rebuild_at_open: AtomicBool::new(false),
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
            // nothing to cut or check then, but what the log's cleaning
            // deleted since expires.
            let cq = if self.checked.load(Ordering::Acquire) {
                let (storage, config) = (Arc::clone(&context.storage), context.config.clone());
                let cq = match *self.closed_extent.lock() {
                    Some((first, next)) => ConsumeQueue::reopen_at(storage, &dir, config, first, next)?,
                    None => ConsumeQueue::reopen(storage, &dir, config)?,
                };
                cq.delete_expired(log.min_offset())?;
                cq
            } else {
                let cq = self.open_checked(context, log, &dir)?;
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

    /// True once this process checked the queue against the log.
    pub(crate) fn is_checked(&self) -> bool {
        self.checked.load(Ordering::Acquire)
    }

    /// The queue's extent as this process knows it: its consume queue's if it
    /// is open, else what it held when closed; `None` if not checked yet.
    pub(crate) fn extent(&self) -> Option<Extent> {
        if let Some(cq) = &*self.consume_queue.lock() {
            return Some((cq.min_index(), cq.next_index()));
        }
        *self.closed_extent.lock()
    }

    /// True when the queue is closed and expiring against `log_min` may delete
    /// some of its files (or it was never opened, so nothing is known).
    pub(crate) fn may_expire(&self, log_min: u64) -> bool {
        !self.is_checked() || self.closed_expiry.load(Ordering::Acquire) <= log_min
    }

    /// Marks the queue to be rebuilt by the open's own pass over the log.
    pub(crate) fn rebuild_at_open(&self) {
        self.rebuild_at_open.store(true, Ordering::Release);
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
                *self.closed_extent.lock() = Some((cq.min_index(), cq.next_index()));
                self.closed_expiry.store(cq.expiry_threshold()?, Ordering::Release);
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

    /// Opens the consume queue in `dir` for the first time in this process
    /// and makes it agree with the log. What the dispatch checkpoint recorded
    /// of it (its first offset and end at the recovered point) is what it
    /// must hold below that point; what it holds past its recorded end was
    /// written after and is cut (dispatch puts it again). Then, below the
    /// point, every entry of its last [`CHECKED_SEGMENTS`] segments must be
    /// there and in log order, the last one must name its message, and nothing
    /// may be missing from the front or the end: otherwise the queue is
    /// damaged, and repaired from the log from the first entry that is not
    /// (files that do not load are removed first). Never cut short: a queue
    /// offset the log holds is never given again.
    fn open_checked(
        &self,
        context: &QueueContext,
        log: &commitlog::CommitLog,
        dir: &Path,
    ) -> Result<ConsumeQueue, StoreError> {
        #[cfg(planted_bugs)]
        if crate::planted::is_active(crate::planted::Bug::QueueNotCut) {
            return Ok(ConsumeQueue::reopen(Arc::clone(&context.storage), dir, context.config.clone())?);
        }
        let (recorded_min, recorded_end) = match context.recorded_extent(self) {
            _ if self.rebuild_at_open.swap(false, Ordering::AcqRel) => (0, 0),
            Some(extent) => extent,
            None => (0, 0), // nothing recorded durable: every entry is stale
        };
        let storage = Arc::clone(&context.storage);
        let cq = match ConsumeQueue::open_to(Arc::clone(&storage), dir, context.config.clone(), recorded_end) {
            Ok(cq) => cq,
            Err(err) if is_damaged_layout(&err) => {
                tracing::warn!(topic = %self.topic, queue = self.queue_id, %err, "consume queue files damaged; removed, the queue is rebuilt from the log");
                remove_segment_files(&*storage, dir)?;
                ConsumeQueue::open_to(storage, dir, context.config.clone(), 0)?
            }
            Err(err) => return Err(err.into()),
        };
        if recorded_end == 0 {
            return Ok(cq);
        }
        if recorded_min == recorded_end {
            // Every message it had expired with the log's front: it holds none,
            // and goes on from its end.
            if cq.next_index() < recorded_end {
                cq.clear()?;
                cq.start_empty_at(recorded_end)?;
            }
            return Ok(cq);
        }
        let point = context.recovered_from;
        let files_first = cq.min_index();
        // The front may have moved since the point only with the log's own front.
        let log_front_moved = context.recorded.as_ref().is_some_and(|r| log.min_offset() > r.log_min);
        // The entries of the last segments are read (as RocketMQ recovers a
        // queue's last three files): an open costs the same however long the
        // queue. Older damage is found by the read that meets it, or `verify`.
        let recent = cq.last_segments_start(CHECKED_SEGMENTS);
        let damaged_at = if files_first > recorded_min && !log_front_moved {
            Some(recorded_min)
        } else {
            cq.first_damaged(recorded_min.max(files_first).max(recent), point)?
        };
        let damaged_at =
            damaged_at.or_else(|| (cq.next_index() < recorded_end).then_some(cq.next_index())).or(match cq.last()? {
                Some((index, entry)) if !self.names_its_message(log, index, &entry) => Some(index),
                _ => None,
            });
        if let Some(at) = damaged_at {
            tracing::warn!(topic = %self.topic, queue = self.queue_id, at, recorded_end, "consume queue damaged below the recorded dispatch point; repairing it from the log");
            context.repaired.fetch_add(1, Ordering::Relaxed);
            let put = self.repair_range(&cq, at, log, point)?;
            context.entries_repaired.fetch_add(put, Ordering::Relaxed);
            if cq.is_empty() && cq.next_index() < recorded_end {
                // The log holds none of its messages any more (expired): it
                // goes on from its end, never from an offset given before.
                cq.clear()?;
                cq.start_empty_at(recorded_end)?;
            } else if cq.next_index() != recorded_end {
                tracing::warn!(topic = %self.topic, queue = self.queue_id, end = cq.next_index(), recorded_end, "consume queue repaired to another end than the checkpoint recorded: the log holds that");
            }
        }
        cq.delete_expired(log.min_offset())?;
        Ok(cq)
    }

    /// Cuts `cq` at index `from` and puts again, from `log`, this queue's
    /// messages from there up to log offset `upto` (a dispatch point: every
    /// message below it was dispatched). The log is read from the end of the
    /// record entry `from - 1` names, if that entry names its message, else from
    /// its first offset with the whole queue rebuilt. If what the log holds does
    /// not follow what was kept, the whole queue is rebuilt. Returns the
    /// entries put.
    pub(crate) fn repair_range(
        &self,
        cq: &ConsumeQueue,
        from: u64,
        log: &commitlog::CommitLog,
        upto: u64,
    ) -> Result<u64, StoreError> {
        let before = match from.checked_sub(1).filter(|&i| i >= cq.min_index()) {
            Some(i) => cq.get(i)?.filter(|entry| self.names_its_message(log, i, entry)),
            None => None,
        };
        let mut whole = before.is_none();
        let mut resume = before.map_or(log.min_offset(), |entry| entry.end());
        loop {
            #[cfg(planted_bugs)]
            let trust = crate::planted::is_active(crate::planted::Bug::RepairTrustsDamage);
            #[cfg(not(planted_bugs))]
            let trust = false;
            if trust {
                // The bug as it would be written: the damaged entry taken for the
                // queue's end, and the rest "dispatched again" from the point.
                cq.truncate_from(from)?;
                return Ok(0);
            }
            if whole {
                cq.clear()?;
            } else {
                cq.truncate_from(from)?;
            }
            match self.put_from_log(cq, log, resume, upto)? {
                Some(put) => return Ok(put),
                None if !whole => {
                    whole = true;
                    resume = log.min_offset();
                }
                None => {
                    return Err(StoreError::IndexMismatch {
                        topic: self.topic.clone(),
                        queue_id: self.queue_id,
                        queue_offset: cq.next_index(),
                        log_offset: resume,
                    })
                }
            }
        }
    }

    /// Puts this queue's messages of `log` in `[from, upto)` into `cq`; `None`
    /// if one does not follow the queue's end (the log disagrees with what the
    /// queue kept).
    fn put_from_log(
        &self,
        cq: &ConsumeQueue,
        log: &commitlog::CommitLog,
        from: u64,
        upto: u64,
    ) -> Result<Option<u64>, StoreError> {
        let mut put = 0u64;
        for record in log.iter_from(from.max(log.min_offset())) {
            let record = record?;
            if record.offset >= upto {
                break;
            }
            let Ok(header) = decode_header(&record.body) else { continue };
            if header.topic != self.topic || header.queue_id != self.queue_id {
                continue;
            }
            if !cq.is_empty() && header.queue_offset != cq.next_index() {
                return Ok(None);
            }
            cq.put(header.queue_offset, entry_of(&record, header.tags_code))?;
            put = put.saturating_add(1);
        }
        Ok(Some(put))
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

/// True when `err` says the files of a queue's directory do not form a queue
/// (a wrong size, a misplaced or missing segment): derived data that is
/// removed and rebuilt. A file that is not a segment (a foreign name) is not
/// removed: the error names it.
fn is_damaged_layout(err: &CqError) -> bool {
    use segment_queue::QueueError as Q;
    matches!(err, CqError::Queue(Q::WrongSize { .. } | Q::Misaligned { .. } | Q::Gap { .. } | Q::Duplicate { .. }))
}

/// Removes the segment files (20-digit names) and left-over temporary files of
/// `dir`, derived data being rebuilt; returns how many.
pub(crate) fn remove_segment_files(storage: &dyn Storage, dir: &Path) -> Result<usize, StoreError> {
    let files = match storage.list(dir) {
        Ok(files) => files,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(source) => return Err(StoreError::Io { path: dir.to_path_buf(), source }),
    };
    let mut removed = 0;
    for file in files {
        let segment = file.name.len() == 20 && file.name.bytes().all(|b| b.is_ascii_digit());
        if segment || file.name.ends_with(".tmp") {
            let path = dir.join(&file.name);
            storage.remove(&path).map_err(|source| StoreError::Io { path, source })?;
            removed += 1;
        }
    }
    Ok(removed)
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

    /// Every topic with its queues.
    pub(crate) fn topics(&self) -> Vec<(String, Arc<[Arc<Queue>]>)> {
        self.topics.read().iter().map(|(topic, queues)| (topic.clone(), Arc::clone(queues))).collect()
    }

    /// Every queue of every topic.
    pub(crate) fn all(&self) -> Vec<Arc<Queue>> {
        self.topics.read().values().flat_map(|queues| queues.iter().cloned()).collect()
    }
}

/// The consume-queue entry of `record`.
pub(crate) fn entry_of(record: &commitlog::Record, tags_code: u64) -> CqEntry {
    // A record lies within one segment, whose size is a u32 at most... or the
    // entry says u32::MAX and its check against the log fails loudly.
    CqEntry { offset: record.offset, size: u32::try_from(record.size).unwrap_or(u32::MAX), tag: tags_code }
}
