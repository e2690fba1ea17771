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

/// How the preallocation thread prepares a new segment that is not made from a
/// spare (a spare's blocks were written in its earlier life and need nothing).
///
/// A new file is preallocated with `fallocate`: its blocks are allocated but
/// *unwritten*, and the first sync that covers each of them also has the file
/// system convert it, which costs a durable batch about a third of its rate on
/// ext4 (the repository's docs/benchmarks.md, its physical lines). Writing zeros
/// over the file and syncing them ahead of use moves that cost off the put path,
/// at the price of writing every segment twice (the zeros, then the records).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize), serde(rename_all = "snake_case"))]
pub enum SegmentPreparation {
    /// Allocated only (`fallocate`), as RocketMQ without warm-up.
    Allocated,
    /// Zeros written over the whole file and synced, paced (see
    /// [`QueueConfig::preparation_chunk_bytes`] and
    /// [`QueueConfig::preparation_bytes_per_sec`]), before roll-over takes it
    /// (the default).
    #[default]
    Written,
    /// [`Written`](Self::Written), and then the file's pages faulted into the
    /// page tables for reading (`MADV_POPULATE_READ`), so its first reads take no
    /// page fault.
    WrittenAndFaulted,
}

impl SegmentPreparation {
    /// True when new segments get their blocks written ahead of use.
    pub fn writes_blocks(self) -> bool {
        !matches!(self, SegmentPreparation::Allocated)
    }

    /// Checks a preparation step of `chunk_bytes` for segments of
    /// `segment_bytes`: when this preparation writes blocks, a positive
    /// multiple of 4096. A step larger than a segment prepares the segment in
    /// one step (so the default step suits small segments too). The error says why.
    pub fn check_chunk(self, chunk_bytes: usize, segment_bytes: usize) -> Result<(), String> {
        let chunk = chunk_bytes;
        if self.writes_blocks() && (chunk == 0 || !chunk.is_multiple_of(mapped_file::OS_PAGE_SIZE)) {
            return Err(format!(
                "preparation_chunk_bytes {chunk} must be a positive multiple of 4096 (segments of {segment_bytes} bytes)"
            ));
        }
        Ok(())
    }
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
    /// How the preallocation thread prepares a new segment
    /// ([`SegmentPreparation::Written`] by default), and
    /// [`SegmentQueue::prepare_active_segment`](crate::SegmentQueue::prepare_active_segment)
    /// a segment its owner made before any writer. Only with
    /// `preallocate_next_segment`; `warm_mapped_file_enable`, RocketMQ's
    /// unpaced warm-up of the whole file at once, takes precedence.
    pub segment_preparation: SegmentPreparation,
    /// Bytes of zeros written and synced per step of a segment's preparation
    /// (1 MiB by default; a multiple of 4096; a step larger than the segment
    /// is the whole segment). Between
    /// steps the preparer waits while a sync of the queue is in flight and for
    /// its bandwidth budget, and gives a half-prepared segment up to a roll-over
    /// that needs it: a step is the most preparation can hold up a durable batch
    /// or a roll-over.
    pub preparation_chunk_bytes: usize,
    /// The preparer's bandwidth budget in bytes per second (0: none; 256 MiB/s
    /// by default): zeros are written no faster than this, on average, from the
    /// start of each segment's preparation.
    pub preparation_bytes_per_sec: u64,
}

impl QueueConfig {
    /// The default segment size, 64 MiB (RocketMQ's brokers use 1 GiB:
    /// `mappedFileSizeCommitLog`; a library's first store should not take
    /// two fully allocated gigabytes; the repository's docs/operations.md has
    /// the measured trade-off).
    pub const DEFAULT_MAPPED_FILE_SIZE: usize = 64 << 20;

    /// The default step of a segment's preparation, 1 MiB.
    pub const DEFAULT_PREPARATION_CHUNK_BYTES: usize = 1 << 20;

    /// The default bandwidth budget of a segment's preparation, 256 MiB/s.
    pub const DEFAULT_PREPARATION_BYTES_PER_SEC: u64 = 256 << 20;

    /// Defaults with the given segment size: preallocation on, new segments
    /// prepared ([`SegmentPreparation::Written`]), warm-up off.
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
            segment_preparation: SegmentPreparation::Written,
            preparation_chunk_bytes: Self::DEFAULT_PREPARATION_CHUNK_BYTES,
            preparation_bytes_per_sec: Self::DEFAULT_PREPARATION_BYTES_PER_SEC,
        }
    }
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self::new(Self::DEFAULT_MAPPED_FILE_SIZE)
    }
}
