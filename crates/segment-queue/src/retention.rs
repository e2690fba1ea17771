//! Retention: deleting segments from the front (by age, by offset, to free space),
//! the front guard told before any goes, spares, and the space deleted segments
//! still hold through views.

use std::path::Path;
use std::sync::Arc;

use mapped_file::MappedFile;
use transient_pool::TransientStorePool;

use crate::{FrontGuard, FrontHold, QueueError, SegmentQueue};

impl SegmentQueue {
    /// Deletes segments from the front whose store timestamp is older than `now_ms - expired_ms`,
    /// at most `max_batch` of them. Never the last segment, and never past a segment that is not
    /// expired, so no hole opens
    /// ([ROCKETMQ-321](https://issues.apache.org/jira/browse/ROCKETMQ-321)). Never a segment
    /// holding bytes that are not yet durable. Returns how many were deleted.
    pub fn delete_expired_file_by_time(
        &self,
        expired_ms: u64,
        now_ms: u64,
        max_batch: usize,
    ) -> Result<usize, QueueError> {
        let flushed = self.flushed_where();
        self.delete_from_front(max_batch, false, |f| {
            f.store_timestamp().saturating_add(expired_ms) <= now_ms && f.file_end() <= flushed
        })
    }

    /// Write buffers left in the pool, if the queue has one.
    pub fn pool_buffers_available(&self) -> Option<usize> {
        self.pool.as_ref().map(TransientStorePool::available_buffer_nums)
    }

    /// Whether expired segments become spares (`recycle_segments`) from now on:
    /// a cleaning service turns it off while the disk is short of space.
    pub fn set_keep_spares(&self, keep: bool) {
        self.spares.set_keeping(keep);
    }

    /// Deletes every spare segment file, durably; returns how many.
    pub fn drop_spares(&self) -> usize {
        self.spares.drop_all()
    }

    /// Deletes segments from the front that end at or below `offset`, at most
    /// `max_batch` of them; never the last segment. Returns how many were deleted.
    pub fn delete_expired_file_by_offset(&self, offset: u64, max_batch: usize) -> Result<usize, QueueError> {
        let flushed = self.flushed_where();
        self.delete_from_front(max_batch, false, |f| f.file_end() <= offset.min(flushed))
    }

    /// Deletes the oldest segments, expired or not, until `bytes` of segment files
    /// in `dir` are deleted (a cleaning service freeing only the space it needs),
    /// at most `max_batch` of them. The rules of
    /// [`delete_expired_file_by_time`](Self::delete_expired_file_by_time) hold:
    /// from the front only, never the last segment, never one holding bytes not
    /// yet durable. Segments in other directories are deleted on the way when
    /// they are older, but free nothing in `dir`. The front hold
    /// ([`set_front_hold`](Self::set_front_hold)) gives way here, said loudly:
    /// a full disk stops every append, the owner's derived data only loses
    /// its protection against a crash. Returns how many were deleted.
    pub fn delete_oldest_to_free(&self, dir: &Path, bytes: u64, max_batch: usize) -> Result<usize, QueueError> {
        let flushed = self.flushed_where();
        let mut freed = 0u64;
        self.delete_from_front(max_batch, true, |f| {
            if freed >= bytes || f.file_end() > flushed {
                return false;
            }
            if f.path().parent() == Some(dir) {
                freed = freed.saturating_add(u64::try_from(f.file_size()).unwrap_or(u64::MAX));
            }
            true
        })
    }

    /// Bytes of segments in `dir` that were deleted from the front but whose
    /// mapping a reader's view still holds: the file system frees them when the
    /// last view goes, so a look at the disk still counts them as used.
    pub fn bytes_awaiting_release(&self, dir: &Path) -> u64 {
        let mut deleted = self.deleted_mapped.lock();
        deleted.retain(|(_, _, watch)| watch.is_mapped());
        deleted.iter().filter(|(d, _, _)| d == dir).fold(0u64, |sum, (_, size, _)| sum.saturating_add(*size))
    }

    /// Sets the front guard: every deletion from the front first calls it with
    /// the start of the first segment that will stay, and deletes nothing if it
    /// fails. An owner that records the front durably (the commit log's
    /// checkpoint) can then tell, after a restart, segments the queue deleted
    /// from segments that went missing (a disk not mounted): a queue whose first
    /// segment starts above the recorded front lost segments it never deleted.
    /// The guard runs under the queue's segment lock; it must not call back into
    /// the queue.
    pub fn set_front_guard(&self, guard: FrontGuard) {
        *self.front_guard.write() = Some(guard);
    }

    /// Sets the front hold: deletion from the front by age or by offset stops
    /// at the first segment that ends past the offset it gives (freeing space
    /// goes past it: [`delete_oldest_to_free`](Self::delete_oldest_to_free)). An owner whose derived data of the log's records is not durable
    /// yet (a queue index whose entries are still in memory) keeps the records
    /// until it is, so a crash never finds both gone. It runs under the
    /// queue's segment lock; it must not call back into the queue.
    pub fn set_front_hold(&self, hold: FrontHold) {
        *self.front_hold.write() = Some(hold);
    }

    /// Deletes from the front while `expired` says so, stopping at the
    /// front hold unless `past_hold` (freeing space: each segment past it
    /// warned).
    fn delete_from_front(
        &self,
        max_batch: usize,
        past_hold: bool,
        mut expired: impl FnMut(&MappedFile) -> bool,
    ) -> Result<usize, QueueError> {
        let mut files = self.files.write();
        let hold = self.front_hold.read().as_ref().map_or(u64::MAX, |hold| hold());
        let mut expired = |f: &MappedFile| {
            if f.file_end() <= hold {
                return expired(f);
            }
            let gone = past_hold && expired(f);
            if gone {
                tracing::warn!(segment = %f.path().display(), hold, "deleting a segment past the front hold to free space");
            }
            gone
        };
        // Plan first: how many go, so the guard learns the front before any does.
        let mut planned = 0usize;
        while planned < max_batch && planned.saturating_add(1) < files.len() && expired(&files[planned]) {
            planned = planned.saturating_add(1); // below `files.len()`
        }
        if planned == 0 {
            return Ok(0);
        }
        let front = files[planned].file_from_offset();
        #[cfg(planted_bugs)]
        let planted = crate::planted::is_active(crate::planted::Bug::FrontAfterDeletion);
        #[cfg(not(planted_bugs))]
        let planted = false;
        if let Some(guard) = self.front_guard.read().as_ref().filter(|_| !planted) {
            guard(front).map_err(|source| QueueError::FrontNotRecorded { front, source })?;
        }
        let deleted = self.delete_planned(&mut files, planned);
        if planted {
            // The planted bug: the front is recorded only after the deletions.
            if let Some(guard) = self.front_guard.read().as_ref() {
                guard(front).map_err(|source| QueueError::FrontNotRecorded { front, source })?;
            }
        }
        deleted
    }

    /// Deletes (or keeps as spares) the first `planned` segments of `files`.
    fn delete_planned(&self, files: &mut Vec<Arc<MappedFile>>, planned: usize) -> Result<usize, QueueError> {
        let mut count = 0;
        while count < planned {
            let file = files.remove(0);
            let kept = match self.spares.offer(&file) {
                Ok(kept) => kept,
                Err(err) => {
                    files.insert(0, file);
                    return Err(err);
                }
            };
            if !kept {
                tracing::info!(path = %file.path().display(), "deleting expired segment");
                if let Err(err) = file.destroy() {
                    files.insert(0, file);
                    return Err(err.into());
                }
                let dir = file.path().parent().map(Path::to_path_buf).unwrap_or_default();
                let size = u64::try_from(file.file_size()).unwrap_or(u64::MAX);
                let watch = file.mapping_watch();
                drop(file);
                if watch.is_mapped() {
                    let mut deleted = self.deleted_mapped.lock();
                    deleted.retain(|(_, _, w)| w.is_mapped());
                    deleted.push((dir, size, watch));
                }
            }
            count = count.saturating_add(1); // at most `max_batch`
        }
        Ok(count)
    }
}
