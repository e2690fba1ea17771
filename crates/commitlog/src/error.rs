//! The error type and the put outcome.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use flush_service::{FlushError, StartError};
use mapped_file::{MappedFileError, SyncFailure};
use segment_queue::QueueError;

use crate::format::Invalid;

/// Errors of a [`CommitLog`](crate::CommitLog), with the path or offset concerned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration cannot work.
    #[error("invalid commit log config: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// A file or directory operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The store (or one of its segment directories) is locked: open in another
    /// process, or in this one.
    #[error("commit log at {} is locked (lock file {}) {holder}", dir.display(), lock_file.display())]
    Locked {
        /// The locked directory.
        dir: PathBuf,
        /// The lock file.
        lock_file: PathBuf,
        /// Who holds it, as far as the abort marker tells.
        holder: LockHolder,
    },
    /// The store directory's path names something that is not a directory.
    #[error("{} is not a directory: a commit log store is a directory", path.display())]
    NotADirectory {
        /// The path given.
        path: PathBuf,
    },
    /// Damage in data that was durable (below the checkpointed or flushed offset):
    /// reported, never silently truncated.
    #[error("corrupt record in {} at offset {offset} (below the durable offset {durable_offset}): {reason}; `commitlog verify` lists the damage, `commitlog recover --salvage` keeps every record before it (docs/operations.md)", path.display())]
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// Absolute offset of the bad record.
        offset: u64,
        /// Offset below which data had been made durable.
        durable_offset: u64,
        /// What is wrong.
        reason: Invalid,
    },
    /// The checkpoint file is unreadable.
    #[error("checkpoint {} is damaged: {reason}", path.display())]
    Checkpoint {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: &'static str,
    },
    /// The store keeps segments in a directory the configuration does not list
    /// (`store_path_commit_log` / `read_only_commit_log_store_paths`): opening
    /// without it would lose its segments.
    #[error("{} keeps segments in {}, which the configuration does not list: add it to store_path_commit_log (or read_only_commit_log_store_paths to stop new segments going there); a directory leaves the store only by `commitlog forget-dir` once it holds no segment (docs/operations.md)", store.display(), dir.display())]
    SegmentDirNotConfigured {
        /// The store directory.
        store: PathBuf,
        /// The segment directory left out.
        dir: PathBuf,
    },
    /// A segment directory the store recorded does not exist. It is not created
    /// again: it may be the mount point of a disk that is not mounted. Nothing
    /// was written.
    #[error("segment directory {} of the store {} is missing: is its disk mounted? (a directory leaves the store only by `commitlog forget-dir`, docs/operations.md)", dir.display(), store.display())]
    SegmentDirMissing {
        /// The store directory.
        store: PathBuf,
        /// The recorded segment directory that is missing.
        dir: PathBuf,
    },
    /// The segments found do not cover the log the checkpoint describes: the
    /// first starts above the recorded front (segments the log never deleted are
    /// gone), or the last ends below the flushed offset. Usually a segment
    /// directory whose disk is not mounted (its mount point is empty). Nothing
    /// was written; [`admin::salvage`](crate::admin::salvage) accepts the loss.
    #[error(
        "{}: segments are missing: the log holds [{}, {durable}) but the segments found cover {}{}; the open refuses rather than lose records (mount the disk, or accept the loss with `commitlog recover --salvage`, docs/operations.md)",
        store.display(),
        front.map_or_else(|| "?".to_string(), |f| f.to_string()),
        found.map_or_else(|| "nothing".to_string(), |(a, b)| format!("[{a}, {b})")),
        if empty_dirs.is_empty() { String::new() } else {
            format!("; recorded directories holding no segment: {}", empty_dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", "))
        }
    )]
    SegmentsMissing {
        /// The store directory.
        store: PathBuf,
        /// Where the log starts, by the checkpoint (`None`: a format-1 checkpoint).
        front: Option<u64>,
        /// The checkpoint's flushed offset.
        durable: u64,
        /// The range the segments found cover, if any.
        found: Option<(u64, u64)>,
        /// Recorded segment directories that hold no segment (likely culprits).
        empty_dirs: Vec<PathBuf>,
    },
    /// An operator step ([`admin`](crate::admin)) was refused; nothing changed.
    #[error("{step} refused: {reason}")]
    Refused {
        /// The step (`forget-dir`, `salvage`).
        step: &'static str,
        /// Why.
        reason: String,
    },
    /// The store's list of segment directories is unreadable.
    #[error("segment directory list {} is damaged: {reason}", path.display())]
    SegmentPaths {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A [`Tail`](crate::Tail) stood at records the cleaning service deleted
    /// before it read them: it fell behind the log's retention.
    #[error("the tail at offset {offset} fell behind the log's retention: the log starts at {min} now")]
    FellBehind {
        /// Where the tail stood.
        offset: u64,
        /// The log's first offset now.
        min: u64,
    },
    /// A record body larger than `max_message_size` (`MESSAGE_ILLEGAL`); nothing was written.
    #[error("record body of {size} bytes exceeds max_message_size {max}")]
    RecordTooLarge {
        /// The body size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// A batch that cannot fit in one segment; nothing was written.
    #[error("batch of {records} records ({bytes} bytes encoded) does not fit in a segment of {segment_size} bytes")]
    BatchTooLarge {
        /// Records in the batch.
        records: usize,
        /// Encoded size.
        bytes: usize,
        /// The segment size.
        segment_size: usize,
    },
    /// An empty batch.
    #[error("a batch needs at least one record")]
    EmptyBatch,
    /// The log refuses writes after a storage error (`SERVICE_NOT_AVAILABLE`):
    /// nothing is acknowledged after a failed sync.
    #[error("commit log is not writeable after a failed sync")]
    NotWriteable {
        /// The first failed sync: the log's one failure latch.
        #[source]
        cause: Arc<SyncFailure>,
    },
    /// The log was shut down.
    #[error("commit log is shut down")]
    Shutdown,
    /// The disk's used share reached `disk_space_warning_level_ratio`: appends are
    /// refused (nothing was written) until space is freed, for example by
    /// deleting expired segments. RocketMQ's DISK_FULL.
    #[error("disk under {} is {used_percent:.1} % full (limit {limit_percent} %): appends are refused until space is freed", dir.display())]
    DiskFull {
        /// The store directory.
        dir: PathBuf,
        /// The used share at the last look, in percent.
        used_percent: f64,
        /// `disk_space_warning_level_ratio`.
        limit_percent: u32,
    },
    /// The log's segment size is larger than its disk allows even when empty
    /// (`disk_space_warning_level_ratio` of the file system under `dir`): no
    /// segment can be created, so appends are refused. Make segments smaller
    /// (`mapped_file_size_commit_log`).
    #[error("a segment of {segment_bytes} bytes does not fit the disk under {}: it holds {disk_bytes} bytes in all, and the log may fill it to {limit_percent} %; make segments smaller (mapped_file_size_commit_log)", dir.display())]
    SegmentLargerThanDisk {
        /// The segment directory.
        dir: PathBuf,
        /// The segment size.
        segment_bytes: u64,
        /// The size of the file system under `dir`.
        disk_bytes: u64,
        /// `disk_space_warning_level_ratio`.
        limit_percent: u32,
    },
    /// No record at this offset (outside the stored range, or not a record start).
    #[error("no record at offset {offset} (stored range [{min}, {max}))")]
    NoRecord {
        /// The offset asked for.
        offset: u64,
        /// First stored offset.
        min: u64,
        /// End of readable data.
        max: u64,
    },
    /// The offset lies inside a record, not at its start: a wrong offset, not
    /// damage (nothing is corrupt).
    #[error("offset {offset} is inside the record at {record}, not a record boundary (nothing is corrupt)")]
    InsideRecord {
        /// The offset asked for.
        offset: u64,
        /// Where the record holding it starts.
        record: u64,
    },
    /// The bytes at a read offset are not a valid record.
    #[error("offset {offset} does not hold a valid record: {reason}")]
    BadRecord {
        /// The offset.
        offset: u64,
        /// What is wrong.
        reason: Invalid,
    },
    /// The record exists but is not durable yet, and reads are limited to durable data.
    #[error("record at {offset} is not durable yet (flushed up to {flushed})")]
    NotYetDurable {
        /// The offset.
        offset: u64,
        /// The flushed offset.
        flushed: u64,
    },
    /// A segment-queue error (loading, rolling, flushing): never one about a
    /// single segment, which is [`Error::File`] (one path per failure).
    #[error(transparent)]
    Queue(QueueError),
    /// A segment error, from the queue or from the log itself.
    #[error(transparent)]
    File(#[from] MappedFileError),
    /// A durability request failed (timed out, the flush failed, or the services
    /// stopped).
    #[error(transparent)]
    Durability(#[from] FlushError),
    /// The flush services could not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// The write-buffer pool could not be created.
    #[error(transparent)]
    Pool(#[from] transient_pool::PoolError),
}

/// Who holds a store's lock, as the abort marker (which holds the id of the
/// process that opened the store) tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockHolder {
    /// This process: the store is open already (another `CommitLog` of it), or
    /// the zero-copy view of a record read from an earlier open is still alive.
    ThisProcess,
    /// Another process, with this id.
    OtherProcess(u32),
    /// The abort marker does not say.
    Unknown,
}

impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockHolder::ThisProcess => f.write_str(
                "by this process: it is open already, or a record view (Record::body) of an earlier open is still alive",
            ),
            LockHolder::OtherProcess(pid) => write!(f, "by another process (pid {pid}, by the abort marker)"),
            LockHolder::Unknown => f.write_str("by another process"),
        }
    }
}

impl From<QueueError> for Error {
    /// A queue error about one segment arrives as [`Error::File`], as the same
    /// failure met by the log directly does: one path per failure.
    fn from(error: QueueError) -> Self {
        match error {
            QueueError::File(file) => Error::File(file),
            other => Error::Queue(other),
        }
    }
}

/// Maps an I/O error on `path` to [`Error::Io`].
pub(crate) fn io_err(path: &std::path::Path) -> impl FnOnce(io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}

/// RocketMQ's `PutMessageStatus`, for callers that want one value per put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PutMessageStatus {
    /// Stored (and, under sync flush, durable).
    PutOk,
    /// Stored, but not durable within `sync_flush_timeout_ms`.
    FlushDiskTimeout,
    /// Stored, but the flush failed: not durable, and the log refuses writes now.
    FlushDiskFailed,
    /// Not stored: shut down, not writeable, or the disk is full (RocketMQ's
    /// DISK_FULL running flag answers the same).
    ServiceNotAvailable,
    /// Not stored: too large, or an empty batch.
    MessageIllegal,
    /// Not stored: a new segment could not be created (disk full, the offset space
    /// exhausted, or its preparation still running after the wait).
    CreateMappedFileFailed,
    /// Not stored: another error.
    UnknownError,
}

impl PutMessageStatus {
    /// The status for a durability result.
    pub fn from_flush(result: &Result<(), FlushError>) -> Self {
        match result {
            Ok(()) => PutMessageStatus::PutOk,
            Err(FlushError::Timeout { .. }) => PutMessageStatus::FlushDiskTimeout,
            Err(FlushError::Failed { .. }) => PutMessageStatus::FlushDiskFailed,
            Err(_) => PutMessageStatus::ServiceNotAvailable,
        }
    }

    /// The status RocketMQ's store would answer for a failed append, from the
    /// error. Every variant is decided here (no catch-all, so a new one must be
    /// too):
    /// - too large, an empty batch: `MessageIllegal`;
    /// - the log shut down, not writeable after a failure, the disk full, or
    ///   a store that never opened (locked by another process, a bad
    ///   configuration or directory, damage or missing segments refused at
    ///   open, services that did not start, the write-buffer pool not
    ///   allocated): `ServiceNotAvailable`, as RocketMQ answers while its
    ///   running flags say the store cannot write;
    /// - a new segment not made (its creation failed, its preparation timed out,
    ///   the write-buffer pool empty, the offset space exhausted):
    ///   `CreateMappedFileFailed`;
    /// - a durability error: as [`from_flush`](Self::from_flush);
    /// - an I/O error while appending: `UnknownError`, RocketMQ's answer for a
    ///   failed append (`AppendMessageStatus.UNKNOWN_ERROR`); the log latches
    ///   and answers `ServiceNotAvailable` from then on;
    /// - read errors (no record, inside a record, a bad record, not yet
    ///   durable, a tail behind retention) and a refused operator step never
    ///   come from an append:
    ///   `UnknownError`.
    pub fn from_error(error: &Error) -> Self {
        use PutMessageStatus as S;
        match error {
            Error::RecordTooLarge { .. } | Error::BatchTooLarge { .. } | Error::EmptyBatch => S::MessageIllegal,
            Error::NotWriteable { .. }
            | Error::Shutdown
            | Error::DiskFull { .. }
            | Error::SegmentLargerThanDisk { .. }
            | Error::Locked { .. }
            | Error::InvalidConfig { .. }
            | Error::NotADirectory { .. }
            | Error::Corrupt { .. }
            | Error::Checkpoint { .. }
            | Error::SegmentDirNotConfigured { .. }
            | Error::SegmentDirMissing { .. }
            | Error::SegmentsMissing { .. }
            | Error::SegmentPaths { .. }
            | Error::Start(_)
            | Error::Pool(_) => S::ServiceNotAvailable,
            Error::Queue(queue) => match queue {
                QueueError::PreallocationTimedOut { .. }
                | QueueError::PoolExhausted { .. }
                | QueueError::Dir { .. } => S::CreateMappedFileFailed,
                QueueError::InvalidConfig { .. }
                | QueueError::MalformedName { .. }
                | QueueError::WrongSize { .. }
                | QueueError::Misaligned { .. }
                | QueueError::Gap { .. }
                | QueueError::Duplicate { .. } => S::ServiceNotAvailable,
                // `QueueError` is non-exhaustive: a later variant is unknown here.
                _ => S::UnknownError,
            },
            Error::File(file) => match file {
                MappedFileError::Create { .. } | MappedFileError::OffsetOverflow { .. } => S::CreateMappedFileFailed,
                MappedFileError::Open { .. } | MappedFileError::BadName { .. } | MappedFileError::WrongSize { .. } => {
                    S::ServiceNotAvailable
                }
                // `MappedFileError` is non-exhaustive: a later variant is unknown here.
                _ => S::UnknownError,
            },
            Error::Durability(flush) => Self::from_flush(&Err(flush.clone())),
            Error::Io { .. } => S::UnknownError,
            Error::NoRecord { .. }
            | Error::FellBehind { .. }
            | Error::InsideRecord { .. }
            | Error::BadRecord { .. }
            | Error::NotYetDurable { .. }
            | Error::Refused { .. } => S::UnknownError,
        }
    }
}
