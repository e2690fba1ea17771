//! Rolling over: the segment to append to, made from a prepared one, a spare, or
//! in place, with its write buffer.

use std::sync::Arc;

use mapped_file::MappedFile;
use transient_pool::PoolError;

use crate::allocate::{self, Allocator, Taken};
use crate::{size_u64, space, PoolExhaustedPolicy, QueueError, SegmentQueue};

impl SegmentQueue {
    /// The segment to append to: the last one, or a new one when there is none or
    /// the last is full. With no segments the first starts at
    /// `start_offset - start_offset % size`.
    ///
    /// Rolling does more than look up (hence the name, not RocketMQ's
    /// `getLastMappedFile`): the new segment is taken from the preallocation
    /// thread or created (and warmed, if configured), gets a write buffer when a
    /// pool is configured, the earlier segments' write buffers are committed when
    /// it has none (so readable data has no hole), and the segment after it is
    /// requested from the preallocation thread.
    #[doc(alias = "get_last_mapped_file")]
    #[doc(alias = "getLastMappedFile")]
    pub fn roll_to_writable_segment(&self, start_offset: u64) -> Result<Arc<MappedFile>, QueueError> {
        if let Some(last) = self.files.read().last().filter(|f| !f.is_full()) {
            return Ok(Arc::clone(last));
        }
        let _roll = self.roll_lock.lock();
        // Re-check: another caller may have rolled while we waited.
        let size = self.config.mapped_file_size;
        let offset = match self.files.read().last() {
            Some(last) if !last.is_full() => return Ok(Arc::clone(last)),
            // Loaded and created segments all end inside the offset space, so the
            // next one's start fits; `create_segment` checks that its end does.
            Some(last) => last.file_end(),
            None => start_offset.saturating_sub(start_offset % size_u64(size)), // the remainder is at most the value
        };
        let file = self.create_segment(offset)?;
        if !file.has_write_buffer() && self.remain_how_many_data_to_commit() > 0 {
            // Appends to this segment are readable at once; commit what the earlier
            // segments' buffers still hold so readable data has no hole.
            self.commit(0)?;
        }
        let file = Arc::new(file);
        self.files.write().push(Arc::clone(&file));
        if let Some(next) =
            mapped_file::segment_end(offset, size).filter(|&n| mapped_file::segment_end(n, size).is_some())
        {
            if let Some(allocator) = self.allocator.lock().as_ref() {
                allocator.request(next, self.dir_for(next).to_path_buf());
            }
        }
        Ok(file)
    }

    fn create_segment(&self, offset: u64) -> Result<MappedFile, QueueError> {
        let size = self.config.mapped_file_size;
        let prepared = self.allocator.lock().as_ref().map_or(Taken::NotRequested, |a| a.take(offset));
        let file = match prepared {
            // Prepared before its directory was marked full: the placement rule
            // holds for every segment, so it goes and one is made where it belongs.
            Taken::Prepared(file) if file.path().parent() != Some(self.dir_for(offset)) => {
                tracing::info!(path = %file.path().display(), "preallocated segment's directory is full now; discarding it");
                file.destroy()?;
                self.create_in_place(offset, size)?
            }
            Taken::Prepared(file) => file,
            Taken::Failed(err) => {
                tracing::warn!(offset, %err, "preallocated segment failed; creating it in place");
                self.create_unprepared(offset, size)?
            }
            Taken::NotRequested => self.create_unprepared(offset, size)?,
            Taken::StillPreparing => {
                return Err(QueueError::PreallocationTimedOut {
                    path: self.dir_for(offset).join(mapped_file::file_name(offset)),
                    waited_ms: self.config.preallocation_wait_ms,
                })
            }
        };
        if let Some(pool) = &self.pool {
            match pool.try_borrow() {
                Ok(buffer) => file.attach_write_buffer(buffer)?,
                Err(PoolError::Exhausted { pool_size }) => match self.config.pool_exhausted_policy {
                    PoolExhaustedPolicy::UseMapping => {
                        tracing::warn!(
                            offset,
                            pool_size,
                            "transient store pool exhausted; segment appends straight into the mapping"
                        );
                    }
                    PoolExhaustedPolicy::Fail => {
                        let _ = file.destroy();
                        return Err(QueueError::PoolExhausted { pool_size, offset });
                    }
                },
                Err(other) => {
                    tracing::warn!(offset, %other, "could not borrow a write buffer");
                }
            }
        }
        // Joined only now: a prepared segment whose warm-up sync failed was
        // deleted, never used, and lost nothing.
        Ok(file.with_latch(Arc::clone(&self.latch)))
    }

    /// [`create_in_place`](Self::create_in_place) where a prepared segment was
    /// wanted: counted when the file is a new one (a spare needs no preparation).
    fn create_unprepared(&self, offset: u64, size: usize) -> Result<MappedFile, QueueError> {
        let file = self.create_in_place(offset, size)?;
        if !file.is_from_spare() && self.allocator.lock().as_ref().is_some_and(Allocator::prepares) {
            self.preparation.made_unprepared.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(file)
    }

    fn create_in_place(&self, offset: u64, size: usize) -> Result<MappedFile, QueueError> {
        let dir = self.dir_for(offset);
        if let Some(file) = self.spares.take(dir, offset) {
            return Ok(file); // written before: no warm-up to do
        }
        // The placement rule's directory, or, when its disk has no room for a
        // new segment, the next writable one that has.
        let dir = space::first_with_room(
            &*self.storage,
            self.placement_order(offset),
            size,
            self.config.disk_space_limit_percent,
        )?;
        let file = MappedFile::create(&*self.storage, dir, offset, size)?;
        if self.config.warm_mapped_file_enable {
            return Ok(allocate::warm_or_remove(file, self.config.lock_warmed_mapped_file)?);
        }
        Ok(file)
    }
}
