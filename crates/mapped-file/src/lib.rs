//! One fixed-size, memory-mapped segment of a commit log: RocketMQ's `MappedFile`.
//!
//! A segment is named by the absolute offset of its first byte (20 zero-padded
//! digits, [`file_name`]). It keeps three positions:
//!
//! - **wrote**: bytes appended so far;
//! - **committed**: bytes visible in the mapping, which is also the *read position*
//!   (equal to wrote without a write buffer; behind it while a
//!   `WriteBuffer` from `transient-pool` absorbs appends);
//! - **flushed**: bytes known durable.
//!
//! One appender at a time (enforced by an internal lock), while commit, flush and
//! readers run on other threads. A failed sync *latches* the file: flushed never
//! moves again and every later append, commit and flush fails (fsyncgate).
//!
//! The file I/O sits behind [`Storage`] / [`SegmentIo`], from the `store-io` crate
//! (re-exported here): `MmapStorage` is the real thing, `SimStorage` (feature
//! `sim`) runs the same logic in memory with injected sync failures and power
//! cuts. This crate knows nothing of other segments, threads or records.
//!
//! ```
//! use mapped_file::{AppendStatus, MappedFile};
//! use store_io::SimStorage;
//! use std::path::Path;
//!
//! let storage = SimStorage::new();
//! let file = MappedFile::create(&storage, Path::new("/log"), 0, 4096)?;
//! let appended = file.append_with(0, |_pos, tail| {
//!     tail[..5].copy_from_slice(b"hello");
//!     AppendStatus::Written { bytes: 5, value: () }
//! })?;
//! assert_eq!(appended.wrote_offset(), Some(0));
//! let progress = file.flush(0)?;
//! assert_eq!((progress.from, progress.to), (0, 5));
//! assert_eq!(&file.read(0, 5)?[..], b"hello");
//! # Ok::<(), mapped_file::MappedFileError>(())
//! ```

#![deny(unsafe_code)]
// Offsets and positions: no silent wrap-around, no truncating casts.
#![warn(clippy::arithmetic_side_effects, clippy::cast_possible_truncation, clippy::cast_sign_loss)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

pub use bytes::Bytes;
use parking_lot::Mutex;
use transient_pool::WriteBuffer;

mod error;
mod latch;
mod name;
mod outcome;
#[cfg(planted_bugs)]
pub mod planted;
#[allow(unsafe_code)]
mod region;
mod sync;

#[cfg(all(test, loom))]
mod loom_models;

pub use error::MappedFileError;
pub use latch::{FailureLatch, SyncFailure};
use name::{check_offset_space, new_segment_path, new_temporary_path};
pub use name::{file_name, parse_file_name, segment_end, temporary_file_name, FILE_NAME_LEN, TEMPORARY_SUFFIX};
pub use outcome::{is_due, AppendStatus, Appended, Placed, Progress};
// The I/O layer this crate's API names, re-exported so a user of one segment
// needs no second dependency.
#[cfg(feature = "sim")]
pub use store_io::sim;
#[cfg(feature = "sim")]
pub use store_io::SimStorage;
pub use store_io::{
    epoch_ms, first_overlap, sync_dir, DirEntry, DiskSpace, LockError, MmapStorage, OpenedSegment, SegmentIo,
    SegmentMemory, Storage, LOCK_FILE,
};

use region::{AppendRefused, Filled, Region, ResetRefused, WriteFailed};

/// The page size that least-pages thresholds count in (RocketMQ's `OS_PAGE_SIZE`).
pub const OS_PAGE_SIZE: usize = 4096;

/// Whether a segment's mapping is still held ([`MappedFile::mapping_watch`]).
///
/// A deleted file's blocks are freed only when its mapping goes, which is when
/// the segment and the last view of its bytes are dropped: until then the disk
/// space it held is still in use.
#[derive(Debug, Clone)]
pub struct MappingWatch(std::sync::Weak<region::Region>);

impl MappingWatch {
    /// True while the segment or a view of its bytes holds the mapping.
    pub fn is_mapped(&self) -> bool {
        self.0.strong_count() > 0
    }
}

/// One segment. `Send + Sync`: share it behind an `Arc`.
#[derive(Debug)]
pub struct MappedFile {
    path: PathBuf,
    file_from_offset: u64,
    region: Arc<Region>,
    flushed: AtomicUsize,
    flush_lock: Mutex<()>,
    latch: Arc<FailureLatch>,
    destroyed: AtomicBool,
    store_timestamp: AtomicU64,
    /// Made from a spare file: bytes of its earlier life may lie past the data.
    from_spare: bool,
}

impl MappedFile {
    /// Creates `dir/<file_name(file_from_offset)>` with `file_size` bytes allocated
    /// on disk, and maps it. A full disk is an error here, never a SIGBUS later.
    pub fn create(
        storage: &dyn Storage,
        dir: &Path,
        file_from_offset: u64,
        file_size: usize,
    ) -> Result<Self, MappedFileError> {
        Self::create_with(dir, file_from_offset, file_size, |path| storage.create(path, file_size))
    }

    /// [`create`](Self::create) with the file's directory entry left to a later
    /// [`Storage::sync_all_under`]: a power cut before it may lose the file. Only
    /// in builds with planted bugs, for the one that trusts such a file.
    #[cfg(planted_bugs)]
    pub fn create_deferred(
        storage: &dyn Storage,
        dir: &Path,
        file_from_offset: u64,
        file_size: usize,
    ) -> Result<Self, MappedFileError> {
        Self::create_with(dir, file_from_offset, file_size, |path| storage.create_deferred(path, file_size))
    }

    /// [`create`](Self::create) under the segment's
    /// [`temporary_file_name`] in `dir` (durably, as `create` makes it): for a
    /// file written whole and synced there, then moved to its name with
    /// [`Storage::rename`] (and opened there again), so that nothing ever finds
    /// it unwritten under its name, a reader beside the writer or an open after
    /// a crash. A crash before the rename leaves the temporary file: the owner
    /// deletes it when it lists the directory.
    pub fn create_temporary(
        storage: &dyn Storage,
        dir: &Path,
        file_from_offset: u64,
        file_size: usize,
    ) -> Result<Self, MappedFileError> {
        let path = new_temporary_path(dir, file_from_offset, file_size)?;
        let opened = storage
            .create(&path, file_size)
            .map_err(|source| MappedFileError::Create { path: path.clone(), source })?;
        Ok(Self::from_opened(path, file_from_offset, opened))
    }

    /// The segment file of `file_from_offset` in `dir`, made by `make`.
    fn create_with(
        dir: &Path,
        file_from_offset: u64,
        file_size: usize,
        make: impl FnOnce(&Path) -> std::io::Result<OpenedSegment>,
    ) -> Result<Self, MappedFileError> {
        let path = new_segment_path(dir, file_from_offset, file_size)?;
        let opened = make(&path).map_err(|source| MappedFileError::Create { path: path.clone(), source })?;
        Ok(Self::from_opened(path, file_from_offset, opened))
    }

    /// Makes the segment starting at `file_from_offset` out of `recycled`, a file an
    /// earlier segment handed on ([`recycle`](Self::recycle)): it is renamed to the
    /// segment's name (durably) and mapped, with positions at 0. Its blocks are
    /// allocated and written already, so appends and syncs never meet unwritten
    /// extents, but its bytes are the earlier segment's: they fail the record CRC
    /// at every offset of this one (the CRC covers the record's own offset, and
    /// segments are only ever created above every earlier one), and recovery cuts
    /// them off as a torn tail. `recycled` must have `file_size` bytes.
    pub fn create_from_recycled(
        storage: &dyn Storage,
        recycled: &Path,
        dir: &Path,
        file_from_offset: u64,
        file_size: usize,
    ) -> Result<Self, MappedFileError> {
        let path = new_segment_path(dir, file_from_offset, file_size)?;
        storage.rename(recycled, &path).map_err(|source| MappedFileError::Create { path: path.clone(), source })?;
        Self::open(storage, &path, file_size).map(|file| MappedFile { from_spare: true, ..file }).inspect_err(|_| {
            // Not a segment after all: a stale file must not stay under a segment's name.
            if let Err(err) = storage.remove(&path) {
                tracing::error!(path = %path.display(), %err, "could not remove a recycled file that failed to open");
            }
        })
    }

    /// Maps an existing segment file of `file_size` bytes. Positions start at 0;
    /// the caller sets them (see [`set_positions`](Self::set_positions)).
    pub fn open(storage: &dyn Storage, path: &Path, file_size: usize) -> Result<Self, MappedFileError> {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let file_from_offset =
            parse_file_name(name).ok_or_else(|| MappedFileError::BadName { path: path.to_path_buf() })?;
        check_offset_space(path, file_from_offset, file_size)?;
        let opened = storage
            .open(path, file_size)
            .map_err(|source| MappedFileError::Open { path: path.to_path_buf(), source })?;
        if opened.memory.len() != file_size {
            return Err(MappedFileError::WrongSize {
                path: path.to_path_buf(),
                expected: file_size as u64,
                actual: opened.memory.len() as u64,
            });
        }
        Ok(Self::from_opened(path.to_path_buf(), file_from_offset, opened))
    }

    fn from_opened(path: PathBuf, file_from_offset: u64, opened: OpenedSegment) -> Self {
        MappedFile {
            path,
            file_from_offset,
            region: Arc::new(Region::new(opened.memory, opened.io)),
            flushed: AtomicUsize::new(0),
            flush_lock: Mutex::new(()),
            latch: FailureLatch::new(),
            destroyed: AtomicBool::new(false),
            store_timestamp: AtomicU64::new(0),
            from_spare: false,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Absolute offset of the file's first byte (`fileFromOffset`).
    pub fn file_from_offset(&self) -> u64 {
        self.file_from_offset
    }

    /// Size in bytes.
    pub fn file_size(&self) -> usize {
        self.region.len()
    }

    /// A watch on the segment's mapping: it tells whether the mapping (and with
    /// it the file's disk space, once the file is deleted) is still held, by this
    /// value or by any reader's view of its bytes. Holding the watch keeps
    /// nothing alive.
    pub fn mapping_watch(&self) -> MappingWatch {
        MappingWatch(Arc::downgrade(&self.region))
    }

    /// Absolute offset one past the file's last byte (`fileFromOffset + fileSize`).
    pub fn file_end(&self) -> u64 {
        self.offset_at(self.file_size())
    }

    /// True when the absolute `offset` lies in this file: `[file_from_offset, file_end)`.
    pub fn holds(&self, offset: u64) -> bool {
        self.file_from_offset <= offset && offset < self.file_end()
    }

    /// The file position of the absolute `offset`, if it lies in
    /// `[file_from_offset, file_end]` (the end itself included).
    pub fn position_of(&self, offset: u64) -> Option<usize> {
        let pos = offset.checked_sub(self.file_from_offset)?;
        usize::try_from(pos).ok().filter(|&pos| pos <= self.file_size())
    }

    /// Bytes appended (`wrotePosition`).
    pub fn wrote_position(&self) -> usize {
        self.region.wrote()
    }

    /// Bytes in the mapping (`committedPosition`).
    pub fn committed_position(&self) -> usize {
        self.region.committed()
    }

    /// Bytes known durable (`flushedPosition`).
    pub fn flushed_position(&self) -> usize {
        // Acquire pairs with the Release in `flush`: the sync happened before.
        self.flushed.load(Ordering::Acquire)
    }

    /// Bytes readers may see: committed with a write buffer, else wrote.
    pub fn read_position(&self) -> usize {
        self.region.committed()
    }

    /// Free bytes at the tail.
    pub fn remaining(&self) -> usize {
        // The wrote position never exceeds the size.
        self.file_size().saturating_sub(self.wrote_position())
    }

    /// True when nothing more can be appended (`isFull`).
    pub fn is_full(&self) -> bool {
        self.wrote_position() == self.file_size()
    }

    /// True when the segment is written with `pwrite` through its file and its
    /// mapping is only read ([`SegmentIo::writes_through_file`]).
    pub fn writes_without_mmap(&self) -> bool {
        self.region.io().writes_through_file()
    }

    /// True while a write buffer is attached.
    pub fn has_write_buffer(&self) -> bool {
        self.region.has_write_buffer()
    }

    /// Store timestamp of the last append (ms, as given to `append_with`).
    pub fn store_timestamp(&self) -> u64 {
        self.store_timestamp.load(Ordering::Acquire)
    }

    /// Sets the store timestamp, e.g. from the file's modification time on load.
    pub fn set_store_timestamp(&self, store_timestamp_ms: u64) {
        self.store_timestamp.store(store_timestamp_ms, Ordering::Release);
    }

    /// True once a sync has failed (here, or in a segment sharing the latch); the
    /// file refuses everything after that.
    pub fn is_latched(&self) -> bool {
        self.latch.is_set()
    }

    /// The latch this file records sync failures in and obeys.
    pub fn latch(&self) -> &Arc<FailureLatch> {
        &self.latch
    }

    /// Makes the file record its sync failures in `latch`, and obey failures
    /// recorded there by others: how a segment queue gives all its segments one
    /// latch. A failure this file recorded before is carried over.
    pub fn with_latch(mut self, latch: Arc<FailureLatch>) -> Self {
        if let Some(first) = self.latch.get() {
            latch.set((*first).clone());
        }
        self.latch = latch;
        self
    }

    /// True when this segment was made from a spare file in this process
    /// ([`create_from_recycled`](Self::create_from_recycled)): bytes of the file's
    /// earlier life may lie past the data, until a [`truncate`](Self::truncate)
    /// at the end erases them.
    pub fn is_from_spare(&self) -> bool {
        self.from_spare
    }

    /// True once [`destroy`](Self::destroy) ran.
    pub fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }

    /// Number of zero-copy views handed out by [`read`](Self::read) still alive.
    pub fn outstanding_views(&self) -> usize {
        self.region.views()
    }

    /// The absolute offset of file position `pos` (at most the file size).
    pub fn offset_at(&self, pos: usize) -> u64 {
        // `create` and `open` checked that the offset one past the end fits in a
        // `u64` (`check_offset_space`), so no position inside the file overflows.
        segment_end(self.file_from_offset, pos).expect("segment inside the offset space (checked at create/open)")
    }

    fn write_failed(&self, failed: WriteFailed) -> MappedFileError {
        tracing::error!(path = %self.path.display(), pos = failed.pos, len = failed.len, error = %failed.source, "segment write failed");
        MappedFileError::Write { path: self.path.clone(), pos: failed.pos, len: failed.len, source: failed.source }
    }

    fn check_usable(&self) -> Result<(), MappedFileError> {
        if let Some(first) = self.latch.get() {
            return Err(MappedFileError::Latched { path: self.path.clone(), first });
        }
        if self.is_destroyed() {
            return Err(MappedFileError::Destroyed { path: self.path.clone() });
        }
        Ok(())
    }

    /// Attaches a write buffer from the transient store pool; appends then go to it
    /// until [`commit`](Self::commit) copies them into the file. Refused unless the
    /// buffer is the file's size, no buffer is attached, everything appended is
    /// committed, and the file is not full. A refused buffer goes back to its pool.
    pub fn attach_write_buffer(&self, buffer: WriteBuffer) -> Result<(), MappedFileError> {
        self.check_usable()?;
        self.region.attach(buffer).map_err(|buffer| MappedFileError::WriteBufferRejected {
            path: self.path.clone(),
            buffer_size: buffer.len(),
            file_size: self.file_size(),
        })
    }

    /// Appends through `fill`, which gets the absolute offset of the free tail and
    /// the tail itself (`&mut [u8]` of all the remaining bytes), and reports what
    /// it wrote. `store_timestamp_ms` becomes the file's store timestamp on
    /// success. The same as [`append_sized`](Self::append_sized) with no bound:
    /// prefer that one when the most bytes an append writes are known, as a
    /// segment written without mmap stages the whole tail it hands out.
    pub fn append_with<T>(
        &self,
        store_timestamp_ms: u64,
        fill: impl FnOnce(u64, &mut [u8]) -> AppendStatus<T>,
    ) -> Result<Appended<T>, MappedFileError> {
        self.append_sized(store_timestamp_ms, usize::MAX, fill)
    }

    /// Appends through `fill`, which gets the absolute offset of the free tail and
    /// the tail cut to at most `max_len` bytes (shorter only when fewer remain),
    /// and reports what it wrote at the tail's start. The tail is in the write
    /// buffer if one is attached, in the mapping, or, for a segment written
    /// without mmap, a staging buffer written to the file with one `pwrite`. Its
    /// bytes are unspecified (zeros, or older bytes): write every byte claimed.
    /// `store_timestamp_ms` becomes the file's store timestamp on success.
    pub fn append_sized<T>(
        &self,
        store_timestamp_ms: u64,
        max_len: usize,
        fill: impl FnOnce(u64, &mut [u8]) -> AppendStatus<T>,
    ) -> Result<Appended<T>, MappedFileError> {
        self.check_usable()?;
        let result = self.region.append(max_len, |pos, tail| match fill(self.offset_at(pos), tail) {
            AppendStatus::Written { bytes, value } => Filled::Wrote { bytes, value },
            AppendStatus::DoesNotFit => Filled::DoesNotFit,
        });
        match result {
            Ok((pos, Filled::Wrote { bytes, value })) => {
                self.store_timestamp.store(store_timestamp_ms, Ordering::Release);
                Ok(Appended::Written { wrote_offset: self.offset_at(pos), bytes, value })
            }
            Ok((pos, Filled::DoesNotFit)) => {
                Ok(Appended::DoesNotFit { remaining: self.file_size().saturating_sub(pos) })
            }
            Err(AppendRefused::Overrun(claimed)) => Err(MappedFileError::AppendOverrun {
                path: self.path.clone(),
                claimed,
                remaining: self.remaining().min(max_len),
            }),
            Err(AppendRefused::Write(failed)) => Err(self.write_failed(failed)),
        }
    }

    /// Places `len` bytes at the end, or pads the segment's rest: the one append
    /// a log of records needs, with no closure protocol to speak. If `len` bytes
    /// fit with `reserve` bytes left after them (room a later pad needs),
    /// `write(offset, bytes)` fills exactly `len` bytes at absolute `offset`;
    /// otherwise `pad(offset, rest)` fills every remaining byte, which closes the
    /// segment, and nothing of the record is written (a full segment pads
    /// nothing). The bytes handed out are unspecified (zeros, or older bytes):
    /// both closures must write every one. On the default path (written without
    /// mmap) they go to the file with one `pwrite` from a staging buffer of at
    /// most `len + reserve` bytes.
    pub fn place(
        &self,
        store_timestamp_ms: u64,
        len: usize,
        reserve: usize,
        write: impl FnOnce(u64, &mut [u8]),
        pad: impl FnOnce(u64, &mut [u8]),
    ) -> Result<Placed, MappedFileError> {
        let need = len.saturating_add(reserve);
        let appended = self.append_sized(store_timestamp_ms, need, |offset, tail| {
            if need <= tail.len() {
                write(offset, &mut tail[..len]);
                AppendStatus::Written { bytes: len, value: true }
            } else {
                pad(offset, tail);
                AppendStatus::Written { bytes: tail.len(), value: false }
            }
        })?;
        Ok(match appended {
            Appended::Written { wrote_offset, value: true, .. } => Placed::Appended { offset: wrote_offset },
            _ => Placed::Padded,
        })
    }

    /// Appends `data` as is, if it fits.
    pub fn append_bytes(&self, store_timestamp_ms: u64, data: &[u8]) -> Result<Appended<()>, MappedFileError> {
        // Sized: on the path written without mmap the tail handed out is staged
        // in a buffer, so handing out the whole rest of a large segment for a
        // small append would copy it every time.
        self.append_sized(store_timestamp_ms, data.len(), |_, tail| {
            if data.len() > tail.len() {
                return AppendStatus::DoesNotFit;
            }
            tail[..data.len()].copy_from_slice(data);
            AppendStatus::Written { bytes: data.len(), value: () }
        })
    }

    /// Copies write-buffer bytes `[committed, wrote)` into the file when at least
    /// `least_pages` pages are pending (0: any byte; a full file always qualifies),
    /// and gives the buffer back to its pool once the file is full and committed.
    /// Without a write buffer there is nothing to do: appends are already visible.
    pub fn commit(&self, least_pages: usize) -> Result<Progress, MappedFileError> {
        self.check_usable()?;
        let (committed, wrote) = (self.region.committed(), self.region.wrote());
        if !self.region.has_write_buffer() || !is_due(committed, wrote, self.file_size(), least_pages) {
            return Ok(Progress { from: committed, to: committed });
        }
        let (from, to) = self.region.commit().map_err(|failed| self.write_failed(failed))?;
        Ok(Progress { from, to })
    }

    /// Makes `[flushed, read position)` durable when at least `least_pages` pages
    /// are pending (0: any byte; a full file always qualifies). A failed sync
    /// latches the file: flushed stays where it was, and this and every later call
    /// fails.
    pub fn flush(&self, least_pages: usize) -> Result<Progress, MappedFileError> {
        self.check_usable()?;
        let _flush = self.flush_lock.lock();
        // Re-check under the lock: a concurrent flush may have latched meanwhile.
        self.check_usable()?;
        let from = self.flushed.load(Ordering::Relaxed); // only moved under flush_lock
        let target = self.read_position();
        if !is_due(from, target, self.file_size(), least_pages) {
            return Ok(Progress { from, to: from });
        }
        #[cfg(planted_bugs)]
        if let Some(progress) = self.planted_flush(from, target)? {
            return Ok(progress);
        }
        self.sync_or_latch(from, target)?;
        // Release: whoever sees the new flushed position also sees the sync done.
        self.flushed.store(target, Ordering::Release);
        Ok(Progress { from, to: target })
    }

    /// Syncs `[0, read position)` whatever `flushed` says, then sets `flushed` to
    /// the read position. For recovery: bytes found after a restart may still be
    /// only in the page cache, and a later flush starting above them would leave
    /// them exposed to a power cut. Latches on failure like [`flush`](Self::flush).
    pub fn force(&self) -> Result<Progress, MappedFileError> {
        self.check_usable()?;
        let _flush = self.flush_lock.lock();
        let target = self.read_position();
        if target > 0 {
            self.sync_or_latch(0, target)?;
        }
        self.flushed.store(target, Ordering::Release);
        Ok(Progress { from: 0, to: target })
    }

    /// The planted flush bugs: claim durability without syncing, or retry a failed
    /// sync and believe the retry. `None` when no flush bug is switched on.
    #[cfg(planted_bugs)]
    fn planted_flush(&self, from: usize, target: usize) -> Result<Option<Progress>, MappedFileError> {
        use planted::{is_active, Bug};
        if is_active(Bug::AckBeforeSync) {
            self.flushed.store(target, Ordering::Release);
            return Ok(Some(Progress { from, to: target }));
        }
        if is_active(Bug::RetryAfterFailedSync) {
            let memory = self.region.memory();
            if self.region.io().sync_range(memory, from, target - from).is_err() {
                self.sync_or_latch(from, target)?;
            }
            self.flushed.store(target, Ordering::Release);
            return Ok(Some(Progress { from, to: target }));
        }
        Ok(None)
    }

    fn sync_or_latch(&self, from: usize, to: usize) -> Result<(), MappedFileError> {
        debug_assert!(from <= to, "sync range [{from}, {to}) runs backwards");
        self.region.io().sync_range(self.region.memory(), from, to.saturating_sub(from)).map_err(|source| {
            tracing::error!(path = %self.path.display(), from, to, error = %source, "sync failed; segment latched");
            let failure = SyncFailure {
                path: self.path.clone(),
                from: self.offset_at(from),
                to: self.offset_at(to),
                source: Arc::new(source),
            };
            // Whatever was recorded first stays the latch's cause; this caller
            // still learns about its own failure.
            self.latch.set(failure.clone());
            MappedFileError::SyncFailed(Arc::new(failure))
        })
    }

    /// A zero-copy view of `[pos, pos + len)` (file-relative), which must lie below
    /// the read position. The view keeps the mapping alive while held, and while
    /// any view is held positions cannot be reset below it.
    pub fn read(&self, pos: usize, len: usize) -> Result<Bytes, MappedFileError> {
        match self.region.view(pos, len) {
            Some(view) => Ok(Bytes::from_owner(view)),
            None => Err(MappedFileError::OutOfRange {
                path: self.path.clone(),
                file_from_offset: self.file_from_offset,
                pos,
                len,
                read_position: self.read_position(),
            }),
        }
    }

    /// Whether the bytes `[pos, pos + len)` (file-relative) are in memory now,
    /// so reading them takes no disk I/O (RocketMQ's `MappedFile.isLoaded`,
    /// by `mincore`). False for a range past the file, or if the kernel
    /// cannot say: the answer is advice, never a reason to fail a read.
    pub fn is_resident(&self, pos: usize, len: usize) -> bool {
        self.region.memory().is_resident(pos, len).unwrap_or(false)
    }

    /// Everything from `pos` to the read position (RocketMQ's `selectMappedBuffer(pos)`).
    pub fn read_from(&self, pos: usize) -> Result<Bytes, MappedFileError> {
        let end = self.read_position();
        let len = end.checked_sub(pos).ok_or_else(|| MappedFileError::OutOfRange {
            path: self.path.clone(),
            file_from_offset: self.file_from_offset,
            pos,
            len: 0,
            read_position: end,
        })?;
        self.read(pos, len)
    }

    /// Sets wrote and committed to `pos` (marking a loaded file full, say), and
    /// lowers flushed to `pos` if it was above. Flushed is never raised here: bytes
    /// do not become durable because a position says so (use [`force`](Self::force)).
    /// Bytes above `pos` stay in the file; to cut them off, use
    /// [`truncate`](Self::truncate). Refused while views of bytes at or above `pos`
    /// exist.
    pub fn set_positions(&self, pos: usize) -> Result<(), MappedFileError> {
        let _flush = self.flush_lock.lock();
        self.reset(pos, false)?;
        self.flushed.fetch_min(pos, Ordering::AcqRel);
        Ok(())
    }

    /// Cuts the file at `pos` for good (recovery, or dropping a suffix): positions
    /// move to `pos` as with [`set_positions`](Self::set_positions), every non-zero
    /// byte at and above `pos` is overwritten with zeros, and the zeros are synced
    /// before this returns. Without the erase, bytes past the cut would stay valid at
    /// their own offsets: once new appends end exactly where an old record starts, a
    /// later scan would read the old records again after the new ones. Returns the
    /// number of bytes erased (from `pos` to the last non-zero byte). A failed sync
    /// latches the file. Refused while views of bytes at or above `pos` exist.
    pub fn truncate(&self, pos: usize) -> Result<usize, MappedFileError> {
        self.check_usable()?;
        let _flush = self.flush_lock.lock();
        #[cfg(planted_bugs)]
        if planted::is_active(planted::Bug::TruncateLeavesTail) {
            self.reset(pos, false)?;
            self.flushed.fetch_min(pos, Ordering::AcqRel);
            return Ok(0);
        }
        let erased = self.reset(pos, true)?;
        self.flushed.fetch_min(pos, Ordering::AcqRel);
        // Sync the whole tail, not only what was erased: zeros written by an earlier
        // truncation that was interrupted before its sync would otherwise hide
        // older bytes that a power cut could bring back.
        if pos < self.file_size() {
            self.sync_or_latch(pos, self.file_size())?;
        }
        Ok(erased)
    }

    fn reset(&self, pos: usize, erase: bool) -> Result<usize, MappedFileError> {
        self.region.reset(pos, erase).map_err(|refused| match refused {
            ResetRefused::ViewsOutstanding(views) => {
                MappedFileError::ViewsOutstanding { path: self.path.clone(), views }
            }
            ResetRefused::OutOfBounds => {
                MappedFileError::BadPosition { path: self.path.clone(), pos, file_size: self.file_size() }
            }
            ResetRefused::Write(failed) => self.write_failed(failed),
        })
    }

    /// Warms the file up before use: writes zeros over every page (through the
    /// mapping or the file, as the segment is written: so appends take no page
    /// faults and the filesystem converts its preallocated extents now, not during
    /// a latency-critical sync), syncs them, advises the kernel, and pins the pages
    /// if `lock`. Only on a file nothing was appended to; returns false otherwise.
    pub fn warm_up(&self, lock: bool) -> Result<bool, MappedFileError> {
        self.check_usable()?;
        if !self.region.zero_fill(0, self.file_size()).map_err(|failed| self.write_failed(failed))? {
            return Ok(false);
        }
        let _flush = self.flush_lock.lock();
        self.sync_or_latch(0, self.file_size())?;
        if let Err(err) = self.region.io().advise_and_lock(self.region.memory(), lock) {
            tracing::warn!(path = %self.path.display(), %err, "madvise/mlock failed during warm-up");
        }
        Ok(true)
    }

    /// Prepares `[pos, pos + len)` of a segment nothing was appended to: writes
    /// zeros there (through the mapping or the file, as the segment is written)
    /// and syncs the file, so the file system has converted those blocks from
    /// unwritten to written before any record's sync covers them. A step of the
    /// paced preparation of a new segment (the warm-up of
    /// [`warm_up`](Self::warm_up), cut into pieces). Returns false, writing
    /// nothing, once something has been appended or when the range does not lie
    /// inside the segment. A failed sync latches the segment, as any sync does:
    /// the caller deletes it.
    pub fn prepare_range(&self, pos: usize, len: usize) -> Result<bool, MappedFileError> {
        self.check_usable()?;
        if !self.region.zero_fill(pos, len).map_err(|failed| self.write_failed(failed))? {
            return Ok(false);
        }
        let _flush = self.flush_lock.lock();
        // `pos + len` lies inside the segment: `zero_fill` checked it.
        self.sync_or_latch(pos, pos.saturating_add(len))?;
        Ok(true)
    }

    /// Faults the segment's pages into this process's page tables for reading
    /// (`MADV_POPULATE_READ`; where the kernel lacks it, the `MADV_WILLNEED`
    /// hint), so reads of it take no page fault. Best effort: an error only
    /// means the pages fault in later, when first read.
    pub fn populate(&self) -> std::io::Result<()> {
        self.check_usable().map_err(std::io::Error::other)?;
        self.region.memory().populate()
    }

    /// Hands the file on for reuse instead of deleting it: moves it to `to` (durably)
    /// for [`create_from_recycled`](Self::create_from_recycled), and marks this
    /// segment unusable, as [`destroy`](Self::destroy) does. Only with no zero-copy
    /// view outstanding: the next segment made from the file writes its bytes, and
    /// a view's bytes must never change. Returns `Ok(false)`, changing nothing,
    /// while views exist or once the file is destroyed (delete it then); a failed
    /// move leaves the segment as it was.
    pub fn recycle(&self, to: &Path) -> Result<bool, MappedFileError> {
        if self.region.retire().is_err() {
            return Ok(false);
        }
        if self.destroyed.swap(true, Ordering::AcqRel) {
            self.region.unretire();
            return Ok(false);
        }
        if let Err(source) = self.region.io().rename(to) {
            self.destroyed.store(false, Ordering::Release);
            self.region.unretire();
            return Err(MappedFileError::Recycle { path: self.path.clone(), to: to.to_path_buf(), source });
        }
        Ok(true)
    }

    /// Marks the file unusable and deletes it (durably: the directory is synced).
    /// Views already handed out stay valid (the mapping lives until the last one
    /// drops). If the deletion fails the file stays usable and the error is
    /// returned, so a caller can keep it in its list.
    pub fn destroy(&self) -> Result<(), MappedFileError> {
        if self.destroyed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.region.io().remove().map_err(|source| {
            self.destroyed.store(false, Ordering::Release);
            MappedFileError::Remove { path: self.path.clone(), source }
        })
    }
}

/// The segment tests, over segments written through their mapping.
#[cfg(all(test, not(loom)))]
#[allow(clippy::arithmetic_side_effects, clippy::cast_possible_truncation, clippy::cast_sign_loss)]
mod tests_mmap {
    const WRITE_WITHOUT_MMAP: bool = false;
    include!("tests.rs");
}

/// The same tests over segments written with `pwrite` (write without mmap).
#[cfg(all(test, not(loom)))]
#[allow(clippy::arithmetic_side_effects, clippy::cast_possible_truncation, clippy::cast_sign_loss)]
mod tests_pwrite {
    const WRITE_WITHOUT_MMAP: bool = true;
    include!("tests.rs");

    #[test]
    fn a_failed_write_publishes_nothing_and_the_next_append_writes_again() {
        let (storage, file) = sim_file(SIZE);
        put(&file, b"kept");
        storage.fail_writes(true);
        let err = file.append_bytes(1, b"lost").unwrap_err();
        assert!(matches!(err, MappedFileError::Write { pos: 4, len: 4, .. }), "{err}");
        assert_eq!((file.wrote_position(), file.read_position()), (4, 4), "nothing published");
        assert!(!file.is_latched(), "a failed write is not a failed sync: nothing was acknowledged");
        storage.fail_writes(false);
        assert_eq!(put(&file, b"next"), 4, "written again where the failed one would have gone");
        file.flush(0).unwrap();
        assert_eq!(&file.read(0, 8).unwrap()[..], b"keptnext");
        storage.crash_losing_unsynced();
        let reopened = MappedFile::open(&storage, file.path(), SIZE).unwrap();
        reopened.set_positions(8).unwrap();
        assert_eq!(&reopened.read(0, 8).unwrap()[..], b"keptnext");
    }

    #[test]
    fn a_failed_commit_of_a_write_buffer_keeps_the_bytes_for_the_next_commit() {
        let (storage, file) = sim_file(SIZE);
        let pool = pool(SIZE, 1);
        file.attach_write_buffer(pool.try_borrow().unwrap()).unwrap();
        put(&file, b"buffered");
        storage.fail_writes(true);
        assert!(matches!(file.commit(0), Err(MappedFileError::Write { .. })));
        assert_eq!(file.committed_position(), 0);
        storage.fail_writes(false);
        assert_eq!(file.commit(0).unwrap().to, 8);
        assert_eq!(&file.read(0, 8).unwrap()[..], b"buffered");
    }
}

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
