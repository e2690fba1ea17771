//! The facade: open/recover, append, read, shut down.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use flush_service::{
    AsyncFlush, DurabilityHandle, FlushStats, FlushStrategy, FlushedCallback, FlushedReport, ServiceState,
    ServiceThread, SyncFlush, SystemClock,
};
use mapped_file::{AppendStatus, Appended, MmapStorage, Storage};
use parking_lot::Mutex;
use segment_queue::{QueueConfig, SegmentQueue};
use transient_pool::{PoolConfig, TransientStorePool};

use crate::checkpoint::Checkpoint;
use crate::config::{CommitLogConfig, FlushDiskType};
use crate::format::{encode_blank, encode_record, parse, Invalid, Parsed, HEADER_SIZE};
use crate::recovery::{recover, RecoveryReport};
use crate::{Error, PutMessageStatus};

/// Name of the segment directory inside the store directory.
pub const SEGMENT_DIR: &str = "commitlog";
/// Name of the lock file.
pub const LOCK_FILE: &str = "lock";
/// Name of the abort marker, present while a process has the log open.
pub const ABORT_FILE: &str = "abort";

/// The result of an append.
#[derive(Debug)]
pub struct AppendResult {
    /// Absolute offset of the record (`wroteOffset`).
    pub wrote_offset: u64,
    /// Encoded size in bytes, header included (`wroteBytes`).
    pub wrote_bytes: u64,
    /// Store timestamp given to the record (ms since the Unix epoch).
    pub store_timestamp_ms: u64,
    /// Resolves when the record is durable (sync flush), or is already resolved
    /// (async flush, or `wait_store_msg_ok = false`).
    pub durability: DurabilityHandle,
}

impl AppendResult {
    /// Offset right after the record.
    pub fn next_offset(&self) -> u64 {
        self.wrote_offset + self.wrote_bytes
    }

    /// Blocks until the durability handle resolves; returns RocketMQ's status.
    pub fn wait_status(self) -> PutMessageStatus {
        PutMessageStatus::from_flush(&self.durability.wait())
    }
}

/// The result of a batch append.
#[derive(Debug)]
pub struct BatchAppendResult {
    /// Offset of each record, in order.
    pub offsets: Vec<u64>,
    /// Encoded size of the whole batch.
    pub wrote_bytes: u64,
    /// Store timestamp shared by the batch.
    pub store_timestamp_ms: u64,
    /// Resolves when the whole batch is durable (sync flush).
    pub durability: DurabilityHandle,
}

/// A record read from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Absolute offset.
    pub offset: u64,
    /// Encoded size, header included.
    pub size: u64,
    /// Store timestamp, ms since the Unix epoch.
    pub store_timestamp_ms: u64,
    /// The body: a zero-copy view of the mapping, valid while held.
    pub body: Bytes,
}

impl Record {
    /// Offset of the next record (or blank) after this one.
    pub fn next_offset(&self) -> u64 {
        self.offset + self.size
    }
}

/// What lies at an offset.
enum Slot {
    Record(Record),
    /// A blank: the segment continues at the next segment.
    Blank,
    /// End of data.
    End,
}

#[derive(Debug, Default)]
struct CheckpointState {
    flushed: AtomicU64,
    timestamp: AtomicU64,
    stored: AtomicU64,
}

impl CheckpointState {
    fn record(&self, report: FlushedReport) {
        self.timestamp.fetch_max(report.store_timestamp, Ordering::AcqRel);
        self.flushed.fetch_max(report.flushed_where, Ordering::AcqRel);
    }

    /// Writes the checkpoint if the flushed offset moved since the last write.
    fn persist(&self, dir: &Path, force: bool) -> Result<(), Error> {
        let flushed = self.flushed.load(Ordering::Acquire);
        if !force && flushed == self.stored.load(Ordering::Acquire) {
            return Ok(());
        }
        let checkpoint =
            Checkpoint { flushed_offset: flushed, physic_msg_timestamp: self.timestamp.load(Ordering::Acquire) };
        checkpoint.store(dir)?;
        self.stored.store(flushed, Ordering::Release);
        Ok(())
    }
}

struct Inner {
    dir: PathBuf,
    config: CommitLogConfig,
    queue: Arc<SegmentQueue>,
    strategy: Box<dyn FlushStrategy>,
    put_lock: Mutex<()>,
    checkpoint: Arc<CheckpointState>,
    checkpoint_thread: Mutex<Option<ServiceThread>>,
    shut_down: AtomicBool,
    recovery: RecoveryReport,
    /// Held (flock) until shutdown ends; dropping it releases the directory.
    lock_file: Mutex<Option<File>>,
}

/// A commit log in a directory: segments in `<dir>/commitlog/`, plus `checkpoint`,
/// `abort` and `lock` files in `<dir>`.
///
/// Cheap to clone; clones share the log. `Send + Sync`: append and read from many
/// threads at once.
///
/// **Drop:** when the last clone is dropped without [`shutdown`](Self::shutdown),
/// the log shuts down then (flush, checkpoint, abort marker removed) and logs any
/// error through `tracing`. Call `shutdown` to see the error.
#[derive(Clone)]
pub struct CommitLog {
    inner: Arc<Inner>,
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

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}

impl CommitLog {
    /// Opens the log in `dir`, creating it if needed and recovering it otherwise:
    /// normal recovery after a clean shutdown, abnormal recovery when the abort
    /// marker shows the last process died. See [`recovery_report`](Self::recovery_report).
    pub fn open(dir: impl AsRef<Path>, config: CommitLogConfig) -> Result<CommitLog, Error> {
        Self::open_with_storage(dir, config, Arc::new(MmapStorage))
    }

    /// As [`open`](Self::open), with the segments on the given storage (for
    /// example `mapped_file::SimStorage` in fault-injection tests). The lock,
    /// abort and checkpoint files stay on the real file system.
    pub fn open_with_storage(
        dir: impl AsRef<Path>,
        config: CommitLogConfig,
        storage: Arc<dyn Storage>,
    ) -> Result<CommitLog, Error> {
        config.validate()?;
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock_file =
            OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).map_err(io_err(&lock_path))?;
        match lock_file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(Error::Locked { dir, lock_file: lock_path }),
            Err(std::fs::TryLockError::Error(source)) => return Err(Error::Io { path: lock_path, source }),
        }

        let abort_path = dir.join(ABORT_FILE);
        let clean_shutdown = !abort_path.exists();
        let checkpoint = Checkpoint::load(&dir)?;
        {
            // Present for as long as this process has the log open.
            let mut abort = File::create(&abort_path).map_err(io_err(&abort_path))?;
            write!(abort, "{}", std::process::id()).and_then(|()| abort.sync_all()).map_err(io_err(&abort_path))?;
            mapped_file::sync_dir(&dir).map_err(io_err(&dir))?;
        }

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
            ..QueueConfig::new(config.mapped_file_size_commit_log)
        };
        let queue = Arc::new(SegmentQueue::load(storage, &dir.join(SEGMENT_DIR), queue_config, pool.clone())?);
        let durable_offset = checkpoint.map_or(0, |c| c.flushed_offset);
        let report = recover(&queue, durable_offset, clean_shutdown)?;

        // Have the active segment ready (created, and warmed if configured) before
        // the first append, and the next one requested from the allocator: neither
        // creation nor warm-up belongs on the put path.
        queue.get_last_mapped_file(report.end_offset)?;

        let state = Arc::new(CheckpointState::default());
        state.record(FlushedReport { flushed_where: report.end_offset, store_timestamp: report.last_timestamp_ms });
        state.persist(&dir, true)?;

        let callback_state = Arc::clone(&state);
        let on_flushed: FlushedCallback = Arc::new(move |report| callback_state.record(report));
        let clock = Arc::new(SystemClock::new());
        let strategy: Box<dyn FlushStrategy> = match config.flush_disk_type {
            FlushDiskType::SyncFlush => {
                Box::new(SyncFlush::start(queue.clone(), clock, &config.flush, pool.is_some(), Some(on_flushed))?)
            }
            FlushDiskType::AsyncFlush => {
                Box::new(AsyncFlush::start(queue.clone(), clock, &config.flush, pool.is_some(), Some(on_flushed))?)
            }
        };
        let checkpoint_thread = {
            let (state, store_dir) = (Arc::clone(&state), dir.clone());
            let interval = Duration::from_millis(config.checkpoint_interval_ms);
            ServiceThread::spawn("CheckpointService", ServiceState::new(), move |s| {
                while !s.is_stopped() {
                    s.sleep(interval);
                    if let Err(err) = state.persist(&store_dir, false) {
                        tracing::error!(%err, "writing the checkpoint failed");
                    }
                }
            })
            .map_err(io_err(&dir))?
        };
        Ok(CommitLog {
            inner: Arc::new(Inner {
                dir,
                config,
                queue,
                strategy,
                put_lock: Mutex::new(()),
                checkpoint: state,
                checkpoint_thread: Mutex::new(Some(checkpoint_thread)),
                shut_down: AtomicBool::new(false),
                recovery: report,
                lock_file: Mutex::new(Some(lock_file)),
            }),
        })
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The configuration.
    pub fn config(&self) -> &CommitLogConfig {
        &self.inner.config
    }

    /// What recovery found and did when the log was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.inner.recovery
    }

    /// The segment queue underneath (for inspection).
    pub fn segment_queue(&self) -> &SegmentQueue {
        &self.inner.queue
    }

    fn check_writeable(&self) -> Result<(), Error> {
        if self.inner.shut_down.load(Ordering::Acquire) {
            return Err(Error::Shutdown);
        }
        if let Some(cause) = self.inner.strategy.failure() {
            return Err(Error::NotWriteable { cause: cause.to_string() });
        }
        Ok(())
    }

    /// Appends one record. Thread-safe; the put lock is held only to place and copy
    /// the record (its CRC is computed before).
    pub fn append(&self, body: &[u8]) -> Result<AppendResult, Error> {
        self.check_writeable()?;
        let max = self.inner.config.max_message_size;
        if body.len() > max {
            return Err(Error::RecordTooLarge { size: body.len(), max });
        }
        let body_crc = crc32c::crc32c(body);
        let size = HEADER_SIZE + body.len();
        let (wrote_offset, store_timestamp_ms, durability) = self.put(size, |out, offset, ts| {
            encode_record(out, offset, ts, body, body_crc);
        })?;
        Ok(AppendResult { wrote_offset, wrote_bytes: size as u64, store_timestamp_ms, durability })
    }

    /// Appends several records under one lock, contiguously in one segment; one
    /// durability handle covers them all.
    pub fn append_batch<B: AsRef<[u8]>>(&self, bodies: &[B]) -> Result<BatchAppendResult, Error> {
        self.check_writeable()?;
        if bodies.is_empty() {
            return Err(Error::EmptyBatch);
        }
        let max = self.inner.config.max_message_size;
        let mut crcs = Vec::with_capacity(bodies.len());
        let mut total = 0usize;
        for body in bodies {
            let body = body.as_ref();
            if body.len() > max {
                return Err(Error::RecordTooLarge { size: body.len(), max });
            }
            crcs.push(crc32c::crc32c(body));
            total += HEADER_SIZE + body.len();
        }
        let segment_size = self.inner.config.mapped_file_size_commit_log;
        if total + HEADER_SIZE > segment_size {
            return Err(Error::BatchTooLarge { records: bodies.len(), bytes: total, segment_size });
        }
        let (first, store_timestamp_ms, durability) = self.put(total, |out, offset, ts| {
            let mut pos = 0;
            for (body, crc) in bodies.iter().zip(&crcs) {
                pos += encode_record(&mut out[pos..], offset + pos as u64, ts, body.as_ref(), *crc);
            }
        })?;
        let mut offsets = Vec::with_capacity(bodies.len());
        let mut at = first;
        for body in bodies {
            offsets.push(at);
            at += (HEADER_SIZE + body.as_ref().len()) as u64;
        }
        Ok(BatchAppendResult { offsets, wrote_bytes: total as u64, store_timestamp_ms, durability })
    }

    /// Places `size` bytes at the log's end under the put lock, rolling to a new
    /// segment (after a blank record) when they do not fit with room for a blank,
    /// and submits the durability request before the lock is released.
    ///
    /// The put lock is the shutdown barrier: `close` sets `shut_down`, then takes
    /// the lock for the rest of shutdown. An append that holds the lock before that
    /// has written and queued its request, so the final drain, flush and checkpoint
    /// cover it; one that takes the lock after sees `shut_down` here and writes
    /// nothing. No byte is written after the final flush or the lock file's release.
    fn put(&self, size: usize, write: impl Fn(&mut [u8], u64, u64)) -> Result<(u64, u64, DurabilityHandle), Error> {
        let _put = self.inner.put_lock.lock();
        if self.inner.shut_down.load(Ordering::Acquire) {
            return Err(Error::Shutdown);
        }
        let ts = now_ms();
        // At most two tries: the current segment, then a fresh one.
        for _ in 0..2 {
            let file = self.inner.queue.get_last_mapped_file(0)?;
            let appended = file
                .append_with(ts, |offset, tail| {
                    if size + HEADER_SIZE <= tail.len() {
                        write(&mut tail[..size], offset, ts);
                        // Pair assertion: what we placed parses as records of `size`.
                        assert!(
                            matches!(parse(tail, offset, false), Parsed::Record { .. }),
                            "encoded record does not parse"
                        );
                        AppendStatus::Written { bytes: size, value: true }
                    } else {
                        // Every record leaves room for a blank, so a tail is either
                        // empty (a full segment) or at least a header long.
                        if !tail.is_empty() {
                            encode_blank(tail, offset, ts);
                        }
                        AppendStatus::Written { bytes: tail.len(), value: false }
                    }
                })
                .map_err(|e| self.writeable_or(e.into()))?;
            if let Appended::Written { wrote_offset, value: true, .. } = appended {
                return Ok((wrote_offset, ts, self.durability(wrote_offset + size as u64)));
            }
        }
        unreachable!("a fresh segment always holds a record that passed the size checks")
    }

    /// Maps a storage error to `NotWriteable` once the log has latched.
    fn writeable_or(&self, error: Error) -> Error {
        match self.inner.strategy.failure() {
            Some(cause) => Error::NotWriteable { cause: cause.to_string() },
            None => error,
        }
    }

    fn durability(&self, next_offset: u64) -> DurabilityHandle {
        if self.inner.config.acknowledges_after_flush() {
            self.inner.strategy.submit(next_offset)
        } else {
            self.inner.strategy.wake_on_put();
            DurabilityHandle::resolved(Ok(()))
        }
    }

    /// Reads the record at `offset`: a zero-copy view whose CRC was checked.
    pub fn read(&self, offset: u64) -> Result<Record, Error> {
        match self.slot(offset)? {
            Slot::Record(record) => Ok(record),
            Slot::Blank | Slot::End => Err(self.no_record(offset)),
        }
    }

    fn no_record(&self, offset: u64) -> Error {
        Error::NoRecord { offset, min: self.min_offset(), max: self.max_offset() }
    }

    fn read_limit(&self) -> u64 {
        if self.inner.config.flush_disk_type == FlushDiskType::SyncFlush && self.inner.config.read_limit_to_flushed {
            self.flushed_offset()
        } else {
            self.max_offset()
        }
    }

    fn slot(&self, offset: u64) -> Result<Slot, Error> {
        let queue = &self.inner.queue;
        let Some(file) = queue.find_mapped_file_by_offset(offset, false) else {
            return if offset == self.max_offset() { Ok(Slot::End) } else { Err(self.no_record(offset)) };
        };
        let pos = (offset - file.file_from_offset()) as usize;
        if pos >= file.read_position() {
            return Ok(Slot::End);
        }
        let view = file.read_from(pos)?;
        match parse(&view, offset, true) {
            Parsed::Record { total, timestamp_ms } => {
                let limit = self.read_limit();
                if offset + total as u64 > limit {
                    return Err(Error::NotYetDurable { offset, flushed: limit });
                }
                Ok(Slot::Record(Record {
                    offset,
                    size: total as u64,
                    store_timestamp_ms: timestamp_ms,
                    body: view.slice(HEADER_SIZE..total),
                }))
            }
            Parsed::Blank => Ok(Slot::Blank),
            // Zeros are the end of data only at the end: below it they are damage
            // (a zeroed sector in an old segment), never a quiet end of iteration.
            Parsed::End if offset < self.max_offset() => {
                Err(Error::BadRecord { offset, reason: Invalid::UnexpectedEnd })
            }
            Parsed::End => Ok(Slot::End),
            Parsed::Invalid(reason) => Err(Error::BadRecord { offset, reason }),
        }
    }

    /// Iterates over records from `offset` (a record start, or the start of the
    /// log with [`min_offset`](Self::min_offset)), skipping blanks, up to the end of
    /// readable data (durable data under sync flush with the read limit on).
    pub fn iter_from(&self, offset: u64) -> Records {
        Records { log: self.clone(), next: offset, done: false }
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

    /// Commits and flushes everything now; returns the flushed offset.
    pub fn flush_all(&self) -> Result<u64, Error> {
        self.check_writeable()?;
        self.inner.queue.commit(0)?;
        let progress = self.inner.queue.flush(0).map_err(|e| self.writeable_or(e.into()))?;
        self.inner
            .checkpoint
            .record(FlushedReport { flushed_where: progress.to, store_timestamp: self.inner.queue.store_timestamp() });
        Ok(progress.to)
    }

    /// Deletes segments older than `file_reserved_time_ms` (never the last, never
    /// unflushed data, never leaving a hole); returns how many.
    pub fn delete_expired_segments(&self, now_ms: u64, max_batch: usize) -> Result<usize, Error> {
        self.check_writeable()?;
        Ok(self.inner.queue.delete_expired_file_by_time(self.inner.config.file_reserved_time_ms, now_ms, max_batch)?)
    }

    /// Deletes segments that lie wholly below `offset` (and are durable); never the last.
    pub fn delete_segments_before(&self, offset: u64, max_batch: usize) -> Result<usize, Error> {
        self.check_writeable()?;
        Ok(self.inner.queue.delete_expired_file_by_offset(offset, max_batch)?)
    }

    /// Flush-service counters.
    pub fn flush_stats(&self) -> FlushStats {
        self.inner.strategy.stats()
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
        self.lock_file.lock().take();
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
        if let Some(cause) = self.strategy.failure() {
            return Err(Error::NotWriteable { cause: cause.to_string() });
        }
        self.queue.commit(0)?;
        let flushed = self.queue.flush(0)?.to;
        self.checkpoint.record(FlushedReport { flushed_where: flushed, store_timestamp: self.queue.store_timestamp() });
        self.checkpoint.persist(&self.dir, true)?;
        let abort = self.dir.join(ABORT_FILE);
        fs::remove_file(&abort).map_err(io_err(&abort))?;
        mapped_file::sync_dir(&self.dir).map_err(io_err(&self.dir))?;
        tracing::info!(dir = %self.dir.display(), flushed, "commit log shut down cleanly");
        Ok(())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Err(err) = self.shutdown() {
            tracing::error!(dir = %self.dir.display(), %err, "commit log shutdown on drop failed");
        }
    }
}

/// Iterator over records, from [`CommitLog::iter_from`].
#[derive(Debug)]
pub struct Records {
    log: CommitLog,
    next: u64,
    done: bool,
}

impl Iterator for Records {
    type Item = Result<Record, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            if self.next >= self.log.read_limit() {
                return None;
            }
            match self.log.slot(self.next) {
                Ok(Slot::Record(record)) => {
                    self.next = record.next_offset();
                    return Some(Ok(record));
                }
                Ok(Slot::Blank) => {
                    let size = self.log.inner.config.mapped_file_size_commit_log as u64;
                    self.next = self.next - self.next % size + size;
                }
                Ok(Slot::End) => self.done = true,
                Err(err) => {
                    self.done = true;
                    return Some(Err(err));
                }
            }
        }
        None
    }
}
