//! The ordered segments of one directory: RocketMQ's `MappedFileQueue`.
//!
//! Segments are [`MappedFile`]s of one fixed size, each named by its start offset,
//! consecutive with no gaps. The queue loads them, rolls over to a new segment when
//! the last is full (optionally prepared ahead of time by a background thread),
//! finds the segment holding an offset in O(1), flushes and commits across segment
//! boundaries, truncates a dirty tail and deletes expired segments from the front.
//!
//! It knows nothing of record formats or of when to flush. It is safe to use from
//! one appender thread and any number of flush, commit and reader threads at once.
//!
//! The segments may be spread over several directories (disks), RocketMQ's
//! `MultiPathMappedFileQueue`: see [`SegmentQueue::load_dirs`] for the rule that
//! places each new segment.
//!
//! ```
//! use mapped_file::{SimStorage, Storage};
//! use segment_queue::{QueueConfig, SegmentQueue};
//! use std::sync::Arc;
//!
//! let storage: Arc<dyn Storage> = Arc::new(SimStorage::new());
//! let queue = SegmentQueue::load(storage, "/log".as_ref(), QueueConfig::new(4096), None)?;
//! let file = queue.roll_to_writable_segment(0)?;
//! file.append_bytes(0, b"hello")?;
//! assert_eq!(queue.max_offset(), 5);
//! assert_eq!(queue.flush(0)?.to, 5);
//! assert_eq!(queue.flushed_where(), 5);
//! # Ok::<(), segment_queue::QueueError>(())
//! ```
//!
//! # After `load`: your recovery
//!
//! The queue knows no record format, so [`SegmentQueue::load`] cannot tell where
//! the data in a segment ends: it marks every loaded segment full
//! (`max_offset` and `flushed_where` report the files' end). Before appending,
//! find the end with your format and cut the rest: [`SegmentQueue::recover_with`]
//! walks the segments with your parser ([`Scan`]) and truncates there (or scan
//! yourself and call [`SegmentQueue::truncate_dirty_files`]). A record never
//! spans two segments: when one does not fit, [`SegmentQueue::seal`] ends the
//! segment (its zero tail is skipped) and the next roll starts a new one.
//!
//! On a real directory, with length-prefixed records:
//!
//! ```
//! use mapped_file::{Appended, MmapStorage, Storage};
//! use segment_queue::{QueueConfig, Scan, SegmentQueue};
//! use std::sync::Arc;
//!
//! fn parse(bytes: &[u8]) -> Scan {
//!     let Some(head) = bytes.get(..4) else { return Scan::End };
//!     match u32::from_le_bytes(head.try_into().unwrap()) as usize {
//!         0 => Scan::SegmentEnd, // zeros: a sealed segment's tail, or nothing written
//!         len if bytes.len() >= 4 + len => Scan::Record(4 + len),
//!         _ => Scan::End,
//!     }
//! }
//!
//! fn put(queue: &SegmentQueue, body: &[u8]) -> Result<u64, segment_queue::QueueError> {
//!     let record = [&(body.len() as u32).to_le_bytes()[..], body].concat();
//!     loop {
//!         match queue.roll_to_writable_segment(0)?.append_bytes(0, &record)? {
//!             Appended::Written { wrote_offset, .. } => return Ok(wrote_offset),
//!             Appended::DoesNotFit { .. } => {
//!                 queue.seal()?;
//!             }
//!         }
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let open = || -> Result<SegmentQueue, Box<dyn std::error::Error>> {
//!     let storage: Arc<dyn Storage> = Arc::new(MmapStorage::lock(dir.path())?);
//!     Ok(SegmentQueue::load(storage, dir.path(), QueueConfig::new(64 * 1024), None)?)
//! };
//! let queue = open()?;
//! for i in 0..100u32 {
//!     put(&queue, format!("record {i}").as_bytes())?;
//! }
//! queue.flush(0)?; // durable
//! let end = queue.max_offset();
//! queue.shutdown();
//! drop(queue);
//!
//! let queue = open()?;
//! assert_eq!(queue.recover_with(parse)?, end); // found the end, cut the rest
//! let next = put(&queue, b"goes on")?;
//! assert_eq!(next, end);
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]
// Offsets: no silent wrap-around, no truncating casts.
#![warn(clippy::arithmetic_side_effects, clippy::cast_possible_truncation, clippy::cast_sign_loss)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

use mapped_file::{FailureLatch, MappedFile, Storage, SyncFailure};
use parking_lot::{Mutex, RwLock};
use transient_pool::TransientStorePool;

mod allocate;
mod config;
mod error;
mod load;
mod lookup;
mod placement;
#[cfg(planted_bugs)]
pub mod planted;
mod prepare;
mod progress;
mod recover;
mod recycle;
mod report;
mod retention;
mod roll;
mod space;
mod truncate;

pub use config::{PoolExhaustedPolicy, QueueConfig, SegmentDir, SegmentPreparation};
pub use error::QueueError;
pub use layout::{check_layout, ListedSegment};
pub use prepare::PreparationStats;
pub use recover::Scan;
pub use recycle::RECYCLE_DIR;
pub use report::{LoadReport, QueueProgress, TruncateReport};

use allocate::Allocator;
use recycle::Spares;

mod layout;

/// Called with the queue's new front (the start of the first segment that stays)
/// before segments are deleted from the front; an error stops the deletion.
/// See [`SegmentQueue::set_front_guard`].
pub type FrontGuard = Box<dyn Fn(u64) -> Result<(), Box<dyn std::error::Error + Send + Sync>> + Send + Sync>;

/// Gives the lowest offset the queue's owner still needs the segments of:
/// no segment holding it or anything past it is deleted from the front.
/// See [`SegmentQueue::set_front_hold`].
pub type FrontHold = Box<dyn Fn() -> u64 + Send + Sync>;

/// The segments of one directory, or of several (see [`load_dirs`](Self::load_dirs)).
pub struct SegmentQueue {
    /// The directories, in the order given; never empty, at least one writable.
    dirs: Vec<SegmentDir>,
    /// Per directory: too full to take new segments (set by a disk watcher).
    full: Vec<AtomicBool>,
    config: QueueConfig,
    storage: Arc<dyn Storage>,
    files: RwLock<Vec<Arc<MappedFile>>>,
    /// Shared by every segment: one failed sync stops the whole queue.
    latch: Arc<FailureLatch>,
    flushed_where: AtomicU64,
    committed_where: AtomicU64,
    store_timestamp: AtomicU64,
    pool: Option<TransientStorePool>,
    spares: Arc<Spares>,
    /// Segments deleted from the front whose mapping a view may still hold:
    /// their directory, size and mapping (see [`bytes_awaiting_release`](Self::bytes_awaiting_release)).
    deleted_mapped: Mutex<Vec<(PathBuf, u64, mapped_file::MappingWatch)>>,
    /// The preallocation thread, taken by shutdown.
    allocator: Mutex<Option<Allocator>>,
    /// Told the new front before segments leave it (see [`set_front_guard`](Self::set_front_guard)).
    front_guard: RwLock<Option<FrontGuard>>,
    /// Where deletion from the front stops (see [`set_front_hold`](Self::set_front_hold)).
    front_hold: RwLock<Option<FrontHold>>,
    /// One change of the segment list's tail at a time: roll-over, truncation,
    /// `clear`, `close`. Not the same as `files`' write lock, which is held only to
    /// push or pop, so readers never wait for a segment's creation. The commit
    /// log's put lock serialises its appends, but this crate is usable alone and
    /// a truncation may come from another thread.
    roll_lock: Mutex<()>,
    /// One flush at a time (the flush service, a manual flush, recovery's
    /// `force_from`): each moves `flushed_where` from where the last left it.
    flush_lock: Mutex<()>,
    /// One commit at a time, apart from flushes: a commit copying write-buffer
    /// bytes must not wait for a sync in progress.
    commit_lock: Mutex<()>,
    load_report: LoadReport,
    /// The queue's syncs in flight, which segment preparation stays out of the way of.
    activity: Arc<prepare::SyncActivity>,
    /// What segment preparation did.
    preparation: Arc<prepare::Counters>,
}

impl std::fmt::Debug for SegmentQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentQueue")
            .field("dirs", &self.dirs)
            .field("segments", &self.files.read().len())
            .field("flushed_where", &self.flushed_where())
            .field("committed_where", &self.committed_where())
            .finish()
    }
}

/// A segment size as an offset distance: non-zero (`load` refuses 0), and a
/// `usize` always fits in a `u64` here, so dividing by it never panics.
fn size_u64(size: usize) -> std::num::NonZeroU64 {
    u64::try_from(size).ok().and_then(std::num::NonZeroU64::new).expect("a positive segment size (checked at load)")
}

impl SegmentQueue {
    /// Opens the directory (creating it if missing) and loads its segments, sorted
    /// by name. Every file must be a segment: named by 20 digits, of the segment
    /// size, aligned and consecutive ([`check_layout`]); a zero-length *last* file
    /// is deleted as RocketMQ does. A file named [`mapped_file::LOCK_FILE`] is the
    /// storage's lock, not a segment, and is left alone. Loaded segments are marked full; recovery then finds the end with
    /// [`recover_with`](Self::recover_with) (or its own scan) and truncates with
    /// [`truncate_dirty_files`](Self::truncate_dirty_files). `flushed_where` and
    /// `committed_where` start at the end of the loaded data.
    pub fn load(
        storage: Arc<dyn Storage>,
        dir: &Path,
        config: QueueConfig,
        pool: Option<TransientStorePool>,
    ) -> Result<Self, QueueError> {
        Self::load_dirs(storage, vec![SegmentDir::writable(dir)], config, pool)
    }

    /// The directory: the first of [`dirs`](Self::dirs).
    pub fn dir(&self) -> &Path {
        &self.dirs[0].path
    }

    /// Every directory of the queue, in the order given.
    pub fn dirs(&self) -> &[SegmentDir] {
        &self.dirs
    }

    /// The first failed sync of any segment, if one failed: the queue's one
    /// failure latch. Once set, every segment refuses appends, commits, flushes
    /// and truncation, whoever asked for the sync that failed.
    pub fn failure(&self) -> Option<Arc<SyncFailure>> {
        self.latch.get()
    }

    /// The latch shared by every segment.
    pub fn latch(&self) -> &Arc<FailureLatch> {
        &self.latch
    }

    /// The segment size.
    pub fn mapped_file_size(&self) -> usize {
        self.config.mapped_file_size
    }

    /// What [`load`](Self::load) found.
    pub fn load_report(&self) -> &LoadReport {
        &self.load_report
    }

    /// A snapshot of the segments, oldest first.
    pub fn segments(&self) -> Vec<Arc<MappedFile>> {
        self.files.read().clone()
    }

    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.files.read().len()
    }

    /// The first segment.
    pub fn first_mapped_file(&self) -> Option<Arc<MappedFile>> {
        self.files.read().first().cloned()
    }

    /// The last segment, full or not.
    pub fn last_mapped_file(&self) -> Option<Arc<MappedFile>> {
        self.files.read().last().cloned()
    }

    /// What the preallocation thread's segment preparation
    /// ([`QueueConfig::segment_preparation`]) did since the queue was loaded.
    pub fn preparation_stats(&self) -> PreparationStats {
        self.preparation.snapshot()
    }

    /// Prepares the active segment whole, now and unpaced, when
    /// [`QueueConfig::segment_preparation`] writes blocks and nothing has been
    /// appended to it: zeros written and synced over the file in steps of at
    /// least 8 MiB (about 50 ms for 64 MiB on an SSD-backed VM), so the syncs of
    /// its first records meet written blocks, as those of the segments the
    /// preallocation thread prepares do. For an owner that made its first
    /// segment before any writer runs (a new log's open, which would otherwise
    /// write its whole first segment into unwritten blocks).
    ///
    /// Returns whether the segment was prepared: false when preparation is off,
    /// there is no active segment, it was made from a spare or warmed up (its
    /// blocks are written), or something was appended to it (before or during the call:
    /// zeros are never written over appended bytes, each step looks under the
    /// segment's append lock). A failed sync latches the queue's failure latch,
    /// as every failed sync does, and is returned.
    pub fn prepare_active_segment(&self) -> Result<bool, QueueError> {
        // A warmed segment had its zeros written at its creation.
        if !self.config.segment_preparation.writes_blocks() || self.config.warm_mapped_file_enable {
            return Ok(false);
        }
        let Some(active) = self.last_mapped_file().filter(|f| !f.is_full() && !f.is_from_spare()) else {
            return Ok(false);
        };
        // A segment with anything appended is refused by its first step.
        let _in_flight = self.activity.begin();
        Ok(prepare::prepare_in_place(&active, self.config.preparation_chunk_bytes, &self.preparation)?)
    }

    /// Stops the preallocation thread and deletes a prepared segment never used.
    /// Later roll-overs create segments in place.
    pub fn shutdown(&self) {
        let allocator = self.allocator.lock().take();
        drop(allocator);
    }

    /// Closes the queue for good: [`shutdown`](Self::shutdown), then drops every
    /// segment from the queue and [releases](Storage::release) the storage, so the
    /// directory is free once the last zero-copy view of its data is dropped. The
    /// queue is empty afterwards: reads find nothing, and appends fail because no
    /// segment can be created.
    pub fn close(&self) {
        self.drop_segments();
        self.storage.release();
    }

    /// [`close`](Self::close) for a queue on a storage it shares (with other
    /// queues, or a log): the segments are dropped, the storage stays usable.
    pub fn drop_segments(&self) {
        self.shutdown();
        let _roll = self.roll_lock.lock();
        self.files.write().clear();
    }
}

#[cfg(test)]
mod tests;

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
