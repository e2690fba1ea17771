//! What can go wrong, as one typed error.

use std::path::PathBuf;

use mapped_file::MappedFileError;

/// Errors of a [`QueueIndex`](crate::QueueIndex).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IndexError {
    /// An append that would leave a hole in its queue or put an entry before
    /// one already there: queue offsets are dense and follow the log.
    #[error("queue {queue}: entry at offset {offset} (log offset {log_offset}), but the queue's next offset is {expected} and its last log offset {last_log_offset}")]
    NotInOrder {
        /// The queue.
        queue: u64,
        /// The queue offset asked for.
        offset: u64,
        /// The offset the queue takes next.
        expected: u64,
        /// The entry's log offset.
        log_offset: u64,
        /// The log offset of the newest entry in the index.
        last_log_offset: u64,
    },
    /// A seal whose end does not cover the active run's entries, or lies below
    /// the last run's end.
    #[error("seal to log offset {log_to}: the active run covers [{from}, {last_end}), every entry must lie below the seal's end")]
    BadSeal {
        /// The end asked for.
        log_to: u64,
        /// Where the active run begins.
        from: u64,
        /// One past the newest entry's record.
        last_end: u64,
    },
    /// A cut ([`QueueIndex::truncate`](crate::QueueIndex::truncate)) made by a record below the active
    /// run's start: its range is sealed already.
    #[error("queue {queue}: cut to offset {from} by the record at log offset {at_log}, below the sealed range's end {sealed_to}")]
    CutInSealedRange {
        /// The queue.
        queue: u64,
        /// The offset asked to cut to.
        from: u64,
        /// The cutting record's log offset.
        at_log: u64,
        /// Where the active run starts.
        sealed_to: u64,
    },
    /// A run file that fails its checks (reported by [`QueueIndex::open`](crate::QueueIndex::open) in
    /// [`OpenReport::dropped`](crate::OpenReport::dropped), never returned for a run found at open).
    #[error("{}: {reason}", path.display())]
    DamagedRun {
        /// The run file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A run file could not be written, read or deleted.
    #[error(transparent)]
    File(#[from] MappedFileError),
    /// Listing or creating the index's directory failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}
