//! Flush and commit progress across segments: `flushed_where`, `committed_where`
//! and the calls that move them.

use std::sync::atomic::{AtomicU64, Ordering};

use mapped_file::MappedFile;

use crate::{QueueError, QueueProgress, SegmentQueue};

impl SegmentQueue {
    /// Offset up to which everything is durable.
    pub fn flushed_where(&self) -> u64 {
        self.flushed_where.load(Ordering::Acquire)
    }

    /// Offset up to which everything is in the mapping.
    pub fn committed_where(&self) -> u64 {
        self.committed_where.load(Ordering::Acquire)
    }

    /// Sets `flushed_where` (recovery).
    pub fn set_flushed_where(&self, offset: u64) {
        self.flushed_where.store(offset, Ordering::Release);
    }

    /// Sets `committed_where` (recovery).
    pub fn set_committed_where(&self, offset: u64) {
        self.committed_where.store(offset, Ordering::Release);
    }

    /// Store timestamp of the newest append covered by the last flush that moved.
    pub fn store_timestamp(&self) -> u64 {
        self.store_timestamp.load(Ordering::Acquire)
    }

    /// Bytes appended but not yet committed into the mapping.
    pub fn remain_how_many_data_to_commit(&self) -> u64 {
        self.max_wrote_position().saturating_sub(self.committed_where())
    }

    /// Bytes readable but not yet durable.
    pub fn remain_how_many_data_to_flush(&self) -> u64 {
        self.max_offset().saturating_sub(self.flushed_where())
    }

    /// Flushes from `flushed_where` onwards, across as many segments as are due: a full segment
    /// always is, the last one when `least_pages` pages are pending (0: any byte). Unlike RocketMQ,
    /// one call crosses segment boundaries, so a durability request spanning two segments is met by
    /// one flush ([#3408](https://github.com/apache/rocketmq/issues/3408)). Returns how far
    /// `flushed_where` moved. A sync error latches the queue and is returned; `flushed_where` keeps
    /// the last good value.
    pub fn flush(&self, least_pages: usize) -> Result<QueueProgress, QueueError> {
        let _flush = self.flush_lock.lock();
        let _syncing = self.activity.begin();
        self.advance(&self.flushed_where, |file| {
            let timestamp = file.store_timestamp();
            let progress = file.flush(least_pages)?;
            if progress.moved() > 0 {
                self.store_timestamp.fetch_max(timestamp, Ordering::AcqRel);
            }
            Ok(file.flushed_position())
        })
    }

    /// Commits write-buffer bytes from `committed_where` onwards, across segments,
    /// as [`flush`](Self::flush) does. Segments without a buffer count as committed.
    pub fn commit(&self, least_pages: usize) -> Result<QueueProgress, QueueError> {
        let _commit = self.commit_lock.lock();
        self.advance(&self.committed_where, |file| {
            file.commit(least_pages)?;
            Ok(file.committed_position())
        })
    }

    /// Moves `position` forward segment by segment: `step` works on the segment
    /// holding it and returns that segment's new file-relative position. Goes on to
    /// the next segment only once one is done to its end. Every turn either moves
    /// `position` forward or stops, so it terminates.
    fn advance(
        &self,
        position: &AtomicU64,
        step: impl Fn(&MappedFile) -> Result<usize, QueueError>,
    ) -> Result<QueueProgress, QueueError> {
        let from = position.load(Ordering::Acquire);
        let mut at = from;
        loop {
            let file = match self.find_mapped_file_by_offset(at, false) {
                Some(file) => file,
                // Behind the first segment (its predecessors were deleted): start there.
                None if at < self.min_offset() => match self.first_mapped_file() {
                    Some(file) => file,
                    None => break,
                },
                None => break,
            };
            let end = file.offset_at(step(&file)?);
            if end > at {
                at = end;
                position.store(at, Ordering::Release);
            }
            if end < file.file_end() {
                break;
            }
        }
        Ok(QueueProgress { from, to: at })
    }

    /// Syncs every segment holding bytes at or above `offset` in full, whatever
    /// their flushed positions say, and moves `flushed_where` to the end of data.
    /// Recovery calls this: bytes found after a restart may be only in the page
    /// cache, and a flush that starts above them would never make them durable.
    pub fn force_from(&self, offset: u64) -> Result<QueueProgress, QueueError> {
        let _flush = self.flush_lock.lock();
        let _syncing = self.activity.begin();
        let from = self.flushed_where();
        let mut to = from;
        for file in self.segments() {
            if file.file_end() <= offset {
                continue;
            }
            let progress = file.force()?;
            to = file.offset_at(progress.to);
        }
        self.flushed_where.store(to, Ordering::Release);
        Ok(QueueProgress { from, to })
    }
}
