//! [`CqError`].

use mapped_file::MappedFileError;
use segment_queue::QueueError;

/// Errors of a [`ConsumeQueue`](crate::ConsumeQueue), naming what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CqError {
    /// The configuration cannot work.
    #[error("invalid consume queue config: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// Entries go in index order and are never overwritten: the queue holds
    /// entries and the next one is `next`.
    #[error("consume queue entry {index} cannot be put: the next entry is {next}")]
    OutOfOrder {
        /// The index asked for.
        index: u64,
        /// The next index.
        next: u64,
    },
    /// An entry of size 0 (zeros mean "no entry").
    #[error("consume queue entry {index} has size 0: an entry must point at a record")]
    EmptyEntry {
        /// The index asked for.
        index: u64,
    },
    /// An index whose byte position does not fit in 64 bits.
    #[error("consume queue index {index} is beyond the addressable range")]
    IndexOverflow {
        /// The index asked for.
        index: u64,
    },
    /// The segments failed.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// A segment failed.
    #[error(transparent)]
    File(#[from] MappedFileError),
    /// Reading the commit log during a repair failed.
    #[error(transparent)]
    Log(#[from] commitlog::Error),
    /// The flush service could not start.
    #[error(transparent)]
    Start(#[from] flush_service::StartError),
}
