//! Puts: a message, or a batch of one queue's, appended to the log with its
//! queue's next offsets under the queue's put lock (and, under async flush,
//! its entry put into the queue index at once for a queue a consumer tails).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use commitlog::DurabilityHandle;
use parking_lot::MutexGuard;
use queue_index::Entry;

use crate::config::DispatchLimit;
use crate::error::{MessageError, StoreError};
use crate::message::{set_queue_offset, Message};
use crate::queues::Queue;
use crate::store::{Core, MessageStore};

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

impl MessageStore {
    /// Puts `message` on its topic's queue: appended to the log with the queue's
    /// next offset, assigned under the queue's put lock (the log holds a queue's
    /// messages in offset order, offsets dense from 0). Nothing is appended, and
    /// no offset used, if it is refused.
    pub fn put_message(&self, message: &Message) -> Result<PutResult, StoreError> {
        let mut encoded = message.encode(&self.core.config.limits, born_or_now(message.born_timestamp_ms))?;
        let queue = self.queue_for_put(&message.topic, message.queue_id)?;
        #[cfg(planted_bugs)]
        let outside_lock = crate::planted::is_active(crate::planted::Bug::OffsetOutsidePutLock);
        #[cfg(not(planted_bugs))]
        let outside_lock = false;
        let (queue_offset, appended) = {
            let mut next = queue.next_offset.lock();
            let offset = self.next_offset_locked((&message.topic, message.queue_id), &queue, &mut next)?;
            set_queue_offset(&mut encoded, offset);
            let appended = if outside_lock {
                // The planted bug: the lock released for the append, so
                // another put takes the same offset, or appends the next first.
                MutexGuard::unlocked(&mut next, || {
                    std::thread::yield_now();
                    self.core.log.append(&encoded)
                })?
            } else {
                self.core.log.append(&encoded)?
            };
            // `offset + 1` (the lock held, `next` is `offset`), or the end
            // puts reached while it was released.
            *next = Some(next.unwrap_or(0).max(offset.saturating_add(1)));
            if !outside_lock {
                let size = u32::try_from(appended.wrote_bytes).unwrap_or(u32::MAX);
                let entry = Entry { log_offset: appended.wrote_offset, size, tag: message.tags_code() };
                self.core.index_on_put(&queue, offset, entry);
            }
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

    /// Wakes dispatch after a put, where it reads up to the log's written end.
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
}

impl Core {
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
    use std::time::Duration;

    use commitlog::FlushDiskType;

    use super::*;
    use crate::store::tests::small_log;
    use crate::MessageStoreConfig;

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
