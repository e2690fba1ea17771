//! How a store or an engine is configured, and what it refuses.

use commitlog::{CommitLogConfig, FlushDiskType};

use crate::error::RaftStoreError;

/// Configuration of a [`RaftLogStore`](crate::RaftLogStore) or a [`RaftLogEngine`](crate::RaftLogEngine).
#[derive(Debug, Clone)]
pub struct RaftStoreConfig {
    /// The commit log's. It must flush synchronously (`SyncFlush`, waiting for
    /// durability), must not limit reads to durable records (openraft reads
    /// what it appended before the callback, to replicate it), and must not
    /// delete segments by itself: only openraft's `purge` may delete entries
    /// (a segment deleted for its age or for disk space would take entries no
    /// snapshot holds yet). So segments never expire (`file_reserved_time_ms`
    /// `u64::MAX`) and `clean_file_forcibly_enable` is off; the disk-space guard
    /// stays (appends fail with a storage error at `disk_space_warning_level_ratio`).
    pub log: CommitLogConfig,
    /// How the engine keeps its groups: checkpoints, the index's runs and
    /// rewrites.
    pub groups: GroupsConfig,
}

impl Default for RaftStoreConfig {
    /// 64 MiB log segments, 1 MiB bodies at most, no deletion but openraft's
    /// purge; the groups' defaults.
    fn default() -> Self {
        let log = CommitLogConfig {
            mapped_file_size_commit_log: 64 << 20,
            max_message_size: 1 << 20,
            flush_disk_type: FlushDiskType::SyncFlush,
            wait_store_msg_ok: true,
            read_limit_to_flushed: false,
            file_reserved_time_ms: u64::MAX,
            delete_when: String::new(),
            clean_file_forcibly_enable: false,
            ..CommitLogConfig::default()
        };
        RaftStoreConfig { log, groups: GroupsConfig::default() }
    }
}

impl RaftStoreConfig {
    pub(crate) fn validate(&self) -> Result<(), RaftStoreError> {
        let log = &self.log;
        if log.flush_disk_type != FlushDiskType::SyncFlush || !log.wait_store_msg_ok {
            return Err(RaftStoreError::InvalidConfig {
                reason: "the commit log must flush synchronously (sync_flush, wait_store_msg_ok)".into(),
            });
        }
        if log.read_limit_to_flushed {
            return Err(RaftStoreError::InvalidConfig {
                reason: "read_limit_to_flushed must be off: openraft reads entries before they are durable".into(),
            });
        }
        if log.file_reserved_time_ms != u64::MAX || log.clean_file_forcibly_enable {
            return Err(RaftStoreError::InvalidConfig {
                reason: format!(
                    "the commit log must not delete segments by itself, only openraft's purge may: \
                     file_reserved_time_ms must be u64::MAX (never expire; it is {}) and \
                     clean_file_forcibly_enable false (it is {})",
                    log.file_reserved_time_ms, log.clean_file_forcibly_enable
                ),
            });
        }
        if self.groups.checkpoint_interval_ms == 0 || self.groups.seal_entries == 0 {
            return Err(RaftStoreError::InvalidConfig {
                reason: "groups.checkpoint_interval_ms and groups.seal_entries must be positive".into(),
            });
        }
        Ok(())
    }
}

/// How a [`RaftLogEngine`](crate::RaftLogEngine) keeps its groups.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GroupsConfig {
    /// How often the maintenance thread checkpoints (seals the queue index
    /// at the log's last durable segment boundary and writes the state file
    /// if a group's state changed: what recovery replays from), then
    /// reclaims log segments. A group's committed id is written at most this
    /// long after it changed.
    pub checkpoint_interval_ms: u64,
    /// Index entries held in memory (the active run) before a checkpoint
    /// seals them even inside a log segment: what bounds the index's memory
    /// when records are small. 1,048,576 (about 32 MiB).
    pub seal_entries: usize,
    /// A group whose oldest live entry is this many bytes or more behind the
    /// log's end, and in a segment that could otherwise go, has its live entries
    /// rewritten at the log's end. Every byte of a group is rewritten at most
    /// once per this many bytes of log written, so the cost is bounded by the
    /// lagging groups' live bytes over this lag. `u64::MAX`: never rewrite (a
    /// lagging group then keeps every segment from its oldest live entry on).
    pub rewrite_lag_bytes: u64,
}

impl Default for GroupsConfig {
    /// A checkpoint every second; a run at most every 1,048,576 entries;
    /// groups lagging four segments of the default log (256 MiB) are
    /// rewritten.
    fn default() -> Self {
        GroupsConfig { checkpoint_interval_ms: 1000, seal_entries: 1 << 20, rewrite_lag_bytes: 256 << 20 }
    }
}
