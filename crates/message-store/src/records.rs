//! The one read path from the log to a message. A queue-index entry is turned
//! into its message over a source of records ([`Records`]): the live log, or
//! (read-only, `inspect`) the log's segment files as listed. A queue is read
//! by walking its entries ([`QueueWalk`]): each message is checked to be the
//! queue's own at the entry's offset, an entry whose record went with the
//! log's front is passed, a damaged one stops the walk. What the callers make
//! of each (a status, an error, a skip) is theirs: `get_messages`,
//! `inspect::read_queue`. The key index names a record by its log offset
//! alone (no size to check), read from the live log by [`message_at`]
//! (`query_by_key`).

use commitlog::CommitLog;
use queue_index::Entry;

use crate::error::StoreError;
use crate::message::{decode, StoredMessage};

/// What a queue-index entry names in a source of records.
#[derive(Debug)]
pub(crate) enum Named {
    /// A message (the caller checks it is the queue's, at the entry's offset).
    Message(StoredMessage),
    /// A record the log's cleaning deleted.
    Expired,
    /// No message of the entry's size: the entry is damaged.
    Other,
}

/// A source of the records queue-index entries name: the live log, or the
/// log's segment files read directly (`inspect`).
pub(crate) trait Records {
    /// The message `entry` names: [`Named::Expired`] if its record went with
    /// the log's front, [`Named::Other`] if no message of the entry's size
    /// starts there (a damaged entry).
    fn named(&self, entry: &Entry) -> Result<Named, StoreError>;
}

impl Records for CommitLog {
    fn named(&self, entry: &Entry) -> Result<Named, StoreError> {
        if entry.log_offset < self.min_offset() {
            return Ok(Named::Expired);
        }
        if entry.log_offset.saturating_add(u64::from(entry.size)) > self.max_offset() {
            return Ok(Named::Other);
        }
        match self.read(entry.log_offset) {
            Ok(record) if record.size == u64::from(entry.size) => {
                Ok(decode(&record).map_or(Named::Other, Named::Message))
            }
            Ok(_)
            | Err(
                commitlog::Error::NoRecord { .. }
                | commitlog::Error::InsideRecord { .. }
                | commitlog::Error::BadRecord { .. },
            ) if entry.log_offset >= self.min_offset() => Ok(Named::Other),
            Ok(_) | Err(commitlog::Error::NoRecord { .. }) => Ok(Named::Expired), // deleted while read
            Err(err) => Err(err.into()),
        }
    }
}

/// The message at log `offset` of the live log, or `None` if the log's
/// cleaning deleted its record (an index entry read before the deletion).
pub(crate) fn message_at(log: &CommitLog, offset: u64) -> Result<Option<StoredMessage>, StoreError> {
    match log.read(offset) {
        Ok(record) => Ok(Some(decode(&record)?)),
        Err(commitlog::Error::NoRecord { .. }) if offset < log.min_offset() => Ok(None),
        Err(err) => Err(err.into()),
    }
}

/// What [`QueueWalk::read`] found at an entry.
#[derive(Debug)]
pub(crate) enum Read {
    /// The queue's own message at the entry's offset.
    Message(StoredMessage),
    /// The entry's record went with the log's front.
    Expired,
    /// The entry does not name the queue's message at its offset.
    Damaged,
}

/// A walk over one queue's entries in order, reading each one's message from
/// a source of records.
pub(crate) struct QueueWalk<'a, R: ?Sized> {
    records: &'a R,
    topic: &'a str,
    queue_id: u32,
    /// The queue offset of the next entry.
    at: u64,
}

impl<'a, R: Records + ?Sized> QueueWalk<'a, R> {
    /// A walk of `topic`'s queue `queue_id` from queue offset `from`, over `records`.
    pub(crate) fn new(records: &'a R, topic: &'a str, queue_id: u32, from: u64) -> Self {
        QueueWalk { records, topic, queue_id, at: from }
    }

    /// The queue offset of the next entry: where to read on from.
    pub(crate) fn at(&self) -> u64 {
        self.at
    }

    /// Passes the next entry unread (its tag's hash filtered it out).
    pub(crate) fn skip(&mut self) {
        self.at += 1;
    }

    /// Reads `entry`, the next one: its message and past it, or
    /// [`Read::Expired`] and past it, or [`Read::Damaged`] and still at it.
    pub(crate) fn read(&mut self, entry: &Entry) -> Result<Read, StoreError> {
        let read = match self.records.named(entry)? {
            Named::Message(message)
                if message.topic == self.topic
                    && message.queue_id == self.queue_id
                    && message.queue_offset == self.at =>
            {
                Read::Message(message)
            }
            Named::Expired => Read::Expired,
            Named::Message(_) | Named::Other => return Ok(Read::Damaged),
        };
        self.at += 1;
        Ok(read)
    }
}
