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
    /// Another process (or another `CommitLog` in this one) holds the directory.
    #[error("commit log at {} is locked by another process (lock file {})", dir.display(), lock_file.display())]
    Locked {
        /// The store directory.
        dir: PathBuf,
        /// The lock file.
        lock_file: PathBuf,
    },
    /// Damage in data that was durable (below the checkpointed or flushed offset):
    /// reported, never silently truncated.
    #[error("corrupt record in {} at offset {offset} (below the durable offset {durable_offset}): {reason}", path.display())]
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
    #[error("{} keeps segments in {}, which the configuration does not list: add it to store_path_commit_log (or read_only_commit_log_store_paths to stop new segments going there); a directory leaves the store once it holds no segment", store.display(), dir.display())]
    SegmentDirNotConfigured {
        /// The store directory.
        store: PathBuf,
        /// The segment directory left out.
        dir: PathBuf,
    },
    /// The store's list of segment directories is unreadable.
    #[error("segment directory list {} is damaged: {reason}", path.display())]
    SegmentPaths {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
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
    /// A segment-queue error (loading, rolling, flushing).
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// A segment error.
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

    /// The status for an append that failed before anything was stored.
    pub fn from_error(error: &Error) -> Self {
        match error {
            Error::RecordTooLarge { .. } | Error::BatchTooLarge { .. } | Error::EmptyBatch => {
                PutMessageStatus::MessageIllegal
            }
            Error::NotWriteable { .. } | Error::Shutdown | Error::DiskFull { .. } => {
                PutMessageStatus::ServiceNotAvailable
            }
            Error::Queue(QueueError::File(MappedFileError::Create { .. } | MappedFileError::OffsetOverflow { .. }))
            | Error::Queue(QueueError::PreallocationTimedOut { .. })
            | Error::File(MappedFileError::Create { .. } | MappedFileError::OffsetOverflow { .. }) => {
                PutMessageStatus::CreateMappedFileFailed
            }
            _ => PutMessageStatus::UnknownError,
        }
    }
}
