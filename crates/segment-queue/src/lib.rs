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

#![forbid(unsafe_code)]
// Offsets: no silent wrap-around, no truncating casts.
#![warn(clippy::arithmetic_side_effects, clippy::cast_possible_truncation, clippy::cast_sign_loss)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use mapped_file::{parse_file_name, Bytes, FailureLatch, MappedFile, MappedFileError, Storage, SyncFailure};
use parking_lot::{Mutex, RwLock};
use transient_pool::{PoolError, TransientStorePool};

mod allocate;
mod error;
mod recycle;
mod space;

pub use error::QueueError;
pub use layout::{check_layout, ListedSegment};
pub use recycle::RECYCLE_DIR;

use allocate::{Allocator, Taken};
use recycle::Spares;

mod layout;

/// One directory a queue keeps segments in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentDir {
    /// The directory.
    pub path: PathBuf,
    /// Its segments are loaded, read, flushed and deleted, but no new segment is
    /// created in it (RocketMQ's `readOnlyCommitLogStorePaths`): a disk being
    /// retired, or one kept for reading only.
    pub read_only: bool,
}

impl SegmentDir {
    /// A directory new segments may be created in.
    pub fn writable(path: impl Into<PathBuf>) -> Self {
        SegmentDir { path: path.into(), read_only: false }
    }

    /// A directory whose segments are kept, but where no new one is created.
    pub fn read_only(path: impl Into<PathBuf>) -> Self {
        SegmentDir { path: path.into(), read_only: true }
    }
}

/// What to do when a new segment needs a write buffer and the pool is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PoolExhaustedPolicy {
    /// Append straight into the mapping for this segment (RocketMQ's silent
    /// fallback, but logged).
    #[default]
    UseMapping,
    /// Fail the roll-over with [`QueueError::PoolExhausted`] (RocketMQ's
    /// "system busy" rejection).
    Fail,
}

/// Configuration of a [`SegmentQueue`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    /// Size of every segment (`mappedFileSizeCommitLog`, RocketMQ default 1 GiB).
    pub mapped_file_size: usize,
    /// Prepare the next segment in a background thread (`AllocateMappedFileService`).
    pub preallocate_next_segment: bool,
    /// Zero-fill and sync new segments before use (`warmMapedFileEnable`, default false).
    pub warm_mapped_file_enable: bool,
    /// Pin warmed segments in RAM with `mlock`.
    pub lock_warmed_mapped_file: bool,
    /// What to do when the write-buffer pool is empty.
    pub pool_exhausted_policy: PoolExhaustedPolicy,
    /// How long a roll-over waits for the next segment while the preallocation
    /// thread is still making it (RocketMQ waits 5 s), in ms. Past that the roll
    /// fails with [`QueueError::PreallocationTimedOut`]; a later one takes the
    /// segment once it is ready.
    pub preallocation_wait_ms: u64,
    /// How many expired segments to keep as spares for reuse instead of deleting
    /// them (0, the default, as RocketMQ: delete). A segment made from a spare
    /// has its blocks written already, so its syncs are those of written blocks;
    /// see [`RECYCLE_DIR`]. Spares count against the disk like segments.
    pub recycle_segments: usize,
    /// A new segment (not one made from a spare, which takes no new space) is
    /// created only while the file system's used share, counting the new
    /// segment, stays below this percent: in the directory the placement rule
    /// names, or else in another writable directory that has room; if none has,
    /// the roll fails with [`QueueError::DiskFull`] and nothing is created,
    /// before the file system runs out of space. Looked at with one `statvfs` per new segment, by the
    /// roll-over and by the preallocation thread. `None` (the default): no
    /// look. A storage that cannot tell its disk space never refuses.
    pub disk_space_limit_percent: Option<u32>,
}

impl QueueConfig {
    /// RocketMQ's commit-log segment size, 1 GiB.
    pub const DEFAULT_MAPPED_FILE_SIZE: usize = 1 << 30;

    /// Defaults with the given segment size: preallocation on, warm-up off.
    pub fn new(mapped_file_size: usize) -> Self {
        QueueConfig {
            mapped_file_size,
            preallocate_next_segment: true,
            warm_mapped_file_enable: false,
            lock_warmed_mapped_file: false,
            pool_exhausted_policy: PoolExhaustedPolicy::UseMapping,
            preallocation_wait_ms: 5000,
            recycle_segments: 0,
            disk_space_limit_percent: None,
        }
    }
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self::new(Self::DEFAULT_MAPPED_FILE_SIZE)
    }
}

/// Absolute progress of a queue-wide flush or commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueProgress {
    /// Where the position was before.
    pub from: u64,
    /// Where it is now.
    pub to: u64,
}

impl QueueProgress {
    /// Bytes the position moved.
    pub fn moved(&self) -> u64 {
        // `to >= from`: positions only move forward in a flush or commit.
        self.to.saturating_sub(self.from)
    }
}

/// What loading found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Segments loaded.
    pub segments: usize,
    /// A zero-length last file that was deleted (RocketMQ
    /// [#6904](https://github.com/apache/rocketmq/issues/6904)), if any.
    pub removed_empty_tail: Option<PathBuf>,
}

/// What a truncation did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TruncateReport {
    /// Bytes erased from the segment that now ends at the truncation offset: from
    /// the offset to the last non-zero byte after it.
    pub bytes_dropped_in_place: u64,
    /// Segments deleted because they lay wholly above the offset.
    pub segments_deleted: usize,
}

/// Called with the queue's new front (the start of the first segment that stays)
/// before segments are deleted from the front; an error stops the deletion.
/// See [`SegmentQueue::set_front_guard`].
pub type FrontGuard = Box<dyn Fn(u64) -> Result<(), Box<dyn std::error::Error + Send + Sync>> + Send + Sync>;

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
    allocator: Mutex<Option<Allocator>>,
    /// Told the new front before segments leave it (see [`set_front_guard`](Self::set_front_guard)).
    front_guard: RwLock<Option<FrontGuard>>,
    roll_lock: Mutex<()>,
    flush_lock: Mutex<()>,
    commit_lock: Mutex<()>,
    load_report: LoadReport,
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

/// The directories of one queue: some, disjoint, at least one writable.
fn check_dirs(dirs: &[SegmentDir]) -> Result<(), QueueError> {
    let invalid = |reason: String| Err(QueueError::InvalidConfig { reason });
    if !dirs.iter().any(|d| !d.read_only) {
        return invalid(format!("no writable segment directory among {} given", dirs.len()));
    }
    for (i, first) in dirs.iter().enumerate() {
        let later = dirs.iter().skip(i.saturating_add(1));
        if let Some(second) =
            later.into_iter().find(|d| d.path.starts_with(&first.path) || first.path.starts_with(&d.path))
        {
            return invalid(format!(
                "segment directories {} and {} overlap: each must be outside the others",
                first.path.display(),
                second.path.display()
            ));
        }
    }
    Ok(())
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
    /// storage's lock, not a segment, and is left alone. Loaded segments are marked full; recovery then truncates with
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

    /// As [`load`](Self::load), over several directories (RocketMQ's
    /// `MultiPathMappedFileQueue`, for a log spread over disks). The segments of
    /// all of them form one sequence: names stay global start offsets, the layout
    /// rules hold for the union (two directories holding the same offset are
    /// [`QueueError::Duplicate`]), and a segment may live in any directory.
    ///
    /// **Placement:** the segment starting at offset `o` is created in directory
    /// `(o / mapped_file_size) % n` of the candidates, in the order given: the
    /// writable directories not [marked full](Self::set_dir_full), or every
    /// writable directory when all are full. So consecutive segments alternate
    /// between disks, and a full or read-only disk gets none. Spares stay in the
    /// directory they were kept in.
    ///
    /// The directories must be disjoint (none inside another) and at least one
    /// must be writable ([`QueueError::InvalidConfig`] otherwise).
    pub fn load_dirs(
        storage: Arc<dyn Storage>,
        dirs: Vec<SegmentDir>,
        config: QueueConfig,
        pool: Option<TransientStorePool>,
    ) -> Result<Self, QueueError> {
        let size = config.mapped_file_size;
        if size == 0 || !size.is_multiple_of(mapped_file::OS_PAGE_SIZE) {
            return Err(QueueError::InvalidConfig {
                reason: format!("mapped_file_size {size} must be a positive multiple of 4096"),
            });
        }
        if let Some(pool) = &pool {
            if pool.buffer_size_bytes() != size {
                return Err(QueueError::InvalidConfig {
                    reason: format!("write buffers have {} bytes but segments have {size}", pool.buffer_size_bytes()),
                });
            }
        }
        check_dirs(&dirs)?;
        let mut entries = Vec::new();
        for dir in &dirs {
            let dir = &dir.path;
            let dir_err = |source| QueueError::Dir { path: dir.clone(), source };
            storage.create_dir_all(dir).map_err(dir_err)?;
            for entry in storage.list(dir).map_err(dir_err)? {
                if entry.name == mapped_file::LOCK_FILE {
                    continue; // the storage's own lock, when the segments sit in its root
                }
                let path = dir.join(&entry.name);
                let start_offset =
                    parse_file_name(&entry.name).ok_or_else(|| QueueError::MalformedName { path: path.clone() })?;
                entries.push((ListedSegment { start_offset, path, len: entry.len }, entry.modified_ms));
            }
        }
        // Stable: of two files with one offset, the first directory's comes first.
        entries.sort_by_key(|(listed, _)| listed.start_offset);

        let mut report = LoadReport::default();
        if entries.last().is_some_and(|(listed, _)| listed.len == 0) {
            let (listed, _) = entries.pop().expect("checked non-empty");
            tracing::warn!(path = %listed.path.display(), "deleting zero-length last segment");
            storage.remove(&listed.path).map_err(|source| QueueError::Dir { path: listed.path.clone(), source })?;
            report.removed_empty_tail = Some(listed.path);
        }
        let listed: Vec<ListedSegment> = entries.iter().map(|(listed, _)| listed.clone()).collect();
        if let Some(problem) = check_layout(&listed, size as u64).into_iter().next() {
            return Err(problem);
        }
        let latch = FailureLatch::new();
        let mut files = Vec::with_capacity(entries.len());
        for (listed, modified_ms) in entries {
            let file = MappedFile::open(&*storage, &listed.path, size)?.with_latch(Arc::clone(&latch));
            file.set_positions(size)?;
            file.set_store_timestamp(modified_ms);
            files.push(Arc::new(file));
        }
        report.segments = files.len();
        let end = files.last().map_or(0, |f| f.file_end());
        tracing::info!(dirs = dirs.len(), dir = %dirs[0].path.display(), segments = files.len(), end, "segment queue loaded");
        let writable = dirs.iter().filter(|d| !d.read_only).map(|d| d.path.clone()).collect();
        let spares = Arc::new(Spares::new(Arc::clone(&storage), writable, config.recycle_segments, size));
        let trimmed = spares.trim();
        if trimmed > 0 {
            tracing::info!(
                trimmed,
                keep = config.recycle_segments,
                "spare segment files beyond recycle_segments deleted"
            );
        }
        let allocator = if config.preallocate_next_segment {
            let warm = config.warm_mapped_file_enable.then_some(config.lock_warmed_mapped_file);
            let wait = std::time::Duration::from_millis(config.preallocation_wait_ms);
            let spares = Arc::clone(&spares);
            Some(
                Allocator::start(Arc::clone(&storage), size, warm, wait, spares, config.disk_space_limit_percent)
                    .map_err(|source| QueueError::Dir { path: dirs[0].path.clone(), source })?,
            )
        } else {
            None
        };
        Ok(SegmentQueue {
            full: dirs.iter().map(|_| AtomicBool::new(false)).collect(),
            dirs,
            config,
            storage,
            files: RwLock::new(files),
            latch,
            flushed_where: AtomicU64::new(end),
            committed_where: AtomicU64::new(end),
            store_timestamp: AtomicU64::new(0),
            pool,
            spares,
            deleted_mapped: Mutex::new(Vec::new()),
            allocator: Mutex::new(allocator),
            front_guard: RwLock::new(None),
            roll_lock: Mutex::new(()),
            flush_lock: Mutex::new(()),
            commit_lock: Mutex::new(()),
            load_report: report,
        })
    }

    /// The directory: the first of [`dirs`](Self::dirs).
    pub fn dir(&self) -> &Path {
        &self.dirs[0].path
    }

    /// Every directory of the queue, in the order given.
    pub fn dirs(&self) -> &[SegmentDir] {
        &self.dirs
    }

    /// Marks `dir` too full (or no longer too full) to take new segments; see
    /// [`load_dirs`](Self::load_dirs) for the placement rule. Segments already
    /// in it are appended to, read and deleted as before (they are preallocated:
    /// appending needs no space). False if `dir` is not one of the queue's.
    pub fn set_dir_full(&self, dir: &Path, full: bool) -> bool {
        match self.dirs.iter().position(|d| d.path == dir) {
            Some(index) => {
                self.full[index].store(full, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// The directory the segment starting at `offset` is created in (the rule in
    /// [`load_dirs`](Self::load_dirs)).
    pub fn dir_for(&self, offset: u64) -> &Path {
        let writable = || self.dirs.iter().zip(&self.full).filter(|(d, _)| !d.read_only);
        let mut candidates: Vec<&SegmentDir> =
            writable().filter(|(_, full)| !full.load(Ordering::Relaxed)).map(|(d, _)| d).collect();
        if candidates.is_empty() {
            candidates = writable().map(|(d, _)| d).collect(); // at least one: checked at load
        }
        let len = u64::try_from(candidates.len()).ok().and_then(std::num::NonZeroU64::new);
        let index = len.map_or(0, |n| (offset / size_u64(self.config.mapped_file_size)) % n);
        let index = usize::try_from(index).unwrap_or(0); // below the candidate count
        candidates.get(index).map_or(&self.dirs[0].path, |d| &d.path)
    }

    /// The writable directories in the order a new segment at `offset` tries
    /// them: [`dir_for`](Self::dir_for)'s first, then the other writable
    /// directories not marked full, then those marked full, each in the order
    /// given.
    fn placement_order(&self, offset: u64) -> Vec<&Path> {
        let first = self.dir_for(offset);
        let writable = || self.dirs.iter().zip(&self.full).filter(|(d, _)| !d.read_only);
        let not_full = writable().filter(|(_, f)| !f.load(Ordering::Relaxed)).map(|(d, _)| d.path.as_path());
        let full = writable().filter(|(_, f)| f.load(Ordering::Relaxed)).map(|(d, _)| d.path.as_path());
        let mut order = vec![first];
        for dir in not_full.chain(full) {
            if !order.contains(&dir) {
                order.push(dir);
            }
        }
        order
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
                self.create_in_place(offset, size)?
            }
            Taken::NotRequested => self.create_in_place(offset, size)?,
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

    /// The segment holding `offset` (RocketMQ's `findMappedFileByOffset`): computed by arithmetic,
    /// verified, with a linear scan as fallback
    /// ([ROCKETMQ-332](https://issues.apache.org/jira/browse/ROCKETMQ-332)). With
    /// `return_first_on_not_found`, an offset out of range yields the first segment.
    pub fn find_mapped_file_by_offset(&self, offset: u64, return_first_on_not_found: bool) -> Option<Arc<MappedFile>> {
        let files = self.files.read();
        let first = files.first()?;
        let last = files.last()?;
        let size = size_u64(self.config.mapped_file_size);
        if offset < first.file_from_offset() || offset >= last.file_end() {
            return return_first_on_not_found.then(|| Arc::clone(first));
        }
        // In range, so `offset >= first`: the quotient difference does not underflow.
        let index =
            usize::try_from((offset / size).saturating_sub(first.file_from_offset() / size)).unwrap_or(usize::MAX);
        if let Some(file) = files.get(index).filter(|f| f.holds(offset)) {
            return Some(Arc::clone(file));
        }
        tracing::warn!(offset, index, "segment lookup by arithmetic missed; scanning");
        files.iter().find(|f| f.holds(offset)).cloned().or_else(|| return_first_on_not_found.then(|| Arc::clone(first)))
    }

    /// First stored offset (0 with no segments).
    pub fn min_offset(&self) -> u64 {
        self.files.read().first().map_or(0, |f| f.file_from_offset())
    }

    /// End of readable data. RocketMQ takes the last segment's start plus its read
    /// position, which overstates it right after a roll while the previous segment's
    /// write buffer is not yet committed. Here it is the end of the newest segment
    /// with any readable byte: commits run in segment order, and rolling to a segment
    /// without a buffer commits what came before first, so every segment before
    /// that one is fully readable.
    pub fn max_offset(&self) -> u64 {
        let files = self.files.read();
        for file in files.iter().rev() {
            let read = file.read_position();
            if read > 0 {
                return file.offset_at(read);
            }
        }
        files.first().map_or(0, |f| f.file_from_offset())
    }

    /// End of appended data (may be ahead of [`max_offset`](Self::max_offset) while
    /// a write buffer holds uncommitted bytes).
    pub fn max_wrote_position(&self) -> u64 {
        self.files.read().last().map_or(0, |f| f.offset_at(f.wrote_position()))
    }

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

    /// Drops everything at and above `offset` for good (RocketMQ's
    /// `truncateDirtyFiles`): later segments are deleted (newest first, each
    /// deletion made durable), the segment holding `offset` ends there with every
    /// byte after it erased and synced ([`MappedFile::truncate`]), and
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
        self.delete_from_front(max_batch, |f| {
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
        self.delete_from_front(max_batch, |f| f.file_end() <= offset.min(flushed))
    }

    /// Deletes the oldest segments, expired or not, until `bytes` of segment files
    /// in `dir` are deleted (a cleaning service freeing only the space it needs),
    /// at most `max_batch` of them. The rules of
    /// [`delete_expired_file_by_time`](Self::delete_expired_file_by_time) hold:
    /// from the front only, never the last segment, never one holding bytes not
    /// yet durable. Segments in other directories are deleted on the way when
    /// they are older, but free nothing in `dir`. Returns how many were deleted.
    pub fn delete_oldest_to_free(&self, dir: &Path, bytes: u64, max_batch: usize) -> Result<usize, QueueError> {
        let flushed = self.flushed_where();
        let mut freed = 0u64;
        self.delete_from_front(max_batch, |f| {
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

    fn delete_from_front(
        &self,
        max_batch: usize,
        mut expired: impl FnMut(&MappedFile) -> bool,
    ) -> Result<usize, QueueError> {
        let mut files = self.files.write();
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
        let planted = mapped_file::planted::is_active(mapped_file::planted::Bug::FrontAfterDeletion);
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

    /// Reads `[offset, offset + len)`, which must lie within one segment and below
    /// its read position.
    pub fn read(&self, offset: u64, len: usize) -> Result<Bytes, QueueError> {
        let file = self.find_mapped_file_by_offset(offset, false).ok_or(QueueError::OffsetOutOfRange {
            offset,
            min: self.min_offset(),
            max: self.max_offset(),
        })?;
        let pos = file.position_of(offset).expect("the file holds the offset");
        Ok(file.read(pos, len)?)
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
        self.shutdown();
        let _roll = self.roll_lock.lock();
        self.files.write().clear();
        self.storage.release();
    }
}

#[cfg(test)]
mod tests;
