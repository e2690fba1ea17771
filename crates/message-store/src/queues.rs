//! The queues of the store. A queue's entries are in the queue index, under
//! its key ([`queue_key`]: its topic's id and its own); what this module holds
//! of a queue is only what a queue in use needs: its put lock (which assigns
//! queue offsets) and the signal long-polling consumers wait on. Those are
//! made at a queue's first use and dropped when it is idle again, so a queue
//! no one uses costs no memory here at all.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use queue_index::QueueIndex;

use crate::error::StoreError;
use crate::signal::Signal;
use crate::topic::{queue_key, TopicEntry};

/// One queue in use.
#[derive(Debug)]
pub(crate) struct Queue {
    /// Its key in the queue index.
    pub(crate) key: u64,
    /// The put lock: the offset the next message put gets (`None`: not
    /// looked up yet, the index's end of the queue). Held while the message
    /// is appended, so the log holds a queue's messages in offset order.
    pub(crate) next_offset: Mutex<Option<u64>>,
    pub(crate) signal: Signal,
    /// A consumer has waited on the queue since it came into use: it is
    /// tailed, and (under async flush) its puts index their own messages.
    pub(crate) tailed: AtomicBool,
}

impl Queue {
    pub(crate) fn new(key: u64) -> Self {
        Queue { key, next_offset: Mutex::new(None), signal: Signal::default(), tailed: AtomicBool::new(false) }
    }

    /// Whether a consumer waits on the queue now or has since it came into
    /// use.
    pub(crate) fn is_tailed(&self) -> bool {
        self.tailed.load(Ordering::Relaxed) || self.signal.waited_on()
    }
}

/// The most queues in use [`Queues::reserve`] makes room for.
const LIVE_RESERVED: usize = 65_536;

/// The topics (by name: queue count, id) and the queues in use.
///
/// A queue is closed (its waiters return) when its topic is deleted or the
/// store shuts down, and none is made after: [`get_or_make`](Queues::get_or_make)
/// makes a queue under the write lock of `live` only if the topic is still
/// there and the flag `closed` not set, and [`remove_topic`](Queues::remove_topic)
/// (which removes the topic first) and [`close_all`](Queues::close_all)
/// (which sets the flag under it) take that lock to gather the queues they
/// close: a queue made is among them, or none is made. Lock order: `live`
/// before `topics`; neither is held while a signal wakes.
#[derive(Debug, Default)]
pub(crate) struct Queues {
    topics: RwLock<HashMap<String, TopicEntry>>,
    /// By key, under foldhash: a fast, seeded hash for the `u64` keys.
    live: RwLock<HashMap<u64, Arc<Queue>, foldhash::fast::RandomState>>,
    /// Set by [`close_all`](Queues::close_all) under the write lock of
    /// `live` and read under it (the lock orders them: relaxed is enough).
    closed: AtomicBool,
}

impl Queues {
    /// Makes room for `queues` more queues in use (up to 65,536), so that
    /// the table does not grow, rehashing every queue in it under its write
    /// lock, on the path of a put.
    pub(crate) fn reserve(&self, queues: usize) {
        self.live.write().reserve(queues.min(LIVE_RESERVED));
    }

    /// Adds (or replaces) `topic`.
    pub(crate) fn add_topic(&self, topic: &str, entry: TopicEntry) {
        self.topics.write().insert(topic.to_string(), entry);
    }

    /// Removes `topic`; its queues in use are closed (their waiters return),
    /// and none is made for it after (see [`get_or_make`](Self::get_or_make)).
    /// Returns once no put to it is appending: a put checks its queue's key
    /// against the topics under the put lock, which this takes on each of the
    /// topic's queues after the topic is gone, so every put to it either
    /// appended before this returned or is refused.
    pub(crate) fn remove_topic(&self, topic: &str) -> Option<TopicEntry> {
        let entry = self.topics.write().remove(topic)?;
        let mut gone = Vec::new();
        self.live.write().retain(|key, queue| {
            let of_topic = key >> 32 == u64::from(entry.id);
            if of_topic {
                gone.push(Arc::clone(queue));
            }
            !of_topic
        });
        for queue in gone {
            drop(queue.next_offset.lock());
            queue.signal.close();
        }
        Some(entry)
    }

    /// `topic`'s entry.
    pub(crate) fn topic(&self, topic: &str) -> Option<TopicEntry> {
        self.topics.read().get(topic).copied()
    }

    /// Every topic with its entry.
    pub(crate) fn topics(&self) -> Vec<(String, TopicEntry)> {
        self.topics.read().iter().map(|(t, e)| (t.clone(), *e)).collect()
    }

    /// The key of `topic`'s queue `queue_id`, or why there is none.
    pub(crate) fn key(&self, topic: &str, queue_id: u32) -> Result<u64, StoreError> {
        let Some(entry) = self.topic(topic) else {
            return Err(StoreError::UnknownTopic { topic: topic.to_string() });
        };
        if queue_id >= entry.queues {
            return Err(StoreError::UnknownQueue { topic: topic.to_string(), queue_id, queues: entry.queues });
        }
        Ok(queue_key(entry.id, queue_id))
    }

    /// The key of the queue a record at log `offset` of `topic`'s queue
    /// `queue_id` belongs to: `None` for an unknown topic or queue, or a
    /// record older than its topic (of a topic of that name deleted before).
    pub(crate) fn key_of_record(&self, topic: &str, queue_id: u32, offset: u64) -> Option<u64> {
        let entry = self.topic(topic)?;
        (queue_id < entry.queues && offset >= entry.since).then(|| queue_key(entry.id, queue_id))
    }

    /// The queue of `key` (of `topic`'s queue `queue_id`) in use, made if it
    /// is not: its signal starts at the index's end of the queue (dispatch
    /// publishes to it from then on). Refused if the store shut down or
    /// `topic` was deleted (or made again) since `key` was looked up: a
    /// queue made then would be in no table [`close_all`](Self::close_all)
    /// or [`remove_topic`](Self::remove_topic) closed, and its waiters would
    /// wait to their timeout, or for ever.
    pub(crate) fn get_or_make(
        &self,
        (topic, queue_id): (&str, u32),
        key: u64,
        index: &QueueIndex,
    ) -> Result<Arc<Queue>, StoreError> {
        // A queue in the table is among those a close gathers: closed
        // already, or when that close goes on.
        if let Some(queue) = self.live.read().get(&key) {
            return Ok(Arc::clone(queue));
        }
        let mut live = self.live.write();
        if self.closed.load(Ordering::Relaxed) {
            return Err(StoreError::Shutdown);
        }
        if self.key(topic, queue_id)? != key {
            return Err(StoreError::UnknownTopic { topic: topic.to_string() });
        }
        let queue = live.entry(key).or_insert_with(|| Arc::new(Queue::new(key)));
        // Read under the lock dispatch looks the queue up with after its
        // append: an end it appended before is seen here, one after is
        // published to this signal.
        queue.signal.arrive(index.extent(key).map_or(0, |(_, end)| end));
        Ok(Arc::clone(queue))
    }

    /// The queue of `key` if it is in use.
    pub(crate) fn live(&self, key: u64) -> Option<Arc<Queue>> {
        self.live.read().get(&key).cloned()
    }

    /// Queues in use now.
    pub(crate) fn live_count(&self) -> usize {
        self.live.read().len()
    }

    /// Drops the queues no one holds, with no message put past what the
    /// index holds (a later put learns the end from the index again) and no
    /// future waiting; returns how many.
    pub(crate) fn drop_idle(&self, index: &QueueIndex) -> usize {
        let mut live = self.live.write();
        let before = live.len();
        live.retain(|key, queue| {
            if Arc::strong_count(queue) > 1 || queue.signal.registered() > 0 {
                return true;
            }
            let Some(next) = queue.next_offset.try_lock() else { return true };
            next.is_some_and(|next| index.extent(*key).is_none_or(|(_, end)| end != next))
        });
        before - live.len()
    }

    /// Closes every queue in use, and refuses to make one after: waiters
    /// return, and a wait that looked up its queue's key before but makes
    /// the queue after is refused.
    pub(crate) fn close_all(&self) {
        let queues: Vec<Arc<Queue>> = {
            let live = self.live.write();
            self.closed.store(true, Ordering::Relaxed);
            live.values().cloned().collect()
        };
        // A wait that got one of them meanwhile registers with its signal
        // before this closes it, or sees it closed: both under its lock.
        queues.iter().for_each(|queue| queue.signal.close());
    }
}
