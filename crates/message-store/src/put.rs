//! Puts: a message, or a batch of one queue's, appended to the log with its
//! queue's next offsets under the queue's put lock (and, under async flush,
//! its entry put into the queue index at once for a queue a consumer tails).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::MutexGuard;
use queue_index::Entry;

use crate::config::DispatchLimit;
use crate::error::{MessageError, StoreError};
use crate::group::{BatchPutResult, Pending, PutMember, PutResult, MOST_MEMBERS};
use crate::message::{set_queue_offset, Message};
use crate::queues::Queue;
use crate::store::{Core, MessageStore};
use flush_service::{Answer, AnswerLeft, Leading, Turn};

impl MessageStore {
    /// Puts `message` on its topic's queue: appended to the log with the queue's
    /// next offset, assigned under the queue's put lock (the log holds a queue's
    /// messages in offset order, offsets dense from 0). Nothing is appended, and
    /// no offset used, if it is refused.
    pub fn put_message(&self, message: &Message) -> Result<PutResult, StoreError> {
        let encoded = message.encode(&self.core.config.limits, born_or_now(message.born_timestamp_ms))?;
        let queue = self.queue_for_put(&message.topic, message.queue_id)?;
        let put = Put { topic: &message.topic, queue_id: message.queue_id, tags_code: message.tags_code() };
        #[cfg(planted_bugs)]
        let outside_lock = crate::planted::is_active(crate::planted::Bug::OffsetOutsidePutLock);
        #[cfg(not(planted_bugs))]
        let outside_lock = false;
        if outside_lock || !self.core.config.write_groups {
            let mut arrivals = Arrivals::default();
            let result = self.put_alone(put, encoded, &queue, outside_lock, &mut arrivals);
            arrivals.announce();
            return result;
        }
        let groups = &self.core.groups;
        // No put leads: this one appends its message alone, then what queued meanwhile.
        if let Some(lead) = groups.try_lead() {
            return self.put_leading(lead, put, encoded, &queue);
        }
        // The queue's next offset looked up here, in the put's own thread,
        // if it is not known yet (a queue's first put since it came into
        // use): a leader appending a group of puts to many queues would
        // otherwise look each up in turn, while they all wait.
        self.next_offset_locked((put.topic, put.queue_id), &queue, &mut queue.next_offset.lock())?;
        let member = PutMember::new(Pending {
            queue,
            topic: put.topic.to_string(),
            queue_id: put.queue_id,
            tags_code: put.tags_code,
            body: parking_lot::Mutex::new(encoded),
        });
        let pending = member.payload();
        let answer = match groups.join(&member) {
            Turn::Lead(lead) => return self.put_leading(lead, put, pending.take_body(), &pending.queue),
            Turn::LeadGroup(lead) => {
                let mut arrivals = Arrivals::default();
                let group =
                    groups.take(&lead, Some(Arc::clone(&member)), MOST_MEMBERS, self.group_bytes(), Pending::bytes);
                self.append_group(&group, &mut arrivals);
                self.append_waiting(lead, &mut arrivals);
                arrivals.announce();
                member.take_answer()
            }
            Turn::Answered(answer) => answer,
        };
        match answer {
            Answer::Done(result) => Ok(result),
            // `Waiting` cannot come back once a group ran; put alone all the same.
            Answer::Alone | Answer::Waiting | Answer::Lead => {
                let mut arrivals = Arrivals::default();
                let result = self.put_alone(put, pending.take_body(), &pending.queue, false, &mut arrivals);
                arrivals.announce();
                result
            }
        }
    }

    /// With the lead: appends `encoded` alone, then what queued meanwhile,
    /// lets the lead go and wakes the waiters the appends owe.
    fn put_leading(
        &self,
        lead: Leading<'_, Pending, PutResult>,
        put: Put<'_>,
        encoded: Vec<u8>,
        queue: &Arc<Queue>,
    ) -> Result<PutResult, StoreError> {
        let mut arrivals = Arrivals::default();
        let result = self.put_alone(put, encoded, queue, false, &mut arrivals);
        self.append_waiting(lead, &mut arrivals);
        arrivals.announce();
        result
    }

    /// Appends the puts that queued while the lead's holder appended, as one
    /// group, then lets the lead go (to the first put queued since, if any).
    fn append_waiting(&self, lead: Leading<'_, Pending, PutResult>, arrivals: &mut Arrivals) {
        let group = self.core.groups.take(&lead, None, MOST_MEMBERS, self.group_bytes(), Pending::bytes);
        if !group.is_empty() {
            self.append_group(&group, arrivals);
        }
        drop(lead);
    }

    /// Appends `encoded` with its queue's next offset, under the queue's put
    /// lock (released for the append with the planted bug `outside_lock`).
    fn put_alone(
        &self,
        put: Put<'_>,
        mut encoded: Vec<u8>,
        queue: &Arc<Queue>,
        outside_lock: bool,
        arrivals: &mut Arrivals,
    ) -> Result<PutResult, StoreError> {
        let announced = arrivals.0.len();
        let (queue_offset, appended) = {
            let mut next = queue.next_offset.lock();
            let offset = self.next_offset_locked((put.topic, put.queue_id), queue, &mut next)?;
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
                let entry = Entry { log_offset: appended.wrote_offset, size, tag: put.tags_code };
                self.core.index_on_put(queue, offset, entry, arrivals);
            }
            (offset, appended)
        };
        self.after_put(1, arrivals.0.len() - announced);
        Ok(PutResult {
            queue_offset,
            log_offset: appended.wrote_offset,
            store_timestamp_ms: appended.store_timestamp_ms,
            durability: appended.durability,
        })
    }

    /// Appends a group's messages as one group of the log (one write, a
    /// durability request each), each with its queue's next offset, holding every queue's put lock from its offset
    /// to the batch's end; answers each member (with its result, or to put
    /// alone: its topic was deleted, or the append failed, which its own
    /// put then reports).
    fn append_group(&self, group: &[Arc<PutMember>], arrivals: &mut Arrivals) {
        // Whatever happens below (an error, a panic), no member waits for
        // ever: one not answered by the end is told to put alone.
        let _left = AnswerLeft(group);
        let mut held = HeldQueues { locks: Vec::new(), appended: false };
        let mut taken: Vec<(&Arc<PutMember>, u64)> = Vec::with_capacity(group.len());
        for member in group {
            let pending = member.payload();
            let next = held.lock(&pending.queue);
            // Refused (its topic deleted): left to put alone, and be refused.
            let Ok(offset) = self.next_offset_locked((&pending.topic, pending.queue_id), &pending.queue, next) else {
                continue;
            };
            set_queue_offset(&mut pending.body.lock(), offset);
            **next = Some(offset.saturating_add(1));
            taken.push((member, offset));
        }
        if taken.is_empty() {
            return;
        }
        let bodies: Vec<parking_lot::MutexGuard<'_, Vec<u8>>> =
            taken.iter().map(|(m, _)| m.payload().body.lock()).collect();
        let slices: Vec<&[u8]> = bodies.iter().map(|body| body.as_slice()).collect();
        let appended = self.core.log.append_group(&slices);
        drop(slices);
        drop(bodies);
        // Failed: nothing appended, and `held` puts every offset back as it
        // goes; each member puts alone and meets the error itself (or
        // succeeds, if it has passed).
        let Ok(appended) = appended else { return };
        held.appended = true;
        let announced = arrivals.0.len();
        // From here every member is answered with its result, even if what
        // follows panics: its message is in the log, and must not be put again.
        let mut answers = Answers(Vec::with_capacity(taken.len()));
        let placed = records(&appended.offsets, appended.wrote_bytes).zip(appended.durability);
        for ((member, offset), ((at, size), durability)) in taken.iter().zip(placed) {
            let result = PutResult {
                queue_offset: *offset,
                log_offset: at,
                store_timestamp_ms: appended.store_timestamp_ms,
                durability,
            };
            answers.0.push((member, size, result));
        }
        for (member, size, result) in &answers.0 {
            let pending = member.payload();
            let entry = Entry { log_offset: result.log_offset, size: *size, tag: pending.tags_code };
            self.core.index_on_put(&pending.queue, result.queue_offset, entry, arrivals);
        }
        drop(held);
        self.core.groups.written(taken.len());
        self.after_put(taken.len(), arrivals.0.len() - announced);
    }

    /// The most bytes a group appends: within half a segment.
    fn group_bytes(&self) -> usize {
        crate::group::MOST_BYTES.min(self.core.log.config().mapped_file_size_commit_log / 2)
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
        let mut arrivals = Arrivals::default();
        let (first_offset, appended) = {
            let mut next = queue.next_offset.lock();
            let offset = self.next_offset_locked((&first.topic, first.queue_id), &queue, &mut next)?;
            for (k, body) in encoded.iter_mut().enumerate() {
                set_queue_offset(body, offset.saturating_add(k as u64));
            }
            let appended = self.core.log.append_batch(&encoded)?;
            *next = Some(offset.saturating_add(messages.len() as u64));
            for (k, (m, (at, size))) in
                messages.iter().zip(records(&appended.offsets, appended.wrote_bytes)).enumerate()
            {
                let entry = Entry { log_offset: at, size, tag: m.tags_code() };
                self.core.index_on_put(&queue, offset.saturating_add(k as u64), entry, &mut arrivals);
            }
            (offset, appended)
        };
        let indexed = arrivals.0.len();
        arrivals.announce();
        self.after_put(messages.len(), indexed);
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

    /// Counts `messages` put, and wakes dispatch after a put, where it reads
    /// up to the log's written end (unless it naps between busy rounds: it
    /// then wakes by itself, `dispatch_nap_us`; or the put indexed all of
    /// its `indexed` messages itself and dispatch naps after a round of such
    /// puts, `dispatch_tailed_nap_us`).
    fn after_put(&self, messages: usize, indexed: usize) {
        self.core.put_messages.fetch_add(messages as u64, Ordering::Relaxed);
        #[cfg(planted_bugs)]
        if crate::planted::is_active(crate::planted::Bug::DispatchBeforeDurable) {
            // The bug as it would be written: dispatch by the written end, woken by puts.
            self.core.dispatch_wake.wakeup();
        }
        // A consumer of a queue its put indexed has the message already.
        if self.core.dispatch_naps || (self.core.dispatch_tailed_naps && indexed == messages) {
            self.core.dispatch_wake.wakeup_unless_napping();
        } else if self.core.dispatcher_limit() == DispatchLimit::Written {
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
    /// its queue's put lock, and owes the queue's waiters a wake-up
    /// (`arrivals`, announced once the put holds no lock), if the queue is
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
    fn index_on_put(&self, queue: &Arc<Queue>, offset: u64, entry: Entry, arrivals: &mut Arrivals) {
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
            arrivals.0.push((Arc::clone(queue), offset.saturating_add(1)));
        }
    }
}

/// Queues a put owes their waiters' wake-up, with each one's new end:
/// announced once the put holds no queue lock and no lead, since a waker may
/// run anything, a put included, which would otherwise wait for a lock or a
/// lead its own thread holds.
#[derive(Default)]
struct Arrivals(Vec<(Arc<Queue>, u64)>);

impl Arrivals {
    /// Wakes each queue's waiters.
    fn announce(self) {
        for (queue, end) in self.0 {
            queue.signal.arrive(end);
        }
    }
}

/// The queue locks a group's leader holds, each with the queue's next offset
/// as it was: put back when dropped, unless the group was appended (so an
/// append that failed, or a panic before it, uses no offset).
struct HeldQueues<'a> {
    locks: Vec<(u64, MutexGuard<'a, Option<u64>>, Option<u64>)>,
    appended: bool,
}

impl<'a> HeldQueues<'a> {
    /// `queue`'s lock, taken once.
    fn lock(&mut self, queue: &'a Queue) -> &mut MutexGuard<'a, Option<u64>> {
        let at = match self.locks.iter().position(|(key, ..)| *key == queue.key) {
            Some(at) => at,
            None => {
                let next = queue.next_offset.lock();
                let before = *next;
                self.locks.push((queue.key, next, before));
                self.locks.len() - 1
            }
        };
        &mut self.locks[at].1
    }
}

impl Drop for HeldQueues<'_> {
    fn drop(&mut self) {
        if !self.appended {
            for (_, next, before) in &mut self.locks {
                **next = *before;
            }
        }
    }
}

/// A group's members with the results of their appended messages (and each
/// record's size), answered when dropped, a panic on the way included.
struct Answers<'a>(Vec<(&'a Arc<PutMember>, u32, PutResult)>);

impl Drop for Answers<'_> {
    fn drop(&mut self) {
        for (member, _, result) in self.0.drain(..) {
            member.answer(Answer::Done(result));
        }
    }
}

/// Each record of an append (its records at `offsets`, `wrote_bytes` in
/// all, back to back): its offset and size.
fn records(offsets: &[u64], wrote_bytes: u64) -> impl Iterator<Item = (u64, u32)> + '_ {
    let end = offsets.first().map_or(0, |first| first.saturating_add(wrote_bytes));
    let ends = offsets.iter().skip(1).copied().chain([end]);
    offsets.iter().zip(ends).map(|(&at, end)| (at, u32::try_from(end - at).unwrap_or(u32::MAX)))
}

/// What a put names of its message besides its bytes.
#[derive(Debug, Clone, Copy)]
struct Put<'a> {
    topic: &'a str,
    queue_id: u32,
    tags_code: u64,
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
    use crate::store::tests::{sim_store, small_log};
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
        let store = sim_store(FlushDiskType::AsyncFlush, &[("t", 1)]);
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

    /// Starts a put of `body` on `topic`'s queue 0 in a thread and waits
    /// until it queued behind the lead the test holds (`before` puts queued
    /// ahead of it).
    fn queued_put(
        store: &MessageStore,
        topic: &'static str,
        body: &'static [u8],
        before: usize,
    ) -> std::thread::JoinHandle<Result<PutResult, StoreError>> {
        let putter = store.clone();
        let put = std::thread::spawn(move || putter.put_message(&Message::new(topic, 0, body)));
        let started = std::time::Instant::now();
        while store.core.groups.waiting() <= before {
            assert!(started.elapsed() < Duration::from_secs(20), "the put never queued");
            std::thread::yield_now();
        }
        put
    }

    #[test]
    fn puts_that_queue_behind_a_put_are_appended_as_one_group_in_arrival_order() {
        let store = sim_store(FlushDiskType::SyncFlush, &[("t", 1), ("u", 1)]);
        let lead = store.core.groups.try_lead().unwrap(); // as a put appending
        let a = queued_put(&store, "t", b"a", 0);
        let b = queued_put(&store, "u", b"b", 1);
        let c = queued_put(&store, "t", b"c", 2);
        drop(lead); // handed to `a`, which appends all three
        let (a, b, c) = (a.join().unwrap().unwrap(), b.join().unwrap().unwrap(), c.join().unwrap().unwrap());
        let stats = store.stats();
        assert_eq!((stats.put_groups, stats.puts_in_groups), (1, 3), "{stats:?}");
        assert_eq!((a.queue_offset, b.queue_offset, c.queue_offset), (0, 0, 1));
        assert!(a.log_offset < b.log_offset && b.log_offset < c.log_offset, "in arrival order");
        // Each its own durability, waited on its own.
        for put in [&a, &b, &c] {
            put.durability.wait().unwrap();
        }
        store.dispatch_now().unwrap();
        for (topic, offset, body) in [("t", 0, b"a"), ("u", 0, b"b"), ("t", 1, b"c")] {
            let got = store.get_messages(&crate::GetRequest::new(topic, 0, offset)).unwrap();
            assert_eq!((&got.messages[0].body[..], got.messages[0].queue_offset), (&body[..], offset));
        }
        // A put alone after the group takes the queue's next offset.
        assert_eq!(store.put_message(&Message::new("t", 0, &b"d"[..])).unwrap().queue_offset, 2);
        store.shutdown().unwrap();
    }

    #[test]
    fn a_queued_put_whose_topic_was_deleted_is_refused_and_the_rest_of_its_group_appended() {
        let store = sim_store(FlushDiskType::AsyncFlush, &[("gone", 1), ("kept", 1)]);
        let lead = store.core.groups.try_lead().unwrap();
        let gone = queued_put(&store, "gone", b"x", 0);
        let kept = queued_put(&store, "kept", b"y", 1);
        store.delete_topic("gone").unwrap();
        drop(lead);
        assert!(matches!(gone.join().unwrap(), Err(StoreError::UnknownTopic { .. })));
        assert_eq!(kept.join().unwrap().unwrap().queue_offset, 0);
        assert_eq!(store.stats().puts_in_groups, 1);
        store.shutdown().unwrap();
    }

    #[test]
    fn a_group_whose_append_fails_uses_no_offset_and_each_put_reports_its_own_error() {
        let sim = store_io::sim::SimStorage::new();
        sim.set_write_without_mmap(true); // where a write can fail
        let log = small_log(FlushDiskType::AsyncFlush);
        let store = MessageStore::open_with_storage("/s", MessageStoreConfig::new(log), Arc::new(sim.clone())).unwrap();
        store.create_topic("t", 1).unwrap();
        store.put_message(&Message::new("t", 0, &b"before"[..])).unwrap();
        let lead = store.core.groups.try_lead().unwrap();
        let first = queued_put(&store, "t", b"x", 0);
        let second = queued_put(&store, "t", b"y", 1);
        sim.fail_writes(true);
        drop(lead);
        assert!(first.join().unwrap().is_err());
        assert!(second.join().unwrap().is_err());
        assert_eq!(store.stats().put_groups, 0);
        sim.fail_writes(false);
        // Offsets 1 and 2 were never used: the queue goes on at 1, or the
        // log refuses every append after its failed write.
        if let Ok(put) = store.put_message(&Message::new("t", 0, &b"after"[..])) {
            assert_eq!(put.queue_offset, 1);
        }
        drop(store);
    }

    /// Concurrent producers over a few queues: every queue's offsets dense
    /// from 0 and in the log's order, each put's record read back with its
    /// own queue offset, whichever put appended it.
    #[test]
    fn concurrent_puts_keep_every_queue_dense_and_in_log_order() {
        let store = sim_store(FlushDiskType::AsyncFlush, &[("t", 3)]);
        let producers: Vec<_> = (0..4u32)
            .map(|p| {
                let store = store.clone();
                std::thread::spawn(move || {
                    (0..300u32)
                        .map(|i| {
                            let queue = (p + i) % 3;
                            let body = format!("{p}-{i}").into_bytes();
                            let put = store.put_message(&Message::new("t", queue, body.clone())).unwrap();
                            (queue, put.queue_offset, put.log_offset, body)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut puts: Vec<_> = producers.into_iter().flat_map(|p| p.join().unwrap()).collect();
        puts.sort_by_key(|&(_, _, log_offset, _)| log_offset);
        let mut next = [0u64; 3];
        for (queue, queue_offset, log_offset, body) in &puts {
            let q = *queue as usize;
            assert_eq!(*queue_offset, next[q], "queue {queue} at log offset {log_offset}");
            next[q] += 1;
            let message = crate::records::message_at(&store.core.log, *log_offset).unwrap().unwrap();
            assert_eq!((&message.body[..], message.queue_offset), (&body[..], *queue_offset));
        }
        store.shutdown().unwrap();
    }

    /// A leader that panics after its group's append (here in a consumer's
    /// waker, as the put path wakes a tailed queue's waiters) still answers
    /// every member with its result: none puts its message a second time.
    #[test]
    fn a_leader_that_panics_after_the_append_does_not_put_a_member_twice() {
        struct PanicWake;
        impl std::task::Wake for PanicWake {
            fn wake(self: Arc<Self>) {
                panic!("a consumer's waker panics");
            }
        }
        let store = sim_store(FlushDiskType::AsyncFlush, &[("t", 1), ("u", 1)]);
        let waker = Waker::from(Arc::new(PanicWake));
        let mut arrival = store.arrival("t", 0, 0).unwrap(); // t/0 tailed
        assert!(Pin::new(&mut arrival).poll(&mut Context::from_waker(&waker)).is_pending());
        let held = store.core.dispatcher.hold(); // only the put path indexes (and wakes)
        let lead = store.core.groups.try_lead().unwrap();
        let a = queued_put(&store, "t", b"a", 0);
        let b = queued_put(&store, "u", b"b", 1);
        drop(lead); // `a` leads [a, b]; indexing `a` runs the waker, which panics
        assert!(a.join().is_err());
        let b = b.join().unwrap().unwrap();
        drop(held);
        store.dispatch_now().unwrap();
        assert_eq!((b.queue_offset, store.queue_range("u", 0).unwrap()), (0, 0..1), "put once, stored twice");
        assert_eq!(store.queue_range("t", 0).unwrap(), 0..1);
        drop(arrival);
        store.shutdown().unwrap();
    }

    /// A group holds at most half a segment of bytes: more puts than a
    /// segment holds, queued at once, go in several groups, not alone.
    #[test]
    fn puts_of_more_bytes_than_a_segment_are_grouped_within_it() {
        static BODY: [u8; 3000] = [7; 3000];
        let store = sim_store(FlushDiskType::AsyncFlush, &[("t", 1)]); // 64 KiB segments
        let lead = store.core.groups.try_lead().unwrap();
        let puts: Vec<_> = (0..30).map(|k| queued_put(&store, "t", &BODY, k)).collect();
        drop(lead);
        let mut offsets: Vec<u64> = puts.into_iter().map(|p| p.join().unwrap().unwrap().queue_offset).collect();
        offsets.sort_unstable();
        assert_eq!(offsets, (0..30).collect::<Vec<_>>());
        let stats = store.stats();
        assert!(stats.put_groups >= 2 && stats.puts_in_groups == 30, "{stats:?}");
        store.shutdown().unwrap();
    }

    /// A store on simulated storage with dispatch's naps after busy rounds
    /// `nap_us` long (0: off; its naps after rounds of tailed queues' puts
    /// on, 1 ms) and its wait when idle an hour long (it is 100 ms): a put it
    /// was not woken for waits the hour.
    fn napping_store(flush: FlushDiskType, write_groups: bool, nap_us: u64) -> MessageStore {
        let mut config = MessageStoreConfig::new(small_log(flush));
        config.dispatch_nap_us = nap_us;
        config.dispatch_tailed_nap_us = 1000;
        config.write_groups = write_groups;
        sleepy_store(config)
    }

    /// A store of `config` on simulated storage with dispatch's wait when
    /// idle an hour long (it is 100 ms): a put it was not woken for waits the
    /// hour.
    fn sleepy_store(config: MessageStoreConfig) -> MessageStore {
        let store = MessageStore::open_with_storage("/s", config, Arc::new(store_io::sim::SimStorage::new())).unwrap();
        store.core.dispatch_idle_wait_ms.store(3_600_000, Ordering::Relaxed);
        store
    }

    /// Waits until dispatch sleeps (fails after 10 s).
    fn await_asleep(wake: &flush_service::ServiceState) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !wake.is_asleep() {
            assert!(std::time::Instant::now() < deadline, "dispatch never went to sleep");
            std::thread::yield_now();
        }
    }

    /// Waits until dispatch has passed everything readable; fails after
    /// `within`, saying `what` was not dispatched.
    fn await_dispatched(store: &MessageStore, within: Duration, what: &str) {
        await_dispatch(store, within, what, |stats| stats.dispatch_point >= stats.log_max_offset);
    }

    /// Waits until `done` says so of the store's stats; fails after `within`,
    /// saying `what` was not dispatched.
    fn await_dispatch(store: &MessageStore, within: Duration, what: &str, done: impl Fn(&crate::StoreStats) -> bool) {
        let deadline = std::time::Instant::now() + within;
        loop {
            let stats = store.stats();
            if done(&stats) {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "{what}: not dispatched within {within:?} ({stats:?})");
            std::thread::yield_now();
        }
    }

    /// With the write-buffer pool a put's record becomes readable when the
    /// commit service commits it (within 200 ms), after the put's own
    /// wake-up of dispatch found nothing to read: the commit must wake
    /// dispatch, or the record waits for dispatch's idle wait (an hour here,
    /// 100 ms in a store).
    #[test]
    fn with_the_write_buffer_pool_a_commit_wakes_dispatch() {
        let log = commitlog::CommitLogConfig {
            transient_store_pool_enable: true,
            transient_store_pool_size: 2,
            ..small_log(FlushDiskType::AsyncFlush)
        };
        let store = sleepy_store(MessageStoreConfig::new(log));
        store.create_topic("t", 1).unwrap();
        for round in 0..10 {
            let put = store.put_message(&Message::new("t", 0, &b"pooled"[..])).unwrap();
            // `log_max_offset` is the readable (committed) end: wait for the
            // put's own record.
            let what = format!("round {round}: a put through the pool");
            await_dispatch(&store, Duration::from_secs(10), &what, |stats| stats.dispatch_point > put.log_offset);
        }
        store.shutdown().unwrap();
    }

    /// With naps on (`dispatch_nap_us`), by the written end dispatch naps
    /// between busy rounds, and puts then
    /// do not wake it; after a round that found nothing it sleeps until a
    /// put wakes it. With that sleep an hour long (it is 100 ms), every put
    /// is still dispatched at once: a put after dispatch went idle, and
    /// bursts from two threads that end while dispatch naps (a put that
    /// found it napping and was missed by its last look would wait the
    /// hour). The race itself is the loom model
    /// `loom_a_napping_service_misses_no_work` (flush-service).
    #[test]
    fn puts_wake_dispatch_after_its_naps() {
        assert!(!sim_store(FlushDiskType::AsyncFlush, &[]).core.dispatch_naps, "off by default");
        let synced = napping_store(FlushDiskType::SyncFlush, true, 100);
        assert!(!synced.core.dispatch_naps, "a flush wakes it by the durable end");
        synced.shutdown().unwrap();
        let store = napping_store(FlushDiskType::AsyncFlush, true, 100);
        store.create_topic("t", 2).unwrap();
        assert!(store.core.dispatch_naps, "on by the written end");
        let within = Duration::from_secs(30);
        for round in 0..20 {
            store.put_message(&Message::new("t", 0, &b"alone"[..])).unwrap();
            await_dispatched(&store, within, &format!("round {round}: a put after dispatch went idle"));
            let burst: Vec<_> = (0..2)
                .map(|queue| {
                    let store = store.clone();
                    std::thread::spawn(move || {
                        for _ in 0..50 {
                            store.put_message(&Message::new("t", queue, &b"burst"[..])).unwrap();
                        }
                    })
                })
                .collect();
            for producer in burst {
                producer.join().unwrap();
            }
            await_dispatched(&store, within, &format!("round {round}: a burst of two producers"));
        }
        store.shutdown().unwrap();
    }

    /// By the written end, puts that index their own messages (a queue a
    /// consumer tails) leave a napping dispatch asleep
    /// (`dispatch_tailed_nap_us`): their consumers read them at once all the
    /// same. A put of a queue no one tails wakes it, nap or not. Here
    /// dispatch's idle wait is an hour and it is marked napping while it
    /// sleeps, as after a round of tailed puts: the tailed puts must not move
    /// it (with every put waking it, it ran within the 50 ms looked at), the
    /// untailed put must (else it sleeps the hour).
    #[test]
    fn puts_of_a_tailed_queue_leave_a_napping_dispatch_asleep() {
        assert!(!sim_store(FlushDiskType::AsyncFlush, &[]).core.dispatch_tailed_naps, "off by default");
        let mut config = MessageStoreConfig::new(small_log(FlushDiskType::AsyncFlush));
        config.dispatch_tailed_nap_us = 1000;
        let store = sleepy_store(config);
        store.create_topic("t", 2).unwrap();
        assert!(store.core.dispatch_tailed_naps, "on by the written end");
        let _tailed = store.arrival("t", 0, u64::MAX - 1).unwrap();
        store.put_message(&Message::new("t", 1, &b"untailed"[..])).unwrap();
        await_dispatched(&store, Duration::from_secs(10), "a put of a queue no one tails");
        let wake = &store.core.dispatch_wake;
        await_asleep(wake);
        wake.begin_nap();
        let point = store.stats().dispatch_point;
        for k in 0..50 {
            let put = store.put_message(&Message::new("t", 0, &b"tailed"[..])).unwrap();
            assert_eq!(put.queue_offset, k);
            let got = store.get_messages(&crate::GetRequest::new("t", 0, k)).unwrap();
            assert_eq!(got.messages.len(), 1, "put {k} of a tailed queue readable when its put returned");
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(store.stats().dispatch_point, point, "a put of a tailed queue woke a napping dispatch");
        store.put_message(&Message::new("t", 1, &b"untailed"[..])).unwrap();
        await_dispatched(&store, Duration::from_secs(10), "a put of a queue no one tails, during a nap");
        // Counted when the round returns, after its records show: waited for.
        await_dispatch(&store, Duration::from_secs(10), "the second round", |stats| stats.dispatch_rounds >= 2);
        store.shutdown().unwrap();
    }

    /// A tailed queue's puts in a burst: dispatch naps (100 ms) between its
    /// rounds and takes many puts in each (a few rounds for 100 puts; with
    /// every put waking it, 10-15 here), and once the puts stop
    /// it reaches the log's end by itself (its idle wait an hour long: a
    /// nap that ended without its last look would leave the last puts to it).
    #[test]
    fn a_tailed_queues_burst_is_dispatched_in_few_rounds() {
        let log = small_log(FlushDiskType::AsyncFlush);
        let mut config = MessageStoreConfig::new(log);
        config.dispatch_tailed_nap_us = 100_000;
        let store = sleepy_store(config);
        store.create_topic("t", 1).unwrap();
        let _tailed = store.arrival("t", 0, u64::MAX - 1).unwrap();
        for round in 0..5 {
            // A round is counted when it returns, after its records show:
            // read the count only while dispatch sleeps (or naps), every
            // round before counted.
            await_asleep(&store.core.dispatch_wake);
            let rounds = store.stats().dispatch_rounds;
            for _ in 0..100 {
                store.put_messages(&vec![Message::new("t", 0, &b"burst"[..]); 2]).unwrap();
            }
            await_dispatched(&store, Duration::from_secs(10), &format!("round {round}: the burst's last puts"));
            await_asleep(&store.core.dispatch_wake);
            let made = store.stats().dispatch_rounds - rounds;
            assert!(made <= 6, "round {round}: {made} dispatch rounds for 100 puts");
        }
        store.shutdown().unwrap();
    }

    /// With naps after every busy round on (`dispatch_nap_us`), every put
    /// leaves a napping dispatch asleep, so the naps after tailed queues'
    /// rounds give way to them: after a round of more than 256 tailed
    /// records (too many for a busy round's nap: dispatch runs behind) it
    /// must not nap, or a put of a queue no one tails waits the nap. Here
    /// dispatch takes 300 tailed puts in one round, then goes to sleep: not
    /// napping. With naps off, the same round ends in a tailed nap.
    #[test]
    fn naps_after_busy_rounds_take_the_place_of_naps_after_tailed_rounds() {
        for nap_us in [100u64, 0] {
            let mut config = MessageStoreConfig::new(small_log(FlushDiskType::AsyncFlush));
            config.dispatch_nap_us = nap_us;
            config.dispatch_tailed_nap_us = 100_000;
            config.write_groups = false;
            let store = sleepy_store(config);
            store.create_topic("t", 2).unwrap();
            let _tailed = store.arrival("t", 0, u64::MAX - 1).unwrap();
            store.put_message(&Message::new("t", 1, &b"untailed"[..])).unwrap();
            await_dispatched(&store, Duration::from_secs(10), "the first put");
            let wake = &store.core.dispatch_wake;
            await_asleep(wake);
            // 300 tailed puts dispatch has not seen, then one round of them all.
            wake.begin_nap();
            for _ in 0..300 {
                store.put_message(&Message::new("t", 0, &b"tailed"[..])).unwrap();
            }
            wake.wakeup();
            await_dispatched(&store, Duration::from_secs(10), "the tailed puts");
            let round_ended = std::time::Instant::now();
            await_asleep(wake);
            let napping = wake.is_napping();
            if nap_us > 0 {
                assert!(!napping, "dispatch_nap_us {nap_us}: a tailed nap after 300 tailed records");
            } else if round_ended.elapsed() < Duration::from_millis(90) {
                assert!(napping, "naps off: no tailed nap after 300 tailed records");
            }
            store.put_message(&Message::new("t", 1, &b"untailed"[..])).unwrap();
            await_dispatched(&store, Duration::from_secs(10), "an untailed put");
            store.shutdown().unwrap();
        }
    }

    /// Puts at random moments around dispatch's naps (1 to 3 producers, gaps
    /// of 0-300 µs, single puts and batches, write groups on and off, naps
    /// after busy rounds on and off (those after rounds of the tailed queue's
    /// puts on), a tailed queue beside untailed ones), dispatch's idle wait
    /// an hour long:
    /// every round's puts are dispatched within seconds. A dispatch that
    /// skipped its last look after a nap missed puts here (2 failing runs of
    /// 20); the loom model is the exhaustive check.
    #[test]
    fn puts_at_random_moments_around_naps_are_all_dispatched() {
        const SEED: u64 = 0x9E37_79B9_7F4A_7C15;
        for (groups, nap_us) in [(true, 100), (false, 100), (true, 0)] {
            let store = napping_store(FlushDiskType::AsyncFlush, groups, nap_us);
            store.create_topic("t", 4).unwrap();
            assert_eq!(store.core.dispatch_naps, nap_us > 0);
            let _tailed = store.arrival("t", 3, u64::MAX - 1).unwrap();
            let mut seed = SEED;
            let mut next = move || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed
            };
            for round in 0..400 {
                let producers: Vec<_> = (0..next() % 3 + 1)
                    .map(|_| {
                        let (store, mut s) = (store.clone(), next());
                        std::thread::spawn(move || {
                            for _ in 0..s % 4 + 1 {
                                s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                                let queue = ((s >> 33) % 4) as u32;
                                let until = std::time::Instant::now() + Duration::from_micros((s >> 40) % 300);
                                while std::time::Instant::now() < until {
                                    std::hint::spin_loop();
                                }
                                if (s >> 20) % 3 == 0 {
                                    store.put_messages(&vec![Message::new("t", queue, &b"b"[..]); 2]).unwrap();
                                } else {
                                    store.put_message(&Message::new("t", queue, &b"m"[..])).unwrap();
                                }
                            }
                        })
                    })
                    .collect();
                for producer in producers {
                    producer.join().unwrap();
                }
                let what = format!("seed {SEED:#x}, write groups {groups}, naps {nap_us} µs, round {round}");
                await_dispatched(&store, Duration::from_secs(10), &what);
            }
            store.shutdown().unwrap();
        }
    }

    #[test]
    fn with_write_groups_off_every_put_appends_alone() {
        let sim = store_io::sim::SimStorage::new();
        let mut config = MessageStoreConfig::new(small_log(FlushDiskType::AsyncFlush));
        config.write_groups = false;
        let store = MessageStore::open_with_storage("/s", config, Arc::new(sim)).unwrap();
        store.create_topic("t", 1).unwrap();
        let lead = store.core.groups.try_lead().unwrap(); // would make every put queue
        for k in 0..3 {
            assert_eq!(store.put_message(&Message::new("t", 0, &b"x"[..])).unwrap().queue_offset, k);
        }
        assert_eq!(store.stats().put_groups, 0);
        drop(lead);
        store.shutdown().unwrap();
    }

    /// A consumer's waker may put (an executor that runs a woken task at
    /// once): the put path wakes a tailed queue's waiters only once it holds
    /// no queue lock and no lead, so that put does not wait for its own
    /// thread.
    #[test]
    fn a_waker_that_puts_at_once_does_not_wait_for_its_own_thread() {
        struct PutOnWake(MessageStore, std::sync::mpsc::SyncSender<bool>);
        impl std::task::Wake for PutOnWake {
            fn wake(self: Arc<Self>) {
                let put = self.0.put_message(&Message::new("u", 0, &b"from the waker"[..]));
                let _ = self.1.send(put.is_ok());
            }
        }
        let store = sim_store(FlushDiskType::AsyncFlush, &[("t", 1), ("u", 1)]);
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let waker = Waker::from(Arc::new(PutOnWake(store.clone(), tx)));
        let mut arrival = store.arrival("t", 0, 0).unwrap(); // t/0 tailed
        assert!(Pin::new(&mut arrival).poll(&mut Context::from_waker(&waker)).is_pending());
        let putter = store.clone();
        std::thread::spawn(move || putter.put_message(&Message::new("t", 0, &b"x"[..])).map(|p| p.queue_offset));
        let woke = rx.recv_timeout(Duration::from_secs(20));
        assert_eq!(woke, Ok(true), "the waker's put never returned (it waited for the thread that woke it)");
        drop(arrival);
        store.shutdown().unwrap();
    }
}
