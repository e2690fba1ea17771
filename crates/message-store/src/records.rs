//! Reading a message from the log: by the log offset the key index names, or
//! by a queue-index entry (its record expired, or the entry damaged).

use crate::error::StoreError;
use crate::message::{decode, StoredMessage};
use crate::store::Core;

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

    /// The message a queue-index entry names: [`Named::Expired`] if its
    /// record went with the log's front, [`Named::Other`] if no message of the
    /// entry's size starts there (a damaged entry).
    pub(crate) fn message_at_entry(&self, entry: &queue_index::Entry) -> Result<Named, StoreError> {
        if entry.log_offset < self.log.min_offset() {
            return Ok(Named::Expired);
        }
        if entry.log_offset.saturating_add(u64::from(entry.size)) > self.log.max_offset() {
            return Ok(Named::Other);
        }
        match self.log.read(entry.log_offset) {
            Ok(record) if record.size == u64::from(entry.size) => {
                Ok(decode(&record).map_or(Named::Other, Named::Message))
            }
            Ok(_)
            | Err(
                commitlog::Error::NoRecord { .. }
                | commitlog::Error::InsideRecord { .. }
                | commitlog::Error::BadRecord { .. },
            ) if entry.log_offset >= self.log.min_offset() => Ok(Named::Other),
            Ok(_) | Err(commitlog::Error::NoRecord { .. }) => Ok(Named::Expired), // deleted while read
            Err(err) => Err(err.into()),
        }
    }
}

/// What a queue-index entry names in the log.
#[derive(Debug)]
pub(crate) enum Named {
    /// A message (the caller checks it is the queue's, at the entry's offset).
    Message(StoredMessage),
    /// A record the log's cleaning deleted.
    Expired,
    /// No message of the entry's size: the entry is damaged.
    Other,
}
