//! The error type of this crate.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use crate::latch::SyncFailure;

/// Errors of a [`MappedFile`](crate::MappedFile), each naming the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MappedFileError {
    /// The file could not be created, preallocated (e.g. disk full) or mapped.
    #[error("cannot create segment {}: {source}", path.display())]
    Create {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The file could not be opened or mapped.
    #[error("cannot open segment {}: {source}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The file name is not 20 digits.
    #[error("segment file name {} is not 20 decimal digits", path.display())]
    BadName {
        /// The file.
        path: PathBuf,
    },
    /// The segment would end past the largest offset (`u64::MAX`): its start
    /// offset (from its name) plus its size overflows.
    #[error("segment {} starts at {file_from_offset}: {file_size} bytes from there overflow the 64-bit offset space", path.display())]
    OffsetOverflow {
        /// The file.
        path: PathBuf,
        /// Its start offset.
        file_from_offset: u64,
        /// The segment size.
        file_size: u64,
    },
    /// The file does not have the segment size.
    #[error("segment {} has {actual} bytes, expected {expected}", path.display())]
    WrongSize {
        /// The file.
        path: PathBuf,
        /// The configured segment size.
        expected: u64,
        /// The file's size.
        actual: u64,
    },
    /// A sync failed; the file (and every segment sharing its latch) is latched
    /// from now on.
    #[error(transparent)]
    SyncFailed(Arc<SyncFailure>),
    /// An earlier sync failed (here or in a segment sharing the latch); the file
    /// refuses appends, commits, flushes and truncation.
    #[error("segment {} refuses writes: an earlier sync failed", path.display())]
    Latched {
        /// The file asked.
        path: PathBuf,
        /// The first failure.
        #[source]
        first: Arc<SyncFailure>,
    },
    /// The file was destroyed.
    #[error("segment {} was destroyed", path.display())]
    Destroyed {
        /// The file.
        path: PathBuf,
    },
    /// A read past the read position. Shown in absolute offsets (the file's
    /// start plus the file-relative ones), as every offset a reader of a log
    /// knows.
    #[error(
        "read of [{}, {}) is beyond the data, which ends at {} (segment {} starts at {file_from_offset})",
        file_from_offset.saturating_add(*pos as u64),
        file_from_offset.saturating_add(pos.saturating_add(*len) as u64),
        file_from_offset.saturating_add(*read_position as u64),
        path.display()
    )]
    OutOfRange {
        /// The file.
        path: PathBuf,
        /// The file's start offset.
        file_from_offset: u64,
        /// File-relative start.
        pos: usize,
        /// Length asked for.
        len: usize,
        /// The read position at the time (file-relative).
        read_position: usize,
    },
    /// Positions cannot move below bytes that zero-copy views still show.
    #[error("cannot move positions of {}: {views} views are still held", path.display())]
    ViewsOutstanding {
        /// The file.
        path: PathBuf,
        /// Number of live views.
        views: usize,
    },
    /// A position beyond the file.
    #[error("position {pos} is invalid for {} of {file_size} bytes", path.display())]
    BadPosition {
        /// The file.
        path: PathBuf,
        /// The position asked for.
        pos: usize,
        /// The file's size.
        file_size: usize,
    },
    /// A write buffer could not be attached.
    #[error("cannot attach a {buffer_size}-byte write buffer to {} ({file_size} bytes): sizes differ, one is attached, or uncommitted/full", path.display())]
    WriteBufferRejected {
        /// The file.
        path: PathBuf,
        /// The buffer's size.
        buffer_size: usize,
        /// The file's size.
        file_size: usize,
    },
    /// An append closure claimed to write more bytes than it was given.
    #[error("append closure claimed {claimed} bytes but only {remaining} remain in {}", path.display())]
    AppendOverrun {
        /// The file.
        path: PathBuf,
        /// Bytes claimed.
        claimed: usize,
        /// Bytes available.
        remaining: usize,
    },
    /// Writing bytes into a segment written without mmap (`pwrite`) failed. Nothing
    /// of the write was published: positions are where they were, and the bytes
    /// are written again by the next append or commit.
    #[error("cannot write {len} bytes at position {pos} of {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// File position of the write.
        pos: usize,
        /// Its length.
        len: usize,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The file could not be moved aside for reuse; it is still the segment it was.
    #[error("cannot move segment {} to {} for reuse: {source}", path.display(), to.display())]
    Recycle {
        /// The file.
        path: PathBuf,
        /// Where it was to go.
        to: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The file could not be deleted.
    #[error("cannot delete segment {}: {source}", path.display())]
    Remove {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}
