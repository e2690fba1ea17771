//! How a queue is set up: its directories and its knobs.

use std::path::PathBuf;

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
    /// Fail the roll-over with [`QueueError::PoolExhausted`](crate::QueueError::PoolExhausted) (RocketMQ's
    /// "system busy" rejection).
    Fail,
}

/// Configuration of a [`SegmentQueue`](crate::SegmentQueue).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    /// Size of every segment (`mappedFileSizeCommitLog`; 64 MiB by default,
    /// RocketMQ's brokers 1 GiB).
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
    /// fails with [`QueueError::PreallocationTimedOut`](crate::QueueError::PreallocationTimedOut); a later one takes the
    /// segment once it is ready.
    pub preallocation_wait_ms: u64,
    /// How many expired segments to keep as spares for reuse instead of deleting
    /// them (0, the default, as RocketMQ: delete). A segment made from a spare
    /// has its blocks written already, so its syncs are those of written blocks;
    /// see [`RECYCLE_DIR`](crate::RECYCLE_DIR). Spares count against the disk like segments.
    pub recycle_segments: usize,
    /// A new segment (not one made from a spare, which takes no new space) is
    /// created only while the file system's used share, counting the new
    /// segment, stays below this percent: in the directory the placement rule
    /// names, or else in another writable directory that has room; if none has,
    /// the roll fails with [`QueueError::DiskFull`](crate::QueueError::DiskFull) and nothing is created,
    /// before the file system runs out of space. Looked at with one `statvfs` per new segment, by the
    /// roll-over and by the preallocation thread. `None` (the default): no
    /// look. A storage that cannot tell its disk space never refuses.
    pub disk_space_limit_percent: Option<u32>,
}

impl QueueConfig {
    /// The default segment size, 64 MiB (RocketMQ's brokers use 1 GiB:
    /// `mappedFileSizeCommitLog`; a library's first store should not take
    /// two fully allocated gigabytes; the repository's docs/operations.md has
    /// the measured trade-off).
    pub const DEFAULT_MAPPED_FILE_SIZE: usize = 64 << 20;

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
