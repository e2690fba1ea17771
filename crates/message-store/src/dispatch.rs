//! Dispatch (RocketMQ's `ReputMessageService`): the log's messages, in log
//! order, become entries of their queues in the queue index, and waiting
//! consumers hear of them. The dispatch point is where the next message to
//! dispatch starts; every message below it is in the index.
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
use parking_lot::Mutex;
use queue_index::{Entry, IndexError, QueueIndex};

use crate::checkpoint::{IndexRecord, Recorded, RecordedTopic};
use crate::config::DispatchLimit;
use crate::error::StoreError;
use crate::index::Index;
use crate::message::{decode_header, Header};
use crate::queues::{Queue, Queues};

/// Records a dispatch round puts before it wakes the consumers of the queues
/// they went to (and it wakes them when the round ends, whatever its length):
/// at 100,000 messages/s a stretch takes well under a millisecond.
const WAKE_EVERY: u64 = 64;

/// The dispatcher's state, shared by the store and its dispatch thread.
#[derive(Debug)]
pub(crate) struct Dispatcher {
    pub(crate) log: CommitLog,
    /// The topics and the queues in use.
    pub(crate) queues: Arc<Queues>,
    /// The queue index.
    pub(crate) queue_index: Arc<QueueIndex>,
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
    /// Rounds that found at least one record.
    rounds: AtomicU64,
    /// Pauses the next record's dispatch between its queue's lookup and its
    /// append (tests of the race with `delete_topic`); taken when used.
    #[cfg(test)]
    pub(crate) queue_looked_up: crate::pause::Pause,
}

/// What one dispatch round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Round {
    /// Records dispatched.
    pub(crate) records: u64,
    /// Of those, records whose queue entry their put had put already (a
    /// queue a consumer tails, by the written end): their consumers had them
    /// before this round.
    pub(crate) indexed_by_puts: u64,
}

/// The queue-index entry of `record`.
pub(crate) fn entry_of(record: &Record, tags_code: u64) -> Entry {
    // A record lies within one segment, whose size is a u32 at most... or the
    // entry says u32::MAX and its check against the log fails loudly.
    Entry { log_offset: record.offset, size: u32::try_from(record.size).unwrap_or(u32::MAX), tag: tags_code }
}

impl Dispatcher {
    pub(crate) fn new(
        log: CommitLog,
        queues: Arc<Queues>,
        queue_index: Arc<QueueIndex>,
        limit: DispatchLimit,
        point: u64,
        index: Option<Arc<Index>>,
    ) -> Self {
        Dispatcher {
            log,
            queues,
            queue_index,
            limit,
            index,
            point: AtomicU64::new(point),
            running: Mutex::new(()),
            error: Mutex::new(None),
            skipped: AtomicU64::new(0),
            rounds: AtomicU64::new(0),
            #[cfg(test)]
            queue_looked_up: crate::pause::Pause::default(),
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

    /// Holds dispatch off while the guard lives: no record is between its
    /// queue's lookup and its append (`delete_topic` forgets a topic's queues
    /// under it), and in tests, a window of records written and not
    /// dispatched. A dispatch round under way finishes first.
    pub(crate) fn hold(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.running.lock()
    }

    /// The dispatch service's rounds that found at least one record since
    /// open (open's replay and [`dispatch_now`](crate::MessageStore::dispatch_now)
    /// are not rounds of the service).
    pub(crate) fn rounds(&self) -> u64 {
        self.rounds.load(Ordering::Relaxed)
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

    /// Dispatches every message up to the limit: dispatch's round (see
    /// [`Round`]). On an error the point stays at the message that failed.
    pub(crate) fn dispatch_round(&self) -> Result<Round, StoreError> {
        let round = self.dispatch_counting(self.limit());
        if round.as_ref().is_ok_and(|round| round.records > 0) {
            self.rounds.fetch_add(1, Ordering::Relaxed);
        }
        round
    }

    /// Dispatches every message that ends at or below `limit`.
    pub(crate) fn dispatch_up_to(&self, limit: u64) -> Result<u64, StoreError> {
        self.dispatch_counting(limit).map(|round| round.records)
    }

    fn dispatch_counting(&self, limit: u64) -> Result<Round, StoreError> {
        let _running = self.running.lock();
        let mut point = self.point().max(self.log.min_offset());
        let mut count = 0u64;
        let mut indexed_by_puts = 0u64;
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
                if self.dispatch(&record, &mut owed)? {
                    indexed_by_puts = indexed_by_puts.saturating_add(1);
                }
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
        result.map(|()| Round { records: count, indexed_by_puts })
    }

    /// Puts one record's entry into the queue index (unless a sealed run has
    /// it already: dispatch after an open may start below the index's end,
    /// for the key index) and its keys into the key index. True if the queue
    /// index held the entry already (its put had put it).
    fn dispatch(&self, record: &Record, owed: &mut Vec<Arc<Queue>>) -> Result<bool, StoreError> {
        let header = match decode_header(&record.body) {
            Ok(header) => header,
            Err(err) => {
                tracing::warn!(offset = record.offset, %err, "dispatch: a record that is not a message skipped");
                self.skipped.fetch_add(1, Ordering::Relaxed);
                return Ok(false);
            }
        };
        if header.queue_offset == u64::MAX {
            // No put gives it (the queue's end would pass u64::MAX): a record
            // appended to the log by other means, skipped like one that is
            // not a message.
            tracing::warn!(offset = record.offset, topic = %header.topic, queue = header.queue_id, "dispatch: a message with queue offset u64::MAX skipped");
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return Ok(false);
        }
        let Some(key) = self.queues.key_of_record(&header.topic, header.queue_id, record.offset) else {
            tracing::debug!(offset = record.offset, topic = %header.topic, queue = header.queue_id, "dispatch: a message of an unknown queue skipped");
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return Ok(false);
        };
        if record.offset < self.queue_index.sealed_to() {
            return self.index_keys(&header, record).map(|()| false);
        }
        #[cfg(test)]
        self.queue_looked_up.reached();
        let entry = entry_of(record, header.tags_code);
        let held = self.queue_index.extent(key).is_some_and(|(_, end)| end > header.queue_offset);
        match if held { None } else { Some(self.queue_index.append(key, header.queue_offset, entry)) } {
            Some(Ok(())) => {}
            // Appended before: by its put (dispatch by the written end), or
            // by a round that failed after it (the keys). It must be this one.
            None | Some(Err(IndexError::NotInOrder { .. }))
                if self.queue_index.get(key, header.queue_offset, 1).first() == Some(&entry) => {}
            Some(Err(err)) => return Err(err.into()),
            None => {
                return Err(StoreError::from(IndexError::NotInOrder {
                    queue: key,
                    offset: header.queue_offset,
                    expected: self.queue_index.extent(key).map_or(0, |(_, end)| end),
                    log_offset: record.offset,
                    last_log_offset: record.offset,
                }))
            }
        }
        // Keys first: a consumer woken finds the message by its key too.
        self.index_keys(&header, record)?;
        if let Some(queue) = self.queues.live(key) {
            if queue.signal.publish(header.queue_offset.saturating_add(1)) {
                owed.push(queue);
            }
        }
        Ok(held)
    }

    /// Adds the message's keys to the index, if there is one.
    fn index_keys(&self, header: &Header, record: &Record) -> Result<(), StoreError> {
        match &self.index {
            Some(index) => index.put(&header.topic, &header.keys, record.offset, record.store_timestamp_ms),
            None => Ok(()),
        }
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
    /// with dispatch held (so that they belong to that point), the key
    /// index's live file and the topics.
    pub(crate) fn sample(&self, next_topic_id: u32) -> Recorded {
        let _running = self.running.lock();
        let topics = self
            .queues
            .topics()
            .into_iter()
            .map(|(topic, e)| {
                (topic, RecordedTopic { queues: e.queues, id: Some(e.id), since: e.since, ..Default::default() })
            })
            .collect();
        Recorded {
            point: self.point(),
            log_min: self.log.min_offset(),
            index: self.index.as_ref().map_or(IndexRecord::Off, |index| index.record()),
            topics,
            next_id: next_topic_id,
        }
    }
}
