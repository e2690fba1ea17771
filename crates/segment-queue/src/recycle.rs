//! Spare segment files: expired segments kept for reuse instead of deleted, as
//! PostgreSQL recycles WAL segments and okaywal its own.
//!
//! A new segment's file is preallocated (`fallocate`) but its blocks are unwritten:
//! every sync that first covers them also has the file system convert them, which
//! costs a durable batch about a third of its rate on ext4 (the repository's docs/benchmarks.md, the
//! two `pwrite` + `fdatasync` lines). A spare's blocks were written in its earlier
//! life, so a segment made from one syncs at the rate of written blocks. Its old
//! bytes are harmless: every record's CRC covers its own absolute offset, a spare
//! is never made the segment at the offset it last held (it is named by that
//! offset, and [`Spares::take`] skips it), new segments are created above every
//! earlier one, and only segments deleted from the front (never the cut-off tail
//! of a truncation) become spares.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use mapped_file::{file_name, MappedFile, Storage};
use parking_lot::Mutex;

use crate::QueueError;

/// The directory, inside each segment directory, that holds spare files. A
/// spare is only ever used in the directory it was kept in: moving a file to
/// another directory could cross file systems.
pub const RECYCLE_DIR: &str = "recycled";

/// The spare files of a queue's writable segment directories.
pub(crate) struct Spares {
    storage: Arc<dyn Storage>,
    /// The writable segment directories; each keeps its spares in `<dir>/recycled`.
    dirs: Vec<PathBuf>,
    keep: usize,
    /// False while the disk is short of space: expired segments are deleted.
    keeping: AtomicBool,
    size: usize,
    /// One taker or giver at a time: the roll-over and the preallocation thread.
    lock: Mutex<()>,
}

impl Spares {
    /// Spares in `<dir>/recycled` of each of `segment_dirs`, at most `keep` of
    /// them in all (0: none, every expired segment is deleted), each of `size`
    /// bytes.
    pub(crate) fn new(storage: Arc<dyn Storage>, segment_dirs: Vec<PathBuf>, keep: usize, size: usize) -> Self {
        Spares { storage, dirs: segment_dirs, keep, keeping: AtomicBool::new(true), size, lock: Mutex::new(()) }
    }

    /// Whether expired segments are kept as spares from now on (while the disk is
    /// short of space, they should not be).
    pub(crate) fn set_keeping(&self, keep: bool) {
        self.keeping.store(keep, Ordering::Relaxed);
    }

    fn spare_dir(segment_dir: &Path) -> PathBuf {
        segment_dir.join(RECYCLE_DIR)
    }

    /// The spare files of every directory (a directory not made yet has none).
    fn listed(&self) -> Vec<PathBuf> {
        let mut spares = Vec::new();
        for dir in self.dirs.iter().map(|d| Self::spare_dir(d)) {
            if let Ok(entries) = self.storage.list(&dir) {
                spares.extend(entries.into_iter().map(|e| dir.join(e.name)));
            }
        }
        spares
    }

    /// Deletes every spare file (durably); returns how many. Spares left by an
    /// earlier run that kept them go too, whatever `keep` says now.
    pub(crate) fn drop_all(&self) -> usize {
        self.drop_beyond(0)
    }

    /// Deletes spare files beyond the first `keep` (durably); returns how many.
    /// At load: spares kept by a run with a larger `recycle_segments` (or any,
    /// when it is 0 now) take disk space for nothing.
    pub(crate) fn trim(&self) -> usize {
        self.drop_beyond(self.keep)
    }

    fn drop_beyond(&self, keep: usize) -> usize {
        let _one = self.lock.lock();
        let mut dropped = 0usize;
        for path in self.listed().into_iter().skip(keep) {
            match self.storage.remove(&path) {
                Ok(()) => dropped = dropped.saturating_add(1), // at most the listing's length
                Err(err) => tracing::warn!(spare = %path.display(), %err, "could not delete a spare segment file"),
            }
        }
        if dropped > 0 {
            tracing::info!(dropped, "spare segment files deleted to free space");
        }
        dropped
    }

    /// Keeps `file` (an expired segment leaving the front of the queue) as a spare
    /// of its own directory if there is room, the directory is writable and no
    /// view of it is outstanding; true if kept. False means the caller deletes it.
    pub(crate) fn offer(&self, file: &MappedFile) -> Result<bool, QueueError> {
        if self.keep == 0 || file.file_size() != self.size || !self.keeping.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let Some(segment_dir) = file.path().parent().filter(|d| self.dirs.iter().any(|w| w == d)) else {
            return Ok(false); // a read-only directory: it never gets a new segment
        };
        let _one = self.lock.lock();
        let dir = Self::spare_dir(segment_dir);
        let dir_err = |source| QueueError::Dir { path: dir.clone(), source };
        self.storage.create_dir_all(&dir).map_err(dir_err)?;
        if self.listed().len() >= self.keep {
            return Ok(false);
        }
        // Named by the offset it last held: unique, since offsets are.
        let kept = file.recycle(&dir.join(file_name(file.file_from_offset())))?;
        if kept {
            tracing::info!(path = %file.path().display(), "expired segment kept as a spare");
        }
        Ok(kept)
    }

    /// The segment starting at `offset` in `segment_dir`, made from one of that
    /// directory's spares of the right size, if there is one. A spare that cannot
    /// be used is skipped (and stays where it is); `None` means: create a fresh file.
    pub(crate) fn take(&self, segment_dir: &Path, offset: u64) -> Option<MappedFile> {
        if self.keep == 0 {
            return None;
        }
        let _one = self.lock.lock();
        let dir = Self::spare_dir(segment_dir);
        let spares = self.storage.list(&dir).ok()?; // no directory yet: no spare
                                                    // Never a spare that last held this very offset: its old records would
                                                    // pass their CRCs here again (a store whose segments and checkpoint were
                                                    // deleted by hand starts at 0 again, beside spares named from 0 on).
        let usable = |s: &mapped_file::DirEntry| {
            s.len == self.size as u64 && mapped_file::parse_file_name(&s.name) != Some(offset)
        };
        for spare in spares.into_iter().filter(usable) {
            let path = dir.join(&spare.name);
            match MappedFile::create_from_recycled(&*self.storage, &path, segment_dir, offset, self.size) {
                Ok(file) => {
                    tracing::info!(spare = %path.display(), offset, "segment made from a spare");
                    return Some(file);
                }
                Err(err) => tracing::warn!(spare = %path.display(), %err, "spare segment file not usable"),
            }
        }
        None
    }
}
