//! Dispatch (RocketMQ's `ReputMessageService`): the log's messages, in log
//! order, become entries of their queues' consume queues, and waiting consumers
//! hear of them. The dispatch point is where the next message to dispatch
//! starts; every message below it is in its consume queue.
//!
//! The dispatcher reads only as far as the [`DispatchLimit`] allows: under sync
//! flush, only what is durable, so a consumer never sees a message a crash can
//! take back. It is woken, never polls: by each put (written limit) or by each
//! flush of the log (durable limit). A record it cannot dispatch stops it there
//! with the error kept for [`MessageStore::dispatch_error`](crate::MessageStore):
//! it never skips what it cannot read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use commitlog::{CommitLog, Record};
use consume_queue::ConsumeQueue;
use parking_lot::Mutex;

use crate::checkpoint::{IndexRecord, Recorded, RecordedTopic};
use crate::config::DispatchLimit;
use crate::error::StoreError;
use crate::index::Index;
use crate::message::{decode_header, Header};
use crate::queues::{entry_of, Queue, QueueContext};

/// Records a dispatch round puts before it wakes the consumers of the queues
/// they went to (and it wakes them when the round ends, whatever its length):
/// at 100,000 messages/s a stretch takes well under a millisecond.
const WAKE_EVERY: u64 = 64;

/// The dispatcher's state, shared by the store and its dispatch thread.
#[derive(Debug)]
pub(crate) struct Dispatcher {
    pub(crate) log: CommitLog,
    /// The queues (`context.queues`) and what opening their consume queues takes.
    pub(crate) context: QueueContext,
    limit: DispatchLimit,
    /// The key index, if built.
    pub(crate) index: Option<Arc<Index>>,
    /// Where the next message to dispatch starts.
    point: AtomicU64,
    /// One dispatch at a time (the thread, and recovery before it starts).
    running: Mutex<()>,
    /// Why dispatch stopped, while it is stopped.
    error: Mutex<Option<String>>,
    /// Records of the log that are not messages of a known queue (skipped).
    pub(crate) skipped: AtomicU64,
}

impl Dispatcher {
    pub(crate) fn new(
        log: CommitLog,
        context: QueueContext,
        limit: DispatchLimit,
        point: u64,
        index: Option<Arc<Index>>,
    ) -> Self {
        Dispatcher {
            log,
            context,
            limit,
            index,
            point: AtomicU64::new(point),
            running: Mutex::new(()),
            error: Mutex::new(None),
            skipped: AtomicU64::new(0),
        }
    }

    /// Where the next message to dispatch starts.
    pub(crate) fn point(&self) -> u64 {
        self.point.load(Ordering::Acquire)
    }

    /// The log offset dispatch may read up to now.
    pub(crate) fn limit(&self) -> u64 {
        #[cfg(planted_bugs)]
        if crate::planted::is_active(crate::planted::Bug::DispatchBeforeDurable) {
            return self.log.max_offset();
        }
        match self.limit {
            DispatchLimit::Durable => self.log.flushed_offset(),
            DispatchLimit::Written => self.log.max_offset(),
        }
    }

    /// Why dispatch is stopped, if it is.
    pub(crate) fn error(&self) -> Option<String> {
        self.error.lock().clone()
    }

    /// Dispatches every message up to the limit; returns how many. On an error
    /// the point stays at the message that failed (the next call tries it again).
    pub(crate) fn dispatch_available(&self) -> Result<u64, StoreError> {
        self.dispatch_up_to(self.limit())
    }

    /// Dispatches every message that ends at or below `limit`.
    pub(crate) fn dispatch_up_to(&self, limit: u64) -> Result<u64, StoreError> {
        let _running = self.running.lock();
        let mut point = self.point().max(self.log.min_offset());
        let mut count = 0u64;
        // Queues whose end moved and whose waiters are not woken yet: woken
        // every `WAKE_EVERY` records and when the round ends.
        let mut owed: Vec<Arc<Queue>> = Vec::new();
        let wake = |owed: &mut Vec<Arc<Queue>>| owed.drain(..).for_each(|q| q.signal.wake());
        let result = (|| {
            for record in self.log.iter_from(point) {
                let record = match record {
                    Ok(record) => record,
                    // Not durable yet (the log's read limit): later.
                    Err(commitlog::Error::NotYetDurable { .. }) => break,
                    Err(err) => return Err(StoreError::from(err)),
                };
                if record.next_offset() > limit {
                    break;
                }
                self.dispatch(&record, &mut owed)?;
                point = record.next_offset();
                self.point.store(point, Ordering::Release);
                count = count.saturating_add(1);
                if count.is_multiple_of(WAKE_EVERY) {
                    wake(&mut owed);
                }
            }
            Ok(())
        })();
        self.point.store(point, Ordering::Release);
        wake(&mut owed);
        match &result {
            Ok(()) => *self.error.lock() = None,
            Err(err) => {
                let mut error = self.error.lock();
                if error.is_none() {
                    tracing::error!(point, %err, "dispatch stopped at this record; retrying");
                }
                *error = Some(format!("at log offset {point}: {err}"));
            }
        }
        result.map(|()| count)
    }

    /// Puts one record's entry into its queue's consume queue. A queue whose
    /// entries do not lead up to this message (some missing, or one naming
    /// another record) is repaired from the log first: it never skips it.
    fn dispatch(&self, record: &Record, owed: &mut Vec<Arc<Queue>>) -> Result<(), StoreError> {
        let header = match decode_header(&record.body) {
            Ok(header) => header,
            Err(err) => {
                tracing::warn!(offset = record.offset, %err, "dispatch: a record that is not a message skipped");
                self.skipped.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        };
        let Some(queue) = self.context.queues.get(&header.topic, header.queue_id) else {
            tracing::warn!(offset = record.offset, topic = %header.topic, queue = header.queue_id, "dispatch: a message of an unknown queue skipped");
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        };
        let cq = queue.consume_queue(&self.context, &self.log)?;
        let entry = entry_of(record, header.tags_code);
        let (first, next) = (cq.min_index(), cq.next_index());
        if header.queue_offset < next && header.queue_offset >= first {
            // The queue has this offset already: fine if it names this record
            // (dispatched before), else the queue is damaged there.
            if cq.get(header.queue_offset)?.is_some_and(|e| e.offset == record.offset && e.size == entry.size) {
                // Its entry is there; its keys may not be (a retry after the
                // index failed): the index skips what it holds. Waiters hear
                // of it either way.
                self.index_keys(&header, record)?;
                if queue.signal.publish(next) {
                    owed.push(queue);
                }
                return Ok(());
            }
            self.repair(&queue, &cq, header.queue_offset, record.offset, "an entry names another record")?;
        } else if !cq.is_empty() && header.queue_offset != next {
            // Below the queue's first entry while the log holds it (the queue
            // lost its front), or beyond its end (entries missing).
            self.repair(&queue, &cq, header.queue_offset.min(next), record.offset, "entries missing")?;
        }
        cq.put(header.queue_offset, entry)?;
        self.index_keys(&header, record)?;
        if queue.signal.publish(header.queue_offset.saturating_add(1)) {
            owed.push(queue);
        }
        Ok(())
    }

    /// Adds the message's keys to the index, if there is one.
    fn index_keys(&self, header: &Header, record: &Record) -> Result<(), StoreError> {
        match &self.index {
            Some(index) => index.put(&header.topic, &header.keys, record.offset, record.store_timestamp_ms),
            None => Ok(()),
        }
    }

    /// Repairs `queue`'s consume queue from index `from`, putting its messages
    /// of the log below `upto` again (the caller dispatches what follows).
    /// Counted, and said loudly; returns the entries put.
    fn repair(&self, queue: &Queue, cq: &ConsumeQueue, from: u64, upto: u64, why: &str) -> Result<u64, StoreError> {
        tracing::warn!(topic = %queue.topic, queue = queue.queue_id, from, why, "consume queue damaged; repairing it from the log");
        self.context.repaired.fetch_add(1, Ordering::Relaxed);
        let put = queue.repair_range(cq, from, &self.log, upto)?;
        self.context.entries_repaired.fetch_add(put, Ordering::Relaxed);
        Ok(put)
    }

    /// Repairs `queue` from index `from` while the store runs (a reader found
    /// the entry there damaged): with dispatch held, its messages up to the
    /// dispatch point are put again. Returns the repaired consume queue and
    /// the entries put.
    pub(crate) fn repair_live(
        &self,
        queue: &Queue,
        from: u64,
        why: &str,
    ) -> Result<(Arc<ConsumeQueue>, u64), StoreError> {
        let _running = self.running.lock();
        let cq = queue.consume_queue(&self.context, &self.log)?;
        let put = self.repair(queue, &cq, from, self.point(), why)?;
        queue.signal.arrive(cq.next_index());
        Ok((cq, put))
    }

    /// At open, before dispatch starts: puts the messages of `[from, upto)`
    /// again into `queues` (marked to start empty) and, if `reindex`, their
    /// keys into the index (emptied), in one pass over the log. For derived
    /// data found missing whole (a queue's directory, the index files).
    pub(crate) fn rebuild_below(
        &self,
        queues: &[Arc<Queue>],
        reindex: bool,
        from: u64,
        upto: u64,
    ) -> Result<u64, StoreError> {
        let _running = self.running.lock();
        let wanted: std::collections::HashSet<(&str, u32)> =
            queues.iter().map(|q| (q.topic.as_str(), q.queue_id)).collect();
        let mut put = 0u64;
        for record in self.log.iter_from(from.max(self.log.min_offset())) {
            let record = record?;
            if record.offset >= upto {
                break;
            }
            let Ok(header) = decode_header(&record.body) else { continue };
            if wanted.contains(&(header.topic.as_str(), header.queue_id)) {
                if let Some(queue) = self.context.queues.get(&header.topic, header.queue_id) {
                    let cq = queue.consume_queue(&self.context, &self.log)?;
                    if cq.is_empty() || header.queue_offset >= cq.next_index() {
                        cq.put(header.queue_offset, entry_of(&record, header.tags_code))?;
                        put = put.saturating_add(1);
                    }
                }
            }
            if reindex {
                self.index_keys(&header, &record)?;
            }
        }
        Ok(put)
    }

    /// Empties the key index and adds again the keys of every message below
    /// the dispatch point, with dispatch held (the index's items stay in log
    /// order). Returns the messages whose keys were added.
    pub(crate) fn rebuild_index(&self) -> Result<u64, StoreError> {
        let _running = self.running.lock();
        let Some(index) = &self.index else { return Ok(0) };
        tracing::warn!("rebuilding the key index from the log");
        index.clear()?;
        let mut indexed = 0u64;
        for record in self.log.iter_from(self.log.min_offset()) {
            let record = record?;
            if record.offset >= self.point() {
                break;
            }
            let Ok(header) = decode_header(&record.body) else { continue };
            if !header.keys.is_empty() {
                index.put(&header.topic, &header.keys, record.offset, record.store_timestamp_ms)?;
                indexed = indexed.saturating_add(1);
            }
        }
        Ok(indexed)
    }

    /// What the checkpoint would record now: the dispatch point and, sampled
    /// with dispatch held (so that they belong to that point), every queue's
    /// extent and the index's live file.
    pub(crate) fn sample(&self) -> Recorded {
        let _running = self.running.lock();
        let mut recorded = Recorded {
            point: self.point(),
            log_min: self.log.min_offset(),
            index: self.index.as_ref().map_or(IndexRecord::Off, |index| index.record()),
            ..Recorded::default()
        };
        for (topic, queues) in self.context.queues.topics() {
            let mut entry =
                RecordedTopic { queues: u32::try_from(queues.len()).unwrap_or(u32::MAX), ..Default::default() };
            for queue in queues.iter() {
                let extent = queue
                    .extent()
                    .or_else(|| self.context.recorded.as_ref().map(|r| r.extent(&queue.topic, queue.queue_id)));
                if let Some(extent) = extent.filter(|(_, end)| *end > 0) {
                    entry.extents.insert(queue.queue_id, extent);
                }
            }
            recorded.topics.insert(topic, entry);
        }
        recorded
    }
}
