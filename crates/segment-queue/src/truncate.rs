//! Cutting the tail for good (recovery, a replicated log's conflicting suffix), and
//! clearing a queue.

use std::sync::atomic::Ordering;

use mapped_file::MappedFileError;

use crate::{QueueError, SegmentQueue, TruncateReport};

impl SegmentQueue {
    /// Drops everything at and above `offset` for good (RocketMQ's
    /// `truncateDirtyFiles`): later segments are deleted (newest first, each
    /// deletion made durable), the segment holding `offset` ends there with every
    /// byte after it erased and synced ([`MappedFile::truncate`](mapped_file::MappedFile::truncate)), and
    /// `flushed_where` / `committed_where` are lowered to it if above. What is cut
    /// can never be read again, however new appends line up with old records.
    ///
    /// On an error the queue stays consistent: every segment still listed is
    /// whole, and the segments already deleted were the newest ones. A reader's
    /// view of bytes at or above `offset` in the segment that holds it refuses the
    /// truncation (`ViewsOutstanding`); that is checked before anything is deleted.
    pub fn truncate_dirty_files(&self, offset: u64) -> Result<TruncateReport, QueueError> {
        let _roll = self.roll_lock.lock();
        if let Some(allocator) = self.allocator.lock().as_ref() {
            allocator.discard();
        }
        // Commit in segment order first: resetting a later segment must not make its
        // bytes readable while an earlier segment's buffer still holds data.
        self.commit(0)?;
        let mut report = TruncateReport::default();
        let mut files = self.files.write();
        if let Some(file) = files.iter().find(|f| f.holds(offset)) {
            let pos = file.position_of(offset).expect("the file holds the offset");
            let views = file.outstanding_views();
            if views > 0 && pos < file.read_position() {
                return Err(MappedFileError::ViewsOutstanding { path: file.path().to_path_buf(), views }.into());
            }
        }
        while let Some(last) = files.last().filter(|f| f.file_from_offset() > offset) {
            last.destroy()?;
            files.pop();
            report.segments_deleted = report.segments_deleted.saturating_add(1);
        }
        if let Some(file) = files.last().filter(|f| f.holds(offset)) {
            let pos = file.position_of(offset).expect("the file holds the offset");
            report.bytes_dropped_in_place = file.truncate(pos)? as u64;
        }
        drop(files);
        self.flushed_where.fetch_min(offset, Ordering::AcqRel);
        self.committed_where.fetch_min(offset, Ordering::AcqRel);
        Ok(report)
    }

    /// Deletes every segment, newest first, each deletion durable, and moves
    /// `flushed_where` and `committed_where` to 0: the next roll-over creates
    /// the first segment anew, at any offset. An index whose content was all
    /// discarded (a replicated log that installed a snapshot beyond its last
    /// entry) starts over this way. Refused (`ViewsOutstanding`, nothing deleted)
    /// while a reader holds a view of any segment. Returns how many were deleted.
    pub fn clear(&self) -> Result<usize, QueueError> {
        let _roll = self.roll_lock.lock();
        if let Some(allocator) = self.allocator.lock().as_ref() {
            allocator.discard();
        }
        let mut files = self.files.write();
        if let Some(file) = files.iter().find(|f| f.outstanding_views() > 0) {
            let views = file.outstanding_views();
            return Err(MappedFileError::ViewsOutstanding { path: file.path().to_path_buf(), views }.into());
        }
        let mut deleted = 0usize;
        while let Some(last) = files.last() {
            last.destroy()?;
            files.pop();
            deleted = deleted.saturating_add(1); // at most the segment count
        }
        drop(files);
        self.flushed_where.store(0, Ordering::Release);
        self.committed_where.store(0, Ordering::Release);
        Ok(deleted)
    }
}
