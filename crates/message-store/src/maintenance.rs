//! The flush service's work on the derived data: the queue index sealed once
//! the log is flushed to the seal's point, the key index flushed, both expired
//! against the log's front, the dispatch point recorded; and the operations
//! that do it (or dispatch, or rebuild the key index) now.

use std::sync::atomic::Ordering;

use crate::checkpoint;
use crate::config::DispatchLimit;
use crate::error::StoreError;
use crate::store::{Core, MessageStore};

impl MessageStore {
    /// Seals the queue index up to the dispatch point now (what the flush
    /// service does at each log segment's end, and when the active run holds
    /// `queue_index_seal_entries`): the log is flushed first if it must be.
    /// An open after a crash then dispatches again only what came after.
    pub fn seal_index(&self) -> Result<(), StoreError> {
        self.check_open()?;
        self.core.seal(self.core.dispatcher.point())
    }

    /// Rebuilds the key index from the log (where
    /// [`inspect::check`](crate::inspect::check) found it damaged): every file
    /// deleted, then the keys of every dispatched message added again.
    /// Returns the messages indexed (0 with the index off).
    pub fn rebuild_index(&self) -> Result<u64, StoreError> {
        self.check_open()?;
        self.core.dispatcher.rebuild_index()
    }

    /// Dispatches everything up to the limit now (what the dispatch thread does
    /// when woken); returns how many messages.
    pub fn dispatch_now(&self) -> Result<u64, StoreError> {
        self.check_open()?;
        self.core.dispatcher.dispatch_available()
    }
}

impl Core {
    /// How far dispatch reads in the log (the configured limit, or the one
    /// the flush mode implies).
    pub(crate) fn dispatcher_limit(&self) -> DispatchLimit {
        self.config.effective_dispatch_limit()
    }

    /// Seals the queue index's entries of records below `to` (a record
    /// boundary at or below the dispatch point), after flushing the log if
    /// `to` lies past its durable end: a sealed entry never names a record a
    /// crash can take back.
    pub(crate) fn seal(&self, to: u64) -> Result<(), StoreError> {
        let _one = self.sealing.lock();
        let index = &self.dispatcher.queue_index;
        if to <= index.sealed_to() {
            return Ok(());
        }
        #[cfg(planted_bugs)]
        let flush_first = !crate::planted::is_active(crate::planted::Bug::IndexBeforeRecords);
        #[cfg(not(planted_bugs))]
        let flush_first = true;
        if flush_first && to > self.log.flushed_offset() {
            self.log.flush_all()?;
        }
        index.seal(&*self.storage, to)?;
        self.sealed_mark.store(index.sealed_to(), Ordering::Release);
        Ok(())
    }

    /// The flush service's tick. Seals the queue index when dispatch has
    /// passed the end of a log segment (at that segment's end: a run per
    /// segment, deleted with it) or the active run holds
    /// `queue_index_seal_entries` (at the dispatch point). When `thorough`,
    /// also expires both indexes against the log's front, flushes the key
    /// index whole and records the dispatch checkpoint (recording after
    /// flushing is what makes the point safe to recover from: RocketMQ #678
    /// recorded first), and drops the queues no one uses; else the key index
    /// flushes once enough pages are dirty.
    pub(crate) fn flush_derived(&self, thorough: bool) -> Result<(), StoreError> {
        let point = self.dispatcher.point();
        let index = &self.dispatcher.queue_index;
        let segment = (self.log.config().mapped_file_size_commit_log as u64).max(1);
        let segment_start = point - point % segment;
        let sealed_to = index.sealed_to();
        if segment_start > sealed_to {
            // A run per segment dispatch passed (several if it ran ahead).
            let mut end = sealed_to - sealed_to % segment + segment;
            while end <= segment_start {
                self.seal(end)?;
                end += segment;
            }
        } else if index.active_entries() >= self.config.queue_index_seal_entries {
            self.seal(point)?;
        }
        let min_offset = self.log.min_offset();
        if thorough {
            self.expire(min_offset)?;
        }
        let recorded = thorough.then(|| self.dispatcher.sample(self.registry.lock().next_id()));
        if recorded.as_ref().is_some_and(|r| r.point > self.log.flushed_offset()) {
            self.log.flush_all()?;
        }
        let least_pages = if thorough { 0 } else { self.config.flush_consume_queue_least_pages };
        #[cfg(planted_bugs)]
        let key_index =
            self.dispatcher.index.as_ref().filter(|_| !crate::planted::is_active(crate::planted::Bug::IndexNotFlushed));
        #[cfg(not(planted_bugs))]
        let key_index = self.dispatcher.index.as_ref();
        if let Some(key_index) = key_index {
            key_index.flush(least_pages)?;
        }
        if let Some(recorded) = recorded {
            checkpoint::store(&*self.storage, &self.root, &recorded)?;
            self.queues.drop_idle(index);
        }
        Ok(())
    }

    /// Expires, once per move of the log's front, the queue index's runs and
    /// the key index's files wholly below `log_min` (RocketMQ's
    /// `CleanConsumeQueueService`): every queue's first offset moves past its
    /// messages the log deleted, open or not, with no file per queue to touch.
    fn expire(&self, log_min: u64) -> Result<(), StoreError> {
        if self.expired_to.load(Ordering::Acquire) >= log_min {
            return Ok(());
        }
        #[cfg(planted_bugs)]
        let log_min = if crate::planted::is_active(crate::planted::Bug::IndexExpiredEarly) {
            log_min.saturating_add(self.log.config().mapped_file_size_commit_log as u64)
        } else {
            log_min
        };
        #[cfg(planted_bugs)]
        let kept = crate::planted::is_active(crate::planted::Bug::IndexKeptAfterSegment);
        #[cfg(not(planted_bugs))]
        let kept = false;
        if !kept {
            self.dispatcher.queue_index.expire(&*self.storage, log_min)?;
        }
        if let Some(index) = &self.dispatcher.index {
            index.delete_expired(log_min)?;
        }
        self.expired_to.store(log_min, Ordering::Release);
        Ok(())
    }
}
