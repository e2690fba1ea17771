//! What can go wrong, as one typed error.

use std::io;
use std::path::{Path, PathBuf};

#[cfg(doc)]
use openraft::StorageError;
use queue_index::IndexError;

/// Errors of opening and running a [`RaftLogStore`](crate::RaftLogStore) or a [`RaftLogEngine`](crate::RaftLogEngine)
/// (given to openraft as [`StorageError`]s).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RaftStoreError {
    /// The commit log failed.
    #[error(transparent)]
    Log(#[from] commitlog::Error),
    /// Records could not be made durable.
    #[error(transparent)]
    Flush(#[from] commitlog::FlushError),
    /// The queue index failed.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// The raft directory is held by another store.
    #[error(transparent)]
    Lock(#[from] mapped_file::LockError),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The state file (or a file of the earlier layout being converted) is
    /// damaged.
    #[error("raft state file {} is damaged: {reason}", path.display())]
    Meta {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A record of the log is not one this store writes (a log written by
    /// something else, or by a version whose records had no group header).
    #[error("record at offset {offset} is not a raft group record: {reason}")]
    Format {
        /// The record's offset.
        offset: u64,
        /// What is wrong.
        reason: &'static str,
    },
    /// A record does not hold an entry.
    #[error("record at offset {offset} is not a raft entry: {source}")]
    Decode {
        /// The record's offset.
        offset: u64,
        /// Why it does not decode.
        #[source]
        source: serde_json::Error,
    },
    /// An entry could not be encoded.
    #[error("cannot encode a raft entry: {0}")]
    Encode(#[source] serde_json::Error),
    /// A group's index points at a record that is not the entry it should be.
    #[error("raft group {group}: index {index} points at the record for index {found}")]
    Mismatch {
        /// The group.
        group: u64,
        /// The index asked for.
        index: u64,
        /// The index the record holds.
        found: u64,
    },
    /// A group's index misses entries the log's replay needs before the
    /// next one: the index files were damaged or lost.
    #[error("raft group {group}: the index ends before {next} but the log's next entry for it is {found}")]
    IndexGap {
        /// The group.
        group: u64,
        /// Where the group's index ends.
        next: u64,
        /// The entry the log holds next.
        found: u64,
    },
    /// The state file is missing or damaged and the log no longer holds
    /// every record since the engine was new (segments were reclaimed): the
    /// groups' votes and purged ids cannot be rebuilt. Restore the node from
    /// its peers (an empty directory joins as a learner and gets a snapshot).
    #[error(
        "raft state file {} is missing or damaged, and the log starts at offset {log_min}: the groups' state \
         cannot be rebuilt from it; restore this node from its peers (an empty directory joins as a learner)",
        path.display()
    )]
    StateLost {
        /// The state file.
        path: PathBuf,
        /// The log's first offset.
        log_min: u64,
    },
    /// The engine has no such group.
    #[error("raft group {group} does not exist")]
    NoSuchGroup {
        /// The group.
        group: u64,
    },
    /// The group was dropped: its store writes and reads nothing more.
    #[error("raft group {group} was dropped")]
    GroupDropped {
        /// The group.
        group: u64,
    },
    /// The configuration cannot work.
    #[error("invalid raft store config: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// The store was shut down: nothing more is written.
    #[error("the raft log store is shut down")]
    ShutDown,
}

/// [`RaftStoreError::Io`] of an OS error on `path` (how
/// [`store_io::remove_files`] reports one).
pub(crate) fn io_error(path: PathBuf, source: io::Error) -> RaftStoreError {
    RaftStoreError::Io { path, source }
}

/// A `map_err` for an OS error on `path`: [`RaftStoreError::Io`].
pub(crate) fn io_err(path: &Path) -> impl FnOnce(io::Error) -> RaftStoreError + '_ {
    move |source| RaftStoreError::Io { path: path.to_path_buf(), source }
}
