//! The facade: open and recover, accessors, flush, retention, shut down. The
//! append path is in `append.rs`, the read path in `read.rs`, the store-directory
//! protocol in `store.rs`, the checkpoint in `checkpoint.rs`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flush_service::{
    AsyncFlush, FlushStats, FlushStrategy, FlushTarget, FlushedCallback, FlushedReport, ServiceThread, SyncFlush,
    SystemClock,
};
use mapped_file::{LockError, MmapStorage, Storage};
use parking_lot::{Mutex, RwLock};
use segment_queue::{PreparationStats, QueueConfig, SegmentQueue};
use transient_pool::{PoolConfig, TransientStorePool};

use crate::checkpoint::{self, CheckpointState};
use crate::clean::{self, CleanStats, Cleaner, DiskGuard};
use crate::config::{CommitLogConfig, FlushDiskType};
use crate::error::io_err;
use crate::queue_target::QueueTarget;
use crate::recovery::{recover, RecoveryReport};
use crate::store;
use crate::Error;

pub(crate) struct Inner {
    dir: PathBuf,
    pub(crate) config: CommitLogConfig,
    storage: Arc<dyn Storage>,
    pub(crate) queue: Arc<SegmentQueue>,
    pub(crate) strategy: Box<dyn FlushStrategy>,
    pub(crate) put_lock: Mutex<()>,
    /// Concurrent appends that share writes (`append_write_groups`): each
    /// waiting producer's body, answered with its append's result.
    pub(crate) groups: flush_service::WriteGroups<Vec<u8>, crate::AppendResult>,
    checkpoint: Arc<CheckpointState>,
    checkpoint_thread: Mutex<Option<ServiceThread>>,
    pub(crate) disk: Arc<DiskGuard>,
    cleaner: Arc<Cleaner>,
    disk_thread: Mutex<Option<ServiceThread>>,
    pub(crate) shut_down: AtomicBool,
    recovery: RecoveryReport,
    listeners: Arc<Listeners>,
    /// Told of commits of the write-buffer pool ([`CommitLog::on_committed`]).
    committed_listeners: Arc<Listeners>,
    /// Wakes the tails ([`CommitLog::tail`]).
    pub(crate) tails: Arc<crate::signal::TailSignal>,
}

/// Called with the flushed offset after each flush that moved it (see
/// [`CommitLog::on_flushed`]).
pub type FlushListener = Arc<dyn Fn(u64) + Send + Sync>;

/// The registered [`FlushListener`]s (of flushes, or of commits).
#[derive(Default)]
pub(crate) struct Listeners(RwLock<Vec<FlushListener>>);

impl std::fmt::Debug for Listeners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listeners").field("registered", &self.0.read().len()).finish()
    }
}

impl Listeners {
    pub(crate) fn notify(&self, offset: u64) {
        for listener in self.0.read().iter() {
            listener(offset);
        }
    }
}

/// A commit log in a directory: segments in `<dir>/commitlog/`, plus `checkpoint`,
/// `abort` and `lock` files in `<dir>` (`store.rs` says what each means).
///
/// Cheap to clone; clones share the log. `Send + Sync`: append and read from many
/// threads at once.
///
/// **Drop:** when the last clone is dropped without [`shutdown`](Self::shutdown),
/// the log shuts down then (flush, checkpoint, abort marker removed) and logs any
/// error through `tracing`. Call `shutdown` to see the error.
#[derive(Clone)]
pub struct CommitLog {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for CommitLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitLog")
            .field("dir", &self.inner.dir)
            .field("min_offset", &self.min_offset())
            .field("max_offset", &self.max_offset())
            .field("flushed_offset", &self.flushed_offset())
            .finish()
    }
}

impl CommitLog {
    /// Opens the log in `dir`, creating it if needed and recovering it otherwise:
    /// normal recovery after a clean shutdown, abnormal recovery when the abort
    /// marker shows the last process died. See [`recovery_report`](Self::recovery_report).
    ///
    /// The directory is locked ([`MmapStorage::lock`]) until the log is shut down
    /// and the last record view ([`Record::body`](crate::Record)) is dropped: a
    /// second open, in this process or another, fails with [`Error::Locked`].
    ///
    /// Segment directories outside `dir` (`store_path_commit_log`) are locked
    /// the same way, each with its own `lock` file.
    ///
    /// An existing store keeps the size of its segments: a configured
    /// `mapped_file_size_commit_log` that differs is replaced by it (see
    /// [`config`](Self::config)); the setting shapes new stores.
    pub fn open(dir: impl AsRef<Path>, config: CommitLogConfig) -> Result<CommitLog, Error> {
        config.validate()?;
        let dir = dir.as_ref();
        let configured = store::configured_dirs(dir, &config);
        let mut roots = vec![dir.to_path_buf()];
        for segments in &configured {
            if dir.starts_with(&segments.path) {
                return Err(Error::InvalidConfig {
                    reason: format!(
                        "segment directory {} holds the store directory {}: it must be beside or inside it",
                        segments.path.display(),
                        dir.display()
                    ),
                });
            }
            if !segments.path.starts_with(dir) {
                roots.push(segments.path.clone());
            }
        }
        store::check_store_path(dir)?;
        // Locking a directory creates it: a recorded one outside the store that
        // is missing (a disk's mount point) must be refused first.
        let recorded = store::recorded_dirs_unlocked(dir)?;
        store::check_dirs_configured(&recorded, &configured, dir)?;
        if let Some(missing) = recorded.iter().find(|d| !d.path.starts_with(dir) && !d.path.is_dir()) {
            return Err(Error::SegmentDirMissing { store: dir.to_path_buf(), dir: missing.path.clone() });
        }
        // And segments missing (an empty mount point): refused before a lock file
        // is made in it. `open_with_storage` checks again under the lock. Listed
        // before the checkpoint is read, so a log open elsewhere, deleting from
        // its front, cannot look short; one appending can, so a store someone
        // holds is left to the lock to refuse.
        let segments = store::segment_files_unlocked(&recorded);
        let files = crate::inspect::store_files(dir);
        if !files.locked {
            store::check_segments_present(files.checkpoint.as_ref(), &segments, &recorded, dir)?;
        }
        let storage = MmapStorage::lock_all(&roots).map_err(|err| match err {
            LockError::Locked { dir: locked, lock_file, by_this_process } => {
                Error::Locked { dir: locked, lock_file, holder: store::lock_holder(dir, by_this_process) }
            }
            LockError::Io { path, source } => Error::Io { path, source },
            other => Error::InvalidConfig { reason: other.to_string() },
        })?;
        let storage = storage.write_without_mmap(config.write_without_mmap);
        Self::open_with_storage(dir, config, Arc::new(storage))
    }

    /// As [`open`](Self::open), with every file of the store (segments,
    /// checkpoint, abort marker) on the given storage: for example
    /// `store_io::SimStorage` (feature `sim`) in fault-injection tests, where a simulated power
    /// cut then covers all of them. The storage must own the directory (the
    /// [`Storage`] contract); [`open`](Self::open) uses a locked [`MmapStorage`].
    /// The storage decides how segments are written, so `write_without_mmap` is
    /// not read here.
    ///
    /// An open that fails leaves the store as it found it: every check that can
    /// refuse it (directories, missing segments) runs before the abort marker
    /// is written, and a failure after that (damage below the checkpoint, say)
    /// removes the marker again if the last process had shut down cleanly.
    pub fn open_with_storage(
        dir: impl AsRef<Path>,
        mut config: CommitLogConfig,
        storage: Arc<dyn Storage>,
    ) -> Result<CommitLog, Error> {
        config.validate()?;
        let dir = dir.as_ref().to_path_buf();
        // Nothing is written until every check passed.
        let dirs = store::configured_dirs(&dir, &config);
        let recorded = store::recorded_dirs(&*storage, &dir)?;
        store::check_dirs_configured(&recorded, &dirs, &dir)?;
        store::check_recorded_dirs_exist(&*storage, &recorded, &dir)?;
        // An existing store keeps its segment size whatever the configuration
        // says (it applies to new stores).
        if let Some(existing) = store::existing_segment_size(&*storage, &dirs)? {
            if existing != config.mapped_file_size_commit_log {
                tracing::info!(
                    dir = %dir.display(),
                    existing,
                    configured = config.mapped_file_size_commit_log,
                    "the store keeps the size of its segments"
                );
                config.mapped_file_size_commit_log = existing;
                config.validate().map_err(|err| match err {
                    Error::InvalidConfig { reason } => Error::InvalidConfig {
                        reason: format!("{} has {existing}-byte segments: {reason}", dir.display()),
                    },
                    other => other,
                })?;
            }
        }
        let found = store::read(&*storage, &dir)?;

        let pool = if config.transient_store_pool_enable {
            Some(TransientStorePool::new(PoolConfig::new(
                config.transient_store_pool_size,
                config.mapped_file_size_commit_log,
            ))?)
        } else {
            None
        };
        let queue_config = QueueConfig {
            preallocate_next_segment: config.preallocate_next_segment,
            warm_mapped_file_enable: config.warm_mapped_file_enable,
            segment_preparation: config.segment_preparation,
            preparation_chunk_bytes: config.preparation_chunk_bytes,
            preparation_bytes_per_sec: config.preparation_bytes_per_sec,
            recycle_segments: config.recycle_segments,
            // A producer must not outrun the guard's timer: every new segment
            // looks at its disk first.
            disk_space_limit_percent: Some(config.disk_space_warning_level_ratio),
            ..QueueConfig::new(config.mapped_file_size_commit_log)
        };
        let queue = Arc::new(SegmentQueue::load_dirs(Arc::clone(&storage), dirs.clone(), queue_config, pool.clone())?);
        let segments: Vec<(u64, u64, PathBuf)> =
            queue.segments().iter().map(|f| (f.file_from_offset(), f.file_end(), f.path().to_path_buf())).collect();
        store::check_segments_present(found.checkpoint.as_ref(), &segments, &recorded, &dir)?;

        store::mark_open(&*storage, &dir)?;
        let started = Self::start(dir.clone(), config, Arc::clone(&storage), queue, pool, &found, &dirs);
        if started.is_err() && found.clean_shutdown {
            // As it was found: the next open is a normal recovery again.
            if let Err(err) = store::mark_clean_shutdown(&*storage, &dir) {
                tracing::warn!(dir = %dir.display(), %err, "could not remove the abort marker after a failed open");
            }
        }
        started
    }

    /// The part of an open that writes: records the directories, recovers,
    /// writes the checkpoint and starts the services.
    fn start(
        dir: PathBuf,
        config: CommitLogConfig,
        storage: Arc<dyn Storage>,
        queue: Arc<SegmentQueue>,
        pool: Option<TransientStorePool>,
        found: &store::Opened,
        dirs: &[crate::SegmentDir],
    ) -> Result<CommitLog, Error> {
        store::record_dirs(&*storage, &dir, dirs)?;
        let durable_offset = found.checkpoint.map_or(0, |c| c.flushed_offset);
        let report = recover(&queue, durable_offset, found.clean_shutdown)?;

        // Looked at once now, so a disk already full refuses the first append and
        // the first segment goes to a directory with room.
        let disk = DiskGuard::new(&config);
        disk.check(&*storage, &queue);

        // Have the active segment ready (created, and warmed if configured) before
        // the first append, and the next one requested from the allocator: neither
        // creation nor warm-up belongs on the put path. A disk too full for it is
        // not an error here: appends are refused until there is room.
        let made_active = queue.last_mapped_file().is_none_or(|last| last.is_full());
        match queue.roll_to_writable_segment(report.end_offset) {
            // A segment this open made, before any writer runs: its blocks are
            // written now, whole, so a new store's first records sync written
            // blocks (`segment_preparation`).
            Ok(_) if made_active => {
                queue.prepare_active_segment()?;
            }
            Ok(_) => {}
            Err(segment_queue::QueueError::DiskFull { dir: full, used_percent, .. }) => {
                disk.refuse_until_next_look(&full, used_percent);
            }
            Err(segment_queue::QueueError::SegmentLargerThanDisk { dir: full, segment_bytes, disk_bytes, .. }) => {
                drop(disk.refuse_too_large(&full, segment_bytes, disk_bytes));
            }
            Err(err) => return Err(err.into()),
        }

        let state = Arc::new(CheckpointState::new(
            Arc::clone(&queue),
            Arc::clone(&storage),
            dir.clone(),
            report.end_offset,
            report.last_timestamp_ms,
        ));
        state.persist(true)?;
        {
            // The front is durable before any segment leaves it. Weak: the state
            // holds the queue, which holds this guard.
            let state = Arc::downgrade(&state);
            queue.set_front_guard(Box::new(move |front| match state.upgrade() {
                Some(state) => {
                    state.raise_front(front).map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
                }
                None => Ok(()), // the log is gone; nothing deletes through it
            }));
        }

        let listeners = Arc::new(Listeners::default());
        // Tails learn of every flush (durable records) through the listeners.
        let tails = Arc::new(crate::signal::TailSignal::default());
        {
            let tails = Arc::clone(&tails);
            listeners.0.write().push(Arc::new(move |_| tails.bump()));
        }
        let on_flushed = flushed_callback(&state, &listeners);
        let clock = Arc::new(SystemClock::new());
        // With the write-buffer pool, records become readable when committed.
        let committed_listeners = Arc::new(Listeners::default());
        {
            let tails = Arc::clone(&tails);
            committed_listeners.0.write().push(Arc::new(move |_| tails.bump()));
        }
        let target: Arc<dyn FlushTarget> =
            Arc::new(QueueTarget::for_log(Arc::clone(&queue), Arc::clone(&committed_listeners)));
        let with_pool = pool.is_some();
        let strategy: Box<dyn FlushStrategy> = match config.flush_disk_type {
            FlushDiskType::SyncFlush => {
                Box::new(SyncFlush::start(target, clock, &config.flush, with_pool, Some(on_flushed))?)
            }
            FlushDiskType::AsyncFlush => {
                Box::new(AsyncFlush::start(target, clock, &config.flush, with_pool, Some(on_flushed))?)
            }
        };
        let interval = Duration::from_millis(config.checkpoint_interval_ms);
        let checkpoint_thread = checkpoint::start_service(Arc::clone(&state), interval).map_err(io_err(&dir))?;
        let cleaner = Cleaner::new(&config);
        let disk_thread = clean::start_service(
            Arc::clone(&disk),
            Arc::clone(&cleaner),
            Arc::clone(&queue),
            Arc::clone(&storage),
            Duration::from_millis(config.clean_resource_interval_ms),
        )
        .map_err(io_err(&dir))?;
        Ok(CommitLog {
            inner: Arc::new(Inner {
                dir,
                config,
                storage,
                queue,
                strategy,
                put_lock: Mutex::new(()),
                groups: flush_service::WriteGroups::default(),
                checkpoint: state,
                checkpoint_thread: Mutex::new(Some(checkpoint_thread)),
                disk,
                cleaner,
                disk_thread: Mutex::new(Some(disk_thread)),
                shut_down: AtomicBool::new(false),
                recovery: report,
                listeners,
                committed_listeners,
                tails,
            }),
        })
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The storage the log's files are on (holding the store directory's lock,
    /// for [`open`](Self::open)): where a layer above keeps its own files under
    /// the store directory, so that they share the lock and, in tests, the
    /// simulated disk.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.inner.storage
    }

    /// The configuration.
    pub fn config(&self) -> &CommitLogConfig {
        &self.inner.config
    }

    /// What recovery found and did when the log was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.inner.recovery
    }

    /// The segment queue underneath (feature `internals`). Through it a caller
    /// can cut, delete or flush segments behind the log's back: the checkpoint
    /// and the front would not know.
    #[cfg(feature = "internals")]
    pub fn segment_queue(&self) -> &SegmentQueue {
        &self.inner.queue
    }

    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.inner.queue.segment_count()
    }

    /// The first failed sync, once one failed: the log's one failure latch
    /// (every later append, flush and shutdown refuses with it as the cause).
    pub fn failure(&self) -> Option<Arc<crate::SyncFailure>> {
        self.inner.queue.failure()
    }

    /// Scans the records from the segment holding `from` to the end of data with
    /// CRC checks, read-only (what recovery does at open; `from` 0 checks the
    /// whole log, as `commitlog verify` does on a closed store).
    pub fn scan(&self, from: u64) -> Result<crate::ScanEnd, Error> {
        crate::recovery::scan(&self.inner.queue, from)
    }

    /// `Shutdown` after shutdown, `NotWriteable` once any sync failed.
    pub(crate) fn check_writeable(&self) -> Result<(), Error> {
        if self.inner.shut_down.load(Ordering::Acquire) {
            return Err(Error::Shutdown);
        }
        if let Some(cause) = self.inner.queue.failure() {
            return Err(Error::NotWriteable { cause });
        }
        Ok(())
    }

    /// Maps a storage error to `NotWriteable` once the log has latched: the
    /// caller learns the first failure, not a later symptom of it.
    pub(crate) fn writeable_or(&self, error: Error) -> Error {
        match self.inner.queue.failure() {
            Some(cause) => Error::NotWriteable { cause },
            None => error,
        }
    }

    /// True while appends are refused because the disk's used share reached
    /// `disk_space_warning_level_ratio` (RocketMQ's DISK_FULL flag).
    pub fn is_disk_full(&self) -> bool {
        self.inner.disk.is_full()
    }

    /// What the cleaning service (`CleanCommitLogService`) deleted so far.
    pub fn clean_stats(&self) -> CleanStats {
        self.inner.cleaner.stats()
    }

    /// The disk's used share, in percent, at the guard's last look; `None` if the
    /// storage cannot tell. With several segment directories, the least used
    /// share among the writable ones.
    pub fn disk_used_percent(&self) -> Option<f64> {
        self.inner.disk.used_percent()
    }

    /// The directories segments are kept in, in the configured order (one,
    /// `<dir>/commitlog`, unless `store_path_commit_log` lists others).
    pub fn segment_dirs(&self) -> &[crate::SegmentDir] {
        self.inner.queue.dirs()
    }

    /// First stored offset.
    pub fn min_offset(&self) -> u64 {
        self.inner.queue.min_offset()
    }

    /// End of readable data.
    pub fn max_offset(&self) -> u64 {
        self.inner.queue.max_offset()
    }

    /// Offset below which everything is durable.
    pub fn flushed_offset(&self) -> u64 {
        self.inner.queue.flushed_where()
    }

    /// RocketMQ's confirm offset: the flushed offset under sync flush (what
    /// consumers may safely see), else the end of data.
    pub fn confirm_offset(&self) -> u64 {
        self.read_limit()
    }

    /// Registers `listener`, called with the flushed offset after every flush of
    /// the log (a group-commit round, a periodic flush, [`flush_all`](Self::flush_all)),
    /// on the thread that flushed and before a round's requests are answered: a
    /// reader that must only see durable records (a dispatcher under sync flush)
    /// learns the new bound without polling. Keep it short: it delays the answers.
    /// Under sync flush that thread may be a producer's own, waiting in
    /// [`DurabilityHandle::wait`](crate::DurabilityHandle::wait) (it runs the
    /// round when none runs: `group_commit_in_waiter`), so a listener must not
    /// take a lock a producer may hold while it waits.
    pub fn on_flushed(&self, listener: FlushListener) {
        self.inner.listeners.0.write().push(listener);
    }

    /// Registers `listener`, called with the committed offset after every
    /// commit of the write-buffer pool that moved it (the commit service's,
    /// a group-commit round's before its flush, [`flush_all`](Self::flush_all)'s),
    /// on the committing thread. With the pool
    /// (`transient_store_pool_enable`) appended records become readable
    /// there, not when their append returns: a reader of everything written
    /// (a dispatcher under async flush) learns of them without polling. Never
    /// called without the pool. Keep it short.
    pub fn on_committed(&self, listener: FlushListener) {
        self.inner.committed_listeners.0.write().push(listener);
    }

    /// Commits and flushes everything now; returns the flushed offset.
    pub fn flush_all(&self) -> Result<u64, Error> {
        self.check_writeable()?;
        let committed = self.inner.queue.commit(0).map_err(|e| self.writeable_or(e.into()))?;
        if committed.to > committed.from {
            self.inner.committed_listeners.notify(committed.to);
        }
        let progress = self.inner.queue.flush(0).map_err(|e| self.writeable_or(e.into()))?;
        // The window a concurrent truncation must not be able to exploit.
        crate::failpoints::hit("flush_all.after_flush", &self.inner.dir);
        // Clamped to the queue's flushed offset under the checkpoint's lock: a
        // truncation since the flush returned lowered both.
        self.inner.checkpoint.record(FlushedReport {
            flushed_where: progress.to,
            store_timestamp: self.inner.queue.store_timestamp(),
            requests_acknowledged: 0,
        });
        self.inner.listeners.notify(self.flushed_offset());
        Ok(progress.to)
    }

    /// Deletes segments older than `file_reserved_time_ms` (never the last, never
    /// unflushed data, never leaving a hole); returns how many.
    pub fn delete_expired_segments(&self, now_ms: u64, max_batch: usize) -> Result<usize, Error> {
        self.check_writeable()?;
        Ok(self.inner.queue.delete_expired_file_by_time(self.inner.config.file_reserved_time_ms, now_ms, max_batch)?)
    }

    /// Keeps every segment that holds an offset at or past what `hold` gives
    /// from deletion from the front by age or by offset (the cleaning
    /// service, [`delete_expired_segments`](Self::delete_expired_segments),
    /// [`delete_segments_before`](Self::delete_segments_before)): an owner
    /// whose records derived from the log are not durable yet keeps the log's
    /// records until they are. Freeing space on a full disk goes past it,
    /// warned. `hold` runs under the segment list's lock; it must be quick
    /// and must not call into the log.
    pub fn set_front_hold(&self, hold: impl Fn() -> u64 + Send + Sync + 'static) {
        self.inner.queue.set_front_hold(Box::new(hold));
    }

    /// Deletes segments that lie wholly below `offset` (and are durable); never the last.
    pub fn delete_segments_before(&self, offset: u64, max_batch: usize) -> Result<usize, Error> {
        self.check_writeable()?;
        Ok(self.inner.queue.delete_expired_file_by_offset(offset, max_batch)?)
    }

    /// Drops every record at and above `offset` for good (a conflicting suffix,
    /// as a replicated log must): `offset` must be where a record starts, or the
    /// end of the log. Everything is flushed first, so the durability handles of
    /// the records cut resolve as what they were, durable; then the checkpoint is
    /// lowered durably to `offset` and the tail is cut, erased and synced
    /// ([`SegmentQueue::truncate_dirty_files`]). A crash at any point recovers to
    /// the log with the tail or without it, never with a part of it: recovery
    /// keeps valid records above a checkpoint, and what was cut is erased.
    ///
    /// Appends wait while it runs. A reader's zero-copy view of a record at or
    /// above `offset` in the segment that holds it refuses the truncation
    /// (`ViewsOutstanding`, nothing changed). Returns what was cut.
    pub fn truncate_from(&self, offset: u64) -> Result<crate::TruncateReport, Error> {
        self.check_writeable()?;
        let _put = self.inner.put_lock.lock();
        if self.inner.shut_down.load(Ordering::Acquire) {
            return Err(Error::Shutdown);
        }
        let end = self.inner.queue.max_wrote_position();
        if offset >= end {
            return if offset == end { Ok(crate::TruncateReport::default()) } else { Err(self.no_record(offset)) };
        }
        // A record boundary: the record there parses (CRC and offset checked).
        match self.slot_unlimited(offset)? {
            crate::record::Slot::Record(_) => {}
            _ => return Err(self.no_record(offset)),
        }
        let end = self.flush_all()?;
        if self.inner.strategy.is_sync() {
            // A group-commit round answers every request below the end before the
            // cut: the durability handles of the records cut resolve as what they
            // were, durable (a round after the cut would see the lowered offset and
            // leave them to time out). Appends wait on the put lock meanwhile.
            if let Err(err) = self.inner.strategy.submit(end).wait() {
                return Err(self.writeable_or(err.into()));
            }
        }
        let inner = &self.inner;
        #[cfg(planted_bugs)]
        if crate::planted::is_active(crate::planted::Bug::TruncateKeepsCheckpoint) {
            // The planted bug: cut with the checkpoint still at the old end.
            return inner.queue.truncate_dirty_files(offset).map_err(|e| self.writeable_or(e.into()));
        }
        inner
            .checkpoint
            .lower_then(offset, || inner.queue.truncate_dirty_files(offset).map_err(|e| self.writeable_or(e.into())))
    }

    /// Write groups of concurrent [`append`](Self::append)s so far
    /// (`append_write_groups`): groups written by one producer for others
    /// that waited, and the records they held (a producer that wrote alone
    /// counts in neither).
    pub fn write_group_stats(&self) -> (u64, u64) {
        self.inner.groups.counts()
    }

    /// Flush-service counters.
    pub fn flush_stats(&self) -> FlushStats {
        self.inner.strategy.stats()
    }

    /// What the preparation of new segments
    /// ([`segment_preparation`](CommitLogConfig::segment_preparation)) did since
    /// the log was opened: segments prepared in full, taken half-prepared by a
    /// roll-over that outran it, or made without it.
    pub fn preparation_stats(&self) -> PreparationStats {
        self.inner.queue.preparation_stats()
    }

    /// Shuts down: the flush services drain (pending sync requests are flushed and
    /// answered), everything is committed and flushed, the checkpoint is written,
    /// and the abort marker removed so the next open runs normal recovery. After a
    /// storage error the abort marker stays (the next open recovers abnormally) and
    /// the error is returned.
    ///
    /// Shutdown is a barrier for appends: each append either fails with
    /// [`Error::Shutdown`] and writes nothing, or is covered by the final flush and
    /// checkpoint (its durability handle resolves once that flush is done). Nothing
    /// is written after this returns or after the directory lock is released.
    /// Calling it again (or from another clone) waits for the first call to finish
    /// and returns `Ok`; the first caller gets any error.
    pub fn shutdown(&self) -> Result<(), Error> {
        self.inner.shutdown()
    }
}

impl Inner {
    fn shutdown(&self) -> Result<(), Error> {
        if self.shut_down.swap(true, Ordering::AcqRel) {
            // Shutting down or shut down: wait for `close` (it holds the put lock).
            drop(self.put_lock.lock());
            return Ok(());
        }
        let result = self.close();
        // Release the directory either way: the next open recovers what is there.
        // Segments are unmapped now, or when the last record view goes.
        self.queue.close();
        // Tails end (after what they could read; reads fail from now on).
        self.tails.close();
        result
    }

    fn close(&self) -> Result<(), Error> {
        // The shutdown barrier (see `CommitLog::put`): appends that got the lock
        // before us are written and queued; `shut_down` is set, so every later one
        // fails. Held to the end, so nothing writes while the final flush runs.
        let _put = self.put_lock.lock();
        self.strategy.shutdown();
        self.queue.shutdown();
        if let Some(mut thread) = self.checkpoint_thread.lock().take() {
            thread.shutdown(Duration::from_secs(60));
        }
        if let Some(mut thread) = self.disk_thread.lock().take() {
            thread.shutdown(Duration::from_secs(60));
        }
        if let Some(cause) = self.queue.failure() {
            return Err(Error::NotWriteable { cause });
        }
        self.queue.commit(0)?;
        // A segment made from a spare holds its earlier life's bytes past the data.
        // Recovery would cut them as a torn tail (and erase them) at the next open;
        // erased here, the next open after a clean shutdown finds zeros and cuts
        // nothing. At most once per spare: afterwards the tail is zeros.
        if let Some(last) = self.queue.last_mapped_file().filter(|f| f.is_from_spare()) {
            last.truncate(last.wrote_position())?;
        }
        let flushed = self.queue.flush(0)?.to;
        self.checkpoint.record(FlushedReport {
            flushed_where: flushed,
            store_timestamp: self.queue.store_timestamp(),
            requests_acknowledged: 0,
        });
        self.checkpoint.persist(true)?;
        store::mark_clean_shutdown(&*self.storage, &self.dir)?;
        tracing::info!(dir = %self.dir.display(), flushed, "commit log shut down cleanly");
        Ok(())
    }
}

/// What each successful flush reports to the checkpoint.
fn flushed_callback(state: &Arc<CheckpointState>, listeners: &Arc<Listeners>) -> FlushedCallback {
    let state = Arc::clone(state);
    let listeners = Arc::clone(listeners);
    Arc::new(move |report: FlushedReport| {
        listeners.notify(report.flushed_where);
        if report.requests_acknowledged > 0 {
            crate::metrics::round(report.requests_acknowledged);
        }
        #[cfg(planted_bugs)]
        if crate::planted::is_active(crate::planted::Bug::CheckpointAheadOfData) {
            // The planted bug: checkpoint the end of written data, durable or not.
            return state.record_end_of_data(report);
        }
        // Never above what is durable now: a round that finished before a
        // truncation of the tail reports the old end.
        state.record(report)
    })
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Err(err) = self.shutdown() {
            tracing::error!(dir = %self.dir.display(), %err, "commit log shutdown on drop failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Checkpoint;
    use mapped_file::SimStorage;

    fn config() -> CommitLogConfig {
        CommitLogConfig {
            disk_space_warning_level_ratio: 100,
            disk_max_used_space_ratio: 100,
            clean_file_forcibly_enable: false,
            ..CommitLogConfig::builder()
                .mapped_file_size_commit_log(64 << 10)
                .max_message_size(4096)
                .flush_disk_type(FlushDiskType::AsyncFlush)
                .build()
                .unwrap()
        }
    }

    #[test]
    fn a_flush_that_returned_before_a_truncation_never_raises_the_checkpoint_above_the_cut() {
        // Thread A's `flush_all` returns E; thread B truncates to T < E (lowering
        // the checkpoint) before A records E. A recorded E unclamped, and the
        // checkpoint written at shutdown put E above the data: the next open
        // failed with `Corrupt`, and the store stayed unopenable.
        let sim = SimStorage::new();
        let storage: Arc<dyn Storage> = Arc::new(sim.clone());
        let log = CommitLog::open_with_storage("/race", config(), Arc::clone(&storage)).unwrap();
        let offsets: Vec<u64> = (0..200u8).map(|i| log.append(&[i; 700]).unwrap().wrote_offset).collect();
        let cut = offsets[80];
        let other = log.clone();
        crate::failpoints::arm("flush_all.after_flush", Path::new("/race"), move || {
            std::thread::spawn(move || other.truncate_from(cut).map(drop)).join().unwrap().unwrap();
        });
        let flushed = log.flush_all().unwrap();
        assert!(flushed > cut, "the flush returned the end before the cut");
        assert!(log.inner.checkpoint.persist(true).is_ok());
        let written = Checkpoint::load(&sim, Path::new("/race")).unwrap().unwrap();
        assert!(written.flushed_offset <= cut, "checkpoint {} above the cut {cut}", written.flushed_offset);
        log.shutdown().unwrap();
        let reopened = CommitLog::open_with_storage("/race", config(), storage).unwrap();
        assert_eq!(reopened.max_offset(), cut);
        reopened.shutdown().unwrap();
    }

    #[test]
    fn flush_listeners_hear_of_a_sync_round_before_its_producer_is_answered() {
        let storage: Arc<dyn Storage> = Arc::new(SimStorage::new());
        let config = CommitLogConfig { flush_disk_type: FlushDiskType::SyncFlush, ..config() };
        let log = CommitLog::open_with_storage("/listen", config, storage).unwrap();
        let heard = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let sink = Arc::clone(&heard);
        log.on_flushed(Arc::new(move |flushed| {
            sink.fetch_max(flushed, Ordering::SeqCst);
        }));
        let put = log.append(b"durable").unwrap();
        let end = put.next_offset();
        put.durability.wait().unwrap();
        assert!(heard.load(Ordering::SeqCst) >= end, "the round's flush was heard before the answer");
        log.append(b"more").unwrap();
        let flushed = log.flush_all().unwrap();
        assert_eq!(heard.load(Ordering::SeqCst), flushed, "a manual flush is heard too");
        log.shutdown().unwrap();
    }
}
