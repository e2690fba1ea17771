//! Configuration, with RocketMQ's knob names in snake_case and its defaults.

use std::path::PathBuf;

use flush_service::FlushConfig;
use segment_queue::{QueueConfig, SegmentPreparation};

use crate::format::HEADER_SIZE;
use crate::Error;

/// Most write buffers a pool may have (RocketMQ's default is 5).
pub const MAX_POOL_BUFFERS: usize = 1024;

/// When an append is acknowledged (RocketMQ's `flushDiskType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize), serde(rename_all = "snake_case"))]
pub enum FlushDiskType {
    /// `SYNC_FLUSH`: an append's durability handle resolves once its bytes are
    /// durable (group commit). Nothing acknowledged is lost in a crash.
    SyncFlush,
    /// `ASYNC_FLUSH` (RocketMQ's default): acknowledged at once; a background
    /// service flushes every `flush_interval_commit_log_ms`. A crash may lose what
    /// was appended since the last flush.
    #[default]
    AsyncFlush,
}

/// Configuration of a [`CommitLog`](crate::CommitLog). Build one with
/// [`CommitLogConfig::builder`] or start from `Default` (RocketMQ's defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize), serde(default, deny_unknown_fields))]
pub struct CommitLogConfig {
    /// Segment size of a new store (`mappedFileSizeCommitLog`), a multiple of
    /// 4096: 64 MiB by default (RocketMQ's brokers use 1 GiB; the trade-off,
    /// measured, is in the repository's docs/operations.md). An existing store keeps the size of its
    /// segments: [`CommitLog::open`](crate::CommitLog::open) adopts it.
    pub mapped_file_size_commit_log: usize,
    /// Directories to keep segments in (`storePathCommitLog`; RocketMQ separates
    /// them with `;`), for a log spread over several disks: new segments go
    /// round-robin over them by segment index, skipping read-only ones and ones
    /// more than `disk_space_clean_forcibly_ratio` full (all, if every one is).
    /// Absolute, disjoint, outside the store directory's own files. Empty (the
    /// default): `<dir>/commitlog`. The store records its directories and refuses
    /// to open without one that holds segments ([`Error::SegmentDirNotConfigured`]).
    pub store_path_commit_log: Vec<PathBuf>,
    /// Segment directories whose segments are kept, read and deleted, but that
    /// get no new segment (`readOnlyCommitLogStorePaths`, empty): a disk being
    /// retired. They may also appear in `store_path_commit_log`.
    pub read_only_commit_log_store_paths: Vec<PathBuf>,
    /// Sync or async flush (`flushDiskType`, async).
    pub flush_disk_type: FlushDiskType,
    /// Under sync flush, make appends wait for durability (`waitStoreMsgOK`, true).
    /// False: appends are acknowledged at once and only wake the flusher.
    pub wait_store_msg_ok: bool,
    /// Append into off-heap write buffers committed in the background
    /// (`transientStorePoolEnable`, false).
    pub transient_store_pool_enable: bool,
    /// Number of write buffers (`transientStorePoolSize`, 5).
    pub transient_store_pool_size: usize,
    /// Largest record body in bytes (`maxMessageSize`, 4 MiB). Larger appends are
    /// rejected with [`Error::RecordTooLarge`] and nothing is written.
    pub max_message_size: usize,
    /// Prepare the next segment in the background (`AllocateMappedFileService`, true).
    pub preallocate_next_segment: bool,
    /// Zero-fill, sync and advise new segments before use (`warmMapedFileEnable`, false).
    pub warm_mapped_file_enable: bool,
    /// How new segments are prepared when no spare is there for them
    /// ([`SegmentPreparation::Written`] by default: their blocks are written
    /// with zeros and synced before records go in, so durable batches sync
    /// written blocks instead of unwritten extents, which the file system must
    /// convert at each sync). The first segment of a new log (or of one whose
    /// segments were all deleted) is prepared by the open itself, whole and
    /// unpaced (about 50 ms for 64 MiB on an SSD-backed VM); later ones by the
    /// preallocation thread, paced, while the log's syncs pause. Every new
    /// segment is then written twice (its zeros, then its records).
    /// [`SegmentPreparation::Allocated`] (`fallocate` only, as RocketMQ) is the
    /// behaviour before, one setting away. The repository's docs/benchmarks.md
    /// has the measured trade-off.
    pub segment_preparation: SegmentPreparation,
    /// Bytes written and synced per step of a segment's preparation (1 MiB): the
    /// most preparation can hold up a durable batch or a roll-over.
    pub preparation_chunk_bytes: usize,
    /// The preparation's bandwidth budget, bytes per second (256 MiB/s; 0: none).
    pub preparation_bytes_per_sec: u64,
    /// Write segments with `pwrite` and sync them with `fdatasync`, mapping them
    /// read-only for readers (`writeWithoutMmap`, true here; false in RocketMQ),
    /// instead of copying into a read-write mapping synced with `msync`. The file
    /// format is the same, so a store may switch between restarts. The default
    /// follows the repository's docs/benchmarks.md: faster on every workload
    /// measured.
    pub write_without_mmap: bool,
    /// Concurrent [`append`](crate::CommitLog::append)s share writes (true):
    /// an append that finds another one writing waits, and the writing one
    /// then appends every waiting producer's record in one write, each with
    /// its own durability request (RocksDB's write group, raft-engine's
    /// write barrier). A lone producer writes at once, as without. False:
    /// each append takes the put lock and writes its own record.
    pub append_write_groups: bool,
    /// Under sync flush, readers see only durable records (RocketMQ
    /// [#8239](https://github.com/apache/rocketmq/issues/8239): consumers must not see what a crash
    /// can take back). Ignored under async flush.
    pub read_limit_to_flushed: bool,
    /// How often the checkpoint file is rewritten when the flushed offset moved
    /// (RocketMQ: every 1000 ms, and at shutdown).
    pub checkpoint_interval_ms: u64,
    /// How long segments are kept (`fileReservedTime`, 72 h), for
    /// [`CommitLog::delete_expired_segments`](crate::CommitLog::delete_expired_segments)
    /// and the cleaning service. `u64::MAX`: segments never expire.
    pub file_reserved_time_ms: u64,
    /// How many expired segments to keep as spare files for new segments instead
    /// of deleting them (0, as RocketMQ: delete). A segment made from a spare has
    /// its blocks written already, so durable batches sync at the rate of written
    /// blocks rather than of fresh preallocated ones (the repository's docs/benchmarks.md). Spares
    /// take disk space like segments; their old bytes are never read back (every
    /// record's CRC covers its own offset).
    pub recycle_segments: usize,
    /// Used share of the disk, in percent, at which appends are refused with
    /// [`Error::DiskFull`] until it falls below again (`diskSpaceWarningLevelRatio`,
    /// 90). Reads, flushes and segment deletion go on.
    pub disk_space_warning_level_ratio: u32,
    /// How often the cleaning service runs: it looks at the disk's used share
    /// (appends check a flag, never the disk) and deletes old segments
    /// (`cleanResourceInterval`, 10,000 ms).
    pub clean_resource_interval_ms: u64,
    /// Hours of the day, UTC, `;`-separated, at which segments older than
    /// `file_reserved_time_ms` are deleted (`deleteWhen`, `"04"`; RocketMQ reads
    /// them in local time). An empty string: never by the clock.
    pub delete_when: String,
    /// Used share of the disk, in percent, above which expired segments are
    /// deleted at any hour, and none is kept as a spare (`diskMaxUsedSpaceRatio`, 75).
    pub disk_max_used_space_ratio: u32,
    /// Used share, in percent, above which the oldest segments are deleted even
    /// if they have not expired, when `clean_file_forcibly_enable`: only as many
    /// as bring the used share back to it (`diskSpaceCleanForciblyRatio`, 85).
    pub disk_space_clean_forcibly_ratio: u32,
    /// Delete unexpired segments when space runs short (`cleanFileForciblyEnable`, true).
    pub clean_file_forcibly_enable: bool,
    /// Most segments deleted per run of the cleaning service (`deleteFileBatchMax`, 10).
    pub delete_file_batch_max: usize,
    /// The flush services' knobs.
    pub flush: FlushConfig,
}

impl Default for CommitLogConfig {
    fn default() -> Self {
        CommitLogConfig {
            mapped_file_size_commit_log: Self::DEFAULT_SEGMENT_SIZE,
            store_path_commit_log: Vec::new(),
            read_only_commit_log_store_paths: Vec::new(),
            flush_disk_type: FlushDiskType::AsyncFlush,
            wait_store_msg_ok: true,
            transient_store_pool_enable: false,
            transient_store_pool_size: 5,
            max_message_size: 4 << 20,
            preallocate_next_segment: true,
            warm_mapped_file_enable: false,
            segment_preparation: SegmentPreparation::Written,
            preparation_chunk_bytes: QueueConfig::DEFAULT_PREPARATION_CHUNK_BYTES,
            preparation_bytes_per_sec: QueueConfig::DEFAULT_PREPARATION_BYTES_PER_SEC,
            write_without_mmap: true,
            append_write_groups: true,
            read_limit_to_flushed: true,
            checkpoint_interval_ms: 1000,
            file_reserved_time_ms: 72 * 3600 * 1000,
            recycle_segments: 0,
            disk_space_warning_level_ratio: 90,
            clean_resource_interval_ms: 10_000,
            delete_when: "04".into(),
            disk_max_used_space_ratio: 75,
            disk_space_clean_forcibly_ratio: 85,
            clean_file_forcibly_enable: true,
            delete_file_batch_max: 10,
            flush: FlushConfig::default(),
        }
    }
}

impl CommitLogConfig {
    /// The default segment size of a new store, 64 MiB
    /// ([`segment_queue::QueueConfig::DEFAULT_MAPPED_FILE_SIZE`]).
    pub const DEFAULT_SEGMENT_SIZE: usize = segment_queue::QueueConfig::DEFAULT_MAPPED_FILE_SIZE;

    /// A builder starting from the defaults.
    pub fn builder() -> CommitLogConfigBuilder {
        CommitLogConfigBuilder { config: CommitLogConfig::default(), max_message_size_set: false }
    }

    /// Checks the configuration; [`CommitLog::open`](crate::CommitLog::open) calls it.
    pub fn validate(&self) -> Result<(), Error> {
        let invalid = |reason: String| Err(Error::InvalidConfig { reason });
        let size = self.mapped_file_size_commit_log;
        if size == 0 || !size.is_multiple_of(4096) {
            return invalid(format!("mapped_file_size_commit_log {size} must be a positive multiple of 4096"));
        }
        if u32::try_from(size).is_err() {
            return invalid(format!("mapped_file_size_commit_log {size} must be below 4 GiB (record sizes are u32)"));
        }
        if self.max_message_size == 0 {
            return invalid("max_message_size must be positive".into());
        }
        if self.max_message_size.checked_add(2 * HEADER_SIZE).is_none_or(|needed| needed > size) {
            return invalid(format!(
                "max_message_size {} plus two {HEADER_SIZE}-byte headers must fit in a segment of {size} bytes",
                self.max_message_size
            ));
        }
        if self.transient_store_pool_enable {
            let buffers = self.transient_store_pool_size;
            if buffers == 0 || buffers > MAX_POOL_BUFFERS {
                return invalid(format!(
                    "transient_store_pool_size {buffers} must be between 1 and {MAX_POOL_BUFFERS} when the pool is enabled"
                ));
            }
            if buffers.checked_mul(size).is_none_or(|bytes| isize::try_from(bytes).is_err()) {
                return invalid(format!("{buffers} write buffers of {size} bytes do not fit in the address space"));
            }
        }
        if let Err(reason) = self.segment_preparation.check_chunk(self.preparation_chunk_bytes, size) {
            return invalid(reason);
        }
        if self.checkpoint_interval_ms == 0 {
            return invalid("checkpoint_interval_ms must be positive".into());
        }
        if !(1..=100).contains(&self.disk_space_warning_level_ratio) {
            return invalid(format!(
                "disk_space_warning_level_ratio {} must be a percentage from 1 to 100",
                self.disk_space_warning_level_ratio
            ));
        }
        if self.clean_resource_interval_ms == 0 {
            return invalid("clean_resource_interval_ms must be positive".into());
        }
        if let Err(reason) = parse_delete_when(&self.delete_when) {
            return invalid(reason);
        }
        for (name, percent) in [
            ("disk_max_used_space_ratio", self.disk_max_used_space_ratio),
            ("disk_space_clean_forcibly_ratio", self.disk_space_clean_forcibly_ratio),
        ] {
            if !(1..=100).contains(&percent) {
                return invalid(format!("{name} {percent} must be a percentage from 1 to 100"));
            }
        }
        if self.delete_file_batch_max == 0 {
            return invalid("delete_file_batch_max must be positive".into());
        }
        let paths: Vec<&PathBuf> =
            self.store_path_commit_log.iter().chain(&self.read_only_commit_log_store_paths).collect();
        for path in &paths {
            if !path.is_absolute() || path.to_str().is_none_or(|p| p.contains('\n')) {
                return invalid(format!("segment directory {path:?} must be an absolute path (UTF-8, no line break)"));
            }
        }
        if let Some((a, b)) = store_io::first_overlap(&self.store_path_commit_log) {
            return invalid(format!("store_path_commit_log {} and {} overlap", a.display(), b.display()));
        }
        if !self.store_path_commit_log.is_empty()
            && self.store_path_commit_log.iter().all(|p| self.read_only_commit_log_store_paths.contains(p))
        {
            return invalid(
                "every store_path_commit_log directory is read-only: new segments have nowhere to go".into(),
            );
        }
        Ok(())
    }

    /// True when appends wait for durability.
    pub fn acknowledges_after_flush(&self) -> bool {
        self.flush_disk_type == FlushDiskType::SyncFlush && self.wait_store_msg_ok
    }
}

/// Builds a [`CommitLogConfig`]; [`build`](Self::build) validates it.
///
/// Unless [`max_message_size`](Self::max_message_size) is set, it follows the
/// segment size: the smaller of 4 MiB and a quarter of a segment (so a
/// builder given only 1 MiB segments builds, with 256 KiB records at most).
#[derive(Debug, Clone)]
pub struct CommitLogConfigBuilder {
    config: CommitLogConfig,
    max_message_size_set: bool,
}

impl CommitLogConfigBuilder {
    /// Segment size in bytes.
    pub fn mapped_file_size_commit_log(mut self, bytes: usize) -> Self {
        self.config.mapped_file_size_commit_log = bytes;
        self
    }
    /// Sync or async flush.
    pub fn flush_disk_type(mut self, flush_disk_type: FlushDiskType) -> Self {
        self.config.flush_disk_type = flush_disk_type;
        self
    }
    /// Whether sync-flush appends wait for durability.
    pub fn wait_store_msg_ok(mut self, wait: bool) -> Self {
        self.config.wait_store_msg_ok = wait;
        self
    }
    /// Enables the write-buffer pool with `size` buffers.
    pub fn transient_store_pool(mut self, enable: bool, size: usize) -> Self {
        self.config.transient_store_pool_enable = enable;
        self.config.transient_store_pool_size = size;
        self
    }
    /// Largest record body (default: the smaller of 4 MiB and a quarter of
    /// the segment size).
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.config.max_message_size = bytes;
        self.max_message_size_set = true;
        self
    }
    /// Segment directories (`store_path_commit_log`) and the read-only ones
    /// among or beside them (`read_only_commit_log_store_paths`).
    pub fn store_path_commit_log(
        mut self,
        paths: impl IntoIterator<Item = impl Into<PathBuf>>,
        read_only: impl IntoIterator<Item = impl Into<PathBuf>>,
    ) -> Self {
        self.config.store_path_commit_log = paths.into_iter().map(Into::into).collect();
        self.config.read_only_commit_log_store_paths = read_only.into_iter().map(Into::into).collect();
        self
    }
    /// Background preallocation of the next segment.
    pub fn preallocate_next_segment(mut self, enable: bool) -> Self {
        self.config.preallocate_next_segment = enable;
        self
    }
    /// Whether concurrent appends share writes (`append_write_groups`).
    pub fn append_write_groups(mut self, enable: bool) -> Self {
        self.config.append_write_groups = enable;
        self
    }

    /// Warm-up of new segments.
    pub fn warm_mapped_file_enable(mut self, enable: bool) -> Self {
        self.config.warm_mapped_file_enable = enable;
        self
    }

    /// How new segments are prepared (`segment_preparation`), in steps of
    /// `chunk_bytes` at most `bytes_per_sec` (0: no budget).
    pub fn segment_preparation(mut self, how: SegmentPreparation, chunk_bytes: usize, bytes_per_sec: u64) -> Self {
        self.config.segment_preparation = how;
        self.config.preparation_chunk_bytes = chunk_bytes;
        self.config.preparation_bytes_per_sec = bytes_per_sec;
        self
    }

    /// Sets `disk_space_warning_level_ratio` (percent).
    pub fn disk_space_warning_level_ratio(mut self, percent: u32) -> Self {
        self.config.disk_space_warning_level_ratio = percent;
        self
    }

    /// Sets `clean_resource_interval_ms`.
    pub fn clean_resource_interval_ms(mut self, ms: u64) -> Self {
        self.config.clean_resource_interval_ms = ms;
        self
    }

    /// Sets `delete_when` (hours of the day, UTC, `;`-separated).
    pub fn delete_when(mut self, hours: &str) -> Self {
        self.config.delete_when = hours.into();
        self
    }

    /// Sets `disk_max_used_space_ratio` and `disk_space_clean_forcibly_ratio`
    /// (percent), and whether forcible cleaning is on.
    pub fn cleaning_ratios(mut self, max_used: u32, forcibly: u32, forcibly_enable: bool) -> Self {
        self.config.disk_max_used_space_ratio = max_used;
        self.config.disk_space_clean_forcibly_ratio = forcibly;
        self.config.clean_file_forcibly_enable = forcibly_enable;
        self
    }

    /// Sets `delete_file_batch_max`.
    pub fn delete_file_batch_max(mut self, segments: usize) -> Self {
        self.config.delete_file_batch_max = segments;
        self
    }

    /// Sets `recycle_segments`.
    pub fn recycle_segments(mut self, spares: usize) -> Self {
        self.config.recycle_segments = spares;
        self
    }

    /// Sets `write_without_mmap`.
    pub fn write_without_mmap(mut self, enable: bool) -> Self {
        self.config.write_without_mmap = enable;
        self
    }
    /// Readers limited to durable records under sync flush.
    pub fn read_limit_to_flushed(mut self, limit: bool) -> Self {
        self.config.read_limit_to_flushed = limit;
        self
    }
    /// Checkpoint rewrite interval.
    pub fn checkpoint_interval_ms(mut self, ms: u64) -> Self {
        self.config.checkpoint_interval_ms = ms;
        self
    }
    /// Retention of segments.
    pub fn file_reserved_time_ms(mut self, ms: u64) -> Self {
        self.config.file_reserved_time_ms = ms;
        self
    }
    /// The flush services' knobs.
    pub fn flush(mut self, flush: FlushConfig) -> Self {
        self.config.flush = flush;
        self
    }
    /// Validates and returns the configuration.
    pub fn build(mut self) -> Result<CommitLogConfig, Error> {
        if !self.max_message_size_set {
            let default = CommitLogConfig::default().max_message_size;
            self.config.max_message_size = default.min(self.config.mapped_file_size_commit_log / 4).max(1);
        }
        self.config.validate()?;
        Ok(self.config)
    }
}

/// Parses `delete_when` (RocketMQ's format: hours of the day, `;`-separated,
/// e.g. `"04"` or `"01;13"`).
pub(crate) fn parse_delete_when(when: &str) -> Result<[bool; 24], String> {
    let mut hours = [false; 24];
    for part in when.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        match part.parse::<usize>() {
            Ok(hour) if hour < 24 => hours[hour] = true,
            _ => return Err(format!("delete_when {when:?}: {part:?} is not an hour from 0 to 23")),
        }
    }
    Ok(hours)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extreme_values_are_invalid_config_not_panics() {
        let max_message = CommitLogConfig::builder().max_message_size(usize::MAX).build();
        assert!(matches!(max_message, Err(Error::InvalidConfig { .. })), "{max_message:?}");
        let near = CommitLogConfig::builder().max_message_size(usize::MAX - HEADER_SIZE).build();
        assert!(matches!(near, Err(Error::InvalidConfig { .. })));
        let size = CommitLogConfig::builder().mapped_file_size_commit_log(usize::MAX).build();
        assert!(matches!(size, Err(Error::InvalidConfig { .. })));
        let pool = CommitLogConfig::builder().transient_store_pool(true, usize::MAX).build();
        assert!(matches!(pool, Err(Error::InvalidConfig { .. })));
        let ok =
            CommitLogConfig::builder().mapped_file_size_commit_log(1 << 20).max_message_size((1 << 20) - 64).build();
        assert!(ok.is_ok(), "the largest body that fits with two headers is valid");
    }

    #[test]
    fn an_unset_max_message_size_follows_the_segment_size() {
        let small =
            CommitLogConfig::builder().mapped_file_size_commit_log(1 << 20).build().expect("1 MiB segments build");
        assert_eq!(small.max_message_size, 256 << 10, "a quarter of the segment");
        let large = CommitLogConfig::builder().mapped_file_size_commit_log(1 << 30).build().unwrap();
        assert_eq!(large.max_message_size, 4 << 20, "RocketMQ's 4 MiB where it fits");
        let either_order =
            CommitLogConfig::builder().max_message_size(1000).mapped_file_size_commit_log(1 << 20).build().unwrap();
        assert_eq!(either_order.max_message_size, 1000, "a size set explicitly stays");
        let too_large =
            CommitLogConfig::builder().mapped_file_size_commit_log(1 << 20).max_message_size(4 << 20).build();
        assert!(matches!(too_large, Err(Error::InvalidConfig { .. })), "and is still checked");
    }
}
