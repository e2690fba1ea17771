//! The error type of this crate.

use std::io;
use std::path::PathBuf;

use mapped_file::MappedFileError;

/// Errors of a [`SegmentQueue`](crate::SegmentQueue), each naming the file or
/// directory concerned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueueError {
    /// The configuration cannot work.
    #[error("invalid segment queue config: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// The directory could not be created or listed.
    #[error("cannot read segment directory {}: {source}", path.display())]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A file in the directory is not named by 20 digits.
    #[error("{} is not a segment file: its name must be 20 decimal digits (the start offset); move foreign files out of the directory", path.display())]
    MalformedName {
        /// The file.
        path: PathBuf,
    },
    /// A segment file has the wrong size.
    #[error("segment {} has {actual} bytes but the segment size is {expected}", path.display())]
    WrongSize {
        /// The file.
        path: PathBuf,
        /// The configured segment size.
        expected: u64,
        /// The file's size.
        actual: u64,
    },
    /// A segment's start offset is not a multiple of the segment size.
    #[error("segment {} starts at {offset}, which is not a multiple of the segment size {file_size}", path.display())]
    Misaligned {
        /// The file.
        path: PathBuf,
        /// Its start offset.
        offset: u64,
        /// The configured segment size.
        file_size: u64,
    },
    /// Segments are not consecutive: a file is missing before this one.
    #[error("segment {} starts at {found}, but the previous segment ends at {expected}: a segment is missing", path.display())]
    Gap {
        /// The file after the gap.
        path: PathBuf,
        /// Where it should have started.
        expected: u64,
        /// Where it starts.
        found: u64,
    },
    /// Two directories of the queue hold a segment with the same start offset.
    #[error("segments {} and {} both start at {offset}: one of them must go", path.display(), other.display())]
    Duplicate {
        /// The second file found (in directory order).
        path: PathBuf,
        /// The first.
        other: PathBuf,
        /// Their start offset.
        offset: u64,
    },
    /// The write-buffer pool is empty and the config says not to fall back.
    #[error("transient store pool exhausted ({pool_size} buffers borrowed) while creating segment at {offset}")]
    PoolExhausted {
        /// The pool's size.
        pool_size: usize,
        /// The segment being created.
        offset: u64,
    },
    /// The next segment was still being prepared by the preallocation thread when
    /// the roll-over's wait ran out. Nothing was written; a later roll takes it.
    #[error("segment {} is still being prepared after {waited_ms} ms; retry the append", path.display())]
    PreallocationTimedOut {
        /// The segment being prepared.
        path: PathBuf,
        /// How long the roll-over waited.
        waited_ms: u64,
    },
    /// A new segment would take the file system of every candidate directory to
    /// the queue's `disk_space_limit_percent`: it was not created, and nothing
    /// was written.
    #[error("disk under {} is {used_percent:.1} % full: a new segment of {segment_bytes} bytes would take it to the limit ({limit_percent} %), and no other segment directory has room; no segment is created until space is freed", dir.display())]
    DiskFull {
        /// The least used candidate directory.
        dir: PathBuf,
        /// Its used share now, in percent.
        used_percent: f64,
        /// The limit.
        limit_percent: u32,
        /// The size of the segment refused.
        segment_bytes: u64,
    },
    /// A new segment is larger than what the disk of every candidate directory
    /// can hold below the queue's `disk_space_limit_percent`, even empty: no
    /// segment of this size can ever be created there. Nothing was written.
    #[error("a segment of {segment_bytes} bytes does not fit the disk under {}: it holds {disk_bytes} bytes in all, and segments may take it to {limit_percent} %; make segments smaller", dir.display())]
    SegmentLargerThanDisk {
        /// The largest candidate directory's.
        dir: PathBuf,
        /// The size of the segment refused.
        segment_bytes: u64,
        /// The size of that directory's file system.
        disk_bytes: u64,
        /// The limit.
        limit_percent: u32,
    },
    /// An offset outside the stored range.
    #[error("offset {offset} is outside the stored range [{min}, {max})")]
    OffsetOutOfRange {
        /// The offset asked for.
        offset: u64,
        /// First stored offset.
        min: u64,
        /// End of stored data.
        max: u64,
    },
    /// The queue's front guard ([`SegmentQueue::set_front_guard`](crate::SegmentQueue::set_front_guard))
    /// could not record the new front: nothing was deleted.
    #[error("cannot record the queue's new front {front} before deleting the segments below it: {source}")]
    FrontNotRecorded {
        /// The front the deletion would have left.
        front: u64,
        /// What the guard reported.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An operation on one segment failed.
    #[error(transparent)]
    File(#[from] MappedFileError),
}
