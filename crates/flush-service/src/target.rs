//! What the flush services flush: a small trait, implemented for the segment queue
//! and by an in-crate test double.

use segment_queue::SegmentQueue;

use crate::error::TargetError;
use crate::sync::Arc;

/// Something with a commit step and a flush step over a growing byte range.
///
/// Contract:
/// - `flush` returns the new `flushed_where`; `Ok` means every byte below it is
///   durable. After one `Err`, every later `flush` must fail too (a failed sync is
///   final); the services never report a request durable after an error.
/// - `commit` moves bytes from write buffers into the flushable range and returns
///   the new `committed_where`. Without write buffers it is a no-op.
/// - Offsets never move backwards while a service runs.
pub trait FlushTarget: Send + Sync + 'static {
    /// Makes data durable when at least `least_pages` 4 KiB pages are pending (0:
    /// any byte; a full segment always qualifies). Returns `flushed_where`.
    fn flush(&self, least_pages: usize) -> Result<u64, TargetError>;
    /// Commits write-buffer data, with the same threshold. Returns `committed_where`.
    fn commit(&self, least_pages: usize) -> Result<u64, TargetError>;
    /// Offset below which everything is durable.
    fn flushed_where(&self) -> u64;
    /// Offset below which everything is committed.
    fn committed_where(&self) -> u64;
    /// Bytes readable but not yet durable.
    fn unflushed_bytes(&self) -> u64;
    /// Bytes appended but not yet committed.
    fn uncommitted_bytes(&self) -> u64;
    /// Store timestamp (ms) of the newest data the last flush covered, for the
    /// checkpoint's physical timestamp.
    fn store_timestamp(&self) -> u64;
}

impl<T: FlushTarget + ?Sized> FlushTarget for Arc<T> {
    fn flush(&self, least_pages: usize) -> Result<u64, TargetError> {
        (**self).flush(least_pages)
    }
    fn commit(&self, least_pages: usize) -> Result<u64, TargetError> {
        (**self).commit(least_pages)
    }
    fn flushed_where(&self) -> u64 {
        (**self).flushed_where()
    }
    fn committed_where(&self) -> u64 {
        (**self).committed_where()
    }
    fn unflushed_bytes(&self) -> u64 {
        (**self).unflushed_bytes()
    }
    fn uncommitted_bytes(&self) -> u64 {
        (**self).uncommitted_bytes()
    }
    fn store_timestamp(&self) -> u64 {
        (**self).store_timestamp()
    }
}

impl FlushTarget for SegmentQueue {
    fn flush(&self, least_pages: usize) -> Result<u64, TargetError> {
        SegmentQueue::flush(self, least_pages).map(|p| p.to).map_err(|e| Arc::new(e) as TargetError)
    }
    fn commit(&self, least_pages: usize) -> Result<u64, TargetError> {
        SegmentQueue::commit(self, least_pages).map(|p| p.to).map_err(|e| Arc::new(e) as TargetError)
    }
    fn flushed_where(&self) -> u64 {
        SegmentQueue::flushed_where(self)
    }
    fn committed_where(&self) -> u64 {
        SegmentQueue::committed_where(self)
    }
    fn unflushed_bytes(&self) -> u64 {
        self.remain_how_many_data_to_flush()
    }
    fn uncommitted_bytes(&self) -> u64 {
        self.remain_how_many_data_to_commit()
    }
    fn store_timestamp(&self) -> u64 {
        SegmentQueue::store_timestamp(self)
    }
}
